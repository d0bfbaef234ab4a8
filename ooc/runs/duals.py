"""Where the dual variables live between blocks: in memory when they fit, paged from disk otherwise.

Both keep the same contract with the block loop: ``read(buf, b)`` gives the
``(k, rows)`` duals of block ``b`` as of the start of the current pass (buffer
``buf = epoch % 2``), the solver updates them in place, ``write(buf', b, a)``
records the new values, and a checkpoint captures exactly the state "blocks
visited so far updated, the others not".

* :class:`PagedDuals`: one file per block and buffer (``RUN/state/duals/{0,1}``),
  the two buffers alternating between epochs, so duals never need to fit in
  memory and a crash mid-epoch never touches what the last checkpoint refers to.
* :class:`MemoryDuals`: when ``n * k`` floats fit in the budget (the memory planner,
  :mod:`ooc.schedule.planner`, decides), the duals stay in
  memory and a checkpoint saves them as one array inside the checkpoint
  directory (written atomically with it). This avoids a file write, rename and
  fsync per block and epoch, which dominate small or cache-resident problems.
  The kernels update these duals in place, so an update pass first copies them
  (:meth:`MemoryDuals.begin_pass`): the pass certifies the state it starts from,
  and when that state is the run's result its duals are the copy, not the
  updated ones (what the paged buffer ``buf`` keeps by construction).
"""

from __future__ import annotations

import os

import numpy as np

from .rundir import RunDir, RunError


class PagedDuals:
    """Per-block dual files in two alternating buffers."""

    kind = "paged"

    def __init__(self, rd: RunDir, row_ptr: np.ndarray, k: int):
        self.rd, self.row_ptr, self.k = rd, row_ptr, k

    def init(self, make) -> None:
        for b in range(len(self.row_ptr) - 1):
            self.rd.write_duals(0, b, make(b))

    def read(self, buf: int, b: int) -> np.ndarray:
        return self.rd.read_duals(buf, b)

    def read_group(self, buf: int, blocks) -> np.ndarray:
        """The duals of ``blocks`` side by side, ``(k, their rows)``."""
        if len(blocks) == 1:
            return self.read(buf, blocks[0])
        return np.concatenate([self.read(buf, b) for b in blocks], axis=1)

    def write(self, buf: int, b: int, alpha: np.ndarray) -> None:
        self.rd.write_duals(buf, b, np.ascontiguousarray(alpha))
        _start_writeback(self.rd.dual_path(buf, b))

    def begin_pass(self, update: bool) -> None:
        """A pass starts from the duals of buffer ``epoch % 2``; its updates go to the other buffer."""

    def checkpoint_arrays(self, mid_pass: bool = False) -> dict:
        return {}

    def restore(self, arrays: dict) -> None:
        pass

    def final(self, buf: int) -> dict:
        """What a later warm start needs to find this run's final duals, and their checksums (one per block,
        of the files of buffer ``buf`` as they are now: a warm start verifies what it reads against them)."""
        from ..fsutil import array_checksum

        crcs = [array_checksum(self.rd.read_duals(buf, b)) for b in range(len(self.row_ptr) - 1)]
        return {"dual_store": self.kind, "dual_buffer": buf, "dual_crcs": crcs}


class MemoryDuals:
    """All duals in memory as one ``(k, n)`` array; saved inside each checkpoint."""

    kind = "memory"

    #: the name of the pass's starting duals in a checkpoint taken inside an update pass
    START = "alpha_start"

    def __init__(self, rd: RunDir, row_ptr: np.ndarray, k: int):
        self.rd, self.row_ptr, self.k = rd, row_ptr, k
        self.alpha = np.zeros((k, int(row_ptr[-1])))
        #: the duals the pass in progress started from, while an update pass changes ``alpha`` in
        #: place (None otherwise: ``alpha`` is still the pass's start); one array, reused every pass
        self.start: np.ndarray | None = None
        self._start_buf: np.ndarray | None = None

    def init(self, make) -> None:
        for b in range(len(self.row_ptr) - 1):
            self.alpha[:, self.row_ptr[b]:self.row_ptr[b + 1]] = make(b)

    def read(self, buf: int, b: int) -> np.ndarray:
        # contiguous rows for the kernels: a copy, written back by ``write`` (for k = 1 the slice is
        # already contiguous and this is a view: the kernels then update ``alpha`` in place, and
        # ``write`` copies it onto itself)
        return np.ascontiguousarray(self.alpha[:, self.row_ptr[b]:self.row_ptr[b + 1]])

    def read_group(self, buf: int, blocks) -> np.ndarray:
        """The duals of ``blocks`` side by side, ``(k, their rows)``: one copy, not one per block and another."""
        if len(blocks) == 1:
            return self.read(buf, blocks[0])
        return np.concatenate([self.alpha[:, self.row_ptr[b]:self.row_ptr[b + 1]] for b in blocks], axis=1)

    def write(self, buf: int, b: int, alpha: np.ndarray) -> None:
        self.alpha[:, self.row_ptr[b]:self.row_ptr[b + 1]] = alpha  # any layout: no contiguous copy first

    def begin_pass(self, update: bool) -> None:
        """A pass starts: with ``update``, keep a copy of the duals it starts from.

        The pass certifies its starting state ``S_e`` while it updates the duals in place
        (:mod:`ooc.solvers.base`); when ``S_e`` turns out certified it is the run's result, and
        its duals are this copy (:meth:`final`). A pass without updates leaves ``alpha`` as it
        starts, and needs none.
        """
        if not update:
            self.start = None
            return
        if self._start_buf is None:
            self._start_buf = np.empty_like(self.alpha)
        np.copyto(self._start_buf, self.alpha)
        self.start = self._start_buf

    def checkpoint_arrays(self, mid_pass: bool = False) -> dict:
        """The duals; inside an update pass (``mid_pass``: some of its blocks done) also the pass's
        starting duals, which a resume needs should the pass certify its start."""
        out = {"alpha": self.alpha}
        if mid_pass and self.start is not None:
            out[self.START] = self.start
        return out

    def restore(self, arrays: dict) -> None:
        a = arrays.get("alpha")
        if a is None or a.shape != self.alpha.shape:
            raise RunError(f"{self.rd.path}: the checkpoint holds no in-memory duals of shape {self.alpha.shape}")
        self.alpha = np.array(a, dtype=np.float64)
        s = arrays.get(self.START)
        if s is not None and s.shape != self.alpha.shape:
            raise RunError(f"{self.rd.path}: the checkpoint's {self.START!r} has shape {s.shape}, not the duals' "
                           f"{self.alpha.shape} (damaged)")
        self._start_buf = self.start = None if s is None else np.array(s, dtype=np.float64)

    def certified(self) -> np.ndarray:
        """The duals of the state the pass in progress (or the last one) started from."""
        return self.alpha if self.start is None else self.start

    def final(self, buf: int) -> dict:
        from ..fsutil import array_checksum, atomic_save_npy

        alpha = self.certified()  # the state the last pass certified, not the updates it made meanwhile
        os.makedirs(self.rd.model_out, exist_ok=True)  # the staged model (RunDir.stage_model)
        atomic_save_npy(os.path.join(self.rd.model_out, "duals.npy"), alpha, fsync=True)
        # recorded in metrics.json: a warm start reads the file back verified (ooc.fsutil.read_npy)
        return {"dual_store": self.kind, "duals_crc": array_checksum(alpha)}


def _start_writeback(path: str) -> None:
    """Start writing ``path``'s dirty pages now and let the OS drop them once written.

    Paged duals are what a run does when memory is short, typically under a memory cgroup
    that counts the page cache: left alone, a pass's dual files stay dirty in it until
    the kernel flushes them, and reclaiming room for the next block then waits on that
    writeback. The file is read again one pass later, long after its pages would have
    been evicted anyway. (Durability is unchanged: the checkpoint still fsyncs them.)
    """
    if not hasattr(os, "posix_fadvise"):
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def make_duals(rd: RunDir, row_ptr: np.ndarray, k: int, in_memory: bool):
    """:class:`MemoryDuals` when ``in_memory`` (the memory planner's decision), else :class:`PagedDuals`."""
    return (MemoryDuals if in_memory else PagedDuals)(rd, row_ptr, k)


def final_duals_reader(run_dir: str, metrics: dict, row_ptr: np.ndarray):
    """``read(b)`` returning block ``b``'s final duals of a finished run (warm starts)."""
    rd = RunDir(run_dir)
    if metrics.get("dual_store") == "memory":
        path = os.path.join(rd.model_dir, "duals.npy")
        if not os.path.exists(path):
            raise RunError(f"{run_dir}: its final duals ({path}) are missing")
        alpha = read_final_duals(path, metrics)
        if alpha.ndim != 2 or alpha.shape[1] != int(row_ptr[-1]):
            raise RunError(f"{path}: holds duals of shape {alpha.shape}, not of the run's {int(row_ptr[-1])} rows "
                           "(damaged)")
        return lambda b: alpha[:, row_ptr[b]:row_ptr[b + 1]]
    if "dual_buffer" in metrics:
        return final_block_reader(rd, metrics)
    raise RunError(f"{run_dir}: its final duals are not recorded")


def final_duals_held(metrics: dict, k: int, n: int) -> int:
    """Bytes :func:`final_duals_reader` holds for the run it reads (a warm start holds them from its start to
    its end): the whole ``(k, n)`` final duals of a run that kept them in memory (``model/duals.npy``, read
    and verified at once), none for paged ones (read a block at a time)."""
    return 8 * int(k) * int(n) if metrics.get("dual_store") == "memory" else 0


def final_block_reader(rd: RunDir, metrics: dict):
    """``read(b)``: block ``b``'s final duals of a finished run whose duals were paged, verified against the
    CRC-32 its ``metrics.json`` records."""
    from ..fsutil import read_npy

    buf, crcs = int(metrics["dual_buffer"]), list(metrics.get("dual_crcs") or [])

    def read(b):
        p = rd.dual_path(buf, b)
        if not 0 <= b < len(crcs):
            raise RunError(f"{p}: not one of the run's {len(crcs)} blocks of final duals")
        try:
            return read_npy(p, crcs[b])
        except ValueError as exc:
            raise RunError(f"{exc}; warm starts and continued runs cannot use it ('ooc train' the run again)") from None

    return read


def read_final_duals(path: str, metrics: dict) -> np.ndarray:
    """A finished run's ``model/duals.npy``, verified against the CRC-32 its ``metrics.json`` records
    (one that records none is not a certificate of its duals)."""
    from ..fsutil import read_npy

    if metrics.get("duals_crc") is None:
        raise RunError(f"{path}: its run's certificate records no checksum of it; warm starts and continued runs "
                       "cannot use it ('ooc train' the run again)")
    try:
        return read_npy(path, metrics["duals_crc"])
    except ValueError as exc:
        raise RunError(f"{exc}; warm starts and continued runs cannot use it ('ooc train' the run again)") from None
