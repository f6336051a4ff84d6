"""Servers push back: caps per download slot from 429/503 and Retry-After (robotctl/scrapy/_pushback.py)."""

from __future__ import annotations

import email.utils
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robotctl.scrapy._pushback import Pushback, retry_after_s


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert retry_after_s(b"7", 1000.0) == 7.0
    assert retry_after_s("  2.5 ", 1000.0) == 2.5
    date = email.utils.formatdate(1_000_030.0, usegmt=True)
    assert retry_after_s(date, 1_000_000.0) == 30.0
    assert retry_after_s("soon", 0.0) is None and retry_after_s(None, 0.0) is None
    assert retry_after_s("-5", 0.0) == 0.0 and retry_after_s("1e9", 0.0) == 3600.0
    assert retry_after_s("nan", 0.0) is None


def test_pushback_halves_holds_until_retry_after_then_probes_up_slowly() -> None:
    p = Pushback(8, probe_s=2.0, min_hold_s=1.0)
    assert p.cap("a") is None and not p.answer("a", 200, 8, 0.0)  # no pushback: uncapped, nothing changes
    assert p.answer("a", 429, 8, 1.0, retry_after=5.0)
    assert p.cap("a") == 4 and p.hold_until("a") == 6.0
    assert p.answer("a", 503, 4, 1.5) and p.cap("a") == 2 and p.hold_until("a") == 6.0  # the later hold kept
    assert not p.answer("a", 200, 2, 5.9)  # never before Retry-After
    assert p.answer("a", 200, 2, 6.0) and p.cap("a") == 3
    assert not p.answer("a", 200, 3, 7.0)  # one step per probe_s
    caps = []
    t = 8.0
    while p.cap("a") is not None:
        p.answer("a", 200, 3, t)
        caps.append(p.cap("a"))
        t += 2.0
    assert caps == [4, 5, 6, 7, None]  # back to uncapped at the crawl's concurrency
    assert p.cap("b") is None and p.pushbacks == 2


@given(st.lists(st.tuples(st.sampled_from([200, 404, 429, 503]), st.integers(0, 20),
                          st.floats(0, 5), st.none() | st.floats(0, 60)), max_size=60))
def test_a_cap_is_always_between_one_and_the_concurrency(events: list[tuple[int, int, float, float | None]]) -> None:
    p = Pushback(16)
    t = 0.0
    for status, in_flight, dt, wait in events:
        t += dt
        p.answer("s", status, in_flight, t, wait)
        cap = p.cap("s")
        assert cap is None or 1 <= cap < 16
        if status in (429, 503):
            assert cap is not None and p.hold_until("s") >= t


HARNESS = Path(__file__).with_name("pushback_harness.py")


def _crawl(mode: str, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / f"{mode}.json"
    proc = subprocess.run([sys.executable, str(HARNESS), mode, str(out)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.mark.scrapy
@pytest.mark.slow
@pytest.mark.xfail(strict=False, reason="known shortfall (issue 29, open): on a quiet machine the add-on still lets "
                   "Scrapy's retries reach the server before Retry-After (about 138 early requests) and gives up "
                   "about 34 of 120; it passed only on a loaded machine, where the crawl ran slower")
def test_a_crawl_under_the_addon_backs_off_and_gives_up_no_request(tmp_path: Path) -> None:
    """120 pages from a server that answers 429 (Retry-After: 1) beyond 2 requests at once, 8 concurrent
    requests, Scrapy's 2 retries: without robotctl most requests are given up; with the add-on none."""
    pytest.importorskip("scrapy")
    plain = _crawl("plain", tmp_path)
    assert plain["stats"].get("retry/max_reached", 0) > 10 and plain["served"] < 120  # the site pushes back
    run = _crawl("addon", tmp_path)
    stats = run["stats"]
    assert run["served"] == 120 and stats["item_scraped_count"] == 120
    assert stats.get("retry/max_reached", 0) == 0 and stats["robotctl/requests_given_up"] == 0
    assert stats["robotctl/pushbacks"] > 0
    assert run["refused"] < plain["refused"]
