"""New raw-text input is read by the names of the store's header (docs/formats.rst, "Input recipe").

Invariant: a store converted from a raw-text CSV/TSV with a header (``--text LABEL:TEXT``, numbers or
names) records the header's names (``input_recipe``'s ``text.names``). A later file with a header
(``append``, ``predict``, ``evaluate``, ``--validation``) is read by those names: the same names in any
order give exactly the rows of the store's own file (the label and the text found by name, never by the
numbers ``--text`` gave); any other header (a column renamed, added or dropped) is refused with one line
naming the file, the header's line and the column.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import ooc
from ooc.cli import main
from ooc.store import layout as L
from ooc.store.ingest import open_input
from ooc.store.readers import InputError
from ooc.store.recipe import Options, Recipe, from_options

pytestmark = pytest.mark.usefixtures("memory_counts_the_work")

OWNER = "the store s.zarr"
HEADER = ["score", "id", "text"]
ROWS = [["1", "101", "a good day"], ["-1", "102", "a bad day"], ["2", "103", "very good indeed"]]


def _write(path, header, rows):
    path.write_text("\n".join([",".join(header)] + [",".join(r) for r in rows]) + "\n")


def _read(path, recipe, owner=OWNER):
    """All rows of ``path`` read with ``recipe``: (labels, dense features)."""
    src = open_input(str(path), recipe, chunk_bytes=1 << 16, rows_per_chunk=1024, dtype=np.float64, owner=owner)
    ys, xs = [], []
    for ch in src.make():
        for k in range(len(ch.labels)):
            row = np.zeros(src.n_cols)
            row[ch.indices[ch.indptr[k]:ch.indptr[k + 1]]] = ch.data[ch.indptr[k]:ch.indptr[k + 1]]
            xs.append(row)
        ys.extend(ch.labels)
    return np.array(ys), np.array(xs)


def _store_recipe(path, spec):
    """The recipe ``convert`` records for ``path`` (read as convert reads it), through the store attribute."""
    rec = from_options(Options(hash_bits=8, text_columns=spec), str(path), "float64")
    src = open_input(str(path), rec, chunk_bytes=1 << 16, rows_per_chunk=1024, dtype=np.float64, cast=False)
    return Recipe.from_attrs({L.RECIPE: json.loads(json.dumps(src.recipe.as_attr()))}, "s.zarr")


@st.composite
def cases(draw):
    change = draw(st.sampled_from(["same", "permute", "rename", "add", "drop"]))
    spec = draw(st.sampled_from([("0", "2"), ("score", "text")]))  # --text numbered or named
    order = [0, 1, 2]
    header = list(HEADER)
    if change == "permute":
        order = draw(st.permutations(order))
        header = [HEADER[k] for k in order]
    elif change == "rename":
        k = draw(st.integers(0, 2))
        header[k] = draw(st.sampled_from(["ident", "label", "body", "y"]))
    elif change == "add":
        header.insert(draw(st.integers(0, 3)), "extra")
    elif change == "drop":
        k = draw(st.sampled_from([1]))  # the id: the label and the text stay readable
        del header[k]
    return spec, change, order, header


@settings(max_examples=25, deadline=None)
@given(case=cases())
def test_new_text_is_read_by_the_names_of_the_header(tmp_path_factory, case):
    spec, change, order, header = case
    tmp = tmp_path_factory.mktemp("t")
    _write(tmp / "train.csv", HEADER, ROWS)
    recipe = _store_recipe(tmp / "train.csv", spec)
    want = _read(tmp / "train.csv", recipe)
    new = tmp / "new.csv"
    if change in ("same", "permute"):
        _write(new, header, [[r[k] for k in order] for r in ROWS])
        got = _read(new, recipe)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        return
    rows = [[dict(zip(HEADER, r)).get(h, "7") for h in header] for r in ROWS]
    _write(new, header, rows)
    with pytest.raises(InputError) as e:
        _read(new, recipe)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{new}:1") and "column" in msg


def test_append_finds_the_text_by_name_or_refuses(tmp_path):
    """End to end (--text by number): convert records the names; append reads a reordered file by name
    (its ids are not the labels) and refuses a renamed column in one line."""
    a, b, c = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    _write(a, HEADER, ROWS)
    _write(b, ["id", "score", "text"], [[r[1], r[0], r[2]] for r in ROWS])
    _write(c, ["ident", "score", "text"], [[r[1], r[0], r[2]] for r in ROWS])
    st = tmp_path / "s.zarr"
    run = CliRunner().invoke
    r = run(main, ["convert", str(a), str(st), "--text", "0:2", "--hash-bits", "8", "--label-kind", "regression"])
    assert r.exit_code == 0, r.output
    r = run(main, ["append", str(st), str(b), "--out", str(tmp_path / "grown.zarr")])
    assert r.exit_code == 0, r.output
    with ooc.open_store(str(tmp_path / "grown.zarr")) as g:
        x = g.to_scipy("rows").toarray()
        np.testing.assert_array_equal(x[3:], x[:3])  # b's rows are a's, found by name
        np.testing.assert_array_equal(g.labels[3:], g.labels[:3])
    r = run(main, ["append", str(st), str(c), "--out", str(tmp_path / "no.zarr")])
    assert r.exit_code != 0
    assert r.output.count("\n") == 1 and f"{c}:1:1:" in r.output and "'ident'" in r.output and "'score'" in r.output, \
        r.output
    with ooc.open_store(str(st)) as s:
        assert s.attrs[L.RECIPE]["text"]["names"] == HEADER
