"""The product form for Poisson modes and exponential service (model._fifo) against the exact chain."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robotctl.model import (
    BMAP,
    PH,
    InputError,
    ModeArrivals,
    QueueLengthPolicy,
    QueueModel,
    random_model,
    random_ph,
    solve,
    solve_product_form,
)

FIELDS = ("arrival_rate", "p_loss", "p_obsolete", "p_success", "p_starvation", "mean_active_robots",
          "mean_queue_length", "mean_response_served", "mean_sojourn_obsolete", "mean_sojourn")


def poisson_model(rng: np.random.Generator, K: int, R: int | None, modes: tuple[int, ...] = (1, 2, 3)) -> QueueModel:
    arrivals = ModeArrivals.per_mode({m: BMAP.poisson(float(rng.uniform(0.3, 1.5)) * m) for m in modes})
    obsolescence = None if R is None else random_ph(rng, R, mean=float(rng.uniform(1.0, 5.0)))
    return QueueModel(K, arrivals, PH.exponential(float(rng.uniform(0.8, 2.5))), obsolescence)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(1, 7), R=st.sampled_from([None, 1, 2, 3]))
def test_product_form_matches_the_exact_chain(seed: int, K: int, R: int | None) -> None:
    """Any patience law (random PH of order 1-3, or none), any queue-length policy (not only monotone)."""
    rng = np.random.default_rng(seed)
    model = poisson_model(rng, K, R)
    policy = QueueLengthPolicy(tuple(int(x) for x in rng.choice(model.modes, size=K + 1)))
    pf = solve_product_form(model, policy)
    exact = solve(model, policy)
    assert pf.success and pf.method == "product-form" and pf.residual < 1e-10
    for name in FIELDS:
        x, y = getattr(pf.measures, name), getattr(exact.measures, name)
        assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-13), f"{name}: {x!r} != {y!r}"


def test_large_capacity() -> None:
    """K = 200 with 64 modes: the level probabilities are a distribution and pages are conserved."""
    arrivals = ModeArrivals.per_mode({m: BMAP.poisson(0.2 * m) for m in range(1, 65)})
    law = PH(np.array([0.3, 0.7]), np.array([[-0.6, 0.4], [0.1, -0.2]]))
    model = QueueModel(200, arrivals, PH.exponential(6.0), law)
    policy = QueueLengthPolicy(tuple(max(1, 64 - i // 3) for i in range(201)))
    pf = solve_product_form(model, policy)
    m = pf.measures
    assert pf.success and pf.residual < 1e-12
    assert sum(m.queue_length_distribution) == pytest.approx(1.0, abs=1e-12)
    assert min(m.queue_length_distribution) >= 0.0
    assert m.p_loss + m.p_obsolete + m.p_success == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"max_batch": 2, "arrival_order": 1, "service_order": 1}, "batches up to 2"),
    ({"max_batch": 1, "arrival_order": 2, "service_order": 1}, "2 arrival phase"),
    ({"max_batch": 1, "arrival_order": 1, "service_order": 2}, "exponential service"),
])
def test_other_models_are_refused_with_the_reason(kwargs: dict, needle: str) -> None:
    model = random_model(np.random.default_rng(5), capacity=4, **kwargs)
    with pytest.raises(InputError, match=needle):
        solve_product_form(model, QueueLengthPolicy((1, 1, 1, 1, 1)))
