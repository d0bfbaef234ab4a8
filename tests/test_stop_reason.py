"""A run that stops at --max-epochs says why (ooc.engine.diagnose) and what to change."""

from __future__ import annotations

import json
import uuid

import pytest
from click.testing import CliRunner

import ooc
from ooc.cli import main
from ooc.engine import diagnose
from ooc.synth import SynthSource
from ooc.train import ConvergenceWarning


def _hist(gaps, primals=None):
    primals = primals or [1.0 + g for g in gaps]
    return [{"epoch": e, "rel_gap": g, "primal": p} for e, (g, p) in enumerate(zip(gaps, primals))]


def test_diagnose_kinds():
    lin = diagnose(_hist([0.5 ** e for e in range(8)]), 1e-6)
    # 2^-7 -> 1e-6: log(1e-6 / 2^-7) / log(1/2) = 12.9 more epochs
    assert lin.kind == "rate" and lin.more_epochs == 13
    slow = diagnose(_hist([0.999 ** e for e in range(8)]), 1e-6)
    assert slow.kind == "slow" and slow.more_epochs > 10_000
    flat = [0.3] * 8
    assert diagnose(_hist(flat, [2.0] * 8), 1e-6).kind == "loose"
    assert diagnose(_hist(flat, [2.0 - 0.1 * e for e in range(8)]), 1e-6).kind == "stalled"
    assert diagnose(_hist([0.5, 0.2]), 1e-6).kind == "few"
    assert diagnose(_hist([0.5 ** e for e in range(8)]), 0.0).kind == "exact"  # --tol 0: no rate to reach it


def test_non_finite_gaps_read_back_as_null_are_no_crash():
    # strict JSON writes a gap that was not finite as null: the history and metrics read back hold None,
    # which the stop diagnosis and the certificate comparison take as an infinite gap (--l2 1e-300 made
    # 'internal error: TypeError: must be real number, not NoneType')
    from ooc.train import worse_certificate

    hist = _hist([None, None, 0.5, 0.25, 0.125, 0.0625], [1.0] * 6)
    assert diagnose(hist, 1e-6).kind == "rate"
    assert diagnose(_hist([None] * 6, [1.0] * 6), 1e-6).kind == "few"
    assert worse_certificate({"rel_gap": None}, {"rel_gap": 0.1}) and not worse_certificate({"rel_gap": 0.1},
                                                                                              {"rel_gap": None})


@pytest.fixture(scope="module")
def store():
    return ooc.convert(SynthSource(400, 40, 6, task="binary", seed=2), f"memory://stop-{uuid.uuid4().hex}",
                       dtype="float64")


def test_unconverged_run_says_why_and_what_to_change(store, tmp_path):
    with pytest.warns(ConvergenceWarning) as rec:
        r = ooc.train(store, str(tmp_path / "run"), solver="sdca", l2=1e-3, tol=1e-12, max_epochs=6)
    res = r.result
    assert not res["converged"]
    assert "per epoch" in res["stop_reason"] and "ooc resume" in res["advice"]
    assert res["stop_reason"] in str(rec[0].message)
    # the command it names reaches tol
    n = int(res["advice"].split("--max-epochs ")[1].split("'")[0])
    again = ooc.resume(r.path, max_epochs=n)
    assert again.result["converged"]


@pytest.mark.parametrize("multiclass, loss, names", [
    (None, "hinge", "--loss smooth-hinge"),
    ("crammer-singer", "hinge", "--loss smooth-hinge"),
    ("crammer-singer", "smooth-hinge", "--multiclass ovr"),
])
def test_slow_runs_name_a_change_that_applies(tmp_path, multiclass, loss, names):
    """The hinge converges like 1/epochs whatever the solver, and Crammer-Singer has one solver: the
    advice names what changes the rate there, never "another --solver"."""
    task = "multiclass" if multiclass else "binary"
    st = ooc.convert(SynthSource(2000, 200, 10, task=task, n_classes=4, seed=3), f"memory://slow-{uuid.uuid4().hex}",
                     dtype="float64")
    opts = dict(multiclass=multiclass) if multiclass else {}
    with pytest.warns(ConvergenceWarning):
        r = ooc.train(st, str(tmp_path / "run"), loss=loss, l2=1e-7, tol=1e-12, max_epochs=8, **opts)
    assert names in r.result["advice"] and "another --solver" not in r.result["advice"], r.result


def test_cli_prints_the_reason(store, tmp_path):
    path = str(tmp_path / "s")
    ooc.convert(SynthSource(400, 40, 6, task="binary", seed=2), path, dtype="float64")
    out = CliRunner().invoke(main, ["train", path, "--solver", "sdca", "--l2", "1e-3", "--tol", "1e-12",
                                    "--max-epochs", "4", "--out", str(tmp_path / "r")])
    assert out.exit_code == 0, out.output
    assert "NOT converged" in out.output and "why: " in out.output and "ooc resume" in out.output
    js = CliRunner().invoke(main, ["resume", str(tmp_path / "r"), "--max-epochs", "5", "--json"])
    res = json.loads(js.output.strip().splitlines()[-1])
    assert res["converged"] is False and res["stop_reason"] and res["advice"]


def test_the_epochs_left_are_not_those_of_a_fast_last_window():
    """A run whose gap fell fast, then slowly, and whose last few states came down fast after a bump
    (acc-sdca's momentum): the estimate is that of the slow rate the gap keeps (the last window alone
    named 514 more epochs where 6900 were needed), for any such run drawn."""
    import math

    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=60, deadline=None, derandomize=True)
    @given(epochs=st.integers(24, 400), fast=st.floats(0.2, 0.9), slow=st.floats(0.95, 0.9995),
           switch=st.floats(0.0, 0.5), bump=st.floats(1.0, 30.0), tol=st.sampled_from([1e-6, 1e-9, 1e-12]))
    def check(epochs, fast, slow, switch, bump, tol):
        k = int(switch * epochs)  # the slow phase covers at least the last half of the run
        gaps = [fast ** min(e, k) * slow ** max(e - k, 0) for e in range(epochs + 1)]
        gaps[-5] *= bump  # up, then back to the curve in 4 epochs: the last window looks fast
        if gaps[-1] <= tol:
            return
        st_ = diagnose(_hist(gaps), tol)
        needed = math.log(tol / gaps[-1]) / math.log(slow)
        assert st_.kind in ("rate", "slow") and st_.more_epochs >= needed - 1, (st_, needed)
        assert "estimate" in st_.text

    check()
