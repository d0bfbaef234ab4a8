"""LinearModel: coefficients, intercept, classes and loss; save, load, predict.

Decision function: ``f(x) = x . coef_ + intercept_`` where, for a run trained with
``--bias B``, ``intercept_ = B * w_bias`` (LIBLINEAR's bias feature). Input of another
width than the model's is refused (docs/api.rst, "Input width").
"""

from __future__ import annotations

import os

import numpy as np

from .fsutil import array_checksum, atomic_save_npy, atomic_write_bytes, read_npy, read_sealed_json, seal_json
from .objectives.losses import loss_spec

#: 2: ``model.json`` is sealed with its checksum and holds the CRC-32 of ``coef.npy`` (1: neither).
MODEL_FORMAT = 2


class LinearModel:
    """A trained linear model.

    Attributes
    ----------
    coef_ : ndarray, shape (d,) for binary/regression, (k, d) for multiclass
    intercept_ : float or ndarray (k,)
    classes_ : ndarray or None
        Original label values (binary: ``[negative, positive]``).
    loss : str
    task : {'binary', 'multiclass', 'regression'}
    """

    def __init__(self, coef, intercept, classes, loss, task, meta=None):
        self.coef_ = np.asarray(coef, dtype=np.float64)
        self.intercept_ = intercept
        self.classes_ = None if classes is None else np.asarray(classes)
        self.loss = loss
        self.task = task
        self.meta = dict(meta or {})

    @property
    def n_features(self) -> int:
        """Number of features ``d`` (the last axis of ``coef_``)."""
        return self.coef_.shape[-1]

    def check_width(self, n_cols: int, what: str = "X") -> None:
        """Refuse input of another width than the model's (as scikit-learn refuses an ``X`` of another
        ``n_features_in_``): its columns would be other features, or features left out."""
        if int(n_cols) != self.n_features:
            raise ValueError(f"{what} has {int(n_cols)} features, but the model has {self.n_features}: "
                             "give it the columns it was trained on")

    def decision_function(self, X) -> np.ndarray:
        """Margins of the rows of ``X`` (array or scipy matrix of exactly :attr:`n_features`
        columns; another width is refused with one line)."""
        import scipy.sparse as sp

        if isinstance(X, (str, os.PathLike)):
            # a path's columns are what its training store's input recipe makes of it: read only that way
            raise ValueError(f"{os.fspath(X)}: LinearModel scores arrays; a store or a file is read with the model's "
                             "input recipe by ooc.evaluate.iter_predictions(run, path) or an estimator's predict(path)")
        if sp.issparse(X):
            from .store.ingest import check_sparse_structure

            check_sparse_structure(X)
            X = X.tocsr()
        else:
            X = np.asarray(X, dtype=np.float64)
            if X.ndim == 1:
                X = X[None, :]
            if X.ndim != 2:
                raise ValueError(f"X must be 2-D (rows x features), got shape {X.shape}")
        self.check_width(X.shape[1])
        out = X @ self.coef_.T
        return np.asarray(out) + self.intercept_

    def decision_csr(self, indptr, indices, data, threads: int = 1) -> np.ndarray:
        """Margins of CSR rows given as arrays (streamed prediction); ids >= d are refused.

        ``threads``: rows split into that many consecutive ranges computed at once (each row's
        margin is the same sum whatever the split).
        """
        from ._cpu import map_threads
        from .kernels.predict import csr_margins

        w = self.coef_ if self.coef_.ndim == 2 else self.coef_[None, :]
        if len(indices) and (int(indices.max()) >= self.n_features or int(indices.min()) < 0):
            raise ValueError(f"feature column {int(indices.max())} is beyond the model's {self.n_features} features")
        n = len(indptr) - 1
        out = np.empty((n, w.shape[0]))
        cuts = np.linspace(0, n, max(1, min(int(threads), n)) + 1).astype(np.int64)

        def part(job):
            k, a, b = job
            out[a:b, k] = csr_margins(indptr[a:b + 1], indices, data, w[k])

        map_threads(part, [(k, int(a), int(b)) for k in range(w.shape[0]) for a, b in zip(cuts[:-1], cuts[1:])],
                    int(threads), work=len(data) * w.shape[0])
        out += self.intercept_
        return out if self.coef_.ndim == 2 else out[:, 0]

    def predict_from_margins(self, m: np.ndarray) -> np.ndarray:
        """Predictions from margins: the margin itself (regression), ``classes_[1]`` where ``m > 0``
        else ``classes_[0]`` (binary), the class of the largest margin (multiclass)."""
        if self.task == "regression":
            return m
        if self.task == "binary":
            return np.where(m > 0, self.classes_[-1], self.classes_[0])
        return self.classes_[np.argmax(m, axis=1)]

    def predict(self, X) -> np.ndarray:
        """Predicted values of the rows of ``X``, in the original label values."""
        return self.predict_from_margins(self.decision_function(X))

    def proba_refusal(self) -> str | None:
        """Why this model has no class probabilities (None: it has them, :meth:`predict_proba`).

        A loss whose margins are log-odds has them (``proba`` in the loss registry: logistic),
        binary or one-vs-rest. Regression has no classes; the hinges' margins are scores, not
        log-odds; a Crammer-Singer model's ``k`` margins are those of the multiclass hinge, a
        ranking of the classes with no link to probabilities either.
        """
        if self.task == "regression":
            return f"a regression model ({self.loss}) predicts values, not class probabilities"
        if (self.meta or {}).get("multiclass") == "crammer-singer":
            return (f"a Crammer-Singer model's margins (its multiclass {self.loss}) rank the classes and are not "
                    "probabilities; train with --loss logistic --multiclass ovr for them")
        if not loss_spec(self.loss).proba:
            return (f"a {self.loss} model's margins are not probabilities (no link function); "
                    "train with --loss logistic for them")
        return None

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities, one column per class of ``classes_`` (:func:`proba_from_margins`).

        Raises ``ValueError`` saying why for a model without them (:meth:`proba_refusal`).
        """
        why = self.proba_refusal()
        if why is not None:
            raise ValueError(f"predict_proba: {why}")
        return proba_from_margins(self.decision_function(X))

    # -- persistence ------------------------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write ``coef.npy`` and the sealed ``model.json`` (with the CRC-32 of ``coef.npy``) into ``path``,
        each atomically."""
        os.makedirs(path, exist_ok=True)
        atomic_save_npy(os.path.join(path, "coef.npy"), self.coef_, fsync=True)
        meta = {
            "model_format": MODEL_FORMAT,
            "coef_crc": array_checksum(np.asarray(self.coef_)),
            "intercept": np.asarray(self.intercept_).tolist(),
            "classes": None if self.classes_ is None else self.classes_.tolist(),
            "loss": self.loss,
            "task": self.task,
            "meta": self.meta,
        }
        atomic_write_bytes(os.path.join(path, "model.json"), seal_json(meta))

    @classmethod
    def load(cls, path: str) -> "LinearModel":
        """Load from a model directory or a run directory (its ``model/``).

        A run's model is used only with its certificate: ``model/metrics.json``, sealed, recording the
        CRC-32 of these very coefficients (a run's ``model/`` appears whole with it: a run that has not
        finished has none). ``ValueError`` or ``FileNotFoundError``, one line naming the run, otherwise.
        """
        run = None
        if os.path.isdir(os.path.join(path, "model")):
            run, path = path, os.path.join(path, "model")
        elif os.path.isfile(os.path.join(os.path.dirname(os.path.abspath(path)), "run.json")):
            run = os.path.dirname(os.path.abspath(path))  # a run's model/ named directly
        mj = os.path.join(path, "model.json")
        if not os.path.isfile(mj):
            if os.path.isfile(os.path.join(path, "run.json")):
                raise FileNotFoundError(f"{path}: the run has not finished: it has no model yet; 'ooc resume {path}' "
                                        "finishes it")
            if not os.path.exists(path):
                raise FileNotFoundError(f"{path}: no such run or model directory")
            if not os.path.isdir(path):
                raise FileNotFoundError(f"{path}: is a file, not a run or model directory")
            raise FileNotFoundError(f"{path}: not a run or model directory (no run.json, no model.json)")
        try:
            meta = read_sealed_json(mj, required=False)
            fmt = meta.get("model_format")
            if fmt != MODEL_FORMAT:
                raise ValueError(f"{mj}: model format {fmt!r} is not the one this ooc reads ({MODEL_FORMAT}): "
                                 "train it again")
            read_sealed_json(mj)  # always sealed: a missing checksum is damage
            crc = int(meta["coef_crc"])
            cp = os.path.join(path, "coef.npy")
        except (OSError, ValueError, EOFError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: the model is unreadable ({exc})") from None
        try:
            coef = read_npy(cp, crc)
        except ValueError as exc:
            raise ValueError(f"{exc}; the model is damaged ('ooc train' again)") from None
        if coef.dtype.kind != "f":
            raise ValueError(f"{cp}: the coefficients are not finite numbers (the model is damaged)")
        if run is not None:
            _check_certified(run, path, crc)
        icpt = meta["intercept"]
        icpt = np.asarray(icpt) if isinstance(icpt, list) else float(icpt)
        return cls(coef, icpt, meta["classes"], meta["loss"], meta["task"], meta.get("meta"))


def _check_certified(run: str, path: str, coef_crc: int | None) -> None:
    """Refuse (one line naming the run) the model of ``run`` at ``path`` unless its ``metrics.json``, the
    certificate of a finished run, is there, verifies and certifies this model (its ``coef_crc``)."""
    from .runs.records import certificate_run_error, model_link_error

    why = model_link_error(run)
    if why is not None:
        raise ValueError(why)
    mp = os.path.join(path, "metrics.json")
    if not os.path.isfile(mp):
        raise FileNotFoundError(f"{run}: the run has not finished: its model has no certificate (no {mp}); "
                                f"'ooc resume {run}' finishes it")
    try:
        metrics = read_sealed_json(mp, required=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{exc}; the run's model has no valid certificate ('ooc resume {run}')") from None
    why = certificate_run_error(run, mp, metrics, current=True)
    if why is not None:
        raise ValueError(f"{why}; the run's model is refused")
    if metrics.get("coef_crc") != coef_crc:
        raise ValueError(f"{mp}: certifies other coefficients than {os.path.join(path, 'coef.npy')} (a run stopped "
                         f"while it wrote its model); 'ooc resume {run}' finishes it")


def read_certificate(run: str) -> dict:
    """The certificate (``model/metrics.json``) of the finished run ``run``, verified as a run's model is
    (:meth:`LinearModel.load`: sealed, certifying these coefficients, the run's own, no link)."""
    LinearModel.load(run)
    return read_sealed_json(os.path.join(run, "model", "metrics.json"))


def sigmoid(m: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-m))`` without overflow (``exp(m) / (1 + exp(m))`` for ``m < 0``)."""
    m = np.asarray(m, dtype=np.float64)
    p = np.empty_like(m)
    pos = m >= 0
    p[pos] = 1.0 / (1.0 + np.exp(-m[pos]))
    e = np.exp(m[~pos])
    p[~pos] = e / (1.0 + e)
    return p


def proba_from_margins(m: np.ndarray) -> np.ndarray:
    r"""Class probabilities of logistic models from their margins (the one place they are computed).

    Two classes (``m`` of shape (n,)): ``[1 - s(m), s(m)]`` with ``s(m) = 1 / (1 + e^{-m})``,
    the columns for ``classes_[0]`` and ``classes_[1]``. More classes (``m`` of shape (n, k),
    one-vs-rest): ``p_c = s(m_c) / sum_j s(m_j)``, each class's sigmoid normalised to sum to 1
    (scikit-learn's one-vs-rest rule).

    Computed from ``log s(m) = -log(1 + e^{-m})``, less the row's largest, so that a row whose every
    sigmoid underflows (margins of -800: ``0 / 0``) still gets the same ratios, summing to 1; and
    ``1 - s(m)`` as ``s(-m)``, which keeps its digits where ``s(m)`` is near 1.
    """
    m = np.asarray(m, dtype=np.float64)
    if m.ndim == 2:
        return np.exp(log_proba_from_margins(m))
    return np.column_stack([sigmoid(-m), sigmoid(m)])


def log_proba_from_margins(m: np.ndarray) -> np.ndarray:
    """The logarithms of :func:`proba_from_margins`, computed without forming the probabilities (finite where
    a probability underflows to 0: the held-out logloss of such a row is large, not infinite)."""
    m = np.asarray(m, dtype=np.float64)
    if m.ndim == 2:
        logs = -np.logaddexp(0.0, -m)
        top = logs.max(axis=1, keepdims=True)
        return logs - top - np.log(np.exp(logs - top).sum(axis=1, keepdims=True))
    return np.column_stack([-np.logaddexp(0.0, m), -np.logaddexp(0.0, -m)])


def load_model(run: str) -> LinearModel:
    """The final model of a run directory (``ooc.load_model(RUN)``)."""
    return LinearModel.load(os.fspath(run))
