r"""An unregularized intercept (``--fit-intercept``, scikit-learn's ``fit_intercept``) with a certificate.

Problem: ``P(w, b) = 1/n sum_i c_i phi(x_i . w + b, y_i) + l2/2 ||w||^2 + l1 ||w||_1``, ``b`` free.
Its dual carries the constraint ``sum_i a_i = 0``, which coordinate steps on one ``a_i`` at
a time cannot keep. So ``b`` is held fixed during a pass (the kernels see the loss
``phi(z + b, y)``, :class:`ooc.objectives.losses.Offset`) and moved between passes, and the
certificate is built from the passes' duals:

* Lower bound. For any feasible duals ``a`` (``s = sum_i a_i``) and any ``b``, weak duality
  of the fixed-``b`` problem gives ``P(w, b) >= D_0(a) - b s / n`` (``D_0``: the dual without
  intercept), a line in ``b``. Two dual points with sums of opposite signs ``s_1 > 0 > s_2``
  mix into ``t a_1 + (1 - t) a_2`` with sum 0 (``t = -s_2 / (s_1 - s_2)``), feasible (the
  domains are convex) and, ``D_0`` being concave, with
  ``D_0 >= t D_0(a_1) + (1 - t) D_0(a_2)``: a lower bound of ``min P`` (the value where the
  two lines cross). :func:`lower_bound` takes the best pair among the passes' lines (the
  minimum of their upper envelope: a 1-D linear program whose optimum has two lines). The
  zero duals (sum 0, ``D_0 = 0`` for a loss whose minimum is 0) start the list, so the bound
  is never below 0 for such losses. At the optimum the lines are tangents of
  ``p(b) = min_w P(w, b)`` at the visited ``b``, and the bound closes as ``b`` brackets ``b*``.
* Update. After a pass at ``b``, the duals' sum ``s`` estimates ``-n p'(b)`` (for a smooth
  loss ``a_i = -c_i phi'(x_i . w + b)`` at the pass's fixed point), as well as the pass solved
  the problem at that ``b``. :func:`next_offset` moves ``b`` only once the fixed-``b`` gap is
  small against the decrease a step would bring, and then by a safeguarded root search on
  ``s``: secant steps aimed past the root until ``b*`` is bracketed, then regula falsi
  (Illinois), which visits both sides of ``b*`` so that the lines bracket it. The first pass
  starts at the intercept of ``w = 0`` (:func:`start_offset`). Measured cost: 0.9-2x the
  passes of LIBLINEAR's regularized bias (``scripts/bench_intercept.py``, docs/training.rst).

The state (``b``, the bracket, the lines) is in the checkpoint, so a resumed run takes the same
steps. Needs a smooth loss: the hinge's duals sit at the ends of their boxes and ``s`` does not
track ``p'(b)`` (measured: the search stalled); ``ooc.train`` refuses it.
"""

from __future__ import annotations

import math

import numpy as np

from ..store import layout as L

__all__ = ["LINES", "fresh_arrays", "start_offset", "start_offsets", "lower_bound", "add_line", "next_offset",
           "certify", "move_offsets"]

#: lines kept per problem: the zero duals', the pair that makes the bound, and the most recent
LINES = 32
#: b moves once the fixed-b gap is below this many times a safe Newton step's decrease: measured on
#: ridge, logistic and smooth hinge problems (3000 and 20000 rows, l2 1e-3 to 1e-5), 16 to 256 all
#: certify 1e-8 (64: 0.9-2x the passes of a regularized --bias 1), moving after every pass diverges
_GATE = 64.0
#: before b* is bracketed, a step at most this many times the previous one (100: some runs did not
#: certify in 300 passes that 10 certifies in 250)
_MAX_GROWTH = 10.0
#: a step aims this far past the estimated root: b then crosses b* and the lines bracket it
_PAST_ROOT = 1.3


def fresh_arrays(b0: np.ndarray, loss_min_is_zero: bool) -> dict:
    """The intercept's state for ``k = len(b0)`` problems (every entry finite: checkpoints refuse NaN):
    ``icpt_b`` (k,) the intercepts (``b0``, :func:`start_offsets`), ``icpt_last`` (k, 4, 3) the bracket of
    :func:`next_offset` (zeros: nothing measured), ``icpt_lines`` (k, LINES, 3) the lines
    ``(D_0, s / n, 1)`` (last entry 0: an empty slot; the zero duals' ``(0, 0)`` first when the
    loss's minimum is 0)."""
    k = len(b0)
    lines = np.zeros((k, LINES, 3))
    if loss_min_is_zero:
        lines[:, 0, 2] = 1.0
    return {"icpt_b": np.array(b0, dtype=np.float64), "icpt_last": np.zeros((k, 4, 3)), "icpt_lines": lines}


def start_offset(loss, labels: np.ndarray, weights: np.ndarray) -> float:
    r"""The intercept of the model ``w = 0``: ``argmin_b sum_j weights_j phi(b, labels_j)``.

    The first pass starts there (the label totals: for -1/+1 labels the two classes' weights;
    for regression the weighted mean and its weight, ``labels`` then holding the mean). The
    derivative is increasing in ``b``: bisection on ``[-30, 30]``, where a class absent from
    the data leaves the root (the logistic's would be infinite).
    """
    if weights.sum() <= 0:
        return 0.0
    lo, hi = -30.0, 30.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if float(np.dot(weights, loss.deriv(np.full(labels.shape, mid), labels))) > 0.0:
            hi = mid
        else:
            lo = mid
    return 0.5 * (lo + hi)


def start_offsets(pb, store, row_ptr: np.ndarray) -> np.ndarray:
    """Each problem's intercept of ``w = 0`` (:func:`start_offset`), from one read of the labels and
    weights of the rows ``row_ptr`` delimits (not of the rows themselves)."""
    regression = store.label_kind == L.REGRESSION
    k = pb.n_sub
    tot = np.zeros((k, 2))  # per problem: weights of labels +1 and -1, or sum c y and sum c
    for b in range(len(row_ptr) - 1):
        lo, hi = int(row_ptr[b]), int(row_ptr[b + 1])
        y = pb.block_labels(store.read_labels(lo, hi))
        c = pb.example_weights(y, store.read_weights(lo, hi))
        for j in range(k):
            yj = pb.sub_labels(y, j)
            tot[j] += (float(np.dot(c, yj)), float(c.sum())) if regression else \
                (float(c[yj > 0].sum()), float(c[yj < 0].sum()))
    if regression:
        return np.array([t[0] / t[1] if t[1] > 0 else 0.0 for t in tot])
    return np.array([start_offset(pb.loss, np.array([1.0, -1.0]), t) for t in tot])


def certify(extra: dict, c: int, p: float, d0: float, s: float) -> tuple[float, float]:
    """Problem ``c``'s certificate of a state: its line ``(D_0 = d0, s = sum a / n)`` joins the kept
    ones; returns the lower bound (:func:`lower_bound`) and the fixed-``b`` gap ``p - (d0 - b s)``
    (``p``: the problem's primal at its intercept ``b``), which :func:`next_offset` gates on."""
    lines = extra["icpt_lines"][c]
    add_line(lines, d0, s)
    return lower_bound(lines), p - (d0 - float(extra["icpt_b"][c]) * s)


def move_offsets(extra: dict, g: np.ndarray, inner_gap: np.ndarray, weight_sum: float, n: float, loss) -> None:
    """After an update pass or round: every problem's intercept for the next (:func:`next_offset`), from
    the duals' sums ``n g`` after it; the curvature bound is the loss's smoothness (1 for the hinge)
    times the mean example weight."""
    smooth = float(loss.smoothness)
    mean_c = weight_sum / n if weight_sum > 0 else 1.0
    bound = (smooth if np.isfinite(smooth) else 1.0) * mean_c
    b, last = extra["icpt_b"], extra["icpt_last"]
    for c in range(len(b)):
        b[c] = next_offset(float(b[c]), float(g[c]), float(inner_gap[c]), last[c], bound)


def add_line(lines: np.ndarray, d0: float, s: float) -> None:
    """Keep the line ``D_0 - b s`` of a pass in ``lines`` ((LINES, 3), in place): in an empty slot,
    else in place of the oldest line that is neither the first (the zero duals') nor one of the
    pair that makes the bound now (a run whose ``b`` rests for many passes on one side must not
    forget the other side's lines)."""
    empty = np.flatnonzero(lines[:, 2] == 0.0)
    if empty.size:
        lines[int(empty[0])] = (d0, s, 1.0)
        return
    keep = set(_best_pair(lines)[1]) | {0}
    slot = next(i for i in range(1, LINES) if i not in keep)
    rest = [i for i in range(1, LINES) if i != slot]
    lines[1:-1] = lines[rest].copy()  # the order stays oldest first
    lines[-1] = (d0, s, 1.0)


def lower_bound(lines: np.ndarray) -> float:
    r"""``min_b max_j (D_j - b s_j)`` over the lines ``(D_j, s_j)`` (``s = sum a / n``).

    The maximum over lines with ``s_j = 0`` and over pairs ``s_i > 0 > s_j`` of
    ``(D_i (-s_j) + D_j s_i) / (s_i - s_j)``; ``-inf`` when no line has ``s = 0`` and the
    sums all have one sign (the bound is then not finite).
    """
    return _best_pair(lines)[0]


def _best_pair(lines: np.ndarray) -> tuple[float, tuple]:
    """The bound of :func:`lower_bound` and the slots of the line(s) that make it."""
    idx = np.flatnonzero(lines[:, 2] != 0.0)
    d, s = lines[idx, 0], lines[idx, 1]
    best, where = -math.inf, ()
    flat = np.flatnonzero(s == 0.0)
    if flat.size:
        k = int(flat[np.argmax(d[flat])])
        best, where = float(d[k]), (int(idx[k]),)
    pos, neg = np.flatnonzero(s > 0.0), np.flatnonzero(s < 0.0)
    if pos.size and neg.size:
        di, si = d[pos][:, None], s[pos][:, None]
        dj, sj = d[neg][None, :], s[neg][None, :]
        vals = (di * -sj + dj * si) / (si - sj)
        a, b = np.unravel_index(int(np.argmax(vals)), vals.shape)
        if float(vals[a, b]) > best:
            best, where = float(vals[a, b]), (int(idx[pos[a]]), int(idx[neg[b]]))
    return best, where


def next_offset(b: float, g: float, inner_gap: float, state: np.ndarray, curv_bound: float) -> float:
    r"""The intercept of the next pass, after a pass at ``b`` that left duals summing to ``n g``.

    ``g`` measures ``-p'(b)`` only as well as the pass solved the problem at this ``b``
    (``inner_gap``): ``b`` moves once that gap is below ``_GATE g^2 / (2 H)`` (``H`` =
    ``curv_bound``: ``g^2 / (2 H)`` is the decrease a safe Newton step on ``p`` would bring);
    until then the passes keep it.
    Each measurement that moves ``b`` narrows a bracket of ``b*`` (``g > 0``: ``b* > b``); with
    both ends known the next ``b`` is the Illinois variant of regula falsi (the root of the line
    through the ends, the stale end's ``g`` halved when one end moved twice in a row), which
    converges superlinearly and visits both sides of ``b*``, so the passes' lines bracket the
    optimum (:func:`lower_bound`). A measurement on the wrong side of the other end (``g < 0``
    at or below the low end, ``g > 0`` at or above the high end) shows that end's sign was
    wrong: it is forgotten. With one end known: a step ``1.3 g / H`` with the secant
    curvature of the last two measurements when it is in ``(0, curv_bound)`` (else
    ``curv_bound``), at most ``_MAX_GROWTH`` times the previous step or the safe step
    ``g / curv_bound``, whichever is larger.

    Parameters
    ----------
    b, g : float
        The pass's intercept and ``s / n`` after it (``g > 0``: ``p`` decreases as ``b`` grows).
    inner_gap : float
        ``P(w, b) - D_b(a)`` at the pass's start (the fixed-``b`` certificate).
    state : ndarray (4, 3)
        Rows ``(b, g, known)``: the bracket's low end (``g > 0``), its high end (``g < 0``), the
        last measurement and (entry 0 of the last row) which end moved last (1 low, -1 high);
        updated in place.
    curv_bound : float
        An upper bound of ``p''``: the loss's smoothness times the mean example weight
        (``inf`` for the hinge: then 1 times the mean weight).

    Returns
    -------
    float
        The next pass's intercept (``b`` itself when it does not move).
    """
    lo, hi, last = state[0], state[1], state[2]
    h = curv_bound
    if not h > 0.0 or g == 0.0 or inner_gap > _GATE * g * g / (2.0 * h):
        return b
    side = 1.0 if g > 0.0 else -1.0
    end, other = (lo, hi) if side > 0 else (hi, lo)
    prev_b, had = float(last[0]), last[2] != 0.0
    if had and b != prev_b:
        secant = -(g - float(last[1])) / (b - prev_b)
        if 0.0 < secant < curv_bound:
            h = secant
    if other[2] != 0.0 and (other[0] - b) * side <= 0.0:
        # the other end is on the wrong side of b: its measurement (of a pass not solved far
        # enough) had the wrong sign; forget it rather than search an empty bracket
        other[:] = 0.0
    elif other[2] != 0.0 and state[3, 0] == side:
        other[1] *= 0.5  # Illinois: the other end has not moved for two measurements
    end[:] = (b, g, 1.0)
    state[3, 0] = side
    last[:] = (b, g, 1.0)
    if lo[2] != 0.0 and hi[2] != 0.0:
        return float(lo[0] + lo[1] * (hi[0] - lo[0]) / (lo[1] - hi[1]))
    step = _PAST_ROOT * g / h
    if had and b != prev_b:
        # (never below the safe step g / curv_bound: a tiny step must not keep the next ones tiny)
        cap = _MAX_GROWTH * max(abs(b - prev_b), abs(g) / curv_bound)
        step = max(-cap, min(cap, step))
    return float(b + step)
