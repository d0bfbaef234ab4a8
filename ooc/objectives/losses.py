r"""Scalar losses, their convex conjugates and the exact Prox-SDCA coordinate step.

One formulation everywhere (``docs/training.rst``)::

    P(w) = 1/n sum_i c_i phi(x_i . w, y_i) + l2/2 ||w||^2 + l1 ||w||_1
    D(a) = -1/n sum_i c_i phi*(-a_i / c_i, y_i) - l2 g*(v),   v = 1/(l2 n) sum_i a_i x_i

with ``c_i >= 0`` a per-example weight (class or sample weight, default 1). LIBLINEAR's
``C`` is ``C = 1 / (l2 n)`` for ``c_i = 1``. Classification labels are -1/+1.

Each loss is a :class:`typing.NamedTuple` of its parameters (:class:`Squared`,
:class:`Logistic`, :class:`SmoothHinge`, :class:`Hinge`): picklable (Dask) and typed by
Numba as a plain tuple, so an ``@njit(cache=True)`` kernel taking the loss as an argument is
compiled once per (loss class, dtypes) and cached on disk. Inside kernels call the generic
functions :func:`loss_value`, :func:`loss_deriv`, :func:`loss_conj_neg` and
:func:`dual_step`; Numba resolves them at compile time on the loss class
(``numba.extending.overload``), so there are no loss codes and no branches on the loss in
the compiled code. The Python methods of each loss (``value``, ``deriv``, ``conjugate``,
``conj_neg``, ``dual_step``) run the same compiled code on numpy arrays: the math exists
once.

Conventions for the dual variable of one example (weight ``c > 0``): the dual term is
``-c phi*(-a/c, y)``; for the classification losses it is finite exactly when
``s = a y`` lies in ``[0, c]`` (the "box"). A row of weight ``c = 0`` contributes nothing and
its dual must be 0.

Adding a loss: a NamedTuple class decorated with ``_attach`` (the Python methods), four
``@njit`` functions ``(loss, ...)`` for value, derivative, ``phi*(-a)`` and the dual step,
and one :func:`register_loss` call with its :class:`LossSpec`; every kernel, the option checks
and ``auto`` then accept it (``tests/huber_loss.py`` is a complete example).
"""

import math
from typing import NamedTuple

import numpy as np
from numba import njit
from numba.extending import overload

__all__ = [
    "Squared",
    "Logistic",
    "SmoothHinge",
    "Hinge",
    "Offset",
    "with_offset",
    "loss_min_is_zero",
    "LOSSES",
    "LOSS_REGISTRY",
    "LossSpec",
    "register_loss",
    "make_loss",
    "loss_value",
    "loss_deriv",
    "loss_conj_neg",
    "loss_curv",
    "has_curv",
    "dual_step",
    "weighted_conj_neg",
]

# A dual point a few ulps outside its box (from rounding in alpha += delta) is read as the
# nearest feasible point, not as -inf dual; further out it is infeasible.
_DOMAIN_TOL = 1e-14
_LOG_HALF = -0.6931471805599453


# --------------------------------------------------------------------------------------
# Generic functions. In Python they call the loss's method; in Numba code the overloads
# below replace them at compile time by the implementation registered for the loss class.
# --------------------------------------------------------------------------------------


def loss_value(loss, z, y):
    """``phi(z, y)``: the loss of margin (prediction) ``z`` for label ``y``."""
    return loss.value(z, y)


def loss_deriv(loss, z, y):
    """``d phi(z, y) / dz`` (a subgradient where ``phi`` has a kink)."""
    return loss.deriv(z, y)


def loss_conj_neg(loss, a, y):
    """``phi*(-a, y)``, the conjugate at ``-a``; ``+inf`` outside its domain."""
    return loss.conj_neg(a, y)


def loss_curv(loss, z, y):
    """``d^2 phi(z, y) / dz^2`` (the generalized one where ``phi'`` has a kink): the proximal
    Newton steps of :mod:`ooc.kernels.rcd`. Numba only; a loss may not have it (:func:`has_curv`)."""
    raise NotImplementedError("loss_curv is for Numba kernels")


def has_curv(loss) -> bool:
    """Whether the loss registered a second derivative (:func:`register_loss`'s ``curv``)."""
    impls = _IMPLS.get(type(loss))
    return impls is not None and impls.get("curv") is not None


def dual_step(loss, a, z, y, q, c):
    r"""Prox-SDCA option I increment of one dual coordinate (Shalev-Shwartz & Zhang, Fig. 1).

    For example ``i`` with current dual ``a``, margin ``z = x_i . w``,
    ``q = ||x_i||^2 / (l2 n)`` (plus ``B^2 / (l2 n)`` with a bias feature) and weight ``c``,
    the dual objective restricted to ``a + d`` is, up to a constant and the factor ``1/n``,
    ``-c phi*(-(a + d)/c, y) - z d - q d^2 / 2`` (exact for pure L2, where ``g*`` is
    quadratic; a lower bound on the increase with L1, because ``g*`` is 1-smooth).
    Returns its maximiser ``d`` (``-a`` when ``c = 0``: such a row's dual must be 0).
    """
    return loss.dual_step(a, z, y, q, c)


_IMPLS = {}  # loss class -> {"value": njit fn(loss, z, y), ...}


def _register(cls, value, deriv, conj_neg, step, curv=None):
    _IMPLS[cls] = {"value": value, "deriv": deriv, "conj_neg": conj_neg, "step": step, "curv": curv}


def _impl(loss_type, what):
    impls = _IMPLS.get(getattr(loss_type, "instance_class", None))
    return None if impls is None else impls[what]


@overload(loss_value)
def _ol_loss_value(loss, z, y):
    fn = _impl(loss, "value")
    if fn is None:
        return None

    def impl(loss, z, y):
        return fn(loss, z, y)

    return impl


@overload(loss_deriv)
def _ol_loss_deriv(loss, z, y):
    fn = _impl(loss, "deriv")
    if fn is None:
        return None

    def impl(loss, z, y):
        return fn(loss, z, y)

    return impl


@overload(loss_curv)
def _ol_loss_curv(loss, z, y):
    fn = _impl(loss, "curv")
    if fn is None:
        return None

    def impl(loss, z, y):
        return fn(loss, z, y)

    return impl


@overload(loss_conj_neg)
def _ol_loss_conj_neg(loss, a, y):
    fn = _impl(loss, "conj_neg")
    if fn is None:
        return None

    def impl(loss, a, y):
        return fn(loss, a, y)

    return impl


@overload(dual_step)
def _ol_dual_step(loss, a, z, y, q, c):
    fn = _impl(loss, "step")
    if fn is None:
        return None

    def impl(loss, a, z, y, q, c):
        return fn(loss, a, z, y, q, c)

    return impl


@njit(cache=True, nogil=True)
def weighted_conj_neg(loss, a, y, c):
    """``c phi*(-a/c, y)``: the conjugate of the weighted loss ``c phi`` at ``-a``.

    For ``c = 0`` the weighted loss is identically 0, whose conjugate is 0 at 0 and
    ``+inf`` elsewhere.
    """
    if c > 0.0:
        return c * loss_conj_neg(loss, a / c, y)
    if a == 0.0:
        return 0.0
    return np.inf


# --------------------------------------------------------------------------------------
# Squared loss
# --------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _squared_value(loss, z, y):
    d = z - y
    return 0.5 * d * d


@njit(cache=True, nogil=True)
def _squared_deriv(loss, z, y):
    return z - y


@njit(cache=True, nogil=True)
def _squared_curv(loss, z, y):
    return 1.0


@njit(cache=True, nogil=True)
def _squared_conj_neg(loss, a, y):
    return 0.5 * a * a - a * y


@njit(cache=True, nogil=True)
def _squared_step(loss, a, z, y, q, c):
    if c <= 0.0:
        return -a
    # Stationarity of -(a+d)^2/(2c) + y(a+d) - z d - q d^2/2, multiplied through by c so
    # that small weights do not divide.
    return (c * (y - z) - a) / (1.0 + c * q)


# --------------------------------------------------------------------------------------
# Logistic loss
# --------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _logistic_value(loss, z, y):
    t = -y * z
    if t > 0.0:
        return t + math.log1p(math.exp(-t))
    return math.log1p(math.exp(t))


@njit(cache=True, nogil=True)
def _logistic_deriv(loss, z, y):
    m = y * z
    if m >= 0.0:
        e = math.exp(-m)
        return -y * e / (1.0 + e)
    return -y / (1.0 + math.exp(m))


@njit(cache=True, nogil=True)
def _logistic_curv(loss, z, y):
    # sigma(m) (1 - sigma(m)) with m = y z (y in {-1, +1}), without overflow
    e = math.exp(-abs(y * z))
    return e / ((1.0 + e) * (1.0 + e))


@njit(cache=True, nogil=True)
def _xlogx(p):
    if p <= 0.0:
        return 0.0
    return p * math.log(p)


@njit(cache=True, nogil=True)
def _logistic_conj_neg(loss, a, y):
    p = a * y
    if p < -_DOMAIN_TOL or p > 1.0 + _DOMAIN_TOL:
        return np.inf
    p = min(max(p, 0.0), 1.0)
    return _xlogx(p) + _xlogx(1.0 - p)


@njit(cache=True, nogil=True)
def _logit_root(m, Q, p0):
    """Root ``p`` in ``(0, 1/2]`` of ``logit(p) + m + Q (p - p0) = 0``.

    The caller guarantees the root is at most 1/2 (the left side is >= 0 at p = 1/2).
    Newton runs on the logit ``t = log(p / (1 - p)) <= 0``: there
    ``G(t) = t + m + Q (sigmoid(t) - p0)`` is increasing (``G' = 1 + Q p (1 - p) >= 1``) and
    convex for ``p <= 1/2``, so Newton started right of the root decreases monotonically to
    it, and started left of it lands right of it after one step (clamped at ``t = 0``). One
    ``exp`` per iteration; for tiny roots ``t ~ log p``, so ``p = sigmoid(t)`` keeps full
    relative precision, which is where the dual term ``p log p`` lives.

    Stopping: after a step ``s`` the new iterate is within
    ``~ max G'' s^2 / 2 <= 0.05 Q s^2`` of the root (bounded by ``0.1 Q s^2``) (``G'' = Q p (1-p)(1-2p) <= 0.0963 Q``, on
    either side of the root), so Newton stops as soon as that bound is below a few ulps of
    ``t``: the result is as exact as iterating until the steps vanish, one iteration sooner.
    """
    if p0 > 0.0 and p0 <= 0.5:
        t = math.log(p0) - math.log1p(-p0)  # warm start: late in training the step is small
    else:
        t = 0.0
    for it in range(100):
        e = math.exp(t)
        p = e / (1.0 + e)
        g = t + m + Q * (p - p0)
        dg = 1.0 + Q * p * (1.0 - p)
        step = g / dg
        # After the first step the iterates decrease; a step to the right is rounding noise.
        if it > 0 and step <= 0.0:
            break
        t_new = t - step
        if t_new > 0.0:
            t_new = 0.0
        tiny = 4e-16 * (1.0 + abs(t_new))
        done = abs(t_new - t) <= tiny or 0.1 * Q * step * step <= tiny
        t = t_new
        if done:
            break
    e = math.exp(t)
    return e / (1.0 + e)


@njit(cache=True, nogil=True)
def _logistic_step(loss, a, z, y, q, c):
    if c <= 0.0:
        return -a
    # In s = a y / c = p in [0, 1] the problem is  max -c[p log p + (1-p) log(1-p)]
    # - c m (p - p0) - q c^2 (p - p0)^2 / 2  with m = y z: stationarity is
    # logit(p) + m + Q (p - p0) = 0 with Q = q c. The map p -> 1 - p, m -> -m, p0 -> 1 - p0
    # leaves it unchanged, so always solve on the side p <= 1/2 where p is small and exact.
    p0 = a * y / c
    m = y * z
    Q = q * c
    if m + Q * (0.5 - p0) >= 0.0:
        p = _logit_root(m, Q, p0)
        a_new = y * (c * p)
    else:
        p = _logit_root(-m, Q, 1.0 - p0)
        a_new = y * (c - c * p)
    # Returning a_new - a (rather than c (p - p0)) makes a + delta land on the right side
    # of 0 after rounding, where the conjugate is finite.
    return a_new - a


# --------------------------------------------------------------------------------------
# Hinge and smooth hinge: a concave quadratic in s = a y on the box [0, c]
# --------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _box_step(a, z, y, q, c, gamma):
    if c <= 0.0:
        return -a
    s = a * y
    m = y * z
    den = gamma + c * q
    if den > 0.0:
        # Unconstrained maximiser of s' - gamma s'^2/(2c) - m (s' - s) - q (s' - s)^2/2.
        t = s + (c * (1.0 - m) - gamma * s) / den
    elif m < 1.0:  # hinge on an empty row: linear objective with slope 1 - m
        t = c
    elif m > 1.0:
        t = 0.0
    else:
        t = s
    # The objective is concave in s', so clipping the unconstrained maximiser is exact.
    if t < 0.0:
        t = 0.0
    elif t > c:
        t = c
    return y * t - a


@njit(cache=True, nogil=True)
def _hinge_value(loss, z, y):
    return max(0.0, 1.0 - y * z)


@njit(cache=True, nogil=True)
def _hinge_deriv(loss, z, y):
    if y * z < 1.0:
        return -y
    return 0.0


@njit(cache=True, nogil=True)
def _hinge_conj_neg(loss, a, y):
    p = a * y
    if p < -_DOMAIN_TOL or p > 1.0 + _DOMAIN_TOL:
        return np.inf
    return -min(max(p, 0.0), 1.0)


@njit(cache=True, nogil=True)
def _hinge_step(loss, a, z, y, q, c):
    return _box_step(a, z, y, q, c, 0.0)


@njit(cache=True, nogil=True)
def _smooth_hinge_value(loss, z, y):
    gamma = loss.gamma
    m = y * z
    if m >= 1.0:
        return 0.0
    if m <= 1.0 - gamma:
        return 1.0 - m - 0.5 * gamma
    r = 1.0 - m
    return r * r / (2.0 * gamma)


@njit(cache=True, nogil=True)
def _smooth_hinge_deriv(loss, z, y):
    gamma = loss.gamma
    m = y * z
    if m >= 1.0:
        return 0.0
    if m <= 1.0 - gamma:
        return -y
    return -y * (1.0 - m) / gamma


@njit(cache=True, nogil=True)
def _smooth_hinge_curv(loss, z, y):
    m = y * z
    if m >= 1.0 or m <= 1.0 - loss.gamma:
        return 0.0
    return 1.0 / loss.gamma


@njit(cache=True, nogil=True)
def _smooth_hinge_conj_neg(loss, a, y):
    p = a * y
    if p < -_DOMAIN_TOL or p > 1.0 + _DOMAIN_TOL:
        return np.inf
    p = min(max(p, 0.0), 1.0)
    return -p + 0.5 * loss.gamma * p * p


@njit(cache=True, nogil=True)
def _smooth_hinge_step(loss, a, z, y, q, c):
    return _box_step(a, z, y, q, c, loss.gamma)


# --------------------------------------------------------------------------------------
# Array drivers behind the Python methods (one compiled specialization per loss class)
# --------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _value_many(loss, z, y, out):
    for i in range(out.shape[0]):
        out[i] = loss_value(loss, z[i], y[i])


@njit(cache=True, nogil=True)
def _deriv_many(loss, z, y, out):
    for i in range(out.shape[0]):
        out[i] = loss_deriv(loss, z[i], y[i])


@njit(cache=True, nogil=True)
def _conj_neg_many(loss, a, y, out):
    for i in range(out.shape[0]):
        out[i] = loss_conj_neg(loss, a[i], y[i])


@njit(cache=True, nogil=True)
def _weighted_conj_neg_many(loss, a, y, c, out):
    for i in range(out.shape[0]):
        out[i] = weighted_conj_neg(loss, a[i], y[i], c[i])


@njit(cache=True, nogil=True)
def _dual_step_many(loss, a, z, y, q, c, out):
    for i in range(out.shape[0]):
        out[i] = dual_step(loss, a[i], z[i], y[i], q[i], c[i])


def _apply(driver, loss, *args):
    arrays = np.broadcast_arrays(*[np.asarray(x, dtype=np.float64) for x in args])
    shape = arrays[0].shape
    flat = [np.ascontiguousarray(x).reshape(-1) for x in arrays]
    out = np.empty(flat[0].shape[0], dtype=np.float64)
    driver(loss, *flat, out)
    if shape == ():
        return float(out[0])
    return out.reshape(shape)


class _Methods:
    """Python methods shared by every loss class (NamedTuple forbids mixins)."""

    def value(self, z, y):
        r"""Loss ``phi(z, y)`` for margins ``z`` and labels ``y`` (arrays broadcast)."""
        return _apply(_value_many, self, z, y)

    def deriv(self, z, y):
        r"""Derivative ``d phi(z, y) / dz``."""
        return _apply(_deriv_many, self, z, y)

    def conj_neg(self, a, y):
        r"""``phi*(-a, y)``, ``+inf`` outside the domain (the dual term of one example)."""
        return _apply(_conj_neg_many, self, a, y)

    def conjugate(self, u, y):
        r"""Convex conjugate ``phi*(u, y) = sup_z [u z - phi(z, y)]``; ``+inf`` off domain."""
        return _apply(_conj_neg_many, self, -np.asarray(u, dtype=np.float64), y)

    def weighted_conj_neg(self, a, y, c):
        r"""``c phi*(-a/c, y)``, the conjugate of the weighted loss ``c phi`` at ``-a``."""
        return _apply(_weighted_conj_neg_many, self, a, y, c)

    def dual_step(self, a, z, y, q, c=1.0):
        r"""Prox-SDCA option I increment ``delta`` of one dual coordinate.

        ``delta`` maximises ``-c phi*(-(a + delta)/c, y) - z delta - q delta^2 / 2`` where
        ``z = x_i . w`` and ``q = ||x_i||^2 / (l2 n)``; ``delta = -a`` when ``c = 0``.
        """
        return _apply(_dual_step_many, self, a, z, y, q, c)

    @property
    def is_smooth(self):
        """Whether ``phi`` has a Lipschitz derivative (``smoothness`` finite)."""
        return math.isfinite(self.smoothness)


def _attach(cls):
    for name, member in vars(_Methods).items():
        if not name.startswith("__"):
            setattr(cls, name, member)
    return cls


@_attach
class Squared(NamedTuple):
    r"""Squared loss for regression: ``phi(z, y) = (z - y)^2 / 2``, ``y`` real.

    Derivative ``z - y``; 1-smooth. Conjugate
    ``phi*(u, y) = sup_z [u z - (z - y)^2/2] = u^2/2 + y u`` (all ``u``), so the dual term
    of an example is ``-c phi*(-a/c, y) = y a - a^2 / (2c)``.

    Dual step (option I): the maximiser of
    ``y (a+d) - (a+d)^2/(2c) - z d - q d^2/2`` is
    ``d = (c (y - z) - a) / (1 + c q)``.

    (The ridge section of Shalev-Shwartz & Zhang prints ``1 + ||x||^2/(2 lambda n)`` in the
    denominator; the correct factor, checked against a brute-force maximisation in the
    contract tests, is ``1 + ||x||^2/(lambda n)``.)
    """

    name = "squared"
    is_classification = False
    smoothness = 1.0


@_attach
class Logistic(NamedTuple):
    r"""Logistic loss ``phi(z, y) = log(1 + exp(-y z))``, labels ``y`` in {-1, +1}.

    Derivative ``-y / (1 + exp(y z))``; ``phi'' <= 1/4`` so it is 1/4-smooth. With
    ``p = -u y``, the conjugate is
    ``phi*(u, y) = p log p + (1 - p) log(1 - p)`` for ``p`` in ``[0, 1]`` and ``+inf``
    otherwise, i.e. ``phi*(-a, y)`` is the negative binary entropy of ``a y``.

    Dual step (option I): with ``p = (a + d) y / c``, ``p0 = a y / c``, ``m = y z`` and
    ``Q = q c``, the maximiser solves ``log(p / (1 - p)) + m + Q (p - p0) = 0`` on
    ``(0, 1)``. No closed form: Newton on ``log p`` (on ``log(1 - p)`` when the root is
    above 1/2), which converges monotonically to machine precision, typically in 2-5
    iterations, and keeps ``p`` strictly inside ``(0, 1)`` except when it underflows.
    """

    name = "logistic"
    is_classification = True
    smoothness = 0.25


@_attach
class SmoothHinge(NamedTuple):
    r"""Smooth hinge loss with parameter ``gamma > 0`` (Shalev-Shwartz & Zhang, eq. 9).

    With ``m = y z``: ``phi = 0`` if ``m >= 1``; ``1 - m - gamma/2`` if ``m <= 1 - gamma``;
    ``(1 - m)^2 / (2 gamma)`` otherwise. It is ``1/gamma``-smooth and
    ``hinge - gamma/2 <= phi <= hinge``. Conjugate: with ``p = -u y``,
    ``phi*(u, y) = -p + gamma p^2 / 2`` for ``p`` in ``[0, 1]``, ``+inf`` otherwise.

    Dual step (option I): in ``s = a y`` (box ``[0, c]``) the objective
    ``s' - gamma s'^2/(2c) - m (s' - s) - q (s' - s)^2 / 2`` is a concave quadratic, so
    ``s' = clip(s + (c (1 - m) - gamma s) / (gamma + c q), 0, c)`` and ``d = y (s' - s)``.
    """

    gamma: float = 1.0

    name = "smooth-hinge"
    is_classification = True

    @property
    def smoothness(self):
        """``1 / gamma``."""
        return 1.0 / self.gamma


@_attach
class Hinge(NamedTuple):
    r"""Hinge loss ``phi(z, y) = max(0, 1 - y z)`` (the SVM), labels in {-1, +1}.

    Not smooth (subgradient ``-y`` for ``y z < 1``, else 0). Conjugate: with ``p = -u y``,
    ``phi*(u, y) = -p`` for ``p`` in ``[0, 1]``, ``+inf`` otherwise; the dual term of an
    example is ``a y`` on the box ``a y`` in ``[0, c]`` (LIBLINEAR's L1-loss SVM dual).

    Dual step (option I): the smooth hinge step with ``gamma = 0``,
    ``s' = clip(s + (1 - m) / q, 0, c)``; for an empty row (``q = 0``) the objective is
    linear and ``s'`` goes to the end of the box that its slope ``1 - m`` points to.
    """

    name = "hinge"
    is_classification = True
    smoothness = math.inf


class LossSpec(NamedTuple):
    """A loss as the options know it: its command-line name, class and what it offers.

    Attributes
    ----------
    name : str
        The ``--loss`` value.
    cls : type
        The loss class (a NamedTuple of its parameters, see above).
    params : tuple of str
        Training options that are parameters of the loss (``("gamma",)`` for the smooth hinge).
    smooth : bool
        Whether the derivative is Lipschitz (primal coordinate descent and dspdc need it).
    classification : bool
        Labels in {-1, +1} (or classes); False for regression labels.
    proba : bool
        Margins map to class probabilities (the sigmoid of the logistic loss).
    multiclass_hinge : bool
        Has a Crammer-Singer (max-of-hinge) multiclass form.
    """

    name: str
    cls: type
    params: tuple
    smooth: bool
    classification: bool
    proba: bool
    multiclass_hinge: bool


#: Every loss, in the order the command line lists them: the only place their names are spelled
#: (besides the classes' own ``name``). :func:`register_loss` adds to it.
LOSS_REGISTRY: dict = {}
#: The loss classes by name (what :func:`make_loss` builds), kept by :func:`register_loss`.
LOSSES: dict = {}


def register_loss(spec: LossSpec, value, deriv, conj_neg, step, curv=None) -> LossSpec:
    """Make a loss known to every kernel and every option check.

    Parameters
    ----------
    spec : LossSpec
        Its name, class (a NamedTuple of its parameters, decorated with ``_attach`` for the
        Python methods) and what it offers.
    value, deriv, conj_neg, step : njit functions
        ``(loss, z, y) -> phi(z, y)``, ``(loss, z, y) -> phi'(z, y)``,
        ``(loss, a, y) -> phi*(-a, y)`` and the dual step ``(loss, a, z, y, q, c) -> delta``
        (see :func:`dual_step`); the kernels reach them through the generic functions,
        resolved on the loss class at compile time.
    curv : njit function, optional
        ``(loss, z, y) -> phi''(z, y)`` (:func:`loss_curv`): with it, rcd-primal's working
        sets take proximal Newton steps; without, prox-CD steps.
    """
    _register(spec.cls, value, deriv, conj_neg, step, curv)
    LOSS_REGISTRY[spec.name] = spec
    LOSSES[spec.name] = spec.cls
    return spec


register_loss(LossSpec(Logistic.name, Logistic, (), True, True, True, False),
              _logistic_value, _logistic_deriv, _logistic_conj_neg, _logistic_step, _logistic_curv)
register_loss(LossSpec(Squared.name, Squared, (), True, False, False, False),
              _squared_value, _squared_deriv, _squared_conj_neg, _squared_step, _squared_curv)
register_loss(LossSpec(SmoothHinge.name, SmoothHinge, ("gamma",), True, True, False, True),
              _smooth_hinge_value, _smooth_hinge_deriv, _smooth_hinge_conj_neg, _smooth_hinge_step,
              _smooth_hinge_curv)
register_loss(LossSpec(Hinge.name, Hinge, (), False, True, False, True),
              _hinge_value, _hinge_deriv, _hinge_conj_neg, _hinge_step)
@_attach
class Offset(NamedTuple):
    r"""A loss of the margin shifted by a fixed intercept: ``phi_b(z, y) = phi(z + b, y)``.

    How an unregularized intercept (``--fit-intercept``) reaches the kernels without a change
    to any of them: the solver holds ``b`` fixed during a pass and hands the kernels
    ``Offset(loss, b)`` (:mod:`ooc.solvers.intercept`). Its conjugate is
    ``phi_b*(u, y) = phi*(u, y) - b u``, so the dual term of an example is
    ``-c phi*(-a/c, y) - b a`` and the Prox-SDCA step is the inner loss's step at margin
    ``z + b`` (the ``-b a`` term is linear in ``a``: it only shifts the margin). Not a
    ``--loss`` choice; one compiled specialization per inner loss class.
    """

    loss: tuple
    b: float

    name = "offset"

    @property
    def is_classification(self):
        return self.loss.is_classification

    @property
    def smoothness(self):
        return self.loss.smoothness


@njit(cache=True, nogil=True)
def _offset_value(loss, z, y):
    return loss_value(loss.loss, z + loss.b, y)


@njit(cache=True, nogil=True)
def _offset_deriv(loss, z, y):
    return loss_deriv(loss.loss, z + loss.b, y)


@njit(cache=True, nogil=True)
def _offset_curv(loss, z, y):
    return loss_curv(loss.loss, z + loss.b, y)


@njit(cache=True, nogil=True)
def _offset_conj_neg(loss, a, y):
    return loss_conj_neg(loss.loss, a, y) + loss.b * a


@njit(cache=True, nogil=True)
def _offset_step(loss, a, z, y, q, c):
    return dual_step(loss.loss, a, z + loss.b, y, q, c)


# not in LOSS_REGISTRY: an intercept is an option of every loss, not a loss of its own
_register(Offset, _offset_value, _offset_deriv, _offset_conj_neg, _offset_step, _offset_curv)


def loss_min_is_zero(loss, label_kind: str) -> bool:
    """Whether ``phi*(0, y) = -min_z phi(z, y)`` is 0 for the labels of ``label_kind`` (checked on a
    few ``y``: -1/+1, or regression values): every built-in loss; a registered one may not be."""
    ys = (-3.5, -1.0, 0.0, 0.25, 1.0, 7.0) if label_kind == "regression" else (-1.0, 1.0)
    return all(abs(float(loss_conj_neg(loss, 0.0, y))) <= 1e-12 for y in ys)


def with_offset(loss, b: float):
    """``loss`` with its margins shifted by ``b`` (:class:`Offset`; a float, one specialization)."""
    return Offset(loss, float(b))


#: ``--loss`` choices of the command line (the built-in losses).
LOSS_NAMES = tuple(LOSS_REGISTRY)
#: The losses of classification and of regression labels (the estimators' choices).
CLASSIFICATION_LOSSES = tuple(n for n, s in LOSS_REGISTRY.items() if s.classification)
REGRESSION_LOSSES = tuple(n for n, s in LOSS_REGISTRY.items() if not s.classification)


def loss_spec(name: str) -> LossSpec:
    """The :class:`LossSpec` of a ``--loss`` name (``ValueError`` naming the choices if unknown)."""
    spec = LOSS_REGISTRY.get(name)
    if spec is None:
        raise ValueError(f"--loss {name!r}: expected one of {', '.join(LOSS_REGISTRY)}")
    return spec


def make_loss(name, gamma=1.0):
    """Build a loss from its command-line name.

    Parameters
    ----------
    name : {"squared", "logistic", "smooth-hinge", "hinge"}
        ``"smooth_hinge"`` is accepted too.
    gamma : float, default 1.0
        Smoothing parameter of the smooth hinge (``> 0``); ignored by the other losses.

    Returns
    -------
    Squared | Logistic | SmoothHinge | Hinge
        Parameters are stored as Python floats, so Numba compiles one specialization per
        loss class whatever numeric type the caller passed.
    """
    key = str(name).strip().lower().replace("_", "-")
    if key not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; expected one of {sorted(LOSSES)}")
    if "gamma" in LOSS_REGISTRY[key].params:
        gamma = float(gamma)
        if not (gamma > 0.0 and math.isfinite(gamma)):
            raise ValueError(f"{key} needs a finite gamma > 0, got {gamma!r}")
        return LOSSES[key](gamma)
    return LOSSES[key]()

