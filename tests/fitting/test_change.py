"""locate_change: false alarms on steady traces at most at the stated level, a doubling found soon and
where it happened (issue 28)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotctl import InputError
from robotctl.fitting import ModeTrajectory, locate_change
from robotctl.fitting._synthetic import sample_bmap, switching_poisson_trace
from robotctl.model import BMAP


def _upper(level: float, trials: int) -> float:
    """The level plus three binomial standard errors: a scan whose false-alarm rate is at most ``level``
    exceeds this in fewer than 0.2% of runs of this test."""
    return level + 3.0 * math.sqrt(level * (1 - level) / trials)


def _poisson(rng: np.random.Generator, rate: float, seconds: float, start: float = 0.0) -> np.ndarray:
    n = int(rate * seconds * 1.5) + 50
    t = start + np.cumsum(rng.exponential(1.0 / rate, n))
    return t[t < start + seconds]


def test_steady_poisson_false_alarms_at_most_the_level() -> None:
    rng = np.random.default_rng(11)
    trials, level = 300, 0.05
    alarms = sum(locate_change(t := _poisson(rng, 1.0, 2000.0), np.ones(t.size, int), end_s=2000.0,
                               level=level).detected for _ in range(trials))
    assert alarms / trials <= _upper(level, trials)


def test_steady_switching_modes_false_alarms_at_most_the_level() -> None:
    """Four Poisson modes switched by an independent clock: each mode's rate on its own clock is steady."""
    rng = np.random.default_rng(12)
    trials, level = 200, 0.05
    alarms = 0
    for _ in range(trials):
        tr = switching_poisson_trace(rng, 2000.0, (0.5, 1.0, 1.5, 2.0), switch_rate=0.5)
        traj = ModeTrajectory(tr.epochs, tr.trajectory_modes, end_s=tr.seconds)
        alarms += locate_change(tr.times, tr.modes, traj, level=level).detected
    assert alarms / trials <= _upper(level, trials)


def test_bursty_map_false_alarms_at_most_the_level_with_the_dispersion() -> None:
    """A MAP(2) with c^2 = 3 and lag-1 correlation 0.27: the counts are over-dispersed (phi ~ 12), which
    the dispersion absorbs; with phi forced to 1 (a Poisson model) the same traces raise alarms often."""
    bmap = BMAP((np.array([[-2.0, 0.1], [0.05, -0.3]]), np.array([[1.9, 0.0], [0.0, 0.25]])))
    rng = np.random.default_rng(13)
    trials, level = 150, 0.05
    alarms = naive = 0
    for _ in range(trials):
        t = np.cumsum(sample_bmap(bmap, 3000, rng)[0])
        ones = np.ones(t.size, int)
        cp = locate_change(t, ones, level=level)
        alarms += cp.detected
        naive += locate_change(t, ones, level=level, dispersion=1.0).detected
        assert cp.dispersion > 2.0
    assert alarms / trials <= _upper(level, trials)
    assert naive / trials > 0.5


def test_doubling_found_within_a_minute_and_located() -> None:
    """Rate 1/s doubling at T = 2000 s: windows ending every 5 s after T; the first detection's delay and
    the located epoch. The median delay is about 20 s (40 deliveries after the change)."""
    rng = np.random.default_rng(14)
    T = 2000.0
    delays, errors = [], []
    for _ in range(40):
        t = np.concatenate([_poisson(rng, 1.0, T), _poisson(rng, 2.0, 600.0, start=T)])
        for end in np.arange(T + 5.0, T + 600.0, 5.0):
            w = t[t <= end]
            cp = locate_change(w, np.ones(w.size, int), end_s=float(end))
            if cp.detected:
                delays.append(end - T)
                errors.append(cp.at_s - T)
                break
        else:
            delays.append(math.inf)
    assert np.median(delays) <= 60.0
    assert np.quantile(delays, 0.9) <= 150.0
    assert np.median(np.abs(errors)) <= 15.0


def test_doubling_per_mode_found_and_rates_reported() -> None:
    """Two switching modes whose rates both double at T: the rates before and after are measured on each
    mode's clock."""
    rng = np.random.default_rng(15)
    T = 3000.0
    a = switching_poisson_trace(rng, T, (0.5, 1.0), switch_rate=0.2)
    b = switching_poisson_trace(rng, 1000.0, (1.0, 2.0), switch_rate=0.2)
    times = np.concatenate([a.times, T + b.times])
    modes = np.concatenate([a.modes, b.modes])
    traj = ModeTrajectory(np.concatenate([a.epochs, T + b.epochs]),
                          np.concatenate([a.trajectory_modes, b.trajectory_modes]), end_s=T + 1000.0)
    cp = locate_change(times, modes, traj)
    assert cp.detected and cp.p_value < 1e-6
    assert abs(cp.at_s - T) < 60.0
    assert cp.degrees_of_freedom == 2
    for m, before, after in ((1, 0.5, 1.0), (2, 1.0, 2.0)):
        assert cp.rates_before[m] == pytest.approx(before, rel=0.15)
        assert cp.rates_after[m] == pytest.approx(after, rel=0.15)
    assert cp.deliveries_after == int((times >= cp.at_s).sum())


def test_short_window_is_untested() -> None:
    cp = locate_change(np.arange(10.0), np.ones(10, int))
    assert not cp.detected and cp.p_value == 1.0 and math.isnan(cp.at_s)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"delivery_times": [2.0, 1.0], "modes": [1, 1]}, "delivery_times"),
    ({"delivery_times": [1.0, 2.0], "modes": [1]}, "modes"),
    ({"delivery_times": [1.0, 2.0], "modes": [1, 1], "level": 1.5}, "level"),
    ({"delivery_times": [1.0, 2.0], "modes": [1, 1], "grid": 1}, "grid"),
    ({"delivery_times": [1.0, 2.0], "modes": [1, 1], "dispersion": 0.5}, "dispersion"),
])
def test_bad_input_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(InputError) as err:
        locate_change(**kwargs)
    assert err.value.field == field


@settings(max_examples=150, deadline=None)
@given(times=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), max_size=80),
       mode=st.integers(-2, 5), level=st.floats(allow_nan=True, allow_infinity=True),
       min_side=st.integers(-1, 30))
def test_any_input_is_a_result_or_an_input_error(times: list[float], mode: int, level: float,
                                                 min_side: int) -> None:
    """Whatever arrives, locate_change answers with a ChangePoint or an InputError naming a field."""
    try:
        cp = locate_change(sorted(t for t in times if t == t) + [t for t in times if t != t], [mode] * len(times),
                           level=level, min_side=min_side)
    except InputError as exc:
        assert exc.field
    else:
        assert 0.0 <= cp.p_value <= 1.0 and cp.detected == (cp.p_value < cp.level)
