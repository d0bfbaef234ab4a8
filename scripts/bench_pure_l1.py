"""Pure L1 in depth: every solver that trains it, per loss, against peers timed to ooc's certificate.

(``scripts/bench_solvers.py`` has every (solver, loss, penalty) once.) The pure-L1 rows
(``--l2 0 --l1 L1``): for each loss, every solver the registry lets
train pure L1 (``rcd-primal`` with working sets and with uniform sampling for the smooth losses;
``sdca`` and ``acc-sdca`` with their added L2, for every loss), on two stores from
``ooc.synth.SynthSource``:

* ``text``: hashed-text-like rows (Zipf feature popularity, ``--nnz`` unit-norm nonzeros a row);
* ``dense``: ``--dense-cols`` Gaussian features on every row.

The objective is ``P(w) = 1/n sum_i phi(x_i . w, y_i) + l1 ||w||_1`` (no intercept). ooc trains
with ``--tol TOL`` (its ``seconds``: training time, kernels compiled beforehand by a tiny run);
a peer on the same objective is run at tighter and tighter tolerances until its objective,
computed here, is within ``TOL`` (relative) of ooc's certified dual bound, i.e. as close to the
optimum as ooc's certificate guarantees; its time is that run's fit time:

* logistic: LIBLINEAR ``-s 6`` (newGLMNET, ``liblinear-official``, ``C = 1 / (l1 n)``) and
  skglm ``ProxNewton`` (``Logistic`` + ``L1(l1)``) when installed;
* squared: scikit-learn ``Lasso(alpha=l1)`` and skglm ``AndersonCD`` when installed;
* smooth hinge, hinge: no peer on this objective (``peer: null``).

An entry that does not certify within ``--max-epochs`` reports the gap it reached and ooc's
``stop_reason`` (no peer is timed for it); a solver that refuses the problem (sdca where its added L2
would need millions of passes) is listed with its one-line reason (``refused``). The working-set entry runs first, so that the peers are
timed against its certificate. Prints a table on stderr and ONE JSON line on stdout (``rows``: one object per
entry, with ``ratio`` = ooc seconds / peer seconds). Usage::

    NUMBA_CACHE_DIR=/tmp/nc python scripts/bench_pure_l1.py                      # 200k x 2^18 text
    python scripts/bench_pure_l1.py --rows 20000 --cols 16384 --dense-rows 5000  # quick
    python scripts/bench_pure_l1.py --rows 930000 --cols 1048576 --losses logistic --kinds text \
        --solvers 'rcd-primal working-set'                                         # registry scale
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
import warnings

import numpy as np
from bench_solvers import objective  # the objective, written once for both benches (scripts/ is on sys.path)

import ooc
from ooc.solvers.registry import NATIVE, SOLVER_REGISTRY
from ooc.synth import SynthSource

LOSSES = ("squared", "logistic", "smooth-hinge", "hinge")
PEER_TOLS = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-10)




def entries(loss):
    """(label, ooc options) of every solver that trains pure L1 with this loss."""
    out = []
    for name, spec in SOLVER_REGISTRY.items():
        if not spec.pure_l1 or (spec.smooth_loss and loss == "hinge"):
            continue
        if name == "rcd-primal":
            out += [("rcd-primal working-set", {"solver": name, "sampling": "working-set"}),
                    ("rcd-primal uniform", {"solver": name, "sampling": "uniform"})]
        else:
            out.append((f"{name} (added l2)" if spec.pure_l1 != NATIVE else name, {"solver": name}))
    return sorted(out, key=lambda e: e[0] != "rcd-primal working-set")


def peers(loss, X, y, l1):
    """(name, fit(tol) -> (w, seconds)) of the peers on this objective."""
    n = X.shape[0]
    out = []
    if loss == "logistic":
        try:
            from liblinear.liblinearutil import parameter, problem, train
            prob = problem(y, X)

            def liblinear(tol):
                t = time.perf_counter()
                m = train(prob, parameter(f"-s 6 -c {1.0 / (l1 * n)!r} -e {tol} -B -1 -q"))
                sec = time.perf_counter() - t
                w = np.array([m.w[j] for j in range(X.shape[1])]) * (1.0 if m.label[0] == 1 else -1.0)
                return w, sec
            out.append(("liblinear -s 6", liblinear))
        except ImportError:
            pass
    if loss == "squared":
        from sklearn.linear_model import Lasso

        def lasso(tol):
            t = time.perf_counter()
            m = Lasso(alpha=l1, fit_intercept=False, tol=tol, max_iter=100000).fit(X, y)
            return np.ravel(m.coef_), time.perf_counter() - t
        out.append(("sklearn Lasso", lasso))
    if loss in ("logistic", "squared"):
        try:
            from skglm import GeneralizedLinearEstimator
            from skglm.datafits import Logistic, Quadratic
            from skglm.penalties import L1
            from skglm.solvers import AndersonCD, ProxNewton

            def skglm(tol):
                solver = (ProxNewton(tol=tol, fit_intercept=False) if loss == "logistic"
                          else AndersonCD(tol=tol, fit_intercept=False))
                est = GeneralizedLinearEstimator(Logistic() if loss == "logistic" else Quadratic(), L1(l1), solver)
                t = time.perf_counter()
                est.fit(X, y)
                return np.ravel(est.coef_), time.perf_counter() - t
            out.append(("skglm", skglm))
        except ImportError:
            pass
    return out


def time_to(fit, loss, X, y, l1, target):
    """The first of PEER_TOLS whose objective is <= target: (seconds, objective, tol), else the last."""
    last = None
    for tol in PEER_TOLS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            w, sec = fit(tol)
        p = objective(loss, X, y, w, 0.0, l1)
        last = {"seconds": sec, "primal": p, "tol": tol, "reached": p <= target}
        if p <= target:
            break
    return last


def make_stores(args):
    stores = {}
    tasks = {"regression" if loss == "squared" else "binary" for loss in args.losses.split(",")}
    for kind, src in (("text", lambda task: SynthSource(args.rows, args.cols, args.nnz, task=task, seed=1)),
                      ("dense", lambda task: SynthSource(args.dense_rows, args.dense_cols, args.dense_cols,
                                                         task=task, values="gaussian", seed=2))):
        if kind not in args.kinds.split(","):
            continue
        for task in sorted(tasks):
            stores[kind, task] = ooc.convert(src(task), f"memory://bench-{uuid.uuid4().hex[:8]}", dtype="float64",
                                             layout="both")
    return stores


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--cols", type=int, default=1 << 18)
    ap.add_argument("--nnz", type=int, default=30)
    ap.add_argument("--dense-rows", type=int, default=20_000)
    ap.add_argument("--dense-cols", type=int, default=100)
    ap.add_argument("--l1", type=float, default=1e-5, help="l1 of the text store")
    ap.add_argument("--dense-l1", type=float, default=1e-3)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--max-epochs", type=int, default=100)
    ap.add_argument("--losses", default=",".join(LOSSES))
    ap.add_argument("--kinds", default="text,dense", help="stores to run: text, dense or both")
    ap.add_argument("--solvers", default=None, help="entries to run, comma-separated labels (default: all), "
                                                    "e.g. 'rcd-primal working-set'")
    args = ap.parse_args(argv)
    stores = make_stores(args)
    tiny = {t: ooc.convert(SynthSource(300, 50, 5, task=t, seed=0), f"memory://warm-{uuid.uuid4().hex[:8]}",
                           dtype="float64", layout="both") for t in ("binary", "regression")}
    rows = []
    for loss in args.losses.split(","):
        task = "regression" if loss == "squared" else "binary"
        for kind in args.kinds.split(","):
            st = stores[kind, task]
            l1 = args.l1 if kind == "text" else args.dense_l1
            X = st.to_scipy("rows").tocsr()
            y = np.asarray(st.labels, dtype=np.float64)
            if task == "binary":  # ooc maps the two classes to -1, +1 in this order
                y = np.where(y == st.label_values[1], 1.0, -1.0)
            peer_list = peers(loss, X, y, l1)
            peer_cache = {}
            for label, opts in entries(loss):
                if args.solvers and label not in args.solvers.split(","):
                    continue
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        try:  # compile (or load) the entry's kernels; a tiny problem it refuses compiles nothing
                            ooc.train(tiny[task], tempfile.mkdtemp(), loss=loss, l2=0.0, l1=0.01, max_epochs=2,
                                      **opts)
                        except ValueError:
                            pass
                        t = time.perf_counter()
                        r = ooc.train(st, tempfile.mkdtemp(), loss=loss, l2=0.0, l1=l1, tol=args.tol,
                                      max_epochs=args.max_epochs, **opts)
                        wall = time.perf_counter() - t
                except ValueError as exc:  # a solver that refuses this problem, with its one-line reason
                    rows.append({"store": kind, "loss": loss, "penalty": f"l1={l1:g}", "solver": label,
                                 "refused": str(exc), "peers": []})
                    print(f"{kind:5s} {loss:12s} {label:26s} refused: {exc}", file=sys.stderr, flush=True)
                    continue
                res = r.result
                p = objective(loss, X, y, r.model.coef_, 0.0, l1)
                row = {"store": kind, "loss": loss, "penalty": f"l1={l1:g}", "solver": label,
                       "converged": res["converged"], "rel_gap": res["rel_gap"], "epochs": res["epochs"],
                       "seconds": res["seconds"], "wall": wall, "primal": p, "dual": res["dual"],
                       "stop_reason": res.get("stop_reason"), "peers": []}
                target = res["dual"] + args.tol * max(1.0, abs(p))
                for name, fit in peer_list if res["converged"] else ():
                    if name not in peer_cache:
                        # the peer against the first certificate on this store and loss (run once)
                        peer_cache[name] = dict(time_to(fit, loss, X, y, l1, target), name=name)
                    pr = peer_cache[name]
                    row["peers"].append({**pr, "ratio": res["seconds"] / pr["seconds"] if pr["reached"] else None})
                rows.append(row)
                peers_txt = ", ".join(f"{q['name']} {q['seconds']:.2f}s{'' if q['reached'] else ' (not reached)'}"
                                      for q in row["peers"]) or ("no peer" if res["converged"] else "")
                print(f"{kind:5s} {loss:12s} {label:26s} {'ok ' if res['converged'] else 'NOT'} gap "
                      f"{res['rel_gap']:.2e} ep {res['epochs']:4d} {res['seconds']:7.2f}s | {peers_txt}",
                      file=sys.stderr, flush=True)
    print(json.dumps({"bench": "solvers", "tol": args.tol, "rows_text": args.rows, "cols_text": args.cols,
                      "nnz_per_row": args.nnz, "rows_dense": args.dense_rows, "cols_dense": args.dense_cols,
                      "rows": rows}))


if __name__ == "__main__":
    main()
