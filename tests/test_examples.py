"""The examples run as written, from the repository root, and print what they promise."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(tmp_path):
    env = dict(os.environ)
    # the examples call `ooc` and `python3`: use this interpreter's environment
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHON"] = sys.executable
    env["TMPDIR"] = str(tmp_path)  # the examples' temporary directories land here (and must be gone)
    env.pop("KEEP", None)
    return env


def _run(cmd, tmp_path, timeout=300):
    p = subprocess.run(cmd, cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{cmd} exited {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    return p.stdout


def test_python_api_example(tmp_path):
    out = _run([sys.executable, "examples/python_api.py"], tmp_path)
    assert re.search(r"store: 20000 rows x 5000 features", out)
    m = re.search(r"trained: converged=True after (\d+) epochs .* relative gap ([0-9.e+-]+)", out)
    assert m, out
    assert float(m.group(2)) <= 1e-6
    assert re.search(r"epoch +0 .*gap", out)
    acc = float(re.search(r"test accuracy \(predict\): ([0-9.]+)", out).group(1))
    ev = float(re.search(r"evaluate\(test.svm\): accuracy ([0-9.]+)", out).group(1))
    assert acc == pytest.approx(ev, abs=1e-4) and acc > 0.8
    assert "same coefficients as ooc.train: True" in out
    assert os.listdir(tmp_path) == []  # the example cleaned up after itself


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("gzip") is None, reason="needs bash and gzip")
def test_cli_walkthrough(tmp_path):
    out = _run(["bash", "examples/cli_walkthrough.sh"], tmp_path)
    assert "walkthrough done" in out
    assert re.search(r"wrote .*train\.zarr: 10000 rows", out)
    assert "stopped after 2 epochs: 3 history lines" in out
    # train --json: one JSON object on the last line of the command's output
    js = [json.loads(line) for line in out.splitlines() if line.startswith("{") and '"gap"' in line]
    assert js and js[-1]["converged"] is True and js[-1]["epochs"] > 2
    for key in ("primal", "dual", "gap", "epochs", "seconds", "nnz_w", "converged"):
        assert key in js[-1]
    assert re.search(r"accuracy +0\.\d+", out)
    m = re.search(r"(\d+) predictions, first ones: ((?:-?1 ){5})", out)
    assert m and m.group(1) == "2000", out
    assert re.search(r"certificate  converged: relative duality gap \S+ <= tol 1e-06", out)
    assert re.search(r"roc_auc +0\.\d+", out) and "confusion" in out
    assert "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 5000\nbias -1\nw\n" in out
    assert re.search(r"\d+ weight lines in weights.txt", out)
    assert os.listdir(tmp_path) == []
