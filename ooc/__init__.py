"""ooc: out-of-core, duality-gap-certified training of regularized linear models.

The public names are imported on first use (PEP 562): ``import ooc`` takes milliseconds, the
command line can install its signal handlers before the compiled kernels, NumPy and Zarr load
(``ooc._entry``), and scikit-learn loads only for the estimators.
"""

import sys
import types

from ._version import __version__

#: public name -> the module that defines it
_EXPORTS = {
    "TrainConfig": "config",
    "LinearModel": "model", "load_model": "model",
    "MemoryBudgetWarning": "schedule.planner",
    "Store": "store", "StoreCorruptError": "store", "StoreError": "store", "open_store": "store",
    "convert": "store.ingest",
    "synth": "synth",
    "ConvergenceWarning": "train", "Run": "train", "resume": "train", "train": "train",
    "LinearClassifier": "estimators", "LinearRegressor": "estimators",
}


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ooc' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


class _Package(types.ModuleType):
    """``ooc.train`` and ``ooc.synth`` are the functions, as they were when imported eagerly: the import
    system's binding of the submodules of the same names to the package is not kept (the submodules
    are still ``sys.modules['ooc.train']``, ``from ooc.train import ...``)."""

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and name in _EXPORTS and _EXPORTS[name] == name:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = sorted(_EXPORTS) + ["__version__"]
