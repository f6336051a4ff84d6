"""Trace files (DESIGN.md): JSON Lines, one event per line, or CSV with the same columns.

``{"t": seconds, "event": "delivery"|"completion"|"obsolete"|"loss"|"park"|"resume", "robot": id,
"pages": n, "bytes": n, "service_s": x}``; ``t`` is required, the rest where it applies. Fields beyond
these (e.g. ``active``, the number of active robots, written by the simulator and the agent) are kept
in ``TraceEvent.extra`` so that ``robotctl fit --mode-field active`` can use them.

Every error names the file, the line and the field.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from model import InputError

EVENT_KINDS = ("delivery", "completion", "obsolete", "loss", "park", "resume", "queue")
_KNOWN = ("t", "event", "robot", "pages", "bytes", "service_s")


@dataclass(frozen=True)
class TraceEvent:
    """One line of a trace."""

    t: float
    event: str
    robot: str | None = None
    pages: int = 1
    bytes: int | None = None
    service_s: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        d: dict[str, Any] = {"t": self.t, "event": self.event}
        if self.robot is not None:
            d["robot"] = self.robot
        if self.pages != 1 or self.event in ("delivery", "obsolete", "loss"):
            d["pages"] = self.pages
        if self.bytes is not None:
            d["bytes"] = self.bytes
        if self.service_s is not None:
            d["service_s"] = self.service_s
        d.update(self.extra)
        return json.dumps(d, separators=(",", ":"))


def _number(where: str, name: str, value: Any, *, integer: bool = False, minimum: float = 0.0) -> Any:
    if isinstance(value, str):
        value = value.strip()
        if value == "":
            return None
        try:
            value = float(value)
        except ValueError as exc:
            raise InputError(f"{where}.{name}", f"is {value!r}, not a number", f"write {name} as a number") from exc
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{where}.{name}", f"is {value!r}, not a number", f"write {name} as a number")
    if not math.isfinite(value):
        raise InputError(f"{where}.{name}", f"is {value}, not finite", f"{name} must be a finite number")
    if value < minimum:
        raise InputError(f"{where}.{name}", f"is {value}, below {minimum:g}", f"{name} must be >= {minimum:g}")
    if integer:
        if value != int(value):
            raise InputError(f"{where}.{name}", f"is {value}, not a whole number", f"{name} counts items")
        return int(value)
    return float(value)


def parse_event(obj: Mapping[str, Any], *, where: str = "event") -> TraceEvent:
    """Validate one event mapping (from JSON, CSV or an HTTP body)."""
    if not isinstance(obj, Mapping):
        raise InputError(where, f"is {type(obj).__name__}, not an object", 'write {"t": ..., "event": ...}')
    if "t" not in obj or obj["t"] in (None, ""):
        raise InputError(f"{where}.t", "is missing", "every event needs its time t in seconds")
    t = _number(where, "t", obj["t"], minimum=-math.inf)
    kind = obj.get("event", "delivery") or "delivery"
    if kind not in EVENT_KINDS:
        raise InputError(f"{where}.event", f"is {kind!r}", f"use one of {', '.join(EVENT_KINDS)}")
    robot = obj.get("robot")
    robot = None if robot in (None, "") else str(robot)
    pages_raw = obj.get("pages")
    pages = 1 if pages_raw in (None, "") else _number(where, "pages", pages_raw, integer=True)
    if kind == "delivery" and pages < 1:
        raise InputError(f"{where}.pages", f"is {pages}", "a delivery brings at least one page")
    size = obj.get("bytes")
    size = None if size in (None, "") else _number(where, "bytes", size, integer=True)
    svc = obj.get("service_s")
    svc = None if svc in (None, "") else _number(where, "service_s", svc)
    extra = {k: v for k, v in obj.items() if k not in _KNOWN and v not in (None, "")}
    return TraceEvent(t, kind, robot, pages, size, svc, extra)


def _iter_jsonl(stream: IO[str], name: str) -> Iterator[TraceEvent]:
    for n, line in enumerate(stream, start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{name}:{n}", f"is not valid JSON ({exc.msg})", "write one JSON object per line") from exc
        yield parse_event(obj, where=f"{name}:{n}")


def _iter_csv(stream: IO[str], name: str) -> Iterator[TraceEvent]:
    reader = csv.DictReader(stream)
    if reader.fieldnames is None or "t" not in reader.fieldnames:
        raise InputError(f"{name}:1", "has no column t", "the first CSV line names the columns, t among them")
    for n, row in enumerate(reader, start=2):
        yield parse_event(row, where=f"{name}:{n}")


def iter_trace(path: str | Path, stream: IO[str] | None = None) -> Iterator[TraceEvent]:
    """Events of a trace file, JSON Lines or CSV (by the ``.csv`` suffix or a first line that is not
    JSON). ``-`` reads standard input."""
    name = str(path)
    if stream is None:
        if name == "-":
            import sys

            stream = sys.stdin
        else:
            try:
                stream = open(name, encoding="utf-8")  # noqa: SIM115 - closed below
            except FileNotFoundError as exc:
                raise InputError(name, "no such file", "check the path") from exc
    with stream:
        first = stream.readline()
        rest = io.StringIO(first + stream.read()) if not stream.seekable() else None
        if rest is None:
            stream.seek(0)
        src: IO[str] = rest if rest is not None else stream
        is_csv = name.endswith(".csv") or (first.strip() != "" and not first.lstrip().startswith(("{", "#")))
        yield from (_iter_csv(src, name) if is_csv else _iter_jsonl(src, name))


def read_trace(path: str | Path) -> list[TraceEvent]:
    events = list(iter_trace(path))
    if not events:
        raise InputError(str(path), "holds no events", "a trace needs at least one line with t and event")
    return events


def write_trace(path: str | Path, events: Iterable[TraceEvent]) -> int:
    """Write events as JSON Lines; returns how many."""
    n = 0
    with open(path, "w", encoding="utf-8") as out:
        for ev in events:
            out.write(ev.to_json() + "\n")
            n += 1
    return n
