"""Issue 26: the fast paths of parse_deliveries (an item of the common shape; a batch of them, checked a column at a
time) and of parse_delivery_body (a body decoded and checked by msgspec) accept and refuse exactly as the checks
do; a batch's log lines and samples are its deliveries' one by one."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from robotctl._errors import InputError
from robotctl.agent._http import delivery_ack, dumps
from robotctl.agent.api import (
    MAX_ID_LENGTH,
    Delivery,
    parse_deliveries,
    parse_delivery_body,
    parse_json,
    robot_id,
)
from robotctl.agent.samples import Ring
from robotctl.agent.trace import TraceWriter


def _valid(rid: str) -> bool:
    try:
        robot_id("robot", rid)
    except InputError:
        return False
    return True


ids = st.one_of(st.text(max_size=6), st.text(min_size=MAX_ID_LENGTH - 1, max_size=MAX_ID_LENGTH + 2),
                st.sampled_from(["r1", "r2", "\x00", "", "a\nb"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(ids, min_size=1, max_size=6), st.booleans())
def test_unregistered_ids_follow_the_checks(rids: list[str], allow: bool) -> None:
    body = {"deliveries": [{"robot": r, "pages": 1 + k % 2} for k, r in enumerate(rids)]}
    registered = {"r1"}
    bad = [n for n, r in enumerate(rids) if not _valid(r) or (not allow and r not in registered)]
    if bad:
        with pytest.raises(InputError) as exc:
            parse_deliveries(body, max_batch=100, registered=registered, allow_unregistered=allow)
        assert exc.value.field == f"deliveries[{bad[0]}].robot"
    else:
        out = parse_deliveries(body, max_batch=100, registered=registered, allow_unregistered=allow)
        assert [d.robot for d in out] == rids and [d.pages for d in out] == [1 + k % 2 for k in range(len(rids))]


# -- the column path of a batch: what each item alone gives, checked a column at a time -------------------
values = st.one_of(st.none(), st.booleans(), st.integers(-3, 5), st.sampled_from([10**7, 1 << 51, 10**30]),
                   st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1.5, -2.0, 1e13, 1e300]),
                   st.text(max_size=3), st.sampled_from(["r1", "r2"]), st.lists(st.integers(), max_size=1))
# the common shape, now and then with one value just outside it (NaN and infinities are not JSON, but a
# caller in Python may pass them: min and max alone would step over a NaN)
plain = st.fixed_dictionaries({}, optional={
    "robot": st.sampled_from(["r1", "r2", "new-1", None]),
    "pages": st.integers(1, 3) | st.sampled_from([0, True, 10**6 + 1, 2.0]),
    "bytes": st.integers(0, 10**6) | st.none() | st.sampled_from([-1, False, 1 << 51, 1.0]),
    "client_time": st.floats(-1e6, 1e6) | st.none() | st.sampled_from([math.nan, -math.inf, 1e13, 3])})
odd = st.one_of(st.dictionaries(st.sampled_from(["robot", "pages", "bytes", "client_time", "extra"]), values,
                                max_size=4), values)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(plain, plain, plain, odd), min_size=2, max_size=8), st.booleans())
@example([{"client_time": 1.0}, {"client_time": math.nan}], True)  # NaN after a number: min and max step over it
@example([{"client_time": 1.0}, {"client_time": 3}], True)  # a whole number: the slow path makes it 3.0
@example([{"pages": 2}, {"pages": True}], True)
@example([{"bytes": 5, "robot": "r2"}, {"bytes": 2.0}], True)
@example([{"robot": "r1"}, {"robot": "new"}], False)
def test_a_batch_is_what_its_items_are_alone(items: list[object], allow: bool) -> None:
    """A batch (checked a column at a time when every item has the common shape) gives the deliveries its
    items give one by one, or the first item's error, named with its index."""
    registered = {"r1"}
    alone = []
    first_error = None
    for n, item in enumerate(items):
        try:
            alone.extend(parse_deliveries(item, max_batch=100, registered=registered, allow_unregistered=allow))
        except InputError as exc:
            first_error = (f"deliveries[{n}]" + (f".{exc.field}" if exc.field != "body" else ""), exc.problem)
            break
    if first_error is not None:
        with pytest.raises(InputError) as caught:
            parse_deliveries({"deliveries": items}, max_batch=100, registered=registered, allow_unregistered=allow)
        assert (caught.value.field, caught.value.problem) == first_error
    else:
        batch = parse_deliveries({"deliveries": items}, max_batch=100, registered=registered,
                                 allow_unregistered=allow)
        assert list(batch) == alone
        assert [type(v) for d in batch for v in d] == [type(v) for d in alone for v in d]


def _parsed(parse: object, *args: object, **kwargs: object) -> object:
    """The deliveries and the types of their values, or the error's field and problem."""
    try:
        out = list(parse(*args, **kwargs))  # type: ignore[operator]
    except InputError as exc:
        return exc.field, exc.problem
    return out, [type(v) for d in out for v in d]


def _body_bytes(doc: object, form: str) -> bytes:
    """``doc`` as JSON in one of the forms a client may send (or botch)."""
    text = json.dumps(doc, allow_nan=True)
    if form == "utf-16":
        return text.encode("utf-16")
    if form == "bom":
        return text.encode("utf-8-sig")
    if form == "junk":
        return text.encode() + b" x"
    if form == "repeated" and text.startswith("{") and len(text) > 2:
        return b'{"pages": 2, ' + text[1:].encode()  # the key repeated when doc has pages: the last one counts
    if form == "spaced":
        return b" \n" + json.dumps(doc, allow_nan=True, indent=1).encode() + b"\t"
    return text.encode()


@settings(max_examples=500, deadline=None)
@given(st.one_of(plain, odd, st.lists(st.one_of(plain, plain, plain, odd), min_size=0, max_size=6).map(
           lambda items: {"deliveries": items}),
                 st.tuples(st.lists(plain, min_size=1, max_size=3), plain).map(
           lambda t: {"deliveries": t[0], **t[1]})),
       st.sampled_from(["plain", "plain", "utf-16", "bom", "junk", "repeated", "spaced"]), st.booleans(),
       st.sampled_from([1, 3, 100]))
@example({"robot": "r1", "pages": 2}, "plain", True, 100)
@example({"deliveries": [{"robot": "r1"}], "robot": "r2"}, "plain", True, 100)
@example({"deliveries": [{"robot": ""}, {"robot": "x" * (MAX_ID_LENGTH + 1)}]}, "plain", True, 100)
@example({"deliveries": [{"robot": "new"}]}, "plain", False, 100)
@example({"client_time": 3, "bytes": None}, "plain", True, 100)
@example({"deliveries": []}, "plain", True, 100)
def test_a_body_decoded_by_msgspec_is_what_the_checks_make_of_it(doc: object, form: str, allow: bool,
                                                                 max_batch: int) -> None:
    """parse_delivery_body (the common shape decoded and checked by msgspec in one call, anything else the long
    way) accepts what parse_deliveries accepts of parse_json's document, with the same values and types, and
    refuses the rest with the same field and problem."""
    body = _body_bytes(doc, form)
    kwargs = {"max_batch": max_batch, "registered": {"r1"}, "allow_unregistered": allow}
    try:
        obj = parse_json(body)
    except InputError as exc:
        expected: object = (exc.field, exc.problem)
    else:
        expected = _parsed(parse_deliveries, obj, **kwargs)
    assert _parsed(parse_delivery_body, body, **kwargs) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, "r1", 'r"2', "é"]), st.integers(1, 4),
                          st.none() | st.integers(0, 10**9), st.none() | st.floats(-1e9, 1e9)),
                min_size=1, max_size=6),
       st.integers(0, 12), st.floats(0, 1e9), st.integers(0, 16))
def test_batch_lines_are_the_single_lines_in_order(rows: list[tuple[str | None, int, int | None, float | None]],
                                                   free: int, t: float, active: int) -> None:
    """The delivery log's lines of a batch (made a column at a time) are those of its deliveries written one
    at a time, loss lines included."""
    robots, pages, sizes, client_times = (list(c) for c in zip(*rows, strict=True))
    admitted = []
    for p in pages:
        admitted.append(min(p, free))
        free -= admitted[-1]
    w = TraceWriter()
    one_by_one = "".join(w.delivery_columns(t, [r], [p], [b], [c], [a], active)
                         for r, p, b, c, a in zip(robots, pages, sizes, client_times, admitted, strict=True))
    assert TraceWriter().delivery_columns(t, robots, pages, sizes, client_times, admitted, active) == one_by_one
    assert w.deliveries(t, [Delivery(*row) for row in rows], admitted, active) == one_by_one


def test_ring_rows_given_once_for_every_row() -> None:
    """Ring.extend takes one number for a column that is the same in every row, as if repeated."""
    import numpy as np

    a, b = Ring(5, ("t", "x", "y")), Ring(5, ("t", "x", "y"))
    for n in (3, 4, 9):
        a.extend({"t": 2.5, "x": [float(k) for k in range(n)]}, n)
        b.extend({"t": [2.5] * n, "x": [float(k) for k in range(n)]}, n)
        for c in ("t", "x", "y"):
            assert np.array_equal(a.cols[c], b.cols[c], equal_nan=True)
        assert a.n == b.n


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10**6), st.integers(0, 10**6), st.integers(0, 10**6), st.floats(allow_nan=True),
       st.integers(0, 500), st.integers(0, 64), st.sampled_from([None, "active", "parked"]),
       st.sampled_from(["ok", "extra", "missing"]))
def test_a_delivery_ack_is_the_json_of_its_dict(accepted: int, pages: int, admitted: int, t: float, queue: int,
                                                active: int, state: str | None, shape: str) -> None:
    """delivery_ack writes the ack dict directly: the bytes dumps would write, for the dicts Agent.deliver makes
    and (through dumps) any other, a non-finite t included."""
    ack: dict[str, object] = {"accepted": accepted, "pages": pages, "admitted": admitted,
                              "lost": pages - admitted, "t": t, "queue": queue, "active": active}
    if state is not None:
        ack["state"] = state
    if shape == "extra":
        ack["note"] = "x"
    elif shape == "missing":
        del ack["queue"]
    assert delivery_ack(ack) == dumps(ack).encode()
    if math.isfinite(t):
        assert json.loads(delivery_ack(ack)) == ack
