"""Every measure of the block, QBD and sparse solvers against the independent brute-force route
(explicit enumeration, hand-written transitions, Little's law for sojourn means): 1e-9 relative."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robotctl.model import Admission, Measures, Solution, random_model, random_policy, solve, solve_bruteforce

SCALAR_FIELDS = ("arrival_rate", "p_loss", "p_obsolete", "p_success", "p_starvation", "mean_active_robots",
                 "mean_queue_length", "mean_response_served", "mean_sojourn_obsolete", "mean_sojourn")
RTOL = 1e-9
ATOL = 1e-12


def assert_same_measures(a: Measures, b: Measures) -> None:
    for name in SCALAR_FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert math.isclose(x, y, rel_tol=RTOL, abs_tol=ATOL), f"{name}: {x!r} != {y!r}"
    np.testing.assert_allclose(a.queue_length_distribution, b.queue_length_distribution, rtol=RTOL, atol=ATOL)
    assert [m for m, _ in a.active_robots_distribution] == [m for m, _ in b.active_robots_distribution]
    np.testing.assert_allclose([p for _, p in a.active_robots_distribution],
                               [p for _, p in b.active_robots_distribution], rtol=RTOL, atol=ATOL)


def assert_same_vectors(a: Solution, b: Solution) -> None:
    assert len(a.level_vectors) == len(b.level_vectors)
    for x, y in zip(a.level_vectors, b.level_vectors):
        np.testing.assert_allclose(x, y, rtol=1e-8, atol=1e-13)


models = st.fixed_dictionaries({
    "seed": st.integers(0, 2**32 - 1),
    "capacity": st.integers(1, 5),
    "arrival_order": st.integers(1, 2),
    "service_order": st.integers(1, 2),
    "obsolescence_order": st.sampled_from([None, 1, 2]),
    "max_batch": st.integers(1, 4),
    "modes": st.sampled_from([(1,), (1, 2), (1, 3), (1, 2, 3), (2, 4)]),
    "load": st.floats(0.3, 2.0),
    "admission": st.sampled_from(list(Admission)),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models)
def test_block_solver_agrees_with_bruteforce(params: dict) -> None:
    rng = np.random.default_rng(params.pop("seed"))
    model = random_model(rng, **params)
    policy = random_policy(rng, model.modes, model.capacity)
    exact = solve(model, policy)
    brute = solve_bruteforce(model, policy)
    assert exact.success, exact.message
    assert exact.residual < 1e-10
    assert_same_measures(exact.measures, brute.measures)
    assert_same_vectors(exact, brute)


@settings(max_examples=25, deadline=None)
@given(models)
def test_all_exact_methods_agree(params: dict) -> None:
    rng = np.random.default_rng(params.pop("seed"))
    model = random_model(rng, **params)
    policy = random_policy(rng, model.modes, model.capacity)
    block = solve(model, policy, method="block")
    sparse = solve(model, policy, method="sparse")
    assert block.method == "block" and sparse.method == "sparse"
    assert_same_measures(block.measures, sparse.measures)
    if params["max_batch"] == 1:
        qbd = solve(model, policy, method="qbd")
        assert qbd.method == "qbd"
        assert_same_measures(qbd.measures, block.measures)


def test_auto_picks_qbd_for_single_arrivals() -> None:
    model = random_model(np.random.default_rng(3), max_batch=1, capacity=6)
    policy = random_policy(np.random.default_rng(4), model.modes, 6)
    sol = solve(model, policy)
    assert sol.method == "qbd"
    assert_same_measures(sol.measures, solve_bruteforce(model, policy).measures)


def test_qbd_refuses_batch_arrivals() -> None:
    model = random_model(np.random.default_rng(5), max_batch=3)
    policy = random_policy(np.random.default_rng(6), model.modes, model.capacity)
    with pytest.raises(ValueError, match="method"):
        solve(model, policy, method="qbd")


@pytest.mark.parametrize("capacity", [6, 7])
def test_larger_state_spaces_agree(capacity: int) -> None:
    """Two-phase obsolescence: 2^K-sized levels, where the dense/sparse switch matters."""
    rng = np.random.default_rng(capacity)
    model = random_model(rng, capacity=capacity, modes=(1, 2), max_batch=3)
    policy = random_policy(rng, model.modes, capacity)
    brute = solve_bruteforce(model, policy)
    for method in ("block", "sparse"):
        assert_same_measures(solve(model, policy, method=method).measures, brute.measures)


def test_probabilities_are_consistent() -> None:
    model = random_model(np.random.default_rng(11), capacity=5)
    sol = solve(model, random_policy(np.random.default_rng(12), model.modes, 5))
    m = sol.measures
    assert m.p_loss + m.p_obsolete + m.p_success == pytest.approx(1.0, abs=1e-12)
    assert sum(m.queue_length_distribution) == pytest.approx(1.0, abs=1e-12)
    assert all(min(v) >= -1e-15 for v in sol.level_vectors)
    assert m.mean_sojourn == pytest.approx(m.mean_response_served * m.p_success
                                           + m.mean_sojourn_obsolete * m.p_obsolete)
