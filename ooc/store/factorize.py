r"""Factorized data for DSPDC (Yu, Lin & Yang, Sec. 3-4): ``A = U V`` with ``U = X G^T``, ``V = G``.

``ooc convert INPUT STORE --factorize K`` converts as usual, then adds to the (still unpublished)
store, in a second streaming pass over its row blocks::

    factor/U          (n K,)   U = X G^T, row-major (row i = U_i), the store's dtype
    factor/Vt         (d K,)   V^T = G^T, row-major (row j = column j of V), the store's dtype
    factor/block_ptr  (b+1,)   first row of each U block (blocks of about block_bytes decoded)
    factor/a_sqnorm   (n,)     ||A_i||^2 = U_i (G G^T) U_i^T, float64 (R = max row norm of A)

and the attribute ``factor = {k, seed, scale, R, blocks, base_fingerprint}``. The fingerprint
of the store then covers ``U`` and ``V`` too (a run on a factorized store is refused on another).

``G`` is ``K x d`` with i.i.d. ``N(0, 1/d)`` entries (the paper's "Gaussian random matrix",
which does not give a scale). With variance ``1/d``, ``G G^T`` is close to ``I_K`` (rows nearly
orthonormal), so ``G^T G`` is close to the orthogonal projection ``P`` onto a random
``K``-dimensional subspace and ``A ~ X P``: row norms shrink by about ``sqrt(K/d)``. (Variance
``1/K`` would make ``E[G^T G] = I`` but inflate row norms by ``sqrt(d/K)``, and with them
``R^2`` and the iteration count.) It is generated from ``(seed, c)`` in
chunks of :data:`G_CHUNK` columns, so it does not depend on ``--memory``; at most a quarter of
``memory`` of it is held at a time (regenerated per row piece when it does not fit).

**What training on a factorized store solves**: the model is on the original ``d`` features,
and the data matrix is ``A = U V = X G^T G`` (rank ``<= K``), not ``X``:
``P(x) = 1/n sum_i c_i phi(U_i V x, y_i) + l2/2 ||x||^2 + l1 ||x||_1`` (problem (17) of the
paper). With ``K < d`` it is another problem than the one on ``X``. Only ``--solver dspdc``
reads the factors; the other solvers train on ``X`` as usual.
"""

from __future__ import annotations

import hashlib
import math
import os

import numpy as np

from .. import owned
from . import layout as L
from .backend import StoreError
from .integrity import seal_attrs
from .store import Block, backend_for_path, open_store
from .writer import Appender, check_output_store, output_location, publish, remove_path, temporary_path

# the array names live in layout (the integrity checks verify these arrays too)
FACTOR_U, FACTOR_VT, FACTOR_BLOCK_PTR, FACTOR_A_SQNORM = L.FACTOR_U, L.FACTOR_VT, L.FACTOR_BLOCK_PTR, L.FACTOR_A_SQNORM
#: columns of G drawn from one seeded generator
G_CHUNK = 4096


def gaussian_columns(seed: int, k: int, d: int, c0: int, c1: int, dtype) -> np.ndarray:
    """Columns ``c0..c1-1`` of ``G`` (``k x (c1 - c0)``, ``N(0, 1/d)``), cast to ``dtype``.

    Chunk ``t`` of :data:`G_CHUNK` columns comes from ``default_rng([seed, t])``, so any column
    range is reproducible on its own.
    """
    parts = []
    for t in range(c0 // G_CHUNK, -(-c1 // G_CHUNK)):
        lo, hi = t * G_CHUNK, (t + 1) * G_CHUNK
        g = np.random.default_rng([int(seed), t]).standard_normal((k, G_CHUNK)) / math.sqrt(d)
        parts.append(g[:, max(c0, lo) - lo:min(c1, hi) - lo])
    out = np.concatenate(parts, axis=1) if parts else np.zeros((k, 0))
    return np.ascontiguousarray(out.astype(dtype))


def _column_groups(d: int, k: int, memory: int) -> list[tuple[int, int]]:
    width = max(G_CHUNK, (memory // 4) // (8 * k) // G_CHUNK * G_CHUNK)
    return [(c0, min(d, c0 + width)) for c0 in range(0, d, width)] or [(0, 0)]


def factorize_in_place(path: str, k: int, seed: int = 0, memory: int = 1 << 30) -> dict:
    """Add ``factor/*`` (``U = X G^T``, ``V = G``) to the complete store at ``path``.

    Streams over the row blocks (pieces of at most ``memory / 4`` bytes of ``U``); holds ``G``
    when it fits in ``memory / 4``, else regenerates its column groups per piece. Meant for an
    unpublished store (:func:`convert_factorized`): a crash leaves only a temporary container.

    Returns
    -------
    dict
        The ``factor`` attribute written.
    """
    k = _check_k(k, memory)
    st = open_store(path)
    try:
        if not st.has_layout(L.ROWS):
            raise StoreError(f"{path}: factorizing needs the row layout (convert with --layout rows or both)")
        if st.attrs.get("factor"):
            raise StoreError(f"{path}: already factorized")
        n, d, dtype = st.n_rows, st.n_cols, st.dtype
        cl = int(st.attrs.get("chunk_len") or L.DEFAULT_CHUNK_LEN)
        block_bytes = int(st.attrs["block_bytes"])
        old_fp = st.fingerprint
        row_blocks = [st.block_bounds(L.ROWS, b) for b in range(st.n_blocks(L.ROWS))]
    finally:
        st.close()
    be = backend_for_path(path).open(path, "r+")
    try:
        groups = _column_groups(d, k, memory)
        held = {}
        h_u, h_v = hashlib.blake2b(digest_size=16), hashlib.blake2b(digest_size=16)
        # V first: its Gram matrix G G^T gives the row norms of A as U streams out
        gram = np.zeros((k, k))
        vt = Appender(be, FACTOR_VT, dtype, cl, h_v)
        for c0, c1 in groups:
            g = gaussian_columns(seed, k, d, c0, c1, dtype)
            g64 = g.astype(np.float64)
            gram += g64 @ g64.T
            vt.append(np.ascontiguousarray(g.T).reshape(-1))
            if len(groups) == 1:
                held[(c0, c1)] = g
        vt.close()
        # sized as the solver holds a block: CSR with an int32 column id per value
        ptr = L.block_boundaries(np.full(n, k, dtype=np.int64), L.entry_bytes(dtype, np.int32), block_bytes)
        be.create_array(FACTOR_BLOCK_PTR, np.int64, max(len(ptr), 1), len(ptr))
        be.write(FACTOR_BLOCK_PTR, 0, ptr)
        ua = Appender(be, FACTOR_U, dtype, cl, h_u)
        sq = Appender(be, FACTOR_A_SQNORM, np.float64, cl)
        piece = max(1, (memory // 4) // (8 * k))
        r2 = 0.0
        import scipy.sparse as sp

        for r0, r1 in row_blocks:
            for s in range(r0, r1, piece):
                e = min(r1, s + piece)
                blk = _read_rows(be, s, e)
                X = sp.csr_matrix((blk.data.astype(np.float64), blk.indices, blk.indptr), shape=(e - s, d))
                U = np.zeros((e - s, k))
                for c0, c1 in groups:
                    g = held.get((c0, c1))
                    if g is None:
                        g = gaussian_columns(seed, k, d, c0, c1, dtype)
                    U += np.asarray(X[:, c0:c1] @ g.astype(np.float64).T)
                U = U.astype(dtype)
                u64 = U.astype(np.float64)
                a_sq = np.einsum("ij,jk,ik->i", u64, gram, u64)
                if len(a_sq):
                    r2 = max(r2, float(a_sq.max()))
                ua.append(U.reshape(-1))
                sq.append(a_sq)
        ua.close()
        sq.close()
        h = hashlib.blake2b(digest_size=16)
        h.update(old_fp.encode())
        h.update(repr(("factor", k, int(seed), str(dtype))).encode())
        h.update(h_u.digest())
        h.update(h_v.digest())
        info = {"k": k, "seed": int(seed), "scale": 1.0 / math.sqrt(max(d, 1)), "R": math.sqrt(r2),
                "blocks": len(ptr) - 1, "base_fingerprint": old_fp}
        be.set_attrs({"factor": info, "fingerprint": h.hexdigest()})
        seal_attrs(be)  # the digest covers the new attributes, or the store would be refused
    finally:
        be.close()
    return info


def _read_rows(be, start: int, stop: int) -> Block:
    indptr = be.read(L.array_name(L.ROWS, L.INDPTR), start, stop + 1)
    lo, hi = int(indptr[0]), int(indptr[-1])
    return Block(L.ROWS, -1, start, stop, indptr - lo, be.read(L.array_name(L.ROWS, L.INDICES), lo, hi),
                 be.read(L.array_name(L.ROWS, L.DATA), lo, hi))


def _check_k(k, memory: int) -> int:
    """``K`` when it is >= 1 and ``G``'s K x K Gram matrix (held whole) fits in a quarter of ``memory``."""
    k = int(k)
    if k < 1:
        raise ValueError(f"--factorize K needs K >= 1 (got {k})")
    if 8 * k * k > memory // 4:
        raise ValueError(f"--factorize {k}: the K x K Gram matrix of G needs {8 * k * k} bytes, more than a quarter "
                         f"of what --memory leaves for the work ({memory} bytes): choose a smaller K or more --memory")
    return k


def convert_factorized(source, store, k: int, *, seed: int = 0, overwrite: bool = False, **convert_options):
    """``ooc.convert`` then :func:`factorize_in_place`, published only when both are done.

    Parameters are those of :func:`ooc.store.ingest.convert`, plus ``k`` (columns of ``U``, rows
    of ``V``) and ``seed`` (of ``G``). Returns the opened store.
    """
    from .backend import MemoryBackend
    from .ingest import convert, memory_budget

    store = output_location(store)
    with owned.exclusive(store, "the conversion"):  # one writer of STORE at a time, from its check to its swap
        exists = MemoryBackend.detect(store) if store.startswith("memory://") else os.path.exists(store)
        check_output_store(store, exists, overwrite, source)
        memory = memory_budget(convert_options.get("memory", "1GiB"))
        k = _check_k(k, memory)  # before any work
        tmp = temporary_path(store)
        try:
            convert(source, tmp, **convert_options).close()
            factorize_in_place(tmp, k, seed, memory)
            publish(tmp, store, replace=exists)
        except BaseException:
            remove_path(tmp)
            raise
    return open_store(store)


def is_factorized(store) -> bool:
    return bool(store.attrs.get("factor"))


class FactorView:
    """A store seen through its factor: the rows are ``U`` (``K`` dense columns, as CSR), the rest
    (labels, shape ``n x d``, attributes) is the store's. What :class:`ooc.solvers.base.BlockLoopSolver`
    reads, so the block loop, duals and checkpoints work unchanged on ``U``.
    """

    def __init__(self, store):
        self._st = store
        info = store.attrs.get("factor")
        if not info:
            raise StoreError(f"{store.path}: not a factorized store (convert with --factorize K)")
        self.k = int(info["k"])
        self.factor = info
        self._ptr = store.backend.read(FACTOR_BLOCK_PTR)
        self._cols = np.arange(self.k, dtype=np.int32)

    def __getattr__(self, name):
        return getattr(self._st, name)

    def has_layout(self, layout: str) -> bool:
        return layout == L.ROWS

    def block_ptr(self, layout: str) -> np.ndarray:
        return self._ptr

    def n_blocks(self, layout: str) -> int:
        return len(self._ptr) - 1

    def block_bounds(self, layout: str, b: int) -> tuple[int, int]:
        return int(self._ptr[b]), int(self._ptr[b + 1])

    def block(self, layout: str, b: int, alloc=None) -> Block:
        """Rows ``U_i`` of block ``b`` as CSR with ``indices = 0..K-1`` on every row (``alloc`` unused)."""
        s, e = self.block_bounds(layout, b)
        k = self.k
        data = self._st.backend.read(FACTOR_U, s * k, e * k)
        indptr = np.arange(0, (e - s) * k + 1, k, dtype=np.int64)
        return Block(L.ROWS, b, s, e, indptr, np.tile(self._cols, e - s), data)

    def read_group(self, layout: str, blocks, pause_at: int = 0, pause=None, alloc=None) -> Block:
        """Blocks of ``U`` one after the other (:meth:`ooc.store.Store.read_group`'s contract)."""
        blocks = [int(b) for b in blocks]
        if len(blocks) == 1:
            return self.block(layout, blocks[0])
        parts = []
        for i, b in enumerate(blocks):
            if pause is not None and i == pause_at:
                pause()
            parts.append(self.block(layout, b))
        m = sum(p.stop - p.start for p in parts)
        return Block(L.ROWS, blocks[0], 0, m, np.arange(0, m * self.k + 1, self.k, dtype=np.int64),
                     np.tile(self._cols, m), np.concatenate([p.data for p in parts]))

    def read_labeled_rows(self, blocks, pause_at: int = 0, pause=None, alloc=None) -> tuple[Block, np.ndarray]:
        """Blocks of ``U`` and their labels (:meth:`ooc.store.Store.read_labeled_rows`'s contract)."""
        blk = self.read_group(L.ROWS, blocks, pause_at, pause, alloc)
        return blk, self._st.read_labels_group([self.block_bounds(L.ROWS, int(b)) for b in blocks])

    def vt(self) -> np.ndarray:
        """``V^T`` (``d x K``), whole (DSPDC keeps ``V`` resident)."""
        return self._st.backend.read(FACTOR_VT).reshape(self._st.n_cols, self.k)

    def dense_u(self) -> np.ndarray:
        """``U`` (``n x K``), whole: small stores only (tests, references)."""
        return self._st.backend.read(FACTOR_U).reshape(self._st.n_rows, self.k)
