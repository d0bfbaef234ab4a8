"""The prefetch intrinsic: emitted as a real prefetch, never changes a value, any layout."""

import platform

import numpy as np
import pytest
from numba import njit

from ooc.kernels.prefetch import prefetch, prefetch_rows


@njit(cache=True)
def _sum_prefetched(a, ahead):
    total = 0.0
    for i in range(a.shape[0]):
        prefetch(a, min(i + ahead, a.shape[0] - 1))
        total += a[i]
    return total


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_prefetch_reads_nothing_and_changes_nothing(dtype):
    a = np.arange(1000).astype(dtype)
    before = a.copy()
    assert _sum_prefetched(a, 7) == float(before.sum())
    assert np.array_equal(a, before)
    strided = np.arange(3000).astype(dtype)[::3]  # non-contiguous: the pointer must use the stride
    assert _sum_prefetched(strided, 5) == float(strided.sum())


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 instruction name")
def test_prefetch_is_an_instruction():
    _sum_prefetched(np.ones(4), 1)
    asm = next(iter(_sum_prefetched.inspect_asm().values()))
    assert "prefetcht0" in asm


def test_prefetch_rows_at_the_ends():
    # every distance past the end of the order, empty rows, empty alpha and snapshot: no effect
    indptr = np.array([0, 2, 2, 5], dtype=np.int64)
    indices = np.array([0, 3, 1, 2, 3], dtype=np.int32)
    data = np.ones(5, dtype=np.float32)
    order = np.array([2, 1, 0], dtype=np.int64)
    y, c, w = np.ones(3), np.ones(3), np.zeros(4)
    for t in range(3):
        prefetch_rows(order, t, indptr, indices, data, np.empty(0), y, c, w, w[:0])
        prefetch_rows(order[:0], t, indptr, indices, data, y, y, c, w, w)
    assert not w.any()
