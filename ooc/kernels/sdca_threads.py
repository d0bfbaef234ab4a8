r"""Prox-SDCA on several threads at once: CoCoA+ inside a node, each thread on a replica of the model.

The rows of a pass (``order``, the seeded permutation of a row group) are cut into
mini-batches of ``T x`` :data:`ROWS_PER_THREAD` rows; within a mini-batch thread ``k`` takes
its own consecutive slice and runs Prox-SDCA on the CoCoA+ local subproblem of its rows (Ma
et al., "Adding vs. averaging in distributed primal-dual optimization", 2015, ``gamma = 1``,
``sigma' = T``):

.. math::

    \max_{\Delta}\; -\frac1n \sum_{i \in P_k} c_i \phi^*\!\big(-(a_i+\Delta_i)/c_i\big)
    - \frac{\lambda}{\sigma'}\, g^*\!\Big(v + \sigma' \frac{A_k \Delta}{\lambda n}\Big),

whose steps are one thread's Prox-SDCA steps (:func:`local_steps`) at the thread's local
point ``v_k = v + sigma' dv_k`` (``dv_k`` its own change of ``v`` since the entry was last
synchronized), with ``w_k = grad g*(v_k) = soft_threshold(v_k, l1/l2)``: for row ``i``,
``z = x_i . w_k``, ``q = sigma' ||x_i||^2 / (lambda n)``, the step ``d`` of
:func:`ooc.objectives.losses.dual_step`, then ``v_k += sigma' d x_i / (lambda n)``.
Adding the threads' changes is safe: ``v + sum_k dv_k`` is the mean of the ``T`` points
``v_k``, so by convexity ``g*(v + sum_k dv_k) - g*(v) <= (1/T) sum_k (g*(v_k) - g*(v))``
and the true increase of ``D`` is at least the sum of the local ones: ``D`` never falls.
(With ``l1 = 0``, ``g*`` is quadratic and this is CoCoA+'s ``||sum_k A_k Delta_k||^2 <= T
sum_k ||A_k Delta_k||^2``.) The bound holds entry by entry of ``v`` (``g*`` is separable), so
each entry may be synchronized on its own schedule.

Each thread's *replica* is one array, ``(dim, 2)`` with ``l1 = 0`` (``w_k = v_k``; a copy of
the pass's snapshot ``w_snap`` beside it) and ``(dim, 3)`` with ``l1 > 0`` (``w_k``, the
snapshot, ``v_k``): a nonzero costs the thread one cache line, as one thread's pass does
(measured on 2 cores: a shared ``w`` beside per-thread changes made a pass cost twice one
thread's processor time, each thread's ``8 dim`` bytes pushing the others out of the cache).

**Synchronization** (:func:`sync_entries`, :func:`sync_range`). An entry ``j`` is
synchronized by ``v_j += sum_k (v_kj - v_j) / sigma'`` (threads in order), then
``w_j = soft_threshold(v_j, l1/l2)`` (the bias entry: ``w = v``) and every replica's
``v_kj = v_j``, ``w_kj = w_j``; an entry no replica changed is left as it is. The ``hot``
entries (the features with the most nonzeros, where the threads' rows meet all the time)
are synchronized after every mini-batch, the others once per row group: a rare feature is
rarely seen twice in a group, and a dense sweep over ``v`` after every mini-batch would cost
more than the steps. At the end of a group every replica equals the model again and ``v``
is the image of the duals, so the certificate is one thread's.

Results depend on ``T``, :data:`ROWS_PER_THREAD` and the hot set (:data:`HOT_FEATURES`
features chosen from the store's column counts), on nothing else about the threads: the
slices, the synchronization order and every sum are fixed.
"""

import numpy as np
from numba import njit

from ooc.kernels.prefetch import prefetch_rows
from ooc.objectives.losses import dual_step, loss_value, weighted_conj_neg
from ooc.objectives.penalties import soft_threshold_scalar

__all__ = ["ROWS_PER_THREAD", "HOT_FEATURES", "local_steps", "owner_split", "sync_entries", "sync_range", "take_back"]

#: Rows per thread per mini-batch (a trajectory constant: changing it changes the iterates).
#: Between two mini-batches the threads meet (a few tens of microseconds) and the hot entries
#: are synchronized. Measured on 1M x 2^20 hashed rows (L2 logistic, lambda 1e-6, 2 threads):
#: the passes to a certified 1e-6 are the same with 4096 to 65536 rows per thread.
ROWS_PER_THREAD = 16384
#: Entries synchronized after every mini-batch: the features with the most nonzeros (and the
#: bias entry). On the hashed bench rows the top 4096 of 2^20 features hold 64 % of the nonzeros.
HOT_FEATURES = 4096


@njit(cache=True, nogil=True)
def local_steps(loss, rows, labels, alpha, rows_order, u, reg, sigma, snap):
    r"""One thread's CoCoA+ local Prox-SDCA steps over ``rows_order`` (its slice of a mini-batch).

    Parameters
    ----------
    loss, rows, labels, alpha, reg
        As for :func:`ooc.kernels.sdca.sdca_pass`; ``alpha`` is written at this slice's rows only.
    rows_order : ndarray of int64
        The rows this thread visits in the mini-batch, in order (a view of the pass's ``order``).
    u : ndarray of float64, shape (dim, 2) or (dim, 3)
        This thread's replica: ``u[:, 0]`` the local ``w_k``, ``u[:, 1]`` the pass's snapshot
        ``w_snap`` (read only when ``snap``) and, with 3 columns (``l1 > 0``), ``u[:, 2]`` the local
        ``v_k``; updated in place.
    sigma : float
        ``sigma'`` (the number of threads): the local point moves ``sigma`` times faster and
        the step's quadratic term is ``sigma`` times larger.
    snap : bool
        Whether to sum the gap terms of the pass's start (the fused gap): the primal loss at the
        snapshot and the dual terms of the duals before their step.

    Returns
    -------
    sum_d2 : float
        ``sum d^2`` over the steps.
    primal_sum : float
        ``sum c_i phi(x_i . w_snap, y_i)`` over the slice's rows with ``c_i > 0`` (0 without ``snap``).
    dual_sum : float
        ``sum_i -c_i phi*(-a_i / c_i, y_i)`` over the slice's rows before their step (0 without ``snap``).
    """
    indptr, indices, data = rows
    y, c = labels
    l2, l1, n_total, bias = reg
    inv_l2n = 1.0 / (l2 * n_total)
    k = l1 / l2
    own_v = u.shape[1] > 2  # l1 > 0: v_k is kept beside w_k = soft_threshold(v_k)
    has_bias = bias > 0.0
    b = u.shape[0] - 1
    bias_sq = bias * bias
    sum_d2 = 0.0
    primal_sum = 0.0
    dual_sum = 0.0
    for t in range(rows_order.shape[0]):
        # the rows come in random order: request the next ones' cache lines now (a replica
        # row holds the local point and the snapshot: one line for both)
        prefetch_rows(rows_order, t, indptr, indices, data, alpha, y, c, u, u[:0])
        i = rows_order[t]
        ci = c[i]
        ai = alpha[i]
        if snap:
            dual_sum -= weighted_conj_neg(loss, ai, y[i], ci)
        if ci <= 0.0 and ai == 0.0:
            continue  # weightless row already at its only feasible dual value
        start = indptr[i]
        end = indptr[i + 1]
        z = 0.0
        sq = 0.0
        zs = 0.0
        if snap:
            for p in range(start, end):
                x = np.float64(data[p])
                j = indices[p]
                z += x * u[j, 0]
                zs += x * u[j, 1]
                sq += x * x
        else:
            for p in range(start, end):
                x = np.float64(data[p])
                z += x * u[indices[p], 0]
                sq += x * x
        if has_bias:
            z += bias * u[b, 0]
            sq += bias_sq
        yi = y[i]
        if snap and ci > 0.0:
            if has_bias:
                zs += bias * u[b, 1]
            primal_sum += ci * loss_value(loss, zs, yi)
        d = dual_step(loss, ai, z, yi, sigma * sq * inv_l2n, ci)
        if d != 0.0:
            alpha[i] = ai + d
            s = sigma * d * inv_l2n
            if own_v:
                for p in range(start, end):
                    j = indices[p]
                    vj = u[j, 2] + s * np.float64(data[p])
                    u[j, 2] = vj
                    u[j, 0] = soft_threshold_scalar(vj, k)
                if has_bias:
                    u[b, 2] += s * bias
                    u[b, 0] = u[b, 2]
            else:
                for p in range(start, end):
                    u[indices[p], 0] += s * np.float64(data[p])
                if has_bias:
                    u[b, 0] += s * bias
            sum_d2 += d * d
    return sum_d2, primal_sum, dual_sum


@njit(cache=True, nogil=True)
def _sync_many(ids, lo, hi, dense, v, w, u, reg, sigma):
    # every entry j of [lo, hi) (dense), or each ids[q] in [lo, hi): the replicas' changes of
    # entry j added into v; w and the replicas set to the result. One loop for every caller:
    # the body must stay inline (a call per entry made the dense sweep 6x slower)
    l2, l1, n_total, bias = reg
    k = l1 / l2
    bias_entry = v.shape[0] - 1 if bias > 0.0 else -1
    inv_sigma = 1.0 / sigma
    T = u.shape[0]
    vc = 2 if u.shape[2] > 2 else 0  # the replicas' v_k (with l1 = 0, w_k = v_k and v is w)
    n = hi - lo if dense else ids.shape[0]
    for q in range(n):
        j = lo + q if dense else ids[q]
        if j < lo or j >= hi:
            continue
        vj = v[j]
        changed = False
        for t in range(T):
            if u[t, j, vc] != vj:
                changed = True
        if not changed:
            continue  # no thread moved it: v_j, w_j and the replicas stay as they are, bit for bit
        acc = vj
        for t in range(T):
            acc += (u[t, j, vc] - vj) * inv_sigma
        v[j] = acc
        nw = acc if j == bias_entry else soft_threshold_scalar(acc, k)
        w[j] = nw
        for t in range(T):
            u[t, j, 0] = nw
            u[t, j, vc] = acc


@njit(cache=True, nogil=True)
def sync_entries(entries, v, w, u, reg, sigma):
    r"""Synchronize the entries ``entries`` of the replicas ``u`` (``(T, dim, 2)``) into ``v`` and ``w``.

    For each listed ``j`` some replica changed: ``v_j += sum_k (v_kj - v_j) / sigma`` (``k =
    0, 1, ...``; ``v_kj`` is ``u[k, j, 2]``, or ``u[k, j, 0]`` with 2 columns), ``w_j =
    soft_threshold(v_j, l1/l2)`` (the bias entry, last when ``bias > 0``: ``w_j = v_j``) and
    every replica takes ``v_j`` and ``w_j``. Each entry's update reads and writes that entry
    only, so the order of the list and repeated entries change nothing. ``v`` and ``w`` may
    be one array (``l1 = 0``).
    """
    _sync_many(entries, 0, v.shape[0], False, v, w, u, reg, sigma)


@njit(cache=True, nogil=True)
def sync_range(lo, hi, v, w, u, reg, sigma, indices):
    r""":func:`sync_entries` for every entry of ``[lo, hi)``, as the threads do after a row group.

    ``indices`` of length 0: every entry of the range in turn (a dense sweep, sequential in
    memory); otherwise the group's column ids, of which those in the range are synchronized
    (cheaper where the group has fewer nonzeros than ``v`` has entries), and the bias entry.
    An entry no replica changed is left untouched, so both ways give the same bits. The
    ranges of ``T`` threads are disjoint: they run at once with the same result as one after
    the other.
    """
    if indices.shape[0] == 0:
        _sync_many(indices, lo, hi, True, v, w, u, reg, sigma)
        return
    _sync_many(indices, lo, hi, False, v, w, u, reg, sigma)
    b = v.shape[0] - 1
    if reg[3] > 0.0 and lo <= b < hi:
        _sync_many(indices[:0], b, b + 1, True, v, w, u, reg, sigma)


@njit(cache=True, nogil=True)
def take_back(v, w, u, indices):
    r"""One thread's replica ``u`` (``(dim, 2)`` or ``(dim, 3)``, ``sigma' = 1``) copied into ``w`` (and ``v``).

    ``w_j = u[j, 0]`` and, with 3 columns, ``v_j = u[j, 2]``: for every entry (``indices`` of
    length 0), or for the listed entries and the last one (the bias entry, if any; copying an
    entry the replica did not change writes the value it already has). A copy, not
    :func:`sync_range`'s ``v_j + (u_j - v_j)``, which rounds: one thread's pass on its replica
    leaves bit for bit the ``v`` and ``w`` of :func:`ooc.kernels.sdca.sdca_pass_gap`. ``v`` and
    ``w`` may be one array (``l1 = 0``).
    """
    own_v = u.shape[1] > 2
    dense = indices.shape[0] == 0
    n = v.shape[0] if dense else indices.shape[0] + 1
    last = v.shape[0] - 1
    for q in range(n):
        j = q if dense else (indices[q] if q < indices.shape[0] else last)
        w[j] = u[j, 0]
        if own_v:
            v[j] = u[j, 2]


@njit(cache=True, nogil=True)
def owner_split(draws, T, m, out, cuts):
    r"""Stable partition of ``draws`` (row ids in ``[0, m)``, repeats allowed) by owning thread.

    Row ``i`` belongs to thread ``i T // m`` (``T`` consecutive ranges of the rows). ``out``
    receives thread 0's draws in their order, then thread 1's, ...; ``cuts`` (length ``T + 1``)
    where each thread's start. A row drawn twice in a mini-batch (sampling with replacement,
    ``rcd-dual``) is then stepped twice by one thread, one step after the other: two threads
    never step the same dual at once.
    """
    for k in range(T + 1):
        cuts[k] = 0
    for q in range(draws.shape[0]):
        cuts[draws[q] * T // m + 1] += 1
    for k in range(T):
        cuts[k + 1] += cuts[k]
    fill = cuts[:T].copy()
    for q in range(draws.shape[0]):
        k = draws[q] * T // m
        out[fill[k]] = draws[q]
        fill[k] += 1
