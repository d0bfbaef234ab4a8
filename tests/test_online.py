"""Online updates and validation while training: ``ooc append``, ``ooc resume --store``,
``partial_fit`` on new rows, ``ooc train --warm-start``, ``--validation`` and ``--early-stop``.

Every optimum is checked against an independent reference (scikit-learn's LogisticRegression,
the ridge normal equations) and a fresh ``ooc`` fit on the concatenated data, with the
duality gap certified.
"""

from __future__ import annotations

import importlib
import json
import os

import numpy as np
import pytest
import scipy.sparse as sp
from test_cli import assert_one_line_error, cli, last_json, write_svmlight

import ooc
from ooc.evaluate import evaluate
from ooc.store.append import append, lineage

L2 = 1e-2


def _binary(n=360, d=25, seed=0, noise=0.5):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.25, random_state=seed, format="csr", dtype=np.float64)
    y = np.where(X @ rng.normal(size=d) + noise * rng.normal(size=n) > 0, 1.0, 0.0)
    return X, y


def _sklearn_logistic(X, y, l2):
    """The optimum of 1/n sum log(1 + exp(-y x.w)) + l2/2 ||w||^2 (no intercept), by scikit-learn."""
    from sklearn.linear_model import LogisticRegression

    n = X.shape[0]
    ref = LogisticRegression(C=1.0 / (l2 * n), fit_intercept=False, tol=1e-12, max_iter=10000)
    return ref.fit(X, y).coef_.ravel()


# -- append ------------------------------------------------------------------------------------------
def test_append_writes_the_store_a_conversion_of_the_concatenation_writes(tmp_path):
    X, y = _binary()
    old = ooc.convert(X[:200], tmp_path / "a.zarr", y=y[:200], block_bytes=1500)
    full = ooc.convert(X, tmp_path / "full.zarr", y=y, block_bytes=1500)
    grown = append(old, X[200:], tmp_path / "b.zarr", y=y[200:])
    assert grown.fingerprint == full.fingerprint != old.fingerprint
    assert lineage(grown) == [{"fingerprint": old.fingerprint, "n_rows": 200, "n_cols": X.shape[1]}]
    assert grown.layouts == full.layouts == ("rows", "cols")
    assert (grown.to_scipy("cols") != full.to_scipy("cols")).nnz == 0
    # in place: the path now holds the grown store, whole; a second append extends the lineage
    again = append(str(tmp_path / "a.zarr"), X[200:300], y=y[200:300])
    assert again.path == str(tmp_path / "a.zarr") and again.n_rows == 300
    third = append(again, X[300:], y=y[300:])
    assert third.fingerprint == full.fingerprint
    assert [e["n_rows"] for e in lineage(third)] == [200, 300]
    assert sorted(os.listdir(tmp_path)) == ["a.zarr", "b.zarr", "full.zarr"]  # no temporaries left


def test_append_carries_sample_weights(tmp_path):
    """Weighted rows stay weighted, unweighted rows (old or new) weigh 1: the store a conversion of
    the concatenation with those weights writes."""
    X, y = _binary()
    w = np.random.default_rng(3).uniform(0.5, 2.0, size=len(y))
    full_w = np.concatenate([w[:200], np.ones(len(y) - 200)])
    old = ooc.convert(X[:200], tmp_path / "a.zarr", y=y[:200], sample_weight=w[:200], block_bytes=1500)
    grown = append(old, X[200:], tmp_path / "b.zarr", y=y[200:])
    full = ooc.convert(X, tmp_path / "full.zarr", y=y, sample_weight=full_w, block_bytes=1500)
    assert np.array_equal(grown.read_weights(0, len(y)), full_w)
    assert grown.fingerprint == full.fingerprint
    plain = ooc.convert(X[:200], tmp_path / "p.zarr", y=y[:200], block_bytes=1500)
    both = append(plain, X[200:], tmp_path / "c.zarr", y=y[200:], sample_weight=w[200:])
    assert np.array_equal(both.read_weights(0, len(y)), np.concatenate([np.ones(200), w[200:]]))


def test_append_errors_are_one_line_and_write_nothing(tmp_path):
    X, y = _binary(n=60)
    write_svmlight(tmp_path / "a.svm", X[:40], y[:40])
    write_svmlight(tmp_path / "b.svm", X[40:], np.where(y[40:] > 0, 5.0, 0.0))
    store = tmp_path / "s.zarr"
    cli("convert", tmp_path / "a.svm", store)
    fp = ooc.open_store(store).fingerprint
    err = assert_one_line_error(cli("append", store, tmp_path / "b.svm", ok=False))
    assert "b.svm" in err and "label 5" in err
    err = assert_one_line_error(cli("append", store, tmp_path / "missing.svm", ok=False))
    assert "missing.svm" in err
    err = assert_one_line_error(cli("append", store, tmp_path / "a.svm", "--out", store / "inner", ok=False))
    assert "inside the store" in err
    assert ooc.open_store(store).fingerprint == fp
    assert sorted(os.listdir(tmp_path)) == ["a.svm", "b.svm", "s.zarr"]


# -- append + resume --store -------------------------------------------------------------------------
def test_append_then_resume_reaches_the_certified_optimum_of_all_rows(tmp_path):
    X, y = _binary()
    write_svmlight(tmp_path / "old.svm", X[:240], y[:240])
    write_svmlight(tmp_path / "new.svm", X[240:], y[240:])
    store, run = tmp_path / "s.zarr", tmp_path / "run"
    opts = ["--loss", "logistic", "--l2", L2, "--tol", 1e-10, "--solver", "sdca", "--block-bytes", 1024]
    cli("convert", tmp_path / "old.svm", store, "--dtype", "float64")
    first = last_json(cli("train", store, "--out", run, *opts, "--json").stdout)
    assert first["converged"]
    cli("append", store, tmp_path / "new.svm")
    res = last_json(cli("resume", run, "--store", store, "--json").stdout)
    assert res["converged"] and res["rel_gap"] <= 1e-10 and res["generation"] == 1
    # the optimum of the full data: scikit-learn's, and a fresh ooc fit on the same store
    w = ooc.load_model(str(run)).coef_
    assert np.abs(w - _sklearn_logistic(X, y, L2)).max() < 1e-4
    fresh = last_json(cli("train", store, "--out", tmp_path / "fresh", *opts, "--json").stdout)
    assert abs(fresh["primal"] - res["primal"]) <= 2e-10 * abs(fresh["primal"])
    # run.json records the new trajectory; its history lines follow the old ones
    cfg = json.loads((run / "run.json").read_text())
    g = cfg["generations"][0]
    assert cfg["store_fingerprint"] == ooc.open_store(store).fingerprint and cfg["n_rows"] == 360
    assert g["parent_rows"] == 240 and g["parent_epochs"] == first["epochs"]
    hist = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert len(hist) == g["history_len"] + res["epochs"] + 1
    assert all("generation" not in h for h in hist[:g["history_len"]])
    assert [h["epoch"] for h in hist[g["history_len"]:]] == list(range(res["epochs"] + 1))
    # the same store again: a plain resume of the finished trajectory
    assert last_json(cli("resume", run, "--store", store, "--json").stdout)["primal"] == res["primal"]


def test_resume_store_refusals_are_one_line(tmp_path):
    X, y = _binary(n=80)
    a = ooc.convert(X[:50], tmp_path / "a.zarr", y=y[:50])
    other = ooc.convert(X[10:], tmp_path / "other.zarr", y=y[10:])
    cli("train", a.path, "--out", tmp_path / "run", "--l2", L2, "--max-epochs", 2)
    err = assert_one_line_error(cli("resume", tmp_path / "run", "--store", other.path, ok=False))
    assert "does not start with the rows this run trained on" in err
    grown = append(a, X[50:], tmp_path / "b.zarr", y=y[50:])
    err = assert_one_line_error(cli("resume", tmp_path / "run", "--store", tmp_path / "nope.zarr", ok=False))
    assert "nope.zarr" in err
    # a run whose store grew in place: the plain resume says how to go on
    append(a.path, X[50:], y=y[50:])
    err = assert_one_line_error(cli("resume", tmp_path / "run", ok=False))
    assert "--store" in err
    assert grown.n_rows == 80


@pytest.mark.parametrize("memory", ["auto", "8KiB"])  # the duals in memory, or paged from per-block files
def test_a_continuation_killed_before_its_first_checkpoint_resumes_to_the_same_model(tmp_path, monkeypatch, no_plot,
                                                                                    memory):
    T = importlib.import_module("ooc.train")

    X, y = _binary()
    a = ooc.convert(X[:240], tmp_path / "a.zarr", y=y[:240], dtype="float64")
    opts = dict(l2=L2, tol=1e-9, solver="sdca", block_bytes=1024, memory=memory)
    for name in ("killed", "whole"):
        res = ooc.train(a, tmp_path / name, **opts).result
        assert res["dual_store"] == ("paged" if memory == "8KiB" else "memory")
    grown = append(a, X[240:], tmp_path / "b.zarr", y=y[240:])
    whole = ooc.resume(str(tmp_path / "whole"), store=grown)

    def killed(*args, **kwargs):  # dies right after the commit to the new store, nothing trained yet
        raise KeyboardInterrupt

    monkeypatch.setattr(T, "_execute", killed)
    with pytest.raises(KeyboardInterrupt):
        ooc.resume(str(tmp_path / "killed"), store=grown)
    monkeypatch.undo()
    again = ooc.resume(str(tmp_path / "killed"))  # a plain resume: the new trajectory from the copied duals
    assert np.array_equal(again.model.coef_, whole.model.coef_)
    assert [h["primal"] for h in again.history] == [h["primal"] for h in whole.history]


def test_a_continuation_stopped_at_max_epochs_resumes_bit_exactly(tmp_path, no_plot):
    X, y = _binary()
    a = ooc.convert(X[:240], tmp_path / "a.zarr", y=y[:240], dtype="float64")
    opts = dict(l2=1e-4, tol=1e-12, solver="sdca", block_bytes=1024, max_epochs=2)
    for name in ("stopped", "whole"):
        with pytest.warns(ooc.ConvergenceWarning):
            ooc.train(a, tmp_path / name, **opts)
    grown = append(a, X[240:], tmp_path / "b.zarr", y=y[240:])
    with pytest.warns(ooc.ConvergenceWarning):
        ooc.resume(str(tmp_path / "stopped"), max_epochs=2, store=grown)
    with pytest.warns(ooc.ConvergenceWarning):
        r1 = ooc.resume(str(tmp_path / "stopped"), max_epochs=5)
    with pytest.warns(ooc.ConvergenceWarning):
        r2 = ooc.resume(str(tmp_path / "whole"), max_epochs=5, store=grown)
    assert np.array_equal(r1.model.coef_, r2.model.coef_)
    assert [h["dual"] for h in r1.history] == [h["dual"] for h in r2.history]


# -- partial_fit -------------------------------------------------------------------------------------
def test_partial_fit_on_two_mini_batches_equals_fit_on_their_concatenation(no_plot):
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(3)
    X = sp.random(300, 20, density=0.5, random_state=3, format="csr")
    y = X @ rng.normal(size=20) + 0.1 * rng.normal(size=300)
    est = ooc.LinearRegressor(tol=1e-10, bias=0.0)
    est.partial_fit(X[:180], y[:180])
    est.partial_fit(X[180:], y[180:])  # new rows: appended, the run goes on on all 300
    assert est.n_iter_ == 1
    for _ in range(200):
        if est.converged_:
            break
        est.partial_fit(X[180:], y[180:])  # the same batch again: one more pass
    assert est.converged_ and est.rel_gap_ <= 1e-10
    # l2 = 1/n of all rows: the ridge normal equations (X'X/n + l2 I) w = X'y/n
    n = X.shape[0]
    ref = np.linalg.solve((X.T @ X).toarray() / n + np.eye(20) / n, X.T @ y / n)
    fit = ooc.LinearRegressor(tol=1e-10, bias=0.0).fit(X, y)
    assert np.abs(est.coef_ - ref).max() < 1e-3
    assert np.abs(est.coef_ - fit.coef_).max() < 1e-3
    assert abs(est.primal_ - fit.primal_) <= 1e-9 * max(1.0, abs(fit.primal_))


def test_partial_fit_with_sample_weights_reaches_the_weighted_optimum(no_plot):
    """Weighted mini-batches: the optimum of the weighted problem on all rows,
    ``(X' C X / n + l2 I) w = X' C y / n`` with ``l2 = 1/n``."""
    rng = np.random.default_rng(4)
    X = sp.random(300, 20, density=0.5, random_state=4, format="csr")
    y = X @ rng.normal(size=20) + 0.1 * rng.normal(size=300)
    c = rng.uniform(0.2, 3.0, size=300)
    est = ooc.LinearRegressor(tol=1e-10, bias=0.0)
    est.partial_fit(X[:180], y[:180], sample_weight=c[:180])
    est.partial_fit(X[180:], y[180:], sample_weight=c[180:])
    for _ in range(300):
        if est.converged_:
            break
        est.partial_fit(X[180:], y[180:], sample_weight=c[180:])
    assert est.converged_ and est.rel_gap_ <= 1e-10
    n = X.shape[0]
    XC = X.multiply(c[:, None]).tocsr()
    ref = np.linalg.solve((X.T @ XC).toarray() / n + np.eye(20) / n, XC.T @ y / n)
    fit = ooc.LinearRegressor(tol=1e-10, bias=0.0, max_epochs=5000).fit(X, y, sample_weight=c)
    assert fit.converged_
    assert abs(est.primal_ - fit.primal_) <= 1e-9 * max(1.0, abs(fit.primal_))
    # strong convexity (l2 = 1/n): ||w - w*|| <= sqrt(2 gap / l2)
    assert np.linalg.norm(est.coef_ - ref) <= np.sqrt(2 * est.gap_ * n) + 1e-9


def test_partial_fit_refuses_a_new_class():
    pytest.importorskip("sklearn")
    X, y = _binary(n=60)
    est = ooc.LinearClassifier()
    est.partial_fit(X[:40], y[:40])
    with pytest.raises(ValueError, match="classes_"):
        est.partial_fit(X[40:], np.full(20, 7.0))


# -- warm start --------------------------------------------------------------------------------------
def test_train_warm_start_reaches_the_cold_optimum(tmp_path):
    X, y = _binary()
    st = ooc.convert(X, tmp_path / "s.zarr", y=y, dtype="float64")
    cli("train", st.path, "--out", tmp_path / "a", "--l2", 1e-1, "--tol", 1e-10)
    warm = last_json(cli("train", st.path, "--out", tmp_path / "b", "--l2", L2, "--tol", 1e-10,
                         "--warm-start", tmp_path / "a", "--json").stdout)
    assert warm["converged"]
    assert np.abs(ooc.load_model(str(tmp_path / "b")).coef_ - _sklearn_logistic(X, y, L2)).max() < 1e-4
    err = assert_one_line_error(cli("train", st.path, "--out", tmp_path / "c", "--warm-start", tmp_path / "x", ok=False))
    assert "--warm-start" in err


# -- validation and early stopping -------------------------------------------------------------------
def test_the_validation_metric_is_ooc_evaluate_of_that_epochs_model(tmp_path, no_plot):
    X, y = _binary(n=400)
    # training and validation data read the same way (1-based svmlight): the validation file follows the store's recipe
    write_svmlight(tmp_path / "s.svm", X[:300], y[:300])
    st = ooc.convert(tmp_path / "s.svm", tmp_path / "s.zarr", n_features=X.shape[1], index_base=1)
    write_svmlight(tmp_path / "v.svm", X[300:], y[300:])
    v = str(tmp_path / "v.svm")
    opts = dict(l2=1e-4, tol=1e-12, solver="sdca", validation=v, validation_metric="logloss")
    with pytest.warns(ooc.ConvergenceWarning):
        long = ooc.train(st, tmp_path / "long", max_epochs=3, **opts)
    assert [h["validation_metric"] for h in long.history] == ["logloss"] * 4
    for k in (1, 2):  # the model of epoch k is what a run stopped at max_epochs=k keeps
        with pytest.warns(ooc.ConvergenceWarning):
            short = ooc.train(st, tmp_path / f"e{k}", max_epochs=k, **opts)
        assert long.history[k]["validation"] == pytest.approx(evaluate(short.path, v)["logloss"], rel=1e-12)
    assert long.result["validation"] == pytest.approx(evaluate(long.path, v)["logloss"], rel=1e-12)
    best = min(h["validation"] for h in long.history)
    assert long.result["best_validation"] == best


def test_early_stop_ends_the_run_after_k_states_without_improvement(tmp_path):
    X, y = _binary(n=400, noise=2.0)
    st = ooc.convert(X[:250], tmp_path / "s.zarr", y=y[:250])
    v = ooc.convert(X[250:], tmp_path / "v.zarr", y=y[250:])
    res = last_json(cli("train", st.path, "--out", tmp_path / "run", "--l2", 1e-6, "--tol", 1e-12,
                        "--validation", v.path, "--validation-metric", "logloss", "--early-stop", 2,
                        "--max-epochs", 100, "--json").stdout)
    assert res["early_stopped"] and not res["converged"] and res["epochs"] < 100
    hist = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    scores = [h["validation"] for h in hist]
    assert res["best_validation"] == min(scores) == scores[res["best_epoch"]]
    assert len(scores) - 1 - res["best_epoch"] == 2  # exactly K states after the best, none better
    assert os.path.exists(tmp_path / "run" / "convergence.png")


def test_validation_option_errors_are_one_line(tmp_path):
    X, y = _binary(n=60)
    st = ooc.convert(X, tmp_path / "s.zarr", y=y)
    err = assert_one_line_error(cli("train", st.path, "--out", tmp_path / "r", "--early-stop", 2, ok=False))
    assert "--early-stop needs --validation" in err
    err = assert_one_line_error(cli("train", st.path, "--out", tmp_path / "r", "--validation", tmp_path / "no.svm",
                                    ok=False))
    assert "--validation" in err and "no.svm" in err
    err = assert_one_line_error(cli("train", st.path, "--out", tmp_path / "r", "--validation", st.path,
                                    "--validation-metric", "rmse", ok=False))
    assert "--validation-metric rmse" in err
    assert not os.path.exists(tmp_path / "r")


# -- the docs' tour ----------------------------------------------------------------------------------
def test_the_tour_commands_work_on_the_demo_data(tmp_path, no_plot):
    import shlex

    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "getting-started.rst")) as f:
        page = f.read()
    block = page[page.index("Validation while training, warm starts and new rows"):]
    block = block[:block.index("Many runs")]
    commands = [ln.split("#")[0].strip() for ln in block.splitlines() if ln.strip().startswith("ooc ")]
    assert [c.split()[1] for c in commands] == ["train", "train", "train", "append", "resume"]
    cli("demo", "--dir", tmp_path / "demo", "--rows", 2000)
    for command in commands:
        args = [a.replace("demo/", f"{tmp_path / 'demo'}/") for a in shlex.split(command)[1:]]
        res = cli(*args)
    out = last_json(res.stdout)
    assert out["converged"] and out["generation"] == 1
    assert json.loads((tmp_path / "demo" / "run" / "run.json").read_text())["n_rows"] == 2500


def test_a_batch_run_scores_its_validation_data_every_epoch(tmp_path, no_plot):
    from ooc.batch import run_one

    X, y = _binary(n=300)
    write_svmlight(tmp_path / "s.svm", X[:200], y[:200])
    st = ooc.convert(tmp_path / "s.svm", tmp_path / "s.zarr", n_features=X.shape[1], index_base=1)
    write_svmlight(tmp_path / "v.svm", X[200:], y[200:])
    row = run_one(str(tmp_path / "run"), {"store": st.path, "l2": L2, "tol": 1e-8}, str(tmp_path / "v.svm"))
    assert row["status"] == "ok", row
    hist = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    assert all(h["validation_metric"] == "accuracy" for h in hist)
    assert row["validation"] == hist[-1]["validation"] == evaluate(str(tmp_path / "run"), str(tmp_path / "v.svm"))["accuracy"]


def test_sigkill_during_a_continuation_then_resume_is_bit_exact(tmp_path, no_plot):
    import time

    from test_resume import Child

    X, y = _binary(n=900, d=40)
    a = ooc.convert(X[:600], tmp_path / "a.zarr", y=y[:600], dtype="float64")
    opts = dict(l2=1e-3, tol=1e-9, solver="sdca", block_bytes=4096)
    ooc.train(a, tmp_path / "killed", checkpoint_every=0.0, **opts)  # a checkpoint at every block boundary
    ooc.train(a, tmp_path / "whole", **opts)
    grown = append(a, X[600:], tmp_path / "b.zarr", y=y[600:])
    whole = ooc.resume(str(tmp_path / "whole"), store=grown)
    hist = tmp_path / "killed" / "history.jsonl"

    def new_lines():
        return sum('"generation"' in line for line in hist.read_text().splitlines())

    # killed while continuing (after its first certified state), then killed again while resuming
    landed = []
    for args, lines in ((["resume", tmp_path / "killed", "--store", grown.path], 1),
                        (["resume", tmp_path / "killed"], 3)):
        child = Child(args, real=False)
        t_end = time.monotonic() + 120
        while child.poll() is None and new_lines() < lines and time.monotonic() < t_end:
            time.sleep(0.002)
        child.kill()
        landed.append(child.rc == -9)
    assert any(landed)  # not a run that finished before it could be killed
    again = ooc.resume(str(tmp_path / "killed"))
    assert np.array_equal(again.model.coef_, whole.model.coef_)
    assert [h["dual"] for h in again.history] == [h["dual"] for h in whole.history]


# -- the engine's watch ------------------------------------------------------------------------------
@pytest.mark.parametrize("fused", [True, False])
def test_the_engine_stops_after_patience_states_without_a_better_score_and_resumes_to_the_same_stop(tmp_path, fused):
    from test_engine import Toy

    from ooc.engine import Watch
    from ooc.engine import run as run_solver
    from ooc.runs.rundir import RunDir

    class Scored(Toy):
        def certified_w(self):
            return self.result()["w"]

    # the toy's state after e epochs is x = 0.5^e: the score of epoch e is SCORES[e] (lower is better)
    scores = [5.0, 3.0, 4.0, 2.0, 2.5, 2.6, 1.0, 0.5]
    watch = Watch(lambda w: {"validation": scores[round(-np.log2(w[0, 0]))]}, "validation", False, 2)
    full_rd = RunDir.create(str(tmp_path / "full"), {})
    full = run_solver(Scored(full_rd, tol=1e-12, fused=fused), 100, resume=False, watch=watch)
    # epoch 3 is the best; 4 and 5 do not improve on it: the run stops at 5, keeping that state
    assert full["early_stopped"] and not full["converged"] and full["epochs"] == 5
    assert (full["best_epoch"], full["best_validation"]) == (3, 2.0) and full["w"][0, 0] == pytest.approx(0.5 ** 5)
    assert [e["validation"] for e in full_rd.history()] == scores[:6]
    # killed inside epoch 4 and resumed: the count of states without improvement comes from the history
    rd = RunDir.create(str(tmp_path / "cut"), {})
    with pytest.raises(KeyboardInterrupt):
        run_solver(Scored(rd, tol=1e-12, fused=fused, checkpoint_every=0.0, die_at=18), 100, resume=False, watch=watch)
    again = run_solver(Scored(RunDir.open(rd.path), tol=1e-12, fused=fused), 100, resume=True, watch=watch)
    assert (again["epochs"], again["best_epoch"], again["w"][0, 0]) == (5, 3, full["w"][0, 0])
    # patience 0: never stops early (and a higher-is-better score is compared the other way)
    plain = Watch(lambda w: {"validation": float(w[0, 0])}, "validation", True, 0)
    res = run_solver(Scored(RunDir.create(str(tmp_path / "plain"), {}), tol=1e-3, fused=fused), 100, resume=False,
                     watch=plain)
    assert res["converged"] and not res["early_stopped"] and res["best_epoch"] == 0
