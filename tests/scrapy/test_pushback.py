"""Servers push back: caps per download slot from 429/503 and Retry-After (robotctl/scrapy/_pushback.py)."""

from __future__ import annotations

import email.utils
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robotctl.scrapy._pushback import Pushback, SlotState, retry_after_s


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert retry_after_s(b"7", 1000.0) == 7.0
    assert retry_after_s("  2.5 ", 1000.0) == 2.5
    date = email.utils.formatdate(1_000_030.0, usegmt=True)
    assert retry_after_s(date, 1_000_000.0) == 30.0
    assert retry_after_s("soon", 0.0) is None and retry_after_s(None, 0.0) is None
    assert retry_after_s("-5", 0.0) == 0.0 and retry_after_s("1e9", 0.0) == 3600.0
    assert retry_after_s("nan", 0.0) is None


def _admit_all(p: Pushback, slot: str, n: int, now: float, **kw: bool) -> int:
    """Admit up to ``n`` requests to ``slot`` at ``now``; how many went."""
    went = 0
    for _ in range(n):
        if p.admit(slot, now, **kw) != 0.0:
            break
        went += 1
    return went


def test_pushback_holds_until_retry_after_halves_and_probes_up_slowly() -> None:
    p = Pushback(8, probe_s=2.0, min_hold_s=1.0)
    assert _admit_all(p, "a", 8, 0.0) == 8 and p.cap("a") is None  # no pushback: uncapped
    assert not p.answer("a", 200, 0.5)
    p.release("a")
    assert p.answer("a", 429, 1.0, retry_after=5.0)  # 7 in flight
    assert p.cap("a") == 3 and p.hold_until("a") == 6.0 and p.slots["a"].ceiling == 7
    p.release("a")
    assert p.answer("a", 503, 1.5) and p.cap("a") == 1 and p.hold_until("a") == 6.0  # the later hold kept
    assert p.slots["a"].ceiling == 6  # the fewest in flight that drew pushback
    for _ in range(6):
        p.release("a")
    assert p.in_flight("a") == 0
    assert p.admit("a", 5.9) == pytest.approx(0.1)  # never before Retry-After, retries included
    assert p.admit("a", 6.0) == 0.0 and p.admit("a", 6.0) == math.inf  # at the cap: wait for a release
    assert not p.answer("a", 200, 7.9)  # the first step probe_s after the hold
    assert p.answer("a", 200, 8.0) and p.cap("a") == 2
    p.release("a")
    caps = []
    t = 8.0
    while p.cap("a") is not None:
        went = _admit_all(p, "a", 8, t)  # the crawl uses the cap
        t += 2.0
        p.answer("a", 200, t)
        for _ in range(went):
            p.release("a")
        caps.append(p.cap("a"))
    # 2 s per step below the ceiling (6); from one below it on, 4 s per step (one pushback at the ceiling),
    # each step at the ceiling moving it up one; uncapped at the crawl's concurrency
    assert caps == [3, 4, 5, 5, 6, 6, 7, 7, None]
    assert p.cap("b") is None and p.pushbacks == 2


def test_refusals_of_one_burst_back_off_once_and_a_refusal_after_it_backs_off_again() -> None:
    """Once per overload: 11 requests sent at 0 to a server that takes 6 draw refusals as their answers
    come; the first halves the cap, the others (sent before that back-off) only hold the slot. A refusal of
    a request sent under the new cap is a new overload and halves it again. Without ``sent_at`` every
    refusal backs off (the rule before, three halvings here)."""
    p = Pushback(16, probe_s=2.0, min_hold_s=1.0)
    assert _admit_all(p, "a", 11, 0.0) == 11
    assert p.answer("a", 429, 0.5, retry_after=2.0, sent_at=0.0)
    assert p.cap("a") == 5 and p.slots["a"].ceiling == 11 and p.hold_until("a") == 2.5
    for t in (0.6, 0.7):
        p.release("a")
        assert p.answer("a", 429, t, retry_after=2.0, sent_at=0.0)  # the same burst: held, not halved
        assert p.cap("a") == 5 and p.slots["a"].ceiling == 11
    assert p.hold_until("a") == pytest.approx(2.7) and p.slots["a"].pushbacks == 3 and p.pushbacks == 3
    for _ in range(9):
        p.release("a")
    assert _admit_all(p, "a", 16, 3.0) == 5  # the new cap
    assert p.answer("a", 429, 3.5, retry_after=1.0, sent_at=3.0)  # sent after the back-off: a new overload
    assert p.cap("a") == 2 and p.slots["a"].ceiling == 5
    old = Pushback(16)
    _admit_all(old, "a", 11, 0.0)
    for t in (0.5, 0.6, 0.7):
        old.answer("a", 429, t, retry_after=2.0)
        old.release("a")
    assert old.cap("a") == 1


def test_an_unused_cap_is_not_raised() -> None:
    p = Pushback(8, probe_s=1.0)
    _admit_all(p, "a", 4, 0.0)
    p.answer("a", 429, 0.0, retry_after=0.0)
    for _ in range(4):
        p.release("a")
    assert p.cap("a") == 2
    for t in range(1, 20):  # one request at a time: the cap of 2 is never reached
        assert p.admit("a", float(t)) == 0.0
        p.answer("a", 200, t + 0.5)
        p.release("a")
    assert p.cap("a") == 2


def test_a_last_try_never_probes_above_the_ceiling_but_may_always_go_alone() -> None:
    p = Pushback(8, probe_s=1.0)
    _admit_all(p, "a", 3, 0.0)
    p.answer("a", 429, 0.0, retry_after=1.0)  # 3 in flight: the server takes fewer than 3
    for _ in range(3):
        p.release("a")
    p.slots["a"].cap = 4  # (as if probed up meanwhile)
    assert p.admit("a", 1.0, last_try=True) == 0.0  # alone
    assert p.admit("a", 1.0, last_try=True) == 0.0  # second of 2, below the ceiling of 3
    assert p.admit("a", 1.0, last_try=True) == math.inf  # it would be the third: it waits
    assert p.admit("a", 1.0) == 0.0  # a first try may probe
    ceiling_one = Pushback(8)
    ceiling_one.admit("b", 0.0)
    ceiling_one.answer("b", 429, 0.0, retry_after=0.0)  # refused with nothing else in flight
    ceiling_one.release("b")
    assert ceiling_one.admit("b", 1.0, last_try=True) == 0.0  # alone still goes (no deadlock)
    assert ceiling_one.admit("b", 1.0, last_try=True) == math.inf


@given(st.lists(st.tuples(st.sampled_from(["admit", "last", "release", 200, 404, 429, 503]), st.floats(0, 5),
                          st.none() | st.floats(0, 60)), max_size=80),
       st.none() | st.floats(0, 10), st.sampled_from([None, 1, 2, 5, 16]), st.sampled_from([1.0, 0.1, 0.01]),
       st.none() | st.integers(1, 20))
def test_the_gate_never_admits_during_a_hold_nor_beyond_the_cap(
        events: list[tuple[str | int, float, float | None]], sent_ago: float | None, start_cap: int | None,
        probe_budget: float, sent_in_flight: int | None) -> None:
    """Every answer without ``sent_at``, or with its request sent ``sent_ago`` seconds before it (with
    ``sent_in_flight`` downloads then in flight); with and without slow start, under any probe budget."""
    p = Pushback(16, start_cap=start_cap, probe_budget=probe_budget)
    t = 0.0
    for what, dt, wait in events:
        t += dt
        before = p.slots.get("s")
        held = before is not None and t < before.hold_until
        cap_before = p.cap("s")
        flying = p.in_flight("s")
        if what in ("admit", "last"):
            got = p.admit("s", t, last_try=what == "last")
            if got == 0.0:
                assert not held
                assert cap_before is None or flying < cap_before or (what == "last" and flying == 0)
                assert p.in_flight("s") == flying + 1
            else:
                assert got > 0 and p.in_flight("s") == flying
        elif what == "release":
            p.release("s")
            assert p.in_flight("s") == max(flying - 1, 0)
        else:
            p.answer("s", int(what), t, wait, sent_at=None if sent_ago is None else t - sent_ago,
                     sent_in_flight=sent_in_flight)
        cap = p.cap("s")
        assert cap is None or 1 <= cap < 16
        if what in (429, 503):
            assert cap is not None and p.hold_until("s") >= t


HARNESS = Path(__file__).with_name("pushback_harness.py")


def _crawl(mode: str, tmp_path: Path, **settings: Any) -> dict[str, Any]:
    out = tmp_path / f"{mode}.json"
    args = [sys.executable, str(HARNESS), mode, str(out)] + ([json.dumps(settings)] if settings else [])
    proc = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _figures(run: dict[str, Any]) -> str:
    stats = run["stats"]
    return (f"served {run['served']}/120, refused {run['refused']}, given up {stats.get('retry/max_reached', 0)}, "
            f"sent while held {run['sent_while_held']}, early at the server {run['early']}, "
            f"{run['elapsed_s']:.1f} s")


@pytest.mark.scrapy
@pytest.mark.slow
def test_a_crawl_under_the_addon_backs_off_and_gives_up_no_request(tmp_path: Path) -> None:
    """120 pages from a server that answers 429 (Retry-After: 1) beyond 2 requests at once, 8 concurrent
    requests, Scrapy's 2 retries: without robotctl most requests are given up and most are sent before
    Retry-After; with the add-on none is given up and none is sent while the crawler knows the server is
    held (the server still sees the few that were on their way when it answered 429)."""
    pytest.importorskip("scrapy")
    plain = _crawl("plain", tmp_path)
    assert plain["stats"].get("retry/max_reached", 0) > 10 and plain["served"] < 120, _figures(plain)
    assert plain["sent_while_held"] > 10, _figures(plain)  # the site pushes back, and Scrapy alone ignores it
    run = _crawl("addon", tmp_path)
    stats = run["stats"]
    figures = f"add-on: {_figures(run)}; plain: {_figures(plain)}"
    assert run["served"] == 120 and stats["item_scraped_count"] == 120, figures
    assert stats.get("retry/max_reached", 0) == 0 and stats["robotctl/requests_given_up"] == 0, figures
    assert run["sent_while_held"] == 0, figures
    assert stats["robotctl/pushbacks"] > 0 and stats["robotctl/requests_held"] > 0, figures
    assert run["refused"] < plain["refused"] and run["early"] * 10 < plain["early"], figures


@pytest.mark.scrapy
@pytest.mark.slow
def test_requests_given_up_reach_the_agent_and_its_cost(tmp_path: Path) -> None:
    """Without Scrapy's retries the first burst's 429s are given up: each is reported to the in-process agent
    (a ``given_up`` line in its delivery log), so its cost J counts them; none is a delivery."""
    pytest.importorskip("scrapy")
    run = _crawl("addon", tmp_path, RETRY_ENABLED=False)
    stats = run["stats"]
    given_up = stats["robotctl/requests_given_up"]
    assert given_up > 0 and given_up == run["refused"] == 120 - run["served"], _figures(run)
    assert stats["robotctl/delivered"] == run["served"]  # a 429 that reaches the spider makes no item: no delivery
    logged = 0
    for path in (tmp_path / ".robotctl" / "pages").glob("*.jsonl*"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "given_up":
                logged += event["pages"]
    assert logged == given_up
    assert stats["robotctl/reports_dropped"] == 0


def test_a_refused_probe_of_the_ceiling_backs_off_to_just_below_it() -> None:
    """The cap raised to the ceiling (the fewest downloads that drew pushback) and refused there goes back
    to one below it, where the slot ran a whole probe without pushback; a refusal below the ceiling (the
    server takes fewer now) halves the cap and lowers the ceiling. Halving at every probe of the ceiling,
    7 to 3, cost the Scrapy comparison's crawl a quarter of its downloads until the cap crept back."""
    p = Pushback(16)
    p.slots["s"] = SlotState(cap=7, ceiling=7, ceiling_pushbacks=1, in_flight=7)
    assert p.answer("s", 429, 10.0, 2.0)
    st = p.slots["s"]
    assert (st.cap, st.ceiling, st.ceiling_pushbacks, st.hold_until) == (6, 7, 2, 12.0)
    p.slots["t"] = SlotState(cap=6, ceiling=8, in_flight=6)
    assert p.answer("t", 429, 10.0, None)
    assert (p.slots["t"].cap, p.slots["t"].ceiling) == (3, 6)


def test_slow_start_doubles_the_cap_per_round_trip_until_the_first_pushback() -> None:
    """A server not seen before gets ``start_cap`` downloads, one more per answer without pushback while the
    crawl uses the cap (TCP's slow start: the cap doubles per round trip), uncapped at the crawl's
    concurrency. Started uncapped, the first burst of 16 to a server that takes 6 drew 10 refusals and held
    the whole crawl for the first Retry-After (bench/scrapy_compare.py)."""
    p = Pushback(16, start_cap=2)
    caps: list[int | None] = []
    t = 0.0
    while not caps or caps[-1] is not None:
        went = _admit_all(p, "a", 16, t)
        assert went == p.in_flight("a") == p.cap("a")  # the crawl uses the whole cap
        t += 0.1
        for _ in range(went):  # a round trip: every download answers
            p.answer("a", 200, t)
            p.release("a")
        caps.append(p.cap("a"))
    assert caps == [4, 8, None]  # 2 -> 4 -> 8 -> 16, uncapped: three round trips
    assert p.slots["a"].ceiling is None and not p.slots["a"].slow_start

    unused = Pushback(16, start_cap=2)
    assert _admit_all(unused, "b", 1, 0.0) == 1  # the crawl sends one at a time: the cap is not raised
    for k in range(5):
        assert not unused.answer("b", 200, 0.1 * (k + 1))
        unused.release("b")
        assert unused.admit("b", 0.1 * (k + 1)) == 0.0
    assert unused.cap("b") == 2

    over = Pushback(16, start_cap=4)  # the first pushback ends slow start: then one step per probe_s
    assert _admit_all(over, "c", 16, 0.0) == 4
    assert over.answer("c", 200, 0.1) and over.cap("c") == 5
    assert _admit_all(over, "c", 16, 0.1) == 1
    assert over.answer("c", 429, 0.2, 2.0) and over.cap("c") == 2 and over.slots["c"].ceiling == 5
    assert not over.slots["c"].slow_start
    for _ in range(5):
        over.release("c")
    assert _admit_all(over, "c", 16, 2.2) == 2
    assert not over.answer("c", 200, 2.3) and over.cap("c") == 2  # no step per answer any more
    assert Pushback(16, start_cap=16).cap("d") is None and _admit_all(Pushback(4, start_cap=8), "e", 8, 0.0) == 8


def test_the_probe_budget_spaces_probes_of_the_ceiling_by_the_hold_they_risk() -> None:
    """A refused probe of the ceiling holds the server for its Retry-After h: with a probe budget b the next
    probe of the ceiling waits at least h (1 - b) / b, so refused probes hold it at most a share b of the time
    (18 s after a Retry-After of 2 s at b = 0.1, instead of probe_s * 2 = 4 s: the Scrapy comparison's
    crawl spent about a second of its indexer's time idle per refused probe). Steps below the ceiling are
    not spaced."""
    for budget, wait in ((1.0, 4.0), (0.1, 18.0)):
        p = Pushback(16, probe_s=2.0, probe_budget=budget)
        p.slots["s"] = SlotState(cap=7, ceiling=7, ceiling_pushbacks=0, in_flight=7)
        assert p.answer("s", 429, 10.0, 2.0)  # the probe of the ceiling refused: back to 6, held to 12
        st = p.slots["s"]
        assert (st.cap, st.ceiling, st.hold_until) == (6, 7, 12.0)
        for _ in range(7):  # the refused download and the six others leave
            p.release("s")
        assert _admit_all(p, "s", 16, 12.0) == 6  # the crawl uses the cap
        assert not p.answer("s", 200, 12.0 + wait - 0.01) and p.cap("s") == 6
        assert p.answer("s", 200, 12.0 + wait) and p.cap("s") == 7
    low = Pushback(16, probe_s=2.0, probe_budget=0.1)
    low.slots["s"] = SlotState(cap=3, ceiling=7, in_flight=3, peak=3, last_hold_s=2.0)
    assert low.answer("s", 200, 2.0) and low.cap("s") == 4  # far below the ceiling: probe_s


def test_a_refusal_sets_the_ceiling_at_the_downloads_in_flight_when_it_was_sent() -> None:
    """A burst of 11 to a server that takes 6: the 7th is refused, and its answer comes with all 11 in flight.
    The server took fewer than 7, which the 4 admitted after it do not change: the ceiling is 7 and the cap
    3 (half of 7), where the count at the answer gave a ceiling of 11, and the true one cost a second
    refused probe."""
    for rank, ceiling, cap in ((7, 7, 3), (None, 11, 5)):
        p = Pushback(16)
        assert _admit_all(p, "a", 11, 0.0) == 11
        assert p.answer("a", 429, 0.3, 2.0, sent_at=0.0, sent_in_flight=rank)
        assert (p.slots["a"].ceiling, p.cap("a")) == (ceiling, cap)
    late = Pushback(16)  # sent when more were in flight than now: those in flight now bound it
    assert _admit_all(late, "a", 5, 0.0) == 5
    assert late.answer("a", 503, 0.3, None, sent_in_flight=9) and late.slots["a"].ceiling == 5


def test_a_probe_budget_outside_0_to_1_is_refused() -> None:
    for budget in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="probe_budget"):
            Pushback(16, probe_budget=budget)


async def test_the_gate_holds_a_request_until_its_slot_has_room_and_lets_everyone_go_when_closed() -> None:
    """PushbackGate, what PushbackMiddleware awaits: in slow start from 1 the second request to a server waits
    until the first is released; a 429 holds the slot for its Retry-After; each admitted request carries its
    slot, when it was admitted and how many were then in flight; closing lets every waiting request go."""
    pytest.importorskip("scrapy")
    import asyncio

    from scrapy.http import Request, Response

    from robotctl.scrapy._gate import META_GATE, META_RANK, META_SENT, PushbackGate

    gate = PushbackGate(Pushback(16, start_cap=1), lambda r: "a" if "//a/" in r.url else None)
    first, second, other = Request("http://a/1"), Request("http://a/2"), Request("http://b/1")
    await gate.admit(first)  # the gate is closed (no spider yet): everything passes, unmarked
    assert META_GATE not in first.meta
    gate.open = True
    await gate.admit(other)  # a request with no download slot passes ungated
    assert META_GATE not in other.meta
    await gate.admit(first)
    assert first.meta[META_GATE] == "a" and first.meta[META_RANK] == 1 and META_SENT in first.meta
    waiting = asyncio.ensure_future(gate.admit(second))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # the cap (1) is taken
    gate.release(first)
    await asyncio.wait_for(waiting, 1.0)
    assert second.meta[META_RANK] == 1 and gate.held == 1 and gate.held_seconds > 0.0
    gate.answer(Response("http://a/2", status=429, headers={"Retry-After": "30"}), second)
    gate.release(second)
    third = Request("http://a/3")
    held = asyncio.ensure_future(gate.admit(third))
    await asyncio.sleep(0.05)
    assert not held.done()  # the Retry-After holds the slot
    gate.close()  # the spider closed: the waiting request goes on, ungated
    await asyncio.wait_for(held, 1.0)
    assert META_GATE not in third.meta and gate.pushback.pushbacks == 1
