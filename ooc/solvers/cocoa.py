"""Distributed Prox-SDCA on Dask: CoCoA+ with adding aggregation (gamma = 1, sigma' = K).

Row blocks are partitioned over ``K`` workers (block ``b`` goes to worker
``b mod K``, and stays there, so each worker's block cache keeps serving it).
One *round*: the driver sends ``v``; worker ``k`` runs local Prox-SDCA passes on
its blocks against the local subproblem of CoCoA+ and returns
``dv_k = 1/(l2 n) sum_{i in P_k} delta_i x_i``; the driver sets ``v += sum_k dv_k``.

The local subproblem with ``sigma' = K`` is Prox-SDCA where the quadratic term of
every step is ``K`` times larger and the local point moves ``K`` times faster:
``q_i = K ||x_i||^2 / (l2 n)``, ``v_loc += K delta x_i / (l2 n)``, ``w_loc =
soft_threshold(v_loc, l1/l2)``. That is exactly the single-machine kernel called
with ``n_total = n / K``, so the math is not written twice. Adding the ``K`` local
changes is safe with ``sigma' = K`` (Ma et al., "Adding vs. averaging in
distributed primal-dual optimization", 2015).

The duality gap is fused as in :mod:`ooc.solvers.base`: each worker also returns
its blocks' terms of ``P`` and ``D`` at the round's starting state, so the gap of
the state that started round ``r`` is known when round ``r`` ends. Duals live in
the run directory (double-buffered per round, like epochs): the workers must see
the run directory (one machine, or a shared file system) and open the store by
path or fsspec URL.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .._cpu import gather_prefetch_pays
from ..dask_client import dask_client, parse_distributed
from ..kernels.args import Labels, Reg, Rows
from ..kernels.sdca import block_dual_loss, block_primal_loss, sdca_pass
from ..objectives.penalties import grad_conj, primal_value
from ..runs.rundir import RunDir
from ..schedule.cache import BlockCache
from ..schedule.planner import COCOA_WORKER, budget_option, fixed_bytes
from ..schedule.planner import plan as plan_memory
from ..schedule.scheduler import row_order
from .base import StoreSolver, load_train_block

#: Per worker process: (store path, fingerprint, options key) -> (store, problem, cache).
_CONTEXTS: dict = {}


def _context(store_path: str, fingerprint: str, opts: dict, memory: int, n_workers: int = 1):
    """This worker's (store, problem, cache); the cache gets its share of ``memory`` (the planner)."""
    from ..store import open_store
    from .problem import make_problem

    key = (store_path, fingerprint, tuple(sorted((k, str(v)) for k, v in opts.items())))
    ctx = _CONTEXTS.get(key)
    if ctx is None:
        st = open_store(store_path)
        if st.fingerprint != fingerprint:
            raise RuntimeError(f"{store_path}: the store seen by this worker differs from the driver's "
                               f"(fingerprint {st.fingerprint} != {fingerprint})")
        st = st.with_blocks(opts.get("block_bytes"))  # the driver's training blocks
        pb = make_problem(st, opts)
        plan = plan_memory(COCOA_WORKER, st, memory, workers=n_workers, vectors="paged", warn=False,
                           fixed=fixed_bytes(COCOA_WORKER, st, 1, st.n_cols + (1 if pb.bias > 0 else 0)))
        ctx = (st, pb, BlockCache(plan.cache_bytes))
        _CONTEXTS[key] = ctx
    return ctx


def local_round(store_path, fingerprint, opts, memory, run_dir, blocks, v, rnd, k, n_workers, update,
                local_passes, dual_sums):
    """One worker's part of a round: ``(dv_k, primal_sum_k, dual_sum_k, bytes_read, cache_hit_rate, sums)``.

    ``dual_sums`` are the checksums of the dual files of ``blocks`` the driver knows (verified as they are
    read); ``sums`` those of the files this round wrote, for the driver's next checkpoint.

    ``memory`` is the whole budget: this worker's block cache gets ``floor(memory / n_workers)``.
    """
    st, pb, cache = _context(store_path, fingerprint, opts, memory, n_workers)
    rd = RunDir(run_dir)
    rd.note_dual_checksums(dual_sums)
    seed = int(opts["seed"])
    n = st.n_rows
    w = grad_conj(pb.penalty, v, pb.bias)
    v_loc = v.copy()
    w_loc = w.copy()
    psum = dsum = 0.0
    bytes0 = cache.bytes_read
    order = np.asarray(blocks, dtype=np.int64)[np.random.default_rng([seed, rnd, 2, k]).permutation(len(blocks))]

    for b in order:
        blk = cache.get(int(b), lambda: load_train_block(st, pb, int(b)), lambda t: t.nbytes)
        alpha = rd.read_duals(rnd % 2, int(b))[0]
        psum += block_primal_loss(pb.loss, blk.indptr, blk.indices, blk.data, blk.y, blk.c, w, pb.bias,
                                  gather_prefetch_pays(w.nbytes))
        dsum += block_dual_loss(pb.loss, blk.y, blk.c, alpha)
        if update:
            for h in range(local_passes):
                rows = row_order(blk.stop - blk.start, seed, rnd * local_passes + h, int(b))
                sdca_pass(pb.loss, Rows(blk.indptr, blk.indices, blk.data), Labels(blk.y, blk.c), alpha, rows, v_loc,
                          w_loc, Reg(float(pb.penalty.l2), float(pb.penalty.l1), n / n_workers, float(pb.bias)))
            rd.write_duals((rnd + 1) % 2, int(b), alpha[None, :])
    rd.sync_duals()
    dv = (v_loc - v) / n_workers
    return dv, psum, dsum, cache.bytes_read - bytes0, cache.hit_rate, rd.dual_checksums(blocks)


def _client(distributed: str):
    """``(client, cluster)`` for ``--distributed local:N`` or a scheduler address."""
    return dask_client(*parse_distributed(distributed), needed_by="--distributed")


class CoCoASolver(StoreSolver):
    """Driver of distributed training; same run directory, history and result as the block loop."""

    name = "sdca-cocoa"

    def fresh(self) -> None:
        for b in range(self.nb):
            self.rd.write_duals(0, b, np.zeros((1, int(self.row_ptr[b + 1] - self.row_ptr[b]))))
        self.v = np.zeros(self.dim)  # binary/regression only: one problem
        self.fresh_counters()

    def restore(self, arrays: dict, meta: dict) -> None:
        self.fresh_counters()
        self.v = arrays["v"]

    def fresh_counters(self) -> None:
        self._bytes, self._hit_rate, self._client = 0, 0.0, None

    def checkpoint_state(self) -> tuple[dict, dict, bool]:
        # the gap sums of a round are not kept between rounds (a checkpoint is taken at round ends only)
        return {"v": self.v}, {"position": 0, "primal_sum": 0.0, "dual_sum": 0.0}, False

    def nnz_w(self) -> int:
        return int(np.count_nonzero(self._w[: self.store.n_cols]))

    def bytes_read(self) -> int:
        return self._bytes

    def cache_hit_rate(self) -> float:
        return self._hit_rate

    def result(self) -> dict:
        return {"w": self._w}

    def close(self) -> None:
        if self._client is not None:
            client, cluster = self._client
            self._client = None
            client.close()
            if cluster is not None:
                cluster.close()

    def _connect(self) -> None:
        """The Dask client, its workers and their share of the row blocks (block ``b`` on worker ``b mod K``)."""
        opt = self.opt
        self._client = _client(opt["distributed"])
        self._workers = sorted(self._client[0].scheduler_info()["workers"])
        if not self._workers:
            raise RuntimeError(f"no Dask workers at {opt['distributed']}")
        K = len(self._workers)
        self._parts = [list(range(k, self.nb, K)) for k in range(K)]

    def epoch(self, ctx) -> None:
        """One round: every worker certifies and updates its blocks; then ``v += sum_k dv_k``."""
        if self._client is None:
            self._connect()
        client, workers, parts, opt, pb = self._client[0], self._workers, self._parts, self.opt, self.pb
        K, v, rnd = len(workers), self.v, ctx.epoch
        t_round = time.perf_counter()
        topts = dict(opt["train_options"], loss_object=pb.loss)
        futures = [client.submit(local_round, self.store.path, self.store.fingerprint, topts, budget_option(opt),
                                 self.rd.path, parts[k], v, rnd, k, K, ctx.update, int(opt.get("local_passes", 1)),
                                 self.rd.dual_checksums(parts[k]), workers=[workers[k]], allow_other_workers=True,
                                 pure=False)
                   for k in range(K) if parts[k]]
        got = client.gather(futures)
        for g in got:
            self.rd.note_dual_checksums(g[5])
        psum = math.fsum(g[1] for g in got)
        dsum = math.fsum(g[2] for g in got)
        self._bytes += sum(int(g[3]) for g in got)
        self._hit_rate = float(np.mean([g[4] for g in got]))
        self._w = w = grad_conj(pb.penalty, v, pb.bias)
        p = psum / self.n + primal_value(pb.penalty, w, pb.bias)
        d = dsum / self.n - 0.5 * pb.penalty.l2 * float(np.dot(w, w))
        round_s = time.perf_counter() - t_round
        if ctx.record(p, d, {"pass_seconds": round_s, "rows_per_s": self.n / round_s if round_s > 0 else None,
                             "workers": K, "bytes_sent": int(v.nbytes * len(futures)),
                             "bytes_received": int(sum(g[0].nbytes for g in got))}):
            return
        # fixed summation order: the same v whatever order the workers finished in
        for g in got:
            v = v + g[0]
        self.v = v
