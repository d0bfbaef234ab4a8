"""Sizes and numbers as a user writes them: the one rule for reading them and for printing them.

* :func:`plain`: a number's text is written plainly (ASCII, nothing around it, no ``_``). Python's
  ``int`` and ``float`` read ``' 3'``, ``'٣'`` (Arabic-Indic) and ``'３'`` (full width) as 3 and
  ``'1e-3_0'`` as 1e-30; the docs say digits, and the input readers refuse those in data, so options,
  sizes and class weights do too rather than read a number the user may not have meant.
* :func:`parse_bytes` / :func:`format_bytes`: ``'512MiB'``, ``'2GB'``, ``'2e9'`` <-> bytes; what one prints
  the other reads back (a figure named as the smallest that works is rounded up).
* :func:`parse_memory`: a memory option (``--memory``): bytes, or ``None`` for :data:`AUTO_MEMORY`.
"""

from __future__ import annotations

import math
import numbers

#: A memory option's value for "what this process may use" (:mod:`ooc._memlimit`).
AUTO_MEMORY = "auto"

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1000, "KIB": 1 << 10, "M": 1 << 20, "MB": 10**6,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 10**9, "GIB": 1 << 30, "T": 1 << 40, "TB": 10**12,
          "TIB": 1 << 40}


def plain(text: str) -> bool:
    """Whether a number's text is written plainly: ASCII, no space around it, not empty, no ``_``."""
    return text.isascii() and text == text.strip() and text != "" and "_" not in text


def parse_bytes(text: str | int | None, default: int = 1 << 30) -> int:
    """``'1GiB'``, ``'512M'``, ``'2e9'`` or an int -> bytes (``None``: ``default``).

    Units are case-blind and may be spaced from the number (``'512 MiB'``, as :func:`format_bytes` prints);
    ``K``/``M``/``G``/``T`` and ``KiB``... are powers of 1024, ``KB``/``MB``... of 1000. The number itself is
    :func:`plain` digits.
    """
    if text is None:
        return default
    if isinstance(text, numbers.Integral):  # numpy's integers too, without importing numpy for --help
        return int(text)
    s = str(text).strip().upper().replace(" ", "")
    if not plain(s):
        raise ValueError(f"cannot read a memory size from {text!r} (try 512MiB, 2GiB)")
    i = len(s)
    while i and not (s[i - 1].isdigit() or s[i - 1] == "."):
        i -= 1
    num, unit = s[:i], s[i:]
    if unit not in _UNITS or not num:
        raise ValueError(f"cannot read a memory size from {text!r} (try 512MiB, 2GiB)")
    try:
        return int(float(num) * _UNITS[unit])
    except (ValueError, OverflowError):
        raise ValueError(f"cannot read a memory size from {text!r} (try 512MiB, 2GiB)") from None


def format_bytes(n, up: bool = False) -> str:
    """Bytes -> ``'512 B'``, ``'1.5 MiB'``, ``'2.0 GiB'`` (what :func:`parse_bytes` reads back).

    ``up``: rounded up, never down, for a limit named as one that works (``1.23 GiB`` is ``1.3 GiB``:
    a user who passes the figure back gets at least what was asked for).
    """
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(math.ceil(n)) if up else int(n)} B"
            return f"{math.ceil(n * 10) / 10 if up else n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover - the loop returns at TiB


def parse_memory(text, option: str = "--memory") -> int | None:
    """A memory option's bytes, or None for ``auto`` (resolved when the work is planned:
    :func:`ooc._memlimit.resolve_budget`)."""
    if text is None or str(text).strip().lower() == AUTO_MEMORY:
        return None
    try:
        value = parse_bytes(text)
    except ValueError as exc:
        raise ValueError(f"{option}: {exc} or 'auto'") from None
    if value <= 0:
        raise ValueError(f"{option} must be > 0 bytes or 'auto' (got {text!r})")
    return value
