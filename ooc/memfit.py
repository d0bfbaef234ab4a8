"""The smallest memory a training run needs, and whether it fits: one computation for ``ooc train``
(its refusal before the run directory, ``--threads 0``'s count) and ``ooc info`` (its figure per solver).

The invariant (docs/training.rst, "Memory"): for the same store and training options, the smallest
``--memory`` that ``ooc info`` names for a solver is the one ``ooc train`` refuses below, up to what the
two processes hold beside the work (``info`` predicts :data:`ooc._memlimit.TRAIN_PROCESS_BYTES`, the
kernels and the store reader; ``train`` measures itself); and a run at that figure trains under it.

A run's figure is that of its *leanest plan* (:func:`leanest_plan`): the ``O(d)`` vectors of the solver's
class (:meth:`fixed_for`) on the fewest threads the run may use (one under ``--threads 0``, which fits the
count to the memory; the count asked for otherwise, which is never lowered), without a one-thread
replica (the solvers drop it when the memory cannot hold it), what one pass holds at once, the ``O(n)``
vectors paged (in memory under ``--duals memory``); for dgpd, with its fallback to sdca in the same process (:func:`solver_chain`), the larger of
the two; for ``--distributed local:N``, the workers' processes too.
"""

from __future__ import annotations

from ._memlimit import (
    TRAIN_PROCESS_BYTES,
    Limit,
    auto_budget,
    kernels_bytes,
    limit_that_works,
    process_limit,
    rss_bytes,
)
from .schedule.planner import ROW_GROUPS, Plan, group_and_ahead
from .schedule.planner import plan as plan_memory
from .solvers.problem import make_problem
from .solvers.registry import DGPD_SOLVER, SDCA_SOLVER, class_modules, driver_class
from .store.layout import ROWS


def solver_chain(o: dict) -> tuple:
    """The solvers a run of validated options ``o`` may run in its process: its own, and sdca after it for
    dgpd whose duals turn dense (``--dgpd-fallback``): the process's figure holds both."""
    if o["solver_used"] == DGPD_SOLVER and o.get("dgpd_fallback") and not o.get("distributed"):
        return (DGPD_SOLVER, SDCA_SOLVER)
    return (o["solver_used"],)


def _mix(fp, o: dict, view) -> int:
    return min(max(1, int(o["mix_blocks"] or 1)), max(view.n_blocks(ROWS), 1)) if fp.policy == ROW_GROUPS.policy else 1


def planner(st, o: dict, name: str | None = None):
    """``plan_for(budget, threads, replica=False) -> Plan`` of solver ``name`` (default ``o["solver_used"]``)
    on a single process with validated options ``o``: the plan its class makes of ``budget`` bytes with
    ``threads`` compute threads (each thread of one problem holds a replica of the model; ``replica``: a
    one-thread replica too, where the class keeps one). None for a class that declares no footprint (the
    distributed driver)."""
    cls = driver_class(name or o["solver_used"], None, o["multiclass"])
    fp = getattr(cls, "footprint", None)
    fixed_for = getattr(cls, "fixed_for", None)
    if fp is None or fixed_for is None:
        return None
    view = st.with_blocks(o["train_block_bytes"])
    pb = make_problem(view, o)
    dim = view.n_cols + (1 if pb.bias > 0 else 0)
    mix = _mix(fp, o, view)
    # the O(n) vectors paged, unless --duals memory holds them there whatever the memory
    vectors = "memory" if o.get("duals") == "memory" else "paged"

    def plan_for(budget: int, threads: int, replica: bool = False) -> Plan:
        return plan_memory(fp, view, int(budget), k=pb.n_sub, mix=mix, vectors=vectors, warn=False,
                           fixed=fixed_for(view, pb.n_sub, dim, mix, float(o["l1"]), threads, replica=replica))

    return plan_for


def leanest_threads(o: dict) -> int:
    """The fewest compute threads a run may plan with: one under ``--threads 0`` (fitted to the memory,
    :func:`fit_threads`), the count asked for otherwise."""
    return 1 if o.get("threads_auto") else max(1, int(o["threads"]))


def leanest_plan(st, o: dict, budget: int, name: str | None = None) -> Plan | None:
    """The leanest plan (module docstring) of solver ``name`` with options ``o`` for ``budget`` bytes;
    its ``minimum`` is what the work needs at least, its ``warning`` set when ``budget`` is below it."""
    plan_for = planner(st, o, name)
    return None if plan_for is None else plan_for(budget, leanest_threads(o))


def fit_threads(st, o: dict, budget: int) -> int:
    """The most threads, from ``o["threads"]`` down to 1, whose plan fits ``budget`` (``--threads 0`` on a
    memory that cannot hold every core's replicas); ``o["threads"]`` when none does or none is planned."""
    t = int(o["threads"])
    plan_for = planner(st, o)
    if plan_for is None or t <= 1 or not plan_for(budget, t).warning:
        return t
    return next((n for n in range(t - 1, 0, -1) if not plan_for(budget, n).warning), t)


def kernel_signatures(o: dict, name: str | None = None):
    """``needed(kernel, signature) -> bool`` (:func:`ooc._memlimit.kernels_uncached`) for a run of solver
    ``name`` (default ``o["solver_used"]``) with validated options ``o``: whether a specialization in Numba's
    cache is one the run calls. A signature whose first type is a loss must be the run's: the problem's
    own loss, or under ``--fit-intercept`` the loss shifted by the intercept
    (:class:`ooc.objectives.losses.Offset`) for every kernel but those the solver names in
    ``own_loss_kernels`` (the dual terms, summed with the problem's own loss). Any other signature is
    one the run may call (the dtypes of a store are not told apart)."""
    from numba import typeof

    from .objectives.losses import LOSS_REGISTRY, Offset, make_loss, with_offset
    from .solvers.problem import intercept_mode

    cls = driver_class(name or o["solver_used"], o.get("distributed"), o["multiclass"])
    loss = o.get("loss_object")
    if loss is None:
        loss = make_loss(o["loss"], gamma=o["gamma"])
    own = typeof(loss)
    kernels = typeof(with_offset(loss, 0.0)) if intercept_mode(o)[1] else own
    own_loss = frozenset(getattr(cls, "own_loss_kernels", ()))
    # the loss classes told apart: the built-in ones, the run's (a registered one) and the shifted one
    classes = {type(make_loss(n)) for n in LOSS_REGISTRY} | {type(loss), Offset}

    def needed(kernel: str, signature) -> bool:
        first = signature[0] if len(signature) else None
        if getattr(first, "instance_class", None) not in classes:
            return True  # not a loss of a class told apart (no loss, Crammer-Singer's multiclass one)
        return first == (own if kernel in own_loss else kernels)

    return needed


def predicted_held(st, name: str, o: dict, process: int = TRAIN_PROCESS_BYTES, kernels: dict | None = None) -> int:
    """What a fresh ``ooc train`` process holds beside its work when it plans solver ``name``: the process
    (``process``: at least :data:`~ooc._memlimit.TRAIN_PROCESS_BYTES`), the store reader's buffers, the
    kernels: ``kernels[name]`` where measured (what loading them added to a process, its peak while they
    loaded: :func:`ooc.train.load_kernels`), else estimated (with what compiling them costs where Numba's
    cache lacks the specializations the run calls, :func:`kernel_signatures`), and ``o["warm_held"]``: what a
    warm start's source holds from the start (:func:`ooc.runs.duals.final_duals_held`; ``ooc train`` measures
    it, as it has read it when it plans)."""
    if kernels is not None and name in kernels:
        loading = int(kernels[name])
    else:
        cls = driver_class(name, o.get("distributed"), o["multiclass"])
        loading = kernels_bytes(class_modules(cls), fresh=True, needed=kernel_signatures(o, name))
    return max(TRAIN_PROCESS_BYTES, int(process)) + st.reader_bytes() + int(o.get("warm_held") or 0) + loading


def _distributed_need(st, o: dict) -> int:
    """``--distributed local:N``: what its N worker processes hold at least (0 for a scheduler address)."""
    from .dask_client import parse_distributed
    from .solvers.cocoa import local_workers_need

    scheduler, workers = parse_distributed(o["distributed"])
    if scheduler or not workers:
        return 0
    return local_workers_need(st.with_blocks(o["train_block_bytes"]), workers, st.n_cols + 1)


def smallest_memory(st, o: dict, held=None, process: int = TRAIN_PROCESS_BYTES, kernels: dict | None = None) -> int:
    """The smallest ``--memory`` (the whole process; under ``auto`` the smallest limit) a run of validated
    options ``o`` on ``st`` trains under: :func:`ooc._memlimit.limit_that_works` of what the process holds
    and the leanest plan's minimum, the largest over :func:`solver_chain`. ``held(name)``: what the process
    holds beside the work of solver ``name`` (default :func:`predicted_held` with ``process`` and ``kernels``)."""
    held = held or (lambda name: predicted_held(st, name, o, process, kernels))
    if o.get("distributed"):
        return limit_that_works(held(o["solver_used"]) + _distributed_need(st, o))
    need = 0
    for name in solver_chain(o):
        p = leanest_plan(st, o, 0, name)
        need = max(need, held(name) + (p.minimum if p is not None else 0))
    return limit_that_works(need)


def family_name(o: dict) -> str:
    """``ooc info``'s name for the solver of validated options ``o``: the solver's, with
    ``-crammer-singer`` for that multiclass mode (its ``O(d)`` vectors differ from one-vs-rest's)."""
    name = o["solver_used"]
    return f"{name}-{o['multiclass']}" if o["multiclass"] == "crammer-singer" else name


def memory_fit(st, memory: int | None, runs: dict, refused: dict | None = None, kernels: dict | None = None,
               process: int | None = None) -> dict:
    """Whether and how each run of ``runs`` (family name -> validated options) fits ``memory`` on ``st``
    (``ooc info``; None: ``auto``, what this process may use).

    ``process_rss``: the size of a training process before its kernels and reader assumed (this process's
    where larger than :data:`~ooc._memlimit.TRAIN_PROCESS_BYTES`). Per family: ``fits`` (``memory`` is at least ``smallest_memory``), ``smallest_memory``
    (:func:`smallest_memory`), ``threads`` (the count it would run on: ``--threads 0`` fitted to the
    memory), ``fixed`` (its ``O(d)`` vectors on them), ``vectors`` ('memory' or 'paged'), ``cache``,
    ``compile_bytes`` (what its kernels add: measured, loading them as ``ooc train`` does, where ``kernels``
    is given; else what compiling them adds where Numba's cache lacks them), ``work_bytes`` (what
    the memory leaves its work) and, for the
    row-groups family, ``group``/``read_ahead``/``blocks``/``block_bytes``. ``refused``: family name ->
    why its options are refused (reported as they are). ``kernels``: family name -> {solver: bytes loading its
    kernels added} where measured (:func:`predicted_held`); ``process``: this process's size measured before
    they loaded (default: now).
    """
    limit = process_limit() if memory is None else Limit(int(memory), "--memory")
    for o in runs.values():  # what a train process has done when it plans (its problem, the cut blocks) ...
        for name in solver_chain(o):
            leanest_plan(st, o, 0, name)
    # ... and holds then: this process's size where it is larger than a training process's measured one (a
    # store with many blocks, many classes; 8 MiB more than assumed was refused at the figure named)
    process = max(TRAIN_PROCESS_BYTES, rss_bytes() if process is None else int(process))
    base = process + st.reader_bytes() + (0 if kernels else kernels_bytes(fresh=True))
    out = {"memory": limit.bytes, "memory_source": limit.source, "process_bytes": base, "process_rss": process,
           "work_bytes": auto_budget(limit, base), "k": None, "families": {}, "refused": dict(refused or {})}
    for family, o in runs.items():
        kern = (kernels or {}).get(family)
        held = predicted_held(st, o["solver_used"], o, process, kern)
        budget = auto_budget(limit, held)
        least = smallest_memory(st, o, process=process, kernels=kern)
        view = st.with_blocks(o["train_block_bytes"])
        fam = {"fits": limit.bytes >= least, "smallest_memory": least, "compile_bytes": held - base,
               "solver": o["solver_used"], "work_bytes": budget}
        plan_for = None if o.get("distributed") else planner(st, o)
        if plan_for is not None:
            t = fit_threads(st, o, budget) if o.get("threads_auto") else int(o["threads"])
            p = plan_for(budget, t, replica=True)
            if p.warning and not plan_for(budget, t).warning:  # the class drops a one-thread replica then
                p = plan_for(budget, t)
            fam.update(threads=t, fixed=p.fixed, vectors="memory" if p.vectors_in_memory else "paged",
                       vector_bytes=p.vector_bytes, cache=p.cache_bytes)
            cls = driver_class(o["solver_used"], None, o["multiclass"])
            if cls.footprint.policy == ROW_GROUPS.policy:
                group, ahead = group_and_ahead(view, _mix(cls.footprint, o, view))
                fam.update(group=group, read_ahead=p.readahead if ahead else 0, blocks=view.n_blocks(ROWS),
                           block_bytes=int(view.attrs["block_bytes"]))
        else:
            fam.update(threads=int(o["threads"]), fixed=0, vectors="paged", cache=0)
        out["k"] = out["k"] or make_problem(view, o).n_sub
        out["families"][family] = fam
    out["k"] = out["k"] or 1
    return out
