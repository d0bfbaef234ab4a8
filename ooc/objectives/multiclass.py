r"""The (smooth) multiclass max-of-hinge loss of Crammer & Singer, with vector duals.

Problem, for ``k`` classes, examples ``x_i`` in ``R^d`` with class index ``y_i`` in
``{0, ..., k-1}`` and weights ``c_i >= 0``::

    P(W) = 1/n sum_i c_i phi(W x_i, y_i) + l2/2 ||W||_F^2 + l1 ||W||_1          W: (k, d)

    phi(z, y) = max_{b in S} [ sum_{j != y} b_j (1 + z_j - z_y) - gamma/2 ||b||^2 ]
    S = {b in R^k_+ : sum_j b_j <= 1}

For ``gamma = 0`` this is ``max(0, max_{j != y} 1 + z_j - z_y)``, the Crammer-Singer loss;
for ``gamma > 0`` it is its smoothing by ``gamma/2 ||b||^2`` on the conjugate side
(Shalev-Shwartz & Zhang, Sec. 5.1 eq. 13 and Sec. 3.3):
``phi_0 - gamma/2 <= phi_gamma <= phi_0``. The maximiser is
``b = Proj_S(m / gamma)`` with ``m_j = 1 + z_j - z_y`` (``m_y`` set to 0), and
``grad_z phi = b - (sum_j b_j) e_y``.

Conjugate. Write ``phi(z) = psi(A z)`` with ``A z = z - z_y 1``; since
``A^T b = b - (sum_j b_j) e_y``, ``phi*(u) = min {psi*(b) : A^T b = u}``, which gives::

    phi*(u, y) = gamma/2 sum_{j != y} u_j^2 + u_y     if  u_j >= 0 (j != y), sum_j u_j = 0,
                                                       and -u_y = sum_{j != y} u_j <= 1
               = +inf                                  otherwise.

Dual problem (vector duals ``alpha_i`` in ``R^k``, Prox-SDCA with ``g(W) = 1/2 ||W||_F^2 +
(l1/l2) ||W||_1``)::

    D(alpha) = 1/n sum_i [ alpha_{i,y_i} - gamma / (2 c_i) sum_{j != y_i} alpha_{ij}^2 ]
               - l2 g*(V)

    V = 1/(l2 n) sum_i alpha_i x_i^T,    W = grad g*(V) = soft_threshold(V, l1/l2)
    g*(V) = 1/2 ||soft_threshold(V, l1/l2)||_F^2

    feasible set of alpha_i:  alpha_{ij} <= 0 (j != y_i),  sum_j alpha_{ij} = 0,
                              alpha_{i,y_i} = -sum_{j != y_i} alpha_{ij} <= c_i

i.e. ``b_i = -alpha_i`` off the true class lies in the simplex ``c_i S`` and the true class
carries the total mass (the dual term is ``-c_i phi*(-alpha_i / c_i, y_i)``). With
``gamma = 0`` and ``l1 = 0`` this is Crammer & Singer's dual with ``C = c_i / (l2 n)``.
``alpha_i = 0`` is feasible; a row with ``c_i = 0`` must have ``alpha_i = 0``.

Per-example step (Prox-SDCA option I). With ``z = W x_i`` (the current scores),
``q = ||x_i||^2 / (l2 n)`` and ``Delta = alpha_i' - alpha_i``, maximise over the feasible
``alpha_i'`` the model (a lower bound on the dual increase with L1, exact with pure L2)::

    alpha'_y - gamma/(2c) sum_{j != y} alpha'_j^2 - z . Delta - q/2 ||Delta||^2

Substituting ``b_j = -alpha'_j`` (``j != y``), ``s = sum_j b_j = alpha'_y`` turns it into
(Sec. 5.7, eq. 22 of the paper, generalised to weights)::

    min_{b >= 0, s = sum b <= c}  ||b - mu||^2 + C s^2
    A  = gamma / c + q,     C = q / A,
    mu_j = (1 + z_j - z_y + q (alpha_y - alpha_j)) / A      (j != y; mu_y := 0)

whose KKT conditions give ``b = (mu - theta)_+`` with ``theta = max(theta_C, theta_S)``:
``theta_C`` the root of ``theta = C sum_j (mu_j - theta)_+`` (no active cap) and
``theta_S`` the threshold of the Euclidean projection of ``mu`` onto ``c S`` (the
projection of Sec. 5.1, the cap active). Both come from one sort of the positive ``mu_j``,
O(k log k). Writing ``mu`` with the current ``alpha`` folded in is the paper's
``W_hat = W - x_i alpha_i^T / (l2 n)``.

Garbled in the paper (checked numerically, ``tests/test_multiclass_math.py``):

* Sec. 5.7 writes ``X_i alpha_i = vec(x_i (alpha_i - ||alpha_i||_1 e_{y_i})^T)``; with
  ``-alpha_i`` in ``S`` the sign is ``+||alpha_i||_1``. The next line,
  ``||X_i alpha_i||^2 = ||x_i||^2 (||alpha_i||_2^2 + ||alpha_i||_1^2)``, is right.
* ``OptimizeDual``'s fallback branch ("let j be the minimal index s.t. z_j = 1",
  threshold ``(mu_bar_j - 1)/j``) is off by one: the projection onto ``sum b = 1`` has
  ``j - 1`` active entries, threshold ``(mu_bar_{j-1} - 1)/(j - 1)``. As printed it
  returns a point with ``sum b > 1``, outside ``S`` (e.g. ``mu = (1.99, 0.19, 0)``,
  ``C = 0.99`` gives ``b = (1.40, 0, 0)`` instead of ``(1, 0, 0)``).

Smoothness: ``phi_gamma`` is ``1/gamma``-smooth in the margin differences ``A z`` but
``||A||^2 = k``, so it is ``k/gamma``-smooth in ``z`` (:meth:`MulticlassHinge.smoothness_for`):
accelerated Prox-SDCA on ``W`` must use ``gamma / k`` as its ``gamma`` with
``R = max_i ||x_i||``.

The kernels are in :mod:`ooc.kernels.multiclass` (the gap streamed over blocks:
the test reference ``cs_duality_gap``); the functions here that take a
``loss`` are ``@njit`` and dispatch on the loss class like :mod:`ooc.objectives.losses`
(one class today; a soft-max-of-hinge would register its own).
"""

import math
from typing import NamedTuple

import numpy as np
from numba import njit
from numba.extending import overload

from ooc.objectives.penalties import require_l2, soft_threshold

__all__ = [
    "MulticlassHinge",
    "make_multiclass_loss",
    "simplex_threshold",
    "mc_loss_value",
    "mc_loss_grad",
    "mc_dual_term",
    "mc_dual_step",
    "ovr_labels",
    "class_indices",
    "cs_grad_conj",
    "cs_penalty_value",
    "cs_conj_value",
]

# Feasibility slack of a dual vector, relative to its weight c: alpha_y = sum_j b_j is a
# sum of k terms, so it may exceed c by a few ulps of c.
_DOMAIN_RTOL = 1e-12


# --------------------------------------------------------------------------------------
# Generic functions dispatched on the loss class (see ooc.objectives.losses)
# --------------------------------------------------------------------------------------


def mc_loss_value(loss, z, y, work):
    """``phi(z, y)`` for a score vector ``z`` (k,) and class index ``y``.

    ``work`` is float64 scratch of length >= k (the projection sorts in it).
    """
    return _IMPLS[type(loss)]["value"](loss, z, y, work)


def mc_loss_grad(loss, z, y, work, out):
    """Write ``grad_z phi(z, y)`` (a subgradient for ``gamma = 0``) into ``out`` (k,)."""
    _IMPLS[type(loss)]["grad"](loss, z, y, work, out)


def mc_dual_term(loss, alpha, y, c):
    """``-c phi*(-alpha / c, y)``: one example's term of ``n D``; ``-inf`` if infeasible."""
    return _IMPLS[type(loss)]["dual_term"](loss, alpha, y, c)


def mc_dual_step(loss, alpha, z, y, q, c, work, out):
    """Write into ``out`` (k,) the option I maximiser ``alpha'`` (the new dual, not the step).

    See the module docstring; ``q = ||x_i||^2 / (l2 n)``; ``work`` is scratch of length k.
    """
    _IMPLS[type(loss)]["step"](loss, alpha, z, y, q, c, work, out)


_IMPLS = {}


def _register(cls, value, grad, dual_term, step):
    _IMPLS[cls] = {"value": value, "grad": grad, "dual_term": dual_term, "step": step}


def _impl(loss_type, what):
    impls = _IMPLS.get(getattr(loss_type, "instance_class", None))
    return None if impls is None else impls[what]


@overload(mc_loss_value)
def _ol_value(loss, z, y, work):
    fn = _impl(loss, "value")
    if fn is None:
        return None

    def impl(loss, z, y, work):
        return fn(loss, z, y, work)

    return impl


@overload(mc_loss_grad)
def _ol_grad(loss, z, y, work, out):
    fn = _impl(loss, "grad")
    if fn is None:
        return None

    def impl(loss, z, y, work, out):
        fn(loss, z, y, work, out)

    return impl


@overload(mc_dual_term)
def _ol_dual_term(loss, alpha, y, c):
    fn = _impl(loss, "dual_term")
    if fn is None:
        return None

    def impl(loss, alpha, y, c):
        return fn(loss, alpha, y, c)

    return impl


@overload(mc_dual_step)
def _ol_step(loss, alpha, z, y, q, c, work, out):
    fn = _impl(loss, "step")
    if fn is None:
        return None

    def impl(loss, alpha, z, y, q, c, work, out):
        fn(loss, alpha, z, y, q, c, work, out)

    return impl


# --------------------------------------------------------------------------------------
# Thresholds of simplex-type projections
# --------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def simplex_threshold(u, C, cap):
    r"""Threshold ``theta >= 0`` with ``b = (u - theta)_+`` solving the capped shrinkage QP.

    ``min_{b >= 0} ||b - u||^2 + C (sum b)^2  s.t.  sum b <= cap``  (``C >= 0``,
    ``cap > 0``; ``C = 0`` is the Euclidean projection onto ``cap S``,
    ``S = {b >= 0, sum b <= 1}``).

    Parameters
    ----------
    u : float64 array
        The strictly positive entries of the point (the others stay 0 whatever ``theta``);
        **sorted in place** (ascending).
    C, cap : float

    Returns
    -------
    float
        ``max(theta_C, theta_S)``: ``theta_C`` is the root of
        ``theta = C sum (u - theta)_+`` (``theta_C = C S_j / (1 + j C)`` with ``j`` the
        number of entries above it and ``S_j`` their sum), ``theta_S`` is 0 if
        ``sum u <= cap`` and else the threshold of the projection onto
        ``{sum b = cap}``, ``(S_j - cap) / j``. Entry ``j`` (descending) is above a
        threshold of either kind exactly for ``j`` up to some ``j*``, so each is read off
        at the last ``j`` whose candidate lies below ``u_j``.
    """
    p = u.shape[0]
    if p == 0:
        return 0.0
    u.sort()
    total = 0.0
    for t in range(p):
        total += u[t]
    capped = total > cap
    theta_c = 0.0
    theta_s = 0.0
    partial = 0.0
    for t in range(p):
        val = u[p - 1 - t]
        j = t + 1.0
        partial += val
        if C > 0.0:
            cand = C * partial / (1.0 + j * C)
            if val > cand:
                theta_c = cand
        if capped:
            cand = (partial - cap) / j
            if val > cand:
                theta_s = cand
    return max(theta_c, theta_s)


# --------------------------------------------------------------------------------------
# Smooth max-of-hinge (Crammer-Singer)
# --------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _cs_project_margins(loss, z, y, work):
    """``theta`` and ``1/gamma`` of ``b = (m / gamma - theta)_+ = Proj_S(m / gamma)``."""
    k = z.shape[0]
    inv_g = 1.0 / loss.gamma
    zy = z[y]
    p = 0
    for j in range(k):
        if j != y:
            u = (1.0 + z[j] - zy) * inv_g
            if u > 0.0:
                work[p] = u
                p += 1
    return simplex_threshold(work[:p], 0.0, 1.0), inv_g


@njit(cache=True, nogil=True)
def _cs_value(loss, z, y, work):
    k = z.shape[0]
    zy = z[y]
    if loss.gamma <= 0.0:
        best = 0.0
        for j in range(k):
            if j != y:
                m = 1.0 + z[j] - zy
                if m > best:
                    best = m
        return best
    theta, inv_g = _cs_project_margins(loss, z, y, work)
    total = 0.0
    sq = 0.0
    for j in range(k):
        if j != y:
            m = 1.0 + z[j] - zy
            b = m * inv_g - theta
            if b > 0.0:
                total += b * m
                sq += b * b
    return total - 0.5 * loss.gamma * sq


@njit(cache=True, nogil=True)
def _cs_grad(loss, z, y, work, out):
    k = z.shape[0]
    zy = z[y]
    for j in range(k):
        out[j] = 0.0
    if loss.gamma <= 0.0:
        # A subgradient: the first most violated class, if any margin is violated.
        best = 0.0
        arg = -1
        for j in range(k):
            if j != y:
                m = 1.0 + z[j] - zy
                if m > best:
                    best = m
                    arg = j
        if arg >= 0:
            out[arg] = 1.0
            out[y] = -1.0
        return
    theta, inv_g = _cs_project_margins(loss, z, y, work)
    s = 0.0
    for j in range(k):
        if j != y:
            b = (1.0 + z[j] - zy) * inv_g - theta
            if b > 0.0:
                out[j] = b
                s += b
    out[y] = -s


@njit(cache=True, nogil=True)
def _cs_dual_term(loss, alpha, y, c):
    k = alpha.shape[0]
    if c <= 0.0:
        for j in range(k):
            if alpha[j] != 0.0:
                return -np.inf
        return 0.0
    tol = _DOMAIN_RTOL * c
    s = 0.0
    sq = 0.0
    for j in range(k):
        if j != y:
            a = alpha[j]
            if a > tol:
                return -np.inf
            if a < 0.0:
                s -= a
                sq += a * a
    ay = alpha[y]
    if ay > c + tol or abs(ay - s) > tol * k:
        return -np.inf
    return ay - 0.5 * loss.gamma * sq / c


@njit(cache=True, nogil=True)
def _cs_dual_step(loss, alpha, z, y, q, c, work, out):
    k = alpha.shape[0]
    if c <= 0.0:
        for j in range(k):
            out[j] = 0.0
        return
    zy = z[y]
    ay = alpha[y]
    A = loss.gamma / c + q
    if not A > 0.0:
        # Hinge on an empty row: the model is linear, sum_j m_j b_j over c S, maximised
        # at a vertex: all mass c on the first most violated class, or none.
        best = 0.0
        arg = -1
        for j in range(k):
            out[j] = 0.0
            if j != y:
                m = 1.0 + z[j] - zy
                if m > best:
                    best = m
                    arg = j
        if arg >= 0:
            out[arg] = -c
            out[y] = c
        return
    inv_a = 1.0 / A
    p = 0
    for j in range(k):
        if j != y:
            mu = (1.0 + z[j] - zy + q * (ay - alpha[j])) * inv_a
            out[j] = mu  # kept until theta is known
            if mu > 0.0:
                work[p] = mu
                p += 1
    theta = simplex_threshold(work[:p], q * inv_a, c)
    s = 0.0
    for j in range(k):
        if j != y:
            b = out[j] - theta
            if b > 0.0:
                out[j] = -b
                s += b
            else:
                out[j] = 0.0
    if s > c:
        # theta_S puts the mass at c up to rounding; never let it leave the box.
        scale = c / s
        s = 0.0
        for j in range(k):
            if j != y:
                out[j] *= scale
                s -= out[j]
        s = min(s, c)
    out[y] = s


class MulticlassHinge(NamedTuple):
    r"""Crammer-Singer max-of-hinge loss, smoothed by ``gamma >= 0`` (0: not smooth).

    ``phi(z, y) = max_{b in S} sum_{j != y} b_j (1 + z_j - z_y) - gamma/2 ||b||^2`` for
    scores ``z`` (k,) and class index ``y``; ``gamma = 0`` gives
    ``max(0, max_{j != y} 1 + z_j - z_y)``. The conjugate, the dual problem with vector
    duals, and the exact coordinate step are in the module docstring
    (:mod:`ooc.objectives.multiclass`).

    Parameters
    ----------
    gamma : float, default 0
        Smoothing. Use :func:`make_multiclass_loss` to get a Python float (an int would
        compile another specialization).
    """

    gamma: float = 0.0

    name = "crammer-singer"
    is_classification = True

    def smoothness_for(self, k):
        """Lipschitz constant of ``grad_z phi`` for ``k`` classes: ``k / gamma`` (inf if 0)."""
        return math.inf if self.gamma <= 0.0 else k / self.gamma

    # Python methods over arrays: rows of Z (m, k) with class indices y (m,).

    def value(self, Z, y):
        """``phi(Z[i], y[i])`` for each row; ``Z`` (m, k) or (k,) with a scalar ``y``."""
        Z, y, single = _rows(Z, y)
        out = np.empty(Z.shape[0])
        _value_many(_f(self), Z, y, out)
        return float(out[0]) if single else out

    def grad(self, Z, y):
        """``grad_z phi(Z[i], y[i])`` (a subgradient for ``gamma = 0``), same shape as ``Z``."""
        Z, y, single = _rows(Z, y)
        out = np.empty_like(Z)
        _grad_many(_f(self), Z, y, out)
        return out[0] if single else out

    def conjugate(self, U, y):
        """``phi*(U[i], y[i])``, ``+inf`` outside the domain."""
        U, y, single = _rows(U, y)
        out = np.empty(U.shape[0])
        _dual_term_many(_f(self), -U, y, np.ones(U.shape[0]), out)
        out = -out
        return float(out[0]) if single else out

    def dual_term(self, alpha, y, c=1.0):
        """``-c phi*(-alpha / c, y)`` per row, ``-inf`` where infeasible."""
        alpha, y, single = _rows(alpha, y)
        c = np.broadcast_to(np.asarray(c, dtype=np.float64), y.shape).copy()
        out = np.empty(alpha.shape[0])
        _dual_term_many(_f(self), alpha, y, c, out)
        return float(out[0]) if single else out

    def dual_step(self, alpha, z, y, q, c=1.0):
        """Option I increment ``Delta`` (k,) of one example's dual (the new dual minus ``alpha``).

        Maximises ``alpha'_y - gamma/(2c) sum_{j != y} alpha'_j^2 - z . Delta
        - q/2 ||Delta||^2`` over the feasible ``alpha' = alpha + Delta``.
        """
        alpha = np.ascontiguousarray(alpha, dtype=np.float64)
        z = np.ascontiguousarray(z, dtype=np.float64)
        out = np.empty_like(alpha)
        work = np.empty_like(alpha)
        _step_one(_f(self), alpha, z, int(y), float(q), float(c), work, out)
        return out - alpha


_register(MulticlassHinge, _cs_value, _cs_grad, _cs_dual_term, _cs_dual_step)


def make_multiclass_loss(gamma=0.0):
    """:class:`MulticlassHinge` with ``gamma`` checked (finite, ``>= 0``) and made a float."""
    gamma = float(gamma)
    if not (gamma >= 0.0 and math.isfinite(gamma)):
        raise ValueError(f"crammer-singer needs a finite gamma >= 0, got {gamma!r}")
    return MulticlassHinge(gamma)


def _f(loss):
    return type(loss)(float(loss.gamma))


def _rows(Z, y):
    Z = np.asarray(Z, dtype=np.float64)
    single = Z.ndim == 1
    Z = np.ascontiguousarray(np.atleast_2d(Z))
    y = np.ascontiguousarray(np.broadcast_to(np.asarray(y, dtype=np.int64), Z.shape[:1]))
    if y.size and (y.min() < 0 or y.max() >= Z.shape[1]):
        raise ValueError("class indices must lie in [0, k)")
    return Z, y, single


@njit(cache=True, nogil=True)
def _value_many(loss, Z, y, out):
    work = np.empty(Z.shape[1])
    for i in range(Z.shape[0]):
        out[i] = mc_loss_value(loss, Z[i], y[i], work)


@njit(cache=True, nogil=True)
def _grad_many(loss, Z, y, out):
    work = np.empty(Z.shape[1])
    for i in range(Z.shape[0]):
        mc_loss_grad(loss, Z[i], y[i], work, out[i])


@njit(cache=True, nogil=True)
def _dual_term_many(loss, A, y, c, out):
    for i in range(A.shape[0]):
        out[i] = mc_dual_term(loss, A[i], y[i], c[i])


@njit(cache=True, nogil=True)
def _step_one(loss, alpha, z, y, q, c, work, out):
    mc_dual_step(loss, alpha, z, y, q, c, work, out)


# --------------------------------------------------------------------------------------
# Labels
# --------------------------------------------------------------------------------------


def ovr_labels(y, classes, c):
    """One-vs-rest labels for class ``classes[c]``: +1.0 where ``y == classes[c]``, else -1.0.

    Parameters
    ----------
    y : array_like (n,)
        Labels in the user's values.
    classes : array_like (k,)
        The class list (as stored in the store's attributes / ``classes_``).
    c : int
        Index of the positive class in ``classes``.

    Returns
    -------
    ndarray, float64 (n,)
    """
    classes = np.asarray(classes)
    c = int(c)
    if not 0 <= c < classes.shape[0]:
        raise ValueError(f"class index {c} out of range for {classes.shape[0]} classes")
    return np.where(np.asarray(y) == classes[c], 1.0, -1.0)


def class_indices(y, classes):
    """Class index (int64) of each label in ``classes``; ``ValueError`` for an unknown label.

    ``classes`` need not be sorted; this is the ``y_class`` array of the multiclass kernels.
    """
    classes = np.asarray(classes)
    y = np.asarray(y)
    order = np.argsort(classes, kind="stable")
    pos = np.searchsorted(classes[order], y)
    pos = np.clip(pos, 0, max(classes.shape[0] - 1, 0))
    found = classes.shape[0] > 0 and np.all(classes[order][pos] == y)
    if not found:
        bad = y[classes[order][pos] != y] if classes.shape[0] else y
        raise ValueError(f"labels not in the class list: {np.unique(bad)[:5].tolist()}")
    return order[pos].astype(np.int64)


# --------------------------------------------------------------------------------------
# Penalty on a (d, k) matrix and the duality gap
# --------------------------------------------------------------------------------------


def _split_rows(M, bias):
    M = np.asarray(M, dtype=np.float64)
    if bias > 0.0:
        return M[:-1], M[-1:]
    return M, M[:0]


def cs_grad_conj(penalty, V, bias=0.0):
    """``W = grad g*(V)``: soft-threshold the feature rows of ``V`` (d, k) at ``l1/l2``.

    With ``bias > 0`` the last row is the intercept row, copied unchanged.
    """
    require_l2(penalty)
    feats, tail = _split_rows(V, bias)
    return np.concatenate([soft_threshold(feats, penalty.l1 / penalty.l2), tail])


def cs_penalty_value(penalty, W, bias=0.0):
    """``l2/2 ||W||_F^2 + l1 ||W_features||_1`` (the intercept row is not L1-penalized)."""
    W = np.asarray(W, dtype=np.float64)
    feats, _ = _split_rows(W, bias)
    return 0.5 * penalty.l2 * float(np.sum(W * W)) + penalty.l1 * float(np.abs(feats).sum())


def cs_conj_value(penalty, V, bias=0.0):
    """``l2 g*(V) = l2/2 ||grad g*(V)||_F^2``."""
    W = cs_grad_conj(penalty, V, bias)
    return 0.5 * penalty.l2 * float(np.sum(W * W))
