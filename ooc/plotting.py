"""Drawing with matplotlib, its messages routed as ooc's own one-line warnings.

matplotlib speaks in two ways: Python warnings (many through its ``_api.warn_external``, which
points them at the caller's line, ooc's source) and records of its ``matplotlib`` logger (a font
cache being built, a cache directory that is not writable), which without a handler reach stderr
through logging's last resort. Neither is written for the user of a command. While ooc draws
(:func:`drawing`), both are collected and re-issued, once each, as a :class:`PlotWarning`
``matplotlib: TEXT``: the command line shows it as one ``ooc: warning:`` line (``ooc.cli``), a
Dask worker's filter hides it as it hides any warning, a Python caller can filter it by category.
Deprecations and the like are for the authors of ooc and are dropped.
"""

from __future__ import annotations

import contextlib
import logging
import warnings

#: Warnings meant for the authors of code that calls a library, not for the user of a command.
FOR_DEVELOPERS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning, ImportWarning, ResourceWarning)


class PlotWarning(UserWarning):
    """A message of the plotting library while ooc drew a figure (``matplotlib: TEXT``)."""


class _Keep(logging.Handler):
    def __init__(self, texts: list):
        super().__init__(logging.WARNING)
        self.texts = texts

    def emit(self, record):
        self.texts.append(record.getMessage())


@contextlib.contextmanager
def drawing():
    """Draw inside this block (the import of matplotlib too): what matplotlib says is re-issued when it
    ends as :class:`PlotWarning` s, one per distinct message (the logger's records, then the warnings)."""
    texts: list = []
    logger = logging.getLogger("matplotlib")
    handler, propagate = _Keep(texts), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False  # never to the root logger's handlers, nor to logging's last resort
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
    seen = set()
    said = texts + [str(w.message) for w in caught if not issubclass(w.category, FOR_DEVELOPERS)]
    for text in (" ".join(t.split()) for t in said):
        if text and text not in seen:
            seen.add(text)
            warnings.warn(f"matplotlib: {text}", PlotWarning, stacklevel=1)  # ooc says it: its one-line route
