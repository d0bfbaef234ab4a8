"""The smallest memory ``ooc info`` names is the one ``ooc train`` refuses below (docs/training.rst, "Memory").

One computation (:mod:`ooc.memfit`) makes both: ``ooc info``'s figure per solver for the training options
given (:func:`ooc.train.memory_fit`) and the figure ``ooc train``'s refusal names before its run directory
(:func:`ooc.train._refuse_before_run_dir`); here over drawn option sets (solver, multiclass mode, ``--l1``,
``--fit-intercept``, ``--threads``, ``--mix-blocks``, ``--block-bytes``), for a process that holds what
``info`` predicts. That a real ``ooc train`` process at the figure trains under it is
tests/test_memory_budget.py's.

``--threads 0`` on a tight memory: the count that fits.

One problem's threads each hold a replica of the model (``O(d)`` bytes a thread), so the smallest
memory a run of ``sdca`` needs grows with its threads. The invariants, for any core count:

* ``ooc info`` under ``--threads 0`` names the smallest memory of the leanest count (one thread), and at
  any memory it reports a count at least that of every count whose smallest memory it is at;
* ``ooc train --threads 0`` (:func:`ooc.train._fit_threads`) picks that same count before ``run.json``
  records it; an explicit ``--threads N`` is never lowered.
"""

from __future__ import annotations

import importlib
import re

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import ooc
from ooc import memfit
from ooc._memlimit import STATED_HEADROOM, margin
from ooc.schedule.planner import MemoryLimitError
from ooc.solvers.registry import SOLVER_REGISTRY

T = importlib.import_module("ooc.train")
D = 1 << 16
BLOCK = 16 << 10


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    rng = np.random.default_rng(7)
    X = sp.random(4000, D, density=8 / D, random_state=7, format="csr", data_rvs=rng.standard_normal)
    y = np.where(rng.standard_normal(4000) > 0, 1.0, -1.0)
    path = str(tmp_path_factory.mktemp("thr") / "s.zarr")
    st = ooc.convert(X, path, y=y, dtype="float64", block_bytes="64KiB")
    yield st
    st.close()


@pytest.fixture(autouse=True, scope="module")
def _a_training_process():
    """``ooc info`` counts its own process where it is larger than a training process (this test session
    is): here, the training process's size assumed, the same at every call."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(memfit, "rss_bytes", lambda: 0)
        yield


def _fit(store, memory, **options):
    return T.memory_fit(store, {"memory": str(memory), "block_bytes": BLOCK, "mix_blocks": 4, **options})


def _sdca(store, memory, threads):
    return _fit(store, memory, threads=threads, solver="sdca")["families"]["sdca"]


def _train_choice(store, monkeypatch, fam, cores, auto=True):
    """The count ``ooc.train`` runs with under the budget ``ooc info`` planned the family with (``fam``)."""
    o = T._validate({"solver": "sdca", "bias": 0, "block_bytes": BLOCK, "mix_blocks": 4, "threads": 0}, store)
    o.update(threads=cores, threads_auto=auto)
    monkeypatch.setattr(T, "_memory_budget",
                        lambda o, reader=0, quiet=False: {"memory": fam["work_bytes"], "memory_held": 1,
                                                          "ceiling": None})
    T._fit_threads(store, o)
    return o["threads"]


@pytest.mark.parametrize("cores", [2, 4])
def test_default_threads_fit_the_memory(wide, monkeypatch, cores):
    monkeypatch.setattr(T, "resolve_threads", lambda t: int(t) or cores)
    floors = {t: _sdca(wide, 1 << 30, t)["smallest_memory"] for t in range(1, cores + 1)}
    assert floors[1] < floors[2] <= floors[cores]  # each thread more holds a replica
    assert _sdca(wide, 1 << 30, 0)["smallest_memory"] == floors[1]
    for t, least in floors.items():
        for memory in (least, least + (floors[cores] - floors[1]) // 3):
            auto = _sdca(wide, memory, 0)
            # the floors named carry a headroom: a count whose floor is above memory may still fit its plan
            assert auto["fits"] and auto["threads"] >= max(n for n, f in floors.items() if f <= memory)
            assert _train_choice(wide, monkeypatch, auto, cores) == auto["threads"], (t, memory, auto)
            # an explicit count is kept (a memory too small for it is refused, naming what works)
            assert _train_choice(wide, monkeypatch, auto, cores, auto=False) == cores
            assert _sdca(wide, memory, cores)["fits"] == (floors[cores] <= memory)


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    rng = np.random.default_rng(11)
    X = sp.random(3000, 1 << 14, density=6 / (1 << 14), random_state=11, format="csr", data_rvs=rng.standard_normal)
    y = rng.integers(0, 5, 3000).astype(np.float64)
    path = str(tmp_path_factory.mktemp("fam") / "m.zarr")
    st = ooc.convert(X, path, y=y, dtype="float64", block_bytes="64KiB", layout="both")
    yield st
    st.close()


def _named(st, o, memory, process):
    """The figure ``ooc train``'s refusal before its run directory names at whole-process ``memory`` (None:
    not refused), for a process that holds what ``ooc info`` predicts (``process``: its size, kernels apart)."""
    def budget(o2, reader=0, quiet=False):
        held = memfit.predicted_held(st, o2["solver_used"], o2, process)
        return {"memory": max(0, memory - held - margin(memory)), "memory_held": held, "ceiling": memory}

    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(T, "_memory_budget", budget)
            # the option itself is the bound compared with the figure (one rule): the memory given here
            T._refuse_before_run_dir(st, {**o, "memory_bytes": memory})
    except MemoryLimitError as e:
        m = re.search(r"smallest --memory that works here is ([0-9.]+) (MiB|GiB)", str(e))
        return float(m.group(1)) * (1 << (20 if m.group(2) == "MiB" else 30))
    return None


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(solver=hs.sampled_from(list(SOLVER_REGISTRY)), mode=hs.sampled_from(["ovr", "crammer-singer", None]),
       l1=hs.sampled_from([0.0, 1e-4]), intercept=hs.booleans(), threads=hs.sampled_from([0, 1, 2, 3]),
       mix=hs.integers(1, 6), block=hs.sampled_from([BLOCK, 4 << 10, 64 << 10]),
       duals=hs.sampled_from(["auto", "memory", "paged"]))
def test_the_smallest_named_is_the_one_train_refuses_below(multi, binary, solver, mode, l1, intercept, threads, mix,
                                                           block, duals):
    st = binary if mode is None else multi
    opts = {"solver": solver, "l1": l1, "fit_intercept": intercept, "threads": threads, "mix_blocks": mix,
            "block_bytes": block, "loss": "smooth-hinge", "memory": "64GiB", "duals": duals}
    if mode:
        opts["multiclass"] = mode
    try:
        o = T._validate(opts, st)
    except ValueError:
        return  # options train refuses: info lists them under "refused"
    fit = T.memory_fit(st, opts)
    fam = fit["families"][memfit.family_name(o)]
    least = fam["smallest_memory"]
    # below it (less its stated headroom) refused naming it (to the tenth of a MiB printed, rounded up); at it, not
    # (the figure a refusal names carries half the run-to-run drift of a process's size: ooc.train.RUN_TO_RUN)
    named = _named(st, o, least - STATED_HEADROOM - (1 << 20), fit["process_rss"])
    drift = T.RUN_TO_RUN // 2
    assert named is not None and 0 <= named - least - drift < 0.11 * (1 << 20), (named, least)
    assert _named(st, o, least, fit["process_rss"]) is None
    assert fam["fits"] and not _fit_at(st, opts, least - 1, o)["fits"]


def _fit_at(st, opts, memory, o):
    return T.memory_fit(st, {**opts, "memory": str(memory)})["families"][memfit.family_name(o)]


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    rng = np.random.default_rng(5)
    X = sp.random(3000, 1 << 14, density=6 / (1 << 14), random_state=5, format="csr", data_rvs=rng.standard_normal)
    y = np.where(rng.standard_normal(3000) > 0, 1.0, -1.0)
    path = str(tmp_path_factory.mktemp("bin") / "b.zarr")
    st = ooc.convert(X, path, y=y, dtype="float64", block_bytes="64KiB", layout="both")
    yield st
    st.close()


@pytest.mark.parametrize("kind", ["one class", "columns only"])
def test_info_describes_a_store_no_run_trains(tmp_path, kind):
    """A store that converts but that no run of the options given trains (one class: a test set; columns
    only) is described by ``ooc info``: the reason in place of the figures, exit 0."""
    from click.testing import CliRunner

    from ooc.cli import main

    rng = np.random.default_rng(3)
    X = sp.random(200, 30, density=0.2, random_state=3, format="csr")
    y = np.ones(200) if kind == "one class" else np.where(rng.standard_normal(200) > 0, 1.0, -1.0)
    path = str(tmp_path / "s.zarr")
    ooc.convert(X, path, y=y, layout="cols" if kind == "columns only" else "both").close()
    with ooc.open_store(path) as st:
        fit = T.memory_fit(st, {"memory": "1GiB"})
    assert fit["options_refused"] and not fit["families"] and fit["refused"]
    r = CliRunner().invoke(main, ["info", path])
    assert r.exit_code == 0 and "no run: " in r.output, r.output
    bad = CliRunner().invoke(main, ["info", path, "--l2", "-1"])  # a bad option value is still refused by name
    assert bad.exit_code == 2 and "--l2" in bad.output
