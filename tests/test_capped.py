"""A convert inside a memory cgroup several times smaller than its input.

``scripts/run-capped LIMIT --cold -- CMD`` (or ``$OOC_RUN_CAPPED``) runs CMD in a fresh memory cgroup
(page cache included) and drops the page cache first; the kernel kills CMD if it
needs more than LIMIT. The input is four times the cap, so a convert that loads the
file, the matrix, or O(n) row statistics dies; one that streams succeeds.

The cap is not tiny because the process itself (Python, numpy, Numba's LLVM, Zarr)
takes ~105 MiB before reading a byte, and the O(d) column statistics of a 2**20
feature file take ~30 MiB more; ``--memory 16MiB`` bounds the rest.
Set ``OOC_CAPPED_LIMIT`` (e.g. ``256M``) to try another cap.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from ooc.store.store import open_store

RUN_CAPPED = os.environ.get("OOC_RUN_CAPPED") or os.path.join(os.path.dirname(__file__), "..", "scripts", "run-capped")
LIMIT = os.environ.get("OOC_CAPPED_LIMIT", "176M")
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def require_run_capped() -> str:
    """``RUN_CAPPED``, or skip the test where it is missing or finds no writable memory cgroup."""
    if not os.path.exists(RUN_CAPPED):
        pytest.skip(f"{RUN_CAPPED} not found")
    probe = subprocess.run([RUN_CAPPED, "64M", "--", "true"], capture_output=True, text=True)
    if probe.returncode == 3:
        pytest.skip(f"run-capped: no writable memory cgroup here ({probe.stderr.strip().splitlines()[-1]})")
    return RUN_CAPPED


def _bytes(limit: str) -> int:
    return int(float(limit[:-1]) * UNITS[limit[-1].upper()]) if limit[-1].isalpha() else int(limit)


def _ooc():
    exe = os.path.join(os.path.dirname(sys.executable), "ooc")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "ooc.cli"]


def _count(path):
    """Data lines and ``id:value`` pairs of a (comment-free) svmlight file, streamed."""
    lines = colons = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 24)
            if not b:
                return lines, colons
            lines += b.count(b"\n")
            colons += b.count(b":")


@pytest.mark.slow
@pytest.mark.cgroup
@pytest.mark.parametrize("fmt", ["zarr"])
def test_convert_under_memory_cap(tmp_path, fmt):
    require_run_capped()
    from ooc.synth import write_textlike_svmlight

    cap = _bytes(LIMIT)
    src = tmp_path / "big.svm"
    size = write_textlike_svmlight(str(src), 4 * cap, seed=7)
    assert size >= 4 * cap
    store = tmp_path / ("big.zarr" if fmt == "zarr" else "big.h5")
    r = subprocess.run([RUN_CAPPED, LIMIT, "--cold", "--"] + _ooc()
                       + ["convert", str(src), str(store), "--format", fmt, "--memory", "16MiB"],
                       capture_output=True, text=True, timeout=1800,
                       # --memory 16MiB: the work's buffers (OOC_MEMORY_SCOPE=work); the cap bounds the process
                       env={**os.environ, "NUMBA_CACHE_DIR": os.environ.get("NUMBA_CACHE_DIR", "/tmp/ooc_nc"),
                            "OOC_MEMORY_SCOPE": "work"})
    report = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    m = re.search(r"oom_kills=(\d+)", report)
    assert r.returncode == 0, f"convert under a {LIMIT} cap failed (input {size >> 20} MiB): {r.stderr[-2000:]}"
    assert m and m.group(1) == "0", report
    n_rows, nnz = _count(src)
    with open_store(store) as st:
        assert (st.n_rows, st.nnz) == (n_rows, nnz)
        assert st.layouts == ("rows", "cols")
        # spot-check a row block against its column view
        blk = st.block("rows", st.n_blocks("rows") // 2)
        assert blk.indptr[-1] == st.row_nnz[blk.start:blk.stop].sum()
        assert int(st.col_nnz.sum()) == nnz


def _cgroup_or_skip():
    require_run_capped()


#: the training cap: the interpreter with its kernels (~190 MiB), 2**18 features' vectors, a group
#: of four 8 MiB training blocks and one read ahead, and the margin
TRAIN_CAP = os.environ.get("OOC_CAPPED_TRAIN_LIMIT", "320M")


@pytest.mark.slow
@pytest.mark.cgroup
def test_train_default_options_under_memory_cap(tmp_path):
    """A store several times the cap, converted with the default 64 MiB blocks (more than the cap
    leaves for data), trains with default options (``--memory auto``: the cgroup's limit): no OOM
    kill, a finished model, and the same coefficients as the same run without a cap (the iterates
    never depend on the memory)."""
    _cgroup_or_skip()
    cap = _bytes(TRAIN_CAP)
    store = str(tmp_path / "big.zarr")
    rows = int(3 * cap / (20 * 12))  # 20 float64 values and int32 ids a row: ~3x the cap on disk
    env = {**os.environ, "NUMBA_CACHE_DIR": os.environ.get("NUMBA_CACHE_DIR", "/tmp/ooc_nc")}
    subprocess.run(_ooc() + ["synth", store, "--rows", str(rows), "--cols", str(1 << 18), "--nnz-per-row", "20",
                             "--values", "gaussian", "--dtype", "float64", "--layout", "rows"],
                   check=True, capture_output=True, env=env, timeout=1800)
    with open_store(store) as st:
        assert st.bytes_on_disk() >= 2.5 * cap and int(st.attrs["block_bytes"]) == 64 << 20
    train = ["train", store, "--max-epochs", "2", "--tol", "1e-12", "--json"]
    r = subprocess.run([RUN_CAPPED, TRAIN_CAP, "--cold", "--"] + _ooc() + train + ["--out", str(tmp_path / "capped")],
                       capture_output=True, text=True, timeout=1800, env=env)
    report = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    assert r.returncode == 0, f"train under a {TRAIN_CAP} cap failed: {r.stderr[-2000:]}"
    m = re.search(r"oom_kills=(\d+)", report)
    assert m and m.group(1) == "0", report
    import json

    import numpy as np

    capped = json.loads(r.stdout.strip().splitlines()[-1])
    assert capped["memory_source"] == "cgroup memory limit" and capped["memory_budget"] < cap
    free = subprocess.run(_ooc() + train + ["--out", str(tmp_path / "free")], capture_output=True, text=True,
                          timeout=1800, env=env, check=True)
    assert json.loads(free.stdout.strip().splitlines()[-1])["primal"] == capped["primal"]
    assert np.array_equal(np.load(tmp_path / "capped" / "model" / "coef.npy"),
                          np.load(tmp_path / "free" / "model" / "coef.npy"))


@pytest.mark.cgroup
def test_auto_under_a_cgroup_too_small_says_the_limit_that_works(tmp_path):
    """``--memory auto`` under a cgroup that cannot hold the O(d) vectors of 2**22 features beside
    the interpreter: one line before the first epoch naming the limit that will work, no OOM kill;
    under that limit the same command trains."""
    _cgroup_or_skip()
    store = str(tmp_path / "wide.zarr")
    env = {**os.environ, "NUMBA_CACHE_DIR": os.environ.get("NUMBA_CACHE_DIR", "/tmp/ooc_nc")}
    subprocess.run(_ooc() + ["synth", store, "--rows", "2000", "--cols", str(1 << 22), "--nnz-per-row", "10",
                             "--layout", "rows"], check=True, capture_output=True, env=env, timeout=600)
    cmd = _ooc() + ["train", store, "--out", str(tmp_path / "run"), "--max-epochs", "2", "--json"]
    r = subprocess.run([RUN_CAPPED, "250M", "--"] + cmd, capture_output=True, text=True, timeout=600, env=env)
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("run-capped:")]
    assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("ooc: error:"), r.stderr
    assert "cgroup memory limit" in lines[0] and "Traceback" not in r.stderr
    assert re.search(r"oom_kills=0", r.stderr), r.stderr
    need = re.search(r"training needs at least ([\d.]+) MiB", lines[0])
    assert need, lines[0]
    ok = subprocess.run([RUN_CAPPED, f"{int(float(need.group(1))) + 1}M", "--"] + cmd, capture_output=True, text=True,
                        timeout=600, env=env)
    assert ok.returncode == 0, ok.stderr
    assert re.search(r"oom_kills=0", ok.stderr), ok.stderr


@pytest.mark.cgroup
@pytest.mark.parametrize("limit, mib", [("3G", 3072), ("2.5GiB", 2560), ("4096M", 4096), ("300MiB", 300),
                                        (str(5 << 30), 5120)])
def test_a_limit_above_2_gib_is_the_limit_asked(limit, mib):
    """The script's limit is the one asked for, above 2**31 bytes too (mawk's printf %d saturated there: 3G
    ran under 2048M)."""
    capped = require_run_capped()
    r = subprocess.run([capped, limit, "--", "true"], capture_output=True, text=True)
    assert r.returncode == 0 and f"limit={mib}M " in r.stderr.strip().splitlines()[-1], r.stderr
