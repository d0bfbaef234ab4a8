"""The long chaos soak: real ooc processes killed, interrupted, their files damaged, their disk full.

Each trial kills real ``ooc`` processes and then does what a user would do next (re-run the
convert, ``ooc resume`` the run, re-run the batch), and checks the outcome against an
uninterrupted reference computed at the start. The kinds of trial (their shares: ``--mix``):

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

* ``overwrite``: ``ooc convert INPUT2 STORE --overwrite`` (STORE a store converted from another
  input) or ``ooc train STORE --out RUN --overwrite`` (RUN a finished run with other options)
  SIGKILLed at a random moment: from the start, while the new store is being built beside the
  old one, after the new run directory is in place, or right at the exchange (the moment STORE /
  RUN becomes another directory, plus 0-3 ms: the deletion of the old one). STORE must open and be
  the old or the new reference store (fingerprint and content), never missing nor partial; RUN
  must be the old finished run (same coefficients) or the new run, which ``ooc resume`` completes
  to the new reference. Then the user's next step (convert again with ``--overwrite``; train
  again with ``--overwrite`` when the old run is there, else resume) must give the new reference,
  and no hidden temporary (``.NAME.partial-*``) may survive it.
* ``signal``: SIGINT (to the process group, as Ctrl-C) or SIGTERM (to the process, as ``kill``)
  at a random moment of ``ooc train`` or of ``ooc resume`` (of a run SIGKILLed after its first
  checkpoint), in the three memory modes. The process must exit within 10 s of the signal (else
  a HANG: counted, then SIGKILLed so the soak goes on) with status 130 (0 if it had finished),
  with no traceback and nothing on stderr but ``ooc: interrupted`` and ``ooc: warning:`` lines;
  a final ``ooc resume`` must give the reference coefficients exactly.
* ``damage``: a train SIGKILLed at a random moment (mostly after its first checkpoint), then ONE
  random file of the run directory (any but ``.lock`` and ``convergence.png``) deleted or one
  random byte of it flipped, then ``ooc resume``: it must finish with exactly the reference
  coefficients or fail with ONE ``ooc: error: ...`` line and no traceback. Failing is accepted
  only for damage to ``run.json`` (the run's identity), after which ``ooc train --overwrite``
  must give the reference; for the checkpoint, the dual files, ``LATEST``, ``history.jsonl`` or
  the model a refusal is a lost run. ``landed`` counts the outcomes per damaged file.
* ``diskfull`` (needs permission to mount a tmpfs; else every trial is recorded as skipped): the
  run directory on a small tmpfs (twice the reference run's footprint plus 64 KiB), a filler
  leaving a random 0 .. footprint bytes free, ``ooc train`` in a random memory mode: it finishes,
  or fails within the timeout with ONE line saying the disk is full (``space`` / ``disk is
  full``), no traceback. Then the filler is removed and ``ooc resume`` (``ooc train --overwrite``
  when RUN has no ``run.json``) must give the reference coefficients, leaving no temporaries.
  Then ``ooc predict RUN INPUT --out F`` with F (known content) on the full tmpfs: F unchanged, one
  line about the full disk, no temporary left (or, if it fit, F holds the reference predictions).

Every ``ooc`` subprocess of the new kinds has a timeout; a timeout is a HANG, never a stuck soak.

Prints ONE JSON line: trials per kind, identical results, where the kills landed, failures
with reasons, and four top-level counters over all kinds:

* ``tracebacks``: ``ooc`` processes whose stderr contains ``Traceback`` (killed ones included);
* ``hangs``: processes that outlived their timeout (or a signal by more than 10 s);
* ``runs_lost``: runs (or stores) that the user's next step could not bring back to the
  reference: a refused resume, a missing or partial store after ``--overwrite``, a re-run that
  failed;
* ``changed_coefficients``: runs that completed with coefficients other than the reference's.

``skipped`` lists the kinds that could not run here and why. Usage::

    NUMBA_CACHE_DIR=/tmp/nc python scripts/chaos.py --trials 100
    NUMBA_CACHE_DIR=/tmp/nc python scripts/chaos.py --trials 12 --mix overwrite=1,signal=1,damage=1,diskfull=1
"""

from __future__ import annotations

import argparse
import contextlib
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
CONVERT = ["--block-bytes", "8KiB", "--dtype", "float64"]
TRAIN = ["--l2", "1e-3", "--tol", "1e-9", "--max-epochs", "40", "--checkpoint-every", "0", "--seed", "5"]
#: the options of the finished run that ``overwrite`` trials replace (another l2, another seed)
TRAIN_OLD = ["--l2", "1e-2", "--tol", "1e-9", "--max-epochs", "40", "--checkpoint-every", "0", "--seed", "7"]
#: how long a process may take to exit after SIGINT / SIGTERM before it counts as a hang
SIGNAL_GRACE = 10.0
KINDS = ("convert", "train", "checkpoint", "batch", "overwrite", "signal", "damage", "diskfull")
DEFAULT_MIX = "convert=15,train=20,checkpoint=20,batch=7,overwrite=12,signal=10,damage=8,diskfull=8"
PAGED = ["--duals", "paged"]
#: memory options of the train trials: duals in memory (the data cached), duals paged per block, and
#: duals in memory with small training blocks in groups of 4 (many groups a pass). An explicit --memory
#: is a ceiling on the whole process (the interpreter alone is ~150 MiB), so the modes no longer come
#: from tiny --memory values, which are refused before the run starts
MEMORY_MODES = {"memory": [], "paged": PAGED, "read2": ["--duals", "memory", "--block-bytes", "4KiB",
                                                        "--mix-blocks", "4"]}
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


class Hang(AssertionError):
    """An ooc process outlived its timeout (or a signal by more than :data:`SIGNAL_GRACE`)."""


class RunLost(AssertionError):
    """The user's next step could not bring a run (or a store) back to the reference."""


class ChangedCoefficients(AssertionError):
    """A run completed with coefficients other than the uninterrupted reference's."""


class TracebackSeen(AssertionError):
    """An ooc process printed a traceback."""


#: stderr excerpts of ooc processes that printed a traceback, in order (Chaos.record takes them per trial)
_TRACEBACKS: list[str] = []


def note_stderr(text: str, what: str) -> str:
    """Remember ``text`` (an ooc process's stderr) if it holds a traceback; returns it."""
    if "Traceback" in text:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        _TRACEBACKS.append(f"{what} printed a traceback: {' | '.join(lines[-3:])[-400:]}")
    return text


def command_name(args) -> str:
    """``ooc train`` for the argument list of an ooc process (whatever ``ooc_exe()`` is)."""
    return "ooc " + str(list(args)[len(ooc_exe())]) if len(args) > len(ooc_exe()) else "ooc"


def stderr_text(p: subprocess.Popen) -> str:
    """What the (ended) process ``p`` wrote on stderr, read without blocking (orphaned grandchildren may
    still hold the pipe), scanned for a traceback once."""
    if getattr(p, "_err_text", None) is None:
        data = b""
        if p.stderr is not None and not p.stderr.closed:
            fd = p.stderr.fileno()
            os.set_blocking(fd, False)
            try:
                while True:
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        break
                    data += chunk
            except BlockingIOError:
                pass
            p.stderr.close()
        p._err_text = note_stderr(data.decode(errors="replace"), command_name(p.args))
    return p._err_text


def last_line(text: str) -> str:
    return ([ln for ln in text.splitlines() if ln.strip()] or [""])[-1][:300]


def ooc_exe() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "ooc.cli"]


def popen(args, stdout=subprocess.DEVNULL, **kw):
    return subprocess.Popen(ooc_exe() + [str(a) for a in args], stdout=stdout,
                            stderr=subprocess.PIPE, start_new_session=True, **kw)


def run_ok(args, timeout=600) -> subprocess.CompletedProcess:
    try:
        p = subprocess.run(ooc_exe() + [str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Hang(f"ooc {args[0]} still running after {timeout} s (killed)") from None
    note_stderr(p.stderr, f"ooc {args[0]}")
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
    stderr_text(p)  # scanned for a traceback
    return alive


class Chaos:
    """The trials and their bookkeeping.

    Parameters
    ----------
    root : str
        The work directory.
    rng : random.Random
    needs : iterable of str, optional
        The kinds of trial that will run (default: all): only their references are made.
    ref_modes : iterable of str, optional
        The memory modes whose reference run is trained (default: all; always all for ``diskfull``,
        which sizes its tmpfs from each mode's run); the others take the ``memory`` mode's (the
        iterates never depend on ``--memory``: the full setup checks it).
    shape : (rows, cols, nnz_per_row), optional
        The synthetic data.
    in_process : bool
        Make the reference stores and runs with the command line in this process (no start-up of
        a process each: quicker, for the tests; the reference times then lack the start-up).
    """

    def __init__(self, root: str, rng: random.Random, needs=KINDS, ref_modes=tuple(MEMORY_MODES),
                 shape=(ROWS, COLS, NNZ), in_process: bool = False):
        self.root = root
        self.rng = rng
        self.needs = set(needs)
        # diskfull sizes its tmpfs from each mode's own reference run: all are trained then
        modes = set(MEMORY_MODES) if "diskfull" in self.needs else set(ref_modes) | {"memory"}
        self.ref_modes = [m for m in MEMORY_MODES if m in modes]
        self.shape = tuple(shape)
        self.in_process = in_process
        self.stats = defaultdict(Counter)
        self.landed = defaultdict(Counter)
        self.failures: list[dict] = []
        self.counters = Counter({k: 0 for k in ("tracebacks", "hangs", "runs_lost", "changed_coefficients")})
        self.skipped: dict[str, dict] = {}
        self._problems: list[tuple[Exception, int | None]] = []
        self.n = 0
        self.void = Counter()
        self.source_changes = 0
        self.src = None
        self.mount_error = None

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

        rows, cols, nnz = self.shape
        # references made again (the sources changed): the previous ones go first
        for name in ["ref.zarr", "ref-batch", "ref-batch.toml", *[f"ref-run-{m}" for m in MEMORY_MODES],
                     "in2.svm", "ref2.zarr", "ref-run-old", "ref-pred.txt"]:
            remove_path(os.path.join(self.root, name))
        self.svm = os.path.join(self.root, "in.svm")
        write_svmlight(SynthSource(rows, cols, nnz, seed=11), self.svm)
        self.store = os.path.join(self.root, "ref.zarr")
        t0 = time.monotonic()
        self._ref_cli(["convert", self.svm, self.store, *CONVERT])
        self.t_convert = time.monotonic() - t0
        st = ooc.open_store(self.store)
        self.ref_store = dict(fp=st.fingerprint, X=st.to_scipy("rows"), y=np.array(st.labels))
        self.ref = {}
        for mode in self.ref_modes:
            run = os.path.join(self.root, f"ref-run-{mode}")
            t0 = time.monotonic()
            p = self._ref_cli(["train", self.store, "--out", run, *TRAIN, *MEMORY_MODES[mode], "--json"])
            wall = time.monotonic() - t0
            res = last_json(p.stdout)
            assert res["converged"], res
            self.ref[mode] = dict(coef=coef(run), res=res, wall=wall, train_s=res["seconds"], run=run,
                                  footprint=footprint(run))
        assert all(np.array_equal(self.ref["memory"]["coef"], r["coef"]) for r in self.ref.values())
        for mode in MEMORY_MODES:  # not trained: the memory mode's (equal, as checked just above when trained)
            self.ref.setdefault(mode, self.ref["memory"])
        times = dict(convert_s=round(self.t_convert, 2), train_wall_s=round(self.ref["memory"]["wall"], 2),
                     train_s=round(self.ref["memory"]["train_s"], 2))
        #: the timeout of an ooc process of the new kinds (beyond it: a hang)
        self.timeout = max(120.0, 15 * max(r["wall"] for r in self.ref.values()), 15 * self.t_convert)
        if "overwrite" in self.needs:
            # another input (another store) and a finished run with other options, to be replaced
            self.svm2 = os.path.join(self.root, "in2.svm")
            write_svmlight(SynthSource(rows, cols, nnz, seed=12), self.svm2)
            store2 = os.path.join(self.root, "ref2.zarr")
            t0 = time.monotonic()
            self._ref_cli(["convert", self.svm2, store2, *CONVERT])
            self.t_convert2 = time.monotonic() - t0
            st2 = ooc.open_store(store2)
            self.ref_store2 = dict(fp=st2.fingerprint, X=st2.to_scipy("rows"), y=np.array(st2.labels))
            assert st2.fingerprint != st.fingerprint
            run = os.path.join(self.root, "ref-run-old")
            p = self._ref_cli(["train", self.store, "--out", run, *TRAIN_OLD, "--json"])
            self.ref_old = dict(run=run, coef=coef(run), res=last_json(p.stdout))
            assert not np.array_equal(self.ref_old["coef"], self.ref["memory"]["coef"])
            times["convert2_s"] = round(self.t_convert2, 2)
        if "diskfull" in self.needs:
            self.mount_error = mount_error(self.root)
            if self.mount_error is None:
                pred = os.path.join(self.root, "ref-pred.txt")
                run_ok(["predict", self.ref["memory"]["run"], self.svm, "--out", pred])
                with open(pred, "rb") as f:
                    self.ref_pred = f.read()
        if "batch" in self.needs:
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
            times["batch_s"] = round(self.t_batch, 2)
        return times

    def _ref_cli(self, args):
        """``ooc ARGS`` for a reference, which must succeed (in this process with ``in_process``)."""
        if not self.in_process:
            return run_ok(args)
        from click.testing import CliRunner

        from ooc.cli import main as cli

        r = CliRunner().invoke(cli, [str(a) for a in args])
        if r.exit_code != 0:
            raise AssertionError(f"ooc {args[0]} exited {r.exit_code}: {r.output[-300:]} {r.exception!r}")
        return r

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
    def problem(self, exc: Exception) -> None:
        """Note a failure of the current trial and go on with it (a hang, then the recovery checked)."""
        self._problems.append((exc, sys._getframe(1).f_lineno))

    def full_disk_line(self, r, what: str):
        """The one 'ooc: error:' line of a command that ran out of space (a problem if it is not one line
        saying the disk is full); None when there is no such line."""
        line = one_error_line(r)
        if line is None:
            self.problem(AssertionError(f"{what} exited {r.returncode} without ONE 'ooc: error:' line: "
                                        f"{r.stderr[-400:]!r}"))
        elif "space" not in line.lower() and "disk is full" not in line.lower():
            self.problem(AssertionError(f"{what}: the error does not say the disk is full: {line!r}"))
        return line
    def record(self, kind: str, fn) -> bool:
        """Run one trial; False when it is void (the ooc sources changed under it: not counted)."""
        if source_hash() != self.src:
            self.source_changes += 1
            self.setup()  # new code: new references
        t0 = time.monotonic()
        self._problems = []
        n_tb = len(_TRACEBACKS)
        try:
            fn()
        except Exception as exc:
            self._problems.append((exc, traceback.extract_tb(exc.__traceback__)[-1].lineno))
        problems = [(TracebackSeen(t), None) for t in _TRACEBACKS[n_tb:]] + self._problems
        self._problems = []
        if source_hash() != self.src:
            self.void[kind] += 1
            return False
        self.n += 1
        self.stats[kind]["trials"] += 1
        if not problems:
            self.stats[kind]["identical"] += 1
        else:
            self.stats[kind]["failures"] += 1
        for err, line in problems:
            for cls, counter in ((TracebackSeen, "tracebacks"), (Hang, "hangs"), (RunLost, "runs_lost"),
                                 (ChangedCoefficients, "changed_coefficients")):
                if isinstance(err, cls):
                    self.counters[counter] += 1
            reason = f"{type(err).__name__}: {err}".splitlines()[0][:600]
            self.failures.append({"trial": self.n, "kind": kind, "reason": reason, "where": line})
        self.stats[kind]["seconds"] = round(self.stats[kind]["seconds"] + time.monotonic() - t0, 2)
        return True

    def skip(self, kind: str, reason: str) -> None:
        s = self.skipped.setdefault(kind, {"trials": 0, "reason": reason})
        s["trials"] += 1

    # -- helpers of the new kinds ----------------------------------------------------------------
    def cli(self, args, timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run ``ooc ARGS`` to its end (stdout and stderr as text); past ``timeout``: SIGKILL and :class:`Hang`."""
        timeout = timeout or self.timeout
        p = popen(args, stdout=subprocess.PIPE)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            note_stderr(err.decode(errors="replace"), command_name(p.args))
            raise Hang(f"{command_name(p.args)} {' '.join(map(str, args[1:]))} still running after "
                       f"{timeout:.0f} s (killed); stderr: {last_line(err.decode(errors='replace'))!r}") from None
        p._err_text = note_stderr(err.decode(errors="replace"), command_name(p.args))
        return subprocess.CompletedProcess(p.args, p.returncode, out.decode(errors="replace"), p._err_text)

    def check_result(self, run: str, res: dict, ref: dict, what: str) -> None:
        """The run's coefficients and result are the reference's, exactly."""
        c = coef(run)
        if c.shape != ref["coef"].shape or not np.array_equal(c, ref["coef"]):
            diff = float(np.max(np.abs(c - ref["coef"]))) if c.shape == ref["coef"].shape else float("nan")
            raise ChangedCoefficients(f"{what}: coefficients differ from the reference (max |diff| {diff:.3g})")
        for k in ("primal", "dual", "gap", "epochs", "converged"):
            if res[k] != ref["res"][k]:
                raise AssertionError(f"{what}: {k} differs: {res[k]} != {ref['res'][k]}")

    def finish(self, run: str, mode: str, what: str) -> dict:
        """The user's last step: ``ooc resume`` (``ooc train --overwrite`` when RUN has no run.json); it
        must succeed and give the reference of memory mode ``mode``."""
        if os.path.isfile(os.path.join(run, "run.json")):
            args = ["resume", run, "--json"]
        else:
            args = ["train", self.store, "--out", run, *TRAIN, *MEMORY_MODES[mode], "--overwrite", "--json"]
        r = self.cli(args)
        if r.returncode != 0:
            raise RunLost(f"{what}: the final 'ooc {args[0]}' exited {r.returncode}: {last_line(r.stderr)!r}")
        res = last_json(r.stdout)
        self.check_result(run, res, self.ref[mode], what)
        left = [f for dp, ds, fs in os.walk(run) for f in fs + ds if ".tmp" in f]
        if left:
            raise AssertionError(f"{what}: temporary files left after the final 'ooc {args[0]}': {left[:3]}")
        return res

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
                    raise AssertionError(f"uninterrupted convert failed: {stderr_text(p)[-300:]}")
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
                raise RunLost("the re-run convert did not give the reference store")
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
            t_end = time.monotonic() + 600  # a process that never checkpoints is killed after that
            while p.poll() is None and latest(run) in (None, start_ck if mode != "any" else None) \
                    and time.monotonic() < t_end:
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
            raise AssertionError(f"an uninterrupted ooc process failed: {stderr_text(p)[-300:]}")
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
                    raise RunLost(f"resume refused: {exc}") from None
            ref = self.ref[memory_mode]
            if not np.array_equal(coef(run), ref["coef"]):
                diff = float(np.max(np.abs(coef(run) - ref["coef"])))
                raise ChangedCoefficients(f"coefficients differ from the uninterrupted run (max |diff| {diff:.3g}; "
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
                    raise Hang("the batch hung after a worker was killed") from None
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
            stderr_text(p)  # the driver has ended: its stderr scanned for a traceback
            # re-run the batch until done, as a user would
            run_ok(["batch", spec, "--workers", "2"])
            rows = self._results(out)
            if len(rows) != len(self.batch_ref):
                raise RunLost(f"results.csv has {len(rows)} runs, expected {len(self.batch_ref)}")
            bad = [r for r in rows if r["status"] != "ok"]
            if bad:
                raise RunLost(f"runs not ok after the re-run: {[(r['run'], r['error']) for r in bad]}")
            for r in rows:
                if not np.array_equal(coef(os.path.join(out, r["run"])), self.batch_ref[r["run"]]):
                    raise ChangedCoefficients(f"{r['run']}: coefficients differ from the uninterrupted batch")
        finally:
            shutil.rmtree(d, ignore_errors=True)


    # -- overwrite -------------------------------------------------------------------------------
    def trial_overwrite(self, what: str | None = None, timing: str | None = None, memory_mode: str | None = None):
        """SIGKILL ``ooc convert INPUT2 STORE --overwrite`` or ``ooc train STORE --out RUN --overwrite``."""
        what = what or self.rng.choice(["store", "run"])
        d = tempfile.mkdtemp(prefix="overwrite-", dir=self.root)
        try:
            if what == "store":
                self._overwrite_store(d, timing)
            else:
                self._overwrite_run(d, timing, memory_mode)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def _wait_swap(self, p, path: str, ino: int, tag: str, limit: float) -> None:
        """Poll until ``path`` is another directory than inode ``ino`` (the exchange happened) or ``p`` ended;
        ``path`` missing at any moment is a lost store / run (the exchange is atomic)."""
        t_end = time.monotonic() + limit
        while p.poll() is None and time.monotonic() < t_end:
            try:
                if os.stat(path).st_ino != ino:
                    return
            except FileNotFoundError:
                self.problem(RunLost(f"{path} was missing at a moment of {tag} --overwrite (not atomic)"))
                return
            time.sleep(0.0005)

    def _overwrite_store(self, d: str, timing: str | None):
        kind = "overwrite"
        store = os.path.join(d, "s.zarr")
        shutil.copytree(self.store, store)  # the old store, converted from INPUT1
        ino = os.stat(store).st_ino
        hidden = f".{os.path.basename(store)}.partial-"
        timing = timing or self.rng.choice(["from-start", "building", "at-swap"])
        p = popen(["convert", self.svm2, store, *CONVERT, "--overwrite"])
        if timing == "from-start":
            deadline = time.monotonic() + self.rng.uniform(0, self.t_convert2 * 1.05)
            while p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
        elif timing == "building":
            while p.poll() is None and not any(f.startswith(hidden) for f in os.listdir(d)):
                time.sleep(0.002)
            deadline = time.monotonic() + self.rng.uniform(0, max(self.t_convert2 - 1.8, 0.3))
            while p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
        else:  # at the exchange: the deletion of the old store
            self._wait_swap(p, store, ino, "convert", self.timeout)
            time.sleep(self.rng.choice([0.0, self.rng.uniform(0, 0.003)]))
        finished = p.poll() is not None
        kill_group(p)
        if finished and p.returncode != 0:
            raise AssertionError(f"an uninterrupted convert --overwrite failed: {last_line(stderr_text(p))!r}")
        self.landed[kind][f"(store) timing {timing}"] += 1
        if finished:
            self.landed[kind]["(store) finished before the kill"] += 1
        which = self._which_store(store, "after a convert --overwrite killed")
        self.landed[kind][f"(store) {which} store in place after the kill"] += 1
        if any(f.startswith(hidden) for f in os.listdir(d)):
            self.landed[kind]["(store) hidden temporaries left by the kill"] += 1
        # the user's next step: the same command again
        r = self.cli(["convert", self.svm2, store, *CONVERT, "--overwrite"])
        if r.returncode != 0:
            raise RunLost(f"the convert --overwrite run again exited {r.returncode}: {last_line(r.stderr)!r}")
        if self._which_store(store, "after the convert run again") != "new":
            raise RunLost("the convert --overwrite run again did not give the new store")
        left = [f for f in os.listdir(d) if f.startswith(hidden)]
        if left:
            raise AssertionError(f"hidden temporaries survived the next convert --overwrite: {left}")

    def _which_store(self, store: str, when: str) -> str:
        """'old' or 'new': the reference store ``store`` equals (fingerprint and content); else RunLost / error."""
        import ooc
        from ooc.store.backend import StoreError

        if not os.path.exists(store):
            raise RunLost(f"STORE missing {when}")
        try:
            st = ooc.open_store(store)
        except StoreError as exc:
            raise RunLost(f"STORE refused {when} (partial?): {str(exc).splitlines()[0][:200]}") from None
        for name, ref in (("old", self.ref_store), ("new", self.ref_store2)):
            if st.fingerprint == ref["fp"]:
                X = st.to_scipy("rows")
                if X.shape != ref["X"].shape or (abs(X - ref["X"])).nnz or not np.array_equal(st.labels, ref["y"]):
                    raise AssertionError(f"STORE {when} has the {name} fingerprint but other data")
                if (abs(st.to_scipy("cols").tocsr() - ref["X"])).nnz:
                    raise AssertionError(f"STORE {when} has the {name} fingerprint but a wrong column layout")
                return name
        raise AssertionError(f"STORE {when} opens with a fingerprint that is neither the old nor the new one")

    def _overwrite_run(self, d: str, timing: str | None, memory_mode: str | None):
        kind = "overwrite"
        mode = memory_mode or self.rng.choice(list(MEMORY_MODES))
        extra = MEMORY_MODES[mode]
        run = os.path.join(d, "run")
        shutil.copytree(self.ref_old["run"], run)  # a finished run with other options
        ino = os.stat(run).st_ino
        hidden = ".run.partial-"
        timing = timing or self.rng.choice(["from-start", "at-swap", "after-swap"])
        p = popen(["train", self.store, "--out", run, *TRAIN, *extra, "--overwrite"])
        if timing == "from-start":
            deadline = time.monotonic() + self.rng.uniform(0, self.ref[mode]["wall"])
            while p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
        else:
            self._wait_swap(p, run, ino, "train", self.timeout)
            if timing == "at-swap":
                time.sleep(self.rng.choice([0.0, self.rng.uniform(0, 0.003)]))
            else:
                deadline = time.monotonic() + self.rng.uniform(0, self.ref[mode]["train_s"])
                while p.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.002)
        finished = p.poll() is not None
        kill_group(p)
        if finished and p.returncode != 0:
            raise AssertionError(f"an uninterrupted train --overwrite failed: {last_line(stderr_text(p))!r}")
        self.landed[kind][f"(run) timing {timing}"] += 1
        self.landed[kind][f"(run) {train_landing(run, finished)}"] += 1
        # RUN is the old finished run or the new one, never missing
        cfg_path = os.path.join(run, "run.json")
        if not os.path.isfile(cfg_path):
            raise RunLost(f"RUN {'missing' if not os.path.exists(run) else 'without run.json'} after a killed "
                          f"train --overwrite ({timing})")
        try:
            with open(cfg_path) as f:
                cfg = json.load(f)
        except ValueError as exc:
            raise RunLost(f"RUN's run.json unreadable after a killed train --overwrite: {exc}") from None
        old = cfg.get("l2") == float(TRAIN_OLD[1]) and cfg.get("seed") == int(TRAIN_OLD[-1])
        self.landed[kind][f"(run) {'old' if old else 'new'} run in place after the kill"] += 1
        if any(f.startswith(hidden) for f in os.listdir(d)):
            self.landed[kind]["(run) hidden temporaries left by the kill"] += 1
        if old:
            if not os.path.exists(os.path.join(run, "model", "coef.npy")) or \
                    not np.array_equal(coef(run), self.ref_old["coef"]):
                raise RunLost("the old run in place after a killed train --overwrite is not the old finished run")
            # the user's next step: the same command again
            r = self.cli(["train", self.store, "--out", run, *TRAIN, *extra, "--overwrite", "--json"])
            if r.returncode != 0:
                raise RunLost(f"train --overwrite run again exited {r.returncode}: {last_line(r.stderr)!r}")
            self.check_result(run, last_json(r.stdout), self.ref[mode], "train --overwrite run again")
        else:
            self.finish(run, mode, "resume of the new run after a killed train --overwrite")
        left = [f for f in os.listdir(d) if f.startswith(hidden)]
        if left:
            raise AssertionError(f"hidden temporaries survived the next command ({'train' if old else 'resume'}): "
                                 f"{left}")

    # -- signal ----------------------------------------------------------------------------------
    def trial_signal(self, memory_mode: str | None = None, target: str | None = None, sig: int | None = None,
                     timing: str | None = None):
        """SIGINT / SIGTERM at a random moment of ``ooc train`` or ``ooc resume``."""
        kind = "signal"
        mode = memory_mode or self.rng.choice(list(MEMORY_MODES))
        extra = MEMORY_MODES[mode]
        target = target or self.rng.choice(["train", "resume"])
        sig = sig or self.rng.choice([signal.SIGINT, signal.SIGTERM])
        timing = timing or self.rng.choice(["from-start", "after-checkpoint"])
        name = signal.Signals(sig).name
        self.landed[kind][f"(memory) {mode}"] += 1
        self.landed[kind][f"(signal) {name} to ooc {target}, {timing}"] += 1
        d = tempfile.mkdtemp(prefix="signal-", dir=self.root)
        run = os.path.join(d, "run")
        ref = self.ref[mode]
        try:
            p = popen(["train", self.store, "--out", run, *TRAIN, *extra])
            if target == "resume":  # a train killed after its first checkpoint, then resumed
                self.landed[kind]["(train killed) " + self._kill_train(p, run, "any")] += 1
                p = popen(["resume", run])
            t_start = time.monotonic()
            if timing == "from-start":
                deadline = time.monotonic() + self.rng.uniform(0, ref["wall"])
            else:  # once this process wrote a checkpoint of its own
                start = latest(run)
                t_end = time.monotonic() + self.timeout
                while p.poll() is None and latest(run) == start and time.monotonic() < t_end:
                    time.sleep(0.001)
                deadline = time.monotonic() + self.rng.uniform(0, ref["train_s"])
            while p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
            finished = p.poll() is not None
            where = landing = train_landing(run, finished)
            after = time.monotonic() - t_start
            when = ("in its first second" if after < 1 else "1-2 s after its start" if after < 2 else
                    "2-4 s after its start" if after < 4 else "4+ s after its start")
            if not finished:
                self.landed[kind][f"signal {when}"] += 1
                where = f"{where}, {after:.2f} s after the start"
            hung = False
            if not finished:
                if sig == signal.SIGINT:  # Ctrl-C: the whole foreground process group
                    os.killpg(p.pid, sig)
                else:  # kill PID
                    os.kill(p.pid, sig)
                t_sig = time.monotonic()
                try:
                    p.wait(timeout=SIGNAL_GRACE)
                except subprocess.TimeoutExpired:
                    hung = True
                    kill_group(p)
                    self.problem(Hang(f"ooc {target} ({mode}) still running {SIGNAL_GRACE:.0f} s after {name} "
                                      f"(landed {where!r}); SIGKILLed"))
                else:
                    self.landed[kind][f"exit within {int(time.monotonic() - t_sig) + 1} s"] += 1
            self.landed[kind][landing] += 1
            err = stderr_text(p)
            if not hung:
                rc = p.returncode
                self.landed[kind][f"exit status {rc}"] += 1
                if rc != 0 and finished:
                    raise AssertionError(f"an uninterrupted ooc {target} failed: {last_line(err)!r}")
                if rc not in (0, 130):
                    self.problem(AssertionError(f"ooc {target} ({mode}) exited {rc} after {name} (landed {where!r}; "
                                                f"expected 130); stderr: {last_line(err)!r}"))
                elif rc == 0 and not finished:
                    self.landed[kind]["finished before the signal took effect"] += 1
            other = [ln for ln in err.splitlines()
                     if ln.strip() and ln.strip() != "ooc: interrupted" and not ln.startswith("ooc: warning: ")]
            if other and "Traceback" not in err:  # a traceback is counted as such
                self.problem(AssertionError(f"ooc {target} ({mode}) after {name}: unexpected stderr {other[:3]}"))
            self.finish(run, mode, f"resume after {name} to ooc {target} ({mode}, landed {where!r})")
        finally:
            shutil.rmtree(d, ignore_errors=True)

    # -- damage ----------------------------------------------------------------------------------
    def trial_damage(self, memory_mode: str | None = None, victim: str | None = None, action: str | None = None):
        """A train killed at a random moment, one file of its run directory deleted or a byte flipped, resume."""
        kind = "damage"
        mode = memory_mode or self.rng.choice(list(MEMORY_MODES))
        extra = MEMORY_MODES[mode]
        self.landed[kind][f"(memory) {mode}"] += 1
        d = tempfile.mkdtemp(prefix="damage-", dir=self.root)
        run = os.path.join(d, "run")
        try:
            p = popen(["train", self.store, "--out", run, *TRAIN, *extra])
            if victim is not None and victim.startswith("model"):  # a given model file: the run must finish
                try:
                    p.wait(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    kill_group(p)
                    raise Hang(f"ooc train ({mode}) still running after {self.timeout:.0f} s (killed)") from None
                if p.returncode != 0:
                    raise AssertionError(f"an uninterrupted ooc train failed: {last_line(stderr_text(p))!r}")
                stderr_text(p)
                self.landed[kind]["(kill) none: the run finished"] += 1
            else:
                how = "any" if victim is not None else self.rng.choice(["any", "any", "any-from-start"])
                self.landed[kind]["(kill) " + self._kill_train(p, run, how)] += 1
            files = sorted(os.path.relpath(os.path.join(dp, f), run) for dp, _, fs in os.walk(run) for f in fs
                           if f not in (".lock", "convergence.png"))
            if victim is not None:  # a given category (the quick tests)
                files = [f for f in files if damage_category(f) == victim] or files
            if not files:
                self.landed[kind]["nothing to damage (killed before the run directory existed)"] += 1
                self.finish(run, mode, "train after a kill before the run existed")
                return
            rel = self.rng.choice(files)
            path = os.path.join(run, rel)
            cat = damage_category(rel)
            size = os.path.getsize(path)
            act = action or self.rng.choice(["delete", "flip"])
            if act == "flip" and size == 0:
                act = "delete"
            if act == "delete":
                os.remove(path)
            else:
                with open(path, "r+b") as f:
                    pos = self.rng.randrange(size)
                    f.seek(pos)
                    b = f.read(1)[0]
                    f.seek(pos)
                    f.write(bytes([b ^ (1 << self.rng.randrange(8))]))
            what = f"{act} {rel}" + (f" (byte {pos} of {size})" if act == "flip" else "")
            r = self.cli(["resume", run, "--json"])
            warned = any(ln.startswith("ooc: warning: ") for ln in r.stderr.splitlines())
            if r.returncode == 0:
                self.landed[kind][f"{cat} ({act}): resumed{' after a warning' if warned else ''}"] += 1
                self.check_result(run, last_json(r.stdout), self.ref[mode], f"resume after {what}")
                return
            line = one_error_line(r)
            if line is None:
                self.problem(AssertionError(f"resume after {what} exited {r.returncode} without ONE 'ooc: error:' "
                                            f"line: {r.stderr[-300:]!r}"))
                line = last_line(r.stderr)
            self.landed[kind][f"{cat} ({act}): refused ({error_reason(line)})"] += 1
            if cat != "run.json":
                raise RunLost(f"resume refused after {what} ({mode}): {line!r}")
            # the run's identity is gone: the user trains again
            r = self.cli(["train", self.store, "--out", run, *TRAIN, *extra, "--overwrite", "--json"])
            if r.returncode != 0:
                raise RunLost(f"after {what} and a refused resume, 'ooc train --overwrite' exited {r.returncode}: "
                              f"{last_line(r.stderr)!r}")
            self.check_result(run, last_json(r.stdout), self.ref[mode], f"train --overwrite after {what}")
        finally:
            shutil.rmtree(d, ignore_errors=True)

    # -- diskfull --------------------------------------------------------------------------------
    def trial_diskfull(self, memory_mode: str | None = None):
        """The run directory on a small tmpfs, nearly full: train, then resume once space is freed; predict."""
        kind = "diskfull"
        mode = memory_mode or self.rng.choice(list(MEMORY_MODES))
        extra = MEMORY_MODES[mode]
        self.landed[kind][f"(memory) {mode}"] += 1
        size_run = self.ref[mode]["footprint"]
        size = -(-(2 * size_run + (64 << 10)) // 4096) * 4096
        mnt = tempfile.mkdtemp(prefix="diskfull-", dir=self.root)
        with mounted_tmpfs(mnt, size):
            run = os.path.join(mnt, "run")
            leave = self.rng.randint(0, size_run)
            filler = fill(mnt, leave)
            r = self.cli(["train", self.store, "--out", run, *TRAIN, *extra, "--json"])
            if r.returncode == 0:
                self.landed[kind]["train fit in the space left"] += 1
                self.check_result(run, last_json(r.stdout), self.ref[mode], "train with enough space")
            else:
                line = self.full_disk_line(r, f"train on a full disk ({mode}, {leave} B free)")
                self.landed[kind][f"train failed: {full_where(line or last_line(r.stderr))}"] += 1
            os.remove(filler)
            if r.returncode != 0:
                self.finish(run, mode, f"resume after a full disk ({mode}, {leave} B free)")
            left = [f for f in os.listdir(mnt) if ".partial-" in f]
            if left:
                raise AssertionError(f"hidden temporaries left on the tmpfs after the final command: {left}")
            # ooc predict --out F on a full disk: F unchanged
            out = os.path.join(mnt, "pred.txt")
            known = b"the previous predictions\n" * 50
            with open(out, "wb") as f:
                f.write(known)
            before = set(os.listdir(mnt))
            filler = fill(mnt, self.rng.randrange(0, max(len(self.ref_pred), 1)))
            r = self.cli(["predict", run, self.svm, "--out", out])
            with open(out, "rb") as f:
                now = f.read()
            left = sorted(set(os.listdir(mnt)) - before - {os.path.basename(filler)})
            if r.returncode == 0:
                self.landed[kind]["predict fit in the space left"] += 1
                if now != self.ref_pred:
                    raise AssertionError("predict --out exited 0 on a nearly full disk but F is not the predictions")
            else:
                self.landed[kind]["predict failed (disk full)"] += 1
                line = self.full_disk_line(r, "predict --out on a full disk")
                if now != known:
                    self.problem(RunLost(f"predict --out on a full disk changed F ({len(now)} bytes now)"))
            if left:
                self.problem(AssertionError(f"predict --out on a full disk left {left}"))
            os.remove(filler)

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


# -- helpers of the new kinds ------------------------------------------------------------------------
def footprint(path: str) -> int:
    """Bytes the files under ``path`` take on a tmpfs (whole 4 KiB pages)."""
    return sum(-(-os.path.getsize(os.path.join(dp, f)) // 4096) * 4096 for dp, _, fs in os.walk(path) for f in fs)


def mount_error(root: str) -> str | None:
    """None when a tmpfs can be mounted here (root or CAP_SYS_ADMIN), else why not."""
    d = tempfile.mkdtemp(prefix="mount-check-", dir=root)
    try:
        with mounted_tmpfs(d, 64 << 10):
            pass
    except OSError as exc:
        return str(exc)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return None


@contextlib.contextmanager
def mounted_tmpfs(path: str, size: int):
    """A tmpfs of ``size`` bytes mounted at ``path`` (an existing directory), unmounted (and ``path`` removed)
    at the end; ``OSError`` when mounting is not permitted."""
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OSError(f"mount: {exc}") from None
    if r.returncode != 0:
        raise OSError(f"cannot mount a tmpfs: {r.stderr.strip() or r.returncode}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", path], capture_output=True, timeout=60).returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True, timeout=60)
        with contextlib.suppress(OSError):
            os.rmdir(path)


def fill(directory: str, leave: int) -> str:
    """A file that leaves about ``leave`` bytes free on the file system of ``directory``."""
    s = os.statvfs(directory)
    free = s.f_bavail * s.f_frsize
    path = os.path.join(directory, "filler")
    with open(path, "wb") as f:
        n = max(free - leave, 0)
        while n > 0:
            k = min(n, 1 << 20)
            try:
                f.write(b"\0" * k)
                f.flush()
            except OSError:
                break
            n -= k
    return path


def one_error_line(r: subprocess.CompletedProcess) -> str | None:
    """The ``ooc: error:`` line of a failed command that printed ONE of them (beside ``ooc: warning:`` lines)
    and no traceback, with exit status 1; else None."""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("ooc: warning: ")]
    if r.returncode != 1 or "Traceback" in r.stderr or len(lines) != 1 or not lines[0].startswith("ooc: error: "):
        return None
    return lines[0]


def damage_category(rel: str) -> str:
    """What the file ``rel`` (relative to the run directory) is."""
    name = os.path.basename(rel)
    if ".tmp" in name:
        return "temporary"
    if rel in ("run.json", "LATEST", "history.jsonl"):
        return rel
    if rel.startswith(os.path.join("state", "duals") + os.sep):
        return "duals"
    if rel.startswith(os.path.join("state", "ckpt-")):
        return "checkpoint " + name
    if rel.startswith("model" + os.sep):
        return "model " + name
    return "other"


def error_reason(line: str) -> str:
    """The category of an ``ooc: error:`` line."""
    low = line.lower()
    for words, reason in ((("no run.json", "not a run directory"), "not a run directory"),
                          (("checksum",), "checksum"), (("damaged",), "damaged"), (("unreadable",), "unreadable"),
                          (("no such file", "missing", "does not exist"), "missing file"),
                          (("internal error",), "internal error")):
        if any(w in low for w in words):
            return reason
    return "other: " + line[len("ooc: error: "):][:80]


def full_where(line: str) -> str:
    """Where a full-disk error hit, from its line."""
    low = line.lower()
    for words, where in ((("run.json",), "creating the run directory"), (("ckpt", "checkpoint"), "a checkpoint"),
                         (("duals",), "the dual files"), (("model", "coef"), "the model"),
                         (("history",), "the history"), (("convergence",), "the plot")):
        if any(w in low for w in words):
            return where
    return "elsewhere: " + line[len("ooc: error: "):][:100]

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mix", default=DEFAULT_MIX,
                    help=f"relative share of each kind of trial, KIND=SHARE,... (kinds: {', '.join(KINDS)}; "
                         f"default {DEFAULT_MIX})")
    ap.add_argument("--workdir", default=None, help="where to work (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)
    root = args.workdir or tempfile.mkdtemp(prefix="ooc-chaos-")
    os.makedirs(root, exist_ok=True)
    rng = random.Random(args.seed)
    mix = {k.strip(): float(v) for k, v in (kv.split("=") for kv in args.mix.split(","))}
    unknown = sorted(set(mix) - set(KINDS))
    if unknown:
        ap.error(f"--mix: unknown kinds {unknown} (kinds: {', '.join(KINDS)})")
    mix = {k: v for k, v in mix.items() if v > 0}
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
    chaos = Chaos(root, rng, needs=set(kinds))
    trials = {"convert": chaos.trial_convert, "batch": chaos.trial_batch, "overwrite": chaos.trial_overwrite,
              "signal": chaos.trial_signal, "damage": chaos.trial_damage, "diskfull": chaos.trial_diskfull,
              "train": lambda: chaos.trial_train("train"), "checkpoint": lambda: chaos.trial_train("checkpoint")}
    ref_times = None
    try:
        ref_times = chaos.setup()
        for kind in kinds:
            if kind == "diskfull" and chaos.mount_error is not None:
                chaos.skip(kind, f"cannot mount a tmpfs here: {chaos.mount_error}")
                continue
            for _attempt in range(5):  # a void trial (sources changed under it) is run again
                if chaos.record(kind, trials[kind]):
                    break
            print(f"chaos: {chaos.n}/{len(kinds)} {kind}: "
                  f"{sum(s['failures'] for s in chaos.stats.values())} failures so far", file=sys.stderr, flush=True)
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    out = {
        "trials": chaos.n,
        "identical": sum(s["identical"] for s in chaos.stats.values()),
        "failures": len(chaos.failures),
        **{k: chaos.counters[k] for k in ("tracebacks", "hangs", "runs_lost", "changed_coefficients")},
        "skipped": chaos.skipped,
        "per_kind": {k: dict(v) for k, v in chaos.stats.items()},
        "landed": {k: dict(v) for k, v in chaos.landed.items()},
        "failure_reasons": chaos.failures,
        "reference_seconds": ref_times,
        "void_trials_source_changed": dict(chaos.void),
        "references_recomputed_after_source_change": chaos.source_changes,
        "data": dict(zip(("rows", "cols", "nnz_per_row"), chaos.shape)),
        "seed": args.seed,
        "seconds": round(time.monotonic() - t0, 1),
    }
    print(json.dumps(out))
    return 0 if not chaos.failures and not any(chaos.counters.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
