"""Byte flips and deletions in every file of a run directory: resume and load_model either refuse with one
line or give exactly the coefficients of an undamaged run, never other numbers and never a traceback.

A partial run (stopped at ``--max-epochs 2``, so it has a checkpoint and a model) is copied once per case;
each case damages one file (deleted, or one byte flipped at its start, middle or end) and then runs
``ooc resume`` in this process. Both kinds of dual state are covered: in memory (inside the checkpoint)
and paged per block (``--memory 4KiB``: files under ``state/duals``). A damaged checkpoint falls back to
an older one that verifies; when there is none the resume is refused naming the damaged file, which is
never deleted (ooc deletes only what it can prove it wrote).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

import ooc
from ooc.cli import main as cli

TRAIN = ["--l2", "1e-3", "--tol", "1e-9", "--seed", "3", "--checkpoint-every", "0"]
MODES = {"memory": [], "paged": ["--duals", "paged"]}
#: resumes run to this epoch (not to convergence: identical iterates are the point, and it is quick)
END = "6"


pytestmark = pytest.mark.usefixtures("no_plot")  # the plot is not under test here

def _invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=True)


def _one_line_error(r) -> str:
    assert r.exit_code not in (0, None), r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    err = r.stderr.strip().splitlines()
    errors = [line for line in err if line.startswith("ooc: error:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    return errors[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    # in memory where there is /dev/shm: every checkpoint and dual file is fsynced, which a busy disk makes slow
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    root = tempfile.mkdtemp(prefix="ooc-test-runint-", dir=shm) if shm else str(tmp_path_factory.mktemp("runint"))
    try:
        yield _make_runs(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def tmp_path(runs):  # noqa: F811 - the cases live beside the runs (in memory when possible)
    d = tempfile.mkdtemp(dir=runs[0])
    import pathlib

    return pathlib.Path(d)


def _make_runs(root):
    import pathlib

    root = pathlib.Path(root)
    rng = np.random.default_rng(0)
    X = sp.random(1500, 60, density=0.1, format="csr", random_state=1, dtype=np.float64)
    y = np.where(X @ rng.standard_normal(60) + 0.1 * rng.standard_normal(1500) > 0, 1.0, -1.0)
    store = str(root / "s.zarr")
    ooc.convert(X, store, y=y, block_bytes="32KiB", memory="1MiB", dtype="float64")
    out = {}
    for mode, extra in MODES.items():
        ref = root / f"ref-{mode}"
        r = _invoke("train", store, "--out", ref, "--max-epochs", END, *TRAIN, *extra)
        assert r.exit_code == 0, r.output
        part = root / f"part-{mode}"
        r = _invoke("train", store, "--out", part, "--max-epochs", "2", *TRAIN, *extra)
        assert r.exit_code == 0, r.output
        out[mode] = (str(part), ooc.load_model(str(ref)).coef_)
    return root, out


def _files(run: str) -> list[str]:
    found = []
    for dp, _, fs in os.walk(run):
        for f in fs:
            rel = os.path.relpath(os.path.join(dp, f), run)
            if rel not in (".lock", "convergence.png"):  # no content ooc reads back
                found.append(rel)
    return sorted(found)


def _damage(path: str, how: str) -> None:
    if how == "delete":
        os.remove(path)
        return
    b = bytearray(open(path, "rb").read())
    if not b:
        return
    at = {"start": 0, "middle": len(b) // 2, "end": len(b) - 1}[how]
    b[at] ^= 0x04
    with open(path, "wb") as f:
        f.write(b)


@pytest.mark.parametrize("mode", list(MODES))
def test_every_file_of_a_run_damaged(runs, mode, tmp_path):
    root, out = runs
    part, want = out[mode]
    outcomes = {"identical": 0, "refused": 0}
    # paged: the files that differ from the in-memory case (the checkpoint and the dual files)
    for rel in [f for f in _files(part) if mode == "memory" or f.startswith("state" + os.sep)]:
        for how in ("delete", "start", "middle", "end"):
            case = tmp_path / f"{rel.replace(os.sep, '_')}-{how}"
            shutil.copytree(part, case)
            _damage(str(case / rel), how)
            r = _invoke("resume", case, "--max-epochs", END, "--json")
            if r.exit_code == 0:
                got = ooc.load_model(str(case)).coef_
                assert np.array_equal(got, want), (rel, how)
                assert json.loads(r.stdout.strip().splitlines()[-1])["epochs"] == int(END)
                outcomes["identical"] += 1
            else:
                line = _one_line_error(r)
                assert str(case) in line or os.path.basename(rel) in line or "run" in line, (rel, how, line)
                outcomes["refused"] += 1
                if how != "delete":  # a file that does not verify is never deleted
                    assert (case / rel).exists(), (rel, how, line)
    assert outcomes["identical"] and outcomes["refused"], outcomes


@pytest.mark.parametrize("name", ["coef.npy", "model.json"])
def test_a_damaged_model_is_refused_not_used(runs, name, tmp_path):
    _, out = runs
    part, _ = out["memory"]
    want = ooc.load_model(part).coef_
    for how in ("delete", "start", "middle", "end"):
        case = tmp_path / how
        shutil.copytree(part, case)
        _damage(str(case / "model" / name), how)
        try:
            got = ooc.load_model(str(case)).coef_
        except (ValueError, FileNotFoundError) as exc:
            assert len(str(exc).splitlines()) == 1
            r = _invoke("predict", case, "/dev/null")
            _one_line_error(r)
            continue
        assert np.array_equal(got, want), (name, how)


def test_non_finite_state_is_refused_by_name_and_kept(runs, tmp_path):
    _, out = runs
    part, want = out["memory"]
    case = tmp_path / "nan"
    shutil.copytree(part, case)
    (ck,) = [d for d in os.listdir(case / "state") if d.startswith("ckpt-")]
    path = case / "state" / ck / "state.npz"
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["w"] = np.full_like(arrays["w"], np.nan)
    np.savez(path, **arrays)  # a well-formed file whose content is not the one checksummed, nor finite
    before = path.read_bytes()
    r = _invoke("resume", case, "--max-epochs", END, "--json")
    line = _one_line_error(r)
    assert f"remove the checkpoint folder {path.parent} yourself" in line, line
    assert path.read_bytes() == before  # never deleted nor replaced
    (ck_dir,) = [d for d in os.listdir(case / "state") if d.startswith("ckpt-")]
    shutil.rmtree(case / "state" / ck_dir)  # what the message says: then the run trains again from the start
    r = _invoke("resume", case, "--max-epochs", END, "--json")
    assert r.exit_code == 0, r.output
    assert np.array_equal(ooc.load_model(str(case)).coef_, want)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name, how", [("state.npz", "middle"), ("state.npz", "delete"), ("meta.json", "start"),
                                       ("meta.json", "delete")])
def test_the_advice_for_damaged_checkpoints_is_followed_once(runs, tmp_path, mode, name, how):
    """Every checkpoint damaged (any of its files, any way): the refusal names what to remove, the checkpoint
    FOLDERS (a checkpoint is its whole folder); doing that, and only that, lets 'ooc resume' train the run
    again to the same coefficients. Naming the damaged file had looped: removed, the next resume named it
    again, gone."""
    _, out = runs
    part, want = out[mode]
    case = tmp_path / "all"
    shutil.copytree(part, case)
    for ck in [d for d in os.listdir(case / "state") if d.startswith("ckpt-")]:
        _damage(str(case / "state" / ck / name), how)
    line = _one_line_error(_invoke("resume", case, "--max-epochs", END, "--json"))
    said = re.search(r"remove (?:the checkpoint folders? )?(.+?) yourself", line)
    assert said, line
    for p in said.group(1).split(" "):
        assert os.path.isdir(p) and os.path.basename(p).startswith("ckpt-"), line
        shutil.rmtree(p)
    r = _invoke("resume", case, "--max-epochs", END, "--json")
    assert r.exit_code == 0, (line, r.output)
    assert np.array_equal(ooc.load_model(str(case)).coef_, want)


def test_a_bad_latest_never_deletes_the_good_checkpoint(runs, tmp_path):
    _, out = runs
    part, want = out["paged"]
    for text in ("ckpt-999999", "", "../../etc", "garbage\n"):
        case = tmp_path / f"latest{len(text)}"
        shutil.copytree(part, case)
        (case / "LATEST").write_text(text)
        r = _invoke("resume", case, "--max-epochs", END, "--json")
        if not text.startswith("ckpt-"):  # not a LATEST ooc wrote: refused by name, kept
            assert "LATEST" in _one_line_error(r)
            assert (case / "LATEST").read_text() == text
            continue
        assert r.exit_code == 0, r.output
        assert "starts again" not in r.stderr, r.stderr  # the good checkpoint was used
        assert np.array_equal(ooc.load_model(str(case)).coef_, want)
