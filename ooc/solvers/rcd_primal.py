"""rcd-primal: randomized coordinate descent on the primal, one column at a time, and its working sets for pure L1
(:mod:`ooc.solvers.rcd_working_set`); the rule in :mod:`ooc.solvers.rcd`."""

from __future__ import annotations

import contextlib
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import _memguard
from .._cpu import MIN_THREAD_WORK, even_cuts, map_threads
from ..kernels.args import Labels, Reg, Rows
from ..kernels.rcd import (
    col_curvature,
    grad_sum,
    move_margins,
    primal_bias_steps,
    primal_cd_pass,
    primal_gap_rows,
    prox_coord,
    scaled_dual_loss,
)
from ..kernels.rcd_lazy import primal_lazy_pass
from ..kernels.rcd_threads import (
    HEAVY_NNZ,
    LIGHT_ROUND_THREADS,
    ROUND_NNZ,
    RoundArrays,
    owned_cd_steps,
    round_combine,
    round_prepare,
    round_stamp,
    route_rounds,
)
from ..objectives.penalties import primal_value
from ..runs.records import open_scratch_vector
from ..runs.rundir import OnDisk, RunDir, disk_full_is_run_error
from ..schedule.cache import BlockCache
from ..schedule.planner import RCD_PRIMAL, budget_option, fixed_bytes, refuse_or_warn
from ..schedule.planner import plan as plan_memory
from ..schedule.sampling import (
    GAP_BASED,
    PER_STEP,
    WORKING_SET,
    block_counts,
    block_probs,
    block_uniforms,
    draw_in_block,
    gap_weights,
    lazy_draws,
    step_sampling,
    visit_order,
)
from ..schedule.scheduler import Prefetcher
from ..store import layout as L
from .base import StoreSolver
from .certificate import certify, duality_gap, l1_dual_scale
from .rcd import GAP_SLICE, sampling_options
from .rcd_working_set import WorkingSets
from .registry import RCD_PRIMAL_SOLVER
from .row_threads import MIN_ROW_THREADS


class RCDPrimalSolver(WorkingSets, StoreSolver):
    """``--solver rcd-primal``: NSync primal RCD on the column blocks (see the module docstring)."""

    name = RCD_PRIMAL_SOLVER
    #: what it holds (ooc.schedule.planner): O(d) constants and one column block's draws; margins O(n k)
    footprint = RCD_PRIMAL

    def __init__(self, problem, rundir: RunDir, options: dict, progress=None):
        self.pb, self.rd, self.opt, self.progress = problem, rundir, options, progress
        st = problem.store
        self.store = st
        for lay in (L.ROWS, L.COLS):
            if not st.has_layout(lay):
                raise ValueError(f"{st.path}: rcd-primal needs the row and column layouts; convert with --layout both")
        if not problem.loss.is_smooth:
            raise ValueError("rcd-primal needs a smooth loss (squared, logistic, smooth-hinge); "
                             "for the hinge use sdca or rcd-dual")
        if options.get("warm_start"):
            raise ValueError("rcd-primal does not take warm starts (they are dual variables)")
        self.n, self.d = st.n_rows, st.n_cols
        self.bias = float(problem.bias)
        self.dim = self.d + (1 if self.bias > 0 else 0)
        self.k = problem.n_sub
        self.l2, self.l1 = float(problem.penalty.l2), float(problem.penalty.l1)
        if self.l2 <= 0 and self.l1 <= 0:
            raise ValueError("rcd-primal needs l2 > 0 or l1 > 0 (an unregularized problem has no certificate here)")
        self.beta = float(problem.loss.smoothness)
        self.sampling, self.paging, self.floor = sampling_options(options, self.k)
        if self.sampling == WORKING_SET and not (self.l2 <= 0 and self.paging == "shuffled"):
            raise ValueError(f"--sampling {WORKING_SET} is for pure L1 (--l2 0 --l1 > 0) with --paging shuffled "
                             f"(got --l2 {self.l2:g}, --paging {self.paging})")
        self.cb_ptr = st.block_ptr(L.COLS)
        self.ncb = len(self.cb_ptr) - 1
        self.rb_ptr = st.block_ptr(L.ROWS)
        self.nrb = len(self.rb_ptr) - 1
        # sampling "blocks": the column blocks, then the intercept as a virtual one
        self.nblk = self.ncb + (1 if self.bias > 0 else 0)
        #: compute threads (--threads): one-vs-rest classes side by side, or one problem's drawn columns
        self.threads = max(1, int(options.get("threads") or 1))
        #: the split of --memory (ooc.schedule.planner): margins, labels, weights in memory or mapped; the cache
        self.plan = self._plan_memory(options, 1)
        self._col_threads = self.col_threads()
        t = self._col_threads if self._col_threads >= LIGHT_ROUND_THREADS else 1
        if t > 1:
            # the light columns' rounds need the margins in memory and each thread's change of them (18 bytes
            # a row: its float64 change, its two byte stamps, a moved row's place), charged to the budget
            both = self._plan_memory(options, t)
            if both.vectors_in_memory:
                self.plan = both
            else:
                t = 1
        #: threads that share the light columns' rounds (1: those columns take one thread's steps)
        self._light_threads = t
        refuse_or_warn(self.plan, options.get("memory_limit"), int(options.get("memory_held") or 0))
        self.in_memory = self.plan.vectors_in_memory
        self.cache = BlockCache(self.plan.cache_bytes)
        self._alloc_vectors()
        self._column_constants()

    @classmethod
    def fixed_for(cls, store, k: int, dim: int, mix: int = 1, l1: float = 0.0, threads: int = 1,
                  replica: bool = True) -> int:
        """What rcd-primal holds whatever the plan (the footprint's ``O(d)`` and column-block terms) with
        ``threads`` threads on one problem's gap pass, each with its own ``A^T phi'``: the figure the solver
        plans with and ``ooc info`` names (``mix``, ``l1``, ``replica``: the block solvers' arguments)."""
        t = threads if k == 1 and threads >= MIN_ROW_THREADS else 1
        return fixed_bytes(cls.footprint, store, k, dim) + (8 * (dim + 16) * t if t > 1 else 0)

    def _plan_memory(self, options: dict, light_threads: int):
        fixed = self.fixed_for(self.store, self.k, self.dim, threads=self.gap_threads())
        if light_threads > 1:
            fixed += 18 * self.n * light_threads
        return plan_memory(self.footprint, self.store, budget_option(options), k=self.k,
                           vectors=options.get("margin_store"), warn=False, fixed=fixed)

    def gap_threads(self) -> int:
        """Threads that share one problem's gap pass (its rows in ``T`` ranges, each with its own
        ``A^T phi'``, added in order): ``--threads`` for a single problem; else 1 (one-vs-rest
        classes go on the threads instead)."""
        return self.threads if self.k == 1 and self.threads >= MIN_ROW_THREADS else 1

    def col_threads(self) -> int:
        """Threads that share one problem's drawn columns (:mod:`ooc.kernels.rcd_threads`): ``--threads``
        for a single problem with a fixed or per-epoch sampling (the per-step samplings rescore after
        every step, the working sets run Newton steps); else 1. The heavy columns' steps split their rows
        over them; the light columns' rounds need :data:`LIGHT_ROUND_THREADS` of them and the margins in memory
        (else one thread steps them)."""
        ok = (self.k == 1 and self.threads >= MIN_ROW_THREADS and self.sampling not in PER_STEP
              and self.sampling != WORKING_SET)
        return self.threads if ok else 1

    # -- O(n) vectors: margins, labels, weights -------------------------------------------------------------
    def _vec(self, name: str, shape) -> np.ndarray:
        if self.in_memory:
            return np.zeros(shape)
        d = os.path.join(self.rd.state, "primal")
        os.makedirs(d, exist_ok=True)
        # the file ends with the run's identity: it proves it is this run's (ooc.runs.proof.RunProof); its
        # blocks are allocated when made, so a full disk is one line here, not a SIGBUS in a pass
        path = os.path.join(d, f"{name}.npy")
        with disk_full_is_run_error(self.rd.path, path):
            return open_scratch_vector(path, shape, self.rd.identity or "")

    def _alloc_vectors(self) -> None:
        self.Z = self._vec("z", (self.k, self.n))
        self.Y = self._vec("y", (self.k, self.n))
        self.C = self._vec("c", (self.n,))
        if not self.in_memory:
            # mapped pages count in the resident size: the memory governor may write them back and drop them
            self._mapped = _memguard.MappedPages([self.Z, self.Y, self.C])
            _memguard.register(self._mapped)
        pb = self.pb
        for b in range(self.nrb):
            s, e = int(self.rb_ptr[b]), int(self.rb_ptr[b + 1])
            y = pb.block_labels(self.store.read_labels(s, e))
            self.C[s:e] = pb.example_weights(y, self.store.read_weights(s, e))
            for c in range(self.k):
                self.Y[c, s:e] = pb.sub_labels(y, c)

    def _column_constants(self) -> None:
        """``u_j = sum_i c_i x_ij^2`` and ``M_j`` (one pass over the columns), ``B_rad`` for pure L1."""
        self.U = np.zeros(self.dim)
        self.M = np.zeros(self.dim)
        C = np.asarray(self.C)
        for b in range(self.ncb):
            blk = self.store.block(L.COLS, b)
            col_curvature(np.ascontiguousarray(blk.indptr, dtype=np.int64), blk.indices, blk.data, C, self.beta,
                          float(self.n), self.l2, self.U[blk.start:blk.stop], self.M[blk.start:blk.stop])
        if self.bias > 0:
            self.U[self.d] = self.bias ** 2 * float(C.sum())
            self.M[self.d] = self.beta * self.U[self.d] / self.n + self.l2
        # Lipschitzing radius per problem: P_c(0) / l1 (only used when l2 = 0)
        self.radius = np.zeros(self.k)
        if self.l2 <= 0:
            for c in range(self.k):
                p0 = float(np.dot(C, self.pb.loss.value(np.zeros(self.n), np.asarray(self.Y[c])))) / self.n
                self.radius[c] = p0 / self.l1
        self.l1vec = np.full(self.dim, self.l1)
        if self.bias > 0:
            self.l1vec[self.d] = 0.0
        nnz = np.zeros(self.dim, dtype=np.int64)
        nnz[: self.d] = self.store.col_nnz
        if self.bias > 0:
            nnz[self.d] = self.n
        self.col_nnz = nnz

    def _fixed_weights(self, lo: int, hi: int) -> np.ndarray:
        if self.sampling == "importance":
            if self.l2 > 0:
                return self.M[lo:hi].copy()  # (beta u_j + l2 n) / n: eq. 14
            return np.sqrt(self.U[lo:hi])  # pure L1: B ||a_j|| (adaptive-sampling paper)
        return np.ones(hi - lo)

    def _bounds(self, b: int) -> tuple[int, int]:
        if b == self.ncb:
            return self.d, self.d + 1
        return int(self.cb_ptr[b]), int(self.cb_ptr[b + 1])

    # -- gap pass over the rows --------------------------------------------------------------------------------
    def _gap_pass(self, w: np.ndarray, pool) -> tuple[float, float, np.ndarray, np.ndarray]:
        """Exact ``z = X w``; returns ``(P, D, G, R)`` summed over the problems, ``G`` the coordinate
        gaps, ``R`` the ``(k, dim)`` gradients ``r_j`` of each problem."""
        pb = self.pb
        psum = np.zeros(self.k)
        dsum = np.zeros(self.k)
        t = np.zeros((self.k, self.dim))

        def load(b):
            return self.store.block(L.ROWS, b)

        pf = Prefetcher(range(self.nrb), load, self.cache, lambda blk: blk.nbytes, depth=1,
                        key=lambda b: (L.ROWS, b), pool=pool)
        C = np.asarray(self.C)
        T = self.gap_threads()
        if T > 1 and getattr(self, "_t_parts", None) is None:
            # each thread's row 64 bytes apart from the next one's at least (no cache line written by two)
            self._t_parts = np.zeros((T, self.dim + 8 - self.dim % 8 + 8))[:, : self.dim]
        parts = self._t_parts if T > 1 else None
        if parts is not None:
            parts[...] = 0.0
        for b, blk in pf:
            s, e = blk.start, blk.stop
            indptr = np.ascontiguousarray(blk.indptr, dtype=np.int64)
            if parts is not None:
                # one problem: its rows in T consecutive ranges, each thread with its own A^T phi' (added in order)
                cuts = even_cuts(0, e - s, T)

                def rows(q, indptr=indptr, blk=blk, s=s, cuts=cuts):
                    a, b_ = cuts[q], cuts[q + 1]
                    return primal_gap_rows(pb.loss, indptr[a:b_ + 1], blk.indices, blk.data,
                                           np.asarray(self.Y[0, s + a:s + b_]), C[s + a:s + b_], w[0], self.bias,
                                           np.asarray(self.Z[0, s + a:s + b_]), parts[q])

                for ps, ds in map_threads(rows, range(T), T, work=len(blk.data)):
                    psum[0] += ps
                    dsum[0] += ds
                continue

            def one(c, indptr=indptr, blk=blk, s=s, e=e):  # problem c alone: the same sums whatever the threads
                return primal_gap_rows(pb.loss, indptr, blk.indices, blk.data, np.asarray(self.Y[c, s:e]), C[s:e],
                                       w[c], self.bias, np.asarray(self.Z[c, s:e]), t[c])

            for c, (ps, ds) in enumerate(map_threads(one, range(self.k), self.threads, work=self.k * len(blk.data))):
                psum[c] += ps
                dsum[c] += ds
        if parts is not None:
            for q in range(T):
                t[0] += parts[q]
        G = np.zeros(self.dim)
        R = t
        R /= self.n  # in place: the same numbers as t / n, one (k, dim) array fewer
        pens, conjs, others = [], [], []
        for c in range(self.k):
            r = R[c]
            wc = w[c]
            # elementwise in slices, the conjugate's terms h summed a slice at a time: no O(d) temporary
            # (each is 128 MiB at 2**24 features, outside the memory plan: pure L1 on a 2**24-wide store
            # went 1.23x over the --memory named)
            hsum = 0.0
            for lo in range(0, self.dim, GAP_SLICE):
                sl = slice(lo, lo + GAP_SLICE)
                ex = np.maximum(np.abs(r[sl]) - self.l1vec[sl], 0.0)
                h = ex * ex / (2.0 * self.l2) if self.l2 > 0 else self.radius[c] * ex
                hsum += float(h.sum())
                G[sl] += h + self.l1vec[sl] * np.abs(wc[sl]) + 0.5 * self.l2 * wc[sl] * wc[sl] + wc[sl] * r[sl]
            pens.append(primal_value(pb.penalty, wc, self.bias))
            conjs.append(hsum)
            if self.l2 <= 0:
                # both dual points are feasible: the better bound certifies (the rescaled one is
                # tight near the optimum; the Lipschitzing one is never worse at w = 0)
                others.append(self._rescaled_dual(c, r))
        P, D, _ = certify(psum, dsum, self.n, pens, conjs, other_duals=others if self.l2 <= 0 else None)
        return P, D, G, R

    def _prox_scores(self, R: np.ndarray) -> np.ndarray:
        r"""``gap-per-epoch``'s weights on pure L1: ``sqrt(M_j) |S(w_j - r_j / M_j, l1_j / M_j) - w_j|``
        summed over the problems, the per-step samplings' score (:func:`ooc.kernels.rcd.prox_residual`
        times ``||a_j||``) at the epoch's start.

        The coordinate gap ``G_j`` holds ``B (|r_j| - l1)_+`` with the large Lipschitzing radius
        ``B``: near the optimum, where every support coordinate has ``|r_j| = l1``, the few that
        overshoot by rounding take nearly all the weight and the others starve. Measured on
        ``scripts/bench_sampling.py --wall``'s Lasso (20000 x 500, tol 1e-6): 28 epochs and the time
        of importance sampling with ``G_j``, 8 epochs and 0.35x its time with this score
        (``M_j |step|^2``, the step's guaranteed decrease, was too peaked: 52 epochs).

        Parameters
        ----------
        R : ndarray, shape (k, dim)
            The gradients ``r_j`` of each problem at ``w`` (:meth:`_gap_pass`).
        """
        M = np.asarray(self.M, dtype=np.float64)
        live = M > 0  # an empty column never moves
        safe = np.where(live, M, 1.0)
        out = np.zeros(self.dim)
        for c in range(self.k):
            wc = self.w[c]
            z = wc - R[c] / safe
            step = np.abs(np.sign(z) * np.maximum(np.abs(z) - self.l1vec / safe, 0.0) - wc)
            out += np.where(live, np.sqrt(safe) * step, 0.0)
        return out

    def _rescaled_dual(self, c: int, r: np.ndarray) -> float:
        r"""Pure L1: ``D`` at the dual point ``alpha = -s c phi'(z)`` rescaled into the feasible set.

        ``X^T alpha / n = -s r``; ``s = min(1, l1 / ||r_features||_inf)`` makes
        ``||s r||_inf <= l1``, where the conjugate of ``l1 ||.||_1`` is 0, so
        ``D = -1/n sum_i c_i phi*(s phi'(z_i))`` (celer, skglm, gap-safe screening). It goes to
        the optimum's dual as ``w`` does (the plain ``B_rad (|r| - l1)_+`` bound only as fast as
        ``(|r_j| - l1)_+`` times the large radius ``P(0) / l1``). The unpenalised intercept keeps
        the Lipschitzing term ``B_rad |s r_B|``.
        """
        rmax = max(float(r[: self.d].max()), -float(r[: self.d].min())) if self.d else 0.0  # no |r| temporary
        s = l1_dual_scale(rmax, self.l1)
        d = scaled_dual_loss(self.pb.loss, np.asarray(self.Z[c]), np.asarray(self.Y[c]), np.asarray(self.C), s)
        d /= self.n
        if self.bias > 0:
            d -= float(self.radius[c]) * abs(s * float(r[self.d]))
        return d

    # -- one block of updates -------------------------------------------------------------------------------------
    def _update_block(self, b: int, blk, m: int, epoch: int, w: np.ndarray, G: np.ndarray) -> int:
        pb = self.pb
        lo, hi = self._bounds(b)
        us = block_uniforms(m, int(self.opt["seed"]), epoch, b)
        C = np.asarray(self.C)
        if blk is None:  # the intercept
            for c in range(self.k):
                primal_bias_steps(pb.loss, np.asarray(self.Y[c]), C, np.asarray(self.Z[c]), w[c], self.bias,
                                  float(self.M[self.d]), self.l2, float(self.n), m)
            return m * self.n
        indptr = np.ascontiguousarray(blk.indptr, dtype=np.int64)
        if self.sampling in PER_STEP:
            # per-step samplings: O(log m) per step (ooc.kernels.rcd_lazy)
            return int(primal_lazy_pass(pb.loss, Rows(indptr, blk.indices, blk.data), lo, Labels(np.asarray(self.Y[0]), C),
                                        np.asarray(self.Z[0]), w[0], self.M[lo:hi], np.sqrt(self.U[lo:hi]),
                                        Reg(self.l2, self.l1, float(self.n), float(self.bias)), float(self.radius[0]),
                                        step_sampling(self.sampling), lazy_draws(us, hi - lo, self.floor)))
        if self.sampling == "gap-per-epoch":
            weights = gap_weights(G[lo:hi], self.floor)
        else:
            weights = self._fixed_weights(lo, hi)
        draws = draw_in_block(weights, us)
        work = self.k * int(self.col_nnz[lo + draws].sum())
        cols = Rows(indptr, blk.indices, blk.data)
        reg = Reg(self.l2, self.l1, float(self.n), float(self.bias))
        if self._col_threads > 1:
            self._threaded_steps(cols, lo, draws, w[0], reg, work)
            return work

        def one(c):  # problem c alone (its own margins and coefficients): the same whatever the threads
            primal_cd_pass(pb.loss, cols, lo, Labels(np.asarray(self.Y[c]), C), np.asarray(self.Z[c]), w[c], draws,
                           self.M[lo:hi], reg)

        map_threads(one, range(self.k), self.threads, work=work)
        return work

    def _threaded_steps(self, cols: Rows, lo: int, draws: np.ndarray, w: np.ndarray, reg: Reg, work: int) -> None:
        """One problem's draws of a column block on :meth:`col_threads` threads (:mod:`ooc.kernels.rcd_threads`).

        The draws are taken in order: a heavy column's step (``HEAVY_NNZ`` nonzeros or more) on its own,
        its rows over the threads; the light draws between two heavy ones in rounds, each thread
        stepping its columns against its own change of the margins, with each row's curvature times
        the threads that touch it. The per-thread arrays are clean again at the end: a checkpoint
        between blocks holds none of it.
        """
        T = self._col_threads
        if self._light_threads > 1 and getattr(self, "_rounds", None) is None:
            self._rounds = RoundArrays.zeros(T, self.n)
            self._round = 0
        ip = cols.indptr
        nnz = ip[draws + 1] - ip[draws]
        heavy = np.flatnonzero(nnz >= HEAVY_NNZ)
        # below MIN_THREAD_WORK a phase runs in the caller: the same numbers, without the hand-offs
        self._phase_threads = 1 if work // max(len(heavy) + 1, 1) < MIN_THREAD_WORK else T
        scratch = (np.zeros(len(ip) - 1, dtype=np.int32), np.full(len(ip) - 1, -1, dtype=np.int64))
        q = 0
        for h in list(heavy) + [len(draws)]:
            if h > q and self._light_threads > 1:
                self._light_rounds(cols, lo, draws[q:h], w, reg, scratch)
            elif h > q:
                primal_cd_pass(self.pb.loss, cols, lo, Labels(np.asarray(self.Y[0]), np.asarray(self.C)),
                               np.asarray(self.Z[0]), w, draws[q:h], self.M[lo:lo + len(ip) - 1], reg)
            if h < len(draws):
                self._heavy_step(cols, lo, int(draws[h]), w)
            q = h + 1

    def _light_rounds(self, cols: Rows, lo: int, draws: np.ndarray, w: np.ndarray, reg: Reg, scratch) -> None:
        T = self._col_threads
        arrays = self._rounds
        routed = np.empty_like(draws)
        ptr = np.zeros((len(draws) + 1) * T + 1, dtype=np.int64)
        rounds = route_rounds(cols.indptr, draws, T, ROUND_NNZ, routed, ptr, *scratch)
        labels = Labels(np.asarray(self.Y[0]), np.asarray(self.C))
        z = np.asarray(self.Z[0])
        n_moved = np.zeros(T, dtype=np.int64)
        rows = even_cuts(0, self.n, T)  # each thread adds the changes of its range of z
        for q in range(rounds):
            self._round += 1
            r8 = round_stamp(self._round)
            if r8 == 1:  # the byte stamps wrapped: older marks must not pass for this round's
                arrays.marks[...] = 0
                arrays.listed[...] = 0
            part = [routed[ptr[q * T + t]:ptr[q * T + t + 1]] for t in range(T)]

            def prepare(t, part=part, r8=r8):
                round_prepare(cols, arrays, t, int(n_moved[t]), part[t], r8)

            def steps(t, part=part, r8=r8):
                n_moved[t] = owned_cd_steps(self.pb.loss, cols, lo, labels, z, w, part[t], self.beta, reg, arrays, t, r8)

            def combine(t, r8=r8):
                round_combine(arrays, n_moved, z, r8, rows[t], rows[t + 1])

            for phase in (prepare, steps, combine):
                map_threads(phase, range(T), self._phase_threads)
        for t in range(T):
            round_prepare(cols, arrays, t, int(n_moved[t]), routed[:0], 0)

    def _heavy_step(self, cols: Rows, lo: int, jl: int, w: np.ndarray) -> None:
        """NSync's step on one heavy column, its nonzeros cut into ``T`` ranges (sums added in order)."""
        j = lo + jl
        mj = float(self.M[j])
        if not mj > 0.0:
            return
        T = self._col_threads
        cuts = even_cuts(int(cols.indptr[jl]), int(cols.indptr[jl + 1]), T)
        labels = Labels(np.asarray(self.Y[0]), np.asarray(self.C))
        z = np.asarray(self.Z[0])
        parts = map_threads(lambda t: grad_sum(self.pb.loss, cols, labels, z, cuts[t], cuts[t + 1]), range(T),
                            self._phase_threads)
        g = 0.0
        for part in parts:
            g += part
        wn = prox_coord(w[j], g / self.n, mj, self.l2, self.l1)
        d = float(wn - w[j])
        if d == 0.0:
            return
        w[j] = wn
        map_threads(lambda t: move_margins(cols, d, z, cuts[t], cuts[t + 1]), range(T), self._phase_threads)

    def _plan(self, epoch: int, G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Block counts of the epoch and the visiting order (blocks with updates only)."""
        base = np.zeros(self.nblk)
        mass = np.zeros(self.nblk)
        for b in range(self.nblk):
            lo, hi = self._bounds(b)
            base[b] = self._fixed_weights(lo, hi).sum() if self.sampling in ("uniform", "importance") else hi - lo
            mass[b] = np.maximum(G[lo:hi], 0.0).sum()
        use_mass = self.paging == "gap" or self.sampling in GAP_BASED
        p = block_probs(base, mass if use_mass else None, self.floor if self.nblk > 1 else 0.0)
        counts = block_counts(p, self.dim, int(self.opt["seed"]), epoch)
        order = visit_order(self.nblk, int(self.opt["seed"]), epoch)
        return counts, order[counts[order] > 0]

    # -- the engine's protocol (ooc.engine): certify, then update -------------------------------------------------
    def fresh(self) -> None:
        self.w = np.zeros((self.k, self.dim))
        self.G = np.zeros(self.dim)
        self.counts = np.zeros(self.nblk, dtype=np.int64)
        self.order = np.zeros(0, dtype=np.int64)
        self.pos, self.updates, self.work, self.cd_seconds = 0, 0, 0, 0.0
        self.ws_size, self.inner_epochs = 0, 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ooc-prefetch")

    def restore(self, arrays: dict, meta: dict) -> None:
        self.fresh()
        self.w = np.array(arrays["w"])
        self.pos = int(meta["position"])
        self.updates, self.work, self.cd_seconds = int(meta["updates"]), int(meta["work"]), float(meta["cd_seconds"])
        self.ws_size, self.inner_epochs = int(meta.get("ws_size", 0)), int(meta.get("inner_epochs", 0))
        if self.pos > 0:
            self.G, self.counts, self.order = np.array(arrays["G"]), np.array(arrays["counts"]), np.array(arrays["order"])
            self.Z[...] = arrays["z"]  # in the checkpoint: with the rest, or memory-mapped (OnDisk)

    def checkpoint_state(self) -> tuple[dict, dict, bool]:
        meta = {"position": self.pos, "updates": self.updates, "work": self.work, "cd_seconds": self.cd_seconds,
                "ws_size": self.ws_size, "inner_epochs": self.inner_epochs}
        arrays = {"w": self.w}
        if self.pos > 0:  # inside an epoch: its plan, the gaps it was drawn from, the margins
            arrays.update({"G": self.G, "counts": self.counts, "order": self.order})
            # margins that live in a file are saved as a file of their own in the checkpoint
            arrays["z"] = self.Z if self.in_memory else OnDisk(self.Z)
        return arrays, meta, False

    def at_epoch_start(self) -> bool:
        return self.pos == 0

    def nnz_w(self) -> int:
        return int(np.count_nonzero(self.w[:, : self.d]))

    def bytes_read(self) -> int:
        return self.cache.bytes_read

    def cache_hit_rate(self) -> float:
        return self.cache.hit_rate

    def result(self) -> dict:
        return {"w": self.w.copy()}

    def close(self) -> None:
        if getattr(self, "_pool", None) is not None:
            # reads queued but not started are dropped; a running one ends on its own (it waits for nothing)
            self._pool.shutdown(wait=True, cancel_futures=True)

    def next_epoch(self, epoch: int) -> None:
        self.pos = 0

    def epoch(self, ctx) -> None:
        """The gap pass certifies ``w``; unless the run stops there, the epoch's coordinate updates."""
        e = ctx.epoch
        if self.pos == 0:
            t0 = time.perf_counter()
            P, D, self.G, R = self._gap_pass(self.w, self._pool)
            fields = {"gap_seconds": time.perf_counter() - t0, "cd_seconds": self.cd_seconds, "updates": self.updates,
                      "work": self.work, "sampling": self.sampling, "paging": self.paging}
            if self.l2 <= 0:
                fields["radius"] = float(self.radius.max())
            if self.sampling == WORKING_SET:
                fields.update(ws_size=self.ws_size, inner_epochs=self.inner_epochs)
            if ctx.record(P, D, fields):
                return
            if self.sampling == WORKING_SET:
                t0 = time.perf_counter()
                self._ws_epoch(R, duality_gap(P, D))  # the gap record() judged
                self.cd_seconds += time.perf_counter() - t0
                return
            if self.l2 <= 0 and self.sampling == "gap-per-epoch":
                self.G = self._prox_scores(R)  # pure L1: the epoch's weights (see _prox_scores)
            self.counts, self.order = self._plan(e, self.G)
        order = self.order
        pf = Prefetcher([b for b in order[self.pos:] if b < self.ncb], lambda b: self.store.block(L.COLS, b),
                        self.cache, lambda blk: blk.nbytes, depth=1, key=lambda b: (L.COLS, b), pool=self._pool)
        # closed on every exit (a checkpoint that fails in tick, Ctrl-C): the read in flight is waited
        # for here, not whenever the traceback that would hold the iterator is dropped
        with contextlib.closing(iter(pf)) as it:
            while self.pos < len(order):
                b = int(order[self.pos])
                blk = None if b == self.ncb else next(it)[1]
                t0 = time.perf_counter()
                self.work += self._update_block(b, blk, int(self.counts[b]), e, self.w, self.G)
                self.cd_seconds += time.perf_counter() - t0
                self.updates += int(self.counts[b])
                self.pos += 1
                if self.pos < len(order):
                    ctx.tick(self.pos / len(order))
