"""Crammer-Singer math: simplex projections, the exact dual step, conjugate, kernels, optimum.

* projections vs sort-based numpy and a QP (SLSQP);
* the option I step vs brute-force maximisation of the per-example dual (SLSQP from two
  starts; a fine grid for k = 3) and vs the paper's ``OptimizeDual`` (corrected);
* Fenchel-Young for the loss and its conjugate; the smoothing bound of Sec. 3.3;
* the Numba pass vs the pure-Python reference, same row sequence, iterates to 1e-12;
* the certified optimum (gap <= 1e-10) vs scipy solving the primal directly.
"""

import numpy as np
import pytest
import reference as ref
import reference_multiclass as rmc
import scipy.sparse as sp
from reference_gap import cs_duality_gap
from scipy.optimize import minimize

from ooc.kernels.args import Labels, Reg, Rows
from ooc.kernels.multiclass import (
    cs_block_accumulate_v,
    cs_block_dual_loss,
    cs_block_primal_loss,
    cs_sdca_pass,
    cs_sdca_pass_gap,
    simplex_projection,
    simplex_projection_eq,
)
from ooc.objectives.multiclass import (
    MulticlassHinge,
    class_indices,
    cs_grad_conj,
    make_multiclass_loss,
    ovr_labels,
)
from ooc.objectives.penalties import ElasticNet

GAMMAS = [0.0, 0.5]


def _feasible_alpha(rng, k, y, c, kind):
    """A feasible dual vector: zero, a vertex of c S, the cap face, or interior."""
    a = np.zeros(k)
    off = [j for j in range(k) if j != y]
    if kind == "zero":
        return a
    if kind == "vertex":
        b = np.zeros(k - 1)
        b[rng.integers(k - 1)] = c
    elif kind == "face":
        b = rng.dirichlet(np.ones(k - 1)) * c
    else:
        b = rng.dirichlet(np.ones(k))[: k - 1] * c
    a[off] = -b
    a[y] = b.sum()
    return a


# ---------------------------------------------------------------------------- projections


def _qp_projection(v, radius, equality):
    cons = [{"type": "eq" if equality else "ineq",
             "fun": (lambda b: b.sum() - radius) if equality else (lambda b: radius - b.sum())}]
    best = None
    for x0 in (np.full(v.size, radius / v.size), np.zeros(v.size)):
        res = minimize(lambda b: 0.5 * np.sum((b - v) ** 2), x0, jac=lambda b: b - v,
                       method="SLSQP", bounds=[(0, None)] * v.size, constraints=cons,
                       options={"ftol": 1e-15, "maxiter": 500})
        if best is None or res.fun < best.fun:
            best = res
    return best.x


def test_simplex_projections_vs_numpy_and_qp():
    rng = np.random.default_rng(0)
    for trial in range(400):
        k = int(rng.integers(1, 9))
        radius = float(rng.choice([1.0, 0.3, 2.5]))
        v = rng.normal(size=k) * float(rng.choice([0.1, 1.0, 5.0]))
        if trial % 7 == 0:
            v = -np.abs(v)  # nothing positive
        out = np.empty(k)
        theta = simplex_projection(v, radius, out)
        expect = rmc.project_S_rows(v[None], radius)[0]
        np.testing.assert_allclose(out, expect, rtol=1e-13, atol=1e-14)
        assert out.min() >= 0 and out.sum() <= radius * (1 + 1e-14)
        np.testing.assert_allclose(out, np.maximum(v - theta, 0.0), atol=1e-15)
        out_eq = np.empty(k)
        simplex_projection_eq(v, radius, out_eq)
        np.testing.assert_allclose(out_eq, rmc.project_simplex_eq(v, radius),
                                   rtol=1e-12, atol=1e-13 * max(1.0, np.abs(v).max()))
        assert out_eq.sum() == pytest.approx(radius, rel=1e-12)
        if trial % 20 == 0:
            np.testing.assert_allclose(out, _qp_projection(v, radius, False), atol=1e-6)
            np.testing.assert_allclose(out_eq, _qp_projection(v, radius, True), atol=1e-6)
    # In place (out is v).
    v = np.array([0.9, 0.8, -0.2, 0.4])
    expect = rmc.project_S_rows(v[None])[0]
    simplex_projection(v, 1.0, v)
    np.testing.assert_allclose(v, expect, rtol=1e-14)


# ---------------------------------------------------------------------------- the dual step


def _brute_step(alpha, z, y, q, c, gamma):
    """Maximise the option I model over b = -alpha'_{-y} in c S with SLSQP (best of 3 starts)."""
    k = alpha.size
    off = np.arange(k) != y

    def full(b):
        a = np.zeros(k)
        a[off] = -b
        a[y] = b.sum()
        return a

    def neg(b):
        a = full(b)
        d = a - alpha
        return -(a[y] - gamma / (2 * c) * b @ b - z @ d - 0.5 * q * d @ d)

    best = None
    starts = [np.zeros(k - 1), np.full(k - 1, c / k), -alpha[off]]
    for x0 in starts:
        res = minimize(neg, x0, method="SLSQP", bounds=[(0, None)] * (k - 1),
                       constraints=[{"type": "ineq", "fun": lambda b: c - b.sum(),
                                     "jac": lambda b: -np.ones_like(b)}],
                       options={"ftol": 1e-15, "maxiter": 1000})
        # SLSQP may overstep the cap by ~1e-12: evaluate its point made feasible.
        b = rmc.project_S_rows(res.x[None], c)[0]
        if best is None or neg(b) < neg(best):
            best = b
    return full(best), -neg(best)


@pytest.mark.parametrize("gamma", GAMMAS)
def test_dual_step_vs_bruteforce(gamma):
    rng = np.random.default_rng(1 + int(gamma * 10))
    loss = make_multiclass_loss(gamma)
    kinds = ["zero", "vertex", "face", "interior"]
    for trial in range(160):
        k = 3 if trial % 2 == 0 else 4
        y = int(rng.integers(k))
        c = float(rng.choice([1.0, 0.2, 3.0]))
        q = float(rng.choice([1e-3, 0.1, 1.0, 10.0])) * rng.uniform(0.5, 1.5)
        alpha = _feasible_alpha(rng, k, y, c, kinds[trial % 4])
        z = rng.normal(size=k) * float(rng.choice([0.3, 1.0, 4.0]))
        new = alpha + loss.dual_step(alpha, z, y, q, c)
        got = rmc.step_objective(new, alpha, z, y, q, c, gamma)
        assert np.isfinite(got), "the step left the feasible set"
        assert new.sum() == pytest.approx(0.0, abs=1e-13 * c)
        brute, brute_val = _brute_step(alpha, z, y, q, c, gamma)
        # Exact maximiser: never beaten, and (strictly concave for q > 0) the same point.
        assert got >= brute_val - 1e-12 * max(1.0, abs(brute_val))
        np.testing.assert_allclose(new, brute, atol=2e-6 * c)
        # The paper's interval search (its fallback corrected) finds the same point.
        np.testing.assert_allclose(new, rmc.dual_step(alpha, z, y, q, c, gamma),
                                   rtol=1e-12, atol=1e-14 * c)


@pytest.mark.parametrize("gamma", GAMMAS)
def test_dual_step_vs_grid_k3(gamma):
    """k = 3: the model evaluated on a fine grid of the triangle c S never beats the step."""
    rng = np.random.default_rng(7)
    loss = make_multiclass_loss(gamma)
    n_grid = 401
    t = np.linspace(0.0, 1.0, n_grid)
    B1, B2 = np.meshgrid(t, t, indexing="ij")
    inside = B1 + B2 <= 1.0 + 1e-12
    for trial in range(12):
        y = int(rng.integers(3))
        c = float(rng.choice([1.0, 0.5]))
        q = float(rng.uniform(0.05, 2.0))
        alpha = _feasible_alpha(rng, 3, y, c, ["zero", "face", "interior"][trial % 3])
        z = rng.normal(size=3) * 1.5
        new = alpha + loss.dual_step(alpha, z, y, q, c)
        best = rmc.step_objective(new, alpha, z, y, q, c, gamma)
        off = [j for j in range(3) if j != y]
        b1, b2 = c * B1[inside], c * B2[inside]
        A = np.zeros((b1.size, 3))
        A[:, off[0]], A[:, off[1]], A[:, y] = -b1, -b2, b1 + b2
        D = A - alpha
        vals = A[:, y] - gamma / (2 * c) * (b1**2 + b2**2) - D @ z - 0.5 * q * np.sum(D * D, 1)
        assert vals.max() <= best + 1e-12
        # The grid's best point is within a grid step of the maximiser.
        assert np.abs(A[np.argmax(vals)] - new).max() <= 4 * c / (n_grid - 1) + 1e-9


def test_dual_step_edge_cases():
    loss0, loss1 = make_multiclass_loss(0.0), make_multiclass_loss(0.7)
    z = np.array([0.2, 0.9, -0.3])
    a = np.array([0.4, -0.4, 0.0])
    # Weightless row: its only feasible dual is 0.
    np.testing.assert_array_equal(a + loss0.dual_step(a, z, 0, 0.5, 0.0), np.zeros(3))
    # Hinge on an empty row (q = 0): all the mass c on the most violated class.
    np.testing.assert_allclose(a + loss0.dual_step(a, z, 0, 0.0, 2.0), [2.0, -2.0, 0.0])
    np.testing.assert_allclose(np.zeros(3) + loss0.dual_step(np.zeros(3), [5.0, 0, 0], 0, 0.0,
                                                              1.0), np.zeros(3))
    # Smooth loss on an empty row: the model is -gamma/(2c)||b||^2 + m.b: b = Proj(c m / gamma).
    new = a + loss1.dual_step(a, z, 0, 0.0, 1.0)
    m = 1.0 + z - z[0]
    b = rmc.project_S_rows((m / 0.7)[None])[0]
    b[0] = 0.0
    np.testing.assert_allclose(new, np.concatenate([[b.sum()], -b[1:]]), rtol=1e-13)


def test_paper_optimize_dual_fallback_is_off_by_one():
    """Sec. 5.7's OptimizeDual as printed leaves S when the cap is active; corrected, it is exact."""
    mu = np.array([0.0, -0.04725924, -0.19425971, 1.99154595, 0.18633153])
    C = 0.990107963240126
    printed = rmc.optimize_dual_as_printed(mu, C)
    fixed = rmc.optimize_dual(mu, C, 1.0)
    assert printed.sum() > 1.3  # infeasible: outside S
    np.testing.assert_allclose(fixed, [0, 0, 0, 1.0, 0], atol=1e-15)
    # The corrected one is the QP's solution.
    res = minimize(lambda a: np.sum((a - mu) ** 2) + C * a.sum() ** 2, np.full(5, 0.1),
                   method="SLSQP", bounds=[(0, None)] * 5,
                   constraints=[{"type": "ineq", "fun": lambda a: 1 - a.sum()}],
                   options={"ftol": 1e-15})
    np.testing.assert_allclose(fixed, res.x, atol=1e-6)


# ---------------------------------------------------------------------------- loss and conjugate


@pytest.mark.parametrize("gamma", GAMMAS + [2.0])
def test_loss_matches_reference_and_fenchel_young(gamma):
    rng = np.random.default_rng(3)
    loss = make_multiclass_loss(gamma)
    n, k = 300, 5
    Z = rng.normal(size=(n, k)) * 1.5
    y = rng.integers(k, size=n)
    val = loss.value(Z, y)
    G = loss.grad(Z, y)
    rval, rG = rmc.cs_value_grad(Z, y, gamma)
    np.testing.assert_allclose(val, rval, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(G, rG, rtol=1e-13, atol=1e-14)
    # The (sub)gradient is in the conjugate's domain; Fenchel-Young holds with equality there.
    conj = loss.conjugate(G, y)
    assert np.all(np.isfinite(conj))
    np.testing.assert_allclose(val + conj, np.sum(Z * G, axis=1), rtol=1e-12, atol=1e-12)
    for i in range(20):
        np.testing.assert_allclose(conj[i], rmc.cs_conjugate(G[i], y[i], gamma), atol=1e-13)
    # Inequality at random feasible points of the domain; +inf outside.
    for i in range(n):
        u = -_feasible_alpha(rng, k, y[i], 1.0, ["vertex", "face", "interior"][i % 3])
        assert val[i] + loss.conjugate(u, y[i]) >= Z[i] @ u - 1e-12
    assert loss.conjugate(np.array([0.5, 0.5, -1.0, 0, 0]), 0) == np.inf  # u_y > 0
    assert loss.conjugate(np.array([-1.2, 0.6, 0.6, 0, 0]), 0) == np.inf  # mass > 1
    assert loss.conjugate(np.array([-0.5, 0.6, 0.0, 0, 0]), 0) == np.inf  # sum != 0
    # Dual term = -c phi*(-alpha / c).
    a = np.array([0.6, -0.2, -0.4, 0, 0])
    assert loss.dual_term(a, 0, 2.0) == pytest.approx(-2.0 * loss.conjugate(-a / 2.0, 0))
    assert loss.dual_term(a, 0, 0.0) == -np.inf and loss.dual_term(0 * a, 0, 0.0) == 0.0
    if gamma > 0:
        # Gradient = finite differences (the loss is smooth).
        h = 1e-6
        for i in range(10):
            fd = [(loss.value(Z[i] + h * e, y[i]) - loss.value(Z[i] - h * e, y[i])) / (2 * h)
                  for e in np.eye(k)]
            np.testing.assert_allclose(G[i], fd, atol=1e-6)
        # Smoothing (Sec. 3.3): phi_0 - gamma/2 <= phi_gamma <= phi_0.
        v0 = make_multiclass_loss(0.0).value(Z, y)
        assert np.all(val <= v0 + 1e-14) and np.all(val >= v0 - gamma / 2 - 1e-14)
        assert loss.smoothness_for(k) == k / gamma


def test_ovr_labels_and_class_indices():
    y = np.array(["cat", "dog", "cat", "emu"])
    classes = np.array(["cat", "dog", "emu"])
    np.testing.assert_array_equal(ovr_labels(y, classes, 0), [1.0, -1.0, 1.0, -1.0])
    np.testing.assert_array_equal(ovr_labels(y, classes, 2), [-1.0, -1.0, -1.0, 1.0])
    assert ovr_labels(y, classes, 1).dtype == np.float64
    with pytest.raises(ValueError):
        ovr_labels(y, classes, 3)
    np.testing.assert_array_equal(class_indices(y, classes), [0, 1, 0, 2])
    np.testing.assert_array_equal(class_indices([3, 1, 7], [7, 3, 1]), [1, 2, 0])  # unsorted
    with pytest.raises(ValueError, match="not in the class list"):
        class_indices(["cat", "yak"], classes)
    with pytest.raises(ValueError):
        make_multiclass_loss(-1.0)


# ---------------------------------------------------------------------------- data


def _problem(n, d, k, dtype, itype, sparse, seed, weights=True):
    rng = np.random.default_rng(seed)
    y = rng.integers(k, size=n)
    centers = rng.normal(size=(k, d))
    X = centers[y] * 0.7 + rng.normal(size=(n, d))
    if sparse:
        X *= rng.random((n, d)) < 0.4
    X[3] = 0.0  # an empty row
    X /= np.sqrt(d) / 2
    if sparse:
        Xs = sp.csr_matrix(X)
    else:
        # Dense data through the same CSR path: every entry stored (zeros too).
        rows, cols = np.nonzero(np.ones_like(X))
        Xs = sp.csr_matrix((X[rows, cols], (rows, cols)), shape=X.shape)
    Xs.sort_indices()
    Xs.data = Xs.data.astype(dtype)
    Xs.indices = Xs.indices.astype(itype)
    Xs.indptr = Xs.indptr.astype(np.int64)
    c = rng.uniform(0.5, 2.0, size=n) if weights else np.ones(n)
    if weights:
        c[[5, 17]] = 0.0
    return Xs, y.astype(np.int64), c


def _blocks(X, bounds):
    return [(lo, hi, X[lo:hi].indptr.astype(np.int64), X[lo:hi].indices, X[lo:hi].data)
            for lo, hi in bounds]


# ---------------------------------------------------------------------------- parity


PARITY = [(np.float64, np.int32), (np.float32, np.int64)]


@pytest.mark.parametrize("bias", [0.0, 1.3], ids=["nobias", "bias"])
@pytest.mark.parametrize("l1", [0.0, 0.01], ids=["l2", "enet"])
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("dtype,itype", PARITY, ids=["f64-i32", "f32-i64"])
def test_pass_matches_reference(dtype, itype, gamma, l1, bias):
    n, d, k, l2 = 60, 9, 4, 0.05
    X, y, c = _problem(n, d, k, dtype, itype, True, seed=2)
    loss = make_multiclass_loss(gamma)
    dd = d + (bias > 0)
    rng = np.random.default_rng(11)
    blocks = _blocks(X, [(0, 25), (25, n)])
    alpha = np.zeros((n, k))
    V = np.zeros((dd, k))
    W = np.zeros((dd, k))
    alpha_r, V_r, W_r = alpha.copy(), V.copy(), W.copy()
    for epoch in range(4):
        for b in rng.permutation(len(blocks)):
            lo, hi, indptr, indices, data = blocks[b]
            if epoch == 3:
                local = rng.integers(0, hi - lo, size=2 * (hi - lo))  # repeats and gaps
            else:
                local = rng.permutation(hi - lo)
            order = local.astype(np.int64)
            a_blk = alpha[lo:hi]
            before = a_blk.copy()
            args = (loss, Rows(indptr, indices, data), Labels(y[lo:hi], c[lo:hi]), a_blk, order, V, W,
                    Reg(l2, l1, float(n), bias))
            if epoch % 2 == 0:
                s = cs_sdca_pass(*args)
            else:
                s, psum, dsum = cs_sdca_pass_gap(*args)
                # The fused sums: stale primal at the pre-step scores, exact dual after.
                if epoch < 3:
                    assert dsum == pytest.approx(
                        rmc.dual_terms(a_blk, y[lo:hi], c[lo:hi], gamma).sum(), rel=1e-12)
            rmc.cs_sdca_pass(X, y, c, alpha_r, lo + local, V_r, W_r, l2, l1, float(n), gamma,
                             bias)
            np.testing.assert_allclose(alpha, alpha_r, rtol=1e-12, atol=1e-14)
            scale = np.abs(V_r).max()
            np.testing.assert_allclose(V, V_r, rtol=1e-12, atol=1e-13 * scale)
            np.testing.assert_allclose(W, W_r, rtol=1e-12, atol=1e-13 * scale)
            if epoch < 3:
                assert s == pytest.approx(np.sum((a_blk - before) ** 2), rel=1e-10, abs=1e-300)
    assert np.abs(alpha).max() > 0
    np.testing.assert_allclose(alpha.sum(axis=1), 0.0, atol=1e-14)
    assert np.all(alpha[[5, 17]] == 0.0)  # weightless rows
    if l1 > 0:
        assert np.any(W[:d] == 0) and np.any(W[:d] != 0)
    # V rebuilt from the duals, W = grad g*(V), block sums = dense numpy.
    V_re = np.zeros_like(V)
    for lo, hi, indptr, indices, data in blocks:
        cs_block_accumulate_v(indptr, indices, data, alpha[lo:hi], V_re, 1.0 / (l2 * n), bias)
    np.testing.assert_allclose(V_re, V, rtol=1e-10, atol=1e-12 * np.abs(V).max())
    np.testing.assert_array_equal(cs_grad_conj(ElasticNet(l2, l1), V, bias), W)
    Xa = ref.augment(X, bias)
    val, _ = rmc.cs_value_grad(Xa @ W, y, gamma)
    got_p = sum(cs_block_primal_loss(loss, ip, ix, dt, y[lo:hi], c[lo:hi], W, bias)
                for lo, hi, ip, ix, dt in blocks)
    assert got_p == pytest.approx(np.sum(c * val), rel=1e-12)
    got_d = sum(cs_block_dual_loss(loss, y[lo:hi], c[lo:hi], alpha[lo:hi])
                for lo, hi, *_ in blocks)
    assert got_d == pytest.approx(rmc.dual_terms(alpha, y, c, gamma).sum(), rel=1e-12)


# ---------------------------------------------------------------------------- optimality

OPT_CASES = [
    # sparse, dtype, k, gamma, l1, bias, weights
    (False, np.float64, 3, 0.5, 0.0, 0.0, False),
    (True, np.float32, 4, 0.5, 2e-3, 1.0, True),
    (True, np.float64, 4, 0.5, 0.0, 0.0, True),
    (True, np.float64, 3, 0.0, 0.0, 1.0, False),
    (False, np.float32, 4, 0.0, 2e-3, 0.0, True),
    (False, np.float64, 3, 0.0, 0.0, 0.0, True),
]


def _solve_sdca(X, y, c, k, loss, l2, l1, bias, tol, max_epochs=20000, seed=0):
    n, d = X.shape
    dd = d + (bias > 0)
    indptr, indices, data = X.indptr.astype(np.int64), X.indices, X.data
    alpha = np.zeros((n, k))
    V = np.zeros((dd, k))
    W = np.zeros((dd, k))
    rng = np.random.default_rng(seed)
    pen = ElasticNet(l2, l1)
    block = [(indptr, indices, data, y, c, alpha)]
    for epoch in range(max_epochs):
        cs_sdca_pass(loss, Rows(indptr, indices, data), Labels(y, c), alpha, rng.permutation(n), V, W,
                     Reg(l2, l1, float(n), bias))
        if epoch % 10 == 9:
            res = cs_duality_gap(block, None, V, loss, pen, n, bias)
            if res.gap <= tol:
                return W, alpha, res, epoch + 1
    raise AssertionError(f"no convergence: gap {res.gap}")


@pytest.mark.parametrize(
    "sparse,dtype,k,gamma,l1,bias,weights", OPT_CASES,
    ids=[f"{'sp' if s else 'dense'}-{dt.__name__}-k{k}-g{g}-l1{l1}-b{b}-{'w' if w else 'u'}"
         for s, dt, k, g, l1, b, w in OPT_CASES],
)
def test_optimum_matches_scipy(sparse, dtype, k, gamma, l1, bias, weights):
    n, d, l2 = 150, 10, 0.01
    X, y, c = _problem(n, d, k, dtype, np.int32, sparse, seed=5 + k, weights=weights)
    loss = make_multiclass_loss(gamma)
    W, alpha, res, epochs = _solve_sdca(X, y, c, k, loss, l2, l1, bias, tol=1e-10)
    assert 0 <= res.gap <= 1e-10
    # The engine's numbers agree with dense numpy on the same iterate.
    p_ref = rmc.primal_objective(X, y, c, W, l2, l1, gamma, bias)
    assert res.primal == pytest.approx(p_ref, rel=1e-12)
    assert res.dual == pytest.approx(rmc.dual_objective(X, y, c, alpha, l2, l1, gamma, bias),
                                     rel=1e-11)
    # An independent solver on the primal.
    if gamma > 0:
        W_ref = rmc.solve_primal_smooth(X, y, c, l2, l1, gamma, k, bias)
    else:
        # Working set: the margin constraints within 0.3 of active at the SDCA optimum.
        # The relaxed problem's optimum is the full one iff it violates none of the
        # others, checked below by P(W_ref) = relaxed objective.
        pairs = rmc.margins(ref.augment(X, bias) @ W, y) > -0.3
        W_ref, relaxed, _ = rmc.solve_primal_hinge(X, y, c, l2, l1, k, bias, pairs=pairs)
        p_full = rmc.primal_objective(X, y, c, W_ref, l2, l1, gamma, bias)
        assert p_full == pytest.approx(relaxed, rel=1e-9)
    p_scipy = rmc.primal_objective(X, y, c, W_ref, l2, l1, gamma, bias)
    assert abs(p_scipy - res.primal) <= 1e-6 * abs(res.primal)
    assert p_scipy >= res.dual - 1e-12  # the dual bound holds for any W
    # Strongly convex primal: close objectives mean close minimisers.
    assert np.abs(W - W_ref).max() <= 1e-3 * max(1.0, np.abs(W).max())


def test_loss_is_a_namedtuple_for_numba_and_pickle():
    import pickle

    loss = MulticlassHinge(0.25)
    assert pickle.loads(pickle.dumps(loss)) == loss
    assert loss.name == "crammer-singer" and loss.is_classification
