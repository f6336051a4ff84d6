"""Several Scrapy processes on a scrapy-redis frontier and one ``robotctl serve`` agent, for
tests/scrapy/test_redis_fleet.py. Each role runs in its own interpreter::

    python tests/scrapy/redis_fleet_harness.py site PAGES           # the site; prints {"url": ...}, serves until
                                                                    # stdin closes; GET /_hits: who fetched what
    python tests/scrapy/redis_fleet_harness.py crawl NAME REDIS_URL AGENT_URL   # one Scrapy process

The crawl is a scrapy-redis ``RedisSpider``: it takes the URLs of the shared frontier (the Redis list
``fleet:start_urls``) a batch at a time when it is idle. scrapy-redis itself pops a URL for good, so a URL
a killed process had taken would never be fetched; the spider here takes URLs with ``LMOVE`` into its own
``fleet:inflight:<name>`` list, removes each once its page is parsed, and keeps ``fleet:alive:<name>``
alive (a key that expires 2 s after the process stops renewing it). A process that finds an in-flight list
whose owner is gone moves its URLs back to the frontier (and records them in ``fleet:reclaimed``): the
crawl completes when a process is killed, and only the URLs the dead process held are fetched twice.
scrapy-redis takes a batch only when Scrapy finds the spider idle, and Scrapy looks at most every 5 s (its
engine's heartbeat): a process could sit out the first 100 pages, taken by one that went idle first (CI:
98, 2 and 0 pages). So a process holding nothing also takes a batch at its heartbeat, every 0.5 s.

Every process runs the robotctl add-on against the remote agent (``ROBOTCTL_URL``; the token comes from
the environment's ``ROBOTCTL_TOKEN``) with ``ROBOTCTL_PROCESS = NAME``: 4 robots over 4 download slots.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import defaultdict
from typing import Any

FRONTIER = "fleet:start_urls"
RECLAIMED = "fleet:reclaimed"
ALIVE_TTL_MS = 2000


def inflight_key(name: str) -> str:
    return f"fleet:inflight:{name}"


def alive_key(name: str) -> str:
    return f"fleet:alive:{name}"


# -- the site ---------------------------------------------------------------------------------------
async def serve_site(pages: int) -> None:
    import time

    from aiohttp import web

    hits: dict[str, list[tuple[str, float]]] = defaultdict(list)  # path -> (User-Agent, monotonic time)

    async def page(request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        if n >= pages:
            raise web.HTTPNotFound()
        hits[request.path].append((request.headers.get("User-Agent", ""), time.monotonic()))
        await asyncio.sleep(0.08)
        return web.Response(text=f"<html><body><h1>page {n}</h1></body></html>", content_type="text/html")

    async def robots(request: web.Request) -> web.Response:
        return web.Response(text="User-agent: *\nAllow: /\n")

    async def get_hits(request: web.Request) -> web.Response:
        return web.json_response(hits)

    app = web.Application()
    app.router.add_get("/p/{n}", page)
    app.router.add_get("/robots.txt", robots)
    app.router.add_get("/_hits", get_hits)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    print(json.dumps({"url": f"http://127.0.0.1:{port}"}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


# -- one Scrapy process ------------------------------------------------------------------------------
def crawl(name: str, redis_url: str, agent_url: str) -> None:
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess
    from scrapy_redis.spiders import RedisSpider

    class FleetSpider(RedisSpider):  # type: ignore[misc]
        name = "fleet"
        redis_key = FRONTIER
        redis_batch_size = 8  # URLs taken from the frontier at once (twice the download slots)

        @classmethod
        def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> FleetSpider:
            spider: FleetSpider = super().from_crawler(crawler, *args, **kwargs)
            crawler.signals.connect(spider._opened, signal=signals.spider_opened)
            return spider

        def _opened(self, spider: Any) -> None:
            from twisted.internet import task

            self._heartbeat = task.LoopingCall(self._beat)
            self._heartbeat.start(0.5)

        def _beat(self) -> None:
            self.server.set(alive_key(name), "1", px=ALIVE_TTL_MS)
            if self.crawler.crawling and self.server.llen(inflight_key(name)) == 0:
                self.schedule_next_requests()  # holding nothing: look at the frontier now (see the docstring)

        def pop_list_queue(self, redis_key: str, batch_size: int) -> list[bytes]:
            """scrapy-redis's pop of a batch of URLs (``fetch_data`` of a list frontier), reliable: up to
            ``batch_size`` URLs, each moved atomically from the frontier to this process's in-flight list;
            first, the URLs of processes that are gone go back to the frontier."""
            self._reclaim()
            out = []
            for _ in range(batch_size):
                data = self.server.lmove(redis_key, inflight_key(name), "LEFT", "RIGHT")
                if data is None:
                    break
                out.append(data)
            return out

        def _reclaim(self) -> None:
            for key in self.server.scan_iter(match=inflight_key("*")):
                owner = key.decode().rsplit(":", 1)[1]
                if owner == name or self.server.exists(alive_key(owner)):
                    continue
                while (data := self.server.lmove(key, redis_key_of(self), "RIGHT", "LEFT")) is not None:
                    self.server.rpush(RECLAIMED, data)

        def make_request_from_data(self, data: bytes) -> Any:
            from scrapy import Request

            url = json.loads(data)["url"]
            return Request(url, dont_filter=True, cb_kwargs={"data": data})

        def parse(self, response: Any, data: bytes) -> Any:
            yield {"url": response.url, "process": name}
            self.server.lrem(inflight_key(name), 1, data)

    def redis_key_of(spider: Any) -> str:
        return str(spider.redis_key)

    settings = {
        "ADDONS": {"robotctl.scrapy.Addon": 100},
        "ROBOTCTL_URL": agent_url, "ROBOTCTL_PROCESS": name, "ROBOTCTL_ROBOTS": 4,
        "ROBOTCTL_RETRY_INTERVAL_S": 0.5, "ROBOTCTL_TIMEOUT_S": 3.0,
        "CONCURRENT_REQUESTS": 4, "CONCURRENT_REQUESTS_PER_DOMAIN": 4, "DOWNLOAD_DELAY": 0.0,
        "REDIS_URL": redis_url, "MAX_IDLE_TIME_BEFORE_CLOSE": 0,
        "USER_AGENT": f"fleet-harness ({name})", "ROBOTSTXT_OBEY": False, "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO", "RETRY_TIMES": 5,
    }
    process = CrawlerProcess(settings)
    process.crawl(FleetSpider)
    process.start()


if __name__ == "__main__":
    if sys.argv[1] == "site":
        asyncio.run(serve_site(int(sys.argv[2])))
    elif sys.argv[1] == "crawl":
        crawl(*sys.argv[2:5])
    else:
        raise SystemExit(f"unknown role {sys.argv[1]!r}: site or crawl")
