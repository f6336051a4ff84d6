"""Threshold search: counts, conversions, and the exhaustive optimum against a direct enumeration."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotctl.model import Costs, InputError, LevelChain, PolicyEvaluator, ThresholdPolicy, cost_of, random_model, solve
from robotctl.policies import count_policies, count_threshold_vectors, optimise, optimise_thresholds, threshold_vectors


@given(st.integers(1, 5), st.integers(1, 8))
def test_threshold_vector_count(n: int, K: int) -> None:
    vectors = list(threshold_vectors(n, K))
    assert len(vectors) == count_threshold_vectors(n, K) == len(set(vectors))
    for js in vectors:
        policy = ThresholdPolicy.from_thresholds(tuple(range(n, 0, -1)), js, K)
        assert policy.thresholds_for(tuple(range(n, 0, -1))) == js


def test_exhaustive_optimum_is_the_minimum_over_all_monotone_policies() -> None:
    """Every non-increasing robots_at_level with r(0) = max mode and r(K) = min mode, solved directly."""
    model = random_model(np.random.default_rng(7), capacity=4, modes=(1, 2, 3))
    costs = Costs(loss=3, obsolescence=4, response=1, robot=2, starvation=20)
    best = optimise_thresholds(model, costs, (3, 2, 1))
    brute = math.inf
    for middle in itertools.combinations_with_replacement((3, 2, 1), 3):
        r = (3, *sorted(middle, reverse=True), 1)
        brute = min(brute, cost_of(solve(model, ThresholdPolicy(r)).measures, costs).total)
    assert best.cost.total == pytest.approx(brute, rel=1e-12)


def test_all_subsets_optimum_is_the_best_subset() -> None:
    model = random_model(np.random.default_rng(8), capacity=3, modes=(1, 2, 4))
    costs = Costs(loss=1, obsolescence=1, response=1, robot=1, starvation=10)
    search = optimise(model, costs)
    assert search.best.cost.total == min(o.cost.total for o in search.subsets)
    assert len(search.subsets) == 7
    assert search.relative_profit == pytest.approx(
        (1 - search.best.cost.total / min(c.total for _, c in search.static)) * 100)


def test_unknown_modes_and_methods_are_rejected() -> None:
    model = random_model(np.random.default_rng(9), modes=(1, 2))
    with pytest.raises(InputError, match=r"\[5\] not defined"):
        optimise_thresholds(model, Costs(), (5, 1))
    with pytest.raises(InputError, match="search method"):
        optimise(model, Costs(), method="annealing")


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000))
def test_local_search_never_beats_exhaustive(seed: int) -> None:
    model = random_model(np.random.default_rng(seed), capacity=4, modes=(1, 2, 3))
    costs = Costs(loss=2, obsolescence=2, response=1, robot=3, starvation=30)
    exhaustive = optimise_thresholds(model, costs, (3, 2, 1), method="exhaustive")
    local = optimise_thresholds(model, costs, (3, 2, 1), method="local")
    assert local.cost.total >= exhaustive.cost.total - 1e-12


@given(st.integers(1, 4), st.integers(1, 6))
def test_policy_count(n: int, K: int) -> None:
    modes = range(1, n + 1)
    monotone = [r for r in itertools.product(modes, repeat=K + 1) if all(a >= b for a, b in itertools.pairwise(r))]
    assert count_policies(n, K) == len(monotone)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000))
def test_policy_descent_never_beats_the_exhaustive_optimum(seed: int) -> None:
    model = random_model(np.random.default_rng(seed), capacity=4, modes=(1, 2, 3))
    costs = Costs(loss=2, obsolescence=2, response=1, robot=3, starvation=30)
    exhaustive = optimise(model, costs, method="exhaustive")
    local = optimise(model, costs, method="local")
    assert exhaustive.best.exact and not local.best.exact
    assert local.best.cost.total >= exhaustive.best.cost.total - 1e-12
    assert local.best.cost.total <= min(c.total for _, c in local.static) + 1e-12


def test_levels_too_large_for_dense_solves_search_the_surrogate_and_report_the_real_cost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26: when even depth 0's levels exceed SURROGATE_DIM, the search runs on the exponential
    surrogate, and the optimum's reported cost is the real law's (here exact), not the surrogate's."""
    from robotctl.model import fleet_model, solve_approx
    from robotctl.policies import _thresholds

    model, costs = fleet_model(4, 7, obsolescence="erlang3")
    monkeypatch.setattr(_thresholds, "SURROGATE_DIM", 8)
    search = optimise(model, costs, method="local", restarts=2)
    assert search.search_chain == "exponential surrogate (exact)"
    real = solve_approx(model, search.best.policy, costs)
    assert real.exact and search.exact and search.error_bound == 0.0
    assert search.best.cost.total == pytest.approx(real.cost, rel=1e-10)
    surrogate_cost = next(o.cost.total for o in search.subsets if o.search_method == "local")
    assert real.cost is not None
    assert abs(surrogate_cost - real.cost) > 1e-6  # the two laws differ: the real one was evaluated


def test_static_fleets_on_large_levels_are_solved_iteratively_with_the_dense_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The static fleets (those walked on the approximate search chain), each a whole policy, go to the
    iterative solver above WHOLE_ITERATIVE_DIM; their C_r are those of the dense pass on the same chain, and
    so are the optimum and R."""
    from robotctl.model import Rates, fleet_model
    from robotctl.policies import _thresholds

    model, costs = fleet_model(4, 10, obsolescence="two-phase")
    monkeypatch.setattr(_thresholds, "SEARCH_DIM", 64)  # an approximate search chain
    dense = optimise(model, costs, method="local")
    calls: list[int] = []
    real = _thresholds.evaluate_rates

    def counted(chain: LevelChain, robots: tuple[int, ...]) -> tuple[Rates, str]:
        calls.append(robots[0])
        return real(chain, robots)

    monkeypatch.setattr(_thresholds, "evaluate_rates", counted)
    monkeypatch.setattr(_thresholds, "WHOLE_ITERATIVE_DIM", 0)
    iterative = optimise(model, costs, method="local")
    assert sorted(calls) == sorted(r for r, _ in iterative.static)  # one iterative solve per static fleet
    assert [r for r, _ in dense.static] == [r for r, _ in iterative.static]  # the same walk
    assert dense.search_chain == iterative.search_chain and dense.search_chain.startswith("ordered-head")
    for (r, a), (s, b) in zip(dense.static, iterative.static):
        assert r == s and b.total == pytest.approx(a.total, rel=1e-10)
    assert iterative.best.policy == dense.best.policy
    assert iterative.relative_profit == pytest.approx(dense.relative_profit, rel=1e-8)


def test_a_local_search_on_an_approximate_chain_polishes_the_surrogates_optimum() -> None:
    """On an approximate search chain the exponential surrogate explores and the search chain polishes its
    optimum: the policy found is the one a four-start search on the search chain itself finds, though the
    surrogate's own optimum costs 6% more there (so the polish did the work). The static fleets are a walk
    from the surrogate's best: each costed as on the chain, the best of every mode among them, R against it."""
    from robotctl.model import PH, PolicyEvaluator, fleet_model
    from robotctl.policies import search_policies
    from robotctl.policies._search import surrogate
    from robotctl.policies._thresholds import search_chain, search_route

    life = PH.hyperexponential([0.95, 0.05], [3.0, 0.02])
    model, costs = fleet_model(6, 12, obsolescence=PH(life.beta, life.S * (life.mean / 10.0)))
    search = optimise(model, costs, method="local")
    reduced, chain = search_route(model)
    assert not chain.exact and search.search_chain == chain.label
    found = next(o for o in search.subsets if o.search_method == "local")
    full = search_policies(reduced, costs, monotone=True, chain=chain, restarts=4)
    assert found.policy.robots_at_level == full.policy.robots_at_level
    assert found.cost.total == pytest.approx(full.cost, rel=1e-10)
    cheap = surrogate(reduced)
    explored = search_policies(cheap, costs, monotone=True, chain=search_chain(cheap), restarts=3).policy
    ev = PolicyEvaluator(chain, explored.robots_at_level)
    assert ev.cost(explored.robots_at_level, costs) > 1.05 * full.cost
    every = {r: ev.cost((r,) * 13, costs) for r in reduced.modes}
    assert search.static_walk and 2 <= len(search.static) < len(every)
    for r, c in search.static:
        assert c.total == pytest.approx(every[r], rel=1e-10)
    assert min(c.total for _, c in search.static) == pytest.approx(min(every.values()), rel=1e-10)
    assert search.relative_profit == pytest.approx((1 - found.cost.total / min(every.values())) * 100, rel=1e-8)


def test_the_search_chains_blocks_are_dropped_before_the_error_bars_ladder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the ladder builds its deeper chains, the costing drops its evaluator's passes and the search
    chain's dense blocks (the ladder's first depth takes the optimum's rates as given): the ladder sees them
    gone, and the optimum, its bar and R are those of a costing that keeps everything."""
    import inspect

    import robotctl.policies._thresholds as thresholds
    from robotctl.model import fleet_model

    model, costs = fleet_model(4, 20, obsolescence="two-phase")
    seen: list[tuple[bool, int]] = []
    real_ladder = thresholds._ladder

    def spy(*args: object) -> object:
        call = inspect.signature(real_ladder).bind(*args).arguments
        chain = call["chain"]
        assert isinstance(chain, LevelChain)
        seen.append((call["rates"] is not None, sum(len(c) for c in chain.evaluator_caches.values())))
        return real_ladder(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(thresholds, "_ladder", spy)
    lean = optimise(model, costs, method="local")
    assert seen == [(True, 0)]  # the rates were given, and no block was left with the chain
    monkeypatch.setattr(thresholds._Costing, "release", lambda self, *, blocks: None)
    kept = optimise(model, costs, method="local")
    assert seen[1][0] and seen[1][1] > 0  # without the release the blocks were still there
    assert lean.best.policy == kept.best.policy
    assert lean.best.cost.total == kept.best.cost.total and lean.error_bound == kept.error_bound
    assert lean.relative_profit == kept.relative_profit and lean.static == kept.static


def test_a_costing_costs_the_same_after_it_released_its_blocks() -> None:
    """Costing again after a release rebuilds what it needs: the same cost as a fresh evaluator's."""
    from robotctl.model import fleet_model
    from robotctl.policies._thresholds import _Costing

    model, costs = fleet_model(4, 12, obsolescence="two-phase")
    chain = LevelChain(model, 0)
    costing = _Costing(model, costs, chain, None)
    first = ThresholdPolicy.from_thresholds((4, 1), (3,), 12)
    second = ThresholdPolicy.from_thresholds((4, 2), (5,), 12)
    costing.total(first)
    costing.release(blocks=True)
    assert not any(chain.evaluator_caches.values())
    again = costing.total(second)
    fresh = PolicyEvaluator(LevelChain(model, 0), second.robots_at_level).cost(second.robots_at_level, costs)
    assert again == pytest.approx(fresh, rel=1e-13)


def test_the_time_budget_covers_the_search_and_its_error_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    """``max_seconds`` of optimise counts from its start: the ladder of the optimum's error bar is told when
    the search began (so a search that used the budget leaves the bar its first depth only, and says so)."""
    import time

    import robotctl.policies._thresholds as thresholds
    from robotctl.model import fleet_model, solve_approx

    model, costs = fleet_model(4, 20, obsolescence="two-phase")
    seen: list[float | None] = []

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(kwargs.get("started"))  # type: ignore[arg-type]
        return solve_approx(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(thresholds, "solve_approx", spy)
    before = time.perf_counter()
    full = optimise(model, costs, method="local", max_seconds=600.0)
    assert len(seen) == 1 and seen[0] is not None and before <= seen[0] <= time.perf_counter()
    assert not full.exact and not full.budget_exhausted and math.isfinite(full.error_bound)
    # a budget that the search alone used up: the bar stops after its first depth
    short = solve_approx(model, full.best.policy, costs, rtol=1e-3, max_seconds=1.0, started=time.perf_counter() - 5)
    assert short.budget_exhausted and len(short.ladder) == 1 and "time budget of 1 s ran out" in short.message
