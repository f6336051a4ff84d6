"""``robotctl buffers``: obsolescence timers, renovation and RED compared on one model's traffic; and the
``--buffer`` options that ``robotctl solve`` takes (:func:`add_buffer_arguments`)."""

from __future__ import annotations

import argparse
from typing import Any

from ._args import policy, real_number, whole_number
from ._cmd_renovation import q_law
from ._parser import Formatter, lazy

BUFFERS = ("timers", "renovation", "red", "none")

EXAMPLE = """\
example:
  robotctl buffers config/paper-example.yaml --policy 3,3,3,1,1,1
      paper 000's traffic and thresholds under four buffer rules: obsolescence timers (paper 000),
      the cost-minimising renovation law (paper 004), the best RED parameters, and no rule
  robotctl fit trace.jsonl --mode-field active --yaml > fitted.yaml && robotctl buffers fitted.yaml
      the same on fitted traffic; without --policy the thresholds are the optimum under timers

Every rule is solved exactly under the same thresholds and priced by the model file's costs: paper 000's
J with c_loss for every page lost fresh (blocked, or dropped by RED or renovation before its useful
life ended) and c_obs for every page whose useful life ended in the buffer (expired by a timer,
indexed stale, or removed stale). Renovation and RED run without timers: a page whose useful life
ends stays in line, marked stale. Renovation's q is searched over the simplex for both conflict
options (a grid, then pattern search to a mesh-stationary point); RED's (min_th, max_th, max_p)
exhaustively on a grid.
Exit status: 0 compared, 1 some rule could not be solved, 2 bad input.
"""


def red_law(text: str) -> tuple[int, int, float] | str:
    """``--red``: MIN_TH,MAX_TH,MAX_P or ``best``."""
    if text == "best":
        return text
    parts = text.split(",")
    try:
        lo, hi, p = int(parts[0]), int(parts[1]), float(parts[2])
    except (ValueError, IndexError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: write MIN_TH,MAX_TH,MAX_P, e.g. 2,5,0.3, or best") from exc
    if len(parts) != 3 or not 0 <= lo < hi or not 0.0 <= p <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 <= MIN_TH < MAX_TH and 0 <= MAX_P <= 1, e.g. 2,5,0.3")
    return lo, hi, p


def q_law_or_best(text: str) -> tuple[float, ...] | str:
    return text if text == "best" else q_law(text)


def add_buffer_arguments(p: argparse.ArgumentParser) -> None:
    """``--buffer``, ``--q``, ``--option``, ``--red`` and ``--with-timers`` (for ``robotctl solve``)."""
    p.add_argument("--buffer", choices=BUFFERS, default="timers",
                   help="how the buffer sheds pages: obsolescence timers (paper 000), renovation or RED instead "
                        "(paper 004), or none (stale pages are indexed)")
    p.add_argument("--q", type=q_law_or_best, default=None, metavar="Q0,Q1,...",
                   help="with --buffer renovation: P(J = 0), P(J = 1), ... pages removed at each completion, or "
                        "best (the cost-minimising law)")
    p.add_argument("--option", type=int, choices=(1, 2), default=1,
                   help="renovation when J >= pages waiting: 1 removes all but one, 2 none")
    p.add_argument("--red", type=red_law, default=None, metavar="MIN,MAX,P",
                   help="with --buffer red: min_th,max_th,max_p (drop probability by queue length), or best")
    p.add_argument("--with-timers", action="store_true",
                   help="keep the obsolescence timers on under renovation or RED")


#: Finest grid stage: the stage evaluates at most policies.GRID_LIMIT (120) points and lowers a finer grid to
#: fit, so a larger number buys nothing.
MAX_GRID = 10_000
_grid = whole_number(1, "the grid resolution", "4", maximum=MAX_GRID,
                     estimate=lambda g: "the grid stage evaluates at most 120 points, so it would be lowered anyway")
_levels = whole_number(1, "the number of max_p values", "5")
_tol = real_number(0, "the mesh tolerance", "0.015625", strict=True)


def register(sub: Any) -> None:
    p = sub.add_parser("buffers", help="obsolescence timers vs renovation vs RED on one model (exact)",
                       epilog=EXAMPLE, formatter_class=Formatter,
                       description="Compare buffer rules on the traffic of a model file: loss, staleness, "
                                   "starvation, response time and cost J of obsolescence timers (paper 000), "
                                   "the best renovation law (paper 004), the best RED parameters and no rule.")
    p.add_argument("model_file", metavar="MODEL.yaml", help="model file (docs/ARCHITECTURE.md); - reads standard input")
    p.add_argument("--policy", type=policy, default=None,
                   help="robots at queue length 0..K (e.g. 3,3,3,1,1,1); None: the optimum under timers")
    p.add_argument("--grid", type=_grid, default=4, help="renovation search: grid stage resolution 1/GRID")
    p.add_argument("--tol", type=_tol, default=1.0 / 64, help="renovation search: finest mesh polled")
    p.add_argument("--red-levels", type=_levels, default=5, help="RED search: max_p in steps of 1/LEVELS")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=lazy("robotctl.cli._run_buffers", "run_buffers"))


__all__ = ["BUFFERS", "add_buffer_arguments", "q_law_or_best", "red_law", "register"]
