r"""Coordinate samplings for randomized coordinate descent, and a sum tree for O(log n) draws.

The samplings of ``--sampling`` (Perekrestenko, Cevher & Jaggi 2017, Sec. 3.4; the fixed
importance sampling of Csiba & Richtarik 2016, eq. 14):

=====================  =======================================================================
``uniform``            ``p_i = 1/m``
``importance``         fixed, computed once. Smooth loss with ``l2 > 0`` (face-off eq. 14):
                       ``p_i ~ beta u_i + lambda n`` with ``u_i = ||a_i||^2`` the squared norm
                       of coordinate ``i``'s data (a row ``x_i`` for dual RCD, a column
                       ``X_{:j}`` for primal RCD; weighted by the example weights ``c``) and
                       ``beta`` the loss smoothness; i.e. ``p_i ~ ||a_i||^2 + lambda n gamma``
                       with ``gamma = 1/beta``. Non-smooth loss (hinge, dual side) or pure L1
                       (primal side): the adaptive-sampling paper's ``p_i ~ L_i ||a_i||`` with
                       ``L_i`` the Lipschitz constant of ``g_i^*`` (the box size ``c_i`` for the
                       hinge dual, the Lipschitzing radius ``B`` (the same for all) for Lasso).
``supportSet-uniform`` uniform on the support set ``{i : kappa_i != 0}`` (eq. 16), recomputed
                       after every step
``adaptive``           ``p_i ~ |kappa_i| ||a_i||`` (eq. 17), after every step
``ada-uniform``        ``sigma/m_t 1[kappa_i != 0] + (1 - sigma) adaptive`` (eq. 18), sigma = 1/2
``ada-gap``            ``p_i ~ G_i``, the coordinate-wise duality gap (Sec. 3.2.1), after
                       every step
``gap-per-epoch``      ``p_i ~ G_i`` computed once at the start of the epoch (mixed with the
                       uniform distribution, weight ``gap_floor``: :func:`gap_weights`); primal
                       RCD on pure L1: the proximal-step score below, times ``||a_i||``
``working-set``        rcd-primal, pure L1 only: not random. Each epoch picks the support of
                       ``w`` and the features nearest to violating optimality (skglm, celer)
                       and runs cyclic passes over them (:mod:`ooc.solvers.rcd`)
=====================  =======================================================================

``kappa_i`` is the dual residual (Def. 2.3) and ``G_i`` the coordinate-wise gap (eq. 4); the
kernels in :mod:`ooc.kernels.rcd` compute both. One exception, primal RCD on pure L1: there the
Lipschitzed ``kappa_j`` jumps between ``|w_j|`` and ``B - |w_j|`` at ``|r_j| = l1``, where every
support coordinate sits at the optimum, so rounding alone decides which half of the support is
starved (``adaptive`` took 4x uniform's epochs on a Lasso). ``kappa_j`` is there the length of
the coordinate's proximal step, ``|S(w_j - r_j / M_j, l1 / M_j) - w_j|``
(:func:`ooc.kernels.rcd.prox_residual`): zero exactly at the coordinate's optimality and
continuous (Nutini et al. 2015's Gauss-Southwell-q score); ``gap-per-epoch`` weighs by it too, as
``G_j`` has the same jump (``B (|r_j| - l1)_+``). The per-step ("adaptive") samplings keep
the block's scores in sum trees, rescore the coordinate just moved after each step and the
whole block every ``m / REFRESHES_PER_PASS`` steps (:mod:`ooc.kernels.rcd_lazy`): ``O(nnz_i +
log m)`` per step and a few passes per epoch, instead of the paper's pass per step (``O(n
nnz)`` per epoch, Table 1). They mix in the uniform distribution with weight ``gap_floor``
(default :data:`STEP_FLOOR`), so that ``p_i >= floor / m``: no coordinate starves.

Out of core the draw is two-level (see :mod:`ooc.solvers.rcd`): a block ``b`` with
probability ``P(b)`` (the total weight of its coordinates), then a coordinate inside the
resident block with probability ``P(i | b) = p_i / P(b)``, so that the marginal is the
paper's ``p_i = P(b) P(i | b)``. :func:`block_counts` draws how many of the epoch's updates
fall in each block (multinomial), :class:`SumTree` draws inside a block.

Every random number is a pure function of ``(seed, epoch, block)``, so a resumed run draws
exactly what an uninterrupted one drew.
"""

from __future__ import annotations

import numpy as np

from ooc.kernels.samplings import AdaGap, Adaptive, AdaUniform, LazyDraws, SupportSetUniform
from ooc.kernels.sumtree import tree_build, tree_draw, tree_draw_many, tree_update

SAMPLINGS = ("uniform", "importance", "supportSet-uniform", "adaptive", "ada-uniform", "ada-gap", "gap-per-epoch")
#: rcd-primal's greedy (not random) choice of coordinates for pure L1
WORKING_SET = "working-set"
#: every ``--sampling`` value
SAMPLING_CHOICES = SAMPLINGS + (WORKING_SET,)
#: samplings whose distribution is recomputed after every coordinate step
PER_STEP = ("supportSet-uniform", "adaptive", "ada-uniform", "ada-gap")
#: samplings that need the coordinate-wise gaps of the state at the start of an epoch
GAP_BASED = ("gap-per-epoch",) + PER_STEP

#: default sigma of ``ada-uniform`` (the paper's "safe" choice)
ADA_UNIFORM_SIGMA = 0.5
#: full rescorings of a block per ``m`` steps in it (:mod:`ooc.kernels.rcd_lazy`): each costs one
#: pass over the block, so an epoch of a per-step sampling costs about this many passes more
REFRESHES_PER_PASS = 8
#: default probability of a uniform draw under the per-step samplings (every ``p_i >= floor / m``)
STEP_FLOOR = 0.1


def normalize_sampling(name: str) -> str:
    """The canonical spelling of a sampling name (case and ``_`` / ``-`` insensitive)."""
    key = str(name).strip().lower().replace("_", "-")
    for s in SAMPLING_CHOICES:
        if s.lower() == key:
            return s
    raise ValueError(f"--sampling {name!r}: expected one of {', '.join(SAMPLING_CHOICES)}")


def step_sampling(name: str, sigma: float = ADA_UNIFORM_SIGMA):
    """The kernels' NamedTuple of a per-step sampling (:mod:`ooc.kernels.samplings`)."""
    name = normalize_sampling(name)
    if name == "ada-gap":
        return AdaGap()
    if name == "adaptive":
        return Adaptive()
    if name == "supportSet-uniform":
        return SupportSetUniform()
    if name == "ada-uniform":
        return AdaUniform(float(sigma))
    raise ValueError(f"--sampling {name!r} is not a per-step sampling ({', '.join(PER_STEP)})")


def lazy_draws(uniforms: np.ndarray, m: int, floor: float = STEP_FLOOR,
               refreshes: int = REFRESHES_PER_PASS) -> LazyDraws:
    """The :class:`~ooc.kernels.samplings.LazyDraws` of a block of ``m`` coordinates."""
    if not 0.0 < floor < 1.0:
        raise ValueError(f"gap_floor {floor!r}: the per-step samplings need a uniform share in (0, 1)")
    cap = 2 * tree_capacity(m)
    refresh = max(1, -(-int(m) // max(1, int(refreshes))))
    return LazyDraws(np.ascontiguousarray(uniforms, dtype=np.float64), np.zeros(cap), np.zeros(cap), refresh,
                     float(floor))


def gap_weights(gaps: np.ndarray, floor: float = STEP_FLOOR) -> np.ndarray:
    """``gap-per-epoch``'s in-block weights: ``(1 - floor) G_i / sum G + floor / m`` (``G`` clipped at 0).

    The uniform share keeps every coordinate drawn with probability at least ``floor / m``
    (as for the per-step samplings): pure ``p_i ~ G_i`` spends most of an epoch's draws on
    the few coordinates with the largest gap of its start, which one exact step has already
    closed (a Lasso took 45 epochs to 1e-8 against uniform's 34; with the floor, 26).
    """
    g = np.maximum(np.asarray(gaps, dtype=np.float64), 0.0)
    total = g.sum()
    if not (total > 0) or not np.isfinite(total):
        return np.full(len(g), 1.0 / max(1, len(g)))
    return (1.0 - floor) * g / total + floor / len(g)


# -------------------------------------------------------------------------------------------------
# sum tree: leaves hold non-negative weights, inner nodes the sums of their children
# -------------------------------------------------------------------------------------------------
def tree_capacity(m: int) -> int:
    """Leaves of a tree holding ``m`` weights (the next power of two)."""
    cap = 1
    while cap < max(1, int(m)):
        cap *= 2
    return cap


class SumTree:
    """A sum tree over ``m`` non-negative weights: O(log m) update and draw, O(m) build.

    Examples
    --------
    >>> t = SumTree([1.0, 0.0, 3.0])
    >>> t.total
    4.0
    >>> t.draw(3.5)
    2
    """

    def __init__(self, weights):
        w = np.ascontiguousarray(weights, dtype=np.float64)
        if w.ndim != 1 or (w < 0).any() or not np.isfinite(w).all():
            raise ValueError("sum tree weights must be a 1-D array of finite values >= 0")
        self.m = len(w)
        self.tree = np.zeros(2 * tree_capacity(self.m))
        tree_build(self.tree, w)

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def weight(self, i: int) -> float:
        return float(self.tree[len(self.tree) // 2 + i])

    def update(self, i: int, weight: float) -> None:
        if not 0 <= i < self.m:
            raise IndexError(i)
        if not (weight >= 0 and np.isfinite(weight)):
            raise ValueError("weights must be finite and >= 0")
        tree_update(self.tree, int(i), float(weight))

    def draw(self, u: float) -> int:
        """The leaf at cumulative weight ``u`` in ``[0, total)``."""
        return int(tree_draw(self.tree, float(u)))

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` i.i.d. draws with probabilities ``w_i / total``."""
        if self.total <= 0:
            raise ValueError("cannot draw from a sum tree of total weight 0")
        out = np.empty(int(size), dtype=np.int64)
        tree_draw_many(self.tree, rng.random(int(size)), out)
        return out


def draw_in_block(weights: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Draws (local indices) with probabilities ``weights / sum(weights)``; uniform if all are 0."""
    w = np.ascontiguousarray(weights, dtype=np.float64)
    if not (w.sum() > 0):
        w = np.ones_like(w)
    tree = np.zeros(2 * tree_capacity(len(w)))
    tree_build(tree, w)
    out = np.empty(len(uniforms), dtype=np.int64)
    tree_draw_many(tree, np.ascontiguousarray(uniforms, dtype=np.float64), out)
    return out


# -------------------------------------------------------------------------------------------------
# block level
# -------------------------------------------------------------------------------------------------
def block_probs(base: np.ndarray, mass: np.ndarray | None = None, floor: float = 0.1) -> np.ndarray:
    """Block probabilities: ``base`` normalised, or ``(1 - floor) mass/sum + floor base/sum``.

    ``base`` are the blocks' total fixed weights (their share under the within-block
    sampling); ``mass`` their duality-gap mass. The floor keeps every block with base weight
    visited with probability at least ``floor`` times its base share (no block starves).
    """
    base = np.asarray(base, dtype=np.float64)
    pb = base / base.sum() if base.sum() > 0 else np.full(len(base), 1.0 / len(base))
    if mass is None:
        return pb
    mass = np.maximum(np.asarray(mass, dtype=np.float64), 0.0)
    if not (mass.sum() > 0) or not np.isfinite(mass.sum()):
        return pb
    return (1.0 - floor) * mass / mass.sum() + floor * pb


def block_counts(probs: np.ndarray, n_draws: int, seed: int, epoch: int) -> np.ndarray:
    """How many of an epoch's ``n_draws`` i.i.d. coordinate draws fall in each block (multinomial)."""
    p = np.asarray(probs, dtype=np.float64)
    p = p / p.sum()
    return np.random.default_rng([seed, epoch, 2]).multinomial(int(n_draws), p).astype(np.int64)


def block_uniforms(m: int, seed: int, epoch: int, block: int) -> np.ndarray:
    """The ``m`` uniforms that pick the coordinates of ``block`` in ``epoch``."""
    return np.random.default_rng([seed, epoch, 3, block]).random(int(m))


def visit_order(n_blocks: int, seed: int, epoch: int) -> np.ndarray:
    """Seeded shuffled order of the blocks of an epoch."""
    return np.random.default_rng([seed, epoch, 4]).permutation(n_blocks).astype(np.int64)
