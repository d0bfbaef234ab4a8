"""Prox-SDCA over row blocks (Shalev-Shwartz & Zhang, Fig. 1, option I).

For each visited row ``i`` with margin ``z = x_i . w``, the dual coordinate moves by
the maximiser of

.. math::

    -c_i \\phi^*\\big(-(a_i+\\delta)/c_i\\big) - z\\,\\delta - \\frac{\\|x_i\\|^2}{2\\lambda n}\\delta^2,

then ``v += delta x_i / (lambda n)`` and ``w = soft_threshold(v, l1/l2)`` on the
touched coordinates (``lambda = l2``). With ``l1 = 0`` this is exact coordinate
ascent on ``D``; with ``l1 > 0`` it maximises the usual quadratic lower bound
of ``D`` (the paper's option I). Rows of a block are visited in a seeded
permutation that depends on ``(seed, epoch, block)`` only.
"""

from __future__ import annotations

from ..kernels.args import Labels, Reg, Rows
from ..kernels.sdca import sdca_pass_gap
from .base import BlockLoopSolver, TrainBlock
from .registry import SDCA_SOLVER


class SDCASolver(BlockLoopSolver):
    """``--solver sdca``."""

    name = SDCA_SOLVER
    threads_one_problem = True
    replica_one_thread = True
    resident_ok = True

    @classmethod
    def held_vectors(cls, l1: float) -> int:
        return super().held_vectors(l1) - (1 if float(l1) == 0.0 else 0)  # v is w (v_is_w)

    def v_is_w(self) -> bool:
        # soft_threshold(v, 0) = v exactly; the bias entry is v too
        return float(self.pb.penalty.l1) == 0.0

    def work_block(self, blk: TrainBlock, alpha, epoch, w, v, w_state, psum, dsum, update) -> None:
        """Gap terms and update in one sweep per class (:func:`ooc.kernels.sdca.sdca_pass_gap`)."""
        if not update:
            return super().work_block(blk, alpha, epoch, w, v, w_state, psum, dsum, update)
        pb = self.pb
        order = self.visit_order(blk, epoch)
        rows = Rows(blk.indptr, blk.indices, blk.data)
        reg = Reg(float(pb.penalty.l2), float(pb.penalty.l1), float(self.n), float(pb.bias))

        if self.replica_pass():
            # one problem: the rows of each mini-batch over the threads (CoCoA+ inside the node), or
            # one thread's pass on a replica
            y0 = pb.sub_labels(blk.y, 0)
            # the dual terms of the pass's start are summed with the steps, by the loss the steps take;
            # with --fit-intercept that is the shifted loss, and D_0 (ooc.solvers.intercept) is summed here
            d0 = self.dual_loss(blk, y0, alpha[0]) if self.fit_intercept else None
            _, p, d = self.row_pass().pass_group(self.loss_of(0), rows, Labels(y0, blk.c), alpha[0], order, v[0], w[0],
                                                 reg, w_state[0])
            psum[0] += p
            dsum[0] += d if d0 is None else d0
            return

        def one(c):
            # one-vs-rest: every class on the block already in memory; classes touch only their own duals,
            # v, w and sums, so they run on --threads threads with the same results as one after the other
            yc = pb.sub_labels(blk.y, c)
            dsum[c] += self.dual_loss(blk, yc, alpha[c])  # before the update
            psum[c] += sdca_pass_gap(self.loss_of(c), rows, Labels(yc, blk.c), alpha[c], order, v[c], w[c], reg, w_state[c])[1]

        self.over_classes(one, blk)

