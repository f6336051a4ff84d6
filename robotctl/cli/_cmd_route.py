"""``robotctl route``: open-loop routing of fetched pages to bufferless servers (paper 003)."""

from __future__ import annotations

from typing import Any

from ._args import cost_text, real_number, whole_number
from ._cmd_schedule import number_list
from ._parser import Formatter, lazy

#: ``robotctl.policies.ROUTING_METHODS`` (a test keeps the two equal).
ROUTING_METHODS = ("auto", "local", "enumerate", "mdp")

EXAMPLE = """\
example:
  robotctl route --arrival-rate 1 --service-rates 1,5
      Poisson arrivals, one packet per second, to a server of rate 1 and one of rate 5: the best
      period is 1 2 2 2 (one packet to the slow server, three to the fast one), losing 10.6% of them
  robotctl route --arrival-rate 1 --service-rates 1,2.4
      below mu_2 = 1 + sqrt 2 = 2.414 the best period is 1 2; above it, 1 2 2 (paper 003, Section 5)
  robotctl route --arrivals mmpp.yaml --service-rates 1,2,4 --max-period 16 --json
  robotctl route --arrival-rate 1 --service-rates 1,2,4 --method mdp --certify
      the bound raised to B* = 43: optimal over all open-loop policies, not only periods <= P

The servers have no buffer and exponential service; the router sees nothing of their state, only
where earlier packets went; a packet sent to a busy server preempts (loses) the one in service. The
cost is the fraction of packets lost (eq. 6), for Poisson, MMPP or MAP input.
--arrivals MAP.yaml: {D0: [[...]], D1: [[...]]} (a MAP), {Q: [[...]], rates: [...]} (an MMPP), or
{rate: x} (Poisson); with --arrival-rate too, the process is rescaled in time to that rate.
Methods: local (2 servers: the multimodular local search of Theorem 4.2 for every period <= P),
enumerate (every sequence of period <= P), mdp (any number of servers: the exact minimum mean cycle of
Section 3's MDP with every server used at least once in any P arrivals; its period can exceed P; it
says when the bound is large enough, B >= B*, to be optimal over all policies, and --certify raises it
there); auto: local for 2 servers, mdp otherwise.
Exit status: 0 found, 1 no sequence has a finite cost or the MDP did not converge, 2 bad input.
"""


#: Largest distance bound: the loss table has P + 1 entries per server and the search walks them (about
#: 25 us per entry and server, measured: P = 100,000 took 2.5 s, P = 10^7 over a minute).
MAX_PERIOD = 1_000_000


def route_cost(period: int) -> str:
    return cost_text(2 * 25e-6 * period, 2 * 8 * 4 * float(period))


def register(sub: Any) -> None:
    p = sub.add_parser("route", help="open-loop routing to bufferless servers: the loss-optimal period (paper 003)",
                       epilog=EXAMPLE, formatter_class=Formatter,
                       description="The periodic routing sequence that minimises the fraction of packets lost when "
                                   "a stream is split without feedback over M parallel servers without buffers "
                                   "(paper 003).")
    p.add_argument("--arrival-rate", type=real_number(0, "the arrival rate", "1.5", strict=True), default=None,
                   metavar="L", help="Poisson arrivals per second (or the rate --arrivals is rescaled to)")
    p.add_argument("--arrivals", metavar="MAP.yaml", default=None,
                   help="a MAP or MMPP of the arrivals (YAML) instead of Poisson")
    p.add_argument("--service-rates", type=number_list("service rates", "1,5", positive=True), required=True,
                   metavar="MU1,MU2,...", help="exponential service rate of each server, per second")
    p.add_argument("--max-period", type=whole_number(1, "the period bound", "12", maximum=MAX_PERIOD,
                                                     estimate=route_cost), default=12, metavar="P",
                   help="longest period searched (mdp: the bound on the distance between two packets sent to "
                        "one server)")
    p.add_argument("--method", choices=ROUTING_METHODS, default="auto", help="search method (see below)")
    p.add_argument("--certify", action="store_true",
                   help="mdp: raise the bound to the certificate B* so that the result is optimal over all policies")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=lazy("robotctl.cli._run_route", "run_route"))


__all__ = ["ROUTING_METHODS", "register"]
