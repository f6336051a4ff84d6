"""The simulator's trace: the queue and the robots rebuilt from the rows alone agree with the engine, the
policy is obeyed at every event, and recording does not change the run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from robotctl.agent import load_model_file
from robotctl.model import (
    Admission,
    Simulation,
    ThresholdPolicy,
    TraceKind,
    TraceRow,
    iter_simulate,
    random_model,
    simulate_events,
)
from robotctl.model._sim_engine import Totals

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"


def replay(rows: tuple[TraceRow, ...], capacity: int, policy: ThresholdPolicy, admission: Admission
           ) -> dict[str, float]:
    """Rebuild queue length and active robots from the rows; assert what must hold on the way."""
    n = active = target = 0
    t = 0.0
    counts = {"offered": 0, "lost": 0, "served": 0, "obsolete": 0, "service_s": 0.0}
    r = policy.robots_at_level
    for i, row in enumerate(rows):
        assert row.t >= t, f"row {i} goes back in time"
        t = row.t
        if row.kind is TraceKind.RESUME:
            active += 1
            assert row.robot == active and row.active >= active  # row.active: the count after the switch
            target = row.active
            continue
        if row.kind is TraceKind.PARK:
            assert row.robot == active and row.active < active  # the highest-ranked robot parks first
            active -= 1
            target = row.active
            continue
        assert row.active == active == target, f"row {i}: active {row.active} but {active} robots resumed"
        if row.kind is TraceKind.LOSS:
            assert rows[i - 1].kind is TraceKind.DELIVERY and rows[i - 1].t == row.t
            n -= row.pages
            counts["lost"] += row.pages
            if admission is Admission.PARTIAL:
                assert n == capacity  # what fits was kept
            else:
                assert row.pages == rows[i - 1].pages  # the batch was lost whole
            continue
        assert active == r[n], f"row {i}: {active} robots active with {n} pages, policy says {r[n]}"
        if row.kind is TraceKind.DELIVERY:
            assert row.robot is not None and 1 <= row.robot <= active and row.pages >= 1
            n += row.pages
            counts["offered"] += row.pages
        elif row.kind is TraceKind.COMPLETION:
            assert row.service_s is not None and 0 < row.service_s <= row.t
            n -= 1
            counts["served"] += 1
            counts["service_s"] += row.service_s
        else:
            assert row.kind is TraceKind.OBSOLETE
            n -= 1
            counts["obsolete"] += 1
        if not (i + 1 < len(rows) and rows[i + 1].kind is TraceKind.LOSS):
            assert 0 <= n <= capacity
    counts["n"] = n
    counts["active"] = active
    return counts


@pytest.mark.parametrize("admission", [Admission.PARTIAL, Admission.REJECT_BATCH])
def test_trace_rebuilds_the_run(admission: Admission) -> None:
    model, _ = load_model_file(str(EXAMPLE))
    model = type(model)(model.capacity, model.arrivals, model.service, model.obsolescence, admission)
    policy = ThresholdPolicy((3, 3, 3, 1, 1, 1))
    sim = Simulation(model, policy, np.random.default_rng(8), record=True)
    sim.advance(30_000)
    rows = sim.take_rows()
    got = replay(rows, model.capacity, policy, admission)
    z = sim.totals()
    assert got["offered"] == z[Totals.OFFERED] and got["lost"] == z[Totals.LOST]
    assert got["served"] == z[Totals.SERVED] and got["obsolete"] == z[Totals.OBSOLETE]
    assert got["n"] == sim.n and got["active"] == sim.mode
    kinds = {row.kind for row in rows}
    assert kinds == set(TraceKind)
    assert sim.take_rows() == ()


def test_mean_service_time_in_trace_matches_the_law() -> None:
    model, _ = load_model_file(str(EXAMPLE))
    sim = Simulation(model, ThresholdPolicy((3, 3, 3, 1, 1, 1)), np.random.default_rng(9), record=True)
    sim.advance(100_000)
    times = np.array([r.service_s for r in sim.take_rows() if r.kind is TraceKind.COMPLETION])
    se = np.sqrt(model.service.variance / times.size)
    assert abs(times.mean() - model.service.mean) < 4.5 * se  # two-sided, P(false alarm) < 1e-5


def test_recording_does_not_change_the_run() -> None:
    rng = np.random.default_rng(3)
    model = random_model(rng, capacity=4)
    policy = ThresholdPolicy((3, 3, 2, 1, 1))
    plain = Simulation(model, policy, np.random.default_rng(4))
    recorded = Simulation(model, policy, np.random.default_rng(4), record=True)
    plain.advance(20_000)
    recorded.advance(20_000)
    assert np.array_equal(plain.totals(), recorded.totals())
    assert len(recorded.take_rows()) > 0 and plain.take_rows() == ()


def test_streamed_rows_equal_kept_rows() -> None:
    model, _ = load_model_file(str(EXAMPLE))
    policy = ThresholdPolicy((3, 3, 3, 1, 1, 1))
    kept = simulate_events(model, policy, np.random.default_rng(6), events=3_000, batches=3, trace=True)
    chunks: list[tuple[TraceRow, ...]] = []
    streamed = simulate_events(model, policy, np.random.default_rng(6), events=3_000, batches=3,
                               on_trace=chunks.append)
    assert streamed.trace == () and len(chunks) >= 2
    assert tuple(row for chunk in chunks for row in chunk) == kept.trace
    assert kept.trace[0] == TraceRow(0.0, TraceKind.RESUME, 1, 1, None, 3)
    assert streamed.to_dict() == kept.to_dict()


def test_iter_simulate_hands_over_rows_and_returns_the_result() -> None:
    model, _ = load_model_file(str(EXAMPLE))
    policy = ThresholdPolicy((3, 3, 3, 1, 1, 1))
    kept = simulate_events(model, policy, np.random.default_rng(6), events=3_000, batches=3, trace=True)
    steps = iter_simulate(model, policy, np.random.default_rng(6), events=3_000, batches=3, trace=True)
    rows: list[TraceRow] = []
    fractions: list[float] = []
    while True:
        try:
            fraction, chunk = next(steps)
        except StopIteration as stop:
            result = stop.value
            break
        fractions.append(fraction)
        rows.extend(chunk)
    assert tuple(rows) == kept.trace and result.trace == ()
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert result.to_dict() == kept.to_dict()
