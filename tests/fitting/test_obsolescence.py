"""Step 8: the exponential useful life, configured or estimated, and the waiting exposure behind the
censored estimate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robotctl.fitting import fit_obsolescence, waiting_exposure
from robotctl.model import InputError


def test_waiting_exposure_by_hand() -> None:
    # N: 0 -> 3 at t=0, -> 2 at t=2, -> 1 at t=3, resync to 4 at t=5, -> 3 at t=6
    t = [0.0, 2.0, 3.0, 5.0, 6.0]
    deltas = [3, -1, -1, 99, -1]
    levels = [np.nan, np.nan, np.nan, 4, np.nan]
    exposure, backlog = waiting_exposure(t, deltas, levels)
    # waiting = N - 1: 2 for 2 s, 1 for 1 s, 0 for 2 s, 3 for 1 s
    assert exposure == pytest.approx(2 * 2 + 1 * 1 + 0 * 2 + 3 * 1)
    assert backlog == 0


def test_waiting_exposure_assumes_a_backlog_for_an_incomplete_log() -> None:
    exposure, backlog = waiting_exposure([0.0, 1.0, 2.0], [-2, 1, 0])
    assert backlog == 2 and exposure == pytest.approx(0 * 1 + 0 * 1)
    with pytest.raises(InputError, match=r"^times:"):
        waiting_exposure([1.0, 0.0], [1, -1])


def test_censored_estimate_recovers_the_mean_life() -> None:
    """Pages wait a random time; each goes stale at rate theta unless served first. D / E estimates
    1/theta within statistical tolerance."""
    rng = np.random.default_rng(40)
    mean_life, n = 30.0, 20_000
    waits = rng.exponential(20.0, n)  # time until service
    lives = rng.exponential(mean_life, n)
    stale = lives < waits
    exposure = float(np.minimum(lives, waits).sum())
    fit = fit_obsolescence(drops=int(stale.sum()), exposure_s=exposure)
    assert fit.law is not None and fit.source.startswith("estimated from drops")
    assert fit.stderr_s is not None
    assert abs(fit.mean_useful_life_s - mean_life) < 5 * fit.stderr_s  # type: ignore[operator]
    # the naive mean of the stale lives is biased short, as the report warns
    naive = fit_obsolescence(lifetimes=lives[stale])
    assert naive.mean_useful_life_s is not None and naive.mean_useful_life_s < 0.6 * mean_life
    assert "biases it short" in naive.message


def test_configured_value_wins_and_the_estimate_is_reported() -> None:
    fit = fit_obsolescence(12.0, drops=100, exposure_s=2000.0)
    assert fit.source == "configured" and fit.law is not None and fit.law.mean == pytest.approx(12.0)
    assert fit.estimate_s == pytest.approx(20.0) and "estimate is 20" in fit.message


def test_too_few_drops_means_no_obsolescence() -> None:
    fit = fit_obsolescence(drops=5, exposure_s=100.0, min_count=30)
    assert fit.law is None and fit.source == "none" and "only 5" in fit.message
    assert fit_obsolescence().law is None


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"mean_useful_life_s": 0.0}, "mean_useful_life_s"),
    ({"drops": -1, "exposure_s": 1.0}, "obsolete_drops"),
    ({"drops": 3, "exposure_s": math.nan}, "obsolete_exposure_s"),
    ({"lifetimes": [1.0, -1.0]}, "obsolete_lifetimes"),
])
def test_invalid_obsolescence_inputs(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InputError, match=f"^{field}:"):
        fit_obsolescence(**kwargs)  # type: ignore[arg-type]
