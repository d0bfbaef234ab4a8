"""Losses, penalties and the constants of accelerated Prox-SDCA: the math every solver shares."""

from ooc.objectives.accel import AccelParams, accel_params
from ooc.objectives.losses import (
    LOSSES,
    Hinge,
    Logistic,
    SmoothHinge,
    Squared,
    dual_step,
    loss_conj_neg,
    loss_deriv,
    loss_value,
    make_loss,
    weighted_conj_neg,
)
from ooc.objectives.multiclass import (
    MulticlassHinge,
    class_indices,
    make_multiclass_loss,
    ovr_labels,
)
from ooc.objectives.penalties import (
    ElasticNet,
    conj_value,
    grad_conj,
    primal_value,
    require_l2,
    soft_threshold,
)

__all__ = [
    "LOSSES",
    "Hinge",
    "Logistic",
    "SmoothHinge",
    "Squared",
    "dual_step",
    "loss_conj_neg",
    "loss_deriv",
    "loss_value",
    "make_loss",
    "weighted_conj_neg",
    "ElasticNet",
    "conj_value",
    "grad_conj",
    "primal_value",
    "require_l2",
    "soft_threshold",
    "MulticlassHinge",
    "class_indices",
    "make_multiclass_loss",
    "ovr_labels",
    "AccelParams",
    "accel_params",
]
