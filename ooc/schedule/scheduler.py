"""Which block comes next, and reading it before it is needed.

Orders are pure functions of ``(seed, epoch, block)``: a resumed run recomputes
exactly the order an uninterrupted one used, so the only RNG state to persist is
the position in the epoch.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Sequence

import numpy as np

from ..kernels.shuffle import permutation
from .cache import BlockCache


def block_order(n_blocks: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """Blocks of an epoch: a seeded permutation (``shuffle``) or the cyclic order."""
    if not shuffle:
        return np.arange(n_blocks, dtype=np.int64)
    return np.random.default_rng([seed, epoch, 0]).permutation(n_blocks).astype(np.int64)


def row_order(n_rows: int, seed: int, epoch: int, block: int) -> np.ndarray:
    """Seeded permutation of the rows inside one block for one epoch (int64)."""
    key = np.random.SeedSequence([seed, epoch, 1, block]).generate_state(1, np.uint64)[0]
    return permutation(n_rows, key)


class Prefetcher:
    """Yields blocks in a given order while a thread reads and decodes the next ones.

    The numba kernels release the GIL, so decoding block ``k+1`` (Blosc-LZ4 and numpy
    copies, which release it too) overlaps with the kernel on block ``k``.

    Parameters
    ----------
    order : sequence
        Items in visiting order: block ids, or tuples of them (groups loaded as one).
    load : callable
        ``load(item)`` returns the decoded block (or group).
    cache : BlockCache or None
        Items are fetched through it (hits cost nothing); None: ``load`` is called
        for every item (a loader that consults a cache itself, per block of a group).
    nbytes : callable
        Size of a loaded item in bytes (with a cache).
    depth : int
        Items read ahead (1 keeps memory at about two items beyond the cache). They
        are read at once when ``pool`` has that many threads.
    pool : ThreadPoolExecutor, optional
        Threads that read (a long-lived pool shared across passes); by default one
        thread for this iteration.
    cached : callable, optional
        ``cached(item)``: whether loading it costs nothing (without a cache); when every
        item is, they are loaded in the caller's thread, without hand-offs.
    gate : ReadAheadGate, optional
        The gate ``load`` may wait on. An iteration that stops before its end (the consumer
        raised or closed it, or a load failed) aborts it before waiting for the loads in
        flight: they may be waiting there for an item the consumer will never release.

    Attributes
    ----------
    busy_seconds : float
        Wall seconds during which at least one ``load`` was running (reading, decoding,
        waiting for the disk): the reader's own time, whether or not the consumer was
        waiting for it. Loads that overlap (``depth`` 2 on a pool of two threads) count
        their common time once. Cache hits take no time.
    """

    def __init__(self, order: Sequence, load: Callable[[object], object], cache: BlockCache | None,
                 nbytes: Callable[[object], int] | None = None, depth: int = 1,
                 key: Callable[[object], object] = None, pool: ThreadPoolExecutor | None = None,
                 cached: Callable[[object], bool] | None = None, gate: ReadAheadGate | None = None):
        self.order = [tuple(int(x) for x in b) if np.ndim(b) else int(b) for b in order]
        self.load = load
        self.cache = cache
        self.nbytes = nbytes
        self.depth = max(0, int(depth))
        self.key = key or (lambda b: b)
        if cached is None:
            cached = (lambda b: self.key(b) in self.cache) if cache is not None else (lambda b: False)
        self.cached = cached
        self.gate = gate
        self.busy_seconds = 0.0
        self._lock = threading.Lock()
        self._running, self._busy_since = 0, 0.0  # loads in progress, and since when one is
        # a long-lived pool may be shared across passes; otherwise one is made for this iteration
        self._own = pool is None and self.depth > 0
        self._pool = pool if pool is not None else (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="ooc-prefetch") if self.depth else None)

    def _timed_load(self, b):
        with self._lock:
            if self._running == 0:
                self._busy_since = time.perf_counter()
            self._running += 1
        try:
            return self.load(b)
        finally:
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    self.busy_seconds += time.perf_counter() - self._busy_since

    def _fetch(self, b):
        if self.cache is None:
            return self._timed_load(b)
        return self.cache.get(self.key(b), lambda: self._timed_load(b), self.nbytes)

    def __iter__(self) -> Iterator[tuple[object, object]]:
        if self._pool is None or all(self.cached(b) for b in self.order):
            # nothing to read ahead (no thread, or every block is cached): no hand-off cost
            for b in self.order:
                yield b, self._fetch(b)
            return
        futures = deque()
        submitted = 0
        finished = False
        try:
            for k, b in enumerate(self.order):
                # keep item k and up to ``depth`` successors in flight
                while submitted < len(self.order) and submitted <= k + self.depth:
                    futures.append(self._pool.submit(self._fetch, self.order[submitted]))
                    submitted += 1
                yield b, futures.popleft().result()
            finished = True
        finally:
            # Stopped early (the consumer raised, was interrupted or closed the iteration, or a load
            # failed): a load in flight may wait on the gate for an item that will never be released.
            # Free it first, or the waits below never end (and neither would the process: the pool's
            # threads are joined at exit).
            if not finished and self.gate is not None:
                self.gate.abort()
            for f in futures:
                f.cancel()
            if self._own:
                self._pool.shutdown(wait=True)
            else:
                for f in futures:  # a shared pool: let in-flight reads finish before the caller moves on
                    if not f.cancelled():
                        f.exception()


class ReadAheadGate:
    """Holds the reader of item ``i`` of a pass until the consumer has released items ``0..i-1``.

    A reader that may read only part of the next item while the current one is worked on
    (memory) reads that part, then calls :meth:`wait_released`; the consumer calls
    :meth:`release` when it is done with an item. :meth:`abort` frees a waiting reader
    (it then raises), for a consumer that stops early.

    Parameters
    ----------
    consumer : threading.Thread, optional
        The thread that releases items (by default the one creating the gate). A reader
        stops waiting when it has ended without aborting the gate (:meth:`wait_released`).
    """

    #: seconds between checks that the consumer is still alive while a reader waits
    POLL_SECONDS = 0.25

    def __init__(self, consumer: threading.Thread | None = None):
        self._cond = threading.Condition()
        self.released = 0
        self._aborted = False
        self._consumer = consumer if consumer is not None else threading.current_thread()
        #: seconds readers spent waiting here (not reading: see Prefetcher.busy_seconds)
        self.waited_seconds = 0.0

    def release(self) -> None:
        with self._cond:
            self.released += 1
            self._cond.notify_all()

    def wait_released(self, n: int) -> None:
        """Wait until ``n`` items are released.

        Raises
        ------
        RuntimeError
            When the gate is aborted, or the consumer thread has ended (then nobody will
            release or abort: at interpreter exit the main thread is marked ended before the
            pools' threads are joined, so a reader waiting here would hold the exit forever).
        """
        t0 = time.perf_counter()
        with self._cond:
            try:
                # bounded waits: a consumer that dies without aborting must not leave the reader here
                while not self._cond.wait_for(lambda: self._aborted or self.released >= n, self.POLL_SECONDS):
                    if not self._consumer.is_alive():
                        self._aborted = True
            finally:
                self.waited_seconds += time.perf_counter() - t0
            if self._aborted:
                raise RuntimeError("read-ahead aborted: the pass stopped")

    def abort(self) -> None:
        """Free the readers waiting now and make every later :meth:`wait_released` raise."""
        with self._cond:
            self._aborted = True
            self._cond.notify_all()
