"""Every file a run reads back proves it is this run's, in this place (docs/formats.rst#a-runs-files-are-its-own).

A matrix of swaps: {checkpoint, model, certificate, history line order, batch run directory} x {from another run
on the same store, from the same run continued on another store (a whole copy: same identity), from a run of
another option, reordered within the run}. Each file is whole and verifies on its own; each swap is refused
naming the path (or the history's line number), exit non-zero, no traceback, and nothing of the run is used,
changed or deleted because of it.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ooc
from ooc.cli import main as cli

TRAIN = ["--tol", "1e-9", "--seed", "1", "--checkpoint-every", "0", "--max-epochs", "2"]
#: ``a``'s grid point (ooc batch): the options ``a`` was trained with
POINT = {"l2": 1e-2, "tol": 1e-9, "seed": 1, "checkpoint_every": 0, "max_epochs": 2}
SOURCES = ("same store", "other store", "other option", "reordered")
SETTINGS = settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))

pytestmark = pytest.mark.usefixtures("no_plot")  # the plot is not under test here


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=True)


def ok(*args):
    r = run(*args)
    assert r.exit_code == 0, (args, r.stderr, r.exception)
    return r


def one_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("ooc: warning")]
    assert r.exit_code == 1 and len(lines) == 1 and lines[0].startswith("ooc: error: "), (r.exit_code, r.stderr)
    assert "Traceback" not in r.stderr
    return lines[0]


def svm(path, n, seed):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for _ in range(n):
            cols = np.sort(rng.choice(12, 4, replace=False)) + 1
            f.write(f"{1 if rng.random() < 0.5 else -1} " + " ".join(f"{j}:{rng.random():.3f}" for j in cols) + "\n")


def _files(d) -> dict:
    out = {}
    for dp, _, fs in os.walk(d):
        for f in fs:
            p = os.path.join(dp, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = fh.read()
    return out


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """``a``: a run on ``s.zarr`` stopped at epoch 2 (a checkpoint, a model, three history lines); the sources of
    swapped files: ``same store`` another run on it (same options, one epoch more), ``other store`` a whole copy
    of ``a`` continued on ``s2.zarr`` (``s.zarr`` with rows appended: the same run identity), ``other option`` a
    run on ``s.zarr`` with another ``--l2``."""
    root = tmp_path_factory.mktemp("swapped")
    svm(root / "d.svm", 60, 0)
    svm(root / "n.svm", 20, 3)
    ok("convert", root / "d.svm", root / "s.zarr")
    ok("append", root / "s.zarr", root / "n.svm", "--out", root / "s2.zarr")
    ok("train", root / "s.zarr", "--out", root / "a", "--l2", "1e-2", *TRAIN)
    ok("train", root / "s.zarr", "--out", root / "same store", "--l2", "1e-2", *TRAIN[:-1], "3")
    shutil.copytree(root / "a", root / "other store")
    ok("resume", root / "other store", "--store", root / "s2.zarr", "--max-epochs", "2")
    ok("train", root / "s.zarr", "--out", root / "other option", "--l2", "1e-3", *TRAIN)
    return root


def _case(made, tmp_path_factory):
    case = tmp_path_factory.mktemp("case") / "run"
    shutil.copytree(made / "a", case)
    return case


def _ckpts(run) -> list[str]:
    return sorted(n for n in os.listdir(run / "state") if n.startswith("ckpt-"))


# -- checkpoints --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("keep_own", [True, False])
def test_a_swapped_checkpoint_is_refused_by_name(made, tmp_path_factory, source, keep_own):
    """A checkpoint directory from another run, from a copy of the run continued on another store, from a run
    of another option, or the run's own under another number: ``ooc resume`` refuses naming it, before
    anything is written; the run's own checkpoint (``keep_own``: left beside it) is neither replaced nor pruned."""
    case = _case(made, tmp_path_factory)
    (own,) = _ckpts(case)
    if source == "reordered":
        theirs, name = case / "state" / own, f"ckpt-{int(own[5:]) + 7:06d}"
    else:
        src = made / source
        theirs = src / "state" / _ckpts(src)[-1]
        name = theirs.name if theirs.name != own else f"ckpt-{int(own[5:]) + 50:06d}"
    shutil.copytree(theirs, case / "state" / name)
    if not keep_own:
        shutil.rmtree(case / "state" / own)
    before = _files(case)
    err = one_line(run("resume", case, "--max-epochs", "4"))
    assert str(case / "state" / name) in err, err
    assert _files(case) == before


def test_a_checkpoint_of_the_runs_own_copy_is_the_runs(made, tmp_path_factory):
    """The same run on the same store (``cp -r RUN COPY``, the copy resumed): its checkpoint is a state of this
    run's trajectory, and a resume from it ends where the run would (the refusals above are not of copies)."""
    case = _case(made, tmp_path_factory)
    twin = tmp_path_factory.mktemp("twin") / "run"
    shutil.copytree(made / "a", twin)
    ok("resume", twin, "--max-epochs", "3")
    theirs = twin / "state" / _ckpts(twin)[-1]
    shutil.copytree(theirs, case / "state" / theirs.name)
    ok("resume", case, "--max-epochs", "3")
    assert np.array_equal(ooc.load_model(str(case)).coef_, ooc.load_model(str(twin)).coef_)


# -- the model and its certificate --------------------------------------------------------------------------
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("what", ["model", "certificate"])
@pytest.mark.parametrize("command", ["predict", "load_model", "warm start"])
def test_a_swapped_model_or_certificate_is_refused_by_name(made, tmp_path_factory, source, what, command):
    """``model/`` whole (``model``) or its ``metrics.json`` alone (``certificate``) from another run, from a copy of
    the run continued on another store, from a run of another option; or (``reordered``) the run's own files
    swapped with each other: the model (or its final duals, for a warm start from the run) is refused naming the
    file, and nothing is changed."""
    case = _case(made, tmp_path_factory)
    mdir = case / "model"
    if source == "reordered":
        a, b = ("coef.npy", "duals.npy") if what == "model" else ("metrics.json", "model.json")
        ra, rb = (mdir / a).read_bytes(), (mdir / b).read_bytes()
        (mdir / a).write_bytes(rb)
        (mdir / b).write_bytes(ra)
    else:
        names = os.listdir(made / source / "model") if what == "model" else ["metrics.json"]
        for n in names:
            shutil.copy(made / source / "model" / n, mdir / n)
    before = _files(case)
    if command == "load_model":
        with pytest.raises(ValueError) as exc:
            ooc.load_model(str(case))
        err = str(exc.value)
    elif command == "warm start":
        err = one_line(run("train", made / "s.zarr", "--out", case.parent / "w", "--l2", "1e-3", "--solver", "sdca",
                           "--warm-start", case, *TRAIN))
    else:
        err = one_line(run("predict", case, made / "d.svm", "--out", case.parent / "p.txt"))
    assert str(mdir) in err, err
    assert _files(case) == before


# -- the history's order -------------------------------------------------------------------------------------
@SETTINGS
@given(data=st.data())
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("command", ["resume", "info"])
def test_history_lines_out_of_place_are_refused_by_number(made, tmp_path_factory, source, command, data):
    """A line the run did not write at that place: another run's, one of the run's copy continued on another
    store (same identity), one of a run of another option (spliced in, or in place of one); or the run's own lines
    (``reordered``) swapped, repeated or removed: refused naming the first line out of place, the file kept."""
    case = _case(made, tmp_path_factory)
    if command == "info":  # of a run that has not finished (a finished run's certificate is its metrics)
        shutil.rmtree(case / "model")
    mine = (case / "history.jsonl").read_bytes().splitlines(keepends=True)
    if source == "reordered":
        how = data.draw(st.sampled_from(["swap", "repeat", "remove"]), label="how")
        i = data.draw(st.integers(0, len(mine) - 2), label="i")
        j = data.draw(st.integers(i + 1, len(mine) - 1), label="j")
        lines = list(mine)
        if how == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        elif how == "repeat":
            lines.insert(j, lines[i])
        else:  # one before the last (the last ones: the run stopped earlier, which a checkpoint says)
            del lines[i]
        first = i + 1 if how != "repeat" else j + 1
    else:
        theirs = [ln for ln in (made / source / "history.jsonl").read_bytes().splitlines(keepends=True)
                  if ln not in mine]  # a copy of the run shares its first lines
        line = theirs[data.draw(st.integers(0, len(theirs) - 1), label="line")]
        at = data.draw(st.integers(0, len(mine) - 1), label="at")
        replace = data.draw(st.booleans(), label="replace")
        lines = mine[:at] + [line] + mine[at + replace:]
        first = at + 1
    (case / "history.jsonl").write_bytes(b"".join(lines))
    before = _files(case)
    err = one_line(run(*(["info", case] if command == "info" else ["resume", case, "--max-epochs", "4"])))
    assert f"history.jsonl: line {first}" in err, err
    assert _files(case) == before


# -- a batch's run directories ------------------------------------------------------------------------------
@pytest.mark.parametrize("source", SOURCES)
def test_a_batch_reuses_a_run_directory_only_for_its_grid_point(made, tmp_path_factory, source):
    """A run directory at a grid point's name holding a run of another point (another run of the same store
    with another ``max_epochs``, a run continued on another store, a run of another ``l2``; ``reordered``: two
    points' directories swapped) is reported failed naming it, never credited to the point, and left as it is."""
    from ooc.batch import run_one

    root = tmp_path_factory.mktemp("batch")
    points = {"a": dict(POINT, store=str(made / "s.zarr"))}
    if source == "reordered":
        points["other option"] = dict(POINT, store=str(made / "s.zarr"), l2=1e-3)
        shutil.copytree(made / "other option", root / "a")
        shutil.copytree(made / "a", root / "other option")
    else:
        shutil.copytree(made / source, root / "a")
    for name, point in points.items():
        before = _files(root / name)
        row = run_one(str(root / name), point)
        assert row["status"] == "failed" and str(root / name) in row["error"], row
        assert row["primal"] == "" and _files(root / name) == before


def test_a_batch_reuses_the_run_made_for_its_grid_point(made, tmp_path):
    """The run made for the point (any name it is found under) is skipped as finished (the refusals above are
    not of the point's own runs)."""
    from ooc.batch import run_one

    shutil.copytree(made / "a", tmp_path / "a")
    row = run_one(str(tmp_path / "a"), dict(POINT, store=str(made / "s.zarr")))
    assert row["status"] == "ok" and row["state"] == "skipped", row
