"""Export a trained model to other tools: LIBLINEAR's model file, plain text, scikit-learn, ONNX.

Every export predicts as the ooc model does, row for row: the decision function
``f(x) = x . coef_ + intercept_`` and the rule of :meth:`ooc.model.LinearModel.predict_from_margins`.

Feature numbering. ooc's features are the columns ``0 .. d-1`` of the store; the user's ids are
``column + index_base`` (``index_base`` 1 for a 1-based svmlight file, the usual LIBSVM
convention, else 0). The text export writes the user's ids; LIBLINEAR numbers its features from 1,
so its feature ``j`` is column ``j - 1`` (the file's own id when the data was 1-based); the
scikit-learn and ONNX exports take a matrix of the ``d`` columns.

``out`` ``-`` is standard output (as ``-`` is standard input to convert, predict and evaluate): the
bytes are written there, and no file named ``-`` is made.

Outputs appear whole (written under a temporary name, then put in place: :func:`ooc.owned.put`).
An existing file is replaced only with ``overwrite`` and only when ooc wrote it, as its directory's
manifest records it (:mod:`ooc.owned`); each format also carries a mark that its readers ignore
(:func:`is_export`), which tells what made a file but gives no right to replace it.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from . import owned
from .fsutil import contains
from .model import LinearModel
from .objectives.losses import loss_spec

#: ``--format`` choices.
FORMATS = ("liblinear", "text", "sklearn", "onnx")
#: The mark each export carries (see :func:`is_export`): LIBLINEAR's loader stops reading after the
#: weights, so a last line there is ignored; the text's first line is a comment; the scikit-learn
#: estimator has an attribute of that name; the ONNX model is its ``producer_name``.
MARK = "ooc_export"
#: ``out`` meaning standard output.
STDOUT = "-"


# -- LIBLINEAR -------------------------------------------------------------------------------------
def liblinear_solver_type(model: LinearModel) -> str:
    """The LIBLINEAR ``solver_type`` whose problem is closest to the model's (loss and penalty).

    LIBLINEAR's predict uses it only to tell regression (its ``*_SVR*`` types: the margin is the
    prediction), probability models (``*_LR*``: ``-b 1``) and Crammer-Singer (``MCSVM_CS``: one
    weight vector per class even for two classes) apart; ooc's other losses have no LIBLINEAR
    counterpart and are written as the nearest one (smooth hinge: the hinge's).
    """
    l1 = float(model.meta.get("l1", 0.0)) > 0
    if model.task == "regression":
        return "L2R_L2LOSS_SVR"
    if model.meta.get("multiclass") == "crammer-singer":
        return "MCSVM_CS"
    if model.loss == "logistic":
        return "L1R_LR" if l1 else "L2R_LR"
    return "L1R_L2LOSS_SVC" if l1 else "L2R_L1LOSS_SVC_DUAL"


def _bias_column(model: LinearModel) -> tuple[float, np.ndarray | None]:
    """LIBLINEAR's ``bias`` value ``B`` and the weights of its bias feature (``intercept_ / B``).

    LIBLINEAR appends a feature of value ``B`` to every row when ``B >= 0`` and none when ``B`` is
    negative (``-1``: no intercept). ooc's intercept is ``B * w_bias`` with the run's ``--bias B``;
    a model with an intercept but no ``bias`` recorded is written with ``B = 1``.
    """
    icpt = np.atleast_1d(np.asarray(model.intercept_, dtype=np.float64))
    bias = float(model.meta.get("bias", 0.0))
    if bias <= 0 and not icpt.any():
        return -1.0, None
    b = bias if bias > 0 else 1.0
    return b, icpt / b


def _integer_labels(model: LinearModel) -> list[int]:
    classes = np.asarray(model.classes_, dtype=np.float64)
    if not np.all(classes == np.round(classes)) or np.abs(classes).max() >= 2 ** 31:
        raise ValueError(f"--format liblinear: LIBLINEAR labels are integers; this model's classes are "
                         f"{', '.join(f'{c:g}' for c in classes)} (use --format text or sklearn)")
    return [int(c) for c in classes]


def liblinear_text(model: LinearModel) -> str:
    r"""The model as LIBLINEAR's ``save_model`` writes it (read by its ``load_model`` and ``predict``).

    ::

        solver_type L2R_LR
        nr_class 2
        label 1 -1          (classification only: label[0] is the class of a positive margin)
        nr_feature d
        bias B              (-1: no bias feature)
        w
        w_1 ... w_k         (one line per feature 1..d, then the bias feature: k weights each)

    LIBLINEAR keeps one weight vector for two classes (``nr_w = 1``: ``label[0]`` where
    ``w . x > 0``, else ``label[1]``) and for regression (no ``label`` line), else one per class
    (``nr_w = nr_class``), stored feature by feature (``w[(j-1) * nr_w + c]``); it predicts the label
    of the largest decision value, the first on a tie, as ooc does. A binary ooc model predicts
    ``classes_[1]`` for ``f(x) > 0``, hence ``label classes_[1] classes_[0]``.
    """
    solver = liblinear_solver_type(model)
    W = np.atleast_2d(model.coef_)
    B, wb = _bias_column(model)
    lines = [f"solver_type {solver}"]
    if model.task == "regression":
        lines.append("nr_class 2")
    elif model.task == "binary" and solver != "MCSVM_CS":
        neg, pos = _integer_labels(model)
        lines += ["nr_class 2", f"label {pos} {neg}"]
    else:
        labels = _integer_labels(model)
        lines += [f"nr_class {len(labels)}", "label " + " ".join(map(str, labels))]
    lines += [f"nr_feature {W.shape[1]}", f"bias {B:.17g}", "w"]
    cols = W.T if wb is None else np.vstack([W.T, wb[None, :]])
    lines += [" ".join(f"{v:.17g}" for v in row) + " " for row in cols]  # LIBLINEAR's own trailing space
    lines.append(f"{MARK} {model.meta.get('store', '')}")  # after the weights: LIBLINEAR stops reading before
    return "\n".join(lines) + "\n"


# -- text ------------------------------------------------------------------------------------------
def weights_text(model: LinearModel) -> str:
    """``feature weight`` lines (one column per class for multiclass) of the nonzero weights.

    Features are the user's ids (column + ``index_base``); the intercept comes first as the
    feature ``(intercept)``. A header comment names the loss, the task and the classes.
    """
    W = np.atleast_2d(model.coef_)
    base = int(model.meta.get("index_base", 0))
    icpt = np.atleast_1d(np.asarray(model.intercept_, dtype=np.float64))
    head = f"# {MARK}: loss {model.loss}, task {model.task}"
    if model.classes_ is not None:
        head += ", classes " + " ".join(f"{c:g}" for c in np.asarray(model.classes_, dtype=np.float64))
        if model.task == "binary":
            head += f" (a positive margin predicts {float(model.classes_[-1]):g})"
    lines = [head, "# feature weight" + ("s (one column per class)" if len(W) > 1 else "")]
    lines.append("(intercept) " + " ".join(f"{v:.17g}" for v in icpt))
    for j in np.flatnonzero(np.any(W != 0, axis=0)):
        lines.append(f"{j + base} " + " ".join(f"{v:.17g}" for v in W[:, j]))
    return "\n".join(lines) + "\n"


# -- scikit-learn ----------------------------------------------------------------------------------
def _c_of(model: LinearModel) -> float:
    """scikit-learn's ``C`` for ooc's ``l2`` (``min_w C sum_i loss + |w|^2 / 2`` is ooc's
    ``(1/n) sum_i loss + l2 |w|^2 / 2`` scaled by ``1 / (n l2)``); 1.0 when unknown."""
    n, l2 = int(model.meta.get("n_rows", 0)), float(model.meta.get("l2", 0.0))
    return 1.0 / (n * l2) if n > 0 and l2 > 0 else 1.0


def sklearn_estimator(model: LinearModel):
    """A fitted scikit-learn estimator that predicts as ``model``.

    Logistic loss: ``LogisticRegression`` (two classes), else ``OneVsRestClassifier`` of binary
    ``LogisticRegression`` (its ``predict_proba`` normalises the classes' sigmoids, ooc's rule);
    hinge and smooth hinge: ``LinearSVC`` (``multi_class='crammer_singer'`` for Crammer-Singer);
    regression: ``Ridge``. Their hyperparameters are set to ooc's problem where it has an
    equivalent (``C = 1 / (n l2)``, ``alpha = n l2``); refitting one solves scikit-learn's problem
    (an unpenalised intercept), not ooc's.
    """
    try:
        from sklearn.linear_model import LogisticRegression, Ridge
        from sklearn.multiclass import OneVsRestClassifier
        from sklearn.preprocessing import LabelBinarizer
        from sklearn.svm import LinearSVC
    except ImportError:
        raise RuntimeError("--format sklearn needs scikit-learn (pip install 'ooc[sklearn]')") from None
    W = np.atleast_2d(model.coef_).astype(np.float64)
    icpt = np.atleast_1d(np.asarray(model.intercept_, dtype=np.float64)).copy()
    d = W.shape[1]
    fit_icpt = bool(icpt.any()) or float(model.meta.get("bias", 0.0)) > 0

    def fitted(est, coef, b, classes=None):
        est.coef_ = np.array(coef)
        est.intercept_ = (b if fit_icpt else 0 * b) if np.ndim(b) == 0 else np.array(b) * fit_icpt
        if classes is not None:
            est.classes_ = np.asarray(classes)
        est.n_features_in_ = d
        return est

    if model.task == "regression":
        est = fitted(Ridge(alpha=1.0 / _c_of(model), fit_intercept=fit_icpt), W[0], float(icpt[0]))
    elif loss_spec(model.loss).proba and model.task == "binary":
        est = fitted(LogisticRegression(C=_c_of(model), fit_intercept=fit_icpt), W, icpt, model.classes_)
    elif loss_spec(model.loss).proba:
        est = OneVsRestClassifier(LogisticRegression(C=_c_of(model), fit_intercept=fit_icpt))
        est.label_binarizer_ = LabelBinarizer(sparse_output=True).fit(np.asarray(model.classes_))
        est.classes_ = est.label_binarizer_.classes_
        est.estimators_ = [fitted(LogisticRegression(C=_c_of(model), fit_intercept=fit_icpt), W[c:c + 1],
                                  icpt[c:c + 1], [0, 1]) for c in range(len(W))]
        est.n_features_in_ = d
    else:
        cs = model.meta.get("multiclass") == "crammer-singer"
        svc = LinearSVC(C=_c_of(model), loss="hinge" if model.loss == "hinge" else "squared_hinge",
                        multi_class="crammer_singer" if cs else "ovr", fit_intercept=fit_icpt)
        est = fitted(svc, W, icpt, model.classes_)
    setattr(est, MARK + "_", {"loss": model.loss, "task": model.task, "store": model.meta.get("store")})
    return est


def sklearn_pickle(model: LinearModel) -> bytes:
    """:func:`sklearn_estimator` pickled (``pickle.load`` it with the same scikit-learn version)."""
    import pickle

    return pickle.dumps(sklearn_estimator(model), protocol=pickle.HIGHEST_PROTOCOL)


# -- ONNX ------------------------------------------------------------------------------------------
def onnx_bytes(model: LinearModel) -> bytes:
    """:func:`sklearn_estimator` converted by skl2onnx: input ``X`` (float32, ``d`` columns), outputs
    the label and, for classifiers, the class probabilities (or scores)."""
    try:
        from skl2onnx import convert_sklearn
        from skl2onnx.common.data_types import FloatTensorType
    except ImportError:
        raise RuntimeError("--format onnx needs skl2onnx (pip install 'ooc[onnx]')") from None
    est = sklearn_estimator(model)
    # probabilities as one array, not a list of dicts (classifiers with predict_proba have the option)
    onx = convert_sklearn(est, initial_types=[("X", FloatTensorType([None, model.n_features]))],
                          options={id(est): {"zipmap": False}} if hasattr(est, "predict_proba") else None)
    onx.producer_name = MARK
    return onx.SerializeToString()


# -- writing ---------------------------------------------------------------------------------------
def is_export(path: str, fmt: str) -> bool:
    """Whether the file ``path`` is an ooc export of format ``fmt`` (carries :data:`MARK`)."""
    if not os.path.isfile(path):
        return False
    mark = MARK.encode()
    with open(path, "rb") as f:
        if fmt == "text":
            return f.readline().startswith(b"# " + mark)
        if fmt == "liblinear":
            if not f.read(12) == b"solver_type ":
                return False
            f.seek(max(0, os.path.getsize(path) - 4096))
            return (f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]).startswith(mark)
        return mark in f.read()  # the pickle's attribute name, the ONNX producer name


def render(model: LinearModel, fmt: str) -> bytes:
    """The bytes of ``model`` exported as ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "liblinear":
        return liblinear_text(model).encode()
    if fmt == "text":
        return weights_text(model).encode()
    if fmt == "sklearn":
        return sklearn_pickle(model)
    if fmt == "onnx":
        return onnx_bytes(model)
    raise ValueError(f"--format {fmt}: not one of {', '.join(FORMATS)}")


def export(run: str, out: str, fmt: str, overwrite: bool = False) -> dict:
    """Write the model of the run directory ``run`` to the file ``out`` as ``fmt`` (``-``: standard output).

    Raises
    ------
    FileExistsError
        ``out`` exists and ``overwrite`` is not set, or it is not an ooc export of ``fmt``.
    ValueError
        ``out`` is inside ``run``; the model cannot be expressed in ``fmt`` (LIBLINEAR: classes
        that are not integers).
    """
    model = LinearModel.load(run)
    if out == STDOUT:  # no file: nothing on disk is made or replaced, whatever ``overwrite`` says
        payload = render(model, fmt)
        stream = getattr(sys.stdout, "buffer", sys.stdout)
        stream.write(payload)
        stream.flush()
        return _summary(run, out, fmt, payload, model)
    if os.path.lexists(run) and contains(run, out):
        raise ValueError(f"--out {out}: is inside the run directory {run}; choose another file")
    owned.check_target(out)
    if os.path.lexists(out):
        if not overwrite:
            raise FileExistsError(f"{out}: exists (--overwrite replaces an export ooc wrote)")
        owned.refuse_to_replace(out, f"an ooc {fmt} export", inputs=(run,), kind="export")
        if not is_export(out, fmt):  # ooc's, but another kind of file: a slip of --format, most likely
            raise FileExistsError(f"{out}: is not an ooc {fmt} export (another format's); refusing to replace it")
    payload = render(model, fmt)
    owned.write_bytes(out, payload, kind="export", what=f"an ooc {fmt} export")
    return _summary(run, out, fmt, payload, model)


def _summary(run: str, out: str, fmt: str, payload: bytes, model: LinearModel) -> dict:
    """What :func:`export` wrote (``ooc export --json``)."""
    return {"run": run, "out": out, "format": fmt, "bytes": len(payload), "task": model.task,
            "loss": model.loss, "n_features": model.n_features,
            "index_base": int(model.meta.get("index_base", 0))}
