"""Quick chaos: SIGKILL at random moments, a full disk, a damaged chunk (the long soak is
``scripts/chaos.py``).

* ``ooc convert`` killed at a random moment (from the start, or once its hidden partial store
  exists): STORE is absent, or refused by ``ooc.open_store``, or complete and equal to the
  uninterrupted conversion -- never a store that opens but is wrong; the next convert works.
* ``ooc train`` killed at a random moment (and one ``ooc resume`` killed again), then resumed:
  the coefficients are identical (``np.array_equal``) to an uninterrupted run.
* Disk full (a small tmpfs, where mounting is permitted): a convert that runs out of space
  ends with ONE clear line and leaves nothing that opens (and frees its temporaries); a
  resume whose checkpoint write hits ENOSPC leaves the last checkpoint intact and, once
  space is freed, resumes to the uninterrupted result.
* A flipped byte in a Zarr chunk: ``ooc train`` fails with one line naming the array and the
  chunk.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
from click.testing import CliRunner
from faults import small_fs

from ooc.cli import main as cli
from ooc.runs.rundir import RunDir
from ooc.store.backend import StoreError
from ooc.store.store import open_store

ROWS, COLS, NNZ = 4000, 300, 12
CONVERT = ["--block-bytes", "16KiB", "--memory", "1MiB", "--dtype", "float64"]
TRAIN = ["--l2", "1e-3", "--tol", "1e-9", "--max-epochs", "30", "--checkpoint-every", "0", "--seed", "3"]
PAGED = ["--duals", "paged"]  # duals paged per block from disk instead of kept in memory
SEED = int(os.environ.get("OOC_CHAOS_SEED", "0"))


#: the small --memory figures here drive small text chunks and blocks (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("memory_counts_the_work")


def ooc_exe() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "ooc.cli"]


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_line_error(r) -> str:
    """The single stderr line of a failed command (exit 1, no traceback)."""
    assert r.exit_code == 1, (r.exit_code, r.stdout, r.stderr, r.exception)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ooc: error: "), r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


def error_problem(r, *words) -> str | None:
    """None when ``r`` failed with exit 1 and ONE clear line containing ``words``; else what is wrong."""
    if r.exit_code != 1:
        return f"exit status {r.exit_code}"
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    if isinstance(r.exception, Exception) and not isinstance(r.exception, SystemExit):
        return f"uncaught {r.exception!r} (a traceback for the user)"
    if len(lines) != 1 or not lines[0].startswith("ooc: error: "):
        return f"not one 'ooc: error:' line: {r.stderr!r}"
    missing = [w for w in words if w.lower() not in lines[0].lower()]
    return f"{lines[0]!r} lacks {missing}" if missing else None


def coef(run) -> np.ndarray:
    return np.load(os.path.join(run, "model", "coef.npy"))


def fast_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from ooc.synth import SynthSource, write_svmlight

    root = tmp_path_factory.mktemp("chaos")
    svm = root / "in.svm"
    write_svmlight(SynthSource(ROWS, COLS, NNZ, seed=3), str(svm))
    store = root / "ref.zarr"
    r = invoke("convert", svm, store, *CONVERT)
    assert r.exit_code == 0, r.stderr
    st = open_store(store)
    assert st.n_blocks("rows") >= 20
    runs = tempfile.mkdtemp(prefix="ooc-chaos-", dir=fast_dir())
    ref = os.path.join(runs, "ref")
    r = invoke("train", store, "--out", ref, *TRAIN, "--json")
    assert r.exit_code == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["converged"] and res["epochs"] >= 5
    yield dict(root=root, svm=svm, store=store, fp=st.fingerprint, X=st.to_scipy("rows"), y=st.labels.copy(),
               runs=runs, ref=ref, coef=coef(ref), res=res)
    shutil.rmtree(runs, ignore_errors=True)


def same_store_or_nothing(path, data) -> str:
    """'absent', 'refused' or 'complete' (then equal to the reference); never a wrong store."""
    if not os.path.exists(path):
        return "absent"
    try:
        st = open_store(path)
    except StoreError:
        return "refused"
    assert st.fingerprint == data["fp"], f"{path} opens with another content fingerprint"
    X = st.to_scipy("rows")
    assert (abs(X - data["X"])).nnz == 0 and np.array_equal(st.labels, data["y"])
    assert (abs(st.to_scipy("cols").tocsr() - data["X"])).nnz == 0
    return "complete"


# -- SIGKILL --------------------------------------------------------------------------------------
def _timed_convert(svm, store, delay_from, delay, poll=0.002):
    """Run ``ooc convert`` in a child and SIGKILL it ``delay`` s after ``delay_from`` ('start', or
    'partial': the moment its own hidden partial store appears; None: never). Returns the exit
    status and the seconds to the partial and to the end (the partial's None if it was not seen)."""
    parent, name = os.path.split(str(store))
    t0 = time.monotonic()
    p = subprocess.Popen(ooc_exe() + ["convert", str(svm), str(store), *CONVERT],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    t_partial, t_end = None, t0 + 120
    while p.poll() is None:
        now = time.monotonic()
        assert now < t_end, "convert did not end in 120 s"
        if t_partial is None and any(f.startswith(f".{name}.partial-") or f.startswith(f"{name}.partial-")
                                     for f in os.listdir(parent)):
            t_partial = now - t0
        start = {"start": 0.0, "partial": t_partial}.get(delay_from) if delay_from else None
        if start is not None and now - t0 >= start + delay:
            os.killpg(p.pid, signal.SIGKILL)
            break
        time.sleep(poll)
    p.wait()
    return p.returncode, t_partial, time.monotonic() - t0


def test_sigkill_convert_at_random_moments(data, tmp_path):
    rng = random.Random(SEED)
    # the kill moments are drawn within an uninterrupted child's own timing on this machine now,
    # so a loaded machine (slower) or an idle one (faster) still sees kills mid-conversion
    rc, t_partial, t_total = _timed_convert(data["svm"], tmp_path / "timing.zarr", None, 0.0)
    assert rc == 0 and t_partial is not None, (rc, t_partial)
    outcomes, trials = [], []
    for i in range(8):
        # half the kills are timed from the start, half from the moment the partial store exists;
        # after three trials, more only until one kill has landed mid-conversion
        if i >= 3 and any(rc == -signal.SIGKILL for rc, _ in outcomes):
            break
        store = tmp_path / f"s{i}.zarr"
        mode = "start" if i % 2 else "partial"
        span = t_total if mode == "start" else t_total - t_partial
        rc, _, _ = _timed_convert(data["svm"], store, mode, rng.uniform(0.0, 0.9 * span) / (1 + i // 3))
        outcomes.append((rc, same_store_or_nothing(str(store), data)))
        trials.append(store)
    # hidden partials of killed converts never open as a store
    for f in os.listdir(tmp_path):
        if ".partial-" in f:
            with pytest.raises(StoreError):
                open_store(str(tmp_path / f))
    # and the next convert to the same path works
    for store in trials:
        r = invoke("convert", data["svm"], store, *CONVERT, "--overwrite")
        assert r.exit_code == 0, r.stderr
        assert same_store_or_nothing(str(store), data) == "complete"
    assert any(rc == -signal.SIGKILL for rc, _ in outcomes), (t_partial, t_total, outcomes)


def _wait_for(cond, timeout=60.0):
    t_end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < t_end, "timed out"
        time.sleep(0.005)


def _latest(run):
    try:
        with open(os.path.join(run, "LATEST")) as f:
            return f.read().strip()
    except OSError:
        return None


def test_sigkill_train_and_resume_at_random_moments(data):
    rng = random.Random(SEED + 1)
    t_train = float(data["res"]["seconds"])  # training time of the uninterrupted run
    trials = []
    for i in range(3):
        run = os.path.join(data["runs"], f"kill{i}")
        extra = PAGED if i % 2 else []
        p = subprocess.Popen(ooc_exe() + ["train", str(data["store"]), "--out", run, *TRAIN, *extra],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        trials.append(dict(run=run, p=p, extra=extra, kills=0, delay=rng.uniform(0.0, 0.8 * t_train)))
    # kill each training a random time after it started checkpointing (all polled together)
    t_end = time.monotonic() + 120
    pending = list(trials)
    while pending:
        assert time.monotonic() < t_end, "timed out"
        for t in list(pending):
            if t["p"].poll() is not None:
                pending.remove(t)
                continue
            if "armed" not in t:
                if _latest(t["run"]) is not None:
                    t["armed"] = time.monotonic()
            elif time.monotonic() - t["armed"] >= t["delay"]:
                os.killpg(t["p"].pid, signal.SIGKILL)
                t["p"].wait()
                t["kills"] += 1
                pending.remove(t)
        time.sleep(0.002)
    # the first trial's resume is killed again, once it has written a checkpoint of its own
    t = trials[0]
    before = _latest(t["run"])
    p = subprocess.Popen(ooc_exe() + ["resume", t["run"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    _wait_for(lambda: _latest(t["run"]) != before or p.poll() is not None)
    time.sleep(rng.uniform(0.0, 0.3 * t_train))
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        t["kills"] += 1
    p.wait()
    assert sum(t["kills"] for t in trials) >= 2, "the kills came too late to test anything"
    for t in trials:
        r = invoke("resume", t["run"], "--json")
        assert r.exit_code == 0, r.stderr
        res = json.loads(r.stdout.strip().splitlines()[-1])
        assert np.array_equal(coef(t["run"]), data["coef"]), t
        for k in ("primal", "dual", "gap", "epochs", "converged"):
            assert res[k] == data["res"][k], (k, t)


# -- disk full ------------------------------------------------------------------------------------
def _fill(directory: str, leave: int) -> str:
    """A file that leaves about ``leave`` bytes free on the file system of ``directory``."""
    s = os.statvfs(directory)
    free = s.f_bavail * s.f_frsize
    path = os.path.join(directory, "filler")
    with open(path, "wb") as f:
        f.write(b"\0" * max(free - leave, 0))
    return path


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
@pytest.mark.parametrize("size", ["48k", "600k"], ids=["full-while-writing-rows", "full-while-transposing"])
def test_disk_full_during_convert(data, tmp_path, size, fmt):
    # a real process: a failure here has corrupted the heap before (see the report), which
    # must not take the test session down with it
    with small_fs(tmp_path / "mnt", size) as mnt:
        store = os.path.join(mnt, "s." + {"zarr": "zarr", "hdf5": "h5"}[fmt])
        p = subprocess.run(ooc_exe() + ["convert", str(data["svm"]), store, *CONVERT, "--format", fmt],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode != 0
        assert same_store_or_nothing(store, data) in ("absent", "refused")
        left = os.listdir(mnt)
    problems = []
    if p.returncode != 1:
        problems.append(f"exit status {p.returncode} (crashed)")
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    if len(lines) != 1 or not lines[0].startswith("ooc: error: "):
        problems.append(f"not one 'ooc: error:' line: {p.stderr[-300:]!r}")
    elif "space" not in lines[0].lower():
        problems.append(f"the error does not say the disk is full: {lines[0]!r}")
    if left:
        problems.append(f"temporaries left on the full disk: {left}")
    assert not problems, "convert out of space: " + "; ".join(problems)


def test_disk_full_during_checkpoint_then_resume(data, tmp_path):
    with small_fs(tmp_path / "mnt", "2m") as mnt:
        run = os.path.join(mnt, "run")
        opts = [o if o != "30" else "2" for o in TRAIN]  # two epochs first
        r = invoke("train", data["store"], "--out", run, *opts)
        assert r.exit_code == 0, r.stderr
        last = _latest(run)
        filler = _fill(mnt, 8 << 10)
        r = invoke("resume", run, "--max-epochs", "30")
        assert r.exit_code != 0
        problem = error_problem(r, "space")
        # the last checkpoint is intact and still the one LATEST names
        assert _latest(run) == last
        arrays, meta = RunDir.open(run).load_checkpoint()
        assert meta["epoch"] == 2 and np.all(np.isfinite(arrays["w"]))
        os.remove(filler)
        r = invoke("resume", run, "--max-epochs", "30", "--json")
        assert r.exit_code == 0, r.stderr
        assert np.array_equal(coef(run), data["coef"])
        assert json.loads(r.stdout.strip().splitlines()[-1])["primal"] == data["res"]["primal"]
    assert problem is None, f"checkpoint out of space: {problem}"


# -- a damaged chunk ----------------------------------------------------------------------------
@pytest.mark.parametrize("array", ["rows/data", "rows/indices", "labels"])
def test_corrupted_chunk_is_named_by_train(data, tmp_path, array):
    store = tmp_path / "bad.zarr"
    shutil.copytree(data["store"], store)
    chunks = sorted((store / array / "c").iterdir(), key=lambda p: int(p.name))
    k = len(chunks) // 2
    raw = bytearray(chunks[k].read_bytes())
    for j in range(8):  # a few flipped bytes in the middle of the compressed chunk
        raw[len(raw) // 2 + j] ^= 0xA5
    chunks[k].write_bytes(bytes(raw))
    r = invoke("train", store, "--out", tmp_path / "run", *TRAIN)
    msg = one_line_error(r)
    assert f"'{array}'" in msg and f"chunk {chunks[k].name}" in msg, msg
