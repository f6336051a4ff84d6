"""The shared argument types reject bad values while parsing, saying what is wrong and the fix."""

from __future__ import annotations

import argparse
import math

import pytest

from robotctl.cli._args import port, real_number, whole_number


def test_whole_number_bounds_and_separators() -> None:
    count = whole_number(1, "a count", "1000")
    assert count("1_000") == 1000
    with pytest.raises(argparse.ArgumentTypeError, match=r"a count must be >= 1, e\.g\. 1000"):
        count("0")
    with pytest.raises(argparse.ArgumentTypeError, match="not a whole number"):
        count("1.5")
    assert port("0") == 0 and port("65535") == 65535
    with pytest.raises(argparse.ArgumentTypeError, match=r"in 0\.\.65535"):
        port("65536")


def test_real_number_strictness_and_infinity() -> None:
    positive = real_number(0, "the duration", "60", strict=True)
    assert positive("0.5") == 0.5
    for bad in ("0", "-1", "nan", "inf"):
        with pytest.raises(argparse.ArgumentTypeError, match="the duration must be a finite number > 0"):
            positive(bad)
    assert real_number(0, "x", "0")("0") == 0.0
    bound = real_number(0, "the bound", "inf", strict=True, finite=False)
    assert bound("inf") == math.inf
    with pytest.raises(argparse.ArgumentTypeError, match=r"a number \(or inf\) > 0"):
        bound("nan")
