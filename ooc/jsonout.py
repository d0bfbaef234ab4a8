"""Strict JSON: the one rule for non-finite numbers in everything ooc prints or writes as JSON.

JSON has no NaN or Infinity; Python's ``json`` writes them anyway (``NaN``, ``Infinity``), which
strict parsers (``jq``, JavaScript, Go) refuse. Every ``--json`` line and every ``.json``/``.jsonl``
file ooc writes goes through :func:`dumps`: a float that is not finite becomes ``null`` (a value
that does not exist, as a metric undefined for one class is), NumPy scalars and arrays become
plain numbers and lists, and ``allow_nan=False`` makes any value that slipped past an error.
"""

from __future__ import annotations

import json
import math


def finite(obj):
    """``obj`` with every non-finite float replaced by None, NumPy values made plain (recursively)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    tolist = getattr(obj, "tolist", None)  # NumPy scalars and arrays, without importing NumPy
    if tolist is not None and type(obj).__module__ == "numpy":
        return finite(tolist())
    return obj


def dumps(obj, **kwargs) -> str:
    """``json.dumps`` of :func:`finite` ``(obj)``, strict (``allow_nan=False``); other keywords as ``json.dumps``'s."""
    return json.dumps(finite(obj), allow_nan=False, **kwargs)
