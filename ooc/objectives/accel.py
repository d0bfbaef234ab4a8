r"""The pure-math pieces of accelerated Prox-SDCA (Shalev-Shwartz & Zhang, Fig. 2).

Problem ``P(w) = 1/n sum_i phi_i(x_i . w) + lambda g(w)`` with ``lambda g(w) = l2/2 ||w||^2
+ l1 ||w||_1`` (so ``lambda = l2``), each ``phi_i`` ``1/gamma``-smooth (``phi'``
``1/gamma``-Lipschitz: ``gamma = 1/loss.smoothness``; 4 for logistic, 1 for squared, the
smooth hinge's ``gamma``, ``gamma / k`` for the smooth Crammer-Singer loss) and
``R^2 = max_i ||x_i||^2`` (with the bias feature's ``B^2`` added).

Parameters (Fig. 2; checked against the proof of Theorem 3, which uses
``eta^-2 - 1 = 2 kappa / lambda``)::

    accelerate only if R^2 / (gamma lambda) > 10 n     (else plain Prox-SDCA)
    kappa = R^2 / (gamma n) - lambda,   mu = lambda / 2,   rho = mu + kappa,
    eta = sqrt(mu / rho),               beta = (1 - eta) / (1 + eta)

so the inner problems have ``lambda~ = lambda + kappa = R^2 / (gamma n)``: condition
number ``R^2 / (gamma lambda~) = n``, i.e. Prox-SDCA converges in O(n log) steps each.

Outer iteration ``t = 2, 3, ...``: with the center ``y(t-1)`` (``y(1) = w(1) = 0``,
``alpha(1) = 0``), run Prox-SDCA warm-started at ``alpha(t-1)`` on::

    P~_t(w) = P(w) + kappa/2 ||w - y||^2
            = 1/n sum_i phi_i(x_i . w) + lambda~ g~(w) + kappa/2 ||y||^2
    g~(w)   = 1/2 ||w||^2 + (l1/lambda~) ||w||_1 - <w, u>,     u = kappa y / lambda~

to accuracy ``eta / (2 (1 + eta^-2)) xi_{t-1}``, then ``y(t) = w(t) + beta (w(t) - w(t-1))``
and ``xi_t = (1 - eta/2)^(t-1) xi_1`` with ``xi_1 = (1 + eta^-2) (P(0) - D(0))``. Stop when
``t >= 1 + 2/eta log(xi_1 / eps)`` or ``(1 + rho/mu) eps_t + rho kappa/(2 mu)
||w(t) - y(t-1)||^2 <= eps`` (``eps_t`` the inner gap reached).

Reusing the binary (or Crammer-Singer) kernels for the inner problem. Since
``g~*(v) = g*_{l1/lambda~}(v + u)`` (the elastic-net conjugate of ``ooc.objectives.penalties``
at a shifted point), ``grad g~*(v) = soft_threshold(v + u, l1/lambda~)``. So keep the
*shifted* dual point::

    v~ = u + 1/(lambda~ n) sum_i alpha_i x_i = kappa/lambda~ y + 1/(lambda~ n) sum_i alpha_i x_i
    w  = soft_threshold(v~, l1 / lambda~)            (the bias entry: w_d = v~_d)

and run :func:`ooc.kernels.sdca.sdca_pass` unchanged with ``l2 = lambda~``, ``l1 = l1``
and ``v = v~``: its step reads ``z = x_i . w`` and ``q = ||x_i||^2 / (lambda~ n)`` and
adds ``d x_i / (lambda~ n)`` to ``v~``, which is exactly Prox-SDCA option I on ``P~_t``.
Between outer iterations ``lambda~`` is fixed and only the center moves:
``v~ += kappa/lambda~ (y(t) - y(t-1))`` (:func:`ooc.kernels.accel.recenter_v`). From a
plain state ``v = 1/(l2 n) sum alpha_i x_i``: ``v~ = kappa/lambda~ y + l2/lambda~ v``
(:func:`enter_shifted`); back: ``v = (lambda~ v~ - kappa y) / l2`` (:func:`exit_shifted`).
The duals are feasible for both problems (the loss part is unchanged), so the plain gap
of the current ``alpha`` is available at any time. (The pure-Python outer loop pieces named here,
``enter_shifted``, ``shifted_gap_from_sums``, ..., are the tests' reference: tests/reference_gap.py.)

Non-smooth losses (Sec. 3.3): replace ``phi`` by its smoothing with ``gamma`` (hinge ->
smooth hinge, max-of-hinge -> smooth max-of-hinge); ``0 <= phi - phi_gamma <= gamma L^2/2``,
so an ``eps/2``-accurate solution of the smoothed problem with ``gamma = eps / L^2`` is
``eps``-accurate for the original (:func:`smoothing_gamma`; ``L = 1`` for both hinges).
"""

import math
from typing import NamedTuple

__all__ = ["AccelParams", "accel_params"]

# Fig. 2 accelerates only when the condition number exceeds this many times n.
ACCEL_THRESHOLD = 10.0


class AccelParams(NamedTuple):
    """Constants of the outer loop of accelerated Prox-SDCA (Fig. 2).

    ``accelerate = False`` means plain Prox-SDCA (``R^2/(gamma lambda) <= 10 n``); then
    ``kappa = 0``, ``eta = 1``, ``beta = 0`` and ``l2_inner = l2``.
    """

    accelerate: bool
    kappa: float
    mu: float
    rho: float
    eta: float
    beta: float
    l2_inner: float
    condition: float  # R^2 / (gamma lambda n)


def accel_params(R2, gamma, l2, n, threshold=ACCEL_THRESHOLD):
    r"""Fig. 2's ``kappa, mu, rho, eta, beta`` and the fallback test.

    Parameters
    ----------
    R2 : float
        ``max_i ||x_i||^2`` (plus ``B^2`` with a bias feature).
    gamma : float
        Smoothness of the loss: ``phi'`` is ``1/gamma``-Lipschitz. ``> 0``.
    l2 : float
        ``lambda``, the strong convexity of the penalty (``> 0``).
    n : int
        Number of examples.
    threshold : float, default 10
        Accelerate only if ``R2 / (gamma l2) > threshold * n``.

    Returns
    -------
    AccelParams
    """
    R2, gamma, l2, n = float(R2), float(gamma), float(l2), float(n)
    if not (gamma > 0.0 and l2 > 0.0 and n > 0.0 and R2 >= 0.0):
        raise ValueError(
            f"accel_params needs R2 >= 0, gamma > 0, l2 > 0, n > 0 (got {R2}, {gamma}, {l2}, {n})"
        )
    condition = R2 / (gamma * l2 * n)
    mu = 0.5 * l2
    if not condition > threshold:
        return AccelParams(False, 0.0, mu, mu, 1.0, 0.0, l2, condition)
    kappa = R2 / (gamma * n) - l2
    rho = mu + kappa
    eta = math.sqrt(mu / rho)
    beta = (1.0 - eta) / (1.0 + eta)
    return AccelParams(True, kappa, mu, rho, eta, beta, l2 + kappa, condition)
