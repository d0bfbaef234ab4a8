r"""Reference certificates used by the tests only: primal, dual and duality gap streamed over
row blocks (binary/one problem and Crammer-Singer), and the pure-Python outer loop pieces of
accelerated Prox-SDCA (Shalev-Shwartz & Zhang, Fig. 2; the math is in :mod:`ooc.objectives.accel`).

The solvers compute the same quantities fused into their passes (:mod:`ooc.solvers.base`); these
functions recompute them from the blocks, independently, to check them.

::

    P(w) = 1/n sum_i c_i phi(x_i . w, y_i) + l2/2 ||w||^2 + l1 ||w||_1
    D(a) = -1/n sum_i c_i phi*(-a_i / c_i, y_i) - l2 g*(v),   v = 1/(l2 n) sum_i a_i x_i
    gap  = P(grad g*(v)) - D(a) >= 0

The functions take an iterable of blocks, each a tuple ``(indptr, indices, data, y, c,
alpha)`` describing some rows (the CSR arrays local to the block, as the kernels in
:mod:`ooc.kernels.sdca` take them; ``c`` may be ``None`` for unit weights). They make a
single pass over the iterable. ``n_total`` is the number of examples of the whole data set.

Convergence always means ``gap <= tol * max(1, |P|)`` (:meth:`GapResult.converged`).
"""

import math
from typing import NamedTuple

import numpy as np

from ooc._cpu import gather_prefetch_pays
from ooc.kernels import multiclass as _mc_kernels
from ooc.kernels import sdca as _kernels
from ooc.objectives.multiclass import cs_conj_value, cs_grad_conj, cs_penalty_value
from ooc.objectives.penalties import (
    ElasticNet,
    conj_value,
    grad_conj,
    primal_value,
    require_l2,
)


class GapResult(NamedTuple):
    """Primal and dual objective values and their gap ``primal - dual``."""

    primal: float
    dual: float
    gap: float

    @property
    def relative_gap(self):
        """``gap / max(1, |primal|)``, the figure compared with ``tol``."""
        return self.gap / max(1.0, abs(self.primal))

    def converged(self, tol):
        """``gap <= tol * max(1, |primal|)``."""
        return bool(self.relative_gap <= tol)


def _f64(x):
    return np.ascontiguousarray(x, dtype=np.float64)


def _block_arrays(block):
    indptr, indices, data, y, c, alpha = block
    y = _f64(y)
    c = np.ones_like(y) if c is None else _f64(c)
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    return indptr, np.ascontiguousarray(indices), np.ascontiguousarray(data), y, c, alpha


def _sums(loss, blocks, w, want_primal, want_dual, bias):
    primal_sum = 0.0
    dual_sum = 0.0
    for block in blocks:
        indptr, indices, data, y, c, alpha = _block_arrays(block)
        if want_primal:
            primal_sum += _kernels.block_primal_loss(loss, indptr, indices, data, y, c, w, bias,
                                                    gather_prefetch_pays(w.nbytes))
        if want_dual:
            dual_sum += _kernels.block_dual_loss(loss, y, c, _f64(alpha))
    return primal_sum, dual_sum


def gap_from_sums(primal_sum, dual_sum, w, v, penalty, n_total, bias=0.0):
    r"""Assemble a :class:`GapResult` from the loss sums over all blocks.

    ``P = primal_sum / n + penalty(w)`` and ``D = dual_sum / n - l2 g*(v)``, with
    ``primal_sum = sum_i c_i phi(x_i . w)`` and ``dual_sum = sum_i -c_i phi*(-a_i/c_i)``
    (from the block functions, or the fused sums of
    :func:`ooc.kernels.sdca.sdca_pass_gap`).

    Parameters
    ----------
    primal_sum, dual_sum : float
    w, v : ndarray
    penalty : ElasticNet
        Needs ``l2 > 0``.
    n_total : int
    bias : float, default 0
    """
    require_l2(penalty, "the duality gap")
    n = float(n_total)
    p = primal_sum / n + primal_value(penalty, w, bias)
    d = dual_sum / n - conj_value(penalty, v, bias)
    return GapResult(p, d, p - d if math.isfinite(d) else math.inf)


def primal(blocks, w, loss, penalty, n_total, bias=0.0):
    r"""Primal objective ``P(w)``.

    Parameters
    ----------
    blocks : iterable of (indptr, indices, data, y, c, alpha)
        ``alpha`` is not read (may be ``None``).
    w : ndarray, shape (d,) or (d + 1,) with a bias
    loss : loss NamedTuple
    penalty : ElasticNet
        Any ``l2, l1 >= 0``.
    n_total : int
    bias : float, default 0

    Returns
    -------
    float
    """
    w = _f64(w)
    primal_sum, _ = _sums(loss, blocks, w, True, False, float(bias))
    return primal_sum / float(n_total) + primal_value(penalty, w, bias)


def dual(blocks, v, loss, penalty, n_total, bias=0.0):
    r"""Dual objective ``D(a) = -1/n sum_i c_i phi*(-a_i/c_i, y_i) - l2 g*(v)``.

    ``v`` must be ``1/(l2 n) sum_i a_i x_i`` (the solvers keep it so); only ``y, c, alpha``
    of the blocks are read. ``-inf`` if some dual is infeasible. Needs ``l2 > 0``.

    Returns
    -------
    float
    """
    require_l2(penalty, "the dual objective")
    v = _f64(v)
    dual_sum = 0.0
    for _, _, _, y, c, alpha in blocks:
        y = _f64(y)
        c = np.ones_like(y) if c is None else _f64(c)
        dual_sum += _kernels.block_dual_loss(loss, y, c, _f64(alpha))
    return dual_sum / float(n_total) - conj_value(penalty, v, bias)


def duality_gap(blocks, w, v, loss, penalty, n_total, bias=0.0):
    r"""Primal, dual and gap in one pass over the blocks.

    Parameters
    ----------
    blocks : iterable of (indptr, indices, data, y, c, alpha)
    w : ndarray or None
        The primal point; ``None`` computes ``w = grad g*(v)`` (the point the gap
        certifies). Passing the solver's ``w`` saves that and checks nothing.
    v : ndarray
        ``1/(l2 n) sum_i a_i x_i``.
    loss : loss NamedTuple
    penalty : ElasticNet
        Needs ``l2 > 0``.
    n_total : int
    bias : float, default 0

    Returns
    -------
    GapResult
        ``gap >= 0`` up to rounding; ``P(w) - P* <= gap`` and ``D* - D(a) <= gap``.
    """
    require_l2(penalty, "the duality gap")
    bias = float(bias)
    v = _f64(v)
    w = grad_conj(penalty, v, bias) if w is None else _f64(w)
    primal_sum, dual_sum = _sums(loss, blocks, w, True, True, bias)
    return gap_from_sums(primal_sum, dual_sum, w, v, penalty, n_total, bias)


def cs_gap_from_sums(primal_sum, dual_sum, W, V, penalty, n_total, bias=0.0):
    r"""``GapResult`` from ``sum_i c_i phi(W x_i)`` and ``sum_i -c_i phi*(-alpha_i/c_i)``.

    ``P = primal_sum / n + l2/2 ||W||^2 + l1 ||W||_1``,
    ``D = dual_sum / n - l2 g*(V)``. The sums add up over blocks like the binary ones
    (:func:`ooc.kernels.multiclass.cs_block_primal_loss`, ``cs_block_dual_loss`` or the
    fused sums of ``cs_sdca_pass_gap``).
    """
    require_l2(penalty, "the duality gap")
    n = float(n_total)
    p = primal_sum / n + cs_penalty_value(penalty, W, bias)
    d = dual_sum / n - cs_conj_value(penalty, V, bias)
    return GapResult(p, d, p - d if math.isfinite(d) else math.inf)


def cs_duality_gap(blocks, W, V, loss, penalty, n_total, bias=0.0):
    r"""Primal, dual and gap of the Crammer-Singer problem in one pass over the blocks.

    Parameters
    ----------
    blocks : iterable of (indptr, indices, data, y_class, c, alpha)
        CSR arrays local to the block, int class indices, weights (``None``: ones) and the
        block's duals (m, k).
    W, V : ndarray (d, k) or (d + 1, k)
        ``W = None`` uses ``grad g*(V)``.
    loss : MulticlassHinge
    penalty : ElasticNet
    n_total : int
    bias : float

    Returns
    -------
    GapResult
    """
    bias = float(bias)
    V = np.ascontiguousarray(V, dtype=np.float64)
    W = cs_grad_conj(penalty, V, bias) if W is None else np.ascontiguousarray(W, np.float64)
    primal_sum = 0.0
    dual_sum = 0.0
    for indptr, indices, data, y, c, alpha in blocks:
        y = np.ascontiguousarray(y, dtype=np.int64)
        c = np.ones(y.shape[0]) if c is None else np.ascontiguousarray(c, dtype=np.float64)
        indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        primal_sum += _mc_kernels.cs_block_primal_loss(
            loss, indptr, np.ascontiguousarray(indices), np.ascontiguousarray(data), y, c, W,
            bias,
        )
        dual_sum += _mc_kernels.cs_block_dual_loss(
            loss, y, c, np.ascontiguousarray(alpha, dtype=np.float64)
        )
    return cs_gap_from_sums(primal_sum, dual_sum, W, V, penalty, n_total, bias)


# ----------------------------------------------------------------------------------------------- accelerated Prox-SDCA
def xi_initial(gap0, eta):
    """``xi_1 = (1 + eta^-2) (P(0) - D(0))``."""
    return (1.0 + eta**-2) * float(gap0)


def xi_at(t, xi1, eta):
    """``xi_t = (1 - eta/2)^(t-1) xi_1``."""
    return (1.0 - 0.5 * eta) ** (t - 1) * xi1


def inner_tolerance(xi_prev, eta):
    """Accuracy asked of the inner Prox-SDCA at iteration t: ``eta / (2 (1 + eta^-2)) xi_{t-1}``."""
    return eta / (2.0 * (1.0 + eta**-2)) * xi_prev


def max_outer_iterations(xi1, eps, eta):
    """Stopping condition 1: stop once ``t >= 1 + 2/eta log(xi_1 / eps)`` (returned as a float)."""
    if xi1 <= eps:
        return 1.0
    return 1.0 + 2.0 / eta * math.log(xi1 / eps)


def outer_certificate(eps_t, w, center_prev, params):
    r"""Stopping condition 2's bound on ``P(w(t)) - P*``.

    ``(1 + rho/mu) eps_t + rho kappa / (2 mu) ||w(t) - y(t-1)||^2``: stop when ``<= eps``.
    ``eps_t`` is the gap of the inner problem reached by Prox-SDCA.
    """
    diff = np.asarray(w, dtype=np.float64) - np.asarray(center_prev, dtype=np.float64)
    p = params
    return (1.0 + p.rho / p.mu) * eps_t + p.rho * p.kappa / (2.0 * p.mu) * float(
        np.sum(diff * diff)
    )


def momentum(w, w_prev, beta):
    """The next center ``y(t) = w(t) + beta (w(t) - w(t-1))`` (new array)."""
    w = np.asarray(w, dtype=np.float64)
    return w + beta * (w - np.asarray(w_prev, dtype=np.float64))


def smoothing_gamma(eps, lipschitz=1.0):
    r"""Sec. 3.3: ``gamma = eps / L^2`` makes ``0 <= phi - phi_gamma <= eps / 2``."""
    return float(eps) / float(lipschitz) ** 2


def enter_shifted(v, center, kappa, l2, l2_inner):
    r"""Plain ``v = 1/(l2 n) sum alpha_i x_i`` -> shifted ``v~ = kappa/l2~ y + l2/l2~ v`` (new array)."""
    return (kappa / l2_inner) * np.asarray(center, dtype=np.float64) + (l2 / l2_inner) * np.asarray(
        v, dtype=np.float64
    )


def exit_shifted(v_shift, center, kappa, l2, l2_inner):
    r"""Shifted ``v~`` -> plain ``v = (l2~ v~ - kappa y) / l2`` (new array)."""
    return (l2_inner * np.asarray(v_shift, dtype=np.float64)
            - kappa * np.asarray(center, dtype=np.float64)) / l2


def shifted_gap_from_sums(primal_sum, dual_sum, w, v_shift, penalty, kappa, center, n_total,
                          bias=0.0):
    r"""Gap of the inner problem ``P~(w) = P(w) + kappa/2 ||w - y||^2``.

    ``P~ = primal_sum / n + l2/2 ||w||^2 + l1 ||w||_1 + kappa/2 ||w - y||^2`` and
    ``D~ = dual_sum / n - l2~ g*_{l1/l2~}(v~) + kappa/2 ||y||^2`` with ``l2~ = l2 + kappa``;
    the loss sums are those of the plain problem (same kernels, same duals).

    Parameters
    ----------
    primal_sum, dual_sum : float
        ``sum c_i phi(x_i . w)``, ``sum -c_i phi*(-alpha_i / c_i)``.
    w, v_shift : ndarray
        The primal point and the shifted dual point (1-D for binary; (d, k) for
        Crammer-Singer, whose bias is the last row).
    penalty : ElasticNet
        The original ``(l2, l1)``.
    kappa : float
    center : ndarray, shape of ``w``
    n_total : int
    bias : float

    Returns
    -------
    GapResult
    """
    w = np.asarray(w, dtype=np.float64)
    center = np.asarray(center, dtype=np.float64)
    inner = ElasticNet(penalty.l2 + kappa, penalty.l1)
    if w.ndim == 2:
        from ooc.objectives.multiclass import cs_conj_value, cs_penalty_value

        pen, conj = cs_penalty_value(penalty, w, bias), cs_conj_value(inner, v_shift, bias)
    else:
        pen, conj = primal_value(penalty, w, bias), conj_value(inner, v_shift, bias)
    n = float(n_total)
    diff = w - center
    p = primal_sum / n + pen + 0.5 * kappa * float(np.sum(diff * diff))
    d = dual_sum / n - conj + 0.5 * kappa * float(np.sum(center * center))
    return GapResult(p, d, p - d if math.isfinite(d) else math.inf)
