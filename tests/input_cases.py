"""Generators of malformed and extreme inputs for every format, and the checks each case must pass.

Each format has a hypothesis strategy that builds a file (svmlight, CSV, Vowpal Wabbit, raw text)
or arrays (.npz) from valid rows, then applies what real files do wrong: a UTF-8 byte-order mark,
bad cells (in the first row too), huge, NaN and infinite values and labels, empty lines, missing
labels, duplicate and negative indices, one class, CRLF line ends, trailing garbage. A check
converts it with ``ooc convert`` and asserts the one promise (docs/formats.rst, "Input rules"):

* either ONE line on stderr, ``ooc: error: FILE:LINE...`` naming the file and the first bad line
  (the key, for an .npz), exit status 1, no traceback, no store left behind;
* or a store whose contents equal an independent reference parse of the same bytes (scikit-learn's
  ``load_svmlight_file``, a reading written from the format rules for CSV, VW and text, NumPy and
  SciPy for .npz), and then a reference that also finds the input valid.

``tests/test_fuzz_inputs.py`` runs a few cases of each in CI; ``scripts/fuzz_inputs.py`` runs them
for as long as asked and prints the count.
"""

from __future__ import annotations

import math
import os
import re
import shutil

import numpy as np
import scipy.sparse as sp
from hypothesis import strategies as st
from test_fuzz import (
    _fits_float32,
    _number,
    _py_is_number,
    _value_fits_float32,
    assert_nothing_opens,
    check_one_line_error,
    check_svmlight_case,
    mutated_svmlight,
    run_convert,
    store_rows,
    strip_bom,
    valid_csv,
)

BOM = b"\xef\xbb\xbf"
#: values and labels at and past the edges of float32 and of finite numbers
EXTREMES = [b"1e200", b"-1e200", b"1e39", b"-3.5e38", b"3.4e38", b"nan", b"NaN", b"inf", b"-inf", b"1e-400",
            b"0", b"-0", b"1e308", b"1e309"]
CLEAN = [b"1", b"-1", b"2.5", b"0", b"1e-3", b"7"]
TRAILING = [b"\x00\x00", b"garbage", b"\xff\xfe", b"1 2 3 x", b"#", b"\r", b"   "]


def _extreme_lines(draw, lines: list, label_at, set_label, add_garbage=True) -> bytes:
    """``lines`` (byte strings) with the file-level accidents applied: one class, CRLF, empty lines,
    trailing garbage, a byte-order mark."""
    if draw(st.integers(0, 4)) == 0 and lines:  # one class: every label the first one's
        first = label_at(lines[0])
        lines = [set_label(ln, first) for ln in lines]
    for _ in range(draw(st.integers(0, 2))):  # empty and blank lines anywhere
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from([b"", b"  ", b"\t"])))
    end = b"\r\n" if draw(st.integers(0, 3)) == 0 else b"\n"
    content = end.join(lines) + draw(st.sampled_from([end, b""]))
    if add_garbage and draw(st.integers(0, 5)) == 0:
        content += draw(st.sampled_from(TRAILING))
    if draw(st.integers(0, 2)) == 0:
        content = BOM + content
    return content


# -- svmlight ------------------------------------------------------------------------------------------
@st.composite
def extreme_svmlight(draw):
    """test_fuzz's mutated svmlight files, with extreme labels and values, one class, CRLF, a BOM."""
    lines = draw(mutated_svmlight()).split(b"\n")
    for _ in range(draw(st.integers(0, 2))):
        r = draw(st.integers(0, len(lines) - 1))
        toks = lines[r].split(b" ")
        kind = draw(st.sampled_from(["label", "value", "neg", "dup", "nolabel"]))
        if kind == "label" and toks:
            toks[0] = draw(st.sampled_from(EXTREMES))
        elif kind == "value" and len(toks) > 1 and b":" in toks[-1]:
            toks[-1] = toks[-1].split(b":")[0] + b":" + draw(st.sampled_from(EXTREMES))
        elif kind == "neg" and len(toks) > 1:
            toks.append(b"-3:1")
        elif kind == "dup" and len(toks) > 1 and b":" in toks[-1]:
            toks.append(toks[-1])
        elif kind == "nolabel" and toks:
            toks = toks[1:]
        lines[r] = b" ".join(toks)

    def label_at(ln):
        return ln.split(b" ", 1)[0]

    def set_label(ln, lab):
        parts = ln.split(b" ", 1)
        return b" ".join([lab] + parts[1:]) if parts[0] else ln

    return _extreme_lines(draw, [ln.rstrip(b"\r") for ln in lines if ln is not None], label_at, set_label)


def check_svmlight(content: bytes, tmp: str) -> str:
    """The strong check of tests/test_fuzz.py: valid or not decided by a reference written from the rules."""
    return check_svmlight_case(content, tmp)


# -- CSV -----------------------------------------------------------------------------------------------
@st.composite
def extreme_csv(draw):
    """Dense CSV/TSV rows, with or without a header, bad and extreme cells in any row (the first too)."""
    d = draw(st.sampled_from([b",", b"\t", b";"]))
    ncols = draw(st.integers(2, 4))
    rows = []
    if draw(st.booleans()):
        rows.append(d.join([b"y"] + [b"f%d" % k for k in range(ncols - 1)]))
    for _ in range(draw(st.integers(1, 6))):
        rows.append(d.join([draw(st.sampled_from([b"1", b"-1", b"0", b"2"]))]
                           + [draw(st.sampled_from(CLEAN)) for _ in range(ncols - 1)]))
    for _ in range(draw(st.integers(0, 2))):
        r = draw(st.integers(0, len(rows) - 1))
        cells = rows[r].split(d)
        k = draw(st.integers(0, len(cells) - 1))
        kind = draw(st.sampled_from(["extreme", "garbage", "empty", "drop", "add"]))
        if kind == "extreme":
            cells[k] = draw(st.sampled_from(EXTREMES))
        elif kind == "garbage":
            cells[k] = draw(st.sampled_from([b"abc", b"x", b"1.2.3", b"--1", b"1e", b"?"]))
        elif kind == "empty":
            cells[k] = b""
        elif kind == "drop" and len(cells) > 1:
            del cells[k]
        elif kind == "add":
            cells.insert(k, b"1")
        rows[r] = d.join(cells)

    def label_at(ln):
        return ln.split(d, 1)[0]

    def set_label(ln, lab):
        parts = ln.split(d, 1)
        return d.join([lab] + parts[1:]) if _number(parts[0]) is not None else ln  # not the header's

    return _extreme_lines(draw, rows, label_at, set_label, add_garbage=False)


def check_csv(content: bytes, tmp: str) -> str:
    """A valid CSV (a reference reading: tests/test_fuzz.py's ``valid_csv``) converts to exactly its numbers;
    an invalid one is one line naming the file and its first bad line."""
    path = os.path.join(tmp, "in.csv")
    with open(path, "wb") as f:
        f.write(content)
    store = os.path.join(tmp, "out.zarr")
    ref, bad_line = valid_csv(content)
    r = run_convert(path, store)
    assert not isinstance(r.exception, Exception) or isinstance(r.exception, SystemExit), (r.exception, content)
    if ref is not None:
        assert r.exit_code == 0, f"valid CSV refused: {r.stderr!r} on {content!r}"
        labels, dense = ref
        X, y = store_rows(store)
        assert np.array_equal(y, labels), (y, labels, content)
        assert X.shape == dense.shape, (X.shape, dense.shape, content)
        assert np.array_equal(X.toarray(), dense.astype(np.float32).astype(np.float64)), content
        shutil.rmtree(store)
        return "ok"
    assert r.exit_code == 1, f"invalid CSV (line {bad_line}) accepted: {content!r}"
    check_one_line_error(r.stderr, path, bad_line)
    assert_nothing_opens(store)
    return "error"


# -- Vowpal Wabbit -------------------------------------------------------------------------------------
NAMES = [b"a", b"b", b"word", b"x1", b"price", b"_t", b"caf\xc3\xa9"]
#: Values of ``name:value`` that are not numbers: VW's string features, and values that start as one.
VW_STRINGS = [b"paris", b"nice", b"Indiana", b"info", b"nanny", b"1:2", b"1abc", b".x", b".5x", b"-", b"+x", b"a:b",
              b"infinity", b"-Inf", b"e5", b"1e999x", b"NaN"]
#: How VW tells a number from a string value: its float parser reads something (``strtof``'s prefix).
VW_STARTS_AS_NUMBER = re.compile(rb"[+-]?(\d|\.\d|inf|nan)", re.IGNORECASE)


@st.composite
def extreme_vw(draw):
    """VW examples ``label [weight] |ns name[:value] ...`` with extreme labels, values, weights and lines."""
    lines = []
    for _ in range(draw(st.integers(1, 6))):
        label = draw(st.sampled_from([b"1", b"-1", b"0", b"3", b"0.5"]))
        head = [label]
        if draw(st.integers(0, 5)) == 0:
            head.append(draw(st.sampled_from([b"2", b"0.5", b"0", b"-1", b"nan", b"1e200"])))  # importance weight
        feats = []
        for _ in range(draw(st.integers(0, 4))):
            name = draw(st.sampled_from(NAMES))
            feats.append(name + (b":" + draw(st.sampled_from(CLEAN)) if draw(st.booleans()) else b""))
        ns = draw(st.sampled_from([b"", b"ns", b"f"]))
        lines.append(b" ".join(head) + b" |" + ns + b" " + b" ".join(feats))
    for _ in range(draw(st.integers(0, 2))):
        r = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["label", "value", "string", "nolabel", "garbage"]))
        head, _, tail = lines[r].partition(b" |")
        if kind == "label":
            head = b" ".join([draw(st.sampled_from(EXTREMES))] + head.split(b" ")[1:])
        elif kind == "value":
            tail += b" " + draw(st.sampled_from(NAMES)) + b":" + draw(st.sampled_from(EXTREMES))
        elif kind == "string":  # VW's string feature 'name:text', or a value that starts as a number only
            tail += b" " + draw(st.sampled_from(NAMES)) + b":" + draw(st.one_of(
                st.sampled_from(VW_STRINGS), st.text("abcinfNAI.+-:1e", min_size=1, max_size=6).map(str.encode)))
        elif kind == "nolabel":
            head = b""
        elif kind == "garbage":
            head = draw(st.sampled_from([b"abc", b"\xff", b"1,2", b"--1"]))
        lines[r] = head + b" |" + tail

    def label_at(ln):
        return ln.split(b" ", 1)[0]

    def set_label(ln, lab):
        head, _, tail = ln.partition(b" |")
        return b" ".join([lab] + head.split(b" ")[1:]) + b" |" + tail if head else ln

    return _extreme_lines(draw, lines, label_at, set_label)


def valid_vw(content: bytes):
    """``([(label, weight, sum of values)], None)`` or ``(None, first_bad_line)``: VW's rules for the lines
    :func:`extreme_vw` makes (namespace scales 1; labels and values finite and within float32)."""
    rows = []
    for no, raw in enumerate(strip_bom(content).split(b"\n"), start=1):
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if not line.strip():
            continue
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            return None, no
        if b"\r" in line:
            return None, no
        head, bar, tail = line.partition(b"|")
        toks = head.split()
        if not toks:
            return None, no
        label = _number(toks[0])
        if label is None or not _fits_float32(label):
            return None, no
        weight = 1.0
        if len(toks) > 2:  # label weight base: no base is taken
            return None, no
        if len(toks) > 1:
            w = _number(toks[1])
            if w is None or w < 0:
                return None, no
            weight = w
        total = 0.0
        for tok in tail.split()[1:] if bar and not tail.startswith((b" ", b"\t")) else tail.split():
            name, colon, value = tok.partition(b":")
            v = 1.0 if not colon else _number(value)
            if v is None and colon and value and not VW_STARTS_AS_NUMBER.match(value):
                v = 1.0  # a string feature 'name:text': value 1 (a hash of the text is its column)
            if v is None or not _value_fits_float32(v):
                return None, no
            total += v
        rows.append((label, weight, total))
    if not rows:
        return None, None
    return rows, None


def check_vw(content: bytes, tmp: str) -> str:
    """A valid VW file converts to its labels and, row by row, the sum of its values (hashing keeps sums:
    colliding features add up); an invalid one is one line naming its first bad line."""
    path = os.path.join(tmp, "in.vw")
    with open(path, "wb") as f:
        f.write(content)
    store = os.path.join(tmp, "out.zarr")
    ref, bad_line = valid_vw(content)
    r = run_convert(path, store)
    assert not isinstance(r.exception, Exception) or isinstance(r.exception, SystemExit), (r.exception, content)
    if ref is not None:
        assert r.exit_code == 0, f"valid VW refused: {r.stderr!r} on {content!r}"
        X, y = store_rows(store)
        assert np.array_equal(y, [lab for lab, _, _ in ref]), (y, ref, content)
        sums = np.asarray(X.sum(axis=1)).ravel()
        assert np.allclose(sums, [s for _, _, s in ref], rtol=1e-5, atol=1e-6), (sums, ref, content)
        shutil.rmtree(store)
        return "ok"
    assert r.exit_code == 1, f"invalid VW (line {bad_line}) accepted: {content!r}"
    check_one_line_error(r.stderr, path, bad_line)
    assert_nothing_opens(store)
    return "error"


# -- raw text ------------------------------------------------------------------------------------------
WORDS = [b"good", b"bad", b"film", b"a", b"x_1", b"caf\xc3\xa9", b"42", b"ok!", b"..", b"  "]
TOKEN = re.compile(rb"[A-Za-z0-9_\x80-\xff]+")


@st.composite
def extreme_text(draw):
    """``label,text`` rows (a header or not) with extreme and missing labels, empty lines, garbage."""
    rows = [b"label,text"] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(1, 6))):
        words = b" ".join(draw(st.lists(st.sampled_from(WORDS), max_size=5)))
        rows.append(draw(st.sampled_from([b"1", b"-1", b"0", b"2"])) + b"," + words)
    for _ in range(draw(st.integers(0, 2))):
        r = draw(st.integers(0, len(rows) - 1))
        label, _, text = rows[r].partition(b",")
        kind = draw(st.sampled_from(["label", "nolabel", "nocomma", "bytes"]))
        if kind == "label":
            rows[r] = draw(st.sampled_from(EXTREMES + [b"abc"])) + b"," + text
        elif kind == "nolabel":
            rows[r] = b"," + text
        elif kind == "nocomma":
            rows[r] = label + b" " + text
        elif kind == "bytes":
            rows[r] = label + b"," + text + b"\xff\xfe"

    def label_at(ln):
        return ln.split(b",", 1)[0]

    def set_label(ln, lab):
        parts = ln.split(b",", 1)
        return b",".join([lab] + parts[1:]) if _number(parts[0]) is not None else ln

    return _extreme_lines(draw, rows, label_at, set_label, add_garbage=False)


def valid_text(content: bytes):
    """``([(label, unigrams + bigrams)], None)`` or ``(None, first_bad_line)`` for ``--text 0:1``."""
    rows, first = [], True
    for no, raw in enumerate(strip_bom(content).split(b"\n"), start=1):
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if not line.strip():
            continue
        label, comma, text = line.partition(b",")
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            return None, no
        if first:
            first = False
            if not _py_is_number(label.strip()):
                continue  # a header: its label cell is not a number (nan and inf are numbers, and bad labels)
        v = _number(label.strip())
        if not comma or v is None or not _fits_float32(v):
            return None, no
        n = len(TOKEN.findall(text))
        rows.append((v, n + max(n - 1, 0)))
    if not rows:
        return None, None
    return rows, None


def check_text(content: bytes, tmp: str) -> str:
    """A valid raw-text CSV converts to its labels and, row by row, its count of unigrams and bigrams."""
    path = os.path.join(tmp, "in.csv")
    with open(path, "wb") as f:
        f.write(content)
    store = os.path.join(tmp, "out.zarr")
    ref, bad_line = valid_text(content)
    r = run_convert(path, store, "--text", "0:1")
    assert not isinstance(r.exception, Exception) or isinstance(r.exception, SystemExit), (r.exception, content)
    if ref is not None:
        assert r.exit_code == 0, f"valid text refused: {r.stderr!r} on {content!r}"
        X, y = store_rows(store)
        assert np.array_equal(y, [lab for lab, _ in ref]), (y, ref, content)
        assert np.array_equal(np.asarray(X.sum(axis=1)).ravel(), [c for _, c in ref]), (X.toarray(), ref, content)
        shutil.rmtree(store)
        return "ok"
    assert r.exit_code == 1, f"invalid text (line {bad_line}) accepted: {content!r}"
    check_one_line_error(r.stderr, path, bad_line)
    assert_nothing_opens(store)
    return "error"


# -- .npz ----------------------------------------------------------------------------------------------
NPZ_VALUES = [1.0, 0.0, -2.5, 1e-3, 3e38, 1e39, -1e200, math.nan, math.inf, -math.inf]
NPZ_LABELS = [1.0, -1.0, 2.0, 0.5, 1e39, 1e200, math.nan, math.inf]


@st.composite
def extreme_npz(draw):
    """Arrays for an .npz: dense ``X`` or CSR parts (duplicate, unsorted, negative, out-of-range ids), and ``y``
    (extreme values, one class, a length that does not match)."""
    n = draw(st.integers(0, 4))
    d = draw(st.integers(1, 4))
    clean = draw(st.integers(0, 2)) > 0
    values = [1.0, 0.0, -2.5, 0.5] if clean else NPZ_VALUES
    labels = [1.0, -1.0] if clean else NPZ_LABELS
    y = np.array([draw(st.sampled_from(labels)) for _ in range(n)], dtype=np.float64)
    if n and draw(st.integers(0, 4)) == 0:
        y = np.full(n, y[0])  # one class
    if draw(st.integers(0, 9)) == 0:
        y = y[:-1] if n else np.ones(1)
    if draw(st.booleans()):
        X = np.array([[draw(st.sampled_from(values)) for _ in range(d)] for _ in range(n)]).reshape(n, d)
        return {"X": X, "y": y}
    indptr = [0]
    indices, data = [], []
    for _ in range(n):
        k = draw(st.integers(0, 3))
        for _ in range(k):
            indices.append(draw(st.integers(-1 if not clean else 0, d if not clean else d - 1)))
            data.append(draw(st.sampled_from(values)))
        indptr.append(len(indices))
    return {"format": np.array(b"csr"), "shape": np.array([n, d]), "data": np.array(data, dtype=np.float64),
            "indices": np.array(indices, dtype=np.int64), "indptr": np.array(indptr, dtype=np.int64), "y": y}


def reference_npz(arrays: dict):
    """``(CSR matrix, labels)`` that an .npz of ``arrays`` stands for, or None when it is not valid input."""
    y = arrays["y"]
    if "X" in arrays:
        X = arrays["X"]
        n, d = X.shape
        M = sp.csr_matrix(X)
    else:
        n, d = (int(v) for v in arrays["shape"])
        ind, data, ptr = arrays["indices"], arrays["data"], arrays["indptr"]
        if len(ind) and (ind.min() < 0 or ind.max() >= d):
            return None
        M = sp.csr_matrix((data, ind, ptr), shape=(n, d))
        M.sum_duplicates()
    vals = np.concatenate([M.data, arrays.get("X", np.zeros((0,))).ravel()])
    if n == 0 or len(y) != n or not np.isfinite(vals).all() or not np.isfinite(y).all():
        return None
    if not all(_value_fits_float32(float(v)) for v in vals) or not all(_fits_float32(float(v)) for v in y):
        return None
    M.eliminate_zeros()
    return M, y


def check_npz(arrays: dict, tmp: str) -> str:
    """A valid .npz converts to exactly its matrix and labels; an invalid one is one line naming the file."""
    path = os.path.join(tmp, "in.npz")
    np.savez(path, **arrays)
    store = os.path.join(tmp, "out.zarr")
    ref = reference_npz(arrays)
    r = run_convert(path, store)
    assert not isinstance(r.exception, Exception) or isinstance(r.exception, SystemExit), (r.exception, arrays)
    if ref is not None:
        assert r.exit_code == 0, f"valid .npz refused: {r.stderr!r} on {arrays!r}"
        M, labels = ref
        X, y = store_rows(store)
        X.eliminate_zeros()
        assert np.array_equal(y, labels), (y, labels)
        assert X.shape == M.shape and (abs(X - M.astype(np.float32).astype(np.float64)) > 0).nnz == 0, arrays
        shutil.rmtree(store)
        return "ok"
    assert r.exit_code == 1, f"invalid .npz accepted: {arrays!r}"
    check_one_line_error(r.stderr, path, None)
    assert_nothing_opens(store)
    return "error"


#: format -> (strategy, check): what tests/test_fuzz_inputs.py and scripts/fuzz_inputs.py run
FORMATS = {
    "svmlight": (extreme_svmlight, check_svmlight),
    "csv": (extreme_csv, check_csv),
    "vw": (extreme_vw, check_vw),
    "text": (extreme_text, check_text),
    "npz": (extreme_npz, check_npz),
}
