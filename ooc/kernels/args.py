r"""The small NamedTuples the kernels take instead of long argument lists.

Numba compiles one specialization per tuple type (field types included) and caches it on
disk, like the loss NamedTuples of :mod:`ooc.objectives.losses`; building one in Python
costs a few hundred nanoseconds per call. Scalars should be Python floats (an int field
compiles another specialization).
"""

from typing import NamedTuple

import numpy as np

__all__ = ["Rows", "Labels", "Reg"]


class Rows(NamedTuple):
    r"""A compressed sparse block: CSR rows (or CSC columns, for the primal kernels).

    ``indptr`` int64 (local, starts at 0), ``indices`` int32 or int64 (no duplicates within a
    row), ``data`` float32 or float64.
    """

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray


class Labels(NamedTuple):
    r"""Per-example labels ``y`` (float64, or int64 class indices) and weights ``c >= 0`` (float64)."""

    y: np.ndarray
    c: np.ndarray


class Reg(NamedTuple):
    r"""Regularization and scale constants: ``l2``, ``l1``, ``n`` (examples of the whole data
    set, not the block's) and ``bias`` (the constant feature's value, 0 for none)."""

    l2: float
    l1: float
    n: float
    bias: float
