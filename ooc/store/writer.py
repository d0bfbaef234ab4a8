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
import shutil
import uuid

import numpy as np

from ..fsutil import fsync_dir
from . import layout as L
from .backend import Backend, MemoryBackend
from .stats import ColumnAccumulator, RowSummary, row_stats, summary_from

#: Most distinct integer labels that still count as classes under ``label_kind="auto"``.
MAX_AUTO_CLASSES = 1000


class Appender:
    """Append to a 1-D backend array in whole chunks, optionally hashing what is written."""

    #: Most whole chunks handed to the backend in one write.
    CHUNKS_PER_WRITE = 4

    def __init__(self, backend: Backend, name: str, dtype, chunk_len: int, hasher=None):
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
        if self.hasher is not None:
            # the hasher sees only this array's bytes, so the digest does not depend on
            # how the rows were cut into chunks (text chunk size, --memory)
            self.hasher.update(np.ascontiguousarray(values).view(np.uint8))
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
        if not self._created:  # nothing was appended: an empty array
            self.backend.create_array(self.name, self.dtype, self.chunk_len)
            self._created = True
        return self.length


def temporary_path(path: str) -> str:
    """A sibling of ``path`` to build into: hidden, unique, same file system (atomic rename)."""
    if path.startswith("memory://"):
        return f"{path}.partial-{uuid.uuid4().hex[:8]}"
    head, tail = os.path.split(os.path.abspath(path))
    return os.path.join(head, f".{tail}.partial-{os.getpid()}-{uuid.uuid4().hex[:6]}")


#: Suffixes of the companions of a temporary container (same stem, so one rule removes all).
_LOCK_SUFFIX = ".lock"
_SCRATCH_SUFFIX = ".scratch"


class Temporary:
    """A temporary container for ``final``, claimed by this process until :meth:`release`.

    Beside the container (``.NAME.partial-PID-XXXXXX``) live a lock file (``... .lock``),
    held with ``flock`` for as long as this object is alive, and a scratch directory
    (``... .scratch``) for the transpose buckets. The kernel drops the lock when the
    process dies, however it dies, so :func:`remove_stale_temporaries` can tell for sure
    which temporaries nobody is building any more (a pid could have been reused; a lock
    cannot be held by a dead process).

    Parameters
    ----------
    final : str
        The path the container will be published to.
    """

    def __init__(self, final: str):
        self.final = final
        self.path = temporary_path(final)
        self._fd = None
        self._on_disk = not final.startswith("memory://")
        if self._on_disk:
            import fcntl

            self._fd = os.open(self.path + _LOCK_SUFFIX, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # new file: nobody else has it

    @property
    def scratch(self) -> str | None:
        """A directory for scratch files next to the container (None for in-memory stores)."""
        return self.path + _SCRATCH_SUFFIX if self._on_disk else None

    def remove(self) -> None:
        """Delete the container and the scratch directory (the claim stays)."""
        remove_path(self.path)
        if self.scratch:
            remove_path(self.scratch)

    def release(self) -> None:
        """Give up the claim: remove the lock file, then drop the lock."""
        if self._fd is not None:
            # unlink before unlocking: a cleaner that opens the file later finds nothing
            try:
                os.unlink(self.path + _LOCK_SUFFIX)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None


def remove_stale_temporaries(final: str) -> list[str]:
    """Delete the temporaries of conversions to ``final`` whose process has died.

    A temporary is stale when its lock file can be locked (the process holding it is
    gone), or, for a temporary without a lock file (the lock is made first, so only an
    older ooc leaves these), when the process id in its name no longer exists on this
    machine. A temporary of a live conversion is never touched.

    Returns
    -------
    list of str
        The paths removed.
    """
    if final.startswith("memory://"):
        return []
    import fcntl

    head, tail = os.path.split(os.path.abspath(final))
    prefix = f".{tail}.partial-"
    try:
        names = os.listdir(head)
    except OSError:
        return []
    stems = set()
    for name in names:
        if name.startswith(prefix):
            for sfx in (_LOCK_SUFFIX, _SCRATCH_SUFFIX):
                if name.endswith(sfx):
                    name = name[:-len(sfx)]
                    break
            stems.add(name)
    removed = []
    for stem in sorted(stems):
        base = os.path.join(head, stem)
        lock = base + _LOCK_SUFFIX
        fd = None
        if os.path.exists(lock):
            try:
                fd = os.open(lock, os.O_RDWR)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: a live conversion (or the file vanished meanwhile)
                if fd is not None:
                    os.close(fd)
                continue
        elif not _pid_is_dead(stem[len(prefix):].split("-", 1)[0]):
            continue
        try:
            for p in (base, base + _SCRATCH_SUFFIX):
                if os.path.lexists(p):
                    remove_path(p)
                    removed.append(p)
            if fd is not None:
                os.unlink(lock)  # last: while it exists the temporary can still be found
        finally:
            if fd is not None:
                os.close(fd)
    return removed


def _pid_is_dead(text: str) -> bool:
    """Whether no process has the id ``text`` here (False when unsure)."""
    try:
        pid = int(text)
    except ValueError:
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists but belongs to someone else
        return False
    return False


def remove_path(path: str) -> None:
    """Delete a container at ``path`` whatever its kind; silent if absent."""
    if path.startswith("memory://"):
        MemoryBackend.delete(path)
    elif os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)


def publish(tmp: str, final: str) -> None:
    """Move a complete container from its temporary name to its final one."""
    if final.startswith("memory://"):
        MemoryBackend.rename(tmp, final)
        return
    if os.path.exists(final):
        raise FileExistsError(f"{final}: already exists (use --overwrite to replace it)")
    os.rename(tmp, final)
    # the rename is durable only once the directory entry is: fsync the parent
    fsync_dir(os.path.dirname(os.path.abspath(final)))


class LabelTracker:
    """Distinct label values (up to a cap), integrality and counts, streamed."""

    def __init__(self, cap: int = MAX_AUTO_CLASSES):
        self.cap = cap
        self.values: dict[float, int] = {}
        self.overflow = False
        self.all_integer = True

    def add(self, labels: np.ndarray) -> None:
        if len(labels) == 0:
            return
        if self.all_integer and not np.all(labels == np.round(labels)):
            self.all_integer = False
        if self.overflow:
            return
        u, c = np.unique(labels, return_counts=True)
        for v, k in zip(u.tolist(), c.tolist()):
            self.values[v] = self.values.get(v, 0) + k
        if len(self.values) > self.cap:
            self.overflow = True
            self.values = {}

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
    """

    def __init__(self, backend_cls, tmp_path, dtype, index_dtype, block_bytes, chunk_len):
        self.backend = backend_cls.create(tmp_path)
        self.dtype = np.dtype(dtype)
        self.index_dtype = np.dtype(index_dtype)
        self.block_bytes = int(block_bytes)
        self.chunk_len = int(chunk_len)
        # one hasher per array, combined in a fixed order at the end (see finalize)
        self.hashers = {k: hashlib.blake2b(digest_size=16) for k in (L.INDPTR, L.INDICES, L.DATA, L.LABELS)}
        be, cl = self.backend, self.chunk_len
        self.indptr = Appender(be, L.array_name(L.ROWS, L.INDPTR), L.INDPTR_DTYPE, cl, self.hashers[L.INDPTR])
        self.indices = Appender(be, L.array_name(L.ROWS, L.INDICES), self.index_dtype, cl,
                                self.hashers[L.INDICES])
        self.data = Appender(be, L.array_name(L.ROWS, L.DATA), self.dtype, cl, self.hashers[L.DATA])
        self.labels = Appender(be, L.LABELS, L.LABEL_DTYPE, cl)
        self.row_nnz = Appender(be, L.ROW_NNZ, np.int64, cl)
        self.row_sqnorm = Appender(be, L.ROW_SQNORM, np.float64, cl)
        self.cols = ColumnAccumulator()
        # row blocks and the row summary are settled as rows stream in: O(blocks), not O(n)
        self.row_blocks = L.BlockCutter(L.entry_bytes(self.dtype, self.index_dtype), self.block_bytes)
        self.row_summary = RowSummary()
        self.label_tracker = LabelTracker()
        self.n_rows = 0
        self.nnz = 0
        self.indptr.append(np.zeros(1, dtype=np.int64))

    def add_rows(self, labels, indptr, indices, data) -> None:
        """Append rows given as a local CSR piece (0-based column ids, already validated)."""
        indptr = np.asarray(indptr, dtype=np.int64)
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
        self.label_tracker.add(np.asarray(labels, dtype=np.float64))
        self.n_rows += len(labels)
        self.nnz += int(indptr[-1])

    def finish_rows(self, n_cols: int | None, label_kind: str = "auto") -> dict:
        """Close the row arrays, settle labels and statistics; returns attributes so far."""
        for a in (self.indptr, self.indices, self.data, self.labels, self.row_nnz, self.row_sqnorm):
            a.close()
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
        attrs["stats"] = summary_from(self.row_summary, col_nnz, col_sq)
        self.col_nnz = col_nnz
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
        for k in (L.INDPTR, L.INDICES, L.DATA, L.LABELS):
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
        self.backend.set_attrs(attrs)
        seal_attrs(self.backend)
        self.backend.set_attrs({"complete": True})
        self.backend.close()
