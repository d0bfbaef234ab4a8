"""Keep glibc from holding on to freed block buffers.

Training allocates and frees arrays of a block's size (tens of MiB) over and over, in two
threads (the kernel's and the prefetcher's). glibc raises its mmap threshold to the size
of the largest freed mapping, so after the first few blocks those arrays come from the
heap arenas instead, where fragmentation keeps them resident: measured, a run whose live
data is ~150 MiB grew to 300 MiB of anonymous memory in three epochs and was OOM-killed
under a 300 MiB cgroup. Fixing the threshold (1 MiB) turns off that adjustment, so every
large array is its own mapping and goes back to the system when freed; two arenas are
enough for our two threads. Nothing happens on other C libraries.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_done = False


def tune_malloc(mmap_threshold: int = 1 << 20, arena_max: int = 2) -> bool:
    """Apply the settings once per process; True when glibc accepted them."""
    global _done
    if _done or not sys.platform.startswith("linux"):
        return _done
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _done = bool(mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold))) and bool(mallopt(_M_ARENA_MAX, int(arena_max)))
    return _done


def trim() -> bool:
    """Hand the heap's free memory back to the system (glibc's ``malloc_trim(0)``); False elsewhere.

    Freed pieces smaller than the mmap threshold stay in the arenas, resident, until trimmed: the
    memory governor (:mod:`ooc._memguard`) trims before it asks a cache to give anything up.
    """
    global _trim
    if _trim is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _trim = libc.malloc_trim
            _trim.argtypes, _trim.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):
            _trim = False
    return bool(_trim and _trim(0))


_trim = None
