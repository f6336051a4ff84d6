"""The agent link: reports in the indexer's order keep the agent's queue view equal to the indexer's."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from robotctl.agent.queue import QueueView
from robotctl.crawler import AgentLink, Document, Indexer, IndexerConfig


class FakeAgent:
    """The agent's queue arithmetic (agent.queue.QueueView), answering as the agent does."""

    def __init__(self, capacity: int, *, delay_s: float = 0.0) -> None:
        self.view = QueueView(capacity)
        self.delay_s = delay_s
        self.calls: list[tuple[str, Any]] = []

    async def deliver(self, robot_id: str | None, pages: int = 1, bytes: int | None = None,
                      client_time: float | None = None) -> dict[str, Any]:
        await asyncio.sleep(self.delay_s)
        self.calls.append(("deliver", (robot_id, pages, client_time)))
        self.view.admit(self.view.preview([pages])[0].admitted, 0.0)
        return {"queue": self.view.length}

    async def complete(self, pages: int = 1, service_s: float | None = None,
                       bytes: int | None = None) -> dict[str, Any]:
        await asyncio.sleep(self.delay_s)
        self.calls.append(("complete", (pages, service_s)))
        self.view.complete(pages, 0.0)
        return {"queue": self.view.length}

    async def obsolete(self, pages: int = 1) -> dict[str, Any]:
        await asyncio.sleep(self.delay_s)
        self.calls.append(("obsolete", pages))
        self.view.drop_obsolete(pages)
        return {"queue": self.view.length}


def docs(n: int, expires_at: float | None = None, size: int = 400) -> list[Document]:
    return [Document(f"u{i}", b"<p>word</p>" + b" " * size, 0.0, expires_at, "r") for i in range(n)]


async def crawl(tmp_path: Path, link: AgentLink, indexer: Indexer) -> None:
    loop = asyncio.get_running_loop()
    link.start()
    task = asyncio.ensure_future(indexer.run())
    for k in (3, 1, 4, 2, 5, 1):
        indexer.offer("r1", docs(k, expires_at=loop.time() + 0.03))
        await asyncio.sleep(0.01)
    while indexer.length:
        await asyncio.sleep(0.01)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await link.drain()


async def test_ordered_reports_keep_the_agent_view_equal(tmp_path: Path) -> None:
    agent = FakeAgent(4, delay_s=0.002)
    link = AgentLink(agent)
    ix = Indexer(IndexerConfig(capacity=4, processing_rate_bps=8_000.0), db_path=":memory:", on_event=link.push)
    await crawl(tmp_path, link, ix)
    await link.close()
    assert ix.totals.lost > 0 and ix.totals.obsolete > 0           # the run exercised every kind of event
    assert link.stats.sent == ix.events and link.stats.failed == 0
    assert link.stats.compared == ix.events and link.stats.mismatches == 0
    assert agent.view.length == ix.length == 0
    assert link.stats.max_backlog >= 1
    ix.close()


async def test_a_link_that_reorders_is_caught(tmp_path: Path) -> None:
    """Teeth: a link that sends completions ahead of deliveries makes the views disagree, and it shows."""

    class Reordering(AgentLink):
        async def _run(self) -> None:
            pending = []
            while True:
                ev = await self._queue.get()
                if ev is None:
                    self._queue.task_done()
                    break
                pending.append(ev)
                if len(pending) == 6:
                    pending.sort(key=lambda e: e.kind != "completion")
                    for e in pending:
                        ack = await self._send(e)
                        self.stats.compared += 1
                        self.stats.mismatches += int(ack["queue"] != e.length)
                        self._queue.task_done()
                    pending = []
            for e in pending:
                ack = await self._send(e)
                self.stats.compared += 1
                self.stats.mismatches += int(ack["queue"] != e.length)
                self._queue.task_done()

    agent = FakeAgent(4)
    link = Reordering(agent)
    ix = Indexer(IndexerConfig(capacity=4, processing_rate_bps=40_000.0), db_path=":memory:", on_event=link.push)
    link.start()
    task = asyncio.ensure_future(ix.run())
    for k in (3, 1, 4, 2, 5, 1):
        ix.offer("r1", docs(k))
        await asyncio.sleep(0.01)
    while ix.length:
        await asyncio.sleep(0.01)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await link.close()
    assert link.stats.mismatches > 0
    ix.close()
