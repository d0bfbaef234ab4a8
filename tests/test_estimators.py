"""scikit-learn API of ``ooc.LinearClassifier`` / ``ooc.LinearRegressor``.

scikit-learn's own estimator checks run on both estimators (``parametrize_with_checks``),
with the expected failures :func:`ooc.estimators.expected_failed_checks` documents; the rest checks the API promises of docs/api.rst and the
optimum against scikit-learn's solvers on the same objective.
"""

from __future__ import annotations

import pickle
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning as SkConvergenceWarning
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.utils.estimator_checks import parametrize_with_checks

import ooc
from ooc import LinearClassifier, LinearRegressor
from ooc.estimators import expected_failed_checks


@pytest.fixture(autouse=True)
def _no_plots(monkeypatch):
    """Skip RUN/convergence.png: estimator runs live in temporary directories, and drawing
    costs ~0.5 s a fit, which would dominate the ~200 fits of the estimator checks."""
    monkeypatch.setattr(sys.modules["ooc.train"], "plot_convergence", lambda rd: None)


# -- scikit-learn's estimator checks ------------------------------------------------------------------

# tol: a 1e-4 certified gap is plenty for the checks' assertions. Some checks fit random labels
# on features centred at 100 (check_fit_idempotent, ...): badly conditioned for a dual
# coordinate method, those fits stop at max_epochs (default 100) with a ConvergenceWarning,
# which is what they should do, and keep the ~200 fits fast. With an intercept (ooc's default is
# none, as ooc train's): checks such as check_class_weight_classifiers fit data that no line
# through the origin separates; the hinge's is LinearSVC's, regularized (fit_intercept needs a
# smooth loss). The classifier is multiclass
# (one-vs-rest by default), so scikit-learn's multiclass checks run too.
@parametrize_with_checks(
    [
        LinearClassifier(tol=1e-4, fit_intercept=True),
        LinearClassifier(loss="hinge", tol=1e-4, bias=1.0),  # LinearSVC's (regularized) intercept
        LinearRegressor(tol=1e-4, fit_intercept=True),
    ],
    expected_failed_checks=expected_failed_checks,
)
def test_sklearn_estimator_checks(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkConvergenceWarning)
        check(estimator)


# -- data ---------------------------------------------------------------------------------------------

def _binary_data(n=300, d=20, seed=0, labels=(3, 7), density=0.3):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=seed, dtype=np.float64)
    X.data = rng.standard_normal(X.nnz)
    w = rng.standard_normal(d)
    s = X @ w + 0.3 * rng.standard_normal(n)
    y = np.where(s > 0, labels[1], labels[0])
    return X, y


def _regression_data(n=300, d=15, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = X @ rng.standard_normal(d) + 0.1 * rng.standard_normal(n)
    return X, y


# -- parameters, clone ------------------------------------------------------------------------------

def test_params_stored_untouched_and_not_mutated_by_fit():
    X, y = _binary_data()
    params = dict(loss="logistic", l2=1e-2, l1=0.0, tol=1e-8, max_epochs=50, fit_intercept=False, bias=0.5,
                  class_weight=None, gamma=1.0, solver="sdca", multiclass="ovr", memory="64MiB", seed=3, run_dir=None, n_jobs=2,
                  overwrite=False)
    est = LinearClassifier(**params)
    assert est.get_params() == params
    est.fit(X, y)
    assert est.get_params() == params
    c = clone(est)
    assert c.get_params() == params and not hasattr(c, "coef_")
    # validation happens in fit, not in __init__
    bad = LinearClassifier(l2=-1.0)
    assert bad.l2 == -1.0
    with pytest.raises(ValueError, match="l2"):
        bad.fit(X, y)
    with pytest.raises(ValueError, match="loss"):
        LinearClassifier(loss="squared").fit(X, y)
    with pytest.raises(ValueError, match="loss"):
        LinearRegressor(loss="logistic").fit(*_regression_data())


# -- inputs: arrays, CSR, CSC, store path -----------------------------------------------------------------

def test_same_coef_from_dense_csr_csc_and_store(tmp_path):
    X, y = _binary_data()
    kw = dict(l2=1e-2, tol=1e-10, max_epochs=500, bias=1.0)
    ref = LinearClassifier(**kw).fit(X.toarray(), y)
    for Xin in (X, X.tocsc(), X.toarray().tolist()):
        est = LinearClassifier(**kw).fit(Xin, list(y) if isinstance(Xin, list) else y)
        np.testing.assert_array_equal(est.coef_, ref.coef_)
        assert est.intercept_ == ref.intercept_
    store = tmp_path / "train.zarr"
    ooc.convert(X, str(store), y=y, dtype="float64")
    est = LinearClassifier(**kw).fit(str(store))
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(est.classes_, [3, 7])
    # predict / decision_function / predict_proba accept the store path, streamed by block
    np.testing.assert_array_equal(est.predict(str(store)), ref.predict(X))
    np.testing.assert_allclose(est.decision_function(str(store)), ref.decision_function(X), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(est.predict_proba(str(store)), ref.predict_proba(X), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="y=None"):
        LinearClassifier(**kw).fit(str(store), y)


def test_regressor_on_store_path(tmp_path):
    X, y = _regression_data()
    kw = dict(l2=1e-2, tol=1e-10, max_epochs=500, bias=0.0)
    ref = LinearRegressor(**kw).fit(X, y)
    store = tmp_path / "reg.zarr"
    ooc.convert(X, str(store), y=y, dtype="float64", label_kind="regression")
    est = LinearRegressor(**kw).fit(str(store))
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(est.predict(str(store)), ref.predict(X), rtol=1e-9, atol=1e-12)


# -- labels and predictions -------------------------------------------------------------------------------

@pytest.mark.parametrize("labels", [(3, 7), (-2.0, 10.0), ("ham", "spam"), (False, True)])
def test_predict_returns_original_labels(labels):
    X, y_idx = _binary_data(labels=(0, 1))
    y = np.asarray(labels, dtype=object if isinstance(labels[0], str) else None)[y_idx]
    est = LinearClassifier(l2=1e-2, max_epochs=300).fit(X, y)
    np.testing.assert_array_equal(est.classes_, np.unique(y))
    pred = est.predict(X)
    assert set(np.unique(pred)) <= set(np.unique(y))
    assert pred.dtype == est.classes_.dtype
    m = est.decision_function(X)
    assert m.shape == (X.shape[0],)
    np.testing.assert_array_equal(pred, np.where(m > 0, est.classes_[1], est.classes_[0]))
    assert est.score(X, y) == np.mean(pred == y)
    assert est.score(X, y) > 0.9


def test_predict_proba_logistic_and_refused_for_hinge():
    X, y = _binary_data()
    est = LinearClassifier(l2=1e-2).fit(X, y)
    p = est.predict_proba(X)
    assert p.shape == (X.shape[0], 2)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-15)
    np.testing.assert_allclose(p[:, 1], 1 / (1 + np.exp(-est.decision_function(X))), rtol=1e-12)
    np.testing.assert_array_equal(est.classes_[(p[:, 1] > 0.5).astype(int)], est.predict(X))
    np.testing.assert_allclose(np.exp(est.predict_log_proba(X)), p, rtol=1e-12)
    hinge = LinearClassifier(loss="hinge", l2=1e-2, tol=1e-4, max_epochs=1000).fit(X, y)
    assert not hasattr(hinge, "predict_proba")
    with pytest.raises(AttributeError, match="predict_proba") as exc:
        hinge.predict_proba(X)
    assert "loss='logistic'" in str(exc.value.__cause__)
    assert hinge.score(X, y) > 0.9


def test_single_class_refused():
    X, _ = _binary_data()
    with pytest.raises(ValueError, match="one class"):
        LinearClassifier().fit(X, np.ones(X.shape[0]))


def _multiclass_data(n=450, d=20, k=3, seed=2):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.4, format="csr", random_state=seed, dtype=np.float64)
    X.data = rng.standard_normal(X.nnz)
    W = rng.standard_normal((k, d))
    names = np.array(["ant", "bee", "cat", "dog"][:k])
    return X, names[np.argmax(X @ W.T + 0.3 * rng.standard_normal((n, k)), axis=1)]


def test_multiclass_ovr_matches_sklearn_one_vs_rest():
    from sklearn.multiclass import OneVsRestClassifier

    X, y = _multiclass_data()
    n, l2 = X.shape[0], 1e-2
    est = LinearClassifier(l2=l2, bias=0.0, tol=1e-13, max_epochs=3000).fit(X, y)
    assert est.converged_ and list(est.classes_) == ["ant", "bee", "cat"]
    assert est.coef_.shape == (3, X.shape[1]) and est.intercept_.shape == (3,)
    ref = OneVsRestClassifier(LogisticRegression(C=1.0 / (l2 * n), fit_intercept=False, solver="newton-cholesky",
                                                 tol=1e-14, max_iter=1000)).fit(X.toarray(), y)
    w_ref = np.vstack([e.coef_.ravel() for e in ref.estimators_])
    np.testing.assert_allclose(est.coef_, w_ref, rtol=1e-6, atol=1e-6 * np.abs(w_ref).max())
    m = est.decision_function(X)
    assert m.shape == (n, 3)
    assert np.array_equal(est.predict(X), est.classes_[np.argmax(m, axis=1)])
    assert est.score(X, y) > 0.8
    p = est.predict_proba(X)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    np.testing.assert_allclose(p, ref.predict_proba(X.toarray()), rtol=1e-5, atol=1e-7)
    est.partial_fit(X, y)  # a new one-pass run; a later call must bring the same labels
    with pytest.raises(ValueError, match="outside classes_"):
        est.partial_fit(X, np.where(y == "ant", "emu", y))


def test_multiclass_crammer_singer_equals_the_engine(tmp_path):
    X, y = _multiclass_data(k=4, seed=5)
    # the same bits as the engine at any tol: 1e-5 keeps it to a few hundred passes (1e-8: 2000)
    est = LinearClassifier(loss="hinge", multiclass="crammer-singer", l2=1e-2, bias=0.0, tol=1e-5,
                           max_epochs=2000).fit(X, y)
    assert est.converged_ and est.primal_ >= est.dual_
    pos = np.searchsorted(est.classes_, y).astype(np.float64)
    st = ooc.convert(X, f"memory://cs-{np.random.default_rng().integers(1 << 60)}", y=pos, dtype="float64",
                     label_kind="multiclass")
    run = ooc.train(st, str(tmp_path / "cs"), loss="hinge", multiclass="crammer-singer", l2=1e-2, tol=1e-5,
                    max_epochs=2000, solver="sdca")
    np.testing.assert_array_equal(est.coef_, run.model.coef_)
    with pytest.raises(ValueError, match="multiclass="):
        LinearClassifier(multiclass="one-vs-one").fit(X, y)


def test_wrong_number_of_features_at_predict():
    X, y = _binary_data()
    est = LinearClassifier(l2=1e-2).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        est.predict(X[:, :-1])


# -- the optimum against scikit-learn ----------------------------------------------------------------------

def test_logistic_matches_sklearn_logistic_regression():
    X, y = _binary_data(n=400, d=25)
    n, l2 = X.shape[0], 1e-2
    est = LinearClassifier(l2=l2, bias=0.0, tol=1e-13, max_epochs=3000).fit(X, y)
    assert est.converged_
    ref = LogisticRegression(C=1.0 / (l2 * n), fit_intercept=False, solver="newton-cholesky", tol=1e-14,
                             max_iter=1000).fit(X.toarray(), y)
    assert est.coef_.shape == ref.coef_.shape == (1, X.shape[1]) and est.intercept_.shape == (1,)  # sklearn's
    w_ref = ref.coef_.ravel()
    w = est.coef_[0]
    assert np.linalg.norm(w - w_ref) <= 1e-6 * np.linalg.norm(w_ref)
    np.testing.assert_allclose(w, w_ref, rtol=1e-6, atol=1e-6 * np.abs(w_ref).max())
    assert est.intercept_[0] == 0.0
    # P >= D and the certified gap bounds the true suboptimality
    ys = np.where(y == est.classes_[1], 1.0, -1.0)

    def primal(w):
        return np.mean(np.logaddexp(0, -ys * (X @ w))) + 0.5 * l2 * w @ w

    assert est.primal_ >= est.dual_
    assert primal(w) - primal(w_ref) <= est.gap_ + 1e-15
    np.testing.assert_allclose(est.primal_, primal(w), rtol=1e-12)


def test_bias_is_a_regularized_feature_column():
    X, y = _binary_data()
    B = 2.0
    with_bias = LinearClassifier(l2=1e-2, bias=B, tol=1e-12, max_epochs=2000).fit(X, y)
    Xb = sp.hstack([X, np.full((X.shape[0], 1), B)]).tocsr()
    explicit = LinearClassifier(l2=1e-2, bias=0.0, tol=1e-12, max_epochs=2000).fit(Xb, y)
    np.testing.assert_allclose(with_bias.coef_, explicit.coef_[:, :-1], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(with_bias.intercept_, B * explicit.coef_[:, -1], rtol=1e-6, atol=1e-9)


def test_ridge_matches_sklearn_ridge():
    X, y = _regression_data()
    n, l2 = X.shape[0], 1e-2
    est = LinearRegressor(l2=l2, bias=0.0, tol=1e-13, max_epochs=3000).fit(X, y)
    assert est.converged_
    ref = Ridge(alpha=l2 * n, fit_intercept=False, solver="cholesky").fit(X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-6 * np.abs(ref.coef_).max())
    assert est.score(X, y) == pytest.approx(ref.score(X, y), rel=1e-8)
    sparse = LinearRegressor(l2=l2, bias=0.0, tol=1e-13, max_epochs=3000).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(sparse.coef_, est.coef_, rtol=1e-12, atol=1e-14)


def test_default_l2_is_liblinear_C_1():
    X, y = _binary_data()
    est = LinearClassifier(bias=0.0, tol=1e-10, max_epochs=2000).fit(X, y)
    explicit = LinearClassifier(l2=1.0 / X.shape[0], bias=0.0, tol=1e-10, max_epochs=2000).fit(X, y)
    np.testing.assert_array_equal(est.coef_, explicit.coef_)


# -- partial_fit, convergence warnings ------------------------------------------------------------------

def test_partial_fit_is_one_more_pass():
    X, y = _binary_data(n=500, d=40)
    est = LinearClassifier(l2=1e-3, tol=1e-12)
    gaps = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # partial_fit never warns about convergence
        for k in range(1, 6):
            est.partial_fit(X, y, classes=[3, 7])
            assert est.n_iter_ == k
            assert len(est.history_) == k + 1  # the states after 0..k epochs
            gaps.append(est.rel_gap_)
    assert all(b < a for a, b in zip(gaps, gaps[1:])), gaps
    # the same as fit with max_epochs = 5 (same seed, same passes)
    ref = LinearClassifier(l2=1e-3, tol=1e-12, max_epochs=5)
    with pytest.warns(SkConvergenceWarning):
        ref.fit(X, y)
    np.testing.assert_array_equal(est.coef_, ref.coef_)
    # other rows are new rows: appended, and the run goes on on all of them (tests/test_online.py)
    est.partial_fit(X[:50], y[:50])
    assert est.n_iter_ == 1 and est.history_[-1]["generation"] == 1
    with pytest.raises(ValueError, match="features"):
        est.partial_fit(X[:, :-1], y)
    # picklable after partial_fit (the in-process run is not carried over)
    clone_ = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(clone_.predict(X), est.predict(X))
    # fit starts over
    est.fit(X, y)
    assert est.n_iter_ > 5 or est.converged_


def test_partial_fit_regressor():
    X, y = _regression_data()
    est = LinearRegressor(l2=1e-3, tol=1e-14, solver="sdca")
    gaps = [est.partial_fit(X, y).rel_gap_ for _ in range(3)]
    assert est.n_iter_ == 3
    # three calls continue one run: the state of a fit stopped after three epochs, bit for bit
    # (the gap itself need not fall every epoch: only the dual objective is monotone)
    with pytest.warns(SkConvergenceWarning):
        ref = LinearRegressor(l2=1e-3, tol=1e-14, solver="sdca", max_epochs=3).fit(X, y)
    assert np.array_equal(est.coef_, ref.coef_) and gaps[2] == ref.rel_gap_


def test_convergence_warning_when_max_epochs_too_small():
    X, y = _binary_data()
    est = LinearClassifier(l2=1e-4, tol=1e-12, max_epochs=2)
    with pytest.warns(SkConvergenceWarning, match="max_epochs=2"):
        est.fit(X, y)
    assert not est.converged_ and est.n_iter_ == 2
    with pytest.warns(ooc.ConvergenceWarning):  # the ooc class catches it too
        clone(est).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LinearClassifier(l2=1e-2, tol=1e-6, max_epochs=1000).fit(X, y)


# -- run directory ----------------------------------------------------------------------------------

def test_run_dir_is_kept_and_loadable(tmp_path):
    X, y = _binary_data()
    run_dir = tmp_path / "run"
    est = LinearClassifier(l2=1e-2, run_dir=str(run_dir)).fit(X, y)
    assert est.run_ == str(run_dir)
    m = ooc.load_model(str(run_dir))
    np.testing.assert_array_equal(m.coef_, est.coef_[0])  # the run's LinearModel: (d,) for two classes
    np.testing.assert_allclose(m.decision_function(X), est.decision_function(X), rtol=1e-12)
    assert est.history_[-1]["rel_gap"] == est.rel_gap_
    # without run_dir nothing is left behind
    assert LinearClassifier(l2=1e-2).fit(X, y).run_ is None
