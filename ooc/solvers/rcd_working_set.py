"""rcd-primal's working sets for pure L1 (``--sampling working-set``): the columns most likely nonzero at the
optimum, solved by coordinate descent or proximal Newton steps while the full problem's gap is checked; the rule in
:mod:`ooc.solvers.rcd`."""

from __future__ import annotations

import numpy as np

from ..kernels.args import Labels, Reg, Rows
from ..kernels.rcd import (
    axpy,
    line_loss,
    margin_sums,
    newton_cd_pass,
    newton_prep,
    newton_weights,
    primal_bias_steps,
    scaled_dual_loss,
    ws_cd_epoch,
    ws_col_grads,
)
from ..objectives.losses import has_curv
from ..objectives.penalties import primal_value
from ..store import layout as L
from .certificate import l1_dual_scale, problem_bound
from .rcd import GAP_SLICE

#: the working-set method's constants (pure L1): the first size, the inner gap asked for (a
#: fraction of the outer one), how often it is checked, and the most inner passes of one outer
#: iteration (skglm's p0 = 10; celer's prune rule). The inner fraction was skglm's 0.3: 0.5 solves the
#: first, too small working sets less far. Measured (scripts/bench_pure_l1.py's stores, tol 1e-6, best of
#: two): hashed text 200k x 2^18 L1-logistic 4.42 s / 6 epochs -> 3.93 s / 5, smooth hinge 5.81 -> 4.80 s,
#: Lasso 1.70 -> 1.71 s; dense 20k x 100 within 0.01 s; 0.7 was slower on the text store
WS_START = 100
WS_INNER = 0.5
WS_CHECK = 5
WS_MAX_INNER = 500
#: proximal Newton (working sets, losses with a second derivative): most CD passes on the quadratic
#: model, the relative decrease of a pass that stops them, line-search halvings, Armijo's sigma
NEWTON_CD = 20
NEWTON_CD_TOL = 1e-3
NEWTON_LS = 30
NEWTON_ARMIJO = 0.01



class WorkingSets:
    """The working-set method of :class:`ooc.solvers.rcd_primal.RCDPrimalSolver` (its state and passes are the
    solver's: this class holds the methods of the one algorithm)."""

    def _working_set(self, R: np.ndarray) -> np.ndarray:
        """The epoch's features, sorted: the support of ``w`` and the features nearest to violating.

        Ranked by ``max_c |r_cj| / l1`` (``> 1``: ``w_j = 0`` is not optimal; celer's
        ``d_j`` without the column norm); the support ranks first. Size ``max(WS_START,
        2 |support|)`` (skglm), at most ``d``. A function of ``w`` only: a resume recomputes it.
        """
        d = self.d
        # one O(d) array (the scores, partitioned in place), the rest a slice at a time: the whole-vector
        # expressions held five O(d) temporaries (|R|, the maximum, -score, argpartition's indices and
        # copy: 640 MiB at 2**24 features, outside the memory plan)
        score = np.empty(d)
        n_support = 0
        for lo in range(0, d, GAP_SLICE):
            part = self._ws_score(R, lo, min(d, lo + GAP_SLICE))
            n_support += int(np.isposinf(part).sum())
            score[lo:lo + len(part)] = part
        size = min(d, max(WS_START, 2 * n_support))
        if size >= d:
            return np.arange(d)
        score.partition(d - size)
        thr = float(score[d - size])
        del score
        # the features scoring above the size-th largest, then those equal to it by index, up to size
        above, tied = [], []
        for lo in range(0, d, GAP_SLICE):
            part = self._ws_score(R, lo, min(d, lo + GAP_SLICE))
            above.append(np.flatnonzero(part > thr) + lo)
            tied.append(np.flatnonzero(part == thr) + lo)
        above = np.concatenate(above)
        ws = np.concatenate([above, np.concatenate(tied)[: size - len(above)]])
        return np.sort(ws)

    def _ws_score(self, R: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """Features ``lo:hi``'s working-set scores ``max_c |r_cj| / l1``, ``inf`` on the support of ``w``."""
        part = np.abs(R[0, lo:hi])
        for c in range(1, R.shape[0]):
            np.maximum(part, np.abs(R[c, lo:hi]), out=part)
        part /= self.l1
        part[np.any(self.w[:, lo:hi] != 0.0, axis=0)] = np.inf
        return part

    def _ws_blocks(self, ws: np.ndarray) -> list:
        """Per column block holding working-set features: ``(b, local columns, global columns, M)``."""
        out = []
        bounds = np.searchsorted(ws, self.cb_ptr)
        for b in range(self.ncb):
            g = ws[bounds[b]:bounds[b + 1]]
            if len(g):
                out.append((b, g - int(self.cb_ptr[b]), g, np.ascontiguousarray(self.M[g])))
        return out

    @staticmethod
    def _gather(blk, local: np.ndarray) -> Rows:
        """The columns ``local`` of a CSC block, as a CSC block of their own."""
        ip = np.asarray(blk.indptr, dtype=np.int64)
        starts = ip[local]
        lens = ip[local + 1] - starts
        indptr = np.zeros(len(local) + 1, dtype=np.int64)
        np.cumsum(lens, out=indptr[1:])
        idx = np.repeat(starts - indptr[:-1], lens) + np.arange(indptr[-1], dtype=np.int64)
        return Rows(indptr, np.ascontiguousarray(blk.indices[idx]), np.ascontiguousarray(blk.data[idx]))

    def _ws_parts(self, blocks: list, resident: list | None):
        """The working set's CSC parts, from memory when they were kept, else read again (same iterates)."""
        if resident is not None:
            yield from resident
            return
        for b, local, g, m in blocks:
            blk = self.cache.get((L.COLS, b), lambda b=b: self.store.block(L.COLS, b), lambda blk: blk.nbytes)
            yield self._gather(blk, local), g, m

    def _ws_gap(self, parts) -> float:
        """The duality gap of the problem restricted to the working set (rescaled dual point)."""
        pb = self.pb
        C = np.asarray(self.C)
        gap = 0.0
        for c in range(self.k):
            z, y = np.asarray(self.Z[c]), np.asarray(self.Y[c])
            rmax = 0.0
            for rows, g, _ in parts:
                r = np.empty(len(g))
                ws_col_grads(pb.loss, rows, Labels(y, C), z, float(self.n), r)
                rmax = max(rmax, float(np.max(np.abs(r))))
            s = l1_dual_scale(rmax, self.l1)
            psum, gsum = margin_sums(pb.loss, z, y, C)
            # the intercept keeps the Lipschitzing term (as _rescaled_dual)
            lip = float(self.radius[c]) * abs(s * self.bias * gsum / self.n) if self.bias > 0 else 0.0
            pc, dc = problem_bound(psum, scaled_dual_loss(pb.loss, z, y, C, s), self.n,
                                   primal_value(pb.penalty, self.w[c], self.bias), lip)
            gap += pc - dc
        return gap

    def _ws_epoch(self, R: np.ndarray, gap: float) -> None:
        r"""One outer iteration of the working-set method (skglm, celer) for pure L1.

        On the working set's columns (and the intercept), until the gap of the problem
        restricted to them is at most ``WS_INNER`` times the full problem's ``gap``: proximal
        Newton steps when the loss has a second derivative (:meth:`_ws_newton`), else cyclic
        prox-CD passes (:meth:`_ws_cd`). The columns stay in memory when they fit in half the
        block cache, and are read again for every pass otherwise: the iterates are the same.
        """
        ws = self._working_set(R)
        blocks = self._ws_blocks(ws)
        nnz = int(self.col_nnz[ws].sum())
        # 16 bytes a nonzero at most (int64 index, float64 value)
        resident = list(self._ws_parts(blocks, None)) if 16 * nnz <= self.cache.budget // 2 else None
        target = WS_INNER * gap
        if has_curv(self.pb.loss):
            inner, passes = 0, 0
            for c in range(self.k):
                i, p = self._ws_newton(c, ws, blocks, resident, target / self.k)
                inner, passes = max(inner, i), passes + p
        else:
            inner = passes = self._ws_cd(blocks, resident, target)
            passes *= self.k
        self.ws_size, self.inner_epochs = len(ws), inner
        self.updates += passes * (len(ws) + (1 if self.bias > 0 else 0))
        self.work += passes * (nnz + (self.n if self.bias > 0 else 0))

    def _ws_cd(self, blocks: list, resident: list | None, target: float) -> int:
        """Cyclic prox-CD passes on the working set (gap checked every ``WS_CHECK``); returns the passes."""
        pb = self.pb
        C = np.asarray(self.C)
        reg = Reg(self.l2, self.l1, float(self.n), float(self.bias))
        inner = 0
        while inner < WS_MAX_INNER:
            moved = 0.0
            for rows, g, m in self._ws_parts(blocks, resident):
                for c in range(self.k):
                    moved += ws_cd_epoch(pb.loss, rows, g, Labels(np.asarray(self.Y[c]), C), np.asarray(self.Z[c]),
                                         self.w[c], m, reg)
            if self.bias > 0:
                for c in range(self.k):
                    primal_bias_steps(pb.loss, np.asarray(self.Y[c]), C, np.asarray(self.Z[c]), self.w[c], self.bias,
                                      float(self.M[self.d]), self.l2, float(self.n), 1)
            inner += 1
            if moved == 0.0:
                break
            if inner % WS_CHECK == 0 and self._ws_gap(list(self._ws_parts(blocks, resident))) <= target:
                break
        return inner

    def _ws_newton(self, c: int, ws: np.ndarray, blocks: list, resident: list | None,
                   target: float) -> tuple[int, int]:
        r"""Proximal Newton steps of problem ``c`` on the working set (GLMNET; LIBLINEAR ``-s 6``).

        Each step: ``g_i = c_i phi'(z_i)``, ``h_i = c_i phi''(z_i)`` (one loop over the rows,
        the only transcendental functions of the step), the working set's ``grad_j`` and
        ``H_jj``; the restricted gap (rescaled dual point, as :meth:`_rescaled_dual`) stops
        the loop at ``target``; else up to ``NEWTON_CD`` cyclic passes minimise the quadratic
        model (:func:`~ooc.kernels.rcd.newton_cd_pass`: a full pass, then passes over the
        nonzeros until they settle, then a full pass again; the intercept a coordinate of it),
        and a backtracking line search (Armijo, Tseng & Yun's descent measure ``Delta``)
        takes ``w += t d``, ``z += t X d``. When it accepts no step (near the optimum the
        objective's change is rounding while the gap, first order in ``w - w*``, is not yet
        within target), ``WS_CHECK`` prox-CD passes on the objective itself follow (monotone
        by construction). Returns ``(steps, CD passes)``.
        """
        pb, n, l1, B = self.pb, self.n, self.l1, self.bias
        C = np.asarray(self.C)
        z, y, w = np.asarray(self.Z[c]), np.asarray(self.Y[c]), self.w[c]
        g, h, xd = np.empty(n), np.empty(n), np.empty(n)
        wt = np.empty(self.dim)
        grads = [np.empty(len(gi)) for _, _, gi, _ in blocks]
        hdiag = [np.empty(len(gi)) for _, _, gi, _ in blocks]
        active = [np.ones(len(gi), dtype=np.uint8) for _, _, gi, _ in blocks]
        steps = passes = 0
        while steps < WS_MAX_INNER:
            psum, gsum = newton_weights(pb.loss, z, y, C, g, h)
            rmax = 0.0
            for q, (rows, _, _) in enumerate(self._ws_parts(blocks, resident)):
                newton_prep(rows, g, h, float(n), grads[q], hdiag[q])
                rmax = max(rmax, float(np.max(np.abs(grads[q]))))
            s = l1_dual_scale(rmax, l1)
            # the restricted problem's certificate (rescaled duals; the intercept's Lipschitzing term)
            lip = float(self.radius[c]) * abs(s * B * gsum / n) if B > 0 else 0.0
            p0, dual = problem_bound(psum, scaled_dual_loss(pb.loss, z, y, C, s), n, l1 * float(np.abs(w[ws]).sum()),
                                     lip)
            if p0 - dual <= target:
                break
            wt[:] = w
            xd[:] = 0.0
            first = 0.0
            full = True
            for it in range(NEWTON_CD):
                moved = 0.0
                for q, (rows, gi, _) in enumerate(self._ws_parts(blocks, resident)):
                    moved += newton_cd_pass(rows, gi, wt, xd, h, grads[q], hdiag[q], w, l1, float(n), active[q], full)
                if B > 0:
                    hb = B * B * float(h.sum()) / n
                    if hb > 0.0:
                        step = -B * (gsum + float(np.dot(h, xd))) / n / hb
                        wt[self.d] += step
                        xd += B * step
                        moved += hb * step * step
                passes += 1
                if it == 0:
                    first = moved
                if moved > NEWTON_CD_TOL * first:
                    full = False  # cycle on the nonzeros
                elif full:
                    break
                else:
                    full = True  # converged on them: one pass over every column says whether it is done
            dws = wt[ws] - w[ws]
            descent = sum(float(np.dot(grads[q], wt[gi] - w[gi])) for q, (_, _, gi, _) in enumerate(blocks))
            db = wt[self.d] - w[self.d] if B > 0 else 0.0
            descent += B * gsum / n * db + l1 * (float(np.abs(wt[ws]).sum()) - float(np.abs(w[ws]).sum()))
            steps += 1
            t = 1.0 if descent < 0.0 else 0.0
            for _ in range(NEWTON_LS if t > 0.0 else 0):
                trial = line_loss(pb.loss, z, xd, y, C, t) / n + l1 * float(np.abs(w[ws] + t * dws).sum())
                if trial <= p0 + NEWTON_ARMIJO * t * descent:
                    break
                t *= 0.5
            else:
                t = 0.0
            if t > 0.0:
                w[ws] += t * dws
                if B > 0:
                    w[self.d] += t * db
                axpy(t, xd, z)
                continue
            # no step the line search can tell from rounding (the objective moves by ~1e-16 of
            # itself near the optimum while the gap, first order in w - w*, is still above
            # target): prox-CD passes on the objective itself, monotone without evaluating it
            reg = Reg(self.l2, l1, float(n), B)
            for _ in range(WS_CHECK):
                for rows, gi, m in self._ws_parts(blocks, resident):
                    ws_cd_epoch(pb.loss, rows, gi, Labels(y, C), z, w, m, reg)
                if B > 0:
                    primal_bias_steps(pb.loss, y, C, z, w, B, float(self.M[self.d]), self.l2, float(n), 1)
                passes += 1
        return steps, passes
