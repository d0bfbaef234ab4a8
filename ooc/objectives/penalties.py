r"""The elastic-net penalty and the conjugate pieces Prox-SDCA needs.

Penalty ``l2/2 ||w||^2 + l1 ||w||_1 = l2 g(w)`` with ``g(w) = 1/2 ||w||^2 + k ||w||_1`` and
``k = l1 / l2`` (Shalev-Shwartz & Zhang, Sec. 5.2, eq. 16). ``g`` is 1-strongly convex, and

    g*(v)      = sup_w [w . v - g(w)] = 1/2 sum_j (|v_j| - k)_+^2 = 1/2 ||soft_threshold(v, k)||^2
    grad g*(v) = soft_threshold(v, k),   soft_threshold(v, k)_j = sign(v_j) (|v_j| - k)_+

so the primal point of a dual point is ``w = soft_threshold(v, l1 / l2)``.

Intercept: with a bias feature of constant value ``B > 0`` (LIBLINEAR's ``-B``), ``w`` and
``v`` have one more entry, last; it is regularized by ``l2/2 w_d^2`` only (never
soft-thresholded), so its ``g*`` term is ``v_d^2 / 2`` and ``w_d = v_d``. Every function
here takes ``bias`` (the value ``B``; 0 means no bias entry) to know whether the last entry
is the intercept.

Pure L1 (``l2 = 0``) has no ``g*`` in this form: SDCA needs ``l2 > 0`` (the solvers for pure
L1 are primal coordinate descent), and the functions that need it raise ``ValueError``.
"""

import math
from typing import NamedTuple

import numpy as np
from numba import njit

__all__ = [
    "ElasticNet",
    "soft_threshold",
    "soft_threshold_scalar",
    "grad_conj",
    "conj_value",
    "primal_value",
    "require_l2",
]


class ElasticNet(NamedTuple):
    r"""Elastic-net penalty ``l2/2 ||w||^2 + l1 ||w||_1`` (``l1 = 0``: plain L2).

    Parameters
    ----------
    l2 : float
        Weight of the squared L2 norm, ``>= 0`` (``> 0`` for every dual method).
        LIBLINEAR's ``C`` corresponds to ``l2 = 1 / (C n)``.
    l1 : float, default 0
        Weight of the L1 norm, ``>= 0``. The intercept entry is never L1-penalized.
    """

    l2: float
    l1: float = 0.0

    @property
    def k(self):
        """Soft-threshold level ``l1 / l2`` of ``grad g*`` (needs ``l2 > 0``)."""
        require_l2(self)
        return self.l1 / self.l2

    def validate(self):
        """Raise ``ValueError`` unless both weights are finite and ``>= 0``; return self."""
        for name in ("l2", "l1"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"penalty {name} must be finite and >= 0, got {value!r}")
        return self

    def value(self, w, bias=0.0):
        """Same as :func:`primal_value`."""
        return primal_value(self, w, bias)

    def conj(self, v, bias=0.0):
        """Same as :func:`conj_value`."""
        return conj_value(self, v, bias)

    def grad_conj(self, v, bias=0.0):
        """Same as :func:`grad_conj`."""
        return grad_conj(self, v, bias)


#: Entries of ``|w|`` summed at a time by :func:`primal_value` (512 KiB of temporary).
ABS_SLICE = 1 << 16

def require_l2(penalty, what="the dual (SDCA-type solvers)"):
    """Raise a ``ValueError`` explaining that ``what`` needs ``l2 > 0``."""
    if not penalty.l2 > 0.0:
        raise ValueError(
            f"{what} needs l2 > 0 (got l2={penalty.l2!r}, l1={penalty.l1!r}): the dual of "
            "pure L1 is not defined this way; use a primal solver (rcd-primal) or add a "
            "small l2"
        )


@njit(cache=True, nogil=True, inline="always")
def soft_threshold_scalar(v, k):
    """``sign(v) max(|v| - k, 0)`` for one float (the kernels' version), ``k >= 0``.

    Written as ``max(v - k, 0) + min(v + k, 0)``: at most one term is nonzero, so the
    result is bit-identical to the branching form (``v - k``, ``v + k`` or ``0``), but it
    compiles to ``max``/``min`` instructions. The sign of ``v_j`` in a dual pass is a coin
    flip, and the branches' mispredictions made the ``v``/``w`` update three times slower
    (0.62 against 0.20 us per 20-nonzero row).
    """
    return max(v - k, 0.0) + min(v + k, 0.0)


@njit(cache=True, nogil=True)
def _soft_threshold_many(v, k, out):
    for j in range(v.shape[0]):
        out[j] = soft_threshold_scalar(v[j], k)


def soft_threshold(v, k):
    r"""Soft-thresholding ``sign(v) (|v| - k)_+``, the prox of ``k |.|`` (elementwise).

    Parameters
    ----------
    v : array_like
    k : float
        Threshold ``>= 0``.

    Returns
    -------
    ndarray or float
        Float64, same shape as ``v``.
    """
    arr = np.asarray(v, dtype=np.float64)
    out = np.empty(arr.size, dtype=np.float64)
    _soft_threshold_many(np.ascontiguousarray(arr).reshape(-1), float(k), out)
    if arr.ndim == 0:
        return float(out[0])
    return out.reshape(arr.shape)


def _split(x, bias):
    x = np.asarray(x, dtype=np.float64)
    if bias > 0.0:
        return x[:-1], x[-1:]
    return x, x[:0]


def grad_conj(penalty, v, bias=0.0):
    r"""Primal point of a dual point: ``w = grad g*(v)``.

    ``w_j = soft_threshold(v_j, l1/l2)`` on the features; ``w_d = v_d`` on the intercept
    entry when ``bias > 0``.

    Parameters
    ----------
    penalty : ElasticNet
        Needs ``l2 > 0``.
    v : ndarray, shape (d,) or (d + 1,) with a bias
    bias : float, default 0
        Value ``B`` of the bias feature; ``> 0`` means the last entry is the intercept.

    Returns
    -------
    ndarray, float64, same shape as ``v``
    """
    require_l2(penalty)
    feats, tail = _split(v, bias)
    return np.concatenate([soft_threshold(feats, penalty.l1 / penalty.l2), tail])


def conj_value(penalty, v, bias=0.0):
    r"""``l2 g*(v)``, the penalty's part of the dual objective ``D``.

    ``l2 g*(v) = l2/2 [sum_j (|v_j| - l1/l2)_+^2 + v_d^2]`` (the last term only with a
    bias entry). Fenchel-Young equality ``l2 g(w) + l2 g*(v) = l2 w . v`` holds at
    ``w = grad_conj(v)``.

    Parameters
    ----------
    penalty : ElasticNet
        Needs ``l2 > 0``.
    v : ndarray
    bias : float, default 0

    Returns
    -------
    float
    """
    w = grad_conj(penalty, v, bias)
    return 0.5 * penalty.l2 * float(np.dot(w, w))


def primal_value(penalty, w, bias=0.0):
    r"""Penalty ``l2/2 ||w||^2 + l1 ||w_{features}||_1`` (the intercept is not L1-penalized).

    Parameters
    ----------
    penalty : ElasticNet
        Any ``l2, l1 >= 0`` (pure L1 is fine here).
    w : ndarray
    bias : float, default 0

    Returns
    -------
    float
    """
    w = np.asarray(w, dtype=np.float64)
    value = 0.5 * penalty.l2 * float(np.dot(w, w))
    if penalty.l1:  # no |w| temporary for an L2 penalty: this runs per problem and pass, 58 x 2^18 for OvR
        feats, _ = _split(w, bias)
        # |w| a slice at a time: a whole |w| is 128 MiB at 2**24 features, outside the memory plan
        value += penalty.l1 * sum(float(np.abs(feats[lo:lo + ABS_SLICE]).sum())
                                  for lo in range(0, len(feats), ABS_SLICE))
    return value
