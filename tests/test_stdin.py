"""Streams in, closed pipes out (docs/cli.rst, conventions).

* ``-`` (standard input) and local streams that cannot be rewound (a pipe's ``/dev/stdin``, a FIFO,
  a shell's ``<(...)``) are inputs of ``convert``, ``predict`` and ``evaluate`` in every format the
  command reads, the format sniffed from the first bytes (never by seeking) or given by
  ``--input-format``: the result is the same as from the file. Each case here goes through both
  kinds of stream (``-`` and a FIFO), in every format.
* A command whose stdout's reader leaves early (``ooc predict ... | head -1``) ends quietly: no
  message, exit status 141 (a shell's for a process ended by SIGPIPE).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import uuid

import numpy as np
import pytest
from click.testing import CliRunner

import ooc
from ooc.cli import main

N, D = 40, 6


def cli(*args, data: bytes | None = None):
    return CliRunner().invoke(main, [str(a) for a in args], input=data, catch_exceptions=True)


def _inputs(tmp):
    """The same rows in every format (values with 3 decimals: exact in float32 and in text)."""
    rng = np.random.default_rng(5)
    X = np.round(rng.standard_normal((N, D)), 3)
    X[rng.random((N, D)) < 0.3] = 0.0
    y = np.where(X[:, 0] - X[:, 1] > 0, 1, -1)
    svm = "".join(f"{y[i]} " + " ".join(f"{j + 1}:{X[i, j]:.3f}" for j in range(D) if X[i, j]) + "\n"
                  for i in range(N)).encode()
    csv = "".join(f"{y[i]}," + ",".join(f"{v:.3f}" for v in X[i]) + "\n" for i in range(N)).encode()
    vw = "".join(f"{y[i]} | " + " ".join(f"f{j}:{X[i, j]:.3f}" for j in range(D) if X[i, j]) + "\n"
                 for i in range(N)).encode()
    buf = io.BytesIO()
    np.savez(buf, X=X, y=y)
    words = ["red", "green", "blue", "cat", "dog", "tree"]
    text = "".join(f"{y[i]},{' '.join(words[j] for j in range(D) if X[i, j] > 0) or 'none'}\n"
                   for i in range(N)).encode()
    files = {"svm": svm, "svm.gz": gzip.compress(svm), "csv": csv, "vw": vw, "npz": buf.getvalue(), "text": text}
    paths = {}
    for ext, data in files.items():
        paths[ext] = tmp / f"d.{ext}"
        paths[ext].write_bytes(data)
    return files, paths


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stdin")
    files, paths = _inputs(tmp)
    assert cli("convert", paths["svm"], tmp / "s.zarr").exit_code == 0
    ooc.train(str(tmp / "s.zarr"), str(tmp / "run"), loss="logistic", l2=1e-2, tol=1e-6)
    # a model of hashed features: what a Vowpal Wabbit input is predicted with
    assert cli("convert", paths["vw"], tmp / "v.zarr", "--hash-bits", "10").exit_code == 0
    ooc.train(str(tmp / "v.zarr"), str(tmp / "vrun"), loss="logistic", l2=1e-2, tol=1e-6)
    # new input is read as the model's training input was (its recipe, docs/cli.rst): a CSV or an
    # .npz is predicted by a model trained on a store converted from a CSV or an .npz
    for fmt, name in (("csv", "c"), ("npz", "n")):
        assert cli("convert", paths[fmt], tmp / f"{name}.zarr").exit_code == 0
        ooc.train(str(tmp / f"{name}.zarr"), str(tmp / f"{name}run"), loss="logistic", l2=1e-2, tol=1e-6)
    return tmp, files, paths


#: The run whose model reads each format (its training store was converted from that format).
RUNS = {"svm": "run", "svm.gz": "run", "csv": "crun", "npz": "nrun", "vw": "vrun"}


class Fifo:
    """A FIFO that a thread fills with ``data`` (what a shell's ``<(cat FILE)`` is)."""

    def __init__(self, path, data: bytes):
        self.path = str(path)
        os.mkfifo(self.path)
        self.thread = threading.Thread(target=self._write, args=(data,), daemon=True)
        self.thread.start()

    def _write(self, data):
        try:
            with open(self.path, "wb") as f:
                f.write(data)
        except BrokenPipeError:  # the reader stopped early: what the test then checks
            pass

    def close(self):
        if self.thread.is_alive():  # the command never opened it: let the writer go
            with open(self.path, "rb") as f:
                f.read()
        self.thread.join(5)
        os.unlink(self.path)


def _streamed(tmp, how, data, *args):
    """``ooc ARGS`` with the input (``{}`` in ``args``) given as ``-`` or a FIFO."""
    if how == "-":
        return cli(*[("-" if a == "{}" else a) for a in args], data=data)
    fifo = Fifo(tmp / f"fifo-{os.getpid()}-{threading.get_ident()}", data)
    try:
        return cli(*[(fifo.path if a == "{}" else a) for a in args])
    finally:
        fifo.close()


def _store_content(path):
    st = ooc.open_store(str(path))
    b = st.block("rows", 0) if st.n_blocks("rows") == 1 else None
    return (st.n_rows, st.n_cols, st.attrs.get("nnz"), list(st.read_labels(0, st.n_rows)),
            None if b is None else (list(b.indices), list(b.data)))


@pytest.mark.parametrize("how", ["-", "fifo"])
@pytest.mark.parametrize("fmt", ["svm", "svm.gz", "csv", "vw", "npz", "text"])
@pytest.mark.parametrize("given", [False, True], ids=["sniffed", "input-format"])
def test_convert_reads_every_format_from_a_stream(setup, tmp_path, how, fmt, given):
    tmp, files, paths = setup
    if fmt == "text":  # raw text is never sniffed: --text gives it
        if not given:
            pytest.skip("raw text is read only when --text says so")
        opt = ["--text", "0:1", "--hash-bits", "12"]
    else:
        opt = ["--input-format", {"svm": "svmlight", "svm.gz": "svmlight"}.get(fmt, fmt)] if given else []
    assert cli("convert", paths[fmt], tmp_path / "file.zarr", *opt).exit_code == 0
    res = _streamed(tmp_path, how, files[fmt], "convert", "{}", tmp_path / "stream.zarr", *opt)
    assert res.exit_code == 0, (res.stderr, res.exception)
    assert _store_content(tmp_path / "stream.zarr") == _store_content(tmp_path / "file.zarr")


@pytest.mark.parametrize("how", ["-", "fifo"])
@pytest.mark.parametrize("fmt", ["svm", "svm.gz", "csv", "npz", "vw"])
@pytest.mark.parametrize("command", [["predict"], ["predict", "--proba"], ["evaluate", "--json"]])
def test_predict_and_evaluate_read_every_format_from_a_stream(setup, tmp_path, how, fmt, command):
    tmp, files, paths = setup
    run = tmp / RUNS[fmt]
    want = cli(command[0], run, paths[fmt], *command[1:])
    assert want.exit_code == 0, want.stderr
    res = _streamed(tmp_path, how, files[fmt], command[0], run, "{}", *command[1:])
    assert res.exit_code == 0, (res.stderr, res.exception)
    if command[0] == "evaluate":
        a, b = json.loads(res.stdout), json.loads(want.stdout)
        assert a == b
    else:
        assert res.stdout == want.stdout and len(res.stdout.splitlines()) == N


@pytest.mark.parametrize("how", ["-", "fifo"])
@pytest.mark.parametrize("fmt", ["svm", "csv", "vw"])
@pytest.mark.parametrize("command", ["predict", "evaluate"])
@pytest.mark.parametrize("packed", [False, True], ids=["npz", "npz.gz"])
def test_an_npz_piped_against_a_text_recipe_is_named(setup, tmp_path, how, fmt, command, packed):
    """'ooc predict RUN -' of an .npz (gzip-compressed or not) whose model's recipe is a text format: one line
    naming the stream, the .npz and the recipe's format (it was a bad label on line 1)."""
    tmp, files, _ = setup
    data = gzip.compress(files["npz"]) if packed else files["npz"]
    res = _streamed(tmp_path, how, data, command, tmp / RUNS[fmt], "{}")
    assert res.exit_code == 1, (res.stdout, res.stderr)
    msg = res.stderr.strip()
    assert "\n" not in msg and "Traceback" not in res.stderr, msg
    assert "zip archive (an .npz)" in msg and ("gzip-compressed" in msg) == packed, msg
    assert {"svm": "says svmlight", "csv": "says CSV", "vw": "says Vowpal Wabbit text"}[fmt] in msg, msg


def ooc_exe():
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    return exe if os.path.exists(exe) else shutil.which("ooc")


def test_dev_stdin_of_a_pipe(setup):
    """A real pipe into a real process: ``cat FILE | ooc predict RUN /dev/stdin`` (and ``-``)."""
    tmp, files, paths = setup
    want = cli("predict", tmp / "run", paths["svm.gz"]).stdout
    for arg in ("/dev/stdin", "-"):
        p = subprocess.run([ooc_exe(), "predict", str(tmp / "run"), arg], input=files["svm.gz"],
                           capture_output=True, timeout=120)
        assert p.returncode == 0 and p.stdout.decode() == want, (arg, p.stderr)


@pytest.mark.parametrize("command", [
    lambda t, p: ["predict", t / "run", p["svm"]],
    lambda t, p: ["predict", t / "run", "-"],
    lambda t, p: ["evaluate", t / "crun", p["csv"]],
    lambda t, p: ["info", t / "s.zarr", "--json"],
    lambda t, p: ["convert", "-", t / f"c-{uuid.uuid4().hex}.zarr", "--json"],
], ids=["predict", "predict-stdin", "evaluate", "info", "convert"])
def test_a_closed_stdout_ends_quietly(setup, command):
    """The reader of stdout is gone before the command writes (``| head -0``): no message, status 141."""
    tmp, files, paths = setup
    args = [str(a) for a in command(tmp, paths)]
    p = subprocess.Popen([ooc_exe(), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader leaves at once
    _, err = p.communicate(files["svm"], timeout=120)
    assert p.returncode == 141 and err.decode() == "", (args, p.returncode, err)


def test_a_fifo_read_again_in_one_process_gives_its_new_content(setup, tmp_path):
    """Each command's reading of a stream is its own: the same FIFO path written again is read anew
    (not the head kept from the command before)."""
    tmp, files, paths = setup
    lines = files["svm"].splitlines(keepends=True)
    halves = [b"".join(lines[:N // 2]), b"".join(lines[N // 2:])]
    want = cli("predict", tmp / "run", paths["svm"]).stdout.splitlines()
    got = []
    for data in halves:
        fifo = Fifo(tmp_path / "same-fifo", data)
        try:
            res = cli("predict", tmp / "run", fifo.path)
        finally:
            fifo.close()
        assert res.exit_code == 0, res.stderr
        got.append(res.stdout.splitlines())
    assert got == [want[:N // 2], want[N // 2:]]
