# pytest puts this directory on sys.path (rootdir conftest, "prepend" import mode), so test
# modules in subfolders can `import reference` (the pure-Python oracles).
import os

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))

# Tests compile ooc's kernels for a loss defined here (huber_loss.Huber). Numba's cache index of a
# kernel pickles the classes of every signature it holds, so a process that loads that index must
# be able to import huber_loss: every process the tests start (the ooc command, examples, Dask
# workers) gets this folder on its path, and the test session writes its compiled kernels to a
# cache of its own, which processes outside the tests never read. Set before numba is imported.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_HERE, os.environ.get("PYTHONPATH")) if p)
_cache = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(os.path.dirname(_HERE), ".numba-cache")
os.environ["NUMBA_CACHE_DIR"] = os.path.join(_cache, "tests")


@pytest.fixture
def no_plot(monkeypatch):
    """Skip RUN/convergence.png (about half a second a run) where the plot is not under test."""
    import importlib

    monkeypatch.setattr(importlib.import_module("ooc.train"), "plot_convergence", lambda rd: None)
