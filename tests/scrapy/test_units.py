"""The extension's parts without a crawl: settings, robots as download slots, the reporter."""

from __future__ import annotations

import asyncio
import logging
import re
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robotctl import InputError
from robotctl.agent.client import AgentClient, MockTransport, Request, Response
from robotctl.scrapy import NullReporter, Reporter, RobotctlSettings, RobotSlots
from robotctl.scrapy._reporter import AgentHealth


# -- settings ---------------------------------------------------------------------------------------
def test_settings_defaults_and_command_line_strings() -> None:
    s = RobotctlSettings.from_settings({"CONCURRENT_REQUESTS": 8})
    assert (s.enabled, s.robots, s.concurrency, s.url, s.default_state) == (True, 8, 8, "http://127.0.0.1:8787",
                                                                            "active")
    s = RobotctlSettings.from_settings({"CONCURRENT_REQUESTS": "8", "ROBOTCTL_ROBOTS": "3",
                                        "ROBOTCTL_URL": "http://agent:9000/", "ROBOTCTL_FLUSH_INTERVAL_S": "0.05",
                                        "ROBOTCTL_DELIVERY_SIGNAL": "item_scraped", "ROBOTCTL_ENABLED": "true"})
    assert (s.robots, s.concurrency, s.url, s.flush_interval_s, s.delivery_signal) == (
        3, 8, "http://agent:9000", 0.05, "item_scraped")
    assert (s.pushback_start, s.pushback_probe_budget) == (2, 0.1)  # slow start from 2, probes 9 holds apart
    s = RobotctlSettings.from_settings({"ROBOTCTL_PUSHBACK_START": "0", "ROBOTCTL_PUSHBACK_PROBE_BUDGET": "1"})
    assert (s.pushback_start, s.pushback_probe_budget) == (0, 1.0)


@pytest.mark.parametrize(("settings", "field", "words"), [
    ({"ROBOTCTL_CAPACITY": 0}, "ROBOTCTL_CAPACITY", "whole number >= 1"),
    ({"ROBOTCTL_MAX_LOSS": 2}, "ROBOTCTL_MAX_LOSS", "at most 1"),
    ({"ROBOTCTL_AGENT": "cloud"}, "ROBOTCTL_AGENT", "'cloud'"),
    ({"ROBOTCTL_DELIVER_STATUSES": "ok"}, "ROBOTCTL_DELIVER_STATUSES", "HTTP statuses"),
    ({"ROBOTCTL_DELIVER_STATUSES": [200, 700]}, "ROBOTCTL_DELIVER_STATUSES", "HTTP statuses"),
    ({"ROBOTCTL_AGENT_CONFIG": "costs"}, "ROBOTCTL_AGENT_CONFIG", "mapping"),
    ({"ROBOTCTL_ROBOTS": 0}, "ROBOTCTL_ROBOTS", "whole number >= 1"),
    ({"ROBOTCTL_ROBOTS": "three"}, "ROBOTCTL_ROBOTS", "'three'"),
    ({"ROBOTCTL_URL": "127.0.0.1:8787"}, "ROBOTCTL_URL", "not an http(s) URL"),
    ({"ROBOTCTL_DEFAULT_STATE": "asleep"}, "ROBOTCTL_DEFAULT_STATE", "'asleep'"),
    ({"ROBOTCTL_DELIVERY_SIGNAL": "bytes_received"}, "ROBOTCTL_DELIVERY_SIGNAL", "'bytes_received'"),
    ({"ROBOTCTL_FLUSH_INTERVAL_S": -1}, "ROBOTCTL_FLUSH_INTERVAL_S", ">= 0"),
    ({"ROBOTCTL_ENABLED": "maybe"}, "ROBOTCTL_ENABLED", "True or False"),
    ({"ROBOTCTL_PUSHBACK_START": -1}, "ROBOTCTL_PUSHBACK_START", "whole number >= 0"),
    ({"ROBOTCTL_PUSHBACK_START": "two"}, "ROBOTCTL_PUSHBACK_START", "'two'"),
    ({"ROBOTCTL_PUSHBACK_PROBE_BUDGET": 0}, "ROBOTCTL_PUSHBACK_PROBE_BUDGET", "above 0 and at most 1"),
    ({"ROBOTCTL_PUSHBACK_PROBE_BUDGET": "1.5"}, "ROBOTCTL_PUSHBACK_PROBE_BUDGET", "above 0 and at most 1"),
])
def test_a_bad_setting_is_named(settings: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(InputError, match=field) as info:
        RobotctlSettings.from_settings(settings)
    assert info.value.field == field and words in info.value.problem and info.value.hint


def test_more_robots_than_slots_are_the_slots_and_the_token_comes_from_the_environment() -> None:
    s = RobotctlSettings.from_settings({"ROBOTCTL_ROBOTS": 20, "CONCURRENT_REQUESTS": 16}, environ={})
    assert (s.robots, s.robots_asked, s.token) == (16, 20, None)  # the extension warns once (test_addon.py)
    s = RobotctlSettings.from_settings({}, environ={"ROBOTCTL_TOKEN": "from-env"})
    assert s.token == "from-env"
    s = RobotctlSettings.from_settings({"ROBOTCTL_TOKEN": "mine"}, environ={"ROBOTCTL_TOKEN": "from-env"})
    assert s.token == "mine"
    s = RobotctlSettings.from_settings({"ROBOTCTL_DELIVER_STATUSES": "200, 404", "ROBOTCTL_CAPACITY": "10"})
    assert (s.deliver_statuses, s.capacity, s.max_loss, s.max_obsolete) == ((200, 404), 10, 0.01, 0.02)


def test_the_local_agent_adopts_the_targets_policy_as_it_is(tmp_path: Any) -> None:
    """Under targets every cost weight is 0, so the agent's hysteresis choice (least J) would tie every policy
    and keep all robots active (bench/scrapy_compare.py measured it): the add-on turns it off and bounds the
    indexer's idle time so that the fewest robots still keep it busy; weights keep the agent's choice."""
    from robotctl.agent import AgentConfig
    from robotctl.scrapy._addon import local_agent_config

    s = RobotctlSettings.from_settings({"ROBOTCTL_CAPACITY": 10})
    cfg = AgentConfig.from_dict(local_agent_config(s, capacity=10, directory=tmp_path, token="x" * 32), source="test")
    assert (cfg.robots.hysteresis, cfg.robots.dwell_s) == (0, 0)
    assert (cfg.targets.max_loss, cfg.targets.max_obsolete, cfg.targets.max_starvation) == (0.01, 0.02, 0.05)
    s = RobotctlSettings.from_settings({"ROBOTCTL_AGENT_CONFIG": {"costs": {"loss": 1.0, "robot": 0.1}},
                                        "ROBOTCTL_MAX_STARVATION": 1})
    cfg = AgentConfig.from_dict(local_agent_config(s, capacity=10, directory=tmp_path, token="x" * 32), source="test")
    assert cfg.targets.as_targets() is None and cfg.robots.hysteresis == "auto"


def test_an_extension_switched_off_reads_nothing_else() -> None:
    s = RobotctlSettings.from_settings({"ROBOTCTL_ENABLED": False, "ROBOTCTL_ROBOTS": 99, "CONCURRENT_REQUESTS": 1})
    assert not s.enabled


# -- robots and download slots ----------------------------------------------------------------------
@given(robots=st.integers(1, 12), extra=st.integers(0, 20), data=st.data())
def test_slots_split_the_concurrency_and_follow_the_active_robots(robots: int, extra: int, data: Any) -> None:
    c = robots + extra
    slots = RobotSlots(robots, c)
    shares = [slots.slots_of(k) for k in range(1, robots + 1)]
    assert sum(shares) == c and max(shares) - min(shares) <= 1 and min(shares) >= 1
    assert slots.allowed == c  # every robot active at first: the crawl's own concurrency
    active = data.draw(st.sets(st.integers(1, robots)))
    assert slots.set_active(active) == sum(shares[k - 1] for k in active)
    # requests take the active robots' slots first, then any free one; never more than C at once
    taken = [slots.acquire() for _ in range(c)]
    assert None not in taken and slots.acquire() is None and slots.busy == c
    owners = [slots.owner[j] for j in taken if j is not None]
    assert set(owners[:slots.allowed]) <= active or not active
    for j in taken:
        assert j is not None
        slots.release(j)
    assert slots.busy == 0


def test_slots_refuse_more_robots_than_downloads() -> None:
    with pytest.raises(ValueError, match="robots <= concurrency"):
        RobotSlots(4, 3)
    with pytest.raises(ValueError, match=r"1\.\.2"):
        RobotSlots(2, 2).set_active([3])


# -- the reporter -----------------------------------------------------------------------------------
class FakeAgent:
    """The agent's answers for the reporter's requests, with a queue view, and a switch to go down."""

    def __init__(self, capacity: int = 1000) -> None:
        self.up = True
        self.queue = 0
        self.capacity = capacity
        self.requests: list[Request] = []
        self.delay_s = 0.0
        self.given_up = 0

    async def __call__(self, req: Request) -> Response:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if not self.up:
            raise OSError("connection refused")  # what aiohttp's transport would translate
        self.requests.append(req)
        body = req.json or {}
        if req.path == "/v1/deliveries":
            items = body.get("deliveries", [body])
            if any("robot" in d and d["robot"] != "robot-1" for d in items):
                return Response(400, {"error": "robot: not registered", "field": "deliveries[0].robot", "hint": ""})
            pages = sum(d.get("pages", 1) for d in items)
            got = min(pages, self.capacity - self.queue)
            self.queue += got
            return Response(200, {"accepted": len(items), "pages": pages, "admitted": got, "lost": pages - got,
                                  "queue": self.queue})
        if req.path == "/v1/completions":
            items = body.get("completions", [body])
            self.queue = max(0, self.queue - sum(c.get("pages", 1) for c in items))
            return Response(200, {"accepted": len(items), "queue": self.queue})
        if req.path == "/v1/obsolete":
            self.queue = max(0, self.queue - body["pages"])
            return Response(200, {"pages": body["pages"], "queue": self.queue})
        if req.path == "/v1/queue":
            self.queue = body["length"]
            return Response(200, {"queue": self.queue})
        if req.path == "/v1/given_up":
            self.given_up += body["pages"]
            return Response(200, {"pages": body["pages"], "given_up": self.given_up, "queue": self.queue})
        return Response(200, {"status": "ok"})


class Translating(MockTransport):
    """A mock transport that translates errors the way the real one does (in one place)."""

    async def handle_request(self, request: Request) -> Response:
        from robotctl.agent.client import request_context

        with request_context("http://agent" + request.path, request.robot_id):
            return await super().handle_request(request)


def make(agent: FakeAgent, **kw: Any) -> Reporter:
    client = AgentClient("http://agent", transport=Translating(agent))
    return Reporter(client, AgentHealth("http://agent", "the crawl goes on"), **kw)


async def settle(rep: Reporter) -> None:
    for _ in range(200):
        await asyncio.sleep(0)
    await asyncio.sleep(0.02)


async def test_reports_go_in_order_in_batches_and_never_wait() -> None:
    agent = FakeAgent()
    agent.delay_s = 0.01  # each request takes a while: what piles up meanwhile is the next batch
    rep = make(agent)
    rep.start()
    length = 0
    for i in range(30):
        length += 1
        rep.deliver(1, bytes=100, robot="robot-1", queue_length=length)
        if i % 3 == 2:
            length -= 1
            rep.complete(1, service_s=0.01, queue_length=length)
        if i == 10:
            await asyncio.sleep(0.015)
    await rep.aclose()
    assert rep.stats.sent == rep.stats.queued == 40 and rep.stats.dropped == 0
    assert rep.stats.requests < 40 and rep.stats.max_batch_seen > 1
    assert rep.stats.mismatches == 0 and agent.queue == length
    # sent in the order made: deliveries and completions interleave as they happened
    kinds = []
    for req in agent.requests:
        n = len(req.json.get("deliveries") or req.json.get("completions") or [req.json])
        kinds += [req.path] * n
    assert kinds[:4] == ["/v1/deliveries"] * 3 + ["/v1/completions"]
    assert all(isinstance(d["client_time"], float) for r in agent.requests if r.path == "/v1/deliveries"
               for d in r.json["deliveries"])


async def test_requests_given_up_are_reported_in_order_summed_per_batch() -> None:
    agent = FakeAgent()
    rep = make(agent)
    rep.start()
    rep.deliver(1, robot="robot-1", queue_length=1)
    for _ in range(3):
        rep.given_up(1)
    rep.complete(1, service_s=0.01, queue_length=0)
    rep.given_up(2)
    await rep.aclose()
    assert agent.given_up == 5 and rep.stats.sent == rep.stats.queued == 6 and rep.stats.mismatches == 0
    paths = [r.path for r in agent.requests]
    assert paths == ["/v1/deliveries", "/v1/given_up", "/v1/completions", "/v1/given_up"]
    assert [r.json for r in agent.requests if r.path == "/v1/given_up"] == [{"pages": 3}, {"pages": 2}]


async def test_an_outage_warns_once_drops_reports_and_resyncs_the_queue(caplog: pytest.LogCaptureFixture) -> None:
    agent = FakeAgent()
    rep = make(agent, retry_interval_s=0.02)
    rep.start()
    rep.deliver(1, queue_length=1)
    await settle(rep)
    agent.up = False
    with caplog.at_level(logging.INFO, logger="robotctl.scrapy"):
        for n in range(2, 200):
            rep.deliver(1, queue_length=n)
            await asyncio.sleep(0)
        await asyncio.sleep(0.1)
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "cannot be reached" in warnings[0].getMessage()
        assert rep.stats.dropped >= 150 and rep.health.outages == 1
        agent.up = True
        await asyncio.sleep(0.1)
        rep.deliver(1, queue_length=200)
        await settle(rep)
        assert any("answers again" in r.getMessage() for r in caplog.records)
    await rep.aclose()
    # the agent's view was set to the indexer's length after the last report dropped, then went on
    resync = [r for r in agent.requests if r.path == "/v1/queue"]
    assert len(resync) == 1 and rep.stats.resyncs == 1
    assert agent.queue == 200 and rep.stats.mismatches == 0
    assert rep.stats.sent + rep.stats.dropped == rep.stats.queued


async def test_a_refused_batch_is_dropped_with_one_warning_and_unknown_robots_are_not_named(
        caplog: pytest.LogCaptureFixture) -> None:
    agent = FakeAgent()
    rep = make(agent)
    rep.start()
    with caplog.at_level(logging.WARNING, logger="robotctl.scrapy"):
        rep.deliver(1, robot="robot-9")
        await settle(rep)
        rep.deliver(1, robot="robot-9")
        await settle(rep)
        rep.robots = {"robot-1"}
        rep.deliver(1, robot="robot-9")  # not registered: sent without its robot
        await settle(rep)
    await rep.aclose()
    assert rep.stats.rejected == 2 and rep.stats.dropped == 2 and rep.stats.sent == 1
    assert len(caplog.records) == 1 and "refused" in caplog.records[0].getMessage()
    assert "robot" not in agent.requests[-1].json["deliveries"][0]


async def test_a_mismatch_resynchronises_the_agent() -> None:
    agent = FakeAgent()
    rep = make(agent)
    rep.start()
    agent.queue = 3  # someone else's report: the agent's view is off by three
    rep.deliver(1, queue_length=1)
    await settle(rep)
    await rep.aclose()
    assert rep.stats.mismatches == 1 and rep.stats.resyncs == 1 and agent.queue == 1


def test_the_null_reporter_takes_everything() -> None:
    rep = NullReporter()
    assert not rep.enabled
    rep.deliver(1, bytes=3, robot="r", queue_length=1)
    rep.complete(1, service_s=0.1, bytes=3, queue_length=0)
    rep.obsolete(1, queue_length=0)
    rep.given_up(1)
    rep.set_queue(0)


def test_the_readme_lists_every_setting() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "robotctl" / "scrapy" / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `(ROBOTCTL_\w+)` \|", readme, re.M))
    assert listed == set(RobotctlSettings.documented()) | {"ROBOTCTL_SERVICE_FIELD", "ROBOTCTL_BYTES_FIELD"}


# -- warnings where control is moot ----------------------------------------------------------------
@pytest.mark.parametrize(("settings", "expected"), [
    ({"CONCURRENT_REQUESTS_PER_DOMAIN": 1, "DOWNLOAD_DELAY": 1},  # startproject's template
     ["CONCURRENT_REQUESTS_PER_DOMAIN = 1", "DOWNLOAD_DELAY = 1 s"]),
    ({"CONCURRENT_REQUESTS_PER_IP": 1}, ["CONCURRENT_REQUESTS_PER_IP = 1"]),
    ({"ROBOTCTL_ROBOTS": 20, "CONCURRENT_REQUESTS_PER_DOMAIN": 16}, ["ROBOTCTL_ROBOTS = 20"]),
    ({"CONCURRENT_REQUESTS_PER_DOMAIN": 16, "DOWNLOAD_DELAY": 0.1}, []),
    ({}, []),  # Scrapy's defaults: 16 slots, 8 per domain
])
def test_template_settings_that_leave_nothing_to_control_warn_once_each(
        settings: dict[str, Any], expected: list[str], caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("scrapy")
    from scrapy.utils.test import get_crawler

    from robotctl.scrapy import RobotctlExtension

    crawler = get_crawler(settings_dict={"CONCURRENT_REQUESTS": 16, **settings})
    ext = RobotctlExtension.from_crawler(crawler)
    with caplog.at_level(logging.WARNING, logger="robotctl.scrapy"):
        ext.warn_if_moot()
    texts = [r.getMessage() for r in caplog.records if r.name == "robotctl.scrapy"]
    assert len(texts) == len(expected)
    for text, words in zip(texts, expected, strict=True):
        assert words in text
        setting = words.split(" =")[0]
        # names the setting and its fix
        assert any(f in text for f in (f"raise {setting}", f"Lower {setting}", f"lower {setting}"))
        assert all(r.levelno == logging.WARNING for r in caplog.records)


async def test_the_local_agent_is_imported_from_when_the_spider_opens_not_as_the_crawler_is_built() -> None:
    """The local agent's import runs in a thread, started by ``spider_opened``: started in ``from_crawler`` it
    shared the interpreter's lock with Scrapy's own start-up, and the comparison's item pipelines opened
    1.2-1.8 s into the crawl instead of 0.3 s (bench/scrapy_compare.py's idle column)."""
    pytest.importorskip("scrapy")
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from robotctl.scrapy import RobotctlExtension

    crawler = get_crawler(settings_dict={"ROBOTCTL_AGENT": "local"})
    ext = RobotctlExtension.from_crawler(crawler)
    assert ext._agent_code is None
    crawler.engine = SimpleNamespace()  # type: ignore[assignment]  # set as the crawl starts; nothing to change
    spider = Spider("s")
    ext.spider_opened(spider)
    assert ext._agent_code is not None
    await asyncio.wrap_future(ext._agent_code)  # imported, in the thread
    await ext.spider_closed(spider)


def _bridged(settings: dict[str, Any]) -> Any:
    """An extension whose spider has opened, its local agent not yet answering, over a stub engine."""
    pytest.importorskip("scrapy")
    from scrapy.utils.test import get_crawler

    from robotctl.scrapy import RobotctlExtension

    crawler = get_crawler(settings_dict={"ROBOTCTL_AGENT": "local", "CONCURRENT_REQUESTS": 8,
                                         "ROBOTCTL_DELIVERY_SIGNAL": "item", **settings})  # the add-on's
    ext = RobotctlExtension.from_crawler(crawler)
    crawler.engine = SimpleNamespace(paused=False, downloader=SimpleNamespace(total_concurrency=8, active=()))  # type: ignore[assignment]
    ext.running = True
    ext._start_bridge()
    return ext


async def test_until_the_local_agent_answers_the_robots_follow_its_start_up_policy() -> None:
    """The local agent takes 1-3 s to start (more on a loaded machine); meanwhile the add-on applies the
    agent's start-up policy itself, on the items in the pipelines: without it 100-150 items of a fast crawl
    came before the first command, the indexer's buffer overflowing (CI's tests/scrapy/test_addon.py).
    The items delivered meanwhile are not reported as deliveries (the agent would count them as its
    fleet's), only the queue they make."""
    from robotctl.scrapy._addon import safe_startup

    ext = _bridged({"ROBOTCTL_CAPACITY": 4})
    pushed: list[tuple[str, dict[str, Any]]] = []
    ext.reporter._push = lambda report: pushed.append((report.kind, report.body))  # type: ignore[method-assign]
    assert ext.bridge == safe_startup(8, 4) == (8, 6, 4, 2, 1)
    downloader = ext.crawler.engine.downloader
    seen = []
    for n in range(1, 6):
        ext.item_entered({"n": n})
        seen.append(downloader.total_concurrency)
    assert seen == [6, 4, 2, 1, 1]  # r(min(i, K)) robots of one download slot each
    assert ext.delivered_at_first_park == 1
    for n in range(1, 4):
        ext.item_left({"n": n})
    assert downloader.total_concurrency == 4  # two items in the pipelines
    ext.item_left({"n": 4})
    assert downloader.total_concurrency == 6
    assert [body["length"] for kind, body in pushed if kind == "queue"] == [1, 2, 3, 4, 4, 4, 3, 2, 1]
    assert {kind for kind, _ in pushed} == {"queue"}
    pushed.clear()

    async def registered() -> None:
        pass

    ext._local = object()  # started
    ext._register = registered  # type: ignore[method-assign]
    await ext._connect()
    assert ext.bridge is None and pushed == [("queue", {"length": 1})] and ext.delivered_at_registration == 5
    pushed.clear()
    await ext.reporter.aclose(timeout_s=0.1)
    ext.item_entered({"n": 6})
    assert [kind for kind, _ in pushed] == ["delivery"]
    assert downloader.total_concurrency == 8  # no robot registered: ROBOTCTL_DEFAULT_STATE (active)


@pytest.mark.parametrize("settings, bridge", [
    ({}, None),  # K unknown: the crawl runs uncontrolled, as the local agent's start then warns
    ({"ROBOTCTL_CAPACITY": 4, "ROBOTCTL_DEFAULT_STATE": "parked"}, None),  # parked until registered, as asked
    ({"ROBOTCTL_CAPACITY": 4, "ROBOTCTL_DELIVERY_SIGNAL": "response_received"}, None),  # no item count
    ({"ROBOTCTL_CAPACITY": 4, "ROBOTCTL_AGENT": "remote", "ROBOTCTL_URL": "http://agent"}, None),
    ({"ROBOTCTL_CAPACITY": 4, "ROBOTCTL_PROCESS": "p1"}, None),
    ({"ROBOTCTL_CAPACITY": 2, "ROBOTCTL_AGENT_CONFIG": {"policy": {"startup": [3, 2, 1]}}}, (3, 2, 1)),
    ({"ROBOTCTL_CAPACITY": 2, "ROBOTCTL_AGENT_CONFIG": {"policy": {"startup": "all"}}}, (8, 8, 8)),
    ({"ROBOTCTL_CAPACITY": 2, "ROBOTCTL_AGENT_CONFIG": {"policy": {"startup": 3}}}, (3, 3, 3)),
    ({"ROBOTCTL_CAPACITY": 2, "ROBOTCTL_AGENT_CONFIG": {"policy": {"startup": [3, 2]}}}, None),  # refused later
])
def test_the_bridge_is_the_local_agents_start_up_policy_or_nothing(settings: dict[str, Any],
                                                                  bridge: tuple[int, ...] | None) -> None:
    ext = _bridged(settings)
    assert ext.bridge == bridge
    ext.item_entered({"n": 1})
    assert ext.crawler.engine.downloader.total_concurrency == (8 if bridge is None else bridge[1])


# -- a wrong token --------------------------------------------------------------------------------
async def test_a_wrong_token_stops_the_reports_and_says_error_once_with_the_hint_once(
        caplog: pytest.LogCaptureFixture) -> None:
    from robotctl.agent.client import AgentRejectedError

    def refuse(req: Request) -> Response:  # the agent's own error body: its text already ends with the hint
        hint = "send Authorization: Bearer <server.token>"
        return Response(401, {"error": f"authorization: missing or wrong bearer token; {hint}",
                              "field": "authorization", "hint": hint})

    transport = Translating(refuse)
    client = AgentClient("http://agent", transport=transport, token="wrong")
    rep = Reporter(client, AgentHealth("http://agent", "..."), retry_interval_s=0.01)
    rep.start()
    with caplog.at_level(logging.DEBUG, logger="robotctl.scrapy"):
        for _ in range(50):
            rep.deliver(1)
            await asyncio.sleep(0.002)
        await rep.aclose(timeout_s=0.2)
    assert len(transport.requests) == 1  # refused once: never tried again
    assert rep.stats.dropped == 50 and rep.stats.sent == 0
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.levelno for r in loud] == [logging.ERROR]
    text = loud[0].getMessage()
    assert "ROBOTCTL_TOKEN" in text and text.count("send Authorization") == 1
    exc = AgentRejectedError(401, "authorization", "missing or wrong bearer token; fix it", "fix it")
    assert str(exc).count("fix it") == 1
    assert str(AgentRejectedError(400, "x", "bad", "do this")) == "HTTP 400: bad; do this"


# -- a fleet of processes (ROBOTCTL_PROCESS) ----------------------------------------------------------
def test_a_process_of_a_fleet_names_its_robots_and_leaves_the_queue_to_the_agent() -> None:
    """``ROBOTCTL_PROCESS = "auto"`` is ``<host>-<pid>``; the robots are ``<prefix>-<process>-k`` and register
    with the process; its reports carry no queue length (the agent's queue holds every process's items),
    and an item dropped in its pipelines is a completion without a service time."""
    import os
    import socket

    pytest.importorskip("scrapy")
    from scrapy.utils.test import get_crawler

    from robotctl.scrapy import RobotctlExtension

    s = RobotctlSettings.from_settings({"ROBOTCTL_PROCESS": "auto"}, environ={})
    assert s.process == f"{socket.gethostname()}-{os.getpid()}"
    with pytest.raises(InputError, match="ROBOTCTL_PROCESS"):
        RobotctlSettings.from_settings({"ROBOTCTL_PROCESS": "a\nb"})
    crawler = get_crawler(settings_dict={"CONCURRENT_REQUESTS": 4, "ROBOTCTL_PROCESS": "p7",
                                         "ROBOTCTL_ROBOT_PREFIX": "shop", "ROBOTCTL_DELIVERY_SIGNAL": "item"})
    ext = RobotctlExtension.from_crawler(crawler)
    assert [ext.robot_id(k) for k in (1, 4)] == ["shop-p7-1", "shop-p7-4"]
    sent: list[tuple[str, dict[str, Any], int | None]] = []
    ext.reporter._push = lambda report: sent.append((report.kind, report.body, report.queue_length))  # type: ignore[method-assign]
    ext.running = True
    ext.item_entered({})
    ext.item_entered({})
    ext.item_left({}, exception=ValueError("dropped"))
    ext.item_left({})
    assert [(kind, q) for kind, _, q in sent] == [("delivery", None), ("delivery", None), ("completion", None),
                                                  ("completion", None)]
    assert "service_s" not in sent[2][1] and "service_s" in sent[3][1]
    single = RobotctlExtension.from_crawler(get_crawler(settings_dict={"CONCURRENT_REQUESTS": 4,
                                                                       "ROBOTCTL_ROBOT_PREFIX": "shop"}))
    assert single.robot_id(1) == "shop-1"


# -- what is a delivery, what is given up ---------------------------------------------------------
def test_only_listed_statuses_are_deliveries_and_retried_statuses_that_reach_the_spider_are_given_up() -> None:
    pytest.importorskip("scrapy")
    from scrapy.http import HtmlResponse, Request
    from scrapy.utils.test import get_crawler

    from robotctl.scrapy import RobotctlExtension

    crawler = get_crawler(settings_dict={"ROBOTCTL_DELIVERY_SIGNAL": "response_received", "RETRY_HTTP_CODES": [500]})
    ext = RobotctlExtension.from_crawler(crawler)
    ext.running = True
    pushed: list[tuple[str, dict[str, Any]]] = []
    ext.reporter._push = lambda report: pushed.append((report.kind, report.body))  # type: ignore[method-assign]
    for status in (200, 404, 429, 503, 500, 301):
        request = Request(f"http://site/{status}")
        ext.response_received(HtmlResponse(request.url, status=status, body=b"x", request=request), request)
    assert ext.delivered == 1 and [k for k, _ in pushed].count("delivery") == 1  # the 200 only
    assert ext.given_up == 3 and [b for k, b in pushed if k == "given_up"] == [{"pages": 1}] * 3  # 429, 503, 500
    own = get_crawler(settings_dict={"RETRY_HTTP_CODES": [502], "ROBOTCTL_DELIVER_STATUSES": [200, 404]})
    ext = RobotctlExtension.from_crawler(own)
    assert ext.give_up_statuses == {429, 502, 503}  # a passing failure; a server's pushback always
    assert ext.settings.deliver_statuses == (200, 404)  # the user says a 404 is a delivery


def test_a_download_error_past_the_retries_is_given_up_an_ignored_request_is_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("scrapy")
    from scrapy.exceptions import IgnoreRequest
    from scrapy.http import Request
    from scrapy.utils.test import get_crawler

    from robotctl.scrapy import GiveUpMiddleware, RobotctlExtension, _middleware

    crawler = get_crawler(settings_dict={})
    ext = RobotctlExtension.from_crawler(crawler)
    ext.running = True
    pushed: list[str] = []
    ext.reporter._push = lambda report: pushed.append(report.kind)  # type: ignore[method-assign]
    monkeypatch.setattr(_middleware, "extension", lambda c: ext if c is crawler else None)
    mw = GiveUpMiddleware.from_crawler(crawler)
    request = Request("http://site/a")
    assert mw.process_exception(request, TimeoutError("no answer")) is None  # Scrapy goes on with it
    assert mw.process_exception(request, IgnoreRequest("robots.txt")) is None
    assert ext.given_up == 1 and pushed == ["given_up"]


def test_the_addon_puts_the_gate_nearest_the_downloader_and_the_give_up_hook_below_retry() -> None:
    pytest.importorskip("scrapy")
    from scrapy.settings import Settings

    from robotctl.scrapy import Addon

    settings = Settings({"ADDONS": {}})
    Addon().update_settings(settings)
    mws = settings.getdict("DOWNLOADER_MIDDLEWARES")
    retry = Settings().getdict("DOWNLOADER_MIDDLEWARES_BASE")["scrapy.downloadermiddlewares.retry.RetryMiddleware"]
    stats = Settings().getdict("DOWNLOADER_MIDDLEWARES_BASE")["scrapy.downloadermiddlewares.stats.DownloaderStats"]
    assert mws["robotctl.scrapy.PushbackMiddleware"] > stats > retry > mws["robotctl.scrapy.GiveUpMiddleware"]


async def test_an_items_delivery_names_the_robot_whose_download_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """A download under way when its robot was parked finishes; its items' deliveries name that robot, so
    the agent counts the robot as working until then (a crawl whose item deliveries named no robot fitted
    one robot at 6.1 items/s, fixed concurrency 1 indexes 3.1)."""
    pytest.importorskip("scrapy")
    from scrapy.http import HtmlResponse, Request
    from scrapy.utils.test import get_crawler

    from robotctl.scrapy import ItemSourceMiddleware, RobotctlExtension, _middleware
    from robotctl.scrapy._extension import META_ROBOT

    crawler = get_crawler(settings_dict={"ROBOTCTL_DELIVERY_SIGNAL": "item"})
    ext = RobotctlExtension.from_crawler(crawler)
    ext.running = True
    ext._registered.add("site-3")  # the reporter names registered robots only
    pushed: list[dict[str, Any]] = []
    ext.reporter._push = lambda report: pushed.append(report.body)  # type: ignore[method-assign]
    monkeypatch.setattr(_middleware, "extension", lambda c: ext if c is crawler else None)
    mw = ItemSourceMiddleware.from_crawler(crawler)

    def response(robot: str | None) -> HtmlResponse:
        request = Request("http://site/a", meta={} if robot is None else {META_ROBOT: robot})
        return HtmlResponse(request.url, body=b"x", request=request)

    a, b, c, follow = {"n": 1}, {"n": 2}, {"n": 3}, Request("http://site/b")
    assert list(mw.process_spider_output(response("site-3"), [a, follow, b])) == [a, follow, b]

    async def items() -> Any:
        yield c

    assert [x async for x in mw.process_spider_output_async(response(None), items())] == [c]
    ext.item_entered(b)
    ext.item_entered(c)
    ext.item_entered(a)
    assert [body.get("robot") for body in pushed] == ["site-3", None, "site-3"]
    assert ext.item_sources == {}  # nothing kept once the items entered


def test_a_refit_short_of_data_is_info_in_the_crawl_log_other_failures_stay_warnings() -> None:
    import logging

    from robotctl.scrapy._local import TargetsNotMetAtDebug

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("robotctl.agent.refit", logging.WARNING, "x", 1, msg, None, None)

    short = record("event=refit_failed reason=growth message='fit did not succeed: insufficient_data: ...'")
    other = record("event=refit_failed reason=growth message='solve failed'")
    f = TargetsNotMetAtDebug()
    f.filter(short)
    f.filter(other)
    assert short.levelname == "INFO" and other.levelname == "WARNING"
