"""What a store must satisfy before anything is read from it: it is never trusted blindly.

A store that opens trains, so damage must be refused at open (or at the read that meets
it), never believed: a missing chunk file read as zeros trains a "converged" all-zero
model, and an attribute that disagrees with the arrays (a shape, a count, a dtype, a
statistic the step sizes come from) trains garbage. Three defences, all cheap at open
(O(arrays + blocks) metadata and a few single-element reads, nothing O(n)):

* **Every chunk is present.** Stores carrying :data:`~ooc.store.layout.ALL_CHUNKS_WRITTEN`
  were written with every chunk, zeros included; the backend is told
  (:meth:`~ooc.store.backend.Backend.require_every_chunk`), lists each array's chunks
  once (:meth:`~ooc.store.backend.Backend.check_chunks`) and refuses a chunk found missing
  later instead of reading fill values. Older stores keep their old semantics.
* **The attributes are sealed.** :func:`seal_attrs` stores a digest of each attribute but
  ``complete`` and the digest itself (:data:`~ooc.store.layout.ATTRS_DIGEST`: blake2b of
  its canonical JSON, ``json.dumps(value, sort_keys=True)``), one per key so a refusal can
  name the attribute edited or damaged; an attribute added since is refused too. Every
  writer of attributes seals after writing them (the store writer, the factorizer).
  Stores without a digest (older ones) are checked by the rules below only; a store that
  records every chunk written must have one.
* **The attributes agree with the arrays.** Required keys present; values of the right
  kind; every array of the layouts present with the length and dtype the attributes imply;
  ``indptr`` starting at 0 and ending at ``nnz``; block pointers splitting the lines.

Every failure is one :class:`~ooc.store.backend.StoreCorruptError` line naming the store
and the attribute or array.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from .backend import Backend, StoreCorruptError
from .layout import (
    ALL_CHUNKS_WRITTEN,
    ATTRS_DIGEST,
    BINARY,
    BLOCK_PTR,
    COL_NNZ,
    COL_SQNORM,
    DATA,
    DATA_DTYPES,
    FACTOR,
    FACTOR_A_SQNORM,
    FACTOR_BLOCK_PTR,
    FACTOR_U,
    FACTOR_VT,
    INDICES,
    INDPTR,
    INDPTR_DTYPE,
    LABEL_DTYPE,
    LABEL_KINDS,
    LABELS,
    LAYOUTS,
    REGRESSION,
    REQUIRED_ATTRS,
    ROW_NNZ,
    ROW_SQNORM,
    ROWS,
    STAT_FLOAT,
    WEIGHTS,
    WEIGHTS_ATTR,
    array_name,
    index_dtype_for,
)

#: Attributes the digest leaves out: ``complete`` is written after it (last of all), and the
#: digest cannot cover itself.
UNSEALED = ("complete", ATTRS_DIGEST)
_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


# -- the attribute digest --------------------------------------------------------------
def attrs_digest(attrs: dict) -> dict[str, str]:
    """The digest of ``attrs``: ``{key: blake2b-128 hex of the canonical JSON of its value}``."""
    return {k: _digest(v) for k, v in attrs.items() if k not in UNSEALED}


def _digest(value) -> str:
    text = json.dumps(value, sort_keys=True, default=_plain)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _plain(o):
    """numpy scalars and arrays as JSON values (what a backend stores for them)."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"attribute value {o!r} is not JSON-serialisable")


def seal_attrs(backend: Backend) -> None:
    """Store the digest of ``backend``'s attributes as they now are (read back: what the backend keeps).

    Call after writing attributes, before ``complete``; a writer that changes the
    attributes of a complete store (:mod:`ooc.store.factorize`) seals again.
    """
    backend.set_attrs({ATTRS_DIGEST: attrs_digest(backend.attrs)})


# -- attributes ------------------------------------------------------------------------
def check_attrs(path: str, attrs: dict) -> None:
    """Refuse attributes that miss a key, contradict their digest or have values of the wrong kind.

    ``format``, ``format_version`` and ``complete`` are the caller's (they decide whether
    this is a store of this ooc at all).

    Raises
    ------
    StoreCorruptError
        One line naming ``path`` and the attribute.
    """
    for key in REQUIRED_ATTRS:
        if key not in attrs:
            raise StoreCorruptError(f"{path}: attribute {key!r} is missing")
    _check_digest(path, attrs)
    shape = attrs["shape"]
    _require(path, attrs, "shape", isinstance(shape, list) and len(shape) == 2 and all(map(_is_count, shape)),
             "two counts [rows, columns]")
    _require(path, attrs, "nnz", _is_count(attrs["nnz"]), "a count")
    _require(path, attrs, "dtype", attrs["dtype"] in [str(t) for t in DATA_DTYPES], "float32 or float64")
    _require(path, attrs, "index_dtype", attrs["index_dtype"] in [str(t) for t in _INDEX_DTYPES],
             "int32 or int64")
    lays = attrs["layouts"]
    _require(path, attrs, "layouts", isinstance(lays, list) and 0 < len(lays) == len(set(map(str, lays)))
             and all(lay in LAYOUTS for lay in lays), f"a non-empty list of distinct layouts out of {LAYOUTS}")
    _require(path, attrs, "block_bytes", _is_count(attrs["block_bytes"]) and attrs["block_bytes"] > 0,
             "a positive byte count")
    _require(path, attrs, "fingerprint", isinstance(attrs["fingerprint"], str), "a string")
    if "chunk_len" in attrs:
        _require(path, attrs, "chunk_len", _is_count(attrs["chunk_len"]) and attrs["chunk_len"] > 0,
                 "a positive count")
    if ALL_CHUNKS_WRITTEN in attrs:
        _require(path, attrs, ALL_CHUNKS_WRITTEN, attrs[ALL_CHUNKS_WRITTEN] is True, "true")
    if "stats" in attrs:
        _require(path, attrs, "stats", isinstance(attrs["stats"], dict), "a dict of statistics")
    if "index_base" in attrs:
        _require(path, attrs, "index_base", attrs["index_base"] in (0, 1), "0 or 1")
    _check_labels(path, attrs)
    if WEIGHTS_ATTR in attrs:
        _check_weights(path, attrs)
    factor = attrs.get(FACTOR)
    if factor:
        _require(path, attrs, FACTOR, isinstance(factor, dict) and _is_count(factor.get("k")) and factor["k"] > 0
                 and _is_count(factor.get("blocks")), "a dict with k >= 1 and a block count")


def _check_digest(path: str, attrs: dict) -> None:
    stored = attrs.get(ATTRS_DIGEST)
    if stored is None:
        if attrs.get(ALL_CHUNKS_WRITTEN) is not None:  # written by an ooc that seals: the digest was removed
            raise StoreCorruptError(f"{path}: attribute {ATTRS_DIGEST!r} is missing")
        return  # a store written before digests: the checks below are all there is
    if not isinstance(stored, dict) or not all(isinstance(v, str) for v in stored.values()):
        raise StoreCorruptError(f"{path}: attribute {ATTRS_DIGEST!r} is damaged (not a dict of digests)")
    actual = attrs_digest(attrs)
    for key in sorted(set(stored) | set(actual)):
        if key not in actual:
            raise StoreCorruptError(f"{path}: attribute {key!r} is missing (the attribute digest lists it)")
        if key not in stored:
            raise StoreCorruptError(f"{path}: attribute {key!r} is not covered by the attribute digest "
                                    "(added after the store was written)")
        if stored[key] != actual[key]:
            raise StoreCorruptError(f"{path}: attribute {key!r} does not match the attribute digest "
                                    "(edited or damaged since the store was written)")


def _check_labels(path: str, attrs: dict) -> None:
    kind, classes = attrs["label_kind"], attrs["classes"]
    _require(path, attrs, "label_kind", kind in LABEL_KINDS, f"one of {LABEL_KINDS}")
    if kind == REGRESSION:
        _require(path, attrs, "classes", classes is None, "null for label_kind 'regression'")
    else:
        most = 2 if kind == BINARY else None
        ok = (isinstance(classes, list) and len(classes) >= 1 and (most is None or len(classes) <= most)
              and all(map(_is_number, classes)) and all(a < b for a, b in zip(classes, classes[1:])))
        _require(path, attrs, "classes", ok, f"an increasing list of {'1 or 2' if most else 'at least 1'} "
                 f"numbers for label_kind {kind!r}")
    if "label_values" in attrs:
        vals = attrs["label_values"]
        _require(path, attrs, "label_values", isinstance(vals, list) and len(vals) == 2 and all(map(_is_number, vals)),
                 "two numbers [negative, positive]")
    counts = attrs.get("label_counts")
    if counts is not None:
        ok = isinstance(counts, dict) and all(map(_is_count, counts.values()))
        _require(path, attrs, "label_counts", ok, "a dict of counts")
        if kind != REGRESSION:
            _require(path, attrs, "label_counts", len(counts) == len(classes), "one count per class")


def _check_weights(path: str, attrs: dict) -> None:
    """The sample weights' summary: sum, min and max (finite, ``0 <= min <= max``), class sums."""
    sw = attrs[WEIGHTS_ATTR]
    ok = (isinstance(sw, dict) and all(_is_number(sw.get(k)) and np.isfinite(sw[k]) for k in ("sum", "min", "max"))
          and 0 <= sw["min"] <= max(sw["max"], 0) and sw["sum"] >= 0)
    sums = sw.get("class_sums") if isinstance(sw, dict) else None
    ok = ok and (sums is None or (isinstance(sums, dict) and all(_is_number(v) and v >= 0 for v in sums.values())))
    _require(path, attrs, WEIGHTS_ATTR, ok, "a dict of the weights' sum, min and max (finite, >= 0)")


def _is_count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _require(path: str, attrs: dict, key: str, ok: bool, expected: str) -> None:
    if not ok:
        raise StoreCorruptError(f"{path}: attribute {key!r} = {_short(attrs.get(key))}: expected {expected}")


def _short(value, most: int = 80) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= most else text[:most - 3] + "..."


# -- arrays ----------------------------------------------------------------------------
def check_arrays(backend: Backend, attrs: dict) -> dict[str, np.ndarray]:
    """Refuse arrays that are missing, or whose length or dtype is not what the attributes say.

    ``attrs`` passed :func:`check_attrs`. Tells the backend to refuse chunks without bytes
    when the store records that every chunk was written, and lists each array's chunks.

    Returns
    -------
    dict
        The block pointer of each layout (read here anyway: the :class:`~ooc.store.store.Store` keeps them).

    Raises
    ------
    StoreCorruptError
        One line naming the store, the array and the attribute it contradicts.
    """
    if attrs.get(ALL_CHUNKS_WRITTEN):
        backend.require_every_chunk()
    check = _ArrayCheck(backend, attrs)
    (n, d), nnz = attrs["shape"], attrs["nnz"]
    check(LABELS, n, "shape", LABEL_DTYPE)
    check(ROW_NNZ, n, "shape", np.dtype(np.int64))
    check(ROW_SQNORM, n, "shape", STAT_FLOAT)
    check(COL_NNZ, d, "shape", np.dtype(np.int64))
    check(COL_SQNORM, d, "shape", STAT_FLOAT)
    if WEIGHTS_ATTR in attrs:  # (a removed attribute is refused by the digest, which lists it)
        check(WEIGHTS, n, "shape", STAT_FLOAT)
    ptrs = {}
    for lay in attrs["layouts"]:
        lines = n if lay == ROWS else d
        ipn = array_name(lay, INDPTR)
        check(ipn, lines + 1, "shape", INDPTR_DTYPE)
        # row ids of the column layout take the smallest dtype that holds n (ooc.store.ingest.build_columns)
        index_dtype = np.dtype(attrs["index_dtype"]) if lay == ROWS else index_dtype_for(n)
        check(array_name(lay, INDICES), nnz, "nnz", index_dtype, "index_dtype" if lay == ROWS else None)
        check(array_name(lay, DATA), nnz, "nnz", np.dtype(attrs["dtype"]), "dtype")
        first, last = (int(backend.read(ipn, i, i + 1)[0]) for i in (0, lines))
        if first != 0:
            raise StoreCorruptError(f"{backend.path}: array {ipn!r} starts at {first}, expected 0")
        if last != nnz:
            raise StoreCorruptError(f"{backend.path}: array {ipn!r} ends at {last}, but attribute 'nnz' = {nnz}")
        ptrs[lay] = check.pointer(array_name(lay, BLOCK_PTR), lines)
    counts = attrs.get("label_counts")
    if counts is not None and attrs["label_kind"] != REGRESSION and sum(counts.values()) != n:
        # after the arrays: a shape that disagrees with them is named as such first
        raise StoreCorruptError(f"{backend.path}: attribute 'label_counts' counts {sum(counts.values())} labels, "
                                f"but attribute 'shape' = {_short(attrs['shape'])} means {n}")
    factor = attrs.get(FACTOR)
    if factor:
        k, dtype = factor["k"], np.dtype(attrs["dtype"])
        check(FACTOR_U, n * k, "factor", dtype)
        check(FACTOR_VT, d * k, "factor", dtype)
        check(FACTOR_A_SQNORM, n, "shape", STAT_FLOAT)
        ptr = check.pointer(FACTOR_BLOCK_PTR, n)
        if len(ptr) - 1 != factor["blocks"]:
            raise StoreCorruptError(f"{backend.path}: array {FACTOR_BLOCK_PTR!r} has {len(ptr) - 1} blocks, "
                                    f"but attribute 'factor' says {factor['blocks']}")
    return ptrs


class _ArrayCheck:
    """Checks one array at a time against the attributes (see :func:`check_arrays`)."""

    def __init__(self, backend: Backend, attrs: dict):
        self.backend, self.attrs, self.path = backend, attrs, backend.path

    def __call__(self, name: str, length: int, length_key: str, dtype: np.dtype, dtype_key: str | None = None):
        """Array ``name`` has ``length`` elements (implied by attribute ``length_key``) of ``dtype``
        (implied by ``dtype_key``, or fixed by the layout), and all its chunks."""
        be = self.backend
        got = be.length(name)
        if got != length:
            raise StoreCorruptError(f"{self.path}: array {name!r} has {got} elements, but attribute {length_key!r} = "
                                    f"{_short(self.attrs.get(length_key))} means {length}")
        got = be.dtype(name)
        if got != dtype:
            says = f"attribute {dtype_key!r} = {_short(self.attrs.get(dtype_key))} means" if dtype_key else "expected"
            raise StoreCorruptError(f"{self.path}: array {name!r} holds {got} values, but {says} {dtype}")
        be.check_chunks(name)

    def pointer(self, name: str, lines: int) -> np.ndarray:
        """Block pointer ``name`` over ``lines`` lines, checked: 0 first, ``lines`` last, non-decreasing.

        Its length is checked before it is read (every block holds a line at least), so a
        damaged length cannot make the read huge.
        """
        be = self.backend
        n = be.length(name)
        if not 1 <= n <= lines + 1:
            raise StoreCorruptError(f"{self.path}: array {name!r} has {n} elements; a block pointer over "
                                    f"{lines} lines has 1 to {lines + 1}")
        if be.dtype(name) != np.dtype(np.int64):
            raise StoreCorruptError(f"{self.path}: array {name!r} holds {be.dtype(name)} values, expected int64")
        be.check_chunks(name)
        ptr = be.read(name)
        if int(ptr[0]) != 0 or int(ptr[-1]) != lines or np.any(np.diff(ptr) < 0):
            raise StoreCorruptError(f"{self.path}: array {name!r} does not split lines 0..{lines} into blocks "
                                    f"(starts at {int(ptr[0])}, ends at {int(ptr[-1])}, must not decrease); "
                                    f"attribute 'shape' = {_short(self.attrs.get('shape'))}")
        return ptr
