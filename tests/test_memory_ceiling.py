"""``--memory`` is a ceiling on the whole process: measured peaks, not the plan (docs/training.rst, "Memory").

A generator of cells (solver and options, or another command) x limits (multiples of the smallest
``--memory`` that ``ooc info`` names) runs each as a fresh process and reads its peak resident size
(``ru_maxrss`` of a child, from a wrapper process that runs nothing else). The invariants:

* an explicit ``--memory X`` at or above the smallest figure named: the run succeeds and its peak is at
  most ``X``;
* below it: refused before the first epoch, one line naming a figure that works, nothing left behind;
* under a memory cgroup (``scripts/run-capped``) at the smallest limit named, ``auto`` is not OOM-killed.

The store is large enough that its blocks do not fit the limit (the cache is what the governor shrinks).
The full matrix is ``scripts/bench_memory.py``; CI runs a few cells.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from test_capped import RUN_CAPPED, require_run_capped

#: cell -> (the solver whose smallest limit ``ooc info`` names, the command's arguments after STORE)
CELLS = {
    "sdca": ("sdca", ["train", "--solver", "sdca"]),
    "sdca-1thread-intercept": ("sdca", ["train", "--threads", "1", "--fit-intercept"]),
    "rcd-primal": ("rcd-primal", ["train", "--solver", "rcd-primal"]),
    "pure-l1": ("rcd-primal", ["train", "--l2", "0", "--l1", "1e-3"]),
    "dgpd": ("dgpd", ["train", "--solver", "dgpd"]),
    "evaluate": ("sdca", ["evaluate"]),
}
CI_CELLS = ("sdca", "rcd-primal", "evaluate")


def _env(**extra):
    return {**os.environ, "NUMBA_CACHE_DIR": os.environ.get("NUMBA_CACHE_DIR", "/tmp/ooc_nc"), **extra}


def _ooc(*args) -> list[str]:
    return [sys.executable, "-m", "ooc.cli", *map(str, args)]


def _peak(cmd: list[str], env=None) -> tuple[subprocess.CompletedProcess, int]:
    """Run ``cmd`` as the only child of a wrapper; its result and its peak resident size in bytes."""
    wrap = ("import json, resource, subprocess, sys\n"
            "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "print(json.dumps({'rc': r.returncode, 'out': r.stdout, 'err': r.stderr,\n"
            "                  'peak': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))\n")
    p = subprocess.run([sys.executable, "-c", wrap, *cmd], capture_output=True, text=True, env=env or _env(),
                       timeout=900)
    d = json.loads(p.stdout.strip().splitlines()[-1])
    return subprocess.CompletedProcess(cmd, d["rc"], d["out"], d["err"]), int(d["peak"])


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A store of about 80 MiB decoded (its blocks do not fit the limits below), and a model for evaluate."""
    d = tmp_path_factory.mktemp("ceiling")
    store = d / "s.zarr"
    subprocess.run(_ooc("synth", store, "--rows", 600_000, "--cols", 1 << 17, "--nnz-per-row", 15,
                        "--layout", "both"), check=True, capture_output=True, env=_env())
    run = d / "model"
    subprocess.run(_ooc("train", store, "--out", run, "--max-epochs", 1), check=True, capture_output=True, env=_env())
    info = json.loads(subprocess.run(_ooc("info", store, "--json"), check=True, capture_output=True, text=True,
                                     env=_env()).stdout)
    return store, run, info["memory_fit"]["families"]


def _command(cell: str, store, run, out, memory=None) -> list[str]:
    args = CELLS[cell][1]
    mem = ["--memory", str(memory)] if memory is not None else []
    if args[0] == "evaluate":
        return _ooc("evaluate", run, store, "--json", *mem)
    return _ooc("train", store, "--out", out, "--max-epochs", 2, "--json", *args[1:], *mem)


def _check_cell(big, tmp_path, cell: str, factor: float) -> None:
    store, run, fams = big
    least = int(fams[CELLS[cell][0]]["smallest_memory"])
    mem = int(least * factor)
    r, peak = _peak(_command(cell, store, run, tmp_path / f"r-{factor}", mem))
    if factor >= 1.0:
        assert r.returncode == 0, (cell, factor, r.stderr[-2000:])
        assert peak <= mem, f"{cell} at {factor} x the smallest --memory ({mem >> 20} MiB): peak {peak >> 20} MiB"
        if CELLS[cell][1][0] == "train":
            res = json.loads(r.stdout.strip().splitlines()[-1])
            assert res["memory_ceiling"] <= mem and 0 < res["peak_rss"] <= peak + (8 << 20)
    else:
        # refused before the first epoch: one line, naming a figure that works, no run directory left
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode != 0 and len(lines) == 1, (cell, r.stderr)
        assert "smallest --memory that works here is" in lines[0]
        assert not (tmp_path / f"r-{factor}").exists()


@pytest.mark.parametrize("cell", CI_CELLS)
def test_explicit_memory_is_a_ceiling(big, tmp_path, cell):
    _check_cell(big, tmp_path, cell, 1.0)


def test_below_the_smallest_is_refused(big, tmp_path):
    _check_cell(big, tmp_path, "sdca", 0.6)


def test_a_fresh_kernel_cache_is_charged(big, tmp_path):
    """Numba compiling the kernels (a new install, a fresh NUMBA_CACHE_DIR) holds more than loading them
    from its cache: the smallest figure named counts it, and a run at that figure stays under it."""
    store, run, fams = big
    env = _env(NUMBA_CACHE_DIR=str(tmp_path / "fresh-cache"))
    fresh = json.loads(subprocess.run(_ooc("info", store, "--json"), check=True, capture_output=True, text=True,
                                      env=env).stdout)["memory_fit"]["families"]
    assert fresh["rcd-primal"]["compile_bytes"] > 0
    assert fresh["rcd-primal"]["smallest_memory"] > fams["rcd-primal"]["smallest_memory"]
    mem = int(fresh["rcd-primal"]["smallest_memory"])
    r, peak = _peak(_command("rcd-primal", store, run, tmp_path / "r", mem), env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert peak <= mem, f"a fresh cache at the smallest --memory named ({mem >> 20} MiB): peak {peak >> 20} MiB"


def test_dgpd_names_what_its_fallback_needs(big):
    """dgpd whose duals turn dense goes on as sdca in the same process: the figure named holds both."""
    _, _, fams = big
    assert fams["dgpd"]["smallest_memory"] >= fams["sdca"]["smallest_memory"]


@pytest.mark.parametrize("options", [
    # (peaked 302 MiB at 297 named in a CI run: its kernels' index held the plain loss's specialization, and the
    # run at the figure compiled the shifted one uncharged; tests/test_kernel_cache_charge.py)
    ["--fit-intercept", "--l1", "1e-4"],
    ["--threads", "2", "--mix-blocks", "2"]])
def test_info_names_the_figure_of_the_options_given(big, tmp_path, options):
    """``ooc info`` takes train's options: the figure it names for them is the one train's refusal names (to
    what the two processes hold beside the work), and a run at it trains under it."""
    store, _, _ = big
    cmd = _ooc("train", store, "--out", tmp_path / "r", "--solver", "sdca", "--max-epochs", 1, *options)
    # the kernels of these options in Numba's cache first (a cache holding some of a family's kernels, as the
    # suite's shared one may, is charged by share: what compiling costs is test_a_fresh_kernel_cache_is_charged's)
    subprocess.run([*cmd, "--overwrite"], check=True, capture_output=True, env=_env())
    fit = json.loads(subprocess.run(_ooc("info", store, "--json", "--solver", "sdca", *options), check=True,
                                    capture_output=True, text=True, env=_env()).stdout)["memory_fit"]
    least = int(fit["families"]["sdca"]["smallest_memory"])
    r = subprocess.run([*cmd, "--overwrite", "--memory", str(least - (24 << 20))], capture_output=True, text=True,
                       env=_env())
    named = re.search(r"smallest --memory that works here is ([0-9.]+) MiB", r.stderr)
    assert r.returncode != 0 and named, r.stderr[-2000:]
    # the two processes' own sizes apart (predicted by info, measured by train): as scripts/fuzz_memory.py's AGREE
    assert abs(float(named.group(1)) * (1 << 20) - least) < 8 << 20, (named.group(0), least >> 20)
    r, peak = _peak([*cmd, "--overwrite", "--memory", str(least)])
    assert r.returncode == 0 and peak <= least, (r.stderr[-2000:], peak >> 20, least >> 20)


def _least(store, *options) -> int:
    fit = json.loads(subprocess.run(_ooc("info", store, "--json", *options), check=True, capture_output=True,
                                    text=True, env=_env()).stdout)["memory_fit"]
    return int(fit["families"]["sdca"]["smallest_memory"])


def _refusal_figure(cmd) -> float:
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env())
    named = re.search(r"smallest --memory that works here is ([0-9.]+) MiB", r.stderr)
    assert r.returncode != 0 and named and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    return float(named.group(1)) * (1 << 20)


@pytest.mark.xfail(strict=False, reason="open (issue 36): in a clean-clone CI run, mid-suite, ooc train measured itself "
                   "larger than ooc info predicted and refused at info's figure (named 317.9 MiB, the process "
                   "holding 252.5 MiB); both hold alone, on a fresh and a warm cache")
def test_info_names_the_figure_of_a_warm_start(big, tmp_path):
    """``ooc info --warm-start RUN``: the figure of a run that a finished run's final duals start, which hold
    ``8 k n`` bytes for the whole run where that run kept them in memory (the fixture's model did); train
    refuses below the same figure (the warm start's share of it the same in both, to 2 MiB), and a run at it
    trains under it."""
    store, run, _ = big
    n = 600_000
    warm = ["--solver", "sdca", "--warm-start", run]
    cmd = _ooc("train", store, "--out", tmp_path / "r", "--max-epochs", 1, *warm)
    subprocess.run([*cmd, "--overwrite"], check=True, capture_output=True, env=_env())  # its kernels cached
    least, plain = _least(store, *warm), _least(store, "--solver", "sdca")
    assert least - plain >= 8 * n - (1 << 20), (least >> 20, plain >> 20)
    named = _refusal_figure([*cmd, "--overwrite", "--memory", str(least - (24 << 20))])
    named_plain = _refusal_figure(_ooc("train", store, "--out", tmp_path / "p", "--max-epochs", 1, "--solver",
                                       "sdca", "--memory", str(plain - (24 << 20))))
    assert abs(named - least) < 8 << 20, (named / (1 << 20), least >> 20)
    assert abs((named - named_plain) - (least - plain)) < 2 << 20, (named - named_plain, least - plain)
    r, peak = _peak([*cmd, "--overwrite", "--memory", str(least)])
    assert r.returncode == 0 and peak <= least, (r.stderr[-2000:], peak >> 20, least >> 20)


def test_a_warm_start_that_cannot_start_the_run_is_refused_by_info(big, tmp_path):
    store, run, _ = big
    for source, why in ((tmp_path, "not a run directory"), (tmp_path / "none", "no such run directory")):
        r = subprocess.run(_ooc("info", store, "--warm-start", source), capture_output=True, text=True, env=_env())
        assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and why in r.stderr, r.stderr
        assert "warm" in r.stderr.lower() and "Traceback" not in r.stderr
    r = subprocess.run(_ooc("info", store, "--warm-start", run, "--loss", "squared"), capture_output=True, text=True,
                       env=_env())
    assert r.returncode != 0 and "its loss" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_resume_takes_memory_and_refuses_before_the_run_changes(big, tmp_path):
    """``ooc resume --memory``: this process's (the run's own by default); one too small is refused before
    run.json changes, naming the smallest that works; at that figure the resume trains under it."""
    store, _, _ = big
    run = tmp_path / "r"
    subprocess.run(_ooc("train", store, "--out", run, "--max-epochs", 1, "--threads", 1), check=True,
                   capture_output=True, env=_env())
    before = (run / "run.json").read_bytes()
    r = subprocess.run(_ooc("resume", run, "--max-epochs", 2, "--memory", "150MiB"), capture_output=True, text=True,
                       env=_env())
    named = re.search(r"smallest --memory that works here is ([0-9.]+ MiB)", r.stderr)
    assert r.returncode != 0 and named and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    assert (run / "run.json").read_bytes() == before
    r, peak = _peak(_ooc("resume", run, "--max-epochs", 2, "--memory", named.group(1).replace(" ", "")))
    assert r.returncode == 0 and peak <= float(named.group(1).split()[0]) * (1 << 20), (r.stderr[-2000:], peak)


@pytest.mark.xfail(strict=False, reason="open (issue 36): in a clean-clone CI run, mid-suite, ooc train measured itself "
                   "larger than ooc info predicted and refused at info's figure (named 317.9 MiB, the process "
                   "holding 252.5 MiB); both hold alone, on a fresh and a warm cache")
def test_dgpds_fallback_trains_at_the_figure_named(tmp_path):
    """dgpd that gives way to sdca (its active submatrix does not fit) goes on in the same process: at the
    figure ooc info names for dgpd, sdca then trains under it (dgpd's solver is gone before sdca plans)."""
    store = tmp_path / "m.zarr"
    subprocess.run(_ooc("synth", store, "--rows", 20000, "--cols", 1 << 14, "--nnz-per-row", 50, "--task",
                        "multiclass", "--classes", 20), check=True, capture_output=True, env=_env())
    fit = json.loads(subprocess.run(_ooc("info", store, "--json", "--solver", "dgpd"), check=True,
                                    capture_output=True, text=True, env=_env()).stdout)["memory_fit"]
    least = int(fit["families"]["dgpd"]["smallest_memory"])
    r, peak = _peak(_ooc("train", store, "--out", tmp_path / "r", "--solver", "dgpd", "--max-epochs", 2,
                         "--memory", least))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "sdca goes on" in r.stderr and peak <= least, (r.stderr[-2000:], peak >> 20, least >> 20)


@pytest.mark.slow
@pytest.mark.parametrize("factor", [0.6, 1.0, 1.3, 2.0])
@pytest.mark.parametrize("cell", list(CELLS))
def test_explicit_memory_is_a_ceiling_matrix(big, tmp_path, cell, factor):
    if CELLS[cell][1][0] == "evaluate" and factor < 1.0:
        pytest.skip("evaluate has no smallest figure of its own: it reads smaller blocks")
    _check_cell(big, tmp_path, cell, factor)


@pytest.mark.cgroup
def test_auto_under_the_smallest_limit_named_is_not_killed(big, tmp_path):
    require_run_capped()
    store, run, fams = big
    limit = int(fams["sdca"]["smallest_memory"])
    r = subprocess.run([RUN_CAPPED, str(limit), "--", *_command("sdca", store, run, tmp_path / "r")],
                       capture_output=True, text=True, env=_env(), timeout=900)
    m = re.search(r"oom_kills=(\d+) exit=(-?\d+)", r.stderr)
    assert m and m.group(1) == "0" and r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize("solver", ["rcd-primal", pytest.param("dgpd", marks=pytest.mark.slow)])
def test_a_fresh_cache_trains_at_the_figure_and_is_refused_just_below(tmp_path, solver):
    """A new install (an empty Numba cache): train loads every kernel its run may call (dgpd's fallback's
    too) before it plans, so that ``ooc info``'s figure counts them and a run at it, on another empty cache,
    trains under it. And train refuses exactly below the figure it names (one rule: the figure is the
    acceptance bound). Before: the kernels compiled after the plan, charged by an estimate (rcd-primal went
    8-9 % over the figure), and a limit a few MiB below the figure was taken."""
    store = tmp_path / "t.zarr"
    subprocess.run(_ooc("synth", store, "--rows", 20000, "--cols", 4, "--nnz-per-row", 4), check=True,
                   capture_output=True, env=_env())
    info_cache = _env(NUMBA_CACHE_DIR=str(tmp_path / "cache-info"))
    args = ["--solver", solver, "--max-epochs", 1]
    fit = json.loads(subprocess.run(_ooc("info", store, "--json", "--memory", "1M", *args), check=True,
                                    capture_output=True, text=True, env=info_cache).stdout)["memory_fit"]
    least = int(fit["families"][solver]["smallest_memory"])
    cmd = _ooc("train", store, "--out", tmp_path / "r", "--json", *args)
    r, peak = _peak([*cmd, "--memory", str(least)], env=_env(NUMBA_CACHE_DIR=str(tmp_path / "cache-train")))
    assert r.returncode == 0 and peak <= least, (r.stderr[-2000:], peak >> 20, least >> 20)
    # the rule (on the cache info filled: quick): the figure train names is the smallest it takes
    r = subprocess.run([*cmd, "--overwrite", "--memory", "1M"], capture_output=True, text=True, env=info_cache)
    named = re.search(r"smallest --memory that works here is ([0-9.]+) MiB", r.stderr)
    assert r.returncode != 0 and named, r.stderr[-2000:]
    own = int(float(named.group(1)) * (1 << 20))
    r = subprocess.run([*cmd, "--overwrite", "--memory", str(own - (1 << 20))], capture_output=True, text=True,
                       env=info_cache)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    assert "smallest --memory that works here is" in r.stderr
