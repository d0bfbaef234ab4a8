"""What the plotting library says while ooc draws reaches the user as ``ooc: warning: matplotlib: ...``
lines, one per message, never Python's warning with its source line nor a bare logging record
(ooc.plotting); a figure with nothing to put in a legend draws none."""

from __future__ import annotations

import io
import logging
import warnings
from contextlib import redirect_stderr

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz import examples

from ooc.plotting import FOR_DEVELOPERS, drawing

SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), database=None)
TEXT = st.text("abc xyz.:-\n", min_size=1, max_size=20).filter(lambda t: t.split())
SAYS = st.tuples(st.sampled_from(["warn_external", "warn", "log", "log_child", "developer"]), TEXT,
                 st.sampled_from([UserWarning, RuntimeWarning, Warning]))


def _say(kind, text, category):
    """matplotlib's ways of speaking: its warn_external (the caller's line), a warning, its loggers."""
    if kind == "warn_external":
        from matplotlib import _api

        _api.warn_external(text, category)
    elif kind == "warn":
        warnings.warn(text, category, stacklevel=2)
    elif kind == "log":
        logging.getLogger("matplotlib").warning(text)
    elif kind == "log_child":
        logging.getLogger("matplotlib.font_manager").warning(text)
    else:
        warnings.warn(text, DeprecationWarning, stacklevel=2)


@settings(max_examples=examples(30), **SETTINGS)
@given(st.lists(SAYS, max_size=6))
def test_what_matplotlib_says_is_one_ooc_warning_line_each(says):
    from ooc.cli import _one_line_warnings

    err = io.StringIO()
    with redirect_stderr(err), _one_line_warnings(), drawing():
        for kind, text, category in says:
            _say(kind, text, category)
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    wanted = []
    for kind, text, _ in says:
        t = "matplotlib: " + " ".join(text.split())
        if kind != "developer" and t not in wanted:
            wanted.append(t)
    assert sorted(lines) == sorted(f"ooc: warning: {t}" for t in wanted), (says, err.getvalue())


def test_the_developers_kind_is_dropped():
    assert issubclass(DeprecationWarning, FOR_DEVELOPERS)


@pytest.mark.parametrize("histories", [0, 1, 13])
def test_the_comparison_plot_draws_without_a_message(tmp_path, histories):
    """Runs without a history (none drawn), a few, more than a legend holds: no warning at all."""
    from ooc.batch import _plot_comparison

    rows = []
    from ooc.runs.rundir import RunDir

    for k in range(max(histories, 2)):
        rd = RunDir.create(str(tmp_path / f"run{k}"), {})  # a run's history is read back verified: ooc's own
        if k < histories:
            rd.append_history({"seconds": 0.1, "gap": 0.5})
            rd.append_history({"seconds": 0.2, "gap": 0.01})
        rows.append({"run": f"run{k}"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _plot_comparison(str(tmp_path), rows)
    assert not [str(w.message) for w in caught if not issubclass(w.category, FOR_DEVELOPERS)]
    assert (tmp_path / "comparison.png").exists()
