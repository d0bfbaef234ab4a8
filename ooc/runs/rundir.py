"""The run directory: config, history, atomic checkpoints, and duals paged per block.

::

    RUN/run.json          config, store path and fingerprint, ooc version, state format, seed
    RUN/history.jsonl     one line per certified state (epoch, seconds, primal, dual, gap, ...)
    RUN/state/duals/0/    duals of each row block (b000012.npy), buffer 0
    RUN/state/duals/1/    buffer 1: epoch e reads buffer e % 2 and writes buffer (e + 1) % 2
    RUN/state/ckpt-N/     state.npz (w, v, snapshots, in-memory duals) and meta.json of checkpoint N
    RUN/LATEST            the name of the newest complete checkpoint, replaced atomically, last
    RUN/model/            the final model and its metrics
    RUN/convergence.png

Why a crash never damages the last checkpoint: a checkpoint taken at position
``k`` of epoch ``e`` refers to the duals of the blocks visited so far in buffer
``(e + 1) % 2`` (never written again in epoch ``e``) and to the others in buffer
``e % 2`` (not written during epoch ``e`` at all). Every file is written under a
temporary name, fsynced and renamed; ``LATEST`` is replaced only after the
checkpoint it names and the dual files it needs are durable.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time

import numpy as np

from .. import fsutil
from ..fsutil import atomic_save_npy, atomic_write_bytes, disk_full_error, fsync_dir, fsync_path

#: Bumped whenever the meaning of saved state changes; resume refuses other versions.
STATE_FORMAT = 1


class RunError(Exception):
    """A run directory cannot be created or resumed."""


@contextlib.contextmanager
def disk_full_is_run_error(run: str, what: str):
    """Turn a full disk while writing ``what`` into a one-line :class:`RunError`.

    Everything written here is atomic (temporary name, then rename), so when the disk fills
    up the last checkpoint LATEST names is still complete: the message says so.
    """
    try:
        yield
    except OSError as exc:
        full = disk_full_error(exc)
        if full is None:
            raise
        raise RunError(f"{run}: the disk is full (no space left on device writing {what}); the last "
                       "checkpoint is intact: free some space and 'ooc resume' the run") from exc


class RunDir:
    """Files of one training run. Create with :meth:`create`, reopen with :meth:`open`."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.state = os.path.join(self.path, "state")
        self._unsynced: set[str] = set()
        self._writer: threading.Thread | None = None  # a checkpoint being written in the background
        self._writer_error: BaseException | None = None

    # -- creation ------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str, config: dict, overwrite: bool = False, inputs=()) -> "RunDir":
        """Make a new run directory at ``path`` holding ``config``; it appears whole or not at all.

        The directory is built beside ``path`` and renamed into place. ``--overwrite`` replaces only
        a run directory (:func:`is_run_dir`) that is not in use, is not the current directory and does
        not contain any of ``inputs`` (the store): the new one is swapped in atomically, then the old
        one deleted (:func:`ooc.fsutil.swap_into_place`), so a crash leaves one of them whole.
        """
        path = os.path.abspath(path)
        replace = os.path.lexists(path) and not (os.path.isdir(path) and not os.listdir(path))
        if replace:
            if not overwrite:
                what = ("run directory exists and is not empty (use 'ooc resume' to continue it, or --overwrite)"
                        if os.path.isdir(path) else "exists and is not a directory")
                raise RunError(f"{path}: {what}")
            try:
                fsutil.refuse_to_replace(path, "an ooc run directory", is_run_dir, inputs)
            except FileExistsError as exc:
                raise RunError(str(exc)) from None
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            raise RunError(f"{path}: the parent directory {parent} does not exist")
        fsutil.remove_stale_temporaries(path)  # what runs killed while being created here left behind
        tmp = fsutil.Temporary(path)
        try:
            os.makedirs(os.path.join(tmp.path, "state", "duals", "0"))
            os.makedirs(os.path.join(tmp.path, "state", "duals", "1"))
            config = dict(config, state_format=STATE_FORMAT)
            atomic_write_bytes(os.path.join(tmp.path, "run.json"), json.dumps(config, indent=2, default=str).encode())
            if replace:
                with cls(path).lock():  # never replace a run another process is training
                    old = fsutil.swap_into_place(tmp.path, path)
            else:
                old = fsutil.swap_into_place(tmp.path, path)  # over an empty directory, if one is there
            if old is not None:
                fsutil.remove_tree(old)
        except BaseException:
            tmp.remove()
            raise
        finally:
            tmp.release()
        return cls(path)

    @classmethod
    def open(cls, path: str) -> "RunDir":
        rd = cls(path)
        if not os.path.isfile(os.path.join(rd.path, "run.json")):
            raise RunError(f"{path}: not a run directory (no run.json)")
        cfg = rd.config
        if cfg.get("state_format") != STATE_FORMAT:
            raise RunError(f"{path}: saved with state format {cfg.get('state_format')}, this ooc reads "
                           f"format {STATE_FORMAT}; it cannot be resumed (train again)")
        return rd

    @property
    def config(self) -> dict:
        with open(os.path.join(self.path, "run.json")) as f:
            return json.load(f)

    # -- duals ------------------------------------------------------------------------------
    def dual_path(self, buf: int, block: int) -> str:
        return os.path.join(self.state, "duals", str(buf), f"b{block:06d}.npy")

    def read_duals(self, buf: int, block: int) -> np.ndarray:
        p = self.dual_path(buf, block)
        try:
            return np.load(p, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise RunError(f"{p}: dual state unreadable ({exc})") from exc

    def write_duals(self, buf: int, block: int, alpha: np.ndarray) -> None:
        p = self.dual_path(buf, block)
        with disk_full_is_run_error(self.path, p):
            atomic_save_npy(p, alpha)
        self._unsynced.add(p)

    def sync_duals(self) -> None:
        """Make the dual files written through this object durable (workers of distributed runs)."""
        _fsync_files(self._unsynced)
        self._unsynced.clear()

    # -- checkpoints -------------------------------------------------------------------------
    def latest(self) -> str | None:
        p = os.path.join(self.path, "LATEST")
        if not os.path.exists(p):
            return None
        with open(p) as f:
            name = f.read().strip()
        return os.path.join(self.state, name) if name else None

    def save_checkpoint(self, arrays: dict[str, np.ndarray], meta: dict, background: bool = False) -> str:
        """Write a checkpoint directory, make it durable, then point LATEST at it.

        The arrays go into one ``state.npz`` (one write, one fsync), the metadata into
        ``meta.json``; the directory is built under a temporary name and renamed.

        With ``background``, the arrays are copied and the write (with its fsyncs) runs in a
        thread while the caller goes on; until it completes, LATEST still names the previous
        checkpoint, which stays valid as long as the caller does not overwrite files it
        needs: only callers whose state lives entirely in the checkpoint (in-memory duals)
        may use it. The next checkpoint, :meth:`load_checkpoint` and
        :meth:`wait_checkpoint` wait for it and raise its error, if any.
        """
        self.wait_checkpoint()
        seq = int(meta["seq"])
        name = f"ckpt-{seq:06d}"
        unsynced, self._unsynced = self._unsynced, set()
        if not background:
            self._write_checkpoint(name, arrays, meta, unsynced)
            return os.path.join(self.state, name)
        copies: dict[int, np.ndarray] = {}  # one copy per distinct array (v may be w)
        for a in arrays.values():
            if id(a) not in copies:
                copies[id(a)] = np.array(a, copy=True)
        arrays = {k: copies[id(a)] for k, a in arrays.items()}
        meta = json.loads(json.dumps(meta))

        def write():
            try:
                self._write_checkpoint(name, arrays, meta, unsynced)
            except BaseException as exc:  # raised in the caller's thread by wait_checkpoint
                self._writer_error = exc

        # not a daemon: an interpreter that exits (Ctrl-C) still finishes a durable checkpoint
        self._writer = threading.Thread(target=write, name="ooc-checkpoint")
        self._writer.start()
        return os.path.join(self.state, name)

    def wait_checkpoint(self, reraise: bool = True) -> None:
        """Wait for a background checkpoint; raise its error (unless ``reraise`` is false)."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        err, self._writer_error = self._writer_error, None
        if err is not None and reraise:
            raise err

    def _write_checkpoint(self, name: str, arrays: dict[str, np.ndarray], meta: dict, unsynced: set[str]) -> None:
        final = os.path.join(self.state, name)
        tmp = final + f".tmp-{os.getpid()}"
        with disk_full_is_run_error(self.path, f"checkpoint {final}"):
            try:
                if os.path.exists(tmp):
                    shutil.rmtree(tmp)
                os.makedirs(tmp)
                with open(os.path.join(tmp, "state.npz"), "wb") as f:
                    np.savez(f, **arrays)
                    f.flush()
                    os.fsync(f.fileno())
                atomic_write_bytes(os.path.join(tmp, "meta.json"), json.dumps(meta, indent=1).encode())
                if unsynced:  # paged duals written since the last checkpoint
                    _fsync_files(unsynced)
                    fsync_dir(os.path.join(self.state, "duals", "0"))
                    fsync_dir(os.path.join(self.state, "duals", "1"))
            except BaseException:
                # the half-written directory is of no use, and on a full disk its space is wanted
                shutil.rmtree(tmp, ignore_errors=True)
                self._unsynced |= unsynced  # still not known durable
                raise
            if os.path.exists(final):
                shutil.rmtree(final)
            os.rename(tmp, final)
            fsync_dir(self.state)
            atomic_write_bytes(os.path.join(self.path, "LATEST"), name.encode())
            fsync_dir(self.path)
        # older checkpoints are no longer needed (their dual buffers may already be overwritten)
        for old in os.listdir(self.state):
            if old.startswith("ckpt-") and old != name:
                shutil.rmtree(os.path.join(self.state, old), ignore_errors=True)

    def load_checkpoint(self) -> tuple[dict[str, np.ndarray], dict] | None:
        """The checkpoint LATEST names (arrays, meta), or None; clears what a killed process left."""
        self.wait_checkpoint()
        self.remove_stale()
        ck = self.latest()
        if ck is None:
            return None
        try:
            with open(os.path.join(ck, "meta.json")) as f:
                meta = json.load(f)
            with np.load(os.path.join(ck, "state.npz"), allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except (OSError, ValueError, KeyError) as exc:
            raise RunError(f"{ck}: checkpoint unreadable ({exc})") from exc
        return arrays, meta

    def remove_stale(self) -> None:
        """Delete the temporary files and directories of a process that died mid-write.

        Only half-written files carry ``.tmp-`` in their names (complete ones are renamed), and
        checkpoint directories LATEST does not name are never needed again. Call it only under
        :meth:`lock`: then no other process is writing here.
        """
        keep = self.latest()
        keep = os.path.basename(keep) if keep else None
        for d in (self.path, self.state, os.path.join(self.state, "duals", "0"),
                  os.path.join(self.state, "duals", "1"), self.model_dir):
            try:
                names = os.listdir(d)
            except OSError:
                continue
            for name in names:
                p = os.path.join(d, name)
                if ".tmp-" in name or (d == self.state and name.startswith("ckpt-") and name != keep):
                    if os.path.isdir(p):
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        try:
                            os.unlink(p)
                        except OSError:
                            pass

    @contextlib.contextmanager
    def lock(self):
        """Hold the run's lock (``RUN/.lock``; the kernel releases it if the process dies).

        Raises :class:`RunError` when another live process trains or resumes this run: two
        writers would interleave their dual buffers and checkpoints.
        """
        import fcntl

        os.makedirs(self.path, exist_ok=True)
        fd = os.open(os.path.join(self.path, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise RunError(f"{self.path}: the run is in use by another process (training or resuming "
                               "it); wait for it to finish or stop it first") from None
            yield self
        finally:
            os.close(fd)  # releases the lock

    # -- history -------------------------------------------------------------------------------
    @property
    def history_path(self) -> str:
        return os.path.join(self.path, "history.jsonl")

    def history(self) -> list[dict]:
        if not os.path.exists(self.history_path):
            return []
        out = []
        with open(self.history_path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        break  # a torn last line from a crash: everything before it is good
        return out

    def append_history(self, entry: dict) -> None:
        with disk_full_is_run_error(self.path, self.history_path), open(self.history_path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def truncate_history(self, n_lines: int) -> None:
        """Keep the first ``n_lines`` entries (those the checkpoint being resumed knew)."""
        kept = self.history()[:n_lines]
        atomic_write_bytes(self.history_path, "".join(json.dumps(e) + "\n" for e in kept).encode(), fsync=False)

    @property
    def model_dir(self) -> str:
        return os.path.join(self.path, "model")


def is_run_dir(path: str) -> bool:
    """Whether ``path`` is a run directory ooc made: its ``run.json`` has ooc's ``state_format``, or it is
    the empty skeleton an older ooc left when killed before writing ``run.json``."""
    try:
        with open(os.path.join(path, "run.json")) as f:
            return "state_format" in json.load(f)
    except FileNotFoundError:
        pass
    except (OSError, ValueError, TypeError):
        return False
    skeleton = {".", "state", os.path.join("state", "duals"), os.path.join("state", "duals", "0"),
                os.path.join("state", "duals", "1")}
    for root, dirs, files in os.walk(path):
        rel = os.path.relpath(root, path)
        if rel not in skeleton or [f for f in files if f != ".lock"]:
            return False
    return os.path.isdir(path)


def _fsync_files(paths) -> None:
    for p in sorted(paths):
        if os.path.exists(p):
            fsync_path(p)


def now() -> float:
    return time.perf_counter()
