"""Validation while training: a held-out score of every certified state, and early stopping.

``--validation DATA`` (a file or a store) scores the coefficients of every state the run
certifies: the model is built from the state's ``w`` exactly as the run's final model is,
and scored by :func:`ooc.evaluate.evaluate_model` (what ``ooc evaluate`` computes), so the
history's number for epoch ``e`` is ``ooc evaluate``'s on the model of that state. Cost: one
pass over DATA per certified state, read in blocks of the training block size (a store is
cheaper to read than a text file, which is parsed every time).

Each history line gets ``validation`` (the value) and ``validation_metric``; the result and
``--json`` the last state's, ``best_validation``, ``best_epoch`` and ``early_stopped``.
``--early-stop K`` ends the run once ``K`` certified states in a row did not improve on the
best score; the run keeps the last state (the one its duality-gap certificate is for), and
the history names the best epoch.
"""

from __future__ import annotations

import os

from ._memlimit import Budget
from .config import VALIDATION_METRICS
from .engine import Watch
from .evaluate import check_input, evaluate_model
from .objectives.losses import loss_spec
from .store import layout as L

#: Metrics where larger is better (the others are errors or objectives).
HIGHER_IS_BETTER = ("accuracy",)


def metric_for(o: dict, task: str) -> str:
    """The metric ``--validation-metric`` names for this task, checked; ``auto`` resolved."""
    metric = o["validation_metric"]
    classification = task in (L.BINARY, L.MULTICLASS)
    if metric == VALIDATION_METRICS[0]:
        return "accuracy" if classification else "rmse"
    if metric == "accuracy" and not classification:
        raise ValueError("--validation-metric accuracy is for classification (this store's labels are regression: "
                         "use rmse or primal)")
    if metric == "rmse" and classification:
        raise ValueError("--validation-metric rmse is for regression (use accuracy, logloss or primal)")
    if metric == "logloss" and (not loss_spec(o["loss"]).proba or o["multiclass"] == "crammer-singer"):
        raise ValueError("--validation-metric logloss needs --loss logistic (one-vs-rest); use accuracy or primal")
    return metric


def _within_training(nbytes: int) -> Budget:
    """What scoring may add inside a training's own ceiling (no ceiling of its own: the training's governor
    goes on watching the process), not a whole-process ``--memory``."""
    return Budget(int(nbytes), None, 0, None, int(nbytes))


def check(o: dict, task: str, store=None) -> str:
    """Refuse a ``--validation`` that is not there or a metric the task has not; the metric.

    With the training ``store``, DATA is also refused before training when it is not read as the
    store's input was or has another width (:func:`ooc.evaluate.check_input`: its first piece)."""
    source = o["validation"]
    if "://" not in source and not os.path.exists(source):
        raise ValueError(f"--validation {source}: no such file or store")
    if store is not None:
        # ooc train has no --index-base of its own: a file numbered otherwise is converted with it
        check_input(store, source, memory=_within_training(4 * int(o.get("train_block_bytes") or L.DEFAULT_BLOCK_BYTES)),
                    say_base=lambda b: f"convert it with 'ooc convert {source} STORE --index-base {b}' and pass "
                                       "--validation STORE")
    return metric_for(o, task)


def watch(o: dict, task: str, to_model) -> Watch | None:
    """The engine's :class:`~ooc.engine.Watch` of ``o['validation']`` (None without one).

    ``to_model(w)`` builds the :class:`~ooc.model.LinearModel` of a state's coefficients.
    """
    source = o.get("validation")
    if source is None:
        return None
    metric = check(o, task)
    # pieces of about a training block: the evaluation holds a few of them at once
    budget = _within_training(4 * int(o["train_block_bytes"] or L.DEFAULT_BLOCK_BYTES))

    def score(w) -> dict:
        m = evaluate_model(to_model(w), source, memory=budget, threads=o["threads"])
        return {"validation": float(m[metric]), "validation_metric": metric}

    return Watch(score, "validation", metric in HIGHER_IS_BETTER, int(o["early_stop"]))
