"""``ooc convert --threads``: text parsed on several threads makes the same store, byte for byte."""

import os

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.datasets import load_svmlight_file

from ooc.cli import main
from ooc.store import readers
from ooc.store.ingest import convert


def _files(root):
    """Every file's bytes, but the ownership manifest's: it holds a random token of the conversion (a shard of
    another conversion is refused by it), so two conversions never write the same manifest."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            if n == ".ooc-owned.json":
                continue
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


@pytest.fixture
def svm_file(tmp_path):
    rng = np.random.default_rng(0)
    lines = []
    for r in range(3000):
        # feature 1 in every row: a column bigger than a block (streamed alone when transposing)
        ids = np.unique(np.r_[1, rng.integers(2, 500, size=rng.integers(0, 12))])
        feats = " ".join(f"{i}:{v:.5g}" for i, v in zip(ids, rng.standard_normal(len(ids))))
        lines.append(f"{rng.choice([-1, 1])} {feats}".rstrip() + ("  # c" if r % 97 == 0 else ""))
    p = tmp_path / "d.svm"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_store_bytes_do_not_depend_on_threads(svm_file, tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "MIN_PIECE_BYTES", 1)  # the small file really is cut over threads
    stores = {}
    for threads in (1, 2, 3):
        out = str(tmp_path / f"t{threads}.zarr")
        # small blocks: many row blocks, column blocks and bucket pieces to hand between threads
        st = convert(str(svm_file), out, memory="64MiB", threads=threads, chunk_len=1024, block_bytes=8192)
        stores[threads] = (st.fingerprint, _files(out))
    assert stores[1][0] == stores[2][0] == stores[3][0]
    assert stores[1][1] == stores[2][1] == stores[3][1]
    X, y = load_svmlight_file(str(svm_file), zero_based=False, n_features=st.n_cols)
    Xs = st.to_scipy("rows")
    np.testing.assert_array_equal(Xs.indptr, X.indptr)
    np.testing.assert_array_equal(Xs.indices, X.indices)
    np.testing.assert_array_equal(Xs.data, X.data.astype(np.float32))
    Xc, Xr = st.to_scipy("cols"), X.astype(np.float32).tocsc()
    np.testing.assert_array_equal(Xc.indptr, Xr.indptr)
    np.testing.assert_array_equal(Xc.indices, Xr.indices)
    np.testing.assert_array_equal(Xc.data, Xr.data)


def test_cli_threads_option(svm_file, tmp_path):
    r = CliRunner().invoke(main, ["convert", str(svm_file), str(tmp_path / "s.zarr"), "--threads", "2"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["convert", str(svm_file), str(tmp_path / "b.zarr"), "--threads", "-1"])
    assert r.exit_code != 0 and "--threads" in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize("index_dtype,value_dtype", [(np.int32, np.float32), (np.int64, np.float64),
                                                     (np.int32, np.float64)])
def test_cast_entries_is_numpys_astype(index_dtype, value_dtype):
    from ooc.kernels.entries import cast_entries

    rng = np.random.default_rng(3)
    ind = rng.integers(0, 2**40, size=5000)
    vals = rng.standard_normal(5000) * 10.0 ** rng.integers(-45, 45, size=5000)
    vals[[7, 11]] = [3.4028235677973366e38, 1.5e39]  # float32: rounds to its largest / overflows
    for shift in (0, 1):
        oi, od = np.empty(5000, index_dtype), np.empty(5000, value_dtype)
        lo, hi, bad = cast_entries(ind, vals, shift, oi, od)
        assert (lo, hi) == (ind.min(), ind.max())
        np.testing.assert_array_equal(oi, (ind - shift).astype(index_dtype))
        with np.errstate(over="ignore"):
            ref = vals.astype(value_dtype)
        np.testing.assert_array_equal(od.view(np.uint8), ref.view(np.uint8))
        nonfinite = np.flatnonzero(~np.isfinite(ref))
        assert bad == (nonfinite[0] if len(nonfinite) else -1)
    assert cast_entries(ind[:0], vals[:0], 1, oi[:0], od[:0]) == (0, -1, -1)


@pytest.mark.parametrize("shift", [0, 2, 4, 12])
def test_grouping_then_ordering_in_parts_is_a_stable_sort(shift):
    from ooc.kernels.transpose import group_entries, order_groups

    rng = np.random.default_rng(5)
    rec = np.dtype([("col", np.int32), ("row", np.int32), ("val", np.float32)])
    n, ncols, col0 = 3000, 40, 100
    recs = np.empty(n, rec)
    recs["col"] = col0 + rng.integers(0, ncols, n)
    recs["row"] = np.sort(rng.integers(0, 10**6, n))  # bucketed in row order
    recs["val"] = rng.standard_normal(n)
    ptr = np.concatenate(([0], np.cumsum(np.bincount(recs["col"] - col0, minlength=ncols))))
    order = np.argsort(recs["col"], kind="stable")  # the reference: a stable sort by column
    rows, vals, low = np.empty(n, np.int32), np.empty(n, np.float32), np.empty(n, np.uint16)
    assert group_entries(recs, col0, ptr, shift, rows, vals, low)
    n_groups = -(-ncols // (1 << shift))
    for cuts in ([0, n_groups], [0, n_groups // 2, n_groups], sorted({0, 1, min(2, n_groups), n_groups})):
        out_r, out_v = np.full(n, -1, np.int32), np.full(n, np.nan, np.float32)
        assert all(order_groups(ptr, shift, rows, vals, low, out_r, out_v, a, b) for a, b in zip(cuts[:-1], cuts[1:]))
        np.testing.assert_array_equal(out_r, recs["row"][order])
        np.testing.assert_array_equal(out_v, recs["val"][order])
    bad = recs.copy()
    bad["col"][-1] = col0 + (bad["col"][-1] - col0 + 1) % ncols  # one entry in the wrong column
    ok = group_entries(bad, col0, ptr, shift, rows, vals, low)
    assert not (ok and order_groups(ptr, shift, rows, vals, low, out_r, out_v, 0, n_groups))


def test_hdf5_store_does_not_depend_on_threads(svm_file, tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "MIN_PIECE_BYTES", 1)
    got = []
    for threads in (1, 2):
        st = convert(str(svm_file), str(tmp_path / f"t{threads}.h5"), format="hdf5", memory="64MiB",
                     threads=threads, chunk_len=1024, block_bytes=8192)
        rows, cols = st.to_scipy("rows"), st.to_scipy("cols")
        info = {k: v for k, v in st.info().items() if k not in ("path", "bytes_on_disk")}
        got.append((st.fingerprint, info, rows.indptr.tobytes(), rows.indices.tobytes(), rows.data.tobytes(),
                    cols.indptr.tobytes(), cols.indices.tobytes(), cols.data.tobytes(), st.labels.tobytes()))
    assert got[0] == got[1]


def test_vw_on_threads_gives_the_same_chunks_and_errors(tmp_path, monkeypatch):
    from ooc.store.readers import InputError, iter_vw

    monkeypatch.setattr(readers, "MIN_PIECE_BYTES", 1)
    rng = np.random.default_rng(8)
    lines = []
    for r in range(400):
        weight = f" {rng.choice([0.5, 1, 2])}" if r % 3 else ""
        feats = " ".join(f"f{rng.integers(0, 50)}:{rng.standard_normal():.3g}" for _ in range(rng.integers(1, 6)))
        lines.append(f"{rng.choice([-1, 1])}{weight} |ns {feats}" + ("\n" if r % 50 == 0 else ""))
    p = tmp_path / "d.vw"
    p.write_text("\n".join(lines) + "\n")

    def arrays(chunks):
        return [(c.labels.tobytes(), c.indptr.tobytes(), c.indices.tobytes(), c.data.tobytes(), c.first_line,
                 None if c.weights is None else c.weights.tobytes()) for c in chunks]

    for chunk_bytes in (300, 1 << 20):
        one = arrays(iter_vw(p, chunk_bytes=chunk_bytes, hash_bits=12, threads=1))
        assert arrays(iter_vw(p, chunk_bytes=chunk_bytes, hash_bits=12, threads=3)) == one
        assert any(w is not None for *_, w in one)
    bad = tmp_path / "bad.vw"
    text = p.read_text()
    bad.write_text(text + "1 |a x:1.5y\n")
    with pytest.raises(InputError, match="bad value") as ei:
        list(iter_vw(bad, hash_bits=12, threads=3))
    assert (ei.value.line, ei.value.column) == (text.count("\n") + 1, 8)


def test_column_layout_does_not_depend_on_the_transposes_memory(svm_file, tmp_path):
    """The transpose buckets and assembles column ranges cut from --memory (the store's column blocks
    from --block-bytes): the column arrays are the same whatever the memory."""
    stores = [convert(str(svm_file), str(tmp_path / f"m{k}.zarr"), memory=mem, block_bytes=1 << 14)
              for k, mem in enumerate(("64MiB", 1 << 18, 1 << 16))]
    files = [{k: v for k, v in _files(st.path).items() if k.startswith("cols")} for st in stores]
    assert files[0] == files[1] == files[2]


def test_numba_is_loaded_before_the_memory_is_planned(svm_file, tmp_path):
    """A whole-process --memory counts what loading Numba adds (~60 MiB): the budget is read after it."""
    import json
    import subprocess
    import sys

    code = f"""
import json
from ooc.kernels import entries
from ooc.store import ingest
seen = []
plan = ingest.command_budget
ingest.command_budget = lambda *a, **k: seen.append(len(entries.cast_entries.signatures)) or plan(*a, **k)
ingest.convert({str(svm_file)!r}, {str(tmp_path / "n.zarr")!r})
print(json.dumps(seen))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert seen and seen[0] > 0
