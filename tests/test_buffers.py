"""BufferPool: reuse only arrays nothing refers to; training with it is bit-identical (test_out_of_core)."""

import numpy as np

from ooc.schedule.buffers import BufferPool


def test_reuses_only_unreferenced_arrays():
    p = BufferPool(per_dtype=2)
    a = p.take(100, np.float64)
    a[:] = 1.0
    b = p.take(100, np.float64)
    assert not np.shares_memory(a, b) and p.allocated == 2
    view = a[10:20]
    del a
    c = p.take(100, np.float64)  # a's buffer still has a view alive: not handed out again
    assert not np.shares_memory(c, view) and not np.shares_memory(c, b)
    assert p.reused == 0
    del view
    d = p.take(60, np.float64)  # now it is free
    assert p.reused == 1 and d.shape == (60,) and d.flags.c_contiguous
    e = p.take(10, np.int32)  # dtypes are pooled apart
    assert e.dtype == np.int32


def test_grows_when_free_arrays_are_too_small():
    p = BufferPool(per_dtype=1)
    a = p.take(10, np.int64)
    del a
    big = p.take(1000, np.int64)  # the free one is too small: replaced
    assert big.shape == (1000,) and p.allocated == 2
    del big
    again = p.take(500, np.int64)
    assert p.reused == 1 and again.base is not None and again.base.size == 1000 + 1000 // 32  # with its room


def test_replaces_a_free_array_of_another_size_when_full():
    p = BufferPool(per_dtype=2)
    a, b = p.take(194, np.float64), p.take(197, np.float64)
    del a
    c = p.take(300, np.float64)  # one free (too small), the pool full: the free one is replaced
    assert c.shape == (300,) and not np.shares_memory(b, c)


def test_free_arrays_too_small_are_not_kept_beside_a_new_one():
    """Groups of varying sizes: the pool never holds a free array too small for the request beside the
    new one it allocates (each would stay committed, beyond what the memory plan counts)."""
    p = BufferPool(per_dtype=3)
    held = [p.take(100, np.float64), p.take(90, np.float64)]
    held.pop(1)  # the 90 is free
    c = p.take(120, np.float64)  # too big for it: it goes, the new one is kept
    assert len(p._bufs[np.dtype(np.float64)]) == 2
    assert all(b.size >= 100 for b in p._bufs[np.dtype(np.float64)]) and c.size == 120
