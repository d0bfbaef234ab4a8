"""HDF5 backend (h5py): one file, chunked datasets, lzf-compressed and Fletcher-32-checked.

Datasets are resizable 1-D arrays with the Fletcher-32 checksum filter, so a
damaged chunk fails on read (h5py raises an ``OSError`` that the base class turns
into :class:`~ooc.store.backend.StoreCorruptError`). Compression is HDF5's
built-in ``lzf`` filter: always available with h5py and fast enough not to slow
ingest down.
"""

from __future__ import annotations

import json
import os

import h5py
import numpy as np

from .backend import Backend, StoreError
from .layout import worth_compressing

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


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
        return cls(path, h5py.File(path, "w-", rdcc_nbytes=0))

    @classmethod
    def open(cls, path: str, mode: str = "r") -> "HDF5Backend":
        try:
            return cls(path, h5py.File(path, mode))
        except OSError as exc:
            raise StoreError(f"{path}: not a readable HDF5 store ({exc})") from exc

    @classmethod
    def detect(cls, path: str) -> bool:
        if not os.path.isfile(path):
            return False
        with open(path, "rb") as f:
            return f.read(8) == _HDF5_MAGIC

    def close(self):
        if self._f.id.valid:
            self._f.close()

    def _ds(self, name):
        try:
            return self._f[name]
        except KeyError:
            raise StoreError(f"{self.path}: array {name!r} is missing") from None

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
        return int(self._ds(name).shape[0])

    def dtype(self, name):
        return np.dtype(self._ds(name).dtype)

    def chunk_len(self, name):
        return int(self._ds(name).chunks[0])

    def has(self, name):
        return name in self._f

    @property
    def attrs(self):
        raw = self._f.attrs.get("ooc")
        return json.loads(raw) if raw is not None else {}

    def set_attrs(self, attrs):
        merged = self.attrs
        merged.update(attrs)
        self._f.attrs["ooc"] = json.dumps(merged)
        self._f.flush()
