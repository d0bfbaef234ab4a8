"""Every model refuses input of another width than its own (docs/formats.rst, "Input width").

``LinearModel.decision_function``/``predict``/``predict_proba`` on arrays and scipy matrices of any
width but the model's, and the estimators on store paths, refuse with one line giving both widths;
the model's own width is accepted. (``ooc predict``/``evaluate`` on files and stores:
tests/test_wrong_use.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import ooc
from ooc.model import LinearModel


def _model(d: int, k: int) -> LinearModel:
    rng = np.random.default_rng(d * 10 + k)
    if k == 2:
        return LinearModel(rng.normal(size=d), 0.1, [0.0, 1.0], "logistic", "binary")
    if k == 0:
        return LinearModel(rng.normal(size=d), 0.0, None, "squared", "regression")
    return LinearModel(rng.normal(size=(k, d)), np.zeros(k), np.arange(k, dtype=float), "logistic", "multiclass")


@settings(max_examples=40, deadline=None)
@given(d=st.integers(1, 12), shift=st.integers(-3, 3), k=st.sampled_from([0, 2, 3]),
       kind=st.sampled_from(["dense", "csr", "csc", "coo", "list"]),
       method=st.sampled_from(["predict", "decision_function", "predict_proba"]))
def test_linear_model_refuses_another_width(d, shift, k, kind, method):
    m = _model(d, k)
    width = d + shift
    if width < 0 or (method == "predict_proba" and k == 0):
        return
    X = np.ones((3, width))
    X = {"dense": X, "list": X.tolist(), "csr": sp.csr_matrix(X), "csc": sp.csc_matrix(X),
         "coo": sp.coo_matrix(X)}[kind]
    if shift == 0:
        out = getattr(m, method)(X)
        assert len(out) == 3
        return
    with pytest.raises(ValueError) as exc:
        getattr(m, method)(X)
    msg = str(exc.value)
    assert "\n" not in msg and f"X has {width} features, but the model has {d}" in msg


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 5))
    y = (X[:, 0] > 0).astype(int)
    return ooc.LinearClassifier(l2=1e-2, tol=1e-4).fit(X, y), X, y


@pytest.mark.parametrize("width", [3, 4, 6])
def test_estimators_refuse_a_store_of_another_width(fitted, tmp_path, width):
    est, X, y = fitted
    path = str(tmp_path / "s.zarr")
    ooc.convert(np.ones((4, width)), path, y=np.array([0, 1, 0, 1]))
    with pytest.raises(ValueError, match=f"the store has {width} features but LinearClassifier was fitted on 5"):
        est.predict(path)


def test_a_loaded_model_refuses_a_wider_array(tmp_path):
    # the newcomer's case: ooc.load_model(run).predict(X) with one column too many returned numbers
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 4))
    y = (X[:, 0] > 0).astype(float)
    ooc.convert(X, str(tmp_path / "s.zarr"), y=y)
    ooc.train(str(tmp_path / "s.zarr"), str(tmp_path / "run"), l2=1e-2, tol=1e-3)
    m = ooc.load_model(str(tmp_path / "run"))
    assert m.predict(X).shape == (30,)
    with pytest.raises(ValueError, match="X has 5 features, but the model has 4"):
        m.predict(np.hstack([X, np.ones((30, 1))]))
