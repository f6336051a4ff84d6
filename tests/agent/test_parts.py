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
