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

import numpy as np

from ..kernels.sdca import sdca_pass
from ..schedule.scheduler import row_order
from .base import BlockLoopSolver, TrainBlock


class SDCASolver(BlockLoopSolver):
    """``--solver sdca``."""

    name = "sdca"

    def update_block(self, blk: TrainBlock, alpha: np.ndarray, epoch: int, w: np.ndarray, v: np.ndarray) -> None:
        pb = self.pb
        order = row_order(blk.stop - blk.start, int(self.opt["seed"]), epoch, blk.index)
        for c in range(self.k):  # one-vs-rest: every class on the block already in memory
            sdca_pass(pb.loss, blk.indptr, blk.indices, blk.data, pb.sub_labels(blk.y, c), blk.c, alpha[c], order,
                      v[c], w[c], float(pb.penalty.l2), float(pb.penalty.l1), float(self.n), float(pb.bias))
