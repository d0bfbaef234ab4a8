"""One problem's Prox-SDCA pass on ``--threads`` threads (:mod:`ooc.kernels.sdca_threads`).

The solvers that visit rows with Prox-SDCA steps (sdca, acc-sdca) call
:func:`threaded_sdca_pass` instead of the one-thread kernel when a single problem is solved
(binary, regression) and ``--threads`` is above 1; one-vs-rest problems put their classes on
the threads instead, which changes nothing in the iterates.
"""

from __future__ import annotations

import numpy as np

from .._cpu import compute_pool
from ..kernels.sdca_threads import ROWS_PER_THREAD, local_steps, merge_steps


def threaded_sdca_pass(loss, rows, labels, alpha, order, v, w, reg, w_snap, dv: np.ndarray) -> tuple[float, float]:
    """A Prox-SDCA pass over ``order`` by ``T = len(dv)`` threads, mini-batch after mini-batch.

    Arguments as for :func:`ooc.kernels.sdca.sdca_pass_gap` (``w_snap`` of length 0: no
    primal sum), plus ``dv``, ``(T, len(v))`` zeros (left zero). Returns ``(sum d^2, primal
    sum)``, each summed thread after thread, mini-batch after mini-batch: the same numbers
    for the same ``T`` on any machine.
    """
    T = dv.shape[0]
    pool = compute_pool(T)
    sigma = float(T)
    m = order.shape[0]
    sum_d2 = 0.0
    primal = 0.0
    for start in range(0, m, T * ROWS_PER_THREAD):
        stop = min(m, start + T * ROWS_PER_THREAD)
        cuts = [start + (stop - start) * k // T for k in range(T + 1)]
        # thread 0's slice runs here while the pool runs the others; w is shared read-only
        futures = [pool.submit(local_steps, loss, rows, labels, alpha, order, cuts[k], cuts[k + 1], w, dv[k], reg,
                               sigma, w_snap) for k in range(1, T)]
        results = [local_steps(loss, rows, labels, alpha, order, cuts[0], cuts[1], w, dv[0], reg, sigma, w_snap)]
        results += [f.result() for f in futures]
        for k in range(T):
            merge_steps(rows, order, cuts[k], cuts[k + 1], v, w, dv[k], reg)
            sum_d2 += results[k][0]
            primal += results[k][1]
    return sum_d2, primal
