"""Pipeline steps 1-3: validation, batch resolution and extraction, stop-gap censoring, per-mode split."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robotctl.fitting import (
    choose_batch_resolution,
    choose_censor_bound,
    extract_batches,
    fit_gap_mixture,
    fit_model,
    split_intervals,
    validate_deliveries,
)
from robotctl.fitting._synthetic import paper_like_trace, sample_bmap
from robotctl.model import BMAP, InputError


@pytest.mark.parametrize(("kwargs", "field", "words"), [
    ({"delivery_times": []}, "delivery_times", "at least 2"),
    ({"delivery_times": [1.0]}, "delivery_times", "has 1 delivery"),
    ({"delivery_times": [0.0, float("nan"), 2.0]}, "delivery_times", "entry 1 is nan"),
    ({"delivery_times": [0.0, 2.0, 1.0, 3.0, 2.5]}, "delivery_times", "2 timestamp"),
    ({"delivery_times": [[0.0, 1.0]]}, "delivery_times", "one-dimensional"),
    ({"delivery_times": [0.0, 1.0], "pages": [1, 0]}, "pages", "below 1"),
    ({"delivery_times": [0.0, 1.0], "pages": [1.5, 1]}, "pages", "not a whole number"),
    ({"delivery_times": [0.0, 1.0], "pages": [1]}, "pages", "has 1 entries"),
    ({"delivery_times": [0.0, 1.0], "modes": [1, -1]}, "modes", "below 0"),
])
def test_invalid_deliveries_name_the_field(kwargs: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(InputError, match=f"^{field}:.*{words}"):
        validate_deliveries(**kwargs)  # type: ignore[arg-type]


def test_out_of_order_sorted_on_request_and_counted() -> None:
    d = validate_deliveries([0.0, 2.0, 1.0, 3.0, 2.5], pages=[1, 2, 3, 4, 5], out_of_order="sort")
    assert d.sorted and d.out_of_order == 2
    assert list(d.times) == [0.0, 1.0, 2.0, 2.5, 3.0] and list(d.pages) == [1, 3, 2, 5, 4]
    assert not d.times.flags.writeable


def test_resolution_found_between_intra_and_inter_batch_gaps() -> None:
    tr = paper_like_trace(np.random.default_rng(1), 3000, n_stops=2)
    d = validate_deliveries(tr.times, tr.pages)
    res = choose_batch_resolution(d.gaps)
    assert res.rule == "automatic" and res.value is not None
    assert tr.max_intra_gap < res.value < tr.min_interval
    b = extract_batches(d, res.value)
    np.testing.assert_array_equal(b.sizes, tr.batch_sizes)
    assert b.merged == d.n - tr.batch_sizes.size


def test_no_resolution_without_batch_structure_but_ties_merge() -> None:
    rng = np.random.default_rng(2)
    t = np.cumsum(rng.exponential(1.0, 5000))
    t = np.sort(np.concatenate([t, t[:100]]))  # 100 exact duplicates
    d = validate_deliveries(t)
    res = choose_batch_resolution(d.gaps)
    assert res.value == 0.0 and "100 equal-timestamp" in res.reason
    b = extract_batches(d, res.value)
    assert b.n == 5000 and b.sizes.sum() == 5100


def test_configured_resolution_is_used() -> None:
    res = choose_batch_resolution(np.array([0.1, 1.0, 0.2]), configured=0.5)
    assert res.value == 0.5 and res.rule == "configured"


def test_censor_bound_finds_stop_gaps_only() -> None:
    rng = np.random.default_rng(3)
    x = rng.exponential(1.0, 10_000)
    x[[10, 500, 7000]] = [3600.0, 7200.0, 5000.0]
    c = choose_censor_bound(x)
    assert c.rule == "automatic" and c.value is not None and x[x < 3000].max() < c.value < 3600.0
    assert "3 of 10000" in c.reason
    plain = choose_censor_bound(rng.exponential(1.0, 10_000))
    assert plain.value is None and plain.rule == "none"
    off = choose_censor_bound(x, configured=math.inf)
    assert off.value is None and off.rule == "configured"


def test_split_drops_censored_and_mode_switch_intervals_and_breaks_segments() -> None:
    times = np.array([0.0, 1.0, 2.0, 1000.0, 1001.0, 1002.0, 1003.0, 1004.0])
    modes = np.array([1, 1, 1, 1, 1, 2, 2, 2])
    d = validate_deliveries(times, modes=modes)
    b = extract_batches(d, 0.0)
    split = split_intervals(b, 100.0)
    assert split.censored == 1 and split.mode_switches == 1 and split.censored_time == 998.0
    one, two = split.samples
    assert one.mode == 1 and list(one.intervals) == [1.0, 1.0, 1.0]
    assert len(set(one.segments[:2])) == 1 and one.segments[2] != one.segments[0]
    assert two.mode == 2 and list(two.intervals) == [1.0, 1.0] and len(set(two.segments)) == 1
    assert list(one.sizes) == [1, 1, 1, 1, 1] and list(two.sizes) == [1, 1, 1]


# -- batches of crawler traffic: pages milliseconds apart, batches exponential with a mean of seconds ------

BATCH_LAW = np.array([0.3, 0.2, 0.15, 0.1, 0.08, 0.07, 0.05, 0.05])  # P(k pages), k = 1..8


def crawler_trace(rng: np.random.Generator, n_batches: int, *, mean_batch_gap_s: float = 2.0,
                  mean_page_gap_s: float = 0.002) -> tuple[np.ndarray, np.ndarray]:
    """Batches at Poisson epochs (mean ``mean_batch_gap_s``), each of k pages (``BATCH_LAW``) delivered one
    by one, exponential ``mean_page_gap_s`` apart: an exponential's gaps fill every stretch of log gaps."""
    sizes = rng.choice(np.arange(1, 9), size=n_batches, p=BATCH_LAW)
    epochs = np.cumsum(rng.exponential(mean_batch_gap_s, n_batches))
    offsets = np.concatenate([np.cumsum(np.r_[0.0, rng.exponential(mean_page_gap_s, k - 1)]) for k in sizes])
    return np.sort(np.repeat(epochs, sizes) + offsets), sizes


def test_mixture_finds_the_batches_of_crawler_traffic_where_no_empty_stretch_exists() -> None:
    rng = np.random.default_rng(11)
    times, sizes = crawler_trace(rng, 6000)
    d = validate_deliveries(times)
    logs = np.log10(np.sort(d.gaps[d.gaps > 0]))
    assert np.diff(logs[60:-300]).max() < 1.0  # no empty decade: the old rule found no batch at all
    mix = fit_gap_mixture(d.gaps)
    assert mix is not None and mix.two_populations
    assert 1 / mix.rate_fast == pytest.approx(0.002, rel=0.05) and 1 / mix.rate_slow == pytest.approx(2.0, rel=0.05)
    res = choose_batch_resolution(d.gaps)
    assert res.value == pytest.approx(mix.crossing_s) and "two exponential populations" in res.reason
    b = extract_batches(d, res.value)
    # the batch law recovered: within sampling error of the truth (chi-square-sized bounds, n = 6000)
    assert b.n == pytest.approx(sizes.size, rel=0.02)
    found = np.bincount(np.minimum(b.sizes, 8), minlength=9)[1:] / b.n
    np.testing.assert_allclose(found, BATCH_LAW, atol=0.02)
    assert b.sizes.mean() == pytest.approx(sizes.mean(), rel=0.02)
    fit = fit_model(times, service_times=rng.exponential(0.1, 500), mean_useful_life_s=10.0, capacity=8)
    bmap = fit.model.arrivals[1]
    assert bmap.mean_batch_size == pytest.approx(float(BATCH_LAW @ np.arange(1, 9)), rel=0.03)
    assert bmap.batch_rate == pytest.approx(0.5, rel=0.05)
    assert fit.modes[0].rung == "poisson"  # the epochs are Poisson once the batches are found


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_mixture_finds_no_batches_in_poisson_traffic(seed: int) -> None:
    gaps = np.random.default_rng(seed).exponential(0.5, 20_000)
    mix = fit_gap_mixture(gaps)
    assert mix is not None and not mix.two_populations
    res = choose_batch_resolution(gaps)
    assert res.value == 0.0 and "nor two exponential populations" in res.reason


def test_mixture_finds_no_batches_in_bursty_unbatched_traffic() -> None:
    """A MAP with c^2 = 8.7 (bursts of short gaps, no batches): its H2 passes the likelihood ratio test but
    its two rates are too close for a clean valley."""
    bmap = BMAP.from_map(np.array([[-10.0, 1.0], [0.05, -0.1]]), np.array([[9.0, 0.0], [0.0, 0.05]]))
    gaps, _ = sample_bmap(bmap, 20_000, np.random.default_rng(6))
    mix = fit_gap_mixture(gaps)
    assert mix is not None and mix.lr_statistic > 20 and mix.overlap > 0.02 and not mix.two_populations
    assert choose_batch_resolution(gaps).value == 0.0
