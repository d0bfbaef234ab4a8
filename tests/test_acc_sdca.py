"""acc-sdca through the engine: same certified optimum as sdca, fallback, exact resume."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from scipy.optimize import minimize

import ooc
from ooc.runs.rundir import RunDir
from ooc.synth import SynthSource


@pytest.fixture(scope="module")
def store():
    # unit-norm rows, n = 2000: with l2 = 1e-6 the condition number R^2/(gamma l2) >> 10 n
    return ooc.convert(SynthSource(2000, 200, 10, seed=11), f"memory://acc-{uuid.uuid4().hex}", dtype="float64",
                       block_bytes=20000)


def _objective(X, y, w, l2, l1, gamma):
    z = y * (X @ w)
    loss = np.where(z >= 1, 0.0, np.where(z <= 1 - gamma, 1 - z - gamma / 2, (1 - z) ** 2 / (2 * gamma)))
    return loss.mean() + l2 / 2 * w @ w + l1 * np.abs(w).sum()


@pytest.mark.parametrize("l1", [0.0, 1e-4])
def test_acc_sdca_and_sdca_reach_the_same_certified_optimum(store, tmp_path, l1):
    l2, gamma, tol = 1e-4, 1.0, 1e-9
    a = ooc.train(store, str(tmp_path / "sdca"), solver="sdca", loss="smooth-hinge", gamma=gamma, l2=l2, l1=l1,
                  tol=tol, max_epochs=2000)
    b = ooc.train(store, str(tmp_path / "acc"), solver="acc-sdca", loss="smooth-hinge", gamma=gamma, l2=l2, l1=l1,
                  tol=tol, max_epochs=2000)
    assert a.result["converged"] and b.result["converged"]
    for r in (a, b):
        assert r.result["primal"] >= r.result["dual"]
    # both are certified within tol of the optimum, so their primal values agree within the sum of gaps
    assert abs(a.result["primal"] - b.result["primal"]) <= a.result["gap"] + b.result["gap"]
    X = store.to_scipy("rows")
    y = store.labels
    for r in (a, b):
        assert _objective(X, y, r.model.coef_, l2, l1, gamma) == pytest.approx(r.result["primal"], rel=1e-10)
    # and an independent reference (L-BFGS-B on the split w = u - v) agrees to 1e-6 relative
    d = X.shape[1]

    def f(uv):
        w = uv[:d] - uv[d:]
        z = y * (X @ w)
        dl = np.where(z >= 1, 0.0, np.where(z <= 1 - gamma, -1.0, -(1 - z) / gamma))
        g = X.T @ (dl * y) / len(y) + l2 * w
        return _objective(X, y, w, l2, l1, gamma), np.concatenate([g + l1, -g + l1])

    res = minimize(f, np.zeros(2 * d), jac=True, method="L-BFGS-B", bounds=[(0, None)] * (2 * d),
                   options={"maxiter": 20000, "ftol": 1e-15, "gtol": 1e-12})
    assert b.result["primal"] <= res.fun + 1e-6 * abs(res.fun)
    assert res.fun >= b.result["dual"] - 1e-12


def test_acc_sdca_needs_fewer_passes_at_small_lambda_and_falls_back_at_large(store, tmp_path):
    small = dict(loss="smooth-hinge", l2=1e-6, tol=1e-4, max_epochs=400)
    a = ooc.train(store, str(tmp_path / "sdca"), solver="sdca", **small)
    b = ooc.train(store, str(tmp_path / "acc"), solver="acc-sdca", **small)
    assert b.result["converged"]
    assert b.result["epochs"] < a.result["epochs"]
    assert all(h["accelerated"] for h in b.history)
    # large lambda: R^2/(gamma lambda) <= 10 n, plain Prox-SDCA, said in the history
    c = ooc.train(store, str(tmp_path / "fallback"), solver="acc-sdca", loss="smooth-hinge", l2=1e-2, tol=1e-8)
    assert c.result["converged"]
    assert not any(h["accelerated"] for h in c.history)
    d = ooc.train(store, str(tmp_path / "plain"), solver="sdca", loss="smooth-hinge", l2=1e-2, tol=1e-8)
    assert np.array_equal(c.model.coef_, d.model.coef_)  # the fallback is exactly Prox-SDCA


@pytest.mark.parametrize("memory", ["1GiB", "16B"])  # duals in memory, and paged per block
def test_acc_sdca_resumes_bit_for_bit(store, tmp_path, memory):
    opts = dict(solver="acc-sdca", loss="logistic", l2=1e-6, tol=1e-12, inner_passes=2, memory=memory)
    full = ooc.train(store, str(tmp_path / "full"), max_epochs=9, **opts)
    part = ooc.train(store, str(tmp_path / "part"), max_epochs=4, **opts)
    resumed = ooc.resume(part.path, max_epochs=9)
    assert resumed.result["epochs"] == full.result["epochs"] == 9
    assert np.array_equal(full.model.coef_, resumed.model.coef_)
    assert [h["gap"] for h in full.history] == [h["gap"] for h in resumed.history]


def _hinge_objective(X, y, w, l2):
    return np.maximum(0.0, 1 - y * (X @ w)).mean() + l2 / 2 * w @ w


@pytest.mark.parametrize("l2,smoothing", [(1e-2, None), (1e-3, 1e-2)], ids=["default-smoothing", "explicit"])
def test_acc_sdca_hinge_smoothing_certifies_the_svm(store, tmp_path, l2, smoothing):
    """Sec. 3.3: updates on the smoothed hinge, gap of the hinge problem itself."""
    from sklearn.svm import LinearSVC

    tol = 1e-4
    b = ooc.train(store, str(tmp_path / "acc"), solver="acc-sdca", loss="hinge", l2=l2, tol=tol, max_epochs=400,
                  smoothing=smoothing)
    assert b.result["converged"]
    gamma = smoothing or tol  # the default smoothing is tol
    assert all(h["smoothing"] == gamma and h["accelerated"] for h in b.history)
    assert RunDir.open(b.path).config["smoothing"] == gamma
    X, y = store.to_scipy("rows"), store.labels
    n = X.shape[0]
    # the reported primal is the hinge objective of the model (not the smoothed one)
    assert _hinge_objective(X, y, b.model.coef_, l2) == pytest.approx(b.result["primal"], rel=1e-10)
    # independent reference: LIBLINEAR's L1-loss SVM dual on the same objective (C = 1/(l2 n))
    ref = LinearSVC(loss="hinge", C=1.0 / (l2 * n), fit_intercept=False, dual=True, tol=1e-12, max_iter=200000)
    ref.fit(X, y)
    p_ref = _hinge_objective(X, y, ref.coef_.ravel(), l2)
    # certified: the reference can be no better than the dual bound, and we are within the gap of it
    assert p_ref >= b.result["dual"] - 1e-12
    assert b.result["primal"] <= p_ref + b.result["gap"] + 1e-12
    assert (b.result["primal"] - p_ref) / max(1.0, p_ref) <= tol
    # and sdca on the hinge (no smoothing) certifies the same optimum
    a = ooc.train(store, str(tmp_path / "sdca"), solver="sdca", loss="hinge", l2=l2, tol=tol, max_epochs=400)
    assert abs(a.result["primal"] - b.result["primal"]) <= a.result["gap"] + b.result["gap"]


def test_smoothing_option_is_validated(store, tmp_path):
    with pytest.raises(ValueError, match="--smoothing"):
        ooc.train(store, str(tmp_path / "a"), solver="sdca", loss="hinge", smoothing=0.1)
    with pytest.raises(ValueError, match="--smoothing must be"):
        ooc.train(store, str(tmp_path / "b"), solver="acc-sdca", loss="hinge", smoothing=-1.0)
