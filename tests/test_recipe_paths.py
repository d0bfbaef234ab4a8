"""New input is read exactly as the training store's recipe says, through every entry point.

Invariants (docs/formats.rst, "Input recipe" and "Values of new input"), each drawn over the entry
points that read new input for a model or a store -- ``ooc predict``, ``ooc evaluate``,
``ooc train --validation``, ``ooc append``, the estimators' ``predict``/``score`` of a path -- and
over a file or a store as that input:

- values are read as the recipe's dtype, with convert's range checks: a value that overflows a
  float32 store's type is refused by each, with one line naming the file and its line; a float64
  store takes it;
- a file and the store made from it give the same predictions, bit for bit, whatever the values;
- a store or file read another way than the training store's recipe (another format) is refused
  by each, naming the difference (the estimators included);
- against array columns (a store of ``ooc.convert(X)``), an svmlight file is read only with
  ``--index-base``: refused without it, naming the option; with it, its rows are the matrix's rows;
  a matrix converted with ``index_base=B`` records it, and svmlight files are then read B-based;
- ``LinearModel`` scores arrays only: a path is refused, naming the readers that follow the recipe.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ooc
from ooc.cli import main
from ooc.estimators import LinearClassifier
from ooc.evaluate import iter_predictions
from ooc.model import LinearModel

D = 3  # features of every store and model here
ROWS = [(0, {0: 1.0, 2: 0.5}), (1, {1: 2.0}), (0, {0: 0.7, 1: 0.1}), (1, {1: 1.5, 2: 1.0}),
        (0, {0: 2.0}), (1, {2: 2.0, 1: 0.3})]
EXAMPLES = settings(max_examples=8, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
CLI_ENTRIES = ("predict", "evaluate", "validation", "append")
PY_ENTRIES = ("estimator-predict", "estimator-score")


def svmlight(rows, base: int = 0) -> str:
    return "".join(f"{y} " + " ".join(f"{j + base}:{v!r}" for j, v in sorted(x.items())) + "\n" for y, x in rows)


def write(path, text: str) -> str:
    with open(path, "w") as f:
        f.write(text)
    return str(path)


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=True)


def one_line(r) -> str:
    assert r.exit_code == 1, (r.stdout, r.stderr, r.exception)
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("ooc: error: "), r.stderr
    return err[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Stores (float32 and float64 svmlight, VW, raw text, an in-memory matrix), a run and a fitted
    estimator on each of those a model is needed for."""
    d = tmp_path_factory.mktemp("recipe-paths")
    train = write(d / "train.svm", svmlight(ROWS))
    out = {"dir": d, "train": train}
    for dtype in ("float32", "float64"):
        ooc.convert(train, str(d / f"{dtype}.zarr"), dtype=dtype, index_base=0, n_features=D)
    vw = write(d / "t.vw", "".join(f"{2 * y - 1} | w{y} a{k}\n" for k, (y, _) in enumerate(ROWS)))
    ooc.convert(vw, str(d / "vw.zarr"), hash_bits=2)
    text = write(d / "t.csv", "label,text\n" + "".join(f"{2 * y - 1},w{y} a{k}\n" for k, (y, _) in enumerate(ROWS)))
    ooc.convert(text, str(d / "text.zarr"), text_columns=("label", "text"), hash_bits=2)
    X = np.zeros((len(ROWS), D))
    for i, (_, x) in enumerate(ROWS):
        for j, v in x.items():
            X[i, j] = v
    ooc.convert(X, str(d / "matrix.zarr"), y=np.array([y for y, _ in ROWS], float))
    for name in ("float32", "float64", "vw", "matrix"):
        r = cli("train", d / f"{name}.zarr", "--out", d / f"run-{name}", "--l2", "0.1", "--tol", "1e-3")
        assert r.exit_code == 0, r.stderr
        out[name] = LinearClassifier(l2=0.1, tol=1e-3).fit(str(d / f"{name}.zarr"))
    return out


def read_with(entry: str, runs, name: str, source: str, *extra):
    """Read ``source`` for the model (or store) ``name`` through ``entry``; the CLI's result, or the
    estimator's value (its ValueError: the refusal, one line)."""
    d = runs["dir"]
    if entry == "predict":
        return cli("predict", d / f"run-{name}", source, *extra)
    if entry == "evaluate":
        return cli("evaluate", d / f"run-{name}", source, *extra)
    if entry == "validation":
        return cli("train", d / f"{name}.zarr", "--out", d / f"rv-{name}", "--overwrite", "--validation", source,
                   "--l2", "0.1", "--tol", "1e-3", *extra)
    if entry == "append":
        return cli("append", d / f"{name}.zarr", source, "--out", d / f"app-{name}.zarr", "--overwrite", *extra)
    est = runs[name]
    if entry == "estimator-predict":
        return est.predict(source)
    y = est.predict(source)  # (labels of the right classes: the score itself is not under test)
    return est.score(source, y)


@EXAMPLES
@given(entry=st.sampled_from(CLI_ENTRIES + PY_ENTRIES), line=st.integers(1, 4),
       big=st.sampled_from(["1e39", "-3.5e38", "4e38", "1e300"]), dtype=st.sampled_from(["float32", "float64"]))
def test_value_overflowing_the_store_dtype_is_refused_by_every_reader(runs, entry, line, big, dtype):
    rows = [(y, dict(x)) for y, x in ROWS[:4]]
    rows[line - 1][1][1] = float(big)
    path = write(runs["dir"] / f"big-{entry}.svm", svmlight(rows))
    if dtype == "float64":
        if entry in ("predict", "estimator-predict"):  # the float64 store's type holds it: read, not refused
            r = read_with(entry, runs, dtype, path)
            assert entry != "predict" or r.exit_code == 0, r.stderr
        return
    if entry in PY_ENTRIES:
        with pytest.raises(ValueError, match=rf"{path}:{line}:\d+: value .* overflows float32"):
            read_with(entry, runs, dtype, path)
        return
    err = one_line(read_with(entry, runs, dtype, path))
    assert f"{path}:{line}:" in err and "overflows float32" in err, err


@EXAMPLES
@given(values=st.lists(st.floats(-1e30, 1e30, allow_nan=False, allow_subnormal=False).filter(lambda v: abs(v) > 1e-44),
                       min_size=6, max_size=6),
       dtype=st.sampled_from(["float32", "float64"]))
def test_a_file_and_the_store_made_from_it_predict_the_same(runs, values, dtype):
    d = runs["dir"]
    rows = [(k % 2, {k % D: v, (k + 1) % D: 1.0}) for k, v in enumerate(values)]
    path = write(d / "vals.svm", svmlight(rows))
    store = str(d / f"vals-{dtype}.zarr")
    ooc.convert(path, store, dtype=dtype, index_base=0, n_features=D, overwrite=True)
    run = str(d / f"run-{dtype}")
    for proba in (False, True):
        a = np.concatenate(list(iter_predictions(run, path, proba=proba)))
        b = np.concatenate(list(iter_predictions(run, store, proba=proba)))
        assert np.array_equal(a, b), (dtype, proba, np.max(np.abs(a - b)))
    est = runs[dtype]
    assert np.array_equal(est.decision_function(path), est.decision_function(store))


@pytest.mark.parametrize("entry", ("predict", "evaluate", "validation") + PY_ENTRIES)
@pytest.mark.parametrize("kind", ["store", "file"])
def test_input_read_another_way_is_refused_by_every_reader(runs, entry, kind):
    """A model of a VW store: a raw-text store of the same width, or a CSV file, is refused naming the
    format its recipe records."""
    d = runs["dir"]
    source = str(d / "text.zarr") if kind == "store" else str(d / "t.csv")
    if entry in PY_ENTRIES:
        with pytest.raises(ValueError, match="Vowpal Wabbit text") as e:
            read_with(entry, runs, "vw", source)
        assert "\n" not in str(e.value)
        return
    err = one_line(read_with(entry, runs, "vw", source))
    assert "Vowpal Wabbit text" in err and source in err, err


@pytest.mark.parametrize("entry", CLI_ENTRIES + ("estimator-predict",))
@pytest.mark.parametrize("base", [0, 1])
def test_svmlight_against_array_columns_needs_the_index_base(runs, entry, base):
    d = runs["dir"]
    path = write(d / f"m{base}.svm", svmlight(ROWS, base))
    if entry == "estimator-predict":
        with pytest.raises(ValueError, match=r"no index base.*index_base=0.*index_base=1"):
            read_with(entry, runs, "matrix", path)
        return
    err = one_line(read_with(entry, runs, "matrix", path))
    assert path in err and "--index-base 0" in err and "--index-base 1" in err and "no index base" in err, err


@pytest.mark.parametrize("base", [0, 1])
def test_svmlight_with_its_index_base_reads_the_matrix_columns(runs, base):
    d = runs["dir"]
    path = write(d / f"m{base}.svm", svmlight(ROWS, base))
    out = d / f"pred{base}.txt"
    r = cli("predict", d / "run-matrix", path, "--index-base", base, "--out", out)
    assert r.exit_code == 0, r.stderr
    want = cli("predict", d / "run-matrix", d / "matrix.zarr", "--out", d / "pred-store.txt")
    assert want.exit_code == 0, want.stderr
    assert np.array_equal(np.loadtxt(out), np.loadtxt(d / "pred-store.txt"))


@pytest.mark.parametrize("base", [0, 1])
def test_a_matrix_converted_with_an_index_base_records_it(runs, tmp_path, base):
    d = runs["dir"]
    X = np.array([[x.get(j, 0.0) for j in range(D)] for _, x in ROWS])
    store = str(tmp_path / "mb.zarr")
    ooc.convert(X, store, y=np.array([y for y, _ in ROWS], float), index_base=base)
    assert f"svmlight files are read {base}-based" in one_info(store)
    ooc.train(store, str(tmp_path / "run"), l2=0.1, tol=1e-3)
    path = write(d / f"mb{base}.svm", svmlight(ROWS, base))
    a = np.concatenate(list(iter_predictions(str(tmp_path / "run"), path, proba=True)))
    b = np.concatenate(list(iter_predictions(str(tmp_path / "run"), store, proba=True)))
    assert np.array_equal(a, b)
    other = write(d / f"mb{1 - base}.svm", svmlight(ROWS, 1 - base))
    if base == 1:  # an id 0 read 1-based: refused naming the index base
        err = one_line(cli("evaluate", tmp_path / "run", other))
        assert "index-base" in err and "looks 0-based" in err, err


def one_info(store: str) -> str:
    r = cli("info", store)
    assert r.exit_code == 0, r.stderr
    return r.stdout


def test_linear_model_refuses_a_path(runs):
    model = LinearModel.load(os.path.join(runs["dir"], "run-vw"))
    for reader in (model.predict, model.decision_function, model.predict_proba):
        with pytest.raises(ValueError, match="LinearModel scores arrays.*predict\\(path\\)"):
            reader(runs["train"])
