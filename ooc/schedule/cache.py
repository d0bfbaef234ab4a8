"""A byte-budget LRU of decoded blocks, with the counters a user needs to tune ``--memory``."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

from .. import _memguard


class BlockCache:
    """Least-recently-used cache of decoded blocks bounded by their total bytes.

    Parameters
    ----------
    budget : int
        Bytes of decoded blocks kept. A block larger than the budget is still
        returned but not kept. ``0`` keeps nothing.

    Notes
    -----
    Thread-safe: the prefetch thread inserts while the solver reads. Counters:
    ``hits``, ``misses``, ``evictions``, ``bytes_read`` (decoded bytes loaded from
    the store, i.e. the I/O the cache did not save).
    """

    def __init__(self, budget: int):
        self.budget = int(budget)
        #: bytes the memory governor took off ``budget`` (ooc._memguard)
        self.shrunk = 0
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.resident = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.bytes_read = 0
        _memguard.register(self)

    def shrink(self, nbytes: int) -> int:
        """Give back at least ``nbytes`` (or all) of the cached blocks, least recent first, and lower
        the budget by as much so the cache does not grow back (the memory governor calls this when
        the process is above its ceiling). Returns the bytes given up."""
        with self._lock:
            freed = 0
            while self._items and freed < nbytes:
                _, (_, s) = self._items.popitem(last=False)
                self.resident -= s
                self.evictions += 1
                freed += s
            cut = min(self.budget, max(int(nbytes), freed))
            self.budget -= cut
            self.shrunk += cut
            return freed

    def get(self, key: Hashable, load: Callable[[], Any], nbytes: Callable[[Any], int]) -> Any:
        """The block for ``key``, loading it with ``load()`` on a miss."""
        hit = self.lookup(key)
        if hit is not None:
            return hit
        value = load()  # outside the lock: loads run while the solver works
        self.add(key, value, int(nbytes(value)))
        return value

    def lookup(self, key: Hashable) -> Any:
        """The cached block for ``key`` (a hit), or None; a caller that then loads it calls :meth:`add`."""
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return hit[0]

    def peek(self, key: Hashable) -> Any:
        """The cached block for ``key`` or None, without counting a hit or moving it in the LRU order."""
        with self._lock:
            hit = self._items.get(key)
            return None if hit is None else hit[0]

    def pop(self, key: Hashable) -> None:
        """Forget ``key``'s block (the caller keeps what it needs of it elsewhere)."""
        with self._lock:
            hit = self._items.pop(key, None)
            if hit is not None:
                self.resident -= hit[1]

    def note_hits(self, count: int) -> None:
        """Count ``count`` hits served from outside the cache (blocks it handed over, :meth:`pop`)."""
        with self._lock:
            self.hits += int(count)

    def fits(self, size: int) -> bool:
        """Whether a block of ``size`` bytes would be kept (callers skip making a copy that would not)."""
        # and whether the process has room for the copy under its ceiling (ooc._memguard), made first
        return 0 < size <= self.budget and _memguard.room(size)

    def add(self, key: Hashable, value: Any, size: int) -> None:
        """Count a load of ``size`` bytes from the store (a miss) and keep ``value`` if it fits.

        ``value`` None counts the load without keeping anything.
        """
        with self._lock:
            self.misses += 1
            self.bytes_read += size
            keep = value is not None and key not in self._items and size <= self.budget
            if keep:
                self._items[key] = (value, size)
                self.resident += size
                while self.resident > self.budget:
                    _, (_, s) = self._items.popitem(last=False)
                    self.resident -= s
                    self.evictions += 1
        _memguard.check("a block loaded")  # a phase boundary: the process measured against its ceiling

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def counters(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "evictions": self.evictions,
                "bytes_read": self.bytes_read, "resident_bytes": self.resident,
                "hit_rate": self.hit_rate}
