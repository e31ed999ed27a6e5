"""Strict JSON for every file the project writes: NaN and ±inf become ``null`` (``allow_nan=False``;
strict JSON has no NaN), with a record of where they were so that a reader can put them back."""

from __future__ import annotations

import json
import logging

import numpy as np

__all__ = ["to_json", "dumps_json", "restore_nonfinite"]

log = logging.getLogger(__name__)


def to_json(obj, nonfinite: dict | None = None, _where: str = ""):
    """``obj`` with numpy arrays and scalars as Python lists and numbers, tuples as lists, and
    NaN/±inf as ``None`` (strict JSON has no NaN); ``nonfinite`` (optional dict) collects the
    JSON pointer of every replaced number -> ``"nan"``, ``"inf"`` or ``"-inf"``."""
    if isinstance(obj, np.ndarray):
        obj = obj.tolist()
    elif isinstance(obj, (np.floating, np.integer, np.bool_)):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        if nonfinite is not None:
            nonfinite[_where] = "nan" if np.isnan(obj) else ("inf" if obj > 0 else "-inf")
        return None
    if isinstance(obj, dict):
        return {str(k): to_json(v, nonfinite, f"{_where}/{_pointer(k)}") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v, nonfinite, f"{_where}/{i}") for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _pointer(key) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")    # RFC 6901


def dumps_json(obj, nonfinite: dict | None = None) -> str:
    """Strict JSON (``allow_nan=False``) of ``obj`` after :func:`to_json`, indented, ending in a newline."""
    return json.dumps(to_json(obj, nonfinite), indent=2, allow_nan=False) + "\n"


def restore_nonfinite(doc, nonfinite: dict):
    """Put back the NaN/±inf that :func:`to_json` replaced by ``None`` (``nonfinite``: pointer -> value)."""
    for where, value in nonfinite.items():
        node = doc
        try:
            *parents, last = [k.replace("~1", "/").replace("~0", "~") for k in where.split("/")[1:]]
            for k in parents:
                node = node[int(k)] if isinstance(node, list) else node[k]
            if isinstance(node, list):
                node[int(last)] = float(value)
            else:
                node[last] = float(value)
        except (KeyError, IndexError, ValueError, TypeError):
            log.debug("nonfinite %s: no such entry", where)
    return doc
