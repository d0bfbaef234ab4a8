"""Reading a store: metadata, statistics, and blocks by index in either layout."""

from __future__ import annotations

import copy
import os
from typing import NamedTuple

import numpy as np

from .backend import Backend, MemoryBackend, StoreError
from .hdf5_backend import HDF5Backend
from .integrity import check_arrays, check_attrs
from .layout import (
    COL_NNZ,
    COL_SQNORM,
    COLS,
    DATA,
    FORMAT,
    FORMAT_VERSION,
    INDICES,
    INDPTR,
    LABELS,
    RECIPE,
    ROW_NNZ,
    ROW_SQNORM,
    ROWS,
    WEIGHTS,
    WEIGHTS_ATTR,
    BlockCutter,
    array_name,
    entry_bytes,
)
from .zarr_backend import ZarrBackend

#: Lines whose nonzero counts :meth:`Store.with_blocks` reads at a time (8 MiB of int64 counts).
CUT_SLICE = 1 << 20

BACKENDS: dict[str, type[Backend]] = {
    ZarrBackend.name: ZarrBackend,
    HDF5Backend.name: HDF5Backend,
    MemoryBackend.name: MemoryBackend,
}


def backend_for_path(path: str) -> type[Backend]:
    """The backend class whose container is at ``path``."""
    if path.startswith("memory://"):
        return MemoryBackend
    for cls in (HDF5Backend, ZarrBackend):
        if cls.detect(path):
            return cls
    if not os.path.exists(path) and "://" not in path:
        raise StoreError(f"{path}: no such store")
    raise StoreError(f"{path}: not an ooc store (neither a Zarr v3 group nor an HDF5 file)")


class Block(NamedTuple):
    """One block of one layout, decoded into memory and ready for the kernels.

    For the ``rows`` layout, lines are rows (examples) ``start..stop-1`` and
    ``indices`` are column ids; for ``cols``, lines are columns and ``indices``
    are row ids. ``indptr`` is local (starts at 0).
    """

    layout: str
    index: int
    start: int
    stop: int
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.indptr.nbytes + self.indices.nbytes + self.data.nbytes

    @property
    def n_lines(self) -> int:
        return self.stop - self.start


class Store:
    """An opened ooc store.

    Parameters
    ----------
    backend : Backend
        An opened backend whose container holds a complete store.

    Raises
    ------
    StoreError
        The store is incomplete, of another format version, or damaged: attributes that are
        missing, edited (:func:`ooc.store.integrity.check_attrs`) or contradict the arrays,
        a missing array or chunk (:func:`ooc.store.integrity.check_arrays`). The backend is
        closed first.

    Notes
    -----
    Opening reads the attributes, the block pointers, two elements of each ``indptr`` and
    the arrays' metadata (and, for stores written with every chunk, lists each array's
    chunks); statistics and labels (O(n) or O(d)) are read on first use and kept.
    """

    def __init__(self, backend: Backend):
        try:
            self._open(backend)
        except BaseException:
            backend.close()  # a refused store leaves no open file behind (the caller never gets it)
            raise

    def _open(self, backend: Backend) -> None:
        self.backend = backend
        self.path = backend.path
        attrs = backend.attrs
        if not isinstance(attrs, dict):
            raise StoreError(f"{self.path}: not an ooc store (its attributes are not a dict)")
        if attrs.get("format") != FORMAT:
            raise StoreError(f"{self.path}: not an ooc store (attribute 'format' is not '{FORMAT}')")
        if attrs.get("complete") is not True:
            raise StoreError(f"{self.path}: incomplete store (attribute 'complete' is not true: a convert did not "
                             "finish); convert again")
        if attrs.get("format_version") != FORMAT_VERSION:
            raise StoreError(
                f"{self.path}: store format version {attrs.get('format_version')} (attribute 'format_version') is "
                f"not supported by this ooc (expects {FORMAT_VERSION}); convert the input again"
            )
        check_attrs(self.path, attrs)
        # then its metadata files against its manifest: an edited attribute is named by its key above, a
        # metadata file of another conversion (valid on its own) here
        backend.check_metadata()
        self.attrs = attrs
        self.n_rows, self.n_cols = (int(x) for x in attrs["shape"])
        self.shape = (self.n_rows, self.n_cols)
        self.nnz = int(attrs["nnz"])
        self.dtype = np.dtype(attrs["dtype"])
        self.index_dtype = np.dtype(attrs["index_dtype"])
        self.label_kind = attrs["label_kind"]
        self.classes = attrs["classes"]
        self.layouts = tuple(attrs["layouts"])
        self.fingerprint = attrs["fingerprint"]
        self._block_ptr = check_arrays(backend, attrs)
        self._cached: dict[str, np.ndarray] = {}
        # name -> (start, stop, values) of the chunks of a per-row vector (labels, weights) read last
        self._windows: dict[str, tuple] = {}
        self._sq_reduced: tuple[float, float] | None = None  # (sum, max) of row_sqnorm, once read
        # (layout, first line, end line) -> (first entry, end entry) of line ranges read before:
        # a range read again (the blocks of the next pass) needs no indptr read first
        self._entry_bounds: dict[tuple, tuple[int, int]] = {}

    # -- metadata ------------------------------------------------------------------
    def has_layout(self, layout: str) -> bool:
        """Whether the store holds the matrix in ``layout`` (``'rows'`` or ``'cols'``)."""
        return layout in self.layouts

    def _need(self, layout: str) -> None:
        if layout not in self.layouts:
            raise StoreError(
                f"{self.path}: the store has no {layout!r} layout; convert with --layout both"
            )

    def block_ptr(self, layout: str) -> np.ndarray:
        """First line of each block of ``layout``, then the line count."""
        self._need(layout)
        return self._block_ptr[layout]

    def n_blocks(self, layout: str) -> int:
        """Number of stored blocks of ``layout``."""
        return len(self.block_ptr(layout)) - 1

    def _vector(self, name: str) -> np.ndarray:
        if name not in self._cached:
            self._cached[name] = self.backend.read(name)
        return self._cached[name]

    @property
    def labels(self) -> np.ndarray:
        """All labels (n floats; binary stores hold -1/+1)."""
        return self._vector(LABELS)

    def read_labels(self, start: int, stop: int) -> np.ndarray:
        """Labels of rows ``start..stop-1`` without loading all of them.

        A row block is usually much shorter than a label chunk, and decoding a chunk to take
        a slice of it once per block decoded every chunk ~15 times a pass (measured on a
        14M-row store: 12 % of a cold gap-only pass). The chunks that held the last range
        read are kept (one chunk, or two when the range straddles a boundary). A backend that
        decodes only the part of a chunk asked for (:meth:`Backend.decodes_whole_chunks`)
        reads just the range: the window would only pay off for blocks visited in row order.
        """
        return self._read_row_vector(LABELS, start, stop)

    def _read_row_vector(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start..stop-1`` of the per-row array ``name``, keeping the chunks read last (see
        :meth:`read_labels`)."""
        if name in self._cached:
            return self._cached[name][start:stop]
        if not self.backend.decodes_whole_chunks(name):
            return self.backend.read(name, start, stop)
        win = self._windows.get(name)
        if win is not None and win[0] <= start and stop <= win[1]:
            return win[2][start - win[0]:stop - win[0]].copy()
        cl = int(self.backend.chunk_len(name) or 0)
        if cl <= 0 or stop - start >= cl:
            return self.backend.read(name, start, stop)
        lo = start // cl * cl
        hi = min(-(-stop // cl) * cl, self.n_rows)
        arr = self.backend.read(name, lo, hi)
        self._windows[name] = (lo, hi, arr)  # one tuple: a reader in another thread sees old or new
        return arr[start - lo:stop - lo].copy()

    @property
    def has_weights(self) -> bool:
        """Whether the rows carry sample weights (the array ``weights``)."""
        return WEIGHTS_ATTR in self.attrs

    def read_weights(self, start: int, stop: int) -> np.ndarray | None:
        """Sample weights of rows ``start..stop-1`` (float64), or None when the store has none."""
        return self._read_row_vector(WEIGHTS, start, stop) if self.has_weights else None

    def read_weights_group(self, ranges) -> np.ndarray | None:
        """Sample weights of the row ranges ``(start, stop)``, one after the other, or None."""
        if not self.has_weights:
            return None
        return np.concatenate([self.read_weights(s, e) for s, e in ranges]) if ranges else np.zeros(0)

    @property
    def row_nnz(self) -> np.ndarray:
        """Nonzeros of each row, ``(n,)`` int64 (read on first use, then kept)."""
        return self._vector(ROW_NNZ)

    @property
    def row_sqnorm(self) -> np.ndarray:
        """Squared Euclidean norm of each row, ``(n,)`` float64 (read on first use, then kept)."""
        return self._vector(ROW_SQNORM)

    def read_row_nnz(self, start: int, stop: int) -> np.ndarray:
        """Nonzeros of rows ``start..stop-1`` without keeping the ``(n,)`` array (:attr:`row_nnz` keeps it)."""
        return self._read_row_vector(ROW_NNZ, start, stop)

    def read_col_nnz(self) -> np.ndarray:
        """:attr:`col_nnz` without keeping it (a caller that needs it once: 8 bytes a column)."""
        return self._cached[COL_NNZ] if COL_NNZ in self._cached else self.backend.read(COL_NNZ)

    def read_row_sqnorm(self, start: int, stop: int) -> np.ndarray:
        """Squared norms of rows ``start..stop-1`` without keeping the ``(n,)`` array."""
        return self._read_row_vector(ROW_SQNORM, start, stop)

    def row_sqnorm_sum_max(self) -> tuple[float, float]:
        """``(sum, max)`` of the rows' squared norms, read chunk by chunk (O(chunk) memory, not O(n)).

        Solvers that need only these reductions use this instead of :attr:`row_sqnorm`, which keeps
        the ``(n,)`` array for the life of the store: 8 bytes a row that ``--memory`` does not hold at
        40M rows (320 MiB). Computed once per store object.
        """
        if self._sq_reduced is None:
            if ROW_SQNORM in self._cached:
                a = self._cached[ROW_SQNORM]
                self._sq_reduced = (float(a.sum()), float(a.max()) if len(a) else 0.0)
            else:
                total, top, n = 0.0, 0.0, self.n_rows
                step = max(1, int(self.backend.chunk_len(ROW_SQNORM) or 0) or (1 << 20))
                for lo in range(0, n, step):
                    a = np.asarray(self.backend.read(ROW_SQNORM, lo, min(n, lo + step)), dtype=np.float64)
                    total += float(a.sum())
                    top = max(top, float(a.max()) if len(a) else 0.0)
                self._sq_reduced = (total, top)
        return self._sq_reduced

    @property
    def col_nnz(self) -> np.ndarray:
        """Nonzeros of each column, ``(d,)`` int64 (read on first use, then kept)."""
        return self._vector(COL_NNZ)

    @property
    def col_sqnorm(self) -> np.ndarray:
        """Squared Euclidean norm of each column, ``(d,)`` float64 (read on first use, then kept)."""
        return self._vector(COL_SQNORM)

    @property
    def label_values(self) -> list:
        """Original values of the binary labels ``[negative, positive]`` (binary stores)."""
        return self.attrs.get("label_values", [-1.0, 1.0])

    # -- blocks --------------------------------------------------------------------
    def block_bounds(self, layout: str, b: int) -> tuple[int, int]:
        """First line and end (exclusive) of block ``b`` of ``layout``; ``IndexError`` out of range."""
        ptr = self.block_ptr(layout)
        if not 0 <= b < len(ptr) - 1:
            raise IndexError(f"{layout} block {b} out of range (0..{len(ptr) - 2})")
        return int(ptr[b]), int(ptr[b + 1])

    def read_lines(self, layout: str, start: int, stop: int, index: int = -1, alloc=None) -> Block:
        """Lines ``start..stop-1`` of ``layout`` as a :class:`Block` (local indptr).

        ``alloc(n, dtype)``, when given, provides the block's arrays (a buffer pool).
        """
        indptr, indices, data = self._read_ranges(layout, [(start, stop)], alloc=alloc)
        return Block(layout, index, start, stop, indptr, indices, data)

    #: Most line ranges whose entry bounds are remembered (two ints each; the blocks of a
    #: store number far fewer).
    ENTRY_BOUNDS_KEPT = 1 << 16

    def _read_ranges(self, layout: str, ranges, pause_at: int = 0, pause=None,
                     alloc=None, labels: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Lines of the ``(start, stop)`` ranges, one after the other, as one CSR (local indptr).

        Each array is allocated once at its final size and the backend decodes every
        range straight into its place (:meth:`Backend.read_many`): a group of blocks
        costs its own size in memory, not twice that. With ``pause``, the entries of
        ``ranges[:pause_at]`` are read, then ``pause()`` is called, then the rest are: the
        arrays' pages are committed as they are written, so until ``pause`` returns the
        group holds only its first ranges in memory. ``labels``, when given, receives the
        labels of the (row) ranges, one after the other, read with the first entries.

        The ranges' entries are found from their indptr, so a range read for the first
        time takes two backend calls one after the other (indptr, then entries); its
        bounds are remembered, and a range read again (the same blocks next pass) takes one
        call for everything: each call ends when its slowest chunk is decoded, which
        leaves the disk idle (measured on a 14M-row store read cold, ~200 blocks a pass:
        the indptr and label calls took ~10 % of a pass).
        """
        self._need(layout)
        be = self.backend
        ipn = array_name(layout, INDPTR)
        ixn, dan = array_name(layout, INDICES), array_name(layout, DATA)
        ips = [np.empty(stop - start + 1, dtype=be.dtype(ipn)) for start, stop in ranges]
        first = [(ipn, start, stop + 1, ip) for (start, stop), ip in zip(ranges, ips)]
        if labels is not None:
            first += _label_requests(ranges, labels)
        bounds = [self._entry_bounds.get((layout, start, stop)) for start, stop in ranges]
        known = all(bd is not None for bd in bounds)
        if not known:
            be.read_many(first)
            bounds = [(int(ip[0]), int(ip[-1])) for ip in ips]
            if len(self._entry_bounds) < self.ENTRY_BOUNDS_KEPT:
                for (start, stop), bd in zip(ranges, bounds):
                    self._entry_bounds[(layout, start, stop)] = bd
        nnz = sum(hi - lo for lo, hi in bounds)
        alloc = alloc or (lambda n, dtype: np.empty(n, dtype=dtype))
        indices = alloc(nnz, be.dtype(ixn))
        data = alloc(nnz, be.dtype(dan))
        reqs = []
        off = 0
        for lo, hi in bounds:
            reqs.append([(ixn, lo, hi, indices[off:off + hi - lo]), (dan, lo, hi, data[off:off + hi - lo])])
            off += hi - lo
        if known:  # one call: the ranges' indptr (and labels) with the entries of the first ones
            reqs[0] = first + reqs[0]
        if pause is None or not 0 < pause_at < len(ranges):
            be.read_many([r for pair in reqs for r in pair])
        else:
            be.read_many([r for pair in reqs[:pause_at] for r in pair])
            pause()
            be.read_many([r for pair in reqs[pause_at:] for r in pair])
        indptr = alloc(sum(len(ip) - 1 for ip in ips) + 1, np.int64)
        indptr[0] = 0
        off = line = 0
        for ip, (lo, hi), (start, stop) in zip(ips, bounds, ranges):
            if int(ip[0]) != lo or int(ip[-1]) != hi:  # the store changed under a remembered range
                raise StoreError(f"{self.path}: {ipn}[{start}:{stop + 1}] changed while the store was open "
                                 f"(entries {int(ip[0])}..{int(ip[-1])}, read before as {lo}..{hi})")
            # a local indptr: this range's offsets, shifted to where its entries land
            np.subtract(ip[1:], lo - off, out=indptr[line + 1:line + len(ip)])
            off += hi - lo
            line += len(ip) - 1
        return indptr, indices, data

    def block(self, layout: str, b: int, alloc=None) -> Block:
        """Block ``b`` of ``layout``; reads only the chunks that hold it (``alloc``: see :meth:`read_lines`)."""
        start, stop = self.block_bounds(layout, b)
        return self.read_lines(layout, start, stop, b, alloc)

    def read_group(self, layout: str, blocks, pause_at: int = 0, pause=None, alloc=None) -> Block:
        """Blocks ``blocks`` of ``layout``, concatenated in that order, as one :class:`Block`.

        Its lines are the blocks' lines one after the other (``start = 0``, ``stop`` = their
        count; ``index`` = the first block); for one block it is :meth:`block`. ``pause``
        is called after the first ``pause_at`` blocks are read (see :meth:`_read_ranges`).
        """
        return self._read_blocks(layout, [int(b) for b in blocks], pause_at, pause, alloc)

    def _read_blocks(self, layout: str, blocks: list, pause_at: int = 0, pause=None, alloc=None,
                     labels: np.ndarray | None = None) -> Block:
        """:meth:`read_group` (``labels``: see :meth:`_read_ranges`)."""
        ranges = [self.block_bounds(layout, b) for b in blocks]
        indptr, indices, data = self._read_ranges(layout, ranges, pause_at, pause, alloc, labels)
        if len(blocks) == 1:
            return Block(layout, blocks[0], ranges[0][0], ranges[0][1], indptr, indices, data)
        return Block(layout, blocks[0], 0, len(indptr) - 1, indptr, indices, data)

    def read_labeled_rows(self, blocks, pause_at: int = 0, pause=None, alloc=None) -> tuple[Block, np.ndarray]:
        """Row blocks ``blocks`` as :meth:`read_group` (:meth:`block` for one), and their labels.

        Labels are read with the rows' indptr in one backend call where the backend decodes
        just the part of a chunk asked for (else through :meth:`read_labels`, which keeps the
        last label chunks decoded).
        """
        blocks = [int(b) for b in blocks]
        ranges = [self.block_bounds(ROWS, b) for b in blocks]
        with_rows = LABELS not in self._cached and not self.backend.decodes_whole_chunks(LABELS)
        y = np.empty(sum(e - s for s, e in ranges), dtype=self.backend.dtype(LABELS)) if with_rows else None
        blk = self._read_blocks(ROWS, blocks, pause_at, pause, alloc, y)
        return blk, y if y is not None else self.read_labels_group(ranges)

    def read_labels_group(self, ranges) -> np.ndarray:
        """Labels of the row ranges ``(start, stop)``, one after the other."""
        if LABELS in self._cached or self.backend.decodes_whole_chunks(LABELS):
            return np.concatenate([self.read_labels(s, e) for s, e in ranges])
        out = np.empty(sum(e - s for s, e in ranges), dtype=self.backend.dtype(LABELS))
        self.backend.read_many(_label_requests(ranges, out))
        return out

    def row_block(self, b: int) -> Block:
        """Row block ``b`` (CSR: ``indptr`` local, ``indices`` column ids, ``data``)."""
        return self.block(ROWS, b)

    def col_block(self, b: int) -> Block:
        """Column block ``b`` (CSC: ``indptr`` local, ``indices`` row ids, ``data``)."""
        return self.block(COLS, b)

    def iter_blocks(self, layout: str):
        """Every block of ``layout`` in order, one :class:`Block` at a time."""
        for b in range(self.n_blocks(layout)):
            yield self.block(layout, b)

    # -- whole-matrix helpers (small data, tests) ------------------------------------
    def to_scipy(self, layout: str = ROWS):
        """The whole matrix as scipy CSR (``rows``) or CSC (``cols``): small stores only."""
        import scipy.sparse as sp

        blk = self.read_lines(layout, 0, self.n_rows if layout == ROWS else self.n_cols)
        if layout == ROWS:
            return sp.csr_matrix((blk.data, blk.indices, blk.indptr), shape=self.shape)
        return sp.csc_matrix((blk.data, blk.indices, blk.indptr), shape=self.shape)

    def bytes_on_disk(self) -> int:
        """Size of the store's files, in bytes."""
        return self.backend.bytes_on_disk()

    def info(self) -> dict:
        """The store's facts ``ooc info`` prints (also in its ``--json`` object).

        The memory each solver would hold for this store is not a fact of the store: ``ooc info``
        adds it from :func:`ooc.solvers.registry.resident_memory`.
        """
        a = self.attrs
        n, d = self.shape
        decoded = 0
        entry = entry_bytes(self.dtype, self.index_dtype)
        for lay in self.layouts:
            decoded += self.nnz * entry + (self.n_rows if lay == ROWS else self.n_cols) * 8
        on_disk = self.bytes_on_disk()
        out = {
            "path": self.path,
            "backend": self.backend.name,
            "format_version": a["format_version"],
            "n_rows": n,
            "n_cols": d,
            "nnz": self.nnz,
            "density": self.nnz / (n * d) if n and d else 0.0,
            "dtype": str(self.dtype),
            "index_dtype": str(self.index_dtype),
            "label_kind": self.label_kind,
            "classes": self.classes,
            "label_counts": a.get("label_counts"),
            "label_values": a.get("label_values"),
            "sample_weights": a.get(WEIGHTS_ATTR),
            "index_base": a.get("index_base"),
            **_input_facts(a, self.path),
            "layouts": list(self.layouts),
            "block_bytes": a["block_bytes"],
            "blocks": {lay: self.n_blocks(lay) for lay in self.layouts},
            "bytes_on_disk": on_disk,
            "bytes_decoded": decoded,
            "compression_ratio": decoded / on_disk if on_disk else None,
            "fingerprint": self.fingerprint,
            "source": a.get("source"),
        }
        out.update(a.get("stats", {}))
        return out

    def reader_bytes(self) -> int:
        """Bytes the backend's reader holds once blocks are read (its buffers: part of what a process
        reading this store holds whatever its ``--memory`` split)."""
        return self.backend.reader_bytes([array_name(lay, f) for lay in self.layouts for f in (INDICES, DATA)])

    def with_blocks(self, block_bytes: int | None) -> Store:
        """This store with every block of each layout cut to at most ``block_bytes`` decoded bytes.

        The store's blocks are how it was written (``ooc convert --block-bytes``); training and
        prediction visit *their* blocks, which must fit the memory of the machine they run on.
        Each stored block is cut by the rule that cut the store (:func:`ooc.store.layout.block_boundaries`:
        whole lines, entries plus an indptr slot each, a line larger than the budget alone), applied
        to its lines' nonzero counts: the result depends on the store and ``block_bytes`` only. A
        block that fits stays whole, so ``block_bytes`` at least the store's leaves it as it is
        (``None`` too). The view shares this store's backend (closing either closes both) and the
        store reads any line range, so nothing is rewritten.
        """
        stored = int(self.attrs.get("block_bytes") or 0)
        if block_bytes is None or (stored and int(block_bytes) >= stored):
            return self
        block_bytes = int(block_bytes)
        if block_bytes <= 0:
            raise ValueError(f"block size must be > 0 bytes (got {block_bytes})")
        entry = entry_bytes(self.dtype, self.index_dtype)
        ptrs = {}
        for layout in self.layouts:
            name = ROW_NNZ if layout == ROWS else COL_NNZ
            ptr = self._block_ptr[layout]
            cut = [np.zeros(1, dtype=np.int64)]
            for b in range(len(ptr) - 1):
                s, e = int(ptr[b]), int(ptr[b + 1])
                # this block's line counts a slice at a time: O(slice) memory, whatever the store's size
                # (a stored column block may be every column of a 2^24-wide store: 128 MiB a count array)
                cutter = BlockCutter(entry, block_bytes)
                for lo in range(s, e, CUT_SLICE):
                    cutter.add(self.backend.read(name, lo, min(e, lo + CUT_SLICE)))
                cut.append(cutter.finish()[1:] + s)
            ptrs[layout] = np.concatenate(cut)
        view = copy.copy(self)
        view._block_ptr = ptrs
        view.attrs = {**self.attrs, "block_bytes": block_bytes}
        return view

    def close(self) -> None:
        """Close the backend (a ``Store`` is also a context manager)."""
        self.backend.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return (f"<ooc.Store {self.path!r} {self.n_rows}x{self.n_cols} nnz={self.nnz} "
                f"{self.dtype} {self.label_kind} layouts={list(self.layouts)}>")


def _label_requests(ranges, out: np.ndarray) -> list:
    """``read_many`` requests for the labels of the row ranges, one after the other into ``out``."""
    reqs, off = [], 0
    for s, e in ranges:
        reqs.append((LABELS, s, e, out[off:off + e - s]))
        off += e - s
    return reqs


def open_store(path: str | os.PathLike) -> Store:
    """Open the ooc store at ``path`` (a Zarr directory, an HDF5 file, or a URL)."""
    path = os.fspath(path)
    cls = backend_for_path(path)
    return Store(cls.open(path, "r"))


def _input_facts(attrs: dict, path: str) -> dict:
    """How the store's input was read, for :meth:`Store.info`: the recipe (attribute), one line on it,
    and whether the index base was guessed."""
    from .recipe import BASE_GUESSED, Recipe

    try:
        r = Recipe.from_attrs(attrs, path)
    except ValueError:  # a recipe of another ooc: shown as it is
        return {"input_recipe": attrs.get(RECIPE), "input": None, "index_base_guessed": None}
    return {"input_recipe": attrs.get(RECIPE), "input": r.describe(),
            "index_base_guessed": r.index_base_source == BASE_GUESSED if r.format == "svmlight" else False}
