"""``RobotctlPipeline``: every item that reaches it counts as one page indexed (a completion).

Put it in ``ITEM_PIPELINES`` after the pipeline that indexes (a higher number), so that an item reaches
it once its indexing is done::

    ITEM_PIPELINES = {"myproject.pipelines.ElasticsearchPipeline": 300,
                      "robotctl.scrapy.RobotctlPipeline": 900}

The completion carries the item's indexing time and size when the item has them, in the fields named
by ``ROBOTCTL_SERVICE_FIELD`` (default ``robotctl_service_s``, seconds) and ``ROBOTCTL_BYTES_FIELD``
(default ``robotctl_bytes``); without them the agent needs ``fit.processing_rate_bps`` (or completions
with times from elsewhere) to fit the service law. Items dropped before it (``DropItem``) are not
counted. An indexer that is not a pipeline reports with :func:`robotctl.scrapy.reporter` instead.
"""

from __future__ import annotations

import math
from typing import Any

from itemadapter import ItemAdapter
from scrapy.crawler import Crawler

from ._extension import extension, reporter


class RobotctlPipeline:
    """See the module docstring."""

    def __init__(self, crawler: Crawler, *, service_field: str = "robotctl_service_s",
                 bytes_field: str = "robotctl_bytes") -> None:
        self.crawler = crawler
        self.service_field = service_field
        self.bytes_field = bytes_field
        self.completed = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RobotctlPipeline:
        s = crawler.settings
        return cls(crawler, service_field=str(s.get("ROBOTCTL_SERVICE_FIELD", "robotctl_service_s")),
                   bytes_field=str(s.get("ROBOTCTL_BYTES_FIELD", "robotctl_bytes")))

    def process_item(self, item: Any, spider: Any = None) -> Any:
        adapter = ItemAdapter(item)
        service = _number(adapter.get(self.service_field))
        size = _number(adapter.get(self.bytes_field))
        reporter(self.crawler).complete(1, service_s=service, bytes=int(size) if size is not None else None)
        self.completed += 1
        return item


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        return None
    return float(v)


class RobotctlEntryPipeline:
    """First in ``ITEM_PIPELINES`` (the add-on puts it there): an item entering the item pipelines is one
    delivery to the indexer (``ROBOTCTL_DELIVERY_SIGNAL = "item"``); the extension counts it leaving them
    (``item_scraped``, ``item_dropped``, ``item_error``) as a completion."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RobotctlEntryPipeline:
        return cls(crawler)

    def process_item(self, item: Any, spider: Any = None) -> Any:
        ext = extension(self.crawler)
        if ext is not None:
            ext.item_entered(item)
        return item
