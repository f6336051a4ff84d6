"""Closed forms: M/M/1/K, and M/M/1/K with exponential impatience of waiting pages (a birth-death
chain), and the tagged-page identities of Section 5."""

from __future__ import annotations

import numpy as np
import pytest

from robotctl.model import BMAP, PH, ModeArrivals, QueueModel, ThresholdPolicy, solve
from robotctl.model._blocks import Blocks
from robotctl.model._sojourn import tagged_totals


def birth_death(lam: float, mu: float, theta: float, K: int) -> np.ndarray:
    """Stationary law of i -> i+1 at lam (i < K), i -> i-1 at mu + (i-1) theta."""
    p = [1.0]
    for i in range(1, K + 1):
        p.append(p[-1] * lam / (mu + (i - 1) * theta))
    q = np.array(p)
    return q / q.sum()


@pytest.mark.parametrize(("lam", "mu", "theta", "K"), [(0.7, 1.0, 0.0, 5), (1.5, 1.0, 0.0, 3), (2.0, 1.3, 0.4, 6),
                                                        (0.5, 2.0, 1.0, 1)])
def test_mm1k_with_impatience(lam: float, mu: float, theta: float, K: int) -> None:
    model = QueueModel(K, ModeArrivals.per_mode({1: BMAP.poisson(lam)}), PH.exponential(mu),
                       PH.exponential(theta) if theta > 0 else None)
    sol = solve(model, ThresholdPolicy.static(1, K))
    p = birth_death(lam, mu, theta, K)
    m = sol.measures
    np.testing.assert_allclose(m.queue_length_distribution, p, rtol=1e-12)
    assert m.arrival_rate == pytest.approx(lam)
    assert m.p_loss == pytest.approx(p[-1], rel=1e-12)  # PASTA
    assert m.p_starvation == pytest.approx(p[0], rel=1e-12)
    obs_rate = sum(p[i] * (i - 1) * theta for i in range(2, K + 1))
    assert m.p_obsolete == pytest.approx(obs_rate / lam, rel=1e-12, abs=1e-15)
    if theta == 0:
        # Little's law: every admitted page is served
        L = float(np.arange(K + 1) @ p)
        assert m.mean_response_served == pytest.approx(L / (lam * (1 - p[-1])), rel=1e-12)


def test_mm1k_served_response_by_hand() -> None:
    """With impatience, a page arriving to i pages has i pages ahead and is served if it reaches
    service before its own patience runs out: first-step analysis on the number ahead gives
    P(served) and E[T 1{served}] in closed form for exponential laws."""
    lam, mu, theta, K = 1.2, 1.0, 0.5, 4
    model = QueueModel(K, ModeArrivals.per_mode({1: BMAP.poisson(lam)}), PH.exponential(mu), PH.exponential(theta))
    p = birth_death(lam, mu, theta, K)
    # n = pages ahead of the tagged one (in service + waiting); tagged waits while n >= 1
    served = {0: 1.0}
    time_served = {0: 1.0 / mu}
    for n in range(1, K):
        out = mu + (n - 1) * theta + theta  # ahead leave (service or their impatience) or tagged expires
        served[n] = (mu + (n - 1) * theta) / out * served[n - 1]
        time_served[n] = served[n] / out + (mu + (n - 1) * theta) / out * time_served[n - 1]
    rate_served = sum(lam * p[i] * served[i] for i in range(K))
    v1 = sum(lam * p[i] * time_served[i] for i in range(K)) / rate_served
    assert solve(model, ThresholdPolicy.static(1, K)).measures.mean_response_served == pytest.approx(v1, rel=1e-12)


def test_tagged_chain_reproduces_the_stationary_rates() -> None:
    """Pages that the tagged chain says will be served / expire arrive at the stationary service and
    obsolescence rates (eqs. (14)-(15) against (17)-(18) at u = 0)."""
    rng = np.random.default_rng(2)
    from robotctl.model import random_model, random_policy

    model = random_model(rng, capacity=5, max_batch=4)
    policy = random_policy(rng, model.modes, 5)
    sol = solve(model, policy)
    t = tagged_totals(Blocks(model, policy), sol.level_vectors)
    m = sol.measures
    assert t.served_rate == pytest.approx(m.arrival_rate * m.p_success, rel=1e-10)
    assert t.obsolete_rate == pytest.approx(m.arrival_rate * m.p_obsolete, rel=1e-10)
