"""``robotctl solve`` and ``robotctl optimise``: the model core from the command line."""

from __future__ import annotations

import argparse
from typing import Any

from ._args import policy, real_number, whole_number
from ._cmd_buffers import add_buffer_arguments
from ._parser import Formatter, lazy

#: The exact solver's methods (``robotctl.model.METHODS``; a test keeps the two equal).
SOLVER_METHODS = ("auto", "block", "qbd", "sparse", "iterative")
#: The threshold search's methods (``robotctl.policies.SEARCH_METHODS``; a test keeps the two equal).
SEARCH_METHODS = ("auto", "exhaustive", "local")
#: Policy kinds ``optimise`` searches: paper 000's thresholds or paper 001's dynamic control (the glossary's
#: "policy kind", docs/ARCHITECTURE.md).
POLICY_KINDS = ("thresholds", "mdp")
#: Policy spaces of ``optimise`` (``robotctl.policies.SPACES``; a test keeps the two equal).
SPACES = ("monotone", "all")

#: argparse types of the tolerance, the time budget and the process count
_tolerance = real_number(0.0, "the tolerance", "1e-3", strict=True)
_seconds = real_number(0.0, "the time budget", "20", strict=True)
#: Most processes for ``optimise --workers`` (each is a whole interpreter with its own model); the run uses at
#: most the machine's CPUs of them.
MAX_WORKERS = 256
_processes = whole_number(1, "the number of processes", "2", maximum=MAX_WORKERS,
                          estimate=lambda n: f"{n} interpreters of about 100 MB each; at most the CPUs are used")

SOLVE_EXAMPLE = """\
example:
  robotctl solve config/paper-example.yaml --policy 3,3,3,1,1,1
      three robots while at most two pages are in the system, one above: J = 63.54
  robotctl solve config/paper-example.yaml --policy 3,3,3,1,1,1 --json | jq .measures.p_loss
  robotctl solve config/paper-example.yaml --policy 3,3,3,1,1,1 --buffer renovation --q 0.5,0.3,0.2
      renovation (paper 004) instead of obsolescence timers; --q best searches the cheapest law

  robotctl solve config/paper-example.yaml --park 3,3,3,1,1,1 --resume 3,3,1,1,1,1 --json
      a hysteresis policy: park down to park(i) above it, resume up to resume(i) below it (exact, with
      commands_per_robot_min: park and resume commands per robot per minute)

--policy lists r(0), r(1), ..., r(K): the number of active robots at each queue length, non-increasing.
It is the hysteresis policy --park r --resume r; every solve reports commands_per_robot_min.
The model is first reduced exactly (lumped phases). When the exact chain is too large (it grows like
R^(K-1) with R obsolescence phases), --approx evaluates the ordered-head ladder and prints every measure
with its error bar:
  robotctl solve big.yaml --policy ... --approx --tol 1e-4
Exit status: 0 solved, 1 the solver reports success=false, 2 bad input.
"""

OPTIMISE_EXAMPLE = """\
example:
  robotctl optimise config/paper-example.yaml --all-subsets
      prints Table 1 of paper 000: the static costs C_1..C_4, the best thresholds for every
      subset of modes, and the optimum (modes 3,1, threshold 2, J = 63.54, R = 28.9%)
  robotctl optimise config/paper-example.yaml --modes 3,1 --json
  robotctl fit trace.jsonl --yaml | robotctl optimise -
  robotctl optimise config/paper-example.yaml --certify
      adds a lower bound from a full-information MDP: no policy, threshold or not, can cost less;
      gap_percent says how far the threshold optimum can be from the best policy of any form
  robotctl optimise poisson-model.yaml --policy-kind mdp
      paper 001's dynamic control (wake or park one robot at each event) instead of thresholds, for a
      model of Poisson robots (one mode per number of robots, consecutive), exponential service, no
      obsolescence and no response cost; --method mdp is the same (see `robotctl mdp`)

  robotctl optimise config/demo-fitted.yaml --commands-curve
      hysteresis policies (park and resume vectors), every one costed exactly: the Pareto curve of cost
      (J without the command term) against park/resume commands per robot per minute
  robotctl optimise config/demo-fitted.yaml --max-commands-per-robot-min 6
      the cheapest hysteresis policy found that sends at most 6 commands per robot per minute; with
      costs.command > 0 in the model file the search is over hysteresis policies and J includes
      costs.command x commands per second; --certify adds paper 001's MDP with the switching cost as
      a lower bound on every commanded fleet (lower_bound, gap_percent)

  robotctl optimise config/paper-example.yaml --max-loss 0.18 --max-starvation 0.07
      targets instead of weights: the policy of least robot time (mean active robots) whose exact
      P_loss <= 0.18 and P_starvation <= 0.07 (3,3,3,1,1,1 here); exit 1 and "infeasible: the best any
      policy can do is ..." when no policy meets them

Modes are numbers of active robots. For modes m_1 > ... > m_n the paper's thresholds
j_1 <= ... <= j_{n-1} (each in 0..K-1) run m_r robots at queue lengths j_{r-1}+1 .. j_r
(j_0 = -1, j_n = K): the largest mode at an empty queue, the smallest at a full one.
Without --modes the search covers every subset of the model's modes.

Large fleets and buffers: above 5,000 threshold policies the search is local (coordinate and block
moves with restarts; --workers runs the restarts in parallel processes). When the exact chain is too
large, policies are costed on an ordered-head approximation and the optimum is reported with an
error bar on its cost (--tol, --max-seconds); the output says which ("method", "error_bound",
"exact"). --space all also searches queue-length policies whose robots need not decrease with the
queue, and says whether the best one is monotone.
  robotctl optimise fleet.yaml --workers 2 --json | jq '{cost, error_bound, method}'
With any of --max-loss, --max-obsolete, --max-starvation the search minimises robot time under those
bounds (the cost weights then only price the answer); --search local is then the Lagrangian search.
Exit status: 0 optimum found, 1 some policy could not be solved (or the MDP or the bound did not
converge, or no policy meets the targets), 2 bad input.
"""


#: Most modes ``--modes`` may list (the search covers every subset of them).
MAX_MODES = 64


def _fraction_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; write a fraction, e.g. 0.01 for 1%") from exc
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: a target is a fraction above 0 and at most 1, e.g. 0.01 for 1%")
    return value


_rate_arg = real_number(0.0, "the command budget", "6")


def _modes_arg(text: str) -> tuple[int, ...]:
    if text.count(",") >= MAX_MODES:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}... lists more than {MAX_MODES} modes, e.g. 3,1")
    try:
        modes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a comma-separated list of robot counts, "
                                         "e.g. 3,1") from exc
    if not modes or any(m < 0 for m in modes):
        raise argparse.ArgumentTypeError(f"{text!r}: give robot counts >= 0, e.g. 3,1")
    return modes


def register(sub: Any) -> None:
    p = sub.add_parser("solve", help="measures and cost of one policy (exact)", epilog=SOLVE_EXAMPLE,
                       formatter_class=Formatter,
                       description="Solve the queue exactly under one threshold policy and print the measures "
                                   "of paper 000 (Sections 4-5) and the cost J of its eq. (2).")
    p.add_argument("model_file", metavar="MODEL.yaml", help="model file (docs/ARCHITECTURE.md); - reads standard input")
    p.add_argument("--policy", type=policy, default=None,
                   help="robots at queue length 0..K, comma-separated, non-increasing (e.g. 3,3,3,1,1,1)")
    p.add_argument("--park", default=None, metavar="R0,...,RK",
                   help="hysteresis policy: park down to this many robots at each queue length (with --resume)")
    p.add_argument("--resume", default=None, metavar="R0,...,RK",
                   help="hysteresis policy: resume up to this many robots at each queue length, <= --park")
    p.add_argument("--method", choices=SOLVER_METHODS, default="auto", help="exact solver method")
    add_buffer_arguments(p)
    p.add_argument("--approx", action="store_true",
                   help="exact when the exact chain is small, else the ordered-head ladder with error bars")
    p.add_argument("--tol", type=_tolerance, default=1e-4,
                   help="with --approx: relative agreement of consecutive depths to stop at")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=lazy("robotctl.cli._run_model", "run_solve"))

    o = sub.add_parser("optimise", aliases=["optimize"], help="cost-optimal thresholds (exact)",
                       epilog=OPTIMISE_EXAMPLE, formatter_class=Formatter,
                       description="Find the threshold policy that minimises the cost J of paper 000, eq. (2).")
    o.add_argument("model_file", metavar="MODEL.yaml", help="model file (docs/ARCHITECTURE.md); - reads standard input")
    o.add_argument("--modes", type=_modes_arg, default=None, metavar="MODES",
                   help="search only these modes, e.g. 3,1 (default: every subset of the model's modes)")
    o.add_argument("--all-subsets", action="store_true",
                   help="also print the best thresholds of every subset of modes and the static costs (Table 1)")
    o.add_argument("--search", choices=SEARCH_METHODS, default="auto",
                   help="exhaustive over every threshold vector, or local descent (for large K or many modes)")
    o.add_argument("--method", choices=(*SOLVER_METHODS, "mdp"), default="auto",
                   help="exact solver method to recompute the optimum's measures with; mdp means --policy-kind mdp")
    o.add_argument("--policy-kind", choices=POLICY_KINDS, default="thresholds",
                   help="thresholds: the best r(i) of paper 000; mdp: paper 001's dynamic control (Poisson robots); "
                        "formerly --control")
    o.add_argument("--certify", action="store_true",
                   help="also compute a lower bound on the cost of every policy (lower_bound, gap_percent)")
    o.add_argument("--max-loss", type=_fraction_arg, default=None, metavar="FRACTION",
                   help="target: at most this fraction of offered pages lost at the full buffer (P_loss)")
    o.add_argument("--max-obsolete", type=_fraction_arg, default=None, metavar="FRACTION",
                   help="target: at most this fraction of offered pages dropped as obsolete (P_obsolete)")
    o.add_argument("--max-starvation", type=_fraction_arg, default=None, metavar="FRACTION",
                   help="target: the indexer idle at most this fraction of the time (P_starvation)")
    o.add_argument("--hysteresis", action="store_true",
                   help="search hysteresis policies (park and resume vectors); implied by the two options below "
                        "and by costs.command > 0")
    o.add_argument("--commands-curve", action="store_true",
                   help="print the Pareto curve of cost against park/resume commands per robot per minute")
    o.add_argument("--max-commands-per-robot-min", type=_rate_arg, default=None, metavar="RATE",
                   help="target: at most this many park/resume commands per robot per minute")
    o.add_argument("--space", choices=SPACES, default="monotone",
                   help="threshold policies only, or also queue-length policies in any order")
    o.add_argument("--workers", type=_processes, default=None,
                   help="processes for the local search's restarts (default and most: the number of CPUs)")
    o.add_argument("--tol", type=_tolerance, default=1e-3,
                   help="relative tolerance of the error bar's ladder when the exact chain is too large")
    o.add_argument("--max-seconds", type=_seconds, default=20.0,
                   help="time budget of the whole optimisation: the ladder does not start a depth projected "
                        "to end after it (a wider error bar, and budget_exhausted, when it runs out)")
    o.add_argument("--json", action="store_true", help="machine-readable output")
    o.deprecate("--control", "--policy-kind")
    o.set_defaults(func=lazy("robotctl.cli._run_model", "run_optimise"))


__all__ = ["MAX_MODES", "POLICY_KINDS", "SEARCH_METHODS", "SOLVER_METHODS", "SPACES", "register"]
