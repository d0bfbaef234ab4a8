r"""Primal, dual and duality gap, streamed over row blocks.

::

    P(w) = 1/n sum_i c_i phi(x_i . w, y_i) + l2/2 ||w||^2 + l1 ||w||_1
    D(a) = -1/n sum_i c_i phi*(-a_i / c_i, y_i) - l2 g*(v),   v = 1/(l2 n) sum_i a_i x_i
    gap  = P(grad g*(v)) - D(a) >= 0

The functions take an iterable of blocks, each a tuple ``(indptr, indices, data, y, c,
alpha)`` describing some rows (the CSR arrays local to the block, as the kernels in
:mod:`ooc.kernels.sdca` take them; ``c`` may be ``None`` for unit weights). They make a
single pass over the iterable, so the out-of-core engine can hand them a generator that
pages blocks from disk. ``n_total`` is the number of examples of the whole data set.

Convergence always means ``gap <= tol * max(1, |P|)`` (:meth:`GapResult.converged`).
"""

import math
from typing import NamedTuple

import numpy as np

# A module reference, not names: ooc.kernels.sdca imports ooc.objectives, so importing the
# kernels first reaches this line while ooc.kernels.sdca is still half-initialized.
from ooc.kernels import sdca as _kernels
from ooc.objectives.penalties import conj_value, grad_conj, primal_value, require_l2
from ooc._cpu import gather_prefetch_pays

__all__ = ["GapResult", "primal", "dual", "duality_gap", "gap_from_sums"]


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
