"""scikit-learn estimators: ``LinearClassifier`` (binary and multiclass) and ``LinearRegressor``.

They follow scikit-learn's conventions: ``__init__`` stores its parameters untouched,
``fit`` validates them (and the data, with scikit-learn's own validators), fitted
attributes end with ``_``, and a :class:`ConvergenceWarning` (a subclass of both
:class:`ooc.ConvergenceWarning` and :class:`sklearn.exceptions.ConvergenceWarning`) is
issued when ``max_epochs`` stops the solver before the relative duality gap reaches
``tol``. ``fit`` accepts a numpy array (or anything array-like), a scipy sparse matrix,
or the path of an ooc store (then ``y`` must be None: the labels are in the store). An
array or matrix is copied into an in-process store for the duration of the fit;
``predict``/``decision_function`` also accept a store path (streamed block by block), which
must have as many columns as the data ``fit`` saw (``n_features_in_``). A sparse matrix's index arrays are checked
(:func:`ooc.store.ingest.check_sparse_structure`) before scikit-learn's validation passes it to
scipy's compiled code, which trusts them.

The objective is ooc's (docs/training.rst)::

    P(w, b) = 1/n sum_i c_i phi(x_i . w + b, y_i) + l2/2 ||w||^2 + l1 ||w||_1

so scikit-learn's / LIBLINEAR's ``C`` is ``1 / (l2 n)`` and Ridge's ``alpha`` is
``l2 n``. The intercept ``b``, as on the command line (the same default: none):
``fit_intercept=True`` is scikit-learn's (unregularized, certified with the rest; the
``sdca`` solver, ``rcd-primal`` for pure L1); ``bias=B > 0`` is LIBLINEAR's, ``b = B w_B`` with ``w_B`` the weight of a
constant feature of value ``B``, regularized like the others (``l2/2 w_B^2`` in ``P``).

Multiclass targets train one-vs-rest (``multiclass='ovr'``, every class on the same pass
over the data) or with the Crammer-Singer loss (``multiclass='crammer-singer'``, hinge or
smooth hinge); ``coef_`` is then ``(n_classes, n_features)``. ``fit(X, y, sample_weight=)``
multiplies each row's loss by its weight (``c_i`` above; with a store path the weights are the
store's). ``class_weight`` is None, ``'balanced'`` or a dict ``{label: weight}`` (labels as in
``y``; a label not listed weighs 1), as scikit-learn's.
"""

from __future__ import annotations

import numbers
import os
import shutil
import tempfile
import uuid
import warnings
import weakref

import numpy as np
import scipy.sparse as sp

from ._cpu import resolve_threads
from .config import TrainConfig
from .model import proba_from_margins
from .numtext import versus
from .objectives.losses import CLASSIFICATION_LOSSES, REGRESSION_LOSSES, loss_spec
from .train import ConvergenceWarning as _OocConvergenceWarning

try:  # scikit-learn >= 1.6 (validate_data, tags); `import ooc` works without it
    from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
    from sklearn.exceptions import ConvergenceWarning as _SkConvergenceWarning
    from sklearn.utils._available_if import available_if
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import check_is_fitted, validate_data

    _SKLEARN_MISSING = None
except ImportError as _exc:  # pragma: no cover - exercised only without scikit-learn
    _SKLEARN_MISSING = _exc
    BaseEstimator = ClassifierMixin = RegressorMixin = object
    _SkConvergenceWarning = UserWarning

    def available_if(check):
        return lambda fn: fn

__all__ = ["ConvergenceWarning", "LinearClassifier", "LinearRegressor", "expected_failed_checks"]

#: The defaults the estimators share with ``ooc train`` (``tests/test_config.py`` checks every
#: parameter against :class:`ooc.config.TrainConfig`). They differ on purpose in ``l2`` (None:
#: ``1/n``, scikit-learn's ``C = 1``),
#: ``multiclass`` ('ovr' names what ``ooc train``'s None does) and LinearRegressor's ``loss``.
_D = TrainConfig()


class ConvergenceWarning(_OocConvergenceWarning, _SkConvergenceWarning):
    """``max_epochs`` stopped the solver before the duality gap certified ``tol``.

    Caught by filters on either :class:`ooc.ConvergenceWarning` or
    :class:`sklearn.exceptions.ConvergenceWarning`.
    """


_MEM_PREFIX = "memory://ooc-estimator-"


def _say_base(b: int) -> str:
    """How a Python caller states the index base ``b`` of an svmlight file: a store converted with it."""
    return f"convert it with ooc.convert(path, store, index_base={b}) and pass the store"


def _is_path(X) -> bool:
    return isinstance(X, (str, os.PathLike))


def _cleanup(store_path, run_dir):
    """Drop an in-process store and a temporary run directory (used by weakref.finalize)."""
    if store_path is not None:
        from .store.backend import MemoryBackend

        try:
            MemoryBackend.delete(store_path)
        except Exception:  # pragma: no cover - already gone
            pass
    if run_dir is not None:
        shutil.rmtree(run_dir, ignore_errors=True)


def _run_identity(run_dir: str):
    """(absolute path, identity token) of the run directory at ``run_dir``; None where none is readable there."""
    from .runs.rundir import RunDir, is_run_dir

    path = os.path.abspath(run_dir)
    try:
        if not is_run_dir(path):
            return None
        ident = RunDir(path).identity
    except Exception:  # a damaged run proves nothing: it is not this estimator's
        return None
    return None if ident is None else (path, ident)


def _option_types() -> dict:
    """The :mod:`ooc.options` types of the training options the estimators take as parameters (same names)."""
    import dataclasses

    from .config import TrainConfig

    names = ("l2", "l1", "tol", "bias", "gamma", "max_epochs", "seed", "memory")
    return {f.name: f.metadata["type"] for f in dataclasses.fields(TrainConfig) if f.name in names}


def _check_sparse(X) -> None:
    """Check a sparse X's index arrays before scikit-learn's validation hands it to scipy's compiled
    conversions and products, which trust them (a decreasing ``indptr`` would corrupt memory).
    The values, the dimensions and the labels are scikit-learn's ``validate_data``'s to check."""
    if sp.issparse(X):
        from .store.ingest import check_sparse_structure

        check_sparse_structure(X)


def _data_hash(X, y, sample_weight=None) -> str:
    import joblib

    if sp.issparse(X):
        X = X.tocsr()
        return joblib.hash((X.shape, X.indptr, X.indices, X.data, y, sample_weight))
    return joblib.hash((X, y, sample_weight))


#: scikit-learn's estimator checks that fail at these estimators' defaults, and why (docs/api.rst).
_CLASS_WEIGHT_WHY = ("the check's blobs are not separable through the origin and its class weights are scored "
                     "with the estimator's defaults, which fit no intercept (fit_intercept=False, as ooc train and "
                     "LIBLINEAR); with fit_intercept=True it passes")
_EQUIVALENCE_WHY = ("the check compares predictions to rtol 1e-7, closer than the default tol=1e-6 (a relative "
                    "duality gap) certifies; with tol=1e-15 it passes")


def expected_failed_checks(estimator) -> dict[str, str]:
    """The checks of :func:`sklearn.utils.estimator_checks.check_estimator` that ``estimator`` is
    expected to fail with its parameters, each with the reason (docs/api.rst, "scikit-learn's checks").

    Pass it on: ``check_estimator(est, expected_failed_checks=expected_failed_checks(est))``, or
    ``parametrize_with_checks([...], expected_failed_checks=expected_failed_checks)`` (scikit-learn
    >= 1.6's way of marking expected failures; the ``_xfail_checks`` tag is gone).
    """
    out = {}
    if isinstance(estimator, LinearClassifier) and not estimator.fit_intercept:
        out["check_class_weight_classifiers"] = _CLASS_WEIGHT_WHY
    # real-valued predictions (regression), and margins moved by a hinge's kinks or an intercept, are
    # as close as the certificate makes them; the logistic classifier's labels pass
    sensitive = isinstance(estimator, LinearRegressor) or estimator.loss == "hinge" or estimator.fit_intercept
    if sensitive and float(estimator.tol) > 1e-12:
        out["check_sample_weight_equivalence_on_dense_data"] = _EQUIVALENCE_WHY
        out["check_sample_weight_equivalence_on_sparse_data"] = _EQUIVALENCE_WHY
    return out


class _OOCLinear(BaseEstimator):
    """Shared machinery: data -> store, training, partial_fit state, streamed margins."""

    _label_kind = "binary"
    _losses: tuple = ()

    def __new__(cls, *args, **kwargs):
        if _SKLEARN_MISSING is not None:
            raise ImportError(f"ooc.{cls.__name__} needs scikit-learn >= 1.6 (pip install 'scikit-learn>=1.6'): "
                              f"{_SKLEARN_MISSING}")
        return super().__new__(cls)

    # -- scikit-learn plumbing --------------------------------------------------------------------
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def __getstate__(self):
        # partial_fit's in-process store and temporary run are not picklable: an unpickled
        # estimator predicts as before, and a later partial_fit starts a new run.
        state = dict(self.__dict__)
        state.pop("_pf", None)
        return state

    # -- validation -------------------------------------------------------------------------------
    def _check_params(self) -> None:
        """The parameters' values, before any data is read (sklearn's ``_validate_params``' place)."""
        if self.loss not in self._losses:
            raise ValueError(f"loss={self.loss!r}: {type(self).__name__} supports "
                             f"{', '.join(repr(x) for x in self._losses)}")
        for name in ("fit_intercept", "overwrite"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name}={getattr(self, name)!r}: expected True or False")
        # the numbers' rule is the command line's (ooc.options, through TrainConfig's field types), named as here
        for name, kind in _option_types().items():
            if hasattr(self, name) and not (name == "l2" and self.l2 is None):
                kind.check(getattr(self, name), name)
        if self.l2 is not None and not self.l2 > 0:
            raise ValueError(f"l2={self.l2!r}: must be > 0 (the dual solver needs a strongly convex objective)")

    def _train_options(self) -> dict:
        opts = {"loss": self.loss, "l2": None if self.l2 is None else float(self.l2), "l1": float(self.l1),
                "tol": float(self.tol), "max_epochs": int(self.max_epochs), "bias": float(self.bias),
                "fit_intercept": bool(self.fit_intercept), "solver": self.solver, "memory": self.memory, "seed": int(self.seed), "threads": self._threads()}
        opts.update(self._extra_options())
        return opts

    def _threads(self) -> int:
        """``n_jobs`` as ``--threads``: None or -1 every core the process may use, else that many."""
        n = self.n_jobs
        if n is None or n == -1:
            return 0
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n_jobs={n!r}: expected None, -1 or an integer >= 1")
        return int(n)

    def _extra_options(self) -> dict:
        return {}

    def _store_kind(self) -> str:
        return self._label_kind

    def _encode_y(self, y, reset: bool):
        """Labels for the store (float64) and the store's label kind; sets classes_ when reset."""
        raise NotImplementedError

    def _from_store(self, path, reset: bool):
        from .store import open_store

        st = open_store(path)
        if reset:
            self.n_features_in_ = st.n_cols
            if hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        return st

    def _to_store(self, X, y, reset: bool, sample_weight=None):
        """Validate ``X, y`` and copy them (and the weights) into a fresh in-process store; returns (store, hash)."""
        from .store.ingest import check_weights, convert

        _check_sparse(X)
        X, y = validate_data(self, X, y, accept_sparse=["csr", "csc"], dtype=[np.float64, np.float32],
                             y_numeric=self._label_kind == "regression", reset=reset)
        y_store = self._encode_y(y, reset)
        if sp.issparse(X):
            X = X.tocsr()
        sw = None if sample_weight is None else check_weights(sample_weight, X.shape[0])
        key = _data_hash(X, y_store, sw)
        st = convert(X, f"{_MEM_PREFIX}{uuid.uuid4().hex}", y=y_store, sample_weight=sw, dtype="float64",
                     label_kind=self._store_kind(), n_features=X.shape[1])
        return st, key

    def _store_for(self, X, y, reset: bool, sample_weight=None):
        """(store, data key, owned): the store to train on and whether we must release it."""
        if _is_path(X):
            if y is not None or sample_weight is not None:
                raise ValueError("fit(store_path) takes the labels and sample weights from the store: pass y=None, "
                                 "sample_weight=None")
            st = self._from_store(X, reset)
            self._check_store_labels(st, reset)
            return st, st.fingerprint, False
        st, key = self._to_store(X, y, reset, sample_weight)
        return st, key, True

    def _check_store_labels(self, st, reset: bool) -> None:
        raise NotImplementedError

    # -- training ---------------------------------------------------------------------------------
    def _train(self, store, run_dir, overwrite=False, **override):
        from .train import train

        opts = dict(self._train_options(), **override)
        if opts["l2"] is None:
            opts["l2"] = 1.0 / store.n_rows  # C = 1, the default of LIBLINEAR and scikit-learn
        with warnings.catch_warnings():
            # re-issued below with the estimator's class, which scikit-learn filters also catch
            warnings.simplefilter("ignore", _OocConvergenceWarning)
            return train(store, run_dir, overwrite=overwrite, **opts)

    def _set_fitted(self, run, warn: bool) -> None:
        from .model import LinearModel

        m = run.model
        res = run.result
        self.coef_, self.intercept_ = self._sklearn_shapes(m.coef_, m.intercept_)
        self.n_iter_ = int(res["epochs"])
        self.primal_ = float(res["primal"])
        self.dual_ = float(res["dual"])
        self.gap_ = float(res["gap"])
        self.rel_gap_ = float(res["rel_gap"])
        self.converged_ = bool(self.rel_gap_ <= float(self.tol))
        self.history_ = run.history
        classes = getattr(self, "classes_", None)
        self.model_ = LinearModel(m.coef_, m.intercept_, classes, m.loss, m.task, m.meta)
        if warn and not self.converged_:
            why = f": {res['stop_reason']}" if res.get("stop_reason") else ""
            warnings.warn(f"{type(self).__name__} stopped at max_epochs={self.max_epochs} with relative duality "
                          f"gap {versus(self.rel_gap_, self.tol)} > tol={self.tol:g}{why}; increase max_epochs (or l2)",
                          ConvergenceWarning, stacklevel=3)

    def _sklearn_shapes(self, coef, intercept):
        """``coef_`` and ``intercept_`` in scikit-learn's shapes (the model's: :class:`ooc.LinearModel`)."""
        return np.asarray(coef, dtype=np.float64), float(intercept)

    def _reset_partial(self) -> None:
        pf = self.__dict__.pop("_pf", None)
        if pf is not None:
            pf["finalizer"]()

    def _may_replace(self, run_dir: str) -> bool:
        """Whether this fit may replace what is at ``run_dir`` (the rule of ``run_dir``, docs/api.rst):
        nothing there (or an empty directory), the run this estimator's previous fit made there, or
        ``overwrite=True``. Anything else is refused (:class:`ooc.runs.rundir.RunError`, one line naming
        ``run_dir``) before any data is copied or any file written."""
        from .runs.rundir import RunError

        if not os.path.lexists(run_dir) or (os.path.isdir(run_dir) and not os.listdir(run_dir)):
            return False  # nothing to replace
        if self.overwrite:
            return True  # the user asked; ooc.train still replaces only a run directory (docs/formats.rst)
        if self._own_run is not None and self._own_run == _run_identity(run_dir):
            return True
        raise RunError(f"run_dir={run_dir}: holds a run or files this estimator's fit did not make (ooc train's, "
                       "another estimator's, or a clone's: GridSearchCV and sklearn.base.clone make new estimators); "
                       "pass overwrite=True to replace it, or another run_dir (None: a temporary one)")

    @property
    def _own_run(self):
        """(path, identity) of the run this estimator's last fit made in ``run_dir``, or None. An instance
        attribute, not a parameter: sklearn's ``clone`` does not copy it, so a clone starts without one."""
        return self.__dict__.get("_run_made")

    def _remember_run(self, run_dir: str) -> None:
        """Record the run now at ``run_dir`` as this estimator's (after its training returned: a fit that failed
        part way leaves a run only ``overwrite=True`` replaces, as a stranger's might be there)."""
        self._run_made = _run_identity(run_dir)

    def fit(self, X, y=None, sample_weight=None):
        """Train to a certified relative duality gap ``tol`` (or stop at ``max_epochs``).

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features), or str
            Training data, or the path of an ooc store (then ``y`` is None).
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), optional
            Finite weights ``>= 0`` multiplying each row's loss (scikit-learn's meaning); None
            for a store path, whose weights are its own.
        """
        self._check_params()
        replace = self._may_replace(os.fspath(self.run_dir)) if self.run_dir is not None else False
        self._reset_partial()
        store, _, owned = self._store_for(X, y, reset=True, sample_weight=sample_weight)
        run_dir = os.fspath(self.run_dir) if self.run_dir is not None else tempfile.mkdtemp(prefix="ooc-est-")
        try:
            run = self._train(store, run_dir, overwrite=replace)
            if self.run_dir is not None:
                self._remember_run(run_dir)
            self._set_fitted(run, warn=True)
        finally:
            if owned:
                _cleanup(store.path, None)
            if self.run_dir is None:
                shutil.rmtree(run_dir, ignore_errors=True)
        self.run_ = run_dir if self.run_dir is not None else None
        return self

    def partial_fit(self, X, y=None, sample_weight=None):
        """One more pass of the solver over all the data given so far; new rows are appended first.

        The first call makes one pass over ``X``. A later call with the same ``X, y`` as the
        call before adds one more pass; with other rows (a new mini-batch) those rows are
        appended to the training data (:func:`ooc.store.append.append`) and the run continues
        on all rows from its duals, the new rows' at 0 (:func:`ooc.resume` with ``store``):
        one pass, on the problem of the concatenated data (``l2=None`` becomes ``1 / n`` of
        all rows). Repeated calls converge to :meth:`fit` on the concatenation. A store path
        as ``X`` must be the previous one or one made from it by ``ooc append``.

        ``n_iter_`` counts the passes actually run since the last new rows (the epochs of the
        run's history): a call adds one, except once the duality gap is 0, when the run is
        proven optimal and a call runs no pass and adds none. Each call recomputes the certified
        gap of the problem on all rows so far (``gap_``, ``rel_gap_``, ``converged_``); no
        ConvergenceWarning is issued. The run lives in
        ``run_dir`` if set, else in a temporary directory removed with the estimator.
        ``sample_weight``: the weights of ``X``'s rows (as in :meth:`fit`); rows given without
        weigh 1.
        """
        from .store.ingest import check_weights

        self._check_params()
        pf = getattr(self, "_pf", None)
        if pf is None:
            replace = self._may_replace(os.fspath(self.run_dir)) if self.run_dir is not None else False
            store, key, owned = self._store_for(X, y, reset=True, sample_weight=sample_weight)
            run_dir = os.fspath(self.run_dir) if self.run_dir is not None else tempfile.mkdtemp(prefix="ooc-est-")
            fin = weakref.finalize(self, _cleanup, store.path if owned else None,
                                   run_dir if self.run_dir is None else None)
            try:
                run = self._train(store, run_dir, overwrite=replace, max_epochs=1, tol=0.0)
            except BaseException:
                fin()
                raise
            if self.run_dir is not None:
                self._remember_run(run_dir)
            self._pf = {"key": key, "run_dir": run_dir, "finalizer": fin, "store": store, "owned": owned}
        else:
            new_store = None
            if _is_path(X):
                if y is not None or sample_weight is not None:
                    raise ValueError("partial_fit(store_path) takes the labels and weights from the store: pass "
                                     "y=None, sample_weight=None")
                new_store = self._from_store(X, reset=False)
                self._check_store_labels(new_store, reset=False)
                key = new_store.fingerprint
            else:
                _check_sparse(X)
                X, y = validate_data(self, X, y, accept_sparse=["csr", "csc"], dtype=[np.float64, np.float32],
                                     y_numeric=self._label_kind == "regression", reset=False)
                y_store = self._encode_y(y, reset=False)
                sw = None if sample_weight is None else check_weights(sample_weight, X.shape[0])
                key = _data_hash(X, y_store, sw)
            if key != pf["key"]:
                run = self._grow(pf, new_store if new_store is not None else (X, y_store, sw), key)
            else:
                from .train import resume

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", _OocConvergenceWarning)
                    # one more pass, its state the model whatever its gap (a gap need not fall every pass)
                    run = resume(pf["run_dir"], max_epochs=self.n_iter_ + 1, keep_better=False)
        self._set_fitted(run, warn=False)
        self.run_ = self._pf["run_dir"] if self.run_dir is not None else None
        return self

    def _grow(self, pf: dict, new, key):
        """Continue the partial_fit run on its rows and ``new`` (a store grown from its store, or
        ``(X, y)`` rows to append to it): one pass from the run's duals, the new rows' at 0."""
        from .store.append import append
        from .train import resume

        if isinstance(new, tuple):
            X, y_store, sw = new
            if sp.issparse(X):
                X = X.tocsr()
            store = append(pf["store"], X, f"{_MEM_PREFIX}{uuid.uuid4().hex}", y=y_store, sample_weight=sw)
            owned = True
        else:
            store, owned = new, False
        options = {"l2": 1.0 / store.n_rows} if self.l2 is None else {}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", _OocConvergenceWarning)
                run = resume(pf["run_dir"], max_epochs=1, store=store, keep_better=False, **options)
        except BaseException:
            if owned:
                _cleanup(store.path, None)
            raise
        # the previous store is no longer needed: the finalizer now drops the new one
        pf["finalizer"].detach()
        if pf["owned"]:
            _cleanup(pf["store"].path, None)
        pf["finalizer"] = weakref.finalize(self, _cleanup, store.path if owned else None,
                                           pf["run_dir"] if self.run_dir is None else None)
        pf.update(key=key, store=store, owned=owned)
        return run

    # -- prediction -------------------------------------------------------------------------------
    def _margins(self, X) -> np.ndarray:
        check_is_fitted(self, "coef_")
        if _is_path(X):
            from .evaluate import is_store_path, read_rows
            from .store import open_store

            path = os.fspath(X)
            if is_store_path(path):
                st = open_store(path)
                if st.n_cols != self.n_features_in_:
                    # scikit-learn refuses an X of another width: a store's columns are its input's width
                    # (convert with --n-features to widen one whose last features never occur)
                    raise ValueError(f"{path}: the store has {st.n_cols} features but {type(self).__name__} "
                                     f"was fitted on {self.n_features_in_}")
            # a store or a file, read as `ooc predict` reads it: with the training store's input recipe (a
            # store read another way is refused, a file read that way, its values as the store's dtype)
            threads = resolve_threads(self._threads())
            out = [self.model_.decision_csr(p.indptr, p.indices, p.data, threads)
                   for p in read_rows(self.model_, path, self.memory, say_base=_say_base)]
            return np.concatenate(out) if out else np.zeros(0)
        _check_sparse(X)
        X = validate_data(self, X, accept_sparse=["csr", "csc"], dtype=[np.float64, np.float32], reset=False)
        if self.coef_.ndim == 2:  # classifiers: one row per class, one for two classes
            m = np.asarray(X @ self.coef_.T) + self.intercept_
            return m[:, 0] if m.shape[1] == 1 else m
        return np.asarray(X @ self.coef_).ravel() + self.intercept_


class LinearClassifier(ClassifierMixin, _OOCLinear):
    """Linear classifier (logistic, hinge or smooth-hinge loss) trained out of core.

    Minimises ``1/n sum_i c_i phi(x_i . w + B w_B, y_i) + l2/2 ||w||^2 + l1 ||w||_1`` with
    Prox-SDCA to a certified relative duality gap ``tol``. scikit-learn's
    ``LogisticRegression(C=C)`` corresponds to ``l2 = 1 / (C n)``.

    Parameters
    ----------
    loss : {'logistic', 'hinge', 'smooth-hinge'}
    l2 : float or None
        L2 weight (> 0). None (default) means ``1 / n_samples``, i.e. ``C = 1`` as in
        LIBLINEAR and scikit-learn.
    l1 : float
        L1 weight.
    tol : float
        Relative duality gap to certify: ``gap <= tol * max(1, |P|)``.
    max_epochs : int
        Passes over the data before giving up (with a ConvergenceWarning).
    fit_intercept : bool
        Fit scikit-learn's unregularized intercept (default False, as ``ooc train``; ``solver``
        ``'auto'`` or ``'sdca'``, ``'rcd-primal'`` for pure L1; a smooth loss; not with ``bias``).
    bias : float
        Value ``B`` of LIBLINEAR's intercept feature (regularized); 0 (default): none.
    class_weight : None, 'balanced' or dict
        ``'balanced'``: scikit-learn's ``n / (classes x count)`` (sums of ``sample_weight`` when
        given); a dict ``{label: weight}`` weighs the examples of each listed label of ``y``.
    gamma : float
        Smoothing of ``'smooth-hinge'``.
    solver : {'auto', 'sdca', 'acc-sdca', 'rcd-primal', 'rcd-dual', 'dgpd'}
        As ``ooc train --solver`` (``'auto'`` decides from the data, see the README).
    multiclass : {'ovr', 'crammer-singer'}
        How more than two classes are trained: one-vs-rest (one binary problem per class,
        all on the same pass), or the Crammer-Singer multiclass hinge (``loss='hinge'`` or
        ``'smooth-hinge'``). Ignored for two classes.
    memory : str or int
        What training may add to this process (e.g. ``'1GiB'``); ``'auto'`` (the default): what the
        process may use (cgroup limit, RLIMIT_AS, available RAM) less what it holds. Never changes the
        result.
    seed : int
        Seed of the block and row orders (the result is deterministic).
    run_dir : str or None
        Keep the run directory (checkpoints, history, model) there; None uses a
        temporary directory, removed after ``fit``. A fit (or a first ``partial_fit``) writes
        there only when nothing is there (or an empty directory), when what is there is the run
        this estimator's previous fit made, or with ``overwrite=True``; anything else (a run of
        ``ooc train`` or ``ooc demo``, another estimator's) is refused
        (:class:`ooc.runs.rundir.RunError`, one line naming ``run_dir``) before any file is
        written. The estimator's own run is known by its identity, kept on the instance:
        ``sklearn.base.clone`` (GridSearchCV, cross_val_score) makes estimators without it, so in
        a search over an estimator with ``run_dir`` every fit after the first is refused (a fold
        scores ``error_score`` with scikit-learn's FitFailedWarning quoting that line; the refit
        raises it) instead of the folds silently replacing each other's runs in one directory.
        One directory holds one run: search with ``run_dir=None`` and keep the run of the
        estimator refitted with the best parameters.
    n_jobs : int or None
        Threads (``ooc train --threads``): None or -1, every core the process may use; the
        classes of one-vs-rest train at once and predictions are computed on them. The result
        does not depend on it.
    overwrite : bool
        Let a fit replace the run at ``run_dir`` whoever made it (``ooc train --overwrite``'s
        rule still holds: only a run directory not in use is replaced). Default False.

    Attributes
    ----------
    coef_ : ndarray (1, n_features) for two classes, (n_classes, n_features) for more
        (scikit-learn's shapes; ``model_.coef_`` is ``(n_features,)`` for two classes).
    intercept_ : ndarray (1,) for two classes, (n_classes,) for more
        ``b`` with ``fit_intercept=True``, ``B * w_B`` with ``bias=B``, else 0.
    classes_ : ndarray (n_classes,)
        Original labels; for two classes ``classes_[1]`` is the positive class.
    n_iter_ : int
        Epochs (passes with updates).
    primal_, dual_, gap_, rel_gap_ : float
        Objectives and duality gap of the returned ``coef_``.
    converged_ : bool
    history_ : list of dict
        One entry per epoch (``epoch, seconds, primal, dual, gap, rel_gap, ...``).
    model_ : ooc.LinearModel
    run_ : str or None
        The run directory when ``run_dir`` is set.
    """

    _label_kind = "binary"
    _losses = CLASSIFICATION_LOSSES

    def __init__(self, loss=_D.loss, l2=None, l1=_D.l1, tol=_D.tol, max_epochs=_D.max_epochs,
                 fit_intercept=_D.fit_intercept, bias=_D.bias, class_weight=_D.class_weight, gamma=_D.gamma, solver=_D.solver, multiclass="ovr", memory=_D.memory,
                 seed=_D.seed, run_dir=None, n_jobs=None, overwrite=False):
        self.loss = loss
        self.l2 = l2
        self.l1 = l1
        self.tol = tol
        self.max_epochs = max_epochs
        self.fit_intercept = fit_intercept
        self.bias = bias
        self.class_weight = class_weight
        self.gamma = gamma
        self.solver = solver
        self.multiclass = multiclass
        self.memory = memory
        self.seed = seed
        self.run_dir = run_dir
        self.n_jobs = n_jobs
        self.overwrite = overwrite

    def _is_multiclass(self) -> bool:
        return len(getattr(self, "classes_", ())) > 2

    def _check_params(self) -> None:
        super()._check_params()
        cw = self.class_weight
        if not (cw is None or cw == "balanced" or isinstance(cw, dict)):
            raise ValueError(f"class_weight={cw!r}: expected None, 'balanced' or a dict {{label: weight}}")
        if isinstance(cw, dict):
            for k, v in cw.items():
                if not isinstance(v, numbers.Real) or isinstance(v, bool) or not np.isfinite(v) or v < 0:
                    raise ValueError(f"class_weight={cw!r}: the weight of {k!r} must be a finite number >= 0")
        g = self.gamma
        if not isinstance(g, numbers.Real) or not np.isfinite(g) or g <= 0:
            raise ValueError(f"gamma={g!r}: expected a finite number > 0")
        if self.multiclass not in ("ovr", "crammer-singer"):
            raise ValueError(f"multiclass={self.multiclass!r}: expected 'ovr' or 'crammer-singer'")

    def _train(self, store, run_dir, overwrite=False, **override):
        if isinstance(self.class_weight, dict):
            override = dict(override, class_weight=self._store_class_weight(store))
        return super()._train(store, run_dir, overwrite=overwrite, **override)

    def _sklearn_shapes(self, coef, intercept):
        """scikit-learn's classifier shapes: ``coef_`` ``(1, d)`` and ``intercept_`` ``(1,)`` for two
        classes (``(k, d)``, ``(k,)`` for more), float64."""
        coef = np.atleast_2d(np.asarray(coef, dtype=np.float64))
        return coef, np.atleast_1d(np.asarray(intercept, dtype=np.float64)).reshape(len(coef))

    def _store_class_weight(self, store) -> dict:
        """``class_weight``'s dict with ``y``'s labels as the store's (original) label values: the store
        of an array holds class positions (-1/+1 for two), one from a path the values themselves."""
        from .store import layout as L

        values = store.label_values if store.label_kind == L.BINARY else store.classes
        out = {}
        for k, v in self.class_weight.items():
            pos = np.flatnonzero(self.classes_ == k)
            if len(pos) == 0:
                raise ValueError(f"class_weight: label {k!r} is not one of the classes {self.classes_.tolist()}")
            out[float(values[int(pos[0])])] = float(v)
        return out

    def _extra_options(self) -> dict:
        return {"class_weight": self.class_weight, "gamma": float(self.gamma),
                "multiclass": self.multiclass if self._is_multiclass() else None}

    def _store_kind(self) -> str:
        return "multiclass" if self._is_multiclass() else "binary"

    def _encode_y(self, y, reset: bool):
        if reset:
            check_classification_targets(y)
            classes = np.unique(y)
            if len(classes) < 2:
                raise ValueError(f"y has only one class ({classes[0]!r}): a classifier needs at least 2 classes")
            self.classes_ = classes
        y = np.asarray(y)
        # the store gets class positions (0..k-1, or -1/+1 for two classes); classes_ maps back
        idx = np.searchsorted(self.classes_, y)
        known = (idx < len(self.classes_)) & (self.classes_[np.minimum(idx, len(self.classes_) - 1)] == y)
        if not known.all():
            raise ValueError(f"y has labels outside classes_ {self.classes_.tolist()}")
        if self._is_multiclass():
            return idx.astype(np.float64)
        return np.where(idx == 1, 1.0, -1.0)

    def _check_store_labels(self, st, reset: bool) -> None:
        from .store import layout as L

        if st.label_kind == L.REGRESSION:
            raise ValueError(f"{st.path}: a classifier needs class labels; the store's labels are regression "
                             "targets (use LinearRegressor)")
        if reset:
            self.classes_ = np.asarray(st.label_values if st.label_kind == L.BINARY else st.classes)

    def decision_function(self, X):
        """Margins ``X @ coef_.T + intercept_``: (n,) for two classes (> 0 means ``classes_[1]``),
        else (n, n_classes); X may be a store path."""
        return self._margins(X)

    def predict(self, X):
        """Predicted labels, in ``classes_``'s values (the largest margin for more than two)."""
        m = self._margins(X)
        if m.ndim == 2:
            return self.classes_[np.argmax(m, axis=1)]
        return self.classes_[(m > 0).astype(np.intp)]

    def _has_proba(self):
        if self.loss not in self._losses or not loss_spec(self.loss).proba:
            raise AttributeError(f"predict_proba needs loss='logistic' (this estimator has loss={self.loss!r})")
        return True

    @available_if(_has_proba)
    def predict_proba(self, X):
        """Class probabilities per row: ``[P(classes_[0]), P(classes_[1])]`` from the sigmoid of
        the margin, or for more than two classes each class's one-vs-rest sigmoid, normalised to
        sum to 1 (scikit-learn's one-vs-rest rule)."""
        return proba_from_margins(self._margins(X))

    @available_if(_has_proba)
    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`, computed without overflow for two classes."""
        m = self._margins(X)
        if m.ndim == 2:
            return np.log(self.predict_proba(X))
        return np.column_stack([-np.logaddexp(0.0, m), -np.logaddexp(0.0, -m)])

    def partial_fit(self, X, y=None, classes=None, sample_weight=None):
        """:meth:`_OOCLinear.partial_fit`; ``classes`` (if given) must be the labels of y."""
        if classes is not None and getattr(self, "_pf", None) is None:
            classes = np.unique(np.asarray(classes))
            if len(classes) < 2:
                raise ValueError(f"classes={classes.tolist()}: a classifier needs at least 2 classes")
        super().partial_fit(X, y, sample_weight=sample_weight)
        if classes is not None and not np.array_equal(classes, self.classes_):
            raise ValueError(f"classes={classes.tolist()} differ from the labels of y {self.classes_.tolist()}")
        return self


class LinearRegressor(RegressorMixin, _OOCLinear):
    """Ridge / elastic-net regression (squared loss) trained out of core.

    Minimises ``1/(2n) sum_i (x_i . w + b - y_i)^2 + l2/2 ||w||^2 + l1 ||w||_1`` (squared
    loss ``phi(z, y) = (z - y)^2 / 2``), so scikit-learn's ``Ridge(alpha, fit_intercept=False)``
    is ``l2 = alpha / n`` (the default ``l2=None`` is ``1 / n``, i.e. ``alpha = 1``), and
    ``Ridge(alpha)`` is ``l2 = alpha / n, fit_intercept=True``.
    Parameters and attributes as :class:`LinearClassifier` (no ``classes_``, ``class_weight``,
    ``gamma`` or probabilities); ``coef_`` is ``(n_features,)`` and ``intercept_`` a float, as
    scikit-learn's ``Ridge``.
    """

    _label_kind = "regression"
    _losses = REGRESSION_LOSSES

    def __init__(self, loss=REGRESSION_LOSSES[0], l2=None, l1=_D.l1, tol=_D.tol, max_epochs=_D.max_epochs,
                 fit_intercept=_D.fit_intercept, bias=_D.bias, solver=_D.solver, memory=_D.memory, seed=_D.seed, run_dir=None, n_jobs=None,
                 overwrite=False):
        self.loss = loss
        self.l2 = l2
        self.l1 = l1
        self.tol = tol
        self.max_epochs = max_epochs
        self.fit_intercept = fit_intercept
        self.bias = bias
        self.solver = solver
        self.memory = memory
        self.seed = seed
        self.run_dir = run_dir
        self.n_jobs = n_jobs
        self.overwrite = overwrite

    def _encode_y(self, y, reset: bool):
        return np.asarray(y, dtype=np.float64)

    def _check_store_labels(self, st, reset: bool) -> None:
        from .store import layout as L

        if st.label_kind != L.REGRESSION:
            raise ValueError(f"{st.path}: LinearRegressor needs regression labels (this store's are "
                             f"{st.label_kind}); convert with --label-kind regression")

    def predict(self, X):
        """``X @ coef_ + intercept_``; X may be a store path."""
        return self._margins(X)
