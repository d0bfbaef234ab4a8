"""``ooc export``: each format read back by its own tool predicts as the ooc model does.

LIBLINEAR's model file is loaded by LIBLINEAR itself (``liblinear-official``: its C ``load_model``
and ``predict``), the scikit-learn pickle by scikit-learn, the ONNX model by onnxruntime; the text
export is parsed here. Tests of a tool that is not installed are skipped.
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from test_cli import assert_one_line_error, cli, last_json, write_svmlight

import ooc
from ooc.export import is_export, liblinear_text

N, D = 240, 15


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Runs on small data: binary 3/7 from a 1-based svmlight file (logistic, bias 1; hinge, no bias),
    multiclass 0/1/2 (logistic ovr with bias; crammer-singer), regression (squared, bias 1.5)."""
    root = tmp_path_factory.mktemp("export")
    rng = np.random.default_rng(3)
    X = sp.random(N, D, density=0.35, random_state=3, format="csr", data_rvs=rng.standard_normal)
    X.data = np.round(X.data, 3)
    m = X @ rng.standard_normal(D)
    y37 = np.where(m + 0.3 * rng.standard_normal(N) > 0, 7, 3)
    svm = root / "bin.svm"
    write_svmlight(svm, X, y37)
    cli("convert", svm, root / "bin.zarr", "--dtype", "float64")
    ycls = np.digitize(m + 0.3 * rng.standard_normal(N), np.quantile(m, [1 / 3, 2 / 3])).astype(float)
    ooc.convert(X, str(root / "multi.zarr"), y=ycls, dtype="float64")
    ooc.convert(X, str(root / "reg.zarr"), y=m + 0.1 * rng.standard_normal(N), dtype="float64",
                label_kind="regression")
    common = ("--l2", "1e-2", "--tol", "1e-8")
    out = {}
    for name, store, opts in (("logistic", "bin.zarr", ("--loss", "logistic", "--bias", "1")),
                              ("hinge", "bin.zarr", ("--loss", "hinge")),
                              ("multi", "multi.zarr", ("--loss", "logistic", "--bias", "1")),
                              ("cs", "multi.zarr", ("--loss", "hinge", "--multiclass", "crammer-singer",
                                                    "--solver", "sdca")),
                              ("reg", "reg.zarr", ("--loss", "squared", "--bias", "1.5"))):
        cli("train", root / store, "--out", root / name, *common, *opts)
        out[name] = str(root / name)
    return dict(root=root, X=X, svm=str(svm), **out)


def _export(runs, name, fmt, tmp_path):
    out = tmp_path / f"{name}.{fmt}"
    info = last_json(cli("export", runs[name], "--format", fmt, "--out", out, "--json").stdout)
    assert info["format"] == fmt and info["out"] == str(out) and os.path.getsize(out) == info["bytes"]
    # the stores of matrices number features from 0, the svmlight file's from 1
    assert info["index_base"] == (1 if name in ("logistic", "hinge") else 0)
    return str(out)


# -- LIBLINEAR ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["logistic", "hinge", "multi", "cs", "reg"])
def test_liblinear_reads_the_model_file_and_predicts_as_ooc(runs, name, tmp_path):
    lu = pytest.importorskip("liblinear.liblinearutil")
    path = _export(runs, name, "liblinear", tmp_path)
    model = ooc.load_model(runs[name])
    ll = lu.load_model(path)
    assert ll.get_nr_feature() == D
    X = runs["X"]
    labels, _, values = lu.predict([], X, ll, "-q")  # LIBLINEAR feature j is column j - 1
    np.testing.assert_array_equal(np.asarray(labels), model.predict(X))
    # its decision values are ooc's margins (LIBLINEAR's label order: the positive class first)
    np.testing.assert_allclose(np.asarray(values).squeeze(), model.decision_function(X), rtol=1e-12, atol=1e-12)
    if name == "logistic":  # a probability model: LIBLINEAR's -b 1 gives ooc's probabilities
        _, _, p = lu.predict([], X, ll, "-b 1 -q")
        np.testing.assert_allclose(np.asarray(p)[:, 0], model.predict_proba(X)[:, 1], rtol=1e-12)
    if name == "logistic":  # the file's own 1-based ids, read by LIBLINEAR's reader, give the same
        y, x = lu.svm_read_problem(runs["svm"])
        labels2, _, _ = lu.predict(y, x, ll, "-q")
        np.testing.assert_array_equal(labels2, labels)


def test_liblinear_format_lines(runs):
    """The header as LIBLINEAR's save_model writes it (checked without LIBLINEAR installed)."""
    m = ooc.load_model(runs["logistic"])
    lines = liblinear_text(m).splitlines()
    assert lines[:6] == ["solver_type L2R_LR", "nr_class 2", "label 7 3", f"nr_feature {D}", "bias 1", "w"]
    w = np.array([float(r.split()[0]) for r in lines[6:6 + D + 1]])
    np.testing.assert_array_equal(w[:D], m.coef_)  # %.17g: every bit
    assert w[D] == m.intercept_  # bias 1: the bias feature's weight is the intercept
    assert len(lines) == 6 + D + 2  # the weights, then the export mark LIBLINEAR does not read
    hinge = liblinear_text(ooc.load_model(runs["hinge"])).splitlines()
    assert hinge[4] == "bias -1"  # trained without --bias: LIBLINEAR's "no bias feature"
    reg = liblinear_text(ooc.load_model(runs["reg"])).splitlines()
    assert reg[:5] == ["solver_type L2R_L2LOSS_SVR", "nr_class 2", f"nr_feature {D}", "bias 1.5", "w"]
    cs = liblinear_text(ooc.load_model(runs["cs"])).splitlines()
    assert cs[:3] == ["solver_type MCSVM_CS", "nr_class 3", "label 0 1 2"]
    assert all(len(r.split()) == 3 for r in cs[6:6 + D])  # one weight per class, feature by feature


# -- scikit-learn -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["logistic", "hinge", "multi", "cs", "reg"])
def test_sklearn_pickle_predicts_as_ooc(runs, name, tmp_path):
    pytest.importorskip("sklearn")
    path = _export(runs, name, "sklearn", tmp_path)
    with open(path, "rb") as f:
        est = pickle.load(f)
    model = ooc.load_model(runs[name])
    X = runs["X"]
    np.testing.assert_array_equal(est.predict(X), model.predict(X))
    if name != "reg":
        np.testing.assert_allclose(est.decision_function(X), model.decision_function(X), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(est.classes_, model.classes_)
    if name in ("logistic", "multi"):
        np.testing.assert_allclose(est.predict_proba(X), model.predict_proba(X), rtol=1e-12)
    kind = {"logistic": "LogisticRegression", "hinge": "LinearSVC", "multi": "OneVsRestClassifier",
            "cs": "LinearSVC", "reg": "Ridge"}[name]
    assert type(est).__name__ == kind


# -- text --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["logistic", "multi"])
def test_text_weights_rebuild_the_model(runs, name, tmp_path):
    path = _export(runs, name, "text", tmp_path)
    model = ooc.load_model(runs[name])
    W = np.zeros_like(np.atleast_2d(model.coef_))
    base = 1 if name == "logistic" else 0  # the svmlight file was 1-based; the matrix store 0-based
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            feat, *vals = line.split()
            if feat == "(intercept)":
                np.testing.assert_array_equal(np.array(vals, float), np.atleast_1d(model.intercept_))
            else:
                W[:, int(feat) - base] = np.array(vals, float)
    np.testing.assert_array_equal(W, np.atleast_2d(model.coef_))


# -- ONNX ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["logistic", "hinge", "multi", "cs", "reg"])
def test_onnx_predicts_as_ooc(runs, name, tmp_path):
    pytest.importorskip("skl2onnx")
    rt = pytest.importorskip("onnxruntime")
    path = _export(runs, name, "onnx", tmp_path)
    sess = rt.InferenceSession(path, providers=["CPUExecutionProvider"])
    X = runs["X"].toarray()
    got = sess.run(None, {"X": X.astype(np.float32)})
    model = ooc.load_model(runs[name])
    m = model.decision_function(X)
    if name == "reg":
        np.testing.assert_allclose(got[0].ravel(), m, rtol=1e-4, atol=1e-4)  # float32 arithmetic
        return
    clear = np.abs(m).min(axis=-1) > 1e-3 if m.ndim == 1 else np.sort(m, 1)[:, -1] - np.sort(m, 1)[:, -2] > 1e-3
    np.testing.assert_array_equal(got[0][clear], model.predict(X)[clear])
    if name in ("logistic", "multi"):  # probabilities
        np.testing.assert_allclose(got[1], model.predict_proba(X), rtol=1e-4, atol=1e-5)
    else:  # the hinges: the margins
        np.testing.assert_allclose(got[1].reshape(m.shape), m, rtol=1e-4, atol=1e-4)


# -- what export may replace -----------------------------------------------------------------------------
def test_export_replaces_only_its_own_files(runs, tmp_path):
    out = tmp_path / "model.txt"
    out.write_text("mine\n")
    err = assert_one_line_error(cli("export", runs["logistic"], "--format", "text", "--out", out, ok=False))
    assert str(out) in err and "--overwrite" in err
    err = assert_one_line_error(cli("export", runs["logistic"], "--format", "text", "--out", out,
                                    "--overwrite", ok=False))
    assert "was not written by ooc" in err
    assert out.read_text() == "mine\n"
    out.unlink()
    cli("export", runs["logistic"], "--format", "liblinear", "--out", out)
    assert is_export(str(out), "liblinear") and not is_export(str(out), "text")
    assert_one_line_error(cli("export", runs["logistic"], "--format", "liblinear", "--out", out, ok=False))
    cli("export", runs["hinge"], "--format", "liblinear", "--out", out, "--overwrite")
    assert "bias -1" in out.read_text()
    zero_based = cli("export", runs["multi"], "--format", "liblinear", "--out", out, "--overwrite").stdout
    assert "LIBLINEAR's feature j is their j - 1" in zero_based
    # another format's export is not replaced by this one
    assert_one_line_error(cli("export", runs["hinge"], "--format", "text", "--out", out, "--overwrite", ok=False))
    # never inside the run directory; no temporaries left behind
    err = assert_one_line_error(cli("export", runs["hinge"], "--format", "text", "--out",
                                    os.path.join(runs["hinge"], "w.txt"), ok=False))
    assert "run directory" in err
    assert sorted(os.listdir(tmp_path)) == [".ooc-owned.json", "model.txt"]  # the file and ooc's manifest of it


def test_cli_offers_every_format():
    from ooc.cli import main
    from ooc.export import FORMATS

    fmt = next(p for p in main.commands["export"].params if p.name == "fmt")
    assert tuple(fmt.type.choices) == FORMATS


def test_export_wrong_use_is_one_line(runs, tmp_path):
    err = assert_one_line_error(cli("export", tmp_path / "nope", "--format", "text", "--out", tmp_path / "x",
                                    ok=False))
    assert "nope" in err
    err = assert_one_line_error(cli("export", runs["logistic"], "--format", "pmml", "--out", tmp_path / "x",
                                    ok=False))
    assert "--format" in err
    (tmp_path / "afile").write_text("x")  # (a missing parent is made: tests/test_newcomer.py)
    err = assert_one_line_error(cli("export", runs["logistic"], "--format", "text", "--out",
                                    tmp_path / "afile" / "no" / "x", ok=False))
    assert "not a directory" in err


# -- the docs tour, as written, on the demo's data --------------------------------------------------------
def _tour_block():
    """The commands and the Python code of getting-started.rst's "Inspect, score and export" part."""
    import re

    page = open(os.path.join(os.path.dirname(__file__), "..", "docs", "getting-started.rst")).read()
    part = page[page.index("Inspect, score and export a model."):page.index("See :ref:`export`")]
    commands = [ln.split("#")[0].strip() for ln in part.splitlines() if ln.strip().startswith("ooc ")]
    code = re.search(r"\.\. code-block:: python\n\n((?:    .*\n|\n)+)", part).group(1)
    return commands, "\n".join(ln[4:] for ln in code.splitlines())


def test_docs_tour_runs_on_the_demo_data(tmp_path, monkeypatch):
    import shlex

    commands, code = _tour_block()
    assert commands[0] == "ooc demo --dir demo" and any("--format liblinear" in c for c in commands)
    monkeypatch.chdir(tmp_path)
    cli("demo", "--dir", "demo", "--rows", "2000")  # the demo, smaller
    have = {"sklearn": _installed("sklearn"), "onnx": _installed("skl2onnx")}
    for cmd in commands[1:]:
        args = shlex.split(cmd)[1:]
        fmt = args[args.index("--format") + 1] if "--format" in args else None
        if fmt in have and not have[fmt]:
            continue
        cli(*args)
    if _installed("liblinear") and have["sklearn"]:
        scope = {}
        exec(compile(code, "getting-started.rst", "exec"), scope)  # the page's Python, as written
        pred = np.loadtxt(cli("predict", "demo/run", "demo/test.svm").stdout.splitlines())
        np.testing.assert_array_equal(np.asarray(scope["labels"]), pred)
        from sklearn.datasets import load_svmlight_file

        # the estimator takes the d columns of the store (the demo's file is 1-based)
        X, _ = load_svmlight_file("demo/test.svm", n_features=ooc.load_model("demo/run").n_features,
                                  zero_based=False)
        np.testing.assert_array_equal(scope["clf"].predict(X), pred)


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
