"""Streamed prediction and evaluation of a trained model on a store or a text file."""

from __future__ import annotations

import os
from typing import Iterator

import numpy as np

from .model import LinearModel, proba_from_margins
from .objectives.losses import loss_spec, make_loss
from .objectives.penalties import ElasticNet, primal_value
from .store import layout as L
from .store.ingest import parse_bytes


def _iter_rows(model: LinearModel, source: str, memory) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """(indptr, indices, data, original labels) pieces of ``source``, ids 0-based as in training."""
    from .store.backend import StoreError
    from .store.readers import detect_format, iter_csv, iter_svmlight
    from .store.store import backend_for_path, open_store

    # an HDF5 file is a store by its name too: one whose signature is damaged is refused as a
    # store, not parsed as text
    is_store = source.startswith("memory://") or os.path.isdir(source) or source.endswith((".h5", ".hdf5"))
    if not is_store:
        try:
            backend_for_path(source)
            is_store = True
        except StoreError:
            is_store = False
    if is_store:
        st = open_store(source)
        vals = st.label_values
        for b in range(st.n_blocks(L.ROWS)):
            blk = st.block(L.ROWS, b)
            y = st.read_labels(blk.start, blk.stop)
            if st.label_kind == L.BINARY:
                y = np.where(y > 0, vals[-1], vals[0])
            yield blk.indptr.astype(np.int64), blk.indices, blk.data, y
        return
    chunk_bytes = int(min(64 << 20, max(parse_bytes(memory) // 12, 1 << 16)))
    fmt = detect_format(source)
    base = int(model.meta.get("index_base", 0)) if fmt == "svmlight" else 0
    it = iter_svmlight(source, chunk_bytes=chunk_bytes) if fmt == "svmlight" else iter_csv(source, chunk_bytes=chunk_bytes)
    for ch in it:
        ind = ch.indices - base
        if base and len(ind) and ind.min() < 0:
            # an id 0 in a file read as 1-based: it cannot match any trained feature
            keep = ind >= 0
            counts = np.add.reduceat(keep.astype(np.int64), ch.indptr[:-1]) if len(keep) else np.zeros(0)
            counts[np.diff(ch.indptr) == 0] = 0
            indptr = np.concatenate(([0], np.cumsum(counts)))
            yield indptr, ind[keep], ch.data[keep], ch.labels
        else:
            yield ch.indptr, ind, ch.data, ch.labels


def iter_predictions(run: str, source: str, proba: bool = False, memory="256MiB") -> Iterator[np.ndarray]:
    """Predicted labels (or positive-class probabilities) of ``source``, piece by piece."""
    model = LinearModel.load(run)
    if proba and not loss_spec(model.loss).proba:
        raise ValueError(f"--proba needs a logistic model (this one: {model.loss})")
    for indptr, indices, data, _ in _iter_rows(model, source, memory):
        m = model.decision_csr(indptr, indices, data)
        if proba:
            yield 1.0 / (1.0 + np.exp(-m))
        else:
            yield model.predict_from_margins(m)


def evaluate(run: str, source: str, memory="256MiB") -> dict:
    """Metrics of the run's model on ``source``.

    Classification: ``accuracy``, ``logloss`` (logistic), and the ``primal`` objective of
    the training problem (loss, l2, l1, bias) evaluated on these rows. Regression:
    ``rmse`` and ``primal``.
    """
    model = LinearModel.load(run)
    meta = model.meta
    cs = meta.get("multiclass") == "crammer-singer"
    loss = make_loss(model.loss, gamma=meta.get("gamma", 1.0))
    has_proba = loss_spec(model.loss).proba  # logloss: the losses whose margins are probabilities
    if cs:
        from .objectives.multiclass import make_multiclass_loss

        cs_loss = make_multiclass_loss(float(meta.get("gamma", 1.0)) if "gamma" in loss_spec(model.loss).params else 0.0)
    n = 0
    correct = 0
    loss_sum = 0.0
    logloss = 0.0
    sq = 0.0
    for indptr, indices, data, y in _iter_rows(model, source, memory):
        m = model.decision_csr(indptr, indices, data)
        n += len(y)
        if model.task == L.BINARY:
            pos = model.classes_[-1]
            ys = np.where(y == pos, 1.0, -1.0)
            correct += int(np.sum(model.predict_from_margins(m) == y))
            loss_sum += float(np.sum(loss.value(m, ys)))
            if has_proba:
                logloss += float(np.sum(np.logaddexp(0.0, -ys * m)))
        elif model.task == L.MULTICLASS and meta.get("multiclass") == "crammer-singer":
            correct += int(np.sum(model.predict_from_margins(m) == y))
            known = np.isin(y, model.classes_)
            yi = np.searchsorted(model.classes_, y[known])
            loss_sum += float(np.sum(cs_loss.value(np.ascontiguousarray(m[known]), yi)))
        elif model.task == L.MULTICLASS:
            pred = model.predict_from_margins(m)
            correct += int(np.sum(pred == y))
            for c, cls in enumerate(model.classes_):
                loss_sum += float(np.sum(loss.value(np.ascontiguousarray(m[:, c]), np.where(y == cls, 1.0, -1.0))))
            if has_proba:
                p = proba_from_margins(m)  # what predict_proba gives
                idx = np.searchsorted(model.classes_, y)
                ok = (idx < len(model.classes_)) & (model.classes_[np.minimum(idx, len(model.classes_) - 1)] == y)
                pt = np.where(ok, p[np.arange(len(y)), np.minimum(idx, len(model.classes_) - 1)], 1e-300)
                logloss += float(-np.sum(np.log(np.maximum(pt, 1e-300))))
        else:
            loss_sum += float(np.sum(loss.value(m, y)))
            sq += float(np.sum((m - y) ** 2))
    if n == 0:
        raise ValueError(f"{source}: no rows to evaluate")
    bias = float(meta.get("bias", 0.0))
    W = np.atleast_2d(model.coef_)
    if bias > 0:
        W = np.hstack([W, np.atleast_1d(model.intercept_).reshape(-1, 1) / bias])
    pen = ElasticNet(float(meta.get("l2", 0.0)), float(meta.get("l1", 0.0)))
    out = {"n_rows": n, "primal": loss_sum / n + sum(primal_value(pen, w, bias) for w in W)}
    if model.task in (L.BINARY, L.MULTICLASS):
        out["accuracy"] = correct / n
        if has_proba and not cs:
            out["logloss"] = logloss / n
    else:
        out["rmse"] = float(np.sqrt(sq / n))
    return out
