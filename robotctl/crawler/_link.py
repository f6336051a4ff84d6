"""The indexer's and robots' reports to the agent, sent in the order they happened.

The agent keeps its own view of the queue from what it is told (deliveries in with partial admission
at K, completions and obsolete drops out). Sent in the order the indexer saw them, those reports let
the agent's view equal the indexer's count exactly; :class:`AgentLink` therefore sends every
:class:`QueueEvent` through one queue, one request at a time, and checks each acknowledgement's
``queue`` against the indexer's count after the same event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from ._indexer import QueueEvent

LOG = logging.getLogger("robotctl.crawler.link")


class Reporter(Protocol):
    """The part of ``agent.client.AgentClient`` the link uses."""

    async def deliver(self, robot_id: str | None, pages: int = 1, bytes: int | None = None,
                      client_time: float | None = None) -> dict[str, Any]: ...

    async def complete(self, pages: int = 1, service_s: float | None = None,
                       bytes: int | None = None) -> dict[str, Any]: ...

    async def obsolete(self, pages: int = 1) -> dict[str, Any]: ...


@dataclass
class LinkStats:
    """What the link sent and how the agent's queue compared with the indexer's."""

    sent: int = 0
    failed: int = 0
    compared: int = 0
    mismatches: int = 0
    last_mismatch: str = ""
    max_backlog: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class AgentLink:
    """Reports :class:`QueueEvent` s to the agent in order; :meth:`push` is the indexer's ``on_event``.

    Parameters
    ----------
    client : Reporter
        An ``agent.client.AgentClient``.
    clock_offset : float
        Added to loop times to form the ``client_time`` of deliveries.
    """

    def __init__(self, client: Reporter, *, clock_offset: float = 0.0) -> None:
        self.client = client
        self.clock_offset = clock_offset
        self._queue: asyncio.Queue[QueueEvent | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.stats = LinkStats()
        self.agent_queue: int | None = None

    def push(self, event: QueueEvent) -> None:
        self._queue.put_nowait(event)
        self.stats.max_backlog = max(self.stats.max_backlog, self._queue.qsize())

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _send(self, ev: QueueEvent) -> dict[str, Any]:
        if ev.kind == "delivery":
            return await self.client.deliver(ev.robot, pages=ev.pages, bytes=ev.bytes,
                                             client_time=ev.t + self.clock_offset)
        if ev.kind == "completion":
            return await self.client.complete(pages=ev.pages, service_s=ev.service_s, bytes=ev.bytes)
        return await self.client.obsolete(pages=ev.pages)

    async def _run(self) -> None:
        from robotctl.model import RobotctlError

        while True:
            ev = await self._queue.get()
            if ev is None:
                self._queue.task_done()
                return
            try:
                ack = await self._send(ev)
            except RobotctlError as exc:
                self.stats.failed += 1
                LOG.warning("event=report_failed kind=%s error=%s", ev.kind, exc)
            else:
                self.stats.sent += 1
                q = ack.get("queue")
                if q is not None:
                    self.agent_queue = int(q)
                    self.stats.compared += 1
                    if int(q) != ev.length:
                        self.stats.mismatches += 1
                        self.stats.last_mismatch = f"after {ev.kind} at t={ev.t:.3f}: agent {q}, " \
                                                   f"indexer {ev.length}"
            finally:
                self._queue.task_done()

    async def drain(self) -> None:
        """Wait until every event pushed so far has been sent."""
        await self._queue.join()

    async def close(self) -> None:
        """Send what is queued, then stop."""
        if self._task is None:
            return
        self._queue.put_nowait(None)
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
