"""Trace sources: several files or directories of rotated logs, gzip, JSON Lines, CSV and the converters'
formats, merged into one time-ordered table of events with an account of what was wrong with them.

:func:`read_events` takes paths (a directory stands for the files in it: the agent's
``deliveries-NNNNNNNN.jsonl`` in their order, other files by name), reads each one (gzip by its magic
bytes), takes its format from ``--format`` or its first bytes (:func:`agent.convert.detect`; JSON Lines and
CSV by :func:`agent.trace.read_trace_arrays`), and merges them:

- **order**: files by their first timestamp; then every event by time, stably (a file's own order breaks
  ties). Events earlier than the one before them are counted (``out_of_order``) and put in place.
- **duplicates**: where a file overlaps the files before it in time (a log rotated by copying, or the same
  file given twice), its events that repeat one of theirs exactly (time, kind, pages, bytes, service time,
  mode) are dropped and counted. Identical lines inside one file are kept: the agent stamps a batch of
  deliveries with one time, and they are distinct deliveries.
- **gaps**: intervals between consecutive events longer than a bound (``gap_s``, or the stop-gap rule of
  fitting: the widest empty stretch among the longest 5% of the intervals, :func:`fitting.choose_censor_bound`)
  are counted with their total length; a replay does not observe the queue across them.

A bad line raises :class:`InputError` naming ``file:line.field`` (the readers' own errors).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl import InputError

from .convert import CONVERTERS, convert, detect, measured_resolution, resolution_warning
from .trace import EVENT_KINDS, read_trace_arrays, read_trace_bytes

#: What ``--format`` accepts.
FORMATS = ("auto", "jsonl", "csv", *CONVERTERS)
#: The extra columns a replay reads from trace files.
EXTRA_FIELDS = ("active", "client_t")
_AGENT_LOG = re.compile(r"^deliveries-(\d{8})\.jsonl(\.gz)?$")
_ROTATED = re.compile(r"^(.*?)(?:\.(\d+))?(\.gz)?$")
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, eq=False)
class _Columns:
    """Events as columns (``event`` indexes :data:`agent.trace.EVENT_KINDS`; NaN where a number is absent;
    ``active`` is the number of active robots the line states; ``line`` where each came from; ``notes`` the
    fields of the agent's own ``refit`` and ``policy`` lines by row)."""

    t: NDArray[np.float64]
    event: NDArray[np.int64]
    pages: NDArray[np.int64]
    bytes: NDArray[np.float64]
    service_s: NDArray[np.float64]
    active: NDArray[np.float64]
    client_t: NDArray[np.float64]
    line: NDArray[np.int64]
    notes: Mapping[int, Mapping[str, Any]]


@dataclass(frozen=True, eq=False)
class _FileEvents(_Columns):
    """One file's events, in the file's order, and what its reading found."""

    name: str
    format: str
    resolution_s: float | None
    warnings: tuple[str, ...]
    summary: Mapping[str, Any]
    skipped: Mapping[str, int]


@dataclass(frozen=True)
class TraceQuality:
    """What :func:`read_events` found wrong with its input, and did about it.

    Attributes
    ----------
    files : tuple of str
        The files read, in the order merged.
    formats : dict of str to str
        Each file's format.
    events : int
        Events kept.
    duplicates : int
        Events dropped as exact repeats of an overlapping file's.
    out_of_order : int
        Events earlier than the event before them (put in time order).
    gaps : int
        Intervals between consecutive events longer than ``gap_bound_s``.
    gap_seconds : float
        Their total length.
    gap_bound_s : float or None
    gap_rule : str
        How the bound was chosen, in words.
    resolution_s : float or None
        The coarsest timestamp resolution among the files' deliveries.
    skipped : dict of str to int
        Lines the converters read but did not take, by reason.
    warnings : tuple of str
    summaries : dict of str to dict
        Per file, what else its log says (Scrapy's stats).
    """

    files: tuple[str, ...]
    formats: dict[str, str]
    events: int
    duplicates: int
    out_of_order: int
    gaps: int
    gap_seconds: float
    gap_bound_s: float | None
    gap_rule: str
    resolution_s: float | None
    skipped: dict[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"files": list(self.files), "formats": dict(self.formats), "events": self.events,
                "duplicates": self.duplicates, "out_of_order": self.out_of_order, "gaps": self.gaps,
                "gap_seconds": self.gap_seconds, "gap_bound_s": self.gap_bound_s, "gap_rule": self.gap_rule,
                "resolution_s": self.resolution_s, "skipped": dict(self.skipped), "warnings": list(self.warnings),
                "summaries": {k: dict(v) for k, v in self.summaries.items()}}


@dataclass(frozen=True, eq=False)
class EventTable(_Columns):
    """Every event of the input, in time order, as columns (those of :class:`_Columns`), with the file
    each came from (``source``, see :meth:`where`), the events followed by a gap (``gap_after``) and the
    account of the input (``quality``)."""

    source: NDArray[np.int64]
    gap_after: NDArray[np.bool_]
    quality: TraceQuality

    @property
    def n(self) -> int:
        return int(self.t.size)

    def where(self, i: int) -> str:
        return f"{self.quality.files[int(self.source[i])]}:{int(self.line[i])}"

    def kind(self, name: str) -> NDArray[np.bool_]:
        return np.asarray(self.event == EVENT_KINDS.index(name))


def expand(paths: Sequence[str]) -> list[str]:
    """The files named by ``paths``: a directory stands for its visible files (only its
    ``deliveries-NNNNNNNN.jsonl`` when it is the agent's), the agent's rotated logs by number, rotated logs
    ``name.N[.gz]`` oldest (highest N) first, others by name."""
    out: list[str] = []
    for raw in paths:
        p = Path(raw)
        if raw != "-" and p.is_dir():
            files = [f for f in p.iterdir() if f.is_file() and not f.name.startswith(".")]
            logs = [f for f in files if _AGENT_LOG.match(f.name)]
            files = logs or files  # the agent's directory: its log, not robots.json and policy.json
            if not files:
                raise InputError(raw, "is an empty directory", "give the directory of the log files")
            out.extend(str(f) for f in sorted(files, key=_file_order))
        else:
            out.append(raw)
    if not out:
        raise InputError("TRACE", "no file given", "give one or more trace files or directories")
    return out


def _file_order(path: Path) -> tuple[Any, ...]:
    m = _AGENT_LOG.match(path.name)
    if m:
        return (0, "", int(m.group(1)))
    r = _ROTATED.match(path.name)
    assert r is not None
    base, num = r.group(1), r.group(2)
    # logrotate: name.3.gz is older than name.2, which is older than name (no number)
    return (1, base, -(int(num) if num is not None else -1))


def _read_file(name: str, fmt: str) -> _FileEvents:
    data = read_trace_bytes(name)
    chosen = fmt if fmt != "auto" else (detect(data, name) or "trace")
    if fmt == "auto" and chosen == "trace":
        check_recognised(data, name)
    if chosen in CONVERTERS:
        c = convert(chosen, data, name)
        n = c.t.size
        nan = np.full(n, np.nan)
        return _FileEvents(c.t, np.zeros(n, dtype=np.int64), c.pages, c.bytes, nan, nan.copy(), nan.copy(), c.line,
                           {}, name, chosen, c.resolution_s, c.warnings, c.summary, c.skipped)
    if chosen not in ("trace", "jsonl", "csv"):
        raise InputError("--format", f"is {fmt!r}", f"use one of: {', '.join(FORMATS)}")
    label = name if chosen != "csv" or name.endswith(".csv") else name + ".csv"
    tr = read_trace_arrays(label, extra_fields=EXTRA_FIELDS, data=data)
    if label != name:
        tr = type(tr)(name, tr.t, tr.event, tr.pages, tr.bytes, tr.service_s, tr.extra, tr.line, tr.notes)
    deliveries = tr.event == EVENT_KINDS.index("delivery")
    res = measured_resolution(tr.t[deliveries]) if deliveries.any() else None
    warning = resolution_warning(name, res, tr.t[deliveries]) if deliveries.any() else None
    kind = ("csv" if _is_csv_name(name, data) else "jsonl") if chosen == "trace" else chosen
    return _FileEvents(tr.t, tr.event, tr.pages, tr.bytes, tr.service_s, tr.extra["active"], tr.extra["client_t"],
                       tr.line, tr.notes, name, kind, res, (warning,) if warning else (), {}, {})


def _first_line(data: bytes) -> str:
    """The first line that is neither blank nor a ``#`` comment."""
    for line in data[:65536].decode("utf-8", "replace").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return line.strip()
    return ""


def _looks_like_trace(data: bytes) -> bool:
    """Whether a file format detection did not place can be a trace: JSON Lines (an object per line), a CSV
    header (column names; the trace reader says if t is missing), or nothing at all (an empty trace)."""
    import csv

    first = _first_line(data)
    if not first or first.startswith("{"):
        return True
    header = [c.strip() for c in next(csv.reader([first]), [])]
    return "t" in header or (len(header) >= 2 and all(_COLUMN.fullmatch(c) for c in header))


def check_recognised(data: bytes, name: str, *, formats: Sequence[str] | None = None) -> None:
    """Raise :class:`InputError` "format not recognised", listing the ``--format`` choices, for a file that
    neither format detection nor the trace reader can place (an Apache access log, say), instead of the
    CSV reader's "has no column t". ``formats``: the choices to list (default :data:`FORMATS` but auto)."""
    if _looks_like_trace(data):
        return
    first = _first_line(data)
    convert_it = 'or convert it to JSON Lines {"t": seconds, "event": "delivery", "pages": n}'
    if formats is None:
        hint = f"give --format, one of: {', '.join(f for f in FORMATS if f != 'auto')}; {convert_it}"
    else:
        hint = (f"this command reads {', '.join(formats)} traces (robotctl replay --format reads "
                f"{', '.join(CONVERTERS)}); {convert_it}")
    raise InputError(name, f"format not recognised (its first line: {first[:60]!r}): not a JSON Lines or CSV "
                     "trace (a column t), a Scrapy log, a Heritrix crawl.log nor a WARC file", hint)


def _is_csv_name(name: str, data: bytes) -> bool:
    first = next((ln for ln in data[:4096].splitlines() if ln.strip()), b"")
    return name.endswith(".csv") or not first.lstrip().startswith((b"{", b"#"))


def _key_rows(f: _FileEvents, rows: NDArray[np.int64]) -> list[tuple[Any, ...]]:
    """Hashable keys of some rows (NaN as None, so that equal rows compare equal)."""
    def col(a: NDArray[Any]) -> list[Any]:
        v = a[rows]
        return [None if isinstance(x, float) and math.isnan(x) else x for x in v.tolist()]

    return list(zip(col(f.t), col(f.event), col(f.pages), col(f.bytes), col(f.service_s), col(f.active),
                    col(f.client_t), strict=True))


def _drop_overlap(files: list[_FileEvents]) -> tuple[list[NDArray[np.bool_]], int]:
    """Per file, which events to keep: those of a file that repeat an event of the files before it (in the
    time both cover) are dropped; returns the masks and how many were dropped."""
    keep = [np.ones(f.t.size, dtype=bool) for f in files]
    dropped = 0
    seen_max = -math.inf
    for j, f in enumerate(files):
        if f.t.size and j > 0 and float(f.t.min()) <= seen_max:
            lo = float(f.t.min())
            earlier: Counter[tuple[Any, ...]] = Counter()
            for g in files[:j]:
                rows = np.flatnonzero(g.t >= lo)
                earlier.update(_key_rows(g, rows))
            cand = np.flatnonzero(f.t <= seen_max)
            for i, key in zip(cand.tolist(), _key_rows(f, cand), strict=True):
                if earlier[key] > 0:
                    earlier[key] -= 1
                    keep[j][i] = False
                    dropped += 1
        if f.t.size:
            seen_max = max(seen_max, float(f.t.max()))
    return keep, dropped


def _gaps(t: NDArray[np.float64], gap_s: float | None) -> tuple[NDArray[np.bool_], float | None, str]:
    from robotctl.fitting import choose_censor_bound

    x = np.diff(t)
    if x.size == 0:
        return np.zeros(t.size, dtype=bool), None, "one event: no interval"
    if gap_s is not None:
        bound: float | None = None if math.isinf(gap_s) else gap_s
        rule = f"--gap-s {gap_s:g}" if bound is not None else "--gap-s inf: no gap"
    else:
        c = choose_censor_bound(x)
        bound, rule = c.value, c.reason
    after = np.zeros(t.size, dtype=bool)
    if bound is not None:
        after[:-1] = x > bound
    return after, bound, rule


def read_events(paths: Sequence[str], *, fmt: str = "auto", gap_s: float | None = None) -> EventTable:
    """Read and merge trace files (see the module docstring).

    Parameters
    ----------
    paths : sequence of str
        Files or directories; ``-`` reads standard input.
    fmt : str
        One of :data:`FORMATS`; ``auto`` takes each file's format from its first bytes.
    gap_s : float, optional
        Intervals longer than this are gaps (``inf``: none); default chosen from the data.
    """
    if fmt not in FORMATS:
        raise InputError("--format", f"is {fmt!r}", f"use one of: {', '.join(FORMATS)}")
    files = [_read_file(name, fmt) for name in expand(paths)]
    files.sort(key=lambda f: float(f.t[0]) if f.t.size else math.inf)
    keep, duplicates = _drop_overlap(files)
    names = tuple(f.name for f in files)

    def cat(attr: str) -> NDArray[Any]:
        return np.concatenate([getattr(f, attr)[k] for f, k in zip(files, keep, strict=True)])

    t = cat("t")
    if t.size == 0:
        raise InputError(", ".join(names), "hold no events", "a trace needs at least one line with t and event")
    source = np.concatenate([np.full(int(k.sum()), j, dtype=np.int64) for j, k in enumerate(keep)])
    notes: dict[int, Mapping[str, Any]] = {}
    offset = 0
    for f, k in zip(files, keep, strict=True):
        index = np.cumsum(k) - 1
        for row, note in f.notes.items():
            if k[row]:
                notes[offset + int(index[row])] = note
        offset += int(k.sum())
    cols = {a: cat(a) for a in ("event", "pages", "bytes", "service_s", "active", "client_t", "line")}
    back = int((t[1:] < t[:-1]).sum())
    if back:
        order = np.argsort(t, kind="stable")
        t, source = t[order], source[order]
        cols = {a: v[order] for a, v in cols.items()}
        position = np.empty_like(order)
        position[order] = np.arange(order.size)
        notes = {int(position[r]): v for r, v in notes.items()}
    gap_after, bound, rule = _gaps(t, gap_s)
    x = np.diff(t)
    skipped: Counter[str] = Counter()
    warnings: list[str] = []
    summaries: dict[str, dict[str, Any]] = {}
    for f in files:
        warnings.extend(f.warnings)
        skipped.update(f.skipped)
        if f.summary:
            summaries[f.name] = dict(f.summary)
    resolutions = [f.resolution_s for f in files if f.resolution_s is not None]
    quality = TraceQuality(
        files=names, formats={f.name: f.format for f in files}, events=int(t.size), duplicates=duplicates,
        out_of_order=back, gaps=int(gap_after.sum()), gap_seconds=float(x[gap_after[:-1]].sum()) if x.size else 0.0,
        gap_bound_s=bound, gap_rule=rule, resolution_s=max(resolutions) if resolutions else None,
        skipped=dict(skipped), warnings=tuple(warnings), summaries=summaries)
    return EventTable(t, cols["event"], cols["pages"], cols["bytes"], cols["service_s"], cols["active"],
                      cols["client_t"], cols["line"], notes, source, gap_after, quality)


__all__ = ["EXTRA_FIELDS", "FORMATS", "EventTable", "TraceQuality", "check_recognised", "expand", "read_events"]
