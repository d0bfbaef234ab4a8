r"""Software prefetching for the kernels that visit rows in a random order, or gather ``w``.

A dual coordinate pass visits the rows of a block in a random permutation. Each row
costs a chain of dependent cache misses: ``order[t]`` gives ``i``, which gives ``alpha[i]``,
``y[i]``, ``c[i]`` and ``indptr[i]``, which gives the row's ``indices`` and ``data``, which
give the ``w[j]`` to read. The per-row work in between (a Newton step with an ``exp``) is
long enough that the processor's out-of-order window never reaches the next row's loads,
so the misses are paid one after the other. Asking for the data of rows ``t + 24``,
``t + 12`` and ``t + 4`` while row ``t`` is worked on overlaps them: on the 1M x 1M
benchmark set a logistic pass took 0.56-0.62 s instead of 1.0-1.2 s, with bit-identical
iterates (a prefetch never changes a value, it only moves a cache line).

:func:`prefetch` is an LLVM intrinsic (``llvm.prefetch``, read, keep in all cache
levels). On a processor without prefetch instructions LLVM drops it.
"""

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["prefetch", "prefetch_rows", "prefetch_gather", "ROWS_AHEAD", "NNZ_AHEAD"]

#: how far ahead (in visited rows) each link of the chain is requested: the row's scalars
#: and ``indptr`` first, its nonzeros once ``indptr`` is in cache, the ``w`` entries last
ROWS_AHEAD = (24, 12, 4)
#: how far ahead (in nonzeros) a sweep over the rows in storage order requests ``w[indices[q]]``
NNZ_AHEAD = 64


@intrinsic
def prefetch(typingctx, arr, idx):
    """Hint that ``arr[idx]`` (for a 2-d array, the start of row ``arr[idx, :]``) will be read soon.

    No effect on values; never faults, whatever ``idx``.
    """
    if not isinstance(arr, types.Array) or arr.ndim not in (1, 2) or not isinstance(idx, types.Integer):
        return None
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        aryty, idxty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        i = context.cast(builder, args[1], idxty, types.intp)
        inds = [i] + [context.get_constant(types.intp, 0)] * (aryty.ndim - 1)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, inds, wraparound=False)
        i8p = builder.bitcast(ptr, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch")
        # read (0), highest temporal locality (3), data cache (1)
        builder.call(fn, [i8p, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


#: most cache lines of one array requested for one row (a longer row's rest is left to the
#: hardware prefetcher, which follows a sequential stream once it has seen a few lines)
SPAN_LINES = 16


@njit(cache=True, nogil=True, inline="always")
def _prefetch_span(arr, s, e):
    """Request the cache lines of ``arr[s:e]`` (at most :data:`SPAN_LINES` of them, and the last)."""
    step = max(1, 64 // arr.itemsize)
    stop = min(e, s + SPAN_LINES * step)
    for q in range(s, stop, step):
        prefetch(arr, q)
    prefetch(arr, e - 1)


@njit(cache=True, nogil=True, inline="always")
def prefetch_rows(order, t, indptr, indices, data, alpha, y, c, w, w_snap):
    """Prefetch what the rows visited after step ``t`` of ``order`` will read.

    Row ``order[t + 24]``: its ``alpha``, ``y``, ``c`` and ``indptr`` entries. Row
    ``order[t + 12]``: the cache lines of its ``indices`` and ``data`` (``indptr`` was
    requested 12 rows ago; up to :data:`SPAN_LINES` lines each, and the last): row ``t + 4``'s
    ``w`` requests read its ``indices``, and a line missing there stalls the pass (a dense
    400k x 50 float64 block: 2.0 us a row with the first and last lines only, 0.9 with all).
    Row ``order[t + 4]``: ``w[j]`` (and ``w_snap[j]`` when it is not empty) for its nonzeros.
    ``alpha`` may be empty (then it is skipped). ``alpha``, ``w`` and ``w_snap`` may be 2-d
    (multiclass: one row per example or feature), then the start of the row is requested.
    """
    m = order.shape[0]
    t1 = t + ROWS_AHEAD[0]
    if t1 < m:
        i = order[t1]
        prefetch(indptr, i)
        prefetch(y, i)
        prefetch(c, i)
        if alpha.shape[0] > 0:
            prefetch(alpha, i)
    t2 = t + ROWS_AHEAD[1]
    if t2 < m:
        i = order[t2]
        s = indptr[i]
        e = indptr[i + 1]
        if e > s:
            _prefetch_span(indices, s, e)
            _prefetch_span(data, s, e)
    t3 = t + ROWS_AHEAD[2]
    if t3 < m:
        i = order[t3]
        snap = w_snap.shape[0] > 0
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            prefetch(w, j)
            if snap:
                prefetch(w_snap, j)


@njit(cache=True, nogil=True, inline="always")
def prefetch_gather(w, indices, lo, hi):
    """Prefetch ``w[indices[q]]`` for ``q`` in ``[lo, hi)`` (clipped to ``indices``).

    A sweep over rows in storage order reads ``indices`` sequentially (the hardware
    prefetcher follows it) but gathers ``w`` at random: calling this with the nonzeros
    :data:`NNZ_AHEAD` positions ahead of the row being summed halves the time of
    :func:`ooc.kernels.sdca.block_primal_loss` on the 1M x 1M set (0.21 to 0.095 s).
    """
    nnz = indices.shape[0]
    for q in range(min(lo, nnz), min(hi, nnz)):
        prefetch(w, indices[q])
