"""Accelerated Prox-SDCA (Shalev-Shwartz & Zhang, Fig. 2) over row blocks.

The outer loop adds ``kappa/2 ||w - y||^2`` around a moving center ``y`` so each
inner problem has condition number ``n`` (``lambda~ = l2 + kappa = R^2/(gamma n)``),
and moves the center with momentum ``beta``::

    y(t) = w(t) + beta (w(t) - w(t-1)),   kappa = R^2/(gamma n) - l2,
    eta = sqrt(mu / (mu + kappa)), mu = l2/2,  beta = (1 - eta)/(1 + eta)

The inner problems are solved by the same Prox-SDCA kernel as ``sdca``, on the
shifted dual point ``v~ = kappa/lambda~ y + 1/(lambda~ n) sum_i a_i x_i`` with
``l2 = lambda~`` (see :mod:`ooc.objectives.accel`), warm-started from the
previous duals, out of core exactly like ``sdca``.

Inner stopping: the paper's practical variant (its Remark 1) is the default:
a fixed number of inner passes per outer iteration (``inner_passes``, 5 in the
paper's experiments; ours defaults to 1 epoch, which moves the center every pass
and worked best on our benchmarks) without checking the inner gap. Whatever the
variant, the run stops on the *original* problem's duality gap: every pass
certifies ``P(w) - D(alpha)`` with ``w`` the inner iterate and ``D`` the plain
dual of the current duals (feasible for both problems), so "converged" means the
same as for ``sdca``.

The plain dual point ``v = 1/(l2 n) sum_i a_i x_i`` of the certified duals is summed
from the duals themselves, block by block, in the pass that certifies them (one
sparse ``axpy`` per row beside the primal loss's dot product), never recovered from
the shifted point as ``(lambda~ v~ - kappa y) / l2``: that subtraction multiplies
the rounding ``v~`` carries from its many small updates by ``lambda~ / l2`` (1e6 on
unscaled features with ``l2 = 1e-2``), and the dual it gave was above the optimum,
a negative gap certifying coefficients 7e-9 (relative) above it (breast cancer,
unscaled, ``--tol 1e-12``).

When ``R^2/(gamma lambda) <= 10 n`` acceleration cannot help: the solver runs
plain Prox-SDCA and says so in every history line (``accelerated: false``).

Momentum: Catalyst's sequence (Lin, Mairal & Harchaoui 2015, Alg. 1, with ``q = mu / (mu +
kappa) = eta^2``)::

    alpha_t^2 = (1 - alpha_t) alpha_(t-1)^2 + q alpha_t,
    beta_t = alpha_(t-1) (1 - alpha_(t-1)) / (alpha_(t-1)^2 + alpha_t),   alpha_0 = ALPHA_START

which tends to Fig. 2's constant ``beta = (1 - eta)/(1 + eta)`` (its fixed point is ``alpha =
eta``) but starts like Nesterov's ``(t - 1)/(t + 2)``: the rate is the better of the linear
``(1 - eta)^t`` and ``O(1/t^2)`` (Nesterov's constant-step scheme with ``gamma_0 >= mu``), so a
tiny ``mu`` (a tiny ``l2``; pure L1's added L2) no longer means ``beta ~ 1`` from the first
outer step, which oscillated and stalled. With inexact inner problems (one pass), momentum
can still point uphill: the outer step restarts it (gradient restart of O'Donoghue & Candes
2015, per problem) when ``<y(t-1) - w(t), w(t) - w(t-1)> > 0``, ``kappa (y(t-1) - w(t))``
being the gradient of the Moreau envelope the outer loop minimises: the next center is
``w(t)`` and the sequence starts again.

Smooth losses only (the registry refuses the hinge: ``--loss hinge`` trains with ``sdca``).
The paper's Sec. 3.3 smoothing (updates on a smooth hinge of parameter ``G``, the hinge's own
gap certified) was slower than ``sdca`` on the hinge in every measurement: passes to a
certified gap on a 2000 x 200 set (``l2``, ``tol``: sdca / acc-sdca) 1e-2, 1e-4: 5 / 119;
1e-3, 1e-4 with ``G = 1e-2``: 16 / 45; 1e-3, 1e-6: 89 / not in 400; 1e-4, 1e-4: 113 / not in
400. With ``G = tol`` the inner problems are prox steps of weight ``kappa = R^2/(G n)``, far
above ``l2``: ``1/eta = sqrt(2 R^2 / (G l2 n))`` outer passes per e-fold (7000 at ``n = 400``,
``l2 = 1e-4``, ``G = 1e-6``), and the hinge gap of their duals grew before it fell.
"""

from __future__ import annotations

import numpy as np

from ..kernels.accel import momentum_into, recenter_v, shift_v
from ..kernels.args import Labels, Reg, Rows
from ..kernels.sdca import block_accumulate_v, rows_accumulate_v, sdca_pass
from ..objectives.accel import accel_params
from ..objectives.penalties import conj_value
from .base import BlockLoopSolver, TrainBlock
from .registry import ACC_SDCA_SOLVER

#: the first ``alpha`` of the momentum sequence (Catalyst's choice for mu = 0, (sqrt 5 - 1)/2)
ALPHA_START = (5.0 ** 0.5 - 1.0) / 2.0


def next_alpha(alpha: float, q: float) -> float:
    """The root in (0, 1) of ``a^2 = (1 - a) alpha^2 + q a`` (Catalyst's momentum sequence)."""
    b = alpha * alpha - q
    return 0.5 * (-b + (b * b + 4.0 * alpha * alpha) ** 0.5)


class AccSDCASolver(BlockLoopSolver):
    """``--solver acc-sdca``."""

    name = ACC_SDCA_SOLVER
    threads_one_problem = True
    resident_ok = True

    def __init__(self, problem, rundir, options, progress=None):
        # the inner problem first: the memory plan (in the base class) asks step_l2 whether one
        # problem's rows go over the threads, which decides the replicas it holds
        st = problem.store
        r2 = float(st.info()["R"]) ** 2 + (problem.bias ** 2 if problem.bias > 0 else 0.0)
        if not problem.loss.is_smooth:  # (the registry refuses it first: SolverSpec.smooth_loss)
            raise ValueError("acc-sdca needs a smooth loss; the hinge trains with sdca")
        gamma = 1.0 / float(problem.loss.smoothness)
        self.params = accel_params(r2, gamma, float(problem.penalty.l2), int(st.n_rows))
        self.inner_passes = int(options.get("inner_passes") or 1)
        self.l2_inner = float(self.params.l2_inner)
        super().__init__(problem, rundir, options, progress)

    #: w, v, w_prev, and the outer loop's center, w(t-1) and the plain dual point of the pass's duals
    state_vectors = 6

    # -- state -----------------------------------------------------------------------------------------
    def fresh_state(self) -> dict:
        state = super().fresh_state()  # plain v = 1/(l2 n) sum a_i x_i (zeros unless warm-started)
        v, w = state["v"], state["w"]
        zero = np.zeros_like(v)
        p = self.params
        for c in range(self.k):
            # enter the shifted problem around the center y(1) = 0
            shift_v(v[c], w[c], float(self.pb.penalty.l2) / self.l2_inner, p.kappa / self.l2_inner, zero[c],
                    float(self.pb.penalty.l1) / self.l2_inner, float(self.pb.bias))
        state["w_prev"] = w.copy()
        state["center"] = zero
        state["w_last"] = w.copy()      # w(t-1) for the momentum
        state["v_dual"] = np.zeros_like(v)  # 1/(l2 n) X^T alpha of the pass's duals, summed in the pass
        state["outer"] = np.array([1, 0], dtype=np.int64)  # t, inner passes done in this outer iteration
        state["accel_alpha"] = np.full(self.k, ALPHA_START)  # each problem's alpha_(t-1) (restarted apart)
        state["accel_restarts"] = np.zeros(self.k, dtype=np.int64)
        return state

    def pass_start(self, w, v):
        self.extra["v_dual"][:] = 0.0

    def gap_terms(self, blk: TrainBlock, alpha, w_state, psum, dsum) -> None:
        super().gap_terms(blk, alpha, w_state, psum, dsum)
        scale, bias, acc = 1.0 / (float(self.pb.penalty.l2) * self.n), float(self.pb.bias), self.extra["v_dual"]
        if blk.rows is None:
            self.over_classes(lambda c: block_accumulate_v(blk.indptr, blk.indices, blk.data,
                                                           np.ascontiguousarray(alpha[c]), acc[c], scale, bias), blk)
        else:  # every row held in place: alpha is every row's duals, the group's are blk.rows
            self.over_classes(lambda c: rows_accumulate_v(blk.indptr, blk.indices, blk.data, alpha[c], acc[c], scale,
                                                          bias, blk.rows), blk)

    def epoch_done(self, epochs, w, v):
        if not self.params.accelerate:
            return
        outer = self.extra["outer"]
        outer[1] += 1
        if outer[1] < self.inner_passes:
            return
        # outer step: y(t) = w(t) + beta_t (w(t) - w(t-1)); move v~ with the center
        center, w_last = self.extra["center"], self.extra["w_last"]
        new_center = np.empty_like(center)
        for c in range(self.k):
            momentum_into(w[c], w_last[c], self._beta(c, w[c], w_last[c], center[c]), new_center[c])
            np.copyto(w_last[c], w[c])
            recenter_v(v[c], w[c], self.params.kappa / self.l2_inner, center[c], new_center[c],
                       float(self.pb.penalty.l1) / self.l2_inner, float(self.pb.bias))
        np.copyto(center, new_center)
        outer[0] += 1
        outer[1] = 0

    def _beta(self, c: int, w, w_last, center) -> float:
        """Problem ``c``'s momentum for this outer step (module docstring), advancing its sequence."""
        alpha = self.extra["accel_alpha"]
        # the outer problem's gradient at the last center is kappa (y(t-1) - w(t)): momentum along it is uphill
        if float(np.dot(center - w, w - w_last)) > 0.0:
            alpha[c] = ALPHA_START
            self.extra["accel_restarts"][c] += 1
            return 0.0
        a = float(alpha[c])
        alpha[c] = next_alpha(a, self.params.eta ** 2)
        return a * (1.0 - a) / (a * a + float(alpha[c]))

    def history_extra(self) -> dict:
        extra = {"accelerated": bool(self.params.accelerate), "outer": int(self.extra["outer"][0]),
                 "kappa": self.params.kappa}
        if "accel_restarts" in self.extra:
            extra["restarts"] = int(self.extra["accel_restarts"].sum())
        return extra

    def _v_plain(self, c):
        # the plain dual point of the pass's duals, complete once the pass has seen every block
        return self.extra["v_dual"][c]

    def step_l2(self) -> float:
        return self.l2_inner

    def dual_penalty(self, c, w_state):
        return conj_value(self.pb.penalty, self._v_plain(c), self.pb.bias)

    def dual_sup(self, c, w_state):
        # ||X^T alpha / n||_inf = l2 ||v||_inf of the plain dual point (w_state is the inner problem's)
        v = self._v_plain(c)
        return float(self.pb.penalty.l2) * (float(np.max(np.abs(v))) if v.size else 0.0)

    # -- the inner Prox-SDCA step ------------------------------------------------------------------------
    def update_block(self, blk: TrainBlock, alpha, epoch, w, v) -> None:
        pb = self.pb
        order = self.visit_order(blk, epoch)
        rows = Rows(blk.indptr, blk.indices, blk.data)
        reg = Reg(self.l2_inner, float(pb.penalty.l1), float(self.n), float(pb.bias))
        if self.one_problem_threads() > 1:
            # one problem: the rows of each mini-batch over the threads (CoCoA+ inside the node)
            self.row_pass().pass_group(pb.loss, rows, Labels(pb.sub_labels(blk.y, 0), blk.c), alpha[0], order,
                                       v[0], w[0], reg, w[0, :0])
            return
        # one-vs-rest classes on --threads threads: each touches only its own duals, v and w
        self.over_classes(lambda c: sdca_pass(pb.loss, rows, Labels(pb.sub_labels(blk.y, c), blk.c), alpha[c],
                                              order, v[c], w[c], reg), blk)
