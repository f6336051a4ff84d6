"""Value checkers of the sidecar's configuration (robotctl.agent.config): each takes a value read from
YAML or the environment and returns it coerced, or raises ``InputError("", problem, hint)``; the config
section that calls it fills in the field's name. Kept apart from the sections so that config.py reads as
the list of keys it is."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Any

from robotctl.model import InputError, ThresholdPolicy

Check = Callable[[Any], Any]


# -- value checkers: each returns the coerced value or raises InputError("", problem, hint) -----------
def key_name(key: Any) -> str:
    """A key as a field name: as it is when it reads as one, else quoted (``""``, a control character)."""
    text = str(key)
    if text and text.isprintable() and len(text) <= 40 and text.strip() == text:
        return text
    return json.dumps(text[:40])


def _is_number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float)


#: Largest whole number any key takes (a float holds every integer up to it exactly).
MAX_WHOLE = 2**53


def _int(minimum: int | None = None, maximum: int | None = MAX_WHOLE) -> Check:
    def check(v: Any) -> int:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError("", f"must be a whole number, got {v!r}", "write e.g. 5")
        if minimum is not None and v < minimum:
            raise InputError("", f"must be >= {minimum}, got {v}", f"use a value of at least {minimum}")
        if maximum is not None and v > maximum:
            raise InputError("", f"must be <= {maximum}, got {v}", f"use a value of at most {maximum}")
        return v
    return check


#: Most connections ``server.max_connections`` may ask for (the kernel's default ceiling of descriptors per
#: process, ``fs.nr_open``); more is a typo.
MAX_CONNECTIONS = 1 << 20

#: Largest number any key takes (a billion: thirty years of seconds, a gigabyte per second): larger ones are
#: typos, and a timeout of 1e308 s overflows the event loop's timers.
MAX_NUMBER = 1e9


def _float(*, positive: bool = False, minimum: float = 0.0, maximum: float = MAX_NUMBER) -> Check:
    def check(v: Any) -> float:
        if not _is_number(v):
            raise InputError("", f"must be a number, got {v!r}", "write e.g. 1.5")
        try:
            v = float(v)
        except OverflowError:
            raise InputError("", f"is too large ({len(str(abs(v)))} digits)", f"use at most {maximum:g}") from None
        if not math.isfinite(v):
            raise InputError("", f"must be finite, got {v}", "write a finite number")
        if positive and v <= 0:
            raise InputError("", f"must be > 0, got {v:g}", "use a positive number")
        if v < minimum:
            raise InputError("", f"must be >= {minimum:g}, got {v:g}", f"use a value of at least {minimum:g}")
        if v > maximum:
            raise InputError("", f"must be <= {maximum:g}, got {v:g}", f"use at most {maximum:g}")
        return v
    return check


def _str(v: Any) -> str:
    if not isinstance(v, str) or v == "":
        raise InputError("", f"must be a non-empty string, got {v!r}", "write it as text")
    return v


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise InputError("", f"must be true or false, got {v!r}", "write true or false")
    return v


def _choice(*options: str) -> Check:
    def check(v: Any) -> str:
        if v not in options:
            raise InputError("", f"is {v!r}", f"use one of: {', '.join(options)}")
        return str(v)
    return check


def _optional(inner: Check) -> Check:
    def check(v: Any) -> Any:
        return None if v is None else inner(v)
    return check


def _mapping(v: Any) -> Mapping[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        raise InputError("", f"must be a mapping, got {type(v).__name__}", "write it as key: value lines")
    return dict(v)


def _useful_life(v: Any) -> Mapping[str, Any]:
    """``{deadline: seconds, phases: k}``: a deterministic useful life (model._deadline)."""
    from robotctl.model import DEADLINE_PHASES_DEFAULT as DEFAULT_PHASES  # constants of the law, no solver
    from robotctl.model import DEADLINE_PHASES_MAX as MAX_PHASES

    d = _mapping(v)
    for key in d:
        if key not in ("deadline", "phases"):
            raise InputError(f".{key}", "is not a known key", "write useful_life: {deadline: 10} (phases: 3 optional)")
    if "deadline" not in d:
        raise InputError(".deadline", "is missing", "write useful_life: {deadline: 10}, seconds after delivery")
    out: dict[str, Any] = {}
    for key, check, value in (("deadline", _float(positive=True), d["deadline"]),
                              ("phases", _int(1, MAX_PHASES), d.get("phases", DEFAULT_PHASES))):
        try:
            out[key] = check(value)
        except InputError as exc:
            raise InputError(f".{key}{exc.field}", exc.problem, exc.hint) from None
    return out


def _fit_options(v: Any) -> Mapping[str, Any]:
    """``fit.options`` checked as the fit will take them (an unknown option or a bad value would fail every
    refit, long after the start)."""
    from robotctl.fitting import FitOptions

    d = _mapping(v)
    try:
        FitOptions.from_mapping(d)
    except InputError as exc:
        raise InputError("." + exc.field.removeprefix("options").lstrip("."), exc.problem, exc.hint) from None
    except TypeError as exc:
        raise InputError("", f"cannot be used ({exc})", "see robotctl.fitting.FitOptions") from None
    return d


def _hysteresis(v: Any) -> int | str:
    if v == "auto":
        return "auto"
    try:
        return _int(0)(v)
    except InputError as exc:
        raise InputError("", exc.problem, "write auto, or a number of queue levels, e.g. 2 (0: off)") from None


def _dwell(v: Any) -> float | str:
    if v == "auto":
        return "auto"
    try:
        return _float()(v)
    except InputError as exc:
        raise InputError("", exc.problem, "write auto, or seconds, e.g. 0.5 (0: off)") from None


def _robot_ids(v: Any) -> tuple[tuple[str, ...], ...]:
    """``[a, b, [c1, c2]]``: one entry per virtual robot, rank order; a list groups real robots."""
    if v is None:
        return ()
    if isinstance(v, str):
        v = [x.strip() for x in v.split(",") if x.strip()]
    if not isinstance(v, Sequence):
        raise InputError("", f"must be a list of robot ids, got {type(v).__name__}",
                         "write e.g. [r1, r2, [r3a, r3b]]")
    out: list[tuple[str, ...]] = []
    seen: set[str] = set()
    for n, entry in enumerate(v):
        group = [entry] if not isinstance(entry, list | tuple) else list(entry)
        if not group:
            raise InputError(f"[{n}]", "is an empty group", "a group lists at least one robot id")
        ids = []
        for rid in group:
            if isinstance(rid, bool) or not isinstance(rid, str | int) or str(rid) == "":
                raise InputError(f"[{n}]", f"holds {rid!r}, not a robot id", "robot ids are strings")
            if str(rid) in seen:
                raise InputError(f"[{n}]", f"repeats robot id {str(rid)!r}", "list each robot once")
            seen.add(str(rid))
            ids.append(str(rid))
        out.append(tuple(ids))
    return tuple(out)


def _startup(v: Any) -> str | int | tuple[int, ...]:
    if v == "all":
        return "all"
    if isinstance(v, str):
        try:
            return ThresholdPolicy.parse(v).robots_at_level
        except InputError as exc:
            raise InputError("", f"is {v!r}", "write all, a number of robots, or a list r(0..K)") from exc
    if isinstance(v, int) and not isinstance(v, bool):
        if v < 0:
            raise InputError("", f"must be >= 0 robots, got {v}",
                             "write all, a number of robots, or a list r(0..K)")
        return v
    if isinstance(v, Sequence):
        try:
            return ThresholdPolicy(tuple(v)).robots_at_level
        except InputError as exc:
            raise InputError(exc.field.replace("policy", ""), exc.problem, exc.hint) from exc
    raise InputError("", f"is {v!r}", "write all, a number of robots, or a list r(0..K)")


def _modes(v: Any) -> tuple[int, ...] | None:
    if v is None:
        return None
    if isinstance(v, str):
        v = [x for x in v.replace(" ", "").split(",") if x]
        try:
            v = [int(x) for x in v]
        except ValueError as exc:
            raise InputError("", "must list whole numbers of robots", "write e.g. [3, 1]") from exc
    if not isinstance(v, Sequence) or not v:
        raise InputError("", f"must be a non-empty list of modes, got {v!r}", "write e.g. [3, 1]")
    out = sorted({_int(0)(x) for x in v}, reverse=True)
    return tuple(out)


def _spec(default: Any, check: Check, doc: str) -> Any:
    """A config field: its default, its checker and one line of documentation."""
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata={"check": check, "doc": doc})
    return field(default=default, metadata={"check": check, "doc": doc})


def _required(check: Check, doc: str) -> Any:
    return field(metadata={"check": check, "doc": doc, "required": True})


__all__ = ["MAX_CONNECTIONS", "MAX_NUMBER", "MAX_WHOLE", "Check", "key_name"]
