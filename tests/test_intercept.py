"""scikit-learn's unregularized intercept (``--fit-intercept``, ``fit_intercept=True``).

The objective (docs/training.rst)::

    P(w, b) = 1/n sum_i c_i phi(x_i . w + b, y_i) + l2/2 ||w||^2 + l1 ||w||_1

with ``b`` free. Each training test checks the certificate, the reported primal against the
saved ``coef_`` and ``intercept_`` (recomputed in numpy), and the optimum against independent
references: scikit-learn's ``LogisticRegression`` / ``Ridge`` / ``ElasticNet`` (which fit this
intercept) and L-BFGS-B on ``(w, b)`` for every smooth loss (the hinge is refused: its duals
do not measure the intercept's slope). The building blocks of :mod:`ooc.solvers.intercept`
(the envelope bound, the bracketing update) and the :class:`~ooc.objectives.losses.Offset`
loss are checked on their own first.
"""

from __future__ import annotations

import uuid
import warnings

import numpy as np
import pytest
import scipy.optimize as so
import scipy.sparse as sp
from click.testing import CliRunner
from test_train_optimality import GAMMA, loss_deriv, loss_value

import ooc
from ooc.cli import main
from ooc.objectives.losses import Hinge, Logistic, SmoothHinge, Squared, with_offset
from ooc.solvers import intercept as icpt

N, D = 240, 16
L2 = 2e-2
L1 = 1e-2
TOL = {"logistic": 1e-9, "squared": 1e-9, "smooth-hinge": 1e-9}
OFFSET = {"logistic": 1.5, "squared": 3.0, "smooth-hinge": 1.0}


@pytest.fixture(autouse=True)
def _no_plot(monkeypatch):
    import importlib

    monkeypatch.setattr(importlib.import_module("ooc.train"), "plot_convergence", lambda rd: None)


# -- the pieces ----------------------------------------------------------------------------------
@pytest.mark.parametrize("loss", [Logistic(), Squared(), SmoothHinge(0.5), Hinge()], ids=lambda x: x.name)
def test_offset_loss_is_the_shifted_loss(loss):
    rng = np.random.default_rng(0)
    z = rng.normal(size=50)
    y = np.where(rng.random(50) < 0.5, 1.0, -1.0) if loss.is_classification else rng.normal(size=50)
    b = 0.8
    sh = with_offset(loss, b)
    np.testing.assert_array_equal(sh.value(z, y), loss.value(z + b, y))
    np.testing.assert_array_equal(sh.deriv(z, y), loss.deriv(z + b, y))
    a = rng.random(50) * y if loss.is_classification else rng.normal(size=50)  # feasible duals
    q, c = rng.random(50), rng.random(50) + 0.5
    np.testing.assert_array_equal(sh.dual_step(a, z, y, q, c), loss.dual_step(a, z + b, y, q, c))
    # the conjugate of phi(. + b) is phi* - b u: at u = -a, phi*(-a) + b a
    np.testing.assert_allclose(sh.conj_neg(a, y), loss.conj_neg(a, y) + b * a, rtol=1e-13, atol=1e-13)


def test_lower_bound_is_the_envelope_minimum():
    lines = np.zeros((icpt.LINES, 3))
    icpt.add_line(lines, 1.0, 0.5)  # D_0 - b s: 1 - 0.5 b
    assert icpt.lower_bound(lines) == -np.inf  # one sign only: unbounded below
    icpt.add_line(lines, 2.0, -1.0)  # 2 + b, crosses the first at b = -2/3
    assert icpt.lower_bound(lines) == pytest.approx(1.0 + 1.0 / 3.0)
    icpt.add_line(lines, 0.5, 0.0)  # flat and lower: the crossing stays the bound
    assert icpt.lower_bound(lines) == pytest.approx(4.0 / 3.0)
    # random lines: the linear program min t s.t. t >= D_j - b s_j (scipy's HiGHS)
    rng = np.random.default_rng(1)
    lines = np.zeros((icpt.LINES, 3))
    for _ in range(40):  # more than LINES: the oldest (but the first) go
        icpt.add_line(lines, rng.normal(), rng.normal())
    A = np.column_stack([-lines[:, 1], -np.ones(icpt.LINES)])  # -b s_j - t <= -D_j
    lp = so.linprog([0.0, 1.0], A_ub=A, b_ub=-lines[:, 0], bounds=[(None, None)] * 2, method="highs")
    assert lp.status == 0
    assert icpt.lower_bound(lines) == pytest.approx(lp.fun, abs=1e-9)


def test_next_offset_brackets_and_converges_on_a_known_function():
    """On p(b) = (b - 3)^4 / 4 + (b - 3)^2 (g = -p'), measured exactly: the bracket closes on 3 and
    the measured g takes both signs (what the certificate needs)."""
    def g(b):
        return -((b - 3.0) ** 3 + 2.0 * (b - 3.0))

    state = np.zeros((4, 3))
    b, signs = -5.0, set()
    for _ in range(60):
        gb = g(b)
        signs.add(np.sign(gb))
        b = icpt.next_offset(b, gb, 0.0, state, curv_bound=1e3)
    assert b == pytest.approx(3.0, abs=1e-9)
    assert {-1.0, 1.0} <= signs
    # an inexact pass (its gap above the step's decrease) does not move b
    state2 = np.zeros((4, 3))
    assert icpt.next_offset(0.5, 1e-3, 1.0, state2, 1.0) == 0.5 and not state2.any()


# -- the optimum ---------------------------------------------------------------------------------
def _data(loss, weights=False, seed=3):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.4, random_state=seed, format="csr", data_rvs=rng.standard_normal)
    m = X @ rng.standard_normal(D) + OFFSET[loss]
    y = m + 0.3 * rng.standard_normal(N) if loss == "squared" else np.where(m + 0.5 * rng.standard_normal(N) > 0,
                                                                            1.0, -1.0)
    c = rng.exponential(size=N) if weights else None
    return X, y, c


def _primal(loss, X, y, w, b, l2, l1, c=None):
    c = np.ones(len(y)) if c is None else c
    return float(np.mean(c * loss_value(loss, X @ w + b, y)) + 0.5 * l2 * w @ w + l1 * np.abs(w).sum())


def _ref_lbfgs(loss, X, y, l2, l1, c=None):
    """L-BFGS-B on (p, q, b), w = p - q (p, q >= 0): the elastic net made smooth, b free."""
    n, d = X.shape
    c = np.ones(n) if c is None else c

    def f(u):
        w, b = u[:d] - u[d:2 * d], u[-1]
        z = X @ w + b
        r = c * loss_deriv(loss, z, y) / n
        g = X.T @ r + l2 * w
        val = np.mean(c * loss_value(loss, z, y)) + 0.5 * l2 * w @ w + l1 * u[:2 * d].sum()
        return val, np.concatenate([g + l1, -g + l1, [r.sum()]])

    r = so.minimize(f, np.zeros(2 * d + 1), jac=True, method="L-BFGS-B",
                    bounds=[(0, None)] * (2 * d) + [(None, None)],
                    options=dict(maxiter=50000, maxfun=50000, ftol=1e-16, gtol=1e-13, maxcor=30))
    return r.x[:d] - r.x[d:2 * d], float(r.x[-1])


def _references(loss, X, y, l2, l1, c=None):
    from sklearn.linear_model import ElasticNet, LogisticRegression, Ridge

    n = X.shape[0]
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if loss == "logistic" and l1 == 0:
            m = LogisticRegression(C=1 / (l2 * n), tol=1e-12, max_iter=100000).fit(X, y, sample_weight=c)
            out.append((m.coef_.ravel(), float(m.intercept_[0])))
        if loss == "squared" and l1 == 0:
            m = Ridge(alpha=l2 * n, solver="cholesky").fit(X.toarray(), y, sample_weight=c)
            out.append((m.coef_, float(m.intercept_)))
        if loss == "squared" and l1 > 0:
            m = ElasticNet(alpha=l1 + l2, l1_ratio=l1 / (l1 + l2), tol=1e-14, max_iter=1000000).fit(
                X.toarray(), y, sample_weight=c)
            # scikit-learn's ElasticNet rescales sample weights to sum to n: the same optimum
            out.append((m.coef_, float(m.intercept_)))
    out.append(_ref_lbfgs(loss, X, y, l2, l1, c))
    return out


def _check(loss, X, y, c, run, l2, l1):
    res, m = run.result, run.model
    w, b = np.asarray(m.coef_, dtype=np.float64), float(m.intercept_)
    tol = TOL[loss]
    assert res["converged"] is True
    P, Dv, gap = res["primal"], res["dual"], res["gap"]
    assert gap <= tol * max(1.0, abs(P)) and P >= Dv
    assert P == pytest.approx(_primal(loss, X, y, w, b, l2, l1, c), rel=1e-11, abs=1e-13)
    refs = _references(loss, X, y, l2, l1, c)
    assert refs
    P_ref, (w_ref, b_ref) = min(((_primal(loss, X, y, rw, rb, l2, l1, c), (rw, rb)) for rw, rb in refs),
                                key=lambda t: t[0])
    eps = 1e-10 * max(1.0, abs(P_ref))  # the references' own precision
    assert P - P_ref <= gap + eps, f"true suboptimality {P - P_ref:.3e} > certified gap {gap:.3e}"
    assert Dv <= P_ref + eps, f"D = {Dv!r} > P(ref) = {P_ref!r}: the intercept's bound is not a lower bound"
    assert abs(P - P_ref) <= 1e-6 * max(1.0, abs(P_ref))
    # P is l2-strongly convex in w (not in b): ||w - w*|| <= sqrt(2 (P - P*) / l2)
    assert np.linalg.norm(w - w_ref) <= np.sqrt(2 * (gap + eps) / l2) + np.sqrt(2 * max(P_ref - Dv, 0) / l2) + 1e-6
    if loss in ("logistic", "squared"):  # strictly convex in b
        assert b == pytest.approx(b_ref, abs=1e-3)
    assert abs(b) > 0.1  # the data needs an intercept: the test would notice a missing one


@pytest.mark.parametrize("threads", [1, 3], ids=["1thread", "3threads"])
@pytest.mark.parametrize("l1", [0.0, L1], ids=["l2", "elastic"])
@pytest.mark.parametrize("loss", ["logistic", "squared", "smooth-hinge"])
def test_optimum_matches_references(tmp_path, loss, l1, threads, monkeypatch):
    """``threads=3``: one problem's rows over three threads (CoCoA+ mini-batches), with the intercept.
    (The hinge is refused: see test_what_fit_intercept_refuses_is_one_line.)"""
    monkeypatch.setattr("ooc.solvers.row_threads.MIN_ROWS_PER_THREAD", 1)  # hundreds of rows, split all the same
    X, y, _ = _data(loss)
    st = ooc.convert(X, str(tmp_path / "s.zarr"), y=y, dtype="float64")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ooc.ConvergenceWarning)
        run = ooc.train(st, out=str(tmp_path / "r"), loss=loss, l2=L2, l1=l1, gamma=GAMMA, tol=TOL[loss],
                        max_epochs=3000, fit_intercept=True, threads=threads)
    assert run.result.get("solver_used", "sdca") == "sdca"
    _check(loss, X, y, None, run, L2, l1)


@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_weighted_optimum_matches_references(tmp_path, loss):
    X, y, c = _data(loss, weights=True, seed=5)
    st = ooc.convert(X, str(tmp_path / "s.zarr"), y=y, dtype="float64", sample_weight=c)
    run = ooc.train(st, out=str(tmp_path / "r"), loss=loss, l2=L2, tol=1e-9, max_epochs=3000, fit_intercept=True)
    _check(loss, X, y, c, run, L2, 0.0)


def test_one_vs_rest_intercepts_match_scikit_learn(tmp_path):
    """One intercept per class, each certified with its own lines; against scikit-learn's OvR."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    rng = np.random.default_rng(11)
    X = sp.random(300, 10, density=0.5, random_state=11, format="csr", data_rvs=rng.standard_normal)
    y = np.argmax(X @ rng.standard_normal((10, 3)) + np.array([1.5, 0.0, -1.0]), axis=1).astype(float)
    st = ooc.convert(X, str(tmp_path / "s.zarr"), y=y, dtype="float64")
    run = ooc.train(st, out=str(tmp_path / "r"), loss="logistic", l2=L2, tol=1e-10, max_epochs=3000,
                    fit_intercept=True)
    assert run.result["converged"] and run.result["gap"] >= 0
    ref = OneVsRestClassifier(LogisticRegression(C=1 / (L2 * 300), tol=1e-12, max_iter=100000)).fit(X, y)
    for k, est in enumerate(ref.estimators_):
        np.testing.assert_allclose(run.model.coef_[k], est.coef_.ravel(), atol=2e-4)
        assert run.model.intercept_[k] == pytest.approx(float(est.intercept_[0]), abs=2e-4)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_pure_l1_intercept_matches_scikit_learn(tmp_path, loss):
    """Pure L1 (rcd-primal, auto's choice): scikit-learn's Lasso / L1 LogisticRegression (saga), both
    with their unpenalized intercept."""
    from sklearn.linear_model import Lasso, LogisticRegression

    rng = np.random.default_rng(2)
    n, d, l1 = 400, 30, 1e-2
    X = sp.random(n, d, density=0.4, random_state=2, format="csr", data_rvs=rng.standard_normal)
    m = X @ (rng.normal(size=d) * (rng.random(d) < 0.3))
    y = m + 3.0 + 0.1 * rng.normal(size=n) if loss == "squared" else np.where(m + 1.0 + 0.3 * rng.normal(size=n) > 0,
                                                                              1.0, -1.0)
    st = ooc.convert(X, str(tmp_path / "s.zarr"), y=y, dtype="float64", layout="both")
    run = ooc.train(st, out=str(tmp_path / "r"), loss=loss, l2=0.0, l1=l1, fit_intercept=True, tol=1e-10,
                    max_epochs=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if loss == "squared":
            ref = Lasso(alpha=l1, tol=1e-14, max_iter=100000).fit(X.toarray(), y)
            w_ref, b_ref = ref.coef_, float(ref.intercept_)
        else:
            ref = LogisticRegression(penalty="l1", C=1 / (l1 * n), solver="saga", tol=1e-12, max_iter=200000).fit(X, y)
            w_ref, b_ref = ref.coef_.ravel(), float(ref.intercept_[0])
    res, w, b = run.result, run.model.coef_, float(run.model.intercept_)
    P, P_ref = _primal(loss, X, y, w, b, 0.0, l1), _primal(loss, X, y, w_ref, b_ref, 0.0, l1)
    assert res["converged"] and res["primal"] == pytest.approx(P, rel=1e-11)
    assert P - P_ref <= res["gap"] + 1e-10 * max(1.0, P_ref) and res["dual"] <= P_ref + 1e-10 * max(1.0, P_ref)
    assert b == pytest.approx(b_ref, abs=1e-4) and abs(b) > 0.5


def test_estimator_fit_intercept_matches_logistic_regression():
    from sklearn.linear_model import LogisticRegression

    X, y, _ = _data("logistic", seed=8)
    est = ooc.LinearClassifier(fit_intercept=True, tol=1e-10, max_epochs=3000).fit(X, y)
    ref = LogisticRegression(C=1.0, tol=1e-12, max_iter=100000).fit(X, y)  # l2=None is C = 1
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-4)
    assert est.intercept_.shape == ref.intercept_.shape == (1,)
    assert est.intercept_[0] == pytest.approx(float(ref.intercept_[0]), abs=1e-4)


def test_the_command_line_and_python_have_the_same_default(tmp_path):
    """No intercept unless asked, in both (``--fit-intercept`` / ``fit_intercept=True``)."""
    X, y, _ = _data("logistic", seed=9)
    store = str(tmp_path / "s.zarr")
    ooc.convert(X, store, y=y, dtype="float64")
    l2 = 1.0 / N  # the estimator's default (C = 1)
    res = CliRunner().invoke(main, ["train", store, "--out", str(tmp_path / "r"), "--l2", repr(l2), "--tol", "1e-10",
                                    "--max-epochs", "3000", "--solver", "sdca"])
    assert res.exit_code == 0, res.output
    cli_model = ooc.load_model(str(tmp_path / "r"))
    est = ooc.LinearClassifier(tol=1e-10, max_epochs=3000, solver="sdca").fit(X, y)
    assert cli_model.intercept_ == 0.0 and est.intercept_ == 0.0
    np.testing.assert_allclose(est.coef_[0], cli_model.coef_, atol=1e-6)
    # and with the option, the same intercept both ways
    res = CliRunner().invoke(main, ["train", store, "--out", str(tmp_path / "r2"), "--l2", repr(l2), "--tol", "1e-10",
                                    "--max-epochs", "3000", "--fit-intercept"])
    assert res.exit_code == 0, res.output
    est = ooc.LinearClassifier(tol=1e-10, max_epochs=3000, fit_intercept=True).fit(X, y)
    assert ooc.load_model(str(tmp_path / "r2")).intercept_ == pytest.approx(est.intercept_[0], abs=1e-6)
    assert abs(est.intercept_[0]) > 0.1


@pytest.mark.parametrize("extra, words", [
    (["--bias", "1"], "--fit-intercept and --bias"),
    (["--solver", "rcd-dual"], "--fit-intercept trains with --solver sdca"),
    (["--l2", "0", "--l1", "1e-3", "--solver", "sdca"], "pure L1 (--l2 0) with --fit-intercept trains with"),
    (["--multiclass", "crammer-singer"], "crammer-singer"),
    (["--loss", "hinge"], "needs a smooth loss"),
])
def test_what_fit_intercept_refuses_is_one_line(tmp_path, extra, words):
    X, y, _ = _data("logistic", seed=10)
    store = str(tmp_path / f"s-{uuid.uuid4().hex[:6]}.zarr")
    ooc.convert(X, store, y=y, dtype="float64")
    res = CliRunner().invoke(main, ["train", store, "--out", str(tmp_path / "r"), "--fit-intercept", *extra])
    assert res.exit_code != 0
    msg = res.output.strip()
    assert words in msg and "Traceback" not in msg and len(msg.splitlines()) == 1, msg


def test_partial_fit_with_intercept_reaches_the_fit_on_all_rows():
    """New mini-batches with fit_intercept: the run goes on on all rows (the intercept's search and
    lines start again with the new problem) to the optimum of a fit on their concatenation."""
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(3)
    X = sp.random(300, 20, density=0.5, random_state=3, format="csr")
    y = X @ rng.normal(size=20) + 2.0 + 0.1 * rng.normal(size=300)
    est = ooc.LinearRegressor(tol=1e-10, fit_intercept=True)
    est.partial_fit(X[:180], y[:180])
    est.partial_fit(X[180:], y[180:])
    for _ in range(400):
        if est.converged_:
            break
        est.partial_fit(X[180:], y[180:])
    assert est.converged_ and est.rel_gap_ <= 1e-10
    ref = Ridge(alpha=1.0, solver="cholesky").fit(X.toarray(), y)  # l2 = 1/n: alpha = 1
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-4)
    assert est.intercept_ == pytest.approx(float(ref.intercept_), abs=1e-4)
