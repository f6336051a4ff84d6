"""The ``robotctl`` command line.

Each subcommand lives in its own module ``robotctl.cli._cmd_<name>`` that exposes
``register(subparsers) -> None``; the module adds a parser whose ``func(args) -> int`` runs it. Parser
modules import only the standard library; a command imports its implementation when it runs.
Bad input (a :class:`robotctl.InputError`) prints one line and exits 2; other robotctl failures exit 1;
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import os

# robotctl's linear algebra is many small matrices: a multi-threaded BLAS spends more time waking its
# threads than computing (Table 1 of paper 000 took 6.9 s instead of 0.17 s with the other core busy).
# This must run before numpy is imported; a user's own setting wins.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import importlib  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402

from robotctl._errors import InputError, RobotctlError  # noqa: E402

from ._parser import Formatter, Parser  # noqa: E402

#: Subcommand modules, in the order ``--help`` lists them.
COMMAND_MODULES = (
    "robotctl.cli._cmd_model",
    "robotctl.cli._cmd_mdp",
    "robotctl.cli._cmd_fit",
    "robotctl.cli._cmd_serve",
    "robotctl.cli._cmd_simulate",
    "robotctl.cli._cmd_replay",
    "robotctl.cli._cmd_demo",
    "robotctl.cli._cmd_schedule",
    "robotctl.cli._cmd_route",
    "robotctl.cli._cmd_renovation",
    "robotctl.cli._cmd_buffers",
)


def build_parser() -> argparse.ArgumentParser:
    """The whole ``robotctl`` parser (standard library only: no numpy, scipy or aiohttp is imported)."""
    parser = Parser(
        prog="robotctl",
        description="Crawler-control agent: fit the traffic, solve the BMAP/PH/1/K queue with obsolescence, "
                    "and park or resume robots at the cost-optimal thresholds.",
        epilog="Exit codes: 0 success, 1 failure at run time (or a result with success=false), 2 bad input.\n"
               "Run `robotctl COMMAND --help` for each command's options and an example.",
        formatter_class=Formatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def one_line(text: str) -> str:
    """``text`` on one line: a character that is not printable (a newline a file put in a key) is escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``robotctl`` with ``argv`` (default: the process's arguments); returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        return code
    except InputError as exc:
        if args.debug:
            raise
        print(f"robotctl: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except RobotctlError as exc:
        if args.debug:
            raise
        print(f"robotctl: {type(exc).__name__}: {one_line(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (e.g. `robotctl optimise ... | head`): stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


__all__ = ["COMMAND_MODULES", "build_parser", "main", "one_line"]
