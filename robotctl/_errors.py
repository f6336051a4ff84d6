"""Errors raised by robotctl's pure packages.

The tree::

    RobotctlError                 base of everything robotctl raises on purpose
    └── InputError (ValueError)   the input itself is invalid; carries ``field`` and ``hint``

``InputError`` is what the HTTP layer maps to a 400 and the CLI to exit code 2. Non-convergence and
numerical trouble are *results* (``success=False`` with a ``status`` and ``message``), not exceptions.
"""

from __future__ import annotations


class RobotctlError(Exception):
    """Base class of the errors robotctl raises on purpose."""


class InputError(RobotctlError, ValueError):
    """Invalid input: names the field, says what is wrong and how to fix it.

    Parameters
    ----------
    field:
        Dotted path of the offending value, e.g. ``model.service.S``.
    problem:
        What is wrong, with the value where it helps.
    hint:
        How to fix it.
    """

    def __init__(self, field: str, problem: str, hint: str = "") -> None:
        self.field = field
        self.problem = problem
        self.hint = hint
        text = f"{field}: {problem}"
        if hint:
            text += f"; {hint}"
        super().__init__(text)

    def within(self, prefix: str) -> InputError:
        """The same error with ``prefix`` prepended to its field path."""
        field = f"{prefix}.{self.field}" if self.field else prefix
        return InputError(field, self.problem, self.hint)
