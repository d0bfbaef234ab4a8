"""Batch runs and distributed training on Dask: a LocalCluster and a real scheduler with two workers."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import ooc
from ooc._cpu import available_cpus
from ooc.batch import run_batch
from ooc.synth import SynthSource

OOC = [sys.executable, "-m", "ooc.cli"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("dask")
    store = str(root / "train.zarr")
    ooc.convert(SynthSource(3000, 300, 10, seed=5), store, dtype="float64", block_bytes=8000)
    return root, store


def _local_cluster(workers: int, threads: int = 1):
    """The scheduler address of a local cluster of ``workers`` processes of ``threads`` threads, closed after."""
    from ooc.dask_client import dask_client

    client, cluster = dask_client(None, workers, threads_per_worker=threads)
    try:
        yield cluster.scheduler_address
    finally:
        client.close()
        cluster.close()


@pytest.fixture(scope="module")
def workers():
    """The scheduler address of two worker processes kept for the module's distributed trainings that
    are not about starting, naming or losing a cluster (``local:2`` is tested on its own): a local
    cluster takes seconds to start and stop, and each new worker process loads the kernels again."""
    yield from _local_cluster(2)


def test_two_local_clusters_at_once_warn_of_no_port(workers):
    """ooc's local clusters listen on a free port each: one started beside another (``workers``, made
    the same way) prints no "Port 8787 is already in use"."""
    import warnings

    from ooc.dask_client import dask_client

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        client, cluster = dask_client(None, 1)
        client.close()
        cluster.close()
    assert not [w for w in seen if "already in use" in str(w.message)], [str(w.message) for w in seen]


def _read_results(out):
    with open(os.path.join(out, "results.csv")) as f:
        return list(csv.DictReader(f))


def _spec(root, name, stores, l2s, extra=""):
    spec = root / f"{name}.toml"
    spec.write_text(
        f'[batch]\nout = "{name}-out"\n\n[grid]\nstore = {json.dumps(stores)}\nl2 = {json.dumps(l2s)}\n'
        f'loss = ["logistic"]\ntol = [1e-6]\n{extra}'
    )
    return str(spec)


def test_grid_with_a_broken_entry_finishes_the_others_and_rerun_skips(data):
    root, store = data
    spec = _spec(root, "grid", [store, str(root / "missing.zarr")], [1e-2, 1e-3])
    rows = run_batch(spec, workers=2)
    assert len(rows) == 4
    by_store = {}
    for r in rows:
        by_store.setdefault(r["store"], []).append(r)
    assert all(r["status"] == "ok" and r["converged"] for r in by_store[store])
    broken = by_store[str(root / "missing.zarr")]
    assert all(r["status"] == "failed" and "no such store" in r["error"] for r in broken)
    out = str(root / "grid-out")
    csv_rows = _read_results(out)
    assert len(csv_rows) == 4
    assert {"run", "store", "loss", "l2", "l1", "solver", "status", "primal", "gap", "epochs", "seconds",
            "error"} <= set(csv_rows[0])
    assert os.path.exists(os.path.join(out, "summary.md")) and os.path.exists(os.path.join(out, "comparison.png"))
    # every finished run is an ordinary run directory with a certified model
    for r in by_store[store]:
        m = ooc.load_model(os.path.join(out, r["run"]))
        assert m.coef_.shape == (300,)
    again = run_batch(spec, workers=2)
    assert sorted(r.get("state") for r in again if r["status"] == "ok") == ["skipped", "skipped"]
    # --memory auto on a worker: its share of what the batch may use (ooc.batch.local_memory_share: of the limit
    # this process runs under) or of the machine (Dask's memory limit), whichever is tighter; never all of it
    for r in by_store[store]:
        with open(os.path.join(out, r["run"], "model", "metrics.json")) as f:
            metrics = json.load(f)
        assert metrics["memory_source"] in ("this worker's share of the batch's memory limit",
                                            "Dask worker memory limit"), metrics
        # --threads 0 (the default): the two workers of this machine share its cores
        with open(os.path.join(out, r["run"], "run.json")) as f:
            assert json.load(f)["threads"] == max(1, available_cpus() // 2)


def test_batch_spec_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[batch]\nout='x'\n[grid]\nstore=['a']\nlearning_rate=[1]\n")
    r = subprocess.run(OOC + ["batch", str(bad)], capture_output=True, text=True)
    assert r.returncode != 0
    assert "bad.toml" in r.stderr and "learning_rate" in r.stderr and "Traceback" not in r.stderr


def _start_cluster(tmp_path):
    sched_file = str(tmp_path / "scheduler.json")
    env = dict(os.environ)
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--scheduler-file", sched_file, "--no-dashboard"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)]
    try:
        # the scheduler writes its file in place: read it until it is whole
        address = None
        deadline = time.monotonic() + 60
        while address is None and time.monotonic() < deadline:
            try:
                with open(sched_file) as f:
                    address = json.load(f)["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        assert address is not None, "the scheduler did not start in 60 s"
        for _ in range(2):
            procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address,
                                           "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        from distributed import Client

        with Client(address, timeout=30) as c:
            c.wait_for_workers(2, timeout=60)
    except BaseException:
        _stop(procs)  # a cluster that did not start leaves no process behind
        raise
    return address, procs


def _stop(procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


@pytest.fixture
def cluster(tmp_path):
    address, procs = _start_cluster(tmp_path)
    yield address, procs
    _stop(procs)


def test_killing_a_worker_mid_batch_leaves_every_run_finished_or_resumable(data, cluster, tmp_path):
    root, store = data
    address, procs = cluster
    spec = _spec(root, "killed", [store], [1e-2, 3e-3, 1e-3, 3e-4], extra="max_epochs = [400]\n")
    out = str(root / "killed-out")
    shutil.rmtree(out, ignore_errors=True)
    batch = subprocess.Popen(OOC + ["batch", spec, "--scheduler", address], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    time.sleep(4.0)
    procs[1].kill()  # one worker dies mid-batch; the scheduler moves its task or reports it
    batch.communicate(timeout=240)
    # a re-run (on a LocalCluster) skips finished runs and resumes interrupted ones: all end ok
    rows = run_batch(spec, workers=2)
    assert len(rows) == 4
    assert all(r["status"] == "ok" and r["converged"] for r in rows), rows
    assert {r["state"] for r in rows} <= {"skipped", "resumed", "trained"}


def _reference(store, tmp_path, **opts):
    return ooc.train(store, str(tmp_path / "single"), **opts)


def _same_optimum(dist, single, tol: float, l2: float, scale: float | None = None) -> None:
    """Both runs certified to ``tol``: their primal values agree within the two gaps, and their
    coefficients within ``||w - w*||^2 <= 2 gap / l2`` of the optimum each; a gap is ``tol`` times
    ``scale`` (default ``max(1, |P|)``, what ``--tol`` bounds)."""
    assert dist.result["converged"] and single.result["converged"]
    assert dist.result["primal"] >= dist.result["dual"]
    scale = max(1.0, abs(single.result["primal"])) if scale is None else scale
    assert abs(dist.result["primal"] - single.result["primal"]) <= 2 * tol * scale
    assert np.linalg.norm(dist.model.coef_ - single.model.coef_) <= 2 * np.sqrt(2 * tol * scale / l2)


@pytest.mark.parametrize("how", ["local", "scheduler"])
def test_distributed_training_reaches_the_single_machine_optimum(data, tmp_path, how, request):
    root, store = data
    opts = dict(loss="logistic", l2=1e-2, tol=1e-12, max_epochs=400, bias=1.0)
    single = _reference(store, tmp_path, **opts)
    if how == "local":
        target, url = "local:2", store
    else:
        address, _ = request.getfixturevalue("cluster")
        target, url = address, "file://" + os.path.abspath(store)  # workers open the store by fsspec URL
    dist = ooc.train(url, str(tmp_path / "dist"), distributed=target, **opts)
    assert dist.result["converged"]
    assert dist.result["primal"] >= dist.result["dual"]
    a, b = single.model.coef_, dist.model.coef_
    assert np.abs(a - b).max() <= 1e-6 * np.abs(a).max()
    assert abs(dist.result["primal"] - single.result["primal"]) <= 1e-6 * abs(single.result["primal"])
    hist = [json.loads(line) for line in open(os.path.join(dist.path, "history.jsonl"))]
    assert hist[-1]["workers"] == 2 and hist[-1]["bytes_sent"] > 0


def test_distributed_run_resumes_bit_for_bit(data, tmp_path, workers):
    root, store = data
    opts = dict(loss="logistic", l2=1e-3, tol=1e-14, bias=1.0, distributed=workers, local_passes=2)
    full = ooc.train(store, str(tmp_path / "full"), max_epochs=6, **opts)
    part = ooc.train(store, str(tmp_path / "part"), max_epochs=3, **opts)
    assert part.result["epochs"] == 3
    resumed = ooc.resume(part.path, max_epochs=6)
    assert resumed.result["epochs"] == full.result["epochs"] == 6
    assert np.array_equal(full.model.coef_, resumed.model.coef_)
    # a run.json without one of its options (here local_passes: rounds visit rows in another order without
    # it) is refused rather than continued with today's default
    from ooc.fsutil import seal_json
    from ooc.runs.rundir import RunError

    with open(os.path.join(part.path, "run.json")) as f:
        cfg = json.load(f)
    cfg.pop("local_passes")
    cfg.pop("checksum")
    with open(os.path.join(part.path, "run.json"), "wb") as f:
        f.write(seal_json(cfg))
    with pytest.raises(RunError, match="run.json records no 'local_passes'"):
        ooc.resume(part.path, max_epochs=7)


def _latest_seq(run: str) -> int:
    try:
        with open(os.path.join(run, "LATEST")) as f:
            return int(f.read().strip()[5:])
    except (OSError, ValueError):
        return -1


def test_a_checkpoint_lost_behind_the_next_round_leaves_the_one_before_intact(data, tmp_path, workers, monkeypatch):
    """The driver writes a round's checkpoint while the next round runs. Checkpoint 3 is made to fail
    after that round has written its duals (as if the driver died in the middle of writing it): the
    checkpoint before must still verify (its dual files untouched: three buffers), and the resume
    from it ends with an uninterrupted run's coefficients, bit for bit, without a CheckpointWarning."""
    import warnings

    from ooc.runs.rundir import CheckpointWarning, RunDir

    root, store = data
    opts = dict(loss="logistic", l2=1e-2, tol=1e-12, bias=1.0, max_epochs=8, seed=3, distributed=workers)
    full = ooc.train(store, str(tmp_path / "full"), **opts)
    real = RunDir._write_checkpoint

    def lost(self, name, arrays, meta, unsynced, duals):
        if meta["seq"] == 3:
            # the next round runs meanwhile (its duals written to the buffer after this one's)
            deadline = time.monotonic() + 60
            while len(self.history()) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            raise OSError("the driver died writing this checkpoint")
        return real(self, name, arrays, meta, unsynced, duals)

    monkeypatch.setattr(RunDir, "_write_checkpoint", lost)
    with pytest.raises(Exception, match="died writing"):
        ooc.train(store, str(tmp_path / "cut"), **opts)
    monkeypatch.setattr(RunDir, "_write_checkpoint", real)
    assert _latest_seq(str(tmp_path / "cut")) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        resumed = ooc.resume(str(tmp_path / "cut"))
    assert resumed.result["epochs"] == full.result["epochs"]
    assert np.array_equal(resumed.model.coef_, full.model.coef_)


def test_driver_killed_while_its_checkpoint_is_written_behind_the_next_round_resumes_bit_for_bit(
        data, tmp_path, workers):
    """An ``ooc train --distributed local:2`` killed with its workers (SIGKILL to its process group) a
    moment after its third checkpoint landed, then ``ooc resume``, ends with the coefficients of an
    uninterrupted run (the shared ``workers``: two single-threaded workers, the same partitions), bit
    for bit."""
    after = 3
    root, store = data
    opts = dict(loss="logistic", l2=1e-2, tol=1e-12, bias=1.0, max_epochs=10, seed=3)
    full = ooc.train(store, str(tmp_path / "full"), distributed=workers, **opts)
    with open(os.path.join(full.path, "run.json")) as f:
        assert json.load(f)["dual_buffers"] == 3
    run = str(tmp_path / "killed")
    args = [*OOC, "train", store, "--out", run, "--loss", "logistic", "--l2", "1e-2", "--tol", "1e-12", "--bias", "1",
            "--max-epochs", "10", "--seed", "3", "--distributed", "local:2", "--threads", "2"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while _latest_seq(run) < after and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(0.05)  # into the round that runs beside the next checkpoint being written
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    resumed = ooc.resume(run)
    assert resumed.result["epochs"] == full.result["epochs"]
    assert np.array_equal(resumed.model.coef_, full.model.coef_)


def test_partitions_exchange_blocks_and_steps_cover_the_round():
    from ooc.solvers.cocoa import exchange, step_range

    parts = [list(range(k, 11, 3)) for k in range(3)]
    seen = set()
    for r in range(1, 30):
        nxt = exchange(parts, 0, r, 0.5)
        assert sorted(b for p in nxt for b in p) == list(range(11))  # every block in one partition
        assert [len(p) for p in nxt] == [len(p) for p in parts]  # sizes kept
        assert all(len(set(p) - set(q)) == 2 for p, q in zip(nxt, parts))  # half of the smallest in, as many out
        assert nxt == exchange(parts, 0, r, 0.5)  # a function of (seed, round) only
        seen |= {tuple(p) for p in nxt}
        parts = nxt
    assert len(seen) > 40  # the partitions mix
    assert exchange(parts, 0, 5, 0.0) is parts and exchange(parts[:1], 0, 5, 0.5) == parts[:1]
    # steps: every pass cut into equal stretches, one after the other, the whole round
    cuts = [step_range(j, 3, 2, 10) for j in range(6)]
    assert cuts[0][0] == 0 and cuts[-1][1] == 20 and all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))
    assert step_range(0, 0, 2, 10) == (0, 20)


def test_regularization_path_warm_starts_reach_the_cold_optimum(data, tmp_path):
    root, store = data
    spec = tmp_path / "path.toml"
    spec.write_text(f'[batch]\nout = "path-out"\n\n[path]\nstore = "{store}"\nl2 = [1e-3, 1e-2, 3e-3]\n'
                    'loss = "logistic"\ntol = 1e-9\nsolver = "sdca"\n')
    rows = run_batch(str(spec), workers=1)
    assert [float(r["l2"]) for r in rows] == [1e-2, 3e-3, 1e-3]  # large to small
    assert all(r["status"] == "ok" and r["converged"] for r in rows)
    last = os.path.join(str(tmp_path / "path-out"), rows[-1]["run"])
    assert json.load(open(os.path.join(last, "run.json")))["warm_start"].endswith(rows[1]["run"])
    cold = ooc.train(store, str(tmp_path / "cold"), loss="logistic", l2=1e-3, tol=1e-9, solver="sdca")
    # the warm start begins far closer to the optimum than a cold start
    from ooc.runs.rundir import RunDir
    assert RunDir.open(last).history()[0]["gap"] < 0.5 * cold.history[0]["gap"]
    a, b = cold.model.coef_, ooc.load_model(last).coef_
    # both certified to 1e-9: ||w - w*||^2 <= 2 gap / l2 for each
    assert np.linalg.norm(a - b) <= 2 * np.sqrt(2 * 1e-9 * 1.0 / 1e-3)


@pytest.mark.parametrize("spec", ["grid.toml", "path.toml"])
def test_example_specs_run_as_written(tmp_path, spec):
    here = os.path.join(os.path.dirname(__file__), "..", "examples")
    shutil.copy(os.path.join(here, spec), tmp_path / spec)
    # the data the spec comments tell the user to make (smaller here)
    ooc.synth(str(tmp_path / "example.zarr"), 3000, 300, 10)
    r = subprocess.run(OOC + ["batch", str(tmp_path / spec), "--workers", "2"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    out = tmp_path / ("grid-out" if spec == "grid.toml" else "path-out")
    rows = _read_results(str(out))
    assert rows and all(row["status"] == "ok" for row in rows)
    assert (out / "summary.md").exists()


def test_distributed_sample_weights_reach_scikit_learns_weighted_optimum(tmp_path, workers):
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(3)
    n, d, l2 = 600, 20, 1e-2
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < 0.3)
    y = np.where(X @ rng.standard_normal(d) + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    c = rng.uniform(0.2, 3.0, n)
    store = ooc.convert(X, str(tmp_path / "w.zarr"), y=y, sample_weight=c, dtype="float64", block_bytes=3000)
    assert store.n_blocks("rows") >= 4
    # three synchronizations a round (--sync-rows)
    dist = ooc.train(str(tmp_path / "w.zarr"), str(tmp_path / "dist"), loss="logistic", l2=l2, tol=1e-10,
                     max_epochs=300, distributed=workers, sync_rows=100)
    assert dist.result["converged"] and dist.result["primal"] >= dist.result["dual"]
    # ooc: 1/n sum c_i phi + l2/2 ||w||^2  <=>  scikit-learn's C sum c_i phi + 1/2 ||w||^2 with C = 1/(l2 n)
    ref = LogisticRegression(C=1 / (l2 * n), fit_intercept=False, tol=1e-12, max_iter=10_000).fit(X, y, sample_weight=c)
    w = ref.coef_[0]
    p_ref = float(np.mean(c * np.logaddexp(0, -y * (X @ w))) + 0.5 * l2 * w @ w)
    assert abs(dist.result["primal"] - p_ref) <= 1e-8 * abs(p_ref)
    assert np.abs(dist.model.coef_ - w).max() <= 1e-4 * np.abs(w).max()


def test_distributed_elastic_net_reaches_the_single_process_optimum(data, tmp_path, workers):
    root, store = data
    opts = dict(loss="logistic", l2=1e-2, l1=1e-3, tol=1e-10, max_epochs=300)
    single = _reference(store, tmp_path, **opts)
    dist = ooc.train(store, str(tmp_path / "dist"), distributed=workers, **opts)
    assert single.result["converged"] and dist.result["converged"]
    assert dist.result["primal"] >= dist.result["dual"]
    assert abs(dist.result["primal"] - single.result["primal"]) <= 1e-8 * abs(single.result["primal"])
    # both certified: ||w - w*||^2 <= 2 gap / l2 for each
    bound = 2 * np.sqrt(2 * 1e-10 * abs(single.result["primal"]) / 1e-2)
    assert np.linalg.norm(single.model.coef_ - dist.model.coef_) <= bound
    assert 0 < np.count_nonzero(dist.model.coef_) < dist.model.coef_.size  # L1 zeroed some


def test_distributed_fit_intercept_reaches_scikit_learns_optimum_and_resumes(tmp_path, workers):
    """--fit-intercept over two workers: the driver holds the intercepts fixed for a round and moves
    them between rounds from the workers' dual sums (ooc.solvers.intercept); scikit-learn's optimum,
    and a run stopped after 3 rounds and resumed ends with the same bits."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(4)
    n, d, l2 = 800, 20, 1e-2
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < 0.3)
    y = np.where(X @ rng.standard_normal(d) + 1.5 + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    store = str(tmp_path / "i.zarr")
    ooc.convert(X, store, y=y, dtype="float64", block_bytes=3000)
    opts = dict(loss="logistic", l2=l2, tol=1e-10, max_epochs=400, fit_intercept=True, distributed=workers)
    dist = ooc.train(store, str(tmp_path / "dist"), **opts)
    assert dist.result["converged"] and dist.result["primal"] >= dist.result["dual"]
    ref = LogisticRegression(C=1 / (l2 * n), tol=1e-12, max_iter=10_000).fit(X, y)
    w, b = ref.coef_[0], float(ref.intercept_[0])
    p_ref = float(np.mean(np.logaddexp(0, -y * (X @ w + b))) + 0.5 * l2 * w @ w)
    assert dist.result["primal"] - p_ref <= dist.result["gap"] + 1e-12 and dist.result["dual"] <= p_ref + 1e-12
    assert abs(float(dist.model.intercept_) - b) <= 1e-4 and abs(b) > 0.5
    with pytest.warns(ooc.ConvergenceWarning):
        ooc.train(store, str(tmp_path / "part"), **dict(opts, max_epochs=3))
    resumed = ooc.resume(str(tmp_path / "part"), max_epochs=400)
    assert np.array_equal(resumed.model.coef_, dist.model.coef_)
    assert resumed.model.intercept_ == dist.model.intercept_


@pytest.mark.parametrize("when", ["2", "2.1"])
def test_a_worker_killed_mid_round_costs_that_round_only(data, tmp_path, monkeypatch, when):
    root, store = data
    opts = dict(loss="logistic", l2=1e-2, tol=1e-10, bias=1.0, max_epochs=200, distributed="local:2")
    if when == "2.1":  # three steps a round: the worker dies in the second, its updated duals lost with it
        opts["sync_rows"] = 500
    full = ooc.train(store, str(tmp_path / "full"), **opts)
    marker = tmp_path / "killed"
    # the worker running partition 1 ends its process (os._exit) in round 2, after writing some duals
    # (or in the middle of the round's step 1); Dask's nanny starts a replacement and the scheduler runs
    # the task again (or, past step 0, every partition runs the round again)
    monkeypatch.setenv("OOC_TEST_KILL_WORKER", f"{when}:1:{marker}")
    killed = ooc.train(store, str(tmp_path / "killed-run"), **opts)
    assert marker.exists()
    assert killed.result["converged"] and killed.result["epochs"] == full.result["epochs"]
    assert np.array_equal(full.model.coef_, killed.model.coef_)
    assert killed.result["primal"] == full.result["primal"]
    if when == "2.1":
        assert [h["rounds_redone"] for h in killed.history if h["epoch"] == 2] == [1]


def test_distributed_one_vs_rest_reaches_the_single_process_optimum(tmp_path, workers):
    store = str(tmp_path / "mc.zarr")
    ooc.convert(SynthSource(1500, 200, 10, task="multiclass", n_classes=3, seed=2), store, dtype="float64",
                block_bytes=6000)
    opts = dict(loss="logistic", l2=1e-2, tol=1e-10, max_epochs=400)
    single = ooc.train(store, str(tmp_path / "single"), solver="sdca", **opts)
    dist = ooc.train(store, str(tmp_path / "dist"), distributed=workers, **opts)
    assert dist.model.coef_.shape == single.model.coef_.shape == (3, 200)
    _same_optimum(dist, single, 1e-10, 1e-2)


@pytest.fixture(scope="module")
def threaded_worker():
    """The scheduler address of one worker process with two threads (``local:N`` gives each worker
    ``--threads // N``; a deployment's workers have the threads they were started with)."""
    yield from _local_cluster(1, 2)


def test_a_two_thread_worker_splits_one_problems_rows_reaches_the_optimum_and_resumes(tmp_path, threaded_worker):
    """One problem on a worker of two threads: its rows go over both (RowThreads inside CoCoA+); the run
    records the workers' threads, reaches the single-process optimum and resumes bit for bit."""
    from ooc.config import defaults
    from ooc.solvers.cocoa import split_rows
    from ooc.solvers.problem import make_problem
    from ooc.store import open_store

    store = str(tmp_path / "big.zarr")
    ooc.convert(SynthSource(20000, 300, 10, seed=7), store, dtype="float64", block_bytes=200_000)
    opts = dict(loss="logistic", l2=1e-2, bias=1.0)
    st = open_store(store)
    pb = make_problem(st, {**defaults(), **opts, "l2_added": 0.0})
    assert split_rows(2, st, pb, 1) == 2  # the threaded pass is the one run
    single = ooc.train(store, str(tmp_path / "single"), tol=1e-10, max_epochs=400, **opts)
    dist = ooc.train(store, str(tmp_path / "dist"), tol=1e-10, max_epochs=400, distributed=threaded_worker, **opts)
    with open(os.path.join(dist.path, "run.json")) as f:
        assert json.load(f)["worker_threads"] == 2
    _same_optimum(dist, single, 1e-10, 1e-2, scale=abs(single.result["primal"]))
    full = ooc.train(store, str(tmp_path / "full"), tol=1e-14, max_epochs=4, distributed=threaded_worker, **opts)
    part = ooc.train(store, str(tmp_path / "part"), tol=1e-14, max_epochs=2, distributed=threaded_worker, **opts)
    resumed = ooc.resume(part.path, max_epochs=4)
    assert resumed.result["epochs"] == full.result["epochs"] == 4
    assert np.array_equal(full.model.coef_, resumed.model.coef_)


def test_a_two_thread_worker_puts_one_vs_rest_classes_on_its_threads(tmp_path, threaded_worker):
    """One-vs-rest on a worker of two threads: the classes go over them, which changes nothing: the
    coefficients of one single-threaded worker (``local:1``, ``threads=1``), bit for bit, and the
    single-process optimum."""
    store = str(tmp_path / "mc.zarr")
    # groups of about 3,000 rows x 10 nonzeros x 3 classes: enough work to be handed to the threads
    ooc.convert(SynthSource(6000, 200, 10, task="multiclass", n_classes=3, seed=2), store, dtype="float64",
                block_bytes=100_000)
    opts = dict(loss="logistic", l2=1e-2, tol=1e-10, max_epochs=400)
    single = ooc.train(store, str(tmp_path / "single"), solver="sdca", **opts)
    dist = ooc.train(store, str(tmp_path / "dist"), distributed=threaded_worker, **opts)
    one = ooc.train(store, str(tmp_path / "one"), distributed="local:1", threads=1, **opts)
    with open(os.path.join(one.path, "run.json")) as f:
        assert json.load(f)["worker_threads"] == 1
    assert np.array_equal(dist.model.coef_, one.model.coef_)
    _same_optimum(dist, single, 1e-10, 1e-2)


def test_workers_rebuild_v_from_the_changed_entries_or_ask_for_all_of_it():
    from ooc.solvers.cocoa import _round_v

    v0 = np.arange(6, dtype=np.float64)
    assert np.array_equal(_round_v("run-x", ("full", "s1", 0, v0)), v0)
    v1 = _round_v("run-x", ("sparse", "s1", 1, np.array([1, 4], np.int32), np.array([10.0, 40.0])))
    assert np.array_equal(v1, [0, 10, 2, 3, 40, 5])
    # the same version again (a second partition on this worker): the same v
    assert _round_v("run-x", ("sparse", "s1", 1, np.array([1], np.int32), np.array([10.0]))) is v1
    assert _round_v("run-x", ("sparse", "s1", 3, np.array([0], np.int32), np.array([1.0]))) is None  # a gap
    assert _round_v("run-x", ("sparse", "s2", 2, np.array([0], np.int32), np.array([1.0]))) is None  # a new driver
    assert _round_v("run-y", ("sparse", "s1", 2, np.array([0], np.int32), np.array([1.0]))) is None  # never seen


@pytest.mark.parametrize("rows,nnz,workers", [(500, 5, 2), (4000, 10, 2), (4000, 10, 3), (20000, 15, 4),
                                              (300, 3, 6), (20000, 15, 1)])
def test_local_partitions_get_several_blocks_each(tmp_path, rows, nnz, workers):
    """Invariant of the default blocks of ``--distributed local:N``: at least
    ``BLOCKS_PER_PARTITION`` row blocks a partition, unless the smallest block is reached; never
    larger than asked; the size asked where the store already has enough blocks."""
    from ooc.solvers.cocoa import BLOCKS_PER_PARTITION, partition_block_bytes
    from ooc.store import layout as L
    from ooc.store import open_store

    store = str(tmp_path / "s.zarr")
    ooc.convert(SynthSource(rows, 200, nnz, seed=1), store, dtype="float64")
    st = open_store(store)
    asked, smallest = 2 << 20, 4096
    bb = partition_block_bytes(st, asked, workers, smallest)
    blocks = len(st.with_blocks(bb).block_ptr(L.ROWS)) - 1
    before = len(st.with_blocks(asked).block_ptr(L.ROWS)) - 1
    assert bb <= asked
    if workers == 1 or before >= BLOCKS_PER_PARTITION * workers:
        assert bb == asked
    else:
        assert blocks >= BLOCKS_PER_PARTITION * workers or bb // 2 < smallest


def test_local_workers_certify_where_one_process_does(tmp_path):
    """``ooc train --distributed local:2`` on a store of ``ooc synth``'s kind, default blocks (one of
    2 MiB holds it all): certified in few more rounds than one process's epochs. Before the blocks
    were cut for the partitions, a partition of one block never changed and CoCoA+ stalled (100
    rounds at 5.8e-6 on the example store, where one process certifies in 6)."""
    from ooc.synth import synth

    store = str(tmp_path / "s.zarr")
    synth(store, 20000, 2000, 15)  # the README's example store (ooc synth examples/example.zarr ...)
    opts = dict(loss="logistic", l2=1e-4, tol=1e-6)
    one = ooc.train(store, str(tmp_path / "one"), solver="sdca", **opts).result
    dist = ooc.train(store, str(tmp_path / "two"), distributed="local:2", max_epochs=40, **opts).result
    assert one["converged"] and dist["converged"], dist.get("stop_reason")
    assert dist["epochs"] <= 2 * one["epochs"] + 4
    assert abs(dist["primal"] - one["primal"]) <= 2e-6 * max(1.0, abs(one["primal"]))


@pytest.mark.parametrize("kind", ["slow", "stalled", "loose"])
@pytest.mark.parametrize("loss", ["logistic", "squared", "smooth-hinge"])
def test_a_distributed_run_is_never_told_to_change_to_a_solver_it_cannot_run(kind, loss):
    """The advice of a distributed run that stopped short names what --distributed can do (fewer
    workers, one process, --l2), never another --solver: CoCoA+ distributes sdca only."""
    from ooc.engine import Stall
    from ooc.train import _advice

    o = {"solver_used": "sdca", "l2": 1e-6, "l1": 0.0, "loss": loss, "sampling": "uniform", "multiclass": "ovr",
         "distributed": "local:2"}
    text = _advice(Stall(kind, "the gap shrinks slowly", 500), o, "RUN", 100)
    assert "--solver" not in text and "--distributed" in text, text


def test_a_round_reports_its_share_done_between_synchronizations(data, tmp_path, workers):
    """With --sync-rows a round is several steps: the progress display is told each step's share of
    the round before the round's history entry (the bar moves inside a round)."""
    _, store = data
    events = []

    class Display:
        def __call__(self, h):
            events.append(("end", h["epoch"]))

        def within(self, epoch, fraction):
            events.append(("within", epoch, fraction))

    ooc.train(store, str(tmp_path / "r"), distributed=workers, sync_rows=300, l2=1e-3, tol=1e-12, max_epochs=2,
              progress=Display())
    ends = [i for i, e in enumerate(events) if e[0] == "end"]
    inside = [e[2] for e in events[ends[0] + 1:ends[1]] if e[0] == "within"]
    assert inside and inside == sorted(inside) and all(0.0 < f < 1.0 for f in inside), events
