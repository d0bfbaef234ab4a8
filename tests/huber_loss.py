r"""A loss added from outside the package, the way docs/extending.rst says: one file.

Huber loss of the residual ``r = z - y`` (robust regression), threshold ``delta``::

    phi(z, y) = r^2 / 2               if |r| <= delta
              = delta (|r| - delta/2)  otherwise

1-smooth (``phi'' <= 1``). Conjugate: with ``h`` the Huber function, ``h*(s) = s^2 / 2`` on
``|s| <= delta`` (``+inf`` outside), and ``phi(z, y) = h(z - y)`` gives
``phi*(u, y) = u y + h*(u)``, so ``phi*(-a, y) = a^2/2 - a y`` for ``|a| <= delta``.

Dual step (option I): maximise over ``d`` the concave quadratic
``-c phi*(-(a+d)/c, y) - z d - q d^2/2 = (a+d) y - (a+d)^2/(2c) - z d - q d^2/2`` on the
interval ``|a + d| <= c delta``: the stationary point ``d = (c (y - z) - a) / (1 + c q)``
(the squared loss's step) clipped to the interval is the exact maximiser.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ooc.objectives.losses import LossSpec, _attach, register_loss

DELTA_TOL = 1e-14  # a dual a few ulps outside the interval is read as on its edge


@njit(cache=True, nogil=True)
def _value(loss, z, y):
    r = z - y
    ar = abs(r)
    if ar <= loss.delta:
        return 0.5 * r * r
    return loss.delta * (ar - 0.5 * loss.delta)


@njit(cache=True, nogil=True)
def _deriv(loss, z, y):
    r = z - y
    return min(max(r, -loss.delta), loss.delta)


@njit(cache=True, nogil=True)
def _conj_neg(loss, a, y):
    if abs(a) > loss.delta * (1.0 + DELTA_TOL):
        return np.inf
    return 0.5 * a * a - a * y


@njit(cache=True, nogil=True)
def _step(loss, a, z, y, q, c):
    if c <= 0.0:
        return -a
    d = (c * (y - z) - a) / (1.0 + c * q)
    hi = c * loss.delta
    return min(max(a + d, -hi), hi) - a


@_attach
class Huber(NamedTuple):
    """Huber loss with threshold ``delta`` (see the module docstring)."""

    delta: float = 1.0
    name = "huber"
    is_classification = False
    smoothness = 1.0


SPEC = register_loss(LossSpec(Huber.name, Huber, (), True, False, False, False), _value, _deriv, _conj_neg, _step)
