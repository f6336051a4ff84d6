"""Fetching through the transport seam, error translation, robots.txt, useful life from headers."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from robotctl.crawler import Fetcher, FetchError, FetchResult, Frontier, MockTransport, RobotsRules, useful_life
from robotctl.crawler._fetch import fetch_context


def answer(url: str, status: int = 200, body: str = "", **headers: str) -> FetchResult:
    return FetchResult(url, status, body.encode(), {k.lower().replace("_", "-"): v for k, v in headers.items()})


def test_fetch_context_names_robot_and_url() -> None:
    with pytest.raises(FetchError, match=r"^http://x\.test/a \(robot r7\): ClientConnectionError") as info, \
            fetch_context("http://x.test/a", "r7"):
        raise aiohttp.ClientConnectionError("refused")
    assert info.value.url == "http://x.test/a" and info.value.robot_id == "r7"
    assert isinstance(info.value.__cause__, aiohttp.ClientConnectionError)
    with pytest.raises(FetchError, match="no answer in time"), fetch_context("http://x.test/b"):
        raise TimeoutError


async def test_fetcher_sends_its_user_agent_through_the_transport() -> None:
    seen: list[str] = []

    class Recording(MockTransport):
        async def get(self, url: str, *, headers, timeout_s: float, max_bytes: int) -> FetchResult:
            seen.append(headers["User-Agent"])
            return await super().get(url, headers=headers, timeout_s=timeout_s, max_bytes=max_bytes)

    f = Fetcher(Recording(lambda u: answer(u, body="hi")), user_agent="testbot/1")
    res = await f.get("http://x.test/")
    assert res.body == b"hi" and seen == ["testbot/1"]


@pytest.mark.parametrize(("headers", "default", "expected"), [
    ({"X-Useful-Life-S": "2.5", "Cache-Control": "max-age=100"}, None, 2.5),
    ({"Cache-Control": "public, max-age=100"}, None, 100.0),
    ({"Cache-Control": "no-store"}, 9.0, 9.0),
    ({"Cache-Control": "max-age=0"}, None, None),
    ({}, 9.0, 9.0),
    ({}, None, None),
    ({"X-Useful-Life-S": "soon"}, 4.0, 4.0),
])
def test_useful_life_from_headers(headers: dict[str, str], default: float | None, expected: float | None) -> None:
    res = FetchResult("u", 200, b"", {k.lower(): v for k, v in headers.items()})
    assert useful_life(res, default) == expected


async def test_robots_rules_are_fetched_once_per_host_and_obeyed() -> None:
    calls: list[str] = []

    async def handler(url: str) -> FetchResult:
        calls.append(url)
        await asyncio.sleep(0.01)
        if url == "http://a.test/robots.txt":
            return answer(url, body="User-agent: *\nDisallow: /private/\nCrawl-delay: 0.7\n")
        if url == "http://b.test/robots.txt":
            return answer(url, 404)
        if url == "http://c.test/robots.txt":
            return answer(url, 503)
        raise AssertionError(url)

    frontier = Frontier(delay_s=0.1)
    rules = RobotsRules(Fetcher(MockTransport(handler), user_agent="testbot/1"), frontier, user_agent="testbot/1")
    got = await asyncio.gather(rules.allowed("http://a.test/p/1"), rules.allowed("http://a.test/private/2"),
                               rules.allowed("http://b.test/private/2"), rules.allowed("http://c.test/p/1"))
    assert got == [True, False, True, False]
    assert calls.count("http://a.test/robots.txt") == 1
    assert frontier.delay_of("a.test") == pytest.approx(0.7) and frontier.delay_of("b.test") == 0.1
    assert await rules.allowed("http://a.test/p/3") and len(calls) == 3


async def test_unreachable_robots_txt_disallows_the_host() -> None:
    def handler(url: str) -> FetchResult:
        raise aiohttp.ClientConnectionError("refused")

    class Failing(MockTransport):
        async def get(self, url: str, *, headers, timeout_s: float, max_bytes: int) -> FetchResult:
            with fetch_context(url):
                return handler(url)

    rules = RobotsRules(Fetcher(Failing(handler), user_agent="t/1"), Frontier(delay_s=0.0), user_agent="t/1")
    assert not await rules.allowed("http://down.test/")


@pytest.mark.parametrize(("text", "agent", "expected"), [
    ("User-agent: *\nCrawl-delay: 0.25\n", "testbot", 0.25),
    ("User-agent: testbot\nCrawl-delay: 3\n\nUser-agent: *\nCrawl-delay: 1\n", "testbot", 3.0),
    ("User-agent: other\nCrawl-delay: 3\n\nUser-agent: *\nDisallow: /x\nCrawl-delay: 1.5\n", "testbot", 1.5),
    ("User-agent: *\nDisallow: /\n", "testbot", None),
    ("User-agent: *\nCrawl-delay: soon\n", "testbot", None),
])
def test_crawl_delay_reads_fractions_and_the_right_group(text: str, agent: str, expected: float | None) -> None:
    from robotctl.crawler._fetch import crawl_delay

    assert crawl_delay(text.splitlines(), agent) == expected
