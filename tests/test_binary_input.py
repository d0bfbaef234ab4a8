"""A binary input read as text is named for what it is (ooc.store.input_rules.binary_kind).

Invariant: whatever recipe new input follows (svmlight, CSV, VW, raw text: a text format; array columns
or a store from before recipes: the input's own format), an input on standard input (or a file) whose
start, once decompressed, is not text (an ``.npz``/zip, a ``.npy``, bytes with a NUL in the first line
of data) is refused in one line naming ``<stdin>``, what it is (with its compression) and, for a text
recipe, the format the recipe reads; never a "bad label" on line 1. An .npz stream against array columns
is read. The matrix below is formats x streams; each case of a text recipe failed before (a bad label).
"""

from __future__ import annotations

import bz2
import gzip
import io
import pickle
import sys

import numpy as np
import pytest

from ooc.store.ingest import open_input
from ooc.store.readers import InputError
from ooc.store.recipe import Options, Recipe, fmt_name, follow

OWNER = "the store s.zarr"

RECIPES = {
    "svmlight": Recipe("svmlight", 1, "option", dtype="float64"),
    "csv": Recipe("csv", csv_delimiter=",", csv_label_column=0, csv_header=False, csv_header_source="option",
                  dtype="float64"),
    "vw": Recipe("vw", hash_bits=10, dtype="float64"),
    "text": Recipe("text", hash_bits=10, text_columns=("0", "1"), dtype="float64"),
    "npz": Recipe("npz", dtype="float64"),  # array columns: the input is read by its own format
    "old": Recipe(None, 0, dtype="float64"),  # a store from before recipes
}


def _npz() -> bytes:
    buf = io.BytesIO()
    np.savez(buf, X=np.eye(3), y=np.array([0.0, 1.0, 1.0]))
    return buf.getvalue()


def _npy() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.eye(3))
    return buf.getvalue()


#: stream name -> (bytes, words the refusal must hold)
STREAMS = {
    "npz": (_npz(), ["zip", ".npz"]),
    "npz.gz": (gzip.compress(_npz()), ["npz", "gzip-compressed"]),
    "npz.bz2": (bz2.compress(_npz()), ["npz", "bz2-compressed"]),
    "npy": (_npy(), [".npy"]),
    "elf": (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4, ["binary", "NUL"]),
    "pickle": (pickle.dumps({"X": [1.0, 2.0]}, protocol=4), ["binary", "NUL"]),
}


def _open(monkeypatch, recipe_name, data):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    reading = follow(RECIPES[recipe_name], Options(), OWNER)
    src = open_input("-", reading, chunk_bytes=1 << 16, rows_per_chunk=1024, dtype=np.float64, owner=OWNER,
                     n_cols_hint=3)
    return sum(len(ch.labels) for ch in src.make())


@pytest.mark.parametrize("stream", list(STREAMS))
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_binary_stdin_is_named(monkeypatch, recipe, stream):
    data, words = STREAMS[stream]
    if recipe in ("npz", "old") and stream == "npz":
        assert _open(monkeypatch, recipe, data) == 3  # an .npz against array columns is read
        return
    with pytest.raises(InputError) as e:
        _open(monkeypatch, recipe, data)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("<stdin>"), msg
    assert all(w in msg for w in words), msg
    assert "label" not in msg, msg
    if recipe in ("npz", "old") and stream.startswith("npz."):  # read as an .npz, which is not compressed
        assert "compressed file, not an .npz archive" in msg, msg
    elif recipe in ("npz", "old"):
        assert "none of the formats" in msg, msg
    else:
        assert f"says {fmt_name(recipe)}" in msg, msg


@pytest.mark.parametrize("recipe, data", [
    ("svmlight", b"# a comment\n1 1:1 3:2\n0 2:1\n"),
    ("csv", b"1,0,1,2\n0,1,0,0\n"),
    ("vw", b"1 | a b:2\n0 | c\n"),
    ("text", b"1,red cat\n0,blue dog\n"),
    ("old", b"1 1:1\n0 2:1\n"),
])
def test_text_stdin_is_still_read(monkeypatch, recipe, data):
    assert _open(monkeypatch, recipe, data) == 2
