"""The on-disk dataset: layout, backends, ingest, statistics, reading blocks."""

from .backend import Backend, MemoryBackend, StoreCorruptError, StoreError
from .store import Block, Store, open_store

__all__ = ["Backend", "Block", "MemoryBackend", "Store", "StoreCorruptError", "StoreError", "open_store"]
