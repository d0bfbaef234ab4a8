"""Class probabilities are finite and sum to 1 for every margin a model can give, and the held-out logloss is
finite: margins drawn over the whole float range (every class's sigmoid underflowing to 0 at -800: 0 / 0
before), compared with a reference computed row by row in Python floats (log s(x) by its two stable branches, then
the shifted log-sum-exp)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as hs
from hypothesis.extra import numpy as hnp

from ooc.model import log_proba_from_margins, proba_from_margins

MARGIN = hs.floats(-1e4, 1e4, allow_nan=False)


def _reference(m: np.ndarray) -> np.ndarray:
    """p_c = s(m_c) / sum_j s(m_j), from log s(m) = -log(1 + e^{-m}) (one row at a time, in Python floats)."""
    import math

    out = []
    for row in np.atleast_2d(m):
        logs = [-math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x)) for x in row]
        top = max(logs)
        z = sum(math.exp(v - top) for v in logs)
        out.append([math.exp(v - top) / z for v in logs])
    return np.array(out)


@settings(max_examples=60, deadline=None)
@given(m=hnp.arrays(np.float64, hs.tuples(hs.integers(1, 5), hs.integers(2, 6)), elements=MARGIN))
def test_one_vs_rest_probabilities_are_finite_and_exact(m):
    p = proba_from_margins(m)
    assert np.isfinite(p).all() and np.allclose(p.sum(axis=1), 1.0)
    assert np.allclose(p, _reference(m), rtol=1e-9, atol=1e-300)
    lp = log_proba_from_margins(m)
    assert np.isfinite(lp).all() and (lp <= 0).all()
    assert np.allclose(np.exp(lp), p, rtol=1e-9, atol=1e-300)


@settings(max_examples=60, deadline=None)
@given(m=hnp.arrays(np.float64, hs.integers(1, 8), elements=MARGIN))
def test_binary_probabilities_keep_their_digits(m):
    p = proba_from_margins(m)
    assert np.isfinite(p).all() and np.allclose(p.sum(axis=1), 1.0)
    lp = log_proba_from_margins(m)
    assert np.isfinite(lp).all()
    assert np.allclose(lp[:, 1], -np.logaddexp(0.0, -m)) and np.allclose(lp[:, 0], -np.logaddexp(0.0, m))


def test_every_sigmoid_underflowing_is_still_a_distribution():
    p = proba_from_margins(np.array([[-800.0, -801.0, -900.0]]))
    assert np.isfinite(p).all() and abs(p.sum() - 1) < 1e-12 and p[0, 0] > p[0, 1] > p[0, 2]
