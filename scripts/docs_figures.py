"""Draw the figures of the documentation (``docs/_static/*.png``) from data made here, in seconds.

* ``convergence.png`` (docs/training.rst): the certified relative duality gap per epoch, log scale,
  of ``sdca`` on L2 logistic regression at three ``--l2``, with ``--tol`` drawn: the gap falls
  geometrically (a straight line), faster the larger ``l2``.
* ``solvers.png`` (docs/solvers/index.rst): every solver that takes L2 logistic regression on the
  same problem, relative gap per epoch and against training time.

The data: 4000 x 500 sparse rows (``ooc.synth.SynthSource``, 10 nonzeros each, seed 0); the runs go
to a temporary directory. Deterministic but for the time axis. ::

    python scripts/docs_figures.py [--out docs/_static]
"""

from __future__ import annotations

import argparse
import os
import tempfile

ROWS, COLS, NNZ = 4000, 500, 10
TOL = 1e-6


def _read(out: str) -> list[dict]:
    import json

    with open(os.path.join(out, "history.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _axes(ax, xlabel: str) -> None:
    from matplotlib.ticker import LogFormatter, NullFormatter

    ax.set_yscale("log")
    ax.axhline(TOL, color="grey", ls=":", lw=1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("relative duality gap")
    ax.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=True))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, which="major", alpha=0.3)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                  "docs", "_static"))
    a = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    import ooc
    from ooc.synth import SynthSource

    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "s.zarr")
        ooc.convert(SynthSource(ROWS, COLS, NNZ, seed=0), store, n_features=COLS)

        fig = Figure(figsize=(6, 3.6))
        ax = fig.subplots()
        for l2 in (1e-2, 1e-3, 1e-4):  # (the first run compiles sdca: the epoch axis is not timed)
            h = _read_run(store, os.path.join(tmp, f"l2-{l2:g}"), solver="sdca", l2=l2)
            ax.plot([e["epoch"] for e in h], [e["rel_gap"] for e in h], "o-", ms=3, label=f"--l2 {l2:g}")
        _axes(ax, "epoch")
        ax.set_title(f"sdca, L2 logistic, {ROWS} x {COLS}: the gap per epoch (tol {TOL:g} dotted)", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "convergence.png"), dpi=100)

        fig = Figure(figsize=(9, 3.6))
        by_epoch, by_time = fig.subplots(1, 2)
        for solver, style in (("sdca", "o-"), ("acc-sdca", "s--"), ("rcd-dual", "^-"), ("rcd-primal", "v-"),
                              ("dgpd", "d:")):
            # once to compile the solver's kernels (Numba, in its first epoch), then the run drawn
            _read_run(store, os.path.join(tmp, solver), solver=solver, l2=1e-4, max_epochs=1)
            h = _read_run(store, os.path.join(tmp, solver), solver=solver, l2=1e-4)
            gaps = [e["rel_gap"] for e in h]
            by_epoch.plot([e["epoch"] for e in h], gaps, style, ms=3, label=solver)
            by_time.plot([e["seconds"] for e in h], gaps, style, ms=3, label=solver)
        _axes(by_epoch, "epoch")
        _axes(by_time, "training time (s)")
        by_epoch.legend(fontsize=8)
        fig.suptitle(f"L2 logistic, --l2 1e-4, {ROWS} x {COLS}: each solver to tol {TOL:g}", fontsize=9)
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "solvers.png"), dpi=100)
    print(f"wrote {a.out}/convergence.png and {a.out}/solvers.png")


def _read_run(store: str, out: str, **options) -> list[dict]:
    import warnings

    import ooc

    options.setdefault("max_epochs", 60)
    with warnings.catch_warnings():  # the warm-up's "stopped at max_epochs"
        warnings.simplefilter("ignore")
        ooc.train(store, out, overwrite=True, tol=TOL, threads=1, **options)
    return _read(out)


if __name__ == "__main__":
    main()
