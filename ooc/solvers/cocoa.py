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
import os
import time

import numpy as np

from .._cpu import gather_prefetch_pays
from ..kernels.sdca import block_dual_loss, block_primal_loss, sdca_pass
from ..objectives.penalties import grad_conj, primal_value
from ..runs.rundir import RunDir
from ..schedule.cache import BlockCache
from ..schedule.scheduler import row_order
from ..store import layout as L
from .base import StoreSolver, load_train_block

#: Per worker process: (store path, fingerprint, options key) -> (store, problem, cache).
_CONTEXTS: dict = {}


def _context(store_path: str, fingerprint: str, opts: dict, memory: int):
    from ..store import open_store
    from .problem import make_problem

    key = (store_path, fingerprint, tuple(sorted((k, str(v)) for k, v in opts.items())))
    ctx = _CONTEXTS.get(key)
    if ctx is None:
        st = open_store(store_path)
        if st.fingerprint != fingerprint:
            raise RuntimeError(f"{store_path}: the store seen by this worker differs from the driver's "
                               f"(fingerprint {st.fingerprint} != {fingerprint})")
        ctx = (st, make_problem(st, opts), BlockCache(memory))
        _CONTEXTS[key] = ctx
    return ctx


def local_round(store_path, fingerprint, opts, memory, run_dir, blocks, v, rnd, k, n_workers, update,
                local_passes):
    """One worker's part of a round: ``(dv_k, primal_sum_k, dual_sum_k, bytes_read, cache_hit_rate)``."""
    st, pb, cache = _context(store_path, fingerprint, opts, memory)
    rd = RunDir(run_dir)
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
                sdca_pass(pb.loss, blk.indptr, blk.indices, blk.data, blk.y, blk.c, alpha, rows, v_loc, w_loc,
                          float(pb.penalty.l2), float(pb.penalty.l1), n / n_workers, float(pb.bias))
            rd.write_duals((rnd + 1) % 2, int(b), alpha[None, :])
    rd.sync_duals()
    dv = (v_loc - v) / n_workers
    return dv, psum, dsum, cache.bytes_read - bytes0, cache.hit_rate


def _client(distributed: str):
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:  # pragma: no cover
        raise RuntimeError("--distributed needs dask.distributed: pip install 'dask[distributed]'") from exc
    if distributed.startswith("local:"):
        import logging

        try:
            nw = int(distributed.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"--distributed {distributed!r}: expected local:N or a scheduler address") from None
        if nw < 1:
            raise ValueError("--distributed local:N needs N >= 1")
        cluster = LocalCluster(n_workers=nw, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=logging.ERROR)
        return Client(cluster), cluster
    return Client(distributed), None


class CoCoASolver(StoreSolver):
    """Driver of distributed training; same run directory, history and result as the block loop."""

    name = "sdca-cocoa"

    def run(self, max_epochs: int, resume: bool) -> dict:
        rd, pb, opt = self.rd, self.pb, self.opt
        tol = float(opt["tol"])
        loaded = rd.load_checkpoint() if resume else None
        if loaded is None:
            for b in range(self.nb):
                rd.write_duals(0, b, np.zeros((1, int(self.row_ptr[b + 1] - self.row_ptr[b]))))
            v = np.zeros(self.dim)  # binary/regression only: one problem
            meta = {"seq": 0, "epoch": 0, "position": 0, "seconds": 0.0, "state_seconds": 0.0, "primal_sum": 0.0,
                    "dual_sum": 0.0, "history_len": 0, "bytes_read": 0}
            rd.truncate_history(0)
            rd.save_checkpoint({"v": v}, meta)
        else:
            arrays, meta = loaded
            v = arrays["v"]
            rd.truncate_history(meta["history_len"])
        rnd, seq, history_len = int(meta["epoch"]), int(meta["seq"]), int(meta["history_len"])
        seconds0, bytes_read = float(meta["seconds"]), int(meta["bytes_read"])
        state_seconds = float(meta["state_seconds"])
        client, cluster = _client(opt["distributed"])
        t0 = time.perf_counter()
        try:
            workers = sorted(client.scheduler_info()["workers"])
            if not workers:
                raise RuntimeError(f"no Dask workers at {opt['distributed']}")
            K = len(workers)
            parts = [list(range(k, self.nb, K)) for k in range(K)]
            store_path = self.store.path
            topts = dict(opt["train_options"])
            while True:
                update = rnd < max_epochs
                t_round = time.perf_counter()
                futures = [client.submit(local_round, store_path, self.store.fingerprint, topts, int(opt["memory"]),
                                         rd.path, parts[k], v, rnd, k, K, update, int(opt.get("local_passes", 1)),
                                         workers=[workers[k]], allow_other_workers=True, pure=False)
                           for k in range(K) if parts[k]]
                got = client.gather(futures)
                psum = math.fsum(g[1] for g in got)
                dsum = math.fsum(g[2] for g in got)
                bytes_read += sum(int(g[3]) for g in got)
                w = grad_conj(pb.penalty, v, pb.bias)
                p = psum / self.n + primal_value(pb.penalty, w, pb.bias)
                d = dsum / self.n - 0.5 * pb.penalty.l2 * float(np.dot(w, w))
                round_s = time.perf_counter() - t_round
                entry = {"epoch": rnd, "seconds": state_seconds, "primal": p, "dual": d, "gap": p - d,
                         "rel_gap": (p - d) / max(1.0, abs(p)), "nnz_w": int(np.count_nonzero(w[: self.store.n_cols])),
                         "bytes_read": bytes_read, "cache_hit_rate": float(np.mean([g[4] for g in got])), "pass_seconds": round_s,
                         "rows_per_s": self.n / round_s if round_s > 0 else None, "workers": K,
                         "bytes_sent": int(v.nbytes * len(futures)), "bytes_received": int(sum(g[0].nbytes for g in got))}
                rd.append_history(entry)
                history_len += 1
                if self.progress:
                    self.progress(entry)
                converged = entry["rel_gap"] <= tol
                if converged or not update:
                    return dict(entry, converged=bool(converged), epochs=rnd, w=w,
                                total_seconds=seconds0 + time.perf_counter() - t0)
                # fixed summation order: the same v whatever order the workers finished in
                for g in got:
                    v = v + g[0]
                rnd += 1
                state_seconds = seconds0 + time.perf_counter() - t0
                seq += 1
                rd.save_checkpoint({"v": v}, {"seq": seq, "epoch": rnd, "position": 0,
                                              "seconds": state_seconds, "state_seconds": state_seconds,
                                              "primal_sum": 0.0, "dual_sum": 0.0, "history_len": history_len,
                                              "bytes_read": bytes_read})
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
