"""Malformed and extreme inputs of every format (tests/input_cases.py): a one-line error naming the file
and the first bad line, or a store equal to an independent reference parse. A few cases each here;
``scripts/fuzz_inputs.py`` runs the same generators for as long as asked."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from input_cases import FORMATS
from test_fuzz import examples

SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), database=None)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_malformed_and_extreme_inputs(fmt):
    strategy, check = FORMATS[fmt]

    @settings(max_examples=examples(25), **SETTINGS)
    @given(strategy())
    def run(case):
        with tempfile.TemporaryDirectory(prefix="ooc-fuzz-inputs-") as tmp:
            check(case, tmp)

    run()
