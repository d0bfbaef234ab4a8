"""Distributed Prox-SDCA on Dask: CoCoA+ with adding aggregation (gamma = 1, sigma' = K).

Row blocks are cut into ``K`` partitions (block ``b`` in partition ``b mod K``), ``K`` the number
of workers at the start; partition ``k`` prefers worker ``k`` so its block cache keeps serving it.
One *round*: worker ``k`` makes ``--local-passes`` passes of local Prox-SDCA over its partition
against the local subproblem of CoCoA+ and returns ``dv_k = 1/(l2 n) sum_{i in P_k} delta_i x_i``
at the entries it changed; the driver sets ``v += sum_k dv_k``, partition after partition.

The local subproblem with ``sigma' = K`` is Prox-SDCA where the quadratic term of
every step is ``K`` times larger and the local point moves ``K`` times faster:
``q_i = K ||x_i||^2 / (l2 n)``, ``v_loc += K delta x_i / (l2 n)``, ``w_loc =
soft_threshold(v_loc, l1/l2)``. That is exactly the single-machine kernel called
with ``n_total = n / K``, so the math is not written twice. Adding the ``K`` local
changes is safe with ``sigma' = K`` (Ma et al., "Adding vs. averaging in
distributed primal-dual optimization", 2015). One-vs-rest solves one such problem per class.

Communication: each worker keeps the driver's ``v`` between rounds; the driver sends the entries
that changed (exact values) or, to a worker that never saw this driver's ``v``, all of it.

The duality gap is fused as in :mod:`ooc.solvers.base`: each worker also returns its
partition's terms of ``P`` and ``D`` at the round's starting state, so the gap of the
state that started round ``r`` is known when round ``r`` ends. Duals live in the run
directory, double-buffered per round like epochs, written by the workers themselves: the
workers must see the run directory (one machine, or a shared file system) and open the
store by path or fsspec URL. A round reads buffer ``r % 2`` and writes ``(r + 1) % 2``, and
everything it computes depends on ``(seed, round, partition, pass)`` only, so a partition
whose worker died mid-round is redone elsewhere with the same numbers.
"""

from __future__ import annotations

import math
import os
import time
import uuid

import numpy as np

from .._cpu import gather_prefetch_pays
from ..dask_client import dask_client, parse_distributed
from ..kernels.args import Labels, Reg, Rows
from ..kernels.sdca import block_dual_loss, block_primal_loss, sdca_pass
from ..objectives.losses import loss_min_is_zero, with_offset
from ..objectives.penalties import grad_conj, primal_value
from ..runs.rundir import RunDir
from ..schedule.cache import BlockCache
from ..schedule.planner import COCOA_WORKER, budget_option, fixed_bytes
from ..schedule.planner import plan as plan_memory
from ..schedule.scheduler import row_order
from . import intercept as icpt
from .base import StoreSolver, TrainBlock, load_train_group

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


def _test_kill_hook(rnd: int, k: int) -> None:
    """Tests only: ``OOC_TEST_KILL_WORKER=ROUND:K:MARKER`` ends this worker process (``os._exit``) in
    the middle of partition ``K``'s part of round ``ROUND``, once: the first to create ``MARKER``."""
    spec = os.environ.get("OOC_TEST_KILL_WORKER")
    if not spec:
        return
    r, kk, marker = spec.split(":", 2)
    if int(r) != rnd or int(kk) != k:
        return
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os._exit(1)


#: Per worker process: run directory -> (driver session, version, v): the driver's ``v`` as this worker last
#: saw it, so a round needs only the entries that changed since (:func:`_round_v`).
_V: dict = {}
#: Runs whose ``v`` a worker keeps (runs trained at once on one cluster; the others are sent all of ``v``).
_V_RUNS = 4


def _round_v(run_dir: str, msg: tuple):
    """The round's ``v`` from the driver's message, or None when this worker cannot rebuild it.

    ``msg`` is ``("full", session, version, v)`` or ``("sparse", session, version, idx, vals)``: the
    ``v`` of ``version`` is that of ``version - 1`` with ``v[idx] = vals`` (the exact values, not
    differences, so the worker's copy is the driver's bit for bit).
    """
    kind, session, version = msg[:3]
    if kind == "full":
        _V.pop(run_dir, None)
        while len(_V) >= _V_RUNS:  # a long-lived worker serves run after run: keep the latest ones' v only
            _V.pop(next(iter(_V)))
        _V[run_dir] = (session, version, np.array(msg[3], dtype=np.float64))
        return _V[run_dir][2]
    have = _V.get(run_dir)
    if have is None or have[0] != session:
        return None
    if have[1] == version:
        return have[2]
    if have[1] != version - 1:
        return None
    v = have[2]
    v[msg[3]] = msg[4]
    _V[run_dir] = (session, version, v)
    return v


def _pass_groups(blocks, mix: int, seed: int, rnd: int, k: int, h: int) -> list[tuple]:
    """Pass ``h`` of round ``rnd`` on partition ``k``: its blocks in a seeded order, cut into groups of
    ``mix`` whose rows are visited in one permutation (as :meth:`BlockLoopSolver._groups` does: rows
    kept with their block's converge several times slower on data with very popular features). When
    one group holds them all, its blocks are sorted, so the merged group is the same every pass (cached).
    """
    blocks = np.asarray(sorted(int(b) for b in blocks), dtype=np.int64)
    if mix >= len(blocks):
        return [tuple(int(b) for b in blocks)]
    order = blocks[np.random.default_rng([seed, rnd, 2, k, h]).permutation(len(blocks))]
    return [tuple(int(b) for b in order[i:i + mix]) for i in range(0, len(order), mix)]


def _merge(blocks: list) -> TrainBlock:
    """The rows of ``blocks`` (TrainBlocks) one after the other as one block (rows ``0..m-1``)."""
    if len(blocks) == 1:
        return blocks[0]
    offs = np.cumsum([0] + [int(t.indptr[-1]) for t in blocks[:-1]])
    indptr = np.concatenate([blocks[0].indptr[:1]] + [t.indptr[1:] + o for t, o in zip(blocks, offs)])
    m = sum(t.stop - t.start for t in blocks)
    return TrainBlock(blocks[0].index, 0, m, indptr, np.concatenate([t.indices for t in blocks]),
                      np.concatenate([t.data for t in blocks]), np.concatenate([t.y for t in blocks]),
                      np.concatenate([t.c for t in blocks]))


def local_round(store_path, fingerprint, opts, memory, run_dir, blocks, v_msg, rnd, k, n_workers, update,
                local_passes, dual_sums):
    """One worker's part of a round on partition ``k`` (the row blocks ``blocks``).

    Returns None when ``v_msg`` is a sparse change this worker cannot apply (a new worker: the driver
    sends the whole ``v`` again), else ``(idx, dv, primal_sum_k, dual_sum_k, bytes_read, cache_hit_rate,
    sums, alpha_sums)``: ``dv`` is ``1/(l2 n) sum_{i in P_k} delta_i x_i`` at the entries ``idx`` (the
    others are 0), the sums are the partition's terms of ``P`` and ``D`` at the round's start, ``sums``
    the checksums of the dual files this round wrote, for the driver's next checkpoint, and
    ``alpha_sums`` ``(before, after, weights)``: the partition's duals summed per problem at the round's
    start and end, and its example weights (``--fit-intercept``: ``opts["offsets"]`` are the problems'
    intercepts, fixed for the round, :mod:`ooc.solvers.intercept`).

    The local subproblem is solved by ``local_passes`` Prox-SDCA passes over the partition's rows
    (``sigma' = K``: the single-machine kernel with ``n_total = n / K``), the rows of each group of
    ``mix_blocks`` blocks in one seeded permutation, the groups in a seeded order; everything depends
    on ``(seed, round, k, pass)`` only, so a round redone on another worker gives the same numbers.

    ``dual_sums`` are the checksums of the dual files of ``blocks`` the driver knows (verified as they are
    read). ``memory`` is the whole budget: this worker's block cache gets ``floor(memory / n_workers)``.
    """
    v = _round_v(run_dir, v_msg)
    if v is None:
        return None
    st, pb, cache = _context(store_path, fingerprint, opts, memory, n_workers)
    rd = RunDir(run_dir)
    rd.note_dual_checksums(dual_sums)
    seed = int(opts["seed"])
    n = st.n_rows
    kk = pb.n_sub  # one-vs-rest: one problem per class, each with its own duals, v and w
    V = v.reshape(kk, -1)
    W = np.stack([grad_conj(pb.penalty, V[c], pb.bias) for c in range(kk)])
    v_loc = V.copy()
    w_loc = W.copy()
    psum = np.zeros(kk)
    dsum = np.zeros(kk)
    bytes0 = cache.bytes_read
    mix = max(1, int(opts.get("mix_blocks") or 1))
    alphas: dict = {}  # block -> its duals (kk, rows), read once, updated in place by every pass
    reg = Reg(float(pb.penalty.l2), float(pb.penalty.l1), n / n_workers, float(pb.bias))
    offsets = opts.get("offsets")
    losses = [with_offset(pb.loss, offsets[c]) if offsets else pb.loss for c in range(kk)]
    a0, csum = np.zeros(kk), 0.0
    prefetch = gather_prefetch_pays(W[0].nbytes)
    passes = local_passes if update else 1
    for h in range(passes):
        for g in _pass_groups(blocks, mix, seed, rnd, k, h):
            if len(g) == len(blocks) and len(g) > 1:  # every block in one group: the merged block is cached
                blk = cache.get(g, lambda g=g: load_train_group(st, pb, g), lambda t: t.nbytes)
            else:
                blk = _merge([cache.get(b, lambda b=b: load_train_group(st, pb, [b]), lambda t: t.nbytes)
                              for b in g])
            if h == 0:
                for b in g:
                    alphas[b] = rd.read_duals(rnd % 2, b)
            alpha = np.concatenate([alphas[b] for b in g], axis=1)
            if h == 0:
                a0 += alpha.sum(axis=1)
                csum += float(blk.c.sum())
            rows = row_order(blk.stop - blk.start, seed, rnd * passes + h, g[0]) if update else None
            for c in range(kk):
                yc = pb.sub_labels(blk.y, c)
                if h == 0:  # the certificate of the round's starting state, before any update of these rows
                    psum[c] += block_primal_loss(losses[c], blk.indptr, blk.indices, blk.data, yc, blk.c, W[c],
                                                 pb.bias, prefetch)
                    dsum[c] += block_dual_loss(pb.loss, yc, blk.c, alpha[c])
                if update:
                    sdca_pass(losses[c], Rows(blk.indptr, blk.indices, blk.data), Labels(yc, blk.c), alpha[c], rows,
                              v_loc[c], w_loc[c], reg)
            if update:
                off = 0
                for b in g:
                    m = alphas[b].shape[1]
                    alphas[b] = alpha[:, off:off + m]
                    off += m
    if update:
        for i, b in enumerate(sorted(alphas)):
            rd.write_duals((rnd + 1) % 2, b, np.ascontiguousarray(alphas[b]))
            if i == len(alphas) // 2:
                _test_kill_hook(rnd, k)  # some of the round's dual files written, not all
        rd.sync_duals()
    v_loc = v_loc.reshape(-1)
    # only the entries this worker changed travel back (its rows' features, the bias; flat over the classes)
    idx = np.flatnonzero(v_loc != v)
    idx = idx.astype(np.int32) if v.size < 2**31 else idx
    dv = (v_loc[idx] - v[idx]) / n_workers
    a1 = np.sum([alphas[b].sum(axis=1) for b in sorted(alphas)], axis=0) if alphas else np.zeros(kk)
    return (idx, dv, psum, dsum, cache.bytes_read - bytes0, cache.hit_rate, rd.dual_checksums(blocks),
            (a0, a1, csum))


def _client(distributed: str):
    """``(client, cluster)`` for ``--distributed local:N`` or a scheduler address."""
    return dask_client(*parse_distributed(distributed), needed_by="--distributed")


class CoCoASolver(StoreSolver):
    """Driver of distributed training; same run directory, history and result as the block loop."""

    name = "sdca-cocoa"

    def fresh(self) -> None:
        for b in range(self.nb):
            self.rd.write_duals(0, b, np.zeros((self.pb.n_sub, int(self.row_ptr[b + 1] - self.row_ptr[b]))))
        # one problem: v of shape (dim,); one-vs-rest: (classes, dim)
        self.v = np.zeros(self.dim) if self.pb.n_sub == 1 else np.zeros((self.pb.n_sub, self.dim))
        # --fit-intercept: the intercepts, their bracket and lines (ooc.solvers.intercept), checkpointed with v
        self.extra = {}
        if self.pb.fit_intercept:
            self.extra = icpt.fresh_arrays(icpt.start_offsets(self.pb, self.store, self.row_ptr),
                                           loss_min_is_zero(self.pb.loss, self.store.label_kind))
        self.fresh_counters()

    def restore(self, arrays: dict, meta: dict) -> None:
        self.fresh_counters()
        self.v = arrays["v"]
        self.extra = {k: a for k, a in arrays.items() if k.startswith("icpt_")}

    def fresh_counters(self) -> None:
        self._bytes, self._hit_rate, self._client = 0, 0.0, None
        # the workers' copies of v: this driver's session, the version of v they were sent last, and
        # the entries changed since the version before (None: send the whole v)
        self._session, self._version, self._changed = uuid.uuid4().hex, 0, None

    def checkpoint_state(self) -> tuple[dict, dict, bool]:
        # the gap sums of a round are not kept between rounds (a checkpoint is taken at round ends only)
        return {"v": self.v, **self.extra}, {"position": 0, "primal_sum": 0.0, "dual_sum": 0.0}, False

    def nnz_w(self) -> int:
        return int(np.count_nonzero(self._w[..., : self.store.n_cols]))

    def bytes_read(self) -> int:
        return self._bytes

    def cache_hit_rate(self) -> float:
        return self._hit_rate

    def result(self) -> dict:
        if not self.extra:
            return {"w": self._w}
        # --fit-intercept: the intercepts of the certified state as a last column (as the block loop's; a
        # round that stops returns before moving them)
        return {"w": np.hstack([np.atleast_2d(self._w), self.extra["icpt_b"].reshape(-1, 1)])}

    def close(self) -> None:
        if self._client is not None:
            client, cluster = self._client
            self._client = None
            client.close()
            if cluster is not None:
                cluster.close()

    def _connect(self) -> None:
        """The Dask client and the ``K`` partitions of the row blocks (block ``b`` in partition ``b mod K``).

        ``K`` is the number of workers when the run starts and stays so: a worker lost later has its
        partition's tasks run by another (the same numbers, see :func:`local_round`).
        """
        opt = self.opt
        self._client = _client(opt["distributed"])
        workers = sorted(self._client[0].scheduler_info()["workers"])
        if not workers:
            raise RuntimeError(f"no Dask workers at {opt['distributed']}")
        K = len(workers)
        self._parts = [list(range(k, self.nb, K)) for k in range(K)]

    def _v_message(self, full: bool) -> tuple:
        """What the workers need to rebuild ``v`` (see :func:`_round_v`)."""
        # the changed entries as (int32 index, value) pairs cost 12 bytes each, the whole v 8 per entry
        if full or self._changed is None or 12 * self._changed.size >= 8 * self.v.size:
            return ("full", self._session, self._version, self.v.reshape(-1))
        return ("sparse", self._session, self._version, self._changed, self.v.reshape(-1)[self._changed])

    def _run_round(self, rnd: int, update: bool) -> tuple[list, int]:
        """Every partition's :func:`local_round` results (in partition order) and the bytes sent."""
        client, parts, opt = self._client[0], self._parts, self.opt
        K = len(parts)
        workers = sorted(client.scheduler_info()["workers"])  # a lost worker's partition goes to another
        topts = dict(opt["train_options"], loss_object=self.pb.loss, mix_blocks=opt.get("mix_blocks", 1))
        if self.extra:
            topts["offsets"] = [float(b) for b in self.extra["icpt_b"]]
        passes = int(opt.get("local_passes") or 1)
        got: list = [None] * K
        sent = 0
        todo = [k for k in range(K) if parts[k]]
        full = False
        while todo:
            msg = self._v_message(full)
            sent += sum(a.nbytes for a in msg if isinstance(a, np.ndarray)) * len(todo)
            # partition k prefers worker k (its block cache); any other may run it (a lost worker's)
            where = (lambda k: {"workers": [workers[k % len(workers)]], "allow_other_workers": True}) if workers \
                else (lambda k: {})
            futures = [client.submit(local_round, self.store.path, self.store.fingerprint, topts, budget_option(opt),
                                     self.rd.path, parts[k], msg, rnd, k, K, update, passes,
                                     self.rd.dual_checksums(parts[k]), pure=False, **where(k))
                       for k in todo]
            for k, g in zip(todo, client.gather(futures)):
                got[k] = g
            # a worker that never saw this session's v (a replacement) gets the whole v
            todo, full = [k for k in todo if got[k] is None], True
        return [g for g in got if g is not None], sent

    def epoch(self, ctx) -> None:
        """One round: every partition certifies and updates its blocks; then ``v += sum_k dv_k``."""
        if self._client is None:
            self._connect()
        pb, v, rnd = self.pb, self.v, ctx.epoch
        t_round = time.perf_counter()
        got, sent = self._run_round(rnd, ctx.update)
        for g in got:
            self.rd.note_dual_checksums(g[6])
        self._bytes += sum(int(g[4]) for g in got)
        self._hit_rate = float(np.mean([g[5] for g in got]))
        kk = pb.n_sub
        V = v.reshape(kk, -1)
        W = np.stack([grad_conj(pb.penalty, V[c], pb.bias) for c in range(kk)])
        self._w = W.reshape(v.shape)
        radius = self.opt.get("l1_radius")
        p = d = 0.0
        inner = np.zeros(kk)
        for c in range(kk):  # partition after partition: the same sums whatever order they finished in
            pc = math.fsum(g[2][c] for g in got) / self.n + primal_value(pb.penalty, W[c], pb.bias)
            dc = math.fsum(g[3][c] for g in got) / self.n - 0.5 * pb.penalty.l2 * float(np.dot(W[c], W[c]))
            if self.extra:  # dc is D_0 of the round's starting duals (ooc.solvers.intercept)
                dc, inner[c] = icpt.certify(self.extra, c, pc, dc, math.fsum(g[7][0][c] for g in got) / self.n)
            p += pc
            d += dc
            if radius:
                # pure L1 solved with an added L2 (ooc.train._add_l2_for_pure_l1): certify the L1 problem
                half = 0.5 * float(pb.penalty.l2)
                p -= half * float(np.dot(W[c], W[c]))
                d -= half * radius[c] ** 2
        round_s = time.perf_counter() - t_round
        if ctx.record(p, d, {"pass_seconds": round_s, "rows_per_s": self.n / round_s if round_s > 0 else None,
                             "workers": len(self._parts), "local_passes": int(self.opt.get("local_passes") or 1),
                             "bytes_sent": int(sent),
                             "bytes_received": int(sum(g[0].nbytes + g[1].nbytes for g in got))}):
            return
        # fixed summation order (partition order): the same v whatever order the workers finished in
        v = v.copy()
        flat = v.reshape(-1)
        for g in got:
            flat[g[0]] += g[1]
        changed = np.unique(np.concatenate([g[0] for g in got])) if got else np.zeros(0, np.int32)
        self.v, self._version, self._changed = v, self._version + 1, changed
        if self.extra:
            after = np.array([math.fsum(g[7][1][c] for g in got) for c in range(kk)]) / self.n
            icpt.move_offsets(self.extra, after, inner, math.fsum(g[7][2] for g in got), float(self.n), pb.loss)
