"""Adapting fast (issue 28): the start-up growth and cold-start fits under the default settings, refits
on the window since a located change, and warm starts that carry over (or are dropped when stale)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from robotctl.agent._files import load_model_file
from robotctl.agent.api import Completion, Delivery
from robotctl.agent.clock import ManualClock, cancel_and_wait
from robotctl.agent.config import AgentConfig
from robotctl.agent.core import POLICY_FILE, Agent
from robotctl.agent.log import DiscardLog
from robotctl.agent.refit import RefitInput, RefitLoop, compute_refit
from robotctl.agent.worker import RefitWorker
from robotctl.model import ModeArrivals, QueueModel, Simulation, ThresholdPolicy, TraceKind, cost_of, solve

ROOT = Path(__file__).resolve().parents[2]
TRUE_MODEL, COSTS = load_model_file(str(ROOT / "config" / "paper-example.yaml"))


def _config(tmp_path: Path, **refit: Any) -> AgentConfig:
    """The defaults but for what the agent cannot know: K, the fleet, the costs, the useful life."""
    return AgentConfig.from_dict({
        "queue": {"capacity": TRUE_MODEL.capacity}, "robots": {"count": 4, "allow_unregistered": True},
        "costs": COSTS.to_dict(), "fit": {"mean_useful_life_s": float(TRUE_MODEL.obsolescence.mean)},
        "log": {"dir": str(tmp_path / "log")}, "refit": {"executor": "thread", **refit},
    })


def _origin_metric(agent: Agent) -> dict[str, float]:
    """``robotctl_policy_origin`` by its label, read back from a scrape of a fresh registry."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from robotctl.agent.metrics import AgentMetrics

    registry = CollectorRegistry()
    AgentMetrics(registry).attach(agent, lambda: None)
    text = generate_latest(registry).decode()
    return {s.labels["origin"]: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name == "robotctl_policy_origin"}


async def _advance(clock: ManualClock, t: float) -> None:
    """Move the clock to ``t``, stopping at each timer of the refit loop on the way and letting it run."""
    while (deadline := clock.next_deadline) is not None and deadline <= t:
        clock.set(max(deadline, clock.now()))
        for _ in range(10):
            await asyncio.sleep(0)
    clock.set(max(t, clock.now()))
    for _ in range(3):
        await asyncio.sleep(0)


async def _live(agent: Agent, clock: ManualClock, loop: RefitLoop, truth: QueueModel, deliveries: int,
                seed: int) -> list[tuple[int, str, tuple[int, ...]]]:
    """Robots simulated from ``truth`` that follow the agent's policy as it changes (the simulator asks the
    agent's r(i) at each event), with the refit loop running on the same clock; returns, at each delivery,
    (deliveries so far, the origin of the policy in force, r(i))."""
    def controller(n: int, active: int, t: float) -> int:
        return agent.desired()

    sim = Simulation(truth, controller, np.random.default_rng(seed), record=True)
    task = asyncio.create_task(loop.run())
    seen: list[tuple[int, str, tuple[int, ...]]] = []
    try:
        await asyncio.sleep(0)
        while len(seen) < deliveries:
            sim.advance(max_events=1)
            for row in sim.take_rows():
                await _advance(clock, row.t)
                if row.kind is TraceKind.DELIVERY:
                    agent.deliver([Delivery(None, row.pages, None, None)])
                    snap = agent.policy
                    seen.append((agent.deliveries_seen(), snap.origin, snap.policy.robots_at_level))
                elif row.kind is TraceKind.COMPLETION:
                    agent.complete([Completion(1, row.service_s, None)])
                elif row.kind is TraceKind.OBSOLETE:
                    agent.obsolete(1)
    finally:
        await cancel_and_wait(task)
    return seen


async def test_default_agent_is_in_control_within_100_deliveries(tmp_path: Path) -> None:
    """Default refit settings, simulated robots on the paper example: the first fitted policy (a cold start)
    is in force within the first 100 deliveries, and a regular fit takes over once min_deliveries are in;
    the cold policy, costed exactly under the truth, is cheaper than the start-up fleet."""
    cfg = _config(tmp_path)
    assert cfg.refit.cold_start_deliveries == 30 and cfg.refit.min_deliveries == 200
    clock = ManualClock(0.0)
    agent = Agent(cfg, clock, log=DiscardLog(), persist=False)
    agent.open()
    assert _origin_metric(agent) == {"startup": 1.0, "cold": 0.0, "regular": 0.0, "warm": 0.0}
    loop = RefitLoop.for_agent(cfg, clock=clock, target=agent, worker=RefitWorker(compute_refit, kind="inline"))
    seen = await _live(agent, clock, loop, TRUE_MODEL, 400, seed=5)
    first_cold = next(n for n, origin, _ in seen if origin == "cold")
    assert first_cold <= 100
    assert agent.first_fit_after is not None and agent.first_fit_after[0] <= 100
    assert seen[-1][1] == "regular"
    cold_policy = next(r for _, origin, r in seen if origin == "cold")
    cost = cost_of(solve(TRUE_MODEL, ThresholdPolicy(cold_policy)).measures, COSTS).total
    startup = cost_of(solve(TRUE_MODEL, cfg.startup_policy()).measures, COSTS).total
    assert cost < startup, (cost, startup, cold_policy)
    print(f"first cold fit at {first_cold} deliveries; cold policy {cold_policy} costs {cost:.4g}, the start-up "
          f"fleet {startup:.4g}")
    assert agent.status()["policy"]["origin"] == agent.policy_view()["origin"] == "regular"
    assert _origin_metric(agent)["regular"] == 1.0
    assert agent.status()["policy"]["first_fit_after"]["deliveries"] == agent.first_fit_after[0]


async def test_no_growth_when_turned_off(tmp_path: Path) -> None:
    """refit.cold_start_deliveries: 0 keeps the old schedule: nothing before min_deliveries and
    min_interval_s."""
    cfg = _config(tmp_path, cold_start_deliveries=0)
    clock = ManualClock(0.0)
    agent = Agent(cfg, clock, log=DiscardLog(), persist=False)
    agent.open()
    loop = RefitLoop.for_agent(cfg, clock=clock, target=agent, worker=RefitWorker(compute_refit, kind="inline"))
    seen = await _live(agent, clock, loop, TRUE_MODEL, 150, seed=6)
    assert all(origin == "startup" for _, origin, _ in seen)


def _doubled(model: QueueModel, factor: float) -> QueueModel:
    arrivals = ModeArrivals.per_mode({m: model.arrivals[m].scaled(factor)
                                      for m in model.modes})
    return QueueModel(model.capacity, arrivals, model.service, model.obsolescence, model.admission)


def _trace(model: QueueModel, policy: ThresholdPolicy, seconds: float, seed: int, start: float = 0.0
           ) -> dict[str, Any]:
    sim = Simulation(model, policy, np.random.default_rng(seed), record=True)
    sim.advance(t_end=seconds)
    rows = sim.take_rows()
    d = [r for r in rows if r.kind is TraceKind.DELIVERY]
    changes = [(start, int(policy.robots_at_level[0]))]
    for r in rows:
        if r.kind in (TraceKind.PARK, TraceKind.RESUME) and r.active != changes[-1][1]:
            changes.append((start + r.t, int(r.active)))
    return {"t": start + np.array([r.t for r in d]), "pages": np.array([r.pages for r in d], dtype=np.int64),
            "modes": np.array([r.active for r in d], dtype=np.int64),
            "service": np.array([r.service_s for r in rows if r.kind is TraceKind.COMPLETION]),
            "changes": (np.array([c[0] for c in changes]), np.array([c[1] for c in changes], dtype=np.int64))}


def _input(parts: list[dict[str, Any]], end: float, **kw: Any) -> RefitInput:
    cat = {k: np.concatenate([p[k] for p in parts]) for k in ("t", "pages", "modes", "service")}
    epochs = np.concatenate([p["changes"][0] for p in parts])
    modes = np.concatenate([p["changes"][1] for p in parts])
    return RefitInput(delivery_times=cat["t"], pages=cat["pages"], modes=cat["modes"], all_modes=(1, 2, 3, 4),
                      search_modes=None, service_times=cat["service"], sizes_bytes=None,
                      capacity=TRUE_MODEL.capacity, costs=COSTS, mean_useful_life_s=float(TRUE_MODEL.obsolescence.mean),
                      window=(float(epochs[0]), end), mode_changes=(epochs, modes), **kw)


def test_refit_after_a_doubling_fits_the_window_since_the_change() -> None:
    """4000 s of the paper example, then 600 s at twice its arrival rates: the refit locates the change,
    fits only what came after it, and its rates are the doubled ones; without the test the whole window
    gives rates in between. A steady window is fitted whole. The per-mode fit, pinned: its mode-4 rate is
    the check (the joint fit, the default, gave mode 4 13.6 pages/s against 9.3 on these 600 s: a rate its
    shared structure leaves loose where the policy seldom runs 4 robots)."""
    policy = ThresholdPolicy((4, 4, 3, 2, 1, 1))
    T = 4000.0
    before = _trace(TRUE_MODEL, policy, T, seed=1)
    after = _trace(_doubled(TRUE_MODEL, 2.0), policy, 600.0, seed=2, start=T)
    per_mode = {"options": {"arrivals": "per_mode"}}
    inp = _input([before, after], T + 600.0, change_level=0.01, min_deliveries=200, **per_mode)
    out = compute_refit(inp)
    assert out.success, out.message
    change = out.fit["change"]
    assert change["detected"] and abs(change["at_s"] - T) < 60.0
    assert out.result.window[0] == pytest.approx(change["at_s"])
    whole = compute_refit(_input([before, after], T + 600.0, change_level=None, **per_mode))
    for m in (4,):
        truth = 2.0 * TRUE_MODEL.arrivals[m].rate
        cut = out.model.arrivals[m].rate
        mixed = whole.model.arrivals[m].rate
        assert abs(cut / truth - 1) < 0.15
        assert abs(mixed / truth - 1) > abs(cut / truth - 1)
    steady = compute_refit(_input([before], T, change_level=0.01, **per_mode))
    assert steady.success and not steady.fit["change"]["detected"]
    assert steady.result.window[0] == pytest.approx(0.0)


def test_too_little_since_the_change_waits() -> None:
    policy = ThresholdPolicy((4, 4, 3, 2, 1, 1))
    before = _trace(TRUE_MODEL, policy, 4000.0, seed=3)
    after = _trace(_doubled(TRUE_MODEL, 2.0), policy, 80.0, seed=4, start=4000.0)
    out = compute_refit(_input([before, after], 4080.0, change_level=0.01, min_deliveries=2000))
    assert not out.success and out.stage.value == "input"
    assert "refit.min_deliveries = 2000" in out.message


def _adopt_one(tmp_path: Path, **refit: Any) -> tuple[AgentConfig, tuple[int, ...]]:
    """A live agent that fits (a regular refit) and saves its policy in log.dir."""
    cfg = _config(tmp_path, **refit)
    clock = ManualClock(0.0)
    agent = Agent(cfg, clock)
    agent.open()
    sim = Simulation(TRUE_MODEL, ThresholdPolicy((4, 4, 3, 2, 1, 1)), np.random.default_rng(7), record=True)
    sim.advance(t_end=1500.0)
    for row in sim.take_rows():
        clock.set(row.t)
        if row.kind is TraceKind.DELIVERY:
            agent.deliver([Delivery(None, row.pages, None, None)])
        elif row.kind is TraceKind.COMPLETION:
            agent.complete([Completion(1, row.service_s, None)])
    made = agent.refit_input(clock.now(), "test")
    assert isinstance(made, RefitInput)
    out = compute_refit(made)
    assert out.success, out.message
    agent.adopt(out.result, clock.now())
    assert agent.policy.origin == "regular"
    asyncio.run(agent.close())
    return cfg, agent.policy.policy.robots_at_level


def test_warm_start_carries_over(tmp_path: Path) -> None:
    cfg, levels = _adopt_one(tmp_path)
    clock = ManualClock(0.0)
    agent = Agent(cfg, clock)
    agent.open()
    assert agent.policy.origin == "warm" and agent.policy.policy.robots_at_level == levels
    assert agent.status()["policy"]["origin"] == "warm"
    asyncio.run(agent.close())


def test_warm_start_dropped_when_stale(tmp_path: Path) -> None:
    cfg, _ = _adopt_one(tmp_path)
    path = Path(cfg.log.dir) / POLICY_FILE
    state = json.loads(path.read_text())
    assert state["saved_unix_s"] <= time.time()
    state["saved_unix_s"] = time.time() - cfg.refit.warm_max_age_s - 60.0
    path.write_text(json.dumps(state))
    agent = Agent(cfg, ManualClock(0.0))
    agent.open()
    assert agent.policy.origin == "startup"
    asyncio.run(agent.close())


def test_cold_fit_not_made_over_a_warm_policy(tmp_path: Path) -> None:
    _adopt_one(tmp_path)
    cfg = _config(tmp_path, window_s=10.0, drift_window_s=5.0)
    clock = ManualClock(5000.0)
    agent = Agent(cfg, clock)
    agent.open()
    assert agent.policy.origin == "warm"
    for k in range(50):
        clock.set(5000.0 + 0.1 * k)
        agent.deliver([Delivery(None, 1, None, None)])
        agent.complete([Completion(1, 0.2, None)])
    made = agent.refit_input(clock.now(), "growth")
    assert isinstance(made, str) and "min_deliveries" in made
    asyncio.run(agent.close())


@pytest.mark.parametrize(("key", "value", "words"), [
    ("cold_level", 1.0, "below 1"), ("cold_level", 0, "must be"), ("change_level", 1.5, "below 1"),
    ("cold_start_deliveries", -1, "must be"), ("warm_max_age_s", -5, "must be"),
])
def test_new_refit_keys_are_validated_naming_the_key(tmp_path: Path, key: str, value: Any, words: str) -> None:
    from robotctl import InputError

    with pytest.raises(InputError) as err:
        _config(tmp_path, **{key: value})
    assert err.value.field == f"refit.{key}" and words in str(err.value)


@pytest.mark.parametrize(("value", "words"), [(-0.1, "must be"), ("lots", "must be a number"), (1e9, "at most")])
def test_max_damping_cost_is_validated_naming_the_key(value: Any, words: str) -> None:
    from robotctl import InputError

    with pytest.raises(InputError) as err:
        AgentConfig.from_dict({"queue": {"capacity": 6}, "robots": {"count": 4, "max_damping_cost": value}})
    assert err.value.field == "robots.max_damping_cost" and words in str(err.value)
    assert AgentConfig.from_dict({"queue": {"capacity": 6},
                                  "robots": {"count": 4, "max_damping_cost": None}}).robots.max_damping_cost is None
    assert AgentConfig.from_dict({"queue": {"capacity": 6}, "robots": {"count": 4}}).robots.max_damping_cost == 0.025


class _CountingTarget:
    """A RefitTarget whose deliveries the test sets; it never drifts."""

    def __init__(self) -> None:
        self.seen = 0

    def deliveries_seen(self) -> int:
        return self.seen

    def drift(self, now: float) -> str | None:
        return None


def test_growth_refits_at_each_doubling_until_the_interval() -> None:
    clock = ManualClock(0.0)
    target = _CountingTarget()
    loop = RefitLoop(clock=clock, target=target, worker=RefitWorker(compute_refit, kind="inline"),  # type: ignore[arg-type]
                     interval_s=300.0, min_interval_s=30.0, growth_deliveries=30)
    due = []
    for t, seen in ((1.0, 29), (2.0, 30), (2.5, 31), (3.0, 59), (4.0, 75), (5.0, 119), (6.0, 130), (7.0, 300)):
        target.seen = seen
        reason = loop.due(t)
        due.append(reason)
        if reason is not None:
            loop.record.last_at = t  # as a refit would
    assert due == [None, "growth deliveries=30", None, None, "growth deliveries=75", None,
                   "growth deliveries=130", "growth deliveries=300"]
    assert loop.growing(299.0) and not loop.growing(301.0)
    target.seen = 10_000
    assert loop.due(301.0) is None  # the growth is over: no refit for new deliveries ...
    assert loop.due(308.0) == "interval"  # ... the regular schedule has taken over, interval_s after the last
    loop.record.last_at = 308.0
    assert loop.due(350.0) is None


def test_warm_policy_dropped_when_the_model_check_rejects_the_window(tmp_path: Path) -> None:
    """A warm start whose model the first window's check rejects (a misfit) goes back to the start-up
    policy; a refit that fails otherwise keeps it."""
    from robotctl.agent.compute import RefitOutcome, RefitStage

    cfg, _ = _adopt_one(tmp_path)
    clock = ManualClock(0.0)
    agent = Agent(cfg, clock)
    agent.open()
    assert agent.policy.origin == "warm"
    for k in range(300):
        clock.set(0.5 * k)
        agent.deliver([Delivery(None, 1, None, None)])
        agent.complete([Completion(1, 0.2, None)])

    def failing(stage: RefitStage) -> RefitLoop:
        worker = RefitWorker(lambda inp: RefitOutcome(False, stage, f"injected {stage.value}"), kind="inline")
        return RefitLoop(clock=clock, target=agent, worker=worker)

    asyncio.run(failing(RefitStage.SOLVE).refit("test"))
    assert agent.policy.origin == "warm"
    asyncio.run(failing(RefitStage.CHECK).refit("test"))
    assert agent.policy.origin == "startup"
    asyncio.run(agent.close())


@pytest.mark.parametrize("seed", [1, 5])
def test_damping_chosen_at_a_refit_costs_within_its_limit_on_the_truth(seed: int) -> None:
    """Issue 28: the hysteresis chosen at a refit (the default command budget, 10 per robot per minute,
    which on the paper example costs 12-26% to meet) costs, on the true model, within
    ``robots.max_damping_cost`` = 2.5% of the undamped threshold policy the same refit found; both are
    costed exactly on the truth (``solve_hysteresis`` and ``solve``), not on the fit. Without the limit
    the same refit's damping costs over 10% on the truth, so the limit is what holds it."""
    from robotctl.model import HysteresisPolicy, solve_hysteresis
    from robotctl.policies import optimise

    optimum = optimise(TRUE_MODEL, COSTS).best.policy
    window = _trace(TRUE_MODEL, optimum, 6000.0, seed=seed)

    def true_excess(limit: float | None) -> tuple[float, dict[str, Any]]:
        out = compute_refit(_input([window], 6000.0, hysteresis=None, dwell_s=None,
                                   max_commands_per_robot_min=10.0, max_damping_cost=limit))
        assert out.success, out.message
        d = out.fit["damping"]
        damped = cost_of(solve_hysteresis(TRUE_MODEL, HysteresisPolicy(tuple(d["park"]), tuple(d["resume"])))
                         .measures, COSTS).total
        undamped = cost_of(solve(TRUE_MODEL, ThresholdPolicy(tuple(d["undamped_park"]))).measures, COSTS).total
        return damped / undamped - 1.0, d

    excess, d = true_excess(0.025)
    assert excess <= 0.025, (excess, d)
    assert d["damping_cost"] <= 0.025 + 1e-9
    assert d["commands_per_robot_per_min"] < 0.8 * d["undamped_commands_per_robot_per_min"]
    assert d["within_budget"] is False  # the budget gave way to the limit, and says so
    if seed == 1:
        unlimited, d = true_excess(None)
        assert unlimited > 0.10 and d["within_budget"], (unlimited, d)
