"""The trace writer's hand-built JSON is exactly json.dumps's, and reads back to the same event."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from robotctl.agent.trace import EVENT_KINDS, TraceEvent, parse_event, read_trace, write_trace

events = st.builds(
    TraceEvent,
    t=st.floats(min_value=0, max_value=1e9, allow_nan=False),
    event=st.sampled_from(EVENT_KINDS),
    robot=st.one_of(st.none(), st.text(min_size=1, max_size=8)),  # "" reads back as no robot
    pages=st.integers(1, 1000),
    bytes=st.one_of(st.none(), st.integers(0, 10**12)),
    service_s=st.one_of(st.none(), st.floats(min_value=0, max_value=1e6, allow_nan=False)),
    extra=st.dictionaries(st.sampled_from(["active", "client_t", "note"]),
                          st.one_of(st.integers(0, 64), st.floats(0, 10, allow_nan=False), st.text(max_size=5)),
                          max_size=2),
)


def reference(ev: TraceEvent) -> str:
    d: dict = {"t": ev.t, "event": ev.event}
    if ev.robot is not None:
        d["robot"] = ev.robot
    if ev.pages != 1 or ev.event in ("delivery", "obsolete", "loss"):
        d["pages"] = ev.pages
    if ev.bytes is not None:
        d["bytes"] = ev.bytes
    if ev.service_s is not None:
        d["service_s"] = ev.service_s
    d.update(ev.extra)
    return json.dumps(d, separators=(",", ":"))


@given(events)
def test_to_json_is_json_dumps(ev: TraceEvent) -> None:
    assert ev.to_json() == reference(ev)
    back = parse_event(json.loads(ev.to_json()))
    assert (back.t, back.event, back.robot, back.pages, back.bytes, back.service_s) == (
        ev.t, ev.event, ev.robot, ev.pages, ev.bytes, ev.service_s)


def test_write_and_read_back(tmp_path: Path) -> None:
    rows = [TraceEvent(0.5, "delivery", "1", 3, 2048, None, {"active": 2}),
            TraceEvent(1.25, "completion", None, 1, None, 0.75),
            TraceEvent(2.0, "park", "2", 1, None, None, {"active": 1})]
    path = tmp_path / "t.jsonl"
    assert write_trace(path, rows) == 3
    assert read_trace(path) == rows
