"""Damping measured in the simulator: the agent's decision and actuator as the simulator's controller;
hysteresis and dwell_s: auto."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotctl.agent import load_model_file
from robotctl.agent.damping import DWELL_COST_TOLERANCE, choose_damping, event_time_s, simulate_damping
from robotctl.agent.policy import Event, ThresholdDecision
from robotctl.model import ThresholdPolicy, fleet_model, solve

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
    choice = choose_damping(MODEL, COSTS, OPTIMUM, measures, hysteresis=0, events=20_000, seed=5)
    base, chosen, dwell = choice.undamped, choice.chosen, choice.dwell_s
    assert chosen.dwell_s == dwell and base.dwell_s == 0.0 and choice.hysteresis == 0
    assert chosen.cost <= DWELL_COST_TOLERANCE * base.cost
    if dwell > 0:
        assert chosen.commands_per_robot_per_min < base.commands_per_robot_per_min
        assert dwell == pytest.approx(event_time_s(measures) * round(dwell / event_time_s(measures), 2))


def test_hysteresis_parks_at_once_and_resumes_h_levels_lower() -> None:
    policy = ThresholdPolicy((16,) * 9 + (1,) * 42)  # 16 robots up to 8 pages, 1 from 9 on
    flat, banded = ThresholdDecision(policy), ThresholdDecision(policy, 3)
    r = 16
    walk = [5, 8, 9, 12, 8, 7, 6, 5, 9, 4, 9, 0]
    got = []
    for q in walk:
        assert flat.target(Event.OTHER, (), q, r) == policy.robots_at_level[q]
        r = banded.target(Event.OTHER, (), q, r)
        got.append(r)
    # parked at 9 pages; the band keeps one robot at 8, 7, 6 and resumes all at 5 = 8 - 3; an empty
    # queue resumes them whatever the band
    assert got == [16, 16, 1, 1, 1, 1, 1, 16, 1, 16, 1, 16]


@settings(max_examples=200, deadline=None)
@given(levels=st.lists(st.integers(1, 8), min_size=2, max_size=12), h=st.integers(0, 12),
       walk=st.lists(st.integers(0, 15), min_size=1, max_size=40))
def test_property_hysteresis_stays_between_the_two_levels(levels: list[int], h: int, walk: list[int]) -> None:
    """For a non-increasing r(i) the target after any event lies between r(q + h) and r(q), it follows r(q)
    whenever r(q) is below the robots running or the queue is empty, and h = 0 is r(q) exactly."""
    policy = ThresholdPolicy(tuple(sorted(levels, reverse=True)))
    decision, r_of = ThresholdDecision(policy, h), policy.robots_at_level
    top = len(r_of) - 1
    r = r_of[0]
    for q in walk:
        new = decision.target(Event.OTHER, (), q, r)
        lo, hi = r_of[min(q + h, top)], r_of[min(q, top)]
        assert lo <= new <= hi
        if hi <= r or h == 0 or q == 0:
            assert new == hi
        r = new


def test_auto_hysteresis_cuts_commands_within_the_cost_tolerance() -> None:
    """16 robots, K = 50 (the demo's size): the optimum switches the fleet at one level; a band of a few
    levels cuts the commands by far more than the dwell alone, for at most 2% of the cost."""
    model, costs = fleet_model(16, 50, obsolescence="exponential")
    from robotctl.policies import optimise

    best = optimise(model, costs).best
    choice = choose_damping(model, costs, best.policy, best.measures, dwell_s=0.0, events=20_000, seed=7)
    assert choice.hysteresis >= 1 and choice.chosen.hysteresis == choice.hysteresis
    assert choice.chosen.cost <= DWELL_COST_TOLERANCE * choice.undamped.cost
    assert choice.chosen.commands_per_robot_per_min < 0.8 * choice.undamped.commands_per_robot_per_min
