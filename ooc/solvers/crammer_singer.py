"""Multiclass Prox-SDCA with the (smooth) max-of-hinge loss (Crammer-Singer), vector duals.

Each example has ``k`` duals (one per class) updated jointly by the exact
maximisation of Sec. 5 of the accelerated Prox-SDCA paper (a projection onto a
scaled simplex, see :mod:`ooc.objectives.multiclass`). The model is
``W = soft_threshold(V, l1/l2)`` with ``V = 1/(l2 n) sum_i x_i alpha_i^T``, kept
as a ``(dim, k)`` array so that each nonzero ``x_ij`` touches one contiguous run of
``k`` weights. Duals are stored like the binary ones, ``(k, rows)`` per block
(in memory or paged), and transposed to the kernels' ``(rows, k)`` on the block
being worked on.

The loss is the plain max-of-hinge for ``--loss hinge`` and its smoothing with
``--gamma`` for ``--loss smooth-hinge``.
"""

from __future__ import annotations

import numpy as np

from ..kernels.args import Labels, Reg, Rows
from ..kernels.multiclass import cs_block_accumulate_v, cs_block_dual_loss, cs_block_primal_loss, cs_sdca_pass
from ..objectives.losses import loss_spec
from ..objectives.multiclass import class_indices, cs_grad_conj, cs_penalty_value, make_multiclass_loss
from ..schedule.scheduler import row_order
from ..store import layout as L
from .base import BlockLoopSolver, TrainBlock
from .certificate import certify


class CrammerSingerSolver(BlockLoopSolver):
    """``--multiclass crammer-singer`` with ``sdca``."""

    name = "sdca-crammer-singer"

    def __init__(self, problem, rundir, options, progress=None):
        super().__init__(problem, rundir, options, progress)
        gamma = float(options.get("gamma", 0.0)) if "gamma" in loss_spec(problem.loss_name).params else 0.0
        self.mc_loss = make_multiclass_loss(gamma)
        self.classes = np.asarray(problem.classes, dtype=np.float64)

    @property
    def n_terms(self) -> int:
        return 1  # one joint objective

    def fresh_state(self) -> dict:
        V = np.zeros((self.dim, self.k))
        if self.opt.get("warm_start"):
            scale = 1.0 / (float(self.pb.penalty.l2) * self.n)
            for b in range(self.nb):
                blk = self.store.block(L.ROWS, b)
                alpha = np.ascontiguousarray(self.duals.read(0, b).T)
                cs_block_accumulate_v(np.ascontiguousarray(blk.indptr, dtype=np.int64), blk.indices, blk.data,
                                      alpha, V, scale, float(self.pb.bias))
        W = cs_grad_conj(self.pb.penalty, V, self.pb.bias)
        return {"w": W, "v": V, "w_prev": W.copy()}

    def _y_class(self, blk: TrainBlock) -> np.ndarray:
        return class_indices(blk.y, self.classes)

    def gap_terms(self, blk, alpha, w_state, psum, dsum):
        yc = self._y_class(blk)
        psum[0] += cs_block_primal_loss(self.mc_loss, blk.indptr, blk.indices, blk.data, yc, blk.c, w_state,
                                        float(self.pb.bias))
        dsum[0] += cs_block_dual_loss(self.mc_loss, yc, blk.c, np.ascontiguousarray(alpha.T))

    def update_block(self, blk, alpha, epoch, w, v):
        pb = self.pb
        order = row_order(blk.stop - blk.start, int(self.opt["seed"]), epoch, blk.index)
        a = np.ascontiguousarray(alpha.T)
        cs_sdca_pass(self.mc_loss, Rows(blk.indptr, blk.indices, blk.data), Labels(self._y_class(blk), blk.c), a, order,
                     v, w, Reg(float(pb.penalty.l2), float(pb.penalty.l1), float(self.n), float(pb.bias)))
        alpha[...] = a.T

    def export_w(self, w):
        return w.T

    def model_rows(self, w):
        return w.T  # the state is (dim, classes): the model's rows are its columns

    def _gap(self, psum, dsum, w_state):
        # one problem over the classes; W = grad g*(V) is kept exactly, so l2 g*(V) = l2/2 ||W||_F^2
        pb = self.pb
        bound = certify(psum[:1], dsum[:1], float(self.n), [cs_penalty_value(pb.penalty, w_state, pb.bias)],
                        [0.5 * pb.penalty.l2 * float(np.sum(w_state * w_state))])
        return bound.primal, bound.dual
