"""Distributed training (CoCoA+ on Dask): time to a certified gap with 1, 2 and 4 local workers.

Generates a binary text-like store, trains single-machine sdca as the reference,
then ``--distributed local:K`` for each K, and prints ONE JSON line with, per K:
seconds to the certified relative gap, rounds, communication per round (bytes
sent to and received from the workers) and the primal objective against the
single-machine one.

    python scripts/bench_distributed.py [--rows 200000] [--cols 100000] [--nnz 20] [--workers 1,2,4]

On one machine the workers share its cores and disk, so this measures the
algorithm's rounds and overheads, not a cluster's speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import ooc
from ooc.synth import SynthSource


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--cols", type=int, default=100_000)
    ap.add_argument("--nnz", type=int, default=20)
    ap.add_argument("--l2", type=float, default=1e-5)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--block-mib", type=float, default=4.0)
    ap.add_argument("--max-epochs", type=int, default=200)
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="ooc-bench-dist-")
    store = os.path.join(work, "data.zarr")
    ooc.convert(SynthSource(args.rows, args.cols, args.nnz, seed=0), store,
                block_bytes=int(args.block_mib * (1 << 20)))
    opts = dict(loss="logistic", l2=args.l2, tol=args.tol, max_epochs=args.max_epochs)
    t = time.perf_counter()
    single = ooc.train(store, os.path.join(work, "single"), **opts)
    out = {"rows": args.rows, "cols": args.cols, "nnz_per_row": args.nnz, "l2": args.l2, "tol": args.tol,
           "single": {"seconds": round(time.perf_counter() - t, 2), "epochs": single.result["epochs"],
                      "primal": single.result["primal"], "converged": single.result["converged"]},
           "distributed": []}
    for k in (int(x) for x in args.workers.split(",")):
        t = time.perf_counter()
        run = ooc.train(store, os.path.join(work, f"dist{k}"), distributed=f"local:{k}", **opts)
        wall = time.perf_counter() - t
        h = run.history
        sent = [e.get("bytes_sent", 0) for e in h]
        recv = [e.get("bytes_received", 0) for e in h]
        out["distributed"].append({
            "workers": k, "wall_seconds": round(wall, 2), "train_seconds": round(run.result["seconds"], 2),
            "rounds": run.result["epochs"], "converged": run.result["converged"],
            "bytes_sent_per_round": int(sum(sent) / max(len(sent), 1)),
            "bytes_received_per_round": int(sum(recv) / max(len(recv), 1)),
            "primal": run.result["primal"],
            "rel_diff_primal_vs_single": abs(run.result["primal"] - single.result["primal"]) / abs(single.result["primal"]),
        })
        print(f"workers={k}: {run.result['epochs']} rounds, {wall:.1f} s, converged={run.result['converged']}",
              file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
