"""The simulator's parts: controllers, reproducibility, stopping rules, input validation, the PH and
BMAP samplers, and the batch-means arithmetic."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from robotctl.agent import load_model_file
from robotctl.model import (
    BMAP,
    PH,
    EventKind,
    InputError,
    QueueModel,
    Simulation,
    StateFeedback,
    StopRule,
    ThresholdPolicy,
    random_model,
    simulate,
    simulate_events,
    simulate_horizon,
    solve,
)
from robotctl.model._sim_engine import Totals
from robotctl.model._sim_sources import BmapSource, sample_ph
from robotctl.model._sim_stats import estimate_from_batches

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"
OPTIMUM = ThresholdPolicy((3, 3, 3, 1, 1, 1))


@pytest.fixture(scope="module")
def paper() -> QueueModel:
    return load_model_file(str(EXAMPLE))[0]


# -- controllers ----------------------------------------------------------------------------------
def test_callable_controller_reproduces_the_policy_exactly(paper: QueueModel) -> None:
    r = OPTIMUM.robots_at_level
    seen: list[tuple[int, int, float]] = []

    def controller(queue_length: int, active: int, t: float) -> int:
        seen.append((queue_length, active, t))
        return r[queue_length]

    by_policy = Simulation(paper, OPTIMUM, np.random.default_rng(12))
    by_callable = Simulation(paper, controller, np.random.default_rng(12))
    by_policy.advance(20_000)
    by_callable.advance(20_000)
    assert np.array_equal(by_policy.totals(), by_callable.totals())
    assert len(seen) == 20_001  # once at t = 0, then after every event
    assert seen[0] == (0, 0, 0.0)
    assert all(b[2] >= a[2] for a, b in itertools.pairwise(seen))


class Recorder(StateFeedback):
    """A feedback controller that runs a threshold policy from the state after each event and records
    what it is shown."""

    def __init__(self, policy: ThresholdPolicy) -> None:
        self.r = policy.robots_at_level
        self.calls: list[tuple[EventKind, int, int, int, int, int, float]] = []

    def initial(self) -> int:
        return self.r[0]

    def decide(self, kind: EventKind, pages: int, before: int, after: int, active: int, phase: int,
               t: float) -> int:
        self.calls.append((kind, pages, before, after, active, phase, t))
        return self.r[after]


def test_state_feedback_sees_each_event_and_the_state_before_it(paper: QueueModel) -> None:
    """A StateFeedback controller that applies the policy reproduces the policy's run exactly, and what
    it is shown is consistent: a delivery of k pages to q admits min(k, K - q) (partial admission), a
    phase change without pages and the others move the queue by 0 and -1, and ``active`` is the mode it
    set at the previous event."""
    K = paper.capacity
    recorder = Recorder(OPTIMUM)
    by_policy = Simulation(paper, OPTIMUM, np.random.default_rng(12))
    by_feedback = Simulation(paper, recorder, np.random.default_rng(12))
    by_policy.advance(20_000)
    by_feedback.advance(20_000)
    assert np.array_equal(by_policy.totals(), by_feedback.totals())
    assert len(recorder.calls) == 20_000
    previous = OPTIMUM.robots_at_level[0]
    kinds = set()
    for kind, pages, before, after, active, phase, _ in recorder.calls:
        kinds.add((kind, pages > 0))
        assert active == previous and 0 <= phase < paper.arrivals.order
        if kind is EventKind.BMAP_TRANSITION:
            assert after == before + min(pages, K - before)
        else:
            assert pages == 0 and after == before - 1
        previous = OPTIMUM.robots_at_level[after]
    assert kinds == {(EventKind.BMAP_TRANSITION, True), (EventKind.BMAP_TRANSITION, False),
                     (EventKind.SERVICE_COMPLETION, False), (EventKind.OBSOLESCENCE, False)}


def test_time_driven_controller(paper: QueueModel) -> None:
    """A controller that ignores the queue and runs 3 robots until t = 100 s, then 1: after the
    warm-up the run is the static policy 1 and matches its exact measures."""
    sim = simulate_horizon(paper, lambda n, active, t: 3 if t < 100.0 else 1, np.random.default_rng(2),
                           horizon_s=20_000.0, warmup_s=200.0)
    assert sim.mean_active_robots.value == pytest.approx(1.0)
    comparison = sim.check(solve(paper, ThresholdPolicy.static(1, paper.capacity)).measures, familywise=True)
    assert comparison.all_inside, str(comparison)


def test_controller_returning_an_unknown_mode(paper: QueueModel) -> None:
    with pytest.raises(InputError, match=r"^controller: returned 7 active robots.*defined: \[1, 2, 3, 4\]"):
        Simulation(paper, lambda n, a, t: 7, np.random.default_rng(0))
    sim = Simulation(paper, lambda n, a, t: 2 if n < 3 else 0, np.random.default_rng(0))
    with pytest.raises(InputError, match=r"^controller: returned 0 active robots"):
        sim.advance(10_000)
    with pytest.raises(InputError, match=r"^controller: returned 1.5"):
        Simulation(paper, lambda n, a, t: 1.5, np.random.default_rng(0))  # type: ignore[arg-type,return-value]


def test_controller_must_be_a_policy_or_callable(paper: QueueModel) -> None:
    with pytest.raises(InputError, match=r"^controller: is a list, neither a QueueLengthPolicy, a StateFeedback"):
        Simulation(paper, [3, 3, 3, 1, 1, 1], np.random.default_rng(0))  # type: ignore[arg-type]


def test_policy_must_fit_the_model(paper: QueueModel) -> None:
    with pytest.raises(InputError, match=r"^policy: has 4 levels"):
        simulate_events(paper, ThresholdPolicy((3, 3, 1, 1)), np.random.default_rng(0), events=100)
    with pytest.raises(InputError, match=r"^policy: uses mode\(s\) \[5\]"):
        simulate_events(paper, ThresholdPolicy((5, 3, 3, 1, 1, 1)), np.random.default_rng(0), events=100)


# -- reproducibility and stopping rules -----------------------------------------------------------
def test_same_seed_same_result_other_seed_other_result(paper: QueueModel) -> None:
    a = simulate_events(paper, OPTIMUM, np.random.default_rng(99), events=5_000, batches=5)
    b = simulate_events(paper, OPTIMUM, np.random.default_rng(99), events=5_000, batches=5)
    c = simulate_events(paper, OPTIMUM, np.random.default_rng(100), events=5_000, batches=5)
    assert a.to_dict() == b.to_dict()
    assert a.p_loss.value != c.p_loss.value


def test_events_driver_counts_and_warmup(paper: QueueModel) -> None:
    sim = simulate_events(paper, OPTIMUM, np.random.default_rng(1), events=10_007, warmup_events=500,
                          batches=7)
    assert sim.stop is StopRule.EVENTS and sim.events == 10_007 and sim.warmup_events == 500
    assert sim.batches == 7 and sim.warmup_s > 0 and sim.duration_s > 0
    assert sim.pages_offered >= sim.pages_lost + sim.pages_served + sim.pages_obsolete - paper.capacity
    default = simulate_events(paper, OPTIMUM, np.random.default_rng(1), events=10_000, batches=5)
    assert default.warmup_events == 1_000


def test_horizon_driver_stops_on_time(paper: QueueModel) -> None:
    sim = simulate_horizon(paper, OPTIMUM, np.random.default_rng(1), horizon_s=1_000.0, batches=4)
    assert sim.stop is StopRule.HORIZON and sim.warmup_s == 100.0
    assert sim.duration_s == pytest.approx(1_000.0, abs=1e-9)
    # every second is at one queue length and in one mode
    engine = Simulation(paper, OPTIMUM, np.random.default_rng(1))
    engine.advance(t_end=123.25)
    z = engine.totals()
    L = engine.layout
    assert engine.t == 123.25
    assert z[L.QUEUE_TIME:L.mode_time].sum() == pytest.approx(123.25)
    assert z[L.mode_time:].sum() == pytest.approx(123.25)


def test_simulate_dispatches_on_the_stopping_rule(paper: QueueModel) -> None:
    by_events = simulate(paper, OPTIMUM, np.random.default_rng(1), events=2_000, warmup=100.0, batches=4)
    assert by_events.stop is StopRule.EVENTS and by_events.warmup_events == 100
    by_time = simulate(paper, OPTIMUM, np.random.default_rng(1), horizon_s=100.0, warmup=10.0, batches=4)
    assert by_time.stop is StopRule.HORIZON and by_time.warmup_s == 10.0


def test_progress_reaches_one(paper: QueueModel) -> None:
    fractions: list[float] = []
    simulate_events(paper, OPTIMUM, np.random.default_rng(1), events=30_000, warmup_events=0, batches=3,
                    on_progress=fractions.append)
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(fractions) >= 3


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"events": 10, "batches": 20}, "events"),
    ({"events": 1000, "batches": 1}, "batches"),
    ({"events": 0}, "events"),
    ({"events": 1000, "level": 1.0}, "level"),
    ({"events": 1000, "warmup_events": -1}, "warmup_events"),
])
def test_events_driver_rejects_bad_input(paper: QueueModel, kwargs: dict, field: str) -> None:
    with pytest.raises(InputError, match=f"^{field}: "):
        simulate_events(paper, OPTIMUM, np.random.default_rng(0), **kwargs)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"horizon_s": -1.0}, "horizon_s"),
    ({"horizon_s": float("inf")}, "horizon_s"),
    ({"horizon_s": 10.0, "warmup_s": float("nan")}, "warmup_s"),
])
def test_horizon_driver_rejects_bad_input(paper: QueueModel, kwargs: dict, field: str) -> None:
    with pytest.raises(InputError, match=f"^{field}: "):
        simulate_horizon(paper, OPTIMUM, np.random.default_rng(0), **kwargs)


def test_simulate_rejects_bad_input(paper: QueueModel) -> None:
    with pytest.raises(InputError, match=r"^events: give exactly one of events and horizon_s"):
        simulate(paper, OPTIMUM, np.random.default_rng(0), events=100, horizon_s=10.0)
    with pytest.raises(InputError, match=r"^events: give exactly one"):
        simulate(paper, OPTIMUM, np.random.default_rng(0))
    with pytest.raises(InputError, match=r"^warmup: counts events here"):
        simulate(paper, OPTIMUM, np.random.default_rng(0), events=100, warmup=2.5)
    with pytest.raises(InputError, match=r"^rng: must be a numpy.random.Generator"):
        simulate(paper, OPTIMUM, 7, events=100)  # type: ignore[arg-type]


# -- sources --------------------------------------------------------------------------------------
@pytest.mark.parametrize("law", [
    PH.exponential(2.5),
    PH.erlang(3, 4.0),
    PH(np.array([0.2, 0.8, 0.0]), np.array([[-3.0, 1.0, 0.0], [0.0, -0.5, 0.0], [2.0, 0.0, -2.0]])),
])
def test_ph_sampler_moments(law: PH) -> None:
    x = sample_ph(law, np.random.default_rng(5), 200_000)
    assert (x > 0).all()
    # 4.5 standard errors: two-sided false alarm below 1e-5 per check
    assert abs(x.mean() - law.mean) < 4.5 * np.sqrt(law.variance / x.size)
    m4 = law.moment(4)
    var_of_sq = m4 - law.moment(2) ** 2
    assert abs((x * x).mean() - law.moment(2)) < 4.5 * np.sqrt(var_of_sq / x.size)


def test_bmap_jump_tables() -> None:
    rng = np.random.default_rng(1)
    model = random_model(rng, arrival_order=3, modes=(1, 2), max_batch=2)
    source = BmapSource.from_arrivals(model.arrivals)
    assert source.offsets == {1: 0, 2: 3} and len(source.rows) == 6
    for mode, offset in source.offsets.items():
        bmap: BMAP = model.arrivals[mode]
        for nu in range(3):
            mean, cum, outcomes = source.rows[offset + nu]
            assert mean == pytest.approx(-1.0 / bmap.D0[nu, nu])
            assert cum[-1] == 1.0 and list(cum) == sorted(cum)
            probs = np.diff((0.0, *cum))
            for p, (k, nu2) in zip(probs, outcomes, strict=True):
                assert p == pytest.approx(bmap.D[k][nu, nu2] * mean)
                assert (k, nu2) != (0, nu)


# -- batch means ----------------------------------------------------------------------------------
def test_batch_means_interval_is_the_t_interval() -> None:
    """With batches of equal length the arrival-rate estimate is the mean of the batch rates and its
    interval is Student's t interval of those batch values (an independent route: scipy.stats)."""
    layout = Totals(capacity=2, max_mode=1)
    rng = np.random.default_rng(0)
    b = 12
    Z = np.zeros((b, layout.size))
    Z[:, Totals.TIME] = 10.0
    Z[:, Totals.OFFERED] = rng.poisson(50, b)
    Z[:, Totals.SERVED] = Z[:, Totals.OFFERED]
    Z[:, Totals.SOJOURN_SERVED] = Z[:, Totals.OFFERED] * rng.uniform(1, 2, b)
    Z[:, layout.QUEUE_TIME] = 10.0
    Z[:, layout.mode_time + 1] = 10.0
    res = estimate_from_batches(Z, layout, (1,), level=0.95, stop=StopRule.EVENTS, warmup_events=0,
                                warmup_s=0.0)
    rates = Z[:, Totals.OFFERED] / 10.0
    low, high = stats.t.interval(0.95, b - 1, loc=rates.mean(), scale=stats.sem(rates))
    assert res.arrival_rate.value == pytest.approx(rates.mean())
    assert res.arrival_rate.low == pytest.approx(low) and res.arrival_rate.high == pytest.approx(high)
    assert res.p_starvation.value == 1.0 and res.p_starvation.half_width == pytest.approx(0.0, abs=1e-12)
    # a ratio estimate is the ratio of the totals, not the mean of the batch ratios
    assert res.mean_response_served.value == pytest.approx(Z[:, Totals.SOJOURN_SERVED].sum() / Z[:, 5].sum())
    wide = res.at_level(0.999)
    q = stats.t.ppf(0.9995, b - 1) / stats.t.ppf(0.975, b - 1)
    assert wide.arrival_rate.half_width == pytest.approx(q * res.arrival_rate.half_width)
    assert wide.arrival_rate.value == res.arrival_rate.value


def test_ratio_interval_covers_at_its_level() -> None:
    """Coverage of the delta-method interval on independent batches with random denominators: over
    1000 synthetic runs the 90% interval holds the true ratio 90% of the time (binomial bounds at
    4.5 standard deviations)."""
    layout = Totals(capacity=1, max_mode=1)
    rng = np.random.default_rng(42)
    runs, b, truth = 1000, 20, 0.3
    hits = 0
    for _ in range(runs):
        Z = np.zeros((b, layout.size))
        offered = rng.poisson(400, b).astype(float)
        Z[:, Totals.TIME] = 1.0
        Z[:, Totals.OFFERED] = offered
        Z[:, Totals.LOST] = rng.binomial(offered.astype(int), truth)
        res = estimate_from_batches(Z, layout, (1,), level=0.9, stop=StopRule.EVENTS, warmup_events=0,
                                    warmup_s=0.0)
        hits += res.p_loss.contains(truth)
    sd = np.sqrt(runs * 0.9 * 0.1)
    assert abs(hits - 0.9 * runs) < 4.5 * sd


def test_undefined_measures_are_reported() -> None:
    layout = Totals(capacity=1, max_mode=1)
    Z = np.zeros((3, layout.size))
    Z[:, Totals.TIME] = 1.0
    Z[:, layout.QUEUE_TIME] = 1.0
    res = estimate_from_batches(Z, layout, (1,), level=0.99, stop=StopRule.EVENTS, warmup_events=0,
                                warmup_s=0.0)
    assert not res.success and "p_loss" in res.message and "mean_response_served" in res.message
    assert np.isnan(res.p_loss.value)
    with pytest.raises(InputError, match=r"^batches: needs at least 2"):
        estimate_from_batches(Z[:1], layout, (1,), level=0.99, stop=StopRule.EVENTS, warmup_events=0,
                              warmup_s=0.0)


def test_estimate_lookup_and_level(paper: QueueModel) -> None:
    sim = simulate_events(paper, OPTIMUM, np.random.default_rng(1), events=3_000, batches=3)
    assert sim.estimate("p_loss") is sim.p_loss
    assert sim.cost is None and "cost" not in sim.measure_names
    with pytest.raises(InputError, match=r"^name: 'cost' is not an estimated measure"):
        sim.estimate("cost")
    with pytest.raises(InputError, match=r"^level: must lie strictly between 0 and 1"):
        sim.at_level(0.0)
