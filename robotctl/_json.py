"""JSON as RFC 8259 has it, for every ``--json`` output, the HTTP API and the result objects' ``to_dict``:
a number that is not finite (NaN, an infinite cost of a policy that loses everything) is written ``null``,
never the ``NaN``/``Infinity`` that Python's json module writes and other parsers refuse. Standard
library only, so that any layer may use it."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(x: Any) -> Any:
    """``x``, or None for a float that is not finite."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float, at any depth of dicts, lists and tuples, replaced by None; numpy
    arrays and scalars become Python lists and numbers, mapping keys strings."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "shape") and callable(getattr(obj, "tolist", None)):  # a numpy array or scalar
        return json_safe(obj.tolist())
    return obj


def json_text(obj: Any, *, indent: int | None = None, compact: bool = False) -> str:
    """``obj`` as JSON text (see the module docstring); ``compact`` drops the spaces after separators."""
    separators = (",", ":") if compact else None
    try:
        return json.dumps(obj, indent=indent, separators=separators, allow_nan=False)
    except (ValueError, TypeError):  # a non-finite number, or a numpy value: cleaned, then written
        return json.dumps(json_safe(obj), indent=indent, separators=separators, allow_nan=False)
