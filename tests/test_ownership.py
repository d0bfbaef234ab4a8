"""ooc owns only what it made, leaves nothing behind, verifies what it reads back (docs/formats.rst#ownership).

* Every output (store, run, export, predictions, batch reports, demo files, a store appended in place)
  x every intrusion (a user's file inside, ooc's marker copied into a user's folder, a symbolic link,
  an ooc file edited since): refused in one line naming the entry, the user's files unchanged.
* A temporary of a process that died (SIGKILL) is removed by the next command of any kind; a live
  process's is not.
* Read back: a chunk file of another conversion of the same shape is refused; a damaged line of
  ``history.jsonl`` is refused by its number (a last line without its newline too); a flipped byte in
  ``model/duals.npy`` stops a warm start.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ooc.cli import main as cli
from ooc.fsutil import TEMPORARY
from ooc.runs.rundir import RunDir, RunError

TRAIN = ["--l2", "1e-2", "--tol", "1e-4", "--max-epochs", "3", "--checkpoint-every", "0"]


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=True)


def ok(*args):
    r = run(*args)
    assert r.exit_code == 0, (args, r.stderr, r.exception)
    return r


def one_line(r) -> str:
    """The one error line of a failed command (exit status 1, or 2 for click's usage errors)."""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith(("ooc: warning", "failed: "))]
    assert r.exit_code in (1, 2) and len(lines) == 1 and lines[0].startswith("ooc: error: "), (r.exit_code, r.stderr)
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
    """A store, a finished run on it, another conversion of the same shape, more rows."""
    root = tmp_path_factory.mktemp("own")
    svm(root / "d.svm", 60, 0)
    svm(root / "d2.svm", 60, 1)
    svm(root / "more.svm", 20, 2)
    ok("convert", root / "d.svm", root / "s.zarr")
    ok("convert", root / "d2.svm", root / "other.zarr")
    ok("train", root / "s.zarr", "--out", root / "run", *TRAIN)
    return root


# -- ownership: every output x every intrusion ---------------------------------------------------
def _output_commands(root, target):
    """kind -> (the command writing ``target``, how ooc makes ``target`` first: a directory or a file)."""
    return {
        "convert": (["convert", root / "d.svm", target, "--overwrite"], "dir"),
        "train": (["train", root / "s.zarr", "--out", target, *TRAIN, "--overwrite"], "dir"),
        "export": (["export", root / "run", "--format", "text", "--out", target, "--overwrite"], "file"),
        "predict": (["predict", root / "run", root / "d.svm", "--out", target], "file"),
        "append-in-place": (["append", target, root / "more.svm"], "dir-store"),
    }


INTRUSIONS = ("user-file-inside", "copied-marker", "symlink", "edited")


@pytest.mark.parametrize("intrusion", INTRUSIONS)
@pytest.mark.parametrize("kind", ["convert", "train", "export", "predict", "append-in-place"])
def test_outputs_replace_only_what_ooc_wrote(made, tmp_path, kind, intrusion):
    target = tmp_path / "out"
    cmd, shape = _output_commands(made, target)[kind]
    if shape == "dir-store" and intrusion in ("user-file-inside", "edited"):
        ok("convert", made / "d.svm", target)
    user = {}
    if intrusion == "symlink":
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "keep.txt").write_text("keep me\n")
        user[tmp_path / "mine" / "keep.txt"] = "keep me\n"
        os.symlink(tmp_path / "mine", target)
    elif intrusion == "copied-marker":
        target.mkdir()
        for marker in ("run.json", "zarr.json", ".ooc-owned.json", "LATEST"):
            src = next((os.path.join(dp, marker) for dp, _, fs in os.walk(made / "run") if marker in fs), None) \
                or next((os.path.join(dp, marker) for dp, _, fs in os.walk(made / "s.zarr") if marker in fs), None)
            if src:
                shutil.copy(src, target / marker)
        (target / "thesis.tex").write_text("\\chapter{Mine}\n")
        user[target / "thesis.tex"] = "\\chapter{Mine}\n"
        if shape == "file":  # a file output: the user's file at the path, beside a copied manifest
            shutil.rmtree(target)
            target.write_text("mine, with ooc_export in it\n")
            shutil.copy(made / "run" / ".ooc-owned.json", tmp_path / ".ooc-owned.json")
            user = {target: "mine, with ooc_export in it\n"}
    else:
        if shape != "dir-store":
            ok(*cmd)  # ooc makes it first
        if intrusion == "user-file-inside":
            if shape == "file":
                pytest.skip("a file holds no entries")
            sub = target / ("state" if kind == "train" else "labels")
            sub.mkdir(exist_ok=True)
            (sub / "notes.txt").write_text("my notes\n")
            user[sub / "notes.txt"] = "my notes\n"
        else:  # edited: a file ooc wrote and listed, changed by the user since
            victim = target if shape == "file" else target / ("run.json" if kind == "train" else "zarr.json")
            with open(victim, "a") as f:
                f.write("\n")
            user[victim] = victim.read_text()
            if kind == "append-in-place":
                pytest.skip("an in-place append reads the store (its zarr.json) first: refused as damaged there")
    err = one_line(run(*cmd))
    named = [str(p) for p in user] + [str(target)]
    assert any(p in err for p in named), err
    for p, text in user.items():
        assert p.read_text() == text
    if intrusion == "symlink":
        assert os.path.islink(target)


def test_batch_and_demo_replace_only_their_own_files(made, tmp_path):
    """``out = "."``: the user's summary.md, results.csv and comparison.png are refused before any training;
    ``demo --dir D`` does not replace the user's D/train.svm.gz."""
    for name in ("summary.md", "results.csv", "comparison.png"):
        d = tmp_path / name.replace(".", "-")
        d.mkdir()
        (d / name).write_text("mine\n")
        spec = d / "spec.toml"
        spec.write_text(f'[batch]\nout = "."\n\n[grid]\nstore = ["{made / "s.zarr"}"]\nl2 = [1e-2]\n')
        err = one_line(run("batch", spec, "--workers", "1"))
        assert str(d / name) in err and (d / name).read_text() == "mine\n"
        assert sorted(os.listdir(d)) == sorted([name, "spec.toml"])  # refused before anything was written
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "train.svm.gz").write_text("my data\n")
    err = one_line(run("demo", "--dir", tmp_path / "demo", "--rows", "60"))
    assert "train.svm.gz" in err and (tmp_path / "demo" / "train.svm.gz").read_text() == "my data\n"


def test_outputs_ooc_wrote_are_replaced(made, tmp_path):
    """The other side: what ooc wrote, unchanged, is replaced by --overwrite and the commands' outputs."""
    for cmd in (["convert", made / "d.svm", tmp_path / "s.zarr", "--overwrite"],
                ["train", made / "s.zarr", "--out", tmp_path / "r", *TRAIN, "--overwrite"],
                ["export", made / "run", "--format", "text", "--out", tmp_path / "e.txt", "--overwrite"],
                ["predict", made / "run", made / "d.svm", "--out", tmp_path / "p.txt"]):
        ok(*cmd)
        ok(*cmd)
    ok("append", tmp_path / "s.zarr", made / "more.svm")


# -- nothing left behind ---------------------------------------------------------------------------
_CHILD = """
import os, sys
from ooc.fsutil import temporary_sibling
p = temporary_sibling(sys.argv[1], sys.argv[2])
os.makedirs(p) if sys.argv[3] == "dir" else open(p, "w").close()
print(p, flush=True)
if sys.argv[4] == "die":
    os.kill(os.getpid(), 9)
sys.stdin.read()  # alive until told
"""


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(tag=st.sampled_from(["tmp", "partial", "append-rows"]), kind=st.sampled_from(["file", "dir"]),
       command=st.sampled_from([["info", "X"], ["predict", "X", "X"], ["convert", "X", "Y"]]))
def test_the_next_command_removes_what_a_killed_process_left(tmp_path_factory, tag, kind, command):
    d = tmp_path_factory.mktemp("left")
    target = str(d / "p.txt")
    dead = subprocess.run([sys.executable, "-c", _CHILD, target, tag, kind, "die"], capture_output=True, text=True)
    left = dead.stdout.strip()
    assert dead.returncode == -9 and os.path.lexists(left) and TEMPORARY.match(os.path.basename(left))
    alive = subprocess.Popen([sys.executable, "-c", _CHILD, target, tag, kind, "live"], stdout=subprocess.PIPE,
                             stdin=subprocess.PIPE, text=True)
    try:
        theirs = alive.stdout.readline().strip()
        run(*[str(d / "missing") if a in ("X", "Y") else a for a in command])  # any command, even one that fails
        assert not os.path.lexists(left), left
        assert os.path.lexists(theirs), "a live process's temporary was removed"
    finally:
        alive.communicate("")
    run("info", str(d / "missing"))
    assert not os.path.lexists(theirs)


# -- verified when read back -----------------------------------------------------------------------
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(pick=st.integers(0, 10**6))
def test_a_chunk_file_of_another_conversion_is_refused(made, tmp_path_factory, pick):
    d = tmp_path_factory.mktemp("swap")
    store = d / "s.zarr"
    shutil.copytree(made / "s.zarr", store)
    chunks = sorted(os.path.relpath(os.path.join(dp, f), store) for dp, _, fs in os.walk(store) for f in fs
                    if f != "zarr.json" and f != ".ooc-owned.json" and os.sep + "c" + os.sep in os.path.join(dp, f))
    rel = chunks[pick % len(chunks)]
    other = made / "other.zarr" / rel
    if not other.exists() or other.read_bytes() == (store / rel).read_bytes():
        return  # the same bytes in both conversions: nothing to tell apart
    shutil.copy(other, store / rel)
    from ooc.store.backend import StoreError
    from ooc.store.store import open_store

    name = os.path.dirname(os.path.dirname(rel)).replace(os.sep, "/")  # the array: "labels", "rows/data" ...
    try:
        with open_store(str(store)) as st:
            with pytest.raises(StoreError, match="conversion"):
                st.backend.read(name)
    except StoreError as exc:  # refused at open already (an array read there)
        assert "conversion" in str(exc), exc


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(line=st.integers(0, 5), garbage=st.sampled_from([b"xyz", b"{}", b'{"epoch": 1}', b"\xff\xfe", b"[1]"]),
       cut=st.booleans())
def test_a_damaged_history_line_is_refused_by_number(made, tmp_path_factory, line, garbage, cut):
    d = tmp_path_factory.mktemp("hist")
    shutil.copytree(made / "run", d / "run")
    path = d / "run" / "history.jsonl"
    lines = path.read_bytes().split(b"\n")[:-1]
    k = line % len(lines)
    if cut:  # a last line without its newline: ooc replaces the file whole, so it never leaves one: not ooc's
        path.write_bytes(b"\n".join(lines) + b"\n" + lines[-1][:len(lines[-1]) // 2])
        with pytest.raises(RunError, match=f"history.jsonl: line {len(lines) + 1}: has no newline"):
            RunDir(str(d / "run")).history()
        return
    lines[k] = garbage
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(RunError, match=f"history.jsonl: line {k + 1}: "):
        RunDir(str(d / "run")).history()


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(pick=st.integers(0, 10**6), bit=st.integers(0, 7))
@example(pick=66, bit=0)  # inside the header's text: numpy's parser raised TokenError, not ValueError
def test_a_flipped_byte_in_the_final_duals_stops_a_warm_start(made, tmp_path_factory, pick, bit):
    d = tmp_path_factory.mktemp("duals")
    shutil.copytree(made / "run", d / "run")
    p = d / "run" / "model" / "duals.npy"
    raw = bytearray(p.read_bytes())
    raw[pick % len(raw)] ^= 1 << bit
    p.write_bytes(bytes(raw))
    err = one_line(run("train", made / "s.zarr", "--out", d / "warm", "--warm-start", d / "run", *TRAIN))
    assert "duals.npy" in err
