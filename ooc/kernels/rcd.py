r"""Randomized coordinate descent kernels: dual (Quartz) steps, primal (NSync) prox steps,
coordinate-wise duality gaps and dual residuals (the per-step adaptive samplings' passes are
in :mod:`ooc.kernels.rcd_lazy`).

Problem (``docs/training.rst``), ``X`` is ``n x d`` (rows = examples), ``z = X w``::

    P(w) = 1/n sum_i c_i phi(z_i, y_i) + l2/2 ||w||^2 + l1 ||w||_1

Dual side (rows, ``alpha`` in R^n, ``v = X^T alpha / (l2 n)``, ``w = soft_threshold(v, l1/l2)``):
the coordinate-wise gap of example ``i`` is (Perekrestenko et al. eq. 4 for the SVM mapping)

    G_i = 1/n [c_i phi(z_i) + c_i phi*(-alpha_i/c_i) + alpha_i z_i] >= 0,   sum_i G_i = P(w) - D(alpha)

(exact also with l1 > 0, by Fenchel-Young for g at w = grad g*(v)); the dual residual is
``kappa_i = |alpha_i - u_i|`` with ``u_i = -c_i phi'(z_i)`` (the dual value the margin asks for).

Primal side (columns, the paper's Lasso mapping: coordinates ``w_j``, ``g_j(t) = l1 |t| + l2/2 t^2``,
``u = grad f = (c_i phi'(z_i)/n)_i``): with ``r_j = 1/n sum_i c_i phi'(z_i) x_ij``,

    G_j = h_j(r_j) + l1 |w_j| + l2/2 w_j^2 + w_j r_j,   sum_j G_j = P(w) - D(-c phi'(z))
    h_j(r) = (|r| - l1)_+^2 / (2 l2)           (l2 > 0: g_j^*)
    h_j(r) = B (|r| - l1)_+                    (l2 = 0: the Lipschitzing trick, support |w_j| <= B)

and ``kappa_j = |w_j - u_j|`` with ``u_j`` the point of ``d g_j^*(-r_j)`` closest to ``w_j``.

All loops accumulate in float64; arrays follow :mod:`ooc.kernels.sdca`'s conventions.
"""

import numpy as np
from numba import njit

from ooc.kernels.prefetch import prefetch_rows
from ooc.kernels.sdca import dual_apply
from ooc.objectives.losses import loss_conj_neg, loss_curv, loss_deriv, loss_value, weighted_conj_neg
from ooc.objectives.penalties import soft_threshold_scalar

_KAPPA_EPS = 1e-12


# -------------------------------------------------------------------------------------------------
# dual side
# -------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _row_margin(indptr, indices, data, i, w, bias):
    z = 0.0
    for p in range(indptr[i], indptr[i + 1]):
        z += np.float64(data[p]) * w[indices[p]]
    if bias > 0.0:
        z += bias * w[w.shape[0] - 1]
    return z


@njit(cache=True, nogil=True)
def quartz_pass(loss, rows, labels, alpha, draws, eta, v, w, reg):
    r"""Quartz steps without exact maximisation (the face-off paper's variant for logistic).

    For each drawn local row ``i``: ``alpha_i <- (1 - eta_i) alpha_i + eta_i (-c_i phi'(z_i))``
    with ``eta_i = theta / q_i`` and ``theta = min_l q_l l2 n / (c_l beta ||x_l||^2 + l2 n)``
    (``q`` the marginal sampling probabilities; ``eta_i <= 1`` keeps ``alpha`` feasible), then
    ``v, w`` as in :func:`ooc.kernels.sdca.sdca_pass` (same ``rows``, ``labels``, ``reg``).
    Returns ``sum d^2``.
    """
    indptr, indices, data = rows
    y, c = labels
    l2, l1, n_total, bias = reg
    inv_l2n = 1.0 / (l2 * n_total)
    k = l1 / l2
    total = 0.0
    for t in range(draws.shape[0]):
        prefetch_rows(draws, t, indptr, indices, data, alpha, y, c, w, w[:0])
        i = draws[t]
        z = _row_margin(indptr, indices, data, i, w, bias)
        target = -c[i] * loss_deriv(loss, z, y[i])
        d = eta[i] * (target - alpha[i])
        if d != 0.0:
            alpha[i] += d
            dual_apply(indptr, indices, data, i, d, v, w, inv_l2n, k, bias)
            total += d * d
    return total


@njit(cache=True, nogil=True)
def _dual_gap_i(loss, z, a, yi, ci, n_total):
    g = a * z + weighted_conj_neg(loss, a, yi, ci)
    if ci > 0.0:
        g += ci * loss_value(loss, z, yi)
    return g / n_total


@njit(cache=True, nogil=True)
def dual_block_gaps(loss, indptr, indices, data, y, c, alpha, w, bias, n_total, gaps):
    r"""Coordinate gaps ``G_i`` of the block's rows (added to ``gaps``), and the block's loss sums.

    Returns ``(sum_i c_i phi(z_i), sum_i -c_i phi*(-alpha_i/c_i))``, the block's terms of ``P`` and
    ``D`` exactly as :func:`block_primal_loss` and :func:`block_dual_loss` compute them.
    """
    psum = 0.0
    dsum = 0.0
    for i in range(alpha.shape[0]):
        z = _row_margin(indptr, indices, data, i, w, bias)
        ci = c[i]
        if ci > 0.0:
            psum += ci * loss_value(loss, z, y[i])
        dsum -= weighted_conj_neg(loss, alpha[i], y[i], ci)
        gaps[i] += _dual_gap_i(loss, z, alpha[i], y[i], ci, n_total)
    return psum, dsum


@njit(cache=True, nogil=True)
def col_curvature(indptr, indices, data, c, beta, n_total, l2, u_out, m_out):
    r"""Per column ``j`` of a CSC block: ``u_j = sum_i c_i x_ij^2`` and the coordinate Lipschitz
    constant of the smooth part, ``M_j = beta u_j / n + l2`` (NSync's ``(beta u_j + lambda n)/n``)."""
    for j in range(indptr.shape[0] - 1):
        u = 0.0
        for p in range(indptr[j], indptr[j + 1]):
            x = np.float64(data[p])
            u += c[indices[p]] * x * x
        u_out[j] = u
        m_out[j] = beta * u / n_total + l2


@njit(cache=True, nogil=True)
def grad_sum(loss, cols, labels, z, p0, p1):
    r"""``sum_p c_i phi'(z_i, y_i) x_p`` over the nonzeros ``p0 <= p < p1`` of a CSC block (``i`` their rows)."""
    _, indices, data = cols
    y, c = labels
    g = 0.0
    for p in range(p0, p1):
        i = indices[p]
        ci = c[i]
        if ci > 0.0:
            g += ci * loss_deriv(loss, z[i], y[i]) * np.float64(data[p])
    return g


@njit(cache=True, nogil=True)
def move_margins(cols, d, z, p0, p1):
    r"""``z_i += d x_p`` over the nonzeros ``p0 <= p < p1`` of a CSC block (a coordinate's move of ``d``)."""
    _, indices, data = cols
    for p in range(p0, p1):
        z[indices[p]] += d * np.float64(data[p])


@njit(cache=True, nogil=True)
def prox_coord(wj, grad, mj, l2, l1):
    r"""NSync's proximal step on ``w_j``: ``soft_threshold(w_j - (grad + l2 w_j) / M, l1 / M)``, with
    ``grad = 1/n sum_i c_i phi'(z_i) x_ij`` and ``M = mj > 0`` the coordinate's curvature bound."""
    return soft_threshold_scalar(wj - (grad + l2 * wj) / mj, l1 / mj)


@njit(cache=True, nogil=True)
def _col_grad(loss, cols, jl, labels, z, n_total):
    indptr = cols[0]
    return grad_sum(loss, cols, labels, z, indptr[jl], indptr[jl + 1]) / n_total


@njit(cache=True, nogil=True)
def _prox_step(loss, cols, jl, j, labels, z, w, mj, reg):
    if not mj > 0.0:
        return 0.0
    indptr = cols[0]
    l2, l1, n_total, _ = reg
    wj = w[j]
    wn = prox_coord(wj, _col_grad(loss, cols, jl, labels, z, n_total), mj, l2, l1)
    d = wn - wj
    if d != 0.0:
        w[j] = wn
        move_margins(cols, d, z, indptr[jl], indptr[jl + 1])
    return d


@njit(cache=True, nogil=True)
def primal_cd_pass(loss, cols, col0, labels, z, w, draws, mcoef, reg):
    r"""NSync serial steps on the drawn local columns of a resident CSC block (proximal for L1).

    For local column ``jl`` (global ``j = col0 + jl``) with ``M = mcoef[jl]``:
    ``g = 1/n sum_i c_i phi'(z_i) x_ij + l2 w_j``, ``w_j <- soft_threshold(w_j - g/M, l1/M)``
    (exact coordinate minimisation for the squared loss), ``z += (w_j' - w_j) X_{:j}``.
    ``cols`` is a :class:`~ooc.kernels.args.Rows` of the CSC block (its columns), ``labels``
    the ``Labels(y, c)`` of all rows, ``reg`` the ``Reg`` (``bias`` unused here).
    Returns ``sum d^2``.
    """
    total = 0.0
    for t in range(draws.shape[0]):
        jl = draws[t]
        d = _prox_step(loss, cols, jl, col0 + jl, labels, z, w, mcoef[jl], reg)
        total += d * d
    return total


@njit(cache=True, nogil=True)
def primal_bias_steps(loss, y, c, z, w, bias, mb, l2, n_total, count):
    r"""``count`` steps on the intercept (a virtual dense column of value ``bias``; no L1)."""
    b = w.shape[0] - 1
    for _ in range(count):
        if not mb > 0.0:
            return
        g = 0.0
        for i in range(z.shape[0]):
            if c[i] > 0.0:
                g += c[i] * loss_deriv(loss, z[i], y[i])
        g = g * bias / n_total + l2 * w[b]
        d = -g / mb
        if d != 0.0:
            w[b] += d
            s = d * bias
            for i in range(z.shape[0]):
                z[i] += s


@njit(cache=True, nogil=True)
def primal_gap_rows(loss, indptr, indices, data, y, c, w, bias, z_out, t_acc):
    r"""One row block of the primal side's gap pass.

    Recomputes ``z_i = x_i . w`` exactly (into ``z_out``), and adds ``c_i phi'(z_i) x_i`` to
    ``t_acc`` (so that ``r = t_acc / n`` after all blocks). Returns the block's
    ``(sum_i c_i phi(z_i), sum_i -c_i phi*(phi'(z_i)))``: the terms of ``P(w)`` and of
    ``D(alpha)`` at ``alpha_i = -c_i phi'(z_i)``.
    """
    psum = 0.0
    dsum = 0.0
    nb = t_acc.shape[0] - 1
    for i in range(indptr.shape[0] - 1):
        z = _row_margin(indptr, indices, data, i, w, bias)
        z_out[i] = z
        ci = c[i]
        if ci <= 0.0:
            continue
        yi = y[i]
        psum += ci * loss_value(loss, z, yi)
        gd = loss_deriv(loss, z, yi)
        dsum -= ci * loss_conj_neg(loss, -gd, yi)
        s = ci * gd
        if s != 0.0:
            for p in range(indptr[i], indptr[i + 1]):
                t_acc[indices[p]] += s * np.float64(data[p])
            if bias > 0.0:
                t_acc[nb] += s * bias
    return psum, dsum


@njit(cache=True, nogil=True)
def primal_coord_gap(wj, r, l2, l1, radius):
    """``G_j = h_j(r) + l1 |w_j| + l2/2 w_j^2 + w_j r`` (``h_j`` as in the module docstring)."""
    e = abs(r) - l1
    if e < 0.0:
        e = 0.0
    if l2 > 0.0:
        h = e * e / (2.0 * l2)
    else:
        h = radius * e
    return h + l1 * abs(wj) + 0.5 * l2 * wj * wj + wj * r


@njit(cache=True, nogil=True)
def primal_kappa(wj, r, l2, l1, radius):
    """Dual residual ``|w_j - u|``, ``u`` the point of ``d g_j^*(-r)`` closest to ``w_j``."""
    s = -r
    if l2 > 0.0:
        u = soft_threshold_scalar(s, l1) / l2
    else:
        a = abs(s)
        sg = 1.0 if s > 0.0 else -1.0
        if a < l1:
            u = 0.0
        elif a > l1:
            u = radius * sg
        else:  # the subdifferential is the segment [0, B sign(s)]
            lo = min(0.0, radius * sg)
            hi = max(0.0, radius * sg)
            u = min(max(wj, lo), hi)
    return abs(wj - u)


@njit(cache=True, nogil=True)
def prox_residual(wj, r, l1, mj):
    r"""``|S(w_j - r / M_j, l1 / M_j) - w_j|``: the length of coordinate ``j``'s proximal step.

    Pure L1's stand-in for :func:`primal_kappa`. There ``d g_j^*`` of the Lipschitzed
    ``g_j`` jumps from ``{0}`` to ``{B sign(-r)}`` at ``|r| = l1``, which every support
    coordinate sits on at the optimum: rounding alone moves ``kappa_j`` between ``|w_j|`` and
    ``B - |w_j|``, so ``p_j ~ kappa_j`` starves half of the support. The step length is zero
    exactly at the coordinate's optimality and continuous in ``r`` (the Gauss-Southwell-q
    score of Nutini et al. 2015, in the units of ``w``).
    """
    return abs(soft_threshold_scalar(wj - r / mj, l1 / mj) - wj)


@njit(cache=True, nogil=True)
def scaled_dual_loss(loss, z, y, c, s):
    r"""``sum_i -c_i phi*(s phi'(z_i), y_i)``: the loss part of ``n D`` at ``alpha = -s c phi'(z)``.

    ``s in [0, 1]`` rescales the dual point of the margins ``z`` into the feasible set of pure
    L1, ``||X^T alpha / n||_inf <= l1`` (celer, skglm; Ndiaye et al.'s gap-safe rules): the
    conjugate's domain is convex and holds ``0`` and ``phi'(z_i)``, so ``s phi'(z_i)`` is in it.
    """
    total = 0.0
    for i in range(z.shape[0]):
        ci = c[i]
        if ci > 0.0:
            gd = loss_deriv(loss, z[i], y[i])
            total -= ci * loss_conj_neg(loss, -s * gd, y[i])
    return total


@njit(cache=True, nogil=True)
def margin_sums(loss, z, y, c):
    r"""``(sum_i c_i phi(z_i, y_i), sum_i c_i phi'(z_i, y_i))``: the loss part of ``n P`` and the
    intercept's gradient (times ``n / B``)."""
    psum = 0.0
    gsum = 0.0
    for i in range(z.shape[0]):
        ci = c[i]
        if ci > 0.0:
            psum += ci * loss_value(loss, z[i], y[i])
            gsum += ci * loss_deriv(loss, z[i], y[i])
    return psum, gsum


@njit(cache=True, nogil=True)
def ws_cd_epoch(loss, cols, gidx, labels, z, w, mcoef, reg):
    r"""One cyclic pass of prox steps over the columns of a working-set block, in their order.

    ``cols`` holds the working set's columns of one column block (CSC, local), ``gidx`` their
    global indices (into ``w``), ``mcoef`` their ``M_j``; the step is :func:`primal_cd_pass`'s.
    Returns ``sum d^2``.
    """
    total = 0.0
    for jl in range(gidx.shape[0]):
        d = _prox_step(loss, cols, jl, gidx[jl], labels, z, w, mcoef[jl], reg)
        total += d * d
    return total


@njit(cache=True, nogil=True)
def ws_col_grads(loss, cols, labels, z, n_total, out):
    r"""``out[jl] = r_j = 1/n sum_i c_i phi'(z_i) x_ij`` for every column of a working-set block."""
    for jl in range(out.shape[0]):
        out[jl] = _col_grad(loss, cols, jl, labels, z, n_total)


@njit(cache=True, nogil=True)
def newton_weights(loss, z, y, c, g_out, h_out):
    r"""``g_i = c_i phi'(z_i)``, ``h_i = c_i phi''(z_i)`` (the quadratic model of the loss at ``z``).

    Returns ``(sum_i c_i phi(z_i), sum_i g_i)``.
    """
    psum = 0.0
    gsum = 0.0
    for i in range(z.shape[0]):
        ci = c[i]
        if ci > 0.0:
            psum += ci * loss_value(loss, z[i], y[i])
            g = ci * loss_deriv(loss, z[i], y[i])
            g_out[i] = g
            gsum += g
            h_out[i] = ci * loss_curv(loss, z[i], y[i])
        else:
            g_out[i] = 0.0
            h_out[i] = 0.0
    return psum, gsum


@njit(cache=True, nogil=True)
def newton_prep(cols, g, h, n_total, grad_out, hdiag_out):
    r"""Per column of a working-set block: ``grad_j = X_{:j} . g / n``, ``H_jj = sum_i h_i x_ij^2 / n``."""
    indptr, indices, data = cols
    for jl in range(grad_out.shape[0]):
        a = 0.0
        b = 0.0
        for p in range(indptr[jl], indptr[jl + 1]):
            i = indices[p]
            x = np.float64(data[p])
            a += g[i] * x
            b += h[i] * x * x
        grad_out[jl] = a / n_total
        hdiag_out[jl] = b / n_total


@njit(cache=True, nogil=True)
def newton_cd_pass(cols, gidx, wt, xd, h, grad, hdiag, w, l1, n_total, active, full):
    r"""One cyclic pass of coordinate minimisation of the proximal Newton model, on a block's columns.

    The model of ``P`` around ``w`` in the direction ``d = wt - w`` is
    ``grad . d + 1/(2n) sum_i h_i (X d)_i^2 + l1 ||w + d||_1`` (GLMNET, newGLMNET of LIBLINEAR
    ``-s 6``; skglm's ProxNewton); ``xd = X d`` is kept. Coordinate ``j`` moves to
    ``wt_j <- soft_threshold(wt_j - q_j / H_jj, l1 / H_jj)``, ``q_j = grad_j + 1/n sum_i h_i x_ij xd_i``.
    A column with ``H_jj = 0`` (flat loss on its rows) is left. ``full``: visit every column
    and set ``active[jl]`` to whether it is (or was) nonzero; else visit the active ones only
    (GLMNET's active-set cycling: the zeros that stay zero cost nothing). Returns
    ``sum_j H_jj delta_j^2``.
    """
    indptr, indices, data = cols
    total = 0.0
    for jl in range(gidx.shape[0]):
        if not full and active[jl] == 0:
            continue
        hj = hdiag[jl]
        if not hj > 0.0:
            active[jl] = 0
            continue
        j = gidx[jl]
        q = 0.0
        for p in range(indptr[jl], indptr[jl + 1]):
            q += h[indices[p]] * np.float64(data[p]) * xd[indices[p]]
        q = grad[jl] + q / n_total
        old = wt[j]
        new = soft_threshold_scalar(old - q / hj, l1 / hj)
        delta = new - old
        if full:
            active[jl] = 1 if (new != 0.0 or old != 0.0) else 0
        if delta != 0.0:
            wt[j] = new
            for p in range(indptr[jl], indptr[jl + 1]):
                xd[indices[p]] += delta * np.float64(data[p])
            total += hj * delta * delta
    return total


@njit(cache=True, nogil=True)
def line_loss(loss, z, xd, y, c, t):
    r"""``sum_i c_i phi(z_i + t xd_i)``: the loss along the Newton direction (its line search)."""
    total = 0.0
    for i in range(z.shape[0]):
        ci = c[i]
        if ci > 0.0:
            total += ci * loss_value(loss, z[i] + t * xd[i], y[i])
    return total


@njit(cache=True, nogil=True)
def axpy(t, x, out):
    """``out += t x``."""
    for i in range(out.shape[0]):
        out[i] += t * x[i]
