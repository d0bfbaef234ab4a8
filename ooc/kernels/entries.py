"""Numba kernel that readies a chunk's entries for the store in one pass (see ``ooc.store.ingest._build``)."""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def cast_entries(indices, data, shift, out_indices, out_data):
    """Write ``out_indices = indices - shift`` and ``out_data = data`` in the outputs' dtypes.

    One pass instead of numpy's seven (min, max, subtract, two casts, ``isfinite``, ``all``).
    The casts are those of ``ndarray.astype``: integers wrap (the caller refuses ids that do
    not fit before using the output), floats round to nearest, ties to even, and a value
    beyond the output type's range becomes infinite.

    Parameters
    ----------
    indices : ndarray of int64
    data : ndarray of float
    shift : int
        0 or 1 (1-based ids).
    out_indices, out_data : ndarray
        Same length as ``indices``; int32 or int64, float32 or float64.

    Returns
    -------
    lo, hi : int
        Smallest and largest of ``indices`` (before the shift); ``(0, -1)`` when empty.
    first_nonfinite : int
        First ``k`` with ``out_data[k]`` not finite, -1 if none.
    """
    n = len(indices)
    lo = np.int64(0)
    hi = np.int64(-1)
    if n:
        lo = indices[0]
        hi = indices[0]
    bad = -1
    for k in range(n):
        i = indices[k]
        if i < lo:
            lo = i
        if i > hi:
            hi = i
        out_indices[k] = i - shift
        out_data[k] = data[k]
        if bad < 0 and not np.isfinite(out_data[k]):
            bad = k
    return lo, hi, bad
