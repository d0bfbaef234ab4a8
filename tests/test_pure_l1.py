"""Pure L1 (--l2 0) through sdca and acc-sdca: the small added L2 of the accelerated
Prox-SDCA paper (Sec. 5.5), recorded in the run config, and a certificate for the L1 problem."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from sklearn.linear_model import Lasso, LogisticRegression

import ooc
from ooc.runs.rundir import RunDir
from ooc.synth import SynthSource


@pytest.fixture(scope="module")
def stores():
    def make(task, seed):
        return ooc.convert(SynthSource(600, 60, 8, task=task, seed=seed), f"memory://l1-{uuid.uuid4().hex}",
                           dtype="float64", block_bytes=8000)
    return {"regression": make("regression", 3), "binary": make("binary", 4)}


def _objective(loss, X, y, w, l1):
    z = X @ w
    phi = 0.5 * (z - y) ** 2 if loss == "squared" else np.logaddexp(0.0, -y * z)
    return phi.mean() + l1 * np.abs(w).sum()


def _reference(loss, X, y, l1):
    """scikit-learn on the same objective: Lasso(alpha=l1), or liblinear's L1 logistic with C = 1/(l1 n)."""
    if loss == "squared":
        m = Lasso(alpha=l1, fit_intercept=False, tol=1e-14, max_iter=1_000_000).fit(X, y)
    else:
        m = LogisticRegression(penalty="l1", C=1.0 / (l1 * X.shape[0]), solver="liblinear", fit_intercept=False,
                               tol=1e-12, max_iter=100000).fit(X, y)
    return np.ravel(m.coef_)


# acc-sdca is the paper's tool for this (the added L2 is tiny, where acceleration pays: 30-50
# passes here); plain sdca certifies too but needs hundreds of passes, so it runs a looser case.
@pytest.mark.parametrize("solver,loss,task,l1,tol", [
    ("acc-sdca", "squared", "regression", 0.02, 1e-6),
    ("acc-sdca", "logistic", "binary", 0.005, 1e-6),
    # a small l1: the radius P(0)/l1 is large, and only the rescaled duals certify in few passes
    ("acc-sdca", "logistic", "binary", 1e-4, 1e-6),
    ("sdca", "logistic", "binary", 0.05, 1e-3),
])
def test_pure_l1_matches_scikit_learn_and_is_certified(stores, tmp_path, solver, loss, task, l1, tol):
    st = stores[task]
    r = ooc.train(st, str(tmp_path / "run"), solver=solver, loss=loss, l2=0.0, l1=l1, tol=tol, max_epochs=1000)
    res = r.result
    assert res["converged"] and res["primal"] >= res["dual"]
    cfg = RunDir.open(r.path).config
    assert cfg["l2"] == 0.0 and cfg["l2_added"] > 0 and len(cfg["l1_radius"]) == 1
    # the added L2 costs at most tol/2 of the certificate (paper: lambda = eps (sigma / P(0))^2)
    assert 0.5 * cfg["l2_added"] * cfg["l1_radius"][0] ** 2 == pytest.approx(tol / 2)
    X, y = st.to_scipy("rows"), st.labels
    w = r.model.coef_
    # the reported primal is the pure L1 objective of the model
    p = _objective(loss, X, y, w, l1)
    assert p == pytest.approx(res["primal"], rel=1e-10)
    w_ref = _reference(loss, X, y, l1)
    p_ref = _objective(loss, X, y, w_ref, l1)
    # the dual is a lower bound of the L1 optimum: no reference beats it
    assert p_ref >= res["dual"] - 1e-12
    # and the optimum matches the reference within the certified relative gap
    assert abs(p - p_ref) / max(1.0, abs(p_ref)) <= tol
    assert 0 < np.count_nonzero(w) <= len(w)
    if l1 >= 1e-3:
        assert np.count_nonzero(w) < len(w)  # L1 made it sparse, not trivial (l1 1e-4 keeps all 60 here)


def test_pure_l1_resume_recomputes_the_added_l2(stores, tmp_path):
    st = stores["binary"]
    opts = dict(solver="acc-sdca", loss="logistic", l2=0.0, l1=0.005, tol=1e-6)
    full = ooc.train(st, str(tmp_path / "full"), max_epochs=12, **opts)
    ooc.train(st, str(tmp_path / "part"), max_epochs=5, **opts)
    part = ooc.resume(str(tmp_path / "part"), max_epochs=12)
    assert np.array_equal(full.model.coef_, part.model.coef_)
    assert part.result["primal"] == full.result["primal"]


def test_pure_l1_refusals(stores, tmp_path):
    st = stores["binary"]
    with pytest.raises(ValueError, match="pure L1"):
        ooc.train(st, str(tmp_path / "a"), solver="sdca", l2=0.0, l1=1e-3, bias=1.0)
    with pytest.raises(ValueError, match="--l2 must be > 0"):
        ooc.train(st, str(tmp_path / "b"), solver="rcd-dual", l2=0.0, l1=1e-3)
    with pytest.raises(ValueError, match="--l2 must be > 0"):
        ooc.train(st, str(tmp_path / "c"), solver="sdca", l2=0.0, l1=0.0)


# -- rcd-primal: the rescaled dual point, and working sets ---------------------------------------------------
def _loss_terms(loss, z, y):
    """``phi(z)``, ``phi'(z)`` and ``phi*(s phi'(z))`` as functions of ``s`` (numpy, gamma = 1)."""
    if loss == "squared":
        g = z - y
        return 0.5 * g ** 2, g, lambda s: 0.5 * (s * g) ** 2 + s * g * y
    if loss == "logistic":
        p = 1.0 / (1.0 + np.exp(y * z))  # = -y phi'(z)
        def conj(s):
            q = s * p
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(q > 0, q * np.log(q), 0.0) + np.where(q < 1, (1 - q) * np.log1p(-q), 0.0)
        return np.logaddexp(0.0, -y * z), -y * p, conj
    m = y * z  # smooth hinge, gamma = 1
    f = np.where(m >= 1, 0.0, np.where(m <= 0, 0.5 - m, 0.5 * (1 - m) ** 2))
    p = np.clip(1.0 - m, 0.0, 1.0)  # = -y phi'(z)
    return f, -y * p, lambda s: -s * p + 0.5 * (s * p) ** 2


def _scipy_l1(loss, X, y, l1):
    """Pure L1 by L-BFGS-B on ``w = u - v``, ``u, v >= 0`` (an independent reference)."""
    from scipy.optimize import minimize
    d = X.shape[1]

    def f(uv):
        w = uv[:d] - uv[d:]
        phi, g, _ = _loss_terms(loss, X @ w, y)
        grad = X.T @ g / len(y)
        return phi.mean() + l1 * uv.sum(), np.concatenate([grad + l1, -grad + l1])

    res = minimize(f, np.zeros(2 * d), jac=True, method="L-BFGS-B", bounds=[(0, None)] * (2 * d),
                   options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 20000})
    return res.x[:d] - res.x[d:]


@pytest.fixture(scope="module")
def wide():
    """More features than the first working set (100): the working set is a proper subset."""
    def make(task, seed):
        return ooc.convert(SynthSource(500, 400, 10, task=task, seed=seed), f"memory://l1w-{uuid.uuid4().hex}",
                           dtype="float64", block_bytes=4000)
    return {"regression": make("regression", 5), "binary": make("binary", 6)}


@pytest.mark.parametrize("sampling", ["working-set", "uniform"])
@pytest.mark.parametrize("loss,task,l1", [("squared", "regression", 0.01), ("logistic", "binary", 0.002),
                                          ("smooth-hinge", "binary", 0.002)])
def test_rcd_primal_pure_l1_certified_against_references(wide, tmp_path, sampling, loss, task, l1):
    st = wide[task]
    tol = 1e-7
    r = ooc.train(st, str(tmp_path / "run"), solver="rcd-primal", loss=loss, l2=0.0, l1=l1, tol=tol,
                  max_epochs=3000, sampling=sampling)
    res = r.result
    assert res["converged"] and res["primal"] >= res["dual"]
    X, y = st.to_scipy("rows"), np.asarray(st.labels, dtype=np.float64)
    w = r.model.coef_
    phi, _, _ = _loss_terms(loss, X @ w, y)
    assert phi.mean() + l1 * np.abs(w).sum() == pytest.approx(res["primal"], rel=1e-10)
    for w_ref in (_scipy_l1(loss, X, y, l1), _reference(loss, X, y, l1) if loss != "smooth-hinge" else None):
        if w_ref is None:
            continue
        phi, _, _ = _loss_terms(loss, X @ w_ref, y)
        p_ref = phi.mean() + l1 * np.abs(w_ref).sum()
        assert p_ref >= res["dual"] - 1e-12  # the dual is a lower bound of the optimum
        assert res["primal"] - p_ref <= tol * max(1.0, p_ref)
    assert 0 < np.count_nonzero(w) < 100


def test_rcd_primal_pure_l1_dual_is_the_rescaled_point(wide, tmp_path):
    """The reported dual is D at alpha = -s phi'(Xw), s = min(1, l1 / ||X^T phi'(Xw) / n||_inf),
    recomputed here in numpy, and it is far tighter than the Lipschitzing bound for a small l1."""
    st, l1 = wide["binary"], 1e-4
    r = ooc.train(st, str(tmp_path / "run"), solver="rcd-primal", loss="logistic", l2=0.0, l1=l1, tol=1e-6,
                  max_epochs=200, sampling="working-set")
    res = r.result
    assert res["converged"]
    X, y = st.to_scipy("rows"), np.asarray(st.labels, dtype=np.float64)
    phi, g, conj = _loss_terms("logistic", X @ r.model.coef_, y)
    rvec = X.T @ g / len(y)
    s = min(1.0, l1 / np.abs(rvec).max())
    assert res["dual"] == pytest.approx(-conj(s).mean(), rel=1e-10, abs=1e-13)
    radius = np.log(2.0) / l1  # P(0) / l1
    lipschitz = -conj(1.0).mean() - radius * np.maximum(np.abs(rvec) - l1, 0.0).sum()
    assert res["primal"] - lipschitz > 10 * (res["primal"] - res["dual"])


def test_working_set_resume_and_paging_keep_the_iterates(wide, tmp_path):
    st = wide["binary"]
    opts = dict(solver="rcd-primal", loss="logistic", l2=0.0, l1=0.002, tol=1e-12, sampling="working-set", bias=1.0)
    full = ooc.train(st, str(tmp_path / "full"), max_epochs=6, **opts)
    ooc.train(st, str(tmp_path / "part"), max_epochs=3, **opts)
    part = ooc.resume(str(tmp_path / "part"), max_epochs=6)
    assert np.array_equal(full.model.coef_, part.model.coef_) and full.model.intercept_ == part.model.intercept_
    assert part.result["primal"] == full.result["primal"] and part.result["dual"] == full.result["dual"]
    hist = full.history
    assert 100 <= hist[-1]["ws_size"] < 400 and hist[-1]["inner_epochs"] > 0
    # the working set's columns read again for every inner pass (no room to keep them): same iterates
    paged = ooc.train(st, str(tmp_path / "paged"), max_epochs=6, memory=16, **opts)
    assert np.array_equal(full.model.coef_, paged.model.coef_)


def test_auto_runs_working_sets_for_pure_l1(wide, tmp_path):
    st = wide["binary"]
    r = ooc.train(st, str(tmp_path / "a"), loss="logistic", l2=0.0, l1=0.002, tol=1e-6)
    cfg = RunDir.open(r.path).config
    assert cfg["solver_used"] == "rcd-primal" and cfg["sampling"] == "working-set" and r.result["converged"]
    with pytest.raises(ValueError, match="working-set is for pure L1"):
        ooc.train(st, str(tmp_path / "b"), solver="rcd-primal", l2=1e-3, l1=1e-3, sampling="working-set")
    with pytest.raises(ValueError, match="working-set is rcd-primal's"):
        ooc.train(st, str(tmp_path / "c"), solver="rcd-dual", l2=1e-3, sampling="working-set")


def test_loss_curvature_is_the_derivative_of_the_derivative():
    from numba import njit

    from ooc.objectives.losses import has_curv, loss_curv, make_loss

    @njit
    def curv(loss, z, y):
        return loss_curv(loss, z, y)

    for name in ("squared", "logistic", "smooth-hinge"):
        loss = make_loss(name)
        assert has_curv(loss)
        for z in (-30.0, -2.0, -0.3, 0.3, 0.7, 3.0, 40.0):  # away from the smooth hinge's kinks (y z = 0, 1)
            for y in (-1.0, 1.0):
                h = 1e-5
                fd = (loss.deriv(z + h, y) - loss.deriv(z - h, y)) / (2 * h)
                assert curv(loss, z, y) == pytest.approx(fd, rel=1e-6, abs=1e-12)
    assert not has_curv(make_loss("hinge"))


def test_working_set_newton_falls_back_to_prox_cd(wide, tmp_path, monkeypatch):
    """When the line search accepts no step (near the optimum, rounding; forced here by an Armijo
    constant no step meets), prox-CD passes carry the working set on to the certificate."""
    import ooc.solvers.rcd_working_set as rcd

    monkeypatch.setattr(rcd, "NEWTON_ARMIJO", 1e9)  # Armijo never holds: every Newton step is refused
    st, l1 = wide["binary"], 0.002
    r = ooc.train(st, str(tmp_path / "run"), solver="rcd-primal", loss="logistic", l2=0.0, l1=l1, tol=1e-7,
                  sampling="working-set", max_epochs=200)
    assert r.result["converged"]
    X, y = st.to_scipy("rows"), np.asarray(st.labels, dtype=np.float64)
    w_ref = _scipy_l1("logistic", X, y, l1)
    phi, _, _ = _loss_terms("logistic", X @ w_ref, y)
    p_ref = phi.mean() + l1 * np.abs(w_ref).sum()
    assert p_ref >= r.result["dual"] - 1e-12 and r.result["primal"] - p_ref <= 1e-7


def test_working_set_prox_cd_for_a_loss_without_curvature(wide, tmp_path, monkeypatch):
    """A loss registered without ``curv`` gets cyclic prox-CD passes on the working set."""
    import ooc.solvers.rcd_working_set as rcd

    monkeypatch.setattr(rcd, "has_curv", lambda loss: False)
    st, l1 = wide["regression"], 0.01
    r = ooc.train(st, str(tmp_path / "run"), solver="rcd-primal", loss="squared", l2=0.0, l1=l1, tol=1e-7,
                  sampling="working-set", max_epochs=200)
    assert r.result["converged"]
    X, y = st.to_scipy("rows"), np.asarray(st.labels, dtype=np.float64)
    w_ref = _reference("squared", X, y, l1)
    p_ref = 0.5 * np.mean((X @ w_ref - y) ** 2) + l1 * np.abs(w_ref).sum()
    assert p_ref >= r.result["dual"] - 1e-12 and r.result["primal"] - p_ref <= 1e-7


def test_auto_pure_l1_run_made_before_working_sets_resumes_uniform(wide, tmp_path):
    """A run.json that recorded auto's rcd-primal with the uniform sampling (ooc before working sets)
    resumes with it: bit for bit the uninterrupted uniform run."""
    import json

    from ooc.fsutil import seal_json

    st = wide["binary"]
    opts = dict(loss="logistic", l2=0.0, l1=0.002, tol=1e-12)
    full = ooc.train(st, str(tmp_path / "full"), solver="rcd-primal", sampling="uniform", max_epochs=4, **opts)
    part = tmp_path / "part"
    with pytest.warns(ooc.ConvergenceWarning):
        ooc.train(st, str(part), solver="rcd-primal", sampling="uniform", max_epochs=2, **opts)
    with open(part / "run.json") as f:
        cfg = json.load(f)
    cfg["solver"] = "auto"  # as auto recorded it then: solver auto, solver_used rcd-primal, sampling uniform
    with open(part / "run.json", "wb") as f:
        f.write(seal_json(cfg))
    with pytest.warns(ooc.ConvergenceWarning):
        done = ooc.resume(str(part), max_epochs=4)
    assert RunDir.open(str(part)).config["sampling"] == "uniform"
    assert np.array_equal(done.model.coef_, full.model.coef_)


@pytest.mark.parametrize("solver", ["auto", "sdca", "rcd-primal", "acc-sdca"])
def test_pure_l1_with_the_hinge_is_refused_naming_what_trains_an_l1_svm(stores, tmp_path, solver):
    """No solver certifies the plain hinge with --l2 0: every route is refused in one line that names the
    smoothed hinge (and an added --l2), never another solver that would refuse it too."""
    with pytest.raises(ValueError) as e:
        ooc.train(stores["binary"], str(tmp_path / "r"), solver=solver, loss="hinge", l2=0.0, l1=1e-3)
    msg = str(e.value)
    assert "--loss smooth-hinge" in msg and "--l2" in msg and "\n" not in msg, msg
    advice = msg.split("; use", 1)[1]
    assert "acc-sdca" not in advice and "rcd-dual" not in advice and not (tmp_path / "r").exists(), msg


def test_sdca_refuses_pure_l1_it_cannot_certify(stores, tmp_path):
    """A small --tol or --l1 makes the added L2 tiny (tol / r^2): Prox-SDCA would need ~R^2 / (l2' n gamma)
    passes, millions here, and end without progress; the run is refused in one line naming the solvers that
    certify it (acc-sdca's rate has the square root)."""
    with pytest.raises(ValueError, match=r"pure L1 .*sdca adds an L2 of .* passes; use --solver rcd-primal") as e:
        ooc.train(stores["binary"], str(tmp_path / "r"), solver="sdca", loss="logistic", l2=0.0, l1=1e-6, tol=1e-9)
    assert "\n" not in str(e.value) and not (tmp_path / "r").exists()
