"""Trace files (docs/ARCHITECTURE.md, "Trace file"): JSON Lines, one event per line, or CSV with the same columns.

``{"t": seconds, "event": "delivery"|"completion"|"obsolete"|"loss"|"park"|"resume"|"given_up", "robot": id,
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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, sub
from pathlib import Path
from typing import IO, Any, Protocol

from robotctl import InputError

#: Event kinds; the agent's own log also holds ``queue`` (a checkpoint of the queue length that opens each
#: file), ``refit`` (a fit window cut, with its ``reason``) and ``policy`` (a policy put in force, with its
#: ``robots_at_level``, ``version`` and ``source``), which other tools read past; ``given_up`` is pages the
#: crawler wanted and gave up on (never fetched: a server refused them past its retries), which the agent
#: counts in its observed cost J like pages lost.
EVENT_KINDS = ("delivery", "completion", "obsolete", "loss", "park", "resume", "queue", "refit", "policy",
               "given_up")
_KNOWN = ("t", "event", "robot", "pages", "bytes", "service_s")
_KIND_CODES = {k: i for i, k in enumerate(EVENT_KINDS)}
#: Fields of the agent's ``refit`` and ``policy`` lines kept (per row) in :attr:`TraceArrays.notes`.
NOTE_FIELDS = ("reason", "robots_at_level", "version", "source")
_NOTE_KINDS = frozenset((EVENT_KINDS.index("refit"), EVENT_KINDS.index("policy")))


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
        if self.pages != 1 or self.event in ("delivery", "obsolete", "loss", "given_up"):
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


def _shown(value: Any) -> str:
    """A value for an error message, cut short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


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
        raise InputError(f"{where}.{name}", f"is {_shown(value)}, not a number", f"write {name} as a number")
    if isinstance(value, int) and abs(value) > 2**1023:  # a float cannot hold it (math.isfinite would raise)
        raise InputError(f"{where}.{name}", f"is too large ({len(str(abs(value)))} digits)",
                         f"{name} must be a finite number")
    if not math.isfinite(value):
        raise InputError(f"{where}.{name}", f"is {value}, not finite", f"{name} must be a finite number")
    if value < minimum:
        raise InputError(f"{where}.{name}", f"is {value}, below {minimum:g}", f"{name} must be >= {minimum:g}")
    if integer:
        if abs(value) > 2**62:
            raise InputError(f"{where}.{name}", f"is {value:g}, more than any count", f"{name} counts items")
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
        except ValueError as exc:  # JSONDecodeError, or an integer past Python's 4,300 digits
            raise InputError(f"{name}:{n}", f"is not valid JSON ({_json_problem(exc)})",
                             "write one JSON object per line") from exc
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
        # bytes that are not UTF-8 become lone surrogates: the line holding them then fails to parse, and
        # the error names the file and the line instead of a UnicodeDecodeError escaping
        return open(name, encoding="utf-8", errors="surrogateescape")
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
    notes : dict of int to dict
        For the agent's ``refit`` and ``policy`` lines (by row): their :data:`NOTE_FIELDS` that are present.
    """

    name: str
    t: Any
    event: Any
    pages: Any
    bytes: Any
    service_s: Any
    extra: Mapping[str, Any]
    line: Any
    notes: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)

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
        self.notes: dict[int, dict[str, Any]] = {}

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
            except (TypeError, ValueError, OverflowError):  # OverflowError: an integer of hundreds of digits
                a = None
            if a is not None and a.shape != (len(vals),):  # lists among the values ("pages": [1])
                a = None
        if a is None:  # a bool, a list, a string that is not a number, an integer past any float: find it
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
                if integer:  # whole, and within what an int64 column holds
                    flags |= np.isfinite(a) & ((a != np.round(a)) | (np.abs(a) > 2.0**62))
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


def _json_problem(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg
    if "digits" in str(exc):
        return "a number with more than 4,300 digits"
    return " ".join(str(exc).split())[:120]


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
        except ValueError as exc:  # JSONDecodeError, or an integer past Python's 4,300 digits
            raise InputError(f"{name}:{n}", f"is not valid JSON ({_json_problem(exc)})",
                             "write one JSON object per line") from exc
        if not isinstance(obj, dict):
            _raise_at(name, n, obj, "not an object")
        ev = obj.get("event", "delivery") or "delivery"
        code = kinds.get(ev) if isinstance(ev, str) else None
        if code is None:
            _raise_at(name, n, obj, "unknown event")
        if code in _NOTE_KINDS:
            cols.notes[len(lines)] = {k: obj[k] for k in NOTE_FIELDS if obj.get(k) is not None}
        values["event"].append(code)
        for k in keys:
            values[k].append(obj.get(k))
        lines.append(n)


def read_trace_arrays(path: str | Path, *, extra_fields: Iterable[str] = (),
                      stream: IO[str] | None = None, data: bytes | None = None) -> TraceArrays:
    """Read a trace (JSON Lines or CSV, as :func:`iter_trace`) into columns, several times faster than
    building one :class:`TraceEvent` per line. Raises the same :class:`InputError` for a bad line, naming
    the file, the line and the field; an empty trace is an error.

    JSON Lines are decoded by msgspec in one call, typed and checked in C (:func:`_fast_jsonl`, 10x the
    standard library's json line by line); a file that this path cannot take as it is (comments, blank
    lines, a value of an unexpected type, a bad line) is read again by the line-by-line parser, which gives
    the same columns or the error naming the line. ``data`` hands over the file's bytes already read (and
    decompressed).
    """

    name = str(path)
    extras = tuple(extra_fields)
    if data is None:
        if stream is None:
            data = read_trace_bytes(name)
        else:
            with stream:
                text = stream.read()
            data = text.encode("utf-8")
    first = next((ln for ln in data[:65536].splitlines() if ln.strip()), b"")
    is_csv = _looks_like_csv(name, first.decode("utf-8", "replace"))
    if not is_csv:
        fast = _fast_jsonl(data, name, extras)
        if fast is not None:
            return fast
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise InputError(f"{name}:{line}", "is not UTF-8 text", "write the trace as UTF-8") from exc
    return _slow_arrays(text, name, extras, is_csv)


def _slow_arrays(text: str, name: str, extras: tuple[str, ...], is_csv: bool) -> TraceArrays:
    """The line-by-line reader (the standard library's csv or json), for any file the fast path declines."""
    import numpy as np

    cols = _Columns(name, extras)
    (_parse_csv if is_csv else _parse_jsonl)(text, cols)
    if not cols.lines:
        raise InputError(name, "holds no events", "a trace needs at least one line with t and event")
    t = cols.numbers("t", integer=False, minimum=-math.inf, required=True)
    pages = cols.delivery_pages()
    size = cols.numbers("bytes", integer=True, minimum=0.0)
    svc = cols.numbers("service_s", integer=False, minimum=0.0)
    extra = {k: cols.extra(k) for k in cols.extras}
    return TraceArrays(name, t, np.asarray(cols.values["event"], dtype=np.int64), pages, size, svc, extra,
                       np.asarray(cols.lines, dtype=np.int64), cols.notes)


def read_trace_bytes(name: str) -> bytes:
    """The bytes of a trace file (``-``: standard input), gunzipped when they are gzip's; InputError naming
    the file."""
    if name == "-":
        import sys

        data = sys.stdin.buffer.read()
    else:
        try:
            with open(name, "rb") as fh:
                data = fh.read()
        except FileNotFoundError as exc:
            raise InputError(name, "no such file", "check the path") from exc
        except OSError as exc:
            raise InputError(name, f"cannot be read ({exc.strerror})", "check the path and permissions") from exc
    if data[:2] == b"\x1f\x8b":
        data = gunzip_bounded(data, name)
    return data


#: A gzip file may expand to this many times its size (plus :data:`GZIP_ALLOWANCE`): a real trace compresses
#: 5-20x, a file of blanks or repeats 1000x (a gzip bomb: 51 KB of gzip held 50 MiB of newlines, 8 s and 594 MB
#: to read).
GZIP_MAX_RATIO = 200
GZIP_ALLOWANCE = 16 << 20


def gunzip_bounded(data: bytes, name: str) -> bytes:
    """``data`` gunzipped (every member), refused with an :class:`InputError` as soon as the output passes
    :data:`GZIP_MAX_RATIO` times the input plus :data:`GZIP_ALLOWANCE`: the work stops there, not after."""
    import zlib

    limit = GZIP_MAX_RATIO * len(data) + GZIP_ALLOWANCE
    out: list[bytes] = []
    size = 0
    rest = data
    try:
        while rest:
            d = zlib.decompressobj(wbits=31)
            chunk = rest
            while not d.eof:
                piece = d.decompress(chunk, 1 << 20)
                if not piece and not chunk:
                    break  # nothing in, nothing out: the member is cut short
                size += len(piece)
                if size > limit:
                    raise InputError(name, f"expands past {limit >> 20} MiB ({GZIP_MAX_RATIO}x its "
                                     f"{len(data)} bytes): a file of blanks or a gzip bomb, not a trace",
                                     "give the trace itself (gunzip it and check it)")
                out.append(piece)
                chunk = d.unconsumed_tail
            if not d.eof:  # (no flush() past the end: it would count the unconsumed tail twice)
                raise EOFError("the file ends inside the compressed data")
            rest = d.unused_data.lstrip(b"\x00")
    except (zlib.error, EOFError) as exc:
        raise InputError(name, f"is a damaged gzip file ({exc})", "check it with gunzip -t") from exc
    return b"".join(out)


_ROW_TYPES: dict[tuple[str, ...], Any] = {}


def _row_type(extras: tuple[str, ...]) -> Any:
    """The msgspec decoder of one JSON line: numbers as floats with NaN for absent (so that a column is one
    ``np.fromiter``), nothing else (each field costs on every row); attribute names are positional so that
    any JSON key can be an extra. An explicit ``null`` fails here and goes to the slow path."""
    import msgspec

    found = _ROW_TYPES.get(extras)
    if found is None:
        nan = math.nan
        fields: list[tuple[str, Any, Any]] = [
            ("f_t", float, msgspec.NODEFAULT), ("f_event", str, "delivery"), ("f_pages", float, nan),
            ("f_bytes", float, nan), ("f_service_s", float, nan)]
        rename = {"f_t": "t", "f_event": "event", "f_pages": "pages", "f_bytes": "bytes",
                  "f_service_s": "service_s"}
        for i, key in enumerate(extras):
            fields.append((f"x{i}", float, nan))
            rename[f"x{i}"] = key
        row = msgspec.defstruct("TraceRow", fields, rename=rename, gc=False)
        found = _ROW_TYPES[extras] = msgspec.json.Decoder(row, strict=False)
    return found


def _fast_jsonl(data: bytes, name: str, extras: tuple[str, ...]) -> TraceArrays | None:
    """JSON Lines decoded in one msgspec call, or None when the slower parser must look (see
    :func:`read_trace_arrays`): it accepts exactly what that parser accepts with the same columns."""
    import msgspec
    import numpy as np

    if any(k in ("t", "event", "pages", "bytes", "service_s") for k in extras):
        return None
    end = len(data)
    while end and data[end - 1] in b" \t\r\n":  # the trailing newline (no copy of the whole file)
        end -= 1
    if not end:
        return None
    try:
        rows = _row_type(extras).decode_lines(data)  # one C call decodes and types every line
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None  # a comment, a blank line, a value of another type, or a bad line: the slow path says
    n = len(rows)
    if n != data.count(b"\n", 0, end) + 1:
        return None

    def column(attr: str) -> Any:
        return np.fromiter(map(attrgetter(attr), rows), dtype=np.float64, count=n)

    try:
        event = np.fromiter(map(_KIND_CODES.__getitem__, map(attrgetter("f_event"), rows)), dtype=np.int64,
                            count=n)
    except KeyError:
        return None  # an unknown kind (or an empty one): the slow path says which
    t, pages_f, size, svc = column("f_t"), column("f_pages"), column("f_bytes"), column("f_service_s")
    delivery = event == EVENT_KINDS.index("delivery")
    with np.errstate(invalid="ignore"):
        bad = (not np.isfinite(t).all() or (pages_f < 0).any() or (delivery & (pages_f < 1)).any()
               or (pages_f != np.round(pages_f)).sum() != np.isnan(pages_f).sum()
               or (size < 0).any() or np.isinf(size).any() or (size != np.round(size)).sum() != np.isnan(size).sum()
               or (svc < 0).any() or np.isinf(svc).any())
    if bad:
        return None
    pages = np.where(np.isnan(pages_f), 1, pages_f).astype(np.int64)
    extra = {key: column(f"x{i}") for i, key in enumerate(extras)}
    notes: dict[int, dict[str, Any]] = {}
    note_rows = np.flatnonzero(np.isin(event, list(_NOTE_KINDS)))
    if note_rows.size:  # the agent's few refit and policy lines: their other fields, line by line
        lines = data[:end].split(b"\n")
        for i in note_rows.tolist():
            obj = json.loads(lines[i])
            notes[i] = {k: obj[k] for k in NOTE_FIELDS if obj.get(k) is not None}
    return TraceArrays(name, t, event, pages, size, svc, extra, np.arange(1, n + 1, dtype=np.int64), notes)


def _is_number(v: Any) -> bool:
    if v is None:
        return True
    try:
        float(v)
    except (TypeError, ValueError, OverflowError):
        return False
    return not isinstance(v, bool)


# -- the writer: the delivery log's lines, beside their reader -----------------------------------------
class DeliveryLine(Protocol):
    """What a delivery line records (:class:`agent.api.Delivery`)."""

    @property
    def robot(self) -> str | None: ...
    @property
    def pages(self) -> int: ...
    @property
    def bytes(self) -> int | None: ...
    @property
    def client_time(self) -> float | None: ...


class CompletionLine(Protocol):
    """What a completion line records (:class:`agent.api.Completion`)."""

    @property
    def pages(self) -> int: ...
    @property
    def service_s(self) -> float | None: ...
    @property
    def bytes(self) -> int | None: ...


def _t(x: float) -> str:
    return repr(float(x))


class TraceWriter:
    """The delivery log's lines, one method per event, each a JSON object on one line that
    :func:`parse_event` and :func:`read_trace_arrays` read back (the agent's stamp ``t`` first).

    Written by hand rather than by ``json.dumps``: they are on the path of every ack. A robot's id is
    encoded once and remembered (up to 100,000 ids).
    """

    def __init__(self) -> None:
        self._robot_field: dict[str, str] = {}

    def robot(self, robot: str | None) -> str:
        """The ``,"robot":...`` field of a line, or nothing."""
        if robot is None:
            return ""
        s = self._robot_field.get(robot)
        if s is None:
            s = f',"robot":{json.dumps(robot)}'
            if len(self._robot_field) < 100_000:
                self._robot_field[robot] = s
        return s

    def queue(self, t: float, pages: int, active: int) -> str:
        return f'{{"t":{_t(t)},"event":"queue","pages":{pages},"active":{active}}}\n'

    def deliveries(self, t: float, items: Sequence[DeliveryLine], admitted: Sequence[int], active: int) -> str:
        """A ``delivery`` line per item, each followed by a ``loss`` line for its pages refused at K."""
        return self.delivery_columns(t, [d.robot for d in items], [d.pages for d in items],
                                     [d.bytes for d in items], [d.client_time for d in items], admitted, active)

    def delivery_columns(self, t: float, robots: Sequence[str | None], pages: Sequence[int],
                         sizes: Sequence[int | None], client_times: Sequence[float | None],
                         admitted: Sequence[int], active: int) -> str:
        """:meth:`deliveries` of deliveries given as columns (the ``robot``, ``pages``, ``bytes`` and
        ``client_time`` of each, in order): a batch is written by one comprehension, not item by item."""
        head = f'{{"t":{_t(t)},"event":'
        tail = f',"active":{active}}}\n'
        if len(robots) == 1:  # one delivery (the common request)
            rid, p, b, c, a = self.robot(robots[0]), pages[0], sizes[0], client_times[0], admitted[0]
            extra = ("" if b is None else f',"bytes":{b}') + ("" if c is None else f',"client_t":{c!r}')
            line = f'{head}"delivery"{rid},"pages":{p}{extra}{tail}'
            return line if a >= p else f'{line}{head}"loss"{rid},"pages":{p - a}{tail}'
        # the parts of a line that depend on its robot and page count (before the size), and on its robot and
        # lost pages (after it), made once per distinct pair when there are fewer pairs than lines
        fields = {r: self.robot(r) for r in set(robots)}
        losses = list(map(sub, pages, admitted))
        counts, lost = set(pages), set(losses)
        common = None not in sizes and client_times.count(None) == len(client_times)  # sizes, no client times
        rest: Sequence[Any] = sizes if common else [
            ("" if b is None else f',"bytes":{b}') + ("" if c is None else f',"client_t":{c!r}')
            for b, c in zip(sizes, client_times, strict=True)]
        size_key = ',"bytes":' if common else ""
        if len(fields) * (len(counts) + len(lost)) > len(pages):
            return "".join([
                f'{head}"delivery"{fields[r]},"pages":{p}{size_key}{x}{tail}'
                + (f'{head}"loss"{fields[r]},"pages":{n}{tail}' if n else "")
                for r, p, x, n in zip(robots, pages, rest, losses, strict=True)])
        before = {r: {p: f'{head}"delivery"{f},"pages":{p}{size_key}' for p in counts} for r, f in fields.items()}
        after = {r: {n: f'{tail}{head}"loss"{f},"pages":{n}{tail}' if n else tail for n in lost}
                 for r, f in fields.items()}
        return "".join([f'{before[r][p]}{x}{after[r][n]}'
                        for r, p, x, n in zip(robots, pages, rest, losses, strict=True)])

    def completions(self, t: float, items: Sequence[CompletionLine]) -> str:
        ts = _t(t)
        lines = []
        for c in items:
            extra = ""
            if c.service_s is not None:
                extra += f',"service_s":{_t(c.service_s)}'
            if c.bytes is not None:
                extra += f',"bytes":{c.bytes}'
            lines.append(f'{{"t":{ts},"event":"completion","pages":{c.pages}{extra}}}\n')
        return "".join(lines)

    def obsolete(self, t: float, pages: int) -> str:
        return f'{{"t":{_t(t)},"event":"obsolete","pages":{pages}}}\n'

    def given_up(self, t: float, pages: int) -> str:
        return f'{{"t":{_t(t)},"event":"given_up","pages":{pages}}}\n'

    def switch(self, t: float, resume: bool, active: int, robot: str | None = None) -> str:
        """A ``resume`` or ``park`` line: a robot's new command, or (without a robot) a change of mode."""
        kind = "resume" if resume else "park"
        return f'{{"t":{_t(t)},"event":"{kind}"{self.robot(robot)},"active":{active}}}\n'

    def policy(self, t: float, version: int, source: str, robots_at_level: Sequence[int], control: str) -> str:
        """A policy put in force (its version and source), so that a replay sets its decisions beside the
        live agent's."""
        r = ",".join(str(x) for x in robots_at_level)
        return (f'{{"t":{_t(t)},"event":"policy","version":{version},"source":"{source}",'
                f'"robots_at_level":[{r}],"control":"{control}"}}\n')

    def refit(self, t: float, reason: str) -> str:
        """A refit's cut, so that a replay refits at the same instants on the same windows."""
        return f'{{"t":{_t(t)},"event":"refit","reason":{json.dumps(reason)}}}\n'
