"""Inputs that are not local files: standard input (``-``) and fsspec URLs."""

import gzip

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.datasets import load_svmlight_file

from ooc.cli import main
from ooc.store import open_store, readers
from ooc.store.ingest import convert


@pytest.fixture
def svm(tmp_path):
    rng = np.random.default_rng(1)
    lines = []
    for _ in range(400):
        ids = np.unique(rng.integers(1, 300, size=rng.integers(1, 9)))
        lines.append(f"{rng.choice([-1, 1])} " + " ".join(f"{i}:{v:.4g}" for i, v in zip(ids, rng.random(len(ids)))))
    p = tmp_path / "d.svm"
    p.write_text("\n".join(lines) + "\n")
    return p


def _one_line_error(result, *parts):
    assert result.exit_code != 0
    out = result.output.strip()
    assert len(out.splitlines()) == 1 and "Traceback" not in out, out
    for part in parts:
        assert part in out, out


def _same_matrix(store, path):
    X, y = load_svmlight_file(str(path), zero_based=False)
    st = open_store(store)
    Xs = st.to_scipy("rows")
    np.testing.assert_array_equal(Xs.indptr, X.indptr)
    np.testing.assert_array_equal(Xs.indices, X.indices)
    np.testing.assert_array_equal(Xs.data, X.data.astype(np.float32))
    return st.fingerprint


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_stdin(svm, tmp_path, gz):
    ref = convert(str(svm), str(tmp_path / "ref.zarr")).fingerprint
    data = svm.read_bytes()
    r = CliRunner().invoke(main, ["convert", "-", str(tmp_path / "s.zarr"), "--threads", "2"],
                           input=gzip.compress(data) if gz else data)
    assert r.exit_code == 0, r.output
    assert _same_matrix(tmp_path / "s.zarr", svm) == ref


def test_stdin_errors_name_stdin_and_line(tmp_path):
    r = CliRunner().invoke(main, ["convert", "-", str(tmp_path / "s.zarr")], input=b"1 1:2\nx 3:4\n")
    _one_line_error(r, "<stdin>:2:1: bad label 'x'")


def test_stdin_second_pass_is_refused_in_one_line(tmp_path, monkeypatch):
    # 0-based ids with --zero-based auto restart the conversion: possible only while the input
    # read is still in the kept head
    monkeypatch.setattr(readers, "STDIN_HEAD_BYTES", 64)
    text = b"1 1:1\n" * 50 + b"-1 0:1\n"
    r = CliRunner().invoke(main, ["convert", "-", str(tmp_path / "s.zarr")], input=text)
    _one_line_error(r, "<stdin>", "--zero-based yes")
    r = CliRunner().invoke(main, ["convert", "-", str(tmp_path / "s.zarr"), "--zero-based", "yes"], input=text)
    assert r.exit_code == 0, r.output
    monkeypatch.setattr(readers, "STDIN_HEAD_BYTES", 1 << 20)  # all of it kept: the restart reads it again
    r = CliRunner().invoke(main, ["convert", "-", str(tmp_path / "t.zarr")], input=text)
    assert r.exit_code == 0, r.output
    assert open_store(str(tmp_path / "t.zarr")).n_rows == 51


def test_file_url(svm, tmp_path):
    gz = tmp_path / "d.svm.gz"
    gz.write_bytes(gzip.compress(svm.read_bytes()))
    ref = convert(str(svm), str(tmp_path / "ref.zarr")).fingerprint
    for url in (svm.as_uri(), gz.as_uri()):
        out = tmp_path / "u.zarr"
        r = CliRunner().invoke(main, ["convert", url, str(out), "--overwrite"])
        assert r.exit_code == 0, r.output
        assert _same_matrix(out, svm) == ref


def test_url_of_a_filesystem_not_installed(tmp_path, monkeypatch):
    from fsspec.registry import known_implementations

    r = CliRunner().invoke(main, ["convert", "nosuchproto://bucket/d.svm", str(tmp_path / "s.zarr")])
    _one_line_error(r, "nosuchproto://bucket/d.svm", "no filesystem knows 'nosuchproto://'")
    # a protocol fsspec knows, whose package is missing (as s3:// without s3fs)
    monkeypatch.setitem(known_implementations, "fakefs",
                        {"class": "ooc_no_such_package.FakeFileSystem", "err": "Install fakefs to access fakefs://"})
    r = CliRunner().invoke(main, ["convert", "fakefs://bucket/d.svm.gz", str(tmp_path / "s.zarr")])
    _one_line_error(r, "fakefs://bucket/d.svm.gz", "filesystem for 'fakefs://' is not installed",
                    "Install fakefs")
    assert not (tmp_path / "s.zarr").exists()


def test_missing_file_url(tmp_path):
    url = (tmp_path / "nope.svm").as_uri()
    r = CliRunner().invoke(main, ["convert", url, str(tmp_path / "s.zarr")])
    _one_line_error(r, url, "cannot open")


def test_output_file_url_and_refused_urls(svm, tmp_path):
    out = tmp_path / "o.zarr"
    r = CliRunner().invoke(main, ["convert", str(svm), out.as_uri()])
    assert r.exit_code == 0, r.output
    _same_matrix(out, svm)
    r = CliRunner().invoke(main, ["convert", str(svm), "s3://bucket/o.zarr"])
    _one_line_error(r, "s3://bucket/o.zarr", "local path or a file:// URL")
