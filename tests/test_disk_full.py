"""A full disk at every write site: one line, nothing lost, and the next command gives the right result.

A small tmpfs (where mounting is permitted; skipped elsewhere) holds the output; a filler file leaves a
chosen number of bytes free, swept from nothing to about what the command needs, so the disk fills up
at each place in turn: the run directory's creation, the dual files, a checkpoint, the history, the
model, the plot (``train``); the predictions file (``predict --out``); the new store (``convert
--overwrite``). Each time the command either succeeds or ends with ONE ``ooc: error:`` line saying the
disk is full, no traceback; what was there before is intact; once space is freed, ``ooc resume`` (or
the same command again) gives exactly the result of a run that never saw a full disk.
"""

from __future__ import annotations

import contextlib
import os
import shutil

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner
from faults import small_fs

import ooc
from ooc.cli import main as cli

TRAIN = ["--l2", "1e-3", "--tol", "1e-9", "--max-epochs", "6", "--seed", "2", "--checkpoint-every", "0"]


pytestmark = pytest.mark.usefixtures("no_plot")  # the plot is not under test here

def _invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=True)


def _free(directory: str) -> int:
    s = os.statvfs(directory)
    return s.f_bavail * s.f_frsize


@contextlib.contextmanager
def _filled(directory: str, leave: int):
    """A filler file leaving about ``leave`` bytes free, removed at the end."""
    path = os.path.join(directory, "filler")
    with open(path, "wb") as f:
        f.write(b"\0" * max(_free(directory) - leave, 0))
    try:
        yield
    finally:
        os.remove(path)


def _full_disk_line(r) -> str:
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("ooc: error:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "space" in errors[0].lower() or "disk is full" in errors[0].lower(), errors[0]
    return errors[0]


def _leftovers(directory: str) -> list[str]:
    return [os.path.join(dp, f) for dp, ds, fs in os.walk(directory) for f in fs + ds
            if ".tmp-" in f or ".partial-" in f]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("full")
    rng = np.random.default_rng(4)
    X = sp.random(1200, 80, density=0.1, format="csr", random_state=2, dtype=np.float64)
    y = np.where(X @ rng.standard_normal(80) > 0, 1.0, -1.0)
    store = str(root / "s.zarr")
    ooc.convert(X, store, y=y, block_bytes="16KiB", memory="1MiB", dtype="float64")
    other = str(root / "t.zarr")
    ooc.convert(X[:600], other, y=y[:600], block_bytes="16KiB", memory="1MiB", dtype="float64")
    refs = {}
    for mode, extra in {"memory": [], "paged": ["--duals", "paged"]}.items():
        r = _invoke("train", store, "--out", root / f"ref-{mode}", *TRAIN, *extra)
        assert r.exit_code == 0, r.output
        refs[mode] = (extra, ooc.load_model(str(root / f"ref-{mode}")).coef_)
    return {"root": root, "store": store, "other": other, "refs": refs, "X": X}


@pytest.mark.parametrize("mode", ["memory", "paged"])
def test_train_on_a_full_disk_at_every_write_site(data, tmp_path, mode):
    extra, want = data["refs"][mode]
    with small_fs(tmp_path / "mnt", "4m") as mnt:
        probe = os.path.join(mnt, "probe")
        before = _free(mnt)
        assert _invoke("train", data["store"], "--out", probe, *TRAIN, *extra).exit_code == 0
        need = before - _free(mnt) + (64 << 10)
        shutil.rmtree(probe)
        outcomes = []
        for i, leave in enumerate(sorted({0, 4096, 12 << 10} | {int(need * f) for f in np.linspace(0.05, 1.0, 7)})):
            run = os.path.join(mnt, f"run{i}")
            with _filled(mnt, leave):
                r = _invoke("train", data["store"], "--out", run, *TRAIN, *extra)
                if r.exit_code != 0:
                    outcomes.append(_full_disk_line(r))
            # space again: the user's next step
            if os.path.exists(os.path.join(run, "run.json")):
                r = _invoke("resume", run)
            else:
                assert not os.path.exists(run), os.listdir(run)  # a run directory appears whole or not at all
                r = _invoke("train", data["store"], "--out", run, *TRAIN, *extra)
            assert r.exit_code == 0, (leave, r.output)
            assert np.array_equal(ooc.load_model(run).coef_, want), leave
            assert not _leftovers(run)
            shutil.rmtree(run)
        assert outcomes, "the sweep never filled the disk"


def test_predict_out_on_a_full_disk_keeps_the_old_file(data, tmp_path):
    run = str(data["root"] / "ref-memory")
    with small_fs(tmp_path / "mnt", "1m") as mnt:
        out = os.path.join(mnt, "pred.txt")
        from ooc.owned import write_bytes

        # as an earlier 'ooc predict --out' would: listed as ooc's predictions
        write_bytes(out, b"previous predictions\n", kind="predictions")
        with _filled(mnt, 0):
            r = _invoke("predict", run, data["store"], "--out", out)
            _full_disk_line(r)
        assert open(out).read() == "previous predictions\n"
        assert not _leftovers(mnt)
        assert _invoke("predict", run, data["store"], "--out", out).exit_code == 0
        assert len(open(out).read().splitlines()) == 1200


def test_convert_overwrite_on_a_full_disk_keeps_the_old_store(data, tmp_path):
    from sklearn.datasets import dump_svmlight_file

    src = str(tmp_path / "x.svm")
    X = data["X"]
    dump_svmlight_file(X, np.where(np.asarray(X.sum(axis=1)).ravel() > 0.5, 1, -1), src)
    with small_fs(tmp_path / "mnt", "3m") as mnt:
        store = os.path.join(mnt, "s.zarr")
        shutil.copytree(data["other"], store)
        old = ooc.open_store(store).fingerprint
        full = 0
        for leave in (0, 32 << 10, 128 << 10, 512 << 10):
            with _filled(mnt, leave):
                r = _invoke("convert", src, store, "--overwrite", "--block-bytes", "16KiB")
                if r.exit_code != 0:
                    _full_disk_line(r)
                    full += 1
                    assert ooc.open_store(store).fingerprint == old  # the old store, whole
                else:
                    assert ooc.open_store(store).fingerprint != old
                    break
            assert not _leftovers(mnt)
        assert full, "the disk never filled up"
