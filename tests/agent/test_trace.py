"""The trace writer's hand-built JSON is exactly json.dumps's, and reads back to the same event."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotctl import InputError
from robotctl.agent import trace
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
    if ev.pages != 1 or ev.event in ("delivery", "obsolete", "loss", "given_up"):
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


# -- the fast reader (msgspec) against the line-by-line one ---------------------------------------------

def _same_arrays(a: Any, b: Any) -> None:
    for name in ("t", "event", "pages", "bytes", "service_s", "line"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        np.testing.assert_array_equal(x, y, err_msg=name)
    assert a.extra.keys() == b.extra.keys()
    for key in a.extra:
        np.testing.assert_array_equal(a.extra[key], b.extra[key], err_msg=key)
    assert dict(a.notes) == dict(b.notes)


@settings(max_examples=60, deadline=None)
@given(st.lists(events, min_size=1, max_size=30))
def test_fast_reader_gives_the_slow_readers_columns(rows: list[TraceEvent]) -> None:
    rows = [r if r.event not in ("refit", "policy") else
            TraceEvent(r.t, r.event, r.robot, r.pages, r.bytes, r.service_s,
                       {"reason": "interval"} if r.event == "refit" else {"robots_at_level": [3, 1], "version": 2})
            for r in rows]
    data = "".join(r.to_json() + "\n" for r in rows).encode()
    extras = ("active", "client_t")
    try:
        slow = trace._slow_arrays(data.decode(), "x.jsonl", extras, False)
    except InputError as exc:  # text in a numeric extra: the same error by either route
        with pytest.raises(InputError) as info:
            trace.read_trace_arrays("x.jsonl", extra_fields=extras, data=data)
        assert str(info.value) == str(exc)
        return
    fast = trace._fast_jsonl(data, "x.jsonl", extras)
    numeric_extras = all(isinstance(v, int | float) for r in rows for k, v in r.extra.items() if k in extras)
    if numeric_extras:
        assert fast is not None, "a well-formed trace must take the fast path"
    if fast is not None:
        _same_arrays(fast, slow)
    _same_arrays(trace.read_trace_arrays("x.jsonl", extra_fields=extras, data=data), slow)


@pytest.mark.parametrize(("line", "field"), [
    ('{"t": "soon", "event": "delivery"}', "x.jsonl:2.t"),
    ('{"t": 2, "event": "teleport"}', "x.jsonl:2.event"),
    ('{"t": 2, "pages": 0}', "x.jsonl:2.pages"),
    ('{"t": 2, "pages": 1.5}', "x.jsonl:2.pages"),
    ('{"t": 2, "bytes": -1}', "x.jsonl:2.bytes"),
    ('{"event": "delivery"}', "x.jsonl:2.t"),
    ('{"t": 2, "active": "many"}', "x.jsonl:2.active"),
    ('{"t": 2,', "x.jsonl:2"),
])
def test_a_bad_line_is_named_by_file_line_and_field(line: str, field: str) -> None:
    data = ('{"t": 1, "event": "delivery"}\n' + line + "\n").encode()
    with pytest.raises(InputError) as info:
        trace.read_trace_arrays("x.jsonl", extra_fields=("active",), data=data)
    assert info.value.field == field
