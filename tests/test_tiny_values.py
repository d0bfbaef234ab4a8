"""A value too small for the store's type is refused as a value too large is (docs/formats.rst, "Values"):
float32 holds no nonzero below about 1.4e-45, so a 1e-50 became an explicit 0 counted as a nonzero. Each
format (svmlight, CSV, VW, an array) refuses it naming the file and line, with ``--dtype float64`` as the
way; float64 keeps it; a float32 subnormal (1e-40) is kept, nonzero."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ooc
from ooc.store.readers import InputError

ROWS = {"svmlight": "1 1:0.5 2:{v}\n-1 1:1\n", "csv": "1,0.5,{v}\n-1,1,0\n", "vw": "1 |a x:0.5 y:{v}\n-1 |a x:1\n"}


@pytest.mark.parametrize("fmt", list(ROWS))
@pytest.mark.parametrize("value", ["1e-50", "-3e-46", "1e-320"])
def test_a_value_float32_holds_as_zero_is_refused_by_line(tmp_path, fmt, value):
    src = tmp_path / f"t.{ 'svm' if fmt == 'svmlight' else fmt}"
    src.write_text(ROWS[fmt].format(v=value))
    with pytest.raises(InputError, match=r"t\.\w+:1:\d+: value .* too small for float32.*--dtype float64"):
        ooc.convert(str(src), str(tmp_path / "s.zarr"))
    ooc.convert(str(src), str(tmp_path / "s64.zarr"), dtype="float64").close()


@pytest.mark.parametrize("fmt", list(ROWS))
def test_a_float32_subnormal_is_kept(tmp_path, fmt):
    src = tmp_path / f"t.{ 'svm' if fmt == 'svmlight' else fmt}"
    src.write_text(ROWS[fmt].format(v="1e-40"))
    with ooc.convert(str(src), str(tmp_path / "s.zarr")) as st:
        blk = st.block("rows", 0)
        assert len(blk.data) and np.all(blk.data != 0)


def test_an_array_value_float32_holds_as_zero_is_refused(tmp_path):
    X = sp.csr_matrix(np.array([[1e-50, 1.0], [0.5, 0.0]]))
    with pytest.raises(ValueError, match="too small for float32"):
        ooc.convert(X, str(tmp_path / "a.zarr"), y=np.array([1.0, -1.0]))
    ooc.convert(X, str(tmp_path / "b.zarr"), y=np.array([1.0, -1.0]), dtype="float64").close()
