"""Quick chaos with the newer faults (the long soak is ``scripts/chaos.py``, whose trials these run):

* ``overwrite``: ``ooc convert INPUT2 STORE --overwrite`` / ``ooc train STORE --out RUN --overwrite``
  SIGKILLed right at the exchange of the old and the new store / run directory, or while the new
  one is being built: STORE opens and is the old or the new store, RUN is the old finished run or
  the new one (which resumes to the reference); the next command gives the new reference and no
  hidden ``.NAME.partial-*`` survives it.
* ``signal``: SIGINT / SIGTERM during ``ooc train`` or ``ooc resume`` (in-memory, paged and
  read-ahead duals): exit 130 within 10 s, no traceback, and the resume gives the reference
  coefficients exactly.
* ``damage``: one file of a killed run's directory deleted or a byte of it flipped: ``ooc resume``
  gives exactly the reference coefficients, or (``run.json`` only) one ``ooc: error:`` line, after
  which ``ooc train --overwrite`` does.

Each test runs a few trials with fixed choices and a fixed seed; more of them are marked ``slow``.
"""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import signal
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = int(os.environ.get("OOC_CHAOS_SEED", "0"))


def _load_script():
    spec = importlib.util.spec_from_file_location("ooc_chaos_soak", os.path.join(ROOT, "scripts", "chaos.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


soak = _load_script()


def fast_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


@pytest.fixture(scope="module")
def chaos():
    root = tempfile.mkdtemp(prefix="ooc-chaos-faults-", dir=fast_dir())
    try:
        # one reference run: the iterates never depend on --memory (the full soak checks it)
        c = soak.Chaos(root, random.Random(SEED), needs=("overwrite", "signal", "damage"), ref_modes=("memory",),
                        in_process=True)
        c.setup()
        yield c
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_trials(c, kind: str, seed: int, variants: list[dict]) -> None:
    """Run one trial of ``kind`` per dict of fixed choices; every failure of every trial is reported."""
    c.rng = random.Random(SEED * 1000 + seed)
    problems = []
    for kw in variants:
        n = len(c.failures)
        c.record(kind, lambda kw=kw: getattr(c, f"trial_{kind}")(**kw))
        problems += [f"{kind} {kw}: {f['reason']}" for f in c.failures[n:]]
    assert not problems, "\n".join(problems)


# -- overwrite -----------------------------------------------------------------------------------
def test_overwrite_store_killed(chaos):
    run_trials(chaos, "overwrite", 1, [dict(what="store", timing="at-swap"),
                                       dict(what="store", timing="building")])


def test_overwrite_run_killed(chaos):
    run_trials(chaos, "overwrite", 2, [dict(what="run", timing="at-swap", memory_mode="memory"),
                                       dict(what="run", timing="after-swap", memory_mode="paged")])


@pytest.mark.slow
def test_overwrite_killed_at_random_moments(chaos):
    run_trials(chaos, "overwrite", 3, [{} for _ in range(12)])


# -- signal --------------------------------------------------------------------------------------
@pytest.mark.slow  # the quick suite has test_no_hangs / test_run_integrity for these; the soak runs more
def test_signal_train_and_resume(chaos):
    run_trials(chaos, "signal", 4, [
        dict(memory_mode="memory", target="train", sig=signal.SIGINT, timing="after-checkpoint"),
        dict(memory_mode="paged", target="train", sig=signal.SIGTERM, timing="after-checkpoint"),
        dict(memory_mode="read2", target="resume", sig=signal.SIGINT, timing="after-checkpoint"),
    ])


@pytest.mark.slow
def test_signal_at_random_moments(chaos):
    run_trials(chaos, "signal", 5, [{} for _ in range(12)])


# -- damage --------------------------------------------------------------------------------------
@pytest.mark.slow  # the quick suite has test_no_hangs / test_run_integrity for these; the soak runs more
def test_damaged_run_file_then_resume(chaos):
    run_trials(chaos, "damage", 6, [
        dict(memory_mode="memory", victim="checkpoint state.npz", action="flip"),
        dict(memory_mode="paged", victim="duals", action="flip"),
        dict(memory_mode="memory", victim="run.json", action="delete"),
    ])


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["LATEST", "history.jsonl", "checkpoint meta.json", "model coef.npy",
                                    "model model.json", "run.json"])
def test_damaged_run_file_kinds(chaos, victim):
    run_trials(chaos, "damage", 7, [dict(victim=victim, action="flip"), dict(victim=victim, action="delete")])


@pytest.mark.slow
def test_damage_at_random(chaos):
    run_trials(chaos, "damage", 8, [{} for _ in range(12)])
