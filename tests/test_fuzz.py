"""Fuzzing ``ooc convert`` with malformed svmlight and CSV inputs (hypothesis).

Valid files are generated, then mutated (truncated tokens, bad numbers, NaN/inf, huge
exponents, negative / duplicate / decreasing ids, missing labels, multilabel commas, lone
':', binary garbage, random bytes, line-ending changes, ...). A small reference validator
written from the format rules (``valid_svmlight`` / ``valid_csv`` below) decides for each
final file whether it is valid for ooc and, if not, which line is the first bad one. Then:

* valid: ``ooc convert`` succeeds and the store equals scikit-learn's
  ``load_svmlight_file`` on the same file (matrix entries, explicit zeros included, shape
  and labels) -- or, for CSV, the reference parse;
* invalid: exit status 1, ONE line on stderr naming the file and (line-level problems) the
  first bad line, no traceback, and nothing at STORE that ``ooc.open_store`` accepts;
* never a crash, a hang (a watchdog kills the test process), or silent acceptance.

A second property parses every generated file with tiny text chunks (so chunk boundaries
fall everywhere, in the middle of tokens and CRLF pairs) and checks the rows, or the error
line, are the same as with one chunk. A few cases run through a real ``ooc`` process.
"""

from __future__ import annotations

import contextlib
import faulthandler
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ooc.cli import main as cli
from ooc.store.backend import StoreError
from ooc.store.readers import InputError, iter_svmlight
from ooc.store.store import open_store

#: the small --memory figures here drive small text chunks and blocks (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("memory_counts_the_work")

SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)
#: OOC_FUZZ_SCALE=20 runs twenty times more examples (a longer local fuzzing session)
SCALE = float(os.environ.get("OOC_FUZZ_SCALE", "1"))


def examples(n: int) -> int:
    return max(1, int(n * SCALE))
#: a hang in a compiled kernel cannot be interrupted from Python: dump the stacks and exit
WATCHDOG_SECONDS = 120


@contextlib.contextmanager
def watchdog(seconds=WATCHDOG_SECONDS):
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


# --------------------------------------------------------------------------------------------
# the reference: what ooc must accept, written from the format rules (README / docs/formats.rst)
# --------------------------------------------------------------------------------------------
FLOAT = re.compile(rb"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
FEATURE = re.compile(rb"\+?(\d+):(.*)", re.S)
SPACE = b" \t\r\v\f"
F32_MAX = float(np.finfo(np.float32).max)


def _number(tok: bytes):
    """The value of a decimal number token, or None when it is not one (or not finite)."""
    if not FLOAT.fullmatch(tok):
        return None
    v = float(tok)
    return v if math.isfinite(v) else None


def _fits_float32(v: float) -> bool:
    with np.errstate(over="ignore"):
        return bool(np.isfinite(np.float32(v)))


def _value_fits_float32(v: float) -> bool:
    """A feature value a float32 store holds: finite there, and not a nonzero it would hold as 0 (refused as
    too small; labels are not checked for that)."""
    with np.errstate(over="ignore", under="ignore"):
        return _fits_float32(v) and (v == 0 or np.float32(v) != 0)


def _tokens(line: bytes) -> list[bytes]:
    """Whitespace-separated tokens before a '#' (a comment ends the line anywhere)."""
    return [t for t in re.split(rb"[ \t\r\v\f]+", line.split(b"#", 1)[0]) if t]


def valid_svmlight(content: bytes, dtype_f32: bool = True):
    """``(rows, None)`` for a valid file or ``(None, first_bad_line)``; line None = whole file.

    ``rows`` is a list of ``(label, [(id, value), ...])``. A UTF-8 byte-order mark at the start is
    skipped; labels, like values, must fit float32 when stored so.
    """
    rows = []
    for no, line in enumerate(strip_bom(content).split(b"\n"), start=1):
        toks = [t for t in _tokens(line) if t]
        if not toks:
            continue
        label = _number(toks[0])
        if label is None or (dtype_f32 and not _fits_float32(label)):
            return None, no
        feats, prev = [], -1
        for k, t in enumerate(toks[1:]):
            if k == 0 and t.startswith(b"qid:"):
                continue
            m = FEATURE.fullmatch(t)
            if not m:
                return None, no
            idx = int(m.group(1))
            v = _number(m.group(2))
            if idx >= 2**63 or idx <= prev or v is None or (dtype_f32 and not _value_fits_float32(v)):
                return None, no
            feats.append((idx, v))
            prev = idx
        rows.append((label, feats))
    if not rows:
        return None, None
    return rows, None


def strip_bom(content: bytes) -> bytes:
    """``content`` without a UTF-8 byte-order mark at its start (every reader skips it)."""
    return content[3:] if content.startswith(b"\xef\xbb\xbf") else content


def _py_is_number(cell: bytes) -> bool:  # the header rule of ooc.store.readers
    try:
        float(cell)
    except ValueError:
        return False
    return b"_" not in cell


def _py_is_header(head: list) -> bool:
    """The header rule of ooc.store.input_rules: names only, or plain integers counting the columns up by
    one (from 0 on a line of numbers only; from 0 or 1 beside names, none empty but the first)."""
    filled = [c for c in head if c]
    nums = [c for c in filled if _py_is_number(c)]
    if not filled or not nums:
        return bool(filled)
    if not all(c.isdigit() for c in nums) or b"" in head[1:] or len(head) < 2:
        return False
    vals = [int(c) for c in nums]
    first = vals[0] if len(nums) < len(head) else 0
    return vals == list(range(first, first + len(vals))) and first in (0, 1)


def valid_csv(content: bytes):
    """``(labels, dense features)`` or ``(None, first_bad_line)`` for a dense CSV (label first).

    The first line is a header when none of its cells is a number, or when its numbers count the
    columns (``0,1,2``, ``y,1,2``); a BOM is skipped."""
    lines = strip_bom(content).split(b"\n")
    first = None
    for no, ln in enumerate(lines, start=1):
        s = ln.split(b"#", 1)[0].strip()
        if s:
            first = (no, s)
            break
    if first is None:
        return None, None
    delim = next((d for d in (b"\t", b",", b";") if d in first[1]), b" ")
    pad = SPACE.replace(delim, b"")  # the delimiter is never padding: an edge tab is an empty cell
    split = (lambda s: s.split()) if delim == b" " else (
        lambda s: [c.strip(SPACE) for c in s.strip(pad).split(delim)])
    head = split(lines[first[0] - 1].split(b"#", 1)[0])
    header = _py_is_header(head)
    ncols = len(head)
    labels, X = [], []
    for no, ln in enumerate(lines, start=1):
        if header and no <= first[0]:
            continue
        s = ln.split(b"#", 1)[0]
        if not s.strip(SPACE):
            continue
        cells = split(s)
        vals = [_number(c) for c in cells]
        if len(cells) != ncols or any(v is None for v in vals) or not _fits_float32(vals[0]) or \
                not all(_value_fits_float32(v) for v in vals[1:]):
            return None, no
        labels.append(vals[0])
        X.append(vals[1:])
    if not labels:
        return None, None
    return (np.array(labels), np.array(X, dtype=np.float64).reshape(len(labels), ncols - 1)), None


# --------------------------------------------------------------------------------------------
# generators
# --------------------------------------------------------------------------------------------
LABELS = [b"1", b"-1", b"+1", b"0", b"2", b"1.0", b"-1e0", b"3", b"0.5"]
VALUES = [b"1", b"0", b"-2.5", b"1e-3", b".5", b"3.", b"+4", b"1E2", b"0.000001", b"123456.789",
          b"-0", b"7e+1", b"2.2250738585072014e-308", b"1e-400", b"3e38"]
GARBAGE_TOKENS = [b"abc", b"1.2.3", b"--1", b"1e", b"0x1A", b"1_0", b"", b"e5", b".", b"nan", b"NaN",
                  b"inf", b"-inf", b"Infinity", b"1e400", b"-1e999", b"1e39", b"+", b"1,2", b":", b"::",
                  b"1:", b":1", b"q", b"qid:", b"\xff\xfe", b"\x00", b"1\x00", b"99999999999999999999"]


@st.composite
def svm_rows(draw):
    """A valid svmlight file as a list of line byte strings (with their own separators)."""
    n = draw(st.integers(1, 8))
    zero_based = draw(st.booleans())
    lines = []
    for _ in range(n):
        label = draw(st.sampled_from(LABELS[:3] if draw(st.booleans()) else LABELS))
        ids = sorted(draw(st.sets(st.integers(0 if zero_based else 1, 40), max_size=5)))
        sep = draw(st.sampled_from([b" ", b"\t", b"  ", b" \t"]))
        toks = [label]
        if draw(st.integers(0, 9)) == 0:
            toks.append(b"qid:%d" % draw(st.integers(0, 99)))
        toks += [b"%d:%s" % (i, draw(st.sampled_from(VALUES))) for i in ids]
        line = sep.join(toks)
        if draw(st.integers(0, 9)) == 0:
            line += b" # a comment 1:2"
        lines.append(line)
        if draw(st.integers(0, 11)) == 0:
            lines.append(draw(st.sampled_from([b"", b"# comment", b"   ", b"\t# x"])))
    return lines


def _mutate_token(tok: bytes, draw) -> bytes:
    kind = draw(st.sampled_from(["truncate", "value", "garbage", "neg", "float_id", "lone_colon",
                                 "exp", "id_huge"]))
    if kind == "truncate":
        return tok[:draw(st.integers(0, max(len(tok) - 1, 0)))]
    if kind == "value" and b":" in tok:
        return tok.split(b":", 1)[0] + b":" + draw(st.sampled_from(GARBAGE_TOKENS))
    if kind == "neg" and b":" in tok:
        return b"-" + tok
    if kind == "float_id" and b":" in tok:
        i, v = tok.split(b":", 1)
        return i + b".0:" + v
    if kind == "lone_colon":
        return b":"
    if kind == "exp":
        return tok.split(b":", 1)[0] + b":1e" + b"%d" % draw(st.integers(-500, 500)) if b":" in tok else b"1e%d" % draw(
            st.integers(300, 400))
    if kind == "id_huge" and b":" in tok:
        # too large for int64, or large enough to overflow: never a multi-GB store
        return b"%d:1" % draw(st.sampled_from([2**63, 2**64 + 5, 10**30]))
    return draw(st.sampled_from(GARBAGE_TOKENS))


@st.composite
def mutated_svmlight(draw):
    lines = draw(svm_rows())
    for _ in range(draw(st.integers(0, 3))):
        r = draw(st.integers(0, len(lines) - 1))
        toks = lines[r].split(b" ")
        kind = draw(st.sampled_from(["token", "swap", "dup", "drop_label", "multilabel", "bytes", "insert",
                                     "truncate_line", "crlf", "nul"]))
        if kind == "token" and toks:
            k = draw(st.integers(0, len(toks) - 1))
            toks[k] = _mutate_token(toks[k], draw)
        elif kind == "swap" and len(toks) >= 3:
            toks[-1], toks[-2] = toks[-2], toks[-1]
        elif kind == "dup" and len(toks) >= 2:
            k = draw(st.integers(1, len(toks) - 1))
            toks.insert(k, toks[k])
        elif kind == "drop_label" and toks:
            toks = toks[1:]
        elif kind == "multilabel" and toks:
            toks[0] = toks[0] + b"," + draw(st.sampled_from([b"2", b"", b"3,4"]))
        elif kind == "bytes":
            line = lines[r]
            k = draw(st.integers(0, len(line)))
            toks = (line[:k] + draw(st.binary(min_size=1, max_size=6)) + line[k:]).split(b" ")
        elif kind == "insert":
            toks.insert(draw(st.integers(0, len(toks))), draw(st.sampled_from(GARBAGE_TOKENS)))
        elif kind == "truncate_line":
            line = lines[r]
            toks = line[:draw(st.integers(0, len(line)))].split(b" ")
        elif kind == "nul":
            toks = [b"\x00" * 3] + toks
        lines[r] = b" ".join(toks)
        if kind == "crlf":
            lines[r] += b"\r"
    content = b"\n".join(lines) + draw(st.sampled_from([b"\n", b"", b"\r\n"]))
    if draw(st.integers(0, 14)) == 0:
        content = content[:draw(st.integers(0, len(content)))]  # a file cut anywhere
    return content


@st.composite
def mutated_csv(draw):
    d = draw(st.sampled_from([b",", b"\t", b";"]))
    ncols = draw(st.integers(2, 5))
    rows = []
    if draw(st.booleans()):
        rows.append(d.join([b"y"] + [b"f%d" % k for k in range(ncols - 1)]))
    for _ in range(draw(st.integers(1, 8))):
        rows.append(d.join([draw(st.sampled_from(LABELS[:3]))]
                           + [draw(st.sampled_from(VALUES[:12] + [b"0", b"0", b" 2 "])) for _ in range(ncols - 1)]))
    for _ in range(draw(st.integers(0, 3))):
        r = draw(st.integers(0, len(rows) - 1))
        cells = rows[r].split(d)
        kind = draw(st.sampled_from(["cell", "empty", "drop", "add", "bytes", "truncate", "comment"]))
        k = draw(st.integers(0, len(cells) - 1))
        if kind == "cell":
            cells[k] = draw(st.sampled_from(GARBAGE_TOKENS))
        elif kind == "empty":
            cells[k] = b""
        elif kind == "drop" and len(cells) > 1:
            del cells[k]
        elif kind == "add":
            cells.insert(k, b"1")
        elif kind == "bytes":
            cells[k] = cells[k] + draw(st.binary(min_size=1, max_size=4))
        elif kind == "truncate":
            cells[k] = cells[k][:draw(st.integers(0, len(cells[k])))]
        elif kind == "comment":
            cells[-1] += b" # note"
        rows[r] = d.join(cells)
    return b"\n".join(rows) + draw(st.sampled_from([b"\n", b""]))


# --------------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------------
def assert_nothing_opens(store: str) -> None:
    if os.path.exists(store):
        with pytest.raises(StoreError):
            open_store(store)
    left = [p for p in os.listdir(os.path.dirname(store)) if ".partial-" in p or p.startswith(".ooc-transpose-")]
    assert not left, f"temporary containers left behind: {left}"


def check_one_line_error(stderr: str, path: str, line) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected ONE line on stderr, got {stderr!r}"
    assert "Traceback" not in stderr
    msg = lines[0]
    assert msg.startswith("ooc: error: "), msg
    assert path in msg, f"the error does not name the file: {msg}"
    if line is not None:
        assert f"{path}:{line}:" in msg or msg.startswith(f"ooc: error: {path}:{line}:"), (
            f"expected the error at line {line}: {msg}")
    return msg


def store_rows(store: str):
    """(X float64 CSR, original labels) of a store."""
    st_ = open_store(store)
    X = st_.to_scipy("rows")
    y = np.asarray(st_.labels, dtype=np.float64)
    if st_.label_kind == "binary":
        lv = st_.label_values
        y = np.where(y > 0, lv[1], lv[0])
    # the column layout must hold the same matrix
    Xc = st_.to_scipy("cols")
    assert (abs(X - Xc.tocsr())).nnz == 0 and X.shape == Xc.shape
    st_.close()
    return X, y


def run_convert(path: str, store: str, *extra):
    # Python warnings go wherever pytest's warning capture sends them; whether stray warnings
    # reach a real user's terminal is checked through real processes (test_subprocess_cases)
    with watchdog(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CliRunner().invoke(cli, ["convert", path, store, "--memory", "1MiB", *extra])


def check_svmlight_case(content: bytes, tmp: str, name="in.svm"):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(content)
    store = os.path.join(tmp, "out.zarr")
    ref, bad_line = valid_svmlight(content)
    if ref is not None and max((i for _, f in ref for i, _ in f), default=0) > 10**6:
        # a valid id this large makes a store with that many columns (O(d) statistics):
        # not what a quick fuzz test should allocate (see test_huge_feature_id_...)
        return "skipped"
    r = run_convert(path, store)
    assert not isinstance(r.exception, Exception) or isinstance(r.exception, SystemExit), (
        f"crash: {r.exception!r} on {content!r}")
    if ref is not None:
        assert r.exit_code == 0, f"valid file refused: {r.stderr!r} on {content!r}"
        from sklearn.datasets import load_svmlight_file

        bare = os.path.join(tmp, "bare-" + name)  # scikit-learn does not skip a byte-order mark
        with open(bare, "wb") as f:
            f.write(strip_bom(content))
        Xs, ys = load_svmlight_file(bare, zero_based="auto", dtype=np.float64)
        X, y = store_rows(store)
        if Xs.nnz == 0 and X.shape[1] == 0:
            # no feature at all: ooc says 0 columns; scikit-learn makes up one
            Xs = Xs[:, :0]
        assert X.shape == Xs.shape, (X.shape, Xs.shape, content)
        Xs = Xs.tocsr()
        Xs.sort_indices()
        assert np.array_equal(X.indptr, Xs.indptr) and np.array_equal(X.indices, Xs.indices), content
        assert np.array_equal(X.data.astype(np.float32), Xs.data.astype(np.float32)), content
        assert np.array_equal(y, ys), (y, ys, content)
        shutil.rmtree(store)
        return "ok"
    assert r.exit_code == 1, f"invalid file (line {bad_line}) accepted or odd exit {r.exit_code}: {content!r}"
    check_one_line_error(r.stderr, path, bad_line)
    assert_nothing_opens(store)
    return "error"


# --------------------------------------------------------------------------------------------
# the properties
# --------------------------------------------------------------------------------------------
@settings(max_examples=examples(110), **SETTINGS)
@given(mutated_svmlight())
def test_fuzz_svmlight_convert(content):
    with tempfile.TemporaryDirectory(prefix="ooc-fuzz-") as tmp:
        check_svmlight_case(content, tmp)


@settings(max_examples=examples(45), **SETTINGS)
@given(mutated_csv())
def test_fuzz_csv_convert(content):
    with tempfile.TemporaryDirectory(prefix="ooc-fuzz-") as tmp:
        path = os.path.join(tmp, "in.csv")
        with open(path, "wb") as f:
            f.write(content)
        store = os.path.join(tmp, "out.zarr")
        ref, bad_line = valid_csv(content)
        r = run_convert(path, store)
        assert not isinstance(r.exception, Exception) or isinstance(r.exception, SystemExit), (
            f"crash: {r.exception!r} on {content!r}")
        if ref is not None:
            assert r.exit_code == 0, f"valid file refused: {r.stderr!r} on {content!r}"
            labels, dense = ref
            X, y = store_rows(store)
            assert np.array_equal(y, labels), (y, labels, content)
            assert X.shape == dense.shape, (X.shape, dense.shape, content)  # trailing zero columns too
            assert np.array_equal(X.toarray(), dense.astype(np.float32).astype(np.float64)), content
            assert X.nnz == np.count_nonzero(dense), "zero cells must not be stored"
        else:
            assert r.exit_code == 1, f"invalid CSV (line {bad_line}) accepted: {content!r}"
            check_one_line_error(r.stderr, path, bad_line)
            assert_nothing_opens(store)


@settings(max_examples=examples(80), **SETTINGS)
@given(mutated_svmlight(), st.integers(1, 24), st.booleans())
def test_fuzz_chunk_boundaries_do_not_matter(content, chunk, gz):
    """Tiny text chunks (boundaries inside tokens, CRLF pairs, comments) parse like one chunk."""

    def parse(p, cb):
        try:
            with watchdog():
                ch = list(iter_svmlight(p, chunk_bytes=cb))
        except InputError as e:
            return ("error", e.line, e.column)
        return ("ok", np.concatenate([c.labels for c in ch]),
                np.concatenate([c.indices for c in ch]), np.concatenate([c.data for c in ch]),
                np.concatenate([np.diff(c.indptr) for c in ch]))

    with tempfile.TemporaryDirectory(prefix="ooc-fuzz-") as tmp:
        p = os.path.join(tmp, "in.svm")
        data = content
        if gz:
            import gzip

            data = gzip.compress(content)
            p += ".gz"
        with open(p, "wb") as f:
            f.write(data)
        whole = parse(p, 1 << 20)
        small = parse(p, chunk)
        assert whole[0] == small[0], (whole, small, content)
        if whole[0] == "error":
            assert whole[1:] == small[1:], (whole, small, content)
            _, bad_line = valid_svmlight(content, dtype_f32=False)
            assert whole[1] == bad_line, (whole, bad_line, content)
        else:
            for a, b in zip(whole[1:], small[1:]):
                assert np.array_equal(a, b), (whole, small, content)
            ref, _ = valid_svmlight(content, dtype_f32=False)
            assert ref is not None, f"the reader accepted an invalid file: {content!r}"
            assert np.array_equal(whole[1], [lab for lab, _ in ref])
            assert np.array_equal(whole[2], [i for _, f in ref for i, _ in f])
            assert np.array_equal(whole[3], [v for _, f in ref for _, v in f])


# -- specific cases ----------------------------------------------------------------------------
EXPLICIT = [
    b"1 1:1\r-1 2:1\r",                      # old Mac line ends: one line, '-1' is not a feature
    b"1 1:1e39\n",                          # overflows float32
    b"1 1:1e-400\n-1 2:1\n",                 # underflows to 0: kept as an explicit zero
    b"1 qid:3 1:1\n-1 qid:3 2:2\n",
    b"\xef\xbb\xbf1 1:1\n",                  # a UTF-8 byte-order mark
    bytes(range(256)),
    b"1 1:1\n" * 3 + b"\x00" * 64,
    b"1 18446744073709551616:1\n",          # 2**64
    b"1 9223372036854775807:1\n",           # 2**63 - 1: valid id, but d = 2**63 columns
    b"1 2:1 1:1\n",
    b"-1 0:1 0:2\n",
]


@pytest.mark.parametrize("content", EXPLICIT[:8] + EXPLICIT[9:], ids=lambda c: repr(c[:20]))
def test_explicit_svmlight_cases(tmp_path, content):
    check_svmlight_case(content, str(tmp_path))


def test_random_bytes_files(tmp_path):
    rng = np.random.default_rng(0)
    for k in range(12):
        content = rng.integers(0, 256, size=int(rng.integers(1, 400)), dtype=np.uint8).tobytes()
        if k % 3 == 0:
            content = content.replace(b"#", b"")  # fewer all-comment files
        d = tmp_path / f"r{k}"
        d.mkdir()
        check_svmlight_case(content, str(d), name="random.svm")


def _limited_memory():  # a runaway allocation fails instead of eating the machine
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def ooc_command() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "ooc.cli"]


@pytest.mark.parametrize("content,line", [
    (b"1 1:1\n-1 2:1 1:0.5\n", 2),
    (bytes(range(1, 256)) * 4, 1),
    (b"1 1:1\n" * 5000 + b"1 1:1e400\n", 5001),
    (b"1 1:1\n-1 1:1e39\n", 2),
], ids=["decreasing", "binary", "inf_deep", "float32_overflow"])
def test_subprocess_cases(tmp_path, content, line):
    p = tmp_path / "in.svm"
    p.write_bytes(content)
    store = str(tmp_path / "s.zarr")
    r = subprocess.run(ooc_command() + ["convert", str(p), store, "--memory", "1MiB"], capture_output=True,
                       text=True, timeout=120, preexec_fn=_limited_memory)
    assert r.returncode == 1, r
    check_one_line_error(r.stderr, str(p), line)
    assert_nothing_opens(store)


@pytest.mark.parametrize("big", [3_000_000_000, 2**63 - 1])
def test_huge_feature_id_fails_cleanly_or_converts(tmp_path, big):
    p = tmp_path / "big.svm"
    p.write_bytes(b"1 %d:1\n-1 1:1\n" % big)
    store = str(tmp_path / "s.zarr")
    r = subprocess.run(ooc_command() + ["convert", str(p), store, "--memory", "64MiB"], capture_output=True,
                       text=True, timeout=120, preexec_fn=_limited_memory)
    if r.returncode == 0:
        assert open_store(store).n_cols == big + 1 - 1  # 1-based
    else:
        check_one_line_error(r.stderr, str(p), None)
        assert_nothing_opens(store)


def test_csv_keeps_trailing_zero_columns(tmp_path):
    p = tmp_path / "tz.csv"
    p.write_bytes(b"y,a,b\n1,5,0\n-1,3,0\n")
    store = str(tmp_path / "s.zarr")
    r = CliRunner().invoke(cli, ["convert", str(p), store])
    assert r.exit_code == 0, r.stderr
    assert open_store(store).n_cols == 2


def test_tsv_leading_empty_cell_is_not_dropped(tmp_path):
    p = tmp_path / "t.tsv"
    p.write_bytes(b"y\ta\tb\n1\t2\t3\n\t4\t5\t6\n")  # line 3 has 4 cells, the first empty
    store = str(tmp_path / "s.zarr")
    r = CliRunner().invoke(cli, ["convert", str(p), store])
    assert r.exit_code == 1
    check_one_line_error(r.stderr, str(p), 3)
