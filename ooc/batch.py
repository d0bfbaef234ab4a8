"""``ooc batch``: many trainings (grids, regularization paths) as Dask tasks.

A spec is a TOML file::

    [batch]
    out = "grid-out"              # folder of run directories (relative to the spec file)
    validation = "valid.svm"      # optional: scored at every epoch of each run, sorts the summary

    [grid]                        # every combination is one run; keys are `ooc train` options
    store = ["data.zarr"]
    loss = ["logistic", "hinge"]
    l2 = [1e-4, 1e-5, 1e-6]

    [path]                        # optional: one task that walks l2 from large to small,
    store = "data.zarr"           # warm-starting each run from the previous one
    l2 = [1e-2, 1e-3, 1e-4]
    loss = "logistic"

:func:`load_spec` checks the whole spec before any run starts; a mistake is one line
(:class:`SpecError`) naming the spec file, the table, the key and the bad value:

- the tables are ``[batch]`` (keys ``out``, ``validation``: strings), ``[grid]`` and
  ``[path]``; any other table or key is refused (a typo would otherwise be ignored);
- ``[grid]`` and ``[path]`` keys are ``store`` (a string) and ``ooc train``'s options, typed
  as :class:`ooc.config.TrainConfig` declares them: a number is an integer or a float, never
  a TOML boolean (``tol = true`` is refused, not read as 1.0); an integer option takes TOML
  integers only; a string option with choices takes one of them (as ``ooc train`` does);
- a ``[grid]`` value is a list of such values; a single value is accepted as a list of one
  (``loss = "hinge"`` is ``loss = ["hinge"]``); lists are not empty and hold no value twice
  (two equal runs would share one run directory). ``[path]`` values are single values, but
  ``l2``, a non-empty list;
- every run the spec makes is built as a :class:`~ooc.config.TrainConfig` (which checks the
  values and their combinations that need no store, e.g. ``--l2 0`` with a solver that has no
  pure-L1 route); the checks that need the store run with each run, whose failure is
  reported in its row.

Every run is an ordinary run directory (``ooc resume`` works on it). A failing
run is recorded with its error and does not stop the others; running the same
batch again skips finished runs and resumes interrupted ones, unless their store was
converted again since (its fingerprint differs from the one in the run's ``run.json``):
such a run is trained again from scratch (a run whose store cannot be opened any more fails:
its results cannot be checked against it). A run directory is reused only when its ``run.json``
records the grid point's store and options (:func:`_made_for_error`): its name proves nothing, and
one made for another point (directories swapped) fails, naming it, and is left as it is. ``OUT/results.csv``, ``summary.md`` and
``comparison.png`` are replaced atomically (written under a temporary name, then renamed).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import itertools
import json
import os
import time
import typing

from . import owned
from .config import TrainConfig, defaults, option_names
from .dask_client import dask_client

RESULT_COLUMNS = ["run", "store", "loss", "l2", "l1", "solver", "status", "primal", "gap", "epochs", "seconds",
                  "converged", "validation", "error"]
#: Options a spec may set per run (:class:`ooc.config.TrainConfig`'s fields, with ``store``).
SPEC_KEYS = set(option_names()) | {"store"}
#: Keys of the ``[batch]`` table, and the tables of a spec.
BATCH_KEYS = ("out", "validation")
#: The files a batch writes into its ``out`` folder (each listed in that folder's manifest, :mod:`ooc.owned`).
OUTPUTS = ("results.csv", "summary.md", "comparison.png")
TABLES = ("batch", "grid", "path")
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
        raise SpecError(f"{path}: invalid TOML: {' '.join(str(exc).split())}") from None


def _option_types() -> dict:
    """``{option: (type, choices)}`` from :class:`TrainConfig`'s annotations (``X | None`` -> X:
    TOML has no null, so a spec never sets None)."""
    hints = typing.get_type_hints(TrainConfig)
    out = {}
    for f in dataclasses.fields(TrainConfig):
        if f.init:
            kinds = [t for t in (typing.get_args(hints[f.name]) or (hints[f.name],)) if t is not type(None)]
            out[f.name] = (kinds[0], f.metadata.get("choices"))
    out["store"] = (str, None)
    return out


def _shown(value) -> str:
    """A value as TOML writes it (``true``, ``"a"``, ``[1, 2]``, ``inf``)."""
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if isinstance(value, (bool, str)):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value)
    return str(value)  # dates and times


def _type_problem(key: str, value, types: dict) -> str | None:
    """What is wrong with the type (or choice) of one value of ``key``, or None."""
    kind, choices = types[key]
    if kind is float:
        ok, expected = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
    elif kind is int:
        ok, expected = isinstance(value, int) and not isinstance(value, bool), "an integer"
    else:
        ok, expected = isinstance(value, str) and value != "", "a non-empty string"
    if not ok:
        return f"{_shown(value)} is not {expected}"
    if choices and value not in choices:
        return f"{_shown(value)} is not one of {', '.join(choices)}"
    return None


def _check_table(path: str, table: str, t: dict, types: dict) -> dict:
    """The keys and value types of ``[grid]`` or ``[path]``; returns the table with list values
    (a grid's single values made lists of one; a path's l2 list)."""
    bad = set(t) - SPEC_KEYS
    if bad:
        raise SpecError(f"{path}: [{table}] has unknown key(s) {', '.join(sorted(bad))}; "
                        f"allowed: {', '.join(sorted(SPEC_KEYS))}")
    if "store" not in t:
        raise SpecError(f"{path}: [{table}] needs 'store'")
    out = {}
    for key, value in t.items():
        listed = table == "grid" or key == "l2"
        if table == "path" and key == "l2" and not isinstance(value, list):
            raise SpecError(f"{path}: [path] l2 = {_shown(value)}: needs a list of values (l2 = [1e-2, 1e-3])")
        if table == "path" and key != "l2" and isinstance(value, list):
            raise SpecError(f"{path}: [path] {key} = {_shown(value)}: must be a single value (only l2 is a list)")
        values = value if isinstance(value, list) else [value]
        if listed and not values:
            raise SpecError(f"{path}: [{table}] {key} is an empty list")
        for v in values:
            problem = _type_problem(key, v, types)
            if problem:
                raise SpecError(f"{path}: [{table}] {key}: {problem}")
        for i, v in enumerate(values):
            if v in values[:i]:
                raise SpecError(f"{path}: [{table}] {key} lists {_shown(v)} twice (the two runs would be one)")
        out[key] = values if listed else value
    return out


def _check_runs(path: str, table: str, runs: list[dict]) -> None:
    """Build every run's :class:`TrainConfig` (the checks that need no store), naming the first bad one.

    A value wrong on its own (``l2 = -1``) is named with its key; a combination that no single
    value explains (``--l2 0`` with ``--solver dgpd``) is named whole.
    """
    seen = set()
    for run in runs:
        options = {k: v for k, v in run.items() if k != "store"}
        key = json.dumps(options, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        try:
            TrainConfig.from_options(options)
        except Exception as exc:
            msg = " ".join(str(exc).split()) or type(exc).__name__
            for k, v in options.items():
                try:
                    TrainConfig.from_options({k: v})
                except Exception:
                    raise SpecError(f"{path}: [{table}] {k} = {_shown(v)}: {msg}") from None
            shown = ", ".join(f"{k} = {_shown(v)}" for k, v in sorted(options.items()))
            raise SpecError(f"{path}: [{table}] the run with {shown}: {msg}") from None


def load_spec(path: str) -> dict:
    """Read and check a batch spec (module docstring); relative paths are resolved against its folder.

    Returns
    -------
    dict
        ``out``, ``validation`` (or None), ``source`` (the spec's absolute path), ``grid`` (each
        key's list of values, or None) and ``path`` (the path's options, ``l2`` sorted from large
        to small, or None).

    Raises
    ------
    SpecError
        One line naming the spec, the table, the key and the bad value.
    """
    raw = _load_toml(path)
    base = os.path.dirname(os.path.abspath(path))
    unknown = set(raw) - set(TABLES)
    if unknown:
        raise SpecError(f"{path}: unknown table(s) or key(s) {', '.join(sorted(unknown))}; a spec has "
                        "[batch], [grid] and [path]")
    for table in TABLES:
        if table in raw and not isinstance(raw[table], dict):
            raise SpecError(f"{path}: {table} = {_shown(raw[table])}: must be a table ([{table}])")
    batch = raw.get("batch")
    if batch is None or "out" not in batch:
        raise SpecError(f"{path}: needs a [batch] table with 'out' (the folder of run directories)")
    bad = set(batch) - set(BATCH_KEYS)
    if bad:
        raise SpecError(f"{path}: [batch] has unknown key(s) {', '.join(sorted(bad))}; allowed: "
                        f"{', '.join(BATCH_KEYS)}")
    for key in BATCH_KEYS:
        if key in batch and not isinstance(batch[key], str):
            raise SpecError(f"{path}: [batch] {key}: {_shown(batch[key])} is not a string (a path)")
    if not batch["out"]:
        raise SpecError(f'{path}: [batch] out: "" is not a folder')
    if "grid" not in raw and "path" not in raw:
        raise SpecError(f"{path}: needs a [grid] or a [path] table")
    types = _option_types()

    def resolve(p):
        return p if "://" in p or os.path.isabs(p) else os.path.join(base, p)

    spec = {"out": resolve(batch["out"]), "validation": resolve(batch["validation"]) if batch.get("validation") else None,
            "source": os.path.abspath(path), "grid": None, "path": None}
    if "grid" in raw:
        grid = _check_table(path, "grid", raw["grid"], types)
        grid["store"] = [resolve(s) for s in grid["store"]]
        _check_runs(path, "grid", expand_grid({k: v for k, v in grid.items() if k != "store"}))
        spec["grid"] = grid
    if "path" in raw:
        p = _check_table(path, "path", raw["path"], types)
        p["store"] = resolve(p["store"])
        p["l2"] = sorted((float(x) for x in p["l2"]), reverse=True)  # floats: the run names hash them
        _check_runs(path, "path", [dict(p, l2=l2) for l2 in p["l2"]])
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


#: The grid keys that :data:`RESULT_COLUMNS` shows under their own name; every other key a spec sets is an
#: extra column (:func:`option_columns`).
_SHOWN_KEYS = ("store", "loss", "l2", "l1", "solver")


def option_columns(rows: list[dict]) -> dict:
    """``{column: option}`` for every option the rows' grid or path points set beyond :data:`_SHOWN_KEYS`.

    A grid over ``class_weight`` (or any key) makes runs that differ only there: each such key is a column of
    ``results.csv`` and ``summary.md``, so no two rows are told apart only by their ``run.json``. A key that is
    also a result column's name (``validation``: the score) is shown as ``KEY_option``.
    """
    keys = sorted({k for r in rows for k in r.get("options", {})} - set(_SHOWN_KEYS))
    return {(f"{k}_option" if k in RESULT_COLUMNS else k): k for k in keys}


def _option_value(row: dict, key: str):
    """The value the row's run had for ``key``: its point's, else the default (a point that does not set it)."""
    v = row.get("options", {}).get(key, DEFAULTS.get(key, ""))
    return "" if v is None else v


def _row(run_dir: str, options: dict, **fields) -> dict:
    row = {c: "" for c in RESULT_COLUMNS}
    row["options"] = {k: v for k, v in options.items() if k != "store"}
    row.update({"run": os.path.basename(run_dir), "store": options.get("store", ""),
                "loss": options.get("loss", DEFAULTS["loss"]), "l2": options.get("l2", DEFAULTS["l2"]),
                "l1": options.get("l1", DEFAULTS["l1"]), "solver": options.get("solver", DEFAULTS["solver"])})
    row.update(fields)
    return row


def _same_store(run_dir: str, store: str) -> bool:
    """Whether the run in ``run_dir`` was made on ``store`` as it is now: the content fingerprint
    its ``run.json`` records is the store's (an unreadable ``run.json`` counts as another store).

    Raises
    ------
    StoreError
        ``store`` cannot be opened (the run fails: its results cannot be checked against it).
    """
    from .store import open_store

    with open_store(store) as st:
        fingerprint = st.fingerprint
    from .runs.rundir import RunDir, RunError

    try:
        recorded = RunDir(run_dir).config.get("store_fingerprint")  # verified: a damaged run.json is another run
    except RunError:
        return False
    return recorded == fingerprint


#: Options of a grid point that a run directory made for it may record otherwise: what the process ran with
#: (threads, memory), how often it saved, and the validation data it scored (the run's result is the same).
_NOT_THE_POINT = frozenset({"threads", "memory", "checkpoint_every", "validation"})


def _made_for_error(run_dir: str, options: dict) -> str | None:
    """Why the run in ``run_dir`` was not made for the grid point ``options`` (one line naming it), or None.

    Its ``run.json`` (verified) must record ``options['store']`` as its store and the point's value of every other
    option it sets (each normalised as :class:`~ooc.config.TrainConfig` does); a run directory is reused by its
    name only when it proves this: one swapped with another point's, or copied from another batch, is refused.
    A ``run.json`` that does not verify is not checked here (the run is trained again: :func:`_same_store`).
    """
    from .runs.rundir import RunDir, RunError

    try:
        cfg = RunDir(run_dir).config
    except RunError:
        return None
    store = options["store"]
    if "://" not in store:
        store = os.path.abspath(store)
    if cfg.get("store") != store:
        return (f"{run_dir}: was made for another grid point (its run.json's store is {cfg.get('store')}, this "
                f"point's {store}): ooc leaves it as it is; move it back, or remove it, and run the batch again")
    point = {k: v for k, v in options.items() if k in SPEC_KEYS and k != "store" and k not in _NOT_THE_POINT}
    want = TrainConfig.from_options(point).options()
    try:
        have = TrainConfig.from_run_config(cfg).options()
    except ValueError as exc:
        return f"{run_dir}: {exc}: ooc leaves it as it is; remove it, and run the batch again"
    for k in sorted(point):
        if have[k] != want[k]:
            return (f"{run_dir}: was made for another grid point (its run.json's {k} is {have[k]!r}, this point's "
                    f"{want[k]!r}): ooc leaves it as it is; move it back, or remove it, and run the batch again")
    return None


def run_one(run_dir: str, options: dict, validation: str | None = None, warm_start: str | None = None,
            threads: int | dict = 0, memory_share: int | None = None) -> dict:
    """Train (or resume, or skip) one run; never raises: failures become a ``failed`` row.

    A run directory left by an earlier batch is skipped when finished and resumed when not,
    if its ``run.json`` records the fingerprint of ``options['store']`` as it is now; a run
    of a store converted again since is trained again from scratch (``state`` ``retrained``).
    ``threads``: the compute threads of a run whose options do not set them (:func:`_thread_share`);
    ``memory_share``: this worker's share of the limit the batch runs under (:func:`local_memory_share`).
    """
    import warnings

    from .evaluate import evaluate
    from .train import resume, train

    t0 = time.perf_counter()
    _worker_share(memory_share)
    try:
        metrics_path = os.path.join(run_dir, "model", "metrics.json")
        made = os.path.exists(os.path.join(run_dir, "run.json"))
        why = _made_for_error(run_dir, options) if made else None  # its name proves nothing
        if why is not None:
            from .runs.rundir import RunError

            raise RunError(why)
        # what a previous batch left here counts only if it was trained on the store as it is now
        current = _same_store(run_dir, options["store"]) if made else None
        if current and os.path.exists(metrics_path):
            from .model import read_certificate

            # verified with its model and its run: a damaged one, or another run's, is reported, never believed
            res = read_certificate(run_dir)
            state = "skipped"
        else:
            opts = {k: v for k, v in options.items() if k != "store"}
            if not opts.get("threads"):
                opts["threads"] = _thread_share(threads)
            if validation and opts.get("validation") is None:
                opts["validation"] = validation  # scored at every certified state: the history has the curve
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if current:
                    res = resume(run_dir).result
                    state = "resumed"
                else:
                    extra = {"warm_start": warm_start} if warm_start else {}
                    res = train(options["store"], run_dir, overwrite=True, **extra, **opts).result
                    state = "trained" if current is None else "retrained"
        val = metric = ""
        if validation:
            # The run's own score of its last state only when this call trained it on this very file: a
            # finished (skipped) or resumed run scored what its run.json names, which may be an earlier
            # spec's file, or this path with other content; those are evaluated here, on the file as it is now.
            scored_here = state in ("trained", "retrained") and os.path.abspath(
                options.get("validation") or validation) == os.path.abspath(validation)
            own = scored_here and res.get("validation_metric") in ("accuracy", "rmse")
            val = res.get("validation", "") if own else ""
            metric = res.get("validation_metric", "") if val != "" else ""
            if val == "":
                m = evaluate(run_dir, validation)
                metric = "accuracy" if "accuracy" in m else "rmse"
                val = m[metric]
        return _row(run_dir, options, status="ok", primal=res["primal"], gap=res["gap"], epochs=res["epochs"],
                    seconds=res["seconds"], converged=res["converged"], validation=val, state=state,
                    validation_metric=metric)
    except Exception as exc:  # a broken run is reported, never fatal to the batch
        msg = (str(exc).splitlines() or [type(exc).__name__])[0]
        return _row(run_dir, options, status="failed", error=f"{type(exc).__name__}: {msg}",
                    seconds=time.perf_counter() - t0)


def local_memory_share(n_workers: int) -> int | None:
    """What each of a local cluster's ``n_workers`` worker processes may use: the limit this process runs
    under (:func:`ooc._memlimit.process_limit`: its own cgroup's, ``RLIMIT_AS``, the RAM available), less what
    this process (the batch's driver and the cluster's scheduler) holds, in equal shares; None without a limit.
    The workers are this process's children in the same cgroup, and Dask's own worker limit reads the machine's
    (or its root cgroup's) memory, not the cgroup the batch was started in: each worker planning for the whole
    of it was OOM-killed (two workers under a 700M cgroup)."""
    from ._memlimit import _UNLIMITED, process_limit, rss_bytes

    lim = process_limit()
    if lim.bytes >= _UNLIMITED or n_workers < 1:
        return None
    return max(1, (int(lim.bytes) - rss_bytes()) // int(n_workers))


def _worker_share(memory_share: int | None = None) -> None:
    """On a Dask worker, ``--memory auto`` is bounded by the worker's memory limit too: the workers of a
    machine share it (a local cluster gives each its share of the machine), none plans for all of it; and by
    ``memory_share``, its share of the limit a local batch runs under (:func:`local_memory_share`)."""
    if memory_share:
        from ._memlimit import Limit, add_limit

        add_limit(Limit(int(memory_share), "this worker's share of the batch's memory limit"))
    try:
        from distributed import get_worker

        limit = get_worker().memory_manager.memory_limit
    except (ImportError, ValueError, AttributeError):  # not on a worker
        return
    if limit:
        from ._memlimit import Limit, add_limit

        add_limit(Limit(int(limit), "Dask worker memory limit"))


def _thread_share(threads: int | dict) -> int:
    """Threads for one run: ``threads`` when a count, else (a dict: workers per host) this machine's
    usable cores (:func:`ooc._cpu.available_cpus`) shared among the Dask workers on it, at least 1,
    so that the workers of a machine do not each start a thread per core."""
    from ._cpu import available_cpus

    if isinstance(threads, int) and threads > 0:
        return threads
    here = 1
    if isinstance(threads, dict):
        try:
            from urllib.parse import urlparse

            from distributed import get_worker

            here = threads.get(urlparse(get_worker().address).hostname, 1)
        except (ImportError, ValueError, AttributeError):  # not on a worker
            pass
    return max(1, available_cpus() // max(1, here))


def run_path(out: str, path_spec: dict, validation: str | None = None, threads: int | dict = 0,
             memory_share: int | None = None) -> list[dict]:
    """A regularization path as one task: each l2 warm-started from the previous run."""
    rows = []
    prev = None
    base = {k: v for k, v in path_spec.items() if k != "l2"}
    for l2 in path_spec["l2"]:
        options = dict(base, l2=l2)
        rd = os.path.join(out, "path-" + run_name(options))
        row = run_one(rd, options, validation, warm_start=prev, threads=threads, memory_share=memory_share)
        rows.append(row)
        prev = rd if row["status"] == "ok" else None
    return rows


def _client(scheduler: str | None, workers: int | None):
    return dask_client(scheduler, workers or min(4, os.cpu_count() or 1), needed_by="ooc batch")


def run_batch(spec_path: str, scheduler: str | None = None, workers: int | None = None, progress=None,
              threads: int = 0) -> list[dict]:
    """Run every run of a spec on Dask; writes ``OUT/results.csv``, ``summary.md``, ``comparison.png``.

    ``threads``: compute threads of each run whose spec does not set ``threads``; 0 shares each
    machine's cores among the workers on it.
    """
    spec = load_spec(spec_path)
    out = spec["out"]
    owned.check_target(out)
    os.makedirs(out, exist_ok=True)
    for name in OUTPUTS:  # refused before any training, not after it: the user's files stay as they are
        owned.check_replaceable(os.path.join(out, name), f"the batch's {name}", kind="batch")
    jobs = []
    for options in expand_grid(spec["grid"]) if spec["grid"] else []:
        jobs.append(("run", os.path.join(out, run_name(options)), options))
    if spec["path"]:
        jobs.append(("path", out, spec["path"]))
    from distributed import as_completed

    client, cluster = _client(scheduler, workers)
    rows: list[dict] = []
    try:
        if not threads:  # workers per host: each run takes its worker's share of that machine's cores
            hosts = [w.get("host") for w in client.scheduler_info().get("workers", {}).values()]
            threads = {h: hosts.count(h) for h in set(hosts)}
        futures = {}
        # a local cluster's workers share the limit this process runs under (a remote one's, their hosts')
        share = local_memory_share(len(client.scheduler_info().get("workers", {}))) if scheduler is None else None
        for kind, target, options in jobs:
            if kind == "run":
                f = client.submit(run_one, target, options, spec["validation"], threads=threads, memory_share=share,
                                  pure=False)
            else:
                f = client.submit(run_path, target, options, spec["validation"], threads=threads, memory_share=share,
                                  pure=False)
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
    extra = option_columns(rows)
    at = RESULT_COLUMNS.index("solver") + 1  # next to the options shown always
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=RESULT_COLUMNS[:at] + list(extra) + RESULT_COLUMNS[at:], extrasaction="ignore")
    w.writeheader()
    for r in sorted(rows, key=lambda r: r["run"]):
        w.writerow({**r, **{c: _option_value(r, k) for c, k in extra.items()}})
    owned.write_bytes(os.path.join(out, "results.csv"), buf.getvalue().encode(), kind="batch",
                      what="the batch's results.csv")


def write_summary(out: str, rows: list[dict], validation: str | None) -> None:
    """``OUT/summary.md`` and ``comparison.png``, each replaced atomically.

    The summary names the stores, the validation file and its metric (accuracy, higher first, or
    RMSE, lower first: the runs are sorted by it; without one, by the primal objective), lists the
    runs skipped because an earlier batch had finished them on the same store, then one table row
    per run (with its ``state``: trained, resumed, retrained, skipped) and the failed runs.
    """
    ok = [r for r in rows if r["status"] == "ok"]
    metrics = sorted({r.get("validation_metric") or "" for r in ok} - {""})
    metric = metrics[0] if len(metrics) == 1 else None
    if validation and metric:
        sign = 1 if metric == "rmse" else -1  # the best first
        ok.sort(key=lambda r: (r["validation"] == "", sign * float(r["validation"] or 0), r["run"]))
    else:
        ok.sort(key=lambda r: float(r["primal"]))
    lines = [f"# ooc batch summary ({len(ok)} ok, {len(rows) - len(ok)} failed)", ""]
    stores = sorted({str(r["store"]) for r in rows if r["store"]})
    lines.append("- store" + ("s: " if len(stores) > 1 else ": ") + ", ".join(f"`{x}`" for x in stores))
    if validation:
        how = {"accuracy": "accuracy (higher is better)", "rmse": "RMSE (lower is better)"}
        lines.append(f"- validation: `{validation}`, metric "
                     + (f"{how[metric]}; runs sorted by it" if metric else
                        " and ".join(metrics) + " (the runs' tasks differ)" if metrics else "none (no run finished)"))
    else:
        lines.append("- validation: none (no `validation` in `[batch]`); runs sorted by the primal objective")
    skipped = sorted(r["run"] for r in ok if r.get("state") == "skipped")
    if skipped:
        lines.append(f"- skipped as finished ({len(skipped)}: trained by an earlier batch on the same store): "
                     + ", ".join(f"`{x}`" for x in skipped))
    else:
        lines.append("- skipped as finished: none")
    lines.append("")
    extra = option_columns(rows)
    cols = ["run", "state", "loss", "l2", "l1", "solver", *extra, "primal", "gap", "epochs", "seconds", "converged"]
    names = dict(zip(cols, cols))
    if validation:
        cols.append("validation")
        names["validation"] = f"validation {metric}" if metric else "validation"
    lines.append("| " + " | ".join(names[c] for c in cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for r in ok:
        r = {**r, **{c: _option_value(r, k) for c, k in extra.items()}}
        lines.append("| " + " | ".join(_fmt(r.get(c, "")) for c in cols) + " |")
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines += ["", "## Failed runs", ""]
        lines += [f"- `{r['run']}`: {r['error']}" for r in failed]
    owned.write_bytes(os.path.join(out, "summary.md"), ("\n".join(lines) + "\n").encode(), kind="batch",
                      what="the batch's summary.md")
    try:
        _plot_comparison(out, ok)
    except Exception as exc:  # pragma: no cover - a plot never fails a batch
        import warnings

        from .plotting import PlotWarning

        warnings.warn(f"could not draw comparison.png: {' '.join(str(exc).split())}", PlotWarning, stacklevel=2)


def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def _plot_comparison(out: str, rows: list[dict]) -> None:
    """Draw ``OUT/comparison.png`` (matplotlib's messages as one-line warnings: :mod:`ooc.plotting`)."""
    from .plotting import drawing

    with drawing():
        _draw_comparison(out, rows)


def _draw_comparison(out: str, rows: list[dict]) -> None:
    from matplotlib.figure import Figure

    from .runs.rundir import RunDir

    fig = Figure(figsize=(8, 5))
    ax = fig.subplots()
    drawn = 0
    for r in rows:
        rd = os.path.join(out, r["run"])
        if not os.path.isdir(rd):
            continue
        h = RunDir(rd).history()
        if h:
            ax.semilogy([e["seconds"] for e in h], [max(e["gap"], 1e-16) for e in h], "-", label=r["run"])
            drawn += 1
    ax.set_xlabel("training time (s)")
    ax.set_ylabel("duality gap")
    ax.grid(True, which="both", alpha=0.3)
    if 0 < drawn <= 12:  # a legend of the runs drawn (none drawn: no legend to make)
        ax.legend(fontsize=7)
    fig.tight_layout()
    with owned.output(os.path.join(out, "comparison.png"), "wb", kind="batch", what="the batch's comparison.png") as f:
        fig.savefig(f, format="png", dpi=90)
