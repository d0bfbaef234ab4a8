"""Writing a store: append-only arrays, statistics, labels, atomic completion.

The writer never holds the matrix: rows arrive chunk by chunk and go straight
to chunk-aligned appends; only O(d) column statistics and the distinct labels
stay in memory. The container is created under a temporary name and renamed to
its final path only once it is complete, so a crash or a bad line leaves
nothing that opens as a store.
"""

from __future__ import annotations

import hashlib
import os
import uuid

import numpy as np

from .. import fsutil, owned
from .._cpu import Behind
from ..fsutil import temporary_sibling
from . import layout as L
from .backend import Backend, MemoryBackend
from .stats import ColumnAccumulator, RowSummary, row_stats, summary_from

#: Most distinct integer labels that still count as classes under ``label_kind="auto"``.
MAX_AUTO_CLASSES = 1000


class Appender:
    """Append to a 1-D backend array in whole chunks, optionally hashing what is written.

    With ``behind``, the backend writes run on a thread of the appender's own (one write in
    flight, the next :meth:`append` waits for it), so several arrays are encoded at once and
    alongside the caller's next rows; the array written is the same. The arrays appended must
    not be modified afterwards (the caller's chunks never are).
    """

    #: Most whole chunks handed to the backend in one write.
    CHUNKS_PER_WRITE = 4

    def __init__(self, backend: Backend, name: str, dtype, chunk_len: int, hasher=None, behind: bool = False):
        self._behind = Behind(behind, f"ooc-write-{name.replace('/', '-')}")
        self.backend, self.name = backend, name
        self.dtype = np.dtype(dtype)
        self.chunk_len = int(chunk_len)
        # the array is created with its first write, which the backend sees as a sample of
        # its values (a backend may store values that do not compress uncompressed)
        self._created = False
        self.length = 0           # elements flushed to the backend
        self._buf = np.empty(self.chunk_len, dtype=self.dtype)
        self._fill = 0
        self.hasher = hasher

    def append(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=self.dtype)
        pos = 0
        n = len(values)
        # top up the partial chunk first, so every backend write is chunk-aligned
        if self._fill:
            take = min(n, self.chunk_len - self._fill)
            self._buf[self._fill:self._fill + take] = values[:take]
            self._fill += take
            pos = take
            if self._fill == self.chunk_len:
                self._write(self._buf)
                self._fill = 0
        whole = (n - pos) // self.chunk_len * self.chunk_len
        # a bounded number of chunks per backend write: the backend encodes a write's
        # chunks together, and memory must not scale with the size of one append
        step = self.chunk_len * self.CHUNKS_PER_WRITE
        while whole:
            k = min(whole, step)
            self._write(values[pos:pos + k])
            pos += k
            whole -= k
        rest = n - pos
        if rest:
            self._buf[:rest] = values[pos:]
            self._fill = rest

    def _write(self, values: np.ndarray) -> None:
        if self._behind.enabled:
            if np.may_share_memory(values, self._buf):  # the buffer is refilled at once
                values = values.copy()
            self._behind.run(self._write_now, values)
        else:
            self._write_now(values)

    def _write_now(self, values: np.ndarray) -> None:
        if self.hasher is not None:
            # the hasher sees this array's bytes in order, as written (behind the caller too), so
            # the digest does not depend on how the rows were cut into chunks (text chunk size, --memory)
            self.hasher.update(np.ascontiguousarray(values).view(np.uint8))
        if not self._created:
            self.backend.create_array(self.name, self.dtype, self.chunk_len, sample=values)
            self._created = True
        new = self.length + len(values)
        self.backend.resize(self.name, new)
        self.backend.write(self.name, self.length, values)
        self.length = new

    def close(self) -> int:
        """Flush the last partial chunk; returns the final length."""
        if self._fill:
            self._write(self._buf[:self._fill])
            self._fill = 0
        self._behind.wait()
        self._behind.close()
        if not self._created:  # nothing was appended: an empty array
            self.backend.create_array(self.name, self.dtype, self.chunk_len)
            self._created = True
        return self.length

    def abort(self) -> None:
        """Stop writing (on an error): wait for the write in flight, ignoring its outcome."""
        self._behind.close()


class _Finished:
    """A writer's column statistics once written (:meth:`StoreWriter.finish_rows`): nothing to stop."""

    def abort(self) -> None:
        pass


def temporary_path(path: str) -> str:
    """A sibling of ``path`` to build into: hidden, unique, same file system (atomic rename)."""
    if path.startswith("memory://"):
        return f"{path}.partial-{uuid.uuid4().hex[:8]}"
    return temporary_sibling(path)


class Temporary(fsutil.Temporary):
    """:class:`ooc.fsutil.Temporary` for a store, which may also live in memory (``memory://``: no claim)."""

    def __init__(self, final: str):
        if not final.startswith("memory://"):
            super().__init__(final)
            return
        self.final, self.path, self._fd = final, temporary_path(final), None

    @property
    def scratch(self) -> str | None:
        return None if self.final.startswith("memory://") else super().scratch

    def remove(self) -> None:
        remove_path(self.path)
        if self.scratch:
            remove_path(self.scratch)


def remove_stale_temporaries(final: str) -> list[str]:
    """:func:`ooc.fsutil.remove_stale_temporaries` (nothing to do for an in-memory store)."""
    return [] if final.startswith("memory://") else fsutil.remove_stale_temporaries(final)


def remove_path(path: str) -> None:
    """Delete a container at ``path`` whatever its kind; silent if absent."""
    if path.startswith("memory://"):
        MemoryBackend.delete(path)
    else:
        fsutil.remove_tree(path)


def publish(tmp: str, final: str, replace: bool = False) -> None:
    """Move a complete container from its temporary name to its final one.

    With ``replace``, an existing ``final`` is replaced only if it is still an ooc store, verified at the
    moment it is exchanged with ``tmp`` (:func:`ooc.owned.put`: a file the user added to it while the
    command ran is found, the store put back and the refusal names it); whenever the process dies,
    ``final`` is the old store or the new one, whole. The caller holds the store's lock
    (:func:`ooc.owned.exclusive`) from its first check to here.
    """
    if final.startswith("memory://"):
        if replace:
            MemoryBackend.delete(final)
        MemoryBackend.rename(tmp, final)
        return
    if os.path.lexists(final) and not replace:
        raise FileExistsError(f"{final}: already exists (use --overwrite to replace it)")
    if os.path.isdir(tmp):  # a directory store: its manifest lists every file ooc wrote into it
        from .chunk_files import chunk_records

        token = owned.new_token()  # the conversion's id, in its chunk records too
        owned.seal_dir(tmp, "store", token=token, extra={"shards": {"conversion": token, "chunks": chunk_records(tmp)}})
    # a file store (HDF5) is listed in its directory's manifest, as a store
    owned.put(tmp, final, "store", "a new store")


def output_location(store) -> str:
    """Where ``convert`` builds a store: a local path (``file://`` URLs are taken as one) or ``memory://``.

    A store is built under a temporary name and renamed into place once complete, which an
    object store (``s3://``, ``gs://``...) cannot do atomically: other URLs are refused, in one
    line (convert to a local path, then copy the directory; training reads Zarr stores at any
    fsspec URL).
    """
    store = os.fspath(store)
    if store.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return unquote(urlparse(store).path)
    if "://" in store and not store.startswith("memory://"):
        raise ValueError(f"{store}: a store is written to a local path or a file:// URL (it is renamed into place "
                         "when complete, which object stores cannot do atomically); convert to a local path and "
                         "copy the directory")
    return store


def check_output_store(store: str, exists: bool, overwrite: bool, source=None) -> None:
    """Refuse to write ``store`` where that would destroy what is not an ooc store of ours (another kind of
    ooc output included: a run, predictions).

    ``exists`` without ``overwrite`` is an error; with it, ``store`` must be what ooc wrote, as its
    manifest lists it, and not the input ``source`` (a path), contain it, or be the current directory
    (:func:`ooc.owned.refuse_to_replace`).
    """
    inputs = [os.fspath(source)] if isinstance(source, (str, os.PathLike)) else []
    for src in inputs:  # a store inside the input: the input would be a container being written into
        if "://" not in store and "://" not in src and os.path.lexists(src) and fsutil.contains(src, store) \
                and os.path.realpath(src) != os.path.realpath(store):
            raise FileExistsError(f"{store}: is inside the input {src}; choose another output path")
    if "://" not in store:
        fsutil.check_parent(store)
        owned.check_folder(store)  # never inside another store or a run
    if not exists or store.startswith("memory://"):
        if exists and not overwrite:
            raise FileExistsError(f"{store}: already exists (use --overwrite to replace it)")
        return
    if not overwrite:
        if inputs and os.path.realpath(inputs[0]) == os.path.realpath(store):
            raise FileExistsError(f"{store}: is the input; choose another output path")
        raise FileExistsError(f"{store}: already exists (use --overwrite to replace it)")
    owned.refuse_to_replace(store, "a new store", inputs, kind="store")


def is_ooc_store(path: str) -> bool:
    """Whether ``path`` holds an ooc store (complete or not): the marker ooc's writer puts in its attributes."""
    from .store import BACKENDS

    for cls in BACKENDS.values():
        try:
            if not cls.detect(path):
                continue
            be = cls.open(path)
        except Exception:  # unreadable: not recognizably ours
            continue
        try:
            return be.attrs.get("format") == L.FORMAT
        except Exception:
            return False
        finally:
            be.close()
    return False


class LabelTracker:
    """Distinct label values (up to a cap), integrality and counts, streamed."""

    def __init__(self, cap: int = MAX_AUTO_CLASSES):
        self.cap = cap
        self.values: dict[float, int] = {}
        # the sample weights' sum per label value, from the first weighted rows on (rows before
        # them weigh 1 each); None while no row carried a weight
        self.weight_sums: dict[float, float] | None = None
        self.overflow = False
        self.all_integer = True

    def add(self, labels: np.ndarray, weights: np.ndarray | None = None) -> None:
        if len(labels) == 0:
            return
        if self.all_integer and not np.all(labels == np.round(labels)):
            self.all_integer = False
        if self.overflow:
            return
        if weights is not None and self.weight_sums is None:
            self.weight_sums = {v: float(k) for v, k in self.values.items()}
        u, inv, c = np.unique(labels, return_inverse=True, return_counts=True)
        for v, k in zip(u.tolist(), c.tolist()):
            self.values[v] = self.values.get(v, 0) + k
        if self.weight_sums is not None:
            sums = np.bincount(inv.reshape(-1), weights=weights, minlength=len(u)) if weights is not None else c
            for v, s in zip(u.tolist(), sums.tolist()):
                self.weight_sums[v] = self.weight_sums.get(v, 0.0) + float(s)
        if len(self.values) > self.cap:
            self.overflow = True
            self.values = {}
            self.weight_sums = None if self.weight_sums is None else {}

    def kind(self, requested: str = "auto") -> str:
        if requested != "auto":
            if requested not in L.LABEL_KINDS:
                raise ValueError(f"label kind {requested!r}: expected auto or one of {L.LABEL_KINDS}")
            if requested == L.BINARY and (self.overflow or len(self.values) > 2):
                raise ValueError(
                    f"label kind 'binary' requested but the labels take {'many' if self.overflow else len(self.values)} "
                    "distinct values")
            if requested == L.MULTICLASS and self.overflow:
                raise ValueError(f"label kind 'multiclass' requested but there are more than {self.cap} distinct labels")
            return requested
        if not self.overflow and len(self.values) <= 2:
            return L.BINARY
        if self.all_integer and not self.overflow:
            return L.MULTICLASS
        return L.REGRESSION


class StoreWriter:
    """Builds a store row chunk by row chunk at a temporary path.

    Parameters
    ----------
    backend_cls : type of Backend
    tmp_path : str
        Where the container is built; :func:`publish` moves it when complete.
    dtype : float32 or float64
        Stored value type.
    index_dtype : int32 or int64
    block_bytes, chunk_len : int
        Decoded bytes per block; elements per compressed chunk.
    threads : int, default 1
        With more than one, each array is written on a thread of its own
        (:class:`Appender` ``behind``); the store is the same. Call :meth:`abort` on an error.
    """

    def __init__(self, backend_cls, tmp_path, dtype, index_dtype, block_bytes, chunk_len, threads=1):
        self.backend = backend_cls.create(tmp_path)
        self.dtype = np.dtype(dtype)
        self.index_dtype = np.dtype(index_dtype)
        self.block_bytes = int(block_bytes)
        self.chunk_len = int(chunk_len)
        # one hasher per array, combined in a fixed order at the end (see finalize)
        self.hashers = {k: hashlib.blake2b(digest_size=16) for k in (L.INDPTR, L.INDICES, L.DATA, L.LABELS)}
        be, cl, bh = self.backend, self.chunk_len, int(threads) > 1
        self.indptr = Appender(be, L.array_name(L.ROWS, L.INDPTR), L.INDPTR_DTYPE, cl, self.hashers[L.INDPTR], bh)
        self.indices = Appender(be, L.array_name(L.ROWS, L.INDICES), self.index_dtype, cl,
                                self.hashers[L.INDICES], bh)
        self.data = Appender(be, L.array_name(L.ROWS, L.DATA), self.dtype, cl, self.hashers[L.DATA], bh)
        self.labels = Appender(be, L.LABELS, L.LABEL_DTYPE, cl, behind=bh)
        self.row_nnz = Appender(be, L.ROW_NNZ, np.int64, cl, behind=bh)
        self.row_sqnorm = Appender(be, L.ROW_SQNORM, np.float64, cl, behind=bh)
        self._behind = bh
        self.weights: Appender | None = None  # made by the first rows that carry sample weights
        self.weight_stats = [0.0, np.inf, -np.inf]  # sum, min, max of the weights
        self.cols = ColumnAccumulator(behind=bh)
        # row blocks and the row summary are settled as rows stream in: O(blocks), not O(n)
        self.row_blocks = L.BlockCutter(L.entry_bytes(self.dtype, self.index_dtype), self.block_bytes)
        self.row_summary = RowSummary()
        self.label_tracker = LabelTracker()
        self.n_rows = 0
        self.nnz = 0
        self.indptr.append(np.zeros(1, dtype=np.int64))

    def add_rows(self, labels, indptr, indices, data, weights=None) -> None:
        """Append rows given as a local CSR piece (0-based column ids, already validated).

        ``weights``: the rows' sample weights (finite, >= 0), or None (each row weighs 1). The
        store holds the array ``weights`` once any rows carried them, 1 for every other row.
        """
        indptr = np.asarray(indptr, dtype=np.int64)
        if weights is not None or self.weights is not None:
            weights = self._add_weights(len(labels), weights)
        self.indptr.append(indptr[1:] + self.nnz)
        self.indices.append(indices)
        self.data.append(data)
        self.labels.append(labels)
        nnz, sq = row_stats(indptr, data)
        self.row_nnz.append(nnz)
        self.row_sqnorm.append(sq)
        self.row_blocks.add(nnz)
        self.row_summary.add(nnz, sq)
        self.cols.add(indices, data)
        self.label_tracker.add(np.asarray(labels, dtype=np.float64), weights)
        self.n_rows += len(labels)
        self.nnz += int(indptr[-1])

    def abort(self) -> None:
        """Stop the row arrays' writes in flight (before the backend is closed on an error)."""
        for a in (self.indptr, self.indices, self.data, self.labels, self.row_nnz, self.row_sqnorm, self.weights):
            if a is not None:
                a.abort()
        self.cols.abort()

    def _add_weights(self, m: int, weights) -> np.ndarray:
        """Append the sample weights of ``m`` rows (None: 1 each); returns them as float64."""
        if self.weights is None:
            self.hashers[L.WEIGHTS] = hashlib.blake2b(digest_size=16)
            self.weights = Appender(self.backend, L.WEIGHTS, np.float64, self.chunk_len, self.hashers[L.WEIGHTS],
                                    self._behind)
            for s in range(0, self.n_rows, self.chunk_len):  # the rows before weigh 1
                self.weights.append(np.ones(min(self.chunk_len, self.n_rows - s)))
            self.weight_stats = [float(self.n_rows), 1.0 if self.n_rows else np.inf, 1.0 if self.n_rows else -np.inf]
        w = np.ones(m) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
        if len(w) != m:
            raise ValueError(f"{len(w)} sample weights for {m} rows")
        bad = np.flatnonzero(~(np.isfinite(w) & (w >= 0)))  # the readers name the line first
        if len(bad):
            raise ValueError(f"sample weight {w[bad[0]]!r} of row {self.n_rows + int(bad[0])}: weights must be "
                             "finite and >= 0")
        self.weights.append(w)
        if m:
            st = self.weight_stats
            self.weight_stats = [st[0] + float(w.sum()), min(st[1], float(w.min())), max(st[2], float(w.max()))]
        return w

    def finish_rows(self, n_cols: int | None, label_kind: str = "auto") -> dict:
        """Close the row arrays, settle labels and statistics; returns attributes so far."""
        for a in (self.indptr, self.indices, self.data, self.labels, self.row_nnz, self.row_sqnorm):
            a.close()
        if self.weights is not None:
            self.weights.close()
        nz = self.cols.nnz != 0  # one byte per column, not flatnonzero's eight
        seen = int(len(nz) - np.argmax(nz[::-1])) if nz.any() else 0
        del nz
        if n_cols is None:
            n_cols = seen
        elif n_cols < seen:
            raise ValueError(f"n_features={n_cols} but the data has feature ids up to {seen - 1}")
        self.n_cols = int(n_cols)
        col_nnz, col_sq = self.cols.finish(self.n_cols)
        be, cl = self.backend, self.chunk_len
        for name, arr in ((L.COL_NNZ, col_nnz), (L.COL_SQNORM, col_sq)):
            # through an Appender: a few chunks per backend write, so encoding an O(d)
            # vector does not hold O(d) compressed copies at once
            a = Appender(be, name, arr.dtype, cl)
            a.append(arr)
            a.close()
        row_ptr = self.row_blocks.finish()
        be.create_array(L.array_name(L.ROWS, L.BLOCK_PTR), np.int64, max(len(row_ptr), 1), len(row_ptr))
        be.write(L.array_name(L.ROWS, L.BLOCK_PTR), 0, row_ptr)
        attrs = self._settle_labels(label_kind)
        if self.weights is not None:
            attrs[L.WEIGHTS_ATTR] = self._weights_attr(attrs["label_kind"])
        attrs["stats"] = summary_from(self.row_summary, col_nnz, col_sq)
        self.col_nnz = col_nnz
        # the squared norms are written: not held through the transpose (O(d), ingest.COLUMN_BYTES)
        self.cols = _Finished()
        return attrs

    def _settle_labels(self, requested: str) -> dict:
        t = self.label_tracker
        kind = t.kind(requested)
        attrs: dict = {"label_kind": kind, "classes": None}
        if kind == L.BINARY:
            vals = sorted(t.values)
            attrs["label_values"] = vals if len(vals) == 2 else (
                [vals[0], vals[0]] if vals else [-1.0, 1.0])
            attrs["classes"] = vals
            attrs["label_counts"] = {repr(v): t.values[v] for v in vals}
            if vals != [-1.0, 1.0]:
                self._map_binary_labels(vals)
        elif kind == L.MULTICLASS:
            attrs["classes"] = sorted(t.values)
            attrs["label_counts"] = {repr(v): t.values[v] for v in sorted(t.values)}
        # the labels enter the fingerprint as finally stored
        step = self.chunk_len * 4
        for s in range(0, self.n_rows, step):
            self.hashers[L.LABELS].update(self.backend.read(L.LABELS, s, s + step).view(np.uint8))
        return attrs

    def _weights_attr(self, kind: str) -> dict:
        """The attribute :data:`~ooc.store.layout.WEIGHTS_ATTR` of a store whose rows carry weights."""
        total, lo, hi = self.weight_stats
        out = {"sum": total, "min": lo if self.n_rows else 0.0, "max": hi if self.n_rows else 0.0}
        sums = self.label_tracker.weight_sums
        if kind != L.REGRESSION and sums:
            out["class_sums"] = {repr(v): float(sums[v]) for v in sorted(sums)}
        return out

    def _map_binary_labels(self, vals) -> None:
        """Rewrite labels in place to -1/+1 (larger value positive, as in scikit-learn).

        A single distinct value maps to +1 when positive, else -1.
        """
        step = self.chunk_len * 4
        for s in range(0, self.n_rows, step):
            y = self.backend.read(L.LABELS, s, s + step)
            if len(vals) == 2:
                mapped = np.where(y == vals[1], 1.0, -1.0)
            else:
                mapped = np.full(len(y), 1.0 if vals[0] > 0 else -1.0)
            self.backend.write(L.LABELS, s, mapped)

    def finalize(self, attrs: dict, layouts) -> None:
        """Write the attributes, then their digest, ``complete`` last.

        The store records that every chunk was written (the backends write chunks of
        zeros too), and the digest (:func:`ooc.store.integrity.seal_attrs`) makes an
        attribute edited or damaged later refused on open.
        """
        from .integrity import seal_attrs  # here: this method is the only part of the writer that seals

        h = hashlib.blake2b(digest_size=16)
        # the weights only when the rows carry them: a store without keeps its fingerprint
        for k in (L.INDPTR, L.INDICES, L.DATA, L.LABELS, *((L.WEIGHTS,) if self.weights is not None else ())):
            h.update(k.encode())
            h.update(self.hashers[k].digest())
        # binary labels are stored as -1/+1: the original values are part of the content
        h.update(repr((self.n_rows, self.n_cols, str(self.dtype), attrs.get("label_kind"),
                       attrs.get("label_values"))).encode())
        attrs = dict(attrs)
        attrs.update({
            "format": L.FORMAT,
            "format_version": L.FORMAT_VERSION,
            "shape": [self.n_rows, self.n_cols],
            "nnz": self.nnz,
            "dtype": str(self.dtype),
            "index_dtype": str(self.index_dtype),
            "layouts": list(layouts),
            "block_bytes": self.block_bytes,
            "chunk_len": self.chunk_len,
            "fingerprint": h.hexdigest(),
            L.ALL_CHUNKS_WRITTEN: True,
        })
        if self.backend.name == "zarr" and "://" not in self.backend.path:  # sealed in its manifest by publish()
            attrs[L.CHUNK_RECORDS] = True
        self.backend.set_attrs(attrs)
        seal_attrs(self.backend)
        self.backend.set_attrs({"complete": True})
        self.backend.close()
