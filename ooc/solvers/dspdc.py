r"""DSPDC: doubly stochastic primal-dual coordinate method (Yu, Lin & Yang, Alg. 1 as Alg. 2).

Problem (``docs/training.rst``; the paper's ``lambda = l2``, ``g_j(x_j) = l2/2 x_j^2 + l1 |x_j|``, its
dual ``y = -a``)::

    P(x) = 1/n sum_i c_i phi(A_i . x, y_i) + l2/2 ||x||^2 + l1 ||x||_1
    D(a) = -1/n sum_i c_i phi*(-a_i / c_i, y_i) - l2 g*(A^T a / (l2 n))

with ``A = X`` on a plain store and ``A = U V = X G^T G`` on a factorized one
(:mod:`ooc.store.factorize`; the model is on the ``d`` original features, the data is ``U V``).

Every iteration draws ``m`` rows ``I`` and ``q`` primal coordinates ``J``, takes a proximal dual
step on each row of ``I`` at the extrapolated primal point ``xbar``, then a proximal primal step
on each coordinate of ``J`` at the extrapolated dual aggregate ``ubar`` (the kernel,
:mod:`ooc.kernels.dspdc`, has the formulas). It is the paper's Algorithm 2 in both cases: a plain
store is ``U = X``, ``V = I``, so ``u = X^T a / (l2 n)`` is kept like SDCA's ``v`` and a primal
coordinate step costs O(1) -- no column of ``X`` is ever read, and the row layout is all DSPDC
needs (per iteration ``O(m nnz_row + q)``; factorized: ``O(K (m + q))``).

Parameters (Theorem 2): ``p = dim`` (features, plus the intercept), ``R = max_i ||A_i||`` (with
the bias ``B``), ``gamma = 1 / (max_i c_i * smoothness)`` (``phi_i = c_i phi`` is
``1/gamma``-smooth), ``lambda = l2``; ``tau``, ``sigma`` from eq. (9) and ``theta`` from eq. (10)
(:func:`dspdc_params`; the equivalence of (9) with the two conditions of (8) is checked in the
tests). Losses: squared, logistic, smooth hinge (the theorem needs smooth ``phi``); the hinge
is refused (use ``--loss smooth-hinge`` with a small ``--gamma``). Penalties: L2 and L1 + L2
(``l2 > 0``: the theorem needs ``lambda``-strong convexity).

Where it does not pay, it refuses: Theorem 2's contraction gives about ``E = (m/n) (2R
sqrt(np/(mq)) / sqrt(lambda gamma) + 2 max(n/m, p/q))`` epochs per factor ``e`` of the gap,
Prox-SDCA's ``1 + R^2/(lambda gamma n)`` (:func:`epochs_per_efold`). With many features and a
small ``l2`` (sparse text, ``l2 = 1e-5``) the first term is tens to hundreds of epochs where
sdca needs one or two: 100 epochs then leave a relative gap near 1 (the majority-class model).
On a plain store, a problem where DSPDC's bound is more than :data:`RATE_RATIO_LIMIT` times
sdca's is refused, naming both figures (a factorized store is not: there an iteration costs
``O(K)`` where a row of ``U V`` costs ``O(d)``, so epochs do not compare).

Mini-batches: ``m`` (option ``dspdc_m``, default 1) and ``q`` (``dspdc_q``). Default ``q``: the
larger of ``ceil(m p / n)`` (so ``p/q <= n/m``, the regime of the paper's Table 1) and the ``q``
whose primal half costs what the dual half does (``m`` times the mean row nonzeros on a plain
store, ``m`` on a factorized one). Small ``q`` makes iterations cheap but needs many more of them
(``theta ~ p/q``, and Theorem 2's constant grows with ``max(p/q, n/m)``): measured on 200 x 300
logistic data, ``q = 1`` needs about 20 times the epochs of ``q = 30``, for about 1.5 times
less work per epoch.

Out of core, and how it relates to the paper's uniform sampling
    An *epoch* is ``n / m`` iterations (each row is drawn once per epoch in expectation: a pass
    of work on the dual side). Row blocks (``mix`` of them gathered into one group, as for
    sdca) are visited in a seeded shuffled order; a group of ``n_b`` rows is resident for
    ``round(n_b / m)`` iterations, each drawing ``I`` uniformly among its rows. ``J`` is drawn
    uniformly from all ``dim`` coordinates (the primal side needs no data: ``x``, ``u`` and,
    factorized, ``V`` are resident). So at any iteration of an epoch every row has the
    paper's marginal probability ``m / n`` of being in ``I`` and ``J`` has exactly the paper's
    law; what differs is that consecutive ``I`` come from the same group instead of being
    independent. With one group (data that fit) it is the paper's sampling exactly. The
    extrapolation factor stays the paper's ``n / m``.

Gap, once per epoch, fused with the next pass (:mod:`ooc.solvers.base`): the state ``S_e`` at
the start of a pass is certified while the pass runs: each group, before its iterations, adds
its rows' ``c_i phi(A_i . x_e)`` (``x_e`` snapshot), ``-c_i phi*(-a_i/c_i)`` and
``a_i A_i / (l2 n)`` (its duals are still those of ``S_e``: a group's iterations only move its
own rows). At the end of the pass ``P(x_e) - D(a_e)`` is exact, with ``A^T a_e`` summed afresh
(for a factorized store mapped back through ``V^T``, O(K d) once per epoch); the maintained
``u`` is then corrected by the rounding drift, and ``V x``, ``V xbar`` are recomputed exactly.
The reported point is the primal iterate ``x`` (the paper's ``x^{(T)}``).

Resume is exact: the kernel's random numbers are a function of ``(seed, epoch, group,
problem)`` and the state at a group boundary (``x``, ``u``, ``V x``, ``V xbar``, the last
iteration's ``J`` and steps, the gap sums) is in the checkpoint.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .._cpu import gather_prefetch_pays
from ..kernels.args import Labels, Reg, Rows
from ..kernels.dspdc import DspdcState, DspdcStep, dspdc_block, v_times, vbar_from, vt_times
from ..kernels.sdca import block_accumulate_v, block_dual_loss, block_primal_loss
from ..objectives.penalties import conj_value, require_l2
from ..store import layout as L
from ..store.factorize import FactorView, is_factorized
from .base import BlockLoopSolver, ProblemRefused, TrainBlock
from .registry import DSPDC_SOLVER


def dspdc_params(n: float, p: float, m: float, q: float, R: float, lam: float, gamma: float):
    r"""``(theta, tau, sigma)`` of Theorem 2: ``tau, sigma`` from eq. (9), ``theta`` from eq. (10).

    .. math::

        \Delta = \frac{n}{m} - \frac{p}{q},\quad
        S = \sqrt{\Delta^2 + \frac{4 n p^2 R^2}{m q^2 \lambda\gamma}},\quad
        \tau = \frac{p}{q\lambda}\,\frac{1}{\Delta + S},\quad
        \sigma = \frac{n^2}{m\gamma}\,\frac{1}{S - \Delta},

        \theta = \frac{p}{q} - \frac{p/q}{\frac{2R}{\sqrt{\lambda\gamma}}\sqrt{\frac{n}{m}\frac{p}{q}}
                 + 2\max(\frac{n}{m}, \frac{p}{q})}

    They satisfy ``tau sigma = n q / (4 p R^2)`` and
    ``p / (2 q lambda tau) + p / q = n^2 / (2 m gamma sigma) + n / m`` (eq. 8).
    """
    a, b = n / m, p / q
    delta = a - b
    s = math.sqrt(delta * delta + 4.0 * n * p * p * R * R / (m * q * q * lam * gamma))
    tau = b / lam / (delta + s)
    sigma = n * n / (m * gamma) / (s - delta)
    theta = b - b / (2.0 * R / math.sqrt(lam * gamma) * math.sqrt(a * b) + 2.0 * max(a, b))
    return theta, tau, sigma


#: dspdc refuses a problem where Theorem 2's bound on its epochs exceeds Prox-SDCA's by this factor.
#: Measured on plain stores (epochs to a certified gap, dspdc / sdca): bound ratio 0.46 (400 x 50
#: dense, l2 1e-4): 63 / 222; ratio 2.0-2.9 (150 x 24 sparse, l2 0.05, tol 1e-8): 57-121 / 8-15;
#: ratio 7.8 (scripts/bench_solvers.py's hashed text, 400 x 2^14, l2 1e-4, squared and smooth
#: hinge): relative gap 7e-2 after 300 epochs (no progress), where sdca certified 1e-6 in 86-115.
#: (10 let those run; above 4 none made progress in the bench.)
RATE_RATIO_LIMIT = 4.0


def epochs_per_efold(n: float, p: float, m: float, q: float, R: float, lam: float, gamma: float) -> tuple[float, float]:
    r"""Epochs (``n / m`` iterations each) per factor ``e`` of the gap: DSPDC's Theorem 2 and Prox-SDCA's.

    .. math::

        E_{DSPDC} = \frac{m}{n}\Big(\frac{2R}{\sqrt{\lambda\gamma}}\sqrt{\frac{n}{m}\frac{p}{q}}
                    + 2\max(\frac{n}{m}, \frac{p}{q})\Big),\qquad
        E_{SDCA} = 1 + \frac{R^2}{\lambda\gamma n}

    (Yu, Lin & Yang, Theorem 2: the contraction factor per iteration is ``1 - 1 / (the bracket)``;
    Shalev-Shwartz & Zhang, Thm. 1 / Prox-SDCA: ``n + R^2/(lambda gamma)`` steps per e-fold). On
    sparse data with many features and a small ``l2`` the first term, ``R sqrt(m p / (q n)) /
    sqrt(lambda gamma)``, dominates and DSPDC needs orders of magnitude more epochs than SDCA.
    """
    a, b = n / m, p / q
    dspdc = (2.0 * R / math.sqrt(lam * gamma) * math.sqrt(a * b) + 2.0 * max(a, b)) / a
    sdca = 1.0 + R * R / (lam * gamma * n)
    return dspdc, sdca


def _seed(seed: int, epoch: int, block: int, c: int) -> int:
    return int(np.random.SeedSequence([int(seed), int(epoch), int(block), int(c), 0xD5]).generate_state(1)[0])


class DSPDCSolver(BlockLoopSolver):
    """``--solver dspdc`` (see the module docstring). Options beyond the common ones:
    ``dspdc_m``, ``dspdc_q`` (mini-batch sizes).
    """

    name = DSPDC_SOLVER

    def __init__(self, problem, rundir, options, progress=None):
        st = problem.store
        if not st.has_layout(L.ROWS):
            raise ValueError(f"{st.path}: dspdc needs the row layout; convert with --layout rows or both")
        if not problem.loss.is_smooth:
            raise ValueError("dspdc needs a smooth loss (squared, logistic, smooth-hinge): its rate assumes "
                             "1/gamma-smooth losses; for an SVM use --loss smooth-hinge with a small --gamma")
        require_l2(problem.penalty, "dspdc")
        if options.get("warm_start"):
            raise ValueError("dspdc does not take warm starts")
        self.factorized = is_factorized(st)
        if self.factorized:
            problem = problem._replace(store=FactorView(st))
        super().__init__(problem, rundir, options, progress)
        pb = self.pb
        self.bias = float(pb.bias)
        self.l2, self.l1 = float(pb.penalty.l2), float(pb.penalty.l1)
        d = st.n_cols
        has_b = self.bias > 0
        if self.factorized:
            K = self.store.k
            vt = np.ascontiguousarray(self.store.vt())
            vptr = np.arange(0, d * K + 1, K, dtype=np.int64)
            vidx = np.tile(np.arange(K, dtype=np.int64), d)
            vdat = vt.reshape(-1).astype(np.float64)
            self.k_in = K + (1 if has_b else 0)
            r2 = float(self.store.attrs["factor"]["R"]) ** 2
            row_cost = K
            col_cost = K
        else:
            vptr = np.arange(d + 1, dtype=np.int64)
            vidx = np.arange(d, dtype=np.int64)
            vdat = np.ones(d)
            self.k_in = self.dim
            r2 = st.row_sqnorm_sum_max()[1] if self.n else 0.0
            row_cost = max(1.0, st.nnz / max(self.n, 1))
            col_cost = 1
        if has_b:  # the intercept: last primal coordinate -> last inner entry, weight 1
            vptr = np.append(vptr, vptr[-1] + 1)
            vidx = np.append(vidx, self.k_in - 1)
            vdat = np.append(vdat, 1.0)
        self.V = (vptr, vidx, vdat)
        self.R = math.sqrt(r2 + (self.bias ** 2 if has_b else 0.0))
        cmax = pb.max_example_weight()
        self.gamma = 1.0 / (float(pb.loss.smoothness) * cmax)
        self.m = int(options.get("dspdc_m") or 1)
        if self.m < 1:
            raise ValueError("dspdc_m must be >= 1")
        self.m = min(self.m, int(np.diff(self.row_ptr).min()) if self.nb else 1)
        q = options.get("dspdc_q")
        if q is not None and int(q) < 1:
            raise ValueError("dspdc_q must be >= 1")
        # p/q <= n/m (the regime of the paper's Table 1) and a primal half at least as costly as the dual half
        self.q = min(int(q) if q else max(math.ceil(self.m * self.dim / max(self.n, 1)),
                                          int(round(self.m * row_cost / col_cost))), self.dim)
        if self.R > 0:
            e_dspdc, e_sdca = epochs_per_efold(float(self.n), float(self.dim), float(self.m), float(self.q), self.R,
                                               self.l2, self.gamma)
            # a factorized store is DSPDC's own ground (O(K) per row, where sdca would read rows of U V):
            # there epochs do not compare, only on a plain store
            if not self.factorized and e_dspdc > RATE_RATIO_LIMIT * e_sdca:
                raise ProblemRefused(
                    f"dspdc: its rate (Theorem 2) needs about {e_dspdc:.3g} epochs per factor e of the duality gap on "
                    f"this problem against {e_sdca:.3g} for sdca (R sqrt(m p/(q n))/sqrt(l2 gamma) = "
                    f"{self.R * math.sqrt(self.m * self.dim / (self.q * self.n)) / math.sqrt(self.l2 * self.gamma):.3g}"
                    f" is large: small --l2 or many features); use --solver sdca")
            self.theta, self.tau, self.sigma = dspdc_params(float(self.n), float(self.dim), float(self.m),
                                                            float(self.q), self.R, self.l2, self.gamma)
        else:  # all-zero data: any steps are exact
            self.theta, self.tau, self.sigma = 0.0, 1.0 / self.l2, 1.0
        self.qdual = self.n / self.sigma

    #: w, w_prev, and six vectors of the inner dimension (dim on a plain store, K on a factorized one:
    #: counted as dim, an upper bound)
    state_vectors = 8

    # -- state ----------------------------------------------------------------------------------------------
    def fresh_state(self) -> dict:
        k, dim, ki = self.k, self.dim, self.k_in
        z = np.zeros
        return {"w": z((k, dim)), "v": z((k, ki)), "w_prev": z((k, dim)), "vx": z((k, ki)), "vbar": z((k, ki)),
                "vx_prev": z((k, ki)), "u_snap": z((k, ki)), "u_acc": z((k, ki)),
                "jprev": np.zeros((k, self.q), dtype=np.int64), "dxprev": z((k, self.q)),
                "iters": np.zeros(1, dtype=np.int64), "work": np.zeros(1, dtype=np.int64),
                "at_start": np.zeros(2, dtype=np.int64)}

    def pass_start(self, w, v) -> None:
        ex = self.extra
        ex["vx_prev"][:] = ex["vx"]
        ex["u_snap"][:] = v
        ex["u_acc"][:] = 0.0
        ex["at_start"][:] = (ex["iters"][0], ex["work"][0])

    def epoch_done(self, epochs: int, w, v) -> None:
        """Exact ``A^T a`` replaces the maintained one (rounding drift); ``V x``, ``V xbar`` recomputed."""
        ex = self.extra
        vptr, vidx, vdat = self.V
        v += ex["u_acc"] - ex["u_snap"]
        for c in range(self.k):
            v_times(vptr, vidx, vdat, w[c], ex["vx"][c])
            vbar_from(vptr, vidx, vdat, ex["vx"][c], ex["jprev"][c], ex["dxprev"][c], self.theta, ex["vbar"][c])

    def history_extra(self) -> dict:
        ex = getattr(self, "extra", {})
        out = {"m": self.m, "q": self.q, "theta": self.theta, "tau": self.tau, "sigma": self.sigma,
               "factorized": self.factorized,
               # this process's time in the iterations (not state: a resumed run counts from 0 again)
               "update_seconds": getattr(self, "_update_seconds", 0.0)}
        if "at_start" in ex:  # what it took to reach the state this line certifies
            out["iterations"] = int(ex["at_start"][0])
            out["work"] = int(ex["at_start"][1])
        return out

    # -- gap -------------------------------------------------------------------------------------------------
    def gap_terms(self, blk: TrainBlock, alpha, w_state, psum, dsum) -> None:
        pb, ex = self.pb, self.extra
        scale = 1.0 / (self.l2 * self.n)
        for c in range(self.k):
            yc = pb.sub_labels(blk.y, c)
            psum[c] += block_primal_loss(pb.loss, blk.indptr, blk.indices, blk.data, yc, blk.c, ex["vx_prev"][c],
                                         self.bias, gather_prefetch_pays(ex["vx_prev"][c].nbytes))
            dsum[c] += block_dual_loss(pb.loss, yc, blk.c, alpha[c])
            block_accumulate_v(blk.indptr, blk.indices, blk.data, np.ascontiguousarray(alpha[c]), ex["u_acc"][c],
                               scale, self.bias)

    def dual_penalty(self, c: int, w_state) -> float:
        """``l2 g*(A^T a / (l2 n))`` of the pass's starting duals (``V^T`` maps the inner sum back)."""
        u = self.extra["u_acc"][c]
        if not self.factorized:
            return conj_value(self.pb.penalty, u, self.bias)
        vptr, vidx, vdat = self.V
        full = np.empty(self.dim)
        vt_times(vptr, vidx, vdat, u, full)
        return conj_value(self.pb.penalty, full, self.bias)

    # -- iterations ------------------------------------------------------------------------------------------
    def update_block(self, blk: TrainBlock, alpha, epoch: int, w, v) -> None:
        pb, ex = self.pb, self.extra
        rows = blk.stop - blk.start
        m = min(self.m, rows)
        iters = max(1, int(round(rows / self.m)))
        vptr, vidx, vdat = self.V
        l1_last = not (self.bias > 0)
        t0 = time.perf_counter()
        for c in range(self.k):
            a = np.ascontiguousarray(alpha[c])
            ex["work"][0] += dspdc_block(pb.loss, Rows(blk.indptr, blk.indices, blk.data),
                                         Labels(pb.sub_labels(blk.y, c), blk.c), a, Rows(vptr, vidx, vdat),
                                         DspdcState(w[c], ex["vx"][c], ex["vbar"][c], v[c], ex["jprev"][c],
                                                    ex["dxprev"][c]),
                                         Reg(self.l2, self.l1, float(self.n), self.bias),
                                         DspdcStep(iters, m, self.q, self.theta, self.tau, self.qdual,
                                                   _seed(self.opt["seed"], epoch, blk.index, c), l1_last))
            alpha[c] = a
        ex["iters"][0] += iters
        self._update_seconds = getattr(self, "_update_seconds", 0.0) + time.perf_counter() - t0
