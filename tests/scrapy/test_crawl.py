"""Real Scrapy crawls of the demo site with RobotctlExtension (issue 15's acceptance).

Each crawl runs in a fresh interpreter (tests/scrapy/crawl_harness.py): Twisted's reactor runs once per
process. The working directory is a temporary one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.scrapy, pytest.mark.slow]

HARNESS = Path(__file__).with_name("crawl_harness.py")


def crawl(scenario: str, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / f"{scenario}.json"
    proc = subprocess.run([sys.executable, str(HARNESS), scenario, str(out)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.fixture(scope="module")
def parked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return crawl("park", tmp_path_factory.mktemp("park"))


def test_the_agent_receives_every_delivery(parked: dict[str, Any]) -> None:
    pages = parked["responses"]
    stats, agent = parked["stats"], parked["agent"]
    assert len(pages) > 50
    # every response but robots.txt is one delivery of one page, all acknowledged, in few requests
    assert agent["deliveries"] == agent["pages"] == len(pages) == stats["robotctl/reports_sent"]
    assert stats["robotctl/reports_dropped"] == 0 and stats["robotctl/reports_rejected"] == 0
    assert stats["robotctl/reports_requests"] <= stats["robotctl/reports_sent"]
    assert agent["bytes"] > 300 * len(pages)
    # named after the robot whose download slot fetched them: both robots delivered
    assert {robot for _, robot in pages} == {"harness-1", "harness-2"}


def test_the_crawl_pauses_while_every_robot_is_parked_and_resumes(parked: dict[str, Any]) -> None:
    park, resume = parked["park_t"], parked["resume_t"]
    reached = parked["reached"]
    before = [t for t in reached if t < park]
    during = [t for t in reached if park + 0.2 <= t < resume]
    after = [t for t in reached if resume <= t]
    assert len(before) >= 40 and len(after) >= 40
    assert during == [], f"{len(during)} requests reached the downloader while every robot was parked"
    # only downloads already in flight when the robots were parked finish (at most CONCURRENT_REQUESTS = 4)
    answered = [t for t, _ in parked["responses"] if park + 0.2 <= t < resume]
    assert len(answered) <= 4
    # the engine says so, and it resumed within half a second of the agent's command
    paused = [x for x in parked["timeline"] if park + 0.2 <= x["t"] < resume]
    assert paused and all(x["paused"] and x["in_flight"] == 0 for x in paused)
    assert min(after) - resume < 0.5
    stats = parked["stats"]
    assert stats["robotctl/engine_pauses"] == 1 and 1.5 < stats["robotctl/paused_seconds"] < 3.0
    assert parked["agent"]["commands"] == {"active": 2, "parked": 2}
    assert stats["finish_reason"] == "shutdown"


def test_without_an_agent_the_crawl_finishes_at_its_default_and_warns_once(tmp_path: Path) -> None:
    down = crawl("down", tmp_path)
    stats = down["stats"]
    assert stats["finish_reason"] == "finished"
    assert len(down["responses"]) == 150  # every page of the finite crawl
    # at its default: CONCURRENT_REQUESTS = 4 all along, used in full, never paused
    assert all(x["concurrency"] == 4 and not x["paused"] for x in down["timeline"])
    # used in full: 4 downloads at once at some point (the downloader's active set may hold one more for a
    # moment: Scrapy's own out-of-band downloads, such as robots.txt through engine.download, skip the
    # engine's backout check; seen under heavy load)
    assert max(x["in_flight"] for x in down["timeline"]) >= 4
    warnings = [r for r in down["logs"] if r["level"] in ("WARNING", "ERROR", "CRITICAL")]
    assert len(warnings) == 1, warnings
    text = warnings[0]["message"]
    assert warnings[0]["name"] == "robotctl.scrapy"
    assert "cannot be reached" in text and "goes on at its default" in text and "once per outage" in text
    assert stats["robotctl/agent_outages"] == 1 and stats["robotctl/robots_registered"] == 0
    assert stats["robotctl/reports_dropped"] == 150 and stats["robotctl/reports_sent"] == 0


def test_items_as_deliveries_and_the_pipeline_reports_completions(tmp_path: Path) -> None:
    """ROBOTCTL_DELIVERY_SIGNAL = item_scraped, and RobotctlPipeline after the (here: no) indexing pipeline:
    every item is one delivery and one completion, with its size and indexing time."""
    run = crawl("items", tmp_path)
    stats, agent = run["stats"], run["agent"]
    items = stats["item_scraped_count"]
    assert items > 30
    assert agent["deliveries"] == agent["pages"] == items == agent["completions"]
    assert abs(agent["service_seconds"] - 0.01 * items) < 1e-6 * items
    # the items' sizes are the responses' sizes, so the deliveries carry the same bytes as the pages
    assert agent["bytes"] > 300 * items
    assert stats["robotctl/reports_sent"] == 2 * items and stats["robotctl/reports_dropped"] == 0


def test_without_an_agent_robots_parked_by_default_keep_the_crawl_paused(tmp_path: Path) -> None:
    """ROBOTCTL_DEFAULT_STATE = parked: with no agent to resume them, no request leaves the scheduler."""
    run = crawl("parked", tmp_path)
    assert run["reached"] == [] and run["responses"] == []
    flags = [x["paused"] for x in run["timeline"]]
    assert True in flags and all(flags[flags.index(True):])  # paused from the spider's opening to its close
    warnings = [r for r in run["logs"] if r["level"] in ("WARNING", "ERROR", "CRITICAL")]
    assert len(warnings) == 1 and "stays paused" in warnings[0]["message"]
    assert run["stats"]["finish_reason"] == "closespider_timeout" and run["stats"]["robotctl/engine_pauses"] == 1
