"""Pure-Python/numpy oracles for the Crammer-Singer kernels (no Numba, no ooc imports).

Written from Shalev-Shwartz & Zhang, Sec. 5.1 (max-of-hinge, its smoothing, ``Project``)
and Sec. 5.7 (``OptimizeDual``), independently of ``ooc.objectives.multiclass``: the
coordinate step follows the paper's interval search over the sorted ``mu`` (with its
fallback branch's off-by-one corrected, see :func:`optimize_dual`) where the kernel uses
the two thresholds ``max(theta_C, theta_S)``; the projections are vectorised numpy.

Conventions as in the kernels: scores ``z = W^T x`` with ``W`` (d, k) (``d + 1`` rows with a
bias feature), class indices ``y``, weights ``c``, duals ``alpha`` (n, k) with
``alpha_{i, y_i} = -sum_{j != y_i} alpha_ij``, ``V = 1/(l2 n) sum_i x_i alpha_i^T``.
"""

import numpy as np
from reference import augment
from scipy.optimize import minimize

# ---------------------------------------------------------------------------- projections


def project_S_rows(U, radius=1.0):
    """Row-wise projection onto ``{b >= 0, sum b <= radius}`` (vectorised sort, numpy)."""
    U = np.atleast_2d(np.asarray(U, dtype=float))
    P = np.maximum(U, 0.0)
    over = P.sum(axis=1) > radius
    if np.any(over):
        Uo = U[over]
        srt = -np.sort(-Uo, axis=1)
        css = np.cumsum(srt, axis=1) - radius
        j = np.arange(1, U.shape[1] + 1)
        cond = srt - css / j > 0
        rho = U.shape[1] - 1 - np.argmax(cond[:, ::-1], axis=1)  # last True
        theta = css[np.arange(Uo.shape[0]), rho] / (rho + 1)
        P[over] = np.maximum(Uo - theta[:, None], 0.0)
    return P


def project_simplex_eq(v, radius=1.0):
    """Projection onto ``{b >= 0, sum b = radius}`` (Duchi et al. 2008, Fig. 1)."""
    v = np.asarray(v, dtype=float)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - radius
    j = np.arange(1, v.size + 1)
    rho = np.nonzero(u - css / j > 0)[0][-1]
    return np.maximum(v - css[rho] / (rho + 1), 0.0)


# ---------------------------------------------------------------------------- loss


def margins(Z, y):
    """``m_ij = 1 + z_ij - z_iy`` with ``m_iy = 0``."""
    Z = np.atleast_2d(np.asarray(Z, dtype=float))
    y = np.asarray(y, dtype=int).reshape(-1)
    rows = np.arange(Z.shape[0])
    M = 1.0 + Z - Z[rows, y][:, None]
    M[rows, y] = 0.0
    return M


def cs_value_grad(Z, y, gamma):
    """Loss values (n,) and gradients (n, k) of the smooth max-of-hinge (subgradient at 0)."""
    M = margins(Z, y)
    rows = np.arange(M.shape[0])
    if gamma > 0:
        B = project_S_rows(M / gamma)
        B[rows, y] = 0.0
        val = np.sum(B * M, axis=1) - 0.5 * gamma * np.sum(B * B, axis=1)
    else:
        val = np.maximum(M.max(axis=1), 0.0)
        B = np.zeros_like(M)
        arg = np.argmax(M, axis=1)
        B[rows[val > 0], arg[val > 0]] = 1.0
    G = B.copy()
    G[rows, y] = -B.sum(axis=1)
    return val, G


def cs_conjugate(u, y, gamma):
    """``phi*(u, y)`` for one vector, from the definition ``sup_z u.z - phi(z)`` solved in closed form.

    ``u`` must satisfy ``sum u = 0``, ``u_j >= 0`` (j != y), ``-u_y <= 1``; else ``inf``.
    """
    u = np.asarray(u, dtype=float)
    off = np.delete(u, y)
    if np.any(off < -1e-13) or abs(u.sum()) > 1e-12 or -u[y] > 1 + 1e-13:
        return np.inf
    return 0.5 * gamma * off @ off + u[y]


def dual_terms(alpha, y, c, gamma):
    """``-c_i phi*(-alpha_i / c_i)`` per row (``c_i = 0``: 0 if ``alpha_i = 0``)."""
    out = np.empty(alpha.shape[0])
    for i in range(alpha.shape[0]):
        if c[i] == 0:
            out[i] = 0.0 if not np.any(alpha[i]) else -np.inf
        else:
            out[i] = -c[i] * cs_conjugate(-alpha[i] / c[i], y[i], gamma)
    return out


def primal_objective(X, y, c, W, l2, l1, gamma, bias=0.0):
    Xa = augment(X, bias)
    n = Xa.shape[0]
    W = np.asarray(W, dtype=float)
    feats = W[:-1] if bias > 0 else W
    val, _ = cs_value_grad(Xa @ W, y, gamma)
    return (c * val).sum() / n + 0.5 * l2 * np.sum(W * W) + l1 * np.abs(feats).sum()


def dual_objective(X, y, c, alpha, l2, l1, gamma, bias=0.0):
    Xa = augment(X, bias)
    n = Xa.shape[0]
    V = Xa.T @ alpha / (l2 * n)
    W = np.sign(V) * np.maximum(np.abs(V) - l1 / l2, 0.0)
    if bias > 0:
        W[-1] = V[-1]
    return dual_terms(alpha, y, c, gamma).sum() / n - 0.5 * l2 * np.sum(W * W)


# ---------------------------------------------------------------------------- the step


def optimize_dual(mu, C, cap):
    """Paper's ``OptimizeDual(mu, C)`` (Sec. 5.7) with the cap ``1`` replaced by ``cap``.

    Solves ``min_{a >= 0, s = sum a <= cap} ||a - mu||^2 + C s^2``. Interval search: with
    ``mu_hat`` sorted non-increasing and ``mu_bar`` its cumulative sums,
    ``z_j = min(mu_bar_j - j mu_hat_j, cap)`` is the mass when ``j`` entries are active;
    the stationary mass with ``j`` active is ``mu_bar_j / (1 + j C)``. If none of those
    lies in its interval the cap is active. Correction: the paper then uses the minimal
    ``j`` with ``z_j = cap`` and threshold ``(mu_bar_j - cap)/j``; the projection onto
    ``sum = cap`` has ``j - 1`` active entries, threshold ``(mu_bar_{j-1} - cap)/(j-1)``.
    """
    mu = np.asarray(mu, dtype=float)
    muh = np.sort(np.maximum(mu, 0.0))[::-1]
    K = muh.size
    mubar = np.cumsum(muh)
    js = np.arange(1, K + 1)
    z = np.append(np.minimum(mubar - js * muh, cap), cap)
    for j in range(1, K + 1):
        s = mubar[j - 1] / (1.0 + j * C)
        if z[j - 1] <= s <= z[j]:
            theta = (mubar[j - 1] - s) / j
            return np.maximum(0.0, mu - theta)
    j = int(np.nonzero(z >= cap)[0][0]) + 1  # minimal j with z_j = cap (1-based, <= K + 1)
    ja = j - 1
    theta = (mubar[ja - 1] - cap) / ja
    return np.maximum(0.0, mu - theta)


def optimize_dual_as_printed(mu, C):
    """``OptimizeDual`` exactly as printed (cap 1), fallback branch included: for the tests."""
    mu = np.asarray(mu, dtype=float)
    muh = np.sort(np.maximum(mu, 0.0))[::-1]
    K = muh.size
    mubar = np.cumsum(muh)
    js = np.arange(1, K + 1)
    z = np.append(np.minimum(mubar - js * muh, 1.0), 1.0)
    for j in range(1, K + 1):
        s = mubar[j - 1] / (1.0 + j * C)
        if z[j - 1] <= s <= z[j]:
            return np.maximum(0.0, mu - (-s + mubar[j - 1]) / j)
    j = min(int(np.nonzero(z >= 1.0)[0][0]) + 1, K)
    a = np.maximum(0.0, mu - (-z[j - 1] + mubar[j - 1]) / j)
    if np.sum((a - mu) ** 2) + C <= np.sum(mu**2):
        return a
    return np.zeros_like(mu)


def dual_step(alpha, z, y, q, c, gamma):
    """New dual ``alpha'`` (k,) of one example (option I), via :func:`optimize_dual`."""
    alpha = np.asarray(alpha, dtype=float)
    z = np.asarray(z, dtype=float)
    k = alpha.size
    if c <= 0:
        return np.zeros(k)
    off = np.arange(k) != y
    m = 1.0 + z - z[y]
    A = gamma / c + q
    new = np.zeros(k)
    if A <= 0:
        j = int(np.argmax(np.where(off, m, -np.inf)))
        if m[j] > 0:
            new[j] = -c
            new[y] = c
        return new
    # b = -alpha' off y; the model is -A/2 ||b - mu||^2 - q/2 s^2 + const.
    mu = np.where(off, (m + q * (alpha[y] - alpha)) / A, 0.0)
    b = optimize_dual(mu, q / A, c)
    b[y] = 0.0
    s = b.sum()
    if s > c:
        b *= c / s
        s = min(b.sum(), c)
    new[off] = -b[off]
    new[y] = s
    return new


def step_objective(alpha_new, alpha, z, y, q, c, gamma):
    """The option I model ``-c phi*(-alpha'/c) - z.Delta - q/2 ||Delta||^2`` (``-inf`` if infeasible)."""
    d = np.asarray(alpha_new) - np.asarray(alpha)
    term = dual_terms(np.atleast_2d(alpha_new), [y], [c], gamma)[0]
    return term - z @ d - 0.5 * q * d @ d


# ---------------------------------------------------------------------------- SDCA


def cs_sdca_pass(X, y, c, alpha, order, V, W, l2, l1, n_total, gamma, bias=0.0):
    """One Crammer-Singer Prox-SDCA option I pass over rows ``order`` of CSR ``X``, in place.

    Sums in the same order as the kernel (row entries in storage order, bias last).
    """
    d = X.shape[1]
    k = V.shape[1]
    lam_n = l2 * n_total
    thr = l1 / l2
    for i in order:
        lo, hi = X.indptr[i], X.indptr[i + 1]
        cols = [int(j) for j in X.indices[lo:hi]]
        vals = [float(x) for x in X.data[lo:hi]]
        if bias > 0:
            cols.append(d)
            vals.append(float(bias))
        z = np.zeros(k)
        sq = 0.0
        for j, x in zip(cols, vals):
            z = z + x * W[j]
            sq += x * x
        new = dual_step(alpha[i], z, int(y[i]), sq / lam_n, float(c[i]), gamma)
        delta = new - alpha[i]
        alpha[i] = new
        for j, x in zip(cols, vals):
            V[j] = V[j] + (x / lam_n) * delta
            if bias > 0 and j == d:
                W[j] = V[j]
            else:
                W[j] = np.sign(V[j]) * np.maximum(np.abs(V[j]) - thr, 0.0)


# ---------------------------------------------------------------------------- primal solvers


def _l1_mask(shape, bias):
    mask = np.ones(shape)
    if bias > 0:
        mask[-1] = 0.0
    return mask


def solve_primal_smooth(X, y, c, l2, l1, gamma, k, bias=0.0):
    """Minimise ``P(W)`` for ``gamma > 0`` with L-BFGS-B (``W = Wp - Wm``, ``Wp, Wm >= 0`` for L1)."""
    Xa = augment(X, bias)
    n, D = Xa.shape
    mask = _l1_mask((D, k), bias).ravel()

    def fg_w(w):
        W = w.reshape(D, k)
        val, G = cs_value_grad(Xa @ W, y, gamma)
        f = (c * val).sum() / n + 0.5 * l2 * w @ w
        g = (Xa.T @ (c[:, None] * G)).ravel() / n + l2 * w
        return f, g

    if l1 == 0:
        res = minimize(fg_w, np.zeros(D * k), jac=True, method="L-BFGS-B",
                       options={"maxiter": 20000, "ftol": 1e-15, "gtol": 1e-12, "maxcor": 30})
        return res.x.reshape(D, k)
    # The bias row is free: give it Wp only, unbounded.
    bounds = [(0, None) if m else (None, None) for m in mask] + [
        (0, None) if m else (0, 0) for m in mask
    ]

    def fg(x):
        wp, wm = x[: D * k], x[D * k:]
        f, g = fg_w(wp - wm)
        f += l1 * mask @ (wp + wm)
        return f, np.concatenate([g + l1 * mask, -g + l1 * mask])

    res = minimize(fg, np.zeros(2 * D * k), jac=True, method="L-BFGS-B", bounds=bounds,
                   options={"maxiter": 20000, "ftol": 1e-15, "gtol": 1e-12, "maxcor": 30})
    return (res.x[: D * k] - res.x[D * k:]).reshape(D, k)


def solve_primal_hinge(X, y, c, l2, l1, k, bias=0.0, pairs=None):
    """Minimise ``P(W)`` for ``gamma = 0`` in epigraph form with SLSQP.

    Variables ``(Wp, Wm, xi)``: ``min 1/n c.xi + l2/2 ||Wp - Wm||^2 + l1 1.(Wp + Wm)``
    subject to ``xi_i >= 1 + z_ij - z_iy`` (``j != y_i``), ``xi >= 0``, ``Wp, Wm >= 0``.
    (Without L1, ``W`` is one free block.)

    ``pairs`` (bool (n, k)), if given, keeps only those margin constraints (a working set;
    rows without any get ``xi_i = 0``): the result solves a relaxation, so it is the
    optimum of the full problem exactly when it satisfies the dropped constraints, which
    the caller checks by comparing ``P(W)`` with the returned relaxed objective.

    Returns
    -------
    W : ndarray (d, k)
    relaxed : float
        The objective of the (relaxed) epigraph problem at the solution.
    res : OptimizeResult
    """
    Xa = augment(X, bias)
    n, D = Xa.shape
    dk = D * k
    mask = _l1_mask((D, k), bias).ravel()
    split = l1 > 0
    nw = 2 * dk if split else dk
    y = np.asarray(y, dtype=int)
    if pairs is None:
        pairs = np.ones((n, k), dtype=bool)
    pairs = pairs.copy()
    pairs[np.arange(n), y] = False
    rows_used = np.nonzero(pairs.any(axis=1))[0]
    slot = -np.ones(n, dtype=int)
    slot[rows_used] = np.arange(rows_used.size)
    ii, jj = np.nonzero(pairs)
    # Constraint rows: xi_i - x_i . (W[:, j] - W[:, y_i]) - 1 >= 0.
    G = np.zeros((ii.size, D, k))
    G[np.arange(ii.size), :, jj] -= Xa[ii]
    G[np.arange(ii.size), :, y[ii]] += Xa[ii]
    G = G.reshape(ii.size, dk)
    Acon = np.zeros((ii.size, nw + rows_used.size))
    Acon[:, :dk] = G
    if split:
        Acon[:, dk:2 * dk] = -G
    Acon[np.arange(ii.size), nw + slot[ii]] = 1.0
    cu = c[rows_used]

    def w_of(x):
        return x[:dk] - x[dk:2 * dk] if split else x[:dk]

    def f(x):
        w = w_of(x)
        val = cu @ x[nw:] / n + 0.5 * l2 * w @ w
        if split:
            val += l1 * mask @ (x[:dk] + x[dk:2 * dk])
        return val

    def g(x):
        w = w_of(x)
        out = np.zeros_like(x)
        out[:dk] = l2 * w + (l1 * mask if split else 0.0)
        if split:
            out[dk:2 * dk] = -l2 * w + l1 * mask
        out[nw:] = cu / n
        return out

    bounds = ([(0, None) if m else (None, None) for m in mask] if split else [(None, None)] * dk)
    if split:
        bounds += [(0, None) if m else (0, 0) for m in mask]
    bounds += [(0, None)] * rows_used.size
    x0 = np.zeros(nw + rows_used.size)
    x0[nw:] = 1.0
    res = minimize(f, x0, jac=g, method="SLSQP", bounds=bounds,
                   constraints=[{"type": "ineq", "fun": lambda x: Acon @ x - 1.0,
                                 "jac": lambda x: Acon}],
                   options={"maxiter": 2000, "ftol": 1e-14})
    return w_of(res.x).reshape(D, k), float(res.fun), res
