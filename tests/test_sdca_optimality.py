"""Prox-SDCA run to a certified optimum agrees with scikit-learn / scipy.

Epochs of ``sdca_pass`` over several row blocks (seeded shuffled block order, a permutation
inside each block) until ``gap <= tol * max(1, |P|)``. Every epoch: ``P >= D`` and the dual
never decreases. At the end: the certificate ``P(w) - P* <= gap`` and the optimum (objective
and coefficients) matches an independent solver to 1e-6 relative.
"""

import warnings

import numpy as np
import pytest
import reference as ref
import scipy.sparse as sp
from reference_gap import dual, duality_gap, gap_from_sums, primal
from scipy.optimize import minimize
from sklearn.linear_model import ElasticNet as SkElasticNet
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.svm import LinearSVC

from ooc.kernels.args import Labels, Reg, Rows
from ooc.kernels.sdca import block_dual_loss, sdca_pass, sdca_pass_gap
from ooc.objectives import (
    ElasticNet,
    Hinge,
    Logistic,
    SmoothHinge,
    Squared,
)

N, D = 200, 30
L2 = 1e-2  # LIBLINEAR/scikit-learn C = 1 / (l2 n) = 0.5
# Far below the required 1e-10: the gap bounds P(w) - P* >= l2/2 ||w - w*||^2, so a relative
# gap of 1e-12 still allows ~1e-5 in w (seen on the intercept); 1e-14 is ~50x above the
# rounding floor of P - D here and puts w within ~1e-8 of the optimum.
TOL = 1e-14
BLOCKS = [(0, 70), (70, 130), (130, N)]


def _data(kind, dtype, loss, seed, weights=False):
    rng = np.random.default_rng(seed)
    if kind == "dense":
        A = rng.normal(size=(N, D))
    else:
        A = sp.random(N, D, density=0.1, random_state=seed, format="csr").toarray()
        A[A != 0] = rng.normal(size=np.count_nonzero(A)) * 2.0
    A = A.astype(dtype).astype(np.float64)  # the values the solver sees
    w_true = rng.normal(size=D)
    if loss.is_classification:
        y = np.where(A @ w_true + 0.5 * rng.normal(size=N) >= 0, 1.0, -1.0)
    else:
        y = A @ w_true + 0.5 * rng.normal(size=N)
    c = np.ones(N)
    if weights:
        c = rng.uniform(0.2, 3.0, size=N)
        c[rng.choice(N, 5, replace=False)] = 0.0
    X = sp.csr_matrix(A)  # "dense": normal entries are never 0, so every entry is stored
    X.data = X.data.astype(dtype)
    # Index dtypes already compiled by the parity tests, to share specializations.
    X.indices = X.indices.astype(np.int32 if dtype == np.float64 else np.int64)
    X.indptr = X.indptr.astype(np.int64)
    return X, A, y, c


def _blocks(X, y, c, alpha):
    for lo, hi in BLOCKS:
        sub = X[lo:hi]
        yield sub.indptr.astype(np.int64), sub.indices, sub.data, y[lo:hi], c[lo:hi], alpha[lo:hi]


def _solve(loss, X, y, c, l2, l1, bias, tol=TOL, max_epochs=3000, seed=0):
    rng = np.random.default_rng(seed)
    pen = ElasticNet(l2, l1)
    dd = D + (1 if bias > 0 else 0)
    alpha, v, w = np.zeros(N), np.zeros(dd), np.zeros(dd)
    blocks = list(_blocks(X, y, c, alpha))
    last_dual = -np.inf
    prev = None
    for epoch in range(1, max_epochs + 1):
        fused = epoch % 2 == 0
        psum = dsum = 0.0
        w_snap, v_snap = w.copy(), v.copy()
        for b in rng.permutation(len(blocks)):
            indptr, indices, data, yb, cb, ab = blocks[b]
            order = rng.permutation(len(yb)).astype(np.int64)
            args = (loss, Rows(indptr, indices, data), Labels(yb, cb), ab, order, v, w, Reg(l2, l1, float(N), bias))
            if fused:
                dsum += block_dual_loss(loss, yb, cb, ab)  # before the block's update
                psum += sdca_pass_gap(*args, w_snap)[1]
            else:
                sdca_pass(*args)
        if fused:
            # The fused sums are the exact objectives of the state the epoch started from.
            start = gap_from_sums(psum, dsum, w_snap, v_snap, pen, N, bias)
            assert start.primal == pytest.approx(prev.primal, rel=1e-12, abs=1e-14)
            assert start.dual == pytest.approx(prev.dual, rel=1e-12, abs=1e-14)
        res = duality_gap(blocks, None, v, loss, pen, N, bias)
        scale = max(1.0, abs(res.primal))
        assert res.primal >= res.dual - 1e-13 * scale, (epoch, res)
        assert res.dual >= last_dual - 1e-13 * scale, "the dual decreased"
        last_dual = res.dual
        prev = res
        if res.converged(tol):
            return w.copy(), alpha, res, epoch
    raise AssertionError(f"no convergence in {max_epochs} epochs: {res}")


def _lbfgs_reference(loss, A, y, c, l2, l1, bias):
    """Minimise P with L-BFGS-B on w = w+ - w- (w+, w- >= 0); the intercept is free."""
    Xa = ref.augment(A, bias)
    nf = A.shape[1]
    m = Xa.shape[1]

    def unpack(x):
        w = np.empty(m)
        w[:nf] = x[:nf] - x[nf : 2 * nf]
        w[nf:] = x[2 * nf :]
        return w

    def fun(x):
        w = unpack(x)
        z = Xa @ w
        f = np.sum(c * ref.phi(loss, z, y)) / N + 0.5 * l2 * w @ w + l1 * x[: 2 * nf].sum()
        gw = Xa.T @ (c * loss.deriv(z, y)) / N + l2 * w
        g = np.concatenate([gw[:nf] + l1, -gw[:nf] + l1, gw[nf:]])
        return f, g

    x0 = np.zeros(2 * nf + (m - nf))
    bounds = [(0, None)] * (2 * nf) + [(None, None)] * (m - nf)
    res = minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=bounds,
                   options=dict(maxiter=100000, maxfun=200000, maxcor=50, ftol=1e-16, gtol=1e-13))
    w = unpack(res.x)
    # L-BFGS-B stops around 1e-7 in w; polish with Newton on the support it found (the
    # problem is smooth there), then check that the zeros satisfy their KKT condition.
    support = np.abs(w) > 1e-8
    support[nf:] = True
    sign = np.sign(w) * (np.arange(m) < nf)
    for _ in range(50):
        z = Xa @ w
        grad = Xa.T @ (c * loss.deriv(z, y)) / N + l2 * w
        g = grad[support] + l1 * sign[support]
        XS = Xa[:, support]
        H = XS.T @ (XS * (c * _phi2(loss, z, y))[:, None]) / N + l2 * np.eye(XS.shape[1])
        step = np.linalg.solve(H, g)
        w[support] -= step
        if np.abs(step).max() <= 1e-15 * max(1.0, np.abs(w).max()):
            break
    grad = Xa.T @ (c * loss.deriv(Xa @ w, y)) / N + l2 * w
    assert np.all(np.sign(w[support][: support[:nf].sum()]) == sign[support][: support[:nf].sum()])
    assert np.all(np.abs(grad[:nf][~support[:nf]]) <= l1 * (1 + 1e-9)), "support misidentified"
    return w


def _phi2(loss, z, y):
    """Second derivative of phi in z (generalized for the smooth hinge's kinks)."""
    m = y * z
    if loss.name == "logistic":
        s = 1.0 / (1.0 + np.exp(-m))
        return s * (1.0 - s)
    if loss.name == "smooth-hinge":
        return np.where((m > 1.0 - loss.gamma) & (m < 1.0), 1.0 / loss.gamma, 0.0)
    return np.ones_like(z)


def _reference(name, loss, A, y, c, l2, l1, bias):
    Xa = ref.augment(A, bias)
    C = 1.0 / (l2 * N)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "sklearn-logistic":
            m = LogisticRegression(C=C, fit_intercept=False, tol=1e-12, max_iter=100000)
            return m.fit(Xa, y, sample_weight=c).coef_.ravel()
        if name == "sklearn-svc":
            # Tighter tolerances make liblinear run out of iterations and end further away.
            m = LinearSVC(loss="hinge", dual=True, C=C, fit_intercept=False, tol=1e-8,
                          max_iter=10**5)
            return m.fit(Xa, y, sample_weight=c).coef_.ravel()
        if name == "sklearn-ridge":
            m = Ridge(alpha=l2 * N, fit_intercept=False, solver="cholesky")
            return m.fit(Xa, y, sample_weight=c).coef_.ravel()
        if name == "sklearn-enet":
            m = SkElasticNet(alpha=l1 + l2, l1_ratio=l1 / (l1 + l2), fit_intercept=False,
                             tol=1e-14, max_iter=10**6)
            return m.fit(Xa, y, sample_weight=c).coef_.ravel()
        if name == "lbfgs":
            return _lbfgs_reference(loss, A, y, c, l2, l1, bias)
    raise ValueError(name)


# (id, loss, l1, bias, data kind, dtype, weighted, reference)
CASES = [
    ("ridge", Squared(), 0.0, 0.0, "dense", np.float64, False, "sklearn-ridge"),
    ("ridge-weighted-bias", Squared(), 0.0, 1.5, "sparse", np.float64, True, "sklearn-ridge"),
    ("enet-squared", Squared(), 2e-2, 0.0, "sparse", np.float32, False, "sklearn-enet"),
    ("enet-squared-dense", Squared(), 5e-2, 0.0, "dense", np.float64, False, "sklearn-enet"),
    ("logistic", Logistic(), 0.0, 0.0, "sparse", np.float64, False, "sklearn-logistic"),
    ("logistic-weighted", Logistic(), 0.0, 0.0, "dense", np.float32, True, "sklearn-logistic"),
    ("logistic-bias", Logistic(), 0.0, 1.5, "sparse", np.float64, False, "sklearn-logistic"),
    ("enet-logistic", Logistic(), 1e-2, 0.0, "dense", np.float64, False, "lbfgs"),
    ("enet-logistic-bias", Logistic(), 1e-2, 1.0, "sparse", np.float32, False, "lbfgs"),
    ("smooth-hinge", SmoothHinge(0.5), 0.0, 0.0, "sparse", np.float64, False, "lbfgs"),
    ("enet-smooth-hinge", SmoothHinge(1.0), 1e-2, 0.0, "dense", np.float32, False, "lbfgs"),
    ("hinge", Hinge(), 0.0, 0.0, "dense", np.float64, False, "sklearn-svc"),
    ("hinge-sparse", Hinge(), 0.0, 0.0, "sparse", np.float32, False, "sklearn-svc"),
    ("hinge-bias", Hinge(), 0.0, 1.0, "dense", np.float64, False, "sklearn-svc"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_optimum_matches_reference(case):
    name, loss, l1, bias, kind, dtype, weighted, reference = case
    X, A, y, c = _data(kind, dtype, loss, seed=len(name), weights=weighted)
    w, alpha, res, epochs = _solve(loss, X, y, c, L2, l1, bias)
    assert res.gap <= 1e-10 * max(1.0, abs(res.primal))

    w_ref = _reference(reference, loss, A, y, c, L2, l1, bias)
    p_ref = ref.primal_objective(loss, A, y, c, w_ref, L2, l1, bias)
    p = ref.primal_objective(loss, A, y, c, w, L2, l1, bias)
    # Gap certificate: P(w) - P* <= gap, and P* <= P(w_ref).
    assert p - p_ref <= res.gap + 1e-14 * abs(p_ref)
    assert p == pytest.approx(p_ref, rel=1e-6)
    scale = np.abs(w_ref).max()
    np.testing.assert_allclose(w, w_ref, rtol=1e-6, atol=1e-6 * scale)
    if l1 > 0:
        assert np.sum(w[:D] == 0) > 0  # exact zeros, not merely small

    # The streamed objectives equal the independent dense numpy ones.
    blocks = list(_blocks(X, y, c, alpha))
    pen = ElasticNet(L2, l1)
    assert res.primal == pytest.approx(p, rel=1e-12)
    assert primal(blocks, w, loss, pen, N, bias) == pytest.approx(p, rel=1e-12)
    d_ref = ref.dual_objective(loss, A, y, c, alpha, L2, l1, bias)
    assert res.dual == pytest.approx(d_ref, rel=1e-10)
    v = ref.augment(X, bias).T @ alpha / (L2 * N)
    assert dual(iter(blocks), v, loss, pen, N, bias) == pytest.approx(d_ref, rel=1e-10)


def test_gap_requires_l2():
    X, A, y, c = _data("sparse", np.float64, Logistic(), seed=0)
    alpha = np.zeros(N)
    with pytest.raises(ValueError, match="l2 > 0"):
        duality_gap(_blocks(X, y, c, alpha), None, np.zeros(D), Logistic(), ElasticNet(0.0, 0.1), N)
    # The primal alone is fine with pure L1.
    assert primal(_blocks(X, y, c, alpha), np.zeros(D), Logistic(), ElasticNet(0.0, 0.1), N) == \
        pytest.approx(np.log(2.0))
