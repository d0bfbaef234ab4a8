"""``ooc batch``'s results.csv and summary.md show every option the grid varies: no two rows are told apart
only by opening their run.json."""

from __future__ import annotations

import csv

from hypothesis import given, settings
from hypothesis import strategies as st

from ooc.batch import SPEC_KEYS, _row, expand_grid, run_name, write_results, write_summary

_KEYS = sorted(SPEC_KEYS - {"store"})


@st.composite
def grids(draw):
    """A grid over some options (any of them, values of any type), each with one to three values."""
    keys = draw(st.lists(st.sampled_from(_KEYS), min_size=1, max_size=3, unique=True))
    value = st.one_of(st.integers(0, 9), st.sampled_from(["balanced", "a", "b"]), st.floats(1e-6, 1.0))
    number = st.floats(1e-6, 1.0)  # l2 and l1 name the run directory: numbers only
    return {k: draw(st.lists(number if k in ("l2", "l1") else value, min_size=1, max_size=3, unique=True))
            for k in keys}


@settings(max_examples=25, deadline=None)
@given(grid=grids())
def test_every_grid_key_is_a_column(tmp_path_factory, grid):
    """Invariant: each key the grid sets is a column of results.csv and summary.md holding the run's value,
    so rows of different grid points differ in their shown options (not only in the run's name)."""
    out = tmp_path_factory.mktemp("cols")
    points = expand_grid(dict(grid, store=["d.zarr"]))
    rows = [_row(str(out / run_name(p)), p, status="ok", primal=1.0, gap=0.0, epochs=1, seconds=0.1,
                 converged=True, state="trained") for p in points]
    write_results(str(out), rows)
    with open(out / "results.csv", newline="") as f:
        got = list(csv.DictReader(f))
    shown = [c for c in got[0] if c not in ("run", "status", "primal", "gap", "epochs", "seconds", "converged",
                                            "validation", "error")]
    assert len({tuple(r[c] for c in shown) for r in got}) == len(points)
    for k in grid:
        col = k if k in shown else f"{k}_option"
        assert col in shown
        assert sorted(r[col] for r in got) == sorted(str(p[k]) for p in points)
    write_summary(str(out), rows, None)
    lines = (out / "summary.md").read_text().splitlines()
    header = [c.strip() for c in next(ln for ln in lines if ln.startswith("| run ")).strip("|").split("|")]
    for k in grid:
        assert (k if k in header else f"{k}_option") in header
    table = [ln for ln in lines if ln.startswith("| ") and not ln.startswith("| run ")]
    cells = [tuple(c.strip() for c in ln.strip("|").split("|"))[1:] for ln in table]
    assert len(set(c[:header.index("primal") - 1] for c in cells)) == len(points)
