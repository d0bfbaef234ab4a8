"""``ooc info RUN``: the objective, the certificate training recorded, the largest weights by feature id."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import scipy.sparse as sp
from test_cli import assert_one_line_error, cli, last_json, write_svmlight

import ooc

#: ``ooc info RUN --json`` keys of a finished run (the contract: keys are added, never removed).
RUN_INFO_KEYS = {"run", "store", "n_rows", "n_cols", "solver", "loss", "l2", "l1", "bias", "tol", "objective",
                 "finished", "primal", "dual", "gap", "rel_gap", "epochs", "converged", "task", "classes",
                 "intercept", "n_features", "nnz_w", "top_features"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runinfo")
    rng = np.random.default_rng(7)
    X = sp.random(150, 12, density=0.4, random_state=7, format="csr", data_rvs=rng.standard_normal)
    X.data = np.round(X.data, 3)
    y = np.where(X @ rng.standard_normal(12) > 0, 1, -1)
    svm = root / "d.svm"
    write_svmlight(svm, X, y)  # 1-based ids
    cli("convert", svm, root / "d.zarr", "--dtype", "float64")
    cli("train", root / "d.zarr", "--out", root / "bin", "--l2", "1e-2", "--bias", "1", "--tol", "1e-9")
    multi = str(root / "m.zarr")
    ooc.convert(X, multi, y=rng.integers(0, 3, 150).astype(float), dtype="float64")
    cli("train", multi, "--out", root / "multi", "--l2", "1e-2", "--l1", "1e-2", "--tol", "1e-8")
    return root


def test_info_of_a_finished_run(runs):
    run = runs / "bin"
    i = last_json(cli("info", run, "--json", "--top", "4").stdout)
    assert RUN_INFO_KEYS <= set(i), RUN_INFO_KEYS - set(i)
    with open(run / "model" / "metrics.json") as f:
        recorded = json.load(f)
    for k in ("primal", "dual", "gap", "rel_gap", "epochs", "converged"):
        assert i[k] == recorded[k]
    assert i["converged"] and i["rel_gap"] <= i["tol"] == 1e-9
    model = ooc.load_model(run)
    order = np.argsort(-np.abs(model.coef_), kind="stable")[:4]
    assert [t["feature"] for t in i["top_features"]] == [int(j) + 1 for j in order]  # the file's 1-based ids
    assert [t["weight"] for t in i["top_features"]] == model.coef_[order].tolist()
    assert i["intercept"] == model.intercept_ and i["classes"] == [-1, 1]
    assert "logistic" in i["objective"] and "0.01/2 |w|^2" in i["objective"]
    text = cli("info", run, "--top", "2").stdout
    assert "certificate  converged" in text and f"{order[0] + 1}" in text


def test_info_of_a_multiclass_run_ranks_by_the_largest_class_weight(runs):
    i = last_json(cli("info", runs / "multi", "--json", "--top", "100").stdout)
    W = ooc.load_model(runs / "multi").coef_
    size = np.abs(W).max(axis=0)
    assert len(i["top_features"]) == int(np.count_nonzero(size)) == i["nnz_w"]  # l1: only the nonzero ones
    got = [t["feature"] for t in i["top_features"]]
    assert [size[j] for j in got] == sorted(size[size > 0], reverse=True)
    assert i["top_features"][0]["weights"] == W[:, got[0]].tolist()


def test_info_of_an_unfinished_run_says_how_to_continue(runs, tmp_path):
    run = tmp_path / "copy"
    shutil.copytree(runs / "bin", run)
    shutil.rmtree(run / "model")  # as a run stopped before its end leaves it
    i = last_json(cli("info", run, "--json").stdout)
    assert i["finished"] is False and i["converged"] is False
    last = [json.loads(line) for line in open(run / "history.jsonl")][-1]
    assert (i["epochs"], i["rel_gap"]) == (last["epoch"], last["rel_gap"])
    assert f"ooc resume {run}" in cli("info", run).stdout


def test_info_of_neither_a_store_nor_a_run_is_one_line(tmp_path):
    (tmp_path / "x").mkdir()
    err = assert_one_line_error(cli("info", tmp_path / "x", ok=False))
    assert "x" in err
