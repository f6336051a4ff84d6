"""Change rates from revisit observations: the closed form for equal intervals, the coverage of the
likelihood-ratio interval by simulation, and the edge cases with their caveats."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from robotctl.model import InputError
from robotctl.policies import ChangeRateStatus, estimate_change_rate, estimate_change_rates


def test_equal_intervals_closed_form() -> None:
    """X changes in n revisits t apart: mu_hat = -ln(1 - X/n) / t."""
    t, n, x = 2.0, 50, 18
    est = estimate_change_rate(np.full(n, t), np.r_[np.ones(x), np.zeros(n - x)].astype(bool))
    assert est.success and est.status is ChangeRateStatus.OK
    assert est.rate == pytest.approx(-math.log(1 - x / n) / t, rel=1e-9)
    assert est.lower < est.rate < est.upper
    # observed information at the MLE: X t^2 e^{mu t} / (e^{mu t} - 1)^2
    e = math.exp(est.rate * t)
    assert est.standard_error == pytest.approx(1 / math.sqrt(x * t * t * e / (e - 1) ** 2), rel=1e-6)


def test_interval_coverage_by_simulation() -> None:
    """Poisson changes of rate 0.3, revisits at random intervals: the 90% likelihood-ratio interval
    covers the true rate in a proportion consistent with 90% (binomial 99.9% acceptance band)."""
    rng = np.random.default_rng(12)
    mu, reps, hits = 0.3, 400, 0
    for _ in range(reps):
        t = rng.uniform(0.5, 6.0, 60)
        changed = rng.random(60) < -np.expm1(-mu * t)
        est = estimate_change_rate(t, changed, level=0.9)
        hits += est.lower <= mu <= est.upper
    lo, hi = binom.ppf([0.0005, 0.9995], reps, 0.9)
    assert lo <= hits <= hi, hits


def test_mle_is_consistent() -> None:
    rng = np.random.default_rng(3)
    t = rng.exponential(2.0, 20_000)
    changed = rng.random(t.size) < -np.expm1(-0.8 * t)
    est = estimate_change_rate(t, changed)
    assert abs(est.rate - 0.8) < 4 * est.standard_error
    assert est.lower < 0.8 < est.upper


def test_small_samples_say_so() -> None:
    est = estimate_change_rate([1.0, 2.0, 1.5, 3.0], [True, False, False, True])
    assert est.success and est.status is ChangeRateStatus.FEW_OBSERVATIONS
    assert "biased upwards" in est.message and "4 revisits" in est.message
    assert est.upper / est.lower > 10  # four revisits pin little down


def test_no_change_gives_an_upper_bound_only() -> None:
    est = estimate_change_rate([10.0, 20.0, 5.0], [False, False, False], level=0.95)
    assert not est.success and est.status is ChangeRateStatus.NO_CHANGE and est.rate == 0.0
    assert est.upper == pytest.approx(1.959963984540054**2 / (2 * 35.0))


def test_all_changed_gives_a_lower_bound_only() -> None:
    t = np.array([5.0, 8.0, 4.0])
    est = estimate_change_rate(t, [True, True, True], level=0.95)
    assert not est.success and est.status is ChangeRateStatus.ALL_CHANGED and est.rate == math.inf
    loglik = float(np.sum(np.log(-np.expm1(-est.lower * t))))
    assert -2 * loglik == pytest.approx(1.959963984540054**2, rel=1e-8)
    assert "revisit sooner" in est.message


def test_per_page_grouping() -> None:
    pages = ["a", "b", "a", "b", "a"]
    out = estimate_change_rates(pages, [1, 2, 3, 4, 5], [True, False, False, False, True])
    assert set(out) == {"a", "b"}
    assert out["a"].observations == 3 and out["b"].status is ChangeRateStatus.NO_CHANGE
    assert out["a"].to_dict()["rate"] == pytest.approx(out["a"].rate)


@pytest.mark.parametrize(("t", "c", "field"), [
    ([1.0, 0.0], [True, False], "intervals[1]"), ([1.0], [True, False], "changed"), ([1.0], [2], "changed"),
])
def test_errors_name_the_field(t: list[float], c: list[object], field: str) -> None:
    with pytest.raises(InputError) as err:
        estimate_change_rate(t, c)
    assert err.value.field == field
