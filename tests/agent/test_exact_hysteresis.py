"""The agent's own decision code with an exact hysteresis policy (issue 24): the simulator driven by
ThresholdDecision(resume=...) through the Actuator sends the commands the augmented chain predicts (99%
interval over independent replications) and the refit's choice is exact and within its budget."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy import stats

from robotctl.agent._files import load_model_file
from robotctl.agent.actuator import Actuator
from robotctl.agent.policy import Event, ThresholdDecision
from robotctl.model import HysteresisPolicy, ThresholdPolicy, TraceKind, simulate_events, solve_hysteresis

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"


def test_agent_decision_sends_the_predicted_commands() -> None:
    model, _ = load_model_file(str(EXAMPLE))
    park, resume = (4, 3, 3, 2, 1, 1), (3, 3, 1, 1, 1, 1)
    exact = solve_hysteresis(model, HysteresisPolicy(park, resume))
    decision = ThresholdDecision(ThresholdPolicy(park), resume=resume)
    rates, losses = [], []
    for k in range(8):
        act = Actuator(4, initial_mode=park[0], dwell_s=0.0, max_commands_per_min=0)
        for n in range(1, 5):
            act.register(f"robot-{n}", 0.0)

        def controller(level: int, active: int, t: float, act: Actuator = act) -> int:
            act.tick(t)
            act.set_target(decision.target(Event.OTHER, (), level, act.target), t)
            return act.mode

        res = simulate_events(model, controller, np.random.default_rng([99, k]), events=100_000, trace=True,
                              level=0.99)
        moves = sum(1 for row in res.trace if row.kind in (TraceKind.PARK, TraceKind.RESUME)
                    and row.t > res.warmup_s)
        rates.append(moves / res.duration_s)
        losses.append(res.p_loss.value)
    for values, truth in ((rates, exact.commands_per_s), (losses, exact.measures.p_loss)):
        half = stats.t.ppf(0.995, len(values) - 1) * np.std(values, ddof=1) / math.sqrt(len(values))
        assert abs(np.mean(values) - truth) <= half, (np.mean(values), half, truth)


def test_decision_rule_is_the_models() -> None:
    park, resume = (4, 3, 3, 2, 1, 1), (3, 3, 1, 1, 1, 1)
    decision = ThresholdDecision(ThresholdPolicy(park), resume=resume)
    rule = HysteresisPolicy(park, resume)
    for q in range(8):
        for r in range(0, 6):
            assert decision.target(Event.OTHER, (), q, r) == rule.next_robots(min(q, 5), r)
