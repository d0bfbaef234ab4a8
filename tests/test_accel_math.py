"""Accelerated Prox-SDCA pieces: Fig. 2 constants, the schedule, and the shifted problem.

The key claim: the unchanged binary kernel ``ooc.kernels.sdca.sdca_pass`` run with
``l2~ = l2 + kappa`` on ``v~ = kappa/l2~ y + 1/(l2~ n) sum a_i x_i`` solves
``P(w) + kappa/2 ||w - y||^2`` (gap -> 0, optimum = scipy on that objective), and so does
the Crammer-Singer kernel; the pieces composed into Fig. 2's outer loop reach ``P*``.
"""

import math

import numpy as np
import pytest
import reference as ref
import scipy.sparse as sp
from reference_gap import (
    duality_gap,
    enter_shifted,
    exit_shifted,
    inner_tolerance,
    max_outer_iterations,
    momentum,
    outer_certificate,
    shifted_gap_from_sums,
    smoothing_gamma,
    xi_at,
    xi_initial,
)
from scipy.optimize import minimize

from ooc.kernels.accel import momentum_into, recenter_v, shift_v
from ooc.kernels.args import Labels, Reg, Rows
from ooc.kernels.multiclass import (
    cs_block_accumulate_v,
    cs_block_dual_loss,
    cs_block_primal_loss,
    cs_sdca_pass,
)
from ooc.kernels.sdca import block_accumulate_v, block_dual_loss, block_primal_loss, sdca_pass
from ooc.objectives import ElasticNet, Hinge, Logistic, SmoothHinge
from ooc.objectives.accel import accel_params
from ooc.objectives.multiclass import make_multiclass_loss
from ooc.objectives.penalties import grad_conj


def test_params_match_figure_2():
    R2, gamma, l2, n = 1.0, 1.0, 1e-6, 1000
    p = accel_params(R2, gamma, l2, n)
    assert p.accelerate and p.condition == pytest.approx(1000.0)
    assert p.kappa == pytest.approx(R2 / (gamma * n) - l2)
    assert p.mu == l2 / 2 and p.rho == pytest.approx(p.mu + p.kappa)
    assert p.eta == pytest.approx(math.sqrt(p.mu / p.rho))
    assert p.beta == pytest.approx((1 - p.eta) / (1 + p.eta)) and 0 < p.beta < 1
    # The identities the proof of Theorem 3 relies on.
    assert p.eta**-2 - 1 == pytest.approx(2 * p.kappa / l2)
    assert p.l2_inner * gamma * n / R2 == pytest.approx(1.0)  # inner condition number = n
    # Logistic (1/4-smooth: gamma = 4) with a bias feature of value 1 on unit rows.
    q = accel_params(1.0 + 1.0, 1 / Logistic().smoothness, 1e-7, 10_000)
    assert q.accelerate and q.kappa == pytest.approx(2.0 / (4 * 10_000) - 1e-7)
    # Fallback: R^2/(gamma lambda) <= 10 n means plain Prox-SDCA.
    f = accel_params(1.0, 1.0, 1e-4, 1000)
    assert f.condition == pytest.approx(10.0) and not f.accelerate
    assert f.kappa == 0.0 and f.l2_inner == 1e-4 and f.beta == 0.0
    assert accel_params(1.0, 1.0, 0.99e-4, 1000).accelerate
    with pytest.raises(ValueError):
        accel_params(1.0, 0.0, 1e-4, 10)


def test_schedule_and_stopping_rules():
    p = accel_params(1.0, 1.0, 1e-6, 1000)
    gap0 = 0.7
    xi1 = xi_initial(gap0, p.eta)
    assert xi1 == pytest.approx((1 + p.eta**-2) * gap0)
    assert xi_at(1, xi1, p.eta) == xi1
    assert xi_at(5, xi1, p.eta) == pytest.approx((1 - p.eta / 2) ** 4 * xi1)
    assert inner_tolerance(xi1, p.eta) == pytest.approx(p.eta / (2 * (1 + p.eta**-2)) * xi1)
    eps = 1e-6
    T = max_outer_iterations(xi1, eps, p.eta)
    assert T == pytest.approx(1 + 2 / p.eta * math.log(xi1 / eps))
    assert xi_at(math.ceil(T), xi1, p.eta) <= eps  # condition 1 certifies xi_t <= eps
    w, y = np.array([1.0, -2.0]), np.array([0.5, -2.0])
    assert outer_certificate(1e-3, w, y, p) == pytest.approx(
        (1 + p.rho / p.mu) * 1e-3 + p.rho * p.kappa / (2 * p.mu) * 0.25)
    wp = np.array([0.0, 1.0])
    np.testing.assert_allclose(momentum(w, wp, 0.5), w + 0.5 * (w - wp))
    out = wp.copy()
    momentum_into(w, wp, 0.5, out)
    np.testing.assert_allclose(out, w + 0.5 * (w - wp))
    # Sec. 3.3: gamma = eps / L^2 keeps the smoothed hinge within eps/2 of the hinge.
    g = smoothing_gamma(0.1)
    z = np.linspace(-3, 3, 601)
    diff = Hinge().value(z, 1.0) - SmoothHinge(g).value(z, 1.0)
    assert diff.min() >= 0 and diff.max() <= 0.05 + 1e-15
    assert smoothing_gamma(0.1, lipschitz=2.0) == pytest.approx(0.025)


# ---------------------------------------------------------------------------- shifted problem


def _binary_problem(n, d, seed, normalise=False):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.5, format="csr", random_state=seed)
    X.data = rng.normal(size=X.nnz)
    if normalise:
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
        X = sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ X
        X = X.tocsr()
    X.sort_indices()
    X.indptr = X.indptr.astype(np.int64)
    w_true = rng.normal(size=d)
    w_true[::2] = 0.0  # irrelevant features, for L1 to zero out
    y = np.where(X @ w_true + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y, np.ones(n)


def _dphi(loss, z, y):
    m = y * z
    if loss.name == "logistic":
        return -y / (1.0 + np.exp(m))
    g = loss.gamma
    return np.where(m >= 1, 0.0, np.where(m <= 1 - g, -y, -y * (1 - m) / g))


def _scipy_shifted(loss, X, y, l2, l1, kappa, center, bias):
    """Minimise P(w) + kappa/2 ||w - y||^2 with L-BFGS-B on w = wp - wm (bias entry free)."""
    Xa = ref.augment(X, bias)
    n, D = Xa.shape
    mask = np.ones(D)
    if bias > 0:
        mask[-1] = 0.0

    def fg(x):
        w = x[:D] - x[D:]
        z = Xa @ w
        f = (ref.phi(loss, z, y).sum() / n + 0.5 * l2 * w @ w + l1 * mask @ (x[:D] + x[D:])
             + 0.5 * kappa * (w - center) @ (w - center))
        g = Xa.T @ _dphi(loss, z, y) / n + l2 * w + kappa * (w - center)
        return f, np.concatenate([g + l1 * mask, -g + l1 * mask])

    bounds = [(0, None) if m else (None, None) for m in mask] + [
        (0, None) if m else (0, 0) for m in mask]
    res = minimize(fg, np.zeros(2 * D), jac=True, method="L-BFGS-B", bounds=bounds,
                   options={"maxiter": 20000, "ftol": 1e-16, "gtol": 1e-13, "maxcor": 30})
    return res.x[:D] - res.x[D:], res.fun


def _inner_gap(loss, X, y, c, alpha, w, v_shift, pen, kappa, center, n, bias):
    ip, ix, dt = X.indptr, X.indices, X.data
    psum = block_primal_loss(loss, ip, ix, dt, y, c, w, bias)
    dsum = block_dual_loss(loss, y, c, alpha)
    return shifted_gap_from_sums(psum, dsum, w, v_shift, pen, kappa, center, n, bias)


@pytest.mark.parametrize("bias", [0.0, 1.0], ids=["nobias", "bias"])
@pytest.mark.parametrize("loss", [SmoothHinge(0.7), Logistic()], ids=["smooth-hinge", "logistic"])
def test_binary_kernel_solves_the_shifted_problem(loss, bias):
    n, d, l2, l1, kappa = 80, 8, 1e-3, 0.1, 0.05
    X, y, c = _binary_problem(n, d, seed=3)
    rng = np.random.default_rng(4)
    D = d + (bias > 0)
    center = rng.normal(size=D) * 0.2
    pen = ElasticNet(l2, l1)
    ip, ix, dt = X.indptr, X.indices, X.data
    # Warm duals from a few plain passes (as after earlier outer iterations).
    alpha = np.zeros(n)
    v = np.zeros(D)
    w = np.zeros(D)
    for _ in range(3):
        sdca_pass(loss, Rows(ip, ix, dt), Labels(y, c), alpha, rng.permutation(n), v, w, Reg(l2, l1, float(n), bias))
    l2t = l2 + kappa
    # Enter: v~ = kappa/l2~ y + l2/l2~ v; the kernel version agrees with the numpy one.
    v_shift = enter_shifted(v, center, kappa, l2, l2t)
    v_k, w_k = v.copy(), w.copy()
    shift_v(v_k, w_k, l2 / l2t, kappa / l2t, center, l1 / l2t, bias)
    np.testing.assert_allclose(v_k, v_shift, rtol=1e-14, atol=1e-16)
    np.testing.assert_array_equal(w_k, grad_conj(ElasticNet(l2t, l1), v_k, bias))
    v, w = v_k, w_k
    for epoch in range(5000):
        sdca_pass(loss, Rows(ip, ix, dt), Labels(y, c), alpha, rng.permutation(n), v, w,
                  Reg(l2t, l1, float(n), bias))
        res = _inner_gap(loss, X, y, c, alpha, w, v, pen, kappa, center, n, bias)
        if res.gap <= 1e-11:
            break
    assert 0 <= res.gap <= 1e-11
    # v~ is the shifted dual point of the current alpha.
    rebuilt = kappa / l2t * center
    block_accumulate_v(ip, ix, dt, alpha, rebuilt, 1.0 / (l2t * n), bias)
    np.testing.assert_allclose(v, rebuilt, rtol=1e-10, atol=1e-13)
    # The primal value in the gap is the shifted objective; the optimum is scipy's.
    p_direct = ref.primal_objective(loss, X, y, c, w, l2, l1, bias) + 0.5 * kappa * np.sum(
        (w - center) ** 2)
    assert res.primal == pytest.approx(p_direct, rel=1e-12)
    w_sp, f_sp = _scipy_shifted(loss, X, y, l2, l1, kappa, center, bias)
    assert abs(f_sp - res.primal) <= 1e-6 * abs(res.primal)
    assert f_sp >= res.dual - 1e-12
    np.testing.assert_allclose(w, w_sp, atol=1e-4)
    assert np.any(w[:d] == 0)  # the L1 part is live
    # Exit: the plain dual point of the same alpha, a valid certificate for P.
    v_plain = exit_shifted(v, center, kappa, l2, l2t)
    again = np.zeros(D)
    block_accumulate_v(ip, ix, dt, alpha, again, 1.0 / (l2 * n), bias)
    np.testing.assert_allclose(v_plain, again, rtol=1e-9, atol=1e-12)
    plain = duality_gap([(ip, ix, dt, y, c, alpha)], None, v_plain, loss, pen, n, bias)
    assert plain.gap >= -1e-12


def test_recenter_moves_v_with_the_center():
    rng = np.random.default_rng(0)
    l2, l1, kappa = 1e-3, 1e-3, 0.2
    l2t = l2 + kappa
    v_plain = rng.normal(size=7)
    y_old, y_new = rng.normal(size=7), rng.normal(size=7)
    v = enter_shifted(v_plain, y_old, kappa, l2, l2t)
    w = np.empty(7)
    recenter_v(v, w, kappa / l2t, y_old, y_new, l1 / l2t, 1.0)
    np.testing.assert_allclose(v, enter_shifted(v_plain, y_new, kappa, l2, l2t), rtol=1e-13)
    np.testing.assert_array_equal(w, grad_conj(ElasticNet(l2t, l1), v, 1.0))  # bias entry kept
    # 2-D (d, k) arrays (Crammer-Singer): the last row is the bias row.
    V = rng.normal(size=(5, 3))
    W = np.empty_like(V)
    recenter_v(V, W, 0.5, np.zeros((5, 3)), np.ones((5, 3)), 0.8, 1.0)
    np.testing.assert_array_equal(W[-1], V[-1])
    np.testing.assert_array_equal(W[:-1], np.sign(V[:-1]) * np.maximum(np.abs(V[:-1]) - 0.8, 0))


def test_crammer_singer_kernel_solves_the_shifted_problem():
    n, d, k, l2, l1, kappa, bias = 90, 6, 3, 1e-3, 1e-3, 0.05, 1.0
    rng = np.random.default_rng(8)
    X = sp.random(n, d, density=0.6, format="csr", random_state=8)
    X.data = rng.normal(size=X.nnz)
    X.indptr = X.indptr.astype(np.int64)
    yc = rng.integers(k, size=n).astype(np.int64)
    c = np.ones(n)
    loss = make_multiclass_loss(0.5)
    center = rng.normal(size=(d + 1, k)) * 0.3
    l2t = l2 + kappa
    alpha = np.zeros((n, k))
    V = np.zeros((d + 1, k))
    W = np.zeros_like(V)
    shift_v(V, W, l2 / l2t, kappa / l2t, center, l1 / l2t, bias)
    ip, ix, dt = X.indptr, X.indices, X.data
    pen = ElasticNet(l2, l1)
    for epoch in range(5000):
        cs_sdca_pass(loss, Rows(ip, ix, dt), Labels(yc, c), alpha, rng.permutation(n), V, W,
                     Reg(l2t, l1, float(n), bias))
        psum = cs_block_primal_loss(loss, ip, ix, dt, yc, c, W, bias)
        dsum = cs_block_dual_loss(loss, yc, c, alpha)
        res = shifted_gap_from_sums(psum, dsum, W, V, pen, kappa, center, n, bias)
        if res.gap <= 1e-11:
            break
    assert 0 <= res.gap <= 1e-11
    rebuilt = kappa / l2t * center
    cs_block_accumulate_v(ip, ix, dt, alpha, rebuilt, 1.0 / (l2t * n), bias)
    np.testing.assert_allclose(V, rebuilt, rtol=1e-10, atol=1e-13)


def test_figure_2_outer_loop_reaches_the_optimum():
    """Fig. 2 assembled from the pieces (inner Prox-SDCA = the binary kernel on v~)."""
    n, d, l1, eps = 100, 10, 1e-4, 1e-6
    loss = SmoothHinge(1.0)
    X, y, c = _binary_problem(n, d, seed=6, normalise=True)
    R2 = float(np.max(np.asarray(X.multiply(X).sum(axis=1))))
    l2 = 1e-4
    p = accel_params(R2, loss.gamma, l2, n)
    assert p.accelerate  # R^2/(gamma lambda) = 1e4 > 10 n
    pen = ElasticNet(l2, l1)
    ip, ix, dt = X.indptr, X.indices, X.data
    rng = np.random.default_rng(0)
    l2t = p.l2_inner
    alpha = np.zeros(n)
    w_prev = np.zeros(d)
    center = np.zeros(d)
    v = np.zeros(d)  # v~ of alpha = 0 around y = 0
    w = np.zeros(d)
    gap0 = duality_gap([(ip, ix, dt, y, c, alpha)], None, np.zeros(d), loss, pen, n).gap
    xi1 = xi_initial(gap0, p.eta)
    xi_prev = xi1
    passes = 0
    for t in range(2, 10_000):
        tol_t = inner_tolerance(xi_prev, p.eta)
        while True:
            sdca_pass(loss, Rows(ip, ix, dt), Labels(y, c), alpha, rng.permutation(n), v, w,
                      Reg(l2t, l1, float(n), 0.0))
            passes += 1
            inner = _inner_gap(loss, X, y, c, alpha, w, v, pen, p.kappa, center, n, 0.0)
            if inner.gap <= tol_t:
                break
        if (t >= max_outer_iterations(xi1, eps, p.eta)
                or outer_certificate(inner.gap, w, center, p) <= eps):
            break
        new_center = momentum(w, w_prev, p.beta)
        w_prev = w.copy()
        recenter_v(v, w, p.kappa / l2t, center, new_center, l1 / l2t, 0.0)
        center = new_center
        xi_prev = xi_at(t, xi1, p.eta)
    # Reference optimum: the same kernel, plain, to a 1e-12 gap.
    a2, v2, w2 = np.zeros(n), np.zeros(d), np.zeros(d)
    for _ in range(100_000):
        sdca_pass(loss, Rows(ip, ix, dt), Labels(y, c), a2, rng.permutation(n), v2, w2, Reg(l2, l1, float(n), 0.0))
        best = duality_gap([(ip, ix, dt, y, c, a2)], None, v2, loss, pen, n)
        if best.gap <= 1e-12:
            break
    p_acc = ref.primal_objective(loss, X, y, c, w, l2, l1)
    assert p_acc - best.primal <= eps
    assert t > 2 and passes > 0
