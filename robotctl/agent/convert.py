"""Converters from the logs crawler operators have to trace columns (docs/ARCHITECTURE.md, "Trace file").

Each converter turns one file's bytes into a :class:`Converted`: delivery times (s since the Unix epoch, as
the log states them), pages (1 per fetched document), bytes where the log gives a size, and the robot
(worker thread) where it names one. None of these logs records how many robots were active, so a replay
takes the fleet from ``--active`` (or the configuration's ``robots.count``).

``scrapy``
    Scrapy's log (``LOG_FORMAT`` ``%(asctime)s [%(name)s] %(levelname)s: %(message)s``): every
    ``Crawled (2xx) <GET url>`` line is a delivery of one page; other statuses are counted and skipped. The
    stats dump at the end (``Dumping Scrapy stats:`` and a Python dict) is read into :attr:`Converted.summary`
    (responses, items, bytes, start and finish) and checked against the lines. The default
    ``LOG_DATEFORMAT`` ``%Y-%m-%d %H:%M:%S`` has whole seconds; ``,mmm`` milliseconds are read when present.
``heritrix``
    Heritrix's ``crawl.log`` (one line per URI: ISO 8601 time of logging to the millisecond, fetch status,
    size, URI, discovery path, via, MIME type, worker thread ``#nnn``, fetch start and duration, digest,
    source, annotations): every line with an HTTP 2xx status is a delivery of one page of that size by that
    thread; DNS lookups (status 1) and failures (negative or other statuses) are counted and skipped.
``warc``
    WARC files (``.warc``, ``.warc.gz``; read with warcio, the optional extra ``warc``): every ``response``
    or ``resource`` record is a delivery of one page, at its ``WARC-Date``, of its ``Content-Length``.
    WARC/1.0 dates have whole seconds; WARC/1.1 may carry fractions.

Every converter states the resolution of its timestamps (:attr:`Converted.resolution_s`, measured on the
data) and says when it is too coarse for batch detection (:func:`resolution_warning`): deliveries closer
than the resolution share a timestamp, equal timestamps are always one batch, so the batch law fitted is
that of deliveries per tick, not the crawler's.
"""

from __future__ import annotations

import ast
import datetime as dt
import io
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl import InputError

#: Timestamps coarser than this cannot show the gaps inside a batch (pages of one batch arrive
#: milliseconds apart).
COARSE_RESOLUTION_S = 0.01
#: The converters by name.
CONVERTERS = ("scrapy", "heritrix", "warc")


@dataclass(frozen=True, eq=False)
class Converted:
    """One converted file: deliveries as columns, and what the conversion found.

    Attributes
    ----------
    format : str
    t : ndarray
        Delivery times (s since the epoch).
    pages : ndarray of int
    bytes : ndarray
        NaN where the log gives no size.
    robot : tuple of str or None
        The worker (Heritrix thread) of each delivery, when the log names one.
    line : ndarray of int
        The line (or WARC record) of each delivery.
    resolution_s : float or None
        The timestamps' resolution, measured (None for fewer than two deliveries).
    skipped : dict of str to int
        Lines read but not deliveries, by reason.
    summary : dict
        What else the log says (Scrapy's stats).
    warnings : tuple of str
    """

    format: str
    t: NDArray[np.float64]
    pages: NDArray[np.int64]
    bytes: NDArray[np.float64]
    robot: tuple[str, ...] | None
    line: NDArray[np.int64]
    resolution_s: float | None
    skipped: dict[str, int] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def measured_resolution(t: NDArray[np.float64]) -> float | None:
    """The coarsest of 1 s, 0.1 s, ..., 1 us of which every timestamp is a multiple (relative to the first,
    up to float rounding); None for fewer than two timestamps."""
    if t.size < 2:
        return None
    d = np.abs(t - t[0])
    for r in (1.0, 0.1, 0.01, 0.001, 1e-4, 1e-5, 1e-6):
        q = d / r
        tol = max(1e-6, 4 * float(np.finfo(float).eps * np.max(np.abs(t)) / r))
        if np.all(np.abs(q - np.round(q)) <= tol):
            return r
    return 0.0


def resolution_warning(name: str, resolution_s: float | None, t: NDArray[np.float64]) -> str | None:
    """A sentence when ``resolution_s`` is too coarse for batch detection, with how many deliveries share a
    timestamp with the one before."""
    if resolution_s is None or resolution_s < COARSE_RESOLUTION_S:
        return None
    ties = int((np.diff(t) == 0).sum())
    return (f"{name}: timestamps have a resolution of {resolution_s:g} s, too coarse for batch detection: "
            f"{ties} of {t.size} deliveries share a timestamp with the one before, and deliveries closer than "
            f"{resolution_s:g} s are taken as one batch (the batch law fitted is that of deliveries per "
            f"{resolution_s:g} s tick); record milliseconds to see the crawler's batches")


def _finish(fmt: str, name: str, t: list[float], pages: list[int], size: list[float], robot: list[str] | None,
            line: list[int], skipped: Counter[str], summary: dict[str, Any] | None = None,
            warnings: list[str] | None = None) -> Converted:
    ta = np.asarray(t, dtype=np.float64)
    res = measured_resolution(ta)
    notes = list(warnings or [])
    w = resolution_warning(name, res, ta)
    if w is not None:
        notes.append(w)
    return Converted(fmt, ta, np.asarray(pages, dtype=np.int64), np.asarray(size, dtype=np.float64),
                     tuple(robot) if robot is not None else None, np.asarray(line, dtype=np.int64), res,
                     dict(skipped), dict(summary or {}), tuple(notes))


def _epoch(when: dt.datetime) -> float:
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)  # a local time without zone: only differences matter here
    return when.timestamp()


# -- Scrapy ------------------------------------------------------------------------------------------

SCRAPY_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[,.](\d{1,6}))? \[([\w.\-]+)\] "
                         r"(DEBUG|INFO|WARNING|ERROR|CRITICAL): (.*)$")
_CRAWLED = re.compile(r"^Crawled \((\d{3})\) <(\w+) ([^>]*)>")
_DATETIME_CALL = re.compile(r"datetime\.datetime\(([\d,\s]+?)(?:,\s*tzinfo=[\w.]+(?:\(\))?)?\)")


def _scrapy_time(stamp: str, fraction: str | None) -> float:
    when = dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")
    t = _epoch(when)
    if fraction:
        t += int(fraction) / 10 ** len(fraction)
    return t


def _scrapy_stats(text: str) -> dict[str, Any]:
    """Scrapy's stats dump (a Python dict literal, datetimes as ``datetime.datetime(...)`` calls)."""
    def to_iso(m: re.Match[str]) -> str:
        parts = [int(x) for x in m.group(1).replace(" ", "").split(",") if x]
        y, mo, d, h, mi, sec, us = (parts + [0] * 7)[:7]
        return repr(_epoch(dt.datetime(y, mo, d, h, mi, sec, us)))

    try:
        value = ast.literal_eval(_DATETIME_CALL.sub(to_iso, text))
    except (ValueError, SyntaxError):
        return {}
    return dict(value) if isinstance(value, dict) else {}


def convert_scrapy(data: bytes, name: str) -> Converted:
    """A Scrapy log (see the module docstring)."""
    t: list[float] = []
    line_no: list[int] = []
    skipped: Counter[str] = Counter()
    stats_text: list[str] | None = None
    summary: dict[str, Any] = {}
    lines = data.decode("utf-8", "replace").splitlines()
    for n, raw in enumerate(lines, start=1):
        if stats_text is not None:
            if SCRAPY_LINE.match(raw):
                summary = _scrapy_stats("\n".join(stats_text))
                stats_text = None
            else:
                stats_text.append(raw)
                continue
        m = SCRAPY_LINE.match(raw)
        if m is None:
            if raw.strip():
                skipped["not a log line (a traceback or a continuation)"] += 1
            continue
        message = m.group(5)
        if message.startswith("Dumping Scrapy stats:"):
            stats_text = [message[len("Dumping Scrapy stats:"):]]
            continue
        c = _CRAWLED.match(message)
        if c is None:
            continue
        status = int(c.group(1))
        if 200 <= status < 300:
            t.append(_scrapy_time(m.group(1), m.group(2)))
            line_no.append(n)
        else:
            skipped[f"crawled with status {status}"] += 1
    if stats_text is not None:
        summary = _scrapy_stats("\n".join(stats_text))
    warnings = []
    responses = summary.get("response_received_count")
    crawled = len(t) + sum(v for k, v in skipped.items() if k.startswith("crawled"))
    if isinstance(responses, int) and responses != crawled:
        warnings.append(f"{name}: Scrapy's stats count {responses} responses but the log has {crawled} "
                        "Crawled lines (LOG_LEVEL above DEBUG drops them): the trace misses deliveries")
    if not t:
        raise InputError(name, "holds no `Crawled (2xx)` line of a Scrapy log",
                         "run Scrapy with LOG_LEVEL = 'DEBUG' so that each response is logged")
    nbytes = summary.get("downloader/response_bytes")
    if isinstance(nbytes, int) and isinstance(responses, int) and responses > 0:
        summary["mean_response_bytes"] = nbytes / responses
    return _finish("scrapy", name, t, [1] * len(t), [math.nan] * len(t), None, line_no, skipped, summary,
                   warnings)


# -- Heritrix ----------------------------------------------------------------------------------------

HERITRIX_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)\s+(-?\d+)\s+(\S+)\s+(\S+)")


def _iso_time(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def convert_heritrix(data: bytes, name: str) -> Converted:
    """A Heritrix crawl.log (see the module docstring)."""
    t: list[float] = []
    size: list[float] = []
    robot: list[str] = []
    line_no: list[int] = []
    skipped: Counter[str] = Counter()
    for n, raw in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        if not raw.strip():
            continue
        m = HERITRIX_LINE.match(raw)
        if m is None:
            raise InputError(f"{name}:{n}", "is not a crawl.log line (timestamp, status, size, URI, ...)",
                             "give Heritrix's crawl.log, or --format for another kind of file")
        status = int(m.group(2))
        if status == 1:
            skipped["DNS lookups (status 1)"] += 1
            continue
        if not 200 <= status < 300:
            skipped[f"status {status}"] += 1
            continue
        fields = raw.split()
        t.append(_iso_time(m.group(1)))
        size.append(float(m.group(3)) if m.group(3).isdigit() else math.nan)
        robot.append(next((f for f in fields[4:] if f.startswith("#") and f[1:].isdigit()), "-"))
        line_no.append(n)
    if not t:
        raise InputError(name, "holds no crawl.log line with an HTTP 2xx status", "give a crawl.log of fetched pages")
    return _finish("heritrix", name, t, [1] * len(t), size, robot, line_no, skipped)


# -- WARC ---------------------------------------------------------------------------------------------

def convert_warc(data: bytes, name: str) -> Converted:
    """A WARC file (see the module docstring); needs warcio."""
    try:
        from warcio.archiveiterator import ArchiveIterator
    except ImportError as exc:
        raise InputError(name, "is a WARC file, and reading one needs warcio",
                         "pip install 'robotctl[warc]' (or pip install warcio)") from exc
    t: list[float] = []
    size: list[float] = []
    line_no: list[int] = []
    skipped: Counter[str] = Counter()
    try:
        for n, record in enumerate(ArchiveIterator(io.BytesIO(data)), start=1):
            if record.rec_type not in ("response", "resource"):
                skipped[f"{record.rec_type} records"] += 1
                continue
            date = record.rec_headers.get_header("WARC-Date")
            if date is None:
                raise InputError(f"{name}:record {n}.WARC-Date", "is missing", "every WARC record has a date")
            try:
                t.append(_iso_time(date))
            except ValueError as exc:
                raise InputError(f"{name}:record {n}.WARC-Date", f"is {date!r}, not an ISO 8601 time",
                                 "write e.g. 2024-05-02T10:11:12Z") from exc
            length = record.rec_headers.get_header("Content-Length")
            size.append(float(length) if length is not None and length.isdigit() else math.nan)
            line_no.append(n)
            record.content_stream().read()
    except InputError:
        raise
    except Exception as exc:  # warcio's own errors on a damaged archive
        raise InputError(name, f"is not a readable WARC file ({type(exc).__name__}: {exc})",
                         "check the file is whole (gunzip -t for .warc.gz)") from exc
    if not t:
        raise InputError(name, "holds no response or resource record", "give a WARC file of fetched pages")
    return _finish("warc", name, t, [1] * len(t), size, None, line_no, skipped)


def detect(data: bytes, name: str) -> str | None:
    """The converter a file's first bytes call for, or None (JSON Lines or CSV, read as trace files)."""
    if data.startswith(b"WARC/"):
        return "warc"
    first = next((ln for ln in data[:65536].decode("utf-8", "replace").splitlines() if ln.strip()), "")
    if HERITRIX_LINE.match(first):
        return "heritrix"
    if SCRAPY_LINE.match(first):
        return "scrapy"
    return None


def convert(fmt: str, data: bytes, name: str) -> Converted:
    """Run the converter ``fmt`` (one of :data:`CONVERTERS`) on a file's bytes."""
    if fmt == "scrapy":
        return convert_scrapy(data, name)
    if fmt == "heritrix":
        return convert_heritrix(data, name)
    if fmt == "warc":
        return convert_warc(data, name)
    raise InputError("--format", f"is {fmt!r}", f"use one of: {', '.join(CONVERTERS)}")


__all__ = [
    "COARSE_RESOLUTION_S",
    "CONVERTERS",
    "Converted",
    "convert",
    "convert_heritrix",
    "convert_scrapy",
    "convert_warc",
    "detect",
    "measured_resolution",
    "resolution_warning",
]
