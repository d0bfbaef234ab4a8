"""The adaptive-sampling paper's comparisons (Perekrestenko, Cevher & Jaggi 2017, Sec. 5) on generated data.

* Lasso by primal CD (``rcd-primal``, ``l2 = 0``, gap by the Lipschitzing trick), ``l1`` set so
  that 10-15 % of the features are in the support, on mushrooms-like data (binary features,
  n >> d);
* hinge-loss SVM by dual CD (``rcd-dual``) on ionosphere-like dense data (d >> n);

every sampling of ``--sampling``, a fixed number of epochs (an epoch = ``d`` primal or ``n`` dual
coordinate steps), averaged over seeds. Per epoch: the duality gap and the suboptimality
``P(w) - P*`` (``P*`` from a long ``ada-gap`` run, certified). Per vector operation (the paper's
Fig. 2): nonzeros visited by the steps, plus the rescoring passes of the per-step samplings
(about 11 passes per epoch: lazily refreshed sum trees) and one pass per epoch for gap-per-epoch's distribution.
Expected: ada-gap best per epoch, gap-per-epoch best in total work.

Gap-guided paging vs the shuffled block order (out of core: many small blocks): epochs, steps
and bytes read until the relative gap is 1e-6.

Wall time (``--wall``, issue 21's cases): every sampling's time to a certified gap on a dense
hinge SVM (20000 x 50, ``l2 = 1e-3``, ``rcd-dual``, tol 1e-5) and on a Lasso (20000 x 500 binary
features, ``rcd-primal``, tol 1e-6), each after a warm-up run that compiles its kernels, with
the ratio to importance sampling's time in the same run (``vs_importance`` < 1: faster).

    python scripts/bench_sampling.py [--scale 1.0] [--epochs 30] [--seeds 3] [--out sampling.json]
    python scripts/bench_sampling.py --wall [--scale 1.0]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import scipy.sparse as sp
from _benchlib import run, store  # noqa: E402  (scripts/ is on sys.path)

from ooc.schedule.sampling import SAMPLINGS


def lasso_data(n, d, rng):
    X = sp.random(n, d, density=0.19, random_state=rng, format="csr", data_rvs=lambda k: np.ones(k))
    w = np.zeros(d)
    w[rng.choice(d, d // 8, replace=False)] = rng.standard_normal(d // 8)
    y = X @ w + 0.3 * rng.standard_normal(n)
    return X, y


def svm_data(n, d, rng):
    X = rng.standard_normal((n, d)) * rng.lognormal(0, 0.8, size=(n, 1))  # uneven row norms
    y = np.where(X @ rng.standard_normal(d) + rng.standard_normal(n) > 0, 1.0, -1.0)
    return sp.csr_matrix(X), y


def pick_l1(st, X, y, lo=0.10, hi=0.15):
    """Bisection on l1 for a support of 10-15 % of the features."""
    d = X.shape[1]
    a, b = 1e-4, float(np.abs(X.T @ y).max() / len(y))
    for _ in range(30):
        l1 = np.sqrt(a * b)
        r, _ = run("rcd-primal", st, 300, loss="squared", l2=0.0, l1=l1, tol=1e-7, sampling="ada-gap")
        frac = r["nnz_w"] / d
        if frac < lo:
            b = l1
        elif frac > hi:
            a = l1
        else:
            return l1, frac
    return l1, frac


def compare(solver, st, nnz, epochs, seeds, pstar, **kw):
    out = {}
    for s in SAMPLINGS:
        gaps, subs, work = [], [], []
        for seed in range(seeds):
            _, h = run(solver, st, epochs, tol=0.0, sampling=s, seed=seed, **kw)
            gaps.append([e["gap"] for e in h])
            subs.append([max(e["primal"] - pstar, 0.0) for e in h])
            extra = np.arange(len(h)) * nnz if s == "gap-per-epoch" else 0  # the per-epoch gap pass
            work.append((np.array([e["work"] for e in h]) + extra) / nnz)
        L = min(len(g) for g in gaps)
        g = np.mean([x[:L] for x in gaps], axis=0)
        sb = np.mean([x[:L] for x in subs], axis=0)
        wk = np.mean([x[:L] for x in work], axis=0)
        out[s] = {"gap": g.tolist(), "subopt": sb.tolist(), "passes": wk.tolist()}
    return out


def summary(res, target):
    """Epochs and passes (vector operations / nnz) until the mean suboptimality <= target."""
    rows = {}
    for s, r in res.items():
        k = next((i for i, v in enumerate(r["subopt"]) if v <= target), None)
        rows[s] = {"epochs_to_target": k, "passes_to_target": None if k is None else round(r["passes"][k], 2),
                   "final_gap": r["gap"][-1], "final_subopt": r["subopt"][-1]}
    ep = [(v["epochs_to_target"], v["final_subopt"], s) for s, v in rows.items() if v["epochs_to_target"] is not None]
    wk = [(v["passes_to_target"], s) for s, v in rows.items() if v["passes_to_target"] is not None]
    return rows, (min(ep)[2] if ep else None), (min(wk)[1] if wk else None)


def paging(st, solver, tol, **kw):
    out = {}
    for pg in ("shuffled", "gap"):
        r, h = run(solver, st, 2000, tol=tol, paging=pg, memory=1, sampling="uniform", **kw)
        out[pg] = {"converged": r["converged"], "epochs": r["epochs"], "updates": h[-1]["updates"],
                   "bytes_read": r["bytes_read"], "wall_s": round(r["wall"], 2)}
    return out


def wall_race(solver, st, tol, **kw):
    """Each sampling's wall time and epochs to ``tol`` (one warm-up epoch first), and its ratio to importance."""
    out = {}
    for s in SAMPLINGS:
        run(solver, st, 1, tol=tol, sampling=s, **kw)  # compile (or load) this sampling's kernels
        r, _ = run(solver, st, 3000, tol=tol, sampling=s, **kw)
        out[s] = {"wall_s": round(r["wall"], 3), "epochs": r["epochs"], "converged": bool(r["converged"])}
    ref = out["importance"]["wall_s"]
    for v in out.values():
        v["vs_importance"] = round(v["wall_s"] / ref, 3) if ref > 0 else None
    return out


def wall(scale):
    rng = np.random.default_rng(1)
    n = int(20000 * scale)
    X = rng.standard_normal((n, 50)) * rng.lognormal(0, 0.8, size=(n, 1))
    y = np.where(X @ rng.standard_normal(50) + rng.standard_normal(n) > 0, 1.0, -1.0)
    svm = wall_race("rcd-dual", store(sp.csr_matrix(X), y), 1e-5, loss="hinge", l2=1e-3)
    print(json.dumps({"wall_svm": svm}), flush=True)
    X, y = lasso_data(n, 500, rng)
    l1 = 0.05 * float(np.abs(X.T @ y).max()) / n
    lasso = wall_race("rcd-primal", store(X, y, kind="regression"), 1e-6, loss="squared", l2=0.0, l1=l1)
    print(json.dumps({"wall_lasso": lasso}), flush=True)
    print(json.dumps({"svm_vs_importance": {s: v["vs_importance"] for s, v in svm.items()},
                      "lasso_vs_importance": {s: v["vs_importance"] for s, v in lasso.items()}}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--lasso-target", type=float, default=1e-8, help="relative suboptimality for 'to target'")
    ap.add_argument("--svm-target", type=float, default=1e-5)
    ap.add_argument("--wall", action="store_true", help="only the wall-time race against importance sampling")
    a = ap.parse_args()
    if a.wall:
        wall(a.scale)
        return
    rng = np.random.default_rng(0)
    report = {}

    # Lasso (primal CD)
    n, d = int(4000 * a.scale), int(112 * max(1.0, a.scale))
    X, y = lasso_data(n, d, rng)
    st = store(X, y, kind="regression")
    l1, frac = pick_l1(st, X, y)
    ref, _ = run("rcd-primal", st, 20000, loss="squared", l2=0.0, l1=l1, tol=1e-12, sampling="ada-gap")
    pstar = ref["primal"] - ref["gap"]  # a certified lower bound
    res = compare("rcd-primal", st, X.nnz, a.epochs, a.seeds, pstar, loss="squared", l2=0.0, l1=l1)
    rows, be, bw = summary(res, a.lasso_target * max(1.0, abs(pstar)))
    report["lasso"] = {"n": n, "d": d, "l1": l1, "support_frac": frac, "P_star": pstar, "per_sampling": rows,
                       "best_per_epoch": be, "best_per_work": bw, "curves": res}
    print(json.dumps({k: v for k, v in report["lasso"].items() if k != "curves"}), flush=True)

    # hinge SVM (dual CD)
    n, d = int(300 * a.scale), int(350 * max(1.0, a.scale))
    X, y = svm_data(n, d, rng)
    st = store(X, y)
    l2 = 0.1  # the paper's lambda for ionosphere (same scaling of the SVM dual as ours)
    ref, _ = run("rcd-dual", st, 20000, loss="hinge", l2=l2, tol=1e-11, sampling="ada-gap")
    pstar = ref["primal"] - ref["gap"]
    res = compare("rcd-dual", st, X.nnz, a.epochs, a.seeds, pstar, loss="hinge", l2=l2)
    rows, be, bw = summary(res, a.svm_target * max(1.0, abs(pstar)))
    report["svm"] = {"n": n, "d": d, "l2": l2, "P_star": pstar, "per_sampling": rows, "best_per_epoch": be,
                     "best_per_work": bw, "curves": res}
    print(json.dumps({k: v for k, v in report["svm"].items() if k != "curves"}), flush=True)

    # gap-guided paging vs shuffled, out of core (small blocks, nothing cached)
    n, d = int(20000 * a.scale), 200
    Xp = sp.random(n, d, density=0.05, random_state=rng, format="csr", data_rvs=rng.standard_normal)
    Xp[: n // 50] = Xp[: n // 50] * 5.0  # a few blocks carry most of the gap
    yp = np.where(Xp @ rng.standard_normal(d) + 0.5 * rng.standard_normal(n) > 0, 1.0, -1.0)
    stp = store(sp.csr_matrix(Xp), yp, block_bytes=64 << 10)
    report["paging"] = {"n_row_blocks": stp.n_blocks("rows"), "n_col_blocks": stp.n_blocks("cols"),
                        "rcd-dual": paging(stp, "rcd-dual", 1e-6, loss="logistic", l2=1.0 / n),
                        "rcd-primal": paging(stp, "rcd-primal", 1e-6, loss="logistic", l2=1.0 / n)}
    print(json.dumps(report["paging"]), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(report, f)
    print(json.dumps({"lasso_best_per_epoch": report["lasso"]["best_per_epoch"],
                      "lasso_best_per_work": report["lasso"]["best_per_work"],
                      "svm_best_per_epoch": report["svm"]["best_per_epoch"],
                      "svm_best_per_work": report["svm"]["best_per_work"]}))


if __name__ == "__main__":
    main()
