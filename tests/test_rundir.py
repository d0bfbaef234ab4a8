"""Background checkpoints: what is saved is the state at the call, errors reach the caller."""

import errno
import os

import numpy as np
import pytest

from ooc.runs import rundir as R
from ooc.runs.rundir import RunDir, RunError


def _run(tmp_path):
    return RunDir.create(str(tmp_path / "run"), {"solver": "test"})


def test_background_checkpoint_saves_the_state_at_the_call(tmp_path):
    rd = _run(tmp_path)
    w = np.arange(5.0)
    rd.save_checkpoint({"w": w, "v": w}, {"seq": 1, "epoch": 3}, background=True)
    w[:] = -1.0  # the caller goes on updating its arrays
    arrays, meta = rd.load_checkpoint()  # waits for the write
    assert np.array_equal(arrays["w"], np.arange(5.0)) and np.array_equal(arrays["v"], np.arange(5.0))
    assert meta == {"seq": 1, "epoch": 3}
    rd.save_checkpoint({"w": w}, {"seq": 2, "epoch": 4}, background=True)
    rd.wait_checkpoint()
    with open(os.path.join(rd.path, "LATEST")) as f:
        assert f.read() == "ckpt-000002"
    assert sorted(e for e in os.listdir(rd.state) if e.startswith("ckpt")) == ["ckpt-000002"]


def test_background_checkpoint_error_is_raised_by_the_next_wait(tmp_path, monkeypatch):
    rd = _run(tmp_path)
    rd.save_checkpoint({"w": np.ones(3)}, {"seq": 1})

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(R.np, "savez", full)
    rd.save_checkpoint({"w": np.zeros(3)}, {"seq": 2}, background=True)
    with pytest.raises(RunError, match="space"):
        rd.wait_checkpoint()
    rd.wait_checkpoint()  # reported once
    monkeypatch.undo()
    arrays, meta = rd.load_checkpoint()  # the last complete checkpoint is intact
    assert meta["seq"] == 1 and np.array_equal(arrays["w"], np.ones(3))
    assert not [e for e in os.listdir(rd.state) if ".tmp-" in e]
