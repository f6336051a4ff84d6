"""Targets instead of weights: the policy of least robot time that meets bounds on P_loss, P_obs, P_star,
checked against an independent enumeration of every threshold policy of the paper example."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from robotctl.agent import load_model_file
from robotctl.model import InputError, Measures, QueueModel, ThresholdPolicy, prepare, random_model, solve
from robotctl.policies import (
    Targets,
    TargetStatus,
    count_policies,
    every_policy,
    optimise_for_targets,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"
FIELDS = {"max_loss": "p_loss", "max_obsolete": "p_obsolete", "max_starvation": "p_starvation"}


@pytest.fixture(scope="module")
def paper() -> tuple[QueueModel, dict[tuple[int, ...], Measures]]:
    """The paper example and the exact measures of every non-increasing robots_at_level over its modes,
    enumerated directly (not through every_policy)."""
    model, _ = load_model_file(str(EXAMPLE))
    prepared = prepare(model)
    modes = sorted(model.modes, reverse=True)
    out = {}
    for r in itertools.product(modes, repeat=model.capacity + 1):
        if all(a >= b for a, b in itertools.pairwise(r)):
            sol = solve(model, ThresholdPolicy(r), prepared=prepared)
            assert sol.success
            out[r] = sol.measures
    return model, out


def _meets(m: Measures, t: Targets) -> bool:
    return all(getattr(m, FIELDS[name]) <= bound + 1e-9 for name, bound in t.given)


#: feasible targets on the paper example (its least P_loss is 0.134, P_obs 0.103, P_star 0.042)
FEASIBLE = [
    Targets(max_loss=0.18, max_starvation=0.07),
    Targets(max_loss=0.21, max_obsolete=0.2, max_starvation=0.05),
    Targets(max_starvation=0.1),
    Targets(max_loss=0.14),
    Targets(max_obsolete=0.12, max_starvation=0.08),
]


@pytest.mark.parametrize("targets", FEASIBLE, ids=lambda t: ",".join(f"{k}={v}" for k, v in t.given))
def test_targets_on_the_paper_example_meet_every_bound_with_the_least_robot_time(
        paper: tuple[QueueModel, dict[tuple[int, ...], Measures]], targets: Targets) -> None:
    """Acceptance (issue 16): the chosen policy meets every target on its exact measures, and no threshold
    policy of the paper example that meets them uses fewer robots on average (exhaustive check)."""
    model, every = paper
    result = optimise_for_targets(model, targets)
    assert result.success and result.status is TargetStatus.MET and result.exact
    assert result.search_method == "exhaustive" and result.policies_solved == len(every) == 84
    exact = solve(model, result.policy).measures  # solved again, on its own
    assert _meets(exact, targets) and all(ok for _, ok in result.met)
    feasible = {r: m.mean_active_robots for r, m in every.items() if _meets(m, targets)}
    assert min(feasible.values()) == pytest.approx(exact.mean_active_robots, rel=1e-12)
    assert all(n >= exact.mean_active_robots - 1e-12 for n in feasible.values())


def test_the_issues_targets_are_infeasible_on_the_paper_example_and_it_says_what_is_possible(
        paper: tuple[QueueModel, dict[tuple[int, ...], Measures]]) -> None:
    model, every = paper
    targets = Targets(max_loss=0.01, max_obsolete=0.02, max_starvation=0.05)
    result = optimise_for_targets(model, targets)
    assert not result.success and result.status is TargetStatus.INFEASIBLE and result.exact
    assert result.message.startswith("infeasible: the best any policy can do is P_loss 0.1345")
    for best in result.best_possible:
        least = min(getattr(m, FIELDS[best.target]) for m in every.values())
        assert best.value == pytest.approx(least, rel=1e-12)
        assert getattr(every[best.policy.robots_at_level], FIELDS[best.target]) == pytest.approx(least, rel=1e-12)
        assert f"{best.measure} {best.value:.4g} (policy {best.policy})" in result.message
    # the closest policy: the smallest worst ratio of measure to bound
    worst = {r: max(getattr(m, FIELDS[n]) / b for n, b in targets.given) for r, m in every.items()}
    assert worst[result.policy.robots_at_level] == pytest.approx(min(worst.values()), rel=1e-12)
    assert dict(result.met) == {"max_loss": False, "max_obsolete": False, "max_starvation": False}


@pytest.mark.parametrize("bounds", [(0.14, 0.11, 0.01), (0.2, 0.02, 0.05), (0.01, 0.2, 0.05), (0.01, 0.02, 0.05)])
def test_nearest_by_items_is_the_fewest_pages_per_second_beyond_the_bounds(
        paper: tuple[QueueModel, dict[tuple[int, ...], Measures]], bounds: tuple[float, float, float]) -> None:
    """``nearest="items"``: when no policy meets the targets, the policy missing the fewest pages per second
    beyond them (lambda P_loss and lambda P_obs over their bounds, mu P_star over its bound), checked against
    the enumeration with mu from the service law's matrix; mu (1 - P_star) is the pages indexed per second."""
    model, every = paper
    targets = Targets(*bounds, nearest="items")
    beta, s = model.service.beta, model.service.S
    mu = 1.0 / float(beta @ np.linalg.solve(-s, np.ones(len(beta))))

    def beyond(m: Measures) -> float:
        over = [max(0.0, getattr(m, FIELDS[n]) - b) for n, b in targets.given]
        return m.arrival_rate * (over[0] + over[1]) + mu * over[2]

    result = optimise_for_targets(model, targets)
    assert not result.success and result.status is TargetStatus.INFEASIBLE
    assert beyond(every[result.policy.robots_at_level]) == pytest.approx(min(map(beyond, every.values())),
                                                                          rel=1e-12)
    m = result.measures
    assert m.arrival_rate * m.p_success == pytest.approx(mu * (1.0 - m.p_starvation), rel=1e-9)
    ratio = optimise_for_targets(model, Targets(*bounds))  # the default rule is unchanged by the option
    assert ratio.targets.nearest == "ratio" and ratio.message == result.message


def test_nearest_by_items_and_by_ratio_differ_where_a_tight_bound_dominates_the_ratios(
        paper: tuple[QueueModel, dict[tuple[int, ...], Measures]]) -> None:
    """A 2% bound on obsolescence next to 20% on loss: the worst ratio is obsolescence's, and to shrink it
    the ratio rule runs every robot everywhere, paying in lost pages; the items rule counts those pages."""
    model, _ = paper
    by_ratio = optimise_for_targets(model, Targets(0.2, 0.02, 0.05))
    by_items = optimise_for_targets(model, Targets(0.2, 0.02, 0.05, nearest="items"))
    assert by_ratio.policy.robots_at_level == (4, 4, 4, 4, 4, 4)
    assert by_items.policy.robots_at_level == (3, 3, 1, 1, 1, 1)
    lost = {k: r.measures.arrival_rate * (r.measures.p_loss + r.measures.p_obsolete)
            for k, r in (("ratio", by_ratio), ("items", by_items))}
    assert lost["items"] < lost["ratio"]
    assert by_items.measures.p_obsolete > by_ratio.measures.p_obsolete  # the ratio rule's own aim


def test_nearest_must_be_a_known_rule() -> None:
    with pytest.raises(InputError, match=r"targets\.nearest: is 'fewest'.*ratio, items"):
        Targets(max_loss=0.01, nearest="fewest")


def test_lagrangian_search_meets_the_targets_and_finds_the_optimum_on_the_paper_example(
        paper: tuple[QueueModel, dict[tuple[int, ...], Measures]]) -> None:
    """The search for models too large to enumerate, run on the paper example where the answer is known."""
    model, every = paper
    targets = FEASIBLE[0]
    result = optimise_for_targets(model, targets, method="lagrange")
    assert result.success and not result.exact and result.search_method == "lagrange"
    assert _meets(every[result.policy.robots_at_level], targets)
    best = min(m.mean_active_robots for m in every.values() if _meets(m, targets))
    assert result.measures.mean_active_robots == pytest.approx(best, rel=1e-12)
    assert result.rounds >= 1 and any(v > 0 for _, v in result.multipliers)  # a bound binds


def test_lagrangian_search_does_not_claim_infeasibility(
        paper: tuple[QueueModel, dict[tuple[int, ...], Measures]]) -> None:
    model, _ = paper
    result = optimise_for_targets(model, Targets(max_loss=0.01), method="lagrange", max_rounds=3)
    assert not result.success and result.status is TargetStatus.NOT_FOUND
    assert result.message.startswith("no policy found that meets every target; the best found is P_loss")


def test_loose_targets_give_the_least_robot_time_of_all() -> None:
    model = random_model(np.random.default_rng(11), capacity=3, modes=(1, 2, 3))
    for method in ("exhaustive", "lagrange"):
        result = optimise_for_targets(model, Targets(max_loss=1.0, max_obsolete=1.0, max_starvation=1.0),
                                      method=method)
        assert result.success and result.policy.robots_at_level == (1, 1, 1, 1)
    assert result.rounds == 1  # nothing binds: the first round's least robot time is the answer


@pytest.mark.parametrize(("modes", "K"), [((3, 1), 5), ((4, 3, 2, 1), 5), ((2,), 3), ((5, 3, 2), 4)])
def test_every_policy_lists_each_monotone_policy_once(modes: tuple[int, ...], K: int) -> None:
    got = {p.robots_at_level for p in every_policy(modes, K)}
    want = {r for r in itertools.product(sorted(modes, reverse=True), repeat=K + 1)
            if all(a >= b for a, b in itertools.pairwise(r))}
    assert got == want and len(every_policy(modes, K)) == count_policies(len(modes), K)


@pytest.mark.parametrize(("kwargs", "field"), [({"max_loss": 1.5}, "targets.max_loss"),
                                               ({"max_starvation": -0.1}, "targets.max_starvation"),
                                               ({"max_obsolete": "1%"}, "targets.max_obsolete"),
                                               ({}, "targets")])
def test_bad_targets_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as info:
        Targets(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_bad_search_arguments_name_the_field(paper: tuple[QueueModel, dict[tuple[int, ...], Measures]]) -> None:
    model, _ = paper
    with pytest.raises(InputError, match="method"):
        optimise_for_targets(model, Targets(max_loss=0.2), method="bisect")
    with pytest.raises(InputError, match="modes"):
        optimise_for_targets(model, Targets(max_loss=0.2), modes=(7,))
