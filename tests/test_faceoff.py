"""The face-off quantities C_P and C_D (Csiba & Richtarik eq. 16) against the paper's closed forms.

Our ``X`` is ``n x d`` (rows = examples); the paper's is ``d x n``. So
``C_P = sum_j ||X_{:j}||_0 ||X_{:j}||^2`` (features) and ``C_D = sum_i ||x_i||_0 ||x_i||^2``.

* dense: ``C_P = n ||X||_F^2``, ``C_D = d ||X||_F^2`` (Sec. 6.1), from ``store.info()``;
* binary: ``C_P = sum_j ||X_{:j}||_0^2``, ``C_D = sum_i ||x_i||_0^2`` (Sec. 6.2);
* Theorem 3: ``||X||_F^2 <= C_P <= n ||X||_F^2``, ``||X||_F^2 <= C_D <= d ||X||_F^2``,
  ``1/d <= C_P / C_D <= n`` on random sparse matrices, and the tight family ``X(a, b, c)`` of its
  proof reaches both ratio bounds in the limit, with the proof's closed forms for C_P, C_D;
* Theorem 4 / Lemma 9 (with R corrected, see below): ``L(alpha, n)`` and ``U(alpha, d, n)`` are the min and max of C_D over
  binary matrices with ``alpha`` nonzeros and no zero row/column (brute force on small shapes);
  Lemma 10: ``R(alpha, d, n) <= 1`` when ``d >= n`` and ``alpha >= n^2 + 3n``.
"""

from __future__ import annotations

import itertools
import uuid

import numpy as np
import pytest
import scipy.sparse as sp

import ooc
from ooc.store.stats import faceoff


def info_of(X):
    X = sp.csr_matrix(X)
    y = np.where(np.arange(X.shape[0]) % 2, 1.0, -1.0)
    st = ooc.convert(X, f"memory://fo-{uuid.uuid4().hex[:8]}", y=y, dtype="float64")
    return st.info()


def cp_cd(X):
    A = sp.csr_matrix(X)
    sq = A.multiply(A)
    return faceoff(np.diff(A.indptr), np.asarray(sq.sum(1)).ravel(), np.diff(A.tocsc().indptr),
                   np.asarray(sq.sum(0)).ravel())


def test_dense_closed_form():
    rng = np.random.default_rng(0)
    for n, d in ((50, 7), (7, 50), (20, 20)):
        X = rng.standard_normal((n, d))
        inf = info_of(X)
        f2 = float((X ** 2).sum())
        assert inf["C_P"] == pytest.approx(n * f2, rel=1e-12)
        assert inf["C_D"] == pytest.approx(d * f2, rel=1e-12)
        if n != d:  # dense: d vs n decides (a square matrix ties, up to rounding)
            assert inf["recommended_side"] == ("primal" if d > n else "dual")


def test_binary_closed_form():
    rng = np.random.default_rng(1)
    X = (rng.random((40, 25)) < 0.2) * rng.choice([-1.0, 1.0], size=(40, 25))
    inf = info_of(X)
    B = X != 0
    assert inf["C_P"] == pytest.approx(float((B.sum(0) ** 2).sum()), rel=1e-14)
    assert inf["C_D"] == pytest.approx(float((B.sum(1) ** 2).sum()), rel=1e-14)


def test_theorem3_bounds_random():
    rng = np.random.default_rng(2)
    for _ in range(50):
        n, d = rng.integers(2, 40, size=2)
        X = sp.random(n, d, density=rng.uniform(0.05, 1.0), random_state=rng, data_rvs=rng.standard_normal).toarray()
        X[np.arange(n), rng.integers(0, d, n)] = 1.0  # no zero rows
        X[rng.integers(0, n, d), np.arange(d)] = 1.0  # nor columns
        f = cp_cd(X)
        f2 = float((X ** 2).sum())
        assert f2 * (1 - 1e-12) <= f["C_P"] <= n * f2 * (1 + 1e-12)
        assert f2 * (1 - 1e-12) <= f["C_D"] <= d * f2 * (1 + 1e-12)
        assert 1 / d * (1 - 1e-12) <= f["C_P"] / f["C_D"] <= n * (1 + 1e-12)


def tight(n, d, a, b, c):
    """The proof's X(a, b, c) in our orientation: example 0 holds a on features 1..d-1, feature 0
    holds b on examples 1..n-1, and c at (0, 0)."""
    X = np.zeros((n, d))
    X[0, 1:] = a
    X[1:, 0] = b
    X[0, 0] = c
    return X


def test_theorem3_tight_family():
    n, d = 30, 12
    for a, b, c in ((1.0, 0.5, 2.0), (0.3, 1.7, 0.1)):
        f = cp_cd(tight(n, d, a, b, c))
        assert f["C_P"] == pytest.approx((d - 1) * a ** 2 + n * (n - 1) * b ** 2 + n * c ** 2, rel=1e-12)
        assert f["C_D"] == pytest.approx(d * (d - 1) * a ** 2 + (n - 1) * b ** 2 + d * c ** 2, rel=1e-12)
    lo = cp_cd(tight(n, d, 1.0, 1e-6, 1e-6))
    hi = cp_cd(tight(n, d, 1e-6, 1.0, 1e-6))
    assert lo["C_P"] / lo["C_D"] == pytest.approx(1 / d, rel=1e-6)  # primal up to d times cheaper
    assert hi["C_P"] / hi["C_D"] == pytest.approx(n, rel=1e-6)  # ... or n times dearer
    assert lo["recommended_side"] == "primal" and hi["recommended_side"] == "dual"


def bar(a, b):
    return b * (a // b)


def L(alpha, n):
    ab = bar(alpha, n)
    return (ab * ab + (alpha - ab) * (2 * ab + n)) / n


def U(alpha, d, n):
    r = bar(alpha - n, d - 1)
    return (d + 1) * r + n - 1 + (alpha - n + 1 - r) ** 2


@pytest.mark.parametrize("d,n", [(2, 3), (3, 3), (3, 4), (4, 3), (2, 5)])
def test_lemma9_and_theorem4_by_brute_force(d, n):
    """Our X is n x d: C_D over the n examples; the paper's lemma for its d x n matrix.

    Theorem 4's tight upper bound on C_P / C_D is max C_P / min C_D = U(alpha, n, d) / L(alpha, n):
    the paper's text defines ``R(alpha, d, n) = U(alpha, d, n) / L(alpha, n)`` (= max C_D / min C_D,
    always >= 1), which is garbled; its proof of Lemma 10 uses U(alpha, n, d).
    """
    ratio = {}
    best = {}
    for bits in itertools.product((0, 1), repeat=n * d):
        B = np.array(bits).reshape(n, d)
        if not (B.any(0).all() and B.any(1).all()):
            continue
        alpha = int(B.sum())
        cd = int((B.sum(1) ** 2).sum())
        cp = int((B.sum(0) ** 2).sum())
        lo_d, hi_d, lo_p, hi_p = best.get(alpha, (np.inf, -np.inf, np.inf, -np.inf))
        best[alpha] = (min(lo_d, cd), max(hi_d, cd), min(lo_p, cp), max(hi_p, cp))
        lo_r, hi_r = ratio.get(alpha, (np.inf, -np.inf))
        ratio[alpha] = (min(lo_r, cp / cd), max(hi_r, cp / cd))
    for alpha, (lo_d, hi_d, lo_p, hi_p) in best.items():
        assert L(alpha, n) == pytest.approx(lo_d) and U(alpha, d, n) == pytest.approx(hi_d)
        assert L(alpha, d) == pytest.approx(lo_p) and U(alpha, n, d) == pytest.approx(hi_p)
        assert ratio[alpha][1] == pytest.approx(R(alpha, d, n))  # attained: tight
        assert ratio[alpha][0] == pytest.approx(1 / R(alpha, n, d))


def R(alpha, d, n):
    """Theorem 4's bound on C_P / C_D, as its proofs use it: max C_P / min C_D."""
    return U(alpha, n, d) / L(alpha, n)


def test_lemma10():
    for n in range(2, 12):
        for d in range(n, 3 * n * n):
            for alpha in range(max(n * n + 3 * n, d), min(d * n, n * n + 3 * n + 40) + 1):
                assert R(alpha, d, n) <= 1 + 1e-12
    # the text's literal R = U(alpha, d, n) / L(alpha, n) fails the lemma (it is max C_D / min C_D >= 1):
    assert U(10, 6, 2) / L(10, 2) > 1
