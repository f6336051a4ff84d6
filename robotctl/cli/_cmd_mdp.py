"""``robotctl mdp``: paper 001's optimal dynamic control of N Poisson robots, next to the best static fleet."""

from __future__ import annotations

from typing import Any

from ._args import cost_text, real_number, whole_number
from ._parser import Formatter, lazy

EXAMPLE = """\
example:
  robotctl mdp --robots 16 --capacity 5 --arrival-rate 0.1 --service-rate 1 --gamma 1
      paper 001, Figure 2: cost 0.20907 (gamma P(starvation) + loss rate), between 4 and 14
      robots active; the best static fleet (9 robots) costs 0.32684, so dynamic control gains 56%
  robotctl mdp --robots 10 --capacity 15 --arrival-rate 0.1 --gamma 2.4 --json | jq .switching_curves

Each active robot brings pages in a Poisson stream of rate --arrival-rate; one indexer serves them in
exponential times of rate --service-rate; the buffer holds --capacity pages, the one being indexed
included. At a delivery the robot that delivered is parked unless the policy keeps it; at a service
completion the policy may wake one more robot. The policy minimises gamma P(starvation) + loss rate
(Howard's policy iteration with exact sparse evaluations, certified by the stopping test of the relative
value iteration of Proposition 2, which takes over if policy iteration cannot finish; the message says
so), and its cost is then computed exactly from its own chain.
Switching curves, for q = pages in the system before the event, q = 0..K:
  departure[q]  at a completion from q pages, wake a robot iff active <= departure[q]
                (-1: never; null at q = 0, where no completion happens)
  arrival[q]    at a delivery to q pages, keep the robot iff active <= arrival[q] (0: never)
gain_percent = 100 (C_s - C_d) / C_d, as in the paper's Tables 1 and 2.
Exit status: 0 optimal policy found, 1 the iteration did not converge, 2 bad input.
"""


#: Largest N and K typed to ``robotctl mdp``: value iteration on (K + 1)(N + 1) states with N + 1 actions
#: costs about 4 us per (K + 1)(N + 1)^2 per sweep, measured; the bounds keep one solve within minutes.
MAX_ROBOTS = 1000
MAX_CAPACITY = 10_000
_SECONDS_PER_UNIT = 4e-6


def mdp_cost(robots: int, capacity: int) -> str:
    """What ``robotctl mdp`` would cost at N = ``robots``, K = ``capacity`` (time of the solve, its arrays)."""
    states = (capacity + 1.0) * (robots + 1.0)
    return cost_text(states * (robots + 1.0) * _SECONDS_PER_UNIT, states * 3 * 8 * 8)


def register(sub: Any) -> None:
    p = sub.add_parser("mdp", help="optimal dynamic robot control by MDP (paper 001), against the static fleet",
                       epilog=EXAMPLE, formatter_class=Formatter,
                       description="Solve paper 001's Markov decision process: when to park the robot that "
                                   "just delivered and when to wake another, for N Poisson robots feeding one "
                                   "exponential indexer with a buffer of K pages.")
    p.add_argument("--robots", required=True,
                   type=whole_number(1, "the number of robots N", "16", maximum=MAX_ROBOTS,
                                     estimate=lambda n: mdp_cost(n, 5)),
                   help=f"N, robots available (at most {MAX_ROBOTS})")
    p.add_argument("--capacity", required=True, metavar="K",
                   type=whole_number(1, "the capacity K", "5", maximum=MAX_CAPACITY,
                                     estimate=lambda k: mdp_cost(16, k)),
                   help="K, pages in the system, the one being indexed included")
    p.add_argument("--arrival-rate", required=True,
                   type=real_number(0, "the arrival rate of one robot", "0.1", strict=True), metavar="L",
                   help="lambda, pages per second brought by one active robot (formerly --rate)")
    p.add_argument("--service-rate", default=1.0,
                   type=real_number(0, "the service rate", "1", strict=True),
                   help="mu, pages per second the indexer serves")
    p.add_argument("--gamma", required=True, type=real_number(0, "the starvation weight", "1"),
                   help="weight of P(starvation) against the loss rate in the cost")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.deprecate("--rate", "--arrival-rate")
    p.set_defaults(func=lazy("robotctl.cli._run_mdp", "run_mdp"))


__all__ = ["register"]
