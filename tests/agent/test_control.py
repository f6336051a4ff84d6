"""The override: POST /v1/override pauses control, pins a fleet size for a duration, or resumes;
token-protected; its state on GET /v1/override, /v1/status, /metrics and in the log (the deprecated
/v1/control: tests/agent/test_deprecated_names.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from robotctl.agent.app import run_in_process
from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig

AUTH = {"Authorization": "Bearer s3cret-s3cret-s3cret"}


async def _post(s: aiohttp.ClientSession, url: str, body: Any, headers: dict[str, str] | None = AUTH
                ) -> tuple[int, Any]:
    async with s.post(url, json=body, headers=headers) as r:
        return r.status, await r.json()


async def _metrics(s: aiohttp.ClientSession, url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with s.get(url + "/metrics") as r:
        text = await r.text()
    return {(x.name, tuple(sorted(x.labels.items()))): x.value
            for fam in text_string_to_metric_families(text) for x in fam.samples}


async def test_pause_pin_and_resume(config_factory: Callable[..., AgentConfig], clock: ManualClock,
                                    caplog: pytest.LogCaptureFixture) -> None:
    cfg = config_factory(server={"token": "s3cret-s3cret-s3cret"}, policy={"startup": [4, 4, 3, 2, 1, 1]})
    caplog.set_level(logging.INFO, logger="robotctl.agent")
    async with run_in_process(cfg, clock=clock) as (url, _), aiohttp.ClientSession() as s:
        for i in range(1, 5):
            assert (await _post(s, url + "/v1/robots", {"robot": f"r{i}"}))[0] == 200
        # without the token: refused, nothing changes
        status, err = await _post(s, url + "/v1/override", {"action": "pause"}, headers=None)
        assert status == 401 and err["field"] == "Authorization"
        # pause at queue 0 (4 robots): the queue grows, the fleet stays
        status, view = await _post(s, url + "/v1/override", {"action": "pause", "reason": "incident 7"})
        assert status == 200 and view["override"] == "paused" and view["robots"] == 4 and view["until"] is None
        _, ack = await _post(s, url + "/v1/deliveries", {"pages": 4})
        assert ack["queue"] == 4 and ack["active"] == 4  # r(4) = 1, held at 4
        got = await _metrics(s, url)
        assert got[("robotctl_override", (("override", "paused"),))] == 1
        assert got[("robotctl_override", (("override", "auto"),))] == 0
        assert got[("robotctl_override_robots", ())] == 4
        # pin two robots for 60 s: applied at once, robots 3 and 4 parked
        status, view = await _post(s, url + "/v1/override", {"action": "pin", "robots": 2, "duration_s": 60})
        assert status == 200 and view["override"] == "pinned" and view["active_robots"] == 2
        assert view["until"] == pytest.approx(clock.now() + 60)
        async with s.get(url + "/v1/robots", headers=AUTH) as r:
            states = {x["robot"]: x["state"] for x in (await r.json())["robots"]}
        assert states == {"r1": "active", "r2": "active", "r3": "parked", "r4": "parked"}
        async with s.get(url + "/v1/status", headers=AUTH) as r:
            assert (await r.json())["override"]["override"] == "pinned"
        # the duration ends: control by the policy resumes by itself (r(4) = 1)
        clock.advance(61.0)
        await asyncio.sleep(0.05)
        async with s.get(url + "/v1/override", headers=AUTH) as r:
            view = await r.json()
        assert view["override"] == "auto" and view["active_robots"] == 1 and view["reason"] == "duration ended"
        # pin, then resume by hand
        await _post(s, url + "/v1/override", {"action": "pin", "robots": 3})
        status, view = await _post(s, url + "/v1/override", {"action": "resume"})
        assert status == 200 and view["override"] == "auto" and view["active_robots"] == 1
        got = await _metrics(s, url)
        assert got[("robotctl_override", (("override", "auto"),))] == 1
    events = [r.getMessage() for r in caplog.records if "event=override" in r.getMessage()]
    assert [e.split()[1] for e in events] == ["override=paused", "override=pinned", "override=auto", "override=pinned",
                                              "override=auto"]
    assert "reason='incident 7'" in events[0]


async def test_a_pin_raises_the_pool_an_autoscaler_sizes(config_factory: Callable[..., AgentConfig],
                                                         clock: ManualClock) -> None:
    cfg = config_factory(policy={"startup": [2, 2, 1, 1, 1, 1]})
    async with run_in_process(cfg, clock=clock) as (url, _), aiohttp.ClientSession() as s:
        assert (await _metrics(s, url))[("robotctl_policy_max_robots", ())] == 2
        await _post(s, url + "/v1/override", {"action": "pin", "robots": 4}, headers=None)
        assert (await _metrics(s, url))[("robotctl_policy_max_robots", ())] == 4


@pytest.mark.parametrize(("body", "field"), [({"action": "stop"}, "action"), ({"action": "pin"}, "robots"),
                                             ({"action": "pin", "robots": 9}, "robots"),
                                             ({"action": "pause", "robots": 2}, "robots"),
                                             ({"action": "pause", "duration_s": 0}, "duration_s"),
                                             ({"action": "resume", "duration_s": 5}, "duration_s"),
                                             ({"action": "pause", "why": "x"}, "why")])
async def test_bad_override_requests_name_the_field(running: tuple[str, Any], body: dict[str, Any],
                                                   field: str) -> None:
    url, _ = running
    async with aiohttp.ClientSession() as s:
        status, err = await _post(s, url + "/v1/override", body, headers=None)
        assert status == 400 and err["field"] == field
        async with s.get(url + "/v1/override", headers=AUTH) as r:
            assert (await r.json())["override"] == "auto"
