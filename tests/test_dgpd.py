"""DGPD (``ooc.solvers.dgpd``, Algorithm 2 with active sets) against references.

* its certified optimum equals scikit-learn's ElasticNet (squared loss) and scipy's L-BFGS-B on
  the split variables (smooth hinge, logistic) to 1e-6 relative, and sdca's;
* the duality gap goes down to tol, and at the end the active sets are the supports of the
  primal and dual solutions;
* a tiny cache (every line re-read from disk) and a resident matrix give identical iterates;
* a run stopped at ``max_epochs`` and resumed is bit-for-bit the uninterrupted run;
* one-vs-rest multiclass and the bias feature;
* Algorithm 1 (``tests/reference_dgpd.py``, numpy) reaches the same optimum, and the paper's
  Theorem 4.2 step size converges, though not at the rate printed in the paper.

The solver class is driven directly (as ``ooc.train`` does: ``make_problem`` + a RunDir).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
import warnings

import numpy as np
import pytest
import reference_dgpd as R
import scipy.sparse as sp
from test_train_optimality import primal, ref_scipy_primal

import ooc
from ooc.engine import run as run_solver
from ooc.kernels import dgpd as K
from ooc.objectives.losses import Logistic, SmoothHinge, Squared
from ooc.runs.rundir import RunDir
from ooc.solvers.dgpd import DGPDSolver, Selection, top_k
from ooc.solvers.problem import make_problem
from ooc.solvers.sdca import SDCASolver
from ooc.train import _validate

N, D = 240, 40
L2, L1 = 2e-2, 2e-2
EXACT = ("epoch", "primal", "dual", "gap", "rel_gap", "nnz_w", "active_x", "active_y")


@pytest.fixture(scope="module")
def runs():
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    d = tempfile.mkdtemp(prefix="ooc-test-dgpd-", dir=base)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def make_data(seed=0, n=N, d=D, density=0.2):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, random_state=seed, format="csr", data_rvs=rng.standard_normal)
    w = np.zeros(d)
    w[: d // 4] = rng.standard_normal(d // 4) * 2
    m = X @ w
    y_bin = np.where(m + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    y_reg = m + 0.2 * rng.standard_normal(n)
    return X, y_bin, y_reg


@pytest.fixture(scope="module")
def data():
    return make_data()


def store(X, y, where="memory", block_bytes=1200, path=None, **kw):
    name = f"memory://dgpd-{uuid.uuid4().hex[:8]}" if where == "memory" else path
    return ooc.convert(X, name, y=y, dtype="float64", block_bytes=block_bytes, **kw)


def solve(st, runs, cls=DGPDSolver, max_epochs=400, out=None, resume=False, **kw):
    extra = {k: kw.pop(k) for k in list(kw) if k.startswith("dgpd_")}
    o = _validate(dict(dict(l2=L2, l1=L1, tol=1e-10, seed=3, solver="sdca"), **kw), st)
    pb = make_problem(st, o)
    out = out or os.path.join(runs, uuid.uuid4().hex[:8])
    rd = RunDir.open(out) if resume else RunDir.create(out, {})
    opts = {"tol": o["tol"], "memory": o["memory_bytes"], "seed": o["seed"], "checkpoint_every": 300.0, **extra}
    res = run_solver(cls(pb, rd, opts), max_epochs, resume)
    return res, rd


def exact(rd):
    return [tuple(e.get(k) for k in EXACT) for e in rd.history()]


# ------------------------------------------------------------------------------------ optimum


@pytest.mark.parametrize("loss", ["squared", "smooth-hinge", "logistic"])
def test_optimum_matches_references(data, runs, loss):
    X, yb, yr = data
    y = yr if loss == "squared" else yb
    st = store(X, y, label_kind="regression" if loss == "squared" else "auto")
    res, rd = solve(st, runs, loss=loss)
    assert res["converged"] and res["rel_gap"] <= 1e-10
    w = res["w"][0]
    assert w.shape == (D,)
    Xd = X.toarray()
    P_w = primal(loss, Xd, y, w, L2, L1)
    assert res["primal"] == pytest.approx(P_w, rel=1e-11)
    if loss == "squared":
        from sklearn.linear_model import ElasticNet

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            w_ref = ElasticNet(alpha=L1 + L2, l1_ratio=L1 / (L1 + L2), fit_intercept=False, tol=1e-14,
                               max_iter=200000).fit(Xd, y).coef_
    else:
        w_ref = ref_scipy_primal(loss, Xd, y, L2, L1)
    P_ref = primal(loss, Xd, y, w_ref, L2, L1)
    assert abs(P_w - P_ref) <= 1e-6 * max(1.0, abs(P_ref))
    assert P_w - P_ref <= res["gap"] + 1e-12  # the certificate is right
    assert res["dual"] <= P_ref + 1e-12
    # strong convexity: ||w - w*||^2 <= 2 gap / l2 for both
    assert np.linalg.norm(w - w_ref) <= np.sqrt(2 * res["gap"] / L2) + np.sqrt(2 * max(P_ref - res["dual"], 0) / L2) + 1e-7
    # and sdca's optimum
    r_sdca, _ = solve(st, runs, cls=SDCASolver, max_epochs=3000, loss=loss)
    assert abs(r_sdca["primal"] - P_w) <= 1e-6 * max(1.0, abs(P_w))
    assert np.count_nonzero(w) < D  # the L1 term bites


def test_gap_decreases_to_tol_and_active_sets_are_supports(data, runs):
    X, yb, _ = data
    st = store(X, yb)
    res, rd = solve(st, runs, loss="smooth-hinge", tol=1e-12)
    h = rd.history()
    gaps = np.array([e["rel_gap"] for e in h])
    assert res["converged"] and gaps[-1] <= 1e-12
    assert all(e["primal"] >= e["dual"] for e in h)
    # linear convergence once the active sets settled: the tail decreases monotonically
    tail = gaps[len(gaps) // 2:]
    assert np.all(np.diff(tail) < 0), gaps
    assert all({"active_x", "active_y", "bytes_paged", "passes", "bytes_read", "cache_hit_rate"} <= set(e) for e in h)
    a = res["active_sets"][0]
    w = res["w"][0]
    np.testing.assert_array_equal(a["x"], np.flatnonzero(w))
    assert np.all(a["alpha"] != 0)  # A_y = supp(alpha)
    # the smooth hinge's dual is sparse: examples with margin >= 1 are not active
    margins = yb * (X @ w)
    assert len(a["y"]) < N
    assert np.all(margins[np.setdiff1d(np.arange(N), a["y"])] >= 1 - 1e-6)
    # and the dual is the sdca solution: alpha_i y_i = phi'-related box values
    full = np.zeros(N)
    full[a["y"]] = a["alpha"]
    v = X.T @ full / (L2 * N)
    np.testing.assert_allclose(np.sign(v) * np.maximum(np.abs(v) - L1 / L2, 0), w, atol=1e-12)


# ------------------------------------------------------------------------------ out of core


def test_tiny_cache_and_resident_matrix_give_identical_iterates(data, runs, tmp_path):
    X, yb, _ = data
    st = store(X, yb, where="disk", block_bytes=600, path=str(tmp_path / "s.zarr"))
    assert st.n_blocks("rows") >= 8 and st.n_blocks("cols") >= 4
    r_big, rd_big = solve(st, runs, loss="smooth-hinge", memory="1GiB")
    r_tiny, rd_tiny = solve(st, runs, loss="smooth-hinge", memory="16")
    assert r_big["converged"]
    assert np.array_equal(r_big["w"], r_tiny["w"])
    assert exact(rd_big) == exact(rd_tiny)
    # the tiny cache re-reads the active lines at every search; the resident run read each block once
    total = st.n_blocks("rows") + st.n_blocks("cols")
    assert r_tiny["bytes_read"] > r_big["bytes_read"]
    assert r_tiny["cache_hit_rate"] == 0.0
    assert r_big["bytes_read"] <= st.info()["bytes_decoded"] * 1.01, (r_big["bytes_read"], total)


def test_resume_is_bit_for_bit(data, runs):
    X, yb, _ = data
    st = store(X, yb)
    full, rd_full = solve(st, runs, loss="smooth-hinge", memory="16")
    assert full["epochs"] > 6
    out = os.path.join(runs, "resume-" + uuid.uuid4().hex[:6])
    part, _ = solve(st, runs, loss="smooth-hinge", max_epochs=4, out=out, memory="16")
    assert not part["converged"] and part["epochs"] == 4
    more, _ = solve(st, runs, loss="smooth-hinge", max_epochs=5, out=out, resume=True, memory="1GiB")
    assert more["epochs"] == 5
    done, rd = solve(st, runs, loss="smooth-hinge", out=out, resume=True)
    assert np.array_equal(done["w"], full["w"])
    assert exact(rd) == exact(rd_full)
    assert done["epochs"] == full["epochs"]


def test_streamed_vectors_and_resident_ones_give_identical_iterates(data, runs):
    """Labels/weights/norms resident (large --memory) or re-read per row block (tiny --memory, or
    forced): same history and coefficients, bit for bit; the margins are never held whole."""
    X, yb, _ = data
    st = store(X, yb)
    assert st.n_blocks("rows") >= 8
    r_mem, rd_mem = solve(st, runs, loss="smooth-hinge", memory="1GiB")
    r_tiny, rd_tiny = solve(st, runs, loss="smooth-hinge", memory="16")
    r_str, rd_str = solve(st, runs, loss="smooth-hinge", memory="1GiB", dgpd_vectors="streamed")
    assert r_mem["converged"]
    for r, rd in ((r_tiny, rd_tiny), (r_str, rd_str)):
        assert np.array_equal(r_mem["w"], r["w"])
        assert exact(rd) == exact(rd_mem)
        assert all(e["vector_bytes_read"] == 16 * N for e in rd.history())  # labels + norms, every search
    assert all(e["vector_bytes_read"] == 0 for e in rd_mem.history())
    rows = int(np.max(np.diff(st.block_ptr("rows"))))
    assert all(e["margin_bytes"] == 16 * rows < 16 * N for e in rd_mem.history())


def test_streamed_vectors_multiclass_with_bias_identical(runs):
    rng = np.random.default_rng(5)
    X = sp.random(N, D, density=0.25, random_state=5, format="csr", data_rvs=rng.standard_normal)
    y = np.argmax(X @ rng.standard_normal((D, 3)) + 0.3 * rng.standard_normal((N, 3)), axis=1).astype(float)
    st = store(X, y)
    a, rd_a = solve(st, runs, loss="smooth-hinge", bias=1.0, class_weight="balanced", dgpd_vectors="memory")
    b, rd_b = solve(st, runs, loss="smooth-hinge", bias=1.0, class_weight="balanced", memory="16")
    assert a["converged"] and np.array_equal(a["w"], b["w"])
    assert exact(rd_a) == exact(rd_b)


def test_resume_with_streamed_vectors_is_bit_for_bit(data, runs):
    X, yb, _ = data
    st = store(X, yb)
    full, rd_full = solve(st, runs, loss="smooth-hinge", memory="1GiB")
    out = os.path.join(runs, "resume-str-" + uuid.uuid4().hex[:6])
    part, _ = solve(st, runs, loss="smooth-hinge", max_epochs=3, out=out, memory="16")
    assert not part["converged"] and part["epochs"] == 3
    solve(st, runs, loss="smooth-hinge", max_epochs=5, out=out, resume=True, memory="1GiB")
    done, rd = solve(st, runs, loss="smooth-hinge", out=out, resume=True, memory="16")
    assert rd.history()[-1]["vector_bytes_read"] > 0
    assert np.array_equal(done["w"], full["w"])
    assert exact(rd) == exact(rd_full)


def test_resident_bytes_in_info_bound_a_measured_run(runs, tmp_path):
    """``ooc info``'s resident bytes are the solvers' formulas, and a streamed DGPD run stays within
    ``--memory`` + ``resident_bytes`` + its active submatrix, while the resident vectors cost what
    ``resident_vector_bytes`` says (tracemalloc sees numpy's allocations)."""
    import gc
    import tracemalloc

    from ooc.schedule import planner
    from ooc.solvers.registry import resident_memory

    n, d = 40000, 30
    rng = np.random.default_rng(0)
    X = sp.random(n, d, density=2 / d, random_state=0, format="csr", data_rvs=rng.standard_normal)
    y = np.where(X @ rng.standard_normal(d) + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    path = str(tmp_path / "s.zarr")
    st = store(X, y, where="disk", path=path, block_bytes=64 << 10)
    info = {**st.info(), **resident_memory(st)}  # the store's facts and the planner's figures, as ooc info
    rows = int(np.max(np.diff(st.block_ptr("rows"))))
    cols = int(np.max(np.diff(st.block_ptr("cols"))))
    assert info["resident_k"] == 1
    assert info["resident_bytes"] == {"sdca": planner.ROW_GROUPS.resident(n, d + 1, 1, rows=rows)["beyond_memory"],
                                      "dgpd": planner.DGPD.resident(n, d + 1, 1, rows=rows)["beyond_memory"],
                                      "rcd-primal": planner.RCD_PRIMAL.resident(n, d + 1, 1, cols=cols)["beyond_memory"]}
    assert info["resident_vector_bytes"] == {"sdca": 8 * n, "dgpd": 24 * n, "rcd-primal": 24 * n}
    assert info["resident_bytes"]["dgpd"] < info["resident_vector_bytes"]["dgpd"] / 4  # O(d + block), not O(n)
    mem = 1 << 20
    peaks, held = {}, {}
    for mode in ("memory", "streamed"):
        st = ooc.open_store(path)
        # what the solver holds once made (its vectors in memory, or not), before any pass: the vectors'
        # cost alone (a difference of two runs' peaks also held whatever a first run compiles or caches)
        o = _validate(dict(l2=1e-2, l1=1e-3, tol=1e-10, seed=3, solver="sdca", loss="smooth-hinge",
                           memory=str(mem)), st)
        gc.collect()
        tracemalloc.start()
        solver = DGPDSolver(make_problem(st, o), RunDir.create(os.path.join(runs, uuid.uuid4().hex[:8]), {}),
                            {"tol": 1e-10, "memory": o["memory_bytes"], "seed": 3, "checkpoint_every": 300.0,
                             "dgpd_vectors": mode})
        held[mode] = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        del solver
        st = ooc.open_store(path)
        tracemalloc.start()
        res, rd = solve(st, runs, loss="smooth-hinge", memory=str(mem), dgpd_vectors=mode, max_epochs=4,
                        l2=1e-2, l1=1e-3)
        peaks[mode] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        nnz_A = max(e.get("nnz_A", 0) for e in rd.history())
    assert peaks["streamed"] <= mem + info["resident_bytes"]["dgpd"] + 64 * nnz_A + (64 << 10), (peaks, nnz_A)
    # the store no longer keeps a second copy of the labels and row norms beside the solver's (40 n before)
    assert 0.9 * info["resident_vector_bytes"]["dgpd"] <= held["memory"] - held["streamed"] \
        <= 1.2 * info["resident_vector_bytes"]["dgpd"], held


def test_cli_dgpd_options(tmp_path):
    from click.testing import CliRunner

    from ooc.cli import main

    X, yb, _ = make_data(1, 80, 12)
    path = str(tmp_path / "s.zarr")
    store(X, yb, where="disk", path=path)
    help_text = CliRunner().invoke(main, ["train", "--help"]).output
    for flag in ("--dgpd-rounds", "--dgpd-batch", "--dgpd-growth", "--dgpd-dual-step", "--no-dgpd-fallback"):
        assert flag in help_text
    run = ooc.train(path, str(tmp_path / "r"), solver="dgpd", loss="smooth-hinge", l2=L2, l1=L1, tol=1e-8,
                    dgpd_rounds=2, dgpd_batch=4, dgpd_growth=0.5, dgpd_dual_step="theorem", max_epochs=3000,
                    dgpd_fallback=False)
    assert run.result["converged"]
    cfg = RunDir.open(run.path).config
    assert (cfg["dgpd_rounds"], cfg["dgpd_batch"], cfg["dgpd_growth"], cfg["dgpd_dual_step"]) == (2, 4, 0.5, "theorem")
    assert RunDir.open(run.path).history()[1]["active_y"] <= 4  # the first search added batch = 4 rows
    for bad, msg in (({"dgpd_rounds": 0}, "--dgpd-rounds"), ({"dgpd_batch": 2.5}, "--dgpd-batch"),
                     ({"dgpd_growth": -1.0}, "--dgpd-growth"), ({"dgpd_dual_step": "big"}, "--dgpd-dual-step")):
        with pytest.raises(ValueError, match=msg):
            ooc.train(path, str(tmp_path / uuid.uuid4().hex[:6]), solver="dgpd", **bad)
    with pytest.raises(ValueError, match="options of --solver dgpd"):
        ooc.train(path, str(tmp_path / "x"), solver="sdca", dgpd_rounds=3)
    res = CliRunner().invoke(main, ["train", path, "--out", str(tmp_path / "c"), "--solver", "dgpd", "--loss",
                                    "smooth-hinge", "--l2", str(L2), "--l1", str(L1), "--dgpd-batch", "0"])
    assert res.exit_code != 0 and "'--dgpd-batch'" in res.output and "must be an integer >= 1" in res.output
    res = CliRunner().invoke(main, ["train", path, "--out", str(tmp_path / "c2"), "--solver", "dgpd", "--loss",
                                    "smooth-hinge", "--l2", str(L2), "--l1", str(L1), "--dgpd-rounds", "3", "--no-dgpd-fallback",
                                    "--json"])
    assert res.exit_code == 0, res.output
    assert RunDir.open(str(tmp_path / "c2")).config["dgpd_rounds"] == 3


# ------------------------------------------------------------------------------- multiclass


def test_one_vs_rest_multiclass_with_bias_matches_sdca(runs):
    rng = np.random.default_rng(4)
    X = sp.random(N, D, density=0.25, random_state=4, format="csr", data_rvs=rng.standard_normal)
    y = np.argmax(X @ rng.standard_normal((D, 3)) + 0.3 * rng.standard_normal((N, 3)), axis=1).astype(float)
    st = store(X, y)
    assert st.label_kind == "multiclass"
    res, _ = solve(st, runs, loss="smooth-hinge", bias=1.0)
    ref, _ = solve(st, runs, cls=SDCASolver, max_epochs=3000, loss="smooth-hinge", bias=1.0)
    assert res["converged"] and res["w"].shape == (3, D + 1)
    assert abs(res["primal"] - ref["primal"]) <= 1e-6 * max(1.0, abs(ref["primal"]))
    np.testing.assert_allclose(res["w"], ref["w"], atol=2 * np.sqrt(2 * 1e-9 / L2))
    assert np.all(res["w"][:, D] != 0)  # the intercepts are used
    assert len(res["active_sets"]) == 3


# ------------------------------------------------------------------------ step sizes, Alg. 1


def test_theorem_step_converges_and_is_above_the_safeguard(data, runs):
    X, yb, _ = data
    st = store(X, yb)
    safe, rd_s = solve(st, runs, loss="smooth-hinge", tol=1e-8)
    thm, rd_t = solve(st, runs, loss="smooth-hinge", tol=1e-8, dgpd_dual_step="theorem", max_epochs=2000)
    assert thm["converged"]
    assert abs(thm["primal"] - safe["primal"]) <= 1e-7
    assert len(rd_t.history()) > len(rd_s.history())  # shorter steps, more outer iterations
    # q_theorem = s (5 R^2 + n gamma l2)/(2 n l2) >= ||row||^2 / (l2 n) for any s >= 1
    r2 = float(np.max(np.asarray(X.multiply(X).sum(axis=1)).ravel()))
    assert R.theorem_q(N, L2, r2, 1.0, 1) >= r2 / (L2 * N)


@pytest.mark.parametrize("loss", [SmoothHinge(1.0), Squared(), Logistic()], ids=lambda loss: loss.name)
def test_algorithm1_reference_reaches_the_dgpd_optimum(runs, loss):
    n, d = 40, 12
    X, yb, yr = make_data(7, n, d, density=0.5)
    y = yr if loss.name == "squared" else yb
    Xd = X.toarray()
    q = float((Xd * Xd).sum(axis=1).max()) / (L2 * n)
    _, a = R.algorithm1(loss, Xd, y, L2, L1, 6000, q=q)
    w1, P1, D1 = R.certified(loss, Xd, y, L2, L1, a)
    assert P1 - D1 <= 1e-9 * max(1.0, abs(P1))
    st = store(X, y, label_kind="regression" if loss.name == "squared" else "auto")
    res, _ = solve(st, runs, loss=loss.name)
    assert abs(res["primal"] - P1) <= 1e-6 * max(1.0, abs(P1))
    np.testing.assert_allclose(res["w"][0], w1, atol=1e-4)


def test_theorem_rate_as_printed_is_not_met():
    """Paper issue: Theorem 4.2's ``Delta(t+1) <= 2n / (2n + eta gamma) Delta(t)`` with the step of
    eq. 16 does not hold numerically, even with the largest valid sparsity bound ``s = d``
    (Algorithm 1 does converge with that step, more slowly). ``Delta >= D* - D(y)``."""
    n, d = 40, 12
    X, yb, _ = make_data(3, n, d, density=0.5)
    Xd = X.toarray()
    loss = SmoothHinge(1.0)
    l2, l1 = 0.05, 0.02
    _, a = R.algorithm1(loss, Xd, yb, l2, l1, 4000, q=float((Xd * Xd).sum(axis=1).max()) / (l2 * n))
    _, Pstar, Dstar = R.certified(loss, Xd, yb, l2, l1, a)
    assert Pstar - Dstar < 1e-12
    r2 = float((Xd * Xd).sum(axis=1).max())
    q = R.theorem_q(n, l2, r2, 1.0, d)
    eta = n / q
    gaps = []
    R.algorithm1(loss, Xd, yb, l2, l1, 800, q=q, record=lambda t, x, a: gaps.append(
        Dstar - R.certified(loss, Xd, yb, l2, l1, a)[2]))
    claimed = Dstar * (2 * n / (2 * n + eta)) ** 800  # Delta(0) = D* - D(0) = D*, P-gap 0 at y = 0
    assert 0 < claimed < gaps[-1] < gaps[0]  # converging, but slower than printed


# ---------------------------------------------------------------------------------- helpers


def test_streamed_margins_and_selection_equal_the_whole_vector_ones():
    rng = np.random.default_rng(2)
    A = sp.random(300, 50, density=0.1, random_state=2, format="csc", data_rvs=rng.standard_normal)
    A.sort_indices()
    lines = np.sort(rng.choice(50, 20, replace=False)).astype(np.int64)
    coef = rng.standard_normal(20)
    coef[3] = 0.0
    whole = np.zeros(300)
    K.lines_axpy(A.indptr.astype(np.int64), A.indices.astype(np.int64), A.data, lines, coef, whole)
    bounds = [0, 7, 7, 64, 130, 299, 300]
    cursor = A.indptr[lines].astype(np.int64)
    parts = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        out = np.zeros(hi - lo)
        K.lines_axpy_range(A.indptr.astype(np.int64), A.indices.astype(np.int64), A.data, lines, coef, cursor,
                           lo, hi, out)
        parts.append(out)
    assert np.array_equal(np.concatenate(parts), whole)
    score = np.round(rng.standard_normal(300), 1)  # many ties
    for k in (1, 5, 40, 400):
        sel = Selection(k)
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            sel.add(lo, score[lo:hi], -score[lo:hi], 2 * score[lo:hi])
        np.testing.assert_array_equal(sel.ids, top_k(score, k))
        np.testing.assert_array_equal(sel.y, -score[sel.ids])
        np.testing.assert_array_equal(sel.c, 2 * score[sel.ids])


def test_selection_helpers():
    s = np.array([0.0, 3.0, 1.0, 3.0, -1.0, 2.0])
    np.testing.assert_array_equal(top_k(s, 2), [1, 3])
    np.testing.assert_array_equal(top_k(s, 3), [1, 3, 5])
    np.testing.assert_array_equal(top_k(s, 10), [1, 2, 3, 5])  # positive scores only
    m = np.array([2.0, 0.5, -1.0])
    y = np.array([1.0, 1.0, 1.0])
    score = np.empty(3)
    K.dual_scores(SmoothHinge(1.0), m, y, np.ones(3), np.ones(3), np.zeros(3, dtype=bool), score)
    assert score[0] == 0.0 and score[1] > 0 and score[2] > score[1]
    active = np.array([False, False, True])
    K.dual_scores(SmoothHinge(1.0), m, y, np.ones(3), np.ones(3), active, score)
    assert score[2] == 0.0
    xbar, sc = np.empty(3), np.empty(3)
    K.primal_scores(np.array([3.0, -0.5, 2.0]), 1.0, 1.0, 2, np.array([False, False, False]), xbar, sc)
    np.testing.assert_array_equal(xbar, [2.0, 0.0, 2.0])  # the last entry is a bias: no threshold
    np.testing.assert_array_equal(sc, [2.0, 0.0, 0.0])


# ------------------------------------------------------------------------------------ dense dual


def test_dense_dual_warns_once_and_still_reaches_sdcas_optimum(data, runs):
    """Logistic: every alpha_i != 0 at the optimum, the dual active set fills, dgpd says so once (and
    names sdca); it still certifies sdca's optimum. A sparse dual (smooth hinge at small l2: under
    half of the margins below 1) does not warn."""
    from ooc.solvers.dgpd import DenseDualWarning

    X, yb, _ = data
    st = store(X, yb)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res, rd = solve(st, runs, loss="logistic")
    dense = [w for w in caught if issubclass(w.category, DenseDualWarning)]
    assert len(dense) == 1 and "--solver sdca" in str(dense[0].message) and "\n" not in str(dense[0].message)
    assert max(e["active_y"] for e in rd.history()) > 0.5 * N
    ref, _ = solve(st, runs, cls=SDCASolver, max_epochs=3000, loss="logistic")
    assert res["converged"] and abs(res["primal"] - ref["primal"]) <= res["gap"] + ref["gap"] + 1e-12
    assert np.linalg.norm(res["w"][0] - ref["w"][0]) <= np.sqrt(2 * res["gap"] / L2) + np.sqrt(2 * ref["gap"] / L2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res, rd = solve(st, runs, loss="smooth-hinge", gamma=0.1, l2=1e-3, l1=1e-3)
    assert res["converged"] and max(e["active_y"] for e in rd.history()) <= 0.5 * N
    assert not [w for w in caught if issubclass(w.category, DenseDualWarning)]


def test_dense_dual_falls_back_to_sdca_from_dgpds_duals(tmp_path):
    """The logistic loss has no sparse dual: a new dgpd run whose dual active set passes half the
    examples goes on as sdca from dgpd's duals (one warning line), to sdca's certified optimum; with
    --no-dgpd-fallback it stays dgpd (and only warns)."""
    from click.testing import CliRunner

    from ooc.cli import main

    X, yb, _ = make_data(3, 400, 30)
    path = str(tmp_path / "s.zarr")
    store(X, yb, where="disk", path=path)
    opts = ["--loss", "logistic", "--l2", "1e-3", "--l1", "1e-4", "--tol", "1e-9", "--json"]
    res = CliRunner().invoke(main, ["train", path, "--out", str(tmp_path / "r"), "--solver", "dgpd", *opts])
    assert res.exit_code == 0, res.output
    warned = [ln for ln in res.output.splitlines() if "dense dual" in ln]
    assert len(warned) == 1 and "sdca goes on from its duals" in warned[0], res.output
    cfg = RunDir.open(str(tmp_path / "r")).config
    assert cfg["solver_used"] == "sdca" and "dgpd" in cfg["started_from"]
    out = json.loads(res.output.strip().splitlines()[-1])
    ref = ooc.train(path, str(tmp_path / "ref"), solver="sdca", loss="logistic", l2=1e-3, l1=1e-4, tol=1e-9)
    assert out["converged"] and abs(out["primal"] - ref.result["primal"]) <= 2e-9 * max(1.0, ref.result["primal"])
    # the run resumes as the sdca run it is
    res = CliRunner().invoke(main, ["resume", str(tmp_path / "r"), "--json"])
    assert res.exit_code == 0 and json.loads(res.output.strip().splitlines()[-1])["converged"], res.output
    kept = ooc.train(path, str(tmp_path / "k"), solver="dgpd", loss="logistic", l2=1e-3, l1=1e-4, tol=1e-9,
                     dgpd_fallback=False, max_epochs=3000)
    assert RunDir.open(kept.path).config["solver_used"] == "dgpd" and kept.result["converged"]
