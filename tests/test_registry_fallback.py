"""A killed command's temporaries are removed by the next command of any kind, also where the registry's
place (``OOC_STATE_DIR``, ``$XDG_STATE_HOME``, ``~/.local/state``) cannot be written: a process then registers
in this user's private directory of the system's temporary directory, and every sweep looks in both
(ooc.fsutil.registry_dirs; docs/formats.rst, "Temporaries")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

MAKE_AND_DIE = """
import os, sys
from ooc import fsutil
tmp = fsutil.temporary_sibling(sys.argv[1])
os.makedirs(tmp)
open(os.path.join(tmp, "half-written"), "w").write("x")
print(tmp, flush=True)
os.kill(os.getpid(), 9)
"""


@pytest.mark.parametrize("state", ["a file's path", "missing parent unwritable", "writable"])
def test_a_killed_commands_temporary_is_swept_wherever_the_registry_is(tmp_path, state):
    work, tmpdir = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    tmpdir.mkdir()
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    where = {"a file's path": str(blocker / "state"), "missing parent unwritable": "/proc/ooc-no-such/state",
             "writable": str(tmp_path / "state")}[state]
    env = {**os.environ, "OOC_STATE_DIR": where, "TMPDIR": str(tmpdir), "HOME": str(blocker)}
    env.pop("XDG_STATE_HOME", None)
    env.pop("XDG_CACHE_HOME", None)
    made = subprocess.run([sys.executable, "-c", MAKE_AND_DIE, str(work / "out.zarr")], env=env,
                          capture_output=True, text=True)
    assert made.returncode == -9, made.stderr
    leftover = made.stdout.strip()
    assert os.path.isdir(leftover)
    # the next command of any kind: one that reads only (its store does not even exist)
    r = subprocess.run([sys.executable, "-m", "ooc.cli", "info", str(tmp_path / "nothing.zarr")], env=env,
                       capture_output=True, text=True)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert not os.path.exists(leftover), (state, os.listdir(work))
    assert os.listdir(work) == []
