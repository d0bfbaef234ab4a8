"""Streaming conversion of inputs into a store, and the out-of-core transpose.

``convert`` reads its input in pieces (text chunks parsed by the compiled
readers, or slices of in-memory arrays), appends them to the row layout, and
then builds the column layout without ever loading the matrix:

1. column blocks are sized from the column nonzero counts (known after the row
   pass);
2. each row block is read back, its entries are bucketed by column block (a
   counting sort, :func:`ooc.kernels.transpose.bucket_entries`) and appended to one
   temporary file per column block;
3. each bucket is loaded alone and counting-sorted by column into place, in two
   passes (:func:`ooc.kernels.transpose.group_entries`, then ``order_groups``; row
   order within a column is preserved because buckets are filled in row order), then
   appended to ``cols/indices`` and ``cols/data``.

Peak memory is about ``memory``: text chunks, row blocks and buckets are all
sized from it.

In-memory matrices and .npz files are checked whole before anything reads them
(:func:`check_matrix`, :func:`load_npz`: shapes, dtypes, index arrays, finite values and
labels, in bounded pieces), then taken in scipy's canonical form, row chunk by row chunk
(sorted column ids, duplicates summed; see the notes above :class:`MatrixRows`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import warnings
import zipfile
from typing import Callable, Iterator, NamedTuple

import numpy as np

from .. import owned
from .._cpu import Behind, map_threads, resolve_threads
from .._memguard import governed
from .._memlimit import Budget, governor_reserve, peak_rss_bytes, resolve_budget, rss_bytes, work_budget  # noqa: F401
from ..fsutil import disk_full_error, write_all
from ..kernels import entries as _ke
from ..kernels import transpose as _kt
from ..kernels.hash_bits import DEFAULT_HASH_BITS, check_hash_bits
from ..units import format_bytes, parse_bytes, parse_memory
from . import input_rules
from . import layout as L
from .backend import MemoryBackend, StoreError
from .input_rules import HEADER_NUMBERED, HeaderGuessWarning
from .readers import (
    InputError,
    RowChunk,
    compression_of,
    csv_layout,
    detect_format,
    forget_streams,
    input_size,
    is_stream,
    is_url,
    iter_csv,
    iter_svmlight,
    iter_text,
    iter_vw,
    overflow_limit,
    spooled,
    text_layout,
)
from .recipe import (
    HASHED,
    Options,
    Recipe,
    check_base_recorded,
    check_file_format,
    check_not_binary,
    check_path,
    fmt_name,
    from_options,
    header_order,
    pass_base,
    text_order,
)
from .stats import physical_memory
from .store import BACKENDS, Store, open_store
from .writer import (
    Appender,
    StoreWriter,
    Temporary,
    check_output_store,
    output_location,
    publish,
    remove_stale_temporaries,
)


class _Restart(Exception):
    """The first pass guessed wrong (index base or index width): start over with ``changes``."""

    def __init__(self, **changes):
        super().__init__(changes)
        self.changes = changes


def memory_budget(text, option: str = "--memory") -> int:
    """The bytes a command's work may add to this process for a memory option (see :mod:`ooc._memlimit`:
    ``auto``, and the whole process on the command line)."""
    return work_budget(parse_memory(text, option))


def command_budget(memory, option: str = "--memory", held: int | None = None) -> Budget:
    """A command's memory option (text, bytes, None or ``'auto'``; or a :class:`~ooc._memlimit.Budget`
    already resolved, passed on) resolved once (:func:`ooc._memlimit.resolve_budget`).

    ``held``: at least what the process holds (:func:`load_kernels`' peak); its resident size when more."""
    if isinstance(memory, Budget):
        return memory
    return resolve_budget(parse_memory(memory, option), held=max(rss_bytes(), held or 0))


#: What a command that reads data needs at least beyond the process and its O(d) arrays: its read,
#: parse and write buffers at their smallest useful size (below it the floors of 64 KiB blocks take over
#: and a pass is slow, not smaller).
MIN_WORK = 16 << 20

#: The largest block of text a reader takes at once (a line may be up to two: ``input_rules.LINE_CHUNKS``).
MAX_TEXT_CHUNK = 64 << 20
#: A text reader's blocks are this fraction of the buffers' memory (their copies, the parsed entries and
#: the rows written from them take the rest).
TEXT_CHUNK_SHARE = 12


def text_chunk_bytes(buffers: int) -> int:
    """The text block a reader gets from ``buffers`` bytes of buffer memory: a :data:`TEXT_CHUNK_SHARE`-th
    of it, at least 64 KiB, at most :data:`MAX_TEXT_CHUNK`."""
    return int(min(MAX_TEXT_CHUNK, max(buffers // TEXT_CHUNK_SHARE, 1 << 16)))


def lines_held(chunks, budget: Budget, source: str, buffers: int, work_for: Callable[[int], int]):
    """``chunks`` (a text reader's, whose blocks were sized from ``buffers`` bytes by
    :func:`text_chunk_bytes`); a line longer than those blocks hold (the reader's ``line_too_long``,
    which measures it) is refused naming the memory that holds it, when one does
    (:meth:`~ooc._memlimit.Budget.refuse`): ``work_for(need)`` is the work whose buffers are ``need``
    bytes, for the command that reads (its other holdings beside them). The one rule of every command that
    reads text (convert, append, predict, evaluate); they publish their output only once every chunk was
    read, so nothing is written."""
    from .input_rules import LINE_CHUNKS, max_line_bytes

    try:
        yield from chunks
    except InputError as exc:
        length = getattr(exc, "line_bytes", None)
        if length is None or length > max_line_bytes(MAX_TEXT_CHUNK):
            raise
        need = max(MIN_WORK, TEXT_CHUNK_SHARE * -(-length // LINE_CHUNKS))
        budget.refuse(max(work_for(need), budget.work + 1),
                      f"line {exc.line} of {source} is {length} bytes, longer than its blocks hold (lines of "
                      f"{max_line_bytes(text_chunk_bytes(buffers))} bytes at most)")
        raise


def whole_input_bytes(source, fmt: str | None = None) -> int:
    """What reading ``source`` holds at once whatever the buffers: an .npz file's arrays, decoded whole
    (:func:`load_npz`: a member of a zip cannot be memory-mapped), their sizes read from the zip's directory
    (``fmt``: the format it is read as, None: its own, :func:`~ooc.store.readers.detect_format`). 0 for
    what is read a piece at a time and an in-memory matrix (already held). A stream of an .npz (standard
    input, a pipe) is spooled to a temporary file first (:func:`~ooc.store.readers.spooled`, its bytes on
    disk, never in memory whole) and charged as that file is."""
    from .readers import is_local

    if not isinstance(source, (str, os.PathLike)):
        return 0
    path = os.fspath(source)
    stream = is_stream(path)
    if not stream and (not is_local(path) or not os.path.isfile(path)):
        return 0
    try:
        if (fmt or detect_format(path)) != "npz":
            return 0
        archive = spooled(path) if stream else path
        if not zipfile.is_zipfile(archive):
            return 0
        with zipfile.ZipFile(spooled(path) if stream else path) as z:
            return sum(i.file_size for i in z.infolist())
    except (OSError, ValueError, zipfile.BadZipFile, InputError):  # unreadable: refused as it is read
        return 0


#: Bytes a column costs a conversion at once: its nonzero count and squared norm while rows are read
#: (8 + 8), then its count, its pointer of the column layout and a cut's running sums (8 + 8 + 8).
COLUMN_BYTES = 24


def column_bytes(n_cols: int) -> int:
    """What ``n_cols`` columns' statistics and pointers hold during a conversion (:data:`COLUMN_BYTES`)."""
    return COLUMN_BYTES * int(n_cols)


def column_limit(held: int = 0) -> int:
    """The most columns a conversion can hold on this machine at all: what its physical memory
    (:func:`ooc.store.stats.physical_memory`) leaves beside what the process holds (``held``: a resolved
    budget's) and the smallest buffers (:data:`MIN_WORK`), at :data:`COLUMN_BYTES` a column.

    A feature id is a promise of memory (``d = largest id + 1`` columns, :func:`column_bytes` of them), so
    one past this (an id of ``3e9`` on a small machine) is refused up front, naming the line that holds it
    and a hint to hash: no memory option or limit can hold it. Below it, a ``--memory`` or a limit (a
    cgroup's, ``RLIMIT_AS``) too small for the columns is refused naming the figure that holds them
    (:func:`require_columns`). The per-column vectors a training of the store keeps are the training's to
    say (``ooc info``, ``ooc train``), not the conversion's.
    """
    room = (physical_memory() or 1 << 62) - int(held) - MIN_WORK
    return max(0, room) // COLUMN_BYTES


def too_many_columns(n_cols: int, limit: int, cause: str) -> str:
    """The message for a store of ``n_cols`` columns (because of ``cause``) when ``limit`` fit
    (:func:`column_limit`)."""
    return (f"{cause} makes {n_cols:,} columns, more than the {limit:,} a conversion can hold on this machine "
            f"({(physical_memory() or 0) / 2**30:.3g} GiB of memory, at {COLUMN_BYTES} bytes per column); hash the "
            "features into fewer columns (e.g. id % 2**24) or use a machine with more memory")


def require_columns(budget: Budget, n_cols: int, what: str) -> None:
    """Refuse (:class:`~ooc._memlimit.MemoryTooSmall`) a budget whose work cannot hold ``n_cols`` columns'
    arrays (:func:`column_bytes`) beside the smallest buffers, naming the smallest figure that works: an
    explicit ``--memory`` (:meth:`~ooc._memlimit.Budget.require`) and ``auto`` under a limit found
    (:meth:`~ooc._memlimit.Budget.refuse`: no buffer shrinks the columns' arrays)."""
    need = column_bytes(n_cols) + MIN_WORK
    budget.require(need, what)
    if budget.work < need:
        budget.refuse(need, f"{what} holds {format_bytes(need)} at once")


def check_columns(budget: Budget, n_cols: int, cause: str, what: str) -> None:
    """``n_cols`` columns (because of ``cause``: ``--hash-bits 24``, ``n_features=...``) checked against
    the conversion's own needs: refused with the hint to hash beyond :func:`column_limit`, else naming the
    figure that holds them when ``budget`` does not (:func:`require_columns`)."""
    limit = column_limit(budget.held + budget.reserved)
    if n_cols > limit:
        raise ValueError(too_many_columns(n_cols, limit, cause))
    require_columns(budget, n_cols, what)


def writer_bytes(chunk_len: int, dtype, index_dtype) -> int:
    """What a :class:`~ooc.store.writer.StoreWriter` holds at once in its arrays' chunk buffers (and a
    chunk of each in flight to the backend): row pointers, ids, values, labels, per-row counts, norms and
    weights, two chunks each."""
    per_entry = np.dtype(dtype).itemsize + np.dtype(index_dtype).itemsize + 5 * 8
    return 2 * int(chunk_len) * per_entry


def width_bound(width: int) -> int:
    """The columns a conversion sizes for when ``width`` ids were read so far and more may come: the next
    power of two (a hashed feature space's), not only the ids read so far."""
    return 1 << (max(int(width), 1) - 1).bit_length()


def unknown_width_bytes(width: int) -> int:
    """The work an input that does not say its width (svmlight) needs for ``width`` columns when its buffers
    were sized before any id was read: three times their arrays (a third of the work is kept for them,
    :func:`buffer_budget`), for :func:`width_bound` columns."""
    return 3 * column_bytes(width_bound(width))


def buffer_budget(budget: Budget, n_cols: int | None) -> int:
    """Bytes a conversion's read, parse, write and transpose buffers get: the work less the columns'
    arrays (:func:`column_bytes`; a third of the work while their count is unknown), at least
    :data:`MIN_WORK` (or the whole work when it is less: a Python caller's small ``memory``). A Python
    caller's explicit ``memory`` (no ceiling) is the buffers' as it is."""
    if budget.ceiling is None:
        return budget.work
    keep = budget.work // 3 if n_cols is None else column_bytes(n_cols)
    return max(min(budget.work, MIN_WORK), budget.work - keep)


# -- sources -> row chunks -------------------------------------------------------------
#
# An in-memory matrix (a numpy array, any scipy sparse matrix, the arrays of an .npz) and its
# labels are checked whole before anything else reads them: scipy's sparsetools and ooc's
# kernels index memory with ``indptr`` and ``indices`` as given, so a decreasing ``indptr`` or
# an id beyond the columns would read or write outside the arrays (a crash, or a store of
# garbage). Every scan goes over at most ``_SCAN`` entries at a time, so the checks' temporaries
# stay a few MiB whatever the input size, and nothing is ever densified.
#
# Column ids: the store and the kernels take the ids of a row sorted and unique (svmlight files
# with decreasing or repeated ids are refused by the readers, naming the line). A matrix is
# taken in scipy's canonical form instead, as scipy itself reads it: the ids of each row are
# sorted and duplicate entries summed (``sum_duplicates()``), one row chunk at a time. Explicit
# zeros are kept (as in svmlight files); a dense array's zeros are not entries.

#: Entries one validation step looks at (its temporaries are a few bytes per entry).
_SCAN = 1 << 20
#: dtype kinds a value or a label may have: bool, signed and unsigned integers, floats.
_NUMBER_KINDS = "biuf"
_KIND_NAMES = {"c": "complex numbers", "O": "Python objects", "U": "strings", "S": "byte strings",
               "V": "structured records", "M": "dates", "m": "time deltas"}
#: The scipy ``save_npz`` formats an .npz may hold, and the arrays each needs besides ``shape``.
_NPZ_SPARSE = {"csr": ("data", "indices", "indptr"), "csc": ("data", "indices", "indptr"),
               "coo": ("data", "row", "col")}


class _Origin(NamedTuple):
    """Where a matrix comes from, to name it in errors: an .npz file (``path``) or memory."""

    path: str | None = None

    def name(self, key: str) -> str:
        """How an error names one of the source's arrays: the .npz key, or ``X.indptr``, ``y``..."""
        if self.path is not None:
            return repr(key)
        return self.ref(key)

    def ref(self, key: str) -> str:
        """How an error indexes one of the arrays: ``indptr[3]`` (an .npz key), ``X.indptr[3]``."""
        if self.path is not None or key in ("X", "y"):
            return key
        return f"X.{key}"

    def error(self, message: str) -> ValueError:
        """The exception to raise: :class:`InputError` (naming the file) for an .npz, else ValueError."""
        return InputError(self.path, message) if self.path is not None else ValueError(message)


class MatrixRows(NamedTuple):
    """A checked in-memory matrix, read by rows (from :func:`check_matrix` or :func:`load_npz`).

    Either ``dense`` (a 2-D array of numbers) or CSR arrays (``indptr`` of ``n_rows + 1``
    non-decreasing offsets from 0 to ``len(indices) == len(data)``, ``indices`` in
    ``[0, n_cols)``, finite numeric ``data``), the ids of a row possibly unsorted or repeated:
    :func:`matrix_chunks` makes each chunk canonical.
    """

    n_rows: int
    n_cols: int
    dense: np.ndarray | None = None
    indptr: np.ndarray | None = None
    indices: np.ndarray | None = None
    data: np.ndarray | None = None


def _check_numbers(dtype, name: str, origin: _Origin, what: str) -> None:
    """Refuse a dtype that is not bool, integer or float (objects, strings, complex...)."""
    dtype = np.dtype(dtype)
    if dtype.kind not in _NUMBER_KINDS:
        held = _KIND_NAMES.get(dtype.kind, f"values of dtype {dtype}")
        raise origin.error(f"{name} holds {held} (dtype {dtype}); {what} must be real numbers "
                           "(bool, integer or float)")


def _check_ids(a, name: str, origin: _Origin) -> np.ndarray:
    """An index array (indptr, indices, row, col): 1-D integers."""
    a = np.asarray(a)
    if a.ndim != 1:
        raise origin.error(f"{name} must be 1-D, got shape {a.shape}")
    if a.dtype.kind not in "iu":
        raise origin.error(f"{name} has dtype {a.dtype}; expected integers")
    return a


def _first_decrease(a: np.ndarray) -> int | None:
    """Smallest ``k`` with ``a[k + 1] < a[k]``, or None."""
    for s in range(0, len(a) - 1, _SCAN):
        seg = a[s:s + _SCAN + 1]
        bad = seg[1:] < seg[:-1]
        if bad.any():
            return s + int(np.argmax(bad))
    return None


def _first_outside(a: np.ndarray, n: int) -> int | None:
    """Smallest ``k`` with ``a[k]`` outside ``[0, n)``, or None."""
    for s in range(0, len(a), _SCAN):
        seg = a[s:s + _SCAN]
        if int(seg.min()) < 0 or int(seg.max()) >= n:
            return s + int(np.flatnonzero((seg < 0) | (seg >= n))[0])
    return None


def _first_nonfinite(a: np.ndarray) -> int | None:
    """Smallest ``k`` with ``a[k]`` NaN or infinite (1-D ``a``), or None."""
    if a.dtype.kind != "f":
        return None
    for s in range(0, len(a), _SCAN):
        ok = np.isfinite(a[s:s + _SCAN])
        if not ok.all():
            return s + int(np.argmin(ok))
    return None


def _check_shape(shape, name: str, origin: _Origin) -> tuple[int, int]:
    """``(n_rows, n_cols)``: two integers >= 0, the columns within what fits here."""
    shape = np.asarray(shape)
    if shape.shape != (2,) or shape.dtype.kind not in "iu" or int(shape.min()) < 0:
        raise origin.error(f"{name} must be two integers >= 0 (rows, columns), got {shape.tolist()!r}")
    n, d = int(shape[0]), int(shape[1])
    if d > column_limit():  # what no budget here holds; a conversion checks its own (check_columns)
        raise origin.error(too_many_columns(d, column_limit(), f"{name} {(n, d)}"))
    return n, d


def _check_compressed(indptr, indices, n_values: int, n_major: int, n_minor: int, origin: _Origin,
                      major: str = "row", minor: str = "column") -> tuple[np.ndarray, np.ndarray]:
    """Check the ``indptr``/``indices`` of a CSR (CSC: ``major='column'``) matrix; returns them."""
    ip, ix = origin.name("indptr"), origin.name("indices")
    indptr = _check_ids(indptr, ip, origin)
    indices = _check_ids(indices, ix, origin)
    if len(indptr) != n_major + 1:
        raise origin.error(f"{ip} has {len(indptr)} entries; {n_major} {major}s need {n_major + 1}")
    if int(indptr[0]) != 0:
        raise origin.error(f"{ip} starts at {int(indptr[0])}, not 0")
    k = _first_decrease(indptr)
    if k is not None:
        ref = origin.ref("indptr")
        raise origin.error(f"{ip} decreases at {major} {k}: {ref}[{k}] = {int(indptr[k])} > "
                           f"{ref}[{k + 1}] = {int(indptr[k + 1])}")
    end = int(indptr[-1])
    if not end == len(indices) == n_values:
        raise origin.error(f"{ip} ends at {end} but {ix} has {len(indices)} entries and "
                           f"{origin.name('data')} {n_values}; all three must agree")
    k = _first_outside(indices, n_minor)
    if k is not None:
        at = int(np.searchsorted(indptr, k, side="right")) - 1
        raise origin.error(f"{origin.ref('indices')}[{k}] = {int(indices[k])} ({major} {at}) is not a {minor} id: "
                           f"the matrix has {n_minor} {minor}s (0 to {n_minor - 1})")
    return indptr, indices


def _check_coo(row, col, n_values: int, n_rows: int, n_cols: int, origin: _Origin):
    """Check the ``row``/``col`` arrays of a COO matrix; returns them."""
    out = []
    for key, a, n, what in (("row", row, n_rows, "rows"), ("col", col, n_cols, "columns")):
        name = origin.name(key)
        a = _check_ids(a, name, origin)
        if len(a) != n_values:
            raise origin.error(f"{name} has {len(a)} entries but {origin.name('data')} has {n_values}")
        k = _first_outside(a, n)
        if k is not None:
            raise origin.error(f"{origin.ref(key)}[{k}] = {int(a[k])} is out of range: the matrix has {n} {what} "
                               f"(0 to {n - 1})")
        out.append(a)
    return out


def _finite_csr(n: int, d: int, indptr, indices, data, origin: _Origin, data_key: str) -> MatrixRows:
    """The checked CSR matrix, once its values are known finite (naming the first that is not)."""
    k = _first_nonfinite(data)
    if k is not None:
        r = int(np.searchsorted(indptr, k, side="right")) - 1
        raise origin.error(f"{origin.name(data_key)} has a value that is not finite: "
                           f"X[{r}, {int(indices[k])}] = {data[k]}")
    return MatrixRows(n, d, None, indptr, indices, data)


def _sparse_parts(fmt: str, n: int, d: int, parts: dict, origin: _Origin) -> MatrixRows:
    """A CSR, CSC or COO matrix given as its arrays (scipy's attributes, or an .npz's keys), checked."""
    import scipy.sparse as sp

    dn = origin.name("data")
    data = np.asarray(parts["data"])
    _check_numbers(data.dtype, dn, origin, "matrix values")
    if data.ndim != 1:
        raise origin.error(f"{dn} must be 1-D, got shape {data.shape}")
    if fmt == "csr":
        indptr, indices = _check_compressed(parts["indptr"], parts["indices"], len(data), n, d, origin)
        return _finite_csr(n, d, indptr, indices, data, origin, "data")
    # checked, the arrays are safe for scipy's compiled conversion to CSR (which also sums duplicates
    # for COO); scipy takes no float16, and the store keeps float64 or float32 anyway
    values = data.astype(np.float64, copy=False)
    if fmt == "csc":
        indptr, indices = _check_compressed(parts["indptr"], parts["indices"], len(data), d, n, origin,
                                            major="column", minor="row")
        m = sp.csc_matrix((values, indices.astype(np.int64, copy=False), indptr.astype(np.int64, copy=False)),
                          shape=(n, d)).tocsr()
    else:
        row, col = _check_coo(parts["row"], parts["col"], len(data), n, d, origin)
        m = sp.coo_matrix((values, (row.astype(np.int64, copy=False), col.astype(np.int64, copy=False))),
                          shape=(n, d)).tocsr()
    return _finite_csr(n, d, m.indptr, m.indices, m.data, origin, "data")


def _dense(X: np.ndarray, origin: _Origin) -> MatrixRows:
    name = origin.name("X")
    if X.ndim != 2:
        raise origin.error(f"{name} must be 2-D (rows x features), got shape {X.shape}")
    _check_numbers(X.dtype, name, origin, "its values")
    n, d = X.shape
    if d > column_limit():
        raise origin.error(too_many_columns(d, column_limit(), f"{name} of shape {X.shape}"))
    if X.dtype.kind == "f":
        step = max(1, _SCAN // max(d, 1))
        for s in range(0, n, step):
            ok = np.isfinite(X[s:s + step])
            if not ok.all():
                r, c = (int(v) for v in np.argwhere(~ok)[0])
                raise origin.error(f"{name} has a value that is not finite: X[{s + r}, {c}] = {X[s + r, c]}")
    return MatrixRows(n, d, dense=X)


def check_sparse_structure(X) -> tuple[int, int]:
    """Check a scipy sparse matrix's shape and index arrays (not its values); returns its shape.

    scipy's compiled routines (``tocsr``, products, slicing) trust ``indptr``/``indices``
    (``row``/``col`` for COO): call this before any of them sees a matrix from elsewhere.
    CSR, CSC, COO and BSR are checked; the other formats (DIA, LIL, DOK) are converted by
    scipy in Python, with its own checks.

    Raises
    ------
    ValueError
        One line naming the array (``X.indptr``, ``X.row``...), the position and the value.
    """
    origin = _Origin()
    shape = tuple(X.shape)
    if len(shape) != 2:
        raise ValueError(f"X must be 2-D (rows x features), got a sparse {X.format} of shape {shape}")
    n, d = _check_shape(np.asarray(shape, dtype=np.int64), "X.shape", origin)
    fmt = X.format
    n_values = len(X.data) if fmt != "dok" else 0
    if fmt in ("csr", "csc", "coo") and np.ndim(X.data) != 1:
        raise ValueError(f"X.data must be 1-D, got shape {np.shape(X.data)}")
    if fmt == "csr":
        _check_compressed(X.indptr, X.indices, n_values, n, d, origin)
    elif fmt == "csc":
        _check_compressed(X.indptr, X.indices, n_values, d, n, origin, major="column", minor="row")
    elif fmt == "coo":
        _check_coo(X.row, X.col, n_values, n, d, origin)
    elif fmt == "bsr":
        # blocks of R x C values: the same checks, on block rows and block columns
        R, C = X.blocksize
        data = np.asarray(X.data)
        if data.ndim != 3 or data.shape[1:] != (R, C) or n % R or d % C:
            raise ValueError(f"X.data has shape {data.shape}: a bsr matrix of shape {shape} with blocks "
                             f"{(R, C)} needs (blocks, {R}, {C}) and a shape divisible by the block size")
        _check_compressed(X.indptr, X.indices, len(data), n // R, d // C, origin, "block row", "block column")
    return n, d


def check_matrix(X) -> MatrixRows:
    """Check an in-memory matrix before anything indexes memory with it.

    Parameters
    ----------
    X : array-like or scipy sparse matrix/array of any format
        2-D, real numbers (bool, integer or float), all finite. A sparse matrix's arrays
        must be consistent (:func:`check_sparse_structure`); formats other than CSR are
        converted to CSR once checked.

    Returns
    -------
    MatrixRows

    Raises
    ------
    ValueError
        One line naming the array (``X``, ``X.indptr``, ...), the position and the value.
    """
    import scipy.sparse as sp

    origin = _Origin()
    if not sp.issparse(X):
        try:
            A = np.asarray(X)
        except (ValueError, TypeError) as exc:  # e.g. rows of different lengths
            raise ValueError(f"X cannot be read as a 2-D array of numbers: {' '.join(str(exc).split())}") from None
        return _dense(A, origin)
    n, d = check_sparse_structure(X)
    _check_numbers(X.dtype, "X", origin, "its values")
    try:  # checked, the index arrays are safe for scipy's compiled conversions (csr: X itself)
        m = X.tocsr()
    except Exception as exc:
        raise ValueError(f"X (a scipy {X.format} matrix) cannot be read: {' '.join(str(exc).split())}") from None
    if X.format not in ("csr", "csc", "coo", "bsr"):  # made by scipy's Python code: check what it made
        _check_compressed(m.indptr, m.indices, len(m.data), n, d, origin)
    return _finite_csr(n, d, m.indptr, m.indices, m.data, origin, "data")


def check_labels(y, n_rows: int, name: str = "y", path: str | None = None) -> np.ndarray:
    """Check labels against a matrix of ``n_rows`` rows; returns them as float64.

    ``y`` must be 1-D, of length ``n_rows``, real numbers (bool, integer or float), all
    finite. Errors are one line naming ``name`` (and ``path``, an .npz, as :class:`InputError`).
    """
    origin = _Origin(path)
    shown = repr(name) if path is not None else name
    try:
        y = np.asarray(y)
    except (ValueError, TypeError) as exc:
        raise origin.error(f"{shown} cannot be read as an array of labels: {' '.join(str(exc).split())}") from None
    _check_numbers(y.dtype, shown, origin, "labels")
    if y.ndim != 1:
        hint = " (a column: pass y.ravel())" if y.ndim == 2 and y.shape[1] == 1 else ""
        raise origin.error(f"{shown} must be 1-D (one label per row), got shape {y.shape}{hint}")
    if len(y) != n_rows:
        raise origin.error(f"X has {n_rows} rows but {shown} has {len(y)} labels")
    k = _first_nonfinite(y)
    if k is not None:
        raise origin.error(f"{shown} has a label that is not finite: {name}[{k}] = {y[k]}")
    return y.astype(np.float64, copy=False)


def check_weights(w, n_rows: int, name: str = "sample_weight", path: str | None = None) -> np.ndarray:
    """Check per-row sample weights against a matrix of ``n_rows`` rows; returns them as float64.

    ``w`` must be 1-D, of length ``n_rows``, real numbers, finite and ``>= 0`` (scikit-learn
    refuses negative weights too). Errors are one line naming ``name`` and the first bad row
    (and ``path``, an .npz, as :class:`InputError`).
    """
    origin = _Origin(path)
    shown = repr(name) if path is not None else name
    try:
        w = np.asarray(w)
    except (ValueError, TypeError) as exc:
        raise origin.error(f"{shown} cannot be read as an array of weights: {' '.join(str(exc).split())}") from None
    _check_numbers(w.dtype, shown, origin, "sample weights")
    if w.ndim != 1:
        raise origin.error(f"{shown} must be 1-D (one weight per row), got shape {w.shape}")
    if len(w) != n_rows:
        raise origin.error(f"X has {n_rows} rows but {shown} has {len(w)} weights")
    w = w.astype(np.float64, copy=False)
    bad = np.flatnonzero(~(np.isfinite(w) & (w >= 0)))
    if len(bad):
        k = int(bad[0])
        raise origin.error(f"{shown} has a weight that is not finite and >= 0: {name}[{k}] = {w[k]}")
    if n_rows and not w.any():  # (scikit-learn's message) nothing to fit: every row's loss is multiplied by 0
        raise origin.error(f"Sample weights must contain at least one non-zero number: every weight of {shown} is 0")
    return w


def _npz_array(z, key: str, origin: _Origin) -> np.ndarray:
    """One array of an open .npz, read without unpickling; any failure is one line naming the key."""
    try:
        return z[key]
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise origin.error(f"{key!r} holds Python objects (a pickled array); ooc reads only arrays of numbers "
                               "and never unpickles (allow_pickle=False)") from None
        raise origin.error(f"{key!r} cannot be read: {' '.join(str(exc).split())}") from None
    except Exception as exc:  # a damaged or truncated member (zipfile, zlib, EOF errors)
        raise origin.error(f"{key!r} cannot be read ({type(exc).__name__}): {' '.join(str(exc).split())}") from None


def _npz_format(z, keys: set, origin: _Origin) -> str:
    """The sparse format of an .npz with scipy ``save_npz`` keys (``format``, else guessed from the keys)."""
    if "format" not in keys:
        return "coo" if {"row", "col"} <= keys else "csr"
    f = _npz_array(z, "format", origin)
    value = f.item() if f.ndim == 0 and f.dtype.kind in "SU" else None
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if value not in _NPZ_SPARSE:
        shown = value if value is not None else f.tolist()
        raise origin.error(f"'format' is {shown!r}: the sparse formats read are csr, csc and coo "
                           "(save X.tocsr())")
    return value


def load_npz(path: str, labels_required: bool = True) -> tuple[MatrixRows, np.ndarray | None]:
    """The checked matrix and labels of an .npz file.

    The file holds ``y`` (or ``labels``; without them, when ``labels_required`` is False, the
    labels returned are None) and either ``X`` (a dense 2-D array) or the arrays of
    :func:`scipy.sparse.save_npz` for CSR, CSC or COO: ``format`` (optional, CSR by default,
    COO when there are ``row``/``col`` arrays), ``shape``, ``data`` and ``indices``/``indptr``
    (CSR, CSC) or ``row``/``col`` (COO). Other keys are ignored. Nothing is unpickled.

    Raises
    ------
    InputError
        One line naming the file and the key (and the row, for a value).
    """
    origin = _Origin(path)
    file = _npz_file(path)  # (its own refusals are InputErrors, ValueErrors: not numpy's below)
    try:
        z = np.load(file, allow_pickle=False)
    except ValueError:  # neither a zip nor an .npy: numpy would unpickle it
        raise origin.error("not an .npz archive (a zip of .npy arrays); pickled files are not read") from None
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise origin.error(f"cannot read the .npz archive: {' '.join(str(exc).split())}") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise origin.error(f"holds one .npy array of shape {np.shape(z)}, not an .npz archive of named arrays "
                           "('X' and 'y', or scipy.sparse.save_npz's arrays and 'y')")
    with z:
        keys = set(z.files)
        ykey = "y" if "y" in keys else ("labels" if "labels" in keys else None)
        if ykey is None and labels_required:
            raise origin.error(f"no 'y' (or 'labels') array in the .npz (it has {', '.join(sorted(keys)) or 'none'})")
        if "X" in keys:
            rows = _dense(_npz_array(z, "X", origin), origin)
        elif "format" in keys or {"shape", "data"} <= keys:
            fmt = _npz_format(z, keys, origin)
            missing = [k for k in ("shape", *_NPZ_SPARSE[fmt]) if k not in keys]
            if missing:
                raise origin.error(f"a {fmt} matrix needs the arrays shape, {', '.join(_NPZ_SPARSE[fmt])}; "
                                   f"missing {', '.join(missing)}")
            n, d = _check_shape(_npz_array(z, "shape", origin), "'shape'", origin)
            parts = {k: _npz_array(z, k, origin) for k in _NPZ_SPARSE[fmt]}
            rows = _sparse_parts(fmt, n, d, parts, origin)
        else:
            raise origin.error("expected an 'X' array (dense) or scipy.sparse.save_npz's arrays (format, shape, "
                               "data, indices and indptr; row and col for coo)")
        y = check_labels(_npz_array(z, ykey, origin), rows.n_rows, ykey, path) if ykey else None
    return rows, y


def _npz_file(path):
    """What ``np.load`` reads an .npz from: the path, or a stream input spooled to a temporary file (a zip is
    read by seeking; standard input and pipes cannot seek): :func:`~ooc.store.readers.spooled`.

    A compressed .npz (``gzip`` of one: its arrays are read whole, so it is not decompressed on the fly as
    text is) is refused naming its compression, rather than as "not an .npz archive"."""
    if is_stream(path):
        found = spooled(path)
        head = found.read(6)
        found.seek(0)
    else:
        with open(path, "rb") as f:
            head, found = f.read(6), path
    packed = compression_of(head)
    if packed is not None:
        raise InputError(path, f"is a {packed}-compressed file, not an .npz archive: an .npz is read uncompressed "
                               "(decompress it first; numpy.savez_compressed compresses inside the archive)")
    return found


def load_npz_weights(path: str, n_rows: int) -> np.ndarray | None:
    """The checked per-row sample weights of an .npz (key ``sample_weight``), or None without them."""
    origin = _Origin(path)
    with np.load(_npz_file(path), allow_pickle=False) as z:  # load_npz read it already: an archive
        if "sample_weight" not in z.files:
            return None
        return check_weights(_npz_array(z, "sample_weight", origin), n_rows, "sample_weight", path)


def matrix_chunks(rows: MatrixRows, y: np.ndarray, chunk_bytes: int, rows_per_chunk: int,
                  weights: np.ndarray | None = None) -> Iterator[RowChunk]:
    """Row chunks of a checked matrix, canonical (sorted unique ids, float64 values).

    A chunk holds at most ``rows_per_chunk`` rows and about ``chunk_bytes`` of values (at
    least one row), so converting it needs no copy of the whole matrix. The caller's arrays
    are never modified. ``weights``: checked per-row sample weights, or None.
    """
    import scipy.sparse as sp

    n, d = rows.n_rows, rows.n_cols
    if rows.dense is not None:
        step = max(1, min(rows_per_chunk, chunk_bytes // (8 * max(d, 1))))
        for s in range(0, n, step):
            part = sp.csr_matrix(np.asarray(rows.dense[s:s + step], dtype=np.float64))
            yield RowChunk(y[s:s + step], part.indptr.astype(np.int64), part.indices.astype(np.int64),
                           part.data, s + 1, 0, None if weights is None else weights[s:s + step])
        return
    indptr, indices, data = rows.indptr, rows.indices, rows.data
    max_entries = max(1, chunk_bytes // 16)
    s = 0
    while s < n:
        lo = int(indptr[s])
        e = min(n, s + rows_per_chunk, int(np.searchsorted(indptr, lo + max_entries, side="right")) - 1)
        e = max(e, s + 1)
        hi = int(indptr[e])
        # copies (astype), so canonicalising them leaves the caller's matrix alone
        part = sp.csr_matrix((data[lo:hi].astype(np.float64), indices[lo:hi].astype(np.int64),
                              (indptr[s:e + 1] - lo).astype(np.int64)), shape=(e - s, d))
        part.sum_duplicates()  # sorts the ids of each row and sums repeated ones (scipy's canonical form)
        yield RowChunk(y[s:e], part.indptr.astype(np.int64), part.indices.astype(np.int64),
                       part.data.astype(np.float64, copy=False), s + 1, 0, None if weights is None else weights[s:e])
        s = e


def _source_chunks(source, y, fmt: str | None, chunk_bytes: int, rows_per_chunk: int, dtype,
                   hash_bits: int = DEFAULT_HASH_BITS, text_columns=None, sample_weight=None,
                   weight_column: int | None = None, threads: int = 1, recipe: Recipe | None = None,
                   owner: str | None = None, header: bool | None = None):
    """(chunk iterator, total input bytes or None, source description, ids are 0-based for sure, recipe).

    A file is opened by :func:`ooc.store.recipe.open_input`, with ``recipe`` (how another input
    was read, whose ``owner`` it is) or else the recipe of the options (:func:`~ooc.store.recipe.from_options`).

    The iterator factory carries ``n_cols`` when the source knows its column count (a
    matrix's shape, a CSV's header), since trailing all-zero columns leave no trace in
    the nonzeros. Text readers refuse values that overflow ``dtype`` where they find them;
    matrices and .npz files are checked whole here (:func:`check_matrix`, :func:`load_npz`),
    before anything is written. Hashed inputs (VW, raw text) have ``2**hash_bits`` columns.
    """
    if callable(source):  # a factory of RowChunk iterators (ooc.synth), ids 0-based
        if y is not None:
            raise ValueError("a chunk source brings its own labels: pass y=None")
        if sample_weight is not None:
            raise ValueError("a chunk source brings its own sample weights (RowChunk.weights): pass sample_weight=None")
        return source, None, getattr(source, "description", "<generated>"), True, Recipe("generated", dtype=str(dtype))
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if y is not None:
            raise ValueError(f"{path}: the labels are read from the file: pass y=None")
        if sample_weight is not None:
            raise ValueError(f"{path}: the sample weights are read from the file: pass sample_weight=None "
                             "(a CSV's weights: weight_column; an .npz's: its key 'sample_weight')")
        check_path(path)
        if recipe is None:
            recipe = from_options(Options(fmt, None, hash_bits, text_columns, weight_column, header), path, dtype)
        src = open_input(path, recipe, chunk_bytes=chunk_bytes, rows_per_chunk=rows_per_chunk, dtype=dtype,
                         threads=threads, owner=owner, cast=False)
        make = src.make if src.n_cols is None else _tag_n_cols(src.make, src.n_cols)
        return make, src.total, path, src.recipe.format != "svmlight", src.recipe
    if y is None:
        raise ValueError("converting an array or matrix needs its labels: convert(X, store, y=y)")
    rows = check_matrix(source)
    yy = check_labels(y, rows.n_rows)
    sw = None if sample_weight is None else check_weights(sample_weight, rows.n_rows)
    return (_matrix_source(rows, yy, chunk_bytes, rows_per_chunk, sw), None, f"<{type(source).__name__}>", True,
            Recipe("matrix", dtype=str(dtype)))


class Source(NamedTuple):
    """An opened input: ``make()`` gives its :class:`~ooc.store.readers.RowChunk` s (svmlight ids as
    written; other formats 0-based columns), ``total`` its size in bytes (None: unknown), ``n_cols``
    its declared column count (None: svmlight), ``recipe`` how it is read (the CSV layout found)."""

    make: Callable
    total: int | None
    n_cols: int | None
    recipe: Recipe
    n_rows: int | None = None


def open_input(path: str, recipe: Recipe, *, chunk_bytes: int, rows_per_chunk: int, dtype, threads: int = 1,
               labels_required: bool = True, owner: str | None = None, n_cols_hint: int | None = None,
               say_base=pass_base, cast: bool = True) -> Source:
    """Open the file ``path`` to be read as ``recipe`` says: the one place input files are opened.

    ``recipe.format`` None reads the file by its own format (:func:`ooc.store.readers.detect_format`);
    a hashed file then needs ``hash_bits``, else ``n_cols_hint`` (a power of two) gives them. With
    ``owner`` (a recipe that is someone's), a file whose name or content says another format than a
    strict recipe's is refused (:func:`ooc.store.recipe.check_file_format`); callers pass no owner
    for a file whose format the user stated (``--input-format``) as the recipe's.

    Every format's values come as ``dtype`` (the store's, :meth:`Recipe.values_dtype`, for new input
    read for a model or a store), a value or label that overflows it refused with its line as
    ``ooc convert`` refuses it (:func:`values_as`): a file and the store made from it hold the same
    numbers (``cast=False``: left float64 for a conversion, whose writer casts them with the same
    checks, :func:`_build`, without a second copy). An svmlight
    file read against array columns without an index base (:func:`ooc.store.recipe.check_base_recorded`)
    is refused, ``say_base(b)`` telling how to state it.

    Raises
    ------
    InputError
        The file is missing, named as another format, (CSV) lacks the recorded columns, or
        (svmlight) has no index base to be read with.
    """
    src = _open(path, recipe, chunk_bytes, rows_per_chunk, dtype, threads, labels_required, owner, n_cols_hint,
                say_base)
    if not cast:
        return src
    return src._replace(make=lambda: values_as(src.make(), dtype, path))


def _open(path, recipe, chunk_bytes, rows_per_chunk, dtype, threads, labels_required, owner, n_cols_hint,
          say_base) -> Source:
    """:func:`open_input`, its chunks' values as read (float64, range-checked against ``dtype``)."""
    fmt = recipe.format
    if owner is not None:
        check_file_format(path, recipe, owner, None)
    if fmt is None:
        fmt = detect_format(path)
        recipe = recipe._replace(format=fmt)
    check_not_binary(path, fmt, owner)
    size = input_size(path)
    if fmt in HASHED:
        return _open_hashed(path, recipe, fmt, chunk_bytes, dtype, threads, owner, n_cols_hint, size)
    if fmt == "svmlight":
        check_base_recorded(path, recipe, owner, say_base)

        def make():
            return iter_svmlight(path, chunk_bytes=chunk_bytes, value_dtype=dtype, threads=threads)
        return Source(make, size, None, recipe)
    if fmt == "csv":
        return _open_csv(path, recipe, chunk_bytes, dtype, threads, owner, size)
    if fmt == "npz":
        if is_url(path):
            raise InputError(path, "an .npz archive is read from a local file or standard input only (not a URL)")
        rows, y = load_npz(path, labels_required=labels_required)
        if y is None:
            y = np.zeros(rows.n_rows)
        sw = load_npz_weights(path, rows.n_rows)

        def make():
            return matrix_chunks(rows, y, chunk_bytes, rows_per_chunk, sw)
        return Source(make, None, rows.n_cols, recipe, rows.n_rows)
    raise ValueError(f"unknown input format {fmt!r}")


def _open_hashed(path, recipe, fmt: str, chunk_bytes, dtype, threads, owner, n_cols_hint, size) -> Source:
    """:func:`_open` of a hashed format (Vowpal Wabbit, raw text): the hash bits the recipe records (or the
    width ``n_cols_hint`` says), and raw text's columns found as the recipe names them."""
    bits = recipe.hash_bits
    if bits is None:
        if n_cols_hint is not None:
            bits = n_cols_hint.bit_length() - 1
            if n_cols_hint != 1 << bits:
                raise InputError(path, f"a {fmt_name(fmt)} file is hashed into 2**B columns, but there are "
                                       f"{n_cols_hint}: they were not made from hashed data")
        else:
            bits = DEFAULT_HASH_BITS
    bits = check_hash_bits(bits)
    recipe = recipe._replace(hash_bits=bits)
    if fmt == "vw":
        def make():
            return iter_vw(path, chunk_bytes=chunk_bytes, hash_bits=bits, value_dtype=dtype, threads=threads)
    else:
        if recipe.text_columns is None:
            raise InputError(path, "raw text needs its label and text columns (--text LABEL:TEXT)")
        label, text = recipe.text_columns
        lay = text_layout(path, label, text)  # the columns exist (else one line now, not mid-read)
        if lay.names is not None and recipe.text_names is not None:
            # a header read against recorded names: the label and the text are found by name, as a
            # CSV's columns are (refused if the names differ); read by position, a reordered file
            # would give other columns (its ids as labels), silently
            moved = text_order(path, lay.header_line, lay.names, recipe, owner)
            if moved is not None:
                label, text = str(moved[0]), str(moved[1])
        else:
            recipe = recipe._replace(text_names=lay.names if lay.header_line else recipe.text_names)

        def make():
            return iter_text(path, chunk_bytes=chunk_bytes, hash_bits=bits, label=label, text=text,
                             value_dtype=dtype)
    return Source(make, size, 1 << bits, recipe)


def _open_csv(path, recipe, chunk_bytes, dtype, threads, owner, size) -> Source:
    """:func:`_open` of a CSV file: its layout (delimiter, header, label and weight columns) as the recipe says,
    its columns found by the names the recipe records where its header has names."""
    label_col = 0 if recipe.csv_label_column is None else recipe.csv_label_column
    said = recipe.csv_header_source == "option" and recipe.csv_header is not None
    lay = csv_layout(path, recipe.csv_delimiter, label_col, recipe.csv_header if said else "auto",
                     recipe.csv_weight_column)
    order = None
    if lay.names is not None and recipe.csv_names is not None \
            and HEADER_NUMBERED not in (lay.header_why, recipe.csv_header_source):
        # a header read against recorded names: the columns are found by name (refused if they differ).
        # A numbered header (0,1,2; label,1,2) names positions, not columns: read by position, as said
        order = header_order(path, lay.header_line, lay.names, recipe, owner)
    if order is not None:
        lay = csv_layout(path, lay.delimiter, order.label_col, True, order.weight_col)._replace(
            header_why=lay.header_why)
        # the rows come in the recipe's column order: its names and label column describe them
        recipe = recipe._replace(csv_delimiter=lay.delimiter, csv_header=True, csv_header_source=lay.header_why)
    else:
        # the weight column as the user gave it (-1: the last, in every file), the rest as found
        recipe = recipe._replace(csv_delimiter=lay.delimiter, csv_label_column=lay.label_col,
                                 csv_header=bool(lay.header_line), csv_header_source=lay.header_why,
                                 csv_names=lay.names if lay.header_line else recipe.csv_names)
    if lay.header_why == HEADER_NUMBERED:
        # a row of numbers dropped as a header is a row lost if the guess is wrong: said, with the way out
        head = lay.head.decode("utf-8", "replace").strip()
        warnings.warn(f"{path}:{lay.header_line}: {head[:60]!r} is read as a header (guessed: its numbers count "
                      "the columns); if it is a row of data, pass --no-header", HeaderGuessWarning, stacklevel=2)
    if lay.header_line and lay.label_col == 0 and lay.delimiter != " " \
            and not lay.head.split(lay.delimiter.encode(), 1)[0].strip():
        # pandas' df.to_csv() writes its index first, under an empty name: read as the labels, silently
        warnings.warn(f"{path}:{lay.header_line}: the label column (0) has no name in the header: if it is an "
                      "index (pandas' df.to_csv() writes one), the row numbers are read as the labels; write the "
                      "file with df.to_csv(index=False)", HeaderGuessWarning, stacklevel=2)

    def make():
        chunks = iter_csv(path, chunk_bytes=chunk_bytes, delimiter=lay.delimiter, label_column=lay.label_col,
                          header=bool(lay.header_line), value_dtype=dtype, weight_column=lay.weight_col,
                          threads=threads)
        return chunks if order is None else _columns_moved(chunks, order.features)
    return Source(make, size, lay.n_features, recipe)


def _columns_moved(chunks: Iterator[RowChunk], features: np.ndarray) -> Iterator[RowChunk]:
    """``chunks`` with each column ``p`` renumbered ``features[p]`` (a CSV whose header has the recipe's names
    in another order: :func:`ooc.store.recipe.header_order`), each row's columns sorted again. The values are
    moved, not recomputed: the rows are those of the file written in the recipe's order, bit for bit."""
    for ch in chunks:
        cols = features[ch.indices]
        rows = np.repeat(np.arange(len(ch.labels), dtype=np.int64), np.diff(ch.indptr))
        sort = np.lexsort((cols, rows))
        yield ch._replace(indices=cols[sort], data=ch.data[sort])


def values_as(chunks: Iterator[RowChunk], dtype, source: str) -> Iterator[RowChunk]:
    """``chunks`` with their values as ``dtype`` (rounded as a store of that type holds them), refusing a
    value or label that overflows it, with its row, in the words of a conversion's refusal: the text
    readers do this while parsing, arrays (an .npz) here."""
    dtype = np.dtype(dtype)
    limit = overflow_limit(dtype)
    for ch in chunks:
        if ch.data.dtype != dtype:
            bad = np.flatnonzero(~(np.abs(ch.data) < limit))
            if len(bad):
                k = int(bad[0])
                raise InputError(source, f"value {ch.data[k]!r} (feature {ch.indices[k]}) overflows {dtype}; store "
                                         "float64 values instead", line=_line_of(ch, k))
            cast = ch.data.astype(dtype)
            _refuse_rounded_to_zero(ch, cast, dtype, source)
            ch = ch._replace(data=cast)
        _check_label_range(ch, dtype, source)
        yield ch


def _refuse_rounded_to_zero(ch, cast: np.ndarray, dtype, source) -> None:
    """Refuse a nonzero value of ``ch`` (an array's entries) that ``cast`` (its values as ``dtype``) holds as 0,
    with its row, as the text readers refuse one (:func:`ooc.kernels.text.rounds_to_zero`)."""
    tiny = np.flatnonzero((cast == 0) & (ch.data != 0))
    if len(tiny):
        k = int(tiny[0])
        raise InputError(source, f"value {float(ch.data[k])!r} (feature {ch.indices[k]}) is too small for {np.dtype(dtype)}: "
                                 "it would be stored as 0; store float64 values instead", line=_line_of(ch, k))


def _matrix_source(rows: MatrixRows, y, chunk_bytes: int, rows_per_chunk: int, weights=None):
    """A chunk factory of a checked matrix, tagged with its column count.

    The data alone cannot tell trailing all-zero columns from absent ones, but a
    matrix has a shape: a store built from it must have as many columns.
    """
    return _tag_n_cols(lambda: matrix_chunks(rows, y, chunk_bytes, rows_per_chunk, weights), rows.n_cols)


def _tag_n_cols(make, n_cols):
    make.n_cols = n_cols
    return make


# -- the conversion ----------------------------------------------------------------------
def convert(
    source,
    store: str | os.PathLike,
    *,
    y=None,
    sample_weight=None,
    weight_column: int | None = None,
    format: str = "zarr",
    layout: str = "both",
    memory: str | int = "auto",
    dtype: str = "float32",
    input_format: str | None = None,
    zero_based: bool | str = "auto",
    label_kind: str = "auto",
    n_features: int | None = None,
    block_bytes: int | str | None = None,
    chunk_len: int | None = None,
    overwrite: bool = False,
    progress: Callable[[dict], None] | None = None,
    hash_bits: int = DEFAULT_HASH_BITS,
    text_columns: tuple[str, str] | None = None,
    threads: int = 0,
    index_base: int | str | None = None,
    recipe: Recipe | None = None,
    recipe_owner: str | None = None,
    header: bool | str = "auto",
) -> Store:
    """Convert an input into an ooc store, streaming, in bounded memory.

    Parameters
    ----------
    source : path, numpy array or scipy sparse matrix
        An svmlight/LIBSVM file (plain, .gz, .bz2, .xz), a dense CSV/TSV file, a Vowpal
        Wabbit text file (:func:`ooc.store.readers.iter_vw`), a CSV/TSV of raw text
        (``text_columns``, :func:`ooc.store.readers.iter_text`), an
        ``.npz`` file (:func:`load_npz`), or an in-memory matrix (2-D, real numbers, finite;
        any scipy sparse format, checked by :func:`check_matrix`; then ``y`` is required).
        Repeated column ids of a row are summed and the ids sorted (scipy's canonical form).
    y : array-like, optional
        The labels of an in-memory matrix: 1-D, one finite real number per row. None for a
        file, which holds its labels.
    sample_weight : array-like, optional
        Per-row weights of an in-memory matrix (1-D, finite, >= 0); they multiply each row's
        loss in the training objective. An .npz holds them under the key ``sample_weight``.
    weight_column : int, optional
        For a CSV file: the 0-based column of each row's weight (negative counts from the end;
        the label is column 0). Not a feature.
    store : path
        Where the store goes (a directory for Zarr, a file for HDF5). Built under
        a temporary name and renamed when complete.
    format : {'zarr', 'hdf5'}
    layout : {'both', 'rows', 'cols'}
        Which layouts to store. The row layout is always built (the column one is
        derived from it) but dropped again for ``'cols'``.
    memory : bytes or str, default 'auto'
        Bound on the memory used by the conversion (text buffers, blocks,
        transpose buckets); 'auto': what this process may use, as on the command line.
    dtype : {'float32', 'float64'}
        Stored value type.
    input_format : {None, 'svmlight', 'csv', 'npz', 'vw', 'text'}
        The format of a file ``source``; None finds it from the name and the content
        (:func:`ooc.store.readers.detect_format`; raw text is never guessed).
    zero_based : True, False or 'auto'
        Whether svmlight feature ids start at 0. ``'auto'``: 0-based if any id is
        0, else 1-based (scikit-learn's rule, a guess: a 0-based file without feature 0 is read
        1-based); recorded as ``index_base`` and in the input recipe, with how it was found.
        For an array (whose columns have no ids) a stated base is recorded in its recipe as how
        later svmlight files map onto its columns (``index_base=1``: column ``j`` is id ``j + 1``);
        without one, those files must state theirs (``--index-base``).
    index_base : 0, 1, 'auto' or None
        The same as ``zero_based`` (``index_base=0`` is ``zero_based=True``); None: as
        ``zero_based`` says. Both given and different is refused.
    label_kind : {'auto', 'binary', 'multiclass', 'regression'}
        ``'auto'``: two distinct values -> binary, integers (up to 1000 distinct)
        -> multiclass, otherwise regression.
    n_features : int, optional
        Number of columns (at least 1 + the largest id); default from the source: a
        matrix's shape, a CSV's header (all-zero trailing columns included), otherwise
        1 + the largest id. A conversion keeps O(columns) arrays (column counts and norms,
        the column pointer: :data:`COLUMN_BYTES` a column), so a column count beyond
        :func:`column_limit` (what the memory available here holds at that rate; about
        2**33 with 256 GiB) is refused with the line of the offending feature id and a hint
        to hash into fewer columns, and one that ``memory`` cannot hold is refused naming the
        figure that does, before anything that large is allocated. What training the store
        needs for its columns is training's to say (``ooc info``).
    block_bytes : bytes, optional
        Decoded size of a block; default 64 MiB, capped at ``memory / 8``.
    progress : callable, optional
        Called with a dict (``phase``, ``bytes``, ``total``, ``rows``) as work advances.
    hash_bits : int, default 18
        VW and raw text inputs: features are hashed into ``2**hash_bits`` columns (1 to 31).
    text_columns : (str, str), optional
        ``(label, text)``: read ``source`` as raw text, the label and the text in these
        columns (0-based numbers or header names); ``input_format`` must then be None or
        ``'text'``.
    threads : int, default 0
        Threads parsing text input (0: every core this process may use); the store is the
        same, byte for byte, whatever the count.
    recipe : Recipe, optional
        Read the file ``source`` as this recipe says (:func:`ooc.store.recipe.open_input`; how
        ``recipe_owner``'s input was read) instead of by ``input_format``, ``hash_bits``,
        ``text_columns``, ``weight_column`` and ``zero_based``.
    header : {'auto', True, False}
        CSV input: whether its first line is a header. 'auto' finds it
        (:func:`ooc.store.input_rules.header_guess`: a line of names, or of numbers that count the
        columns, the latter a guess that is warned about); the decision and how it was made are
        recorded in the recipe, and a stated one (True, False) holds for the store's later files too.

    Returns
    -------
    Store
        The opened store.

    Raises
    ------
    InputError
        Bad input, with file, line and (where known) column; for an .npz, the array (key)
        and the row; a value that overflows ``dtype``; a feature id that makes too many columns.
    ValueError
        A bad in-memory matrix or labels, naming the array (``X.indptr``, ``y``...) and the
        position; nothing is written.
    StoreError
        The disk filled up (one line naming STORE and the file being written). Whatever
        fails, the temporary container and scratch files are removed; temporaries that
        killed conversions to the same STORE left behind are removed first (only those
        whose process is provably gone, see :func:`ooc.store.writer.remove_stale_temporaries`).
    """
    store = output_location(store)
    zero_based = _zero_based(zero_based, index_base)
    if recipe is not None and recipe.index_base is not None:  # svmlight ids read as the recipe says
        zero_based = recipe.index_base == 0
    try:
        # one writer of STORE at a time, from its first check to its swap (ooc.owned.exclusive)
        with owned.exclusive(store, "the conversion"):
            plan = _plan(source, store, y, format, layout, memory, dtype, input_format, zero_based, n_features,
                         block_bytes, chunk_len, overwrite, hash_bits, text_columns, sample_weight, weight_column,
                         threads, recipe, recipe_owner, _header_option(header))
            t0 = time.perf_counter()
            _build_and_publish(plan, label_kind, progress)
    finally:
        forget_streams()  # a pipe read here is this conversion's: a later one opens it again
    if progress:
        progress({"phase": "done", "seconds": time.perf_counter() - t0})
    return open_store(store)


def _header_option(header) -> bool | None:
    """``convert``'s ``header`` as :class:`~ooc.store.recipe.Options` says it (None: found per file)."""
    if header == "auto":
        return None
    if header is True or header is False:
        return header
    raise ValueError(f"header must be 'auto', True or False, not {header!r}")


class _Plan(NamedTuple):
    """What :func:`convert` builds, from where, and with which sizes (from :func:`_plan`)."""

    store: str
    exists: bool
    layout: str
    layouts: tuple
    backend_cls: type
    dtype: str
    settings: dict
    make_chunks: Callable
    total: int | None
    source_desc: str
    n_features: int | None
    block_bytes: int
    chunk_len: int
    memory: Budget
    threads: int
    #: ``resize(n_cols)``: ``(block_bytes, chunk_len, make_chunks)`` with the buffers sized for ``n_cols``
    #: columns (None: unknown, a third kept: :func:`buffer_budget`), the source opened again
    resize: Callable | None = None
    #: the columns the buffers were sized for (None: unknown); svmlight's grows as ids are read (:func:`_build`)
    sized_for: int | None = None


def _plan(source, store, y, format, layout, memory, dtype, input_format, zero_based, n_features, block_bytes,
          chunk_len, overwrite, hash_bits=DEFAULT_HASH_BITS, text_columns=None, sample_weight=None,
          weight_column=None, threads=0, recipe=None, recipe_owner=None, header=None) -> _Plan:
    """Check :func:`convert`'s options, size its buffers and open the source (nothing written yet)."""
    if format not in BACKENDS:
        raise ValueError(f"unknown store format {format!r}; expected zarr or hdf5")
    if layout not in ("both", "rows", "cols"):
        raise ValueError(f"unknown layout {layout!r}; expected both, rows or cols")
    if np.dtype(dtype) not in L.DATA_DTYPES:
        raise ValueError(f"dtype must be float32 or float64, not {dtype!r}")
    threads = resolve_threads(threads)
    exists = MemoryBackend.detect(store) if store.startswith("memory://") else os.path.exists(store)
    check_output_store(store, exists, overwrite, source)
    if isinstance(memory, Budget):  # resolved by the caller (append), which loaded the kernels first
        budget = memory
    else:
        # resolved once, the process's code and every kernel this conversion calls loaded (the whole process)
        peak = load_kernels(_kernel_format(source, input_format, text_columns, recipe), dtype, threads)
        budget = command_budget(memory, held=peak)

    def opened(mem):
        bb = parse_bytes(block_bytes) if block_bytes is not None else min(L.DEFAULT_BLOCK_BYTES, max(mem // 8, 1 << 16))
        chunk_bytes = text_chunk_bytes(mem)
        return bb, _source_chunks(source, y, input_format, chunk_bytes, max(1024, chunk_bytes // 64), dtype, hash_bits,
                                  text_columns, sample_weight, weight_column, threads, recipe, recipe_owner, header)

    # the buffers get what the per-column statistics leave (column_bytes): their width is known once the
    # source is open (a CSV's header, a hashed format's bits); until then (and for svmlight, which does not
    # say) a third of the budget is kept for them
    # an .npz is read whole: charged first, the buffers sized from what it leaves
    # (the source named only when it is a path: formatting an in-memory matrix converts it, and scipy's
    # checks would then raise before ooc's name what is wrong with it)
    named = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "the input"
    budget = budget.hold(whole_input_bytes(source, input_format or getattr(recipe, "format", None)), MIN_WORK,
                         f"reading {named} (an .npz: its arrays decoded whole)")
    mem = buffer_budget(budget, None)
    bb, (make_chunks, total, source_desc, known_zero, recipe) = opened(mem)
    if n_features is None:
        n_features = getattr(make_chunks, "n_cols", None)
        cause = (f"--hash-bits {recipe.hash_bits}" if recipe.format in HASHED and recipe.hash_bits is not None
                 else f"the input's width ({source_desc})")
    else:
        cause = f"n_features={n_features}"
    if n_features is not None:
        check_columns(budget, n_features, cause, f"this conversion (with {n_features} columns)")
        if buffer_budget(budget, n_features) < mem:  # the columns take more than the third kept: smaller buffers
            mem = buffer_budget(budget, n_features)
            bb, (make_chunks, total, source_desc, known_zero, recipe) = opened(mem)
    else:
        budget.require(MIN_WORK, "this conversion")
    cl = int(chunk_len or min(L.DEFAULT_CHUNK_LEN, max(bb // 16, 1024)))

    def resize(n_cols):
        bb, (make, *_) = opened(buffer_budget(budget, n_cols))
        return bb, int(chunk_len or min(L.DEFAULT_CHUNK_LEN, max(bb // 16, 1024))), make

    settings = {
        "zero_based": True if known_zero else zero_based,
        "index_dtype": np.dtype(np.int32),
        # how the input is read, recorded in the store once the conversion has settled the index base
        "recipe": recipe._replace(dtype=str(np.dtype(dtype))),
        "zero_based_option": zero_based,
    }
    layouts = {"both": (L.ROWS, L.COLS), "rows": (L.ROWS,), "cols": (L.COLS,)}[layout]
    # "memory://" stores live in this process (tests, small data); whatever --format says
    backend_cls = BACKENDS["memory"] if store.startswith("memory://") else BACKENDS[format]
    return _Plan(store, exists, layout, layouts, backend_cls, dtype, settings, make_chunks, total, source_desc,
                 n_features, bb, cl, budget, threads, resize, n_features)


def _zero_based(zero_based, index_base):
    """``convert``'s ``zero_based`` from it and ``index_base`` (the same setting, two spellings)."""
    if index_base is None:
        return zero_based
    if isinstance(index_base, str) and index_base.strip().lower() == "auto":
        wanted = "auto"
    elif index_base in (0, 1) and not isinstance(index_base, bool):
        wanted = index_base == 0
    else:
        raise ValueError(f"index_base={index_base!r}: expected 0, 1 or 'auto'")
    if zero_based != "auto" and wanted != zero_based:
        raise ValueError(f"index_base={index_base!r} contradicts zero_based={zero_based!r}")
    return wanted


#: A few rows of each text format, converted by :func:`load_kernels` (raw text: label and text columns).
_SAMPLES = {"svmlight": b"1 1:0.5 3:1\n-1 2:0.25\n", "csv": b"1,0.5,1\n-1,0.25,0\n",
            "vw": b"1 |f a:0.5 b\n-1 |f c\n", "text": b"label,text\n1,a good day\n-1,a bad day\n"}
#: (format, dtype, threaded) whose kernels this process has loaded (:func:`load_kernels`).
_KERNELS_LOADED: set = set()


def _kernel_format(source, input_format, text_columns, recipe) -> str | None:
    """The format whose kernels a conversion of ``source`` calls: a file's (as :func:`_source_chunks` finds
    it), ``'matrix'`` for arrays, None for a chunk source (its own code)."""
    if callable(source):
        return None
    if not isinstance(source, (str, os.PathLike)):
        return "matrix"
    if recipe is not None and recipe.format is not None:
        return recipe.format
    if text_columns is not None:
        return "text"
    return input_format or detect_format(os.fspath(source))


def load_kernels(fmt: str | None, dtype, threads: int = 1, layout: str = "both") -> int:
    """Load every compiled kernel a conversion of ``fmt`` input calls (its reader's, the statistics', the
    transpose's unless ``layout`` is ``'rows'``) before its memory is planned, by converting a few rows of
    that format into memory: the resident size the plan then measures counts them. Returns this process's
    peak resident size while they loaded when that was a new peak (0 otherwise), which the plan counts as
    held too. Reading ``fmt`` input for another purpose (predict, evaluate) calls the same reader kernels.

    Why: Numba compiles a kernel on its first call where its cache does not hold it (a new install, a
    fresh ``NUMBA_CACHE_DIR``), and what compiling leaves resident is large: measured, a VW conversion's
    twenty kernels 95 MiB (transiently more), a CSV's 43, an svmlight's 48 (92 at its peak). Loaded after
    the plan, they took a conversion at the ``--memory`` it named 1.05x (CSV) to 1.19x (VW) over it.
    From a warm cache they load in about 0.1 s and add a few MiB.
    """
    _load_numba(dtype)
    key = (fmt, str(np.dtype(dtype)), threads > 1, layout == "rows")
    if fmt not in (*_SAMPLES, "matrix", "npz") or key in _KERNELS_LOADED:
        return 0
    before = peak_rss_bytes()
    settings = {"input_format": fmt, "text_columns": ("label", "text") if fmt == "text" else None}
    try:
        with tempfile.TemporaryDirectory(prefix=".ooc-kernels-") as d:
            if fmt in _SAMPLES:
                source, y = os.path.join(d, f"sample.{fmt}"), None
                with open(source, "wb") as f:
                    f.write(_SAMPLES[fmt])
            else:  # an .npz is read as a matrix
                import scipy.sparse as sp

                source, y = sp.csr_matrix(np.array([[0.5, 0.0, 1.0], [0.0, 0.25, 0.0]])), np.array([1.0, -1.0])
                settings["input_format"] = None
            # no ceiling: the sample's work is a few KiB; hashed into 2**4 columns (the kernels do not depend on it)
            work = Budget(MIN_WORK, None, 0, None, MIN_WORK)
            plan = _plan(source, f"memory://.ooc-kernels-{os.getpid()}-{len(_KERNELS_LOADED)}", y, "zarr",
                         "rows" if layout == "rows" else "both", work,
                         dtype, settings["input_format"], "auto", None, None, None, False, 4, settings["text_columns"],
                         threads=threads)
            tmp = Temporary(plan.store)
            try:
                _build_all(plan, tmp, "auto", None)
            finally:
                tmp.remove()
                tmp.release()
    except OSError:  # no temporary directory to write the sample to: the kernels load when first called
        return 0
    _KERNELS_LOADED.add(key)
    after = peak_rss_bytes()
    return after if after > before else 0


def _load_numba(dtype) -> None:
    """Load Numba's machinery for compiled code (on its first kernel call in a process: ~60 MiB and
    ~0.4 s, LLVM and the libraries it imports) before the memory is planned, so that the budget of a
    whole-process ``--memory`` counts it: measured, ``--memory 300MiB`` peaked at 359 MiB when the
    first chunk's kernels loaded it after the plan. The kernel called is one every conversion calls."""
    _ke.cast_entries(np.empty(0, np.int64), np.empty(0), 0, np.empty(0, np.int32), np.empty(0, np.dtype(dtype)))


def _build_and_publish(plan: _Plan, label_kind, progress) -> None:
    """Build the store under a temporary name (again from scratch when the input asks for other
    settings), then put it in place; on any failure remove the temporary, naming a full disk."""
    from .._malloc import tune_malloc

    store = plan.store
    remove_stale_temporaries(store)  # what killed conversions to the same STORE left behind
    tune_malloc()  # freed chunk buffers go back to the system (ooc._malloc), as in training
    tmp = Temporary(store)
    ceiling = plan.memory.ceiling
    try:
        # the plan checked against the process itself (ooc._memguard): freed heap trimmed above the ceiling
        with governed(ceiling, reserve=governor_reserve(ceiling or 0)):
            _build_all(plan, tmp, label_kind, progress)
        if plan.layout == "cols":
            _drop_rows(tmp.path, plan.backend_cls)
        publish(tmp.path, store, replace=plan.exists)
    except BaseException as exc:
        tmp.remove()  # e.g. STORE appeared meanwhile: leave no hidden partial behind
        full = disk_full_error(exc) if isinstance(exc, Exception) else None
        if full is not None:
            raise StoreError(
                f"{store}: the disk is full (no space left on device writing "
                f"{full.filename or tmp.path}); the partial store was removed: free some space "
                "and convert again") from exc
        raise
    finally:
        tmp.release()


def _build_all(plan: _Plan, tmp, label_kind, progress) -> None:
    """:func:`_build` into ``tmp``, again from scratch when the input asks for other settings."""
    while True:
        try:
            _build(plan.make_chunks, tmp.path, tmp.scratch, plan.backend_cls, plan.dtype, plan.settings,
                   plan.block_bytes, plan.chunk_len, plan.memory, plan.layouts, label_kind, plan.n_features,
                   plan.total, progress, plan.source_desc, plan.threads, plan.sized_for)
        except _Restart as r:
            tmp.remove()
            changes = dict(r.changes)
            sized_for = changes.pop("sized_for", None)
            if sized_for is not None:  # the ids read need more columns than the buffers left room for
                bb, cl, make = plan.resize(sized_for)
                plan = plan._replace(block_bytes=bb, chunk_len=cl, make_chunks=make, sized_for=sized_for)
            plan.settings.update(changes)
            continue
        return


def _build(make_chunks, tmp, scratch, backend_cls, dtype, settings, block_bytes, chunk_len, budget: Budget, layouts,
           label_kind, n_features, total, progress, source_desc, threads=1, sized_for=None):
    width = 0  # columns seen so far (svmlight: its width is known only once read)
    # what the columns' arrays may take beside the buffers as sized (buffer_budget): a third of the work
    # while the width is unknown, what the columns the buffers were sized for take once it was read
    buffers = buffer_budget(budget, sized_for)
    room = budget.work - buffers
    zero_based = settings["zero_based"]
    index_dtype = settings["index_dtype"]
    shift = 0 if zero_based is True else 1  # 'auto' starts by guessing 1-based (LIBSVM's convention)
    w = StoreWriter(backend_cls, tmp, dtype, index_dtype, block_bytes, chunk_len, threads)
    try:
        limit = np.iinfo(index_dtype).max
        out_dtype = np.dtype(dtype)
        max_cols = column_limit(budget.held + budget.reserved)
        for chunk in lines_held(make_chunks(), budget, source_desc, buffers,
                                lambda need: _work_for_buffers(need, sized_for)):
            ind = np.empty(len(chunk.indices), index_dtype)
            data = np.empty(len(chunk.data), out_dtype)
            lo, hi, bad = _ke.cast_entries(chunk.indices, chunk.data, shift, ind, data)
            if shift and len(ind) and lo == 0:
                if zero_based == "auto":
                    raise _Restart(zero_based=True)
                rec = settings["recipe"]
                how = (" (the index base of the input it follows, guessed there from no id 0)"
                       if rec is not None and rec.index_base_source == "guessed" else "")
                raise InputError(source_desc, f"feature id 0 in a file read 1-based{how}: the file looks 0-based; "
                                 "if it is, pass --index-base 0",
                                 line=_line_of(chunk, int(np.flatnonzero(chunk.indices == 0)[0])))
            if len(ind) and hi - shift >= max_cols:
                k = int(np.flatnonzero(chunk.indices - shift >= max_cols)[0])
                msg = too_many_columns(int(chunk.indices[k]) - shift + 1, max_cols, f"feature id {chunk.indices[k]}")
                raise InputError(source_desc, msg, line=_line_of(chunk, k))
            if len(ind) and hi - shift >= limit:
                if index_dtype == np.int32:
                    raise _Restart(index_dtype=np.dtype(np.int64))
            if bad >= 0 and out_dtype != chunk.data.dtype:
                # text readers refuse these themselves, with the column; arrays end up here
                raise InputError(source_desc, f"value {chunk.data[bad]!r} (feature {chunk.indices[bad]}) overflows "
                                 f"{out_dtype}; store float64 values instead", line=_line_of(chunk, bad))
            if out_dtype != chunk.data.dtype:
                _refuse_rounded_to_zero(chunk, data, out_dtype, source_desc)
            _check_label_range(chunk, out_dtype, source_desc)
            if n_features is None and budget.ceiling is not None and len(ind) and hi - shift + 1 > width:
                width = hi - shift + 1
                sized = min(width_bound(width), max_cols)
                if column_bytes(sized) > room:
                    # the buffers leave too little room for the columns' arrays of the ids read so far: refused
                    # when --memory cannot hold them beside the smallest buffers (naming the figure for that
                    # width), else read again from the start with buffers sized for them (nothing was written)
                    require_columns(budget, sized, f"this conversion ({width} columns so far)")
                    raise _Restart(sized_for=sized)
            w.add_rows(chunk.labels, chunk.indptr, ind, data, _checked_weights(chunk, source_desc))
            if progress:
                # a generated source reads no bytes: its progress is in rows, of its n_rows when it says
                progress({"phase": "rows", "bytes": chunk.bytes_consumed, "total": total, "rows": w.n_rows,
                          "total_rows": getattr(make_chunks, "n_rows", None)})
        if w.n_rows == 0:
            raise InputError(source_desc, "no data rows")
        attrs = w.finish_rows(n_features, label_kind)
        attrs["index_base"] = 0 if shift == 0 else 1
        attrs["source"] = source_desc
        attrs[L.RECIPE] = settings["recipe"].finished(attrs["index_base"], settings["zero_based_option"],
                                                      attrs).as_attr()
        if L.COLS in layouts:  # derived from the row layout, which is always written first
            build_columns(w.backend, w.n_rows, w.n_cols, w.col_nnz, block_bytes, chunk_len,
                          _transpose_budget(budget, w.n_cols), scratch, progress, threads)
        w.finalize(attrs, layouts)
    except BaseException:
        # close before the caller deletes the file: HDF5 would otherwise flush into a
        # deleted (or full) file when the handle is garbage-collected, with a traceback
        w.abort()  # no write in flight while closing
        with contextlib.suppress(Exception):
            w.backend.close()
        raise


def _work_for_buffers(buffers: int, n_cols: int | None) -> int:
    """The work whose buffers are ``buffers`` bytes (the inverse of :func:`buffer_budget`): beside the
    columns' arrays, or, their count unknown, two thirds of it."""
    return buffers + column_bytes(n_cols) if n_cols is not None else -(-3 * buffers // 2)


def _transpose_budget(budget: Budget, n_cols: int) -> int:
    """What the transpose's buckets and pieces get: the work less what the columns' arrays hold."""
    if budget.ceiling is None:
        return budget.work
    return max(min(budget.work, MIN_WORK), budget.work - column_bytes(n_cols))


def _check_label_range(chunk: RowChunk, dtype, source_desc: str) -> None:
    """Labels must fit the store's value type as values do (:mod:`ooc.store.input_rules`); the text
    readers refuse them with their exact line, arrays (.npz, in memory) end up here (line: row)."""
    k = input_rules.first_bad_label(chunk.labels, overflow_limit(dtype))
    if k is not None:
        raise InputError(source_desc, input_rules.label_message(float(chunk.labels[k]), dtype),
                         line=chunk.first_line + k)


def _checked_weights(chunk: RowChunk, source_desc: str) -> np.ndarray | None:
    """The chunk's sample weights, refused (naming the line) unless finite and >= 0."""
    w = getattr(chunk, "weights", None)
    if w is None:
        return None
    w = np.asarray(w, dtype=np.float64)
    bad = np.flatnonzero(~(np.isfinite(w) & (w >= 0)))
    if len(bad):
        k = int(bad[0])
        raise InputError(source_desc, f"sample weight {w[k]!r}: weights must be finite and >= 0",
                         line=chunk.first_line + k)
    return w


def _line_of(chunk: RowChunk, k: int) -> int:
    """Line (row, for arrays) of the ``k``-th entry of a chunk."""
    return chunk.first_line + int(np.searchsorted(chunk.indptr, k, side="right")) - 1


def build_columns(backend, n_rows, n_cols, col_nnz, block_bytes, chunk_len, memory, scratch=None,
                  progress=None, threads=1):
    """Build ``cols/*`` from ``rows/*`` out of core (bucket by column range, then assemble).

    The column ranges are cut so that assembling one (its records, :func:`_assemble`'s
    temporaries, and the range before while the writes run behind) holds at most a quarter of
    ``memory``; the store's column blocks (``cols/block_ptr``, ``block_bytes``) are cut apart.

    Parameters
    ----------
    scratch : str, optional
        Directory for the bucket files, created here and removed on return (whatever
        happens); None makes a private one in the system's temporary directory.
    threads : int, default 1
        With more than one, a row piece is bucketed and a column block assembled on that many
        threads (:func:`_bucket`, :func:`_assemble`), and the writes (bucket files, then each
        column array) run on threads of their own, behind the computation of the next piece or
        block: one more piece (block) is held at once, so pieces are cut at ``memory / 12``
        instead of ``memory / 6``. The output is the same.

    Raises
    ------
    OSError
        Writing a bucket failed (a full disk: every write is checked, none is lost).
    RuntimeError
        A bucket read back does not hold the entries the column counts promise.
    """
    dtype = backend.dtype(L.array_name(L.ROWS, L.DATA))
    index_dtype = backend.dtype(L.array_name(L.ROWS, L.INDICES))
    row_id_dtype = L.index_dtype_for(n_rows)
    entry = L.entry_bytes(dtype, row_id_dtype)
    col_ptr = L.block_boundaries(col_nnz, entry, block_bytes)
    rec = np.dtype([("col", index_dtype), ("row", row_id_dtype), ("val", dtype)])
    # bytes an entry of the range being assembled holds (see the docstring); measured at --memory 300MiB
    # on the 226 MB bench file, assembling a store block at a time (~2M entries) peaked 30 MiB over it
    held = 2 * rec.itemsize + row_id_dtype.itemsize + dtype.itemsize + 2
    bucket_ptr = L.block_boundaries(col_nnz, held, max(memory // 4, 1 << 16))
    n_cb = len(bucket_ptr) - 1
    backend.create_array(L.array_name(L.COLS, L.BLOCK_PTR), np.int64, max(len(col_ptr), 1), len(col_ptr))
    backend.write(L.array_name(L.COLS, L.BLOCK_PTR), 0, col_ptr)
    indptr = np.zeros(n_cols + 1, dtype=np.int64)
    np.cumsum(col_nnz, out=indptr[1:])
    ip = Appender(backend, L.array_name(L.COLS, L.INDPTR), np.int64, chunk_len)
    ip.append(indptr)
    ip.close()
    out_ind = Appender(backend, L.array_name(L.COLS, L.INDICES), row_id_dtype, chunk_len, behind=threads > 1)
    out_dat = Appender(backend, L.array_name(L.COLS, L.DATA), dtype, chunk_len, behind=threads > 1)
    row_ptr = backend.read(L.array_name(L.ROWS, L.BLOCK_PTR))
    # row pieces for bucketing: blocks of the row layout, split further if memory is tight
    behind = Behind(threads > 1, "ooc-bucket-writer")
    piece_bytes = max(memory // (12 if threads > 1 else 6), 1 << 16)
    piece_entries = max(piece_bytes // rec.itemsize, 1)
    if scratch is None:
        bdir = tempfile.mkdtemp(prefix=".ooc-transpose-")
    else:
        os.makedirs(scratch)
        bdir = scratch
    try:
        paths = [os.path.join(bdir, f"b{k}.bin") for k in range(n_cb)]
        _bucket_rows(backend, row_ptr, paths, bucket_ptr, rec, piece_entries, behind, threads, progress)
        behind.wait()  # every bucket is whole before one is read
        for k in range(n_cb):
            _assemble_bucket(paths[k], k, int(bucket_ptr[k]), int(bucket_ptr[k + 1]), indptr, rec, piece_entries,
                             (out_ind, out_dat), threads)
            if progress:
                progress({"phase": "assemble", "done": k + 1, "total": n_cb})
        behind.wait()
        out_ind.close()
        out_dat.close()
    finally:
        behind.close()
        out_ind.abort()
        out_dat.abort()
        shutil.rmtree(bdir, ignore_errors=True)


def _bucket_rows(backend, row_ptr, paths, bucket_ptr, rec, piece_entries, behind, threads, progress):
    """The transpose's first phase: every row block's entries appended to their column range's bucket file.

    A block is cut into pieces of at most ``piece_entries`` entries; each piece is bucketed
    (:func:`_bucket`) while the one before is written (``behind``).
    """
    rows_indptr_name = L.array_name(L.ROWS, L.INDPTR)
    for b in range(len(row_ptr) - 1):
        r0, r1 = int(row_ptr[b]), int(row_ptr[b + 1])
        rip = backend.read(rows_indptr_name, r0, r1 + 1)
        s = r0
        while s < r1:
            # cut the block so one piece's records stay within piece_bytes
            lim = int(np.searchsorted(rip, rip[s - r0] + piece_entries, side="right")) - 1 + r0
            e = min(r1, max(lim, s + 1))
            lo, hi = int(rip[s - r0]), int(rip[e - r0])
            cols = backend.read(L.array_name(L.ROWS, L.INDICES), lo, hi)
            vals = backend.read(L.array_name(L.ROWS, L.DATA), lo, hi)
            parts = _bucket(rip[s - r0:e - r0 + 1] - lo, s, cols, vals, bucket_ptr, rec, threads)
            del cols, vals
            behind.run(_append_buckets, paths, parts)
            del parts
            s = e
        if progress:
            progress({"phase": "transpose", "done": b + 1, "total": len(row_ptr) - 1})


def _assemble_bucket(path, k, c0, c1, indptr, rec, piece_entries, outs, threads):
    """The transpose's second phase for bucket ``k`` (columns ``c0:c1``): checked, sorted into CSC
    order, appended to ``outs`` (the row ids' and values' appenders) and removed."""
    out_ind, out_dat = outs
    expected = int(indptr[c1] - indptr[c0])
    _check_bucket(path, expected, rec.itemsize)
    if not expected:
        return
    if c1 - c0 == 1:
        # a single column: already in row order, stream it without loading it whole
        with open(path, "rb") as f:
            while True:
                r = np.fromfile(f, dtype=rec, count=piece_entries)
                if not len(r):
                    break
                out_ind.append(r["row"])
                out_dat.append(r["val"])
    else:
        r = np.fromfile(path, dtype=rec)
        done = _assemble(r, c0, indptr[c0:c1 + 1] - indptr[c0], rec["row"], rec["val"], threads)
        if len(r) != expected or done is None:
            raise RuntimeError(f"transpose: column block {k} ({path}) does not match the column counts")
        rows_out, vals_out = done
        del r, done
        out_ind.append(rows_out)
        out_dat.append(vals_out)
        del rows_out, vals_out
    os.remove(path)


def _assemble(recs, c0, col_indptr, row_dtype, val_dtype, threads: int):
    """A column block's row ids and values in CSC order, or None when ``recs`` does not match ``col_indptr``.

    :func:`ooc.kernels.transpose.group_entries` into temporaries (row ids, values and the
    column's low bits: 10 bytes an entry for float32 values and int32 row ids), then
    :func:`ooc.kernels.transpose.order_groups` with the groups split over threads (about equal
    entries each) into the memory of ``recs`` (which holds at least a row id and a value an
    entry, and is not read again): the block holds ``recs`` and the temporaries at once.
    """
    m, bits = len(recs), _kt.GROUP_BITS
    rows = np.empty(m, row_dtype)
    vals = np.empty(m, val_dtype)
    low = np.empty(m, np.uint16)
    if not _kt.group_entries(recs, c0, col_indptr, bits, rows, vals, low):
        return None
    row_dtype, val_dtype = np.dtype(row_dtype), np.dtype(val_dtype)
    room = np.ascontiguousarray(recs).view(np.uint8)
    # the row ids 8-byte aligned after the values: a record's column id (>= 4 bytes) pays for the padding
    at = -(-m * val_dtype.itemsize // 8) * 8
    vals_out = room[:m * val_dtype.itemsize].view(val_dtype)
    rows_out = room[at:at + m * row_dtype.itemsize].view(row_dtype)
    ncols = len(col_indptr) - 1
    n_groups = (ncols + (1 << bits) - 1) >> bits
    parts = min(threads, n_groups)
    starts = col_indptr[np.minimum(np.arange(n_groups + 1) << bits, ncols)]
    cuts = np.unique(np.concatenate(([0], np.searchsorted(starts, starts[-1] * np.arange(1, parts) // parts),
                                     [n_groups]))) if parts > 1 else np.array([0, n_groups])
    ok = map_threads(lambda k: _kt.order_groups(col_indptr, bits, rows, vals, low, rows_out, vals_out, int(cuts[k]),
                                                int(cuts[k + 1])), range(len(cuts) - 1), threads)
    return (rows_out, vals_out) if all(ok) else None


def _bucket(indptr, row0, cols, vals, col_ptr, rec, threads: int) -> list:
    """:func:`ooc.kernels.transpose.bucket_entries` of consecutive rows, split over threads.

    Returns ``[(records, cuts), ...]``, one per run of rows in order (about equal entries each),
    for :func:`_append_buckets`.
    """
    m = len(indptr) - 1
    parts = min(threads, m)
    if parts > 1:
        bounds = np.unique(np.concatenate(([0], np.searchsorted(indptr, indptr[-1] * np.arange(1, parts) // parts),
                                           [m])))
    else:
        bounds = np.array([0, m])

    def one(k):
        a, b = int(bounds[k]), int(bounds[k + 1])
        lo, hi = int(indptr[a]), int(indptr[b])
        recs = np.empty(hi - lo, dtype=rec)
        cuts = _kt.bucket_entries(indptr[a:b + 1] - lo, row0 + a, cols[lo:hi], vals[lo:hi], col_ptr, recs)
        return recs, cuts

    return map_threads(one, range(len(bounds) - 1), threads)


def _append_buckets(paths, parts) -> None:
    """Append each column block's records of row pieces (in row order) to its bucket file."""
    for recs, cuts in parts:
        for k in np.flatnonzero(np.diff(cuts)):
            with open(paths[k], "ab") as f:
                write_all(f, recs[cuts[k]:cuts[k + 1]])


def _check_bucket(path: str, expected: int, itemsize: int) -> None:
    """Refuse a bucket file whose size is not that of the ``expected`` records."""
    size = os.path.getsize(path) if os.path.exists(path) else 0
    if size != expected * itemsize:
        raise RuntimeError(f"transpose: {path} holds {size} bytes, expected {expected * itemsize} "
                           f"({expected} entries); was it truncated or changed while converting?")


def _drop_rows(tmp: str, backend_cls) -> None:
    """Shrink the row layout away for ``--layout cols`` (its data, not the statistics)."""
    be = backend_cls.open(tmp, "r+")
    for field in (L.INDICES, L.DATA):
        be.resize(L.array_name(L.ROWS, field), 0)
    be.close()
