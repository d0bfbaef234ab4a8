"""What the system refuses (permission denied, not a directory, a missing parent) is one line naming the
user's path: never a traceback, never the name of one of ooc's temporary or lock files.

Permissions are enforced for root only without CAP_DAC_OVERRIDE, so as root the commands run under
``setpriv`` with those capabilities dropped (the test is skipped where neither works).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import ooc


def _runner():
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    base = [exe] if os.path.exists(exe) else [sys.executable, "-m", "ooc.cli"]
    if os.geteuid() != 0:
        return base
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root without setpriv: permissions cannot be tested")
    caps = "-dac_override,-dac_read_search"
    probe = subprocess.run([setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"setpriv cannot drop capabilities here: {probe.stderr.decode().strip()}")
    return [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"] + base


def _one_line(cmd, *args, cwd=None) -> str:
    p = subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, timeout=300, cwd=cwd)
    assert p.returncode not in (0, None) and "Traceback" not in p.stderr, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ooc: error: "), p.stderr
    assert ".partial-" not in lines[0] and ".tmp-" not in lines[0] and ".lock" not in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("oserr")
    X = sp.random(300, 20, density=0.2, format="csr", random_state=0)
    y = np.where(np.asarray(X.sum(axis=1)).ravel() > 0.8, 1.0, -1.0)
    store = str(root / "s.zarr")
    ooc.convert(X, store, y=y)
    from sklearn.datasets import dump_svmlight_file

    svm = str(root / "x.svm")
    dump_svmlight_file(X, y, svm)
    run = str(root / "run")
    ooc.train(store, run, l2=1e-2, max_epochs=3)
    ro = root / "ro"
    ro.mkdir()
    os.chmod(ro, stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    yield {"root": root, "store": store, "svm": svm, "run": run, "ro": str(ro), "cmd": _runner()}
    os.chmod(ro, 0o755)


def test_permission_denied_writing(setup):
    s, cmd, ro = setup, setup["cmd"], setup["ro"]
    assert "ro/p.txt" in _one_line(cmd, "predict", s["run"], s["store"], "--out", os.path.join(ro, "p.txt"))
    assert "ro/t.zarr" in _one_line(cmd, "convert", s["svm"], os.path.join(ro, "t.zarr"))
    line = _one_line(cmd, "train", s["store"], "--out", os.path.join(ro, "r"))
    assert "ro/r" in line and "ermission" in line


def test_permission_denied_reading(setup, tmp_path):
    s, cmd = setup, setup["cmd"]
    store = tmp_path / "s.zarr"
    shutil.copytree(s["store"], store)
    os.chmod(store / "labels", 0)
    try:
        assert "s.zarr" in _one_line(cmd, "train", store, "--out", tmp_path / "r")
    finally:
        os.chmod(store / "labels", 0o755)
    run = tmp_path / "run"
    shutil.copytree(s["run"], run)
    os.chmod(run / "model" / "coef.npy", 0)
    try:
        assert "coef.npy" in _one_line(cmd, "predict", run, s["store"])
    finally:
        os.chmod(run / "model" / "coef.npy", 0o644)
    os.chmod(run, 0o555)
    try:
        assert str(run) in _one_line(cmd, "resume", run, "--max-epochs", "5")
    finally:
        os.chmod(run, 0o755)


def test_not_a_directory_and_missing_parent(setup, tmp_path):
    s, cmd = setup, setup["cmd"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert "not a directory" in _one_line(cmd, "train", s["store"], "--out", afile / "run")
    assert "not a directory" in _one_line(cmd, "predict", s["run"], s["store"], "--out", afile / "p")
    assert "does not exist" in _one_line(cmd, "convert", s["svm"], tmp_path / "no" / "s.zarr")
    # --out makes its missing parents (tests/test_newcomer.py); a STORE argument does not
    assert "not a directory" in _one_line(cmd, "train", s["store"], "--out", afile / "no" / "run")
