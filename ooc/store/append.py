"""Appending rows to a store: a new store made of the old one's rows followed by new ones.

A store is immutable and fingerprinted (a run records the fingerprint it trained on), so
"appending" writes a *new* store: the old store's row blocks are streamed through the same
:class:`~ooc.store.writer.StoreWriter` as a conversion, followed by the new rows, and the
column layout (if the old store has it) is rebuilt from the rows by the conversion's
:func:`~ooc.store.ingest.build_columns`. The result is built under a temporary name and
published atomically (:func:`~ooc.store.writer.publish`): whenever the process dies, the
path holds the old store or the new one, whole, never a half-appended one. Its arrays are
the ones a conversion of the concatenated data would write (same dtype, index base and
column count), so its fingerprint is that conversion's.

The new store records where it came from, sealed with its other attributes::

    lineage = [..., {"fingerprint": <old store's>, "n_rows": <its rows>, "n_cols": <its columns>}]

one entry per append, oldest first. ``ooc resume RUN --store NEW`` checks that the run's
store is in NEW's lineage: NEW then starts with exactly the rows the run trained on (the
writer copied them, in order), so the run's duals are the first rows' duals of NEW.

The new rows are parsed and validated by :func:`~ooc.store.ingest.convert` into a scratch
store first (rows layout, the old store's dtype, and a file read with the old store's input
recipe, :mod:`ooc.store.recipe`: format, index base, hash bits, text and CSV columns; options
that differ from it are refused), so bad input is refused with its file and line before
anything is written at the store's path. New rows of another width are refused for the inputs
that declare theirs (CSV, .npz, arrays, hashed input); svmlight rows may bring new feature ids
only when asked (``widen``, ``--widen``): a store never widens silently.
The grown store keeps the old store's recipe. Their labels must be
labels the old store has (binary and multiclass stores: a new class would be a different
task); regression labels are any finite number. Cost: one read of the old store's rows and
one write of everything (O(nnz)); memory as a conversion's.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from .. import owned
from .._cpu import resolve_threads
from .._malloc import tune_malloc
from .._memguard import governed
from .._memlimit import Budget, governor_reserve
from ..fsutil import contains, make_parents
from ..kernels.hash_bits import MAX_HASH_BITS
from . import layout as L
from .backend import MemoryBackend
from .ingest import (
    MIN_WORK,
    _kernel_format,
    _transpose_budget,
    buffer_budget,
    build_columns,
    column_bytes,
    command_budget,
    convert,
    load_kernels,
    unknown_width_bytes,
    whole_input_bytes,
    writer_bytes,
)
from .readers import InputError
from .recipe import Options, Recipe, follow
from .store import Store, open_store
from .writer import StoreWriter, Temporary, check_output_store, publish, remove_path, remove_stale_temporaries

#: The attribute listing the stores a store was appended from (oldest first).
LINEAGE = "lineage"


def lineage(st: Store) -> list[dict]:
    """The stores ``st`` was appended from, oldest first (``[]`` for a converted store)."""
    return list(st.attrs.get(LINEAGE) or [])


def starts_with(st: Store, fingerprint: str) -> dict | None:
    """The lineage entry of the store with ``fingerprint`` whose rows ``st`` starts with, or None."""
    for entry in lineage(st):
        if entry.get("fingerprint") == fingerprint:
            return entry
    return None


def _original_labels(old: Store, y: np.ndarray) -> np.ndarray:
    """Labels as the user gave them: a binary store keeps -1/+1 and its original two values."""
    if old.label_kind != L.BINARY:
        return y
    lo, hi = (float(v) for v in old.attrs["label_values"])
    return np.where(y > 0, hi, lo)


def _check_new_labels(old: Store, y: np.ndarray, source: str, first_row: int) -> None:
    if old.label_kind == L.REGRESSION:
        return
    known = np.asarray(old.attrs["label_values"] if old.label_kind == L.BINARY else old.classes, dtype=np.float64)
    bad = ~np.isin(y, known)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise InputError(source, f"row {first_row + k}: label {y[k]:g} is not one of the store's labels "
                                 f"{[float(v) for v in np.unique(known)]} (appended rows keep the task)")


def append(store, source, out: str | os.PathLike | None = None, *, y=None, sample_weight=None, memory="auto",
           input_format: str | None = None, overwrite: bool = False, options: Options | None = None,
           widen: bool = False) -> Store:
    """Write the rows of ``store`` followed by the rows of ``source`` as a store at ``out``.

    Parameters
    ----------
    store : str or Store
        The store to extend (it needs the row layout; a factorized store is refused).
    source : path, matrix
        The new rows, as :func:`ooc.convert` reads them (an in-memory matrix needs ``y``, and
        takes ``sample_weight``). A file is read with the store's input recipe
        (:mod:`ooc.store.recipe`: its format, index base, hash bits, text columns, CSV columns).
        Sample weights carry over: a row without one (in either store) weighs 1.
    out : path, optional
        Where the new store goes; default ``store`` itself, replaced atomically (do not
        append to a store a run is training on meanwhile: write to another path).
    memory : bytes or str
        Bound on the conversion's memory (as :func:`ooc.convert`).
    input_format, options : str, Options, optional
        What the user said about how to read ``source`` (``--input-format``, ``--index-base``,
        ``--hash-bits``, ``--text``, ``--weight-column``): each must agree with the store's recipe.
    overwrite : bool
        Replace an existing ``out`` other than ``store`` (only an ooc store).
    widen : bool
        Let svmlight rows bring feature ids past the store's features (the new store has more
        columns). Without it such rows are refused: a store never widens silently (a file numbered
        from 1 read as a 0-based store's input would otherwise shift every feature by one).

    Returns
    -------
    Store
        The new store, opened; ``lineage`` ends with the old store's fingerprint and row count.
    """
    opened = isinstance(store, (str, os.PathLike))
    target = os.fspath(out) if out is not None else os.fspath(store) if opened else store.path
    # one writer of the output at a time, from before the old store is read (in place) to the swap
    with owned.exclusive(target, "the append"):
        return _append(store, source, out, opened, y, sample_weight, memory, input_format, overwrite, options, widen)


def _append(store, source, out, opened, y, sample_weight, memory, input_format, overwrite, options, widen) -> Store:
    """:func:`append`, holding the output's lock."""
    old = open_store(store) if opened else store
    out = os.fspath(out) if out is not None else old.path
    if not old.has_layout(L.ROWS):
        raise ValueError(f"{old.path}: appending needs the row layout (this store has only "
                         f"{', '.join(old.layouts)}); convert with --layout rows or both")
    if old.attrs.get(L.FACTOR):
        raise ValueError(f"{old.path}: a factorized store cannot be appended to (its factor U covers the old rows); "
                         "convert the concatenated data with --factorize instead")
    memory_store = out.startswith("memory://")
    in_place = out == old.path if "://" in out else os.path.abspath(out) == os.path.abspath(old.path)
    exists = MemoryBackend.detect(out) if memory_store else os.path.lexists(out)
    if in_place and not memory_store:
        # the store is replaced by the new one: it must hold only what ooc wrote (no user's file inside)
        owned.check_replaceable(out, "the appended store", kind="store")
    if not in_place:
        if "://" not in out and "://" not in old.path and contains(old.path, out):
            raise FileExistsError(f"{out}: is inside the store {old.path}; choose another output path")
        if not memory_store:
            make_parents(out)  # --out a/b.zarr makes a/
        check_output_store(out, exists, overwrite, source)
    # how the new rows are read: as the store's input was (options that differ are refused first)
    owner = f"the store {old.path}"
    recipe = Recipe.from_attrs(old.attrs, old.path)
    opts = (options or Options())._replace(input_format=input_format or (options.input_format if options else None))
    reading = follow(recipe, opts, owner) if isinstance(source, (str, os.PathLike)) else None
    if reading is not None and recipe.format is None and reading.hash_bits is None and old.n_cols > 1 \
            and old.n_cols & (old.n_cols - 1) == 0:
        # a store from before recipes: hashed new rows get as many columns as it has (2**bits)
        reading = reading._replace(hash_bits=min(old.n_cols.bit_length() - 1, MAX_HASH_BITS))
    # the kernels the new rows' conversion calls, loaded first: counted in what the process holds when the
    # budget is resolved (ingest.load_kernels)
    peak = load_kernels(_kernel_format(source, opts.input_format, None, reading), str(old.dtype), resolve_threads(0))
    budget = command_budget(memory, held=peak)  # once, for the new rows' conversion and the rewrite both
    # the writers' chunk buffers (the new rows' and the grown store's, one after the other) are as long as
    # the store's chunks, whatever the budget: charged first, the rest sized from what they leave
    chunk_len = int(old.attrs.get("chunk_len") or L.DEFAULT_CHUNK_LEN)
    writer = writer_bytes(chunk_len, old.dtype, old.index_dtype)
    # the new rows' conversion, then the rewrite reading two stores: twice a conversion's buffers at least
    least = column_bytes(old.n_cols) + 2 * MIN_WORK
    if reading is not None and reading.format in (None, "svmlight"):  # the new rows' width is read, not said
        least = max(least, unknown_width_bytes(old.n_cols))
    # an .npz of new rows is read whole by their conversion (ingest.whole_input_bytes), beside its columns
    whole = whole_input_bytes(source, reading.format if reading is not None else input_format)
    least = max(least, whole + column_bytes(old.n_cols) + MIN_WORK)
    budget.require(writer + least, f"this append (with {old.n_cols} columns, chunks of {chunk_len} entries)")
    budget = budget._replace(work=max(0, budget.work - writer), reserved=budget.reserved + writer)
    remove_stale_temporaries(out)
    tmp = Temporary(out)
    new_rows = _scratch_path(out)
    try:
        # the new rows, parsed and validated on their own (bad input refused before anything else)
        new = convert(source, new_rows, y=y, sample_weight=sample_weight, layout="rows", memory=budget, dtype=str(old.dtype),
                      label_kind=L.REGRESSION, block_bytes=int(old.attrs["block_bytes"]), chunk_len=chunk_len,
                      recipe=reading, recipe_owner=None if _stated(opts) == recipe.format else owner)
        try:
            _check_width(old, new, recipe, reading, source, widen)
            _write(old, new, tmp, budget, str(source) if isinstance(source, (str, os.PathLike)) else "a matrix")
        finally:
            new.close()
        if opened or in_place:  # read whole: the old store's files may now be replaced
            old.close()
        publish(tmp.path, out, replace=exists)
    except BaseException:
        tmp.remove()
        raise
    finally:
        tmp.release()
        remove_path(new_rows)
    return open_store(out)


def _check_width(old: Store, new: Store, recipe: Recipe, reading: Recipe | None, source, widen: bool) -> None:
    """Refuse new rows of another width where the width is the input's (not the largest id seen):
    CSV, .npz and arrays declare theirs, hashed inputs have ``2**hash_bits`` columns. svmlight
    rows with an id past the store's features are refused unless ``widen`` (the grown store then
    has more columns): never widened silently. When the index base explains it (ids 1 to d read
    0-based, no id 0), the refusal says so and names ``--index-base``."""
    name = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "the new rows"
    if recipe.format in ("svmlight", None) and new.attrs.get(L.RECIPE, {}).get("format") == "svmlight":
        if new.n_cols <= old.n_cols or widen:
            return
        base = int(reading.index_base or 0) if reading is not None else 0
        how = ("--index-base 0" if reading is not None and reading.index_base_source == "option"
               else f"as the store {old.path}'s input was")
        d = old.n_cols
        if base == 0 and new.n_cols == d + 1 and _smallest_column(new) >= 1:
            raise InputError(name, f"has feature ids 1 to {d} and no id 0, read 0-based ({how}): id {d} would be a "
                                   f"new column. The file looks 1-based: if it is, pass --index-base 1 (if id {d} "
                                   "is a new feature, --widen)")
        raise InputError(name, f"has feature ids up to {new.n_cols - 1 + base}, beyond the store {old.path}'s {d} "
                               f"features (ids {base} to {d - 1 + base}): appending never widens a store unless "
                               "asked (--widen)")
    if new.n_cols != old.n_cols:
        raise InputError(name, f"has {new.n_cols} feature columns but the store {old.path} has {old.n_cols} "
                               "(another feature space)")


def _smallest_column(st: Store) -> int:
    """The smallest column holding a nonzero in ``st`` (its number of columns when none)."""
    low = st.n_cols
    for b in range(st.n_blocks(L.ROWS)):
        ind = st.block(L.ROWS, b).indices
        if len(ind):
            low = min(low, int(ind.min()))
    return low


def _stated(opts: Options) -> str | None:
    """The format the user gave (``--input-format``; ``text`` for ``--text``): a file so stated is read as it,
    whatever its name says."""
    return "text" if opts.text_columns is not None else opts.input_format


def _scratch_path(out: str) -> str:
    """Where the new rows are converted first: beside ``out`` (same disk), or in memory for a memory store."""
    from ..fsutil import temporary_sibling

    if out.startswith("memory://"):
        import uuid

        return f"{out}.rows-{uuid.uuid4().hex[:8]}"
    return temporary_sibling(out, "append-rows")


def _write(old: Store, new: Store, tmp: Temporary, budget: Budget, source: str) -> None:
    """Stream ``old``'s rows then ``new``'s into a writer at ``tmp`` and seal it with its lineage, under
    ``budget``'s ceiling (the memory governor); the stores are read in blocks cut to what it holds."""
    tune_malloc()
    with governed(budget.ceiling, reserve=governor_reserve(budget.ceiling or 0)):
        _write_governed(old, new, tmp, budget, source)


def _write_governed(old: Store, new: Store, tmp: Temporary, budget: Budget, source: str) -> None:
    index_dtype = max(np.dtype(old.index_dtype), np.dtype(new.index_dtype), key=lambda t: t.itemsize)
    block_bytes = int(old.attrs["block_bytes"])
    chunk_len = int(old.attrs.get("chunk_len") or L.DEFAULT_CHUNK_LEN)
    w = StoreWriter(type(old.backend), tmp.path, old.dtype, index_dtype, block_bytes, chunk_len)
    n_cols = max(old.n_cols, new.n_cols)
    # read blocks: one, its copies for the writer and their encoding at once (an eighth each, as evaluate's)
    read_bytes = int(min(block_bytes, max(buffer_budget(budget, n_cols) // 8, 1 << 16)))
    try:
        for st, original in ((old.with_blocks(read_bytes), True), (new.with_blocks(read_bytes), False)):
            for b in range(st.n_blocks(L.ROWS)):
                blk = st.block(L.ROWS, b)
                labels = st.read_labels(blk.start, blk.stop)
                if original:
                    labels = _original_labels(old, labels)
                else:
                    _check_new_labels(old, labels, source, blk.start)
                # sample weights carried over (a store without them: each row weighs 1)
                w.add_rows(labels, blk.indptr, blk.indices.astype(index_dtype, copy=False), blk.data,
                           st.read_weights(blk.start, blk.stop))
        attrs = w.finish_rows(n_cols, old.label_kind)
        attrs["index_base"] = int(old.attrs.get("index_base", 0))
        if L.RECIPE in old.attrs:  # the grown store's rows were all read one way: the old store's
            attrs[L.RECIPE] = old.attrs[L.RECIPE]
        attrs["source"] = f"{old.attrs.get('source', old.path)} + {source}"
        attrs[LINEAGE] = lineage(old) + [{"fingerprint": old.fingerprint, "n_rows": old.n_rows,
                                          "n_cols": old.n_cols}]
        if L.COLS in old.layouts:  # derived from the row layout, as in a conversion
            build_columns(w.backend, w.n_rows, w.n_cols, w.col_nnz, block_bytes, chunk_len,
                          _transpose_budget(budget, w.n_cols), tmp.scratch)
        w.finalize(attrs, old.layouts)
    except BaseException:
        with contextlib.suppress(Exception):
            w.backend.close()
        raise
