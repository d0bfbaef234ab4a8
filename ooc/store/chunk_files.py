"""Reading ranges of a local Zarr v3 array straight from its chunk files.

The arrays ooc writes are 1-D, regularly chunked, and encoded ``bytes`` (little
endian) -> Blosc -> ``crc32c``. For those, reading a range of elements means: for
each chunk file it overlaps, read the file, check its crc32c, and decode only the
bytes the range needs, straight into the output array. Zarr's own reader does the
same work several times slower on our access pattern. Measured on a 14M-row store
(row blocks of 16 MiB, chunks of 1M elements, page cache warm, one thread):
~160 MB/s of decoded bytes through Zarr, ~610 MB/s here. Where Zarr's time went:

* every chunk is decoded whole into a new buffer, then copied into the output.
  Under the mmap threshold the training process sets (:mod:`ooc._malloc`) each of
  those buffers is a fresh mapping: page faults to fill it, ``munmap`` to free it;
* a row block is not aligned with the chunks: it needs 1.35 chunks of ``data`` and
  ``indices`` on average but decodes 2.35, and it needs 1/16 of an ``indptr`` or
  ``labels`` chunk but decodes all of it. Blosc can decode just its internal blocks
  (1 MiB here) that hold a range (``blosc_getitem``);
* an asyncio event loop and thread-pool hand-offs per chunk.

The file reads themselves still cover whole chunk files (the crc32c is over the
whole encoded chunk). Two further choices, both about a cold pass under a memory
cgroup that counts the page cache (``ooc train`` capped several times below the
store's size):

* :class:`ChunkReader` reads the chunks of several ranges with two threads, so one
  waits on the disk while the other decodes (measured on the same store, 300 MiB
  cgroup, cold: 280 -> 380 MB/s decoded, the disk's own rate being ~630 MB/s of
  files for that access pattern);
* when the store is larger than the memory the process may use, a chunk file is
  read with ``O_DIRECT``: its pages would be evicted before the next pass anyway,
  and evicting them inside the cgroup costs the reader (measured: buffered reads
  of the pass's files at 460 MB/s under the cap, 630 with ``O_DIRECT``, 800
  buffered without a cap). ``OOC_DIRECT_IO=1``/``0`` forces it on/off.

This module handles only that exact layout on a local file system; anything else
(other codecs such as the zstd of older stores, sharding, remote stores) gets
``None`` from :func:`direct_reader` and goes through Zarr. The bytes returned are
the ones Zarr would return: the same chunk files, the same codecs.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .stats import memory_available

try:  # zarr's own crc32c implementation (what its Crc32cCodec uses)
    import google_crc32c
except ImportError:  # pragma: no cover - zarr >= 3 requires it
    google_crc32c = None

_HEADER = 16  # Blosc 1 header: version, versionlz, flags, typesize, nbytes, blocksize, cbytes
_ALIGN = 4096  # O_DIRECT buffer, offset and length alignment (covers 512- and 4096-byte sectors)
#: threads that read and decode chunks for one :meth:`ChunkReader.read_many` call
READ_THREADS = 2


def _blosc_functions():
    """``blosc_getitem`` and ``blosc_decompress_ctx`` of the c-blosc that numcodecs ships, or None.

    numcodecs' extension module exports the c-blosc symbols; calling them through
    ctypes releases the GIL, and both use a context of their own (no global lock).
    """
    try:
        import numcodecs.blosc as nb

        lib = ctypes.CDLL(nb.__file__)
        getitem, decompress = lib.blosc_getitem, lib.blosc_decompress_ctx
    except (ImportError, OSError, AttributeError):  # pragma: no cover - another build of numcodecs
        return None
    getitem.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    getitem.restype = ctypes.c_int
    decompress.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    decompress.restype = ctypes.c_int
    return getitem, decompress


_BLOSC = _blosc_functions()


class ChunkFileError(ValueError):
    """A chunk file failed its checksum or did not decode (the backend names the chunk)."""


class _Scratch(threading.local):
    """One page-aligned buffer per thread for the encoded bytes of the chunk being read.

    Reused across chunks so it is paged in once, not once per chunk (see the module
    docstring); it grows to the largest chunk file read (a chunk's encoded size).
    """

    def __init__(self):
        self.raw = np.empty(0, dtype=np.uint8)
        self.buf = self.raw

    def get(self, n: int) -> np.ndarray:
        n = -(-n // _ALIGN) * _ALIGN
        if self.buf.size < n:
            self.raw = np.empty(n + _ALIGN, dtype=np.uint8)
            off = (-self.raw.ctypes.data) % _ALIGN
            self.buf = self.raw[off:off + n]
        return self.buf


_scratch = _Scratch()


def direct_io_default(store_bytes: int) -> bool:
    """Whether chunk files of a store of ``store_bytes`` should bypass the page cache.

    Yes when ``OOC_DIRECT_IO=1``; no when ``=0``; otherwise yes when the store is larger
    than the memory this process may use (:func:`ooc.store.stats.memory_available`: RAM,
    ``RLIMIT_AS``, the memory cgroup's limit): a pass then evicts its own pages before the
    next pass could reuse them.
    """
    env = os.environ.get("OOC_DIRECT_IO")
    if env in ("0", "1"):
        return env == "1"
    if not hasattr(os, "O_DIRECT"):
        return False
    return store_bytes > memory_available()


class DirectArray:
    """Element ranges of one 1-D Zarr v3 array, read from its chunk files.

    Parameters
    ----------
    root : str
        Directory of the array (where its ``zarr.json`` is).
    chunk_key : callable
        ``chunk_key(k)``: path of chunk ``k`` relative to ``root`` (Zarr's key encoding).
    dtype : numpy.dtype
    chunk_len : int
        Elements per chunk.
    fill_value : scalar
        Value of the elements of a chunk that has no file (Zarr writes none for a chunk
        that holds only the fill value).
    direct_io : bool
        Read chunk files with ``O_DIRECT`` (falls back to buffered reads where the file
        system refuses it).
    """

    def __init__(self, root: str, chunk_key, dtype, chunk_len: int, fill_value, direct_io: bool = False):
        self.root = root
        self.chunk_key = chunk_key
        self.dtype = np.dtype(dtype)
        self.chunk_len = int(chunk_len)
        self.fill_value = fill_value
        self.direct_io = bool(direct_io) and hasattr(os, "O_DIRECT")
        #: encoded bytes read from chunk files (all threads)
        self.file_bytes = 0
        self._lock = threading.Lock()

    def jobs(self, start: int, stop: int, out: np.ndarray) -> list:
        """``(chunk, first, count, dest)`` for each chunk of ``start..stop-1``, ``out`` holding the range."""
        cl = self.chunk_len
        res = []
        pos = start
        while pos < stop:
            k = pos // cl
            hi = min(stop, (k + 1) * cl)
            res.append((self, k, pos - k * cl, hi - pos, out[pos - start:hi - start]))
            pos = hi
        return res

    def read(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Elements ``start..stop-1`` (clipped to the array by the caller), into ``out`` if given."""
        out = _check_out(out, stop - start, self.dtype)
        for job in self.jobs(start, stop, out):
            job[0].read_chunk(*job[1:])
        return out

    def _read_file(self, path: str) -> tuple[np.ndarray, int] | None:
        """The chunk file's bytes (in this thread's scratch buffer) and its size; None if absent."""
        direct = self.direct_io
        try:
            fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
        except FileNotFoundError:
            return None
        except OSError as exc:
            if not direct or exc.errno != errno.EINVAL:
                raise
            self.direct_io = direct = False  # a file system without O_DIRECT
            fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            buf = _scratch.get(size)
            view = memoryview(buf)  # whole aligned pages: O_DIRECT wants them, the last read stops at EOF
            got = 0
            while got < size:
                try:
                    r = os.readv(fd, [view[got:]])
                except OSError as exc:
                    if not direct or exc.errno != errno.EINVAL or got:
                        raise
                    self.direct_io = direct = False
                    os.close(fd)
                    fd = os.open(path, os.O_RDONLY)
                    continue
                if r == 0:
                    break
                got += r
        finally:
            os.close(fd)
        with self._lock:
            self.file_bytes += got
        return buf, got

    def read_chunk(self, k: int, first: int, count: int, dest: np.ndarray) -> None:
        """Elements ``first..first+count-1`` of chunk ``k`` into ``dest``."""
        path = os.path.join(self.root, self.chunk_key(k))
        got = self._read_file(path)
        if got is None:
            dest[:] = self.fill_value
            return
        buf, size = got
        if size < _HEADER + 4:
            raise ChunkFileError(f"chunk file {path} is truncated ({size} bytes)")
        body = buf[:size - 4]
        if google_crc32c.value(body) != int.from_bytes(buf[size - 4:size].tobytes(), "little"):
            raise ChunkFileError(f"chunk file {path}: crc32c mismatch")
        itemsize = self.dtype.itemsize
        typesize = int(buf[3])
        nbytes = int.from_bytes(buf[4:8].tobytes(), "little")
        cbytes = int.from_bytes(buf[12:16].tobytes(), "little")
        if nbytes != self.chunk_len * itemsize or cbytes != size - 4:
            raise ChunkFileError(f"chunk file {path}: Blosc header says {nbytes} bytes in {cbytes}, expected "
                                 f"{self.chunk_len * itemsize} in {size - 4}")
        getitem, decompress = _BLOSC
        src, dst, want = body.ctypes.data, dest.ctypes.data, count * itemsize
        if count == self.chunk_len:
            r = decompress(src, dst, want, 1)
        elif (first * itemsize) % typesize == 0 and want % typesize == 0:
            # only the Blosc blocks that hold the range are decoded
            r = getitem(src, first * itemsize // typesize, want // typesize, dst)
        else:  # pragma: no cover - Zarr sets Blosc's typesize to the itemsize
            whole = np.empty(self.chunk_len, dtype=self.dtype)
            r = decompress(src, whole.ctypes.data, nbytes, 1)
            if r == nbytes:
                dest[:] = whole[first:first + count]
                r = want
        if r != want:
            raise ChunkFileError(f"chunk file {path}: Blosc decoding failed ({r})")


def _check_out(out, n: int, dtype) -> np.ndarray:
    if out is None:
        return np.empty(n, dtype=dtype)
    if out.dtype != dtype or out.shape != (n,) or not out.flags.c_contiguous:
        raise ValueError(f"out must be a contiguous ({n},) {dtype} array, not {out.dtype} {out.shape}")
    return out


class ChunkReader:
    """Runs the chunk reads of several ranges on :data:`READ_THREADS` threads.

    One pool per opened store, created on first use; the calling thread waits for the
    results (it is the prefetch thread while training).
    """

    def __init__(self):
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def run(self, jobs: list) -> None:
        """Execute ``(array, k, first, count, dest)`` jobs; re-raises the first failure."""
        if len(jobs) <= 1 or READ_THREADS <= 1:
            for job in jobs:
                job[0].read_chunk(*job[1:])
            return
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="ooc-chunks")
            pool = self._pool
        # the biggest chunks first, so the two threads finish together
        order = sorted(jobs, key=lambda j: -j[3] * j[0].dtype.itemsize)
        futures = [pool.submit(job[0].read_chunk, *job[1:]) for job in order]
        err = None
        for f in futures:  # wait for all, even after a failure: they write into the caller's arrays
            try:
                f.result()
            except Exception as exc:  # noqa: BLE001 - the first one is re-raised
                err = err or exc
        if err is not None:
            raise err

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


def direct_reader(zarr_array, direct_io: bool = False) -> DirectArray | None:
    """A :class:`DirectArray` for ``zarr_array`` when its layout allows, else None (read through Zarr)."""
    if _BLOSC is None or google_crc32c is None or sys.byteorder != "little":
        return None
    try:
        from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec
        from zarr.storage import LocalStore

        meta = zarr_array.metadata
        store = zarr_array.store_path.store
        if getattr(meta, "zarr_format", None) != 3 or not isinstance(store, LocalStore):
            return None
        if len(zarr_array.shape) != 1 or type(meta.chunk_grid).__name__ != "RegularChunkGrid":
            return None
        codecs = list(meta.codecs)
        if (len(codecs) != 3 or not isinstance(codecs[0], BytesCodec) or not isinstance(codecs[1], BloscCodec)
                or not isinstance(codecs[2], Crc32cCodec)):
            return None
        dtype = np.dtype(zarr_array.dtype)
        endian = getattr(codecs[0].endian, "value", codecs[0].endian)
        if dtype.kind not in "biuf" or dtype.byteorder == ">" or (dtype.itemsize > 1 and endian not in (None, "little")):
            return None
        enc = meta.chunk_key_encoding
        root = os.path.join(str(store.root), *[p for p in zarr_array.store_path.path.split("/") if p])
        return DirectArray(root, lambda k: enc.encode_chunk_key((k,)), dtype, int(zarr_array.chunks[0]),
                           zarr_array.fill_value, direct_io)
    except Exception:  # pragma: no cover - an unexpected zarr version: fall back to zarr's reader
        return None
