"""A short demo, for real: the site over HTTP, robots parked and resumed by the agent, the SQLite index,
the agent's queue view equal to the indexer's, and a report that reads well when piped."""

from __future__ import annotations

import asyncio
import io
import json
import math
import re

import pytest

from robotctl.crawler import DemoConfig, DemoReport, LiveView, format_report, run_demo

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def short_config() -> DemoConfig:
    """Eight-second runs of a small fleet (three robots, K = 8); before its first fit the agent applies a
    threshold policy (three robots up to two documents in the system, one above), so robots park and resume
    from the first seconds."""
    return DemoConfig.from_dict({
        "demo": {"duration_s": 8.0, "warmup_s": 1.0, "view_interval_s": 1.0},
        "robots": {"count": 3, "think_s": 0.2}, "indexer": {"capacity": 8}, "costs": {"robot": 1.0},
        "agent": {"policy": {"startup": [3, 3, 3, 1, 1, 1, 1, 1, 1]},
                  "refit": {"interval_s": 2.0, "min_interval_s": 1.0, "min_deliveries": 25,
                            "drift_window_s": 4.0},
                  "fit": {"options": {"batch_resolution_s": 0.0, "min_intervals": 8}}},
    })


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoReport, str]:
    out = io.StringIO()
    view = LiveView(out, interval_s=1.0)
    report = asyncio.run(run_demo(short_config(), view=view, workdir=tmp_path_factory.mktemp("demo")))
    return report, out.getvalue()


def test_robots_really_parked_and_resumed(demo: tuple[DemoReport, str]) -> None:
    report, _ = demo
    mine = report.run("robotctl")
    assert mine is not None
    assert mine.parks >= 1 and mine.resumes >= 1
    assert all(r.parks == 0 and r.resumes == 0 for r in report.runs if r.kind != "robotctl")
    assert any(n_active > 1 for n_active in mine.policies[0].robots_at_level) and mine.policies[0].source == "startup"


def test_pages_were_fetched_over_http_and_indexed(demo: tuple[DemoReport, str]) -> None:
    report, _ = demo
    for r in report.runs:
        c = r.counts
        assert c["fetched_pages"] > 0 and c["fetched_resources"] > 0 and c["fetch_errors"] == 0
        # what the robots fetched is what the site served over HTTP, plus fetches abandoned by parked
        # robots and those in flight when the run stopped (one per robot at most)
        cut = sum(rob["aborted"] for rob in r.robots) + len(r.robots)
        assert c["fetched_pages"] <= r.site["pages"] <= c["fetched_pages"] + cut
        assert c["fetched_resources"] <= r.site["resources"] <= c["fetched_resources"] + 7 * cut
        assert r.site["robots_txt"] == r.frontier["robots_txt_fetched"] > 0
        assert r.site["disallowed_hits"] == 0 and r.site["impolite"] == 0
        assert c["indexed"] > 0 and r.index["docs"] > 0 and r.index["postings"] > r.index["docs"]
        # every indexed document is in the index (plus, maybe, the one in service when the run stopped)
        assert c["total_indexed"] <= r.index["versions"] <= c["total_indexed"] + 1


def test_agent_view_of_the_queue_matches_the_indexer(demo: tuple[DemoReport, str]) -> None:
    report, _ = demo
    for r in report.runs:
        a = r.agent
        assert a["reports_failed"] == 0 and a["reports_sent"] > 0
        assert a["queue_compared"] == a["reports_sent"] and a["queue_mismatches"] == 0, a["last_mismatch"]
        assert a["queue"] == a["indexer_queue"]
        # the agent counted the same overflow as the indexer
        assert a["lost"] == r.counts["total_lost"] and a["admitted"] == r.counts["total_admitted"]


def test_measures_are_consistent_and_cost_is_eq2(demo: tuple[DemoReport, str]) -> None:
    report, _ = demo
    c = report.config.costs
    for r in report.runs:
        m = r.measures
        n = r.counts
        assert m.p_loss == n["lost"] / n["offered"] and m.p_obsolete == n["obsolete"] / n["offered"]
        assert 0 <= m.p_starvation <= 1 and math.isclose(sum(m.queue_length_distribution), 1.0)
        assert 0 < m.mean_active_robots <= report.config.robots.count + 1e-9
        j = (m.arrival_rate * (c.loss * m.p_loss + c.obsolescence * m.p_obsolete) + c.response
             * m.mean_response_served + c.robot * m.mean_active_robots + c.starvation * m.p_starvation)
        assert math.isclose(r.cost.total, j, rel_tol=1e-12)
    for r in report.runs:
        if r.kind != "robotctl":
            assert math.isclose(r.measures.mean_active_robots, r.policies[0].robots_at_level[0], rel_tol=1e-6)


def test_report_and_view_read_well_when_piped(demo: tuple[DemoReport, str]) -> None:
    report, view_text = demo
    text = format_report(report)
    for chunk in (view_text, text):
        assert not CONTROL.search(chunk.replace("\n", ""))
    assert "== run 1: robotctl in control" in view_text
    assert re.search(r"^\[robotctl +\d+\.\d/8s", view_text, re.M)
    assert "robotctl demo report" in text and "cost J" in text and "P_loss" in text
    if report.model is not None:
        assert report.best_static is not None and "realized cost" in text
        assert len(report.runs) == (2 if report.best_static == report.config.robots.count else 3)
        assert all(r.predicted is not None for r in report.runs)
    json.dumps(report.to_dict(), allow_nan=False, default=lambda o: None)



async def test_metrics_are_served_during_a_run() -> None:
    """The agent's /metrics carries the crawler's own figures next to the agent's."""
    import aiohttp

    from robotctl.crawler import run_crawl

    scraped: list[str] = []
    tasks: list[asyncio.Task[None]] = []

    async def scrape(url: str) -> None:
        await asyncio.sleep(1.5)
        async with aiohttp.ClientSession() as http, http.get(url + "/metrics") as r:
            scraped.append(await r.text())

    cfg = short_config().with_overrides(duration_s=3.0, warmup_s=0.5, baselines=False)
    result = await run_crawl(cfg, on_url=lambda url: tasks.append(asyncio.ensure_future(scrape(url))))
    await asyncio.gather(*tasks)
    text = scraped[0]
    assert re.search(r"^robotctl_crawler_fetched_pages_total [1-9]", text, re.M)
    assert re.search(r"^robotctl_crawler_indexer_queue_pages \d", text, re.M)
    assert "robotctl_crawler_realized_cost" in text
    assert re.search(r"^robotctl_\w+_total", text.replace("robotctl_crawler_", "x_"), re.M)  # the agent's own
    assert result.counts["fetched_pages"] > 0
