"""``robotctl demo``: a real crawl on this machine with the agent in control, then two baselines."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from robotctl._errors import InputError

from ._args import port, real_number, whole_number
from ._parser import Formatter

EPILOG = """\
What it does: serves a generated web site on 127.0.0.1, starts robot workers that crawl it over HTTP, an
indexer with a buffer of K documents that parses and indexes them into SQLite, and the agent, all in one
event loop. Run 1 lets robotctl fit the traffic and park or resume the robots at the optimal thresholds;
runs 2 and 3 repeat the crawl with the same seed with the best static fleet of the fitted model and with
every robot always active. The report compares the realized cost J (paper 000 eq. (2)) and the measures,
observed next to the fitted model's prediction. The live view redraws on a terminal and prints a plain
line every demo.view_interval_s seconds when piped. Each run's agent serves /metrics (its URL is printed).

Defaults: config/demo.yaml (embedded in the package; --config FILE overrides any part of it).
With --seed-url the robots crawl real sites instead (they obey robots.txt and a 1 s per-host delay at
least); baselines then run only with --baselines.

Exit codes: 0 the demo completed, 1 it could not complete (e.g. no fit), 2 bad input.

Example:
  robotctl demo                              # three runs of 60 s, about 3 minutes
  robotctl demo --duration 20 --seed 7 | tee demo.log
  robotctl demo --seed-url https://example.org/ --duration 60 --json > crawl.json
"""


_positive = real_number(0, "the number of seconds", "60", strict=True)


def _non_negative(text: str) -> float:
    try:
        v = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds; write e.g. 10") from exc
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text!r}")
    return v


_seed = whole_number(0, "a seed", "1")


def _url(text: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s) URL; write e.g. https://example.org/")
    return text




def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo", help="crawl a generated site on this machine with the agent in control, against two baselines",
        description="A real crawl with robotctl in control: site, robots, indexer and agent in one process, "
                    "then the same crawl with the best static fleet and with all robots always active.",
        epilog=EPILOG, formatter_class=Formatter)
    p.add_argument("--duration", type=_positive, default=None, metavar="S",
                   help="seconds of each run, warm-up included (default: demo.duration_s of the config, 60)")
    p.add_argument("--warmup", type=_non_negative, default=None, metavar="S",
                   help="seconds at the start of each run left out of the measures (default: demo.warmup_s, "
                        "at most a quarter of --duration when --duration is given)")
    p.add_argument("--seed", type=_seed, default=None,
                   help="seed of the site and the robots, the same for every run (default: demo.seed, 1)")
    p.add_argument("--seed-url", dest="seed_urls", type=_url, action="append", default=None, metavar="URL",
                   help="crawl this real URL instead of the generated site (repeat for several)")
    p.add_argument("--config", default=None, metavar="DEMO.yaml",
                   help="a YAML file laid out as config/demo.yaml, merged over the defaults")
    p.add_argument("--baselines", action=argparse.BooleanOptionalAction, default=None,
                   help="run the best static fleet and all robots after robotctl's run (default: on, off with "
                        "--seed-url)")
    p.add_argument("--port", type=port, default=0, metavar="PORT",
                   help="the agent's port, where /metrics is served (0: a free port, printed)")
    p.add_argument("--workdir", default=None, metavar="DIR",
                   help="keep the agent's delivery logs and the SQLite indexes here (default: a temporary "
                        "directory, removed at the end)")
    p.add_argument("--json", action="store_true",
                   help="print the report as JSON on stdout (the live view goes to stderr)")
    p.add_argument("--quiet", action="store_true", help="no live view, only the report")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from robotctl.crawler import LiveView, format_report, load_demo_config, run_demo

    cfg = load_demo_config(args.config)
    if args.duration is not None and args.warmup is not None and args.warmup >= args.duration:
        raise InputError("--warmup", f"is {args.warmup:g} s, not shorter than --duration {args.duration:g} s",
                         "leave time to measure after the warm-up")
    baselines = args.baselines
    if baselines is None and args.seed_urls:
        baselines = False
    cfg = cfg.with_overrides(seed=args.seed, duration_s=args.duration, warmup_s=args.warmup, baselines=baselines)
    stream = sys.stderr if args.json else sys.stdout
    view = LiveView(stream, interval_s=cfg.demo.view_interval_s, enabled=not args.quiet)

    def on_url(label: str, url: str) -> None:
        view.note(f"   agent for {label}: {url}  (metrics: {url}/metrics)")

    total = cfg.demo.duration_s * (3 if cfg.demo.baselines else 1)
    view.note(f"robotctl demo: up to 3 runs of {cfg.demo.duration_s:g} s (about {total / 60:.1f} min); "
              f"seed {cfg.demo.seed}" + (f"; crawling {', '.join(args.seed_urls)}" if args.seed_urls else
                                         "; crawling a generated site on 127.0.0.1"))
    import asyncio  # here, not at the top: `robotctl --help` stays instant

    from robotctl._json import json_text

    report = asyncio.run(run_demo(cfg, view=view, seed_urls=args.seed_urls, workdir=args.workdir,
                                  port=args.port, on_url=on_url))
    if args.json:
        print(json_text(report.to_dict(), indent=1))  # strict JSON: a non-finite number is null
    else:
        print(format_report(report))
    return 0 if report.success else 1

