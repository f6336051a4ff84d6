"""The parser's building blocks: help formatting, one-line errors, and commands that import their
implementation only when they run (so that ``robotctl --help`` stays instant)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable


class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Raw epilogs (worked examples) and defaults in the help, except where there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """Errors in one line (what is wrong and where to look), exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def lazy(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A command's ``func`` that imports ``module`` (its numpy, scipy, aiohttp) only when it runs."""

    def run(args: argparse.Namespace) -> int:
        return int(getattr(importlib.import_module(module), name)(args))

    run.__qualname__ = run.__name__ = f"lazy_{name}"
    return run


__all__ = ["Formatter", "Parser", "lazy"]
