r"""Prox-SDCA (option I) over one resident row block, and the block pieces of the gap.

Problem (``docs/training.rst``)::

    P(w) = 1/n sum_i c_i phi(x_i . w, y_i) + l2/2 ||w||^2 + l1 ||w||_1
    D(a) = -1/n sum_i c_i phi*(-a_i / c_i, y_i) - l2 g*(v)
    v = 1/(l2 n) sum_i a_i x_i,   w = grad g*(v) = soft_threshold(v, l1 / l2)

(LIBLINEAR's ``C`` is ``1 / (l2 n)``.) Shalev-Shwartz & Zhang, Fig. 1, option I: for a
visited example ``i`` with ``z = x_i . w`` and ``q = ||x_i||^2 / (l2 n)``, set
``a_i += d`` with ``d = argmax -c_i phi*(-(a_i + d)/c_i) - z d - q d^2 / 2``
(:func:`ooc.objectives.losses.dual_step`), then ``v += d x_i / (l2 n)`` and
``w = soft_threshold(v, l1 / l2)`` on the entries ``x_i`` touches.

Conventions shared by the kernels (the passes take them bundled in the NamedTuples of
:mod:`ooc.kernels.args`: ``Rows(indptr, indices, data)``, ``Labels(y, c)``,
``Reg(l2, l1, n, bias)``):

* The block is CSR with a local ``indptr`` (int64, starts at 0), ``indices`` (int32 or
  int64 column ids, no duplicates within a row) and ``data`` (float32 or float64).
  Every sum is accumulated in float64 whatever the data dtype.
* ``y``, ``c``, ``alpha`` are float64 arrays of the block's length (views into the global
  arrays are fine; ``alpha`` is updated in place). ``c_i >= 0`` is the example weight.
* ``v`` and ``w`` are float64 of length ``d``, or ``d + 1`` when ``bias > 0``: then every row
  has an extra feature of constant value ``bias`` (LIBLINEAR's ``-B``) at index ``d``, whose
  weight is regularized by ``l2`` only (``w[d] = v[d]``, never soft-thresholded).
* Scalars ``l2, l1, n_total, bias`` should be floats: an int compiles another
  specialization. ``n_total`` is the number of examples of the whole data set, not the
  block's. ``l2 > 0`` is required (the caller checks it; the kernels do not raise).
* ``loss`` is a loss NamedTuple from :mod:`ooc.objectives.losses`; one specialization per
  (loss class, dtypes) is compiled and cached on disk.
"""

import numpy as np
from numba import njit

from ooc.kernels.prefetch import NNZ_AHEAD, prefetch_gather, prefetch_rows
from ooc.objectives.losses import dual_step, loss_value, weighted_conj_neg
from ooc.objectives.penalties import soft_threshold_scalar

__all__ = [
    "dual_apply",
    "sdca_pass",
    "sdca_pass_gap",
    "block_primal_loss",
    "rows_primal_loss",
    "block_dual_loss",
    "block_accumulate_v",
    "rows_accumulate_v",
]


@njit(cache=True, nogil=True)
def dual_apply(indptr, indices, data, i, d, v, w, inv_l2n, k, bias):
    r"""Apply a step ``d`` of dual coordinate ``i`` to ``v`` and ``w`` (in place).

    ``v += d x_i / (l2 n)`` (``inv_l2n = 1 / (l2 n)``) and ``w_j = soft_threshold(v_j, k)``
    with ``k = l1 / l2`` on the entries of row ``i``; the bias entry (``bias > 0``, index
    ``d``) gets ``d bias / (l2 n)`` and is never thresholded. Every dual coordinate method
    (sdca, rcd-dual, dgpd) moves ``v`` and ``w`` with this one rule.
    """
    s = d * inv_l2n
    for p in range(indptr[i], indptr[i + 1]):
        j = indices[p]
        vj = v[j] + s * np.float64(data[p])
        v[j] = vj
        w[j] = soft_threshold_scalar(vj, k)
    if bias > 0.0:
        b = v.shape[0] - 1
        v[b] += s * bias
        w[b] = v[b]


@njit(cache=True, nogil=True)
def _pass(loss, rows, labels, alpha, order, v, w, reg, w_snap):
    # ``w_snap`` of length 0: plain pass; otherwise also sum the primal loss at ``w_snap``
    # while the row is in cache (the fused gap of the state the pass started from).
    indptr, indices, data = rows
    y, c = labels
    l2, l1, n_total, bias = reg
    snap = w_snap.shape[0] > 0
    inv_l2n = 1.0 / (l2 * n_total)
    k = l1 / l2
    has_bias = bias > 0.0
    b = v.shape[0] - 1
    bias_sq = bias * bias
    sum_d2 = 0.0
    primal_sum = 0.0
    for t in range(order.shape[0]):
        # the rows come in random order: request the next ones' cache lines now
        prefetch_rows(order, t, indptr, indices, data, alpha, y, c, w, w_snap)
        i = order[t]
        ci = c[i]
        ai = alpha[i]
        if ci <= 0.0 and ai == 0.0:
            continue  # weightless row already at its only feasible dual value
        start = indptr[i]
        end = indptr[i + 1]
        z = 0.0
        sq = 0.0
        zs = 0.0
        if snap:
            for p in range(start, end):
                x = np.float64(data[p])
                j = indices[p]
                z += x * w[j]
                zs += x * w_snap[j]
                sq += x * x
        else:
            for p in range(start, end):
                x = np.float64(data[p])
                z += x * w[indices[p]]
                sq += x * x
        if has_bias:
            z += bias * w[b]
            sq += bias_sq
        yi = y[i]
        if snap and ci > 0.0:
            if has_bias:
                zs += bias * w_snap[b]
            primal_sum += ci * loss_value(loss, zs, yi)
        d = dual_step(loss, ai, z, yi, sq * inv_l2n, ci)
        if d != 0.0:
            alpha[i] = ai + d
            dual_apply(indptr, indices, data, i, d, v, w, inv_l2n, k, bias)
            sum_d2 += d * d
    return sum_d2, primal_sum


@njit(cache=True, nogil=True)
def sdca_pass(loss, rows, labels, alpha, order, v, w, reg):
    r"""One Prox-SDCA (option I) pass over the rows ``order`` of a resident block.

    For each ``i`` in ``order`` (local row positions; a permutation, or any sequence):
    ``z = x_i . w (+ bias w[d])``, ``q = (||x_i||^2 (+ bias^2)) / (l2 n_total)``,
    ``d = dual_step(loss, alpha[i], z, y[i], q, c[i])``, then ``alpha[i] += d``,
    ``v_j += d x_ij / (l2 n_total)`` and ``w_j = soft_threshold(v_j, l1/l2)`` for the
    entries of row ``i`` (and ``v[d] += d bias / (l2 n_total)``, ``w[d] = v[d]``).

    Parameters
    ----------
    loss : loss NamedTuple
    rows : Rows (:mod:`ooc.kernels.args`)
        The block's CSR arrays: ``indptr`` int64 (n_block + 1,), ``indices`` int32 or int64
        (nnz,), ``data`` float32 or float64 (nnz,).
    labels : Labels
        ``y``, ``c`` float64 (n_block,): labels (-1/+1 for classification) and example
        weights ``c_i >= 0``.
    alpha : float64 array (n_block,)
        Dual variables, updated in place; must be feasible on entry (0 is).
    order : int64 array
        Local rows to visit, in order.
    v, w : float64 arrays (d,) or (d + 1,)
        Updated in place. On entry ``v = 1/(l2 n) sum_i alpha_i x_i`` over the whole data
        set and ``w = grad g*(v)``; both invariants are kept.
    reg : Reg
        ``l2, l1, n`` (``n_total``) and ``bias``, floats.

    Returns
    -------
    float
        ``sum d^2`` over the steps, a cheap progress figure (0 at a fixed point).
    """
    return _pass(loss, rows, labels, alpha, order, v, w, reg, w[:0])[0]


@njit(cache=True, nogil=True)
def sdca_pass_gap(loss, rows, labels, alpha, order, v, w, reg, w_snap):
    r""":func:`sdca_pass` that also sums the primal loss at a snapshot ``w_snap``.

    Same arguments and updates as :func:`sdca_pass`, plus ``w_snap`` (the ``w`` the pass
    started from, same length as ``w``).

    Returns
    -------
    sum_d2 : float
        ``sum d^2`` over the steps.
    primal_sum : float
        ``sum c_i phi(x_i . w_snap, y_i)`` over the rows of ``order`` with ``c_i > 0``: when
        ``order`` visits every row of the block once, exactly :func:`block_primal_loss` at
        ``w_snap`` (up to the order of the additions).

    Notes
    -----
    This is the fused gap evaluation of :mod:`ooc.solvers.base`: the margin at the snapshot
    is summed in the same sweep over the row as the margin at the current ``w``, so the
    exact gap of the state a pass started from costs one more multiply-add per nonzero and
    no second traversal of the block.
    """
    return _pass(loss, rows, labels, alpha, order, v, w, reg, w_snap)


@njit(cache=True, nogil=True)
def block_primal_loss(loss, indptr, indices, data, y, c, w, bias, prefetch_w=True):
    r"""``sum_i c_i phi(x_i . w + bias w[d], y_i)`` over the rows of a block.

    Rows with ``c_i = 0`` contribute 0. ``w`` has length ``d`` (+1 when ``bias > 0``).
    ``prefetch_w``: request ``w[indices[q]]`` :data:`~ooc.kernels.prefetch.NNZ_AHEAD`
    nonzeros ahead; it pays only when ``w`` does not stay in the last-level cache
    (:func:`ooc._cpu.gather_prefetch_pays`), and never changes the result.

    Notes
    -----
    Rows are taken two at a time, their margins summed side by side: each margin is a
    chain of dependent additions (4 cycles each), and two independent chains keep the
    adder busy. Each margin is still summed in its own storage order, and the losses are
    added in row order, so the result is the same as one row after the other, bit for bit
    (measured, 14M x 200k rows: 2.9 ns per nonzero with the prefetch and one row at a
    time, 2.4 with two rows and no prefetch).
    """
    return _primal_loss(loss, indptr, indices, data, y, c, w, bias, prefetch_w, indptr[:0])


@njit(cache=True, nogil=True)
def rows_primal_loss(loss, indptr, indices, data, y, c, w, bias, prefetch_w, rows):
    r""":func:`block_primal_loss` over the rows ``rows`` (ids into ``indptr``, ``y`` and ``c``), in that order.

    The same number, bit for bit, as :func:`block_primal_loss` on a block made of those rows
    one after the other (the pass over a row group held in place, ``ooc.solvers.base``).
    """
    return _primal_loss(loss, indptr, indices, data, y, c, w, bias, prefetch_w, rows)


#: rows ahead of the pair being summed whose ``w`` entries :func:`rows_primal_loss` requests
_ROWS_AHEAD = 4


@njit(cache=True, nogil=True)
def _primal_loss(loss, indptr, indices, data, y, c, w, bias, prefetch_w, rows):
    # rows of length 0: every row in storage order; else the rows listed (one loop for both)
    listed = rows.shape[0] > 0
    has_bias = bias > 0.0
    wb = bias * w[w.shape[0] - 1] if has_bias else 0.0
    n = rows.shape[0] if listed else indptr.shape[0] - 1
    total = 0.0
    for q in range(0, n, 2):
        qj = q + 1 if q + 1 < n else q  # the odd last row pairs with an empty range
        i = rows[q] if listed else q
        j = rows[qj] if listed else qj
        p, e = indptr[i], indptr[i + 1]
        r, f = indptr[j], indptr[j + 1] if qj > q else indptr[j]
        if prefetch_w:
            if not listed:
                prefetch_gather(w, indices, p + NNZ_AHEAD, f + NNZ_AHEAD)
            elif q + _ROWS_AHEAD + 1 < n:  # the pair of rows a few pairs ahead (about NNZ_AHEAD nonzeros)
                a, b = rows[q + _ROWS_AHEAD], rows[q + _ROWS_AHEAD + 1]
                prefetch_gather(w, indices, indptr[a], indptr[a + 1])
                prefetch_gather(w, indices, indptr[b], indptr[b + 1])
        za = 0.0
        zb = 0.0
        while p < e and r < f:
            za += np.float64(data[p]) * w[indices[p]]
            zb += np.float64(data[r]) * w[indices[r]]
            p += 1
            r += 1
        while p < e:
            za += np.float64(data[p]) * w[indices[p]]
            p += 1
        while r < f:
            zb += np.float64(data[r]) * w[indices[r]]
            r += 1
        if c[i] > 0.0:
            if has_bias:
                za += wb
            total += c[i] * loss_value(loss, za, y[i])
        if qj > q and c[j] > 0.0:
            if has_bias:
                zb += wb
            total += c[j] * loss_value(loss, zb, y[j])
    return total


@njit(cache=True, nogil=True)
def block_dual_loss(loss, y, c, alpha):
    r"""``sum_i -c_i phi*(-a_i / c_i, y_i)`` over the rows of a block.

    ``-inf`` if some ``a_i`` is infeasible (outside the conjugate's domain, or nonzero with
    ``c_i = 0``).
    """
    total = 0.0
    for i in range(alpha.shape[0]):
        total -= weighted_conj_neg(loss, alpha[i], y[i], c[i])
    return total


@njit(cache=True, nogil=True)
def block_accumulate_v(indptr, indices, data, alpha, v, scale, bias):
    r"""``v += scale * sum_i alpha_i x_i`` over the rows of a block (in place).

    With ``scale = 1 / (l2 n)`` and summed over all blocks this rebuilds
    ``v = 1/(l2 n) sum_i alpha_i x_i`` from the duals (start from nonzero duals, resume,
    or check drift). The bias feature adds ``scale * bias * sum_i alpha_i`` to ``v[d]``.
    """
    has_bias = bias > 0.0
    b = v.shape[0] - 1
    for i in range(indptr.shape[0] - 1):
        s = scale * alpha[i]
        if s == 0.0:
            continue
        for p in range(indptr[i], indptr[i + 1]):
            v[indices[p]] += s * np.float64(data[p])
        if has_bias:
            v[b] += s * bias


@njit(cache=True, nogil=True)
def rows_accumulate_v(indptr, indices, data, alpha, v, scale, bias, rows):
    r""":func:`block_accumulate_v` over the rows ``rows`` (ids into ``indptr`` and ``alpha``), in that order."""
    has_bias = bias > 0.0
    b = v.shape[0] - 1
    for r in range(rows.shape[0]):
        i = rows[r]
        s = scale * alpha[i]
        if s == 0.0:
            continue
        for p in range(indptr[i], indptr[i + 1]):
            v[indices[p]] += s * np.float64(data[p])
        if has_bias:
            v[b] += s * bias
