"""The smallest memory ``ooc info`` names is the one ``ooc train`` refuses below (docs/training.rst, "Memory").

Every solver and multiclass mode (Crammer-Singer holds other ``O(d)`` vectors than one-vs-rest: a
family of its own, ``sdca-crammer-singer``): the figure :func:`ooc.solvers.registry.memory_fit` names is
the one a refusal of ``ooc train`` names (:func:`ooc.train._refuse_before_run_dir`) for the same process.

``--threads 0`` on a tight memory: the count that fits.

One problem's threads each hold a replica of the model (``O(d)`` bytes a thread), so the smallest
memory a run of ``sdca`` needs grows with its threads. The invariants, for any core count:

* ``ooc info`` (:func:`ooc.solvers.registry.memory_fit`) under ``--threads 0`` names the smallest memory of
  the leanest count (one thread), and at any memory it reports a count at least that of every count whose
  smallest memory it is at;
* ``ooc train --threads 0`` (:func:`ooc.train._fit_threads`) picks that same count before ``run.json``
  records it; an explicit ``--threads N`` is never lowered.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import scipy.sparse as sp

import ooc
from ooc._memlimit import limit_that_works
from ooc.solvers import registry
from ooc.solvers.registry import SOLVER_REGISTRY, memory_fit

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


def _sdca(store, memory, threads):
    return memory_fit(store, memory, BLOCK, 4, threads)["families"]["sdca"]


def _train_choice(store, monkeypatch, fit, cores, auto=True):
    """The count ``ooc.train`` runs with under the budget ``memory_fit`` planned with (``fit``)."""
    o = T._validate({"solver": "sdca", "bias": 0, "block_bytes": BLOCK, "mix_blocks": 4, "threads": 0}, store)
    o.update(threads=cores, threads_auto=auto)
    monkeypatch.setattr(T, "_memory_budget",
                        lambda o, reader=0, quiet=False: {"memory": fit["work_bytes"], "memory_held": 1,
                                                          "ceiling": None})
    T._fit_threads(store, o)
    return o["threads"]


@pytest.mark.parametrize("cores", [2, 4])
def test_default_threads_fit_the_memory(wide, monkeypatch, cores):
    monkeypatch.setattr(registry, "available_cpus", lambda: cores)
    floors = {t: _sdca(wide, 1 << 30, t)["smallest_memory"] for t in range(1, cores + 1)}
    assert floors[1] < floors[2] <= floors[cores]  # each thread more holds a replica
    assert _sdca(wide, 1 << 30, 0)["smallest_memory"] == floors[1]
    for t, least in floors.items():
        for memory in (least, least + (floors[cores] - floors[1]) // 3):
            full = memory_fit(wide, memory, BLOCK, 4, 0)
            auto = full["families"]["sdca"]
            # the floors named carry a headroom: a count whose floor is above memory may still fit its plan
            assert auto["fits"] and auto["threads"] >= max(n for n, f in floors.items() if f <= memory)
            assert _train_choice(wide, monkeypatch, full, cores) == auto["threads"], (t, memory, auto)
            # an explicit count is kept (a memory too small for it is refused, naming what works)
            assert _train_choice(wide, monkeypatch, full, cores, auto=False) == cores
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


@pytest.mark.parametrize("mode", ["ovr", "crammer-singer"])
@pytest.mark.parametrize("solver", list(SOLVER_REGISTRY))
def test_the_smallest_named_is_the_one_train_refuses_below(multi, monkeypatch, solver, mode):
    opts = {"solver": solver, "multiclass": mode, "bias": 0, "block_bytes": BLOCK, "mix_blocks": 4, "threads": 1,
            "loss": "smooth-hinge"}
    try:
        o = T._validate(opts, multi)
    except ValueError:
        pytest.skip(f"{solver} does not train --multiclass {mode}")
    fit = memory_fit(multi, 1 << 30, BLOCK, 4, 1)
    family = f"{solver}-{mode}" if mode == "crammer-singer" else solver
    monkeypatch.setattr(T, "_memory_budget",
                        lambda o, reader=0, quiet=False: {"memory": fit["work_bytes"],
                                                          "memory_held": fit["process_bytes"], "ceiling": None})
    found = T._leanest_plans(multi, o)
    if found is None:
        pytest.skip(f"{solver} plans no footprint before its run directory")
    # the process's figure with what compiling the family's kernels adds where Numba's cache lacks them
    held = fit["process_bytes"] + fit["families"][family]["compile_bytes"]
    named = limit_that_works(held + found[0](1).minimum)
    assert fit["families"][family]["smallest_memory"] == named
