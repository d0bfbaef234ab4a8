"""Durable file-system operations shared by the store writer and the run directory."""

from __future__ import annotations

import os


def fsync_dir(path: str) -> None:
    """fsync a directory so the entries renamed into it survive a power loss (best effort)."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
