"""ooc against its peers on one L2-regularized logistic regression problem.

One data set from ``ooc.synth.SynthSource`` (binary, Zipf feature popularity, a planted sparse
model, label noise): ``--rows`` training rows and ``--test`` held-out rows of the same source.
Every method minimizes (or approximates) the same objective

    P(w) = 1/n sum_i log(1 + exp(-y_i x_i.w)) + l2/2 ||w||^2        (no intercept)

and this script computes P itself for every method's final weights, so the column "primal" is
comparable: relative suboptimality is ``(P - P_best) / P_best`` against the best of all, and
``P - D`` against ooc's certified dual lower bound ``D``.

* LIBLINEAR -s 7 (dual CD) and -s 0 (primal trust-region Newton) through scikit-learn's
  ``LogisticRegression(solver='liblinear', dual=True/False, C=1/(l2 n), fit_intercept=False)``,
  at scikit-learn's default ``tol`` and at a tight one;
* scikit-learn ``SGDClassifier(loss='log_loss', alpha=l2, penalty='l2')`` with ``partial_fit``
  passes (rows reshuffled per pass, shuffling not timed);
* Vowpal Wabbit (``vowpalwabbit`` package): ``--loss_function logistic --l2 l2 --passes P``
  with a cache file (``-k --cache_file``, ``--holdout_off``), timed including the first pass
  that writes the cache (text parsing of the .vw file is part of VW's pass 1);
* ooc: ``ooc train STORE --solver sdca --tol TOL`` in its own process (``seconds`` of its JSON:
  training time without process start; the store is converted beforehand, float64).

In-memory loading is not timed for any method. Ratios of times, not absolute times, are the
headline (``time_vs_ooc``). Prints a table on stderr and ONE JSON line on stdout. Usage::

    NUMBA_CACHE_DIR=/tmp/nc python scripts/bench_peers.py                 # 200k x 100k, 20 nnz/row
    python scripts/bench_peers.py --rows 20000 --cols 10000 --test 5000   # quick
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import scipy.sparse as sp


def ooc_exe() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "ooc.cli"]


def primal(X, y, w, l2) -> float:
    m = y * (X @ w)
    return float(np.mean(np.logaddexp(0.0, -m)) + 0.5 * l2 * float(w @ w))


def accuracy(X, y, w) -> float:
    return float(np.mean(np.where(X @ w > 0, 1.0, -1.0) == y))


def make_data(rows, cols, nnz, test, seed):
    from ooc.synth import SynthSource

    src = SynthSource(rows + test, cols, nnz, seed=seed)

    def csr(c):
        return sp.csr_matrix((c.data, c.indices, c.indptr), shape=(len(c.labels), cols)), np.asarray(c.labels)

    X, y = csr(src.chunk(0, rows))
    Xt, yt = csr(src.chunk(rows, rows + test))
    return X, y, Xt, yt


def run_liblinear(X, y, l2, dual, tol):
    from sklearn.linear_model import LogisticRegression

    n = X.shape[0]
    clf = LogisticRegression(solver="liblinear", dual=dual, C=1.0 / (l2 * n), fit_intercept=False, tol=tol,
                             max_iter=10000)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y)
    t = time.perf_counter() - t0
    w = clf.coef_.ravel().copy()
    if list(clf.classes_) != [-1.0, 1.0]:
        raise RuntimeError(f"unexpected classes {clf.classes_}")
    return w, t, int(np.max(clf.n_iter_))


def run_sgd(X, y, l2, passes, seed):
    from sklearn.linear_model import SGDClassifier

    clf = SGDClassifier(loss="log_loss", penalty="l2", alpha=l2, fit_intercept=False, learning_rate="optimal",
                        random_state=seed)
    rng = np.random.default_rng(seed)
    t = 0.0
    for _ in range(passes):
        perm = rng.permutation(X.shape[0])
        Xp, yp = X[perm], y[perm]
        t0 = time.perf_counter()
        clf.partial_fit(Xp, yp, classes=np.array([-1.0, 1.0]))
        t += time.perf_counter() - t0
    return clf.coef_.ravel().copy(), t, passes


def run_vw(X, y, l2, passes, workdir, bits):
    try:
        import vowpalwabbit
    except ImportError as exc:
        return None, f"vowpalwabbit not importable ({exc}); pip install vowpalwabbit"
    path = os.path.join(workdir, "train.vw")
    with open(path, "w") as f:
        for i in range(X.shape[0]):
            a, b = X.indptr[i], X.indptr[i + 1]
            feats = " ".join(f"{j}:{v:.17g}" for j, v in zip(X.indices[a:b], X.data[a:b]))
            f.write(f"{int(y[i])} |f {feats}\n")
    cache = os.path.join(workdir, "train.vw.cache")
    args = (f"--loss_function logistic --l2 {l2!r} -b {bits} --passes {passes} --cache_file {cache} -k "
            f"--holdout_off --noconstant --quiet -d {path}")
    t0 = time.perf_counter()
    ws = vowpalwabbit.Workspace(args)
    ws.run_parser()
    t = time.perf_counter() - t0
    ns = ws.hash_space("f")
    w = np.array([ws.get_weight(ws.hash_feature(str(j), ns)) for j in range(X.shape[1])], dtype=np.float64)
    idx = {ws.hash_feature(str(j), ns) for j in range(X.shape[1])}
    # VW applies --l2 lazily: its predictions are  contraction * (stored weights . x). Recover the
    # factor from VW's own predictions on a few training rows (exact: the model is linear).
    pred, mine = [], []
    for i in range(min(200, X.shape[0])):
        a, b = X.indptr[i], X.indptr[i + 1]
        ex = ws.example("|f " + " ".join(f"{j}:{v:.17g}" for j, v in zip(X.indices[a:b], X.data[a:b])))
        ws.predict(ex)
        pred.append(ex.get_simplelabel_prediction())
        mine.append(float(X.data[a:b] @ w[X.indices[a:b]]))
        ws.finish_example(ex)
    ws.finish()
    pred, mine = np.array(pred), np.array(mine)
    c = float(pred @ mine / (mine @ mine)) if mine @ mine > 0 else 1.0
    dev = float(np.max(np.abs(c * mine - pred)) / max(1e-12, np.max(np.abs(pred))))
    if dev > 1e-4:
        return None, f"could not map VW's weights to its predictions (deviation {dev:.2g})"
    if len(idx) != X.shape[1]:
        return None, f"feature hash collisions with -b {bits}"
    return (c * w, t, passes, args + f"  [weights x contraction {c:.6g}]"), None


def run_ooc(X, y, l2, tol, workdir):
    import ooc

    store = os.path.join(workdir, "train.zarr")
    ooc.convert(X, store, y=y, dtype="float64", overwrite=True)
    run = os.path.join(workdir, "run")
    cmd = ooc_exe() + ["train", store, "--out", run, "--solver", "sdca", "--loss", "logistic", "--l2", repr(l2),
                       "--tol", repr(tol), "--max-epochs", "500", "--json"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    res = json.loads(p.stdout.strip().splitlines()[-1])
    w = np.load(os.path.join(run, "model", "coef.npy")).astype(np.float64)
    return w, res, wall, " ".join(["ooc", *cmd[1:]])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--cols", type=int, default=100_000)
    ap.add_argument("--nnz", type=int, default=20)
    ap.add_argument("--test", type=int, default=50_000)
    ap.add_argument("--l2", type=float, default=1e-5)
    ap.add_argument("--tol", type=float, default=1e-6, help="ooc's relative duality gap")
    ap.add_argument("--sgd-passes", type=int, default=10)
    ap.add_argument("--vw-passes", type=int, default=10)
    ap.add_argument("--vw-bits", type=int, default=18)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    workdir = tempfile.mkdtemp(prefix="ooc-bench-peers-")
    try:
        X, y, Xt, yt = make_data(args.rows, args.cols, args.nnz, args.test, args.seed)
        n, l2 = X.shape[0], args.l2
        rows = []

        def add(method, w, seconds, passes, note=""):
            rows.append({"method": method, "seconds": round(seconds, 3), "passes": passes,
                         "primal": primal(X, y, w, l2), "test_accuracy": round(accuracy(Xt, yt, w), 5),
                         "nnz_w": int(np.count_nonzero(w)), "note": note})

        w, res, wall, cmd = run_ooc(X, y, l2, args.tol, workdir)
        add("ooc sdca", w, res["seconds"], res["epochs"] + 1,
            f"certified rel. gap {res['rel_gap']:.2g} <= {args.tol:g}; {res['epochs']} epochs + 1 certifying pass; "
            f"process wall {wall:.2f}s")
        ooc_dual = float(res["dual"])
        for dual, tag in ((True, "-s 7"), (False, "-s 0")):
            for tol in (1e-4, 1e-8):
                w, t, it = run_liblinear(X, y, l2, dual, tol)
                add(f"liblinear {tag} tol={tol:g}", w, t, it,
                    "dual CD iterations (passes)" if dual else "Newton iterations (each several CG passes)")
        w, t, p = run_sgd(X, y, l2, args.sgd_passes, args.seed)
        add("sklearn SGD partial_fit", w, t, p, "learning_rate=optimal")
        vw, why = run_vw(X, y, l2, args.vw_passes, workdir, args.vw_bits)
        if vw is not None:
            w, t, p, vw_args = vw
            add("vowpal wabbit", w, t, p, "pass 1 parses text and writes the cache")
        best = min(r["primal"] for r in rows)
        ooc_t = rows[0]["seconds"]
        for r in rows:
            r["rel_subopt"] = (r["primal"] - best) / best
            r["primal_minus_ooc_dual"] = r["primal"] - ooc_dual
            r["time_vs_ooc"] = round(r["seconds"] / ooc_t, 3) if ooc_t > 0 else None
        hdr = f"{'method':<28}{'seconds':>9}{'x ooc':>8}{'passes':>8}{'primal':>20}{'rel subopt':>12}{'test acc':>10}"
        print(hdr, file=sys.stderr)
        for r in rows:
            print(f"{r['method']:<28}{r['seconds']:>9.3f}{r['time_vs_ooc']:>8.2f}{r['passes']:>8}{r['primal']:>20.12f}"
                  f"{r['rel_subopt']:>12.2e}{r['test_accuracy']:>10.4f}", file=sys.stderr)
        out = {"data": {"rows": n, "cols": args.cols, "nnz_per_row": args.nnz, "test_rows": args.test,
                        "nnz": int(X.nnz), "source": "ooc.synth.SynthSource binary", "seed": args.seed},
               "objective": "mean logistic loss + l2/2 ||w||^2, no intercept", "l2": l2,
               "liblinear_C": 1.0 / (l2 * n), "ooc_certified_dual": ooc_dual, "best_primal": best,
               "ooc_command": cmd, "vowpalwabbit": (vw_args if vw is not None else why), "results": rows}
        print(json.dumps(out))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
