"""Benchmark ``ooc convert`` against scikit-learn's ``load_svmlight_file`` on the same file.

Generates a text-like svmlight file (labels +-1, 15-30 ids per row with Zipf-like
popularity over 2**20 features, values with 6 significant digits) of at least
``--gb`` GB, then in the same run times:

* ``sklearn.datasets.load_svmlight_file`` (in a child process; the time of the call
  alone, imports excluded: the most favourable figure for scikit-learn);
* ``ooc convert --layout rows`` and ``--layout both`` as subprocesses with
  ``--memory`` and ``--threads`` (wall time of the whole command, interpreter start-up
  included: the least favourable figure for us), peak RSS of each;
* ``ooc convert --layout rows`` of the same file gzipped (``gzip -6``, made outside the
  timing): ``ratio_gzip_vs_plain`` is its time over the plain file's;
* ``--layout both`` again under ``scripts/run-capped`` (cgroup cap
  ``--memory`` + ``--cap-margin``, page cache dropped first) when a writable cgroup
  exists: its exit status and the cgroup's peak, page cache included.

ooc's own modules are compiled to bytecode first (``compileall``, as ``pip install`` does): a
checkout run under ``PYTHONDONTWRITEBYTECODE`` would otherwise compile them from source at every
start (measured: ~0.17 s of each command), which no installed ``ooc`` does (``bytecode`` in the
output says where they were compiled).

Prints ONE JSON line. Targets (issue 20, on 2 cores): rows/sklearn <= 0.25,
both/sklearn <= 0.4, gzip/plain <= 1.3, peak memory bounded by ``--memory`` (plus the
interpreter's own ~110 MiB). ``startup_s`` is the time of ``ooc convert`` on a one-line
file: what every command pays before it reads a byte.

Usage::

    python scripts/bench_ingest.py [--gb 1.0] [--memory 512MiB] [--threads 0] [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_CAPPED = os.environ.get("OOC_RUN_CAPPED") or os.path.join(HERE, "run-capped")

SKLEARN_CHILD = """
import sys, time
from sklearn.datasets import load_svmlight_file
t = time.perf_counter()
X, y = load_svmlight_file(sys.argv[1])
print(time.perf_counter() - t, X.shape[0], X.shape[1], X.nnz)
"""


def run_child(cmd, env=None):
    """Run ``cmd``; returns (seconds, peak RSS in MiB, CPU seconds (user + sys), exit status, stdout, stderr).

    The peak comes from GNU time's ``%M`` when /usr/bin/time exists: ``wait4``'s
    ``ru_maxrss`` would be wrong here, because Linux carries the parent's high-water
    mark across fork+exec and this process holds the generated text for a while.
    """
    timed = os.path.exists("/usr/bin/time")
    full = (["/usr/bin/time", "-f", "OOC-BENCH-MAXRSS-KB=%M CPU-S=%U+%S"] + cmd) if timed else cmd
    t = time.perf_counter()
    p = subprocess.run(full, capture_output=True, text=True, env=env)
    secs = time.perf_counter() - t
    err = p.stderr
    rss = cpu = None
    m = re.search(r"OOC-BENCH-MAXRSS-KB=(\d+) CPU-S=([\d.]+)\+([\d.]+)", err)
    if m:
        rss = int(m.group(1)) / 1024.0
        cpu = float(m.group(2)) + float(m.group(3))
        err = err[:m.start()] + err[m.end():]
    rc = p.returncode
    return secs, rss, cpu, rc, p.stdout, err


def compile_ooc(env, cwd):
    """Compile the ``ooc`` package the commands import (with ``env``, from ``cwd``) to bytecode; returns
    its directory."""
    where = subprocess.run([sys.executable, "-c", "import ooc, os; print(os.path.dirname(ooc.__file__))"],
                           capture_output=True, text=True, env=env, cwd=cwd, check=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "compileall", "-q", where], capture_output=True, env=env, check=True)
    return where


def ooc_cmd():
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "ooc.cli"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0, help="input size in GB (1e9 bytes), at least")
    ap.add_argument("--memory", default="512MiB", help="ooc convert --memory")
    ap.add_argument("--format", default="zarr", choices=["zarr", "hdf5"])
    ap.add_argument("--dir", default=None, help="work directory (default: a new temporary one)")
    ap.add_argument("--input", default=None, help="use this svmlight file instead of generating one")
    ap.add_argument("--keep", action="store_true", help="keep the generated file and stores")
    ap.add_argument("--cap-margin", default="256M", help="run-capped limit = --memory + this")
    ap.add_argument("--no-capped", action="store_true", help="skip the run under run-capped")
    ap.add_argument("--skip-sklearn", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="ooc convert --threads (0: every core)")
    ap.add_argument("--no-gzip", action="store_true", help="skip the gzipped input")
    args = ap.parse_args()

    sys.path.insert(0, os.path.join(HERE, ".."))
    from ooc.synth import write_textlike_svmlight
    from ooc.units import parse_bytes

    work = args.dir or tempfile.mkdtemp(prefix="ooc-bench-ingest-")
    os.makedirs(work, exist_ok=True)
    env = {**os.environ, "NUMBA_CACHE_DIR": os.environ.get("NUMBA_CACHE_DIR",
                                                            os.path.join(work, "numba-cache"))}
    src = args.input or os.path.join(work, "bench.svm")
    res = {"memory": args.memory, "format": args.format, "threads": args.threads, "cpus": os.cpu_count(),
           "loadavg_1m": round(os.getloadavg()[0], 2)}
    try:
        if not args.input:
            t = time.perf_counter()
            write_textlike_svmlight(src, int(args.gb * 1e9), seed=0)
            res["generate_s"] = round(time.perf_counter() - t, 2)
        size = os.path.getsize(src)
        mb = size / 1e6
        res["file_MB"] = round(mb, 1)

        res["bytecode"] = compile_ooc(env, work)
        # warm the Numba cache and the page cache, so neither side pays for them
        small = os.path.join(work, "warm.svm")
        with open(src, "rb") as f, open(small, "wb") as g:
            g.write(f.read(1 << 20).rsplit(b"\n", 1)[0] + b"\n")
        with open(small, "rb") as f, open(small + "1", "wb") as g:
            g.write(f.readline())
        run_child(ooc_cmd() + ["convert", small, os.path.join(work, "warm.zarr"), "--overwrite"], env)
        one_line = ooc_cmd() + ["convert", small + "1", os.path.join(work, "warm.zarr"), "--overwrite", "--layout",
                                "rows"]
        res["startup_s"] = round(min(run_child(one_line, env)[0] for _ in range(3)), 2)  # the best of 3: load varies
        with open(src, "rb") as f:
            while f.read(1 << 26):
                pass

        if not args.skip_sklearn:
            secs, rss, cpu, rc, out, err = run_child([sys.executable, "-c", SKLEARN_CHILD, src], env)
            if rc != 0:
                raise SystemExit(f"scikit-learn failed: {err[-2000:]}")
            sk = float(out.split()[0])
            res.update({"sklearn_s": round(sk, 2), "sklearn_MBps": round(mb / sk, 1),
                        "sklearn_peak_MiB": round(rss) if rss else None, "shape": [int(x) for x in out.split()[1:3]],
                        "nnz": int(out.split()[3])})

        gz = None
        if not args.no_gzip:
            gz = os.path.join(work, os.path.basename(src) + ".gz")  # in the work directory: never beside --input
            with open(gz, "wb") as g:
                subprocess.run(["gzip", "-6", "-c", src], stdout=g, check=True)
            res["gz_MB"] = round(os.path.getsize(gz) / 1e6, 1)
        runs = [("rows", src, "rows"), ("both", src, "both")] + ([("gzip_rows", gz, "rows")] if gz else [])
        for name, inp, layout in runs:
            store = os.path.join(work, f"bench-{name}.{'zarr' if args.format == 'zarr' else 'h5'}")
            cmd = ooc_cmd() + ["convert", inp, store, "--layout", layout, "--memory", args.memory,
                               "--format", args.format, "--threads", str(args.threads), "--overwrite"]
            secs, rss, cpu, rc, out, err = run_child(cmd, env)
            if rc != 0:
                raise SystemExit(f"ooc convert {inp} --layout {layout} failed: {err[-2000:]}")
            res[f"{name}_s"] = round(secs, 2)
            res[f"{name}_MBps"] = round(mb / secs, 1)
            res[f"{name}_peak_MiB"] = round(rss) if rss else None
            res[f"{name}_cpu_s"] = round(cpu, 2) if cpu is not None else None  # user + sys: steadier on a busy machine
            if not args.skip_sklearn:
                res[f"ratio_{name}_vs_sklearn"] = round(secs / res["sklearn_s"], 3)
            if not args.keep:
                shutil.rmtree(store, ignore_errors=True) if os.path.isdir(store) else os.remove(store)
        if not args.skip_sklearn:  # the same without the fixed cost every command pays (imports, compiled kernels)
            for name in ("rows", "both"):
                res[f"ratio_{name}_vs_sklearn_excl_startup"] = round(
                    (res[f"{name}_s"] - res["startup_s"]) / res["sklearn_s"], 3)
        if gz:
            res["ratio_gzip_vs_plain"] = round(res["gzip_rows_s"] / res["rows_s"], 3)
            if not args.keep:
                os.remove(gz)

        if not args.no_capped and os.path.exists(RUN_CAPPED):
            cap = parse_bytes(args.memory) + parse_bytes(args.cap_margin)
            limit = f"{cap >> 20}M"
            store = os.path.join(work, "bench-capped.zarr")
            cmd = [RUN_CAPPED, limit, "--cold", "--"] + ooc_cmd() + [
                "convert", src, store, "--layout", "both", "--memory", args.memory, "--format", args.format,
                "--threads", str(args.threads), "--overwrite"]
            secs, rss, cpu, rc, out, err = run_child(cmd, env)
            last = err.strip().splitlines()[-1] if err.strip() else ""
            if rc == 3:
                res["capped"] = "skipped: no writable memory cgroup"
            else:
                m = re.search(r"peak=(\S+) oom_kills=(\d+)", last)
                res["capped"] = {"limit": limit, "exit": rc, "s": round(secs, 2), "MBps": round(mb / secs, 1),
                                 "cgroup_peak": m.group(1) if m else None,
                                 "oom_kills": int(m.group(2)) if m else None, "cold_cache": True}
            if not args.keep:
                shutil.rmtree(store, ignore_errors=True)
        res["targets_met"] = bool(
            not args.skip_sklearn and res["ratio_rows_vs_sklearn"] <= 0.25 and res["ratio_both_vs_sklearn"] <= 0.4
            and (gz is None or res["ratio_gzip_vs_plain"] <= 1.3))
    finally:
        if not args.keep:
            if not args.input and os.path.exists(src):
                os.remove(src)
            if not args.dir:
                shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
