"""cold_start_model: exact intervals that cover at their level, a model built from a few dozen deliveries,
and a policy optimised under its pessimistic end that controls the flood of the start-up fleet (issue 28)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robotctl import InputError
from robotctl.fitting import cold_start_model, exponential_rate_interval, poisson_rate_interval
from robotctl.model import BMAP, PH, Costs, ModeArrivals, QueueModel, ThresholdPolicy, cost_of, solve
from robotctl.policies import optimise


def _covers(level: float, hits: int, trials: int) -> bool:
    """Exact intervals cover at least at their level: the hit rate is not three standard errors below."""
    return hits / trials >= level - 3.0 * math.sqrt(level * (1 - level) / trials)


@pytest.mark.parametrize(("count", "lower", "upper"), [(0, 0.0, 2.996), (1, 0.0513, 4.744), (10, 5.425, 16.962),
                                                        (30, 21.59, 40.69)])
def test_poisson_interval_matches_the_published_table(count: int, lower: float, upper: float) -> None:
    """Garwood's 90% limits for a Poisson count as printed in the usual tables of exact Poisson limits
    (exposure 1; the tolerance is the tables' rounding)."""
    iv = poisson_rate_interval(count, 1.0, 0.9)
    assert iv.lower == pytest.approx(lower, abs=5e-3)
    assert iv.upper == pytest.approx(upper, abs=5e-3)


def test_poisson_interval_covers_at_its_level() -> None:
    rng = np.random.default_rng(21)
    trials, rate, T = 2000, 0.7, 50.0
    hits = 0
    for n in rng.poisson(rate * T, trials):
        iv = poisson_rate_interval(int(n), T, 0.9)
        hits += iv.lower <= rate <= iv.upper
    assert _covers(0.9, hits, trials)
    assert hits / trials < 0.97  # not vacuous: the interval is not the whole line


def test_exponential_interval_covers_at_its_level() -> None:
    rng = np.random.default_rng(22)
    trials, mu = 2000, 5.0
    hits = sum(iv.lower <= mu <= iv.upper
               for iv in (exponential_rate_interval(rng.exponential(1 / mu, 20), 0.9) for _ in range(trials)))
    assert _covers(0.9, hits, trials)
    assert hits / trials < 0.94


def _truth(K: int = 20, N: int = 8) -> QueueModel:
    bmaps = {m: BMAP.poisson(0.5 * m, [0.6, 0.3, 0.1]) for m in range(1, N + 1)}
    return QueueModel(K, ModeArrivals.per_mode(bmaps), PH.exponential(3.0), PH.exponential(1 / 30.0))


def _first_deliveries(rng: np.random.Generator, truth: QueueModel, n: int, mode: int
                      ) -> tuple[np.ndarray, float, np.ndarray]:
    """``n`` batches of the truth's mode ``mode`` (Poisson), the seconds they took, and 20 service times."""
    b = truth.arrivals[mode]
    gaps = rng.exponential(1 / b.batch_rate, n)
    pages = rng.choice(np.arange(1, b.max_batch + 1), size=n, p=b.batch_size_probs)
    return pages, float(gaps.sum()), rng.exponential(truth.service.mean, 20)


def test_model_from_thirty_deliveries_brackets_the_truth() -> None:
    truth = _truth()
    rng = np.random.default_rng(23)
    trials, hits = 300, 0
    for _ in range(trials):
        pages, seconds, svc = _first_deliveries(rng, truth, 30, 8)
        fit = cold_start_model(20, 8, pages, [8] * 30, {8: seconds}, service_times=svc,
                               mean_useful_life_s=30.0)
        lo = fit.optimistic.arrivals[8].batch_rate
        hi = fit.pessimistic.arrivals[8].batch_rate
        hits += lo <= truth.arrivals[8].batch_rate <= hi
        assert fit.model.modes == tuple(range(1, 9))
        assert fit.pessimistic.service.mean >= fit.model.service.mean >= fit.optimistic.service.mean
    assert _covers(0.9, hits, trials)


def test_policy_under_the_pessimistic_end_beats_the_startup_fleet() -> None:
    """From 30 deliveries of the start-up fleet (every robot active), the optimum under the pessimistic
    model, costed exactly under the truth, is far cheaper than the start-up fleet and within reach of the
    truth's optimum: the cold start is worth running."""
    truth = _truth()
    costs = Costs(loss=5, obsolescence=10, response=2, robot=1, starvation=30)
    best = optimise(truth, costs).best.cost.total
    startup = cost_of(solve(truth, ThresholdPolicy.static(8, 20)).measures, costs).total
    rng = np.random.default_rng(24)
    ratios = []
    for _ in range(12):
        pages, seconds, svc = _first_deliveries(rng, truth, 30, 8)
        fit = cold_start_model(20, 8, pages, [8] * 30, {8: seconds}, service_times=svc, mean_useful_life_s=30.0)
        chosen = optimise(fit.pessimistic, costs).best.policy
        ratios.append(cost_of(solve(truth, chosen).measures, costs).total / best)
    assert startup / best > 2.0
    assert np.median(ratios) < 1.25
    assert max(ratios) < startup / best


def test_sizes_and_processing_rate_give_the_service() -> None:
    fit = cold_start_model(5, 2, [1, 1, 1], [2, 2, 2], {2: 3.0}, sizes_bytes=[1000.0, 3000.0],
                           processing_rate_bps=1000.0)
    assert fit.model.service.mean == pytest.approx(2.0)


def test_useful_life_from_drops() -> None:
    fit = cold_start_model(5, 2, [1, 1, 1], [2, 2, 2], {2: 3.0}, service_times=[0.1], obsolete_drops=2,
                           obsolete_exposure_s=40.0)
    assert fit.useful_life_s == pytest.approx(20.0)
    assert fit.model.obsolescence is not None


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"capacity": 0}, "capacity"),
    ({"robots": 0}, "robots"),
    ({"pages": [1, 0, 1]}, "pages"),
    ({"mode_exposure_s": {2: 0.0}}, "mode_exposure_s"),
    ({"service_times": None}, "service_times"),
    ({"level": 1.0}, "level"),
])
def test_bad_input_names_the_field(kwargs: dict, field: str) -> None:
    args = {"capacity": 5, "robots": 2, "pages": [1, 1, 1], "modes": [2, 2, 2], "mode_exposure_s": {2: 3.0},
            "service_times": [0.1, 0.2], **kwargs}
    with pytest.raises(InputError) as err:
        cold_start_model(args.pop("capacity"), args.pop("robots"), args.pop("pages"), args.pop("modes"),
                         args.pop("mode_exposure_s"), **args)
    assert err.value.field == field
