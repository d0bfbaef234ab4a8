"""scikit-learn estimators: ``LinearClassifier`` and ``LinearRegressor``.

They follow scikit-learn's conventions: ``__init__`` stores its parameters
untouched, ``fit`` validates them, fitted attributes end with ``_``, and a
:class:`~ooc.train.ConvergenceWarning` is issued when ``max_epochs`` stops the
solver before the duality gap reaches ``tol``. ``fit`` accepts a numpy array, a
scipy sparse matrix (converted to an in-process store) or the path of an ooc
store (then ``y`` must be None: the labels are in the store).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

import numpy as np

try:  # scikit-learn is optional at run time: minimal stand-ins keep get_params/set_params
    from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
except ImportError:  # pragma: no cover - exercised only without scikit-learn
    import inspect

    class BaseEstimator:
        def get_params(self, deep=True):
            names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
            return {k: getattr(self, k) for k in names}

        def set_params(self, **params):
            for k, v in params.items():
                setattr(self, k, v)
            return self

    class ClassifierMixin:
        def score(self, X, y):
            return float(np.mean(self.predict(X) == np.asarray(y)))

    class RegressorMixin:
        def score(self, X, y):
            y = np.asarray(y, dtype=float)
            r = y - self.predict(X)
            return 1.0 - float(r @ r) / float(((y - y.mean()) ** 2).sum())


class _OOCLinear(BaseEstimator):
    _label_kind = "binary"

    def __init__(self, loss="logistic", l2=1e-4, l1=0.0, tol=1e-6, max_epochs=100, bias=1.0,
                 class_weight=None, gamma=1.0, solver="auto", memory="1GiB", seed=0, run_dir=None):
        self.loss = loss
        self.l2 = l2
        self.l1 = l1
        self.tol = tol
        self.max_epochs = max_epochs
        self.bias = bias
        self.class_weight = class_weight
        self.gamma = gamma
        self.solver = solver
        self.memory = memory
        self.seed = seed
        self.run_dir = run_dir

    def _options(self, max_epochs=None) -> dict:
        return {"loss": self.loss, "l2": self.l2, "l1": self.l1, "tol": self.tol,
                "max_epochs": self.max_epochs if max_epochs is None else max_epochs, "bias": self.bias,
                "class_weight": self.class_weight, "gamma": self.gamma, "solver": self.solver,
                "memory": self.memory, "seed": self.seed}

    def _store_for(self, X, y):
        from .store import open_store
        from .store.ingest import convert

        if isinstance(X, (str, os.PathLike)):
            if y is not None:
                raise ValueError("fit(store_path) takes the labels from the store: pass y=None")
            return open_store(X)
        if y is None:
            raise ValueError("fit(X, y) needs y for an array or matrix X")
        import scipy.sparse as sp

        if not sp.issparse(X):
            X = np.asarray(X, dtype=np.float64)
            if X.ndim != 2:
                raise ValueError(f"X must be 2-D, got shape {X.shape}")
        y = np.asarray(y)
        if y.ndim != 1:
            y = y.ravel()
        if X.shape[0] != len(y):
            raise ValueError(f"X has {X.shape[0]} rows but y has {len(y)} labels")
        if X.shape[0] == 0:
            raise ValueError("cannot fit on 0 samples")
        if self._label_kind == "binary":
            n_classes = len(np.unique(y))
            if n_classes > 2:
                raise ValueError(f"{n_classes} classes: multiclass training is not available yet in this version")
            if n_classes < 2:
                raise ValueError("y has a single class: a classifier needs two")
        return convert(X, f"memory://estimator-{uuid.uuid4().hex}", y=np.asarray(y, dtype=np.float64),
                       dtype="float64", label_kind=self._label_kind, n_features=X.shape[1])

    def _run_path(self) -> str:
        if self.run_dir is not None:
            return os.fspath(self.run_dir)
        return tempfile.mkdtemp(prefix="ooc-estimator-")

    def fit(self, X, y=None):
        """Train to a certified relative duality gap ``tol`` (or ``max_epochs``)."""
        from .train import train

        store = self._store_for(X, y)
        try:
            run = train(store, self._run_path(), overwrite=True, **self._options())
        finally:
            self._release(store)
        self._set_fitted(run)
        return self

    def partial_fit(self, X, y=None):
        """One more pass of the solver over the same data (the first call makes one pass)."""
        from .train import resume, train

        if not hasattr(self, "run_") or getattr(self, "_pf_store", None) is None:
            store = self._store_for(X, y)
            self._pf_store = store
            run = train(store, self._run_path(), overwrite=True, **self._options(max_epochs=1))
        else:
            new = self._store_for(X, y)
            same = new.fingerprint == self._pf_store.fingerprint
            self._release(new)
            if not same:
                raise ValueError("partial_fit continues training on the same data; got different data")
            run = resume(self.run_, max_epochs=self.n_iter_ + 1)
        self._set_fitted(run)
        return self

    @staticmethod
    def _release(store) -> None:
        from .store.backend import MemoryBackend

        if store.path.startswith("memory://estimator-"):
            MemoryBackend.delete(store.path)

    def _set_fitted(self, run) -> None:
        m = run.model
        self.run_ = run.path
        self.model_ = m
        self.coef_ = m.coef_
        self.intercept_ = m.intercept_
        self.n_features_in_ = m.n_features
        self.n_iter_ = run.result["epochs"]
        self.gap_ = run.result["gap"]
        self.converged_ = run.result["converged"]

    def _check_fitted(self):
        if not hasattr(self, "model_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first")

    def decision_function(self, X):
        self._check_fitted()
        return self.model_.decision_function(X)

    def __del__(self):  # pragma: no cover - cleanup of partial_fit's in-process copy of the data
        st = getattr(self, "_pf_store", None)
        if st is not None:
            try:
                self._release(st)
            except Exception:
                pass


class LinearClassifier(ClassifierMixin, _OOCLinear):
    """Binary linear classifier (logistic, hinge or smooth-hinge loss) trained out of core.

    Minimises ``1/n sum_i c_i phi(x_i . w + B w_B, y_i) + l2/2 ||w||^2 + l1 ||w||_1``
    (scikit-learn's ``C`` is ``1 / (l2 n)``; ``bias=B`` adds LIBLINEAR's regularized
    intercept feature, ``bias=0`` fits no intercept).
    """

    _label_kind = "binary"

    def fit(self, X, y=None):
        super().fit(X, y)
        self.classes_ = self.model_.classes_
        return self

    def partial_fit(self, X, y=None, classes=None):
        super().partial_fit(X, y)
        self.classes_ = self.model_.classes_
        return self

    def predict(self, X):
        self._check_fitted()
        return self.model_.predict(X)

    def predict_proba(self, X):
        self._check_fitted()
        return self.model_.predict_proba(X)


class LinearRegressor(RegressorMixin, _OOCLinear):
    """Ridge / elastic-net regression (squared loss) trained out of core."""

    _label_kind = "regression"

    def __init__(self, loss="squared", l2=1e-4, l1=0.0, tol=1e-6, max_epochs=100, bias=1.0,
                 class_weight=None, gamma=1.0, solver="auto", memory="1GiB", seed=0, run_dir=None):
        super().__init__(loss=loss, l2=l2, l1=l1, tol=tol, max_epochs=max_epochs, bias=bias,
                         class_weight=class_weight, gamma=gamma, solver=solver, memory=memory, seed=seed,
                         run_dir=run_dir)

    def predict(self, X):
        self._check_fitted()
        return self.model_.predict(X)
