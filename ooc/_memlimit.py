"""What memory this process may use: the limits set on it, what it holds, and ``--memory auto``.

A process on Linux is bounded by the tightest of

* its memory cgroup's ``memory.max`` (v2) or ``memory.limit_in_bytes`` (v1), and those of the
  cgroups above it: the kernel kills the process when the group's memory (page cache included,
  though the kernel reclaims clean cache before it kills) exceeds it;
* ``RLIMIT_AS``: an allocation beyond it fails (``MemoryError``);
* the RAM available on the machine (``MemAvailable`` of ``/proc/meminfo``, plus what this process
  already holds: that is in use, not available).

``--memory auto`` is that bound, less what the process holds when training starts (the interpreter,
numpy, Numba and their caches: :func:`rss_bytes`) and a margin for what is not planned (Numba
compiling a kernel, the allocator's slack, thread stacks): :data:`MARGIN_FRACTION` of the bound, at
least :data:`MARGIN_MIN`.

The command line counts the whole process: ``--memory X`` leaves ``X`` less the process's resident
size when the work is planned (:func:`whole_process`, :func:`work_budget`) to the work. Python callers (``ooc.train``, the
estimators) pass what training may add to their process as it is.
"""

from __future__ import annotations

import os
import resource
from typing import NamedTuple

from ._cgroup import control_files, read_text
from .units import format_bytes  # noqa: F401 (named in this module's messages)

__all__ = ["Limit", "add_limit", "process_limit", "rss_bytes", "peak_rss_bytes", "auto_budget", "whole_process", "counts_whole_process", "work_budget",
           "held_bytes", "kernels_loaded", "smallest_limit",
           "MARGIN_MIN", "KERNELS_BYTES", "COMPILE_BYTES", "COMPILE_FIRST", "kernels_uncached", "compile_bytes", "kernels_bytes", "governor_reserve",
           "TRAIN_PROCESS_BYTES", "limit_that_works", "Budget", "resolve_budget", "MemoryTooSmall"]

#: Bytes left unplanned under ``auto`` at least (Numba's compiler, allocator slack, stacks).
MARGIN_MIN = 32 << 20
#: ... and this fraction of the limit.
MARGIN_FRACTION = 0.08

_UNLIMITED = 1 << 62
#: What loading the compiled kernels costs a process the first time it trains (Numba reads them from
#: its cache, or compiles them, into memory that stays): measured 60 MiB for the sdca family on a
#: warm cache (a process's resident size during its first pass over a 2**22-feature store, less
#: the same during its second training).
KERNELS_BYTES = 64 << 20
#: What compiling them costs on top, where Numba's cache does not hold them yet (a fresh
#: ``NUMBA_CACHE_DIR``, a new install): the compiler's code and type-inference state stay resident.
#: Measured 31-43 MiB over the warm-cache peak for sdca, acc-sdca, rcd-primal, pure L1, dgpd, an
#: intercept and one-vs-rest (``/usr/bin/time -f %M ooc train`` on a 2000-row store, a fresh cache
#: against the same run again); a 200k x 2**20 store at ``--memory`` = the named limit went 0.7 % over
#: it with a fresh cache when this was not charged.
COMPILE_BYTES = 48 << 20
#: What compiling costs at least, however few kernels Numba must compile: the compiler's own state (code
#: generation, type inference) is brought in for the first one. Measured: 11.4 MiB of resident size for
#: one specialization (sdca's primal loss with ``--fit-intercept``'s shifted loss) in a process that had
#: loaded the others from the cache; a run at the figure named went 9.5 MiB above the same run with the
#: specialization cached, and 1.7 % over the figure (302 MiB at 297) in a CI run when it was charged by
#: share (one kernel of five: not at all, as its index held the plain loss's).
COMPILE_FIRST = 16 << 20
#: What an ``ooc train`` process holds when it plans, before its kernels (measured: 124 MiB, Python 3.11,
#: numpy 2, Numba, Zarr 3): ``ooc info --memory`` assumes it.
TRAIN_PROCESS_BYTES = 128 << 20
_kernels_loaded = False


class Limit(NamedTuple):
    """The tightest bound on this process's memory: ``bytes`` and where it comes from (``source``)."""

    bytes: int
    source: str


def _cgroup_limit(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int | None:
    """The smallest memory limit of this process's cgroup and its ancestors, or None."""
    best = None
    for (value,) in control_files("memory", "memory.max", ("memory",), ("memory.limit_in_bytes",), proc_cgroup,
                                  root):
        if value and value.isdigit() and int(value) < _UNLIMITED:  # "max" or v1's huge number: no limit
            best = int(value) if best is None else min(best, int(value))
    return best


def _mem_available() -> int | None:
    text = read_text("/proc/meminfo")
    for line in (text or "").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def rss_bytes() -> int:
    """This process's resident memory now (``/proc/self/statm``; the peak where that is unreadable)."""
    text = read_text("/proc/self/statm")
    if text:
        return int(text.split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_rss_bytes() -> int:
    """This process's peak resident size so far (``ru_maxrss``; what ``/usr/bin/time -v`` reports at its end)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# limits set on this process from outside the kernel's view (a Dask worker's share: add_limit)
_EXTRA: list[Limit] = []


def add_limit(limit: Limit) -> None:
    """Count ``limit`` too from now on (a batch worker's share of its machine: :func:`ooc.batch.run_one`)."""
    if limit not in _EXTRA:
        _EXTRA.append(limit)


def process_limit() -> Limit:
    """The tightest of the cgroup limit, ``RLIMIT_AS``, the RAM available (module docstring) and the
    limits added with :func:`add_limit`."""
    found = list(_EXTRA)
    cg = _cgroup_limit()
    if cg is not None:
        found.append(Limit(cg, "cgroup memory limit"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft not in (resource.RLIM_INFINITY, -1) and soft > 0:
        found.append(Limit(int(soft), "RLIMIT_AS"))
    avail = _mem_available()
    if avail is not None:
        found.append(Limit(avail + rss_bytes(), "available RAM"))
    if not found:
        return Limit(_UNLIMITED, "no limit found")
    return min(found, key=lambda lim: lim.bytes)


def margin(limit: int) -> int:
    """What ``auto`` leaves unplanned below ``limit``."""
    return max(MARGIN_MIN, int(limit * MARGIN_FRACTION))


def smallest_limit(need: int) -> int:
    """The smallest limit under which ``auto`` leaves ``need`` bytes (the process and its work) planned."""
    return max(need + MARGIN_MIN, -(-int(need) * 100 // int(100 - 100 * MARGIN_FRACTION)))


#: What a limit named to the user as one that works adds to :func:`smallest_limit`: the same command's
#: resident size varies by a MiB or two from run to run (allocator, thread stacks, import order), and a
#: limit computed from one run's size to the byte was refused by the next (208.3 MiB held instead of 207).
STATED_HEADROOM = 8 << 20


def limit_that_works(need: int) -> int:
    """The limit to name as the one under which ``auto`` plans ``need`` bytes: :func:`smallest_limit`
    with :data:`STATED_HEADROOM`."""
    return smallest_limit(need) + STATED_HEADROOM


def auto_budget(limit: Limit | None = None, held: int | None = None) -> int:
    """``--memory auto`` in bytes the work may add: the limit less the process and the margin (>= 0)."""
    limit = limit or process_limit()
    held = rss_bytes() if held is None else held
    return max(0, limit.bytes - held - margin(limit.bytes))


# set by the command line, which owns its process: an explicit --memory counts the whole process
_WHOLE_PROCESS = False


def whole_process(on: bool = True) -> None:
    """From now on an explicit ``--memory X`` means the whole process: the work gets ``X`` less
    the process's resident size when it plans (:func:`work_budget`).

    Called by the command line; not called, ``X`` is what the work may add to the caller's process
    (a Python session holding data of its own).
    """
    global _WHOLE_PROCESS
    _WHOLE_PROCESS = bool(on)


def counts_whole_process() -> bool:
    """Whether an explicit memory size counts the whole process (see :func:`whole_process`)."""
    return _WHOLE_PROCESS


def work_budget(memory: int | None, held: int | None = None) -> int:
    """Bytes the work may add to this process for a memory option parsed to ``memory`` (None: ``auto``);
    ``held``: what the process holds (default :func:`rss_bytes`). On the command line (the whole
    process) an explicit ``memory`` leaves ``held`` and :func:`margin` unplanned, as ``auto`` does."""
    held = rss_bytes() if held is None else held
    if memory is None:
        return auto_budget(held=held)
    if not _WHOLE_PROCESS:
        return max(0, int(memory))
    # the whole process: the same margin as auto's is left unplanned (the allocator's slack, a kernel's
    # first load, transients between two of the governor's readings), so that the peak stays under it
    return max(0, int(memory) - held - margin(int(memory)))


#: What the memory governor keeps free below a ceiling (:func:`governor_reserve`): at least this ...
RESERVE_MIN = 16 << 20
#: ... and this fraction of the ceiling.
RESERVE_FRACTION = 0.05


def governor_reserve(ceiling: int) -> int:
    """Bytes the memory governor (:mod:`ooc._memguard`) keeps free below ``ceiling``: what a phase may
    allocate between two of its checks."""
    return max(RESERVE_MIN, int(ceiling * RESERVE_FRACTION))


def kernels_loaded() -> None:
    """The kernels are in memory now (a first training finished): :func:`held_bytes` stops adding them."""
    global _kernels_loaded
    _kernels_loaded = True


def kernels_uncached(modules=(), needed=None) -> float:
    """The share of the compiled kernels that the modules named in ``modules`` call (each module's
    ``@njit(cache=True)`` functions, its own and those it imported) that Numba's cache does not hold:
    0.0 when every one's index exists, belongs to the source as installed (Numba's own check of the
    source's time stamp) and holds a specialization the run calls, 1.0 on a fresh cache.

    ``needed(name, signature) -> bool``: whether a cached ``signature`` (a tuple of Numba types) of kernel
    ``name`` is one the run calls (:func:`ooc.memfit.kernel_signatures`: the loss it passes); None: any.
    An index holds one entry per specialization compiled, so a kernel compiled for another loss (the
    plain one where ``--fit-intercept`` passes it shifted, logistic where the run takes squared) has an
    index and still compiles.

    Read through Numba's cache objects (``Dispatcher._cache``); a kernel whose cache is not readable
    that way (another Numba) counts as not cached, so that a limit named from it is never too low.
    """
    import sys

    seen = missing = 0
    for name in modules:
        module = sys.modules.get(name)
        for attr, value in vars(module).items() if module is not None else ():
            cache = getattr(value, "_cache", None)
            if cache is None or not hasattr(value, "py_func"):
                continue
            seen += 1
            try:
                index = cache._cache_file._load_index()  # {} for a missing index or a changed source
                # keys: (signature, target key); the kernel's own name (a module may import it as another)
                kernel = getattr(value.py_func, "__name__", attr)
                missing += not any(needed is None or needed(kernel, key[0]) for key in index)
            except Exception:  # noqa: BLE001 - an unreadable or unknown cache: not cached
                missing += 1
    return missing / seen if seen else 0.0


def compile_bytes(share: float) -> int:
    """What compiling a ``share`` of a run's kernels adds (:func:`kernels_uncached`): nothing when Numba's
    cache holds them all, else that share of :data:`COMPILE_BYTES`, at least :data:`COMPILE_FIRST`,
    rounded up to a MiB."""
    if share <= 0.0:
        return 0
    return -(-max(COMPILE_FIRST, int(COMPILE_BYTES * share)) // (1 << 20)) << 20


def kernels_bytes(modules=(), fresh: bool = False, needed=None) -> int:
    """What loading the kernels of ``modules`` will add to this process (``fresh``: to a new process), by
    estimate: for a Python caller's process and runs whose kernels were not loaded ahead (the command line
    loads them before it plans and measures itself: :func:`ooc.train.load_kernels`):
    :data:`KERNELS_BYTES` until a training here has loaded kernels (Numba's compiler context and the
    first family's code), plus what compiling those Numba's cache lacks costs (:func:`compile_bytes` of
    :func:`kernels_uncached` with ``needed``: a second family after the first, dgpd's fallback to sdca,
    another loss may)."""
    compiling = compile_bytes(kernels_uncached(modules, needed))
    return compiling + (0 if _kernels_loaded and not fresh else KERNELS_BYTES)


def held_bytes(modules=(), needed=None) -> int:
    """What the process holds before training plans: its resident size, plus what loading the kernels
    of ``modules`` adds until a training in this process has loaded them (:func:`kernels_bytes`)."""
    return rss_bytes() + kernels_bytes(modules, needed=needed)


class MemoryTooSmall(ValueError):
    """An explicit whole-process ``--memory`` below what a command holds at once: one line naming the
    smallest that works (:meth:`Budget.require`), raised before the command reads or writes anything."""


class Budget(NamedTuple):
    """A memory option resolved once for a command (:func:`resolve_budget`).

    ``work``: bytes the work may add to the process; ``ceiling``: the whole process's resident size the
    memory governor holds it under (:func:`ooc._memguard.governed`; None: a Python caller's ``memory``,
    only measured); ``held``: what the process held when it was resolved (0 for a Python caller);
    ``limit``: under ``auto``, the limit it came from; ``memory``: the option's bytes (None: ``auto``);
    ``reserved``: bytes of the work a caller took off ``work`` for something of its own before passing the
    rest on (append's writers' buffers): a refusal of the rest names a figure that counts them.
    """

    work: int
    ceiling: int | None
    held: int
    limit: Limit | None
    memory: int | None
    reserved: int = 0

    def require(self, least: int, what: str) -> None:
        """Refuse (:class:`MemoryTooSmall`) an explicit whole-process ``--memory`` that leaves the work less
        than ``least`` bytes (what ``what`` holds at once at its smallest buffers), naming the smallest
        ``--memory`` that works (:func:`limit_that_works`, rounded up). ``auto`` and a Python caller's memory
        go on (the buffers have floors of their own)."""
        if self.memory is None or self.ceiling is None or self.work >= least:
            return
        raise MemoryTooSmall(
            f"--memory {format_bytes(self.memory)} is less than {what} holds at once: the smallest --memory that "
            f"works here is {format_bytes(limit_that_works(self.held + self.reserved + int(least)), up=True)} (the process holds "
            f"{format_bytes(self.held)} of it)")


    def hold(self, whole: int, least: int, what: str) -> Budget:
        """This budget less ``whole`` bytes that ``what`` holds at once whatever its buffers (an input read
        whole), refused (:class:`MemoryTooSmall`) when it leaves the work less than ``least``: an explicit
        whole-process ``--memory`` as :meth:`require` refuses it, and ``auto`` under a limit found too (no
        buffer shrinks what is read whole: the process would pass the limit), naming the smallest limit that
        works. A Python caller's memory (no ceiling) only loses ``whole``."""
        whole = max(0, int(whole))
        if whole and self.ceiling is not None and self.work < whole + least:  # else the buffers' own require
            self.refuse(whole + least, f"{what} holds {format_bytes(whole)} at once")
        return self._replace(work=max(0, self.work - whole))

    def refuse(self, least: int, why: str) -> None:
        """Refuse (:class:`MemoryTooSmall`) work that needs ``least`` bytes (``why``: what needs them) and
        cannot get them by smaller buffers, under an explicit ``--memory`` or ``auto``'s limit, naming the
        smallest that works (:func:`limit_that_works`). Without a ceiling (a Python caller), nothing."""
        if self.ceiling is None:
            return
        figure = (f"{format_bytes(limit_that_works(self.held + self.reserved + int(least)), up=True)} (the process holds "
                  f"{format_bytes(self.held)} of it)")
        if self.memory is not None:
            raise MemoryTooSmall(f"--memory {format_bytes(self.memory)} is too small: {why}; the smallest --memory "
                                 f"that works here is {figure}")
        if self.limit is not None and self.limit.bytes < _UNLIMITED:
            raise MemoryTooSmall(f"{why}, more than --memory auto leaves under the {self.limit.source} of "
                                 f"{format_bytes(self.limit.bytes)}: the smallest limit that works here is {figure}")


def resolve_budget(memory: int | None, held: int | None = None) -> Budget:
    """The one resolution of a memory option (``memory`` bytes, None: ``auto``) for a command: training's
    (:func:`ooc.train`) and the commands that read data (convert, append, predict, evaluate).

    ``held``: what the process holds (default :func:`rss_bytes`: measured once its code and compiled
    kernels are loaded, so that the whole-process figure counts them). Under ``auto``: the
    :func:`process_limit` less ``held`` and the margin; an explicit size on the command line: the same
    (:func:`work_budget`); from a Python caller: what the work may add, no ceiling.
    """
    held = rss_bytes() if held is None else int(held)
    if memory is None:
        limit = process_limit()
        work = auto_budget(limit, held)
        return Budget(work, held + work, held, limit, None)
    work = work_budget(memory, held)
    if not _WHOLE_PROCESS:
        return Budget(work, None, 0, None, int(memory))
    return Budget(work, held + work, held, None, int(memory))
