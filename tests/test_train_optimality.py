"""``ooc.train`` reaches the certified optimum of the objective (docs/training.rst), for every loss x penalty.

    P(w) = 1/n sum_i c_i phi(x_i . w, y_i) + l2/2 ||w||^2 + l1 ||w||_1

For every loss (logistic, squared on regression labels, smooth hinge, hinge) x penalty (l1 = 0,
l1 > 0) x {dense-ish, sparse} x {float32, float64} store, the run's certificate is checked
against an independent reference: scikit-learn (LogisticRegression, LinearSVC, Ridge,
ElasticNet with C = 1/(l2 n)) where it solves the same objective, else scipy.optimize on the
same objective (L-BFGS-B on the split variables w = p - q for the L1 term, or on the box
constrained dual for the hinge with L1). What is asserted, for each case:

* the run converged and its reported gap is <= tol * max(1, |P|), and P >= D;
* the reported primal is the primal of the saved coefficients (recomputed here in numpy);
* the true suboptimality is below the reported gap: ``P(w) - P_ref <= gap`` (P_ref >= P*,
  so this holds whenever the certificate is right, whatever the reference's accuracy), and
  ``D <= P_ref`` (weak duality);
* the objective matches the reference to 1e-6 relative;
* the coefficients are within what strong convexity allows:
  ``||w - w*||^2 <= 2 gap / l2`` and ``||w_ref - w*||^2 <= 2 (P_ref - D) / l2``.

Problems are small (n = 300, d = 30) and the stores are built once per module. Numba
compiles one specialization per (loss, data dtype): 4 x 2 here, reused by the bias and
class-weight tests. The convergence plot (tested in test_cli.py) is switched off here: it
costs more than these trainings.
"""

from __future__ import annotations

import importlib
import os
import pathlib
import shutil
import tempfile
import uuid
import warnings

import numpy as np
import pytest
import scipy.optimize as so
import scipy.sparse as sp

import ooc

N, D = 300, 30
L2 = 3e-2
L1 = 2e-2
GAMMA = 1.0
#: relative-gap tolerance asked of ooc; the hinge (non-smooth) converges sublinearly, so it
#: is asked less, still far below the 1e-6 the objective comparison needs
TOL = {"logistic": 1e-9, "squared": 1e-9, "smooth-hinge": 1e-9, "hinge": 1e-7}
LOSSES = ("logistic", "squared", "smooth-hinge", "hinge")


# ---------------------------------------------------------------------------------------------
# the objective, written here once more in numpy (independent of ooc.objectives)
# ---------------------------------------------------------------------------------------------
def loss_value(name, z, y, gamma=GAMMA):
    if name == "logistic":
        return np.logaddexp(0.0, -y * z)
    if name == "squared":
        return 0.5 * (z - y) ** 2
    m = y * z
    if name == "hinge":
        return np.maximum(0.0, 1.0 - m)
    return np.where(m >= 1, 0.0, np.where(m <= 1 - gamma, 1 - m - gamma / 2, (1 - m) ** 2 / (2 * gamma)))


def loss_deriv(name, z, y, gamma=GAMMA):
    if name == "logistic":
        return -y * 0.5 * (1.0 - np.tanh(0.5 * y * z))  # -y sigmoid(-y z), overflow-free
    if name == "squared":
        return z - y
    m = y * z
    return np.where(m >= 1, 0.0, np.where(m <= 1 - gamma, -y, -y * (1 - m) / gamma))


def primal(name, X, y, w, l2, l1, c=None, n_l1=None):
    """P(w); the L1 term covers the first ``n_l1`` coordinates (all but a bias column)."""
    c = np.ones(len(y)) if c is None else c
    n_l1 = len(w) if n_l1 is None else n_l1
    return float(np.mean(c * loss_value(name, X @ w, y)) + 0.5 * l2 * w @ w + l1 * np.abs(w[:n_l1]).sum())


# ---------------------------------------------------------------------------------------------
# references
# ---------------------------------------------------------------------------------------------
def ref_scipy_primal(name, X, y, l2, l1, c=None, n_l1=None):
    """L-BFGS-B on the smooth reformulation w = p - q (p, q >= 0) of a smooth-loss objective."""
    n, d = X.shape
    c = np.ones(n) if c is None else c
    k = d if n_l1 is None else n_l1

    def f(u):
        w = np.concatenate([u[:k] - u[k:2 * k], u[2 * k:]])
        z = X @ w
        g = X.T @ (c * loss_deriv(name, z, y)) / n + l2 * w
        val = np.mean(c * loss_value(name, z, y)) + 0.5 * l2 * w @ w + l1 * u[:2 * k].sum()
        return val, np.concatenate([g[:k] + l1, -g[:k] + l1, g[k:]])

    bounds = [(0, None)] * (2 * k) + [(None, None)] * (d - k)
    r = so.minimize(f, np.zeros(2 * k + d - k), jac=True, method="L-BFGS-B", bounds=bounds,
                    options=dict(maxiter=50000, maxfun=50000, ftol=1e-16, gtol=1e-13, maxcor=30))
    u = r.x
    return np.concatenate([u[:k] - u[k:2 * k], u[2 * k:]])


def ref_hinge_dual(X, y, l2, l1):
    """The hinge with an elastic net through its box-constrained dual (smooth, concave):
    ``max_{s in [0,1]^n} 1/n sum s_i - l2/2 ||soft(v, l1/l2)||^2``, ``v = 1/(l2 n) sum s_i y_i x_i``."""
    n = X.shape[0]

    def soft(v):
        return np.sign(v) * np.maximum(np.abs(v) - l1 / l2, 0.0)

    def neg_dual(s):
        w = soft(X.T @ (s * y) / (l2 * n))
        return -(s.sum() / n - 0.5 * l2 * w @ w), -(1.0 - y * (X @ w)) / n

    r = so.minimize(neg_dual, np.zeros(n), jac=True, method="L-BFGS-B", bounds=[(0.0, 1.0)] * n,
                    options=dict(maxiter=50000, maxfun=50000, ftol=1e-16, gtol=1e-14))
    return soft(X.T @ (r.x * y) / (l2 * n))


def references(name, X, y, l2, l1):
    """Candidate reference solutions (scikit-learn where it solves this objective, scipy always)."""
    from sklearn.linear_model import ElasticNet, LogisticRegression, Ridge
    from sklearn.svm import LinearSVC

    n = X.shape[0]
    C = 1.0 / (l2 * n)  # LIBLINEAR's C for this l2
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn ConvergenceWarnings at these tolerances
        if name == "logistic" and l1 == 0:
            m = LogisticRegression(C=C, fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, y)
            out.append(m.coef_.ravel())
        elif name == "squared" and l1 == 0:
            # ||Xw - y||^2 + alpha ||w||^2 = 2n P(w)
            out.append(Ridge(alpha=l2 * n, fit_intercept=False, solver="cholesky").fit(X, y).coef_)
        elif name == "squared":
            # 1/(2n)||y - Xw||^2 + a r ||w||_1 + a (1 - r)/2 ||w||^2 with a r = l1, a (1 - r) = l2
            m = ElasticNet(alpha=l1 + l2, l1_ratio=l1 / (l1 + l2), fit_intercept=False, tol=1e-14,
                           max_iter=200000).fit(X.toarray() if sp.issparse(X) else X, y)
            out.append(m.coef_)
        elif name == "hinge" and l1 == 0:
            # (LIBLINEAR's dual CD: a tighter tol than 1e-9 makes it slower, not better)
            m = LinearSVC(loss="hinge", C=C, dual=True, fit_intercept=False, tol=1e-9, max_iter=1000000).fit(X, y)
            out.append(m.coef_.ravel())
        elif name == "hinge":
            out.append(ref_hinge_dual(X, y, l2, l1))
        else:
            out.append(ref_scipy_primal(name, X, y, l2, l1))
    return out


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------
def make_data(density, dtype, seed, n=N, d=D):
    """X (as stored: values rounded to ``dtype``, then float64), binary and regression labels."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, random_state=seed, format="csr",
                  data_rvs=rng.standard_normal).astype(dtype)
    X64 = X.astype(np.float64)
    w_true = rng.standard_normal(d)
    m = X64 @ w_true
    y_bin = np.where(m + 0.5 * rng.standard_normal(n) > 0, 1.0, -1.0)
    y_reg = m + 0.3 * rng.standard_normal(n)
    return X, X64, y_bin, y_reg


def _name(tag):
    return f"memory://opt-{tag}-{uuid.uuid4().hex[:8]}"


def _block_bytes(X):
    """About three row blocks: the fused gap is summed over several blocks."""
    entry = X.dtype.itemsize + 4
    return max(1024, X.nnz * entry // 3)


@pytest.fixture(scope="module")
def no_plot():
    """The convergence plot costs more than these trainings; test_cli.py checks it exists."""
    mod = importlib.import_module("ooc.train")  # (the attribute ooc.train is the function)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mod, "plot_convergence", lambda rd: None)
        yield


@pytest.fixture(scope="module")
def stores(no_plot):
    """(density kind, dtype) -> dict(X=float64 matrix as stored, y_bin, y_reg, binary store, regression store)."""
    out = {}
    for kind, density in (("dense", 0.8), ("sparse", 0.1)):
        for dtype in (np.float32, np.float64):
            seed = (1 if kind == "dense" else 2) * 10 + (dtype == np.float32)
            X, X64, yb, yr = make_data(density, dtype, seed)
            bb = _block_bytes(X)
            dt = np.dtype(dtype).name
            out[kind, dt] = dict(
                X=X64, y_bin=yb, y_reg=yr,
                binary=ooc.convert(X, _name(f"{kind}-{dt}-bin"), y=yb, dtype=dt, block_bytes=bb),
                regression=ooc.convert(X, _name(f"{kind}-{dt}-reg"), y=yr, dtype=dt, block_bytes=bb,
                                       label_kind="regression"),
            )
    return out


@pytest.fixture
def tmp_path(tmp_path):
    """Run directories in memory (/dev/shm) when there is one: a checkpoint per epoch is fsynced,
    and fsync on a busy disk costs more than these epochs."""
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    d = tempfile.mkdtemp(prefix="ooc-test-opt-", dir="/dev/shm")
    try:
        yield pathlib.Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _train(store, tmp_path, **opts):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ooc.ConvergenceWarning)
        return ooc.train(store, out=str(tmp_path / f"run-{uuid.uuid4().hex[:6]}"), **opts)


def check_certificate(res, tol):
    P, Dv, gap = res["primal"], res["dual"], res["gap"]
    assert res["converged"] is True
    assert gap <= tol * max(1.0, abs(P)), res
    assert P >= Dv, res
    assert gap == pytest.approx(P - Dv, rel=1e-12, abs=1e-15)


def check_against(name, X, y, w, res, refs, l2, l1, c=None, n_l1=None):
    """The assertions of the module docstring, for coefficients ``w`` and result ``res``."""
    P_w = primal(name, X, y, w, l2, l1, c, n_l1)
    # the reported primal is the objective of the saved coefficients
    assert res["primal"] == pytest.approx(P_w, rel=1e-11, abs=1e-13)
    cands = [(primal(name, X, y, r, l2, l1, c, n_l1), r) for r in refs]
    P_ref, w_ref = min(cands, key=lambda t: t[0])
    gap, Dv = res["gap"], res["dual"]
    eps = 1e-12 * max(1.0, abs(P_ref))  # rounding of the two numpy/numba evaluations
    assert P_w - P_ref <= gap + eps, f"true suboptimality {P_w - P_ref:.3e} > certified gap {gap:.3e}"
    assert Dv <= P_ref + eps, f"D = {Dv!r} > P(w_ref) = {P_ref!r}: weak duality violated"
    assert abs(P_w - P_ref) <= 1e-6 * max(1.0, abs(P_ref)), (P_w, P_ref)
    bound = np.sqrt(2 * gap / l2) + np.sqrt(2 * max(P_ref - Dv, 0.0) / l2) + 1e-9
    assert np.linalg.norm(w - w_ref) <= bound, (np.linalg.norm(w - w_ref), bound)
    return P_ref, w_ref


@pytest.mark.parametrize("threads", [1, 3], ids=["1thread", "3threads"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("l1", [0.0, L1], ids=["l2", "elastic"])
@pytest.mark.parametrize("loss", LOSSES)
def test_optimum_matches_reference(stores, tmp_path, loss, l1, kind, dtype, threads, monkeypatch):
    """``threads=3``: one problem's rows over three threads (CoCoA+ mini-batches), another trajectory
    to the same optimum (where :func:`ooc.solvers.row_threads.rows_split_pays` lets them: these stores
    have hundreds of rows, split all the same)."""
    monkeypatch.setattr("ooc.solvers.row_threads.MIN_ROWS_PER_THREAD", 1)
    s = stores[kind, dtype]
    X = s["X"]
    y = s["y_reg"] if loss == "squared" else s["y_bin"]
    st = s["regression"] if loss == "squared" else s["binary"]
    run = _train(st, tmp_path, loss=loss, l2=L2, l1=l1, gamma=GAMMA, tol=TOL[loss], max_epochs=3000, threads=threads)
    res = run.result
    check_certificate(res, TOL[loss])
    model = ooc.load_model(run.path)
    w = model.coef_
    assert w.shape == (D,)
    assert model.intercept_ == 0.0
    assert res["nnz_w"] == np.count_nonzero(w)
    check_against(loss, X, y, w, res, references(loss, X, y, L2, l1), L2, l1)
    if l1 > 0 and kind == "dense":
        # the L1 term is doing something (soft-thresholded coordinates are exact zeros)
        assert np.count_nonzero(w) < D
    # the history's last line is the returned state
    h = run.history[-1]
    assert (h["primal"], h["dual"], h["gap"]) == (res["primal"], res["dual"], res["gap"])


@pytest.mark.parametrize("loss,l1,bias", [("logistic", 0.0, 1.0), ("squared", L1, 2.0), ("hinge", 0.0, 0.5)])
def test_bias_is_a_regularized_constant_feature(stores, tmp_path, loss, l1, bias, monkeypatch):
    """``bias=B``: the reference is the same problem with a column of value B appended, its weight
    regularized by l2 (LIBLINEAR's -B) but not by l1; ``intercept_ = B * w_B``."""
    monkeypatch.setattr("ooc.solvers.row_threads.MIN_ROWS_PER_THREAD", 1)  # hundreds of rows, split all the same
    s = stores["sparse", "float64"]
    X = s["X"]
    y = s["y_reg"] if loss == "squared" else s["y_bin"] + 0.0
    if loss == "squared":
        y = y + 3.0  # an offset the intercept has to absorb
    st = ooc.convert(X, _name("bias"), y=y, dtype="float64", block_bytes=_block_bytes(X),
                     label_kind="regression" if loss == "squared" else "auto")
    run = _train(st, tmp_path, loss=loss, l2=L2, l1=l1, bias=bias, tol=TOL[loss], max_epochs=3000, threads=3)
    res = run.result
    check_certificate(res, TOL[loss])
    m = ooc.load_model(run.path)
    w = np.concatenate([m.coef_, [m.intercept_ / bias]])
    Xb = sp.hstack([X, np.full((N, 1), bias)]).tocsr()
    refs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if loss == "logistic":
            from sklearn.linear_model import LogisticRegression

            refs.append(LogisticRegression(C=1 / (L2 * N), fit_intercept=False, tol=1e-12,
                                           max_iter=10000).fit(Xb, y).coef_.ravel())
        if loss == "hinge":
            from sklearn.svm import LinearSVC

            refs.append(LinearSVC(loss="hinge", C=1 / (L2 * N), dual=True, fit_intercept=False, tol=1e-9,
                                  max_iter=1000000).fit(Xb, y).coef_.ravel())
        else:
            refs.append(ref_scipy_primal(loss, Xb, y, L2, l1, n_l1=D))
    P_ref, w_ref = check_against(loss, Xb, y, w, res, refs, L2, l1, n_l1=D)
    assert abs(m.intercept_) > 1e-3  # the intercept is used
    # predictions use the intercept: decision_function = X coef + B w_B
    np.testing.assert_allclose(m.decision_function(X), Xb @ w, rtol=1e-12, atol=1e-12)


def test_class_weight_balanced_matches_sklearn(stores, tmp_path):
    """``class_weight='balanced'``: c_i = n / (2 n_class(y_i)) as scikit-learn's sample weights,
    on labels 9/10 (any two values; the larger is the positive class) and unbalanced classes."""
    s = stores["dense", "float64"]
    X = s["X"]
    rng = np.random.default_rng(5)
    score = X @ rng.standard_normal(D) + 0.5 * rng.standard_normal(N)
    y = np.where(score > np.quantile(score, 0.75), 10.0, 9.0)  # 25% positives
    st = ooc.convert(X, _name("cw"), y=y, dtype="float64", block_bytes=_block_bytes(X))
    assert st.label_values == [9.0, 10.0]
    run = _train(st, tmp_path, loss="logistic", l2=L2, class_weight="balanced", tol=1e-9, max_epochs=3000)
    res = run.result
    check_certificate(res, 1e-9)
    m = ooc.load_model(run.path)
    ys = np.where(y == 10.0, 1.0, -1.0)
    n_pos = int((ys > 0).sum())
    c = np.where(ys > 0, N / (2.0 * n_pos), N / (2.0 * (N - n_pos)))
    from sklearn.linear_model import LogisticRegression

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk = LogisticRegression(C=1 / (L2 * N), fit_intercept=False, tol=1e-12, max_iter=10000,
                                class_weight="balanced").fit(X, y)
    refs = [sk.coef_.ravel(), ref_scipy_primal("logistic", X, ys, L2, 0.0, c=c)]
    check_against("logistic", X, ys, m.coef_, res, refs, L2, 0.0, c=c)
    # and it is not the unweighted problem
    plain = _train(st, tmp_path, loss="logistic", l2=L2, tol=1e-9, max_epochs=3000)
    assert np.linalg.norm(ooc.load_model(plain.path).coef_ - m.coef_) > 1e-3
    # the original labels come back from predict
    assert set(np.unique(m.predict(X))) <= {9.0, 10.0}
    assert list(m.classes_) == [9.0, 10.0]
