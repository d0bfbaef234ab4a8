"""This process's cgroups: the control files of its cgroup and of every ancestor.

A limit set on a parent cgroup binds its children too, so a reader of a limit takes the tightest
over the path. Both hierarchies are read: cgroup v2 (one unified tree, ``0::/path`` in
``/proc/self/cgroup``) and v1 (one tree per controller, mounted at ``root/<controller dir>``).
:mod:`ooc._memlimit` (memory limits) and :mod:`ooc._cpu` (CPU quota) read theirs here.
"""

from __future__ import annotations

import os
from typing import Iterator

__all__ = ["read_text", "control_files"]


def read_text(path: str) -> str | None:
    """The stripped contents of a small file, or None when it cannot be read."""
    try:
        with open(path) as f:
            return f.read().strip()
    except (OSError, ValueError):
        return None


def control_files(controller: str, v2_name: str, v1_dirs: tuple[str, ...], v1_names: tuple[str, ...],
                  proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> Iterator[tuple]:
    """Yield, for this process's cgroup and each ancestor up to the root, the contents of its control files.

    v2: ``(root/path/v2_name,)`` (one text or None); v1, where ``controller`` is among a hierarchy's
    controllers: the texts of ``v1_names`` under the first of ``v1_dirs`` (relative to ``root``) that
    exists, else under ``root`` itself. Nothing is yielded when ``/proc/self/cgroup`` is unreadable.
    """
    text = read_text(proc_cgroup)
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            base, names = root, (v2_name,)
        elif controller in controllers.split(","):
            base = next((os.path.join(root, d) for d in v1_dirs if os.path.isdir(os.path.join(root, d))), root)
            names = v1_names
        else:
            continue
        rel = path.strip("/")
        while True:
            yield tuple(read_text(os.path.join(base, rel, name)) for name in names)
            if not rel:
                break
            rel = os.path.dirname(rel)
