"""``robotctl replay``: the agent's own decisions on recorded traffic, against a simulated clock."""

from __future__ import annotations

from typing import Any

from ._args import confidence_level, real_number, whole_number
from ._parser import Formatter, lazy

#: ``robotctl.agent.sources.FORMATS`` (a test keeps the two equal; this module imports no numpy).
FORMATS = ("auto", "jsonl", "csv", "scrapy", "heritrix", "warc")

EXAMPLE = """\
example:
  robotctl replay examples/trace.jsonl.gz --config examples/sidecar.yaml --report replay.html
      one simulated hour of examples/model.yaml's traffic under a hand-set policy that runs 4, 3, 2
      and 1 robots: the policy robotctl would have chosen at each refit, what it predicts, and its
      cost next to the best static fleet's and the recorded fleet's
  robotctl replay var/robotctl/ --config config/sidecar.yaml --json > replay.json
      the agent's own rotated delivery log: the same refits, windows and policies as the live agent
  robotctl replay crawl.log.2.gz crawl.log.1 crawl.log --config sidecar.yaml --active 8 --report out.html

What it does: every event goes to the agent's own code (the same Agent and refit loop as `robotctl
serve`) on a clock set to the event's time; the agent runs with actuation advise, so the fleet is the one
recorded (park/resume lines or the `active` field; --active when the trace records neither) and each
refit's policy is what robotctl would have commanded. Refits happen where the agent's own log made
them, else by refit.interval_s and the drift check. robotctl's decisions are what-if: their cost is
estimated by simulating each window's fitted traffic under them (--events), with confidence
intervals; so is the best static fleet's; the recorded fleet's cost is observed on the trace.

Input: JSON Lines or CSV trace files (docs/ARCHITECTURE.md), gzip or not, several files or a directory of rotated
logs; Scrapy logs, Heritrix crawl.log and WARC files (pip install 'robotctl[warc]') by --format or their
first line. Files overlapping in time lose their repeated events; events out of order are sorted;
gaps longer than --gap-s (default: chosen from the data) are left out of the observed cost. The output
says how many of each. A bad line exits 2 naming file:line.field.
Exit status: 0 replayed with at least one policy adopted, 1 no refit succeeded, 2 bad input.
"""

_time = real_number(float("-inf"), "a time in the trace's seconds", "1700000000", finite=True)
_count = whole_number(1, "a count", "400000")
_robots = whole_number(0, "the number of active robots", "4")
_seed = whole_number(0, "a seed", "7")
_gap = real_number(0, "the gap bound in seconds", "600, or inf for no gap", strict=True, finite=False)


def register(sub: Any) -> None:
    p = sub.add_parser("replay", help="replay recorded traffic through the agent: its policies and their cost",
                       epilog=EXAMPLE, formatter_class=Formatter,
                       description="Run the agent's own refit, optimise and decision code on recorded events "
                                   "against a simulated clock, and compare what robotctl would have decided with "
                                   "the best static fleet and the fleet actually recorded.")
    own = "%(default).0s"
    p.add_argument("traces", metavar="TRACE", nargs="+",
                   help="trace files or directories of rotated logs (gzip allowed); - reads standard input")
    p.add_argument("--config", metavar="SIDECAR.yaml", required=True,
                   help="the sidecar's configuration: capacity, fleet, costs, refit and fit settings")
    p.add_argument("--from", dest="t_from", type=_time, default=None, metavar="T",
                   help="replay from this time (s, the trace's clock); earlier events only build the state" + own)
    p.add_argument("--to", dest="t_to", type=_time, default=None, metavar="T",
                   help="replay up to this time (s)" + own)
    p.add_argument("--format", choices=FORMATS, default="auto",
                   help="the files' format (auto: from each file's first bytes)")
    p.add_argument("--active", type=_robots, default=None, metavar="N",
                   help="active robots when the trace does not record them (default: robots.count)" + own)
    p.add_argument("--gap-s", type=_gap, default=None, metavar="S",
                   help="intervals without events longer than S are gaps (default: chosen from the data)" + own)
    p.add_argument("--events", type=_count, default=400_000, metavar="N",
                   help="simulated events per evaluation of a fleet, split among the refit windows (formerly "
                        "--sim-events)")
    p.add_argument("--level", type=confidence_level, default=0.95, help="confidence level of the intervals")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the evaluation's simulations")
    p.add_argument("--report", metavar="OUT.html", default=None,
                   help="write an HTML report (plots need matplotlib: pip install 'robotctl[reports]')" + own)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.deprecate("--sim-events", "--events")
    p.set_defaults(func=lazy("robotctl.cli._run_replay", "run_replay"))


__all__ = ["FORMATS", "register"]
