"""Serve robotctl.crawler's demo site on 127.0.0.1 until stdin closes; print its front pages as one JSON line.

    python tests/scrapy/site_server.py HOSTS        # for tests/scrapy/test_addon.py's fresh project
"""

from __future__ import annotations

import asyncio
import json
import sys

from robotctl.crawler import SiteConfig, run_site


async def main(hosts: int) -> None:
    cfg = SiteConfig(seed=5, hosts=hosts, pages_per_host=5000, latency_s=0.25, latency_variation=0.2,
                     crawl_delay_s=0.0)
    async with run_site(cfg) as site:
        print(json.dumps(site.seed_urls()), flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
