"""Names, dtypes and attributes of an ooc store: the one source of truth.

A store is a group (Zarr) or file (HDF5) holding the matrix twice, as CSR over
rows and as CSC over columns, each as three 1-D arrays with global offsets, plus
per-row / per-column statistics and the labels::

    rows/indptr (n+1, int64)   rows/indices (nnz, int32|int64)   rows/data (nnz, float)
    rows/block_ptr (n_row_blocks+1, int64): first row of each row block
    cols/indptr (d+1, int64)   cols/indices (nnz, row ids)        cols/data (nnz, float)
    cols/block_ptr (n_col_blocks+1, int64): first column of each column block
    labels (n, float64)  row_nnz (n, int64)  row_sqnorm (n, float64)
    col_nnz (d, int64)   col_sqnorm (d, float64)
    weights (n, float64): optional per-row sample weights (attribute ``sample_weights``)

A ``--layout cols`` store keeps ``rows/indptr`` and ``rows/block_ptr`` but empties
``rows/indices`` and ``rows/data``; a factorized store adds ``factor/*``
(:mod:`ooc.store.factorize`). What a store must satisfy to be read at all (attributes
against arrays, every chunk present, the attribute digest) is in
:mod:`ooc.store.integrity`.

Every backend stores exactly these names; every reader and writer takes them from
here.
"""

from __future__ import annotations

import numpy as np

FORMAT = "ooc-store"
FORMAT_VERSION = 1

ROWS = "rows"
COLS = "cols"
LAYOUTS = (ROWS, COLS)

INDPTR = "indptr"
INDICES = "indices"
DATA = "data"
BLOCK_PTR = "block_ptr"

LABELS = "labels"
#: Optional per-row sample weights (finite, >= 0), present exactly when the attribute
#: :data:`WEIGHTS_ATTR` is: ``{"sum", "min", "max"}`` of the weights and, for class labels,
#: ``class_sums`` (the weights' sum per original label value, keyed like ``label_counts``).
WEIGHTS = "weights"
WEIGHTS_ATTR = "sample_weights"
ROW_NNZ = "row_nnz"
ROW_SQNORM = "row_sqnorm"
COL_NNZ = "col_nnz"
COL_SQNORM = "col_sqnorm"

#: Label kinds recorded in the ``label_kind`` attribute.
BINARY = "binary"
MULTICLASS = "multiclass"
REGRESSION = "regression"
LABEL_KINDS = (BINARY, MULTICLASS, REGRESSION)

#: Default decoded size of one block (rows or columns), in bytes.
DEFAULT_BLOCK_BYTES = 64 << 20
#: Elements per compressed chunk of the 1-D arrays. Small enough that a block read
#: over-reads little (at most one chunk at each end), large enough to compress well
#: and keep the number of files low.
DEFAULT_CHUNK_LEN = 1 << 20
#: Inner chunks per chunk, for backends that shard (Zarr): a chunk file holds this many
#: separately compressed and checksummed pieces plus an index, so a block that starts or
#: ends inside a chunk reads only the pieces it needs while files stay large.
INNER_CHUNKS = 32
#: Fewest elements in an inner chunk (below this a chunk is not split).
MIN_INNER_CHUNK_LEN = 16

#: Smallest compression ratio (decoded / encoded bytes, measured on a sample of an array's
#: first values) for which an array is stored compressed; below it, the backends store it
#: uncompressed (still checksummed). Decoding is CPU spent on every pass over the data, on
#: cores the solver shares: measured on the 14M-row benchmark store, random float64
#: values compress 1.05x under Blosc shuffle + LZ4, which saved 5 % of the disk reads for
#: ~1 s of decoding per pass (2.2 GB decoded at 1.6-2.2 GB/s a core, against 5 GB/s for
#: a copy). Hashed feature ids (1.6x) and repeated values (binary features) stay compressed.
MIN_COMPRESSION_RATIO = 1.25
#: Most bytes of an array's first values the ratio is measured on.
COMPRESSION_SAMPLE_BYTES = 1 << 20

INDPTR_DTYPE = np.dtype(np.int64)
STAT_FLOAT = np.dtype(np.float64)
LABEL_DTYPE = np.dtype(np.float64)
DATA_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

#: Attributes every complete store carries. ``complete`` is written last: a
#: store without it is a half-written one and does not open.
REQUIRED_ATTRS = (
    "format", "format_version", "shape", "nnz", "dtype", "index_dtype",
    "label_kind", "classes", "layouts", "block_bytes", "fingerprint", "complete",
)
#: Attribute ``true`` in stores whose every chunk (shard) within each array's length was written,
#: zeros included, and whose every inner chunk of a shard holds bytes: a chunk without stored
#: bytes is then damage, not fill values (stores without it read such chunks as zeros).
ALL_CHUNKS_WRITTEN = "all_chunks_written"
#: Attribute recording how the store's input was read (format, index base, hashing, text columns and
#: tokenizer, CSV options, dtype, labels): a dict, :meth:`ooc.store.recipe.Recipe.as_attr`. Optional (stores
#: written before it have ``index_base`` only); every later reader of new input follows it
#: (:mod:`ooc.store.recipe`).
RECIPE = "input_recipe"
#: Attribute of a local Zarr store whose manifest (:mod:`ooc.owned`) records the checksums of every chunk
#: file its conversion wrote (:func:`ooc.store.chunk_files.chunk_records`): a chunk file of another
#: conversion is refused, and so is the store when the manifest is gone.
CHUNK_RECORDS = "chunk_records"
#: Attribute holding a digest of every other attribute (but ``complete``), one per key, so an
#: edited or damaged attribute is refused by name (:mod:`ooc.store.integrity`).
ATTRS_DIGEST = "attrs_digest"

#: Arrays ``ooc convert --factorize K`` adds (:mod:`ooc.store.factorize`), and their attribute.
FACTOR = "factor"
FACTOR_U = "factor/U"
FACTOR_VT = "factor/Vt"
FACTOR_BLOCK_PTR = "factor/block_ptr"
FACTOR_A_SQNORM = "factor/a_sqnorm"


def array_name(layout: str, field: str) -> str:
    """Full array name of ``field`` (indptr, indices, data, block_ptr) in ``layout``."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")
    return f"{layout}/{field}"


def inner_chunk_len(chunk_len: int) -> int:
    """Elements per inner chunk of a chunk of ``chunk_len`` (``chunk_len`` itself: not split).

    The largest split into at most :data:`INNER_CHUNKS` equal pieces (a power of two that
    divides ``chunk_len``) whose pieces keep at least :data:`MIN_INNER_CHUNK_LEN` elements.
    """
    chunk_len = int(chunk_len)
    k = INNER_CHUNKS
    while k > 1 and (chunk_len % k or chunk_len // k < MIN_INNER_CHUNK_LEN):
        k //= 2
    return chunk_len // k


def index_dtype_for(n_max: int) -> np.dtype:
    """Smallest index dtype (int32 or int64) that holds ids up to ``n_max``."""
    return np.dtype(np.int32) if n_max < 2**31 - 1 else np.dtype(np.int64)


def entry_bytes(data_dtype: np.dtype, index_dtype: np.dtype) -> int:
    """Decoded bytes of one stored nonzero (index + value)."""
    return np.dtype(data_dtype).itemsize + np.dtype(index_dtype).itemsize


def block_boundaries(nnz_per_line: np.ndarray, entry_nbytes: int, block_bytes: int) -> np.ndarray:
    """Split lines (rows or columns) into consecutive blocks of about ``block_bytes``.

    A block holds as many whole lines as fit in ``block_bytes`` decoded bytes
    (entries plus one indptr slot per line), and at least one line: a single line
    larger than that is a block of its own. So no block exceeds ``block_bytes``
    unless it is one line, which readers and the transpose rely on to stay within
    their memory budget. Returns the block pointer: first line of each block, then
    the count.
    """
    # one O(lines) array, computed in place (a wide store's columns: each temporary is 8 bytes a column)
    sizes = np.multiply(nnz_per_line, entry_nbytes, dtype=np.int64)
    sizes += INDPTR_DTYPE.itemsize
    n = len(sizes)
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    cum = np.cumsum(sizes, out=sizes)  # in place: one O(lines) temporary, not two (a wide store's columns)
    ptr = [0]
    base = 0
    while True:
        # lines ptr[-1]..stop-1 are those whose running size since ptr[-1] fits the budget
        stop = int(np.searchsorted(cum, base + block_bytes, side="right"))
        stop = max(stop, ptr[-1] + 1)
        if stop >= n:
            ptr.append(n)
            break
        ptr.append(stop)
        base = int(cum[stop - 1])
    return np.asarray(ptr, dtype=np.int64)


class BlockCutter:
    """:func:`block_boundaries` computed as lines stream in, in O(blocks) memory.

    Feeding the per-line nonzero counts chunk by chunk gives the same pointer as
    ``block_boundaries`` on all of them, however they are chunked, without ever
    holding O(n) counts (the row pass must stay bounded whatever the row count).
    """

    def __init__(self, entry_nbytes: int, block_bytes: int):
        self.entry_nbytes = int(entry_nbytes)
        self.block_bytes = int(block_bytes)
        self.ptr = [0]
        self.n = 0          # lines seen
        self.open_bytes = 0  # decoded bytes of the block being filled

    def add(self, nnz_per_line: np.ndarray) -> None:
        sizes = np.asarray(nnz_per_line, dtype=np.int64) * self.entry_nbytes + INDPTR_DTYPE.itemsize
        m = len(sizes)
        if m == 0:
            return
        cum = np.cumsum(sizes)
        pos, base = 0, 0  # first line of this chunk not yet placed; cum before it
        while pos < m:
            stop = int(np.searchsorted(cum, base + self.block_bytes - self.open_bytes, side="right"))
            if stop >= m:  # the rest fits in the open block, which stays open
                self.open_bytes += int(cum[-1]) - base
                break
            if stop == pos:
                if self.open_bytes:  # line ``pos`` does not fit: close the open block first
                    self.ptr.append(self.n + pos)
                    self.open_bytes = 0
                    continue
                stop = pos + 1  # a line larger than the budget is a block of its own
            self.ptr.append(self.n + stop)
            self.open_bytes = 0
            base = int(cum[stop - 1])
            pos = stop
        self.n += m

    def finish(self) -> np.ndarray:
        """The block pointer: first line of each block, then the line count."""
        ptr = list(self.ptr)
        if self.n > ptr[-1]:
            ptr.append(self.n)
        return np.asarray(ptr, dtype=np.int64)


def worth_compressing(sample) -> bool:
    """Whether an array whose first values are ``sample`` should be stored compressed.

    The test is the ratio Blosc (byte shuffle + LZ4, what the Zarr backend uses) gets on
    at most :data:`COMPRESSION_SAMPLE_BYTES` of them, against :data:`MIN_COMPRESSION_RATIO`.
    An empty or missing sample answers yes (nothing to measure; compression costs nothing
    on an array that stays tiny). The first values stand for the array: a file whose
    values change character further down keeps the choice made on its start.
    """
    if sample is None or np.size(sample) == 0:
        return True
    from numcodecs import Blosc

    sample = np.ascontiguousarray(sample).reshape(-1)
    head = sample[:max(1, COMPRESSION_SAMPLE_BYTES // max(1, sample.itemsize))]
    enc = Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE).encode(head)
    return head.nbytes >= MIN_COMPRESSION_RATIO * len(enc)
