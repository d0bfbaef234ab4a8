"""Numbers compared in words print apart: two different numbers never print equal (ooc.numtext).

The resume advice had said "not settled (it moved between 0.983 and 0.983)" and "the gap shrinks by
1 per epoch" (0.9999), and a verdict "gap 0.001 > tol 0.001": each number is printed with at least three
significant digits, and more where it would read equal to the number it is compared with.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ooc.engine import diagnose
from ooc.numtext import distinct, versus


def _hist(gaps):
    return [{"epoch": e, "rel_gap": g, "primal": 1.0 + g} for e, g in enumerate(gaps)]


finite = st.floats(-1e300, 1e300, allow_nan=False, allow_subnormal=False)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(a=finite, b=finite, ulps=st.integers(0, 5))
def test_different_numbers_print_apart(a, b, ulps):
    import math

    close = a
    for _ in range(ulps):
        close = math.nextafter(close, math.inf)
    for x, y in ((a, b), (a, close)):
        tx, ty = distinct(x, y)
        assert (tx == ty) == (x == y), (x, y, tx, ty)
        for v, t in ((x, tx), (y, ty)):  # a rounding of the value, at least three digits
            assert abs(float(t) - v) <= 5e-3 * abs(v), (v, t)
        if float(f"{y:g}") == y:  # a bound printed exactly (a tol): the value reads equal to it only if it is
            tv = versus(x, y)
            assert x == y or float(tv) != y, (x, y, tv)


def test_a_gap_just_past_tol_does_not_read_as_tol():
    assert versus(0.0010004, 1e-3) != "0.001"
    assert versus(0.00123, 1e-3) == "0.00123"
    assert versus(1e-3, 1e-3) == "0.001"


def _numbers(text):
    """The pairs 'between A and B' and the rate 'shrinks by R' of an advice text."""
    between = re.findall(r"between ([0-9.e+-]+) and ([0-9.e+-]+)", text)
    rates = re.findall(r"shrinks by ([0-9.e+-]+) per epoch", text)
    return between, rates


def test_advice_of_a_rate_that_rose_over_the_last_quarter():
    """The case seen: the window and the half agree, the gap rose over the last quarter."""
    gaps = [0.983 ** e for e in range(13)]
    gaps[-4] = gaps[-1] * 0.999
    text = diagnose(_hist(gaps), 1e-9).text
    between, _ = _numbers(text)
    assert all(a != b for a, b in between), text
    assert "did not fall over the last quarter" in text, text


@settings(max_examples=40, deadline=None, derandomize=True)
@given(epochs=st.integers(12, 120), r1=st.floats(0.9, 0.99999), dr=st.floats(-3e-3, 3e-3),
       switch=st.floats(0.3, 0.9), rise=st.one_of(st.just(None), st.floats(1.0, 1.01)),
       tol=st.sampled_from([1e-9, 1e-12]))
def test_advice_never_prints_two_rates_equal(epochs, r1, dr, switch, rise, tol):
    """Two phases of close rates (near 1 too), and maybe a gap that rose at the end: every 'between A and
    B' names two different numbers, and a rate below 1 never prints as 1."""
    r2 = min(max(r1 + dr, 0.5), 0.999999)
    k = int(switch * epochs)
    gaps = [r1 ** min(e, k) * r2 ** max(e - k, 0) for e in range(epochs + 1)]
    if rise is not None:
        gaps[-1] = gaps[-3] * rise
    text = diagnose(_hist(gaps), tol).text
    between, rates = _numbers(text)
    assert all(a != b for a, b in between), text
    assert all(float(r) < 1.0 for r in rates), text
