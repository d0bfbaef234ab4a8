"""One-vs-rest multiclass through the engine, against scikit-learn's OneVsRestClassifier."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression
from sklearn.multiclass import OneVsRestClassifier
from sklearn.svm import LinearSVC

import ooc
from ooc.evaluate import evaluate
from ooc.synth import SynthSource

L2 = 1e-2


@pytest.fixture(scope="module")
def problem():
    src = SynthSource(450, 30, 8, task="multiclass", n_classes=3, seed=2, values="gaussian")
    ch = src.chunk(0, 450)
    X = sp.csr_matrix((ch.data, ch.indices, ch.indptr), shape=(450, 30))
    y = ch.labels * 10 + 5  # classes 5, 15, 25: predictions must come back in these values
    return X, y


def _store(X, y, dtype):
    return ooc.convert(X, f"memory://mc-{uuid.uuid4().hex}", y=y, dtype=dtype, block_bytes=2500)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_ovr_logistic_matches_sklearn(problem, tmp_path, dtype):
    X, y = problem
    st = _store(X, y, dtype)
    assert st.label_kind == "multiclass" and st.n_blocks("rows") > 3
    run = ooc.train(st, str(tmp_path / "r"), loss="logistic", l2=L2, tol=1e-13, max_epochs=1000)
    assert run.result["converged"] and run.result["primal"] >= run.result["dual"]
    Xr = sp.csr_matrix(st.to_scipy("rows"), dtype=np.float64)
    ref = OneVsRestClassifier(LogisticRegression(C=1 / (L2 * X.shape[0]), fit_intercept=False, tol=1e-13,
                                                 max_iter=100000)).fit(Xr, y)
    W = np.vstack([e.coef_ for e in ref.estimators_])
    model = run.model
    assert model.coef_.shape == (3, 30)
    # ||w - w*||^2 <= 2 gap / l2 per class; the gap is ~1e-13
    assert np.abs(W - model.coef_).max() <= 1e-5 * np.abs(W).max()
    assert set(np.unique(model.predict(Xr))) <= {5.0, 15.0, 25.0}
    assert np.mean(model.predict(Xr) == ref.predict(Xr)) == 1.0
    m = evaluate(run.path, st.path)
    assert m["primal"] == pytest.approx(run.result["primal"], rel=1e-9)
    assert 0.0 <= m["accuracy"] <= 1.0 and m["logloss"] > 0
    p = model.predict_proba(Xr)
    assert np.allclose(p.sum(axis=1), 1.0)


def test_ovr_hinge_with_bias_matches_liblinear(problem, tmp_path):
    X, y = problem
    st = _store(X, y, "float64")
    B = 1.0
    run = ooc.train(st, str(tmp_path / "r"), loss="hinge", l2=L2, bias=B, tol=1e-7, max_epochs=3000)
    assert run.result["converged"]
    Xb = sp.hstack([X, np.full((X.shape[0], 1), B)]).tocsr()
    ref = LinearSVC(loss="hinge", C=1 / (L2 * X.shape[0]), fit_intercept=False, tol=1e-8, max_iter=20000,
                    dual=True).fit(Xb, y)
    m = run.model
    W = np.hstack([m.coef_, (m.intercept_ / B)[:, None]])
    # compare objectives (the hinge solution need not be unique): each class's primal at both points
    classes = [5.0, 15.0, 25.0]

    def obj(Wc):
        total = 0.0
        for c, w in zip(classes, Wc):
            yc = np.where(y == c, 1.0, -1.0)
            total += np.maximum(0, 1 - yc * (Xb @ w)).mean() + L2 / 2 * w @ w
        return total

    # ours is certified within the gap of the optimum, so it cannot be worse than the reference by more
    assert obj(W) <= obj(ref.coef_) + run.result["gap"] * 1.0001
    assert obj(W) - run.result["dual"] <= run.result["gap"] * 1.0001 + 1e-12


def test_balanced_class_weights_follow_sklearn(problem, tmp_path):
    X, y = problem
    keep = (y != 25.0) | (np.arange(len(y)) % 4 == 0)  # make one class rare
    Xs, ys = X[keep], y[keep]
    st = _store(Xs, ys, "float64")
    run = ooc.train(st, str(tmp_path / "r"), loss="logistic", l2=L2, tol=1e-13, class_weight="balanced",
                    max_epochs=2000)
    n = Xs.shape[0]
    cls, counts = np.unique(ys, return_counts=True)
    sw = n / (len(cls) * counts[np.searchsorted(cls, ys)])
    W = []
    for c in cls:
        yc = np.where(ys == c, 1, -1)
        lr = LogisticRegression(C=1 / (L2 * n), fit_intercept=False, tol=1e-13, max_iter=100000)
        W.append(lr.fit(Xs, yc, sample_weight=sw).coef_[0])
    assert np.abs(np.vstack(W) - run.model.coef_).max() <= 1e-5 * np.abs(np.vstack(W)).max()


def _cs_objective(X, y, classes, W, l2):
    """Crammer-Singer primal, written out: 1/n sum_i max_j (1[j != y_i] + w_j.x_i - w_y.x_i) + l2/2 ||W||^2."""
    Z = X @ W.T
    yi = np.searchsorted(classes, y)
    delta = np.ones_like(Z)
    delta[np.arange(len(y)), yi] = 0.0
    loss = (delta + Z - Z[np.arange(len(y)), yi][:, None]).max(axis=1)
    return loss.mean() + l2 / 2 * np.sum(W * W)


def test_crammer_singer_matches_liblinear(problem, tmp_path):
    X, y = problem
    st = _store(X, y, "float64")
    run = ooc.train(st, str(tmp_path / "cs"), multiclass="crammer-singer", loss="hinge", l2=L2, tol=1e-6,
                    max_epochs=3000)
    assert run.result["converged"] and run.result["primal"] >= run.result["dual"]
    m = run.model
    assert m.coef_.shape == (3, 30)
    classes = np.array([5.0, 15.0, 25.0])
    ours = _cs_objective(X, y, classes, m.coef_, L2)
    assert ours == pytest.approx(run.result["primal"], rel=1e-9)
    ref = LinearSVC(multi_class="crammer_singer", C=1 / (L2 * X.shape[0]), fit_intercept=False, tol=1e-10,
                    max_iter=100000).fit(X, y)
    theirs = _cs_objective(X, y, classes, ref.coef_, L2)
    # ours is within its certified gap of the optimum; LIBLINEAR's point cannot be better than D
    assert ours <= theirs + run.result["gap"] * 1.0001
    assert theirs >= run.result["dual"] - 1e-12
    assert np.mean(m.predict(X) == ref.predict(X)) > 0.97
    ev = evaluate(run.path, st.path)
    assert ev["primal"] == pytest.approx(run.result["primal"], rel=1e-9)


def test_crammer_singer_same_iterates_with_duals_in_memory_or_paged(problem, tmp_path):
    X, y = problem
    st = _store(X, y, "float64")
    opts = dict(multiclass="crammer-singer", loss="hinge", l2=L2, tol=1e-14, max_epochs=6)
    a = ooc.train(st, str(tmp_path / "mem"), memory="1GiB", **opts)
    b = ooc.train(st, str(tmp_path / "paged"), memory="16B", **opts)
    assert np.array_equal(a.model.coef_, b.model.coef_)
    assert [h["gap"] for h in a.history] == [h["gap"] for h in b.history]


def test_crammer_singer_smooth_with_bias_resumes_bit_for_bit(problem, tmp_path):
    X, y = problem
    st = _store(X, y, "float32")
    opts = dict(multiclass="crammer-singer", loss="smooth-hinge", gamma=0.5, l2=L2, l1=1e-3, bias=1.0, tol=1e-14)
    full = ooc.train(st, str(tmp_path / "full"), max_epochs=8, **opts)
    part = ooc.train(st, str(tmp_path / "part"), max_epochs=3, **opts)
    resumed = ooc.resume(part.path, max_epochs=8)
    assert np.array_equal(full.model.coef_, resumed.model.coef_)
    assert np.array_equal(full.model.intercept_, resumed.model.intercept_)
    assert all(h["primal"] >= h["dual"] for h in full.history)
