"""Helpers shared by the solver benchmarks: in-memory stores and a solver run without the CLI."""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
import time
import uuid

import ooc
from ooc.engine import run as run_solver
from ooc.runs.rundir import RunDir
from ooc.solvers.problem import make_problem
from ooc.solvers.rcd_dual import RCDDualSolver
from ooc.solvers.rcd_primal import RCDPrimalSolver

# run an RCD solver as ooc.train._execute does
T = importlib.import_module("ooc.train")
SHM = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
SOLVERS = {"rcd-dual": RCDDualSolver, "rcd-primal": RCDPrimalSolver}


def store(X, y, kind="auto", block_bytes=None):
    return ooc.convert(X, f"memory://bench-{uuid.uuid4().hex[:8]}", y=y, dtype="float64", label_kind=kind,
                       block_bytes=block_bytes)


def run(name, st, max_epochs, **kw):
    """Run solver ``name`` on ``st``; returns (result, history)."""
    o = dict(T.DEFAULTS)
    o.update({k: v for k, v in kw.items() if k in T.DEFAULTS})
    pb = make_problem(st, o)
    d = tempfile.mkdtemp(prefix="ooc-bench-", dir=SHM)
    try:
        rd = RunDir.create(d, {}, overwrite=True)
        opts = {"tol": o["tol"], "memory": kw.get("memory", 1 << 30), "seed": o["seed"], "checkpoint_every": 1e9,
                "sampling": o["sampling"], "paging": kw.get("paging")}
        s = SOLVERS[name](pb, rd, opts)
        t = time.perf_counter()
        res = run_solver(s, max_epochs, resume=False)
        res["wall"] = time.perf_counter() - t
        res.pop("w")
        return res, rd.history()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def first(hist, pred, key):
    for e in hist:
        if pred(e):
            return e[key]
    return None
