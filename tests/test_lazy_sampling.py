"""The per-step samplings at O(log m) per step (ooc.kernels.rcd_lazy): law of a draw, and convergence.

* the draw of :func:`lazy_draw` has the law ``floor/m + (1 - floor) [(1 - s) a/A + s b/B]``
  (exactly, on a grid of uniforms; and chi-square), every coordinate (score 0 included) has ``p_i >= floor/m``, and a tree of
  total 0 hands its share to the other one;
* gap-per-epoch's weights keep the same uniform floor;
* with example weights ``c_i != 1`` (a class-weight mapping) every per-step sampling of
  ``rcd-dual`` and ``rcd-primal`` reaches the certified optimum of the weighted objective,
  checked against an independent L-BFGS-B solve of the weighted primal (scipy).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import minimize

from ooc.kernels.rcd_lazy import lazy_draw
from ooc.schedule.sampling import PER_STEP, SumTree
from ooc.solvers.rcd_dual import RCDDualSolver
from ooc.solvers.rcd_primal import RCDPrimalSolver
from tests import reference as R
from tests.test_rcd import make_store, train


def draws(a, b, share, floor, us):
    ta, tb = SumTree(a).tree, SumTree(b).tree
    return np.array([lazy_draw(ta, tb, share, floor, len(a), u) for u in us])


def law(a, b, share, floor):
    a, b = np.asarray(a, float), np.asarray(b, float)
    pa = (1 - share) if a.sum() > 0 else 0.0
    pb = share if b.sum() > 0 else 0.0
    mix = np.full(len(a), 1.0 / len(a)) if pa + pb == 0 else \
        (pa * (a / a.sum() if pa else 0) + pb * (b / b.sum() if pb else 0)) / (pa + pb)
    return floor / len(a) + (1 - floor) * mix


@pytest.mark.parametrize("a,b,share,floor", [
    ([5.0, 0.0, 1.0, 2.0, 0.0, 8.0, 0.5], [0.0] * 7, 0.0, 0.1),
    ([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0], [3.0, 0.0, 0.2, 0.0, 0.0, 7.0, 1.0], 0.5, 0.05),
    ([0.0] * 5, [1.0, 2.0, 0.0, 0.0, 4.0], 0.3, 0.2),  # a empty: b takes its share
    ([0.0] * 6, [0.0] * 6, 0.5, 0.1),  # both empty: uniform
])
def test_lazy_draw_law(a, b, share, floor):
    p = law(a, b, share, floor)
    assert (p >= floor / len(a) - 1e-15).all() and p.sum() == pytest.approx(1.0)
    # exact: the share of a fine grid of u in [0, 1) that picks each coordinate is p_i (to 1/grid)
    grid = (np.arange(200_000) + 0.5) / 200_000
    share_of_grid = np.bincount(draws(a, b, share, floor, grid), minlength=len(a)) / len(grid)
    assert share_of_grid == pytest.approx(p, abs=2e-5)
    # and random uniforms: chi-square, no coordinate starves (score 0 or not)
    counts = np.bincount(draws(a, b, share, floor, np.random.default_rng(3).random(50_000)), minlength=len(a))
    assert (counts > 0).all()
    assert stats.chisquare(counts, p * counts.sum()).pvalue > 1e-4


def weighted_reference(loss, X, y, c, l2):
    """Minimiser of ``1/n sum c_i phi(x_i.w) + l2/2 ||w||^2`` (smooth ``phi``) by L-BFGS-B."""
    n = len(y)

    def f(w):
        m = y * (X @ w)
        if loss.name == "logistic":
            val, dm = np.logaddexp(0.0, -m), -1.0 / (1.0 + np.exp(m))
        else:  # smooth hinge, gamma = 1
            val = np.where(m >= 1, 0.0, np.where(m <= 0, 0.5 - m, 0.5 * (1 - m) ** 2))
            dm = np.where(m >= 1, 0.0, np.where(m <= 0, -1.0, m - 1.0))
        return (c @ val) / n + 0.5 * l2 * w @ w, X.T @ (c * dm * y) / n + l2 * w

    return minimize(f, np.zeros(X.shape[1]), jac=True, method="L-BFGS-B",
                    options={"gtol": 1e-13, "ftol": 1e-16, "maxiter": 100000}).x


@pytest.fixture(scope="module")
def clf():
    return make_store(n=120, d=12)


CW = "1=4,-1=0.5"  # c_i = 4 on the positives, 0.5 on the negatives


@pytest.mark.parametrize("cls", [RCDDualSolver, RCDPrimalSolver])
@pytest.mark.parametrize("loss", ["logistic", "smooth-hinge"])
@pytest.mark.parametrize("sampling", PER_STEP)
def test_weighted_per_step_samplings_reach_the_optimum(cls, loss, sampling, clf):
    X, y, st = clf
    l2, tol = 1e-2, 1e-9
    res, s = train(cls, st, loss=loss, l2=l2, tol=tol, sampling=sampling, class_weight=CW, max_epochs=3000)
    assert res["converged"], (res["epochs"], res["gap"])
    c = np.where(y > 0, 4.0, 0.5)
    w = res["w"][0]
    p = R.primal_objective(s.pb.loss, X, y, c, w, l2, 0.0)
    assert p == pytest.approx(res["primal"], rel=1e-9)  # the reported P is the weighted P of w
    wr = weighted_reference(s.pb.loss, X, y, c, l2)
    pr = R.primal_objective(s.pb.loss, X, y, c, wr, l2, 0.0)
    assert p - pr <= res["gap"] + 1e-12  # the certificate is honest
    assert abs(p - pr) <= 1e-7 * max(1.0, abs(pr))
    assert np.abs(w - wr).max() <= 1e-3 * max(1.0, np.abs(wr).max())


def test_gap_per_epoch_weights_have_a_uniform_floor():
    from ooc.schedule.sampling import gap_weights

    g = np.array([0.0, 3.0, -1e-18, 1.0, 0.0])
    p = gap_weights(g, 0.1)
    assert p.sum() == pytest.approx(1.0) and (p >= 0.1 / 5 - 1e-15).all()
    assert p == pytest.approx(0.9 * np.maximum(g, 0) / 4.0 + 0.02)
    assert gap_weights(np.zeros(4), 0.1) == pytest.approx(np.full(4, 0.25))  # no gap left: uniform
