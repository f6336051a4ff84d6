"""The parser's building blocks: help formatting, one-line errors, deprecated flag aliases, and commands
that import their implementation only when they run (so that ``robotctl --help`` stays instant)."""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Raw epilogs (worked examples) and defaults in the help, except where there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


@dataclass(frozen=True)
class Alias:
    """An old flag that still works for a release: it is rewritten to ``new`` (its value through
    ``convert`` when the two count differently) after one warning line on standard error."""

    new: str
    convert: Callable[[str], str] | None = None
    note: str = ""


class Parser(argparse.ArgumentParser):
    """Errors in one line (what is wrong and where to look), exit code 2; no abbreviated flags (``--all-subset``
    is an error, not ``--all-subsets``); an unknown flag shows the command's own usage; old flag names
    registered with :meth:`deprecate` keep working with a warning."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self.aliases: dict[str, Alias] = {}

    def deprecate(self, old: str, new: str, *, convert: Callable[[str], str] | None = None, note: str = "") -> None:
        """Accept ``old`` as a deprecated spelling of the option ``new`` (which must exist)."""
        if new not in self._option_string_actions:
            raise ValueError(f"{self.prog}: {old} is an alias of {new}, which this command does not have")
        self.aliases[old] = Alias(new, convert, note)

    def _rewrite(self, args: Sequence[str]) -> list[str]:
        """``args`` with every deprecated flag replaced by its new name (one warning per flag used)."""
        out: list[str] = []
        warned: set[str] = set()
        convert: Callable[[str], str] | None = None
        for k, arg in enumerate(args):
            if arg == "--":
                return out + list(args[k:])
            if convert is not None:
                out.append(convert(arg))
                convert = None
                continue
            flag, eq, value = arg.partition("=")
            alias = self.aliases.get(flag) if arg.startswith("--") else None
            if alias is None:
                out.append(arg)
                continue
            if flag not in warned:
                warned.add(flag)
                note = f" ({alias.note})" if alias.note else ""
                print(f"{self.prog}: warning: {flag} is deprecated; use {alias.new}{note}", file=sys.stderr)
            if eq:
                out.append(f"{alias.new}={alias.convert(value) if alias.convert else value}")
            else:
                out.append(alias.new)
                convert = alias.convert
        return out

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        if args is None:
            args = sys.argv[1:]
        args = self._rewrite(args) if self.aliases else list(args)
        if not self._subparsers:  # a command: an unknown flag first, before "the following are required"
            flags = args[:args.index("--")] if "--" in args else args
            known = self._option_string_actions
            unknown = [a for a in flags if a.startswith("--") and a.partition("=")[0] not in known]
            if unknown:
                self.unknown(unknown)
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.unknown(extras)
        return parsed, extras

    def unknown(self, extras: list[str]) -> None:
        """Refuse arguments this command does not take: its usage, then one line with the closest flag."""
        flags = [s for s in self._option_string_actions if s.startswith("--")]
        hints = []
        for extra in extras:
            close = difflib.get_close_matches(extra.partition("=")[0], flags, n=1) if extra.startswith("-") else []
            hints.append(f"{extra} (did you mean {close[0]}?)" if close else extra)
        self.print_usage(sys.stderr)
        self.error(f"unrecognized arguments: {' '.join(hints)}")

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def lazy(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A command's ``func`` that imports ``module`` (its numpy, scipy, aiohttp) only when it runs."""

    def run(args: argparse.Namespace) -> int:
        return int(getattr(importlib.import_module(module), name)(args))

    run.__qualname__ = run.__name__ = f"lazy_{name}"
    return run


__all__ = ["Alias", "Formatter", "Parser", "lazy"]
