"""Synthetic sparse data, generated chunk by chunk (any size the disk holds).

Rows have ``nnz_per_row`` distinct features drawn from a Zipf-like popularity
law (a few very frequent features, a long tail: what hashed text looks like),
values ``1/sqrt(nnz)`` (tf-idf-like, unit row norm) or Gaussian, and labels from a
planted sparse linear model with label noise. The same seed gives the same data
whatever the chunking.
"""

from __future__ import annotations

import numpy as np

from .store.readers import RowChunk

TASKS = ("binary", "multiclass", "regression")


class SynthSource:
    """A re-iterable source of :class:`RowChunk` for :func:`ooc.convert`.

    Parameters
    ----------
    rows, cols, nnz_per_row : int
        Shape and row density (each row has exactly ``min(nnz_per_row, cols)`` features).
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
        if rows < 1 or cols < 1 or nnz_per_row < 1:
            raise ValueError("rows, cols and nnz_per_row must be positive")
        self.rows, self.cols = int(rows), int(cols)
        self.k = min(int(nnz_per_row), self.cols)
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
        self.description = (f"<synth rows={rows} cols={cols} nnz_per_row={nnz_per_row} task={task} "
                            f"seed={seed}>")

    def __call__(self):
        for s in range(0, self.rows, self.rows_per_chunk):
            yield self.chunk(s, min(self.rows, s + self.rows_per_chunk))

    def chunk(self, start: int, stop: int) -> RowChunk:
        m = stop - start
        rng = np.random.default_rng([self.seed, 2, start])
        k = self.k
        # draw with replacement, then top up duplicates: exact k distinct per row
        ranks = np.searchsorted(self._cdf, rng.random((m, k)))
        ranks = np.minimum(ranks, self.cols - 1)
        ids = np.sort(self._perm[ranks], axis=1)
        dup = np.zeros_like(ids, dtype=bool)
        dup[:, 1:] = ids[:, 1:] == ids[:, :-1]
        if dup.any():
            ids = ids.copy()
            for r in np.flatnonzero(dup.any(axis=1)):
                row = np.unique(ids[r])
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
    """Write a synthetic source as a 1-based svmlight text file (for demos and benchmarks)."""
    import gzip

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt") as f:
        for ch in source():
            lines = []
            for r in range(len(ch.labels)):
                lo, hi = ch.indptr[r], ch.indptr[r + 1]
                feats = " ".join(f"{j + 1}:{v:.{precision}g}" for j, v in zip(ch.indices[lo:hi], ch.data[lo:hi]))
                y = ch.labels[r]
                lab = f"{int(y)}" if y == int(y) else repr(float(y))
                lines.append(f"{lab} {feats}\n")
            f.write("".join(lines))


def synth(store: str, rows: int, cols: int, nnz_per_row: int, **kwargs):
    """Generate synthetic data straight into a store (``ooc synth``); returns the Store.

    Keyword arguments go to :class:`SynthSource` (task, n_classes, zipf, informative,
    noise, values, seed) or to :func:`ooc.convert` (format, layout, memory, dtype,
    overwrite, progress).
    """
    from .store.ingest import convert

    src_keys = {"task", "n_classes", "zipf", "informative", "noise", "values", "seed", "rows_per_chunk"}
    src = SynthSource(rows, cols, nnz_per_row, **{k: v for k, v in kwargs.items() if k in src_keys})
    conv = {k: v for k, v in kwargs.items() if k not in src_keys}
    conv.setdefault("n_features", cols)
    label_kind = {"binary": "binary", "multiclass": "multiclass", "regression": "regression"}[src.task]
    return convert(src, store, label_kind=label_kind, **conv)
