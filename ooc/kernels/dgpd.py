r"""Kernels of DGPD (Doubly Greedy Primal-Dual coordinate descent with active sets, Lei et al.).

The paper's saddle point (its eq. 3), written in the sign convention of ``ooc`` (the SDCA
duals ``a = -y_paper``; ``x`` the primal vector, ``A`` the data with rows ``x_i``)::

    L(x, a) = l2/2 ||x||^2 + l1 ||x||_1 - 1/n a^T A x - 1/n sum_i c_i phi*(-a_i / c_i, y_i)

* Primal best response (paper eq. 4): ``xbar(a) = argmin_x L(x, a) = soft_threshold(u / (l2 n),
  l1 / l2)`` with ``u = A^T a`` (the paper's ``z = A^T y`` up to the sign), i.e. exactly
  ``w = grad g*(v)`` of the sdca solver, ``v = u / (l2 n)``.
* Dual proximal coordinate step (paper eq. 8/13) on example ``i`` with step size ``eta``:
  ``a_i <- argmax_b { -b m_i - c_i phi*(-b / c_i) - n / (2 eta) (b - a_i)^2 }`` with the margin
  ``m_i = x_i . x`` (the paper's ``w = A x``). This is :func:`ooc.objectives.losses.dual_step`
  with ``z = m_i`` and ``q = n / eta``: the loss math is not written again here.
* Step size of the paper's Theorem 4.2 (eq. 16): ``eta <= 2 n^2 l2 / (s (5 R^2 + n gamma l2))``
  with ``s = ||x - xbar||_0`` and ``gamma`` the strong convexity of ``phi*`` (``1 /
  loss.smoothness``), i.e. ``q >= s (5 R^2 + n gamma l2) / (2 n l2)``.

On the active submatrix the primal coordinates touched by a row are kept at their best
response (``w_j = soft_threshold(v_j, l1/l2)``, the paper's update (11) for those coordinates),
so before each dual step ``x = xbar`` on the active columns and the step changes ``xbar`` on
the ``s_i = nnz([A]_i)`` active entries of its row only: that ``s_i`` is the theorem's ``s``.
Any ``q_i >= ||[A]_i||^2 / (l2 n)`` makes the step an ascent step of the (restricted) dual
(``g*`` is 1-smooth), which is the safeguard; the theorem's ``q_i`` is always above it
(``5 s_i R^2 >= ||[A]_i||^2``), only more cautious.

Conventions as in :mod:`ooc.kernels.sdca`: float64 state, data of any float dtype, ``bias > 0``
means a constant feature of value ``bias`` whose weight is the last entry of ``v``/``w`` (never
soft-thresholded). ``loss`` is a loss NamedTuple (one specialization per loss class, cached).
"""

import numpy as np
from numba import njit

from ooc.kernels.sdca import dual_apply
from ooc.objectives.losses import dual_step, loss_value
from ooc.objectives.penalties import soft_threshold_scalar

__all__ = [
    "gather_lines",
    "lines_axpy",
    "active_rounds",
    "primal_scores",
    "dual_scores",
    "margins_loss_sum",
    "row_sqnorms",
    "count_member",
    "restrict_lines",
    "lines_axpy_range",
]


# ----------------------------------------------------------------------------------- lines


@njit(cache=True, nogil=True)
def gather_lines(indptr, indices, data, local, out_indptr, out_indices, out_data, pos0, ptr0):
    r"""Copy lines ``local`` of a block (CSR/CSC with local ``indptr``) into output arrays.

    Line ``local[t]`` goes to output line ``pos0 + t``, its entries at ``out_indptr[pos0 + t]``
    on (``out_indptr[pos0] = ptr0`` on entry). Indices become int64 and values float64.
    Returns the output entry position after the last copied line.
    """
    p_out = ptr0
    for t in range(local.shape[0]):
        line = local[t]
        out_indptr[pos0 + t] = p_out
        for p in range(indptr[line], indptr[line + 1]):
            out_indices[p_out] = indices[p]
            out_data[p_out] = np.float64(data[p])
            p_out += 1
    out_indptr[pos0 + local.shape[0]] = p_out
    return p_out


@njit(cache=True, nogil=True)
def lines_axpy(indptr, indices, data, lines, coef, out):
    r"""``out[indices] += coef[t] * line`` for the lines ``lines[t]``, in the order given.

    With the resident active rows and ``coef = a`` this is ``u = A^T a`` (the paper's eq. 14,
    ``A^T y = sum_{i in A_y} A_i^T y_i``); with the active columns and ``coef = x`` it is the
    margins ``A x = sum_{j in A_x} A^j x_j``. Zero coefficients are skipped.
    """
    for t in range(lines.shape[0]):
        s = coef[t]
        if s == 0.0:
            continue
        ln = lines[t]
        for p in range(indptr[ln], indptr[ln + 1]):
            out[indices[p]] += s * data[p]


@njit(cache=True, nogil=True)
def row_sqnorms(indptr, data, bias, out):
    r"""``out[i] = ||row i||^2 (+ bias^2)``."""
    b2 = bias * bias if bias > 0.0 else 0.0
    for i in range(indptr.shape[0] - 1):
        s = b2
        for p in range(indptr[i], indptr[i + 1]):
            s += data[p] * data[p]
        out[i] = s


@njit(cache=True, nogil=True)
def _in_sorted(keys, x):
    """Whether ``x`` is in the ascending array ``keys`` (binary search)."""
    lo = 0
    hi = keys.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo < keys.shape[0] and keys[lo] == x


@njit(cache=True, nogil=True)
def count_member(indptr, indices, lines, keys):
    r"""Entries of the lines ``lines`` whose index is in ``keys`` (ascending)."""
    total = 0
    for t in range(lines.shape[0]):
        ln = lines[t]
        for p in range(indptr[ln], indptr[ln + 1]):
            if _in_sorted(keys, indices[p]):
                total += 1
    return total


@njit(cache=True, nogil=True)
def restrict_lines(indptr, indices, data, lines, line_ids, keys, out_major, out_minor, out_vals, pos):
    r"""COO triplets of some full lines restricted to the indices in ``keys`` (ascending).

    Line ``lines[t]`` contributes its entries ``p`` with ``indices[p]`` in ``keys`` as
    ``(line_ids[t], indices[p], data[p])``, appended from position ``pos``. Used to grow the
    active submatrix: new active rows restricted to the active columns, new active columns
    restricted to the (old) active rows. A binary search instead of a dense membership map
    keeps this free of ``O(n)`` scratch arrays. Returns the end position.
    """
    for t in range(lines.shape[0]):
        ln = lines[t]
        lid = line_ids[t]
        for p in range(indptr[ln], indptr[ln + 1]):
            j = indices[p]
            if _in_sorted(keys, j):
                out_major[pos] = lid
                out_minor[pos] = j
                out_vals[pos] = data[p]
                pos += 1
    return pos


@njit(cache=True, nogil=True)
def lines_axpy_range(indptr, indices, data, lines, coef, cursor, lo, hi, out):
    r"""The part of :func:`lines_axpy` that lands in ``[lo, hi)``: ``out[i - lo] += ...``.

    ``cursor[t]`` is where line ``lines[t]`` resumes (start it at ``indptr[lines[t]]``); calls for
    consecutive ascending ranges stream the margins ``A x`` one row block at a time, touching each
    entry of the active columns once. Every ``out`` entry receives its terms in the order
    :func:`lines_axpy` adds them, so the result is bit-identical to slicing its output.
    """
    for t in range(lines.shape[0]):
        s = coef[t]
        if s == 0.0:
            continue
        p = cursor[t]
        end = indptr[lines[t] + 1]
        while p < end and indices[p] < hi:
            out[indices[p] - lo] += s * data[p]
            p += 1
        cursor[t] = p


# ---------------------------------------------------------------------------- inner rounds


@njit(cache=True, nogil=True)
def active_rounds(loss, rows, labels, alpha, q, orders, v, w, reg):
    r"""Rounds of primal-dual coordinate updates on the active submatrix ``[A]``.

    For each round ``r`` and each local row ``i = orders[r, t]`` of ``[A]`` (CSR with local
    column ids into ``v``/``w``, which hold the active columns and, last, the bias entry when
    ``bias > 0``): margin ``m_i = [A]_i . w (+ bias w_b)``, dual proximal step
    ``d = dual_step(loss, a_i, m_i, y_i, q_i, c_i)`` (paper eq. 13 with ``q_i = n / eta_i``),
    ``a_i += d``, ``v += d [A]_i / (l2 n)`` and the primal coordinates of the row move to their
    best response ``w_j = soft_threshold(v_j, l1/l2)`` (paper eq. 11), ``w_b = v_b``.

    Parameters
    ----------
    loss : loss NamedTuple
    rows : Rows (:mod:`ooc.kernels.args`)
        The CSR arrays of ``[A]`` (int64, int64, float64).
    labels : Labels
        ``y``, ``c`` float64 (rows of ``[A]``): labels and weights.
    alpha, q : float64 arrays (rows of ``[A]``)
        Duals (updated in place) and dual step parameters ``q_i = n / eta_i``.
    orders : int64 array (rounds, rows)
    v, w : float64 arrays (active columns [+ bias])
        ``v = u_A / (l2 n)`` and ``w = soft_threshold(v)`` on entry; kept so.
    reg : Reg
        ``l2, l1, n`` (``n_total``), ``bias``.

    Returns
    -------
    float
        ``sum d^2`` over all steps.
    """
    indptr, indices, data = rows
    y, c = labels
    l2, l1, n_total, bias = reg
    inv_l2n = 1.0 / (l2 * n_total)
    k = l1 / l2
    has_bias = bias > 0.0
    b = v.shape[0] - 1
    sum_d2 = 0.0
    for r in range(orders.shape[0]):
        for t in range(orders.shape[1]):
            i = orders[r, t]
            ci = c[i]
            ai = alpha[i]
            if ci <= 0.0 and ai == 0.0:
                continue
            start = indptr[i]
            end = indptr[i + 1]
            z = 0.0
            for p in range(start, end):
                z += data[p] * w[indices[p]]
            if has_bias:
                z += bias * w[b]
            d = dual_step(loss, ai, z, y[i], q[i], ci)
            if d != 0.0:
                alpha[i] = ai + d
                dual_apply(indptr, indices, data, i, d, v, w, inv_l2n, k, bias)
                sum_d2 += d * d
    return sum_d2


# ------------------------------------------------------------------------------- searches


@njit(cache=True, nogil=True)
def primal_scores(u, inv_l2n, k, n_feat, active, xbar, score):
    r"""Primal best response and greedy score (paper eqs. 4 and 10).

    ``xbar_j = soft_threshold(u_j / (l2 n), l1/l2)`` for the ``n_feat`` features (the entries
    after them, a bias, get ``u_j / (l2 n)``); ``score_j = |xbar_j|`` for inactive features
    (``active[j] = False``), 0 for active ones and the bias. For an inactive ``j`` (``x_j = 0``)
    the decrease of ``L`` of moving ``x_j`` to ``xbar_j`` (eq. 5) is ``l2/2 xbar_j^2``, so
    ranking by ``|xbar_j|`` is eq. 5's rule, as eq. 10 states.
    """
    for j in range(u.shape[0]):
        vj = u[j] * inv_l2n
        if j < n_feat:
            xj = soft_threshold_scalar(vj, k)
            xbar[j] = xj
            score[j] = 0.0 if active[j] else abs(xj)
        else:
            xbar[j] = vj
            score[j] = 0.0


@njit(cache=True, nogil=True)
def dual_scores(loss, m, y, c, q, active, score):
    r"""Dual greedy score of the inactive examples (paper eq. 12), for ``a_i = 0``.

    ``score_i = |dual_step(loss, 0, m_i, y_i, q_i, c_i)|``: the length of the proximal-gradient
    step of coordinate ``i`` (the Gauss-Southwell-r rule). Eq. 12's plain gradient
    ``|m_i - (phi*)'(0)|`` is not usable as printed: ``phi*`` of the (smooth) hinge is finite only
    on a box, so that gradient is nonzero at examples whose step is 0 (margin >= 1), and for the
    logistic loss it is infinite at 0. For the squared loss both rules rank the same way up to
    the per-row factor ``1 / (1 + c_i q_i)``. Active examples score 0.
    """
    for i in range(m.shape[0]):
        if active[i]:
            score[i] = 0.0
        else:
            score[i] = abs(dual_step(loss, 0.0, m[i], y[i], q[i], c[i]))


@njit(cache=True, nogil=True)
def margins_loss_sum(loss, m, y, c):
    r"""``sum_i c_i phi(m_i, y_i)`` over all examples (rows with ``c_i = 0`` add nothing)."""
    total = 0.0
    for i in range(m.shape[0]):
        ci = c[i]
        if ci > 0.0:
            total += ci * loss_value(loss, m[i], y[i])
    return total
