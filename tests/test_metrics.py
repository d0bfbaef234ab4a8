"""``ooc evaluate``'s metrics: accumulated over blocks, each equal to scikit-learn's on all rows at once."""

from __future__ import annotations

import numpy as np
import pytest
from test_cli import cli, last_json

import ooc
from ooc.metrics import ClassificationMetrics, RegressionMetrics, roc_auc

metrics = pytest.importorskip("sklearn.metrics")

#: ``ooc evaluate --json`` keys, by task (the contract: keys are added, never removed).
EVALUATE_KEYS = {
    "binary": {"n_rows", "primal", "accuracy", "logloss", "classes", "precision", "recall", "f1",
               "confusion_matrix", "roc_auc"},
    "multiclass": {"n_rows", "primal", "accuracy", "logloss", "classes", "precision", "recall", "f1",
                   "confusion_matrix", "roc_auc"},
    "regression": {"n_rows", "primal", "rmse", "mae", "r2"},
}


def _blocks(n, rng):
    """Random cut points of ``range(n)``: blocks of 1 to n/3 rows."""
    cuts = np.unique(np.concatenate(([0, n], rng.integers(1, n, size=max(1, n // 40)))))
    return list(zip(cuts[:-1], cuts[1:]))


@pytest.mark.parametrize("k", [2, 4])
def test_classification_sums_over_blocks_equal_sklearn(k):
    rng = np.random.default_rng(k)
    n = 500
    y = rng.integers(0, k, n)
    pred = np.where(rng.random(n) < 0.7, y, rng.integers(0, k, n))
    if k == 4:
        pred[pred == 3] = 2  # a class never predicted: its precision counts as 0
    margins = np.round(rng.standard_normal(n) + (y == 1), 1)  # rounded: ties
    if k > 2:  # class probabilities
        margins = rng.dirichlet(np.ones(k), n) + np.eye(k)[y]
        margins /= margins.sum(axis=1, keepdims=True)
    acc = ClassificationMetrics(k)
    for a, b in _blocks(n, rng):
        acc.add(y[a:b], pred[a:b], margins[a:b])
    got = acc.result()
    labels = list(range(k))
    np.testing.assert_array_equal(got["confusion_matrix"], metrics.confusion_matrix(y, pred, labels=labels))
    avg = dict(average="binary", pos_label=1) if k == 2 else dict(average="macro", labels=labels)
    for name, fn in (("precision", metrics.precision_score), ("recall", metrics.recall_score),
                     ("f1", metrics.f1_score)):
        assert got[name] == pytest.approx(fn(y, pred, zero_division=0, **avg), rel=1e-12), name
    if k == 2:
        assert got["roc_auc"] == pytest.approx(metrics.roc_auc_score(y, margins), rel=1e-12)
    else:
        assert got["roc_auc"] == pytest.approx(metrics.roc_auc_score(y, margins, multi_class="ovr"), rel=1e-12)


def test_roc_auc_of_one_class_is_undefined():
    assert roc_auc(np.array([0.1, 0.2]), np.array([True, True])) is None
    assert roc_auc(np.array([0.3, 0.1, 0.2]), np.array([True, False, False])) == 1.0


@pytest.mark.parametrize("shift", [0.0, 1e8])
def test_regression_sums_over_blocks_equal_sklearn(shift):
    """R^2 merged block by block stays exact when the targets are far from 0 (no cancellation)."""
    rng = np.random.default_rng(1)
    n = 400
    y = shift + rng.standard_normal(n)
    f = y + 0.3 * rng.standard_normal(n)
    acc = RegressionMetrics()
    for a, b in _blocks(n, rng):
        acc.add(y[a:b], f[a:b])
    got = acc.result()
    assert got["r2"] == pytest.approx(metrics.r2_score(y, f), rel=1e-9)
    assert got["mae"] == pytest.approx(metrics.mean_absolute_error(y, f), rel=1e-12)
    assert got["rmse"] == pytest.approx(np.sqrt(metrics.mean_squared_error(y, f)), rel=1e-12)
    const = RegressionMetrics()
    const.add(np.ones(3), np.ones(3))
    assert const.result()["r2"] == 1.0 == metrics.r2_score(np.ones(3), np.ones(3))


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Binary 3/7, multiclass 0/1/2 and regression stores with their trained runs."""
    import scipy.sparse as sp

    root = tmp_path_factory.mktemp("metrics")
    rng = np.random.default_rng(5)
    n, d = 300, 12
    X = sp.random(n, d, density=0.4, random_state=5, format="csr", data_rvs=rng.standard_normal)
    m = X @ rng.standard_normal(d)
    ys = {"binary": np.where(m + 0.5 * rng.standard_normal(n) > 0, 7.0, 3.0),
          "multiclass": np.digitize(m + 0.5 * rng.standard_normal(n), [-0.5, 0.5]).astype(float),
          "regression": m + 0.2 * rng.standard_normal(n)}
    out = {"X": X}
    for task, y in ys.items():
        store = str(root / f"{task}.zarr")
        ooc.convert(X, store, y=y, dtype="float64", label_kind=task)
        loss = "squared" if task == "regression" else "logistic"
        cli("train", store, "--out", root / task, "--loss", loss, "--l2", "1e-2", "--bias", "1", "--tol", "1e-8")
        out[task] = (store, str(root / task), y)
    return out


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_evaluate_json_keys_and_values_match_sklearn(stores, task):
    store, run, y = stores[task]
    ev = last_json(cli("evaluate", run, store, "--json").stdout)
    assert set(ev) == EVALUATE_KEYS[task]
    model = ooc.load_model(run)
    X = stores["X"]
    f = model.decision_function(X)
    pred = model.predict(X)
    if task == "regression":
        assert ev["r2"] == pytest.approx(metrics.r2_score(y, f), rel=1e-9)
        assert ev["mae"] == pytest.approx(metrics.mean_absolute_error(y, f), rel=1e-9)
        return
    assert ev["classes"] == list(model.classes_)
    np.testing.assert_array_equal(ev["confusion_matrix"], metrics.confusion_matrix(y, pred, labels=model.classes_))
    assert ev["logloss"] == pytest.approx(metrics.log_loss(y, model.predict_proba(X), labels=model.classes_),
                                          rel=1e-9)
    if task == "binary":
        assert ev["roc_auc"] == pytest.approx(metrics.roc_auc_score(y == 7, f), rel=1e-12)
        assert ev["f1"] == pytest.approx(metrics.f1_score(y, pred, pos_label=7), rel=1e-12)
    else:
        assert ev["roc_auc"] == pytest.approx(metrics.roc_auc_score(y, model.predict_proba(X), multi_class="ovr"),
                                              rel=1e-12)
        assert ev["f1"] == pytest.approx(metrics.f1_score(y, pred, average="macro"), rel=1e-12)
        assert ev["precision"] == pytest.approx(metrics.precision_score(y, pred, average="macro", zero_division=0),
                                                rel=1e-12)
    text = cli("evaluate", run, store).stdout
    assert "confusion" in text and "roc_auc" in text if task == "binary" else "confusion" in text


def test_evaluate_in_many_blocks_gives_the_figures_of_one(tmp_path):
    """The metrics summed over 8 blocks (--memory 256KiB) are those of one block, and scikit-learn's."""
    import scipy.sparse as sp

    from ooc.evaluate import evaluate

    rng = np.random.default_rng(8)
    X = sp.random(4000, 30, density=0.3, random_state=8, format="csr")
    y = np.where(X @ rng.standard_normal(30) + 0.3 * rng.standard_normal(4000) > 0, 1.0, -1.0)
    store, run = str(tmp_path / "s.zarr"), str(tmp_path / "run")
    ooc.convert(X, store, y=y, dtype="float64")
    ooc.train(store, run, l2=1e-2, tol=1e-6)
    pieces = []
    many = evaluate(run, store, memory="256KiB", progress=pieces.append)
    one = evaluate(run, store)
    assert len(pieces) > 4 and pieces[-1]["done"] == pieces[-1]["total"] == 4000
    assert set(many) == set(one)
    for k in one:
        if isinstance(one[k], float):
            assert many[k] == pytest.approx(one[k], rel=1e-12), k
        else:
            assert many[k] == one[k], k
    f = ooc.load_model(run).decision_function(X)
    assert many["roc_auc"] == pytest.approx(metrics.roc_auc_score(y, f), rel=1e-12)
    np.testing.assert_array_equal(many["confusion_matrix"], metrics.confusion_matrix(y, np.where(f > 0, 1, -1)))
