"""Streaming conversion of inputs into a store, and the out-of-core transpose.

``convert`` reads its input in pieces (text chunks parsed by the compiled
readers, or slices of in-memory arrays), appends them to the row layout, and
then builds the column layout without ever loading the matrix:

1. column blocks are sized from the column nonzero counts (known after the row
   pass);
2. each row block is read back, its entries are bucketed by column block (a
   counting sort, :func:`ooc.kernels.transpose.bucket_entries`) and appended to one
   temporary file per column block;
3. each bucket is loaded alone and counting-sorted by column into place
   (:func:`ooc.kernels.transpose.assemble_block`; row order within a column is
   preserved because buckets are filled in row order), then appended to
   ``cols/indices`` and ``cols/data``.

Peak memory is about ``memory``: text chunks, row blocks and buckets are all
sized from it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from typing import Callable, Iterator, NamedTuple

import numpy as np

from ..fsutil import disk_full_error, write_all
from ..kernels import transpose as _kt
from . import layout as L
from .backend import MemoryBackend, StoreError
from .readers import InputError, RowChunk, csv_layout, detect_format, iter_csv, iter_svmlight
from .stats import max_columns, too_many_columns
from .store import BACKENDS, Store, open_store
from .writer import (
    Appender,
    StoreWriter,
    Temporary,
    check_output_store,
    publish,
    remove_stale_temporaries,
)


class _Restart(Exception):
    """The first pass guessed wrong (index base or index width): start over with ``changes``."""

    def __init__(self, **changes):
        super().__init__(changes)
        self.changes = changes


def parse_bytes(text: str | int | None, default: int = 1 << 30) -> int:
    """``'1GiB'``, ``'512M'``, ``'2e9'`` or an int -> bytes."""
    if text is None:
        return default
    if isinstance(text, (int, np.integer)):
        return int(text)
    s = str(text).strip().upper().replace(" ", "")
    units = {"": 1, "B": 1, "K": 1 << 10, "KB": 1000, "KIB": 1 << 10, "M": 1 << 20, "MB": 10**6,
             "MIB": 1 << 20, "G": 1 << 30, "GB": 10**9, "GIB": 1 << 30, "T": 1 << 40, "TB": 10**12,
             "TIB": 1 << 40}
    i = len(s)
    while i and not (s[i - 1].isdigit() or s[i - 1] == "."):
        i -= 1
    num, unit = s[:i], s[i:]
    if unit not in units or not num:
        raise ValueError(f"cannot read a memory size from {text!r} (try 512MiB, 2GiB)")
    return int(float(num) * units[unit])


def format_bytes(n) -> str:
    """Bytes -> ``'512 B'``, ``'1.5 MiB'``, ``'2.0 GiB'`` (what :func:`parse_bytes` reads back)."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover - the loop returns at TiB


# -- sources -> row chunks -------------------------------------------------------------
def _array_chunks(X, y, rows_per_chunk: int) -> Iterator[RowChunk]:
    """Row chunks of an in-memory numpy array or scipy sparse matrix."""
    import scipy.sparse as sp

    n = X.shape[0]
    y = np.asarray(y, dtype=np.float64).ravel()
    if len(y) != n:
        raise ValueError(f"X has {n} rows but y has {len(y)} labels")
    if not np.all(np.isfinite(y)):
        bad = int(np.flatnonzero(~np.isfinite(y))[0])
        raise ValueError(f"y[{bad}] is not finite ({y[bad]})")
    Xs = sp.csr_matrix(X) if not sp.issparse(X) else X.tocsr()
    for s in range(0, max(n, 1), rows_per_chunk):
        part = Xs[s:s + rows_per_chunk]
        part.sum_duplicates()
        part.sort_indices()
        if not np.all(np.isfinite(part.data)):
            k = int(np.flatnonzero(~np.isfinite(part.data))[0])
            r = int(np.searchsorted(part.indptr, k, side="right")) - 1
            raise ValueError(f"X[{s + r}, {part.indices[k]}] is not finite ({part.data[k]})")
        if n == 0:
            break
        yield RowChunk(y[s:s + rows_per_chunk], part.indptr.astype(np.int64),
                       part.indices.astype(np.int64), part.data.astype(np.float64), s + 1, 0)


def _load_npz(path: str):
    """(X, y) from an .npz: scipy's ``save_npz`` keys plus ``y``/``labels``, or ``X`` and ``y``."""
    import scipy.sparse as sp

    with np.load(path, allow_pickle=False) as z:
        keys = set(z.files)
        ykey = "y" if "y" in keys else ("labels" if "labels" in keys else None)
        if ykey is None:
            raise InputError(path, "no 'y' (or 'labels') array in the .npz")
        y = z[ykey]
        if "X" in keys:
            X = z["X"]
        elif {"data", "indices", "indptr", "shape"} <= keys:
            fmt = z["format"].item() if "format" in keys else "csr"
            fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
            cls = {"csr": sp.csr_matrix, "csc": sp.csc_matrix}.get(fmt)
            if cls is None:
                raise InputError(path, f"sparse format {fmt!r} not supported (csr or csc)")
            X = cls((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
        else:
            raise InputError(path, "expected an 'X' array or scipy save_npz keys")
    return X, y


def _source_chunks(source, y, fmt: str | None, chunk_bytes: int, rows_per_chunk: int, dtype):
    """(chunk iterator, total input bytes or None, source description, ids are 0-based for sure).

    The iterator factory carries ``n_cols`` when the source knows its column count (a
    matrix's shape, a CSV's header), since trailing all-zero columns leave no trace in
    the nonzeros. Text readers refuse values that overflow ``dtype`` where they find them.
    """
    if callable(source):  # a factory of RowChunk iterators (ooc.synth), ids 0-based
        return source, None, getattr(source, "description", "<generated>"), True
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.exists(path):
            raise InputError(path, "no such file")
        fmt = fmt or detect_format(path)
        size = os.path.getsize(path)
        if fmt == "svmlight":
            return (lambda: iter_svmlight(path, chunk_bytes=chunk_bytes, value_dtype=dtype)), size, path, False
        if fmt == "csv":
            make = _tag_n_cols(lambda: iter_csv(path, chunk_bytes=chunk_bytes, value_dtype=dtype),
                               csv_layout(path).n_features)
            return make, size, path, True
        if fmt == "npz":
            X, yy = _load_npz(path)
            return _with_n_cols(lambda: _array_chunks(X, yy, rows_per_chunk), X), None, path, True
        raise ValueError(f"unknown input format {fmt!r}")
    if y is None:
        raise ValueError("converting an array or matrix needs its labels: convert(X, store, y=y)")
    return (_with_n_cols(lambda: _array_chunks(source, y, rows_per_chunk), source), None,
            f"<{type(source).__name__}>", True)


def _with_n_cols(make, X):
    """Tag a chunk factory with the column count of its matrix.

    The data alone cannot tell trailing all-zero columns from absent ones, but a
    matrix has a shape: a store built from it must have as many columns.
    """
    shape = getattr(X, "shape", ())
    return _tag_n_cols(make, int(shape[1]) if len(shape) == 2 else None)


def _tag_n_cols(make, n_cols):
    make.n_cols = n_cols
    return make


# -- the conversion ----------------------------------------------------------------------
def convert(
    source,
    store: str | os.PathLike,
    *,
    y=None,
    format: str = "zarr",
    layout: str = "both",
    memory: str | int = "1GiB",
    dtype: str = "float32",
    input_format: str | None = None,
    zero_based: bool | str = "auto",
    label_kind: str = "auto",
    n_features: int | None = None,
    block_bytes: int | str | None = None,
    chunk_len: int | None = None,
    overwrite: bool = False,
    progress: Callable[[dict], None] | None = None,
) -> Store:
    """Convert an input into an ooc store, streaming, in bounded memory.

    Parameters
    ----------
    source : path, numpy array or scipy sparse matrix
        An svmlight/LIBSVM file (plain, .gz, .bz2, .xz), a dense CSV/TSV file, an
        ``.npz`` file, or an in-memory matrix (then ``y`` is required).
    store : path
        Where the store goes (a directory for Zarr, a file for HDF5). Built under
        a temporary name and renamed when complete.
    format : {'zarr', 'hdf5'}
    layout : {'both', 'rows', 'cols'}
        Which layouts to store. The row layout is always built (the column one is
        derived from it) but dropped again for ``'cols'``.
    memory : bytes or str
        Bound on the memory used by the conversion (text buffers, blocks,
        transpose buckets).
    dtype : {'float32', 'float64'}
        Stored value type.
    zero_based : True, False or 'auto'
        Whether svmlight feature ids start at 0. ``'auto'``: 0-based if any id is
        0, else 1-based (scikit-learn's rule); recorded as ``index_base``.
    label_kind : {'auto', 'binary', 'multiclass', 'regression'}
        ``'auto'``: two distinct values -> binary, integers (up to 1000 distinct)
        -> multiclass, otherwise regression.
    n_features : int, optional
        Number of columns (at least 1 + the largest id); default from the source: a
        matrix's shape, a CSV's header (all-zero trailing columns included), otherwise
        1 + the largest id. A store keeps O(columns) arrays (column norms, the column
        pointer) and training O(columns) vectors, so a column count beyond
        :func:`ooc.store.stats.max_columns` (the memory available here at
        ``BYTES_PER_COLUMN`` bytes per column; about 2**32 with 256 GiB) is refused with
        the line of the offending feature id and a hint to hash into fewer columns,
        before anything that large is allocated.
    block_bytes : bytes, optional
        Decoded size of a block; default 64 MiB, capped at ``memory / 8``.
    progress : callable, optional
        Called with a dict (``phase``, ``bytes``, ``total``, ``rows``) as work advances.

    Returns
    -------
    Store
        The opened store.

    Raises
    ------
    InputError
        Bad input, with file, line and (where known) column; a value that overflows
        ``dtype``; a feature id that makes too many columns.
    StoreError
        The disk filled up (one line naming STORE and the file being written). Whatever
        fails, the temporary container and scratch files are removed; temporaries that
        killed conversions to the same STORE left behind are removed first (only those
        whose process is provably gone, see :func:`ooc.store.writer.remove_stale_temporaries`).
    """
    store = os.fspath(store)
    plan = _plan(source, store, y, format, layout, memory, dtype, input_format, zero_based, n_features,
                 block_bytes, chunk_len, overwrite)
    t0 = time.perf_counter()
    _build_and_publish(plan, label_kind, progress)
    if progress:
        progress({"phase": "done", "seconds": time.perf_counter() - t0})
    return open_store(store)


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
    memory: int


def _plan(source, store, y, format, layout, memory, dtype, input_format, zero_based, n_features, block_bytes,
          chunk_len, overwrite) -> _Plan:
    """Check :func:`convert`'s options, size its buffers and open the source (nothing written yet)."""
    if format not in BACKENDS:
        raise ValueError(f"unknown store format {format!r}; expected zarr or hdf5")
    if layout not in ("both", "rows", "cols"):
        raise ValueError(f"unknown layout {layout!r}; expected both, rows or cols")
    if np.dtype(dtype) not in L.DATA_DTYPES:
        raise ValueError(f"dtype must be float32 or float64, not {dtype!r}")
    mem = parse_bytes(memory)
    bb = parse_bytes(block_bytes) if block_bytes is not None else min(L.DEFAULT_BLOCK_BYTES, max(mem // 8, 1 << 16))
    cl = int(chunk_len or min(L.DEFAULT_CHUNK_LEN, max(bb // 16, 1024)))
    chunk_bytes = int(min(64 << 20, max(mem // 12, 1 << 16)))
    rows_per_chunk = max(1024, chunk_bytes // 64)
    # a memory:// store exists in this process's registry, not on disk
    exists = MemoryBackend.detect(store) if store.startswith("memory://") else os.path.exists(store)
    check_output_store(store, exists, overwrite, source)

    make_chunks, total, source_desc, known_zero = _source_chunks(source, y, input_format, chunk_bytes,
                                                                 rows_per_chunk, dtype)
    if n_features is None:
        n_features = getattr(make_chunks, "n_cols", None)
    elif n_features > max_columns():
        raise ValueError(too_many_columns(n_features, max_columns(), f"n_features={n_features}"))
    settings = {
        "zero_based": True if known_zero else zero_based,
        "index_dtype": np.dtype(np.int32),
    }
    layouts = {"both": (L.ROWS, L.COLS), "rows": (L.ROWS,), "cols": (L.COLS,)}[layout]
    # "memory://" stores live in this process (tests, small data); whatever --format says
    backend_cls = BACKENDS["memory"] if store.startswith("memory://") else BACKENDS[format]
    return _Plan(store, exists, layout, layouts, backend_cls, dtype, settings, make_chunks, total, source_desc,
                 n_features, bb, cl, mem)


def _build_and_publish(plan: _Plan, label_kind, progress) -> None:
    """Build the store under a temporary name (again from scratch when the input asks for other
    settings), then put it in place; on any failure remove the temporary, naming a full disk."""
    store = plan.store
    remove_stale_temporaries(store)  # what killed conversions to the same STORE left behind
    tmp = Temporary(store)
    try:
        while True:
            try:
                _build(plan.make_chunks, tmp.path, tmp.scratch, plan.backend_cls, plan.dtype, plan.settings,
                       plan.block_bytes, plan.chunk_len, plan.memory, plan.layouts, label_kind, plan.n_features,
                       plan.total, progress, plan.source_desc)
            except _Restart as r:
                tmp.remove()
                plan.settings.update(r.changes)
                continue
            break
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


def _build(make_chunks, tmp, scratch, backend_cls, dtype, settings, block_bytes, chunk_len, memory, layouts,
           label_kind, n_features, total, progress, source_desc):
    zero_based = settings["zero_based"]
    index_dtype = settings["index_dtype"]
    shift = 0 if zero_based is True else 1  # 'auto' starts by guessing 1-based (LIBSVM's convention)
    w = StoreWriter(backend_cls, tmp, dtype, index_dtype, block_bytes, chunk_len)
    try:
        limit = np.iinfo(index_dtype).max
        out_dtype = np.dtype(dtype)
        max_cols = max_columns()
        for chunk in make_chunks():
            ind = chunk.indices
            if shift and len(ind) and ind.min() == 0:
                if zero_based == "auto":
                    raise _Restart(zero_based=True)
                raise InputError(source_desc, "feature id 0 in a file declared 1-based",
                                 line=_line_of(chunk, int(np.flatnonzero(ind == 0)[0])))
            if len(ind) and ind.max() - shift >= max_cols:
                k = int(np.flatnonzero(ind - shift >= max_cols)[0])
                msg = too_many_columns(int(ind[k]) - shift + 1, max_cols, f"feature id {ind[k]}")
                raise InputError(source_desc, msg, line=_line_of(chunk, k))
            if len(ind) and ind.max() - shift >= limit:
                if index_dtype == np.int32:
                    raise _Restart(index_dtype=np.dtype(np.int64))
            ind = (ind - shift).astype(index_dtype) if shift else ind.astype(index_dtype)
            with np.errstate(over="ignore"):  # an overflow is reported below, not as a warning
                data = chunk.data.astype(out_dtype)
            if out_dtype != chunk.data.dtype and len(data) and not np.all(np.isfinite(data)):
                # text readers refuse these themselves, with the column; arrays end up here
                k = int(np.flatnonzero(~np.isfinite(data))[0])
                raise InputError(source_desc, f"value {chunk.data[k]!r} (feature {chunk.indices[k]}) overflows "
                                 f"{out_dtype}; store float64 values instead", line=_line_of(chunk, k))
            w.add_rows(chunk.labels, chunk.indptr, ind, data)
            if progress:
                progress({"phase": "rows", "bytes": chunk.bytes_consumed, "total": total, "rows": w.n_rows})
        if w.n_rows == 0:
            raise InputError(source_desc, "no data rows")
        attrs = w.finish_rows(n_features, label_kind)
        attrs["index_base"] = 0 if shift == 0 else 1
        attrs["source"] = source_desc
        if L.COLS in layouts:  # derived from the row layout, which is always written first
            build_columns(w.backend, w.n_rows, w.n_cols, w.col_nnz, block_bytes, chunk_len, memory, scratch,
                          progress)
        w.finalize(attrs, layouts)
    except BaseException:
        # close before the caller deletes the file: HDF5 would otherwise flush into a
        # deleted (or full) file when the handle is garbage-collected, with a traceback
        with contextlib.suppress(Exception):
            w.backend.close()
        raise


def _line_of(chunk: RowChunk, k: int) -> int:
    """Line (row, for arrays) of the ``k``-th entry of a chunk."""
    return chunk.first_line + int(np.searchsorted(chunk.indptr, k, side="right")) - 1


def build_columns(backend, n_rows, n_cols, col_nnz, block_bytes, chunk_len, memory, scratch=None,
                  progress=None):
    """Build ``cols/*`` from ``rows/*`` out of core (bucket by column block, then assemble).

    Parameters
    ----------
    scratch : str, optional
        Directory for the bucket files, created here and removed on return (whatever
        happens); None makes a private one in the system's temporary directory.

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
    n_cb = len(col_ptr) - 1
    backend.create_array(L.array_name(L.COLS, L.BLOCK_PTR), np.int64, max(len(col_ptr), 1), len(col_ptr))
    backend.write(L.array_name(L.COLS, L.BLOCK_PTR), 0, col_ptr)
    indptr = np.zeros(n_cols + 1, dtype=np.int64)
    np.cumsum(col_nnz, out=indptr[1:])
    ip = Appender(backend, L.array_name(L.COLS, L.INDPTR), np.int64, chunk_len)
    ip.append(indptr)
    ip.close()
    rec = np.dtype([("col", index_dtype), ("row", row_id_dtype), ("val", dtype)])
    out_ind = Appender(backend, L.array_name(L.COLS, L.INDICES), row_id_dtype, chunk_len)
    out_dat = Appender(backend, L.array_name(L.COLS, L.DATA), dtype, chunk_len)
    row_ptr = backend.read(L.array_name(L.ROWS, L.BLOCK_PTR))
    # row pieces for bucketing: blocks of the row layout, split further if memory is tight
    piece_bytes = max(memory // 6, 1 << 16)
    piece_entries = max(piece_bytes // rec.itemsize, 1)
    if scratch is None:
        bdir = tempfile.mkdtemp(prefix=".ooc-transpose-")
    else:
        os.makedirs(scratch)
        bdir = scratch
    try:
        paths = [os.path.join(bdir, f"b{k}.bin") for k in range(n_cb)]
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
                recs = np.empty(len(cols), dtype=rec)
                cuts = _kt.bucket_entries(rip[s - r0:e - r0 + 1] - lo, s, cols, vals, col_ptr, recs)
                del cols, vals
                for k in np.flatnonzero(np.diff(cuts)):
                    with open(paths[k], "ab") as f:
                        write_all(f, recs[cuts[k]:cuts[k + 1]])
                del recs
                s = e
            if progress:
                progress({"phase": "transpose", "done": b + 1, "total": len(row_ptr) - 1})
        for k in range(n_cb):
            c0, c1 = int(col_ptr[k]), int(col_ptr[k + 1])
            expected = int(indptr[c1] - indptr[c0])
            _check_bucket(paths[k], expected, rec.itemsize)
            if not expected:
                continue
            if c1 - c0 == 1:
                # a single column: already in row order, stream it without loading it whole
                with open(paths[k], "rb") as f:
                    while True:
                        r = np.fromfile(f, dtype=rec, count=piece_entries)
                        if not len(r):
                            break
                        out_ind.append(r["row"])
                        out_dat.append(r["val"])
            else:
                r = np.fromfile(paths[k], dtype=rec)
                rows_out = np.empty(expected, dtype=row_id_dtype)
                vals_out = np.empty(expected, dtype=dtype)
                if len(r) != expected or not _kt.assemble_block(r, c0, indptr[c0:c1 + 1] - indptr[c0],
                                                                rows_out, vals_out):
                    raise RuntimeError(f"transpose: column block {k} ({paths[k]}) does not match the "
                                       "column counts")
                del r
                out_ind.append(rows_out)
                out_dat.append(vals_out)
                del rows_out, vals_out
            os.remove(paths[k])
            if progress:
                progress({"phase": "assemble", "done": k + 1, "total": n_cb})
    finally:
        shutil.rmtree(bdir, ignore_errors=True)
    out_ind.close()
    out_dat.close()


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
