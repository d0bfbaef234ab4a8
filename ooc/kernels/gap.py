r"""Primal, dual and duality gap streamed over row blocks, through the block kernels.

The functions take an iterable of blocks, each a tuple ``(indptr, indices, data, y, c,
alpha)`` describing some rows (the CSR arrays local to the block, as the kernels in
:mod:`ooc.kernels.sdca` take them; ``c`` may be ``None`` for unit weights). They make a
single pass over the iterable, so the out-of-core engine can hand them a generator that
pages blocks from disk. The formulas are in :mod:`ooc.objectives.gap`
(:func:`~ooc.objectives.gap.gap_from_sums`) and :mod:`ooc.objectives.multiclass`.
"""

import numpy as np

from ooc._cpu import gather_prefetch_pays
from ooc.kernels import multiclass as _mc_kernels
from ooc.kernels import sdca as _kernels
from ooc.objectives.gap import gap_from_sums
from ooc.objectives.multiclass import cs_gap_from_sums, cs_grad_conj
from ooc.objectives.penalties import conj_value, grad_conj, primal_value, require_l2

__all__ = ["primal", "dual", "duality_gap", "cs_duality_gap"]


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
