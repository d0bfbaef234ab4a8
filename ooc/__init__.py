"""ooc: out-of-core, duality-gap-certified training of regularized linear models."""

from ._version import __version__
from .config import TrainConfig
from .model import LinearModel, load_model
from .schedule.planner import MemoryBudgetWarning
from .store import Store, StoreCorruptError, StoreError, open_store
from .store.ingest import convert
from .synth import synth
from .train import ConvergenceWarning, Run, resume, train


def __getattr__(name):
    # the estimators import scikit-learn (seconds of start-up): only when asked for
    if name in ("LinearClassifier", "LinearRegressor"):
        from . import estimators

        return getattr(estimators, name)
    raise AttributeError(f"module 'ooc' has no attribute {name!r}")


__all__ = ["ConvergenceWarning", "LinearClassifier", "LinearModel", "LinearRegressor", "MemoryBudgetWarning", "Run",
           "Store", "StoreCorruptError", "StoreError", "TrainConfig", "convert", "load_model", "open_store", "resume",
           "synth", "train", "__version__"]
