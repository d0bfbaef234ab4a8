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
    # these problems have hundreds of rows: let one problem's rows go over the threads all the same
    monkeypatch.setattr("ooc.solvers.row_threads.MIN_ROWS_PER_THREAD", 1)


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


def _assert_resumed_run_matches(store, tmp_path, opts, threads, full):
    """A run of ``opts`` on ``threads`` threads stopped after 2 epochs and resumed ends with the
    coefficients and the history of ``full``, the uninterrupted run, bit for bit."""
    out = str(tmp_path / "part")
    with pytest.warns(ooc.ConvergenceWarning):
        ooc.train(store, out, threads=threads, **dict(opts, max_epochs=2))
    done = ooc.resume(out, max_epochs=opts["max_epochs"])
    assert np.array_equal(_coef(done), _coef(full)) and _history(done) == _history(full)


@pytest.mark.parametrize("solver,l1", [("sdca", 0.0), ("sdca", 1e-3), ("acc-sdca", 0.0)])
def test_one_problem_on_threads_is_deterministic_and_resumes_bit_exact(binary, tmp_path, solver, l1):
    """One problem's rows over the threads (CoCoA+ mini-batches, ooc.kernels.sdca_threads): another
    trajectory than one thread's, to the same certified optimum; the same bits on every run with
    the same count, and after an interrupted run is resumed."""
    # l2 1e-2: well conditioned enough that the threads pay (rows_split_pays), as on the bench stores
    opts = dict(OPTS, solver=solver, l1=l1, l2=1e-2, tol=1e-10)
    one = ooc.train(binary, str(tmp_path / "one"), threads=1, **opts)
    two = ooc.train(binary, str(tmp_path / "two"), threads=3, **opts)
    again = ooc.train(binary, str(tmp_path / "again"), threads=3, **opts)
    # from MIN_ROW_THREADS (2) on the rows are split: another trajectory again
    assert not np.array_equal(_coef(ooc.train(binary, str(tmp_path / "t2"), threads=2, **opts)), _coef(one))
    for r in (one, two):
        res = r.result
        assert res["converged"] and res["gap"] <= 1e-10 * max(1.0, abs(res["primal"]))
    assert not np.array_equal(_coef(one), _coef(two))  # the threads did split the rows
    assert abs(one.result["primal"] - two.result["primal"]) <= 2e-10 * abs(one.result["primal"])
    # strong convexity: both within sqrt(2 gap / l2) of the optimum
    bound = 2 * np.sqrt(2 * max(one.result["gap"], two.result["gap"]) / opts["l2"])
    assert np.linalg.norm(_coef(one) - _coef(two)) <= bound
    assert np.array_equal(_coef(two), _coef(again)) and _history(two) == _history(again)
    _assert_resumed_run_matches(binary, tmp_path, opts, 3, two)


@pytest.mark.parametrize("sampling", ["uniform", "importance", "gap-per-epoch"])
def test_rcd_dual_draws_over_threads_reach_the_optimum_and_resume_bit_exact(binary, tmp_path, sampling):
    """rcd-dual's draws (with replacement) on 3 threads, each row stepped by the thread that owns it:
    certified, at scikit-learn's optimum, deterministic, and resumed bit for bit; the one-thread run
    keeps its own trajectory (the Quartz step for the logistic loss under a fixed sampling)."""
    from sklearn.linear_model import LogisticRegression

    opts = dict(OPTS, solver="rcd-dual", sampling=sampling, l2=1e-2, tol=1e-8, max_epochs=400)
    one = ooc.train(binary, str(tmp_path / "one"), threads=1, **opts)
    three = ooc.train(binary, str(tmp_path / "three"), threads=3, **opts)
    again = ooc.train(binary, str(tmp_path / "again"), threads=3, **opts)
    assert three.history[-1]["step_rule"] == "exact"
    assert one.history[-1]["step_rule"] == ("exact" if sampling == "gap-per-epoch" else "quartz")
    for r in (one, three):
        res = r.result
        assert res["converged"] and res["gap"] <= 1e-8 * max(1.0, abs(res["primal"]))
    assert not np.array_equal(_coef(one), _coef(three))  # the draws did go over the threads
    X, y = binary.to_scipy(), np.asarray(binary.labels)
    ref = LogisticRegression(C=1.0 / (opts["l2"] * N), fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, y)
    bound = 2 * np.sqrt(2 * three.result["gap"] / opts["l2"]) + 1e-6
    assert np.linalg.norm(_coef(three) - ref.coef_.ravel()) <= bound
    assert np.array_equal(_coef(three), _coef(again)) and _history(three) == _history(again)
    _assert_resumed_run_matches(binary, tmp_path, opts, 3, three)


def test_owner_split_keeps_each_row_on_one_thread():
    """Draws with repeats go to the thread owning their row, in their order; the cuts say where."""
    from ooc.kernels.sdca_threads import owner_split

    rng = np.random.default_rng(5)
    for T in (1, 2, 3, 7):
        m = int(rng.integers(T, 60))
        draws = rng.integers(0, m, size=int(rng.integers(0, 200))).astype(np.int64)
        out, cuts = np.empty_like(draws), np.zeros(T + 1, dtype=np.int64)
        owner_split(draws, T, m, out, cuts)
        want = np.concatenate([draws[draws * T // m == k] for k in range(T)]) if len(draws) else draws
        assert np.array_equal(out, want)
        assert cuts[0] == 0 and cuts[-1] == len(draws)
        for k in range(T):
            part = out[cuts[k]:cuts[k + 1]]
            assert ((part * T // m) == k).all()


def test_one_problem_threads_hold_a_replica_each(binary, monkeypatch):
    from ooc.solvers.sdca import SDCASolver

    dim = binary.n_cols
    # each thread's local point interleaved with a copy of the pass's snapshot (and its own v with l1 > 0);
    # one thread holds one replica too
    one = SDCASolver.fixed_for(binary, 1, dim, 1, 0.0, threads=1)
    assert SDCASolver.fixed_for(binary, 1, dim, 1, 0.0, threads=3) == one + 2 * 16 * dim
    one1 = SDCASolver.fixed_for(binary, 1, dim, 1, 1e-3, threads=1)
    assert SDCASolver.fixed_for(binary, 1, dim, 1, 1e-3, threads=3) == one1 + 2 * 24 * dim
    # a solver whose one thread takes the plain pass holds no replica, but the result's copy (8 dim), which
    # is made once the replicas are gone (so a replica costs 16 dim - 8 dim more than no replica)
    monkeypatch.setattr(SDCASolver, "replica_one_thread", False)
    assert SDCASolver.fixed_for(binary, 1, dim, 1, 0.0, threads=1) == one - 8 * dim
    assert SDCASolver.fixed_for(binary, 1, dim, 1, 0.0, threads=1, replica=False) == one - 8 * dim
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


def test_epoch_checkpoint_writes_w_once(binary, tmp_path):
    """At an epoch's start the snapshot is w, and with l1 = 0 v is w: the checkpoint holds one copy
    (an OvR run with 58 classes at 2^18 features wrote 3 x 121 MB an epoch before), and a run
    resumed from it ends as an uninterrupted one."""
    from ooc.runs.rundir import RunDir

    out = str(tmp_path / "r")
    with pytest.warns(ooc.ConvergenceWarning):
        ooc.train(binary, out, threads=1, checkpoint_every=1e9, **dict(OPTS, max_epochs=2))
    arrays, meta = RunDir.open(out).load_checkpoint()
    assert meta["position"] == 0 and "w" in arrays and "v" not in arrays and "w_prev" not in arrays
    with pytest.warns(ooc.ConvergenceWarning):
        ooc.train(binary, str(tmp_path / "en"), threads=1, checkpoint_every=1e9, **dict(OPTS, l1=1e-3, max_epochs=2))
    arrays, _ = RunDir.open(str(tmp_path / "en")).load_checkpoint()
    assert "v" in arrays and "w_prev" not in arrays  # l1 > 0: v is not w
    done = ooc.resume(out, max_epochs=OPTS["max_epochs"])
    full = ooc.train(binary, str(tmp_path / "full"), threads=1, **OPTS)
    assert np.array_equal(_coef(done), _coef(full))


@pytest.mark.parametrize("hot", [1, 7, 64])
def test_hot_entries_are_the_stable_sort_of_the_counts(monkeypatch, hot):
    """The selection picks what a stable sort by count would: the largest counts, ties to the
    lower index, no feature without a nonzero (many ties: counts drawn from a few values)."""
    from ooc.solvers.row_threads import hot_entries

    monkeypatch.setattr("ooc.solvers.row_threads.HOT_FEATURES", hot)
    rng = np.random.default_rng(hot)
    for _ in range(200):
        n = int(rng.integers(1, 300))
        counts = rng.integers(0, int(rng.integers(1, 6)), size=n)
        top = np.argsort(-counts, kind="stable")[:hot]
        for bias in (False, True):
            want = sorted(top[counts[top] > 0].tolist() + ([n] if bias else []))
            assert hot_entries(counts, n + bias, bias).tolist() == want


def test_hot_entries_and_both_sweeps_agree(monkeypatch):
    """The entries synchronized after every mini-batch are the most frequent features (and the
    bias entry); after a group the dense sweep and the sweep over the group's column ids give the
    same bits (an entry no replica changed is never written), which are v plus the mean of the
    replicas' changes, w its soft-threshold, and every replica reset to them."""
    from ooc.kernels.args import Reg
    from ooc.kernels.sdca_threads import sync_entries, sync_range
    from ooc.solvers.row_threads import RowThreads, hot_entries

    monkeypatch.setattr("ooc.solvers.row_threads.HOT_FEATURES", 2)
    assert list(hot_entries(np.array([5, 0, 9, 5, 1]), 6, bias=True)) == [0, 2, 5]
    assert list(hot_entries(np.array([0, 0, 3]), 3, bias=False)) == [2]
    rng = np.random.default_rng(0)
    dim, T, l2 = 40, 3, 0.1

    def st(x, l1, bias):
        out = np.maximum(x - l1 / l2, 0) + np.minimum(x + l1 / l2, 0)
        if bias:
            out[-1] = x[-1]
        return out

    for l1, bias in [(0.0, 0.0), (1e-2, 1.0)]:
        reg = Reg(l2, l1, 10.0, bias)
        v = rng.standard_normal(dim)
        w = st(v, l1, bias)
        cols = RowThreads.columns(l1)
        vc = cols - 1 if cols == 3 else 0
        u = np.zeros((T, dim, cols))
        u[:, :, 0] = w
        u[:, :, vc] = v
        ids = rng.choice(dim - 1, 12, replace=False).astype(np.int32)
        for t in range(T):  # each thread moved some of the group's entries (and the bias entry)
            moved = list(rng.choice(ids, 5)) + ([dim - 1] if bias else [])
            u[t, moved, vc] += rng.standard_normal(len(moved))
            u[t, :, 0] = st(u[t, :, vc], l1, bias)
        runs = []
        for how in ("dense", "ids", "entries"):
            vv, uu = v.copy(), u.copy()
            ww = vv if l1 == 0 else w.copy()  # with l1 = 0 one array is both
            if how == "entries":
                sync_entries(np.concatenate([ids, ids[::-1], [dim - 1]]).astype(np.int64), vv, ww, uu, reg, float(T))
            else:
                for k in range(T):
                    sync_range(dim * k // T, dim * (k + 1) // T, vv, ww, uu, reg, float(T),
                               ids if how == "ids" else ids[:0])
            runs.append((vv, ww, uu))
        for vv, ww, uu in runs[1:]:
            assert np.array_equal(vv, runs[0][0]) and np.array_equal(ww, runs[0][1]) and np.array_equal(uu, runs[0][2])
        vv, ww, uu = runs[0]
        assert np.allclose(vv, v + (u[:, :, vc] - v).sum(axis=0) / T, rtol=0, atol=1e-12)
        assert np.array_equal(ww, st(vv, l1, bias))
        assert (uu[:, :, 0] == ww).all() and (uu[:, :, vc] == vv).all()


@pytest.mark.parametrize("loss,l1,bias", [("logistic", 0.0, 0.0), ("logistic", 1e-4, 1.0), ("smooth-hinge", 1e-5, 1.0),
                                           ("squared", 0.0, 1.0)])
def test_one_thread_on_a_replica_takes_the_plain_passes_steps(loss, l1, bias):
    """One thread's pass on a replica (the snapshot beside w, ``sigma' = 1``) leaves the duals, ``v``,
    ``w`` and the primal sum of the plain pass bit for bit, pass after pass, whether ``w`` takes the
    replica back densely or by the group's column ids; its dual sum is the plain one of the duals
    before the pass (in visit order)."""
    import scipy.sparse as sp

    from ooc.kernels.args import Labels, Reg, Rows
    from ooc.kernels.sdca import block_dual_loss, sdca_pass_gap
    from ooc.kernels.shuffle import permutation
    from ooc.objectives.losses import make_loss
    from ooc.solvers.row_threads import RowThreads

    rng = np.random.default_rng(3)
    fn = make_loss(loss)
    for n, d, density in [(3000, 800, 0.004), (400, 5000, 0.002)]:  # a dense take-back, then one by column ids
        X = sp.random(n, d, density=density, format="csr", random_state=int(rng.integers(1 << 30)))
        assert (X.nnz >= d) == (n == 3000)  # the second block has fewer nonzeros than entries
        X.data = rng.standard_normal(X.nnz)
        y = rng.standard_normal(n) if loss == "squared" else np.where(rng.random(n) < 0.3, 1.0, -1.0)
        c = rng.uniform(0.5, 2.0, n)
        rows = Rows(X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data)
        dim = d + (1 if bias else 0)
        reg = Reg(1e-3, l1, float(n), bias)
        a1, v1 = np.zeros(n), np.zeros(dim)
        w1 = v1 if l1 == 0 else np.zeros(dim)
        a2, v2 = np.zeros(n), np.zeros(dim)
        w2 = v2 if l1 == 0 else np.zeros(dim)
        rt = RowThreads(np.asarray(X.getnnz(axis=0)), 1, dim, bias > 0, l1)
        for e in range(4):
            order = permutation(n, np.uint64(e + 7))
            snap = w1.copy()
            dual = block_dual_loss(fn, y, c, a1)
            _, p1 = sdca_pass_gap(fn, rows, Labels(y, c), a1, order, v1, w1, reg, snap)
            rt.invalidate()  # a new pass: a new snapshot
            _, p2, d2 = rt.pass_group(fn, rows, Labels(y, c), a2, order, v2, w2, reg, w2.copy())
            assert np.array_equal(a1, a2) and np.array_equal(v1, v2) and np.array_equal(w1, w2) and p1 == p2
            assert d2 == pytest.approx(dual, rel=1e-12, abs=1e-12)
        assert np.abs(w1).max() > 0


def test_few_hot_entries_keep_the_dual_rising_to_the_optimum(binary, tmp_path, monkeypatch):
    """With fewer hot entries than features (the others synchronized once per group) adding is
    still safe: the dual never falls, and the run certifies the one-thread optimum."""
    monkeypatch.setattr("ooc.solvers.row_threads.HOT_FEATURES", 4)
    opts = dict(OPTS, tol=1e-10)
    one = ooc.train(binary, str(tmp_path / "one"), threads=1, **opts).result
    run = ooc.train(binary, str(tmp_path / "two"), threads=2, **opts)
    duals = [e["dual"] for e in run.history]
    assert all(b >= a for a, b in zip(duals, duals[1:]))
    res = run.result
    assert res["converged"] and abs(res["primal"] - one["primal"]) <= 2e-10 * abs(one["primal"])


def test_threads_split_one_problem_only_where_they_pay(binary, tmp_path):
    """Passes grow like (T R^2 + lambda n gamma) / (R^2 + lambda n gamma) on T threads: where that outweighs
    the threads (an ill-conditioned problem, the hinge), one problem keeps one thread's iterates."""
    from ooc.solvers.row_threads import rows_split_pays

    n = 10**6
    assert rows_split_pays(2, 1.0, 4.0, n) and rows_split_pays(2, 1.0, 12.0, n)  # the bench stores' c
    assert not rows_split_pays(2, 1.0, 0.12, n) and not rows_split_pays(2, 1.0, 0.0, n)  # ill-conditioned, hinge
    assert rows_split_pays(8, 1.0, 0.12, n) is False and rows_split_pays(2, 0.0, 0.0, n)
    for kw in (dict(l2=1e-4), dict(loss="hinge", l2=1e-2)):
        opts = dict(OPTS, tol=1e-12, max_epochs=20, solver="sdca", **kw)  # 20 passes, the same on both
        with pytest.warns(ooc.ConvergenceWarning):
            one = ooc.train(binary, str(tmp_path / "one"), threads=1, overwrite=True, **opts)
            two = ooc.train(binary, str(tmp_path / "two"), threads=2, overwrite=True, **opts)
        assert np.array_equal(_coef(one), _coef(two)) and _history(one) == _history(two)


def test_a_small_problem_keeps_one_thread(binary, tmp_path, monkeypatch):
    """Below MIN_ROWS_PER_THREAD rows a thread, the threads' meetings cost more than they share: one
    problem of hundreds of rows keeps one thread's iterates."""
    from ooc.solvers import row_threads

    monkeypatch.setattr(row_threads, "MIN_ROWS_PER_THREAD", 8192)
    assert not row_threads.rows_split_pays(2, 1.0, 12.0, N)
    opts = dict(OPTS, l2=1e-2, tol=1e-8, solver="sdca")
    one = ooc.train(binary, str(tmp_path / "one"), threads=1, **opts)
    two = ooc.train(binary, str(tmp_path / "two"), threads=2, **opts)
    assert np.array_equal(_coef(one), _coef(two)) and one.result["converged"]
