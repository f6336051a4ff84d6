"""``robotctl fit``: a trace file to a model file (docs/ARCHITECTURE.md, "Model file") plus the fit's report."""

from __future__ import annotations

import argparse
from typing import Any

from ._args import real_number, whole_number
from ._parser import Formatter, lazy

FIT_EXAMPLE = """\
example:
  robotctl fit trace.jsonl --mode-field active --processing-rate-bps 2e6 --capacity 20 \\
      --mean-useful-life-s 600 --costs costs.yaml --yaml > model.yaml
  robotctl fit examples/trace.jsonl.gz --config examples/sidecar.yaml --mode-field active | robotctl optimise -
      capacity, costs, the fleet's modes and the fit's settings from the sidecar's configuration

What is read from the trace (docs/ARCHITECTURE.md: JSON Lines, or CSV with the same columns):
  delivery events      t, pages (default 1), and the --mode-field column (number of active robots)
  service              service_s on any event (per page: service_s / pages); else bytes / pages of the
                       completions (or of the deliveries) divided by --processing-rate-bps
  obsolescence         --mean-useful-life-s; else estimated from obsolete drops over the page-seconds
                       spent waiting (deliveries, losses, completions, obsolete drops and queue events
                       rebuild the queue) when there are at least 30 drops; else none
Without --mode-field every delivery counts as mode 1. With it, the park/resume lines that carry the field
give the mode trajectory, and each mode's intervals are measured on its own clock (time spent in the mode;
the report's mode_clock says how many were joined across stays in other modes). Without --modes the model
has the observed modes; modes listed but not observed get D^(r) = (r / r_obs) D^(r_obs) from the nearest
observed mode.
The trace cannot tell the indexer's buffer K: give --capacity, or --config with the sidecar's configuration
(queue.capacity, costs, robots.min_active..count as --modes, fit.processing_rate_bps,
fit.mean_useful_life_s, fit.options; a flag given wins). Without costs (--costs or --config) the model
file has none and `robotctl optimise` refuses it.

The output is a model file (model:, costs: when --costs is given) with the fit's report under report:,
which explains every choice (batch resolution, censored stop gaps, the MAP(2) rung of each mode, the
service and obsolescence laws). Exit status: 0 fitted, 1 the fit reports success=false (too little
data; the model is still printed), 2 bad input.
"""


#: Most modes a fitted model may define (each is a BMAP to fit and a mode for the threshold search).
MAX_MODES = 256


def _modes_arg(text: str) -> tuple[int, ...]:
    out: list[int] = []
    too_many = argparse.ArgumentTypeError(f"{text[:40]!r} lists more than {MAX_MODES} modes; a model defines one "
                                          "BMAP per mode: give the robot counts the fleet runs, e.g. 1-4")
    try:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi - lo + 1 > MAX_MODES:
                    raise too_many
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
            if len(out) > MAX_MODES:
                raise too_many
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a list of robot counts, e.g. 1,2,3,4 or 1-4") from exc
    if not out or min(out) < 0 or len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: give distinct robot counts >= 0, e.g. 1-4")
    return tuple(sorted(out))


_positive = real_number(0, "the value", "2e6", strict=True)


_nonnegative = real_number(0, "the resolution in seconds", "0.01")


_bound = real_number(0, "the censoring bound in seconds", "3600, or inf for no censoring", strict=True,
                     finite=False)


_capacity = whole_number(1, "K (pages in the system, the one being indexed included)", "5")


def register(sub: Any) -> None:
    p = sub.add_parser("fit", help="fit the model (BMAP per mode, service, obsolescence) to a trace",
                       epilog=FIT_EXAMPLE, formatter_class=Formatter,
                       description="Fit the queueing model of paper 000 to a delivery trace: batches, stop gaps, "
                                   "a MAP(2) of batch epochs per number of active robots with the batch-size law "
                                   "(a BMAP), an H2/PH service law and an exponential useful life; print it as a "
                                   "model file with the report of every choice.")
    own = "%(default).0s"  # the help states its own default; keep argparse from adding "(default: None)"
    p.add_argument("trace", metavar="TRACE", help="trace file (JSON Lines or CSV); - reads standard input")
    p.add_argument("--mode-field", metavar="FIELD", default=None,
                   help="trace column holding the number of active robots at each delivery (the agent writes "
                        "`active`); default: one mode, 1" + own)
    p.add_argument("--modes", type=_modes_arg, default=None, metavar="MODES",
                   help="modes the model must define, e.g. 1-4 or 1,2,4 (default: the observed ones)" + own)
    p.add_argument("--processing-rate-bps", type=_positive, default=None, metavar="X",
                   help="indexer bytes per second: service time = page bytes / X (needed when the trace has sizes "
                        "but no service_s)" + own)
    p.add_argument("--mean-useful-life-s", type=_positive, default=None, metavar="Y",
                   help="mean useful life of a waiting page in seconds (exponential); default: estimated from "
                        "obsolete drops when there are enough, else no obsolescence" + own)
    p.add_argument("--capacity", type=_capacity, default=None, metavar="K",
                   help="K, pages in the system with the one being indexed (the trace cannot tell); required "
                        "unless --config gives queue.capacity" + own)
    p.add_argument("--config", metavar="SIDECAR.yaml", default=None,
                   help="the sidecar's configuration: capacity, costs, modes and fit settings (flags win)" + own)
    p.add_argument("--costs", metavar="FILE", default=None,
                   help="YAML with the cost coefficients (a costs: mapping, or a model file) to copy into the "
                        "output (default: none)" + own)
    p.add_argument("--batch-resolution-s", type=_nonnegative, default=None, metavar="S",
                   help="deliveries closer than S seconds are one batch (default: chosen from the data; 0: only "
                        "equal timestamps)" + own)
    p.add_argument("--censor-above-s", type=_bound, default=None, metavar="S",
                   help="intervals between batches longer than S seconds are stops and removed (default: chosen "
                        "from the data; inf: none)" + own)
    p.add_argument("--sort", action="store_true",
                   help="sort a trace whose times go backwards (default: such a trace is an error)" + own)
    out = p.add_mutually_exclusive_group()
    out.add_argument("--yaml", dest="output", action="store_const", const="yaml",
                     help="print the model file as YAML (the default)" + own)
    out.add_argument("--json", dest="output", action="store_const", const="json",
                     help="print the model file as JSON (machine-readable)" + own)
    p.set_defaults(func=lazy("robotctl.cli._run_fit", "run_fit"), output="yaml")


__all__ = ["MAX_MODES", "register"]
