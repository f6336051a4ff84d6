"""robotctl/_json.py: every --json output, the HTTP API and the replay's document are JSON that strict
parsers accept: non-finite numbers become null at any depth, the rest is written unchanged."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from robotctl._json import finite, json_safe, json_text

leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                   st.text(max_size=5))
trees = st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(st.text(max_size=4), inner, max_size=4)),
                     max_leaves=20)


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _same_but_null(a: Any, b: Any) -> bool:
    if isinstance(a, float) and not math.isfinite(a):
        return b is None
    if isinstance(a, dict):
        return set(a) == set(b) and all(_same_but_null(v, b[k]) for k, v in a.items())
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same_but_null(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@given(trees)
def test_property_json_text_is_strict_json_with_non_finite_numbers_as_null(tree: Any) -> None:
    for text in (json_text(tree), json_text(tree, indent=2), json_text(tree, compact=True)):
        assert _same_but_null(tree, _strict(text))


def test_numpy_scalars_and_keys() -> None:
    doc = {1: np.float64("inf"), "x": [np.int64(3), np.float32(0.5)], "y": (math.nan,),
           "z": np.array([[1.0, np.nan]])}
    expected = {"1": None, "x": [3, 0.5], "y": [None], "z": [[1.0, None]]}
    assert _strict(json_text(doc)) == expected
    assert json_safe(doc) == expected
    assert finite(math.inf) is None and finite(2.5) == 2.5 and finite("a") == "a"
