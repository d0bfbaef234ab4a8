"""SIGKILL and resume: ``ooc resume RUN`` continues bit-for-bit (docs/training.rst, checkpoints and resume).

Real ``ooc train`` / ``ooc resume`` processes run on a small on-disk Zarr store with many row
blocks, with ``--checkpoint-every 0`` (a checkpoint at every block boundary), and are killed
with SIGKILL at random points:

* ``any``: after the run's checkpoint number (in RUN/LATEST) reaches a random target, plus a
  random delay: anywhere in a pass, a dual write, a history append or a checkpoint;
* ``ckpt``: as soon as a checkpoint is being written (a ``ckpt-*.tmp-*`` directory exists),
  plus a random delay of a few milliseconds: inside the checkpoint write;
* ``publish``: while a complete new checkpoint exists next to the previous one, i.e. between
  its rename and the end of the LATEST replacement and the clean-up.

Then ``ooc resume RUN`` (itself killed again in the chained trials) must end with coefficients
(``model/coef.npy``) IDENTICAL to an uninterrupted run, and the same history of certified
states. The trials run concurrently to keep the quick test short; ``-m slow`` runs a longer soak.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

import ooc
from ooc.cli import main
from ooc.fsutil import seal_json

N, D = 240, 24
# --mix-blocks 4: groups of 4 of the ~20 blocks, so that a pass has many group boundaries to be killed at
TRAIN_OPTS = ["--l2", "0.01", "--tol", "1e-10", "--max-epochs", "50", "--checkpoint-every", "0", "--seed", "7",
              "--mix-blocks", "4"]
#: a cache budget so small that the duals are paged from disk (per-block files, two buffers)
PAGED = ["--duals", "paged"]
#: history fields that must match an uninterrupted run exactly (timings and I/O counters differ)
EXACT = ("epoch", "primal", "dual", "gap", "rel_gap", "nnz_w")


def ooc_exe() -> str:
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    return exe if os.path.exists(exe) else shutil.which("ooc")


def cli(*args, ok=True):
    res = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=True)
    if ok:
        assert res.exit_code == 0, (res.exit_code, res.stdout, res.stderr, res.exception)
    return res


def last_json(text):
    return json.loads([ln for ln in text.splitlines() if ln.strip()][-1])


def history(run):
    out = []
    with open(os.path.join(run, "history.jsonl")) as f:
        for ln in f:
            out.append(json.loads(ln))  # every line must parse after a resume
    return out


def exact(h):
    return [tuple(e[k] for k in EXACT) for e in h]


def coef(run):
    return np.load(os.path.join(run, "model", "coef.npy"))


def intercept(run):
    with open(os.path.join(run, "model", "model.json")) as f:
        return json.load(f)["intercept"]


def make_store(path, seed=0, flip=None, shift=0.0):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.25, random_state=seed, format="csr", data_rvs=rng.standard_normal)
    y = np.where(X @ rng.standard_normal(D) + 0.3 * rng.standard_normal(N) + shift > 0, 1.0, -1.0)
    if flip is not None:
        y[flip] = -y[flip]
    # ~ 12 rows per block: 20 row blocks
    return ooc.convert(X, str(path), y=y, dtype="float64", block_bytes=12 * 6 * 12, overwrite=True)


def _fast_dir():
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The store and an uninterrupted reference run with the same options."""
    yield from _setup(tmp_path_factory, [])


@pytest.fixture(scope="module")
def setup_icpt(tmp_path_factory):
    """As ``setup`` with scikit-learn's intercept (its state, ooc.solvers.intercept, is checkpointed too)."""
    yield from _setup(tmp_path_factory, ["--fit-intercept"])


@pytest.fixture
def setup_threads(tmp_path_factory, monkeypatch):
    """As ``setup`` on 2 threads that split the rows (CoCoA+ replicas, ooc.solvers.row_threads): the
    store's 240 rows are split all the same, though their conditioning would keep one thread (the forked
    trials inherit the settings)."""
    monkeypatch.setattr("ooc.solvers.row_threads.MIN_ROWS_PER_THREAD", 1)
    monkeypatch.setattr("ooc.solvers.row_threads.PASS_OVERHEAD", 1.0)
    yield from _setup(tmp_path_factory, ["--threads", "2"])


def _setup(tmp_path_factory, opts):
    root = tmp_path_factory.mktemp("resume")
    store = root / "s.zarr"
    st = make_store(store, shift=1.0 if "--fit-intercept" in opts else 0.0)
    assert st.n_blocks("rows") >= 15
    ref = pathlib.Path(tempfile.mkdtemp(prefix="ooc-test-resume-ref-", dir=_fast_dir())) / "ref"
    out = last_json(cli("train", store, "--out", ref, *TRAIN_OPTS, *opts, "--json").stdout)
    assert out["converged"] and out["epochs"] >= 3
    with open(ref / "LATEST") as f:
        last_seq = int(f.read().strip().split("-")[1])
    # the same run with the duals paged from disk (two alternating per-block buffers) instead of
    # kept in memory and saved in each checkpoint: identical iterates
    paged = ref.parent / "ref-paged"
    out_p = last_json(cli("train", store, "--out", paged, *TRAIN_OPTS, *opts, *PAGED, "--json").stdout)
    assert json.load(open(paged / "model" / "metrics.json")).get("dual_store", "paged") == "paged"
    assert np.array_equal(coef(paged), coef(ref)) and exact(history(paged)) == exact(history(ref))
    assert out_p["primal"] == out["primal"]
    yield dict(root=root, store=store, ref=ref, out=out, coef=coef(ref), hist=exact(history(ref)),
               last_seq=last_seq, n_blocks=st.n_blocks("rows"), opts=opts, intercept=intercept(ref))
    shutil.rmtree(ref.parent, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# the kill harness
# ---------------------------------------------------------------------------------------------
def latest_seq(run):
    try:
        with open(os.path.join(run, "LATEST")) as f:
            name = f.read().strip()
        return int(name.split("-")[1])
    except (OSError, ValueError, IndexError):
        return -1


def state_entries(run):
    try:
        return os.listdir(os.path.join(run, "state"))
    except OSError:
        return []


def landing(run):
    """Where a kill landed, as far as the files tell."""
    ents = state_entries(run)
    if any(".tmp-" in e for e in ents):
        return "inside a checkpoint write"
    if sum(e.startswith("ckpt-") for e in ents) > 1:
        return "publishing a checkpoint"
    if any(".tmp-" in e for e in os.listdir(run)):
        return "replacing LATEST/history"
    return "between checkpoints"


@dataclass
class Kill:
    mode: str  # any | ckpt | publish
    target: int  # checkpoint number (in LATEST) to reach before arming
    delay: float  # seconds after arming (any) or after seeing the write begin (ckpt)


def fork_cli(args) -> int:
    """Run ``ooc ARGS`` in a child forked from this (warm) process: the ``ooc`` command code
    without a Python start-up and kernel loading per process. The child never returns here."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            fd = os.open(os.devnull, os.O_RDWR)
            for k in (0, 1, 2):
                os.dup2(fd, k)
            sys.stdout = sys.stderr = open(os.devnull, "w")
            main.main(args=[str(a) for a in args], prog_name="ooc", standalone_mode=False)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            # what failed, for the parent's assertion (Child.error): the child's stderr is /dev/null
            with contextlib.suppress(OSError), open(_fork_error_path(os.getpid()), "w") as f:
                f.write(f"ooc {' '.join(map(str, args))}\n{traceback.format_exc()}")
            code = 1
        finally:
            os._exit(code)
    return pid


def _fork_error_path(pid: int) -> str:
    return os.path.join(tempfile.gettempdir(), f"ooc-test-fork-{pid}.err")


class Child:
    """One ``ooc`` process: forked (``real=False``) or the installed executable (``real=True``)."""

    def __init__(self, args, real):
        self.real, self.rc = real, None
        if real:
            self.proc = subprocess.Popen([ooc_exe(), *map(str, args)], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
            self.pid = self.proc.pid
        else:
            self.pid = fork_cli(args)

    def poll(self):
        if self.rc is None:
            if self.real:
                self.rc = self.proc.poll()
            else:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.rc = os.waitstatus_to_exitcode(status)
        return self.rc

    def error(self) -> str:
        """The traceback of a forked child that failed (empty for the executable: its stderr is not kept)."""
        try:
            with open(_fork_error_path(self.pid)) as f:
                return f.read()
        except OSError:
            return ""

    def kill(self):
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            if self.real:
                self.proc.wait()
            else:
                os.waitpid(self.pid, 0)
            self.rc = -9


@dataclass
class Trial:
    run: str
    kills: list
    real: bool = False
    extra: list = field(default_factory=list)  # more train options (PAGED)
    child: Child = None
    stage: int = 0
    armed_at: float = None
    landed: list = field(default_factory=list)
    finished_early: int = 0
    retries: int = 0  # first runs started again because they finished before their kill


def run_trials(store, trials, max_parallel=4, timeout=240.0):
    """Drive each trial: train, kill per its plan, resume, kill, ... until its kills are used
    (the final resume is left to the caller). Several trials run at once."""
    def train_child(t):
        return Child(["train", store, "--out", t.run, *TRAIN_OPTS, *t.extra], t.real)

    pending = list(trials)
    active = []
    t_end = time.monotonic() + timeout
    try:
        while pending or active:
            while pending and len(active) < max_parallel:
                t = pending.pop(0)
                t.child = train_child(t)
                active.append(t)
            assert time.monotonic() < t_end, "kill trials timed out"
            for t in list(active):
                k = t.kills[t.stage]
                rc = t.child.poll()
                if rc is not None and t.stage == 0 and t.retries < 2:
                    # the first run finished before its kill caught a (short) checkpoint write or
                    # publication: the trial starts again from nothing, so the kill still lands
                    assert rc == 0, f"{t.run}: ooc exited with {rc}: {t.child.error()}"
                    shutil.rmtree(t.run)
                    t.retries += 1
                    t.armed_at = None
                    t.child = train_child(t)
                    continue
                if rc is not None:  # it finished before the kill: nothing to kill this time
                    assert rc == 0, f"{t.run}: ooc exited with {rc}: {t.child.error()}"
                    t.finished_early += 1
                    fire = True
                else:
                    fire = False
                    now = time.monotonic()
                    if t.armed_at is None:
                        if latest_seq(t.run) >= k.target:
                            t.armed_at = now
                            fire = k.mode == "any" and k.delay == 0
                    elif k.mode == "any":
                        fire = now - t.armed_at >= k.delay
                    elif k.mode == "ckpt":
                        if any(".tmp-" in e for e in state_entries(t.run)):
                            if k.delay:
                                time.sleep(k.delay)
                            fire = True
                    elif k.mode == "publish":
                        ents = state_entries(t.run)
                        fire = sum(e.startswith("ckpt-") and ".tmp-" not in e for e in ents) > 1
                    if fire:
                        t.child.kill()
                        t.landed.append(landing(t.run))
                if fire:
                    t.stage += 1
                    t.armed_at = None
                    if t.stage < len(t.kills):
                        t.child = Child(["resume", t.run], t.real)
                    else:
                        active.remove(t)
            time.sleep(0.0005)
    finally:
        for t in active:
            t.child.kill()


def final_resume(t):
    """``ooc resume RUN --json`` to the end; returns its JSON result."""
    if t.real:
        p = subprocess.run([ooc_exe(), "resume", t.run, "--json"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        return last_json(p.stdout)
    return last_json(cli("resume", t.run, "--json").stdout)


def check_identical(setup, t, r):
    info = (t.run, t.kills, t.landed)
    assert np.array_equal(coef(t.run), setup["coef"]), info
    assert intercept(t.run) == setup["intercept"], info
    for k in ("primal", "dual", "gap", "epochs", "nnz_w", "converged"):
        assert r[k] == setup["out"][k], (k, *info)
    assert exact(history(t.run)) == setup["hist"], info
    paged = PAGED[-1] in t.extra
    assert json.load(open(os.path.join(t.run, "model", "metrics.json"))).get("dual_store", "paged") == \
        ("paged" if paged else "memory"), info
    # the resumed run cleaned up after the killed processes: one checkpoint, no temporary files
    ents = state_entries(t.run)
    assert sum(e.startswith("ckpt-") for e in ents) == 1, ents
    leftovers = [os.path.join(dp, f) for dp, ds, fs in os.walk(t.run) for f in fs + ds if ".tmp" in f]
    assert not leftovers, leftovers


#: checkpoints at the end of a run that no kill targets (see plan)
KILL_TAIL = 8


def plan(setup, rng, n_kills, first_mode=0):
    """``n_kills`` random kills over the run (checkpoint numbers 1 .. last - 1 - KILL_TAIL), in
    order, with the modes taking turns.

    A kill armed at its checkpoint then waits for the next checkpoint write (or publication) to
    catch; the last KILL_TAIL checkpoints are left as its chances. Without them a kill armed at
    checkpoint 98 of 102 missed the three short writes left (in-memory duals, run directory in
    /dev/shm) in about a run in three, and the process finished before it.
    """
    last = setup["last_seq"] - KILL_TAIL
    modes = ["any", "ckpt", "publish"]
    kills = []
    lo = 0
    for j in range(n_kills):
        # each kill comes later than the one before, so every process makes progress
        span = max(1, (last - 1 - lo) // (n_kills - j))
        target = rng.randint(lo + 1, lo + span)
        mode = modes[(first_mode + j) % 3]
        delay = rng.uniform(0, 0.2) if mode == "any" else rng.choice([0.0, rng.uniform(0, 0.01)])
        kills.append(Kill(mode, target, delay))
        lo = target
    return kills


@pytest.fixture
def shm_path(tmp_path):
    """Run directories in memory (/dev/shm) when there is one, for the quick test: a checkpoint at
    every block is fsynced, and a busy disk makes that the whole cost. The soak uses the disk."""
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    d = tempfile.mkdtemp(prefix="ooc-test-resume-", dir="/dev/shm")
    try:
        yield pathlib.Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def kill_and_resume(setup, root, layout, seed):
    """``layout``: list of (number of kills, real executable?) per trial."""
    rng = random.Random(seed)
    # every other trial pages its duals from disk; the others keep them in memory
    trials = [Trial(str(root / f"t{i:02d}"), plan(setup, rng, n, i), real, setup["opts"] + (PAGED if i % 2 else []))
              for i, (n, real) in enumerate(layout)]
    run_trials(str(setup["store"]), trials)
    landed = {}
    for t in trials:
        for k, s in zip(t.kills, t.landed):
            landed[s] = landed.get(s, 0) + 1
            landed[k.mode, s] = landed.get((k.mode, s), 0) + 1
    n_kills = sum(len(t.landed) for t in trials)
    print(f"\n{n_kills} kills over {len(trials)} trials, landed: {landed}; "
          f"finished before their kill: {sum(t.finished_early for t in trials)} "
          f"(first runs started again for that: {sum(t.retries for t in trials)})")
    # the plans kill mid-run: nearly every kill must have hit a running process
    assert sum(t.finished_early for t in trials) <= 0.2 * n_kills
    for t in trials:
        check_identical(setup, t, final_resume(t))
    return landed


# ---------------------------------------------------------------------------------------------
def test_reference_has_many_blocks_and_checkpoints(setup):
    assert setup["n_blocks"] >= 15
    # checkpoint-every 0: a checkpoint at every group boundary (rows of --mix-blocks 4 blocks are
    # visited together), plus the start of each epoch
    n_groups = -(-setup["n_blocks"] // 4)
    assert setup["last_seq"] >= setup["out"]["epochs"] * (n_groups - 1)


def test_sigkill_at_random_points_then_resume_is_identical(setup, shm_path):
    """10 trials killed once at random (anywhere, inside a checkpoint write, while publishing
    one), 2 chains of 3 kills (kill, resume, kill the resume, ...), and one chain of 2 kills
    with the real ``ooc`` executable; then ``ooc resume`` to the end: identical coefficients."""
    kill_and_resume(setup, shm_path, [(1, False)] * 10 + [(3, False)] * 2 + [(2, True)], seed=1234)


def test_sigkill_with_two_threads_then_resume_is_identical(setup_threads, shm_path):
    """The same with one problem's rows over 2 threads (the replicas are rebuilt from the checkpoint's
    w and snapshot): identical coefficients, and not one thread's (the rows were split)."""
    one = setup_threads["root"] / "one"
    cli("train", setup_threads["store"], "--out", one, *TRAIN_OPTS, "--threads", "1")
    assert not np.array_equal(coef(one), setup_threads["coef"])
    kill_and_resume(setup_threads, shm_path, [(1, False)] * 4 + [(3, False)], seed=7)


def test_sigkill_with_fit_intercept_then_resume_is_identical(setup_icpt, shm_path):
    """The same with --fit-intercept: the intercepts, their bracket and the certificate's lines are
    in the checkpoints, so a resumed run moves the intercept exactly as an uninterrupted one."""
    assert setup_icpt["intercept"] != 0.0 and setup_icpt["out"]["converged"]
    kill_and_resume(setup_icpt, shm_path, [(1, False)] * 4 + [(3, False)], seed=99)


@pytest.mark.parametrize("start, then", [("memory", "paged"), ("paged", "memory")])
def test_resume_with_the_duals_elsewhere_is_identical(setup, shm_path, start, then):
    """Where the duals live follows --memory, never the iterates: a run killed anywhere (a mid-pass checkpoint
    included) with its duals in memory resumes with them paged (a resume under a smaller --memory), and the
    other way, to the same coefficients and history bit for bit (before, a checkpoint of in-memory duals
    resumed paged read dual files that were never written)."""
    from ooc.runs.rundir import RunDir

    rng = random.Random(5 if start == "memory" else 6)
    trials = [Trial(str(shm_path / f"t{i}"), plan(setup, rng, 1, i), False, ["--duals", start]) for i in range(3)]
    run_trials(str(setup["store"]), trials)
    for t in trials:
        rd = RunDir.open(t.run)
        rd.write_config({**rd.config, "duals": then})  # what a resume under another --memory plans
        r = final_resume(t)
        info = (t.run, t.kills, t.landed)
        assert np.array_equal(coef(t.run), setup["coef"]), info
        for k in ("primal", "dual", "gap", "epochs", "converged"):
            assert r[k] == setup["out"][k], (k, *info)
        assert exact(history(t.run)) == setup["hist"], info


@pytest.mark.slow
def test_sigkill_soak(setup, tmp_path):
    """Run directories on the disk (fsync windows), real executables, many kills."""
    seed = int(time.time())
    print("seed", seed)
    landed = kill_and_resume(setup, tmp_path, [(1, True)] * 30 + [(4, True)] * 6 + [(3, False)] * 20, seed=seed)
    assert landed.get("inside a checkpoint write", 0) >= 5


# ---------------------------------------------------------------------------------------------
# refusals and edge cases (in-process CLI: same command code, no process start-up each)
# ---------------------------------------------------------------------------------------------
def one_line_error(res):
    assert res.exit_code != 0
    assert isinstance(res.exception, SystemExit), repr(res.exception)
    err = res.stderr.strip()
    assert err.startswith("ooc: error:") and len(err.splitlines()) == 1, err
    return err


def _partial_run(setup, tmp_path, store=None, epochs=2):
    """A run stopped after ``epochs`` epochs (max-epochs), to be resumed further."""
    run = tmp_path / "run"
    opts = list(TRAIN_OPTS)
    opts[opts.index("--max-epochs") + 1] = str(epochs)
    cli("train", store or setup["store"], "--out", run, *opts)
    return run


def test_resume_refused_when_store_changed(setup, shm_path):
    store = shm_path / "s.zarr"
    make_store(store)
    run = _partial_run(setup, shm_path, store=store)
    before = coef(run)
    make_store(store, flip=5)  # one label differs: another fingerprint
    err = one_line_error(cli("resume", run, ok=False))
    assert "changed" in err and "refused" in err
    assert np.array_equal(coef(run), before)
    # the same content converted again has the same fingerprint: resume is fine
    make_store(store)
    assert last_json(cli("resume", run, "--max-epochs", "50", "--json").stdout)["converged"] is True
    # a store that is gone: refused too
    shutil.rmtree(store)
    err = one_line_error(cli("resume", run, ok=False))
    assert "s.zarr" in err


@pytest.mark.parametrize("version, made", [(1, "an earlier version"), (2, "an earlier version"),
                                           (4, "a later version"), ("x", "no version")])
@pytest.mark.parametrize("command", ["resume", "info"])
def test_a_run_of_another_state_format_is_refused_naming_it(setup, shm_path, version, made, command):
    """One run state format: a run of another (the development versions' 1 and 2, a later one) is refused by every
    command that reads it, in one line naming the version that made it and that training again is needed; its
    files stay as they are."""
    from ooc.fsutil import seal_json
    from ooc.runs.records import STATE_FORMAT

    run = _partial_run(setup, shm_path)
    with open(run / "run.json") as f:
        cfg = json.load(f)
    assert cfg["state_format"] == STATE_FORMAT
    cfg.pop("checksum")
    cfg["state_format"] = version
    (run / "run.json").write_bytes(seal_json(cfg))  # sealed: the version alone is what differs
    before = sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*"))
    args = {"resume": [run], "info": [run]}[command]
    err = one_line_error(cli(command, *args, ok=False))
    assert f"run state format {version!r}" in err if version == "x" else f"run state format {version})" in err, err
    assert made in err and "ooc train" in err, err
    assert sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*")) == before


def test_torn_history_line_is_refused_by_number_and_kept(setup, shm_path):
    """ooc replaces history.jsonl whole, so it never leaves a line without its newline: such a line is not
    ooc's; the resume is refused naming it and the file stays; without it, the resume is bit-exact."""
    run = _partial_run(setup, shm_path)
    whole = (run / "history.jsonl").read_bytes()
    with open(run / "history.jsonl", "a") as f:
        f.write('{"epoch": 2, "seconds": 0.3, "primal": 0.61')  # a line without its newline
    torn = (run / "history.jsonl").read_bytes()
    r = cli("resume", run, "--max-epochs", "50", "--json", ok=False)
    assert r.exit_code == 1 and "history.jsonl: line 4: has no newline" in r.stderr, r.stderr
    assert (run / "history.jsonl").read_bytes() == torn
    (run / "history.jsonl").write_bytes(whole)
    out = last_json(cli("resume", run, "--max-epochs", "50", "--json").stdout)
    assert out["epochs"] == setup["out"]["epochs"]
    assert exact(history(run)) == setup["hist"]
    assert np.array_equal(coef(run), setup["coef"])


def test_resume_with_more_epochs_continues_an_unconverged_run(setup, shm_path):
    run = _partial_run(setup, shm_path, epochs=2)
    first = history(run)
    assert len(first) == 3 and first[-1]["rel_gap"] > 1e-7  # stopped, not converged
    out = last_json(cli("resume", run, "--max-epochs", "50", "--json").stdout)
    assert out["converged"] is True and out["epochs"] == setup["out"]["epochs"]
    # the same as a run asked for 50 epochs from the start
    assert np.array_equal(coef(run), setup["coef"])
    assert exact(history(run)) == setup["hist"]
    assert json.load(open(run / "run.json"))["max_epochs"] == 50
    # resuming without --max-epochs now keeps the new limit and re-certifies the same state
    again = last_json(cli("resume", run, "--json").stdout)
    assert (again["primal"], again["epochs"]) == (out["primal"], out["epochs"])


def test_resume_step_by_step_equals_one_run(setup, shm_path):
    """max-epochs 1, then resume to 2, 3, then 50: the same iterates as one uninterrupted run."""
    run = _partial_run(setup, shm_path, epochs=1)
    for e in (2, 3, 50):
        out = last_json(cli("resume", run, "--max-epochs", e, "--json").stdout)
    assert out["converged"] is True
    assert np.array_equal(coef(run), setup["coef"])
    assert exact(history(run)) == setup["hist"]


def test_resume_of_a_finished_run_recertifies(setup, shm_path):
    run = shm_path / "copy"
    shutil.copytree(setup["ref"], run)
    out = last_json(cli("resume", run, "--json").stdout)
    assert (out["primal"], out["gap"], out["epochs"]) == (setup["out"]["primal"], setup["out"]["gap"],
                                                           setup["out"]["epochs"])
    assert np.array_equal(coef(run), setup["coef"])
    assert exact(history(run)) == setup["hist"]


def test_resume_of_a_run_in_use_is_refused(setup, shm_path):
    """Two processes on one run would interleave their dual buffers: the second is refused."""
    run = shm_path / "busy"
    child = Child(["train", setup["store"], "--out", run, *TRAIN_OPTS], real=False)
    try:
        t_end = time.monotonic() + 60
        while latest_seq(run) < 1:
            assert child.poll() is None and time.monotonic() < t_end, "the training child did not start"
            time.sleep(0.005)
        err = one_line_error(cli("resume", run, ok=False))
        assert "in use" in err
        err = one_line_error(cli("train", setup["store"], "--out", run, "--overwrite", ok=False))
        assert "in use" in err
    finally:
        child.kill()
    out = last_json(cli("resume", run, "--json").stdout)  # the lock died with the process
    assert out["primal"] == setup["out"]["primal"]
    assert np.array_equal(coef(run), setup["coef"])


@pytest.mark.parametrize("key", ["distributed", "class_weight", "block_bytes"])
def test_resume_of_a_run_json_without_an_option_is_refused_naming_it(setup, shm_path, key):
    """run.json records every option: one without (a damaged or hand-made file, sealed again) is refused naming
    the option, never continued with today's default (which may not be the one the run was made with)."""
    run = _partial_run(setup, shm_path)
    with open(run / "run.json") as f:
        cfg = json.load(f)
    cfg.pop(key)
    cfg.pop("checksum")
    with open(run / "run.json", "wb") as f:
        f.write(seal_json(cfg))
    err = one_line_error(cli("resume", run, "--max-epochs", "50", ok=False))
    assert f"records no '{key}'" in err and "run.json" in err, err
