"""Every (solver, loss, penalty) the registry allows, on a hashed-text and a dense store, against
LIBLINEAR, scikit-learn and skglm on the same objective, in the same run.

Objective (``docs/training.rst``, no intercept): ``P(w) = 1/n sum_i phi(x_i.w, y_i) + l2/2 ||w||^2
+ l1 ||w||_1``. Penalties: ``l2`` (``l1 = 0``), ``l1+l2``, ``l1`` (``l2 = 0``). Losses: squared
(a regression store of the same rows), logistic, hinge, smooth hinge (``gamma = 1``). A
combination is run when the registry allows it (:data:`ooc.solvers.registry.SOLVER_REGISTRY`:
a smooth loss where needed, ``l2 > 0`` or a pure-L1 route); a solver that refuses the problem
(``ValueError``, e.g. dspdc where its rate does not pay) is listed with its one-line reason.

References, each timed on the same data, objective mapped exactly:

* scikit-learn: ``Ridge(alpha = l2 n)``, ``ElasticNet(alpha = l1 + l2, l1_ratio = l1 / (l1 + l2))``,
  ``Lasso(alpha = l1)``, ``LogisticRegression(C = 1 / (l2 n))`` (L2; saga with elastic net /
  L1, ``C = 1 / ((l1 + l2) n)``), ``LinearSVC(loss='hinge', C = 1 / (l2 n))``;
* LIBLINEAR (``liblinear-official``): ``-s 0`` L2 logistic, ``-s 3`` L2 hinge (dual),
  ``-s 6`` L1 logistic (``C = 1 / (l1 n)``);
* skglm: ``Quadratic`` / ``Logistic`` datafit with ``L1`` or ``L1_plus_L2``;
* scipy L-BFGS-B for the smooth hinge with L2.

ooc's ``--tol`` is on ``gap / max(1, |P|)`` (``rel_gap``). Per entry: ooc's seconds, epochs, final relative gap, whether it certified ``--tol`` and made
progress (``progress``: the final gap below half the first one; an entry without progress is
a failure the script counts), and per reference its seconds and ``P_ref - P_ooc`` (at most
ooc's gap when both are right). Prints one JSON object (last line); ``--out`` writes it too.

``rcd-primal`` on pure L1 runs the working sets ``auto`` runs there (``sampling`` in the entry;
``--solver rcd-primal`` alone samples uniformly, the paper's NSync, far slower on small ``l1``).
``--threads`` is ooc's (default: every core, as ``ooc train``); the references run as they do.

    python scripts/bench_solvers.py [--scale 1.0] [--tol 1e-6] [--max-epochs 300] [--threads T] [--out solvers.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import warnings

import numpy as np
import scipy.sparse as sp

import ooc
from ooc.schedule.sampling import WORKING_SET
from ooc.solvers.registry import NATIVE, SOLVER_REGISTRY

LOSSES = ("squared", "logistic", "hinge", "smooth-hinge")


def text_data(n, d_hash, rng):
    """Hashed bag of words: Zipf token ids hashed into ``d_hash`` buckets, rows L2-normalised."""
    tokens = rng.zipf(1.3, size=(n, 30)) % 50_000
    buckets = (tokens * 2654435761) % d_hash
    rows = np.repeat(np.arange(n), tokens.shape[1])
    X = sp.csr_matrix((np.ones(rows.size), (rows, buckets.ravel())), shape=(n, d_hash))
    X.sum_duplicates()
    X = sp.csr_matrix(sp.diags(1.0 / np.sqrt(np.asarray(X.multiply(X).sum(1)).ravel() + 1e-300)) @ X)
    w = rng.standard_normal(d_hash) * (rng.random(d_hash) < 0.05)
    return X, X @ w


def dense_data(n, d, rng):
    X = rng.standard_normal((n, d)) / np.sqrt(d)
    return X, X @ rng.standard_normal(d)


def objective(loss, X, y, w, l2, l1):
    z = X @ w
    if loss == "squared":
        f = 0.5 * (z - y) ** 2
    elif loss == "logistic":
        f = np.logaddexp(0.0, -y * z)
    elif loss == "hinge":
        f = np.maximum(0.0, 1.0 - y * z)
    else:
        m = y * z
        f = np.where(m >= 1, 0.0, np.where(m <= 0, 0.5 - m, 0.5 * (1 - m) ** 2))
    return float(f.mean() + 0.5 * l2 * w @ w + l1 * np.abs(w).sum())


def references(loss, X, y, l2, l1, tol):
    """``{name: coefficient vector}`` builders of the independent solvers for this objective."""
    n = X.shape[0]
    out = {}
    try:
        from sklearn.linear_model import ElasticNet, Lasso, LogisticRegression, Ridge
        from sklearn.svm import LinearSVC
    except ImportError:  # pragma: no cover
        return out
    if loss == "squared":
        if l1 == 0:
            out["sklearn-Ridge"] = lambda: Ridge(alpha=l2 * n, fit_intercept=False, tol=tol).fit(X, y).coef_
        elif l2 == 0:
            out["sklearn-Lasso"] = lambda: Lasso(alpha=l1, fit_intercept=False, tol=tol, max_iter=100000).fit(X, y).coef_
        else:
            out["sklearn-ElasticNet"] = lambda: ElasticNet(alpha=l1 + l2, l1_ratio=l1 / (l1 + l2), fit_intercept=False,
                                                           tol=tol, max_iter=100000).fit(X, y).coef_
    if loss == "logistic":
        if l1 == 0:
            out["sklearn-LogisticRegression"] = lambda: LogisticRegression(
                C=1 / (l2 * n), fit_intercept=False, tol=tol, max_iter=100000).fit(X, y).coef_[0]
        else:
            out["sklearn-LogisticRegression-saga"] = lambda: LogisticRegression(
                penalty="elasticnet", solver="saga", l1_ratio=l1 / (l1 + l2), C=1 / ((l1 + l2) * n),
                fit_intercept=False, tol=tol, max_iter=100000).fit(X, y).coef_[0]
    if loss == "hinge" and l1 == 0:
        out["sklearn-LinearSVC"] = lambda: LinearSVC(loss="hinge", C=1 / (l2 * n), fit_intercept=False, tol=tol,
                                                     max_iter=1000000, dual=True).fit(X, y).coef_[0]
    if loss == "smooth-hinge" and l1 == 0:
        from scipy.optimize import minimize

        def fg(w):
            m = y * (X @ w)
            dm = np.where(m >= 1, 0.0, np.where(m <= 0, -1.0, m - 1.0))
            return objective(loss, X, y, w, l2, 0.0), X.T @ (dm * y) / n + l2 * w

        out["scipy-L-BFGS-B"] = lambda: minimize(fg, np.zeros(X.shape[1]), jac=True, method="L-BFGS-B",
                                                 options={"gtol": tol, "ftol": 1e-15, "maxiter": 100000}).x
    try:
        from liblinear.liblinearutil import parameter, problem, train
    except ImportError:
        train = None
    if train is not None and loss in ("logistic", "hinge"):
        s, C = None, None
        if l1 == 0:
            s, C = (0 if loss == "logistic" else 3), 1 / (l2 * n)
        elif l2 == 0 and loss == "logistic":
            s, C = 6, 1 / (l1 * n)
        if s is not None:
            def lib(s=s, C=C):
                m = train(problem(y, sp.csr_matrix(X)), parameter(f"-s {s} -c {C!r} -e {tol!r} -B -1 -q"))
                w = np.array(m.get_decfun()[0][: X.shape[1]])
                return w if m.get_labels()[0] == 1 else -w

            out["liblinear"] = lib
    try:
        from skglm import GeneralizedLinearEstimator
        from skglm.datafits import Logistic, Quadratic
        from skglm.penalties import L1, L1_plus_L2
        from skglm.solvers import AndersonCD
    except ImportError:
        GeneralizedLinearEstimator = None
    if GeneralizedLinearEstimator is not None and l1 > 0 and loss in ("squared", "logistic"):
        pen = L1(l1) if l2 == 0 else L1_plus_L2(l1 + l2, l1 / (l1 + l2))
        fit = Quadratic() if loss == "squared" else Logistic()
        out["skglm"] = lambda: GeneralizedLinearEstimator(
            fit, pen, solver=AndersonCD(tol=tol, max_iter=10000, fit_intercept=False)).fit(X, y).coef_.ravel()
    return out


def allowed(spec, loss, l2, l1):
    if spec.smooth_loss and loss == "hinge":
        return False
    if l2 == 0 and not spec.pure_l1:
        return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--max-epochs", type=int, default=300)
    ap.add_argument("--l2", type=float, default=1e-4)
    ap.add_argument("--l1", type=float, default=1e-4)
    ap.add_argument("--solvers", default=",".join(SOLVER_REGISTRY))
    ap.add_argument("--threads", type=int, default=None, help="ooc's --threads (default: every core)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    n = max(200, int(4000 * a.scale))
    datasets = {"hashed-text": text_data(n, 1 << 14, rng), "dense": dense_data(n, 50, rng)}
    penalties = {"l2": (a.l2, 0.0), "l1+l2": (a.l2, a.l1), "l1": (0.0, a.l1)}
    tmp = tempfile.mkdtemp(prefix="ooc-bench-solvers-")
    table, failures = [], 0
    warnings.simplefilter("ignore")
    try:
        for dname, (X, t) in datasets.items():
            Xd = X.toarray() if sp.issparse(X) else X
            ybin = np.where(t + 0.1 * np.std(t) * rng.standard_normal(n) > 0, 1.0, -1.0)
            yreg = t + 0.1 * np.std(t) * rng.standard_normal(n)
            stores = {kind: ooc.convert(X, f"{tmp}/{dname}-{kind}", y=y, label_kind=kind, layout="both",
                                               dtype="float64")
                      for kind, y in (("binary", ybin), ("regression", yreg))}
            for loss in LOSSES:
                y = yreg if loss == "squared" else ybin
                st = stores["regression" if loss == "squared" else "binary"]
                for pname, (l2, l1) in penalties.items():
                    refs = {}
                    for rname, fn in references(loss, X, y, l2, l1, a.tol * 1e-2).items():
                        t0 = time.perf_counter()
                        try:
                            w = fn()
                            refs[rname] = {"seconds": round(time.perf_counter() - t0, 3),
                                           "P": objective(loss, Xd, y, np.asarray(w, dtype=float), l2, l1)}
                        except Exception as exc:  # a reference that fails is reported, not fatal
                            refs[rname] = {"error": str(exc).splitlines()[0][:200]}
                    for sname in a.solvers.split(","):
                        spec = SOLVER_REGISTRY[sname]
                        if not allowed(spec, loss, l2, l1):
                            continue
                        row = {"store": dname, "loss": loss, "penalty": pname, "solver": sname}
                        extra = {} if a.threads is None else {"threads": a.threads}
                        if l2 == 0 and spec.samplings and spec.pure_l1 == NATIVE:  # auto's pure-L1 rcd-primal
                            extra["sampling"] = row["sampling"] = WORKING_SET
                        t0 = time.perf_counter()
                        try:
                            run = ooc.train(st, f"{tmp}/run", solver=sname, loss=loss, l2=l2, l1=l1, gamma=1.0,
                                            tol=a.tol, max_epochs=a.max_epochs, overwrite=True, **extra)
                        except ValueError as exc:  # the solver refuses the problem (one line)
                            row["refused"] = str(exc).splitlines()[0]
                            table.append(row)
                            continue
                        res, hist = run.result, run.history
                        gaps = [e["rel_gap"] for e in hist]
                        P = res["primal"]
                        row.update(seconds=round(time.perf_counter() - t0, 3), epochs=res["epochs"],
                                   converged=bool(res["converged"]), rel_gap=res["rel_gap"],
                                   progress=bool(gaps[-1] <= 0.5 * gaps[0]),
                                   references={k: dict(v, **({"P_ref_minus_P": v["P"] - P} if "P" in v else {}))
                                               for k, v in refs.items()})
                        failures += 0 if row["progress"] else 1
                        table.append(row)
                        print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {"n": n, "tol": a.tol, "l2": a.l2, "l1": a.l1, "threads": a.threads, "entries": table,
           "without_progress": failures}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
