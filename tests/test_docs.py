"""The documentation: the Sphinx site builds with warnings as errors, and what it is generated from
is complete (a docstring for every public name, help text for every command and option, every
example shown and run by a test). ``docs/`` is the site; the README links into it."""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import subprocess
import sys

import click
import pytest

import ooc
from ooc.cli import main as cli_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
SPHINX_PACKAGES = ("sphinx", "numpydoc", "sphinx_click", "latex2mathml")


def _missing_sphinx() -> list[str]:
    return [name for name in SPHINX_PACKAGES if importlib.util.find_spec(name) is None]


@pytest.fixture(scope="module")
def built_docs(tmp_path_factory):
    """The HTML site, built once with ``-W`` (any warning fails the build); skipped, saying why, when
    the Sphinx packages of the ``test`` extra are not installed."""
    missing = _missing_sphinx()
    if missing:
        pytest.skip(f"the docs build needs {', '.join(missing)} (pip install '.[test]')")
    out = tmp_path_factory.mktemp("html")
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-b", "html", "-q", "-d", str(out / ".doctrees"),
                        DOCS, str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert p.returncode == 0, f"sphinx -W failed:\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
    return out


def test_sphinx_build_is_strict_and_offline(built_docs):
    assert (built_docs / "index.html").exists()
    with open(os.path.join(DOCS, "conf.py")) as f:
        conf = f.read()
    assert "sphinx.ext.intersphinx" not in conf  # the CI has no network but PyPI: nothing may be downloaded


def _pages(built):
    for dirpath, _, files in os.walk(built):
        for name in files:
            if name.endswith(".html"):
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    yield os.path.relpath(os.path.join(dirpath, name), built), f.read()


def test_pages_load_nothing_from_the_network_and_math_is_rendered(built_docs):
    """Invariant: no page loads a script, style or image from another host (a reader offline sees
    the same page), and every math node is MathML in the page, never raw LaTeX left for a script."""
    import re

    maths = 0
    for page, html in _pages(built_docs):
        for ref in re.findall(r'<(?:script|link|img)\b[^>]*?(?:src|href)="([^"]+)"', html):
            assert not re.match(r"(https?:)?//", ref), f"{page} loads {ref}"
        assert "mathjax" not in html.lower(), page
        assert not re.search(r'class="math[^"]*">\s*\\\(|\\\[', html), f"{page}: raw LaTeX"
        maths += html.count("<math ")
    assert maths >= 2  # training.rst's objective and sdca.rst's step


def test_figures_are_in_the_pages_and_drawn_by_the_script(built_docs):
    """Every image a page shows exists in the built site, and each figure in docs/_static is one
    ``scripts/docs_figures.py`` draws (a figure nobody can redraw would go stale)."""
    import re

    shown = set()
    for page, html in _pages(built_docs):
        for src in re.findall(r'<img\b[^>]*?src="([^"]+)"', html):
            assert (built_docs / os.path.dirname(page) / src).resolve().exists(), (page, src)
            shown.add(os.path.basename(src))
    with open(os.path.join(ROOT, "scripts", "docs_figures.py")) as f:
        script = f.read()
    figures = {n for n in os.listdir(os.path.join(DOCS, "_static")) if n.endswith(".png")}
    assert {"convergence.png", "solvers.png"} <= figures <= shown
    assert all(f'"{n}"' in script for n in figures)


# -- docstrings ----------------------------------------------------------------------------------
def _public_methods(cls):
    for name, value in inspect.getmembers(cls):
        if name.startswith("_"):
            continue
        if inspect.isfunction(value) or inspect.ismethod(value) or isinstance(value, property):
            yield name, value


def test_every_exported_name_has_a_docstring():
    undocumented = [name for name in ooc._EXPORTS if not (inspect.getdoc(getattr(ooc, name)) or "").strip()]
    from ooc import evaluate as ev

    undocumented += [f"ooc.evaluate.{n}" for n in ("evaluate", "iter_predictions")
                     if not (inspect.getdoc(getattr(ev, n)) or "").strip()]
    assert not undocumented, f"no docstring: {undocumented}"


@pytest.mark.parametrize("name", ["LinearClassifier", "LinearRegressor", "LinearModel", "Store", "Run"])
def test_every_public_method_has_a_docstring(name):
    if name.startswith("Linear") and name != "LinearModel":
        pytest.importorskip("sklearn")
    cls = getattr(ooc, name)
    undocumented = [m for m, v in _public_methods(cls) if not (inspect.getdoc(v) or "").strip()]
    assert not undocumented, f"{name}: no docstring for {undocumented}"


# -- the command line ------------------------------------------------------------------------------
def _commands(group=cli_main, path=("ooc",)):
    yield path, group
    for name, cmd in getattr(group, "commands", {}).items():
        yield from _commands(cmd, path + (name,))


def _options(cmd):
    return [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]


def test_every_command_and_option_has_help_text():
    missing = []
    for path, cmd in _commands():
        if not (cmd.help or "").strip():
            missing.append(" ".join(path))
        missing += [f"{' '.join(path)} {p.opts[-1]}" for p in _options(cmd) if not (p.help or "").strip()]
    assert not missing, f"no help text: {missing}"
    assert set(cli_main.commands) >= {"convert", "info", "train", "resume", "predict", "evaluate", "batch", "synth",
                                      "demo"}


def test_cli_page_is_generated_from_every_command():
    with open(os.path.join(DOCS, "cli.rst")) as f:
        page = f.read()
    directive = re.search(r"^\.\. click:: ooc\.cli:main\n((?:   :\S+:.*\n)+)", page, re.M)
    assert directive, "docs/cli.rst must document ooc.cli:main with sphinx-click"
    assert re.search(r":nested: full|:recursive:", directive.group(1)), "every subcommand must be documented"


def test_cli_page_lists_every_command_and_option_with_its_default(built_docs):
    html = (built_docs / "cli.html").read_text()
    missing = []
    for path, cmd in _commands():
        if len(path) > 1 and f'id="{"-".join(path)}"' not in html:
            missing.append(" ".join(path))
        for p in _options(cmd):
            ids = [f'id="cmdoption-{"-".join(path)}-{opt.lstrip("-")}"' for opt in p.opts]
            found = [html.index(i) for i in ids if i in html]
            if not found:
                missing.append(f"{' '.join(path)} {p.opts[-1]}")
                continue
            if p.show_default and p.default is not None and not p.is_flag:
                entry = html[found[0]:html.find('id="cmdoption-', found[0] + 1)]
                if "Default" not in entry:
                    missing.append(f"{' '.join(path)} {p.opts[-1]} (its default)")
    assert not missing, f"not in the CLI reference: {missing}"


# -- examples --------------------------------------------------------------------------------------
def _example_files():
    here = os.path.join(ROOT, "examples")
    return sorted(f for f in os.listdir(here) if os.path.isfile(os.path.join(here, f))
                  and f.endswith((".py", ".sh", ".toml")))


def test_every_example_is_in_the_docs_and_run_by_a_test():
    with open(os.path.join(DOCS, "examples.rst")) as f:
        page = f.read()
    tests = ""
    for name in os.listdir(os.path.join(ROOT, "tests")):
        if name.startswith("test_") and name.endswith(".py") and name != "test_docs.py":
            with open(os.path.join(ROOT, "tests", name)) as f:
                tests += f.read()
    files = _example_files()
    assert {"python_api.py", "cli_walkthrough.sh", "grid.toml", "path.toml"} <= set(files)
    not_shown = [f for f in files if f".. literalinclude:: ../examples/{f}" not in page]
    not_run = [f for f in files if f not in tests]
    assert not not_shown, f"examples not shown in docs/examples.rst: {not_shown}"
    assert not not_run, f"examples no test runs: {not_run}"


# -- the project stands alone --------------------------------------------------------------------
def test_nothing_refers_outside_the_project():
    outside = ".." + "/shared"  # (spelled so that this file does not match itself)
    found = []
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in (".git", "_build", "__pycache__", ".pytest_cache")
                   and not d.endswith((".zarr", ".egg-info"))]
        for name in files:
            path = os.path.join(top, name)
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except (UnicodeDecodeError, OSError):
                continue
            if outside in text:
                found.append(os.path.relpath(path, ROOT))
    assert not found, f"refer to files outside the project: {found}"


def test_run_capped_interface():
    script = os.path.join(ROOT, "scripts", "run-capped")
    assert os.access(script, os.X_OK)
    assert subprocess.run(["bash", "-n", script]).returncode == 0
    usage = subprocess.run([script], capture_output=True, text=True)
    assert usage.returncode == 2 and usage.stderr.startswith("run-capped: usage")
    bad = subprocess.run([script, "12Q", "--", "true"], capture_output=True, text=True)
    assert bad.returncode == 2 and "bad LIMIT" in bad.stderr
    r = subprocess.run([script, "64M", "--", "sh", "-c", "exit 7"], capture_output=True, text=True, timeout=60)
    if r.returncode == 3:
        assert r.stderr.startswith("run-capped: no writable memory cgroup") or "cannot" in r.stderr
        return
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 7, r.stderr
    assert re.fullmatch(r"run-capped: limit=64M peak=\d+M oom_kills=0 exit=7", last), last
