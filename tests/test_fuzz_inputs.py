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

#: the small --memory figures here drive small text chunks (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("memory_counts_the_work")


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_malformed_and_extreme_inputs(fmt):
    strategy, check = FORMATS[fmt]

    @settings(max_examples=examples(25), **SETTINGS)
    @given(strategy())
    def run(case):
        with tempfile.TemporaryDirectory(prefix="ooc-fuzz-inputs-") as tmp:
            check(case, tmp)

    run()


@pytest.mark.parametrize("value", [v.decode() for v in __import__("input_cases").VW_STRINGS])
def test_a_vw_value_is_a_number_or_a_string_feature_never_in_between(value):
    """VW's rule: ``name:value`` is a number when its float parser reads one from the start of the value, and then
    the whole value must be that number; otherwise it is a string feature (value 1). Neither side is guessed:
    a value that starts as a number and goes on (``1:2``, ``info``) is refused at its line and column."""
    import os

    from input_cases import VW_STARTS_AS_NUMBER
    from test_fuzz import check_one_line_error, run_convert, store_rows

    line = f"1 | a:2 d:{value} b\n"
    with tempfile.TemporaryDirectory(prefix="ooc-vw-value-") as tmp:
        path, store = os.path.join(tmp, "in.vw"), os.path.join(tmp, "out.zarr")
        with open(path, "w") as f:
            f.write(line)
        r = run_convert(path, store)
        if VW_STARTS_AS_NUMBER.match(value.encode()):
            assert r.exit_code == 1, (value, r.stdout)
            msg = check_one_line_error(r.stderr, path, 1)
            assert f"{path}:1:{line.index('d:') + 3}:" in msg, msg
        else:
            assert r.exit_code == 0, (value, r.stderr)
            X, _ = store_rows(store)
            assert X.nnz == 3 and X.sum() == 4.0, (value, X)  # a:2, the string feature (1), b (1)
