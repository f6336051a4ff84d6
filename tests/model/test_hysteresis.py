"""Hysteresis policies (issue 24): the exact augmented chain against the independent brute-force generator
(1e-10) and the simulator (99% intervals); the plain threshold policy as the special case r_resume = r_park
(paper 000's numbers to the digit); validation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from robotctl.agent._files import load_model_file
from robotctl.model import (
    Costs,
    HysteresisChain,
    HysteresisPolicy,
    InputError,
    Measures,
    QueueModel,
    ThresholdPolicy,
    TraceKind,
    cost_of,
    fleet_model,
    random_model,
    simulate_events,
    solve,
    solve_hysteresis,
    solve_hysteresis_bruteforce,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"
SCALARS = ("arrival_rate", "p_loss", "p_obsolete", "p_success", "p_starvation", "mean_active_robots",
           "mean_queue_length", "mean_response_served", "mean_sojourn_obsolete", "mean_sojourn", "commands_per_s",
           "commands_per_robot_min")


def _random_vector(rng: np.random.Generator, modes: tuple[int, ...], K: int) -> tuple[int, ...]:
    return tuple(sorted((int(x) for x in rng.choice(modes, size=K + 1)), reverse=True))


def _random_policy(rng: np.random.Generator, model: QueueModel) -> HysteresisPolicy:
    park = _random_vector(rng, model.modes, model.capacity)
    other = _random_vector(rng, model.modes, model.capacity)
    return HysteresisPolicy(park, tuple(min(a, b) for a, b in zip(park, other)))


def _close(a: Measures, b: Measures, tol: float) -> None:
    for name in SCALARS:
        x, y = getattr(a, name), getattr(b, name)
        assert abs(x - y) <= tol * max(1.0, abs(y)), (name, x, y)
    assert np.allclose(a.queue_length_distribution, b.queue_length_distribution, rtol=0, atol=tol)
    assert dict(a.active_robots_distribution) == pytest.approx(dict(b.active_robots_distribution), abs=tol)


@pytest.mark.parametrize("seed", range(8))
def test_exact_matches_bruteforce_on_random_models(seed: int) -> None:
    rng = np.random.default_rng(seed)
    model = random_model(rng, capacity=4, obsolescence_order=2 if seed % 2 else 1, modes=(1, 2, 3), max_batch=2,
                         load=1.2)
    chain = HysteresisChain(model)
    checked = 0
    for _ in range(4):
        policy = _random_policy(rng, model)
        try:
            exact = solve_hysteresis(model, policy, chain=chain)
        except InputError:
            with pytest.raises(InputError):
                solve_hysteresis_bruteforce(model, policy)
            continue
        brute = solve_hysteresis_bruteforce(model, policy)
        assert exact.residual < 1e-12 and brute.residual < 1e-12
        _close(exact.measures, brute.measures, 1e-10)
        assert exact.robots_at_level == brute.robots_at_level
        assert exact.n_states == brute.n_states
        checked += 1
    assert checked >= 2


def test_a_switching_policy_has_commands_and_a_static_one_none() -> None:
    model, _ = fleet_model(4, 6)
    static = solve_hysteresis(model, HysteresisPolicy.threshold((3,) * 7))
    assert static.commands_per_s == 0.0
    moving = solve_hysteresis(model, HysteresisPolicy((4, 4, 3, 3, 2, 1, 1), (4, 2, 2, 1, 1, 1, 1)))
    assert moving.commands_per_robot_min == pytest.approx(moving.commands_per_s * 60 / 4, rel=1e-14)
    assert moving.commands_per_s > 0


def test_threshold_policy_is_the_special_case_with_paper_000s_numbers() -> None:
    model, costs = load_model_file(str(EXAMPLE))
    policy = ThresholdPolicy((3, 3, 3, 1, 1, 1))
    hyst = solve_hysteresis(model, HysteresisPolicy.threshold(policy))
    plain = solve(model, policy)
    assert round(cost_of(hyst.measures, costs).total, 4) == 63.5425
    _close(hyst.measures, plain.measures, 1e-10)
    # the commands of the threshold solve (level transitions that change r(i)) from the brute force too
    brute = solve_hysteresis_bruteforce(model, HysteresisPolicy.threshold(policy))
    assert plain.measures.commands_per_s == pytest.approx(brute.measures.commands_per_s, rel=1e-10)


def test_hysteresis_costs_commands_in_j() -> None:
    model, costs = load_model_file(str(EXAMPLE))
    sol = solve_hysteresis(model, HysteresisPolicy((3, 3, 3, 1, 1, 1), (3, 3, 1, 1, 1, 1)))
    priced = Costs(**{**costs.to_dict(), "command": 2.0})
    base, with_cmd = cost_of(sol.measures, costs), cost_of(sol.measures, priced)
    assert with_cmd.command == pytest.approx(2.0 * sol.commands_per_s, rel=1e-15)
    assert with_cmd.total == pytest.approx(base.total + with_cmd.command, rel=1e-15)


def _simulated_commands(model: QueueModel, policy: HysteresisPolicy, seed: int, runs: int, events: int
                        ) -> tuple[float, float, list[float]]:
    """Commands per second in ``runs`` independent replications (trace rows after the warm-up)."""
    rates = []
    results = []
    for k in range(runs):
        res = simulate_events(model, lambda i, r, t: policy.next_robots(i, r) if t > 0 else policy.start,
                              np.random.default_rng([seed, k]), events=events, trace=True, level=0.99)
        n = sum(1 for row in res.trace if row.kind in (TraceKind.PARK, TraceKind.RESUME) and row.t > res.warmup_s)
        rates.append(n / res.duration_s)
        results.append(res)
    mean = float(np.mean(rates))
    half = float(stats.t.ppf(0.995, runs - 1) * np.std(rates, ddof=1) / math.sqrt(runs))
    return mean, half, results  # type: ignore[return-value]


def test_simulator_with_the_hysteresis_controller_agrees() -> None:
    model, _ = load_model_file(str(EXAMPLE))
    policy = HysteresisPolicy((3, 3, 3, 1, 1, 1), (3, 3, 1, 1, 1, 1))
    exact = solve_hysteresis(model, policy)
    mean, half, results = _simulated_commands(model, policy, seed=24, runs=10, events=60_000)
    assert abs(mean - exact.commands_per_s) <= half, (mean, half, exact.commands_per_s)
    res = results[0]
    for name in ("p_loss", "p_obsolete", "p_starvation", "mean_active_robots", "mean_response_served"):
        est = getattr(res, name)
        assert est.contains(getattr(exact.measures, name)), (name, est, getattr(exact.measures, name))


@pytest.mark.parametrize(("park", "resume", "field"), [
    ((3, 3, 1), (3, 2, 2), "resume[2]"),
    ((3, 1, 2), (1, 1, 1), "park[2]"),
    ((3, 3, 1), (3, 1), "resume"),
    ((3,), (3,), "park"),
    ((3, -1, 1), (1, 1, 1), "park[1]"),
])
def test_bad_vectors_name_the_field(park: tuple[int, ...], resume: tuple[int, ...], field: str) -> None:
    with pytest.raises(InputError) as err:
        HysteresisPolicy(park, resume)
    assert err.value.field == field


def test_policy_must_fit_the_model() -> None:
    model, _ = load_model_file(str(EXAMPLE))
    with pytest.raises(InputError, match="levels"):
        solve_hysteresis(model, HysteresisPolicy((3, 3, 1), (3, 1, 1)))
    with pytest.raises(InputError, match="mode"):
        solve_hysteresis(model, HysteresisPolicy((9, 3, 3, 1, 1, 1), (1, 1, 1, 1, 1, 1)))
