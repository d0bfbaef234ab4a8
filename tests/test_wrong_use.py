"""Wrong use gets one line, never numbers: evaluate/predict against the model, and batch specs.

- ``ooc evaluate RUN INPUT``: labels the model cannot score (a binary model's two values, a
  multiclass model's classes) are refused naming INPUT, the line or row, the label and the
  classes; a regression model scores any finite label. ``ooc predict``/``evaluate``: a store,
  .npz or CSV of another width than the model is refused; so is an svmlight id beyond its features.
- ``load_spec``: every value is typed by :class:`ooc.config.TrainConfig` and checked before any
  run starts (bool-for-number, typos, wrong types, bad values and combinations); a finished
  run of a store converted again since is trained again, not reused.
"""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

import ooc
from ooc.batch import SpecError, load_spec, run_batch, run_one, write_results
from ooc.cli import main as cli
from ooc.evaluate import evaluate
from ooc.store.readers import InputError

rng = np.random.default_rng(0)
X = rng.normal(size=(80, 6)) * (rng.random((80, 6)) < 0.6)
Y_BIN = (X[:, 0] + 0.1 * rng.normal(size=80) > 0).astype(float)  # labels 0 / 1
Y_MC = (np.arange(80) % 3).astype(float) + 1  # classes 1, 2, 3
Y_REG = 2.5 * X[:, 1] - X[:, 2]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("wrong")
    out = {}
    for name, y, kind, opts in (("bin", Y_BIN, "auto", {}), ("mc", Y_MC, "auto", {}),
                                ("reg", Y_REG, "regression", {"loss": "squared"}),
                                ("cs", Y_MC, "auto", {"loss": "smooth-hinge", "multiclass": "crammer-singer"})):
        store = str(root / f"{name}.zarr")
        if not os.path.exists(store):
            # index_base=0: svmlight files scored against these models number the array's columns from 0
            ooc.convert(X, store, y=y, label_kind=kind, index_base=0)
        ooc.train(store, str(root / f"run-{name}"), l2=1e-2, tol=1e-3, **opts)
        out[name] = str(root / f"run-{name}")
        out[name + "-store"] = store
    out["root"] = root
    return out


def svm(root, name: str, rows: list[tuple[float, str]]) -> str:
    p = root / name
    p.write_text("".join(f"{label:g} {feats}\n" for label, feats in rows))
    return str(p)


def one_error_line(result) -> str:
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ooc: error: "), result.stderr
    return lines[0]


# -- evaluate: labels against the model's task --------------------------------------------------------
@pytest.mark.parametrize("run, labels, bad_line, bad, known", [
    ("bin", [0, 1, -1], 3, "-1", "(0, 1)"),           # the -1/+1 convention, but the model knows 0/1
    ("bin", [1, 0, 0.5], 3, "0.5", "(0, 1)"),         # real-valued labels
    ("bin", [0, 2, 1], 2, "2", "(0, 1)"),             # multiclass labels
    ("mc", [1, 2, 7], 3, "7", "(1, 2, 3)"),           # a class the model never saw
    ("mc", [0, 1, 2], 1, "0", "(1, 2, 3)"),
    ("cs", [3, 3.5, 1], 2, "3.5", "(1, 2, 3)"),       # crammer-singer: the same check
])
def test_evaluate_refuses_labels_the_model_does_not_know(runs, run, labels, bad_line, bad, known):
    path = svm(runs["root"], f"{run}-bad.svm", [(v, "1:0.5 3:1") for v in labels])
    line = one_error_line(CliRunner().invoke(cli, ["evaluate", runs[run], path]))
    assert f"{path}:{bad_line}: label {bad} " in line and known in line
    with pytest.raises(InputError, match=f"label {bad} "):
        evaluate(runs[run], path)


def test_evaluate_refuses_a_store_of_other_labels(runs):
    # stores name the row; a binary store's labels are compared as their original values
    line = one_error_line(CliRunner().invoke(cli, ["evaluate", runs["bin"], runs["mc-store"]]))
    assert runs["mc-store"] in line and "row 1: label 2 " in line and "(0, 1)" in line
    line = one_error_line(CliRunner().invoke(cli, ["evaluate", runs["mc"], runs["bin-store"]]))
    assert "row " in line and "label 0 " in line and "(1, 2, 3)" in line
    line = one_error_line(CliRunner().invoke(cli, ["evaluate", runs["bin"], runs["reg-store"]]))
    assert "row " in line and "label " in line and "(0, 1)" in line


def test_evaluate_accepts_what_the_model_knows(runs):
    root = runs["root"]
    m = evaluate(runs["bin"], svm(root, "b-ok.svm", [(0, "1:1"), (1, "2:1"), (1, "1:-1")]))
    assert m["n_rows"] == 3 and 0 <= m["accuracy"] <= 1
    assert evaluate(runs["bin"], runs["bin-store"])["n_rows"] == 80
    assert evaluate(runs["mc"], svm(root, "m-sub.svm", [(2, "1:1"), (3, "2:1")]))["n_rows"] == 2
    assert evaluate(runs["cs"], runs["mc-store"])["accuracy"] > 0.2
    # a regression model scores any finite target, class-like ones included
    r = evaluate(runs["reg"], svm(root, "r.svm", [(0, "1:1"), (1, "2:1"), (-7.25, "3:1")]))
    assert np.isfinite(r["rmse"]) and "accuracy" not in r
    assert np.isfinite(evaluate(runs["reg"], runs["bin-store"])["rmse"])


def test_evaluate_and_predict_do_not_read_labels_for_predict(runs):
    # predict ignores labels (unlabelled files often hold a placeholder)
    path = svm(runs["root"], "placeholder.svm", [(0, "1:1"), (0, "2:1")])
    r = CliRunner().invoke(cli, ["predict", runs["mc"], path])
    assert r.exit_code == 0 and len(r.output.split()) == 2


# -- predict/evaluate: features beyond the model's ---------------------------------------------------
def _wide_input(tmp_path, kind: str, width: int) -> str:
    """An input of ``width`` feature columns (svmlight: its largest id is column ``width - 1``)."""
    Xw = np.ones((3, width))
    y = np.array([0.0, 1.0, 1.0])
    if kind == "svmlight":  # the runs' stores are arrays: svmlight ids are their 0-based columns
        return svm(tmp_path, f"w{width}.svm", [(v, " ".join(f"{j}:1" for j in (0, width - 1))) for v in y])
    if kind == "csv":
        p = tmp_path / f"w{width}.csv"
        p.write_text("".join(f"{v:g}," + ",".join(["1"] * width) + "\n" for v in y))
        return str(p)
    if kind == "npz":
        p = str(tmp_path / f"w{width}.npz")
        np.savez(p, X=Xw, y=y)
        return p
    p = str(tmp_path / f"w{width}.zarr")
    ooc.convert(Xw, p, y=y)
    return p


@pytest.mark.parametrize("kind", ["svmlight", "csv", "npz", "store"])
@pytest.mark.parametrize("delta", [-2, -1, 0, 1, 3])
@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_input_width_against_the_model(runs, tmp_path, kind, delta, command):
    """The width rule (docs/formats.rst, "Input width"): a CSV, an .npz or a store declares its width,
    which must be the model's; an svmlight file declares none, so fewer columns are fine (the missing
    ones are zero) and an id beyond the model's features is refused with its line."""
    d = 6
    path = _wide_input(tmp_path, kind, d + delta)
    r = CliRunner().invoke(cli, [command, runs["bin"], path])
    if delta == 0 or (kind == "svmlight" and delta < 0):
        assert r.exit_code == 0, r.output
        return
    line = one_error_line(r)
    assert path in line
    if kind == "svmlight":
        assert f"{path}:1: feature id {d + delta - 1} is beyond the model's {d} features" in line
    else:
        assert f"{d + delta} features, but the model has {d}" in line


def test_features_beyond_the_model(runs, tmp_path):
    d = 6
    npz = str(tmp_path / "wide.npz")
    np.savez(npz, X=np.ones((2, d + 3)), y=np.array([0.0, 1.0]))
    assert f"{d + 3} features" in one_error_line(CliRunner().invoke(cli, ["predict", runs["bin"], npz]))
    unlabelled = str(tmp_path / "unlabelled.npz")
    np.savez(unlabelled, X=X[:4])
    r = CliRunner().invoke(cli, ["predict", runs["bin"], unlabelled])
    assert r.exit_code == 0 and len(r.output.split()) == 4
    assert "'y'" in one_error_line(CliRunner().invoke(cli, ["evaluate", runs["bin"], unlabelled]))
    ok = str(tmp_path / "ok.npz")
    np.savez(ok, X=X[:5], y=Y_BIN[:5])
    r = CliRunner().invoke(cli, ["evaluate", runs["bin"], ok, "--json"])
    assert r.exit_code == 0 and json.loads(r.output.splitlines()[-1])["n_rows"] == 5


# -- batch specs ----------------------------------------------------------------------------------------
GOOD = '[batch]\nout = "out"\n\n[grid]\nstore = ["s.zarr"]\n'

# (spec text, words the one-line error must hold: table, key, value)
BAD_SPECS = [
    (GOOD + "tol = true\n", ["[grid]", "tol", "true", "not a number"]),
    (GOOD + "tol = [1e-6, false]\n", ["[grid]", "tol", "false"]),
    (GOOD + 'l2 = ["a"]\n', ["[grid]", "l2", '"a"', "not a number"]),
    (GOOD + "max_epochs = [1.5]\n", ["[grid]", "max_epochs", "1.5", "not an integer"]),
    (GOOD + "seed = [true]\n", ["[grid]", "seed", "true", "not an integer"]),
    (GOOD + "loss = [3]\n", ["[grid]", "loss", "3", "not a non-empty string"]),
    (GOOD + 'loss = ["logisitc"]\n', ["[grid]", "loss", '"logisitc"', "logistic"]),
    (GOOD + 'solver = ["sdcaa"]\n', ["[grid]", "solver", '"sdcaa"']),
    (GOOD + 'paging = ["random"]\n', ["[grid]", "paging", '"random"']),
    (GOOD + 'multiclass = ["ova"]\n', ["[grid]", "multiclass", '"ova"']),
    (GOOD + "l2 = [[1e-3]]\n", ["[grid]", "l2", "[0.001]"]),
    (GOOD + "l2 = []\n", ["[grid]", "l2", "empty"]),
    (GOOD + "l2 = [1e-3, 1e-3]\n", ["[grid]", "l2", "0.001", "twice"]),
    (GOOD + "l2 = [-1.0]\n", ["[grid]", "l2", "-1.0", "--l2"]),
    (GOOD + "l2 = [inf]\n", ["[grid]", "l2", "inf"]),
    (GOOD + 'memory = ["lots"]\n', ["[grid]", "memory", '"lots"']),
    (GOOD + "dgpd_batch = [0]\n", ["[grid]", "dgpd_batch", "0"]),
    (GOOD + 'sampling = ["sideways"]\n', ["[grid]", "sampling", '"sideways"']),
    (GOOD + 'solver = "dgpd"\nl1 = [1e-3]\nl2 = [0.0]\n', ["[grid]", "l2", "0.0"]),
    (GOOD + "l2 = [0.0, 1e-3]\n", ["[grid]", "l2", "0.0"]),  # pure L1 needs l1 > 0
    (GOOD + "learning_rate = [1]\n", ["[grid]", "learning_rate", "unknown"]),
    (GOOD.replace('store = ["s.zarr"]', "store = [3]"), ["[grid]", "store", "3"]),
    ('[batch]\nout = "out"\n\n[grid]\nl2 = [1e-3]\n', ["[grid]", "store"]),
    ('[batch]\nout = 3\n\n[grid]\nstore = ["s.zarr"]\n', ["[batch]", "out", "3", "not a string"]),
    ('[batch]\nout = "o"\nvalidation = ["v.svm"]\n\n[grid]\nstore = ["s"]\n', ["[batch]", "validation"]),
    ('[batch]\nout = "o"\nvalidaton = "v.svm"\n\n[grid]\nstore = ["s"]\n', ["[batch]", "validaton", "unknown"]),
    ('[batch]\nout = "o"\n\n[grdi]\nstore = ["s"]\n', ["grdi", "unknown"]),
    ('[batch]\nout = "o"\n\n[path]\nstore = "s"\nl2 = 1e-3\n', ["[path]", "l2", "0.001", "list"]),
    ('[batch]\nout = "o"\n\n[path]\nstore = "s"\nl2 = [1e-3, "x"]\n', ["[path]", "l2", '"x"']),
    ('[batch]\nout = "o"\n\n[path]\nstore = "s"\nl2 = [1e-3]\ntol = true\n', ["[path]", "tol", "true"]),
    ('[batch]\nout = "o"\n\n[path]\nstore = "s"\nl2 = [1e-3]\ntol = [1e-3]\n', ["[path]", "tol", "single"]),
    ('[batch]\nout = "o"\n\n[path]\nstore = "s"\nl2 = [0.0, 1e-3]\nsolver = "dgpd"\nl1 = 1e-3\n',
     ["[path]", "l2", "0.0"]),
    ("[batch\n", ["invalid TOML"]),
]


@pytest.mark.parametrize("text, words", BAD_SPECS, ids=[f"spec{i}" for i in range(len(BAD_SPECS))])
def test_bad_specs_are_one_line_naming_file_table_key_value(tmp_path, text, words):
    spec = tmp_path / "bad.toml"
    spec.write_text(text)
    with pytest.raises(SpecError) as e:
        load_spec(str(spec))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{spec}: ")
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


def test_bad_spec_through_the_cli(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text(GOOD + "tol = true\n")
    line = one_error_line(CliRunner().invoke(cli, ["batch", str(spec)]))
    assert str(spec) in line and "tol" in line and "true" in line
    assert not (tmp_path / "out").exists()  # refused before anything ran or was made


def test_spec_values_as_written(tmp_path):
    spec = tmp_path / "ok.toml"
    spec.write_text(GOOD + 'loss = "hinge"\nl2 = [1e-3, 1]\nmax_epochs = [5]\nmemory = ["64MiB"]\n'
                    '\n[path]\nstore = "s.zarr"\nl2 = [1e-3, 1]\n')
    s = load_spec(str(spec))
    # a single grid value is a list of one; ints stay as written (run names hash them)
    assert s["grid"]["loss"] == ["hinge"] and s["grid"]["l2"] == [1e-3, 1]
    assert s["grid"]["store"] == [str(tmp_path / "s.zarr")]
    assert s["path"]["l2"] == [1.0, 1e-3] and s["path"]["store"] == str(tmp_path / "s.zarr")


# -- batch runs: the store's fingerprint decides whether a finished run is reused ---------------------
def test_reconverted_store_is_trained_again_and_outputs_are_atomic(tmp_path):
    store = str(tmp_path / "data.zarr")
    ooc.convert(X, store, y=Y_BIN)
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[batch]\nout = "out"\n\n[grid]\nstore = ["{store}"]\nl2 = [1e-2]\ntol = [1e-3]\n')
    out = tmp_path / "out"
    first = run_batch(str(spec), workers=1)
    assert [r["status"] for r in first] == ["ok"]
    assert sorted(os.listdir(out)) == sorted([".ooc-owned.json", "comparison.png", "results.csv", "summary.md", first[0]["run"]])
    run_dir = str(out / first[0]["run"])
    fp1 = json.load(open(os.path.join(run_dir, "run.json")))["store_fingerprint"]
    options = {"store": store, "l2": 1e-2, "tol": 1e-3}
    assert run_one(run_dir, options)["state"] == "skipped"  # same store: reused
    # the store is converted again from other data: the finished run must not be reused
    ooc.convert(X[::-1].copy(), store, y=Y_BIN[::-1].copy(), overwrite=True)
    fp2 = ooc.open_store(store).fingerprint
    assert fp2 != fp1
    again = run_batch(str(spec), workers=1)
    assert again[0]["status"] == "ok" and again[0]["state"] == "retrained"
    assert json.load(open(os.path.join(run_dir, "run.json")))["store_fingerprint"] == fp2
    assert run_one(run_dir, options)["state"] == "skipped"
    assert not [p for p in os.listdir(out) if ".tmp" in p]
    # a store that is gone cannot vouch for the results: the run fails, named
    os.rename(store, store + ".moved")
    row = run_one(run_dir, options)
    assert row["status"] == "failed" and "no such store" in row["error"]


def test_results_csv_is_replaced_atomically(tmp_path):
    rows = [{"run": "a", "status": "ok", "l2": 0.1}]
    write_results(str(tmp_path), rows)
    before = (tmp_path / "results.csv").read_bytes()

    class Unwritable:
        def __str__(self):
            raise RuntimeError("cannot format")

    with pytest.raises(RuntimeError):
        write_results(str(tmp_path), rows + [{"run": "b", "status": Unwritable()}])
    assert (tmp_path / "results.csv").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == [".ooc-owned.json", "results.csv"]  # and ooc's manifest of it
    assert list(csv.DictReader(open(tmp_path / "results.csv")))[0]["run"] == "a"
