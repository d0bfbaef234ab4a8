"""Synthetic sparse data, generated chunk by chunk (any size the disk holds).

Rows have ``nnz_per_row`` distinct features drawn from a Zipf-like popularity
law (a few very frequent features, a long tail: what hashed text looks like),
values ``1/sqrt(nnz)`` (tf-idf-like, unit row norm) or Gaussian, and labels from a
planted sparse linear model with label noise. The same seed gives the same data
whatever the chunking.
"""

from __future__ import annotations

import numpy as np

from .options import SYNTH
from .store.readers import RowChunk

TASKS = ("binary", "multiclass", "regression")


class SynthSource:
    """A re-iterable source of :class:`RowChunk` for :func:`ooc.convert`.

    Parameters
    ----------
    rows, cols, nnz_per_row : int
        Shape and row density (each row has exactly ``nnz_per_row`` features; more than ``cols`` is
        refused).
    task : {'binary', 'multiclass', 'regression'}
    n_classes : int
        Classes for ``multiclass``.
    zipf : float
        Popularity exponent: feature of rank r is drawn with weight ``(r + 1) ** -zipf``.
    informative : int
        Nonzero weights of the planted model.
    noise : float
        Label flip probability (classification) or noise std relative to the signal.
    values : {'normalized', 'gaussian', 'binary'}
    seed : int
    rows_per_chunk : int
    """

    def __init__(self, rows, cols, nnz_per_row, task="binary", n_classes=3, zipf=1.1,
                 informative=100, noise=0.05, values="normalized", seed=0, rows_per_chunk=65536):
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}")
        given = {"rows": rows, "cols": cols, "nnz_per_row": nnz_per_row, "n_classes": n_classes, "zipf": zipf,
                 "informative": informative, "noise": noise, "seed": seed}
        for name, value in given.items():  # the command line's rule (ooc.options.SYNTH), naming the argument
            given[name] = SYNTH[name].check(value, name)
        if task != "regression" and given["noise"] > 1:
            raise ValueError(f"noise is a label flip probability for {task} labels: from 0 to 1 (got {noise!r})")
        rows, cols, nnz_per_row, n_classes, zipf, informative, noise, seed = given.values()
        if nnz_per_row > cols:
            # a row has distinct features: more than there are is a mistake, never clamped silently
            raise ValueError(f"nnz_per_row (--nnz-per-row) {nnz_per_row} is more than cols (--cols) {cols}: a row "
                             "has at most one nonzero per feature")
        if rows * nnz_per_row > SYNTH["rows"].high:
            raise ValueError(f"rows (--rows) {rows} times nnz_per_row (--nnz-per-row) {nnz_per_row} nonzeros is more "
                             "than a store counts (2**63 - 1)")
        self.rows, self.cols = int(rows), int(cols)
        self.k = int(nnz_per_row)
        self.task, self.n_classes = task, int(n_classes)
        self.zipf, self.noise, self.values, self.seed = zipf, noise, values, seed
        self.rows_per_chunk = int(rows_per_chunk)
        rng = np.random.default_rng([seed, 1])
        # popularity: a random permutation of ranks so frequent features are spread over ids
        self._perm = rng.permutation(self.cols)
        w = (np.arange(self.cols, dtype=np.float64) + 1.0) ** -zipf
        self._cdf = np.cumsum(w / w.sum())
        n_out = self.n_classes if task == "multiclass" else 1
        self.coef = np.zeros((n_out, self.cols))
        # informative features among the popular ones, so the signal is learnable
        top = self._perm[: max(informative * 4, 1)]
        for c in range(n_out):
            idx = rng.choice(top, size=min(informative, len(top)), replace=False)
            self.coef[c, idx] = rng.standard_normal(len(idx)) * 3.0
        self.n_rows = self.rows  # for progress: the rows to come (nothing is parsed)
        self.description = (f"<synth rows={rows} cols={cols} nnz_per_row={nnz_per_row} task={task} "
                            f"seed={seed}>")

    def __call__(self):
        for s in range(0, self.rows, self.rows_per_chunk):
            yield self.chunk(s, min(self.rows, s + self.rows_per_chunk))

    #: Rows drawn from one random stream. Chunks are cut out of these fixed spans, so
    #: the data does not depend on ``rows_per_chunk`` (65536, the default chunk, keeps
    #: the default output what it always was).
    GEN_ROWS = 65536

    def chunk(self, start: int, stop: int) -> RowChunk:
        """Rows ``start..stop-1`` (0-based ids), the same whatever the chunking."""
        G = self.GEN_ROWS
        parts = []
        for g0 in range(start // G * G, stop, G):
            ch = self._span(g0, min(self.rows, g0 + G))
            lo, hi = max(start, g0) - g0, min(stop, g0 + G) - g0
            if (lo, hi) != (0, len(ch.labels)):
                a, b = ch.indptr[lo], ch.indptr[hi]
                ch = RowChunk(ch.labels[lo:hi], ch.indptr[lo:hi + 1] - a, ch.indices[a:b], ch.data[a:b], 0, 0)
            parts.append(ch)
        if len(parts) == 1:
            c = parts[0]
            return RowChunk(c.labels, c.indptr, c.indices, c.data, start + 1, 0)
        off = np.cumsum([0] + [int(c.indptr[-1]) for c in parts[:-1]])
        return RowChunk(np.concatenate([c.labels for c in parts]),
                        np.concatenate([parts[0].indptr[:1]] + [c.indptr[1:] + o for c, o in zip(parts, off)]),
                        np.concatenate([c.indices for c in parts]), np.concatenate([c.data for c in parts]),
                        start + 1, 0)

    def _span(self, start: int, stop: int) -> RowChunk:
        m = stop - start
        rng = np.random.default_rng([self.seed, 2, start])
        k = self.k
        # draw with replacement, then top up duplicates: exact k distinct per row
        ranks = np.searchsorted(self._cdf, rng.random((m, k)))
        ranks = np.minimum(ranks, self.cols - 1)
        ids = np.sort(self._perm[ranks], axis=1)
        dup = np.zeros_like(ids, dtype=bool)
        dup[:, 1:] = ids[:, 1:] == ids[:, :-1]
        if k == self.cols:  # every feature in every row (dense data)
            ids = np.broadcast_to(np.arange(k, dtype=ids.dtype), ids.shape).copy()
        elif dup.any():
            ids = ids.copy()
            for r in np.flatnonzero(dup.any(axis=1)):
                row = np.unique(ids[r])
                if 2 * k > self.cols:
                    # most features in every row: draw the missing ones from the others at once (topping
                    # up by uniform draws, as below, would take a coupon collector's time per row)
                    rest = np.setdiff1d(np.arange(self.cols), row, assume_unique=True)
                    row = np.sort(np.concatenate((row, rng.choice(rest, size=k - len(row), replace=False))))
                while len(row) < k:
                    extra = rng.integers(0, self.cols, size=k - len(row))
                    row = np.unique(np.concatenate((row, extra)))
                ids[r] = row[:k]
        indices = ids.ravel().astype(np.int64)
        if self.values == "binary":
            data = np.ones(m * k)
        elif self.values == "gaussian":
            data = rng.standard_normal(m * k)
        else:
            data = np.full(m * k, 1.0 / np.sqrt(k))
        indptr = np.arange(0, m * k + 1, k, dtype=np.int64)
        scores = np.zeros((m, self.coef.shape[0]))
        vals = data.reshape(m, k)
        for c in range(self.coef.shape[0]):
            scores[:, c] = (self.coef[c][ids] * vals).sum(axis=1)
        if self.task == "regression":
            s = scores[:, 0]
            y = s + self.noise * (np.std(s) + 1e-12) * rng.standard_normal(m)
        elif self.task == "binary":
            y = np.where(scores[:, 0] > 0, 1.0, -1.0)
            flip = rng.random(m) < self.noise
            y[flip] = -y[flip]
        else:
            y = scores.argmax(axis=1).astype(np.float64)
            flip = rng.random(m) < self.noise
            y[flip] = rng.integers(0, self.n_classes, size=int(flip.sum()))
        return RowChunk(y, indptr, indices, data, start + 1, 0)


def write_svmlight(source: SynthSource, path: str, precision: int = 6) -> None:
    """Write a synthetic source as a 1-based svmlight text file (for demos and benchmarks).

    The file appears whole, and replaces only a file ooc wrote there (:func:`ooc.owned.output`).
    """
    import contextlib
    import gzip

    from . import owned

    with contextlib.ExitStack() as stack:
        f = stack.enter_context(owned.output(path, "wb", kind="data", what="generated data"))
        if path.endswith(".gz"):  # closing it leaves the file open: owned.output fsyncs, then puts it in place
            f = stack.enter_context(gzip.GzipFile(fileobj=f, mode="wb", mtime=0))
        for ch in source():
            lines = []
            for r in range(len(ch.labels)):
                lo, hi = ch.indptr[r], ch.indptr[r + 1]
                feats = " ".join(f"{j + 1}:{v:.{precision}g}" for j, v in zip(ch.indices[lo:hi], ch.data[lo:hi]))
                y = ch.labels[r]
                lab = f"{int(y)}" if y == int(y) else repr(float(y))
                lines.append(f"{lab} {feats}\n")
            f.write("".join(lines).encode())


def synth(store: str, rows: int, cols: int, nnz_per_row: int, **kwargs):
    """Generate synthetic data straight into a store (``ooc synth``); returns the Store.

    Keyword arguments go to :class:`SynthSource` (task, n_classes, zipf, informative,
    noise, values, seed) or to :func:`ooc.convert` (format, layout, memory, dtype,
    overwrite, progress).
    """
    from .store.ingest import convert

    src_keys = {"task", "n_classes", "zipf", "informative", "noise", "values", "seed", "rows_per_chunk"}
    conv = {k: v for k, v in kwargs.items() if k not in src_keys}
    check_size(store, rows, cols, nnz_per_row, n_classes=kwargs.get("n_classes", 3), task=kwargs.get("task", "binary"),
               memory=conv.get("memory", "auto"), dtype=conv.get("dtype", "float32"),
               layouts=2 if conv.get("layout", "both") == "both" else 1)
    src = SynthSource(rows, cols, nnz_per_row, **{k: v for k, v in kwargs.items() if k in src_keys})
    conv.setdefault("n_features", cols)
    label_kind = {"binary": "binary", "multiclass": "multiclass", "regression": "regression"}[src.task]
    return convert(src, store, label_kind=label_kind, **conv)


#: Bytes the generator holds per feature column: its popularity permutation and CDF, a weight array
#: while the CDF is made (8 bytes each), and 8 bytes per output of the planted model.
GEN_BYTES_PER_COL = 24
#: Feature tables this small are made whatever ``memory`` says (a conversion's buffers have floors too).
GEN_FLOOR = 8 << 20


def needed_bytes(rows: int, cols: int, nnz_per_row: int, n_outputs: int, dtype="float32",
                 layouts: int = 2) -> tuple[int, int]:
    """``(memory, disk)`` bytes that :func:`synth` needs: the generator's per-column tables, and the
    store's arrays before compression (a value and an index per nonzero per layout, a label and a
    row offset per row)."""
    index_bytes = 4 if cols < 2**31 else 8
    memory = cols * (GEN_BYTES_PER_COL + 8 * n_outputs)
    disk = layouts * rows * nnz_per_row * (np.dtype(dtype).itemsize + index_bytes) + rows * 16 + cols * 8 * layouts
    return memory, disk


def check_size(store, rows, cols, nnz_per_row, *, n_classes=3, task="binary", memory="auto", dtype="float32",
               layouts: int = 2) -> None:
    """Refuse, before anything is written, a shape whose generator does not fit ``memory`` or whose store
    does not fit the free space where ``store`` goes; one line naming the option and the size it needs.

    The disk bound counts the arrays uncompressed: a store compresses (constant values above all), so
    this refuses only what no compression would be asked to save (twice the free space)."""
    import os
    import shutil

    from .store.ingest import memory_budget
    from .units import format_bytes

    rows, cols, k = (SYNTH[n].check(v, n) for n, v in (("rows", rows), ("cols", cols), ("nnz_per_row", nnz_per_row)))
    if k > cols:
        raise ValueError(f"nnz_per_row (--nnz-per-row) {k} is more than cols (--cols) {cols}: a row has at most "
                         "one nonzero per feature")
    mem, disk = needed_bytes(rows, cols, k, n_classes if task == "multiclass" else 1, dtype, layouts)
    budget = memory_budget(memory)
    if mem > max(budget, GEN_FLOOR):  # tables below the floor are as small as a conversion's least buffers
        raise ValueError(f"cols (--cols) {cols}: the generator's feature tables need {format_bytes(mem, up=True)} "
                         f"of memory, more than --memory {memory} leaves for the work ({format_bytes(budget)})")
    path = os.fspath(store)
    if "://" in path:
        return
    parent = os.path.dirname(os.path.abspath(path))
    while parent and not os.path.isdir(parent):
        parent = os.path.dirname(parent)
    free = shutil.disk_usage(parent).free
    if disk > 2 * free:
        raise ValueError(f"rows (--rows) {rows} x nnz_per_row (--nnz-per-row) {k}: the store needs about "
                         f"{format_bytes(disk, up=True)} uncompressed, and {parent} has {format_bytes(free)} free")


def _put_digits(buf: np.ndarray, ends: np.ndarray, values: np.ndarray, width: np.ndarray) -> None:
    """Write the decimal digits of ``values`` so the last digit lands at ``ends - 1``.

    Vectorised over all numbers of one width at a time (one pass per digit), so text
    generation runs at numpy speed rather than one Python call per token.
    """
    for w in np.unique(width):
        sel = np.flatnonzero(width == w)
        v = values[sel].astype(np.int32 if values.max(initial=0) < 2**31 else np.int64)
        pos = ends[sel] - 1
        for k in range(int(w)):
            q = v // 10
            buf[pos - k] = (48 + (v - 10 * q)).astype(np.uint8)
            v = q


def textlike_svmlight_bytes(n_rows: int, rng: np.random.Generator, max_id: int = 1 << 20,
                            nnz_range=(15, 30), zipf: float = 1.1, perm=None) -> bytes:
    """``n_rows`` lines of text-like svmlight data as bytes (1-based ids, +-1 labels).

    Each row has ``nnz_range`` ids (duplicates dropped, so a few rows have fewer) drawn
    with Zipf-like popularity over ``1..max_id`` (``perm`` scatters popular ranks over the
    id range), values with 6 significant digits in ``[0.01, 1)``.
    """
    k = rng.integers(nnz_range[0], nnz_range[1] + 1, size=n_rows)
    row = np.repeat(np.arange(n_rows), k)
    # Zipf-like ranks: inverse transform of a power law truncated to [1, max_id]
    # (continuous approximation of the pmf r**-zipf; no per-row loop)
    u = rng.random(len(row))
    if zipf == 1.0:
        r = np.exp(u * np.log(max_id))
    else:
        a = 1.0 - zipf
        r = (1.0 + u * (float(max_id) ** a - 1.0)) ** (1.0 / a)
    ranks = np.clip(r.astype(np.int64) - 1, 0, max_id - 1)
    ids0 = perm[ranks] if perm is not None else ranks
    # one sort of a combined key (row major) is ~10x faster than lexsort
    key = row * np.int64(max_id) + ids0
    key.sort()
    key = key[np.concatenate(([True], key[1:] != key[:-1]))]  # drop repeated ids within a row
    row, ids = key // max_id, key % max_id + 1
    nnz = len(ids)
    counts = np.bincount(row, minlength=n_rows)
    mant = rng.integers(100000, 1000000, size=nnz)
    lead0 = rng.random(nnz) < 0.5  # "0.0dddddd" or "0.dddddd": 6 significant digits either way
    id_w = np.floor(np.log10(ids)).astype(np.int64) + 1
    val_w = np.where(lead0, 9, 8)
    tok_w = id_w + 1 + val_w + 1  # "id:value" plus a space (or the newline)
    neg = rng.random(n_rows) < 0.5
    lab_w = np.where(neg, 2, 1)  # "-1" or "1"
    # line length: label, then " id:value" per token, then "\n"
    line_w = lab_w + np.bincount(row, weights=tok_w, minlength=n_rows).astype(np.int64) + 1
    line_start = np.concatenate(([0], np.cumsum(line_w)[:-1]))
    total = int(line_w.sum())
    buf = np.full(total, 32, dtype=np.uint8)
    buf[line_start + line_w - 1] = 10
    buf[line_start[neg]] = 45
    buf[line_start + lab_w - 1] = 49
    # token start: line start + label + 1 (space) + preceding tokens of the row
    first_tok = np.concatenate(([0], np.cumsum(counts)[:-1]))
    before = np.cumsum(tok_w) - tok_w
    tok_start = line_start[row] + lab_w[row] + 1 + before - before[first_tok][row]
    colon = tok_start + id_w
    _put_digits(buf, colon, ids, id_w)
    buf[colon] = 58
    buf[colon + 1] = 48
    buf[colon + 2] = 46
    buf[colon[lead0] + 3] = 48
    _put_digits(buf, colon + 1 + val_w, mant, np.full(nnz, 6, dtype=np.int64))
    return buf.tobytes()


def write_textlike_svmlight(path: str, target_bytes: int, seed: int = 0, max_id: int = 1 << 20,
                            nnz_range=(15, 30), zipf: float = 1.1, batch_rows: int = 100_000) -> int:
    """Write a text-like svmlight file of about ``target_bytes`` bytes; returns its size.

    Fast (hundreds of MB/s, numpy only): meant for benchmarks and memory-cap tests
    that need files far larger than :func:`write_svmlight` produces in reasonable time.
    """
    target_bytes = int(target_bytes)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(max_id)
    written = 0
    with open(path, "wb") as f:
        while written < target_bytes:
            chunk = textlike_svmlight_bytes(batch_rows, rng, max_id, nnz_range, zipf, perm)
            if written + len(chunk) > target_bytes:
                # cut at a line end near the target so the size is about right
                cut = chunk.find(b"\n", target_bytes - written) + 1 or len(chunk)
                chunk = chunk[:cut]
            f.write(chunk)
            written += len(chunk)
    return written
