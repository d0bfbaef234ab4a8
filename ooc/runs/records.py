"""What a run's files record of it, and the rules that prove a file is the run's own.

The run directory's names (:data:`RUN_ENTRIES`, :data:`RUN_GENERATED`), its one state format
(:data:`STATE_FORMAT`), the identity and trajectory its checkpoints, certificates and history lines record
(:func:`checkpoint_run_error`, :func:`certificate_run_error`, :func:`history_lines`), and the trailers that make
its array files prove themselves (:func:`save_sealed_npy`, :func:`open_scratch_vector`). Pure rules on paths,
bytes and records: :mod:`ooc.runs.rundir` writes and reads the run with them, :mod:`ooc.runs.proof` proves a
run's entries to :mod:`ooc.owned` with them.
"""


from __future__ import annotations

import contextlib
import json
import os
import zlib

import numpy as np

from .. import fsutil, owned
from ..fsutil import (
    read_sealed_json,
    seal_json,
)

#: The one format of a run's saved state; a run of any other is refused with one line naming its version
#: (:meth:`RunDir.config`): a new ``ooc train`` is needed (no compatibility branches). Format 3: ``run.json`` and
#: every checkpoint's ``meta.json`` sealed with their checksum (the metadata holds the CRC-32 of every array of
#: its ``state.npz``, of its side files and of the paged dual files it refers to); every checkpoint, certificate
#: and history line records the run's identity (its manifest's token), checkpoints and certificates its
#: trajectory (:func:`checkpoint_run_error`, :func:`certificate_run_error`), history lines their place in the
#: file (:func:`history_lines`); scratch vectors end with the run's identity (:func:`open_scratch_vector`).
#: Formats 1 and 2 were the development versions before those records. Bumped whenever what the state means
#: changes, the options ``run.json`` records included (every option is recorded: :meth:`ooc.TrainConfig.from_run_config`).
STATE_FORMAT = 3
#: The ``run.json`` entries that define a run's trajectory (its iterates, beside the store's content): every
#: checkpoint records them (:meth:`RunDir.trajectory`); one recording other values than the run's is refused.
TRAJECTORY_OPTIONS = ("loss", "gamma", "multiclass", "l2", "l1", "bias", "fit_intercept", "class_weight", "seed",
                      "solver_used", "sampling")


#: What ooc puts at the top of a run directory (temporaries aside).
RUN_ENTRIES = frozenset({"run.json", "history.jsonl", "LATEST", "state", "model", "convergence.png", ".lock"})
#: The files of a run's ``model/``.
MODEL_FILES = ("coef.npy", "model.json", "metrics.json", "duals.npy")
#: The final outputs of a run, listed in its manifest once written.
OUTPUT_FILES = ("convergence.png", *(os.path.join("model", n) for n in MODEL_FILES))
#: The names a run directory's manifest lets ooc generate while it trains (one segment per ``/``). A name
#: proves nothing: a file of one of them is ooc's only when it proves its content (:class:`ooc.runs.proof.RunProof`).
RUN_GENERATED = (
    "run.json", "history.jsonl", "LATEST", ".lock", "convergence.png", "state", "model",
    *(f"model/{n}" for n in MODEL_FILES),
    "state/duals", "state/duals/[0-9]", "state/duals/[0-9]/b[0-9][0-9][0-9][0-9][0-9][0-9].npy",
    "state/ckpt-[0-9]*", "state/ckpt-[0-9]*/state.npz", "state/ckpt-[0-9]*/meta.json", "state/ckpt-[0-9]*/*.npy",
    "state/parent-[0-9]*", "state/parent-[0-9]*/b[0-9][0-9][0-9][0-9][0-9][0-9].npy",
    # rcd-primal's memory-mapped O(n) vectors (margins, labels, weights) when --memory pages them
    "state/primal", "state/primal/[zyc].npy",
)

#: What ends every array file ooc writes into a run's dual buffers: this tag and the CRC-32 (4 bytes, little
#: endian) of every byte before it. ``np.load`` reads the array and ignores it; the file proves itself.
NPY_TRAILER = b"ooc-crc32"
_TRAILER_LEN = len(NPY_TRAILER) + 4


def save_sealed_npy(path: str, a: np.ndarray, fsync: bool = False) -> None:
    """``np.save`` ``a`` to ``path`` atomically, followed by :data:`NPY_TRAILER` and the CRC-32 of the file."""
    with fsutil.temporary_file(path, ".npy") as f:
        # np.save into a real file writes the array's memory as it is; into a Python object it would copy
        # it in pieces of up to 16 MiB (not charged to --memory): the CRC is read back from the file
        np.save(f, a, allow_pickle=False)
        f.flush()
        with open(f.name, "rb") as back:  # (f is write-only)
            crc, _ = fsutil.file_crc(back.fileno(), f.tell())
        f.write(NPY_TRAILER + crc.to_bytes(4, "little"))
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def sealed_npy_error(path: str) -> str | None:
    """Why the file ``path`` is not one :func:`save_sealed_npy` wrote, whole (one line), or None."""
    try:
        size = os.path.getsize(path)
        if size < _TRAILER_LEN:
            return f"{path}: has no ooc checksum (not a file ooc wrote, or damaged)"
        with open(path, "rb") as f:
            crc, _ = fsutil.file_crc(f.fileno(), size - _TRAILER_LEN)
            tail = os.pread(f.fileno(), _TRAILER_LEN, size - _TRAILER_LEN)
    except OSError as exc:
        return f"{path}: unreadable ({exc.strerror or exc})"
    if tail[:len(NPY_TRAILER)] != NPY_TRAILER:
        return f"{path}: has no ooc checksum (not a file ooc wrote, or damaged)"
    if int.from_bytes(tail[len(NPY_TRAILER):], "little") != crc:
        return f"{path}: failed its checksum (damaged, or not a file ooc wrote)"
    return None


#: What follows the data of a run's memory-mapped scratch vector (``state/primal/*.npy``): this tag and the
#: run's identity (its manifest's token). ``np.load`` and ``open_memmap`` read the array and ignore it.
SCRATCH_TRAILER = b"ooc-scratch-of-run:"


def open_scratch_vector(path: str, shape, run_id: str) -> np.ndarray:
    """A new float vector memory-mapped at ``path`` (read-write), the file ending with :data:`SCRATCH_TRAILER`
    and ``run_id``: it proves it is this run's scratch (:func:`scratch_vector_error`).

    Made as a new file beside ``path`` and renamed onto it: a file at ``path`` is never written in place (a
    hard link to it elsewhere, a user's backup or a ``cp -al`` snapshot of the run, keeps its bytes). Its
    blocks are allocated when it is made (``posix_fallocate``): a memory map of a sparse file on a full disk
    dies of SIGBUS where its pages are first written; a full disk is an ``OSError`` here, named by the caller.
    """
    tmp = fsutil.temporary_sibling(path, "scratch")
    try:
        a = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float64, shape=shape)
        end = a.offset + a.nbytes
        del a
        with open(tmp, "r+b") as f:
            f.seek(end)
            f.write(SCRATCH_TRAILER + run_id.encode())
            f.truncate()
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(f.fileno(), 0, end + len(SCRATCH_TRAILER) + len(run_id.encode()))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return np.lib.format.open_memmap(path, mode="r+")


def scratch_vector_error(path: str, end: int, run_id: str | None) -> str | None:
    """Why ``path``, a float array whose data end at byte ``end``, is not a scratch vector of the run of
    identity ``run_id`` (one line), or None."""
    want = SCRATCH_TRAILER + (run_id or "").encode()
    try:
        with open(path, "rb") as f:
            tail = os.pread(f.fileno(), len(want) + 1, end)
    except OSError as exc:
        return f"{path}: unreadable ({exc.strerror or exc})"
    if run_id is None or tail != want:
        return f"{path}: does not carry this run's identity (not a scratch vector ooc wrote for this run)"
    return None


def state_format_error(path: str, fmt) -> str:
    """The line refusing the run directory ``path`` whose ``run.json`` records state format ``fmt`` (not
    :data:`STATE_FORMAT`): which version made it, and that a new ``ooc train`` is needed."""
    if isinstance(fmt, int) and not isinstance(fmt, bool) and fmt < STATE_FORMAT:
        made = f"an earlier version of ooc (run state format {fmt})"
    elif isinstance(fmt, int) and not isinstance(fmt, bool):
        made = f"a later version of ooc (run state format {fmt})"
    else:
        made = f"no version of ooc this one knows (run state format {fmt!r})"
    return (f"{path}: made by {made}; this ooc reads format {STATE_FORMAT} only, so the run cannot be resumed or "
            "continued: train it again with 'ooc train ... --overwrite'")


def run_json_error(path: str, cfg: dict, manifest: dict | None) -> str | None:
    """Why ``cfg``, the ``run.json`` read at ``path``, is not its run's own (one line naming it), or None: a
    link, or a ``run_id`` that is not the run's identity (its manifest's token: a ``run.json`` copied from
    another run). A run without a manifest is :mod:`ooc.owned`'s to refuse."""
    if os.path.islink(path):
        return f"{path}: is a symbolic link (a run's run.json is its own file, never a link to another's)"
    rid = cfg.get("run_id")
    if manifest is None:
        return None
    if rid != manifest.get("token"):
        return f"{path}: is the run.json of another run (its run identity is not this run's: copied from another run?)"
    return None


def model_link_error(run: str) -> str | None:
    """Why the model of the run directory ``run`` is not its own files: ``model/`` or one of its files is a
    symbolic link (ooc makes none; one line naming it), or None."""
    d = os.path.join(run, "model")
    for p in (d, *(os.path.join(d, n) for n in MODEL_FILES)):
        if os.path.islink(p):
            return f"{p}: is a symbolic link (a run's model is its own files, never a link to another's)"
    return None


def certificate_run_error(run: str, path: str, metrics: dict, manifest: dict | None | bool = False,
                          current: bool = False) -> str | None:
    """Why ``metrics``, the certificate read at ``path`` (``run/model/metrics.json``), is not the run ``run``'s own
    (one line naming ``path``), or None.

    A certificate records its run's identity (``run_id``: the run's manifest's token, :attr:`RunDir.identity`),
    which must be ``run``'s; one without it only where there is no run manifest to match (a model directory on
    its own). ``manifest``: ``run``'s, when the caller has it read already.

    With ``current`` (a model about to be used), the trajectory it records (``trajectory``,
    :func:`trajectory_of`) must be the one ``run``'s ``run.json`` holds now: a model of the same run continued on
    another store or with other options (a copy of it) is not this run's model; one recording none is not.
    """
    if manifest is False:
        try:
            manifest = owned.read_manifest(run)
        except owned.NotOurs as exc:
            return str(exc)
    rid = metrics.get("run_id")
    if rid is None:
        if manifest is not None:
            return (f"{path}: records no run identity, so it is not this run's certificate (copied from another "
                    "run?)")
        return None
    if manifest is None:
        return (f"{path}: records a run identity, but its run has no {owned.MANIFEST} to match it with (a model "
                "copied from another run, or the run's manifest removed)")
    if rid != manifest.get("token"):
        return (f"{path}: is the certificate of another run (its run identity is not {run}'s: a model copied "
                "from another run?)")
    if not current:
        return None
    recorded = metrics.get(CERTIFICATE_TRAJECTORY_KEY)
    if not isinstance(recorded, dict):
        return f"{path}: records no trajectory, so it is not this run's certificate (copied from another run?)"
    try:
        cfg = read_sealed_json(os.path.join(run, "run.json"), required=False)
    except (OSError, ValueError) as exc:
        return f"{os.path.join(run, 'run.json')}: does not verify ({fsutil.os_error_line(exc) or exc})"
    return trajectory_error(path, "the certificate", recorded, generation_trajectory(cfg, metrics.get("generation")))


def generation_trajectory(cfg: dict, generation) -> dict:
    """The trajectory (:func:`trajectory_of`) of generation ``generation`` of the run whose ``run.json`` is
    ``cfg``: its current one, or for an earlier generation (a converged model kept while a continuation on a
    grown store has not converged, ``ooc.train.continue_on``) the one the next generation's record holds
    (``parent_trajectory``); the current one where none is recorded (nothing then matches an earlier store)."""
    gens = cfg.get("generations") or []
    g = int(generation or 0)
    if 0 <= g < len(gens) and isinstance(gens[g].get("parent_trajectory"), dict):
        return gens[g]["parent_trajectory"]
    return trajectory_of(cfg)


#: The key of a certificate (``model/metrics.json``) that holds its run's trajectory (:func:`trajectory_of`).
CERTIFICATE_TRAJECTORY_KEY = "trajectory"


#: The key of a checkpoint's metadata that holds what it records of its run (:meth:`RunDir.trajectory`).
CHECKPOINT_RUN_KEY = "run"


def checkpoint_run_error(ck: str, recorded: dict | None, manifest: dict | None,
                         current: dict | None = None) -> str | None:
    """Why the checkpoint directory ``ck``, whose metadata records ``recorded`` of its run
    (:meth:`RunDir.trajectory`), is not of its run (one line naming it), or None.

    Its ``run_id`` must be the run's identity (``manifest``'s token). With ``current`` (the run's
    trajectory now), its store fingerprint and trajectory options must be those too: a state of the same run
    on another store (a copy continued elsewhere) or of other options is not one to continue from.
    """
    if not isinstance(recorded, dict) or recorded.get("run_id") is None:
        return f"{ck}: records no run identity, so it is not a checkpoint of this run (copied from another run?)"
    if manifest is None or recorded["run_id"] != manifest.get("token"):
        return f"{ck}: is a checkpoint of another run (its run identity is not this run's: copied from another run?)"
    return None if current is None else trajectory_error(ck, "a checkpoint", recorded, current)


def trajectory_of(cfg: dict) -> dict:
    """What defines the trajectory of the run whose ``run.json`` is ``cfg`` (beside its identity): its store's
    fingerprint and its :data:`TRAJECTORY_OPTIONS`. Checkpoints and certificates record it."""
    return {"store_fingerprint": cfg.get("store_fingerprint"),
            "options": {k: cfg.get(k) for k in TRAJECTORY_OPTIONS}}


def trajectory_error(path: str, what: str, recorded: dict, current: dict) -> str | None:
    """Why ``path``, ``what`` recording the trajectory ``recorded`` (:func:`trajectory_of`), is not of the
    trajectory ``current`` (one line naming it and the first difference), or None."""
    if recorded.get("store_fingerprint") != current["store_fingerprint"]:
        return (f"{path}: is {what} of another store (fingerprint {recorded.get('store_fingerprint')}; the run's store "
                f"is {current['store_fingerprint']})")
    theirs = recorded.get("options") or {}
    for k, v in current["options"].items():
        if theirs.get(k) != v:
            return f"{path}: is {what} of other options ({k} {theirs.get(k)!r}; the run's is {v!r})"
    return None


#: The key of a history line that holds its run's identity (removed when the line is read back).
HISTORY_RUN_KEY = "run_id"
#: The keys of a history line that hold its place (removed when read back): its number in the file (from 1) and
#: the CRC-32 of the line before it (its bytes without the newline; 0 for the first line).
HISTORY_LINE_KEY, HISTORY_PREV_KEY = "line", "prev_crc"


def history_lines(path: str, raw: bytes, run: dict | None = None) -> tuple[str | None, list[dict]]:
    """``(why, entries)``: the verified entries of the history file ``path`` holding ``raw``, or why one of its
    lines is not ooc's (one line naming it). Every line is sealed with its checksum. ``run``: the run's
    manifest: every line records this run's identity (:data:`HISTORY_RUN_KEY`, its token) and its place
    (:data:`HISTORY_LINE_KEY`, :data:`HISTORY_PREV_KEY`): it must be at that line number, after the line whose
    CRC-32 it records, so lines swapped, repeated or removed (but the last ones) are refused."""
    rid = None if run is None else run.get("token")
    lines = raw.split(b"\n")
    tail = lines.pop()  # empty unless the last line has no newline: ooc writes whole lines only
    then = "(not a line ooc wrote, or damaged: ooc keeps it; remove it, or move the file out of the run, yourself)"
    out = []
    for i, line in enumerate(lines, 1):
        try:
            entry = fsutil.unseal_json_line(line, required=True)
            if line != seal_json(entry, indent=None):  # the very bytes ooc writes for it
                raise ValueError("changed since ooc wrote it")
        except ValueError as exc:
            return f"{path}: line {i}: {exc or 'empty'} {then}", []
        mine = entry.pop(HISTORY_RUN_KEY, None)
        if mine is None or mine != rid:
            return f"{path}: line {i}: is not a line of this run (another run's history?) {then}", []
        number, prev = entry.pop(HISTORY_LINE_KEY, None), entry.pop(HISTORY_PREV_KEY, None)
        if number is None:
            return f"{path}: line {i}: records no place in the history {then}", []
        if number != i:
            return f"{path}: line {i}: was written as line {number} (lines reordered, repeated or removed) {then}", []
        if prev != zlib.crc32(lines[i - 2] if i > 1 else b""):
            return f"{path}: line {i}: does not follow the line before it (lines swapped or replaced) {then}", []
        out.append(entry)
    if tail:
        return f"{path}: line {len(lines) + 1}: has no newline {then}", []
    return None, out


def is_run_dir(path: str) -> bool:
    """Whether ``path`` is a run directory ooc made, even a damaged one.

    Its ``run.json`` has ooc's ``state_format``; or, when ``run.json`` is missing or unreadable (a
    damaged run that ``--overwrite`` must be able to replace, or that ``ooc info`` names), its intact
    manifest says it is a run, or it holds ooc's ``state/duals`` and nothing but what ooc puts in a run
    directory.
    """
    try:
        with open(os.path.join(path, "run.json")) as f:
            cfg = json.load(f)
        if isinstance(cfg, dict) and "state_format" in cfg:
            return True
    except (OSError, ValueError, UnicodeDecodeError):
        pass
    with contextlib.suppress(owned.NotOurs, OSError):
        m = owned.read_manifest(path)
        if m is not None and m.get("kind") == "run":  # its run.json damaged: still a run (to name the damage)
            return True
    try:
        names = os.listdir(path)
    except OSError:
        return False
    ours = all(n in RUN_ENTRIES or n == owned.MANIFEST or fsutil.is_temporary_name(n) for n in names)
    return ours and os.path.isdir(os.path.join(path, "state", "duals"))
