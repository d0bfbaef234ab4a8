"""One conformance suite for every storage backend (Zarr v3, HDF5, in-memory).

A base class holds the tests; one small subclass per backend says how to make a
fresh container and, for the on-disk ones, how to damage a chunk. A new backend
passes when a new subclass of :class:`BackendSuite` does.
"""

from __future__ import annotations

import os
import uuid

import h5py
import numpy as np
import pytest

from ooc.store.backend import Backend, MemoryBackend, StoreCorruptError, StoreError
from ooc.store.hdf5_backend import HDF5Backend
from ooc.store.store import backend_for_path
from ooc.store.zarr_backend import ZarrBackend


class BackendSuite:
    """Tests every backend must pass; subclasses set ``cls`` and implement the hooks."""

    cls: type[Backend]
    can_corrupt = True

    # -- hooks ---------------------------------------------------------------------------
    def new_path(self, tmp_path) -> str:
        raise NotImplementedError

    def corrupt_chunk(self, path: str, name: str, k: int) -> None:
        """Damage chunk ``k`` of array ``name`` in the closed container at ``path``."""
        raise NotImplementedError

    # -- fixtures --------------------------------------------------------------------------
    @pytest.fixture
    def path(self, tmp_path):
        p = self.new_path(tmp_path)
        yield p
        if p.startswith("memory://"):
            MemoryBackend.delete(p)

    @pytest.fixture
    def be(self, path):
        b = self.cls.create(path)
        yield b
        b.close()

    # -- lifecycle -------------------------------------------------------------------------
    def test_create_then_detect_and_reopen(self, path):
        b = self.cls.create(path)
        b.create_array("x", np.int64, 4, 3)
        b.set_attrs({"k": 1})
        b.close()
        assert self.cls.detect(path)
        assert backend_for_path(path) is self.cls
        r = self.cls.open(path)
        assert r.attrs == {"k": 1}
        assert r.length("x") == 3
        r.close()

    def test_create_refuses_existing(self, path):
        self.cls.create(path).close()
        with pytest.raises(FileExistsError):
            self.cls.create(path)

    def test_open_missing_path_is_store_error(self, tmp_path):
        missing = self.new_path(tmp_path)
        assert not self.cls.detect(missing)
        with pytest.raises(StoreError):
            self.cls.open(missing)

    def test_missing_array_is_store_error(self, be):
        assert not be.has("nope")
        with pytest.raises(StoreError, match="nope"):
            be.read("nope")

    # -- arrays ------------------------------------------------------------------------------
    @pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
    def test_dtypes_roundtrip(self, be, dtype):
        v = (np.arange(23) * 3 - 7).astype(dtype)
        be.create_array("a", dtype, 5, len(v))
        be.write("a", 0, v)
        out = be.read("a")
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(out, v)
        assert be.dtype("a") == np.dtype(dtype)

    def test_create_with_length_reads_zeros(self, be):
        be.create_array("z", np.float64, 4, 10)
        assert be.length("z") == 10
        np.testing.assert_array_equal(be.read("z"), np.zeros(10))

    def test_chunk_len_and_has(self, be):
        be.create_array("c", np.int32, 7)
        assert be.has("c")
        assert be.chunk_len("c") == 7
        assert be.length("c") == 0
        assert be.read("c").shape == (0,)

    def test_grow_write_shrink(self, be):
        be.create_array("g", np.int64, 4)
        be.resize("g", 6)
        be.write("g", 0, np.arange(6))
        be.resize("g", 13)
        be.write("g", 6, np.arange(6, 13))
        np.testing.assert_array_equal(be.read("g"), np.arange(13))
        be.resize("g", 5)
        np.testing.assert_array_equal(be.read("g"), np.arange(5))
        be.resize("g", 9)  # regrown tail reads as zeros, not stale values
        np.testing.assert_array_equal(be.read("g", 5), np.zeros(4))

    @pytest.mark.parametrize("start,stop", [(0, 1), (3, 4), (3, 9), (4, 8), (0, 17), (16, 17), (5, 5)])
    def test_read_slices_across_chunks(self, be, start, stop):
        v = np.arange(17, dtype=np.float32) * 0.5
        be.create_array("s", np.float32, 4, 17)
        be.write("s", 0, v)
        np.testing.assert_array_equal(be.read("s", start, stop), v[start:stop])

    def test_read_clamps_out_of_range(self, be):
        be.create_array("s", np.int32, 4, 5)
        be.write("s", 0, np.arange(5, dtype=np.int32))
        np.testing.assert_array_equal(be.read("s", 3, 100), [3, 4])
        assert len(be.read("s", 7, 9)) == 0
        assert len(be.read("s", 4, 2)) == 0

    def test_unaligned_overwrite(self, be):
        be.create_array("u", np.int64, 4, 12)
        be.write("u", 0, np.arange(12))
        be.write("u", 3, -np.ones(6, dtype=np.int64))
        expect = np.arange(12)
        expect[3:9] = -1
        np.testing.assert_array_equal(be.read("u"), expect)

    def test_read_returns_a_copy(self, be):
        be.create_array("c", np.int64, 4, 4)
        be.write("c", 0, np.arange(4))
        a = be.read("c")
        a[:] = 99
        np.testing.assert_array_equal(be.read("c"), np.arange(4))

    def test_nested_names(self, be):
        be.create_array("rows/indptr", np.int64, 4, 2)
        be.create_array("cols/indptr", np.int64, 4, 3)
        assert be.has("rows/indptr") and be.has("cols/indptr")
        assert be.length("rows/indptr") == 2 and be.length("cols/indptr") == 3

    # -- attributes -----------------------------------------------------------------------
    def test_attrs_merge_and_json_types(self, be):
        be.set_attrs({"a": 1, "shape": [3, 4], "classes": None, "name": "x"})
        be.set_attrs({"a": 2, "f": 0.5, "nested": {"k": [1.0, -1.0]}, "complete": True})
        a = be.attrs
        assert a == {"a": 2, "shape": [3, 4], "classes": None, "name": "x", "f": 0.5,
                     "nested": {"k": [1.0, -1.0]}, "complete": True}
        a["a"] = 100  # a copy, not a live view
        assert be.attrs["a"] == 2

    def test_bytes_on_disk_grows(self, be):
        before = be.bytes_on_disk()
        be.create_array("big", np.float64, 1024, 4096)
        be.write("big", 0, np.random.default_rng(0).random(4096))
        assert be.bytes_on_disk() > before

    def compressed(self, b, name) -> bool | None:
        """Whether the backend stores array ``name`` compressed (None: it does not compress)."""
        return None

    @pytest.mark.parametrize("kind", ["noise", "ids", "ones"])
    def test_arrays_whose_values_do_not_compress_are_stored_as_they_are(self, be, kind):
        rng = np.random.default_rng(2)
        v = {"noise": rng.random(1 << 14), "ids": np.sort(rng.integers(0, 1 << 20, 1 << 14)).astype(np.int32),
             "ones": np.ones(1 << 14)}[kind]
        be.create_array("a", v.dtype, 1 << 12, len(v), sample=v)
        be.write("a", 0, v)
        assert np.array_equal(be.read("a"), v)
        assert np.array_equal(be.read("a", 100, 9000), v[100:9000])
        assert self.compressed(be, "a") in (None, kind != "noise")

    # -- corruption ---------------------------------------------------------------------------
    @pytest.mark.parametrize("stored", [False, True], ids=["compressed", "stored"])
    def test_corrupted_chunk_names_array_and_chunk(self, path, stored):
        if not self.can_corrupt:
            pytest.skip(f"{self.cls.__name__} keeps no checksummed chunks")
        b = self.cls.create(path)
        v = np.random.default_rng(1).random(40)
        b.create_array("rows/data", np.float64, 8, 40, sample=np.random.default_rng(0).random(1024) if stored else None)
        assert self.compressed(b, "rows/data") in (None, not stored)
        b.write("rows/data", 0, v)
        b.close()
        self.corrupt_chunk(path, "rows/data", 2)
        r = self.cls.open(path)
        try:
            # chunks that do not hold the damage still read fine
            np.testing.assert_array_equal(r.read("rows/data", 0, 16), v[:16])
            np.testing.assert_array_equal(r.read("rows/data", 24, 40), v[24:])
            with pytest.raises(StoreCorruptError) as ei:
                r.read("rows/data", 10, 30)
            msg = str(ei.value)
            assert "'rows/data'" in msg and "chunk 2" in msg and "16..23" in msg
            assert "\n" not in msg
        finally:
            r.close()


def _zarr_chunk_file(path, name, k):
    f = os.path.join(path, *name.split("/"), "c", str(k))
    assert os.path.isfile(f), f
    return f


def _flip_bytes(f, offset, n=4):
    with open(f, "r+b") as fh:
        fh.seek(offset)
        raw = bytearray(fh.read(n))
        fh.seek(offset)
        fh.write(bytes(x ^ 0xFF for x in raw))


class TestZarrBackend(BackendSuite):
    cls = ZarrBackend

    def new_path(self, tmp_path):
        return str(tmp_path / f"s-{uuid.uuid4().hex[:6]}.zarr")

    def corrupt_chunk(self, path, name, k):
        f = _zarr_chunk_file(path, name, k)
        _flip_bytes(f, os.path.getsize(f) // 2)

    def compressed(self, b, name):
        a = b._array(name)
        codecs = a.metadata.codecs
        if type(codecs[0]).__name__ == "ShardingCodec":
            codecs = codecs[0].codecs
        return next(c for c in codecs if type(c).__name__ == "BloscCodec").clevel > 0

    def test_detect_rejects_non_groups(self, tmp_path):
        (tmp_path / "plain").mkdir()
        assert not ZarrBackend.detect(str(tmp_path / "plain"))
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad" / "zarr.json").write_text("{not json")
        assert not ZarrBackend.detect(str(tmp_path / "bad"))

    def test_truncated_chunk_is_corrupt(self, path):
        b = ZarrBackend.create(path)
        b.create_array("x", np.int64, 8, 24)
        b.write("x", 0, np.arange(24) + 1)
        b.close()
        f = _zarr_chunk_file(path, "x", 1)
        with open(f, "r+b") as fh:
            fh.truncate(os.path.getsize(f) // 2)
        r = ZarrBackend.open(path)
        with pytest.raises(StoreCorruptError, match="chunk 1"):
            r.read("x")


class TestHDF5Backend(BackendSuite):
    cls = HDF5Backend

    def new_path(self, tmp_path):
        return str(tmp_path / f"s-{uuid.uuid4().hex[:6]}.h5")

    def corrupt_chunk(self, path, name, k):
        with h5py.File(path, "r") as f:
            info = f[name].id.get_chunk_info(k)
        _flip_bytes(path, info.byte_offset + info.size // 2)

    def compressed(self, b, name):
        return b._ds(name).compression is not None

    def test_detect_rejects_other_files(self, tmp_path):
        p = tmp_path / "x.h5"
        p.write_bytes(b"not hdf5 at all")
        assert not HDF5Backend.detect(str(p))
        assert not HDF5Backend.detect(str(tmp_path))


class TestMemoryBackend(BackendSuite):
    cls = MemoryBackend
    can_corrupt = False

    def new_path(self, tmp_path):
        return f"memory://test-{uuid.uuid4().hex}"

    def test_registry_rename_and_delete(self, path):
        MemoryBackend.create(path).create_array("x", np.int32, 2, 1)
        other = path + "-moved"
        MemoryBackend.rename(path, other)
        assert not MemoryBackend.detect(path) and MemoryBackend.detect(other)
        with pytest.raises(FileExistsError):
            MemoryBackend.create(other)
        MemoryBackend.delete(other)
        assert not MemoryBackend.detect(other)


def test_worth_compressing():
    from ooc.store.layout import worth_compressing

    rng = np.random.default_rng(0)
    assert not worth_compressing(rng.random(1 << 16))  # random float64: ~1.05x
    assert not worth_compressing(rng.random(1 << 16).astype(np.float32))
    assert worth_compressing(np.sort(rng.integers(0, 1 << 20, 1 << 16)).astype(np.int32))  # sorted ids
    assert worth_compressing(np.ones(1 << 16))  # binary features
    assert worth_compressing(np.round(rng.random(1 << 16) * 4))  # small counts
    assert worth_compressing(None) and worth_compressing(np.empty(0))
