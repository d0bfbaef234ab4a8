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

When ``R^2/(gamma lambda) <= 10 n`` acceleration cannot help: the solver runs
plain Prox-SDCA and says so in every history line (``accelerated: false``).

Hinge loss (Lipschitz, not smooth): the paper's Section 3.3 smoothing. The updates use
the smoothed loss ``phi~`` whose conjugate is ``phi* + gamma/2 a^2``, which for the
hinge is exactly the smooth hinge with parameter ``gamma`` (1/gamma-smooth, and
``hinge - gamma/2 <= phi~ <= hinge``). The gap is still the *hinge* problem's: ``P`` is
summed with the hinge and ``D`` with the hinge conjugate at the same duals (feasible for
both: the box is the same, and ``-phi*`` >= ``-phi~*``), so a certified run is certified
for the SVM the user asked for. The smoothed optimum is within ``gamma/2`` (times the
mean example weight) of the hinge optimum, so ``gamma`` (option ``smoothing``, recorded in
the run config and every history line) defaults to ``tol``: the smoothed problem can then
certify the hinge one at half the requested relative gap.
"""

from __future__ import annotations

import numpy as np

from .._cpu import map_threads
from ..kernels.accel import momentum_into, recenter_v, shift_v
from ..kernels.args import Labels, Reg, Rows
from ..kernels.sdca import sdca_pass
from ..objectives.accel import accel_params
from ..objectives.losses import SmoothHinge
from ..objectives.penalties import conj_value
from .base import BlockLoopSolver, TrainBlock


class AccSDCASolver(BlockLoopSolver):
    """``--solver acc-sdca``."""

    name = "acc-sdca"
    threads_one_problem = True
    resident_ok = True

    def __init__(self, problem, rundir, options, progress=None):
        super().__init__(problem, rundir, options, progress)
        st = problem.store
        r2 = float(st.info()["R"]) ** 2 + (problem.bias ** 2 if problem.bias > 0 else 0.0)
        #: the loss of the updates: the problem's, or the smoothed hinge (Sec. 3.3)
        self.smoothing = None
        self.update_loss = problem.loss
        if not problem.loss.is_smooth:
            self.smoothing = float(options.get("smoothing") or options["tol"])
            self.update_loss = SmoothHinge(self.smoothing)
        gamma = 1.0 / float(self.update_loss.smoothness)
        self.params = accel_params(r2, gamma, float(problem.penalty.l2), self.n)
        self.inner_passes = int(options.get("inner_passes") or 1)
        self.l2_inner = float(self.params.l2_inner)

    #: w, v, w_prev, and the outer loop's center, w(t-1) and the pass's v snapshot
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
        state["v_snap"] = v.copy()      # v~ at the start of the current pass (for the plain dual)
        state["outer"] = np.array([1, 0], dtype=np.int64)  # t, inner passes done in this outer iteration
        return state

    def pass_start(self, w, v):
        np.copyto(self.extra["v_snap"], v)

    def epoch_done(self, epochs, w, v):
        if not self.params.accelerate:
            return
        outer = self.extra["outer"]
        outer[1] += 1
        if outer[1] < self.inner_passes:
            return
        # outer step: y(t) = w(t) + beta (w(t) - w(t-1)); move v~ with the center
        center, w_last = self.extra["center"], self.extra["w_last"]
        new_center = np.empty_like(center)
        for c in range(self.k):
            momentum_into(w[c], w_last[c], self.params.beta, new_center[c])
            np.copyto(w_last[c], w[c])
            recenter_v(v[c], w[c], self.params.kappa / self.l2_inner, center[c], new_center[c],
                       float(self.pb.penalty.l1) / self.l2_inner, float(self.pb.bias))
        np.copyto(center, new_center)
        outer[0] += 1
        outer[1] = 0

    def history_extra(self) -> dict:
        extra = {"accelerated": bool(self.params.accelerate), "outer": int(self.extra["outer"][0]),
                 "kappa": self.params.kappa}
        if self.smoothing is not None:
            extra["smoothing"] = self.smoothing
        return extra

    def _v_plain(self, c):
        # the plain dual point of the current duals: v = (lambda~ v~ - kappa y) / l2
        l2 = float(self.pb.penalty.l2)
        return (self.l2_inner * self.extra["v_snap"][c] - self.params.kappa * self.extra["center"][c]) / l2

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
            self.row_pass().pass_group(self.update_loss, rows, Labels(pb.sub_labels(blk.y, 0), blk.c), alpha[0], order,
                                       v[0], w[0], reg, w[0, :0])
            return
        # one-vs-rest classes on --threads threads: each touches only its own duals, v and w
        map_threads(lambda c: sdca_pass(self.update_loss, rows, Labels(pb.sub_labels(blk.y, c), blk.c), alpha[c],
                                        order, v[c], w[c], reg), range(self.k), self.threads)
