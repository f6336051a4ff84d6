"""One named checker per invariant of fitting's inputs.

Each checker names the field it reports, coerces into a fresh array (the caller's array is never
changed) and raises :class:`model.InputError` with the offending index and value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl import InputError

#: The range of mean times (s) whose laws' moments, up to the third, stay within floating point: outside it
#: their squares and cubes underflow to 0 or overflow (a mean of 8e-283 s made a c^2 a division by zero).
MIN_MEAN_S = 1e-90
MAX_MEAN_S = 1e90


def time_scale(field: str, mean_s: float) -> None:
    """Refuse a mean time outside :data:`MIN_MEAN_S`..:data:`MAX_MEAN_S` (finite but absurd)."""
    if not MIN_MEAN_S <= mean_s <= MAX_MEAN_S:
        raise InputError(field, f"average {mean_s:.3g} s, outside the {MIN_MEAN_S:g}..{MAX_MEAN_S:g} s a law's "
                         "moments can be computed in", "give times in seconds")


def positive_number(field: str, value: Any, *, allow_zero: bool = False) -> float:
    """A finite number > 0 (or >= 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InputError(field, f"must be a number, got {value!r}", "give a finite number")
    x = float(value)
    if not math.isfinite(x) or x < 0 or (x == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InputError(field, f"must be a finite number {bound}, got {value!r}", f"give a finite number {bound}")
    return x


def float_array(field: str, value: Any, *, min_size: int = 0, nonnegative: bool = False) -> NDArray[np.float64]:
    """A 1-D array of finite floats (a copy), optionally nonnegative, with at least ``min_size`` entries."""
    try:
        a = np.array(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InputError(field, f"is not a list of numbers ({exc})", "give a 1-D array of numbers") from exc
    if a.ndim != 1:
        raise InputError(field, f"must be one-dimensional, got shape {a.shape}", "give a 1-D array of numbers")
    if a.size < min_size:
        raise InputError(field, f"has {a.size} value(s), needs at least {min_size}", "give more samples")
    bad = ~np.isfinite(a)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(field, f"entry {i} is {a[i]}, not finite ({int(bad.sum())} such entries)",
                         "drop or repair NaN/inf values")
    if nonnegative and a.size and a.min() < 0:
        i = int(np.argmin(a))
        raise InputError(field, f"entry {i} is negative ({a[i]:g})", "these values must be >= 0")
    return a


def count_array(field: str, value: Any, size: int, *, minimum: int) -> NDArray[np.int64]:
    """A 1-D array of whole numbers >= ``minimum`` with exactly ``size`` entries (a copy)."""
    a = float_array(field, value)
    if a.size != size:
        raise InputError(field, f"has {a.size} entries but delivery_times has {size}",
                         "give one value per delivery")
    frac = a != np.round(a)
    if frac.any():
        i = int(np.flatnonzero(frac)[0])
        raise InputError(field, f"entry {i} is {a[i]:g}, not a whole number", "these values count items")
    if a.size and a.min() < minimum:
        i = int(np.argmin(a))
        raise InputError(field, f"entry {i} is {a[i]:g}, below {minimum}", f"every value must be >= {minimum}")
    return a.astype(np.int64)


def freeze(*arrays: NDArray[Any]) -> None:
    """Make arrays held by a frozen dataclass read-only."""
    for a in arrays:
        a.flags.writeable = False
