"""Robot workers: a page and its resources as one batch, park/resume, robots.txt, revisits, links."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import numpy as np
import pytest

from robotctl.crawler import (
    ActiveClock,
    CrawlConfig,
    Document,
    Fetcher,
    FetchResult,
    Frontier,
    LocalSwitch,
    MockTransport,
    Robot,
    RobotsRules,
)
from robotctl.model import InputError

PAGE = ('<html><body><a href="/p/2">two</a> <a href="http://other.test/p/9#top">nine</a> '
        '<a href="/private/1">hidden</a> <img src="/r/1/1"> <iframe src="/r/1/2"></iframe>'
        '<link rel="stylesheet" href="/r/1/3"></body></html>')


def site(url: str) -> FetchResult:
    if url.endswith("/robots.txt"):
        return FetchResult(url, 200, b"User-agent: *\nDisallow: /private/\n", {"content-type": "text/plain"})
    if "/r/" in url:
        return FetchResult(url, 200, b"<p>resource</p>", {"content-type": "text/html", "x-useful-life-s": "50"})
    return FetchResult(url, 200, PAGE.encode(), {"content-type": "text/html; charset=utf-8",
                                                 "cache-control": "max-age=30"})


class Sink:
    def __init__(self) -> None:
        self.batches: list[tuple[str, list[Document]]] = []

    def offer(self, robot_id: str, documents: Sequence[Document]) -> int:
        self.batches.append((robot_id, list(documents)))
        return len(documents)


def robot(switch: LocalSwitch, frontier: Frontier, sink: Sink, transport: MockTransport, **cfg: object) -> Robot:
    fetcher = Fetcher(transport, user_agent="testbot/1")
    config = CrawlConfig(**{"think_s": 0.0, **cfg})  # type: ignore[arg-type]
    return Robot(switch.robot_id, switch=switch, frontier=frontier, fetcher=fetcher,
                 rules=RobotsRules(fetcher, frontier, user_agent="testbot/1"), sink=sink, config=config,
                 rng=np.random.default_rng(1))


def test_crawl_config_names_the_field() -> None:
    with pytest.raises(InputError, match=r"^robots\.count:"):
        CrawlConfig(count=0)
    with pytest.raises(InputError, match=r"^robots\.think_s:"):
        CrawlConfig.from_dict({"think_s": -1})
    with pytest.raises(InputError, match=r"^robots\.speed: is not a known key"):
        CrawlConfig.from_dict({"speed": 2})


async def test_a_step_delivers_the_page_and_its_resources_as_one_batch() -> None:
    loop = asyncio.get_running_loop()
    transport = MockTransport(site)
    frontier = Frontier(delay_s=0.0)
    frontier.add("http://a.test/p/1")
    sink = Sink()
    r = robot(LocalSwitch("r1"), frontier, sink, transport, revisit=True)
    before = loop.time()
    assert await r.step() == 4
    (rid, docs), = sink.batches
    assert rid == "r1"
    assert [d.kind for d in docs] == ["page", "resource", "resource", "resource"]
    assert {d.url for d in docs[1:]} == {"http://a.test/r/1/1", "http://a.test/r/1/2", "http://a.test/r/1/3"}
    page = docs[0]
    assert page.expires_at is not None and page.expires_at - page.fetched_at == pytest.approx(30.0)
    assert docs[1].expires_at is not None and docs[1].expires_at - docs[1].fetched_at == pytest.approx(50.0)
    assert page.fetched_at >= before
    # links found go to the frontier (fragments removed), disallowed ones are never fetched
    assert frontier.stats.added == 1 + 3
    assert "http://a.test/robots.txt" in transport.requests
    assert not any("/private/" in u for u in transport.requests)
    assert frontier.pending_revisits == 1
    assert (r.stats.pages, r.stats.resources, r.stats.batches) == (1, 3, 1)


async def test_disallowed_urls_are_skipped() -> None:
    frontier = Frontier(delay_s=0.0)
    frontier.add("http://a.test/private/5")
    sink = Sink()
    r = robot(LocalSwitch("r1"), frontier, sink, MockTransport(site))
    assert await r.step() == 0
    assert r.stats.disallowed == 1 and not sink.batches


async def test_a_parked_robot_does_not_fetch_and_resumes_when_told() -> None:
    transport = MockTransport(site)
    frontier = Frontier(delay_s=0.0)
    frontier.add_many([f"http://a.test/p/{i}" for i in range(10, 20)])
    switch = LocalSwitch("r1", active=False)
    sink = Sink()
    r = robot(switch, frontier, sink, transport)
    loop = asyncio.get_running_loop()
    clock = ActiveClock([switch], loop.time)
    clock.start()
    task = asyncio.ensure_future(r.run())
    await asyncio.sleep(0.05)
    assert transport.requests == [] and not sink.batches
    switch.set_active(True)
    for _ in range(200):
        if len(sink.batches) >= 2:
            break
        await asyncio.sleep(0.005)
    assert len(sink.batches) >= 2
    switch.set_active(False)
    await asyncio.sleep(0.02)
    n = len(transport.requests)
    await asyncio.sleep(0.05)
    assert len(transport.requests) == n      # parked: no new fetch
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await clock.stop()
    rec = clock.records[0]
    assert (rec.resumes, rec.parks) == (1, 1)
    assert 0 < clock.integral() < loop.time()


async def test_a_robot_parked_while_waiting_for_a_host_gives_the_url_back() -> None:
    transport = MockTransport(site)
    frontier = Frontier(delay_s=0.2)
    frontier.add_many(["http://a.test/p/1", "http://a.test/p/2"])
    await frontier.next()                      # the host is now busy for 0.2 s
    switch = LocalSwitch("r1")
    r = robot(switch, frontier, Sink(), transport)
    step = asyncio.ensure_future(r.step())
    await asyncio.sleep(0.05)
    switch.set_active(False)
    assert await step == 0
    assert r.stats.given_back == 1 and len(frontier) == 1
    assert not any(u.endswith("/p/2") for u in transport.requests)


async def test_fetch_errors_are_counted_not_raised() -> None:
    def broken(url: str) -> FetchResult:
        if url.endswith("robots.txt"):
            return FetchResult(url, 404, b"")
        return FetchResult(url, 500, b"oops", {"content-type": "text/html"})

    frontier = Frontier(delay_s=0.0)
    frontier.add("http://a.test/p/1")
    r = robot(LocalSwitch("r1"), frontier, Sink(), MockTransport(broken))
    assert await r.step() == 0
    assert r.stats.errors == 1 and "HTTP 500" in r.stats.last_error
