"""One problem's Prox-SDCA pass on ``--threads`` threads (:mod:`ooc.kernels.sdca_threads`).

The solvers that visit rows with Prox-SDCA steps (sdca, acc-sdca) call
:func:`threaded_sdca_pass` instead of the one-thread kernel when a single problem is solved
(binary, regression) and ``--threads`` is at least :data:`MIN_ROW_THREADS`; one-vs-rest
problems put their classes on the threads instead, which changes nothing in the iterates.
"""

from __future__ import annotations

import numpy as np

from .._cpu import compute_pool
from ..kernels.sdca_threads import ROWS_PER_THREAD, local_steps, merge_steps

#: Fewest threads that split one problem's rows. Measured on the 1M x 2^20 bench store (L2
#: logistic): a pass costs 0.42 s of CPU on one thread, 0.75-0.85 s summed over 2 threads,
#: 0.87-0.92 s over 3, 0.88 s over 4, 1.1-1.2 s over 8 (each thread's change of v read beside w,
#: and the merge), with the same number of passes: about one thread's wall time on 2 cores,
#: 0.7x on 3, 0.5x on 4, 0.35x on 8. Below this count the problem runs on one thread.
MIN_ROW_THREADS = 3


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
    # each thread lists the entries it changes: at most its slice's nonzeros
    indptr = rows[0]
    nnz = int(indptr[-1])
    longest = int(np.max(np.diff(indptr))) if m else 0
    touched = np.empty((T, max(1, min(nnz, ROWS_PER_THREAD * longest + longest))), dtype=np.int64)
    for start in range(0, m, T * ROWS_PER_THREAD):
        stop = min(m, start + T * ROWS_PER_THREAD)
        cuts = [start + (stop - start) * k // T for k in range(T + 1)]
        # thread 0's slice runs here while the pool runs the others; w is shared read-only
        futures = [pool.submit(local_steps, loss, rows, labels, alpha, order[cuts[k]:cuts[k + 1]], w, dv[k], reg,
                               sigma, w_snap, touched[k]) for k in range(1, T)]
        results = [local_steps(loss, rows, labels, alpha, order[cuts[0]:cuts[1]], w, dv[0], reg, sigma, w_snap,
                               touched[0])]
        results += [f.result() for f in futures]
        n_touched = np.array([r[2] for r in results], dtype=np.int64)
        # the changes added on the threads at once, each on its own range of entries
        futures = [pool.submit(merge_steps, touched, n_touched, v, w, dv, reg, part) for part in range(1, T)]
        merge_steps(touched, n_touched, v, w, dv, reg, 0)
        for f in futures:
            f.result()
        for k in range(T):
            sum_d2 += results[k][0]
            primal += results[k][1]
    return sum_d2, primal
