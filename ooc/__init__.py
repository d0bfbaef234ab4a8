"""ooc: out-of-core, duality-gap-certified training of regularized linear models."""

__version__ = "0.1.0"

from .store import Store, StoreCorruptError, StoreError, open_store  # noqa: E402
from .store.ingest import convert  # noqa: E402
from .synth import synth  # noqa: E402

__all__ = ["Store", "StoreCorruptError", "StoreError", "convert", "open_store", "synth", "__version__"]
