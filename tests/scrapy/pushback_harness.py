"""A Scrapy crawl of a server that pushes back, for tests/scrapy/test_pushback.py.

    python tests/scrapy/pushback_harness.py addon|plain OUT.json

The server (in this process) serves ``PAGES`` pages of 0.1 s each and answers 429 with ``Retry-After: 1``
whenever more than ``TOLERATED`` requests are in flight. ``addon`` crawls it with robotctl's add-on,
``plain`` without; both with 8 concurrent requests and Scrapy's default retries (2). Writes Scrapy's
stats and two counts of requests before a ``Retry-After``:

- ``early`` (the server's): requests that arrived within ``Retry-After`` of the last 429 the server sent,
  those already on their way when it sent it included (no client can call them back);
- ``sent_while_held`` (the crawler's): requests that reached the downloader after the crawler had received
  a 429 and before its ``Retry-After`` had passed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from scrapy.utils.reactor import install_reactor

install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")

import scrapy  # noqa: E402
from aiohttp import web  # noqa: E402
from scrapy import signals  # noqa: E402
from scrapy.crawler import AsyncCrawlerRunner  # noqa: E402

PAGES, TOLERATED = 120, 2


class Server:
    def __init__(self) -> None:
        self.in_flight = 0
        self.pages_served: set[int] = set()
        self.refused = 0
        self.early = 0  # requests that came before the Retry-After of the last 429
        self.retry_after_until = 0.0
        self.requests = 0

    async def page(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        now = time.monotonic()
        self.requests += 1
        if now < self.retry_after_until - 0.05:
            self.early += 1
        if self.in_flight >= TOLERATED:
            self.refused += 1
            self.retry_after_until = max(self.retry_after_until, now + 1.0)
            return web.Response(status=429, headers={"Retry-After": "1"})
        self.in_flight += 1
        try:
            await asyncio.sleep(0.1)
        finally:
            self.in_flight -= 1
        self.pages_served.add(n)
        return web.Response(text=f"<html><body>page {n}</body></html>", content_type="text/html")


class Pages(scrapy.Spider):
    name = "pages"

    def __init__(self, base: str = "", **kw: Any) -> None:
        super().__init__(**kw)
        self.base = base

    async def start(self) -> Any:
        for n in range(PAGES):
            yield scrapy.Request(f"{self.base}/p/{n}")

    def parse(self, response: Any) -> Any:
        yield {"url": response.url}


async def main(mode: str, out: Path, workdir: Path) -> None:
    server = Server()
    app = web.Application()
    app.router.add_get("/p/{n}", server.page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    settings: dict[str, Any] = {"CONCURRENT_REQUESTS": 8, "CONCURRENT_REQUESTS_PER_DOMAIN": 8, "DOWNLOAD_DELAY": 0,
                                "ROBOTSTXT_OBEY": False, "LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False}
    if mode == "addon":
        extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}  # more settings, e.g. for debugging
        settings.update({"ADDONS": {"robotctl.scrapy.Addon": 100}, "ROBOTCTL_CAPACITY": 50, **extra,
                         "ROBOTCTL_DIR": str(workdir / ".robotctl")})
    from scrapy.utils.log import configure_logging

    configure_logging(settings)
    crawler_runner = AsyncCrawlerRunner(settings)
    crawler = crawler_runner.create_crawler(Pages)
    held = {"until": 0.0, "sent": 0}

    def received(response: Any, request: Any, spider: Any = None) -> None:
        if response.status == 429:
            wait = float(response.headers.get(b"Retry-After", b"0"))
            held["until"] = max(held["until"], time.monotonic() + wait)

    def reached(request: Any, spider: Any = None) -> None:
        if time.monotonic() < held["until"] - 0.01:  # (the crawler learns of a 429 a moment before this)
            held["sent"] += 1

    crawler.signals.connect(received, signal=signals.response_downloaded)
    crawler.signals.connect(reached, signal=signals.request_reached_downloader)
    t0 = time.monotonic()
    await crawler_runner.crawl(crawler, base=f"http://127.0.0.1:{port}")
    elapsed = time.monotonic() - t0
    await runner.cleanup()
    assert crawler.stats is not None
    stats = {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, int | float | str)}
    out.write_text(json.dumps({"stats": stats, "served": len(server.pages_served), "refused": server.refused,
                               "early": server.early, "sent_while_held": held["sent"],
                               "requests": server.requests, "elapsed_s": elapsed}))


if __name__ == "__main__":
    from twisted.internet import reactor

    done: list[BaseException | None] = []

    async def run() -> None:
        try:
            await main(sys.argv[1], Path(sys.argv[2]), Path.cwd())
            done.append(None)
        except BaseException as exc:
            import traceback

            traceback.print_exc()
            done.append(exc)
        finally:
            reactor.stop()  # type: ignore[attr-defined]

    reactor.callWhenRunning(lambda: asyncio.ensure_future(run()))  # type: ignore[attr-defined]
    reactor.run()  # type: ignore[attr-defined]
    sys.exit(0 if done and done[0] is None else 1)
