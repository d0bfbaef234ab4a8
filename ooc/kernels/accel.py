r"""In-place O(d) updates of the dual point for accelerated Prox-SDCA (no I/O, no allocation).

The math is in :mod:`ooc.objectives.accel`: the inner problem keeps the shifted point
``v~ = kappa/l2~ y + 1/(l2~ n) sum_i alpha_i x_i`` and ``w = grad g*(v~)``, so the ordinary
pass kernels (:func:`ooc.kernels.sdca.sdca_pass`, :func:`ooc.kernels.multiclass.cs_sdca_pass`)
run on it unchanged with ``l2 = l2~``. These kernels move ``v~`` when the center or the
problem changes and restore ``w = soft_threshold(v~, thr)`` (the bias entry, when
``bias > 0``, is the last entry of a 1-D array or the last row of a (d, k) array and is
copied, not thresholded).

``v``, ``w`` and the centers are float64, C-contiguous, 1-D (d,) or 2-D (d, k), all the
same shape.
"""

from numba import njit

from ooc.objectives.penalties import soft_threshold_scalar

__all__ = ["shift_v", "recenter_v", "momentum_into"]


@njit(cache=True, nogil=True)
def _as_rows(a):
    rows = a.shape[0]
    return a.reshape((rows, a.size // rows))


@njit(cache=True, nogil=True)
def _refresh_w(v2, w2, thr, bias):
    rows, k = v2.shape
    last = rows - 1 if bias > 0.0 else rows
    for j in range(rows):
        for r in range(k):
            if j < last:
                w2[j, r] = soft_threshold_scalar(v2[j, r], thr)
            else:
                w2[j, r] = v2[j, r]


@njit(cache=True, nogil=True)
def shift_v(v, w, a, b, center, thr, bias):
    r"""``v <- a v + b center`` and ``w <- grad g*(v)`` (soft threshold ``thr``), in place.

    Entering the shifted problem: ``a = l2/l2~``, ``b = kappa/l2~``, ``thr = l1/l2~``.
    Leaving it: ``a = l2~/l2``, ``b = -kappa/l2``, ``thr = l1/l2``.
    """
    v2 = _as_rows(v)
    c2 = _as_rows(center)
    rows, k = v2.shape
    for j in range(rows):
        for r in range(k):
            v2[j, r] = a * v2[j, r] + b * c2[j, r]
    _refresh_w(v2, _as_rows(w), thr, bias)


@njit(cache=True, nogil=True)
def recenter_v(v, w, scale, center_old, center_new, thr, bias):
    r"""``v <- v + scale (center_new - center_old)``, ``w <- grad g*(v)``, in place.

    Between outer iterations: ``scale = kappa/l2~``, ``thr = l1/l2~``.
    """
    v2 = _as_rows(v)
    o2 = _as_rows(center_old)
    n2 = _as_rows(center_new)
    rows, k = v2.shape
    for j in range(rows):
        for r in range(k):
            v2[j, r] += scale * (n2[j, r] - o2[j, r])
    _refresh_w(v2, _as_rows(w), thr, bias)


@njit(cache=True, nogil=True)
def momentum_into(w, w_prev, beta, out):
    r"""``out <- w + beta (w - w_prev)`` (the next center ``y(t)``), in place; ``out`` may be ``w_prev``."""
    w2 = _as_rows(w)
    p2 = _as_rows(w_prev)
    o2 = _as_rows(out)
    rows, k = w2.shape
    for j in range(rows):
        for r in range(k):
            o2[j, r] = w2[j, r] + beta * (w2[j, r] - p2[j, r])
