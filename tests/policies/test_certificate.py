"""The full-information MDP's lower bound: its chain against the exact solver, the bound against the
threshold optimum (paper example, random models), and its formulations against each other."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from robotctl.agent import load_model_file
from robotctl.model import PH, Costs, InputError, ThresholdPolicy, cost_of, random_model, random_policy, solve
from robotctl.policies import build_mdp, mdp_lower_bound, optimise
from robotctl.policies._certificate import _reduced, _Solver, count_states, ordered_states

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"
FIGURE_2 = Path(__file__).resolve().parents[2] / "config" / "paper001-figure2.yaml"
COSTS = Costs(loss=2, obsolescence=3, response=1.5, robot=2, starvation=20)
#: Two obsolescence phases with different exit rates: not reducible to one.
TWO_PHASES = PH(np.array([0.3, 0.7]), np.array([[-0.6, 0.4], [0.1, -0.5]]))


def queue_length_actions(mdp, policy: ThresholdPolicy) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The MDP's action in each state for a policy that sees only the queue length."""
    index = {mode: a for a, (mode, phase) in enumerate(mdp.actions) if phase == 0}
    return np.array([index[policy.robots_at_level[i]] for i in mdp.levels])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("obsolescence", "formulation"), [(2, "ordered"), (1, "ordered"), (1, "counts"),
                                                           (None, "ordered"), (None, "counts")])
def test_a_queue_length_policy_costs_the_same_in_the_mdp(seed: int, obsolescence: int | None,
                                                         formulation: str) -> None:
    """The MDP's generators, cost rates, N_s and T, for a policy that sees only i, give the cost J of
    eq. (2) that the block solver gives -- the response term included (an independent route: the MDP
    is built from the brute-force enumeration, or from its own count states)."""
    rng = np.random.default_rng(seed)
    model = random_model(rng, capacity=4, modes=(1, 2, 3), obsolescence_order=obsolescence)
    policy = random_policy(rng, (1, 2, 3), 4)
    exact = cost_of(solve(model, policy).measures, COSTS).total
    mdp = build_mdp(model, COSTS, formulation=formulation)
    assert mdp.exact_state
    assert mdp.evaluate(queue_length_actions(mdp, policy), COSTS.response) == pytest.approx(exact, rel=1e-10)


def test_equal_exit_rates_reduce_to_one_phase() -> None:
    """The paper example's obsolescence law has exit rate 0.2 in both phases: the reduced model (one
    exponential phase) gives the same measures under a policy, and the bound's MDP is the small one."""
    model, costs = load_model_file(str(EXAMPLE))
    reduced = _reduced(model)
    assert reduced.obsolescence is not None and reduced.obsolescence.order == 1
    policy = ThresholdPolicy((3, 3, 3, 1, 1, 1))
    assert cost_of(solve(reduced, policy).measures, costs).total == pytest.approx(
        cost_of(solve(model, policy).measures, costs).total, rel=1e-10)
    assert ordered_states(model) == 126 and count_states(reduced) == 22
    assert _reduced(dataclasses.replace(model, obsolescence=TWO_PHASES)).obsolescence is TWO_PHASES


def test_paper_example_bound() -> None:
    """On paper 000's example the bound lies below the threshold optimum 63.54 (the gap is reported by
    ``robotctl optimise --certify``); the bracket closed; the linear part's optimal policy uses the
    arrival phase (which a queue-length policy cannot see), which is where the gap comes from."""
    model, costs = load_model_file(str(EXAMPLE))
    best = optimise(model, costs).best.cost.total
    bound = mdp_lower_bound(model, costs)
    assert bound.success and bound.exact_state and bound.response == "exact"
    assert bound.value <= bound.upper <= bound.value * (1 + 1e-4)
    assert bound.value < best
    assert 0 < bound.gap_percent(best) == pytest.approx(100 * (best - bound.value) / bound.value)
    mdp = build_mdp(model, costs)
    empty = mdp.levels == 0
    assert len(set(bound.policy[empty])) > 1  # the mode at an empty queue depends on the arrival phase


def test_the_bound_is_exact_when_the_queue_length_is_the_whole_state() -> None:
    """Poisson robots, exponential service, no obsolescence: the MDP's state is the queue length, so its
    optimum is a queue-length policy; here a non-increasing one, whose exact cost (block solver) and the
    threshold optimum both equal the bound."""
    model, costs = load_model_file(str(FIGURE_2))
    bound = mdp_lower_bound(model, costs)
    assert list(build_mdp(model, costs).levels) == list(range(model.capacity + 1))  # one state per level
    policy = ThresholdPolicy(tuple(int(m) for m in bound.policy))
    exact = cost_of(solve(model, policy).measures, costs).total
    assert exact == pytest.approx(bound.value, rel=1e-9)
    assert optimise(model, costs).best.cost.total == pytest.approx(bound.value, rel=1e-9)


@settings(max_examples=12, deadline=None)
# found by hypothesis: only a response cost, so the bisection over the service rate reached float resolution
@example(seed=0, K=2, obsolescence=None, weights=(0.0, 0.0, 0.0625, 0.0, 0.0))
@given(st.integers(0, 100_000), st.integers(2, 4), st.sampled_from([None, 1, 2]),
       st.tuples(*[st.floats(0.0, 10.0)] * 5))
def test_the_bound_is_never_above_the_exhaustive_threshold_optimum(seed: int, K: int, obsolescence: int | None,
                                                                    weights: tuple[float, ...]) -> None:
    """On random small models and costs, the bound is at most the exhaustive threshold optimum over every
    subset of modes, and at most the cost of a random policy that sees the whole state."""
    rng = np.random.default_rng(seed)
    model = random_model(rng, capacity=K, modes=(1, 2, 3), obsolescence_order=obsolescence, max_batch=2)
    costs = Costs(*weights)
    best = optimise(model, costs, method="exhaustive").best.cost.total
    bound = mdp_lower_bound(model, costs)
    slack = 1e-9 * max(1.0, abs(best))
    assert bound.value <= best + slack
    mdp = build_mdp(model, costs)
    actions = rng.integers(0, len(mdp.actions), size=mdp.n_states)
    assert bound.value <= mdp.evaluate(actions, costs.response if mdp.served_present is not None else 0.0) + slack


@pytest.mark.parametrize("seed", range(3))
def test_the_counts_relaxation_is_weaker_but_valid(seed: int) -> None:
    """With two obsolescence phases that do not reduce, the counts state forgets the order of the
    waiting pages (a relaxation, response bounded by the service time): its bound is below the ordered
    (exact) one, which is below the threshold optimum."""
    rng = np.random.default_rng(seed)
    model = dataclasses.replace(random_model(rng, capacity=4, modes=(1, 2, 3), max_batch=2),
                                obsolescence=TWO_PHASES)
    best = optimise(model, COSTS).best.cost.total
    ordered = mdp_lower_bound(model, COSTS, formulation="ordered")
    counts = mdp_lower_bound(model, COSTS, formulation="counts")
    assert not counts.exact_state and counts.response == "service-time"
    assert ordered.exact_state and ordered.response == "exact"
    assert counts.value <= ordered.value + 1e-9 <= best + 2e-9
    assert mdp_lower_bound(model, COSTS).formulation == "ordered"  # auto: small enough
    assert mdp_lower_bound(model, COSTS, max_ordered_states=10).formulation == "counts"


def test_policy_iteration_and_value_iteration_agree() -> None:
    """Two routes to the linear part's optimum: Howard's policy iteration, and relative value iteration
    on the uniformised chain; both certificates delta(h) are lower bounds within 1e-9 of the optimum."""
    model = random_model(np.random.default_rng(5), capacity=4, modes=(1, 2, 3))
    mdp = build_mdp(model, COSTS, formulation="ordered")
    solver = _Solver(mdp)
    pi = solver.solve(mdp.cost)
    h = solver.value_iteration(mdp.cost, tol=1e-12)
    delta_vi = float(solver.values(mdp.cost, h).min())
    assert pi.converged and pi.delta <= pi.g + 1e-12
    assert delta_vi == pytest.approx(pi.g, rel=1e-9) and pi.delta == pytest.approx(pi.g, rel=1e-12)
    assert delta_vi <= pi.g + 1e-12


def test_response_term_bracket_closes() -> None:
    """With a response cost the branch and bound over the service rate closes its bracket, and the
    bound improves on the crude one (linear part plus a b_1)."""
    model = dataclasses.replace(random_model(np.random.default_rng(11), capacity=4, modes=(1, 2, 3)),
                                obsolescence=TWO_PHASES)
    heavy = dataclasses.replace(COSTS, response=20.0)
    bound = mdp_lower_bound(model, heavy, formulation="ordered")
    linear = mdp_lower_bound(model, dataclasses.replace(heavy, response=0.0), formulation="ordered")
    assert bound.success and bound.solves > 0
    assert bound.upper - bound.value <= 1e-4 * bound.upper
    assert bound.value > linear.value + heavy.response * model.service.mean + 1e-6


def test_bad_arguments() -> None:
    model = random_model(np.random.default_rng(1))
    with pytest.raises(InputError, match="formulation"):
        mdp_lower_bound(model, COSTS, formulation="exact")
    with pytest.raises(InputError, match="tol"):
        mdp_lower_bound(model, COSTS, tol=0.0)
    assert math.isfinite(mdp_lower_bound(model, Costs()).value)
