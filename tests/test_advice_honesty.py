"""The resume advice of a run stopped at --max-epochs is conservative, checked against the runs themselves
(docs/troubleshooting.rst, the ``why:`` line).

Invariant, for any (loss, solver, data, tol, epochs run): where the advice is an estimate from a settled
rate, resuming with the ``--max-epochs`` it names, and at most ``FACTOR`` times that, certifies the run;
where it is not settled (a hinge loss, CoCoA+, rates that disagree, few states) the text says so and
names a lower bound (``at_least_more_epochs``) that holds: the run does not certify before it.
"""

from __future__ import annotations

import math
import re
import uuid
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import ooc
from ooc.engine import diagnose
from ooc.synth import SynthSource
from ooc.train import ConvergenceWarning, _unsteady

#: where settled, the epochs needed are at most this many times those the advice names
FACTOR = 1.5


def _advised(result) -> int:
    return int(re.search(r"--max-epochs (\d+)'", result["advice"]).group(1))


def _store(rows, seed, regression):
    rng = np.random.default_rng(seed)
    X = sp.random(rows, 20, density=0.2, random_state=seed, format="csr", dtype=np.float64)
    z = X @ rng.normal(size=20) + 0.5 * rng.normal(size=rows)
    return ooc.convert(X, f"memory://adv-{uuid.uuid4().hex}", y=z if regression else np.where(z > 0, 1.0, -1.0),
                       dtype="float64")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(loss=st.sampled_from(["logistic", "squared", "smooth-hinge", "hinge"]), acc=st.booleans(),
       rows=st.integers(150, 600), l2=st.sampled_from([1e-2, 1e-3, 1e-4]), tol=st.sampled_from([1e-4, 1e-6, 1e-8]),
       k=st.integers(2, 12), seed=st.integers(0, 3))
@example(loss="hinge", acc=False, rows=300, l2=1e-3, tol=1e-5, k=5, seed=0)  # said 35 epochs; 341 were needed
@example(loss="logistic", acc=False, rows=300, l2=1e-4, tol=1e-8, k=5, seed=1)  # said 104; 181 were needed
def test_the_advice_does_not_under_promise(tmp_path, loss, acc, rows, l2, tol, k, seed):
    if loss == "hinge":
        tol, acc = max(tol, 1e-5), False  # the hinge's gap falls like 1/epochs: tight tolerances take thousands
    store = _store(rows, seed, loss == "squared")
    opts = dict(loss=loss, l2=l2, tol=tol, solver="acc-sdca" if acc else "sdca")
    path = str(tmp_path / uuid.uuid4().hex)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        first = ooc.train(store, path, max_epochs=k, **opts).result
        if first["converged"] or "--max-epochs" not in first["advice"] or "too few" in first["stop_reason"]:
            return  # certified already, a stall, or too few states: no epochs were promised
        reason, advised = first["stop_reason"], _advised(first)
        settled = "not settled" not in reason
        event("settled" if settled else "not settled")
        if settled:
            # the estimate, with its margin, and FACTOR times that certifies the run
            then = ooc.resume(path, max_epochs=math.ceil(FACTOR * advised)).result
            assert then["converged"], (reason, advised, then["epochs"])
            return
        floor = int(re.search(r"at least (\d+) more epochs", reason).group(1))
        assert first.get("at_least_more_epochs") == floor and "may not be enough" in first["advice"]
        if floor > 1:  # the floor holds: one epoch short of it, the run is not certified
            then = ooc.resume(path, max_epochs=k + floor - 1).result
            assert not then["converged"], (reason, then["epochs"])


def test_hinge_and_cocoa_estimates_are_never_called_settled():
    """A rate steady over the window is no promise where none is to be expected (the loss, the rounds)."""
    hist = [{"epoch": e, "rel_gap": 0.5 ** e, "primal": 1.0} for e in range(12)]
    assert diagnose(hist, 1e-9).at_least is None
    for o in ({"loss": "hinge"}, {"loss": "logistic", "distributed": "local:2"}):
        why = _unsteady(o)
        s = diagnose(hist, 1e-9, why)
        assert why and s.at_least is not None and s.at_least <= s.more_epochs and "at least" in s.text
    assert _unsteady({"loss": "logistic"}) is None


@pytest.mark.slow
def test_cocoa_advice_names_a_lower_bound_that_holds(tmp_path):
    """CoCoA+ over two local workers: the stop says its rate is not settled, and its floor holds."""
    pytest.importorskip("distributed")
    store = ooc.convert(SynthSource(600, 30, 6, task="binary", seed=1), str(tmp_path / "s.zarr"))
    opts = dict(loss="logistic", l2=1e-3, tol=1e-8, distributed="local:2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        first = ooc.train(store, str(tmp_path / "run"), max_epochs=6, **opts).result
        assert not first["converged"] and first["at_least_more_epochs"] is not None, first
        then = ooc.resume(str(tmp_path / "run"), max_epochs=20 * _advised(first)).result
    if then["converged"]:
        assert then["epochs"] >= 6 + first["at_least_more_epochs"]


def _info_advised(path) -> int:
    from ooc.runinfo import format_run_info, run_info
    return int(re.search(r"--max-epochs (\d+) continues it", format_run_info(run_info(path))).group(1))


@settings(max_examples=4, deadline=None)
@given(loss=st.sampled_from(["logistic", "squared", "hinge"]), l2=st.sampled_from([1e-2, 1e-3, 1e-4]),
       k=st.integers(2, 12), seed=st.integers(0, 3))
@example(loss="logistic", l2=1e-4, k=5, seed=1)  # train said --max-epochs 49; info said 10
def test_info_advises_the_resume_train_advised(tmp_path_factory, loss, l2, k, seed):
    """``ooc info RUN`` of a run stopped at --max-epochs names the --max-epochs its stop message named (one
    rule: ooc.engine.advised_max_epochs of the same diagnosis), not a rule of its own."""
    store = _store(300, seed, loss == "squared")
    path = str(tmp_path_factory.mktemp("info") / "run")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        first = ooc.train(store, path, max_epochs=k, loss=loss, l2=l2, tol=1e-8).result
    if first["converged"] or "--max-epochs" not in first["advice"]:
        return  # nothing to resume, or advice of another kind (--tol 0)
    assert _info_advised(path) == _advised(first), (first["stop_reason"], first["advice"])


@settings(max_examples=30, deadline=None)
@given(gap=st.floats(1e-9, 2.0), tol_share=st.floats(1e-6, 0.5), loose=st.booleans(),
       loss=st.sampled_from(["squared", "logistic", "hinge"]), epochs=st.integers(10, 300))
@example(gap=1.0, tol_share=1e-6, loose=False, loss="squared", epochs=120)  # the dual reported 0 (diabetes)
def test_only_a_small_stalled_gap_is_said_to_be_the_datas_precision(gap, tol_share, loose, loss, epochs):
    """A stalled (or loose) gap is blamed on the data's precision, advising a larger --tol, only at or below
    ooc.engine.PRECISION_GAP; above it the advice is a resume with more epochs (a larger --tol would accept
    a wrong model)."""
    from ooc.engine import PRECISION_GAP
    from ooc.train import _advice
    tol = gap * tol_share
    hist = [{"epoch": e, "rel_gap": gap, "primal": 1.0 if loose else 1.0 + (epochs - e)}
            for e in range(epochs - 8, epochs + 1)]
    stall = diagnose(hist, tol)
    assert stall.kind == ("loose" if loose else "stalled"), stall
    o = {"loss": loss, "l2": 1e-3, "l1": 0.0, "solver_used": "sdca", "sampling": "uniform"}
    advice = _advice(stall, o, "RUN", epochs)
    if gap > PRECISION_GAP:
        assert "--max-epochs" in advice and "may be at the precision" not in advice, advice
    else:
        assert "larger --tol" in advice and "may be at the precision" in advice, advice
