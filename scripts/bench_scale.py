"""Scale benchmark: training on a store at least 10x larger than the memory it is allowed.

1. ``ooc synth`` writes a store (row layout, float64 Gaussian values: they do not compress,
   so they are stored as they are) of ``--rows`` x ``--cols`` with ``--nnz`` nonzeros per row, streaming, with bounded
   memory; its size on disk must be at least ``--min-ratio`` (10) times ``--cap``.
2. The disk's own cold read rate, measured here: page cache dropped, every file of the store
   read sequentially (``cat``) inside the same memory cgroup cap.
3. Cold, capped: ``scripts/run-capped CAP --cold -- ooc train STORE --solver sdca
   --max-epochs E --memory MEM`` (page cache dropped, a memory cgroup of CAP that counts the
   page cache, ``--memory`` MEM): every pass reads the store from disk. Epoch time = the
   ``pass_seconds`` of RUN/history.jsonl (median over the passes).
4. Warm, in memory: the same training without the cap and with a block cache larger than
   the decoded store, page cache warmed first; epoch time = median ``pass_seconds`` of the
   passes after the first (every block a cache hit).

Prints ONE JSON line: cold and warm epoch times and their ratio (target <= 1.2), read
throughput figures (below), peak memory and OOM kills reported by run-capped (must be 0).
If run-capped cannot make a cgroup (exit 3), the JSON says so.

Read throughput, what each figure means:

* ``disk_cold_read``: ``cat`` of every file of the store, page cache dropped, inside the
  same cgroup cap (the cap costs the reader page-cache reclaim), measured before and after
  the cold run (``before``, ``after``: a shared disk's rate drifts by tens of percent
  within minutes); ``bytes_per_s`` is their mean. ``disk_cold_read_uncapped``: the same
  without a cap, once. Each reads every file once, sequentially.
* ``read_throughput_over_disk`` (the target, 0.8): the store's size on disk over the time
  of the fastest cold pass, over ``disk_cold_read``. The fastest pass is the last one,
  which only certifies the gap (no updates): its compute, ``warm_pass_seconds[-1]``, is
  shorter than the disk's time for the store, so the pass is as fast as the reader
  delivers the whole store while the kernel works beside it. An update pass is mostly
  compute (the reader waits for the kernel), so it says nothing of the reader's speed;
  ``cold_read_bytes_per_s_on_disk`` (the median pass) is that rate.
* ``reader``: the reader's own figures from the history, over all cold passes
  (``read_seconds``: wall seconds during which a read-ahead thread was reading or
  decoding, including its waits for the disk, excluding idle time while the kernel
  works): ``file_bytes_per_s`` = encoded bytes read from chunk files per reader second
  (a pass reads ``file_bytes_over_store`` times the store: inner chunks shared by two
  blocks are read by both); ``store_bytes_per_s`` = the store's own size on disk per
  reader second; ``decoded_bytes_per_s``; and each over the disk's capped and uncapped
  ``cat`` rates. During update passes the reader shares the two cores with the kernel
  and is not the bottleneck, so these are lower than the read-bound pass's figure.

5. The smallest limit ``ooc info STORE --json`` names for sdca under ``auto``
   (``memory_fit.families.sdca.smallest_memory``): the same cold training under a cgroup of
   exactly that size (``second_cap``): it must finish without an OOM kill, with the same
   coefficients' objective.

Defaults: the store written with the default convert options (``ooc synth`` as ``ooc convert``:
64 MiB blocks) and 2**22 features, trained with the default train options (``--memory auto``,
which reads the cgroup's limit; 2 MiB training blocks, ``--mix-blocks 16``) under a 480M cgroup:
the interpreter with its kernels and the store reader's buffers (~230 MiB) and the O(d) vectors
(~100 MiB) leave about 110 MiB for the blocks (a group and the next one read ahead), ~1/45 of
the store. The second cap (~405 MiB for this store) leaves room for a group and one block read
ahead only. ``--memory``/``--train-args`` try other settings.

Usage::

    NUMBA_CACHE_DIR=/tmp/nc python scripts/bench_scale.py                    # ~5.2 GB under 480M
    python scripts/bench_scale.py --rows 2000000 --cap 300M --min-ratio 1    # a quick try

``second_cap`` also says the threads ``ooc info`` planned the smallest limit with and those each run
used (``run.json``): ``--threads 0`` resolves to the threads the memory holds replicas for, so under the
smallest limit one problem may train on fewer threads than the cold run (a different trajectory:
``same_primal_as_cold`` is then null).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_CAPPED = os.environ.get("OOC_RUN_CAPPED") or os.path.join(HERE, "run-capped")


def ooc_exe() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "ooc.cli"]


def parse_size(s: str) -> int:
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?)i?B?\s*", s, re.I)
    if not m:
        raise ValueError(f"bad size {s!r}")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


def capped(cap: str, cmd: list[str], cold: bool = True) -> dict:
    """Run ``cmd`` under run-capped; returns exit, peak, oom_kills, wall seconds, stdout."""
    args = [RUN_CAPPED, cap] + (["--cold"] if cold else []) + ["--", *cmd]
    t0 = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True)
    wall = time.monotonic() - t0
    out = {"exit": p.returncode, "wall_seconds": round(wall, 2), "stdout": p.stdout}
    m = re.search(r"run-capped: limit=(\S+) peak=(\S+) oom_kills=(\d+) exit=(-?\d+)", p.stderr)
    if m:
        out.update(limit=m.group(1), peak=m.group(2), peak_bytes=parse_size(m.group(2)), oom_kills=int(m.group(3)))
    else:
        out["stderr_tail"] = p.stderr.strip().splitlines()[-3:]
    return out


def store_files(store: str) -> list[str]:
    files = []
    for dp, ds, fs in os.walk(store):
        ds.sort()
        files += [os.path.join(dp, f) for f in sorted(fs)]
    return files


def history(run: str) -> list[dict]:
    with open(os.path.join(run, "history.jsonl")) as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def run_threads(run: str) -> int | None:
    """The compute threads ``run.json`` records."""
    with open(os.path.join(run, "run.json")) as f:
        return json.load(f).get("threads")


def passes(h: list[dict]) -> list[dict]:
    """Per pass: seconds and decoded bytes read (history bytes_read is cumulative)."""
    out, prev = [], 0
    for e in h:
        out.append({"epoch": e["epoch"], "seconds": e["pass_seconds"], "bytes_read": e["bytes_read"] - prev,
                    "cache_hit_rate": e.get("cache_hit_rate")})
        prev = e["bytes_read"]
    return out


def reader_figures(h: list[dict], store_bytes: int, disk_capped: float, disk_uncapped: float) -> dict | None:
    """The reader's own rates over the cold passes (history ``read_seconds`` etc.; see the docstring)."""
    ps = [e for e in h if e.get("read_seconds")]
    if not ps:
        return None
    secs = sum(e["read_seconds"] for e in ps)
    out = {"passes": len(ps), "read_seconds_per_pass": [round(e["read_seconds"], 2) for e in ps],
           "decoded_bytes_per_s": round(sum(e["read_bytes"] for e in ps) / secs),
           "store_bytes_per_s": round(store_bytes * len(ps) / secs)}
    if all(e.get("read_file_bytes") is not None for e in ps):
        fb = sum(e["read_file_bytes"] for e in ps)
        out["file_bytes_per_s"] = round(fb / secs)
        out["file_bytes_over_store"] = round(fb / len(ps) / store_bytes, 3)
        out["file_over_disk_capped"] = round(fb / secs / disk_capped, 3)
        out["file_over_disk_uncapped"] = round(fb / secs / disk_uncapped, 3)
    out["store_over_disk_capped"] = round(out["store_bytes_per_s"] / disk_capped, 3)
    out["store_over_disk_uncapped"] = round(out["store_bytes_per_s"] / disk_uncapped, 3)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=22_500_000)
    ap.add_argument("--cols", type=int, default=1 << 22)
    ap.add_argument("--nnz", type=int, default=20)
    ap.add_argument("--cap", default="480M", help="memory cgroup limit of the cold run (run-capped syntax)")
    ap.add_argument("--memory", default="auto", help="--memory of the capped run (default: auto, the cgroup's)")
    ap.add_argument("--synth-memory", default=None, help="--memory of ooc synth (default: synth's, 64 MiB blocks)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--train-args", default="", help="extra ooc train options")
    ap.add_argument("--no-second-cap", action="store_true", help="skip the run at the smallest limit ooc info names")
    ap.add_argument("--l2", type=float, default=1e-6)
    ap.add_argument("--min-ratio", type=float, default=10.0, help="store size on disk / cap, at least")
    ap.add_argument("--workdir", default="/tmp/ooc-bench-scale")
    ap.add_argument("--reuse", action="store_true", help="reuse a store already in WORKDIR")
    ap.add_argument("--keep", action="store_true", help="keep the store afterwards")
    args = ap.parse_args(argv)

    os.makedirs(args.workdir, exist_ok=True)
    store = os.path.join(args.workdir, "scale.zarr")
    cap_bytes = parse_size(args.cap)
    result: dict = {"rows": args.rows, "cols": args.cols, "nnz_per_row": args.nnz, "cap": args.cap,
                    "cache_memory": args.memory, "epochs": args.epochs, "l2": args.l2,
                    "train_args": args.train_args,
                    "env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}}
    t_all = time.monotonic()

    # 0. can we cap at all?
    probe = capped(args.cap, ["true"], cold=False)
    if probe["exit"] == 3:
        result["cgroup"] = "unavailable: run-capped found no writable memory cgroup (exit 3); nothing measured"
        print(json.dumps(result))
        return 3

    # 1. the store
    if not (args.reuse and os.path.exists(store)):
        t0 = time.monotonic()
        p = subprocess.run(ooc_exe() + ["synth", store, "--rows", str(args.rows), "--cols", str(args.cols),
                                        "--nnz-per-row", str(args.nnz), "--values", "gaussian", "--dtype", "float64",
                                        "--layout", "rows", "--overwrite", "--json",
                                        *(["--memory", args.synth_memory] if args.synth_memory else [])],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"ooc synth failed: {p.stderr.strip()[-500:]}")
        result["synth_seconds"] = round(time.monotonic() - t0, 1)
    info = json.loads(subprocess.run(ooc_exe() + ["info", store, "--json"], capture_output=True, text=True,
                                     check=True).stdout.strip().splitlines()[-1])
    on_disk = int(info["bytes_on_disk"])
    result.update(nnz=info["nnz"], store_bytes_on_disk=on_disk, store_bytes_decoded=info.get("bytes_decoded"),
                  row_blocks=info["blocks"].get("rows"), block_bytes=info["block_bytes"],
                  store_to_cap_ratio=round(on_disk / cap_bytes, 2))
    if on_disk < args.min_ratio * cap_bytes:
        result["warning"] = f"store is only {on_disk / cap_bytes:.1f}x the cap (wanted {args.min_ratio}x)"

    # 2. the disk's cold read rate, same files, same cap
    files = store_files(store)
    listing = os.path.join(args.workdir, "files.txt")
    with open(listing, "w") as f:
        f.write("\0".join(files))
    total_file_bytes = sum(os.path.getsize(f) for f in files)

    def cat_capped() -> dict:
        disk = capped(args.cap, ["sh", "-c", f"s=$(date +%s.%N); xargs -0 cat < {listing} > /dev/null; "
                                             f"e=$(date +%s.%N); echo \"$s $e\""])
        s, e = (float(x) for x in disk["stdout"].split())
        return {"bytes": total_file_bytes, "seconds": round(e - s, 2), "bytes_per_s": round(total_file_bytes / (e - s))}

    disk_before = cat_capped()
    result["disk_cold_read"] = disk_before
    subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], capture_output=True)
    t0 = time.monotonic()
    subprocess.run(["sh", "-c", f"xargs -0 cat < {listing} > /dev/null"], check=True)
    dt = time.monotonic() - t0
    result["disk_cold_read_uncapped"] = {"bytes": total_file_bytes, "seconds": round(dt, 2),
                                         "bytes_per_s": round(total_file_bytes / dt)}

    # 3. cold, capped training
    cold_run = os.path.join(args.workdir, "run-cold")
    shutil.rmtree(cold_run, ignore_errors=True)
    train = ["train", store, "--solver", "sdca", "--loss", "logistic", "--l2", str(args.l2),
             "--max-epochs", str(args.epochs), "--tol", "1e-12", "--checkpoint-every", "1e9", "--json",
             *args.train_args.split()]
    cold_cmd = ooc_exe() + train + ["--out", cold_run, "--memory", args.memory]
    cold = capped(args.cap, cold_cmd)
    result["cold_command"] = " ".join([os.path.relpath(RUN_CAPPED), args.cap, "--cold", "--", "ooc", *train[:],
                                       "--out", cold_run, "--memory", args.memory])
    result.update(cold_exit=cold["exit"], peak_memory=cold.get("peak"), peak_memory_bytes=cold.get("peak_bytes"),
                  oom_kills=cold.get("oom_kills"), cold_wall_seconds=cold["wall_seconds"])
    if cold["exit"] != 0:
        result["cold_error"] = cold.get("stderr_tail") or cold["stdout"][-300:]
        print(json.dumps(result))
        return 1
    # the disk's rate drifts on a shared machine: measured again right after the cold run, and the
    # figures below are taken against the mean of the two
    disk_after = cat_capped()
    rate = (disk_before["bytes_per_s"] + disk_after["bytes_per_s"]) / 2
    result["disk_cold_read"] = {"bytes": total_file_bytes, "seconds": round(total_file_bytes / rate, 2),
                                "bytes_per_s": round(rate), "before": disk_before, "after": disk_after}
    cp = passes(history(cold_run))
    cold_epoch = statistics.median(p["seconds"] for p in cp)
    result["cold_pass_seconds"] = [round(p["seconds"], 3) for p in cp]
    result["cold_cache_hit_rate"] = cp[-1]["cache_hit_rate"]

    # 4. warm, in memory: page cache warm, a block cache above the decoded size, no cap
    subprocess.run(["sh", "-c", f"xargs -0 cat < {listing} > /dev/null"], check=True)
    warm_run = os.path.join(args.workdir, "run-warm")
    shutil.rmtree(warm_run, ignore_errors=True)
    warm_mem = f"{int((info.get('bytes_decoded') or on_disk * 2) * 1.5 / 2**20) + 256}MiB"
    t0 = time.monotonic()
    subprocess.run(ooc_exe() + train + ["--out", warm_run, "--memory", warm_mem], capture_output=True, text=True,
                   check=True)
    result["warm_wall_seconds"] = round(time.monotonic() - t0, 2)
    wp = passes(history(warm_run))
    warm_epoch = statistics.median(p["seconds"] for p in wp[1:]) if len(wp) > 1 else wp[0]["seconds"]
    result["warm_pass_seconds"] = [round(p["seconds"], 3) for p in wp]
    result["warm_cache_memory"] = warm_mem
    result["warm_cache_hit_rate_after_first_pass"] = round(
        1 - sum(p["bytes_read"] for p in wp[1:]) / max(1, sum(p["bytes_read"] for p in wp)), 4)

    # the headline figures: the same pass (same epoch, same work) cold and warm. Passes of epochs
    # < E update the model; the last pass only certifies (no updates: pure reading + a dot product).
    # The warm run's first pass decodes every block into the cache, so it is not a warm pass.
    E = args.epochs
    cold_by = {p["epoch"]: p["seconds"] for p in cp}
    warm_by = {p["epoch"]: p["seconds"] for p in wp}
    upd = [e for e in range(1, E) if e in cold_by and e in warm_by]
    cold_epoch = statistics.median(cold_by[e] for e in upd) if upd else cold_epoch
    warm_epoch = statistics.median(warm_by[e] for e in upd) if upd else warm_epoch
    result["cold_epoch_seconds"] = round(cold_epoch, 3)
    result["warm_epoch_seconds"] = round(warm_epoch, 3)
    result["epochs_compared"] = upd
    result["cold_over_warm"] = round(cold_epoch / warm_epoch, 3)
    result["cold_over_warm_target"] = 1.2
    if E in cold_by and E in warm_by:
        result["certifying_pass_cold_over_warm"] = round(cold_by[E] / warm_by[E], 3)
    decoded_per_pass = statistics.median(p["bytes_read"] for p in cp)
    # read throughput of the cold run: the store once per pass, over the pass time (every pass
    # reads all of it: the cache is far smaller than the store)
    cold_read_s = statistics.median(p["seconds"] for p in cp)
    result["cold_read_bytes_per_s_on_disk"] = round(on_disk / cold_read_s)
    result["cold_read_bytes_per_s_decoded"] = round(decoded_per_pass / cold_read_s)
    result["fastest_cold_pass_bytes_per_s_on_disk"] = round(on_disk / min(p["seconds"] for p in cp))
    result["read_throughput_over_disk"] = round(on_disk / min(p["seconds"] for p in cp)
                                                / result["disk_cold_read"]["bytes_per_s"], 3)
    result["read_bound_pass"] = {"epoch": min(cp, key=lambda p: p["seconds"])["epoch"],
                                 "cold_seconds": round(min(p["seconds"] for p in cp), 3)}
    result["read_throughput_target"] = 0.8
    result["reader"] = reader_figures(history(cold_run), on_disk, result["disk_cold_read"]["bytes_per_s"],
                                      result["disk_cold_read_uncapped"]["bytes_per_s"])
    result["cold_memory_budget"] = json.loads(cold["stdout"].strip().splitlines()[-1]).get("memory_budget")

    # 5. the smallest limit ooc info names for this store (auto, default options): train under it
    if not args.no_second_cap:
        fit = info["memory_fit"]["families"]["sdca"]
        second = f"{-(-fit['smallest_memory'] // 2**20)}M"
        run2 = os.path.join(args.workdir, "run-second-cap")
        shutil.rmtree(run2, ignore_errors=True)
        r2 = capped(second, ooc_exe() + train + ["--out", run2, "--memory", args.memory])
        cp2 = passes(history(run2)) if r2["exit"] == 0 else []
        # --threads 0 resolves to the threads the memory holds replicas for (run.json records the count): the
        # objective is the cold run's when the counts are the same
        threads = (run_threads(cold_run), run_threads(run2) if r2["exit"] == 0 else None)
        result["second_cap"] = {
            "cap": second, "named_by": "ooc info STORE --json: memory_fit.families.sdca.smallest_memory",
            "named_threads": fit.get("threads"), "threads": threads[1], "cold_threads": threads[0],
            "exit": r2["exit"], "oom_kills": r2.get("oom_kills"), "peak": r2.get("peak"),
            "wall_seconds": r2["wall_seconds"], "pass_seconds": [round(p["seconds"], 3) for p in cp2],
            "same_primal_as_cold": (json.loads(r2["stdout"].strip().splitlines()[-1])["primal"]
                                    == json.loads(cold["stdout"].strip().splitlines()[-1])["primal"])
            if r2["exit"] == 0 and threads[0] == threads[1] else None,
            **({"error": r2.get("stderr_tail") or r2["stdout"][-300:]} if r2["exit"] != 0 else {})}
    result["oom_kills_target"] = 0
    result["seconds_total"] = round(time.monotonic() - t_all, 1)
    print(json.dumps(result))
    if not args.keep:
        shutil.rmtree(args.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
