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

``--convert`` checks ``ooc convert`` instead, on inputs it writes: each cell draws a format (svmlight
0- or 1-based, with or without ``--n-features``; CSV; VW hashed into ``2**B`` columns; an ``.npz`` piped
on standard input), rows, a width (``2**8`` to ``2**24`` ids or hashed columns; CSV: 2**4 to 2**11 dense
columns), features a row (up to long lines of thousands, and for svmlight and VW sometimes a few lines of
``2**19`` to ``2**21`` features, longer than the blocks of the figure named before reading), the dtype,
layout, threads and whether Numba's cache is cold (a fresh ``NUMBA_CACHE_DIR``: the kernels compile in the
measured process). The promise, per cell:

* ``--memory 1B`` is refused naming ``F``, the smallest ``--memory`` that works;
* at ``F`` the conversion succeeds (what is known only once read, an svmlight file's width or a line's
  length, may be refused once more, naming ``F2 > F``: then ``F2`` is the figure, and so on, twice at
  most) with a peak resident size (``/usr/bin/time -v``) of at most ``F``; at ``1.5 F`` too;
* as root, under a memory cgroup of ``F`` (``scripts/run-capped F``, page cache counted; ``--cold-pages``
  drops the page cache first) the default ``--memory auto`` conversion succeeds, with no OOM kill.

::

    python scripts/fuzz_memory.py --convert --cells 30 --seed 1 --work /tmp/fuzz-convert

``--fresh-cache`` checks training where every process starts with an empty Numba cache (a new
``NUMBA_CACHE_DIR`` each: a new install, every kernel compiled in the measured process). Each cell draws a
store shape (few columns and many rows; HDF5 float64; a wide Zarr store), a solver (sdca, acc-sdca,
rcd-primal, dgpd with its fallback) and ``--fit-intercept`` / ``--l1`` / ``--threads``. Per cell, with ``F``
the figure ``ooc info --memory 1M`` names and ``T`` the one ``ooc train --memory 1M`` names:

* ``T`` is ``F`` (to what the two processes hold beside the work: ``AGREE``);
* at ``X = F`` the run trains (dgpd: and its fallback too) with a peak resident size of at most ``X``;
* at ``X`` just below ``T`` (``T - 1 MiB``) it is refused, naming ``T``: train accepts exactly from the
  figure it names.

::

    python scripts/fuzz_memory.py --fresh-cache --cells 6 --seed 1 --work /tmp/fuzz-fresh
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


CONVERT_FORMATS = ("svmlight1", "svmlight0", "svmlight1-n", "csv", "vw", "npz-pipe")


def draw_convert(rng: random.Random) -> dict:
    """One ``--convert`` cell: an input's format and shape, and the conversion's options."""
    fmt = rng.choice(CONVERT_FORMATS)
    long_lines = rng.random() < 0.2
    huge = fmt != "csv" and fmt != "npz-pipe" and rng.random() < 0.2  # lines past the first figure's blocks
    if huge:
        width = 1 << rng.randint(21, 24)
        nnz = 1 << rng.randint(19, 21)
        rows = 200
    elif fmt == "csv":
        width = 1 << rng.randint(4, 11)
        nnz = width
        rows = max(200, min(rng.choice((2_000, 10_000, 30_000)), 1_000_000 // width))
    else:
        width = 1 << rng.randint(8, 24)
        nnz = min(width // 2, rng.choice((2000, 5000)) if long_lines else rng.choice((3, 15, 50, 200)))
        rows = max(200, min(rng.choice((2_000, 10_000, 30_000)), 1_000_000 // max(nnz, 1)))
    if fmt == "npz-pipe":  # rows to tens of MiB decoded: what is read whole is charged
        rows = rng.choice((50_000, 200_000, 600_000)) // max(1, nnz // 15)
    return {"format": fmt, "rows": rows, "width": width, "nnz": max(1, nnz), "huge": huge,
            "dtype": rng.choice(("float32", "float64")),
            "layout": rng.choice(("both", "both", "rows", "cols")), "threads": rng.choice((0, 1)),
            "cold": rng.random() < 0.25}


def write_input(work: str, c: dict) -> str:
    """The cell's text input (written once per shape; seeded by it)."""
    import numpy as np

    fmt = c["format"].split("-")[0]
    ext = {"csv": "csv", "vw": "vw", "npz": "npz"}.get(fmt, "svm")
    path = os.path.join(work, f"in-{fmt}-{c['rows']}-{c['width']}-{c['nnz']}{'-huge' if c.get('huge') else ''}.{ext}")
    if os.path.exists(path):
        return path
    rng = np.random.default_rng([c["rows"], c["width"], c["nnz"]])
    if fmt == "npz":
        import scipy.sparse as sp

        ids = np.sort(rng.integers(0, c["width"], (c["rows"], c["nnz"])), axis=1)
        X = sp.csr_matrix((rng.normal(size=ids.size), ids.ravel(), np.arange(c["rows"] + 1) * c["nnz"]),
                          shape=(c["rows"], c["width"]))
        X.sum_duplicates()
        with open(path + ".tmp", "wb") as f:
            np.savez(f, data=X.data, indices=X.indices, indptr=X.indptr, shape=np.array(X.shape), format="csr",
                     y=np.where(rng.random(c["rows"]) < 0.5, 1.0, -1.0))
        os.replace(path + ".tmp", path)
        return path
    if c.get("huge"):  # a few lines of nnz features (ids spread over the width), between short ones
        with open(path + ".tmp", "w") as f:
            for i in range(c["rows"]):
                k = c["nnz"] if i % 50 == 1 else 5
                ids = np.unique(rng.integers(0, c["width"], k)) + (1 if fmt == "svmlight1" else 0)
                if fmt == "vw":
                    f.write(f"{1 if i % 2 else -1} |f " + " ".join(f"t{j}:1" for j in ids) + "\n")
                else:
                    f.write(f"{1 if i % 2 else -1} " + " ".join(f"{j}:1" for j in ids) + "\n")
        os.replace(path + ".tmp", path)
        return path
    base = 0 if fmt == "svmlight0" else 1
    with open(path + ".tmp", "w") as f:
        for s in range(0, c["rows"], 2000):
            m = min(2000, c["rows"] - s)
            y = np.where(rng.random(m) < 0.5, 1, -1)
            vals = rng.normal(size=(m, c["nnz"])).round(3)
            lines = []
            for i in range(m):
                if fmt == "csv":
                    lines.append(f"{y[i]}," + ",".join(map(str, vals[i])))
                elif fmt == "vw":
                    lines.append(f"{y[i]} |f " + " ".join(f"t{j}:{v}" for j, v in
                                                          zip(rng.integers(0, 1 << 30, c["nnz"]), vals[i])))
                else:
                    # ids spread over the width, the last one reached on the first row (the file's width)
                    ids = np.unique(rng.integers(base, base + c["width"], c["nnz"]))
                    if i == 0 and s == 0:
                        ids = np.unique(np.append(ids[:-1], base + c["width"] - 1))
                    lines.append(f"{y[i]} " + " ".join(f"{j}:{v}" for j, v in zip(ids, vals[i])))
            f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)
    return path


def convert_options(c: dict) -> list[str]:
    o = ["--dtype", c["dtype"], "--layout", c["layout"], "--threads", str(c["threads"])]
    if c["format"] == "vw":
        o += ["--hash-bits", str(c["width"].bit_length() - 1)]
    if c["format"].startswith("svmlight"):
        o += ["--index-base", "0" if c["format"] == "svmlight0" else "1"]
    if c["format"].endswith("-n"):
        o += ["--n-features", str(c["width"])]
    if c["format"] == "npz-pipe":
        o += ["--input-format", "npz"]
    return o


def run_convert(work: str, src: str, c: dict, memory: str | None, capped: int | None = None,
                cold_pages: bool = False) -> dict:
    """One conversion of ``src`` (``memory`` None: auto under a cgroup of ``capped`` bytes)."""
    out = os.path.join(work, "out.zarr")
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ)
    if c["cold"]:  # a fresh cache: every kernel compiles in this process
        cache = os.path.join(work, "numba-cold")
        shutil.rmtree(cache, ignore_errors=True)
        env["NUMBA_CACHE_DIR"] = cache
    piped = c["format"] == "npz-pipe"
    cmd = [*OOC, "convert", "-" if piped else src, out, *convert_options(c)] + (["--memory", memory] if memory else [])
    if piped:  # the .npz on standard input, through a pipe
        cmd = ["sh", "-c", 'cat "$0" | exec "$@"', src, *cmd]
    if capped is not None:
        capper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run-capped")
        cmd = [capper, str(capped), *(["--cold"] if cold_pages else []), "--", *cmd]
    else:
        cmd = ["/usr/bin/time", "-v", *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    shutil.rmtree(out, ignore_errors=True)
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    capped_line = re.search(r"run-capped: limit=(\S+) peak=(\S+) oom_kills=(\d+) exit=(-?\d+)", r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("ooc:")]
    named = FIGURE.search(r.stderr)
    return {"memory": memory, "rc": r.returncode, "peak": int(peak.group(1)) * 1024 if peak else None,
            "named": to_bytes(named.group(1)) if named else None,
            "oom_kills": int(capped_line.group(3)) if capped_line else None,
            "cgroup_peak": capped_line.group(2) if capped_line else None, "error": lines[-1][:300] if lines else None}


def check_convert(res: dict, memory: int) -> str | None:
    """The violation a conversion at ``--memory`` ``memory`` (>= the figure named) shows, or None."""
    if res["rc"] != 0:
        return f"failed at or above the figure named: {res['error']}"
    if res["peak"] is not None and res["peak"] > memory:
        return f"peak {res['peak'] / memory:.3f} x --memory"
    return None


def fuzz_convert(a) -> None:
    """``--convert``: the cells of :func:`draw_convert`, each refused at 1B, then at 1 and 1.5 times the figure."""
    rng = random.Random(a.seed)
    capped = os.geteuid() == 0 and not a.no_cgroup
    runs = violations = 0

    def report(i, c, res, bad, **more):
        nonlocal runs, violations
        runs += 1
        violations += bad is not None
        print(json.dumps({"cell": i, **c, **more, **res, "violation": bad}), flush=True)

    for i in range(a.cells):
        c = draw_convert(rng)
        src = write_input(a.work, c)
        first = run_convert(a.work, src, c, "1B")
        bad = None if first["rc"] and first["named"] else "not refused at 1B naming a figure"
        report(i, c, first, bad, step="1B")
        if bad:
            continue
        figure = first["named"]
        at = run_convert(a.work, src, c, str(figure))
        for _ in range(2):
            if not (at["rc"] and at["named"]):
                break
            # what is known only once read (an svmlight file's width, a line's length): refused when read,
            # naming a larger figure for it
            report(i, c, at, None if at["named"] > figure else "a second refusal named no more", step="1x-again")
            figure = at["named"]
            at = run_convert(a.work, src, c, str(figure))
        report(i, c, at, check_convert(at, figure), step="1x", figure=figure)
        more = run_convert(a.work, src, c, str(int(figure * 1.5)))
        report(i, c, more, check_convert(more, int(figure * 1.5)), step="1.5x", figure=figure)
        if capped:
            res = run_convert(a.work, src, c, None, capped=figure, cold_pages=a.cold_pages)
            bad = None if res["rc"] == 0 and not res["oom_kills"] else \
                f"under a cgroup of the figure named: exit {res['rc']}, {res['oom_kills']} OOM kills"
            report(i, c, res, bad, step="cgroup", figure=figure)
    print(json.dumps({"summary": True, "mode": "convert", "cells": a.cells, "runs": runs, "violations": violations}),
          flush=True)
    sys.exit(1 if violations else 0)


#: ``--fresh-cache`` store shapes: (rows, columns, nonzeros a row, format, dtype).
FRESH_SHAPES = ((300_000, 4, 4, "zarr", "float32"), (20_000, 5_000, 30, "hdf5", "float64"),
                (40_000, 1 << 18, 15, "zarr", "float32"))
FRESH_SOLVERS = ("sdca", "acc-sdca", "rcd-primal", "dgpd")


def draw_fresh(rng: random.Random) -> dict:
    """One ``--fresh-cache`` cell: a store shape and a training command's options."""
    rows, cols, nnz, fmt, dtype = rng.choice(FRESH_SHAPES)
    solver = rng.choice(FRESH_SOLVERS)
    return {"rows": rows, "cols": cols, "nnz": nnz, "format": fmt, "dtype": dtype, "task": "binary",
            "solver": solver, "threads": rng.choice((0, 1)), "intercept": solver == "sdca" and rng.random() < 0.3,
            "l1": rng.choice((0.0, 0.0, 1e-4)) if solver != "dgpd" else 0.0}


def fresh_store(work: str, c: dict) -> str:
    ext = "h5" if c["format"] == "hdf5" else "zarr"
    path = os.path.join(work, f"f-{c['rows']}-{c['cols']}-{c['nnz']}-{c['dtype']}.{ext}")
    if not os.path.exists(path):
        subprocess.run([*OOC, "synth", path, "--rows", str(c["rows"]), "--cols", str(c["cols"]), "--nnz-per-row",
                        str(c["nnz"]), "--format", c["format"], "--dtype", c["dtype"]], check=True,
                       capture_output=True)
    return path


def fuzz_fresh(a) -> None:
    """``--fresh-cache``: the cells of :func:`draw_fresh`, each process on a new, empty Numba cache."""
    rng = random.Random(a.seed)
    runs = violations = 0
    caches = iter(range(1 << 30))

    def fresh() -> None:
        cache = os.path.join(a.work, f"numba-fresh-{next(caches)}")
        shutil.rmtree(cache, ignore_errors=True)
        os.environ["NUMBA_CACHE_DIR"] = cache

    def report(i, c, res, bad, **more):
        nonlocal runs, violations
        runs += 1
        violations += bad is not None
        print(json.dumps({"cell": i, **c, **more, **res, "violation": bad}), flush=True)

    for i in range(a.cells):
        c = draw_fresh(rng)
        store = fresh_store(a.work, c)
        fresh()
        try:
            figure = smallest(store, c)
        except OptionsRefused as e:
            print(json.dumps({"cell": i, **c, "skipped": str(e)[:300]}), flush=True)
            continue
        fresh()
        named = run(a.work, store, c, 1 << 20, a.epochs)
        own = named["named"]
        bad = None if named["refused"] and own and abs(own - figure) <= AGREE else \
            f"train names {own} where ooc info names {figure}"
        report(i, c, named, bad, step="1M", figure=figure)
        fresh()
        at = run(a.work, store, c, figure, a.epochs)
        bad = None if at["rc"] == 0 and at["peak"] <= figure else \
            (f"peak {at['peak'] / figure:.3f} x --memory" if at["rc"] == 0 else f"failed at the figure: {at['error']}")
        report(i, c, at, bad, step="figure", figure=figure)
        if own:
            fresh()
            below = run(a.work, store, c, own - (1 << 20), a.epochs)
            bad = None if below["refused"] and below["named"] and below["named"] > below["memory"] else \
                "accepted below the figure train names"
            report(i, c, below, bad, step="below", figure=own)
    print(json.dumps({"summary": True, "mode": "fresh-cache", "cells": a.cells, "runs": runs,
                      "violations": violations}), flush=True)
    sys.exit(1 if violations else 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/fuzz-memory")
    ap.add_argument("--cells", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--convert", action="store_true", help="check ooc convert on generated text inputs instead")
    ap.add_argument("--fresh-cache", action="store_true",
                    help="check training with every process on a new, empty Numba cache (module docstring)")
    ap.add_argument("--no-cgroup", action="store_true", help="--convert: skip the run under a memory cgroup")
    ap.add_argument("--cold-pages", action="store_true",
                    help="--convert: drop the page cache before the cgroup run (run-capped --cold; slow on a shared machine)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    if a.convert:
        fuzz_convert(a)
        return
    if a.fresh_cache:
        fuzz_fresh(a)
        return
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
