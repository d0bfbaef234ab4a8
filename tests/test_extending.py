"""Extending ooc: a loss added outside the package trains with every solver that takes a smooth loss.

``huber_loss.py`` registers the Huber loss the way docs/extending.rst describes (one
file and its :func:`ooc.objectives.losses.register_loss` call). Each solver whose registry
entry accepts a smooth regression loss trains it on a small store to a certified gap, and
the optimum is checked against scipy's L-BFGS on the same objective written here in numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from huber_loss import Huber
from scipy.optimize import minimize

import ooc
from ooc.objectives.losses import make_loss
from ooc.solvers.registry import SOLVER_REGISTRY

N, D, L2, DELTA = 400, 25, 1e-2, 1.0
TOL = 1e-8


def _huber(r):
    a = np.abs(r)
    return np.where(a <= DELTA, 0.5 * r * r, DELTA * (a - 0.5 * DELTA))


def _objective(X, y, w):
    return float(np.mean(_huber(X @ w - y)) + 0.5 * L2 * w @ w)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(7)
    X = sp.random(N, D, density=0.3, format="csr", random_state=rng)
    y = X @ rng.normal(size=D) + 0.1 * rng.normal(size=N)
    y[rng.choice(N, 20, replace=False)] += rng.normal(scale=20.0, size=20)  # outliers: the loss's reason
    path = str(tmp_path_factory.mktemp("huber") / "h.zarr")
    ooc.convert(X, path, y=y, layout="both", label_kind="regression")
    Xd = X.toarray()
    ref = minimize(lambda w: _objective(Xd, y, w), np.zeros(D), method="L-BFGS-B",
                   jac=lambda w: Xd.T @ np.clip(Xd @ w - y, -DELTA, DELTA) / N + L2 * w,
                   options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10000})
    return path, Xd, y, ref.fun


def test_the_loss_is_registered_and_checked_like_the_built_in_ones():
    loss = make_loss("huber")
    assert isinstance(loss, Huber) and loss.is_smooth
    z, y = np.array([0.2, 3.0, -4.0]), np.zeros(3)
    assert np.allclose(loss.value(z, y), _huber(z))
    # Fenchel-Young with equality at a = -phi'(z): phi(z) + phi*(-a) = -a z
    a = -loss.deriv(z, y)
    assert np.allclose(loss.value(z, y) + loss.conj_neg(a, y), -a * z)


#: every solver takes a smooth loss (``smooth_loss`` in the registry says which need one)
SMOOTH_SOLVERS = list(SOLVER_REGISTRY)


@pytest.mark.parametrize("solver", SMOOTH_SOLVERS)
def test_every_solver_certifies_the_huber_optimum(data, solver, tmp_path):
    path, X, y, p_ref = data
    run = ooc.train(path, str(tmp_path / "run"), loss="huber", l2=L2, tol=TOL, solver=solver, max_epochs=3000)
    res = run.result
    assert res["converged"] and res["rel_gap"] <= TOL
    w = ooc.load_model(run.path).coef_
    p = _objective(X, y, w)
    assert p == pytest.approx(res["primal"], rel=1e-9, abs=1e-12)  # the primal it reports is the model's
    assert res["dual"] <= p_ref + 1e-12  # weak duality against an independent optimum
    assert p - p_ref <= TOL * max(1.0, abs(p)) + 1e-12


def test_the_distributed_solver_certifies_it_too(data, tmp_path):
    path, X, y, p_ref = data
    res = ooc.train(path, str(tmp_path / "run"), loss="huber", l2=L2, tol=1e-6, distributed="local:2",
                    max_epochs=3000).result
    assert res["converged"] and res["dual"] <= p_ref + 1e-12 and res["primal"] - p_ref <= 1e-6 * max(1.0, p_ref)
