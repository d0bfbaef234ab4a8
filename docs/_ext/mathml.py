"""Math rendered when the docs are built, as MathML: no script, nothing fetched by the reader.

Sphinx's default HTML math renderer loads MathJax from a CDN, so a page read offline shows raw
LaTeX. MathML is rendered by the browser itself (Firefox, Chrome/Edge 109+, Safari); the LaTeX is
converted at build time by ``latex2mathml`` (pure Python, in the ``docs`` and ``test`` extras).
"""

from docutils import nodes
from latex2mathml.converter import convert


def _visit_inline(self, node):
    self.body.append(convert(node.astext(), display="inline"))
    raise nodes.SkipNode


def _visit_block(self, node):
    # one equation per paragraph of the directive, as Sphinx's own renderers do
    parts = [p for p in node.astext().split("\n\n") if p.strip()]
    self.body.append('<div class="math">' + "".join(convert(p, display="block") for p in parts) + "</div>\n")
    raise nodes.SkipNode


def setup(app):
    app.add_html_math_renderer("mathml", (_visit_inline, None), (_visit_block, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
