"""Sphinx configuration of ooc's documentation.

Build (strict: every warning is an error)::

    pip install '.[docs]'
    python -m sphinx -W -b html docs docs/_build/html

Math is rendered to MathML at build time (``_ext/mathml.py``) and the figures in ``_static`` are
drawn by ``python scripts/docs_figures.py``.

Nothing here downloads anything (no intersphinx): the build works offline.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the ooc of this checkout, installed or not
sys.path.insert(0, os.path.join(ROOT, "docs", "_ext"))  # mathml: math rendered at build time

from ooc._version import __version__  # noqa: E402

project = "ooc"
author = "the ooc authors"
copyright = "the ooc authors"
version = release = __version__

extensions = [
    "sphinx.ext.autodoc",
    "numpydoc",
    "sphinx_click",
    "mathml",
]
# math as MathML written into the pages (docs/_ext/mathml.py), not MathJax from a CDN: readable offline
html_math_renderer = "mathml"

exclude_patterns = ["_build"]
root_doc = "index"
html_theme = "alabaster"
html_title = f"ooc {__version__}"
html_static_path = []  # the figures in _static are images of the pages, copied by the image directive

# autodoc: members in source order, imported lazily through ooc's PEP 562 exports
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the numpydoc sections say the types

# numpydoc: no autosummary tables of members (the pages list what they document)
numpydoc_show_class_members = False
numpydoc_show_inherited_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()
