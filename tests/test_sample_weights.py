"""Per-row sample weights: stored, read from every input, and trained on exactly.

The weights ``s_i`` multiply into the example weights of the objective (docs/training.rst)::

    P(w) = 1/n sum_i c_i s_i phi(x_i . w, y_i) + l2/2 ||w||^2 + l1 ||w||_1

which is scikit-learn's weighted objective with ``C = 1 / (l2 n)`` (``alpha = l2 n`` for
Ridge). Each training test checks the certificate, the reported primal against the saved
coefficients (recomputed in numpy with the weights), and the optimum against scikit-learn's
weighted fit (plus scipy on the same weighted objective), as tests/test_train_optimality.py
does for the unweighted problems.
"""

from __future__ import annotations

import uuid
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner
from test_train_optimality import check_against, check_certificate, primal, ref_scipy_primal

import ooc
from ooc.cli import main
from ooc.store import open_store
from ooc.store.ingest import convert
from ooc.store.readers import InputError

N, D = 200, 12
L2 = 2e-2


def _name(tag):
    return f"memory://sw-{tag}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    X = sp.random(N, D, density=0.5, random_state=7, format="csr", data_rvs=rng.standard_normal)
    X = X.astype(np.float64)
    w_true = rng.standard_normal(D)
    m = X @ w_true
    y_bin = np.where(m + 0.5 * rng.standard_normal(N) > 0, 1.0, -1.0)
    y_reg = m + 0.3 * rng.standard_normal(N)
    sw = rng.exponential(size=N)
    sw[:7] = 0.0  # rows of weight 0 take no part (their duals must stay 0)
    return X, y_bin, y_reg, sw


@pytest.fixture(autouse=True)
def _no_plot(monkeypatch):
    import importlib

    monkeypatch.setattr(importlib.import_module("ooc.train"), "plot_convergence", lambda rd: None)


def _train(store, tmp_path, **opts):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ooc.ConvergenceWarning)
        return ooc.train(store, out=str(tmp_path / f"run-{uuid.uuid4().hex[:6]}"), **opts)


def _sklearn(loss, X, y, sw, l2, class_weight=None):
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.svm import LinearSVC

    n = X.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if loss == "logistic":
            return LogisticRegression(C=1 / (l2 * n), fit_intercept=False, tol=1e-12, max_iter=10000,
                                      class_weight=class_weight).fit(X, y, sample_weight=sw).coef_.ravel()
        if loss == "squared":
            return Ridge(alpha=l2 * n, fit_intercept=False, solver="cholesky").fit(X, y, sample_weight=sw).coef_
        return LinearSVC(loss="hinge", C=1 / (l2 * n), dual=True, fit_intercept=False, tol=1e-9,
                         max_iter=1000000).fit(X, y, sample_weight=sw).coef_.ravel()


# -- the store ------------------------------------------------------------------------------------
def test_store_keeps_weights_and_fingerprints_them(data):
    X, y, _, sw = data
    st = convert(X, _name("st"), y=y, sample_weight=sw, dtype="float64", block_bytes=2048)
    assert st.has_weights
    np.testing.assert_array_equal(st.read_weights(0, N), sw)
    np.testing.assert_array_equal(st.read_weights(5, 40), sw[5:40])
    a = st.attrs["sample_weights"]
    assert a["sum"] == pytest.approx(sw.sum()) and a["min"] == 0.0 and a["max"] == sw.max()
    assert a["class_sums"] == {repr(-1.0): pytest.approx(sw[y < 0].sum()), repr(1.0): pytest.approx(sw[y > 0].sum())}
    plain = convert(X, _name("plain"), y=y, dtype="float64", block_bytes=2048)
    assert not plain.has_weights and plain.read_weights(0, 3) is None
    other = convert(X, _name("other"), y=y, sample_weight=sw * 2, dtype="float64", block_bytes=2048)
    ones = convert(X, _name("ones"), y=y, sample_weight=np.ones(N), dtype="float64", block_bytes=2048)
    prints = {st.fingerprint, plain.fingerprint, other.fingerprint, ones.fingerprint}
    assert len(prints) == 4  # the weights are part of the content
    assert st.info()["sample_weights"] == a


def test_zarr_store_weights_and_damaged_attribute(data, tmp_path):
    import zarr

    X, y, _, sw = data
    path = str(tmp_path / "w.zarr")
    convert(X, path, y=y, sample_weight=sw, dtype="float32").close()
    st = open_store(path)
    np.testing.assert_array_equal(st.read_weights(0, N), sw)
    st.close()
    g = zarr.open_group(path, mode="r+")
    g.attrs["sample_weights"] = {"sum": 1.0, "min": 0.0, "max": 100.0}
    with pytest.raises(ooc.StoreError, match="'sample_weights'"):
        open_store(path)


# -- training: the weighted optimum ----------------------------------------------------------------
@pytest.mark.parametrize("loss,solver,extra", [
    ("logistic", "sdca", {}), ("logistic", "rcd-primal", {}), ("logistic", "acc-sdca", {}),
    ("logistic", "rcd-dual", {"sampling": "importance"}), ("squared", "sdca", {}), ("squared", "dgpd", {"dgpd_fallback": False}),
    ("hinge", "sdca", {}), ("smooth-hinge", "rcd-dual", {"sampling": "gap-per-epoch"}),
])
def test_weighted_optimum_matches_sklearn(data, tmp_path, loss, solver, extra):
    X, y_bin, y_reg, sw = data
    y = y_reg if loss == "squared" else y_bin
    st = convert(X, _name("fit"), y=y, sample_weight=sw, dtype="float64", block_bytes=2048,
                 label_kind="regression" if loss == "squared" else "auto")
    tol = 1e-7 if loss == "hinge" else 1e-9
    run = _train(st, tmp_path, loss=loss, l2=L2, tol=tol, max_epochs=5000, solver=solver, **extra)
    check_certificate(run.result, tol)
    w = ooc.load_model(run.path).coef_
    refs = [_sklearn(loss, X, y, sw, L2)] if loss != "smooth-hinge" else []
    if loss != "hinge":
        refs.append(ref_scipy_primal(loss, X, y, L2, 0.0, c=sw))
    check_against(loss, X, y, w, run.result, refs, L2, 0.0, c=sw)
    # and the weights matter: the unweighted optimum is elsewhere
    assert np.linalg.norm(w - ref_scipy_primal(loss, X, y, L2, 0.0) if loss != "hinge" else
                          w - _sklearn(loss, X, y, None, L2)) > 1e-3


def test_weighted_run_resumes_bit_for_bit(data, tmp_path):
    """Stopped after 2 epochs and resumed: the same coefficients as the run never stopped (the
    weights are read from the store again, in the same blocks)."""
    X, y, _, sw = data
    st = convert(X, _name("res"), y=y, sample_weight=sw, dtype="float64", block_bytes=2048)
    opts = dict(loss="logistic", l2=L2, tol=1e-10, max_epochs=2, solver="sdca", block_bytes=1024)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ooc.ConvergenceWarning)
        ooc.train(st, str(tmp_path / "a"), **opts)
    ooc.resume(str(tmp_path / "a"), max_epochs=5000)
    whole = _train(st, tmp_path, **dict(opts, max_epochs=5000))
    np.testing.assert_array_equal(ooc.load_model(str(tmp_path / "a")).coef_, ooc.load_model(whole.path).coef_)


def test_elastic_net_with_weights(data, tmp_path):
    X, _, y, sw = data
    st = convert(X, _name("en"), y=y, sample_weight=sw, dtype="float64", block_bytes=2048, label_kind="regression")
    run = _train(st, tmp_path, loss="squared", l2=L2, l1=1e-2, tol=1e-9, max_epochs=5000)
    check_certificate(run.result, 1e-9)
    w = ooc.load_model(run.path).coef_
    check_against("squared", X, y, w, run.result, [ref_scipy_primal("squared", X, y, L2, 1e-2, c=sw)], L2, 1e-2,
                  c=sw)


def test_balanced_class_weight_uses_weighted_counts(data, tmp_path):
    """scikit-learn's 'balanced' with sample weights: sum(s) / (classes x the class's sum of s)."""
    X, y, _, sw = data
    st = convert(X, _name("bal"), y=y, sample_weight=sw, dtype="float64", block_bytes=2048)
    run = _train(st, tmp_path, loss="logistic", l2=L2, class_weight="balanced", tol=1e-9, max_epochs=5000)
    check_certificate(run.result, 1e-9)
    cls = {v: sw.sum() / (2 * sw[y == v].sum()) for v in (-1.0, 1.0)}
    c = sw * np.where(y > 0, cls[1.0], cls[-1.0])
    refs = [_sklearn("logistic", X, y, sw, L2, class_weight="balanced"), ref_scipy_primal("logistic", X, y, L2, 0.0,
                                                                                           c=c)]
    check_against("logistic", X, y, ooc.load_model(run.path).coef_, run.result, refs, L2, 0.0, c=c)


def test_ovr_multiclass_with_weights(tmp_path):
    """One-vs-rest: every class's problem takes the same row weights (the reported objective is their sum)."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(3)
    X = rng.standard_normal((150, 6))
    y = np.argmax(X[:, :3] + 0.3 * rng.standard_normal((150, 3)), axis=1).astype(float)
    sw = rng.uniform(0, 3, 150)
    st = convert(X, _name("mc"), y=y, sample_weight=sw, dtype="float64")
    run = _train(st, tmp_path, loss="logistic", l2=L2, tol=1e-10, max_epochs=5000)
    assert run.result["converged"]
    m = ooc.load_model(run.path)
    total = 0.0
    for k in range(3):
        yk = np.where(y == k, 1.0, -1.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = LogisticRegression(C=1 / (L2 * 150), fit_intercept=False, tol=1e-12,
                                     max_iter=10000).fit(X, yk, sample_weight=sw).coef_.ravel()
        np.testing.assert_allclose(m.coef_[k], ref, atol=1e-4)
        wk = m.coef_[k]
        total += np.mean(sw * np.logaddexp(0, -yk * (X @ wk))) + L2 / 2 * wk @ wk
    assert run.result["primal"] == pytest.approx(total, rel=1e-10)


def test_estimator_sample_weight(data):
    X, y, y_reg, sw = data
    clf = ooc.LinearClassifier(l2=L2, bias=0, tol=1e-10, max_epochs=5000).fit(X, y, sample_weight=sw)
    # lbfgs stops short of 1e-5 in the coefficients: compare the weighted objectives
    P = primal("logistic", X, y, clf.coef_.ravel(), L2, 0.0, c=sw)
    P_sk = primal("logistic", X, y, _sklearn("logistic", X, y, sw, L2), L2, 0.0, c=sw)
    assert P <= P_sk + clf.gap_ + 1e-12 and P == pytest.approx(P_sk, rel=1e-8)
    assert clf.primal_ == pytest.approx(P, rel=1e-10)
    reg = ooc.LinearRegressor(l2=L2, bias=0, tol=1e-10, max_epochs=5000).fit(X, y_reg, sample_weight=sw)
    np.testing.assert_allclose(reg.coef_, _sklearn("squared", X, y_reg, sw, L2), atol=1e-5)
    with pytest.raises(ValueError, match=r"sample_weight\[3\]"):
        ooc.LinearClassifier(l2=L2).fit(X, y, sample_weight=np.where(np.arange(N) == 3, -1.0, 1.0))


# -- the inputs ------------------------------------------------------------------------------------
def test_npz_key_sample_weight(data, tmp_path):
    X, y, _, sw = data
    path = tmp_path / "d.npz"
    np.savez(path, X=X.toarray(), y=y, sample_weight=sw)
    st = convert(str(path), _name("npz"), dtype="float64")
    np.testing.assert_array_equal(st.read_weights(0, N), sw)
    bad = tmp_path / "bad.npz"
    np.savez(bad, X=X.toarray(), y=y, sample_weight=np.where(np.arange(N) == 5, np.nan, 1.0))
    with pytest.raises(InputError, match=r"bad.npz: 'sample_weight' .*sample_weight\[5\] = nan"):
        convert(str(bad), _name("npzbad"))
    short = tmp_path / "short.npz"
    np.savez(short, X=X.toarray(), y=y, sample_weight=np.ones(3))
    with pytest.raises(InputError, match="'sample_weight' has 3 weights"):
        convert(str(short), _name("npzshort"))


def test_in_memory_weights_refused_with_the_position(data):
    X, y, _, _ = data
    with pytest.raises(ValueError, match=r"sample_weight\[2\] = -0.5"):
        convert(X, _name("neg"), y=y, sample_weight=np.array([1, 1, -0.5] + [1] * (N - 3)))
    with pytest.raises(ValueError, match="pass sample_weight=None"):
        convert(lambda: iter(()), _name("cb"), sample_weight=np.ones(N))


def test_csv_weight_column(tmp_path):
    rows = [(1, 0.5, 2.0, 0.0), (-1, 0.0, 1.5, 3.0), (1, 2.0, 0.0, 1.0), (-1, 1.0, 1.0, 1.0)]
    text = "y,a,w,b\n" + "".join(f"{r[0]},{r[1]},{r[2]},{r[3]}\n" for r in rows)
    p = tmp_path / "d.csv"
    p.write_text(text)
    st = convert(str(p), _name("csv"), weight_column=2, dtype="float64")
    assert st.n_cols == 2
    np.testing.assert_array_equal(st.read_weights(0, 4), [2.0, 1.5, 0.0, 1.0])
    np.testing.assert_array_equal(st.to_scipy().toarray(), [[0.5, 0.0], [0.0, 3.0], [2.0, 1.0], [1.0, 1.0]])
    # the same through the negative index, and the command line
    st2 = convert(str(p), _name("csv2"), weight_column=-2, dtype="float64")
    assert st2.fingerprint == st.fingerprint
    out = tmp_path / "s.zarr"
    res = CliRunner().invoke(main, ["convert", str(p), str(out), "--weight-column", "2", "--json"])
    assert res.exit_code == 0, res.output
    assert open_store(str(out)).info()["sample_weights"]["sum"] == pytest.approx(4.5)


def test_csv_weight_column_errors(tmp_path):
    p = tmp_path / "neg.csv"
    p.write_text("1,0.5,2\n\n# a comment\n-1,1,-3\n")
    with pytest.raises(InputError, match=r"neg.csv:4:3: sample weight -3 is negative"):
        convert(str(p), _name("neg"), weight_column=2)
    res = CliRunner().invoke(main, ["convert", str(p), str(tmp_path / "o.zarr"), "--weight-column", "7"])
    assert res.exit_code != 0
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and "weight column 7 does not exist" in err, err
    res = CliRunner().invoke(main, ["convert", str(p), str(tmp_path / "o.zarr"), "--weight-column", "0"])
    assert res.exit_code != 0 and "weight column 0 is the label column" in res.stderr
    svm = tmp_path / "d.svm"
    svm.write_text("1 1:0.5\n-1 2:1\n")
    res = CliRunner().invoke(main, ["convert", str(svm), str(tmp_path / "o.zarr"), "--weight-column", "1"])
    assert res.exit_code != 0 and "--weight-column is for CSV input" in res.stderr
    assert not (tmp_path / "o.zarr").exists()


# -- class weights as a mapping --------------------------------------------------------------------
def test_class_weight_mapping_normalized_and_refused():
    from ooc.config import TrainConfig

    assert TrainConfig(class_weight="1=5, -1=1").class_weight == "-1=1,1=5"
    assert TrainConfig(class_weight={1: 5, "-1": 0.5}).class_weight == "-1=0.5,1=5"
    for bad, msg in (("1=5,x", "LABEL=WEIGHT pairs"), ("1=-2", "weight of label 1"), ("1=a", "1=a is not"),
                     ("1=1,1.0=2", "given twice"), ("1=inf", "weight of label 1")):
        with pytest.raises(ValueError, match=f"--class-weight: .*{msg}"):
            TrainConfig(class_weight=bad)


def test_class_weight_mapping_matches_sklearn(data, tmp_path):
    """Labels 9/10 (stored -1/+1): the mapping names the original values; with sample weights too."""
    X, y, _, sw = data
    y9 = np.where(y > 0, 10.0, 9.0)
    st = convert(X, _name("cwm"), y=y9, sample_weight=sw, dtype="float64", block_bytes=2048)
    run = _train(st, tmp_path, loss="logistic", l2=L2, class_weight="10=5,9=0.5", tol=1e-9, max_epochs=5000)
    check_certificate(run.result, 1e-9)
    c = sw * np.where(y > 0, 5.0, 0.5)
    refs = [_sklearn("logistic", X, y9, sw, L2, class_weight={10.0: 5.0, 9.0: 0.5}),
            ref_scipy_primal("logistic", X, y, L2, 0.0, c=c)]
    check_against("logistic", X, y, ooc.load_model(run.path).coef_, run.result, refs, L2, 0.0, c=c)
    with pytest.raises(ValueError, match=r"--class-weight: label 1 is not a class of .*\(its labels: 9, 10\)"):
        ooc.train(st, str(tmp_path / "bad"), class_weight="1=2")
    assert not (tmp_path / "bad").exists()
    # the estimator's dict, on an array (stored as -1/+1) and with a label missing from the dict
    clf = ooc.LinearClassifier(l2=L2, bias=0, tol=1e-10, max_epochs=5000, class_weight={10.0: 5.0})
    clf.fit(X, y9, sample_weight=sw)
    c = sw * np.where(y > 0, 5.0, 1.0)
    P = primal("logistic", X, y, clf.coef_.ravel(), L2, 0.0, c=c)
    P_ref = primal("logistic", X, y, ref_scipy_primal("logistic", X, y, L2, 0.0, c=c), L2, 0.0, c=c)
    assert P <= P_ref + clf.gap_ + 1e-12 and P == pytest.approx(P_ref, rel=1e-8)
    with pytest.raises(ValueError, match="class_weight: label 3 is not one of the classes"):
        ooc.LinearClassifier(l2=L2, class_weight={3: 1.0}).fit(X, y9)


def test_class_weight_mapping_cli(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((60, 4))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    path = tmp_path / "d.npz"
    np.savez(path, X=X, y=y)
    store = tmp_path / "s.zarr"
    assert CliRunner().invoke(main, ["convert", str(path), str(store)]).exit_code == 0
    res = CliRunner().invoke(main, ["train", str(store), "--out", str(tmp_path / "r"), "--class-weight", "1=5,-1=1",
                                    "--l2", "0.01", "--json"])
    assert res.exit_code == 0, res.output
    from ooc.runs.rundir import RunDir

    assert RunDir.open(str(tmp_path / "r")).config["class_weight"] == "-1=1,1=5"
    res = CliRunner().invoke(main, ["train", str(store), "--out", str(tmp_path / "r2"), "--class-weight", "2=5"])
    err = res.stderr.strip()
    assert res.exit_code != 0 and len(err.splitlines()) == 1 and "--class-weight: label 2 is not a class" in err
    assert not (tmp_path / "r2").exists()


@pytest.mark.parametrize("est", ["classifier", "regressor"])
def test_integer_weights_are_repeated_rows(est):
    """Weight k is the row repeated k times (0: removed): with l2 = 1/n (C = 1) both fits certify the
    same problem up to the factor n_repeated / n, so their objectives agree within the two gaps."""
    rng = np.random.default_rng(4)
    X = rng.standard_normal((40, 5))
    y = X @ rng.standard_normal(5) + 0.3 * rng.standard_normal(40)
    if est == "classifier":
        y = np.where(y > 0, 1.0, 0.0)
    sw = rng.integers(0, 4, 40).astype(float)
    keep = sw.astype(int)
    Xr, yr = np.repeat(X, keep, axis=0), np.repeat(y, keep)
    cls = ooc.LinearClassifier if est == "classifier" else ooc.LinearRegressor
    a = cls(tol=1e-12, max_epochs=100000).fit(X, y, sample_weight=sw)
    b = cls(tol=1e-12, max_epochs=100000).fit(Xr, yr)
    scale = len(X) / len(Xr)
    assert abs(a.primal_ * scale - b.primal_) <= a.gap_ * scale + b.gap_ + 1e-15
    # the coefficients, within what strong convexity allows for each gap (l2 = 1/n)
    bound = np.sqrt(2 * a.gap_ * len(X)) + np.sqrt(2 * b.gap_ * len(Xr)) + 1e-12
    assert np.linalg.norm(np.append(a.coef_.ravel(), a.intercept_) - np.append(b.coef_.ravel(), b.intercept_)) <= bound


def test_crammer_singer_with_weights(tmp_path):
    """The max-of-hinge loss takes the same c_i: the reported primal is the weighted objective of the
    saved W (written out in tests/reference_multiclass.py), and LIBLINEAR's weighted fit is no better
    than the certificate allows."""
    from reference_multiclass import primal_objective
    from sklearn.svm import LinearSVC

    rng = np.random.default_rng(11)
    X = rng.standard_normal((120, 5))
    y = np.argmax(X[:, :3] + 0.5 * rng.standard_normal((120, 3)), axis=1).astype(float)
    sw = rng.uniform(0, 2, 120)
    st = convert(X, _name("cs"), y=y, sample_weight=sw, dtype="float64")
    run = _train(st, tmp_path, multiclass="crammer-singer", loss="hinge", l2=L2, tol=1e-6, max_epochs=5000)
    res = run.result
    check_certificate(res, 1e-6)
    yi = y.astype(int)
    ours = primal_objective(X, yi, sw, run.model.coef_.T, L2, 0.0, 0.0)
    assert ours == pytest.approx(res["primal"], rel=1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = LinearSVC(multi_class="crammer_singer", C=1 / (L2 * 120), fit_intercept=False, tol=1e-10,
                        max_iter=100000).fit(X, y, sample_weight=sw)
    theirs = primal_objective(X, yi, sw, ref.coef_.T, L2, 0.0, 0.0)
    assert ours <= theirs + res["gap"] * 1.0001
    assert theirs >= res["dual"] - 1e-12
    assert ours == pytest.approx(theirs, rel=1e-4)


def test_unit_weights_train_bit_for_bit_as_none(data, tmp_path):
    """Weights of 1 change nothing: c_i * 1 is c_i, so the iterates are the unweighted run's."""
    X, y, _, _ = data
    a = convert(X, _name("u"), y=y, dtype="float64", block_bytes=2048)
    b = convert(X, _name("1"), y=y, sample_weight=np.ones(N), dtype="float64", block_bytes=2048)
    ra = _train(a, tmp_path, loss="logistic", l2=L2, tol=1e-8, class_weight="balanced")
    rb = _train(b, tmp_path, loss="logistic", l2=L2, tol=1e-8, class_weight="balanced")
    assert (ra.result["primal"], ra.result["dual"], ra.result["epochs"]) == \
        (rb.result["primal"], rb.result["dual"], rb.result["epochs"])
    np.testing.assert_array_equal(ooc.load_model(ra.path).coef_, ooc.load_model(rb.path).coef_)
