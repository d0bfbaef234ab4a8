"""HDF5 backend (h5py): one file, chunked datasets, lzf-compressed and Fletcher-32-checked.

Datasets are resizable 1-D arrays with the Fletcher-32 checksum filter, so a
damaged chunk fails on read (h5py raises an ``OSError`` that the base class turns
into :class:`~ooc.store.backend.StoreCorruptError`). Compression is HDF5's
built-in ``lzf`` filter: always available with h5py and fast enough not to slow
ingest down.

Files are written in the HDF5 1.10 file format (``libver=("v110", "latest")``): its
superblock, object headers and chunk indexes carry checksums of their own, so a flipped
byte in the file's metadata fails on open or read instead of being believed. Measured on
a small store, flipping bytes of the metadata of a file in the default (1.8-compatible)
format read different values without any error in about 3 % of the positions tried
(chunk index entries, datatype and dataspace messages have no checksum there). The
attributes are one fixed-length JSON byte string in the root group's object header, not
a variable-length string: those live in the global heap, which has no checksum in any
format. Files written before stay readable, with those weaknesses. Every error h5py raises on a damaged
file (``OSError``, ``KeyError``, ``RuntimeError``, ``ValueError``... depending on where the
damage is) becomes one :class:`~ooc.store.backend.StoreError` line naming the file and
the array or attribute.
"""

from __future__ import annotations

import json
import os

import h5py
import numpy as np

from .backend import Backend, StoreCorruptError, StoreError, one_line
from .layout import worth_compressing

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
#: oldest file format written: the first one with checksummed metadata (see the module docstring)
_LIBVER = ("v110", "latest")


class HDF5Backend(Backend):
    """One HDF5 file; arrays are resizable chunked datasets; attrs are JSON-encoded."""

    name = "hdf5"

    def __init__(self, path: str, f: "h5py.File"):
        super().__init__(path)
        self._f = f

    @classmethod
    def create(cls, path: str) -> "HDF5Backend":
        if os.path.exists(path):
            raise FileExistsError(path)
        return cls(path, h5py.File(path, "w-", rdcc_nbytes=0, libver=_LIBVER))

    @classmethod
    def open(cls, path: str, mode: str = "r") -> "HDF5Backend":
        try:
            # objects added to an open store (the factorizer's arrays) get checksummed metadata too
            return cls(path, h5py.File(path, mode, **({} if mode == "r" else {"libver": _LIBVER})))
        except Exception as exc:  # truncated, damaged superblock, not HDF5: h5py's errors vary
            raise StoreError(f"{path}: not a readable HDF5 store ({one_line(exc)})") from exc

    @classmethod
    def detect(cls, path: str) -> bool:
        if not os.path.isfile(path):
            return False
        with open(path, "rb") as f:
            return f.read(8) == _HDF5_MAGIC

    def close(self):
        if self._f.id.valid:
            self._f.close()

    def _ds(self, name) -> "h5py.Dataset":
        try:
            ds = self._f[name]
        except Exception as exc:  # KeyError for a missing name, and for a damaged link or header too
            if not self._exists(name):
                raise StoreError(f"{self.path}: array {name!r} is missing") from None
            raise self._damaged(name, exc) from exc
        if not isinstance(ds, h5py.Dataset):
            raise StoreCorruptError(f"{self.path}: {name!r} is not a dataset but a {type(ds).__name__}")
        return ds

    def _exists(self, name) -> bool:
        try:
            return name in self._f
        except Exception:  # noqa: BLE001 - the lookup itself failed: the name is there but damaged
            return True

    def _damaged(self, name, exc) -> StoreCorruptError:
        return StoreCorruptError(f"{self.path}: array {name!r}: its HDF5 metadata is unreadable: {one_line(exc)}")

    def _meta(self, name, get):
        """``get(dataset)``, h5py's errors on a damaged header made one line naming the array."""
        ds = self._ds(name)
        try:
            return get(ds)
        except Exception as exc:
            raise self._damaged(name, exc) from exc

    def create_array(self, name, dtype, chunk_len, length=0, sample=None):
        self._f.create_dataset(
            name, shape=(int(length),), maxshape=(None,), chunks=(int(chunk_len),),
            dtype=np.dtype(dtype), compression="lzf" if worth_compressing(sample) else None,
            fletcher32=True, fillvalue=0,
        )

    def resize(self, name, length):
        self._ds(name).resize((int(length),))

    def write(self, name, start, values):
        values = np.asarray(values)
        self._ds(name)[start:start + len(values)] = values

    def _read(self, name, start, stop):
        return self._ds(name)[start:stop]

    def length(self, name):
        shape = self._meta(name, lambda ds: tuple(ds.shape))
        if len(shape) != 1:
            raise StoreCorruptError(f"{self.path}: array {name!r} has shape {shape}, not one dimension")
        return int(shape[0])

    def dtype(self, name):
        return self._meta(name, lambda ds: np.dtype(ds.dtype))

    def chunk_len(self, name):
        return self._meta(name, lambda ds: int(ds.chunks[0]) if ds.chunks else int(ds.shape[0]))

    def has(self, name):
        return self._exists(name)

    def check_chunks(self, name):
        """Every chunk within the dataset's length is allocated in the file (h5py's chunk query).

        HDF5 allocates a chunk when it is written, whatever its values, and reads an
        unallocated one as the fill value: after a damaged chunk index, or in a file whose
        writing stopped early.
        """
        if not self.every_chunk:
            return
        n, cl = self.length(name), self.chunk_len(name)
        if n <= 0:
            return
        ds = self._ds(name)
        try:
            if ds.id.get_num_chunks() >= -(-n // cl):
                return
            for k in range(-(-n // cl)):
                if ds.id.get_chunk_info_by_coord((k * cl,)).byte_offset is None:
                    raise StoreCorruptError(
                        f"{self.path}: array {name!r}, chunk {k} (elements {k * cl}..{min(n, (k + 1) * cl) - 1}) "
                        "is not in the file (the store was written with every chunk)")
        except StoreCorruptError:
            raise
        except Exception as exc:
            raise self._damaged(name, exc) from exc

    @property
    def attrs(self):
        try:
            raw = self._f.attrs.get("ooc")  # bytes (fixed length), or str (older stores: variable length)
            return json.loads(raw) if raw is not None else {}
        except Exception as exc:  # a damaged attribute message, or JSON that no longer parses
            raise StoreCorruptError(f"{self.path}: the store's attributes are unreadable: {one_line(exc)}") from exc

    def set_attrs(self, attrs):
        merged = self.attrs
        merged.update(attrs)
        # fixed-length bytes, kept in the (checksummed) object header: a variable-length string
        # lives in HDF5's global heap, which has no checksum (measured: a flipped byte of its
        # size field made reading the attribute hang)
        self._f.attrs["ooc"] = np.bytes_(json.dumps(merged).encode())
        self._f.flush()
