"""The indexer as an item pipeline: robotctl.crawler's :class:`Indexer` (the demo's), fed by the spider.

Each item is offered to an indexer with a buffer of ``INDEXER_CAPACITY`` documents (the one being
indexed included; what does not fit is lost), served FIFO by real indexing work (parse, tokenise,
SQLite) paced to ``INDEXER_PROCESSING_RATE_BPS``, and a waiting document is dropped as obsolete when
its content changes at the source (its ``X-Useful-Life-S``). Every change of the queue is reported
to the agent, in order, through :func:`robotctl.scrapy.reporter`, with the indexer's queue length, so
the agent's view of the queue is the indexer's (and is resynchronised after an outage).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, ClassVar

from itemadapter import ItemAdapter
from scrapy.crawler import Crawler

from robotctl.crawler import Document, Indexer, IndexerConfig, QueueEvent
from robotctl.scrapy import reporter


class IndexerPipeline:
    """See the module docstring. :attr:`last` is the pipeline of the running crawl (for run.py)."""

    last: ClassVar[IndexerPipeline | None] = None

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        self.crawler = crawler
        rate = s.get("INDEXER_PROCESSING_RATE_BPS")
        self.config = IndexerConfig(capacity=s.getint("INDEXER_CAPACITY", 8),
                                    processing_rate_bps=None if rate is None else float(rate))
        self.db_path = str(s.get("INDEXER_DB", "index.sqlite"))
        self.indexer: Indexer | None = None
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> IndexerPipeline:
        return cls(crawler)

    def open_spider(self, spider: Any = None) -> None:
        self.indexer = Indexer(self.config, db_path=self.db_path, on_event=self._report)
        self._task = asyncio.ensure_future(self.indexer.run())
        IndexerPipeline.last = self

    def _report(self, ev: QueueEvent) -> None:
        rep = reporter(self.crawler)
        if ev.kind == "delivery":
            rep.deliver(ev.pages, bytes=ev.bytes, robot=ev.robot, queue_length=ev.length)
        elif ev.kind == "completion":
            rep.complete(ev.pages, service_s=ev.service_s, bytes=ev.bytes, queue_length=ev.length)
        else:
            rep.obsolete(ev.pages, queue_length=ev.length)

    def process_item(self, item: Any, spider: Any = None) -> Any:
        assert self.indexer is not None
        a = ItemAdapter(item)
        now = self.indexer.now()
        life = a.get("useful_life_s")
        robot = str(a.get("robot") or "scrapy")
        doc = Document(str(a["url"]), bytes(a["body"]), now, None if life is None else now + float(life), robot)
        self.indexer.offer(robot, [doc])
        return item

    def stop(self) -> None:
        """Freeze the indexer's queue (the measures are taken): no expiry, no service from now on."""
        if self.indexer is not None:
            self.indexer.stop()
        if self._task is not None:
            self._task.cancel()

    async def close_spider(self, spider: Any = None) -> None:
        self.stop()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.indexer is not None:
            await asyncio.to_thread(self.indexer.close)
