"""Pure-Python/numpy oracles for the compiled solvers (no Numba).

Written from Shalev-Shwartz & Zhang (Prox-SDCA, Fig. 1 option I; Sec. 5.1-5.2) with the
per-example weights of docs/training.rst, independently of ``ooc.kernels``: the losses and
conjugates are plain numpy, the logistic coordinate step is a bracketed root-finder
(``scipy.optimize.brentq``) rather than the kernel's Newton iteration.

A loss is described by its name and, for the smooth hinge, ``gamma`` (the attributes of the
``ooc`` loss NamedTuples, so tests can pass those directly).
"""

import math

import numpy as np
from scipy.optimize import brentq


def _spec(loss):
    return loss.name, float(getattr(loss, "gamma", 0.0))


# ---------------------------------------------------------------------------- losses


def phi(loss, z, y):
    """Loss values, numpy, elementwise."""
    name, gamma = _spec(loss)
    z = np.asarray(z, dtype=float)
    y = np.asarray(y, dtype=float)
    if name == "squared":
        return 0.5 * (z - y) ** 2
    if name == "huber":  # tests/huber_loss.py
        r = np.abs(z - y)
        return np.where(r <= loss.delta, 0.5 * r**2, loss.delta * (r - 0.5 * loss.delta))
    m = y * z
    if name == "logistic":
        return np.logaddexp(0.0, -m)
    if name == "hinge":
        return np.maximum(0.0, 1.0 - m)
    if name == "smooth-hinge":
        return np.where(
            m >= 1.0,
            0.0,
            np.where(m <= 1.0 - gamma, 1.0 - m - gamma / 2.0, (1.0 - m) ** 2 / (2.0 * gamma)),
        )
    raise ValueError(name)


def phi_conj(loss, u, y):
    """Convex conjugate ``phi*(u, y)`` (numpy, elementwise, ``inf`` off the domain)."""
    name, gamma = _spec(loss)
    u = np.asarray(u, dtype=float)
    y = np.asarray(y, dtype=float)
    if name == "squared":
        return 0.5 * u**2 + y * u
    if name == "huber":
        return np.where(np.abs(u) <= loss.delta, 0.5 * u**2 + y * u, np.inf)
    b = -u * y  # in [0, 1] on the domain
    inside = (b >= 0.0) & (b <= 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        if name == "logistic":
            val = np.where(b > 0, b * np.log(b), 0.0) + np.where(b < 1, (1 - b) * np.log1p(-b), 0.0)
        elif name == "hinge":
            val = -b
        elif name == "smooth-hinge":
            val = -b + gamma / 2.0 * b**2
        else:
            raise ValueError(name)
    return np.where(inside, val, np.inf)


def weighted_dual_term(loss, a, y, c):
    """``-c phi*(-a/c, y)`` elementwise, ``c = 0`` rows giving 0 (or ``-inf`` if a != 0)."""
    a = np.asarray(a, dtype=float)
    c = np.broadcast_to(np.asarray(c, dtype=float), a.shape)
    y = np.broadcast_to(np.asarray(y, dtype=float), a.shape)
    out = np.empty(a.shape)
    pos = c > 0
    out[pos] = -c[pos] * phi_conj(loss, -a[pos] / c[pos], y[pos])
    out[~pos] = np.where(a[~pos] == 0.0, 0.0, -np.inf)
    return out


# ---------------------------------------------------------------------------- objectives


def augment(X, bias):
    """Dense design matrix with the constant bias column appended when ``bias > 0``."""
    X = X.toarray() if hasattr(X, "toarray") else np.asarray(X, dtype=float)
    X = X.astype(float)
    if bias > 0:
        X = np.hstack([X, np.full((X.shape[0], 1), float(bias))])
    return X


def primal_objective(loss, X, y, c, w, l2, l1, bias=0.0):
    """``1/n sum c_i phi(x_i.w) + l2/2 ||w||^2 + l1 ||w_features||_1`` (dense numpy)."""
    Xa = augment(X, bias)
    n = Xa.shape[0]
    w = np.asarray(w, dtype=float)
    feats = w[:-1] if bias > 0 else w
    c = np.asarray(c, dtype=float)
    losses = np.where(c > 0, c * phi(loss, Xa @ w, y), 0.0)
    return losses.sum() / n + 0.5 * l2 * w @ w + l1 * np.abs(feats).sum()


def w_of_v(v, l2, l1, bias=0.0):
    """``grad g*(v)``: soft-threshold the features at ``l1/l2``, the bias entry untouched."""
    v = np.asarray(v, dtype=float)
    w = np.sign(v) * np.maximum(np.abs(v) - l1 / l2, 0.0)
    if bias > 0:
        w[-1] = v[-1]
    return w


def dual_objective(loss, X, y, c, alpha, l2, l1, bias=0.0):
    """``-1/n sum c_i phi*(-a_i/c_i) - l2 g*(v)`` with v rebuilt from alpha (dense numpy)."""
    Xa = augment(X, bias)
    n = Xa.shape[0]
    v = Xa.T @ np.asarray(alpha, dtype=float) / (l2 * n)
    w = w_of_v(v, l2, l1, bias)
    # g*(v) = sup_w w.v - 1/2||w||^2 - k||w_f||_1, attained at w = grad g*(v).
    feats = w[:-1] if bias > 0 else w
    gstar = w @ v - 0.5 * w @ w - (l1 / l2) * np.abs(feats).sum()
    return weighted_dual_term(loss, alpha, y, c).sum() / n - l2 * gstar


# ---------------------------------------------------------------------------- SDCA


def dual_step(loss, a, z, y, q, c):
    """Option I maximiser of ``-c phi*(-(a+d)/c) - z d - q d^2/2`` over ``d``."""
    name, gamma = _spec(loss)
    if c == 0.0:
        return -a
    if name == "squared":
        # -c phi*(-b/c) = y b - b^2/(2c): stationarity y - (a+d)/c - z - q d = 0.
        return (y - z - a / c) / (1.0 / c + q)
    # Classification: with labels folded in (x <- y x, as in the paper's SVM section) the
    # dual variable is s = a y in [0, c] and the margin m = y z.
    s = a * y
    m = y * z
    if name in ("hinge", "smooth-hinge"):
        g = gamma if name == "smooth-hinge" else 0.0
        # Paper, Sec. 5.5 with weights: the dual term is s - g s^2 / (2c).
        if q + g / c > 0:
            ds = (1.0 - m - g * s / c) / (q + g / c)
        else:
            ds = math.inf if m < 1 else (-math.inf if m > 1 else 0.0)
        ds = max(-s, min(c - s, ds))
        return y * ds
    if name == "logistic":
        # Dual term -c [p log p + (1-p) log(1-p)], p = s'/c. Stationarity in the logit
        # t = log(p/(1-p)):  t + m + q c (sigmoid(t) - s/c) = 0, increasing in t, with the
        # root between -m - q (c - s) and -m + q s.
        p0 = s / c

        def h(t):
            return t + m + q * c * (_sigmoid(t) - p0)

        lo = -m - q * (c - s) - 1.0
        hi = -m + q * s + 1.0
        t = brentq(h, lo, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)
        p = _sigmoid(t)
        return y * c * (p - p0)
    raise ValueError(name)


def _sigmoid(t):
    if t >= 0:
        return 1.0 / (1.0 + math.exp(-t))
    e = math.exp(t)
    return e / (1.0 + e)


def sdca_pass(loss, X, y, c, alpha, order, v, w, l2, l1, n_total, bias=0.0):
    """One Prox-SDCA option I pass over rows ``order`` of the CSR matrix ``X``, in place.

    ``alpha``, ``v``, ``w`` are updated in place; ``v``, ``w`` have length ``d`` (``d + 1``
    with ``bias > 0``: the last entry is the intercept, fed by a constant feature ``bias``
    and never soft-thresholded). Returns the margins ``x_i . w`` seen before each step.
    """
    d = X.shape[1]
    lam_n = l2 * n_total
    margins = []  # z of each visited row, before its step
    for i in order:
        lo, hi = X.indptr[i], X.indptr[i + 1]
        cols = np.asarray(X.indices[lo:hi], dtype=np.int64)
        vals = np.asarray(X.data[lo:hi], dtype=np.float64)
        if bias > 0:
            cols = np.append(cols, d)
            vals = np.append(vals, float(bias))
        z = sum(float(x) * float(w[j]) for j, x in zip(cols, vals))
        q = sum(float(x) * float(x) for x in vals) / lam_n
        margins.append(z)
        delta = dual_step(loss, float(alpha[i]), z, float(y[i]), q, float(c[i]))
        alpha[i] += delta
        for j, x in zip(cols, vals):
            v[j] += delta * x / lam_n
            if bias > 0 and j == d:
                w[j] = v[j]
            else:
                w[j] = math.copysign(max(abs(v[j]) - l1 / l2, 0.0), v[j])
    return np.array(margins)
