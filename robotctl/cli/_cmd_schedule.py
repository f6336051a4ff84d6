"""``robotctl schedule``: which pages a robot revisits, how often and in which order (paper 002)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ._args import whole_number
from ._parser import Formatter, lazy

#: ``robotctl.policies.REVISIT_POLICIES`` (a test keeps the two equal).
REVISIT_POLICIES = ("golden", "weighted", "random")

EXAMPLE = """\
example:
  robotctl schedule --change-rates 0.5,1,2 --fetch-time rate=1
      three pages changing 0.5, 1 and 2 times per second, exponential fetches of mean 1 s: the optimal
      frequencies (0.185, 0.315, 0.5: proportional to ln(1/h_i), eq. 10), the lower bound C* = 2.611,
      a golden-ratio cycle of 21 fetches costing 2.641, and the randomised policy's 2.722
  robotctl schedule pages.csv --fetch-time fetch.yaml --policy weighted --json
  robotctl schedule --change-rates 0.2,0.3,0.3,0.5 --weights 1,1,1,5 --fetch-time constant=0.5

PAGES.csv: a header line and one page per line, e.g.
      page,change_rate,weight
      https://example.org/,0.002,1
      https://example.org/news,0.05,3
  change_rate (changes per second) is required; page (or url, id) and weight are optional.

--fetch-time LAW, the time X one fetch takes (seconds):
  rate=5             exponential, 5 fetches per second (mean 0.2 s); also mean=0.2
  constant=0.2       every fetch takes 0.2 s
  samples=FILE       the measured fetch times in FILE (one number per line, or a CSV's first column)
  FILE.yaml          a mapping: {rate: 5}, {beta: [...], S: [[...]]} (PH), {constant: 0.2},
                     {samples: [...]}, or correlated fetch durations as a MAP {D0: [[...]], D1: [[...]]}
                     or an MMPP {Q: [[...]], rates: [...]} (paper 003, Section 6)

Weights c_i default to the change rates (the paper's c_i = mu_i); other weights use the Lagrange
condition (8), and pages not worth fetching get frequency 0. The cost is sum_i c_i r_i, r_i the long-run
fraction of time page i is stale. Policies: golden (Section 5's golden-ratio cycle), weighted (a
weighted round robin cycle), random (each fetch drawn independently, Theorem 4.1).
With a MAP the template cost is exact for the correlated fetches and no lower bound is given.
Exit status: 0 planned, 2 bad input.
"""

_FORMS = "rate=5, mean=0.2, constant=0.2, samples=FILE, or a YAML file"


def fetch_time(text: str) -> tuple[str, Any]:
    """``--fetch-time``: ("inline", {key: number}), ("samples", path) or ("file", path)."""
    key, sep, value = text.partition("=")
    if not sep:
        if text.endswith((".yaml", ".yml", ".json")) or "/" in text:
            return ("file", text)
        raise argparse.ArgumentTypeError(f"{text!r} is not a fetch-time law; write {_FORMS}")
    key = key.strip().lower()
    if key == "samples":
        if not value:
            raise argparse.ArgumentTypeError("samples= needs a file of fetch times, e.g. samples=fetch_s.txt")
        return ("samples", value)
    if key not in ("rate", "mean", "constant"):
        raise argparse.ArgumentTypeError(f"{text!r}: unknown law {key!r}; write {_FORMS}")
    try:
        number = float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a number; e.g. {key}=0.2") from exc
    if not (math.isfinite(number) and number > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: {key} must be a positive finite number, e.g. {key}=0.2")
    return ("inline", {key: number})


def number_list(meaning: str, example: str, *, positive: bool) -> Any:
    """An argparse type for comma-separated numbers (> 0 with ``positive``, else >= 0)."""

    def parse(text: str) -> tuple[float, ...]:
        try:
            values = tuple(float(x) for x in text.split(",") if x.strip())
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers, e.g. "
                                             f"{example}") from exc
        bad = [v for v in values if not math.isfinite(v) or (v <= 0 if positive else v < 0)]
        if not values or bad:
            need = "positive" if positive else "non-negative"
            raise argparse.ArgumentTypeError(f"{text!r}: {meaning} must be {need} finite numbers, e.g. {example}")
        return values

    return parse


def register(sub: Any) -> None:
    p = sub.add_parser("schedule", help="revisit frequencies and a fetch cycle for pages that change (paper 002)",
                       epilog=EXAMPLE, formatter_class=Formatter,
                       description="Plan one robot's revisits of pages that change at Poisson epochs: the optimal "
                                   "access frequencies and the lower bound C* (paper 002, Theorem 3.4), a cyclic "
                                   "template with its exact cost (Lemma 3.1), and the best randomised policy "
                                   "(Theorem 4.1).")
    p.add_argument("pages", metavar="PAGES.csv", nargs="?", default=None,
                   help="page list with a change_rate column (and optionally page, weight); - reads standard input")
    p.add_argument("--change-rates", type=number_list("change rates", "0.5,1,2", positive=True), default=None,
                   metavar="R1,R2,...", help="change rates per second instead of PAGES.csv")
    p.add_argument("--weights", type=number_list("weights", "1,1,2", positive=False), default=None,
                   metavar="C1,C2,...", help="weights c_i (default: the change rates, or PAGES.csv's weight column)")
    p.add_argument("--fetch-time", type=fetch_time, required=True, metavar="LAW",
                   help=f"the fetch-time law: {_FORMS} (see below)")
    p.add_argument("--policy", choices=REVISIT_POLICIES, default="golden", help="the policy served")
    p.add_argument("--max-length", type=whole_number(1, "the longest cycle", "1000000"), default=1_000_000,
                   metavar="L", help="longest cycle (fetches per cycle) considered")
    p.add_argument("--show", type=whole_number(0, "a count", "40"), default=40, metavar="N",
                   help="fetches of the cycle printed in the text output (all of them with --json)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=lazy("robotctl.cli._run_schedule", "run_schedule"))


__all__ = ["REVISIT_POLICIES", "fetch_time", "number_list", "register"]
