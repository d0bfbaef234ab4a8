"""The memory promise as a matrix: store shapes x solvers and options x commands x limits.

The promise (docs/training.rst, "Memory"): an explicit ``--memory X`` is a ceiling on the whole
process's peak resident size, and under a memory cgroup of ``L`` the default (``--memory auto``)
is never OOM-killed when ``L`` is at least the smallest limit ``ooc info`` names; a limit too small
is refused before the first epoch with one line naming one that works.

For each store shape (``--shapes``; the issue's tall 5M x 2^20 x 15, wide 200k x 2^24 x 50,
dense-ish 1M x 1000 x 200 and a 20-class store, scaled by ``--scale``) and each cell (a solver and
its options, or another command), this script

(a) runs the command with ``--memory X`` for ``X`` at ``--explicit`` multiples of the smallest
    limit ``ooc info --json`` names for the cell's solver, measuring the peak resident size with
    ``/usr/bin/time -v`` (``peak_over_memory`` = peak / X; a refusal is an outcome too:
    ``refused``), and
(b) runs it with the default ``--memory auto`` under ``scripts/run-capped L`` for ``L`` at
    ``--capped`` multiples of that smallest limit, printing the exit status, the OOM kills and the
    budget auto chose (from ``--json``).

Prints one JSON line per run and a final summary line: the number of runs, the cells over their
``--memory`` (target 0) and the OOM kills at limits at least the smallest named (target 0).

``--text`` measures the commands that read text instead (convert, append, predict, evaluate on svmlight,
CSV and VW inputs of the shapes in :data:`TEXT_SHAPES`, scaled by ``--scale``): each first with
``--memory 1B``, which is refused naming the smallest ``--memory`` that works, then at ``--explicit``
multiples of that figure; one JSON line a run with ``peak_over_memory`` (the peak resident size from
``/usr/bin/time -v`` over ``X``)::

    python scripts/bench_memory.py --text --scale 1 --explicit 1.0,1.5,3.0 --work /tmp/bench-text

Run (the full matrix takes hours on 2 cores; ``--scale 0.2 --epochs 2`` about forty minutes)::

    python scripts/bench_memory.py --scale 0.2 --epochs 2 --work /tmp/bench-memory

``--quick`` is a smaller matrix for a check on a laptop (each shape's rows times :data:`QUICK_SCALE`, one
epoch, ``--memory`` at 1 and 1.5 times the smallest, one cgroup at the smallest); ``--rows SHAPE=N,...``
sets a shape's rows outright (``--rows dense=200000,multi=200000``). On a multiclass store the ``sdca`` cell
is one-vs-rest (``ovr`` names it) and ``cs`` Crammer-Singer, whose smallest figure ``ooc info`` names as
``sdca-crammer-singer``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OOC = [sys.executable, "-m", "ooc.cli"]

#: name -> (rows, cols, nnz per row, synth options)
SHAPES = {
    "tall": (5_000_000, 1 << 20, 15, []),
    "wide": (200_000, 1 << 24, 50, []),
    "dense": (1_000_000, 1000, 200, []),
    "multi": (500_000, 1 << 18, 30, ["--task", "multiclass", "--classes", "20"]),
}

#: cell -> (solver ooc info names, train options); "cmd:" cells run another command
CELLS = {
    "sdca": ("sdca", ["--solver", "sdca"]),
    "sdca-1thread": ("sdca", ["--solver", "sdca", "--threads", "1"]),
    "acc-sdca": ("acc-sdca", ["--solver", "acc-sdca", "--l2", "1e-7"]),
    "rcd-primal": ("rcd-primal", ["--solver", "rcd-primal"]),
    "pure-l1": ("rcd-primal", ["--l2", "0", "--l1", "1e-4"]),
    "dgpd": ("dgpd", ["--solver", "dgpd", "--l1", "1e-4"]),
    "intercept": ("sdca", ["--fit-intercept"]),
    "validation": ("sdca", ["--validation", "{store}"]),
    "local2": ("sdca", ["--distributed", "local:2"]),
    "ovr": ("sdca", ["--solver", "sdca", "--multiclass", "ovr"]),
    "cs": ("sdca-crammer-singer", ["--multiclass", "crammer-singer", "--loss", "smooth-hinge"]),
    "cmd:evaluate": ("sdca", []),
    "cmd:predict": ("sdca", []),
    "cmd:append": ("sdca", []),
}
MULTICLASS_ONLY = {"cs", "ovr"}
#: ``--quick``: every shape's rows times this
QUICK_SCALE = 0.2

#: --text: name -> (format, rows, features a row (CSV: columns), id range / hash bits, extra convert options)
TEXT_SHAPES = {
    "svm-tall": ("svmlight", 2_000_000, 15, 1 << 20, []),
    "svm-wide": ("svmlight", 200_000, 30, 1 << 22, []),
    "svm-long-lines": ("svmlight", 20_000, 2000, 1 << 20, []),
    "csv-dense": ("csv", 200_000, 100, 100, []),
    "vw-hashed": ("vw", 500_000, 20, 22, ["--hash-bits", "22"]),
}
TEXT_COMMANDS = ("convert", "append", "predict", "evaluate")


def sh(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def make_store(work: str, name: str, scale: float, rows_set: dict | None = None) -> str:
    rows, cols, nnz, extra = SHAPES[name]
    rows = int((rows_set or {}).get(name) or rows * scale)
    path = os.path.join(work, f"{name}-{rows}.zarr")
    if not os.path.exists(path):
        r = sh(OOC + ["synth", path, "--rows", str(max(1000, rows)), "--cols", str(cols),
                      "--nnz-per-row", str(min(nnz, cols)), "--layout", "both", *extra])
        if r.returncode:
            raise SystemExit(f"synth {name}: {r.stderr.strip()}")
    return path


def new_rows(store: str) -> str:
    """An svmlight file of the first row block of ``store`` (what ``append`` adds), 1-based ids."""
    path = store + ".append.svm"
    if not os.path.exists(path):
        import ooc

        st = ooc.open_store(store)
        blk = st.block("rows", 0)
        y = st.read_labels(blk.start, blk.stop)
        with open(path + ".tmp", "w") as f:
            for i in range(blk.stop - blk.start):
                lo, hi = blk.indptr[i], blk.indptr[i + 1]
                feats = " ".join(f"{j + 1}:{v:.6g}" for j, v in zip(blk.indices[lo:hi], blk.data[lo:hi]))
                f.write(f"{y[i]:g} {feats}\n")
        os.replace(path + ".tmp", path)
    return path


def smallest(store: str, solver: str) -> int:
    info = json.loads(sh(OOC + ["info", store, "--json"], check=True).stdout)
    return int(info["memory_fit"]["families"][solver]["smallest_memory"])


def command(cell: str, store: str, run: str, epochs: int, memory: str | None) -> list[str]:
    mem = ["--memory", memory] if memory else []
    if cell == "cmd:evaluate":
        return OOC + ["evaluate", run, store, "--json", *mem]
    if cell == "cmd:predict":
        return OOC + ["predict", run, store, "--out", run + ".pred", *mem]
    if cell == "cmd:append":
        return OOC + ["append", store, new_rows(store), "--out", run + ".appended.zarr", *mem]
    opts = [o.format(store=store) for o in CELLS[cell][1]]
    return OOC + ["train", store, "--out", run, "--max-epochs", str(epochs), "--overwrite", "--json", *opts, *mem]


def peak_kib(stderr: str) -> int | None:
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    return int(m.group(1)) if m else None


def one_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.startswith("ooc:")]
    return lines[-1][:300] if lines else ""


def write_text(work: str, name: str, scale: float) -> str:
    """The text input of shape ``name`` (:data:`TEXT_SHAPES`), written once into ``work``."""
    import numpy as np

    fmt, rows, k, width, _ = TEXT_SHAPES[name]
    rows = max(1000, int(rows * scale))
    path = os.path.join(work, f"{name}.{ {'svmlight': 'svm'}.get(fmt, fmt)}")
    if os.path.exists(path):
        return path
    rng = np.random.default_rng(0)
    with open(path + ".tmp", "w") as f:
        for s in range(0, rows, 10_000):
            m = min(10_000, rows - s)
            y = np.where(rng.random(m) < 0.5, 1, -1)
            vals = rng.normal(size=(m, k)).round(4)
            lines = []
            for i in range(m):
                if fmt == "csv":
                    lines.append(f"{y[i]}," + ",".join(map(str, vals[i])))
                elif fmt == "vw":
                    ids = rng.integers(0, 1 << 30, k)
                    lines.append(f"{y[i]} |f " + " ".join(f"t{j}:{v}" for j, v in zip(ids, vals[i])))
                else:
                    ids = np.unique(rng.integers(1, width, k))
                    lines.append(f"{y[i]} " + " ".join(f"{j}:{v}" for j, v in zip(ids, vals[i])))
            f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)
    return path


def text_command(cmd: str, src: str, store: str, run: str, out: str, extra: list, memory: str) -> list[str]:
    mem = ["--memory", memory]
    if cmd == "convert":
        return OOC + ["convert", src, out, "--overwrite", *extra, *mem]
    if cmd == "append":
        return OOC + ["append", store, src, "--out", out, "--overwrite", *mem]
    if cmd == "predict":
        return OOC + ["predict", run, src, "--out", out, *mem]
    return OOC + ["evaluate", run, src, "--json", *mem]


def bench_text(a) -> None:
    """``--text``: the commands that read text, refused at 1B, then at multiples of the figure named."""
    runs = over = 0
    for name in a.shapes.split(","):
        src = write_text(a.work, name, a.scale)
        extra = TEXT_SHAPES[name][4]
        store, run = os.path.join(a.work, f"{name}.zarr"), os.path.join(a.work, f"{name}-run")
        if not os.path.exists(store):
            sh(OOC + ["convert", src, store, *extra], check=True)
        if not os.path.exists(run):
            sh(OOC + ["train", store, "--out", run, "--max-epochs", "1"], check=True)
        for cmd in a.commands.split(","):
            out = os.path.join(a.work, f"out-{name}-{cmd}")
            r = sh(text_command(cmd, src, store, run, out, extra, "1B"))
            m = re.search(r"smallest --memory that works here is ([0-9.]+) ([KMGT])iB", r.stderr)
            if not m:
                print(json.dumps({"input": name, "command": cmd, "error": "not refused at 1B: " + one_line(r.stderr)}))
                continue
            least = int(float(m.group(1)) * (1 << {"K": 10, "M": 20, "G": 30, "T": 40}[m.group(2)]))
            if cmd == "convert" and TEXT_SHAPES[name][0] == "svmlight":
                # svmlight does not say its width: at the first figure it may be refused again once its
                # ids are read, naming the figure for them
                r = sh(text_command(cmd, src, store, run, out, extra, str(least)))
                m2 = re.search(r"smallest --memory that works here is ([0-9.]+) ([KMGT])iB", r.stderr)
                if r.returncode and m2:
                    least = int(float(m2.group(1)) * (1 << {"K": 10, "M": 20, "G": 30, "T": 40}[m2.group(2)]))
                shutil.rmtree(out, ignore_errors=True)
            for f in (float(x) for x in a.explicit.split(",") if x):
                mem = int(least * f)
                t0 = time.time()
                r = sh(["/usr/bin/time", "-v"] + text_command(cmd, src, store, run, out, extra, str(mem)))
                peak = peak_kib(r.stderr)
                ratio = peak * 1024 / mem if peak else None
                runs += 1
                over += bool(ratio and ratio > 1.0 and r.returncode == 0)
                print(json.dumps({"input": name, "command": cmd, "memory": mem, "times_smallest": f,
                                  "exit": r.returncode, "peak": peak * 1024 if peak else None,
                                  "peak_over_memory": round(ratio, 3) if ratio else None,
                                  "seconds": round(time.time() - t0, 1),
                                  "error": "" if r.returncode == 0 else one_line(r.stderr)}), flush=True)
                shutil.rmtree(out, ignore_errors=True)
                if os.path.isfile(out):
                    os.remove(out)
    print(json.dumps({"summary": True, "runs": runs, "over_memory": over, "target": 0}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/bench-memory")
    ap.add_argument("--scale", type=float, default=1.0, help="rows of every shape times this")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--explicit", default="1.0,1.5,3.0", help="--memory at these multiples of the smallest")
    ap.add_argument("--capped", default="1.0,1.5", help="cgroup limits at these multiples of the smallest")
    ap.add_argument("--rows", default="", help="SHAPE=N,...: a shape's rows outright (overrides --scale)")
    ap.add_argument("--quick", action="store_true",
                    help=f"rows times {QUICK_SCALE}, 1 epoch, --explicit 1.0,1.5, --capped 1.0")
    ap.add_argument("--text", action="store_true", help="the commands that read text (TEXT_SHAPES), not training")
    ap.add_argument("--commands", default=",".join(TEXT_COMMANDS), help="--text: these commands")
    a = ap.parse_args()
    if a.quick:
        a.scale, a.epochs, a.explicit, a.capped = QUICK_SCALE, 1, "1.0,1.5", "1.0"
    rows_set = {k: int(float(v)) for k, v in (item.split("=") for item in a.rows.split(",") if item)}
    os.makedirs(a.work, exist_ok=True)
    if a.text:
        if a.shapes == ",".join(SHAPES):
            a.shapes = ",".join(TEXT_SHAPES)
        bench_text(a)
        return
    runs = over = kills = 0
    have_time = os.path.exists("/usr/bin/time")
    for shape, cell in itertools.product(a.shapes.split(","), a.cells.split(",")):
        if cell in MULTICLASS_ONLY and shape != "multi":
            continue
        store = make_store(a.work, shape, a.scale, rows_set)
        solver = CELLS[cell][0]
        least = smallest(store, solver)
        run = os.path.join(a.work, f"run-{shape}-{cell.replace(':', '-')}")
        if cell.startswith("cmd:"):  # a model to predict with and evaluate
            sh(command("sdca", store, run, 1, None))
        for f in (float(x) for x in a.explicit.split(",") if x):
            mem = int(least * f)
            cmd = command(cell, store, run, a.epochs, str(mem))
            t0 = time.time()
            r = sh((["/usr/bin/time", "-v"] if have_time else []) + cmd)
            peak = peak_kib(r.stderr)
            refused = r.returncode != 0 and "smallest --memory that works" in r.stderr
            ratio = peak * 1024 / mem if peak else None
            runs += 1
            over += bool(ratio and ratio > 1.0 and r.returncode == 0)
            print(json.dumps({"shape": shape, "cell": cell, "mode": "explicit", "memory": mem, "times_smallest": f,
                              "exit": r.returncode, "refused": refused, "peak": peak * 1024 if peak else None,
                              "peak_over_memory": round(ratio, 3) if ratio else None,
                              "seconds": round(time.time() - t0, 1), "error": "" if r.returncode == 0 else
                              one_line(r.stderr)}), flush=True)
            shutil.rmtree(run + ".appended.zarr", ignore_errors=True)
        for f in (float(x) for x in a.capped.split(",") if x):
            lim = int(least * f)
            cmd = command(cell, store, run, a.epochs, None)
            t0 = time.time()
            r = sh([os.path.join(HERE, "run-capped"), str(lim), "--", *cmd])
            m = re.search(r"run-capped: limit=(\S+) peak=(\S+) oom_kills=(\d+) exit=(-?\d+)", r.stderr)
            if r.returncode == 3:
                print(json.dumps({"shape": shape, "cell": cell, "mode": "capped", "skipped": one_line(r.stderr)}))
                continue
            budget = None
            for line in reversed(r.stdout.strip().splitlines()):
                try:
                    budget = json.loads(line).get("memory_budget")
                    break
                except (ValueError, AttributeError):
                    continue
            oom = int(m.group(3)) if m else None
            runs += 1
            kills += bool(oom)
            print(json.dumps({"shape": shape, "cell": cell, "mode": "capped", "limit": lim, "times_smallest": f,
                              "exit": r.returncode, "oom_kills": oom, "cgroup_peak": m.group(2) if m else None,
                              "auto_budget": budget, "seconds": round(time.time() - t0, 1),
                              "error": "" if r.returncode == 0 else one_line(r.stderr)}), flush=True)
            shutil.rmtree(run + ".appended.zarr", ignore_errors=True)
    print(json.dumps({"summary": True, "runs": runs, "over_memory": over, "oom_kills_at_or_above_smallest": kills,
                      "target": "0 and 0"}))


if __name__ == "__main__":
    main()
