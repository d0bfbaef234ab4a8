"""The compiled row permutation: a permutation, a pure function of its seed, uniform."""

import numpy as np

from ooc.kernels.shuffle import permutation
from ooc.schedule.scheduler import row_order


def test_is_a_permutation_and_deterministic():
    for n in (0, 1, 2, 7, 1000):
        p = permutation(n, np.uint64(5))
        assert p.dtype == np.int64 and np.array_equal(np.sort(p), np.arange(n))
        assert np.array_equal(p, permutation(n, np.uint64(5)))
    assert not np.array_equal(permutation(1000, np.uint64(5)), permutation(1000, np.uint64(6)))
    assert np.array_equal(row_order(500, 1, 2, 3), row_order(500, 1, 2, 3))
    assert not np.array_equal(row_order(500, 1, 2, 3), row_order(500, 1, 3, 3))


def test_every_position_equally_likely():
    # 5 x 5 table of (element, position) counts over 40000 seeds: chi-square with 16 d.o.f.;
    # 60 is far beyond its 0.9999 quantile (about 43); a shuffle drawing j from [0, n) instead of [0, i] scores thousands
    n, trials = 5, 40000
    counts = np.zeros((n, n))
    for s in range(trials):
        counts[np.arange(n), permutation(n, np.uint64(s))] += 1
    expected = trials / n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 60, chi2
