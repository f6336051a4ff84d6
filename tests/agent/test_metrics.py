"""The agent's metrics beyond the walk of a delivery: robots counted once by state, the autoscaling pool
(robotctl_policy_max_robots), process and build information on the agent's own registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

import robotctl
from robotctl.agent.app import run_in_process
from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def _scrape(s: aiohttp.ClientSession, url: str) -> Samples:
    async with s.get(url + "/metrics") as r:
        assert r.status == 200
        text = await r.text()
    return {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
            for fam in text_string_to_metric_families(text) for smp in fam.samples}


def _v(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


async def test_each_robot_is_counted_once_by_state(config_factory: Callable[..., AgentConfig],
                                                    clock: ManualClock) -> None:
    cfg = config_factory(policy={"startup": [2, 2, 2, 2, 2, 2]}, robots={"count": 4, "lease_s": 10.0})
    async with run_in_process(cfg, clock=clock) as (url, _), aiohttp.ClientSession() as s:
        keys = {}
        for i in range(1, 5):
            async with s.post(url + "/v1/robots", json={"robot": f"r{i}"}) as r:
                assert r.status == 200
                keys[f"r{i}"] = (await r.json())["robot_key"]
        before = await _scrape(s, url)
        clock.advance(6.0)
        for rid in ("r1", "r3", "r4"):  # r2 stays silent: its lease runs out
            async with s.get(f"{url}/v1/robots/{rid}/command", headers={"X-Robot-Key": keys[rid]}) as r:
                assert r.status == 200
        clock.advance(6.0)
        after = await _scrape(s, url)
    by_state = {st: _v(before, "robotctl_robots", state=st) for st in ("active", "parked", "lost")}
    assert by_state == {"active": 2, "parked": 2, "lost": 0}
    by_state = {st: _v(after, "robotctl_robots", state=st) for st in ("active", "parked", "lost")}
    assert by_state == {"active": 1, "parked": 2, "lost": 1}  # r2 (active) is lost, and only lost
    assert sum(by_state.values()) == 4


async def test_policy_max_robots_counts_the_real_robots_of_the_largest_mode(
        config_factory: Callable[..., AgentConfig], clock: ManualClock) -> None:
    # virtual robot 1 is robot a, virtual robot 2 groups b1 and b2, the others hold 3 robots each
    cfg = config_factory(robots={"count": 4, "ids": ["a", ["b1", "b2"]], "group_size": 3},
                         policy={"startup": [3, 3, 2, 1, 1, 1]})
    async with run_in_process(cfg, clock=clock) as (url, _), aiohttp.ClientSession() as s:
        got = await _scrape(s, url)
    assert _v(got, "robotctl_policy_max_robots") == 1 + 2 + 3
    assert _v(got, "robotctl_desired_robots") == 3  # virtual robots at the current queue length (0)


async def test_process_and_build_information_are_on_the_agents_registry(running: tuple[str, Any]) -> None:
    url, _ = running
    async with aiohttp.ClientSession() as s:
        got = await _scrape(s, url)
    assert _v(got, "robotctl_build_info", version=robotctl.__version__) == 1
    assert _v(got, "process_cpu_seconds_total") > 0
    assert _v(got, "process_resident_memory_bytes") > 0
    assert any(name == "python_info" for name, _ in got)
