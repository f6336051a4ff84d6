"""Argument types shared by the subcommands: they reject bad values while parsing, with the fix."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from robotctl.model import ThresholdPolicy


def whole_number(minimum: int, meaning: str, example: str, *, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse ``type=`` for whole numbers >= ``minimum`` (and <= ``maximum`` if given; ``_``
    separators allowed, e.g. 1_000_000).

    ``meaning`` says what the number is, ``example`` shows a valid value; both go into the message.
    """

    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; write e.g. {example}") from exc
        if value < minimum or (maximum is not None and value > maximum):
            bounds = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
            raise argparse.ArgumentTypeError(f"{text!r}: {meaning} must be {bounds}, e.g. {example}")
        return value

    return parse


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
