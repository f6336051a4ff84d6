"""Argument types shared by the subcommands: they reject bad values while parsing, with the fix."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from robotctl.model import ThresholdPolicy


#: Most digits of a number typed on the command line (Python's own limit for int() of a string is 4,300).
MAX_DIGITS = 30


def shown(text: str, width: int = 40) -> str:
    """``text`` quoted for a message, cut to ``width`` characters (a 5,000-digit number stays one short line)."""
    return repr(text) if len(text) <= width else repr(text[:width]) + f"... ({len(text)} characters)"


def whole_number(minimum: int, meaning: str, example: str, *, maximum: int | None = None,
                 estimate: Callable[[int], str] | None = None) -> Callable[[str], int]:
    """An argparse ``type=`` for whole numbers >= ``minimum`` (and <= ``maximum`` if given; ``_``
    separators allowed, e.g. 1_000_000).

    ``meaning`` says what the number is, ``example`` shows a valid value; both go into the message.
    ``estimate(value)`` says what a value above ``maximum`` would cost (time, memory): the refusal names it.
    """

    def parse(text: str) -> int:
        digits = text.strip().lstrip("+-").replace("_", "")
        if len(digits) > MAX_DIGITS and digits.isdigit():
            raise argparse.ArgumentTypeError(f"{shown(text)}: {meaning} has {len(digits)} digits, more than any "
                                             f"size this machine can work with; write e.g. {example}")
        try:
            value = int(text.replace("_", ""))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a whole number; write e.g. {example}") from exc
        if value < minimum or (maximum is not None and value > maximum):
            bounds = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
            cost = f" ({estimate(value)})" if estimate is not None and maximum is not None and value > maximum else ""
            raise argparse.ArgumentTypeError(f"{shown(text)}: {meaning} must be {bounds}{cost}, e.g. {example}")
        return value

    return parse


def cost_text(seconds: float, memory_bytes: float) -> str:
    """``about 3.2e+04 s and 8 GiB``: an estimate of work for a refusal."""
    return f"it would take about {seconds:.2g} s and {memory_bytes / 2**30:.2g} GiB of memory on this machine"


def real_number(minimum: float, meaning: str, example: str, *, strict: bool = False,
                finite: bool = True) -> Callable[[str], float]:
    """An argparse ``type=`` for numbers >= ``minimum`` (> with ``strict``), finite unless ``finite=False``
    (then ``inf`` is allowed, e.g. "no bound")."""
    relation = ">" if strict else ">="

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number; write e.g. {example}") from exc
        ok = (value > minimum if strict else value >= minimum) and (math.isfinite(value) or
                                                                     (not finite and value == math.inf))
        if not ok:
            finite_part = "a finite number " if finite else "a number (or inf) "
            raise argparse.ArgumentTypeError(f"{text!r}: {meaning} must be {finite_part}{relation} {minimum:g}, "
                                             f"e.g. {example}")
        return value

    return parse


def confidence_level(text: str) -> float:
    """An argparse ``type=`` for a confidence level, strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number, e.g. 0.95") from exc
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a confidence level lies strictly between 0 and 1, e.g. 0.95")
    return value


#: A TCP port, 0 (any free port) to 65535.
port = whole_number(0, "a TCP port", "8080 (0 for any free port)", maximum=65535)


def policy(text: str) -> ThresholdPolicy:
    """An argparse ``type=`` for ``--policy``: r(0), ..., r(K) comma-separated, non-increasing."""
    from robotctl._errors import InputError
    from robotctl.model import ThresholdPolicy

    try:
        return ThresholdPolicy.parse(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
