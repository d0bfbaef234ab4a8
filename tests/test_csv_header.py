"""Whether a CSV's first line is a header: decided once, stated, overridable, never a row gained or lost
silently (docs/formats.rst, "Header").

Invariant: a CSV converts to exactly its author's data rows when ``--header``/``--no-header`` says the
truth; under ``auto`` it does too, except where the first line is a row of numbers that count the
columns, which may be dropped as a header only with a warning naming the file, the line and
``--no-header``. A header written by pandas (``0,1,2``; ``label,1,2``; ``,0,1,2``) is never a row.
A stated decision is recorded in the store's recipe and holds for the store's later files.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

import ooc
from ooc.cli import main
from ooc.store.input_rules import HEADER_NAMES, HEADER_NUMBERED, header_guess

pytestmark = pytest.mark.usefixtures("memory_counts_the_work")


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _is_number(c: str) -> bool:
    try:
        float(c)
    except ValueError:
        return False
    return "_" not in c


#: how the file's author wrote its first line: nothing (data first), names, or pandas' numbered headers
HEADERS = ["none", "names", "pandas", "label-1", "label-0", "pandas-index"]


def _header(kind: str, n_features: int, d: str) -> str | None:
    nums = [str(k) for k in range(n_features + 1)]
    return {"none": None,
            "names": d.join(["y"] + [f"f{k}" for k in range(n_features)]),
            "pandas": d.join(nums),  # df.to_csv(index=False) of a frame without column names
            "label-1": d.join(["label"] + nums[1:]),
            "label-0": d.join(["y"] + nums[:-1]),
            "pandas-index": d.join([""] + nums)}[kind]  # df.to_csv(): the index column's name is empty


@st.composite
def csv_files(draw):
    """(delimiter, how the author wrote the first line, that line, the data rows, auto or stated)."""
    d = draw(st.sampled_from([",", "\t", ";"]))
    n_features = draw(st.integers(1, 4))
    kind = draw(st.sampled_from(HEADERS))
    cell = st.one_of(st.sampled_from(["0", "1", "2", "3", "4"]), st.floats(-5, 5, allow_nan=False)
                     .filter(lambda v: v == 0 or abs(v) > 1e-44).map(repr))  # (float32 holds the rest as 0: refused)
    rows = []
    for i in range(draw(st.integers(2, 5))):
        label, feats = draw(st.sampled_from(["0", "1"])), [draw(cell) for _ in range(n_features)]
        if i == 0 and draw(st.booleans()):
            label, feats = "0", [str(k) for k in range(1, n_features + 1)]  # a data row that counts the columns
        # pandas' index column comes first: one more column, the label the second
        rows.append(d.join(([str(i)] if kind == "pandas-index" else []) + [label] + feats))
    return d, kind, _header(kind, n_features, d), rows, draw(st.sampled_from(["auto", "stated"]))


@settings(max_examples=12, deadline=None)
@given(case=csv_files())
@example(case=(",", "pandas", "0,1,2", ["1,0.5,2", "0,1,2"], "auto"))  # pandas' header: it was read as a row
@example(case=(",", "pandas-index", ",0,1,2", ["0,1,0.5,2", "1,0,1.5,3"], "auto"))  # the index read as labels
def test_no_row_is_gained_or_lost_silently(tmp_path_factory, case):
    d, kind, head, rows, option = case
    tmp = tmp_path_factory.mktemp("csv")
    path = tmp / ("in.tsv" if d == "\t" else "in.csv")
    path.write_text("".join(line + "\n" for line in ([head] if head is not None else []) + rows))
    args = ["convert", path, tmp / "s.zarr", "--input-format", "csv"]
    if option == "stated":
        args.append("--header" if head is not None else "--no-header")
    res = cli(*args)
    assert res.exit_code == 0, (res.output, res.stderr)
    n = ooc.open_store(str(tmp / "s.zarr")).n_rows
    warned = f"{path}:1:" in res.stderr and "--no-header" in res.stderr and "guessed" in res.stderr
    if option == "stated" or kind != "none":
        assert n == len(rows), (kind, option, n, res.stderr)  # the truth said, or a header pandas writes
    else:
        assert n == len(rows) or (n == len(rows) - 1 and warned), (n, res.stderr)
    if kind in ("pandas", "label-1", "label-0", "pandas-index") and option == "auto":
        assert warned and "a header (guessed" in res.output
    # an index column first (its name empty) is read as the labels: said, with the way out
    assert ("index=False" in res.stderr) == (kind == "pandas-index"), res.stderr


@pytest.mark.parametrize("cells, why", [
    ("0,1,2,3", HEADER_NUMBERED), ("label,1,2,3", HEADER_NUMBERED), ("y,0,1", HEADER_NUMBERED),
    (",0,1,2", HEADER_NUMBERED), ("y,a,b", HEADER_NAMES), (",a,b", HEADER_NAMES),
    ("1,2,3", None), ("0,1,3", None), ("0.0,1.0,2.0", None), ("1,x,3", None), ("abc,2,3", None),
    ("1,2,", None), ("0", None), ("-1,0,1", None),
])
def test_header_guess(cells, why):
    assert header_guess(cells.split(","), _is_number) == why


@pytest.mark.parametrize("said", ["--header", "--no-header", None])
def test_a_stated_header_holds_for_the_later_files(tmp_path, said):
    """``convert --no-header`` (``--header``) is recorded, and ``evaluate`` reads a later file so: the
    first line ``0,1,2`` is then a row (a header); unsaid, it is found again, and warned about."""
    path = tmp_path / "in.csv"
    path.write_text("0,1,2\n" + "".join(f"{i % 2},{i},{1 - i}\n" for i in range(6)))
    res = cli("convert", path, tmp_path / "s.zarr", *([said] if said else []))
    assert res.exit_code == 0, res.output
    recipe = ooc.open_store(str(tmp_path / "s.zarr")).attrs["input_recipe"]["csv"]
    assert recipe["header_source"] == ("option" if said else HEADER_NUMBERED)
    assert cli("train", tmp_path / "s.zarr", "--out", tmp_path / "run", "--max-epochs", "2").exit_code == 0
    res = cli("evaluate", tmp_path / "run", path, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.strip().splitlines()[-1])["n_rows"] == (7 if said == "--no-header" else 6)
    assert ("--no-header" in res.stderr) == (said is None)
    # said for this file, it holds for this file
    res = cli("evaluate", tmp_path / "run", path, "--json", "--no-header")
    assert json.loads(res.output.strip().splitlines()[-1])["n_rows"] == 7


def test_header_is_for_csv_input(tmp_path):
    path = tmp_path / "in.svm"
    path.write_text("1 1:1\n-1 2:1\n")
    res = cli("convert", path, tmp_path / "s.zarr", "--header")
    assert res.exit_code == 1 and "--header is for CSV input" in res.stderr
