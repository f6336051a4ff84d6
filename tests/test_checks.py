"""robotctl/_checks.py: the shared number checks name the field, say what they got, and carry the fix."""

from __future__ import annotations

import numpy as np
import pytest

from robotctl import InputError
from robotctl._checks import positive, seconds, whole


@pytest.mark.parametrize("value", [0, -1, 1.0, True, "2", None])
def test_whole_refuses_what_is_not_an_integer_at_least_the_minimum(value: object) -> None:
    with pytest.raises(InputError, match=r"^places: must be a whole number >= 1, got .*give places"):
        whole("places", value, 1)


def test_whole_takes_python_and_numpy_integers_and_a_fix() -> None:
    assert whole("n", np.int64(3), 1) == 3 and type(whole("n", np.int64(3), 1)) is int
    with pytest.raises(InputError, match="N counts the waiting places"):
        whole("places", 0, 1, "N counts the waiting places")


@pytest.mark.parametrize("value", [0, -0.5, float("nan"), float("inf"), True, "1"])
def test_positive_refuses_what_is_not_a_positive_finite_number(value: object) -> None:
    with pytest.raises(InputError, match=r"^rate: must be a positive finite rate, got .*in events per second"):
        positive("rate", value, "in events per second", what="rate")


def test_seconds_bounds() -> None:
    assert seconds("warmup_s", 0, positive=False, hint="h") == 0.0
    with pytest.raises(InputError, match=r"must be a finite number of seconds > 0, got 0"):
        seconds("horizon_s", 0, positive=True, hint="h")
