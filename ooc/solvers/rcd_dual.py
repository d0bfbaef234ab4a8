"""rcd-dual: randomized coordinate ascent on the dual, one row at a time (the rule in :mod:`ooc.solvers.rcd`)."""

from __future__ import annotations

import math

import numpy as np

from .._cpu import even_cuts, map_threads
from ..kernels.args import Labels, Reg, Rows
from ..kernels.rcd import (
    dual_block_gaps,
    quartz_pass,
)
from ..kernels.rcd_lazy import dual_lazy_pass
from ..kernels.sdca import sdca_pass
from ..objectives.losses import Logistic
from ..objectives.penalties import require_l2
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
)
from ..store import layout as L
from .base import BlockLoopSolver, TrainBlock
from .rcd import sampling_options
from .registry import RCD_DUAL_SOLVER


class RCDDualSolver(BlockLoopSolver):
    """``--solver rcd-dual``: Quartz-style dual RCD on the row blocks (see the module docstring)."""

    name = RCD_DUAL_SOLVER
    threads_one_problem = True

    def __init__(self, problem, rundir, options, progress=None):
        super().__init__(problem, rundir, options, progress)
        require_l2(problem.penalty, "rcd-dual")
        self.sampling, self.paging, self.floor = sampling_options(options, self.k)
        if self.sampling == WORKING_SET:
            raise ValueError(f"--sampling {WORKING_SET} is rcd-primal's (pure L1); rcd-dual samples rows")
        self.beta = float(problem.loss.smoothness)
        self.l2, self.l1 = float(problem.penalty.l2), float(problem.penalty.l1)
        fixed = self.sampling in ("uniform", "importance") and self.paging == "shuffled"
        # one problem's draws go over the threads with the exact (Prox-SDCA) steps of the replicas; the
        # per-step samplings' sum trees change at every step, and the Quartz step is one thread's rule
        self._draws_split = self.sampling not in PER_STEP and options.get("rcd_step") != "quartz"
        split = self.one_problem_threads() > 1
        self.step_rule = options.get("rcd_step") or (
            "quartz" if problem.loss_name == Logistic.name and fixed and not split else "exact")
        if self.step_rule not in ("exact", "quartz"):
            raise ValueError(f"rcd_step {self.step_rule!r}: expected 'exact' or 'quartz'")
        if self.step_rule == "quartz" and not (math.isfinite(self.beta) and fixed):
            raise ValueError("the Quartz step needs a smooth loss and a fixed sampling (uniform or importance, "
                             "shuffled paging): its step theta / q_i depends on the sampling probabilities")
        self._scan_blocks()
        self._gaps = (-1, None)

    def one_problem_threads(self) -> int:
        """:meth:`BlockLoopSolver.one_problem_threads` for a fixed or per-epoch sampling with exact steps;
        1 for the per-step samplings and the Quartz step."""
        return super().one_problem_threads() if self._draws_split else 1

    # -- per-row weights -------------------------------------------------------------------------------
    def _row_sq(self, start: int, stop: int) -> np.ndarray:
        sq = np.asarray(self.store.backend.read(L.ROW_SQNORM, start, stop), dtype=np.float64)
        return sq + (self.pb.bias ** 2 if self.pb.bias > 0 else 0.0)

    def _fixed_weights(self, sq: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Within-block weights of the fixed samplings (module docstring of ooc.schedule.sampling)."""
        if self.sampling == "importance":
            if math.isfinite(self.beta):
                return c * self.beta * sq + self.l2 * self.n  # eq. 14
            return c * np.sqrt(sq)  # hinge: L_i ||x_i|| (adaptive-sampling paper)
        return np.ones(len(sq))

    def _scan_blocks(self) -> None:
        """Block totals of the fixed weights, and max c_i ||x_i||^2 (Quartz's uniform step)."""
        self.base_mass = np.zeros(self.nb)
        cs_max = 0.0
        for b in range(self.nb):
            s, e = int(self.row_ptr[b]), int(self.row_ptr[b + 1])
            sq = self._row_sq(s, e)
            c = self.pb.example_weights(self.pb.block_labels(self.store.read_labels(s, e)), self.store.read_weights(s, e))
            self.base_mass[b] = self._fixed_weights(sq, c).sum()
            if e > s:
                cs_max = max(cs_max, float((c * sq).max()))
        self.cs_max = cs_max

    def _eta(self, sq: np.ndarray, c: np.ndarray) -> np.ndarray:
        ln = self.l2 * self.n
        if self.sampling == "importance":
            return ln / (c * self.beta * sq + ln)
        return np.full(len(sq), ln / (self.beta * self.cs_max + ln))

    # -- state --------------------------------------------------------------------------------------------
    def fresh_state(self) -> dict:
        state = super().fresh_state()
        state.update({"mass_cur": np.zeros(self.nb), "mass_prev": np.zeros(self.nb),
                      "counts": np.zeros(self.nb, dtype=np.int64), "prepared": np.array([-1], dtype=np.int64),
                      "updates": np.zeros(1, dtype=np.int64), "work": np.zeros(1, dtype=np.int64),
                      "at_start": np.zeros(2, dtype=np.int64)})
        return state

    def restore_extra(self, meta: dict) -> None:
        self._epoch = int(meta["epoch"])

    def epoch_done(self, epochs: int, w, v) -> None:
        self._epoch = int(epochs)

    def pass_start(self, w, v) -> None:
        ex = self.extra
        e = self._epoch
        if int(ex["prepared"][0]) == e:  # the loop calls this twice at an epoch boundary
            return
        ex["prepared"][0] = e
        ex["at_start"][:] = (ex["updates"][0], ex["work"][0])  # the state S_e: what it took to get there
        ex["mass_prev"][:] = ex["mass_cur"]
        ex["mass_cur"][:] = 0.0
        gap_blocks = self.paging == "gap" or self.sampling in GAP_BASED
        rows = np.diff(self.row_ptr).astype(np.float64)
        base = self.base_mass if self.sampling in ("uniform", "importance") else rows
        mass = ex["mass_prev"] if gap_blocks and e > 0 else None
        floor = self.floor if self.nb > 1 else 0.0
        p = block_probs(base, mass, floor)
        ex["counts"][:] = block_counts(p, self.n, int(self.opt["seed"]), e)

    def history_extra(self) -> dict:
        ex = getattr(self, "extra", {})
        out = {"sampling": self.sampling, "paging": self.paging, "step_rule": self.step_rule}
        if "updates" in ex:  # to reach the state certified by this line (before this pass's updates)
            out["updates"] = int(ex["at_start"][0])
            out["work"] = int(ex["at_start"][1])  # nonzeros visited by the steps (and per-step rescoring)
        return out

    # -- per block ----------------------------------------------------------------------------------------
    def gap_terms(self, blk: TrainBlock, alpha, w_state, psum, dsum) -> None:
        pb = self.pb
        m = blk.stop - blk.start
        gaps = np.zeros(m)
        T = self.one_problem_threads()  # one problem's rows in T consecutive ranges, their sums added in order
        cuts = even_cuts(0, m, T)
        for c in range(self.k):
            yc, ac = pb.sub_labels(blk.y, c), np.ascontiguousarray(alpha[c])

            def part(t, yc=yc, ac=ac, c=c):
                lo, hi = cuts[t], cuts[t + 1]
                return dual_block_gaps(pb.loss, blk.indptr[lo:hi + 1], blk.indices, blk.data, yc[lo:hi], blk.c[lo:hi],
                                       ac[lo:hi], w_state[c], float(pb.bias), float(self.n), gaps[lo:hi])

            for ps, ds in map_threads(part, range(T), T, work=len(blk.data)):
                psum[c] += ps
                dsum[c] += ds
        group = self._group
        lens = [int(self.row_ptr[b + 1] - self.row_ptr[b]) for b in group]
        for b, part in zip(group, np.split(gaps, np.cumsum(lens)[:-1])):
            self.extra["mass_cur"][b] += float(part.sum())
        self._gaps = (group, gaps)

    def update_block(self, blk: TrainBlock, alpha, epoch: int, w, v) -> None:
        pb = self.pb
        # a group of blocks draws its blocks' updates together from its rows, P(i | group) = p_i / P(group):
        # the same law as block by block (the module docstring)
        group = self._group
        m = int(sum(int(self.extra["counts"][b]) for b in group))
        if m == 0:
            return
        us = block_uniforms(m, int(self.opt["seed"]), epoch, group[0])
        sq = np.concatenate([self._row_sq(int(self.row_ptr[b]), int(self.row_ptr[b + 1])) for b in group])
        args = (float(self.l2), float(self.l1), float(self.n), float(pb.bias))
        if self.sampling in PER_STEP:
            # per-step samplings: O(log m) per step (ooc.kernels.rcd_lazy)
            self.extra["work"][0] += dual_lazy_pass(
                pb.loss, Rows(blk.indptr, blk.indices, blk.data), Labels(pb.sub_labels(blk.y, 0), blk.c), alpha[0], v[0],
                w[0], np.sqrt(sq), Reg(*args), step_sampling(self.sampling), lazy_draws(us, blk.stop - blk.start, self.floor))
        else:
            if self.sampling == "gap-per-epoch":
                g, gaps = self._gaps
                assert g == group
                weights = gap_weights(gaps, self.floor)
            else:
                weights = self._fixed_weights(sq, blk.c)
            draws = draw_in_block(weights, us)
            self.extra["work"][0] += self.k * int((blk.indptr[draws + 1] - blk.indptr[draws]).sum())
            eta = self._eta(sq, blk.c) if self.step_rule == "quartz" else None
            if self.one_problem_threads() > 1:
                # one problem's draws over the threads, each row stepped by the thread owning it (CoCoA+
                # inside the node, sigma' = T, as sdca's passes: ooc.solvers.row_threads)
                self.row_pass().pass_group(pb.loss, Rows(blk.indptr, blk.indices, blk.data),
                                           Labels(pb.sub_labels(blk.y, 0), blk.c), alpha[0], draws, v[0], w[0],
                                           Reg(*args), w[0, :0], owned=True)
                self.extra["updates"][0] += m
                return
            for c in range(self.k):
                yc = pb.sub_labels(blk.y, c)
                if eta is not None:
                    quartz_pass(pb.loss, Rows(blk.indptr, blk.indices, blk.data), Labels(yc, blk.c), alpha[c], draws,
                                eta, v[c], w[c], Reg(*args))
                else:
                    sdca_pass(pb.loss, Rows(blk.indptr, blk.indices, blk.data), Labels(yc, blk.c), alpha[c], draws, v[c],
                              w[c], Reg(*args))
        self.extra["updates"][0] += m
