"""Streamed prediction and evaluation of a trained model on a store or a file.

INPUT is an ooc store, or a file as ``ooc convert`` reads it (svmlight/LIBSVM, CSV/TSV, .npz,
Vowpal Wabbit text, hashed into as many columns as the model has: it must be a power of two,
``2**--hash-bits``; importance weights are not used), streamed piece by piece. Two kinds of wrong use are refused with one line naming INPUT
(:class:`~ooc.store.readers.InputError`):

- Features beyond the model's. A store, an .npz and a CSV declare their column count: more
  columns than the model has features means another feature space, refused as scikit-learn
  refuses an ``X`` of another width (fewer is fine: the missing trailing features are zero; a
  store converted from svmlight has as many columns as its largest id). An svmlight file
  declares nothing: its ids beyond the model's features are features training never saw
  (hashed or growing vocabularies), whose weight is zero, so they are ignored, as LIBLINEAR
  does (:meth:`ooc.model.LinearModel.decision_csr`).
- Labels the model cannot score (:func:`evaluate` only; :func:`iter_predictions` ignores
  labels, which unlabelled files often fill with a placeholder). A binary model knows the two
  original label values of its training store (``classes_``, the store's ``label_values``), a
  multiclass model its classes: any other label is refused with the line (text) or row
  (store, .npz) where it occurs. A regression model takes any finite real label (a 0/1 target
  is a legitimate regression target); non-finite labels never get this far (the readers and
  the stores refuse them).
"""

from __future__ import annotations

import os
from typing import Iterator, NamedTuple

import numpy as np

from ._cpu import resolve_threads
from .model import LinearModel, proba_from_margins
from .objectives.losses import loss_spec, make_loss
from .objectives.penalties import ElasticNet, primal_value
from .store import layout as L
from .store.ingest import memory_budget
from .store.readers import InputError


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


def _too_wide(source: str, what: str, n_cols: int, model: LinearModel) -> None:
    """Refuse an INPUT that declares more feature columns than the model has (module docstring)."""
    if n_cols > model.n_features:
        raise InputError(source, f"{what} has {n_cols} features, more than the {model.n_features} the model was "
                                 "trained on (another feature space; only an svmlight file's unseen feature ids "
                                 "are ignored)")


def _iter_rows(model: LinearModel, source: str, memory, labels: bool = True) -> Iterator[_Piece]:
    """The pieces of ``source`` (a store or a file), ids 0-based as in training.

    ``labels=False`` (prediction) lets an .npz come without labels (the pieces then hold zeros).
    """
    from .kernels.hash_bits import MAX_HASH_BITS
    from .store.backend import StoreError
    from .store.ingest import load_npz, matrix_chunks
    from .store.readers import (
        csv_layout,
        detect_format,
        input_size,
        is_local,
        is_stream,
        iter_csv,
        iter_svmlight,
        iter_vw,
    )
    from .store.store import backend_for_path, open_store

    # an HDF5 file is a store by its name too: one whose signature is damaged is refused as a
    # store, not parsed as text
    is_store = source.startswith("memory://") or os.path.isdir(source) or source.endswith((".h5", ".hdf5"))
    if not is_store and not is_stream(source):  # ('-', a pipe: a file's text, never a store)
        try:
            backend_for_path(source)
            is_store = True
        except StoreError:
            is_store = False
    budget = memory_budget(memory)
    if is_store:
        # the store's blocks cut to what the budget holds: a block, its CSR copy for the kernel, the
        # labels and the predictions (about three block sizes at once: 3/8 of it; evaluate keeps its
        # ROC AUC scores in half of it, SCORES_SHARE)
        st = open_store(source).with_blocks(int(min(L.DEFAULT_BLOCK_BYTES, max(budget // 8, 1 << 16))))
        _too_wide(source, "the store", st.n_cols, model)
        vals = st.label_values
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
    chunk_bytes = int(min(64 << 20, max(budget // 12, 1 << 16)))
    # text files: progress in input bytes (compressed ones too); a stream ('-', a pipe) has no size
    size = input_size(source) or 0
    fmt = detect_format(source)
    if fmt == "npz":
        rows, y = load_npz(source, labels_required=labels)
        _too_wide(source, "the .npz matrix", rows.n_cols, model)
        if y is None:
            y = np.zeros(rows.n_rows)
        for ch in matrix_chunks(rows, y, chunk_bytes, max(1024, chunk_bytes // 64)):
            yield _Piece(ch.indptr, ch.indices, ch.data, ch.labels, row=ch.first_line - 1,
                         done=ch.first_line - 1 + len(ch.labels), total=rows.n_rows)
        return
    if fmt == "csv":
        _too_wide(source, "the CSV file", csv_layout(source).n_features, model)
        for ch in iter_csv(source, chunk_bytes=chunk_bytes):
            yield _Piece(ch.indptr, ch.indices, ch.data, ch.labels, line=ch.first_line, done=ch.bytes_consumed,
                         total=size, unit="B")
        return
    if fmt == "vw":
        bits = model.n_features.bit_length() - 1
        if model.n_features != 1 << bits or not 1 <= bits <= MAX_HASH_BITS:
            raise InputError(source, f"a Vowpal Wabbit file is hashed into 2**B columns, but the model has "
                                     f"{model.n_features} features: it was not trained on hashed data")
        for ch in iter_vw(source, chunk_bytes=chunk_bytes, hash_bits=bits):
            yield _Piece(ch.indptr, ch.indices, ch.data, ch.labels, line=ch.first_line)
        return
    base = int(model.meta.get("index_base", 0))
    for ch in iter_svmlight(source, chunk_bytes=chunk_bytes):
        ind = ch.indices - base
        if base and len(ind) and ind.min() < 0:
            # an id 0 in a file read as 1-based: it cannot match any trained feature
            keep = ind >= 0
            counts = np.add.reduceat(keep.astype(np.int64), ch.indptr[:-1]) if len(keep) else np.zeros(0)
            counts[np.diff(ch.indptr) == 0] = 0
            indptr = np.concatenate(([0], np.cumsum(counts)))
            yield _Piece(indptr, ind[keep], ch.data[keep], ch.labels, line=ch.first_line, done=ch.bytes_consumed,
                         total=size, unit="B")
        else:
            yield _Piece(ch.indptr, ind, ch.data, ch.labels, line=ch.first_line, done=ch.bytes_consumed,
                         total=size, unit="B")


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
                     progress=None) -> Iterator[np.ndarray]:
    """Predicted labels (or, with ``proba``, class probabilities: ``(rows, classes)``, each row summing
    to 1, :meth:`~ooc.model.LinearModel.predict_proba`) of ``source``, piece by piece.

    ``source`` is a store or a file (svmlight, CSV, .npz, which may come without labels); its
    labels are not used. An svmlight
    file's feature ids beyond the model's are ignored; a store, .npz or CSV with more columns
    than the model has features is refused (:class:`~ooc.store.readers.InputError`, see the
    module docstring). ``progress``: called with each piece's :func:`progress_event`.
    """
    model = LinearModel.load(run)
    nthreads = resolve_threads(threads)  # rows over threads: the same margins whatever the count
    why = model.proba_refusal() if proba else None
    if why is not None:
        raise ValueError(f"--proba: {why}")
    yield from _with_streams_closed(_predictions(model, source, proba, memory, nthreads, progress))


def _with_streams_closed(pieces):
    """``pieces``, then the pipes they read closed (:func:`ooc.store.readers.forget_streams`), however it ends."""
    from .store.readers import forget_streams

    try:
        yield from pieces
    finally:
        forget_streams()


def _predictions(model, source, proba, memory, nthreads, progress):
    rows = 0
    for piece in _iter_rows(model, source, memory, labels=False):
        m = model.decision_csr(piece.indptr, piece.indices, piece.data, nthreads)
        rows += len(m)
        if progress is not None:
            progress(progress_event(piece, rows))
        if proba:
            yield proba_from_margins(m)
        else:
            yield model.predict_from_margins(m)


#: The share of ``--memory`` (1 / this) that ``evaluate`` lets its ROC AUC scores take.
SCORES_SHARE = 2


def evaluate(run: str, source: str, memory="auto", threads: int = 0, progress=None) -> dict:
    """Metrics of the run's model on ``source`` (:func:`evaluate_model` of ``RUN/model``)."""
    return evaluate_model(LinearModel.load(run), source, memory, threads, progress)


def evaluate_model(model: LinearModel, source: str, memory="auto", threads: int = 0, progress=None) -> dict:
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
        row, and the model's classes), or more feature columns than the model (module docstring).
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
    keep = memory_budget(memory) // SCORES_SHARE
    scores = ClassificationMetrics(len(model.classes_), keep_bytes=keep) if classify else RegressionMetrics()
    n = 0
    correct = 0
    loss_sum = 0.0
    logloss = 0.0
    for piece in _with_streams_closed(_iter_rows(model, source, memory)):
        _check_labels(model, source, piece)
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
        if model.task == L.BINARY:
            pos = model.classes_[-1]
            ys = np.where(y == pos, 1.0, -1.0)
            loss_sum += float(np.sum(loss.value(m, ys)))
            if has_proba:
                logloss += float(np.sum(np.logaddexp(0.0, -ys * m)))
        elif model.task == L.MULTICLASS and cs:
            loss_sum += float(np.sum(cs_loss.value(np.ascontiguousarray(m), yi)))
        elif model.task == L.MULTICLASS:
            for c, cls in enumerate(model.classes_):
                loss_sum += float(np.sum(loss.value(np.ascontiguousarray(m[:, c]), np.where(y == cls, 1.0, -1.0))))
            if has_proba:  # auc_scores: what predict_proba gives
                logloss += float(-np.sum(np.log(np.maximum(auc_scores[np.arange(len(y)), yi], 1e-300))))
        else:
            loss_sum += float(np.sum(loss.value(m, y)))
            scores.add(y, m)
        if progress is not None:
            progress(progress_event(piece, n))
    if n == 0:
        raise ValueError(f"{source}: no rows to evaluate")
    bias = float(meta.get("bias", 0.0))
    W = np.atleast_2d(model.coef_)
    if bias > 0:
        W = np.hstack([W, np.atleast_1d(model.intercept_).reshape(-1, 1) / bias])
    pen = ElasticNet(float(meta.get("l2", 0.0)), float(meta.get("l1", 0.0)))
    out = {"n_rows": n, "primal": loss_sum / n + sum(primal_value(pen, w, bias) for w in W)}
    if classify:
        out["accuracy"] = correct / n
        if has_proba and not cs:
            out["logloss"] = logloss / n
        out["classes"] = model.classes_.tolist()
    out.update(scores.result())
    return out
