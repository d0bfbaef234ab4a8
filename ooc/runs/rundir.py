"""The run directory: config, history, atomic checkpoints, and duals paged per block.

::

    RUN/run.json          config, store path and fingerprint, ooc version, state format, seed
    RUN/history.jsonl     one line per certified state (epoch, seconds, primal, dual, gap, ...)
    RUN/state/duals/0/    duals of each row block (b000012.npy), buffer 0
    RUN/state/duals/1/    buffer 1: epoch e reads buffer e % 2 and writes buffer (e + 1) % 2
    RUN/state/duals/2/    buffer 2 of distributed runs, whose rounds rotate three buffers (ooc.solvers.cocoa)
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
import warnings
from typing import NamedTuple

import numpy as np

from .. import fsutil, owned
from ..fsutil import (
    array_checksum,
    atomic_save_npy,
    atomic_write_bytes,
    disk_full_error,
    fsync_dir,
    fsync_path,
    npz_checksums,
    read_sealed_json,
    seal_json,
)

#: Bumped whenever the meaning of saved state changes; resume refuses other versions. Format 2 is
#: format 1 with checksums: ``run.json``, every checkpoint's ``meta.json`` (which holds the CRC-32 of
#: every array of its ``state.npz``, of its side files and of the paged dual files it refers to).
STATE_FORMAT = 2
#: Formats this ooc resumes (1: written before checksums; resumed unverified).
READABLE_STATE_FORMATS = (1, 2)


class CheckpointWarning(UserWarning):
    """A checkpoint failed its verification: the previous one (or a fresh start) is used instead."""


class OnDisk(NamedTuple):
    """An array a solver's :meth:`checkpoint_state` wants saved as its own ``.npy`` file in the checkpoint
    (too large to load whole with the rest: it comes back memory-mapped, read-only)."""

    array: np.ndarray


class RunError(Exception):
    """A run directory cannot be created or resumed."""


@contextlib.contextmanager
def disk_full_is_run_error(run: str, what: str, then: str | None = None):
    """Turn a full disk while writing ``what`` into a one-line :class:`RunError`.

    Everything written here is atomic (temporary name, then rename), so when the disk fills
    up the last checkpoint is still complete: the message says so, unless ``then`` says
    what the user should do instead.
    """
    try:
        yield
    except OSError as exc:
        full = disk_full_error(exc)
        if full is None:
            raise
        then = then or "the last checkpoint is intact: free some space and 'ooc resume' the run"
        raise RunError(f"{run}: the disk is full (no space left on device writing {what}); {then}") from exc


class RunDir:
    """Files of one training run. Create with :meth:`create`, reopen with :meth:`open`."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.state = os.path.join(self.path, "state")
        self._unsynced: set[str] = set()
        self._writer: threading.Thread | None = None  # a checkpoint being written in the background
        self._writer_error: BaseException | None = None
        #: name -> the copy a background checkpoint wrote, reused by the next one (same shape and dtype)
        self._copy_buffers: dict[str, np.ndarray] = {}
        #: block -> (buffer, CRC-32) of the last dual file written for it: what a checkpoint refers to
        self._dual_crc: dict[int, tuple[int, int]] = {}
        #: wall seconds the last completed checkpoint took (copies, write, fsyncs, read-back): the engine
        #: spaces the checkpoints it may skip by it
        self.write_seconds = 0.0

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
        try:
            owned.check_target(path)
        except owned.NotOurs as exc:
            raise RunError(str(exc)) from None
        replace = os.path.lexists(path) and not (os.path.isdir(path) and not os.listdir(path))
        if replace:
            if not overwrite:
                what = ("run directory exists and is not empty (use 'ooc resume' to continue it, or --overwrite)"
                        if os.path.isdir(path) else "exists and is not a directory")
                raise RunError(f"{path}: {what}")
            try:
                owned.refuse_to_replace(path, "a new run", inputs)
            except FileExistsError as exc:
                raise RunError(str(exc)) from None
        try:
            fsutil.make_parents(path)  # --out a/b makes a/
        except OSError as exc:
            raise RunError(str(exc)) from None
        fsutil.remove_stale_temporaries(path)  # what runs killed while being created here left behind
        with disk_full_is_run_error(path, "the new run directory", "nothing was written: free some space and "
                                    "train again"):
            return cls._build_and_swap(path, config, replace)

    @classmethod
    def _build_and_swap(cls, path: str, config: dict, replace: bool) -> "RunDir":
        tmp = fsutil.Temporary(path)
        try:
            os.makedirs(os.path.join(tmp.path, "state", "duals", "0"))
            os.makedirs(os.path.join(tmp.path, "state", "duals", "1"))
            atomic_write_bytes(os.path.join(tmp.path, "run.json"), seal_json(dict(config, state_format=STATE_FORMAT)))
            owned.seal_dir(tmp.path, "run", RUN_GENERATED)
            if replace:
                with cls(path).lock():  # never replace a run another process is training
                    owned.check_replaceable(path, "a new run")  # again, now that nobody writes there
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
            if is_run_dir(rd.path):
                raise RunError(f"{path}: run.json is missing (the run is damaged and cannot be resumed: "
                               "'ooc train ... --overwrite' trains it again)")
            raise RunError(f"{path}: not a run directory (no run.json)")
        rd.config  # verified: a damaged run.json is refused here
        return rd

    @property
    def config(self) -> dict:
        """``run.json``, verified: its state format is one this ooc reads, its checksum matches."""
        p = os.path.join(self.path, "run.json")
        try:
            try:
                cfg = read_sealed_json(p, required=False)
            except ValueError:
                with open(p) as f:  # a run.json of another format has other rules: say that first
                    fmt = json.load(f).get("state_format")
                if fmt in READABLE_STATE_FORMATS:
                    raise
                cfg = {"state_format": fmt}
            fmt = cfg.get("state_format")
            if fmt not in READABLE_STATE_FORMATS:
                raise RunError(f"{self.path}: saved with state format {fmt}, this ooc reads "
                               f"format {STATE_FORMAT}; it cannot be resumed ('ooc train ... --overwrite' trains "
                               "it again)")
            if fmt >= 2:
                read_sealed_json(p)  # format 2 is always sealed: a missing checksum is damage too
        except (ValueError, AttributeError) as exc:
            raise RunError(f"{p}: damaged ({exc}); the run cannot be resumed ('ooc train ... --overwrite' "
                           "trains it again)") from None
        except OSError as exc:
            raise RunError(f"{p}: unreadable ({exc.strerror or exc})") from None
        return cfg

    def write_config(self, config: dict) -> None:
        """Replace ``run.json`` (sealed with its checksum) atomically."""
        config = {**config, "state_format": config.get("state_format", STATE_FORMAT)}  # a format-1 run stays one
        atomic_write_bytes(os.path.join(self.path, "run.json"), seal_json(config))
        owned.record(self.path, ["run.json"])

    def record_outputs(self) -> None:
        """List the run's final outputs (model, metrics, plot) in its manifest, as written now."""
        names = [n for n in OUTPUT_FILES if os.path.isfile(os.path.join(self.path, n))]
        owned.record(self.path, names)

    def release_outputs(self) -> None:
        """Unlist the run's final outputs before they are written again (a crash meanwhile leaves
        files that only their generated names cover, never a listed file whose content changed)."""
        owned.forget(self.path, OUTPUT_FILES)

    def check_owned(self) -> None:
        """Refuse (:class:`RunError`, naming the entry) a run directory holding what ooc did not write
        (a user's file, a link): an in-place update (resume) must not write beside or through it."""
        why = owned.foreign_entry(self.path, contents=False)  # ooc's own files: verified when read
        if why is not None and os.path.isfile(os.path.join(self.path, owned.MANIFEST)):
            raise RunError(f"{why}; refusing to update the run (remove it, or move it out of the run directory)")

    # -- duals ------------------------------------------------------------------------------
    def dual_path(self, buf: int, block: int) -> str:
        return os.path.join(self.state, "duals", str(buf), f"b{block:06d}.npy")

    def read_duals(self, buf: int, block: int) -> np.ndarray:
        """Block ``block``'s duals in buffer ``buf``, verified against the checksum recorded when written."""
        p = self.dual_path(buf, block)
        try:
            a = np.load(p, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise RunError(f"{p}: dual state unreadable ({exc})") from exc
        want = self._dual_crc.get(block)
        if want is not None and want[0] == buf and array_checksum(a) != want[1]:
            raise RunError(f"{p}: dual state failed its checksum (the file is damaged); 'ooc resume' "
                           "goes back to the last checkpoint that verifies")
        return a

    def write_duals(self, buf: int, block: int, alpha: np.ndarray) -> None:
        p = self.dual_path(buf, block)
        crc = array_checksum(alpha)
        with disk_full_is_run_error(self.path, p):
            atomic_save_npy(p, alpha)
        self._dual_crc[block] = (buf, crc)
        self._unsynced.add(p)

    def dual_checksums(self, blocks=None) -> dict[int, tuple[int, int]]:
        """``block -> (buffer, crc)`` of the dual files written last (of ``blocks``, default all)."""
        if blocks is None:
            return dict(self._dual_crc)
        return {int(b): self._dual_crc[int(b)] for b in blocks if int(b) in self._dual_crc}

    def note_dual_checksums(self, sums: dict) -> None:
        """Record the checksums of dual files another process wrote here (distributed workers)."""
        self._dual_crc.update({int(b): (int(v[0]), int(v[1])) for b, v in sums.items()})

    def sync_duals(self) -> None:
        """Make the dual files written through this object durable, and their renames into place
        (workers of distributed runs)."""
        _fsync_files(self._unsynced)
        for d in sorted({os.path.dirname(p) for p in self._unsynced}):
            fsync_dir(d)
        self._unsynced.clear()

    def use_dual_buffers(self, n: int) -> None:
        """Make sure buffers ``0 .. n-1`` exist, durably (a run directory is made with two)."""
        root = os.path.join(self.state, "duals")
        missing = [buf for buf in range(n) if not os.path.isdir(os.path.join(root, str(buf)))]
        for buf in missing:
            os.makedirs(os.path.join(root, str(buf)), exist_ok=True)
        if missing:
            fsync_dir(root)

    def _dual_dirs(self) -> list[str]:
        """The dual buffers' directories that exist."""
        root = os.path.join(self.state, "duals")
        try:
            return [os.path.join(root, n) for n in sorted(os.listdir(root)) if n.isdigit()]
        except OSError:
            return []

    # -- checkpoints -------------------------------------------------------------------------
    def latest(self) -> str | None:
        p = os.path.join(self.path, "LATEST")
        if not os.path.exists(p):
            return None
        with open(p) as f:
            name = f.read().strip()
        return os.path.join(self.state, name) if name else None

    def save_checkpoint(self, arrays: dict[str, np.ndarray], meta: dict, background: bool = False) -> str:
        """Write a checkpoint directory, make it durable, verify it, then point LATEST at it.

        The arrays go into one ``state.npz`` (one write, one fsync; an :class:`OnDisk` array into a
        ``.npy`` file of its own), the metadata into ``meta.json`` together with the CRC-32 of every
        array and of the paged dual files the state refers to, sealed with its own checksum. The
        directory is built under a temporary name and renamed; it is read back and verified before
        the previous checkpoint is deleted, so a checkpoint that does not verify leaves the previous
        one in place.

        With ``background``, the arrays are copied and the write (with its fsyncs) runs in a
        thread while the caller goes on; until it completes, LATEST still names the previous
        checkpoint, which stays valid as long as the caller does not overwrite files it
        needs: only callers whose state lives entirely in the checkpoint (in-memory duals)
        may use it. The next checkpoint, :meth:`load_checkpoint` and
        :meth:`wait_checkpoint` wait for it and raise its error, if any.
        """
        self.wait_checkpoint()
        t0 = time.perf_counter()
        seq = int(meta["seq"])
        name = f"ckpt-{seq:06d}"
        unsynced, self._unsynced = self._unsynced, set()
        duals = sorted(self._dual_crc.items())  # the dual files this state refers to, as of now
        if not background:
            self._write_checkpoint(name, arrays, meta, unsynced, duals)
            self.write_seconds = time.perf_counter() - t0
            return os.path.join(self.state, name)
        # one copy per distinct array (v may be w), into the buffers of the previous background
        # checkpoint (its write is over): a fresh 100 MB copy faults in every page again, on the
        # thread the training waits for (measured 0.07 s a checkpoint of 144 MB against 0.015 s)
        copies: dict[int, np.ndarray] = {}
        kept, self._copy_buffers = self._copy_buffers, {}
        for k, a in arrays.items():
            if id(a) in copies:
                continue
            src = a.array if isinstance(a, OnDisk) else a
            buf = kept.get(k)
            if buf is None or buf.shape != src.shape or buf.dtype != src.dtype:
                buf = np.empty(src.shape, src.dtype)
            np.copyto(buf, src)
            self._copy_buffers[k] = buf
            copies[id(a)] = OnDisk(buf) if isinstance(a, OnDisk) else buf
        arrays = {k: copies[id(a)] for k, a in arrays.items()}
        meta = json.loads(json.dumps(meta))

        def write():
            try:
                self._write_checkpoint(name, arrays, meta, unsynced, duals)
                self.write_seconds = time.perf_counter() - t0
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

    def _write_checkpoint(self, name: str, arrays: dict, meta: dict, unsynced: set[str], duals: list) -> None:
        final = os.path.join(self.state, name)
        tmp = fsutil.temporary_sibling(final, "tmp")
        with disk_full_is_run_error(self.path, f"checkpoint {final}"):
            try:
                if os.path.exists(tmp):
                    shutil.rmtree(tmp)
                os.makedirs(tmp)
                in_npz = {k: a for k, a in arrays.items() if not isinstance(a, OnDisk)}
                sums = {k: array_checksum(a) for k, a in in_npz.items()}
                with open(os.path.join(tmp, "state.npz"), "wb") as f:
                    np.savez(f, **in_npz)
                    f.flush()
                    os.fsync(f.fileno())
                files = {}
                for k, a in arrays.items():
                    if isinstance(a, OnDisk):
                        files[k] = array_checksum(a.array)
                        atomic_save_npy(os.path.join(tmp, f"{k}.npy"), a.array, fsync=True)
                sealed = {"meta": meta, "arrays": sums, "files": files,
                          "duals": [[b, buf, crc] for b, (buf, crc) in duals]}
                atomic_write_bytes(os.path.join(tmp, "meta.json"), seal_json(sealed, indent=None))
                if unsynced:  # paged duals written since the last checkpoint
                    _fsync_files(unsynced)
                    for d in self._dual_dirs():
                        fsync_dir(d)
            except BaseException:
                # the half-written directory is of no use, and on a full disk its space is wanted
                shutil.rmtree(tmp, ignore_errors=True)
                self._unsynced |= unsynced  # still not known durable
                raise
            if os.path.exists(final):
                shutil.rmtree(final)
            os.rename(tmp, final)
            fsync_dir(self.state)
            # read back what was just written (not the dual files: those are verified on resume)
            self._read_checkpoint(final, check_duals=False, keep=False)
            atomic_write_bytes(os.path.join(self.path, "LATEST"), name.encode())
            fsync_dir(self.path)
        # older checkpoints are no longer needed (their dual buffers may already be overwritten)
        for old in os.listdir(self.state):
            if old.startswith("ckpt-") and old != name:
                shutil.rmtree(os.path.join(self.state, old), ignore_errors=True)

    def checkpoints(self, min_seq: int = 0) -> list[str]:
        """The complete checkpoint directories numbered ``min_seq`` or more, newest first (by their
        number; LATEST is only a hint)."""
        try:
            names = os.listdir(self.state)
        except OSError:
            return []
        done = [n for n in names if n.startswith("ckpt-") and n[5:].isdigit()
                and int(n[5:]) >= min_seq]
        return [os.path.join(self.state, n) for n in sorted(done, key=lambda n: int(n[5:]), reverse=True)]

    def last_seq(self) -> int:
        """The number of the newest complete checkpoint (-1: none)."""
        found = self.checkpoints()
        return int(os.path.basename(found[0])[5:]) if found else -1

    def load_checkpoint(self, min_seq: int = 0) -> tuple[dict[str, np.ndarray], dict] | None:
        """The newest checkpoint that verifies (arrays, meta), or None; clears what a killed process left.

        Every file of a candidate is verified before use: ``meta.json``'s checksum, the CRC-32 of every
        array, the paged dual files it refers to, and that the state is finite. One that fails is
        reported (:class:`CheckpointWarning`) and the previous one tried; when none verifies the run
        starts again from the beginning, which ends with the same result (iterates depend only on the
        data and the options), only later. Checkpoints numbered below ``min_seq`` belong to the
        trajectory a run continued on a larger store left behind: they are deleted, never resumed.
        """
        self.wait_checkpoint()
        self.remove_stale()
        for older in self.checkpoints()[len(self.checkpoints(min_seq)):]:  # a previous trajectory's
            shutil.rmtree(older, ignore_errors=True)
        found = self.checkpoints(min_seq)
        for i, ck in enumerate(found):
            try:
                arrays, meta, duals = self._read_checkpoint(ck, check_duals=True)
            except RunError as exc:
                then = ("using the previous checkpoint" if i + 1 < len(found) else
                        "no checkpoint left: the run starts again from the beginning (same result, later)")
                warnings.warn(f"{exc}; {then}", CheckpointWarning, stacklevel=2)
                continue
            self._dual_crc = duals
            for older in found[i + 1:]:  # superseded by one that verified
                shutil.rmtree(older, ignore_errors=True)
            return arrays, meta
        return None

    def _read_checkpoint(self, ck: str, check_duals: bool, keep: bool = True) -> tuple[dict, dict, dict]:
        """``(arrays, meta, dual checksums)`` of checkpoint directory ``ck``, verified; else :class:`RunError`.

        ``keep=False`` (a checkpoint just written, read back): the arrays are streamed through one
        buffer (:func:`ooc.fsutil.npz_checksums`), checksummed and checked finite without being
        made, so the check holds no ``O(d)`` array; the arrays returned are then None.
        """
        try:
            sealed = read_sealed_json(os.path.join(ck, "meta.json"), required=self.config["state_format"] >= 2)
        except (OSError, ValueError) as exc:
            raise RunError(f"{ck}: checkpoint unreadable ({exc})") from None
        if "arrays" not in sealed:  # state format 1: the metadata alone, no checksums
            sealed = {"meta": sealed, "arrays": None, "files": {}, "duals": []}
        meta, sums = sealed["meta"], sealed["arrays"]
        expected = dict(sums or {}, **sealed["files"])

        def check(k, a):
            if sums is not None and array_checksum(a) != expected[k]:
                raise RunError(f"{ck}: array {k!r} of the checkpoint failed its checksum (damaged)")
            _check_finite(a, f"{ck}: array {k!r} of the checkpoint")
            return a if keep else None

        try:
            if not keep:
                # read back right after the write: the same checks, streamed (no array is made)
                got = npz_checksums(os.path.join(ck, "state.npz"))
                names = list(got) + list(sealed["files"])
                if sums is not None and set(names) != set(expected):
                    raise RunError(f"{ck}: checkpoint damaged (arrays {sorted(names)} instead of {sorted(expected)})")
                for k, crc in got.items():
                    if sums is not None and crc != expected[k]:
                        raise RunError(f"{ck}: array {k!r} of the checkpoint failed its checksum (damaged)")
                arrays = dict.fromkeys(got)
            else:
                with np.load(os.path.join(ck, "state.npz"), allow_pickle=False) as z:
                    names = list(z.files) + list(sealed["files"])
                    if sums is not None and set(names) != set(expected):
                        raise RunError(f"{ck}: checkpoint damaged (arrays {sorted(names)} instead of "
                                       f"{sorted(expected)})")
                    arrays = {k: check(k, z[k]) for k in z.files}
            for k in sealed["files"]:
                arrays[k] = check(k, np.load(os.path.join(ck, f"{k}.npy"), mmap_mode="r", allow_pickle=False))
        except RunError:
            raise
        except Exception as exc:  # zipfile.BadZipFile, a bad CRC, a truncated array ...
            raise RunError(f"{ck}: checkpoint unreadable ({type(exc).__name__}: {exc})") from None
        duals = {int(b): (int(buf), int(crc)) for b, buf, crc in sealed["duals"]}
        if check_duals:
            for b, (buf, crc) in duals.items():
                p = self.dual_path(buf, b)
                try:
                    a = np.load(p, allow_pickle=False)
                except Exception as exc:
                    raise RunError(f"{p}: dual state of checkpoint {os.path.basename(ck)} unreadable ({exc})") from None
                if array_checksum(a) != crc:
                    raise RunError(f"{p}: dual state of checkpoint {os.path.basename(ck)} failed its checksum "
                                   "(damaged or overwritten since)")
                _check_finite(a, p)
        return arrays, meta, duals

    def remove_stale(self) -> None:
        """Delete the temporary files and directories of a process that died mid-write.

        Only half-written files carry a temporary's name (:data:`ooc.fsutil.TEMPORARY`; complete ones are
        renamed). Complete
        checkpoints are never deleted here: only a newer checkpoint that verified replaces them. Call it
        only under :meth:`lock`: then no other process is writing here.
        """
        for d in (self.path, self.state, *self._dual_dirs(), self.model_dir):
            try:
                names = os.listdir(d)
            except OSError:
                continue
            for name in names:
                p = os.path.join(d, name)
                if fsutil.is_temporary_name(name):
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

    def history(self, limit: int | None = None) -> list[dict]:
        """The entries of ``history.jsonl`` (the first ``limit``), each line verified by its checksum.

        A last line without its newline is a write a crash cut short: it is left out. Any other line
        that does not verify is refused (:class:`RunError` naming the line), never skipped with the lines
        after it. Lines of a run made before they were sealed have no checksum: accepted only when no
        line of the file has one.
        """
        try:
            with open(self.history_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise RunError(f"{self.history_path}: unreadable ({exc.strerror or exc})") from None
        lines = raw.split(b"\n")[:-1]  # the last piece: empty, or a line cut short by a crash
        if limit is not None:
            lines = lines[:limit]
        sealed = any(fsutil.CHECKSUM_KEY.encode() in line for line in lines)
        out = []
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = fsutil.unseal_json_line(line, required=sealed)
            except ValueError as exc:
                raise RunError(f"{self.history_path}: line {i}: {exc} (the history is damaged; 'ooc train ... "
                               "--overwrite' trains the run again)") from None
            out.append(entry)
        return out

    def append_history(self, entry: dict) -> None:
        with disk_full_is_run_error(self.path, self.history_path), open(self.history_path, "ab") as f:
            f.write(seal_json(entry, indent=None) + b"\n")  # one write: a crash cuts the last line at most

    def truncate_history(self, n_lines: int) -> None:
        """Keep the first ``n_lines`` entries (those the checkpoint being resumed knew)."""
        kept = self.history(limit=n_lines)
        atomic_write_bytes(self.history_path, b"".join(seal_json(e, indent=None) + b"\n" for e in kept), fsync=False)

    @property
    def model_dir(self) -> str:
        return os.path.join(self.path, "model")


#: What ooc puts at the top of a run directory (temporaries aside).
RUN_ENTRIES = frozenset({"run.json", "history.jsonl", "LATEST", "state", "model", "convergence.png", ".lock"})
#: The files of a run's ``model/``.
MODEL_FILES = ("coef.npy", "model.json", "metrics.json", "duals.npy")
#: The final outputs of a run, listed in its manifest once written.
OUTPUT_FILES = ("convergence.png", *(os.path.join("model", n) for n in MODEL_FILES))
#: The names a run directory's manifest lets ooc generate while it trains (one segment per ``/``); the
#: files it lists exactly (run.json, the model) are checked against their recorded content.
RUN_GENERATED = (
    "run.json", "history.jsonl", "LATEST", ".lock", "convergence.png", "state", "model",
    *(f"model/{n}" for n in MODEL_FILES),
    "state/duals", "state/duals/[0-9]", "state/duals/[0-9]/b[0-9][0-9][0-9][0-9][0-9][0-9].npy",
    "state/ckpt-[0-9]*", "state/ckpt-[0-9]*/state.npz", "state/ckpt-[0-9]*/meta.json", "state/ckpt-[0-9]*/*.npy",
    "state/parent-[0-9]*", "state/parent-[0-9]*/b[0-9][0-9][0-9][0-9][0-9][0-9].npy",
    # rcd-primal's memory-mapped O(n) vectors (margins, labels, weights) when --memory pages them
    "state/primal", "state/primal/[zyc].npy",
    # a checkpoint being written (renamed into place when whole), and the convergence plot being drawn
    "state/.ckpt-[0-9]*.tmp-*", "state/.ckpt-[0-9]*.tmp-*/*", "convergence.png.tmp-[0-9]*.png",
)


def is_run_dir(path: str) -> bool:
    """Whether ``path`` is a run directory ooc made, even a damaged one.

    Its ``run.json`` has ooc's ``state_format``; or, when ``run.json`` is missing or unreadable (a
    damaged run that ``--overwrite`` must be able to replace), it holds ooc's ``state/duals`` and
    nothing but what ooc puts in a run directory.
    """
    try:
        with open(os.path.join(path, "run.json")) as f:
            cfg = json.load(f)
        if isinstance(cfg, dict) and "state_format" in cfg:
            return True
    except (OSError, ValueError, UnicodeDecodeError):
        pass
    try:
        names = os.listdir(path)
    except OSError:
        return False
    ours = all(n in RUN_ENTRIES or ".tmp-" in n for n in names)
    return ours and os.path.isdir(os.path.join(path, "state", "duals"))


def _check_finite(a: np.ndarray, what: str) -> None:
    """Refuse a state holding NaN or infinity (a solver's iterates are always finite)."""
    if a.dtype.kind in "fc" and a.size:
        step = 1 << 20  # memory-mapped side files: a piece at a time
        flat = a.reshape(-1)
        for i in range(0, flat.size, step):
            if not np.isfinite(flat[i:i + step]).all():
                raise RunError(f"{what} holds NaN or infinite values (damaged)")


def _fsync_files(paths) -> None:
    for p in sorted(paths):
        if os.path.exists(p):
            fsync_path(p)


def now() -> float:
    return time.perf_counter()
