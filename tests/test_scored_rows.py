"""The one account of what a scored row costs (``ooc.evaluate.scored_row_bytes``) and the sums over rows
that do not depend on how the rows are split into parts (``ooc.evaluate.RowSum``).

Invariants (docs/training.rst, "Memory"):

* for any classes and rows, what computing a part's probabilities (or their logarithms) and writing them
  as ``predict --proba`` does allocates at most ``rows x scored_row_bytes(classes, proba=True, text=True)``
  (measured with tracemalloc, which numpy reports to), beside a constant ``FIXED``;
* a :class:`RowSum` of rows given in any parts is the same float.
"""

from __future__ import annotations

import io
import tracemalloc

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ooc.evaluate import RowSum, scored_row_bytes
from ooc.model import log_proba_from_margins, proba_from_margins

#: What a part holds whatever its rows (the text writer, one row's Python strings).
FIXED = 64 << 10


def _write_proba(p: np.ndarray) -> None:
    """What ``ooc predict --proba`` does with a part (cli.predict)."""
    fh = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    fh.write("\n".join(" ".join(map(lambda x: repr(float(x)), row)) for row in p))
    fh.flush()


@settings(max_examples=12, deadline=None)
@given(st.integers(2, 200), st.integers(1, 600), st.floats(-40, 40), st.integers(0, 2**31))
def test_a_parts_arrays_and_text_fit_its_account(classes, rows, shift, seed):
    m = np.random.default_rng(seed).normal(shift, 10, size=(rows, classes))
    tracemalloc.start()
    try:
        p = proba_from_margins(m)
        _write_proba(p)
        del p
        log_proba_from_margins(m)[np.arange(rows), 0].sum()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # beside a constant of a few KiB (the writer, Python objects of one row), covered by the work's floor
    assert peak + m.nbytes <= rows * scored_row_bytes(classes, proba=True, text=True) + FIXED, (classes, rows, peak)
    assert scored_row_bytes(classes, metrics=True) >= m.nbytes / rows * 6  # margins, probabilities, 4 temporaries


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=0, max_size=9000), st.lists(st.integers(1, 5000), max_size=6))
def test_a_row_sum_does_not_depend_on_the_parts(values, cuts):
    v = np.array(values, dtype=np.float64)
    whole = RowSum()
    whole.add(v)
    parts = RowSum()
    at = 0
    for c in cuts + [len(v)]:
        parts.add(v[at:at + c])
        at += c
    parts.add(v[at:])
    assert whole.value() == parts.value()
