"""What a new user meets first: integer targets, nested outputs, the progress of ``synth``, the docs
on weighted Vowpal Wabbit rows.

* Integer targets are classes under ``--label-kind auto``; a regression loss on such a store is
  refused in one line naming ``--label-kind regression`` and the number of classes read.
* Every command with ``--out`` makes the missing parent directories of its output (``mkdir -p``),
  and refuses one line naming the file that stands where a directory should be.
* ``synth`` (nothing parsed) shows its progress in rows, not "0.00B parsed".
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import ooc
from ooc.cli import main
from ooc.objectives.losses import LOSS_REGISTRY

REGRESSION_LOSSES = sorted(n for n, s in LOSS_REGISTRY.items() if not s.classification)
DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


def cli(*args, data=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=data, catch_exceptions=True)


def one_line(res) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.exit_code not in (0, None) and len(lines) == 1 and lines[0].startswith("ooc: error: "), \
        (res.exit_code, res.stderr, res.exception)
    assert "internal error" not in lines[0], lines[0]
    return lines[0]


#: the regression losses --loss takes: those built in (a test that registers another loss, tests/test_extending,
#: may run before this one in the same process; the command line's choices were read at import)
BUILTIN_REGRESSION_LOSSES = tuple(sorted(n for n in REGRESSION_LOSSES if n in ("squared",)))


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(k=st.integers(3, 300), low=st.integers(-50, 2000), loss=st.sampled_from(BUILTIN_REGRESSION_LOSSES),
       seed=st.integers(0, 9))
def test_integer_targets_and_a_regression_loss_name_label_kind_regression(tmp_path_factory, k, low, loss, seed):
    tmp = tmp_path_factory.mktemp("reg")
    rng = np.random.default_rng(seed)
    n = max(2 * k, 40)
    y = low + rng.permutation(np.resize(np.arange(k), n))  # k distinct integers
    with open(tmp / "d.svm", "w") as f:
        for v in y:
            f.write(f"{v} 1:{rng.random():.3f} 2:{rng.random():.3f}\n")
    assert cli("convert", tmp / "d.svm", tmp / "s.zarr").exit_code == 0
    err = one_line(cli("train", tmp / "s.zarr", "--out", tmp / "r", "--loss", loss))
    assert "--label-kind regression" in err and f"{k} classes" in err and f"--loss {loss}" in err, err
    assert not os.path.exists(tmp / "r")
    # what the message says works
    assert cli("convert", tmp / "d.svm", tmp / "g.zarr", "--label-kind", "regression").exit_code == 0
    res = cli("train", tmp / "g.zarr", "--out", tmp / "r", "--loss", loss, "--l2", "1e-2", "--max-epochs", "3")
    assert res.exit_code == 0, res.stderr


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("out")
    rng = np.random.default_rng(1)
    with open(tmp / "d.svm", "w") as f:
        for i in range(60):
            f.write(f"{1 if i % 2 else -1} 1:{rng.random():.3f} 2:{rng.random():.3f} 3:{rng.random():.3f}\n")
    assert cli("convert", tmp / "d.svm", tmp / "s.zarr").exit_code == 0
    ooc.train(str(tmp / "s.zarr"), str(tmp / "run"), l2=1e-2)
    return tmp


#: every command with --out: (the arguments before --out, what --out is)
OUT_COMMANDS = {
    "train": lambda t: ["train", t / "s.zarr", "--l2", "1e-2", "--max-epochs", "2"],
    "predict": lambda t: ["predict", t / "run", t / "d.svm"],
    "export": lambda t: ["export", t / "run", "--format", "text"],
    "append": lambda t: ["append", t / "s.zarr", t / "d.svm"],
}


def test_every_command_with_out_is_checked_here():
    opts = {name for name, cmd in main.commands.items() if any("--out" in p.opts for p in cmd.params)}
    assert opts == set(OUT_COMMANDS), opts


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(command=st.sampled_from(sorted(OUT_COMMANDS)), depth=st.integers(1, 3),
       blocked=st.sampled_from([None, 0, 1]))
def test_out_makes_its_missing_parents(made, command, depth, blocked):
    import uuid

    base = made / f"o-{uuid.uuid4().hex[:8]}"
    parents = [base.joinpath(*[f"p{i}" for i in range(j + 1)]) for j in range(depth)]
    out = parents[-1] / "result"
    if blocked is not None and blocked < depth:
        # a file where a parent directory should be: refused, naming it; nothing made below it
        parents[blocked].parent.mkdir(parents=True, exist_ok=True)
        parents[blocked].write_text("a file")
        err = one_line(cli(*OUT_COMMANDS[command](made), "--out", out))
        assert "not a directory" in err and str(parents[blocked]) in err, err
        return
    res = cli(*OUT_COMMANDS[command](made), "--out", out)
    assert res.exit_code == 0, (command, res.stderr, res.exception)
    assert os.path.exists(out)


def test_synth_progress_counts_rows_not_bytes(tmp_path):
    res = cli("synth", tmp_path / "s.zarr", "--rows", "3000", "--cols", "50", "--nnz-per-row", "4", "-v")
    assert res.exit_code == 0, res.stderr
    assert "0.00B" not in res.stderr and "3.00k/3.00k" in res.stderr.replace("\r", "\n"), res.stderr


def test_weighted_vw_rows_are_kept_as_the_docs_say(tmp_path):
    vw = tmp_path / "w.vw"
    vw.write_text("1 2.5 | a b\n-1 | c\n1 0.5 | a c\n")
    assert cli("convert", vw, tmp_path / "w.zarr").exit_code == 0
    st_ = ooc.open_store(str(tmp_path / "w.zarr"))
    assert st_.has_weights
    with open(os.path.join(DOCS, "formats.rst")) as f:
        text = " ".join(f.read().split())
    assert "refused in one line naming the first weighted row" not in text
    assert "importance weights other than 1 are kept" in text
