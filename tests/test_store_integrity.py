"""A damaged store is refused with one line, or read exactly as the intact one: never a different result.

Every file of a small store (Zarr: every chunk/shard file and every ``zarr.json``; HDF5:
the file) is deleted, truncated, and has one byte flipped at its start, middle and end
(two ways: the lowest bit, and all bits). Then the store is opened, every block,
label and statistic is read, and (when that worked) a model is trained: either a
:class:`~ooc.store.backend.StoreError` is raised, one line naming the store, or the
data read and the coefficients are exactly those of the intact store. Attribute edits
(a shape, a count, a dtype, a statistic, a deleted or added key) are refused through the
command line with one ``ooc: error:`` line naming the attribute, both for sealed stores
(the attribute digest names the key) and for stores written before digests (the
attributes are checked against the arrays).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

import ooc
from ooc.cli import main as cli
from ooc.store import layout as L
from ooc.store.backend import StoreCorruptError, StoreError
from ooc.store.chunk_files import direct_reader
from ooc.store.hdf5_backend import HDF5Backend
from ooc.store.store import open_store
from ooc.store.zarr_backend import ZarrBackend

ROWS, COLS = 2000, 50
FORMATS = {"zarr": ".zarr", "hdf5": ".h5"}
#: one training configuration for every case: the kernels compile once
TRAIN = {"l2": 1e-2, "max_epochs": 3, "checkpoint_every": 0, "seed": 1}
TRAIN_CLI = ["--l2", "1e-2", "--max-epochs", "3", "--checkpoint-every", "0", "--seed", "1"]
#: byte flips: the lowest bit (a digit becomes its neighbour: '4' -> '5'), and every bit
FLIPS = (0x01, 0xFF)


# -- helpers -------------------------------------------------------------------------------
def make_data():
    rng = np.random.default_rng(7)
    X = sp.random(ROWS, COLS, density=0.1, random_state=3, format="csr", dtype=np.float64)
    y = np.where(X @ rng.normal(size=COLS) + 0.1 * rng.normal(size=ROWS) > 0, 1.0, -1.0)
    return X, y


def read_everything(path) -> dict:
    """Everything training can read from the store at ``path``, as bytes (compared between cases)."""
    with open_store(path) as st:
        out = {"attrs": json.dumps(st.attrs, sort_keys=True)}
        for lay in st.layouts:
            for b in range(st.n_blocks(lay)):
                blk = st.block(lay, b)
                out[lay, b] = (blk.start, blk.stop, blk.indptr.tobytes(), blk.indices.tobytes(), blk.data.tobytes())
            grp = st.read_group(lay, range(st.n_blocks(lay)))
            out[lay, "group"] = (grp.indptr.tobytes(), grp.indices.tobytes(), grp.data.tobytes())
        blk, y = st.read_labeled_rows(range(st.n_blocks(L.ROWS)))
        out["labeled"] = (blk.data.tobytes(), y.tobytes())
        for name in (L.LABELS, L.ROW_NNZ, L.ROW_SQNORM, L.COL_NNZ, L.COL_SQNORM):
            out[name] = st.backend.read(name).tobytes()
        # but for the bytes on disk: a flipped setting of a codec (its level) can make a chunk file another size
        out["info"] = json.dumps({k: v for k, v in st.info().items() if k not in ("bytes_on_disk", "compression_ratio")},
                                 sort_keys=True, default=str)
    return out


def train_coef(path, out) -> np.ndarray:
    shutil.rmtree(out, ignore_errors=True)
    with pytest.warns(ooc.ConvergenceWarning):
        run = ooc.train(str(path), str(out), **TRAIN)
    return np.asarray(run.model.coef_)


def assert_one_line(exc: BaseException, path) -> str:
    msg = str(exc)
    assert isinstance(exc, StoreError), repr(exc)
    assert "\n" not in msg and msg.strip() == msg and msg, repr(msg)
    assert str(path) in msg, f"{msg!r} does not name the store"
    return msg


def outcome(path, intact, run_dir) -> str:
    """'refused' (one line naming the store) or 'same' (same data, same coefficients); fails otherwise."""
    try:
        got = read_everything(path)
    except StoreError as exc:
        assert_one_line(exc, path)
        return "refused"
    differs = [k for k in intact["content"] if got.get(k) != intact["content"][k]]
    assert not differs, f"the damaged store reads different data: {differs[:5]}"
    try:
        coef = train_coef(path, run_dir)
    except StoreError as exc:
        assert_one_line(exc, path)
        return "refused"
    assert np.array_equal(coef, intact["coef"]), "the damaged store trains different coefficients"
    return "same"


@contextlib.contextmanager
def damaged(file, how):
    """``file`` deleted (``how='delete'``), cut to half (``'truncate'``) or with one byte flipped
    (``(position, xor)``); restored on exit, so one intact store serves every case."""
    with open(file, "rb") as f:
        original = f.read()
    try:
        if how == "delete":
            os.remove(file)
        elif how == "truncate":
            os.truncate(file, len(original) // 2)
        else:
            pos, xor = how
            with open(file, "r+b") as f:
                f.seek(pos)
                f.write(bytes([original[pos] ^ xor]))
        yield
    finally:
        with open(file, "wb") as f:
            f.write(original)


def store_files(path) -> list[str]:
    if os.path.isfile(path):
        return [str(path)]
    return sorted(os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs)


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_line_error(r, *words) -> str:
    """The single ``ooc: error:`` line of a failed command, which names ``words``."""
    assert r.exit_code == 1, (r.exit_code, r.output, r.exception)
    assert "Traceback" not in r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ooc: error: "), r.stderr
    for w in words:
        assert str(w) in lines[0], f"{lines[0]!r} does not name {w!r}"
    return lines[0]


def edit_attrs(path, edit) -> None:
    """Apply ``edit(attrs)`` (in place) to the attributes of the store at ``path``, as a user editing the file would."""
    if os.path.isdir(path):
        meta = os.path.join(path, "zarr.json")
        with open(meta) as f:
            doc = json.load(f)
        edit(doc["attributes"])
        with open(meta, "w") as f:
            json.dump(doc, f, indent=2)
    else:
        with h5py.File(path, "r+") as f:
            attrs = json.loads(f.attrs["ooc"])
            edit(attrs)
            f.attrs["ooc"] = json.dumps(attrs)


def copy_store(src, dst) -> str:
    (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, dst)
    return str(dst)


# -- fixtures ------------------------------------------------------------------------------
@pytest.fixture(autouse=True, scope="module")
def _no_plots():
    """Trainings here draw no convergence plot: most of a small training's time, and nothing compared."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(importlib.import_module("ooc.train"), "plot_convergence", lambda rd: None)
        yield


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """The intact store of each backend, what it reads and the coefficients it trains."""
    root = tmp_path_factory.mktemp("integrity")
    X, y = make_data()
    out = {}
    for fmt, ext in FORMATS.items():
        path = str(root / f"intact{ext}")
        ooc.convert(X, path, y=y, block_bytes="16KiB", format=fmt).close()
        with open_store(path) as st:
            assert st.attrs[L.ALL_CHUNKS_WRITTEN] is True and L.ATTRS_DIGEST in st.attrs
            assert st.n_blocks(L.ROWS) >= 4 and st.n_blocks(L.COLS) >= 4
        out[fmt] = {"path": path, "root": root, "content": read_everything(path),
                    "coef": train_coef(path, root / f"ref-{fmt}")}
    np.testing.assert_array_equal(out["zarr"]["coef"], out["hdf5"]["coef"])
    return out


# -- every file: deleted, truncated, flipped -----------------------------------------------
@pytest.mark.parametrize("fmt,every", [(f, False) for f in FORMATS]
                         + [pytest.param(f, True, marks=pytest.mark.slow, id=f"{f}-every-flip") for f in FORMATS])
def test_every_damaged_file_is_refused_or_harmless(stores, fmt, every):
    """Every file deleted, truncated and flipped. The flips: at the start, middle and end, each
    both ways (``every``, marked slow: 30 s), or two of those six per file in turn, so that across
    the files every position and kind is met (the default suite)."""
    intact = stores[fmt]
    path = intact["path"]
    files = store_files(path)
    if fmt == "zarr":
        assert len(files) > 40 and sum(f.endswith("zarr.json") for f in files) >= 15
    results, runs = {}, 0
    for i, file in enumerate(files):
        size = os.path.getsize(file)
        flips = [(p, x) for p in sorted({0, size // 2, size - 1}) for x in FLIPS]
        if not every:
            flips = [flips[(2 * i) % len(flips)], flips[(2 * i + 1) % len(flips)]]
        cases = [("delete"), ("truncate")] + flips
        if fmt == "hdf5":  # one file: flip it in more places (superblock, object headers, chunk index, chunks)
            cases += [(p, x) for p in range(64, size, max(1, size // 48)) for x in FLIPS]
        for how in cases:
            with damaged(file, how):
                runs += 1
                got = outcome(path, intact, intact["root"] / f"case-{fmt}")
            results[os.path.relpath(file, path) if file != path else "file", how] = got
    same = sorted((k for k, v in results.items() if v == "same"), key=str)
    print(f"{fmt}: {len(results)} cases, {len(same)} harmless: {same}")
    for (rel, how), got in results.items():
        # Zarr opens an array by its own path: the metadata of the groups above it is never read
        if rel not in ("rows/zarr.json", "cols/zarr.json"):
            # every chunk and array metadata file is needed (none reads as zeros any more), and
            # checksums cover every chunk, shard index and HDF5 metadata block
            assert got == "refused" or (how not in ("delete", "truncate") and rel.endswith(("zarr.json", "file"))), \
                (rel, how)


def test_a_chunk_file_deleted_after_open_is_refused_by_name(stores, tmp_path):
    path = copy_store(stores["zarr"]["path"], tmp_path / "s.zarr")
    with open_store(path) as st:
        victim = os.path.join(path, "rows", "data", "c", "1")
        os.remove(victim)
        with pytest.raises(StoreCorruptError) as e:
            for b in range(st.n_blocks(L.ROWS)):
                st.block(L.ROWS, b)
        msg = assert_one_line(e.value, path)
        assert "'rows/data', chunk 1" in msg and victim in msg and "missing" in msg


def test_a_missing_chunk_file_is_named_at_open(stores, tmp_path):
    path = copy_store(stores["zarr"]["path"], tmp_path / "s.zarr")
    os.remove(os.path.join(path, "labels", "c", "1"))
    with pytest.raises(StoreCorruptError) as e:
        open_store(path)
    msg = assert_one_line(e.value, path)
    assert "'labels', chunk 1" in msg and "labels/c/1" in msg


def test_old_stores_keep_their_semantics(stores, tmp_path):
    """A store written before these checks (no digest, no every-chunk record) opens and trains as before;
    a chunk it lacks still reads as zeros (Zarr's fill value): what such a store meant."""
    path = copy_store(stores["zarr"]["path"], tmp_path / "old.zarr")

    def unseal(a):
        del a[L.ATTRS_DIGEST], a[L.ALL_CHUNKS_WRITTEN]
        a.pop(L.CHUNK_RECORDS, None)

    edit_attrs(path, unseal)
    os.remove(os.path.join(path, ".ooc-owned.json"))  # made before manifests (which check its zarr.json files)
    got = read_everything(path)
    assert all(got[k] == v for k, v in stores["zarr"]["content"].items() if k not in ("attrs", "info"))
    np.testing.assert_array_equal(train_coef(path, tmp_path / "run"), stores["zarr"]["coef"])
    os.remove(os.path.join(path, "row_sqnorm", "c", "1"))
    with open_store(path) as st:
        assert not st.row_sqnorm[1024:].any()


# -- what Zarr writes ----------------------------------------------------------------------
def test_zarr_writes_every_chunk_of_an_all_zero_array(tmp_path):
    """With ``write_empty_chunks``, an all-zero array of several shards gets every shard file, and no inner
    chunk holding an element of the array is marked empty (only those past the end of the last shard)."""
    be = ZarrBackend.create(str(tmp_path / "z.zarr"))
    chunk_len, n = 1024, 3000
    be.create_array("zeros", np.int64, chunk_len, n)
    be.write("zeros", 0, np.zeros(n, dtype=np.int64))
    files = sorted(os.listdir(tmp_path / "z.zarr" / "zeros" / "c"))
    assert files == ["0", "1", "2"]
    inner = L.inner_chunk_len(chunk_len)
    for k in range(3):
        raw = (tmp_path / "z.zarr" / "zeros" / "c" / str(k)).read_bytes()
        index = np.frombuffer(raw[-(16 * (chunk_len // inner) + 4):-4], dtype="<u8").reshape(-1, 2)
        empty = np.flatnonzero(index[:, 0] == 2**64 - 1)
        starts = k * chunk_len + empty * inner
        assert np.all(starts >= n), (k, empty)
    be.require_every_chunk()
    be.check_chunks("zeros")
    assert not be.read("zeros").any()
    arr = direct_reader(be._array("zeros"), every_chunk=True)
    assert arr is not None and not arr.read(0, n).any()


def test_hdf5_refuses_an_unallocated_chunk(tmp_path):
    be = HDF5Backend.create(str(tmp_path / "h.h5"))
    be.create_array("x", np.int64, 100, 300)
    be.write("x", 0, np.arange(100))
    be.write("x", 200, np.arange(100))
    be.check_chunks("x")  # lenient until told: a store written before every chunk was
    be.require_every_chunk()
    with pytest.raises(StoreCorruptError, match=r"'x', chunk 1 \(elements 100..199\)"):
        be.check_chunks("x")
    be.close()


# -- attributes ----------------------------------------------------------------------------
def _set(key, value):
    def edit(a):
        a[key] = value(a) if callable(value) else value
    return edit


def _delete(key):
    def edit(a):
        del a[key]
    return edit


def _scale_stat(a):
    a["stats"]["R"] = a["stats"]["R"] * (1 + 1e-12)


def _shrink_shape(a):
    a["shape"] = [a["shape"][0] - 1, a["shape"][1]]


#: (attribute named in the error, edit)
SEALED_EDITS = [
    ("shape", _shrink_shape),
    ("nnz", _set("nnz", lambda a: a["nnz"] + 1)),
    ("dtype", _set("dtype", "float64")),
    ("stats", _scale_stat),
    ("label_kind", _delete("label_kind")),
    ("fingerprint", _delete("fingerprint")),
    ("label_counts", _delete("label_counts")),
    (L.ATTRS_DIGEST, _delete(L.ATTRS_DIGEST)),
    (L.ALL_CHUNKS_WRITTEN, _delete(L.ALL_CHUNKS_WRITTEN)),
    ("factor", _set("factor", {"k": 2, "blocks": 1})),
    ("format_version", _set("format_version", 2)),
    ("complete", _set("complete", False)),
]
#: the same kind of edits on a store without a digest: the attributes are checked against the arrays
UNSEALED_EDITS = [
    ("shape", _shrink_shape),
    ("nnz", _set("nnz", lambda a: a["nnz"] + 1)),
    ("dtype", _set("dtype", "float64")),
    ("index_dtype", _set("index_dtype", "int64")),
    ("layouts", _set("layouts", ["rows", "sideways"])),
    ("classes", _set("label_kind", "regression")),
    ("label_counts", _set("label_counts", {"-1.0": 1, "1.0": 2})),
    ("nnz", _delete("nnz")),
    ("block_bytes", _delete("block_bytes")),
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "unsealed"])
def test_edited_attributes_are_refused_naming_the_key(stores, tmp_path, fmt, sealed):
    edits = SEALED_EDITS if sealed else UNSEALED_EDITS
    for i, (key, edit) in enumerate(edits):
        path = copy_store(stores[fmt]["path"], tmp_path / f"s{i}{FORMATS[fmt]}")
        if not sealed:
            edit_attrs(path, _delete(L.ATTRS_DIGEST))
            edit_attrs(path, _delete(L.ALL_CHUNKS_WRITTEN))
            edit_attrs(path, lambda a: a.pop(L.CHUNK_RECORDS, None))
            if os.path.isdir(path):  # made before manifests (which check its zarr.json files)
                os.remove(os.path.join(path, ".ooc-owned.json"))
            with open_store(path):  # an unsealed store opens
                pass
        edit_attrs(path, edit)
        for cmd in (["info", path], ["train", path, "--out", tmp_path / f"run{i}", *TRAIN_CLI]):
            line = one_line_error(invoke(*cmd), repr(key), path)
            assert "attribute" in line, line
        with pytest.raises(StoreError) as e:
            open_store(path)
        assert_one_line(e.value, path)


def test_a_factorized_store_is_sealed_again(tmp_path):
    from ooc.store.factorize import convert_factorized

    X, y = make_data()
    path = str(tmp_path / "f.zarr")
    convert_factorized(X[:300], path, 2, y=y[:300], block_bytes="16KiB").close()
    with open_store(path) as st:
        assert st.attrs["factor"]["k"] == 2
    edit_attrs(path, lambda a: a["factor"].update(R=a["factor"]["R"] * 2))
    line = one_line_error(invoke("info", path), "'factor'", path)
    assert "digest" in line


def test_hdf5_attributes_are_fixed_length_bytes(stores, tmp_path):
    """Not a variable-length string: those live in HDF5's global heap, which has no checksum (a flipped
    byte of an object's size there made reading the attributes hang). Stores written so still read."""
    path = stores["hdf5"]["path"]
    with h5py.File(path, "r") as f:
        assert f.attrs.get_id("ooc").dtype.kind == "S"
    old = copy_store(path, tmp_path / "old.h5")
    with h5py.File(old, "r+") as f:
        f.attrs["ooc"] = f.attrs["ooc"].decode()
        assert h5py.check_string_dtype(f.attrs.get_id("ooc").dtype).length is None
    with open_store(old) as st, open_store(path) as ref:
        assert st.attrs == ref.attrs


def test_damaged_hdf5_metadata_is_one_line(stores, tmp_path):
    """h5py's errors on a damaged file (OSError, KeyError, RuntimeError... by where the damage is) end as one line."""
    path = copy_store(stores["hdf5"]["path"], tmp_path / "s.h5")
    with damaged(path, "truncate"):
        line = one_line_error(invoke("info", path), path)
        assert "HDF5" in line
    for pos in (0, 100, 1000):
        with damaged(path, (pos, 0xFF)):
            one_line_error(invoke("train", path, "--out", tmp_path / f"run{pos}", *TRAIN_CLI), path)
