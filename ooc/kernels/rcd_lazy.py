r"""Adaptive samplings of randomized coordinate descent at O(log m) per step: lazily refreshed scores.

The samplings of Perekrestenko, Cevher & Jaggi (2017) (``adaptive``, ``ada-gap``,
``supportSet-uniform``, ``ada-uniform``) redraw from scores that every step changes: a dual
step on example ``i`` moves ``w`` on the features of ``x_i`` and with it the margin of every
example sharing one; recomputing all of them is a pass over the block per step (the
paper's ``O(n nnz)`` per epoch). Here a block's scores live in two sum trees
(:mod:`ooc.kernels.sumtree`) and

* after each step, the score of the coordinate just moved is recomputed (``O(nnz_i)``, its
  own margin) and its leaf updated (``O(log m)``): the coordinate whose score changes most;
* every ``refresh`` steps (and on entering the block) all scores are recomputed and the
  trees rebuilt (``O(nnz_block + m)``), so the other scores are at most ``refresh`` steps old.

With ``refresh = m / R`` an epoch costs about ``R + 3`` passes over the data instead of ``m``.

Every draw mixes in the uniform distribution with weight ``floor``::

    p_i = floor / m + (1 - floor) [(1 - s) a_i / sum a + s b_i / sum b]

(``a``, ``b``, ``s`` from :func:`ooc.kernels.samplings.score_pair` and
:func:`~ooc.kernels.samplings.second_share`; a tree of total 0 gives its share to the other
one, both 0 to the uniform). So ``p_i >= floor / m`` for every coordinate: a coordinate
whose score is stale, or 0 from rounding, or that a class weight makes look optimal, is
still visited and the run keeps the convergence guarantee of uniform sampling (slowed by at
most ``1 / floor``). One uniform ``u`` in [0, 1) picks both the component and the coordinate.
"""

from numba import njit

from ooc.kernels.rcd import (
    _KAPPA_EPS,
    _col_grad,
    _dual_gap_i,
    _prox_step,
    _row_margin,
    primal_coord_gap,
    primal_kappa,
    prox_residual,
)
from ooc.kernels.samplings import score_pair, second_share, wants_gap
from ooc.kernels.sdca import dual_apply
from ooc.kernels.sumtree import tree_draw, tree_update
from ooc.objectives.losses import dual_step, loss_deriv

__all__ = ["lazy_draw", "dual_lazy_pass", "primal_lazy_pass"]


@njit(cache=True, nogil=True)
def lazy_draw(tree_a, tree_b, share, floor, m, u):
    """The coordinate picked by ``u`` in [0, 1) under the mixture of the module docstring."""
    if u < floor:
        i = int(u / floor * m)
        return i if i < m else m - 1
    u = (u - floor) / (1.0 - floor)
    ta = tree_a[1]
    tb = tree_b[1]
    pa = 1.0 - share if ta > 0.0 else 0.0
    pb = share if tb > 0.0 else 0.0
    if not pa + pb > 0.0:
        i = int(u * m)
        return i if i < m else m - 1
    u *= pa + pb
    if u < pa:
        return tree_draw(tree_a, u / pa * ta)
    return tree_draw(tree_b, min((u - pa) / pb, 1.0) * tb)


@njit(cache=True, nogil=True)
def _set_leaf(tree_a, tree_b, i, pair):
    tree_update(tree_a, i, pair[0])
    tree_update(tree_b, i, pair[1])


@njit(cache=True, nogil=True)
def _dual_pair(loss, rows, labels, alpha, w, rownorm, reg, sampling, i):
    indptr, indices, data = rows
    y, c = labels
    n_total, bias = reg[2], reg[3]
    z = _row_margin(indptr, indices, data, i, w, bias)
    a = alpha[i]
    kap = abs(a + c[i] * loss_deriv(loss, z, y[i]))
    if kap <= _KAPPA_EPS * (1.0 + abs(a)):
        kap = 0.0
    g = _dual_gap_i(loss, z, a, y[i], c[i], n_total) if wants_gap(sampling) else 0.0
    return score_pair(sampling, g, kap, rownorm[i])


@njit(cache=True, nogil=True)
def dual_lazy_pass(loss, rows, labels, alpha, v, w, rownorm, reg, sampling, draws):
    r"""Dual coordinate steps (exact :func:`~ooc.objectives.losses.dual_step`) under a lazily
    refreshed per-step sampling.

    ``rows``, ``labels``, ``reg`` as in :func:`ooc.kernels.sdca.sdca_pass`; ``rownorm`` the
    rows' norms ``||x_i||`` (bias included); ``sampling`` a NamedTuple of
    :mod:`ooc.kernels.samplings`; ``draws`` a :class:`~ooc.kernels.samplings.LazyDraws`.
    Returns the nonzeros visited (steps, rescorings and refreshes).
    """
    indptr, indices, data = rows
    y, c = labels
    l2, l1, n_total, bias = reg
    uniforms, tree_a, tree_b, refresh, floor = draws
    inv_l2n = 1.0 / (l2 * n_total)
    k = l1 / l2
    m = alpha.shape[0]
    share = second_share(sampling)
    work = 0
    for t in range(uniforms.shape[0]):
        if t % refresh == 0:
            for i in range(m):
                _set_leaf(tree_a, tree_b, i, _dual_pair(loss, rows, labels, alpha, w, rownorm, reg, sampling, i))
            work += indptr[m] + m
        i = lazy_draw(tree_a, tree_b, share, floor, m, uniforms[t])
        z = _row_margin(indptr, indices, data, i, w, bias)
        q = (rownorm[i] * rownorm[i]) * inv_l2n
        d = dual_step(loss, alpha[i], z, y[i], q, c[i])
        nnz = indptr[i + 1] - indptr[i]
        work += nnz
        if d != 0.0:
            alpha[i] += d
            dual_apply(indptr, indices, data, i, d, v, w, inv_l2n, k, bias)
            _set_leaf(tree_a, tree_b, i, _dual_pair(loss, rows, labels, alpha, w, rownorm, reg, sampling, i))
            work += 2 * nnz
    return work


@njit(cache=True, nogil=True)
def _primal_pair(loss, cols, col0, jl, labels, z, w, colnorm, mj, reg, radius, sampling):
    l2, l1, n_total = reg[0], reg[1], reg[2]
    j = col0 + jl
    r = _col_grad(loss, cols, jl, labels, z, n_total)
    if l2 > 0.0 or not mj > 0.0:
        kap = primal_kappa(w[j], r, l2, l1, radius)
    else:
        kap = prox_residual(w[j], r, l1, mj)
    if kap <= _KAPPA_EPS * (1.0 + abs(w[j])):
        kap = 0.0
    g = primal_coord_gap(w[j], r, l2, l1, radius) if wants_gap(sampling) else 0.0
    return score_pair(sampling, g, kap, colnorm[jl])


@njit(cache=True, nogil=True)
def primal_lazy_pass(loss, cols, col0, labels, z, w, mcoef, colnorm, reg, radius, sampling, draws):
    r"""Primal prox steps (:func:`ooc.kernels.rcd.primal_cd_pass`) on a resident CSC block under a
    lazily refreshed per-step sampling (scores from ``r_j``, ``G_j``, ``kappa_j`` and
    ``||a_j|| = colnorm[j]``; ``draws`` as in :func:`dual_lazy_pass`). Returns the nonzeros visited.
    """
    uniforms, tree_a, tree_b, refresh, floor = draws
    indptr = cols.indptr
    m = indptr.shape[0] - 1
    share = second_share(sampling)
    work = 0
    for t in range(uniforms.shape[0]):
        if t % refresh == 0:
            for jl in range(m):
                _set_leaf(tree_a, tree_b, jl, _primal_pair(loss, cols, col0, jl, labels, z, w, colnorm, mcoef[jl], reg,
                                                           radius, sampling))
            work += indptr[m] + m
        jl = lazy_draw(tree_a, tree_b, share, floor, m, uniforms[t])
        d = _prox_step(loss, cols, jl, col0 + jl, labels, z, w, mcoef[jl], reg)
        nnz = indptr[jl + 1] - indptr[jl]
        work += nnz
        if d != 0.0:
            _set_leaf(tree_a, tree_b, jl, _primal_pair(loss, cols, col0, jl, labels, z, w, colnorm, mcoef[jl], reg,
                                                       radius, sampling))
            work += 2 * nnz
    return work
