r"""Crammer-Singer Prox-SDCA (option I, vector duals) over one resident row block.

Problem and dual: :mod:`ooc.objectives.multiclass`. For a visited row ``i`` with scores
``z = W x_i`` (k,) and ``q = ||x_i||^2 / (l2 n)``, the new dual ``alpha_i'`` maximises the
option I model exactly (:func:`ooc.objectives.multiclass.mc_dual_step`, a sort of k
numbers), then ``V += x_i Delta^T / (l2 n)`` and ``W = soft_threshold(V, l1/l2)`` on the
rows ``x_i`` touches.

Layout: ``V`` and ``W`` are **(d, k) C-contiguous** float64 (``(d + 1, k)`` with a bias
feature, the intercept row last). A sparse row touches features ``j``; in (d, k) each
feature's k class weights are one contiguous run, so the margin loop
``z += x_ij W[j, :]`` and the update ``V[j, :] += x_ij Delta / (l2 n)`` each read or write
one cache line per nonzero instead of k strided entries. The model's ``coef_`` (k, d) is
``W[:d].T`` and ``intercept_`` is ``bias * W[d]``.

Other conventions as in :mod:`ooc.kernels.sdca`: local CSR ``indptr`` (int64),
``indices`` (int32/int64), ``data`` (float32/float64), float64 accumulation; ``y_class``
int64 class indices in ``[0, k)``; ``c`` float64 weights; ``alpha`` (m, k) float64
C-contiguous, updated in place (a row slice ``alpha[lo:hi]`` of the global array is fine);
scalars as floats; ``l2 > 0`` (not checked here). The duals of a row always keep
``sum_j alpha_ij = 0`` (the true class holds the mass).
"""

import numpy as np
from numba import njit

from ooc.kernels.prefetch import prefetch_rows
from ooc.objectives.multiclass import (
    mc_dual_step,
    mc_dual_term,
    mc_loss_value,
    simplex_threshold,
)
from ooc.objectives.penalties import soft_threshold_scalar

__all__ = [
    "cs_sdca_pass",
    "cs_sdca_pass_gap",
    "cs_block_primal_loss",
    "cs_block_dual_loss",
    "cs_block_accumulate_v",
    "simplex_projection",
    "simplex_projection_eq",
]


@njit(cache=True, nogil=True)
def _scores(indptr, indices, data, i, W, has_bias, bias, z):
    """``z = W^T x_i`` (+ ``bias W[d]``) and ``||x_i||^2`` (+ ``bias^2``)."""
    k = W.shape[1]
    for r in range(k):
        z[r] = 0.0
    sq = 0.0
    for p in range(indptr[i], indptr[i + 1]):
        x = np.float64(data[p])
        row = W[indices[p]]
        for r in range(k):
            z[r] += x * row[r]
        sq += x * x
    if has_bias:
        row = W[W.shape[0] - 1]
        for r in range(k):
            z[r] += bias * row[r]
        sq += bias * bias
    return sq


@njit(cache=True, nogil=True)
def _pass(loss, rows, labels, alpha, order, V, W, reg, fused):
    indptr, indices, data = rows
    y_class, c = labels
    l2, l1, n_total, bias = reg
    k = V.shape[1]
    inv_l2n = 1.0 / (l2 * n_total)
    thr = l1 / l2
    has_bias = bias > 0.0
    b = V.shape[0] - 1
    z = np.empty(k)
    new = np.empty(k)
    delta = np.empty(k)
    work = np.empty(k)
    sum_d2 = 0.0
    primal_sum = 0.0
    dual_sum = 0.0
    for t in range(order.shape[0]):
        # rows in random order: request the next ones' cache lines now (ooc.kernels.prefetch)
        prefetch_rows(order, t, indptr, indices, data, alpha, y_class, c, W, W[:0])
        i = order[t]
        ci = c[i]
        ai = alpha[i]
        yi = y_class[i]
        if ci <= 0.0:
            zero = True
            for r in range(k):
                if ai[r] != 0.0:
                    zero = False
            if zero:
                continue  # weightless row already at its only feasible dual
        sq = _scores(indptr, indices, data, i, W, has_bias, bias, z)
        if fused and ci > 0.0:
            primal_sum += ci * mc_loss_value(loss, z, yi, work)
        mc_dual_step(loss, ai, z, yi, sq * inv_l2n, ci, work, new)
        moved = 0.0
        for r in range(k):
            dr = new[r] - ai[r]
            delta[r] = dr
            moved += dr * dr
        if moved > 0.0:
            for r in range(k):
                ai[r] = new[r]
            for p in range(indptr[i], indptr[i + 1]):
                s = np.float64(data[p]) * inv_l2n
                vrow = V[indices[p]]
                wrow = W[indices[p]]
                for r in range(k):
                    vj = vrow[r] + s * delta[r]
                    vrow[r] = vj
                    wrow[r] = soft_threshold_scalar(vj, thr)
            if has_bias:
                s = bias * inv_l2n
                for r in range(k):
                    vb = V[b, r] + s * delta[r]
                    V[b, r] = vb
                    W[b, r] = vb
            sum_d2 += moved
        if fused:
            dual_sum += mc_dual_term(loss, ai, yi, ci)
    return sum_d2, primal_sum, dual_sum


@njit(cache=True, nogil=True)
def cs_sdca_pass(loss, rows, labels, alpha, order, V, W, reg):
    r"""One Crammer-Singer Prox-SDCA (option I) pass over the rows ``order`` of a block.

    For each ``i`` in ``order``: ``z = W^T x_i`` (+ ``bias W[d]``),
    ``q = (||x_i||^2 + bias^2) / (l2 n_total)``, ``alpha_i' = mc_dual_step(...)``,
    ``Delta = alpha_i' - alpha_i``, then ``V[j] += x_ij Delta / (l2 n_total)`` and
    ``W[j] = soft_threshold(V[j], l1/l2)`` for the features of row ``i`` (the bias row:
    ``V[d] += bias Delta / (l2 n_total)``, ``W[d] = V[d]``).

    Parameters
    ----------
    loss : MulticlassHinge
    rows : Rows (:mod:`ooc.kernels.args`)
        ``indptr`` int64 (m + 1,), ``indices`` int32 or int64 (nnz,), ``data`` float32 or
        float64 (nnz,).
    labels : Labels
        ``y`` int64 (m,), the class index of each row; ``c`` float64 (m,), the example
        weights ``>= 0``.
    alpha : float64 array (m, k), C-contiguous
        Duals, updated in place; feasible on entry (0 is).
    order : int64 array
        Local rows to visit, in order (repeats allowed).
    V, W : float64 arrays (d, k) or (d + 1, k), C-contiguous
        On entry ``V = 1/(l2 n) sum_i x_i alpha_i^T`` over the whole data set and
        ``W = grad g*(V)``; both invariants are kept.
    reg : Reg
        ``l2, l1, n`` (``n_total``) and ``bias``, floats.

    Returns
    -------
    float
        ``sum ||Delta||^2`` over the steps.
    """
    return _pass(loss, rows, labels, alpha, order, V, W, reg, False)[0]


@njit(cache=True, nogil=True)
def cs_sdca_pass_gap(loss, rows, labels, alpha, order, V, W, reg):
    r""":func:`cs_sdca_pass` that also returns the loss sums of an approximate gap.

    Returns
    -------
    sum_d2 : float
    primal_sum : float
        ``sum c_i phi(z_i, y_i)`` at the scores seen just before each row's step (a
        stale estimate, as in :func:`ooc.kernels.sdca.sdca_pass_gap`).
    dual_sum : float
        ``sum -c_i phi*(-alpha_i / c_i, y_i)`` at the new duals; exact for the block when
        ``order`` visits each row once.
    """
    return _pass(loss, rows, labels, alpha, order, V, W, reg, True)


@njit(cache=True, nogil=True)
def cs_block_primal_loss(loss, indptr, indices, data, y_class, c, W, bias):
    r"""``sum_i c_i phi(W^T x_i + bias W[d], y_i)`` over the rows of a block (``c_i = 0``: 0)."""
    k = W.shape[1]
    has_bias = bias > 0.0
    z = np.empty(k)
    work = np.empty(k)
    total = 0.0
    for i in range(indptr.shape[0] - 1):
        ci = c[i]
        if ci <= 0.0:
            continue
        _scores(indptr, indices, data, i, W, has_bias, bias, z)
        total += ci * mc_loss_value(loss, z, y_class[i], work)
    return total


@njit(cache=True, nogil=True)
def cs_block_dual_loss(loss, y_class, c, alpha):
    r"""``sum_i -c_i phi*(-alpha_i / c_i, y_i)`` over a block's rows; ``-inf`` if infeasible."""
    total = 0.0
    for i in range(alpha.shape[0]):
        total += mc_dual_term(loss, alpha[i], y_class[i], c[i])
    return total


@njit(cache=True, nogil=True)
def cs_block_accumulate_v(indptr, indices, data, alpha, V, scale, bias):
    r"""``V += scale * sum_i x_i alpha_i^T`` over a block's rows (in place).

    With ``scale = 1/(l2 n)`` summed over all blocks this rebuilds ``V`` from the duals;
    the bias row gets ``scale * bias * sum_i alpha_i``.
    """
    k = V.shape[1]
    has_bias = bias > 0.0
    b = V.shape[0] - 1
    for i in range(indptr.shape[0] - 1):
        ai = alpha[i]
        for p in range(indptr[i], indptr[i + 1]):
            s = scale * np.float64(data[p])
            vrow = V[indices[p]]
            for r in range(k):
                vrow[r] += s * ai[r]
        if has_bias:
            for r in range(k):
                V[b, r] += scale * bias * ai[r]


@njit(cache=True, nogil=True)
def simplex_projection(v, radius, out):
    r"""Euclidean projection of ``v`` onto ``{b >= 0, sum b <= radius}`` (the paper's ``S``).

    The ``Project`` procedure of Sec. 5.1 (Duchi et al.): ``b = (v - theta)_+`` with
    ``theta = 0`` if ``sum v_+ <= radius``, else the threshold putting the mass at
    ``radius``. Sort-based, O(k log k). Writes ``out`` (may be ``v``) and returns ``theta``.
    """
    p = 0
    work = np.empty(v.shape[0])
    for j in range(v.shape[0]):
        if v[j] > 0.0:
            work[p] = v[j]
            p += 1
    theta = simplex_threshold(work[:p], 0.0, radius)
    for j in range(v.shape[0]):
        out[j] = max(v[j] - theta, 0.0)
    return theta


@njit(cache=True, nogil=True)
def simplex_projection_eq(v, radius, out):
    r"""Euclidean projection of ``v`` onto the simplex ``{b >= 0, sum b = radius}``.

    Shifting ``v`` so that its maximum is ``radius`` makes the projection onto ``sum = r``
    the capped one of :func:`simplex_projection` (the shift changes only ``theta``, and
    the shifted largest entry alone already exceeds the cap mass unless it equals it).
    Writes ``out`` (may be ``v``) and returns ``theta`` (in the unshifted coordinates).
    """
    k = v.shape[0]
    vmax = v[0]
    for j in range(1, k):
        if v[j] > vmax:
            vmax = v[j]
    shift = radius - vmax
    p = 0
    work = np.empty(k)
    for j in range(k):
        u = v[j] + shift
        if u > 0.0:
            work[p] = u
            p += 1
    theta = simplex_threshold(work[:p], 0.0, radius) - shift
    for j in range(k):
        out[j] = max(v[j] - theta, 0.0)
    return theta
