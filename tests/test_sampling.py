"""Samplers draw with the intended probabilities; the sum tree matches a linear scan.

* sum tree: after random builds and updates, every draw equals the linear-scan answer
  (first ``i`` with ``u < cumsum_i``, zero-weight leaves never returned) and the totals match;
* chi-square goodness of fit (p > 1e-3) of: in-block draws, the two-level out-of-core draw
  (multinomial block counts, then in-block draws) against the paper's marginal ``p_i``, and the
  block probabilities with a gap floor.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ooc.schedule.sampling import (
    SAMPLINGS,
    SumTree,
    block_counts,
    block_probs,
    block_uniforms,
    draw_in_block,
    normalize_sampling,
    tree_capacity,
)


def linear_scan(weights, u):
    c = np.cumsum(weights)
    for i, ci in enumerate(c):
        if u < ci and weights[i] > 0:
            return i
    return int(np.flatnonzero(np.asarray(weights) > 0)[-1])


def test_sum_tree_matches_linear_scan():
    rng = np.random.default_rng(0)
    for m in (1, 2, 3, 7, 8, 33, 100):
        w = rng.random(m) * (rng.random(m) > 0.3)
        if w.sum() == 0:
            w[0] = 1.0
        t = SumTree(w)
        assert t.total == pytest.approx(w.sum(), rel=1e-12)
        for _ in range(200):
            if rng.random() < 0.3:  # updates, including to and from zero
                i = int(rng.integers(m))
                w[i] = 0.0 if rng.random() < 0.3 else rng.random() * 10
                if w.sum() == 0:
                    w[i] = 1.0
                t.update(i, w[i])
                assert t.total == pytest.approx(w.sum(), rel=1e-12)
            u = rng.random() * w.sum()
            assert t.draw(u) == linear_scan(w, u)
        # edges: u = 0 and u at (or past) the total land on positive leaves
        assert w[t.draw(0.0)] > 0 and w[t.draw(t.total)] > 0 and w[t.draw(t.total * (1 + 1e-9))] > 0


def test_sum_tree_rejects_bad_weights():
    with pytest.raises(ValueError):
        SumTree([1.0, -1.0])
    with pytest.raises(ValueError):
        SumTree([np.nan])
    assert tree_capacity(5) == 8 and tree_capacity(1) == 1


def chisq_ok(counts, probs):
    counts = np.asarray(counts, dtype=float)
    keep = probs > 0
    assert counts[~keep].sum() == 0, "drew a coordinate of probability 0"
    exp = probs[keep] / probs[keep].sum() * counts.sum()
    return stats.chisquare(counts[keep], exp).pvalue


def test_in_block_draws_chi_square():
    rng = np.random.default_rng(1)
    w = np.array([5.0, 0.0, 1.0, 2.0, 0.5, 8.0, 0.0, 3.0])
    draws = draw_in_block(w, rng.random(200_000))
    assert chisq_ok(np.bincount(draws, minlength=len(w)), w) > 1e-3
    # all-zero weights: uniform
    d0 = draw_in_block(np.zeros(5), rng.random(50_000))
    assert chisq_ok(np.bincount(d0, minlength=5), np.ones(5)) > 1e-3


def test_two_level_draw_has_the_papers_marginal():
    """Blocks by total weight (multinomial counts), then in-block by weight: marginal p_i."""
    rng = np.random.default_rng(2)
    p = rng.random(60) ** 3
    blocks = [(0, 7), (7, 30), (30, 31), (31, 60)]
    base = np.array([p[a:b].sum() for a, b in blocks])
    counts = np.zeros(len(p))
    for epoch in range(400):
        m = block_counts(block_probs(base), len(p), seed=5, epoch=epoch)
        assert m.sum() == len(p)
        for b, (lo, hi) in enumerate(blocks):
            d = draw_in_block(p[lo:hi], block_uniforms(m[b], 5, epoch, b))
            counts[lo:hi] += np.bincount(d, minlength=hi - lo)
    assert chisq_ok(counts, p) > 1e-3


def test_block_counts_and_gap_floor():
    base = np.array([1.0, 1.0, 2.0, 4.0])
    mass = np.array([0.0, 10.0, 0.0, 30.0])
    p = block_probs(base, mass, floor=0.1)
    assert p.sum() == pytest.approx(1.0)
    assert (p >= 0.1 * base / base.sum() - 1e-15).all()  # no block starves
    assert p == pytest.approx(0.9 * mass / mass.sum() + 0.1 * base / base.sum())
    tot = sum(block_counts(p, 1000, 0, e) for e in range(200))
    assert chisq_ok(tot, p) > 1e-3
    # zero mass falls back to base; the draws are a pure function of (seed, epoch)
    assert block_probs(base, np.zeros(4)) == pytest.approx(base / base.sum())
    assert np.array_equal(block_counts(p, 50, 3, 7), block_counts(p, 50, 3, 7))


def test_sampling_names():
    for s in SAMPLINGS:
        assert normalize_sampling(s) == s
    assert normalize_sampling("ADA_GAP") == "ada-gap"
    assert normalize_sampling("supportset-uniform") == "supportSet-uniform"
    with pytest.raises(ValueError):
        normalize_sampling("greedy")
