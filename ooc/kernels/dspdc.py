r"""DSPDC (Yu, Lin & Yang, Algorithm 2) on one resident block of rows ``A = U V``.

Problem (``docs/training.rst``; the paper's dual ``y = -a``, ``lambda = l2``, ``g_j = l2/2 x_j^2 + l1 |x_j|``)::

    P(x) = 1/n sum_i c_i phi(A_i . x, y_i) + l2/2 ||x||^2 + l1 ||x||_1,   A = U V

The rows ``U_i`` live in an *inner* space of dimension ``K_in``; ``V`` maps the ``dim`` primal
coordinates into it. A plain store is ``U = X``, ``V = I`` (``K_in = dim``); a factorized store
(:mod:`ooc.store.factorize`) has ``U = X G^T`` (``K`` columns) and ``V = G``. With a bias feature
``B`` the last inner entry is the intercept: rows carry ``B`` there (the kernels' usual
convention) and the last primal coordinate maps to it with weight 1.

``V`` is given column by column (CSC-like ``vptr, vidx, vdat``: column ``j`` holds the inner
entries of primal coordinate ``j``), so one code path serves ``V = I`` (one entry per column) and
a dense ``K x d`` factor.

State (float64): ``x`` (dim) the primal iterate; ``vx = V x`` and ``vbar = V xbar`` (K_in);
``u = U^T a / (l2 n)`` (K_in; for a plain store SDCA's ``v``); the previous iteration's
coordinates ``jprev`` and steps ``dxprev`` (q each, to move ``vbar`` from ``V xbar^t`` to
``V xbar^{t+1}`` in O(q) instead of O(K_in)).

One iteration (the paper's eqs. 11-16 in our signs):

1. ``I``: ``m`` rows of the block, uniform without replacement; ``J``: ``q`` of the ``dim``
   coordinates, uniform without replacement.
2. ``gold_j = V^j . u`` for ``j`` in ``J`` (before the dual moves).
3. Each ``i`` in ``I`` (eq. 11, all at the same ``vbar``): with ``z = U_i . vbar`` the
   maximiser of ``z beta/n - phi_i*(beta)/n - (beta - y_i)^2/(2 sigma)`` is, for ``a = -beta``,
   ``a_i + d`` with ``d = argmax -c_i phi*(-(a_i+d)/c_i) - z d - (n/sigma) d^2/2``:
   :func:`ooc.objectives.losses.dual_step` with ``q = n / sigma``. Then ``u += d U_i/(l2 n)``.
4. Each ``j`` in ``J`` (eqs. 13-14): ``ubar = u^t + (n/m)(u^{t+1} - u^t)`` enters only through
   ``gbar_j = V^j . ubar = gold_j + (n/m)(V^j . u^{t+1} - gold_j)``; the paper's
   ``(1/n) <A^j, ybar>`` is ``-l2 gbar_j``, so
   ``x_j <- prox_{tau g_j}(x_j + tau l2 gbar_j) = soft(x_j + tau l2 gbar_j, tau l1) / (1 + tau l2)``
   (no soft-threshold on the intercept).
5. ``vx += V dx`` (eq. 15) and ``vbar^{t+1} = vx^{t+1} + theta V dx^t`` (eq. 16), i.e.
   ``vbar += (1 + theta) V dx^t - theta V dx^{t-1}``.

Randomness: Numba's generator, seeded at the start of every call with ``rng_seed`` (a pure
function of ``(seed, epoch, block, problem)``), and index buffers reset to the identity at the
start, so a block's iterations depend on nothing but the state and that seed (exact resume).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ..objectives.losses import dual_step

__all__ = ["DspdcState", "DspdcStep", "dspdc_block", "vbar_from", "v_times", "vt_times"]


class DspdcState(NamedTuple):
    r"""The iterate :func:`dspdc_block` updates in place (see the module docstring).

    ``x`` float64 (dim,); ``vx``, ``vbar``, ``u`` float64 (K_in,); ``jprev`` int64 (q,) and
    ``dxprev`` float64 (q,), the previous iteration's coordinates and steps.
    """

    x: np.ndarray
    vx: np.ndarray
    vbar: np.ndarray
    u: np.ndarray
    jprev: np.ndarray
    dxprev: np.ndarray


class DspdcStep(NamedTuple):
    r"""How :func:`dspdc_block` iterates.

    ``n_iters``, ``m``, ``q`` (int): iterations, rows per iteration (``<=`` rows),
    coordinates per iteration (``<= dim``); ``theta``, ``tau``, ``qdual`` (float): the
    extrapolation, the primal step and ``n / sigma``; ``rng_seed`` (int); ``l1_last`` (bool):
    whether the last primal coordinate is L1-penalized (False when it is the intercept).
    """

    n_iters: int
    m: int
    q: int
    theta: float
    tau: float
    qdual: float
    rng_seed: int
    l1_last: bool


@njit(cache=True, nogil=True)
def _vdot(vptr, vidx, vdat, j, vec):
    s = 0.0
    for e in range(vptr[j], vptr[j + 1]):
        s += np.float64(vdat[e]) * vec[vidx[e]]
    return s


@njit(cache=True, nogil=True)
def _vaxpy(vptr, vidx, vdat, j, a, vec):
    for e in range(vptr[j], vptr[j + 1]):
        vec[vidx[e]] += a * np.float64(vdat[e])


@njit(cache=True, nogil=True)
def dspdc_block(loss, rows, labels, alpha, vcols, state, reg, step):
    r"""``n_iters`` DSPDC iterations on the rows of one block (see the module docstring).

    Parameters
    ----------
    loss : loss NamedTuple
    rows : Rows (:mod:`ooc.kernels.args`)
        CSR of the block's rows in the inner space (local ``indptr``, int64).
    labels : Labels
        ``y``, ``c`` float64 (rows,): labels and example weights.
    alpha : float64 (rows,)
        Duals (updated in place).
    vcols : Rows
        The columns of ``V``: ``vptr`` (``dim + 1``), ``vidx``, ``vdat`` (entries).
    state : DspdcState
        ``x, vx, vbar, u, jprev, dxprev`` (updated in place).
    reg : Reg
        ``l2, l1, n`` (``n_total``), ``bias``.
    step : DspdcStep
        ``n_iters, m, q, theta, tau, qdual, rng_seed, l1_last``.

    Returns
    -------
    int
        Stored nonzeros read or written by the dual steps (the work measure).
    """
    indptr, indices, data = rows
    y, c = labels
    vptr, vidx, vdat = vcols
    x, vx, vbar, u, jprev, dxprev = state
    l2, l1, n_total, bias = reg
    n_iters, m, q, theta, tau, qdual, rng_seed, l1_last = step
    np.random.seed(rng_seed)
    rows = indptr.shape[0] - 1
    dim = x.shape[0]
    has_bias = bias > 0.0
    last = u.shape[0] - 1
    scale = 1.0 / (l2 * n_total)
    extrap = n_total / m
    rperm = np.arange(rows)
    jperm = np.arange(dim)
    J = np.empty(q, dtype=np.int64)
    gold = np.empty(q)
    dx = np.empty(q)
    work = 0
    for _ in range(n_iters):
        # partial Fisher-Yates: the first m (q) slots become a uniform subset, whatever the
        # buffer's current order
        for t in range(m):
            r = t + np.random.randint(0, rows - t)
            rperm[t], rperm[r] = rperm[r], rperm[t]
        for t in range(q):
            r = t + np.random.randint(0, dim - t)
            jperm[t], jperm[r] = jperm[r], jperm[t]
            J[t] = jperm[t]
            gold[t] = _vdot(vptr, vidx, vdat, J[t], u)
        for t in range(m):
            i = rperm[t]
            z = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                z += np.float64(data[p]) * vbar[indices[p]]
            if has_bias:
                z += bias * vbar[last]
            d = dual_step(loss, alpha[i], z, y[i], qdual, c[i])
            if d != 0.0:
                alpha[i] += d
                s = scale * d
                for p in range(indptr[i], indptr[i + 1]):
                    u[indices[p]] += s * np.float64(data[p])
                if has_bias:
                    u[last] += s * bias
            work += 2 * (indptr[i + 1] - indptr[i])
        for t in range(q):
            j = J[t]
            gnew = _vdot(vptr, vidx, vdat, j, u)
            gbar = gold[t] + extrap * (gnew - gold[t])
            arg = x[j] + tau * l2 * gbar
            k = tau * l1 if (j < dim - 1 or l1_last) else 0.0
            if arg > k:
                arg -= k
            elif arg < -k:
                arg += k
            else:
                arg = 0.0
            xn = arg / (1.0 + tau * l2)
            dx[t] = xn - x[j]
            x[j] = xn
            if dx[t] != 0.0:
                _vaxpy(vptr, vidx, vdat, j, dx[t], vx)
                _vaxpy(vptr, vidx, vdat, j, (1.0 + theta) * dx[t], vbar)
        for t in range(q):
            if dxprev[t] != 0.0:
                _vaxpy(vptr, vidx, vdat, jprev[t], -theta * dxprev[t], vbar)
            jprev[t] = J[t]
            dxprev[t] = dx[t]
    return work


@njit(cache=True, nogil=True)
def vbar_from(vptr, vidx, vdat, vx, jprev, dxprev, theta, vbar):
    """``vbar = vx + theta V dxprev`` exactly (eq. 16), after ``vx`` was recomputed."""
    vbar[:] = vx
    for t in range(jprev.shape[0]):
        if dxprev[t] != 0.0:
            _vaxpy(vptr, vidx, vdat, jprev[t], theta * dxprev[t], vbar)


@njit(cache=True, nogil=True)
def v_times(vptr, vidx, vdat, x, out):
    """``out = V x`` (inner space) from the columns of ``V``."""
    out[:] = 0.0
    for j in range(x.shape[0]):
        if x[j] != 0.0:
            _vaxpy(vptr, vidx, vdat, j, x[j], out)


@njit(cache=True, nogil=True)
def vt_times(vptr, vidx, vdat, u, out):
    """``out = V^T u`` (primal space): ``out_j = V^j . u``."""
    for j in range(out.shape[0]):
        out[j] = _vdot(vptr, vidx, vdat, j, u)
