"""Argument types shared by the subcommands: they reject bad values while parsing, with the fix."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def whole_number(minimum: int, meaning: str, example: str) -> Callable[[str], int]:
    """An argparse ``type=`` for whole numbers >= ``minimum`` (``_`` separators allowed, e.g. 1_000_000).

    ``meaning`` says what the number is, ``example`` shows a valid value; both go into the message.
    """

    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; write e.g. {example}") from exc
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: {meaning} must be >= {minimum}, e.g. {example}")
        return value

    return parse
