"""A real Scrapy crawl of the demo site with RobotctlExtension, for tests/scrapy/test_crawl.py.

Run in a fresh interpreter (Twisted's reactor runs once per process)::

    python tests/scrapy/crawl_harness.py park OUT.json     # the agent parks every robot for 2 s, mid-crawl
    python tests/scrapy/crawl_harness.py down OUT.json     # no agent at all: a finite crawl of 150 pages
    python tests/scrapy/crawl_harness.py items OUT.json    # deliveries on item_scraped, RobotctlPipeline
    python tests/scrapy/crawl_harness.py parked OUT.json   # no agent, ROBOTCTL_DEFAULT_STATE = parked, 2 s

Writes what happened to OUT.json: the crawl's timeline (requests reaching the downloader, responses,
the engine's pause flag and concurrency), Scrapy's stats, the agent's totals and the log records.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scrapy.utils.reactor import install_reactor

install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")

import scrapy  # noqa: E402
from scrapy import signals  # noqa: E402
from scrapy.crawler import AsyncCrawlerRunner  # noqa: E402

from robotctl.agent.app import AGENT, run_in_process  # noqa: E402
from robotctl.agent.config import AgentConfig  # noqa: E402
from robotctl.crawler import SiteConfig, run_site  # noqa: E402

#: park every robot once this many requests reached the downloader, resume PARKED_S later, stop once as
#: many more came after the resume (counts, not times: a loaded machine starts Scrapy slowly)
PARK_AFTER, PARKED_S, LIMIT_S = 40, 2.0, 60.0
DOWN_PAGES = 150


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append({"level": record.levelname, "name": record.name, "message": record.getMessage()})


class SiteSpider(scrapy.Spider):
    name = "harness"

    def __init__(self, seeds: list[str] | None = None, follow: bool = True, items: bool = False, **kw: Any) -> None:
        super().__init__(**kw)
        self.seeds = seeds or []
        self.follow = follow
        self.items = items

    async def start(self) -> Any:
        for url in self.seeds:
            yield scrapy.Request(url, meta={"download_slot": url.split("/")[2]})

    def parse(self, response: Any) -> Any:
        if self.items:  # an item per page, with the size and "indexing time" RobotctlPipeline reports
            yield {"url": response.url, "robotctl_bytes": len(response.body), "robotctl_service_s": 0.01}
        if not self.follow:
            return
        for href in response.css("a::attr(href)").getall()[:6]:
            url = response.urljoin(href)
            if "/p/" in url:
                yield scrapy.Request(url, meta={"download_slot": url.split("/")[2]})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def main(scenario: str, out: Path) -> None:
    records = Records()
    logging.getLogger().addHandler(records)
    logging.getLogger().setLevel(logging.INFO)
    timeline: list[dict[str, Any]] = []
    reached: list[float] = []
    responses: list[tuple[float, str | None]] = []
    result: dict[str, Any] = {"scenario": scenario}
    site_cfg = SiteConfig(seed=3, hosts=3, pages_per_host=5000, latency_s=0.02, latency_variation=0.2,
                          crawl_delay_s=0.0)
    with tempfile.TemporaryDirectory() as tmp:
        async with run_site(site_cfg) as site:
            settings: dict[str, Any] = {
                "EXTENSIONS": {"robotctl.scrapy.RobotctlExtension": 500},
                "ROBOTCTL_ROBOTS": 2, "CONCURRENT_REQUESTS": 4, "CONCURRENT_REQUESTS_PER_DOMAIN": 4,
                "ROBOTCTL_RETRY_INTERVAL_S": 0.5, "ROBOTCTL_TIMEOUT_S": 2.0,
                "ROBOTSTXT_OBEY": True, "LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False,
                "DOWNLOAD_DELAY": 0.0,
            }
            if scenario in ("park", "items"):
                token = secrets.token_urlsafe(32)  # the agent refuses to run without one; Scrapy sends it
                cfg = AgentConfig.from_dict({
                    "server": {"host": "127.0.0.1", "port": 0, "token": token}, "queue": {"capacity": 8},
                    "robots": {"count": 2}, "log": {"dir": str(Path(tmp) / "agent"), "fsync": "never"},
                    "policy": {"startup": "all"},
                    "refit": {"interval_s": 1e9, "min_deliveries": 10**9, "drift_bound": None,
                              "cold_start_deliveries": 0}})  # no refit: the test commands the robots
                agent_cm = run_in_process(cfg)
                url, app = await agent_cm.__aenter__()
                settings.update({"ROBOTCTL_URL": url, "ROBOTCTL_TOKEN": token, "CLOSESPIDER_TIMEOUT": LIMIT_S})
                if scenario == "items":
                    settings.update({"CLOSESPIDER_TIMEOUT": 5.0, "ROBOTCTL_DELIVERY_SIGNAL": "item_scraped",
                                     "ITEM_PIPELINES": {"robotctl.scrapy.RobotctlPipeline": 900}})
                seeds = site.seed_urls()
            else:
                app = None
                settings.update({"ROBOTCTL_URL": f"http://127.0.0.1:{free_port()}"})
                if scenario == "parked":
                    settings.update({"ROBOTCTL_DEFAULT_STATE": "parked", "CLOSESPIDER_TIMEOUT": 2.0})
                seeds = [site.url(h, p) for p in range(DOWN_PAGES // 3 + 1) for h in range(3)][:DOWN_PAGES]
            runner = AsyncCrawlerRunner(settings)
            crawler = runner.create_crawler(SiteSpider)
            t0 = time.monotonic()
            crawler.signals.connect(lambda request, spider: reached.append(time.monotonic() - t0),
                                    signal=signals.request_reached_downloader, weak=False)
            crawler.signals.connect(lambda response, request, spider: responses.append(
                (time.monotonic() - t0, request.meta.get("robotctl_robot"))) if "/robots.txt" not in response.url
                else None, signal=signals.response_received, weak=False)
            task = runner.crawl(crawler, seeds=seeds, follow=scenario != "down", items=scenario == "items")
            parked = resumed = False
            stopping: asyncio.Future[None] | None = None
            while not task.done():
                now = time.monotonic() - t0
                try:
                    engine = crawler.engine
                except RuntimeError:  # not started yet
                    engine = None
                if engine is not None:
                    timeline.append({"t": now, "paused": engine.paused, "in_flight": len(engine.downloader.active),
                                     "concurrency": engine.downloader.total_concurrency})
                if scenario == "park" and not parked and len(reached) >= PARK_AFTER:
                    app[AGENT].set_probe(0)  # a policy with no robot at any queue length: park them all
                    parked = True
                    result["park_t"] = time.monotonic() - t0
                if scenario == "park" and parked and not resumed and now >= result["park_t"] + PARKED_S:
                    app[AGENT].set_probe(None)  # back to the startup policy: every robot
                    resumed = True
                    result["resume_t"] = time.monotonic() - t0
                if scenario == "park" and resumed and sum(t >= result["resume_t"] for t in reached) >= PARK_AFTER \
                        and stopping is None:
                    stopping = asyncio.ensure_future(crawler.stop_async())
                await asyncio.sleep(0.02)
            await task
            result["elapsed_s"] = time.monotonic() - t0
            if app is not None:
                agent = app[AGENT]
                result["agent"] = {"deliveries": agent.totals.deliveries, "pages": agent.totals.pages,
                                   "bytes": agent.totals.bytes, "completions": agent.totals.completions,
                                   "service_seconds": agent.totals.service_seconds,
                                   "robots": sorted(agent.actuator.robots),
                                   "commands": {k.value: v for k, v in agent.actuator.commands_issued.items()}}
                await agent_cm.__aexit__(None, None, None)
    assert crawler.stats is not None
    result.update(timeline=timeline, reached=reached, responses=responses, logs=records.records,
                  stats={k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, int | float | str)})
    out.write_text(json.dumps(result, default=str))


if __name__ == "__main__":
    from twisted.internet import reactor

    done: list[BaseException | None] = []

    async def run() -> None:
        try:
            await main(sys.argv[1], Path(sys.argv[2]))
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
