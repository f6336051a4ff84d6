"""Open-loop routing (paper 003): the period switch at mu_2 = 1 + sqrt 2, the multimodular local search
against brute force, its counterexample, the MDP against enumeration, and losses against simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robotctl.fitting._synthetic import sample_bmap
from robotctl.model import BMAP, InputError
from robotctl.policies import (
    COUNTEREXAMPLE,
    RoutingStatus,
    ServerCosts,
    local_search,
    mdp_state_count,
    midpoint_convexity_violations,
    mmpp,
    multimodularity_violations,
    neighbourhood,
    optimal_routing,
    primitive,
    route,
    sequence_costs,
    simulate_routing_losses,
    switch_rate,
    table_function,
)

POISSON = BMAP.poisson(1.0)


def g_paper(n: int, mu2: float) -> float:
    """Section 5's g(n, mu_2) for the period (1, 2, ..., 2), lambda = mu_1 = 1."""
    a2 = 1 / (1 + mu2)
    return (0.5**n + a2**2 + (n - 2) * a2) / n


def test_sequence_cost_is_eq_6() -> None:
    costs = ServerCosts.losses(POISSON, [1.0, 3.0], 10)
    for n in range(2, 9):
        seq = [0] + [1] * (n - 1)
        assert float(sequence_costs(seq, costs)[0]) == pytest.approx(g_paper(n, 3.0), rel=1e-12)
    # a server never used costs nothing (no packet there to lose); always the fast server loses 1/4
    assert float(sequence_costs([1, 1, 1], costs)[0]) == pytest.approx(0.25)


def test_switch_from_period_2_to_3_at_one_plus_sqrt_2() -> None:
    assert switch_rate(1.0, 1.0, 2) == pytest.approx(1 + math.sqrt(2), rel=1e-12)
    root = 1 + math.sqrt(2)
    assert g_paper(2, root) == pytest.approx(g_paper(3, root), rel=1e-12)
    # over all sequences of period <= 10, not only (1, 2, ..., 2):
    for method in ("enumerate", "local"):
        below = route(POISSON, [1.0, root - 0.01], max_period=10, method=method)
        above = route(POISSON, [1.0, root + 0.01], max_period=10, method=method)
        assert below.sequence == (0, 1) and above.sequence == (0, 1, 1), method
    later = [switch_rate(1.0, 1.0, n) for n in range(2, 6)]
    assert np.all(np.diff(later) > 0)


def _random_convex(rng: np.random.Generator) -> tuple[object, float]:
    kind = int(rng.integers(4))
    if kind == 0:
        a = rng.uniform(0.05, 0.95)
        return (lambda n: a ** n), 0.0
    if kind == 1:
        a, b, d = rng.uniform(0, 1), rng.uniform(0, 2), rng.uniform(0.1, 2)
        return (lambda n: a * n + b * np.exp(-d * n)), a
    if kind == 2:
        c = rng.uniform(0.01, 1)
        return (lambda n: c * n * n), math.inf
    knots = np.cumsum(rng.uniform(0, 1, 40))  # increasing slopes: a random convex piecewise-linear f
    vals = np.concatenate([[0.0], np.cumsum(knots - knots[5])])
    return (lambda n: vals[np.minimum(n, 40)]), math.inf


def test_local_search_finds_the_brute_force_optimum_on_random_convex_instances() -> None:
    """Theorem 4.2 with Lemma 4.3 and Theorem 4.4: convex f_1, f_2 make g multimodular on {1, 2}^n, so
    the local search from any start reaches the minimum of every period."""
    rng = np.random.default_rng(17)
    for _ in range(150):
        (f1, s1), (f2, s2) = _random_convex(rng), _random_convex(rng)
        costs = ServerCosts.from_functions([f1, f2], 12, [s1, s2])  # type: ignore[list-item]
        n = int(rng.integers(1, 11))
        allx = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)
        brute = float(sequence_costs(allx, costs).min())
        x0 = rng.integers(1, 3, n)
        res = local_search(lambda p: sequence_costs(p - 1, costs), x0, 1, 2)  # noqa: B023
        assert res.value == pytest.approx(brute, rel=1e-12, abs=1e-12), (n, x0)
        whole = optimal_routing(costs, max_period=n, method="local")
        check = optimal_routing(costs, max_period=n, method="enumerate")
        assert whole.cost == pytest.approx(check.cost, rel=1e-12, abs=1e-12)


def test_counterexample_is_integer_convex_not_multimodular_and_traps_the_search() -> None:
    """The function of Section 4: no midpoint-convexity violation; the one violation of (5) inside the
    domain is at (1, 2) with b_0 and b_1 (the printed one needs (1, 3), outside); the search from (2, 1)
    stops at value 0, above the minimum -1 at (0, 2)."""
    assert midpoint_convexity_violations(COUNTEREXAMPLE) == []
    assert multimodularity_violations(COUNTEREXAMPLE) == [((1, 2), 0, 1, -1.0, 3.0)]
    assert (1, 3) not in COUNTEREXAMPLE
    nb = neighbourhood((2, 1), 0, 2)
    assert sorted(map(tuple, nb.tolist())) == [(1, 1), (1, 2), (2, 0), (2, 2)]
    assert all(COUNTEREXAMPLE[tuple(p)] > 0 for p in nb.tolist())
    res = local_search(table_function(COUNTEREXAMPLE), (2, 1), 0, 2)
    assert res.x == (2, 1) and res.value == 0.0 and min(COUNTEREXAMPLE.values()) == -1.0


def test_neighbourhood_size() -> None:
    """2^{n+1} - 2 points in Z^n (Section 4)."""
    for n in (1, 3, 6):
        assert neighbourhood(np.zeros(n, dtype=int), -5, 5).shape[0] == 2 ** (n + 1) - 2


@pytest.mark.parametrize("rates", [[1.0, 2.0, 5.0], [0.5, 0.5, 4.0], [1.0, 1.5, 2.0, 6.0]])
def test_mdp_against_enumeration(rates: list[float]) -> None:
    """Min mean cycle of the bounded MDP versus every sequence of period <= P: with B >= P - M + 1 every
    sequence of period <= P that uses all servers is in the MDP, and the MDP's optimum, if its period
    is <= P, is among the sequences."""
    M = len(rates)
    P = 8 if M == 3 else 7
    arrivals = mmpp([[-0.3, 0.3], [0.6, -0.6]], [2.5, 0.4])
    mdp = route(arrivals, rates, max_period=P, method="mdp")
    enum = route(arrivals, rates, max_period=P, method="enumerate")
    assert mdp.cost <= enum.cost + 1e-12
    costs = ServerCosts.losses(arrivals, rates, 40)
    assert float(sequence_costs(mdp.sequence, costs)[0]) == pytest.approx(mdp.cost, rel=1e-10)
    if len(mdp.sequence) <= P:
        assert mdp.cost == pytest.approx(enum.cost, rel=1e-10)


@pytest.mark.parametrize(("arrivals", "rates"), [(POISSON, [1.0, 2.0, 4.0]), (POISSON, [1.0, 5.0]),
                                             (mmpp([[-0.2, 0.2], [0.5, -0.5]], [3.0, 0.3]), [1.0, 3.0])])
def test_mdp_certificate_holds_when_the_bound_grows(arrivals: BMAP, rates: list[float]) -> None:
    """With B >= B* (the proof of Theorem 3.1) the MDP says CERTIFIED, and much larger bounds find
    nothing better."""
    res = route(arrivals, rates, max_period=6, method="mdp", certify=True)
    assert res.status is RoutingStatus.CERTIFIED and res.max_period == res.certified_bound
    bigger = route(arrivals, rates, max_period=res.max_period + 15, method="mdp")
    assert bigger.cost == pytest.approx(res.cost, rel=1e-12)
    with pytest.raises(InputError, match="mdp"):
        route(arrivals, rates, method="enumerate", certify=True)


def test_two_servers_have_the_one_slow_rest_fast_structure() -> None:
    """Paper 003 (after Koole, and [1] for stationary input): with two servers the optimal period is
    (1, 2, ..., 2), 1 the slower. Random Poisson, MMPP and MAP inputs and rates, the MDP's optimum over
    distances <= 14: the slower server gets exactly one packet per period (or none)."""
    rng = np.random.default_rng(0)
    for trial in range(45):
        if trial % 3 == 0:
            arrivals = BMAP.poisson(rng.uniform(0.2, 3))
        elif trial % 3 == 1:
            a, b = rng.uniform(0.05, 2, 2)
            arrivals = mmpp([[-a, a], [b, -b]], rng.uniform(0.1, 5, 2))
        else:
            D0 = -np.diag(rng.uniform(1, 4, 2))
            D0[0, 1], D0[1, 0] = rng.uniform(0, 0.5, 2)
            D1 = rng.uniform(0, 1, (2, 2))
            D1 *= (-D0.sum(axis=1) / D1.sum(axis=1))[:, None]
            arrivals = BMAP.from_map(D0, D1)
        rates = np.sort(rng.uniform(0.2, 6, 2))
        res = route(arrivals, rates, max_period=14, method="mdp")
        assert res.sequence.count(0) <= 1, (trial, rates, res.sequence)


def test_state_count() -> None:
    assert [mdp_state_count(M, 20) for M in (2, 3, 4, 5)] == [38, 1026, 23256, 465120]


@pytest.mark.parametrize("arrivals", [POISSON, mmpp([[-0.2, 0.2], [0.5, -0.5]], [3.0, 0.3]),
                                      BMAP.from_map([[-3.0, 0.5], [0.2, -0.4]], [[2.4, 0.1], [0.05, 0.15]])],
                         ids=["poisson", "mmpp", "map"])
def test_losses_against_simulation(arrivals: BMAP) -> None:
    rng = np.random.default_rng(9)
    rates = [1.0, 3.0]
    res = route(arrivals, rates, max_period=8)
    gaps, _ = sample_bmap(arrivals, 300_000, rng)
    sim = simulate_routing_losses(res.sequence, gaps, rates, rng, batches=40)
    assert sim.contains(res.cost), (res.sequence, res.cost, sim)
    other = (0, 1, 1, 1, 1, 1) if res.sequence != (0, 1, 1, 1, 1, 1) else (0, 1)
    other_cost = float(sequence_costs(other, ServerCosts.losses(arrivals, rates, 8))[0])
    sim2 = simulate_routing_losses(other, gaps, rates, rng, batches=40)
    assert sim2.contains(other_cost)


def test_primitive_period() -> None:
    assert primitive([1, 0, 1, 0]) == (0, 1)
    assert primitive([1, 1, 0]) == (0, 1, 1)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"service_rates": [1.0, 0.0]}, "service_rates[1]"), ({"service_rates": []}, "service_rates"),
    ({"service_rates": [1.0, 2.0, 3.0], "method": "local"}, "method"),
    ({"service_rates": [1.0, 2.0], "method": "local", "max_period": 40}, "max_period"),
    ({"service_rates": [1.0, 2.0, 3.0], "method": "enumerate", "max_period": 20}, "max_period"),
    ({"service_rates": [1.0] * 6, "method": "mdp", "max_period": 30}, "max_period"),
    ({"service_rates": [1.0, 2.0], "method": "best"}, "method"),
])
def test_route_errors_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as err:
        route(POISSON, **kwargs)  # type: ignore[arg-type]
    assert err.value.field == field
