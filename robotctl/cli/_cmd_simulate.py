"""``robotctl simulate``: the discrete-event simulator from the command line (measures with confidence
intervals, optionally next to the exact solution, and a trace file for fitting)."""

from __future__ import annotations

from typing import Any

from ._args import confidence_level, policy, real_number, whole_number
from ._parser import Formatter, lazy

EXAMPLE = """\
example:
  robotctl simulate config/paper-example.yaml --policy 3,3,3,1,1,1 --events 1000000 --seed 7 --exact
      one million events of the paper's optimal policy; each measure with its 99% confidence
      interval by batch means, next to the exact value (J = 63.54)
  robotctl simulate config/paper-example.yaml --policy 3,3,3,1,1,1 --horizon-s 3600 --trace run.jsonl
      one simulated hour, and its trace (deliveries, losses, completions, obsolete drops, park and
      resume) for `robotctl fit run.jsonl --mode-field active`

--policy lists r(0), r(1), ..., r(K): the number of active robots at each queue length, non-increasing.
The run starts empty; the warm-up (a tenth of the run unless --warmup) is discarded, the rest is cut
into --batches batches. Without --seed a random seed is drawn and printed, so any run can be repeated.
The trace covers the whole run, warm-up included; deliveries and park/resume lines carry "active",
the number of active robots.
Exit status: 0 simulated, 1 some measure had no data (e.g. no page was served), 2 bad input.
"""

_count_arg = whole_number(1, "a count", "1000000")


_positive_arg = real_number(0, "the number of seconds", "3600", strict=True)


_nonnegative_arg = real_number(0, "the value", "0")


_seed_arg = whole_number(0, "a seed", "7")


def register(sub: Any) -> None:
    p = sub.add_parser("simulate", help="simulate a policy: measures with confidence intervals, trace",
                       epilog=EXAMPLE, formatter_class=Formatter,
                       description="Simulate the controlled queue of paper 000 (per-mode BMAP arrivals, PH "
                                   "service, PH obsolescence of waiting pages, FIFO, capacity K) under one "
                                   "threshold policy, and estimate every measure with a confidence interval "
                                   "by batch means.")
    p.add_argument("model_file", metavar="MODEL.yaml",
                   help="model file (docs/ARCHITECTURE.md); - reads standard input")
    p.add_argument("--policy", required=True, type=policy,
                   help="robots at queue length 0..K, comma-separated, non-increasing (e.g. 3,3,3,1,1,1)")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--events", type=_count_arg, default=None, metavar="N",
                        help="events to measure after the warm-up; None: 1000000 unless --horizon-s")
    length.add_argument("--horizon-s", type=_positive_arg, default=None,
                        help="simulated seconds to measure after the warm-up, instead of --events")
    p.add_argument("--warmup", type=_nonnegative_arg, default=None,
                   help="discarded start, in events (with --events) or seconds (with --horizon-s); "
                        "None: a tenth of the run")
    p.add_argument("--batches", type=_count_arg, default=30, help="number of batches for the batch means")
    p.add_argument("--level", type=confidence_level, default=0.99, help="confidence level of each interval")
    p.add_argument("--seed", type=_seed_arg, default=None,
                   help="seed of the random streams; None: a random seed, printed with the results")
    p.add_argument("--exact", action="store_true",
                   help="also solve exactly and say whether each exact value lies inside its interval")
    p.add_argument("--trace", metavar="OUT.jsonl", default=None,
                   help="write the trace (JSON Lines, docs/ARCHITECTURE.md) to this file; None: no trace")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=lazy("robotctl.cli._run_simulate", "run_simulate"))


__all__ = ["register"]
