"""The rules every input is held to, whatever its format (the readers and the ingest call these).

Each format's reader (:mod:`ooc.store.readers`, the kernels of :mod:`ooc.kernels.text` and
:mod:`ooc.kernels.vw`, :func:`ooc.store.ingest.load_npz` and the in-memory checks) parses and
locates; the rules shared by all of them are written here once:

* a UTF-8 byte-order mark at the start of a text input is skipped (:func:`skip_bom`), never read
  as part of a first cell or a header;
* a first line of a delimited file is a header when none of its cells is a number (its cells name
  the columns), or when its numbers count the columns (:func:`header_guess`: pandas' ``to_csv``
  names the columns 0..n-1; ``label,1,2,3`` numbers the features): the second is a guess, which
  the conversion announces and ``--header``/``--no-header`` overrides. Any other line that mixes
  numbers and something else is data, whose bad cell is an error naming the file, line and column;
* labels, like values, must fit the store's value type: a label whose magnitude is beyond its
  largest finite value is refused naming the file and line (by the parsing kernels, in file order
  with the other errors; :func:`first_bad_label` for arrays: .npz and in-memory matrices);
* a line longer than :func:`max_line_bytes` of the reading buffer (a bound that follows
  ``--memory``) is refused naming the file and line, instead of a buffer growing past the memory
  the conversion was given;
* an input read as text (svmlight, CSV, VW, raw text) whose start, once decompressed, is not text (a
  zip: an ``.npz``; a ``.npy``; a NUL byte in its first line of data: :func:`binary_kind`) is refused
  saying what it is and what it is read as, before a parser names its bytes as a bad label on line 1.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: UTF-8's byte-order mark (what Excel and Windows tools put at the start of a "UTF-8 CSV").
BOM = b"\xef\xbb\xbf"
#: The longest line, in chunks of text (a line is read into a buffer of about twice its length).
LINE_CHUNKS = 2
#: The longest line is never bounded below this (readers with tiny chunks, in tests, read whole lines).
MIN_LINE_BYTES = 1 << 20


def skip_bom(f):
    """Consume a UTF-8 byte-order mark at the current position of the binary file ``f``; return ``f``."""
    peek = getattr(f, "peek", None)
    if peek is not None:
        if peek(len(BOM))[:len(BOM)] == BOM:
            f.read(len(BOM))
        return f
    try:  # a file without peek (fsspec's): read and step back unless it was the mark
        pos = f.tell()
        if f.read(len(BOM)) != BOM:
            f.seek(pos)
    except (OSError, ValueError, AttributeError):
        pass
    return f


def max_line_bytes(chunk_bytes: int) -> int:
    """The longest line a reader with ``chunk_bytes`` of text per block accepts (``LINE_CHUNKS`` blocks,
    at least :data:`MIN_LINE_BYTES`).

    The conversion's blocks are sized from ``--memory`` (about a twelfth of it, at most 64 MiB), so
    the bound follows the memory given: a longer line would need a buffer past it.
    """
    return max(LINE_CHUNKS * int(chunk_bytes), MIN_LINE_BYTES)


def line_too_long(limit: int) -> str:
    """The message for a line past ``limit`` bytes."""
    return (f"line longer than {limit} bytes, the longest this conversion reads with its --memory (a line "
            "holds one example: is the file missing its newlines?)")


class HeaderGuessWarning(UserWarning):
    """A CSV's first line of numbers was read as a header (a guess: :func:`header_guess`)."""


#: :func:`header_guess`'s answers: a first line of names, a first line whose numbers count the columns.
HEADER_NAMES, HEADER_NUMBERED = "names", "numbered"


def header_guess(cells, is_number) -> str | None:
    """Whether the first line's ``cells`` (str) are a header, and why: :data:`HEADER_NAMES`,
    :data:`HEADER_NUMBERED` or None (data).

    * names: some cell is not empty and none is a number;
    * numbered: the cells that are numbers are plain integers (digits only) counting up by one from
      left to right, from 0 when every cell is one (pandas' ``df.to_csv(index=False)``: ``0,1,2``),
      from 0 or 1 beside names (``label,1,2,3``, ``y,0,1``); a name cell is never empty, but for
      the first (pandas' index column: ``,0,1,2``).

    A numbered line could be a data row (label 0, features 1, 2, ...): the reader calls it a guess, and
    the conversion names it and the option that says otherwise (``--no-header``).
    """
    cells = [c.strip() for c in cells]
    filled = [c for c in cells if c]
    if not filled:
        return None
    numbers = [c for c in filled if is_number(c)]
    if not numbers:
        return HEADER_NAMES
    if not all(c.isascii() and c.isdigit() for c in numbers):
        return None
    if any(not c for c in cells[1:]):
        return None  # an empty cell is a name only first (an index column's)
    values = [int(c) for c in numbers]
    starts = (0,) if len(numbers) == len(cells) else (0, 1)
    if len(numbers) == len(cells) and len(cells) < 2:
        return None
    if values[0] in starts and values == list(range(values[0], values[0] + len(values))):
        return HEADER_NUMBERED
    return None


def is_header(cells, is_number) -> bool:
    """Whether the first line's ``cells`` are a header (:func:`header_guess`)."""
    return header_guess(cells, is_number) is not None


def first_bad_label(labels: np.ndarray, limit: float) -> int | None:
    """Index of the first label of magnitude ``limit`` or more (the store's value type's overflow bound,
    :func:`ooc.store.readers.overflow_limit`) or not finite; None if all fit."""
    y = np.asarray(labels, dtype=np.float64)
    bad = ~(np.abs(y) < limit)
    if not bad.any():
        return None
    return int(np.argmax(bad))


def label_message(value: float, dtype) -> str:
    """The message for a label that does not fit ``dtype``."""
    if not np.isfinite(value):
        return f"label {value!r} is not finite (NaN and inf are not allowed)"
    return (f"label {value!r} overflows {np.dtype(dtype)} (largest {float(np.finfo(dtype).max):.8g}); "
            "store float64 values instead (--dtype float64)")


#: Bytes at the start of a (decompressed) input that :func:`binary_kind` looks at.
BINARY_HEAD_BYTES = 4096


class Binary(NamedTuple):
    """What :func:`binary_kind` found: the input in words, and where (1-based; None: its first bytes)."""

    kind: str
    line: int | None = None
    column: int | None = None


def binary_kind(head: bytes) -> Binary | None:
    """What the start ``head`` of a decompressed input is when it is not text; None for text.

    A zip archive (what ``numpy.savez`` writes: an ``.npz``) or a ``.npy`` array by their first bytes;
    otherwise binary data when its first line that is not blank or a comment holds a NUL byte (before
    any ``#``), located there: no text format ooc reads has one, and UTF-8 text never holds it. Only the
    first such line is looked at, so that a NUL further on is the parser's error at its own line, in
    file order with the others.
    """
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return Binary("a zip archive (an .npz)")
    if head.startswith(b"\x93NUMPY"):
        return Binary("a NumPy .npy array")
    for k, ln in enumerate(head.split(b"\n"), start=1):
        cells = ln.split(b"#", 1)[0]
        nul = cells.find(b"\0")
        if nul >= 0:
            return Binary("binary data (a NUL byte)", k, nul + 1)
        if cells.strip():
            return None
    return None
