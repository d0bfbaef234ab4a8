"""The shared block loop of the dual (row-block) solvers: paging, duals, gap, checkpoints.

One *pass* visits every row block once in a seeded order. Pass ``e`` starts
from the state ``S_e`` reached after ``e`` epochs and, on each block, first adds
the block's terms of ``P(S_e)`` and ``D(S_e)`` (computed with a snapshot of
``w`` taken at the start of the pass and with the block's duals before they are
updated), then runs the solver's update on the block. At the end of the pass
the duality gap of ``S_e`` is known exactly, at the cost of one extra sparse dot
product per row and no extra I/O ("fused" gap evaluation). If ``S_e`` is
certified (``gap <= tol * max(1, |P|)``) it is the result: its ``w`` is the
snapshot and its duals are still intact in the buffer the pass read from (paged),
or in the copy an update pass makes of them before it starts (in memory, where the
kernels update the duals in place: :meth:`ooc.runs.duals.MemoryDuals.begin_pass`). When
``max_epochs`` is reached, a last pass without updates certifies the final state.

The loop solves ``k`` problems side by side on the same pass: ``k = 1`` for a
binary or regression task, ``k`` classes for one-vs-rest multiclass, where one
block read serves every class. The state is ``w, v`` of shape ``(k, dim)`` and
duals of shape ``(k, rows)`` per block; the objective reported is the sum of the
``k`` objectives (each is certified by its own gap, and their sum bounds all).

A subclass provides :meth:`update_block`; extra state arrays it keeps in
``self.extra`` are checkpointed with ``w`` and ``v``. The run loop around the passes
(checkpoints, history, certificate, result) is :func:`ooc.engine.run`, the same for every
solver.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import NamedTuple

import numpy as np

from .._cpu import MIN_THREAD_WORK, gather_prefetch_pays, map_threads
from .._malloc import trim
from ..kernels.sdca import block_accumulate_v, block_dual_loss, block_primal_loss, rows_primal_loss
from ..objectives.losses import loss_min_is_zero, with_offset
from ..objectives.penalties import grad_conj, primal_value
from ..runs.duals import MemoryDuals, make_duals
from ..runs.rundir import RunDir
from ..schedule.buffers import BufferPool
from ..schedule.cache import BlockCache
from ..schedule.planner import ROW_GROUPS, budget_option, fixed_bytes, refuse_or_warn
from ..schedule.planner import plan as plan_memory
from ..schedule.scheduler import Prefetcher, ReadAheadGate, block_order, row_order
from ..store import layout as L
from . import intercept as icpt
from .certificate import Intercept, PureL1, certify, l1_dual_sup
from .row_threads import (
    MIN_ROW_THREADS,
    RowThreads,
    problem_split_pays,
    threaded_primal_loss,
)


class TrainBlock(NamedTuple):
    """A row block ready for the kernels: CSR arrays, stored labels and example weights.

    ``y`` holds the labels as stored (-1/+1, class values or targets); the
    per-problem labels come from ``Problem.sub_labels``.
    """

    index: int
    start: int
    stop: int
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    y: np.ndarray
    c: np.ndarray
    #: None: the block's rows are its arrays' rows ``0..stop-start-1``; else a row group of the
    #: store held in place (:meth:`BlockLoopSolver._resident_groups`): the arrays are every row's,
    #: and these are the group's row ids, in the order a merged block would hold them
    rows: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.indptr, self.indices, self.data, self.y, self.c))

    def own(self, a: np.ndarray) -> np.ndarray:
        """The block's entries of a per-row array (last axis): ``a`` itself, or its ``rows``."""
        return a if self.rows is None else a[..., self.rows]


def load_train_block(store, problem, b: int, alloc=None) -> TrainBlock:
    """Row block ``b`` of ``store`` with its labels and example weights, ready for the kernels.

    ``alloc(n, dtype)``, when given, provides the CSR arrays (:class:`ooc.schedule.buffers.BufferPool`).
    """
    return load_train_group(store, problem, [b], alloc=alloc)


def load_train_group(store, problem, blocks, pause_at: int = 0, pause=None, alloc=None) -> TrainBlock:
    """Row blocks ``blocks`` concatenated in that order (see :meth:`BlockLoopSolver.load_group`).

    One block keeps its own row range; several are rows ``0..m-1`` of the merged block.
    ``pause`` is called once the first ``pause_at`` blocks are read (:meth:`ooc.store.Store.read_group`).
    """
    blocks = [int(b) for b in blocks]
    blk, y = store.read_labeled_rows(blocks, pause_at, pause, alloc)
    y = problem.block_labels(y)
    sw = store.read_weights_group([store.block_bounds(L.ROWS, b) for b in blocks]) if store.has_weights else None
    indptr = np.ascontiguousarray(blk.indptr, dtype=np.int64)
    return TrainBlock(blk.index, blk.start, blk.stop, indptr, blk.indices, blk.data, y, problem.example_weights(y, sw))


def _part_bytes(g: TrainBlock, off: int, m: int) -> int:
    nnz = int(g.indptr[off + m] - g.indptr[off])
    return (m + 1) * g.indptr.itemsize + nnz * (g.indices.itemsize + g.data.itemsize) + m * (g.y.itemsize + g.c.itemsize)


def _part(g: TrainBlock, b: int, off: int, m: int, start: int) -> TrainBlock:
    """Rows ``off..off+m-1`` of a merged block as block ``b`` (copies: what load_train_block returns)."""
    lo, hi = int(g.indptr[off]), int(g.indptr[off + m])
    return TrainBlock(b, start, start + m, g.indptr[off:off + m + 1] - lo, g.indices[lo:hi].copy(),
                      g.data[lo:hi].copy(), g.y[off:off + m].copy(), g.c[off:off + m].copy())


class ProblemRefused(ValueError):
    """A solver refuses the problem before any training (its theory does not apply, or does not
    pay): nothing of the run is worth keeping, and the message says what to use instead."""


class StoreSolver:
    """What every solver knows about its problem, store and run directory, and what it gives the engine.

    :func:`ooc.engine.run` drives every solver through these methods (the run loop, checkpoint
    cadence, history, certificate and result are the engine's):

    ``fresh()`` / ``restore(arrays, meta)``
        Start from the initial state, or from a checkpoint's arrays and metadata.
    ``checkpoint_state() -> (arrays, meta, background)``
        The state to save now (at an epoch boundary, or at a safe point inside an epoch, or
        after the pass that certified the state the run stops at), the solver's own metadata
        (its position inside the epoch, partial sums), and whether the arrays may be written by
        a background thread while the run goes on. Inside a pass that does not update, the
        state saved is the epoch's start (nothing of the pass is kept).
    ``epoch_checkpoint_optional()``
        Whether the engine may skip the checkpoint of an epoch end: the whole state is in a
        checkpoint, so an older one stays valid (no dual file the next epoch overwrites).
    ``epoch(ctx)``
        One epoch from the state ``S_e`` (``e = ctx.epoch``): certify ``S_e`` with
        ``ctx.record(P, D, fields)`` and, if the run goes on and ``ctx.update``, update it,
        calling ``ctx.tick()`` where a checkpoint may be taken.
    ``next_epoch(e)``
        The epoch is over and the run goes on from ``S_e``.
    ``result()``
        ``w`` of the certified state, ``(problems, dim)``, and what else the result holds.
    ``nnz_w()``, ``bytes_read()``, ``cache_hit_rate()``
        Figures of the history line: nonzero weights of the state being certified, decoded
        bytes read by this process, the block cache's hit rate.
    ``close()``
        Stop the solver's threads (called on every exit).

    ``predicts_certified``: the certificate of ``S_e`` comes with the pass that updates it
    (fused), and a pass may only certify when the last gaps predict convergence.
    """

    name = "base"
    predicts_certified = False

    def __init__(self, problem, rundir: RunDir, options: dict, progress=None):
        self.pb = problem
        self.rd = rundir
        self.opt = options
        self.progress = progress
        st = problem.store
        self.store = st
        self.n = st.n_rows
        self.dim = st.n_cols + (1 if problem.bias > 0 else 0)
        self.nb = st.n_blocks(L.ROWS)
        self.row_ptr = st.block_ptr(L.ROWS)
        #: compute threads (``--threads``): the problems solved side by side run on several at once
        self.threads = max(1, int(options.get("threads") or 1))

    def at_epoch_start(self) -> bool:
        """Whether the next epoch step starts a new epoch (no part of it done yet)."""
        return True

    def epoch_checkpoint_optional(self) -> bool:
        """Whether an older checkpoint stays valid once this epoch's is skipped (see the class docstring)."""
        return False

    def next_epoch(self, epoch: int) -> None:
        """The run goes on from the state reached after ``epoch`` epochs."""

    def result(self) -> dict:
        return {}

    def certified_w(self) -> np.ndarray:
        """The coefficients of the state last certified, ``(k, dim)`` with the bias column (what
        ``--validation`` scores); no side effects."""
        return np.atleast_2d(self.result()["w"])

    def close(self) -> None:
        """Stop the solver's threads."""


class BlockLoopSolver(StoreSolver):
    """Drives passes over the row blocks of a store for a dual coordinate solver.

    Parameters
    ----------
    problem : ooc.solvers.problem.Problem
        Store, loss, penalty, labels/weights mapping, bias.
    rundir : RunDir
    options : dict
        ``tol, max_epochs, memory, seed, checkpoint_every``.
    progress : callable, optional
        Called with a dict after each pass.
    """

    name = "base"
    #: what the solver holds (ooc.schedule.planner): w, v, snapshot, result, the groups' duals; duals O(n k)
    footprint = ROW_GROUPS
    #: kernels given the problem's own loss even with ``--fit-intercept`` (the dual terms ``D_0``,
    #: :meth:`dual_loss`); every other kernel given a loss takes :meth:`loss_of`'s: the specializations a
    #: run calls (:func:`ooc.memfit.kernel_signatures`), so that what compiling costs is charged
    own_loss_kernels = ("block_dual_loss",)
    #: whether the solver's passes take a row group held in place (:meth:`_resident_groups`): its
    #: kernels visit ``visit_order``'s rows and sum the dual terms with :meth:`dual_loss`
    resident_ok = False

    def __init__(self, problem, rundir: RunDir, options: dict, progress=None):
        super().__init__(problem, rundir, options, progress)
        self.k = problem.n_sub
        #: an unregularized intercept per problem, fixed during a pass (ooc.solvers.intercept)
        self.fit_intercept = bool(problem.fit_intercept)
        #: blocks whose rows are visited in one permutation (see :meth:`_gather`)
        self.mix = min(max(1, int(options.get("mix_blocks") or 1)), max(self.nb, 1))
        #: the split of --memory (ooc.schedule.planner): duals in memory or paged, the group being worked
        #: on, the groups read meanwhile (read_depth, ahead_blocks) and the cache (the rest)
        #: whether one problem's pass on one thread keeps its replica (replica_one_thread): dropped when
        #: --memory cannot hold it, since the numbers are the same without it (two O(d) vectors fewer)
        self._one_thread_replica = True
        self.plan = plan_memory(self.footprint, self.store, budget_option(options), k=self.k, mix=self.mix,
                                vectors=options.get("dual_store"), warn=False, fixed=self._fixed_bytes())
        if self.plan.warning and self.replica_one_thread and self.k == 1 and self._fixed_bytes(False) < self.plan.fixed:
            lean = plan_memory(self.footprint, self.store, budget_option(options), k=self.k, mix=self.mix,
                               vectors=options.get("dual_store"), warn=False, fixed=self._fixed_bytes(replica=False))
            if not lean.warning:
                self.plan, self._one_thread_replica = lean, False
        refuse_or_warn(self.plan, options.get("memory_limit"), int(options.get("memory_held") or 0))
        # duals in memory are updated in place, so an update pass keeps a copy of those it starts from (the
        # state it certifies: MemoryDuals.begin_pass), taken from the cache's share; where the cache cannot
        # give that up they are paged, whose buffers keep the pass's start anyway (the same iterates)
        in_memory = self.plan.vectors_in_memory
        dual_bytes = 8 * self.k * self.n
        if in_memory and self.plan.cache_bytes < dual_bytes and options.get("dual_store") != "memory":
            in_memory = False
        self.duals = make_duals(rundir, self.row_ptr, self.k, in_memory)
        cache_bytes = max(0, self.plan.cache_bytes - (dual_bytes if in_memory else 0))
        self.read_depth, self.ahead_blocks = self.plan.read_depth, self.plan.ahead_blocks
        # a checkpoint written while the run goes on copies the state first (w, v, the snapshot and the
        # duals in memory, with the pass's starting ones inside a pass): only when the cache can give up
        # that much, else it is written in place
        copies = (8 * self.k * self.dim * (self.state_vectors - (1 if self.v_is_w() else 0))
                  + (2 * dual_bytes if in_memory else 0))
        self._copy_checkpoints = cache_bytes >= copies
        self.cache = BlockCache(cache_bytes - (copies if self._copy_checkpoints else 0))
        self._gate, self._positions = None, {}
        #: the in-memory duals of the checkpoint resumed from, while the plan pages them (:meth:`restore`)
        self._restored_in_memory = None
        # the arrays of blocks and groups read from the store, reused once nothing refers to them
        self._buffers = BufferPool(2 + self.read_depth)
        #: every row in one block (:meth:`_resident_block`), when the cache can hold them all: None until made
        self._resident: TrainBlock | None = None
        self._resident_mode = self._holds_every_row()

    #: ``(k, dim)`` arrays of the state (checkpointed): ``w``, ``v``, the pass snapshot ``w_prev``
    state_vectors = 3
    #: whether one problem's pass runs on several threads (:mod:`ooc.solvers.row_threads`)
    threads_one_problem = False
    #: whether one problem's pass on one thread runs on a replica too (:meth:`replica_pass`)
    replica_one_thread = False

    @classmethod
    def held_vectors(cls, l1: float) -> int:
        """``(k, dim)`` arrays held at once: the state's, and the result's copy at the end."""
        return cls.state_vectors + 1

    @classmethod
    def row_threads(cls, k: int, threads: int) -> int:
        """Threads that share one problem's pass: ``threads`` for a single problem (binary,
        regression) when the solver can and ``threads >= MIN_ROW_THREADS``, else 1 (one-vs-rest
        classes go on the threads instead)."""
        return threads if cls.threads_one_problem and k == 1 and threads >= MIN_ROW_THREADS else 1

    @classmethod
    def fixed_for(cls, store, k: int, dim: int, mix: int, l1: float, threads: int = 1, replica: bool = True) -> int:
        """What a solver of this class holds whatever the plan, on ``store`` as it reads it: the
        footprint's rows terms (:func:`ooc.schedule.planner.fixed_bytes`) with its own count of
        ``O(d)`` vectors (:meth:`held_vectors`: its state, the result) in place of the family's,
        and the threads' replicas when one problem's pass runs on ``threads`` threads (or, with
        ``replica``, on one thread for a solver with ``replica_one_thread``)."""
        fixed = fixed_bytes(cls.footprint, store, k, dim, mix)
        t = cls.row_threads(k, threads)
        replicas = t > 1 or (replica and cls.replica_one_thread and k == 1)
        # the result's copy (the last of held_vectors) is made once the replicas are gone (result()):
        # the two are never held at once
        copy = 8 * k * dim
        return (fixed - cls.footprint.per_k_dim * k * dim + 8 * k * dim * (cls.held_vectors(float(l1)) - 1)
                + max(copy, RowThreads.held_bytes(t, dim, l1) if replicas else 0))

    def _fixed_bytes(self, replica: bool = True) -> int:
        # one problem's threads as this run decides them (its split rule may keep the pass on one thread:
        # then no replica per thread is held)
        try:
            threads = self.one_problem_threads() if self.k == 1 else self.threads
        except AttributeError:  # a solver whose own settings are made after the plan: count every thread's
            threads = self.threads
        return self.fixed_for(self.store, self.k, self.dim, self.mix, float(self.pb.penalty.l1), threads, replica)

    def one_problem_threads(self) -> int:
        """Threads that share this run's one problem: :meth:`row_threads`, and 1 where the threads would not
        pay (:func:`~ooc.solvers.row_threads.rows_split_pays`)."""
        if getattr(self, "_one_problem_threads", None) is None:
            t = self.row_threads(self.k, self.threads)
            if t > 1 and not problem_split_pays(t, self.pb, self.step_l2(), self.n):
                t = 1
            self._one_problem_threads = t
        return self._one_problem_threads

    def replica_pass(self) -> bool:
        """Whether one problem's update passes run on :meth:`row_pass`'s replicas: on its threads
        (:meth:`one_problem_threads` > 1), or, for a solver with ``replica_one_thread``, on one thread,
        whose replica keeps the pass's snapshot beside ``w`` (one cache line a nonzero instead of two:
        the same numbers, :class:`~ooc.solvers.row_threads.RowThreads`)."""
        return self.one_problem_threads() > 1 or (self.replica_one_thread and self.k == 1 and self._one_thread_replica)

    def step_l2(self) -> float:
        """The L2 weight of the problem the Prox-SDCA steps solve (acc-sdca's inner one is larger)."""
        return float(self.pb.penalty.l2)

    def row_pass(self) -> RowThreads:
        """One problem's pass on the threads (:class:`ooc.solvers.row_threads.RowThreads`), made once."""
        if getattr(self, "_row_pass", None) is None:
            self._row_pass = RowThreads(self.store.read_col_nnz(), self.one_problem_threads(), self.dim, self.pb.bias > 0,
                                        float(self.pb.penalty.l1))
        return self._row_pass

    def _replicas_stale(self) -> None:
        # w or the snapshot changed outside a threaded pass: the replicas are refilled before the next group
        if getattr(self, "_row_pass", None) is not None:
            self._row_pass.invalidate()

    # -- blocks ------------------------------------------------------------------------------------
    def load_block(self, b: int) -> TrainBlock:
        return load_train_block(self.store, self.pb, b, self._buffers.take)

    def load_group(self, group: tuple) -> TrainBlock:
        """The rows of the blocks of ``group`` as one block (the prefetch thread calls this).

        Visiting the rows of several blocks in one random permutation matters: on data
        with very popular features, a permutation that keeps each block's rows together
        (blocks in random order, rows shuffled inside) converges several times slower
        than a global permutation (measured: 1e-4 vs 1e-9 relative gap after 10 epochs).
        Mixing ``mix`` resident blocks recovers almost all of the difference.

        The merged block is the blocks' rows one after the other in ``group``'s order
        (``start = 0``, ``stop`` = their count, ``index`` = the first block), however it is
        made: when no block is cached, the store decodes every block straight into the
        merged arrays (:meth:`ooc.store.Store.read_group`), so a group costs its own size
        in memory, not its blocks plus their concatenation; cached blocks are copied in.
        """
        cache = self.cache
        if len(group) == 1:
            return cache.get(group[0], lambda: self.load_block(group[0]), lambda t: t.nbytes)
        if len(group) == self.nb:
            # one group of every block, the same (sorted) tuple each pass: the cache keeps the merged
            # block itself, so a pass over data in memory does not concatenate its blocks again
            return cache.get(group, lambda: load_train_group(self.store, self.pb, group, len(group), None,
                                                             self._buffers.take), lambda t: t.nbytes)
        hits = [cache.lookup(b) for b in group]
        if all(h is None for h in hits):
            # the group at position i of the pass reads ahead_blocks blocks, then waits until the
            # consumer is done with group i-1 (when --memory does not hold two groups)
            gate = self._gate  # this pass's (the next pass makes another)
            pos = self._positions.get(group, 0) if gate is not None else 0
            pause = (lambda: gate.wait_released(pos)) if pos > 0 else None
            gblk = load_train_group(self.store, self.pb, group, self.ahead_blocks, pause, self._buffers.take)
            off = 0
            for b in group:
                m = int(self.row_ptr[b + 1] - self.row_ptr[b])
                size = _part_bytes(gblk, off, m)
                # a copy only when the cache keeps it (the merged arrays go when the group is done)
                cache.add(b, _part(gblk, b, off, m, int(self.row_ptr[b])) if cache.fits(size) else None, size)
                off += m
            return gblk
        blocks = [h if h is not None else cache.get(b, lambda b=b: self.load_block(b), lambda t: t.nbytes)
                  for b, h in zip(group, hits)]
        offs = np.cumsum([0] + [int(t.indptr[-1]) for t in blocks[:-1]])
        indptr = np.concatenate([blocks[0].indptr[:1]] + [t.indptr[1:] + o for t, o in zip(blocks, offs)])
        m = sum(t.stop - t.start for t in blocks)
        return TrainBlock(group[0], 0, m, indptr, np.concatenate([t.indices for t in blocks]),
                          np.concatenate([t.data for t in blocks]), np.concatenate([t.y for t in blocks]),
                          np.concatenate([t.c for t in blocks]))

    def group_duals(self, group: tuple, buf: int) -> np.ndarray:
        """The duals of the blocks of ``group``, (k, rows) in the merged block's row order."""
        return self.duals.read_group(buf, group)

    # -- state ---------------------------------------------------------------------------------------
    def fresh_state(self) -> dict:
        """Starting ``w``, ``v`` (zeros, or rebuilt from warm-start duals) and the snapshot, (k, dim) each."""
        v = np.zeros((self.k, self.dim))
        warm = bool(self.opt.get("warm_start"))
        if warm:
            # v = 1/(l2 n) sum_i a_i x_i for the copied duals: one pass over the data
            scale = 1.0 / (float(self.pb.penalty.l2) * self.n)
            for b in range(self.nb):
                blk = self.store.block(L.ROWS, b)
                alpha = self.duals.read(0, b)
                for c in range(self.k):
                    block_accumulate_v(np.ascontiguousarray(blk.indptr, dtype=np.int64), blk.indices, blk.data,
                                       alpha[c], v[c], scale, float(self.pb.bias))
        # grad g*(0) = 0: a fresh start needs no k soft-thresholdings (0.7 s of start-up at 58 x 2^18)
        w = (np.stack([grad_conj(self.pb.penalty, v[c], self.pb.bias) for c in range(self.k)]) if warm
             else np.zeros_like(v))
        extra = (icpt.fresh_arrays(icpt.start_offsets(self.pb, self.store, self.row_ptr), self._loss_min_is_zero())
                 if self.fit_intercept else {})
        return {"w": w, "v": v, "w_prev": w.copy(), **extra}

    def init_duals(self) -> None:
        """Buffer 0 holds the starting duals of every block: zeros, or a finished run's (warm start).

        A finished run's duals stay feasible for another ``l2`` or ``l1`` (the dual
        constraints depend on the loss and weights only), which is what makes
        regularization paths cheap.
        """
        warm = self.opt.get("warm_start")

        def make(b):
            rows = int(self.row_ptr[b + 1] - self.row_ptr[b])
            if not warm:
                return np.zeros((self.k, rows))
            a = np.asarray(warm(b), dtype=np.float64)
            if a.shape != (self.k, rows):
                raise ValueError(f"warm start: block {b} of the previous run has duals of shape {a.shape}, "
                                 f"expected {(self.k, rows)}")
            return a

        self.duals.init(make)

    # -- hooks for solvers that change the problem between passes (acc-sdca) ---------------------------
    def restore_extra(self, meta: dict) -> None:
        """After a checkpoint is loaded (or the run starts): ``self.extra`` holds the saved arrays."""

    def pass_start(self, w: np.ndarray, v: np.ndarray) -> None:
        """Called when a pass starts (after ``w`` is snapshot); state kept here goes in ``self.extra``."""

    def epoch_done(self, epochs: int, w: np.ndarray, v: np.ndarray) -> None:
        """Called after each full update pass, before the epoch checkpoint."""

    def history_extra(self) -> dict:
        """Solver-specific fields of a history line."""
        return {}

    def v_is_w(self) -> bool:
        """Whether ``w = grad g*(v)`` is ``v`` itself (then one array serves both)."""
        return False

    def loss_of(self, c: int):
        """The loss problem ``c``'s kernels take: the problem's, or with ``--fit-intercept`` its margins
        shifted by the problem's intercept of this pass (:class:`ooc.objectives.losses.Offset`).
        The dual terms are summed with the problem's own loss (``D_0``, :mod:`ooc.solvers.intercept`)."""
        if not self.fit_intercept:
            return self.pb.loss
        return with_offset(self.pb.loss, self.extra["icpt_b"][c])

    #: entries of the gap sums (one per problem solved side by side)
    @property
    def n_terms(self) -> int:
        return self.k

    def gap_terms(self, blk: TrainBlock, alpha: np.ndarray, w_state: np.ndarray, psum: np.ndarray,
                  dsum: np.ndarray) -> None:
        """Add the block's terms of P (at ``w_state``) and D (at ``alpha``, before its update)."""
        pb = self.pb

        rt = self.one_problem_threads()
        if rt > 1:  # one problem: its rows over the threads
            y0 = pb.sub_labels(blk.y, 0)
            psum[0] += threaded_primal_loss(self.loss_of(0), blk.indptr, blk.indices, blk.data, y0, blk.c, w_state[0],
                                            pb.bias, rt, blk.rows)
            dsum[0] += self.dual_loss(blk, y0, alpha[0])
            return

        def one(c):  # problem c alone: its own entries of psum, dsum (the same sums whatever the threads)
            yc = pb.sub_labels(blk.y, c)
            prefetch = gather_prefetch_pays(w_state[c].nbytes)
            psum[c] += (block_primal_loss(self.loss_of(c), blk.indptr, blk.indices, blk.data, yc, blk.c, w_state[c],
                                          pb.bias, prefetch) if blk.rows is None else
                        rows_primal_loss(self.loss_of(c), blk.indptr, blk.indices, blk.data, yc, blk.c, w_state[c],
                                         pb.bias, prefetch, blk.rows))
            dsum[c] += self.dual_loss(blk, yc, alpha[c])

        self.over_classes(one, blk)

    def over_classes(self, fn, blk: TrainBlock) -> list:
        """``[fn(c) for c in range(k)]`` on the threads (one-vs-rest: one block read serves every class;
        each class touches only its own duals, ``v``, ``w`` and sums, so the numbers are those of one
        thread), or in the caller where the block's nonzeros times the classes are too few to hand over."""
        return map_threads(fn, range(self.k), self.threads, work=self.k * len(blk.data))

    def dual_loss(self, blk: TrainBlock, yc: np.ndarray, alpha_c: np.ndarray) -> float:
        """``sum_i -c_i phi*(-a_i / c_i, y_i)`` over the block's rows, in the block's row order."""
        return block_dual_loss(self.pb.loss, blk.own(yc), blk.own(blk.c), blk.own(alpha_c))

    def visit_order(self, blk: TrainBlock, epoch: int) -> np.ndarray:
        """The rows a pass visits in ``blk``, in order: the seeded permutation of its rows
        (:func:`ooc.schedule.scheduler.row_order`), as ids into the block's arrays."""
        order = row_order(blk.stop - blk.start, int(self.opt["seed"]), epoch, blk.index)
        return order if blk.rows is None else blk.rows[order]

    def model_rows(self, w: np.ndarray) -> np.ndarray:
        """``w`` as (problems, >= d) without a copy: the model's rows, its first ``d`` columns the
        features' coefficients (:meth:`export_w` without the intercepts' column)."""
        return w

    def export_w(self, w: np.ndarray) -> np.ndarray:
        """``w`` as (problems, dim) for the model; with ``--fit-intercept`` the intercepts are a last column."""
        if not self.fit_intercept:
            return w
        return np.hstack([w, self.extra["icpt_b"].reshape(-1, 1)])

    def dual_penalty(self, c: int, w_state: np.ndarray) -> float:
        """``l2 g*(v)`` of problem ``c`` at the pass's starting state.

        For the elastic net ``l2 g*(v) = l2/2 ||soft_threshold(v, l1/l2)||^2 = l2/2 ||w||^2``,
        and the kernels keep ``w = soft_threshold(v)`` exactly, so the snapshot of ``w`` is
        all D needs.
        """
        return 0.5 * self.pb.penalty.l2 * float(np.dot(w_state[c], w_state[c]))

    def work_block(self, blk: TrainBlock, alpha: np.ndarray, epoch: int, w: np.ndarray, v: np.ndarray,
                   w_state: np.ndarray, psum: np.ndarray, dsum: np.ndarray, update: bool) -> None:
        """The block's gap terms of the pass's starting state, then (if ``update``) its update.

        Solvers whose kernel can sum the primal loss at ``w_state`` in the same sweep as
        the update override this (the fused gap); the results must equal
        :meth:`gap_terms` followed by :meth:`update_block`.
        """
        self.gap_terms(blk, alpha, w_state, psum, dsum)
        if update:
            self.update_block(blk, alpha, epoch, w, v)

    def update_block(self, blk: TrainBlock, alpha: np.ndarray, epoch: int, w: np.ndarray,
                     v: np.ndarray) -> None:  # pragma: no cover
        """Update ``alpha`` (the block's duals, (k, rows)), ``w`` and ``v`` ((k, dim)) in place."""
        raise NotImplementedError

    # -- the engine's protocol (ooc.engine) ----------------------------------------------------------
    predicts_certified = True

    def fresh(self) -> None:
        self.init_duals()
        arrays = self.fresh_state()
        self._pos = 0
        self._psum = np.zeros(self.n_terms)
        self._dsum = np.zeros(self.n_terms)
        self._asum, self._csum, self._inner_gap = np.zeros((2, self.k)), 0.0, np.full(self.k, np.inf)
        self._prepare(arrays)
        self.restore_extra({"epoch": 0, "position": 0})

    def restore(self, arrays: dict, meta: dict) -> None:
        # the duals' place follows --memory, never the iterates (a resume under another --memory continues bit
        # for bit): a checkpoint of duals held in memory resumed where the plan pages them is written to the
        # buffers when the pass knows them (:meth:`_page_restored`); one of paged duals stays paged (it holds
        # less than the plan allows)
        self._restored_in_memory = None
        if "alpha" in arrays and self.duals.kind == "paged":
            self._restored_in_memory = (arrays["alpha"], arrays.get(MemoryDuals.START))
        elif "alpha" not in arrays and self.duals.kind == "memory":
            self.duals = make_duals(self.rd, self.row_ptr, self.k, False)
            self._resident_mode = self._holds_every_row()  # rows held in place need the duals in memory
        self.duals.restore(arrays)
        self._pos = int(meta["position"])
        self._psum = np.asarray(meta["primal_sum"], dtype=np.float64)
        self._dsum = np.asarray(meta["dual_sum"], dtype=np.float64)
        # --fit-intercept: the duals' sums before and after the pass's blocks so far, and their weights'
        self._asum = np.asarray(meta.get("alpha_sums", np.zeros((2, self.k))), dtype=np.float64).reshape(2, self.k)
        self._csum = float(meta.get("weight_sum", 0.0))
        self._inner_gap = np.full(self.k, np.inf)  # measured again by the pass before b moves
        self._prepare(arrays)
        self.restore_extra(meta)

    def _prepare(self, arrays: dict) -> None:
        """``w``, ``v``, the snapshot and ``extra`` from the state arrays; the run's reader threads.

        ``arrays`` is not kept: with ``v = w`` its ``v`` would be a second O(d) array held for nothing.
        """
        self.w = arrays["w"]
        # a checkpoint leaves out what equals w (checkpoint_state): v when it is w, the snapshot at a pass start
        self.v = arrays["v"] if "v" in arrays else self._same_as_w(arrays, "v", self.v_is_w())
        self.w_prev = (arrays["w_prev"] if "w_prev" in arrays
                       else self._same_as_w(arrays, "w_prev", self._pos == 0).copy())
        if self.v_is_w():
            # one array for both: the kernels write v_j and w_j = v_j to the same place, which
            # saves a random write (and a cache line) per nonzero; the iterates are identical
            if not np.array_equal(self.w, self.v):
                raise RuntimeError("inconsistent state: w != v although l1 = 0")
            self.v = self.w
        self.extra = {k: a for k, a in arrays.items() if k not in ("w", "v", "w_prev", "alpha", MemoryDuals.START)}
        self._replicas_stale()
        if not hasattr(self, "_pool"):
            # the read-ahead threads for the whole run (a pool per pass costs more than small blocks),
            # and one per read-ahead thread for paged duals: files read while the group's rows are
            self._pool = ThreadPoolExecutor(max_workers=self.read_depth, thread_name_prefix="ooc-prefetch")
            self._dual_pool = (ThreadPoolExecutor(max_workers=self.read_depth, thread_name_prefix="ooc-duals")
                               if self.duals.kind == "paged" else None)

    def _same_as_w(self, arrays: dict, key: str, allowed: bool) -> np.ndarray:
        if not allowed:
            raise RuntimeError(f"inconsistent state: the checkpoint has no {key!r}")
        return arrays["w"]

    def checkpoint_state(self) -> tuple[dict, dict, bool]:
        # with the duals in memory the whole state is in the checkpoint: it can be written while the
        # next blocks are worked on (paged duals must be durable before their buffer is reused)
        arrays = {"w": self.w, **self.extra}
        # a pass that does not update (certify-only, max_epochs) leaves the state at its epoch's start:
        # saved as that, so that a resume allowed to update runs the pass again with its update
        pos = self._pos if getattr(self, "_updating", True) else 0  # (between passes _pos is 0 anyway)
        # what equals w is not written again (restored as w): v when the kernels keep v = w, and the
        # pass's snapshot at a pass start, the epoch checkpoint (one O(d k) array instead of three)
        if self.v is not self.w:
            arrays["v"] = self.v
        if not (pos == 0 and np.array_equal(self.w_prev, self.w)):
            arrays["w_prev"] = self.w_prev
        meta = {"position": pos, "primal_sum": self._psum.tolist(), "dual_sum": self._dsum.tolist()}
        if self.fit_intercept:
            meta.update(alpha_sums=self._asum.tolist(), weight_sum=self._csum)
        return ({**arrays, **self.duals.checkpoint_arrays(pos > 0)}, meta,
                self.duals.kind == "memory" and self._copy_checkpoints)

    def at_epoch_start(self) -> bool:
        return self._pos == 0

    def epoch_checkpoint_optional(self) -> bool:
        # the duals in memory: the whole state is in every checkpoint (paged ones alternate buffers per epoch)
        return self.duals.kind == "memory"

    def nnz_w(self) -> int:
        # the model's first d columns, seen without the copy export_w makes to append the intercepts
        w, d = self.model_rows(self.w_prev), self.store.n_cols
        return int(sum(map_threads(lambda c: np.count_nonzero(w[c, :d]), range(len(w)), self.threads, work=w.size)))

    def bytes_read(self) -> int:
        return self.cache.bytes_read

    def cache_hit_rate(self) -> float:
        return self.cache.hit_rate

    def result(self) -> dict:
        # what the run's end holds (the model's copy, the final duals read back, the model's files) is
        # made in the room of what training held: the replicas and the cached blocks go first
        self._row_pass = None
        self.cache.shrink(1 << 62)
        trim()
        w = self.export_w(self.w_prev)
        return {"w": w.copy() if np.may_share_memory(w, self.w_prev) else w, **self.duals.final(self._cur)}

    def certified_w(self) -> np.ndarray:
        return self.export_w(self.w_prev)  # the pass certifies its snapshot (result() also saves the duals)

    def close(self) -> None:
        if self._gate is not None:
            self._gate.abort()  # a reader waiting for a group this loop will never release
        # reads queued but not started are dropped; those running end on their own (the gate is
        # aborted), and the read-ahead pool goes first: its reads wait for the duals' pool
        for pool in (getattr(self, "_pool", None), getattr(self, "_dual_pool", None)):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def _page_restored(self, cur: int, nxt: int) -> None:
        """Write the in-memory duals of the checkpoint this run resumed from into the buffers its paged pass
        reads: the pass's starting duals into ``cur`` and, inside an update pass, the updated ones into ``nxt``
        (the visited blocks' are read from there, the others are equal in both), as a paged run would have
        left them."""
        held = self._restored_in_memory
        if held is None:
            return
        self._restored_in_memory = None
        alpha, start = held
        for b in range(self.nb):
            rows = slice(int(self.row_ptr[b]), int(self.row_ptr[b + 1]))
            self.duals.write(cur, b, (alpha if start is None else start)[:, rows])
            if start is not None:
                self.duals.write(nxt, b, alpha[:, rows])
        self.rd.sync_duals()

    def _start_pass(self) -> None:
        """Snapshot ``w`` as the state the pass certifies, and zero the gap sums."""
        # in ranges of rows, on every thread at once (58 x 2^18 one-vs-rest coefficients: 121 MB)
        w, m, t = self.w, len(self.w), self.threads
        map_threads(lambda r: np.copyto(self.w_prev[r * m // t:(r + 1) * m // t], w[r * m // t:(r + 1) * m // t]),
                    range(t), t, work=w.size)
        self.pass_start(self.w, self.v)
        self._replicas_stale()
        self._psum[:] = 0.0
        self._dsum[:] = 0.0
        self._asum[:] = 0.0
        self._csum = 0.0

    def next_epoch(self, epoch: int) -> None:
        self._pos = 0
        self.epoch_done(epoch, self.w, self.v)
        if self.fit_intercept:
            self._move_intercepts()
        # the next pass starts from S_e: snapshot w now so the checkpoint holds it
        self._start_pass()

    def _load(self, g, cur):
        if self._dual_pool is None:
            return self.load_group(g), self.group_duals(g, cur)
        duals = self._dual_pool.submit(self.group_duals, g, cur)
        try:
            gblk = self.load_group(g)
        except BaseException:
            # no read left behind (one not started is dropped; a file read ends on its own); the
            # rows' error is the one reported
            duals.cancel()
            futures_wait([duals])
            raise
        return gblk, duals.result()

    def _group_at_hand(self, g: tuple) -> bool:
        """Whether group ``g`` is made in the caller: it is cached whole, or it is one cached block, or
        its cached blocks are so small that copying them into one costs less than a hand-off to the
        read-ahead thread (a 450-row store: every pass's groups went through the thread)."""
        cache = self.cache
        if g in cache or (len(g) == 1 and g[0] in cache):
            return True
        blocks = [cache.peek(b) for b in g]  # (not the store's O(n) row counts: they may not fit --memory)
        return all(t is not None for t in blocks) and sum(len(t.data) for t in blocks) < MIN_THREAD_WORK

    def _groups(self, order: np.ndarray) -> list[tuple]:
        """The pass's groups from position ``_pos`` on: consecutive runs of ``mix`` blocks of ``order``.

        A resume at a group boundary forms the same groups; the last one may be shorter.
        """
        groups = [tuple(int(b) for b in order[i:i + self.mix]) for i in range(self._pos, self.nb, self.mix)]
        if self.mix >= self.nb:
            # every block in one group: its rows are permuted as a whole anyway, so the blocks'
            # order inside it is a free choice; a fixed one lets load_group cache the merged block
            groups = [tuple(sorted(g)) for g in groups]
        return groups

    def epoch(self, ctx) -> None:
        """One pass: the gap terms of ``S_e`` on every block, fused with its update (``ctx.update``)."""
        e, update = ctx.epoch, ctx.update
        self._updating = update
        w, v, w_prev, psum, dsum = self.w, self.v, self.w_prev, self._psum, self._dsum
        if self._pos == 0:  # a pass in progress at a checkpoint (position > 0) is always an update pass
            self._start_pass()
            # the duals of S_e stay as they are until the pass is certified (in memory: a copy of them)
            self.duals.begin_pass(update)
        order = block_order(self.nb, int(self.opt["seed"]), e)
        cur, nxt = e % 2, (e + 1) % 2
        self._cur = cur
        self._page_restored(cur, nxt)
        pass_t0, pass_bytes0 = time.perf_counter(), self.cache.bytes_read
        file_bytes0 = self.store.backend.file_bytes_read()
        rows_done = 0
        groups = self._groups(order)
        gate = ReadAheadGate()
        self._gate, self._positions = gate, {g: i for i, g in enumerate(groups)}
        # the prefetch thread reads a group's duals with its rows: the duals of buffer ``cur`` do
        # not change during the pass (updates go to ``nxt``), and paged ones are files to read. A group
        # of several cached blocks is not free: its blocks are copied into one (30 MB, 11 ms on the 1M x
        # 2^20 bench store, 8 groups a pass), so it is made there too, beside the pass, not before it
        if self._resident_mode:
            self._resident_block()  # allocated at the first pass
        if self._resident_mode and self._loaded.all():
            # every row in memory as one block: a group is its rows' ids, nothing to read or copy
            pf, source = None, ((g, self._resident_group(g)) for g in groups)
        else:
            pf = Prefetcher(groups, (lambda g: self._resident_group(g)) if self._resident_mode else
                            (lambda g, cur=cur: self._load(g, cur)), None, depth=self.read_depth, pool=self._pool,
                            cached=self._group_at_hand, gate=gate)
            source = iter(pf)
        # closed here, whatever stops the loop (a full disk writing the duals, Ctrl-C, SIGTERM, a
        # failed read): the prefetcher then aborts the gate before it waits for the reads in flight,
        # one of which may wait at the gate for the group this loop will not release
        with contextlib.closing(source) as groups_read:
            for group, (gblk, alpha) in groups_read:
                if self.fit_intercept:
                    self._asum[0] += gblk.own(alpha).sum(axis=1)
                    self._csum += float(gblk.own(gblk.c).sum())
                self._group = group  # the blocks whose rows gblk holds, one after the other
                self.work_block(gblk, alpha, e, w, v, w_prev, psum, dsum, update)
                if self.fit_intercept:
                    self._asum[1] += gblk.own(alpha).sum(axis=1)
                if update and gblk.rows is None:  # (a group held in place updated the duals in place)
                    off = 0
                    for gb in group:
                        m = int(self.row_ptr[gb + 1] - self.row_ptr[gb])
                        self.duals.write(nxt, gb, alpha[:, off:off + m])
                        off += m
                self._pos += len(group)
                rows_done += gblk.stop - gblk.start
                gblk = alpha = None  # the next group is being read: do not hold two
                gate.release()
                if self._pos < self.nb:
                    ctx.tick(self._pos / self.nb)
        # the pass is complete: S_e is certified (or not)
        p, d = self._gap(psum, dsum, w_prev)
        pass_seconds = time.perf_counter() - pass_t0
        ctx.record(p, d, {
            "pass_seconds": pass_seconds,
            "rows_per_s": rows_done / pass_seconds if pass_seconds > 0 else None,
            "mb_per_s": (self.cache.bytes_read - pass_bytes0) / 1e6 / pass_seconds if pass_seconds > 0 else None,
            # the reader's own figures: wall seconds it spent reading and decoding this pass, the
            # decoded bytes it loaded and the encoded bytes it read from files (None: not counted)
            "read_seconds": pf.busy_seconds - gate.waited_seconds if pf is not None else 0.0,
            "read_bytes": self.cache.bytes_read - pass_bytes0,
            "read_file_bytes": _delta(self.store.backend.file_bytes_read(), file_bytes0),
            **self.history_extra(),
        })
        if ctx.retry:
            self._pos = 0

    def _holds_every_row(self) -> bool:
        """Whether this run holds every row in one block (:meth:`_resident_block`), decided once.

        A group of several blocks is otherwise copied into one every pass (for the permutation
        over its rows): 12 bytes a nonzero, 0.15-0.3 s a pass on the 1M x 2^20 bench store, on a
        core the compute threads need. Held in place, a group is its rows' ids and the kernels
        visit them where they are, with the same numbers: the rows come in the same order with
        the same values, and the sums over a group (:meth:`dual_loss`, ``rows_primal_loss``) add
        its rows in the same order. For one problem (``k = 1``) whose duals are in memory (updated
        in place), groups of several blocks, and a cache that could hold every block.
        """
        if not (self.resident_ok and self.k == 1 and self.duals.kind == "memory" and 1 < self.mix < self.nb):
            return False
        nnz = int(self.store.nnz)
        idx, val = self._row_dtypes()
        held = nnz * (idx.itemsize + val.itemsize) + 8 * (self.n + 1) + 16 * self.n
        return held <= self.cache.budget

    def _row_dtypes(self) -> tuple[np.dtype, np.dtype]:
        """The stored dtypes of the rows' column ids and values."""
        dtype = self.store.backend.dtype
        return np.dtype(dtype(L.array_name(L.ROWS, L.INDICES))), np.dtype(dtype(L.array_name(L.ROWS, L.DATA)))

    def _resident_block(self) -> TrainBlock:
        """The block of every row (arrays allocated at the first pass, filled block by block as
        :meth:`_resident_group` first meets each)."""
        if self._resident is None:
            st, n = self.store, self.n
            cum = np.concatenate([[0], np.cumsum(st.read_row_nnz(0, n), dtype=np.int64)])
            self._nnz_ptr = cum[self.row_ptr]  # where each block's nonzeros go
            idx, val = self._row_dtypes()
            self._resident = TrainBlock(-1, 0, n, np.zeros(n + 1, dtype=np.int64), np.empty(int(cum[-1]), dtype=idx),
                                        np.empty(int(cum[-1]), dtype=val), np.empty(n), np.empty(n))
            self._loaded = np.zeros(self.nb, dtype=bool)
        return self._resident

    def _resident_group(self, group: tuple):
        """``(block, duals)`` of ``group`` held in place: every row's arrays with the group's row ids (its
        blocks' rows one after the other), and the in-memory ``(k, n)`` duals, which the kernels update
        in place. A block not met before is read and copied to its place (the prefetch threads do
        this in the first pass; groups of a pass are disjoint, so they never write the same place)."""
        res = self._resident_block()
        for b in group:
            if self._loaded[b]:
                self.cache.note_hits(1)
                continue
            t = self.load_block(b)
            lo, hi, off, z = int(self.row_ptr[b]), int(self.row_ptr[b + 1]), int(self._nnz_ptr[b]), int(t.indptr[-1])
            res.indptr[lo:hi + 1] = t.indptr + off  # its first entry too: the block before may not be here yet
            res.indices[off:off + z] = t.indices
            res.data[off:off + z] = t.data
            res.y[lo:hi], res.c[lo:hi] = t.y, t.c
            self.cache.add(b, None, t.nbytes)  # the read counted; the rows are kept in place, not in the cache
            self._loaded[b] = True
        rows = np.concatenate([np.arange(self.row_ptr[b], self.row_ptr[b + 1], dtype=np.int64) for b in group])
        return res._replace(index=group[0], stop=len(rows), rows=rows), self.duals.alpha

    def _gap(self, psum: np.ndarray, dsum: np.ndarray, w_state: np.ndarray) -> tuple[float, float]:
        """(P, D) summed over the problems of the state whose ``w`` is ``w_state`` (:func:`ooc.solvers.certificate.certify`)."""
        pb = self.pb
        # each problem's penalty terms on the threads (O(k d)); then added in problem order
        terms = map_threads(lambda c: (primal_value(pb.penalty, w_state[c], pb.bias), self.dual_penalty(c, w_state)),
                            range(self.k), self.threads, work=w_state.size)
        radius = self.opt.get("l1_radius")
        bound = certify(psum, dsum, float(self.n), [t[0] for t in terms], [t[1] for t in terms], w=w_state,
                        intercept=Intercept(self.extra, self._asum[0]) if self.fit_intercept else None,
                        pure_l1=self._pure_l1(radius, w_state) if radius else None)
        if self.fit_intercept:
            self._inner_gap[:] = bound.inner_gaps
        return bound.primal, bound.dual

    def _move_intercepts(self) -> None:
        """After an update pass: each problem's intercept for the next (:func:`ooc.solvers.intercept.move_offsets`)."""
        icpt.move_offsets(self.extra, self._asum[1] / float(self.n), self._inner_gap, self._csum, float(self.n),
                          self.pb.loss)

    def _pure_l1(self, radius: list, w_state: np.ndarray) -> PureL1:
        """Pure L1 with an added L2: what certifies the L1 problem (:class:`ooc.solvers.certificate.PureL1`)."""
        pen = self.pb.penalty
        sups = [self.dual_sup(c, w_state) for c in range(self.k)] if self._loss_min_is_zero() else None
        return PureL1(float(pen.l1), float(pen.l2), radius, sups)

    def dual_sup(self, c: int, w_state: np.ndarray) -> float:
        r"""``||X^T alpha / n||_inf = l2 ||v||_inf`` of problem ``c`` at the pass's starting state, from the
        snapshot of ``w = soft_threshold(v, l1 / l2)`` the kernels keep exactly (:func:`ooc.solvers.certificate.l1_dual_sup`)."""
        return l1_dual_sup(w_state[c], float(self.pb.penalty.l1), float(self.pb.penalty.l2))

    def _loss_min_is_zero(self) -> bool:
        """Whether ``phi*(0, y) = -min_z phi(z, y)`` is 0 for the labels (checked once on a few ``y``):
        the rescaled pure-L1 bound below needs it (every built-in loss; a registered one may not)."""
        if getattr(self, "_min_zero", None) is None:
            self._min_zero = loss_min_is_zero(self.pb.loss, self.store.label_kind)
        return self._min_zero


def _delta(now, then):
    return None if now is None or then is None else now - then
