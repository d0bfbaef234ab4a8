"""Progress of train / predict / evaluate: on a terminal or with -v only; the train bar follows the gap."""

from __future__ import annotations

import numpy as np
import pytest
from test_cli import cli

import ooc
from ooc.progress import gap_fraction


def test_gap_fraction_is_log_scale_to_tol():
    assert gap_fraction(1.0, 1.0, 1e-6) == 0.0
    assert gap_fraction(1.0, 1e-3, 1e-6) == pytest.approx(0.5)
    assert gap_fraction(1e-2, 1e-4, 1e-6) == pytest.approx(0.5)
    assert gap_fraction(1.0, 1e-7, 1e-6) == 1.0  # converged
    assert gap_fraction(1.0, 3.0, 1e-6) == 0.0  # the gap grew: not below the start
    assert gap_fraction(1e-7, 1e-7, 1e-6) == 1.0


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    import scipy.sparse as sp

    root = tmp_path_factory.mktemp("progress")
    rng = np.random.default_rng(2)
    X = sp.random(200, 10, density=0.4, random_state=2, format="csr", data_rvs=rng.standard_normal)
    y = np.where(X @ rng.standard_normal(10) > 0, 1.0, -1.0)
    store = str(root / "s.zarr")
    ooc.convert(X, store, y=y, dtype="float64")
    return root, store


def test_bars_only_when_asked_and_the_not_converged_line_gives_the_command(small):
    root, store = small
    run = root / "run"
    quiet = cli("train", store, "--out", run, "--l2", "1e-4", "--tol", "1e-12", "--max-epochs", "1")
    assert quiet.stderr == ""  # not a terminal: no bar
    # the command that continues the run: in the "why" line's advice, else its own line
    assert f"'ooc resume {run} --max-epochs " in quiet.stdout or f"to continue: ooc resume {run} --max-epochs 2" in quiet.stdout
    loud = cli("resume", run, "--max-epochs", "2", "-v")
    assert "gap" in loud.stderr and "tol 1e-12" in loud.stderr and "epoch 2/2" in loud.stderr
    for cmd in ("evaluate", "predict"):
        assert cli(cmd, run, store).stderr == ""
        assert f"{cmd}:" in cli(cmd, run, store, "-v").stderr
