"""Contract every loss and the elastic-net penalty must meet.

Checked numerically, not against the paper's printed formulas (a PDF extraction): finite
differences, Fenchel-Young, conjugate of conjugate by 1-D optimisation, the compiled code
against the Python methods and an independent numpy version, and the Prox-SDCA coordinate
step against a brute-force 1-D maximisation.
"""

import math
import pickle

import numpy as np
import pytest
import reference as ref
from huber_loss import Huber
from numba import njit
from scipy.optimize import minimize_scalar

from ooc.objectives import (
    ElasticNet,
    Hinge,
    Logistic,
    SmoothHinge,
    Squared,
    conj_value,
    dual_step,
    grad_conj,
    loss_conj_neg,
    loss_deriv,
    loss_value,
    make_loss,
    primal_value,
    soft_threshold,
)

# Huber: a loss registered outside the package (tests/huber_loss.py), held to the same contract
LOSSES = [Squared(), Logistic(), SmoothHinge(1.0), SmoothHinge(0.3), Hinge(), Huber()]
IDS = ["squared", "logistic", "smooth-hinge-1", "smooth-hinge-0.3", "hinge", "huber"]


def _labels(loss, rng, size):
    if loss.is_classification:
        return rng.choice([-1.0, 1.0], size=size)
    return rng.normal(scale=2.0, size=size)


def _kinks(loss):
    if loss.name == "hinge":
        return [1.0]
    if loss.name == "smooth-hinge":
        return [1.0, 1.0 - loss.gamma]
    return []


def _smooth_points(loss, rng, size):
    """Margins z with labels y, away from the kinks of phi in y z."""
    y = _labels(loss, rng, size)
    z = rng.uniform(-4, 4, size=size)
    for k in _kinks(loss):
        bad = np.abs(y * z - k) < 1e-3
        z[bad] += 0.01 * y[bad]
    if loss.name == "huber":  # kinks at |z - y| = delta
        bad = np.abs(np.abs(z - y) - loss.delta) < 1e-3
        z[bad] += 0.01
    return z, y


def _dual_points(loss, rng, size, c=1.0):
    """Feasible duals a (of a weight-c example) and their labels."""
    y = _labels(loss, rng, size)
    if loss.is_classification:
        return y * rng.uniform(0, c, size=size), y
    if loss.name == "huber":  # phi*(-a) is finite for |a| <= delta (times the weight)
        return c * rng.uniform(-loss.delta, loss.delta, size=size), y
    return rng.normal(scale=2.0, size=size), y


def _conj_domain(loss, y):
    """Interval of u where phi*(u, y) is finite (bounded box for the 1-D searches)."""
    if loss.is_classification:
        return (-1.0, 0.0) if y > 0 else (0.0, 1.0)
    if loss.name == "huber":
        return (-loss.delta, loss.delta)
    return (-60.0, 60.0)


# ------------------------------------------------------------------------- basic identity


def test_make_loss_names_and_pickling():
    assert make_loss("squared") == Squared()
    assert make_loss("logistic") == Logistic()
    assert make_loss("hinge") == Hinge()
    assert make_loss("smooth-hinge", gamma=2) == SmoothHinge(2.0)
    assert make_loss("smooth_hinge", gamma=2) == SmoothHinge(2.0)
    assert type(make_loss("smooth-hinge", gamma=2).gamma) is float
    for bad in [dict(name="no-such-loss"), dict(name="smooth-hinge", gamma=0.0)]:
        with pytest.raises(ValueError):
            make_loss(**bad)
    for loss in LOSSES:
        assert pickle.loads(pickle.dumps(loss)) == loss
        assert make_loss(loss.name, gamma=getattr(loss, "gamma", 1.0)) == loss


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_matches_independent_numpy(loss):
    rng = np.random.default_rng(0)
    z, y = _smooth_points(loss, rng, 200)
    np.testing.assert_allclose(loss.value(z, y), ref.phi(loss, z, y), rtol=1e-13, atol=1e-15)
    a, y = _dual_points(loss, rng, 200)
    np.testing.assert_allclose(
        loss.conjugate(-a, y), ref.phi_conj(loss, -a, y), rtol=1e-13, atol=1e-15
    )
    np.testing.assert_allclose(loss.conj_neg(a, y), loss.conjugate(-a, y), rtol=0, atol=0)


@njit(cache=True)
def _njit_all(loss, z, y, a, q, c, out):
    # Calls the generic functions from user njit code, as a kernel does.
    for i in range(z.shape[0]):
        out[0, i] = loss_value(loss, z[i], y[i])
        out[1, i] = loss_deriv(loss, z[i], y[i])
        out[2, i] = loss_conj_neg(loss, a[i], y[i])
        out[3, i] = dual_step(loss, a[i], z[i], y[i], q[i], c[i])


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_njit_generic_equals_python_methods(loss):
    rng = np.random.default_rng(1)
    z, y = _smooth_points(loss, rng, 50)
    a, _ = _dual_points(loss, rng, 50)
    a = np.where(y > 0, np.abs(a), -np.abs(a)) if loss.is_classification else a
    q = rng.uniform(0, 3, 50)
    c = rng.uniform(0.5, 2, 50)
    a = a * (c if loss.is_classification else 1.0)
    out = np.empty((4, 50))
    _njit_all(loss, z, y, a, q, c, out)
    np.testing.assert_array_equal(out[0], loss.value(z, y))
    np.testing.assert_array_equal(out[1], loss.deriv(z, y))
    np.testing.assert_array_equal(out[2], loss.conj_neg(a, y))
    np.testing.assert_array_equal(out[3], loss.dual_step(a, z, y, q, c))
    # Python fallback of the generic functions (no Numba) goes to the same methods.
    assert loss_value(loss, 0.3, 1.0) == loss.value(0.3, 1.0)
    assert dual_step(loss, 0.0, 0.3, 1.0, 0.5, 1.0) == loss.dual_step(0.0, 0.3, 1.0, 0.5, 1.0)


# ------------------------------------------------------------------------- calculus


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_derivative_finite_difference(loss):
    rng = np.random.default_rng(2)
    z, y = _smooth_points(loss, rng, 300)
    h = 1e-6
    fd = (loss.value(z + h, y) - loss.value(z - h, y)) / (2 * h)
    np.testing.assert_allclose(loss.deriv(z, y), fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_smoothness_constant(loss):
    """``smoothness`` is the Lipschitz constant of phi' (sup of phi'')."""
    z = np.linspace(-6, 6, 24001)
    y = np.ones_like(z)
    g = loss.deriv(z, y)
    slopes = np.abs(np.diff(g) / np.diff(z))
    if loss.is_smooth:
        assert slopes.max() <= loss.smoothness * (1 + 1e-9)
        assert slopes.max() >= loss.smoothness * (1 - 1e-3)
    else:
        assert loss.smoothness == math.inf and slopes.max() > 1e3


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_fenchel_young(loss):
    rng = np.random.default_rng(3)
    z, y = _smooth_points(loss, rng, 400)
    a, _ = _dual_points(loss, rng, 400)
    a = np.abs(a) * y if loss.is_classification else a
    u = -a
    gap = loss.value(z, y) + loss.conjugate(u, y) - z * u
    assert gap.min() >= -1e-12
    # Equality at u = phi'(z) (any subgradient for the hinge).
    du = loss.deriv(z, y)
    eq = loss.value(z, y) + loss.conjugate(du, y) - z * du
    np.testing.assert_allclose(eq, 0.0, atol=1e-12)
    # Outside the domain the conjugate is +inf.
    if loss.is_classification:
        assert np.all(np.isinf(loss.conjugate(0.5 * y, y)))
        assert np.all(np.isinf(loss.conjugate(-1.5 * y, y)))


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_conjugate_is_sup(loss):
    """phi*(u) = sup_z [u z - phi(z)], by a 1-D search over z."""
    rng = np.random.default_rng(4)
    for _ in range(25):
        y = float(_labels(loss, rng, 1)[0])
        lo, hi = _conj_domain(loss, y)
        if loss.is_classification or loss.name == "huber":  # a bounded domain
            u = rng.uniform(lo + 0.02 * (hi - lo), hi - 0.02 * (hi - lo))
        else:
            u = rng.normal()
        res = minimize_scalar(
            lambda t: -(u * t - loss.value(t, y)), bounds=(-60, 60), method="bounded",
            options={"xatol": 1e-11},
        )
        assert -res.fun == pytest.approx(loss.conjugate(u, y), abs=1e-8)


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_conjugate_of_conjugate(loss):
    """phi(z) = sup_u [z u - phi*(u)], by a 1-D search over the domain of phi*."""
    rng = np.random.default_rng(5)
    for _ in range(25):
        y = float(_labels(loss, rng, 1)[0])
        z = rng.uniform(-3, 3)
        lo, hi = _conj_domain(loss, y)
        res = minimize_scalar(
            lambda u: -(z * u - loss.conjugate(u, y)), bounds=(lo, hi), method="bounded",
            options={"xatol": 1e-12},
        )
        best = max(-res.fun, z * lo - loss.conjugate(lo, y), z * hi - loss.conjugate(hi, y))
        assert best == pytest.approx(loss.value(z, y), abs=1e-8)


# ------------------------------------------------------------------------- dual step


def _step_objective(loss, a, z, y, q, c, d):
    return -loss.weighted_conj_neg(a + d, y, c) - z * d - 0.5 * q * d * d


def _brute_step(loss, a, z, y, q, c):
    """Maximise the option I objective over the feasible d by bounded 1-D search."""
    if loss.is_classification:
        # a + d = y t with t in [0, c].
        res = minimize_scalar(
            lambda t: -_step_objective(loss, a, z, y, q, c, y * t - a),
            bounds=(0.0, c), method="bounded", options={"xatol": 1e-13},
        )
        cands = [y * res.x - a, -a, y * c - a]
    elif loss.name == "huber":
        # a + d in [-c delta, c delta]
        lo, hi = -c * loss.delta - a, c * loss.delta - a
        res = minimize_scalar(
            lambda d: -_step_objective(loss, a, z, y, q, c, d),
            bounds=(lo, hi), method="bounded", options={"xatol": 1e-13},
        )
        cands = [res.x, lo, hi]
    else:
        d0 = (c * (y - z) - a) / (1 + c * q)  # only to centre the search box
        res = minimize_scalar(
            lambda d: -_step_objective(loss, a, z, y, q, c, d),
            bounds=(d0 - 10 - abs(d0), d0 + 10 + abs(d0)), method="bounded",
            options={"xatol": 1e-13},
        )
        cands = [res.x]
    vals = [_step_objective(loss, a, z, y, q, c, d) for d in cands]
    k = int(np.argmax(vals))
    return cands[k], vals[k]


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_dual_step_brute_force(loss):
    rng = np.random.default_rng(6)
    for it in range(150):
        c = float(rng.choice([1.0, rng.uniform(0.05, 5.0)]))
        a, y = _dual_points(loss, rng, 1, c=c)
        a, y = float(a[0]), float(y[0])
        if it % 7 == 0 and loss.is_classification:
            a = float(rng.choice([0.0, y * c]))  # start on the box boundary
        z = float(rng.normal(scale=2.0))
        q = float(rng.choice([rng.uniform(0, 3), 10 ** rng.uniform(-4, 3)]))
        d = loss.dual_step(a, z, y, q, c)
        f = _step_objective(loss, a, z, y, q, c, d)
        d_bf, f_bf = _brute_step(loss, a, z, y, q, c)
        assert np.isfinite(f)
        assert f >= f_bf - 1e-12 * (1 + abs(f_bf))
        assert d == pytest.approx(d_bf, rel=1e-5, abs=1e-6 * max(1.0, c))


def test_dual_step_zero_weight():
    for loss in LOSSES:
        assert loss.dual_step(0.0, 0.7, 1.0, 2.0, 0.0) == 0.0
        assert loss.dual_step(0.3, 0.7, 1.0, 2.0, 0.0) == -0.3


def test_hinge_empty_row():
    """q = 0 (an empty row, no bias): the step goes to the box end the slope points to."""
    h = Hinge()
    assert h.dual_step(0.2, 0.5, 1.0, 0.0, 1.0) == pytest.approx(0.8)  # m < 1: to c
    assert h.dual_step(0.2, 1.5, 1.0, 0.0, 1.0) == pytest.approx(-0.2)  # m > 1: to 0
    assert h.dual_step(0.2, 1.0, 1.0, 0.0, 1.0) == 0.0


def test_logistic_step_precision_and_extremes():
    """Stationarity to machine precision, strictly inside the box, over extreme inputs."""
    loss = Logistic()
    rng = np.random.default_rng(7)
    for _ in range(3000):
        y = float(rng.choice([-1.0, 1.0]))
        c = float(10 ** rng.uniform(-6, 3))
        p0 = float(rng.choice([0.0, 1.0, rng.uniform(), 10 ** rng.uniform(-300, 0)]))
        a = y * c * p0
        z = float(rng.choice([rng.normal(scale=3), rng.normal(scale=300)]))
        q = float(rng.choice([0.0, 10 ** rng.uniform(-8, 8)]))
        d = loss.dual_step(a, z, y, q, c)
        p = (a + d) * y / c
        assert -1e-15 <= p <= 1 + 1e-15
        assert np.isfinite(loss.weighted_conj_neg(a + d, y, c))
        if 1e-300 < p < 1 - 1e-12:
            # logit(p) + m + q c (p - p0) = 0; dividing by the derivative turns the
            # residual into an error on p. Rounding allowed: of a + d (~eps p0), and of
            # evaluating the residual (~eps (|m| + q c)).
            m = y * z
            r = math.log(p) - math.log1p(-p) + m + q * c * (p - p0)
            scale = 1 / (p * (1 - p)) + q * c
            tol = 1e-12 * p + 1e-15 * (p0 + (abs(m) + q * c) / scale)
            assert abs(r / scale) <= tol
    # Ground truth from the reference root-finder on ordinary inputs.
    for _ in range(300):
        y = float(rng.choice([-1.0, 1.0]))
        c = float(rng.uniform(0.1, 3))
        a = y * c * float(rng.uniform())
        z = float(rng.normal(scale=3))
        q = float(10 ** rng.uniform(-3, 3))
        assert loss.dual_step(a, z, y, q, c) == pytest.approx(
            ref.dual_step(loss, a, z, y, q, c), rel=1e-12, abs=1e-15 * c
        )


# ------------------------------------------------------------------------- penalty


def test_soft_threshold():
    v = np.array([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0])
    np.testing.assert_array_equal(soft_threshold(v, 1.0), [-2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0])
    np.testing.assert_array_equal(soft_threshold(v, 0.0), v)
    assert soft_threshold(2.5, 1.0) == 1.5


@pytest.mark.parametrize("bias", [0.0, 1.5])
@pytest.mark.parametrize("l1", [0.0, 0.3])
def test_penalty_conjugate(l1, bias):
    pen = ElasticNet(0.7, l1)
    l2, k = pen.l2, l1 / pen.l2
    rng = np.random.default_rng(8)
    v = rng.normal(scale=1.0, size=9)
    w = grad_conj(pen, v, bias)
    # Closed form l2 g*(v) = l2/2 sum (|v_j| - k)_+^2 (+ v_d^2 / 2 for the intercept).
    feats = v[:-1] if bias else v
    expect = 0.5 * l2 * np.sum(np.maximum(np.abs(feats) - k, 0) ** 2)
    if bias:
        expect += 0.5 * l2 * v[-1] ** 2
        assert w[-1] == v[-1]
    assert conj_value(pen, v, bias) == pytest.approx(expect, rel=1e-14)
    # g* as a sup, coordinate by coordinate (g is separable).
    for j, vj in enumerate(v):
        kj = 0.0 if (bias and j == len(v) - 1) else k
        res = minimize_scalar(lambda t: -(t * vj - 0.5 * t * t - kj * abs(t)),
                              bounds=(-10, 10), method="bounded", options={"xatol": 1e-12})
        assert -res.fun == pytest.approx(0.5 * max(abs(vj) - kj, 0) ** 2, abs=1e-10)
        assert res.x == pytest.approx(w[j], abs=1e-6)
    # grad g* by finite differences.
    h = 1e-6
    for j in range(len(v)):
        e = np.zeros_like(v)
        e[j] = h
        fd = (conj_value(pen, v + e, bias) - conj_value(pen, v - e, bias)) / (2 * h * l2)
        assert fd == pytest.approx(w[j], abs=1e-7)
    # Fenchel-Young for l2 g: >= l2 w.v for any w, equality at w = grad g*(v).
    fy = primal_value(pen, w, bias) + conj_value(pen, v, bias)
    assert fy == pytest.approx(l2 * w @ v, rel=1e-13)
    for _ in range(50):
        u = rng.normal(size=v.shape)
        assert primal_value(pen, u, bias) + conj_value(pen, v, bias) >= l2 * u @ v - 1e-12


def test_pure_l1_is_refused_where_l2_is_needed():
    pen = ElasticNet(0.0, 0.1)
    assert primal_value(pen, np.array([1.0, -2.0])) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="l2 > 0"):
        conj_value(pen, np.ones(2))
    with pytest.raises(ValueError, match="l2 > 0"):
        grad_conj(pen, np.ones(2))
    with pytest.raises(ValueError):
        ElasticNet(-1.0).validate()
