"""Nothing a user made, or let ooc make, is lost by a later command the user did not let replace it.

The promise (docs/formats.rst, "Ownership"; docs/cli.rst; docs/api.rst, "Where an estimator keeps its
run"): a later command (``ooc demo`` again, ``ooc train``, ``ooc resume``, ``ooc append``, an
estimator's ``fit`` with ``run_dir``, ``ooc export --out``) leaves every run, store and file that
existed before it bit for bit as it was, unless that command was given ``--overwrite`` /
``overwrite=True`` for it, continues it (``ooc resume RUN``, ``ooc append STORE`` in place), or is
the estimator whose previous fit made that run. ``export --out -`` writes to standard output, never a
file named ``-``. The generator draws sequences of these commands over shared paths; the explicit
cases are the ones a review found.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import warnings

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import ooc
from ooc.cli import main as cli
from ooc.runs.rundir import RunError

pytestmark = pytest.mark.usefixtures("no_plot")  # the plot is not under test here (half a second a run)

TRAIN = ["--l2", "1e-2", "--tol", "1e-4", "--max-epochs", "4", "--seed", "1", "--checkpoint-every", "0"]
#: what the sequences share: the demo's folder and files, a run and a store beside it, an export
ARTIFACTS = ("d/run", "d/train.zarr", "d/test.svm", "d/train.svm.gz", "r1", "s2.zarr", "e.txt")
DEMO_FILES = ("d/run", "d/train.zarr", "d/test.svm", "d/train.svm.gz")

rng = np.random.default_rng(0)
X = rng.random((30, 5))
Y = np.where(X[:, 0] + 0.3 * rng.standard_normal(30) > 0.5, 1, -1)


def tree_digest(path: str) -> str | None:
    """Names and bytes of everything under ``path`` (None: nothing there)."""
    if not os.path.lexists(path):
        return None
    h = hashlib.sha256()
    if os.path.isfile(path):
        h.update(open(path, "rb").read())
        return h.hexdigest()
    for top, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(top, name)
            h.update(os.path.relpath(full, path).encode() + b"\0")
            h.update(open(full, "rb").read())
    return h.hexdigest()


def invoke(args) -> int:
    r = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=True)
    assert r.exit_code in (0, 1, 2), (args, r.exit_code, r.output, r.exception)
    if r.exit_code:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("ooc: warning")]
        assert len(lines) == 1 and lines[0].startswith("ooc: error: "), (args, r.stderr)
    return r.exit_code


# steps: (command, target, overwrite, same) -- `same`: the estimator of the previous fit at that run_dir
STEPS = st.one_of(
    st.tuples(st.just("demo"), st.just("d"), st.booleans(), st.just(False)),
    st.tuples(st.just("train"), st.sampled_from(["r1", "d/run"]), st.booleans(), st.just(False)),
    st.tuples(st.just("resume"), st.sampled_from(["r1", "d/run"]), st.just(False), st.booleans()),
    st.tuples(st.just("append"), st.sampled_from(["s2.zarr", "d/train.zarr"]), st.booleans(), st.just(False)),
    st.tuples(st.just("fit"), st.sampled_from(["r1", "d/run"]), st.booleans(), st.booleans()),
    st.tuples(st.just("export"), st.sampled_from(["-", "e.txt"]), st.booleans(), st.just(False)),
)


class World:
    """The shared paths, the estimators that fitted at each run_dir, and the step that runs a command."""

    def __init__(self, root: str):
        self.root = root
        self.more = self.p("more.svm")
        with open(self.more, "w") as f:
            f.write("1 1:0.5 7:0.25\n-1 2:0.5 9:1\n")
        #: run_dir -> the estimator whose fit made the run there (none once another command replaced it)
        self.made_by: dict[str, object] = {}

    def p(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def run(self, cmd: str, target: str, overwrite: bool, same: bool) -> set[str]:
        """Run one step; return the artifacts it was allowed to change."""
        flag = ["--overwrite"] if overwrite else []
        allowed: set[str] = set()
        if cmd == "demo":
            ok = invoke(["demo", "--dir", self.p("d"), "--rows", "40", *flag]) == 0
            allowed = set(DEMO_FILES) if overwrite else set()
            if ok:
                self.made_by.pop("d/run", None)
        elif cmd == "train":
            ok = invoke(["train", self.p("d/train.zarr"), "--out", self.p(target), *TRAIN, *flag]) == 0
            allowed = {target} if overwrite else set()
            if ok:
                self.made_by.pop(target, None)
        elif cmd == "resume":  # continuing a run is asked for by name; a growth onto s2.zarr too
            extra = ["--store", self.p("s2.zarr")] if same else []
            invoke(["resume", self.p(target), *extra])
            allowed = {target}
        elif cmd == "append":
            out = [] if target == "d/train.zarr" else ["--out", self.p(target), *flag]
            invoke(["append", self.p("d/train.zarr"), self.more, *out])
            allowed = {target} if (overwrite or target == "d/train.zarr") else set()
        elif cmd == "fit":
            est = self.made_by.get(target) if same else None
            if est is None:
                est = ooc.LinearClassifier(l2=1e-2, max_epochs=3, run_dir=self.p(target))
            if overwrite or "overwrite" in est.get_params():
                est.set_params(overwrite=overwrite)
            owner = self.made_by.get(target) is est
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est.fit(X, Y)
                self.made_by[target] = est
            except RunError as exc:
                assert self.p(target) in str(exc) and "\n" not in str(exc)
            allowed = {target} if (overwrite or owner) else set()
        elif cmd == "export":
            invoke(["export", self.p("d/run"), "--format", "text", "--out",
                    "-" if target == "-" else self.p(target), *flag])
            allowed = {target} if (overwrite and target != "-") else set()
        return allowed


def check_sequence(steps) -> None:
    root = tempfile.mkdtemp(prefix="ooc-later-")
    cwd = os.getcwd()
    os.chdir(root)  # a relative `-` lands here if it is ever taken as a file name
    try:
        world = World(root)
        for step in steps:
            before = {a: tree_digest(world.p(a)) for a in ARTIFACTS}
            allowed = world.run(*step)
            for a, digest in before.items():
                if digest is not None and a not in allowed:
                    assert tree_digest(world.p(a)) == digest, (step, a, "replaced without being let")
            assert not os.path.lexists(os.path.join(root, "-")), (step, "a file named '-'")
    finally:
        os.chdir(cwd)
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=int(os.environ.get("OOC_LATER_EXAMPLES", "2")), deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(STEPS, min_size=2, max_size=4))
@example([("demo", "d", False, False), ("demo", "d", False, False)])  # a second demo over the first
# an estimator over the demo's run; `-` taken as a file name
@example([("demo", "d", False, False), ("fit", "d/run", False, False), ("export", "-", False, False)])
@example([("fit", "r1", False, False), ("fit", "r1", False, False)])  # another estimator's run
def test_a_later_command_replaces_only_what_it_was_let(steps):
    check_sequence(steps)


# -- the estimators' rule, one case each ------------------------------------------------------------------
def test_estimator_refits_its_own_run_and_refuses_others(tmp_path):
    d = str(tmp_path / "run")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = ooc.LinearClassifier(l2=1e-2, max_epochs=3, run_dir=d).fit(X, Y)
        est.fit(X, Y)  # its own run: replaced
        est.partial_fit(X, Y)
        other = ooc.LinearRegressor(l2=1e-2, max_epochs=3, run_dir=d)
        before = tree_digest(d)
        for call in (lambda: other.fit(X, Y.astype(float)), lambda: other.partial_fit(X, Y.astype(float))):
            with pytest.raises(RunError, match="overwrite=True") as e:
                call()
            assert d in str(e.value) and tree_digest(d) == before
        with pytest.raises(ValueError, match="overwrite="):
            ooc.LinearClassifier(overwrite="yes").fit(X, Y)  # checked whether or not run_dir is set
        other.set_params(overwrite=True).fit(X, Y.astype(float))
        assert tree_digest(d) != before and other.get_params()["overwrite"] is True


def test_a_search_with_run_dir_fails_in_one_line_instead_of_replacing_runs(tmp_path):
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV

    d = str(tmp_path / "run")
    est = ooc.LinearClassifier(l2=1e-2, max_epochs=3, run_dir=d)
    assert "_run_made" not in clone(est).__dict__
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RunError, match="clone"):
            GridSearchCV(est, {"l1": [0.0, 1e-3]}, cv=2, n_jobs=1).fit(X, Y)


# -- partial_fit's count of passes ------------------------------------------------------------------------
def test_partial_fit_counts_the_passes_it_runs():
    """The docstring's rule: a call adds a pass, but none once the gap is 0 (np.eye(2) gets there at once)."""
    doc = " ".join(ooc.LinearRegressor.partial_fit.__doc__.split())
    assert "exactly one epoch" not in doc and "once the duality gap is 0" in doc
    for Xs, ys in ((np.eye(2), np.array([1.0, -1.0])), (np.ones((2, 1)), np.ones(2))):
        est = ooc.LinearRegressor(l2=1.0)
        for _ in range(4):
            gap_before = getattr(est, "gap_", None)
            n_before = getattr(est, "n_iter_", 0)
            est.partial_fit(Xs, ys)
            assert est.n_iter_ == n_before + (0 if gap_before == 0.0 else 1)
            assert est.n_iter_ == est.history_[-1]["epoch"]


# -- export to standard output ----------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["liblinear", "text", "sklearn"])
def test_export_dash_is_standard_output(tmp_path, monkeypatch, fmt):
    d = str(tmp_path / "run")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ooc.LinearClassifier(l2=1e-2, max_epochs=3, run_dir=d).fit(X, Y)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["export", d, "--format", fmt, "--out", "-"])
    assert r.exit_code == 0 and not os.path.lexists(tmp_path / "-")
    assert invoke(["export", d, "--format", fmt, "--out", tmp_path / "f"]) == 0
    assert r.stdout_bytes == (tmp_path / "f").read_bytes()
    assert "standard output" in r.stderr
    r = CliRunner().invoke(cli, ["export", d, "--format", fmt, "--out", "-", "--json"])
    assert r.exit_code == 1 and "--json" in r.stderr and r.stdout == ""


def test_demo_twice_needs_overwrite_and_keeps_the_rest(tmp_path):
    d = tmp_path / "d"
    assert invoke(["demo", "--dir", d, "--rows", "40"]) == 0
    (d / "mine.txt").write_text("mine\n")
    run_before = tree_digest(str(d / "run"))
    r = CliRunner().invoke(cli, ["demo", "--dir", str(d), "--rows", "40"])
    assert r.exit_code == 1 and str(d) in r.stderr and "--overwrite" in r.stderr
    assert tree_digest(str(d / "run")) == run_before
    assert invoke(["demo", "--dir", d, "--rows", "40", "--overwrite"]) == 0
    assert tree_digest(str(d / "run")) != run_before and (d / "mine.txt").read_text() == "mine\n"
