"""The read path of a cold pass: chunk files read directly, groups decoded into one buffer, reader counters.

* :mod:`ooc.store.chunk_files` returns exactly what Zarr returns, for any range (inside a
  chunk, across chunks, whole chunks, chunks that have no file), buffered or ``O_DIRECT``;
* :mod:`ooc.store.chunk_writer` writes the files Zarr writes, byte for byte, and only for
  writes of whole shards;
* ``Store.read_group`` is the concatenation of the blocks, in every backend;
* ``BlockLoopSolver.load_group`` gives the same merged block whichever of its blocks are
  cached, and the history's reader fields add up.
"""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest
import scipy.sparse as sp

import ooc
from ooc.schedule.cache import BlockCache
from ooc.schedule.scheduler import Prefetcher
from ooc.solvers.base import TrainBlock, load_train_block
from ooc.store import layout as L
from ooc.store.backend import StoreCorruptError
from ooc.store.chunk_files import ChunkFileError, DirectArray, direct_reader
from ooc.store.zarr_backend import ZarrBackend

#: a sample that does not compress: the backend stores the array uncompressed (Blosc level 0)
_NOISE = np.random.default_rng(0).random(1 << 14)


def _zarr_array(path, dtype, n, chunk_len, values, stored=False):
    """An array as the Zarr backend creates them, written as ooc wrote before it wrote every chunk
    (Zarr's default: no file for a chunk of fill values, an inner chunk of them marked empty)."""
    be = ZarrBackend.create(path)
    be.create_array("x", dtype, chunk_len, n, sample=_NOISE if stored else None)
    be._array("x").with_config({"write_empty_chunks": False})[:] = values
    be.close()
    return ZarrBackend.open(path)


def _unsharded_zarr_array(path, dtype, n, chunk_len, values, stored=False):
    """An array as ooc wrote them before sharding: one Blosc + crc32c chunk per file."""
    import zarr

    from ooc.store.zarr_backend import _COMPRESSORS, _STORED

    g = zarr.open_group(path, mode="w-", zarr_format=3)
    a = g.create_array("x", shape=(n,), chunks=(chunk_len,), dtype=dtype, compressors=_STORED if stored else _COMPRESSORS,
                       fill_value=0)
    a[:] = values
    return ZarrBackend.open(path)


@pytest.mark.parametrize("stored", [False, True], ids=["compressed", "stored"])
@pytest.mark.parametrize("sharded", [True, False])
@pytest.mark.parametrize("direct_io", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "int64"])
def test_direct_reads_equal_zarr(tmp_path, dtype, direct_io, sharded, stored):
    rng = np.random.default_rng(3)
    n, cl = 1000, 96
    vals = (rng.standard_normal(n) * 1000).astype(dtype)
    vals[cl * 2:cl * 3] = 0  # a chunk of fill values: Zarr writes no file for it
    il = L.inner_chunk_len(cl)
    assert il == 24
    vals[cl * 5 + il:cl * 5 + 2 * il] = 0  # an inner chunk of fill values: empty in its shard's index
    make = _zarr_array if sharded else _unsharded_zarr_array
    be = make(str(tmp_path / "a.zarr"), dtype, n, cl, vals, stored)
    z = be._array("x")
    blosc = next(c for c in (z.metadata.codecs[0].codecs if sharded else z.metadata.codecs)
                 if type(c).__name__ == "BloscCodec")
    assert blosc.clevel == (0 if stored else 5)
    fast = direct_reader(z, direct_io)
    assert isinstance(fast, DirectArray)
    assert fast.chunk_len == cl and fast.inner_len == (il if sharded else None)
    assert be.chunk_len("x") == cl
    assert not os.path.exists(os.path.join(fast.root, fast.chunk_key(2)))
    ranges = [(0, n), (0, 1), (n - 1, n), (5, 90), (90, 200), (cl, 2 * cl), (2 * cl + 3, 3 * cl + 5), (0, cl),
              (5 * cl + il - 1, 5 * cl + 2 * il + 1), (5 * cl + il, 5 * cl + 2 * il)]
    ranges += [tuple(sorted(rng.integers(0, n + 1, 2))) for _ in range(30)]
    for s, e in ranges:
        if e <= s:
            continue
        want = z[s:e]
        got = fast.read(s, e)
        assert got.dtype == want.dtype and np.array_equal(got, want), (s, e)
        assert np.array_equal(be.read("x", s, e), want)
    assert fast.file_bytes > 0
    # into slices of one buffer, in parallel
    out = np.full(300, 7, dtype=dtype)
    be.read_many([("x", 10, 110, out[:100]), ("x", 500, 700, out[100:])])
    assert np.array_equal(out, np.concatenate([vals[10:110], vals[500:700]]))
    # a store that records every chunk written: the same holes are damage
    strict = direct_reader(z, direct_io, every_chunk=True)
    with pytest.raises(ChunkFileError, match="missing"):
        strict.read(2 * cl, 2 * cl + 1)
    if sharded:
        with pytest.raises(ChunkFileError, match="inner chunk 1 .* marked empty"):
            strict.read(5 * cl + il, 5 * cl + il + 1)
    assert np.array_equal(strict.read(0, 2 * cl), vals[:2 * cl])
    be.close()


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no O_DIRECT here")
def test_a_file_system_that_refuses_o_direct_reads_falls_back_to_buffered(tmp_path, monkeypatch):
    import errno
    import fcntl

    n, cl = 4096, 1024
    vals = np.random.default_rng(4).standard_normal(n)
    be = _zarr_array(str(tmp_path / "a.zarr"), "float64", n, cl, vals)
    fast = direct_reader(be._array("x"), direct_io=True)
    assert fast.direct_io
    real = os.preadv
    refused = []

    def preadv(fd, buffers, offset):  # what a file system that opens O_DIRECT but refuses its reads does
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(fd)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", preadv)
    assert np.array_equal(fast.read(100, 3000), vals[100:3000])
    assert refused and not fast.direct_io  # refused once, then buffered from the start
    refused.clear()
    assert np.array_equal(fast.read(0, n), vals)
    assert not refused


def test_a_sharded_read_takes_only_the_inner_chunks_it_needs(tmp_path):
    n, cl = 1 << 16, 1 << 14
    il = L.inner_chunk_len(cl)
    assert il == cl // L.INNER_CHUNKS
    vals = np.random.default_rng(0).standard_normal(n)  # barely compressible: file bytes ~ decoded bytes
    be = _zarr_array(str(tmp_path / "a.zarr"), "float64", n, cl, vals)
    fast = direct_reader(be._array("x"))
    shard_file = os.path.getsize(os.path.join(fast.root, fast.chunk_key(1)))
    before = fast.file_bytes
    # a range over two inner chunks that straddles a shard boundary: two small reads and two indexes
    assert np.array_equal(fast.read(2 * cl - 10, 2 * cl + 10), vals[2 * cl - 10:2 * cl + 10])
    small = fast.file_bytes - before
    assert small < 2 * (il * 8 + 2 * 4096) + 2 * (16 * L.INNER_CHUNKS + 4096)
    assert small < shard_file / 4
    # with the shard indexes cached, a whole shard reads about its own size (each job's span
    # rounded out to whole pages)
    before = fast.file_bytes
    fast.read(cl, 2 * cl)
    jobs = L.INNER_CHUNKS // DirectArray.INNER_PER_JOB
    assert shard_file - 16 * L.INNER_CHUNKS - 4 <= fast.file_bytes - before <= shard_file + jobs * 2 * 4096


def test_writes_after_reads_are_seen(tmp_path):
    """A shard rewritten after its index was cached is read with its new index."""
    cl = 256
    be = ZarrBackend.create(str(tmp_path / "w.zarr"))
    be.create_array("x", "float64", cl, 2 * cl)
    be.write("x", 0, np.arange(2.0 * cl))
    assert np.array_equal(be.read("x", 0, cl), np.arange(1.0 * cl))
    new = np.random.default_rng(1).standard_normal(2 * cl)  # compresses to other sizes: other offsets
    be.write("x", 0, new)
    assert np.array_equal(be.read("x", 0, 2 * cl), new)


def _files(root) -> dict:
    """Every file under ``root``: relative path -> bytes."""
    out = {}
    for d, _, names in os.walk(root):
        for f in names:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


@pytest.mark.parametrize("stored", [False, True], ids=["compressed", "stored"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "int64"])
@pytest.mark.parametrize("n", [0, 5, 4096, 3 * 4096 + 1, 2 * 4096 + 3 * 128 + 7])
def test_shard_writer_writes_the_files_zarr_writes(tmp_path, dtype, n, stored, monkeypatch):
    """Arrays appended in whole shards (as the writer of convert does) are the files Zarr writes for the
    same values, byte for byte (shards, partial last inner chunk padded, inner chunks past the end absent)."""
    from ooc.store import chunk_writer

    rng = np.random.default_rng(7)
    values = (rng.standard_normal(n) * 1000).astype(dtype) if dtype.startswith("float") else \
        np.cumsum(rng.integers(0, 9, n)).astype(dtype)
    cl = 4096  # 32 inner chunks of 128
    sample = _NOISE if stored else None
    direct = []
    monkeypatch.setattr(chunk_writer.ShardWriter, "write",
                        lambda self, start, v, _w=chunk_writer.ShardWriter.write: direct.append(len(v)) or _w(self, start, v))
    be = ZarrBackend.create(str(tmp_path / "direct.zarr"))
    be.create_array("x", dtype, cl, sample=sample)
    for s in range(0, n, 2 * cl):  # whole shards, the last one cut at the array's end: the writer's appends
        be.resize("x", min(n, s + 2 * cl))
        be.write("x", s, values[s:s + 2 * cl])
    assert sum(direct) == n  # every element went through the shard writer
    ref = ZarrBackend.create(str(tmp_path / "zarr.zarr"))
    ref.create_array("x", dtype, cl, n, sample=sample)
    if n:
        ref._array("x")[:] = values  # Zarr's own path, with every chunk written as the backend sets
    assert _files(tmp_path / "direct.zarr") == _files(tmp_path / "zarr.zarr")
    assert np.array_equal(ZarrBackend.open(str(tmp_path / "direct.zarr")).read("x", 0, n), values)


def test_writes_of_part_of_a_shard_go_through_zarr(tmp_path, monkeypatch):
    """A write that does not start at a shard boundary, or ends inside a shard before the array's end,
    keeps what the shard held: Zarr does it."""
    from ooc.store import chunk_writer

    calls = []
    monkeypatch.setattr(chunk_writer.ShardWriter, "write", lambda self, start, v: calls.append(start))
    cl = 256
    be = ZarrBackend.create(str(tmp_path / "p.zarr"))
    be.create_array("x", "float64", cl, 3 * cl)
    be._array("x")[:] = np.arange(3.0 * cl)
    be.write("x", 10, np.zeros(5))
    be.write("x", cl, np.ones(cl // 2))
    assert not calls
    expect = np.arange(3.0 * cl)
    expect[10:15] = 0
    expect[cl:cl + cl // 2] = 1
    assert np.array_equal(be.read("x", 0, 3 * cl), expect)


def test_older_codecs_go_through_zarr(tmp_path):
    import zarr
    from zarr.codecs import ZstdCodec

    g = zarr.open_group(str(tmp_path / "z.zarr"), mode="w", zarr_format=3)
    a = g.create_array("x", shape=(50,), chunks=(8,), dtype="float64", compressors=[ZstdCodec()])
    a[:] = np.arange(50.0)
    assert direct_reader(a) is None
    be = ZarrBackend.open(str(tmp_path / "z.zarr"))
    assert be.decodes_whole_chunks("x")
    assert np.array_equal(be.read("x", 3, 40), np.arange(3.0, 40.0))


@pytest.mark.parametrize("crc", ["ctypes", "google_crc32c"])
@pytest.mark.parametrize("sharded", [False, True])
def test_read_many_names_the_corrupted_chunk(tmp_path, sharded, crc, monkeypatch):
    import ooc.store.chunk_files as cf

    if crc == "ctypes":
        assert cf._CRC32C is not None  # the wheel's libcrc32c was found
    else:
        monkeypatch.setattr(cf, "_CRC32C", None)
    path = str(tmp_path / "c.zarr")
    cl = 64 if sharded else 8
    n = 8 * cl
    make = _zarr_array if sharded else _unsharded_zarr_array
    be = make(path, "float64", n, cl, np.arange(float(n)))
    f = os.path.join(path, "x", "c", "3")
    with open(f, "r+b") as fh:
        fh.seek(os.path.getsize(f) // 3)
        fh.write(b"\xff\xff\xff")
    out = np.zeros(n // 2)
    msg = "chunk 3" + (r".*inner chunk \d" if sharded else "")
    with pytest.raises(StoreCorruptError, match=msg):
        be.read_many([("x", 0, n // 4, out[:n // 4]), ("x", n // 4, n // 2, out[n // 4:])])


def test_a_corrupted_shard_index_is_named(tmp_path):
    path = str(tmp_path / "c.zarr")
    be = _zarr_array(path, "float64", 256, 64, np.arange(256.0))
    f = os.path.join(path, "x", "c", "2")
    with open(f, "r+b") as fh:
        fh.seek(os.path.getsize(f) - 10)
        fh.write(b"\x01")
    with pytest.raises(StoreCorruptError, match="chunk 2.*index"):
        be.read("x", 130, 140)
    # found by the thread that reads while others decode: the decodes in flight finish, then it is raised
    out = np.full(256, -1.0)
    with pytest.raises(StoreCorruptError, match="chunk 2.*index"):
        be.read_many([("x", i * 64, (i + 1) * 64, out[i * 64:(i + 1) * 64]) for i in range(4)])
    assert np.array_equal(out[:128], np.arange(128.0))  # the other shards were read
    with open(f, "r+b") as fh:  # cut off: the index cannot be where it should
        fh.truncate(20)
    be = ZarrBackend.open(path)
    with pytest.raises(StoreCorruptError, match="chunk 2.*(truncated|index)"):
        be.read("x", 130, 140)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    X = sp.random(600, 40, density=0.15, random_state=5, format="csr", data_rvs=rng.standard_normal)
    y = np.where(rng.standard_normal(600) > 0, 1.0, -1.0)
    return X, y


@pytest.mark.parametrize("fmt", ["zarr", "hdf5", "memory"])
def test_read_group_is_the_concatenation(data, tmp_path, fmt):
    X, y = data
    path = (f"memory://g-{uuid.uuid4().hex[:8]}" if fmt == "memory"
            else str(tmp_path / ("s.zarr" if fmt == "zarr" else "s.h5")))
    st = ooc.convert(X, path, y=y, dtype="float64", block_bytes=900, chunk_len=50,
                     **({} if fmt == "memory" else {"format": fmt}))
    nb = st.n_blocks(L.ROWS)
    assert nb >= 6
    for group in ([3], [4, 1, 5], [nb - 1, 0], list(range(nb))[::-1]):
        g = st.read_group(L.ROWS, group)
        blocks = [st.block(L.ROWS, b) for b in group]
        csr = sp.vstack([X[blk.start:blk.stop] for blk in blocks]).tocsr()
        assert np.array_equal(g.indptr, csr.indptr) and g.indptr.dtype == np.int64
        assert np.array_equal(g.indices, csr.indices) and np.array_equal(g.data, csr.data)
        assert g.indices.dtype == blocks[0].indices.dtype and g.data.dtype == blocks[0].data.dtype
        assert g.index == group[0] and g.stop - g.start == csr.shape[0]
        lab = st.read_labels_group([st.block_bounds(L.ROWS, b) for b in group])
        assert np.array_equal(lab, np.concatenate([y[blk.start:blk.stop] for blk in blocks]))


def _problem(st):
    from ooc.solvers.problem import make_problem as make

    return make(st, {"loss": "logistic", "gamma": 1.0, "class_weight": None, "l2": 1e-3, "l1": 0.0, "bias": 0.0})


def _solver(st, tmp_path, memory, mix):
    from ooc.runs.rundir import RunDir
    from ooc.solvers.sdca import SDCASolver

    rd = RunDir.create(str(tmp_path / f"run-{uuid.uuid4().hex[:6]}"), {})
    return SDCASolver(_problem(st), rd, {"memory": memory, "mix_blocks": mix, "tol": 1e-6, "max_epochs": 1,
                                         "seed": 0, "checkpoint_every": 1e9})


def _concat(blocks: list[TrainBlock], group) -> TrainBlock:
    offs = np.cumsum([0] + [int(t.indptr[-1]) for t in blocks[:-1]])
    indptr = np.concatenate([blocks[0].indptr[:1]] + [t.indptr[1:] + o for t, o in zip(blocks, offs)])
    return TrainBlock(group[0], 0, sum(t.stop - t.start for t in blocks), indptr,
                      *(np.concatenate([getattr(t, f) for t in blocks]) for f in ("indices", "data", "y", "c")))


def test_load_group_same_block_whatever_is_cached(data, tmp_path):
    X, y = data
    st = ooc.convert(X, str(tmp_path / "s.zarr"), y=y, dtype="float64", block_bytes=900, chunk_len=50)
    solver = _solver(st, tmp_path, 1 << 30, 3)
    group = (4, 1, 5)
    want = _concat([load_train_block(st, solver.pb, b) for b in group], group)
    for cached in ([], [1], [4, 5], [4, 1, 5]):
        solver.cache = BlockCache(1 << 30)
        for b in cached:
            solver.cache.get(b, lambda b=b: load_train_block(st, solver.pb, b), lambda t: t.nbytes)
        got = solver.load_group(group)
        for f in TrainBlock._fields:
            a, b_ = getattr(got, f), getattr(want, f)
            assert (a == b_) if np.ndim(a) == 0 else (a.dtype == b_.dtype and np.array_equal(a, b_)), (cached, f)
        # every block of the group is now cached, and the cached copies are what load_train_block returns
        for b in group:
            blk = solver.cache.lookup(b)
            ref = load_train_block(st, solver.pb, b)
            assert blk is not None and all(np.array_equal(getattr(blk, f), getattr(ref, f)) for f in TrainBlock._fields)
    # a cache that keeps nothing still counts every block read
    solver.cache = BlockCache(0)
    solver.load_group(group)
    assert solver.cache.misses == 3 and solver.cache.bytes_read == sum(
        load_train_block(st, solver.pb, b).nbytes for b in group)


def test_prefetcher_counts_reader_busy_seconds():
    import time

    def load(b):
        time.sleep(0.02)
        return b

    pf = Prefetcher([(0, 1), (2,), (3, 4)], load, None, depth=1)
    assert [g for g, _ in pf] == [(0, 1), (2,), (3, 4)]
    assert 0.06 <= pf.busy_seconds < 1.0
    cache = BlockCache(1 << 20)
    pf = Prefetcher([0, 1, 0], load, cache, lambda v: 8, depth=1)
    list(pf)
    assert cache.hits == 1 and 0.04 <= pf.busy_seconds < 1.0  # the hit took no reader time


def test_prefetcher_overlapping_loads_count_once():
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    running, most = [0], [0]
    lock = threading.Lock()

    def load(b):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.1)
        with lock:
            running[0] -= 1
        return b

    with ThreadPoolExecutor(2) as pool:
        pf = Prefetcher(list(range(6)), load, None, depth=2, pool=pool)
        assert [b for b, _ in pf] == list(range(6))  # in order, whichever load ends first
    assert most[0] == 2
    assert 0.25 <= pf.busy_seconds < 0.55  # ~3 x 0.1 s of wall time, not 6 x 0.1 s summed


def test_two_groups_read_at_once_give_the_same_run(data, tmp_path):
    """--memory for four groups (the one worked on, two read ahead, and the pool's slack for a fourth) of data
    that does not fit: two read-ahead threads, same coefficients."""
    X, y = data
    st = ooc.convert(X, str(tmp_path / "s.zarr"), y=y, dtype="float64", block_bytes=900, chunk_len=50)
    nb = st.n_blocks(L.ROWS)
    assert nb > 10
    probe = _solver(st, tmp_path, 16, 2)
    assert probe.read_depth == 1
    fixed = probe.plan.fixed  # the O(d) vectors come off the budget first
    two = _solver(st, tmp_path, fixed + 8 * 900, 2)  # 4 groups of 2 blocks: the data takes nb blocks
    assert two.read_depth == 2 and two.ahead_blocks == 4 and two.cache.budget == 0
    assert _solver(st, tmp_path, fixed + 4 * (nb + 8) * 900, 2).read_depth == 1  # the data fits in the cache
    runs = [ooc.train(st, out=str(tmp_path / f"run{m}"), loss="logistic", l2=1e-3, max_epochs=3, tol=1e-12,
                      memory=str(m), mix_blocks=2, solver="sdca") for m in (16, fixed + 8 * 900)]
    np.testing.assert_array_equal(runs[0].model.coef_, runs[1].model.coef_)
    for h0, h1 in zip(runs[0].history, runs[1].history):
        assert h0["gap"] == h1["gap"] and h0["read_bytes"] == h1["read_bytes"]
        assert 0 < h1["read_seconds"] <= h1["pass_seconds"]


@pytest.mark.parametrize("mix", [1, 3])
def test_history_has_the_reader_figures(data, tmp_path, mix):
    X, y = data
    st = ooc.convert(X, str(tmp_path / "s.zarr"), y=y, dtype="float64", block_bytes=900, chunk_len=50)
    run = ooc.train(st, out=str(tmp_path / "run"), loss="logistic", l2=1e-3, max_epochs=2, tol=1e-12,
                    memory="16", mix_blocks=mix, solver="sdca")
    pb = _problem(st)
    decoded = sum(load_train_block(st, pb, b).nbytes for b in range(st.n_blocks(L.ROWS)))
    for h in run.history:
        assert h["read_bytes"] == decoded  # nothing cached: every block of every pass read
        assert h["read_file_bytes"] >= st.bytes_on_disk() * 0.5
        assert 0 < h["read_seconds"]


def test_group_read_waits_for_the_previous_group_when_memory_is_short(data, tmp_path):
    import threading

    from ooc.schedule.scheduler import ReadAheadGate

    X, y = data
    st = ooc.convert(X, str(tmp_path / "s.zarr"), y=y, dtype="float64", block_bytes=900, chunk_len=50)
    solver = _solver(st, tmp_path, 16, 3)  # --memory 16 bytes: one block of the next group read ahead
    assert solver.ahead_blocks == 1 and solver.cache.budget == 0
    group = (2, 0, 3)
    solver._gate, solver._positions = ReadAheadGate(), {(5,): 0, group: 1}
    reads = []
    orig = st.backend.read_many

    def spy(requests):
        reads.append({r[0] for r in requests})
        return orig(requests)

    st.backend.read_many = spy
    res = {}
    t = threading.Thread(target=lambda: res.setdefault("g", solver.load_group(group)))
    t.start()
    t.join(0.5)
    assert t.is_alive() and "g" not in res  # the first block is read; the rest waits for group 0
    n_before = len(reads)
    solver._gate.release()
    t.join(10)
    assert not t.is_alive() and len(reads) > n_before
    want = _concat([load_train_block(st, solver.pb, b) for b in group], group)
    assert all(np.array_equal(getattr(res["g"], f), getattr(want, f)) for f in ("indptr", "indices", "data", "y", "c"))
    # a pass that stops frees a waiting reader
    gate = ReadAheadGate()
    errs = []
    t = threading.Thread(target=lambda: errs.append(pytest.raises(RuntimeError, gate.wait_released, 3)))
    t.start()
    gate.abort()
    t.join(10)
    assert not t.is_alive() and errs


def test_read_seconds_exclude_the_wait_for_memory(data, tmp_path):
    X, y = data
    st = ooc.convert(X, str(tmp_path / "s.zarr"), y=y, dtype="float64", block_bytes=900, chunk_len=50)
    run = ooc.train(st, out=str(tmp_path / "run"), loss="logistic", l2=1e-3, max_epochs=1, tol=1e-12,
                    memory="16", mix_blocks=3, solver="sdca")
    for h in run.history:  # the reader waits for each group to be released, most of the pass
        assert 0 < h["read_seconds"] <= h["pass_seconds"]


def test_factor_view_groups_are_the_concatenation(data):
    from ooc.solvers.base import load_train_group
    from ooc.store.factorize import FactorView, convert_factorized

    X, y = data
    st = convert_factorized(X, f"memory://cf-{uuid.uuid4().hex[:8]}", 4, y=y, seed=2, dtype="float64",
                            block_bytes=2000)
    fv = FactorView(st)
    assert fv.n_blocks(L.ROWS) >= 4
    pb = _problem(st)
    group = (2, 0, 3)
    paused = []
    got = load_train_group(fv, pb, group, 1, lambda: paused.append(1))
    want = _concat([load_train_block(fv, pb, b) for b in group], group)
    assert paused == [1]
    assert all(np.array_equal(getattr(got, f), getattr(want, f)) for f in ("indptr", "indices", "data", "y", "c"))
    assert got.stop == sum(fv.block_bounds(L.ROWS, b)[1] - fv.block_bounds(L.ROWS, b)[0] for b in group)
