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
directory, written by the workers themselves: the workers must see the run directory (one
machine, or a shared file system) and open the store by path or fsspec URL. A round reads
buffer ``r % B`` and writes ``(r + 1) % B``, and everything it computes depends on
``(seed, round, partition, pass)`` only, so a partition whose worker died mid-round is redone
elsewhere with the same numbers.

``B = 3`` buffers (:data:`DUAL_BUFFERS`, ``run.json``'s ``dual_buffers``) let
the driver write the checkpoint of round ``r`` while round ``r + 1`` runs: that round writes buffer
``(r + 2) % 3``, which neither the checkpoint being written (buffer ``(r + 1) % 3``) nor the one
before it (``r % 3``) names, and round ``r + 2`` starts only once the checkpoint of round ``r`` is
durable (the next checkpoint waits for it). With two buffers, round ``r + 1`` would overwrite the
files of the last durable checkpoint while the new one is not yet.
"""

from __future__ import annotations

import math
import os
import threading
import time
import uuid

import numpy as np

from .._cpu import gather_prefetch_pays, map_threads
from ..dask_client import dask_client, parse_distributed
from ..kernels.args import Labels, Reg, Rows
from ..kernels.sdca import block_dual_loss, block_primal_loss, sdca_pass, sdca_pass_gap
from ..objectives.losses import loss_min_is_zero, with_offset
from ..objectives.penalties import grad_conj, primal_value
from ..runs.rundir import RunDir
from ..schedule.cache import BlockCache
from ..schedule.planner import COCOA_WORKER, budget_option, fixed_bytes
from ..schedule.planner import plan as plan_memory
from ..schedule.scheduler import row_order
from ..store import layout as L
from . import intercept as icpt
from .base import StoreSolver, TrainBlock, load_train_group
from .certificate import Intercept, PureL1, certify, l1_dual_sup
from .row_threads import MIN_ROW_THREADS, PASS_OVERHEAD_PLAIN, RowThreads, problem_split_pays, threaded_primal_loss

#: Dual buffers a run's rounds rotate (see the module's docstring); ``run.json``'s ``dual_buffers``.
DUAL_BUFFERS = 3

#: Per worker process: (store path, fingerprint, options key) -> (store, problem, cache, row threads).
_CONTEXTS: dict = {}
#: One step at a time in a worker process: a worker of several Dask threads may be handed two partitions
#: (one lost with its worker); each step uses the worker's compute threads, and the replicas of its
#: :class:`RowThreads`, on its own.
_STEP_LOCK = threading.Lock()


def split_rows(threads: int, st, pb, n_workers: int) -> int:
    """Threads that share one problem's rows in a worker's local step (1: its rows on one thread).

    ``threads`` is every worker's compute threads (``run.json``'s ``worker_threads``). One problem's
    rows go over them as in one process (:class:`~ooc.solvers.row_threads.RowThreads`, nested inside
    CoCoA+: ``sigma' = K`` between the workers, ``T`` inside one) where
    :func:`~ooc.solvers.row_threads.rows_split_pays` says so for a partition's ``n / K`` rows; one-vs-rest
    problems put their classes on the threads instead. The choice depends on the store and the options
    only, so every worker makes the same.
    """
    if pb.n_sub != 1 or threads < MIN_ROW_THREADS:
        return 1
    # a worker's one thread takes the plain pass, not a replica: the overhead measured against it
    return threads if problem_split_pays(threads, pb, float(pb.penalty.l2), st.n_rows / max(1, n_workers),
                                         PASS_OVERHEAD_PLAIN) else 1


#: Row blocks each partition gets at least, where the store allows (:func:`partition_block_bytes`).
BLOCKS_PER_PARTITION = 4


def partition_block_bytes(st, block_bytes: int | None, workers: int, smallest: int) -> int | None:
    """The training block size of a run over ``workers`` partitions: ``block_bytes``, halved while the
    store has fewer than :data:`BLOCKS_PER_PARTITION` row blocks a partition (and halving still makes
    blocks of at least ``smallest`` bytes).

    Why: a partition of one block keeps the same rows every round (``--exchange`` moves whole blocks),
    and CoCoA+ on fixed partitions slows to a crawl on data like ``ooc synth``'s: on the 20000 x 2000
    example store (2 blocks of 2 MiB), ``local:2`` ended 100 rounds at a relative gap of 5.8e-6 for
    ``--l2 1e-4`` where one process certifies 1e-6 in 6 epochs; with blocks of 256 KiB (6 a partition,
    half of them exchanged every round) it certifies in 6 rounds as well. Depends on the store and the
    options only, so a resume (which reads the size from ``run.json``) cuts the same blocks.
    """
    if block_bytes is None or workers <= 1:
        return block_bytes
    want = BLOCKS_PER_PARTITION * workers
    bb = int(block_bytes)
    while len(st.with_blocks(bb).block_ptr(L.ROWS)) - 1 < want and bb // 2 >= smallest:
        bb //= 2
    return bb


def _context(store_path: str, fingerprint: str, opts: dict, memory: int, n_workers: int = 1):
    """This worker's (store, problem, cache, row threads); the cache gets its share of ``memory`` (the
    planner) beyond the threads' replicas. ``row threads``: a :class:`RowThreads` when one problem's rows
    go over ``opts["worker_threads"]`` threads (:func:`split_rows`), else None."""
    from ..store import open_store
    from .problem import make_problem

    # not the intercepts (--fit-intercept), which change every round: the problem and the cache stay
    key = (store_path, fingerprint, tuple(sorted((k, str(v)) for k, v in opts.items() if k != "offsets")))
    ctx = _CONTEXTS.get(key)
    if ctx is None:
        st = open_store(store_path)
        if st.fingerprint != fingerprint:
            raise RuntimeError(f"{store_path}: the store seen by this worker differs from the driver's "
                               f"(fingerprint {st.fingerprint} != {fingerprint})")
        st = st.with_blocks(opts.get("block_bytes"))  # the driver's training blocks
        pb = make_problem(st, opts)
        dim = st.n_cols + (1 if pb.bias > 0 else 0)
        t = split_rows(int(opts["worker_threads"]), st, pb, n_workers)
        l1 = float(pb.penalty.l1)
        plan = plan_memory(COCOA_WORKER, st, memory, workers=n_workers, vectors="paged", warn=False,
                           fixed=fixed_bytes(COCOA_WORKER, st, 1, dim)
                           + (RowThreads.held_bytes(t, dim, l1) if t > 1 else 0))
        rows = RowThreads(st.col_nnz, t, dim, pb.bias > 0, l1) if t > 1 else None
        ctx = (st, pb, BlockCache(plan.cache_bytes), rows)
        _CONTEXTS[key] = ctx
    return ctx


def _test_kill_hook(rnd: int, k: int, step: int | None = None) -> None:
    """Tests only: ``OOC_TEST_KILL_WORKER=ROUND:K:MARKER`` ends this worker process (``os._exit``) in
    the middle of partition ``K``'s dual writes at the end of round ``ROUND``; ``ROUND.STEP:K:MARKER``
    in the middle of that round's step ``STEP`` (after its first group) instead. Once: the first to
    create ``MARKER``."""
    spec = os.environ.get("OOC_TEST_KILL_WORKER")
    if not spec:
        return
    r, kk, marker = spec.split(":", 2)
    r, _, s = r.partition(".")
    if int(r) != rnd or int(kk) != k or (int(s) if s else None) != step:
        return
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os._exit(1)


#: Per worker process: run directory -> (driver session, version, v, changed): the driver's ``v`` as this
#: worker last saw it, so a step needs only the entries that changed since (:func:`_round_v`), and those
#: entries (None: all of them, a whole ``v`` was sent).
_V: dict = {}
#: Runs whose ``v`` a worker keeps (runs trained at once on one cluster; the others are sent all of ``v``).
_V_RUNS = 4


def _round_v(run_dir: str, msg: tuple):
    """The step's ``v`` from the driver's message, or None when this worker cannot rebuild it.

    ``msg`` is ``("full", session, version, v)`` or ``("sparse", session, version, idx, vals)``: the
    ``v`` of ``version`` is that of ``version - 1`` with ``v[idx] = vals`` (the exact values, not
    differences, so the worker's copy is the driver's bit for bit).
    """
    kind, session, version = msg[:3]
    if kind == "full":
        _V.pop(run_dir, None)
        while len(_V) >= _V_RUNS:  # a long-lived worker serves run after run: keep the latest ones' v only
            _V.pop(next(iter(_V)))
        _V[run_dir] = (session, version, np.array(msg[3], dtype=np.float64), None)
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
    _V[run_dir] = (session, version, v, msg[3])
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


def exchange(parts: list, seed: int, rnd: int, fraction: float) -> list:
    """The partitions of round ``rnd`` from those of round ``rnd - 1`` (lists of row blocks, sorted).

    Every partition hands ``m = round(fraction x the smallest partition's blocks)`` (at least 1 when
    ``fraction > 0``) of its blocks, drawn by ``(seed, rnd)``, to the next partition (mod ``K``) and gets
    as many from the one before, so the sizes stay. Partitions fixed for good converge several times
    slower on data with very popular features (CoCoA+'s safe adding is slowest along the directions in
    which the partitions' duals disagree, and nothing mixes them); handing on half of them every round
    brings the rounds near one process's epochs (measured: :doc:`/solvers/cocoa`) while a worker keeps
    the other half, their cached rows and their duals, from one round to the next.
    """
    K = len(parts)
    if K < 2 or fraction <= 0 or not all(parts):
        return parts
    m = max(1, int(round(fraction * min(len(p) for p in parts))))
    rng = np.random.default_rng([seed, rnd, 3])
    given = [{p[int(i)] for i in rng.choice(len(p), size=m, replace=False)} for p in parts]
    return [sorted((set(p) - given[k]) | given[k - 1]) for k, p in enumerate(parts)]


def step_range(step: int, segments: int, passes: int, rows: int) -> tuple[int, int]:
    """Positions ``[lo, hi)`` of step ``step`` in a round's visiting sequence (``passes`` passes of ``rows``
    rows each, one after the other).

    ``segments = 0``: one step, the whole round (one synchronization per round). Else every pass is cut
    into ``segments`` steps of ``rows / segments`` rows (rounded down at the cuts), ``passes x segments``
    steps in all.
    """
    if segments <= 0:
        return 0, passes * rows
    h, s = divmod(step, segments)
    return h * rows + s * rows // segments, h * rows + (s + 1) * rows // segments


def _w_of(pb, v: np.ndarray, kk: int) -> np.ndarray:
    """``w = grad g*(v)`` of every problem, flat like ``v`` (``kk`` problems of ``v.size / kk`` entries)."""
    V = v.reshape(kk, -1)
    return np.concatenate([grad_conj(pb.penalty, V[c], pb.bias) for c in range(kk)])


def _w_at(pb, v: np.ndarray, idx: np.ndarray, dim: int) -> np.ndarray:
    """``grad g*(v)`` at the flat entries ``idx`` only: the same numbers as :func:`_w_of` there (the map is
    elementwise; an intercept entry, the last of each problem's ``dim`` with a bias, is ``v`` itself)."""
    w = grad_conj(pb.penalty, v[idx])
    if pb.bias > 0:
        tail = idx % dim == dim - 1
        w[tail] = v[idx[tail]]
    return w


class _Part:
    """Partition ``k``'s state on the worker that runs it, from a round's first step to its last.

    The duals of the partition's blocks stay here between the steps of a round (written to the run
    directory once, at its end) and, once it ended, for the next round's first step (the files hold the
    same numbers: a worker that lost them reads those). ``v_loc``, ``w_loc`` are the local point (flat,
    ``kk x dim``), made equal to the driver's ``v`` at the start of every step; ``w0`` is ``w`` at the
    round's start, the certificate's point.
    """

    def __init__(self, session: str, rnd: int, attempt: int):
        self.session, self.rnd, self.attempt = session, rnd, attempt
        self.step = 0  # the next step this state can run
        self.alphas: dict = {}  # block -> its duals (kk, rows)
        self.v_loc = self.w_loc = self.w0 = None
        self.version = -1  # the version of the driver's v that v_loc was last made equal to
        self.cur = None  # ((pass, group), block, rows): the group a step left unfinished
        self.psum = self.dsum = self.a0 = None
        self.csum = 0.0
        self.bytes0 = 0


#: Per worker process: (run directory, partition) -> its :class:`_Part`.
_PARTS: dict = {}


def _part_for(run_dir: str, k: int, session: str, rnd: int, attempt: int, step: int, blocks) -> _Part | None:
    """Partition ``k``'s state for ``step`` of this round: a new one at step 0 (taking the duals this
    worker kept from the round before, if it ran it), else the one the step before left, or None when
    this worker does not have it (it did not run the round's steps so far: a replacement, or another
    worker's partition). A long-lived worker keeps the states of the last ``_V_RUNS`` runs."""
    key = (run_dir, k)
    if step > 0:
        part = _PARTS.get(key)
        if part is None or (part.session, part.rnd, part.attempt, part.step) != (session, rnd, attempt, step):
            return None
        return part
    kept = _PARTS.pop(key, None)
    part = _Part(session, rnd, attempt)
    if kept is not None and kept.session == session and kept.rnd == rnd and kept.attempt is None:
        # the blocks the partition keeps (--exchange hands some to another between rounds)
        part.alphas = {b: a for b, a in kept.alphas.items() if b in set(blocks)}
        part.v_loc, part.w_loc, part.version = kept.v_loc, kept.w_loc, kept.version
    runs = list(dict.fromkeys(r for r, _ in _PARTS if r != run_dir))
    for old in runs[:max(0, len(runs) - _V_RUNS + 1)]:
        for kk in [x for x in _PARTS if x[0] == old]:
            del _PARTS[kk]
    _PARTS[key] = part
    return part


def _local_point(part, pb, v, changed, version, kk):
    """The partition's local ``(v, w)`` (each ``(kk, dim)``) set to the driver's ``v`` of ``version``.

    Only the entries the message ``changed`` are copied when this state saw the version before
    (they include this partition's own changes); else all of them.
    """
    dim = v.size // kk
    same = float(pb.penalty.l1) == 0.0  # w = v exactly: one array serves both (a random write less per nonzero)
    if part.v_loc is None or changed is None or part.version != version - 1:
        part.v_loc = v.copy()
        part.w_loc = part.v_loc if same else _w_of(pb, v, kk)
    elif part.version != version:
        part.v_loc[changed] = v[changed]
        if not same:
            part.w_loc[changed] = _w_at(pb, v, changed, dim)
    part.version = version
    return part.v_loc.reshape(kk, dim), part.w_loc.reshape(kk, dim)


def _group_block(st, pb, cache, g, whole):
    """The training rows of the row blocks ``g`` in one block, through the worker's cache.

    ``whole``: ``g`` is the whole partition, the same every round, so the merged block itself is
    cached; else each block is, and they are merged for the step.
    """
    if whole and len(g) > 1:
        return cache.get(g, lambda: load_train_group(st, pb, g), lambda t: t.nbytes)
    return _merge([cache.get(b, lambda b=b: load_train_group(st, pb, [b]), lambda t: t.nbytes) for b in g])


def _step_classes(part, pb, blk, alpha, order, local, start, fused, update):
    """One stretch ``order`` of the group ``blk``'s rows, for each problem (class).

    ``local`` is ``(losses, v_loc, w_loc, reg, prefetch, rows_pass, threads)``. ``start``: these rows
    have not been updated in the round yet, so their terms of the round's certificate (at ``part.w0``)
    are summed first; ``fused``: the primal terms come from the update's own sweep (sdca_pass_gap).
    ``rows_pass`` (a :class:`RowThreads`, or None): one problem's rows go over its threads; else the
    classes go over ``threads`` threads, each touching only its own duals, ``v``, ``w`` and sums (the
    numbers of one thread).
    """
    losses, v_loc, w_loc, reg, prefetch, rows_pass, threads = local
    W = part.w0
    rows = Rows(blk.indptr, blk.indices, blk.data)

    def one(c):
        yc = pb.sub_labels(blk.y, c)
        if start:  # the certificate of the round's start, before any update of these rows
            if not fused:
                part.psum[c] += block_primal_loss(losses[c], blk.indptr, blk.indices, blk.data, yc, blk.c,
                                                  W[c], pb.bias, prefetch)
            part.dsum[c] += block_dual_loss(pb.loss, yc, blk.c, alpha[c])
        if rows_pass is not None and (fused or update):
            part.psum[c] += rows_pass.pass_group(losses[c], rows, Labels(yc, blk.c), alpha[c], order, v_loc[c],
                                                 w_loc[c], reg, W[c] if fused else W[c][:0])[1]
        elif fused:
            part.psum[c] += sdca_pass_gap(losses[c], rows, Labels(yc, blk.c), alpha[c], order, v_loc[c], w_loc[c],
                                          reg, W[c])[1]
        elif update:
            sdca_pass(losses[c], rows, Labels(yc, blk.c), alpha[c], order, v_loc[c], w_loc[c], reg)

    map_threads(one, range(pb.n_sub), threads, work=pb.n_sub * len(blk.data))


def _round_end(part, rd, cache, rnd, k, blocks, kk, update, nbuf):
    """The round's last step: its duals written (when it updated them) to buffer ``(rnd + 1) % nbuf``,
    and the ``end`` of :func:`local_step`."""
    alphas = part.alphas
    if update:
        for i, b in enumerate(sorted(alphas)):
            rd.write_duals((rnd + 1) % nbuf, b, np.ascontiguousarray(alphas[b]))
            if i == len(alphas) // 2:
                _test_kill_hook(rnd, k)  # some of the round's dual files written, not all
        rd.sync_duals()
    a1 = np.sum([alphas[b].sum(axis=1) for b in sorted(alphas)], axis=0) if alphas else np.zeros(kk)
    return (part.psum, part.dsum, cache.bytes_read - part.bytes0, cache.hit_rate, rd.dual_checksums(blocks),
            (part.a0, a1, part.csum))


def local_step(store_path, fingerprint, opts, memory, run_dir, blocks, v_msg, rnd, k, n_workers, update,
               local_passes, dual_sums, step=0, segments=0, attempt=0):
    """Step ``step`` of round ``rnd`` on partition ``k`` (the row blocks ``blocks``), on a worker.

    A round is ``local_passes`` Prox-SDCA passes over the partition's rows against the CoCoA+ local
    subproblem (``sigma' = K``: the single-machine kernel with ``n_total = n / K``), the rows of each
    group of ``mix_blocks`` blocks in one seeded permutation, the groups in a seeded order. It is cut into
    steps (:func:`step_range`; ``segments = 0``: one step); every step starts from the driver's ``v``
    (``v_msg``), runs the next stretch of that sequence and returns its change of ``v``, which the
    driver adds up over the partitions before the next step (a synchronization: CoCoA+'s adding is safe
    for each). Everything depends on ``(seed, round, k, pass, segments)`` only, so a round redone on other
    workers gives the same numbers.

    Returns None when this worker cannot run the step: ``v_msg`` is a sparse change it cannot apply (a
    new worker: the driver sends the whole ``v`` again), or, past step 0, it lacks the round's state
    (the driver then starts the round again on every partition). Else ``(idx, dv, end)``: ``dv`` is
    ``1/(l2 n) sum_{i in P_k} delta_i x_i`` of this step at the entries ``idx`` (the others are 0), and
    ``end`` None but at the round's last step: ``(primal_sum_k, dual_sum_k, bytes_read, cache_hit_rate,
    sums, alpha_sums)``, the partition's terms of ``P`` and ``D`` at the round's start, the checksums of
    the dual files the round wrote (for the driver's next checkpoint), and ``(before, after, weights)``:
    the partition's duals summed per problem at the round's start and end, and its example weights
    (``--fit-intercept``: ``opts["offsets"]`` are the problems' intercepts, fixed for the round,
    :mod:`ooc.solvers.intercept`).

    ``dual_sums`` are the checksums of the dual files of ``blocks`` the driver knows (verified as they are
    read at step 0). ``memory`` is the whole budget: this worker's block cache gets ``floor(memory / n_workers)``.
    """
    with _STEP_LOCK:
        return _local_step(store_path, fingerprint, opts, memory, run_dir, blocks, v_msg, rnd, k, n_workers, update,
                           local_passes, dual_sums, step, segments, attempt)


def _local_step(store_path, fingerprint, opts, memory, run_dir, blocks, v_msg, rnd, k, n_workers, update,
                local_passes, dual_sums, step, segments, attempt):
    v = _round_v(run_dir, v_msg)
    if v is None:
        return None
    session, version = v_msg[1], v_msg[2]
    part = _part_for(run_dir, k, session, rnd, attempt, step, blocks)
    if part is None:
        return None
    st, pb, cache, rows_pass = _context(store_path, fingerprint, opts, memory, n_workers)
    threads = int(opts["worker_threads"])
    nbuf = int(opts["dual_buffers"])
    if rows_pass is not None:
        rows_pass.invalidate()  # the replicas are refilled from this step's local point and snapshot
    rd = RunDir(run_dir)
    seed = int(opts["seed"])
    n = st.n_rows
    kk = pb.n_sub  # one-vs-rest: one problem per class, each with its own duals, v and w
    v_loc, w_loc = _local_point(part, pb, v, _V[run_dir][3], version, kk)
    if step == 0:
        rd.note_dual_checksums(dual_sums)
        part.w0 = w_loc.copy()  # w at the round's start: the certificate's point
        part.psum, part.dsum, part.a0 = np.zeros(kk), np.zeros(kk), np.zeros(kk)
        part.bytes0 = cache.bytes_read
    mix = max(1, int(opts.get("mix_blocks") or 1))
    reg = Reg(float(pb.penalty.l2), float(pb.penalty.l1), n / n_workers, float(pb.bias))
    offsets = opts.get("offsets")
    losses = [with_offset(pb.loss, offsets[c]) if offsets else pb.loss for c in range(kk)]
    prefetch = gather_prefetch_pays(part.w0[0].nbytes)
    passes = local_passes if update else 1
    ptr = st.block_ptr(L.ROWS)
    rows_k = int(sum(int(ptr[b + 1] - ptr[b]) for b in blocks))
    lo, hi = step_range(step, segments, passes, rows_k) if update else (0, rows_k)
    last = hi >= passes * rows_k
    # the certificate's primal terms summed in the first pass's sweep (sdca_pass_gap), as one process does;
    # runs of the protocol before --exchange and --sync-rows sum them in a sweep of their own (their numbers)
    fused = update and (bool(opts.get("exchange")) or segments > 0)
    first_group = True
    for h in range(lo // max(rows_k, 1), min(passes, -(-hi // max(rows_k, 1)))):
        pos = h * rows_k
        for g in _pass_groups(blocks, mix, seed, rnd, k, h):
            m = int(sum(int(ptr[b + 1] - ptr[b]) for b in g))
            a, b_ = max(lo, pos) - pos, min(hi, pos + m) - pos
            pos += m
            if a >= b_:
                continue
            if part.cur is not None and part.cur[0] == (h, g):
                blk, rows = part.cur[1], part.cur[2]
            else:
                blk = _group_block(st, pb, cache, g, whole=len(g) == len(blocks) and not opts.get("exchange"))
                rows = row_order(m, seed, rnd * passes + h, g[0]) if update else None
            part.cur = ((h, g), blk, rows) if b_ < m else None
            if h == 0 and a == 0:
                for b in g:
                    if b not in part.alphas:  # kept from the round before by this worker, else its file
                        part.alphas[b] = rd.read_duals(rnd % nbuf, b)
            alpha = np.concatenate([part.alphas[b] for b in g], axis=1)
            if h == 0 and a == 0:
                part.a0 += alpha.sum(axis=1)
                part.csum += float(blk.c.sum())
            order = rows[a:b_] if segments > 0 else rows
            _step_classes(part, pb, blk, alpha, order, (losses, v_loc, w_loc, reg, prefetch, rows_pass, threads),
                          start=h == 0 and a == 0, fused=fused and h == 0, update=update)
            if update:
                off = 0
                for b in g:
                    nb = part.alphas[b].shape[1]
                    part.alphas[b] = alpha[:, off:off + nb]
                    off += nb
            if first_group and segments > 0:
                _test_kill_hook(rnd, k, step)  # the step half done
            first_group = False
    part.step = step + 1
    end = _round_end(part, rd, cache, rnd, k, blocks, kk, update, nbuf) if last else None
    flat = part.v_loc
    # only the entries this worker changed travel back (its rows' features, the bias; flat over the classes)
    idx = np.flatnonzero(flat != v)
    idx = idx.astype(np.int32) if v.size < 2**31 else idx
    dv = (flat[idx] - v[idx]) / n_workers
    if last:
        if update:  # kept for the next round's first step: its duals, and the local point at this version
            part.rnd, part.attempt, part.step, part.cur, part.w0 = rnd + 1, None, 0, None, None
        else:
            _PARTS.pop((run_dir, k), None)
    return idx, dv, end


def local_certificate(store_path, fingerprint, opts, memory, run_dir, blocks, v_msg, rnd, k, n_workers, dual_sums):
    """Partition ``k``'s terms of the certificate of the state that starts round ``rnd``, without an update
    (a round that only certifies: the run's last, or one the driver predicts to be within ``tol``).

    Returns :func:`local_step`'s ``(idx, dv, end)`` with no change of ``v``, or None when this worker cannot
    rebuild ``v``. ``blocks`` are the partition's of the round before (the driver's choice): the rows this
    worker has cached, and the duals it kept from that round, untouched (read from the run directory when
    it did not run it). The blocks are summed one by one (the sums depend on the partition only).
    """
    with _STEP_LOCK:
        return _local_certificate(store_path, fingerprint, opts, memory, run_dir, blocks, v_msg, rnd, k, n_workers,
                                  dual_sums)


def _local_certificate(store_path, fingerprint, opts, memory, run_dir, blocks, v_msg, rnd, k, n_workers, dual_sums):
    v = _round_v(run_dir, v_msg)
    if v is None:
        return None
    st, pb, cache, rows_pass = _context(store_path, fingerprint, opts, memory, n_workers)
    threads = int(opts["worker_threads"])
    nbuf = int(opts["dual_buffers"])
    rd = RunDir(run_dir)
    rd.note_dual_checksums(dual_sums)
    kk = pb.n_sub
    W = _w_of(pb, v, kk).reshape(kk, -1)
    kept = _PARTS.get((run_dir, k))
    if kept is None or kept.session != v_msg[1] or kept.rnd != rnd or kept.attempt is not None:
        kept = None
    offsets = opts.get("offsets")
    losses = [with_offset(pb.loss, offsets[c]) if offsets else pb.loss for c in range(kk)]
    prefetch = gather_prefetch_pays(W[0].nbytes)
    psum, dsum, a0, csum = np.zeros(kk), np.zeros(kk), np.zeros(kk), 0.0
    bytes0 = cache.bytes_read
    for b in sorted(int(b) for b in blocks):
        blk = cache.get(b, lambda b=b: load_train_group(st, pb, [b]), lambda t: t.nbytes)
        alpha = kept.alphas[b] if kept is not None and b in kept.alphas else rd.read_duals(rnd % nbuf, b)
        a0 += alpha.sum(axis=1)
        csum += float(blk.c.sum())

        def one(c):  # the rows over the threads (one problem split), else the classes
            yc = pb.sub_labels(blk.y, c)
            psum[c] += (threaded_primal_loss(losses[c], blk.indptr, blk.indices, blk.data, yc, blk.c, W[c], pb.bias,
                                             rows_pass.T) if rows_pass is not None else
                        block_primal_loss(losses[c], blk.indptr, blk.indices, blk.data, yc, blk.c, W[c], pb.bias,
                                          prefetch))
            dsum[c] += block_dual_loss(pb.loss, yc, blk.c, alpha[c])

        map_threads(one, range(kk), threads, work=kk * len(blk.data))
    idx = np.zeros(0, dtype=np.int32 if v.size < 2**31 else np.int64)
    return idx, np.zeros(0), (psum, dsum, cache.bytes_read - bytes0, cache.hit_rate, rd.dual_checksums(blocks),
                              (a0, a0, csum))


def _warm(store_path, fingerprint, opts, memory, n_workers) -> int:
    """Open the store and the problem on this worker (imports included) before the first round, and start
    Numba there, as the driver's process does before the run's clock starts (ooc.train): its one-time
    start in a process (~0.4 s measured) otherwise lands in round 0, on every worker."""
    _context(store_path, fingerprint, opts, memory, n_workers)
    row_order(2, 0, 0, 0)
    return os.getpid()


#: What one local Dask worker process holds before its work: the interpreter, numpy, Numba and its kernels,
#: Zarr, and Dask's worker and nanny (measured like :data:`ooc._memlimit.TRAIN_PROCESS_BYTES`, plus Dask).
WORKER_PROCESS_BYTES = 256 << 20


def local_workers_need(store, workers: int, dim: int) -> int:
    """Bytes ``workers`` local worker processes hold at least, all together: each its process
    (:data:`WORKER_PROCESS_BYTES`) and its ``O(d)`` vectors and one block's (a CoCoA worker's fixed bytes)."""
    return int(workers) * (WORKER_PROCESS_BYTES + fixed_bytes(COCOA_WORKER, store, 1, dim))


def check_local_workers(store, distributed: str, dim: int, budget: int, held: int, limit=None) -> int:
    """The budget left to the workers' work once ``--distributed local:K``'s K processes are charged to
    ``budget`` (what the driver's --memory leaves for work: the workers are this machine's processes
    too). Too small: :class:`~ooc.schedule.planner.MemoryLimitError` naming the smallest limit that works
    (the command line, ``held`` > 0), else the workers plan with nothing to cache. A scheduler address
    (workers elsewhere, each with its own memory): ``budget`` as it is."""
    scheduler, workers = parse_distributed(distributed)
    if scheduler or not workers:
        return int(budget)
    need = local_workers_need(store, workers, dim)
    if need > budget and held:
        from .._memlimit import limit_that_works
        from ..schedule.planner import MemoryLimitError
        from ..units import format_bytes

        src = f"this process may use {format_bytes(limit.bytes)} ({limit.source})" if limit is not None else \
            "--memory is less than this run holds at once"
        raise MemoryLimitError(
            f"{src}: --distributed {distributed} starts {workers} worker processes of about "
            f"{format_bytes(need // workers, up=True)} each beside this one ({format_bytes(held)}); the smallest "
            f"{'limit' if limit is not None else '--memory'} that works here is "
            f"{format_bytes(limit_that_works(held + need), up=True)}, or fewer workers")
    return max(0, int(budget) - workers * WORKER_PROCESS_BYTES)


def _client(distributed: str, threads: int):
    """``(client, cluster)`` for ``--distributed local:N`` (its workers share the ``threads`` compute threads
    of this machine: ``threads // N`` each, at least one) or a scheduler address."""
    scheduler, workers = parse_distributed(distributed)
    per_worker = max(1, int(threads) // workers) if workers else 1
    return dask_client(scheduler, workers, needed_by="--distributed", threads_per_worker=per_worker)


class CoCoASolver(StoreSolver):
    """Driver of distributed training; same run directory, history and result as the block loop."""

    name = "sdca-cocoa"
    #: a round predicted to be within ``tol`` only certifies (:func:`local_certificate`): no update, no block
    #: moves, the duals the workers kept
    predicts_certified = True

    def fresh(self) -> None:
        self._nbuf = DUAL_BUFFERS
        self.rd.use_dual_buffers(self._nbuf)
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
        self._worker_threads = None  # chosen by _connect from the cluster, recorded with dual_buffers
        self._connect()

    def restore(self, arrays: dict, meta: dict) -> None:
        self.fresh_counters()
        self.v = arrays["v"]
        self.extra = {k: a for k, a in arrays.items() if k.startswith("icpt_")}
        # chosen when the run first connected, before its first checkpoint: a resume keeps them
        cfg = self.rd.config
        self._worker_threads = int(cfg["worker_threads"])
        self._nbuf = int(cfg["dual_buffers"])
        self._connect()

    def fresh_counters(self) -> None:
        self._bytes, self._hit_rate, self._client = 0, 0.0, None
        # the workers' copies of v: this driver's session, the version of v they were sent last, and
        # the entries changed since the version before (None: send the whole v)
        self._session, self._version, self._changed = uuid.uuid4().hex, 0, None

    def checkpoint_state(self) -> tuple[dict, dict, bool]:
        # the gap sums of a round are not kept between rounds (a checkpoint is taken at round ends only);
        # written while the next round runs when three dual buffers keep the last durable one's files
        # (the module's docstring)
        return ({"v": self.v, **self.extra}, {"position": 0, "primal_sum": 0.0, "dual_sum": 0.0},
                self._nbuf >= 3)

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

    def _pure_l1(self, W: np.ndarray) -> PureL1 | None:
        """Pure L1 with an added L2: what certifies the L1 problem (:class:`ooc.solvers.certificate.PureL1`),
        as the block loop's; ``W = grad g*(v)`` is computed from ``v`` exactly."""
        radius = self.opt.get("l1_radius")
        if not radius:
            return None
        pen = self.pb.penalty
        sups = None
        if loss_min_is_zero(self.pb.loss, self.store.label_kind):
            sups = [l1_dual_sup(W[c], float(pen.l1), float(pen.l2)) for c in range(len(W))]
        return PureL1(float(pen.l1), float(pen.l2), radius, sups)

    def _connect(self) -> None:
        """The Dask client and the ``K`` partitions of the row blocks (block ``b`` in partition ``b mod K``).

        ``K`` is the number of workers when the run starts and stays so: a worker lost later has its
        partition's tasks run by another (the same numbers, see :func:`local_step`).
        """
        opt = self.opt
        # local workers are processes of this machine: charged to --memory before they start
        self._memory = check_local_workers(self.store, opt["distributed"], self.dim, budget_option(opt),
                                           int(opt.get("memory_held") or 0), opt.get("memory_limit"))
        self._client = _client(opt["distributed"], int(opt.get("threads") or 1))
        workers = sorted(self._client[0].scheduler_info()["workers"])
        if not workers:
            raise RuntimeError(f"no Dask workers at {opt['distributed']}")
        if self._worker_threads is None:
            # every worker's compute threads, for good: the fewest the workers have at the start (Dask's
            # nthreads; local:N, --threads // N), recorded so that a resume on another cluster takes the same steps
            info = self._client[0].scheduler_info()["workers"]
            self._worker_threads = max(1, min(int(info[w].get("nthreads") or 1) for w in workers))
            self.rd.write_config({**self.rd.config, "worker_threads": self._worker_threads,
                                  "dual_buffers": self._nbuf})
        K = len(workers)
        self._parts0 = [list(range(k, self.nb, K)) for k in range(K)]
        self._parts_at = (0, self._parts0, self._parts0)
        # the workers start like the driver's process: imports, the store and the problem opened, before
        # training (and its clock) starts
        client = self._client[0]
        client.gather([client.submit(_warm, self.store.path, self.store.fingerprint, self._task_options(),
                                     self._memory, K, pure=False, workers=[w]) for w in workers])

    def _task_options(self) -> dict:
        """The options every task of this run gets (a worker's context is made once for them)."""
        opt = self.opt
        return dict(opt["train_options"], loss_object=self.pb.loss, mix_blocks=opt.get("mix_blocks", 1),
                    exchange=float(opt.get("exchange") or 0.0), worker_threads=self._worker_threads,
                    dual_buffers=self._nbuf)

    def partitions(self, rnd: int) -> list:
        """The row blocks of each partition in round ``rnd``: block ``b`` in partition ``b mod K`` at round
        0, then some of each handed to the next partition every round (``--exchange``, :func:`exchange`),
        replayed from round 0 (a resumed run's are those of an uninterrupted one)."""
        at, parts, before = self._parts_at
        if rnd == at - 1:
            return before
        if rnd < at:
            at, parts, before = 0, self._parts0, self._parts0
        fraction, seed = float(self.opt.get("exchange") or 0.0), int(self.opt["seed"])
        while at < rnd:
            at += 1
            parts, before = exchange(parts, seed, at, fraction), parts
        self._parts_at = (at, parts, before)
        return parts

    @staticmethod
    def _union(got: list, size: int) -> np.ndarray | None:
        """The entries of ``v`` the partitions changed (sorted), or None when the next message sends all
        of ``v`` anyway (:meth:`_v_message`: one partition alone changed too many to send them apart)."""
        if any(12 * g[0].size >= 8 * size for g in got):
            return None
        mark = np.zeros(size, dtype=bool)
        for g in got:
            mark[g[0]] = True
        return np.flatnonzero(mark).astype(got[0][0].dtype, copy=False)

    def _v_message(self, v: np.ndarray, full: bool) -> tuple:
        """What the workers need to rebuild ``v`` (see :func:`_round_v`)."""
        # the changed entries as (int32 index, value) pairs cost 12 bytes each, the whole v 8 per entry
        if full or self._changed is None or 12 * self._changed.size >= 8 * v.size:
            return ("full", self._session, self._version, v.reshape(-1))
        return ("sparse", self._session, self._version, self._changed, v.reshape(-1)[self._changed])

    def _protocol(self) -> int:
        """0 for a run of the protocol before ``--exchange`` and ``--sync-rows`` (fixed partitions, one step a
        round, the certificate summed by groups in a sweep of its own), else 1."""
        return int(bool(self.opt.get("exchange")) or bool(self.opt.get("sync_rows")))

    def segments(self) -> int:
        """Steps each pass of a round is cut into (``--sync-rows``; 0: one step a round, the protocol of
        runs made before it): the largest partition's rows over ``sync_rows``, rounded up."""
        sync = int(self.opt.get("sync_rows") or 0)
        if sync <= 0:
            return 0
        rows = max(int(sum(int(self.row_ptr[b + 1] - self.row_ptr[b]) for b in p)) for p in self._parts0)
        return max(1, -(-rows // sync))

    def _step(self, rnd: int, step: int, segments: int, attempt: int, v: np.ndarray, update: bool,
              topts: dict, counts: dict) -> list | None:
        """Every partition's :func:`local_step` result for ``step`` (in partition order), or None when a
        partition's worker lost the round's state (the round starts again)."""
        client, opt = self._client[0], self.opt
        # a round that only certifies keeps the blocks of the round before (the protocol before --exchange
        # and --sync-rows: the round's own, summed by groups)
        certify = not update and self._protocol() > 0
        parts = self.partitions(max(rnd - 1, 0) if certify else rnd)
        K = len(parts)
        # partition k prefers worker k (its block cache, and the round's state from step 1 on); any other may
        # run it (a lost worker's: step 0 anywhere, a later step means the round again)
        workers = sorted(client.scheduler_info()["workers"])
        where = (lambda k: {"workers": [workers[k % len(workers)]], "allow_other_workers": True}) if workers \
            else (lambda k: {})
        passes = int(opt.get("local_passes") or 1)
        got: list = [None] * K
        todo = [k for k in range(K) if parts[k]]
        full = False
        while todo:
            msg = self._v_message(v, full)
            counts["sent"] += sum(a.nbytes for a in msg if isinstance(a, np.ndarray)) * len(todo)
            if certify:
                futures = [client.submit(local_certificate, self.store.path, self.store.fingerprint, topts,
                                         self._memory, self.rd.path, parts[k], msg, rnd, k, K,
                                         self.rd.dual_checksums(parts[k]), pure=False, **where(k))
                           for k in todo]
            else:
                futures = [client.submit(local_step, self.store.path, self.store.fingerprint, topts,
                                         self._memory, self.rd.path, parts[k], msg, rnd, k, K, update, passes,
                                         self.rd.dual_checksums(parts[k]) if step == 0 else {}, step, segments,
                                         attempt, pure=False, **where(k))
                           for k in todo]
            for k, g in zip(todo, client.gather(futures)):
                got[k] = g
            todo = [k for k in todo if got[k] is None]
            if todo and step > 0:
                return None
            # at step 0, a worker that never saw this session's v (a replacement) gets the whole v
            full = True
        return [g for g in got if g is not None]

    def _run_round(self, rnd: int, update: bool, done=None) -> tuple[list, np.ndarray, dict]:
        """Run round ``rnd``'s steps: every partition's last result (in partition order), the ``v`` the
        round ends with, and what it cost (``sent``, ``received`` bytes, ``steps``, ``redone`` rounds).

        After every step the driver adds the partitions' changes, partition after partition (the same
        ``v`` whatever order they finished in), and sends the entries that changed with the next step.
        A partition whose worker was lost after step 0 has lost the duals it had updated: every partition
        starts the round again from its starting duals (the other buffer's files) and ``v``, with the same
        numbers as before. ``done(fraction)``: told the share of the round's steps done (progress only).
        """
        opt = self.opt
        topts = self._task_options()
        if self.extra:
            topts["offsets"] = [float(b) for b in self.extra["icpt_b"]]
        segments = self.segments() if update else 0
        steps = int(opt.get("local_passes") or 1) * segments if segments else 1
        counts = {"sent": 0, "received": 0, "steps": steps, "redone": 0}
        attempt = 0
        while True:
            v = self.v
            for step in range(steps):
                got = self._step(rnd, step, segments, attempt, v, update, topts, counts)
                if got is None:
                    break
                counts["received"] += sum(g[0].nbytes + g[1].nbytes for g in got)
                if step == steps - 1 and not update:
                    return got, v, counts
                # fixed summation order (partition order): the same v whatever order the workers finished in
                v = v.copy()
                flat = v.reshape(-1)
                for g in got:
                    flat[g[0]] += g[1]
                self._version, self._changed = self._version + 1, self._union(got, flat.size)
                if done is not None and step < steps - 1:
                    done((step + 1) / steps)
            else:
                return got, v, counts
            # a worker lost the round's state: the round again, from its start, the whole v to everyone
            attempt += 1
            counts["redone"] += 1
            self._version, self._changed = self._version + 1, None

    def epoch(self, ctx) -> None:
        """One round: every partition certifies and updates its blocks, synchronizing ``v`` after every step."""
        if self._client is None:
            self._connect()
        pb, v, rnd = self.pb, self.v, ctx.epoch
        t_round = time.perf_counter()
        got, v_next, counts = self._run_round(rnd, ctx.update, ctx.done)
        ends = [g[2] for g in got]
        for e in ends:
            self.rd.note_dual_checksums(e[4])
        self._bytes += sum(int(e[2]) for e in ends)
        self._hit_rate = float(np.mean([e[3] for e in ends]))
        kk = pb.n_sub
        V = v.reshape(kk, -1)
        W = np.stack([grad_conj(pb.penalty, V[c], pb.bias) for c in range(kk)])
        self._w = W.reshape(v.shape)
        # partition after partition: the same sums whatever order they finished in
        loss_sums = [math.fsum(e[0][c] for e in ends) for c in range(kk)]
        conj_sums = [math.fsum(e[1][c] for e in ends) for c in range(kk)]
        half = 0.5 * pb.penalty.l2
        bound = certify(loss_sums, conj_sums, self.n, [primal_value(pb.penalty, W[c], pb.bias) for c in range(kk)],
                        [half * float(np.dot(W[c], W[c])) for c in range(kk)], w=W,
                        # dc is D_0 of the round's starting duals (ooc.solvers.intercept)
                        intercept=Intercept(self.extra, [math.fsum(e[5][0][c] for e in ends) for c in range(kk)])
                        if self.extra else None, pure_l1=self._pure_l1(W))
        p, d, inner = bound
        round_s = time.perf_counter() - t_round
        if ctx.record(p, d, {"pass_seconds": round_s, "rows_per_s": self.n / round_s if round_s > 0 else None,
                             "workers": len(self._parts0), "local_passes": int(self.opt.get("local_passes") or 1),
                             "sync_steps": counts["steps"], "rounds_redone": counts["redone"],
                             "bytes_sent": int(counts["sent"]), "bytes_received": int(counts["received"])}):
            return
        self.v = v_next
        if self.extra:
            after = np.array([math.fsum(e[5][1][c] for e in ends) for c in range(kk)]) / self.n
            icpt.move_offsets(self.extra, after, inner, math.fsum(e[5][2] for e in ends), float(self.n), pb.loss)
