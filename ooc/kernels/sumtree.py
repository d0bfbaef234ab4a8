r"""A sum tree in a flat array: O(log m) update and draw, O(m) build (``tree[1]`` is the total).

The array has length ``2 cap`` (``cap`` a power of two, see
:func:`ooc.schedule.sampling.tree_capacity`): leaves at ``cap .. 2 cap - 1``, inner node ``k``
holds the sum of nodes ``2k`` and ``2k + 1``. The per-step samplings of :mod:`ooc.kernels.rcd`
draw from it; :class:`ooc.schedule.sampling.SumTree` wraps it for Python callers.
"""

from numba import njit

__all__ = ["tree_build", "tree_update", "tree_total", "tree_draw", "tree_draw_many"]


@njit(cache=True, nogil=True)
def tree_build(tree, weights):
    """Fill ``tree`` (length ``2 cap``) from ``weights`` (``m <= cap`` values >= 0) in O(cap)."""
    cap = tree.shape[0] // 2
    m = weights.shape[0]
    for i in range(cap):
        tree[cap + i] = weights[i] if i < m else 0.0
    for node in range(cap - 1, 0, -1):
        tree[node] = tree[2 * node] + tree[2 * node + 1]
    tree[0] = 0.0


@njit(cache=True, nogil=True)
def tree_update(tree, i, weight):
    """Set leaf ``i`` to ``weight`` and recompute its ancestors (exact sums, no drift): O(log m)."""
    cap = tree.shape[0] // 2
    node = cap + i
    tree[node] = weight
    node //= 2
    while node >= 1:
        tree[node] = tree[2 * node] + tree[2 * node + 1]
        node //= 2


@njit(cache=True, nogil=True)
def tree_total(tree):
    return tree[1]


@njit(cache=True, nogil=True)
def tree_draw(tree, u):
    """The leaf ``i`` with ``sum_{l<i} w_l <= u < sum_{l<=i} w_l`` (``0 <= u < total``): O(log m).

    Never returns a leaf of weight 0 while the total is positive (a ``u`` at or past the
    total from rounding lands on the last positive leaf).
    """
    cap = tree.shape[0] // 2
    node = 1
    if u < 0.0:
        u = 0.0
    while node < cap:
        left = 2 * node
        wl = tree[left]
        wr = tree[left + 1]
        if wr <= 0.0 or (u < wl and wl > 0.0):
            node = left
        else:
            u -= wl
            node = left + 1
    return node - cap


@njit(cache=True, nogil=True)
def tree_draw_many(tree, uniforms, out):
    """``out[t] = tree_draw(tree, uniforms[t] * total)`` for uniforms in [0, 1)."""
    total = tree[1]
    for t in range(uniforms.shape[0]):
        out[t] = tree_draw(tree, uniforms[t] * total)
