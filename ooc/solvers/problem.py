"""The problem a solver is given: the store, the loss, the penalty and the labels' task.

It sits with the solvers (not in :mod:`ooc.train`) because the solvers and their Dask
workers (:mod:`ooc.solvers.cocoa`) build it too, and a layer must not import the one above.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..objectives.losses import make_loss
from ..objectives.penalties import ElasticNet
from ..store.layout import BINARY, MULTICLASS, REGRESSION


class Problem(NamedTuple):
    """What the solvers need to know about the objective and the labels.

    ``n_sub`` problems are solved side by side: 1 for binary and regression
    stores, one per class for one-vs-rest (class ``c`` against the rest).
    """

    store: object
    loss: object
    loss_name: str
    penalty: ElasticNet
    bias: float
    task: str
    classes: tuple | None           # class values of a multiclass store (sorted)
    class_weights: tuple | None     # weight per stored label value, in the order of ``weight_values``
    weight_values: tuple | None

    @property
    def n_sub(self) -> int:
        """Problems solved side by side: one per class for one-vs-rest, else 1."""
        return len(self.classes) if self.task == MULTICLASS else 1

    def block_labels(self, labels: np.ndarray) -> np.ndarray:
        """A block's stored labels as contiguous float64."""
        return np.ascontiguousarray(labels, dtype=np.float64)

    def sub_labels(self, y: np.ndarray, c: int) -> np.ndarray:
        """Labels of problem ``c``: -1/+1 (class ``c`` against the rest), or ``y`` itself."""
        if self.task == MULTICLASS:
            return np.where(y == self.classes[c], 1.0, -1.0)
        return y

    def example_weights(self, y: np.ndarray) -> np.ndarray:
        """The weight ``c_i`` of each example from its stored label (1 without class weights)."""
        if self.class_weights is None:
            return np.ones(len(y))
        idx = np.searchsorted(np.asarray(self.weight_values), y)
        return np.asarray(self.class_weights)[np.clip(idx, 0, len(self.class_weights) - 1)]


def make_problem(store, o: dict) -> Problem:
    """Build the :class:`Problem` of a store from validated training options.

    Parameters
    ----------
    store : Store
        The training store.
    o : dict
        Options with at least ``loss``, ``gamma``, ``class_weight``, ``l2``, ``l1``, ``bias``
        (and ``l2_added`` when pure L1 is trained by a dual solver). ``loss_object``, when
        given, is the loss itself (a Dask worker gets the driver's: unpickling it imports the
        module that registered it, so a loss added outside the package trains there too).

    Returns
    -------
    Problem
    """
    loss = o.get("loss_object")
    if loss is None:
        loss = make_loss(o["loss"], gamma=o["gamma"])
    kind = store.label_kind
    task = kind if kind in (REGRESSION, MULTICLASS) else BINARY
    classes = tuple(float(c) for c in store.classes) if task == MULTICLASS else None
    weights = values = None
    if o["class_weight"] == "balanced" and task != REGRESSION:
        counts = store.attrs.get("label_counts") or {}
        # scikit-learn's rule: n_samples / (n_classes * count(class)), the same weight in every OvR problem
        vals = sorted((float(k), int(v)) for k, v in counts.items())
        if task == BINARY:  # stored as -1/+1, counts are keyed by the original values in order
            vals = list(zip((-1.0, 1.0), (c for _, c in vals)))
        if vals and min(c for _, c in vals) > 0:
            values = tuple(v for v, _ in vals)
            weights = tuple(store.n_rows / (len(vals) * c) for _, c in vals)
    penalty = ElasticNet(o["l2"] + o.get("l2_added", 0.0), o["l1"])
    return Problem(store, loss, o["loss"], penalty, o["bias"], task, classes, weights, values)
