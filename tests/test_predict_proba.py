"""``ooc predict RUN INPUT --proba`` for every kind of model (docs/cli.rst, predict).

A model whose loss has probabilities (``proba`` in the loss registry: its margins are log-odds),
binary or one-vs-rest over any number of classes, prints one column per class in the model's
class order, each row summing to 1: scikit-learn's ``predict_proba`` of the same coefficients
(``LogisticRegression`` for two classes, ``OneVsRestClassifier``'s normalised sigmoids for
more). Every other model (the hinges, squared, regression, Crammer-Singer) is refused with one
line that says why.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import ooc
from ooc.cli import main
from ooc.objectives.losses import LOSS_REGISTRY

PROBA_LOSSES = sorted(n for n, s in LOSS_REGISTRY.items() if s.proba and s.classification)
OTHER_LOSSES = sorted(n for n, s in LOSS_REGISTRY.items() if not s.proba and s.classification)


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=True)


def _data(k, seed, n=120, d=6):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n) * 2 + 1  # labels 1, 3, 5 ...: not 0..k-1, not -1/+1
    X = rng.standard_normal((n, d)) + np.eye(k, d)[(y - 1) // 2] * 1.5
    # the values the store holds (6 decimals in the file, float32 in the store), for scikit-learn too
    return np.round(X, 6).astype(np.float32).astype(np.float64), y


def _write_svm(path, X, y):
    with open(path, "w") as f:
        for row, label in zip(X, y):
            f.write(f"{label} " + " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(row)) + "\n")


def _sklearn_proba(model, X):
    """scikit-learn's probabilities of the model's coefficients: fitted on the same data for the
    shapes, then given ooc's ``coef_`` and ``intercept_``."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    classes = np.asarray(model.classes_)
    yy = np.resize(classes, len(X))
    coef = np.atleast_2d(model.coef_)[:, :X.shape[1]]
    icpt = np.broadcast_to(np.asarray(model.intercept_, dtype=float), (len(coef),))
    if len(classes) == 2:
        est = LogisticRegression().fit(X, yy)
        est.coef_, est.intercept_ = coef.copy(), icpt.copy()
        return est.predict_proba(X)
    est = OneVsRestClassifier(LogisticRegression()).fit(X, yy)
    for e, c, b in zip(est.estimators_, coef, icpt):
        e.coef_, e.intercept_ = c[None, :].copy(), np.array([b])
    return est.predict_proba(X)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate])  # no shrinking: each case trains a model
@given(k=st.integers(2, 5), loss=st.sampled_from(PROBA_LOSSES), intercept=st.booleans(), seed=st.integers(0, 99))
def test_probabilities_of_every_model_that_has_them(tmp_path_factory, k, loss, intercept, seed):
    tmp = tmp_path_factory.mktemp("proba")
    X, y = _data(k, seed)
    svm = tmp / "d.svm"
    _write_svm(svm, X, y)
    ooc.convert(str(svm), str(tmp / "s.zarr"))
    opts = {"fit_intercept": True} if intercept else {}
    ooc.train(str(tmp / "s.zarr"), str(tmp / "r"), loss=loss, l2=1e-2, tol=1e-8, **opts)
    res = cli("predict", tmp / "r", svm, "--proba")
    assert res.exit_code == 0, (res.stderr, res.exception)
    got = np.array([[float(v) for v in line.split()] for line in res.stdout.splitlines()])
    assert got.shape == (len(X), k)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    model = ooc.load_model(str(tmp / "r"))
    # the same rule as scikit-learn's to the last bits on the same matrix; the command's input is read
    # as the file's text (the store's values are float32): the same within those digits
    ref = _sklearn_proba(model, X)
    np.testing.assert_allclose(model.predict_proba(X), ref, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)
    # the columns are the model's classes: the most probable is the predicted label
    pred = cli("predict", tmp / "r", svm)
    assert [int(v) for v in pred.stdout.split()] == list(np.asarray(model.classes_)[got.argmax(axis=1)])


REFUSED = [(f"{loss}-{k}", ["--loss", loss], k) for loss in OTHER_LOSSES for k in (2, 3)]
REFUSED += [("crammer-singer", ["--loss", "hinge", "--multiclass", "crammer-singer"], 3),
            ("regression", ["--loss", "squared"], 0)]


@pytest.mark.parametrize("case,opts,k", REFUSED, ids=[c[0] for c in REFUSED])
def test_models_without_probabilities_are_refused_with_one_line(tmp_path, case, opts, k):
    X, y = _data(max(k, 2), 0)
    if k == 0:
        y = X @ np.arange(X.shape[1]) + 0.5  # regression values
    svm = tmp_path / "d.svm"
    _write_svm(svm, X, y)
    kind = ["--label-kind", "regression"] if k == 0 else []
    assert cli("convert", svm, tmp_path / "s.zarr", *kind).exit_code == 0
    res = cli("train", tmp_path / "s.zarr", "--out", tmp_path / "r", "--l2", "1e-2", *opts)
    assert res.exit_code == 0, res.stderr
    res = cli("predict", tmp_path / "r", svm, "--proba")
    assert res.exit_code != 0 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--proba" in lines[0] and "not" in lines[0] and "internal error" not in lines[0], lines
