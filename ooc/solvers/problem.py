"""The problem a solver is given: the store, the loss, the penalty and the labels' task.

It sits with the solvers (not in :mod:`ooc.train`) because the solvers and their Dask
workers (:mod:`ooc.solvers.cocoa`) build it too, and a layer must not import the one above.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..objectives.losses import make_loss
from ..objectives.penalties import ElasticNet
from ..store.layout import BINARY, MULTICLASS, REGRESSION, WEIGHTS_ATTR
from ..units import plain


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
    fit_intercept: bool = False     # an unregularized intercept per problem (ooc.solvers.intercept)

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

    def example_weights(self, y: np.ndarray, sample_weight: np.ndarray | None = None) -> np.ndarray:
        """The weight ``c_i`` of each example: its class's weight (from its stored label; 1 without
        class weights) times its sample weight ``sample_weight[i]`` (the store's, None: 1)."""
        if self.class_weights is None:
            c = np.ones(len(y))
        else:
            idx = np.searchsorted(np.asarray(self.weight_values), y)
            c = np.asarray(self.class_weights, dtype=np.float64)[np.clip(idx, 0, len(self.class_weights) - 1)]
        if sample_weight is not None:
            c = c * np.asarray(sample_weight, dtype=np.float64)
        return c

    def max_example_weight(self) -> float:
        """An upper bound on every ``c_i`` (step sizes need it): the largest class weight times the
        largest sample weight."""
        cmax = float(np.max(self.class_weights)) if self.class_weights else 1.0
        sw = self.store.attrs.get(WEIGHTS_ATTR)
        return cmax * float(sw["max"]) if sw else cmax


#: ``--class-weight``'s value for scikit-learn's balanced class weights.
BALANCED = "balanced"


def _num(x: float) -> str:
    """A number as the canonical class-weight text writes it: ``1`` for 1.0, ``0.5``, ``1e-08``."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


def normalize_class_weight(value, option: str = "--class-weight"):
    """``--class-weight`` checked: None (or ``'none'``), ``'balanced'``, or a mapping label -> weight.

    A mapping is given as text ``'1=5,-1=1'`` or as a dict (``{1: 5, -1: 1}``, keys numbers or
    numeric strings, as scikit-learn's ``class_weight`` and a TOML table give them); the labels
    are the data's original values (before a binary task is stored as -1/+1), a label not listed
    weighs 1, and each weight is finite and ``>= 0``. Returned as the canonical text (labels
    increasing: ``'-1=1,1=5'``), what ``run.json`` records. Raises ``ValueError`` naming ``option``.
    """
    if value is None or value in ("none", BALANCED):
        return value
    usage = f"{option}: expected 'balanced' or LABEL=WEIGHT pairs separated by commas (e.g. 1=5,-1=1), got {value!r}"
    if isinstance(value, str):
        parts = [p.split("=", 1) for p in value.split(",")]
        if not all(len(p) == 2 for p in parts):
            raise ValueError(usage)
    elif isinstance(value, dict):
        parts = list(value.items())
    else:
        raise ValueError(usage)
    out: dict[float, float] = {}
    for k, v in parts:
        k, v = str(k).strip(), str(v).strip()
        try:
            if not (plain(k) and plain(v)):  # float() reads '1_0' as 10 and '٣' as 3: not plain digits
                raise ValueError
            label, weight = float(k), float(v)
        except ValueError:
            raise ValueError(f"{option}: {k}={v} is not LABEL=WEIGHT with two numbers") from None
        if not math.isfinite(label) or label in out:
            raise ValueError(f"{option}: label {k} is not finite or is given twice")
        if not (math.isfinite(weight) and weight >= 0):
            raise ValueError(f"{option}: the weight of label {k} must be a finite number >= 0 (got {v})")
        out[label] = weight
    if not out:
        raise ValueError(usage)
    return ",".join(f"{_num(k)}={_num(v)}" for k, v in sorted(out.items()))


def class_weight_mapping(text: str) -> dict[float, float]:
    """The ``{label: weight}`` of a canonical ``--class-weight`` mapping (:func:`normalize_class_weight`)."""
    return {float(k): float(v) for k, v in (p.split("=", 1) for p in text.split(","))}


def class_weights_for(store, class_weight) -> tuple:
    """``(stored label values, the weight of each)`` of ``class_weight`` on ``store``, or ``(None, None)``.

    ``'balanced'`` is scikit-learn's rule ``n / (classes x count(class))``, the same weight in every
    one-vs-rest problem; with sample weights (as scikit-learn >= 1.6) ``n`` and the counts are
    sums of weights. Raises ``ValueError`` naming ``--class-weight`` for a mapping on regression
    targets or with a label that is not one of the store's classes (original values).
    """
    kind = store.label_kind
    if class_weight in (None, "none") or kind == REGRESSION:
        if class_weight not in (None, "none", BALANCED):
            raise ValueError(f"--class-weight {class_weight}: {store.path} holds regression targets, not classes")
        return None, None
    if class_weight == BALANCED:
        sw = store.attrs.get(WEIGHTS_ATTR)
        counts = (sw.get("class_sums") if sw else None) or store.attrs.get("label_counts") or {}
        vals = sorted((float(k), float(v)) for k, v in counts.items())
        if kind == BINARY:  # stored as -1/+1, counts are keyed by the original values in order
            vals = list(zip((-1.0, 1.0), (c for _, c in vals)))
        if not vals or min(c for _, c in vals) <= 0:
            return None, None
        total = sum(c for _, c in vals)
        return tuple(v for v, _ in vals), tuple(total / (len(vals) * c) for _, c in vals)
    mapping = class_weight_mapping(class_weight)
    # the labels are the original values: a binary store keeps them in label_values and stores -1/+1
    original = [float(v) for v in (store.label_values if kind == BINARY else store.classes)]
    stored = (-1.0, 1.0) if kind == BINARY else tuple(original)
    unknown = [k for k in mapping if k not in original]
    if unknown:
        raise ValueError(f"--class-weight: label {_num(unknown[0])} is not a class of {store.path} "
                         f"(its labels: {', '.join(_num(v) for v in original)})")
    return stored, tuple(mapping.get(v, 1.0) for v in original)


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
    values, weights = class_weights_for(store, o["class_weight"])
    penalty = ElasticNet(o["l2"] + o.get("l2_added", 0.0), o["l1"])
    bias, offset = intercept_mode(o)
    return Problem(store, loss, o["loss"], penalty, bias, task, classes, weights, values, offset)


def intercept_mode(o: dict) -> tuple[float, bool]:
    """How validated options fit the intercept: ``(B, offset)``, the value of a bias feature (0: none)
    and whether the intercept is :mod:`ooc.solvers.intercept`'s (held fixed per pass).

    ``--bias B``: a bias feature, regularized by ``l2``. ``--fit-intercept``: with ``l2 > 0`` the
    offset; with pure L1 (``l2 = 0``, rcd-primal) a bias feature of value 1, which carries no penalty
    there (``l2 = 0``, and the intercept is never L1-penalized): the same unregularized intercept.
    """
    if o.get("fit_intercept"):
        return (1.0, False) if o["l2"] <= 0 else (0.0, True)
    return float(o["bias"]), False
