r"""Randomized coordinate descent on the dual (``rcd-dual``, Quartz) and on the primal
(``rcd-primal``, NSync), with the samplings of :mod:`ooc.schedule.sampling`, and the ``auto`` rule.

Problem (``docs/training.rst``), ``X`` is ``n x d`` with rows = examples (the papers' ``X`` is ``d x n``)::

    P(w) = 1/n sum_i c_i phi(x_i . w, y_i) + l2/2 ||w||^2 + l1 ||w||_1

``rcd-dual`` (Csiba & Richtarik, Alg. 2 = Quartz with a serial sampling, ESO ``v_i = ||x_i||^2``)
    Row layout. A drawn example ``i`` moves by the maximiser of
    ``-c_i phi*(-(a_i+h)/c_i) - h x_i.w - ||x_i||^2 h^2 / (2 l2 n)``
    (:func:`ooc.objectives.losses.dual_step`: closed form for squared and (smooth) hinge), then
    ``v += h x_i / (l2 n)``, ``w = soft_threshold(v, l1/l2)``. For the logistic loss with
    uniform or importance sampling it takes the paper's step-size variant (Sec. 7, from
    Quartz): ``a_i <- a_i + eta_i (-c_i phi'(x_i.w) - a_i)`` with ``eta_i = theta / q_i`` and
    ``theta = min_l q_l l2 n / (c_l beta ||x_l||^2 + l2 n)``; under importance sampling
    ``eta_i = l2 n / (c_i beta ||x_i||^2 + l2 n)``, under uniform the smallest of these.
    (The paper prints ``Delta = eta (phi' + a)`` with ``eta = theta``: the sign is wrong for its
    own convention ``w = X a / (lambda n)``, where ``a* = -phi'(z*)``, and the step of Quartz
    is ``theta / q_i``, not ``theta``.) Options ``rcd_step='exact'|'quartz'`` override.
    The duality gap of the state at the start of each epoch is computed fused with the next
    pass (:mod:`ooc.solvers.base`), with the coordinate gaps ``G_i`` of every example.

``rcd-primal`` (Csiba & Richtarik, Alg. 1 = NSync with a serial sampling, ESO ``u_j = ||X_{:j}||^2``)
    Column layout; keeps the margins ``z = X w`` (``(k, n)`` floats, with the labels and
    weights: in memory when they fit in a quarter of ``memory``, otherwise in memory-mapped
    files under ``RUN/state/primal/`` that the OS pages by row range). A drawn feature ``j``
    takes the proximal step ``w_j <- soft_threshold(w_j - g_j / M_j, l1 / M_j)`` with
    ``g_j = 1/n sum_i c_i phi'(z_i) x_ij + l2 w_j`` and ``M_j = (beta u_j + l2 n) / n``
    (``u_j = sum_i c_i x_ij^2``; the paper's ``1/u'_j``, exact minimisation for the squared
    loss), then ``z += (w_j' - w_j) X_{:j}``. Smooth losses only (squared, logistic, smooth
    hinge). The intercept (bias ``B``) is a virtual dense column of value ``B``, sampled like
    the others. Each epoch ends with a pass over the row layout that recomputes ``z = X w``
    exactly (no drift), and certifies the gap of ``w`` against the dual point
    ``a_i = -c_i phi'(z_i)``: ``P(w) - D(a) = sum_j G_j`` with the coordinate gaps
    ``G_j = h_j(r_j) + l1 |w_j| + l2/2 w_j^2 + w_j r_j``, ``r_j = 1/n sum_i c_i phi'(z_i) x_ij``
    and ``h_j`` the conjugate of ``g_j = l1|.| + l2/2 (.)^2``. Pure L1 (``l2 = 0``) uses the
    Lipschitzing trick (Perekrestenko et al. Sec. 4.1, from Duenner et al.): ``g_j`` restricted
    to ``|w_j| <= B_rad = P(0) / l1`` (NSync is monotone, so ``l1 ||w||_1 <= P(w) <= P(0)``
    and no iterate nor the optimum leaves the box), whose conjugate ``B_rad (|r| - l1)_+`` is
    finite: Lasso and L1-logistic get a duality gap. That bound is loose when ``l1`` is
    small (``B_rad`` is huge), so pure L1 also evaluates the dual point rescaled into the
    feasible set (celer, skglm, the gap-safe rules of Fercoq, Gramfort & Salmon):
    ``a_i = -s c_i phi'(z_i)`` with ``s = min(1, l1 / ||r||_inf)``, where the penalty's
    conjugate is 0 and ``D = -1/n sum_i c_i phi*(s phi'(z_i))`` (one more ``O(n)`` loop over
    the margins after the pass; it tends to the optimal dual as ``w`` converges). The larger
    of the two duals certifies. (With ``l2 = 0`` the unpenalised intercept keeps the
    Lipschitzing term with the same radius: the certificate then assumes ``|w_B| <= B_rad``.)

``rcd-primal`` on threads (one problem, a fixed or per-epoch sampling; :mod:`ooc.kernels.rcd_threads`)
    A drawn *heavy* column (``HEAVY_NNZ`` nonzeros or more) takes the exact step with its rows cut
    over the threads; from ``LIGHT_ROUND_THREADS`` threads on, the draws between two heavy ones go
    over the threads in rounds, each row's curvature multiplied by the threads touching it (a step
    safe for every draw); below, one thread steps them. The gap pass splits the rows, each thread
    with its own ``A^T phi'``. One-vs-rest puts the classes on the threads (the same bits).

``rcd-primal --sampling working-set`` (pure L1; ``auto``'s choice for ``--l2 0``)
    Not random: after the gap pass of an epoch (the certificate above, which also gives every
    ``r_j``), the working set is the support of ``w`` and the features with the largest
    ``|r_j| / l1`` (``> 1``: ``w_j = 0`` violates optimality), ``max(100, 2 |support|)`` of
    them (skglm's rule; celer ranks by the same dual-feasibility margin). The epoch then
    solves the problem restricted to their columns (and the intercept) until its gap, with its
    own rescaled dual point, is at most 0.3 times the full problem's gap: by proximal Newton
    steps when the loss has a second derivative (squared, logistic, smooth hinge: GLMNET, as
    LIBLINEAR ``-s 6`` and skglm's ProxNewton; the exponentials are computed once per row and
    step, the quadratic model's CD passes need none; prox-CD passes where the line search
    accepts no step), else by cyclic prox-CD passes (a registered loss without ``curv``; the
    gap checked every 5 passes), at most 500 steps or passes. The columns are gathered from
    the column blocks once per epoch and kept while they fit in half the block cache, read
    again for each pass otherwise (same iterates). The working set is a function of ``w``, so
    a resume repeats it exactly. An "epoch" here is one outer iteration: the history gives its
    ``ws_size`` and the ``inner_epochs`` that produced the state.

Epochs and the out-of-core draw
    An epoch is ``n`` coordinate updates (dual) or ``dim`` (primal: ``d`` features, plus the
    intercept). The paper's serial sampling draws each update i.i.d. with probability
    ``p_i``. Out of core the draw is two-level: blocks get probabilities ``P(b) = sum_{i in b}
    p_i``; the number of the epoch's updates that fall in each block is drawn once,
    ``(m_b) ~ Multinomial(n_updates, P)``; blocks are visited in a seeded shuffled order, and
    in block ``b`` (resident) ``m_b`` coordinates are drawn i.i.d. with
    ``P(i | b) = p_i / P(b)`` (sum tree). Each update is therefore coordinate ``i`` with the
    paper's marginal probability ``P(b) P(i | b) = p_i``, and the multiset of an epoch's
    updates has exactly the law of ``n_updates`` i.i.d. draws from ``p`` (a multinomial
    split first by block, then within it); only their order is changed: grouped by block,
    which is what lets one read of a block serve all its updates. Blocks with ``m_b = 0``
    are not read by ``rcd-primal`` (``rcd-dual`` reads every row block each pass: the fused
    gap needs them).
    The adaptive samplings need the state: ``gap-per-epoch`` uses the coordinate gaps of
    the state at the start of the epoch inside a block (exact), and the block gap masses
    for ``P(b)`` (exact for ``rcd-primal``; for ``rcd-dual`` the masses of the previous
    epoch's state, the fused gap computing them only during the pass). The per-step
    samplings (``adaptive``, ``ada-gap``, ...) keep the resident block's scores in sum trees,
    rescore the coordinate just moved after each step and the whole block a few times per
    pass (:mod:`ooc.kernels.rcd_lazy`: ``O(nnz_i + log m)`` per step, not a pass per step),
    mixed with a uniform share ``gap_floor`` so that no coordinate starves; across blocks
    they use the gap masses. With one block (data that fit) the fixed samplings are the
    paper's exactly.

Gap-guided paging (``paging='gap'``)
    Each epoch records the duality-gap mass of every block (``sum G_i`` over its
    coordinates). With ``paging='gap'`` the next epoch draws blocks with
    ``P(b) = (1 - f) mass_b / sum mass + f base_b`` (``f = gap_floor``, default 0.1, ``base``
    the blocks' shares under the fixed sampling: no block starves), and inside a block the
    fixed sampling; the marginal is still ``P(b) P(i | b)``.

The ``auto`` rule (:func:`ooc.solvers.registry.auto_solver`; ``ooc info`` reports ``C_P``, ``C_D``)
    1. Crammer-Singer multiclass -> ``sdca``.
    2. ``l1 > 0`` and ``l2 = 0`` (Lasso, L1-logistic) -> ``rcd-primal`` (the dual is not
       defined; needs a smooth loss), with ``--sampling working-set`` unless another sampling
       or paging was asked for.
    3. Otherwise the face-off (Csiba & Richtarik, Thm. 2 and eq. 15-16): with importance
       sampling the total work is ``T_P = nnz + beta/(l2 n) C_P`` for the primal and
       ``T_D = nnz + beta/(l2 n) C_D`` for the dual, with ``C_P = sum_j ||X_{:j}||_0
       ||X_{:j}||^2`` and ``C_D = sum_i ||x_i||_0 ||x_i||^2`` (our orientation). If
       ``C_P < C_D``, the loss is smooth and the store has its column layout ->
       ``rcd-primal``; else the dual side -> ``sdca`` (Prox-SDCA, dual coordinate ascent
       with shuffled passes, which in practice beats i.i.d. draws), or ``rcd-dual`` when a
       non-uniform ``--sampling`` is asked for.
    4. On the dual side with a smooth loss and uniform sampling, ``acc-sdca`` instead of
       ``sdca`` when the condition number ``R^2 / (gamma l2)`` exceeds ``10 n`` (``gamma``
       = 1 / smoothness: 4 logistic, 1 squared, ``--gamma`` smooth hinge), i.e. when
       ``l2 < R^2 / (10 gamma n)``: that is where the accelerated outer loop runs (below it
       acc-sdca is plain Prox-SDCA) and where it needed several times fewer passes in
       ``scripts/bench_acc_sdca.py``. The hinge stays with ``sdca`` (its smoothed
       acceleration was slower in our measurements).

    ``dgpd`` and ``dspdc`` are never chosen automatically: DGPD pays off when both the primal
    and the dual solutions are sparse (hinge-type loss and a large ``l1``), which store
    statistics cannot tell in advance.

Resume is exact: every random number is a pure function of ``(seed, epoch, block)``, and the
state at a block boundary (``w``, duals or margins, the epoch's block counts and gaps) is in
the checkpoint.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import _memguard
from .._cpu import MIN_THREAD_WORK, even_cuts, map_threads
from ..kernels.args import Labels, Reg, Rows
from ..kernels.rcd import (
    axpy,
    col_curvature,
    dual_block_gaps,
    grad_sum,
    line_loss,
    margin_sums,
    move_margins,
    newton_cd_pass,
    newton_prep,
    newton_weights,
    primal_bias_steps,
    primal_cd_pass,
    primal_gap_rows,
    prox_coord,
    quartz_pass,
    scaled_dual_loss,
    ws_cd_epoch,
    ws_col_grads,
)
from ..kernels.rcd_lazy import dual_lazy_pass, primal_lazy_pass
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
from ..kernels.sdca import sdca_pass
from ..objectives.losses import Logistic, has_curv
from ..objectives.penalties import primal_value, require_l2
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
    normalize_sampling,
    step_sampling,
    visit_order,
)
from ..schedule.scheduler import Prefetcher
from ..store import layout as L
from .base import BlockLoopSolver, StoreSolver, TrainBlock
from .certificate import certify, duality_gap, l1_dual_scale, problem_bound
from .registry import RCD_DUAL_SOLVER, RCD_PRIMAL_SOLVER, acc_sdca_l2_threshold, auto_solver, explain_auto  # noqa: F401  (re-exported)
from .row_threads import MIN_ROW_THREADS

PAGINGS = ("shuffled", "gap")
#: the working-set method's constants (pure L1): the first size, the inner gap asked for (a
#: fraction of the outer one), how often it is checked, and the most inner passes of one outer
#: iteration (skglm's p0 = 10; celer's prune rule). The inner fraction was skglm's 0.3: 0.5 solves the
#: first, too small working sets less far. Measured (scripts/bench_pure_l1.py's stores, tol 1e-6, best of
#: two): hashed text 200k x 2^18 L1-logistic 4.42 s / 6 epochs -> 3.93 s / 5, smooth hinge 5.81 -> 4.80 s,
#: Lasso 1.70 -> 1.71 s; dense 20k x 100 within 0.01 s; 0.7 was slower on the text store
WS_START = 100
WS_INNER = 0.5
WS_CHECK = 5
WS_MAX_INNER = 500
#: proximal Newton (working sets, losses with a second derivative): most CD passes on the quadratic
#: model, the relative decrease of a pass that stops them, line-search halvings, Armijo's sigma
NEWTON_CD = 20
NEWTON_CD_TOL = 1e-3
NEWTON_LS = 30
NEWTON_ARMIJO = 0.01


def _sampling_options(options: dict, k: int) -> tuple[str, str, float]:
    sampling = normalize_sampling(options.get("sampling") or "uniform")
    paging = options.get("paging") or "shuffled"
    if paging not in PAGINGS:
        raise ValueError(f"paging {paging!r}: expected one of {', '.join(PAGINGS)}")
    if sampling in PER_STEP and k > 1:
        raise ValueError(f"--sampling {sampling} recomputes the distribution after every step and is "
                         "implemented for one problem (binary or regression), not one-vs-rest")
    return sampling, paging, float(options.get("gap_floor", 0.1))


# =================================================================================================
# rcd-dual
# =================================================================================================
class RCDDualSolver(BlockLoopSolver):
    """``--solver rcd-dual``: Quartz-style dual RCD on the row blocks (see the module docstring)."""

    name = RCD_DUAL_SOLVER
    threads_one_problem = True

    def __init__(self, problem, rundir, options, progress=None):
        super().__init__(problem, rundir, options, progress)
        require_l2(problem.penalty, "rcd-dual")
        self.sampling, self.paging, self.floor = _sampling_options(options, self.k)
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


# =================================================================================================
# rcd-primal
# =================================================================================================
#: Coordinates at a time of the gap pass's elementwise expressions (their temporaries: O(slice), not O(d)).
GAP_SLICE = 1 << 16


class RCDPrimalSolver(StoreSolver):
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
        self.sampling, self.paging, self.floor = _sampling_options(options, self.k)
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

    # -- working sets (pure L1) --------------------------------------------------------------------------------
    def _working_set(self, R: np.ndarray) -> np.ndarray:
        """The epoch's features, sorted: the support of ``w`` and the features nearest to violating.

        Ranked by ``max_c |r_cj| / l1`` (``> 1``: ``w_j = 0`` is not optimal; celer's
        ``d_j`` without the column norm); the support ranks first. Size ``max(WS_START,
        2 |support|)`` (skglm), at most ``d``. A function of ``w`` only: a resume recomputes it.
        """
        d = self.d
        # one O(d) array (the scores, partitioned in place), the rest a slice at a time: the whole-vector
        # expressions held five O(d) temporaries (|R|, the maximum, -score, argpartition's indices and
        # copy: 640 MiB at 2**24 features, outside the memory plan)
        score = np.empty(d)
        n_support = 0
        for lo in range(0, d, GAP_SLICE):
            part = self._ws_score(R, lo, min(d, lo + GAP_SLICE))
            n_support += int(np.isposinf(part).sum())
            score[lo:lo + len(part)] = part
        size = min(d, max(WS_START, 2 * n_support))
        if size >= d:
            return np.arange(d)
        score.partition(d - size)
        thr = float(score[d - size])
        del score
        # the features scoring above the size-th largest, then those equal to it by index, up to size
        above, tied = [], []
        for lo in range(0, d, GAP_SLICE):
            part = self._ws_score(R, lo, min(d, lo + GAP_SLICE))
            above.append(np.flatnonzero(part > thr) + lo)
            tied.append(np.flatnonzero(part == thr) + lo)
        above = np.concatenate(above)
        ws = np.concatenate([above, np.concatenate(tied)[: size - len(above)]])
        return np.sort(ws)

    def _ws_score(self, R: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """Features ``lo:hi``'s working-set scores ``max_c |r_cj| / l1``, ``inf`` on the support of ``w``."""
        part = np.abs(R[0, lo:hi])
        for c in range(1, R.shape[0]):
            np.maximum(part, np.abs(R[c, lo:hi]), out=part)
        part /= self.l1
        part[np.any(self.w[:, lo:hi] != 0.0, axis=0)] = np.inf
        return part

    def _ws_blocks(self, ws: np.ndarray) -> list:
        """Per column block holding working-set features: ``(b, local columns, global columns, M)``."""
        out = []
        bounds = np.searchsorted(ws, self.cb_ptr)
        for b in range(self.ncb):
            g = ws[bounds[b]:bounds[b + 1]]
            if len(g):
                out.append((b, g - int(self.cb_ptr[b]), g, np.ascontiguousarray(self.M[g])))
        return out

    @staticmethod
    def _gather(blk, local: np.ndarray) -> Rows:
        """The columns ``local`` of a CSC block, as a CSC block of their own."""
        ip = np.asarray(blk.indptr, dtype=np.int64)
        starts = ip[local]
        lens = ip[local + 1] - starts
        indptr = np.zeros(len(local) + 1, dtype=np.int64)
        np.cumsum(lens, out=indptr[1:])
        idx = np.repeat(starts - indptr[:-1], lens) + np.arange(indptr[-1], dtype=np.int64)
        return Rows(indptr, np.ascontiguousarray(blk.indices[idx]), np.ascontiguousarray(blk.data[idx]))

    def _ws_parts(self, blocks: list, resident: list | None):
        """The working set's CSC parts, from memory when they were kept, else read again (same iterates)."""
        if resident is not None:
            yield from resident
            return
        for b, local, g, m in blocks:
            blk = self.cache.get((L.COLS, b), lambda b=b: self.store.block(L.COLS, b), lambda blk: blk.nbytes)
            yield self._gather(blk, local), g, m

    def _ws_gap(self, parts) -> float:
        """The duality gap of the problem restricted to the working set (rescaled dual point)."""
        pb = self.pb
        C = np.asarray(self.C)
        gap = 0.0
        for c in range(self.k):
            z, y = np.asarray(self.Z[c]), np.asarray(self.Y[c])
            rmax = 0.0
            for rows, g, _ in parts:
                r = np.empty(len(g))
                ws_col_grads(pb.loss, rows, Labels(y, C), z, float(self.n), r)
                rmax = max(rmax, float(np.max(np.abs(r))))
            s = l1_dual_scale(rmax, self.l1)
            psum, gsum = margin_sums(pb.loss, z, y, C)
            # the intercept keeps the Lipschitzing term (as _rescaled_dual)
            lip = float(self.radius[c]) * abs(s * self.bias * gsum / self.n) if self.bias > 0 else 0.0
            pc, dc = problem_bound(psum, scaled_dual_loss(pb.loss, z, y, C, s), self.n,
                                   primal_value(pb.penalty, self.w[c], self.bias), lip)
            gap += pc - dc
        return gap

    def _ws_epoch(self, R: np.ndarray, gap: float) -> None:
        r"""One outer iteration of the working-set method (skglm, celer) for pure L1.

        On the working set's columns (and the intercept), until the gap of the problem
        restricted to them is at most ``WS_INNER`` times the full problem's ``gap``: proximal
        Newton steps when the loss has a second derivative (:meth:`_ws_newton`), else cyclic
        prox-CD passes (:meth:`_ws_cd`). The columns stay in memory when they fit in half the
        block cache, and are read again for every pass otherwise: the iterates are the same.
        """
        ws = self._working_set(R)
        blocks = self._ws_blocks(ws)
        nnz = int(self.col_nnz[ws].sum())
        # 16 bytes a nonzero at most (int64 index, float64 value)
        resident = list(self._ws_parts(blocks, None)) if 16 * nnz <= self.cache.budget // 2 else None
        target = WS_INNER * gap
        if has_curv(self.pb.loss):
            inner, passes = 0, 0
            for c in range(self.k):
                i, p = self._ws_newton(c, ws, blocks, resident, target / self.k)
                inner, passes = max(inner, i), passes + p
        else:
            inner = passes = self._ws_cd(blocks, resident, target)
            passes *= self.k
        self.ws_size, self.inner_epochs = len(ws), inner
        self.updates += passes * (len(ws) + (1 if self.bias > 0 else 0))
        self.work += passes * (nnz + (self.n if self.bias > 0 else 0))

    def _ws_cd(self, blocks: list, resident: list | None, target: float) -> int:
        """Cyclic prox-CD passes on the working set (gap checked every ``WS_CHECK``); returns the passes."""
        pb = self.pb
        C = np.asarray(self.C)
        reg = Reg(self.l2, self.l1, float(self.n), float(self.bias))
        inner = 0
        while inner < WS_MAX_INNER:
            moved = 0.0
            for rows, g, m in self._ws_parts(blocks, resident):
                for c in range(self.k):
                    moved += ws_cd_epoch(pb.loss, rows, g, Labels(np.asarray(self.Y[c]), C), np.asarray(self.Z[c]),
                                         self.w[c], m, reg)
            if self.bias > 0:
                for c in range(self.k):
                    primal_bias_steps(pb.loss, np.asarray(self.Y[c]), C, np.asarray(self.Z[c]), self.w[c], self.bias,
                                      float(self.M[self.d]), self.l2, float(self.n), 1)
            inner += 1
            if moved == 0.0:
                break
            if inner % WS_CHECK == 0 and self._ws_gap(list(self._ws_parts(blocks, resident))) <= target:
                break
        return inner

    def _ws_newton(self, c: int, ws: np.ndarray, blocks: list, resident: list | None,
                   target: float) -> tuple[int, int]:
        r"""Proximal Newton steps of problem ``c`` on the working set (GLMNET; LIBLINEAR ``-s 6``).

        Each step: ``g_i = c_i phi'(z_i)``, ``h_i = c_i phi''(z_i)`` (one loop over the rows,
        the only transcendental functions of the step), the working set's ``grad_j`` and
        ``H_jj``; the restricted gap (rescaled dual point, as :meth:`_rescaled_dual`) stops
        the loop at ``target``; else up to ``NEWTON_CD`` cyclic passes minimise the quadratic
        model (:func:`~ooc.kernels.rcd.newton_cd_pass`: a full pass, then passes over the
        nonzeros until they settle, then a full pass again; the intercept a coordinate of it),
        and a backtracking line search (Armijo, Tseng & Yun's descent measure ``Delta``)
        takes ``w += t d``, ``z += t X d``. When it accepts no step (near the optimum the
        objective's change is rounding while the gap, first order in ``w - w*``, is not yet
        within target), ``WS_CHECK`` prox-CD passes on the objective itself follow (monotone
        by construction). Returns ``(steps, CD passes)``.
        """
        pb, n, l1, B = self.pb, self.n, self.l1, self.bias
        C = np.asarray(self.C)
        z, y, w = np.asarray(self.Z[c]), np.asarray(self.Y[c]), self.w[c]
        g, h, xd = np.empty(n), np.empty(n), np.empty(n)
        wt = np.empty(self.dim)
        grads = [np.empty(len(gi)) for _, _, gi, _ in blocks]
        hdiag = [np.empty(len(gi)) for _, _, gi, _ in blocks]
        active = [np.ones(len(gi), dtype=np.uint8) for _, _, gi, _ in blocks]
        steps = passes = 0
        while steps < WS_MAX_INNER:
            psum, gsum = newton_weights(pb.loss, z, y, C, g, h)
            rmax = 0.0
            for q, (rows, _, _) in enumerate(self._ws_parts(blocks, resident)):
                newton_prep(rows, g, h, float(n), grads[q], hdiag[q])
                rmax = max(rmax, float(np.max(np.abs(grads[q]))))
            s = l1_dual_scale(rmax, l1)
            # the restricted problem's certificate (rescaled duals; the intercept's Lipschitzing term)
            lip = float(self.radius[c]) * abs(s * B * gsum / n) if B > 0 else 0.0
            p0, dual = problem_bound(psum, scaled_dual_loss(pb.loss, z, y, C, s), n, l1 * float(np.abs(w[ws]).sum()),
                                     lip)
            if p0 - dual <= target:
                break
            wt[:] = w
            xd[:] = 0.0
            first = 0.0
            full = True
            for it in range(NEWTON_CD):
                moved = 0.0
                for q, (rows, gi, _) in enumerate(self._ws_parts(blocks, resident)):
                    moved += newton_cd_pass(rows, gi, wt, xd, h, grads[q], hdiag[q], w, l1, float(n), active[q], full)
                if B > 0:
                    hb = B * B * float(h.sum()) / n
                    if hb > 0.0:
                        step = -B * (gsum + float(np.dot(h, xd))) / n / hb
                        wt[self.d] += step
                        xd += B * step
                        moved += hb * step * step
                passes += 1
                if it == 0:
                    first = moved
                if moved > NEWTON_CD_TOL * first:
                    full = False  # cycle on the nonzeros
                elif full:
                    break
                else:
                    full = True  # converged on them: one pass over every column says whether it is done
            dws = wt[ws] - w[ws]
            descent = sum(float(np.dot(grads[q], wt[gi] - w[gi])) for q, (_, _, gi, _) in enumerate(blocks))
            db = wt[self.d] - w[self.d] if B > 0 else 0.0
            descent += B * gsum / n * db + l1 * (float(np.abs(wt[ws]).sum()) - float(np.abs(w[ws]).sum()))
            steps += 1
            t = 1.0 if descent < 0.0 else 0.0
            for _ in range(NEWTON_LS if t > 0.0 else 0):
                trial = line_loss(pb.loss, z, xd, y, C, t) / n + l1 * float(np.abs(w[ws] + t * dws).sum())
                if trial <= p0 + NEWTON_ARMIJO * t * descent:
                    break
                t *= 0.5
            else:
                t = 0.0
            if t > 0.0:
                w[ws] += t * dws
                if B > 0:
                    w[self.d] += t * db
                axpy(t, xd, z)
                continue
            # no step the line search can tell from rounding (the objective moves by ~1e-16 of
            # itself near the optimum while the gap, first order in w - w*, is still above
            # target): prox-CD passes on the objective itself, monotone without evaluating it
            reg = Reg(self.l2, l1, float(n), B)
            for _ in range(WS_CHECK):
                for rows, gi, m in self._ws_parts(blocks, resident):
                    ws_cd_epoch(pb.loss, rows, gi, Labels(y, C), z, w, m, reg)
                if B > 0:
                    primal_bias_steps(pb.loss, y, C, z, w, B, float(self.M[self.d]), self.l2, float(n), 1)
                passes += 1
        return steps, passes

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
