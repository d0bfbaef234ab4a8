"""Progress of train / predict / evaluate: on a terminal or with -v only; the train bar follows the gap."""

from __future__ import annotations

import numpy as np
import pytest
from test_cli import cli

import ooc
from ooc.progress import gap_fraction


def test_gap_fraction_is_log_scale_to_tol():
    assert gap_fraction(1.0, 1.0, 1e-6) == 0.0
    assert gap_fraction(1.0, 1e-3, 1e-6) == pytest.approx(0.5)
    assert gap_fraction(1e-2, 1e-4, 1e-6) == pytest.approx(0.5)
    assert gap_fraction(1.0, 1e-7, 1e-6) == 1.0  # converged
    assert gap_fraction(1.0, 3.0, 1e-6) == 0.0  # the gap grew: not below the start
    assert gap_fraction(1e-7, 1e-7, 1e-6) == 1.0


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    import scipy.sparse as sp

    root = tmp_path_factory.mktemp("progress")
    rng = np.random.default_rng(2)
    X = sp.random(200, 10, density=0.4, random_state=2, format="csr", data_rvs=rng.standard_normal)
    y = np.where(X @ rng.standard_normal(10) > 0, 1.0, -1.0)
    store = str(root / "s.zarr")
    # index_base=0: svmlight files read against its models are dumped 0-based (zero_based=True)
    ooc.convert(X, store, y=y, dtype="float64", index_base=0)
    return root, store


def test_bars_only_when_asked_and_the_not_converged_line_gives_the_command(small):
    root, store = small
    run = root / "run"
    quiet = cli("train", store, "--out", run, "--l2", "1e-4", "--tol", "1e-12", "--max-epochs", "1")
    assert quiet.stderr == ""  # not a terminal: no bar
    # the command that continues the run: in the "why" line's advice, else its own line
    assert f"'ooc resume {run} --max-epochs " in quiet.stdout or f"to continue: ooc resume {run} --max-epochs 2" in quiet.stdout
    loud = cli("resume", run, "--max-epochs", "2", "-v")
    assert "gap" in loud.stderr and "tol 1e-12" in loud.stderr and "epoch 2/2" in loud.stderr
    for cmd in ("evaluate", "predict"):
        assert cli(cmd, run, store).stderr == ""
        assert f"{cmd}:" in cli(cmd, run, store, "-v").stderr


class _Events:
    """A progress display that takes the epoch's share done (``within``) and the history entries."""

    def __init__(self):
        self.events = []

    def __call__(self, h):
        self.events.append(("end", int(h["epoch"])))

    def within(self, epoch, fraction):
        self.events.append(("within", int(epoch), fraction))


# every solver family's epoch loop: row groups (sdca and the solvers on its pass), column blocks
# (rcd-primal / rcd-dual), active-set rounds class by class (dgpd, one-vs-rest so two classes)
@pytest.mark.parametrize("solver,extra", [
    ("sdca", {}), ("acc-sdca", {}), ("rcd-primal", {"l1": 1e-3}), ("rcd-dual", {}),
    ("dgpd", {"l1": 1e-3, "loss": "hinge"}),
])
def test_progress_moves_inside_an_epoch(small, solver, extra):
    """Invariant: before each epoch's history entry, the display is told fractions in [0, 1] that
    do not decrease within the epoch, at least one strictly between 0 and 1."""
    root, store = small
    ev = _Events()
    ooc.train(store, str(root / f"within-{solver}"), overwrite=True, progress=ev, solver=solver,
              l2=1e-3, tol=1e-12, max_epochs=3, block_bytes=2048, mix_blocks=1, **extra)
    ends = [i for i, e in enumerate(ev.events) if e[0] == "end"]
    assert len(ends) >= 2
    inside = [e for e in ev.events[ends[0] + 1:ends[1]] if e[0] == "within"]
    assert inside, ev.events
    fr = [e[2] for e in inside]
    assert all(0.0 <= f <= 1.0 for f in fr) and fr == sorted(fr) and any(0.0 < f < 1.0 for f in fr)


def test_log_lines_go_above_the_bar_whole(small):
    """Invariant: every ``ooc:`` line written while the bar is shown starts a line of its own (after
    the bar's carriage return and clearing) and holds no bar text: no line is glued to the bar."""
    root, store = small
    # small blocks, one a group: the bar also moves inside the epochs (before the first gap, too)
    res = cli("train", store, "--out", root / "loud", "--overwrite", "--l2", "1e-4", "--tol", "1e-12",
              "--max-epochs", "3", "--solver", "sdca", "--block-bytes", "2048", "--mix-blocks", "1", "-v")
    assert "train:" in res.stderr and "ooc: memory" in res.stderr, res.stderr
    for line in res.stderr.split("\n"):
        for seg in line.split("\r"):
            if "ooc:" in seg:
                assert seg.startswith("ooc:") and "train:" not in seg, repr(line)


def test_eta_from_the_gap_rate_and_the_epoch_limit():
    """The estimate: epochs left is the fewer of max-epochs less the epoch and log(gap / tol) / rate."""
    from ooc.progress import EpochProgress

    p = EpochProgress(False, 1e-6, 100)
    p({"epoch": 0, "rel_gap": 1e-2})
    assert p.epochs_left() == 100  # one gap: no rate yet
    p({"epoch": 2, "rel_gap": 1e-4})  # a factor of 10 an epoch
    assert p.epochs_left() == pytest.approx(2.0)
    p = EpochProgress(False, 1e-6, 5)
    p({"epoch": 0, "rel_gap": 1e-2})
    p({"epoch": 1, "rel_gap": 0.9e-2})
    assert p.epochs_left() == 4  # the limit comes first
    assert p.eta(0.5) is not None and p.eta(0.5) >= 0
    fresh = EpochProgress(False, 1e-6, 5)
    assert fresh.epochs_left() is None and fresh.eta(0.5) is None  # nothing certified yet


def test_the_bar_moves_before_the_first_gap_and_shows_the_eta(monkeypatch, capsys):
    """The bar itself (tqdm on stderr): an epoch's share before any gap is known moves it, and once
    two gaps are known its line shows the ETA."""
    from ooc.progress import EpochProgress

    p = EpochProgress(True, 1e-6, 10)
    p.within(0, 0.5)
    p({"epoch": 0, "rel_gap": 1e-2})
    p.within(1, 0.5)
    p({"epoch": 1, "rel_gap": 1e-3})
    p.within(2, 0.5)
    moved = p.bar.n
    p.close()
    err = capsys.readouterr().err
    assert moved > 0 and "ETA" in err and "epoch 1/10" in err


def test_the_bar_never_moves_back_within_a_run():
    """Whatever the gaps (rising ones too: momentum, a pass short of its expected step) and the
    shares of epochs reported between them, the bar's position only grows (it went 24% -> 0%)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from ooc.progress import EpochProgress

    steps = st.lists(st.one_of(st.tuples(st.just("gap"), st.floats(1e-9, 10.0)),
                               st.tuples(st.just("within"), st.floats(0.0, 1.0))), min_size=2, max_size=30)

    @settings(max_examples=60, deadline=None, derandomize=True)
    @given(steps=steps, tol=st.sampled_from([None, 1e-6]), limit=st.sampled_from([None, 20]))
    def run(steps, tol, limit):
        p = EpochProgress(True, tol, limit)
        p.bar.disable = True  # (positions only: nothing drawn)
        epoch, seen = 0, []
        for kind, x in steps:
            if kind == "gap":
                p({"epoch": epoch, "rel_gap": x})
                epoch += 1
            else:
                p.within(epoch, x)
            seen.append(p.bar.n)
        p.close()
        assert seen == sorted(seen), seen

    run()
    # the case reported: a within-epoch step moved the bar, then the next certificate's gap was higher
    p = EpochProgress(True, 1e-6, 100)
    p.bar.disable = True
    p({"epoch": 0, "rel_gap": 1.0})
    p({"epoch": 1, "rel_gap": 1e-2})
    p.within(2, 0.9)
    before = p.bar.n
    p({"epoch": 2, "rel_gap": 0.5})
    assert before > 0 and p.bar.n == before
    p.close()


@pytest.mark.parametrize("kind", ["store", "svmlight"])
@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_the_reading_bar_starts_before_the_first_piece_is_read(small, kind, command):
    """predict / evaluate tell their bar that reading starts (0 of the input's size) before the first
    piece is parsed: a text file is read in pieces of up to 64 MB, and a bar made at the first piece
    showed nothing during the whole first read (and nothing at all for a file of one piece, whose
    bar was made and cleared at its end). Whether there is a bar is one rule for every command:
    stderr a terminal, or -v (ooc.progress.wanted)."""
    from sklearn.datasets import dump_svmlight_file

    from ooc.evaluate import evaluate, iter_predictions

    root, store = small
    run = root / f"run-read-{kind}-{command}"
    cli("train", store, "--out", run, "--l2", "1e-2", "--max-epochs", "2")
    source = store
    if kind == "svmlight":
        st = ooc.open_store(store)
        source = str(root / "rows.svm")
        dump_svmlight_file(st.to_scipy("rows"), st.labels, source, zero_based=True)
    events = []
    if command == "predict":
        for _ in iter_predictions(str(run), source, progress=events.append):
            pass
    else:
        evaluate(str(run), source, progress=events.append)
    first, last = events[0], events[-1]
    assert first["done"] == 0 and first["rows"] == 0 and first["total"] > 0, events
    assert first["unit"] == last["unit"] and last["done"] == last["total"] and len(events) >= 2
