"""``robotctl renovation``: paper 004's M/D/1/N queue with renovation, exactly (and optionally simulated)."""

from __future__ import annotations

import argparse
from typing import Any

from ._args import cost_text, real_number, whole_number
from ._parser import Formatter, lazy

EXAMPLE = """\
example:
  robotctl renovation --arrival-rate 1.1 --service-time 1 --capacity 6 --q 0.5,0.2,0.2,0.1 --option 1
      Poisson arrivals at 1.1/s, a constant 1 s service, K = 6 pages in the system (N = 5 waiting
      places and the one in service); at each completion
      0, 1, 2 or 3 pages are removed from the head with probabilities 0.5, 0.2, 0.2, 0.1
  robotctl renovation --arrival-rate 1.1 --service-time 1 --capacity 6 --q 1 --json | jq .loss_probability
      q = 1 (never remove): the M/D/1 queue with N + 1 places, loss = P_{N+1}
  robotctl renovation --arrival-rate 1.1 --service-time 1 --capacity 6 --q 0.5,0.5 --events 1000000 --seed 3
      the exact values next to a simulation's 99% confidence intervals

--capacity is K = N + 1 as in every robotctl command: the pages in the system, the one in service included
(paper 004 counts the N waiting places). --q lists q_0, q_1, ..., at most K numbers summing to 1: P(J = j)
pages removed from the head of the queue when a service completes. When J is not below the number w
waiting, Option 1 removes w - 1 pages (one is always left to serve) and Option 2 removes none. The loss
splits into blocking (an arrival finds N + 1 customers) and renovation; the output states how far it is
from 1 - 1/(lambda f*), the loss that the served pages' rate 1/f* implies, and gives the paper's
tagged-customer formula (eq. (6), or eq. (12) corrected) as a second route.
Exit status: 0 solved, 1 the conservation check failed, 2 bad input.
"""


def q_law(text: str) -> tuple[float, ...]:
    """``--q``: probabilities q_0, q_1, ... comma-separated, summing to one."""
    try:
        q = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers, e.g. 0.5,0.3,0.2") \
            from exc
    if not q or any(not 0.0 <= x <= 1.0 for x in q):
        raise argparse.ArgumentTypeError(f"{text!r}: give probabilities in [0, 1], e.g. 0.5,0.3,0.2")
    if abs(sum(q) - 1.0) > 1e-9:
        raise argparse.ArgumentTypeError(f"{text!r} sums to {sum(q):.6g}, not 1: give P(J = 0), P(J = 1), ... "
                                         "summing to 1, e.g. 0.5,0.3,0.2")
    return q


_rate = real_number(0, "the arrival rate", "1.1", strict=True)
_time = real_number(0, "the service time", "1.0", strict=True)
#: Largest capacity K = N + 1: the M/D/1/N solve took 12 s at N = 1000 and over 60 s at N = 3000 (time ~ N^2.5,
#: memory ~ 100 N^2 bytes, measured); beyond this it would run for many minutes or run out of memory.
MAX_CAPACITY = 3001


def renovation_cost(capacity: int) -> str:
    places = capacity - 1
    return cost_text(12.0 * (places / 1000.0) ** 2.5, 100.0 * float(places) ** 2)


_capacity = whole_number(2, "the capacity K (N + 1: the waiting places and the one in service)", "6",
                         maximum=MAX_CAPACITY, estimate=renovation_cost)
_events = whole_number(1, "the number of events", "1000000")
_seed = whole_number(0, "a seed", "7")


def _places_to_capacity(text: str) -> str:
    """The deprecated ``--places N`` (waiting places) as ``--capacity`` K = N + 1; text that is not a whole
    number is passed on for ``--capacity`` to refuse."""
    try:
        return str(int(text.replace("_", "")) + 1)
    except ValueError:
        return text


def register(sub: Any) -> None:
    p = sub.add_parser("renovation", help="paper 004's M/D/1/N queue with renovation (exact)", epilog=EXAMPLE,
                       formatter_class=Formatter,
                       description="The M/D/1/N queue with renovation of paper 004: the embedded chain at "
                                   "completions, the time-stationary distribution P_0..P_{N+1}, its first two "
                                   "moments and the loss probability split into blocking and renovation.")
    p.add_argument("--arrival-rate", type=_rate, required=True, metavar="L", help="lambda, Poisson arrivals per second")
    p.add_argument("--service-time", type=_time, required=True, metavar="D", help="d, the constant service time (s)")
    p.add_argument("--capacity", type=_capacity, required=True, metavar="K",
                   help="K, pages in the system, the one in service included: N = K - 1 waiting places "
                        "(formerly --places N)")
    p.add_argument("--q", type=q_law, required=True, metavar="Q0,Q1,...",
                   help="P(J = 0), P(J = 1), ...: pages removed at a completion (at most K numbers)")
    p.add_argument("--option", type=int, choices=(1, 2), default=1,
                   help="when J >= pages waiting: 1 removes all but one, 2 removes none")
    p.add_argument("--events", type=_events, default=None, metavar="N",
                   help="also simulate this many events and show 99%% confidence intervals (formerly --simulate)")
    p.add_argument("--seed", type=_seed, default=None, help="seed of the simulation; None: random, printed")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.deprecate("--places", "--capacity", convert=_places_to_capacity, note="--capacity counts the one in service: "
                "K = N + 1")
    p.deprecate("--simulate", "--events")
    p.set_defaults(func=lazy("robotctl.cli._run_renovation", "run_renovation"))


__all__ = ["q_law", "register"]
