"""Every option of every command refuses out-of-range, non-finite, huge and malformed values while the
arguments are parsed (tests/option_cases.py); the Python API refuses the same values with the same rule."""

from __future__ import annotations

import math
import tempfile

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from option_cases import (
    FREE_TEXT,
    bad_values,
    check_refused,
    commands,
    config_types,
    python_value,
    typed_cases,
    value_options,
)
from test_fuzz import examples

from ooc import options as T
from ooc.config import TrainConfig

SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), database=None)
CASES = typed_cases()


def test_every_value_option_is_typed():
    """No option takes a bare int, float or text: each has a type with its range (ooc.options), a choice or a path."""
    loose = [(name, p.opts[0], p.type) for name, cmd in commands().items() for p in value_options(cmd)
             if not isinstance(p.type, (T.Number, T.Bytes, T.Distributed, T.ColumnPair, T.Checked, click.Choice,
                                        click.Path)) and (name, p.name) not in FREE_TEXT]
    assert not loose, f"options without a declared range: {loose}"


@pytest.mark.parametrize("name, option", CASES, ids=[f"{n}{p.opts[0]}" for n, p in CASES])
def test_bad_option_values_are_refused_while_parsing(name, option):
    cmd = commands()[name]

    @settings(max_examples=examples(4), **SETTINGS)
    @given(bad_values(option.type))
    def run(value):
        with tempfile.TemporaryDirectory(prefix="ooc-fuzz-options-") as tmp:
            check_refused(tmp, name, cmd, option, value)

    run()


@settings(max_examples=examples(40), **SETTINGS)
@given(st.data())
def test_the_python_api_refuses_the_same_values(data):
    """``ooc.train``'s options (TrainConfig, the estimators' through it): a ValueError naming the option."""
    types = config_types()
    name = data.draw(st.sampled_from(sorted(types)))
    value = python_value(data.draw(bad_values(types[name])))
    with pytest.raises(ValueError) as exc:
        TrainConfig.from_options({name: value})
    assert f"--{name.replace('_', '-')}" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("param", ["l2", "l1", "tol", "max_epochs", "bias", "gamma", "seed", "memory"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1, 2**70, 2.5, "abc"])
def test_the_estimators_refuse_them_too(param, value):
    import numpy as np

    import ooc

    if param == "memory" and value == -1:
        value = "-1GiB"
    if value in (2**70, 2.5) and param not in ("max_epochs", "seed"):
        pytest.skip("a finite real number: in range for a real-valued parameter")
    X, y = np.eye(4), np.array([1.0, -1.0, 1.0, -1.0])
    with pytest.raises(ValueError) as exc:
        ooc.LinearClassifier(**{param: value}).fit(X, y)
    assert str(exc.value).startswith(param), str(exc.value)  # named as the estimator spells it


def _synth_refused(tmp, args, *names):
    """``ooc synth`` with ``args`` exits 1 with one line naming each of ``names``, and writes nothing."""
    import os

    from click.testing import CliRunner

    from ooc.cli import main

    out = os.path.join(tmp, "s.zarr")
    r = CliRunner().invoke(main, ["synth", out, *map(str, args)])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 1 and len(lines) == 1 and "Traceback" not in r.output, (args, r.output)
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert not os.listdir(tmp), (args, os.listdir(tmp))


@settings(max_examples=examples(12), **SETTINGS)
@given(cols=st.integers(1, 50), extra=st.integers(1, 10**6), rows=st.integers(1, 100))
def test_synth_refuses_more_nonzeros_per_row_than_columns(cols, extra, rows):
    """A row has at most one nonzero per feature: --nnz-per-row above --cols is refused naming both, never clamped."""
    with tempfile.TemporaryDirectory(prefix="ooc-synth-") as tmp:
        _synth_refused(tmp, ["--rows", rows, "--cols", cols, "--nnz-per-row", cols + extra],
                       "--nnz-per-row", "--cols")


@settings(max_examples=examples(12), **SETTINGS)
@given(data=st.data())
def test_synth_refuses_a_shape_that_cannot_fit_before_writing(data):
    """A store larger than any disk (--rows x --nnz-per-row) or feature tables larger than --memory (--cols) are
    refused before anything is written, naming the option and the size needed."""
    k = data.draw(st.integers(1, 1000))
    if data.draw(st.booleans()):
        args = ["--rows", data.draw(st.integers(2**50, 2**62 // k)), "--cols", 1000, "--nnz-per-row", k]
        names = ("--rows", "--nnz-per-row", "iB")
    else:
        args = ["--rows", 10, "--cols", data.draw(st.integers(2**27, 2**31 - 1)), "--nnz-per-row", k,
                "--memory", "64MiB"]
        names = ("--cols", "--memory", "iB")
    with tempfile.TemporaryDirectory(prefix="ooc-synth-") as tmp:
        _synth_refused(tmp, args, *names)
