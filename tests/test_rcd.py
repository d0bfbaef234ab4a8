"""rcd-dual (Quartz) and rcd-primal (NSync): certified optima, samplings, out of core, exact resume.

The solvers are built as ``ooc.train._execute`` builds them (``make_problem(store, options)`` and a
RunDir). What is asserted:

* every solver x loss x penalty x sampling converges (relative gap <= tol) to the optimum of an
  independent reference: scikit-learn Ridge / Lasso / ElasticNet / LogisticRegression /
  LinearSVC with ``C = 1/(l2 n)``, the objective recomputed here in numpy, 1e-6 relative; and the
  certificate is honest: ``P(w) - P_ref <= gap``;
* the coordinate-wise gaps sum to the duality gap (dual and primal side, with L1);
* the Quartz step is used for the logistic loss and is the one the paper means;
* iterates do not depend on the cache size nor on where the margins/duals live; many blocks
  and one block reach the same certified optimum; gap-guided paging too;
* a run stopped at any block boundary (mid-epoch) or at an epoch boundary and resumed ends
  bit-for-bit where an uninterrupted one does.
"""

from __future__ import annotations

import importlib
import tempfile
import uuid

import numpy as np
import pytest
import scipy.sparse as sp

import ooc
from ooc.engine import run as run_solver
from ooc.kernels.rcd import dual_block_gaps
from ooc.runs.rundir import RunDir
from ooc.schedule.sampling import SAMPLINGS
from ooc.solvers.problem import make_problem
from ooc.solvers.rcd_dual import RCDDualSolver
from ooc.solvers.rcd_primal import RCDPrimalSolver
from ooc.solvers.registry import acc_sdca_l2_threshold, auto_solver, explain_auto

T = importlib.import_module("ooc.train")
#: run directories in memory when possible: checkpoints are fsynced at every block in the resume tests
N, D = 200, 30
L2 = 0.03


def make_store(reg=False, n=N, d=D, seed=0, block_bytes=None, multiclass=False, dtype="float64"):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.3, random_state=seed, format="csr", data_rvs=rng.standard_normal)
    t = X @ rng.standard_normal(d)
    if reg:
        y = t + 0.1 * rng.standard_normal(n)
    elif multiclass:
        y = np.digitize(t, np.quantile(t, [1 / 3, 2 / 3])).astype(float)
    else:
        y = np.where(t + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    kind = "regression" if reg else ("multiclass" if multiclass else "binary")
    st = ooc.convert(X, f"memory://rcd-{uuid.uuid4().hex[:8]}", y=y, dtype=dtype, block_bytes=block_bytes,
                     label_kind=kind)
    return X.toarray(), y, st


@pytest.fixture(scope="module")
def clf():
    return make_store()


@pytest.fixture(scope="module")
def reg():
    return make_store(reg=True)


def solver(cls, st, rd=None, **kw):
    o = dict(T.DEFAULTS)
    o.update({k: v for k, v in kw.items() if k in T.DEFAULTS})
    pb = make_problem(st, o)
    rd = rd or RunDir.create(tempfile.mkdtemp(prefix="ooc-rcd-"), {})
    opts = {"tol": o["tol"], "memory": kw.get("memory", 1 << 30), "seed": o["seed"],
            "checkpoint_every": kw.get("checkpoint_every", 300.0), "sampling": o["sampling"],
            "paging": kw.get("paging"), "margin_store": kw.get("margin_store"), "dual_store": kw.get("dual_store")}
    return cls(pb, rd, opts)


def train(cls, st, max_epochs=1000, **kw):
    s = solver(cls, st, **kw)
    return run_solver(s, max_epochs, resume=False), s


# -- the objective in numpy, and references -----------------------------------------------------------
def objective(loss, X, y, w, l2, l1=0.0):
    z = X @ w
    if loss == "squared":
        f = 0.5 * (z - y) ** 2
    elif loss == "logistic":
        f = np.logaddexp(0.0, -y * z)
    elif loss == "hinge":
        f = np.maximum(0.0, 1.0 - y * z)
    else:  # smooth hinge, gamma = 1
        m = y * z
        f = np.where(m >= 1, 0.0, np.where(m <= 0, 0.5 - m, 0.5 * (1 - m) ** 2))
    return f.mean() + 0.5 * l2 * w @ w + l1 * np.abs(w).sum()


def reference(loss, X, y, l2, l1=0.0):
    from sklearn.linear_model import ElasticNet, Lasso, LogisticRegression, Ridge

    n = len(y)
    if loss == "squared" and l1 == 0:
        return Ridge(alpha=l2 * n, fit_intercept=False, tol=1e-14).fit(X, y).coef_
    if loss == "squared" and l2 == 0:
        return Lasso(alpha=l1, fit_intercept=False, tol=1e-15, max_iter=200000).fit(X, y).coef_
    if loss == "squared":
        return ElasticNet(alpha=l1 + l2, l1_ratio=l1 / (l1 + l2), fit_intercept=False, tol=1e-15,
                          max_iter=200000).fit(X, y).coef_
    if loss == "logistic":
        return LogisticRegression(C=1 / (l2 * n), fit_intercept=False, tol=1e-14, max_iter=10000).fit(X, y).coef_[0]
    if loss == "hinge":  # LinearSVC stops early here: L-BFGS-B on the box-constrained dual (a smooth QP)
        from scipy.optimize import minimize

        Xy = X * y[:, None]

        def negdual(s):
            u = Xy.T @ s / (l2 * n)
            return -(s.mean() - 0.5 * l2 * u @ u), -(1.0 / n - Xy @ u / n)

        s = minimize(negdual, np.full(n, 0.5), jac=True, method="L-BFGS-B", bounds=[(0, 1)] * n,
                     options={"ftol": 1e-16, "gtol": 1e-14, "maxiter": 100000, "maxcor": 50}).x
        return Xy.T @ s / (l2 * n)
    from scipy.optimize import minimize  # smooth hinge: L-BFGS on the smooth primal

    f = lambda w: objective(loss, X, y, w, l2)  # noqa: E731

    def grad(w):
        m = y * (X @ w)
        dphi = np.where(m >= 1, 0.0, np.where(m <= 0, -1.0, m - 1.0)) * y
        return X.T @ dphi / n + l2 * w

    return minimize(f, np.zeros(X.shape[1]), jac=grad, method="L-BFGS-B",
                    options={"gtol": 1e-13, "ftol": 1e-16, "maxiter": 100000}).x


def check_optimum(res, loss, X, y, l2, l1=0.0, tol=1e-6):
    assert res["converged"], res
    w = res["w"][0]
    p = objective(loss, X, y, w, l2, l1)
    assert p == pytest.approx(res["primal"], rel=1e-9, abs=1e-12)  # the reported P is P of the returned w
    assert res["dual"] <= res["primal"] + 1e-12
    wr = reference(loss, X, y, l2, l1)
    pr = objective(loss, X, y, wr, l2, l1)
    assert p - pr <= res["gap"] + 1e-12  # the certificate is honest (P_ref >= P*)
    assert abs(p - pr) <= tol * max(1.0, abs(pr))


CASES = [("rcd-dual", "squared", s) for s in ("uniform", "importance")] + \
        [("rcd-dual", "logistic", s) for s in ("uniform", "importance", "gap-per-epoch")] + \
        [("rcd-dual", "smooth-hinge", s) for s in ("uniform", "importance")] + \
        [("rcd-dual", "hinge", s) for s in SAMPLINGS] + \
        [("rcd-primal", loss, s) for loss in ("squared", "logistic", "smooth-hinge") for s in ("uniform", "importance")] + \
        [("rcd-primal", "squared", s) for s in ("gap-per-epoch", "ada-gap")]


@pytest.mark.parametrize("name,loss,sampling", CASES)
def test_reaches_reference_optimum_l2(name, loss, sampling, clf, reg):
    X, y, st = reg if loss == "squared" else clf
    cls = RCDDualSolver if name == "rcd-dual" else RCDPrimalSolver
    tol = 1e-8 if loss == "hinge" else 1e-10
    res, s = train(cls, st, loss=loss, l2=L2, tol=tol, sampling=sampling, max_epochs=3000)
    check_optimum(res, loss, X, y, L2)
    if name == "rcd-dual" and loss == "logistic":
        assert s.step_rule == ("quartz" if sampling in ("uniform", "importance") else "exact")


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_lasso_every_sampling(sampling, reg):
    """Pure L1 with the Lipschitzing trick: gap-certified Lasso, as in the adaptive-sampling paper."""
    X, y, st = reg
    res, _ = train(RCDPrimalSolver, st, loss="squared", l2=0.0, l1=0.1, tol=1e-9, sampling=sampling,
                   max_epochs=5000)
    check_optimum(res, "squared", X, y, 0.0, 0.1)
    assert res["nnz_w"] < D  # sparse


def test_lasso_residual_samplings_beat_uniform(reg):
    """On pure L1 the residual- and gap-driven samplings need fewer epochs than uniform (the paper's Fig. 1).

    With the Lipschitzed ``kappa_j`` they needed more: it jumps between ``|w_j|`` and
    ``B - |w_j|`` at ``|r_j| = l1``, where every support coordinate sits, and starved half of
    the support (``adaptive``: 163 epochs against uniform's 43 on this problem).
    """
    X, y, st = reg
    epochs = {}
    for s in ("uniform", "adaptive", "ada-uniform", "gap-per-epoch"):
        res, _ = train(RCDPrimalSolver, st, loss="squared", l2=0.0, l1=0.1, tol=1e-9, sampling=s, max_epochs=5000)
        check_optimum(res, "squared", X, y, 0.0, 0.1)
        epochs[s] = res["epochs"]
    assert epochs["adaptive"] < epochs["uniform"] / 2, epochs
    assert epochs["ada-uniform"] < epochs["uniform"], epochs
    # gap-per-epoch weighs by the same score at each epoch's start (the coordinate gap starved the support)
    assert epochs["gap-per-epoch"] < epochs["uniform"], epochs


def test_prox_residual_is_continuous_and_zero_at_the_optimum():
    from ooc.kernels.rcd import primal_kappa, prox_residual

    l1, m, w, B = 0.1, 2.0, 0.3, 50.0
    # w_j = 0.3 is optimal for this coordinate when r = -l1 (the subgradient condition)
    assert prox_residual(w, -l1, l1, m) == 0.0
    lo, hi = prox_residual(w, -l1 * (1 - 1e-9), l1, m), prox_residual(w, -l1 * (1 + 1e-9), l1, m)
    assert max(lo, hi) < 1e-9  # continuous across |r| = l1 ...
    assert primal_kappa(w, -l1 * (1 + 1e-9), 0.0, l1, B) > 10.0  # ... where the Lipschitzed kappa jumps to ~B
    # the length of the prox step from w: S(w - r/m, l1/m) - w
    r = 0.4
    assert prox_residual(w, r, l1, m) == pytest.approx(abs(np.sign(w - r / m) * max(abs(w - r / m) - l1 / m, 0) - w))


@pytest.mark.parametrize("name", ["rcd-dual", "rcd-primal"])
def test_elastic_net(name, reg):
    X, y, st = reg
    cls = RCDDualSolver if name == "rcd-dual" else RCDPrimalSolver
    res, _ = train(cls, st, loss="squared", l2=0.01, l1=0.05, tol=1e-10, sampling="importance")
    check_optimum(res, "squared", X, y, 0.01, 0.05)


def test_l1_logistic_has_a_gap(clf):
    X, y, st = clf
    res, _ = train(RCDPrimalSolver, st, loss="logistic", l2=0.0, l1=0.02, tol=1e-9, sampling="gap-per-epoch")
    assert res["converged"] and res["gap"] >= -1e-12 and 0 < res["nnz_w"] < D


def test_coordinate_gaps_sum_to_the_gap(clf):
    """Dual side: sum_i G_i = P(w) - D(alpha), also with l1 > 0 (w = soft_threshold(v))."""
    X, y, st = clf
    rng = np.random.default_rng(0)
    l2, l1 = 0.05, 0.01
    from ooc.objectives import make_loss
    from ooc.objectives.penalties import soft_threshold
    loss = make_loss("smooth-hinge")
    alpha = y * rng.random(N)
    v = X.T @ alpha / (l2 * N)
    w = soft_threshold(v, l1 / l2)
    A = sp.csr_matrix(X)
    gaps = np.zeros(N)
    ps, ds = dual_block_gaps(loss, A.indptr.astype(np.int64), A.indices, A.data, y, np.ones(N), alpha, w, 0.0,
                             float(N), gaps)
    P = objective("smooth-hinge", X, y, w, l2, l1)
    Dv = ds / N - 0.5 * l2 * w @ w
    assert (gaps >= -1e-15).all()
    assert gaps.sum() == pytest.approx(P - Dv, rel=1e-10)
    assert ps / N + 0.5 * l2 * w @ w + l1 * np.abs(w).sum() == pytest.approx(P, rel=1e-12)


def test_primal_history_is_a_valid_certificate(reg):
    """Every epoch's primal-side gap bounds the suboptimality, and it reaches 0."""
    X, y, st = reg
    res, s = train(RCDPrimalSolver, st, loss="squared", l2=0.0, l1=0.1, tol=1e-11, sampling="uniform")
    pstar = objective("squared", X, y, reference("squared", X, y, 0.0, 0.1), 0.0, 0.1)
    h = s.rd.history()
    assert len(h) > 3
    for e in h:
        assert e["primal"] - pstar <= e["gap"] + 1e-12 and e["dual"] <= pstar + 1e-12
    assert h[-1]["rel_gap"] <= 1e-11 < h[0]["rel_gap"]


def test_quartz_step_is_the_papers():
    """Face-off Sec. 7: alpha <- alpha + eta (-phi'(z) - alpha), eta = theta / q_i (<= 1)."""
    from ooc.kernels.args import Labels, Reg, Rows
    from ooc.kernels.rcd import quartz_pass
    from ooc.objectives import make_loss

    loss = make_loss("logistic")
    X = sp.csr_matrix(np.array([[1.0, 2.0], [0.5, -1.0]]))
    y = np.array([1.0, -1.0])
    alpha = np.array([0.3, -0.2])
    v = X.T @ alpha / (0.1 * 2)
    w = v.copy()
    eta = np.array([0.25, 0.5])
    z0 = X[0] @ w
    target = -(-y[0] / (1 + np.exp(y[0] * z0[0])))
    quartz_pass(loss, Rows(X.indptr.astype(np.int64), X.indices, X.data), Labels(y, np.ones(2)), alpha, np.array([0]),
                eta, v, w, Reg(0.1, 0.0, 2.0, 0.0))
    assert alpha[0] == pytest.approx(0.3 + 0.25 * (target - 0.3), rel=1e-14)
    assert w == pytest.approx(X.T @ alpha / 0.2, rel=1e-14)


# -- out of core ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def blocked():
    return make_store(n=300, block_bytes=800, seed=3)


@pytest.mark.parametrize("name", ["rcd-dual", "rcd-primal"])
def test_cache_and_storage_do_not_change_iterates(name, blocked):
    X, y, st = blocked
    assert st.n_blocks("rows") > 10 and st.n_blocks("cols") > 10
    cls = RCDDualSolver if name == "rcd-dual" else RCDPrimalSolver
    kw = dict(loss="logistic", l2=0.01, tol=1e-10, bias=1.0, sampling="importance")
    a, _ = train(cls, st, memory=1 << 30, **kw)
    b, sb = train(cls, st, memory=16, **kw)  # nothing cached, duals / margins paged from disk
    assert a["converged"]
    assert np.array_equal(a["w"], b["w"]) and a["epochs"] == b["epochs"]
    assert b["cache_hit_rate"] == 0.0
    kind = sb.duals.kind if name == "rcd-dual" else ("memory" if sb.in_memory else "paged")
    assert kind == "paged"


@pytest.mark.parametrize("name", ["rcd-dual", "rcd-primal"])
def test_blocks_and_paging_same_optimum(name, blocked):
    X, y, st_many = blocked
    one = ooc.convert(X, f"memory://rcd-{uuid.uuid4().hex[:8]}", y=y, dtype="float64")
    cls = RCDDualSolver if name == "rcd-dual" else RCDPrimalSolver
    kw = dict(loss="logistic", l2=0.01, tol=1e-10, sampling="uniform")
    r1, _ = train(cls, one, **kw)
    r2, _ = train(cls, st_many, **kw)
    r3, _ = train(cls, st_many, paging="gap", **kw)
    for r in (r1, r2, r3):
        assert r["converged"]
    for a in (r1, r2, r3):
        for b in (r1, r2, r3):
            assert a["primal"] >= b["dual"] - 1e-15
    assert not np.array_equal(r1["w"], r2["w"])


@pytest.mark.parametrize("sampling", ["uniform", "importance", "gap-per-epoch", "adaptive"])
def test_groups_of_blocks_make_every_update_of_the_epoch(sampling, blocked, tmp_path):
    """With --mix-blocks 4 a group of blocks draws the updates of all its blocks from all its rows: n
    updates an epoch (a group used to draw only its first block's, with another block's row norms),
    and the run reaches the optimum of the groups of one block."""
    X, y, st = blocked
    assert st.n_blocks("rows") >= 12
    kw = dict(solver="rcd-dual", loss="logistic", l2=0.01, tol=1e-9, sampling=sampling, seed=4, max_epochs=400, bias=0.0)
    runs = [ooc.train(st, str(tmp_path / f"mix{mix}"), mix_blocks=mix, **kw) for mix in (4, 1)]
    for run in runs:
        h = run.history
        assert [e["updates"] for e in h] == [e["epoch"] * X.shape[0] for e in h]
        assert run.result["converged"]
    res = runs[0].result
    p = objective("logistic", X, y, ooc.load_model(runs[0].path).coef_.ravel(), 0.01)
    pr = objective("logistic", X, y, reference("logistic", X, y, 0.01), 0.01)
    assert p == pytest.approx(res["primal"], rel=1e-9) and p - pr <= res["gap"] + 1e-12 and abs(p - pr) <= 1e-8
    assert len(runs[0].history) <= 1.5 * len(runs[1].history) + 2


def test_multiclass_ovr_matches_sdca():
    X, y, st = make_store(multiclass=True, seed=4)
    ref = T.train(st, out=tempfile.mkdtemp(), loss="logistic", l2=L2, tol=1e-10, solver="sdca", overwrite=True)
    for cls in (RCDDualSolver, RCDPrimalSolver):
        res, _ = train(cls, st, loss="logistic", l2=L2, tol=1e-10, sampling="importance")
        assert res["converged"] and res["w"].shape == (3, D)
        assert res["primal"] == pytest.approx(ref.result["primal"], rel=1e-8)


# -- resume ----------------------------------------------------------------------------------------------------
class Stop(Exception):
    pass


@pytest.mark.parametrize("name,sampling,stop_at", [("rcd-dual", "gap-per-epoch", 7), ("rcd-dual", "uniform", 33),
                                                   ("rcd-primal", "importance", 9), ("rcd-primal", "ada-gap", 31),
                                                   ("rcd-primal", "uniform", 0)])
@pytest.mark.parametrize("paged", [False, True])
def test_resume_is_bit_for_bit(name, sampling, stop_at, paged, blocked, monkeypatch):
    X, y, st = blocked
    cls = RCDDualSolver if name == "rcd-dual" else RCDPrimalSolver
    kw = dict(loss="logistic", l2=0.01, tol=1e-5, bias=1.0, sampling=sampling, checkpoint_every=0.0,
              memory=16 if paged else 1 << 30)
    full, sf = train(cls, st, **kw)
    hook = "update_block" if cls is RCDDualSolver else "_update_block"
    orig = getattr(cls, hook)
    calls = {"n": 0}

    def flaky(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == stop_at + 1 and stop_at:
            raise Stop()
        return orig(self, *a, **k)

    s = solver(cls, st, **kw)
    monkeypatch.setattr(cls, hook, flaky)
    if stop_at:
        with pytest.raises(Stop):
            run_solver(s, 1000, resume=False)
    else:
        run_solver(s, 2, resume=False)  # stopped by max_epochs at an epoch boundary
    monkeypatch.setattr(cls, hook, orig)
    s2 = solver(cls, st, rd=s.rd, **kw)
    res = run_solver(s2, 1000, resume=True)
    assert np.array_equal(res["w"], full["w"])
    ex = ("epoch", "primal", "dual", "gap")
    assert [tuple(e[k] for k in ex) for e in s2.rd.history()] == [tuple(e[k] for k in ex) for e in sf.rd.history()]


# -- the auto rule -----------------------------------------------------------------------------------------------
def test_auto_rule():
    info = {"C_P": 1.0, "C_D": 2.0}
    assert auto_solver(info, 0.0, 1e-3, "logistic") == "rcd-primal"
    assert auto_solver(info, 0.0, 1e-3, "hinge") == "sdca"
    assert auto_solver(info, 0.0, 1e-3, "logistic", has_cols=False) == "sdca"
    assert auto_solver({"C_P": 3.0, "C_D": 2.0}, 0.0, 1e-3, "squared") == "sdca"
    assert auto_solver({"C_P": 3.0, "C_D": 2.0}, 0.1, 0.0, "squared") == "rcd-primal"
    assert auto_solver(info, 0.0, 1e-3, "hinge", multiclass="crammer-singer") == "sdca"
    assert auto_solver(info, 0.0, 1e-3, "hinge", sampling="ada-gap") == "rcd-dual"


def test_validation(clf):
    X, y, st = clf
    with pytest.raises(ValueError, match="smooth loss"):
        solver(RCDPrimalSolver, st, loss="hinge", l2=L2)
    with pytest.raises(ValueError, match="l2 > 0"):
        solver(RCDDualSolver, st, loss="logistic", l2=0.0, l1=0.1)
    with pytest.raises(ValueError, match="sampling"):
        solver(RCDDualSolver, st, loss="logistic", l2=L2, sampling="greedy")
    with pytest.raises(ValueError, match="Quartz"):
        s = dict(T.DEFAULTS, loss="hinge", l2=L2)
        RCDDualSolver(make_problem(st, s), RunDir.create(tempfile.mkdtemp(), {}),
                      {"tol": 1e-6, "memory": 1 << 30, "seed": 0, "checkpoint_every": 1.0, "rcd_step": "quartz"})
    Xm, ym, stm = make_store(multiclass=True, seed=4)
    with pytest.raises(ValueError, match="one-vs-rest"):
        solver(RCDDualSolver, stm, loss="logistic", l2=L2, sampling="ada-gap")


def test_auto_rule_picks_acc_sdca_below_the_condition_threshold():
    # dual side, n = 1000, R = 1: the threshold is R^2 / (10 gamma n) = 1e-4 / gamma
    info = {"C_P": 3.0, "C_D": 2.0, "R": 1.0, "n_rows": 1000}
    assert auto_solver(info, 0.0, 1e-5, "squared") == "acc-sdca"          # 1e-5 < 1e-4
    assert auto_solver(info, 0.0, 2e-4, "squared") == "sdca"
    assert auto_solver(info, 0.0, 3e-5, "logistic") == "sdca"             # logistic: 2.5e-5
    assert auto_solver(info, 0.0, 2e-5, "logistic") == "acc-sdca"
    assert auto_solver(info, 0.0, 5e-6, "smooth-hinge", gamma=10.0) == "acc-sdca"   # 1e-5
    assert auto_solver(info, 0.0, 5e-5, "smooth-hinge", gamma=10.0) == "sdca"
    assert auto_solver(info, 0.0, 1e-9, "hinge") == "sdca"               # never for the hinge
    assert auto_solver(info, 0.0, 1e-9, "squared", sampling="importance") == "rcd-dual"
    assert acc_sdca_l2_threshold(info, "logistic") == pytest.approx(2.5e-5)
    text = " ".join(explain_auto(info, has_cols=True))
    assert "acc-sdca" in text and "2.5e-05" in text


def test_auto_runs_acc_sdca_at_small_l2(tmp_path):
    from ooc.synth import SynthSource

    # rows only: the dual side whatever C_P and C_D say
    st = ooc.convert(SynthSource(3000, 300, 10, seed=5), f"memory://auto-{uuid.uuid4().hex[:8]}",
                     dtype="float64", layout="rows")
    thr = acc_sdca_l2_threshold(st.info(), "logistic")
    r = ooc.train(st, str(tmp_path / "r"), loss="logistic", l2=thr / 10, tol=1e-3, max_epochs=300)
    assert r.result["solver"] == "acc-sdca" and r.result["converged"]
