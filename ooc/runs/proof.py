"""Proves a run directory's entries to :mod:`ooc.owned` (what ooc may replace or delete) and tells a run
directory from others (:func:`is_run_dir`). Imported by the package (``ooc/runs/__init__.py``), so the run's
verifier is registered whenever runs are used."""


from __future__ import annotations

import contextlib
import os

import numpy as np

from .. import fsutil, owned
from ..fsutil import (
    array_checksum,
    read_sealed_json,
    seal_json,
)
from .records import (
    certificate_run_error,
    history_lines,
    run_json_error,
    scratch_vector_error,
    sealed_npy_error,
)
from .rundir import RunDir


class RunProof:
    """Proves the entries of generated names in the run directory ``path`` (:func:`ooc.owned.register_verifier`).

    What proves each: ``run.json``, ``model/model.json`` and ``model/metrics.json`` their seal; ``history.jsonl``
    every line's checksum; ``LATEST`` naming a checkpoint; ``.lock`` being empty (ooc never writes into it);
    a checkpoint directory its sealed ``meta.json``, which lists its files (no other name may be in it) and,
    unless ``contents`` is false (resume verifies the checkpoint it reads), their arrays' checksums; a dual or
    parent file its trailer (:func:`save_sealed_npy`) or, written by an older ooc, the CRC-32 a checkpoint, the
    model's metrics or ``run.json`` record for it; ``model/coef.npy`` and ``model/duals.npy`` the CRC-32 their
    model and metrics record, and ``model/model.json`` being certified by ``model/metrics.json``, which records
    the run's identity (:func:`certificate_run_error`); ``state/primal/*.npy`` (scratch vectors, rewritten in
    place, recreated by every start) being float arrays of the run's rows ending with the run's identity
    (:func:`open_scratch_vector`; form only in a run of the previous format); every history line records
    the run's identity too (:func:`history_lines`). ``convergence.png`` is ooc's only when listed
    (:func:`ooc.owned.install`).
    """

    def __init__(self, path: str, manifest: dict, contents: bool):
        self.path, self.contents, self.manifest = path, contents, manifest
        self._ckpt: dict[str, tuple[str | None, set]] = {}
        self._refs: dict[str, int] | None = None

    def __call__(self, rel: str, full: str, is_dir: bool) -> str | None:
        parts = rel.split(os.sep)
        in_ckpt = len(parts) >= 2 and parts[0] == "state" and parts[1].startswith("ckpt-")
        if in_ckpt and not self.contents:
            return None  # resume: verified whole when read, never deleted when it does not (load_checkpoint)
        if is_dir:
            if in_ckpt:
                return self._checkpoint(full)[0]
            return None  # a container: what it holds is checked entry by entry
        if in_ckpt:
            why, names = self._checkpoint(os.path.dirname(full))
            return why if why is not None or parts[2] in names else f"{full}: not a file of its checkpoint"
        name = parts[-1]
        if rel == os.path.join("model", "metrics.json"):
            return self._sealed(full) or certificate_run_error(self.path, full, read_sealed_json(full), self.manifest)
        if rel == "run.json":
            return self._sealed(full) or run_json_error(full, read_sealed_json(full), self.manifest)
        if rel == os.path.join("model", "model.json"):
            return self._sealed(full) or self._certified(full)
        if rel == "history.jsonl":
            try:
                with open(full, "rb") as f:
                    raw = f.read()
            except OSError as exc:
                return f"{full}: unreadable ({exc.strerror or exc})"
            return history_lines(full, raw, run=self.manifest)[0]
        if rel == "LATEST":
            with open(full, "rb") as f:
                text = f.read(64)
            ok = text.startswith(b"ckpt-") and text[5:].strip().isdigit()
            return None if ok else f"{full}: does not name a checkpoint (not a file ooc wrote)"
        if rel == ".lock":
            return None if os.path.getsize(full) == 0 else f"{full}: is not empty (ooc never writes into its lock)"
        if parts[0] == "model":
            return self._model_file(name, full)
        if parts[:2] == ["state", "primal"]:
            return self._scratch(full)
        if parts[:2] == ["state", "duals"] or (len(parts) == 3 and parts[1].startswith("parent-")):
            if sealed_npy_error(full) is None:
                return None
            crc = self._recorded().get(rel)
            if crc is not None:
                try:
                    if array_checksum(np.load(full, allow_pickle=False)) == crc:
                        return None
                except Exception:  # noqa: BLE001 - unreadable: not proven
                    pass
            return sealed_npy_error(full)
        return owned._unproven(rel, full, is_dir)

    # -- the proofs ------------------------------------------------------------------------------
    @staticmethod
    def _sealed(full: str) -> str | None:
        """None when ``full`` is, byte for byte, what :func:`ooc.fsutil.seal_json` writes for what it holds."""
        try:
            body = read_sealed_json(full)
            with open(full, "rb") as f:
                raw = f.read()
        except (OSError, ValueError) as exc:
            return f"{full}: does not verify ({fsutil.os_error_line(exc) or exc})"
        if raw not in (seal_json(body), seal_json(body, indent=None)):
            return f"{full}: changed since ooc wrote it (its bytes are not those ooc writes for its content)"
        return None

    def _checkpoint(self, ck: str) -> tuple[str | None, set]:
        """``(why, names)``: why the checkpoint directory ``ck`` is not ooc's (None: it is), and its files."""
        if ck not in self._ckpt:
            self._ckpt[ck] = RunDir(self.path).checkpoint_error(ck)
        return self._ckpt[ck]

    def _recorded(self) -> dict[str, int]:
        """``relative path -> CRC-32`` of the dual and parent files that the run's own records list (its
        checkpoints', its final model's and its ``run.json``'s)."""
        if self._refs is not None:
            return self._refs
        refs: dict[str, int] = {}
        rd = RunDir(self.path)
        for ck in rd.checkpoints():
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                for b, buf, crc in read_sealed_json(os.path.join(ck, "meta.json")).get("duals", []):
                    refs[os.path.relpath(rd.dual_path(int(buf), int(b)), self.path)] = int(crc)
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            m = read_sealed_json(os.path.join(rd.model_dir, "metrics.json"))
            for b, crc in enumerate(m.get("dual_crcs") or []):
                refs[os.path.relpath(rd.dual_path(int(m["dual_buffer"]), b), self.path)] = int(crc)
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            for g in read_sealed_json(os.path.join(self.path, "run.json")).get("generations") or []:
                for i, crc in enumerate(g["parent_crc"]):
                    refs[os.path.join("state", f"parent-{g['generation']}", f"b{i:06d}.npy")] = int(crc)
        self._refs = refs
        return refs

    def _certified(self, full: str) -> str | None:
        """``model/model.json`` is ooc's when the run's certificate (its ``metrics.json``) certifies its
        coefficients."""
        try:
            want = read_sealed_json(os.path.join(os.path.dirname(full), "metrics.json")).get("coef_crc")
            got = read_sealed_json(full).get("coef_crc")
        except (OSError, ValueError) as exc:
            return f"{full}: nothing proves it is this run's model ({fsutil.os_error_line(exc) or exc})"
        return None if want is not None and want == got else f"{full}: not the model its run's metrics.json certifies"

    def _model_file(self, name: str, full: str) -> str | None:
        d = os.path.dirname(full)
        what = {"coef.npy": ("model.json", "coef_crc"), "duals.npy": ("metrics.json", "duals_crc")}.get(name)
        if what is None:
            return owned._unproven(name, full, False)
        try:
            crc = read_sealed_json(os.path.join(d, what[0])).get(what[1])
        except (OSError, ValueError) as exc:
            return f"{full}: nothing proves ooc wrote it ({fsutil.os_error_line(exc) or exc})"
        try:
            fsutil.read_npy(full, crc) if crc is not None else None
        except ValueError as exc:
            return str(exc)
        return None if crc is not None else f"{full}: nothing proves ooc wrote it (no checksum in {what[0]})"

    def _scratch(self, full: str) -> str | None:
        try:
            a = np.load(full, mmap_mode="r", allow_pickle=False)
            n = int(read_sealed_json(os.path.join(self.path, "run.json"), required=False)["n_rows"])
        except Exception as exc:  # noqa: BLE001 - unreadable: not proven
            return f"{full}: nothing proves ooc wrote it ({type(exc).__name__})"
        if a.dtype != np.float64 or a.shape[-1:] != (n,):
            return f"{full}: not a vector of the run's {n} rows (not a file ooc wrote)"
        end = a.offset + a.nbytes
        del a
        return scratch_vector_error(full, end, self.manifest.get("token"))


owned.register_verifier("run", RunProof)
