"""Block-sized arrays reused from one block to the next instead of allocated afresh.

A cold pass decodes every block into new arrays. Each large array is its own memory
mapping (:mod:`ooc._malloc`), so the kernel zeroes and faults in its pages every time and
unmaps them when it is freed: measured on a 14M-row store read under a 300 MiB cgroup,
page faults, zeroing and the cgroup's charging took ~15 % of the reader's CPU, on a
machine where the reader shares its cores with the kernels. A pool hands out slices of
arrays it keeps, and hands an array out again only once nothing else refers to it (no
view of it is alive anywhere: the block cache, a solver, a caller), so reuse can never
alias live data, whoever holds on to a block.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from .. import _memguard


class BufferPool:
    """Arrays handed out by :meth:`take` and reused once no view of them is alive.

    Parameters
    ----------
    per_dtype : int
        Arrays kept per dtype; beyond that, :meth:`take` allocates arrays the pool does
        not keep. Two blocks (or groups) in flight need two per dtype.
    """

    def __init__(self, per_dtype: int = 3):
        self.per_dtype = int(per_dtype)
        self._bufs: dict[np.dtype, list[np.ndarray]] = {}
        self._lock = threading.Lock()
        #: arrays allocated and arrays reused (for tests and tuning)
        self.allocated = 0
        self.reused = 0

    @staticmethod
    def _free_ones(bufs: list) -> list:
        """The arrays of ``bufs`` that nothing outside the pool refers to (no view alive anywhere)."""
        return [buf for buf in bufs if sys.getrefcount(buf) <= _UNREFERENCED]

    def take(self, n: int, dtype) -> np.ndarray:
        """A contiguous array of ``n`` elements of ``dtype`` (contents undefined)."""
        dtype = np.dtype(dtype)
        with self._lock:
            bufs = self._bufs.setdefault(dtype, [])
            free = self._free_ones(bufs)
            fit = [buf for buf in free if buf.size >= n]
            if fit:
                self.reused += 1
                return min(fit, key=lambda buf: buf.size)[:n]
            # free arrays too small for this request go: kept, each would stay committed beside the new
            # one (groups differ in size, so this happens every few groups), beyond what --memory planned
            # (by identity: == on arrays compares elements)
            bufs[:] = [buf for buf in bufs if not any(buf is f for f in free)]
            # a new array: the memory governor makes room for it first (caches shrink before, not after)
            _memguard.room(n * dtype.itemsize)
            if len(bufs) >= self.per_dtype:  # all in use: an array the pool does not keep
                self.allocated += 1
                return np.empty(n, dtype=dtype)
            # a little room, so that the next group, a few rows longer, reuses it
            buf = np.empty(n + n // 32, dtype=dtype)
            bufs.append(buf)
            self.allocated += 1
            return buf[:n]


# what sys.getrefcount reports, in BufferPool._free_ones, for an array only the pool's list holds
_UNREFERENCED = [sys.getrefcount(buf) for buf in [np.empty(1)]][0]
