"""Shadow mode (actuation advise, robots.actuation: advise, issue 12): the live agent fits, optimises and exports
the robots it would run, but never parks or resumes anyone; switching the actuation at run time needs the token."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from robotctl.agent.api import Completion, Delivery
from robotctl.agent.app import AGENT, REFIT, run_in_process
from robotctl.agent.client import AgentClient, RobotState
from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig
from robotctl.agent.core import Agent
from robotctl.agent.log import DiscardLog
from robotctl.model import BMAP, PH, Admission, ModeArrivals, QueueModel, Simulation, TraceKind

N = 4


def _config(tmp_path: Path, **server: Any) -> AgentConfig:
    return AgentConfig.from_dict({
        "server": {"port": 0, "insecure_loopback": True, **server}, "queue": {"capacity": 5},
        "robots": {"ids": [f"r{i}" for i in range(1, N + 1)], "lease_s": 1e6, "actuation": "advise"},
        "costs": {"loss": 5, "obsolescence": 10, "response": 2, "robot": 20, "starvation": 300},
        "refit": {"interval_s": 200, "window_s": 2000, "min_interval_s": 0, "min_deliveries": 200,
                  "drift_bound": None, "executor": "thread"},
        "fit": {"mean_useful_life_s": 5.0},
        "log": {"dir": str(tmp_path / "log"), "fsync": "never"}})


async def _metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(f"{url}/metrics") as resp:
        text = await resp.text()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}" if s.labels else "")
            out[key] = s.value
    return out


async def test_advise_mode_never_parks_while_metrics_show_the_desired_count_changing(tmp_path: Path) -> None:
    """Simulated robots (the fleet runs all four, as it would without robotctl) under an agent in advise
    mode: refits adopt a threshold policy, /metrics shows robotctl_desired_robots = r(i) moving with the
    queue, and no robot is ever told to park."""
    base = BMAP.poisson(0.7, [0.6, 0.25, 0.15])
    model = QueueModel(5, ModeArrivals.per_mode({r: base.scaled(r) for r in range(1, N + 1)}),
                       PH(np.array([0.4, 0.6]), np.array([[-3.0, 1.0], [2.0, -3.0]])),
                       PH(np.array([1.0]), np.array([[-0.2]])), Admission.PARTIAL)
    clock = ManualClock(0.0)
    async with run_in_process(_config(tmp_path), clock=clock) as (url, app), \
            AgentClient(url, clock=clock) as client, aiohttp.ClientSession() as session:
        agent = app[AGENT]
        handles = [await client.register_robot(f"r{i}") for i in range(1, N + 1)]
        assert all(h.state is RobotState.ACTIVE for h in handles)
        sim = Simulation(model, lambda n, a, t: N, np.random.default_rng(4), record=True)
        desired: set[float] = set()
        active: set[float] = set()
        while sim.t < 1500.0:
            deadline = (clock.next_deadline or np.inf)
            if sim.advance(1, t_end=min(deadline, 1500.0)) == 0:
                clock.set(max(clock.now(), min(deadline, 1500.0)))
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
            if agent.policy.source == "fit" and sim.events % 25 == 0:
                m = await _metrics(session, url)
                desired.add(m["robotctl_desired_robots"])
                active.add(m["robotctl_active_robots"])
                assert m["robotctl_actuation{actuation=advise}"] == 1
                assert m.get("robotctl_robot_commands_total{state=parked}", 0) == 0
                assert m["robotctl_robots{state=parked}"] == 0
            assert all(h.state is RobotState.ACTIVE for h in handles), "a robot was parked in advise mode"
        assert app[REFIT].record.adopted >= 2
        r = agent.policy.policy.robots_at_level
        assert len(set(r)) > 1, f"the fitted policy {r} should be a threshold policy"
        assert len(desired) > 1, f"desired robots never changed: {desired}"
        assert active == {float(N)}  # the fleet as it runs by itself
        assert agent.actuator.commands_issued == {c: 0 for c in agent.actuator.commands_issued}
        # after the registrations at t = 0 the log holds no park or resume (the fleet never changed), and
        # it holds the agent's refits and policies
        import json

        events = [json.loads(x) for x in (tmp_path / "log" / "deliveries-00000001.jsonl").read_text().splitlines()]
        assert not [e for e in events if e["event"] in ("park", "resume") and e["t"] > 0]
        assert {"refit", "policy"} <= {e["event"] for e in events}
        for h in handles:
            await h.close(deregister=False)


async def test_switching_the_actuation_needs_the_token(tmp_path: Path) -> None:
    async with run_in_process(_config(tmp_path), clock=ManualClock(0.0)) as (url, app), \
            aiohttp.ClientSession() as session:
        async with session.post(f"{url}/v1/actuation", json={"actuation": "command"}) as resp:
            assert resp.status == 403 and (await resp.json())["field"] == "server.token"
        async with session.get(f"{url}/v1/actuation") as resp:  # loopback without a token: open to read
            assert (await resp.json())["actuation"] == "advise"
    secret = {"Authorization": "Bearer s3cret-s3cret-s3cret"}
    async with run_in_process(_config(tmp_path, token="s3cret-s3cret-s3cret"), clock=ManualClock(0.0)) as (url, app), \
            aiohttp.ClientSession() as session:
        agent = app[AGENT]
        for i in range(1, N + 1):
            agent.register(f"r{i}", None, None)
        async with session.post(f"{url}/v1/actuation", json={"actuation": "command"}) as resp:
            assert resp.status == 401
        async with session.post(f"{url}/v1/actuation", json={"actuation": "sideways"}, headers=secret) as resp:
            assert resp.status == 400 and (await resp.json())["field"] == "actuation"
        async with session.post(f"{url}/v1/actuation", json={"actuation": "command"}, headers=secret) as resp:
            assert resp.status == 200 and (await resp.json())["actuation"] == "command"
        assert not agent.advising


def test_entering_advise_hands_robots_their_default_state_once(tmp_path: Path) -> None:
    cfg = AgentConfig.from_dict({"queue": {"capacity": 5}, "robots": {"count": N},
                                 "policy": {"startup": [2, 2, 2, 1, 1, 1]}, "log": {"dir": str(tmp_path)}})
    clock = ManualClock(0.0)
    agent = Agent(cfg, clock, log=DiscardLog(), persist=False)
    agent.open()
    for i in range(1, N + 1):
        agent.register(f"r{i}", None, "active" if i < N else "parked")
    assert agent.mode == 2 and [agent.actuator.robots[f"r{i}"].command.value for i in range(1, N + 1)] == [
        "active", "active", "parked", "parked"]
    view = agent.set_actuation("advise")
    # r3 goes back to its default (active), r4's default is parked: three virtual robots run by themselves
    assert view == {"actuation": "advise", "active": 3, "desired": 2}
    before = dict(agent.actuator.commands_issued)
    clock.advance(1.0)
    agent.deliver([Delivery(None, 5, None, None)])  # the queue fills: r(i) = 1, nobody is told
    assert agent.desired() == 1 and agent.mode == 3 and agent.actuator.commands_issued == before
    with pytest.raises(RuntimeError, match="commands the fleet"):
        Agent(cfg, clock, log=DiscardLog(), persist=False).observe_fleet(1)
    assert agent.set_actuation("command")["active"] == 1  # back in command: r(5) = 1 at once
