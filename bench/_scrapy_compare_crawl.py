"""One crawl of bench/scrapy_compare.py, in a fresh interpreter (Twisted's reactor runs once per process).

    python bench/_scrapy_compare_crawl.py RUN.json OUT.json

RUN.json says what to crawl and how: ``{"name", "pages", "seed", "pipeline": "lossy" | "awaiting",
"settings": {...Scrapy settings...}, "workdir"}`` (bench/scrapy_compare.py writes it). The site and the
indexer below live in this process, on its event loop; the crawl starts at the site's first page and
runs to its end (Scrapy closes the spider when nothing is left to fetch or index). Writes what users
count to OUT.json (see :func:`result`).

The site (:class:`Site`, aiohttp on 127.0.0.1): ``pages`` pages ``/p/<n>``, page n linking to pages
``6n+1 .. 6n+6`` (a tree from ``/p/0``, so the frontier opens as the crawl goes, as a real crawl's does)
and, one page in seven, to a missing page (404). Each page answers after its own latency (lognormal,
median 0.12 s; one page in ten slow, 0.8-2 s) with 2-16 kB of HTML. It tolerates ``TOLERATED``
requests at once: beyond, it answers 429 (every fourth refusal 503) with ``Retry-After: 2``, and counts
the requests that come before the last Retry-After has passed.

The indexer (:class:`Indexer`, an item pipeline): one worker, about ``RATE`` items per second (Erlang-2
service times), a buffer of ``BUFFER`` items the one being indexed included, FIFO. ``lossy``: an item
arriving at a full buffer is lost (DropItem). ``awaiting`` (what Scrapy's backpressure needs): it waits
for room, holding its response in Scrapy's scraper. Either way a waiting item whose useful life
(exponential, mean ``USEFUL_LIFE_S``, drawn per page) runs out before its indexing starts is dropped as
obsolete at that moment.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scrapy.utils.reactor import install_reactor

install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")

import scrapy  # noqa: E402
from aiohttp import web  # noqa: E402
from scrapy import signals  # noqa: E402
from scrapy.crawler import AsyncCrawlerRunner  # noqa: E402
from scrapy.exceptions import DropItem  # noqa: E402

#: the site: children per page, requests tolerated at once, Retry-After (s), share of pages linking to a 404
FANOUT, TOLERATED, RETRY_AFTER_S, BROKEN_SHARE = 6, 6, 2, 1 / 7
#: the indexer: items per second, buffer (the one being indexed included), mean useful life (s)
RATE, BUFFER, USEFUL_LIFE_S = 6.0, 10, 10.0


class Site:
    """The site of the module docstring; its counts in :meth:`counts`."""

    def __init__(self, pages: int, seed: int) -> None:
        rng = np.random.default_rng([seed, 1])
        self.pages = pages
        self.latency = rng.lognormal(math.log(0.12), 0.5, pages)
        slow = rng.random(pages) < 0.1
        self.latency[slow] = rng.uniform(0.8, 2.0, int(slow.sum()))
        self.size = rng.integers(2_000, 16_000, pages)
        self.broken = rng.random(pages) < BROKEN_SHARE
        self.in_flight = 0
        self.requests = 0
        self.served: set[int] = set()
        self.refused = {429: 0, 503: 0}
        self.missing = 0
        self.early = 0
        self.retry_after_until = 0.0
        self.max_in_flight = 0
        self.refused_at: list[float] = []

    def html(self, n: int) -> str:
        children = range(FANOUT * n + 1, min(FANOUT * n + FANOUT, self.pages - 1) + 1)
        links = [f'<a href="/p/{c}">page {c}</a>' for c in children]
        if self.broken[n]:
            links.append(f'<a href="/p/{self.pages + n}">gone</a>')
        head = f"<html><body><h1>page {n}</h1>{' '.join(links)}<p>"
        filler = "lorem ipsum dolor sit amet " * (int(self.size[n]) // 27 + 1)
        return head + filler[: max(0, int(self.size[n]) - len(head))] + "</p></body></html>"

    async def page(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        self.requests += 1
        now = time.monotonic()
        if now < self.retry_after_until - 0.05:
            self.early += 1
        if self.in_flight >= TOLERATED:
            refused = sum(self.refused.values())
            status = 503 if refused % 4 == 3 else 429
            self.refused[status] += 1
            self.refused_at.append(now)
            self.retry_after_until = max(self.retry_after_until, now + RETRY_AFTER_S)
            return web.Response(status=status, headers={"Retry-After": str(RETRY_AFTER_S)})
        if n >= self.pages:
            self.missing += 1
            return web.Response(status=404, text="not found")
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(float(self.latency[n]))
        finally:
            self.in_flight -= 1
        self.served.add(n)
        return web.Response(text=self.html(n), content_type="text/html")

    def counts(self) -> dict[str, Any]:
        return {"pages": self.pages, "requests": self.requests, "served": len(self.served),
                "refused_429": self.refused[429], "refused_503": self.refused[503], "missing_404": self.missing,
                "before_retry_after": self.early, "max_in_flight": self.max_in_flight}


@dataclass
class Entry:
    """One item in the indexer: when it entered, its deadline, and what became of it."""

    enter: float
    deadline: float
    started: asyncio.Future[None]
    finished: asyncio.Future[None]
    start: float = math.nan
    end: float = math.nan
    outcome: str = "waiting"


@dataclass
class Indexer:
    """The indexer of the module docstring; its records for :func:`result`."""

    seed: int
    awaiting: bool
    outside: deque[Entry] = field(default_factory=deque)  # waiting for room (awaiting only)
    queue: deque[Entry] = field(default_factory=deque)  # in the buffer, waiting for service
    in_service: Entry | None = None
    done: list[Entry] = field(default_factory=list)
    level_time: list[float] = field(default_factory=lambda: [0.0] * (BUFFER + 1))
    lost: int = 0
    lost_at: list[float] = field(default_factory=list)
    last_exit: float = 0.0
    idle: list[list[float]] = field(default_factory=list)  # [start, end] of each stretch with nothing to index

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng([self.seed, 2])
        self.wake = asyncio.Event()
        self.level = 0
        self.level_since = time.monotonic()
        self.idle.append([self.level_since, math.inf])
        self.task = asyncio.ensure_future(self.serve())

    def _set_level(self) -> None:
        now = time.monotonic()
        self.level_time[self.level] += now - self.level_since
        self.level_since = now
        was, self.level = self.level, len(self.queue) + (self.in_service is not None)
        if was == 0 and self.level > 0:
            self.idle[-1][1] = now
        elif was > 0 and self.level == 0:
            self.idle.append([now, math.inf])

    def _admit(self) -> None:
        while self.outside and self.level < BUFFER:
            self.queue.append(self.outside.popleft())
            self._set_level()
        self.wake.set()

    async def serve(self) -> None:
        while True:
            while not self.queue:
                self.wake.clear()
                await self.wake.wait()
            e = self.queue.popleft()
            e.start = time.monotonic()
            e.started.set_result(None)
            self.in_service = e
            await asyncio.sleep(float(self.rng.gamma(2.0, 0.5 / RATE)))
            self.in_service = None
            e.outcome = "indexed"
            e.end = self.last_exit = time.monotonic()
            self._set_level()
            e.finished.set_result(None)
            self._admit()

    async def index(self, life: float) -> None:
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        e = Entry(now, now + life, loop.create_future(), loop.create_future())
        if self.level >= BUFFER or self.outside:
            if not self.awaiting:
                self.lost += 1
                self.lost_at.append(now)
                self.last_exit = now
                raise DropItem("the index buffer is full: lost")
            self.outside.append(e)
        else:
            self.queue.append(e)
            self._set_level()
            self.wake.set()
        await asyncio.wait([e.started], timeout=life)
        if not e.started.done():  # its useful life ran out while it waited
            e.outcome = "obsolete"
            (self.outside if e in self.outside else self.queue).remove(e)
            self._set_level()
            self._admit()
            self.done.append(e)
            self.last_exit = time.monotonic()
            raise DropItem("obsolete before indexing")
        await e.finished
        self.done.append(e)

    def close(self) -> None:
        self._set_level()
        self.task.cancel()


class IndexerPipeline:
    """The indexer as Scrapy's item pipeline (``BENCH_AWAITING``: wait for room rather than lose)."""

    last: Indexer | None = None

    def __init__(self, seed: int, awaiting: bool) -> None:
        self.seed, self.awaiting = seed, awaiting

    @classmethod
    def from_crawler(cls, crawler: Any) -> IndexerPipeline:
        return cls(crawler.settings.getint("BENCH_SEED"), crawler.settings.getbool("BENCH_AWAITING"))

    def open_spider(self, spider: Any = None) -> None:
        IndexerPipeline.last = Indexer(self.seed, self.awaiting)

    async def process_item(self, item: Any, spider: Any = None) -> Any:
        assert IndexerPipeline.last is not None
        life = float(np.random.default_rng([self.seed, 3, int(item["n"])]).exponential(USEFUL_LIFE_S))
        await IndexerPipeline.last.index(life)
        return item

    def close_spider(self, spider: Any = None) -> None:
        if IndexerPipeline.last is not None:
            IndexerPipeline.last.close()


class SiteSpider(scrapy.Spider):
    name = "site"

    def __init__(self, base: str = "", **kw: Any) -> None:
        super().__init__(**kw)
        self.base = base

    async def start(self) -> Any:
        yield scrapy.Request(f"{self.base}/p/0")

    def parse(self, response: Any) -> Any:
        yield {"url": response.url, "n": int(response.url.rsplit("/", 1)[1])}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href)


class Clock:
    """Downloads in flight over time (one download = one robot), the last response, and the policies
    robotctl's agent had in force (sampled once a second)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.in_flight = 0
        self.since = self.t0
        self.integral = 0.0
        self.last_response = self.t0
        self.policies: list[dict[str, Any]] = []

    def change(self, delta: int) -> None:
        now = time.monotonic()
        self.integral += self.in_flight * (now - self.since)
        self.since, self.in_flight = now, self.in_flight + delta

    def reached(self, request: Any, spider: Any = None) -> None:
        self.change(+1)

    def left(self, request: Any, spider: Any = None) -> None:
        self.change(-1)

    def response(self, response: Any, request: Any, spider: Any = None) -> None:
        self.last_response = time.monotonic()


async def watch_policy(crawler: Any, clock: Clock) -> None:
    from robotctl.scrapy._extension import extension

    while True:
        await asyncio.sleep(1.0)
        ext = extension(crawler)
        if ext is None or not ext.handles:
            continue
        try:
            p = await ext.client.policy()
        except Exception:  # a sample missed; the crawl is what counts
            continue
        key = (tuple(p["robots_at_level"]), p["source"])
        if not clock.policies or (tuple(clock.policies[-1]["robots_at_level"]), clock.policies[-1]["source"]) != key:
            clock.policies.append({"robots_at_level": list(key[0]), "source": key[1],
                                   "at_s": round(time.monotonic() - clock.t0, 1),
                                   "items": ext.delivered})


async def crawl(run: dict[str, Any]) -> dict[str, Any]:
    site = Site(int(run["pages"]), int(run["seed"]))
    app = web.Application()
    app.router.add_get("/p/{n}", site.page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = runner.addresses[0][1]
    workdir = Path(run["workdir"])
    settings: dict[str, Any] = {
        "CONCURRENT_REQUESTS": 16, "CONCURRENT_REQUESTS_PER_DOMAIN": 16, "DOWNLOAD_DELAY": 0,
        "ROBOTSTXT_OBEY": False, "TELNETCONSOLE_ENABLED": False, "LOG_LEVEL": "INFO",
        "LOG_FILE": str(workdir / f"{run['name']}.log"), "LOG_FILE_APPEND": False,
        "ITEM_PIPELINES": {"__main__.IndexerPipeline": 300},
        "BENCH_SEED": int(run["seed"]), "BENCH_AWAITING": run["pipeline"] == "awaiting",
        **run["settings"]}
    from scrapy.utils.log import configure_logging

    configure_logging(settings)
    crawler_runner = AsyncCrawlerRunner(settings)
    crawler = crawler_runner.create_crawler(SiteSpider)
    clock = Clock()
    crawler.signals.connect(clock.reached, signal=signals.request_reached_downloader)
    crawler.signals.connect(clock.left, signal=signals.request_left_downloader)
    crawler.signals.connect(clock.response, signal=signals.response_received)
    watcher = asyncio.ensure_future(watch_policy(crawler, clock))
    clock.t0 = time.monotonic()
    await crawler_runner.crawl(crawler, base=f"http://127.0.0.1:{port}")
    wall = time.monotonic() - clock.t0
    watcher.cancel()
    await runner.cleanup()
    indexer = IndexerPipeline.last
    assert indexer is not None and crawler.stats is not None
    stats = {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, int | float | str)}
    return result(run, site, indexer, clock, stats, wall)


def result(run: dict[str, Any], site: Site, indexer: Indexer, clock: Clock, stats: dict[str, Any],
           wall: float) -> dict[str, Any]:
    """What users count. ``crawl_s``: from the first request to the last response or the last item leaving
    the indexer, whichever is later (Scrapy's own shutdown left out, the same for every run). ``idle``: the
    stretches of it with nothing to index, ``[start, end]`` seconds from its start; ``refused_at``: when
    the site answered 429 or 503."""
    end = max(clock.last_response, indexer.last_exit)
    crawl_s = end - clock.t0
    clock.change(0)
    indexed = [e for e in indexer.done if e.outcome == "indexed"]
    waits = np.array([e.start - e.enter for e in indexed]) if indexed else np.array([math.nan])
    obsolete = sum(e.outcome == "obsolete" for e in indexer.done)
    level = np.array(indexer.level_time)
    # the stretches with nothing to index, the first from the crawl's start (before the pipelines opened)
    idle = [[min(a, clock.t0) if k == 0 else a, b] for k, (a, b) in enumerate(indexer.idle)]
    return {
        "name": run["name"], "pipeline": run["pipeline"], "settings": run["settings"], "pages": site.pages,
        "seed": run["seed"], "offered": len(indexer.done) + indexer.lost, "indexed": len(indexed),
        "lost": indexer.lost, "obsolete": obsolete, "crawl_s": crawl_s, "wall_s": wall,
        "p95_wait_s": float(np.percentile(waits, 95)), "mean_wait_s": float(np.mean(waits)),
        "mean_response_s": float(np.mean([e.end - e.enter for e in indexed])) if indexed else math.nan,
        "level_seconds": level.tolist(), "download_seconds": clock.integral,
        "arrivals": sorted([(round(e.enter - clock.t0, 2), e.outcome) for e in indexer.done]
                           + [(round(t - clock.t0, 2), "lost") for t in indexer.lost_at]),
        "idle": [[round(max(a, clock.t0) - clock.t0, 3), round(min(b, end) - clock.t0, 3)] for a, b in idle
                 if min(b, end) > max(a, clock.t0)],
        "refused_at": [round(t - clock.t0, 3) for t in site.refused_at],
        "site": site.counts(), "given_up": int(stats.get("retry/max_reached", 0)), "policies": clock.policies,
        "scrapy": {k: v for k, v in stats.items() if k.startswith(("robotctl/", "retry/", "downloader/response_status",
                                                                  "item_", "finish_reason", "log_count/"))},
    }


def main() -> int:
    run = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    from twisted.internet import reactor

    done: list[dict[str, Any] | BaseException] = []

    async def go() -> None:
        try:
            done.append(await crawl(run))
        except BaseException as exc:  # reported below, after the reactor stops
            import traceback

            traceback.print_exc()
            done.append(exc)
        finally:
            reactor.stop()  # type: ignore[attr-defined]

    reactor.callWhenRunning(lambda: asyncio.ensure_future(go()))  # type: ignore[attr-defined]
    reactor.run()  # type: ignore[attr-defined]
    if not done or isinstance(done[0], BaseException):
        return 1
    out.write_text(json.dumps(done[0], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
