"""Fewer robots registered than robots.count (issue 25): the agent never counts on a robot that is not
registered. With 2 of 4 registered it adopted 4,4,4,1,1,1 from an extrapolated mode 4, exported desired 4,
and counted unregistered robots as active (a mean of 3.24 with 2 robots)."""

from __future__ import annotations

import asyncio
import logging
import math
from pathlib import Path

import aiohttp
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from robotctl.agent.api import Completion, Delivery
from robotctl.agent.app import AGENT, REFIT, run_in_process
from robotctl.agent.client import AgentClient
from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig
from robotctl.model import BMAP, PH, Admission, ModeArrivals, QueueModel, Simulation, TraceKind

N = 4


def _config(tmp_path: Path) -> AgentConfig:
    return AgentConfig.from_dict({
        "server": {"port": 0, "insecure_loopback": True}, "queue": {"capacity": 5},
        "robots": {"ids": [f"r{i}" for i in range(1, N + 1)], "lease_s": 1e6},
        "costs": {"loss": 5, "obsolescence": 10, "response": 2, "robot": 20, "starvation": 300},
        "policy": {"startup": "all"},
        "refit": {"interval_s": 200, "window_s": 2000, "min_interval_s": 0, "min_deliveries": 200,
                  "drift_bound": None, "executor": "thread"},
        "fit": {"mean_useful_life_s": 5.0}, "log": {"dir": str(tmp_path / "log"), "fsync": "never"}})


async def _metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(f"{url}/metrics") as resp:
        text = await resp.text()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}" if s.labels else "")
            out[key] = s.value
    return out


async def test_with_two_of_four_robots_registered_the_policy_uses_at_most_two(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Robots r1 and r2 register, r3 and r4 never do. The traffic: each registered, active robot delivers
    Poisson batches (the truth has modes 1..4, but only 1 and 2 can run). The agent's mode, desired robots,
    observed mean of active robots, every adopted policy and its pool stay within 2; the warning metric is
    1 and the log says so once. When r3 registers, the warning clears."""
    base = BMAP.poisson(0.7, [0.6, 0.25, 0.15])
    truth = QueueModel(5, ModeArrivals.per_mode({r: base.scaled(r) for r in range(1, N + 1)}),
                       PH(np.array([0.4, 0.6]), np.array([[-3.0, 1.0], [2.0, -3.0]])),
                       PH(np.array([1.0]), np.array([[-0.2]])), Admission.PARTIAL)
    clock = ManualClock(0.0)
    caplog.set_level(logging.INFO, logger="robotctl")
    async with run_in_process(_config(tmp_path), clock=clock) as (url, app), \
            AgentClient(url, clock=clock) as client, aiohttp.ClientSession() as session:
        agent = app[AGENT]
        handles = [await client.register_robot(f"r{i}") for i in (1, 2)]
        # the robots that deliver: the registered ones the agent keeps active
        sim = Simulation(truth, lambda n, a, t: max(1, sum(h.state.value == "active" for h in handles)),
                         np.random.default_rng(7), record=True)
        seen: dict[str, set[float]] = {"mode": set(), "desired": set()}
        while sim.t < 700.0:
            deadline = clock.next_deadline or math.inf
            if sim.advance(1, t_end=min(deadline, 700.0)) == 0:
                clock.set(max(clock.now(), min(deadline, 700.0)))
                await ManualClock.settle()
                while app[REFIT].record.running:
                    await asyncio.sleep(0.001)
                continue
            clock.set(max(clock.now(), sim.t))
            for row in sim.take_rows():
                if row.kind is TraceKind.DELIVERY:
                    agent.deliver([Delivery(f"r{row.robot}", row.pages, None, None)])
                elif row.kind is TraceKind.COMPLETION:
                    agent.complete([Completion(1, row.service_s, None)])
                elif row.kind is TraceKind.OBSOLETE:
                    agent.obsolete(1)
            await ManualClock.settle(2)
            seen["mode"].add(agent.mode)
            seen["desired"].add(agent.desired())
        m = await _metrics(session, url)
        assert app[REFIT].record.adopted >= 2
        assert agent.policy.source == "fit"
        assert max(agent.policy.policy.robots_at_level) <= 2, agent.policy.policy.robots_at_level
        assert max(seen["mode"]) <= 2 and max(seen["desired"]) <= 2, seen
        assert m["robotctl_active_robots"] <= 2 and m["robotctl_desired_robots"] <= 2
        assert m["robotctl_mean_active_robots{source=observed}"] <= 2.0
        assert m["robotctl_policy_max_robots"] <= 2
        assert m["robotctl_robots_registered_below_count"] == 1 and m["robotctl_robots_missing"] == 2
        assert max(int(k) for k in agent.policy.fit["modes"]) <= 2  # no mode fitted beyond the registered
        warnings = [r for r in caplog.records if "event=robots_missing" in r.getMessage()]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert "registered=2" in warnings[0].getMessage() and "count=4" in warnings[0].getMessage()
        handles.append(await client.register_robot("r3"))
        m = await _metrics(session, url)
        assert m["robotctl_robots_registered_below_count"] == 1 and m["robotctl_robots_missing"] == 1
        handles.append(await client.register_robot("r4"))
        m = await _metrics(session, url)
        assert m["robotctl_robots_registered_below_count"] == 0 and m["robotctl_robots_missing"] == 0
        for h in handles:
            await h.close(deregister=False)


def test_the_actuator_never_counts_on_an_unregistered_robot() -> None:
    """The mode follows r(i) only up to the virtual robots that hold a registered robot; a robot that
    registers later raises it at the next target; no robot registered at all: every robot runs (they run
    freely, unregistered)."""
    from robotctl.agent.actuator import Actuator

    act = Actuator(4, initial_mode=0)
    assert act.registered_slots() == 4
    act.register("a", 0.0)
    act.register("b", 0.0)
    assert act.registered_slots() == 2
    act.set_target(4, 1.0)
    assert act.mode == 2 and act.target == 4
    act.force(3, 2.0, "override")
    assert act.mode == 2
    act.register("c", 3.0)
    act.set_target(4, 4.0)
    assert act.mode == 3
    act.set_target(1, 5.0)
    assert act.mode == 1
