r"""Primal RCD (NSync, ``rcd-primal``) on several threads at once, with a step that is safe for
every draw: each thread on the coordinates (columns) it owns, the rows' margins combined in rounds.

Problem (:mod:`ooc.kernels.rcd`), ``f(z) = 1/n sum_i c_i phi(z_i, y_i)``, ``z = X w``,
``F(w) = f(X w) + sum_j g_j(w_j)``. The drawn columns of a resident column block are cut into
*rounds* (consecutive draws holding about ``T x`` :data:`ROUND_NNZ` nonzeros); within a round
thread ``t`` steps the drawn columns it was given (:func:`route_rounds`: the same number of
nonzeros to each thread, as near as the columns allow) and keeps its own change of the margins,
``u_t = X_{:S_t} Delta_t``. Row ``i`` is touched by ``omega_i`` threads in the round
(those with a drawn column holding a nonzero in row ``i``). Since ``f`` is a sum over rows and
each ``phi`` is convex, Jensen's inequality on the mean of the ``omega_i`` points
``z_i + omega_i u_ti`` gives, for every round and every draw (not only in expectation),

.. math::

    f_i\Big(z_i + \sum_t u_{ti}\Big) \le \frac{1}{\omega_i} \sum_{t \ni i} f_i(z_i + \omega_i u_{ti}),
    \qquad
    F(w + \textstyle\sum_t \Delta_t) - F(w) \le \sum_t \big(H_t(\Delta_t) - H_t(0)\big),

with ``H_t(Delta) = sum_{i touched by t} f_i(z_i + omega_i u_ti(Delta)) / omega_i + g_{S_t}(w +
Delta)``. Each thread takes NSync's proximal steps on its own ``H_t``: for column ``j``, the
gradient ``1/n sum_i c_i phi'(z_i + omega_i u_ti) x_ij`` at its *local* margins and the
curvature bound ``M_j = beta/n sum_i omega_i c_i x_ij^2 + l2`` (``beta`` the loss's
smoothness), i.e. Richtarik and Takac's ESO (``Parallel coordinate descent methods for big
data optimization``, 2016, partial separability) with each row's own ``omega_i`` in place of
the data's largest, as in Fercoq and Richtarik's APPROX (``v_j = sum_i omega_i A_ij^2``) --
but deterministic: ``omega_i`` counts the round's actual threads, so no step needs the
expectation over a sampling. Each step cannot increase ``H_t``, hence ``F`` never increases.
Where a row is touched by one thread (most rows of a round on sparse data) its margin and
curvature are one thread's: the step is serial NSync's.

A *heavy* column (:data:`HEAVY_NNZ` nonzeros or more: the hot features of hashed text, every
column of dense data) is not put in a round: when drawn it takes one thread's exact step,
``omega = 1``, between two rounds, with its nonzeros cut into ``T`` ranges whose gradient sums
are added in order and whose margins each thread moves.

Each thread keeps its moves in its own ``u_t`` and lists the rows it moved. After the steps the
threads add the changes by row ranges (thread ``t`` the rows of its ``1/T`` of ``z``):
``z_i += u_si`` over the threads ``s`` that moved row ``i``, in order; each clears its own
``u_t`` before the next round. No cache line is written by two threads in a phase (a thread
writing the ``z`` of the rows it moved, or the marks of a row beside another thread's, bounced
lines between the cores and cost more than the steps saved). Each thread's marks and list
stamps are bytes of its own, ``marks[t, i]``, holding the round's number modulo 255 (all
cleared when it wraps). Results depend on ``T``, :data:`ROUND_NNZ` and :data:`HEAVY_NNZ`, and on
nothing else about the threads.
"""

from typing import NamedTuple

import numpy as np
from numba import njit

from ooc.kernels.rcd import prox_coord
from ooc.objectives.losses import loss_deriv

__all__ = ["ROUND_NNZ", "HEAVY_NNZ", "LIGHT_ROUND_THREADS", "RoundArrays", "route_rounds", "round_stamp",
           "round_prepare", "owned_cd_steps", "round_combine"]

#: Nonzeros per thread per round (a trajectory constant: changing it changes the iterates).
#: Between two rounds the threads meet three times (mark, step, combine).
ROUND_NNZ = 1 << 16
#: A drawn column with at least this many nonzeros takes an exact step of its own between two
#: rounds, its rows cut over the threads (:func:`ooc.kernels.rcd.grad_sum`, :func:`~ooc.kernels.rcd.move_margins`):
#: such a column would touch nearly every row a round touches and make ``omega_i = T`` for all
#: of them; split by rows, its step is one thread's, and the threads share its work. (A trajectory
#: constant; about 0.5 ms of work against the threads' two meetings of tens of microseconds.)
HEAVY_NNZ = 1 << 16
#: Fewest threads that share the light columns' rounds; below, one thread steps them (serial NSync)
#: between the heavy steps. Measured on 2 cores (200k x 2^18 hashed rows, L2 logistic, lambda 1e-4,
#: 74 epochs either way): a pass of rounds costs the threads together about twice one thread's steps
#: (the marks, the changes kept apart and added, threads waiting for the slowest), so on 2 threads
#: it ran in the time of one thread's (24.4 s against 24.3 s for the whole run); from 3 threads on
#: that cost is shared by more of them.
LIGHT_ROUND_THREADS = 3


class RoundArrays(NamedTuple):
    r"""The threads' arrays of the rounds, each ``(T, n)``: ``us`` (float64) each thread's change of the
    margins, ``marks`` (uint8) its round stamp on the rows it touches, ``listed`` (uint8) its stamp on
    the rows it moved, ``moved`` (int64) the list of those rows. 18 bytes a row a thread."""

    us: np.ndarray
    marks: np.ndarray
    listed: np.ndarray
    moved: np.ndarray

    @classmethod
    def zeros(cls, T: int, n: int) -> "RoundArrays":
        return cls(np.zeros((T, n)), np.zeros((T, n), dtype=np.uint8), np.zeros((T, n), dtype=np.uint8),
                   np.zeros((T, n), dtype=np.int64))


@njit(cache=True, nogil=True)
def route_rounds(indptr, draws, T, round_nnz, out, ptr, owner, seen):
    r"""Cut ``draws`` (local columns of a CSC block, repeats allowed) into rounds, and each round over the threads.

    A round closes once its draws hold ``T max(round_nnz, c)`` nonzeros, ``c`` the largest drawn
    column's (so that a hot column shares its round with others; the last round may hold fewer).
    Within a round each column goes, at its first draw, to the thread with the fewest nonzeros so
    far (the lowest on a tie), and its repeats to the same thread: two threads never step one
    coordinate at once. ``out`` (``len(draws)``) receives the draws of round 0 thread 0 in their
    order, round 0 thread 1, ..., round 1 thread 0, ...; ``ptr`` (at least ``(rounds + 1) T + 1``
    long) where each starts. ``owner`` and ``seen`` (one entry per column of the block, ``seen``
    all negative on entry and again on return) are scratch. Returns the number of rounds.
    """
    m = draws.shape[0]
    big = 0
    for q in range(m):
        jl = draws[q]
        big = max(big, indptr[jl + 1] - indptr[jl])
    budget = T * max(round_nnz, big)
    load = np.zeros(T, dtype=np.int64)
    rounds = 0
    q = 0
    pos = 0
    ptr[0] = 0
    while q < m:
        # the round's draws [q, e), each column's thread
        acc = 0
        e = q
        load[:] = 0
        while e < m and (acc < budget or e == q):
            jl = draws[e]
            nz = indptr[jl + 1] - indptr[jl]
            if seen[jl] != rounds:
                seen[jl] = rounds
                best = 0
                for t in range(1, T):
                    if load[t] < load[best]:
                        best = t
                owner[jl] = best
            load[owner[jl]] += nz
            acc += nz
            e += 1
        for t in range(T):
            for s in range(q, e):
                jl = draws[s]
                if owner[jl] == t:
                    out[pos] = jl
                    pos += 1
            ptr[rounds * T + t + 1] = pos
        rounds += 1
        q = e
    for q in range(m):
        seen[draws[q]] = -1
    return rounds


def round_stamp(r):
    """The byte stamp of round ``r >= 1`` (1..255); the marks are cleared when it comes back to 1."""
    return (r - 1) % 255 + 1


@njit(cache=True, nogil=True)
def round_prepare(cols, arrays, t, n_moved, draws, r8):
    r"""Thread ``t`` before a round: clear its ``us[t]`` on the ``n_moved`` rows of its previous round's list
    ``moved[t]`` (added to ``z`` since), then set its ``marks[t, i] = r8`` on the rows of this round's
    columns ``draws`` (``arrays`` a :class:`RoundArrays`)."""
    indptr, indices, _ = cols
    u = arrays.us[t]
    moved = arrays.moved[t]
    mark = arrays.marks[t]
    for q in range(n_moved):
        u[moved[q]] = 0.0
    for q in range(draws.shape[0]):
        jl = draws[q]
        for p in range(indptr[jl], indptr[jl + 1]):
            mark[indices[p]] = r8


@njit(cache=True, nogil=True)
def owned_cd_steps(loss, cols, col0, labels, z, w, draws, beta, reg, arrays, t, r8):
    r"""Thread ``t``'s proximal steps of a round on its drawn columns (module docstring).

    For local column ``jl`` (global ``j = col0 + jl``), with ``omega_i`` the threads whose mark of
    row ``i`` is ``r8``: ``g = 1/n sum_i c_i phi'(z_i + omega_i u_i) x_ij + l2 w_j``, ``M = beta/n
    sum_i omega_i c_i x_ij^2 + l2``, ``w_j <- soft_threshold(w_j - g/M, l1/M)``, ``u += (w_j' -
    w_j) X_{:j}`` (``u = us[t]``, ``arrays`` a :class:`RoundArrays`). ``z`` is read only; ``w``
    written only at the thread's own columns. A row moved for the first time in the round goes to
    ``moved[t]`` (``listed[t, i] = r8``). Returns the number of rows in ``moved[t]``.
    """
    indptr, indices, data = cols
    y, c = labels
    l2, l1, n_total, _ = reg
    marks = arrays.marks
    T = marks.shape[0]
    u = arrays.us[t]
    listed = arrays.listed[t]
    moved = arrays.moved[t]
    k = 0
    for q in range(draws.shape[0]):
        jl = draws[q]
        j = col0 + jl
        g = 0.0
        h = 0.0
        for p in range(indptr[jl], indptr[jl + 1]):
            i = indices[p]
            ci = c[i]
            if ci > 0.0:
                om = 0
                for s in range(T):
                    if marks[s, i] == r8:
                        om += 1
                x = np.float64(data[p])
                g += ci * loss_deriv(loss, z[i] + om * u[i], y[i]) * x
                h += om * ci * x * x
        mj = beta * h / n_total + l2
        if not mj > 0.0:
            continue
        wj = w[j]
        wn = prox_coord(wj, g / n_total, mj, l2, l1)
        d = wn - wj
        if d == 0.0:
            continue
        w[j] = wn
        for p in range(indptr[jl], indptr[jl + 1]):
            i = indices[p]
            u[i] += d * np.float64(data[p])
            if listed[i] != r8:
                listed[i] = r8
                moved[k] = i
                k += 1
    return k


@njit(cache=True, nogil=True)
def round_combine(arrays, n_moved, z, r8, lo, hi):
    r"""Add a round's changes of the rows ``lo <= i < hi`` to ``z``: ``z_i += us[s, i]`` over the threads
    ``s`` that moved row ``i`` (``listed[s, i] == r8``), in order -- the same sum whatever the
    threads' timing. ``moved[s, :n_moved[s]]`` are the rows thread ``s`` moved; a row is added at
    its first appearance, in the list of the lowest thread that moved it."""
    us, listed, moved = arrays.us, arrays.listed, arrays.moved
    T = listed.shape[0]
    for s in range(T):
        for q in range(n_moved[s]):
            i = moved[s, q]
            if i < lo or i >= hi:
                continue
            first = 0
            while listed[first, i] != r8:
                first += 1
            if first != s:
                continue
            for v in range(s, T):
                if listed[v, i] == r8:
                    z[i] += us[v, i]
