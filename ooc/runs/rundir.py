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
import zlib
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
from .records import (
    CHECKPOINT_RUN_KEY,
    HISTORY_LINE_KEY,
    HISTORY_PREV_KEY,
    HISTORY_RUN_KEY,
    OUTPUT_FILES,
    RUN_GENERATED,
    STATE_FORMAT,
    checkpoint_run_error,
    history_lines,
    is_run_dir,
    run_json_error,
    save_sealed_npy,
    state_format_error,
    trajectory_of,
)


class CheckpointWarning(UserWarning):
    """A checkpoint failed its verification: the previous one (or a fresh start) is used instead."""


class OnDisk(NamedTuple):
    """An array a solver's :meth:`checkpoint_state` wants saved as its own ``.npy`` file in the checkpoint
    (too large to load whole with the rest: it comes back memory-mapped, read-only)."""

    array: np.ndarray


class RunError(Exception):
    """A run directory cannot be created or resumed."""


class ForeignCheckpoint(RunError):
    """A checkpoint that is whole but not of this run's trajectory (another run's, or of another store or other
    options): never used, never deleted, and never passed over for an older one (the run is refused)."""


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
        #: names of the checkpoints this object wrote or verified: the only ones it deletes unverified
        self._proven: set[str] = set()
        #: names of checkpoints that did not verify, left in place (reported once)
        self._kept: set[str] = set()
        self._stage: fsutil.Temporary | None = None
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
            owned.check_folder(path)  # never inside a store or another run
        except owned.NotOurs as exc:
            raise RunError(str(exc)) from None
        replace = os.path.lexists(path) and not (os.path.isdir(path) and not os.listdir(path))
        if replace:
            if not overwrite:
                what = ("run directory exists and is not empty (use 'ooc resume' to continue it, or --overwrite)"
                        if os.path.isdir(path) else "exists and is not a directory")
                raise RunError(f"{path}: {what}")
            cls(path).check_not_in_use()  # a run being trained changes while it is checked: say that first
            try:
                owned.refuse_to_replace(path, "a new run", inputs, kind="run")
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
            ident = owned.new_token()  # the run's identity: its manifest's token, recorded in run.json too
            atomic_write_bytes(os.path.join(tmp.path, "run.json"),
                               seal_json(dict(config, state_format=STATE_FORMAT, run_id=ident)))
            owned.seal_dir(tmp.path, "run", RUN_GENERATED, token=ident)
            if replace:
                with cls(path).lock():  # never replace a run another process is training
                    # verified again as it is exchanged, now that no ooc writes there (ooc.owned.put)
                    owned.put(tmp.path, path, "run", "a new run")
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
                if fmt == STATE_FORMAT:
                    raise
                cfg = {"state_format": fmt}
            fmt = cfg.get("state_format")
            if fmt != STATE_FORMAT:
                raise RunError(state_format_error(self.path, fmt))
            read_sealed_json(p)  # always sealed: a missing checksum is damage too
        except (ValueError, AttributeError) as exc:
            raise RunError(f"{p}: damaged ({exc}); the run cannot be resumed, nor replaced (ooc cannot prove it "
                           "wrote it): remove the run yourself and train again") from None
        except OSError as exc:
            raise RunError(f"{p}: unreadable ({exc.strerror or exc})") from None
        if not getattr(self, "_config_is_ours", False):  # once: a run's identity never changes
            why = run_json_error(p, cfg, self._manifest())
            if why is not None:
                raise RunError(why)
            self._config_is_ours = True
        return cfg

    def write_config(self, config: dict) -> None:
        """Replace ``run.json`` (sealed with its checksum) atomically."""
        config = {**config, "state_format": STATE_FORMAT}
        atomic_write_bytes(os.path.join(self.path, "run.json"), seal_json(config))
        owned.record(self.path, ["run.json"])

    def record_outputs(self) -> None:
        """List the run's final outputs (model, metrics, plot) in its manifest, as written now."""
        names = [n for n in OUTPUT_FILES if os.path.isfile(os.path.join(self.path, n))]
        owned.record(self.path, names)

    def release_outputs(self) -> None:
        """Unlist the run's model files before they are written again (a crash meanwhile leaves files
        that prove themselves, :class:`ooc.runs.proof.RunProof`; the plot stays listed: :func:`ooc.owned.install`)."""
        owned.forget(self.path, [n for n in OUTPUT_FILES if n != "convergence.png"])

    @property
    def identity(self) -> str | None:
        """The run's identity: its manifest's random token (a whole copy, ``cp -r RUN COPY``, is the same run);
        None for a run without a manifest (made before manifests)."""
        if getattr(self, "_identity", False) is False:  # read once: a run's identity never changes
            self._identity = None if (m := self._manifest()) is None else m.get("token")
        return self._identity

    def trajectory(self) -> dict:
        """What every checkpoint records of its run (:func:`checkpoint_run_error`): the run's identity, its store's
        fingerprint and its :data:`TRAJECTORY_OPTIONS`, as ``run.json`` holds them now."""
        return {"run_id": self.identity, **trajectory_of(self.config)}

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
            save_sealed_npy(p, alpha)
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
        meta = {**meta, CHECKPOINT_RUN_KEY: self.trajectory()}  # read here: run.json as this state was reached
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
                # every file's size and CRC-32 too: the checkpoint proves its exact bytes (ooc.owned), not only
                # its arrays (read back from the page cache: a second pass over what was just written)
                on_disk = ["state.npz", *(f"{k}.npy" for k in files)]
                sealed = {"meta": meta, "arrays": sums, "files": files,
                          "duals": [[b, buf, crc] for b, (buf, crc) in duals],
                          "bytes": {n: owned.file_entry(os.path.join(tmp, n)) for n in on_disk}}
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
                self._remove_checkpoint(final)
                if os.path.exists(final):
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise RunError(f"{final}: is in the way of the new checkpoint and ooc cannot prove it wrote it; "
                                   "remove it yourself and 'ooc resume' the run")
            os.rename(tmp, final)
            fsync_dir(self.state)
            # read back what was just written (not the dual files: those are verified on resume)
            self._read_checkpoint(final, check_duals=False, keep=False)
            self._proven.add(name)
            atomic_write_bytes(os.path.join(self.path, "LATEST"), name.encode())
            fsync_dir(self.path)
        # older checkpoints are no longer needed (their dual buffers may already be overwritten); one that
        # does not verify stays (reported once)
        for old in os.listdir(self.state):
            if old.startswith("ckpt-") and old != name and old not in self._kept:
                self._remove_checkpoint(os.path.join(self.state, old))
                if os.path.exists(os.path.join(self.state, old)):
                    self._kept.add(old)

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
        """The newest checkpoint that verifies (arrays, meta), or None when there is none; clears what a killed
        process left.

        Every file of a candidate is verified before use: ``meta.json``'s checksum, the CRC-32 of every
        array, the paged dual files it refers to, and that the state is finite. One that fails is never
        deleted (ooc deletes only what it can prove it wrote): it is reported in one line
        (:class:`CheckpointWarning`) and left in place, and the previous one is used; when checkpoints
        exist and none verifies, :class:`RunError` names the newest damaged file and says what to do.
        Older checkpoints, and those numbered below ``min_seq`` (the trajectory a run continued on a
        larger store left behind, never resumed), are deleted once they verify too.
        """
        self.wait_checkpoint()
        self.remove_stale()
        found = self.checkpoints(min_seq)
        for older in self.checkpoints()[len(found):]:  # a previous trajectory's
            self._remove_checkpoint(older)
        got = self._newest_verified(found, keep=True, warn=True)
        if got is None:
            return None
        i, arrays, meta, duals = got
        self._dual_crc = duals
        self._proven.add(os.path.basename(found[i]))
        for older in found[i + 1:]:  # superseded by one that verified
            self._remove_checkpoint(older)
        return arrays, meta

    def check_resumable(self, min_seq: int = 0) -> None:
        """Refuse (:class:`RunError`, naming the damaged file) a run whose checkpoints exist and none of which
        verifies, before anything of the run is written (:meth:`load_checkpoint` reads it again to resume)."""
        self.wait_checkpoint()
        self._newest_verified(self.checkpoints(min_seq), keep=False, warn=False)

    def _newest_verified(self, found: list[str], keep: bool, warn: bool):
        """``(index, arrays, meta, dual checksums)`` of the first checkpoint of ``found`` that verifies; None when
        ``found`` is empty; :class:`RunError` naming the newest damaged one when none verifies."""
        first, damaged = None, []
        for i, ck in enumerate(found):
            try:
                return (i, *self._read_checkpoint(ck, check_duals=True, keep=keep, trajectory=True))
            except ForeignCheckpoint as exc:
                # not damage: someone put it here; continuing from an older state would hide that, and its number
                # would stay in the way of the run's next checkpoints
                raise RunError(f"{exc}; refusing to resume: ooc neither uses nor deletes it (remove it, or move "
                               "it out of the run, yourself)") from None
            except RunError as exc:
                first = first or str(exc)
                damaged.append(ck)
                if warn and i + 1 < len(found):
                    warnings.warn(f"{exc}; its checkpoint folder is left in place (remove {ck} yourself) and the "
                                  "previous checkpoint is used", CheckpointWarning, stacklevel=3)
        if first is not None:
            # a checkpoint is its whole folder: removing only the damaged file leaves a checkpoint missing it,
            # refused again; so the folders are named, every one (each is damaged: an older one would be next)
            raise RunError(f"{first}; no checkpoint of the run verifies, and ooc deletes no file it cannot prove it "
                           f"wrote: remove the checkpoint folder{'s' if len(damaged) > 1 else ''} "
                           f"{' '.join(damaged)} yourself, then 'ooc resume {self.path}' trains the run again from "
                           "the beginning")
        return None

    def checkpoint_error(self, ck: str) -> tuple[str | None, set]:
        """``(why, names)``: why the checkpoint directory ``ck`` is not ooc's (None: it is: its sealed ``meta.json``
        lists every file in it and they verify), and the names it lists."""
        names = set(os.listdir(ck))
        try:
            sealed = read_sealed_json(os.path.join(ck, "meta.json"))
            listed = {"meta.json", "state.npz", *(f"{k}.npy" for k in sealed.get("files") or {})}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"{os.path.join(ck, 'meta.json')}: does not verify ({fsutil.os_error_line(exc) or exc})", set()
        extra = sorted(names - listed)
        if extra:
            return f"{os.path.join(ck, extra[0])}: not a file of its checkpoint (its meta.json lists it not)", listed
        try:
            self._read_checkpoint(ck, check_duals=False, keep=False)
        except RunError as exc:
            return str(exc), listed
        return None, listed

    def _remove_checkpoint(self, ck: str) -> None:
        """Delete the checkpoint directory ``ck`` if it verifies as ooc's (else leave it, with a warning)."""
        name = os.path.basename(ck)
        if name not in self._proven:
            why = self.checkpoint_error(ck)[0]
            if why is not None:
                warnings.warn(f"{why}; its checkpoint folder is left in place (ooc deletes only what it can prove it "
                              f"wrote: remove {ck} yourself)", CheckpointWarning, stacklevel=3)
                return
        # renamed aside in one step, then deleted: a kill while deleting leaves a temporary of this process
        # (swept by the next command), never a checkpoint cut short that no longer proves itself ooc's
        aside = fsutil.temporary_sibling(ck, "old")
        os.rename(ck, aside)
        fsutil.remove_tree(aside)
        self._proven.discard(name)

    def _read_checkpoint(self, ck: str, check_duals: bool, keep: bool = True,
                         trajectory: bool = False) -> tuple[dict, dict, dict]:
        """``(arrays, meta, dual checksums)`` of checkpoint directory ``ck``, verified; else :class:`RunError`.

        A checkpoint of another run is refused (:class:`ForeignCheckpoint`); with ``trajectory`` (a state to
        continue from), one of another store or other options than ``run.json``'s now too
        (:func:`checkpoint_run_error`).

        ``keep=False`` (a checkpoint just written, read back): the arrays are streamed through one
        buffer (:func:`ooc.fsutil.npz_checksums`), checksummed and checked finite without being
        made, so the check holds no ``O(d)`` array; the arrays returned are then None.
        """
        try:
            sealed = read_sealed_json(os.path.join(ck, "meta.json"))
            sealed["meta"], sealed["arrays"], sealed["files"], sealed["bytes"]  # noqa: B018 - every field of the format, or damage
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RunError(f"{ck}: checkpoint unreadable ({exc})") from None
        meta, sums = dict(sealed["meta"]), sealed["arrays"]
        recorded = meta.pop(CHECKPOINT_RUN_KEY, None)
        expected = dict(sums or {}, **sealed["files"])
        extra = sorted(set(os.listdir(ck)) - {"meta.json", "state.npz", *(f"{k}.npy" for k in sealed["files"])})
        if extra:  # ooc writes a checkpoint's directory whole: anything else in it is not ooc's
            raise RunError(f"{os.path.join(ck, extra[0])}: not a file of checkpoint {os.path.basename(ck)} (its "
                           "meta.json lists it not)")
        for n, want in sealed["bytes"].items():
            try:
                got = owned.file_entry(os.path.join(ck, n))
            except OSError as exc:
                raise RunError(f"{os.path.join(ck, n)}: checkpoint unreadable ({exc.strerror or exc})") from None
            if got != want:
                raise RunError(f"{os.path.join(ck, n)}: failed its checksum (damaged, or changed since ooc wrote it)")

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
        # whole, so not damaged (that is reported as such, and an older checkpoint used): but is it this run's, and
        # this number's? (before the dual files, which another run's checkpoint does not match either)
        why = checkpoint_run_error(ck, recorded, self._manifest(), self.trajectory() if trajectory else None)
        if why is None and "seq" in meta and f"ckpt-{int(meta['seq']):06d}" != os.path.basename(ck):
            why = (f"{ck}: is checkpoint {int(meta['seq'])} of its run under another number (renamed, or copied "
                   "over: its state is not the one this number names)")
        if why is not None:
            raise ForeignCheckpoint(why)
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

    def check_not_in_use(self) -> None:
        """Raise :class:`RunError` when another live process holds the run's lock (writes nothing: a
        missing ``.lock``, or one that is not a plain file, is no one's)."""
        import fcntl

        p = os.path.join(self.path, ".lock")
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return
        try:
            if not os.path.isfile(p):
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                raise RunError(f"{self.path}: the run is in use by another process (training or resuming "
                               "it); wait for it to finish or stop it first") from None
        finally:
            os.close(fd)

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
        """The entries of ``history.jsonl`` (the first ``limit``), every line verified by its checksum.

        Every line ooc writes is whole (the file is replaced atomically) and sealed, so any line that
        does not verify, a last one without its newline included, is not ooc's: refused
        (:class:`RunError` naming the line), never skipped nor dropped.
        """
        try:
            with open(self.history_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise RunError(f"{self.history_path}: unreadable ({exc.strerror or exc})") from None
        why, out = history_lines(self.history_path, raw, run=self._manifest())
        if why is not None:
            raise RunError(why)
        return out if limit is None else out[:limit]

    def _manifest(self) -> dict | None:
        try:
            return owned.read_manifest(self.path)
        except owned.NotOurs as exc:
            raise RunError(str(exc)) from None

    def _history_line(self, entry: dict, number: int, before: bytes) -> bytes:
        """``entry`` as the sealed line ooc writes as line ``number`` after the line ``before`` (its bytes, without
        the newline; empty for the first), tied to this run by its identity and to its place by the number and
        the CRC-32 of ``before`` (:func:`history_lines`)."""
        rid = self.identity
        tied = {**entry, HISTORY_LINE_KEY: number, HISTORY_PREV_KEY: zlib.crc32(before)}
        return seal_json({**tied, HISTORY_RUN_KEY: rid} if rid else tied, indent=None) + b"\n"

    def _history_bytes(self, entries: list[dict], raw: bytes = b"") -> bytes:
        """``entries`` as the lines that follow ``raw`` (whole lines ooc wrote), each tied to its place."""
        lines = raw.split(b"\n")[:-1]
        before, out = lines[-1] if lines else b"", []
        for i, e in enumerate(entries, len(lines) + 1):
            line = self._history_line(e, i, before)
            out.append(line)
            before = line[:-1]
        return b"".join(out)

    def append_history(self, entry: dict) -> None:
        """Add ``entry`` as a sealed line; the file is replaced whole (a crash never leaves a cut line,
        which would be indistinguishable from a line ooc did not write)."""
        with disk_full_is_run_error(self.path, self.history_path):
            try:
                with open(self.history_path, "rb") as f:
                    raw = f.read()
            except FileNotFoundError:
                raw = b""
            atomic_write_bytes(self.history_path, raw + self._history_bytes([entry], raw), fsync=False)

    def truncate_history(self, n_lines: int) -> None:
        """Keep the first ``n_lines`` entries (those the checkpoint being resumed knew); every line, those
        dropped included, must verify first (:meth:`history`)."""
        kept = self.history()[:n_lines]
        atomic_write_bytes(self.history_path, self._history_bytes(kept), fsync=False)

    @property
    def model_dir(self) -> str:
        return os.path.join(self.path, "model")

    # -- the final model: appears whole, with its certificate, or not at all -------------------------------
    @property
    def model_out(self) -> str:
        """Where the run's final outputs are written now: the stage of :meth:`stage_model`, else ``model/``."""
        return self._stage.path if self._stage is not None else self.model_dir

    def stage_model(self) -> str:
        """Start a new ``model/`` (coefficients, final duals, metrics with the certificate) in a temporary
        directory beside it; :meth:`commit_model` puts it in place whole, :meth:`drop_stage` abandons it.
        So ``model/`` holds only the complete output of a finished run: a run killed while it trains or
        writes its model leaves the previous one (or none), never a model without its certificate."""
        self.drop_stage()
        self._stage = fsutil.Temporary(self.model_dir)
        os.makedirs(self._stage.path)
        return self._stage.path

    def commit_model(self) -> None:
        """Swap the staged model in place of ``model/`` in one step (:func:`ooc.fsutil.swap_into_place`), then
        delete the one it replaced (verified ooc's when the run was opened: :meth:`check_owned`)."""
        stage = self._stage
        fsync_dir(stage.path)
        old = fsutil.swap_into_place(stage.path, self.model_dir)
        if old is not None:
            fsutil.remove_tree(old)
        self.drop_stage()

    def drop_stage(self) -> None:
        """Delete a staged model not committed (a run that failed or was stopped keeps its previous model)."""
        if self._stage is not None:
            self._stage.remove()
            self._stage.release()
            self._stage = None

    def withdraw_model(self) -> None:
        """Take ``model/`` out of the run in one step (renamed to a temporary, then deleted): the run no longer
        holds a finished model (continued on new rows)."""
        if os.path.isdir(self.model_dir):
            tmp = fsutil.temporary_sibling(self.model_dir, "old")
            os.rename(self.model_dir, tmp)
            fsutil.remove_tree(tmp)



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
