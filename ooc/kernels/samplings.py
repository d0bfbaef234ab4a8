r"""The per-step coordinate samplings of randomized coordinate descent, one NamedTuple type each.

A sampling scores every coordinate; the lazy passes of :mod:`ooc.kernels.rcd_lazy` keep the
scores in sum trees, rescore the coordinate a step moved and the whole block a few times a
pass, and draw a coordinate with probability proportional to its score. Like the losses of
:mod:`ooc.objectives.losses`, a sampling is a small NamedTuple and the generic functions
below (``wants_gap``, ``step_score``, ``mix_scores``) are replaced at compile time by the
implementation registered for its class (``numba.extending.overload``): Numba compiles one
specialization of the pass per sampling type, with no branch on the sampling inside the
loop. A new sampling is a class and one :func:`_register` call.

=======================  ======================================================================
``AdaGap()``             ``p_i ~ max(G_i, 0)``, the coordinate-wise duality gap
``Adaptive()``           ``p_i ~ kappa_i ||a_i||``
``SupportSetUniform()``  uniform on ``{i : kappa_i != 0}``
``AdaUniform(sigma)``    ``sigma/m_t 1[kappa_i != 0] + (1 - sigma) kappa_i ||a_i|| / sum``
=======================  ======================================================================

(The names, formulas and references: :mod:`ooc.schedule.sampling`.)
"""

from typing import NamedTuple

import numpy as np
from numba import njit
from numba.extending import overload

__all__ = [
    "AdaGap",
    "Adaptive",
    "SupportSetUniform",
    "AdaUniform",
    "wants_gap",
    "step_score",
    "mix_scores",
    "score_pair",
    "second_share",
    "LazyDraws",
]


class AdaGap(NamedTuple):
    """``p_i ~ G_i`` (clipped at 0), recomputed after every step."""


class Adaptive(NamedTuple):
    """``p_i ~ |kappa_i| ||a_i||``, recomputed after every step."""


class SupportSetUniform(NamedTuple):
    """Uniform on the support set ``{i : kappa_i != 0}``, recomputed after every step."""


class AdaUniform(NamedTuple):
    """``sigma`` times supportSet-uniform plus ``1 - sigma`` times adaptive (a float ``sigma``)."""

    sigma: float = 0.5


class LazyDraws(NamedTuple):
    r"""The draws of a lazily refreshed pass (:mod:`ooc.kernels.rcd_lazy`) and its scratch.

    ``uniforms`` (steps,) in [0, 1), one per step; ``tree_a``, ``tree_b`` (``2 cap`` float64)
    the sum trees (:mod:`ooc.kernels.sumtree`) of the two scores of :func:`score_pair`;
    ``refresh`` (int) the steps between two full rescorings of the block; ``floor`` (float in
    (0, 1)) the probability of a uniform draw, which bounds every ``p_i >= floor / m``.
    """

    uniforms: np.ndarray
    tree_a: np.ndarray
    tree_b: np.ndarray
    refresh: int
    floor: float


# Generic functions. In Numba code the overloads below replace them at compile time by the
# implementation registered for the sampling class.


def wants_gap(sampling):
    """Whether the score reads the coordinate-wise gap ``G_i`` (a compile-time constant)."""
    return _IMPLS[type(sampling)]["wants_gap"]


def step_score(sampling, gap, kappa, norm):
    """A coordinate's score from its gap (0 unless :func:`wants_gap`), ``kappa`` and ``||a_i||``."""
    return _IMPLS[type(sampling)]["score"](sampling, gap, kappa, norm)


def mix_scores(sampling, scores, kappa_norm, m):
    """Rewrite the ``m`` scores in place once all are known (a no-op for most samplings)."""
    _IMPLS[type(sampling)]["mix"](sampling, scores, kappa_norm, m)


def score_pair(sampling, gap, kappa, norm):
    """A coordinate's two scores ``(a_i, b_i)``: the sampling draws from ``a`` with probability
    ``1 - second_share`` and from ``b`` otherwise (before the uniform floor)."""
    return _IMPLS[type(sampling)]["pair"](sampling, gap, kappa, norm)


def second_share(sampling):
    """The probability of drawing from the second score ``b`` (0 but for ``ada-uniform``)."""
    return _IMPLS[type(sampling)]["share"](sampling)


_IMPLS = {}  # sampling class -> {"wants_gap": bool, "score", "mix", "pair", "share": njit fns}


def _register(cls, wants, score, mix, pair, share):
    _IMPLS[cls] = {"wants_gap": wants, "score": score, "mix": mix, "pair": pair, "share": share}


def _impl(sampling_type, what):
    impls = _IMPLS.get(getattr(sampling_type, "instance_class", None))
    return None if impls is None else impls[what]


@overload(wants_gap)
def _ol_wants_gap(sampling):
    impls = _IMPLS.get(getattr(sampling, "instance_class", None))
    if impls is None:
        return None
    if impls["wants_gap"]:
        return lambda sampling: True
    return lambda sampling: False


@overload(step_score)
def _ol_step_score(sampling, gap, kappa, norm):
    fn = _impl(sampling, "score")
    if fn is None:
        return None

    def impl(sampling, gap, kappa, norm):
        return fn(sampling, gap, kappa, norm)

    return impl


@overload(mix_scores)
def _ol_mix_scores(sampling, scores, kappa_norm, m):
    fn = _impl(sampling, "mix")
    if fn is None:
        return None

    def impl(sampling, scores, kappa_norm, m):
        fn(sampling, scores, kappa_norm, m)

    return impl


@overload(score_pair)
def _ol_score_pair(sampling, gap, kappa, norm):
    fn = _impl(sampling, "pair")
    if fn is None:
        return None

    def impl(sampling, gap, kappa, norm):
        return fn(sampling, gap, kappa, norm)

    return impl


@overload(second_share)
def _ol_second_share(sampling):
    fn = _impl(sampling, "share")
    if fn is None:
        return None

    def impl(sampling):
        return fn(sampling)

    return impl


@njit(cache=True, nogil=True)
def _gap_score(sampling, gap, kappa, norm):
    return max(gap, 0.0)


@njit(cache=True, nogil=True)
def _kappa_score(sampling, gap, kappa, norm):
    return kappa * norm


@njit(cache=True, nogil=True)
def _support_score(sampling, gap, kappa, norm):
    return 1.0 if kappa > 0.0 else 0.0


@njit(cache=True, nogil=True)
def _no_mix(sampling, scores, kappa_norm, m):
    return


@njit(cache=True, nogil=True)
def _ada_uniform_mix(sampling, scores, kappa_norm, m):
    """``sigma/m_t 1[kappa != 0] + (1 - sigma) kappa ||a|| / sum`` in place (``scores`` holds
    the support indicator on entry)."""
    sigma = sampling.sigma
    support = 0.0
    total = 0.0
    for i in range(m):
        support += scores[i]
        total += kappa_norm[i]
    for i in range(m):
        s = 0.0
        if scores[i] > 0.0:
            s = sigma / support
            if total > 0.0:
                s += (1.0 - sigma) * kappa_norm[i] / total
        scores[i] = s


@njit(cache=True, nogil=True)
def _gap_pair(sampling, gap, kappa, norm):
    return max(gap, 0.0), 0.0


@njit(cache=True, nogil=True)
def _kappa_pair(sampling, gap, kappa, norm):
    return kappa * norm, 0.0


@njit(cache=True, nogil=True)
def _support_pair(sampling, gap, kappa, norm):
    return (1.0 if kappa > 0.0 else 0.0), 0.0


@njit(cache=True, nogil=True)
def _ada_uniform_pair(sampling, gap, kappa, norm):
    """supportSet-uniform in ``a``, adaptive in ``b``: eq. 18 is their ``sigma : 1 - sigma`` mixture."""
    return (1.0 if kappa > 0.0 else 0.0), kappa * norm


@njit(cache=True, nogil=True)
def _no_share(sampling):
    return 0.0


@njit(cache=True, nogil=True)
def _ada_uniform_share(sampling):
    return 1.0 - sampling.sigma


_register(AdaGap, True, _gap_score, _no_mix, _gap_pair, _no_share)
_register(Adaptive, False, _kappa_score, _no_mix, _kappa_pair, _no_share)
_register(SupportSetUniform, False, _support_score, _no_mix, _support_pair, _no_share)
_register(AdaUniform, False, _support_score, _ada_uniform_mix, _ada_uniform_pair, _ada_uniform_share)
