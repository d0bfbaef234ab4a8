"""The memory promise of ``ooc predict`` / ``ooc evaluate`` / ``ooc append`` against cells nobody listed.

Each cell draws the model's classes (2 to 200; regression too), the width (2^8 to 2^22), the rows, the nonzeros
a row (a row's line length: up to 2^20 features), the input's format (svmlight, CSV, .npz or an ooc store),
whether a file is piped on standard input (``-``: an .npz is then spooled and charged as the file is), the
command and ``--proba``, and checks the promise (docs/training.rst, "Memory"):

* ``--memory 1B`` is refused before any work: one line naming ``F``, the smallest ``--memory`` that works,
  and no output written;
* at ``X = F x m`` (``m``: 1 in two cells of five, else 1.25, 1.5 or 2) the command succeeds, or is refused naming a figure above ``X``
  (an input whose size is only known once read: a refusal is no violation when it names a larger figure,
  which is then run), and its peak resident size (``/usr/bin/time -v``, "Maximum resident set size") is at
  most ``X``.

A model is trained once per (task, classes, width) on a small store of random rows (``--max-epochs 1``); the
input scored is drawn anew. Prints one JSON line per run and a summary line (cases, runs, violations: target
0). Run::

    python scripts/fuzz_memory_commands.py --cells 30 --seed 1 --work /tmp/fuzz-memory-commands
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

import numpy as np

OOC = [sys.executable, "-m", "ooc.cli"]
FIGURE = re.compile(r"smallest (?:--memory|limit) that works here is ([0-9.]+ ?[KMGT]?i?B)")
#: classes x width at most this (the model's coefficients, 8 bytes each, are the process's: 256 MiB)
MAX_CELLS = 1 << 25


def draw(rng: random.Random) -> dict:
    """One cell's parameters."""
    task = rng.choice(["binary", "multiclass", "multiclass", "regression"])
    classes = {"binary": 2, "regression": 1}.get(task) or rng.choice([3, 10, 50, 100, 200])
    fmt = rng.choice(["svmlight", "csv", "npz", "store"])
    cmd = rng.choice(["predict", "evaluate", "append"])
    if cmd == "append" and fmt == "store":  # append's new rows are a file
        fmt = "svmlight"
    bits = rng.randint(8, 10 if fmt == "csv" else 22)  # a CSV is dense: its width is its line
    while classes * (1 << bits) > MAX_CELLS:
        bits -= 1
    width = 1 << bits
    long_lines = fmt == "svmlight" and bits >= 20 and rng.random() < 0.3
    nnz = width if fmt == "csv" else (rng.choice([1 << 18, 1 << 20]) if long_lines else rng.choice([4, 16, 64]))
    nnz = min(nnz, width)
    rows = 3 if long_lines else max(10, min(rng.choice([2000, 20000, 200000]), (60 << 20) // (12 * nnz)))
    proba = cmd == "predict" and task != "regression" and rng.random() < 0.6
    return {"task": task, "classes": classes, "width": width, "nnz": nnz, "rows": rows, "format": fmt,
            "cmd": cmd, "proba": proba, "multiple": rng.choice([1.0, 1.0, 1.25, 1.5, 2.0]), "seed": rng.randrange(1 << 30),
            "piped": fmt in ("svmlight", "npz") and rng.random() < 0.4}


def _data(c: dict, rows: int, seed: int):
    """``rows`` random rows of ``c['nnz']`` distinct ids each, and labels of its task."""
    rng = np.random.default_rng(seed)
    w, k = c["width"], c["nnz"]
    if k == w:
        ids = np.tile(np.arange(w), (rows, 1))
    else:  # one id in each of k equal ranges: distinct and sorted
        step = w // k
        ids = np.arange(k) * step + rng.integers(0, step, (rows, k))
    vals = rng.normal(size=(rows, k))
    if c["task"] == "regression":
        y = rng.normal(size=rows)
    elif c["task"] == "binary":
        y = np.where(rng.random(rows) < 0.5, 1.0, -1.0)
    else:  # every class occurs (the model knows each)
        y = (np.arange(rows) % c["classes"]).astype(float)
        rng.shuffle(y)
    return ids, vals, y


def _write(path: str, fmt: str, c: dict, ids, vals, y) -> None:
    if fmt == "npz":
        rows, k = ids.shape
        np.savez(path, data=vals.ravel(), indices=ids.ravel().astype(np.int32),
                 indptr=np.arange(rows + 1, dtype=np.int64) * k, shape=np.array([rows, c["width"]]), format="csr",
                 y=y)
        return
    with open(path, "w") as f:
        for i in range(len(y)):
            lab = f"{y[i]:g}"
            if fmt == "csv":
                f.write(lab + "," + ",".join(f"{v:.3g}" for v in vals[i]) + "\n")
            else:
                f.write(lab + " " + " ".join(f"{j + 1}:{v:.3g}" for j, v in zip(ids[i], vals[i])) + "\n")


def _model(c: dict, work: str) -> tuple[str, str]:
    """A store and a model of ``c``'s task, classes, width and input format (trained once, reused)."""
    import ooc

    fmt = "svmlight" if c["format"] == "store" else c["format"]
    key = f"{c['task']}-{c['classes']}-{c['width']}-{fmt}"
    store, run = os.path.join(work, key + ".zarr"), os.path.join(work, key + "-run")
    if not os.path.exists(os.path.join(run, "model")):
        small = dict(c, nnz=min(c["nnz"], 16) if fmt != "csv" else c["nnz"])
        src = os.path.join(work, key + ({"npz": ".npz", "csv": ".csv"}.get(fmt, ".svm")))
        _write(src, fmt, small, *_data(small, max(400, 4 * c["classes"]), 7))
        shutil.rmtree(store, ignore_errors=True)
        ooc.convert(src, store, **({"n_features": c["width"]} if fmt == "svmlight" else {}))
        ooc.train(store, run, max_epochs=1, **({"loss": "squared"} if c["task"] == "regression" else {}))
    return store, run


def _peak(argv: list[str]) -> tuple[int, int, str]:
    """rc, peak resident bytes (/usr/bin/time -v) and stderr of ``argv``."""
    p = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True)
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    err = "\n".join(ln for ln in p.stderr.splitlines() if not ln.startswith("\t") and "Command exited" not in ln)
    return p.returncode, int(m.group(1)) * 1024 if m else -1, err


def _bytes(text: str) -> int:
    from ooc.units import parse_bytes

    return parse_bytes(text.replace(" ", ""))


def cell(c: dict, work: str) -> list[dict]:
    """Run one cell: the refusal at 1B, then the command at the figure named times the multiple."""
    store, run = _model(c, work)
    d = os.path.join(work, f"cell-{c['seed']}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    if c["format"] == "store":
        src = os.path.join(d, "in.svm")
        _write(src, "svmlight", c, *_data(c, c["rows"], c["seed"]))
        inp = os.path.join(d, "in.zarr")
        subprocess.run([*OOC, "convert", src, inp, "--n-features", str(c["width"])], check=True, capture_output=True)
    else:
        inp = os.path.join(d, "in." + {"svmlight": "svm"}.get(c["format"], c["format"]))
        _write(inp, c["format"], c, *_data(c, c["rows"], c["seed"]))
    out = os.path.join(d, "out.zarr" if c["cmd"] == "append" else "out.txt")
    piped = c.get("piped")
    src, inp = inp, "-" if piped else inp
    if c["cmd"] == "predict":
        argv = [*OOC, "predict", run, inp, "--out", out] + (["--proba"] if c["proba"] else [])
    elif c["cmd"] == "evaluate":
        argv = [*OOC, "evaluate", run, inp, "--json"]
    else:
        argv = [*OOC, "append", store, inp, "--out", out]
    if piped:  # the file through a pipe on standard input
        argv = ["sh", "-c", 'cat "$0" | exec "$@"', src, *argv]
    runs = []
    rc, peak, err = _peak([*argv, "--memory", "1B"])
    m = FIGURE.search(err)
    bad = None if rc != 0 and m and len(err.strip().splitlines()) == 1 and not os.path.exists(out) else \
        "1B not refused in one line naming a figure, before any output"
    runs.append({**c, "memory": "1B", "rc": rc, "peak": peak, "violation": bad})
    if m is None:
        return runs
    x = int(_bytes(m.group(1)) * c["multiple"])
    for _ in range(3):  # a refusal naming a larger figure (an input known once read) is run at it
        if c["cmd"] == "append":
            shutil.rmtree(out, ignore_errors=True)
        rc, peak, err = _peak([*argv, "--memory", str(x)])
        again = FIGURE.search(err)
        refused_above = rc != 0 and again and _bytes(again.group(1)) > x and not os.path.exists(out)
        bad = None if (rc == 0 and peak <= x) or refused_above else \
            (f"peak {peak / 2**20:.1f} MiB over {x / 2**20:.1f} MiB" if rc == 0 else f"failed: {err.strip()[-300:]}")
        runs.append({**c, "memory": x, "rc": rc, "peak": peak, "violation": bad})
        if not refused_above:
            break
        x = _bytes(again.group(1))
    shutil.rmtree(d, ignore_errors=True)
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/fuzz-memory-commands")
    ap.add_argument("--cells", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    rng = random.Random(a.seed)
    runs, violations = 0, 0
    for _ in range(a.cells):
        for r in cell(draw(rng), a.work):
            runs += 1
            violations += r["violation"] is not None
            print(json.dumps(r), flush=True)
    print(json.dumps({"cases": a.cells, "runs": runs, "violations": violations}))
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
