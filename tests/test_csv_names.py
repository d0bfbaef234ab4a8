"""New CSV input is read by the names of the store's header (docs/formats.rst, "Input recipe").

Invariant: a store converted from a CSV with a header records the header's names (``input_recipe``'s
``csv.names``). A later file with a header (``append``, ``predict``, ``evaluate``, ``--validation``) is
read by those names: the same names in the same order are read as they are; the same names in another
order give exactly the rows of the file written in the store's order (label, weights and features found
by name); any other header (a column renamed, added or dropped, or a repeated name out of order) is
refused with one line naming the file, the header's line and the column. Never read by position when
the names say otherwise.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

import ooc
from ooc.cli import main
from ooc.store import layout as L
from ooc.store.ingest import open_input
from ooc.store.readers import InputError
from ooc.store.recipe import Options, Recipe, follow, from_options

pytestmark = pytest.mark.usefixtures("memory_counts_the_work")

OWNER = "the store s.zarr"


def _write(path, delim, header, rows):
    path.write_text("\n".join([delim.join(header)] + [delim.join(r) for r in rows]) + "\n")


def _read(path, recipe, owner=OWNER):
    """All rows of ``path`` read with ``recipe``: (labels, weights, dense features)."""
    src = open_input(str(path), recipe, chunk_bytes=1 << 16, rows_per_chunk=1024, dtype=np.float64, owner=owner)
    ys, ws, xs = [], [], []
    for ch in src.make():
        for k in range(len(ch.labels)):
            lo, hi = ch.indptr[k], ch.indptr[k + 1]
            idx = ch.indices[lo:hi]
            assert np.all(np.diff(idx) > 0)  # each row's columns sorted, as every reader gives them
            row = np.zeros(src.n_cols)
            row[idx] = ch.data[lo:hi]
            xs.append(row)
        ys.extend(ch.labels)
        ws.extend(np.ones(len(ch.labels)) if ch.weights is None else ch.weights)
    return np.array(ys), np.array(ws), np.array(xs)


def _store_recipe(path, weight_column):
    """The recipe ``convert`` records for ``path`` (read as convert reads it), through the store attribute."""
    rec = from_options(Options("csv", weight_column=weight_column), str(path), "float64")
    src = open_input(str(path), rec, chunk_bytes=1 << 16, rows_per_chunk=1024, dtype=np.float64, cast=False)
    return Recipe.from_attrs({L.RECIPE: json.loads(json.dumps(src.recipe.as_attr()))}, "s.zarr")


CHANGES = ["same", "permute", "rename", "add", "drop", "repeat"]


@st.composite
def cases(draw):
    n = draw(st.integers(1, 4))  # feature columns
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f", "x1", "Price", "w"]), min_size=n + 1,
                          max_size=n + 1, unique=True))
    header = ["y"] + names[:n] + (["wt"] if draw(st.booleans()) else [])  # maybe a weight column, last
    weighted = header[-1] == "wt"
    cell = st.sampled_from(["0", "1", "2", "0.5", "-3", "7.25"])
    rows = [[draw(st.sampled_from(["0", "1"]))] + [draw(cell) for _ in range(n)] + (["2"] if weighted else [])
            for _ in range(draw(st.integers(1, 4)))]
    change = draw(st.sampled_from(CHANGES))
    order = list(range(len(header)))
    new_header = list(header)
    if change == "permute":
        order = draw(st.permutations(order))
        new_header = [header[k] for k in order]
    elif change == "rename":
        k = draw(st.integers(0, len(header) - 1))
        new_header[k] = names[n]  # a name the store's header does not have
    elif change == "add":
        k = draw(st.integers(0, len(header)))
        new_header.insert(k, names[n])
        order.insert(k, None)
    elif change == "drop" and n > 1:
        k = draw(st.integers(1, n))  # a feature column
        del new_header[k]
        del order[k]
    elif change == "repeat" and n > 1:  # a name twice (so another is missing)
        new_header[2] = new_header[1]
    else:
        change = "same"
    delim = draw(st.sampled_from([",", "\t", ";"]))
    return delim, header, rows, change, order, new_header, weighted


@settings(max_examples=25, deadline=None)
@given(case=cases())
@example(case=(",", ["y", "a", "b", "c"], [["1", "1", "0", "2"], ["0", "0", "3", "0.5"]], "permute", [2, 0, 3, 1],
               ["b", "y", "c", "a"], False))  # the case seen: read by position, silently
@example(case=(",", ["y", "a", "b", "wt"], [["1", "1", "0", "2"]], "permute", [3, 1, 0, 2], ["wt", "a", "y", "b"],
               True))  # the weight column moved, the label too
def test_new_csv_is_read_by_the_names_of_the_header(tmp_path_factory, case):
    delim, header, rows, change, order, new_header, weighted = case
    d = tmp_path_factory.mktemp("names")
    ours, theirs = d / "store.csv", d / "new.csv"
    _write(ours, delim, header, rows)
    new_rows = [[r[k] if k is not None else "9" for k in order] for r in rows]
    _write(theirs, delim, new_header, new_rows)
    recipe = _store_recipe(ours, -1 if weighted else None)
    assert recipe.csv_names == tuple(header)
    reading = follow(recipe, Options(), OWNER)
    if change in ("same", "permute"):
        want, got = _read(ours, reading), _read(theirs, reading)
        for a, b in zip(want, got):
            np.testing.assert_array_equal(a, b)
        return
    with pytest.raises(InputError) as e:
        _read(theirs, reading)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{theirs}:1"), msg
    changed = [n for n in set(header) ^ set(new_header)] or [n for n, m in zip(new_header, header) if n != m]
    assert any(repr(n) in msg for n in changed), (msg, header, new_header)


def test_old_stores_without_names_read_by_position(tmp_path):
    """A recipe from before the names were recorded keeps reading a header's columns by position."""
    ours, theirs = tmp_path / "store.csv", tmp_path / "new.csv"
    _write(ours, ",", ["y", "a", "b"], [["1", "1", "2"]])
    _write(theirs, ",", ["y", "b", "a"], [["1", "1", "2"]])
    recipe = _store_recipe(ours, None)._replace(csv_names=None)
    attr = recipe.as_attr()
    assert attr["csv"]["names"] is None
    _, _, x = _read(theirs, follow(recipe, Options(), OWNER))
    np.testing.assert_array_equal(x, [[1.0, 2.0]])


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_append_finds_the_columns_by_name_or_refuses(tmp_path):
    """End to end: convert records the names; append reads a reordered file by name and refuses a renamed one."""
    a, b, c = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    _write(a, ",", ["y", "f1", "f2", "f3"], [["1", "1", "0", "2"], ["0", "0", "3", "0.5"]])
    _write(b, ",", ["f2", "y", "f3", "f1"], [["0", "1", "2", "1"], ["3", "0", "0.5", "0"]])
    _write(c, ",", ["y", "f1", "f2", "g3"], [["1", "1", "0", "2"]])
    st = tmp_path / "s.zarr"
    r = _cli("convert", a, st)
    assert r.exit_code == 0, r.output
    with ooc.open_store(str(st)) as s:
        assert s.attrs[L.RECIPE]["csv"]["names"] == ["y", "f1", "f2", "f3"]
    r = _cli("append", st, b, "--out", tmp_path / "grown.zarr")
    assert r.exit_code == 0, r.output
    with ooc.open_store(str(tmp_path / "grown.zarr")) as g:
        x = g.to_scipy("rows").toarray()
        np.testing.assert_array_equal(x[2:], x[:2])  # b's rows are a's, found by name
        np.testing.assert_array_equal(g.labels[2:], g.labels[:2])
    r = _cli("append", st, c, "--out", tmp_path / "no.zarr")
    assert r.exit_code != 0
    assert r.output.count("\n") == 1 and f"{c}:1:4:" in r.output and "'g3'" in r.output and "'f3'" in r.output, \
        r.output


@pytest.mark.parametrize("ours, theirs", [(["label", "1", "2"], ["0", "1", "2"]),
                                          (["0", "1", "2"], ["y", "1", "2"])])
def test_a_numbered_header_names_positions(tmp_path, ours, theirs):
    """A header guessed from numbers that count the columns (pandas' 0,1,2; label,1,2) names positions, not
    columns: against it, or as it, a file is read by position (with the guess announced), not refused."""
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    _write(a, ",", ours, [["1", "3", "4"]])
    _write(b, ",", theirs, [["1", "3", "4"]])
    recipe = _store_recipe(a, None)
    with pytest.warns(UserWarning):
        want, got = _read(a, follow(recipe, Options(), OWNER)), _read(b, follow(recipe, Options(), OWNER))
    for x, z in zip(want, got):
        np.testing.assert_array_equal(x, z)


def test_two_stores_of_other_header_names_are_other_columns():
    """predict/evaluate of a store: its recipe's header names must be the model's training store's, where both
    recorded names of columns (an older store has none; a numbered header's are positions)."""
    from ooc.store.recipe import check_same_columns

    base = Recipe("csv", csv_delimiter=",", csv_label_column=0, csv_header=True, csv_header_source="names",
                  csv_names=("y", "a", "b"))
    other = base._replace(csv_names=("y", "b", "a"))
    with pytest.raises(ValueError, match=r"CSV header \('y', 'b', 'a'\).*\('y', 'a', 'b'\)"):
        check_same_columns(base, other, "the model's store", "the store t.zarr")
    check_same_columns(base, base, "the model's store", "the store t.zarr")
    check_same_columns(base, other._replace(csv_names=None), "the model's store", "the store t.zarr")
    numbered = other._replace(csv_names=("0", "1", "2"), csv_header_source="numbered")
    check_same_columns(base, numbered, "the model's store", "the store t.zarr")
