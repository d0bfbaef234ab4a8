"""Helpers the fault-injection tests share: a small file system to fill up."""

from __future__ import annotations

import contextlib
import os
import subprocess

import pytest


@contextlib.contextmanager
def small_fs(path, size: str):
    """A tmpfs of ``size`` mounted at ``path`` for the block (the test is skipped where mounting is not permitted)."""
    os.makedirs(path, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root / CAP_SYS_ADMIN): {r.stderr.strip()}")
    try:
        yield str(path)
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
