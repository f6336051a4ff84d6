"""Sample statistics: moments, lag correlations inside segments, the geometric decay fit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robotctl.fitting import fit_decay, sample_stats


def test_moments_and_lags_against_direct_formulas() -> None:
    rng = np.random.default_rng(5)
    x = rng.exponential(2.0, 1000)
    s = sample_stats(x, None, 3)
    d = x - x.mean()
    assert s.mean == pytest.approx(x.mean(), rel=1e-12)
    assert s.variance == pytest.approx(x.var(), rel=1e-12)
    assert s.third_moment == pytest.approx(np.mean(x**3), rel=1e-12)
    for k in (1, 2, 3):
        assert s.lag_correlations[k - 1] == pytest.approx(np.dot(d[:-k], d[k:]) / (x.size - k) / x.var(), rel=1e-10)
    assert list(s.lag_pairs) == [999, 998, 997]


def test_pairs_never_cross_a_segment_break() -> None:
    # two segments: within each the sequence alternates, across the break it would look correlated
    x = np.array([1.0, 3.0, 1.0, 3.0, 10.0, 20.0, 10.0, 20.0])
    seg = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    s = sample_stats(x, seg, 2, min_pairs=1)
    assert list(s.lag_pairs) == [6, 4]
    d = x - x.mean()
    pairs1 = [(i, i + 1) for i in range(7) if seg[i] == seg[i + 1]]
    expect = sum(d[i] * d[j] for i, j in pairs1) / len(pairs1) / x.var()
    assert s.lag_correlations[0] == pytest.approx(expect, rel=1e-12)


def test_lags_with_few_pairs_are_dropped_and_estimates_stay_in_range() -> None:
    """Many short unbroken stretches and one long one: a long lag rests on few pairs, whose estimate
    against the whole sample's mean and variance could leave [-1, 1] (seen on a simulator trace)."""
    rng = np.random.default_rng(4)
    short = np.repeat(np.arange(2000), 3)  # 2000 stretches of 3 intervals
    x = np.concatenate([rng.exponential(1.0, short.size), 50.0 + rng.normal(0.0, 0.01, 60)])
    seg = np.concatenate([short, np.full(60, 2000)])
    s = sample_stats(x, seg, 20, min_pairs=50)
    assert s.lag_pairs.size == s.lag_correlations.size
    assert all(s.lag_pairs >= 50)
    assert s.lag_correlations.size < 20
    assert np.all(np.abs(s.lag_correlations) <= 1.0)
    unclipped = sample_stats(x, seg, 20, min_pairs=1)
    assert np.abs(unclipped.lag_correlations).max() == 1.0  # clipped where the raw estimate exceeds 1


def test_scv_standard_error_matches_its_spread() -> None:
    """The delta-method standard error of c^2 against the spread over 200 independent samples."""
    rng = np.random.default_rng(9)
    reps = [sample_stats(rng.exponential(1.0, 2000), None, 0) for _ in range(200)]
    spread = float(np.std([r.scv for r in reps]))
    se = float(np.mean([r.scv_stderr for r in reps]))
    # the spread of a standard deviation over 200 draws is about 5%; allow 4 of those
    assert abs(spread / se - 1) < 4 * (1 / math.sqrt(2 * 199))


def test_fit_decay_recovers_a_geometric_curve_and_needs_two_lags() -> None:
    assert fit_decay(0.4 * 0.85 ** np.arange(12)) == pytest.approx(0.85, abs=1e-9)
    assert fit_decay(-0.3 * (-0.5) ** np.arange(6)) == pytest.approx(-0.5, abs=1e-9)
    assert fit_decay(np.array([0.3])) is None
    assert fit_decay(np.array([0.0, 0.1])) is None
    # a flat curve decays as slowly as possible
    assert fit_decay(np.full(5, 0.2)) == pytest.approx(1.0, abs=1e-9)
