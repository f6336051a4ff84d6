"""Issue 26: the fast paths of parse_deliveries (an item of the common shape; a batch of them, checked a column at a
time) accept and refuse exactly as the checks do; a batch's log lines and samples are its deliveries' one by one."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from robotctl._errors import InputError
from robotctl.agent.api import MAX_ID_LENGTH, Delivery, parse_deliveries, robot_id
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
