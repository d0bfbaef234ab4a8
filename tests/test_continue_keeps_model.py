"""``ooc resume RUN --store GROWN`` never replaces a converged model by an unconverged one
(docs/training.rst, "Warm starts and new rows").

Invariant, for any loss, store split and number of continuation epochs: after the continuation, the run's
model is the continuation's when it converged (or when the previous model had not); otherwise it is the
previous store's converged model, byte for byte, and the result and a warning say so (``kept_model``,
naming the model directory and the resume that goes on). A later plain resume that converges replaces
it. The stop reason is read from the continuation's own states: a run is never said to have stalled from
its first states on the new rows (the previous store's last gap is not a state of this trajectory).
"""

from __future__ import annotations

import json

import numpy as np
import scipy.sparse as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_cli import cli, last_json, write_svmlight

import ooc
from ooc.engine import DIAGNOSE_WINDOW


def _data(n, d, seed):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.3, random_state=seed, format="csr", dtype=np.float64)
    y = np.where(X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


@settings(max_examples=6, deadline=None)
@given(loss=st.sampled_from(["logistic", "smooth-hinge", "squared", "hinge"]), epochs=st.integers(1, 4),
       n_old=st.integers(60, 160), n_new=st.integers(20, 160), seed=st.integers(0, 3))
@example(loss="logistic", epochs=1, n_old=120, n_new=120, seed=0)  # the converged model was replaced
def test_a_continuation_keeps_a_converged_model_until_it_converges(tmp_path_factory, loss, epochs, n_old, n_new,
                                                                    seed):
    tmp = tmp_path_factory.mktemp("cont")
    X, y = _data(n_old + n_new, 12, seed)
    write_svmlight(tmp / "old.svm", X[:n_old], y[:n_old])
    write_svmlight(tmp / "new.svm", X[n_old:], y[n_old:])
    store, run = tmp / "s.zarr", tmp / "run"
    cli("convert", tmp / "old.svm", store, "--dtype", "float64")
    opts = ["--loss", loss, "--l2", "0.01", "--tol", "1e-6" if loss != "hinge" else "1e-3"]
    first = last_json(cli("train", store, "--out", run, *opts, "--max-epochs", "300", "--json").stdout)
    before = (run / "model" / "coef.npy").read_bytes()
    cli("append", store, tmp / "new.svm")
    res_cli = cli("resume", run, "--store", store, "--max-epochs", epochs, "--json")
    res = last_json(res_cli.stdout)
    assert res["epochs"] == epochs or res["converged"]
    kept = first["converged"] and not res["converged"]
    assert ((run / "model" / "coef.npy").read_bytes() == before) == kept
    metrics = json.loads((run / "model" / "metrics.json").read_text())
    if kept:
        assert "kept_model" in res and str(run / "model") in res["kept_model"]
        assert "kept_model" not in metrics and metrics["converged"] and metrics.get("generation", 0) == 0
        assert "stays in" in res_cli.stderr and f"ooc resume {run}" in res_cli.stderr
        assert ooc.load_model(str(run)).coef_.tolist() == np.load(run / "model" / "coef.npy").tolist()
    else:
        assert "kept_model" not in res and metrics.get("generation") == 1
    # the stop reason comes from the continuation's own states
    hist = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    own = [h for h in hist if h.get("generation") == 1]
    if not res["converged"]:
        reason = res["stop_reason"]
        if len(own) < 3:
            assert reason.startswith("only"), reason
        if "stalled" in reason:
            win = own[-DIAGNOSE_WINDOW:]
            assert len(own) >= 3 and win[-1]["rel_gap"] >= win[0]["rel_gap"], (reason, own)
    # a plain resume that converges replaces the kept model
    if kept:
        again = last_json(cli("resume", run, "--max-epochs", "400", "--json").stdout)
        if again["converged"]:
            assert "kept_model" not in again and (run / "model" / "coef.npy").read_bytes() != before
            assert json.loads((run / "model" / "metrics.json").read_text())["generation"] == 1


def test_a_continuation_not_yet_converged_cannot_continue_on_another_store(tmp_path):
    X, y = _data(240, 12, 0)
    write_svmlight(tmp_path / "old.svm", X[:120], y[:120])
    write_svmlight(tmp_path / "new.svm", X[120:180], y[120:180])
    write_svmlight(tmp_path / "more.svm", X[180:], y[180:])
    store, run = tmp_path / "s.zarr", tmp_path / "run"
    cli("convert", tmp_path / "old.svm", store)
    assert last_json(cli("train", store, "--out", run, "--l2", "0.01", "--json").stdout)["converged"]
    cli("append", store, tmp_path / "new.svm")
    assert "kept_model" in last_json(cli("resume", run, "--store", store, "--max-epochs", 1, "--json").stdout)
    cli("append", store, tmp_path / "more.svm", "--out", tmp_path / "t.zarr")
    res = cli("resume", run, "--store", tmp_path / "t.zarr", ok=False)
    assert res.exit_code == 1 and "has not certified a model yet" in res.stderr
    assert f"ooc resume {run}" in res.stderr
