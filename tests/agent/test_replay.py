"""Replay (issue 12): the agent's own decisions on recorded traffic, against a simulated clock.

- A simulator trace whose true model is known: after its first refits the replay chooses a policy whose
  exact cost under the true model is within 2% of the true optimum's, and predicts its cost within 5%.
- The agent's own delivery log, from a live agent that commanded simulated robots: the replay makes the
  same refits, on the same windows, with the same fitted rates and policies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from robotctl.agent import load_model_file
from robotctl.agent.api import Completion, Delivery
from robotctl.agent.app import AGENT, REFIT, run_in_process
from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig
from robotctl.agent.replay import ReplayOptions, replay, replay_async
from robotctl.agent.sources import read_events
from robotctl.agent.trace import TraceEvent
from robotctl.model import (
    BMAP,
    PH,
    Admission,
    Costs,
    ModeArrivals,
    QueueModel,
    Simulation,
    ThresholdPolicy,
    TraceKind,
    TraceRow,
    cost_of,
    solve,
)
from robotctl.policies import optimise

ROOT = Path(__file__).resolve().parents[2]
COSTS = Costs(loss=5, obsolescence=10, response=2, robot=20, starvation=300)


def trace_event(row: TraceRow) -> TraceEvent:
    extra = {"active": row.active} if row.kind in (TraceKind.DELIVERY, TraceKind.PARK, TraceKind.RESUME) else {}
    return TraceEvent(row.t, row.kind.value, None if row.robot is None else str(row.robot), row.pages, None,
                      row.service_s, extra)


def linear_truth() -> QueueModel:
    """Paper 000's real-data model as the truth: each robot adds the same Poisson stream of batches (1-3
    pages), D^(r) = r D^(1); an H2 indexer; an exponential useful life of 5 s; K = 5."""
    base = BMAP.poisson(0.7, [0.6, 0.25, 0.15])
    arrivals = ModeArrivals.per_mode({r: base.scaled(r) for r in (1, 2, 3, 4)})
    service = PH(np.array([0.4, 0.6]), np.array([[-3.0, 1.0], [2.0, -3.0]]))
    return QueueModel(5, arrivals, service, PH(np.array([1.0]), np.array([[-0.2]])), Admission.PARTIAL)


def rotating_fleet(n: int, a: int, t: float) -> int:
    """The recorded fleet: 4, 3, 2, 1 robots, ten minutes each, over and over (every mode observed)."""
    return (4, 3, 2, 1)[int(t // 600) % 4]


def test_replay_of_a_simulated_trace_finds_the_true_optimum_and_predicts_its_cost(tmp_path: Path) -> None:
    """Four simulated hours, refits every 30 min on the last 2 h. Measured over seeds 0-9 (the seed below is
    0): from the third refit on, all 60 refits chose the true optimum, with predicted costs within -2.6% and
    +3.8% of its exact cost.

    The truth's arrivals are Poisson batches per mode. With the paper example's correlated MAPs as the truth
    the fitted MAP(2) of each mode is right in moments and lag correlation but not in how its phases line up
    with the other modes' (the model carries the phase across a change of mode), and the predicted cost was
    2-5% high, 12-18% for a policy chosen at a late refit in 4 of 12 seeds (see the issue's report)."""
    truth = linear_truth()
    best = optimise(truth, COSTS).best
    sim = Simulation(truth, rotating_fleet, np.random.default_rng(0), record=True)
    sim.advance(t_end=4 * 3600.0)
    path = tmp_path / "sim.jsonl.gz"
    import gzip

    with gzip.open(path, "wt") as fh:
        for row in sim.take_rows():
            fh.write(trace_event(row).to_json() + "\n")
    # the plain thresholds (hysteresis 0): this test is about the threshold optimum, not the command budget
    config = AgentConfig.from_dict({
        "queue": {"capacity": 5}, "robots": {"count": 4, "hysteresis": 0}, "costs": COSTS.to_dict(),
        "refit": {"interval_s": 1800, "window_s": 7200, "min_interval_s": 0, "drift_bound": None,
                  "min_deliveries": 2000, "cold_start_deliveries": 0},  # the regular schedule: 8 refits
        "fit": {"mean_useful_life_s": None}, "log": {"dir": str(tmp_path / "unused")}})
    result = replay(read_events([str(path)]), config, ReplayOptions(sim_events=60_000, seed=1))
    assert result.success and len(result.windows) == 8
    assert result.quality["formats"] == {str(path): "jsonl"}
    assert {m for w in result.windows for m, v in w.fit["modes"].items() if v["source"] == "observed"} == {
        "1", "2", "3", "4"}
    for w in result.windows[2:]:
        true_cost = cost_of(solve(truth, w.policy).measures, COSTS).total
        assert true_cost <= 1.02 * best.cost.total, (w.policy, true_cost, best.cost.total)
        assert abs(w.cost.total / true_cost - 1) <= 0.05, (w.cost.total, true_cost)
    rows = {r.name: r for r in result.comparison}
    assert set(rows) == {"robotctl", "best_static", "recorded"}
    # the static fleet chosen on the fitted models is the truth's best static fleet
    truth_static = min((cost_of(solve(truth, ThresholdPolicy.static(r, 5)).measures, COSTS).total, r)
                       for r in truth.modes)
    assert rows["best_static"].detail["robots"] == truth_static[1]
    # simulated under the fitted models, each row's interval holds its exact prediction under them
    for name in ("robotctl", "best_static"):
        lo, hi = rows[name].ci
        assert lo <= rows[name].detail["predicted"] <= hi, rows[name]
    assert rows["robotctl"].ci[1] < rows["best_static"].ci[0] < rows["best_static"].ci[1] < rows["recorded"].ci[0]
    # the recorded (rotating) fleet's observed cost: the truth's exact cost of that schedule is not a
    # closed form, but its interval must hold the time average of the static costs it rotated through
    # within the dependence between them: a loose check that the observation measures cost at all
    statics = [cost_of(solve(truth, ThresholdPolicy.static(r, 5)).measures, COSTS).total for r in (4, 3, 2, 1)]
    assert 0.8 * np.mean(statics) < rows["recorded"].cost < 1.2 * np.mean(statics)
    d = result.to_dict()
    assert list(d["windows"][0]) >= ["t_start", "t_end"] and d["windows"][0]["policy"]["robots_at_level"]
    assert {"name", "cost", "ci"} <= set(d["comparison"][0])


# -- the agent's own log ------------------------------------------------------------------------------

async def _until(cond: Callable[[], bool], what: str, guard_s: float = 60.0) -> None:
    async def wait() -> None:
        while not cond():
            await asyncio.sleep(0.001)

    try:
        await asyncio.wait_for(wait(), timeout=guard_s)
    except TimeoutError:
        pytest.fail(f"never happened: {what}")


async def test_replay_of_the_agents_own_log_reproduces_its_decisions(tmp_path: Path) -> None:
    """A live agent (the aiohttp app, refits in a thread) commands the paper example's simulated robots for
    40 simulated minutes: a probe of each mode, then refits every 5 minutes. Replaying its delivery log
    gives the same refits: same windows, same fitted rates, same policies."""
    truth, costs = load_model_file(str(ROOT / "config" / "paper-example.yaml"))
    clock = ManualClock(1_000.0)
    raw: dict[str, Any] = {
        "server": {"port": 0, "insecure_loopback": True}, "queue": {"capacity": 5},
        "robots": {"count": 4, "lease_s": 1e6},
        "costs": costs.to_dict(),
        "refit": {"interval_s": 300, "window_s": 1200, "min_interval_s": 0, "drift_window_s": 60,
                  "drift_bound": 0.5, "min_deliveries": 200, "probe_s": 150, "executor": "thread"},
        "fit": {"mean_useful_life_s": 5.0},
        "log": {"dir": str(tmp_path / "log"), "max_bytes": 65536, "fsync": "never"}}
    config = AgentConfig.from_dict(raw)
    live: list[Any] = []
    async with run_in_process(config, clock=clock) as (_, app):
        agent, loop = app[AGENT], app[REFIT]

        def controller(n: int, active: int, t: float) -> int:
            return agent.holder.current.policy.robots_at_level[n]

        sim = Simulation(truth, controller, np.random.default_rng(3), record=True)
        t_end = 2400.0
        while sim.t < t_end:
            deadline = min(t_end, (clock.next_deadline or np.inf) - 1_000.0)
            if sim.advance(1, t_end=deadline) == 0:
                clock.set(max(clock.now(), deadline + 1_000.0))
                await ManualClock.settle()
                await _until(lambda: not loop.record.running, "the refit to finish")
                snap = agent.holder.current
                if snap.source == "fit" and (not live or live[-1].version != snap.version):
                    live.append(snap)
                continue
            clock.set(max(clock.now(), sim.t + 1_000.0))
            for row in sim.take_rows():
                if row.kind is TraceKind.DELIVERY:
                    agent.deliver([Delivery(None, row.pages, None, None)])
                elif row.kind is TraceKind.COMPLETION:
                    agent.complete([Completion(1, row.service_s, None)])
                elif row.kind is TraceKind.OBSOLETE:
                    agent.obsolete(1)
            await ManualClock.settle(2)
    assert len(live) >= 5, "the live agent should have adopted several fitted policies"
    assert len({s.policy for s in live}) >= 1

    result = await replay_async(read_events([str(tmp_path / "log")]), config, evaluate_costs=False)
    assert result.refits_from_log
    assert len(result.quality["files"]) > 1  # the log rotated: a directory of files, in order
    assert len(result.windows) == len(live)
    for w, snap in zip(result.windows, live, strict=True):
        assert (w.t_start, w.t_end) == snap.window
        assert w.policy == snap.policy
        assert w.live_policy == snap.policy.robots_at_level
        for m, info in snap.fit["modes"].items():
            assert w.fit["modes"][m]["arrival_rate"] == pytest.approx(info["arrival_rate"], rel=1e-9)
            assert w.fit["modes"][m]["source"] == info["source"]
        assert w.cost.total == pytest.approx(snap.cost.total, rel=1e-9)


def test_a_window_with_a_hysteresis_band_is_simulated_with_it() -> None:
    """The replay's cost of robotctl's decisions includes the band the refit put in force: its controller is
    the agent's ThresholdDecision, and it costs what the damping simulator (the same decision through the
    actuator, no dwell) measures on the same random numbers."""
    from robotctl.agent.damping import simulate_damping
    from robotctl.agent.replay import ReplayWindow
    from robotctl.model import simulate

    model, costs = load_model_file(str(ROOT / "config" / "paper-example.yaml"))
    policy = ThresholdPolicy((3, 3, 3, 1, 1, 1))
    measures = solve(model, policy).measures

    def window(h: int) -> ReplayWindow:
        return ReplayWindow(0.0, 1.0, "interval", (0.0, 1.0), policy, policy.modes, policy.thresholds, {}, model,
                            measures, cost_of(measures, costs), 100, hysteresis=h)

    assert window(0).controller() == (model, policy)
    _, banded = window(1).controller()
    assert callable(banded)
    assert [banded(q, 1, 0.0) for q in range(6)] == [3, 3, 1, 1, 1, 1]  # r(2) = 3 waits for r(3) = 1 below
    assert [banded(q, 3, 0.0) for q in range(6)] == [3, 3, 3, 1, 1, 1]
    sim = simulate(model, banded, np.random.default_rng(9), events=30_000, costs=costs)
    damped = simulate_damping(model, costs, policy, dwell_s=0.0, max_commands_per_min=0, hysteresis=1,
                              events=30_000, seed=9)
    assert sim.cost is not None and sim.cost.value == pytest.approx(damped.cost, rel=1e-12)
