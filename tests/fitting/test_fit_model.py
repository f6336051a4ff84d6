"""fit_model end to end: round trips from known MAP(2)s, BMAPs, H2 and Poisson sources, a paper-like
trace, several modes, and the model file it serialises to.

Tolerances are z = 5 standard errors. The standard errors of means come from batch means over 50
consecutive blocks (they account for the correlation of the intervals); that of the decay gamma from
Bartlett's formula var(rho_1) ~ (1 + 2 sum_k rho_k^2) / n, divided by A = (1 - 1/c^2)/2, doubled for the
skew of the intervals.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from robotctl.fitting import FitOptions, FitStatus, MapFitStatus, PhFitStatus, fit_model, map2_from_statistics
from robotctl.fitting._synthetic import paper_like_trace, sample_bmap
from robotctl.model import BMAP, PH, InputError, model_from_dict

Z = 5.0
#: service samples whose three moments an H2 matches exactly (so that rungs below are the arrivals')
SERVICE = {"service_times": PH.hyperexponential([0.3, 0.7], [0.5, 3.0]).sample(np.random.default_rng(0), 200)}


def batch_means_se(x: np.ndarray, blocks: int = 50) -> float:
    m = x[: x.size // blocks * blocks].reshape(blocks, -1).mean(axis=1)
    return float(m.std(ddof=1) / math.sqrt(blocks))


def deliveries_of(intervals: np.ndarray, sizes: np.ndarray, *, split: bool) -> tuple[np.ndarray, np.ndarray]:
    """Times and pages: one delivery of k pages per batch, or k deliveries at one timestamp."""
    epochs = np.concatenate([[0.0], np.cumsum(intervals[:-1])])
    if not split:
        return epochs, sizes
    return np.repeat(epochs, sizes), np.ones(int(sizes.sum()), dtype=np.int64)


def known_map2(scv: float, rho1: float) -> BMAP:
    return map2_from_statistics(mean=1.0, variance=scv, lag_correlations=[rho1]).map


def test_map2_round_trip() -> None:
    src = known_map2(3.0, 0.8 / 3)  # gamma = 0.8
    n = 50_000
    x, _ = sample_bmap(src, n, np.random.default_rng(21))
    fit = fit_model(np.concatenate([[0.0], np.cumsum(x)]), capacity=5, **SERVICE)
    mf = fit.modes[0]
    assert mf.rung == "exact" and mf.map_fit is not None and mf.stats is not None
    # the fit matches the sample exactly ...
    assert mf.bmap.interval_moment(1) == pytest.approx(x.mean(), rel=1e-9)
    assert mf.bmap.interval_variance == pytest.approx(x.var(), rel=1e-9)
    assert mf.bmap.lag_correlations(1)[0] == pytest.approx(mf.stats.lag_correlations[0], abs=1e-9)
    # ... and the sample is within statistical tolerance of the source
    assert abs(x.mean() - 1.0) < Z * batch_means_se(x)
    assert abs(x.var() - 3.0) < Z * batch_means_se((x - x.mean()) ** 2)
    A = (1 - 1 / 3.0) / 2
    rho = src.lag_correlations(200)
    se_gamma = 2 * math.sqrt((1 + 2 * np.sum(rho**2)) / n) / A
    assert abs(mf.map_fit.gamma - 0.8) < Z * se_gamma
    assert fit.status is FitStatus.OK and fit.success


@pytest.mark.parametrize("split", [False, True])
def test_bmap_round_trip_recovers_the_batch_law(split: bool) -> None:
    d = np.array([0.5, 0.3, 0.2])
    base = known_map2(2.0, 0.15)
    src = BMAP.from_map(base.D0, base.D1, d)
    n = 20_000
    x, sizes = sample_bmap(src, n, np.random.default_rng(22))
    times, pages = deliveries_of(x, sizes, split=split)
    fit = fit_model(times, pages=pages, capacity=5, **SERVICE)
    mf = fit.modes[0]
    assert fit.report.batches == n and mf.rung == "exact"
    assert fit.report.batch_resolution.value == 0.0  # only the equal timestamps merged
    tol = Z * np.sqrt(d * (1 - d) / n)
    np.testing.assert_array_less(np.abs(mf.batch_size_probs - d), tol)
    # D_k = d_k D_1 (paper 000, Section 7)
    for k in (1, 2, 3):
        np.testing.assert_allclose(mf.bmap.D[k], mf.batch_size_probs[k - 1] * mf.map_fit.D1, rtol=1e-12)
    assert mf.bmap.rate == pytest.approx(mf.bmap.mean_batch_size / mf.bmap.interval_moment(1), rel=1e-9)


def test_paper_bmap_with_negative_correlation_round_trip() -> None:
    """Mode 1 of paper 000's example: batches of 1 or 2 pages, lag-1 correlation -0.218 (a MAP(2) of
    epochs, so the EXACT rung is expected)."""
    src = BMAP.from_matrices([[[-10, 2], [0, -0.5]], [[0.05, 3], [0.29, 0.005]], [[0.05, 4.9], [0.2, 0.005]]])
    n = 40_000
    x, sizes = sample_bmap(src, n, np.random.default_rng(23))
    times, pages = deliveries_of(x, sizes, split=False)
    fit = fit_model(times, pages=pages, capacity=5, **SERVICE)
    mf = fit.modes[0]
    assert mf.rung == "exact" and mf.map_fit is not None
    rho = src.lag_correlations(200)
    se = 2 * math.sqrt((1 + 2 * np.sum(rho**2)) / n)
    assert abs(mf.bmap.lag_correlations(1)[0] - src.lag1_correlation) < Z * se
    d = src.batch_size_probs
    np.testing.assert_array_less(np.abs(mf.batch_size_probs - d), Z * np.sqrt(d * (1 - d) / n))
    assert abs(x.mean() - src.interval_moment(1)) < Z * batch_means_se(x)


def test_h2_renewal_source_gives_the_renewal_rung() -> None:
    law = PH.hyperexponential([0.1, 0.9], [0.1, 2.0])
    x = law.sample(np.random.default_rng(24), 20_000)
    fit = fit_model(np.concatenate([[0.0], np.cumsum(x)]), capacity=5, **SERVICE)
    mf = fit.modes[0]
    assert mf.rung == "renewal" and "no lag correlation among lags 1..20 is significant" in mf.message
    assert mf.bmap.interval_scv == pytest.approx(x.var() / x.mean() ** 2, rel=1e-9)
    assert abs(x.var() / x.mean() ** 2 - law.scv) < Z * batch_means_se((x - x.mean()) ** 2) / law.mean**2 * 1.5
    assert fit.status is FitStatus.FALLBACK and fit.success


def test_poisson_source_gives_the_poisson_rung() -> None:
    x = np.random.default_rng(25).exponential(0.5, 20_000)
    fit = fit_model(np.concatenate([[0.0], np.cumsum(x)]), capacity=5, **SERVICE)
    mf = fit.modes[0]
    assert mf.rung == "poisson" and mf.bmap.order == 1
    assert mf.bmap.rate == pytest.approx(1 / x.mean(), rel=1e-9)


def test_paper_like_trace_end_to_end_explains_every_choice() -> None:
    """Batches of 1-8 pages, stop gaps, lag-1 correlation ~0.6 fading slowly, sizes with c^2 ~ 85."""
    rng = np.random.default_rng(26)
    tr = paper_like_trace(rng, 30_000)
    sizes = tr.bytes / tr.pages
    fit = fit_model(tr.times, pages=tr.pages, sizes_bytes=sizes, processing_rate_bps=5e4, capacity=8,
                    mean_useful_life_s=60.0)
    rep = fit.report
    # step 3: the batches are found exactly
    assert rep.batch_resolution.rule == "automatic"
    assert tr.max_intra_gap < rep.batch_resolution.value < tr.min_interval
    assert rep.batches == tr.batch_sizes.size
    # step 2: exactly the stop gaps are censored
    assert rep.censored == tr.stops.size
    assert rep.censored_time_s == pytest.approx(float(tr.stops.sum() + np.sort(tr.intervals)[-1] * 0), rel=0.01)
    mf = fit.modes[0]
    assert mf.stats is not None and mf.map_fit is not None
    np.testing.assert_allclose(np.sort(mf.stats.lag_correlations)[-1], mf.stats.lag_correlations[0], rtol=0.05)
    assert 0.5 < mf.stats.lag_correlations[0] < 0.75  # the source's rho_1 ~ 0.62
    # step 4: beyond any MAP(2): clipped, keeping the measured decay
    assert mf.rung == MapFitStatus.RHO_CLIPPED.value
    assert mf.map_fit.gamma == pytest.approx(mf.map_fit.measured_decay, abs=1e-12)
    assert 0.95 < mf.map_fit.gamma < 1.0
    assert mf.map_fit.fitted_lag_correlations[0] < 0.5
    # step 5: the batch law
    d = np.bincount(tr.batch_sizes)[1:] / tr.batch_sizes.size
    np.testing.assert_allclose(mf.batch_size_probs, d, atol=1e-12)
    # step 7: sizes with c^2 ~ 85, matched in three moments by an H2
    svc = fit.service
    x = sizes / 5e4
    assert svc.fit.status is PhFitStatus.EXACT and svc.scv == pytest.approx(x.var() / x.mean() ** 2, rel=1e-9)
    assert fit.model.service.scv == pytest.approx(svc.scv, rel=1e-8)
    assert fit.model.obsolescence is not None and fit.model.obsolescence.mean == pytest.approx(60.0)
    # the report says why at each step, and is plain data
    text = " ".join(rep.notes)
    for words in ("batch resolution", "stop gaps", "rho_clipped", "measured decay", "service from sizes",
                  "useful life of mean 60", "capacity K = 8"):
        assert words in text
    doc = fit.to_dict()
    assert yaml.safe_load(yaml.safe_dump(doc)) == doc
    assert doc["report"]["modes"][0]["rung"] == "rho_clipped"


def test_several_modes_and_the_linear_rule() -> None:
    rng = np.random.default_rng(27)
    base = known_map2(2.5, 0.2)
    x1, _ = sample_bmap(base, 6000, rng)
    x2, _ = sample_bmap(base.scaled(2.0), 6000, rng)
    t1 = np.concatenate([[0.0], np.cumsum(x1)])
    t2 = t1[-1] + np.cumsum(x2)
    times = np.concatenate([t1, t2])
    modes = np.concatenate([np.full(t1.size, 1), np.full(t2.size, 2)])
    fit = fit_model(times, modes=modes, all_modes=[1, 2, 3, 4], capacity=5, **SERVICE)
    by = {mf.mode: mf for mf in fit.modes}
    assert fit.report.mode_switches == 1 and fit.report.linear_modes == (3, 4)
    assert by[1].source == "observed" and by[2].source == "observed"
    assert by[3].source == "linear" and by[3].base_mode == 2 and by[4].base_mode == 2
    assert by[4].bmap.rate == pytest.approx(2 * by[2].bmap.rate, rel=1e-12)
    r = by[2].bmap.rate / by[1].bmap.rate
    assert abs(r - 2.0) < Z * 2.0 * math.hypot(batch_means_se(x1) / x1.mean(), batch_means_se(x2) / x2.mean())
    assert set(fit.model.modes) == {1, 2, 3, 4}


def test_sparse_modes_take_the_linear_rule_and_unused_modes_are_reported() -> None:
    rng = np.random.default_rng(28)
    x = rng.exponential(1.0, 3000)
    t = np.cumsum(x)
    modes = np.full(t.size, 2)
    modes[-10:] = 1  # ten deliveries in mode 1: too few
    modes[:5] = 7  # not among all_modes
    fit = fit_model(t, modes=modes, all_modes=[1, 2], capacity=5, **SERVICE)
    by = {mf.mode: mf for mf in fit.modes}
    assert by[1].source == "linear" and by[1].base_mode == 2 and "only" in by[1].message
    assert fit.report.unused_modes == (7,)


def test_too_little_data_is_a_poisson_guess_with_success_false() -> None:
    fit = fit_model(np.cumsum(np.ones(12)), capacity=3, **SERVICE)
    assert fit.status is FitStatus.INSUFFICIENT_DATA and not fit.success
    assert fit.modes[0].rung == "poisson" and fit.modes[0].bmap.rate == pytest.approx(1.0)


def test_model_file_round_trip() -> None:
    rng = np.random.default_rng(29)
    x, sizes = sample_bmap(BMAP.from_map(*known_map2(2.0, 0.2).D, [0.6, 0.4]), 3000, rng)
    times, pages = deliveries_of(x, sizes, split=False)
    fit = fit_model(times, pages=pages, modes=np.full(times.size, 2), all_modes=[1, 2], capacity=4,
                    sizes_bytes=rng.lognormal(8, 1, 500), processing_rate_bps=1e4, mean_useful_life_s=9.0)
    doc = fit.to_dict()
    assert set(doc) == {"model", "report"}
    back = model_from_dict(doc["model"])
    assert back.capacity == 4 and back.modes == (1, 2)
    for m in (1, 2):
        assert back.arrivals[m].allclose(fit.model.arrivals[m], rtol=1e-12)
    assert back.service.allclose(fit.model.service) and back.obsolescence is not None
    rungs = [mode["rung"] for mode in doc["report"]["modes"]]
    assert rungs[0] == "linear" and doc["report"]["service"]["rung"] in {"exact", "two_moments"}


def test_options_from_a_mapping_and_their_errors() -> None:
    t = np.cumsum(np.random.default_rng(30).exponential(1.0, 500))
    fit = fit_model(t, capacity=3, options={"max_lag": 5, "censor_above_s": 1e9, "batch_resolution_s": 0}, **SERVICE)
    assert fit.options.max_lag == 5 and fit.report.censor.rule == "configured"
    assert fit.modes[0].stats is not None and fit.modes[0].stats.lag_correlations.size <= 5
    with pytest.raises(InputError, match=r"^options\.max_lags:"):
        fit_model(t, capacity=3, options={"max_lags": 5}, **SERVICE)
    with pytest.raises(InputError, match=r"^options\.significance:"):
        FitOptions(significance=0.0)
    with pytest.raises(InputError, match=r"^options\.out_of_order:"):
        FitOptions(out_of_order="ignore")


@pytest.mark.parametrize(("kwargs", "field"), [
    ({}, "service_times"),
    ({"sizes_bytes": [1.0, 2.0]}, "processing_rate_bps"),
    ({"sizes_bytes": [1.0, -2.0], "processing_rate_bps": 1.0}, "sizes_bytes"),
    ({"service_times": [0.0, 0.0]}, "service_times"),
    ({"service_times": [1.0], "capacity": 0}, "model.capacity"),
    ({"service_times": [1.0], "all_modes": [1, 1]}, "all_modes"),
    ({"service_times": [1.0], "mean_useful_life_s": -1.0}, "mean_useful_life_s"),
])
def test_invalid_inputs_name_the_field(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"capacity": 3}
    args.update(kwargs)
    with pytest.raises(InputError, match=f"^{field}:"):
        fit_model(np.arange(50.0), **args)  # type: ignore[arg-type]


def test_one_batch_is_invalid_input() -> None:
    with pytest.raises(InputError, match=r"^delivery_times:.*one batch"):
        fit_model(np.zeros(5), capacity=3, **SERVICE)


def test_a_few_deliveries_with_no_robot_active_are_left_out() -> None:
    t = np.cumsum(np.random.default_rng(31).exponential(1.0, 2000))
    modes = np.full(t.size, 1)
    modes[1000:1005] = 0  # in-flight pages after every robot was parked
    fit = fit_model(t, modes=modes, capacity=5, **SERVICE)
    assert fit.model.modes == (1,) and fit.report.unused_modes == (0,)
    assert any("mode 0 needs min_intervals" in note for note in fit.report.notes)


@settings(max_examples=100, deadline=None)
@given(gaps=st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 1e4)), min_size=1, max_size=120),
       pages=st.lists(st.integers(1, 40), min_size=121, max_size=121),
       modes=st.lists(st.integers(0, 4), min_size=121, max_size=121),
       all_modes=st.one_of(st.none(), st.just([1, 2, 3, 4])))
def test_property_awkward_but_valid_windows_never_raise(gaps: list[float], pages: list[int], modes: list[int],
                                                        all_modes: list[int] | None) -> None:
    """Whatever a window of valid deliveries looks like, the fit returns a usable model (or, when every
    delivery falls into one batch, says so with an InputError)."""
    t = np.concatenate([[0.0], np.cumsum(gaps)])
    n = t.size
    try:
        fit = fit_model(t, pages=pages[:n], modes=modes[:n], all_modes=all_modes, capacity=4, **SERVICE)
    except InputError as exc:
        assert "one batch" in str(exc) or "mode >= 1" in str(exc) or "no mode >= 1" in str(exc), str(exc)
        return
    assert fit.model.arrivals.order in (1, 2)
    assert all(np.isfinite(fit.model.arrivals[m].rate) for m in fit.model.modes)
    assert fit.success == (fit.status is not FitStatus.INSUFFICIENT_DATA)
    yaml.safe_dump(fit.to_dict())


def test_mode_exposure_sets_each_observed_modes_rate() -> None:
    """Under the paper example's optimal threshold policy, modes last a few deliveries: the intervals
    within one mode overstate mode 1's rate several-fold; with the time spent in each mode, every
    observed mode's rate is pages in the mode / seconds in it, and lands near the true lambda^(r)."""
    from pathlib import Path

    from robotctl.agent import load_model_file
    from robotctl.model import ThresholdPolicy, TraceKind, simulate_events

    model, _ = load_model_file(str(Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"))
    res = simulate_events(model, ThresholdPolicy.parse("3,3,3,1,1,1"), np.random.default_rng(5), events=200_000,
                          trace=True)
    rows = res.trace
    deliveries = [r for r in rows if r.kind is TraceKind.DELIVERY]
    times = np.array([r.t for r in deliveries])
    pages = np.array([r.pages for r in deliveries])
    modes = np.array([r.active for r in deliveries])
    changes = [(r.t, r.active) for r in rows if r.kind in (TraceKind.PARK, TraceKind.RESUME)]
    bounds = [t for t, _ in changes] + [rows[-1].t]
    exposure: dict[int, float] = {}
    for (t, m), end in zip(changes, bounds[1:]):
        exposure[m] = exposure.get(m, 0.0) + end - t
    plain = fit_model(times, pages=pages, modes=modes, service_times=[0.5, 0.7, 0.9], capacity=5)
    exposed = fit_model(times, pages=pages, modes=modes, service_times=[0.5, 0.7, 0.9], capacity=5,
                        mode_exposure_s=exposure)
    for m in (1, 3):
        target = pages[modes == m].sum() / exposure[m]
        assert exposed.model.arrivals[m].rate == pytest.approx(target, rel=1e-9)
        assert abs(exposed.model.arrivals[m].rate / model.arrivals[m].rate - 1) < 0.2
    assert plain.model.arrivals[1].rate > 2 * model.arrivals[1].rate  # the bias the exposure removes
    assert any("exposure" in note for note in exposed.report.notes)
