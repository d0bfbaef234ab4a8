"""Metrics accumulated over row blocks: what ``ooc evaluate`` reports beyond the objective.

``evaluate`` streams its input, so each metric is kept as sums that blocks add to, and
computed once at the end, to the value scikit-learn's ``sklearn.metrics`` function gives on all
rows at once:

- classification: the confusion matrix ``C[i, j]`` (rows of true class ``i`` predicted ``j``, the
  model's classes in order) and, from it, precision ``C_jj / sum_i C_ij``, recall
  ``C_ii / sum_j C_ij`` and ``F1 = 2 tp / (2 tp + fp + fn)`` of the positive class (binary, the
  class a positive margin predicts) or their unweighted means over the model's classes
  (multiclass, ``average='macro'``); a ratio whose denominator is 0 counts as 0;
- ROC AUC: the Mann-Whitney statistic ``(R_+ - n_+ (n_+ + 1) / 2) / (n_+ n_-)`` with ``R_+`` the
  sum of the positives' ranks among all scores (ties get their average rank). Binary: of the
  margins; multiclass: the mean over the classes of class ``c`` against the rest, scored by
  column ``c`` of the scores given (the probabilities of a logistic model: scikit-learn's
  ``multi_class='ovr', average='macro'``), classes absent from the rows left out. It needs every
  score: ``8 k + 1`` bytes a row (``k = 1`` for binary) kept until the end, and one class's scores
  once more while they are sorted (a billion binary rows: 9 GB; with ``roc_auc=False`` nothing is
  kept, and with ``keep_bytes`` they are dropped once they would exceed it: ``roc_auc`` is then
  None and ``roc_auc_skipped`` says why);
- regression: ``MAE = sum |f - y| / n`` and ``R^2 = 1 - SSE / SST`` with ``SST = sum (y - mean y)^2``
  merged block by block (Chan et al.'s update of the mean and the sum of squared deviations,
  which does not cancel as ``sum y^2 - n mean^2`` would); a constant target gives 1 when the
  fit is exact, else 0 (scikit-learn's ``force_finite``).
"""

from __future__ import annotations

import numpy as np


class ClassificationMetrics:
    """Confusion matrix (and, binary, the margins for ROC AUC) over blocks of rows.

    Parameters
    ----------
    n_classes : int
        The model's classes; labels and predictions are given as their indices ``0 .. k-1``.
    roc_auc : bool
        Keep the scores for :meth:`result`'s ``roc_auc``.
    """

    def __init__(self, n_classes: int, roc_auc: bool = True, keep_bytes: int | None = None):
        self.k = int(n_classes)
        self.confusion = np.zeros((self.k, self.k), dtype=np.int64)
        self.keep = bool(roc_auc)
        #: the most bytes of scores kept for ROC AUC (None: no bound); beyond it they are dropped and
        #: ``roc_auc`` is None with the reason in ``roc_auc_skipped`` (a bounded --memory is never exceeded)
        self.keep_bytes = keep_bytes
        self.skipped: str | None = None
        self._kept = 0
        self._scores: list[np.ndarray] = []
        self._true: list[np.ndarray] = []

    def add(self, true_idx: np.ndarray, pred_idx: np.ndarray, scores: np.ndarray | None = None) -> None:
        """Count a block: the true and predicted class indices, and its scores for ROC AUC (binary: the
        margins, shape (m,); multiclass: one column per class, shape (m, k))."""
        self.confusion += np.bincount(np.asarray(true_idx, np.int64) * self.k + np.asarray(pred_idx, np.int64),
                                      minlength=self.k * self.k).reshape(self.k, self.k)
        if self.keep and scores is not None:
            scores = np.array(scores, dtype=np.float64)
            true = np.asarray(true_idx, dtype=np.int8 if self.k < 128 else np.int64)
            self._kept += scores.nbytes + true.nbytes
            # ROC AUC's sort at the end holds the kept scores once more (one class's at a time)
            if self.keep_bytes is not None and 2 * self._kept > self.keep_bytes:
                self.keep, self._scores, self._true = False, [], []
                self.skipped = (f"not computed: it needs every row's scores ({8 * (1 if self.k == 2 else self.k) + 1} "
                                "bytes a row, twice while they are sorted), more than --memory leaves")
                return
            self._scores.append(scores)
            self._true.append(true)

    def result(self) -> dict:
        """``precision``, ``recall``, ``f1``, ``confusion_matrix`` (list of lists) and ``roc_auc`` when
        scores were given (None when the rows hold a single class: it is undefined)."""
        C = self.confusion
        tp = np.diag(C).astype(np.float64)
        pred, true = C.sum(axis=0), C.sum(axis=1)
        prec, rec, f1 = _ratio(tp, pred), _ratio(tp, true), _ratio(2 * tp, pred + true)
        pick = (lambda v: float(v[1])) if self.k == 2 else (lambda v: float(np.mean(v)))
        out = {"precision": pick(prec), "recall": pick(rec), "f1": pick(f1), "confusion_matrix": C.tolist()}
        if self.skipped:
            out["roc_auc"], out["roc_auc_skipped"] = None, self.skipped
        elif self.keep and self._scores:
            scores, true = np.concatenate(self._scores), np.concatenate(self._true)
            self._scores, self._true = [], []  # (not held twice)
            if self.k == 2:
                out["roc_auc"] = roc_auc(scores, true == 1)
            else:
                aucs = [roc_auc(scores[:, c], true == c) for c in range(self.k)]
                aucs = [a for a in aucs if a is not None]
                out["roc_auc"] = float(np.mean(aucs)) if aucs else None
        return out


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a / b`` with 0 where ``b`` is 0 (scikit-learn's ``zero_division=0``)."""
    return np.divide(a, b, out=np.zeros(len(a)), where=b > 0)


def roc_auc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Area under the ROC curve of ``scores`` for the labels ``positive`` (module docstring); None
    when either class is absent."""
    n_pos = int(np.count_nonzero(positive))
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    # U = #{(p, q): s_p > s_q} + #{s_p = s_q} / 2 over positives p and negatives q (the rank-sum
    # statistic with average ranks for ties), counted by sorting each side once and looking every
    # positive up among the negatives, a chunk at a time: the scores once more in memory, not the
    # five or six copies of a rank transform (scipy's rankdata: argsort, inverse, ranks, ...)
    pos = np.sort(scores[positive])
    neg = np.sort(scores[~positive])
    u2 = 0  # 2 U, an integer: exact at any n
    step = 1 << 20
    for lo in range(0, n_pos, step):
        p = pos[lo:lo + step]
        below = np.searchsorted(neg, p, side="left")
        upto = np.searchsorted(neg, p, side="right")
        u2 += int(np.sum(below, dtype=np.int64)) + int(np.sum(upto, dtype=np.int64))
    return float(u2 / 2.0 / (float(n_pos) * float(n_neg)))


class RegressionMetrics:
    """Sums for ``rmse``, ``mae`` and ``r2`` over blocks (module docstring)."""

    def __init__(self):
        self.n = 0
        self.mean = 0.0  # of y
        self.m2 = 0.0    # sum of (y - mean)^2
        self.sse = 0.0
        self.sae = 0.0

    def add(self, y: np.ndarray, f: np.ndarray) -> None:
        """Add a block of targets ``y`` and predictions ``f``."""
        y = np.asarray(y, dtype=np.float64)
        nb = len(y)
        if nb == 0:
            return
        r = f - y
        self.sse += float(r @ r)
        self.sae += float(np.abs(r).sum())
        mb = float(y.mean())
        m2b = float(((y - mb) ** 2).sum())
        n = self.n + nb
        delta = mb - self.mean
        self.m2 += m2b + delta * delta * self.n * nb / n
        self.mean += delta * nb / n
        self.n = n

    def result(self) -> dict:
        """``rmse``, ``mae`` and ``r2``."""
        n = max(self.n, 1)
        if self.m2 > 0:
            r2 = 1.0 - self.sse / self.m2
        else:
            r2 = 1.0 if self.sse == 0 else 0.0
        return {"rmse": float(np.sqrt(self.sse / n)), "mae": self.sae / n, "r2": float(r2)}
