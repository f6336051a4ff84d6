"""What damping costs and saves, measured in the simulator: park/resume commands per robot per minute and
the cost rate J of paper 000 eq. (2), for a policy run through the agent's own decision
(:class:`~agent.policy.ThresholdDecision`, with its hysteresis) and :class:`Actuator` with a dwell and a
command budget (``robots.hysteresis``, ``robots.dwell_s``, ``robots.max_commands_per_min``).

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
from .policy import Event, ThresholdDecision


@dataclass(frozen=True)
class DampingRun:
    """One simulated run of a policy with damping.

    Attributes
    ----------
    dwell_s : float
    max_commands_per_min : int
        0: no budget.
    hysteresis : int
        Queue levels below its parking level at which a parked robot resumes (0: r(i) exactly).
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
    hysteresis: int = 0


def simulate_damping(model: QueueModel, costs: Costs, policy: ThresholdPolicy, *, dwell_s: float,
                     max_commands_per_min: int, hysteresis: int = 0, horizon_s: float | None = None,
                     events: int | None = None, seed: int = 0) -> DampingRun:
    """Run ``policy`` through the agent's decision and an :class:`Actuator` with the given damping in the
    simulator (module docstring)."""
    n = max(policy.robots_at_level)
    act = Actuator(n, initial_mode=policy.robots_at_level[0], dwell_s=dwell_s,
                   max_commands_per_min=max_commands_per_min)
    for k in range(1, n + 1):
        act.register(f"robot-{k}", 0.0)
    decision = ThresholdDecision(policy, hysteresis)

    def controller(level: int, active: int, t: float) -> int:
        act.tick(t)
        act.set_target(decision.target(Event.OTHER, (), level, act.target), t)
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
                      res.p_loss.value, res.p_starvation.value, hysteresis)


#: ``dwell_s: auto`` tries these multiples of one mean time between queue events, in order, up to the first
#: that costs more than the tolerance.
DWELL_STEPS = (0.25, 0.5, 1.0, 2.0, 4.0)
#: ... and keeps the largest whose simulated cost is within this factor of undamped control.
DWELL_COST_TOLERANCE = 1.02


def event_time_s(measures: Measures) -> float:
    """One mean time between queue events under a policy, 1 / (2 lambda (1 - P_loss)): pages admitted and
    pages leaving (indexed or obsolete) each move the queue once; 0 without traffic."""
    rate = 2.0 * measures.arrival_rate * (1.0 - measures.p_loss)
    return 1.0 / rate if rate > 0 and math.isfinite(rate) else 0.0


#: ``hysteresis: auto`` tries these numbers of queue levels, smallest first, and stops at the first that
#: costs more than the tolerance (a wider band only delays resumes further).
HYSTERESIS_STEPS = (1, 2, 3, 4, 6, 8, 12, 16)


@dataclass(frozen=True)
class DampingChoice:
    """What ``robots.hysteresis: auto`` and ``robots.dwell_s: auto`` chose after a fit, and its price.

    Attributes
    ----------
    hysteresis : int
    dwell_s : float
    undamped : DampingRun
        r(i) exactly, no dwell (the command budget applies to every run).
    chosen : DampingRun
        The chosen hysteresis and dwell together.
    """

    hysteresis: int
    dwell_s: float
    undamped: DampingRun
    chosen: DampingRun


def choose_damping(model: QueueModel, costs: Costs, policy: ThresholdPolicy, measures: Measures, *,
                   hysteresis: int | None = None, dwell_s: float | None = None, max_commands_per_min: int = 0,
                   events: int = 20_000, seed: int = 0) -> DampingChoice:
    """The damping for ``policy`` under the fitted ``model``, measured in the simulator with the same random
    numbers for every candidate (so that the comparison is of the damping, not of the draws).

    ``hysteresis=None`` (auto): the largest of :data:`HYSTERESIS_STEPS` (below K) whose cost is at most
    ``DWELL_COST_TOLERANCE`` times that of undamped control, trying them in order and stopping at the first
    that is not. ``dwell_s=None`` (auto): then, with that hysteresis, the largest of :data:`DWELL_STEPS` x
    :func:`event_time_s` within the same tolerance of undamped control, likewise in order up to the first
    that is not (a longer dwell only holds a mode longer); 0 when the first is not.
    A number given for either is used as it is."""

    runs: dict[tuple[int, float], DampingRun] = {}

    def run(h: int, dwell: float) -> DampingRun:
        if (h, dwell) not in runs:  # the chosen pair was mostly simulated while choosing: not again
            runs[h, dwell] = simulate_damping(model, costs, policy, dwell_s=dwell, hysteresis=h, events=events,
                                              max_commands_per_min=max_commands_per_min, seed=seed)
        return runs[h, dwell]

    undamped = run(0, 0.0)
    limit = DWELL_COST_TOLERANCE * undamped.cost
    dwell = 0.0 if dwell_s is None else dwell_s
    h = 0 if hysteresis is None else hysteresis
    if hysteresis is None:
        for step in (k for k in HYSTERESIS_STEPS if k < policy.capacity):
            if run(step, dwell).cost > limit:
                break
            h = step
    if dwell_s is None:
        unit = event_time_s(measures)
        for k in DWELL_STEPS if unit > 0 else ():
            if run(h, k * unit).cost > limit:
                break
            dwell = k * unit
    chosen = run(h, dwell)
    return DampingChoice(h, dwell, undamped, chosen)


__all__ = ["DWELL_COST_TOLERANCE", "DWELL_STEPS", "HYSTERESIS_STEPS", "DampingChoice", "DampingRun",
           "choose_damping", "event_time_s", "simulate_damping"]
