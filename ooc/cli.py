"""The ``ooc`` command line (the contract in docs/cli.rst: scripts and tests rely on it).

Errors users can cause (bad input, missing store, bad option values) end in one
line on stderr and a non-zero exit status, never a traceback. ``--json`` prints
one JSON object on the last line of stdout.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import tempfile

import click

from . import interrupts
from ._version import __version__
from .progress import ConvertProgress, wanted


class UserError(click.ClickException):
    """An error to show as one line, exit status 1."""

    def show(self, file=None):
        click.echo(f"ooc: error: {self.format_message()}", err=True)


def _user_errors(fn):
    """Turn the exceptions a user can cause into one-line errors."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        # imported when a command runs, not when the CLI loads (a Ctrl-C here is click's Abort: status 130)
        from .fsutil import disk_full_error, os_error_line
        from .runs.rundir import RunError
        from .store.backend import StoreError
        from .store.readers import InputError

        try:
            return fn(*args, **kwargs)
        except click.ClickException:
            raise
        except (InputError, StoreError, RunError, FileExistsError, FileNotFoundError, ValueError,
                RuntimeError) as exc:
            raise UserError(_first_line(exc)) from None
        except OSError as exc:  # permission denied, not a directory, a full disk ...: the path and the reason
            full = disk_full_error(exc)
            line = os_error_line(exc)
            raise UserError(line + (" (the disk is full: free some space and run the command again)"
                                    if full is not None else "")) from None
        except KeyboardInterrupt:
            click.echo("ooc: interrupted", err=True)
            sys.exit(130)
        except Exception as exc:  # a bug of ours or a library's: still one line, unless asked for the traceback
            if os.environ.get("OOC_DEBUG"):
                raise
            line = os_error_line(exc)
            raise UserError(line or f"internal error: {type(exc).__name__}: {_first_line(exc)} "
                            "(run with OOC_DEBUG=1 for the traceback, and please report it)") from None

    return wrapper


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__


@contextlib.contextmanager
def _training_warnings():
    """Warnings raised while training: ooc's own are shown as one line each on stderr, but
    for a ``ConvergenceWarning`` (the summary line says whether the run converged); the
    libraries' (deprecations and the like) are not for the user of the command line."""
    import warnings

    from .train import ConvergenceWarning

    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    seen = set()

    def show(message, category, filename, lineno, file=None, line=None):
        ours = os.path.abspath(filename).startswith(package) and issubclass(category, UserWarning)
        if ours and not issubclass(category, ConvergenceWarning) and str(message) not in seen:
            seen.add(str(message))
            click.echo(f"ooc: warning: {message}", err=True)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show  # restored when the block ends
        yield


def _emit_json(obj: dict) -> None:
    click.echo(json.dumps(obj, default=_json_default))


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


@contextlib.contextmanager
def _whole_process():
    """An explicit ``--memory`` counts the whole process while a command runs (:mod:`ooc._memlimit`)."""
    from . import _memlimit

    before = _memlimit.counts_whole_process()
    _memlimit.whole_process(True)
    try:
        yield
    finally:
        _memlimit.whole_process(before)


class _EchoHandler(logging.Handler):
    def emit(self, record):
        click.echo(f"ooc: {record.getMessage()}", err=True)


@contextlib.contextmanager
def _log_lines(show: bool):
    """The ``ooc`` logger's INFO records (the memory training chose) as ``ooc: ...`` lines on stderr while
    a command runs, when ``show`` (with its progress: on a terminal, or ``-v``; a script gets them in
    ``--json``, and an error stays the only line on stderr)."""
    if not show:
        yield
        return
    logger = logging.getLogger("ooc")
    handler, level = _EchoHandler(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


class _OneLineErrors(click.Group):
    """click's group, but a usage error (a bad option value, a missing argument) is one line too."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            # SIGTERM stops any command like Ctrl-C; --memory counts the whole process
            with interrupts.stop_on_signals(), _whole_process():
                rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx is not None else "ooc"
            click.echo(f"ooc: error: {e.format_message()} (see '{where} --help')", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("ooc: interrupted", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ooc")
def main():
    """Train regularized linear models on sparse data larger than memory."""
    from ._malloc import tune_malloc

    tune_malloc()  # block-sized buffers must go back to the system when freed (see ooc._malloc)


# -- convert ---------------------------------------------------------------------------------
@main.command()
@click.argument("input", type=click.Path(dir_okay=False))
@click.argument("store", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["zarr", "hdf5"]), default="zarr", show_default=True,
              help="Store backend.")
@click.option("--layout", type=click.Choice(["rows", "cols", "both"]), default="both", show_default=True,
              help="Matrix layouts to store: by rows (dual solvers), by columns (rcd-primal), or both.")
@click.option("--memory", default="auto", show_default=True,
              help="Memory for the whole process ('auto': what it may use: cgroup limit, RLIMIT_AS, available RAM).")
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default="float32", show_default=True,
              help="Type of the stored values.")
@click.option("--input-format", type=click.Choice(["svmlight", "csv", "npz"]), default=None,
              help="Input format (default: from the file name and content).")
@click.option("--zero-based", type=click.Choice(["auto", "yes", "no"]), default="auto", show_default=True,
              help="Whether svmlight feature ids start at 0.")
@click.option("--label-kind", type=click.Choice(["auto", "binary", "multiclass", "regression"]),
              default="auto", show_default=True,
              help="Task of the labels (auto: two values binary, up to 1000 integers multiclass, else regression).")
@click.option("--n-features", type=int, default=None, help="Number of features (default: from the data).")
@click.option("--block-bytes", default=None, help="Decoded bytes per block (default 64MiB, at most memory/8).")
@click.option("--overwrite", is_flag=True, help="Replace STORE if it exists.")
@click.option("--factorize", "factorize", type=click.IntRange(min=1), default=None, metavar="K",
              help="Also store A = U V with U = X G^T, V = G (G: K x d Gaussian) for --solver dspdc.")
@click.option("--factorize-seed", type=int, default=0, show_default=True, help="Seed of G.")
@click.option("--json", "as_json", is_flag=True, help="Print the store summary as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="Show progress even when not on a terminal.")
@_user_errors
def convert(input, store, fmt, layout, memory, dtype, input_format, zero_based, label_kind, n_features,
            block_bytes, overwrite, factorize, factorize_seed, as_json, verbose):
    """Convert INPUT (svmlight/LIBSVM, CSV/TSV, .npz; .gz/.bz2/.xz) into the ooc store STORE."""
    from .store.ingest import convert as do_convert

    if factorize:
        from functools import partial

        from .store.factorize import convert_factorized

        do_convert = partial(convert_factorized, k=factorize, seed=factorize_seed)
    bar = ConvertProgress(wanted(verbose))
    try:
        st = do_convert(input, store, format=fmt, layout=layout, memory=memory, dtype=dtype,
                        input_format=input_format,
                        zero_based={"auto": "auto", "yes": True, "no": False}[zero_based],
                        label_kind=label_kind, n_features=n_features, block_bytes=block_bytes,
                        overwrite=overwrite, progress=bar)
    finally:
        bar.close()
    info = _store_info(st)
    if as_json:
        _emit_json(info)
    else:
        click.echo(f"wrote {store}: {info['n_rows']} rows x {info['n_cols']} cols, {info['nnz']} nonzeros, "
                   f"{info['label_kind']}, {_fmt_bytes(info['bytes_on_disk'])} on disk")


# -- info ----------------------------------------------------------------------------------------
def _store_info(st) -> dict:
    """``st.info()`` and the memory each solver family holds for it (``resident_*``, from the planner)."""
    from .solvers.registry import resident_memory

    return {**st.info(), **resident_memory(st)}


def _info_defaults():
    from .config import TrainConfig

    return TrainConfig()


@main.command()
@click.argument("store", type=click.Path())
@click.option("--memory", default="auto", show_default=True,
              help="Say whether and how a run fits this much memory (the whole process; 'auto': what this "
                   "process may use).")
@click.option("--block-bytes", default=_info_defaults().block_bytes, show_default=True,
              help="The training option of that name.")
@click.option("--mix-blocks", type=int, default=_info_defaults().mix_blocks, show_default=True,
              help="The training option of that name.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_user_errors
def info(store, memory, block_bytes, mix_blocks, as_json):
    """Describe STORE: shape, labels, norms, C_P/C_D and the side they recommend, blocks, bytes, and
    whether a run fits --memory."""
    from .config import TrainConfig
    from .solvers.registry import explain_auto, memory_fit
    from .store import open_store

    cfg = TrainConfig(memory=memory, block_bytes=block_bytes, mix_blocks=mix_blocks)  # checks them as train does
    with open_store(store) as st:
        i = _store_info(st)
        i["auto"] = explain_auto(i, st.has_layout("cols"))
        i["memory_fit"] = memory_fit(st, cfg.memory_bytes, cfg.train_block_bytes, cfg.mix_blocks)
        f = st.attrs.get("factor")
        # the factor (ooc.store.factorize) is reported here, not in Store.info, to keep it in one module
        i.update({"factorized": bool(f), "factor_k": f["k"] if f else None,
                  "factor_R": f["R"] if f else None, "factor_seed": f["seed"] if f else None})
    if as_json:
        _emit_json(i)
        return
    click.echo(format_info(i))


def _format_fit(f: dict) -> list[str]:
    """``ooc info``'s memory lines: for each solver family, whether a run fits and how."""
    src = f["memory_source"]
    head = (f"memory       {_fmt_bytes(f['memory'])} ({src}); a training process holds about "
            f"{_fmt_bytes(f['process_bytes'])} with its kernels, leaving {_fmt_bytes(f['work_bytes'])}")
    lines = [head]
    for name, fam in f["families"].items():
        need = ("--memory" if src == "--memory" else "a limit of") + f" {_fmt_bytes(fam['smallest_memory'])}"
        how = [f"O(d) vectors {_fmt_bytes(fam['fixed'])}"]
        if "group" in fam:
            how.append(f"groups of {_fmt_bytes(fam['group'])} ({fam['blocks']} blocks of <= "
                       f"{_fmt_bytes(fam['block_bytes'])}), {_fmt_bytes(fam['read_ahead'])} read ahead")
        how.append(f"O(n) vectors {'in memory' if fam['vectors'] == 'memory' else 'paged'}")
        how.append(f"cache {_fmt_bytes(fam['cache'])}")
        verdict = "fits" if fam["fits"] else "does NOT fit"
        lines.append(f"             {name}: {verdict} ({', '.join(how)}); needs at least {need}")
    return lines


def _fmt_bytes(n) -> str:
    from .store.ingest import format_bytes

    return format_bytes(n)


def format_info(i: dict) -> str:
    """Human-readable ``ooc info``."""
    lines = [
        f"store        {i['path']} ({i['backend']}, format v{i['format_version']})",
        f"shape        {i['n_rows']} rows x {i['n_cols']} features, {i['nnz']} nonzeros "
        f"(density {i['density']:.3g}), {i['dtype']} values, {i['index_dtype']} ids",
        f"labels       {i['label_kind']}"
        + (f", classes {i['classes']}" if i.get("classes") is not None else ""),
    ]
    if i.get("label_counts"):
        lines.append("             counts " + ", ".join(f"{k}: {v}" for k, v in i["label_counts"].items()))
    if i.get("label_values") and i["label_kind"] == "binary":
        lines.append(f"             stored as -1/+1 for {i['label_values'][0]} / {i['label_values'][-1]}")
    lines += [
        f"row norms    min {i['row_norm_min']:.4g}, mean {i['row_norm_mean']:.4g}, max R = {i['R']:.4g}; "
        f"{i['empty_rows']} empty rows, {i['empty_cols']} empty columns",
        f"face-off     C_P = {i['C_P']:.4g} (primal, over features), C_D = {i['C_D']:.4g} (dual, over examples)",
        f"             -> {i['recommended_side']} coordinate descent is expected to need less work "
        f"(Csiba & Richtarik: total work ~ C_P for primal RCD, ~ C_D for dual RCD)",
        "blocks       " + ", ".join(f"{k}: {v}" for k, v in i["blocks"].items())
        + f" (about {_fmt_bytes(i['block_bytes'])} decoded each)",
        f"size         {_fmt_bytes(i['bytes_on_disk'])} on disk, {_fmt_bytes(i['bytes_decoded'])} decoded "
        f"(compression {i['compression_ratio']:.2f}x)" if i.get("compression_ratio") else
        f"size         {_fmt_bytes(i['bytes_on_disk'])} on disk",
        "resident     held whatever the split of --memory (O(d) vectors and one block's rows, k = "
        f"{i['resident_k']} problems): " + ", ".join(f"{s} {_fmt_bytes(b)}" for s, b in i["resident_bytes"].items())
        + " (dgpd: + its active submatrix)",
        "             O(n) vectors, in memory when they fit in a quarter of what is left (else paged, streamed "
        "or memory-mapped): " + ", ".join(f"{s} {_fmt_bytes(b)}" for s, b in i["resident_vector_bytes"].items()),
        f"fingerprint  {i['fingerprint']}",
    ]
    for j, line in enumerate(i.get("auto") or []):
        lines.append(("auto solver  " if j == 0 else "             ") + line)
    if i.get("memory_fit"):
        lines += _format_fit(i["memory_fit"])
    if i.get("factorized"):
        lines.insert(-1, f"factorized   A = U V, K = {i['factor_k']} (U = X G^T, V = G, seed {i['factor_seed']}); "
                         f"max row norm of A {i['factor_R']:.4g}; read by --solver dspdc")
    return "\n".join(lines)


# -- train / resume ------------------------------------------------------------------------------
class EpochProgress:
    """A tqdm bar over epochs showing the gap and throughput; silent when disabled."""

    def __init__(self, enabled: bool, total: int):
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="epoch", desc="train", file=sys.stderr, leave=False)

    def __call__(self, h: dict) -> None:
        if self.bar is None:
            return
        self.bar.n = h["epoch"]
        self.bar.set_postfix(gap=f"{h['rel_gap']:.2e}", rows_s=f"{(h.get('rows_per_s') or 0):.3g}",
                             MB_s=f"{(h.get('mb_per_s') or 0):.3g}", refresh=False)
        self.bar.refresh()

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _report(result: dict, as_json: bool) -> None:
    if as_json:
        _emit_json(result)
        return
    status = "converged" if result["converged"] else "NOT converged (max epochs reached)"
    click.echo(f"{status}: epochs {result['epochs']}, primal {result['primal']:.10g}, dual {result['dual']:.10g}, "
               f"relative gap {result['rel_gap']:.3g} (tol {result['tol']:g}), nnz(w) {result['nnz_w']}, "
               f"{result['seconds']:.2f} s")
    if result.get("stop_reason"):
        click.echo(f"why: {result['stop_reason']}; {result['advice']}")
    click.echo(f"run directory: {result['run']}")
    if result.get("memory_budget") is not None:
        click.echo(f"memory: {_fmt_bytes(result['memory_budget'])} for training ({result['memory_source']})")


#: ``ooc train``'s options in the order ``--help`` lists them (their defaults, types, choices and
#: help come from :class:`ooc.config.TrainConfig`).
TRAIN_OPTION_ORDER = (
    "loss", "gamma", "multiclass", "l2", "l1", "solver", "sampling", "paging", "block_bytes", "mix_blocks",
    "threads", "inner_passes", "smoothing", "dgpd_rounds", "dgpd_batch", "dgpd_growth", "dgpd_dual_step", "tol", "max_epochs", "memory", "bias",
    "class_weight", "seed", "checkpoint_every", "distributed",
)


def train_options(fn):
    """Add one click option per :class:`ooc.config.TrainConfig` field to the command ``fn``.

    An option's type is its field's (float, int, or text), or a choice when the field lists
    choices; a default of None is not shown (it means "not set").
    """
    import dataclasses

    from .config import TrainConfig

    fields = {f.name: f for f in dataclasses.fields(TrainConfig) if f.init}
    if set(fields) != set(TRAIN_OPTION_ORDER):  # a new field must be placed in the help's order
        raise RuntimeError("TRAIN_OPTION_ORDER differs from TrainConfig's fields: "
                           f"{sorted(set(fields) ^ set(TRAIN_OPTION_ORDER))}")
    for name in reversed(TRAIN_OPTION_ORDER):  # click lists options in decorator order, outermost first
        f = fields[name]
        kind = str(f.type).split("|")[0].strip()
        choices = f.metadata.get("choices")
        ptype = click.Choice(list(choices)) if choices else {"float": float, "int": int}.get(kind)
        extra = {"help": f.metadata["help"]} if f.metadata.get("help") else {}
        if ptype is not None:
            extra["type"] = ptype
        fn = click.option("--" + name.replace("_", "-"), default=f.default, show_default=f.default is not None,
                          **extra)(fn)
    return fn


@main.command()
@click.argument("store", type=click.Path())
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Run directory to create.")
@train_options
@click.option("--overwrite", is_flag=True, help="Replace an existing run directory.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (the result) on the last line of stdout.")
@click.option("-v", "--verbose", is_flag=True, help="Show progress (and the memory chosen) even when not on a terminal.")
@_user_errors
def train(store, out, overwrite, as_json, verbose, **options):
    """Train on STORE into the run directory OUT, to a certified relative duality gap."""
    from .train import train as do_train

    bar = EpochProgress(wanted(verbose), options["max_epochs"])
    try:
        with _training_warnings(), _log_lines(wanted(verbose)):
            run = do_train(store, out, overwrite=overwrite, progress=bar, **options)
    finally:
        bar.close()
    _report(run.result, as_json)


@main.command()
@click.argument("run", type=click.Path(file_okay=False))
@click.option("--max-epochs", type=int, default=None, help="New epoch limit (default: the run's).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (the result) on the last line of stdout.")
@click.option("-v", "--verbose", is_flag=True, help="Show progress (and the memory chosen) even when not on a terminal.")
@_user_errors
def resume(run, max_epochs, as_json, verbose):
    """Continue RUN from its last checkpoint (exactly as if it had never stopped)."""
    from .train import resume as do_resume

    bar = EpochProgress(wanted(verbose), max_epochs or 0)
    try:
        with _training_warnings(), _log_lines(wanted(verbose)):
            r = do_resume(run, max_epochs=max_epochs, progress=bar)
    finally:
        bar.close()
    _report(r.result, as_json)


# -- predict / evaluate ---------------------------------------------------------------------------
@main.command()
@click.argument("run", type=click.Path(file_okay=False))
@click.argument("input", type=click.Path())
@click.option("--out", "out_file", type=click.Path(dir_okay=False), default=None,
              help="Write predictions here (default: stdout).")
@click.option("--proba", is_flag=True, help="Print the probability of the positive class (logistic).")
@click.option("--memory", default="auto", show_default=True,
              help="Memory for the whole process ('auto': what it may use); rows are read in blocks that fit.")
@click.option("--threads", type=int, default=0, show_default=True,
              help="Threads computing margins (0: every core the process may use); the output does not depend on it.")
@_user_errors
def predict(run, input, out_file, proba, memory, threads):
    """Predict the rows of INPUT (a store or an svmlight/CSV file), one label per line."""
    from .evaluate import iter_predictions
    from .fsutil import atomic_output, contains

    if out_file:
        # the predictions appear whole when done (a temporary renamed): never the input or the run's own files
        for what, path in (("the input", input), ("the run directory", run)):
            if "://" not in path and os.path.lexists(path) and contains(path, out_file):
                raise UserError(f"--out {out_file}: is {what} {path} or inside it; choose another file")
    with atomic_output(out_file) if out_file else contextlib.nullcontext(sys.stdout) as fh:
        for pred in iter_predictions(run, input, proba=proba, memory=memory, threads=threads):
            fh.write("\n".join(_fmt_label(p) for p in pred))
            if len(pred):
                fh.write("\n")


def _fmt_label(x) -> str:
    x = float(x)
    return str(int(x)) if x == int(x) and abs(x) < 1e15 else repr(x)


@main.command()
@click.argument("run", type=click.Path(file_okay=False))
@click.argument("input", type=click.Path())
@click.option("--memory", default="auto", show_default=True,
              help="Memory for the whole process ('auto': what it may use); rows are read in blocks that fit.")
@click.option("--threads", type=int, default=0, show_default=True,
              help="Threads computing margins (0: every core the process may use); the output does not depend on it.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as one JSON object.")
@_user_errors
def evaluate(run, input, memory, threads, as_json):
    """Score RUN's model on INPUT: accuracy, logloss, primal objective, ..."""
    from .evaluate import evaluate as do_evaluate

    m = do_evaluate(run, input, memory=memory, threads=threads)
    if as_json:
        _emit_json(m)
        return
    for k, v in m.items():
        click.echo(f"{k:>14}  {v}")


# -- batch ---------------------------------------------------------------------------------------
@main.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--scheduler", default=None, help="Address of an existing Dask scheduler (default: a LocalCluster).")
@click.option("--workers", type=int, default=None, help="Worker processes of the LocalCluster (default: min(4, cores)).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
@click.option("-v", "--verbose", is_flag=True, help="Show the runs' progress even when not on a terminal.")
@_user_errors
def batch(spec, scheduler, workers, as_json, verbose):
    """Run the grid / regularization path of the TOML SPEC as Dask tasks (see ooc/batch.py)."""
    from .batch import load_spec, run_batch

    show = wanted(verbose)

    def progress(ev):
        if show:
            click.echo(f"\rruns: {ev['done']} done, {ev['failed']} failed, {ev['running']} running "
                       f"of {ev['total']}   ", err=True, nl=False)

    rows = run_batch(spec, scheduler=scheduler, workers=workers, progress=progress)
    if show:
        click.echo("", err=True)
    ok = sum(r["status"] == "ok" for r in rows)
    if as_json:
        _emit_json({"runs": len(rows), "ok": ok, "failed": len(rows) - ok, "results": rows})
    else:
        for r in rows:
            if r["status"] == "failed":
                click.echo(f"failed: {r['run']}: {r['error']}", err=True)
        out = load_spec(spec)["out"]
        click.echo(f"{ok} of {len(rows)} runs ok; {os.path.join(out, 'results.csv')}, "
                   f"{os.path.join(out, 'summary.md')}")
    if ok < len(rows):  # scripts must see that runs failed (the finished ones are kept and skipped next time)
        click.echo(f"ooc: error: {len(rows) - ok} of {len(rows)} runs failed", err=True)
        sys.exit(1)


# -- synth -----------------------------------------------------------------------------------------
@main.command()
@click.argument("store", type=click.Path())
@click.option("--rows", type=int, required=True, help="Number of examples.")
@click.option("--cols", type=int, required=True, help="Number of features.")
@click.option("--nnz-per-row", type=int, required=True, help="Nonzeros per example.")
@click.option("--task", type=click.Choice(["binary", "multiclass", "regression"]), default="binary",
              show_default=True, help="Kind of labels, drawn from a planted sparse model.")
@click.option("--classes", "n_classes", type=int, default=3, show_default=True, help="Classes of --task multiclass.")
@click.option("--zipf", type=float, default=1.1, show_default=True, help="Feature popularity exponent.")
@click.option("--informative", type=int, default=100, show_default=True,
              help="Nonzero weights of the planted model.")
@click.option("--noise", type=float, default=0.05, show_default=True,
              help="Label flip probability (classification), or noise std relative to the signal (regression).")
@click.option("--values", type=click.Choice(["normalized", "gaussian", "binary"]), default="normalized",
              show_default=True, help="Nonzero values: 1/sqrt(nnz-per-row) (unit-norm rows), standard Gaussian, or ones.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the generator.")
@click.option("--format", "fmt", type=click.Choice(["zarr", "hdf5"]), default="zarr", show_default=True,
              help="Store backend.")
@click.option("--layout", type=click.Choice(["rows", "cols", "both"]), default="both", show_default=True,
              help="Matrix layouts to store (as in convert).")
@click.option("--memory", default="1GiB", show_default=True, help="Memory for writing the store (as in convert).")
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default="float32", show_default=True,
              help="Type of the stored values.")
@click.option("--overwrite", is_flag=True, help="Replace STORE if it exists (only an ooc store).")
@click.option("--json", "as_json", is_flag=True, help="Print the store summary as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="Show progress even when not on a terminal.")
@_user_errors
def synth(store, rows, cols, nnz_per_row, task, n_classes, zipf, informative, noise, values, seed, fmt,
          layout, memory, dtype, overwrite, as_json, verbose):
    """Generate synthetic sparse data straight into STORE (streaming, any size)."""
    from .synth import synth as do_synth

    bar = ConvertProgress(wanted(verbose))
    try:
        st = do_synth(store, rows, cols, nnz_per_row, task=task, n_classes=n_classes, zipf=zipf,
                      informative=informative, noise=noise, values=values, seed=seed, format=fmt,
                      layout=layout, memory=memory, dtype=dtype, overwrite=overwrite, progress=bar)
    finally:
        bar.close()
    i = _store_info(st)
    if as_json:
        _emit_json(i)
    else:
        click.echo(f"wrote {store}: {i['n_rows']} x {i['n_cols']}, {i['nnz']} nonzeros, {i['label_kind']}")


# -- demo ------------------------------------------------------------------------------------------
@main.command()
@click.option("--dir", "workdir", type=click.Path(file_okay=False), default=None,
              help="Where to put the demo files (default: a new temporary directory).")
@click.option("--rows", type=int, default=20000, show_default=True,
              help="Training rows to generate (a quarter as many test rows).")
@_user_errors
def demo(workdir, rows):
    """Generate text-like data, convert it, describe it, train a certified model, evaluate it."""
    import warnings

    from .evaluate import evaluate as do_evaluate
    from .store.ingest import convert as do_convert
    from .synth import SynthSource, write_svmlight
    from .train import train as do_train

    workdir = workdir or tempfile.mkdtemp(prefix="ooc-demo-")
    os.makedirs(workdir, exist_ok=True)
    src = SynthSource(rows + rows // 4, 5000, 20, seed=0)
    train_file = os.path.join(workdir, "train.svm.gz")
    test_file = os.path.join(workdir, "test.svm")
    store = os.path.join(workdir, "train.zarr")
    run_dir = os.path.join(workdir, "run")
    click.echo(f"1. writing {rows} training and {rows // 4} test rows of synthetic text-like data "
               f"(5000 features, 20 per row, Zipf popularity, 5% label noise) to {workdir}")
    write_svmlight(lambda: iter([src.chunk(0, rows)]), train_file)
    write_svmlight(lambda: iter([src.chunk(rows, rows + rows // 4)]), test_file)
    click.echo(f"2. ooc convert {train_file} {store}")
    bar = ConvertProgress(wanted(False))
    try:
        st = do_convert(train_file, store, overwrite=True, progress=bar)
    finally:
        bar.close()
    click.echo(f"3. ooc info {store}")
    click.echo(format_info(_store_info(st)))
    click.echo(f"4. ooc train {store} --out {run_dir} --loss logistic --l2 1e-4 --bias 1 --tol 1e-6")
    bar = EpochProgress(wanted(False), 100)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = do_train(st, run_dir, overwrite=True, progress=bar, l2=1e-4, bias=1.0, tol=1e-6)
    finally:
        bar.close()
    _report(run.result, False)
    click.echo(f"5. ooc evaluate {run_dir} {test_file}")
    m = do_evaluate(run_dir, test_file)
    click.echo(f"   held-out accuracy {m['accuracy']:.4f}, logloss {m['logloss']:.4f} on {m['n_rows']} rows")
    click.echo(f"\ndemo files are in {workdir} (convergence plot: {os.path.join(run_dir, 'convergence.png')})")


if __name__ == "__main__":  # pragma: no cover
    main()
