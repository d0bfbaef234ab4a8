"""rcd-primal on several threads (``ooc.kernels.rcd_threads``): one problem's drawn columns.

* the step is safe for every draw, not only in expectation: a round of ``T`` threads never raises
  the objective, even on columns that share every row (where the threads' plain NSync steps,
  added, do raise it);
* heavy columns take one thread's exact step, their rows over the threads: the iterates of one
  thread up to the order of a sum;
* on 2 and 3 threads (light columns in rounds from 3 on) the runs are certified at scikit-learn's
  optimum, the same bits on every run with the same count, and resumed bit for bit;
* one-vs-rest classes go on the threads: the same bits as one thread; runs made before the
  scheme keep one thread.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import scipy.sparse as sp

import ooc
from ooc.kernels.args import Labels, Reg, Rows
from ooc.kernels.rcd import primal_cd_pass
from ooc.kernels.rcd_threads import RoundArrays, owned_cd_steps, round_combine, round_prepare, route_rounds
from ooc.objectives.losses import Logistic, Squared

T_ = importlib.import_module("ooc.train")
N, D = 600, 40
OPTS = dict(solver="rcd-primal", l2=1e-2, tol=1e-9, seed=4, max_epochs=300, loss="logistic")


@pytest.fixture(autouse=True)
def _small(monkeypatch):
    monkeypatch.setattr(T_, "plot_convergence", lambda rd: None)
    # small problems: a few columns heavy, many rounds, and the phases on the threads all the same
    monkeypatch.setattr("ooc.solvers.rcd_primal.HEAVY_NNZ", 200)
    monkeypatch.setattr("ooc.solvers.rcd_primal.ROUND_NNZ", 64)
    monkeypatch.setattr("ooc.solvers.rcd_primal.MIN_THREAD_WORK", 1)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(5)
    X = sp.random(N, D, density=0.15, random_state=5, format="csc", data_rvs=rng.standard_normal)
    X = sp.hstack([X, sp.csc_matrix(rng.standard_normal((N, 3)))]).tocsr()  # 3 dense (heavy) columns
    y = np.where(X @ rng.standard_normal(D + 3) + 0.3 * rng.standard_normal(N) > 0, 1.0, -1.0)
    path = str(tmp_path_factory.mktemp("rpt") / "b.zarr")
    return ooc.convert(X, path, y=y, dtype="float64", block_bytes="4KiB", layout="both")


def _coef(run):
    return ooc.load_model(run.path).coef_


def _history(run):
    return [(e["epoch"], e["primal"], e["dual"], e["gap"]) for e in run.history]


# -- the round's step, kernel by kernel ---------------------------------------------------------------
def _objective(loss, X, y, w, l2, l1):
    z = X @ w
    v = np.log1p(np.exp(-y * z)) if isinstance(loss, Logistic) else 0.5 * (z - y) ** 2
    return float(v.mean() + 0.5 * l2 * w @ w + l1 * np.abs(w).sum())


def _one_round(loss, Xc, y, z, w, parts, l2, l1, beta):
    """One round of ``len(parts)`` threads, run one thread after the other (the kernels' contract)."""
    n = len(y)
    T = len(parts)
    cols = Rows(Xc.indptr.astype(np.int64), Xc.indices, Xc.data)
    arrays = RoundArrays.zeros(T, n)
    lab, reg = Labels(y, np.ones(n)), Reg(l2, l1, float(n), 0.0)
    for t in range(T):
        round_prepare(cols, arrays, t, 0, parts[t], 7)
    n_moved = np.array([owned_cd_steps(loss, cols, 0, lab, z, w, parts[t], beta, reg, arrays, t, 7) for t in range(T)])
    for lo, hi in ((0, n // 2), (n // 2, n)):  # the combine by row ranges, in any split of the rows
        round_combine(arrays, n_moved, z, 7, lo, hi)


@pytest.mark.parametrize("loss,beta", [(Logistic(), 0.25), (Squared(), 1.0)])
@pytest.mark.parametrize("l1", [0.0, 1e-3])
def test_a_round_never_raises_the_objective(loss, beta, l1):
    """Columns that share every row (correlated, dense): each thread's plain NSync step, added, overshoots;
    the round's steps (curvature times the threads touching each row) never raise ``F``, round after round,
    and ``z`` stays ``X w``."""
    rng = np.random.default_rng(0)
    n, d, T, l2 = 300, 12, 3, 1e-3
    base = rng.standard_normal(n)
    X = np.outer(base, np.ones(d)) + 0.05 * rng.standard_normal((n, d))
    y = np.where(base + 0.1 * rng.standard_normal(n) > 0, 1.0, -1.0) if isinstance(loss, Logistic) else base * 2.0
    Xc = sp.csc_matrix(X)
    w, z = np.zeros(d), np.zeros(n)
    parts = [np.arange(t, d, T, dtype=np.int64) for t in range(T)]
    f = [_objective(loss, X, y, w, l2, l1)]
    for _ in range(20):
        _one_round(loss, Xc, y, z, w, parts, l2, l1, beta)
        f.append(_objective(loss, X, y, w, l2, l1))
        np.testing.assert_allclose(z, X @ w, atol=1e-10)
    assert all(b <= a + 1e-12 for a, b in zip(f, f[1:])) and f[-1] < 0.9 * f[0]

    if not isinstance(loss, Squared):
        return
    # the squared loss, whose curvature bound is exact: from 0, the same threads with one thread's steps
    # each (M_j of one thread), added, raise F -- each covers the shared direction, three times over (the
    # logistic's bound beta = 1/4 is loose enough here that such steps would not)
    w2, z2 = np.zeros(d), np.zeros(n)
    M = beta * (X**2).sum(axis=0) / n + l2
    cols, lab, reg = Rows(Xc.indptr.astype(np.int64), Xc.indices, Xc.data), Labels(y, np.ones(n)), Reg(l2, l1, float(n), 0.0)
    moves = []
    for p in parts:
        wt, zt = w2.copy(), z2.copy()
        primal_cd_pass(loss, cols, 0, lab, zt, wt, p, M, reg)
        moves.append(wt - w2)
    assert _objective(loss, X, y, w2 + sum(moves), l2, l1) > f[0]


def test_route_rounds_keeps_a_columns_repeats_on_one_thread_and_balances_the_nonzeros():
    rng = np.random.default_rng(3)
    nnz = rng.integers(1, 50, 200)
    indptr = np.concatenate([[0], np.cumsum(nnz)]).astype(np.int64)
    draws = rng.integers(0, 200, 500)
    T = 3
    out, ptr = np.empty_like(draws), np.zeros((len(draws) + 1) * T + 1, dtype=np.int64)
    seen = np.full(200, -1, dtype=np.int64)
    rounds = route_rounds(indptr, draws, T, 100, out, ptr, np.zeros(200, dtype=np.int32), seen)
    assert (seen == -1).all() and ptr[rounds * T] == len(draws)
    assert sorted(out.tolist()) == sorted(draws.tolist())
    q = 0
    for r in range(rounds):
        part = [out[ptr[r * T + t]:ptr[r * T + t + 1]] for t in range(T)]
        size = sum(len(p) for p in part)
        assert sorted(np.concatenate(part).tolist()) == sorted(draws[q:q + size].tolist())
        q += size
        owners = {}
        for t, p in enumerate(part):
            for j in p:
                assert owners.setdefault(int(j), t) == t  # a column's repeats on one thread
        for t, p in enumerate(part):
            assert p.tolist() == [int(j) for j in draws[q - size:q] if owners[int(j)] == t]  # in their order
        # each column went, at its first draw, to the thread with the fewest nonzeros so far (the lowest on a tie)
        load, ref = [0] * T, {}
        for j in draws[q - size:q]:
            j = int(j)
            if j not in ref:
                ref[j] = min(range(T), key=lambda t: (load[t], t))
            load[ref[j]] += int(nnz[j])
        assert ref == owners
        # a round closes once it holds T * max(round_nnz, largest drawn column) nonzeros
        budget = T * max(100, int(nnz[draws].max()))
        assert (sum(load) >= budget or r == rounds - 1) and sum(load) - int(nnz[int(draws[q - 1])]) < budget


# -- the solver ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("sampling", ["uniform", "importance", "gap-per-epoch"])
def test_columns_over_threads_reach_the_optimum_and_resume_bit_exact(store, tmp_path, threads, sampling):
    from sklearn.linear_model import LogisticRegression

    opts = dict(OPTS, sampling=sampling)
    one = ooc.train(store, str(tmp_path / "one"), threads=1, **opts)
    run = ooc.train(store, str(tmp_path / "t"), threads=threads, **opts)
    again = ooc.train(store, str(tmp_path / "again"), threads=threads, **opts)
    for r in (one, run):
        res = r.result
        assert res["converged"] and res["gap"] <= 1e-9 * max(1.0, abs(res["primal"]))
    assert not np.array_equal(_coef(one), _coef(run))  # the threads did take part
    X, y = store.to_scipy(), np.asarray(store.labels)
    ref = LogisticRegression(C=1.0 / (opts["l2"] * X.shape[0]), fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, y)
    bound = 2 * np.sqrt(2 * run.result["gap"] / opts["l2"]) + 1e-6
    assert np.linalg.norm(_coef(run) - ref.coef_.ravel()) <= bound
    assert np.array_equal(_coef(run), _coef(again)) and _history(run) == _history(again)
    out = str(tmp_path / "part")
    with pytest.warns(ooc.ConvergenceWarning):
        ooc.train(store, out, threads=threads, **dict(opts, max_epochs=2))
    done = ooc.resume(out, max_epochs=opts["max_epochs"])
    assert np.array_equal(_coef(done), _coef(run)) and _history(done) == _history(run)


def test_elastic_net_on_three_threads_matches_sklearn(store, tmp_path):
    """The squared loss with L1 and L2 (proximal steps) and an intercept column, light columns in rounds."""
    from sklearn.linear_model import ElasticNet

    X = store.to_scipy()
    rng = np.random.default_rng(1)
    yr = X @ rng.standard_normal(X.shape[1]) + 0.1 * rng.standard_normal(X.shape[0])
    path = str(tmp_path / "r.zarr")
    reg_store = ooc.convert(X, path, y=yr, dtype="float64", block_bytes="4KiB", layout="both")
    l1, l2 = 1e-2, 1e-2
    run = ooc.train(reg_store, str(tmp_path / "en"), threads=3, **dict(OPTS, loss="squared", l1=l1, l2=l2, tol=1e-10))
    res = run.result
    assert res["converged"] and res["gap"] <= 1e-10 * max(1.0, abs(res["primal"]))
    ref = ElasticNet(alpha=l1 + l2, l1_ratio=l1 / (l1 + l2), fit_intercept=False, tol=1e-14, max_iter=100000).fit(X, yr)
    bound = 2 * np.sqrt(2 * res["gap"] / l2) + 1e-6
    assert np.linalg.norm(_coef(run) - ref.coef_) <= bound


def test_heavy_columns_take_one_threads_step(store, tmp_path, monkeypatch):
    """Every column heavy: two threads take one thread's steps, split by rows (a sum's order differs)."""
    monkeypatch.setattr("ooc.solvers.rcd_primal.HEAVY_NNZ", 1)
    opts = dict(OPTS, max_epochs=5, tol=1e-14)
    with pytest.warns(ooc.ConvergenceWarning):
        one = ooc.train(store, str(tmp_path / "one"), threads=1, **opts)
        two = ooc.train(store, str(tmp_path / "two"), threads=2, **opts)
    np.testing.assert_allclose(_coef(two), _coef(one), rtol=1e-10, atol=1e-13)
    assert [e["epoch"] for e in two.history] == [e["epoch"] for e in one.history]


def test_one_vs_rest_classes_over_threads_change_nothing(store, tmp_path):
    X = store.to_scipy()
    y = np.digitize(X @ np.linspace(-1, 1, X.shape[1]), [-0.5, 0.5]).astype(float)
    multi = ooc.convert(X, str(tmp_path / "m.zarr"), y=y, dtype="float64", block_bytes="4KiB", layout="both")
    opts = dict(OPTS, tol=1e-8)
    one = ooc.train(multi, str(tmp_path / "one"), threads=1, **opts)
    two = ooc.train(multi, str(tmp_path / "two"), threads=2, **opts)
    assert one.result["converged"] and _coef(one).shape == (3, X.shape[1])
    assert np.array_equal(_coef(one), _coef(two)) and _history(one) == _history(two)


