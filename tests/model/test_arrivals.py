"""The per-mode arrival constructions of paper 000, Section 2, checked against what each one means."""

from __future__ import annotations

import numpy as np
import pytest

from robotctl.model import BMAP, InputError, ModeArrivals, random_bmap


@pytest.fixture
def base() -> BMAP:
    return random_bmap(np.random.default_rng(1), order=2, max_batch=3, rate=2.0)


def test_linear_rule_scales_time(base: BMAP) -> None:
    arr = ModeArrivals.linear(base, [1, 2, 3])
    for r in (1, 2, 3):
        assert arr[r].rate == pytest.approx(r * base.rate, rel=1e-12)
        np.testing.assert_allclose(arr[r].batch_size_probs, base.batch_size_probs, rtol=1e-12)
        assert arr[r].lag1_correlation == pytest.approx(base.lag1_correlation, rel=1e-9, abs=1e-12)


def test_thinning_keeps_each_batch_with_q(base: BMAP) -> None:
    q = [0.25, 0.6, 1.0]
    arr = ModeArrivals.thinning(base, q)
    for l, ql in enumerate(q, start=1):
        assert arr[l].rate == pytest.approx(ql * base.rate, rel=1e-12)
        np.testing.assert_allclose(arr[l].generator, base.generator, atol=1e-12)  # same directing process
    with pytest.raises(InputError, match="q_N = 1"):
        ModeArrivals.thinning(base, [0.5, 0.4, 1.0])


def test_independent_robots_superpose(base: BMAP) -> None:
    other = random_bmap(np.random.default_rng(2), order=2, max_batch=2, rate=0.7)
    third = BMAP.poisson(0.4, (0.5, 0.5))
    arr = ModeArrivals.independent([base, other, third])
    rates = [base.rate, other.rate, third.rate]
    assert arr.order == 2 * 2 * 1
    for l in (1, 2, 3):
        assert arr[l].rate == pytest.approx(sum(rates[:l]), rel=1e-12)


def test_marked_bmmap_counts_the_active_robots_marks() -> None:
    rng = np.random.default_rng(3)
    D0 = np.array([[-3.0, 0.5], [0.4, -2.0]])
    per_robot = [[rng.uniform(0, 0.5, (2, 2)), rng.uniform(0, 0.3, (2, 2))] for _ in range(3)]
    # make the rows of D0 + all marks sum to zero
    total = D0 + sum(sum(r) for r in per_robot)
    D0 = D0 - np.diag(total.sum(axis=1))
    arr = ModeArrivals.marked(D0, per_robot)
    full = BMAP((D0, *[sum(r[k] for r in per_robot) for k in range(2)]))
    theta = full.stationary
    for l in (1, 2, 3):
        expected = sum((k + 1) * (theta @ r[k] @ np.ones(2)) for r in per_robot[:l] for k in range(2))
        assert arr[l].rate == pytest.approx(expected, rel=1e-12)
        np.testing.assert_allclose(arr[l].generator, full.generator, atol=1e-12)


def test_poisson_interval_statistics() -> None:
    b = BMAP.poisson(2.5, (0.2, 0.3, 0.5))
    assert b.batch_rate == pytest.approx(2.5)
    assert b.rate == pytest.approx(2.5 * (0.2 + 0.6 + 1.5))
    assert b.interval_moment(1) == pytest.approx(0.4)
    assert b.interval_scv == pytest.approx(1.0)
    np.testing.assert_allclose(b.lag_correlations(3), 0.0, atol=1e-12)


def test_map_lag_correlations_decay_geometrically() -> None:
    """A MAP(2)'s lag-k correlations are rho_1 g^(k-1), g the non-unit eigenvalue of (-D0)^{-1} D1."""
    D0 = np.array([[-3.0, 0.2], [0.1, -0.4]])
    D1 = np.array([[2.7, 0.1], [0.05, 0.25]])
    b = BMAP((D0, D1))
    rho = b.lag_correlations(4)
    P = np.linalg.solve(-D0, D1)
    g = next(e for e in np.linalg.eigvals(P).real if abs(e - 1) > 1e-9)
    np.testing.assert_allclose(rho[1:], rho[0] * g ** np.arange(1, 4), rtol=1e-9)
