"""Per-row and per-column statistics, and the quantities derived from them.

Row statistics are computed chunk by chunk as rows stream in; column statistics
are accumulated into O(d) vectors that grow with the largest feature id seen.
From them: ``R = max_i ||x_i||`` (the smoothness constant of the SDCA bounds) and
the face-off quantities of Csiba & Richtarik (eq. 16), written for our n x d
data matrix X (rows = examples):

.. math::

    C_P = \\sum_{j=1}^{d} \\|X_{:j}\\|_0 \\, \\|X_{:j}\\|^2, \\qquad
    C_D = \\sum_{i=1}^{n} \\|X_{i:}\\|_0 \\, \\|X_{i:}\\|^2 .

The paper shows the expected total work of primal RCD (NSync, over features)
scales with ``C_P`` and that of dual RCD (Quartz, over examples) with ``C_D``:
the smaller one names the side to work on.
"""

from __future__ import annotations

import os

import numpy as np
from numba import njit

from .._cpu import Behind


def physical_memory() -> int | None:
    """Bytes of physical memory of this machine (None: not known)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def memory_available() -> int:
    """Bytes this process may ever use: physical memory, capped by ``RLIMIT_AS`` and the
    memory limit of its cgroup (v2, or v1's memory controller) when there is one."""
    limits = [] if physical_memory() is None else [physical_memory()]
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            limits.append(soft)
    except (ImportError, OSError, ValueError):
        pass
    limits += _cgroup_limits()
    return min(limits) if limits else 1 << 62


def _cgroup_limits() -> list[int]:
    try:
        with open("/proc/self/cgroup") as f:
            entries = [ln.rstrip("\n").split(":", 2) for ln in f]
    except OSError:
        return []
    out = []
    for _, controllers, rel in (e for e in entries if len(e) == 3):
        if controllers == "":
            candidates = [f"/sys/fs/cgroup{rel}/memory.max"]
        elif "memory" in controllers.split(","):
            candidates = [f"/sys/fs/cgroup/memory{rel}/memory.limit_in_bytes"]
        else:
            continue
        for p in candidates:
            try:
                with open(p) as f:
                    text = f.read().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < 1 << 60:  # v1 says "no limit" with a huge number
                out.append(int(text))
    return out


@njit(cache=True, nogil=True)
def _row_stats(indptr, data, nnz, sq):
    for r in range(len(indptr) - 1):
        nnz[r] = indptr[r + 1] - indptr[r]
        acc = 0.0
        for j in range(indptr[r], indptr[r + 1]):
            v = np.float64(data[j])
            acc += v * v
        sq[r] = acc


def row_stats(indptr: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nonzeros and squared norms of each row of a CSR chunk.

    Each row is summed on its own (a difference of running sums over the whole
    chunk would lose small rows next to large ones), without temporaries.
    """
    indptr = np.asarray(indptr, dtype=np.int64)
    nnz = np.empty(len(indptr) - 1, dtype=np.int64)
    sq = np.empty(len(indptr) - 1, dtype=np.float64)
    _row_stats(indptr, np.asarray(data), nnz, sq)
    return nnz, sq


@njit(cache=True, nogil=True)
def _col_add(indices, data, nnz, sq):
    for j in range(len(indices)):
        c = indices[j]
        v = np.float64(data[j])
        nnz[c] += 1
        sq[c] += v * v


def _grown(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` zero-padded to ``n`` entries in place where it can be (``realloc``: a large array is its own
    mapping, moved by the kernel, never copied, so no second O(d) array exists meanwhile)."""
    if a.flags.owndata and a.base is None:
        a.resize(n, refcheck=False)  # the accumulator's own arrays: nothing else views them
        return a
    out = np.zeros(n, a.dtype)
    out[:len(a)] = a
    return out


class ColumnAccumulator:
    """Running per-column nonzero counts and squared norms, grown on demand.

    Updated in place by a compiled loop: ``bincount`` would allocate two O(d)
    temporaries per chunk, which for wide data is most of the ingest memory.
    """

    def __init__(self, behind: bool = False) -> None:
        self._nnz = np.zeros(0, dtype=np.int64)
        self._sqnorm = np.zeros(0, dtype=np.float64)
        # with ``behind``, chunks are added on a thread of their own, in order (the same sums)
        self._behind = Behind(behind, "ooc-column-stats")

    @property
    def nnz(self) -> np.ndarray:
        """Nonzeros per column so far (grown on demand: may be longer than the columns seen)."""
        self._behind.wait()
        return self._nnz

    @property
    def sqnorm(self) -> np.ndarray:
        """Squared norm per column so far."""
        self._behind.wait()
        return self._sqnorm

    def add(self, indices: np.ndarray, data: np.ndarray) -> None:
        """Account for the entries ``(indices, data)`` of a chunk (0-based ids; not modified afterwards)."""
        self._behind.run(self._add, indices, data)

    def abort(self) -> None:
        """Stop adding (on an error): wait for the chunk being added, ignoring its outcome."""
        self._behind.close()

    def _add(self, indices: np.ndarray, data: np.ndarray) -> None:
        if len(indices) == 0:
            return
        m = int(indices.max()) + 1
        if m > len(self._nnz):
            # grow by a quarter at least (amortised), not doubling: d vectors can be large; and never beyond
            # the next power of two of the ids seen, the width a conversion charges for ids it has read
            # (ooc.store.ingest.width_bound; before, 2**23 ids grew the pair to 1.25 * 2**23 entries)
            grow = max(m, min(len(self._nnz) + len(self._nnz) // 4, 1 << (m - 1).bit_length()))
            # zeros then a copy of what was counted: the new tail is the system's zeroed pages, resident
            # only once a column there is counted (concatenate wrote every byte of it: O(d) at once)
            self._nnz = _grown(self._nnz, grow)
            self._sqnorm = _grown(self._sqnorm, grow)
        _col_add(np.asarray(indices), np.asarray(data), self._nnz, self._sqnorm)

    def finish(self, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
        """Counts and squared norms truncated or padded to ``n_cols`` columns (no more :meth:`add` after)."""
        self._behind.wait()
        self._behind.close()
        if len(self.nnz) >= n_cols and not self.nnz[n_cols:].any():
            # cut to n_cols where they are (realloc, no copy: the grown tail is not held through the transpose)
            for a in (self._nnz, self._sqnorm):
                if len(a) > n_cols and a.flags.owndata and a.base is None:
                    a.resize(n_cols, refcheck=False)
            return self.nnz[:n_cols], self.sqnorm[:n_cols]  # views: no O(d) copy
        if len(self.nnz) < n_cols:  # padded where they are (no second pair of O(d) arrays)
            self._nnz = _grown(self._nnz, n_cols)
            self._sqnorm = _grown(self._sqnorm, n_cols)
            return self._nnz, self._sqnorm
        nnz = np.zeros(n_cols, dtype=np.int64)
        sq = np.zeros(n_cols, dtype=np.float64)
        m = min(n_cols, len(self.nnz))
        nnz[:m] = self.nnz[:m]
        sq[:m] = self.sqnorm[:m]
        return nnz, sq


def faceoff(row_nnz, row_sqnorm, col_nnz, col_sqnorm) -> dict:
    """C_P, C_D (Csiba & Richtarik eq. 16 in n x d orientation) and the side they recommend."""
    c_p = float(np.dot(np.asarray(col_nnz, dtype=np.float64), col_sqnorm))
    c_d = float(np.dot(np.asarray(row_nnz, dtype=np.float64), row_sqnorm))
    return {"C_P": c_p, "C_D": c_d, "recommended_side": "primal" if c_p < c_d else "dual"}


class RowSummary:
    """The row side of :func:`summary`, accumulated chunk by chunk in O(1) memory.

    The writer must not hold O(n) row statistics to summarise them: the row count
    is the one thing that grows without bound with the input.
    """

    def __init__(self) -> None:
        self.n = 0
        self.sq_max = 0.0
        self.sq_min = np.inf
        self.norm_sum = 0.0
        self.nnz_max = 0
        self.empty = 0
        self.c_d = 0.0

    def add(self, row_nnz, row_sqnorm) -> None:
        row_nnz = np.asarray(row_nnz)
        row_sqnorm = np.asarray(row_sqnorm, dtype=np.float64)
        if len(row_nnz) == 0:
            return
        self.n += len(row_nnz)
        self.sq_max = max(self.sq_max, float(row_sqnorm.max()))
        self.sq_min = min(self.sq_min, float(row_sqnorm.min()))
        self.norm_sum += float(np.sqrt(row_sqnorm).sum())
        self.nnz_max = max(self.nnz_max, int(row_nnz.max()))
        self.empty += int(np.count_nonzero(row_nnz == 0))
        self.c_d += float(np.dot(row_nnz.astype(np.float64), row_sqnorm))


#: Columns whose counts :func:`summary_from` converts to floats at once (a bounded temporary, not O(d)).
_SUMMARY_STEP = 1 << 20


def summary_from(rows: RowSummary, col_nnz, col_sqnorm) -> dict:
    """:func:`summary` from streamed row statistics and the O(d) column ones."""
    # C_P over slices: the counts as floats all at once were 8 bytes a column more than a conversion charges
    c_p = float(sum(np.dot(np.asarray(col_nnz[s:s + _SUMMARY_STEP], dtype=np.float64), col_sqnorm[s:s + _SUMMARY_STEP])
                    for s in range(0, len(col_nnz), _SUMMARY_STEP)))
    n = rows.n
    return {
        "R": float(np.sqrt(rows.sq_max)) if n else 0.0,
        "row_norm_min": float(np.sqrt(rows.sq_min)) if n else 0.0,
        "row_norm_mean": rows.norm_sum / n if n else 0.0,
        "row_nnz_max": rows.nnz_max,
        "empty_rows": rows.empty,
        "empty_cols": int(np.count_nonzero(np.asarray(col_nnz) == 0)),
        "C_P": c_p,
        "C_D": rows.c_d,
        "recommended_side": "primal" if c_p < rows.c_d else "dual",
    }


def summary(row_nnz, row_sqnorm, col_nnz, col_sqnorm) -> dict:
    """Everything ``ooc info`` reports about the matrix that the statistics determine."""
    rows = RowSummary()
    rows.add(row_nnz, row_sqnorm)
    return summary_from(rows, col_nnz, col_sqnorm)
