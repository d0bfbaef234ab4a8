"""``--threads``: what runs on several cores, and that nothing computed depends on how many.

* one-vs-rest classes train on several threads at once: the coefficients and the history are the
  same bit for bit as on one thread, and a run resumed with ``--threads 2`` ends as an
  uninterrupted one;
* predict/evaluate split rows over threads: the same predictions and metrics;
* the default is every core the process may use (CPU affinity, cgroup CPU quota), recorded in
  ``run.json`` so that a resume keeps it; runs made before the option resume with one thread.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import scipy.sparse as sp

import ooc
from ooc import _cpu
from ooc.config import TrainConfig

T = importlib.import_module("ooc.train")
N, D, K = 900, 50, 4
OPTS = dict(l2=1e-3, tol=1e-9, seed=2, max_epochs=200, loss="logistic")


@pytest.fixture(autouse=True)
def _no_plot(monkeypatch):
    monkeypatch.setattr(T, "plot_convergence", lambda rd: None)


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    rng = np.random.default_rng(8)
    X = sp.random(N, D, density=0.2, random_state=8, format="csr", data_rvs=rng.standard_normal)
    y = np.argmax(X @ rng.standard_normal((D, K)) + 0.2 * rng.standard_normal((N, K)), axis=1).astype(float)
    path = str(tmp_path_factory.mktemp("thr") / "multi.zarr")
    return ooc.convert(X, path, y=y, dtype="float64", block_bytes="8KiB")


def _coef(run):
    return ooc.load_model(run.path).coef_


def _history(run):
    return [(e["epoch"], e["primal"], e["dual"], e["gap"]) for e in run.history]


@pytest.mark.parametrize("solver", ["sdca", "acc-sdca"])
def test_one_vs_rest_classes_over_threads_change_nothing(multi, tmp_path, solver):
    one = ooc.train(multi, str(tmp_path / "one"), threads=1, solver=solver, **OPTS)
    two = ooc.train(multi, str(tmp_path / "two"), threads=2, solver=solver, **OPTS)
    assert one.result["converged"] and _coef(one).shape == (K, D)
    assert np.array_equal(_coef(one), _coef(two))
    assert _history(one) == _history(two)


def test_resume_with_two_threads_is_bit_exact(multi, tmp_path):
    full = ooc.train(multi, str(tmp_path / "full"), threads=2, **OPTS)
    out = str(tmp_path / "part")
    with pytest.warns(ooc.ConvergenceWarning):
        ooc.train(multi, out, threads=2, **dict(OPTS, max_epochs=2))
    from ooc.runs.rundir import RunDir

    assert RunDir.open(out).config["threads"] == 2
    done = ooc.resume(out, max_epochs=OPTS["max_epochs"])
    assert np.array_equal(_coef(done), _coef(full))


def test_predict_and_evaluate_rows_over_threads(multi, tmp_path):
    from ooc.evaluate import evaluate, iter_predictions

    run = ooc.train(multi, str(tmp_path / "r"), **dict(OPTS, max_epochs=20, tol=1e-3))
    a = np.concatenate(list(iter_predictions(run.path, multi.path, threads=1)))
    b = np.concatenate(list(iter_predictions(run.path, multi.path, threads=3)))
    assert np.array_equal(a, b) and len(a) == N
    assert evaluate(run.path, multi.path, threads=1) == evaluate(run.path, multi.path, threads=2)
    model = ooc.load_model(run.path)
    X = multi.to_scipy()
    m1 = model.decision_csr(X.indptr.astype(np.int64), X.indices, X.data, 1)
    for t in (2, 5, N + 3):
        assert np.array_equal(model.decision_csr(X.indptr.astype(np.int64), X.indices, X.data, t), m1)


def test_default_is_every_core_and_run_json_keeps_the_count(multi, tmp_path):
    assert TrainConfig().threads == 0 and _cpu.resolve_threads(0) == _cpu.available_cpus() >= 1
    run = ooc.train(multi, str(tmp_path / "r"), **dict(OPTS, max_epochs=2, tol=1e-2))
    from ooc.runs.rundir import RunDir

    assert RunDir.open(run.path).config["threads"] == _cpu.available_cpus()  # the count, not 0
    assert TrainConfig(threads=3).threads == 3
    old = dict(T.DEFAULTS)
    del old["threads"]
    assert TrainConfig.from_run_config(old).threads == 1  # made before --threads: one thread
    with pytest.raises(ValueError, match="--threads"):
        TrainConfig(threads=-1)
    with pytest.raises(ValueError, match="--threads"):
        TrainConfig(threads="many")


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_cgroup_cpu_quota(tmp_path, version):
    root = tmp_path / "cg"
    if version == "v2":
        (tmp_path / "self").write_text("0::/a/b\n")
        for rel, value in [("a", "150000 100000"), ("a/b", "max 100000")]:
            (root / rel).mkdir(parents=True)
            (root / rel / "cpu.max").write_text(value + "\n")
        want = 1.5
    else:
        (tmp_path / "self").write_text("3:cpu,cpuacct:/x\n4:memory:/x\n")
        (root / "cpu,cpuacct" / "x").mkdir(parents=True)
        (root / "cpu,cpuacct" / "x" / "cpu.cfs_quota_us").write_text("300000\n")
        (root / "cpu,cpuacct" / "x" / "cpu.cfs_period_us").write_text("100000\n")
        (root / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")
        (root / "cpu,cpuacct" / "cpu.cfs_period_us").write_text("100000\n")
        want = 3.0
    assert _cpu._cgroup_cpu_quota(str(tmp_path / "self"), str(root)) == want
    assert _cpu._cgroup_cpu_quota(str(tmp_path / "missing"), str(root)) is None


def test_estimator_n_jobs(multi):
    from ooc.estimators import LinearClassifier

    X = multi.to_scipy()
    y = multi.labels
    a = LinearClassifier(l2=1e-3, tol=1e-8, n_jobs=1).fit(X, y)
    b = LinearClassifier(l2=1e-3, tol=1e-8, n_jobs=2).fit(X, y)
    assert np.array_equal(a.coef_, b.coef_)
    assert np.array_equal(a.predict(multi.path), b.predict(multi.path))
    with pytest.raises(ValueError, match="n_jobs"):
        LinearClassifier(n_jobs=0).fit(X, y)


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    rng = np.random.default_rng(9)
    X = sp.random(N, D, density=0.2, random_state=9, format="csr", data_rvs=rng.standard_normal)
    y = np.where(X @ rng.standard_normal(D) + 0.3 * rng.standard_normal(N) > 0, 1.0, -1.0)
    path = str(tmp_path_factory.mktemp("thr") / "binary.zarr")
    return ooc.convert(X, path, y=y, dtype="float64", block_bytes="8KiB")


@pytest.mark.parametrize("solver,l1", [("sdca", 0.0), ("sdca", 1e-3), ("acc-sdca", 0.0)])
def test_one_problem_on_threads_is_deterministic_and_resumes_bit_exact(binary, tmp_path, solver, l1):
    """One problem's rows over the threads (CoCoA+ mini-batches, ooc.kernels.sdca_threads): another
    trajectory than one thread's, to the same certified optimum; the same bits on every run with
    the same count, and after an interrupted run is resumed."""
    opts = dict(OPTS, solver=solver, l1=l1, tol=1e-10)
    one = ooc.train(binary, str(tmp_path / "one"), threads=1, **opts)
    two = ooc.train(binary, str(tmp_path / "two"), threads=3, **opts)
    again = ooc.train(binary, str(tmp_path / "again"), threads=3, **opts)
    # below MIN_ROW_THREADS one problem runs on one thread: the one-thread iterates
    assert np.array_equal(_coef(ooc.train(binary, str(tmp_path / "t2"), threads=2, **opts)), _coef(one))
    for r in (one, two):
        res = r.result
        assert res["converged"] and res["gap"] <= 1e-10 * max(1.0, abs(res["primal"]))
    assert not np.array_equal(_coef(one), _coef(two))  # the threads did split the rows
    assert abs(one.result["primal"] - two.result["primal"]) <= 2e-10 * abs(one.result["primal"])
    # strong convexity: both within sqrt(2 gap / l2) of the optimum
    bound = 2 * np.sqrt(2 * max(one.result["gap"], two.result["gap"]) / OPTS["l2"])
    assert np.linalg.norm(_coef(one) - _coef(two)) <= bound
    assert np.array_equal(_coef(two), _coef(again)) and _history(two) == _history(again)
    out = str(tmp_path / "part")
    with pytest.warns(ooc.ConvergenceWarning):
        ooc.train(binary, out, threads=3, **dict(opts, max_epochs=2))
    done = ooc.resume(out, max_epochs=opts["max_epochs"])
    assert np.array_equal(_coef(done), _coef(two)) and _history(done) == _history(two)


def test_one_problem_threads_hold_a_change_of_v_each(binary):
    from ooc.solvers.sdca import SDCASolver

    dim = binary.n_cols
    base = SDCASolver.fixed_for(binary, 1, dim, 1, 0.0, threads=1)
    assert SDCASolver.fixed_for(binary, 1, dim, 1, 0.0, threads=3) == base + 3 * 8 * dim
    # one-vs-rest: the classes go on the threads, nothing more is held
    assert SDCASolver.fixed_for(binary, 4, dim, 1, 0.0, threads=3) == SDCASolver.fixed_for(binary, 4, dim, 1, 0.0)


def test_compute_pool_after_fork():
    """A child forked after the parent made its compute threads makes its own (the parent's
    threads do not exist in the child: work queued on the inherited pool would never run)."""
    import os

    assert _cpu.map_threads(lambda x: x + 1, [1, 2, 3], 2) == [2, 3, 4]
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        ok = _cpu.map_threads(lambda x: x * 2, [1, 2, 3], 2) == [2, 4, 6]
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_resume_with_another_thread_count(binary, tmp_path):
    """``resume --threads N``: the count is recorded and used from the last checkpoint on (a new
    trajectory to the same certified optimum); without it, the run's own count."""
    from ooc.runs.rundir import RunDir

    out = str(tmp_path / "r")
    opts = dict(OPTS, tol=1e-10)
    with pytest.warns(ooc.ConvergenceWarning):
        ooc.train(binary, out, threads=3, **dict(opts, max_epochs=2))
    done = ooc.resume(out, max_epochs=opts["max_epochs"], threads=1)
    assert RunDir.open(out).config["threads"] == 1
    res = done.result
    assert res["converged"] and res["gap"] <= 1e-10 * max(1.0, abs(res["primal"]))
    ref = ooc.train(binary, str(tmp_path / "ref"), threads=1, **opts).result
    assert abs(res["primal"] - ref["primal"]) <= 2e-10 * abs(ref["primal"])
