"""``RUN/convergence.png`` is drawn from any history a run can hold: values that were not finite are null
in the history (strict JSON) and are left out of the plot, never an error (a gap, a primal or a dual of
None at any epoch, the first included)."""

from __future__ import annotations

import importlib
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

T = importlib.import_module("ooc.train")

VALUE = hs.one_of(hs.none(), hs.floats(-1e300, 1e300, allow_nan=False), hs.just(0.0))


class _Run:
    def __init__(self, path, history):
        self.path, self._history = path, history

    def history(self):
        return self._history


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=hs.lists(hs.tuples(VALUE, VALUE, VALUE), min_size=1, max_size=6))
def test_a_history_with_nulls_draws(tmp_path, rows):
    history = [{"epoch": i, "seconds": 0.1 * i, "gap": g, "primal": p, "dual": d} for i, (g, p, d) in enumerate(rows)]
    path = T.plot_convergence(_Run(str(tmp_path), history))
    assert os.path.getsize(path) > 0


@pytest.mark.parametrize("which", ["gap", "primal", "dual"])
def test_the_first_epochs_null_is_left_out(tmp_path, which):
    history = [{"epoch": 0, "seconds": 0.0, "gap": 1.0, "primal": 1.0, "dual": 0.0},
               {"epoch": 1, "seconds": 0.5, "gap": 1e-3, "primal": 0.5, "dual": 0.499}]
    history[0][which] = None
    assert os.path.exists(T.plot_convergence(_Run(str(tmp_path), history)))
