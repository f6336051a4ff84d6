"""Acceptance: a scripted crawler of simulated robots under the agent's control, on real sockets.

The simulator (model.Simulation) plays the paper example's traffic (config/paper-example.yaml): four
robots whose deliveries follow the per-mode BMAPs, an indexer with PH service, PH useful lives. Its
controller reads the agent's policy in force, so the robots run as the agent commands. Each simulated
event is posted to the agent at its simulated time (the agent runs on a manual clock shared with the
crawler): deliveries by the robot the simulator names, completions with their service times, obsolete
drops. Every robot is registered through the Python client, long-polls its command and must be active
(``permit()``) when it delivers.

After every event the test checks that the agent's queue view equals the simulator's queue, that the
agent commands r(i) robots at the current queue length i, that the simulator runs the same number, and
that the robots' handles converge to exactly ranks 1..r(i) active.

The agent probes each mode alone for ``PROBE_S`` simulated seconds, fits, optimises, and must adopt
the optimal policy of the true model (computed here with policies.optimise, not typed in); a second
refit on traffic under that policy must keep it.

How much probing is enough was measured offline, fitting probes of the paper example with 30 seeds
per length: the fitted optimum was the true one in 27/30 runs at 400 s per mode, 28/30 at 1000 s,
30/30 at 1500 s, 28/30 at 2000 s and 30/30 at 2500 s (the misses cost 2.5% more than the optimum,
one 16%). The seed below fixes one reproducible run at 1500 s per mode.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from robotctl.agent import load_model_file
from robotctl.agent.app import AGENT, REFIT, run_in_process
from robotctl.agent.client import AgentClient, RobotHandle, RobotState
from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig
from robotctl.model import Simulation, ThresholdPolicy, TraceKind, TraceRow
from robotctl.policies import optimise

ROOT = Path(__file__).resolve().parents[2]
PROBE_S = 1500.0
PHASE2_S = 1500.0
N_ROBOTS = 4


def _config(tmp_path: Path, costs: dict[str, float]) -> AgentConfig:
    return AgentConfig.from_dict({
        "server": {"port": 0, "insecure_loopback": True},
        "queue": {"capacity": 5},
        # undamped, as in the model: the test checks that the fleet is r(i) after every event (no hysteresis:
        # the plain threshold optimum, which the exact hysteresis choice would trade for fewer commands)
        "robots": {"ids": [f"robot-{r}" for r in range(1, N_ROBOTS + 1)], "lease_s": 1e6, "dwell_s": 0,
                   "max_commands_per_min": 0, "hysteresis": 0},
        "costs": costs,
        "policy": {"startup": "all"},
        "refit": {"interval_s": 1e9, "min_interval_s": 0, "window_s": 1e5, "drift_window_s": 60,
                  "drift_bound": None, "min_deliveries": 200, "probe_s": PROBE_S, "cold_start_deliveries": 0,
                  "executor": "process", "timeout_s": 300},
        # the per-mode fit, pinned: with the joint fit (the default) and with its general structure (a MAP
        # per mode on common phases, paper 000's own model, which BIC chooses here) this seed adopts
        # 3,3,3,3,1,1 (J 65.13 on the truth, 2.5% above the optimum 3,3,3,1,1,1, J 63.54). The probe window
        # runs each mode alone (3 mode changes), so which phase of one mode is which of another is not
        # identified: the general fit's page rates equal the per-mode fit's within 0.1%, yet it prices the
        # optimum at 74.7 against 65.3 (bench/joint_structures.py)
        "fit": {"options": {"arrivals": "per_mode"}},
        "log": {"dir": str(tmp_path / "log")},
    })


async def _until(cond: Callable[[], bool], what: str, *, guard_s: float = 20.0) -> None:
    """Let the loop run until ``cond()`` (real I/O: long-poll answers); a hang guard, not a timing check."""
    async def wait() -> None:
        while not cond():
            await asyncio.sleep(0.001)

    try:
        await asyncio.wait_for(wait(), timeout=guard_s)
    except TimeoutError:
        pytest.fail(f"never happened: {what}")


def _converged(handles: dict[int, RobotHandle], mode: int) -> bool:
    return all(h.state is (RobotState.ACTIVE if rank <= mode else RobotState.PARKED) for rank, h in handles.items())


@pytest.mark.slow
async def test_scripted_crawler_under_agent_control(tmp_path: Path) -> None:
    true_model, costs = load_model_file(str(ROOT / "config" / "paper-example.yaml"))
    optimum = optimise(true_model, costs).best.policy
    clock = ManualClock(0.0)
    cfg = _config(tmp_path, costs.to_dict())
    async with run_in_process(cfg, clock=clock) as (url, app), AgentClient(url, clock=clock) as client:
        agent = app[AGENT]
        handles = {r: await client.register_robot(f"robot-{r}") for r in range(1, N_ROBOTS + 1)}
        assert [h.rank for h in handles.values()] == [1, 2, 3, 4]

        seen = {"version": 0}  # the policy version the simulator's current mode was chosen under

        def controller(n: int, active: int, t: float) -> int:
            seen["version"] = agent.holder.current.version
            return agent.holder.current.policy.robots_at_level[n]

        sim = Simulation(true_model, controller, np.random.default_rng(20261121), record=True)
        stats = {"events": 0, "deliveries": 0, "policy_changes_between_events": 0}
        levels: set[int] = set()
        adopted: list[ThresholdPolicy] = []

        async def post(row: TraceRow, *, in_flight: bool) -> None:
            if row.kind is TraceKind.DELIVERY:
                handle = handles[int(row.robot)]  # type: ignore[arg-type]
                if in_flight:  # fetched before a time-driven change parked its robot: delivered anyway
                    ack = await client.deliver(handle.robot_id, pages=row.pages)
                else:
                    assert handle.state is RobotState.ACTIVE, f"robot {row.robot} delivered while parked"
                    async with handle.permit():  # an obedient robot (active here, so it passes at once)
                        ack = await client.deliver(handle.robot_id, pages=row.pages)
                assert ack["accepted"] == 1
                stats["deliveries"] += 1
            elif row.kind is TraceKind.COMPLETION:
                await client.complete(1, service_s=row.service_s)
            elif row.kind is TraceKind.OBSOLETE:
                await client.obsolete(1)
            # LOSS rows repeat what the delivery's acknowledgement says; PARK/RESUME rows are checked
            # through the robots' handles below

        async def run_until(t_stop: float) -> None:
            while sim.t < t_stop:
                version = seen["version"]  # the simulator runs the next event under this policy
                deadline = min(t_stop, clock.next_deadline or np.inf)
                if sim.advance(1, t_end=deadline) == 0:
                    clock.set(max(clock.now(), deadline))  # a timer of the agent is due (probe, refit check)
                    await ManualClock.settle()
                    # a refit it started finishes before simulated time moves on: the run is reproducible
                    await _until(lambda: not app[REFIT].record.running, "the refit to finish")
                    await _until(lambda: _converged(handles, agent.actuator.mode), "robots follow the new policy")
                    continue
                rows = sim.take_rows()
                clock.set(max(clock.now(), sim.t))
                await ManualClock.settle()
                changed = agent.holder.current.version != version
                for row in rows:
                    await post(row, in_flight=changed)
                changed = changed or agent.holder.current.version != version
                stats["events"] += 1
                i = agent.queue.length
                r = agent.holder.current.policy.robots_at_level
                assert i == sim.n, "the agent's queue view left the simulator's queue"
                assert agent.actuator.mode == r[i], f"agent runs {agent.actuator.mode} robots at i={i}, r(i)={r[i]}"
                if changed:
                    stats["policy_changes_between_events"] += 1
                else:
                    assert sim.mode == agent.actuator.mode
                levels.add(i)
                await _until(lambda: _converged(handles, agent.actuator.mode),
                             f"robots 1..{agent.actuator.mode} active at t={sim.t:.3f}")
                if agent.holder.current.source == "fit" and (not adopted or
                                                              adopted[-1] != agent.holder.current.policy):
                    adopted.append(agent.holder.current.policy)

        # phase 1: the probe (modes 4, 3, 2, 1 alone), then the first fit
        await run_until(N_ROBOTS * PROBE_S + 1.0)
        # the refit runs in a freshly spawned worker process (imports numpy and scipy, fits, optimises):
        # on a loaded 2-core machine that took more than 20 s once, so the hang guard is generous here
        await _until(lambda: app[REFIT].record.attempts >= 1 and not app[REFIT].record.running,
                     "the refit after the probe", guard_s=300.0)
        record = app[REFIT].record
        assert record.last_success, record.last_message
        snap = agent.holder.current
        assert snap.source == "fit"
        assert snap.policy == optimum
        assert {info["source"] for info in snap.fit["modes"].values()} == {"observed"}

        # phase 2: traffic under the adopted policy; every queue level visited, r(i) followed throughout
        await run_until(N_ROBOTS * PROBE_S + PHASE2_S)
        outcome = await client.refit()
        assert outcome["adopted"], outcome["message"]
        assert agent.holder.current.policy == optimum
        assert adopted == [optimum]
        assert levels == set(range(cfg.capacity + 1))
        # only time-driven policy changes (4 probe steps, the end of the probe) make the simulator run an
        # event under the policy before (its mode follows at the event after)
        assert stats["policy_changes_between_events"] <= N_ROBOTS + 1
        assert stats["deliveries"] == agent.totals.deliveries
        policy_view = await client.policy()
        assert policy_view["robots_at_level"] == list(optimum.robots_at_level)
        assert policy_view["predicted"]["p_loss"] is not None
        assert policy_view["observed"]["p_loss"] is not None
