"""The HTTP API on a real socket: the walk of one delivery, every bad request class, auth, metrics,
readiness and shutdown."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from robotctl.agent.app import AGENT, run_in_process
from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig
from robotctl.agent.log import LogWriteError, list_segments


async def _post(s: aiohttp.ClientSession, url: str, body: Any = None, *, data: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with s.post(url, json=body if data is None else None, data=data, headers=headers) as r:
        return r.status, await r.json()


async def _get(s: aiohttp.ClientSession, url: str, **kw: Any) -> tuple[int, Any]:
    async with s.get(url, **kw) as r:
        return r.status, await r.json()


async def test_walk_of_one_delivery(running: tuple[str, Any], clock: ManualClock) -> None:
    url, app = running
    async with aiohttp.ClientSession() as s:
        for i in range(1, 5):
            status, view = await _post(s, url + "/v1/robots", {"robot": f"r{i}"})
            assert status == 200 and view["rank"] == i and view["state"] == "active"
        clock.advance(1.5)
        status, ack = await _post(s, url + "/v1/deliveries", {"robot": "r2", "pages": 2, "bytes": 900,
                                                              "client_time": 7.25})
        assert status == 200
        assert ack == {"accepted": 1, "pages": 2, "admitted": 2, "lost": 0, "t": 1001.5, "queue": 2,
                       "active": 4, "state": "active"}
    # the log holds it, stamped by the agent's clock, client time kept beside it
    lines = [json.loads(x) for x in list_segments(app[AGENT].state_dir)[0].read_text().splitlines()]
    assert {"t": 1001.5, "event": "delivery", "robot": "r2", "pages": 2, "bytes": 900, "client_t": 7.25,
            "active": 4} in lines


async def test_overflow_is_lost_and_the_actuator_follows_the_policy(config_factory: Callable[..., AgentConfig],
                                                                     clock: ManualClock) -> None:
    cfg = config_factory(policy={"startup": [3, 3, 3, 1, 1, 1]})
    async with run_in_process(cfg, clock=clock) as (url, _), aiohttp.ClientSession() as s:
        for i in range(1, 5):
            await _post(s, url + "/v1/robots", {"robot": f"r{i}"})
        status, ack = await _post(s, url + "/v1/deliveries", {"deliveries": [{"robot": "r1", "pages": 3},
                                                                            {"robot": "r2", "pages": 4}]})
        assert status == 200
        assert (ack["admitted"], ack["lost"], ack["queue"], ack["active"]) == (5, 2, 5, 1)
        _, robots = await _get(s, url + "/v1/robots")
        assert [r["state"] for r in robots["robots"]] == ["active", "parked", "parked", "parked"]
        _, ack = await _post(s, url + "/v1/completions", {"pages": 3, "service_s": 0.9})
        assert (ack["queue"], ack["active"]) == (2, 3)
        _, ack = await _post(s, url + "/v1/obsolete", {"pages": 1})
        assert (ack["removed"], ack["queue"]) == (1, 1)
        _, ack = await _post(s, url + "/v1/queue", {"length": 4})
        assert (ack["queue"], ack["change"], ack["active"]) == (4, 3, 1)
        _, status_view = await _get(s, url + "/v1/status")
        assert status_view["totals"]["lost"] == 2
        assert status_view["robots"]["counts"] == {"active": 1, "parked": 3, "lost": 0}


async def _snapshot(s: aiohttp.ClientSession, url: str, app: Any) -> tuple[Any, ...]:
    _, st = await _get(s, url + "/v1/status")
    totals = dict(st["totals"])
    totals.pop("bad_requests")
    robots = [(r["robot"], r["rank"], r["state"], r["version"]) for r in st["robots"]["registered"]]
    log = b"".join(p.read_bytes() for p in list_segments(app[AGENT].state_dir))
    return totals, st["queue"], st["robots"]["mode"], robots, log, st["policy"]


BAD = [
    # (path, body bytes, status, field)
    ("/v1/deliveries", b"{not json", 400, "body"),
    ("/v1/deliveries", b"", 400, "body"),
    ("/v1/deliveries", b'{"pages": NaN}', 400, "body"),
    ("/v1/deliveries", b'{"pages": 1, "client_time": Infinity}', 400, "body"),
    ("/v1/deliveries", b"[1, 2]", 400, "body"),
    ("/v1/deliveries", b'{"robot": "r1", "page": 1}', 400, "page"),
    ("/v1/deliveries", b'{"robot": "r1", "pages": -1}', 400, "pages"),
    ("/v1/deliveries", b'{"robot": "r1", "pages": 0}', 400, "pages"),
    ("/v1/deliveries", b'{"robot": "r1", "pages": 1.5}', 400, "pages"),
    ("/v1/deliveries", b'{"robot": "r1", "pages": true}', 400, "pages"),
    ("/v1/deliveries", b'{"robot": "r1", "pages": "2"}', 400, "pages"),
    ("/v1/deliveries", b'{"robot": "r1", "bytes": -5}', 400, "bytes"),
    ("/v1/deliveries", b'{"robot": "r1", "client_time": 1e400}', 400, "client_time"),
    ("/v1/deliveries", b'{"robot": "ghost"}', 400, "robot"),
    ("/v1/deliveries", b'{"robot": ["r1"]}', 400, "robot"),
    ("/v1/deliveries", b'{"deliveries": [{"robot": "r1"}, {"robot": "r1", "pages": -2}]}', 400,
     "deliveries[1].pages"),
    ("/v1/deliveries", b'{"deliveries": [{"robot": "r1"}, {"robot": "ghost"}]}', 400, "deliveries[1].robot"),
    ("/v1/deliveries", b'{"deliveries": []}', 400, "deliveries"),
    ("/v1/deliveries", b'{"deliveries": {"robot": "r1"}}', 400, "deliveries"),
    ("/v1/deliveries", json.dumps({"deliveries": [{"pages": 1}] * 11}).encode(), 400, "deliveries"),
    ("/v1/deliveries", b'{"deliveries": [], "extra": 1}', 400, "extra"),
    ("/v1/completions", b'{"pages": 1, "service_s": -0.5}', 400, "service_s"),
    ("/v1/completions", b'{"completions": [{"pages": 1}, {"pages": 0}]}', 400, "completions[1].pages"),
    ("/v1/completions", b"nope", 400, "body"),
    ("/v1/obsolete", b'{"pages": -3}', 400, "pages"),
    ("/v1/obsolete", b'{"count": 3}', 400, "count"),
    ("/v1/given_up", b'{"pages": 0}', 400, "pages"),
    ("/v1/given_up", b'{"pages": 1.5}', 400, "pages"),
    ("/v1/given_up", b'{"requests": 2}', 400, "requests"),
    ("/v1/queue", b'{"length": 6}', 400, "length"),
    ("/v1/queue", b'{"length": -1}', 400, "length"),
    ("/v1/queue", b"{}", 400, "length"),
    ("/v1/robots", b'{"robot": "r9", "default_state": "asleep"}', 400, "default_state"),
    ("/v1/robots", b'{"robot": "r9", "rank": 0}', 400, "rank"),
    ("/v1/robots", b'{"robot": "r9", "rank": 99}', 400, "rank"),
    ("/v1/robots", b'{"robot": "r9", "rank": 1}', 409, "rank"),
    ("/v1/robots", b'{"robot": "r1", "rank": 2}', 409, "robot"),  # another client's robot (no key)
]


async def test_every_bad_request_gets_its_error_and_changes_nothing(config_factory: Callable[..., AgentConfig],
                                                                     clock: ManualClock) -> None:
    # a long lease: the clock moves a second per request, and a lost lease would free r1's rank
    cfg = config_factory(server={"max_batch": 10}, policy={"startup": [3, 3, 3, 1, 1, 1]}, robots={"lease_s": 1000.0})
    async with run_in_process(cfg, clock=clock) as (url, app), aiohttp.ClientSession() as s:
        await _post(s, url + "/v1/robots", {"robot": "r1"})
        await _post(s, url + "/v1/robots", {"robot": "r2"})
        await _post(s, url + "/v1/deliveries", {"robot": "r1", "pages": 2})
        before = await _snapshot(s, url, app)
        for path, body, want_status, field in BAD:
            clock.advance(1.0)
            async with s.post(url + path, data=body, headers={"Content-Type": "application/json"}) as r:
                got = await r.json()
                assert r.status == want_status, (path, body, got)
            assert got["field"] == field, (path, body, got)
            assert got["error"].startswith(field) and got["hint"], got
            assert await _snapshot(s, url, app) == before, (path, body)
        # the path-level classes
        for query, want_status, field in [("", 404, "robot"), ("?version=abc", 400, "version"),
                                          ("?wait_s=-1", 400, "wait_s")]:
            robot = "ghost" if want_status == 404 else "r1"
            status, got = await _get(s, f"{url}/v1/robots/{robot}/command{query}")
            assert (status, got["field"]) == (want_status, field)
        assert await _snapshot(s, url, app) == before
        _, st = await _get(s, url + "/v1/status")
        assert sum(st["totals"]["bad_requests"].values()) == len(BAD) + 3


async def test_body_over_the_limit_gets_413(config_factory: Callable[..., AgentConfig]) -> None:
    cfg = config_factory(server={"max_body_bytes": 2048})
    async with run_in_process(cfg) as (url, app), aiohttp.ClientSession() as s:
        status, got = await _post(s, url + "/v1/deliveries", data=b'{"deliveries": [' + b" " * 4096 + b"]}")
        assert status == 413 and got["field"] == "body"
        assert app[AGENT].totals.deliveries == 0


async def test_token_guards_every_mutating_endpoint(config_factory: Callable[..., AgentConfig]) -> None:
    cfg = config_factory(server={"token": "s3cret-s3cret-s3cret"}, robots={"allow_unregistered": True})
    async with run_in_process(cfg) as (url, app), aiohttp.ClientSession() as s:
        for path in ("/v1/deliveries", "/v1/completions", "/v1/obsolete", "/v1/given_up", "/v1/queue",
                     "/v1/robots", "/v1/refit"):
            status, got = await _post(s, url + path, {"pages": 1})
            assert (status, got["field"]) == (401, "Authorization"), path
            status, _ = await _post(s, url + path, {"pages": 1}, headers={"Authorization": "Bearer wrong"})
            assert status == 401
        async with s.delete(url + "/v1/robots/x") as r:
            assert r.status == 401
        status, _ = await _get(s, url + "/v1/robots/x/command")
        assert status == 401
        for path in ("/v1/status", "/v1/policy", "/v1/robots"):  # they show robot ids and the log's path
            status, _ = await _get(s, url + path)
            assert status == 401, path
        for path in ("/healthz", "/readyz", "/metrics"):
            async with s.get(url + path) as r:
                assert r.status == 200, path
        status, ack = await _post(s, url + "/v1/deliveries", {"robot": "any", "pages": 1},
                                  headers={"Authorization": "Bearer s3cret-s3cret-s3cret"})
        assert status == 200 and ack["accepted"] == 1
        assert app[AGENT].totals.deliveries == 1


async def test_metrics_parse_and_count(running: tuple[str, Any], clock: ManualClock) -> None:
    url, _ = running
    async with aiohttp.ClientSession() as s:
        await _post(s, url + "/v1/robots", {"robot": "r1"})
        await _post(s, url + "/v1/deliveries", {"deliveries": [{"robot": "r1", "pages": 4, "bytes": 10},
                                                               {"robot": "r1", "pages": 3}]})
        clock.advance(2.0)
        await _post(s, url + "/v1/completions", {"pages": 2, "service_s": 1.0})
        await _post(s, url + "/v1/deliveries", {"robot": "r1", "pages": -1})
        async with s.get(url + "/metrics") as r:
            assert r.status == 200
            text = await r.text()
    samples = {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
               for fam in text_string_to_metric_families(text) for smp in fam.samples}

    def v(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert v("robotctl_deliveries_total") == 2
    assert v("robotctl_delivered_pages_total") == 7
    assert v("robotctl_delivered_bytes_total") == 10
    assert v("robotctl_lost_pages_total") == 2
    assert v("robotctl_completed_pages_total") == 2
    assert v("robotctl_queue_length_pages") == 3
    assert v("robotctl_queue_capacity_pages") == 5
    # only r1 is registered: the agent counts on no other robot (issue 25)
    assert v("robotctl_active_robots") == 1 and v("robotctl_desired_robots") == 1
    assert v("robotctl_robots_missing") == 3 and v("robotctl_robots_registered_below_count") == 1
    assert v("robotctl_policy_robots_at_level", level="5") == 4
    assert v("robotctl_loss_ratio", source="observed") == pytest.approx(2 / 7)
    assert v("robotctl_response_time_seconds", source="observed") == pytest.approx(2.0)
    assert v("robotctl_http_bad_requests_total", endpoint="POST /v1/deliveries") == 1
    assert v("robotctl_delivery_ack_seconds_count") == 1  # one request, acknowledged once
    assert ("robotctl_loss_ratio", (("source", "predicted"),)) not in samples  # no fit yet
    for name, _ in samples:  # the agent's own, and the standard process and interpreter collectors
        assert name.startswith(("robotctl_", "process_", "python_")), name


async def test_readiness_and_shutdown_tell_robots_their_default(config_factory: Callable[..., AgentConfig],
                                                                 clock: ManualClock) -> None:
    cfg = config_factory(policy={"startup": [2, 2, 1, 1, 1, 1]}, robots={"count": 3})
    async with aiohttp.ClientSession() as s:
        async with run_in_process(cfg, clock=clock) as (url, app):
            assert (await _get(s, url + "/readyz"))[0] == 200
            await _post(s, url + "/v1/robots", {"robot": "r1"})
            await _post(s, url + "/v1/robots", {"robot": "r2"})
            _, r3 = await _post(s, url + "/v1/robots", {"robot": "r3", "default_state": "active"})
            assert r3["state"] == "parked"
            poll = asyncio.create_task(_get(s, f"{url}/v1/robots/r3/command?version={r3['version']}&wait_s=5",
                                            headers={"X-Robot-Key": r3["robot_key"]}))
            await asyncio.sleep(0.05)
            assert not poll.done()
            log_dir = app[AGENT].state_dir
        status, view = await poll  # answered during shutdown, before the log closed
        assert status == 200 and view["state"] == "active" and view["reason"] == "shutdown"
    lines = [json.loads(x) for p in list_segments(log_dir) for x in p.read_text().splitlines()]
    assert lines[-1]["event"] == "resume" and lines[-1]["robot"] == "r3"
    assert json.loads((log_dir / "robots.json").read_text())[2]["robot"] == "r3"


def test_cleanup_contexts_in_dependency_order(config_factory: Callable[..., AgentConfig]) -> None:
    from robotctl.agent.app import create_app

    app = create_app(config_factory())
    names = [ctx.__name__ for ctx in app.cleanup_ctx]
    assert names == ["_metrics_ctx", "_agent_ctx", "_flusher_ctx", "_refit_ctx", "_reaper_ctx"]


async def test_two_apps_in_one_process_have_their_own_registries(tmp_path: Path) -> None:
    a, b = (AgentConfig.from_dict({"queue": {"capacity": 5}, "server": {"port": 0, "insecure_loopback": True},
                                   "robots": {"allow_unregistered": True}, "log": {"dir": str(tmp_path / n)}})
            for n in "ab")
    async with run_in_process(a) as (url_a, _), run_in_process(b) as (url_b, _), aiohttp.ClientSession() as s:
        assert url_a != url_b
        await _post(s, url_a + "/v1/deliveries", {"pages": 1})
        for url, want in ((url_a, 1.0), (url_b, 0.0)):
            async with s.get(url + "/metrics") as r:
                text = await r.text()
            values = {smp.name: smp.value for fam in text_string_to_metric_families(text) for smp in fam.samples}
            assert values["robotctl_deliveries_total"] == want


async def test_a_log_that_cannot_be_written_gets_503_and_changes_nothing(running: tuple[str, Any],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    url, app = running
    agent = app[AGENT]

    def full(data: bytes) -> None:
        raise LogWriteError(errno.ENOSPC, "No space left on device")

    async with aiohttp.ClientSession() as s:
        await _post(s, url + "/v1/deliveries", {"pages": 1})
        before = (agent.totals.deliveries, agent.queue.length)
        monkeypatch.setattr(agent.log, "append", full)
        status, got = await _post(s, url + "/v1/deliveries", {"pages": 2})
        assert status == 503 and got["field"] == "log" and "No space left" in got["error"]
        status, _ = await _post(s, url + "/v1/completions", {"pages": 1})
        assert status == 503
        assert (agent.totals.deliveries, agent.queue.length) == before


async def test_an_unwritable_log_directory_is_503_on_readyz_and_accepts_again_once_writable(
        config_factory: Callable[..., AgentConfig], clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect 1 of issue 23: rotation fails (directory read-only); deliveries and /readyz answer 503 and the
    agent accepts again by itself once the directory is writable (the retry is every second)."""
    import errno
    import os
    import time

    cfg = config_factory(log={"max_bytes": 4096, "fsync": "never"})
    real_open = os.open
    blocked = {"on": False}

    def guarded(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        if blocked["on"] and flags & os.O_CREAT and str(path).startswith(str(cfg.log.dir)):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", guarded)
    async with run_in_process(cfg, clock=clock) as (url, app), aiohttp.ClientSession() as s:
        agent = app[AGENT]
        acked = 0
        for _ in range(40):
            status, _ = await _post(s, url + "/v1/deliveries", {"pages": 1})
            acked += status == 200
        blocked["on"] = True
        statuses = [(await _post(s, url + "/v1/deliveries", {"pages": 1}))[0] for _ in range(200)]
        assert 503 in statuses and set(statuses) <= {200, 503}
        acked += statuses.count(200)
        assert statuses[statuses.index(503):].count(200) == 0
        status, ready = await _get(s, url + "/readyz")
        assert status == 503 and "cannot be written" in ready["log"]
        blocked["on"] = False
        start = time.monotonic()
        while (await _get(s, url + "/readyz"))[0] != 200:
            assert time.monotonic() - start < 5
            await asyncio.sleep(0.1)
        for _ in range(40):
            status, _ = await _post(s, url + "/v1/deliveries", {"pages": 1})
            assert status == 200
            acked += 1
        assert agent.log_stats().faults == 1
    recovered = sum(1 for f in list_segments(Path(cfg.log.dir)) for line in f.read_text().splitlines()
                    if json.loads(line)["event"] == "delivery")
    assert recovered == acked
