"""Queue view (partial admission, FIFO sojourns, obsolete drops, resync) and observation windows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robotctl.agent.queue import QueueView, Window, observed_measures
from robotctl.model import Admission, Costs


def test_partial_admission_counts_the_overflow_as_lost() -> None:
    q = QueueView(5)
    out = q.preview([2, 4, 1])
    assert [(a.admitted, a.lost, a.length_after) for a in out] == [(2, 0, 2), (3, 1, 5), (0, 1, 5)]
    assert q.length == 0  # preview changes nothing


def test_reject_batch_loses_the_whole_delivery() -> None:
    q = QueueView(5, Admission.REJECT_BATCH)
    assert [(a.admitted, a.lost) for a in q.preview([4, 2, 1])] == [(4, 0), (0, 2), (1, 0)]


def test_completions_are_fifo_and_yield_sojourns() -> None:
    q = QueueView(10)
    q.admit(2, now=1.0)
    q.admit(1, now=3.0)
    removed, total = q.complete(2, now=5.0)
    assert removed == 2 and total == pytest.approx(2 * 4.0)
    removed, total = q.complete(5, now=6.0)  # more than there is: only what is there
    assert removed == 1 and total == pytest.approx(3.0)
    assert q.length == 0


def test_obsolete_drops_never_take_the_page_in_service() -> None:
    q = QueueView(10)
    q.admit(1, now=0.0)
    assert q.drop_obsolete(1) == 0  # only the page in service
    q.admit(2, now=1.0)
    assert q.drop_obsolete(5) == 2
    removed, total = q.complete(1, now=2.0)
    assert removed == 1 and total == pytest.approx(2.0)  # the page in service (arrived at 0) was served


def test_resync_sets_the_length() -> None:
    q = QueueView(5)
    q.admit(4, now=0.0)
    assert q.resync(1, now=1.0) == -3 and q.length == 1
    assert q.resync(3, now=2.0) == 2 and q.length == 3
    removed, total = q.complete(3, now=4.0)
    assert removed == 3 and total == pytest.approx(4.0 + 2 * 2.0)


def _brute(events: list[tuple[float, str, str, float]], now: float, span: float, width: float) -> dict[str, float]:
    """Exact sums over the window [lo * width, now], lo the first bucket inside (now - span, now]."""
    lo_t = (math.floor((now - span) / width) + 1) * width
    out: dict[str, float] = {}
    levels: dict[str, tuple[float, float]] = {}
    for t, kind, key, x in events:
        if kind == "add":
            if t >= lo_t:
                out[key] = out.get(key, 0.0) + x
        else:
            if key in levels:
                t0, lvl = levels[key]
                a, b = max(t0, lo_t), t
                if b > a:
                    out[key] = out.get(key, 0.0) + lvl * (b - a)
            levels[key] = (t, x)
    for key, (t0, lvl) in levels.items():
        a = max(t0, lo_t)
        if now > a:
            out[key] = out.get(key, 0.0) + lvl * (now - a)
    return {k: v for k, v in out.items() if v != 0.0}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_window_matches_exact_sums_over_its_buckets(seed: int) -> None:
    rng = np.random.default_rng(seed)
    span, buckets = 10.0, 20
    w = Window(span, buckets)
    t = 0.0
    events = []
    for _ in range(400):
        t += float(rng.exponential(0.2 if rng.random() < 0.9 else 5.0))
        if rng.random() < 0.5:
            key, x = str(rng.choice(["a", "b"])), float(rng.integers(1, 5))
            w.add(t, key, x)
            events.append((t, "add", key, x))
        else:
            key, x = str(rng.choice(["h", "g"])), float(rng.integers(0, 4))
            w.hold(t, key, x)
            events.append((t, "hold", key, x))
        if rng.random() < 0.1:
            now = t + float(rng.uniform(0, 3))
            got = {k: v for k, v in w.totals(now).items() if v != 0.0}
            want = _brute(events, now, span, span / buckets)
            assert got.keys() == want.keys()
            for k in want:
                assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-9)


def test_observed_measures_from_window_totals() -> None:
    totals = {"time": 100.0, "offered": 50.0, "lost": 5.0, "obsolete": 10.0, "served": 30.0,
              "sojourn_sum": 60.0, "empty_time": 25.0, "active_time": 250.0}
    costs = Costs(loss=1, obsolescence=2, response=3, robot=4, starvation=5)
    o = observed_measures(totals, costs)
    assert (o.arrival_rate, o.p_loss, o.p_obsolete, o.p_starvation) == (0.5, 0.1, 0.2, 0.25)
    assert (o.mean_active_robots, o.mean_response_served) == (2.5, 2.0)
    assert o.cost == pytest.approx(0.5 * (1 * 0.1 + 2 * 0.2) + 3 * 2.0 + 4 * 2.5 + 5 * 0.25)
    empty = observed_measures({}, costs)
    assert math.isnan(empty.p_loss) and empty.to_dict()["p_loss"] is None
