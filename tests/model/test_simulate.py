"""The simulator against the exact solver: every exact measure inside the simulated confidence intervals,
and wrong models caught by the same comparison.

Run lengths and the family-wise level are chosen so that a correct simulator fails one of these
comparisons with probability at most 1% per test (Bonferroni over every interval a test checks), while
the wrong models miss by tens of standard errors. Seeds are fixed only to make a failure reproducible.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from robotctl.agent import load_model_file
from robotctl.model import (
    PH,
    Admission,
    Costs,
    Measures,
    QueueModel,
    SimulationResult,
    ThresholdPolicy,
    random_model,
    random_policy,
    simulate_events,
    simulate_horizon,
    solve,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"
OPTIMUM = ThresholdPolicy((3, 3, 3, 1, 1, 1))
#: Probability that a correct simulator fails a test (split over all intervals the test checks).
ALPHA = 0.01


@pytest.fixture(scope="module")
def example() -> tuple[QueueModel, Costs]:
    return load_model_file(str(EXAMPLE))


@pytest.fixture(scope="module")
def exact(example: tuple[QueueModel, Costs]) -> Measures:
    solution = solve(example[0], OPTIMUM)
    assert solution.success
    return solution.measures


@pytest.fixture(scope="module")
def simulated(example: tuple[QueueModel, Costs]) -> SimulationResult:
    model, costs = example
    return simulate_events(model, OPTIMUM, np.random.default_rng(20260521), events=400_000, costs=costs)


def test_paper_optimum_inside_every_interval(simulated: SimulationResult, exact: Measures) -> None:
    comparison = simulated.check(exact, familywise=True)
    assert simulated.success and simulated.level == 0.99
    assert len(comparison.rows) == 11  # ten measures and the cost
    assert comparison.level == pytest.approx(1 - ALPHA / 11)
    assert comparison.all_inside, f"outside: {comparison.outside}\n{comparison}"


def test_paper_optimum_cost_interval_holds_the_optimum(simulated: SimulationResult) -> None:
    # the paper's optimum, 63.54, as printed (Table 1)
    assert simulated.cost is not None
    assert simulated.cost.low <= 63.54 <= simulated.cost.high


def test_obsolescence_in_service_is_caught(example: tuple[QueueModel, Costs], exact: Measures) -> None:
    model, costs = example
    wrong = simulate_events(model, OPTIMUM, np.random.default_rng(20260521), events=400_000, costs=costs,
                            _obsolete_in_service=True)
    comparison = wrong.check(exact, familywise=True)
    wrong_measures = {"p_obsolete", "p_success", "mean_response_served", "cost"}
    assert wrong_measures <= set(comparison.outside), str(comparison)


def test_whole_batch_rejection_is_caught(simulated: SimulationResult,
                                         example: tuple[QueueModel, Costs]) -> None:
    """The simulated paper model (partial admission) against the exact solution of the same model
    with whole-batch rejection: the check tells the two admission rules apart."""
    rejecting = dataclasses.replace(example[0], admission=Admission.REJECT_BATCH)
    comparison = simulated.check(solve(rejecting, OPTIMUM).measures, familywise=True)
    assert {"p_loss", "p_success"} <= set(comparison.outside), str(comparison)


def test_five_percent_faster_service_is_caught(simulated: SimulationResult,
                                                example: tuple[QueueModel, Costs]) -> None:
    """Power against a small error: the exact measures of a model whose indexing is 5% faster lie
    outside the intervals simulated for the true model."""
    model = example[0]
    faster = dataclasses.replace(model, service=PH(model.service.beta, model.service.S * 1.05))
    comparison = simulated.check(solve(faster, OPTIMUM).measures, familywise=True)
    assert "mean_response_served" in comparison.outside, str(comparison)


RANDOM_CASES = 8


def _random_case(seed: int) -> tuple[QueueModel, ThresholdPolicy]:
    rng = np.random.default_rng(seed)
    modes = tuple(sorted(rng.choice([1, 2, 3, 4], size=int(rng.integers(1, 4)), replace=False).tolist()))
    model = random_model(
        rng, capacity=int(rng.integers(2, 5)), arrival_order=int(rng.integers(1, 3)),
        service_order=int(rng.integers(1, 3)), obsolescence_order=[None, 1, 2][int(rng.integers(0, 3))],
        modes=modes, max_batch=int(rng.integers(1, 4)), load=float(rng.uniform(0.5, 1.5)),
        admission=Admission.PARTIAL if rng.random() < 0.6 else Admission.REJECT_BATCH)
    return model, random_policy(rng, modes, model.capacity)


def test_random_models_inside_every_interval() -> None:
    """Random small models (BMAP and PH orders 1-2, batches up to 3, K = 2..4, with and without
    obsolescence, both admission rules) under random policies: all exact measures inside, family-wise
    over every interval of every case."""
    results = []
    for case in range(RANDOM_CASES):
        model, policy = _random_case(1000 + case)
        solution = solve(model, policy)
        assert solution.success
        sim = simulate_events(model, policy, np.random.default_rng(2000 + case), events=200_000)
        results.append((model, policy, solution.measures, sim))
    checks = sum(len(sim.measure_names) for *_, sim in results)
    for model, policy, measures, sim in results:
        comparison = sim.at_level(1 - ALPHA / checks).check(measures)
        assert comparison.all_inside, (f"K={model.capacity} modes={model.modes} policy={policy} "
                                       f"admission={model.admission} "
                                       f"obsolescence={model.obsolescence is not None}\n{comparison}")


def test_without_obsolescence_nothing_goes_stale() -> None:
    model, policy = _random_case(7)
    model = dataclasses.replace(model, obsolescence=None)
    sim = simulate_events(model, policy, np.random.default_rng(3), events=20_000)
    assert sim.pages_obsolete == 0
    assert sim.p_obsolete.value == 0.0 and sim.p_obsolete.half_width == 0.0
    assert sim.mean_sojourn_obsolete.value == 0.0
    assert sim.check(solve(model, policy).measures, names=["p_obsolete", "mean_sojourn_obsolete"]).all_inside


def test_horizon_driver_inside_every_interval(example: tuple[QueueModel, Costs], exact: Measures) -> None:
    model, costs = example
    sim = simulate_horizon(model, OPTIMUM, np.random.default_rng(5), horizon_s=60_000.0, warmup_s=500.0,
                           batches=25, costs=costs)
    assert sim.duration_s == pytest.approx(60_000.0) and sim.warmup_s == 500.0 and sim.batches == 25
    comparison = sim.check(exact, familywise=True)
    assert comparison.all_inside, str(comparison)


def test_queue_length_and_mode_distributions(simulated: SimulationResult, exact: Measures) -> None:
    levels = len(simulated.queue_length_distribution)
    assert levels == 6
    fw = simulated.at_level(1 - ALPHA / (levels + 4))
    pairs = zip(fw.queue_length_distribution, exact.queue_length_distribution, strict=True)
    for i, (est, p) in enumerate(pairs):
        assert est.contains(p), f"level {i}: {p} not in {est}"
    by_mode = dict(fw.active_robots_distribution)
    assert set(by_mode) == {1, 2, 3, 4}
    assert by_mode[2].value == 0.0 and by_mode[4].value == 0.0  # the policy never uses them
    for mode, p in exact.active_robots_distribution:
        assert by_mode[mode].contains(p)
    assert sum(e.value for e in simulated.queue_length_distribution) == pytest.approx(1.0)
