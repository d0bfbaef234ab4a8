"""One problem's Prox-SDCA pass on ``--threads`` threads (:mod:`ooc.kernels.sdca_threads`).

The solvers that visit rows with Prox-SDCA steps (sdca, acc-sdca) hand a single problem's
row groups (binary, regression) to :class:`RowThreads` when ``--threads`` is at least
:data:`MIN_ROW_THREADS`; one-vs-rest problems put their classes on the threads instead,
which changes nothing in the iterates. The certifying pass of such a problem (no update)
sums its primal loss over row ranges on the threads (:func:`threaded_primal_loss`).
"""

from __future__ import annotations

import numpy as np

from .._cpu import compute_pool, even_cuts, gather_prefetch_pays
from ..kernels.sdca import block_primal_loss, rows_primal_loss
from ..kernels.sdca_threads import (
    HOT_FEATURES,
    ROWS_PER_THREAD,
    local_steps,
    owner_split,
    sync_entries,
    sync_range,
    take_back,
)

#: Fewest threads that split one problem's rows. Measured on the 1M x 2^20 bench store (L2
#: logistic, 2 cores): with replicas a pass takes 0.5-0.6 s on 2 threads against 0.85 s on one
#: (the former scheme, a shared ``w`` beside each thread's change of ``v``, cost twice one
#: thread's processor time a pass and needed 3 threads to pay).
MIN_ROW_THREADS = 2
#: Fewest rows a thread's share of one problem must have for the threads to split it: below, a pass
#: is a few mini-batches whose meetings and synchronizations cost more than they share (the tests'
#: problems of hundreds of rows, split, made the suite run 2.5x longer).
MIN_ROWS_PER_THREAD = 8192
#: A pass on ``T`` threads costs about this times ``1/T`` of one thread's: the synchronizations, the
#: threads' uneven slices, the replicas sharing the caches. Measured on 2 cores, 1M x 2^20 hashed rows, L2
#: logistic: 0.42-0.43 s against 0.55-0.56 s on one thread's replica (:class:`RowThreads` with ``T = 1``);
#: rcd-dual's draws 0.98 s against 1.4 s.
PASS_OVERHEAD = 1.5
#: :data:`PASS_OVERHEAD` against the plain one-thread pass (separate ``w`` and snapshot: 0.5-0.6 s
#: against 0.85 s): the rule of CoCoA+'s workers, whose one thread takes the plain pass.
PASS_OVERHEAD_PLAIN = 1.2


def rows_split_pays(threads: int, sq_norm: float, c: float, rows: int, overhead: float | None = None) -> bool:
    r"""Whether splitting one problem's ``rows`` over ``threads`` threads should certify sooner than one thread.

    Prox-SDCA's passes to a given gap grow like ``(R^2 + lambda n gamma) / (lambda n gamma)`` (Shalev-Shwartz
    & Zhang: ``phi`` is ``1/gamma``-smooth, ``R^2`` the rows' squared norm); the local subproblem of
    ``T`` threads takes steps with ``T R^2`` in place of ``R^2``, so it needs up to
    ``rho = (T R^2 + c) / (R^2 + c)`` times the passes, ``c = lambda n gamma``. The threads pay when
    ``rho`` times a pass's cost on them, ``overhead / T`` (:data:`PASS_OVERHEAD`), is below one. Measured (2 threads, L2
    logistic, normalized rows): ``c = 4`` (1M hashed rows, lambda 1e-6), 7 passes on both; ``c = 12``,
    6 and 6; ``c = 1.6``, 13 against 9; ``c = 0.12``, 84 against 45 and 94 against 51 (``rho`` 1.89):
    the bound is close where it binds. With the hinge (``gamma = 0``) or an ill-conditioned problem
    they do not pay (``auto`` trains the latter with acc-sdca, whose inner problem is well conditioned),
    nor with fewer than :data:`MIN_ROWS_PER_THREAD` rows a thread.

    Parameters
    ----------
    threads : int
    sq_norm : float
        The rows' mean squared norm (with the bias feature's).
    c : float
        ``lambda n gamma``: the L2 weight the steps use, the number of rows, and ``1 / smoothness`` of
        the loss (0 for a non-smooth loss).
    rows : int
        The problem's rows.
    overhead : float, optional
        A pass's cost on the threads times ``T`` over one thread's (None: :data:`PASS_OVERHEAD`, read when
        called).
    """
    overhead = PASS_OVERHEAD if overhead is None else overhead
    if rows < threads * MIN_ROWS_PER_THREAD:
        return False
    if sq_norm <= 0.0:
        return True
    rho = (threads * sq_norm + c) / (sq_norm + c)
    return rho * overhead < threads


def problem_split_pays(threads: int, pb, l2: float, rows: float, overhead: float | None = None) -> bool:
    """:func:`rows_split_pays` for problem ``pb`` (one problem): its store's mean squared row norm with the
    bias feature's, its loss's smoothness, and the L2 weight ``l2`` its steps use over ``rows`` rows."""
    st = pb.store
    bias = float(pb.bias)
    sq = st.row_sqnorm_sum_max()[0] / st.n_rows + bias * bias if st.n_rows else 0.0
    return rows_split_pays(threads, sq, float(l2) * rows / float(pb.loss.smoothness), int(rows), overhead)


def hot_entries(col_nnz: np.ndarray, dim: int, bias: bool) -> np.ndarray:
    """The entries synchronized after every mini-batch: the :data:`HOT_FEATURES` features with the
    most nonzeros (ties: the lower index), and the bias entry ``dim - 1``, sorted (int64)."""
    col_nnz = np.asarray(col_nnz).astype(np.int64)
    n = col_nnz.shape[0]
    h = min(HOT_FEATURES, n)
    if h < n:
        # a selection, not a sort (2**20 features: 25 ms instead of 98): every count above the
        # h-th largest, then the lowest indices among those equal to it
        thr = np.partition(col_nnz, n - h)[n - h]
        above = np.flatnonzero(col_nnz > thr)
        top = np.concatenate([above, np.flatnonzero(col_nnz == thr)[:h - above.shape[0]]])
    else:
        top = np.arange(n)
    top = top[col_nnz[top] > 0]
    if bias:
        top = np.append(top, dim - 1)
    return np.sort(top).astype(np.int64)


class RowThreads:
    """One problem's pass on ``T`` threads: the replicas, the hot entries, and when to refill them.

    With ``T = 1`` it is one thread's pass on a replica, the same steps with the same numbers
    as :func:`ooc.kernels.sdca.sdca_pass_gap` (``sigma' = 1``): what it saves is a cache miss a
    nonzero, the local point and the snapshot sharing a line where the separate arrays of
    ``w`` and the snapshot take two; ``w`` (and ``v``) take the replica's entries back after every
    group (:func:`ooc.kernels.sdca_threads.take_back`).

    Parameters
    ----------
    col_nnz : ndarray
        The store's nonzeros per feature (chooses the hot entries, :func:`hot_entries`).
    threads : int
        ``T >= 1``.
    dim : int
        Length of ``w`` (with the bias entry).
    bias : bool
        Whether the last entry is the bias feature's.
    l1 : float
        The L1 weight (with ``l1 > 0`` a replica keeps its local ``v`` too).

    Notes
    -----
    The replicas (``(T, dim, 2 or 3)``: each thread's local point and a copy of the pass's snapshot)
    are derived state: after every group they equal ``w`` again, so a checkpoint needs none of
    them. They are refilled from ``w`` and the snapshot at the first group after
    :meth:`invalidate` (a new pass, a restored checkpoint, a ``w`` changed by the solver).
    """

    def __init__(self, col_nnz: np.ndarray, threads: int, dim: int, bias: bool, l1: float):
        self.T = int(threads)
        # one thread meets no other: nothing is synchronized between its mini-batches
        self.hot = hot_entries(col_nnz, dim, bias) if self.T > 1 else np.zeros(0, dtype=np.int64)
        self.u = np.zeros((self.T, dim, self.columns(l1)))
        self._fresh = False

    @staticmethod
    def columns(l1: float) -> int:
        """A replica's columns: the local ``w``, the snapshot, and with ``l1 > 0`` the local ``v``."""
        return 3 if float(l1) > 0.0 else 2

    @classmethod
    def held_bytes(cls, threads: int, dim: int, l1: float) -> int:
        """Bytes the replicas of ``threads`` threads hold (the memory planner's count)."""
        return 8 * cls.columns(l1) * threads * dim

    def invalidate(self) -> None:
        """``w`` or the snapshot changed outside a pass: refill the replicas before the next group."""
        self._fresh = False

    def pass_group(self, loss, rows, labels, alpha, order, v, w, reg, w_snap,
                   owned: bool = False) -> tuple[float, float, float]:
        """A Prox-SDCA pass over the rows ``order`` of one group, mini-batch after mini-batch.

        Arguments as for :func:`ooc.kernels.sdca.sdca_pass_gap` (``w_snap`` of length 0: no
        gap terms). ``owned``: ``order`` may repeat rows (draws with replacement): each mini-batch
        goes to the threads by the rows' owners (:func:`~ooc.kernels.sdca_threads.owner_split`)
        instead of in ``T`` equal slices, so that no dual is stepped by two threads at once.

        Returns ``(sum d^2, primal sum, dual sum)``: the sums of
        :func:`ooc.kernels.sdca_threads.local_steps`, added thread after thread, mini-batch after
        mini-batch: the same numbers for the same ``T`` on any machine. On return ``v`` and
        ``w`` hold every step (the group's entries synchronized).
        """
        T, u, hot = self.T, self.u, self.hot
        snap = w_snap.shape[0] > 0
        if not self._fresh:
            u[:, :, 0] = w
            if snap:
                u[:, :, 1] = w_snap
            if u.shape[2] > 2:
                u[:, :, 2] = v
            self._fresh = True
        # the rest of the group's entries are synchronized by a dense sweep where v is no longer
        # than the group's nonzeros, else by the group's column ids
        dim = v.shape[0]
        ids = rows[1] if rows[1].shape[0] < dim else rows[1][:0]
        if T == 1:
            sum_d2, primal, dual = local_steps(loss, rows, labels, alpha, order, u[0], reg, 1.0, snap)
            take_back(v, w, u[0], ids)
            return sum_d2, primal, dual
        pool = compute_pool(T)
        sigma = float(T)
        m = order.shape[0]
        sum_d2 = primal = dual = 0.0
        if owned:
            batch, owner_cuts = np.empty(min(m, T * ROWS_PER_THREAD), dtype=np.int64), np.zeros(T + 1, dtype=np.int64)
        for start in range(0, m, T * ROWS_PER_THREAD):
            stop = min(m, start + T * ROWS_PER_THREAD)
            if owned:
                seq = batch[:stop - start]
                owner_split(order[start:stop], T, alpha.shape[0], seq, owner_cuts)
                cuts = owner_cuts.tolist()
            else:
                seq, cuts = order, even_cuts(start, stop, T)
            # thread 0's slice runs here while the pool runs the others
            futures = [pool.submit(local_steps, loss, rows, labels, alpha, seq[cuts[k]:cuts[k + 1]], u[k], reg,
                                   sigma, snap) for k in range(1, T)]
            results = [local_steps(loss, rows, labels, alpha, seq[cuts[0]:cuts[1]], u[0], reg, sigma, snap)]
            results += [f.result() for f in futures]
            sync_entries(hot, v, w, u, reg, sigma)
            for r in results:
                sum_d2 += r[0]
                primal += r[1]
                dual += r[2]
        # the rest of the group's entries, each thread over its own range of them
        futures = [pool.submit(sync_range, dim * k // T, dim * (k + 1) // T, v, w, u, reg, sigma, ids)
                   for k in range(1, T)]
        sync_range(0, dim // T, v, w, u, reg, sigma, ids)
        for f in futures:
            f.result()
        return sum_d2, primal, dual


def threaded_primal_loss(loss, indptr, indices, data, y, c, w, bias, threads: int, rows=None) -> float:
    """:func:`ooc.kernels.sdca.block_primal_loss` with the rows (or the row ids ``rows``, see
    ``rows_primal_loss``) cut into ``threads`` consecutive ranges summed at once, then added in
    order: the same number for the same count."""
    m = indptr.shape[0] - 1 if rows is None else rows.shape[0]
    cuts = [m * k // threads for k in range(threads + 1)]
    prefetch = gather_prefetch_pays(w.nbytes)

    def part(k):
        lo, hi = cuts[k], cuts[k + 1]
        if rows is not None:
            return rows_primal_loss(loss, indptr, indices, data, y, c, w, bias, prefetch, rows[lo:hi])
        return block_primal_loss(loss, indptr[lo:hi + 1], indices, data, y[lo:hi], c[lo:hi], w, bias, prefetch)

    pool = compute_pool(threads)
    futures = [pool.submit(part, k) for k in range(1, threads)]
    total = part(0)
    for f in futures:
        total += f.result()
    return total
