"""The unregularized intercept (``--fit-intercept``): what it costs against no intercept and ``--bias 1``.

For each loss (logistic, squared, smooth hinge) and ``l2``, on sparse random rows whose labels
need an intercept (``x . w0 + 2``): ``sdca`` to a relative gap ``--tol`` with no intercept, with
LIBLINEAR's regularized ``--bias 1`` and with ``--fit-intercept``; passes and training seconds of
each (kernels compiled beforehand by a tiny run), and scikit-learn on the ``--fit-intercept``
objective in the same run (``LogisticRegression(lbfgs)``, ``Ridge``; none for the smooth hinge),
its objective compared with ooc's certified one. Prints a table on stderr and ONE JSON line on
stdout: ``rows`` with ``passes_ratio`` = fit-intercept passes / ``--bias 1`` passes and
``ratio`` = ooc fit-intercept seconds / scikit-learn seconds. Usage::

    python scripts/bench_intercept.py                       # 3,000 and 20,000 rows
    python scripts/bench_intercept.py --rows 200000 --cols 4096
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings

import numpy as np
import scipy.sparse as sp

import ooc


def _data(loss, n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=min(1.0, 10.0 / d), random_state=seed, format="csr")
    z = X @ rng.normal(size=d) + 2.0
    y = z + rng.normal(size=n) if loss == "squared" else np.where(rng.random(n) < 1 / (1 + np.exp(-z)), 1.0, -1.0)
    return X, y


def _primal(loss, X, y, w, b, l2):
    z = X @ w + b
    if loss == "logistic":
        f = np.logaddexp(0.0, -y * z)
    elif loss == "squared":
        f = 0.5 * (z - y) ** 2
    else:
        m = y * z
        f = np.where(m >= 1, 0.0, np.where(m <= 0, 0.5 - m, 0.5 * (1 - m) ** 2))
    return float(np.mean(f) + 0.5 * l2 * w @ w)


def _peer(loss, X, y, l2):
    from sklearn.linear_model import LogisticRegression, Ridge

    n = X.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        if loss == "logistic":
            m = LogisticRegression(C=1 / (l2 * n), tol=1e-10, max_iter=100000).fit(X, y)
            w, b = m.coef_.ravel(), float(m.intercept_[0])
        elif loss == "squared":
            m = Ridge(alpha=l2 * n, tol=1e-10, solver="sparse_cg").fit(X, y)
            w, b = m.coef_, float(m.intercept_)
        else:
            return None
        return time.perf_counter() - t, _primal(loss, X, y, w, b, l2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[3000, 20000])
    ap.add_argument("--cols", type=int, default=200)
    ap.add_argument("--l2", type=float, nargs="+", default=[1e-3, 1e-4])
    ap.add_argument("--tol", type=float, default=1e-8)
    ap.add_argument("--max-epochs", type=int, default=1000)
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="ooc-bench-icpt-")
    rows = []
    for loss in ("logistic", "squared", "smooth-hinge"):
        for n in a.rows:
            X, y = _data(loss, n, a.cols)
            store = f"{tmp}/{loss}-{n}.zarr"
            ooc.convert(X, store, y=y, dtype="float64")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for kw in ({}, {"bias": 1.0}, {"fit_intercept": True}):  # compile the kernels first
                    ooc.train(store, loss=loss, l2=1e-2, tol=1e-3, max_epochs=2, solver="sdca", **kw)
            for l2 in a.l2:
                row = {"loss": loss, "rows": n, "cols": a.cols, "l2": l2, "tol": a.tol}
                for name, kw in (("none", {}), ("bias1", {"bias": 1.0}), ("fit_intercept", {"fit_intercept": True})):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        r = ooc.train(store, loss=loss, l2=l2, tol=a.tol, max_epochs=a.max_epochs, solver="sdca",
                                      **kw).result
                    row[name] = {"passes": r["epochs"], "seconds": r["seconds"], "converged": r["converged"],
                                 "primal": r["primal"], "dual": r["dual"]}
                row["passes_ratio"] = row["fit_intercept"]["passes"] / max(row["bias1"]["passes"], 1)
                peer = _peer(loss, X, y, l2)
                if peer is not None:
                    ps, pp = peer
                    row["peer"] = {"name": "scikit-learn", "seconds": ps, "primal": pp,
                                   "ooc_minus_peer": row["fit_intercept"]["primal"] - pp}
                    row["ratio"] = row["fit_intercept"]["seconds"] / ps
                rows.append(row)
                print(f"{loss:13s} n={n:<7d} l2={l2:<7g} passes none {row['none']['passes']:4d} bias1 "
                      f"{row['bias1']['passes']:4d} fit-intercept {row['fit_intercept']['passes']:4d} "
                      f"({row['passes_ratio']:.2f}x)" + (f", {row['ratio']:.2f}x scikit-learn's time"
                                                        if "ratio" in row else ""), file=sys.stderr)
    print(json.dumps({"bench": "intercept", "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
