"""The ``ooc`` command line (the contract in docs/cli.rst: scripts and tests rely on it).

Errors users can cause (bad input, missing store, bad option values) end in one
line on stderr and a non-zero exit status, never a traceback. ``--json`` prints
one JSON object on the last line of stdout.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shlex
import sys
import tempfile
from typing import Callable, NamedTuple

import click

from . import interrupts
from . import options as T
from ._version import __version__
from .kernels.hash_bits import DEFAULT_HASH_BITS
from .numtext import versus
from .progress import ConvertProgress, EpochProgress, RowsProgress, wanted
from .progress import echo as progress_echo


class UserError(click.ClickException):
    """An error to show as one line, exit status 1."""

    def show(self, file=None):
        click.echo(f"ooc: error: {self.format_message()}", err=True)


def _user_errors(fn):
    """Turn the exceptions a user can cause into one-line errors."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        # imported when a command runs, not when the CLI loads (a Ctrl-C here is click's Abort: status 130)
        from .fsutil import disk_full_error, os_error_line, sweep_temporaries
        from .runs.rundir import RunError
        from .store.backend import StoreError
        from .store.readers import InputError

        try:
            sweep_temporaries()  # what killed ooc processes left, wherever they were writing
            return fn(*args, **kwargs)
        except click.ClickException:
            raise
        except BrokenPipeError as exc:
            if _stdout_closed():  # its reader had enough (``| head``): no error (click would exit 1)
                _quiet_closed_stdout()
            raise UserError(os_error_line(exc) or _first_line(exc)) from None
        except (InputError, StoreError, RunError, FileExistsError, FileNotFoundError, ValueError,
                RuntimeError) as exc:
            raise UserError(_first_line(exc)) from None
        except OSError as exc:  # permission denied, not a directory, a full disk ...: the path and the reason
            full = disk_full_error(exc)
            line = _named_os_error(exc, os_error_line(exc), kwargs)
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


#: The arguments that name what a command writes, in the order looked for (train: ``out``, not its ``store``).
_OUTPUT_ARGS = ("out_file", "out", "out_store", "store", "run")


def _named_os_error(exc: OSError, line: str, kwargs: dict) -> str:
    """``line`` naming a file: an error of a write to an open file (EFBIG, ENOSPC, EIO, ...) carries no
    path, so the command's output (its argument that names it) is named instead."""
    if exc.filename is not None or not line:
        return line
    import errno

    target = next((kwargs[k] for k in _OUTPUT_ARGS if kwargs.get(k)), None)
    reason = exc.strerror or line
    if target is None:
        return line
    # these only writing causes; another (EIO, EACCES) may be a read: named without saying which
    writing = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)
    return f"{target}: {'writing failed: ' if writing else ''}{reason}"


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


#: Warnings meant for the authors of code that calls a library, not for the user of a command.
_FOR_DEVELOPERS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning, ImportWarning, ResourceWarning)


@contextlib.contextmanager
def _one_line_warnings():
    """Every warning raised while a command runs (ooc's, NumPy's ``RuntimeWarning``, a library's
    ``UserWarning``) reaches the user as one line, ``ooc: warning: ...``, once per message, never
    Python's two lines with the source line; the developers' kind (deprecations) are not shown. A
    training's own rule (:func:`_training_warnings`) applies inside it."""
    import warnings

    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    seen = set()

    def show(message, category, filename, lineno, file=None, line=None):
        ours = os.path.abspath(str(filename)).startswith(package)
        if issubclass(category, _FOR_DEVELOPERS) and not ours:
            return
        text = " ".join(str(message).split())
        text = text if ours and issubclass(category, UserWarning) else f"{category.__name__}: {text}"
        if text not in seen:
            seen.add(text)
            progress_echo(f"ooc: warning: {text}")

    with warnings.catch_warnings():
        warnings.showwarning = show  # restored when the block ends
        yield


def _emit_json(obj: dict) -> None:
    from .jsonout import dumps

    click.echo(dumps(obj))  # strict JSON: a non-finite number is null (ooc.jsonout)


@contextlib.contextmanager
def _whole_process():
    """An explicit ``--memory`` counts the whole process while a command runs (:mod:`ooc._memlimit`)."""
    from . import _memlimit

    before = _memlimit.counts_whole_process()
    # OOC_MEMORY_SCOPE=work: --memory is what the work adds, as for a Python caller (a supervisor that
    # accounts for the process itself; the tests that drive the read-ahead gate on tiny stores)
    _memlimit.whole_process(os.environ.get("OOC_MEMORY_SCOPE", "process") != "work")
    try:
        yield
    finally:
        _memlimit.whole_process(before)


class _EchoHandler(logging.Handler):
    def emit(self, record):
        progress_echo(f"ooc: {record.getMessage()}")  # above a progress bar, never inside its line


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
            with interrupts.stop_on_signals(), _whole_process(), _one_line_warnings():
                rv = super().main(args, prog_name, complete_var, False, **extra)
                sys.stdout.flush()  # what is still buffered: a closed stdout is found here, not at exit
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
        except BrokenPipeError as e:
            if not _stdout_closed():
                from .fsutil import os_error_line

                click.echo(f"ooc: error: {os_error_line(e) or e}", err=True)
                sys.exit(1)
            _quiet_closed_stdout()
        sys.exit(rv if isinstance(rv, int) else 0)


#: the exit status of a command whose reader closed its stdout (``ooc predict ... | head``): a shell's
#: for a process ended by SIGPIPE, which Python ignores
EXIT_CLOSED_STDOUT = 128 + 13


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reading end is closed (its reader, ``head``, had enough)."""
    import select

    try:
        fd = sys.stdout.fileno()
        p = select.poll()
        p.register(fd, 0)  # POLLERR comes whatever is asked: the reading end is gone
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in p.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor (tests' captured stdout)
        return False


def _quiet_closed_stdout() -> None:
    """End the command without a word when its stdout's reader left (Python's advice for SIGPIPE):
    what is still buffered for stdout goes to /dev/null, not to an error at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    sys.exit(EXIT_CLOSED_STDOUT)


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ooc")
def main():
    """Train regularized linear models on sparse data larger than memory."""
    from ._malloc import tune_malloc

    tune_malloc()  # block-sized buffers must go back to the system when freed (see ooc._malloc)


class _Later(NamedTuple):
    """Where the options ``make()`` returns go among a command's options (see :class:`_ConfigOptions`)."""

    make: Callable[[], list]


def _later(make: Callable[[], list]):
    """A decorator: the click options ``make()`` returns, in ``--help``'s order, at this place among
    the command's options; made when click first reads them (the command must be a :class:`_ConfigOptions`)."""

    def deco(fn):
        fn.__dict__.setdefault("__click_params__", []).append(_Later(make))  # as click.option does
        return fn

    return deco


class _ConfigOptions(click.Command):
    """A command with options made from :class:`ooc.config.TrainConfig`, whose fields hold their defaults,
    types, choices and help (:func:`_later`, :func:`train_options`).

    They are made the first time click reads the command's parameters (to parse its arguments, to show
    its help), not when the command line loads: ``ooc.config`` imports the solvers' registry, the
    losses and the memory planner, which ``ooc --help`` and ``ooc convert`` do without.
    """

    @property
    def params(self) -> list:
        if any(isinstance(p, _Later) for p in self._params):
            self._params = [q for p in self._params for q in (p.make() if isinstance(p, _Later) else (p,))]
        return self._params

    @params.setter
    def params(self, value: list) -> None:
        self._params = value


# -- how input files are read ------------------------------------------------------------------
def _text_columns(text_columns, input_format):
    """``--text LABEL:TEXT`` as ``(label, text)`` (None without it; its form is checked by its type,
    :data:`ooc.options.TEXT_COLUMNS`), checked against ``--input-format``."""
    if text_columns is None:
        return None
    if input_format is not None:
        raise click.UsageError(f"--text reads raw text: it cannot go with --input-format {input_format}")
    return T.TEXT_COLUMNS.check(text_columns, "--text")


def _recipe_options(fn):
    """``append``/``predict``/``evaluate``'s options saying how to read a file: by default it is read
    as the store's (the model's) input was (its recipe, :mod:`ooc.store.recipe`); one given that
    differs from the recipe is refused."""
    opts = [
        click.option("--input-format", type=click.Choice(["svmlight", "csv", "npz", "vw"]), default=None,
                     help="Format of the input file (default: the recipe's, else from its name and contents)."),
        click.option("--index-base", type=T.INDEX_BASE, default=None,
                     help="svmlight: the first feature id (default: the recipe's)."),
        click.option("--hash-bits", type=T.HASH_BITS, default=None,
                     help="vw and --text: 2**BITS hashed columns (default: the recipe's)."),
        click.option("--text", "text_columns", type=T.TEXT_COLUMNS, default=None, metavar="LABEL:TEXT",
                     help="Raw text: the label and text columns (default: the recipe's)."),
        click.option("--weight-column", type=T.WEIGHT_COLUMN, default=None, metavar="J",
                     help="CSV: the column of the sample weights (default: the recipe's)."),
        click.option("--header/--no-header", "header", default=None,
                     help="CSV: whether the file's first line is a header (default: as said at convert, else "
                          "found: a line of names, or of numbers counting the columns, which is announced)."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def _recipe_given(kwargs: dict):
    """Pop the :func:`_recipe_options` out of a command's ``kwargs`` as :class:`ooc.store.recipe.Options`."""
    from .store.recipe import Options

    fmt = kwargs.pop("input_format")
    base = kwargs.pop("index_base")
    return Options(fmt, None if base is None else int(base), kwargs.pop("hash_bits"),
                   _text_columns(kwargs.pop("text_columns"), fmt), kwargs.pop("weight_column"), kwargs.pop("header"))


# -- convert ---------------------------------------------------------------------------------
@main.command()
@click.argument("input", type=click.Path(dir_okay=False))
@click.argument("store", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["zarr", "hdf5"]), default="zarr", show_default=True,
              help="Store backend.")
@click.option("--layout", type=click.Choice(["rows", "cols", "both"]), default="both", show_default=True,
              help="Matrix layouts to store: by rows (the dual solvers: sdca, acc-sdca, rcd-dual, dspdc), or both (also "
                   "rcd-primal and dgpd, which read columns too); 'cols' alone is for reading by columns (no solver "
                   "trains on it alone).")
@click.option("--memory", type=T.MEMORY, default="auto", show_default=True,
              help="Memory for the whole process ('auto': what it may use: cgroup limit, RLIMIT_AS, available RAM).")
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default="float32", show_default=True,
              help="Type of the stored values.")
@click.option("--input-format", type=click.Choice(["svmlight", "csv", "npz", "vw"]), default=None,
              help="Input format (default: from the file name and content; .vw or a '|' in the lines: vw, "
                   "Vowpal Wabbit's text format).")
@click.option("--text", "text_columns", type=T.TEXT_COLUMNS, default=None, metavar="LABEL:TEXT",
              help="Read INPUT as a CSV/TSV of raw text: the label in column LABEL, the text in column TEXT "
                   "(0-based numbers or header names); unigrams and bigrams counted into 2**--hash-bits columns.")
@click.option("--hash-bits", type=T.HASH_BITS, default=DEFAULT_HASH_BITS, show_default=True,
              help="vw and --text: features are hashed (VW's MurmurHash3) into 2**BITS columns, as VW's -b.")
@click.option("--index-base", type=T.INDEX_BASE_AUTO, default="auto", show_default=True,
              help="svmlight: the first feature id (auto: 0 if an id 0 occurs, else 1, a guess for a 0-based "
                   "file without feature 0).")
@click.option("--zero-based", type=click.Choice(["auto", "yes", "no"]), default="auto", show_default=True,
              help="Whether svmlight feature ids start at 0 (--index-base 0 / 1).")
@click.option("--label-kind", type=click.Choice(["auto", "binary", "multiclass", "regression"]),
              default="auto", show_default=True,
              help="Task of the labels (auto: two values binary, up to 1000 integers multiclass, else regression).")
@click.option("--n-features", type=T.POSITIVE_INT, default=None, help="Number of features (default: from the data).")
@click.option("--weight-column", type=T.WEIGHT_COLUMN, default=None, metavar="J",
              help="CSV input: column J (0-based, the label is column 0; negative from the end) holds each row's "
                   "sample weight (finite, >= 0), not a feature. An .npz's weights are its key 'sample_weight'.")
@click.option("--header/--no-header", "header", default=None,
              help="CSV input: whether its first line is a header (default: found, and printed: a line of names is "
                   "one; so is a line whose numbers count the columns, as pandas' to_csv writes (0,1,2 or "
                   "label,1,2), a guess; any other line is data). Said, it holds for the store's later files too.")
@click.option("--block-bytes", type=T.BLOCK_BYTES, default=None,
              help="Decoded bytes per block (default 64MiB, at most memory/8).")
@click.option("--overwrite", is_flag=True, help="Replace STORE if it exists.")
@click.option("--threads", type=T.THREADS, default=0, show_default=True,
              help="Threads parsing text input (0: every core the process may use); the store does not depend on it.")
@click.option("--factorize", "factorize", type=T.FACTORIZE, default=None, metavar="K",
              help="Also store A = U V with U = X G^T, V = G (G: K x d Gaussian) for --solver dspdc.")
@click.option("--factorize-seed", type=T.SEED, default=0, show_default=True, help="Seed of G.")
@click.option("--json", "as_json", is_flag=True, help="Print the store summary as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="Show progress even when not on a terminal.")
@_user_errors
def convert(input, store, fmt, layout, memory, dtype, input_format, text_columns, hash_bits, index_base, zero_based,
            label_kind, n_features, weight_column, header, block_bytes, overwrite, threads, factorize, factorize_seed, as_json, verbose):
    """Convert INPUT (svmlight/LIBSVM, CSV/TSV, Vowpal Wabbit, raw text, .npz; .gz/.bz2/.xz; '-' for stdin, or an
    fsspec URL) into the ooc store STORE (a local path or file:// URL)."""
    from .store.ingest import convert as do_convert

    text_columns = _text_columns(text_columns, input_format)

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
                        weight_column=weight_column, overwrite=overwrite, progress=bar, hash_bits=hash_bits,
                        text_columns=text_columns, threads=threads, header="auto" if header is None else header,
                        index_base=None if index_base == "auto" else int(index_base))
    finally:
        bar.close()
    # the memory figures only for --json: they import the solvers' registry, which the line does not need
    info = _store_info(st) if as_json else st.info()
    if as_json:
        _emit_json(info)
    else:
        click.echo(f"wrote {store}: {info['n_rows']} rows x {info['n_cols']} cols, {info['nnz']} nonzeros, "
                   f"{info['label_kind']}, {_fmt_bytes(info['bytes_on_disk'])} on disk")
        if info.get("input"):
            click.echo(f"input: {info['input']}")


# -- info ----------------------------------------------------------------------------------------
def _store_info(st) -> dict:
    """``st.info()`` and the memory each solver family holds for it (``resident_*``, from the planner)."""
    from .solvers.registry import resident_memory

    info = {**st.info(), **resident_memory(st)}
    if st.attrs.get("lineage"):  # made by 'ooc append': the stores it grew from
        info["lineage"] = st.attrs["lineage"]
    return info


@main.command(cls=_ConfigOptions)
@click.argument("store", metavar="STORE|RUN", type=click.Path())
@_later(lambda: _train_options())  # ooc train's options (defined below, made when first read)
@click.option("--warm-start", type=click.Path(file_okay=False), default=None,
              help="As ooc train's: the figures of a run that a finished run's final duals start.")
@click.option("--top", type=T.NONNEG_INT, default=10, show_default=True,
              help="RUN: how many of the largest weights to list.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_user_errors
def info(store, top, as_json, warm_start, **options):
    """Describe STORE: shape, labels, norms, C_P/C_D and the side they recommend, blocks, bytes, and
    whether a run with the training options given (those of 'ooc train': --memory, --solver, --l1,
    --fit-intercept, --multiclass, --threads, ...) fits --memory, per solver, naming the smallest --memory
    each needs. Or describe the run directory RUN: its objective, the certificate (duality gap against --tol),
    and the features of largest weight."""
    from .runs.records import is_run_dir
    from .solvers.registry import explain_auto
    from .store import open_store

    if os.path.isdir(store) and is_run_dir(store):
        from .runinfo import format_run_info, run_info

        i = run_info(store, top=top)
        if as_json:
            _emit_json(i)
        else:
            click.echo(format_run_info(i))
        return

    from click.core import ParameterSource

    from .train import memory_fit

    ctx = click.get_current_context()
    given = {k for k in options if ctx.get_parameter_source(k) not in (ParameterSource.DEFAULT, None)}
    with open_store(store) as st:
        i = _store_info(st)
        i["auto"] = explain_auto(i, st.has_layout("cols"))
        if warm_start is not None and not os.path.isdir(warm_start):
            raise UserError(f"--warm-start {warm_start}: no such run directory")
        i["memory_fit"] = memory_fit(st, options, given, warm_start=warm_start)
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
        need = ("--memory" if src == "--memory" else "a limit of") + f" {_fmt_bytes(fam['smallest_memory'], up=True)}"
        how = [f"O(d) vectors {_fmt_bytes(fam['fixed'])}"
               + (f" on {fam['threads']} thread{'s' if fam['threads'] > 1 else ''}" if "threads" in fam else "")]
        if "group" in fam:
            how.append(f"groups of {_fmt_bytes(fam['group'])} ({fam['blocks']} blocks of <= "
                       f"{_fmt_bytes(fam['block_bytes'])}), {_fmt_bytes(fam['read_ahead'])} read ahead")
        how.append(f"O(n) vectors {'in memory' if fam['vectors'] == 'memory' else 'paged'}")
        how.append(f"cache {_fmt_bytes(fam['cache'])}")
        if fam.get("compile_bytes"):
            how.append(f"{_fmt_bytes(fam['compile_bytes'])} for its compiled kernels (Numba compiles those its cache "
                       "lacks)")
        verdict = "fits" if fam["fits"] else "does NOT fit"
        lines.append(f"             {name}: {verdict} ({', '.join(how)}); needs at least {need}")
    if f.get("options_refused"):
        lines.append(f"             no run: {f['options_refused']}")
    for name, why in (f.get("refused") or {}).items():
        if why != f.get("options_refused"):
            lines.append(f"             {name}: not with these options ({why})")
    return lines


def _fmt_bytes(n, up: bool = False) -> str:
    from .units import format_bytes

    return format_bytes(n, up=up)


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
    if i.get("input"):
        lines.append(f"input        {i['input']}")
    if i.get("sample_weights"):
        sw = i["sample_weights"]
        lines.append(f"weights      per-row sample weights: sum {sw['sum']:.6g}, min {sw['min']:.6g}, max {sw['max']:.6g}")
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
    for j, g in enumerate(i.get("lineage") or []):
        lines.append(("grown from   " if j == 0 else "             ")
                     + f"{g['n_rows']} rows of store {g['fingerprint']} (ooc append)")
    for j, line in enumerate(i.get("auto") or []):
        lines.append(("auto solver  " if j == 0 else "             ") + line)
    if i.get("memory_fit"):
        lines += _format_fit(i["memory_fit"])
    if i.get("factorized"):
        lines.insert(-1, f"factorized   A = U V, K = {i['factor_k']} (U = X G^T, V = G, seed {i['factor_seed']}); "
                         f"max row norm of A {i['factor_R']:.4g}; read by --solver dspdc")
    return "\n".join(lines)


# -- train / resume ------------------------------------------------------------------------------
def _report(result: dict, as_json: bool) -> None:
    if as_json:
        _emit_json(result)
        return
    status = ("converged" if result["converged"] else "stopped early (validation no longer improving)"
              if result.get("early_stopped") else "NOT converged (max epochs reached)")
    click.echo(f"{status}: epochs {result['epochs']}, primal {result['primal']:.10g}, dual {result['dual']:.10g}, "
               f"relative gap {versus(result['rel_gap'], result['tol'])} (tol {result['tol']:g}), nnz(w) {result['nnz_w']}, "
               f"{result['seconds']:.2f} s")
    if result.get("validation") is not None:
        stop = ("early stop: " if result.get("early_stopped") else "")
        click.echo(f"{stop}validation {result['validation_metric']} {result['validation']:.6g} (best "
                   f"{result['best_validation']:.6g} at epoch {result['best_epoch']})")
    if result.get("stop_reason"):
        click.echo(f"why: {result['stop_reason']}; {result['advice']}")
    click.echo(f"run directory: {result['run']}")
    if not result["converged"] and not result.get("early_stopped") and "ooc resume" not in result.get("advice", ""):
        click.echo(f"to continue: ooc resume {shlex.quote(str(result['run']))} --max-epochs "
                   f"{2 * max(int(result['epochs']), 1)}")
    if result.get("memory_budget") is not None:
        click.echo(f"memory: {_fmt_bytes(result['memory_budget'])} for training ({result['memory_source']})")


#: ``ooc train``'s options in the order ``--help`` lists them (their defaults, types, choices and
#: help come from :class:`ooc.config.TrainConfig`).
TRAIN_OPTION_ORDER = (
    "loss", "gamma", "multiclass", "l2", "l1", "solver", "sampling", "paging", "duals", "block_bytes", "mix_blocks",
    "threads", "inner_passes", "dgpd_rounds", "dgpd_batch", "dgpd_growth", "dgpd_dual_step", "dgpd_fallback", "tol", "max_epochs", "validation",
    "validation_metric", "early_stop", "memory", "bias", "fit_intercept",
    "class_weight", "seed", "checkpoint_every", "distributed", "local_passes", "exchange", "sync_rows",
)


def train_options(fn):
    """Add one click option per :class:`ooc.config.TrainConfig` field to the command ``fn`` (a
    :class:`_ConfigOptions`: they are made when click first reads them, :func:`_train_options`)."""
    return _later(_train_options)(fn)


def _train_options() -> list:
    """One click option per :class:`ooc.config.TrainConfig` field, in :data:`TRAIN_OPTION_ORDER`.

    An option's type is its field's :mod:`ooc.options` type (its range, checked while the arguments
    are parsed), or a choice when the field lists choices; a default of None is not shown (it means "not set").
    """
    import dataclasses

    from .config import TrainConfig

    fields = {f.name: f for f in dataclasses.fields(TrainConfig) if f.init}
    if set(fields) != set(TRAIN_OPTION_ORDER):  # a new field must be placed in the help's order
        raise RuntimeError("TRAIN_OPTION_ORDER differs from TrainConfig's fields: "
                           f"{sorted(set(fields) ^ set(TRAIN_OPTION_ORDER))}")
    options = []
    for name in TRAIN_OPTION_ORDER:
        f = fields[name]
        kind = str(f.type).split("|")[0].strip()
        choices = f.metadata.get("choices")
        # the field's type (ooc.options) parses the value: a bad one is refused naming the option and its range
        ptype = click.Choice(list(choices)) if choices else f.metadata.get("type") or {"float": float,
                                                                                     "int": int}.get(kind)
        extra = {"help": f.metadata["help"]} if f.metadata.get("help") else {}
        if ptype is not None:
            extra["type"] = ptype
        flag = "--" + name.replace("_", "-")
        if kind == "bool":  # a flag; one that is on by default also has its --no- form
            extra["is_flag"] = True
            if f.default:
                flag = f"{flag}/--no-{flag[2:]}"
        options.append(click.Option([flag, name], default=f.default, show_default=f.default is not None, **extra))
    return options


@main.command(cls=_ConfigOptions)
@click.argument("store", type=click.Path())
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Run directory to create.")
@train_options
@click.option("--warm-start", type=click.Path(file_okay=False), default=None,
              help="A finished run on the same store whose final duals start this one (another --l2 or --l1).")
@click.option("--overwrite", is_flag=True, help="Replace an existing run directory.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (the result) on the last line of stdout.")
@click.option("-v", "--verbose", is_flag=True, help="Show progress (and the memory chosen) even when not on a terminal.")
@_user_errors
def train(store, out, warm_start, overwrite, as_json, verbose, **options):
    """Train on STORE into the run directory OUT, to a certified relative duality gap."""
    from .train import train as do_train

    if warm_start is not None and not os.path.isdir(warm_start):
        raise UserError(f"--warm-start {warm_start}: no such run directory")
    bar = EpochProgress(wanted(verbose), options["tol"], options["max_epochs"])
    try:
        with _training_warnings(), _log_lines(wanted(verbose)):
            run = do_train(store, out, overwrite=overwrite, progress=bar, warm_start=warm_start, **options)
    finally:
        bar.close()
    _report(run.result, as_json)


def _run_limits(run: str, max_epochs: int | None) -> tuple:
    """``--tol`` and ``--max-epochs`` of the run to resume, for its progress bar (None, None when its
    ``run.json`` cannot be read: resume itself then says why)."""
    from .runs.rundir import RunDir, RunError

    try:
        cfg = RunDir.open(run).config
        return cfg.get("tol"), max_epochs or cfg.get("max_epochs")
    except (RunError, OSError, ValueError):
        return None, max_epochs


@main.command()
@click.argument("run", type=click.Path(file_okay=False))
@click.option("--max-epochs", type=T.NONNEG_INT, default=None,
              help="New epoch limit (default: the run's); with --store, the new trajectory's passes.")
@click.option("--store", type=click.Path(), default=None,
              help="The run's store with rows appended ('ooc append'): continue the finished run on all rows, "
                   "from its final duals (new rows at 0), to a new certificate. RUN's converged model stays in "
                   "RUN/model until the new trajectory converges too (a warning says so when it stops short).")
@click.option("--threads", type=T.THREADS, default=None,
              help="Compute threads from here on (default: the run's own count, which keeps the resume bit-exact; "
                   "0: every core). Another count changes the iterates of a binary or regression run from here on.")
@click.option("--memory", type=T.MEMORY, default=None,
              help="This process's memory, as train's (default: the run's own, from run.json; 'auto': what this "
                   "process may use). The iterates never depend on it; one too small is refused before the run "
                   "changes, naming the smallest that works.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (the result) on the last line of stdout.")
@click.option("-v", "--verbose", is_flag=True, help="Show progress (and the memory chosen) even when not on a terminal.")
@_user_errors
def resume(run, max_epochs, store, threads, memory, as_json, verbose):
    """Continue RUN from its last checkpoint (exactly as if it had never stopped), or on STORE's new rows."""
    from .train import resume as do_resume

    bar = EpochProgress(wanted(verbose), *_run_limits(run, max_epochs))
    try:
        with _training_warnings(), _log_lines(wanted(verbose)):
            r = do_resume(run, max_epochs=max_epochs, progress=bar, store=store, threads=threads, memory=memory)
    finally:
        bar.close()
    _report(r.result, as_json)


@main.command()
@click.argument("store", type=click.Path())
@click.argument("newdata", type=click.Path(dir_okay=False))
@click.option("--out", "out_store", type=click.Path(), default=None,
              help="Write the grown store here (default: replace STORE atomically).")
@_recipe_options
@click.option("--memory", type=T.MEMORY, default="auto", show_default=True,
              help="Memory for the whole process, as in convert ('auto': what it may use).")
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists (only an ooc store).")
@click.option("--widen", is_flag=True,
              help="Let svmlight rows bring feature ids past STORE's features (more columns); without it they are "
                   "refused: a store never widens silently.")
@click.option("--json", "as_json", is_flag=True, help="Print the new store's summary as JSON.")
@_user_errors
def append(store, newdata, out_store, memory, overwrite, widen, as_json, **recipe):
    """Add the rows of NEWDATA to STORE: a new store (new fingerprint) recording STORE's in its lineage.
    NEWDATA is read as STORE's input was (its recipe: format, index base, hash bits, text and CSV columns;
    --index-base for an svmlight file numbered the other way)."""
    from .store.append import append as do_append

    st = do_append(store, newdata, out_store, memory=memory, overwrite=overwrite, options=_recipe_given(recipe),
                   widen=widen)
    info = _store_info(st)
    if as_json:
        _emit_json(info)
    else:
        click.echo(f"wrote {st.path}: {info['n_rows']} rows x {info['n_cols']} cols ({st.attrs['lineage'][-1]['n_rows']} "
                   f"before), {info['nnz']} nonzeros; 'ooc resume RUN --store {st.path}' continues a run on them")


# -- predict / evaluate ---------------------------------------------------------------------------
@main.command()
@click.argument("run", type=click.Path(file_okay=False))
@click.argument("input", type=click.Path())
@click.option("--out", "out_file", type=click.Path(dir_okay=False), default=None,
              help="Write predictions here (default: stdout).")
@click.option("--proba", is_flag=True,
              help="Print each row's class probabilities, one column per class in the model's class order, "
                   "summing to 1 (logistic, binary or one-vs-rest; other models are refused).")
@click.option("--memory", type=T.MEMORY, default="auto", show_default=True,
              help="Memory for the whole process ('auto': what it may use); rows are read in blocks that fit.")
@click.option("--threads", type=T.THREADS, default=0, show_default=True,
              help="Threads computing margins (0: every core the process may use); the output does not depend on it.")
@_recipe_options
@click.option("-v", "--verbose", is_flag=True, help="Show progress even when not on a terminal.")
@_user_errors
def predict(run, input, out_file, proba, memory, threads, verbose, **recipe):
    """Predict the rows of INPUT (a store, or an svmlight/CSV/.npz file; '-' for stdin), one label per line."""
    from .evaluate import iter_predictions
    from .fsutil import contains
    from .owned import output

    if out_file:
        # the predictions appear whole when done (a temporary renamed): never the input or the run's own files
        for what, path in (("the input", input), ("the run directory", run)):
            if "://" not in path and os.path.lexists(path) and contains(path, out_file):
                raise UserError(f"--out {out_file}: is {what} {path} or inside it; choose another file")
    options = _recipe_given(recipe)
    bar = RowsProgress(wanted(verbose), "predict")
    try:
        with output(out_file, kind="predictions", what="predictions") if out_file \
                else contextlib.nullcontext(sys.stdout) as fh:
            for pred in iter_predictions(run, input, proba=proba, memory=memory, threads=threads, progress=bar,
                                         options=options):
                fh.write("\n".join(" ".join(map(_fmt_proba, p)) if proba else _fmt_label(p) for p in pred))
                if len(pred):
                    fh.write("\n")
    finally:
        bar.close()


def _fmt_proba(x) -> str:
    return repr(float(x))  # every digit: the columns sum to 1 as the model computed them


def _fmt_label(x) -> str:
    x = float(x)
    return str(int(x)) if x == int(x) and abs(x) < 1e15 else repr(x)


@main.command()
@click.argument("run", type=click.Path(file_okay=False))
@click.argument("input", type=click.Path())
@click.option("--memory", type=T.MEMORY, default="auto", show_default=True,
              help="Memory for the whole process ('auto': what it may use); rows are read in blocks that fit.")
@click.option("--threads", type=T.THREADS, default=0, show_default=True,
              help="Threads computing margins (0: every core the process may use); the output does not depend on it.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as one JSON object.")
@_recipe_options
@click.option("-v", "--verbose", is_flag=True, help="Show progress even when not on a terminal.")
@_user_errors
def evaluate(run, input, memory, threads, as_json, verbose, **recipe):
    """Score RUN's model on INPUT (a store or a file; '-' for stdin): the primal objective; accuracy, log loss, ROC AUC, precision,
    recall, F1 and the confusion matrix (classification); RMSE, MAE and R^2 (regression)."""
    from .evaluate import evaluate as do_evaluate

    options = _recipe_given(recipe)
    bar = RowsProgress(wanted(verbose), "evaluate")
    try:
        m = do_evaluate(run, input, memory=memory, threads=threads, progress=bar, options=options)
    finally:
        bar.close()
    if as_json:
        _emit_json(m)
        return
    click.echo(format_metrics(m))


def format_metrics(m: dict) -> str:
    """Human-readable ``ooc evaluate``: one metric a line, then the confusion matrix as a table."""
    lines = []
    for k, v in m.items():
        if k in ("confusion_matrix", "classes"):
            continue
        lines.append(f"{k:>14}  {'n/a (one class only)' if v is None else f'{v:.6g}' if isinstance(v, float) else v}")
    if "confusion_matrix" in m:
        names = [_fmt_label(c) for c in m["classes"]]
        width = max(len(x) for x in names + [str(c) for row in m["confusion_matrix"] for c in row])
        lines.append(f"{'confusion':>14}  rows: true class, columns: predicted")
        lines.append(" " * 16 + " " * (width + 2) + "  ".join(x.rjust(width) for x in names))
        for name, row in zip(names, m["confusion_matrix"]):
            lines.append(" " * 16 + name.rjust(width) + "  " + "  ".join(str(c).rjust(width) for c in row))
    return "\n".join(lines)


# -- export --------------------------------------------------------------------------------------
@main.command()
@click.argument("run", type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["liblinear", "text", "sklearn", "onnx"]), required=True,  # export.FORMATS
              help="liblinear: LIBLINEAR's model file (its predict reads it); text: 'feature weight' lines; "
                   "sklearn: a pickled fitted scikit-learn estimator; onnx: through skl2onnx (pip install 'ooc[onnx]').")
@click.option("--out", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="File to write; '-' for standard output (the summary then goes to standard error).")
@click.option("--overwrite", is_flag=True, help="Replace OUT if it is an export of this format ooc wrote.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (what was written).")
@_user_errors
def export(run, fmt, out, overwrite, as_json):
    """Write RUN's model to OUT for another tool (LIBLINEAR, scikit-learn, ONNX) or as text."""
    from .export import STDOUT
    from .export import export as do_export

    to_stdout = out == STDOUT
    if to_stdout and as_json:  # refused before anything is written: one stream cannot carry both
        raise UserError("--json: standard output carries the export with --out -; write it to a file to get JSON")
    res = do_export(run, out, fmt, overwrite=overwrite)
    if as_json:
        _emit_json(res)
    else:
        where = "standard output" if to_stdout else out
        click.echo(f"wrote {where}: {fmt} export of the {res['task']} {res['loss']} model "
                   f"({res['n_features']} features, {_fmt_bytes(res['bytes'])})", err=to_stdout)
        if fmt == "liblinear" and res["index_base"] == 0:  # LIBLINEAR's ids start at 1
            click.echo("note: the training data's feature ids started at 0; LIBLINEAR's feature j is their j - 1 "
                       "(add 1 to the ids of the files LIBLINEAR reads)", err=to_stdout)


# -- batch ---------------------------------------------------------------------------------------
@main.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--scheduler", type=T.ADDRESS, default=None,
              help="Address of an existing Dask scheduler, tcp://HOST:PORT (default: a LocalCluster).")
@click.option("--workers", type=T.WORKERS, default=None, help="Worker processes of the LocalCluster (default: min(4, cores)).")
@click.option("--threads", type=T.THREADS, default=0, show_default=True,
              help="Compute threads of each run that does not set its own 'threads' (0: the cores of its "
                   "worker's machine shared among the workers there).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
@click.option("-v", "--verbose", is_flag=True, help="Show the runs' progress even when not on a terminal.")
@_user_errors
def batch(spec, scheduler, workers, threads, as_json, verbose):
    """Run the grid / regularization path of the TOML SPEC as Dask tasks (see ooc/batch.py)."""
    from .batch import load_spec, run_batch

    show = wanted(verbose)

    def progress(ev):
        if show:
            click.echo(f"\rruns: {ev['done']} done, {ev['failed']} failed, {ev['running']} running "
                       f"of {ev['total']}   ", err=True, nl=False)

    rows = run_batch(spec, scheduler=scheduler, workers=workers, progress=progress, threads=threads)
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
@click.option("--rows", type=T.SYNTH["rows"], required=True, help="Number of examples.")
@click.option("--cols", type=T.SYNTH["cols"], required=True, help="Number of features.")
@click.option("--nnz-per-row", type=T.SYNTH["nnz_per_row"], required=True, help="Nonzeros per example.")
@click.option("--task", type=click.Choice(["binary", "multiclass", "regression"]), default="binary",
              show_default=True, help="Kind of labels, drawn from a planted sparse model.")
@click.option("--classes", "n_classes", type=T.SYNTH["n_classes"], default=3, show_default=True, help="Classes of --task multiclass.")
@click.option("--zipf", type=T.SYNTH["zipf"], default=1.1, show_default=True, help="Feature popularity exponent.")
@click.option("--informative", type=T.SYNTH["informative"], default=100, show_default=True,
              help="Nonzero weights of the planted model.")
@click.option("--noise", type=T.SYNTH["noise"], default=0.05, show_default=True,
              help="Label flip probability (classification), or noise std relative to the signal (regression).")
@click.option("--values", type=click.Choice(["normalized", "gaussian", "binary"]), default="normalized",
              show_default=True, help="Nonzero values: 1/sqrt(nnz-per-row) (unit-norm rows), standard Gaussian, or ones.")
@click.option("--seed", type=T.SYNTH["seed"], default=0, show_default=True, help="Seed of the generator.")
@click.option("--format", "fmt", type=click.Choice(["zarr", "hdf5"]), default="zarr", show_default=True,
              help="Store backend.")
@click.option("--layout", type=click.Choice(["rows", "cols", "both"]), default="both", show_default=True,
              help="Matrix layouts to store (as in convert).")
@click.option("--memory", type=T.MEMORY, default="auto", show_default=True, help="Memory for writing the store (as in convert: auto, what this process may use).")
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

    if task != "regression" and noise > 1:  # (the type bounds regression's; a probability is at most 1)
        raise click.BadParameter(f"a label flip probability for --task {task}: from 0 to 1 (got {noise:g})",
                                 param_hint="'--noise'")

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
              help="Where to put the demo files (default: a new temporary directory); it must be missing or "
                   "empty unless --overwrite is given.")
@click.option("--rows", type=T.Number(True, 4, 10**9), default=20000, show_default=True,
              help="Training rows to generate (a quarter as many test rows).")
@click.option("--overwrite", is_flag=True,
              help="Run in a --dir that is not empty: replace the demo's own files there (only those ooc made), "
                   "keep everything else.")
@_user_errors
def demo(workdir, rows, overwrite):
    """Generate text-like data, convert it, describe it, train a certified model, evaluate it."""
    import warnings

    from .evaluate import evaluate as do_evaluate
    from .owned import check_target
    from .store.ingest import convert as do_convert
    from .synth import SynthSource, write_svmlight
    from .train import train as do_train

    workdir = workdir or tempfile.mkdtemp(prefix="ooc-demo-")
    check_target(workdir)  # never written through a link (its files: only those ooc wrote are replaced)
    held = sorted(os.listdir(workdir), key=lambda n: (n.startswith("."), n)) if os.path.isdir(workdir) else []
    if held and not overwrite:
        # a second demo would replace the data and run that later commands (a resumed run, a run trained
        # on train.zarr, an evaluation on test.svm) were made from: only when the user says so
        listed = ", ".join(held[:4]) + (f" and {len(held) - 4} more" if len(held) > 4 else "")
        raise UserError(f"--dir {workdir}: is not empty (holds {listed}); choose a new directory, or --overwrite "
                        "to replace the demo's own files there")
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
    bar = EpochProgress(wanted(False), 1e-6, 100)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = do_train(st, run_dir, overwrite=True, progress=bar, l2=1e-4, bias=1.0, tol=1e-6)
    finally:
        bar.close()
    _report(run.result, False)
    click.echo(f"5. ooc evaluate {run_dir} {test_file}")
    m = do_evaluate(run_dir, test_file)
    click.echo(f"   held-out accuracy {m['accuracy']:.4f}, logloss {m['logloss']:.4f}, ROC AUC {m['roc_auc']:.4f}, "
               f"F1 {m['f1']:.4f} on {m['n_rows']} rows")
    click.echo(f"\ndemo files are in {workdir} (convergence plot: {os.path.join(run_dir, 'convergence.png')})")


if __name__ == "__main__":  # pragma: no cover
    main()
