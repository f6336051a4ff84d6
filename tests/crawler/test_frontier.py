"""The frontier: per-host FIFO, politeness between pages of one host, revisits, give-backs."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from robotctl.crawler import Frontier, host_key


def test_host_key_is_host_and_port() -> None:
    assert host_key("http://Example.org:8080/a?b#c") == "example.org:8080"
    assert host_key("https://example.org/") == "example.org"


async def test_urls_of_one_host_are_handed_out_in_order_and_spaced_by_the_delay() -> None:
    loop = asyncio.get_running_loop()
    f = Frontier(delay_s=0.05)
    urls = [f"http://a.test/{i}" for i in range(4)]
    assert f.add_many(urls) == 4
    got, times = [], []
    for _ in urls:
        got.append(await f.next())
        times.append(loop.time())
    assert got == urls
    res = loop._clock_resolution  # type: ignore[attr-defined]
    assert all(b - a >= 0.05 - res for a, b in zip(times, times[1:]))


async def test_concurrent_callers_get_different_hosts_and_never_break_politeness() -> None:
    loop = asyncio.get_running_loop()
    f = Frontier(delay_s=0.04)
    for i in range(6):
        f.add(f"http://a.test/{i}")
        f.add(f"http://b.test/{i}")
    handed: list[tuple[float, str]] = []

    async def worker() -> None:
        for _ in range(4):
            url = await f.next()
            handed.append((loop.time(), url))

    await asyncio.gather(worker(), worker(), worker())
    assert len(handed) == 12 and len({u for _, u in handed}) == 12
    res = loop._clock_resolution  # type: ignore[attr-defined]
    for host in ("a.test", "b.test"):
        ts = sorted(t for t, u in handed if host_key(u) == host)
        assert all(b - a >= 0.04 - res for a, b in zip(ts, ts[1:]))


async def test_set_delay_never_goes_below_the_default() -> None:
    f = Frontier(delay_s=0.1)
    f.set_delay("a.test", 0.01)
    f.set_delay("b.test", 2.0)
    assert f.delay_of("a.test") == 0.1 and f.delay_of("b.test") == 2.0 and f.delay_of("c.test") == 0.1


async def test_duplicates_and_a_full_frontier_are_refused_and_counted() -> None:
    f = Frontier(delay_s=0.0, max_urls=2)
    assert f.add("http://a.test/1") and not f.add("http://a.test/1")
    assert f.add("http://a.test/2") and not f.add("http://a.test/3")
    assert (f.stats.duplicates, f.stats.dropped_full, len(f)) == (1, 1, 2)


async def test_requeue_puts_the_url_first_for_its_host() -> None:
    f = Frontier(delay_s=0.0)
    f.add_many(["http://a.test/1", "http://a.test/2"])
    first = await f.next()
    f.requeue(first)
    assert await f.next() == first
    assert f.stats.requeued == 1


async def test_revisits_come_back_when_due() -> None:
    loop = asyncio.get_running_loop()
    f = Frontier(delay_s=0.0)
    f.revisit("http://a.test/again", loop.time() + 0.05)
    assert len(f) == 0 and f.pending_revisits == 1
    start = loop.time()
    url = await asyncio.wait_for(f.next(), 2.0)
    assert url == "http://a.test/again"
    assert loop.time() - start >= 0.05 - loop._clock_resolution  # type: ignore[attr-defined]
    assert f.stats.revisits_due == 1


async def test_a_waiter_wakes_when_a_url_arrives() -> None:
    f = Frontier(delay_s=0.0)
    task = asyncio.ensure_future(f.next())
    await asyncio.sleep(0.01)
    assert not task.done()
    f.add("http://b.test/x")
    assert await asyncio.wait_for(task, 2.0) == "http://b.test/x"


async def test_a_cancelled_wait_gives_the_host_back() -> None:
    f = Frontier(delay_s=5.0)
    f.add_many(["http://a.test/1", "http://a.test/2"])
    assert await f.next() == "http://a.test/1"
    task = asyncio.ensure_future(f.next())   # waits 5 s for the host
    await asyncio.sleep(0.01)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    f.set_delay("a.test", 5.0)
    assert len(f) == 1
    # the host is available again (still subject to its delay): a new caller is the one waiting for it
    waiter = asyncio.ensure_future(f.next())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    waiter.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiter


@pytest.mark.parametrize("n", [1, 3])
async def test_every_url_is_handed_out_exactly_once(n: int) -> None:
    f = Frontier(delay_s=0.0)
    urls = [f"http://h{i % 5}.test/{i}" for i in range(40)]
    f.add_many(urls)
    got: list[str] = []
    to_take = [len(urls)]

    async def worker() -> None:
        while to_take[0] > 0:
            to_take[0] -= 1
            got.append(await f.next())

    await asyncio.gather(*(worker() for _ in range(n)))
    assert sorted(got) == sorted(urls)


async def test_due_revisits_go_first_within_their_budget() -> None:
    loop = asyncio.get_running_loop()
    f = Frontier(delay_s=0.0, revisit_share=0.25)
    f.add_many([f"http://a.test/new{i}" for i in range(12)])
    for i in range(6):
        f.revisit(f"http://a.test/old{i}", loop.time())
    got = [await f.next() for _ in range(12)]
    assert got[0] == "http://a.test/old0"                      # a due revisit goes ahead of new URLs ...
    old = [u for u in got if "/old" in u]
    assert len(old) <= 0.25 * len(got) + 1                     # ... within the budget
    assert f.stats.revisits_handed_out == len(old)
    rest = []
    while len(f) or f.pending_revisits:                        # no new URL left: the budget is off
        rest.append(await f.next())
    assert sorted(u for u in got + rest if "/old" in u) == [f"http://a.test/old{i}" for i in range(6)]
