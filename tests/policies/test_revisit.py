"""Revisit scheduling (paper 002): exact costs against simulation, the lower bound against numerical
minimisation and against every policy, the randomised policy, general weights, and the fetch laws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import quad
from scipy.linalg import expm
from scipy.optimize import minimize

from robotctl.fitting._synthetic import sample_bmap
from robotctl.model import BMAP, PH, InputError
from robotctl.policies import (
    FetchKind,
    FetchLaw,
    FrequencyMethod,
    PlanStatus,
    cyclic_cost,
    fetch_law_from_dict,
    lower_bound_of,
    mmpp,
    optimal_frequencies,
    plan_revisits,
    randomised_policy,
    randomised_stale_fraction,
    simulate_staleness,
    stale_fraction_bound,
    template_gaps,
)

H2 = PH.hyperexponential([0.3, 0.7], [0.5, 4.0])  # mean 0.775 s, scv 2.6
BURSTY = BMAP.from_map([[-3.0, 0.5], [0.2, -0.4]], [[2.4, 0.1], [0.05, 0.15]])  # lag-1 correlation > 0


def laws() -> list[FetchLaw]:
    return [FetchLaw.exponential(2.0), FetchLaw.from_ph(H2), FetchLaw.constant(0.4),
            FetchLaw.from_samples([0.1, 0.2, 0.9, 0.35, 0.05])]


# -- fetch laws ------------------------------------------------------------------------------------
def test_laplace_of_ph_by_numerical_integration() -> None:
    law = FetchLaw.from_ph(H2)
    s0 = -H2.S.sum(axis=1)
    for mu in (0.1, 1.0, 7.0):
        density = lambda x: float(H2.beta @ expm(H2.S * x) @ s0)  # noqa: E731
        val, _ = quad(lambda x: math.exp(-mu * x) * density(x), 0, np.inf, limit=200)  # noqa: B023
        assert float(law.laplace([mu])[0]) == pytest.approx(val, rel=1e-8)


def test_laplace_of_constant_and_samples() -> None:
    assert float(FetchLaw.constant(0.5).laplace([2.0])[0]) == pytest.approx(math.exp(-1.0))
    x = np.array([0.1, 0.3, 2.0])
    assert float(FetchLaw.from_samples(x).laplace([1.5])[0]) == pytest.approx(np.mean(np.exp(-1.5 * x)))


def test_map_transform_against_simulated_sums() -> None:
    """E exp(-mu (tau_1 + ... + tau_n)) = q [(mu I - C)^{-1} D]^n e for stationary MAP intervals (99.7%
    batch-means intervals); the printed form without D, q [(mu I - C)^{-1}]^n e, falls outside them."""
    law = FetchLaw.from_map(BURSTY)
    assert law.correlated and BURSTY.lag1_correlation > 0.05
    rng = np.random.default_rng(2)
    tau, _ = sample_bmap(BURSTY, 400_000, rng)
    mu = 0.7
    for n in (1, 3, 8):
        windows = tau[: tau.size // n * n].reshape(-1, n).sum(axis=1)
        vals = np.exp(-mu * windows)
        batches = vals[: vals.size // 40 * 40].reshape(40, -1).mean(axis=1)
        half = 3.0 * batches.std(ddof=1) / math.sqrt(40)
        exact = float(law.laplace_sum(mu, [n])[0])
        assert abs(vals.mean() - exact) < half, (n, vals.mean(), exact, half)
        q = BURSTY.stationary @ BURSTY.D1
        q = q / q.sum()
        printed = q @ np.linalg.matrix_power(np.linalg.inv(mu * np.eye(2) - BURSTY.D0), n) @ np.ones(2)
        assert abs(printed - vals.mean()) > half
    # independence would give h^n, which the correlation breaks
    h = float(law.laplace([mu])[0])
    assert float(law.laplace_sum(mu, [8])[0]) > h**8 * 1.05


def test_mmpp_is_a_map_with_lambda_as_d() -> None:
    m = mmpp([[-0.1, 0.1], [0.2, -0.2]], [5.0, 0.5])
    assert np.allclose(m.D1, np.diag([5.0, 0.5])) and np.allclose(m.D0, [[-5.1, 0.1], [0.2, -0.7]])
    law = fetch_law_from_dict({"Q": [[-0.1, 0.1], [0.2, -0.2]], "rates": [5.0, 0.5]})
    assert law.kind is FetchKind.MAP and law.mean == pytest.approx(1 / m.rate)


@pytest.mark.parametrize(("doc", "kind", "mean"), [
    ({"rate": 5}, FetchKind.PH, 0.2), ({"mean": 0.3}, FetchKind.PH, 0.3), ({"constant": 0.2}, FetchKind.CONSTANT, 0.2),
    ({"samples": [0.1, 0.3]}, FetchKind.SAMPLES, 0.2),
    ({"beta": [0.3, 0.7], "S": [[-0.5, 0], [0, -4]]}, FetchKind.PH, 0.3 / 0.5 + 0.7 / 4),
    ({"D0": [[-2.0]], "D1": [[2.0]]}, FetchKind.MAP, 0.5),
])
def test_fetch_law_forms(doc: dict[str, object], kind: FetchKind, mean: float) -> None:
    law = fetch_law_from_dict(doc)
    assert law.kind is kind and law.mean == pytest.approx(mean)
    again = fetch_law_from_dict(law.to_dict())
    assert again.kind is kind and again.mean == pytest.approx(mean)


@pytest.mark.parametrize(("doc", "field"), [
    ({"rate": -1}, "fetch_time.rate"), ({"constant": 0}, "fetch_time.constant"),
    ({"samples": []}, "fetch_time.samples"), ({"samples": [1, -2]}, "fetch_time.samples"),
    ({"speed": 3}, "fetch_time"), ([1, 2], "fetch_time"), ({"D0": [[-1.0]], "D1": [[2.0]]}, "fetch_time"),
])
def test_fetch_law_errors_name_the_field(doc: object, field: str) -> None:
    with pytest.raises(InputError) as err:
        fetch_law_from_dict(doc)
    assert err.value.field.startswith(field)


# -- exact cost of a cyclic schedule ------------------------------------------------------------------
def test_gaps_of_a_template() -> None:
    pages, gaps = template_gaps([0, 1, 0, 2, 1], 3)
    got = sorted(zip(pages.tolist(), gaps.tolist()))
    assert got == [(0, 2), (0, 3), (1, 2), (1, 3), (2, 5)]


@pytest.mark.parametrize("law_name", ["exp", "h2", "constant", "map"])
def test_cyclic_cost_against_simulated_page_changes(law_name: str) -> None:
    """Lemma 3.1 with eq. (3) (and Lemma 5.2 for the MAP) against real Poisson change epochs."""
    rng = np.random.default_rng(21)
    mu = np.array([0.4, 1.0, 2.5, 0.15])
    weights = np.array([1.0, 0.5, 2.0, 3.0])
    template = np.array([2, 1, 2, 0, 2, 3, 1, 2, 0])
    cycles = 20_000
    n = template.size * cycles
    if law_name == "exp":
        law, x = FetchLaw.exponential(2.0), rng.exponential(0.5, n)
    elif law_name == "h2":
        law, x = FetchLaw.from_ph(H2), H2.sample(rng, n)
    elif law_name == "constant":
        law, x = FetchLaw.constant(0.4), np.full(n, 0.4)
    else:
        law = FetchLaw.from_map(BURSTY)
        x, _ = sample_bmap(BURSTY, n, rng)
    exact = cyclic_cost(template, mu, law, weights).cost
    sim = simulate_staleness(template, mu, x, rng, weights=weights, batches=40)
    assert sim.contains(exact), (law_name, exact, sim)
    if law_name == "map":  # the correlation matters: the i.i.d. marginal gives a different cost
        iid = cyclic_cost(template, mu, FetchLaw.from_ph(law.ph), weights).cost  # type: ignore[arg-type]
        assert not sim.contains(iid)


def test_unvisited_page_is_always_stale() -> None:
    cc = cyclic_cost([0, 1, 0], [1.0, 1.0, 0.5], FetchLaw.exponential(1.0))
    assert cc.stale_fraction[2] == 1.0 and cc.visits.tolist() == [2, 1, 0]


# -- the lower bound ----------------------------------------------------------------------------------
def _minimise_7(mu: np.ndarray, c: np.ndarray, law: FetchLaw) -> float:
    h = law.laplace(mu)
    x0 = np.full(mu.size, 1.0 / mu.size)
    res = minimize(lambda x: lower_bound_of(np.clip(x, 0, 1), mu, c, h, law.mean), x0, method="SLSQP",
                   bounds=[(0.0, 1.0)] * mu.size, constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1}],
                   options={"ftol": 1e-14, "maxiter": 500})
    return float(res.fun)


@pytest.mark.parametrize("law", laws(), ids=lambda law: law.kind.value)
def test_closed_form_bound_is_the_minimum_of_problem_7(law: FetchLaw) -> None:
    rng = np.random.default_rng(4)
    mu = rng.uniform(0.05, 3.0, 6)
    opt = optimal_frequencies(mu, law)
    assert opt.method is FrequencyMethod.CLOSED_FORM
    assert opt.cost == pytest.approx(_minimise_7(mu, mu, law), rel=1e-7)
    h = law.laplace(mu)
    assert opt.cost == pytest.approx(mu.sum() - 1 / law.mean + np.prod(h) / law.mean, rel=1e-12)  # eq. (6)


def test_lagrange_solution_is_the_minimum_for_general_weights() -> None:
    """Problem (7) with weights not proportional to mu: the Lagrange condition (8) solved through
    Lambert W against SLSQP; a low-weight page gets frequency zero, as the KKT condition says."""
    law = FetchLaw.from_ph(H2)
    rng = np.random.default_rng(8)
    for _ in range(5):
        mu = rng.uniform(0.1, 3.0, 5)
        c = rng.uniform(0.1, 5.0, 5)
        opt = optimal_frequencies(mu, law, c)
        assert opt.method is FrequencyMethod.LAGRANGE
        assert opt.cost == pytest.approx(_minimise_7(mu, c, law), rel=1e-6)
        assert opt.frequencies.sum() == pytest.approx(1.0)
    mu = np.array([1.0, 1.0, 1.0])
    opt = optimal_frequencies(mu, law, [1.0, 0.001, 1.0])
    assert opt.frequencies[1] == 0.0 and opt.multiplier is not None
    assert 0.001 / (1.0 * law.mean) <= opt.multiplier  # w_i <= lambda: the boundary of the KKT conditions
    assert opt.cost == pytest.approx(_minimise_7(mu, np.array([1.0, 0.001, 1.0]), law), rel=1e-7)


def test_lagrange_with_proportional_weights_reproduces_the_closed_form() -> None:
    law = FetchLaw.constant(0.3)
    mu = np.array([0.2, 1.0, 4.0])
    closed = optimal_frequencies(mu, law)
    perturbed = optimal_frequencies(mu, law, 3 * mu * (1 + np.array([0, 1e-10, 0])))
    assert perturbed.method is FrequencyMethod.LAGRANGE
    assert np.allclose(perturbed.frequencies, closed.frequencies, atol=1e-8)
    assert perturbed.cost / 3 == pytest.approx(closed.cost, rel=1e-8)
    # constant fetch times: frequencies proportional to mu (ln(1/h) = mu c)
    assert np.allclose(closed.frequencies, mu / mu.sum())


rates = st.lists(st.floats(0.02, 5.0), min_size=2, max_size=6)


@settings(max_examples=60, deadline=None)
@given(mu=rates, data=st.data())
def test_no_template_beats_the_lower_bound(mu: list[float], data: st.DataObject) -> None:
    """Theorem 3.3 page by page and C* overall, for random templates and laws."""
    law = data.draw(st.sampled_from(laws()))
    n = len(mu)
    template = data.draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=40))
    weights = data.draw(st.one_of(st.none(), st.lists(st.floats(0.01, 10.0), min_size=n, max_size=n)))
    cc = cyclic_cost(template, mu, law, weights)
    opt = optimal_frequencies(mu, law, weights)
    assert cc.cost >= opt.cost * (1 - 1e-9) - 1e-12
    f = cc.visits / cc.length
    bound = stale_fraction_bound(f, mu, law)
    assert np.all(cc.stale_fraction >= bound - 1e-9)


@settings(max_examples=80, deadline=None)
@given(mu=rates, data=st.data())
def test_randomised_cost_is_never_below_the_lower_bound(mu: list[float], data: st.DataObject) -> None:
    law = data.draw(st.sampled_from(laws()))
    weights = data.draw(st.one_of(st.none(), st.lists(st.floats(0.01, 10.0), min_size=len(mu), max_size=len(mu))))
    rnd = randomised_policy(mu, law, weights)
    opt = optimal_frequencies(mu, law, weights)
    assert rnd.cost >= opt.cost * (1 - 1e-9) - 1e-12
    f = data.draw(st.lists(st.floats(0.01, 1.0), min_size=len(mu), max_size=len(mu)))
    f = np.asarray(f) / np.sum(f)
    c = np.asarray(mu if weights is None else weights)
    assert float(c @ randomised_stale_fraction(f, mu, law)) >= opt.cost * (1 - 1e-9) - 1e-12


# -- the randomised policy ----------------------------------------------------------------------------
def test_theorem_4_1_frequencies_and_cost() -> None:
    law = FetchLaw.from_ph(H2)
    mu = np.array([0.3, 1.0, 2.0, 5.0])
    rnd = randomised_policy(mu, law)
    h = law.laplace(mu)
    a = 1 / h - 1
    assert np.allclose(rnd.frequencies, a / a.sum())
    eq11 = mu.sum() - (a.sum() / (1 + a.sum())) / law.mean
    assert rnd.cost == pytest.approx(eq11, rel=1e-12)

    def cost(x: np.ndarray) -> float:
        return float(mu @ randomised_stale_fraction(np.clip(x, 1e-12, 1), mu, law))

    res = minimize(cost, np.full(4, 0.25), method="SLSQP", bounds=[(1e-9, 1)] * 4,
                   constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1}], options={"ftol": 1e-14})
    assert rnd.cost == pytest.approx(res.fun, rel=1e-7)
    c = np.array([1.0, 4.0, 0.5, 2.0])
    general = randomised_policy(mu, law, c)
    res = minimize(lambda x: float(c @ randomised_stale_fraction(np.clip(x, 0, 1), mu, law)), np.full(4, 0.25),
                   method="SLSQP", bounds=[(0, 1)] * 4, constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1}],
                   options={"ftol": 1e-14})
    assert general.cost == pytest.approx(res.fun, rel=1e-6)


def test_randomised_cost_against_a_long_random_sequence() -> None:
    """Lemma 4.1 (and its MAP version) against the exact cyclic cost of one long i.i.d. draw."""
    rng = np.random.default_rng(5)
    mu = np.array([0.5, 1.5, 3.0])
    for law in (FetchLaw.from_ph(H2), FetchLaw.from_map(BURSTY)):
        rnd = randomised_policy(mu, law)
        seq = rng.choice(3, size=400_000, p=rnd.frequencies)
        assert cyclic_cost(seq, mu, law).cost == pytest.approx(rnd.cost, rel=3e-3)


# -- the plan -----------------------------------------------------------------------------------------
def test_plan_golden_and_weighted_and_random() -> None:
    law = FetchLaw.exponential(1.0)
    mu = [0.5, 1.0, 2.0]
    for policy in ("golden", "weighted"):
        plan = plan_revisits(mu, law, policy=policy)
        assert plan.success and plan.status is PlanStatus.OK and plan.template is not None
        assert plan.lower_bound is not None and plan.cost >= plan.lower_bound
        d = plan.to_dict()
        assert set(d) >= {"frequencies", "lower_bound", "template", "template_cost", "randomised"}
        assert min(d["template"]) == 1 and d["template_cost"] == pytest.approx(plan.cost)
    rnd = plan_revisits(mu, law, policy="random")
    assert rnd.template is None and rnd.to_dict()["template"] is None and rnd.cost == rnd.randomised.cost


def test_plan_rounds_when_the_template_is_too_short() -> None:
    mu = np.r_[np.full(5, 1.0), 1e-4]
    plan = plan_revisits(mu, FetchLaw.exponential(1.0), max_length=100)
    assert plan.status is PlanStatus.ROUNDED and "frequency error" in plan.message
    assert plan.template_cost is not None and plan.template_cost.visits.min() >= 1


def test_plan_with_a_map_has_no_paper_bound() -> None:
    plan = plan_revisits([0.5, 1.0], FetchLaw.from_map(BURSTY))
    assert plan.lower_bound is None and plan.template_cost is not None


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"change_rates": [1.0, 0.0]}, "change_rates[1]"), ({"change_rates": []}, "change_rates"),
    ({"change_rates": [1.0, 2.0], "weights": [1.0]}, "weights"),
    ({"change_rates": [1.0, 2.0], "weights": [1.0, -1.0]}, "weights[1]"),
    ({"change_rates": [1.0, 2.0], "policy": "greedy"}, "policy"),
    ({"change_rates": [1.0, 2.0, 3.0], "max_length": 2}, "max_length"),
])
def test_plan_errors_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as err:
        plan_revisits(law=FetchLaw.exponential(1.0), **kwargs)  # type: ignore[arg-type]
    assert err.value.field == field
