"""Issue 11: the sidecar's HTTP API against a hostile or careless client. Each test is one finding that was
reproduced on main (its number in the docstring) and now holds."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from robotctl import InputError
from robotctl.agent.app import AGENT, create_app, run_in_process
from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig

TOKEN = "k9Vb2-Qx7_Lm4Ns8Tp1Wz"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _strict_json(text: str) -> Any:
    """JSON as RFC 8259 has it: a bare NaN or Infinity is an error."""
    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


async def _raw(url: str, data: bytes, *, timeout: float = 10.0) -> bytes:
    """Send raw bytes on a fresh connection and read the answer (until the server closes or 64 KiB)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), timeout)
    finally:
        writer.close()


def _status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def _body_of(answer: bytes) -> Any:
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])


def _request(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
    for k, v in (headers or {}).items():
        head += f"{k}: {v}\r\n"
    return head.encode("latin-1") + b"\r\n" + body


# -- finding 1: nobody controls (or reads) the robots without the token --------------------------------------
GUARDED = [("POST", "/v1/queue", {"length": 5}), ("DELETE", "/v1/robots/r1", None), ("POST", "/v1/robots", {}),
           ("POST", "/v1/deliveries", {"pages": 1}), ("POST", "/v1/completions", {"pages": 1}),
           ("POST", "/v1/obsolete", {"pages": 1}), ("POST", "/v1/given_up", {"pages": 1}),
           ("POST", "/v1/refit", None), ("GET", "/v1/status", None),
           ("GET", "/v1/robots", None), ("GET", "/v1/policy", None), ("GET", "/v1/robots/r1/command", None),
           ("GET", "/v1/no-such-endpoint", None)]


async def test_without_the_token_nobody_moves_or_reads_the_robots(config_factory: Callable[..., AgentConfig]) -> None:
    cfg = config_factory(server={"token": TOKEN, "insecure_loopback": False})
    async with run_in_process(cfg) as (url, app), aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/robots", json={"robot": "r1"}, headers=AUTH) as r:
            assert r.status == 200
        for auth in ({}, {"Authorization": "Bearer wrong-wrong-wrong-wrong"}, {"Authorization": TOKEN},
                     {"Authorization": f"Basic {TOKEN}"}):
            for method, path, body in GUARDED:
                async with s.request(method, url + path, json=body, headers=auth) as r:
                    got = await r.json()
                    assert r.status == 401 and got["field"] == "Authorization", (method, path, auth, got)
        agent = app[AGENT]
        assert agent.queue_length == 0 and list(agent.robot_ids) == ["r1"]
        for path in ("/healthz", "/readyz", "/metrics"):  # liveness, readiness and the scrape stay open
            async with s.get(url + path) as r:
                assert r.status == 200, path
        for scheme in ("bearer", "BEARER", "Bearer"):  # RFC 7235: the scheme is case-insensitive
            async with s.get(url + "/v1/status", headers={"Authorization": f"{scheme} {TOKEN}"}) as r:
                assert r.status == 200, scheme
        # a byte that is not ASCII in the header: 401, not a 500
        answer = await _raw(url, b"POST /v1/queue HTTP/1.1\r\nHost: a\r\nConnection: close\r\nAuthorization: "
                                 b"Bearer \xff\xfe" + TOKEN.encode() + b"\r\nContent-Length: 2\r\n\r\n{}")
        assert _status_of(answer) == 401


@pytest.mark.parametrize(("server", "refused"), [
    ({"host": "0.0.0.0"}, True), ({"host": "0.0.0.0", "insecure_loopback": True}, True),
    ({"host": "127.0.0.1"}, True), ({"host": "127.0.0.1", "insecure_loopback": True}, False),
    ({"host": "0.0.0.0", "token": TOKEN}, False)])
def test_an_app_that_would_expose_the_robots_is_refused(tmp_path: Path, server: dict[str, Any],
                                                        refused: bool) -> None:
    cfg = AgentConfig.from_dict({"queue": {"capacity": 5}, "server": server, "log": {"dir": str(tmp_path)}})
    if refused:
        with pytest.raises(InputError, match=r"server\.token"):
            create_app(cfg)
    else:
        create_app(cfg)


async def test_a_registration_cannot_be_taken_over_by_another_client(config_factory: Callable[..., AgentConfig],
                                                                    clock: ManualClock) -> None:
    cfg = config_factory(robots={"count": 2, "lease_s": 10.0})
    async with run_in_process(cfg, clock=clock) as (url, app), aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/robots", json={"robot": "r1", "default_state": "active"}) as r:
            mine = await r.json()
        key = {"X-Robot-Key": mine["robot_key"]}
        assert len(mine["robot_key"]) >= 32
        # another client: the same id, no key
        async with s.post(url + "/v1/robots", json={"robot": "r1", "default_state": "parked"}) as r:
            assert r.status == 409 and (await r.json())["field"] == "robot"
        for method, path in (("DELETE", "/v1/robots/r1"), ("GET", "/v1/robots/r1/command?wait_s=0")):
            for headers in ({}, {"X-Robot-Key": "0" * 43}):
                async with s.request(method, url + path, headers=headers) as r:
                    assert r.status == 403 and (await r.json())["field"] == "X-Robot-Key", (method, headers)
        async with s.get(url + "/v1/robots") as r:
            view = (await r.json())["robots"][0]
        assert (view["robot"], view["default_state"]) == ("r1", "active")
        assert "robot_key" not in view  # the key is shown once, to the robot that registered
        # the robot itself, with its key: polls, re-registers, deregisters
        async with s.get(url + "/v1/robots/r1/command?wait_s=0", headers=key) as r:
            assert r.status == 200
        async with s.post(url + "/v1/robots", json={"robot": "r1"}, headers=key) as r:
            assert r.status == 200 and "robot_key" not in await r.json()
        # fake registrations take every rank; the real robot gets its rank once their leases run out
        for fake in ("f1", "f2"):
            async with s.post(url + "/v1/robots", json={"robot": fake}) as r:
                assert r.status in (200, 409)
        async with s.post(url + "/v1/robots", json={"robot": "real", "rank": 2}) as r:
            assert r.status == 409
        clock.advance(10.5)  # r1 polled, the fakes never did: theirs run out
        async with s.post(url + "/v1/robots", json={"robot": "real", "rank": 2}) as r:
            got = await r.json()
            assert r.status == 200 and got["rank"] == 2, got
        assert "real" in app[AGENT].robot_ids


# -- finding 3: no request holds a connection for ever; health checks get through ---------------------------
async def test_half_sent_requests_are_closed_and_health_checks_get_through(
        config_factory: Callable[..., AgentConfig]) -> None:
    cfg = config_factory(server={"header_timeout_s": 0.5, "body_timeout_s": 0.5, "max_connections": 32,
                                 "max_long_polls": 4})
    async with run_in_process(cfg) as (url, _):
        host, port = url.removeprefix("http://").rsplit(":", 1)
        slow = []
        for _ in range(80):  # more half-sent requests than the agent keeps connections
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: agent\r\nX-Slow: ")
            slow.append((reader, writer))
        await asyncio.sleep(0.05)
        async with aiohttp.ClientSession() as s, s.get(url + "/healthz") as r:
            assert r.status == 200  # the oldest waiting connection made room
        # every half-sent request is closed by the header timeout (or to make room), none is held
        closed = await asyncio.wait_for(asyncio.gather(*(reader.read() for reader, _ in slow)), timeout=10.0)
        assert all(not data.startswith(b"HTTP/1.1 200") for data in closed)
        for _, writer in slow:
            writer.close()
        # a body that stops coming: 408 after body_timeout_s, and the connection closed soon after (aiohttp
        # lingered 10 s reading the rest of the body that never came)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /v1/deliveries HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{\"pa")
        answer = await asyncio.wait_for(reader.read(), timeout=8.0)  # until the agent closes it
        writer.close()
        assert _status_of(answer) == 408 and _body_of(answer)["field"] == "body"


async def test_long_polls_are_capped(config_factory: Callable[..., AgentConfig]) -> None:
    cfg = config_factory(server={"max_connections": 32, "max_long_polls": 2})
    async with run_in_process(cfg) as (url, _), aiohttp.ClientSession() as s:
        keys, versions = {}, {}
        for rid in ("r1", "r2", "r3"):
            async with s.post(url + "/v1/robots", json={"robot": rid}) as r:
                keys[rid] = (await r.json())["robot_key"]
        for rid in ("r1", "r2", "r3"):  # the command in force now (registrations may have changed it): polls wait
            async with s.get(f"{url}/v1/robots/{rid}/command", headers={"X-Robot-Key": keys[rid]}) as r:
                versions[rid] = (await r.json())["version"]

        def poll(rid: str) -> Any:
            return s.get(f"{url}/v1/robots/{rid}/command?version={versions[rid]}&wait_s=3",
                         headers={"X-Robot-Key": keys[rid]})

        waiting = [asyncio.create_task(_status(poll(rid))) for rid in ("r1", "r2")]
        await asyncio.sleep(0.2)
        async with poll("r3") as r:
            assert r.status == 503 and r.headers.get("Retry-After") and (await r.json())["field"] == "server"
        assert await asyncio.gather(*waiting) == [200, 200]


async def _status(request: Any) -> int:
    async with request as r:
        return int(r.status)


# -- finding 4: numbers that are finite but absurd never reach the state -------------------------------------
@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/completions", {"pages": 1, "service_s": 1e308}, "service_s"),
    ("/v1/completions", {"completions": [{"pages": 1, "service_s": 1e308}] * 2}, "completions[0].service_s"),
    ("/v1/completions", {"pages": 1, "service_s": 86400.5}, "service_s"),
    ("/v1/deliveries", {"pages": 1, "client_time": 1e300}, "client_time"),
    ("/v1/deliveries", {"pages": 1, "client_time": -1e300}, "client_time"),
])
async def test_absurd_numbers_get_400(running: tuple[str, Any], path: str, body: Any, field: str) -> None:
    url, app = running
    async with aiohttp.ClientSession() as s, s.post(url + path, json=body) as r:
        got = await r.json()
        assert (r.status, got["field"]) == (400, field), got
        assert "split" not in got["hint"]
    assert app[AGENT].status()["totals"]["service_seconds"] == 0.0


async def test_responses_are_strict_json_even_if_a_number_overflows(running: tuple[str, Any]) -> None:
    url, app = running
    app[AGENT].totals.service_seconds = float("inf")  # how two 1e308 completions left it on main
    async with aiohttp.ClientSession() as s:
        for path in ("/v1/status", "/v1/policy"):
            async with s.get(url + path) as r:
                doc = _strict_json(await r.text())
        assert doc is not None
        async with s.get(url + "/v1/status") as r:
            assert _strict_json(await r.text())["totals"]["service_seconds"] is None


# -- finding 5: metric labels come from a fixed set --------------------------------------------------------
async def test_unknown_paths_share_one_metric_label(config_factory: Callable[..., AgentConfig]) -> None:
    cfg = config_factory(server={"token": TOKEN, "insecure_loopback": False})
    async with run_in_process(cfg) as (url, _), aiohttp.ClientSession() as s:
        for i in range(200):
            async with s.request(("GET", "POST", "DELETE", "PATCH")[i % 4], f"{url}/probe/{i}",
                                 headers=AUTH if i % 2 else {}) as r:
                assert r.status in (401, 404, 405)
        async with s.request("BREW", url + "/v1/status") as r:
            assert r.status in (400, 401, 405)  # aiohttp's parser refuses a method it does not know
        async with s.get(url + "/metrics") as r:
            text = await r.text()
    series = [smp.labels["endpoint"] for fam in text_string_to_metric_families(text) for smp in fam.samples
              if smp.name == "robotctl_http_bad_requests_total"]
    assert series == ["unmatched"]  # was one series per path (102,007 after 100,000 probes)


# -- finding 6: broken requests are 400s, not 500s ----------------------------------------------------------
DEEP = b"[" * 5000 + b"]" * 5000
HUGE = b"1" + b"0" * 400


@pytest.mark.parametrize(("raw", "field"), [
    (_request("POST", "/v1/deliveries", DEEP), "body"),
    (_request("POST", "/v1/robots", b'{"robot": ' + DEEP + b"}"), "body"),
    (_request("POST", "/v1/deliveries", b'{"pages": 1, "client_time": ' + HUGE + b"}"), "client_time"),
    (_request("POST", "/v1/completions", b'{"pages": 1, "service_s": ' + HUGE + b"}"), "service_s"),
    (_request("POST", "/v1/deliveries", b"not gzip at all", {"Content-Encoding": "gzip"}), "body"),
    (_request("POST", "/v1/deliveries", gzip.compress(b'{"pages": 1}')[:12], {"Content-Encoding": "gzip"}), "body"),
    (_request("POST", "/v1/completions", b"\x78\x9c garbage", {"Content-Encoding": "deflate"}), "body"),
], ids=["deep_deliveries", "deep_robots", "huge_client_time", "huge_service_s", "gzip_not_gzip", "gzip_truncated",
        "deflate_garbage"])
async def test_broken_bodies_are_400_not_500(running: tuple[str, Any], raw: bytes, field: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    url, app = running
    before = app[AGENT].status()["totals"]
    with caplog.at_level(logging.WARNING):
        answer = await _raw(url, raw)
        await asyncio.sleep(0.05)
    assert _status_of(answer) == 400, answer[:300]
    assert _body_of(answer)["field"] == field
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
    after = app[AGENT].status()["totals"]
    assert {k: v for k, v in after.items() if k != "bad_requests"} == \
        {k: v for k, v in before.items() if k != "bad_requests"}


# -- finding 7: a client that leaves mid-body is not a disk failure --------------------------------------------
async def test_a_client_that_disconnects_mid_body_is_not_a_disk_failure(running: tuple[str, Any],
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    url, app = running
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with caplog.at_level(logging.INFO):
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(b'POST /v1/deliveries HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n{"pages":')
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.close()
        await asyncio.sleep(0.3)
    messages = [r.getMessage() for r in caplog.records]
    assert not any("log_write_failed" in m for m in messages), messages
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], messages
    assert any("client_disconnected" in m for m in messages), messages
    assert app[AGENT].status()["totals"]["deliveries"] == 0


# -- finding 10: the smaller ones ---------------------------------------------------------------------------
async def test_over_long_headers_are_one_line_in_the_log(running: tuple[str, Any],
                                                         caplog: pytest.LogCaptureFixture) -> None:
    url, _ = running
    with caplog.at_level(logging.DEBUG):
        answer = await _raw(url, b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
        await asyncio.sleep(0.05)
    assert _status_of(answer) == 400
    noisy = [r for r in caplog.records if r.exc_info is not None or r.levelno >= logging.ERROR]
    assert noisy == [], [(r.name, r.getMessage()) for r in noisy]


async def test_a_rank_beyond_the_fleet_says_how_to_fix_it(running: tuple[str, Any]) -> None:
    url, _ = running
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/robots", json={"robot": "r9", "rank": 99}) as r:
        got = await r.json()
    assert r.status == 400 and got["field"] == "rank"
    assert "split" not in got["hint"] and "robots.count" in got["hint"]


async def test_a_declared_body_over_the_limit_is_413_at_once(config_factory: Callable[..., AgentConfig]) -> None:
    """Issue 23, defect 10: a Content-Length over server.max_body_bytes waited for the body (30 s); with
    ``Expect: 100-continue`` the agent answered 100 Continue to 50 MiB."""
    cfg = config_factory(server={"max_body_bytes": 65536})
    async with run_in_process(cfg) as (url, _):
        for extra in ("", "Expect: 100-continue\r\n"):
            head = (f"POST /v1/deliveries HTTP/1.1\r\nHost: a\r\nContent-Length: {50 << 20}\r\n{extra}"
                    "Content-Type: application/json\r\n\r\n").encode()
            answer = await _raw(url, head, timeout=3.0)  # no body sent at all
            assert not answer.startswith(b"HTTP/1.1 100"), answer[:40]
            assert _status_of(answer) == 413 and _body_of(answer)["field"] == "body", answer[:200]
        answer = await _raw(url, b"POST /v1/deliveries HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n"
                                 b"Expect: teapot\r\n\r\n", timeout=3.0)
        assert _status_of(answer) == 417
        # a body within the limit still gets its 100 Continue and its answer
        answer = await _raw(url, b"POST /v1/deliveries HTTP/1.1\r\nHost: a\r\nContent-Length: 13\r\n"
                                 b"Expect: 100-continue\r\nConnection: close\r\n\r\n{\"pages\": 1}\n", timeout=3.0)
        assert answer.startswith(b"HTTP/1.1 100 Continue") and b"HTTP/1.1 200" in answer
