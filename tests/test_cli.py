"""The command line contract (docs/cli.rst, docs/formats.rst) for train / resume / info / predict / evaluate.

Most commands run in-process through click's CliRunner (the same code as the ``ooc`` script,
without a Python start-up each); one test runs the real ``ooc`` executable to check what a
shell script sees (stdout/stderr separation, exit status, no progress bar in a pipe).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

import ooc
from ooc.cli import main

N, D = 300, 20
L2 = 1e-2
TRAIN_KEYS = {"primal", "dual", "gap", "epochs", "seconds", "nnz_w", "converged"}
INFO_KEYS = {"n_rows", "n_cols", "nnz", "label_kind", "classes", "C_P", "C_D", "recommended_side",
             "bytes_on_disk"}
HISTORY_KEYS = {"epoch", "seconds", "primal", "dual", "gap", "nnz_w", "bytes_read", "cache_hit_rate"}


def ooc_exe() -> str:
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    return exe if os.path.exists(exe) else shutil.which("ooc")


def cli(*args, ok=True):
    """Run ``ooc ARGS`` in-process; returns the click Result (stdout and stderr apart)."""
    res = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=True)
    if ok:
        assert res.exit_code == 0, (res.exit_code, res.stdout, res.stderr, res.exception)
    return res


def last_json(text: str) -> dict:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines, "no output"
    return json.loads(lines[-1])


def assert_one_line_error(res):
    """A user error: non-zero exit, one line on stderr, no traceback."""
    assert res.exit_code != 0
    assert isinstance(res.exception, SystemExit), f"uncaught {res.exception!r}"
    err = res.stderr.strip()
    assert err.startswith("ooc: error:"), err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err and "Traceback" not in res.stdout
    return err


def write_svmlight(path, X, y, extra=None):
    """1-based svmlight; ``extra`` = (feature id, value) appended to every row (ids beyond d)."""
    X = sp.csr_matrix(X)
    with open(path, "w") as f:
        for i in range(X.shape[0]):
            lo, hi = X.indptr[i], X.indptr[i + 1]
            feats = [f"{j + 1}:{float(v)!r}" for j, v in zip(X.indices[lo:hi], X.data[lo:hi])]
            if extra is not None:
                feats.append(f"{extra[0]}:{float(extra[1])!r}")
            f.write(f"{int(y[i])} " + " ".join(feats) + "\n")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """On-disk stores: binary labelled 3/7 (converted from svmlight), regression, multiclass."""
    root = tmp_path_factory.mktemp("cli")
    rng = np.random.default_rng(0)
    X = sp.random(N, D, density=0.3, random_state=0, format="csr", data_rvs=rng.standard_normal)
    X.data = np.round(X.data, 3)  # exact in text and in float64
    wt = rng.standard_normal(D)
    m = X @ wt
    y37 = np.where(m + 0.3 * rng.standard_normal(N) > 0, 7, 3)
    svm = root / "bin.svm"
    write_svmlight(svm, X, y37)
    binary = root / "bin.zarr"
    cli("convert", svm, binary, "--dtype", "float64", "--block-bytes", "2KiB")
    reg = root / "reg.zarr"
    ooc.convert(X, str(reg), y=m + 0.1 * rng.standard_normal(N), dtype="float64", block_bytes=8192,
                label_kind="regression")
    multi = root / "multi.zarr"
    ooc.convert(X, str(multi), y=rng.integers(0, 3, N).astype(float), block_bytes=2048)
    return dict(root=root, X=X, y37=y37, svm=svm, binary=binary, reg=reg, multi=multi)


@pytest.fixture(scope="module")
def trained(data):
    """One logistic run on the 3/7 store, through the CLI, with its --json result."""
    run = data["root"] / "run-bin"
    res = cli("train", data["binary"], "--out", run, "--l2", L2, "--tol", 1e-9, "--json")
    return run, last_json(res.stdout)


# ---------------------------------------------------------------------------------------------
def test_train_json_is_the_last_line(trained):
    run, out = trained
    assert TRAIN_KEYS <= set(out)
    assert out["converged"] is True
    assert out["gap"] <= 1e-9 * max(1.0, abs(out["primal"]))
    assert out["primal"] >= out["dual"]
    assert isinstance(out["epochs"], int) and out["epochs"] >= 1
    assert out["seconds"] > 0
    assert out["nnz_w"] == np.count_nonzero(ooc.load_model(run).coef_)


def test_real_executable_json_and_quiet_pipe(data, tmp_path):
    """What a script sees: exit 0, the JSON object on the last stdout line, no progress bar."""
    run = tmp_path / "run"
    p = subprocess.run([ooc_exe(), "train", str(data["binary"]), "--out", str(run), "--l2", str(L2),
                        "--tol", "1e-6", "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = last_json(p.stdout)
    assert TRAIN_KEYS <= set(out)
    assert "\r" not in p.stderr and "epoch" not in p.stderr, p.stderr  # quiet in pipes
    # a user error from the real executable: one line, exit != 0, no traceback
    p = subprocess.run([ooc_exe(), "train", str(data["binary"]), "--out", str(tmp_path / "r2"), "--l2", "-1"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_history_one_line_per_certified_state(trained):
    run, out = trained
    with open(run / "history.jsonl") as f:
        lines = [json.loads(ln) for ln in f if ln.strip()]
    # states S_0 .. S_E: one line each, the last is the returned one
    assert [h["epoch"] for h in lines] == list(range(out["epochs"] + 1))
    for h in lines:
        assert HISTORY_KEYS <= set(h), set(HISTORY_KEYS) - set(h)
        assert h["gap"] == pytest.approx(h["primal"] - h["dual"], rel=1e-12, abs=1e-15)
        assert h["primal"] >= h["dual"]
        assert 0.0 <= h["cache_hit_rate"] <= 1.0
        assert h["bytes_read"] > 0
    secs = [h["seconds"] for h in lines]
    assert secs == sorted(secs) and secs[0] == 0.0
    assert (lines[-1]["primal"], lines[-1]["gap"], lines[-1]["nnz_w"]) == (out["primal"], out["gap"], out["nnz_w"])
    # everything fits the default cache: each block is read once, then hits
    assert lines[-1]["cache_hit_rate"] > 0.5


def test_convergence_png(trained):
    run, _ = trained
    with open(run / "convergence.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_info_json(data):
    i = last_json(cli("info", data["binary"], "--json").stdout)
    assert INFO_KEYS <= set(i), INFO_KEYS - set(i)
    assert (i["n_rows"], i["n_cols"], i["label_kind"]) == (N, D, "binary")
    assert i["nnz"] == data["X"].nnz
    assert list(i["classes"]) == [3, 7]
    assert i["recommended_side"] in ("primal", "dual")
    assert i["bytes_on_disk"] > 0


def test_evaluate_json_primal_matches_train(data, trained):
    run, out = trained
    ev = last_json(cli("evaluate", run, data["binary"], "--json").stdout)
    assert {"accuracy", "primal"} <= set(ev)
    assert ev["primal"] == pytest.approx(out["primal"], rel=1e-9)
    m = ooc.load_model(run)
    X = data["X"].toarray()
    acc = np.mean(np.where(X @ m.coef_ + m.intercept_ > 0, 7, 3) == data["y37"])
    assert ev["accuracy"] == pytest.approx(acc)
    assert ev["accuracy"] > 0.8
    # the svmlight file gives the same figures as the store converted from it
    ev2 = last_json(cli("evaluate", run, data["svm"], "--json").stdout)
    assert ev2["accuracy"] == ev["accuracy"]
    assert ev2["primal"] == pytest.approx(ev["primal"], rel=1e-12)


def test_evaluate_regression_with_bias(data, tmp_path):
    run = tmp_path / "reg"
    out = last_json(cli("train", data["reg"], "--out", run, "--loss", "squared", "--l2", L2, "--bias", "1.5",
                        "--tol", "1e-9", "--json").stdout)
    ev = last_json(cli("evaluate", run, data["reg"], "--json").stdout)
    assert {"rmse", "primal"} <= set(ev) and "accuracy" not in ev
    assert ev["primal"] == pytest.approx(out["primal"], rel=1e-9)
    m = ooc.load_model(run)
    st = ooc.open_store(str(data["reg"]))
    resid = data["X"] @ m.coef_ + m.intercept_ - st.labels
    assert ev["rmse"] == pytest.approx(np.sqrt(np.mean(resid ** 2)), rel=1e-9)


def test_predict_original_labels_store_and_svmlight(data, trained, tmp_path):
    run, _ = trained
    m = ooc.load_model(run)
    X = data["X"].toarray()
    expected = np.where(X @ m.coef_ + m.intercept_ > 0, 7, 3)
    assert set(expected) == {3, 7}
    on_store = cli("predict", run, data["binary"]).stdout.split()
    assert on_store == [str(v) for v in expected]
    out = tmp_path / "pred.txt"
    cli("predict", run, data["svm"], "--out", out)
    assert open(out).read().split() == [str(v) for v in expected]
    assert open(out).read().count("\n") == N
    # a feature id beyond the training features is another feature space: refused with its line
    wide = tmp_path / "wide.svm"
    write_svmlight(wide, data["X"], data["y37"], extra=(D + 7, 123.0))
    r = cli("predict", run, wide, ok=False)
    assert r.exit_code == 1 and f"{wide}:1: feature id {D + 7} is beyond the model's {D} features" in r.stderr


@pytest.mark.parametrize("args,needle", [
    (["train", "{root}/nope.zarr", "--out", "{tmp}/r"], "nope.zarr"),
    (["train", "{binary}", "--out", "{tmp}/r", "--l2", "-1"], "l2"),
    (["train", "{binary}", "--out", "{tmp}/r", "--l1", "nan"], "l1"),
    (["train", "{binary}", "--out", "{tmp}/r", "--tol", "-1"], "tol"),
    (["train", "{binary}", "--out", "{tmp}/r", "--max-epochs", "-3"], "max-epochs"),
    (["train", "{binary}", "--out", "{tmp}/r", "--memory", "lots"], "memory"),
    (["train", "{binary}", "--out", "{tmp}/r", "--solver", "dspdc", "--loss", "hinge"], "dspdc"),
    (["train", "{binary}", "--out", "{tmp}/r", "--solver", "sdca", "--sampling", "importance"], "sampling"),
    (["train", "{multi}", "--out", "{tmp}/r", "--multiclass", "crammer-singer"], "crammer-singer"),
    (["train", "{multi}", "--out", "{tmp}/r", "--loss", "squared"], "multiclass"),
    (["train", "{binary}", "--out", "{tmp}/r", "--distributed", "local:2", "--solver", "dgpd"], None),
    (["train", "{reg}", "--out", "{tmp}/r", "--loss", "logistic"], "squared"),
    (["info", "{root}/nope.zarr"], "nope.zarr"),
    (["predict", "{tmp}/no-run", "{binary}"], None),
    (["evaluate", "{tmp}/no-run", "{binary}"], None),
    (["predict", "{tmp}/no-run", "{root}/nope.svm"], None),
    (["resume", "{tmp}/no-run"], "no-run"),
])
def test_user_errors_are_one_line(data, tmp_path, args, needle):
    fmt = dict(root=data["root"], binary=data["binary"], multi=data["multi"], reg=data["reg"], tmp=tmp_path)
    res = cli(*[a.format(**fmt) for a in args], ok=False)
    err = assert_one_line_error(res)
    if needle:
        assert needle in err, err
    # no half-made run directory is left behind by a refused train
    if args[0] == "train" and needle != "nope.zarr":
        assert not os.path.exists(tmp_path / "r") or not os.listdir(tmp_path / "r")


def test_squared_loss_on_binary_labels_is_allowed_or_refused_cleanly(data, tmp_path):
    """Squared loss on -1/+1 labels is least-squares classification: either trains or says why."""
    res = cli("train", data["binary"], "--out", tmp_path / "r", "--loss", "squared", "--l2", L2, "--tol", "1e-4",
              "--json", ok=False)
    if res.exit_code == 0:
        assert TRAIN_KEYS <= set(last_json(res.stdout))
    else:
        assert_one_line_error(res)


def test_existing_run_dir_is_not_overwritten(data, trained, tmp_path):
    run, out = trained
    before = sorted(os.listdir(run))
    coef = ooc.load_model(run).coef_.copy()
    res = cli("train", data["binary"], "--out", run, "--l2", "0.5", ok=False)
    err = assert_one_line_error(res)
    assert "overwrite" in err or "exists" in err
    assert sorted(os.listdir(run)) == before
    assert np.array_equal(ooc.load_model(run).coef_, coef)
    # an empty directory is fine; --overwrite replaces a non-empty one
    empty = tmp_path / "empty"
    empty.mkdir()
    cli("train", data["binary"], "--out", empty, "--l2", "0.5", "--max-epochs", "2")
    again = last_json(cli("train", data["binary"], "--out", empty, "--l2", "0.5", "--overwrite", "--json").stdout)
    assert again["converged"] is True


def test_resume_json_keys(trained, tmp_path):
    run, out = trained
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    r = last_json(cli("resume", copy, "--json").stdout)
    assert TRAIN_KEYS <= set(r)
    # resuming a finished run re-certifies the same state
    assert (r["primal"], r["gap"], r["epochs"]) == (out["primal"], out["gap"], out["epochs"])
    assert np.array_equal(ooc.load_model(copy).coef_, ooc.load_model(run).coef_)


def test_memory_below_what_a_run_holds_is_refused_naming_what_works(data, tmp_path):
    # --memory is a ceiling on the whole process: 4 KiB cannot hold the interpreter, let alone a group of 4
    small = cli("train", data["binary"], "--out", tmp_path / "small", "--l2", L2, "--tol", 1e-9, "--mix-blocks", 4,
                "--memory", "4KiB", "--json", ok=False)
    assert_one_line_error(small)
    msg = small.stderr
    assert "--memory is less than this run holds at once" in msg and "lower --mix-blocks" in msg
    assert not (tmp_path / "small").exists()  # refused before its first epoch, nothing left behind
    need = msg.split("the smallest --memory that works here is ")[1].split(" (")[0].replace(" ", "")
    # at the figure it names the run trains, and the iterates never depend on --memory
    fits = cli("train", data["binary"], "--out", tmp_path / "fits", "--l2", L2, "--tol", 1e-9, "--mix-blocks", 4,
               "--memory", need, "--json")
    big = cli("train", data["binary"], "--out", tmp_path / "big", "--l2", L2, "--tol", 1e-9, "--mix-blocks", 4,
              "--json")
    assert "warning" not in big.stderr + fits.stderr, big.stderr + fits.stderr
    a, b = last_json(fits.stdout), last_json(big.stdout)
    assert (a["primal"], a["dual"], a["epochs"]) == (b["primal"], b["dual"], b["epochs"])
    assert np.array_equal(ooc.load_model(tmp_path / "fits").coef_, ooc.load_model(tmp_path / "big").coef_)


#: What a command that does not train must not load (issue 20: every command pays its imports at start-up).
TRAINING_MODULES = ("ooc.config", "ooc.solvers.registry", "ooc.solvers.base", "ooc.engine", "ooc.train", "dask",
                    "distributed", "matplotlib", "sklearn")


def _modules_loaded_by(args) -> set:
    """The modules a fresh interpreter has loaded after ``ooc ARGS`` (run through ``ooc.cli.main``)."""
    code = ("import json, sys\nfrom ooc.cli import main\n"
            f"try:\n    main({[str(a) for a in args]!r})\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print(json.dumps(sorted(sys.modules)))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return set(json.loads(p.stdout.strip().splitlines()[-1]))


def test_help_and_convert_start_without_the_training_code(tmp_path):
    """``ooc --help`` loads neither NumPy nor the configuration; ``ooc convert`` (but with ``--json``, whose
    memory figures come from the solvers' registry) none of the training side."""
    loaded = _modules_loaded_by(["--help"])
    assert not loaded & {"numpy", "numba", "zarr", *TRAINING_MODULES}
    src = tmp_path / "a.svm"
    src.write_text("1 1:0.5 3:1\n-1 2:1\n")
    loaded = _modules_loaded_by(["convert", src, tmp_path / "a.zarr"])
    assert "ooc.store.ingest" in loaded
    assert not loaded & set(TRAINING_MODULES)


def test_train_help_lists_the_config_options_once():
    """The options made from ooc.config when click first reads them are there once, in TRAIN_OPTION_ORDER."""
    from ooc.cli import TRAIN_OPTION_ORDER

    cmd = main.commands["train"]
    names = [p.name for p in cmd.params]
    assert names == [p.name for p in cmd.params]  # made once: reading again changes nothing
    opts = [n for n in names if n in TRAIN_OPTION_ORDER]
    assert opts == list(TRAIN_OPTION_ORDER)
    assert names[:2] == ["store", "out"] and names[-4:] == ["warm_start", "overwrite", "as_json", "verbose"]
    help_text = cli("train", "--help").stdout
    assert help_text.count("--dgpd-rounds") == 1 and "--max-epochs" in help_text
    info_names = [p.name for p in main.commands["info"].params]
    # ooc info takes train's options (--warm-start too): whether THAT run fits --memory
    assert info_names == ["store", *TRAIN_OPTION_ORDER, "warm_start", "top", "as_json"]
