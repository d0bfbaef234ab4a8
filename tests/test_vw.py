"""Vowpal Wabbit text input and raw text input: hashing, parsing, conversion, training, errors.

The hashes are checked against published MurmurHash3 test vectors, scikit-learn's
``murmurhash3_32`` and, when the ``vowpalwabbit`` package is installed, VW's own parser.
The matrices are rebuilt here by a small pure-Python reader of the same grammar, hashing
with scikit-learn's murmur3.
"""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner
from sklearn.utils import murmurhash3_32

import ooc
from ooc.cli import main as cli
from ooc.kernels import vw as kv
from ooc.store import ingest
from ooc.store.readers import InputError, detect_format, iter_text, iter_vw

# --------------------------------------------------------------------------- references


def ref_hashstring(name: bytes, seed: int) -> int:
    """VW's hashstring, written from its definition: trim bytes <= 0x20, digits -> int + seed."""
    name = bytes(name)
    while name and name[0] <= 32:
        name = name[1:]
    while name and name[-1] <= 32:
        name = name[:-1]
    if name and all(48 <= c <= 57 for c in name):
        return (int(name) + seed) % 2**64
    return murmurhash3_32(name, seed=seed % 2**32, positive=True)


def ref_vw_rows(text: bytes, bits: int):
    """Labels, weights and the CSR matrix of VW lines using only ``label [weight] |ns[:s] f[:v]``
    (no tags, no string or anonymous features)."""
    mask = (1 << bits) - 1
    labels, weights, rows = [], [], []
    for line in text.split(b"\n"):
        if not line.strip():
            continue
        head, *groups = line.split(b"|")
        toks = head.split()
        labels.append(float(toks[0]))
        weights.append(float(toks[1]) if len(toks) > 1 else 1.0)
        row = {}
        for g in groups:
            if g[:1] in (b" ", b""):
                ch, scale, feats = 0, 1.0, g.split()
            else:
                ns, *feats = g.split()
                name, _, s = ns.partition(b":")
                ch, scale = ref_hashstring(name, 0), float(s) if s else 1.0
            for f in feats:
                name, _, v = f.partition(b":")
                val = scale * (float(v) if v else 1.0)
                if val != 0:
                    j = ref_hashstring(name, ch) & mask
                    row[j] = row.get(j, 0.0) + val
        rows.append(row)
    return np.array(labels), np.array(weights), _csr(rows, 1 << bits)


def _csr(rows, d):
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.concatenate([sorted(r) for r in rows] + [[]]).astype(np.int64)
    data = np.concatenate([[r[j] for j in sorted(r)] for r in rows] + [[]])
    return sp.csr_matrix((data, indices, indptr), shape=(len(rows), d))


def ref_text_row(text: str, bits: int) -> dict:
    """Unigram and bigram counts of a text, hashed: tokens are runs of ASCII word characters
    and non-ASCII characters, ASCII letters lowered."""
    toks = [t.lower() for t in re.findall(rb"[0-9A-Za-z_\x80-\xff]+", text.encode())]
    grams = toks + [a + b" " + b for a, b in zip(toks, toks[1:])]
    row = {}
    for g in grams:
        j = murmurhash3_32(g, seed=0, positive=True) & ((1 << bits) - 1)
        row[j] = row.get(j, 0.0) + 1.0
    return row


def chunks_matrix(chunks, d):
    chunks = list(chunks)
    labels = np.concatenate([c.labels for c in chunks])
    ws = np.concatenate([c.weights if c.weights is not None else np.ones(len(c.labels)) for c in chunks])
    X = sp.vstack([sp.csr_matrix((c.data, c.indices, c.indptr), shape=(len(c.labels), d)) for c in chunks])
    return labels, ws, X.tocsr()


def arr(s) -> np.ndarray:
    return np.frombuffer(s if isinstance(s, bytes) else s.encode(), np.uint8)


# --------------------------------------------------------------------------- hashing

# Published MurmurHash3 x86_32 test vectors (key, seed, hash).
VECTORS = [
    (b"", 0, 0), (b"", 1, 0x514E28B7), (b"", 0xFFFFFFFF, 0x81F16F39), (b"\0\0\0\0", 0, 0x2362F9DE),
    (b"aaaa", 0x9747B28C, 0x5A97808A), (b"a", 0x9747B28C, 0x7FA09EA6), (b"ab", 0x9747B28C, 0x74875592),
    (b"abc", 0x9747B28C, 0xC84A62DD), (b"abcd", 0x9747B28C, 0xF0478627),
    (b"Hello, world!", 0x9747B28C, 0x24884CBA),
    (b"The quick brown fox jumps over the lazy dog", 0x9747B28C, 0x2FA826CD),
]


@pytest.mark.parametrize("key,seed,expected", VECTORS)
def test_murmur3_published_vectors(key, seed, expected):
    assert kv.murmur3_32(arr(key), 0, len(key), seed) == expected


def test_murmur3_matches_sklearn_and_slices():
    rng = np.random.default_rng(1)
    for n in range(0, 33):
        b = rng.integers(0, 256, n + 6).astype(np.uint8)
        for seed in (0, 7, 2**32 - 1, 2**40 + 5):  # VW passes 64-bit seeds: their low 32 bits count
            got = kv.murmur3_32(b, 3, 3 + n, seed)
            assert got == murmurhash3_32(bytes(b[3:3 + n]), seed=seed % 2**32, positive=True)


def test_hashstring_by_hand():
    # digits only: the integer plus the seed; trimmed of spaces/control bytes first
    assert kv.hashstring(arr("123"), 0, 3, 0) == 123
    assert kv.hashstring(arr("123"), 0, 3, 1000) == 1123
    assert kv.hashstring(arr(" 42\t"), 0, 4, 0) == 42
    assert kv.hashstring(arr(""), 0, 0, 77) == 77  # VW: an empty name hashes to the seed
    # 20 digits wrap modulo 2**64 as C's size_t does
    big = "18446744073709551617"
    assert kv.hashstring(arr(big), 0, len(big), 0) == 1
    # anything else: murmur3 of the trimmed bytes with the seed
    assert kv.hashstring(arr(" x1 "), 0, 4, 5) == murmurhash3_32(b"x1", seed=5, positive=True)
    for name in ("a", "feature", "héllo", "-3", "1.5"):
        b = arr(name)
        assert kv.hashstring(b, 0, len(b), 3567900184) == ref_hashstring(b, 3567900184)


# --------------------------------------------------------------------------- VW reader

VW_TEXT = (b"1 |ns a b:2 c:0.5 |x:0.5 c 12 |  d\n"
           b"-1 2.5 |ns a |other 7:3 e:-1.25\n"
           b"\n"
           b"1 0.5 | 3 4:1.5 3\n"
           b"-1 |ns:2 a:-1 b a:0\n")


def test_vw_reader_matches_hand_hashing(tmp_path):
    p = tmp_path / "a.vw"
    p.write_bytes(VW_TEXT)
    for bits in (18, 3):  # 3 bits: collisions, summed
        y, w, X = chunks_matrix(iter_vw(p, hash_bits=bits), 1 << bits)
        ry, rw, RX = ref_vw_rows(VW_TEXT, bits)
        np.testing.assert_array_equal(y, ry)
        np.testing.assert_array_equal(w, rw)
        assert (X != RX).nnz == 0
        assert np.all(np.diff(X.indices[X.indptr[0]:X.indptr[1]]) > 0)  # sorted, unique
    # the default namespace hashes digits to themselves: row 3 holds columns 3 (twice) and 4
    _, _, X = chunks_matrix(iter_vw(p, hash_bits=18), 1 << 18)
    assert X[2, 3] == 2.0 and X[2, 4] == 1.5 and X[2].nnz == 2


def test_vw_chunks_cut_anywhere(tmp_path):
    p = tmp_path / "a.vw"
    p.write_bytes(VW_TEXT * 3)
    y1, w1, X1 = chunks_matrix(iter_vw(p, hash_bits=10), 1024)
    y2, w2, X2 = chunks_matrix(iter_vw(p, chunk_bytes=7, hash_bits=10), 1024)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(w1, w2)
    assert (X1 != X2).nnz == 0
    gz = tmp_path / "a.vw.gz"
    gz.write_bytes(gzip.compress(VW_TEXT * 3))
    y3, w3, X3 = chunks_matrix(iter_vw(gz, chunk_bytes=11, hash_bits=10), 1024)
    np.testing.assert_array_equal(y1, y3)
    np.testing.assert_array_equal(w1, w3)
    assert (X1 != X3).nnz == 0


def test_vw_tags_string_and_anonymous_features(tmp_path):
    p = tmp_path / "t.vw"
    p.write_bytes(b"1 'first |a x\n-1 2 second| y\n1 tag|b :4 :5 k:red\n\xef\xbb\xbf1 |c z\r\n")
    y, w, X = chunks_matrix(iter_vw(p, hash_bits=31), 1 << 31)
    np.testing.assert_array_equal(y, [1, -1, 1, 1])
    np.testing.assert_array_equal(w, [1, 2, 1, 1])
    ha, hb, hc = (ref_hashstring(n, 0) for n in (b"a", b"b", b"c"))
    mask = (1 << 31) - 1
    assert X[0, ref_hashstring(b"x", ha) & mask] == 1
    assert X[1, ref_hashstring(b"y", 0) & mask] == 1
    # anonymous features: namespace hash + their rank; a string feature: hash(value, hash(name))
    assert X[2, hb & mask] == 4 and X[2, (hb + 1) & mask] == 5
    assert X[2, ref_hashstring(b"red", ref_hashstring(b"k", hb)) & mask] == 1
    assert X[3, ref_hashstring(b"z", hc) & mask] == 1  # BOM and CRLF ignored


def _random_vw_lines(rng, n):
    """Valid VW lines drawing on every construct: weights, bases of 0, tags, namespaces with
    scales, integer, string, anonymous and zero-valued features, non-ASCII names."""
    chars = list("abcXYZ019_.-+#'é")

    def name():
        return "".join(rng.choice(chars, size=rng.integers(0, 5)))

    out = []
    for _ in range(n):
        s = str(rng.choice(["1", "-1", "2.5", "3"]))
        s += " " + str(rng.choice(["1", "2", "0.5", "0"])) if rng.random() < 0.5 else ""
        s += " 0" if rng.random() < 0.3 else ""
        s += str(rng.choice([" 'tg", " tg", " "]))
        for _ in range(rng.integers(0, 4)):
            s += "|"
            if rng.random() < 0.7:
                s += (name() or "n") + (":" + str(rng.choice(["2", "0.5", "-1"])) if rng.random() < 0.3 else "")
            for _ in range(rng.integers(0, 5)):
                s += str(rng.choice([" ", "  ", "\t"]))
                r, f = rng.random(), name()
                if r < 0.4:
                    s += f + ":" + str(rng.choice(["1", "-2", "0.5", "3e1", "0", ".25", "-0", "12345678901234567890"]))
                elif r < 0.5:
                    s += f + ":" + str(rng.choice(["abc", "x1", "é"]))
                else:
                    s += f or "q"
        out.append(s)
    return out


def test_vw_matches_vowpalwabbit(tmp_path):
    vw = pytest.importorskip("vowpalwabbit")
    lines = _random_vw_lines(np.random.default_rng(7), 300) + [
        "1 |ns a b:2 c:0.5 |x:0.5 c 12 |  d",
        "-1 2.5 'tag1|ns a |other 7:3 e:str :4 :5",
        "1 0.5 tag| f  g  | 3 4:1.5",
        "-1 |ns:2 a:-1 b",
        "3 |héllo wörld:2 |123 456 x",
        "2 1 0 |a\tb c:0",
    ]
    p = tmp_path / "v.vw"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bits = 18
    y, w, X = chunks_matrix(iter_vw(p, hash_bits=bits), 1 << bits)
    ws = vw.Workspace(f"--quiet -b {bits} --noconstant")
    try:
        for r, line in enumerate(lines):
            ex = ws.example(line)
            want = {}
            for k in range(ex.num_namespaces()):
                ns = ex.namespace(k)
                ns = chr(ns) if isinstance(ns, int) else ns
                for i in range(ex.num_features_in(ns)):
                    j = ex.feature(ns, i) & ((1 << bits) - 1)
                    want[j] = want.get(j, 0.0) + ex.feature_weight(ns, i)
            row = X.getrow(r)
            assert dict(zip(row.indices.tolist(), row.data.tolist())) == pytest.approx(want), line
            assert y[r] == ex.get_simplelabel_label()
            assert w[r] == ex.get_simplelabel_weight()
            ws.finish_example(ex)
    finally:
        ws.finish()


def test_detect_vw():
    assert detect_format("x.vw") == "vw"
    assert detect_format("x.vw.gz") == "vw"


def test_detect_vw_from_content(tmp_path):
    p = tmp_path / "data.txt"
    p.write_bytes(b"1 |f a b\n")
    assert detect_format(p) == "vw"


# --------------------------------------------------------------------------- convert and train


def _vw_dataset(rng, n=160):
    """A VW file of two namespaces (word features and numeric features) with -1/1 labels."""
    words = [f"w{k}" for k in range(12)]
    w_true = rng.standard_normal(12)
    lines = []
    for _ in range(n):
        ks = rng.choice(12, size=4, replace=False)
        vals = np.round(rng.standard_normal(4), 2)
        y = 1 if vals @ w_true[ks] + 0.3 * rng.standard_normal() > 0 else -1
        feats = " ".join(f"{words[k]}:{v}" for k, v in zip(ks, vals))
        lines.append(f"{y} |words {feats} |num:0.5 {int(rng.integers(0, 5))}")
    return ("\n".join(lines) + "\n").encode()


def test_vw_convert_and_train_match_sklearn(tmp_path):
    from sklearn.linear_model import LogisticRegression

    text = _vw_dataset(np.random.default_rng(3))
    p = tmp_path / "train.vw"
    p.write_bytes(text)
    store, run = tmp_path / "s.zarr", tmp_path / "run"
    bits, l2 = 7, 1e-2
    r = CliRunner().invoke(cli, ["convert", str(p), str(store), "--hash-bits", str(bits), "--dtype", "float64",
                                 "--json"])
    assert r.exit_code == 0, r.stderr
    info = json.loads(r.stdout.strip().splitlines()[-1])
    assert info["n_cols"] == 1 << bits and info["label_kind"] == "binary"
    y, _, X = ref_vw_rows(text, bits)
    st = ooc.open_store(str(store))
    np.testing.assert_array_equal(st.labels, y)
    assert info["nnz"] == X.nnz
    r = CliRunner().invoke(cli, ["train", str(store), "--out", str(run), "--l2", str(l2), "--tol", "1e-10",
                                 "--json"])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["converged"] and out["gap"] <= 1e-10 * max(1.0, abs(out["primal"]))
    n = X.shape[0]
    ref = LogisticRegression(C=1.0 / (l2 * n), fit_intercept=False, solver="newton-cholesky", tol=1e-12,
                             max_iter=1000).fit(X, y)
    m = ooc.load_model(str(run))
    # l2-strong convexity: ||w - w*||^2 <= 2 gap / l2, for ooc's w and (up to its own tolerance) sklearn's
    assert np.linalg.norm(m.coef_ - ref.coef_.ravel()) <= 2 * np.sqrt(2 * max(out["gap"], 1e-12) / l2)

    def primal(w):
        return np.mean(np.logaddexp(0, -y * (X @ w))) + l2 / 2 * w @ w

    assert out["primal"] == pytest.approx(primal(m.coef_), rel=1e-12)  # the model ooc wrote scores X so
    assert out["primal"] == pytest.approx(primal(ref.coef_.ravel()), rel=1e-9)
    # the VW file itself evaluates as the store does (hashed with the model's 2**7 columns)
    r1, r2 = (CliRunner().invoke(cli, ["evaluate", str(run), str(src), "--json"]) for src in (store, p))
    ev1, ev2 = (json.loads(r.stdout.strip().splitlines()[-1]) for r in (r1, r2))
    assert ev2["accuracy"] == ev1["accuracy"] == np.mean(np.sign(X @ m.coef_) == y)
    assert ev2["primal"] == pytest.approx(ev1["primal"], rel=1e-12)


def test_importance_weights_are_sample_weights(tmp_path):
    """VW's importance weights become the store's sample weights: training certifies the weighted
    objective, whose optimum is scikit-learn's with ``sample_weight``."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(5)
    text = _vw_dataset(rng).decode().splitlines()
    weights = rng.choice([0.25, 1.0, 2.0, 4.0], size=len(text))
    lines = [f"{ln.split(' ', 1)[0]} {w:g} {ln.split(' ', 1)[1]}" for ln, w in zip(text, weights)]
    p = tmp_path / "w.vw"
    p.write_bytes(("\n".join(lines) + "\n").encode())
    bits, l2 = 7, 1e-2
    st = ooc.convert(str(p), str(tmp_path / "s.zarr"), hash_bits=bits, dtype="float64")
    y, ws, X = ref_vw_rows(p.read_bytes(), bits)
    np.testing.assert_array_equal(ws, weights)
    np.testing.assert_array_equal(st.read_weights(0, st.n_rows), weights)
    run = ooc.train(st, str(tmp_path / "run"), l2=l2, tol=1e-10, max_epochs=2000)
    res = run.result
    assert res["converged"] and res["gap"] <= 1e-10 * max(1.0, abs(res["primal"]))
    n = X.shape[0]
    ref = LogisticRegression(C=1.0 / (l2 * n), fit_intercept=False, solver="newton-cholesky", tol=1e-12,
                             max_iter=1000).fit(X, y, sample_weight=weights)
    w = ooc.load_model(run.path).coef_

    def primal(v):
        return np.mean(weights * np.logaddexp(0, -y * (X @ v))) + l2 / 2 * v @ v

    assert res["primal"] == pytest.approx(primal(w), rel=1e-11)
    assert primal(w) - primal(ref.coef_.ravel()) <= res["gap"] + 1e-12
    assert abs(primal(w) - primal(ref.coef_.ravel())) <= 1e-8 * primal(w)


def test_weights_of_one_convert(tmp_path):
    # a weight column of ones is no weight: such a file converts whatever the writer supports
    p = tmp_path / "w.vw"
    p.write_bytes(b"1 1 |a x\n-1 1.0 |a y\n")
    st = ooc.convert(str(p), str(tmp_path / "s.zarr"), hash_bits=4)
    assert st.n_rows == 2 and st.n_cols == 16


# --------------------------------------------------------------------------- raw text

TEXT_CSV = ('id,label,review\n'
            '7,1,"Great film, GREAT cast!"\n'
            '8,-1,"Dull; ""boring"" plot"\n'
            '\n'
            '9,1,Café naïve ok\n'
            '10,-1,\n')


def test_text_reader_matches_hand_hashing(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text(TEXT_CSV, encoding="utf-8")
    texts = ["Great film, GREAT cast!", 'Dull; "boring" plot', "Café naïve ok", ""]
    for bits, spec in ((18, ("label", "review")), (4, ("1", "2"))):
        y, _, X = chunks_matrix(iter_text(p, label=spec[0], text=spec[1], hash_bits=bits), 1 << bits)
        np.testing.assert_array_equal(y, [1, -1, 1, -1])
        RX = _csr([ref_text_row(t, bits) for t in texts], 1 << bits)
        assert (X != RX).nnz == 0
    y, _, X = chunks_matrix(iter_text(p, label="label", text="review", chunk_bytes=5, hash_bits=18), 1 << 18)
    assert X[0].sum() == 4 + 3  # great film great cast: 4 unigrams, 3 bigrams


def test_text_tsv_without_header(tmp_path):
    p = tmp_path / "r.tsv"
    p.write_text("hello world\t2\nworld\t3\n", encoding="utf-8")
    y, _, X = chunks_matrix(iter_text(p, label="1", text="0", hash_bits=10), 1024)
    np.testing.assert_array_equal(y, [2, 3])
    assert (X != _csr([ref_text_row("hello world", 10), ref_text_row("world", 10)], 1024)).nnz == 0


def test_text_convert_cli(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text(TEXT_CSV, encoding="utf-8")
    store = tmp_path / "s.zarr"
    r = CliRunner().invoke(cli, ["convert", str(p), str(store), "--text", "label:review", "--hash-bits", "12"])
    assert r.exit_code == 0, r.stderr
    st = ooc.open_store(str(store))
    assert st.n_rows == 4 and st.n_cols == 4096


# --------------------------------------------------------------------------- errors

# (name, the bad line (line 3 of its file), column, words in the message)
BAD_VW = [
    ("bad_label", b"abc |a x", 1, "bad label"),
    ("nonfinite_label", b"nan |a x", 1, "not finite"),
    ("cost_label", b"1:0.5 2:1 |a x", 1, "cost-sensitive"),
    ("label_tokens", b"1 2 0 3 |a x", 7, "too many tokens"),
    ("bad_weight", b"1 w |a x", 3, "importance weight"),
    ("negative_weight", b"1 -2 |a x", 3, "negative importance weight"),
    ("base", b"1 1 0.5 |a x", 5, "base"),
    ("no_label", b"|a x", 1, "no label"),
    ("tag_only", b"1|a x", 1, "no label"),
    ("empty_namespace", b"1 |:2 x", 3, "empty namespace"),
    ("bad_namespace_scale", b"1 |a:x y", 6, "namespace scale"),
    ("missing_value", b"1 |a x:", 7, "without a value"),
    ("bad_value", b"1 |a x:1.5y", 8, "bad value"),
    ("nonfinite_value", b"1 |a x:inf", 8, "not finite"),
    ("overflow", b"1 |a x:1e39", 8, "overflows float32"),
    ("not_utf8", b"1 |a x\xff", 7, "not utf-8"),
    ("carriage_return", b"1 |a x\ry", 7, "carriage return"),
]


@pytest.mark.parametrize("name,content,col,words", BAD_VW, ids=[b[0] for b in BAD_VW])
def test_malformed_vw_line_is_one_line_error(tmp_path, name, content, col, words):
    p = tmp_path / f"{name}.vw"
    p.write_bytes(b"1 |a ok\n\n" + content + b"\n")
    store = tmp_path / "s.zarr"
    r = CliRunner().invoke(cli, ["convert", str(p), str(store)])
    assert r.exit_code == 1
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and "Traceback" not in r.output, r.stderr
    assert err[0].startswith(f"ooc: error: {p}:3:{col}: "), err[0]
    assert words in err[0].lower()
    assert not store.exists()


BAD_TEXT = [
    ("bad_label", "label,text\n1,ok\nyes,fine\n", 3, 1, "bad label"),
    ("too_few_columns", "label,text\n1,ok\n2\n", 3, 2, "too few columns"),
    ("unterminated_quote", 'label,text\n1,"ok\n', 2, 3, "closing quote"),
    ("text_after_quote", 'label,text\n1,"ok"x\n', 2, 7, "after a closing quote"),
]


@pytest.mark.parametrize("name,content,line,col,words", BAD_TEXT, ids=[b[0] for b in BAD_TEXT])
def test_malformed_text_line_is_one_line_error(tmp_path, name, content, line, col, words):
    p = tmp_path / f"{name}.csv"
    p.write_text(content, encoding="utf-8")
    r = CliRunner().invoke(cli, ["convert", str(p), str(tmp_path / "s.zarr"), "--text", "label:text"])
    assert r.exit_code == 1
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1, r.stderr
    assert err[0].startswith(f"ooc: error: {p}:{line}:{col}: "), err[0]
    assert words in err[0].lower()


def test_text_not_utf8(tmp_path):
    p = tmp_path / "l.csv"
    p.write_bytes(b"label,text\n1,caf\xe9\n")
    with pytest.raises(InputError, match=r"l\.csv:2:6: not UTF-8"):
        list(iter_text(p, label="label", text="text"))


@pytest.mark.parametrize("args,needle", [
    (["--hash-bits", "32"], "--hash-bits"),
    (["--hash-bits", "0"], "--hash-bits"),
    (["--text", "label"], "LABEL:TEXT"),
    (["--text", "label:text", "--input-format", "csv"], "--text"),
    (["--text", "nope:text"], "no column 'nope'"),
])
def test_option_errors_are_one_line(tmp_path, args, needle):
    p = tmp_path / "r.csv"
    p.write_text("label,text\n1,ok\n", encoding="utf-8")
    r = CliRunner().invoke(cli, ["convert", str(p), str(tmp_path / "s.zarr"), *args])
    assert r.exit_code != 0
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and needle in err[0], r.stderr


def test_hash_bits_checked_in_python(tmp_path):
    p = tmp_path / "a.vw"
    p.write_bytes(b"1 |a x\n")
    with pytest.raises(ValueError, match="--hash-bits must be an integer from 1 to 31"):
        ingest.convert(str(p), str(tmp_path / "s.zarr"), hash_bits=40)


def test_hash_bits_beyond_the_memory_for_columns(tmp_path, monkeypatch):
    # a store keeps O(columns) arrays: 2**B columns that do not fit are refused before any work
    monkeypatch.setattr(ingest, "column_limit", lambda held=0: 100)
    p = tmp_path / "a.vw"
    p.write_bytes(b"1 |a x\n")
    r = CliRunner().invoke(cli, ["convert", str(p), str(tmp_path / "s.zarr"), "--hash-bits", "8"])
    assert r.exit_code == 1
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and "--hash-bits 8 makes 256 columns" in err[0], r.stderr
    assert not (tmp_path / "s.zarr").exists()
