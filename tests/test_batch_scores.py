"""``ooc batch`` reports the scores of the validation file it names: a run finished by an earlier batch
(skipped) is scored on the current file, never shown with the scores of the file it was trained with."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ooc
from ooc.batch import run_one
from ooc.evaluate import evaluate


def _save(path, X, y):
    X = sp.csr_matrix(X)
    np.savez(path, data=X.data, indices=X.indices, indptr=X.indptr, shape=X.shape, y=y)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A squared-loss run trained by a batch that scored ``first.npz``."""
    tmp = tmp_path_factory.mktemp("scores")
    rng = np.random.default_rng(7)
    X = sp.random(80, 6, density=0.6, random_state=7, format="csr", data_rvs=rng.standard_normal)
    y = X @ rng.standard_normal(6) + 0.1 * rng.standard_normal(80)
    store = str(tmp / "d.zarr")
    ooc.convert(X, store, y=y)
    first = str(tmp / "first.npz")
    _save(first, X, y)
    options = {"store": store, "loss": "squared", "l2": 1e-2, "tol": 1e-4}
    row = run_one(str(tmp / "run"), options, validation=first)
    assert row["status"] == "ok" and row["state"] == "trained", row
    return tmp, options, first, row


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 5), shift=st.floats(0.5, 50), same_path=st.booleans(), seed=st.integers(0, 2**16))
def test_skipped_run_is_scored_on_the_current_file(finished, n, shift, same_path, seed):
    """Invariant: a row's validation score is ``evaluate(run, current file)``, whatever file (or content at the
    same path) the run scored when it was trained."""
    tmp, options, first, _ = finished
    rng = np.random.default_rng(seed)
    X = sp.random(n, 6, density=0.8, random_state=seed, format="csr", data_rvs=rng.standard_normal)
    y = rng.standard_normal(n) + shift  # far from the model's predictions: another RMSE than first.npz's
    # another file, or the file the run was scored on rewritten in place (same path, other content)
    other = first if same_path else str(tmp / f"other-{seed}.npz")
    _save(other, X, y)
    row = run_one(str(tmp / "run"), options, validation=other)
    assert row["state"] == "skipped" and row["validation_metric"] == "rmse"
    assert row["validation"] == pytest.approx(evaluate(str(tmp / "run"), other)["rmse"])
