"""Out-of-range, non-finite, negative, huge and malformed option values for every command of ``ooc``.

The commands and their options are read from the click group (``ooc.cli.main``); the bad values
are made from each option's declared range (:mod:`ooc.options`) by rules written here, not by the
types' own checks: numbers just outside the bounds, NaN and the infinities, numbers past 64 bits,
fractions for integers, words for numbers, sizes that are not sizes, addresses without a port,
names no choice has. The promise checked (docs/cli.rst, "Option values"): the command line
refuses each while it parses the arguments, exit status 2, ONE line naming the option, and no
file is made. ``tests/test_fuzz_options.py`` runs a few per option in CI; ``scripts/fuzz_options.py``
runs them for as long as asked and prints the count.
"""

from __future__ import annotations

import math
import os

import click
from click.testing import CliRunner
from hypothesis import strategies as st

from ooc import options as T
from ooc.cli import main

#: values of the required arguments and options that let a command reach its options' parsing
REQUIRED = {"--out": "out", "--rows": "2", "--cols": "2", "--nnz-per-row": "1", "--format": "text"}
#: options whose value is free text by design (a path or a store), with no range to break
FREE_TEXT = {("train", "validation"), ("info", "validation")}
LETTERS = st.text(alphabet="abcdfghjklmopqrsuvwxyzABCDFGHJKLMOPQRSUVWXYZ_?!", min_size=1, max_size=8)


def commands() -> dict:
    """``{name: click.Command}`` of every ``ooc`` command."""
    return dict(main.commands)


def value_options(cmd: click.Command) -> list:
    """The options of ``cmd`` that take a value (not flags, not ``--help``)."""
    return [p for p in cmd.params if isinstance(p, click.Option) and not p.is_flag and p.name != "help"]


def typed_cases() -> list:
    """``(command name, option)`` for every option with a type to break."""
    out = []
    for name, cmd in sorted(commands().items()):
        for p in value_options(cmd):
            if isinstance(p.type, click.Path) or (name, p.name) in FREE_TEXT:
                continue
            out.append((name, p))
    return out


#: digits other than ASCII's (Arabic-Indic, full width, Devanagari), which int() and float() read as numbers
_DIGITS = ("٠١٢٣٤٥٦٧٨٩", "０１２３４５６７８９", "०१२३४५६७८९")


def _unplain(values) -> st.SearchStrategy:
    """Texts of ``values`` (a strategy of valid ones) that are not written plainly: spaces around them, or
    their digits in another script (ooc.options._plain refuses both)."""
    padded = st.builds(lambda v, form: form.format(v), values, st.sampled_from([" {}", "{} ", "\t{}", "{}\n"]))
    underscored = values.filter(lambda v: len(v) >= 2).map(lambda v: v[0] + "_" + v[1:])
    scripts = st.builds(lambda v, d: "".join(d[int(c)] if c.isdigit() else c for c in v), values,
                        st.sampled_from(_DIGITS)).filter(lambda v: not v.isascii())
    return st.one_of(padded, scripts, underscored)


def _numbers_outside(t: T.Number):
    """Numbers that ``t`` refuses, by its bounds (as text, as the command line gets them)."""
    outs = [st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e999", ""]), LETTERS]
    lo_ok = t.low if t.low is not None else 0
    ok = st.integers(int(lo_ok) + 1, int(lo_ok) + 50).filter(lambda v: t.high is None or v <= t.high)
    outs.append(_unplain(ok.map(str)))
    if t.integer:
        outs.append(st.sampled_from(["1.5", "2.25", "1e-3", str(2**63), str(10**30)]))
        # an in-range integer spelled as a real number ("1e3", "4.0"): refused, never rounded into a count
        lo = max(int(t.low) + (1 if t.low_open else 0), 0) if t.low is not None else 0
        hi = min(int(t.high), lo + 10**6) if t.high is not None else lo + 10**6
        outs.append(st.builds(lambda k, form: form.format(k), st.integers(lo, hi),
                              st.sampled_from(["{}.0", "{}e0", "{}.", "{}E0", "+{}.00"])))
        if lo <= 1000 <= hi:
            outs.append(st.just("1e3"))
        if t.low is not None:
            outs.append(st.integers(max_value=int(t.low) - 1, min_value=-(2**70)).map(str))
        if t.high is not None:
            outs.append(st.integers(min_value=int(t.high) + 1, max_value=2**70).map(str))
    else:
        if t.low is not None:
            below = st.floats(max_value=float(t.low), exclude_max=not t.low_open, allow_nan=False,
                              allow_infinity=False, min_value=-1e300)
            outs.append(below.map(repr))
        if t.high is not None:
            outs.append(st.floats(min_value=float(t.high), exclude_min=True, allow_nan=False,
                                  allow_infinity=False, max_value=1e300).map(repr))
    return st.one_of(outs)


def bad_values(t):
    """A strategy of values the option type ``t`` must refuse."""
    if isinstance(t, T.Number):
        return _numbers_outside(t)
    if isinstance(t, T.Bytes):
        small = [str(v) for v in (t.low - 1, -1, -(2**40)) if v < t.low]
        return st.one_of(st.sampled_from(["nan", "inf", "-inf", "1e400", "12XB", "1..2GiB", "GiB", "", *small]),
                         LETTERS.filter(lambda s: s.lower() not in t.words and s.upper() not in ("B", "K", "M")),
                         _unplain(st.integers(1, 64).map(lambda k: f"{k}GiB")))
    if isinstance(t, T.Distributed):
        return st.one_of(st.sampled_from(["bogus", "local:0", "local:-2", "local:x", "local:", "local:1.5",
                                          "host:99999", "host:0", "tcp://", ":80", "host", "tcp://host",
                                          "local:100000"]), LETTERS)
    if isinstance(t, T.ColumnPair):
        return st.one_of(st.sampled_from(["0", ":1", "a:", ":", "-1:2", "0:-3"]), LETTERS)
    if isinstance(t, (T.Checked, click.Choice)):
        return LETTERS.map(lambda s: "zz" + s)
    raise AssertionError(f"no bad values for the type {t!r}")


def invocation(name: str, cmd: click.Command, option: click.Option, value: str) -> list:
    """Arguments that run ``ooc NAME`` with ``option`` set to ``value`` (dummy paths, required values)."""
    args = [name]
    for p in cmd.params:
        if isinstance(p, click.Argument):
            args.append(f"arg-{p.name}")
    for p in value_options(cmd):
        if p.required and p is not option:
            args += [p.opts[0], REQUIRED[p.opts[0]]]
    return args + [option.opts[0], value]


def check_refused(tmp: str, name: str, cmd: click.Command, option: click.Option, value: str) -> None:
    """``ooc NAME ... OPTION VALUE`` is refused while parsing: exit 2, one line naming the option, no file."""
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        r = CliRunner().invoke(main, invocation(name, cmd, option, value))
    finally:
        os.chdir(cwd)
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    shown = f"ooc {name} {option.opts[0]} {value!r}"
    assert r.exit_code == 2, f"{shown}: exit {r.exit_code}, expected 2 (a usage error): {r.output!r}"
    assert len(lines) == 1 and "Traceback" not in r.output, f"{shown}: not one line: {r.output!r}"
    assert lines[0].startswith("ooc: error: ") and f"'{option.opts[0]}'" in lines[0], f"{shown}: {lines[0]}"
    left = os.listdir(tmp)
    assert not left, f"{shown}: files made before the refusal: {left}"


def config_types() -> dict:
    """``{field name: type}`` of :class:`ooc.config.TrainConfig`'s typed fields (the Python API's options)."""
    import dataclasses

    from ooc.config import TrainConfig

    return {f.name: f.metadata["type"] for f in dataclasses.fields(TrainConfig)
            if f.init and f.metadata.get("type") is not None}


def python_value(text: str):
    """A command-line value as a Python caller would pass it (a number when it reads as one; a text not
    written plainly stays the text the caller wrote)."""
    if not text.isascii() or text != text.strip():
        return text
    try:
        v = float(text)
    except ValueError:
        return text
    if text.lstrip("+-").isdigit():
        return int(text)
    if math.isfinite(v) and v == int(v):
        return text  # an integer spelled as a real number ("1e3"): refused as text, as the command line gets it
    return v if not math.isnan(v) else math.nan
