"""Issue 26: the fast path of parse_deliveries accepts unregistered robot ids exactly as the checks do."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotctl._errors import InputError
from robotctl.agent.api import MAX_ID_LENGTH, parse_deliveries, robot_id


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
