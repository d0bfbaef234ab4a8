"""The memory planner decides exactly what the solvers decided before it existed.

``planner_decisions.json`` holds what the solvers computed themselves before the planner
(recorded from that code for two stores, a grid of budgets and ``--mix-blocks`` 1, 2, 4):
row-groups (duals in memory or paged, read depth, blocks read ahead, cache budget, the
``MemoryBudgetWarning`` text), rcd-primal (margins in memory, cache budget), dgpd (vectors,
cache budget, line budget), and ``ooc info``'s resident figures. The planner, and the solvers
that read their plan from it, must reproduce every one.
"""

import importlib
import json
import os
import tempfile
import uuid
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import ooc
from ooc.runs.rundir import RunDir
from ooc.schedule import planner
from ooc.solvers.dgpd import DGPDSolver
from ooc.solvers.problem import make_problem
from ooc.solvers.rcd_primal import RCDPrimalSolver
from ooc.solvers.registry import resident_memory
from ooc.solvers.sdca import SDCASolver

T = importlib.import_module("ooc.train")

with open(os.path.join(os.path.dirname(__file__), "planner_decisions.json")) as f:
    RECORDED = json.load(f)

#: name -> (rows, cols, classes (2: binary), seed, block_bytes)
STORES = {"bin": (600, 50, 2, 0, 4000), "multi": (500, 30, 3, 1, 3000)}
BUDGETS = [0, 1000, 5000, 12000, 20000, 40000, 80000, 200000, 1 << 20, 1 << 30]


def _store(n, d, k, seed, block_bytes):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.1, random_state=seed, format="csr", data_rvs=rng.standard_normal)
    y = rng.integers(0, k, n).astype(float) if k > 2 else np.where(rng.standard_normal(n) > 0, 1.0, -1.0)
    return ooc.convert(X, f"memory://plan-{uuid.uuid4().hex[:8]}", y=y, dtype="float64", block_bytes=block_bytes,
                       layout="both")


@pytest.fixture(scope="module")
def stores():
    out = {}
    for name, args in STORES.items():
        st = _store(*args)
        o = dict(T.DEFAULTS)
        o.update(l2=1e-2, loss="smooth-hinge")
        out[name] = (st, make_problem(st, o))
    assert [out[s][0].n_blocks("rows") for s in STORES] == [11, 8]  # the stores the decisions were recorded on
    return out


def _rd():
    return RunDir.create(tempfile.mkdtemp(prefix="ooc-plan-"), {})


@pytest.mark.parametrize("name", list(STORES))
def test_row_groups_plan_is_the_recorded_split(stores, name):
    st, pb = stores[name]
    for mem in BUDGETS:
        for mix in (1, 2, 4):
            kind, depth, ahead, cache, warns = RECORDED["plans"][f"blocks/{name}/{mem}/{mix}"]
            p = planner.plan(planner.ROW_GROUPS, st, mem, k=pb.n_sub, mix=mix, warn=False)
            got = ["memory" if p.vectors_in_memory else "paged", p.read_depth, p.ahead_blocks, p.cache_bytes,
                   [p.warning] if p.warning else []]
            assert got == [kind, depth, ahead, cache, warns], (name, mem, mix)


@pytest.mark.parametrize("name", list(STORES))
def test_rcd_primal_and_dgpd_plans_are_the_recorded_split(stores, name):
    st, pb = stores[name]
    for mem in BUDGETS:
        p = planner.plan(planner.RCD_PRIMAL, st, mem, k=pb.n_sub)
        assert [p.vectors_in_memory, p.cache_bytes] == RECORDED["plans"][f"rcd/{name}/{mem}"], (name, mem)
        if name == "bin":
            p = planner.plan(planner.DGPD, st, mem, k=pb.n_sub)
            got = ["memory" if p.vectors_in_memory else "streamed", p.cache_bytes, p.line_bytes]
            assert got == RECORDED["plans"][f"dgpd/{name}/{mem}"], (name, mem)


@pytest.mark.parametrize("mem,mix", [(1000, 2), (12000, 1), (20000, 4), (40000, 2), (80000, 4), (1 << 20, 1)])
def test_solvers_take_the_recorded_split(stores, mem, mix):
    """The solvers' own attributes, and whether they warn, are the recorded split of what is left
    once their O(d) vectors (``plan.fixed``) are taken off ``--memory``; sdca's cache also gives up
    the copies a background checkpoint makes when it can afford them."""
    pb = stores["bin"][1]
    opts = {"memory": 0, "mix_blocks": mix, "tol": 1e-6, "seed": 0, "checkpoint_every": 300}

    def make(cls, **kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ooc.MemoryBudgetWarning)
            fixed = cls(pb, _rd(), dict(opts, **kw)).plan.fixed
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            solver = cls(pb, _rd(), dict(opts, memory=mem + fixed, **kw))
        return solver, [x for x in w if issubclass(x.category, ooc.MemoryBudgetWarning)]

    s, w = make(SDCASolver)
    kind, depth, ahead, cache, warns = RECORDED["plans"][f"blocks/bin/{mem}/{mix}"]
    # duals in memory keep a copy of a pass's starting ones (the state it certifies), from the cache's share; where
    # the cache cannot give it up they are paged (the plan's split is the recorded one either way)
    duals = 8 * s.k * s.n
    if kind == "memory" and cache < duals:
        kind = "paged"
    if kind == "memory":
        cache -= duals
    copies = 8 * s.k * s.dim * (s.state_vectors - (1 if s.v_is_w() else 0)) + (2 * duals if kind == "memory" else 0)
    assert [s.duals.kind, s.read_depth, s.ahead_blocks, s.cache.budget, bool(w)] \
        == [kind, depth, ahead, cache - (copies if cache >= copies else 0), bool(warns)]
    r, _ = make(RCDPrimalSolver, sampling="uniform")
    assert [r.in_memory, r.cache.budget] == RECORDED["plans"][f"rcd/bin/{mem}"]
    g, _ = make(DGPDSolver)
    assert [g.vectors, g.cache.budget, g.line_budget] == RECORDED["plans"][f"dgpd/bin/{mem}"]


def test_forced_vectors_override_the_budget(stores):
    st = stores["bin"][0]
    assert planner.plan(planner.ROW_GROUPS, st, 0, vectors="memory", warn=False).vectors_in_memory
    assert not planner.plan(planner.ROW_GROUPS, st, 1 << 30, vectors="paged").vectors_in_memory
    assert not planner.plan(planner.RCD_PRIMAL, st, 1 << 30, vectors="mapped").vectors_in_memory


def test_each_worker_gets_its_share(stores):
    """CoCoA: each of K workers plans with floor(M / K) (only cache sizes change, never iterates)."""
    st = stores["bin"][0]
    assert planner.worker_memory(1000, 3) == 333
    p = planner.plan(planner.COCOA_WORKER, st, 1 << 20, workers=4, vectors="paged")
    assert p.memory == p.cache_bytes == (1 << 20) // 4 and not p.vectors_in_memory


@pytest.mark.parametrize("name", list(STORES))
def test_resident_memory_is_the_recorded_figures(stores, name):
    assert resident_memory(stores[name][0]) == RECORDED["resident"][name]
