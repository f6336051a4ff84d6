"""The indexer: one worker with a buffer of K pages, real indexing work, obsolescence of waiting pages.

The system of paper 000, for real:

Buffer
    At most ``capacity`` = K documents in the system, the one being indexed included. A batch that
    does not fit keeps what fits (partial admission); the rest is lost and counted.
Service
    FIFO. Indexing a document parses its HTML, tokenises the visible text and updates an inverted index
    in SQLite (terms, postings, documents; a document fetched again replaces its postings). The work
    runs in one worker thread that owns the database connection. With ``processing_rate_bps`` set, the
    indexer then waits out the rest of ``size / processing_rate_bps`` seconds, so it indexes at the speed
    of a configured (slower, shared) indexer and the service time follows the content size; with
    ``null`` it runs at full speed.
Obsolescence
    A waiting document whose content changes at the source before it reaches service (its
    ``expires_at``) is dropped at that moment; the document in service is never dropped.

Every change of the queue is an :class:`QueueEvent` handed to ``on_event`` at the moment it happens, in
order (the agent link reports them); :class:`IndexerStats` integrates the queue over time for the
observed measures.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from robotctl import InputError

from ._html import term_counts, visible_text
from ._robots import Document
from ._site import _dataclass_from_mapping


@dataclass(frozen=True)
class IndexerConfig:
    """The indexer (``indexer:`` in config/demo.yaml).

    Attributes
    ----------
    capacity : int
        K: documents in the system, the one being indexed included.
    processing_rate_bps : float or None
        Bytes per second of the configured indexer (service time = size / rate, at least the real work);
        None: as fast as the real work goes.
    """

    capacity: int = 8
    processing_rate_bps: float | None = 100_000.0

    def __post_init__(self) -> None:
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int) or self.capacity < 1:
            raise InputError("indexer.capacity", f"must be a whole number >= 1, got {self.capacity!r}",
                             "K counts the documents in the system, the one being indexed included")
        r = self.processing_rate_bps
        if r is not None:
            if isinstance(r, bool) or not isinstance(r, int | float) or not math.isfinite(r) or r <= 0:
                raise InputError("indexer.processing_rate_bps", f"must be null or a number > 0, got {r!r}",
                                 "write bytes per second, e.g. 100000")
            object.__setattr__(self, "processing_rate_bps", float(r))

    @classmethod
    def from_dict(cls, raw: Any) -> IndexerConfig:
        return _dataclass_from_mapping(cls, raw, "indexer")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class QueueEvent:
    """One change of the indexer's queue, in the order it happened.

    Attributes
    ----------
    kind : str
        ``delivery`` (a robot's batch offered), ``completion`` (one document indexed) or ``obsolete``
        (one waiting document dropped).
    t : float
        Loop time.
    pages : int
        Documents offered, indexed or dropped.
    admitted : int
        For a delivery: documents that fitted.
    length : int
        Documents in the system after the event.
    robot : str or None
    bytes : int
    service_s : float or None
        For a completion.
    """

    kind: str
    t: float
    pages: int
    admitted: int
    length: int
    robot: str | None = None
    bytes: int = 0
    service_s: float | None = None


@dataclass
class IndexerStats:
    """Counts and time integrals since the window started (:meth:`Indexer.start_window`)."""

    start: float = 0.0
    offered: int = 0
    admitted: int = 0
    lost: int = 0
    obsolete: int = 0
    served: int = 0
    served_bytes: int = 0
    sojourn_sum: float = 0.0
    service_sum: float = 0.0
    work_sum: float = 0.0
    batches: int = 0
    level_time: list[float] = field(default_factory=list)
    service_times: list[float] = field(default_factory=list)

    def elapsed(self, now: float) -> float:
        return max(0.0, now - self.start)

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("level_time", "service_times")}
        d["level_time"] = list(self.level_time)
        if self.service_times:
            a = np.asarray(self.service_times)
            d["service_mean_s"] = float(a.mean())
            d["service_scv"] = float(a.var() / a.mean() ** 2) if a.mean() > 0 else math.nan
        return d


@dataclass(eq=False)
class _Entry:
    doc: Document
    arrived: float
    timer: asyncio.TimerHandle | None = None
    waiting: bool = True


class InvertedIndex:
    """An inverted index in SQLite: ``docs(url, size, indexed_at)``, ``terms(term)``,
    ``postings(term_id, doc_id, tf)``. Use it from one thread only (the indexer's worker)."""

    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS docs (id INTEGER PRIMARY KEY, url TEXT UNIQUE NOT NULL, "
        "size INTEGER NOT NULL, indexed_at REAL NOT NULL, versions INTEGER NOT NULL DEFAULT 1)",
        "CREATE TABLE IF NOT EXISTS terms (id INTEGER PRIMARY KEY, term TEXT UNIQUE NOT NULL)",
        "CREATE TABLE IF NOT EXISTS postings (term_id INTEGER NOT NULL, doc_id INTEGER NOT NULL, "
        "tf INTEGER NOT NULL, PRIMARY KEY (term_id, doc_id)) WITHOUT ROWID",
        "CREATE INDEX IF NOT EXISTS postings_doc ON postings (doc_id)",
    )

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=OFF")
        for stmt in self.SCHEMA:
            self.db.execute(stmt)
        self._term_ids: dict[str, int] = dict((t, i) for i, t in self.db.execute("SELECT id, term FROM terms"))

    def add(self, url: str, html: str, size: int, now: float) -> int:
        """Index one document (replacing an earlier version of the same URL); returns its distinct terms."""
        counts = term_counts(visible_text(html))
        db = self.db
        db.execute("BEGIN")
        try:
            row = db.execute("SELECT id FROM docs WHERE url = ?", (url,)).fetchone()
            if row is None:
                doc_id = int(db.execute("INSERT INTO docs (url, size, indexed_at) VALUES (?, ?, ?)",
                                        (url, size, now)).lastrowid or 0)
            else:
                doc_id = int(row[0])
                db.execute("DELETE FROM postings WHERE doc_id = ?", (doc_id,))
                db.execute("UPDATE docs SET size = ?, indexed_at = ?, versions = versions + 1 WHERE id = ?",
                           (size, now, doc_id))
            new = [t for t in counts if t not in self._term_ids]
            if new:
                db.executemany("INSERT OR IGNORE INTO terms (term) VALUES (?)", [(t,) for t in new])
                for i in range(0, len(new), 500):
                    chunk = new[i:i + 500]
                    q = f"SELECT id, term FROM terms WHERE term IN ({','.join('?' * len(chunk))})"
                    for tid, term in db.execute(q, chunk):
                        self._term_ids[term] = int(tid)
            db.executemany("INSERT INTO postings (term_id, doc_id, tf) VALUES (?, ?, ?)",
                           [(self._term_ids[t], doc_id, n) for t, n in counts.items()])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return len(counts)

    def search(self, term: str) -> list[str]:
        """URLs of the documents holding ``term``, most occurrences first."""
        rows = self.db.execute(
            "SELECT d.url FROM postings p JOIN terms t ON t.id = p.term_id JOIN docs d ON d.id = p.doc_id "
            "WHERE t.term = ? ORDER BY p.tf DESC, d.url", (term.lower(),))
        return [r[0] for r in rows]

    def counts(self) -> dict[str, int]:
        out = {}
        for table in ("docs", "terms", "postings"):
            out[table] = int(self.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
        out["revisited"] = int(self.db.execute("SELECT COUNT(*) FROM docs WHERE versions > 1").fetchone()[0])
        out["versions"] = int(self.db.execute("SELECT COALESCE(SUM(versions), 0) FROM docs").fetchone()[0])
        return out

    def close(self) -> None:
        self.db.close()


class Indexer:
    """See the module docstring. ``offer`` is called by robots; :meth:`run` serves until cancelled.

    Parameters
    ----------
    config : IndexerConfig
    db_path : str or Path
        The SQLite file of the inverted index (``:memory:`` works too).
    on_event : callable, optional
        Called with every :class:`QueueEvent`, synchronously, in order.
    clock : callable, optional
        Loop time by default.
    """

    def __init__(self, config: IndexerConfig, *, db_path: str | Path,
                 on_event: Callable[[QueueEvent], None] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.config = config
        self.capacity = config.capacity
        self.on_event = on_event
        self._clock = clock
        self._buffer: deque[_Entry] = deque()
        self._stopped = False
        self._in_service: _Entry | None = None
        self._nonempty = asyncio.Event()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="indexer")
        self._db_path = db_path
        self._index: InvertedIndex | None = None
        self._index_lock = threading.Lock()
        try:
            t0: float | None = self.now()
        except RuntimeError:  # no running loop yet: the integrals start at the first event
            t0 = None
        self.stats = IndexerStats(start=t0 or 0.0, level_time=[0.0] * (config.capacity + 1))
        self.totals = IndexerStats(start=t0 or 0.0, level_time=[0.0] * (config.capacity + 1))
        #: what an event is counted in: the window and the totals, the totals only once stopped
        self._counting: tuple[IndexerStats, ...] = (self.stats, self.totals)
        self._last_t: float | None = t0
        self.events = 0

    def now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    @property
    def length(self) -> int:
        """Documents in the system, the one being indexed included."""
        return len(self._buffer) + (1 if self._in_service is not None else 0)

    # -- time integrals ------------------------------------------------------------------------------
    def _advance(self, now: float) -> None:
        if self._last_t is not None and now > self._last_t:
            dt = now - self._last_t
            i = self.length
            for s in self._counting:
                s.level_time[i] += dt
        self._last_t = now if self._last_t is None else max(self._last_t, now)

    def start_window(self, now: float | None = None) -> None:
        """Zero :attr:`stats` (the measurement window starts now); :attr:`totals` keeps counting."""
        t = self.now() if now is None else now
        self._advance(t)
        self.stats = IndexerStats(start=t, level_time=[0.0] * (self.capacity + 1))
        self._counting = (self.totals,) if self._stopped else (self.stats, self.totals)

    def sync(self, now: float | None = None) -> None:
        """Bring the time integrals up to ``now`` (the clock's now by default)."""
        self._advance(self.now() if now is None else now)

    def _emit(self, event: QueueEvent) -> None:
        self.events += 1
        if self.on_event is not None:
            self.on_event(event)

    # -- arrivals ------------------------------------------------------------------------------------
    def offer(self, robot_id: str, documents: Sequence[Document]) -> int:
        """A robot's batch: admit what fits (partial admission), count the rest as lost; returns the
        number admitted."""
        now = self.now()
        self._advance(now)
        k = len(documents)
        free = self.capacity - self.length
        admitted = max(0, min(k, free))
        loop = asyncio.get_running_loop()
        for doc in documents[:admitted]:
            entry = _Entry(doc, now)
            self._buffer.append(entry)
            if doc.expires_at is not None:
                delay = doc.expires_at - now
                entry.timer = loop.call_later(max(0.0, delay), self._expire, entry)
        for s in self._counting:
            s.offered += k
            s.admitted += admitted
            s.lost += k - admitted
            s.batches += 1
        if admitted:
            self._nonempty.set()
        self._emit(QueueEvent("delivery", now, k, admitted, self.length, robot_id,
                              sum(d.size for d in documents)))
        return admitted

    def stop(self) -> None:
        """Freeze the queue at the end of a run: pending useful-life timers are cancelled, no page expires
        any more, and :attr:`stats` (the window) stops counting, so what is read from it afterwards equals
        what was measured. A robot still winding down may deliver after this (a cancellation can land as
        an awaited result arrives); such deliveries count in :attr:`totals` only, where the agent, which
        is told of them, counts them too."""
        self._stopped = True
        self._counting = (self.totals,)
        for entry in self._buffer:
            if entry.timer is not None:
                entry.timer.cancel()

    def _expire(self, entry: _Entry) -> None:
        if self._stopped or not entry.waiting:
            return
        now = self.now()
        self._advance(now)
        with contextlib.suppress(ValueError):
            self._buffer.remove(entry)
            entry.waiting = False
            for s in self._counting:
                s.obsolete += 1
            self._emit(QueueEvent("obsolete", now, 1, 0, self.length))

    # -- service -------------------------------------------------------------------------------------
    def _work(self, doc: Document, now: float) -> int:
        with self._index_lock:
            if self._index is None:
                self._index = InvertedIndex(self._db_path)
            try:
                text = doc.body.decode("utf-8", errors="replace")
            except Exception:  # pragma: no cover - decode with errors="replace" does not raise
                text = ""
            return self._index.add(doc.url, text, doc.size, now)

    async def run(self) -> None:
        """Index documents FIFO until cancelled."""
        loop = asyncio.get_running_loop()
        rate = self.config.processing_rate_bps
        while True:
            while not self._buffer:
                self._nonempty.clear()
                await self._nonempty.wait()
            now = self.now()
            self._advance(now)
            entry = self._buffer.popleft()
            entry.waiting = False
            if entry.timer is not None:
                entry.timer.cancel()
            self._in_service = entry
            start = now
            try:
                await loop.run_in_executor(self._executor, self._work, entry.doc, start)
                work = self.now() - start
                if rate is not None:
                    rest = entry.doc.size / rate - work
                    if rest > 0:
                        await asyncio.sleep(rest)
            except asyncio.CancelledError:
                # stopped mid-service: the document stays in the system (it was neither indexed nor dropped)
                self._advance(self.now())
                raise
            end = self.now()
            self._advance(end)
            self._in_service = None
            service = end - start
            for s in self._counting:
                s.served += 1
                s.served_bytes += entry.doc.size
                s.sojourn_sum += end - entry.arrived
                s.service_sum += service
                s.work_sum += work
                s.service_times.append(service)
            self._emit(QueueEvent("completion", end, 1, 0, self.length, None, entry.doc.size, service))

    def search(self, term: str) -> list[str]:
        """URLs holding ``term`` (from the event loop: runs on the indexer's thread)."""
        with self._index_lock:
            return [] if self._index is None else self._index.search(term)

    def index_counts(self) -> dict[str, int]:
        with self._index_lock:
            return {"docs": 0, "terms": 0, "postings": 0, "revisited": 0, "versions": 0} if self._index is None else \
                self._index.counts()

    def close(self) -> None:
        """Cancel expiry timers, stop the worker thread and close the database."""
        for e in self._buffer:
            if e.timer is not None:
                e.timer.cancel()
        self._executor.shutdown(wait=True)
        with self._index_lock:
            if self._index is not None:
                self._index.close()
                self._index = None
