"""Damping measured in the simulator: the actuator as the simulator's controller, and dwell_s: auto."""

from __future__ import annotations

from pathlib import Path

import pytest

from robotctl.agent._files import load_model_file
from robotctl.agent.damping import DWELL_COST_TOLERANCE, choose_dwell, event_time_s, simulate_damping
from robotctl.model import ThresholdPolicy, solve

ROOT = Path(__file__).resolve().parents[2]
MODEL, COSTS = load_model_file(str(ROOT / "config" / "paper-example.yaml"))
OPTIMUM = ThresholdPolicy((3, 3, 3, 1, 1, 1))


def test_undamped_actuator_reproduces_the_exact_cost() -> None:
    exact = solve(MODEL, OPTIMUM)
    run = simulate_damping(MODEL, COSTS, OPTIMUM, dwell_s=0.0, max_commands_per_min=0, events=200_000, seed=3)
    from robotctl.model import cost_of

    assert abs(run.cost - cost_of(exact.measures, COSTS).total) <= run.cost_half_width
    assert run.commands_per_robot_per_min > 6  # the paper example switches fast: the reason for damping


def test_a_command_budget_holds_in_the_simulator() -> None:
    run = simulate_damping(MODEL, COSTS, OPTIMUM, dwell_s=0.0, max_commands_per_min=6, events=50_000, seed=4)
    assert run.commands_per_robot_per_min <= 6.0


def test_auto_dwell_is_the_largest_within_the_cost_tolerance() -> None:
    measures = solve(MODEL, OPTIMUM).measures
    dwell, base, chosen = choose_dwell(MODEL, COSTS, OPTIMUM, measures, events=20_000, seed=5)
    assert chosen.dwell_s == dwell and base.dwell_s == 0.0
    assert chosen.cost <= DWELL_COST_TOLERANCE * base.cost
    if dwell > 0:
        assert chosen.commands_per_robot_per_min < base.commands_per_robot_per_min
        assert dwell == pytest.approx(event_time_s(measures) * round(dwell / event_time_s(measures), 2))
