"""pyproject.toml states what ooc imports: every distribution a module of ``ooc/`` imports is declared (in
``dependencies``, or in an optional extra for the optional features), and every declared core dependency
is imported somewhere (or is named here with the reason it is needed without an import)."""

from __future__ import annotations

import ast
import functools
import importlib.metadata as md
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

#: declared without an import of their own, and why
NO_IMPORT = {
    # the dask[distributed] extra brings the scheduler ooc's --distributed talks to through `distributed`
    "dask": "dask[distributed] is the cluster ooc drives through the distributed package",
}


def _name(req: str) -> str:
    return re.split(r"[\s\[<>=!~;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _declared() -> tuple[set, set]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in project["dependencies"]}
    extras = {_name(r) for reqs in project["optional-dependencies"].values() for r in reqs if not r.startswith("ooc")}
    return core, extras


def _imported() -> dict:
    """Top-level module name -> first file importing it, over ooc/ (absolute imports only)."""
    found = {}
    for path in sorted((ROOT / "ooc").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for n in names:
                found.setdefault(n.split(".")[0], str(path.relative_to(ROOT)))
    return found


@functools.lru_cache(maxsize=None)
def _installed() -> dict:
    return md.packages_distributions()  # (reads every installed distribution's files: once)


def _distributions(module: str) -> set:
    return {d.lower().replace("_", "-") for d in _installed().get(module, [])}


def test_every_imported_distribution_is_declared():
    core, extras = _declared()
    missing = []
    for module, where in _imported().items():
        if module == "ooc" or module in sys.stdlib_module_names or module == "__future__":
            continue
        dists = _distributions(module)
        if not dists:
            continue  # not installed here: an optional backend's import, guarded where it is used
        if not dists & (core | extras):
            missing.append(f"{module} ({where}): from {', '.join(sorted(dists))}")
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)


def test_every_core_dependency_is_imported():
    core, _ = _declared()
    imported = {d for m in _imported() for d in _distributions(m)}
    unused = sorted(core - imported - set(NO_IMPORT) - {"tomli"})  # tomli: Python 3.10's tomllib
    assert not unused, f"declared in pyproject.toml but imported nowhere in ooc/: {unused}"


def test_zarr_is_bounded_where_its_layout_is_read():
    """ooc.store.chunk_files reads Zarr's on-disk chunk layout itself: the next major version is not assumed."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    zarr = next(r for r in project["dependencies"] if _name(r) == "zarr")
    assert "<" in zarr, zarr


@pytest.mark.parametrize("module", ["numpy", "zarr", "numcodecs", "google_crc32c", "fsspec", "llvmlite"])
def test_the_modules_ooc_imports_directly_resolve_to_distributions(module):
    assert _distributions(module), module
