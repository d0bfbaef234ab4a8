"""Algorithm 1 of DGPD (Lei et al., no active sets) in plain numpy: the oracle of tests/test_dgpd.py.

Written from the paper with the conventions of ``docs/training.rst``: the SDCA duals ``a = -y_paper``,
``mu = l2``, ``lambda = l1``; losses, conjugates and the proximal dual step come from
``tests/reference.py`` (numpy, independent of ``ooc.kernels``). One iteration::

    xbar  = soft_threshold(u / (l2 n), l1 / l2)               u = A^T a        (eq. 4)
    j     = argmin_k  -(u_k / n)(xbar_k - x_k) + g_k(xbar_k) - g_k(x_k)          (eq. 5)
    x_j   = xbar_j,   m += (xbar_j - x_j) A^j                   m = A x          (eq. 6)
    i     = argmax_k |prox step of a_k at m_k|                                   (eq. 7, see below)
    a_i  += argmax_d  -c phi*(-(a_i + d)/c) - m_i d - q d^2/2,  q = n / eta      (eq. 8)
    u    += d A_i                                                                (eq. 9)

Eq. 7 as printed ranks by the plain gradient ``|m_k - (phi*_k)'(y_k)|``; for the (smooth) hinge
``phi*`` lives on a box and that gradient is nonzero at coordinates whose step is 0, so the
method would stall on them; for the logistic loss it is infinite at 0. The proximal step length
(Gauss-Southwell-r) is used instead, as in ``ooc.kernels.dgpd.dual_scores``.
"""

import numpy as np
import reference as ref


def theorem_q(n, l2, r2, gamma, s):
    """``q = n / eta`` for the largest step of Theorem 4.2 (eq. 16): ``eta = 2 n^2 l2 / (s (5 R^2 + n gamma l2))``."""
    return s * (5.0 * r2 + n * gamma * l2) / (2.0 * n * l2)


def _g(t, l2, l1):
    return 0.5 * l2 * t * t + l1 * np.abs(t)


def algorithm1(loss, X, y, l2, l1, iters, q=None, s=1.0, c=None, record=None):
    """Run Algorithm 1 for ``iters`` iterations from zero.

    Parameters
    ----------
    loss : an ``ooc`` loss NamedTuple (only its name / gamma are read)
    X : dense or scipy matrix (n, d)
    y : labels
    l2, l1 : penalty
    iters : int
    q : float, optional
        ``n / eta``; default the theorem's value with sparsity bound ``s``.
    record : callable, optional
        ``record(t, x, a)`` after each iteration.

    Returns
    -------
    x, a : the primal iterate and the duals; ``xbar(a)`` is the certified primal point.
    """
    A = X.toarray() if hasattr(X, "toarray") else np.asarray(X, dtype=float)
    A = A.astype(float)
    n, d = A.shape
    c = np.ones(n) if c is None else np.asarray(c, dtype=float)
    if q is None:
        gamma = 1.0 / loss.smoothness
        q = theorem_q(n, l2, float((A * A).sum(axis=1).max()), gamma / c.max(), s)
    x = np.zeros(d)
    a = np.zeros(n)
    m = np.zeros(n)
    u = np.zeros(d)
    for t in range(iters):
        xbar = ref.w_of_v(u / (l2 * n), l2, l1)
        dec = -(u / n) * (xbar - x) + _g(xbar, l2, l1) - _g(x, l2, l1)
        j = int(np.argmin(dec))
        dx = xbar[j] - x[j]
        if dx != 0.0:
            x[j] = xbar[j]
            m += dx * A[:, j]
        steps = np.array([ref.dual_step(loss, a[k], m[k], y[k], q, c[k]) for k in range(n)])
        i = int(np.argmax(np.abs(steps)))
        if steps[i] != 0.0:
            a[i] += steps[i]
            u += steps[i] * A[i]
        if record is not None:
            record(t, x, a)
    return x, a


def certified(loss, X, y, l2, l1, a, c=None):
    """``(w, P(w), D(a))`` with ``w = grad g*(v(a))``, the pair every ooc solver certifies."""
    A = X.toarray() if hasattr(X, "toarray") else np.asarray(X, dtype=float)
    n = A.shape[0]
    c = np.ones(n) if c is None else c
    w = ref.w_of_v(A.T @ a / (l2 * n), l2, l1)
    return w, ref.primal_objective(loss, A, y, c, w, l2, l1), ref.dual_objective(loss, A, y, c, a, l2, l1)
