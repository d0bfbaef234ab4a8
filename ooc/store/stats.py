"""Per-row and per-column statistics, and the quantities derived from them.

Row statistics are computed chunk by chunk as rows stream in; column statistics
are accumulated into O(d) vectors that grow with the largest feature id seen.
From them: ``R = max_i ||x_i||`` (the smoothness constant of the SDCA bounds) and
the face-off quantities of Csiba & Richtarik (eq. 16), written for our n x d
data matrix X (rows = examples):

.. math::

    C_P = \\sum_{j=1}^{d} \\|X_{:j}\\|_0 \\, \\|X_{:j}\\|^2, \\qquad
    C_D = \\sum_{i=1}^{n} \\|X_{i:}\\|_0 \\, \\|X_{i:}\\|^2 .

The paper shows the expected total work of primal RCD (NSync, over features)
scales with ``C_P`` and that of dual RCD (Quartz, over examples) with ``C_D``:
the smaller one names the side to work on.
"""

from __future__ import annotations

import numpy as np


def row_stats(indptr: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nonzeros and squared norms of each row of a CSR chunk."""
    nnz = np.diff(indptr).astype(np.int64)
    sq = np.zeros(len(nnz), dtype=np.float64)
    if len(data):
        d2 = np.square(data, dtype=np.float64)
        # reduceat misbehaves on empty rows: sum over the cumulative instead
        c = np.concatenate(([0.0], np.cumsum(d2)))
        sq = c[indptr[1:]] - c[indptr[:-1]]
        sq = np.maximum(sq, 0.0)  # cumsum cancellation can leave -0.0-ish residue
    return nnz, sq


class ColumnAccumulator:
    """Running per-column nonzero counts and squared norms, grown on demand."""

    def __init__(self) -> None:
        self.nnz = np.zeros(0, dtype=np.int64)
        self.sqnorm = np.zeros(0, dtype=np.float64)

    def add(self, indices: np.ndarray, data: np.ndarray) -> None:
        """Account for the entries ``(indices, data)`` of a chunk (0-based ids)."""
        if len(indices) == 0:
            return
        m = int(indices.max()) + 1
        if m > len(self.nnz):
            grow = max(m, 2 * len(self.nnz))
            self.nnz = np.concatenate((self.nnz, np.zeros(grow - len(self.nnz), np.int64)))
            self.sqnorm = np.concatenate((self.sqnorm, np.zeros(grow - len(self.sqnorm))))
        self.nnz[:m] += np.bincount(indices, minlength=m)
        self.sqnorm[:m] += np.bincount(indices, weights=np.square(data, dtype=np.float64), minlength=m)

    def finish(self, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
        """Counts and squared norms truncated or padded to ``n_cols`` columns."""
        nnz = np.zeros(n_cols, dtype=np.int64)
        sq = np.zeros(n_cols, dtype=np.float64)
        m = min(n_cols, len(self.nnz))
        nnz[:m] = self.nnz[:m]
        sq[:m] = self.sqnorm[:m]
        return nnz, sq


def faceoff(row_nnz, row_sqnorm, col_nnz, col_sqnorm) -> dict:
    """C_P, C_D (Csiba & Richtarik eq. 16 in n x d orientation) and the side they recommend."""
    c_p = float(np.dot(np.asarray(col_nnz, dtype=np.float64), col_sqnorm))
    c_d = float(np.dot(np.asarray(row_nnz, dtype=np.float64), row_sqnorm))
    return {"C_P": c_p, "C_D": c_d, "recommended_side": "primal" if c_p < c_d else "dual"}


def summary(row_nnz, row_sqnorm, col_nnz, col_sqnorm) -> dict:
    """Everything ``ooc info`` reports about the matrix that the statistics determine."""
    row_norm = np.sqrt(np.asarray(row_sqnorm, dtype=np.float64))
    out = {
        "R": float(row_norm.max()) if len(row_norm) else 0.0,
        "row_norm_min": float(row_norm.min()) if len(row_norm) else 0.0,
        "row_norm_mean": float(row_norm.mean()) if len(row_norm) else 0.0,
        "row_nnz_max": int(np.max(row_nnz)) if len(row_nnz) else 0,
        "empty_rows": int(np.count_nonzero(np.asarray(row_nnz) == 0)),
        "empty_cols": int(np.count_nonzero(np.asarray(col_nnz) == 0)),
    }
    out.update(faceoff(row_nnz, row_sqnorm, col_nnz, col_sqnorm))
    return out
