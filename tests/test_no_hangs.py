"""No wait without an end: a full disk, Ctrl-C, SIGTERM or a failing read ends a run within seconds.

Every scenario runs in its own process under a hard timeout (``subprocess``), so a deadlock
fails the test instead of hanging it:

* a full disk (ENOSPC injected into the dual writes from the k-th one on) with paged duals,
  while the read-ahead thread waits for the group being worked on: one error line, and
  ``ooc resume`` gives the coefficients of the uninterrupted run;
* SIGINT and SIGTERM at random moments of a run with paged duals and read-ahead (one reader
  held at the read-ahead gate, or two readers with their dual reads): exit status 130 (or 0,
  the run was over) within seconds, then the same coefficients after ``ooc resume``;
* a store read that fails once (EIO at the k-th read) for sdca, rcd-primal and dgpd: one line;
* the text parser's reader thread: a consumer that stops early (a bad line after the first
  chunk, an iteration closed or abandoned) leaves no thread behind and no process hanging.

The processes run concurrently, on run directories in memory (/dev/shm) when there is one.
``OOC_CHAOS_SEED`` picks the signal moments.
"""

from __future__ import annotations

import gzip
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest
from click.testing import CliRunner

import ooc
from ooc.cli import main as cli
from ooc.store import layout as L
from ooc.store.store import open_store

ROWS, COLS, NNZ = 5000, 200, 8
CONVERT = ["--block-bytes", "8KiB", "--memory", "1MiB", "--dtype", "float64"]
TRAIN = ["--l2", "1e-3", "--tol", "1e-12", "--max-epochs", "8", "--checkpoint-every", "0", "--seed", "3"]
#: paged duals, one block of the next group read while a group is worked on: the reader waits at the gate
GATED = ["--memory", "4KiB", "--mix-blocks", "2"]
#: paged duals (more than a quarter of --memory), two groups read at once, each with its dual files
TWO_READERS = ["--memory", "128KiB"]
SEED = int(os.environ.get("OOC_CHAOS_SEED", "0"))


@pytest.fixture(autouse=True, scope="module")
def _memory_counts_the_work():
    """GATED and TWO_READERS need a budget of a few KiB for the work: --memory counts only what the work
    adds (OOC_MEMORY_SCOPE=work), not the whole process (which refuses anything under ~200 MiB); for the
    module's reference runs too (module-scoped fixtures)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OOC_MEMORY_SCOPE", "work")
        yield
#: seconds a process may take to end once the fault or the signal has happened (2 busy cores)
PROMPT = 15.0

#: Runs ``ooc`` with a fault injected: ``enospc K``: the K-th dual file write and all later ones
#: fail with ENOSPC (a disk that stays full); ``eio K``: the K-th read of the store's arrays fails
#: with EIO (once); ``resume``: resume the given runs one after the other.
DRIVER = r'''
import errno, os, sys, threading

mode, k, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
lock, calls = threading.Lock(), [0]


def nth():
    with lock:
        calls[0] += 1
        return calls[0]


if mode == "enospc":
    import ooc.runs.rundir as rundir

    save = rundir.save_sealed_npy  # how a run writes its dual files

    def save_sealed_npy(path, a, *more, **kw):
        if nth() >= k:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return save(path, a, *more, **kw)

    rundir.save_sealed_npy = save_sealed_npy
elif mode == "eio":
    from ooc.store.zarr_backend import ZarrBackend

    read_many = ZarrBackend.read_many

    def failing(self, requests):
        if nth() == k:
            raise OSError(errno.EIO, "Input/output error (injected)")
        return read_many(self, requests)

    ZarrBackend.read_many = failing
elif mode == "resume":
    import ooc

    for run in args:
        ooc.resume(run)
    sys.exit(0)
from ooc.cli import main

main(args, prog_name="ooc")
'''


def ooc_exe() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "ooc.cli"]


def error_line(stderr: str) -> str:
    """The one ``ooc: error:`` line of ``stderr`` (warnings aside); fails on anything else."""
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("ooc: warning:")]
    assert "Traceback" not in stderr and len(lines) == 1 and lines[0].startswith("ooc: error: "), stderr
    return lines[0]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from ooc.synth import SynthSource, write_svmlight

    root = tmp_path_factory.mktemp("hangs")
    svm = root / "in.svm"
    write_svmlight(SynthSource(ROWS, COLS, NNZ, seed=3), str(svm))
    store = root / "s.zarr"
    r = CliRunner().invoke(cli, ["convert", str(svm), str(store), *CONVERT])
    assert r.exit_code == 0, r.stderr
    nb = open_store(str(store)).n_blocks(L.ROWS)
    assert nb >= 40
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    runs = tempfile.mkdtemp(prefix="ooc-hangs-", dir=shm)
    driver = root / "driver.py"
    driver.write_text(DRIVER)
    refs = {}
    for name, opts in (("gated", GATED), ("two", TWO_READERS)):
        run = os.path.join(runs, f"ref-{name}")
        r = CliRunner().invoke(cli, ["train", str(store), "--out", run, *TRAIN, *opts])
        assert r.exit_code == 0, r.stderr
        refs[name] = ooc.load_model(run).coef_
    yield dict(store=str(store), nb=nb, runs=runs, driver=str(driver), refs=refs)
    shutil.rmtree(runs, ignore_errors=True)


@pytest.fixture
def spawn():
    """``spawn(argv)`` starts a process in a session of its own; any still running when the test ends is killed
    (a test that failed on a hang leaves none behind)."""
    procs = []

    def start(argv, **kw):
        kw = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **kw}
        procs.append(subprocess.Popen(argv, start_new_session=True, **kw))
        return procs[-1]

    yield start
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate()


def _driver(data, spawn, mode: str, k: int, *args) -> subprocess.Popen:
    return spawn([sys.executable, data["driver"], mode, str(k), *map(str, args)])


def _finish(p: subprocess.Popen, timeout: float) -> tuple[int, str]:
    """``(exit status, stderr)`` of ``p``; a process still running after ``timeout`` seconds fails the test."""
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{p.args} still running after {timeout:.0f} s: a hang")
    return p.returncode, err


def _resume_all(data, spawn, runs: list[tuple[str, str]]) -> None:
    """Resume ``runs`` (one process, under a timeout) and compare with the uninterrupted runs."""
    rc, err = _finish(_driver(data, spawn, "resume", 0, *[r for r, _ in runs]), 60 + 10 * len(runs))
    assert rc == 0, err
    for run, ref in runs:
        assert np.array_equal(ooc.load_model(run).coef_, data["refs"][ref]), run


# -- a full disk ---------------------------------------------------------------------------------
def test_disk_full_writing_paged_duals_ends_the_run_and_resume_is_exact(data, spawn):
    nb = data["nb"]
    # the k-th dual write: while the starting duals are written (no checkpoint yet), in the first
    # pass and in the third one (the read-ahead thread waiting at the gate), and with two readers
    trials = [("gated", GATED, nb // 2), ("gated", GATED, nb + 7), ("gated", GATED, 3 * nb + 20),
              ("two", TWO_READERS, nb + 30)]
    procs = []
    for i, (ref, opts, k) in enumerate(trials):
        run = os.path.join(data["runs"], f"enospc{i}")
        procs.append((run, ref, _driver(data, spawn, "enospc", k, "train", data["store"], "--out", run, *TRAIN, *opts)))
    for run, _, p in procs:
        rc, err = _finish(p, 60)
        assert rc == 1, err
        line = error_line(err)
        assert "disk is full" in line and "checkpoint is intact" in line, line
    _resume_all(data, spawn, [(run, ref) for run, ref, _ in procs])


# -- Ctrl-C and SIGTERM --------------------------------------------------------------------------
def _latest(run):
    try:
        with open(os.path.join(run, "LATEST")) as f:
            return f.read().strip() or None
    except OSError:
        return None


def test_sigint_and_sigterm_end_a_run_within_seconds_and_resume_is_exact(data, spawn):
    rng = random.Random(SEED)
    trials = []
    for i, (ref, opts) in enumerate([("gated", GATED), ("two", TWO_READERS)] * 2):
        sig = signal.SIGINT if i < 2 else signal.SIGTERM
        run = os.path.join(data["runs"], f"signal{i}")
        p = spawn(ooc_exe() + ["train", data["store"], "--out", run, *TRAIN, *opts], stdout=subprocess.DEVNULL)
        trials.append(dict(run=run, ref=ref, p=p, sig=sig, delay=rng.uniform(0.0, 1.0)))
    # each run gets its signal a random time after its first checkpoint (all polled together)
    t_end = time.monotonic() + 120
    pending = list(trials)
    while pending:
        assert time.monotonic() < t_end, "no run started checkpointing"
        for t in list(pending):
            if t["p"].poll() is not None:
                pending.remove(t)
            elif "armed" not in t:
                if _latest(t["run"]) is not None:
                    t["armed"] = time.monotonic()
            elif time.monotonic() - t["armed"] >= t["delay"]:
                t["p"].send_signal(t["sig"])
                t["sent"] = time.monotonic()
                pending.remove(t)
        time.sleep(0.005)
    signalled = 0
    for t in trials:
        # PROMPT seconds from its signal (a run that ended by itself meanwhile has long finished)
        rc, err = _finish(t["p"], max(1.0, t.get("sent", time.monotonic()) + PROMPT - time.monotonic()))
        assert "Traceback" not in err, err
        if rc != 0:  # 0: the run was over before the signal arrived
            assert rc == 130 and "ooc: interrupted" in err, (t["sig"], rc, err)
            signalled += 1
    assert signalled >= 2, "the signals came too late to interrupt the runs"
    _resume_all(data, spawn, [(t["run"], t["ref"]) for t in trials])


# -- a failing read ------------------------------------------------------------------------------
@pytest.mark.parametrize("solver", [["--solver", "sdca", *GATED],
                                    ["--solver", "rcd-primal", "--duals", "paged"],
                                    ["--solver", "dgpd", "--l1", "1e-3", "--duals", "paged", "--no-dgpd-fallback"]],
                         ids=["sdca", "rcd-primal", "dgpd"])
def test_a_failing_store_read_ends_the_run_with_one_line(data, spawn, solver):
    procs = []
    for k in (5, 40):  # the k-th read of the store's arrays fails (in the first passes)
        run = os.path.join(data["runs"], f"eio-{solver[1]}-{k}")
        procs.append(_driver(data, spawn, "eio", k, "train", data["store"], "--out", run, *TRAIN, *solver))
    for p in procs:
        rc, err = _finish(p, 60)
        assert rc == 1, err
        assert "Input/output error (injected)" in error_line(err)


# -- the hand-offs themselves ---------------------------------------------------------------------
#: Each case in a process of its own: a thread left waiting would keep the process from exiting.
HANDOFFS = r'''
import sys, threading, time
from concurrent.futures import ThreadPoolExecutor
from ooc.schedule.scheduler import Prefetcher, ReadAheadGate

case = sys.argv[1]
if case in ("consumer-raises", "load-fails"):
    # item i is read only once item i-1 is released (the gate); two threads read ahead
    gate = ReadAheadGate()

    def load(i):
        if case == "load-fails" and i == 3:
            raise OSError("injected")
        gate.wait_released(i)
        return i

    with ThreadPoolExecutor(2) as pool:
        t0 = time.monotonic()
        try:
            for i, _ in Prefetcher(range(10), load, None, depth=2, pool=pool, gate=gate):
                if i == 2:
                    raise KeyboardInterrupt  # Ctrl-C while the readers of items 3 and 4 wait for item 2
                gate.release()
        except (KeyboardInterrupt, OSError):
            pass
        assert time.monotonic() - t0 < 5
elif case == "consumer-dies":
    # the consumer thread ends without releasing or aborting: the reader must not wait forever
    made = []
    t = threading.Thread(target=lambda: made.append(ReadAheadGate()))
    t.start()
    t.join()
    try:
        made[0].wait_released(1)
    except RuntimeError:
        pass
print("ok")
'''


@pytest.mark.parametrize("case", ["consumer-raises", "load-fails", "consumer-dies"])
def test_a_stopped_pass_frees_the_readers_at_the_gate(spawn, tmp_path, case):
    script = tmp_path / "handoffs.py"
    script.write_text(HANDOFFS)
    p = spawn([sys.executable, str(script), case])
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: still running after 60 s: a hang")
    assert p.returncode == 0 and out.strip() == "ok", err


def test_an_interrupted_chunk_read_gives_its_buffers_back():
    from ooc.store import chunk_files as cf

    class Arr:
        dtype = np.dtype(np.float64)
        fetches = 0

        def fetch(self, k, first, count, scratch):
            Arr.fetches += 1
            if Arr.fetches == 3:
                raise KeyboardInterrupt  # Ctrl-C in the thread that reads the files
            return k

        def decode(self, k, first, count, dest, piece):
            time.sleep(0.05)
            dest[:] = piece

    reader = cf.ChunkReader()
    out = np.zeros(6)
    jobs = [(Arr(), k, 0, 1, out[k:k + 1]) for k in range(6)]
    with pytest.raises(KeyboardInterrupt):
        reader.run(jobs)
    t_end = time.monotonic() + 10
    while reader._free.qsize() < cf.READ_BUFFERS:  # the decodes under way give theirs back when done
        assert time.monotonic() < t_end, "a buffer was lost: later reads would wait for it forever"
        time.sleep(0.01)
    reader.run(jobs)
    assert np.array_equal(out, np.arange(6.0)) and reader._free.qsize() == cf.READ_BUFFERS
    reader.close()


# -- the text parser's reader thread -------------------------------------------------------------
def _write_gz(path, rows: int, bad_at: int | None = None) -> None:
    rng = np.random.default_rng(0)
    lines = []
    for i in range(rows):
        feats = " ".join(f"{j}:{v:.4f}" for j, v in zip(np.sort(rng.choice(1000, 12, replace=False)) + 1,
                                                         rng.random(12)))
        lines.append(("oops " if i == bad_at else f"{1 if i % 2 else -1} ") + feats + "\n")
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write("".join(lines))


def _reader_threads():
    return [t for t in threading.enumerate() if t.name == "ooc-input-reader"]


def _no_reader_left(timeout=5.0) -> bool:
    t_end = time.monotonic() + timeout
    while _reader_threads() and time.monotonic() < t_end:
        time.sleep(0.01)
    return not _reader_threads()


def test_a_bad_line_after_the_first_chunk_ends_convert(spawn, tmp_path):
    src = tmp_path / "big.svm.gz"
    _write_gz(src, 20000, bad_at=15000)  # ~2.4 MB of text: chunks of 85 KiB at --memory 1MiB
    p = spawn(ooc_exe() + ["convert", str(src), str(tmp_path / "s.zarr"), "--memory", "1MiB"], stdout=subprocess.DEVNULL)
    rc, err = _finish(p, 60)
    assert rc == 1 and ":15001:" in error_line(err), err
    assert not os.path.exists(tmp_path / "s.zarr")


def test_the_parser_thread_ends_when_its_consumer_stops(tmp_path):
    from ooc.store.readers import InputError, iter_svmlight

    src = tmp_path / "in.svm.gz"
    _write_gz(src, 3000, bad_at=2500)
    assert _no_reader_left()
    # the consumer closes the iteration after one chunk, while the reader has the next one ready
    it = iter_svmlight(src, chunk_bytes=8 << 10)
    next(it)
    time.sleep(0.2)
    it.close()
    assert _no_reader_left()
    # a bad line after the first chunk: the error is raised, the reader gone
    with pytest.raises(InputError, match=":2501:"):
        for _ in iter_svmlight(src, chunk_bytes=8 << 10):
            pass
    assert _no_reader_left()
    # the reader's own error (a truncated gzip stream) reaches the consumer
    cut = tmp_path / "cut.svm.gz"
    cut.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    with pytest.raises(InputError):
        for _ in iter_svmlight(cut, chunk_bytes=8 << 10):
            pass
    assert _no_reader_left()
    # a consumer thread that ends without closing the iteration (it is still referenced)
    kept = []

    def consume():
        kept.append(iter_svmlight(src, chunk_bytes=8 << 10))
        next(kept[0])

    t = threading.Thread(target=consume)
    t.start()
    t.join(30)
    assert not t.is_alive()
    assert _no_reader_left(), "the reader waits forever for a consumer that is gone"
    kept.clear()


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # pytest would catch it instead
def test_a_stop_signal_lost_in_a_finalizer_is_not_printed_and_still_stops(capsys):
    """SIGTERM landing in a ``__del__`` (numpy's NpzFile closing): Python would print the lost
    KeyboardInterrupt with a traceback; it is dropped, and the next safe point raises it."""
    from ooc import interrupts

    class Finalized:
        def __del__(self):
            raise KeyboardInterrupt("signal 15")

    import sys

    before = sys.unraisablehook
    with interrupts.stop_on_signals():
        interrupts._pending = 15  # what the handler records
        obj = Finalized()
        del obj
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
    assert "Traceback" not in capsys.readouterr().err
    assert sys.unraisablehook is before and interrupts._pending is None  # the block restores both
