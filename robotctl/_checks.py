"""Number checks shared by every layer: each raises :class:`~robotctl.InputError` naming the field, what
it got and the fix, so a bad number anywhere reads the same. Call sites pass their own field name and
fix (``hint``); the wording of the middle part is fixed here."""

from __future__ import annotations

import math

import numpy as np

from robotctl._errors import InputError


def whole(field: str, value: object, minimum: int, hint: str | None = None) -> int:
    """``value`` as an int when it is an integer (Python or numpy, never a bool) of at least ``minimum``.
    The fix defaults to "give <field> as an integer of at least <minimum>"."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise InputError(field, f"must be a whole number >= {minimum}, got {value!r}",
                         hint if hint is not None else f"give {field} as an integer of at least {minimum}")
    return int(value)


def positive(field: str, value: object, hint: str, *, what: str = "number") -> float:
    """``value`` as a float when it is a finite number > 0 (never a bool); ``what`` names the kind of
    number in the message ("must be a positive finite <what>")."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not (math.isfinite(value) and value > 0):
        raise InputError(field, f"must be a positive finite {what}, got {value!r}", hint)
    return float(value)


def seconds(field: str, value: object, *, positive: bool, hint: str) -> float:
    """``value`` as a float when it is a finite number of seconds, > 0 (``positive``) or >= 0."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and (
        value > 0 if positive else value >= 0)
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise InputError(field, f"must be a finite number of seconds {bound}, got {value!r}", hint)
    return float(value)  # type: ignore[arg-type]


__all__ = ["positive", "seconds", "whole"]
