"""``--memory`` is what the process uses; training blocks fit it; the iterates never depend on it.

* training blocks (:meth:`ooc.store.Store.with_blocks`): the store's blocks cut to ``--block-bytes``,
  by the rule that cut the store, each at most that size; a store trains the same whatever
  ``--memory``, with its own blocks (``store``) or cut ones, and a run made before the option
  existed goes on with the store's blocks;
* the planner takes the O(d) vectors off the budget first and names the smallest budget that
  holds a pass; an explicit budget below it warns, ``auto`` under a limit below it refuses with
  one line (no OOM kill later);
* ``ooc info STORE --memory X`` says whether a run fits, and a real ``ooc train`` process at the
  smallest ``--memory`` it names plans without a warning;
* the process's limits (:mod:`ooc._memlimit`): cgroup v1/v2 files, ``auto``'s margin;
* predict/evaluate read blocks that fit their budget, with the same results.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import uuid
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import ooc
from ooc import _memlimit
from ooc.config import TrainConfig
from ooc.schedule import planner
from ooc.store import layout as L
from ooc.units import parse_bytes

T = importlib.import_module("ooc.train")
N, D = 1200, 60
OPTS = dict(l2=1e-3, tol=1e-9, seed=5, max_epochs=300)


@pytest.fixture(autouse=True)
def _no_plot(monkeypatch):
    monkeypatch.setattr(T, "plot_convergence", lambda rd: None)


@pytest.fixture
def no_extra_limits():
    saved = list(_memlimit._EXTRA)
    yield
    _memlimit._EXTRA[:] = saved


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    X = sp.random(N, D, density=0.15, random_state=3, format="csr", data_rvs=rng.standard_normal)
    y = np.where(X @ rng.standard_normal(D) + 0.3 * rng.standard_normal(N) > 0, 1.0, -1.0)
    return X, y


@pytest.fixture(scope="module")
def big_blocks(data, tmp_path_factory):
    """A store written with blocks much larger than the training blocks the tests ask for."""
    X, y = data
    path = str(tmp_path_factory.mktemp("mem") / "big.zarr")
    return ooc.convert(X, path, y=y, dtype="float64", block_bytes="1MiB")


def _coef(run):
    return ooc.load_model(run.path).coef_


# -- training blocks -------------------------------------------------------------------------------
def test_training_blocks_cut_stored_blocks_by_the_stores_rule(big_blocks):
    st = big_blocks
    assert st.n_blocks(L.ROWS) == 1
    view = st.with_blocks(4096)
    ptr = view.block_ptr(L.ROWS)
    assert ptr[0] == 0 and ptr[-1] == st.n_rows and np.all(np.diff(ptr) > 0) and len(ptr) > 5
    entry = L.entry_bytes(st.dtype, st.index_dtype)
    sizes = [int(st.row_nnz[a:b].sum()) * entry + 8 * (b - a) for a, b in zip(ptr[:-1], ptr[1:])]
    assert max(sizes) <= 4096
    # within each stored block, exactly the boundaries the convert rule gives for that block
    assert np.array_equal(ptr, L.block_boundaries(st.row_nnz, entry, 4096))
    # a block that fits stays whole: blocks as large as the store's leave it as it is
    assert st.with_blocks(None) is st and st.with_blocks(1 << 30) is st
    # every row read through the view is the store's row
    blk = view.block(L.ROWS, 3)
    whole = st.to_scipy()
    assert (abs(whole[blk.start:blk.stop] - sp.csr_matrix((blk.data, blk.indices, blk.indptr),
                                                          shape=(blk.stop - blk.start, st.n_cols)))).nnz == 0


def test_iterates_do_not_depend_on_memory_with_cut_blocks(big_blocks, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ooc.MemoryBudgetWarning)  # "16" holds less than a pass: it goes on
        runs = [ooc.train(big_blocks, str(tmp_path / f"r{i}"), block_bytes="4KiB", memory=m, **OPTS)
                for i, m in enumerate(["16", "40KiB", "1GiB"])]
    coefs = [_coef(r) for r in runs]
    assert all(np.array_equal(coefs[0], c) for c in coefs[1:])
    assert [e["primal"] for e in runs[0].history] == [e["primal"] for e in runs[2].history]
    assert all(r.result["converged"] for r in runs)


def test_block_bytes_is_a_trajectory_option(big_blocks, tmp_path):
    """Other training blocks: another order of the rows (another trajectory), the same optimum."""
    a = ooc.train(big_blocks, str(tmp_path / "a"), block_bytes="4KiB", **OPTS)
    b = ooc.train(big_blocks, str(tmp_path / "b"), block_bytes="store", **OPTS)
    assert not np.array_equal(_coef(a), _coef(b))
    for r in (a, b):
        assert r.result["converged"] and r.result["rel_gap"] <= 1e-9
    assert abs(a.result["primal"] - b.result["primal"]) <= 2e-9 * max(1.0, abs(a.result["primal"]))


def test_resume_keeps_the_training_blocks(big_blocks, tmp_path):
    full = ooc.train(big_blocks, str(tmp_path / "full"), block_bytes="4KiB", **OPTS)
    out = str(tmp_path / "part")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ooc.train(big_blocks, out, block_bytes="4KiB", **dict(OPTS, max_epochs=3))
    done = ooc.resume(out, max_epochs=OPTS["max_epochs"])
    assert np.array_equal(_coef(done), _coef(full))


@pytest.mark.parametrize("bad", ["0", "12", "lots", "-4KiB"])
def test_bad_block_bytes_is_one_line(big_blocks, tmp_path, bad):
    with pytest.raises(ValueError, match="--block-bytes"):
        ooc.train(big_blocks, str(tmp_path / "r"), block_bytes=bad, **OPTS)


def test_warm_start_across_other_training_blocks(big_blocks, tmp_path):
    """A finished run's duals start one with other training blocks: the same rows, cut differently."""
    prev = ooc.train(big_blocks, str(tmp_path / "prev"), block_bytes="4KiB", **OPTS)
    warm = ooc.train(big_blocks, str(tmp_path / "warm"), block_bytes="3KiB", warm_start=prev.path,
                     **dict(OPTS, l2=2e-3))
    cold = ooc.train(big_blocks, str(tmp_path / "cold"), block_bytes="3KiB", **dict(OPTS, l2=2e-3))
    assert warm.result["converged"] and warm.result["epochs"] < cold.result["epochs"]
    assert abs(warm.result["primal"] - cold.result["primal"]) <= 2e-9


# -- the split and what is reported ------------------------------------------------------------------
def test_fixed_bytes_come_off_the_budget_first(big_blocks):
    st = big_blocks.with_blocks(4096)
    fixed = planner.fixed_bytes(planner.ROW_GROUPS, st, 1, st.n_cols, 4)
    p = planner.plan(planner.ROW_GROUPS, st, 10 << 20, mix=4, warn=False, fixed=fixed)
    q = planner.plan(planner.ROW_GROUPS, st, (10 << 20) - fixed, mix=4, warn=False)
    assert (p.cache_bytes, p.read_depth, p.vectors_in_memory) == (q.cache_bytes, q.read_depth, q.vectors_in_memory)
    assert p.fixed == fixed and p.minimum == fixed + sum(planner.group_and_ahead(st, 4))
    short = planner.plan(planner.ROW_GROUPS, st, p.minimum - 1, mix=4, warn=False, fixed=fixed)
    assert short.warning and not planner.plan(planner.ROW_GROUPS, st, p.minimum, mix=4, warn=False,
                                              fixed=fixed).warning


def test_explicit_memory_too_small_warns_with_the_smallest_that_works(big_blocks, tmp_path):
    # a Python caller's memory is what training adds to its process: too small, it goes on at the minimum
    # (the command line's --memory, the whole process, is refused: test_a_real_train_process_...)
    with pytest.warns(ooc.MemoryBudgetWarning, match="smallest --memory that works here is"):
        r = ooc.train(big_blocks, str(tmp_path / "r"), block_bytes="4KiB", memory="1KiB", **OPTS)
    assert r.result["converged"]  # it goes on, above the number given


def test_auto_under_a_limit_too_small_refuses_before_training(big_blocks, tmp_path, no_extra_limits):
    _memlimit.add_limit(_memlimit.Limit(_memlimit.rss_bytes() + (1 << 20), "test limit"))
    with pytest.raises(planner.MemoryLimitError) as e:
        ooc.train(big_blocks, str(tmp_path / "r"), block_bytes="16KiB", mix_blocks=600, **OPTS)
    msg = str(e.value)
    assert "\n" not in msg and "test limit" in msg and "training needs at least" in msg
    # the figure it names is enough: under it, auto plans the same run without complaint
    need = parse_bytes(msg.split("training needs at least ")[1].split(" in all")[0].replace(" ", ""))
    _memlimit._EXTRA[:] = [_memlimit.Limit(need + (2 << 20) + _memlimit.KERNELS_BYTES, "test limit")]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ooc.MemoryBudgetWarning)
        r = ooc.train(big_blocks, str(tmp_path / "r2"), block_bytes="16KiB", mix_blocks=600,
                      **dict(OPTS, max_epochs=2))
    assert r.result["memory_source"] == "test limit"


def test_auto_takes_the_tightest_limit_and_leaves_the_margin(no_extra_limits):
    lim = _memlimit.Limit(1 << 30, "test limit")
    _memlimit.add_limit(lim)
    assert _memlimit.process_limit() == lim
    held = 200 << 20
    assert _memlimit.auto_budget(lim, held) == (1 << 30) - held - _memlimit.margin(1 << 30)
    # smallest_limit inverts auto_budget: the limit under which auto leaves exactly what is needed
    for need in (100 << 20, 3 << 30):
        limit = _memlimit.smallest_limit(need)
        assert _memlimit.auto_budget(_memlimit.Limit(limit, "x"), 0) >= need
        assert _memlimit.auto_budget(_memlimit.Limit(limit - (1 << 20), "x"), 0) < need


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_cgroup_limit_is_the_smallest_on_the_path(tmp_path, version):
    root = tmp_path / "cg"
    if version == "v2":
        (tmp_path / "self").write_text("0::/a/b\n")
        for rel, value in [("a", "300000000"), ("a/b", "max")]:
            (root / rel).mkdir(parents=True)
            (root / rel / "memory.max").write_text(value + "\n")
    else:
        (tmp_path / "self").write_text("5:cpu,cpuacct:/x\n4:memory:/a/b\n")
        for rel, value in [("memory/a", "9223372036854771712"), ("memory/a/b", "123456789")]:
            (root / rel).mkdir(parents=True)
            (root / rel / "memory.limit_in_bytes").write_text(value + "\n")
    got = _memlimit._cgroup_limit(str(tmp_path / "self"), str(root))
    assert got == (300000000 if version == "v2" else 123456789)
    assert _memlimit._cgroup_limit(str(tmp_path / "missing"), str(root)) is None


def test_info_says_whether_a_run_fits(big_blocks, monkeypatch):
    from ooc import memfit
    from ooc.train import memory_fit

    # info counts its own process where larger than a training process's (this test session is, and grows
    # between calls): the training process's size assumed, the same at every call
    monkeypatch.setattr(memfit, "rss_bytes", lambda: 0)

    def fit(memory):
        return memory_fit(big_blocks, {"memory": str(memory), "block_bytes": 4096, "mix_blocks": 4})

    small, big = fit(200 << 20), fit(2 << 30)
    for name, fam in big["families"].items():
        assert fam["fits"], name
        assert not small["families"][name]["fits"] or small["families"][name]["smallest_memory"] <= 200 << 20
        least = fam["smallest_memory"]
        assert fit(least)["families"][name]["fits"]
        assert not fit(least - 1)["families"][name]["fits"]
    sd = big["families"]["sdca"]
    assert sd["blocks"] == big_blocks.with_blocks(4096).n_blocks(L.ROWS) and sd["block_bytes"] == 4096


def _ooc():
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "ooc.cli"]


def test_a_real_train_process_fits_the_smallest_memory_info_names(data, tmp_path):
    """``ooc info --memory`` and ``ooc train --memory`` agree: at the smallest --memory info names (the
    whole process), a train process trains; 64 MiB less and it is refused, naming that figure."""
    X, y = data
    store = str(tmp_path / "s.zarr")
    ooc.convert(X, store, y=y, dtype="float64", block_bytes="64KiB").close()
    args = ["--block-bytes", "4KiB", "--mix-blocks", "4"]
    info = json.loads(subprocess.run(_ooc() + ["info", store, "--memory", "1GiB", "--json", *args],
                                     capture_output=True, text=True, check=True).stdout)
    fit = info["memory_fit"]
    # the family of the solver train runs (auto's): another's kernels may be in Numba's cache when these are not
    fam = fit["families"][fit["auto_solver"]]
    assert fit["memory_source"] == "--memory" and fam["fits"]
    least = fam["smallest_memory"]
    for mem, refused in [(least, False), (least - (64 << 20), True)]:
        r = subprocess.run(_ooc() + ["train", store, "--out", str(tmp_path / f"r{mem}"), "--memory", str(mem),
                                     "--max-epochs", "2", "--json", *args], capture_output=True, text=True)
        assert (r.returncode != 0) == refused, r.stderr
        assert ("smallest --memory that works" in r.stderr) == refused, r.stderr
    text = subprocess.run(_ooc() + ["info", store, "--memory", "100MiB", *args], capture_output=True, text=True,
                          check=True).stdout
    assert "does NOT fit" in text and "needs at least --memory" in text


# -- predict / evaluate --------------------------------------------------------------------------------
def test_evaluate_reads_blocks_that_fit_its_budget(data, big_blocks, tmp_path):
    from ooc.evaluate import evaluate, iter_predictions

    run = ooc.train(big_blocks, str(tmp_path / "r"), **dict(OPTS, max_epochs=20))
    small = evaluate(run.path, big_blocks.path, memory="1KiB")
    large = evaluate(run.path, big_blocks.path, memory="1GiB")
    # ROC AUC keeps every row's score: beyond half of --memory it is skipped and says why, never computed
    # above the limit; every other figure is the same
    assert small.pop("roc_auc") is None and "more than --memory leaves" in small.pop("roc_auc_skipped")
    assert large.pop("roc_auc") is not None and "roc_auc_skipped" not in large
    assert small == large
    a = np.concatenate(list(iter_predictions(run.path, big_blocks.path, memory="1KiB")))
    b = np.concatenate(list(iter_predictions(run.path, big_blocks.path, memory="auto")))
    assert np.array_equal(a, b) and len(a) == N


def test_memory_auto_is_the_default_and_reported(big_blocks, tmp_path):
    r = ooc.train(big_blocks, str(tmp_path / f"r{uuid.uuid4().hex[:6]}"), **dict(OPTS, max_epochs=2))
    assert TrainConfig().memory == "auto"
    assert r.result["memory_source"] in ("cgroup memory limit", "RLIMIT_AS", "available RAM")
    assert r.result["memory_budget"] > 0
