"""The add-on as a new user meets it (issue 29's acceptance): the wheel with the scrapy extra in a fresh venv,
a project from ``scrapy startproject``, settings.py given only the ``ADDONS`` line and ``ROBOTCTL_CAPACITY``,
a crawl of robotctl.crawler's demo site on 127.0.0.1 through an indexing pipeline with a buffer of 10.

The fresh venv sees the installed Scrapy and its dependencies through a ``.pth`` line (offline), and
robotctl only from the wheel built from this checkout (checked: the crawl prints where robotctl came from).
The project's own code (a spider and an indexing pipeline, named in the spider's ``custom_settings``) is
the user's part; robotctl's set-up is the two lines.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.scrapy, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SITE_SERVER = Path(__file__).with_name("site_server.py")

SPIDER = '''
import json, robotctl, scrapy

class SiteSpider(scrapy.Spider):
    name = "site"
    custom_settings = {"ITEM_PIPELINES": {"demo.pipelines.IndexingPipeline": 300}, "CLOSESPIDER_ITEMCOUNT": 240,
                       "LOG_LEVEL": "INFO"}

    def __init__(self, seeds="[]", out="stats.json", **kw):
        super().__init__(**kw)
        self.seeds, self.out = json.loads(seeds), out

    async def start(self):
        for url in self.seeds:
            yield scrapy.Request(url)

    def parse(self, response):
        yield {"url": response.url, "size": len(response.body)}
        for href in response.css("a::attr(href)").getall()[:8]:
            yield response.follow(href)

    @classmethod
    def from_crawler(cls, crawler, *args, **kw):
        spider = super().from_crawler(crawler, *args, **kw)
        crawler.signals.connect(spider.dump, signal=scrapy.signals.engine_stopped)
        return spider

    def dump(self):  # after every spider_closed handler, robotctl's stats included
        stats = {k: v for k, v in self.crawler.stats.get_stats().items() if isinstance(v, (int, float, str))}
        stats["robotctl_file"] = robotctl.__file__
        with open(self.out, "w") as f:
            json.dump(stats, f)
'''

PIPELINE = '''
import asyncio
from scrapy.exceptions import DropItem

class IndexingPipeline:
    """Indexes one item at a time, 0.1 s each, from a buffer of 10 items (the one being indexed included)."""

    def __init__(self):
        self.lock = asyncio.Lock()
        self.waiting = 0

    async def process_item(self, item, spider=None):
        if self.waiting >= 10:
            raise DropItem("the index buffer is full")
        self.waiting += 1
        try:
            async with self.lock:
                await asyncio.sleep(0.1)
        finally:
            self.waiting -= 1
        return item
'''


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{args}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("addon")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ROBOTCTL_TOKEN")}
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp, env)
    py = venv / "bin" / "python"
    site = Path(subprocess.check_output([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                        text=True).strip())
    (site / "installed_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")  # Scrapy & co., offline
    wheels = tmp / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheels),
          str(ROOT)], tmp, env)
    wheel = next(wheels.glob("robotctl-*.whl"))
    _run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", f"{wheel}[scrapy]"], tmp, env)
    _run([str(py), "-m", "scrapy", "startproject", "demo"], tmp, env)
    project = tmp / "demo"
    settings = project / "demo" / "settings.py"
    text = settings.read_text()
    assert "ADDONS = {}" in text  # the template's
    settings.write_text(text.replace("ADDONS = {}", 'ADDONS = {"robotctl.scrapy.Addon": 100}')
                        + "\nROBOTCTL_CAPACITY = 10\n")
    (project / "demo" / "spiders" / "site.py").write_text(SPIDER)
    (project / "demo" / "pipelines.py").write_text(PIPELINE)
    server = subprocess.Popen([sys.executable, str(SITE_SERVER), "16"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env={**env, "PYTHONPATH": str(ROOT)})
    try:
        assert server.stdout is not None
        seeds = server.stdout.readline().strip()
        log = project / "crawl.log"
        # the demo site's hosts are ports of 127.0.0.1, one Scrapy download slot: the template's
        # CONCURRENT_REQUESTS_PER_DOMAIN = 1 and DOWNLOAD_DELAY = 1 would hold it to 1 page/s whatever the robots
        # (the extension warns, test_template_settings_that_leave_nothing_to_control_warn_once_each); the crawl
        # lifts them on its command line, as their warnings advise
        _run([str(py), "-m", "scrapy", "crawl", "site", "-a", f"seeds={seeds}", "-a", "out=stats.json",
              "-s", f"LOG_FILE={log}", "-s", "CONCURRENT_REQUESTS_PER_DOMAIN=16", "-s", "DOWNLOAD_DELAY=0"],
             project, env, timeout=400)
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)
    stats: dict[str, Any] = json.loads((project / "stats.json").read_text())
    lines = [m.groupdict() for m in re.finditer(r"^\S+ \S+ \[(?P<name>[\w.]+)\] (?P<level>[A-Z]+): (?P<text>.*)$",
                                                log.read_text(), re.M)]
    return {"stats": stats, "lines": lines, "project": project, "venv": venv}


def test_robotctl_comes_from_the_wheel_in_the_fresh_venv(crawl: dict[str, Any]) -> None:
    assert crawl["stats"]["robotctl_file"].startswith(str(crawl["venv"]))


def test_the_robots_are_commanded_within_the_first_100_items(crawl: dict[str, Any]) -> None:
    stats = crawl["stats"]
    assert stats["robotctl/robots_registered"] == 16 and stats["robotctl/agent_outages"] == 0
    assert stats["robotctl/reports_dropped"] == 0 and stats["robotctl/reports_rejected"] == 0
    assert stats["robotctl/delivered"] >= 200
    assert stats["robotctl/delivered_at_first_park"] <= 100
    # the policy is kept for the next crawl
    assert list((crawl["project"] / ".robotctl" / "site").glob("policy.json"))


def test_the_log_says_nothing_above_info_and_little_at_info(crawl: dict[str, Any]) -> None:
    ours = [x for x in crawl["lines"] if x["name"].startswith("robotctl")]
    loud = [x for x in ours if x["level"] not in ("DEBUG", "INFO")]
    assert loud == []
    # the registration and the refits adopted; no line per robot or per command
    assert 1 <= len(ours) <= 12, ours
