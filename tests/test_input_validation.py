"""Malformed in-memory and .npz inputs: one line naming the file and the array, never a crash.

A corpus of broken inputs is generated here from a valid matrix (every way its arrays can
disagree, every dtype that is not a number, pickles, damaged archives), plus a seeded random
fuzz whose verdict comes from an independent oracle. Each must raise InputError (an .npz,
naming the file and the key) or ValueError (in memory, naming ``X.indptr``...), and through
``ooc convert`` exit 1 with one ``ooc: error:`` line, no traceback, nothing left at STORE.
Valid edge cases (empty rows, no nonzeros, unsorted and repeated ids, every scipy format)
convert to the same store as scipy's canonical form of the matrix.
"""

from __future__ import annotations

import gzip
import os
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

from ooc.cli import main as cli
from ooc.store import ingest
from ooc.store.backend import MemoryBackend
from ooc.store.ingest import check_matrix, check_sparse_structure, convert, load_npz
from ooc.store.readers import InputError
from ooc.store.store import open_store

N, D = 6, 5


def base_csr() -> sp.csr_matrix:
    """A valid 6 x 5 CSR matrix with an empty row and an empty last column."""
    dense = np.array([[1.0, 0, 2, 0, 0],
                      [0, 0, 0, 0, 0],
                      [0, 3, 0, 4, 0],
                      [5, 0, 0, 0, 0],
                      [0, 6, 7, 0, 0],
                      [8, 0, 0, 9, 0]])
    return sp.csr_matrix(dense)


Y = np.array([1.0, -1, 1, -1, 1, -1])


def csr_arrays(**changes) -> dict:
    """scipy save_npz's keys for the base matrix (plus ``y``), with ``changes`` (None deletes a key)."""
    m = base_csr()
    a = {"format": np.array(b"csr"), "shape": np.array([N, D]), "indptr": m.indptr.astype(np.int64),
         "indices": m.indices.astype(np.int64), "data": m.data.copy(), "y": Y.copy()}
    a.update(changes)
    return {k: v for k, v in a.items() if v is not None}


def coo_arrays(**changes) -> dict:
    m = base_csr().tocoo()
    a = {"format": np.array(b"coo"), "shape": np.array([N, D]), "row": m.row.astype(np.int64),
         "col": m.col.astype(np.int64), "data": m.data.copy(), "y": Y.copy()}
    a.update(changes)
    return {k: v for k, v in a.items() if v is not None}


def dense_arrays(**changes) -> dict:
    a = {"X": base_csr().toarray(), "y": Y.copy()}
    a.update(changes)
    return {k: v for k, v in a.items() if v is not None}


# (case id, arrays of the .npz, words the message must hold: the key first)
NPZ_CORPUS = [
    ("indptr-decreasing", csr_arrays(indptr=np.array([0, 2, 1, 4, 5, 7, 9])), ["'indptr'", "decreases", "row 1"]),
    ("indptr-decreasing-late", csr_arrays(indptr=np.array([0, 2, 2, 4, 5, 9, 7])), ["'indptr'", "decreases"]),
    ("indptr-start", csr_arrays(indptr=np.array([1, 2, 2, 4, 5, 7, 9])), ["'indptr'", "starts at 1"]),
    ("indptr-short", csr_arrays(indptr=np.array([0, 2, 2, 4, 5, 9])), ["'indptr'", "has 6 entries"]),
    ("indptr-long", csr_arrays(indptr=np.array([0, 2, 2, 4, 5, 7, 9, 9])), ["'indptr'", "entries"]),
    ("indptr-end-short", csr_arrays(indptr=np.array([0, 2, 2, 4, 5, 7, 8])), ["'indptr'", "ends at 8"]),
    ("indptr-end-beyond", csr_arrays(indptr=np.array([0, 2, 2, 4, 5, 7, 100])), ["'indptr'", "ends at 100"]),
    ("indptr-float", csr_arrays(indptr=np.array([0.0, 2, 2, 4, 5, 7, 9])), ["'indptr'", "integers"]),
    ("indptr-2d", csr_arrays(indptr=np.array([[0, 2, 2, 4, 5, 7, 9]])), ["'indptr'", "1-D"]),
    ("indices-too-large", csr_arrays(indices=np.array([0, 2, 1, 3, 0, 1, 2, 0, 5])), ["indices[8] = 5", "row 5"]),
    ("indices-negative", csr_arrays(indices=np.array([0, 2, 1, -3, 0, 1, 2, 0, 3])), ["indices[3] = -3"]),
    ("indices-huge", csr_arrays(indices=np.array([0, 2, 1, 3, 0, 1, 2, 0, 2**40])), ["indices[8]"]),
    ("indices-uint-huge", csr_arrays(indices=np.array([0, 2, 1, 3, 0, 1, 2, 0, 2**63], dtype=np.uint64)),
     ["indices[8]"]),
    ("indices-float", csr_arrays(indices=np.arange(9.0)), ["'indices'", "integers"]),
    ("indices-length", csr_arrays(indices=np.array([0, 2, 1, 3, 0, 1, 2, 0])), ["'indptr'", "'indices' has 8"]),
    ("data-length", csr_arrays(data=np.ones(8)), ["'data' 8"]),
    ("data-nan", csr_arrays(data=np.array([1, 2, 3, 4, 5, np.nan, 7, 8, 9.0])), ["'data'", "not finite", "X[4, 1]"]),
    ("data-inf", csr_arrays(data=np.array([1, 2, 3, 4, 5, 6, 7, 8, -np.inf])), ["'data'", "X[5, 3]"]),
    ("data-complex", csr_arrays(data=np.ones(9, dtype=complex)), ["'data'", "complex"]),
    ("data-strings", csr_arrays(data=np.array(list("abcdefghi"))), ["'data'", "strings"]),
    ("data-bytes", csr_arrays(data=np.array([b"a"] * 9)), ["'data'", "byte strings"]),
    ("data-records", csr_arrays(data=np.zeros(9, dtype=[("a", "f8")])), ["'data'", "structured"]),
    ("data-dates", csr_arrays(data=np.arange(9).astype("datetime64[D]")), ["'data'", "dates"]),
    ("data-2d", csr_arrays(data=np.ones((9, 1))), ["'data'", "1-D"]),
    ("shape-negative", csr_arrays(shape=np.array([6, -5])), ["'shape'", "[6, -5]"]),
    ("shape-float", csr_arrays(shape=np.array([6.0, 5.0])), ["'shape'"]),
    ("shape-three", csr_arrays(shape=np.array([6, 5, 1])), ["'shape'"]),
    ("shape-too-few-rows", csr_arrays(shape=np.array([4, 5])), ["'indptr'", "4 rows need 5"]),
    ("shape-too-few-cols", csr_arrays(shape=np.array([6, 3])), ["indices[", "3 columns"]),
    ("shape-absurd", csr_arrays(shape=np.array([6, 10**16])), ["'shape'", "columns"]),
    ("format-bsr", csr_arrays(format=np.array(b"bsr")), ["'format'", "'bsr'"]),
    ("format-unknown", csr_arrays(format=np.array("weird")), ["'format'", "'weird'"]),
    ("format-number", csr_arrays(format=np.array(3)), ["'format'"]),
    ("missing-indptr", csr_arrays(indptr=None), ["missing indptr"]),
    ("missing-shape", csr_arrays(shape=None), ["missing shape"]),
    ("missing-y", csr_arrays(y=None), ["'y'"]),
    ("no-matrix", {"y": Y}, ["'X'"]),
    ("y-short", csr_arrays(y=Y[:5]), ["'y'", "6 rows", "5 labels"]),
    ("y-2d", csr_arrays(y=np.ones((6, 2))), ["'y'", "1-D", "(6, 2)"]),
    ("y-nan", csr_arrays(y=np.array([1, 1, np.nan, 1, 1, 1.0])), ["'y'", "y[2]", "not finite"]),
    ("y-strings", csr_arrays(y=np.array(list("abcdef"))), ["'y'", "strings"]),
    ("y-complex", csr_arrays(y=Y.astype(complex)), ["'y'", "complex"]),
    ("labels-inf", {**csr_arrays(y=None), "labels": np.array([1, 1, 1, np.inf, 1, 1.0])}, ["'labels'", "labels[3]"]),
    ("coo-row-beyond", coo_arrays(row=np.array([0, 0, 2, 2, 3, 4, 4, 5, 6])), ["row[8] = 6"]),
    ("coo-col-negative", coo_arrays(col=np.array([0, 2, 1, 3, 0, 1, 2, 0, -1])), ["col[8] = -1"]),
    ("coo-length", coo_arrays(row=np.array([0, 0, 2])), ["'row'", "3 entries"]),
    ("coo-float-ids", coo_arrays(col=np.arange(9.0)), ["'col'", "integers"]),
    ("coo-nan", coo_arrays(data=np.array([1, 2, 3, np.nan, 5, 6, 7, 8, 9.0])), ["'data'", "not finite", "X[2, 3]"]),
    ("dense-1d", dense_arrays(X=np.ones(6)), ["'X'", "2-D", "(6,)"]),
    ("dense-3d", dense_arrays(X=np.ones((6, 5, 2))), ["'X'", "2-D", "(6, 5, 2)"]),
    ("dense-0d", dense_arrays(X=np.array(1.0)), ["'X'", "2-D"]),
    ("dense-strings", dense_arrays(X=np.full((6, 5), "x")), ["'X'", "strings"]),
    ("dense-complex", dense_arrays(X=np.ones((6, 5), dtype=complex)), ["'X'", "complex"]),
    ("dense-nan", dense_arrays(X=np.where(np.eye(6, 5) > 0, np.nan, 1.0)), ["'X'", "X[0, 0]", "not finite"]),
    ("dense-y-length", dense_arrays(y=np.ones(7)), ["'y'", "7 labels"]),
]


def write_npz(path, arrays):
    np.savez(path, **arrays)
    return str(path)


def check_one_line(exc: BaseException, *words):
    msg = str(exc)
    assert "\n" not in msg, msg
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


@pytest.fixture(params=[7, ingest._SCAN], ids=["scan7", "scan-default"])
def scan(request, monkeypatch):
    """Run the checks with pieces of 7 entries too: the chunked scans must find what lies across pieces."""
    monkeypatch.setattr(ingest, "_SCAN", request.param)
    return request.param


@pytest.mark.parametrize("case, arrays, words", NPZ_CORPUS, ids=[c[0] for c in NPZ_CORPUS])
def test_malformed_npz_raises_one_line_naming_file_and_key(tmp_path, scan, case, arrays, words):
    path = write_npz(tmp_path / f"{case}.npz", arrays)
    with pytest.raises(InputError) as e:
        convert(path, str(tmp_path / "s.zarr"))
    check_one_line(e.value, path, *words)
    assert e.value.path == path
    assert os.listdir(tmp_path) == [f"{case}.npz"]  # nothing written, not even a temporary


NOT_NPZ = [
    ("pickled-object-array", lambda p: np.savez(p, X=np.array([[1, None]] * 6, dtype=object), y=Y),
     ["'X'", "Python objects", "allow_pickle"]),
    ("pickled-labels", lambda p: np.savez(p, **csr_arrays(y=np.array([1, "a", None] * 2, dtype=object))),
     ["'y'", "Python objects"]),
    ("a-pickle", lambda p: open(p, "wb").write(pickle.dumps({"X": np.eye(3), "y": np.ones(3)})), ["not an .npz"]),
    ("an-npy", lambda p: open(p, "wb").write(_npy_bytes(np.eye(3))), ["one .npy array", "(3, 3)"]),
    ("text", lambda p: open(p, "w").write("1 1:2\n-1 2:1\n"), ["not an .npz"]),
    ("empty-file", lambda p: open(p, "wb").write(b""), ["cannot read"]),
    ("truncated-zip", lambda p: open(p, "wb").write(_npz_bytes(csr_arrays())[:300]), ["cannot read"]),
    ("gzipped-npz", lambda p: open(p, "wb").write(gzip.compress(_npz_bytes(csr_arrays()))), ["not an .npz"]),
    ("damaged-member", lambda p: open(p, "wb").write(_damage(_npz_bytes(csr_arrays()), b"indptr")), ["cannot be read"]),
]


def _npy_bytes(a) -> bytes:
    import io

    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def _npz_bytes(arrays, compressed=False) -> bytes:
    import io

    b = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(b, **arrays)
    return b.getvalue()


def _damage(content: bytes, key: bytes) -> bytes:
    """Flip bytes inside the stored member ``key``.npy (its CRC no longer matches)."""
    at = content.index(key + b".npy") + 200
    return content[:at] + bytes(x ^ 0xFF for x in content[at:at + 16]) + content[at + 16:]


@pytest.mark.parametrize("case, make, words", NOT_NPZ, ids=[c[0] for c in NOT_NPZ])
def test_pickles_and_damaged_archives_are_refused(tmp_path, case, make, words):
    path = str(tmp_path / f"{case}.npz")
    make(path)
    with pytest.raises(InputError) as e:
        load_npz(path)
    check_one_line(e.value, path, *words)


CLI_CASES = [c for c in NPZ_CORPUS if c[0] in ("indptr-decreasing", "indices-too-large", "data-nan", "dense-1d",
                                                   "y-short", "coo-row-beyond", "shape-absurd", "format-bsr")]


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
@pytest.mark.parametrize("case, arrays, words", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_convert_of_malformed_npz(tmp_path, case, arrays, words, fmt):
    path = write_npz(tmp_path / f"{case}.npz", arrays)
    store = str(tmp_path / ("S.zarr" if fmt == "zarr" else "S.h5"))
    r = CliRunner().invoke(cli, ["convert", path, store, "--format", fmt])
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ooc: error: "), r.stderr
    assert "Traceback" not in r.output
    check_one_line(lines[0], path, *words)
    assert not os.path.exists(store)
    assert os.listdir(tmp_path) == [f"{case}.npz"]


@pytest.mark.parametrize("make", [
    lambda p: np.savez(p, X=np.array([[1, None]] * 6, dtype=object), y=Y),
    lambda p: open(p, "wb").write(pickle.dumps([1, 2])),
], ids=["object-array", "pickle"])
def test_cli_convert_never_unpickles(tmp_path, make):
    path = str(tmp_path / "bad.npz")
    make(path)
    r = CliRunner().invoke(cli, ["convert", path, str(tmp_path / "S.zarr")])
    assert r.exit_code == 1 and r.stderr.startswith(f"ooc: error: {path}: ") and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1


# -- in memory: the same checks, naming X.indptr, X.indices, X.data, y -------------------------------
def crafted(fmt="csr", **attrs):
    """A scipy matrix of the base data whose arrays are then replaced (what a buggy producer makes)."""
    m = base_csr().asformat(fmt)
    for k, v in attrs.items():
        setattr(m, k, v)
    return m


MEMORY_CORPUS = [
    ("indptr-decreasing", crafted(indptr=np.array([0, 2, 1, 4, 5, 7, 9], dtype=np.int32)), ["X.indptr", "decreases"]),
    ("indptr-start", crafted(indptr=np.array([3, 3, 3, 4, 5, 7, 9], dtype=np.int32)), ["X.indptr", "starts at 3"]),
    ("indptr-end", crafted(indptr=np.array([0, 2, 2, 4, 5, 7, 70], dtype=np.int32)), ["X.indptr", "ends at 70"]),
    ("indices-beyond", crafted(indices=np.array([0, 2, 1, 3, 0, 1, 2, 0, 50], dtype=np.int32)),
     ["X.indices[8] = 50", "row 5"]),
    ("indices-negative", crafted(indices=np.array([-1, 2, 1, 3, 0, 1, 2, 0, 3], dtype=np.int32)),
     ["X.indices[0] = -1", "row 0"]),
    ("data-inf", crafted(data=np.array([1, 2, 3, 4, np.inf, 6, 7, 8, 9.0])), ["X.data", "X[3, 0]", "not finite"]),
    ("csc-indptr", crafted("csc", indptr=np.array([0, 3, 1, 5, 9, 9], dtype=np.int32)), ["X.indptr", "column 1"]),
    ("csc-indices", crafted("csc", indices=np.array([0, 3, 5, 2, 4, 9, 4, 2, 5], dtype=np.int32)),
     ["X.indices[5] = 9", "row id"]),
    ("coo-row", crafted("coo", row=np.array([0, 0, 2, 2, 3, 4, 4, 5, 60], dtype=np.int32)), ["X.row[8] = 60"]),
    ("coo-col", crafted("coo", col=np.array([0, 2, 1, 3, 0, 1, 2, 0, 5], dtype=np.int32)), ["X.col[8] = 5"]),
    ("bsr-indptr", crafted("bsr", indptr=np.array([0, 2, 1, 4, 5, 7, 9], dtype=np.int32)), ["X.indptr", "block row"]),
    ("sparse-1d", sp.coo_array(np.array([1.0, 0, 2])), ["X", "2-D", "(3,)"]),
    ("sparse-complex", sp.csr_matrix(np.eye(6, 5, dtype=complex)), ["X", "complex"]),
    ("dense-1d", np.ones(6), ["X", "2-D", "(6,)"]),
    ("dense-3d", np.ones((6, 5, 1)), ["X", "2-D", "(6, 5, 1)"]),
    ("dense-objects", np.array([[1, None, 2, 3, 4]] * 6, dtype=object), ["X", "Python objects"]),
    ("dense-strings", [["a"] * 5] * 6, ["X", "strings"]),
    ("ragged-lists", [[1, 2], [3]] * 3, ["X", "2-D array"]),
    ("dense-nan", np.where(np.eye(6, 5) > 0, np.nan, 1.0), ["X", "X[0, 0]", "not finite"]),
]


@pytest.mark.parametrize("case, X, words", MEMORY_CORPUS, ids=[c[0] for c in MEMORY_CORPUS])
def test_malformed_matrix_raises_one_line_naming_the_array(mem_name, scan, case, X, words):
    name = mem_name()
    with pytest.raises(ValueError) as e:
        convert(X, name, y=Y)
    check_one_line(e.value, *words)
    assert not MemoryBackend.detect(name)


@pytest.mark.parametrize("y, words", [
    (Y[:, None], ["y", "1-D", "y.ravel()"]),
    (Y[:4], ["6 rows", "4 labels"]),
    (np.array(["a", "b"] * 3), ["y", "strings"]),
    (np.array([1, None] * 3, dtype=object), ["y", "Python objects"]),
    (np.array([1, 1, 1, 1, 1, np.nan]), ["y[5]", "not finite"]),
    (Y + 0j, ["y", "complex"]),
], ids=["column", "short", "strings", "objects", "nan", "complex"])
def test_bad_labels_in_memory(mem_name, y, words):
    with pytest.raises(ValueError) as e:
        convert(base_csr(), mem_name(), y=y)
    check_one_line(e.value, *words)


def test_wrong_use_of_labels_with_a_file(tmp_path):
    p = tmp_path / "a.svm"
    p.write_text("1 1:1\n-1 2:1\n")
    with pytest.raises(ValueError, match="labels are read from the file"):
        convert(str(p), str(tmp_path / "s.zarr"), y=[1, -1])


# -- random fuzz with an independent oracle -----------------------------------------------------------
def oracle_valid(n, d, indptr, indices, data) -> bool:
    """CSR validity written plainly, without ooc's code."""
    if len(indptr) != n + 1 or indptr[0] != 0 or indptr[-1] != len(indices) or len(indices) != len(data):
        return False
    if any(indptr[i + 1] < indptr[i] for i in range(n)):
        return False
    return all(0 <= j < d for j in indices) and all(np.isfinite(data))


def canonical(m) -> sp.csr_matrix:
    c = sp.csr_matrix(m, copy=True)
    c.sum_duplicates()
    return c


def test_fuzzed_csr_arrays_convert_exactly_or_fail_cleanly(mem_name, monkeypatch):
    monkeypatch.setattr(ingest, "_SCAN", 5)
    rng = np.random.default_rng(2024)
    m = base_csr()
    outcomes = {"valid": 0, "refused": 0}
    for trial in range(150):
        indptr = m.indptr.astype(np.int64).copy()
        indices = m.indices.astype(np.int64).copy()
        data = m.data.copy()
        for _ in range(rng.integers(1, 3)):
            what = rng.integers(0, 6)
            if what == 0:
                indptr[rng.integers(0, len(indptr))] += rng.integers(-3, 4)
            elif what == 1:
                indices[rng.integers(0, len(indices))] = rng.integers(-2, D + 2)
            elif what == 2:
                data[rng.integers(0, len(data))] = rng.choice([np.nan, np.inf, -np.inf, 0.0, 1e300])
            elif what == 3:
                k = rng.integers(0, len(indices))
                indices, data = np.delete(indices, k), np.delete(data, k)
            elif what == 4:
                indices = rng.permutation(indices)  # unsorted, sometimes repeated within a row
            else:
                indices[rng.integers(0, len(indices))] = indices[rng.integers(0, len(indices))]
        valid = oracle_valid(N, D, indptr, indices, data)
        X = sp.csr_matrix((N, D))
        X.indptr, X.indices, X.data = indptr, indices, data  # bypass scipy's constructor checks
        name = mem_name()
        if not valid:
            with pytest.raises(ValueError) as e:
                convert(X, name, y=Y, dtype="float64")
            assert "\n" not in str(e.value) and str(e.value).startswith("X")
            assert not MemoryBackend.detect(name)
            outcomes["refused"] += 1
            continue
        before = (indptr.copy(), indices.copy(), data.copy())
        st = convert(X, name, y=Y, dtype="float64")
        ref = convert(canonical(sp.csr_matrix((data, indices, indptr), shape=(N, D))), mem_name(), y=Y,
                      dtype="float64")
        assert st.fingerprint == ref.fingerprint
        for a, b in zip(before, (X.indptr, X.indices, X.data)):
            assert np.array_equal(a, b)  # the caller's arrays are not touched
        outcomes["valid"] += 1
    assert outcomes["valid"] > 10 and outcomes["refused"] > 50, outcomes


# -- valid edge cases ---------------------------------------------------------------------------------
def read_rows(st):
    """The store's rows as a scipy CSR matrix and its labels."""
    from ooc.store import layout as L

    parts = [st.block(L.ROWS, b) for b in range(st.n_blocks(L.ROWS))]
    indptr = [0]
    for blk in parts:
        indptr.extend(indptr[-1] + np.asarray(blk.indptr[1:]) - blk.indptr[0])
    indices = np.concatenate([blk.indices for blk in parts])
    data = np.concatenate([blk.data for blk in parts])
    return sp.csr_matrix((data, indices, np.asarray(indptr)), shape=(st.n_rows, st.n_cols))


def unsorted_with_duplicates() -> sp.csr_matrix:
    # row 0: ids 3, 0, 3 (unsorted, 3 twice); row 1 empty; row 2: 4, 1, 1, 1
    X = sp.csr_matrix((N, D))
    X.indptr = np.array([0, 3, 3, 7, 7, 7, 8])
    X.indices = np.array([3, 0, 3, 4, 1, 1, 1, 2])
    X.data = np.array([1.0, 2, 3, 4, 5, 6, 7, 8])
    return X


def test_unsorted_and_repeated_ids_are_canonicalised_like_scipy(mem_name, tmp_path):
    X = unsorted_with_duplicates()
    want = canonical(X)
    assert want.nnz == 5
    ref = convert(want, mem_name(), y=Y, dtype="float64")
    got = convert(X, mem_name(), y=Y, dtype="float64")
    assert got.fingerprint == ref.fingerprint
    back = read_rows(got)
    assert np.array_equal(back.indptr, want.indptr) and np.array_equal(back.indices, want.indices)
    assert np.array_equal(back.data, want.data)
    assert np.array_equal(X.indices, [3, 0, 3, 4, 1, 1, 1, 2])  # the caller's matrix is unchanged
    # the same from an .npz, and as COO with repeated coordinates
    npz = write_npz(tmp_path / "u.npz", csr_arrays(indptr=X.indptr, indices=X.indices, data=X.data))
    assert convert(npz, mem_name(), dtype="float64").fingerprint == ref.fingerprint
    c = X.tocoo()
    coo = write_npz(tmp_path / "c.npz", coo_arrays(row=c.row, col=c.col, data=c.data))
    assert convert(coo, mem_name(), dtype="float64").fingerprint == ref.fingerprint


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "bsr", "lil", "dok", "dia"])
def test_every_scipy_format_gives_the_same_store(mem_name, fmt):
    m = base_csr()
    ref = convert(m, mem_name(), y=Y, dtype="float64")
    assert convert(m.asformat(fmt), mem_name(), y=Y, dtype="float64").fingerprint == ref.fingerprint
    assert convert(sp.csr_array(m).asformat(fmt), mem_name(), y=Y, dtype="float64").fingerprint == ref.fingerprint


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int8, np.uint64, bool])
def test_numeric_dtypes_convert(mem_name, dtype):
    dense = base_csr().toarray().astype(dtype)
    st = convert(dense, mem_name(), y=Y.astype(np.int64), dtype="float64")
    assert np.array_equal(read_rows(st).toarray(), dense.astype(np.float64))
    if dtype is not np.float16:  # scipy sparse has no float16
        assert convert(sp.csr_matrix(dense), mem_name(), y=Y, dtype="float64").fingerprint == st.fingerprint


def test_empty_rows_and_no_nonzeros(tmp_path, mem_name):
    empty = sp.csr_matrix((N, D))
    st = convert(empty, mem_name(), y=Y)
    assert (st.n_rows, st.n_cols, st.nnz) == (N, D, 0)
    npz = tmp_path / "e.npz"
    sp.save_npz(npz, empty)
    with np.load(npz) as z:
        arrays = dict(z)
    p = write_npz(tmp_path / "ey.npz", {**arrays, "y": Y})
    assert convert(p, mem_name()).fingerprint == st.fingerprint
    r = CliRunner().invoke(cli, ["convert", p, str(tmp_path / "e.zarr")])
    assert r.exit_code == 0, r.output
    assert open_store(tmp_path / "e.zarr").nnz == 0
    # a CSC .npz (scipy's save_npz of a csc matrix) with empty rows and columns
    sp.save_npz(tmp_path / "csc.npz", base_csr().tocsc())
    with np.load(tmp_path / "csc.npz") as z:
        p = write_npz(tmp_path / "cscy.npz", {**dict(z), "y": Y})
    assert convert(p, mem_name()).fingerprint == convert(base_csr(), mem_name(), y=Y).fingerprint


def test_chunks_split_by_entries_and_rows(mem_name):
    # many small chunks (64 KiB of entries, 1024 rows at most) give the store of one big chunk
    rng = np.random.default_rng(1)
    X = sp.random(5000, 40, density=0.3, random_state=rng, format="csr")
    y = np.sign(rng.normal(size=5000))
    rows = check_matrix(X)
    chunks = list(ingest.matrix_chunks(rows, y, 1 << 16, 1024))
    assert len(chunks) > 5
    assert sum(len(c.labels) for c in chunks) == 5000
    assert max(c.indptr[-1] for c in chunks) <= (1 << 16) // 16
    a = convert(X, mem_name(), y=y, memory="1MiB")
    b = convert(X, mem_name(), y=y, memory="1GiB")
    assert a.fingerprint == b.fingerprint


def test_check_sparse_structure_leaves_values_alone():
    X = base_csr()
    X.data[0] = np.nan  # values are the caller's (scikit-learn's) to check
    assert check_sparse_structure(X) == (N, D)
    X.indptr[2] = 99
    with pytest.raises(ValueError, match="X.indptr"):
        check_sparse_structure(X)


def test_estimators_check_sparse_structure_before_scipy(tmp_path):
    pytest.importorskip("sklearn")
    import ooc

    bad = crafted(indptr=np.array([0, 2, 1, 4, 5, 7, 9], dtype=np.int32))
    with pytest.raises(ValueError, match="X.indptr decreases"):
        ooc.LinearClassifier(l2=0.1, tol=1e-3).fit(bad, Y)
    bad_coo = crafted("coo", row=np.array([0, 0, 2, 2, 3, 4, 4, 5, 60], dtype=np.int32))
    with pytest.raises(ValueError, match=r"X.row\[8\] = 60"):
        ooc.LinearRegressor(l2=0.1, tol=1e-3).fit(bad_coo, Y)
    clf = ooc.LinearClassifier(l2=0.1, tol=1e-3).fit(base_csr(), Y)
    with pytest.raises(ValueError, match="X.indices"):
        clf.predict(crafted(indices=np.array([0, 2, 1, 3, 0, 1, 2, 0, 9], dtype=np.int32)))
    # a store path with more columns than fit saw is another feature space
    wide = str(tmp_path / "wide.zarr")
    convert(sp.hstack([base_csr(), sp.csr_matrix(np.ones((N, 2)))]).tocsr(), wide, y=Y)
    with pytest.raises(ValueError, match="7 features"):
        clf.predict(wide)


@pytest.fixture
def mem_name():
    made = []

    def make():
        made.append(f"memory://iv-{len(made)}-{os.getpid()}-{np.random.randint(1 << 30)}")
        return made[-1]

    yield make
    for name in made:
        if MemoryBackend.detect(name):
            MemoryBackend.delete(name)
