r"""The duality-gap certificate of every solver, written once: from the pieces a pass sums to ``P``, ``D`` and the gap.

Each solver sums, over the rows, the pieces of one problem ``c`` at the state it certifies (the loss
sum ``sum_i c_i phi(x_i . w, y_i)``, the conjugate sum ``sum_i -c_i phi*(-a_i / c_i, y_i)``) and,
over the coefficients, the penalty ``g(w)`` and its conjugate term; this module puts them together
(docs/training.rst, "The certificate"):

* per problem, ``P_c = loss_sum / n + penalty`` and ``D_c = conj_sum / n - penalty_conj``;
* ``--fit-intercept``: ``D_c`` is ``D_0`` of the duals, a line in the intercept ``b``; the bound is the
  lines' envelope (:func:`ooc.solvers.intercept.certify`), which also gives the fixed-``b`` gap the
  intercept's search gates on;
* pure L1 solved with an added L2 ``l2'`` (``ooc.train._add_l2_for_pure_l1``): the L1 problem is
  certified, ``P_c - l2'/2 ||w||^2`` against the better of ``D_c - l2'/2 r_c^2`` and, for a loss
  whose minimum is 0, the duals rescaled into the L1 dual's feasible set, ``s conj_sum / n`` with
  ``s = min(1, l1 / ||X^T a / n||_inf)`` (:func:`l1_dual_scale`);
* a solver may hand in another feasible dual point's value per problem (rcd-primal's rescaled one on
  pure L1); the better bound certifies;
* ``P`` and ``D`` are the sums over the problems, in problem order;
* ``gap = P - D`` (``inf`` when ``D`` is not finite, 0 when ``D`` is above ``P`` by no more than the
  rounding :data:`GAP_ROUNDING` allows) and the stop rule's relative gap ``gap / max(1, |P|)``.

Only arithmetic on the pieces lives here (O(k d) at most): the sums over the rows stay fused in each
solver's kernels, which is where their I/O is.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from . import intercept as icpt

__all__ = ["GAP_ROUNDING", "PureL1", "Intercept", "duality_gap", "relative_gap", "problem_bound", "l1_dual_scale",
           "l1_dual_sup", "rescaled_l1_dual", "certify"]

#: How far below ``P`` a computed ``D`` may come by float64 rounding alone, relative to ``max(1, |P|)``.
#: ``P`` and ``D`` are sums over the rows evaluated in float64 from the state the run saves, so
#: ``D <= P* <= P`` holds up to the rounding of those sums (1e-15 measured, relative, on unscaled
#: features and ``l2`` down to 1e-6: tests/test_certificate_honesty.py): a gap at most this far
#: below zero is reported as 0 (the two bounds agree to the arithmetic's precision); further below
#: is a wrong certificate (:class:`ooc.engine.FalseCertificate`), never reported.
GAP_ROUNDING = 1e-12


def duality_gap(primal: float, dual: float) -> float:
    """``P - D``: ``inf`` when ``D`` is not finite (an infeasible dual point), 0 when ``D`` is above
    ``P`` by no more than :data:`GAP_ROUNDING` relative to ``max(1, |P|)``."""
    if not math.isfinite(dual):
        return math.inf
    gap = primal - dual
    return 0.0 if -GAP_ROUNDING * max(1.0, abs(primal)) <= gap < 0.0 else gap


def relative_gap(primal: float, dual: float) -> float:
    """The gap that ``tol`` is compared with: :func:`duality_gap` over ``max(1, |P|)``."""
    return duality_gap(primal, dual) / max(1.0, abs(primal))


def problem_bound(loss_sum: float, conj_sum: float, n: float, penalty: float,
                  penalty_conj: float) -> tuple[float, float]:
    """One problem's ``(P_c, D_c)``: ``loss_sum / n + penalty`` and ``conj_sum / n - penalty_conj``."""
    return loss_sum / n + penalty, conj_sum / n - penalty_conj


def l1_dual_scale(sup: float, l1: float) -> float:
    r"""``s = min(1, l1 / sup)``: the factor that puts duals with ``||X^T a / n||_inf = sup`` in the
    L1 problem's dual feasible set ``||X^T a / n||_inf <= l1`` (celer, the gap-safe rules)."""
    return 1.0 if sup <= l1 else l1 / sup


def l1_dual_sup(w: np.ndarray, l1: float, l2: float) -> float:
    r"""``||X^T a / n||_inf = l2 ||v||_inf`` from ``w = soft_threshold(v, l1 / l2) / ...`` kept exactly:
    ``l1 + l2 ||w||_inf`` when ``w != 0``; when ``w = 0``, ``||v||_inf <= l1 / l2`` and the duals are
    already feasible (``l1`` is returned). ``w``: the features' coefficients only (pure L1 with an added
    L2 refuses ``--bias``)."""
    wmax = float(np.max(np.abs(w))) if w.size else 0.0
    return float(l1) + float(l2) * wmax


def rescaled_l1_dual(scale: float, conj_sum: float, n: float) -> float:
    r"""The L1 problem's dual at the rescaled duals ``s a``, bounded below by ``s D_loss(a)``: ``phi*``
    is convex with ``phi*(0) = -min phi = 0``, so ``-phi*(-s u) >= -s phi*(-u)`` (needs a loss whose
    minimum is 0: :func:`ooc.objectives.losses.loss_min_is_zero`)."""
    return scale * conj_sum / n


class PureL1(NamedTuple):
    """Pure L1 trained with an added L2 ``l2`` (``l1_radius`` in the run's config): what certifies the
    L1 problem. ``sups``: each problem's ``||X^T a / n||_inf`` at the certified duals (:func:`l1_dual_sup`
    where ``w = grad g*(v)`` is kept exactly), or None where the loss's minimum is not 0 (no rescaled bound)."""

    l1: float
    l2: float
    radius: Sequence[float]
    sups: Sequence[float] | None


class Intercept(NamedTuple):
    """``--fit-intercept``: the intercept's state (:func:`ooc.solvers.intercept.fresh_arrays`, its lines
    updated in place) and each problem's dual sum ``sum_i a_i`` of the certified duals (not over ``n``)."""

    extra: dict
    dual_sums: Sequence[float]


class Bound(NamedTuple):
    """The certificate of a state: ``P``, ``D`` summed over the problems, and with ``--fit-intercept``
    each problem's fixed-``b`` gap (``inf`` elsewhere), which the intercept's search gates on."""

    primal: float
    dual: float
    inner_gaps: np.ndarray


def certify(loss_sums: Sequence[float], conj_sums: Sequence[float], n: float, penalties: Sequence[float],
            penalty_conjs: Sequence[float], *, w: np.ndarray | None = None, intercept: Intercept | None = None,
            pure_l1: PureL1 | None = None, other_duals: Sequence[float] | None = None) -> Bound:
    r"""``(P, D)`` of a state from its pieces, summed over the ``k`` problems in order.

    Parameters
    ----------
    loss_sums, conj_sums : sequence of float, length k
        Each problem's ``sum_i c_i phi(x_i . w, y_i)`` at the state's ``w`` and
        ``sum_i -c_i phi*(-a_i / c_i, y_i)`` at its duals (``D_0`` with ``--fit-intercept``).
    n : float
        The number of examples.
    penalties, penalty_conjs : sequence of float, length k
        Each problem's ``g(w)`` (with its ``l2``, ``l1``) and the dual's penalty term ``l2 g*(v)``.
    w : ndarray, shape (k, >= d), optional
        The problems' coefficients (the features' only): needed with ``pure_l1``.
    intercept : Intercept, optional
        ``--fit-intercept``: ``D_c`` is replaced by the lines' envelope (:func:`ooc.solvers.intercept.certify`).
    pure_l1 : PureL1, optional
        Certify the L1 problem of a pure L1 run trained with an added L2.
    other_duals : sequence of float, optional
        Each problem's dual value at another feasible dual point; the larger bound is kept.

    Returns
    -------
    Bound
        ``P``, ``D`` and the fixed-intercept gaps.
    """
    k = len(loss_sums)
    inner = np.full(k, np.inf)
    p = d = 0.0
    nf = float(n)
    for c in range(k):
        pc, dc = problem_bound(loss_sums[c], conj_sums[c], nf, penalties[c], penalty_conjs[c])
        p += pc
        if intercept is not None:
            # dc is D_0 of the state's duals: a line in b; the bound is the lines' envelope
            dc, inner[c] = icpt.certify(intercept.extra, c, pc, dc, float(intercept.dual_sums[c]) / nf)
        if pure_l1 is not None:
            # P_L1 = P - l2'/2 ||w||^2 and P_L1* >= D - l2'/2 r^2 (ooc.train._add_l2_for_pure_l1)
            half = 0.5 * float(pure_l1.l2)
            p -= half * float(np.dot(w[c], w[c]))
            dc -= half * float(pure_l1.radius[c]) ** 2
            # or the same duals rescaled into the L1 problem's feasible set, the tighter one near the optimum
            if pure_l1.sups is not None:
                scale = l1_dual_scale(float(pure_l1.sups[c]), float(pure_l1.l1))
                dc = max(dc, rescaled_l1_dual(scale, conj_sums[c], nf))
        if other_duals is not None:
            dc = max(dc, other_duals[c])
        d += dc
    return Bound(p, d, inner)
