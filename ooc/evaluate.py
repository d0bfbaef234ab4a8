"""Streamed prediction and evaluation of a trained model on a store or a file.

INPUT is an ooc store, or a file read as the model's training store's input was (its input
recipe, :mod:`ooc.store.recipe`: format, index base, hash bits, raw-text and CSV columns),
streamed piece by piece. Two kinds of wrong use are refused with one line naming INPUT
(:class:`~ooc.store.readers.InputError`):

- Another width than the model's (docs/formats.rst, "Input width"). A store, an .npz, a CSV and
  hashed input declare their column count: it must be the model's, as scikit-learn refuses an
  ``X`` of another width. An svmlight file declares nothing: fewer columns are fine (the features
  after its largest id are zero), an id beyond the model's features is refused with its line. A
  store read another way than the model's (another format, index base, hash bits...) is refused
  naming the difference.
- Labels the model cannot score (:func:`evaluate` only; :func:`iter_predictions` ignores
  labels, which unlabelled files often fill with a placeholder). A binary model knows the two
  original label values of its training store (``classes_``, the store's ``label_values``), a
  multiclass model its classes: any other label is refused with the line (text) or row
  (store, .npz) where it occurs. A regression model takes any finite real label (a 0/1 target
  is a legitimate regression target); non-finite labels never get this far (the readers and
  the stores refuse them).
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, NamedTuple

import numpy as np

from ._cpu import resolve_threads
from ._malloc import tune_malloc
from ._memguard import governed
from ._memlimit import Budget, governor_reserve
from .model import LinearModel, log_proba_from_margins, proba_from_margins
from .objectives.losses import loss_spec, make_loss
from .objectives.penalties import ElasticNet, primal_value
from .store import layout as L
from .store.ingest import (
    MIN_WORK,
    _load_numba,
    command_budget,
    lines_held,
    load_kernels,
    text_chunk_bytes,
    whole_input_bytes,
)
from .store.readers import InputError
from .store.recipe import pass_base


class _Piece(NamedTuple):
    """Consecutive rows of INPUT: CSR arrays with 0-based ids as in training, the original labels,
    where the first row is (``line``: 1-based line of a text file; else ``row``: 0-based row), and
    how far INPUT has been read (``done`` of ``total`` ``unit``: rows of a store or an .npz, input
    bytes of a text file)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    labels: np.ndarray
    line: int | None = None
    row: int = 0
    done: int = 0
    total: int = 0
    unit: str = "rows"


def progress_event(piece: _Piece, rows: int) -> dict:
    """What a progress display gets after each piece: ``rows`` scored so far, and ``done`` of
    ``total`` ``unit`` (rows, or bytes ``B`` of a text file) read."""
    return {"rows": rows, "done": piece.done, "total": piece.total, "unit": piece.unit}


def _check_width(source: str, what: str, n_cols: int, model: LinearModel) -> None:
    """Refuse an INPUT that declares another number of feature columns than the model has."""
    if n_cols != model.n_features:
        raise InputError(source, f"{what} has {n_cols} features, but the model has {model.n_features} (another "
                                 "feature space: read it as the model's training input was, see 'ooc info')")


def _model_recipe(model: LinearModel):
    """How the model's training store's input was read, and how messages name it."""
    from .store.recipe import Recipe

    owner = f"the model's training store {model.meta.get('store', '')}".rstrip()
    return Recipe.from_attrs(model.meta, owner), owner


def _svmlight_columns(ch, base: int, d: int, source: str, seen: dict, how: str, say_base=pass_base):
    """An svmlight chunk's ids as the model's columns (``id - base``), refusing, with the line, an id
    below ``base`` or one at or beyond ``base + d`` (a feature the model does not have).

    When the index base explains the refusal, the message names it (the recipe's field that differs,
    not its symptom): an id 0 under base 1 (the file looks 0-based), or the id ``d`` under base 0 with
    no id 0 before it (the file looks 1-based). ``seen['zero']`` carries "an id 0 occurred" across
    chunks; ``how`` says where the base came from (the model's training input, or --index-base)."""
    ind = ch.indices - base
    bad = np.flatnonzero((ind < 0) | (ind >= d))
    first_bad = int(bad[0]) if len(bad) else len(ind)
    if not seen.get("zero") and (ch.indices[:first_bad] == 0).any():
        seen["zero"] = True
    if len(bad):
        k = first_bad
        line = ch.first_line + int(np.searchsorted(ch.indptr, k, side="right")) - 1
        if ind[k] < 0:
            again = (" (if the training input was 0-based too, its store's guess was wrong: convert it again with "
                     "--index-base 0)" if "guessed" in how else "")
            raise InputError(source, f"feature id {int(ch.indices[k])} in a file read {base}-based ({how}): the "
                                     f"file looks 0-based; if it is, {say_base(0)}{again}", line=line)
        if base == 0 and int(ch.indices[k]) == d and not seen.get("zero"):
            raise InputError(source, f"feature id {d} is beyond the model's {d} features (ids 0 to {d - 1}) and no "
                                     f"id 0 came before it: the file looks 1-based, read 0-based ({how}); if it is "
                                     f"1-based, {say_base(1)}", line=line)
        raise InputError(source, f"feature id {int(ch.indices[k])} is beyond the model's {d} features (ids {base} "
                                 f"to {base + d - 1}): another feature space", line=line)
    return ind


#: Bytes one scored (row, class) cell holds at once, by what is done with it (measured with tracemalloc on
#: 20000 x 100 blocks, rounded up): its margin (``decision_csr``'s output, kept while the block is scored) ...
CELL_MARGIN = 8
#: ... computing probabilities or their logarithms (:func:`~ooc.model.log_proba_from_margins`: four
#: (rows x classes) temporaries at its peak), then the result, kept while it is written or scored ...
CELL_PROBA = 32 + 8
#: ... a probability's text (up to 24 characters with its separator), held three times at once while a
#: block is written (the rows' strings, their join, its encoding) ...
CELL_TEXT = 72
#: ... and ROC AUC's copy of a scored block (:class:`ooc.metrics.ClassificationMetrics`; what it keeps is
#: counted in :data:`SCORES_SHARE`, its copy of the block here).
CELL_SCORES = 8
#: Bytes a scored row holds besides its cells: its label, prediction, class indices, the text of a label
#: (a Python string in a list, joined, encoded) and the per-class loss's columns.
ROW_BYTES = 256
#: The share of the work (1 / this) that a block's scored rows take at once (their (rows x classes)
#: arrays and text): the reading takes 3/8 (a block, its CSR copy, its labels), evaluate's ROC AUC
#: scores 1/:data:`SCORES_SHARE`.
SCORED_SHARE = 8


def scored_row_bytes(classes: int, *, proba: bool = False, text: bool = False, metrics: bool = False) -> int:
    """What one row costs at once while it is scored, beyond its entries: the one account of the
    (rows x classes) arrays a block makes, by which the rows scored at once are chosen
    (:func:`scored_rows`) in ``predict``, ``evaluate`` and their Python functions.

    Parameters
    ----------
    classes : int
        The model's classes (1 for regression; 2 for a binary model).
    proba : bool
        Class probabilities are computed (``--proba``).
    text : bool
        The predictions are written as text (the command line: probabilities, one row a line).
    metrics : bool
        Metrics are computed (evaluate: the probabilities' logarithms, ROC AUC's copy of the scores).
    """
    cell = CELL_MARGIN
    if proba or metrics:
        cell += CELL_PROBA
    if metrics:
        cell += CELL_PROBA + CELL_SCORES  # logloss's logarithms while the ROC AUC's probabilities are held
    if proba and text:
        cell += CELL_TEXT
    return max(1, int(classes)) * cell + ROW_BYTES


def scored_rows(budget: Budget, classes: int, **what) -> int:
    """The rows scored at once (at least one): what :data:`SCORED_SHARE` of ``budget``'s work holds at
    :func:`scored_row_bytes` (``what``: its flags) a row."""
    return max(1, (budget.work // SCORED_SHARE) // scored_row_bytes(classes, **what))


def _scored_parts(piece: _Piece, rows: int) -> Iterator[_Piece]:
    """``piece`` in consecutive parts of at most ``rows`` rows (views of its entries, none copied)."""
    n = len(piece.indptr) - 1
    if n <= rows:
        yield piece
        return
    for a in range(0, n, rows):
        b = min(a + rows, n)
        lo, hi = int(piece.indptr[a]), int(piece.indptr[b])
        yield piece._replace(indptr=piece.indptr[a:b + 1] - lo, indices=piece.indices[lo:hi], data=piece.data[lo:hi],
                             labels=piece.labels[a:b], row=piece.row + a)


def _classes(model: LinearModel) -> int:
    """The model's classes as :func:`scored_row_bytes` counts them (1: regression)."""
    return 1 if model.classes_ is None else len(model.classes_)


def command_memory(model: LinearModel, memory, what: str, source=None, options=None) -> Budget:
    """``memory`` resolved once for predicting or evaluating with ``model`` (:func:`ooc.store.ingest.command_budget`),
    the model and the compiled kernels already in the process (counted in what it holds, not in the work):
    the margins' and, for a text ``source``, its reader's (:func:`ooc.store.ingest.load_kernels`); an
    explicit whole-process ``--memory`` that leaves less than :data:`~ooc.store.ingest.MIN_WORK` is
    refused before INPUT is read, naming the smallest that works: with ``source`` (INPUT), what reading it
    holds whatever the buffers counted (an .npz, read whole: :func:`~ooc.store.ingest.whole_input_bytes`)."""
    _load_numba("float64")  # Numba's machinery (~60 MiB, loaded by the first kernel a process calls)
    model.decision_csr(np.zeros(2, np.int64), np.zeros(0, np.int64), np.zeros(0), 1)  # the margins' kernel
    peak = load_kernels(_input_format(model, source, options), "float64", 1, layout="rows")
    tune_malloc()  # freed pieces go back to the system (ooc._malloc), as in training
    budget = command_budget(memory, held=peak)
    budget.require(MIN_WORK + whole_input_bytes(source), what)
    return budget


def _input_format(model: LinearModel, source, options) -> str | None:
    """The format :func:`_iter_rows` reads a text ``source`` as (the model's recipe, else the file's own);
    None for a store, or where that cannot be told here (then reading it says why, in its own words)."""
    from .store.ingest import _kernel_format
    from .store.recipe import Options, follow

    if source is None or not isinstance(source, (str, os.PathLike)):
        return None
    source = os.fspath(source)
    if source.startswith("memory://") or os.path.isdir(source) or source.endswith((".h5", ".hdf5")):
        return None
    try:
        recipe, owner = _model_recipe(model)
        given = options or Options()
        reading = follow(recipe, given, owner)
        return _kernel_format(source, given.input_format, given.text_columns, reading)
    except Exception:  # noqa: BLE001 - refused by the reading itself, with its own message
        return None


def _governed(budget: Budget):
    """The memory governor (:mod:`ooc._memguard`) holding the process under ``budget``'s ceiling; nothing
    without one (a Python caller's memory, or scoring inside a training whose governor is already on)."""
    if budget.ceiling is None:
        return contextlib.nullcontext()
    return governed(budget.ceiling, reserve=governor_reserve(budget.ceiling))


def is_store_path(source: str) -> bool:
    """Whether ``source`` names a store (else a file, or a stream, read with the recipe)."""
    from .store.backend import StoreError
    from .store.readers import is_stream
    from .store.store import backend_for_path

    # an HDF5 file is a store by its name too: one whose signature is damaged is refused as a
    # store, not parsed as text
    if source.startswith("memory://") or os.path.isdir(source) or source.endswith((".h5", ".hdf5")):
        return True
    if is_stream(source):  # ('-', a pipe: a file's text, never a store)
        return False
    try:
        backend_for_path(source)
    except StoreError:
        return False
    return True


def read_rows(model: LinearModel, source: str, memory="auto", say_base=pass_base) -> Iterator[_Piece]:
    """The rows of ``source`` (a store or a file) as ``ooc predict`` reads them for ``model``: with its
    training store's input recipe (:func:`_iter_rows`), labels not needed; for Python callers (the
    estimators' ``predict(path)``), who must not read a path any other way."""
    yield from _with_streams_closed(_iter_rows(model, source, memory, labels=False, say_base=say_base))


def _iter_rows(model: LinearModel, source: str, memory, labels: bool = True, options=None,
               progress=None, say_base=pass_base) -> Iterator[_Piece]:
    """The pieces of ``source`` (a store or a file), ids 0-based as in training.

    A file is read with the input recipe of the model's training store (:mod:`ooc.store.recipe`;
    ``options``: what the user said, each checked against it); a store must have been read the same
    way. Either must have exactly the model's width (a svmlight file: no id beyond it).
    ``labels=False`` (prediction) lets an .npz come without labels (the pieces then hold zeros).
    """
    from .store.ingest import open_input
    from .store.readers import is_local
    from .store.recipe import Options, Recipe, check_same_columns, follow
    from .store.store import open_store

    is_store = is_store_path(source)
    budget = command_budget(memory)
    recipe, owner = _model_recipe(model)
    if is_store:
        # the store's blocks cut to what the budget holds: a block, its CSR copy for the kernel, the
        # labels and the predictions (about three block sizes at once: 3/8 of it; evaluate keeps its
        # ROC AUC scores in half of it, SCORES_SHARE)
        st = open_store(source).with_blocks(int(min(L.DEFAULT_BLOCK_BYTES, max(budget.work // 8, 1 << 16))))
        check_same_columns(recipe, Recipe.from_attrs(st.attrs, source), owner, f"the store {source}")
        _check_width(source, "the store", st.n_cols, model)
        vals = st.label_values
        _announce(progress, st.n_rows, "rows")
        for b in range(st.n_blocks(L.ROWS)):
            blk = st.block(L.ROWS, b)
            y = st.read_labels(blk.start, blk.stop)
            if st.label_kind == L.BINARY:
                y = np.where(y > 0, vals[-1], vals[0])
            yield _Piece(blk.indptr.astype(np.int64), blk.indices, blk.data, y, row=blk.start, done=blk.stop,
                         total=st.n_rows)
        return
    if is_local(source) and not os.path.exists(source):
        raise InputError(source, "no such file or store")
    # text files: progress in input bytes (compressed ones too); a stream ('-', a pipe) has no size
    given = options or Options()
    reading = follow(recipe, given, owner)
    # an .npz is read whole: charged first, the chunks sized from what it leaves
    work = budget.hold(whole_input_bytes(source, reading.format), MIN_WORK,
                       f"reading {source} (an .npz: its arrays decoded whole)").work
    chunk_bytes = text_chunk_bytes(work)
    stated = "text" if given.text_columns is not None else given.input_format
    # a file whose format the user stated as the recipe's is read so, whatever its name or content says
    # values as the training store holds them (its dtype, the same range checks as convert): a file and the
    # store made from it give the same predictions
    src = open_input(source, reading, chunk_bytes=chunk_bytes, rows_per_chunk=max(1024, chunk_bytes // 64),
                     dtype=recipe.values_dtype(), labels_required=labels,
                     owner=None if stated == recipe.format else owner, n_cols_hint=model.n_features,
                     say_base=say_base)
    fmt = src.recipe.format
    if src.n_cols is not None:
        _check_width(source, {"npz": "the .npz matrix", "csv": "the CSV file"}.get(fmt, f"the {fmt} input"),
                     src.n_cols, model)
    base = int(src.recipe.index_base or 0)
    how = ("--index-base" if (options or Options()).index_base is not None else
           "as the model's training input was" + (", a base guessed there from no id 0"
                                                  if recipe.index_base_source == "guessed" else ""))
    seen: dict = {}
    total = src.total or 0
    _announce(progress, *((src.n_rows, "rows") if fmt == "npz" else (total, "B")))
    for ch in lines_held(src.make(), budget, source, work, lambda need: budget.work - work + need):
        if fmt == "npz":
            yield _Piece(ch.indptr, ch.indices, ch.data, ch.labels, row=ch.first_line - 1,
                         done=ch.first_line - 1 + len(ch.labels), total=src.n_rows)
            continue
        ind = (_svmlight_columns(ch, base, model.n_features, source, seen, how, say_base) if fmt == "svmlight"
               else ch.indices)
        yield _Piece(ch.indptr, ind, ch.data, ch.labels, line=ch.first_line, done=ch.bytes_consumed,
                     total=total, unit="B")


def _announce(progress, total, unit: str) -> None:
    """Tell ``progress`` that reading starts (nothing read yet, ``total`` ``unit`` to read): its bar
    shows from the start of a long read, not once the first piece (up to 64 MB of text) is parsed."""
    if progress is not None:
        progress({"rows": 0, "done": 0, "total": total or 0, "unit": unit})


def check_input(store, source: str, memory="auto", say_base=pass_base) -> None:
    """Refuse ``source`` (a file or a store) for a model trained on ``store`` before any training:
    not read as the store's input was (its recipe), or of another width. Reads its first piece only.
    ``say_base(b)``: how the refusal tells the user to state the file's index base ``b``.
    """
    model = LinearModel(np.zeros(store.n_cols), 0.0, None, "squared", L.REGRESSION,
                        {L.RECIPE: store.attrs.get(L.RECIPE), "index_base": store.attrs.get("index_base", 0),
                         "store": store.path})
    rows = _iter_rows(model, source, memory, labels=False, say_base=say_base)
    try:
        next(rows, None)
    finally:
        rows.close()


def _label(v) -> str:
    """A label as the user wrote it: ``1``, ``-1``, ``2.5``."""
    return f"{float(v):g}"


def _check_labels(model: LinearModel, source: str, piece: _Piece) -> None:
    """Refuse labels a classification model cannot score (module docstring), naming the first."""
    if model.task not in (L.BINARY, L.MULTICLASS) or model.classes_ is None:
        return
    known = np.isin(piece.labels, model.classes_)
    if known.all():
        return
    k = int(np.argmin(known))
    msg = (f"label {_label(piece.labels[k])} is not one of the classes the {model.task} model knows "
           f"({', '.join(_label(c) for c in model.classes_)}); evaluate it on data labelled as its training data")
    if piece.line is not None:
        raise InputError(source, msg, line=piece.line + k)
    raise InputError(source, f"row {piece.row + k}: {msg}")


def iter_predictions(run: str, source: str, proba: bool = False, memory="auto", threads: int = 0,
                     progress=None, options=None, text: bool = True) -> Iterator[np.ndarray]:
    """Predicted labels (or, with ``proba``, class probabilities: ``(rows, classes)``, each row summing
    to 1, :meth:`~ooc.model.LinearModel.predict_proba`) of ``source``, piece by piece.

    ``source`` is a store or a file read with the model's input recipe (an .npz may come without
    labels); its labels are not used. Input of another width than the model's is refused
    (:class:`~ooc.store.readers.InputError`, see the module docstring); ``options``
    (:class:`ooc.store.recipe.Options`) must agree with the recipe. ``progress``: called with each
    piece's :func:`progress_event`. ``text``: the caller writes each piece as text (as ``ooc predict``
    does), which the rows yielded at once leave room for (:func:`scored_row_bytes`).
    """
    model = LinearModel.load(run)
    nthreads = resolve_threads(threads)  # rows over threads: the same margins whatever the count
    why = model.proba_refusal() if proba else None
    if why is not None:
        raise ValueError(f"--proba: {why}")
    budget = command_memory(model, memory, "this prediction", source, options)
    with _governed(budget):
        yield from _with_streams_closed(_predictions(model, source, proba, budget, nthreads, progress, options,
                                                     scored_rows(budget, _classes(model), proba=proba, text=text)))


def _with_streams_closed(pieces):
    """``pieces``, then the pipes they read closed (:func:`ooc.store.readers.forget_streams`), however it ends."""
    from .store.readers import forget_streams

    try:
        yield from pieces
    finally:
        forget_streams()


def _predictions(model, source, proba, memory, nthreads, progress, options=None, at_once: int = 1 << 62):
    rows = 0
    for whole in _iter_rows(model, source, memory, labels=False, options=options, progress=progress):
        for piece in _scored_parts(whole, at_once):
            m = model.decision_csr(piece.indptr, piece.indices, piece.data, nthreads)
            rows += len(m)
            if progress is not None:
                progress(progress_event(piece, rows))
            out = proba_from_margins(m) if proba else model.predict_from_margins(m)
            del m  # not held while the caller writes them
            yield out


#: The share of ``--memory`` (1 / this) that ``evaluate`` lets its ROC AUC scores take.
SCORES_SHARE = 2


def evaluate(run: str, source: str, memory="auto", threads: int = 0, progress=None, options=None) -> dict:
    """Metrics of the run's model on ``source`` (:func:`evaluate_model` of ``RUN/model``)."""
    return evaluate_model(LinearModel.load(run), source, memory, threads, progress, options)


def evaluate_model(model: LinearModel, source: str, memory="auto", threads: int = 0, progress=None,
                   options=None) -> dict:
    """Metrics of ``model`` on ``source``.

    Every model: ``n_rows`` and the ``primal`` objective of the training problem (loss, l2, l1,
    bias) evaluated on these rows. Classification: ``accuracy``, ``logloss`` (logistic, one-vs-rest
    or binary), ``precision``, ``recall``, ``f1`` (binary: of the class a positive margin
    predicts; multiclass: means over the model's classes), ``confusion_matrix`` (rows: true class,
    columns: predicted, in the order of ``classes``) and ``roc_auc`` (binary: of the margins;
    multiclass: the mean of each class's against the rest, scored by its probability (logistic) or
    its margin), which keeps every score until the end (``8 k + 1`` bytes a row, ``k = 1`` for
    binary; :mod:`ooc.metrics`). Regression: ``rmse``, ``mae`` and ``r2``.

    ``progress``: called with each block's :func:`progress_event`.

    Raises
    ------
    InputError
        ``source`` has a label the classification model does not know (naming it, its line or
        row, and the model's classes), or another width than the model's (module docstring).
    """
    from .metrics import ClassificationMetrics, RegressionMetrics

    nthreads = resolve_threads(threads)  # rows over threads: the same margins whatever the count
    meta = model.meta
    cs = meta.get("multiclass") == "crammer-singer"
    loss = make_loss(model.loss, gamma=meta.get("gamma", 1.0))
    has_proba = loss_spec(model.loss).proba  # logloss: the losses whose margins are probabilities
    if cs:
        from .objectives.multiclass import make_multiclass_loss

        cs_loss = make_multiclass_loss(float(meta.get("gamma", 1.0)) if "gamma" in loss_spec(model.loss).params else 0.0)
    classify = model.task in (L.BINARY, L.MULTICLASS)
    # ROC AUC keeps every row's scores: at most SCORES_SHARE of the budget, else it is skipped and says so
    budget = command_memory(model, memory, "this evaluation", source, options)
    keep = budget.work // SCORES_SHARE
    scores = ClassificationMetrics(len(model.classes_), keep_bytes=keep) if classify else RegressionMetrics()
    with _governed(budget):
        return _evaluate_pieces(model, source, budget, nthreads, options, progress, scores, loss, cs,
                                cs_loss if cs else None, classify, has_proba)


def _evaluate_pieces(model, source, budget, nthreads, options, progress, scores, loss, cs, cs_loss, classify,
                     has_proba) -> dict:
    n = 0
    correct = 0
    loss_sum = RowSum()
    logloss = RowSum()
    at_once = scored_rows(budget, _classes(model), metrics=True)
    for whole in _with_streams_closed(_iter_rows(model, source, budget, options=options, progress=progress)):
        _check_labels(model, source, whole)
        for piece in _scored_parts(whole, at_once):
            n, correct, loss_sum, logloss = _score_part(model, piece, nthreads, scores, loss, cs, cs_loss, classify,
                                                        has_proba, n, correct, loss_sum, logloss)
        if progress is not None:
            progress(progress_event(whole, n))
    return _metrics(model, source, scores, n, correct, loss_sum.value(), logloss.value(), classify, has_proba, cs)


class RowSum:
    """A sum over rows whose value does not depend on how the rows come in parts (the parts' sizes follow
    ``--memory``; the metrics must not): each :data:`GROUP` consecutive rows are summed together
    (``np.sum``), the groups' sums added in order."""

    #: Rows summed together.
    GROUP = 4096

    def __init__(self):
        self._total = 0.0
        self._buf = np.empty(self.GROUP)
        self._n = 0

    def add(self, values) -> None:
        """Add the rows' ``values`` (in row order)."""
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        i = 0
        while i < len(v):
            k = min(self.GROUP - self._n, len(v) - i)
            self._buf[self._n:self._n + k] = v[i:i + k]
            self._n, i = self._n + k, i + k
            if self._n == self.GROUP:
                self._total += float(np.sum(self._buf))
                self._n = 0

    def value(self) -> float:
        """The sum of every row added."""
        return self._total + float(np.sum(self._buf[:self._n]))


def _score_part(model, piece, nthreads, scores, loss, cs, cs_loss, classify, has_proba, n, correct, loss_sum,
                logloss):
    """The running counts after scoring ``piece`` (at most :func:`scored_rows` rows); ``loss_sum`` and
    ``logloss`` are :class:`RowSum`."""
    y = piece.labels
    m = model.decision_csr(piece.indptr, piece.indices, piece.data, nthreads)
    n += len(y)
    if classify:
        pred = model.predict_from_margins(m)
        correct += int(np.sum(pred == y))
        yi = np.searchsorted(model.classes_, y)  # every label is a class (_check_labels)
        # ROC AUC's scores: the margins, or the probabilities of a multiclass logistic model
        auc_scores = proba_from_margins(m) if model.task == L.MULTICLASS and has_proba and not cs else m
        scores.add(yi, np.searchsorted(model.classes_, pred), auc_scores)
        del auc_scores  # not held while the logloss's logarithms are computed
    if model.task == L.BINARY:
        pos = model.classes_[-1]
        ys = np.where(y == pos, 1.0, -1.0)
        loss_sum.add(loss.value(m, ys))
        if has_proba:
            logloss.add(np.logaddexp(0.0, -ys * m))
    elif model.task == L.MULTICLASS and cs:
        loss_sum.add(cs_loss.value(np.ascontiguousarray(m), yi))
    elif model.task == L.MULTICLASS:
        row_loss = np.zeros(len(y))  # each row's loss over the classes, summed in class order
        for c, cls in enumerate(model.classes_):
            row_loss += loss.value(np.ascontiguousarray(m[:, c]), np.where(y == cls, 1.0, -1.0))
        loss_sum.add(row_loss)
        if has_proba:  # the logarithms of what predict_proba gives
            logloss.add(-log_proba_from_margins(m)[np.arange(len(y)), yi])
    else:
        loss_sum.add(loss.value(m, y))
        scores.add(y, m)
    return n, correct, loss_sum, logloss


def _metrics(model, source, scores, n, correct, loss_sum, logloss, classify, has_proba, cs) -> dict:
    """The metrics of :func:`evaluate_model` from the counts of every part scored."""
    if n == 0:
        raise ValueError(f"{source}: no rows to evaluate")
    meta = model.meta
    bias = float(meta.get("bias", 0.0))
    W = np.atleast_2d(model.coef_)
    b = np.broadcast_to(np.atleast_1d(model.intercept_), (len(W),))
    pen = ElasticNet(float(meta.get("l2", 0.0)), float(meta.get("l1", 0.0)))
    # a class's weights with its intercept column at a time: never a copy of the (classes x d) coefficients
    penalty = sum(primal_value(pen, np.append(w, b[c] / bias) if bias > 0 else w, bias) for c, w in enumerate(W))
    out = {"n_rows": n, "primal": loss_sum / n + penalty}
    if classify:
        out["accuracy"] = correct / n
        if has_proba and not cs:
            out["logloss"] = logloss / n
        out["classes"] = model.classes_.tolist()
    out.update(scores.result())
    return out
