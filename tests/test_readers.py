"""Tests of the text kernels (ooc.kernels.text) and streaming readers (ooc.store.readers)."""

import bz2
import gzip
import io
import lzma
import pickle
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_svmlight_file

from ooc.kernels import text as k
from ooc.store.readers import (
    InputError,
    RowChunk,
    detect_format,
    iter_csv,
    iter_svmlight,
    open_text,
)

COMPRESSORS = {"": lambda b: b, ".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}


def concat(chunks):
    """Join RowChunks into one CSR (labels, indptr, indices, data) and the first_line list."""
    chunks = list(chunks)
    for c in chunks:
        assert isinstance(c, RowChunk)
        assert c.labels.dtype == np.float64 and c.data.dtype == np.float64
        assert c.indptr.dtype == np.int64 and c.indices.dtype == np.int64
        assert c.indptr[0] == 0 and len(c.indptr) == len(c.labels) + 1
        assert c.indptr[-1] == len(c.indices) == len(c.data)
        assert len(c.labels) > 0
    indptr = [np.zeros(1, np.int64)]
    off = 0
    for c in chunks:
        indptr.append(c.indptr[1:] + off)
        off += c.indptr[-1]
    return (
        np.concatenate([c.labels for c in chunks]),
        np.concatenate(indptr),
        np.concatenate([c.indices for c in chunks]),
        np.concatenate([c.data for c in chunks]),
        [c.first_line for c in chunks],
    )


def bits(a):
    """Exact comparison, -0.0 != 0.0."""
    return np.asarray(a, np.float64).view(np.int64)


def row_lines(text):
    """1-based line numbers of the data rows of an svmlight/CSV text."""
    out = []
    for n, ln in enumerate(text.split(b"\n"), start=1):
        if ln.split(b"#", 1)[0].strip():
            out.append(n)
    return out


def write(tmp_path, text, name="data.svm", compress=""):
    p = tmp_path / (name + compress)
    p.write_bytes(COMPRESSORS[compress](text))
    return p


def gen_svmlight(rng, n_rows=40, n_feat=50, labels="binary", one_based=False, comments=True,
                 qid=False, crlf=False, tabs=False, empty_rows=True, trailing_newline=True):
    lines = []
    for r in range(n_rows):
        if labels == "binary":
            y = rng.choice(["+1", "-1", "1", "0"])
        elif labels == "multiclass":
            y = str(rng.integers(0, 7))
        else:
            y = repr(float(rng.normal() * 10.0 ** rng.integers(-3, 4)))
        nnz = 0 if (empty_rows and rng.random() < 0.15) else rng.integers(1, min(n_feat, 12))
        ids = np.sort(rng.choice(n_feat, size=nnz, replace=False)) + int(one_based)
        vals = []
        for _ in ids:
            kind = rng.integers(0, 6)
            if kind == 0:
                vals.append("0")
            elif kind == 1:
                vals.append(f"{rng.random():.6f}")
            elif kind == 2:
                vals.append(f"{rng.normal():.3e}")
            elif kind == 3:
                vals.append(repr(float(rng.normal() * 1e10)))
            elif kind == 4:
                vals.append(rng.choice([".5", "-0", "+3", "1e-5", "2.", "1E+2", "-.25e1"]))
            else:
                vals.append(str(rng.integers(-5, 5)))
        sep = "\t" if tabs else " "
        parts = [y]
        if qid:
            parts.append(f"qid:{rng.integers(1, 5)}")
        parts += [f"{i}:{v}" for i, v in zip(ids, vals)]
        ln = sep.join(parts)
        if comments and rng.random() < 0.2:
            ln += " # a comment: 3:4"
        lines.append(ln)
        if comments and rng.random() < 0.1:
            lines.append("# a comment line")
        if empty_rows and rng.random() < 0.05:
            lines.append("")
    nl = "\r\n" if crlf else "\n"
    text = nl.join(lines)
    if trailing_newline:
        text += nl
    return text.encode()


def check_parity(path, text, chunk_bytes):
    y, indptr, indices, data, firsts = concat(iter_svmlight(path, chunk_bytes=chunk_bytes))
    X, y_ref = load_svmlight_file(io.BytesIO(text), zero_based=True)
    np.testing.assert_array_equal(bits(y), bits(y_ref))
    np.testing.assert_array_equal(indptr, X.indptr)
    np.testing.assert_array_equal(indices, X.indices)
    np.testing.assert_array_equal(bits(data), bits(X.data))
    rows = row_lines(text)
    starts = []
    n = 0
    for c in iter_svmlight(path, chunk_bytes=chunk_bytes):
        starts.append(rows[n])
        n += len(c.labels)
    assert firsts == starts
    return len(firsts)


# --------------------------------------------------------------------------- svmlight parity

CASES = {
    "default": {},
    "one_based": {"one_based": True},
    "multiclass": {"labels": "multiclass"},
    "real": {"labels": "real"},
    "qid": {"qid": True},
    "crlf": {"crlf": True},
    "tabs": {"tabs": True},
    "no_trailing_newline": {"trailing_newline": False},
    "crlf_no_trailing": {"crlf": True, "trailing_newline": False},
    "single_column": {"n_feat": 2},
    "no_comments_no_empty": {"comments": False, "empty_rows": False},
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("chunk_bytes", [64, 1000, 32 << 20])
def test_svmlight_parity_with_sklearn(tmp_path, case, chunk_bytes):
    rng = np.random.default_rng(sorted(CASES).index(case))
    text = gen_svmlight(rng, **CASES[case])
    n_chunks = check_parity(write(tmp_path, text), text, chunk_bytes)
    if chunk_bytes == 64:
        assert n_chunks > 5  # rows really straddle chunk boundaries


@pytest.mark.parametrize("compress", [".gz", ".bz2", ".xz"])
@pytest.mark.parametrize("chunk_bytes", [64, 32 << 20])
def test_svmlight_compressed(tmp_path, compress, chunk_bytes):
    text = gen_svmlight(np.random.default_rng(7), n_rows=100)
    check_parity(write(tmp_path, text, compress=compress), text, chunk_bytes)


def test_compression_found_by_magic_not_extension(tmp_path):
    text = b"1 1:2\n-1 3:4\n"
    p = tmp_path / "data.svm"  # gzip content, no .gz
    p.write_bytes(gzip.compress(text))
    y, indptr, indices, data, _ = concat(iter_svmlight(p))
    np.testing.assert_array_equal(y, [1, -1])
    np.testing.assert_array_equal(indices, [1, 3])
    with open_text(p) as f:
        assert f.read() == text


@pytest.mark.parametrize(
    "text",
    [
        b"1\n",  # single row, label only
        b"3 0:1\n",
        b"-1 5:0 7:0\n",  # explicit zeros are kept, as sklearn does
        b"2 1:1",  # no trailing newline
        b"\n\n# c\n1 2:3 # c 4:5\n\n",
        b"1 qid:7\n2 qid:1 3:4\n",
        b"1.5e3 2:1\r\n-0 3:2\r\n",
        b"  \t1 \t 2:1   \r\n",
        b"1 0:1.00000000000000011102230246251565404236316680908203125 1:123456789012345678901234"
        b" 2:1e-320 3:2.2250738585072011e-308 4:9007199254740993 5:0.1e23 6:1e22 7:1e23\n",
    ],
)
def test_svmlight_small_files(tmp_path, text):
    p = write(tmp_path, text)
    for chunk_bytes in (1, 7, 1 << 20):
        check_parity(p, text, chunk_bytes)


def test_large_ids(tmp_path):
    text = b"1 5:1 0000000000000000000006:2 9223372036854775806:3 9223372036854775807:4\n"
    y, indptr, indices, data, _ = concat(iter_svmlight(write(tmp_path, text)))
    np.testing.assert_array_equal(indices, [5, 6, 2**63 - 2, 2**63 - 1])


def test_line_longer_than_chunk(tmp_path):
    feats = " ".join(f"{i}:{i * 0.5}" for i in range(2000))
    text = f"1 {feats}\n-1 3:4\n2 {feats}".encode()
    p = write(tmp_path, text)
    chunks = list(iter_svmlight(p, chunk_bytes=100))
    assert sum(len(c.labels) for c in chunks) == 3
    check_parity(p, text, 100)
    assert chunks[-1].bytes_consumed == len(text)


def test_bytes_consumed_grows(tmp_path):
    text = gen_svmlight(np.random.default_rng(3), n_rows=200, comments=False, empty_rows=False)
    p = write(tmp_path, text, compress=".gz")
    done = [c.bytes_consumed for c in iter_svmlight(p, chunk_bytes=256)]
    assert done == sorted(done) and done[-1] == p.stat().st_size


def test_early_close_stops_reader(tmp_path):
    text = gen_svmlight(np.random.default_rng(4), n_rows=500)
    it = iter_svmlight(write(tmp_path, text), chunk_bytes=64)
    next(it)
    it.close()  # must not hang on the reader thread


# --------------------------------------------------------------------------- svmlight errors

ERRORS = [
    (b"1 2:3 1:4\n", 1, 7, "decreasing"),
    (b"1 2:3 2:4\n", 1, 7, "duplicate"),
    (b"x 1:2\n", 1, 1, "bad label"),
    (b"1:2 3:4\n", 1, 1, "missing label"),
    (b"1,2 3:4\n", 1, 1, "multilabel"),
    (b"1 2:nan\n", 1, 5, "not finite"),
    (b"1 2:-inf\n", 1, 5, "not finite"),
    (b"1 2:1e400\n", 1, 5, "not finite"),
    (b"nan 2:1\n", 1, 1, "not finite"),
    (b"inf 2:1\n", 1, 1, "not finite"),
    (b"1 -2:3\n", 1, 3, "negative"),
    (b"1 2.5:3\n", 1, 3, "not an integer"),
    (b"1 2e3:3\n", 1, 3, "not an integer"),
    (b"1 2\n", 1, 3, "missing ':'"),
    (b"1 a:3\n", 1, 3, "bad feature"),
    (b"1 :3\n", 1, 3, "bad feature"),
    (b"1 99999999999999999999:1\n", 1, 3, "too large"),
    (b"1 9223372036854775808:1\n", 1, 3, "too large"),
    (b"1 00009223372036854775808:1\n", 1, 3, "too large"),
    (b"1 2:3x\n", 1, 5, "bad value"),
    (b"1 2:\n", 1, 5, "bad value"),
    (b"1 2:0x10\n", 1, 5, "bad value"),
    (b"1 2:1_0\n", 1, 5, "bad value"),
    (b"1 2:1e\n", 1, 5, "bad value"),
    (b"1 2:3:4\n", 1, 5, "bad value"),
    (b"0 1:1\n\n# c\r\n\t2 5:1 3:1\r\n", 4, 8, "decreasing"),
]


@pytest.mark.parametrize("text,line,col,what", ERRORS)
@pytest.mark.parametrize("chunk_bytes", [3, 1 << 20])
def test_svmlight_errors(tmp_path, text, line, col, what, chunk_bytes):
    p = write(tmp_path, text)
    with pytest.raises(InputError) as ei:
        list(iter_svmlight(p, chunk_bytes=chunk_bytes))
    e = ei.value
    assert (e.line, e.column) == (line, col)
    assert str(e).startswith(f"{p}:{line}:{col}: ")
    assert what in str(e)
    assert "\n" not in str(e)


def test_error_line_after_many_chunks(tmp_path):
    good = gen_svmlight(np.random.default_rng(5), n_rows=300, trailing_newline=True)
    text = good + b"1 3:1 2:1\n"
    line = good.count(b"\n") + 1
    with pytest.raises(InputError) as ei:
        list(iter_svmlight(write(tmp_path, text), chunk_bytes=100))
    assert (ei.value.line, ei.value.column) == (line, 7)


@pytest.mark.parametrize("text", [b"", b"\n\n", b"# only\n# comments", b"  \r\n"])
def test_no_data_rows(tmp_path, text):
    p = write(tmp_path, text)
    with pytest.raises(InputError, match="no data rows") as ei:
        list(iter_svmlight(p))
    assert str(ei.value) == f"{p}: no data rows"


@pytest.mark.parametrize("compress", [".gz", ".bz2", ".xz"])
def test_truncated_compressed_file(tmp_path, compress):
    text = gen_svmlight(np.random.default_rng(6), n_rows=2000)
    p = write(tmp_path, text, compress=compress)
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(InputError) as ei:
        list(iter_svmlight(p, chunk_bytes=4096))
    assert str(ei.value).startswith(f"{p}: ") and "\n" not in str(ei.value)


def _inflaters():
    import zlib

    mods = [pytest.param(zlib, id="zlib")]
    try:
        from isal import isal_zlib
    except ImportError:
        mods.append(pytest.param(None, id="isal", marks=pytest.mark.skip(reason="isal is not installed")))
    else:
        mods.append(pytest.param(isal_zlib, id="isal"))
    return mods


@pytest.fixture(params=_inflaters())
def inflate(request, monkeypatch):
    """Each gzip decoder the reader may use: zlib, and ISA-L's when installed."""
    from ooc.store import readers

    monkeypatch.setattr(readers, "_inflate", request.param)
    return request.param


def test_gzip_decoders_agree(tmp_path, inflate):
    text = gen_svmlight(np.random.default_rng(9), n_rows=3000)
    p = write(tmp_path, text, compress=".gz")
    check_parity(p, text, 1000)
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(InputError, match="damaged or truncated gzip") as ei:
        list(iter_svmlight(p, chunk_bytes=4096))
    assert str(ei.value).startswith(f"{p}: ") and "\n" not in str(ei.value)


def test_multi_member_gzip_with_padding(tmp_path, inflate):
    a, b = b"1 1:2\n-1 3:", b"4\n2 5:6\n"
    p = tmp_path / "mm.svm.gz"
    p.write_bytes(gzip.compress(a) + gzip.compress(b) + b"\0" * 10 + gzip.compress(b""))
    with open_text(p) as f:
        assert f.read() == a + b
    check_parity(p, a + b, 5)


def test_gzip_trailing_garbage(tmp_path, inflate):
    p = tmp_path / "g.svm.gz"
    p.write_bytes(gzip.compress(b"1 1:2\n") + b"garbage")
    with pytest.raises(InputError, match="damaged or truncated gzip"):
        list(iter_svmlight(p))


def test_corrupt_gzip(tmp_path, inflate):
    raw = bytearray(gzip.compress(gen_svmlight(np.random.default_rng(8), n_rows=500)))
    raw[len(raw) // 2: len(raw) // 2 + 20] = b"\x00" * 20
    p = tmp_path / "bad.svm.gz"
    p.write_bytes(bytes(raw))
    with pytest.raises(InputError, match=str(p)):
        list(iter_svmlight(p))


def test_missing_file(tmp_path):
    p = tmp_path / "nope.svm"
    with pytest.raises(InputError) as ei:
        list(iter_svmlight(p))
    assert str(ei.value).startswith(f"{p}: ")


def test_input_error_format_and_pickle():
    e = InputError("f.svm", "bad\nthing", line=3, column=4)
    assert str(e) == "f.svm:3:4: bad thing"
    assert str(InputError("f.svm", "x", line=3)) == "f.svm:3: x"
    assert str(InputError("f.svm", "x")) == "f.svm: x"
    assert isinstance(e, ValueError)
    e2 = pickle.loads(pickle.dumps(e))
    assert (str(e2), e2.path, e2.line, e2.column) == (str(e), "f.svm", 3, 4)


# --------------------------------------------------------------------------- float parsing

DECIMAL = st.from_regex(
    r"\A[+-]?([0-9]{1,25}(\.[0-9]{0,25})?|\.[0-9]{1,25})([eE][+-]?[0-9]{1,3})?\Z", fullmatch=True
)


def _parse_value(s):
    """Parse ``s`` as the value of a one-entry svmlight row with the kernel."""
    buf = np.frombuffer(b"0 0:" + s.encode() + b"\n", np.uint8)
    lab, ptr, ind, dat = np.empty(1), np.empty(2, np.int64), np.empty(1, np.int64), np.empty(1)
    m, nnz, code, *_ = k.parse_svmlight(buf, len(buf), 1, np.inf, lab, ptr, ind, dat)
    return code, dat[0]


def _check_exact(s):
    ref = float(s)
    code, v = _parse_value(s)
    if ref != ref or ref in (float("inf"), float("-inf")):
        assert code == k.ERR_NONFINITE_VALUE
    else:
        assert code == k.OK
        assert struct.pack("<d", v) == struct.pack("<d", ref), (s, v, ref)


@settings(max_examples=50, deadline=None)
@given(DECIMAL)
def test_float_bit_exact_random_decimals(s):
    _check_exact(s)


@settings(max_examples=50, deadline=None)
@given(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["r", ".17e", ".6f", ".25g"]),
)
def test_float_bit_exact_near_doubles(x, fmt):
    _check_exact(repr(x) if fmt == "r" else format(x, fmt))


@pytest.mark.parametrize(
    "s",
    [
        "0", "-0", "+0.0", ".5", "5.", "1e-5", "9007199254740993", "9007199254740992.5",
        "2.2250738585072011e-308", "4.9406564584124654e-324", "2.4703282292062328e-324",
        "1.7976931348623157e308", "0.1000000000000000055511151231257827",
        "1" + "0" * 30, "0." + "0" * 30 + "1", "123456789012345678.9", "1e22", "1e23", "1e-22",
    ],
)
def test_float_bit_exact_hard_cases(s):
    _check_exact(s)


# --------------------------------------------------------------------------- CSV


def dense_from(chunks, n_feat):
    y, indptr, indices, data, _ = concat(chunks)
    X = np.zeros((len(y), n_feat))
    for r in range(len(y)):
        X[r, indices[indptr[r]:indptr[r + 1]]] = data[indptr[r]:indptr[r + 1]]
    assert np.all(data != 0)
    return y, X


@pytest.mark.parametrize("delimiter", [",", "\t", ";", " "])
@pytest.mark.parametrize("label_column", [0, -1, 2])
@pytest.mark.parametrize("with_header", [False, True])
@pytest.mark.parametrize("chunk_bytes", [50, 1 << 20])
def test_csv_parity_with_loadtxt(tmp_path, delimiter, label_column, with_header, chunk_bytes):
    rng = np.random.default_rng(0)
    M = np.round(rng.normal(size=(30, 5)), 4) * (rng.random((30, 5)) < 0.6)
    lines = [delimiter.join(f"{v:g}" for v in row) for row in M]
    if with_header:
        lines.insert(0, delimiter.join(f"col{j}" for j in range(5)))
    text = ("\n".join(lines) + "\n").encode()
    p = write(tmp_path, text, name="data.csv")
    ref = np.loadtxt(io.BytesIO(text), delimiter=None if delimiter == " " else delimiter,
                     skiprows=int(with_header))
    lab = label_column % 5
    y, X = dense_from(iter_csv(p, chunk_bytes=chunk_bytes, label_column=label_column), 4)
    np.testing.assert_array_equal(y, ref[:, lab])
    np.testing.assert_array_equal(X, np.delete(ref, lab, axis=1))


def test_csv_first_line_comments_padding_gz(tmp_path):
    text = b"# made by hand\n\na, b ,c\n1, 0 ,2.5\n\n-1,3,0 # note\r\n0,0,0"
    p = write(tmp_path, text, name="data.csv", compress=".gz")
    chunks = list(iter_csv(p, chunk_bytes=8))
    y, X = dense_from(chunks, 2)
    np.testing.assert_array_equal(y, [1, -1, 0])
    np.testing.assert_array_equal(X, [[0, 2.5], [3, 0], [0, 0]])
    assert [c.first_line for c in chunks][0] == 4


def test_csv_header_forced(tmp_path):
    p = write(tmp_path, b"1,2\n3,4\n", name="d.csv")
    y, X = dense_from(iter_csv(p, header=True), 1)
    np.testing.assert_array_equal(y, [3])
    y, X = dense_from(iter_csv(p, header=False), 1)
    np.testing.assert_array_equal(y, [1, 3])


CSV_ERRORS = [
    (b"1,2,3\n4,x,6\n", 2, 3, "bad cell 'x'"),
    (b"1,2,3\n4,5\n", 2, 4, "too few columns"),
    (b"1,2,3\n4,5,6,7\n", 2, 7, "too many columns"),
    (b"1,2,3\n4,,6\n", 2, 3, "empty cell"),
    (b"1,2,3\n4,nan,6\n", 2, 3, "not finite"),
    (b"a,b\n1,2\n3,4 5\n", 3, 3, "bad cell"),
    (b"1 2 3\n4 5 6 7\n", 2, 7, "too many columns"),
]


@pytest.mark.parametrize("text,line,col,what", CSV_ERRORS)
def test_csv_errors(tmp_path, text, line, col, what):
    p = write(tmp_path, text, name="d.csv")
    with pytest.raises(InputError) as ei:
        list(iter_csv(p, chunk_bytes=4))
    assert (ei.value.line, ei.value.column) == (line, col)
    assert what in str(ei.value) and "\n" not in str(ei.value)


def test_csv_empty(tmp_path):
    with pytest.raises(InputError, match="no data rows"):
        list(iter_csv(write(tmp_path, b"\n# x\n", name="d.csv")))
    with pytest.raises(InputError, match="no data rows"):
        list(iter_csv(write(tmp_path, b"a,b,c\n", name="h.csv")))


# --------------------------------------------------------------------------- detect_format


@pytest.mark.parametrize(
    "name,content,fmt",
    [
        ("a.svm", b"1,2\n", "svmlight"),
        ("a.libsvm.gz", b"", "svmlight"),
        ("a.svmlight", b"", "svmlight"),
        ("a.csv.bz2", b"", "csv"),
        ("a.tsv", b"", "csv"),
        ("a.npz", b"", "npz"),
        ("a.txt", b"# c\n1 3:4\n", "svmlight"),
        ("a.txt", b"1,2,3\n", "csv"),
        ("a.dat", b"1 2 3\n4 5 6\n", "csv"),
        ("noext", b"-1\n+1 2:1\n", "svmlight"),
        ("noext", b"PK\x03\x04rest", "npz"),
    ],
)
def test_detect_format(tmp_path, name, content, fmt):
    p = tmp_path / name
    p.write_bytes(content)
    assert detect_format(p) == fmt


def test_detect_format_sniffs_compressed(tmp_path):
    p = tmp_path / "data.txt.xz"
    p.write_bytes(lzma.compress(b"1\t2\t3\n"))
    assert detect_format(p) == "csv"


# --------------------------------------------------------------------------- line ends, tabs, ranges

from ooc.store.readers import csv_layout, overflow_limit  # noqa: E402


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 3])
def test_crlf_svmlight_equals_lf(tmp_path, chunk_bytes):
    text = b"1 1:0.5 3:2\n-1 2:1 # c\n\n+1 qid:2 4:-1\n"
    lf = concat(iter_svmlight(write(tmp_path, text, "lf.svm"), chunk_bytes=chunk_bytes))
    crlf = concat(iter_svmlight(write(tmp_path, text.replace(b"\n", b"\r\n"), "crlf.svm"),
                                chunk_bytes=chunk_bytes))
    for a, b in zip(lf, crlf):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("delim", [b",", b"\t", b";"])
def test_crlf_csv_equals_lf(tmp_path, delim):
    text = delim.join([b"y", b"a", b"b"]) + b"\n" + delim.join([b"1", b"2", b"0"]) + b"\n" \
        + delim.join([b"-1", b"0", b"3.5"]) + b"\n"
    lf = concat(iter_csv(write(tmp_path, text, "lf.csv")))
    crlf = concat(iter_csv(write(tmp_path, text.replace(b"\n", b"\r\n"), "crlf.csv")))
    for a, b in zip(lf, crlf):
        assert np.array_equal(a, b)
    assert csv_layout(write(tmp_path, text.replace(b"\n", b"\r\n"), "crlf.csv")).n_features == 2


@pytest.mark.parametrize("name,text,line", [
    ("mac.svm", b"1 1:1\r-1 2:1\r", 1),
    ("mac_later.svm", b"1 1:1\n-1 2:1\r1 3:1\r", 2),
    ("mac.csv", b"y,a\r1,2\r3,4\r", 1),  # one line mixing numbers and text: data, not a header
    ("mac_noheader.csv", b"1,2\r3,4\r", 1),
])
def test_cr_only_line_ends_are_named(tmp_path, name, text, line):
    p = write(tmp_path, text, name)
    it = iter_svmlight(p) if name.endswith(".svm") else iter_csv(p)
    with pytest.raises(InputError) as e:
        list(it)
    assert e.value.line == line
    assert "carriage return" in str(e.value) and "old Mac" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_cr_before_the_newline_gets_no_hint(tmp_path):
    with pytest.raises(InputError) as e:
        list(iter_svmlight(write(tmp_path, b"1 1:1\r\n-1 2:x\r\n")))
    assert e.value.line == 2 and "carriage return" not in str(e.value)


def test_tsv_leading_tab_is_an_empty_cell(tmp_path):
    with pytest.raises(InputError) as e:
        list(iter_csv(write(tmp_path, b"y\ta\tb\n1\t2\t3\n\t4\t5\n", "t.tsv")))
    assert (e.value.line, e.value.column) == (3, 1) and "empty cell" in str(e.value)
    # spaces are still padding, and a whitespace-only line is still blank
    y, indptr, indices, data, _ = concat(iter_csv(write(tmp_path, b"y\ta\n \t \n 1\t2\n", "u.tsv")))
    assert list(y) == [1.0] and list(data) == [2.0]


def test_tsv_header_with_an_empty_first_cell(tmp_path):
    # pandas writes the index column's header as an empty cell: three columns, not two
    lay = csv_layout(write(tmp_path, b"\ta\tb\n1\t2\t3\n", "h.tsv"))
    assert (lay.ncols, lay.header_line, lay.n_features) == (3, 1, 2)


def test_csv_layout_counts_trailing_zero_columns(tmp_path):
    p = write(tmp_path, b"y,a,b,c\n1,5,0,0\n-1,3,0,0\n", "z.csv")
    assert csv_layout(p).n_features == 3
    _, _, indices, _, _ = concat(iter_csv(p))
    assert indices.max() == 0  # the nonzeros alone cannot tell


def test_overflow_limit_is_exact():
    lim = overflow_limit(np.float32)
    with np.errstate(over="ignore"):
        assert np.isinf(np.float32(lim)) and np.isfinite(np.float32(np.nextafter(lim, 0)))
    assert overflow_limit(np.float64) == np.inf


@pytest.mark.parametrize("name,text,line,col", [
    ("o.svm", b"1 1:1\n-1 1:2 2:-1e39\n", 2, 10),
    ("o.csv", b"y,a,b\n1,1,2\n1,3.5e38,2\n", 3, 3),
])
def test_float32_overflow_is_located(tmp_path, name, text, line, col):
    p = write(tmp_path, text, name)
    it = (iter_svmlight if name.endswith(".svm") else iter_csv)(p, value_dtype=np.float32)
    with pytest.raises(InputError) as e:
        list(it)
    assert (e.value.line, e.value.column) == (line, col) and "float32" in str(e.value)
    # float64 stores take them; a label must fit the store's value type too (ooc.store.input_rules)
    it = (iter_svmlight if name.endswith(".svm") else iter_csv)(p, value_dtype=np.float64)
    assert len(concat(it)[0]) == 2
    big_label = write(tmp_path, b"1,1\n\n1e39,1\n", "l.csv")
    with pytest.raises(InputError) as e:
        list(iter_csv(big_label, value_dtype=np.float32))
    assert e.value.line == 3 and "label '1e39' overflows float32" in str(e.value)
    assert len(concat(iter_csv(big_label, value_dtype=np.float64))[0]) == 2


# --------------------------------------------------------------------------- parsing on threads


def _chunk_arrays(chunks):
    return [(c.labels.tobytes(), c.indptr.tobytes(), c.indices.tobytes(), c.data.tobytes(), c.first_line,
             c.bytes_consumed) for c in chunks]


@pytest.fixture
def tiny_pieces(monkeypatch):
    """Cut even a few bytes over threads, so tiny files exercise the pieces."""
    from ooc.store import readers

    monkeypatch.setattr(readers, "MIN_PIECE_BYTES", 1)


def test_line_cuts_are_whole_lines():
    text = np.frombuffer(b"1 2:3\n\n-1 4:5 6:7\nxx\n# c\n1\n", np.uint8)
    for parts in range(1, 12):
        cuts = k.line_cuts(text, len(text), parts)
        assert cuts[0] == 0 and cuts[-1] == len(text) and len(cuts) <= parts + 1
        assert np.all(np.diff(cuts) > 0)
        assert all(text[c - 1] == 10 for c in cuts[1:])
    long = np.frombuffer(b"a" * 50 + b"\n", np.uint8)
    np.testing.assert_array_equal(k.line_cuts(long, len(long), 4), [0, len(long)])


@pytest.mark.parametrize("case", ["default", "qid", "crlf", "no_trailing_newline"])
@pytest.mark.parametrize("chunk_bytes", [64, 1000, 32 << 20])
def test_svmlight_threads_give_the_same_chunks(tmp_path, tiny_pieces, case, chunk_bytes):
    rng = np.random.default_rng(11)
    text = gen_svmlight(rng, n_rows=300, **CASES[case])
    p = write(tmp_path, text)
    one = list(iter_svmlight(p, chunk_bytes=chunk_bytes, threads=1))
    for threads in (2, 3, 7):
        assert _chunk_arrays(iter_svmlight(p, chunk_bytes=chunk_bytes, threads=threads)) == _chunk_arrays(one)
    X, y_ref = load_svmlight_file(io.BytesIO(text), zero_based=True)
    y, indptr, indices, data, _ = concat(iter_svmlight(p, chunk_bytes=chunk_bytes, threads=3))
    np.testing.assert_array_equal(bits(y), bits(y_ref))
    np.testing.assert_array_equal(indptr, X.indptr)
    np.testing.assert_array_equal(indices, X.indices)
    np.testing.assert_array_equal(bits(data), bits(X.data))


@pytest.mark.parametrize("text,line,col,what", ERRORS)
def test_svmlight_errors_on_threads(tmp_path, tiny_pieces, text, line, col, what):
    # the bad line after many good ones, so it lands in a later piece than the first
    good = b"1 1:1\n# comment\n\n-1 2:0.5 3:1\n" * 20
    p = write(tmp_path, good + text)
    for threads in (2, 5):
        with pytest.raises(InputError) as ei:
            list(iter_svmlight(p, chunk_bytes=1 << 20, threads=threads))
        assert (ei.value.line, ei.value.column) == (line + good.count(b"\n"), col)
        assert what in str(ei.value) and "\n" not in str(ei.value)


def test_first_error_in_file_order_wins(tmp_path, tiny_pieces):
    text = b"1 1:1\n" * 10 + b"1 2:3 1:4\n" + b"1 1:1\n" * 10 + b"x 1:1\n"
    with pytest.raises(InputError, match="decreasing") as ei:
        list(iter_svmlight(write(tmp_path, text), threads=4))
    assert ei.value.line == 11


@pytest.mark.parametrize("chunk_bytes", [4, 50, 1 << 20])
def test_csv_threads_give_the_same_chunks(tmp_path, tiny_pieces, chunk_bytes):
    rng = np.random.default_rng(2)
    rows = [",".join(f"{v:.3g}" for v in r) for r in rng.integers(-2, 3, size=(200, 6)) * rng.random((200, 6))]
    text = ("a,b,c,d,e,f\n# note\n" + "\n".join(rows) + "\n").encode()
    p = write(tmp_path, text, name="d.csv")
    one = _chunk_arrays(iter_csv(p, chunk_bytes=chunk_bytes, threads=1))
    assert _chunk_arrays(iter_csv(p, chunk_bytes=chunk_bytes, threads=3)) == one
    bad = write(tmp_path, text + b"1,2,3\n", name="bad.csv")
    with pytest.raises(InputError, match="too few columns") as ei:
        list(iter_csv(bad, chunk_bytes=chunk_bytes, threads=3))
    assert ei.value.line == text.count(b"\n") + 1


def test_early_close_on_threads_stops_reader(tmp_path, tiny_pieces):
    import threading

    text = gen_svmlight(np.random.default_rng(4), n_rows=500)
    it = iter_svmlight(write(tmp_path, text), chunk_bytes=64, threads=2)
    next(it)
    it.close()
    assert not [t for t in threading.enumerate() if t.name.startswith(("ooc-input-reader", "ooc-parse-ahead"))]


def test_csv_weight_column_on_threads(tmp_path, tiny_pieces):
    rng = np.random.default_rng(6)
    rows = [f"{rng.integers(0, 2)},{rng.random():.3f},{rng.integers(0, 3)},{rng.random():.2f}" for _ in range(300)]
    p = write(tmp_path, ("y,a,w,b\n" + "\n".join(rows) + "\n").encode(), name="w.csv")
    one = list(iter_csv(p, chunk_bytes=500, weight_column=2, threads=1))
    two = list(iter_csv(p, chunk_bytes=500, weight_column=2, threads=3))
    assert _chunk_arrays(one) == _chunk_arrays(two)
    assert [c.weights.tobytes() for c in one] == [c.weights.tobytes() for c in two]
    np.testing.assert_array_equal(np.concatenate([c.weights for c in two]), [float(r.split(",")[2]) for r in rows])
    bad = write(tmp_path, ("y,a,w,b\n" + "\n".join(rows) + "\n1,0.5,-2,1\n").encode(), name="neg.csv")
    with pytest.raises(InputError, match="negative") as ei:
        list(iter_csv(bad, chunk_bytes=500, weight_column=2, threads=3))
    assert ei.value.line == len(rows) + 2
