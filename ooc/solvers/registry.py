"""The solvers: what each needs, which class runs it, and the ``auto`` rule.

Every solver name is spelled here (and in its own module); validation in :mod:`ooc.train`,
the ``--solver`` choices of the command line and ``ooc info``'s text read this table, so a
new solver is one entry here plus its module. The driver classes are imported only when a
run starts: reading the table must not compile every solver's kernels.

The ``auto`` rule (:func:`auto_solver`; ``ooc info`` reports ``C_P``, ``C_D``) is explained in
:mod:`ooc.solvers.rcd`.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

from .._cpu import available_cpus
from ..objectives.losses import LOSS_NAMES, loss_spec, make_loss
from ..schedule.planner import (
    DGPD,
    RCD_PRIMAL,
    ROW_GROUPS,
    Footprint,
    fixed_bytes,
    group_and_ahead,
    plan,
    store_resident,
)
from ..schedule.sampling import normalize_sampling
from ..store.layout import COLS, MULTICLASS, ROWS

#: ``--solver`` value that lets :func:`auto_solver` choose.
AUTO = "auto"
#: ``--multiclass`` modes.
OVR, CRAMMER_SINGER = "ovr", "crammer-singer"
#: ``pure_l1`` values: how a solver trains ``--l2 0 --l1 > 0``.
NATIVE, ADDED_L2 = "native", "added-l2"


class SolverSpec(NamedTuple):
    """One solver and its needs.

    Attributes
    ----------
    name : str
        The ``--solver`` value.
    drivers : dict
        ``"module:Class"`` of the driver per mode: ``""`` (default), ``"crammer-singer"``,
        ``"distributed"``; imported lazily by :func:`driver_class`.
    layouts : tuple of str
        Store layouts it reads.
    smooth_loss : bool
        Needs a smooth loss (a Lipschitz derivative).
    needs_l2 : bool
        Its algorithm needs ``l2 > 0`` (a strongly convex primal).
    pure_l1 : str
        How it trains ``--l2 0 --l1 > 0``: ``"native"``, ``"added-l2"`` (a small L2 that still
        certifies the L1 problem) or ``""`` (refused).
    multiclass : tuple of str
        ``--multiclass`` modes it trains.
    warm_start : bool
        Starts from a finished run's duals.
    distributed : bool
        Runs on Dask (``--distributed``).
    samplings : bool
        Takes non-uniform ``--sampling`` and ``--paging gap`` (else shuffled passes only).
    footprint : ooc.schedule.planner.Footprint
        What it holds in memory (:mod:`ooc.schedule.planner` splits ``--memory`` by it; ``ooc
        info`` prints it).
    options : tuple of str
        Training options that are its own: set away from their defaults, they are refused
        for another solver.
    intercept : bool
        Fits an unregularized intercept (``--fit-intercept``, :mod:`ooc.solvers.intercept`).
    """

    name: str
    drivers: dict
    layouts: tuple
    smooth_loss: bool
    needs_l2: bool
    pure_l1: str
    multiclass: tuple
    warm_start: bool
    distributed: bool
    samplings: bool
    footprint: Footprint
    options: tuple = ()
    intercept: bool = False


#: dgpd's own options' defaults (``ooc.config`` and the solver read them here: ``ooc.config`` must not
#: import the solver's module, whose kernels a command that does not train never needs)
DGPD_DEFAULTS = {"rounds": 5, "batch": 64, "growth": 1.0, "dual_step": "safe", "fallback": True}
#: ``--dgpd-dual-step``'s values
DGPD_DUAL_STEPS = ("safe", "theorem")
_DGPD_OPTIONS = ("dgpd_rounds", "dgpd_batch", "dgpd_growth", "dgpd_dual_step", "dgpd_fallback")
_BOTH = (ROWS, COLS)

#: the solvers' names (``--solver``), spelled here once
SDCA_SOLVER, ACC_SDCA_SOLVER, DGPD_SOLVER = "sdca", "acc-sdca", "dgpd"
RCD_PRIMAL_SOLVER, RCD_DUAL_SOLVER, DSPDC_SOLVER = "rcd-primal", "rcd-dual", "dspdc"

SOLVER_REGISTRY = {spec.name: spec for spec in (
    SolverSpec(SDCA_SOLVER, {"": "ooc.solvers.sdca:SDCASolver",
                        CRAMMER_SINGER: "ooc.solvers.crammer_singer:CrammerSingerSolver",
                        "distributed": "ooc.solvers.cocoa:CoCoASolver"},
               (ROWS,), False, True, ADDED_L2, (OVR, CRAMMER_SINGER), True, True, False, ROW_GROUPS, (), True),
    SolverSpec(ACC_SDCA_SOLVER, {"": "ooc.solvers.acc_sdca:AccSDCASolver"},
               (ROWS,), True, True, ADDED_L2, (OVR,), True, False, False, ROW_GROUPS),
    SolverSpec(DGPD_SOLVER, {"": "ooc.solvers.dgpd:DGPDSolver"},
               _BOTH, False, True, "", (OVR,), False, False, False, DGPD, _DGPD_OPTIONS),
    SolverSpec(RCD_PRIMAL_SOLVER, {"": "ooc.solvers.rcd_primal:RCDPrimalSolver"},
               _BOTH, True, False, NATIVE, (OVR,), False, False, True, RCD_PRIMAL),
    SolverSpec(RCD_DUAL_SOLVER, {"": "ooc.solvers.rcd_dual:RCDDualSolver"},
               (ROWS,), False, True, "", (OVR,), True, False, True, ROW_GROUPS),
    SolverSpec(DSPDC_SOLVER, {"": "ooc.solvers.dspdc:DSPDCSolver"},
               (ROWS,), True, True, "", (OVR,), False, False, False, ROW_GROUPS),
)}
#: ``--solver`` choices, ``auto`` first.
SOLVER_NAMES = (AUTO, *SOLVER_REGISTRY)


def solver_spec(name: str) -> SolverSpec:
    """The :class:`SolverSpec` of a solver name (``ValueError`` naming the choices if unknown)."""
    spec = SOLVER_REGISTRY.get(name)
    if spec is None:
        raise ValueError(f"--solver {name!r}: expected one of {', '.join(SOLVER_NAMES)}")
    return spec


def resident_memory(store) -> dict:
    """Bytes each solver family holds for ``store`` (``ooc info``'s ``resident_*`` figures).

    One entry per footprint, under the name of the first solver that has it (``sdca`` for the
    row-block dual solvers); see :func:`ooc.schedule.planner.store_resident`.
    """
    est = {}
    for name, spec in SOLVER_REGISTRY.items():
        if all(spec.footprint is not other for other in est.values()):
            est[name] = spec.footprint
    figures = {name: store_resident(fp, store) for name, fp in est.items()}
    k = len(store.classes) if store.label_kind == MULTICLASS and store.classes else 1
    return {"resident_k": k,
            "resident_bytes": {s: e["beyond_memory"] for s, e in figures.items()},
            "resident_vector_bytes": {s: e["vectors"] for s, e in figures.items()}}


def memory_fit(store, memory: int | None, block_bytes: int | None, mix: int, threads: int = 0) -> dict:
    """Whether and how a run of each solver fits ``memory`` on ``store`` (``ooc info --memory``).

    ``memory`` is the whole process (None: what this process may use, ``auto``); the process is
    assumed to hold :data:`ooc._memlimit.TRAIN_PROCESS_BYTES`, the kernels and the store reader's
    buffers when it plans, with no bias feature, ``--l1 0`` and ``k`` one-vs-rest problems (a
    multiclass store's classes, else 1). Per solver (on a multiclass store also ``sdca-crammer-singer``:
    ``--multiclass crammer-singer``; those of the row-block family differ in their
    O(d) vectors): ``fits``, ``smallest_memory`` (the smallest ``--memory``, or limit under ``auto``, that holds the
    O(d) vectors and what a pass holds at once), ``fixed`` (the O(d) vectors), and the plan:
    ``threads``: ``--threads`` (0: every core this process may use; one problem's threads hold a replica of
    the model each, so the figure grows with it)
    ``vectors`` ('memory' or 'paged'), ``group``/``read_ahead`` (row-groups), ``cache``.
    """
    from .._memlimit import TRAIN_PROCESS_BYTES, Limit, auto_budget, kernels_bytes, limit_that_works, process_limit

    view = store.with_blocks(block_bytes)
    base = TRAIN_PROCESS_BYTES + store.reader_bytes()
    held = base + kernels_bytes(fresh=True)  # the kernels loaded from Numba's cache
    limit = process_limit() if memory is None else None
    whole = limit if memory is None else Limit(int(memory), "--memory")
    budget = auto_budget(whole, held)
    k = len(store.classes) if store.label_kind == MULTICLASS and store.classes else 1
    out = {"memory": int(memory) if memory is not None else limit.bytes,
           "memory_source": "--memory" if memory is not None else limit.source,
           "process_bytes": held, "work_bytes": budget, "k": k, "families": {}}
    drivers = [(name, spec.footprint, driver_class(name)) for name, spec in SOLVER_REGISTRY.items()]
    if k > 1:  # Crammer-Singer holds other O(d) vectors than one-vs-rest sdca: a family of its own
        cs = driver_class(SDCA_SOLVER, multiclass=CRAMMER_SINGER)
        drivers.append((f"{SDCA_SOLVER}-{CRAMMER_SINGER}", cs.footprint, cs))
    for name, fp, cls in drivers:
        # with what compiling its kernels costs where Numba's cache lacks them (a first run)
        held_s = base + kernels_bytes(class_modules(cls), fresh=True)
        budget = auto_budget(whole, held_s)
        m = mix if fp.policy == "row-groups" else 1
        # the row-block solvers differ in their O(d) vectors (BlockLoopSolver.fixed_for), with --l1 0 and
        # the default --threads (every core: from 2 on, one problem's threads hold a replica of the model each)
        t = int(threads) or available_cpus()
        fixed = (cls.fixed_for(view, k, view.n_cols, m, 0.0, t) if hasattr(cls, "fixed_for")
                 else fixed_bytes(fp, view, k, view.n_cols, m))
        p = plan(fp, view, budget, k=k, mix=m, warn=False, fixed=fixed)
        least_min, used = p.minimum, t
        if hasattr(cls, "fixed_for"):
            # as the run does when it must: without a one-thread replica, and under --threads 0 on fewer
            # threads, down to 1 (ooc.train._fit_threads: each thread more holds a replica of the model)
            for n in range(t, 0 if not threads else t - 1, -1):
                lean = plan(fp, view, budget, k=k, mix=m, warn=False,
                            fixed=cls.fixed_for(view, k, view.n_cols, m, 0.0, n, replica=False))
                least_min = min(least_min, lean.minimum)
                if p.warning and not lean.warning:
                    p, used = lean, n
        # the figure a refusal names (ooc.schedule.planner.refuse_or_warn): with the margin and headroom; a
        # run fits when its memory is at least that
        least = limit_that_works(held_s + least_min)
        fam = {"fits": p.warning is None and out["memory"] >= least, "fixed": p.fixed, "threads": used,
               "smallest_memory": least,
               "vectors": "memory" if p.vectors_in_memory else "paged", "vector_bytes": p.vector_bytes,
               "cache": p.cache_bytes, "compile_bytes": held_s - held}
        if fp.policy == "row-groups":
            group, ahead = group_and_ahead(view, m)
            fam.update(group=group, read_ahead=p.readahead if ahead else 0, blocks=view.n_blocks(ROWS),
                       block_bytes=int(view.attrs["block_bytes"]))
        out["families"][name] = fam
    # dgpd whose duals turn dense goes on as sdca in the same process (--dgpd-fallback, the default)
    dgpd, sdca = out["families"].get("dgpd"), out["families"].get("sdca")
    if dgpd and sdca and sdca["smallest_memory"] > dgpd["smallest_memory"]:
        dgpd["smallest_memory"] = sdca["smallest_memory"]
        dgpd["fits"] = dgpd["fits"] and sdca["fits"]
    return out


def driver_class(name: str, distributed: str | None = None, multiclass: str | None = None) -> type:
    """Import and return the class that runs solver ``name`` in the given mode."""
    spec = solver_spec(name)
    mode = CRAMMER_SINGER if multiclass == CRAMMER_SINGER else "distributed" if distributed else ""
    if mode == "distributed":
        distributed_solver(name)
    if mode not in spec.drivers:  # a mode validation let through: run the solver's own driver
        mode = ""
    module, cls = spec.drivers[mode].split(":")
    return getattr(importlib.import_module(module), cls)


def solver_modules(name: str, distributed: str | None = None, multiclass: str | None = None) -> tuple:
    """The modules of the class that runs solver ``name`` in that mode (:func:`class_modules`)."""
    return class_modules(driver_class(name, distributed, multiclass))


def class_modules(cls: type) -> tuple:
    """The modules of driver class ``cls`` (its own and its bases'): those whose kernels a run loads
    (:func:`ooc._memlimit.kernels_uncached`)."""
    return tuple(sorted({c.__module__ for c in cls.__mro__ if c.__module__.startswith("ooc.")}))


def distributed_solver(requested: str = AUTO) -> str:
    """The solver ``--distributed`` runs (CoCoA+ distributes it); ``ValueError`` if ``requested``
    is another solver."""
    name = next(n for n, s in SOLVER_REGISTRY.items() if s.distributed)
    if requested not in (AUTO, name):
        raise ValueError(f"--distributed trains with {name} (CoCoA+); --solver {requested} is not distributed")
    return name


def acc_sdca_l2_threshold(info: dict, loss_name: str, gamma: float = 1.0) -> float | None:
    """``R^2 / (10 gamma n)``: below this ``l2``, ``auto`` picks ``acc-sdca`` (None for the hinge).

    ``gamma`` is the paper's: 1 / the loss's smoothness (4 logistic, 1 squared, the smooth
    hinge's own ``gamma``), read from the loss itself.
    """
    loss = make_loss(loss_name, gamma=gamma)
    n = int(info.get("n_rows") or 0)
    if not loss.is_smooth or n <= 0:
        return None
    return float(info.get("R") or 0.0) ** 2 * float(loss.smoothness) / (10.0 * n)


def auto_solver(info: dict, l1: float, l2: float, loss_name: str, multiclass: str | None = None,
                has_cols: bool = True, sampling: str = "uniform", gamma: float = 1.0,
                fit_intercept: bool = False) -> str:
    """The solver ``--solver auto`` runs (the rule in :mod:`ooc.solvers.rcd`'s docstring).

    ``info`` is ``store.info()`` (its ``C_P``, ``C_D``, ``R``, ``n_rows``); a non-uniform
    ``sampling`` on the dual side selects ``rcd-dual`` (``sdca`` samples by shuffled passes only).
    """
    smooth = loss_spec(loss_name).smooth
    if multiclass == CRAMMER_SINGER:
        return SDCA_SOLVER
    if fit_intercept and l2 > 0:
        return next(n for n, s in SOLVER_REGISTRY.items() if s.intercept)
    if l1 > 0 and l2 <= 0:
        return RCD_PRIMAL_SOLVER
    if smooth and has_cols and float(info["C_P"]) < float(info["C_D"]):
        return RCD_PRIMAL_SOLVER
    if normalize_sampling(sampling) != "uniform":
        return RCD_DUAL_SOLVER
    threshold = acc_sdca_l2_threshold(info, loss_name, gamma)
    return ACC_SDCA_SOLVER if threshold is not None and l2 < threshold else SDCA_SOLVER


def explain_auto(info: dict, has_cols: bool) -> list[str]:
    """What ``--solver auto`` would run on this store, as lines for ``ooc info``."""
    side = "primal" if float(info["C_P"]) < float(info["C_D"]) else "dual"
    lines = []
    if side == "primal" and has_cols:
        lines.append("smooth losses -> rcd-primal (C_P < C_D); hinge -> sdca")
    else:
        why = "C_P >= C_D" if side == "dual" else "C_P < C_D but no column layout"
        lines.append(f"dual side ({why}): sdca, or acc-sdca for a smooth loss when l2 < R^2/(10 gamma n)")
        thr = {name: acc_sdca_l2_threshold(info, name) for name in LOSS_NAMES if loss_spec(name).smooth}
        lines.append("acc-sdca below l2 = " + ", ".join(f"{k} {v:.3g}" for k, v in thr.items())
                     + " (smooth-hinge with gamma 1)")
    lines.append("pure L1 (--l2 0) -> rcd-primal (working sets); crammer-singer -> sdca; non-uniform --sampling -> rcd-dual")
    return lines
