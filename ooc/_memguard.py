r"""The measured side of ``--memory``: the process's resident size held under its ceiling.

The planner (:mod:`ooc.schedule.planner`) splits a budget by a model of what a solver holds;
a model misses what it does not name (the allocator's slack, a library's buffers, a transient
copy). The governor checks the model against the process itself. While a command that was given
a ceiling runs (:func:`governed`), its resident size is read

* at every phase boundary its code marks (:func:`check`: a block loaded, a group worked on, a
  checkpoint written), and
* by a sampling thread every :data:`SAMPLE_SECONDS` in between,

and, when it is above ``ceiling - reserve``, the governor first hands freed heap back to the
system (``malloc_trim``), then asks what may shrink (:func:`register`: block caches, read-ahead)
to give back the excess, and says so once (``ooc: memory: ...`` on the ``ooc`` logger). What a
shrinker gives up is only what is kept to save a read: iterates never depend on it.

Invariant (docs/training.rst, "Memory"): with a ceiling ``C`` and reserve ``R``, after every
check the resident size is at most ``C - R`` or nothing registered holds anything more; the
reserve covers what a phase allocates between two checks (a group read ahead, a checkpoint's
copies), so the peak stays under ``C``.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import threading
import weakref
from typing import Iterator, Protocol

from ._malloc import trim
from ._memlimit import rss_bytes

__all__ = ["Shrinkable", "MappedPages", "governed", "check", "room", "register", "ceiling", "peak", "shrunk", "SAMPLE_SECONDS"]

#: How often the sampling thread reads the resident size while a ceiling is set.
SAMPLE_SECONDS = 0.02

log = logging.getLogger("ooc")


class Shrinkable(Protocol):
    """What the governor may shrink: gives back up to ``nbytes`` and returns what it gave."""

    def shrink(self, nbytes: int) -> int: ...


class _State:
    def __init__(self):
        self.lock = threading.Lock()
        self.ceiling: int | None = None
        self.reserve = 0
        self.peak = 0
        self.shrunk = 0
        self.told = False
        self.shrinkers: list[weakref.ref] = []


_S = _State()


class MappedPages:
    """Memory-mapped arrays (``numpy.memmap`` of files) the governor may make non-resident: their dirty
    pages written back (``msync``) and dropped from this process (``madvise(MADV_DONTNEED)``); the next
    access reads them again from the file (its page cache), so no value changes. A mapped page counts in
    the resident size as much as an allocated one (rcd-primal's paged margins)."""

    def __init__(self, arrays):
        self._maps = [m for m in (getattr(a, "_mmap", None) for a in arrays) if m is not None]

    def shrink(self, nbytes: int) -> int:
        before = rss_bytes()
        for m in self._maps:
            try:
                m.flush()
                m.madvise(mmap.MADV_DONTNEED)
            except (OSError, ValueError, AttributeError):  # closed, or no madvise on this platform
                continue
        return max(0, before - rss_bytes())


def register(obj: Shrinkable) -> None:
    """Let the governor shrink ``obj`` (held weakly: a cache gone is forgotten)."""
    with _S.lock:
        _S.shrinkers = [r for r in _S.shrinkers if r() is not None]
        _S.shrinkers.append(weakref.ref(obj))


def ceiling() -> int | None:
    """The ceiling in force (bytes of resident memory of the whole process), or None."""
    return _S.ceiling


def peak() -> int:
    """The largest resident size seen since the ceiling was set."""
    return _S.peak


def shrunk() -> int:
    """Bytes the shrinkers gave back since the ceiling was set."""
    return _S.shrunk


def room(nbytes: int) -> bool:
    """Whether ``nbytes`` more fit under the ceiling less the reserve, after the governor made what room
    it can (trim, shrink). Called before a large allocation that may be skipped or made smaller (a copy
    kept in a cache) or that is about to happen anyway (a group's arrays): the excess is taken off the
    caches before the bytes are allocated, not after. True when no ceiling is set."""
    cap = _S.ceiling
    if cap is None:
        return True
    need = int(nbytes)
    if rss_bytes() + need <= cap - _S.reserve:
        return True
    return check("before an allocation", need) + need <= cap - _S.reserve


def check(where: str = "", extra: int = 0) -> int:
    """Read the resident size; above ``ceiling - reserve``, trim the heap and shrink (module docstring).

    ``extra``: bytes about to be allocated (:func:`room`), counted as held. Returns the resident size
    after the check. Cheap (one read of ``/proc/self/statm``) when under.
    """
    rss = rss_bytes()
    cap = _S.ceiling
    if rss > _S.peak:
        _S.peak = rss
    if cap is None or rss + extra <= cap - _S.reserve:
        return rss
    with _S.lock:  # one shrinker at a time (the sampler and a phase boundary may both get here)
        rss = rss_bytes()
        target = cap - _S.reserve - int(extra)
        if rss <= target:
            return rss
        trim()
        rss = rss_bytes()
        freed = 0
        for ref in list(_S.shrinkers):
            if rss - freed <= target:
                break
            obj = ref()
            if obj is not None:
                freed += int(obj.shrink(rss - freed - target))
        if freed:
            trim()
            _S.shrunk += freed
            after = rss_bytes()
            if not _S.told:
                _S.told = True
                log.info("memory: the process held %s, above its plan under the ceiling %s%s; gave back %s of "
                         "cached blocks (read again when needed; the iterates do not change)", _mib(rss), _mib(cap),
                         f" ({where})" if where else "", _mib(freed))
            rss = after
        return rss


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


@contextlib.contextmanager
def governed(limit: int | None, reserve: int = 0) -> Iterator[None]:
    """Hold this process's resident size under ``limit`` bytes while the block runs (None: only
    measure the peak). ``reserve``: what a phase may allocate between two checks."""
    stop = threading.Event()
    with _S.lock:
        _S.ceiling = None if limit is None else int(limit)
        _S.reserve = max(0, int(reserve))
        _S.peak, _S.shrunk, _S.told = rss_bytes(), 0, False

    def sample():
        while not stop.wait(SAMPLE_SECONDS):
            check("between phases")

    t = threading.Thread(target=sample, name="ooc-memory", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        with _S.lock:
            _S.ceiling = None
