"""Round trips: input -> store -> scipy, against scikit-learn, numpy and scipy.

Every check reads the store back through the public reader (``open_store``,
``Store.to_scipy``, ``Store.iter_blocks``) and compares with an independent
reference: scikit-learn's ``load_svmlight_file`` for text, the scipy matrix itself
for in-memory inputs, numpy for the statistics.
"""

from __future__ import annotations

import gzip
import json
import os
import uuid

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst
from sklearn.datasets import load_svmlight_file

import ooc
from ooc.cli import main as cli
from ooc.store import layout as L
from ooc.store.backend import MemoryBackend, StoreError
from ooc.store.ingest import convert
from ooc.store.store import open_store
from ooc.synth import SynthSource

FORMATS = {"zarr": ".zarr", "hdf5": ".h5"}


# -- helpers -------------------------------------------------------------------------------
def write_svm(path, n, d, rng, kind="binary", zero_based=False, density=0.3, empty_rows=0.2,
              empty_cols=True, explicit_zeros=True):
    """A random svmlight file; returns nothing (scikit-learn is the reference reader).

    Columns ``d // 3 .. d // 2`` never appear when ``empty_cols`` (empty columns inside
    the range, not only at the end); some rows are empty; a few explicit ``id:0``.
    """
    base = 0 if zero_based else 1
    lines = ["# a comment line, ignored\n"]
    cols = np.arange(d)
    if empty_cols and d >= 4:
        cols = np.concatenate((cols[: d // 3], cols[d // 2:]))
    labels = {"binary": lambda: rng.choice([3, 7]),
              "binary01": lambda: rng.choice([0, 1]),
              "multiclass": lambda: rng.choice([0, 1, 2, 5]),
              "regression": lambda: round(float(rng.normal()) * 10, 4)}[kind]
    for i in range(n):
        feats = []
        if rng.random() >= empty_rows:
            ids = np.sort(rng.choice(cols, size=max(1, rng.binomial(len(cols), density)), replace=False))
            for j in ids:
                v = 0.0 if explicit_zeros and rng.random() < 0.05 else float(rng.normal()) * 2
                feats.append(f"{j + base}:{v:.6g}")
        lab = labels()
        lines.append(f"{lab} {' '.join(feats)}\n" if feats else f"{lab}\n")
    # make sure the zero-based file does use id 0 (and the one-based one never does)
    if zero_based:
        lines.append(f"{labels()} 0:1.5\n")
    with open(path, "w") as f:
        f.writelines(lines)


def assert_csr_equal(A, B):
    """Same CSR/CSC arrays, explicit zeros included (``A != B`` would ignore them)."""
    assert A.shape == B.shape
    np.testing.assert_array_equal(A.indptr, B.indptr)
    np.testing.assert_array_equal(A.indices, B.indices)
    np.testing.assert_array_equal(A.data, B.data)


def assemble_blocks(st, layout):
    """The whole matrix glued together from ``iter_blocks`` (checks block bounds too)."""
    indptr, indices, data = [np.zeros(1, np.int64)], [], []
    off = 0
    expect_start = 0
    ptr = st.block_ptr(layout)
    for b, blk in enumerate(st.iter_blocks(layout)):
        assert blk.layout == layout and blk.index == b
        assert (blk.start, blk.stop) == (ptr[b], ptr[b + 1]) and blk.start == expect_start
        assert blk.indptr[0] == 0 and len(blk.indptr) == blk.n_lines + 1
        assert len(blk.indices) == len(blk.data) == blk.indptr[-1]
        expect_start = blk.stop
        indptr.append(blk.indptr[1:] + off)
        off += int(blk.indptr[-1])
        indices.append(blk.indices)
        data.append(blk.data)
    n_lines = st.n_rows if layout == L.ROWS else st.n_cols
    assert expect_start == n_lines
    args = (np.concatenate(data) if data else np.zeros(0, st.dtype),
            np.concatenate(indices) if indices else np.zeros(0, st.index_dtype), np.concatenate(indptr))
    return (sp.csr_matrix if layout == L.ROWS else sp.csc_matrix)(args, shape=st.shape)


def check_stats(st, X):
    """Statistics and derived quantities against numpy on the scipy matrix (stored dtype)."""
    X = sp.csr_matrix(X).astype(np.float64)
    sq = X.multiply(X)
    np.testing.assert_array_equal(st.row_nnz, np.diff(X.indptr))
    np.testing.assert_array_equal(st.col_nnz, np.bincount(X.indices, minlength=X.shape[1]))
    np.testing.assert_allclose(st.row_sqnorm, np.asarray(sq.sum(axis=1)).ravel(), rtol=1e-12, atol=0)
    np.testing.assert_allclose(st.col_sqnorm, np.asarray(sq.sum(axis=0)).ravel(), rtol=1e-12, atol=0)
    info = st.info()
    R = np.sqrt(np.asarray(sq.sum(axis=1)).max()) if X.shape[0] else 0.0
    np.testing.assert_allclose(info["R"], R, rtol=1e-12)
    c_p = float(np.dot(st.col_nnz, np.asarray(sq.sum(axis=0)).ravel()))
    c_d = float(np.dot(st.row_nnz, np.asarray(sq.sum(axis=1)).ravel()))
    np.testing.assert_allclose([info["C_P"], info["C_D"]], [c_p, c_d], rtol=1e-12)
    # ties (e.g. a dense square matrix) are decided by rounding: check the rule on the stored values
    assert info["recommended_side"] == ("primal" if info["C_P"] < info["C_D"] else "dual")
    assert info["nnz"] == X.nnz == st.nnz
    assert info["empty_rows"] == int(np.sum(np.diff(X.indptr) == 0))


def check_against(st, X, y, dtype=np.float32):
    """The store holds exactly X (cast to ``dtype``) in every stored layout, and labels y."""
    X = sp.csr_matrix(X).astype(dtype)
    assert st.shape == X.shape
    assert st.dtype == np.dtype(dtype)
    if st.has_layout(L.ROWS):
        assert_csr_equal(st.to_scipy(L.ROWS), X)
        assert_csr_equal(assemble_blocks(st, L.ROWS), X)
    if st.has_layout(L.COLS):
        Xc = X.tocsc()
        assert_csr_equal(st.to_scipy(L.COLS), Xc)
        assert_csr_equal(assemble_blocks(st, L.COLS), Xc)
    check_stats(st, X)
    check_labels(st, y)


def check_labels(st, y):
    y = np.asarray(y, dtype=np.float64)
    u = np.unique(y)
    if st.label_kind == L.BINARY:
        assert st.classes == u.tolist()
        assert st.label_values == ([u[0], u[1]] if len(u) == 2 else [u[0], u[0]])
        expect = np.where(y == u[-1], 1.0, -1.0) if len(u) == 2 else np.full(len(y), 1.0 if u[0] > 0 else -1.0)
        np.testing.assert_array_equal(st.labels, expect)
    else:
        np.testing.assert_array_equal(st.labels, y)
        if st.label_kind == L.MULTICLASS:
            assert st.classes == u.tolist()
        else:
            assert st.classes is None
    np.testing.assert_array_equal(st.read_labels(1, 3), st.labels[1:3])


@pytest.fixture
def mem_name():
    """A fresh memory:// store name, removed from the process-global registry afterwards."""
    names = []

    def make():
        names.append(f"memory://t-{uuid.uuid4().hex}")
        return names[-1]

    yield make
    for n in names:
        MemoryBackend.delete(n)


# -- svmlight round trips ----------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
@pytest.mark.parametrize("kind,zero_based,dtype", [
    ("binary", False, "float32"),
    ("binary01", True, "float64"),
    ("multiclass", True, "float32"),
    ("regression", False, "float64"),
])
def test_svmlight_roundtrip(tmp_path, fmt, kind, zero_based, dtype):
    rng = np.random.default_rng(hash((kind, zero_based)) % 2**32)
    src = tmp_path / "in.svm"
    write_svm(src, 60, 25, rng, kind=kind, zero_based=zero_based)
    X, y = load_svmlight_file(str(src), zero_based="auto")
    # small blocks and memory: many row and column blocks, many transpose buckets
    st = convert(src, tmp_path / f"s{FORMATS[fmt]}", format=fmt, dtype=dtype, memory="64KiB",
                 block_bytes=256, chunk_len=16)
    assert st.backend.name == fmt
    assert st.n_blocks(L.ROWS) > 3 and st.n_blocks(L.COLS) > 3
    assert st.attrs["index_base"] == (0 if zero_based else 1)
    assert st.label_kind == {"binary": "binary", "binary01": "binary", "multiclass": "multiclass",
                             "regression": "regression"}[kind]
    check_against(st, X, y, dtype)
    st.close()


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
@pytest.mark.parametrize("text,shape", [
    ("1 3:0.5 7:2\n", (1, 7)),              # single row
    ("1 1:1\n-1\n1 1:2.5\n-1 1:0\n", (4, 1)),  # single column, an empty row, an explicit zero
    ("2 1:1\n", (1, 1)),                      # 1 x 1, a single label value
    ("1\n-1\n1\n", (3, 0)),                   # no features at all
])
def test_degenerate_shapes(tmp_path, fmt, text, shape):
    src = tmp_path / "in.svm"
    src.write_text(text)
    X, y = load_svmlight_file(str(src), zero_based="auto")
    # scikit-learn reports one (empty) column for a file without features; we say none
    X = X[:, :shape[1]]
    assert X.shape == shape
    st = convert(src, tmp_path / f"s{FORMATS[fmt]}", format=fmt, block_bytes=64, chunk_len=4)
    check_against(st, X, y)
    st.close()


def test_gzip_input_and_float64(tmp_path):
    rng = np.random.default_rng(5)
    plain = tmp_path / "in.svm"
    write_svm(plain, 40, 12, rng, kind="multiclass")
    gz = tmp_path / "in.svm.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    X, y = load_svmlight_file(str(plain), zero_based="auto")
    st = convert(gz, tmp_path / "s.zarr", dtype="float64", block_bytes=128, chunk_len=8)
    check_against(st, X, y, np.float64)


@pytest.mark.parametrize("layout", ["rows", "cols"])
@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_single_layout(tmp_path, fmt, layout):
    rng = np.random.default_rng(11)
    src = tmp_path / "in.svm"
    write_svm(src, 30, 10, rng)
    X, y = load_svmlight_file(str(src), zero_based="auto")
    st = convert(src, tmp_path / f"s{FORMATS[fmt]}", format=fmt, layout=layout, block_bytes=128, chunk_len=8)
    assert st.layouts == (layout,)
    other = L.COLS if layout == L.ROWS else L.ROWS
    with pytest.raises(StoreError, match="layout"):
        st.to_scipy(other)
    with pytest.raises(StoreError):
        st.block(other, 0)
    check_against(st, X, y)


def test_label_kind_override_and_n_features(tmp_path):
    src = tmp_path / "in.svm"
    src.write_text("1 1:1\n2 2:1\n1 3:1\n")
    st = convert(src, tmp_path / "a.zarr", label_kind="regression", n_features=10)
    assert st.label_kind == "regression" and st.shape == (3, 10)
    np.testing.assert_array_equal(st.labels, [1, 2, 1])
    with pytest.raises(ValueError, match="n_features"):
        convert(src, tmp_path / "b.zarr", n_features=2)
    assert not (tmp_path / "b.zarr").exists()


def test_overwrite(tmp_path):
    src = tmp_path / "in.svm"
    src.write_text("1 1:1\n-1 2:1\n")
    convert(src, tmp_path / "s.zarr").close()
    with pytest.raises(FileExistsError):
        convert(src, tmp_path / "s.zarr")
    src.write_text("1 1:1\n-1 2:1\n1 3:4\n")
    st = convert(src, tmp_path / "s.zarr", overwrite=True)
    assert st.n_rows == 3
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_memory_store_overwrite(mem_name):
    name = mem_name()
    X = sp.random(5, 4, density=0.5, random_state=0, format="csr")
    convert(X, name, y=np.arange(5) % 2)
    with pytest.raises(FileExistsError):
        convert(X, name, y=np.arange(5) % 2)
    st = convert(X[:3], name, y=np.arange(3) % 2, overwrite=True)
    assert st.n_rows == 3
    assert not [k for k in MemoryBackend._containers if k.startswith(name + ".partial")]


# -- other inputs ---------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_numpy_scipy_npz_inputs(tmp_path, fmt):
    rng = np.random.default_rng(3)
    D = rng.normal(size=(20, 6)) * (rng.random((20, 6)) < 0.5)
    D[4] = 0.0      # an empty row
    D[:, 2] = 0.0   # an empty column
    y = rng.integers(0, 3, 20).astype(float)
    ext = FORMATS[fmt]
    a = convert(D, tmp_path / f"dense{ext}", y=y, format=fmt, block_bytes=64, chunk_len=4, dtype="float64")
    check_against(a, D, y, np.float64)
    S = sp.csc_matrix(D)  # not CSR: converted on the way
    b = convert(S, tmp_path / f"sparse{ext}", y=y, format=fmt, dtype="float64")
    check_against(b, S, y, np.float64)
    assert a.fingerprint == b.fingerprint
    sp.save_npz(tmp_path / "m.npz", sp.csr_matrix(D))
    with np.load(tmp_path / "m.npz") as z:
        np.savez(tmp_path / "xy.npz", y=y, **{k: z[k] for k in z.files})
    c = convert(tmp_path / "xy.npz", tmp_path / f"npz{ext}", format=fmt, dtype="float64")
    check_against(c, D, y, np.float64)
    np.savez(tmp_path / "dense.npz", X=D, labels=y)
    d = convert(tmp_path / "dense.npz", tmp_path / f"dnpz{ext}", format=fmt, dtype="float64")
    check_against(d, D, y, np.float64)
    assert c.fingerprint == d.fingerprint == a.fingerprint


def test_array_input_errors(tmp_path):
    with pytest.raises(ValueError, match="labels"):
        convert(np.eye(3), tmp_path / "a.zarr")
    with pytest.raises(ValueError, match="rows"):
        convert(np.eye(3), tmp_path / "a.zarr", y=[1, 2])
    bad = np.eye(3)
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"X\[1, 2\]"):
        convert(bad, tmp_path / "a.zarr", y=[1, 2, 1])
    with pytest.raises(ValueError, match=r"y\[0\]"):
        convert(np.eye(3), tmp_path / "a.zarr", y=[np.inf, 1, 1])
    assert list(tmp_path.iterdir()) == []


def test_synth_cli_store(tmp_path, monkeypatch):
    monkeypatch.setenv("OOC_MEMORY_SCOPE", "work")  # 1 MiB for the work's buffers, not the whole process
    r = CliRunner().invoke(cli, ["synth", str(tmp_path / "s.zarr"), "--rows", "300", "--cols", "50",
                                 "--nnz-per-row", "6", "--task", "multiclass", "--classes", "4",
                                 "--values", "gaussian", "--memory", "1MiB", "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output.strip().splitlines()[-1])
    assert (info["n_rows"], info["n_cols"], info["nnz"]) == (300, 50, 1800)
    assert info["label_kind"] == "multiclass" and set(info["classes"]) <= {0.0, 1.0, 2.0, 3.0}
    st = open_store(tmp_path / "s.zarr")
    src = SynthSource(300, 50, 6, task="multiclass", n_classes=4, values="gaussian")
    chunks = list(src())
    X = sp.csr_matrix((np.concatenate([c.data for c in chunks]), np.concatenate([c.indices for c in chunks]),
                       np.concatenate([np.zeros(1, int)] + [c.indptr[1:] + 6 * c.first_line - 6 for c in chunks])),
                      shape=(300, 50))
    y = np.concatenate([c.labels for c in chunks])
    check_against(st, X, y)
    assert np.all(np.diff(st.row_nnz) == 0) and st.row_nnz[0] == 6


def test_synth_is_independent_of_chunking(mem_name):
    from ooc.synth import synth

    a = synth(mem_name(), 500, 40, 5, task="regression", seed=3, rows_per_chunk=64)
    b = synth(mem_name(), 500, 40, 5, task="regression", seed=3, rows_per_chunk=1000, memory="1MiB")
    assert a.fingerprint == b.fingerprint
    c = synth(mem_name(), 500, 40, 5, task="regression", seed=4)
    assert c.fingerprint != a.fingerprint
    assert SynthSource(10, 5, 3).chunk(0, 10).indices.max() < 5


def test_textlike_generator(tmp_path):
    from ooc.synth import write_textlike_svmlight

    p = tmp_path / "t.svm"
    size = write_textlike_svmlight(str(p), 300_000, seed=1, max_id=5000, batch_rows=1000)
    assert size == p.stat().st_size and abs(size - 300_000) < 2000
    X, y = load_svmlight_file(str(p), zero_based=False)
    assert set(np.unique(y)) == {-1.0, 1.0}
    nnz = np.diff(X.indptr)
    assert nnz.max() <= 30 and np.median(nnz) >= 15 and X.shape[1] <= 5000
    assert X.data.min() >= 0.01 and X.data.max() < 1
    st = convert(p, tmp_path / "t.zarr", memory="1MiB")
    check_against(st, X, y)


# -- info, fingerprint ------------------------------------------------------------------------
def test_info_json(tmp_path):
    src = tmp_path / "in.svm"
    write_svm(src, 50, 20, np.random.default_rng(2), kind="multiclass")
    X, y = load_svmlight_file(str(src), zero_based="auto")
    for fmt, ext in FORMATS.items():
        convert(src, tmp_path / f"s{ext}", format=fmt).close()
        r = CliRunner().invoke(cli, ["info", str(tmp_path / f"s{ext}"), "--json"])
        assert r.exit_code == 0, r.output
        info = json.loads(r.output.strip().splitlines()[-1])
        assert (info["n_rows"], info["n_cols"], info["nnz"]) == (X.shape[0], X.shape[1], X.nnz)
        assert info["label_kind"] == "multiclass" and info["classes"] == np.unique(y).tolist()
        Xd = X.astype(np.float32).astype(np.float64)
        c_p = float(np.dot(np.bincount(Xd.indices, minlength=X.shape[1]),
                           np.asarray(Xd.multiply(Xd).sum(axis=0)).ravel()))
        np.testing.assert_allclose(info["C_P"], c_p, rtol=1e-12)
        assert info["C_D"] > 0 and info["recommended_side"] in ("primal", "dual")
        assert info["bytes_on_disk"] > 0 and info["backend"] == fmt
        r = CliRunner().invoke(cli, ["info", str(tmp_path / f"s{ext}")])
        assert r.exit_code == 0 and "C_P" in r.output


def test_fingerprint_is_content_only(tmp_path):
    rng = np.random.default_rng(9)
    src = tmp_path / "in.svm"
    write_svm(src, 400, 30, rng)
    fps = set()
    for fmt in FORMATS:
        for mem, bb in (("64KiB", 256), ("16MiB", None)):
            st = convert(src, tmp_path / f"s-{fmt}-{mem}{FORMATS[fmt]}", format=fmt, memory=mem,
                         block_bytes=bb, chunk_len=16 if bb else None)
            fps.add(st.fingerprint)
            st.close()
    assert len(fps) == 1, "same content, different chunking or backend -> same fingerprint"
    st64 = convert(src, tmp_path / "f64.zarr", dtype="float64")
    text = src.read_text().splitlines(keepends=True)
    src2 = tmp_path / "in2.svm"
    src2.write_text("".join(text[:-1]) + text[-1].replace(" ", " ", 1).rstrip("\n") + " 31:1\n")
    changed = convert(src2, tmp_path / "changed.zarr")
    relabeled = tmp_path / "in3.svm"
    relabeled.write_text(src.read_text().replace("\n7 ", "\n8 ").replace("\n3 ", "\n4 "))
    rl = convert(relabeled, tmp_path / "relabeled.zarr")
    assert len({*fps, st64.fingerprint, changed.fingerprint, rl.fingerprint}) == 4


# -- block reads touch only their chunks -------------------------------------------------------
@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_block_read_touches_only_its_chunks(tmp_path, fmt):
    rng = np.random.default_rng(4)
    src = tmp_path / "in.svm"
    write_svm(src, 400, 40, rng, empty_rows=0.0)
    st = convert(src, tmp_path / f"s{FORMATS[fmt]}", format=fmt, block_bytes=1024, chunk_len=32)
    be = st.backend
    for layout in (L.ROWS, L.COLS):
        nb = st.n_blocks(layout)
        assert nb >= 5
        b = nb // 2
        s, e = st.block_bounds(layout, b)
        calls = []
        orig, orig_many = be._read, be.read_many
        inside = []

        def spy(name, start, stop, _orig=orig):
            if not inside:
                calls.append((name, start, stop))
            return _orig(name, start, stop)

        def spy_many(requests, _orig=orig_many):
            calls.extend((name, start, stop) for name, start, stop, _ in requests)
            inside.append(1)
            try:
                return _orig(requests)
            finally:
                inside.pop()

        be._read, be.read_many = spy, spy_many
        try:
            blk = st.block(layout, b)
        finally:
            del be._read, be.read_many
        lo = int(be.read(L.array_name(layout, L.INDPTR), s, s + 1)[0])
        hi = lo + int(blk.indptr[-1])
        expect = {(L.array_name(layout, L.INDPTR), s, e + 1),
                  (L.array_name(layout, L.INDICES), lo, hi),
                  (L.array_name(layout, L.DATA), lo, hi)}
        assert set(calls) == expect and len(calls) == 3
        if fmt == "zarr":
            check_zarr_chunk_keys(st, layout, b, s, e, lo, hi)


def check_zarr_chunk_keys(st, layout, b, s, e, lo, hi):
    """The chunk objects read for block ``b``: chunk files (ooc.store.chunk_files) or Zarr's store."""
    from ooc.store.chunk_files import DirectArray

    store = st.backend._g.store
    keys = []
    cls = type(store)
    orig_get, orig_fetch = cls.get, DirectArray.fetch
    root = str(store.root)

    async def get(self, key, *a, **k):
        keys.append(key)
        return await orig_get(self, key, *a, **k)

    def fetch(self, k, *a):  # every chunk file read goes through DirectArray.fetch
        keys.append(os.path.relpath(os.path.join(self.root, self.chunk_key(k)), root).replace(os.sep, "/"))
        return orig_fetch(self, k, *a)

    cls.get, DirectArray.fetch = get, fetch
    try:
        st.block(layout, b)
    finally:
        cls.get, DirectArray.fetch = orig_get, orig_fetch
    cl = st.backend.chunk_len(L.array_name(layout, L.INDICES))
    chunk_keys = sorted(k for k in keys if "/c/" in k)
    expect = sorted([f"{layout}/indptr/c/{k}" for k in range(s // cl, e // cl + 1)]
                    + [f"{layout}/{f}/c/{k}" for f in ("indices", "data") for k in range(lo // cl, (hi - 1) // cl + 1)])
    assert chunk_keys == expect
    assert len(expect) < 3 * (st.nnz // cl)  # far from the whole array


# -- property tests (in-memory backend) -------------------------------------------------------
@hst.composite
def sparse_problems(draw):
    n = draw(hst.integers(1, 25))
    d = draw(hst.integers(1, 25))
    if draw(hst.booleans()):
        n, d = draw(hst.sampled_from([(1, d), (n, 1), (1, 1)]))
    density = draw(hst.sampled_from([0.0, 0.05, 0.3, 1.0]))
    seed = draw(hst.integers(0, 2**31))
    kind = draw(hst.sampled_from(["binary", "multiclass", "regression"]))
    block_bytes = draw(hst.sampled_from([1, 24, 100, 1 << 20]))
    chunk_len = draw(hst.sampled_from([1, 3, 64]))
    dtype = draw(hst.sampled_from(["float32", "float64"]))
    return n, d, density, seed, kind, block_bytes, chunk_len, dtype


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sparse_problems())
def test_property_random_sparse(mem_name, problem):
    n, d, density, seed, kind, block_bytes, chunk_len, dtype = problem
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, random_state=rng, format="csr",
                  data_rvs=lambda k: rng.normal(size=k) * 10.0 ** rng.integers(-3, 4, size=k))
    y = {"binary": lambda: rng.choice([-2.0, 5.0], n),
         "multiclass": lambda: rng.integers(0, 4, n).astype(float),
         "regression": lambda: rng.normal(size=n) + 0.5}[kind]()
    st = convert(X, mem_name(), y=y, dtype=dtype, block_bytes=block_bytes, chunk_len=chunk_len,
                 memory="64KiB")
    # the label kind is inferred: regression draws may look binary for tiny n
    check_against(st, X, y, np.dtype(dtype))
    if block_bytes == 1:
        assert st.n_blocks(L.ROWS) == n and st.n_blocks(L.COLS) == d


def test_small_rows_keep_their_norm_next_to_large_ones(mem_name):
    # a chunk-wide running sum would cancel the tiny row's squared norm entirely
    X = sp.csr_matrix(np.array([[1e9, 1e9], [1e-3, 0.0], [0.0, 2e-4]]))
    st = convert(X, mem_name(), y=[1, -1, 1], dtype="float64")
    np.testing.assert_allclose(st.row_sqnorm, [2e18, 1e-6, 4e-8], rtol=1e-12)
    assert st.info()["row_norm_min"] == pytest.approx(2e-4)


def test_block_boundaries_never_exceed_budget():
    rng = np.random.default_rng(0)
    for _ in range(200):
        nnz = rng.integers(0, 50, size=rng.integers(0, 60)) * (rng.random() < 0.5 or 1)
        if len(nnz) and rng.random() < 0.3:
            nnz[rng.integers(len(nnz))] = 1000  # one line larger than the budget
        budget = int(rng.integers(8, 500))
        ptr = L.block_boundaries(nnz, 8, budget)
        assert ptr[0] == 0 and ptr[-1] == len(nnz) and np.all(np.diff(ptr) > 0) or len(nnz) == 0
        sizes = np.asarray(nnz, dtype=np.int64) * 8 + 8
        for a, b in zip(ptr[:-1], ptr[1:]):
            assert b - a == 1 or sizes[a:b].sum() <= budget
            if b < len(nnz):  # greedy: the next line would not have fit
                assert sizes[a:b + 1].sum() > budget


@settings(max_examples=50, deadline=None)
@given(hst.lists(hst.integers(0, 40), max_size=60), hst.integers(8, 400), hst.sampled_from([8, 12, 16]),
       hst.lists(hst.integers(0, 60), max_size=5), hst.booleans())
def test_streamed_row_blocks_match_block_boundaries(nnz, budget, entry, cuts, big):
    # the writer cuts row blocks as chunks stream in; the result must not depend on chunking
    nnz = np.array(nnz, dtype=np.int64)
    if big and len(nnz):
        nnz[len(nnz) // 2] = 1000
    c = L.BlockCutter(entry, budget)
    edges = [0] + sorted(min(x, len(nnz)) for x in cuts) + [len(nnz)]
    for a, b in zip(edges[:-1], edges[1:]):
        c.add(nnz[a:b])
    np.testing.assert_array_equal(c.finish(), L.block_boundaries(nnz, entry, budget))


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_read_labels_of_any_range_equals_the_labels(tmp_path, fmt):
    """read_labels keeps the chunks of the last range: every range, in any order, is still exact."""
    rng = np.random.default_rng(7)
    X = sp.random(3000, 20, density=0.2, format="csr", random_state=7)
    y = rng.normal(size=3000)
    st = ooc.convert(X, str(tmp_path / f"s.{'zarr' if fmt == 'zarr' else 'h5'}"), y=y, format=fmt,
                     label_kind="regression", dtype="float64", block_bytes=4000)
    cl = st.backend.chunk_len("labels")
    full = st.read_labels(0, st.n_rows)
    np.testing.assert_array_equal(full, y)
    edges = [0, 1, cl - 1, cl, cl + 1, 2 * cl - 3, st.n_rows - 5, st.n_rows]
    ranges = [(a, b) for a in edges for b in edges if a < b <= st.n_rows]
    ranges += [tuple(sorted(rng.integers(0, st.n_rows + 1, 2))) for _ in range(50)]
    for a, b in ranges:
        got = st.read_labels(int(a), int(b))
        np.testing.assert_array_equal(got, y[a:b])
        got[:] = 0  # a copy: the kept chunk is not changed by the caller
    np.testing.assert_array_equal(st.read_labels(0, st.n_rows), y)


@pytest.mark.parametrize("slice_lines", [1, 7, 1 << 20])
def test_training_blocks_are_cut_a_slice_of_lines_at_a_time(tmp_path, monkeypatch, slice_lines):
    """``Store.with_blocks`` reads a stored block's line counts a slice at a time (a stored column block
    of a 2^24-wide store is 128 MiB of counts): the cut is the same as :func:`block_boundaries` on all
    of them, however they are sliced."""
    import ooc.store.store as store_module

    rng = np.random.default_rng(3)
    X = sp.random(300, 500, density=0.05, random_state=3, format="csr")
    y = np.where(rng.random(300) < 0.5, 1.0, -1.0)
    st = convert(X, str(tmp_path / "s.zarr"), y=y, layout="both", block_bytes=64 << 10)
    monkeypatch.setattr(store_module, "CUT_SLICE", slice_lines)
    view = st.with_blocks(2048)
    entry = L.entry_bytes(st.dtype, st.index_dtype)
    for layout, name in ((L.ROWS, L.ROW_NNZ), (L.COLS, L.COL_NNZ)):
        ptr = st.block_ptr(layout)
        want = [np.zeros(1, np.int64)] + [
            L.block_boundaries(st.backend.read(name, int(s), int(e)), entry, 2048)[1:] + int(s)
            for s, e in zip(ptr[:-1], ptr[1:])]
        np.testing.assert_array_equal(view.block_ptr(layout), np.concatenate(want))
