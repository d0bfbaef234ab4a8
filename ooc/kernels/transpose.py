"""Numba kernels of the out-of-core transpose (rows/* -> cols/*).

Both steps are counting sorts: linear time, stable (so row ids stay increasing
within a column without sorting them), and free of the int64 permutation arrays
an ``argsort`` would allocate, which matters because the transpose runs under the
same ``--memory`` bound as the rest of ingest.
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


@njit(cache=True, nogil=True)
def assemble_block(recs, col0, col_indptr, out_rows, out_vals):
    """:func:`assemble_columns` of every column of the block (see there)."""
    return assemble_columns(recs, col0, col_indptr, out_rows, out_vals, 0, len(col_indptr) - 1)


@njit(cache=True, nogil=True)
def assemble_columns(recs, col0, col_indptr, out_rows, out_vals, c_lo, c_hi):
    """Order one column block's entries by column, keeping row order within a column.

    Parameters
    ----------
    recs : structured array with fields ``col``, ``row``, ``val``
        All entries of the column block, in row order (as bucketed).
    col0 : int
        First column of the block.
    col_indptr : int64 array (n_cols_in_block + 1,)
        Column pointer of the block, local (``col_indptr[0] == 0``); known in advance
        from the column nonzero counts.
    out_rows, out_vals : arrays (len(recs),)
        Row ids and values in CSC order.
    c_lo, c_hi : int
        The local columns ``c_lo <= c < c_hi`` of the block to place; the other entries are
        only checked. Disjoint ranges write disjoint parts of the outputs (``col_indptr[c_lo]``
        to ``col_indptr[c_hi]``), so threads can share a block, each reading all of ``recs``.

    Returns
    -------
    bool
        False when the entries do not match ``col_indptr`` (a column outside the
        block, counts that disagree, or outputs shorter than ``col_indptr[-1]``): nothing was written out of bounds, but the
        output is not valid. Numba does not check bounds, so the kernel does.
    """
    ncols = len(col_indptr) - 1
    total = col_indptr[ncols]
    if len(recs) != total or len(out_rows) < total or len(out_vals) < total:
        return False  # e.g. a short bucket file: the writes below would overrun
    if c_lo < 0 or c_hi > ncols or c_lo > c_hi:
        return False
    pos = col_indptr[:-1].copy()
    for i in range(len(recs)):
        c = recs[i]["col"] - col0
        if c < 0 or c >= ncols:
            return False
        if c < c_lo or c >= c_hi:
            continue
        p = pos[c]
        if p >= col_indptr[c + 1]:
            return False
        out_rows[p] = recs[i]["row"]
        out_vals[p] = recs[i]["val"]
        pos[c] = p + 1
    for c in range(c_lo, c_hi):
        if pos[c] != col_indptr[c + 1]:
            return False
    return True
