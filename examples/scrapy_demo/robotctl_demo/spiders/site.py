"""The spider: every page and its embedded resources (iframes) become items for the indexer; links are
followed across the site's hosts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy.http import Response

from robotctl.crawler import FetchResult, useful_life


def slot_meta(url: str) -> dict[str, str]:
    """Each host of the site (127.0.0.1:port) its own download slot, so DOWNLOAD_DELAY is per host."""
    return {"download_slot": urlsplit(url).netloc}


class SiteSpider(scrapy.Spider):
    """Crawl from ``seeds`` (comma-separated URLs, ``-a seeds=...``)."""

    name = "site"

    def __init__(self, seeds: str | list[str] = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seeds = [s for s in (seeds.split(",") if isinstance(seeds, str) else seeds) if s]

    async def start(self) -> AsyncIterator[scrapy.Request]:
        for url in self.seeds:
            yield scrapy.Request(url, meta=slot_meta(url))

    def item(self, response: Response) -> dict[str, Any]:
        headers = {k.decode("latin-1").lower(): vs[0].decode("latin-1") for k, vs in response.headers.items() if vs}
        life = useful_life(FetchResult(response.url, response.status, response.body, headers), None)
        return {"url": response.url, "body": response.body, "useful_life_s": life,
                "robot": response.meta.get("robotctl_robot")}

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        yield self.item(response)
        for src in response.css("iframe::attr(src)").getall():
            url = response.urljoin(src)
            yield scrapy.Request(url, callback=self.parse_resource, priority=1, meta=slot_meta(url))
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href)
            yield scrapy.Request(url, meta=slot_meta(url))

    def parse_resource(self, response: Response) -> Iterator[Any]:
        yield self.item(response)
