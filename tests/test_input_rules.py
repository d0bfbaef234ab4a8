"""The input rules shared by every format, and what the commands do with what input cannot say.

* a line longer than the bound that follows ``--memory`` is one line naming the file and the line,
  in every text format (a stream without newlines does not grow to a MemoryError);
* classification on one class is refused by name; a run whose objective stops being a finite number
  stops with one line naming non-finite values, never exit 0 with ``primal inf``;
* every JSON ooc prints or writes is strict JSON (a non-finite number is null);
* a third-party warning is one line, never its source line; a write error names the file.
"""

from __future__ import annotations

import errno
import json
import math
import os
import warnings

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import ooc
from ooc.cli import _one_line_warnings, main
from ooc.jsonout import dumps
from ooc.store import input_rules

#: the small --memory figures here drive small text chunks and blocks (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("memory_counts_the_work")


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(res) -> str:
    assert res.exit_code not in (0, None), (res.exit_code, res.output)
    err = res.stderr.strip()
    assert err.startswith("ooc: error: ") and len(err.splitlines()) == 1 and "Traceback" not in res.output, err
    return err


# -- long lines ---------------------------------------------------------------------------------------
def _long(fmt: str, n: int) -> tuple[bytes, list]:
    """A file of ``fmt`` with two good lines, then one of about ``n`` bytes (line 3), and the convert options."""
    if fmt == "svmlight":
        good, tail = b"1 1:1\n-1 2:1\n", b"1 " + b" ".join(b"%d:1" % i for i in range(1, n // 8))
        return good + tail + b"\n-1 3:1\n", []
    if fmt == "csv":
        return b"1,2\n0,3\n" + b"1," + b"7" * n + b"\n", []
    if fmt == "vw":
        return b"1 |a x\n-1 |a y\n" + b"1 |a " + b"w " * (n // 2) + b"\n", ["--input-format", "vw"]
    return b"1,good\n0,bad\n" + b"1," + b"word " * (n // 5) + b"\n", ["--text", "0:1"]


@pytest.mark.parametrize("fmt", ["svmlight", "csv", "vw", "text"])
def test_a_line_past_the_bound_is_named_not_a_memory_error(tmp_path, fmt):
    # --memory 1MiB for the whole process leaves the smallest reading block: lines up to the 1 MiB floor
    limit = input_rules.max_line_bytes(0)
    content, extra = _long(fmt, limit + (64 << 10))
    path = tmp_path / f"in.{fmt}"
    path.write_bytes(content)
    err = one_line_error(cli("convert", path, tmp_path / "s.zarr", "--memory", "1MiB", *extra))
    assert f"{path}:3: line longer than" in err, err
    assert not (tmp_path / "s.zarr").exists()


def test_a_stream_without_newlines_is_refused_at_its_first_line(tmp_path):
    path = tmp_path / "flat.svm"
    path.write_bytes(b"1 1:1 " * ((3 << 20) // 6))  # 3 MiB, no newline at all
    err = one_line_error(cli("convert", path, tmp_path / "s.zarr", "--memory", "1MiB"))
    assert f"{path}:1: line longer than" in err


def test_a_line_under_the_bound_is_read(tmp_path):
    content, _ = _long("svmlight", 200_000)
    path = tmp_path / "ok.svm"
    path.write_bytes(content)
    res = cli("convert", path, tmp_path / "s.zarr", "--memory", "1MiB")
    assert res.exit_code == 0, res.output
    assert ooc.open_store(str(tmp_path / "s.zarr")).n_rows == 4


# -- the byte-order mark and the CSV header ---------------------------------------------------------
@pytest.mark.parametrize("content, rows", [
    (b"\xef\xbb\xbf1,2,3\n0,4,5\n1,6,7\n", 3),          # a BOM before data: three rows, none a header
    (b"\xef\xbb\xbfy,a,b\n0,4,5\n1,6,7\n", 2),          # a BOM before a header
    (b"label,a,b\n0,4,5\n1,6,7\n", 2),
])
def test_bom_is_skipped_and_a_header_has_no_number(tmp_path, content, rows):
    path = tmp_path / "in.csv"
    path.write_bytes(content)
    assert cli("convert", path, tmp_path / "s.zarr").exit_code == 0
    st_ = ooc.open_store(str(tmp_path / "s.zarr"))
    assert st_.n_rows == rows and st_.n_cols == 2


@pytest.mark.parametrize("first", [b"1,x,3", b"1,2,", b"abc,2,3", b"1,nan,3"])
def test_a_bad_cell_in_the_first_row_is_an_error_not_a_header(tmp_path, first):
    path = tmp_path / "in.csv"
    path.write_bytes(first + b"\n0,4,5\n1,6,7\n")
    err = one_line_error(cli("convert", path, tmp_path / "s.zarr"))
    assert f"{path}:1:" in err


# -- one class; divergence -----------------------------------------------------------------------
def test_one_class_is_refused_for_classification(tmp_path):
    path = tmp_path / "one.svm"
    path.write_bytes(b"1 1:1\n1 2:1\n1 1:2\n")
    assert cli("convert", path, tmp_path / "s.zarr").exit_code == 0  # a test set may hold one class
    err = one_line_error(cli("train", tmp_path / "s.zarr", "--out", tmp_path / "run"))
    assert "one class" in err and "at least 2 classes" in err
    with pytest.raises(ValueError, match="class"):
        ooc.LinearClassifier().fit(np.eye(3), np.ones(3))


@pytest.mark.parametrize("label", [b"1e200", b"-3e300"])
def test_a_diverged_run_stops_with_one_line(tmp_path, label):
    path = tmp_path / "big.svm"
    path.write_bytes(label + b" 1:1\n-1 2:1\n3 1:1 2:1\n")
    assert cli("convert", path, tmp_path / "s.zarr", "--dtype", "float64", "--label-kind", "regression").exit_code == 0
    res = cli("train", tmp_path / "s.zarr", "--out", tmp_path / "run", "--loss", "squared", "--json")
    err = one_line_error(res)
    assert "diverged" in err and "non-finite" in err
    assert "NaN" not in res.stdout and "Infinity" not in res.stdout


def test_a_label_beyond_float32_is_refused_at_conversion(tmp_path):
    path = tmp_path / "big.svm"
    path.write_bytes(b"1 1:1\n\n# c\n1e200 2:1\n")
    err = one_line_error(cli("convert", path, tmp_path / "s.zarr"))
    assert f"{path}:4:1: label '1e200' overflows float32" in err
    with pytest.raises(ValueError, match="label 1e[+]200 overflows float32"):
        ooc.convert(np.eye(2), "memory://big-label", y=np.array([1.0, 1e200]))


# -- strict JSON ----------------------------------------------------------------------------------------
def _strict(text: str):
    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


nested = st.recursive(
    st.one_of(st.floats(), st.integers(), st.text(max_size=3), st.none(), st.booleans(),
              st.floats().map(np.float64), st.floats(width=32).map(np.float32)),
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=3), kids, max_size=3)),
    max_leaves=12)


@settings(max_examples=60, deadline=None)
@given(nested)
def test_json_is_strict_and_non_finite_numbers_are_null(obj):
    back = _strict(dumps(obj))

    def same(a, b):
        if isinstance(a, (float, np.floating)):
            return b is None if not math.isfinite(a) else b == float(a)
        if isinstance(a, dict):
            return all(same(v, b[k]) for k, v in a.items())
        if isinstance(a, list):
            return all(same(x, y) for x, y in zip(a, b))
        return a == b

    assert same(obj, back)


def test_sealed_json_files_are_strict(tmp_path):
    from ooc.fsutil import read_sealed_json, seal_json

    (tmp_path / "x.json").write_bytes(seal_json({"primal": math.inf, "gap": math.nan, "ok": 1.5}))
    _strict((tmp_path / "x.json").read_text())
    assert read_sealed_json(str(tmp_path / "x.json")) == {"primal": None, "gap": None, "ok": 1.5}


# -- warnings; write errors ----------------------------------------------------------------------
def test_a_library_warning_is_one_line_without_its_source(capsys):
    with _one_line_warnings():
        warnings.warn_explicit("overflow encountered in multiply\nsecond line", RuntimeWarning,
                               "/site-packages/numpy/core/x.py", 7)
        warnings.warn_explicit("overflow encountered in multiply\nsecond line", RuntimeWarning,
                               "/site-packages/numpy/core/x.py", 9)
        warnings.warn_explicit("old API", DeprecationWarning, "/site-packages/zarr/y.py", 3)
        warnings.warn_explicit("old API", FutureWarning, "/site-packages/dask/y.py", 3)
    err = capsys.readouterr().err
    assert err == "ooc: warning: RuntimeWarning: overflow encountered in multiply second line\n", err


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EIO])
def test_a_write_error_names_the_output(tmp_path, monkeypatch, code):
    import ooc.evaluate

    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))
        yield  # a generator, as iter_predictions

    monkeypatch.setattr(ooc.evaluate, "iter_predictions", fail)
    out = tmp_path / "predictions.txt"
    err = one_line_error(cli("predict", tmp_path / "run", tmp_path / "in.svm", "--out", out))
    assert err.startswith(f"ooc: error: {out}: ") and os.strerror(code) in err, err
