"""A store records how its input was read (its recipe); every later reader of new input follows it.

Invariants (docs/formats.rst, "Input recipe"):

- ``ooc append STORE INPUT`` reads INPUT exactly as STORE's input was read: appending the very
  file STORE was converted from gives twice STORE's rows, whatever the format and its options
  (svmlight 0- or 1-based, VW and raw text with any ``--hash-bits``, CSV with a weight column);
  ``ooc predict RUN INPUT`` on that file gives what it gives on STORE (the same margins).
- An option passed to append/predict/evaluate that differs from the recipe is refused with one line
  naming the option and the recorded value; one that agrees is accepted. ``--index-base`` is the
  exception: it says how the new svmlight file numbers its features (same columns), and a file whose
  ids contradict the base it is read with is refused naming the index base.
- The index base of svmlight input is an option (``--index-base``), printed by convert and info, with
  whether it was guessed.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ooc
from ooc.cli import main
from ooc.model import LinearModel

WORDS = ["good", "bad", "film", "plot", "actor", "dull", "great", "x_1", "été"]


def run_cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=True)


def ok(*args):
    r = run_cli(*args)
    assert r.exit_code == 0, (args, r.stdout, r.stderr, r.exception)
    return r


def one_line_error(r) -> str:
    assert r.exit_code == 1, (r.stdout, r.exception)
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("ooc: error: "), r.stderr
    return err[0]


@st.composite
def inputs(draw):
    """(file name, text, convert options, recorded options that may be passed again)."""
    kind = draw(st.sampled_from(["svmlight", "vw", "text", "csv"]))
    n = draw(st.integers(2, 5))
    labels = draw(st.lists(st.sampled_from([0, 1]), min_size=n, max_size=n).filter(lambda v: len(set(v)) == 2))
    if kind == "svmlight":
        base = draw(st.sampled_from([0, 1]))
        d = draw(st.integers(2, 9))
        rows = []
        for y in labels:
            ids = sorted(draw(st.sets(st.integers(base + 1, base + d), min_size=1, max_size=3)))
            rows.append(f"{y} " + " ".join(f"{j}:{draw(st.integers(1, 9))}" for j in ids))
        # feature 0 of a 0-based file never occurs: only --index-base 0 reads it right
        return "in.svm", "\n".join(rows) + "\n", ["--index-base", str(base)], {"--index-base": str(base)}
    if kind == "vw":
        bits = draw(st.integers(4, 14))
        rows = [f"{2 * y - 1} |{draw(st.sampled_from('fgh'))} " + " ".join(draw(st.lists(st.sampled_from(WORDS),
                                                                                          min_size=1, max_size=4)))
                for y in labels]
        return "in.vw", "\n".join(rows) + "\n", ["--hash-bits", str(bits)], {"--hash-bits": str(bits)}
    if kind == "text":
        bits = draw(st.integers(4, 14))
        named = draw(st.booleans())
        head = "review\tlabel\n" if named else ""
        rows = [" ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=5))) + f"\t{y}" for y in labels]
        spec = "label:review" if named else "1:0"
        return "in.tsv", head + "\n".join(rows) + "\n", ["--text", spec, "--hash-bits", str(bits)], \
            {"--text": spec, "--hash-bits": str(bits)}
    width = draw(st.integers(1, 4))
    wcol = draw(st.sampled_from([None, -1, 1]))
    rows = []
    for y in labels:
        cells = [str(y)] + [str(draw(st.integers(0, 5))) for _ in range(width)]
        if wcol is not None:
            cells.insert(wcol if wcol >= 0 else len(cells), str(draw(st.integers(1, 4))))
        rows.append(",".join(cells))
    opts = [] if wcol is None else ["--weight-column", str(wcol)]
    return "in.csv", "\n".join(rows) + "\n", opts, dict(zip(opts[::2], opts[1::2]))


def _rows(path):
    with ooc.open_store(path) as s:
        blocks = [s.block("rows", b) for b in range(s.n_blocks("rows"))]
        y = s.read_labels(0, s.n_rows)
        w = s.read_weights(0, s.n_rows)
        dense = np.zeros((s.n_rows, s.n_cols))
        for blk in blocks:
            for i in range(blk.stop - blk.start):
                lo, hi = blk.indptr[i], blk.indptr[i + 1]
                dense[blk.start + i, blk.indices[lo:hi]] = blk.data[lo:hi]
    return dense, y, w


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=inputs())
def test_append_reads_new_input_as_the_store_did(tmp_path_factory, case):
    name, text, convert_opts, recorded = case
    d = tmp_path_factory.mktemp("recipe")
    src = d / name
    src.write_text(text, encoding="utf-8")
    ok("convert", src, d / "s.zarr", *convert_opts)
    ok("append", d / "s.zarr", src, "--out", d / "g.zarr")
    A, ya, wa = _rows(d / "s.zarr")
    G, yg, wg = _rows(d / "g.zarr")
    assert G.shape == (2 * A.shape[0], A.shape[1])
    np.testing.assert_array_equal(G, np.vstack([A, A]))
    np.testing.assert_array_equal(yg, np.concatenate([ya, ya]))
    if wa is not None:
        np.testing.assert_array_equal(wg, np.concatenate([wa, wa]))
    # predict reads the file as the store was read: the same margins as on the store itself
    with ooc.open_store(str(d / "s.zarr")) as s:
        meta = {"input_recipe": s.attrs["input_recipe"], "index_base": s.attrs["index_base"], "store": s.path}
        coef = np.random.default_rng(len(text)).normal(size=s.n_cols)
        LinearModel(coef, 0.25, s.label_values, "squared", "regression", meta).save(str(d / "model"))
    on_file = ok("predict", d / "model", src).stdout.split()
    on_store = ok("predict", d / "model", d / "s.zarr").stdout.split()
    assert on_file == on_store and len(on_file) == A.shape[0]
    # the options recorded may be passed again; any other value is refused by name
    ok("append", d / "s.zarr", src, "--out", d / "g2.zarr", *[x for kv in recorded.items() for x in kv])
    for option, value in recorded.items():
        other = {"--index-base": lambda v: str(1 - int(v)), "--hash-bits": lambda v: str(int(v) % 14 + 1),
                 "--text": lambda v: "0:2", "--weight-column": lambda v: "2"}[option](value)
        r = run_cli("append", d / "s.zarr", src, "--out", d / "g3.zarr", option, other)
        if option == "--index-base" and r.exit_code == 0:
            # ids that fit either base (no id 0, none past the store): read as the user said, column = id - base
            G3, _, _ = _rows(d / "g3.zarr")
            shift = int(value) - int(other)
            assert G3.shape == (2 * A.shape[0], A.shape[1]) and shift == -1
            np.testing.assert_array_equal(G3[A.shape[0]:, :-1], A[:, 1:])
            assert not A[:, 0].any() and not G3[A.shape[0]:, -1].any()
            continue
        line = one_line_error(r)
        if option == "--index-base":
            # the file read the other way: its ids contradict the base (an id 0 read 1-based), or would widen
            # the store; the refusal names the index base, never a silently shifted store
            assert "--index-base" in line and ("looks" in line or "--widen" in line), line
        else:
            assert f"{option} {other}" in line and f"{option} {value}" in line
    # an option the recipe has no use for is refused too
    if "--hash-bits" not in recorded:
        assert "--hash-bits" in one_line_error(run_cli("append", d / "s.zarr", src, "--out", d / "g4.zarr",
                                                       "--hash-bits", "5"))


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("text")
    src = d / "train.csv"
    rng = np.random.default_rng(0)
    lines = ["label,review"]
    for _ in range(40):
        y = int(rng.integers(0, 2))
        words = rng.choice(["great", "fine", "loved"] if y else ["dull", "bad", "boring"], 3).tolist()
        lines.append(f"{y},{' '.join(words)} film")
    src.write_text("\n".join(lines) + "\n")
    ok("convert", src, d / "t.zarr", "--text", "label:review", "--hash-bits", "10")
    ok("train", d / "t.zarr", "--out", d / "run", "--l2", "0.01", "--tol", "1e-3")
    return d


def test_a_model_trained_on_raw_text_predicts_raw_text(text_run):
    d = text_run
    on_file = ok("predict", d / "run", d / "train.csv").stdout.split()
    on_store = ok("predict", d / "run", d / "t.zarr").stdout.split()
    assert on_file == on_store and len(on_file) == 40
    # columns found by name, in any order, in another file
    other = d / "other.csv"
    other.write_text("review,label\nloved it great film,1\nboring bad film,0\n")
    assert ok("predict", d / "run", other).stdout.split() == ["1", "0"]
    m = json.loads(ok("evaluate", d / "run", d / "train.csv", "--json").stdout.splitlines()[-1])
    assert m["accuracy"] > 0.9
    line = one_line_error(run_cli("evaluate", d / "run", d / "train.csv", "--hash-bits", "18"))
    assert "--hash-bits 18" in line and "--hash-bits 10" in line


def test_vw_hash_bits_follow_the_store(tmp_path):
    src = tmp_path / "a.vw"
    src.write_text("1 |f a b c\n-1 |f d e\n1 |g a:2\n")
    ok("convert", src, tmp_path / "v.zarr", "--hash-bits", "12")
    r = ok("append", tmp_path / "v.zarr", src, "--out", tmp_path / "g.zarr")
    assert "x 4096 cols" in r.stdout
    line = one_line_error(run_cli("append", tmp_path / "v.zarr", src, "--out", tmp_path / "h.zarr", "--hash-bits",
                                  "18"))
    assert "--hash-bits 18" in line and "--hash-bits 12" in line and "v.zarr" in line


def test_a_store_read_another_way_is_refused(tmp_path):
    src = tmp_path / "a.svm"
    src.write_text("1 2:1 3:0.5\n0 1:1 5:2\n")
    ok("convert", src, tmp_path / "one.zarr", "--n-features", "6")
    ok("convert", src, tmp_path / "zero.zarr", "--index-base", "0")
    ok("train", tmp_path / "one.zarr", "--out", tmp_path / "run", "--max-epochs", "2")
    line = one_line_error(run_cli("predict", tmp_path / "run", tmp_path / "zero.zarr"))
    assert "zero.zarr" in line and "index base 0" in line


@pytest.mark.parametrize("option", [["--index-base", "auto"], ["--index-base", "0"], ["--index-base", "1"], []])
def test_index_base_is_an_option_and_is_printed(tmp_path, option):
    # scikit-learn's dump_svmlight_file writes 0-based ids; feature 0 never occurs here
    src = tmp_path / "zero.svm"
    src.write_text("1 1:1 63:2\n0 2:1\n")
    r = ok("convert", src, tmp_path / "s.zarr", *option)
    info = json.loads(ok("info", tmp_path / "s.zarr", "--json").stdout.splitlines()[-1])
    text = ok("info", tmp_path / "s.zarr").stdout
    base = 0 if option[1:] == ["0"] else 1
    assert info["n_cols"] == 64 - base
    assert info["index_base"] == base and info["input_recipe"]["index_base"] == base
    guessed = option[1:] in ([], ["auto"])
    assert info["index_base_guessed"] is guessed
    for out in (r.stdout, text):
        assert f"index base {base}" in out
        assert ("guessed" in out) is guessed
        assert ("--index-base 0" in out) is guessed  # the way out of a wrong guess


def test_index_base_contradicting_zero_based_is_refused(tmp_path):
    src = tmp_path / "a.svm"
    src.write_text("1 1:1\n0 2:1\n")
    line = one_line_error(run_cli("convert", src, tmp_path / "s.zarr", "--index-base", "0", "--zero-based", "no"))
    assert "index_base" in line and "zero_based" in line


def test_a_file_of_another_format_is_refused(tmp_path):
    src = tmp_path / "a.svm"
    src.write_text("1 1:1 2:0.5\n0 2:1 3:2\n")
    ok("convert", src, tmp_path / "s.zarr")
    other = tmp_path / "b.csv"
    other.write_text("1,1,0.5,0\n0,0,1,2\n")
    line = one_line_error(run_cli("append", tmp_path / "s.zarr", other, "--out", tmp_path / "g.zarr"))
    assert str(other) in line and "CSV" in line and "svmlight" in line
    line = one_line_error(run_cli("append", tmp_path / "s.zarr", other, "--out", tmp_path / "g.zarr",
                                  "--input-format", "csv"))
    assert "--input-format csv" in line and "svmlight" in line


@pytest.mark.parametrize("bad", ["bits", "width"])
def test_validation_data_is_read_as_the_store_before_training(tmp_path, bad):
    src = tmp_path / "a.vw"
    src.write_text("1 |f a b c\n-1 |f d e\n1 |g a:2\n-1 |g e\n")
    ok("convert", src, tmp_path / "v.zarr", "--hash-bits", "8")
    ok("train", tmp_path / "v.zarr", "--out", tmp_path / "good", "--validation", src, "--max-epochs", "2")
    if bad == "bits":
        ok("convert", src, tmp_path / "other.zarr", "--hash-bits", "9")
        val, needle = tmp_path / "other.zarr", "hash bits 9"
    else:
        src = tmp_path / "a.svm"
        src.write_text("1 1:1 3:1\n0 2:1 256:1\n")
        ok("convert", src, tmp_path / "v.zarr", "--overwrite")
        val = tmp_path / "w.svm"
        val.write_text("1 1:1\n0 2:1 257:1\n")
        needle = f"{val}:2: feature id 257 is beyond the model's 256 features"
    line = one_line_error(run_cli("train", tmp_path / "v.zarr", "--out", tmp_path / "r", "--validation", val))
    assert needle in line and str(val) in line
    assert not (tmp_path / "r").exists()  # refused before the run started


def test_a_store_without_a_recipe_appends_hashed_rows_at_its_width(tmp_path):
    """Stores written before recipes have ``index_base`` only: hashed new rows take the store's
    2**bits columns (its width), not the default 2**18."""
    from ooc.store import layout as L
    from ooc.store.integrity import seal_attrs
    from ooc.store.store import BACKENDS

    src = tmp_path / "a.vw"
    src.write_text("1 |f a b c\n-1 |f d e\n")
    ok("convert", src, tmp_path / "v.zarr", "--hash-bits", "10")
    be = BACKENDS["zarr"].open(str(tmp_path / "v.zarr"), "r+")
    be.set_attrs({L.RECIPE: None, L.CHUNK_RECORDS: None})  # a store from before recipes and chunk records
    seal_attrs(be)
    be.close()
    os.remove(tmp_path / "v.zarr" / ".ooc-owned.json")  # made before manifests (which check its zarr.json files)
    assert ooc.open_store(str(tmp_path / "v.zarr")).info()["input_recipe"] is None
    ok("append", tmp_path / "v.zarr", src, "--out", tmp_path / "g.zarr")
    A, _, _ = _rows(tmp_path / "v.zarr")
    G, _, _ = _rows(tmp_path / "g.zarr")
    np.testing.assert_array_equal(G, np.vstack([A, A]))


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(store_base=st.sampled_from([0, 1]), new_base=st.sampled_from([0, 1]), d=st.integers(2, 6),
       seed=st.integers(0, 99))
def test_a_file_numbered_another_way_is_refused_naming_the_index_base(tmp_path_factory, store_base, new_base, d, seed):
    """The same features written 0- or 1-based (every feature in use, so each file shows its base): append and
    predict read the new file with the store's base; when the file's own ids contradict it (an id 0 read 1-based,
    or ids 1..d read 0-based), the one-line refusal names the index base and --index-base, and the store is
    never widened; with --index-base the file is read as it is numbered and gives the same rows."""
    rng = np.random.default_rng(seed)
    X = rng.integers(1, 5, size=(4, d)).astype(float)
    y = [0, 1, 0, 1]

    def write(path, base):
        path.write_text("".join(f"{y[i]} " + " ".join(f"{j + base}:{X[i, j]:g}" for j in range(d)) + "\n"
                                for i in range(len(y))))

    tmp = tmp_path_factory.mktemp("base")
    write(tmp / "old.svm", store_base)
    write(tmp / "new.svm", new_base)
    # the store's base stated (a guessed one refuses a base said for new files: test_..._guessed_store_...)
    ok("convert", tmp / "old.svm", tmp / "s.zarr", "--index-base", store_base)
    with ooc.open_store(str(tmp / "s.zarr")) as s:
        meta = {"input_recipe": s.attrs["input_recipe"], "index_base": s.attrs["index_base"], "store": s.path}
        LinearModel(np.arange(1.0, d + 1), 0.5, s.label_values, "squared", "regression", meta).save(str(tmp / "m"))
    r = run_cli("append", tmp / "s.zarr", tmp / "new.svm", "--out", tmp / "g.zarr")
    p = run_cli("predict", tmp / "m", tmp / "new.svm")
    if new_base == store_base:
        assert r.exit_code == 0 and p.exit_code == 0, (r.stderr, p.stderr)
    else:
        for res in (r, p):
            line = one_line_error(res)
            assert f"--index-base {new_base}" in line and "looks" in line and f"{new_base}-based" in line, line
        assert not (tmp / "g.zarr").exists()
    ok("append", tmp / "s.zarr", tmp / "new.svm", "--out", tmp / "g2.zarr", "--index-base", new_base)
    G, _, _ = _rows(tmp / "g2.zarr")
    np.testing.assert_array_equal(G, np.vstack([X, X]))
    assert ok("predict", tmp / "m", tmp / "new.svm", "--index-base", new_base).stdout.split() == \
        ok("predict", tmp / "m", tmp / "s.zarr").stdout.split()


@pytest.mark.parametrize("recorded, written, name", [("csv", "svmlight", "new.txt"), ("csv", "svmlight", "new.svm"),
                                                     ("svmlight", "csv", "new.txt"), ("vw", "svmlight", "new"),
                                                     ("svmlight", "vw", "new.data")])
def test_a_file_of_another_format_is_refused_naming_the_recipes_format(tmp_path, recorded, written, name):
    """When a file says (by its name or its content) another format than the recipe's, the refusal names the
    recipe's format and --input-format, not what reading it the recipe's way trips on later; a file whose format
    the user states as the recipe's is read so whatever its name says."""
    rows = {"svmlight": "1 1:0.5 2:1\n0 2:2\n", "csv": "1,0.5,1\n0,0,2\n", "vw": "1 | 1:0.5 2:1\n0 | 2:2\n"}
    ext = {"svmlight": "svm", "csv": "csv", "vw": "vw"}[recorded]
    (tmp_path / f"old.{ext}").write_text(rows[recorded])
    (tmp_path / name).write_text(rows[written])
    ok("convert", tmp_path / f"old.{ext}", tmp_path / "s.zarr")
    line = one_line_error(run_cli("append", tmp_path / "s.zarr", tmp_path / name, "--out", tmp_path / "g.zarr"))
    shown = {"csv": "CSV", "svmlight": "svmlight", "vw": "Vowpal Wabbit text"}
    assert f"says {shown[recorded]} (its format)" in line and f"--input-format {recorded}" in line, line
    assert shown[written] in line, line
    # stated as the recipe's format: read so (here, the store's own rows under a misleading name)
    (tmp_path / "same.svm").write_text(rows[recorded])
    if recorded != "svmlight":
        ok("append", tmp_path / "s.zarr", tmp_path / "same.svm", "--out", tmp_path / "g2.zarr",
           "--input-format", recorded)


@pytest.mark.parametrize("stored, new", [(",", "\t"), (",", ";"), (",", "|"), ("\t", ",")])
def test_a_csv_delimiter_other_than_the_recipes_is_named(tmp_path, stored, new):
    """A CSV file separated by another delimiter than the store's is refused naming the delimiter (read the
    recipe's way it is one column of bad cells: 'the CSV file has 0 features' was the symptom named)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 4))
    y = np.where(X[:, 0] > 0, 1.0, 0.0)
    rows = np.column_stack([y, X])
    train = tmp_path / ("train.tsv" if stored == "\t" else "train.csv")  # the delimiter from the name
    np.savetxt(train, rows, delimiter=stored)
    np.savetxt(tmp_path / "new.csv", rows, delimiter=new)
    r = CliRunner()
    res = r.invoke(main, ["convert", str(train), str(tmp_path / "s.zarr")])
    assert res.exit_code == 0, res.output
    res = r.invoke(main, ["train", str(tmp_path / "s.zarr"), "--out", str(tmp_path / "run"), "--max-epochs", "3"])
    assert res.exit_code == 0, res.output
    for args in (["predict", str(tmp_path / "run"), str(tmp_path / "new.csv")],
                 ["append", str(tmp_path / "s.zarr"), str(tmp_path / "new.csv"), "--out", str(tmp_path / "t.zarr")]):
        res = r.invoke(main, args)
        assert res.exit_code != 0, (args, res.output)
        assert f"separated by {new!r}" in res.output and f"{stored!r} (its delimiter)" in res.output, res.output


@pytest.mark.parametrize("command", ["evaluate", "predict", "append"])
def test_a_base_said_against_a_guessed_store_is_refused(tmp_path, command):
    """A 0-based training file without feature 0 makes a store guessed 1-based: a 0-based new file said
    so (--index-base 0) would land every id one column off, silently; it is refused, naming the guess and
    the conversion that fixes it. A store whose base was stated takes the option."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((80, 5))
    y = np.where(X[:, 1] > 0, 1.0, -1.0)
    lines = lambda A, skip0: "".join(  # noqa: E731 - 0-based ids, feature 0 left out of the training file
        f"{int(t)} " + " ".join(f"{j}:{v:.4f}" for j, v in enumerate(row) if not (skip0 and j == 0)) + "\n"
        for t, row in zip(y, A))
    (tmp_path / "train.svm").write_text(lines(X, True))
    (tmp_path / "test.svm").write_text(lines(X, False))
    r = CliRunner()
    for store, base in (("guessed.zarr", []), ("stated.zarr", ["--index-base", "1"])):
        assert r.invoke(main, ["convert", str(tmp_path / "train.svm"), str(tmp_path / store), *base]).exit_code == 0
        run = str(tmp_path / f"run-{store}")
        assert r.invoke(main, ["train", str(tmp_path / store), "--out", run, "--max-epochs", "3"]).exit_code == 0
        target = str(tmp_path / store) if command == "append" else run
        out = ["--out", str(tmp_path / f"more-{store}")] if command == "append" else []
        res = r.invoke(main, [command, target, str(tmp_path / "test.svm"), "--index-base", "0", *out])
        if store == "guessed.zarr":
            assert res.exit_code != 0 and "was guessed" in res.output and "--index-base 0" in res.output, res.output
        else:  # stated: the option is taken (this file then has one feature more than the store: refused so)
            assert "was guessed" not in res.output and ("feature id 4" in res.output or "ids up to 4" in res.output), res.output
