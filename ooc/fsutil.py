"""Durable file-system operations shared by the store writer and the run directory."""

from __future__ import annotations

import contextlib
import errno
import os

import numpy as np

#: errno values that mean "no room left to write": a full file system or an exhausted quota.
_DISK_FULL_ERRNOS = frozenset(e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if e is not None)


def fsync_path(path: str) -> None:
    """fsync a file or directory by path; raises ``OSError``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """fsync a directory so the entries renamed into it survive a power loss (best effort)."""
    try:
        fsync_path(path)
    except OSError:
        pass


def disk_full_error(exc: BaseException) -> OSError | None:
    """The ENOSPC/EDQUOT error behind ``exc`` (itself or a cause in its chain), or None.

    Libraries wrap the OS error (zarr's codec pipeline, h5py's HDF5 error stack, which
    keeps only the text), so the chain and the message are both searched.
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and (exc.errno in _DISK_FULL_ERRNOS
                                         or "No space left on device" in str(exc)
                                         or "Disk quota exceeded" in str(exc)):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def write_all(f, buffer) -> None:
    """Write every byte of ``buffer`` to the binary file ``f`` or raise ``OSError``.

    ``ndarray.tofile`` goes through C stdio and can lose a short write (a full disk)
    without an error; a file object's ``write`` raises, and the count is checked too
    because a raw (unbuffered) file may legally write less than asked.
    """
    view = memoryview(buffer).cast("B")
    done = 0
    while done < len(view):
        n = f.write(view[done:])
        if not n:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), getattr(f, "name", None))
        done += n


@contextlib.contextmanager
def temporary_file(path: str, suffix: str = ""):
    """Open ``path``'s temporary sibling for writing; it replaces ``path`` only if all went well.

    On any failure (a full disk mid-write) the temporary is deleted and ``path`` is untouched.
    """
    tmp = f"{path}.tmp-{os.getpid()}{suffix}"
    try:
        with open(tmp, "wb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str, payload: bytes, fsync: bool = True) -> None:
    """Write ``payload`` to ``path`` via a temporary file and a rename."""
    with temporary_file(path) as f:
        f.write(payload)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def atomic_save_npy(path: str, arr: np.ndarray, fsync: bool = False) -> None:
    """``np.save`` through a temporary file and a rename (a reader never sees half an array)."""
    with temporary_file(path, ".npy") as f:
        np.save(f, arr, allow_pickle=False)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
