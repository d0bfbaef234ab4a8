"""Which block comes next, and reading it before it is needed.

Orders are pure functions of ``(seed, epoch, block)``: a resumed run recomputes
exactly the order an uninterrupted one used, so the only RNG state to persist is
the position in the epoch.
"""

from __future__ import annotations

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
    order : sequence of int
        Block ids in visiting order.
    load : callable
        ``load(b)`` returns the decoded block ``b``.
    cache : BlockCache
        Blocks are fetched through it (hits cost nothing).
    nbytes : callable
        Size of a loaded block in bytes.
    depth : int
        Blocks read ahead (1 keeps memory at about two blocks beyond the cache).
    """

    def __init__(self, order: Sequence[int], load: Callable[[int], object], cache: BlockCache,
                 nbytes: Callable[[object], int], depth: int = 1, key: Callable[[int], object] = None,
                 pool: ThreadPoolExecutor | None = None):
        self.order = [int(b) for b in order]
        self.load = load
        self.cache = cache
        self.nbytes = nbytes
        self.depth = max(0, int(depth))
        self.key = key or (lambda b: b)
        # a long-lived pool may be shared across passes; otherwise one is made for this iteration
        self._own = pool is None and self.depth > 0
        self._pool = pool if pool is not None else (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="ooc-prefetch") if self.depth else None)

    def _fetch(self, b: int):
        return self.cache.get(self.key(b), lambda: self.load(b), self.nbytes)

    def __iter__(self) -> Iterator[tuple[int, object]]:
        if self._pool is None or all(self.key(b) in self.cache for b in self.order):
            # nothing to read ahead (no thread, or every block is cached): no hand-off cost
            for b in self.order:
                yield b, self._fetch(b)
            return
        futures = deque()
        submitted = 0
        try:
            for k, b in enumerate(self.order):
                # keep block k and up to ``depth`` successors in flight
                while submitted < len(self.order) and submitted <= k + self.depth:
                    futures.append(self._pool.submit(self._fetch, self.order[submitted]))
                    submitted += 1
                yield b, futures.popleft().result()
        finally:
            for f in futures:
                f.cancel()
            if self._own:
                self._pool.shutdown(wait=True)
            else:
                for f in futures:  # a shared pool: let in-flight reads finish before the caller moves on
                    if not f.cancelled():
                        f.exception()
