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

import numpy as np
import pytest
from click.testing import CliRunner

from ooc.cli import main as cli
from ooc.store.backend import StoreError
from ooc.store.store import open_store


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
