"""The Agent's parts alone (issue 22): the log's lines read back by the trace reader, and the mode history."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from robotctl.agent.api import Completion, Delivery
from robotctl.agent.modes import ModeHistory
from robotctl.agent.trace import EVENT_KINDS, TraceWriter, parse_event

robots = st.one_of(st.none(), st.text(min_size=1, max_size=8))
times = st.floats(min_value=0, max_value=1e9, allow_nan=False)


@given(t=times, robot=robots, pages=st.integers(1, 50), admitted=st.integers(0, 50),
       nbytes=st.one_of(st.none(), st.integers(0, 10**9)), client=st.one_of(st.none(), times))
def test_delivery_lines_read_back(t: float, robot: str | None, pages: int, admitted: int, nbytes: int | None,
                                  client: float | None) -> None:
    admitted = min(admitted, pages)
    text = TraceWriter().deliveries(t, [Delivery(robot, pages, nbytes, client)], [admitted], 3)
    lines = text.splitlines()
    assert len(lines) == (1 if admitted == pages else 2) and text.endswith("\n")
    first = json.loads(lines[0])
    ev = parse_event(first)
    assert (ev.t, ev.event, ev.robot, ev.pages, ev.bytes) == (t, "delivery", robot, pages, nbytes)
    assert first["active"] == 3 and first.get("client_t") == client
    if len(lines) == 2:
        loss = parse_event(json.loads(lines[1]))
        assert (loss.event, loss.pages, loss.robot) == ("loss", pages - admitted, robot)


@given(t=times, pages=st.integers(1, 9), service=st.one_of(st.none(), st.floats(0, 1e6)),
       nbytes=st.one_of(st.none(), st.integers(0, 10**9)))
def test_completion_lines_read_back(t: float, pages: int, service: float | None, nbytes: int | None) -> None:
    ev = parse_event(json.loads(TraceWriter().completions(t, [Completion(pages, service, nbytes)])))
    assert (ev.t, ev.event, ev.pages, ev.service_s, ev.bytes) == (t, "completion", pages, service, nbytes)


def test_every_line_kind_is_one_the_reader_knows() -> None:
    w = TraceWriter()
    lines = [w.queue(1.0, 4, 2), w.obsolete(1.0, 2), w.switch(1.0, True, 3), w.switch(1.0, False, 2, "r-1"),
             w.policy(1.0, 7, "fit", (3, 2, 1), "thresholds"), w.refit(1.0, 'drift "mode=2"'), w.given_up(1.0, 3)]
    kinds = [json.loads(x)["event"] for x in lines]
    assert kinds == ["queue", "obsolete", "resume", "park", "policy", "refit", "given_up"]
    assert parse_event(json.loads(lines[6])).pages == 3
    assert set(kinds) <= set(EVENT_KINDS)
    assert json.loads(lines[3])["robot"] == "r-1" and json.loads(lines[5])["reason"] == 'drift "mode=2"'


def test_mode_history_exposure_and_changes() -> None:
    h = ModeHistory(0.0, 3, keep_s=100.0)
    h.record(2.0, 2)
    h.record(5.0, 2)  # no change
    h.record(7.0, 1)
    assert h.exposure(1.0, 10.0) == pytest.approx({3: 1.0, 2: 5.0, 1: 3.0})
    changes = h.changes(1.0, 10.0)
    assert changes is not None
    epochs, modes = changes
    assert np.array_equal(epochs, [1.0, 2.0, 7.0]) and np.array_equal(modes, [3, 2, 1])
    h.record(300.0, 2)  # the stretches older than keep_s go
    assert h.changes(1.0, 301.0) is None
    assert h.exposure(290.0, 301.0) == pytest.approx({1: 10.0, 2: 1.0})


def test_a_drain_counts_a_parked_robot_until_its_last_delivery() -> None:
    """Robots 2 and 3 parked at 10 s deliver at 11, 11.5 (robot 3) and 12.5 (robot 2): the fleet ran 3
    robots until 11.5 s, 2 until 12.5 s, then 1; each delivery counts in the mode it extends."""
    h = ModeHistory(0.0, 3, keep_s=100.0)
    h.record(10.0, 1)
    h.drained(11.0, 3, 10.0)
    h.drained(11.5, 3, 10.0)
    h.drained(12.5, 2, 10.0)
    h.drained(12.0, 2, -5.0)  # a park before the record: not known, ignored
    assert h.exposure(0.0, 20.0) == pytest.approx({3: 11.5, 2: 1.0, 1: 7.5})
    changes = h.changes(5.0, 20.0)
    assert changes is not None
    assert np.array_equal(changes[0], [5.0, 11.5, 12.5]) and np.array_equal(changes[1], [3, 2, 1])
    modes = h.at(np.array([5.0, 10.0, 11.0, 11.5, 12.0, 12.5, 13.0]))
    assert modes is not None and list(modes) == [3, 3, 3, 3, 2, 2, 1]
    assert h.at(np.array([-1.0])) is None


@given(st.lists(st.tuples(st.floats(0.0, 50.0), st.integers(0, 5)), min_size=1, max_size=8),
       st.lists(st.tuples(st.integers(1, 5), st.floats(0.0, 50.0), st.floats(0.0, 20.0)), max_size=6),
       st.lists(st.floats(0.0, 80.0, exclude_min=True), min_size=1, max_size=20))
def test_the_fleets_mode_is_the_commanded_one_plus_the_drains_under_way(
        records: list[tuple[float, int]], drains: list[tuple[int, float, float]], probes: list[float]) -> None:
    """ModeHistory.at, changes and exposure against the definition, time by time: the mode commanded just
    before then, plus one for each (robot, park) parked before then whose last delivery since is not
    before then."""
    h = ModeHistory(0.0, 2, keep_s=1e9)
    commanded = [(0.0, 2)]
    for t, m in sorted(records):
        h.record(t, m)
        if commanded[-1][0] == t:  # a change at the same instant replaces the earlier one
            commanded.pop()
        commanded.append((t, m))
    last: dict[tuple[int, float], float] = {}
    for slot, parked, length in drains:
        h.drained(parked + length, slot, parked)
        last[(slot, parked)] = max(last.get((slot, parked), -1.0), parked + length)

    def mode_at(t: float) -> int:
        base = ([m for s, m in commanded if s < t] or [commanded[0][1]])[-1]
        return base + sum(1 for (_, p), end in last.items() if p < t <= end)

    times = np.array(sorted(probes))
    got = h.at(times)
    assert got is not None and list(got) == [mode_at(float(t)) for t in times]
    changes = h.changes(0.0, 80.0)
    assert changes is not None
    epochs, modes = changes
    for t in times:
        k = max(int(np.searchsorted(epochs, t, side="left")) - 1, 0)
        assert modes[k] == mode_at(float(t))
    exposure = h.exposure(0.0, 80.0)
    assert sum(exposure.values()) == pytest.approx(80.0)
