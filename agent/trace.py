"""Trace files (DESIGN.md): JSON Lines, one event per line, or CSV with the same columns.

``{"t": seconds, "event": "delivery"|"completion"|"obsolete"|"loss"|"park"|"resume", "robot": id,
"pages": n, "bytes": n, "service_s": x}``; ``t`` is required, the rest where it applies (see
:data:`EVENT_KINDS` for the agent's own kinds). Fields beyond
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

from robotctl import InputError

#: Event kinds; the agent's own log also holds ``queue`` (a checkpoint of the queue length that opens each
#: file), ``refit`` (a fit window cut, with its ``reason``) and ``policy`` (a policy put in force, with its
#: ``robots_at_level``, ``version`` and ``source``), which other tools read past.
EVENT_KINDS = ("delivery", "completion", "obsolete", "loss", "park", "resume", "queue", "refit", "policy")
_KNOWN = ("t", "event", "robot", "pages", "bytes", "service_s")
_KIND_CODES = {k: i for i, k in enumerate(EVENT_KINDS)}


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
        """One JSON object, byte for byte what ``json.dumps(..., separators=(",", ":"))`` writes for
        the same fields (floats by their shortest repr), built directly: the simulator and the
        delivery log write millions of these."""
        parts = ['{"t":', _number_text(self.t), ',"event":', _encode(self.event)]
        if self.robot is not None:
            parts += [',"robot":', _encode(self.robot)]
        if self.pages != 1 or self.event in ("delivery", "obsolete", "loss"):
            parts += [',"pages":', _number_text(self.pages)]
        if self.bytes is not None:
            parts += [',"bytes":', _number_text(self.bytes)]
        if self.service_s is not None:
            parts += [',"service_s":', _number_text(self.service_s)]
        for key, value in self.extra.items():
            parts += [",", _encode(key), ":", _encode(value)]
        parts.append("}")
        return "".join(parts)


_encode = json.JSONEncoder(separators=(",", ":")).encode


def _number_text(x: float | int) -> str:
    """JSON text of a finite number (what json.dumps writes: int(x) or float.__repr__)."""
    if type(x) is int:
        return str(x)
    if type(x) is float and math.isfinite(x):
        return float.__repr__(x)
    return _encode(x)


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


def open_trace(name: str) -> IO[str]:
    """The text stream of a trace file, or standard input for ``-``; InputError naming the file."""
    if name == "-":
        import sys

        return sys.stdin
    try:
        return open(name, encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError(name, "no such file", "check the path") from exc
    except OSError as exc:
        raise InputError(name, f"cannot be read ({exc.strerror})", "check the path and permissions") from exc


def iter_trace(path: str | Path, stream: IO[str] | None = None) -> Iterator[TraceEvent]:
    """Events of a trace file, JSON Lines or CSV (by the ``.csv`` suffix or a first line that is not
    JSON). ``-`` reads standard input."""
    name = str(path)
    if stream is None:
        stream = open_trace(name)
    with stream:
        first = stream.readline()
        rest = io.StringIO(first + stream.read()) if not stream.seekable() else None
        if rest is None:
            stream.seek(0)
        src: IO[str] = rest if rest is not None else stream
        yield from (_iter_csv(src, name) if _looks_like_csv(name, first) else _iter_jsonl(src, name))


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


# -- a fast, array-based reader (for `robotctl fit` on traces of millions of lines) -----------------

@dataclass(frozen=True, eq=False)
class TraceArrays:
    """A whole trace as columns, in file order, validated as :func:`parse_event` would.

    Attributes
    ----------
    name : str
        The file name (``-`` for standard input), for messages.
    t : ndarray of float
        Event times (s).
    event : ndarray of int
        Index of each event's kind in :data:`EVENT_KINDS`.
    pages : ndarray of int
        Pages (1 where absent).
    bytes, service_s : ndarray of float
        NaN where absent.
    extra : dict of str to ndarray of float
        The requested extra fields (NaN where absent).
    line : ndarray of int
        Line number of each event in the file.
    """

    name: str
    t: Any
    event: Any
    pages: Any
    bytes: Any
    service_s: Any
    extra: Mapping[str, Any]
    line: Any

    @property
    def n(self) -> int:
        return int(self.t.size)

    def kind(self, name: str) -> Any:
        """Boolean mask of the events of one kind."""
        return self.event == EVENT_KINDS.index(name)


def _raise_at(name: str, line: int, raw: Mapping[str, Any], what: str) -> None:
    """Re-validate one event with :func:`parse_event` so that the error is worded the same way."""
    where = f"{name}:{line}"
    parse_event(raw, where=where)
    raise InputError(where, what, "fix this line")


def _looks_like_csv(name: str, first_line: str) -> bool:
    """CSV by the ``.csv`` suffix or a first line that is neither JSON nor a comment."""
    return name.endswith(".csv") or (first_line.strip() != "" and not first_line.lstrip().startswith(("{", "#")))


class _Columns:
    """The raw values of each field, in file order, with each row's line number: what the two parsers
    fill and the typed columns are made from."""

    def __init__(self, name: str, extras: tuple[str, ...]) -> None:
        self.name = name
        self.extras = extras
        self.keys = ("t", "pages", "bytes", "service_s", *extras)
        self.values: dict[str, list[Any]] = {k: [] for k in ("event", *self.keys)}
        self.lines: list[int] = []

    def raw_at(self, i: int) -> dict[str, Any]:
        """Row ``i`` as an event mapping, for :func:`_raise_at`."""
        d: dict[str, Any] = {"event": EVENT_KINDS[int(self.values["event"][i])]}
        for k in self.keys:
            if self.values[k][i] is not None:
                d[k] = self.values[k][i]
        return d

    def numbers(self, key: str, *, integer: bool, minimum: float, required: bool = False) -> Any:
        """The field as floats (NaN where absent), or the error :func:`parse_event` gives for the first
        bad row."""
        import numpy as np

        vals = self.values[key]
        bad = -1
        a: Any = None
        if bool not in set(map(type, vals)):
            try:
                a = np.array(vals, dtype=float)  # None -> nan; numeric strings are parsed
            except (TypeError, ValueError):
                a = None
        if a is None:  # a bool or a string that is not a number somewhere: find it
            bad = next(i for i, v in enumerate(vals) if not _is_number(v))
        else:
            nan = np.isnan(a)
            missing = vals.count(None)
            flags = np.zeros(a.size, dtype=bool)
            if int(nan.sum()) != (0 if required else missing):
                absent = np.fromiter((v is None for v in vals), dtype=bool, count=len(vals))
                flags |= nan if required else nan & ~absent
            with np.errstate(invalid="ignore"):
                flags |= np.isinf(a) | (a < minimum)
                if integer:
                    flags |= np.isfinite(a) & (a != np.round(a))
            hits = np.flatnonzero(flags)
            if hits.size:
                bad = int(hits[0])
        if bad >= 0:
            _raise_at(self.name, self.lines[bad], self.raw_at(bad), f"bad {key}")
        return a

    def delivery_pages(self) -> Any:
        """Pages as whole numbers (1 where absent); a delivery brings at least one."""
        import numpy as np

        pages_f = self.numbers("pages", integer=True, minimum=0.0)
        pages = np.where(np.isnan(pages_f), 1, pages_f).astype(np.int64)
        delivery = np.asarray(self.values["event"], dtype=np.int64) == EVENT_KINDS.index("delivery")
        zero = np.flatnonzero(delivery & (pages < 1))
        if zero.size:
            i = int(zero[0])
            raise InputError(f"{self.name}:{self.lines[i]}.pages", f"is {int(pages[i])}",
                             "a delivery brings at least one page")
        return pages

    def extra(self, key: str) -> Any:
        """An extra field as floats (NaN where absent)."""
        import numpy as np

        vals = self.values[key]
        try:
            return np.array(vals, dtype=float)
        except (TypeError, ValueError):
            bad = next(i for i, v in enumerate(vals) if not _is_number(v))
            raise InputError(f"{self.name}:{self.lines[bad]}.{key}", f"is {vals[bad]!r}, not a number",
                             f"write {key} as a number") from None


def _parse_csv(text: str, cols: _Columns) -> None:
    name, keys, kinds = cols.name, cols.keys, _KIND_CODES
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or "t" not in header:
        raise InputError(f"{name}:1", "has no column t", "the first CSV line names the columns, t among them")
    pos = {k: header.index(k) for k in (*keys, "event") if k in header}
    width = len(header)
    values, lines = cols.values, cols.lines
    for n, row in enumerate(reader, start=2):
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != width:
            raise InputError(f"{name}:{n}", f"has {len(row)} fields but the header names {width}",
                             "give every row one value per column")
        ev = row[pos["event"]].strip() if "event" in pos else ""
        ev = ev or "delivery"
        code = kinds.get(ev)
        if code is None:
            _raise_at(name, n, dict(zip(header, row, strict=True)), "unknown event")
        values["event"].append(code)
        for k in keys:
            j = pos.get(k)
            v = row[j].strip() if j is not None else ""
            values[k].append(v if v != "" else None)
        lines.append(n)


def _parse_jsonl(text: str, cols: _Columns) -> None:
    name, keys, kinds = cols.name, cols.keys, _KIND_CODES
    values, lines = cols.values, cols.lines
    loads = json.loads
    for n, raw_line in enumerate(text.splitlines(), start=1):
        s = raw_line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            obj = loads(s)
        except json.JSONDecodeError as exc:
            raise InputError(f"{name}:{n}", f"is not valid JSON ({exc.msg})",
                             "write one JSON object per line") from exc
        if not isinstance(obj, dict):
            _raise_at(name, n, obj, "not an object")
        ev = obj.get("event", "delivery") or "delivery"
        code = kinds.get(ev) if isinstance(ev, str) else None
        if code is None:
            _raise_at(name, n, obj, "unknown event")
        values["event"].append(code)
        for k in keys:
            values[k].append(obj.get(k))
        lines.append(n)


def read_trace_arrays(path: str | Path, *, extra_fields: Iterable[str] = (),
                      stream: IO[str] | None = None) -> TraceArrays:
    """Read a trace (JSON Lines or CSV, as :func:`iter_trace`) into columns, several times faster than
    building one :class:`TraceEvent` per line. Raises the same :class:`InputError` for a bad line, naming
    the file, the line and the field; an empty trace is an error.
    """
    import numpy as np

    name = str(path)
    if stream is None:
        stream = open_trace(name)
    with stream:
        text = stream.read()
    cols = _Columns(name, tuple(extra_fields))
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    (_parse_csv if _looks_like_csv(name, first) else _parse_jsonl)(text, cols)
    if not cols.lines:
        raise InputError(name, "holds no events", "a trace needs at least one line with t and event")
    t = cols.numbers("t", integer=False, minimum=-math.inf, required=True)
    pages = cols.delivery_pages()
    size = cols.numbers("bytes", integer=True, minimum=0.0)
    svc = cols.numbers("service_s", integer=False, minimum=0.0)
    extra = {k: cols.extra(k) for k in cols.extras}
    return TraceArrays(name, t, np.asarray(cols.values["event"], dtype=np.int64), pages, size, svc, extra,
                       np.asarray(cols.lines, dtype=np.int64))


def _is_number(v: Any) -> bool:
    if v is None:
        return True
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return not isinstance(v, bool)
