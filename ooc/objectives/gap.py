r"""Primal, dual and duality gap from the loss sums over row blocks.

::

    P(w) = 1/n sum_i c_i phi(x_i . w, y_i) + l2/2 ||w||^2 + l1 ||w||_1
    D(a) = -1/n sum_i c_i phi*(-a_i / c_i, y_i) - l2 g*(v),   v = 1/(l2 n) sum_i a_i x_i
    gap  = P(grad g*(v)) - D(a) >= 0

:func:`gap_from_sums` assembles ``P``, ``D`` and the gap from the loss sums over the blocks
(the block kernels sum them; :mod:`ooc.kernels.gap` streams them over an iterable of
blocks). ``n_total`` is the number of examples of the whole data set.

Convergence always means ``gap <= tol * max(1, |P|)`` (:meth:`GapResult.converged`).
"""

import math
from typing import NamedTuple

from ooc.objectives.penalties import conj_value, primal_value, require_l2

__all__ = ["GapResult", "gap_from_sums"]


class GapResult(NamedTuple):
    """Primal and dual objective values and their gap ``primal - dual``."""

    primal: float
    dual: float
    gap: float

    @property
    def relative_gap(self):
        """``gap / max(1, |primal|)``, the figure compared with ``tol``."""
        return self.gap / max(1.0, abs(self.primal))

    def converged(self, tol):
        """``gap <= tol * max(1, |primal|)``."""
        return bool(self.relative_gap <= tol)


def gap_from_sums(primal_sum, dual_sum, w, v, penalty, n_total, bias=0.0):
    r"""Assemble a :class:`GapResult` from the loss sums over all blocks.

    ``P = primal_sum / n + penalty(w)`` and ``D = dual_sum / n - l2 g*(v)``, with
    ``primal_sum = sum_i c_i phi(x_i . w)`` and ``dual_sum = sum_i -c_i phi*(-a_i/c_i)``
    (from the block functions, or the fused sums of
    :func:`ooc.kernels.sdca.sdca_pass_gap`).

    Parameters
    ----------
    primal_sum, dual_sum : float
    w, v : ndarray
    penalty : ElasticNet
        Needs ``l2 > 0``.
    n_total : int
    bias : float, default 0
    """
    require_l2(penalty, "the duality gap")
    n = float(n_total)
    p = primal_sum / n + primal_value(penalty, w, bias)
    d = dual_sum / n - conj_value(penalty, v, bias)
    return GapResult(p, d, p - d if math.isfinite(d) else math.inf)
