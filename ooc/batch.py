"""``ooc batch``: many trainings (grids, regularization paths) as Dask tasks.

A spec is a TOML file::

    [batch]
    out = "grid-out"              # folder of run directories (relative to the spec file)
    validation = "valid.svm"      # optional: evaluated after each run, sorts the summary

    [grid]                        # every combination is one run; keys are `ooc train` options
    store = ["data.zarr"]
    loss = ["logistic", "hinge"]
    l2 = [1e-4, 1e-5, 1e-6]

    [path]                        # optional: one task that walks l2 from large to small,
    store = "data.zarr"           # warm-starting each run from the previous one
    l2 = [1e-2, 1e-3, 1e-4]
    loss = "logistic"

Every run is an ordinary run directory (``ooc resume`` works on it). A failing
run is recorded with its error and does not stop the others; running the same
batch again skips finished runs and resumes interrupted ones.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import os
import sys
import time

from .config import defaults, option_names
from .dask_client import dask_client
from .objectives.losses import REGRESSION_LOSSES

RESULT_COLUMNS = ["run", "store", "loss", "l2", "l1", "solver", "status", "primal", "gap", "epochs", "seconds",
                  "converged", "validation", "error"]
#: Options a spec may set per run (:class:`ooc.config.TrainConfig`'s fields, with ``store``).
SPEC_KEYS = set(option_names()) | {"store"}
DEFAULTS = defaults()


class SpecError(ValueError):
    """The batch spec is malformed (message names the file and the key)."""


def _load_toml(path: str) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the batch spec ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: invalid TOML: {exc}") from None


def load_spec(path: str) -> dict:
    """Read and check a batch spec; relative paths are resolved against the spec's folder."""
    raw = _load_toml(path)
    base = os.path.dirname(os.path.abspath(path))
    batch = raw.get("batch")
    if not isinstance(batch, dict) or "out" not in batch:
        raise SpecError(f"{path}: needs a [batch] table with 'out' (the folder of run directories)")
    if "grid" not in raw and "path" not in raw:
        raise SpecError(f"{path}: needs a [grid] or a [path] table")
    for table in ("grid", "path"):
        t = raw.get(table, {})
        bad = set(t) - SPEC_KEYS
        if bad:
            raise SpecError(f"{path}: [{table}] has unknown key(s) {', '.join(sorted(bad))}; "
                            f"allowed: {', '.join(sorted(SPEC_KEYS))}")
        if t and "store" not in t:
            raise SpecError(f"{path}: [{table}] needs 'store'")

    def resolve(p):
        return p if "://" in p or os.path.isabs(p) else os.path.join(base, p)

    spec = {"out": resolve(batch["out"]), "validation": resolve(batch["validation"]) if batch.get("validation") else None,
            "source": os.path.abspath(path), "grid": None, "path": None}
    if "grid" in raw:
        grid = {k: (v if isinstance(v, list) else [v]) for k, v in raw["grid"].items()}
        for k, v in grid.items():
            if not v:
                raise SpecError(f"{path}: [grid] {k} is an empty list")
        grid["store"] = [resolve(s) for s in grid["store"]]
        spec["grid"] = grid
    if "path" in raw:
        p = dict(raw["path"])
        if not isinstance(p.get("l2"), list) or not p["l2"]:
            raise SpecError(f"{path}: [path] needs l2 = [list of values]")
        for k, v in p.items():
            if k != "l2" and isinstance(v, list):
                raise SpecError(f"{path}: [path] {k} must be a single value (only l2 is a list)")
        p["store"] = resolve(p["store"])
        p["l2"] = sorted((float(x) for x in p["l2"]), reverse=True)
        spec["path"] = p
    return spec


def run_name(options: dict) -> str:
    """A stable directory name for a run: the same options give the same name on every re-run."""
    key = json.dumps(options, sort_keys=True, default=str)
    h = hashlib.blake2b(key.encode(), digest_size=5).hexdigest()
    parts = [options.get("loss", DEFAULTS["loss"]), f"l2={options.get('l2', DEFAULTS['l2']):g}"]
    if options.get("l1"):
        parts.append(f"l1={options['l1']:g}")
    if options.get("solver") and options.get("solver") != "auto":
        parts.append(options["solver"])
    return "-".join(str(p) for p in parts) + f"-{h}"


def expand_grid(grid: dict) -> list[dict]:
    keys = sorted(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def _row(run_dir: str, options: dict, **fields) -> dict:
    row = {c: "" for c in RESULT_COLUMNS}
    row.update({"run": os.path.basename(run_dir), "store": options.get("store", ""),
                "loss": options.get("loss", DEFAULTS["loss"]), "l2": options.get("l2", DEFAULTS["l2"]),
                "l1": options.get("l1", DEFAULTS["l1"]), "solver": options.get("solver", DEFAULTS["solver"])})
    row.update(fields)
    return row


def run_one(run_dir: str, options: dict, validation: str | None = None, warm_start: str | None = None) -> dict:
    """Train (or resume, or skip) one run; never raises: failures become a ``failed`` row."""
    import warnings

    from .evaluate import evaluate
    from .train import resume, train

    t0 = time.perf_counter()
    try:
        metrics_path = os.path.join(run_dir, "model", "metrics.json")
        if os.path.exists(metrics_path):
            with open(metrics_path) as f:
                res = json.load(f)
            state = "skipped"
        else:
            opts = {k: v for k, v in options.items() if k != "store"}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if os.path.exists(os.path.join(run_dir, "run.json")):
                    res = resume(run_dir).result
                    state = "resumed"
                else:
                    extra = {"warm_start": warm_start} if warm_start else {}
                    res = train(options["store"], run_dir, overwrite=True, **extra, **opts).result
                    state = "trained"
        val = ""
        if validation:
            m = evaluate(run_dir, validation)
            val = m.get("accuracy", m.get("rmse"))
        return _row(run_dir, options, status="ok", primal=res["primal"], gap=res["gap"], epochs=res["epochs"],
                    seconds=res["seconds"], converged=res["converged"], validation=val, state=state)
    except Exception as exc:  # a broken run is reported, never fatal to the batch
        msg = (str(exc).splitlines() or [type(exc).__name__])[0]
        return _row(run_dir, options, status="failed", error=f"{type(exc).__name__}: {msg}",
                    seconds=time.perf_counter() - t0)


def run_path(out: str, path_spec: dict, validation: str | None = None) -> list[dict]:
    """A regularization path as one task: each l2 warm-started from the previous run."""
    rows = []
    prev = None
    base = {k: v for k, v in path_spec.items() if k != "l2"}
    for l2 in path_spec["l2"]:
        options = dict(base, l2=l2)
        rd = os.path.join(out, "path-" + run_name(options))
        row = run_one(rd, options, validation, warm_start=prev)
        rows.append(row)
        prev = rd if row["status"] == "ok" else None
    return rows


def _client(scheduler: str | None, workers: int | None):
    return dask_client(scheduler, workers or min(4, os.cpu_count() or 1), needed_by="ooc batch")


def run_batch(spec_path: str, scheduler: str | None = None, workers: int | None = None, progress=None) -> list[dict]:
    """Run every run of a spec on Dask; writes ``OUT/results.csv``, ``summary.md``, ``comparison.png``."""
    spec = load_spec(spec_path)
    out = spec["out"]
    os.makedirs(out, exist_ok=True)
    jobs = []
    for options in expand_grid(spec["grid"]) if spec["grid"] else []:
        jobs.append(("run", os.path.join(out, run_name(options)), options))
    if spec["path"]:
        jobs.append(("path", out, spec["path"]))
    from distributed import as_completed

    client, cluster = _client(scheduler, workers)
    rows: list[dict] = []
    try:
        futures = {}
        for kind, target, options in jobs:
            if kind == "run":
                f = client.submit(run_one, target, options, spec["validation"], pure=False)
            else:
                f = client.submit(run_path, target, options, spec["validation"], pure=False)
            futures[f] = (kind, target, options)
        n_runs = sum(1 if k == "run" else len(o["l2"]) for k, _, o in jobs)
        if progress:
            progress({"done": 0, "failed": 0, "total": n_runs, "running": len(futures)})
        for f in as_completed(futures):
            kind, target, options = futures[f]
            try:
                got = f.result()
                got = got if isinstance(got, list) else [got]
            except Exception as exc:  # the worker died (KilledWorker) or the task could not run
                msg = (str(exc).splitlines() or [type(exc).__name__])[0]
                if kind == "run":
                    got = [_row(target, options, status="failed", error=f"{type(exc).__name__}: {msg}")]
                else:
                    base = {k: v for k, v in options.items() if k != "l2"}
                    got = [_row(os.path.join(target, "path-" + run_name(dict(base, l2=l2))), dict(base, l2=l2),
                                status="failed", error=f"{type(exc).__name__}: {msg}") for l2 in options["l2"]]
            rows.extend(got)
            write_results(out, rows)
            if progress:
                progress({"done": sum(r["status"] == "ok" for r in rows),
                          "failed": sum(r["status"] == "failed" for r in rows),
                          "total": n_runs, "running": sum(not g.done() for g in futures)})
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    write_results(out, rows)
    write_summary(out, rows, spec["validation"])
    return rows


def write_results(out: str, rows: list[dict]) -> None:
    """``OUT/results.csv``, one row per run, replaced atomically."""
    path = os.path.join(out, "results.csv")
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=RESULT_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in sorted(rows, key=lambda r: r["run"]):
            w.writerow(r)
    os.replace(tmp, path)


def write_summary(out: str, rows: list[dict], validation: str | None) -> None:
    """``OUT/summary.md`` (sorted by the validation metric when there is one) and ``comparison.png``."""
    ok = [r for r in rows if r["status"] == "ok"]
    if validation and ok:
        regression = any(r["loss"] in REGRESSION_LOSSES for r in ok)
        ok.sort(key=lambda r: (float(r["validation"]) if r["validation"] != "" else float("inf"))
                * (1 if regression else -1))
    else:
        ok.sort(key=lambda r: float(r["primal"]))
    lines = [f"# ooc batch summary ({len(ok)} ok, {len(rows) - len(ok)} failed)", ""]
    cols = ["run", "loss", "l2", "l1", "solver", "primal", "gap", "epochs", "seconds", "converged"]
    if validation:
        cols.append("validation")
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for r in ok:
        lines.append("| " + " | ".join(_fmt(r[c]) for c in cols) + " |")
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines += ["", "## Failed runs", ""]
        lines += [f"- `{r['run']}`: {r['error']}" for r in failed]
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    try:
        _plot_comparison(out, ok)
    except Exception as exc:  # pragma: no cover - a plot never fails a batch
        print(f"ooc batch: could not draw comparison.png: {exc}", file=sys.stderr)


def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def _plot_comparison(out: str, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .runs.rundir import RunDir

    fig, ax = plt.subplots(figsize=(8, 5))
    for r in rows:
        rd = os.path.join(out, r["run"])
        if not os.path.isdir(rd):
            continue
        h = RunDir(rd).history()
        if h:
            ax.semilogy([e["seconds"] for e in h], [max(e["gap"], 1e-16) for e in h], "-", label=r["run"])
    ax.set_xlabel("training time (s)")
    ax.set_ylabel("duality gap")
    ax.grid(True, which="both", alpha=0.3)
    if len(rows) <= 12:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "comparison.png"), dpi=90)
    plt.close(fig)
