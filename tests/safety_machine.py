"""A stateful model of ooc's safety promises: ownership, atomicity, verification.

Rules interleave ooc commands (convert, append, train, resume, predict, export, batch, demo, with
and without ``--overwrite``, a child process SIGKILLed at a random moment) with what users do
(files dropped into stores and runs, files at the names ooc generates inside a run, a line appended
to a run's history, ooc's marker files copied into folders of their own, symbolic links, flipped
bytes). After every step the promises are checked:

* no user file changed or disappeared (nor what a user's symbolic link points to);
* a file of a run that a user damaged (a flipped byte) is never deleted nor replaced: it does not
  verify, so ooc cannot prove it wrote it (``LATEST`` aside: a hint, any checkpoint's name is one);
* a model that predicts is a finished run's, with its certificate (a SIGKILLed training leaves none);
* no temporary of a dead process is left once a command has run;
* every command ended with exit status 0, or 1 and one ``ooc: error:`` line, no traceback;
* every artifact verifies or is refused by name: a model whose files had a byte flipped exports
  the model it was trained as, or is refused; a store predicts the rows it was converted with,
  or is refused.

Used by ``tests/test_stateful_safety.py`` (a small budget) and ``scripts/stateful_safety.py`` (long).
Commands run in this process (click's CliRunner) but for the SIGKILL rule, which needs a child.
No rule has a precondition on the files (a killed child's progress is not reproducible, and hypothesis
replays a sequence's draws): a command whose input is missing must fail in one line like any other.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
from click.testing import CliRunner
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ooc.cli import main as cli
from ooc.fsutil import TEMPORARY

ROWS, COLS = 60, 12
TRAIN = ["--l2", "1e-2", "--tol", "1e-4", "--max-epochs", "4", "--seed", "1", "--checkpoint-every", "0"]
RUNS = ("r1", "r2")
#: ooc's files a user may copy into a folder of theirs (they must not make it ooc's)
MARKERS = ("run.json", ".ooc-owned.json", "zarr.json", "LATEST")


def svm_lines(rng: np.random.Generator, n: int) -> str:
    out = []
    for _ in range(n):
        cols = np.sort(rng.choice(COLS, 4, replace=False)) + 1
        y = 1 if rng.random() < 0.5 else -1
        out.append(f"{y} " + " ".join(f"{j}:{rng.random():.3f}" for j in cols))
    return "\n".join(out) + "\n"


def ooc_exe() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "ooc.cli"]


class SafetyMachine(RuleBasedStateMachine):
    """See the module's docstring. ``root`` is made fresh for every example."""

    #: where examples put their folders (set by the caller)
    base: str = ""
    steps = 0

    def __init__(self):
        super().__init__()
        self.root = os.path.join(self.base, f"ex{random.getrandbits(40):010x}")
        os.makedirs(self.root)
        rng = np.random.default_rng(0)
        self.data = self.p("d.svm")
        self.more = self.p("more.svm")
        with open(self.data, "w") as f:
            f.write(svm_lines(rng, ROWS))
        with open(self.more, "w") as f:
            f.write(svm_lines(rng, 20))
        #: path -> bytes a user wrote (they must stay as they are)
        self.user: dict[str, bytes] = {}
        #: ooc artifact -> what it must read back as (or be refused): run -> its text export, store -> predictions
        self.expect: dict[str, bytes] = {}
        #: (r1's export, the predictions of s.zarr by it)
        self.store_expect = None
        #: a run's file with a byte a user flipped -> its bytes (ooc must neither delete nor replace it)
        self.damaged: dict[str, bytes] = {}
        self.last = None

    def p(self, *parts) -> str:
        return os.path.join(self.root, *parts)

    def teardown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    # -- running commands -----------------------------------------------------------------------
    def ooc(self, *args) -> bool:
        """Run ``ooc args`` in this process; check its exit contract; True when it succeeded."""
        SafetyMachine.steps += 1
        r = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=True)
        self.last = (args, r.exit_code, r.stderr)
        if r.exit_code == 0:
            return True
        # warnings, and a batch's report of its failed runs, precede the error line
        lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith(("ooc: warning", "failed: "))]
        assert r.exit_code in (1, 2), (args, r.exit_code, r.stderr, r.exception)  # 2: a usage error (click)
        assert len(lines) == 1 and lines[0].startswith("ooc: error: "), (args, r.stderr)
        assert "Traceback" not in r.stderr, (args, r.stderr)
        return False

    def export_of(self, run: str) -> bytes | None:
        out = self.p(".probe-export.txt")
        if os.path.lexists(out):
            os.unlink(out)
        ok = self.ooc("export", run, "--format", "text", "--out", out)
        if not ok:
            return None
        with open(out, "rb") as f:
            data = f.read()
        os.unlink(out)
        return data

    def predictions_of(self, store: str) -> bytes | None:
        if not os.path.isdir(self.p("r1")) or not os.path.isfile(self.p("r1", "model", "model.json")):
            return None
        r = CliRunner().invoke(cli, ["predict", self.p("r1"), store], catch_exceptions=True)
        if r.exit_code != 0:
            return None
        return r.stdout.encode()

    def remember_run(self, run: str) -> None:
        data = self.export_of(self.p(run))
        if data is not None:
            self.expect[run] = data
        else:
            self.expect.pop(run, None)

    def intrude(self, target: str, inside: bool) -> None:
        """A user's file put where a command is about to write: inside the folder ``target`` (when it is
        one), or at the path ``target`` itself (when nothing is there yet)."""
        if inside:
            if os.path.isdir(target) and not os.path.islink(target):
                path = os.path.join(target, "notes.txt")
                if not os.path.lexists(path):
                    with open(path, "wb") as f:
                        f.write(b"my notes ooc_export\n")
                    self.user[path] = b"my notes ooc_export\n"
        elif not os.path.lexists(target):
            with open(target, "wb") as f:
                f.write(b"mine ooc_export\n")
            self.user[target] = b"mine ooc_export\n"

    @initialize()
    def made(self):
        """Every sequence starts with a store and a finished run (the things users put files into)."""
        assert self.ooc("convert", self.data, self.p("s.zarr"), "--block-bytes", "1KiB")
        assert self.ooc("train", self.p("s.zarr"), "--out", self.p("r1"), *TRAIN)
        self.remember_run("r1")

    # -- ooc commands ---------------------------------------------------------------------------
    @rule(overwrite=st.booleans(), intrude=st.booleans())
    def convert(self, overwrite, intrude):
        if intrude:
            self.intrude(self.p("s.zarr"), inside=True)
        ok = self.ooc("convert", self.data, self.p("s.zarr"), "--block-bytes", "1KiB",
                      *(["--overwrite"] if overwrite else []))
        if ok:
            self.store_expect = None

    @rule(in_place=st.booleans(), overwrite=st.booleans(), intrude=st.booleans())
    def append(self, in_place, overwrite, intrude):
        if intrude:
            self.intrude(self.p("s.zarr" if in_place else "s2.zarr"), inside=True)
        out = [] if in_place else ["--out", self.p("s2.zarr")] + (["--overwrite"] if overwrite else [])
        self.ooc("append", self.p("s.zarr"), self.more, *out)
        if in_place:
            self.store_expect = None

    @rule(run=st.sampled_from(RUNS), overwrite=st.booleans(), intrude=st.booleans())
    def train(self, run, overwrite, intrude):
        if intrude:
            self.intrude(self.p(run), inside=True)
        if self.ooc("train", self.p("s.zarr"), "--out", self.p(run), *TRAIN, *(["--overwrite"] if overwrite else [])):
            self.remember_run(run)

    @rule(run=st.sampled_from(RUNS), intrude=st.booleans())
    def resume(self, run, intrude):
        if intrude:
            self.intrude(self.p(run, "state"), inside=True)
        if self.ooc("resume", self.p(run), "--max-epochs", "6"):
            self.remember_run(run)

    @rule(run=st.sampled_from(RUNS), out=st.sampled_from(["p.txt", "user.txt", "lnk"]), intrude=st.booleans())
    def predict(self, run, out, intrude):
        if intrude:
            self.intrude(self.p(out), inside=False)
        self.ooc("predict", self.p(run), self.data, "--out", self.p(out))

    @rule(run=st.sampled_from(RUNS), out=st.sampled_from(["e.txt", "user.txt", "lnk"]), overwrite=st.booleans(),
          fmt=st.sampled_from(["text", "liblinear"]), intrude=st.booleans())
    def export(self, run, out, overwrite, fmt, intrude):
        if intrude:
            self.intrude(self.p(out), inside=False)
        self.ooc("export", self.p(run), "--format", fmt, "--out", self.p(out), *(["--overwrite"] if overwrite else []))

    @rule(out=st.sampled_from([".", "b", "lnk", "foreign"]), intrude=st.sampled_from([None, "summary.md",
                                                                                       "results.csv"]))
    def batch(self, out, intrude):
        if intrude and os.path.isdir(self.p(out)):
            self.intrude(self.p(out, intrude), inside=False)
        spec = self.p("spec.toml")
        with open(spec, "w") as f:
            f.write(f'[batch]\nout = "{out}"\n\n[grid]\nstore = ["{self.p("s.zarr")}"]\nl2 = [1e-2]\n'
                    'tol = [1e-3]\nmax_epochs = [3]\n')
        self.user[spec] = open(spec, "rb").read()  # a user's spec: never touched by ooc
        self.ooc("batch", spec, "--workers", "1")

    @rule(where=st.sampled_from(["demo", "foreign", "lnk"]), intrude=st.booleans())
    def demo(self, where, intrude):
        if intrude and os.path.isdir(self.p(where)):
            self.intrude(self.p(where, "train.svm.gz"), inside=False)
        self.ooc("demo", "--dir", self.p(where), "--rows", "80")

    @rule(what=st.sampled_from(["train", "append", "convert", "predict"]), delay=st.floats(0.0, 1.5))
    def sigkill_child(self, what, delay):
        """A child ooc killed with SIGKILL at a random moment; the next command (any) clears what it left."""
        args = {"train": ["train", self.p("s.zarr"), "--out", self.p("r2"), *TRAIN, "--overwrite"],
                "append": ["append", self.p("s.zarr"), self.more, "--out", self.p("s2.zarr"), "--overwrite"],
                "convert": ["convert", self.data, self.p("s.zarr"), "--overwrite"],
                "predict": ["predict", self.p("r1"), self.data, "--out", self.p("p.txt")]}[what]
        child = subprocess.Popen(ooc_exe() + [str(a) for a in args], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        try:
            child.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
            child.wait()
        SafetyMachine.steps += 1
        if what == "train":
            self.expect.pop("r2", None)
        if what in ("append", "convert"):
            self.store_expect = None
        self.ooc("info", self.data)  # any command: it sweeps what the killed one left (then checked below)

    # -- users ----------------------------------------------------------------------------------
    @rule(where=st.sampled_from(["s.zarr", "r1", "r2", "r1/model", "r1/state", "s.zarr/rows", "b", "demo", "."]),
          name=st.sampled_from(["notes.txt", "summary.md", "results.csv", "comparison.png", "train.svm.gz",
                                "thesis.tex", "b000000.npy"]))
    def user_adds_a_file(self, where, name):
        d = self.p(where)
        if not os.path.isdir(d) or os.path.islink(d):
            return
        path = os.path.join(d, name)
        if os.path.lexists(path):
            return
        payload = f"a user's {name} ooc_export\n".encode()
        with open(path, "wb") as f:
            f.write(payload)
        self.user[path] = payload

    @rule(marker=st.sampled_from(MARKERS), src=st.sampled_from(["r1", "s.zarr", "b", "demo"]))
    def user_copies_a_marker(self, marker, src):
        """ooc's marker copied into a folder of the user's (beside their thesis)."""
        found = [os.path.join(dp, marker) for dp, _, fs in os.walk(self.p(src)) if marker in fs]
        os.makedirs(self.p("foreign"), exist_ok=True)
        thesis = self.p("foreign", "thesis.tex")
        if thesis not in self.user:
            with open(thesis, "wb") as f:
                f.write(b"\\chapter{Mine}\n")
            self.user[thesis] = b"\\chapter{Mine}\n"
        if found:
            shutil.copy(found[0], self.p("foreign", marker))

    @rule(dest=st.sampled_from(["foreign", "mine"]))
    def user_makes_a_link(self, dest):
        os.makedirs(self.p(dest), exist_ok=True)
        keep = self.p(dest, "keep.txt")
        if keep not in self.user:
            with open(keep, "wb") as f:
                f.write(b"keep me\n")
            self.user[keep] = b"keep me\n"
        if not os.path.lexists(self.p("lnk")):
            os.symlink(self.p(dest), self.p("lnk"))
        if not os.path.lexists(self.p("user.txt")):
            with open(self.p("user.txt"), "wb") as f:
                f.write(b"my own results\n")
            self.user[self.p("user.txt")] = b"my own results\n"

    @rule(where=st.sampled_from(["r1", "r2", "s.zarr"]), pick=st.integers(0, 10**6), bit=st.integers(0, 7))
    def user_flips_a_byte(self, where, pick, bit):
        """A flipped bit in one of ooc's files: what reads it must verify it or refuse it."""
        files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(self.p(where)) for f in fs
                       if os.path.join(dp, f) not in self.user and os.path.getsize(os.path.join(dp, f)) > 0
                       and f != ".lock")
        if not files:
            return
        path = files[pick % len(files)]
        with open(path, "r+b") as f:
            f.seek(pick % os.path.getsize(path))
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ (1 << bit)]))
        if where in RUNS and os.path.basename(path) != "LATEST":
            with open(path, "rb") as f:
                self.damaged[path] = f.read()

    @rule(run=st.sampled_from(RUNS), rel=st.sampled_from([
        "state/ckpt-000077/precious.npy", "state/ckpt-000000/meta.json", "state/duals/0/b000099.npy",
        "state/duals/1/b000000.npy", "state/parent-3/b000000.npy", "model/duals.npy", "LATEST", ".lock"]))
    def user_adds_a_file_with_a_generated_name(self, run, rel):
        """A user's file at a name ooc generates inside a run (a name proves nothing)."""
        d = self.p(run)
        path = os.path.join(d, rel)
        if not os.path.isdir(d) or os.path.islink(d) or os.path.lexists(path):
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        payload = f"a user's {rel}\n".encode()
        with open(path, "wb") as f:
            f.write(payload)
        self.user[path] = payload

    @rule(run=st.sampled_from(RUNS), newline=st.booleans())
    def user_appends_to_the_history(self, run, newline):
        """A line a user appended to a run's history.jsonl: not ooc's, so the file is the user's now."""
        path = self.p(run, "history.jsonl")
        if not os.path.isfile(path) or os.path.islink(path) or path in self.user:
            return
        with open(path, "ab") as f:
            f.write(b"my note" + (b"\n" if newline else b""))
        with open(path, "rb") as f:
            self.user[path] = f.read()

    @rule(delay=st.floats(0.0, 3.0))
    def sigkill_train_then_predict(self, delay):
        """A training SIGKILLed at a random moment: its run predicts only with a finished, certified model."""
        from ooc.fsutil import read_sealed_json

        child = subprocess.Popen(ooc_exe() + [str(a) for a in ["train", self.p("s.zarr"), "--out", self.p("r2"), *TRAIN,
                                                               "--overwrite"]],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            child.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
            child.wait()
        SafetyMachine.steps += 1
        if child.returncode != 0:
            self.expect.pop("r2", None)
        if self.ooc("predict", self.p("r2"), self.data, "--out", self.p("p.txt")):
            model = self.p("r2", "model")
            metrics = read_sealed_json(os.path.join(model, "metrics.json"))  # the certificate, verified
            assert metrics["coef_crc"] == read_sealed_json(os.path.join(model, "model.json"))["coef_crc"], self.last

    # -- the promises ---------------------------------------------------------------------------
    @invariant()
    def user_files_unchanged(self):
        for path, payload in self.user.items():
            assert os.path.isfile(path), (f"{path} disappeared", self.last)
            with open(path, "rb") as f:
                assert f.read() == payload, (f"{path} changed", self.last)

    @invariant()
    def damaged_files_kept(self):
        for path, payload in self.damaged.items():
            assert os.path.isfile(path), (f"{path} (damaged) was deleted", self.last)
            with open(path, "rb") as f:
                assert f.read() == payload, (f"{path} (damaged) was replaced", self.last)

    @invariant()
    def nothing_left_behind(self):
        here = str(os.getpid())
        for dp, ds, fs in os.walk(self.root):
            for name in ds + fs:
                m = TEMPORARY.match(name)
                assert m is None or m.group("pid") == here, (os.path.join(dp, name), self.last)

    @invariant()
    def artifacts_verify_or_are_refused(self):
        for run, want in list(self.expect.items()):
            if run in RUNS:
                got = self.export_of(self.p(run))
                assert got is None or got == want, (f"{run} exports another model", self.last)
        if os.path.isdir(self.p("s.zarr")) and "r1" in self.expect:
            got = self.predictions_of(self.p("s.zarr"))
            key = self.expect["r1"]  # the predictions of the rows the store was converted with, by r1's model
            if self.store_expect is not None and self.store_expect[0] == key:
                assert got is None or got == self.store_expect[1], ("s.zarr reads other rows", self.last)
            elif got is not None:
                self.store_expect = (key, got)


def start_time() -> float:
    return time.perf_counter()
