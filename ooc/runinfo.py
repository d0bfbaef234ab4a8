"""``ooc info RUN``: what a run directory holds: the objective, its certificate, the largest weights.

The certificate is the one training recorded: ``RUN/model/metrics.json`` for a finished run, the
last line of ``RUN/history.jsonl`` for one still to resume. Features are named by their ids as in
the input (column + ``index_base``: 1-based for a 1-based svmlight file); a store keeps no feature
names, so hashed features are reported by the id they were hashed to.
"""

from __future__ import annotations

import os

import numpy as np

from .engine import advised_max_epochs, stop_diagnosis
from .fsutil import read_sealed_json
from .model import LinearModel
from .numtext import versus
from .objectives.losses import LOSS_REGISTRY, loss_spec
from .runs.rundir import RunDir


def objective_text(cfg: dict) -> str:
    r"""The training problem of a run in one line: ``(1/n) sum_i phi(x_i . w, y_i) + l2/2 |w|^2 + l1 |w|_1``.

    ``x_i`` ends with the constant feature ``B`` when the run has ``--bias B`` (whose weight is
    penalised like the others, as LIBLINEAR does); the margin has a free ``+ b`` with
    ``--fit-intercept``; multiclass one-vs-rest sums one such problem per
    class, Crammer-Singer uses the max-of-hinge loss of all the classes' margins.
    """
    loss = cfg.get("loss")
    if loss in LOSS_REGISTRY and "gamma" in loss_spec(loss).params:
        loss = f"{loss}(gamma={cfg.get('gamma'):g})"
    margin = "x_i . w + b" if cfg.get("fit_intercept") else "x_i . w"
    if cfg.get("multiclass") == "crammer-singer":
        term = f"(1/n) sum_i max-of-{loss}(x_i . W, y_i)"
    else:
        term = f"(1/n) sum_i {'c_i ' if cfg.get('class_weight') else ''}{loss}({margin}, y_i)"
    if cfg.get("l2"):
        term += f" + {cfg['l2']:g}/2 |w|^2"
    if cfg.get("l1"):
        term += f" + {cfg['l1']:g} |w|_1"
    if cfg.get("bias"):
        term += f", x_i with a last feature {cfg['bias']:g} (the intercept's)"
    if cfg.get("fit_intercept"):
        term += ", b unregularized (the intercept)"
    if cfg.get("class_weight"):
        term += f", c_i: class weights '{cfg['class_weight']}'"
    if cfg.get("multiclass") == "ovr":
        term += ", one problem per class (one-vs-rest)"
    return term


def top_features(model: LinearModel, k: int) -> list[dict]:
    """The ``k`` features of largest ``|w|`` (multiclass: the largest over the classes), largest first:
    ``{"feature": id, "weight": w}`` (``weights``: one per class for multiclass); ties by id."""
    W = np.atleast_2d(model.coef_)
    base = int(model.meta.get("index_base", 0))
    size = np.abs(W).max(axis=0)
    nz = np.flatnonzero(size)
    order = nz[np.lexsort((nz, -size[nz]))][:max(int(k), 0)]
    if len(W) == 1:
        return [{"feature": int(j) + base, "weight": float(W[0, j])} for j in order]
    return [{"feature": int(j) + base, "weights": W[:, j].tolist()} for j in order]


def run_info(path: str, top: int = 10) -> dict:
    """A summary of the run directory ``path`` (see the module docstring); raises
    :class:`~ooc.runs.rundir.RunError` naming ``path`` when it is not a run directory."""
    rd = RunDir.open(path)
    cfg = rd.config
    out = {"run": path, "store": cfg.get("store"), "store_fingerprint": cfg.get("store_fingerprint"),
           "n_rows": cfg.get("n_rows"), "n_cols": cfg.get("n_cols"), "solver": cfg.get("solver_used"),
           "ooc_version": cfg.get("ooc_version"), "loss": cfg.get("loss"), "l2": cfg.get("l2"), "l1": cfg.get("l1"),
           "bias": cfg.get("bias"), "fit_intercept": bool(cfg.get("fit_intercept")), "multiclass": cfg.get("multiclass"), "class_weight": cfg.get("class_weight"),
           "tol": cfg.get("tol"), "max_epochs": cfg.get("max_epochs"), "objective": objective_text(cfg)}
    metrics = os.path.join(rd.model_dir, "metrics.json")
    finished = os.path.isfile(metrics) and os.path.isfile(os.path.join(rd.model_dir, "model.json"))
    out["finished"] = finished
    if finished:
        res = read_sealed_json(metrics)
        model = LinearModel.load(rd.model_dir)
        out.update({k: res.get(k) for k in ("primal", "dual", "gap", "rel_gap", "epochs", "seconds", "converged")})
        if not res.get("converged") and not res.get("early_stopped") and res.get("epochs") is not None:
            # the resume train's stop message advised: the same diagnosis of the same states, the same rule
            opts = {"tol": cfg.get("tol") or res.get("tol") or 0.0, "loss": cfg.get("loss"),
                    "distributed": cfg.get("distributed")}
            stall = stop_diagnosis(rd.history(), opts, int(res.get("generation") or 0))
            out["advised_max_epochs"] = advised_max_epochs(stall, int(res["epochs"]))
        gens = cfg.get("generations") or []
        if int(res.get("generation") or 0) != len(gens):
            # continued on a grown store, not converged there yet: the model is the previous store's, kept
            out["model_store"] = gens[-1].get("parent_store")
        W = np.atleast_2d(model.coef_)
        out.update({"task": model.task, "classes": None if model.classes_ is None else model.classes_.tolist(),
                    "intercept": np.asarray(model.intercept_).tolist(), "n_features": model.n_features,
                    "nnz_w": int(np.count_nonzero(np.any(W != 0, axis=0))),
                    "top_features": top_features(model, top)})
    else:
        h = rd.history()
        last = h[-1] if h else {}
        out.update({k: last.get(k) for k in ("primal", "dual", "gap", "rel_gap", "epoch", "seconds")})
        out["epochs"] = out.pop("epoch")
        out["converged"] = False
    return out


def format_run_info(i: dict) -> str:
    """Human-readable ``ooc info RUN``."""
    lines = [f"run          {i['run']} (solver {i['solver']}, ooc {i['ooc_version']})",
             f"store        {i['store']} ({i['n_rows']} rows x {i['n_cols']} features)"]
    if i["finished"]:
        model = f"model        {i['task']} {i['loss']}"
        if i.get("classes") is not None:
            model += ", classes " + " ".join(f"{c:g}" for c in i["classes"])
        icpt = i["intercept"]
        model += ", intercept " + (" ".join(f"{v:.6g}" for v in icpt) if isinstance(icpt, list) else f"{icpt:.6g}")
        lines.append(model)
    lines.append(f"objective    {i['objective']}")
    if i.get("rel_gap") is None:
        lines.append("certificate  none yet (no certified state: 'ooc resume' continues the run)")
    else:
        verdict = ("converged: relative duality gap {rel} <= tol {tol:g}" if i["converged"] else
                   "NOT converged: relative duality gap {rel} > tol {tol:g}")
        rel = versus(i["rel_gap"], i["tol"])
        lines.append(f"certificate  {verdict.format(rel=rel, tol=i['tol'])} after {i['epochs']} epochs "
                     f"(primal {i['primal']:.10g}, dual {i['dual']:.10g}, {i['seconds']:.2f} s)")
    if not i["finished"]:
        lines.append(f"             not finished: ooc resume {i['run']} continues it")
        return "\n".join(lines)
    if i.get("model_store"):
        lines.append(f"             of the model of the previous store {i['model_store']}, kept until the run's "
                     f"continuation on {i['store']} converges: ooc resume {i['run']} continues it")
    elif not i["converged"]:
        # the figure train advised (no rule of info's own); an early-stopped run was advised none
        more = i.get("advised_max_epochs") or "N"
        lines.append(f"             ooc resume {i['run']} --max-epochs {more} continues it")
    lines.append(f"weights      {i['nnz_w']} of {i['n_features']} features nonzero"
                 + (f"; the {len(i['top_features'])} largest |w| (feature id: weight"
                    + ("s by class" if i["task"] == "multiclass" else "") + "):" if i["top_features"] else ""))
    for t in i["top_features"]:
        w = t.get("weights", [t.get("weight")])
        lines.append(f"             {t['feature']:>10}  " + "  ".join(f"{v:+.6g}" for v in w))
    return "\n".join(lines)
