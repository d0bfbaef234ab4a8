"""DSPDC vs sdca and rcd-primal on generated data, and the per-iteration cost on factorized data.

1. ``general``: a sparse binary set (``--rows`` x ``--cols``, ``--nnz`` per row, logistic loss,
   ``--l2``): time, epochs and bytes read to reach ``--tol`` relative duality gap (1e-3) for
   ``dspdc``, ``sdca`` and ``rcd-primal``. Epochs are not the same unit: a dspdc epoch is
   ``n / m`` iterations (each row once in expectation), an sdca epoch one pass over the rows,
   an rcd-primal epoch ``d`` coordinate steps plus a gap pass.
2. ``factorized``: ``A = U V`` with ``U = X G^T`` (``--frows`` x ``--fcols``, ``K = --k``), and
   the same matrix ``A`` stored densely as a plain store: dspdc runs the same iterates on both
   (same ``m``, ``q``, seed) for ``--fepochs`` epochs; reported: seconds per iteration of each
   (time in the iteration kernel, without paging and the fused gap), their ratio, and the
   predicted ratio of entries touched, ``(2 m d + 5 q) / (K (2 m + 5 q))`` (a dot and a scatter
   per row, a row of the dense ``A`` having ``d`` entries; five passes over ``V^j`` per
   coordinate, one entry for a plain store).

Kernels are compiled on a tiny store first. Prints one JSON object (last line).

    python scripts/bench_dspdc.py --rows 20000 --cols 2000 --nnz 20 --frows 2000 --fcols 20000 --k 10
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time

import numpy as np
import scipy.sparse as sp

import ooc
from ooc.engine import run as run_solver
from ooc.runs.rundir import RunDir
from ooc.solvers.dspdc import DSPDCSolver
from ooc.solvers.problem import make_problem
from ooc.solvers.rcd import RCDPrimalSolver
from ooc.solvers.sdca import SDCASolver
from ooc.store.factorize import FactorView, convert_factorized
from ooc.train import _validate


def sparse_binary(n, d, nnz, seed):
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, d, size=(n, nnz))
    X = sp.csr_matrix((rng.standard_normal(n * nnz) / np.sqrt(nnz), cols.ravel(), np.arange(0, n * nnz + 1, nnz)),
                      shape=(n, d))
    X.sum_duplicates()
    y = np.where(X @ rng.standard_normal(d) + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


def run(cls, st, tmp, max_epochs, **kw):
    o = _validate({k: v for k, v in kw.items() if not k.startswith("dspdc_")}, st)
    pb = make_problem(st, o)
    rd = RunDir.create(tempfile.mkdtemp(dir=tmp), {})
    opts = {"tol": o["tol"], "memory": o["memory_bytes"], "seed": o["seed"], "checkpoint_every": 1e9,
            "mix_blocks": o["mix_blocks"], "sampling": "uniform", "paging": "shuffled",
            "dspdc_m": kw.get("dspdc_m"), "dspdc_q": kw.get("dspdc_q")}
    s = cls(pb, rd, opts)
    t0 = time.perf_counter()
    res = run_solver(s, max_epochs, resume=False)
    res["wall"] = time.perf_counter() - t0
    return res, s, RunDir.open(rd.path).history()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--cols", type=int, default=2000)
    ap.add_argument("--nnz", type=int, default=20)
    ap.add_argument("--l2", type=float, default=1e-3)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--frows", type=int, default=2000)
    ap.add_argument("--fcols", type=int, default=20000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--fepochs", type=int, default=3)
    ap.add_argument("--q", type=int, default=8, help="dspdc q on the factorized comparison")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ooc-bench-dspdc-")
    out = {"bench": "dspdc"}
    try:
        # compile every kernel used below on a tiny store
        Xs, ys = sparse_binary(200, 50, 5, 9)
        small = ooc.convert(Xs, f"{tmp}/small.zarr", y=ys)
        for cls, name in ((DSPDCSolver, "dspdc"), (SDCASolver, "sdca"), (RCDPrimalSolver, "rcd-primal")):
            run(cls, small, tmp, 2, loss="logistic", l2=1e-2, solver=name)
        smallf = convert_factorized(Xs, f"{tmp}/smallf.zarr", 3, y=ys, dtype="float64")
        run(DSPDCSolver, smallf, tmp, 2, loss="logistic", l2=1e-2, solver="dspdc")

        X, y = sparse_binary(args.rows, args.cols, args.nnz, 0)
        st = ooc.convert(X, f"{tmp}/general.zarr", y=y)
        general = {"rows": args.rows, "cols": args.cols, "nnz": int(X.nnz), "l2": args.l2, "tol": args.tol}
        for cls, name in ((DSPDCSolver, "dspdc"), (SDCASolver, "sdca"), (RCDPrimalSolver, "rcd-primal")):
            res, s, hist = run(cls, st, tmp, 2000, loss="logistic", l2=args.l2, tol=args.tol, solver=name)
            entry = {"converged": res["converged"], "seconds": round(res["seconds"], 3), "epochs": res["epochs"],
                     "rel_gap": res["rel_gap"], "bytes_read": res["bytes_read"]}
            if name == "dspdc":
                entry.update(m=s.m, q=s.q, theta=s.theta, iterations=hist[-1].get("iterations"))
            general[name] = entry
        out["general"] = general

        Xf, yf = sparse_binary(args.frows, args.fcols, args.nnz, 1)
        fst = convert_factorized(Xf, f"{tmp}/fact.zarr", args.k, y=yf, dtype="float64")
        fv = FactorView(fst)
        A = fv.dense_u() @ fv.vt().T
        pst = ooc.convert(A, f"{tmp}/dense_uv.zarr", y=yf, dtype="float64")
        del A
        fact = {"rows": args.frows, "cols": args.fcols, "k": args.k, "epochs": args.fepochs}
        for name, store in (("factorized", fst), ("dense_uv", pst)):
            res, s, hist = run(DSPDCSolver, store, tmp, args.fepochs, loss="logistic", l2=args.l2, tol=1e-12,
                               solver="dspdc", dspdc_q=args.q)
            secs = hist[-1]["update_seconds"]
            its = hist[-1]["iterations"]
            fact[name] = {"seconds_per_iteration": secs / its, "iterations": its, "m": s.m, "q": s.q,
                          "gap_after": res["gap"]}
        fact["speedup"] = fact["dense_uv"]["seconds_per_iteration"] / fact["factorized"]["seconds_per_iteration"]
        m, q = fact["factorized"]["m"], fact["factorized"]["q"]
        # entries touched: a dot and a scatter per row, five passes over V^j per coordinate
        fact["predicted_speedup"] = (2 * m * args.fcols + 5 * q) / (2 * m * args.k + 5 * q * args.k)
        out["factorized"] = fact
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
