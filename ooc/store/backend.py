"""The storage interface every backend implements, and an in-memory backend.

A backend knows how to keep named 1-D arrays and a flat attribute dict: create,
grow, write a slice, read a slice. Everything about *what* is stored (names,
dtypes, blocks, statistics) lives in :mod:`ooc.store.layout` and the writer; the
backends only move bytes. All backends pass one shared test suite
(``tests/test_backends.py``).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np


class StoreError(Exception):
    """A store cannot be opened or read (missing, incomplete, wrong version)."""


class StoreCorruptError(StoreError):
    """A chunk failed its checksum, could not be decoded or is missing; or the store's
    attributes or array metadata contradict each other (:mod:`ooc.store.integrity`)."""


def one_line(exc: BaseException) -> str:
    """``exc`` as one line (its type when it has no message): errors of ooc are one line, and
    a library's own message (h5py's, Zarr's) may span several."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _identity(path) -> tuple | None:
    """``(device, inode)`` of a local path, None for a remote or missing one."""
    if not path or "://" in str(path):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class Backend(ABC):
    """Named 1-D arrays plus one attribute dict, on some medium.

    Writers call :meth:`create`, :meth:`create_array`, :meth:`resize`,
    :meth:`write`, :meth:`set_attrs`; readers call :meth:`open` and :meth:`read`.
    """

    #: Short name used on the command line (``--format``).
    name: ClassVar[str]

    def __init__(self, path: str | None):
        self.path = path
        #: whether a chunk without stored bytes is damage (see :meth:`require_every_chunk`)
        self.every_chunk = False
        #: the local store's file or directory as opened (device, inode): one replaced meanwhile (another
        #: ooc command's append or convert --overwrite swaps a new store in) is named so, not as damage
        self._opened = _identity(path)

    # -- lifecycle ---------------------------------------------------------------
    @classmethod
    @abstractmethod
    def create(cls, path: str) -> "Backend":
        """Create a new, empty, writable container at ``path`` (must not exist)."""

    @classmethod
    @abstractmethod
    def open(cls, path: str, mode: str = "r") -> "Backend":
        """Open an existing container (``mode`` 'r' or 'r+')."""

    @classmethod
    @abstractmethod
    def detect(cls, path: str) -> bool:
        """Whether ``path`` looks like a container of this backend."""

    def check_metadata(self) -> None:
        """Refuse (:class:`StoreCorruptError`, naming the file) metadata that is not the store's own; nothing
        to check by default (a backend whose metadata is in its checked attributes)."""

    def close(self) -> None:
        """Release file handles; further calls are invalid."""

    # -- arrays ------------------------------------------------------------------
    @abstractmethod
    def create_array(self, name: str, dtype, chunk_len: int, length: int = 0, sample=None) -> None:
        """Create a 1-D array of ``length`` (zeros), chunked by ``chunk_len`` elements.

        ``sample``, when given, is the array's first values: a backend that compresses
        stores the array uncompressed when they do not compress
        (:func:`ooc.store.layout.worth_compressing`).
        """

    @abstractmethod
    def resize(self, name: str, length: int) -> None:
        """Grow or shrink an array to ``length`` elements."""

    @abstractmethod
    def write(self, name: str, start: int, values: np.ndarray) -> None:
        """Write ``values`` at ``[start, start + len(values))``."""

    @abstractmethod
    def _read(self, name: str, start: int, stop: int) -> np.ndarray:
        """Backend read without error translation."""

    @abstractmethod
    def length(self, name: str) -> int:
        """Number of elements of array ``name``."""

    @abstractmethod
    def dtype(self, name: str) -> np.dtype:
        """dtype of array ``name``."""

    @abstractmethod
    def chunk_len(self, name: str) -> int:
        """Elements per chunk of array ``name``."""

    @abstractmethod
    def has(self, name: str) -> bool:
        """Whether array ``name`` exists."""

    def require_every_chunk(self) -> None:
        """Treat a chunk without stored bytes as damage from now on, not as fill values.

        For stores that record that every chunk was written
        (:data:`ooc.store.layout.ALL_CHUNKS_WRITTEN`): a read that meets such a chunk
        raises :class:`StoreCorruptError` where it would have returned zeros.
        """
        self.every_chunk = True

    def check_chunks(self, name: str) -> None:
        """Raise :class:`StoreCorruptError` naming the first chunk of ``name`` (within its length)
        that has no stored bytes; a no-op unless :meth:`require_every_chunk` was called.

        Cheap: at most a listing of the array's chunks, no chunk is read. Backends whose
        chunks cannot go missing on their own (in memory) do nothing.
        """

    def decodes_whole_chunks(self, name: str) -> bool:
        """Whether reading part of a chunk of ``name`` costs as much as reading all of it.

        True unless the backend decodes just the part asked for; readers that take a
        small slice of a chunk many times keep the chunk when it is true.
        """
        return True

    def read(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Read ``[start, stop)`` of array ``name`` into a new in-memory array.

        Only the chunks overlapping the range are read. A chunk that fails its
        checksum or does not decode raises :class:`StoreCorruptError` naming the
        array and the chunk.
        """
        n = self.length(name)
        stop = n if stop is None else min(stop, n)
        start = max(0, start)
        if stop <= start:
            return np.empty(0, dtype=self.dtype(name))
        try:
            return self._read(name, start, stop)
        except Exception as exc:  # a codec or I/O failure: find the guilty chunk
            raise self._locate_corruption(name, start, stop, exc) from exc

    def replaced(self) -> bool:
        """Whether the path this store was opened from now holds another file or directory (it was replaced
        while open: an in-place ``ooc append`` or ``convert --overwrite``)."""
        return self._opened is not None and _identity(self.path) != self._opened

    def _locate_corruption(self, name: str, start: int, stop: int, exc: Exception) -> StoreError:
        if self.replaced():
            return StoreError(f"{self.path}: the store was replaced while this command read it (another ooc command "
                              "wrote it: an append or a convert --overwrite); nothing is damaged: run the command "
                              "again (a run: 'ooc resume' it, on the new store 'ooc resume RUN --store')")
        cl = self.chunk_len(name)
        for k in range(start // cl, (stop - 1) // cl + 1):
            try:
                self._read(name, k * cl, min((k + 1) * cl, self.length(name)))
            except Exception as inner:
                return StoreCorruptError(
                    f"{self.path}: array {name!r}, chunk {k} (elements {k * cl}..{(k + 1) * cl - 1}) "
                    f"is corrupted or unreadable: {one_line(inner)}"
                )
        return StoreError(f"{self.path}: reading {name!r}[{start}:{stop}] failed: {one_line(exc)}")

    def read_many(self, requests) -> None:
        """Read several ranges into arrays the caller provides.

        ``requests`` holds ``(name, start, stop, out)`` with ``0 <= start <= stop <= length``
        and ``out`` a contiguous array of ``stop - start`` elements of the array's dtype.
        Backends that can read chunks in parallel do (see :class:`ZarrBackend`); errors
        are those of :meth:`read`.
        """
        for name, start, stop, out in requests:
            if stop > start:
                out[...] = self.read(name, start, stop)

    def reader_bytes(self, names) -> int:
        """Bytes this backend's reader holds once it has read arrays ``names`` (buffers, caches): 0 here."""
        return 0

    def file_bytes_read(self) -> int | None:
        """Encoded bytes read from the medium so far, where the backend counts them (else None)."""
        return None

    # -- attributes --------------------------------------------------------------
    @property
    @abstractmethod
    def attrs(self) -> dict[str, Any]:
        """A copy of the attribute dict."""

    @abstractmethod
    def set_attrs(self, attrs: dict[str, Any]) -> None:
        """Merge ``attrs`` (JSON-serialisable values) into the attribute dict."""

    # -- size ----------------------------------------------------------------------
    def bytes_on_disk(self) -> int:
        """Bytes the container occupies on its medium."""
        if self.path is None:
            return 0
        if os.path.isfile(self.path):
            return os.path.getsize(self.path)
        total = 0
        for root, _, files in os.walk(self.path):
            for f in files:
                total += os.path.getsize(os.path.join(root, f))
        return total


class MemoryBackend(Backend):
    """Arrays in a process-global dict keyed by path: for tests and small data."""

    name = "memory"
    _containers: ClassVar[dict[str, dict]] = {}

    def __init__(self, path: str, container: dict):
        super().__init__(path)
        self._c = container

    @classmethod
    def create(cls, path: str) -> "MemoryBackend":
        if path in cls._containers:
            raise FileExistsError(path)
        cls._containers[path] = {"arrays": {}, "chunks": {}, "attrs": {}}
        return cls(path, cls._containers[path])

    @classmethod
    def open(cls, path: str, mode: str = "r") -> "MemoryBackend":
        if path not in cls._containers:
            raise StoreError(f"{path}: no such in-memory store")
        return cls(path, cls._containers[path])

    @classmethod
    def detect(cls, path: str) -> bool:
        return path in cls._containers

    @classmethod
    def rename(cls, src: str, dst: str) -> None:
        if dst in cls._containers:
            raise FileExistsError(dst)
        cls._containers[dst] = cls._containers.pop(src)

    @classmethod
    def delete(cls, path: str) -> None:
        cls._containers.pop(path, None)

    def create_array(self, name, dtype, chunk_len, length=0, sample=None):
        self._c["arrays"][name] = np.zeros(length, dtype=dtype)
        self._c["chunks"][name] = int(chunk_len)

    def _arr(self, name):
        try:
            return self._c["arrays"][name]
        except KeyError:  # the same error the on-disk backends give
            raise StoreError(f"{self.path}: array {name!r} is missing") from None

    def resize(self, name, length):
        a = self._arr(name)
        b = np.zeros(length, dtype=a.dtype)
        m = min(len(a), length)
        b[:m] = a[:m]
        self._c["arrays"][name] = b

    def write(self, name, start, values):
        self._arr(name)[start:start + len(values)] = values

    def _read(self, name, start, stop):
        return self._arr(name)[start:stop].copy()

    def length(self, name):
        return len(self._arr(name))

    def dtype(self, name):
        return self._arr(name).dtype

    def chunk_len(self, name):
        self._arr(name)
        return self._c["chunks"][name]

    def has(self, name):
        return name in self._c["arrays"]

    @property
    def attrs(self):
        return dict(self._c["attrs"])

    def set_attrs(self, attrs):
        self._c["attrs"].update(attrs)

    def bytes_on_disk(self):
        return sum(a.nbytes for a in self._c["arrays"].values())
