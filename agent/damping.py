"""What damping costs and saves, measured in the simulator: park/resume commands per robot per minute and
the cost rate J of paper 000 eq. (2), for a policy run through the agent's own :class:`Actuator` with a
dwell and a command budget (``robots.dwell_s``, ``robots.max_commands_per_min``).

The simulator (``model.simulate``) asks a controller for the active robots at every event; here the
controller is an :class:`Actuator` with N registered robots that is told r(i) and answers with its mode,
so dwell and budget act exactly as in the agent, except that a deferred change is applied at the next
event rather than at its own instant (the simulator has no timers). Commands are counted over the whole
run, warm-up included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from robotctl.model import Costs, Measures, QueueModel, ThresholdPolicy, simulate

from .actuator import Actuator


@dataclass(frozen=True)
class DampingRun:
    """One simulated run of a policy with damping.

    Attributes
    ----------
    dwell_s : float
    max_commands_per_min : int
        0: no budget.
    commands_per_robot_per_min : float
        Park and resume commands per robot per minute.
    cost, cost_half_width : float
        J of eq. (2) estimated from the run, and its 99% half-width.
    mean_active_robots, p_loss, p_starvation : float
    """

    dwell_s: float
    max_commands_per_min: int
    commands_per_robot_per_min: float
    cost: float
    cost_half_width: float
    mean_active_robots: float
    p_loss: float
    p_starvation: float


def simulate_damping(model: QueueModel, costs: Costs, policy: ThresholdPolicy, *, dwell_s: float,
                     max_commands_per_min: int, horizon_s: float | None = None, events: int | None = None,
                     seed: int = 0) -> DampingRun:
    """Run ``policy`` through an :class:`Actuator` with the given damping in the simulator (module docstring)."""
    n = max(policy.robots_at_level)
    act = Actuator(n, initial_mode=policy.robots_at_level[0], dwell_s=dwell_s,
                   max_commands_per_min=max_commands_per_min)
    for k in range(1, n + 1):
        act.register(f"robot-{k}", 0.0)
    r = policy.robots_at_level

    def controller(level: int, active: int, t: float) -> int:
        act.tick(t)
        act.set_target(r[min(level, len(r) - 1)], t)
        return act.mode

    if (horizon_s is None) == (events is None):
        events = 20_000 if horizon_s is None else None
    res = simulate(model, controller, np.random.default_rng(seed), horizon_s=horizon_s, events=events,
                   costs=costs)
    commands = sum(act.commands_issued.values())
    assert res.cost is not None
    total_s = res.duration_s + res.warmup_s
    return DampingRun(dwell_s, max_commands_per_min, commands / n / (total_s / 60.0), res.cost.value,
                      res.cost.half_width, res.mean_active_robots.value,
                      res.p_loss.value, res.p_starvation.value)


#: ``dwell_s: auto`` tries these multiples of one mean time between queue events (largest kept wins).
DWELL_STEPS = (0.25, 0.5, 1.0, 2.0, 4.0)
#: ... and keeps the largest whose simulated cost is within this factor of undamped control.
DWELL_COST_TOLERANCE = 1.02


def event_time_s(measures: Measures) -> float:
    """One mean time between queue events under a policy, 1 / (2 lambda (1 - P_loss)): pages admitted and
    pages leaving (indexed or obsolete) each move the queue once; 0 without traffic."""
    rate = 2.0 * measures.arrival_rate * (1.0 - measures.p_loss)
    return 1.0 / rate if rate > 0 and math.isfinite(rate) else 0.0


def choose_dwell(model: QueueModel, costs: Costs, policy: ThresholdPolicy, measures: Measures, *,
                 max_commands_per_min: int = 0, events: int = 20_000, seed: int = 0
                 ) -> tuple[float, DampingRun, DampingRun]:
    """``robots.dwell_s: auto``: the largest dwell of ``DWELL_STEPS`` x :func:`event_time_s` whose simulated
    cost is at most ``DWELL_COST_TOLERANCE`` times that of undamped control (same random numbers for
    every candidate, so the comparison is of the dwell, not of the draws); 0 when none is. Returns the
    dwell, the undamped run and the run of the chosen dwell (both with ``max_commands_per_min``)."""
    base = simulate_damping(model, costs, policy, dwell_s=0.0, max_commands_per_min=max_commands_per_min,
                            events=events, seed=seed)
    chosen = base
    unit = event_time_s(measures)
    for k in DWELL_STEPS if unit > 0 else ():
        run = simulate_damping(model, costs, policy, dwell_s=k * unit, max_commands_per_min=max_commands_per_min,
                               events=events, seed=seed)
        if run.cost <= DWELL_COST_TOLERANCE * base.cost:
            chosen = run
    return chosen.dwell_s, base, chosen


__all__ = ["DWELL_COST_TOLERANCE", "DWELL_STEPS", "DampingRun", "choose_dwell", "event_time_s",
           "simulate_damping"]
