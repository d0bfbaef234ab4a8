"""ooc deletes or overwrites only what it can prove it made (docs/formats.rst#ownership).

Generated from the run directory's own list of the names ooc generates (``RUN_GENERATED``): a user's
file at any of them (a new one, or one of ooc's replaced by the user's), a line a user appended to
``history.jsonl``, ooc's manifest copied alone into a user's folder beside files of generated names,
a flipped byte in a checkpoint: ``ooc train --overwrite`` and ``ooc resume`` refuse in one line naming
the path, exit non-zero, and the user's file is unchanged. A checkpoint that does not verify is never
deleted: a resume uses an older one that verifies (naming the damaged one) or is refused naming it.

A run's model is used (predict, export, ``ooc.load_model``) only with its certificate: a run stopped
while it trained or wrote its model has none, or keeps the previous certified one.
"""

from __future__ import annotations

import os
import re
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import ooc
from ooc.cli import main as cli
from ooc.fsutil import seal_json
from ooc.runs.records import RUN_GENERATED

TRAIN = ["--l2", "1e-2", "--tol", "1e-9", "--seed", "1", "--checkpoint-every", "0"]
SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))

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


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A store; ``part``: a run stopped at epoch 2 (a checkpoint, a model), paged duals (files under
    ``state/duals``); ``full``: the same run trained to epoch 5 in one go."""
    root = tmp_path_factory.mktemp("proven")
    svm(root / "d.svm", 80, 0)
    ok("convert", root / "d.svm", root / "s.zarr", "--block-bytes", "1KiB")
    ok("train", root / "s.zarr", "--out", root / "part", "--max-epochs", "2", "--duals", "paged", *TRAIN)
    ok("train", root / "s.zarr", "--out", root / "full", "--max-epochs", "5", "--duals", "paged", *TRAIN)
    return root


def _commands(root, case):
    return {"resume": ["resume", case, "--max-epochs", "5"],
            "overwrite": ["train", root / "s.zarr", "--out", case, "--max-epochs", "5", "--duals", "paged", *TRAIN,
                          "--overwrite"]}


def _files(d) -> dict:
    return {os.path.relpath(os.path.join(dp, f), d): open(os.path.join(dp, f), "rb").read()
            for dp, _, fs in os.walk(d) for f in fs}


# -- a user's file at a generated name -----------------------------------------------------------------------
_LEAVES = [p for p in RUN_GENERATED if p not in ("state", "model", "state/duals", "state/duals/[0-9]",
                                                  "state/ckpt-[0-9]*", "state/parent-[0-9]*", "state/primal")]


@st.composite
def generated_names(draw, run: str):
    """A path under ``run`` matching one of the run's generated names: ``[0-9]`` a digit, ``*`` a word (digits
    after ``ckpt-``/``parent-``); an existing checkpoint's number now and then."""
    pattern = draw(st.sampled_from(_LEAVES))
    ckpts = sorted(n for n in os.listdir(os.path.join(run, "state")) if n.startswith("ckpt-"))
    out = []
    for seg in pattern.split("/"):
        if seg == "ckpt-[0-9]*" and draw(st.booleans()):
            out.append(ckpts[0])
            continue
        seg = re.sub(r"\[0-9\]\*", lambda m: str(draw(st.integers(0, 999999))), seg)
        seg = re.sub(r"\[0-9\]", lambda m: str(draw(st.integers(0, 9))), seg)
        seg = re.sub(r"\[zyc\]", lambda m: draw(st.sampled_from("zyc")), seg)
        seg = seg.replace("*", draw(st.sampled_from(["precious", "mine", "w"])))
        out.append(seg)
    return os.path.join(*out)


def _payload(kind: str) -> bytes:
    if kind == "npy":
        import io

        buf = io.BytesIO()
        np.save(buf, np.arange(7.0))
        return buf.getvalue()
    return {"text": b"a user's precious results\n", "empty": b"", "json": b'{"epoch": 1}\n'}[kind]


@SETTINGS
@given(data=st.data(), command=st.sampled_from(["resume", "overwrite"]),
       kind=st.sampled_from(["text", "npy", "empty", "json"]))
def test_a_user_file_at_a_generated_name_is_refused_by_name(made, tmp_path_factory, data, command, kind):
    case = tmp_path_factory.mktemp("gen") / "run"
    shutil.copytree(made / "part", case)
    rel = data.draw(generated_names(str(case)), label="path")
    path = case / rel
    payload = _payload(kind)
    if path.is_dir() or (rel in (".lock", "history.jsonl") and not payload):
        return  # a directory of ooc's there; an empty lock or history is what ooc makes (and holds nothing)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(payload)  # a new file, or the user's content over ooc's file
    before = _files(case)
    r = run(*_commands(made, case)[command])
    if r.exit_code == 0:  # resume: a checkpoint that does not verify is left in place, named, never used
        assert command == "resume" and rel.startswith(os.path.join("state", "ckpt-")), (rel, r.stderr)
        assert str(path.parent) in r.stderr and "left in place" in r.stderr, r.stderr
        assert path.read_bytes() == payload
        return
    line = one_line(r)
    assert str(case) in line, line
    assert _files(case) == before, line  # nothing deleted, nothing changed


@SETTINGS
@given(line=st.sampled_from([b"my note", b'{"epoch": 99}', b"", None]), newline=st.booleans(),
       command=st.sampled_from(["resume", "overwrite"]))
def test_a_line_appended_to_the_history_is_refused_by_number(made, tmp_path_factory, line, newline, command):
    if not line and not newline:
        return  # nothing appended
    case = tmp_path_factory.mktemp("hist") / "run"
    shutil.copytree(made / "part", case)
    hist = case / "history.jsonl"
    n = len(hist.read_bytes().splitlines())
    if line is None:  # a line that looks like ooc's, sealed, but written by the user with two spaces
        line = seal_json({"epoch": 99}, indent=None).replace(b": ", b":  ")
    with open(hist, "ab") as f:
        f.write(line + (b"\n" if newline else b""))
    before = _files(case)
    err = one_line(run(*_commands(made, case)[command]))
    assert f"history.jsonl: line {n + 1}" in err, err
    assert _files(case) == before


@SETTINGS
@given(names=st.lists(st.sampled_from(["history.jsonl", "LATEST", "run.json", "state/duals/0/b000000.npy",
                                       "state/ckpt-000003/meta.json", "model/coef.npy", ".lock"]),
                      min_size=1, max_size=4, unique=True))
def test_a_manifest_copied_alone_vouches_for_no_user_file(made, tmp_path_factory, names):
    folder = tmp_path_factory.mktemp("mine") / "folder"
    folder.mkdir()
    shutil.copy(made / "part" / ".ooc-owned.json", folder / ".ooc-owned.json")
    for rel in names:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(b"mine\n")
    before = _files(folder)
    err = one_line(run(*_commands(made, folder)["overwrite"]))
    assert str(folder) in err
    assert _files(folder) == before


# -- a checkpoint that does not verify -------------------------------------------------------------------
@SETTINGS
@given(pick=st.integers(0, 10**6), bit=st.integers(0, 7), older=st.booleans(),
       command=st.sampled_from(["resume", "overwrite"]))
def test_a_flipped_byte_in_a_checkpoint_is_never_deleted(made, tmp_path_factory, pick, bit, older, command):
    """A damaged checkpoint: ``--overwrite`` refuses naming it; a resume uses an older checkpoint that
    verifies (``older``: one is there) and says so naming the damaged one, else refuses naming it; the
    damaged file stays as it is either way."""
    case = tmp_path_factory.mktemp("flip") / "run"
    shutil.copytree(made / "part", case)
    (ck,) = [d for d in os.listdir(case / "state") if d.startswith("ckpt-")]
    damaged_ck = ck
    if older:  # the newest checkpoint is a damaged one numbered after the good one
        damaged_ck = f"ckpt-{int(ck[5:]) + 1:06d}"
        shutil.copytree(case / "state" / ck, case / "state" / damaged_ck)
    files = sorted(f for f in os.listdir(case / "state" / damaged_ck))
    path = case / "state" / damaged_ck / files[pick % len(files)]
    raw = bytearray(path.read_bytes())
    raw[pick % len(raw)] ^= 1 << bit
    path.write_bytes(bytes(raw))
    r = run(*_commands(made, case)[command])
    if command == "resume" and older:
        assert r.exit_code == 0, r.stderr
        assert damaged_ck in r.stderr and "left in place" in r.stderr, r.stderr
        want = ooc.load_model(str(made / "full")).coef_
        assert np.array_equal(ooc.load_model(str(case)).coef_, want)  # the same run, bit for bit
    else:
        err = one_line(r)
        assert str(case / "state" / damaged_ck) in err, err
    assert path.read_bytes() == bytes(raw)


# -- a model without its certificate ---------------------------------------------------------------------
class _Killed(BaseException):
    """Stands for the process dying at that point (nothing after it runs; no handler catches it)."""


def _die_writing(monkeypatch, name: str):
    """Make the write of ``model/<name>`` (and what follows it) never happen: the process "dies" there."""
    import importlib

    train = importlib.import_module("ooc.train")
    real = train.atomic_write_bytes

    def write(path, payload, *a, **k):
        if os.path.basename(path) == name:
            raise _Killed
        return real(path, payload, *a, **k)

    monkeypatch.setattr(train, "atomic_write_bytes", write)


@pytest.mark.parametrize("first", ["none", "finished"])
def test_a_run_stopped_while_writing_its_model_keeps_no_uncertified_model(made, tmp_path, monkeypatch, first):
    """Stopped after the coefficients were written, before the certificate: predict, export and
    ``ooc.load_model`` refuse in one line (no model yet) or give the previous certified model."""
    case = tmp_path / "run"
    if first == "finished":
        shutil.copytree(made / "part", case)
        before = ooc.load_model(str(case)).coef_
    _die_writing(monkeypatch, "metrics.json")
    with pytest.raises(_Killed):
        if first == "finished":
            ooc.resume(str(case), max_epochs=5)
        else:
            ooc.train(str(made / "s.zarr"), out=str(case), max_epochs=5, l2=1e-2, tol=1e-9, seed=1,
                      checkpoint_every=0)
    monkeypatch.undo()
    if first == "finished":
        assert np.array_equal(ooc.load_model(str(case)).coef_, before)  # the certified one, not the new one
        return
    with pytest.raises((ValueError, FileNotFoundError)) as exc:
        ooc.load_model(str(case))
    assert str(case) in str(exc.value) and len(str(exc.value).splitlines()) == 1
    for cmd in (["predict", case, made / "d.svm"], ["export", case, "--format", "text", "--out", tmp_path / "e.txt"]):
        err = one_line(run(*cmd))
        assert str(case) in err and "ooc resume" in err, err
    ok("resume", case, "--max-epochs", "5")  # what the message says
    ooc.load_model(str(case))


def test_a_model_whose_certificate_is_another_models_is_refused(made, tmp_path):
    """``model/metrics.json`` certifies the coefficients it records the CRC-32 of (a run's model/ of
    another run's metrics is refused, one line naming it)."""
    case = tmp_path / "run"
    shutil.copytree(made / "part", case)
    shutil.copy(made / "full" / "model" / "metrics.json", case / "model" / "metrics.json")
    err = one_line(run("predict", case, made / "d.svm"))
    assert str(case / "model" / "metrics.json") in err and "another run" in err, err


# -- a user's file whose name looks like one of ooc's temporaries -------------------------------------------
def _dead_pid() -> int:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@st.composite
def temporary_lookalikes(draw):
    """A name of a temporary's shape (``.NAME.TAG-PID-HEX``) that ooc did not make: a dead or low pid, the
    hex of an older ooc's length (12) or of this one's (24), a suffix now and then."""
    name = draw(st.sampled_from(["thesis", "photos", "run.json", "model", "s.zarr"]))
    tag = draw(st.sampled_from(["backup", "tmp", "partial", "album-x"]))
    pid = draw(st.sampled_from([1, 2, _dead_pid()]))
    hexd = draw(st.text("0123456789abcdef", min_size=12, max_size=12)) * draw(st.sampled_from([1, 2]))
    return f".{name}.{tag}-{pid}-{hexd}" + draw(st.sampled_from(["", "", ".lock", ".npy", ".scratch"]))


@SETTINGS
@given(name=temporary_lookalikes(), where=st.sampled_from(["", "state", "state/duals/0", "model"]),
       is_dir=st.booleans(), command=st.sampled_from(["resume", "overwrite", "copied-manifest"]))
def test_a_user_file_named_like_a_temporary_is_never_deleted(made, tmp_path_factory, name, where, is_dir, command):
    """Only a temporary whose name carries ooc's proof (an HMAC under this user's key) is ooc's: a user's
    file or folder of the same shape is refused by name, never swept nor deleted."""
    case = tmp_path_factory.mktemp("lookalike") / "run"
    if command == "copied-manifest":  # a user's folder holding only a copy of a run's manifest
        case.mkdir()
        shutil.copy(made / "part" / ".ooc-owned.json", case / ".ooc-owned.json")
        where, command = "", "overwrite"
    else:
        shutil.copytree(made / "part", case)
    path = case / where / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if is_dir:
        path.mkdir()
        path = path / "ch1.tex"
    path.write_bytes(b"precious\n")
    before = _files(case)
    ok("info", made / "s.zarr")  # any command sweeps what dead processes left
    err = one_line(run(*_commands(made, case)[command]))
    assert name in err, err
    assert _files(case) == before


def test_a_temporary_ooc_made_proves_itself():
    from ooc import fsutil

    made_here = os.path.basename(fsutil.temporary_sibling("/nonexistent-dir/x.npy", "tmp"))
    assert fsutil.is_temporary_name(made_here) and fsutil.is_temporary_name(made_here + ".lock")
    forged = made_here[:-1] + ("0" if made_here[-1] != "0" else "1")
    assert not fsutil.is_temporary_name(forged)


# -- a run's memory-mapped scratch vectors (state/primal) prove they are the run's -----------------------------
@SETTINGS
@given(name=st.sampled_from("zyc"), rows=st.sampled_from([(80,), (1, 80), (3, 80)]),
       trailer=st.sampled_from(["none", "ours", "another run's", "ours and a byte"]),
       command=st.sampled_from(["resume", "overwrite"]))
def test_a_scratch_vector_is_the_runs_only_when_it_carries_the_runs_identity(made, tmp_path_factory, name, rows,
                                                                              trailer, command):
    """A float array of the run's rows at ``state/primal/[zyc].npy`` is ooc's only when it ends with the run's
    identity (:func:`ooc.runs.records.open_scratch_vector`); else it is refused by name, kept as it is."""
    from ooc.runs.records import SCRATCH_TRAILER, open_scratch_vector
    from ooc.runs.rundir import RunDir

    case = tmp_path_factory.mktemp("scratch") / "run"
    shutil.copytree(made / "part", case)
    (case / "state" / "primal").mkdir()
    path = case / "state" / "primal" / f"{name}.npy"
    ident = RunDir(str(case)).identity
    if trailer == "ours":  # as ooc makes it: proven, replaced by --overwrite, recreated by a resume
        open_scratch_vector(str(path), rows, ident)[:] = 1.0
        r = run(*_commands(made, case)[command])
        assert r.exit_code == 0, r.stderr
        return
    np.save(path, np.arange(float(np.prod(rows))).reshape(rows))
    with open(path, "ab") as f:
        f.write({"none": b"", "another run's": SCRATCH_TRAILER + os.urandom(12).hex().encode(),
                 "ours and a byte": SCRATCH_TRAILER + ident.encode() + b"x"}[trailer])
    before = _files(case)
    err = one_line(run(*_commands(made, case)[command]))
    assert str(path) in err, err
    assert _files(case) == before


@SETTINGS
@given(pick=st.integers(0, 10**6), bit=st.integers(0, 7))
def test_a_flipped_byte_in_run_json_is_named_by_info(made, tmp_path_factory, pick, bit):
    """``ooc info RUN`` on a run whose ``run.json`` is damaged names that file (not "not an ooc store")."""
    case = tmp_path_factory.mktemp("runjson") / "run"
    shutil.copytree(made / "part", case)
    path = case / "run.json"
    raw = bytearray(path.read_bytes())
    raw[pick % len(raw)] ^= 1 << bit
    path.write_bytes(bytes(raw))
    err = one_line(run("info", case))
    assert str(path) in err and "damaged" in err, err


# -- a run's model is its own -------------------------------------------------------------------------------
@SETTINGS
@given(how=st.sampled_from(["copy all", "copy model+coef+metrics", "link model/", "link metrics.json"]),
       command=st.sampled_from(["predict", "export", "info", "evaluate", "load_model", "resume"]))
def test_a_model_of_another_run_is_refused_by_name(made, tmp_path_factory, how, command):
    """A run's model is used, and replaced, only when its certificate records the run's own identity and
    nothing in ``model/`` is a link: another run's model copied or linked in is refused naming the file."""
    case = tmp_path_factory.mktemp("foreign_model") / "run"
    shutil.copytree(made / "part", case)
    other = made / "full" / "model"
    if how == "link model/":
        shutil.rmtree(case / "model")
        os.symlink(other, case / "model")
        named = case / "model"
    elif how == "link metrics.json":
        (case / "model" / "metrics.json").unlink()
        os.symlink(other / "metrics.json", case / "model" / "metrics.json")
        named = case / "model" / "metrics.json"
    else:
        names = os.listdir(other) if how == "copy all" else ["model.json", "coef.npy", "metrics.json"]
        for n in names:
            shutil.copy(other / n, case / "model" / n)
        named = case / "model" / "metrics.json"
    before = _files(case)
    if command == "load_model":
        with pytest.raises(ValueError) as exc:
            ooc.load_model(str(case))
        err = str(exc.value)
    else:
        err = one_line(run(*{"predict": ["predict", case, made / "d.svm"],
                             "export": ["export", case, "--format", "text", "--out", case.parent / "w.txt"],
                             "info": ["info", case], "evaluate": ["evaluate", case, made / "d.svm"],
                             "resume": _commands(made, case)["resume"]}[command]))
    assert str(named) in err, err
    assert _files(case) == before


def test_a_whole_copy_of_a_run_is_the_same_run(made, tmp_path):
    """``cp -r RUN COPY``: the copy's model, certificate and history are its own (same identity)."""
    case = tmp_path / "copy"
    shutil.copytree(made / "part", case)
    assert np.array_equal(ooc.load_model(str(case)).coef_, ooc.load_model(str(made / "part")).coef_)
    ok("info", case)
    ok("resume", case, "--max-epochs", "5")
    assert np.array_equal(ooc.load_model(str(case)).coef_, ooc.load_model(str(made / "full")).coef_)


# -- a run's history is its own ---------------------------------------------------------------------------
@SETTINGS
@given(data=st.data(), command=st.sampled_from(["info", "resume", "overwrite"]))
def test_a_history_line_of_another_run_is_refused_by_number(made, tmp_path_factory, data, command):
    """Every history line records its run's identity: a line of another run (the whole file copied, or lines
    spliced in) is refused by its number, the file kept as it is."""
    case = tmp_path_factory.mktemp("other_hist") / "run"
    shutil.copytree(made / "part", case)
    mine = (case / "history.jsonl").read_bytes().splitlines(keepends=True)
    theirs = (made / "full" / "history.jsonl").read_bytes().splitlines(keepends=True)
    if data.draw(st.booleans(), label="whole file"):
        lines, first = theirs, 1
    else:
        at = data.draw(st.integers(0, len(mine)), label="at")
        k = data.draw(st.integers(1, len(theirs)), label="lines")
        lines, first = mine[:at] + theirs[:k] + mine[at:], at + 1
    (case / "history.jsonl").write_bytes(b"".join(lines))
    if command == "info":  # of a run that has not finished (a finished run's certificate is its metrics)
        shutil.rmtree(case / "model")
    before = _files(case)
    cmd = ["info", case] if command == "info" else _commands(made, case)[command]
    err = one_line(run(*cmd))
    assert f"history.jsonl: line {first}" in err, err
    assert _files(case) == before


# -- a store's metadata is its conversion's -----------------------------------------------------------------
@SETTINGS
@example(which="zarr.json", command="info")
@given(which=st.sampled_from(["zarr.json", "rows/data/zarr.json", "rows/indptr/zarr.json", "labels/zarr.json"]),
       command=st.sampled_from(["info", "train", "predict"]))
def test_a_metadata_file_of_another_conversion_is_refused_by_name(made, tmp_path_factory, which, command):
    """A ``zarr.json`` copied from another conversion (valid on its own) is refused naming it, when the store
    is opened by any command."""
    root = tmp_path_factory.mktemp("meta")
    store = root / "s.zarr"
    shutil.copytree(made / "s.zarr", store)
    other = made / "other.zarr"
    if not other.exists():  # the same shape, other values
        svm(made / "o.svm", 80, 7)
        ok("convert", made / "o.svm", other, "--block-bytes", "1KiB")
    if not (other / which).is_file() or (other / which).read_bytes() == (store / which).read_bytes():
        return  # not in this layout, or the same bytes (nothing foreign)
    shutil.copy(other / which, store / which)
    cmd = {"info": ["info", store], "train": ["train", store, "--out", root / "r", *TRAIN],
           "predict": ["predict", made / "part", store]}[command]
    err = one_line(run(*cmd))
    assert str(store / which) in err, err


def test_a_batch_does_not_skip_a_run_holding_another_runs_model(made, tmp_path):
    """``ooc batch`` re-reads a finished run's certificate through the same check as a model load: a run
    holding another run's model is reported failed, naming the file, never counted as finished."""
    from ooc.batch import run_one

    case = tmp_path / "run"
    shutil.copytree(made / "part", case)
    options = {"store": str(made / "s.zarr"), "l2": 1e-2, "tol": 1e-9, "seed": 1, "max_epochs": 2}
    assert run_one(str(case), options)["state"] == "skipped"  # its own model: finished, skipped
    for n in os.listdir(made / "full" / "model"):
        shutil.copy(made / "full" / "model" / n, case / "model" / n)
    row = run_one(str(case), options)
    assert row["status"] == "failed" and "metrics.json" in row["error"] and "another run" in row["error"], row


def test_the_key_of_temporaries_is_private(tmp_path, monkeypatch):
    """The key is made once, mode 0600, in a directory only its user can write; a directory others can
    write is passed over for the user's own directory in the system's temporary directory."""
    from ooc import fsutil

    private = tmp_path / "private"
    monkeypatch.setenv("OOC_STATE_DIR", str(private))
    key = fsutil.temporary_key()
    assert key is not None and (private / "temporaries.key").stat().st_mode & 0o777 == 0o600
    assert fsutil.temporary_key() == key == (private / "temporaries.key").read_bytes().strip()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("OOC_STATE_DIR", str(shared))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    other = fsutil.temporary_key()
    assert not (shared / "temporaries.key").exists()
    assert other is not None and other != key and (tmp_path / "tmp" / f"ooc-{os.getuid()}" / "temporaries.key").is_file()


@SETTINGS
@given(how=st.sampled_from(["copy", "link"]), command=st.sampled_from(["info", "resume", "overwrite"]))
def test_a_run_json_of_another_run_is_refused_by_name(made, tmp_path_factory, how, command):
    """``run.json`` records the run's identity: another run's, copied or linked in, is refused naming it."""
    case = tmp_path_factory.mktemp("other_cfg") / "run"
    shutil.copytree(made / "part", case)
    (case / "run.json").unlink()
    if how == "link":
        os.symlink(made / "full" / "run.json", case / "run.json")
    else:
        shutil.copy(made / "full" / "run.json", case / "run.json")
    before = _files(case)
    cmd = ["info", case] if command == "info" else _commands(made, case)[command]
    err = one_line(run(*cmd))
    assert str(case / "run.json") in err, err
    assert _files(case) == before
