"""The run loop (ooc.engine) against a toy solver whose gaps are known in advance.

The toy state is one number ``x``; an update multiplies the distance to the optimum
(``P(x) - D = x``) by ``rate``. Fused toys certify with the pass that updates, split toys
before it. What is checked: when the run stops and what it returns, the certify-only pass
and its failed prediction, mid-epoch checkpoints and resume, and the cleanup on a signal.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from ooc.engine import Certificate, predicts_converged
from ooc.engine import run as run_solver
from ooc.runs.rundir import RunDir


class Toy:
    name = "toy"
    progress = None

    def __init__(self, rd, tol=1e-6, rates=(0.5,), fused=True, predicts=None, steps=4, checkpoint_every=300.0,
                 die_at=None):
        self.rd, self.rates, self.steps, self.die_at = rd, rates, steps, die_at
        self.opt = {"tol": tol, "checkpoint_every": checkpoint_every}
        self.fused = fused
        self.predicts_certified = fused if predicts is None else predicts
        self.closed = self.updates = self.retries = 0

    # state: x (distance to the optimum), pos (steps of the epoch done), x0 (the state the epoch certifies)
    def fresh(self):
        self.x, self.x0, self.pos = 1.0, 1.0, 0

    def restore(self, arrays, meta):
        self.x, self.x0, self.pos = float(arrays["x"][0]), float(arrays["x0"][0]), int(meta["position"])

    def checkpoint_state(self):
        return {"x": np.array([self.x]), "x0": np.array([self.x0])}, {"position": self.pos}, False

    def at_epoch_start(self):
        return self.pos == 0

    def next_epoch(self, epoch):
        self.pos = 0
        self.x0 = self.x

    def nnz_w(self):
        return 1

    def bytes_read(self):
        return 0

    def cache_hit_rate(self):
        return 0.0

    def result(self):
        return {"w": np.array([[self.x0]])}

    def close(self):
        self.closed += 1

    def _steps(self, ctx):
        rate = self.rates[min(ctx.epoch, len(self.rates) - 1)]
        while self.pos < self.steps:
            self.updates += 1
            if self.die_at is not None and self.updates == self.die_at:
                os.kill(os.getpid(), signal.SIGTERM)
            self.x *= rate ** (1.0 / self.steps)
            self.pos += 1
            if self.pos < self.steps:
                ctx.tick()

    def epoch(self, ctx):
        if self.pos == 0:
            self.x0 = self.x
        if self.fused:  # fused: the pass updates, and certifies the state it started from
            if ctx.update:
                self._steps(ctx)
            ctx.record(1.0 + self.x0, 1.0)
            if ctx.retry:
                self.retries += 1
                self.x, self.pos = self.x0, 0  # the pass's updates are thrown away with the failed prediction
            return
        if self.pos == 0 and ctx.record(1.0 + self.x0, 1.0):
            return
        self._steps(ctx)


@pytest.fixture
def rd(tmp_path):
    return RunDir.create(str(tmp_path / "run"), {})


@pytest.mark.parametrize("fused", [True, False])
def test_stops_at_the_first_certified_state(rd, fused):
    res = run_solver(Toy(rd, tol=1e-3, fused=fused), 100, resume=False)
    # x_e = 0.5^e relative to P = 1 + x: the first e with x_e / (1 + x_e) <= 1e-3 is 10
    assert res["converged"] and res["epochs"] == 10
    assert res["gap"] == pytest.approx(0.5 ** 10) and res["w"][0, 0] == pytest.approx(0.5 ** 10)
    h = rd.history()
    assert [e["epoch"] for e in h] == list(range(11))  # one line per certified state, none twice
    assert all(e["rel_gap"] == pytest.approx(e["gap"] / max(1.0, abs(e["primal"]))) for e in h)


@pytest.mark.parametrize("fused", [True, False])
def test_max_epochs_certifies_the_last_state_without_updating(rd, fused):
    toy = Toy(rd, tol=1e-12, fused=fused)
    res = run_solver(toy, 3, resume=False)
    assert not res["converged"] and res["epochs"] == 3 and res["gap"] == pytest.approx(0.125)
    assert toy.updates == 3 * toy.steps and toy.closed == 1


def test_a_failed_prediction_reruns_the_epoch_and_changes_nothing_else(tmp_path):
    # fast, then slow: after 0.333 -> 0.048 the next state is predicted within 1e-2, but it is at 0.043
    rates = (0.5, 0.1, 0.9)
    plain_rd = RunDir.create(str(tmp_path / "plain"), {})
    plain = run_solver(Toy(plain_rd, tol=1e-2, rates=rates, predicts=False), 100, resume=False)
    rd = RunDir.create(str(tmp_path / "predicted"), {})
    toy = Toy(rd, tol=1e-2, rates=rates)
    res = run_solver(toy, 100, resume=False)
    assert toy.retries >= 1
    assert res["converged"] and res["epochs"] == plain["epochs"] and res["w"][0, 0] == plain["w"][0, 0]
    assert [(e["epoch"], e["primal"]) for e in rd.history()] == [(e["epoch"], e["primal"]) for e in plain_rd.history()]
    assert predicts_converged([0.5, 0.25], 0.125) and not predicts_converged([0.5, 0.25], 0.1)


class ToyInMemory(Toy):
    """A toy whose whole state is in every checkpoint: the engine may skip its epoch ends' checkpoints."""

    def epoch_checkpoint_optional(self):
        return True


def test_skippable_epoch_checkpoints_are_spaced_by_their_write_time_and_the_last_is_kept(tmp_path, monkeypatch):
    """Epoch ends whose checkpoints may be skipped get one once the last is older than its write time over
    CHECKPOINT_SHARE (or --checkpoint-every); the state at max_epochs always gets one; a resume from an
    older one (the run killed) repeats the same steps: the same result and history."""
    import ooc.engine as engine

    full_rd = RunDir.create(str(tmp_path / "full"), {})
    full = run_solver(ToyInMemory(full_rd, tol=1e-12), 12, resume=False)
    # a write "took" longer than the whole run at CHECKPOINT_SHARE: no epoch end but the last is checkpointed
    monkeypatch.setattr(RunDir, "write_seconds", 1e6, raising=False)
    saved = []
    real = RunDir.save_checkpoint

    def save(self, arrays, meta, background=False):
        if int(meta["position"]) == 0:  # epoch ends (and the start), not the ticks inside an epoch
            saved.append(int(meta["epoch"]))
        out = real(self, arrays, meta, background)
        self.write_seconds = 1e6
        return out

    monkeypatch.setattr(RunDir, "save_checkpoint", save)
    rd = RunDir.create(str(tmp_path / "spaced"), {})
    res = run_solver(ToyInMemory(rd, tol=1e-12), 12, resume=False)
    assert saved == [0, 12], saved  # the start and max_epochs only
    assert res["w"][0, 0] == full["w"][0, 0] and res["epochs"] == full["epochs"] == 12
    # --checkpoint-every 0: every epoch end, whatever the write time
    saved.clear()
    rd0 = RunDir.create(str(tmp_path / "every"), {})
    run_solver(ToyInMemory(rd0, tol=1e-12, checkpoint_every=0.0), 5, resume=False)
    assert saved == [0, 1, 2, 3, 4, 5], saved
    # a toy without the method (a solver written before it) is checkpointed at every epoch end
    saved.clear()
    rdt = RunDir.create(str(tmp_path / "plain"), {})
    run_solver(Toy(rdt, tol=1e-12), 4, resume=False)
    assert saved == [0, 1, 2, 3, 4], saved
    # killed after epoch 7 with only the start checkpointed: the resume redoes epochs 1..7, same numbers
    saved.clear()
    rdk = RunDir.create(str(tmp_path / "killed"), {})
    with pytest.raises(KeyboardInterrupt):
        run_solver(ToyInMemory(rdk, tol=1e-12, die_at=7 * 4 + 2), 12, resume=False)
    assert saved == [0], saved
    monkeypatch.setattr(RunDir, "write_seconds", 0.0, raising=False)
    again = run_solver(ToyInMemory(rdk, tol=1e-12), 12, resume=True)
    assert again["w"][0, 0] == full["w"][0, 0] and again["epochs"] == 12
    assert [(e["epoch"], e["primal"]) for e in rdk.history()] == [(e["epoch"], e["primal"]) for e in full_rd.history()]
    assert engine.CHECKPOINT_SHARE <= 0.1


@pytest.mark.parametrize("fused", [True, False])
def test_resume_from_a_mid_epoch_checkpoint_is_exact(tmp_path, fused):
    full_rd = RunDir.create(str(tmp_path / "full"), {})
    full = run_solver(Toy(full_rd, tol=1e-9, fused=fused), 100, resume=False)
    rd = RunDir.create(str(tmp_path / "cut"), {})
    with pytest.raises(KeyboardInterrupt):
        run_solver(Toy(rd, tol=1e-9, fused=fused, checkpoint_every=0.0, die_at=10), 100, resume=False)
    _, meta = rd.load_checkpoint()
    assert meta["position"] > 0  # killed inside an epoch, after a mid-epoch checkpoint
    again = run_solver(Toy(RunDir.open(rd.path), tol=1e-9, fused=fused), 100, resume=True)
    assert again["w"][0, 0] == full["w"][0, 0] and again["epochs"] == full["epochs"]
    strip = [{k: v for k, v in e.items() if k not in ("seconds",)} for e in full_rd.history()]
    assert [{k: v for k, v in e.items() if k not in ("seconds",)} for e in rd.history()] == strip


def test_sigterm_stops_the_run_and_closes_the_solver(rd):
    toy = Toy(rd, tol=1e-12, die_at=6)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        run_solver(toy, 100, resume=False)
    assert toy.closed == 1 and signal.getsignal(signal.SIGTERM) is before


def test_certificate():
    c = Certificate(2.0, 1.5)
    assert c.gap == 0.5 and c.rel_gap == 0.25
    assert Certificate(0.5, 0.25).rel_gap == 0.25  # relative to max(1, |P|)
    assert Certificate(1.0, float("-inf")).gap == float("inf")
