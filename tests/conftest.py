# pytest puts this directory on sys.path (rootdir conftest, "prepend" import mode), so test
# modules in subfolders can `import reference` (the pure-Python oracles).
import os
import pathlib
import shutil
import tempfile

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

# The session's temporary files (tmp_path, tempfile, and those of every process it starts) in memory
# (/dev/shm) when there is room: a run writes and fsyncs a checkpoint every epoch, and the suite's runs
# of hundreds of tiny epochs spent most of their time in fsync on a busy disk (a Crammer-Singer test:
# 47 s on the disk, 14 s in memory). No test can observe an fsync (that takes a power cut); the tests
# that run under a memory cgroup keep the disk (tmp_path below): a cgroup is charged for the tmpfs
# pages its process writes. OOC_TEST_TMP=disk keeps everything on the disk.
_DISK_TMP = tempfile.gettempdir()
# ooc's registry of directories holding temporaries (ooc.fsutil.sweep_temporaries): the session's own,
# never the user's (set below with the session's temporary directory)
_SESSION_TMP = None
if os.environ.get("OOC_TEST_TMP", "memory") != "disk" and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
    _st = os.statvfs("/dev/shm")
    if _st.f_bavail * _st.f_frsize >= 4 << 30:
        _SESSION_TMP = tempfile.mkdtemp(prefix="ooc-tests-", dir="/dev/shm")
        os.environ["TMPDIR"] = _SESSION_TMP
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again
os.environ["OOC_STATE_DIR"] = tempfile.mkdtemp(prefix="ooc-state-")


#: ``OOC_GENERATOR_SCALE=N``: every hypothesis test draws N times the examples its CI budget names (its
#: ``@settings(max_examples=...)``), without the example database: how ``scripts/run_generators.py`` runs the
#: suite's generators big. Hypothesis reads a test's settings when the test is called, so they are scaled here,
#: once per test function (parametrized cases share it).
_SCALE = float(os.environ.get("OOC_GENERATOR_SCALE", "1") or 1)


def pytest_collection_modifyitems(config, items):
    if _SCALE == 1:
        return
    from hypothesis import settings

    done = set()
    for item in items:
        f = getattr(item, "obj", None)
        s = getattr(f, "_hypothesis_internal_use_settings", None)
        if s is None or not getattr(f, "is_hypothesis_test", False) or id(f) in done:
            continue
        done.add(id(f))
        f._hypothesis_internal_use_settings = settings(s, max_examples=max(1, round(s.max_examples * _SCALE)),
                                                       database=None)


def pytest_sessionfinish(session, exitstatus):
    if _SESSION_TMP is not None:
        shutil.rmtree(_SESSION_TMP, ignore_errors=True)


@pytest.fixture
def tmp_path(tmp_path, request):
    """pytest's ``tmp_path``, but on the disk for the tests marked ``cgroup`` (see above)."""
    if _SESSION_TMP is None or request.node.get_closest_marker("cgroup") is None:
        return tmp_path
    d = pathlib.Path(tempfile.mkdtemp(prefix="ooc-test-", dir=_DISK_TMP))
    request.addfinalizer(lambda: shutil.rmtree(d, ignore_errors=True))
    return d


@pytest.fixture
def no_plot(monkeypatch):
    """Skip RUN/convergence.png (about half a second a run) where the plot is not under test."""
    import importlib

    monkeypatch.setattr(importlib.import_module("ooc.train"), "plot_convergence", lambda rd: None)


@pytest.fixture(scope="module")
def memory_counts_the_work():
    """Small ``--memory`` figures that drive small text chunks and blocks: they count only what the work
    adds (``OOC_MEMORY_SCOPE=work``), not the whole process (which refuses anything under ~200 MiB)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OOC_MEMORY_SCOPE", "work")
        yield
