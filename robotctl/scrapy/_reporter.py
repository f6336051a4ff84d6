"""Reports to the agent from inside a crawl: ordered, batched, never blocking, quiet when the agent is down.

A crawl's callbacks call :meth:`Reporter.deliver`, :meth:`Reporter.complete`, :meth:`Reporter.obsolete`,
:meth:`Reporter.given_up` and :meth:`Reporter.set_queue`; each appends to a bounded list and returns at
once. One sender task sends the reports in the order they were made, consecutive reports of one kind in
one request (``{"deliveries": [...]}``, ``{"completions": [...]}``): whatever piles up while a request is
in flight (or, with ``flush_interval_s``, in the wait before it) forms the next batch.

When the agent cannot be reached, :class:`AgentHealth` logs one warning for the outage (not one per
report), the reports made meanwhile are dropped and counted, and the agent is tried again every
``retry_interval_s``. Reports are not replayed afterwards: the agent would stamp them with the wrong
time. Instead, if the reports carry the indexer's queue length, the first request after the outage
resynchronises the agent's queue view (``POST /v1/queue``) with the length after the last report
dropped. The same happens when an acknowledged queue length differs from the indexer's.

Needs a running asyncio event loop (Scrapy's asyncio reactor); does not import Scrapy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from robotctl.agent import AgentRejectedError, AgentUnavailableError

LOG = logging.getLogger("robotctl.scrapy")


class Client(Protocol):
    """The part of ``robotctl.agent.client.AgentClient`` the reporter uses."""

    async def deliver_many(self, deliveries: Any) -> dict[str, Any]: ...

    async def complete_many(self, completions: Any) -> dict[str, Any]: ...

    async def obsolete(self, pages: int = 1) -> dict[str, Any]: ...

    async def given_up(self, pages: int = 1) -> dict[str, Any]: ...

    async def set_queue(self, length: int) -> dict[str, Any]: ...

    async def status(self) -> dict[str, Any]: ...


class AgentHealth:
    """Whether the agent answers, shared by everything that talks to it, so an outage is logged once.

    Parameters
    ----------
    url : str
        The agent's base URL, for the message.
    consequence : str
        What the crawl does meanwhile (the message's second half).
    clock : callable
        Seconds, for the outage's length.
    """

    def __init__(self, url: str, consequence: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url
        self.consequence = consequence
        self.clock = clock
        self.down_since: float | None = None
        self.outages = 0
        #: why the agent refused our token (401/403), once it has: nothing more is sent
        self.refused_by: str | None = None
        #: what every log line carries (the extension sets ``{"spider": spider}``, as Scrapy's own lines do)
        self.log_extra: dict[str, Any] = {}

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, exc: BaseException) -> None:
        """A request found no agent: warn if that starts an outage."""
        if self.down_since is not None:
            return
        self.down_since = self.clock()
        self.outages += 1
        LOG.warning("robotctl: the agent at %s cannot be reached (%s); %s. This is logged once per outage.",
                    self.url, exc, self.consequence, extra=self.log_extra)

    def refused(self, exc: BaseException) -> None:
        """The agent refused our credentials (401/403): say so once, at ERROR, with the setting to fix;
        nothing more is sent to it for this crawl."""
        if self.refused_by is not None:
            return
        self.refused_by = str(exc)
        LOG.error("robotctl: the agent at %s refuses this crawl's token (%s); set ROBOTCTL_TOKEN (in settings.py "
                  "or the environment) to the agent's server.token. Nothing more is sent to it for this crawl, "
                  "and the robots follow ROBOTCTL_DEFAULT_STATE.", self.url, exc, extra=self.log_extra)

    def answered(self) -> None:
        """A request was answered: note the end of an outage."""
        if self.down_since is None:
            return
        LOG.info("robotctl: the agent at %s answers again after %.1f s", self.url, self.clock() - self.down_since,
                 extra=self.log_extra)
        self.down_since = None


class _Report(NamedTuple):
    kind: str  # delivery | completion | obsolete | given_up | queue (the caller's) | resync (the reporter's own)
    body: dict[str, Any]
    queue_length: int | None


@dataclass
class ReporterStats:
    """What the reporter did.

    Attributes
    ----------
    queued : int
        Reports made.
    sent : int
        Reports the agent acknowledged.
    requests : int
        Requests sent (batches).
    dropped : int
        Reports dropped: the agent was down, refused them, or too many were pending.
    rejected : int
        Requests the agent refused (4xx).
    resyncs : int
        Queue resynchronisations sent.
    mismatches : int
        Acknowledgements whose queue length differed from the indexer's.
    max_batch_seen : int
        Largest batch sent.
    coalesced : int
        Queue lengths not sent because a later one, sent instead, superseded them.
    """

    queued: int = 0
    sent: int = 0
    requests: int = 0
    dropped: int = 0
    rejected: int = 0
    resyncs: int = 0
    mismatches: int = 0
    max_batch_seen: int = 0
    coalesced: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class NullReporter:
    """A reporter that drops everything: what :func:`robotctl.scrapy.reporter` returns when the extension is
    off, so that pipelines need no test of their own."""

    enabled = False

    def deliver(self, pages: int = 1, bytes: int | None = None, robot: str | None = None,
                queue_length: int | None = None) -> None:
        return None

    def complete(self, pages: int = 1, service_s: float | None = None, bytes: int | None = None,
                 queue_length: int | None = None) -> None:
        return None

    def obsolete(self, pages: int = 1, queue_length: int | None = None) -> None:
        return None

    def given_up(self, pages: int = 1) -> None:
        return None

    def set_queue(self, length: int) -> None:
        return None


class Reporter:
    """See the module docstring.

    Parameters
    ----------
    client : Client
        An ``AgentClient``.
    health : AgentHealth
    flush_interval_s : float
        After the first pending report, wait this long before sending (0: at once).
    max_batch : int
        Most reports in one request.
    max_pending : int
        Most reports waiting; beyond it the oldest are dropped.
    retry_interval_s : float
        While the agent is down, try it again this often.
    clock : callable
        Monotonic seconds.
    wall : callable
        Wall-clock seconds: ``client_time`` of deliveries is ``wall()`` at start plus the monotonic time
        since, like the agent's own clock.
    """

    enabled = True

    def __init__(self, client: Client, health: AgentHealth, *, flush_interval_s: float = 0.0, max_batch: int = 500,
                 max_pending: int = 10_000, retry_interval_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.client = client
        self.health = health
        self.flush_interval_s = flush_interval_s
        self.max_batch = max_batch
        self.max_pending = max_pending
        self.retry_interval_s = retry_interval_s
        self.clock = clock
        self._offset = wall() - clock()
        self.stats = ReporterStats()
        self._pending: deque[_Report] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        #: the indexer's queue length after the last report dropped: the agent's view must be reset to it
        self._resync_to: int | None = None
        self._in_flight: list[_Report] = []
        self._rejected_fields: set[str] = set()
        self.last_ack: dict[str, Any] = {}
        #: robot ids the agent knows; a delivery naming another goes without its robot (the agent would
        #: refuse the whole batch). None: name every robot as given.
        self.robots: Container[str] | None = None

    # -- what callbacks call -------------------------------------------------------------------------
    def deliver(self, pages: int = 1, bytes: int | None = None, robot: str | None = None,
                queue_length: int | None = None) -> None:
        """``pages`` pages delivered to the indexer (by ``robot``, ``bytes`` in all)."""
        body: dict[str, Any] = {"pages": int(pages), "client_time": self.clock() + self._offset}
        if bytes is not None:
            body["bytes"] = int(bytes)
        if robot is not None and (self.robots is None or robot in self.robots):
            body["robot"] = robot
        self._push(_Report("delivery", body, queue_length))

    def complete(self, pages: int = 1, service_s: float | None = None, bytes: int | None = None,
                 queue_length: int | None = None) -> None:
        """``pages`` pages indexed, in ``service_s`` seconds and ``bytes`` bytes in all."""
        body: dict[str, Any] = {"pages": int(pages)}
        if service_s is not None:
            body["service_s"] = float(service_s)
        if bytes is not None:
            body["bytes"] = int(bytes)
        self._push(_Report("completion", body, queue_length))

    def obsolete(self, pages: int = 1, queue_length: int | None = None) -> None:
        """``pages`` waiting pages dropped as stale."""
        self._push(_Report("obsolete", {"pages": int(pages)}, queue_length))

    def given_up(self, pages: int = 1) -> None:
        """``pages`` pages the crawl wanted and gave up on (the server refused them, 429 or 503, beyond
        Scrapy's retries, or another error): never fetched, so never indexed; the agent counts them in
        its cost J like pages lost."""
        self._push(_Report("given_up", {"pages": int(pages)}, None))

    def set_queue(self, length: int) -> None:
        """The indexer's own count of pages in the system."""
        self._push(_Report("queue", {"length": int(length)}, int(length)))

    def _push(self, report: _Report) -> None:
        if self._closing:
            return
        self.stats.queued += 1
        if self.health.down or self.health.refused_by is not None:
            self._drop(report)
            return
        if len(self._pending) >= self.max_pending:
            self._drop(self._pending.popleft())
        self._pending.append(report)
        self._wake.set()

    def _drop_pending(self) -> None:
        for r in self._pending:
            self._drop(r)
        self._pending.clear()

    def _drop(self, report: _Report) -> None:
        if report.kind == "resync":
            return
        self.stats.dropped += 1
        if report.queue_length is not None:
            self._resync_to = report.queue_length

    # -- the sender ----------------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            if self.health.down:
                self._drop_pending()
                await asyncio.sleep(self.retry_interval_s)
                await self._probe()
                continue
            if self.health.refused_by is not None:
                self._drop_pending()
                self._wake.clear()
                await self._wake.wait()
                continue
            if not self._pending and self._resync_to is None:
                self._wake.clear()
                await self._wake.wait()
                if self.flush_interval_s > 0 and not self._closing:
                    await asyncio.sleep(self.flush_interval_s)
            await self._send_pending()

    async def _probe(self) -> None:
        try:
            await self.client.status()
        except AgentUnavailableError:
            return
        except AgentRejectedError:
            pass  # it answers
        self.health.answered()

    def _next_batch(self) -> list[_Report]:
        first = self._pending[0]
        batch = [self._pending.popleft()]
        if first.kind in ("delivery", "completion", "obsolete", "given_up"):
            while self._pending and self._pending[0].kind == first.kind and len(batch) < self.max_batch:
                batch.append(self._pending.popleft())
        elif first.kind == "queue":  # consecutive queue lengths: only the last one matters
            while self._pending and self._pending[0].kind == "queue":
                self.stats.coalesced += 1  # superseded by a later length, which is sent
                batch = [self._pending.popleft()]
        return batch

    async def _send_pending(self) -> None:
        while (self._pending or self._resync_to is not None) and not self.health.down:
            if self._resync_to is not None:
                length, self._resync_to = self._resync_to, None
                batch = [_Report("resync", {"length": length}, length)]
                self.stats.resyncs += 1
            else:
                batch = self._next_batch()
            self._in_flight = batch
            try:
                ack = await self._send(batch)
            except AgentUnavailableError as exc:
                self._in_flight = []
                self.health.failed(exc)
                for r in batch:
                    self._drop(r)
                self._drop_pending()
                if batch[0].kind == "resync" and self._resync_to is None:
                    self._resync_to = batch[0].queue_length  # still owed once the agent answers
                return
            except AgentRejectedError as exc:
                self._in_flight = []
                self.stats.rejected += 1
                for r in batch:
                    self._drop(r)
                if exc.status in (401, 403):
                    self.health.refused(exc)
                    self._drop_pending()
                    return
                if exc.field not in self._rejected_fields:
                    self._rejected_fields.add(exc.field)
                    LOG.warning("robotctl: the agent at %s refused %s reports (%s); they are dropped",
                                self.health.url, batch[0].kind, exc, extra=self.health.log_extra)
                continue
            self._in_flight = []  # (left as it is when cancelled: aclose counts it dropped)
            self.health.answered()
            self.stats.requests += 1
            if batch[0].kind != "resync":
                self.stats.sent += len(batch)
            self.stats.max_batch_seen = max(self.stats.max_batch_seen, len(batch))
            self.last_ack = ack
            want = batch[-1].queue_length
            got = ack.get("queue")
            if want is not None and got is not None and int(got) != want and batch[0].kind not in ("queue", "resync"):
                self.stats.mismatches += 1
                self._resync_to = want

    async def _send(self, batch: list[_Report]) -> dict[str, Any]:
        kind = batch[0].kind
        if kind == "delivery":
            return await self.client.deliver_many([r.body for r in batch])
        if kind == "completion":
            return await self.client.complete_many([r.body for r in batch])
        if kind == "obsolete":
            return await self.client.obsolete(sum(int(r.body["pages"]) for r in batch))
        if kind == "given_up":
            return await self.client.given_up(sum(int(r.body["pages"]) for r in batch))
        return await self.client.set_queue(int(batch[0].body["length"]))

    # -- shutdown ------------------------------------------------------------------------------------
    async def aclose(self, *, timeout_s: float = 5.0) -> None:
        """Send what is pending (for at most ``timeout_s``), then stop; later reports are ignored."""
        self._closing = True
        if self._task is None:
            return
        deadline = self.clock() + timeout_s
        while (self._pending or self._in_flight or self._resync_to is not None) and not self.health.down \
                and self.clock() < deadline:
            self._wake.set()
            await asyncio.sleep(0.01)
        self._drop_pending()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        for r in self._in_flight:  # cut short by the deadline
            self._drop(r)
        self._in_flight = []
        self._task = None
