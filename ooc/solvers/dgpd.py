r"""DGPD: Doubly Greedy Primal-Dual coordinate descent with active sets (Lei et al., Algorithm 2).

Problem (``docs/training.rst``; the paper's ``mu = l2``, ``lambda = l1``, its dual ``y = -alpha``)::

    P(x) = 1/n sum_i c_i phi(x_i . x, y_i) + l2/2 ||x||^2 + l1 ||x||_1

Algorithm 2 keeps a primal active set ``A_x`` (columns) and a dual active set ``A_y`` (rows),
with ``x = 0`` off ``A_x`` and ``alpha = 0`` off ``A_y``. One *epoch* (what ``max_epochs`` and
the history count) is one outer iteration:

1. **Primal search** (eqs. 4, 10, 11): ``u = A^T alpha`` over all ``d`` features, summed from the
   full active rows only (eq. 14); ``xbar = soft_threshold(u / (l2 n), l1 / l2)``, the primal
   best response. The top-``k_x`` inactive features by ``|xbar_j|`` join ``A_x``; every active
   ``x_j`` is set to ``xbar_j`` and features with ``xbar_j = 0`` leave ``A_x``.
2. **Certificate**: margins ``m = A x`` over all ``n`` examples, summed from the full active
   columns (eq. 14); the margins of ``xbar`` add the few columns of ``supp(xbar)`` not admitted.
   The duality gap ``P(xbar) - D(alpha)`` is exactly the one sdca reports (``xbar = grad g*(v)``,
   ``v = A^T alpha / (l2 n)``), with every example's loss and every active dual. Converged means
   ``gap <= tol max(1, |P|)`` (summed over one-vs-rest problems); the run then returns ``xbar``.
3. **Dual search** (eq. 12): the top-``k_y`` inactive examples by the length of their proximal
   dual step at the margins ``m`` (Gauss-Southwell-r; see :func:`ooc.kernels.dgpd.dual_scores`)
   join ``A_y``. Steps 2 and 3 stream over the row blocks: each block's margins are summed from
   the active columns (:func:`ooc.kernels.dgpd.lines_axpy_range`, a cursor per column), its
   losses and scores computed, and a running top-``k_y`` kept (:class:`Selection`), so no
   length-``n`` vector is needed and the data (rows) is never read for the search.
4. **Active submatrix** ``[A] = A[A_y, A_x]``, kept in memory and grown incrementally: new rows
   (read from the row blocks) restricted to ``A_x``, new columns (from the column blocks)
   restricted to the old ``A_y``, entries of departed rows/columns dropped.
5. **Rounds** (``rounds``, 5 as in the paper) of updates (11) and (13) on ``[A]``: each active
   row, in a seeded permutation, takes a proximal dual step with ``q_i = n / eta_i`` at the
   margin of the current ``x``, and the primal coordinates of its row move to their best
   response (:func:`ooc.kernels.dgpd.active_rounds`).
6. Rows with ``alpha_i = 0`` and columns with ``x_j = 0`` leave the active sets (step 6).

Searches add coordinates in batches (the paper's "straightforward extension"):
``k = max(batch, growth * |A|)``, so reaching thousands of active coordinates takes a few dozen
searches, not thousands of ``O(n + d)`` ones.

Dual step size (``dual_step`` option): ``"safe"`` (default) ``q_i = ||[A]_i||^2 / (l2 n)``, the
largest step for which the proximal step is guaranteed to increase the (restricted) dual, which
is Prox-SDCA's step on ``[A]``; ``"theorem"`` ``q_i = s_i (5 R^2 + n gamma l2) / (2 n l2)`` with
``s_i = nnz([A]_i)`` the number of primal coordinates the step changes: the paper's eq. 16, which
always satisfies the safeguard (``5 s_i R^2 >= ||[A]_i||^2``) but takes steps ``1 + s_i/2`` to
many times shorter (its ``n gamma l2`` term), so it converges in proportionally more rounds.

Losses: smooth hinge (the paper's) and hinge keep ``alpha_i = 0`` for examples with margin
``>= 1``, so ``A_y`` stays sparse. The squared and logistic losses have no sparse dual (every
``alpha_i`` is nonzero at the optimum; for the logistic ``alpha_i y_i`` lies strictly inside
``(0, c_i)``): ``A_y`` grows to all ``n`` rows in ``log2(n / batch)`` searches and DGPD becomes a
primal-active-set SDCA. It still converges, only without the dual savings (measured: 10x slower than sdca on the
registry's hashed text). So when the dual active set holds more than :data:`DENSE_DUAL_SHARE` of
the pairs at a certificate of a new run, it falls back to sdca (:class:`DenseDualFallback`:
``ooc.train`` starts the run again with ``--solver sdca`` from dgpd's duals, so no work is lost,
saying so with a :class:`DenseDualWarning`; ``--no-dgpd-fallback`` keeps dgpd); a resumed run
only warns.

Out of core: both layouts are needed. The scheduler pages the column blocks holding ``A_x``
and the row blocks holding ``A_y`` through one :class:`~ooc.schedule.cache.BlockCache`; the full
active lines are kept resident while they fit in a quarter of ``memory`` each (otherwise they
are re-read through the cache at every search), the cache gets the other half. The
per-example vectors (labels, weights, row norms: ``24 n`` bytes) are kept in memory, taken from
the cache's half, when they fit in a quarter of ``memory``; otherwise each row block's are read
from the store's metadata arrays at every search (``vector_bytes_read`` in the history). The
margins are never held whole: they are recomputed exactly at every search from the active
columns (no drift), one row block at a time (``margin_bytes`` in the history), so unlike the
duals of sdca they are no state to page or checkpoint. Resident beyond ``memory``:
its footprint :data:`ooc.schedule.planner.DGPD` (``O(d)`` and one row block's ``O(rows)``; ``ooc info`` prints it for a
store), plus ``[A]`` and the active sets. What is computed never depends on where the data or
the vectors come from: lines are always summed in ascending id order, each margin receives its
terms in the same order whatever the row blocks, the loss sums and the top-``k`` run over the
same row blocks, ``[A]`` is kept in a canonical (row, column) order; so a tiny ``memory`` and a
large one give identical iterates, and resume is bit-for-bit (the state is the active sets and
their values; ``[A]`` is rebuilt from the row blocks on resume).
"""

from __future__ import annotations

import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from ..kernels import dgpd as K
from ..kernels.args import Labels, Reg, Rows
from ..kernels.sdca import block_dual_loss
from ..objectives.penalties import primal_value, require_l2
from ..runs.rundir import RunDir
from ..schedule.cache import BlockCache
from ..schedule.planner import DGPD as DGPD_FOOTPRINT
from ..schedule.planner import MemoryLimitError, budget_option, fixed_bytes, refuse_or_warn
from ..schedule.planner import plan as plan_memory
from ..schedule.scheduler import Prefetcher
from ..store import layout as L
from .base import ProblemRefused, StoreSolver
from .certificate import certify, duality_gap
from .registry import DGPD_DEFAULTS as DEFAULTS
from .registry import DGPD_DUAL_STEPS as DUAL_STEPS
from .registry import DGPD_SOLVER

VECTORS = ("memory", "streamed")



#: share of the (example, class) pairs in the dual active set above which dgpd warns (DenseDualWarning)
DENSE_DUAL_SHARE = 0.5


#: Bytes an entry of a full line held by the searches (int64 id, float64 value: :class:`LineSet`).
LINE_ENTRY_BYTES = 16
#: Bytes an entry of the active submatrix takes while it is built (row and column ids, value, the sort's
#: order and the concatenations' copies): the planner's "about 40 bytes per entry".
A_ENTRY_BYTES = 48


class DenseDualWarning(UserWarning):
    """dgpd's dual active set is dense: sdca does the same work without the searches."""


class DenseDualFallback(ProblemRefused):
    """dgpd's dual active set is dense in a new run: :func:`ooc.train.train` runs sdca instead, from
    ``duals``: per problem, the active examples (ascending global row ids) and their dual values."""

    def __init__(self, message: str, duals: list):
        super().__init__(message)
        self.duals = duals

class LineSet(NamedTuple):
    """Some full lines (rows or columns) of the matrix, ascending ids, CSR-like, float64 values."""

    ids: np.ndarray       # int64, sorted, distinct
    indptr: np.ndarray    # int64 (len(ids) + 1,)
    indices: np.ndarray   # int64 global ids of the other layout
    data: np.ndarray      # float64

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + self.indptr.nbytes + self.indices.nbytes + self.data.nbytes

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Positions of ``ids`` (all present) in this set."""
        return np.searchsorted(self.ids, ids).astype(np.int64)

    def take(self, pos: np.ndarray) -> "LineSet":
        pos = np.ascontiguousarray(pos, dtype=np.int64)
        lens = self.indptr[pos + 1] - self.indptr[pos]
        total = int(lens.sum())
        indptr = np.empty(len(pos) + 1, dtype=np.int64)
        indices = np.empty(total, dtype=np.int64)
        data = np.empty(total, dtype=np.float64)
        indptr[0] = 0
        K.gather_lines(self.indptr, self.indices, self.data, pos, indptr, indices, data, 0, 0)
        return LineSet(self.ids[pos], indptr, indices, data)


def _empty_lines() -> LineSet:
    return LineSet(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0))


def _merge(a: LineSet, b: LineSet) -> LineSet:
    """Union of two line sets with disjoint ids, in ascending id order."""
    if len(b.ids) == 0:
        return a
    if len(a.ids) == 0:
        return b
    ids = np.concatenate([a.ids, b.ids])
    cat = LineSet(ids, np.concatenate([a.indptr[:-1], b.indptr + a.indptr[-1]]),
                  np.concatenate([a.indices, b.indices]), np.concatenate([a.data, b.data]))
    return cat.take(np.argsort(ids, kind="stable"))


def _isin_sorted(sorted_set: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Boolean mask: which ``values`` are in the sorted array ``sorted_set``."""
    if len(sorted_set) == 0:
        return np.zeros(len(values), dtype=bool)
    pos = np.searchsorted(sorted_set, values)
    pos[pos >= len(sorted_set)] = 0
    return sorted_set[pos] == values


def top_k(score: np.ndarray, k: int) -> np.ndarray:
    """Ids of the ``k`` largest positive scores (ties by smaller id), sorted ascending."""
    idx = np.flatnonzero(score > 0.0)
    return idx[top_k_of(idx, score[idx], k)].astype(np.int64)


def top_k_of(ids: np.ndarray, score: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest of the positive ``score`` of the ascending ``ids`` (ties by
    smaller id), ascending."""
    pos = np.flatnonzero(score > 0.0)
    if len(pos) > k:
        pos = np.sort(pos[np.lexsort((ids[pos], -score[pos]))[:k]])
    return pos


class Selection:
    """Running :func:`top_k` over consecutive ranges of one score vector, with labels and weights.

    ``add(lo, score, y, c)`` offers the scores of ids ``lo, lo + 1, ...``. The ids kept at the
    end are exactly ``top_k`` of the whole vector (an id of the overall top ``k`` is in the top
    ``k`` of any subset holding it), so a search streamed block by block selects what one over
    the whole vector would.
    """

    def __init__(self, k: int):
        self.k = k
        self.ids = np.zeros(0, np.int64)
        self.score = np.zeros(0)
        self.y = np.zeros(0)
        self.c = np.zeros(0)

    def add(self, lo: int, score: np.ndarray, y: np.ndarray, c: np.ndarray) -> None:
        local = top_k(score, self.k)
        if len(local) == 0:
            return
        ids = np.concatenate([self.ids, local + lo])
        sc = np.concatenate([self.score, score[local]])
        yy, cc = np.concatenate([self.y, y[local]]), np.concatenate([self.c, c[local]])
        keep = top_k_of(ids, sc, self.k)
        self.ids, self.score, self.y, self.c = ids[keep], sc[keep], yy[keep], cc[keep]


class ClassState:
    """The state of one (binary or one-vs-rest) problem: active sets, their values, ``[A]``."""

    def __init__(self, ax, xv, ay, av, xb):
        self.ax = np.asarray(ax, dtype=np.int64)   # active features, ascending
        self.xv = np.asarray(xv, dtype=np.float64)
        self.ay = np.asarray(ay, dtype=np.int64)   # active examples, ascending
        self.av = np.asarray(av, dtype=np.float64)
        self.xb = float(xb)                        # bias weight (0 without a bias)
        # [A] as canonical COO triplets (global row, global column, value), sorted by (row, column)
        self.a_rows = np.zeros(0, np.int64)
        self.a_cols = np.zeros(0, np.int64)
        self.a_vals = np.zeros(0, np.float64)


class DGPDSolver(StoreSolver):
    """``--solver dgpd``: Algorithm 2 with batched searches, out of core over both layouts.

    Same contract as :class:`ooc.solvers.base.BlockLoopSolver`: ``(problem, rundir, options,
    progress)`` and :meth:`run` returning the result dict. Options read beyond the common ones
    (``tol, memory, seed``): ``dgpd_rounds`` (5), ``dgpd_batch`` (64), ``dgpd_growth`` (1.0),
    ``dgpd_dual_step`` ('safe' or 'theorem'), all four on ``ooc train`` as ``--dgpd-*``; and
    ``dgpd_vectors`` ('memory' or 'streamed'; default by the budget, see the module docstring).
    """

    name = DGPD_SOLVER
    #: what it holds (ooc.schedule.planner): O(d) search vectors and one row block's; O(n) labels, weights, norms
    footprint = DGPD_FOOTPRINT

    def __init__(self, problem, rundir: RunDir, options: dict, progress=None):
        super().__init__(problem, rundir, options, progress)
        st = self.store
        for lay in (L.ROWS, L.COLS):
            if not st.has_layout(lay):
                raise ValueError(f"{st.path}: dgpd needs both layouts (rows to update the duals, columns to "
                                 "update the primal); convert with --layout both")
        require_l2(problem.penalty, self.name)
        if options.get("warm_start"):
            raise ValueError("dgpd does not take warm starts")
        self.rounds = int(options.get("dgpd_rounds", DEFAULTS["rounds"]))
        self.batch = int(options.get("dgpd_batch", DEFAULTS["batch"]))
        self.growth = float(options.get("dgpd_growth", DEFAULTS["growth"]))
        self.dual_step = options.get("dgpd_dual_step", DEFAULTS["dual_step"])
        #: a new run (not a resume) falls back to sdca on a dense dual (DenseDualFallback)
        # (only a caller that can restart the run asks for it: ooc.train passes --dgpd-fallback)
        self.fallback = bool(options.get("dgpd_fallback", False)) and not options.get("resumed")
        if self.dual_step not in DUAL_STEPS:
            raise ValueError(f"dgpd_dual_step {self.dual_step!r}: expected one of {DUAL_STEPS}")
        if self.rounds < 1 or self.batch < 1 or self.growth < 0:
            raise ValueError("dgpd needs rounds >= 1, batch >= 1 and growth >= 0")
        self.n, self.d = st.n_rows, st.n_cols
        self.bias = float(problem.bias)
        self.has_bias = self.bias > 0
        self.dim = self.d + (1 if self.has_bias else 0)
        self.k = problem.n_sub
        self.l2 = float(problem.penalty.l2)
        self.l1 = float(problem.penalty.l1)
        self.block_rows = int(np.max(np.diff(self.row_ptr))) if self.nb else 0
        forced = options.get("dgpd_vectors")
        if forced and forced not in VECTORS:
            raise ValueError(f"dgpd_vectors {forced!r}: expected one of {VECTORS}")
        #: the split of --memory (ooc.schedule.planner): the per-example vectors in memory (taken from the
        #: cache's half) or re-read per row block at every search, the cache, the resident active lines
        self.plan = plan_memory(self.footprint, st, budget_option(options), k=self.k, vectors=forced or None,
                                warn=False, fixed=self.fixed_for(st, self.k, self.dim))
        refuse_or_warn(self.plan, options.get("memory_limit"), int(options.get("memory_held") or 0))
        self.vectors = "memory" if self.plan.vectors_in_memory else "streamed"
        self.cache = BlockCache(self.plan.cache_bytes)
        self.line_budget = self.plan.line_bytes  # per layout, for the resident full active lines
        self.resident: dict[str, LineSet | None] = {L.ROWS: None, L.COLS: None}
        self.vector_bytes_read = 0
        if self.vectors == "memory":
            self.y_all = problem.block_labels(st.read_labels(0, self.n))  # (not st.labels: kept twice)
            self.c_all = np.ascontiguousarray(problem.example_weights(self.y_all, st.read_weights(0, self.n)),
                                              dtype=np.float64)
            self.rsq = np.asarray(st.read_row_sqnorm(0, self.n), dtype=np.float64) + (self.bias ** 2 if self.has_bias else 0.0)
        self.r2 = max([float(self._chunk(b)[4].max()) for b in range(self.nb) if self.row_ptr[b + 1] > self.row_ptr[b]]
                      + [0.0])
        self.gamma = 1.0 / float(problem.loss.smoothness) if problem.loss.is_smooth else 0.0
        entry = np.dtype(st.dtype).itemsize + np.dtype(st.index_dtype).itemsize
        self.layout_bytes = st.nnz * entry + (self.n + 1) * 8  # one pass over the row layout
        self.pool = None

    def _room(self, budget: int) -> int:
        """What the plan of ``budget`` bytes leaves beside the block cache (:meth:`_refuse_growth`'s room)."""
        p = plan_memory(self.footprint, self.store, int(budget), k=self.k, vectors=self.opt.get("dgpd_vectors") or None,
                        warn=False, fixed=self.fixed_for(self.store, self.k, self.dim))
        return p.memory - p.cache_bytes

    def _budget_for(self, need: int) -> int:
        """The smallest budget (to a MiB) whose plan leaves ``need`` bytes beside the block cache."""
        lo = int(budget_option(self.opt))
        hi = lo + 2 * need + (1 << 20)
        while self._room(hi) < need:
            lo, hi = hi, 2 * hi
        while hi - lo > 1 << 20:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self._room(mid) >= need else (mid, hi)
        return hi

    @classmethod
    def fixed_for(cls, store, k: int, dim: int, mix: int = 1, l1: float = 0.0, threads: int = 1,
                  replica: bool = True) -> int:
        """What dgpd holds whatever the plan: its footprint's ``O(d)`` and one row block's terms (the
        figure it plans with and ``ooc info`` names; ``mix``, ``l1``, ``threads``, ``replica``: the block
        solvers' arguments, which do not change it)."""
        return fixed_bytes(cls.footprint, store, k, dim)

    # ------------------------------------------------------------------------------ vectors
    def _chunk(self, b: int):
        """Row block ``b``'s ``(lo, hi, stored labels, weights, squared row norms (+ bias^2))``.

        Sliced from the resident vectors, or read from the store's metadata arrays (never the
        data) when they are streamed; the values are the same either way.
        """
        lo, hi = int(self.row_ptr[b]), int(self.row_ptr[b + 1])
        if self.vectors == "memory":
            return lo, hi, self.y_all[lo:hi], self.c_all[lo:hi], self.rsq[lo:hi]
        st, pb = self.store, self.pb
        y = pb.block_labels(st.read_labels(lo, hi))
        c = np.ascontiguousarray(pb.example_weights(y, st.read_weights(lo, hi)), dtype=np.float64)
        rsq = np.asarray(st.backend.read(L.ROW_SQNORM, lo, hi), dtype=np.float64) + (
            self.bias ** 2 if self.has_bias else 0.0)
        self.vector_bytes_read += y.nbytes + rsq.nbytes
        return lo, hi, y, c, rsq

    # ------------------------------------------------------------------------------------ lines
    def _fetch(self, layout: str, ids: np.ndarray) -> LineSet:
        """Full lines ``ids`` (ascending) read from their blocks through the cache."""
        if len(ids) == 0:
            return _empty_lines()
        st = self.store
        ptr = st.block_ptr(layout)
        blk_of = np.searchsorted(ptr, ids, side="right") - 1
        blocks, starts = np.unique(blk_of, return_index=True)
        bounds = list(starts) + [len(ids)]
        parts = []
        pf = Prefetcher(blocks, lambda b: st.block(layout, b), self.cache, lambda blk: blk.nbytes, depth=1,
                        key=lambda b: (layout, b), pool=self.pool)
        for t, (b, blk) in enumerate(pf):
            local = ids[bounds[t]:bounds[t + 1]] - blk.start
            bptr = np.ascontiguousarray(blk.indptr, dtype=np.int64)
            lens = bptr[local + 1] - bptr[local]
            total = int(lens.sum())
            indptr = np.empty(len(local) + 1, np.int64)
            indices = np.empty(total, np.int64)
            data = np.empty(total, np.float64)
            K.gather_lines(bptr, blk.indices, blk.data, local, indptr, indices, data, 0, 0)
            parts.append((indptr, indices, data))
        offs = np.cumsum([0] + [p[0][-1] for p in parts])
        indptr = np.concatenate([p[0][:-1] + o for p, o in zip(parts, offs)] + [np.array([offs[-1]], np.int64)])
        return LineSet(np.ascontiguousarray(ids, dtype=np.int64), indptr.astype(np.int64),
                       np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]))

    def _lines(self, layout: str, ids: np.ndarray, keep: bool) -> LineSet:
        """Full lines ``ids``: from the resident set where possible, the rest from the blocks.

        ``keep``: the returned set becomes the resident set of ``layout`` when it fits.
        """
        res = self.resident[layout] if keep else None
        if res is not None and len(res.ids):
            have = _isin_sorted(res.ids, ids)
            out = _merge(res.take(res.positions(ids[have])), self._fetch(layout, ids[~have]))
        else:
            out = self._fetch(layout, ids)
        if keep:
            self.resident[layout] = out if out.nbytes <= self.line_budget else None
        return out

    # ------------------------------------------------------------------------------------ [A]
    def _restrict(self, lines: LineSet, which: np.ndarray, keys: np.ndarray):
        """COO (line id, other id, value) of lines ``which`` restricted to the ids ``keys`` (ascending)."""
        pos = lines.positions(which)
        cnt = K.count_member(lines.indptr, lines.indices, pos, keys)
        major = np.empty(cnt, np.int64)
        minor = np.empty(cnt, np.int64)
        vals = np.empty(cnt, np.float64)
        K.restrict_lines(lines.indptr, lines.indices, lines.data, pos, which, keys, major, minor, vals, 0)
        return major, minor, vals

    def _grow_A(self, s: ClassState, ax_new, ay_old, new_rows, new_cols, rows: LineSet, cols: LineSet):
        """``[A]`` for ``(ay_old + new_rows) x ax_new`` from the one for ``ay_old x ax_old``."""
        keep = _isin_sorted(ay_old, s.a_rows) & _isin_sorted(ax_new, s.a_cols)
        R, C, V = [s.a_rows[keep]], [s.a_cols[keep]], [s.a_vals[keep]]
        if len(new_rows):
            r, c, v = self._restrict(rows, new_rows, ax_new)
            R.append(r), C.append(c), V.append(v)
        if len(new_cols) and len(ay_old):
            c, r, v = self._restrict(cols, new_cols, ay_old)
            R.append(r), C.append(c), V.append(v)
        rr, cc, vv = np.concatenate(R), np.concatenate(C), np.concatenate(V)
        order = np.lexsort((cc, rr))
        s.a_rows, s.a_cols, s.a_vals = rr[order], cc[order], vv[order]

    def _local_A(self, s: ClassState):
        lr = np.searchsorted(s.ay, s.a_rows)
        lc = np.searchsorted(s.ax, s.a_cols).astype(np.int64)
        indptr = np.zeros(len(s.ay) + 1, np.int64)
        np.cumsum(np.bincount(lr, minlength=len(s.ay)), out=indptr[1:])
        return indptr, lc, np.ascontiguousarray(s.a_vals)

    # ------------------------------------------------------------------------------------ state
    def _fresh(self) -> list[ClassState]:
        z = np.zeros(0)
        return [ClassState(z, z, z, z, 0.0) for _ in range(self.k)]

    def _arrays(self, states: list[ClassState]) -> dict:
        def cat(name):
            parts = [getattr(s, name) for s in states]
            return np.concatenate(parts) if parts else np.zeros(0)

        return {
            "ax_ptr": np.cumsum([0] + [len(s.ax) for s in states]).astype(np.int64),
            "ay_ptr": np.cumsum([0] + [len(s.ay) for s in states]).astype(np.int64),
            "ax_ids": cat("ax").astype(np.int64), "ax_val": cat("xv").astype(np.float64),
            "ay_ids": cat("ay").astype(np.int64), "ay_val": cat("av").astype(np.float64),
            "xb": np.array([s.xb for s in states], dtype=np.float64),
        }

    def _from_arrays(self, a: dict) -> list[ClassState]:
        out = []
        for c in range(self.k):
            xs = slice(int(a["ax_ptr"][c]), int(a["ax_ptr"][c + 1]))
            ys = slice(int(a["ay_ptr"][c]), int(a["ay_ptr"][c + 1]))
            out.append(ClassState(a["ax_ids"][xs], a["ax_val"][xs], a["ay_ids"][ys], a["ay_val"][ys], a["xb"][c]))
        return out

    def _rebuild_A(self, states: list[ClassState]) -> None:
        """``[A]`` of every class from its active rows (after a resume)."""
        all_rows = np.unique(np.concatenate([s.ay for s in states] + [np.zeros(0, np.int64)]))
        rows = self._lines(L.ROWS, all_rows, keep=True)
        for s in states:
            s.a_rows = s.a_cols = np.zeros(0, np.int64)
            s.a_vals = np.zeros(0)
            self._grow_A(s, s.ax, np.zeros(0, np.int64), s.ay, np.zeros(0, np.int64), rows, None)

    # ------------------------------------------------------------------------------------ epoch
    def _search(self, states: list[ClassState], epoch: int, tol: float):
        """Steps 1-3: searches and the certificate of the current state (no change if converged)."""
        pb, n, d = self.pb, self.n, self.d
        inv_l2n = 1.0 / (self.l2 * n)
        kthr = self.l1 / self.l2
        # 1. u = A^T alpha from the full active rows; primal best response and primal search
        all_rows = np.unique(np.concatenate([s.ay for s in states] + [np.zeros(0, np.int64)]))
        rows = self._lines(L.ROWS, all_rows, keep=True)
        plan = []
        for s in states:
            u = np.zeros(self.dim)
            K.lines_axpy(rows.indptr, rows.indices, rows.data, rows.positions(s.ay), s.av, u)
            if self.has_bias:
                u[d] = self.bias * float(np.sum(s.av))
            active = np.zeros(self.dim, dtype=bool)
            active[s.ax] = True
            xbar = np.empty(self.dim)
            score = np.empty(self.dim)
            K.primal_scores(u, inv_l2n, kthr, d, active, xbar, score)
            supp = np.flatnonzero(xbar[:d]).astype(np.int64)
            kept = s.ax[xbar[s.ax] != 0.0]
            new_x = top_k(score, max(self.batch, int(self.growth * len(kept))))
            ax_new = np.union1d(kept, new_x).astype(np.int64)
            extra = np.setdiff1d(supp, ax_new, assume_unique=True).astype(np.int64)
            xb = float(xbar[d]) if self.has_bias else 0.0
            plan.append(dict(ax=ax_new, new_x=np.setdiff1d(ax_new, s.ax, assume_unique=True).astype(np.int64),
                             x=xbar[ax_new].copy(), xb=xb, extra=extra, xe=xbar[extra].copy(),
                             uA=np.concatenate([u[ax_new], u[d:]]) * inv_l2n,
                             supp=supp, wsupp=xbar[supp].copy(),
                             pen=primal_value(pb.penalty, np.concatenate([xbar[supp], xbar[d:]]), self.bias),
                             sq=float(np.dot(xbar[supp], xbar[supp]) + np.dot(xbar[d:], xbar[d:]))))
            del u, xbar, score, active
        # 2. margins of x (active columns) and of xbar (+ the columns it adds): the certificate;
        # 3. dual search at the margins of x. Both streamed one row block at a time, so no
        # vector of length n is ever held (the margins are recomputed exactly at every search,
        # from the active columns, as in the paper's eq. 14: they are no state to checkpoint)
        all_cols = np.unique(np.concatenate([p["ax"] for p in plan] + [np.zeros(0, np.int64)]))
        extra_all = np.unique(np.concatenate([p["extra"] for p in plan] + [np.zeros(0, np.int64)]))
        # the active columns' full lines are held for the search (16 bytes an entry): within the plan, or not
        # by dgpd (a tall store's few columns hold every entry of the matrix)
        col_nnz = self.store.read_col_nnz()
        self._refuse_growth(int(LINE_ENTRY_BYTES * (col_nnz[all_cols].sum() + col_nnz[extra_all].sum())),
                            "the active columns' lines", epoch)
        cols = self._lines(L.COLS, all_cols, keep=True)
        ecols = self._lines(L.COLS, extra_all, keep=False)
        psum = np.zeros(self.k)
        for s, p in zip(states, plan):
            p["pos"], p["epos"] = cols.positions(p["ax"]), ecols.positions(p["extra"])
            p["cur"], p["ecur"] = cols.indptr[p["pos"]].copy(), ecols.indptr[p["epos"]].copy()
            p["old_yc"], p["new"] = [], Selection(max(self.batch, int(self.growth * len(s.ay))))
        for b in range(self.nb):
            lo, hi, yb, cb, rsq = self._chunk(b)
            qb = rsq * inv_l2n
            for c, (s, p) in enumerate(zip(states, plan)):
                yc = np.ascontiguousarray(pb.sub_labels(yb, c), dtype=np.float64)
                m = np.zeros(hi - lo)
                K.lines_axpy_range(cols.indptr, cols.indices, cols.data, p["pos"], p["x"], p["cur"], lo, hi, m)
                if self.has_bias:
                    m += self.bias * p["xb"]
                mbar = m.copy()
                K.lines_axpy_range(ecols.indptr, ecols.indices, ecols.data, p["epos"], p["xe"], p["ecur"], lo, hi,
                                   mbar)
                psum[c] += K.margins_loss_sum(pb.loss, mbar, yc, cb)
                a0, a1 = np.searchsorted(s.ay, (lo, hi))
                local = s.ay[a0:a1] - lo
                p["old_yc"].append((yc[local], cb[local]))
                active = np.zeros(hi - lo, dtype=bool)
                active[local] = True
                score = np.empty(hi - lo)
                K.dual_scores(pb.loss, m, yc, cb, qb, active, score)
                p["new"].add(lo, score, yc, cb)
        dsum = np.zeros(len(plan))
        for c, (s, p) in enumerate(zip(states, plan)):
            p["ay_y"] = np.concatenate([t[0] for t in p["old_yc"]] + [np.zeros(0)])
            p["ay_c"] = np.concatenate([t[1] for t in p["old_yc"]] + [np.zeros(0)])
            dsum[c] = block_dual_loss(pb.loss, p["ay_y"], p["ay_c"], np.ascontiguousarray(s.av))
            p["new_y"], p["new_yv"], p["new_c"] = p["new"].ids, p["new"].y, p["new"].c
            for key in ("pos", "epos", "cur", "ecur", "old_yc", "new"):
                del p[key]
        P, D, _ = certify(psum, dsum, n, [p["pen"] for p in plan], [0.5 * self.l2 * p["sq"] for p in plan])
        return plan, (P, D, duality_gap(P, D)), rows, cols

    def _update(self, states: list[ClassState], plan: list[dict], rows: LineSet, cols: LineSet, epoch: int,
                done=None) -> int:
        """Steps 4-6: grow ``[A]``, rounds on it, shrink the active sets. Returns nnz of ``[A]``.

        ``done(fraction)``: told the share of the classes updated (progress only)."""
        pb, n = self.pb, self.n
        all_rows = np.unique(np.concatenate([np.union1d(s.ay, p["new_y"]) for s, p in zip(states, plan)]
                                            + [np.zeros(0, np.int64)])).astype(np.int64)
        # the rows of the search are still at hand: read only the new ones
        new = np.setdiff1d(all_rows, rows.ids, assume_unique=True).astype(np.int64)
        rows = _merge(rows, self._fetch(L.ROWS, new))
        self.resident[L.ROWS] = rows if rows.nbytes <= self.line_budget else None
        self._check_active_fits(rows, epoch)
        nnz_A = 0
        seed = int(self.opt["seed"])
        for c, (s, p) in enumerate(zip(states, plan)):
            ay_new = np.union1d(s.ay, p["new_y"]).astype(np.int64)
            old_ay = s.ay
            self._grow_A(s, p["ax"], s.ay, p["new_y"], p["new_x"], rows, cols)
            av = np.zeros(len(ay_new))
            av[np.searchsorted(ay_new, s.ay)] = s.av
            s.ay, s.av, s.ax = ay_new, av, p["ax"]
            indptr, lc, vals = self._local_A(s)
            nnz_A += len(vals)
            v = np.ascontiguousarray(p["uA"])
            w = np.concatenate([p["x"], [p["xb"]] if self.has_bias else []])
            at_new = np.searchsorted(s.ay, p["new_y"])
            at_old = np.searchsorted(s.ay, old_ay)
            yA, cA = np.empty(len(s.ay)), np.empty(len(s.ay))
            yA[at_old], yA[at_new] = p["ay_y"], p["new_yv"]
            cA[at_old], cA[at_new] = p["ay_c"], p["new_c"]
            q = self._dual_q(indptr, vals, cA)
            rng = np.random.default_rng([seed, epoch, c, 2])
            orders = np.stack([rng.permutation(len(s.ay)) for _ in range(self.rounds)]).astype(np.int64) \
                if len(s.ay) else np.zeros((self.rounds, 0), np.int64)
            K.active_rounds(pb.loss, Rows(indptr, lc, vals), Labels(yA, cA), s.av, q, orders, v, w,
                            Reg(self.l2, self.l1, float(n), self.bias))
            # 6. kick out zeros
            xw = w[: len(s.ax)]
            keep_x = xw != 0.0
            keep_y = s.av != 0.0
            s.ax, s.xv = s.ax[keep_x], xw[keep_x].copy()
            s.ay, s.av = s.ay[keep_y], s.av[keep_y].copy()
            s.xb = float(w[-1]) if self.has_bias else 0.0
            km = _isin_sorted(s.ay, s.a_rows) & _isin_sorted(s.ax, s.a_cols)
            s.a_rows, s.a_cols, s.a_vals = s.a_rows[km], s.a_cols[km], s.a_vals[km]
            if done is not None:
                done((c + 1) / len(states))
        return nnz_A

    def _dual_q(self, indptr, vals, cA) -> np.ndarray:
        """``q_i = n / eta_i`` of the rows of ``[A]`` (see the module docstring)."""
        n = float(self.n)
        sq = np.empty(len(indptr) - 1)
        K.row_sqnorms(indptr, vals, self.bias, sq)
        safe = sq / (self.l2 * n)
        if self.dual_step == "safe":
            return safe
        s = np.maximum(np.diff(indptr) + (1 if self.has_bias else 0), 1).astype(np.float64)
        # phi_i = c_i phi: its conjugate is (gamma / c_i)-strongly convex
        gam = self.gamma / np.maximum(cA, 1e-300)
        thm = s * (5.0 * self.r2 + n * gam * self.l2) / (2.0 * n * self.l2)
        return np.maximum(thm, safe)

    def _dense_w(self, plan: list[dict]) -> np.ndarray:
        w = np.zeros((self.k, self.dim))
        for c, p in enumerate(plan):
            w[c, p["supp"]] = p["wsupp"]
            if self.has_bias:
                w[c, self.d] = p["xb"]
        return w

    # ------------------------------------------------------------------------------------ engine
    def fresh(self) -> None:
        self.states = self._fresh()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ooc-prefetch")

    def restore(self, arrays: dict, meta: dict) -> None:
        self.states = self._from_arrays(arrays)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ooc-prefetch")
        self._rebuild_A(self.states)

    def checkpoint_state(self) -> tuple[dict, dict, bool]:
        return self._arrays(self.states), {}, False

    def nnz_w(self) -> int:
        return int(sum(len(p["supp"]) for p in self._plan))

    def bytes_read(self) -> int:
        return self.cache.bytes_read

    def cache_hit_rate(self) -> float:
        return self.cache.hit_rate

    def result(self) -> dict:
        return {"w": self._dense_w(self._plan),
                "active_sets": [{"x": p["ax"], "y": s.ay.copy(), "alpha": s.av.copy()}
                                for s, p in zip(self.states, self._plan)]}

    def close(self) -> None:
        if getattr(self, "pool", None) is not None:
            # reads queued but not started are dropped; a running one ends on its own (it waits for nothing)
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def _check_active_fits(self, rows, epoch: int) -> None:
        """The active submatrix ``[A]`` is about to be built from the active rows' lines (``rows``): at most
        their entries, :data:`A_ENTRY_BYTES` each with its sort, per problem. When that is more than the
        memory plan holds (its ``memory``, what the run may add beyond its fixed vectors), the run does not
        grow past ``--memory``: a new run falls back to sdca from its duals (as on a dense dual), otherwise it
        stops with one line saying what to change. The iterates never depend on --memory: a run either fits
        or is not run by dgpd."""
        entries = rows.nbytes / LINE_ENTRY_BYTES
        self._refuse_growth(int(entries * A_ENTRY_BYTES * self.k + rows.nbytes), "its active submatrix", epoch)

    def _refuse_growth(self, need: int, what: str, epoch: int) -> None:
        """``need`` bytes of ``what`` are about to be held: beyond the plan's memory, a new run falls back to
        sdca from its duals, a resumed one (or ``--no-dgpd-fallback``) stops with one line
        (:meth:`_check_active_fits`)."""
        room = self.plan.memory - self.plan.cache_bytes  # the half of the plan that is not the block cache
        # a Python caller's memory (no process size given: what training adds) goes on above it, as its plan does
        if need <= room or not int(self.opt.get("memory_held") or 0):
            return
        from ..units import format_bytes

        msg = (f"dgpd: {what} would need about {format_bytes(need, up=True)} at epoch {epoch}, more than --memory "
               f"leaves it ({format_bytes(room)})")
        if self.fallback:
            raise DenseDualFallback(msg + ": sdca goes on from its duals (--no-dgpd-fallback keeps dgpd)",
                                    [(s.ay.copy(), s.av.copy()) for s in self.states])
        # the figure that would have left it room now (the active set may grow at later epochs: "at least")
        from .._memlimit import limit_that_works

        least = limit_that_works(int(self.opt.get("memory_held") or 0) + self._budget_for(need))
        raise MemoryLimitError(msg + f": --memory {format_bytes(least, up=True)} at least holds it at this epoch; "
                               "or train with --solver sdca (the same optimum)")

    def _warn_dense_dual(self, active_y: int, epoch: int) -> None:
        """The dual active set holds more than :data:`DENSE_DUAL_SHARE` of the ``(example, class)``
        pairs, where DGPD does the work of sdca plus its searches: :class:`DenseDualFallback` in a
        new run (unless ``--no-dgpd-fallback``), else a warning once per session."""
        share = active_y / max(1, self.n * self.k)
        if share > DENSE_DUAL_SHARE and self.fallback:
            raise DenseDualFallback(f"dgpd: the dual active set holds {share:.0%} of the (example, class) pairs "
                                    f"at epoch {epoch} (a dense dual, where dgpd is sdca plus its searches): "
                                    "sdca goes on from its duals (--no-dgpd-fallback keeps dgpd)",
                                    [(s.ay.copy(), s.av.copy()) for s in self.states])
        if share > DENSE_DUAL_SHARE and not getattr(self, "_dense_warned", False):
            self._dense_warned = True
            warnings.warn(f"dgpd: the dual active set holds {share:.0%} of the (example, class) pairs at epoch {epoch} "
                          f"(a dense dual: DGPD saves work only where both the primal and the dual are sparse, e.g. "
                          f"hinge-type losses and a large --l1); --solver sdca reaches the same optimum with less",
                          DenseDualWarning, stacklevel=2)

    def epoch(self, ctx) -> None:
        """One outer iteration: searches and the certificate, then (unless the run stops) the rounds.

        The history line of the state is written after its rounds, with their figures.
        """
        states, e = self.states, ctx.epoch
        t0, b0, v0 = time.perf_counter(), self.cache.bytes_read, self.vector_bytes_read
        plan, (P, D, gap), rows, cols = self._search(states, e, float(self.opt["tol"]))
        self._plan = plan
        fields = {
            # as they were when the state was certified (the line is written after the rounds)
            "bytes_read": ctx.bytes_read(), "cache_hit_rate": self.cache.hit_rate,
            "passes": ctx.bytes_read() / self.layout_bytes,
            "active_x": int(sum(len(p["ax"]) for p in plan)),
            "active_y": int(sum(len(s.ay) for s in states)),
            "nnz_alpha": int(sum(int(np.count_nonzero(s.av)) for s in states)),
            "search_seconds": time.perf_counter() - t0,
            # labels and row norms re-read by the streamed search (0 when resident), and
            # the margins held at once (two buffers of the largest row block)
            "vector_bytes_read": self.vector_bytes_read - v0,
            "margin_bytes": 16 * self.block_rows,
        }
        self._warn_dense_dual(fields["active_y"], e)
        if not ctx.stops(P, D):
            t1 = time.perf_counter()
            # the search is about half the epoch's reading; the rounds are the other half, class by class
            ctx.done(0.5)
            nnz_A = self._update(states, plan, rows, cols, e, lambda f: ctx.done(0.5 + 0.5 * f))
            fields.update(rounds_seconds=time.perf_counter() - t1, nnz_A=nnz_A)
        fields["bytes_paged"] = self.cache.bytes_read - b0
        ctx.record(P, D, fields)
