"""Paper 001's MDP: its Section 4 reproduced (Figures 2-4, Tables 1 and 2), the static problem against
Proposition 3 and the model core, the exact policy cost against the simulator, and the value
iteration's bracket."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from robotctl.model import InputError, ThresholdPolicy, cost_of, simulate, solve
from robotctl.policies import (
    DynamicController,
    DynamicPolicy,
    RobotsProblem,
    mdp_lower_bound,
    solve_dynamic,
    static_cost,
    static_fleet,
    unrestricted_dynamic,
)
from robotctl.policies._mdp import _bellman, _feasible, policy_cost

#: Half a unit of the fifth decimal: what the paper's five-decimal costs carry.
PRINTED = 5e-6 * (1 + 1e-9)

# Table 1 of paper 001 (mu = 1): lambda, K, gamma, C_s, N_s, C_d, N_min, N-bar.
TABLE_1 = [
    (0.01, 5, 0.4, 0.17541, 73, 0.16804, 57, 70.3),
    (0.01, 5, 1.4, 0.40000, 100, 0.38336, 86, 95.1),
    (0.01, 5, 2.4, 0.53834, 114, 0.51746, 101, 108.4),
    (0.01, 10, 0.4, 0.10207, 86, 0.09062, 60, 82.6),
    (0.01, 10, 1.2, 0.20000, 100, 0.17534, 77, 94.1),
    (0.01, 10, 2.4, 0.28347, 110, 0.24798, 88, 102.3),
    (0.01, 15, 0.4, 0.07177, 91, 0.05891, 58, 87.7),
    (0.01, 15, 1.13, 0.13313, 100, 0.10720, 70, 94.5),
    (0.01, 15, 2.4, 0.19192, 107, 0.15342, 78, 99.7),
    (0.05, 5, 0.4, 0.17578, 15, 0.15127, 7, 13.8),
    (0.05, 5, 1.4, 0.40000, 20, 0.34733, 12, 17.7),
    (0.05, 5, 2.4, 0.53841, 23, 0.46583, 15, 20.2),
    (0.05, 10, 0.4, 0.10220, 17, 0.08308, 5, 16.2),
    (0.05, 10, 1.2, 0.20000, 20, 0.14955, 8, 18.2),
    (0.05, 10, 2.4, 0.28347, 22, 0.20541, 10, 19.4),
    (0.05, 15, 0.4, 0.07184, 18, 0.05514, 4, 17.4),
    (0.05, 15, 1.13, 0.13313, 20, 0.09117, 6, 18.7),
    (0.05, 15, 2.4, 0.19372, 21, 0.13895, 8, 19.3),
    (0.1, 5, 0.4, 0.17600, 7, 0.15239, 1, 6.5),
    (0.1, 5, 1.4, 0.40000, 10, 0.32198, 4, 8.6),
    (0.1, 5, 2.4, 0.54067, 11, 0.44989, 5, 9.3),
    (0.1, 10, 0.4, 0.10403, 9, 0.06838, 0, 8.4),
    (0.1, 10, 1.2, 0.20000, 10, 0.13854, 2, 9.0),
    (0.1, 10, 2.4, 0.28347, 11, 0.18585, 3, 9.6),
    (0.1, 15, 0.4, 0.07184, 9, 0.05326, 0, 8.7),
    (0.1, 15, 1.13, 0.13313, 10, 0.08538, 1, 9.3),
    (0.1, 15, 2.4, 0.19458, 11, 0.09606, 1, 9.7),
]

# Table 2 (robots unlimited): lambda, K, gamma, C_d, N_min, N-bar, N_max.
TABLE_2 = [
    (0.01, 5, 0.4, 0.16595, 58, 74.8, 82),
    (0.01, 5, 1.4, 0.37886, 88, 99.9, 115),
    (0.01, 5, 2.4, 0.51179, 103, 113.0, 133),
    (0.01, 10, 0.4, 0.08124, 62, 89.3, 105),
    (0.01, 10, 1.2, 0.15876, 78, 99.6, 123),
    (0.01, 10, 2.4, 0.22777, 89, 107.1, 137),
    (0.01, 15, 0.4, 0.04236, 59, 94.9, 118),
    (0.01, 15, 1.13, 0.07812, 71, 99.8, 131),
    (0.01, 15, 2.4, 0.11493, 79, 103.6, 143),
    (0.05, 5, 0.4, 0.13770, 7, 15.9, 20),
    (0.05, 5, 1.4, 0.31712, 13, 19.8, 27),
    (0.05, 5, 2.4, 0.43292, 16, 21.9, 32),
    (0.05, 10, 0.4, 0.04128, 5, 19.0, 29),
    (0.05, 10, 1.2, 0.12020, 8, 19.9, 33),
    (0.05, 10, 2.4, 0.20541, 10, 20.6, 36),
    (0.05, 15, 0.4, 0.00969, 2, 19.8, 35),
    (0.05, 15, 1.13, 0.01818, 4, 20.0, 38),
    (0.05, 15, 2.4, 0.02782, 6, 20.1, 41),
    (0.1, 5, 0.4, 0.11097, 2, 8.2, 12),
    (0.1, 5, 1.4, 0.25924, 4, 9.8, 16),
    (0.1, 5, 2.4, 0.35805, 6, 10.7, 18),
    (0.1, 10, 0.4, 0.01937, 0, 9.7, 18),
    (0.1, 10, 1.2, 0.03887, 1, 9.9, 20),
    (0.1, 10, 2.4, 0.05894, 2, 10.1, 22),
    (0.1, 15, 0.4, 0.00188, 0, 10.0, 24),
    (0.1, 15, 1.13, 0.00368, 0, 10.0, 25),
    (0.1, 15, 2.4, 0.00585, 0, 10.0, 27),
]

#: Table 1 rows whose printed C_d is the paper's value-iteration estimate, not the optimum (see
#: test_table_1_dynamic), with the estimate of the paper's own procedure (paper_rvi) just above it.
ITERATION_ESTIMATES = {(0.05, 15, 0.4), (0.05, 15, 1.13), (0.05, 15, 2.4), (0.1, 10, 0.4), (0.1, 10, 2.4),
                       (0.1, 15, 0.4), (0.1, 15, 1.13), (0.1, 15, 2.4)}
#: Table 2 rows whose printed C_d is another row's (see test_table_2_transcription_errors).
TRANSCRIBED = {(0.05, 10, 1.2), (0.05, 10, 2.4)}
#: The one N-bar of the tables that does not reproduce (see test_table_2).
NBAR_MISPRINT = (0.01, 5, 0.4)


def dynamic_gamma(K: int, gamma: float) -> float:
    """gamma(K) = (K + 2) / K where the paper prints 1.4, 1.2 and 1.13 (see test_table_1_dynamic)."""
    return (K + 2) / K if gamma in (1.4, 1.2, 1.13) and abs(gamma - (K + 2) / K) < 0.01 else gamma


def test_gamma_of_k_is_where_the_static_optimum_has_load_one() -> None:
    """Proposition 3's gamma(K): dC_s/drho = 0 at rho = 1 gives gamma(K) = mu (K + 2) / K -- 1.4, 1.2 and
    1.1333 for K = 5, 10, 15, the paper's 1.4, 1.2 and 1.13."""
    for K, printed in ((5, 1.4), (10, 1.2), (15, 1.13)):
        g = (K + 2) / K
        slope = (static_cost(1 + 1e-6, g, K)[0] - static_cost(1 - 1e-6, g, K)[0]) / 2e-6
        assert abs(slope) < 1e-6
        assert round(g, 2) == printed


@pytest.mark.parametrize(("gamma", "cost"), [(1.0, 0.20907), (1.4, 0.25924), (2.0, 0.32211)])
def test_figures_2_to_4(gamma: float, cost: float) -> None:
    """N = 16, K = 5, lambda = 0.1, mu = 1: the printed optimal costs; Figure 2's policy keeps 4 to 14
    robots active; each policy is a monotone switching curve on its recurrent states."""
    opt = solve_dynamic(RobotsProblem.paper(16, 5, 0.1, 1.0, gamma))
    assert opt.success
    assert abs(opt.cost - cost) <= PRINTED
    lo, hi = opt.value_bounds
    assert lo - 1e-9 <= opt.cost <= hi + 1e-9
    assert opt.policy.is_switching_curve(opt.recurrent)
    f0, f1 = opt.policy.switching_curves()
    assert all(a >= b for a, b in zip(f0[1:], f0[2:])) and all(a >= b for a, b in zip(f1, f1[1:]))
    if gamma == 1.0:
        assert opt.active_range == (4, 14)


@pytest.mark.parametrize("row", TABLE_1, ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}")
def test_table_1_static(row: tuple) -> None:
    """Every static cost C_s of eq. (9) and fleet N_s of Proposition 3, with the printed gamma.

    The gamma = 1.13 rows print 0.13313: eq. (9) at rho = 1 gives (1.13 + 1) / 16 = 0.133125, which
    the paper rounded half up."""
    lam, K, gamma, c_s, n_s, *_ = row
    fleet = static_fleet(K, lam, 1.0, gamma)
    assert fleet.robots == n_s
    assert abs(fleet.cost - c_s) <= PRINTED


@pytest.mark.parametrize("row", TABLE_1, ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}")
def test_table_1_dynamic(row: tuple) -> None:
    """The optimal cost C_d with N = N_s robots, the fewest robots N_min and the mean N-bar.

    Two findings explain every row that does not reproduce to the printed digit:

    1. The "gamma = 1.13" rows (K = 15) were solved with gamma(15) = 17/15 = 1.1333 (the value the
       paper names gamma(K), test_gamma_of_k_is_where_the_static_optimum_has_load_one), while their
       static column used the printed 1.13: with 1.13, C_d would be 0.10694, 0.09091 and 0.08511
       against the printed 0.10720, 0.09117 and 0.08538; with 17/15 the first matches and the other two
       fall under finding 2. Table 2's 1.13 rows match with 17/15 to the printed digit.
    2. In the rows of ITERATION_ESTIMATES (K = 10 and 15, where the value iteration converges slowest)
       the printed C_d exceeds the exact optimum by 1 to 4 units of the fifth decimal (0.13895 against
       0.138912, 0.09606 against 0.096023). It is the iteration's estimate of the optimal cost when the
       paper's stopping rule (relative change of h below 1e-5) fired, not the cost of the policy: our
       bracket closes to 1e-10 and the optimal policy's exact cost from its own chain equals the bracket.
       Running the paper's procedure (h_0 = 0, tau = 0.99999, reference state (1, 0, 0), its stopping
       rule; paper_rvi below) gives estimates between the exact optimum and a few units above the
       printed value: the printed numbers depend on the iteration count, which the issue exempts. The
       test checks exactly that: exact <= printed <= that estimate, to the printed digit.
    N_min and N-bar reproduce on every row.
    """
    lam, K, gamma, _, n_s, c_d, n_min, n_bar = row
    problem = RobotsProblem.paper(n_s, K, lam, 1.0, dynamic_gamma(K, gamma))
    opt = solve_dynamic(problem)
    assert opt.success
    assert opt.active_range[0] == n_min
    assert abs(opt.mean_active_robots - n_bar) <= 0.05 + 1e-9
    if (lam, K, gamma) in ITERATION_ESTIMATES:
        estimate = paper_rvi(problem)
        assert opt.cost < c_d - PRINTED
        assert c_d <= estimate + PRINTED
    else:
        assert abs(opt.cost - c_d) <= PRINTED


def paper_rvi(problem: RobotsProblem, ref: tuple[int, int, int] = (1, 0, 0)) -> float:
    """The paper's Proposition 2 as printed: h_0 = 0, tau = 0.99999, stopped when
    max |(h_{k+1} - h_k) / h_k| < 1e-5; returns its estimate T(h)(x_hat) of the optimal cost."""
    K, N, mu, nu = problem.capacity, problem.robots, problem.service_rate, problem.uniformisation_rate
    lam = np.array(problem.rates)
    ok = _feasible(K, N, problem.min_robots)
    cost = np.zeros((K + 1, N + 1, 3))
    cost[0] += problem.gamma
    cost[K, :, 1] += nu
    h = np.zeros_like(cost)
    for it in range(100_000):
        Th = _bellman(h, cost, lam, mu, nu, problem.min_robots)[0]
        new = 0.00001 * h + 0.99999 * (Th - Th[ref])
        new[~ok] = 0.0
        moved = ok & (h != 0)
        if it and np.max(np.abs((new - h)[moved] / h[moved])) < 1e-5:
            return float(Th[ref])
        h = new
    raise AssertionError("the paper's iteration did not stop")


@pytest.mark.parametrize("row", TABLE_2, ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}")
def test_table_2(row: tuple) -> None:
    """Robots unlimited: C_d, N_min, N-bar, and N_max, which the paper reads off the departure switching
    curve (its top, f_0(1): the most robots with which a completion still wakes one more) -- the
    largest count in a recurrent state is f_0(1) or up to 3 below it. The 1.13 rows use gamma(15) =
    17/15 (test_table_1_dynamic). TRANSCRIBED rows: test_table_2_transcription_errors.

    NBAR_MISPRINT: the row (0.01, 5, 0.4) prints N-bar = 74.8; its optimal policy has 74.55 whether N
    is the printed N_max = 82 (checked here) or any larger limit up to 200, from the exact chain and
    from the paper's own iteration (paper_rvi, from three reference states), while its C_d, N_min and
    N_max reproduce, as do the other 53 N-bar values of both tables. We read it as a misprint."""
    lam, K, gamma, c_d, n_min, n_bar, n_max = row
    opt = unrestricted_dynamic(K, lam, 1.0, dynamic_gamma(K, gamma))
    assert opt.success
    assert opt.active_range[0] == n_min
    if (lam, K, gamma) == NBAR_MISPRINT:
        at_n_max = solve_dynamic(RobotsProblem.paper(n_max, K, lam, 1.0, gamma))
        assert at_n_max.mean_active_robots == pytest.approx(opt.mean_active_robots, rel=1e-9)
    else:
        assert abs(opt.mean_active_robots - n_bar) <= 0.05 + 1e-9
    assert opt.policy.switching_curves()[0][1] == n_max
    assert n_max - 3 <= opt.active_range[1] <= n_max
    if (lam, K, gamma) not in TRANSCRIBED:
        assert abs(opt.cost - c_d) <= PRINTED


def test_table_2_transcription_errors() -> None:
    """Table 2's rows (0.05, 10, 1.2) and (0.05, 10, 2.4) print C_d = 0.12020 and 0.20541, and their
    relative improvements (66%, 38%) follow from those numbers; but their N_min, N-bar and N_max
    reproduce (test_table_2), and the optimal costs are 0.08156 and 0.12020. The printed column is
    shifted by one row: the 1.2 row shows the 2.4 row's optimum, and the 2.4 row repeats Table 1's
    optimum with N limited to N_s = 22 (0.20541), which cannot be the unlimited optimum since the
    unlimited policy uses up to 36 robots and costs strictly less."""
    low = unrestricted_dynamic(10, 0.05, 1.0, 1.2)
    high = unrestricted_dynamic(10, 0.05, 1.0, 2.4)
    limited = solve_dynamic(RobotsProblem.paper(22, 10, 0.05, 1.0, 2.4))
    assert abs(low.cost - 0.08156) <= PRINTED and abs(low.cost - 0.12020) > 0.01
    assert abs(high.cost - 0.12020) <= PRINTED
    assert abs(limited.cost - 0.20541) <= PRINTED
    assert high.cost < limited.cost - 0.05


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 20), st.floats(0.05, 3.0), st.floats(0.01, 0.5))
def test_static_fleet_is_proposition_3(K: int, gamma: float, lam: float) -> None:
    """The scan's N_s is one of the two integers around the continuous minimiser rho(gamma, K) of
    eq. (9) (Proposition 3), found here by scipy's bounded scalar minimisation; and gamma >= gamma(K)
    puts it at or above floor(mu / lambda), gamma <= gamma(K) at or below ceil(mu / lambda)."""
    fleet = static_fleet(K, lam, 1.0, gamma)
    res = minimize_scalar(lambda r: static_cost(r, gamma, K)[0], bounds=(1e-9, 20.0), method="bounded",
                          options={"xatol": 1e-12})
    around = {math.floor(res.x / lam), math.ceil(res.x / lam)}
    best = min(around, key=lambda n: static_cost(n * lam, gamma, K)[0])
    assert static_cost(fleet.robots * lam, gamma, K)[0] <= static_cost(best * lam, gamma, K)[0] + 1e-12
    assert fleet.robots in around or math.isclose(fleet.cost, static_cost(best * lam, gamma, K)[0], rel_tol=1e-9)
    g_K = (K + 2) / K
    if gamma > g_K + 1e-9:
        assert fleet.robots >= math.floor(1 / lam)
    if gamma < g_K - 1e-9:
        assert fleet.robots <= math.ceil(1 / lam)


@pytest.mark.parametrize(("n", "K", "lam"), [(7, 5, 0.1), (20, 10, 0.05), (12, 3, 0.2)])
def test_static_cost_against_the_model_core_and_the_chain(n: int, K: int, lam: float) -> None:
    """Eq. (9) three ways: the closed form, paper 000's exact solver on the same queue (one Poisson mode
    of rate n lambda), and the MDP's own chain under the policy that always keeps and wakes robots."""
    problem = RobotsProblem.paper(n, K, lam, 1.0, 1.7)
    closed, p0, loss = static_cost(n * lam, 1.7, K)
    sol = solve(problem.to_model(), ThresholdPolicy.static(n, K))
    assert sol.measures.p_starvation == pytest.approx(p0, rel=1e-10)
    assert sol.measures.arrival_rate * sol.measures.p_loss == pytest.approx(loss, rel=1e-10)
    assert cost_of(sol.measures, problem.costs).total == pytest.approx(closed, rel=1e-10)
    always = np.ones((K + 1, n + 1), dtype=bool)
    chain = policy_cost(problem, DynamicPolicy(always, always), start=(0, n))
    assert chain.cost == pytest.approx(closed, rel=1e-10)
    assert chain.mean_active == pytest.approx(n)


def test_simulated_policy_agrees_with_its_exact_cost() -> None:
    """Figure 2's policy drives the simulator (StateFeedback: keep or park at each delivery, wake at
    each completion); P(starvation), the mean number of active robots and the cost lie in their 99%
    intervals (Bonferroni over the three), the recurrent range 4..14 is what the run visits, and the best
    static fleet's cost lies far outside (the comparison has teeth)."""
    problem = RobotsProblem.paper(16, 5, 0.1, 1.0, 1.0)
    opt = solve_dynamic(problem)
    res = simulate(problem.to_model(), DynamicController.from_optimum(opt), np.random.default_rng(2024),
                   events=400_000, costs=problem.costs).at_level(1 - 0.01 / 3)
    assert res.p_starvation.contains(opt.p_starvation)
    assert res.mean_active_robots.contains(opt.mean_active_robots)
    assert res.cost is not None and res.cost.contains(opt.cost)
    visited = [m for m, e in res.active_robots_distribution if e.value > 0]
    assert (min(visited), max(visited)) == opt.active_range
    assert not res.cost.contains(opt.static.cost)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.floats(0.05, 1.0), st.floats(0.0, 3.0), st.integers(0, 2**32 - 1))
def test_no_policy_beats_the_bracket(N: int, K: int, lam: float, gamma: float, seed: int) -> None:
    """Odoni's lower end bounds every policy: random admissible tables, costed exactly from their
    chains, never fall below it; the optimal policy's exact cost lies inside the bracket."""
    problem = RobotsProblem.paper(N, K, lam, 1.0, gamma)
    opt = solve_dynamic(problem)
    lo, hi = opt.value_bounds
    assert lo - 1e-9 * max(1.0, abs(lo)) <= opt.cost <= hi + 1e-9 * max(1.0, abs(hi))
    rng = np.random.default_rng(seed)
    activate = rng.random((K + 1, N + 1)) < 0.5
    activate[1, 0] = True  # (0, 0) absorbs: leave it by waking a robot
    keep = rng.random((K + 1, N + 1)) < 0.5
    other = policy_cost(problem, DynamicPolicy(activate, keep))
    assert other.cost >= lo - 1e-9 * max(1.0, abs(lo))


@settings(max_examples=8, deadline=None)
@given(st.integers(2, 6), st.integers(2, 5), st.floats(0.1, 0.6), st.floats(0.2, 3.0))
def test_dynamic_policy_is_above_the_full_information_bound(N: int, K: int, lam: float, gamma: float) -> None:
    """Paper 001's policies are policies with memory of the queue of paper 000, so the certificate
    (robotctl.policies.mdp_lower_bound, which may switch any number of robots at once) bounds them:
    with at least one robot active (min_robots = 1, the model core has no mode without arrivals)."""
    problem = RobotsProblem(N, K, tuple(lam * r for r in range(N + 1)), 1.0, gamma, min_robots=1)
    opt = solve_dynamic(problem)
    bound = mdp_lower_bound(problem.to_model(), problem.costs)
    assert bound.value <= opt.cost + 1e-9 * opt.cost


def test_from_model_round_trip_and_errors() -> None:
    problem = RobotsProblem(4, 3, (0.0, 0.3, 0.5, 0.6, 0.65), 1.2, 2.0, robot_cost=0.01, min_robots=1)
    back = RobotsProblem.from_model(problem.to_model(), problem.costs)
    assert back == problem
    model = problem.to_model()
    with pytest.raises(InputError, match=r"costs\.response"):
        RobotsProblem.from_model(model, type(problem.costs)(loss=1, response=1))
    with pytest.raises(InputError, match="rates"):
        RobotsProblem(2, 3, (0.0, 0.1), 1.0, 1.0)
    with pytest.raises(InputError, match="min_robots"):
        RobotsProblem(2, 3, (0.0, 0.1, 0.2), 1.0, 1.0, min_robots=3)
    with pytest.raises(InputError, match="tau"):
        solve_dynamic(problem, tau=1.0)


def test_measures_of_the_optimum_agree_with_its_chain_and_the_simulator() -> None:
    """DynamicOptimum.measures() (what the agent publishes under policy.control: mdp): its cost, P(starvation),
    loss rate and N-bar equal the chain's own; the response time (Little's law on pi) and P_loss lie in the
    simulator's 99% intervals (Bonferroni over the two), with a robot cost and min_robots = 1 as the agent
    uses them."""
    base = RobotsProblem.paper(4, 5, 0.4, 1.0, 1.0)
    problem = RobotsProblem(4, 5, base.rates, 1.0, 1.0, 2.0, 0.05, 1)
    opt = solve_dynamic(problem)
    m = opt.measures()
    assert cost_of(m, problem.costs).total == pytest.approx(opt.cost, rel=1e-12)
    assert m.p_starvation == pytest.approx(opt.p_starvation, rel=1e-12)
    assert m.arrival_rate * m.p_loss == pytest.approx(opt.loss_rate, rel=1e-12)
    assert m.mean_active_robots == pytest.approx(opt.mean_active_robots, rel=1e-12)
    assert sum(m.queue_length_distribution) == pytest.approx(1.0)
    res = simulate(problem.to_model(), DynamicController.from_optimum(opt), np.random.default_rng(7),
                   events=200_000, costs=problem.costs).at_level(1 - 0.01 / 2)
    assert res.mean_response_served.contains(m.mean_response_served)
    assert res.p_loss.contains(m.p_loss)
