"""The processor: what its caches hold (whether prefetching a gathered vector pays), and the cores
this process may use (``--threads``).

A sweep over rows in storage order reads ``indices`` and ``data`` sequentially and
gathers ``w[indices[p]]``. When ``w`` stays in the last-level cache the processor's
out-of-order window already overlaps those loads, and a software prefetch per nonzero
only adds instructions; when it does not, each gather is a trip to memory and the
prefetch hides it. Measured on one AMD EPYC (32 MiB L3) with
:func:`ooc.kernels.sdca.block_primal_loss`, ns per nonzero without / with the prefetch:
2.4 / 2.8 for a 1.6 MB ``w``, 2.6 / 3.1 for 8 MB, 8.0 / 3.7 for 32 MB, 14.4 / 4.7 for 128 MB.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import math
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor

from ._cgroup import control_files

__all__ = ["gather_prefetch_pays", "last_level_cache_bytes", "available_cpus", "resolve_threads", "map_threads", "Behind"]


def _parse_size(text: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text)
    if not m:
        return None
    return int(m.group(1)) * 1024 ** " KMG".index(m.group(2) or " ")


@functools.lru_cache(maxsize=1)
def last_level_cache_bytes() -> int | None:
    """Size of the largest data (or unified) cache of CPU 0, from sysfs; None where unknown."""
    best = None
    for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(d, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(d, "size")) as f:
                size = _parse_size(f.read())
        except OSError:
            continue
        if kind in ("Data", "Unified") and size and (best is None or size > best):
            best = size
    return best


def gather_prefetch_pays(nbytes: int) -> bool:
    """Whether a sweep gathering from a vector of ``nbytes`` should prefetch it.

    Yes unless the vector takes at most half of the last-level cache (the other half
    is left to the rows streaming through); yes where the cache size is unknown: a
    needless prefetch costs ~20 %, a missing one 2-3x.
    """
    llc = last_level_cache_bytes()
    return llc is None or nbytes > llc // 2


def _cgroup_cpu_quota(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> float | None:
    """CPUs the cgroup quota allows this process (``quota / period``, the tightest on its path), or None."""
    best = None
    for texts in control_files("cpu", "cpu.max", ("cpu,cpuacct", "cpu"), ("cpu.cfs_quota_us", "cpu.cfs_period_us"),
                               proc_cgroup, root):
        # v2: "200000 100000" or "max 100000"; v1: the quota (-1: none) and the period, two files
        fields = texts[0].split()[:2] if len(texts) == 1 and texts[0] else list(texts)
        try:
            quota = int(fields[0]) / int(fields[1])
        except (IndexError, TypeError, ValueError, ZeroDivisionError):
            continue
        if quota > 0:
            best = quota if best is None else min(best, quota)
    return best


def available_cpus() -> int:
    """Cores this process may use: its CPU affinity, bounded by its cgroup's CPU quota (rounded up), >= 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    if quota is not None:
        n = min(n, max(1, math.ceil(quota)))
    return max(1, n)


def resolve_threads(threads: int | None) -> int:
    """``--threads``: a count >= 1 as given, or 0/None for :func:`available_cpus`."""
    t = int(threads or 0)
    if t < 0:
        raise ValueError(f"--threads must be >= 0 (0: every core this process may use; got {threads})")
    return t or available_cpus()


_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _forget_pools() -> None:
    # a forked child has none of its parent's threads: a pool inherited from the parent would
    # queue work that no thread ever runs
    global _POOLS_LOCK
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools)


def compute_pool(threads: int) -> ThreadPoolExecutor | None:
    """A long-lived pool of ``threads`` compute threads (the kernels release the GIL), None for 1."""
    if threads <= 1:
        return None
    with _POOLS_LOCK:
        pool = _POOLS.get(threads)
        if pool is None:
            pool = _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="ooc-compute")
        return pool


#: Below this many elementary steps (entries of a block times problems, entries of a vector) a call of
#: :func:`map_threads` runs in the caller: handing work to the pool and waking the caller again costs
#: tens to hundreds of microseconds on a busy machine, more than such work takes (one-vs-rest on a
#: 450-row store: 9 ms an epoch on 2 threads, most of it waiting for wake-ups, against 3 ms in the caller).
MIN_THREAD_WORK = 1 << 16


def even_cuts(lo: int, hi: int, parts: int) -> list[int]:
    """The ``parts + 1`` bounds that cut ``[lo, hi)`` into ``parts`` consecutive ranges of sizes within one."""
    return [lo + (hi - lo) * k // parts for k in range(parts + 1)]


def map_threads(fn, items, threads: int, work: int | None = None) -> list:
    """``[fn(x) for x in items]``, on ``threads`` compute threads when more than one and more than one item.

    The results come back in ``items``' order and each ``fn(x)`` is the same computation whatever
    ``threads`` is, so a caller whose items write disjoint outputs gets the same numbers bit for bit.
    ``work``, when given, estimates the steps of all the items together: below
    :data:`MIN_THREAD_WORK` they run in the caller (the same results, without the hand-offs).
    """
    items = list(items)
    small = work is not None and work < MIN_THREAD_WORK
    pool = compute_pool(threads) if len(items) > 1 and not small else None
    if pool is None:
        return [fn(x) for x in items]
    return list(pool.map(fn, items))


class Behind:
    """One job at a time on a thread of its own, behind the caller (or in the caller when disabled).

    :meth:`run` first waits for the job before, so at most one is pending and jobs run in the
    order given; a job's exception is raised by the next :meth:`run` or :meth:`wait`.
    """

    def __init__(self, enabled: bool, name: str = "ooc-behind"):
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name) if enabled else None
        self._pending = None

    @property
    def enabled(self) -> bool:
        return self._pool is not None

    def run(self, fn, *args) -> None:
        self.wait()
        if self._pool is None:
            fn(*args)
        else:
            self._pending = self._pool.submit(fn, *args)

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """Wait for the pending job (its error, if any, is dropped: an error is already under way or
        was raised by :meth:`wait`) and end the thread."""
        if self._pool is not None:
            with contextlib.suppress(BaseException):
                self.wait()
            self._pool.shutdown(wait=True)
