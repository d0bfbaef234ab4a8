"""Numba kernels of the out-of-core transpose (rows/* -> cols/*).

Every step is a counting sort: linear time, stable (so row ids stay increasing
within a column without sorting them), and free of the int64 permutation arrays
an ``argsort`` would allocate, which matters because the transpose runs under the
same ``--memory`` bound as the rest of ingest. A column block is ordered in two
passes (by groups of columns, then by column within a group), so that the writes of
each pass stay in cache.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def _block_of(col_ptr, c):
    # Last block whose first column is <= c (col_ptr is increasing, col_ptr[0] == 0).
    lo = 0
    hi = len(col_ptr) - 2
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if col_ptr[mid] <= c:
            lo = mid
        else:
            hi = mid - 1
    return lo


@njit(cache=True, nogil=True)
def bucket_entries(indptr, row0, cols, vals, col_ptr, out):
    """Scatter the entries of consecutive rows into ``out`` grouped by column block.

    Parameters
    ----------
    indptr : int64 array (m + 1,)
        Local row pointer of the rows ``row0 .. row0 + m - 1`` (``indptr[0] == 0``).
    row0 : int
        Global id of the first row.
    cols, vals : arrays (indptr[-1],)
        Column ids and values of those rows, row after row.
    col_ptr : int64 array (n_blocks + 1,)
        First column of each column block.
    out : structured array (indptr[-1],) with fields ``col``, ``row``, ``val``
        Filled block after block; within a block entries keep row order.

    Returns
    -------
    cuts : int64 array (n_blocks + 1,)
        ``out[cuts[k]:cuts[k + 1]]`` are the entries of column block ``k``.
    """
    n_blocks = len(col_ptr) - 1
    cuts = np.zeros(n_blocks + 1, dtype=np.int64)
    for j in range(len(cols)):
        cuts[_block_of(col_ptr, cols[j]) + 1] += 1
    for k in range(n_blocks):
        cuts[k + 1] += cuts[k]
    pos = cuts[:-1].copy()
    m = len(indptr) - 1
    for r in range(m):
        for j in range(indptr[r], indptr[r + 1]):
            c = cols[j]
            b = _block_of(col_ptr, c)
            p = pos[b]
            out[p]["col"] = c
            out[p]["row"] = row0 + r
            out[p]["val"] = vals[j]
            pos[b] = p + 1
    return cuts


#: Columns per group of :func:`group_entries` is ``2**GROUP_BITS``. Measured on 6.4M entries of
#: the 226 MB bench file over 1M columns (one thread): 4096-column groups take 0.07 s to group
#: and 0.034 s to order, against 0.54 s for one counting sort over all the columns (each of
#: its writes lands in one of ~1M places: a cache miss); 64 columns 0.16 + 0.03 s, 65536
#: columns 0.06 + 0.08 s. The low bits must fit the uint16 of ``low``.
GROUP_BITS = 12


@njit(cache=True, nogil=True)
def group_entries(recs, col0, col_indptr, shift, rows, vals, low):
    """First pass of ordering a column block's entries by column: group them by ``c >> shift``.

    A stable counting sort on the high bits of the local column ``c = col - col0``: group
    ``g`` holds the columns ``g 2^s <= c < (g + 1) 2^s`` (``s = shift``), so it starts at
    ``col_indptr[g 2^s]``, known in advance. Each write goes to one of ``ncols / 2^s`` places,
    which stay in cache; :func:`order_groups` then sorts each group on the low bits.

    Parameters
    ----------
    recs : structured array with fields ``col``, ``row``, ``val``
        All entries of the column block, in row order (as bucketed).
    col0 : int
        First column of the block.
    col_indptr : int64 array (ncols + 1,)
        Column pointer of the block, local (``col_indptr[0] == 0``); known in advance
        from the column nonzero counts.
    shift : int
        ``s`` above, at most 16.
    rows, vals, low : arrays (len(recs),)
        Outputs, grouped: each entry's row id, value and ``c mod 2^s`` (uint16).

    Returns
    -------
    bool
        False when the entries do not match ``col_indptr`` (a column outside the block,
        counts that disagree, or outputs shorter than ``col_indptr[-1]``): nothing was written
        out of bounds, but the output is not valid. Numba does not check bounds, so the kernel does.
    """
    ncols = len(col_indptr) - 1
    total = col_indptr[ncols]
    if len(recs) != total or len(rows) < total or len(vals) < total or len(low) < total:
        return False  # e.g. a short bucket file: the writes below would overrun
    n_groups = (ncols + (1 << shift) - 1) >> shift
    pos = np.empty(n_groups, np.int64)
    end = np.empty(n_groups, np.int64)
    for g in range(n_groups):
        pos[g] = col_indptr[g << shift]
        end[g] = col_indptr[min((g + 1) << shift, ncols)]
    mask = (1 << shift) - 1
    for i in range(len(recs)):
        c = recs[i]["col"] - col0
        if c < 0 or c >= ncols:
            return False
        g = c >> shift
        p = pos[g]
        if p >= end[g]:
            return False
        rows[p] = recs[i]["row"]
        vals[p] = recs[i]["val"]
        low[p] = c & mask
        pos[g] = p + 1
    for g in range(n_groups):
        if pos[g] != end[g]:
            return False
    return True


@njit(cache=True, nogil=True)
def order_groups(col_indptr, shift, rows, vals, low, out_rows, out_vals, g_lo, g_hi):
    """Second pass: order the groups ``g_lo <= g < g_hi`` of :func:`group_entries` by column.

    A stable counting sort of each group on its entries' low bits (``low``): the block's
    entries end in CSC order, row order kept within a column. Disjoint group ranges write
    disjoint parts of the outputs (``col_indptr[g_lo 2^s]`` to ``col_indptr[g_hi 2^s]``), so
    threads can share a block.

    Parameters
    ----------
    col_indptr, shift :
        As for :func:`group_entries`.
    rows, vals, low : arrays
        :func:`group_entries`' outputs.
    out_rows, out_vals : arrays (col_indptr[-1],)
        Row ids and values in CSC order.
    g_lo, g_hi : int
        The groups to order.

    Returns
    -------
    bool
        False when the low bits do not match ``col_indptr`` (nothing written out of bounds).
    """
    ncols = len(col_indptr) - 1
    total = col_indptr[ncols]
    if (len(out_rows) < total or len(out_vals) < total or len(rows) < total or len(vals) < total
            or len(low) < total):
        return False
    width = 1 << shift
    n_groups = (ncols + width - 1) >> shift
    if g_lo < 0 or g_hi > n_groups or g_lo > g_hi:
        return False
    pos = np.empty(width, np.int64)
    for g in range(g_lo, g_hi):
        c_lo = g << shift
        n = min(c_lo + width, ncols) - c_lo
        for j in range(n):
            pos[j] = col_indptr[c_lo + j]
        for p in range(col_indptr[c_lo], col_indptr[c_lo + n]):
            j = np.int64(low[p])
            if j >= n:
                return False
            q = pos[j]
            if q >= col_indptr[c_lo + j + 1]:
                return False
            out_rows[q] = rows[p]
            out_vals[q] = vals[p]
            pos[j] = q + 1
    return True
