"""Reading ranges of a local Zarr v3 array straight from its chunk files.

The arrays ooc writes are 1-D, regularly chunked and sharded: each chunk file (a shard,
Zarr's ``sharding_indexed`` codec) holds up to 32 inner chunks, each encoded ``bytes``
(little endian) -> Blosc -> ``crc32c``, then an index of their offsets and sizes (itself
checked by a crc32c) at its end. Reading a range of elements means: for each shard it
overlaps, read its index (kept), read the byte span of the inner chunks the range
needs, check each one's crc32c and decode only the bytes the range needs, straight into
the output array. Unsharded arrays (stores written before sharding: one Blosc + crc32c
chunk per file) are read the same way, a whole chunk file at a time. Arrays whose
values do not compress are written with Blosc level 0 (:mod:`ooc.store.zarr_backend`):
the same frames, decoded by a copy.

Zarr's own reader does the same work several times slower on our access pattern.
Measured on a 14M-row store (row blocks of 16 MiB, chunks of 1M elements, page cache
warm, one thread): ~160 MB/s of decoded bytes through Zarr, ~610 MB/s here. Where
Zarr's time went:

* every chunk is decoded whole into a new buffer, then copied into the output.
  Under the mmap threshold the training process sets (:mod:`ooc._malloc`) each of
  those buffers is a fresh mapping: page faults to fill it, ``munmap`` to free it;
* a row block is not aligned with the chunks: it needs 1.35 chunks of ``data`` and
  ``indices`` on average but decodes 2.35, and it needs 1/16 of an ``indptr`` or
  ``labels`` chunk but decodes all of it. Blosc can decode just its internal blocks
  that hold a range (``blosc_getitem``);
* an asyncio event loop and thread-pool hand-offs per chunk.

The rest is about a cold pass under a memory cgroup that counts the page cache
(``ooc train`` capped ten times below the store's size; figures from
``scripts/bench_scale.py`` on that store, 270M cgroup, a disk that reads ~1 GB/s):

* shards keep the files large (few opens, long reads) while a block that starts or
  ends inside one reads at most one inner chunk it does not need at each end: with
  unsharded 1M-element chunks a pass read 1.75x the store's bytes (each boundary
  chunk twice), with shards 0.99x;
* :class:`ChunkReader` splits the work: the calling thread reads the jobs' bytes one
  after the other while two threads decode, so the disk always has a read in flight
  (two threads that each read then decode ran in lockstep, no faster than one);
* crc32c and Blosc are called through ctypes, which releases the GIL;
* when the store is larger than the memory the process may use, a chunk file is
  read with ``O_DIRECT``: its pages would be evicted before the next pass anyway,
  and evicting them inside the cgroup costs the reader (measured: buffered reads
  of the pass's files at 460 MB/s under the cap, 630 with ``O_DIRECT``, 800
  buffered without a cap). ``OOC_DIRECT_IO=1``/``0`` forces it on/off.

This module handles only that exact layout on a local file system; anything else
(other codecs such as the zstd of older stores, remote stores) gets ``None`` from
:func:`direct_reader` and goes through Zarr. The bytes returned are the ones Zarr
would return: the same files, the same codecs.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import queue
import struct
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
_BLOSC_HEADER = struct.Struct("<4B3I")
_CRC = struct.Struct("<I")  # the crc32c codec's trailer
_EMPTY = 2**64 - 1  # a shard index entry of an inner chunk that has no bytes (all fill value)
_ALIGN = 4096  # O_DIRECT buffer, offset and length alignment (covers 512- and 4096-byte sectors)
#: threads that decode the chunks one :meth:`ChunkReader.run` call reads (0: read and decode in the caller)
READ_THREADS = 2
#: buffers of encoded bytes the :class:`ChunkReader` of a store circulates (each grows to a job's bytes,
#: a shard at most: ~8 MB for 1Mi float64 values)
READ_BUFFERS = 4


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


def _crc32c_function():
    """``crc32c_value(address, length)`` of the libcrc32c that google_crc32c ships, or None.

    Called through ctypes it releases the GIL; ``google_crc32c.value`` holds it, so two
    threads checking chunks took turns (measured: 10 GB/s with one thread or two).
    """
    import glob

    try:
        top = os.path.dirname(os.path.dirname(google_crc32c.__file__))
        libs = sorted(glob.glob(os.path.join(top, "google_crc32c.libs", "libcrc32c*.so*")))
        if not libs:
            return None
        fn = ctypes.CDLL(libs[0]).crc32c_value
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        fn.restype = ctypes.c_uint32
        probe = b"123456789"
        if fn(probe, len(probe)) != 0xE3069283:  # the crc32c check value: another function by that name
            return None
        return fn
    except (AttributeError, OSError, TypeError):  # pragma: no cover - another build of google_crc32c
        return None


_CRC32C = _crc32c_function() if google_crc32c is not None else None


def _crc_ok(enc: np.ndarray, base: int, off: int, size: int) -> bool:
    """Whether ``enc[off:off + size]`` (``base``: the address of ``enc``) ends with the crc32c of the rest.

    The trailer the ``crc32c`` codec appends: 4 bytes, little endian.
    """
    end = off + size - 4
    crc = _CRC32C(base + off, size - 4) if _CRC32C is not None else google_crc32c.value(enc[off:end])
    return crc == _CRC.unpack_from(enc, end)[0]


class ChunkFileError(ValueError):
    """A chunk file failed its checksum or did not decode (the backend names the chunk)."""


class _Buffer:
    """A page-aligned buffer for the encoded bytes of the chunks being read, reused across reads.

    Reused so it is paged in once, not once per chunk (see the module docstring); it grows to
    the largest read it serves (a chunk file, or the span of one job's inner chunks).
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


class _Scratch(threading.local):
    """One :class:`_Buffer` per thread, for reads that are not pipelined (:meth:`DirectArray.read_chunk`)."""

    def __init__(self):
        self.buffer = _Buffer()


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
        ``chunk_key(k)``: path of chunk (or shard) ``k`` relative to ``root`` (Zarr's key encoding).
    dtype : numpy.dtype
    chunk_len : int
        Elements per chunk file: a chunk, or a shard of ``chunk_len // inner_len`` inner chunks.
    fill_value : scalar
        Value of the elements of a chunk that has no file, or an inner chunk that the shard
        index marks empty (Zarr writes none for a chunk that holds only the fill value, unless
        the array was written with ``write_empty_chunks``).
    direct_io : bool
        Read chunk files with ``O_DIRECT`` (falls back to buffered reads where the file
        system refuses it).
    inner_len : int, optional
        Elements per inner chunk of a sharded array (Zarr's ``sharding_indexed`` codec,
        index at the end, ``bytes`` + ``crc32c``); None for an array that is not sharded.
    every_chunk : bool
        Every chunk was written (:data:`ooc.store.layout.ALL_CHUNKS_WRITTEN`): a chunk file
        that is missing, or an inner chunk its shard index marks empty, is damage and raises
        :class:`ChunkFileError` instead of reading as ``fill_value``. Reads stay within the
        array's length, and Zarr writes every inner chunk that holds an element of it (those
        wholly past the end of the last shard are the only ones marked empty).

    Notes
    -----
    A sharded array is read at inner-chunk granularity: only the byte span of the inner
    chunks a range overlaps is read from the shard file, each inner chunk checked against
    its own crc32c. The files stay large (good for the disk), while a row block that
    starts or ends inside a shard reads at most one inner chunk it does not need at each
    end, where an unsharded array reads the whole boundary chunk file twice.
    """

    #: Most inner chunks one job reads: the unit the reader threads share out, and the
    #: size of one read (32 inner chunks of 32Ki float64: ~8 MB at most).
    INNER_PER_JOB = 32
    #: Shard indexes kept (each ``16 * inner chunks per shard`` bytes: 512 B by default).
    INDEX_CACHE = 8192

    def __init__(self, root: str, chunk_key, dtype, chunk_len: int, fill_value, direct_io: bool = False,
                 inner_len: int | None = None, every_chunk: bool = False):
        self.root = root
        self.chunk_key = chunk_key
        self.dtype = np.dtype(dtype)
        self.chunk_len = int(chunk_len)
        self.fill_value = fill_value
        self.direct_io = bool(direct_io) and hasattr(os, "O_DIRECT")
        self.inner_len = int(inner_len) if inner_len else None
        self.every_chunk = bool(every_chunk)
        if self.inner_len is not None and self.chunk_len % self.inner_len:
            raise ValueError(f"shard of {chunk_len} elements is not a whole number of {inner_len}-element chunks")
        #: encoded bytes read from chunk files (all threads)
        self.file_bytes = 0
        self._lock = threading.Lock()
        self._index: dict[int, np.ndarray] = {}
        #: chunk file path -> the checksums the store's conversion recorded (:func:`chunk_records`); None:
        #: a store without records (made before them), whose chunks are checked by their own checksums only
        self.records: dict[str, list[int]] | None = None

    def jobs(self, start: int, stop: int, out: np.ndarray) -> list:
        """``(array, chunk, first, count, dest)`` pieces of ``start..stop-1``, ``out`` holding the range.

        One piece per chunk file, or per run of at most :attr:`INNER_PER_JOB` inner chunks
        of a shard.
        """
        cl = self.chunk_len
        step = cl if self.inner_len is None else self.inner_len * self.INNER_PER_JOB
        res = []
        pos = start
        while pos < stop:
            k = pos // cl
            first = pos - k * cl
            hi = min(stop, k * cl + min(cl, (first // step + 1) * step))
            res.append((self, k, first, hi - pos, out[pos - start:hi - start]))
            pos = hi
        return res

    def forget_indexes(self) -> None:
        """Drop the cached shard indexes: the array was written to since they were read."""
        with self._lock:
            self._index.clear()

    def read(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Elements ``start..stop-1`` (clipped to the array by the caller), into ``out`` if given."""
        out = _check_out(out, stop - start, self.dtype)
        for job in self.jobs(start, stop, out):
            job[0].read_chunk(*job[1:])
        return out

    def _open(self, path: str) -> int | None:
        """A descriptor of ``path`` (``O_DIRECT`` if asked and allowed); None if there is no such file."""
        direct = self.direct_io  # read once: another thread may turn it off meanwhile
        try:
            return os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
        except FileNotFoundError:
            return None
        except OSError as exc:
            if not direct or exc.errno != errno.EINVAL:
                raise
            self.direct_io = False  # a file system without O_DIRECT
            return os.open(path, os.O_RDONLY)

    def _pread(self, fd: int, path: str, lo: int, hi: int, size: int, scratch: _Buffer) -> tuple[np.ndarray, int]:
        """Bytes ``lo..hi-1`` of the file in ``scratch``.

        Returns ``(buf, skip)``: ``buf[skip:skip + hi - lo]`` are those bytes. The read covers
        whole aligned pages (``O_DIRECT`` wants them; the last one stops at EOF).
        """
        a = lo // _ALIGN * _ALIGN
        end = min(size, -(-hi // _ALIGN) * _ALIGN)
        buf = scratch.get(end - a)
        view = memoryview(buf)
        got = 0
        while a + got < hi:
            try:
                r = os.preadv(fd, [view[got:-(-(end - a) // _ALIGN) * _ALIGN]], a + got)
            except OSError as exc:
                # this descriptor's own flag: another thread may have turned direct_io off already
                if exc.errno != errno.EINVAL or got or not fcntl.fcntl(fd, fcntl.F_GETFL) & getattr(os, "O_DIRECT", 0):
                    raise
                self.direct_io = False
                # the same descriptor number, now without O_DIRECT (the caller closes it)
                buffered = os.open(path, os.O_RDONLY)
                os.dup2(buffered, fd)
                os.close(buffered)
                continue
            if r == 0:
                raise ChunkFileError(f"chunk file {path} is truncated ({size} bytes, wanted bytes up to {hi})")
            got += r
        with self._lock:
            self.file_bytes += got
        return buf, lo - a

    def _decode(self, enc: np.ndarray, base: int, off: int, size: int, n_elems: int, first: int, count: int,
                dst: int, where, recorded: int | None = None) -> None:
        """Elements ``first..first+count-1`` of an encoded chunk of ``n_elems``, to address ``dst``.

        ``enc[off:off + size]`` is the chunk as stored: the Blosc frame, then its crc32c (4 bytes,
        little endian); ``base`` is the address of ``enc``. ``where()`` names the chunk in an error
        (built only then: this runs for every inner chunk, tens of thousands of times a pass).
        """
        if size < _HEADER + 4:
            raise ChunkFileError(f"{where()} is truncated ({size} bytes)")
        if not _crc_ok(enc, base, off, size):
            raise ChunkFileError(f"{where()}: crc32c mismatch")
        if recorded is not None and _CRC.unpack_from(enc, off + size - 4)[0] != recorded:
            raise ChunkFileError(f"{where()}: not the chunk this store's conversion recorded (a chunk of another "
                                 "conversion, or replaced)")
        _, _, _, typesize, nbytes, _, cbytes = _BLOSC_HEADER.unpack_from(enc, off)
        itemsize = self.dtype.itemsize
        if nbytes != n_elems * itemsize or cbytes != size - 4:
            raise ChunkFileError(f"{where()}: Blosc header says {nbytes} bytes in {cbytes}, expected "
                                 f"{n_elems * itemsize} in {size - 4}")
        getitem, decompress = _BLOSC
        src, want = base + off, count * itemsize
        if count == n_elems:
            r = decompress(src, dst, want, 1)
        elif (first * itemsize) % typesize == 0 and want % typesize == 0:
            # only the Blosc blocks that hold the range are decoded
            r = getitem(src, first * itemsize // typesize, want // typesize, dst)
        else:  # pragma: no cover - Zarr sets Blosc's typesize to the itemsize
            whole = np.empty(n_elems, dtype=self.dtype)
            r = decompress(src, whole.ctypes.data, nbytes, 1)
            if r == nbytes:
                ctypes.memmove(dst, whole.ctypes.data + first * itemsize, want)
                r = want
        if r != want:
            raise ChunkFileError(f"{where()}: Blosc decoding failed ({r})")

    def read_chunk(self, k: int, first: int, count: int, dest: np.ndarray) -> None:
        """Elements ``first..first+count-1`` of chunk (or shard) ``k`` into ``dest``."""
        self.decode(k, first, count, dest, self.fetch(k, first, count, _scratch.buffer))

    def fetch(self, k: int, first: int, count: int, scratch: _Buffer) -> tuple:
        """The disk half of :meth:`read_chunk`: read the bytes it needs into ``scratch``.

        Returns the piece :meth:`decode` takes, ``(path, encoded, index, shift)``: the encoded
        bytes of the chunk file, or of the inner chunks of the range (``encoded[shift + offset]``
        is where the shard index ``index`` says an inner chunk starts); ``encoded`` is None when
        there is nothing to read (no file, or only empty inner chunks).
        """
        path = os.path.join(self.root, self.chunk_key(k))
        fd = self._open(path)
        if fd is None:
            if self.every_chunk:
                raise ChunkFileError(f"chunk file {path} is missing (the store was written with every chunk)")
            return path, None, None, 0
        try:
            size = os.fstat(fd).st_size
            if self.inner_len is None:
                buf, skip = self._pread(fd, path, 0, size, size, scratch)
                return path, buf[skip:skip + size], None, 0
            il = self.inner_len
            idx = self._shard_index(fd, path, size, k, scratch)
            sub = idx[first // il:(first + count - 1) // il + 1]
            present = sub[:, 0] != _EMPTY
            if self.every_chunk and not present.all():
                i = first // il + int(np.argmin(present))
                raise ChunkFileError(f"shard file {path}: inner chunk {i} (elements {k * self.chunk_len + i * il}.."
                                     f"{k * self.chunk_len + (i + 1) * il - 1}) is marked empty in its index "
                                     "(the store was written with every chunk)")
            if not present.any():
                return path, None, idx, 0
            lo = int(sub[present, 0].min())
            hi = int((sub[present, 0] + sub[present, 1]).max())
            buf, skip = self._pread(fd, path, lo, hi, size, scratch)
            return path, buf, idx, skip - lo
        finally:
            os.close(fd)

    def decode(self, k: int, first: int, count: int, dest: np.ndarray, piece: tuple) -> None:
        """The CPU half of :meth:`read_chunk`: check and decode a :meth:`fetch` ``piece`` into ``dest``."""
        path, enc, idx, shift = piece
        first, count = int(first), int(count)  # addresses below are computed from them: ctypes wants ints
        if enc is None:
            dest[:] = self.fill_value
            return
        if len(dest) != count or not dest.flags.c_contiguous or dest.dtype != self.dtype:
            raise ValueError(f"dest must be a contiguous ({count},) {self.dtype} array")
        base, dst = enc.ctypes.data, dest.ctypes.data
        rec = None if self.records is None else self.records.get(path)
        if self.records is not None and rec is None:
            raise ChunkFileError(f"chunk file {path}: not recorded by this store's conversion (a file added since)")
        if idx is None:
            self._decode(enc, base, 0, enc.size, self.chunk_len, first, count, dst, lambda: f"chunk file {path}",
                         None if rec is None else rec[0])
            return
        il, cl, itemsize = self.inner_len, self.chunk_len, self.dtype.itemsize
        for i in range(first // il, (first + count - 1) // il + 1):
            a = max(first, i * il)
            b = min(first + count, (i + 1) * il)
            off, nb = int(idx[i, 0]), int(idx[i, 1])
            if off == _EMPTY:
                dest[a - first:b - first] = self.fill_value
                continue
            self._decode(enc, base, shift + off, nb, il, a - i * il, b - a, dst + (a - first) * itemsize,
                         lambda i=i: f"shard file {path}, inner chunk {i} (elements {k * cl + i * il}.."
                                     f"{k * cl + (i + 1) * il - 1})", None if rec is None else rec[1 + i])

    def _shard_index(self, fd: int, path: str, size: int, k: int, scratch: _Buffer) -> np.ndarray:
        """The index of shard ``k``: ``index[i] = (offset, nbytes)`` of inner chunk ``i``."""
        with self._lock:
            idx = self._index.get(k)
        if idx is not None:
            return idx
        n = self.chunk_len // self.inner_len
        isize = 16 * n + 4
        if size < isize:
            raise ChunkFileError(f"shard file {path} is truncated ({size} bytes, its index alone is {isize})")
        buf, skip = self._pread(fd, path, size - isize, size, size, scratch)
        if not _crc_ok(buf, buf.ctypes.data, skip, isize):
            raise ChunkFileError(f"shard file {path}: crc32c mismatch in its index")
        if self.records is not None:
            rec = self.records.get(path)
            if rec is None or len(rec) != n + 1 or rec[0] != _CRC.unpack_from(buf, skip + isize - 4)[0]:
                raise ChunkFileError(f"shard file {path}: its index is not the one this store's conversion "
                                     "recorded (a file of another conversion, or replaced)")
        idx = buf[skip:skip + isize - 4].view("<u8").reshape(n, 2).copy()
        present = idx[:, 0] != _EMPTY
        if np.any(idx[present, 0] + idx[present, 1] > size - isize) or np.any((idx[:, 0] == _EMPTY) != (idx[:, 1] == _EMPTY)):
            raise ChunkFileError(f"shard file {path}: its index points outside the file")
        with self._lock:
            if len(self._index) >= self.INDEX_CACHE:
                self._index.pop(next(iter(self._index)))
            self._index[k] = idx
        return idx


def _check_out(out, n: int, dtype) -> np.ndarray:
    if out is None:
        return np.empty(n, dtype=dtype)
    if out.dtype != dtype or out.shape != (n,) or not out.flags.c_contiguous:
        raise ValueError(f"out must be a contiguous ({n},) {dtype} array, not {out.dtype} {out.shape}")
    return out


class ChunkReader:
    """Reads the chunks of several ranges: one thread reads files, :data:`READ_THREADS` decode.

    The calling thread (the prefetch thread while training) reads the jobs' bytes one job
    after the other (:meth:`DirectArray.fetch`) and hands each to a pool of decoding
    threads (:meth:`DirectArray.decode`), so the disk always has a read in flight while
    the chunks already read are decoded. Two threads that each read then decode would
    do it in lockstep (both reading, then both decoding while the disk idles): measured
    on a 14M-row store under a 270M cgroup, 2 such threads read no faster than 1.
    Several callers may run at once (the training's two read-ahead threads), sharing the
    decoders and :data:`READ_BUFFERS` buffers (one being filled per caller, one per
    decoder); a caller waits for a free one.

    One pool per opened store, created on first use. Every buffer taken goes back, whatever
    ends a call (a failed read, an interrupt, a pool shut down meanwhile), so no caller waits
    for one forever.
    """

    def __init__(self):
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._free: queue.SimpleQueue | None = None

    def run(self, jobs: list) -> None:
        """Execute ``(array, k, first, count, dest)`` jobs; re-raises the first failure."""
        if len(jobs) <= 1 or READ_THREADS <= 0:
            for job in jobs:
                job[0].read_chunk(*job[1:])
            return
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="ooc-chunks")
                self._free = queue.SimpleQueue()
                for _ in range(READ_BUFFERS):
                    self._free.put(_Buffer())
            pool, free = self._pool, self._free
        # the biggest jobs first: the decoding left when the last read is done is the smallest
        order = sorted(jobs, key=lambda j: -j[3] * j[0].dtype.itemsize)
        futures, err, scratch = [], None, None  # futures: (decode, the buffer it returns when done)
        waited = 0  # futures[:waited] are done
        try:
            for arr, k, first, count, dest in order:
                scratch = free.get()
                try:
                    piece = arr.fetch(k, first, count, scratch)
                except Exception as exc:  # noqa: BLE001 - re-raised once the decodes in flight are done
                    err = exc
                    break
                futures.append((pool.submit(self._decode, arr, k, first, count, dest, piece, scratch), scratch))
                scratch = None  # the decode returns it
            if scratch is not None:
                free.put(scratch)
                scratch = None
            for f, buf in futures:  # wait for all, even after a failure: they write into the caller's arrays
                try:
                    f.result()
                except Exception as exc:  # noqa: BLE001 - the first one is re-raised
                    err = err or exc
                waited += 1
                if f.cancelled():  # dropped by a pool shut down meanwhile: _decode never ran to return it
                    free.put(buf)
        except BaseException:
            # interrupted (Ctrl-C in the calling thread) or the pool refused the job: the buffers this
            # call holds go back, or the other callers would wait for them forever; decodes not
            # started are dropped (their arrays are the caller's, which is giving up on them)
            if scratch is not None:
                free.put(scratch)
            for f, buf in futures[waited:]:
                if f.cancel():
                    free.put(buf)
            raise
        if err is not None:
            raise err

    def _decode(self, arr, k, first, count, dest, piece, scratch) -> None:
        try:
            arr.decode(k, first, count, dest, piece)
        finally:
            self._free.put(scratch)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


def chunk_records(root: str) -> dict[str, list[int]]:
    """The checksums each chunk file of the Zarr v3 arrays under ``root`` holds, by path relative to ``root``.

    A shard file's record is the crc32c of its index, then that of each inner chunk (-1: empty), as
    stored in their trailers; an unsharded chunk file's, its own crc32c. Read from the files (the
    index and 4 bytes an inner chunk): a store records them when it is sealed (:mod:`ooc.owned`), and
    :class:`DirectArray` refuses a chunk whose checksum is not the recorded one (a file of another
    conversion of the same shape has valid checksums of its own, but not these).
    """
    import json

    out: dict[str, list[int]] = {}
    for dp, _, fs in os.walk(root):
        if "zarr.json" not in fs:
            continue
        try:
            with open(os.path.join(dp, "zarr.json")) as f:
                meta = json.load(f)
            if meta.get("node_type") != "array":
                continue
            codecs, n = meta.get("codecs") or [], None
            if len(codecs) == 1 and codecs[0].get("name") == "sharding_indexed":
                n = (int(meta["chunk_grid"]["configuration"]["chunk_shape"][0])
                     // int(codecs[0]["configuration"]["chunk_shape"][0]))
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            continue
        for cp, _, cfs in os.walk(os.path.join(dp, "c")):
            for name in cfs:
                path = os.path.join(cp, name)
                with open(path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    if n is None:
                        if size < 4:
                            continue
                        f.seek(size - 4)
                        out[os.path.relpath(path, root)] = [_CRC.unpack(f.read(4))[0]]
                        continue
                    isize = 16 * n + 4
                    if size < isize:
                        continue
                    f.seek(size - isize)
                    raw = f.read(isize)
                    rec = [_CRC.unpack_from(raw, isize - 4)[0]]
                    for off, nb in np.frombuffer(raw[:-4], dtype="<u8").reshape(n, 2).tolist():
                        if off == _EMPTY or nb < 4:
                            rec.append(-1)
                            continue
                        f.seek(off + nb - 4)
                        rec.append(_CRC.unpack(f.read(4))[0])
                out[os.path.relpath(path, root)] = rec
    return out


def direct_reader(zarr_array, direct_io: bool = False, every_chunk: bool = False) -> DirectArray | None:
    """A :class:`DirectArray` for ``zarr_array`` when its layout allows, else None (read through Zarr).

    ``direct_io`` and ``every_chunk``: see :class:`DirectArray`.
    """
    if _BLOSC is None or google_crc32c is None or sys.byteorder != "little":
        return None
    try:
        from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, ShardingCodec
        from zarr.storage import LocalStore

        meta = zarr_array.metadata
        store = zarr_array.store_path.store
        if getattr(meta, "zarr_format", None) != 3 or not isinstance(store, LocalStore):
            return None
        if len(zarr_array.shape) != 1 or type(meta.chunk_grid).__name__ != "RegularChunkGrid":
            return None
        codecs, inner_len = list(meta.codecs), None
        if len(codecs) == 1 and isinstance(codecs[0], ShardingCodec):
            sh = codecs[0]
            loc = getattr(sh.index_location, "value", sh.index_location)
            index_codecs = list(sh.index_codecs)
            if (loc != "end" or len(index_codecs) != 2 or not isinstance(index_codecs[0], BytesCodec)
                    or getattr(index_codecs[0].endian, "value", index_codecs[0].endian) not in (None, "little")
                    or not isinstance(index_codecs[1], Crc32cCodec)):
                return None
            inner_len, codecs = int(sh.chunk_shape[0]), list(sh.codecs)
        if (len(codecs) != 3 or not isinstance(codecs[0], BytesCodec) or not isinstance(codecs[1], BloscCodec)
                or not isinstance(codecs[2], Crc32cCodec)):
            return None
        dtype = np.dtype(zarr_array.dtype)
        endian = getattr(codecs[0].endian, "value", codecs[0].endian)
        if dtype.kind not in "biuf" or dtype.byteorder == ">" or (dtype.itemsize > 1 and endian not in (None, "little")):
            return None
        enc = meta.chunk_key_encoding
        root = os.path.join(str(store.root), *[p for p in zarr_array.store_path.path.split("/") if p])
        return DirectArray(root, lambda k: enc.encode_chunk_key((k,)), dtype, int(meta.chunk_grid.chunk_shape[0]),
                           zarr_array.fill_value, direct_io, inner_len, every_chunk)
    except Exception:  # pragma: no cover - an unexpected zarr version: fall back to zarr's reader
        return None
