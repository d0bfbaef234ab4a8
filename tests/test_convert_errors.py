"""Bad input and interrupted conversions: one-line errors, nothing half-written left.

For every bad input: a non-zero exit status, one line on stderr naming the file
(and the line when there is one), no traceback, and nothing at STORE that opens
as a store. A convert killed with SIGKILL at a random moment leaves nothing that
opens either, and does not stop the next convert to the same path.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from ooc.cli import main as cli
from ooc.store.backend import StoreError
from ooc.store.store import open_store

#: the small --memory figures here drive small text chunks and blocks (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("memory_counts_the_work")


def ooc_command() -> list[str]:
    """The installed ``ooc`` script next to this interpreter, else ``python -m ooc.cli``."""
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    if os.path.exists(exe):
        return [exe]
    found = shutil.which("ooc")
    return [found] if found else [sys.executable, "-m", "ooc.cli"]


def assert_nothing_opens(store):
    """STORE is absent, or present but refused by the reader (never a half store)."""
    if os.path.exists(store):
        with pytest.raises(StoreError):
            open_store(store)
    else:
        with pytest.raises(StoreError, match="no such store"):
            open_store(store)


def assert_no_partials(directory):
    left = [p for p in os.listdir(directory) if ".partial-" in p or p.startswith(".ooc-transpose-")]
    assert left == [], f"temporary containers left behind: {left}"


# (file name, content as bytes, expected line or None, words expected in the message)
BAD_INPUTS = [
    ("bad_value.svm", b"1 1:0.5\n-1 2:abc\n", 2, "bad value"),
    ("bad_index.svm", b"1 1:0.5\n1 x:1\n-1 3:1\n", 2, "bad feature"),
    ("missing_label.svm", b"1 1:1\n1:2 3:4\n", 2, "missing label"),
    ("nan_value.svm", b"1 1:1\n1 2:1\n-1 1:nan\n", 3, "not finite"),
    ("inf_value.svm", b"1 1:inf\n", 1, "not finite"),
    ("nan_label.svm", b"1 1:1\nnan 2:1\n", 2, "not finite"),
    ("decreasing.svm", b"1 1:1\n-1 5:1 3:1\n", 2, "decreasing"),
    ("duplicate.svm", b"1 1:1 1:2\n", 1, "duplicate"),
    ("negative.svm", b"# header comment\n1 -3:1\n", 2, "negative"),
    ("empty.svm", b"", None, "no data rows"),
    ("comments_only.svm", b"# nothing\n\n# here\n", None, "no data rows"),
    ("truncated.svm.gz", gzip.compress(b"1 1:1\n" * 2000)[:-30], None, "gzip"),
    ("damaged.svm.bz2", bytearray(bz2.compress(b"1 1:1\n" * 2000)), None, "bz2"),
    ("truncated.svm.xz", lzma.compress(b"1 1:1\n" * 2000)[:40], None, "xz"),
    ("ragged.csv", b"y,a,b\n1,2,3\n0,1\n", 3, "too few columns"),
    ("bad_cell.csv", b"1,2,3\n0,x,1\n", 2, "bad cell"),
]
BAD_INPUTS[12][1][len(BAD_INPUTS[12][1]) // 2:len(BAD_INPUTS[12][1]) // 2 + 8] = b"\x00" * 8  # damage bz2


@pytest.fixture
def bad_file(tmp_path, request):
    name, content, line, words = request.param
    p = tmp_path / name
    p.write_bytes(bytes(content))
    return str(p), line, words


def check_error_output(err: str, path: str, line, words: str):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got: {err!r}"
    msg = lines[0]
    assert msg.startswith("ooc: error: ")
    assert "Traceback" not in err
    assert path in msg
    if line is not None:
        assert f"{path}:{line}" in msg
    assert words in msg.lower() or words in msg


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
@pytest.mark.parametrize("bad_file", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS], indirect=True)
def test_bad_input_cli(tmp_path, bad_file, fmt):
    path, line, words = bad_file
    store = str(tmp_path / ("out.zarr" if fmt == "zarr" else "out.h5"))
    r = CliRunner().invoke(cli, ["convert", path, store, "--format", fmt, "--memory", "1MiB"])
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    check_error_output(r.stderr, path, line, words)
    assert_nothing_opens(store)
    assert_no_partials(tmp_path)


def test_bad_line_deep_in_a_large_file(tmp_path):
    # the error is in a later text chunk: line numbers must carry across chunks
    good = b"1 1:0.5 7:1.25\n-1 2:3\n" * 20000
    p = tmp_path / "late.svm"
    p.write_bytes(good + b"1 4:1 2:1\n" + good[:1000])
    store = str(tmp_path / "s.zarr")
    r = CliRunner().invoke(cli, ["convert", str(p), store, "--memory", "64KiB"])
    assert r.exit_code == 1
    check_error_output(r.stderr, str(p), 40001, "decreasing")
    assert_nothing_opens(store)
    assert_no_partials(tmp_path)


def test_zero_id_in_declared_one_based_file(tmp_path):
    p = tmp_path / "z.svm"
    p.write_bytes(b"1 1:1\n-1 3:1\n1 0:2\n")
    store = str(tmp_path / "s.zarr")
    r = CliRunner().invoke(cli, ["convert", str(p), store, "--zero-based", "no"])
    assert r.exit_code == 1
    check_error_output(r.stderr, str(p), 3, "1-based")
    assert_nothing_opens(store)


def test_missing_input_and_store(tmp_path):
    r = CliRunner().invoke(cli, ["convert", str(tmp_path / "nope.svm"), str(tmp_path / "s.zarr")])
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert "nope.svm" in r.stderr
    r = CliRunner().invoke(cli, ["info", str(tmp_path / "nope.zarr")])
    assert r.exit_code == 1
    check_error_output(r.stderr, str(tmp_path / "nope.zarr"), None, "no such store")
    (tmp_path / "notastore").mkdir()
    r = CliRunner().invoke(cli, ["info", str(tmp_path / "notastore")])
    assert r.exit_code == 1 and "not an ooc store" in r.stderr


def test_existing_store_is_kept(tmp_path):
    good = tmp_path / "good.svm"
    good.write_bytes(b"1 1:1\n-1 2:1\n")
    store = str(tmp_path / "s.zarr")
    assert CliRunner().invoke(cli, ["convert", str(good), store]).exit_code == 0
    fp = open_store(store).fingerprint
    bad = tmp_path / "bad.svm"
    bad.write_bytes(b"1 1:1\n-1 2:zz\n")
    r = CliRunner().invoke(cli, ["convert", str(bad), store, "--overwrite"])
    assert r.exit_code == 1
    assert open_store(store).fingerprint == fp, "a failed --overwrite must keep the old store"
    r = CliRunner().invoke(cli, ["convert", str(good), store])
    assert r.exit_code == 1 and "already exists" in r.stderr


def test_corrupted_store_is_reported(tmp_path):
    src = tmp_path / "in.svm"
    src.write_bytes(b"".join(b"%d 1:%d 2:0.5\n" % (i % 2, i + 1) for i in range(3000)))
    store = tmp_path / "s.zarr"
    assert CliRunner().invoke(cli, ["convert", str(src), str(store), "--block-bytes", "4KiB",
                                    "--memory", "1MiB"]).exit_code == 0
    from ooc.store.backend import StoreCorruptError

    st = open_store(store)
    cl = st.backend.chunk_len("rows/data")
    assert st.nnz > 2 * cl
    chunk = store / "rows" / "data" / "c" / "1"
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0x5A
    chunk.write_bytes(bytes(raw))
    st = open_store(store)
    b = next(k for k in range(st.n_blocks("rows")) if st.block_bounds("rows", k)[1] * 2 > cl)
    with pytest.raises(StoreCorruptError, match=r"'rows/data', chunk 1"):
        for k in range(b, st.n_blocks("rows")):
            st.block("rows", k)
    st.block("rows", 0)  # untouched chunks still read


# -- through a real process ---------------------------------------------------------------------
@pytest.mark.parametrize("name,content,line,words", [BAD_INPUTS[0], BAD_INPUTS[6], BAD_INPUTS[11]],
                         ids=["bad_value", "decreasing", "truncated_gz"])
def test_bad_input_subprocess(tmp_path, name, content, line, words):
    p = tmp_path / name
    p.write_bytes(bytes(content))
    store = str(tmp_path / "s.zarr")
    r = subprocess.run(ooc_command() + ["convert", str(p), store], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1
    check_error_output(r.stderr, str(p), line, words)
    assert_nothing_opens(store)
    assert_no_partials(tmp_path)


@pytest.fixture(scope="module")
def few_mb_input(tmp_path_factory):
    from ooc.synth import write_textlike_svmlight

    p = tmp_path_factory.mktemp("kill") / "in.svm"
    write_textlike_svmlight(str(p), 4_000_000, seed=2, max_id=1 << 16)
    return str(p)


@pytest.mark.parametrize("fmt", ["zarr", pytest.param("hdf5", marks=pytest.mark.slow)])
def test_sigkill_leaves_nothing_that_opens(tmp_path, few_mb_input, fmt):
    rng = np.random.default_rng()
    ext = ".zarr" if fmt == "zarr" else ".h5"

    def run(store, *extra):
        # a small --memory makes many chunks and blocks, so kills land in every phase
        return ooc_command() + ["convert", few_mb_input, store, "--format", fmt, "--memory", "1MiB", *extra]

    full_store = str(tmp_path / f"full{ext}")
    t0 = time.perf_counter()
    done = subprocess.run(run(full_store), timeout=300, capture_output=True, text=True)
    full = time.perf_counter() - t0
    assert done.returncode == 0, done.stderr
    for trial in range(3):
        store = str(tmp_path / f"s{trial}{ext}")
        proc = subprocess.Popen(run(store), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # from start-up (imports) to the very end of the conversion
        time.sleep(rng.uniform(0.3, 0.95) * full)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode in (0, -signal.SIGKILL)
        try:
            st = open_store(store)
        except StoreError:
            continue  # killed before the rename: nothing opens
        # killed after the rename (or finished): then it is the whole, complete store
        assert st.fingerprint == open_store(full_store).fingerprint
        assert st.to_scipy("cols").nnz == st.nnz
    # the leftovers of killed runs do not stand in the way of the next one
    r = subprocess.run(run(store, "--overwrite"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert open_store(store).fingerprint == open_store(full_store).fingerprint
    # ... and the next convert to that path clears what the killed one left behind
    assert [p for p in os.listdir(tmp_path) if f".{os.path.basename(store)}.partial-" in p] == []


# -- stale temporaries ------------------------------------------------------------------------
SMALL_SVM = b"1 1:0.5 3:1\n-1 2:2\n1 1:1 2:1 3:1\n"


def _convert_and_kill_when_partial(src, store):
    """Start ``ooc convert`` and SIGKILL it once its hidden temporary exists."""
    head, tail = os.path.split(store)
    p = subprocess.Popen(ooc_command() + ["convert", src, store, "--memory", "1MiB"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t_end = time.monotonic() + 120
    while not any(n.startswith(f".{tail}.partial-") for n in os.listdir(head)):
        assert p.poll() is None and time.monotonic() < t_end, "convert ended before it could be killed"
        time.sleep(0.002)
    p.send_signal(signal.SIGKILL)
    p.wait()


def test_next_convert_removes_stale_temporaries(tmp_path, few_mb_input):
    store = str(tmp_path / "s.zarr")
    _convert_and_kill_when_partial(few_mb_input, store)
    left = [n for n in os.listdir(tmp_path) if ".partial-" in n]
    assert left, "the killed convert left nothing: this test tests nothing"
    for n in left:
        if not n.endswith(".lock"):
            with pytest.raises(StoreError):
                open_store(str(tmp_path / n))
    from ooc import fsutil

    def proven(stem):  # a temporary's name as ooc makes it (its HMAC under this user's key)
        return stem + fsutil._temporary_mac(stem, fsutil.temporary_key())

    # a leftover without its lock file of a process that is gone
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    legacy = tmp_path / proven(f".s.zarr.partial-{dead.pid}-abcdef012345")
    legacy.mkdir()
    # and temporaries that are not provably stale: another destination's, a live process's, and a user's
    # folder named like one (no proof: not ooc's, whatever its process id)
    other = tmp_path / proven(f".t.zarr.partial-{dead.pid}-abcdef012345")
    other.mkdir()
    alive = tmp_path / proven(f".s.zarr.partial-{os.getpid()}-fedcba012345")
    alive.mkdir()
    users = tmp_path / f".s.zarr.partial-{dead.pid}-abcdef012345abcdef012345"
    users.mkdir()
    src = tmp_path / "small.svm"
    src.write_bytes(SMALL_SVM)
    r = CliRunner().invoke(cli, ["convert", str(src), store])
    assert r.exit_code == 0, r.stderr
    assert open_store(store).n_rows == 3
    assert sorted(n for n in os.listdir(tmp_path) if ".partial-" in n) == sorted([other.name, alive.name, users.name])


def test_a_live_conversion_keeps_its_temporaries(tmp_path):
    from ooc.store.writer import Temporary, remove_stale_temporaries

    store = str(tmp_path / "s.zarr")
    tmp = Temporary(store)
    os.makedirs(tmp.path)
    try:
        assert remove_stale_temporaries(store) == []
        assert os.path.isdir(tmp.path)
    finally:
        tmp.release()
    assert remove_stale_temporaries(store) == []  # no lock, but this pid is alive: kept
    shutil.rmtree(tmp.path)
    # a process that dies holding its claim (lock file and scratch left): stale, removed
    code = ("import os, sys; from ooc.store.writer import Temporary; t = Temporary(sys.argv[1]); "
            "os.makedirs(t.path); os.makedirs(t.scratch); print(t.path); os._exit(0)")
    out = subprocess.run([sys.executable, "-c", code, store], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    dead_path = out.stdout.strip()
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(dead_path) + s for s in ("", ".lock", ".scratch"))
    assert remove_stale_temporaries(store) == [dead_path, dead_path + ".scratch"]
    assert os.listdir(tmp_path) == []


# -- values, ids and columns ---------------------------------------------------------------------
def test_array_value_overflowing_float32_is_refused(tmp_path):
    import ooc

    X = np.array([[1.0, 0.0], [0.0, 1e39]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an error, not numpy's overflow warning
        with pytest.raises(ValueError, match=r"overflows float32") as e:
            ooc.convert(X, str(tmp_path / "s.zarr"), y=np.array([1.0, -1.0]))
    assert e.value.line == 2 and "feature 1" in str(e.value)
    assert ooc.convert(X, str(tmp_path / "d.zarr"), y=np.array([1.0, -1.0]), dtype="float64").n_cols == 2
    assert_no_partials(tmp_path)


def test_too_many_columns_is_refused_with_the_line(tmp_path, monkeypatch):
    from ooc.store import ingest

    monkeypatch.setattr(ingest, "column_limit", lambda held=0: 1000)
    p = tmp_path / "wide.svm"
    p.write_bytes(b"1 1:1\n-1 999:1\n1 1000:1 1001:2\n")  # 1-based: id 1001 needs 1001 columns
    with pytest.raises(ValueError) as e:
        ingest.convert(str(p), str(tmp_path / "s.zarr"))
    assert e.value.line == 3 and "1,001 columns" in str(e.value) and "hash" in str(e.value)
    with pytest.raises(ValueError, match="n_features=5000 makes 5,000 columns"):
        ingest.convert(str(p), str(tmp_path / "s.zarr"), n_features=5000)
    # the id just inside the limit converts
    p.write_bytes(b"1 1:1\n-1 1000:1\n")
    assert ingest.convert(str(p), str(tmp_path / "s.zarr")).n_cols == 1000
    assert_no_partials(tmp_path)


@pytest.mark.parametrize("text,n_cols", [(b"y,a,b,c\n1,5,0,0\n-1,3,0,0\n", 3), (b"1\t0\t0\n-1\t0\t2\n", 2),
                                         (b"y;a;b\n1;0;0\n0;0;0\n", 2)])
def test_csv_columns_come_from_the_header(tmp_path, text, n_cols):
    import ooc

    p = tmp_path / "z.csv"
    p.write_bytes(text)
    st = ooc.convert(str(p), str(tmp_path / "s.zarr"))
    assert st.n_cols == n_cols and st.to_scipy("cols").shape == (2, n_cols)


def test_grouping_refuses_a_short_bucket():
    from ooc.kernels.transpose import group_entries, order_groups

    rec = np.dtype([("col", np.int32), ("row", np.int32), ("val", np.float64)])
    recs = np.zeros(3, rec)
    recs["col"] = [0, 1, 1]
    col_indptr = np.array([0, 1, 3], np.int64)
    rows, vals, low = np.empty(3, np.int32), np.empty(3), np.empty(3, np.uint16)
    out_r, out_v = np.empty(3, np.int32), np.empty(3)
    assert group_entries(recs, 0, col_indptr, 1, rows, vals, low)
    assert order_groups(col_indptr, 1, rows, vals, low, out_r, out_v, 0, 1)
    # one record lost (a short write): refused before anything is written out of bounds
    assert not group_entries(recs[:2], 0, col_indptr, 1, rows[:2], vals[:2], low[:2])
    assert not group_entries(recs, 0, col_indptr, 1, rows[:2], vals, low)
    assert not order_groups(col_indptr, 1, rows, vals, low, out_r[:2], out_v, 0, 1)
    low[1] = 5  # a column outside its group
    assert not order_groups(col_indptr, 1, rows, vals, low, out_r, out_v, 0, 1)


def test_truncated_bucket_file_is_an_error(tmp_path, monkeypatch):
    from ooc.store import ingest

    real_write_all = ingest.write_all

    def lossy(f, buffer):  # what tofile did on a full disk: write less, say nothing
        real_write_all(f, memoryview(buffer).cast("B")[:-8])

    monkeypatch.setattr(ingest, "write_all", lossy)
    p = tmp_path / "in.svm"
    p.write_bytes(SMALL_SVM)
    with pytest.raises(RuntimeError, match=r"transpose: .*holds \d+ bytes, expected"):
        ingest.convert(str(p), str(tmp_path / "s.zarr"))
    assert_nothing_opens(str(tmp_path / "s.zarr"))
    assert_no_partials(tmp_path)


def test_enospc_anywhere_in_convert_is_one_clear_error(tmp_path, monkeypatch):
    import errno

    from ooc.store import ingest

    def full(f, buffer):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), getattr(f, "name", None))

    monkeypatch.setattr(ingest, "write_all", full)
    p = tmp_path / "in.svm"
    p.write_bytes(SMALL_SVM)
    store = str(tmp_path / "s.zarr")
    r = CliRunner().invoke(cli, ["convert", str(p), store])
    assert r.exit_code == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ooc: error: {store}: the disk is full"), r.stderr
    assert ".scratch" in lines[0]  # names the file that could not be written
    assert_nothing_opens(store)
    assert_no_partials(tmp_path)
