"""An output is replaced only after a re-check at the moment of the swap, only by its own kind, one writer at a time.

docs/formats.rst#ownership ("Replacing an output"). Three matrices, each made of every command that replaces
an output:

* command x output x "the user changes the old output while the command runs": the change is made at the
  exact moment the new output is swapped in (``ooc.fsutil.swap_into_place`` wrapped: deterministic, no
  sleeps); the command is refused in one line naming the user's entry, which is kept, and nothing of the
  command is left behind;
* command x store output x "another process is writing the same store": the other process's lock is held
  here (``ooc.owned.exclusive``); the command is refused in one line naming the store and that process,
  the store unchanged;
* command x kind of ooc artifact at its output path: replaced only when the artifact is of the command's
  own kind (predictions by predict, an export by export, a store by convert, a run by train), otherwise
  refused by name, byte for byte unchanged; a new output inside a store or a run is refused too.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ooc import fsutil, owned
from ooc.cli import main as cli

TRAIN = ["--l2", "1e-2", "--tol", "1e-4", "--max-epochs", "3", "--checkpoint-every", "0"]


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=True)


def ok(*args):
    r = run(*args)
    assert r.exit_code == 0, (args, r.stderr, r.exception)
    return r


def one_line(r) -> str:
    """The one error line of a refused command (exit 1, or 2 for click's usage errors), no traceback."""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("ooc: warning")]
    assert r.exit_code in (1, 2) and len(lines) == 1 and lines[0].startswith(("ooc: error: ", "Error: ")), \
        (r.exit_code, r.stderr, r.exception)
    assert "Traceback" not in r.stderr
    return lines[0]


def svm(path, n, seed):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for _ in range(n):
            cols = np.sort(rng.choice(12, 4, replace=False)) + 1
            f.write(f"{1 if rng.random() < 0.5 else -1} " + " ".join(f"{j}:{rng.random():.3f}" for j in cols) + "\n")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Inputs, a store and a finished run on it."""
    root = tmp_path_factory.mktemp("replace")
    svm(root / "d.svm", 60, 0)
    svm(root / "more.svm", 20, 2)
    ok("convert", root / "d.svm", root / "s.zarr")
    ok("train", root / "s.zarr", "--out", root / "run", *TRAIN)
    return root


def snapshot(path) -> dict:
    """Every entry under ``path`` (or the file itself) and its bytes."""
    path = str(path)
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return {"": f.read()}
    out = {}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), path)] = None
        for n in files:
            with open(os.path.join(root, n), "rb") as f:
                out[os.path.relpath(os.path.join(root, n), path)] = f.read()
    return out


def leftovers(folder) -> list[str]:
    """ooc's hidden temporaries left in ``folder`` (its manifest aside)."""
    return [n for n in os.listdir(folder) if n.startswith(".") and n != owned.MANIFEST]


# -- what each command writes, and how its output is made first ----------------------------------------
#: command -> (the kind of output it writes, whether its output is a directory)
WRITERS = {
    "convert": ("store", True),
    "convert-hdf5": ("store", False),
    "append-in-place": ("store", True),
    "train": ("run", True),
    "predict": ("predictions", False),
    "export": ("export", False),
}


def command(made, name, target):
    """The command line of ``name`` writing ``target`` (replacing it: --overwrite where the command has it)."""
    return {
        "convert": ["convert", made / "d.svm", target, "--overwrite"],
        "convert-hdf5": ["convert", made / "d.svm", target, "--format", "hdf5", "--overwrite"],
        "append-in-place": ["append", target, made / "more.svm"],
        "train": ["train", made / "s.zarr", "--out", target, *TRAIN, "--overwrite"],
        "predict": ["predict", made / "run", made / "d.svm", "--out", target],
        "export": ["export", made / "run", "--format", "text", "--out", target, "--overwrite"],
    }[name]


#: kind of ooc artifact -> how to make one at a path
ARTIFACTS = {
    "zarr-store": lambda made, p: shutil.copytree(made / "s.zarr", p),  # a whole copy is vouched for as the original
    "hdf5-store": lambda made, p: ok("convert", made / "d.svm", p, "--format", "hdf5"),
    "run": lambda made, p: shutil.copytree(made / "run", p),
    "predictions": lambda made, p: ok("predict", made / "run", made / "d.svm", "--out", p),
    "export": lambda made, p: ok("export", made / "run", "--format", "text", "--out", p),
}
ARTIFACT_KIND = {"zarr-store": "store", "hdf5-store": "store", "run": "run", "predictions": "predictions",
                 "export": "export"}


def make_own_output(made, name, target):
    """Make ``target`` as ``name`` itself would (an earlier run of the same command)."""
    if name == "append-in-place":
        ok("convert", made / "d.svm", target)
    else:
        ok(*[a for a in command(made, name, target) if a != "--overwrite"])


# -- 1. the user changes the old output while the command runs ---------------------------------------
@pytest.mark.parametrize("name", list(WRITERS))
def test_a_change_made_during_the_run_is_found_at_the_swap(made, tmp_path, monkeypatch, name):
    target = tmp_path / "out"
    make_own_output(made, name, target)
    is_dir = os.path.isdir(target)
    real = fsutil.swap_into_place
    done = []

    def user_acts_now(new, final):
        """The user's change lands after every check the command made before it swaps."""
        if os.path.abspath(final) == str(target) and not done:
            done.append(True)
            if is_dir:
                (target / "notes.txt").write_text("my notes\n")
            else:
                with open(target, "ab") as f:
                    f.write(b"my edit\n")
        return real(new, final)

    monkeypatch.setattr(fsutil, "swap_into_place", user_acts_now)
    before, names = snapshot(target), sorted(os.listdir(tmp_path))
    err = one_line(run(*command(made, name, target)))
    assert done, "the command never swapped its output in"
    named = str(target / "notes.txt") if is_dir else str(target)
    assert named in err, err
    after = snapshot(target)
    if is_dir:  # the old output, whole, with the user's file in it
        assert after.pop("notes.txt") == b"my notes\n" and after == before
    else:
        assert after[""] == before[""] + b"my edit\n"
    assert sorted(os.listdir(tmp_path)) == names  # nothing of the command's left, hidden or not


# -- 2. another process writes the same store --------------------------------------------------------
@pytest.mark.parametrize("name", ["convert", "convert-hdf5", "append-in-place"])
def test_a_store_has_one_writer_at_a_time(made, tmp_path, name):
    target = tmp_path / "out"
    make_own_output(made, name, target)
    before = snapshot(target)
    with owned.exclusive(str(target), "the other command"):  # held as another ooc process holds it
        err = one_line(run(*command(made, name, target)))
    assert str(target) in err and "another ooc process" in err, err
    assert snapshot(target) == before
    assert leftovers(tmp_path) == []
    ok(*command(made, name, target))  # free again once the other one is done


def test_an_append_while_another_process_appends_is_refused_naming_it(made, tmp_path):
    """The lock holds across processes: a child holding the store's lock (as a running ``ooc append``
    does) makes an in-place append refused at once, naming the child's pid; the store keeps its rows."""
    import subprocess
    import sys

    store = tmp_path / "a.zarr"
    ok("convert", made / "d.svm", store)
    child = subprocess.Popen([sys.executable, "-c", "import sys; from ooc import owned\n"
                              "with owned.exclusive(sys.argv[1], 'x'):\n print('held', flush=True); sys.stdin.read()",
                              str(store)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        err = one_line(run("append", store, made / "more.svm"))
        assert f"pid {child.pid}" in err and str(store) in err, err
    finally:
        child.communicate("")
    assert json.loads(ok("info", store, "--json").stdout)["n_rows"] == 60
    ok("append", store, made / "more.svm")  # the child is gone: its lock with it


def test_the_lock_names_the_other_process(tmp_path):
    """The refusal says which process holds the store (its id, from the lock file)."""
    with owned.exclusive(str(tmp_path / "s.zarr"), "x"):
        with pytest.raises(owned.InUse, match=f"pid {os.getpid()}"):
            with owned.exclusive(str(tmp_path / "." / "s.zarr"), "the append"):
                pass
    with owned.exclusive(str(tmp_path / "s.zarr"), "x"):  # released on exit
        pass


# -- 3. a command replaces only its own kind of output ------------------------------------------------
@pytest.mark.parametrize("artifact", list(ARTIFACTS) + ["store-member", "new-in-store", "new-in-run"])
@pytest.mark.parametrize("name", ["convert", "train", "predict", "export"])
def test_a_command_replaces_only_its_own_kind(made, tmp_path, name, artifact):
    if artifact == "store-member":  # a file inside a store: the store's, whatever the command
        shutil.copytree(made / "s.zarr", tmp_path / "st.zarr")
        target = tmp_path / "st.zarr" / "zarr.json"
        watched, mine = tmp_path / "st.zarr", False
    elif artifact.startswith("new-in-"):  # a new output inside a store or a run: it would become theirs
        watched = tmp_path / "inside"
        shutil.copytree(made / ("s.zarr" if artifact == "new-in-store" else "run"), watched)
        target, mine = watched / "mine", False
    else:
        target = tmp_path / "out"
        ARTIFACTS[artifact](made, target)
        watched, mine = target, ARTIFACT_KIND[artifact] == WRITERS[name][0]
    before = snapshot(watched)
    r = run(*command(made, name, target))
    if mine:
        assert r.exit_code == 0, (r.stderr, r.exception)
        return
    err = one_line(r)
    assert str(target) in err or os.path.basename(target) in err, err
    assert snapshot(watched) == before


# -- the rule itself, drawn: any kind written x any kind there x any change at the swap ---------------------
FILE_KINDS = ["predictions", "export", "batch", "data", "store"]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(writes=st.sampled_from(FILE_KINDS), there=st.sampled_from([None, "user's"] + FILE_KINDS),
       change=st.sampled_from([None, "append", "replace-by-user-file", "directory", "symlink"]))
def test_put_replaces_only_its_own_unchanged_kind(tmp_path_factory, writes, there, change):
    """``ooc.owned.write_bytes`` (every file output: predictions, exports, batch reports, demo data, HDF5 stores
    are put the same way) replaces what is at its path only when that is ooc's output of the same kind and
    nothing changed it until the swap; otherwise refused by name, the folder exactly as the user left it."""
    d = tmp_path_factory.mktemp("put")
    target = d / "out"
    if there == "user's":
        target.write_bytes(b"mine\n")
    elif there is not None:
        owned.write_bytes(str(target), b"ooc's old output\n", kind=there)
    real = fsutil.swap_into_place
    done = []

    def user_acts_now(new, final):
        """The user's change, once, just before the first swap."""
        if os.path.abspath(final) == str(target) and os.path.lexists(target) and change and not done:
            done.append(True)
            if change == "append":
                with open(target, "ab") as f:
                    f.write(b"my edit\n")
            elif change == "replace-by-user-file":
                target.unlink()
                target.write_bytes(b"mine now\n")
            elif change == "directory":
                target.unlink()
                target.mkdir()
                (target / "notes.txt").write_text("mine\n")
            else:
                target.unlink()
                os.symlink(d / "elsewhere", target)
        return real(new, final)

    fsutil.swap_into_place = user_acts_now
    try:
        before = None
        replaced = there is None or (there == writes and not change)
        try:
            if not replaced and there is not None and not change:
                before = snapshot(target)
            owned.write_bytes(str(target), b"new\n", kind=writes, what="the new output")
            error = None
        except owned.NotOurs as exc:
            error = str(exc)
    finally:
        fsutil.swap_into_place = real
    if replaced:
        assert error is None and target.read_bytes() == b"new\n"
        assert owned.foreign_entry(str(target)) is None  # listed, as the kind it is
        return
    assert error is not None and str(target) in error and "\n" not in error, error
    assert os.path.lexists(target) and (os.path.islink(target) or snapshot(target) != {"": b"new\n"})
    if before is not None:
        assert snapshot(target) == before
    assert sorted(os.listdir(d)) == sorted(["out", owned.MANIFEST] if os.path.lexists(d / owned.MANIFEST) else ["out"])
