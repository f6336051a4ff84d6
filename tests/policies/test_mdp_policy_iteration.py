"""Issue 26: paper 001's MDP by policy iteration, checked against value iteration (its policy and its
bracket), against the policy's own chain (policy_cost, a second solve of another system: the stationary
distribution rather than the average-cost equations) and against the model core (paper 000's solver on
the static fleet)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotctl.model import InputError, ThresholdPolicy, cost_of, solve
from robotctl.policies import DynamicPolicy, RobotsProblem, solve_dynamic
from robotctl.policies._mdp import evaluate_policy, policy_cost, policy_iteration, relative_value_iteration

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_mdp import TABLE_1, dynamic_gamma  # paper 001's Table 1, as test_mdp reads it

#: the solvers' tolerance on the bracket (TOLERANCE) with room for the chain's own rounding
CLOSE = 1e-9


def _same_optimum(pi_opt, vi_opt) -> None:  # type: ignore[no-untyped-def]
    """Identical tables, or (on a tie between actions) a policy of equal cost; equal brackets to the
    tolerance; each cost inside both brackets."""
    if not (np.array_equal(pi_opt.policy.activate, vi_opt.policy.activate)
            and np.array_equal(pi_opt.policy.keep, vi_opt.policy.keep)):
        assert pi_opt.cost == pytest.approx(vi_opt.cost, rel=CLOSE, abs=1e-15)
    for opt in (pi_opt, vi_opt):
        lo, hi = opt.value_bounds
        slack = CLOSE * max(abs(hi), 1e-12)
        assert lo - slack <= pi_opt.cost <= hi + slack
        assert lo - slack <= vi_opt.cost <= hi + slack


@pytest.mark.parametrize("row", TABLE_1, ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}")
def test_policy_iteration_equals_value_iteration_on_table_1(row: tuple) -> None:
    """Every row of paper 001's Table 1 (N up to 114, K up to 15): the same optimum both ways, in far
    fewer Bellman steps; and the gain of the returned policy from its own average-cost equations
    (evaluate_policy) equals its exact cost from its stationary distribution (policy_cost)."""
    lam, K, gamma, _, n_s, *_ = row
    problem = RobotsProblem.paper(n_s, K, lam, 1.0, dynamic_gamma(K, gamma))
    by_pi = solve_dynamic(problem)
    by_vi = solve_dynamic(problem, method="value-iteration")
    assert by_pi.success and by_vi.success
    assert (by_pi.method, by_vi.method, by_vi.evaluations) == ("policy-iteration", "value-iteration", 0)
    assert 1 <= by_pi.evaluations <= by_pi.iterations < by_vi.iterations
    assert by_pi.message == "optimal policy found"  # no fallback to value iteration
    _same_optimum(by_pi, by_vi)
    evaluated = evaluate_policy(problem, by_pi.policy.activate, by_pi.policy.keep)
    assert not isinstance(evaluated, str)
    assert evaluated[0] == pytest.approx(by_pi.cost, rel=CLOSE)


@pytest.mark.parametrize(("N", "K", "rmin", "robot_cost"), [(64, 50, 0, 0.0), (160, 20, 0, 0.0), (12, 8, 3, 0.02)])
def test_policy_iteration_equals_value_iteration_on_larger_and_general_problems(N: int, K: int, rmin: int,
                                                                              robot_cost: float) -> None:
    """bench/mdp.py's load (the fleet offers 1.6 mu) at larger N and K, and a problem with min_robots and
    a cost per active robot."""
    base = RobotsProblem.paper(N, K, 1.6 / N, 1.0, 1.0)
    problem = RobotsProblem(N, K, base.rates, 1.0, 1.0, robot_cost=robot_cost, min_robots=rmin)
    by_pi = solve_dynamic(problem)
    by_vi = solve_dynamic(problem, method="value-iteration")
    assert by_pi.success and by_vi.success
    assert by_pi.iterations < by_vi.iterations
    _same_optimum(by_pi, by_vi)


@pytest.mark.parametrize(("n", "K", "lam"), [(7, 5, 0.1), (20, 10, 0.05), (12, 3, 0.2)])
def test_evaluation_of_the_static_fleet_equals_the_model_core(n: int, K: int, lam: float) -> None:
    """The policy that keeps and wakes every robot, evaluated by the sparse solve, against paper 000's
    exact solver on the same queue (one Poisson mode of rate n lambda)."""
    problem = RobotsProblem.paper(n, K, lam, 1.0, 1.7)
    always = np.ones((K + 1, n + 1), dtype=bool)
    evaluated = evaluate_policy(problem, always, always)
    assert not isinstance(evaluated, str)
    sol = solve(problem.to_model(), ThresholdPolicy.static(n, K))
    assert evaluated[0] == pytest.approx(cost_of(sol.measures, problem.costs).total, rel=1e-10)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.floats(0.05, 1.0), st.floats(0.0, 3.0), st.integers(0, 2**32 - 1))
def test_evaluation_equals_the_chain_on_random_policies(N: int, K: int, lam: float, gamma: float, seed: int) -> None:
    """Random admissible tables: the gain from the average-cost equations equals the cost from the
    stationary distribution when the chain has one closed class; otherwise the evaluation says so (and
    the chain has several)."""
    problem = RobotsProblem(N, K, tuple(lam * r for r in range(N + 1)), 1.0, gamma, loss_cost=1.3, robot_cost=0.01)
    rng = np.random.default_rng(seed)
    activate = rng.random((K + 1, N + 1)) < 0.5
    activate[1, 0] = True  # (0, 0) absorbs: leave it by waking a robot
    keep = rng.random((K + 1, N + 1)) < 0.5
    chain = policy_cost(problem, DynamicPolicy(activate, keep))
    evaluated = evaluate_policy(problem, activate, keep)
    if isinstance(evaluated, str):
        assert "closed classes" in evaluated
        assert chain.closed_classes > 1
    else:
        assert chain.closed_classes == 1
        assert evaluated[0] == pytest.approx(chain.cost, rel=1e-9, abs=1e-13)


def test_a_multichain_policy_is_not_evaluated_and_value_iteration_takes_over() -> None:
    """A policy that never changes the robots (but at (1, 0)) has one closed class per r >= 1: the sparse
    evaluation refuses it. And when policy iteration stops early (one evaluation allowed), value
    iteration continues from its values, says so, and reaches value iteration's own optimum."""
    problem = RobotsProblem.paper(3, 4, 0.3, 1.0, 1.0)
    activate = np.zeros((5, 4), dtype=bool)
    activate[1, 0] = True
    keep = np.ones((5, 4), dtype=bool)
    assert evaluate_policy(problem, activate, keep) == "the policy's chain has 3 closed classes"
    vi_policy, _, vi_steps, vi_ok = relative_value_iteration(problem)
    policy, bracket, steps, ok, evaluations, note = policy_iteration(problem, max_evaluations=1)
    assert ok and vi_ok and evaluations == 1 and steps < vi_steps
    assert note.startswith("policy iteration did not converge in 1 evaluations; value iteration took over")
    assert policy_cost(problem, policy).cost == pytest.approx(policy_cost(problem, vi_policy).cost, rel=CLOSE)
    assert bracket[1] - bracket[0] <= 1e-10 * abs(bracket[1])


def test_method_is_checked() -> None:
    with pytest.raises(InputError, match="method"):
        solve_dynamic(RobotsProblem.paper(3, 4, 0.3, 1.0, 1.0), method="newton")
