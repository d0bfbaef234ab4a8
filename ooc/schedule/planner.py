r"""The memory planner: how one ``--memory`` budget is split, for every solver and every worker.

Each solver family declares its *footprint* (:class:`Footprint`): the bytes it holds as linear
terms of the problem's sizes, for ``n`` examples, ``dim = d (+ 1 for the bias)`` features, ``k``
problems solved side by side (the classes of one-vs-rest, else 1), ``rows``/``cols`` the largest
row/column block and ``mix`` the blocks of a row group (``--mix-blocks``):

.. math::

    \text{beyond} = a_d\,dim + a_{kd}\,k\,dim + a_r\,rows + a_{kg}\,k\,mix\,rows + a_c\,cols,
    \qquad
    \text{vectors} = a_n\,n + a_{kn}\,k\,n .

``beyond`` is held whatever the plan (``O(d)`` vectors and one block's ``O(rows)`` ones): a
solver passes it to :func:`plan` as ``fixed`` and it comes out of the budget first (``--memory``
is a promise about the whole process: :mod:`ooc._memlimit` takes what the process already holds
off it). Of the rest, ``M``, the ``O(n)`` ``vectors`` (duals, margins, labels, weights) stay in
memory, charged to ``M``, when ``vectors <= floor(M / 4)``, otherwise they are paged, streamed or
memory-mapped.

The planner (:func:`plan`) splits ``M`` (each of ``K`` workers gets ``floor(budget / K)``, less its
``fixed``) by the family's policy into a :class:`Plan`:

* ``row-groups`` (sdca, acc-sdca, rcd-dual, dspdc, Crammer-Singer): with ``V`` the in-memory
  vectors, ``B`` the decoded bytes of a row block, ``G = mix B`` a group and ``F = M - V``,
  two groups are read ahead (``read_depth = 2``) when ``0 < 4 G <= F < nb B + 3 G``, else one;
  the read-ahead is ``2 G`` or ``min(G, max(B, F - G))`` (``ahead_blocks`` = its whole blocks,
  at least 1), and the cache gets ``max(0, F - G - readahead)``, less one more ``G`` with two groups
  read ahead (a fourth group's arrays are live at times);
* ``cache`` (rcd-primal, a CoCoA worker): the cache gets ``max(0, M - V)``;
* ``halves`` (dgpd): the cache gets ``max(0, floor(M / 2) - V)`` and each layout's resident
  active lines ``floor(M / 4)``.

Only cache sizes, read-ahead and where the ``O(n)`` vectors live depend on the plan: the
iterates never do.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np

from ..store import layout as L
from ..units import format_bytes


class MemoryBudgetWarning(UserWarning):
    """``--memory`` is smaller than what a solver holds at once; the run goes on above it."""


class Footprint(NamedTuple):
    """Bytes a solver family holds, as coefficients of the sizes (module docstring).

    ``per_dim``, ``per_k_dim``: ``O(d)`` vectors; ``per_block_row``, ``per_k_group_row``: per row
    of the largest row block (the latter per problem and per block of a group, for the group
    being worked on and those read ahead); ``per_block_col``: per column of the largest column
    block; ``per_example``, ``per_k_example``: the ``O(n)`` vectors. ``policy`` names how
    :func:`plan` splits the budget.
    """

    policy: str
    per_dim: int = 0
    per_k_dim: int = 0
    per_block_row: int = 0
    per_k_group_row: int = 0
    per_block_col: int = 0
    per_example: int = 0
    per_k_example: int = 0

    def beyond_memory(self, dim: int, k: int, rows: int = 0, cols: int = 0, mix: int = 4) -> int:
        """Bytes held whatever ``--memory`` is."""
        return (self.per_dim * dim + self.per_k_dim * k * dim + self.per_block_row * rows
                + self.per_k_group_row * k * mix * rows + self.per_block_col * cols)

    def vectors(self, n: int, k: int) -> int:
        """Bytes of the ``O(n)`` vectors."""
        return self.per_example * n + self.per_k_example * k * n

    def resident(self, n: int, dim: int, k: int, rows: int = 0, cols: int = 0, mix: int = 4) -> dict:
        """``{"beyond_memory": ..., "vectors": ...}`` (what ``ooc info`` prints)."""
        return {"beyond_memory": self.beyond_memory(dim, k, rows, cols, mix), "vectors": self.vectors(n, k)}


#: The row-block dual solvers: ``w``, ``v``, the pass snapshot and the result (``32 k dim``); the
#: duals of the group worked on and of at most two groups read ahead (``24 k mix rows``); the
#: duals ``8 n k``, else paged per block.
ROW_GROUPS = Footprint("row-groups", per_k_dim=32, per_k_group_row=24, per_k_example=8)
#: DGPD: the dense result (``8 k dim``), one problem's primal search (``34 dim``), the streamed dual
#: search of one row block (``65 rows``); labels, weights and row norms ``24 n``, else re-read per
#: row block. Not counted: the active submatrix (about 40 bytes per entry) and the active sets.
DGPD = Footprint("halves", per_dim=34, per_k_dim=8, per_block_row=65, per_example=24)
#: rcd-primal: ``u, M``, L1 weights, column counts and coordinate gaps (``40 dim``); ``w``, the gap
#: pass's ``A^T phi'`` and the result (``24 k dim``); one column block's sampling tree and draws
#: (``48 cols``); margins, labels and weights ``8 n (2 k + 1)``, else memory-mapped.
RCD_PRIMAL = Footprint("cache", per_dim=40, per_k_dim=24, per_block_col=48, per_example=8, per_k_example=16)
#: A CoCoA worker (binary or regression: one problem): ``v``, ``w`` and their local copies
#: (``32 dim``) and one block's duals (``8 rows``); its duals are always paged (run directory).
COCOA_WORKER = Footprint("cache", per_dim=32, per_block_row=8, per_example=8)

#: The O(n) vectors stay in memory when they fit in this fraction of the budget.
VECTOR_SHARE = 4


class Plan(NamedTuple):
    """How one process's (or worker's) ``memory`` is split.

    ``vectors_in_memory``/``vector_bytes``: whether the ``O(n)`` vectors stay in memory and the
    bytes they take from the budget (0 otherwise); ``cache_bytes``: the block cache's budget;
    ``read_depth``, ``ahead_blocks``: groups read at once and blocks of the next group read while
    one is worked on (row-groups); ``line_bytes``: per layout, for DGPD's resident active lines;
    ``free``: the budget left once the vectors are charged; ``warning``: the
    :class:`MemoryBudgetWarning` text when the budget cannot hold what is always held, else None;
    ``fixed``: what the solver holds outside the plan, taken off ``memory`` first; ``minimum``: the
    smallest ``memory`` that holds ``fixed`` and what a pass needs at once (row-groups: a group
    and one block read ahead; the O(n) vectors paged); ``readahead``: bytes read ahead (row-groups);
    ``holds``: what the run holds at once, item by item (the reports' text).
    """

    memory: int
    vectors_in_memory: bool
    vector_bytes: int
    cache_bytes: int
    read_depth: int = 1
    ahead_blocks: int = 1
    line_bytes: int = 0
    free: int = 0
    warning: str | None = None
    fixed: int = 0
    minimum: int = 0
    readahead: int = 0
    holds: str = ""


def worker_memory(memory: int, workers: int) -> int:
    """Each of ``workers`` processes' share of ``memory``: ``floor(memory / workers)``."""
    return int(memory) // max(1, int(workers))


def plan(footprint: Footprint | str, store, memory: int, k: int = 1, mix: int = 1, vectors: str | None = None,
         workers: int = 1, warn: bool = True, fixed: int = 0) -> Plan:
    """Split ``memory`` for a solver of ``footprint`` (or solver name) reading ``store``.

    Parameters
    ----------
    footprint : Footprint or str
        The family's footprint (a solver's is in its registry entry,
        :data:`ooc.solvers.registry.SOLVER_REGISTRY`).
    store : ooc.store.Store
        The store as the solver reads it (its row blocks and ``block_bytes``).
    memory : int
        The whole budget in bytes; each of ``workers`` gets ``floor(memory / workers)``.
    k : int
        Problems solved side by side.
    mix : int
        Row blocks per group (row-groups only).
    vectors : str, optional
        ``'memory'`` forces the ``O(n)`` vectors into memory, any other value out of it; None
        decides by the budget (``vectors <= floor(M / 4)``).
    warn : bool
        Emit the :class:`MemoryBudgetWarning` (row-groups) when the plan has one.
    fixed : int
        Bytes the solver (each worker) holds whatever the plan: its ``O(d)`` vectors and one
        block's ``O(rows)`` ones (:meth:`Footprint.beyond_memory`), taken off the budget first.
    """
    fp = footprint
    share = worker_memory(memory, workers)
    fixed = max(0, int(fixed))
    mem = max(0, share - fixed)
    need = fp.vectors(int(store.n_rows), int(k))
    in_mem = vectors == "memory" or (vectors is None and need <= mem // VECTOR_SHARE)
    vec = need if in_mem else 0
    holds = f"the O(d) vectors and one block's ({format_bytes(fixed)})"
    short = f"--memory {format_bytes(share)} is less than this run holds at once: {holds}; raise --memory" \
        if share < fixed else None
    if fp.policy == "cache":
        p = Plan(mem, in_mem, vec, max(0, mem - vec), free=mem - vec, fixed=fixed, minimum=fixed, warning=short,
                 holds=holds)
    elif fp.policy == "halves":
        p = Plan(mem, in_mem, vec, max(0, mem // 2 - vec), line_bytes=mem // 4, free=mem - vec, fixed=fixed,
                 minimum=fixed, warning=short, holds=holds)
    elif fp.policy == "row-groups":
        p = _plan_row_groups(store, mem, in_mem, vec, int(mix), fixed)
        if p.warning and in_mem and vectors is None:  # the duals paged make room for a pass: the minimum's plan
            p = _plan_row_groups(store, mem, False, 0, int(mix), fixed)
    else:
        raise ValueError(f"unknown memory policy {fp.policy!r}")
    if warn and p.warning:
        warnings.warn(p.warning, MemoryBudgetWarning, stacklevel=3)
    return p


def fixed_bytes(footprint: Footprint, store, k: int, dim: int, mix: int = 1) -> int:
    """What a solver of ``footprint`` holds whatever the plan, on ``store`` as it reads it
    (:meth:`Footprint.beyond_memory` with its widest row and column blocks)."""
    return footprint.beyond_memory(dim, k, rows=_widest(store, L.ROWS), cols=_widest(store, L.COLS), mix=mix)


def _widest(store, layout: str) -> int:
    n, d = store.shape
    return int(np.max(np.diff(store.block_ptr(layout)))) if store.has_layout(layout) and n and d else 0


def budget_option(options: dict) -> int:
    """A solver's ``memory`` option in bytes: what :func:`ooc.train` resolved, or ``auto`` when None."""
    from .._memlimit import work_budget

    m = options.get("memory")
    return work_budget(None) if m is None else int(m)


class MemoryLimitError(ValueError):
    """``--memory auto`` under a limit smaller than what the run holds at once (one line: the smallest that works)."""


def refuse_or_warn(p: Plan, limit=None, held: int = 0, least: int | None = None) -> None:
    """Report a plan that cannot keep its promise, before the first epoch.

    ``least``: the limit to name as the smallest that works, where the caller knows one larger than this
    plan's own (:func:`ooc.memfit.smallest_memory`: a process that may go on with another solver).

    An explicit ``--memory`` that counts the whole process (the command line: ``held``, what the
    process held when it planned, > 0) is a ceiling: :class:`MemoryLimitError` names the smallest that
    works, as under ``auto``. A Python caller's (``held`` 0: what training may add to its process)
    goes on at the plan's minimum with a :class:`MemoryBudgetWarning` naming it. Under ``auto`` the limit is real (a cgroup kills the process beyond it), so :class:`MemoryLimitError`
    names the smallest limit that works: ``held + minimum`` and the margin.
    """
    if not p.warning:
        return
    parts = p.holds
    from .._memlimit import limit_that_works

    if limit is None and held:
        # an explicit --memory of the whole process (the command line) is a ceiling, not a hint: a run that
        # would go above it is refused, naming the smallest that works with the margin and headroom auto's has
        raise MemoryLimitError(
            f"--memory is less than this run holds at once ({parts}): the smallest --memory that works here is "
            f"{format_bytes(least or limit_that_works(held + p.minimum), up=True)} (the process holds {format_bytes(held)} "
            "of it); or lower --mix-blocks / --block-bytes (the iterates depend on them, never on --memory)")
    if limit is None:
        # a Python caller's memory is what training may add to its process: the run goes on at the minimum
        warnings.warn(f"--memory is less than this run holds at once ({parts}); it goes on above it: the smallest "
                      f"--memory that works here is {format_bytes(p.minimum, up=True)}; or lower --mix-blocks / "
                      "--block-bytes (the iterates depend on them, never on --memory)", MemoryBudgetWarning,
                      stacklevel=3)
        return
    need = least or limit_that_works(held + p.minimum)
    raise MemoryLimitError(
        f"this process may use {format_bytes(limit.bytes)} ({limit.source}) and holds {format_bytes(held)}; "
        f"training needs at least {format_bytes(need, up=True)} in all ({parts}): raise the limit, or lower "
        "--block-bytes / --mix-blocks")


def _plan_row_groups(store, mem: int, in_mem: bool, vec: int, mix: int, fixed: int = 0) -> Plan:
    """The row-groups split (module docstring): read-ahead depth and blocks, then the cache.

    Two groups are read at once when the budget holds three and the data would not fit in the
    cache anyway: a group read ends waiting for its last chunks to decode, and a second reader
    keeps the disk busy meanwhile (measured on a 14M-row store read cold under a 270M cgroup,
    reader alone: 4.1 s a pass with one, 3.1 with two, the disk's own rate ~3.5 s). Else one
    group: all of it when the budget holds two, else what it leaves, but at least one block
    (a pass always reads a block ahead).
    """
    nb = store.n_blocks(L.ROWS)
    block_bytes = int(store.attrs.get("block_bytes", 0))
    group_bytes = mix * block_bytes
    free = mem - vec
    # with two groups read ahead a fourth group's arrays are live at times (the pool keeps 2 + depth per
    # dtype: the one just worked on is handed back while the next reads start): measured on a 500k x 2^20
    # store, --memory 417 MiB peaked at 427 MiB when it was not charged
    depth = 2 if 0 < 4 * group_bytes <= free < nb * block_bytes + 3 * group_bytes else 1
    readahead = 2 * group_bytes if depth == 2 else min(group_bytes, max(block_bytes, free - group_bytes))
    ahead = max(1, readahead // block_bytes) if block_bytes > 0 else mix
    holds, warning = _row_groups_holds(store, mix, mem, free, vec, fixed)
    slack = group_bytes if depth == 2 else 0
    return Plan(mem, in_mem, vec, max(0, free - group_bytes - readahead - slack), depth, ahead, 0, free,
                warning, fixed, fixed + sum(group_and_ahead(store, mix)), readahead, holds)


def group_and_ahead(store, mix: int) -> tuple[int, int]:
    """Bytes of a group of ``mix`` row blocks, and of one block read ahead (0 when a group is all of them).

    Blocks are cut at ``block_bytes`` of decoded rows; a small store's only block is smaller, so
    the size of a block is ``min(block_bytes, ceil((nnz (index + value bytes) + 16 n) / nb))``.
    """
    n, nb = int(store.n_rows), store.n_blocks(L.ROWS)
    per_nnz = np.dtype(store.index_dtype).itemsize + np.dtype(store.dtype).itemsize
    mean = (store.nnz * per_nnz + 16 * n) / max(1, nb)
    block_bytes = int(min(int(store.attrs.get("block_bytes", 0)), math.ceil(mean)))
    return mix * block_bytes, (block_bytes if nb > mix else 0)


def _row_groups_holds(store, mix: int, memory: int, free: int, vec: int, fixed: int = 0) -> tuple[str, str | None]:
    """What a pass holds at once, item by item (``Plan.holds``), and the warning text when ``free``
    cannot hold a group and one block read ahead (else None)."""
    group_bytes, ahead = group_and_ahead(store, mix)
    held = group_bytes + ahead
    blocks = f"{mix} block{'s' if mix > 1 else ''}"
    parts = [f"a group of {blocks} (--mix-blocks, {format_bytes(group_bytes)})"]
    if ahead:
        parts.append(f"one block read ahead ({format_bytes(ahead)})")
    if vec:
        parts.append(f"the duals ({format_bytes(vec)})")
    if fixed:
        parts.insert(0, f"the O(d) vectors ({format_bytes(fixed)})")
    holds = f"{', '.join(parts)}, about {format_bytes(fixed + held + vec)}"
    if held <= free:
        return holds, None
    return holds, (f"--memory {format_bytes(memory + fixed)} is less than this run holds at once: {holds}; raise "
                   "--memory" + (" or lower --mix-blocks or --block-bytes (the iterates depend on them, never on "
                                 "--memory)" if mix > 1 else " or lower --block-bytes (the iterates depend on it, "
                                                             "never on --memory)"))


def store_resident(footprint: Footprint, store) -> dict:
    """``{"beyond_memory", "vectors"}`` of ``footprint`` on ``store`` (what ``ooc info`` prints).

    ``beyond_memory`` (the name is older than the whole-process budget): held whatever the split
    (``O(d)`` vectors and one block's ``O(rows)`` ones), taken off ``--memory`` first; ``vectors``:
    the ``O(n)`` vectors, kept in memory when they fit in a quarter of what is left, otherwise
    paged, streamed or memory-mapped. Computed for ``k`` one-vs-rest problems (the classes of a
    multiclass store, else 1), with a bias feature and ``mix = 4``.
    """
    n, d = store.shape
    k = len(store.classes) if store.label_kind == L.MULTICLASS and store.classes else 1
    return footprint.resident(n, d + 1, k, rows=_widest(store, L.ROWS), cols=_widest(store, L.COLS))
