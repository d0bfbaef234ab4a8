"""A run's final state is durable, and a resume never replaces a model with a worse one
(docs/training.rst, "Runs, checkpoints and resume").

The engine may skip the checkpoints of epoch ends (a solver whose whole state is in every
checkpoint, ``epoch_checkpoint_optional``); the tests make every skip happen (a checkpoint
"takes" longer than the run) and check, whatever stopped the run (converged, ``max_epochs``,
early stop, a stop signal):

* the newest checkpoint holds the state the run stopped at (its epoch), and a resume from it
  runs no epoch again: it certifies that state and ends with the same result;
* ``ooc resume RUN --max-epochs N`` with ``N`` at or below the finished epoch is refused by
  name and the model stays; any sequence of resumes never makes the model's certificate worse,
  and a resume that would (a run whose last checkpoint is older than its model) keeps the model.
"""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from test_engine import ToyInMemory as _Toy

import ooc
from ooc.engine import Watch
from ooc.engine import run as run_solver
from ooc.fsutil import atomic_write_bytes, read_sealed_json, seal_json
from ooc.runs.rundir import RunDir, RunError


class ToyInMemory(_Toy):
    def certified_w(self):
        return np.array([[self.x0]])


@pytest.fixture
def slow_writes(monkeypatch):
    """Every checkpoint "took" longer than any run: the engine skips every epoch end's it may skip."""
    real = RunDir.save_checkpoint
    saved = []

    def save(self, arrays, meta, background=False):
        saved.append(dict(meta))
        out = real(self, arrays, meta, background)
        self.write_seconds = 1e6
        return out

    monkeypatch.setattr(RunDir, "write_seconds", 1e6, raising=False)
    monkeypatch.setattr(RunDir, "save_checkpoint", save)
    return saved


# -- the engine, on a toy solver whose gaps are known --------------------------------------------
def _flat_watch(patience):
    return Watch(score=lambda w: {"v": 1.0}, key="v", higher=True, patience=patience)


STOPS = {
    # name: (tol, max_epochs, watch, die_at update)
    "converged": (1e-3, 100, None, None),
    "max-epochs": (1e-12, 7, None, None),
    "early-stop": (1e-12, 100, 3, None),
    "signal": (1e-12, 100, None, 4 * 5 + 2),
}


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("stop", list(STOPS))
def test_the_state_a_run_stops_at_is_its_checkpoint(tmp_path, slow_writes, stop, fused):
    tol, max_epochs, patience, die_at = STOPS[stop]
    watch = _flat_watch(patience) if patience else None
    full_rd = RunDir.create(str(tmp_path / "full"), {})
    full = run_solver(ToyInMemory(full_rd, tol=tol, fused=fused), max_epochs, resume=False, watch=watch)
    rd = RunDir.create(str(tmp_path / "run"), {})
    toy = ToyInMemory(rd, tol=tol, fused=fused, die_at=die_at)
    if die_at is None:
        res = run_solver(toy, max_epochs, resume=False, watch=watch)
        _, meta = rd.load_checkpoint()
        assert meta["epoch"] == res["epochs"], (stop, meta, res["epochs"])
    else:
        with pytest.raises(KeyboardInterrupt):
            run_solver(toy, max_epochs, resume=False, watch=watch)
        _, meta = rd.load_checkpoint()
        # the epoch in progress when the signal came (5 epochs done): nothing done before the signal lost
        assert meta["epoch"] == die_at // toy.steps, meta
    lines = len(rd.history())
    again = ToyInMemory(RunDir.open(rd.path), tol=tol, fused=fused)
    res = run_solver(again, max_epochs, resume=True, watch=watch)
    assert res["epochs"] == full["epochs"] and res["w"][0, 0] == full["w"][0, 0]
    if die_at is None:
        # from the final state: no update is run again, the same history (one line per state)
        assert again.updates == 0 and len(rd.history()) == lines
    assert [(h["epoch"], h["primal"]) for h in rd.history()] == [(h["epoch"], h["primal"]) for h in full_rd.history()]


def test_a_second_signal_stops_at_once(tmp_path, slow_writes, monkeypatch):
    """A stop signal waits for the next safe point; a second does not wait."""
    import ooc.interrupts as interrupts

    class Twice(ToyInMemory):
        first = False

        def _steps(self, ctx):
            if ctx.epoch == 3:
                os.kill(os.getpid(), signal.SIGTERM)
                self.first = interrupts.pending()  # remembered, the run not stopped yet
                os.kill(os.getpid(), signal.SIGTERM)
                raise AssertionError("the second signal did not stop the run")
            super()._steps(ctx)

    rd = RunDir.create(str(tmp_path / "run"), {})
    toy = Twice(rd, tol=1e-12)
    with pytest.raises(KeyboardInterrupt):
        run_solver(toy, 100, resume=False)
    assert toy.first and not interrupts.pending()


# -- ooc.train and ooc.resume on a real store ----------------------------------------------------
@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(3)
    X = sp.random(300, 30, density=0.2, format="csr", random_state=4)
    y = np.where(X @ rng.standard_normal(30) + 0.3 * rng.standard_normal(300) > 0, 1.0, -1.0)
    path = str(tmp_path_factory.mktemp("final") / "s.zarr")
    ooc.convert(X, path, y=y)
    return path


def _metrics(run):
    with open(os.path.join(run, "model", "metrics.json")) as f:
        return json.load(f)


def _coef(run):
    return np.load(os.path.join(run, "model", "coef.npy"))


def _ck_epoch(run):
    return RunDir.open(run).load_checkpoint()[1]["epoch"]


TRAINS = {"converged": dict(tol=1e-9, max_epochs=200), "max-epochs": dict(tol=1e-14, max_epochs=9)}


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate])  # no shrinking: each case trains runs
@given(how=st.sampled_from(sorted(TRAINS)), solver=st.sampled_from(["sdca", "acc-sdca"]),
       resumes=st.lists(st.integers(1, 60), min_size=1, max_size=3))
def test_no_resume_makes_the_model_worse(store, tmp_path_factory, slow_writes, how, solver, resumes):
    run = str(tmp_path_factory.mktemp("run") / "r")
    res = ooc.train(store, run, loss="logistic", l2=1e-2, solver=solver, **TRAINS[how]).result
    assert _ck_epoch(run) == res["epochs"]  # the final state is the newest checkpoint
    for n in resumes:
        before, coef = _metrics(run), _coef(run)
        if n <= before["epochs"]:
            with pytest.raises(RunError, match=f"finished at epoch {before['epochs']}.*--max-epochs {n}"):
                ooc.resume(run, max_epochs=n)
            assert _metrics(run) == before and np.array_equal(_coef(run), coef)
            continue
        after = ooc.resume(run, max_epochs=n).result
        assert after["rel_gap"] <= before["rel_gap"] and after["epochs"] >= before["epochs"]
        assert _ck_epoch(run) == after["epochs"]
        if before["converged"]:  # certified again from its own state: the same model
            assert after["epochs"] == before["epochs"] and np.array_equal(_coef(run), coef)


def test_a_resume_that_ends_worse_keeps_the_model(store, tmp_path, slow_writes):
    """The model found is better than what the resume certifies (here its metrics claim a smaller gap;
    a run made before final states were checkpointed, or resumed on other threads, gets there):
    the model and its figures stay, and a warning says why."""
    run = str(tmp_path / "r")
    res = ooc.train(store, run, loss="logistic", l2=1e-3, tol=1e-9, solver="sdca").result
    coef, path = _coef(run), os.path.join(run, "model", "metrics.json")
    claimed = dict(read_sealed_json(path), rel_gap=res["rel_gap"] / 10)
    atomic_write_bytes(path, seal_json(claimed))
    with pytest.warns(UserWarning, match="worse than the model found"):
        kept = ooc.resume(run, max_epochs=res["epochs"] + 5).result
    assert kept["rel_gap"] == claimed["rel_gap"] and "kept_model" in kept
    assert np.array_equal(_coef(run), coef) and read_sealed_json(path)["rel_gap"] == claimed["rel_gap"]


def test_a_deferred_signal_stops_a_wait_without_a_safe_point(monkeypatch):
    """No safe point comes (the main thread waits in a system call): the signal stops it anyway,
    ``DEFER_SECONDS`` after it came."""
    import threading
    import time

    import ooc.interrupts as interrupts

    monkeypatch.setattr(interrupts, "DEFER_SECONDS", 0.3)
    with interrupts.stop_on_signals():
        interrupts.defer(True)
        try:
            threading.Timer(0.1, os.kill, args=(os.getpid(), signal.SIGTERM)).start()
            t0 = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                threading.Event().wait(30)
            assert time.monotonic() - t0 < 10
        finally:
            interrupts.defer(False)
    assert not interrupts.pending()
