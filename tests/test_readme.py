"""Every command of the README runs as written, in order, from a fresh directory.

The README's code blocks (indented or fenced) are read here, not copied: each shell line (an
``&&`` chain split into its commands, ``# comments`` dropped) and each Python block runs in a
temporary directory holding a copy of ``examples/``, in the README's order, and must succeed. A
command that needs a step the README does not show first (the store a batch spec trains on, the
demo's files) fails here.

What is not run, each with its reason (:data:`SKIPPED`): installing ooc (this test runs the
installed package) and the test suite itself. The data files the tour names as the user's own
(:data:`EXTERNAL`) are generated first, tiny; sizes written in the commands are cut to tiny ones
(:func:`tiny`), nothing else is changed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from ooc.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: commands not run, by their first words, and why
SKIPPED = {
    ("python3", "-m", "venv"): "makes a virtual environment (this test runs in the installed one)",
    (".",): "activates a virtual environment (this test runs in the installed one)",
    ("pip", "install"): "installs ooc (this test runs the installed package)",
    ("python", "-m", "pytest"): "runs the test suite, of which this test is a part",
}

#: the user's own data files the README's tour starts from: made here first (rows, labelled like
#: the training data; new.svm's rows are appended to data.zarr)
EXTERNAL = {"data.svm.gz": 400, "test.svm": 100, "valid.svm": 100, "new.svm": 50}

#: option values cut to tiny data (an upper bound each); everything else is run as written
TINY = {"--rows": 1500, "--cols": 300, "--nnz-per-row": 8}


def blocks(text: str) -> list[tuple[str, list[str]]]:
    """The README's code blocks in order: ``("python", lines)`` for a fenced Python block, else
    ``("text", lines)`` (indented by 4 spaces, or fenced without a language or as shell)."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if m:
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            out.append(("python" if m.group(1) == "python" else "text", lines[i + 1:j]))
            i = j + 1
            continue
        if lines[i].startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            out.append(("text", [ln[4:] for ln in lines[i:j] if ln.strip()]))
            i = j
            continue
        i += 1
    return out


def commands(text: str) -> list[tuple[str, object]]:
    """``("ooc", argv)``, ``("python", source)`` or ``("skip", (command, reason))`` in README order.

    A text block is shell when its first word is a command (``ooc``, ``python``, ...): the Layout
    block is not."""
    out = []
    for kind, lines in blocks(text):
        if kind == "python":
            out.append(("python", "\n".join(lines)))
            continue
        if not lines or lines[0].split()[0] not in ("ooc", "python", "python3", "pip", "."):
            continue
        for line in lines:
            line = re.sub(r"\s+#.*$", "", line).strip()
            for part in (p.strip() for p in line.split("&&")):
                argv = shlex.split(part)
                why = next((r for k, r in SKIPPED.items() if tuple(argv[:len(k)]) == k), None)
                if why is not None:
                    out.append(("skip", (part, why)))
                elif argv[0] == "ooc":
                    out.append(("ooc", argv[1:]))
                else:
                    raise AssertionError(f"README: a command this test does not know how to run: {part!r}")
    return out


def tiny(argv: list[str]) -> list[str]:
    """``argv`` with the sizes of :data:`TINY` cut (``ooc demo`` gets ``--rows`` too)."""
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a in TINY and out[i + 1].isdigit():
            out[i + 1] = str(min(int(out[i + 1]), TINY[a]))
    if out[0] == "demo" and "--rows" not in out:
        out += ["--rows", str(TINY["--rows"])]
    return out


def _make_external(d):
    import gzip

    rng = np.random.default_rng(0)
    w = rng.standard_normal(40)
    for name, n in EXTERNAL.items():
        X = np.round(rng.standard_normal((n, 40)), 3) * (rng.random((n, 40)) < 0.2)
        y = np.where(X @ w > 0, 1, -1)
        text = "".join(f"{y[i]} " + " ".join(f"{j + 1}:{X[i, j]:g}" for j in np.flatnonzero(X[i])) + "\n"
                       for i in range(n)).encode()
        path = os.path.join(d, name)
        with (gzip.open(path, "wb") if name.endswith(".gz") else open(path, "wb")) as f:
            f.write(text)


def test_every_readme_command_runs_as_written_in_order(tmp_path, monkeypatch):
    with open(os.path.join(ROOT, "README.md")) as f:
        steps = commands(f.read())
    assert sum(k == "ooc" for k, _ in steps) >= 15, "the README's commands were not found"
    shutil.copytree(os.path.join(ROOT, "examples"), tmp_path / "examples")
    _make_external(tmp_path)
    monkeypatch.chdir(tmp_path)
    skipped = []
    for kind, what in steps:
        if kind == "skip":
            skipped.append(what)
            continue
        if kind == "python":
            exec(compile(what, "README.md (python block)", "exec"), {"__name__": "__readme__"})
            continue
        argv = tiny(what)
        res = CliRunner().invoke(main, argv, catch_exceptions=True)
        assert res.exit_code == 0, f"README: 'ooc {' '.join(what)}' failed ({res.exit_code}): " \
                                   f"{res.stderr.strip() or res.exception}"
    # the reasons are listed, and nothing but installing and the suite itself is left out
    assert {why for _, why in skipped} <= set(SKIPPED.values()), skipped


@pytest.mark.parametrize("line,expect", [
    ("ooc info data.zarr --json   # a comment", [("ooc", ["info", "data.zarr", "--json"])]),
    ("pip install . && ooc demo", [("skip", ("pip install .", SKIPPED[("pip", "install")])), ("ooc", ["demo"])]),
])
def test_commands_are_read_from_indented_blocks(line, expect):
    assert commands(f"text\n\n    {line}\n") == expect
