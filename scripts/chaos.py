"""The long chaos soak: SIGKILL at random moments of convert, train, checkpoint writes and batch.

Each trial kills real ``ooc`` processes and then does what a user would do next (re-run the
convert, ``ooc resume`` the run, re-run the batch), and checks the outcome against an
uninterrupted reference computed at the start:

* ``convert``: ``ooc convert`` killed at a uniformly random moment of its life (start-up
  included) or of its writing phase. STORE must be absent, refused by ``ooc.open_store``,
  or complete and equal to the reference (fingerprint, matrix, labels, column layout);
  hidden partials must not open; a re-run convert must give the reference store.
* ``train``: ``ooc train`` killed at a random moment; then zero to two ``ooc resume``
  processes killed at random moments too; then a final resume. The coefficients must be
  identical (``np.array_equal``) to the uninterrupted run, and primal / dual / gap / epochs
  equal. A third of the trials page their duals from disk (``--memory 4KiB``), a third read
  two block groups at once (``--memory 128KiB``).
* ``checkpoint``: like ``train``, but the kill lands inside a checkpoint write (as soon as a
  ``ckpt-*.tmp-*`` directory exists, plus 0-3 ms) or while a new checkpoint is being published
  (two complete ``ckpt-*`` directories side by side).
* ``batch``: ``ooc batch SPEC --workers 2`` (a grid of runs on a LocalCluster) with the driver
  killed (alone, or with its whole process group) or one worker process killed at a random
  moment; then the batch is run again: every run must end ``ok`` in ``results.csv`` with
  coefficients identical to the reference batch (no run lost).

Prints ONE JSON line: trials per kind, identical results, where the kills landed, failures
with reasons. Usage::

    NUMBA_CACHE_DIR=/tmp/nc python scripts/chaos.py --trials 100
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict

import numpy as np

ROWS, COLS, NNZ = 2000, 150, 10
CONVERT = ["--block-bytes", "8KiB", "--memory", "1MiB", "--dtype", "float64"]
TRAIN = ["--l2", "1e-3", "--tol", "1e-9", "--max-epochs", "40", "--checkpoint-every", "0", "--seed", "5"]
PAGED = ["--memory", "4KiB"]
#: --memory options of the train trials: duals in memory (the data cached), duals paged per block, and
#: duals in memory with two groups read at once (three 4-block groups fit, the data does not)
MEMORY_MODES = {"memory": [], "paged": PAGED, "read2": ["--memory", "128KiB"]}
BATCH_SPEC = """
[batch]
out = "{out}"

[grid]
store = ["{store}"]
l2 = [1e-2, 1e-3]
seed = [1, 2]
tol = [1e-8]
max_epochs = [40]
checkpoint_every = [0.0]
"""


def source_hash() -> str:
    """A hash of the installed ooc sources: other people may be editing them while the soak runs,
    and a reference computed with other code is no reference."""
    import hashlib

    import ooc

    h = hashlib.blake2b(digest_size=8)
    root = os.path.dirname(ooc.__file__)
    for dp, ds, fs in sorted(os.walk(root)):
        ds.sort()
        for f in sorted(fs):
            if f.endswith(".py"):
                with open(os.path.join(dp, f), "rb") as fh:
                    h.update(f.encode() + fh.read())
    return h.hexdigest()


def ooc_exe() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "ooc.cli"]


def popen(args, **kw):
    return subprocess.Popen(ooc_exe() + [str(a) for a in args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True, **kw)


def run_ok(args, timeout=600) -> subprocess.CompletedProcess:
    p = subprocess.run(ooc_exe() + [str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError(f"ooc {' '.join(map(str, args[:1]))} exited {p.returncode}: "
                             f"{(p.stderr.strip().splitlines() or [''])[-1]}")
    return p


def last_json(text: str) -> dict:
    return json.loads([ln for ln in text.splitlines() if ln.strip()][-1])


def coef(run: str) -> np.ndarray:
    return np.load(os.path.join(run, "model", "coef.npy"))


def latest(run: str):
    try:
        with open(os.path.join(run, "LATEST")) as f:
            return f.read().strip()
    except OSError:
        return None


def state_entries(run: str) -> list[str]:
    try:
        return os.listdir(os.path.join(run, "state"))
    except OSError:
        return []


def train_landing(run: str, finished: bool) -> str:
    if finished:
        return "finished before the kill"
    if not os.path.exists(os.path.join(run, "run.json")):
        return "before the run directory existed"
    if latest(run) is None:
        return "before the first checkpoint"
    ents = state_entries(run)
    if any(".tmp-" in e for e in ents):
        return "inside a checkpoint write"
    if sum(e.startswith("ckpt-") for e in ents) > 1:
        return "publishing a checkpoint"
    if os.path.exists(os.path.join(run, "model", "coef.npy")):
        return "writing the model"
    return "between checkpoints"


def kill_group(p: subprocess.Popen) -> bool:
    """SIGKILL the process and its group; True if it was still running."""
    alive = p.poll() is None
    if alive:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait()
    return alive


class Chaos:
    def __init__(self, root: str, rng: random.Random):
        self.root = root
        self.rng = rng
        self.stats = defaultdict(Counter)
        self.landed = defaultdict(Counter)
        self.failures: list[dict] = []
        self.n = 0
        self.void = Counter()
        self.source_changes = 0
        self.src = None

    # -- references ----------------------------------------------------------------------------
    def setup(self):

        while True:  # references made with one version of the sources, start to end
            src = source_hash()
            times = self._setup()
            if source_hash() == src:
                self.src = src
                return times

    def _setup(self):
        import ooc
        from ooc.store.writer import remove_path
        from ooc.synth import SynthSource, write_svmlight

        # references made again (the sources changed): the previous ones go first
        for name in ["ref.zarr", "ref-batch", "ref-batch.toml", *[f"ref-run-{m}" for m in MEMORY_MODES]]:
            remove_path(os.path.join(self.root, name))
        self.svm = os.path.join(self.root, "in.svm")
        write_svmlight(SynthSource(ROWS, COLS, NNZ, seed=11), self.svm)
        self.store = os.path.join(self.root, "ref.zarr")
        t0 = time.monotonic()
        run_ok(["convert", self.svm, self.store, *CONVERT])
        self.t_convert = time.monotonic() - t0
        st = ooc.open_store(self.store)
        self.ref_store = dict(fp=st.fingerprint, X=st.to_scipy("rows"), y=np.array(st.labels))
        self.ref = {}
        for mode, extra in MEMORY_MODES.items():
            run = os.path.join(self.root, f"ref-run-{mode}")
            t0 = time.monotonic()
            p = run_ok(["train", self.store, "--out", run, *TRAIN, *extra, "--json"])
            wall = time.monotonic() - t0
            res = last_json(p.stdout)
            assert res["converged"], res
            self.ref[mode] = dict(coef=coef(run), res=res, wall=wall, train_s=res["seconds"])
        assert all(np.array_equal(self.ref["memory"]["coef"], r["coef"]) for r in self.ref.values())
        # the reference batch: an uninterrupted run of the same spec
        self.batch_ref = {}
        out = os.path.join(self.root, "ref-batch")
        spec = self._spec(out)
        t0 = time.monotonic()
        run_ok(["batch", spec, "--workers", "2"])
        self.t_batch = time.monotonic() - t0
        rows = self._results(out)
        assert len(rows) == 4 and all(r["status"] == "ok" for r in rows), rows
        for r in rows:
            self.batch_ref[r["run"]] = coef(os.path.join(out, r["run"]))
        return dict(convert_s=round(self.t_convert, 2), train_wall_s=round(self.ref["memory"]["wall"], 2),
                    train_s=round(self.ref["memory"]["train_s"], 2), batch_s=round(self.t_batch, 2))

    def _spec(self, out: str) -> str:
        path = out + ".toml"
        with open(path, "w") as f:
            f.write(BATCH_SPEC.format(out=out, store=self.store))
        return path

    @staticmethod
    def _results(out: str) -> list[dict]:
        with open(os.path.join(out, "results.csv")) as f:
            return list(csv.DictReader(f))

    # -- bookkeeping ---------------------------------------------------------------------------
    def record(self, kind: str, fn) -> bool:
        """Run one trial; False when it is void (the ooc sources changed under it: not counted)."""
        if source_hash() != self.src:
            self.source_changes += 1
            self.setup()  # new code: new references
        t0 = time.monotonic()
        try:
            fn()
            err = None
        except Exception as exc:
            err = exc
        if source_hash() != self.src:
            self.void[kind] += 1
            return False
        self.n += 1
        self.stats[kind]["trials"] += 1
        if err is None:
            self.stats[kind]["identical"] += 1
        else:
            reason = f"{type(err).__name__}: {err}".splitlines()[0][:400]
            self.stats[kind]["failures"] += 1
            self.failures.append({"trial": self.n, "kind": kind, "reason": reason,
                                  "where": traceback.extract_tb(err.__traceback__)[-1].lineno})
        self.stats[kind]["seconds"] = round(self.stats[kind]["seconds"] + time.monotonic() - t0, 2)
        return True

    # -- convert -------------------------------------------------------------------------------
    def trial_convert(self):
        import ooc
        from ooc.store.backend import StoreError

        d = tempfile.mkdtemp(prefix="convert-", dir=self.root)
        store = os.path.join(d, "s.zarr")
        try:
            p = popen(["convert", self.svm, store, *CONVERT])
            if self.rng.random() < 0.5:
                deadline = time.monotonic() + self.rng.uniform(0, self.t_convert * 1.05)
                while p.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.002)
            else:
                while p.poll() is None and not any(".partial-" in f for f in os.listdir(d)):
                    time.sleep(0.002)
                deadline = time.monotonic() + self.rng.uniform(0, max(self.t_convert - 1.8, 0.3))
                while p.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.002)
            partial = any(".partial-" in f for f in os.listdir(d))
            killed = kill_group(p)
            if not killed:
                landing = "finished before the kill"
                if p.returncode != 0:
                    raise AssertionError(f"uninterrupted convert failed: {p.stderr.read().decode()[-300:]}")
            else:
                landing = "while writing the partial store" if partial else "before any output"
            self.landed["convert"][landing] += 1
            self._check_store(store, allow_missing=killed)
            for f in os.listdir(d):
                if ".partial-" in f:
                    self.landed["convert"]["partials left by the kill (hidden)"] += 1
                    try:
                        ooc.open_store(os.path.join(d, f))
                    except StoreError:
                        pass
                    else:
                        raise AssertionError(f"a hidden partial opens as a store: {f}")
            ooc.convert(self.svm, store, overwrite=True, block_bytes="8KiB", memory="1MiB", dtype="float64")
            if self._check_store(store, allow_missing=False) != "complete":
                raise AssertionError("the re-run convert did not give the reference store")
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def _check_store(self, store, allow_missing):
        import ooc
        from ooc.store.backend import StoreError

        if not os.path.exists(store):
            if not allow_missing:
                raise AssertionError("no store after an uninterrupted convert")
            return "absent"
        try:
            st = ooc.open_store(store)
        except StoreError:
            if not allow_missing:
                raise
            return "refused"
        ref = self.ref_store
        if st.fingerprint != ref["fp"]:
            raise AssertionError("a store that opens has another fingerprint")
        X = st.to_scipy("rows")
        if (abs(X - ref["X"])).nnz or not np.array_equal(st.labels, ref["y"]):
            raise AssertionError("a store that opens holds other data (fingerprint equal!)")
        if (abs(st.to_scipy("cols").tocsr() - ref["X"])).nnz:
            raise AssertionError("a store that opens has a wrong column layout")
        return "complete"

    # -- train / checkpoint --------------------------------------------------------------------
    def _kill_train(self, p, run, mode) -> str:
        """Kill ``p`` (train or resume of ``run``) per ``mode``; returns where it landed."""
        ref = self.ref["memory"]
        if mode == "any-from-start":
            deadline = time.monotonic() + self.rng.uniform(0, ref["wall"])
        else:
            start_ck = latest(run)
            while p.poll() is None and latest(run) in (None, start_ck if mode != "any" else None):
                time.sleep(0.001)
            deadline = time.monotonic() + (self.rng.uniform(0, ref["train_s"]) if mode == "any" else 60)
        if mode == "ckpt-write":
            delay = self.rng.choice([0.0, self.rng.uniform(0, 0.003)])
            while p.poll() is None and time.monotonic() < deadline:
                if any(".tmp-" in e for e in state_entries(run)):
                    time.sleep(delay)
                    break
                time.sleep(0.0002)
        elif mode == "ckpt-publish":
            while p.poll() is None and time.monotonic() < deadline:
                ents = state_entries(run)
                if sum(e.startswith("ckpt-") and ".tmp-" not in e for e in ents) > 1:
                    break
                time.sleep(0.0002)
        else:
            while p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
        finished = p.poll() is not None
        where = train_landing(run, finished)
        kill_group(p)
        if finished and p.returncode != 0:
            raise AssertionError(f"an uninterrupted ooc process failed: {p.stderr.read().decode()[-300:]}")
        return where

    def trial_train(self, kind: str):
        from ooc.runs.rundir import RunError
        from ooc.train import resume

        memory_mode = self.rng.choice(list(MEMORY_MODES))
        extra = MEMORY_MODES[memory_mode]
        self.landed[kind][f"(memory) {memory_mode}"] += 1
        d = tempfile.mkdtemp(prefix=f"{kind}-", dir=self.root)
        run = os.path.join(d, "run")
        try:
            if kind == "train":
                modes = [self.rng.choice(["any-from-start", "any"])]
                modes += [self.rng.choice(["any-from-start", "any"]) for _ in range(self.rng.choice([0, 0, 1, 2]))]
            else:
                modes = [self.rng.choice(["ckpt-write", "ckpt-write", "ckpt-publish"])
                         for _ in range(self.rng.choice([1, 1, 2]))]
            p = popen(["train", self.store, "--out", run, *TRAIN, *extra])
            self.landed[kind][self._kill_train(p, run, modes[0])] += 1
            for mode in modes[1:]:
                p = self._restart(run, extra)
                self.landed[kind]["(resume) " + self._kill_train(p, run, mode)] += 1
            # the final resume, in this process
            if not os.path.exists(os.path.join(run, "run.json")):
                # killed before the run existed: the user trains again (--overwrite: the folder may exist)
                self.landed[kind]["re-train needed (no run.json)"] += 1
                if os.path.exists(run) and os.listdir(run):
                    self.landed[kind]["re-train needed --overwrite (non-empty folder, no run.json)"] += 1
                run_ok(["train", self.store, "--out", run, *TRAIN, *extra, "--overwrite"])
                res = json.load(open(os.path.join(run, "model", "metrics.json")))
            else:
                try:
                    res = resume(run).result
                except RunError as exc:
                    raise AssertionError(f"resume refused: {exc}") from None
            ref = self.ref[memory_mode]
            if not np.array_equal(coef(run), ref["coef"]):
                diff = float(np.max(np.abs(coef(run) - ref["coef"])))
                raise AssertionError(f"coefficients differ from the uninterrupted run (max |diff| {diff:.3g}; "
                                     f"kills {modes})")
            for k in ("primal", "dual", "gap", "epochs", "converged"):
                if res[k] != ref["res"][k]:
                    raise AssertionError(f"{k} differs: {res[k]} != {ref['res'][k]}")
            left = [f for dp, ds, fs in os.walk(run) for f in fs + ds if ".tmp" in f]
            if left:
                raise AssertionError(f"temporary files left after the final resume: {left[:3]}")
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def _restart(self, run, extra):
        if os.path.exists(os.path.join(run, "run.json")):
            return popen(["resume", run])
        return popen(["train", self.store, "--out", run, *TRAIN, *extra, "--overwrite"])

    # -- batch ----------------------------------------------------------------------------------
    def trial_batch(self):
        d = tempfile.mkdtemp(prefix="batch-", dir=self.root)
        out = os.path.join(d, "out")
        spec = self._spec(out)
        try:
            p = popen(["batch", spec, "--workers", "2"])
            mode = self.rng.choice(["driver", "group", "worker", "worker"])
            # wait until the batch is training (a run directory exists), then a random delay
            t_end = time.monotonic() + 120
            while p.poll() is None and time.monotonic() < t_end:
                if os.path.isdir(out) and any(os.path.isdir(os.path.join(out, f)) for f in os.listdir(out)):
                    break
                time.sleep(0.01)
            time.sleep(self.rng.uniform(0, max(self.t_batch - 6.0, 1.0)))
            if p.poll() is not None:
                where = "finished before the kill"
            elif mode == "worker":
                kids = worker_pids(p.pid)
                if kids:
                    os.kill(self.rng.choice(kids), signal.SIGKILL)
                    where = "one worker killed"
                else:
                    where = "no worker found to kill"
                # the batch goes on (dask retries the task on another worker) or reports it failed
                try:
                    p.wait(timeout=300)
                except subprocess.TimeoutExpired:
                    kill_group(p)
                    raise AssertionError("the batch hung after a worker was killed") from None
            elif mode == "driver":
                kids = worker_pids(p.pid)
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
                where = "driver killed (workers orphaned)"
                # orphaned workers notice the lost nanny/scheduler; give them a moment, then clean up
                time.sleep(2.0)
                stray = [k for k in kids if _alive(k)]
                if stray:
                    self.landed["batch"]["orphan workers still alive 2 s after the driver died"] += 1
                    for k in stray:
                        try:
                            os.kill(k, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
            else:
                kill_group(p)
                where = "driver and workers killed"
            self.landed["batch"][where] += 1
            # re-run the batch until done, as a user would
            run_ok(["batch", spec, "--workers", "2"])
            rows = self._results(out)
            if len(rows) != len(self.batch_ref):
                raise AssertionError(f"results.csv has {len(rows)} runs, expected {len(self.batch_ref)}")
            bad = [r for r in rows if r["status"] != "ok"]
            if bad:
                raise AssertionError(f"runs not ok after the re-run: {[(r['run'], r['error']) for r in bad]}")
            for r in rows:
                if not np.array_equal(coef(os.path.join(out, r["run"])), self.batch_ref[r["run"]]):
                    raise AssertionError(f"{r['run']}: coefficients differ from the uninterrupted batch")
        finally:
            shutil.rmtree(d, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def worker_pids(parent: int) -> list[int]:
    """Child processes of ``parent`` (the LocalCluster's worker processes)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().split(")")[-1].split()
            if int(fields[1]) == parent:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
                if b"multiprocessing" in cmd or b"spawn" in cmd or b"forkserver" in cmd:
                    out.append(int(pid))
        except (OSError, ValueError, IndexError):
            pass
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mix", default="convert=25,train=32,checkpoint=33,batch=10",
                    help="relative share of each kind of trial")
    ap.add_argument("--workdir", default=None, help="where to work (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)
    root = args.workdir or tempfile.mkdtemp(prefix="ooc-chaos-")
    os.makedirs(root, exist_ok=True)
    rng = random.Random(args.seed)
    mix = {k: float(v) for k, v in (kv.split("=") for kv in args.mix.split(","))}
    total = sum(mix.values())
    # the kinds in a shuffled order with the requested shares
    kinds = []
    for k, share in mix.items():
        kinds += [k] * round(args.trials * share / total)
    while len(kinds) < args.trials:
        kinds.append(max(mix, key=mix.get))
    kinds = kinds[: args.trials]
    rng.shuffle(kinds)
    t0 = time.monotonic()
    chaos = Chaos(root, rng)
    try:
        ref_times = chaos.setup()
        for kind in kinds:
            for _attempt in range(5):  # a void trial (sources changed under it) is run again
                if kind == "convert":
                    ok = chaos.record(kind, chaos.trial_convert)
                elif kind == "batch":
                    ok = chaos.record(kind, chaos.trial_batch)
                else:
                    ok = chaos.record(kind, lambda: chaos.trial_train(kind))
                if ok:
                    break
            print(f"chaos: {chaos.n}/{len(kinds)} {kind}: "
                  f"{sum(s['failures'] for s in chaos.stats.values())} failures so far", file=sys.stderr)
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    out = {
        "trials": chaos.n,
        "identical": sum(s["identical"] for s in chaos.stats.values()),
        "failures": len(chaos.failures),
        "per_kind": {k: dict(v) for k, v in chaos.stats.items()},
        "landed": {k: dict(v) for k, v in chaos.landed.items()},
        "failure_reasons": chaos.failures,
        "reference_seconds": ref_times,
        "void_trials_source_changed": dict(chaos.void),
        "references_recomputed_after_source_change": chaos.source_changes,
        "data": {"rows": ROWS, "cols": COLS, "nnz_per_row": NNZ},
        "seed": args.seed,
        "seconds": round(time.monotonic() - t0, 1),
    }
    print(json.dumps(out))
    return 0 if not chaos.failures else 1


if __name__ == "__main__":
    sys.exit(main())
