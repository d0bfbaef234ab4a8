"""The code's own checks: ruff (pyflakes, import order) and the import-linter layer contracts.

``pyproject.toml`` holds both configurations; the layers are the ones docs/architecture.rst describes.
"""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tool(name):
    # the console script beside this interpreter (a venv), else on PATH
    here = os.path.join(os.path.dirname(sys.executable), name)
    found = here if os.path.exists(here) else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install '.[test]'")
    return found


def test_ruff():
    r = subprocess.run([_tool("ruff"), "check", "--no-cache", "ooc", "tests", "scripts", "examples"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_import_layers():
    r = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout
