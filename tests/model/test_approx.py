"""The ordered-head ladder and its error bar (model._approx) against exact references: the exact chain
where it can be solved, and the product form (Poisson modes, exponential service) at K = 50."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robotctl.model import (
    BMAP,
    PH,
    Costs,
    InputError,
    ModeArrivals,
    QueueLengthPolicy,
    QueueModel,
    cost_of,
    random_model,
    random_ph,
    random_policy,
    solve,
    solve_product_form,
)
from robotctl.model._approx import MEASURE_FIELDS, ApproxStatus, solve_approx, widening

COSTS = Costs(loss=3, obsolescence=4, response=1, robot=2, starvation=20)


def test_small_exact_chains_are_solved_exactly() -> None:
    model = random_model(np.random.default_rng(1), capacity=5)
    policy = random_policy(np.random.default_rng(2), model.modes, 5)
    out = solve_approx(model, policy, COSTS)
    assert out.status is ApproxStatus.EXACT and out.exact and out.method == "exact" and out.error_bound == 0.0
    assert out.cost == pytest.approx(cost_of(solve(model, policy).measures, COSTS).total, rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ladder_error_bar_covers_the_exact_chain(seed: int) -> None:
    """K = 9 with two-phase obsolescence; the exact chain (2,046 to 4,094 states) is the reference."""
    rng = np.random.default_rng(seed)
    model = random_model(rng, capacity=9, obsolescence_order=2, max_batch=2, modes=(1, 2, 3), load=1.4)
    policy = random_policy(rng, model.modes, 9)
    exact = cost_of(solve(model, policy).measures, COSTS).total
    out = solve_approx(model, policy, COSTS, rtol=1e-4, exact_states=0)
    assert out.success and not out.exact and out.status is ApproxStatus.CONVERGED
    assert out.h is not None and out.method == f"ordered-head h={out.h}"
    assert out.cost is not None and abs(out.cost - exact) <= out.error_bound
    assert out.error_bound <= 1e-4 * abs(out.cost) * 10  # the bar is of the size of the tolerance


@pytest.mark.parametrize(("law", "K"), [
    (PH(np.array([0.3, 0.7]), np.array([[-0.9, 0.6], [0.4, -0.5]])), 50),   # mixing phases: fast decay
    (PH.hyperexponential((0.5, 0.5), (0.1, 1.5)), 24),                      # no mixing: slow decay
])
def test_ladder_error_bar_covers_the_product_form(law: PH, K: int) -> None:
    """Poisson modes and exponential service: the product form is exact at any K."""
    arrivals = ModeArrivals.per_mode({m: BMAP.poisson(0.35 * m) for m in range(1, 9)})
    model = QueueModel(K, arrivals, PH.exponential(1.5), law)
    policy = QueueLengthPolicy(tuple(max(1, 8 - i // 3) for i in range(K + 1)))
    exact = solve_product_form(model, policy).measures
    out = solve_approx(model, policy, COSTS, rtol=1e-3)
    assert out.success and out.status is ApproxStatus.CONVERGED
    assert out.cost is not None and abs(out.cost - cost_of(exact, COSTS).total) <= out.error_bound
    for name in MEASURE_FIELDS:
        assert abs(getattr(out.measures, name) - getattr(exact, name)) <= out.measure_errors[name] + 1e-12, name


def test_limited_ladders_say_so() -> None:
    rng = np.random.default_rng(4)
    model = random_model(rng, capacity=12, obsolescence_order=2, max_batch=1, modes=(1, 2))
    policy = random_policy(rng, model.modes, 12)
    out = solve_approx(model, policy, COSTS, rtol=1e-12, exact_states=0, max_states=2500)
    assert out.status is ApproxStatus.LIMITED and out.success and not out.exact
    assert "tolerance not reached" in out.message and math.isfinite(out.error_bound)
    assert out.n_states <= 2500
    with pytest.raises(InputError, match="rtol"):
        solve_approx(model, policy, COSTS, rtol=0.0)


def test_widening_of_slowly_converging_ladders() -> None:
    assert widening([0.1]) == 1.0
    assert widening([0.1, 0.02]) == 1.0  # q = 0.2: the last difference covers twice the geometric rest
    assert widening([0.1, 0.05]) == pytest.approx(2.0)  # q = 0.5: the rest is one more difference, doubled
    assert widening([0.1, 0.08]) == pytest.approx(8.0)
    assert widening([0.1, 0.2]) == pytest.approx(18.0)  # not shrinking: q capped at 0.9
    assert random_ph(np.random.default_rng(0), 2).order == 2
