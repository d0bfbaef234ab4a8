"""Primal (NSync) vs dual (Quartz) RCD: does C_P vs C_D name the faster side? (Csiba & Richtarik)

The paper's synthetic experiments and two sparse cases where the naive "n > d -> dual" rule is
wrong. For each matrix: C_P, C_D (eq. 16, from ``store.info()``), the recommendation, and the
measured work of ``rcd-primal`` and ``rcd-dual`` with importance sampling (eq. 14) on L2-logistic
regression with ``l2 = 0.01/n`` (the paper: 1/n; ``--l2-factor``) and entries normalised by the average column norm (the paper's
setup, Sec. 7): nonzeros visited by the coordinate steps until ``P(w) - P* <= eps |P*|`` (in
passes over the data, the paper's x-axis), and the coordinate-step seconds. ``P*`` is the best
certified primal of the two runs (both run to a relative gap of 1e-9).

    python scripts/bench_faceoff.py [--scale 1.0] [--eps 1e-6] [--out faceoff.json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import scipy.sparse as sp
from _benchlib import first, run, store  # noqa: E402  (scripts/ is on sys.path)


def labels(X, rng):
    t = X @ rng.standard_normal(X.shape[1])
    return np.where(t + 0.5 * np.std(t) * rng.standard_normal(X.shape[0]) > 0, 1.0, -1.0)


def normalise(X):
    X = sp.csc_matrix(X, dtype=np.float64)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(0)).ravel())
    return sp.csr_matrix(X / norms[norms > 0].mean())


def cases(scale, rng):
    s = lambda v: max(2, int(v * scale))  # noqa: E731
    out = {}
    out["dense n>>d"] = rng.standard_normal((s(20000), 50))
    out["dense d>>n"] = rng.standard_normal((50, s(20000)))
    # binary worst case for dual RCD at fixed cardinality alpha (Lemma 9 / Thm. 4 tight case, the
    # paper's Fig. 3 with d = 100): C_D maximal (examples with d or 1 nonzeros) and C_P minimal
    # (balanced columns: the single nonzeros dealt round-robin); C_P / C_D ~ density * n / d, so
    # at 2% density primal RCD wins although n = 10 d
    n, d = s(1000), 100
    alpha = int(0.02 * n * d)
    a = max(1, (alpha - n) // (d - 1))
    B = np.zeros((n, d))
    B[:a, :] = 1.0
    B[np.arange(a, n), np.arange(n - a) % d] = 1.0
    out["binary worst-case for dual (n>>d)"] = B * rng.choice([-1.0, 1.0], size=B.shape)
    # and its transpose: the worst case for primal RCD with d >> n
    out["binary worst-case for primal (d>>n)"] = out["binary worst-case for dual (n>>d)"].T.copy()
    # skewed feature popularity with d >> n: a handful of features in every example, the rest rare
    n, d = s(2000), s(50000)
    rows, cols = [], []
    for i in range(n):
        k = 20
        cols.append(np.r_[np.arange(5), rng.choice(np.arange(5, d), k, replace=False)])
        rows.append(np.full(k + 5, i))
    X = sp.csr_matrix((rng.standard_normal(sum(len(c) for c in cols)), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(n, d))
    out["sparse skewed features (d>>n)"] = X
    # a few dense rows with n >> d: C_D ~ k d^2 for k dense rows, C_P ~ (n s)^2 / d for s nonzeros
    # per sparse row; 20 dense rows beat it when (n s)^2 < 20 d^3
    n, d = s(20000), 1000
    X = sp.random(n, d, density=2 / d, random_state=1, format="lil", data_rvs=rng.standard_normal)
    X[: 20, :] = rng.standard_normal((20, d))
    out["sparse + few dense rows (n>>d)"] = sp.csr_matrix(X)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--max-epochs", type=int, default=300)
    ap.add_argument("--l2-factor", type=float, default=0.01,
                    help="l2 = factor / n (the paper uses 1; smaller makes the C_P / C_D terms of T_P, T_D "
                         "dominate the common nnz term)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    report = []
    for name, X in cases(a.scale, rng).items():
        X = normalise(X)
        y = labels(X, rng)
        st = store(X, y)
        info = st.info()
        n, d = X.shape
        row = {"case": name, "n": n, "d": d, "nnz": int(X.nnz), "C_P": info["C_P"], "C_D": info["C_D"],
               "recommended": info["recommended_side"], "naive": "dual" if n > d else "primal"}
        res = {}
        for side, solver in (("primal", "rcd-primal"), ("dual", "rcd-dual")):
            r, h = run(solver, st, a.max_epochs, loss="logistic", l2=a.l2_factor / n, tol=1e-9, sampling="importance")
            res[side] = (r, h)
        pstar = min(r["primal"] for r, _ in res.values())
        for side, (r, h) in res.items():
            target = pstar + a.eps * max(1.0, abs(pstar))
            work = first(h, lambda e: e["primal"] <= target, "work")
            ep = first(h, lambda e: e["primal"] <= target, "epoch")
            row[side] = {"passes_to_eps": None if work is None else work / X.nnz, "epochs_to_eps": ep,
                         "final_rel_gap": r["rel_gap"], "epochs": r["epochs"], "wall_s": round(r["wall"], 2)}
        pp, pd = row["primal"]["passes_to_eps"], row["dual"]["passes_to_eps"]
        if pp is None and pd is None:
            row["measured_faster"] = None
        elif pp is None or pd is None:  # only one side got there within --max-epochs
            row["measured_faster"] = "primal" if pd is None else "dual"
        else:
            row["measured_faster"] = "primal" if pp < pd else "dual"
        row["speedup_of_faster"] = None if not (pp and pd) else max(pp, pd) / min(pp, pd)  # None: > max-epochs
        row["rule_right"] = row["measured_faster"] == row["recommended"]
        print(json.dumps(row), flush=True)
        report.append(row)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(report, f, indent=1)
    print(json.dumps({"cases": len(report), "rule_right": sum(r["rule_right"] for r in report),
                      "naive_right": sum(r["naive"] == r["measured_faster"] for r in report)}))


if __name__ == "__main__":
    main()
