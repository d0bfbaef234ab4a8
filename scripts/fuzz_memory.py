"""The memory promise against cells nobody listed: random store shapes x solvers x options x limits.

``scripts/bench_memory.py`` runs the issue's matrix; this draws cells at random (a seeded generator)
and checks the promise as a self-consistent property, whatever the shape (docs/training.rst, "Memory"):

* ``ooc train STORE --memory X`` (the whole process) either trains with a peak resident size
  (``/usr/bin/time -v``) of at most ``X``, or is refused before its first epoch in one line naming
  ``F``, the smallest ``--memory`` that works, with ``F > X``;
* at ``X >= F`` (the figure ``ooc info`` names for the solver and the same training options, or the one a
  refusal named) it trains, and its peak is at most ``X``; a refusal at ``X < F`` names ``F`` (to the
  measured difference between what the two processes hold beside the work).

Each cell draws rows, columns, nonzeros a row, the task (binary, regression, 5 or 20 classes, one-vs-rest
or Crammer-Singer), the solver, ``--threads``, ``--fit-intercept``, ``--l1`` and a multiple of the
smallest figure named (0.5 to 2). A refused cell is run again at the figure its refusal named.

Prints one JSON line per run and a summary line (runs, cells, violations: target 0). Run::

    python scripts/fuzz_memory.py --cells 40 --seed 1 --work /tmp/fuzz-memory
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys

OOC = [sys.executable, "-m", "ooc.cli"]
SOLVERS = ("auto", "sdca", "acc-sdca", "rcd-primal", "dgpd")
#: how far a refusal's figure may be from ooc info's for the same options (the processes' own sizes differ)
AGREE = 8 << 20
FIGURE = re.compile(r"smallest --memory that works here is ([0-9.]+ ?[KMGT]?i?B)")


def draw(rng: random.Random) -> dict:
    """One cell: a store shape and a training command's options."""
    cols = 1 << rng.randint(8, 22)
    task = rng.choice(("binary", "binary", "regression", "multiclass5", "multiclass20"))
    cell = {"rows": rng.choice((20_000, 60_000, 150_000, 400_000)), "cols": cols,
            "nnz": min(cols, rng.choice((3, 15, 50, 200))), "task": task,
            "solver": rng.choice(SOLVERS), "threads": rng.choice((0, 1)),
            "intercept": rng.random() < 0.3, "l1": rng.choice((0.0, 0.0, 1e-4)),
            "factor": rng.choice((0.5, 0.9, 1.0, 1.0, 1.2, 2.0))}
    if task.startswith("multiclass"):
        cell["multiclass"] = rng.choice(("ovr", "ovr", "crammer-singer"))
    if task == "regression" and cell["solver"] == "dgpd":
        cell["solver"] = "sdca"
    if cell["solver"] not in ("auto", "sdca"):  # --fit-intercept trains with sdca only (refused otherwise)
        cell["intercept"] = False
    if cell.get("multiclass") == "crammer-singer":  # its max-of-hinge loss, by sdca, no intercept (refused)
        cell.update(solver=rng.choice(("auto", "sdca")), l1=0.0, intercept=False)
    return cell


def store_for(work: str, c: dict) -> str:
    name = f"s-{c['rows']}-{c['cols']}-{c['nnz']}-{c['task']}.zarr"
    path = os.path.join(work, name)
    if not os.path.exists(path):
        task = ["--task", "regression"] if c["task"] == "regression" else \
            ["--task", "multiclass", "--classes", c["task"][len("multiclass"):]] if c["task"] != "binary" else []
        # the generator's tables (20 classes x 2^22 columns) want more than a small default leaves
        subprocess.run([*OOC, "synth", path, "--rows", str(c["rows"]), "--cols", str(c["cols"]),
                        "--nnz-per-row", str(c["nnz"]), "--memory", "8GiB", *task], check=True, capture_output=True)
    return path


def options(c: dict) -> list[str]:
    o = ["--threads", str(c["threads"])]
    if c["solver"] != "auto":
        o += ["--solver", c["solver"]]
    if c["intercept"]:
        o.append("--fit-intercept")
    if c["l1"]:
        o += ["--l1", str(c["l1"])]
    if c.get("multiclass"):
        o += ["--multiclass", c["multiclass"]]
    if c.get("multiclass") == "crammer-singer":
        o += ["--loss", "hinge"]
    if c["task"] == "regression":
        o += ["--loss", "squared"]
    return o


class OptionsRefused(Exception):
    """``ooc info`` refused the cell's training options (as ``ooc train`` would): the cell is skipped."""


def smallest(store: str, c: dict) -> int:
    """The smallest --memory ``ooc info`` names for the cell's training options (those of its train command)."""
    r = subprocess.run([*OOC, "info", store, "--json", *options(c)], capture_output=True, text=True)
    if r.returncode:
        raise OptionsRefused(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}")
    info = json.loads(r.stdout)
    fit = info["memory_fit"]
    name = fit["auto_solver"] if c["solver"] == "auto" else c["solver"]
    if c.get("multiclass") == "crammer-singer":
        name += "-crammer-singer"
    return int(fit["families"][name]["smallest_memory"])


def to_bytes(text: str) -> int:
    m = re.match(r"([0-9.]+) ?([KMGT]?)i?B", text)
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2) or " "))


def run(work: str, store: str, c: dict, memory: int, epochs: int) -> dict:
    out = os.path.join(work, "run")
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["/usr/bin/time", "-v", *OOC, "train", store, "--out", out, "--max-epochs", str(epochs), "--json",
           "--memory", str(memory), *options(c)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("ooc:") and "error" in ln]
    named = FIGURE.search(r.stderr)
    return {"memory": memory, "rc": r.returncode, "peak": int(peak.group(1)) * 1024 if peak else None,
            "refused": bool(named), "named": to_bytes(named.group(1)) if named else None,
            "error": lines[-1][:300] if lines else None}


def check(res: dict, floor: int) -> str | None:
    """The violation ``res`` shows (None: the promise held)."""
    if res["rc"] == 0:
        return None if res["peak"] <= res["memory"] else f"peak {res['peak'] / res['memory']:.3f} x --memory"
    if res["refused"]:
        if res["memory"] >= floor:
            return "refused at or above the figure named"
        if res["named"] <= res["memory"]:
            return "refusal named a figure not above --memory"
        # ooc info and the refusal make the figure by one computation (ooc.memfit): they differ only by what
        # the two processes hold beside the work (predicted by info, measured by train)
        return None if abs(res["named"] - floor) <= AGREE else \
            f"refusal named {res['named'] >> 20} MiB where ooc info names {floor >> 20} MiB"
    return f"failed: {res['error']}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/fuzz-memory")
    ap.add_argument("--cells", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    rng = random.Random(a.seed)
    runs = violations = 0
    for i in range(a.cells):
        c = draw(rng)
        store = store_for(a.work, c)
        try:
            floor = smallest(store, c)
        except OptionsRefused as e:
            print(json.dumps({"cell": i, **c, "skipped": str(e)[:300]}), flush=True)
            continue
        memory = int(floor * c["factor"])
        res = run(a.work, store, c, memory, a.epochs)
        bad = check(res, floor)
        runs += 1
        violations += bad is not None
        print(json.dumps({"cell": i, **c, "floor": floor, **res, "violation": bad}), flush=True)
        if res["refused"] and res["named"]:  # the figure a refusal names works
            again = run(a.work, store, c, res["named"], a.epochs)
            bad = check(again, res["named"])
            runs += 1
            violations += bad is not None
            print(json.dumps({"cell": i, "rerun_at_named": True, **again, "violation": bad}), flush=True)
    print(json.dumps({"summary": True, "cells": a.cells, "runs": runs, "violations": violations}), flush=True)
    sys.exit(1 if violations else 0)


if __name__ == "__main__":
    main()
