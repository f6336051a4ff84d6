"""h2_from_moments: the closed two-point form where it exists, the nearest valid law elsewhere, each rung
reported; every law is a valid PH that has the moments it claims."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotctl.fitting import PhFitStatus, cf1_from_moments, h2_from_moments
from robotctl.model import PH, InputError

CLAIM = 1e-9


def moments(law: PH) -> tuple[float, float, float]:
    return law.moment(1), law.moment(2), law.moment(3)


def test_h2_three_moments_recover_the_h2() -> None:
    true = PH.hyperexponential([0.3, 0.7], [0.2, 3.0])
    fit = h2_from_moments(*moments(true))
    assert fit.status is PhFitStatus.EXACT and fit.success and fit.method == "h2-three-moments"
    assert fit.law.order == 2
    np.testing.assert_allclose(np.diag(fit.S), np.diag(true.S), rtol=1e-9)
    np.testing.assert_allclose(fit.beta, true.beta, rtol=1e-9)
    assert np.count_nonzero(fit.S - np.diag(np.diag(fit.S))) == 0  # hyperexponential form


def test_h2_condition_is_the_stated_one() -> None:
    m1, m2 = 1.0, 4.0  # c^2 = 3
    edge = 1.5 * m2 * m2 / m1
    assert h2_from_moments(m1, m2, edge * 1.001).status is PhFitStatus.EXACT
    low = h2_from_moments(m1, m2, edge * 0.999)
    assert low.status is PhFitStatus.TWO_MOMENTS and low.method == "h2-balanced-means"
    assert "1.5 m2^2" in low.message
    assert cf1_from_moments(m1, m2, edge * 0.999) is None


def test_balanced_means_without_third_moment() -> None:
    fit = h2_from_moments(2.0, 2.0 * 2.0 * (1 + 5.0))  # c^2 = 5
    assert fit.status is PhFitStatus.TWO_MOMENTS and "no third moment" in fit.message
    p, rates = fit.beta, -np.diag(fit.S)
    assert p[0] / rates[0] == pytest.approx(p[1] / rates[1], rel=1e-12)  # balanced means
    assert fit.law.mean == pytest.approx(2.0, rel=CLAIM) and fit.law.scv == pytest.approx(5.0, rel=CLAIM)


def test_exponential_when_scv_is_one() -> None:
    fit = h2_from_moments(0.5, 0.5, 0.75)
    assert fit.status is PhFitStatus.EXACT and fit.method == "exponential" and fit.law.order == 1
    off = h2_from_moments(0.5, 0.5, 1.0)
    assert off.status is PhFitStatus.TWO_MOMENTS and "only the exponential" in off.message


def test_aph2_three_moments_for_scv_below_one() -> None:
    true = PH(np.array([0.9, 0.1]), np.array([[-1.0, 1.0], [0.0, -2.0]]))
    assert 0.5 < true.scv < 1
    fit = h2_from_moments(*moments(true))
    assert fit.status is PhFitStatus.EXACT and fit.method == "aph2-three-moments"
    np.testing.assert_allclose(fit.fitted_moments, moments(true), rtol=CLAIM)


def test_erlang_mixture_outside_aph2_range_and_below_one_half() -> None:
    two = h2_from_moments(1.0, 1.8, 100.0)  # c^2 = 0.8, m3 far too large for an APH(2)
    assert two.status is PhFitStatus.TWO_MOMENTS and two.method == "erlang-mixture" and two.law.order == 2
    low = h2_from_moments(1.0, 1.0 + 0.2)  # c^2 = 0.2 -> 5 phases
    assert low.status is PhFitStatus.TWO_MOMENTS and low.law.order == 5
    assert low.law.scv == pytest.approx(0.2, rel=CLAIM)


def test_mean_only_when_the_variance_is_out_of_reach() -> None:
    fit = h2_from_moments(3.0, 9.0 * (1 + 0.01), max_order=10)  # c^2 = 0.01 needs 100 phases
    assert fit.status is PhFitStatus.MEAN_ONLY and fit.law.order == 10 and "max_order" in fit.message
    assert fit.law.mean == pytest.approx(3.0, rel=CLAIM)
    assert h2_from_moments(3.0, None).status is PhFitStatus.MEAN_ONLY


@pytest.mark.parametrize(("args", "field"), [
    ((0.0, 1.0, 1.0), "m1"),
    ((float("nan"), 1.0, 1.0), "m1"),
    ((1.0, 0.5, 1.0), "m2"),  # negative variance
    ((1.0, 2.0, -1.0), "m3"),
    ((1.0, float("inf"), 1.0), "m2"),
])
def test_invalid_moments_name_the_field(args: tuple[float, float, float], field: str) -> None:
    with pytest.raises(InputError, match=f"^{field}:"):
        h2_from_moments(*args)


def test_sampled_h2_round_trip() -> None:
    """Moments of a sample of a known H2, fitted back: each parameter within statistical tolerance."""
    true = PH.hyperexponential([0.2, 0.8], [0.25, 2.5])
    n = 40_000
    x = true.sample(np.random.default_rng(11), n)
    fit = h2_from_moments(x.mean(), np.mean(x**2), np.mean(x**3))
    assert fit.status is PhFitStatus.EXACT
    # the fit has the sample's moments exactly ...
    np.testing.assert_allclose(fit.fitted_moments, (x.mean(), np.mean(x**2), np.mean(x**3)), rtol=CLAIM)
    # ... and the sample's mean and second moment are within 5 standard errors of the truth
    for k in (1, 2):
        se = math.sqrt((true.moment(2 * k) - true.moment(k) ** 2) / n)
        assert abs(np.mean(x**k) - true.moment(k)) < 5 * se


@settings(max_examples=200, deadline=None)
@given(m1=st.floats(1e-3, 1e3), scv=st.floats(0.0, 200.0), ratio=st.one_of(st.none(), st.floats(0.5, 50.0)))
def test_property_every_fit_is_a_valid_ph_with_its_claimed_moments(m1: float, scv: float, ratio: float | None) -> None:
    m2 = m1 * m1 * (1.0 + scv)
    m3 = None if ratio is None else ratio * m2 * m2 / m1  # feasible and infeasible third moments alike
    fit = h2_from_moments(m1, m2, m3)
    law = PH(fit.beta, fit.S)  # validates: probability vector, sub-generator, every phase absorbs
    assert fit.success, fit.message
    assert law.mean == pytest.approx(m1, rel=CLAIM)
    if fit.status is not PhFitStatus.MEAN_ONLY:
        assert law.moment(2) == pytest.approx(m2, rel=CLAIM)
    if fit.status is PhFitStatus.EXACT and m3 is not None:
        assert law.moment(3) == pytest.approx(m3, rel=CLAIM)
    if scv > 1 and m3 is not None and m1 * m3 > 1.5 * m2 * m2 * (1 + 1e-9):
        assert fit.status is PhFitStatus.EXACT and fit.method == "h2-three-moments"


def test_the_service_fit_leaves_out_samples_it_cannot_use_and_says_why() -> None:
    """Issue 11, finding 4: two service times of 1e308 s made the mean infinite and every refit fail."""
    import numpy as np

    from robotctl.fitting import fit_service

    clean = np.random.default_rng(1).exponential(0.5, 200)
    poisoned = fit_service(np.concatenate([clean, [1e308, 1e308]]))
    reference = fit_service(clean)
    assert poisoned.fit.success and poisoned.n == 200
    assert poisoned.mean == reference.mean and poisoned.scv == reference.scv  # the same fit as without them
    assert "ignored 2 of 202" in poisoned.note and "overflow" in poisoned.note
    assert reference.note == ""
