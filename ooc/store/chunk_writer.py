"""Writing whole chunk files of a local Zarr v3 array straight: the bytes Zarr writes, at less cost.

``ooc convert`` appends its arrays in whole shards (:class:`ooc.store.writer.Appender`: every
write starts at a shard boundary and ends at a later one or at the array's end), so no write
needs what a file held before. Zarr encodes such a write through an asyncio task, a buffer
copy and a codec pipeline per inner chunk: measured on 13.6M int32 ids (55 MB) ~0.25 s of CPU,
against ~0.05 s for the same encoding and files here, and the whole row layout of a 226 MB
svmlight file is two such arrays (the column layout two more).

:class:`ShardWriter` does what Zarr's ``sharding_indexed`` codec does for a shard whose inner
chunks are all given: each inner chunk, padded with the fill value to its full length at the
array's end, is encoded with the array's codecs (``bytes`` little endian -> Blosc -> ``crc32c``),
the inner chunks are laid out in order, then the index (offset and size of each, as two uint64;
``2**64 - 1`` twice for the inner chunks wholly past the array's end, which Zarr does not write)
with its own crc32c. Blosc and crc32c are called through ctypes (the functions numcodecs' Blosc
codec and google_crc32c call), which releases the GIL: the writes of several arrays run on
their threads at once. The files are byte for byte Zarr's (``tests/test_chunk_files.py``
compares them); anything else (another layout or codec, a remote store, a write that is not
whole shards) goes through Zarr (:func:`direct_writer` returns None).
"""

from __future__ import annotations

import ctypes
import os
import sys

import numpy as np

from .chunk_files import _CRC, _CRC32C, google_crc32c

#: Blosc 1's largest overhead over the bytes it is given (its header), ``BLOSC_MAX_OVERHEAD``
_BLOSC_OVERHEAD = 16
#: an index entry of an inner chunk that has no bytes
_EMPTY = np.uint64(2**64 - 1)
_SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


def _blosc_compress():
    """``blosc_compress_ctx`` of the c-blosc that numcodecs ships (what its Blosc codec calls off
    the main thread, where Zarr encodes), or None."""
    try:
        import numcodecs.blosc as nb

        fn = ctypes.CDLL(nb.__file__).blosc_compress_ctx
    except (ImportError, OSError, AttributeError):  # pragma: no cover - another build of numcodecs
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_COMPRESS = _blosc_compress()


class ShardWriter:
    """Writes whole shards of one sharded 1-D Zarr v3 array (see the module docstring).

    Parameters
    ----------
    root : str
        Directory of the array (where its ``zarr.json`` is).
    chunk_key : callable
        ``chunk_key(k)``: path of shard ``k`` relative to ``root`` (Zarr's key encoding).
    dtype : numpy.dtype
        Little endian (or one byte).
    shard_len, inner_len : int
        Elements per shard and per inner chunk.
    cname : str
        Blosc's compressor (``lz4`` ...).
    clevel, shuffle, typesize, blocksize : int
        Blosc's settings, as the array's Blosc codec records them (``shuffle`` 0, 1 or 2).
    fill_value : scalar
        What pads the last inner chunk to its full length.
    """

    def __init__(self, root: str, chunk_key, dtype, shard_len: int, inner_len: int, cname: str, clevel: int,
                 shuffle: int, typesize: int, blocksize: int, fill_value):
        self.root = root
        self.chunk_key = chunk_key
        self.dtype = np.dtype(dtype)
        self.shard_len = int(shard_len)
        self.inner_len = int(inner_len)
        if self.shard_len % self.inner_len:
            raise ValueError(f"shard of {shard_len} elements is not a whole number of {inner_len}-element chunks")
        self.cname = cname.encode()
        self.clevel, self.shuffle = int(clevel), int(shuffle)
        self.typesize, self.blocksize = int(typesize), int(blocksize)
        self.fill_value = fill_value

    def covers(self, start: int, n: int, length: int) -> bool:
        """Whether writing ``n`` values at ``start`` of an array of ``length`` elements is whole shards."""
        return n > 0 and start % self.shard_len == 0 and (n % self.shard_len == 0 or start + n == length)

    def write(self, start: int, values: np.ndarray) -> None:
        """Write the shards ``values`` fill from element ``start`` (:meth:`covers` is true)."""
        values = np.ascontiguousarray(values, dtype=self.dtype)
        for s in range(0, len(values), self.shard_len):
            k = (start + s) // self.shard_len
            path = os.path.join(self.root, *self.chunk_key(k).split("/"))
            data = self.encode(values[s:s + self.shard_len])
            try:
                f = open(path, "wb")
            except FileNotFoundError:  # the first shard of the array: its directory is new
                os.makedirs(os.path.dirname(path), exist_ok=True)
                f = open(path, "wb")
            with f:
                f.write(data)

    def encode(self, part: np.ndarray) -> memoryview:
        """The bytes of the shard whose first ``len(part)`` elements are ``part`` (the rest past the
        array's end)."""
        inner, item = self.inner_len, self.dtype.itemsize
        n_inner = self.shard_len // inner
        used = -(-len(part) // inner)
        nbytes = inner * item
        room = used * (nbytes + _BLOSC_OVERHEAD + _CRC.size) + n_inner * 16 + _CRC.size
        out = np.empty(room, np.uint8)
        base = out.ctypes.data
        index = np.full((n_inner, 2), _EMPTY, dtype="<u8")
        pos = 0
        for j in range(used):
            chunk = part[j * inner:(j + 1) * inner]
            if len(chunk) < inner:  # Zarr encodes the chunk at the array's end at its full length
                padded = np.full(inner, self.fill_value, dtype=self.dtype)
                padded[:len(chunk)] = chunk
                chunk = padded
            size = _COMPRESS(self.clevel, self.shuffle, self.typesize, nbytes, chunk.ctypes.data, base + pos,
                             nbytes + _BLOSC_OVERHEAD, self.cname, self.blocksize, 1)
            if size <= 0:
                raise RuntimeError(f"Blosc could not encode an inner chunk (status {size})")
            _CRC.pack_into(out, pos + size, _crc32c(out, base, pos, size))
            index[j] = pos, size + _CRC.size
            pos += size + _CRC.size
        tail = index.view(np.uint8).reshape(-1)
        out[pos:pos + len(tail)] = tail
        _CRC.pack_into(out, pos + len(tail), _crc32c(out, base, pos, len(tail)))
        return memoryview(out)[:pos + len(tail) + _CRC.size]


def _crc32c(buf: np.ndarray, base: int, off: int, size: int) -> int:
    """The crc32c of ``buf[off:off + size]`` (``base``: the address of ``buf``)."""
    return _CRC32C(base + off, size) if _CRC32C is not None else google_crc32c.value(buf[off:off + size])


def direct_writer(zarr_array) -> ShardWriter | None:
    """A :class:`ShardWriter` for ``zarr_array`` when its layout allows, else None (written through Zarr).

    The layout is the one :mod:`ooc.store.zarr_backend` creates: a 1-D local array, sharded (index
    at the end, ``bytes`` + ``crc32c``), inner chunks ``bytes`` -> Blosc -> ``crc32c``.
    """
    if _COMPRESS is None or google_crc32c is None or sys.byteorder != "little":
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
        codecs = list(meta.codecs)
        if len(codecs) != 1 or not isinstance(codecs[0], ShardingCodec):
            return None
        sh = codecs[0]
        index_codecs = list(sh.index_codecs)
        if (getattr(sh.index_location, "value", sh.index_location) != "end" or len(index_codecs) != 2
                or not isinstance(index_codecs[0], BytesCodec)
                or getattr(index_codecs[0].endian, "value", index_codecs[0].endian) not in (None, "little")
                or not isinstance(index_codecs[1], Crc32cCodec)):
            return None
        inner = list(sh.codecs)
        if (len(inner) != 3 or not isinstance(inner[0], BytesCodec) or not isinstance(inner[1], BloscCodec)
                or not isinstance(inner[2], Crc32cCodec)):
            return None
        dtype = np.dtype(zarr_array.dtype)
        endian = getattr(inner[0].endian, "value", inner[0].endian)
        if dtype.kind not in "biuf" or dtype.byteorder == ">" or (dtype.itemsize > 1 and endian not in (None, "little")):
            return None
        blosc = inner[1]
        shuffle = _SHUFFLES.get(getattr(blosc.shuffle, "value", blosc.shuffle))
        if shuffle is None or blosc.typesize is None:
            return None
        enc = meta.chunk_key_encoding
        root = os.path.join(str(store.root), *[p for p in zarr_array.store_path.path.split("/") if p])
        return ShardWriter(root, lambda k: enc.encode_chunk_key((k,)), dtype, int(meta.chunk_grid.chunk_shape[0]),
                           int(sh.chunk_shape[0]), getattr(blosc.cname, "value", blosc.cname), int(blosc.clevel),
                           shuffle, int(blosc.typesize), int(blosc.blocksize), zarr_array.fill_value)
    except Exception:  # pragma: no cover - an unexpected zarr version: write through Zarr
        return None
