"""robotctl's Scrapy add-on against Scrapy's own ways to pace a crawl: whole crawls, cold and warm, what users count.

Every configuration crawls the same local site from its first page to its end, each in a fresh
interpreter (bench/_scrapy_compare_crawl.py; Twisted's reactor runs once per process), one after the
other. The site has slow pages, 404s, and answers 429 or 503 with Retry-After beyond 6 requests at once;
the indexer (the item pipeline) indexes about 6 items per second from a buffer of 10 items: an item
arriving at a full buffer is lost, and a waiting item whose useful life (mean 10 s) runs out becomes
obsolete. The configurations (names for --only):

  fixed-C                 CONCURRENT_REQUESTS = C (and per domain), C in --fixed (default 1,2,4,8,16)
  autothrottle            AUTOTHROTTLE_ENABLED with its defaults (target concurrency 1), 16 requests at most
  autothrottle-target     the same with AUTOTHROTTLE_TARGET_CONCURRENCY = --target (default 4)
  backpressure            Scrapy's own backpressure: the pipeline awaits room instead of losing the item
                          (SCRAPER_SLOT_MAX_ACTIVE_SIZE at its default, 5 MB), 16 requests
  backpressure-tuned      the same with SCRAPER_SLOT_MAX_ACTIVE_SIZE = 100000 (about 11 pages in the scraper)
  robotctl-cold           ADDONS = {"robotctl.scrapy.Addon": 100}, ROBOTCTL_CAPACITY = 10,
                          ROBOTCTL_USEFUL_LIFE_S = 10, 16 requests, no .robotctl state
  robotctl-warm           the same, with the .robotctl state robotctl-cold left (its saved policy)

Per run: items indexed, lost (full buffer), obsolete, pages never fetched, crawl seconds (first request
to the last response or item, whichever is later), the seconds of it the indexer had nothing to index
(idle), items indexed per crawl-second, the 95th percentile
of the wait before indexing (indexed items), the 429/503 answers, the requests Scrapy gave up
(retry/max_reached), and J (paper 000 eq. (2) with config/demo.yaml's costs, measured over the whole
crawl, plus c_loss per page never fetched per crawl-second: a crawl cannot look cheap by not
crawling); then each run's ratios to the fixed concurrency with the most items indexed per
crawl-second. Last, issue 29's acceptance on robotctl-cold.

Examples:
  python bench/scrapy_compare.py                           # the whole comparison, 11 crawls, 10-13 minutes
  python bench/scrapy_compare.py --quick                   # smoke: fixed-4 and robotctl-cold on 60 pages
  python bench/scrapy_compare.py --only fixed-2,fixed-4,robotctl-cold,robotctl-warm --pages 200 --seed 2
  python bench/scrapy_compare.py --json runs.json          # every run's figures (and robotctl's policies)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CRAWL = Path(__file__).with_name("_scrapy_compare_crawl.py")
ALL = ("fixed", "autothrottle", "autothrottle-target", "backpressure", "backpressure-tuned", "robotctl-cold",
       "robotctl-warm")
#: issue 29's acceptance for a cold first crawl: indexed per crawl-second against the best fixed concurrency,
#: share of items lost, requests given up
MIN_RATE_RATIO, MAX_LOST_SHARE = 0.90, 0.15


def plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The runs asked for, in order: name, pipeline and Scrapy settings."""
    fixed = [int(x) for x in args.fixed.split(",") if x.strip()]
    addon = {"ADDONS": {"robotctl.scrapy.Addon": 100}, "ROBOTCTL_CAPACITY": 10, "ROBOTCTL_USEFUL_LIFE_S": 10.0,
             **args.robotctl_settings}
    runs: list[dict[str, Any]] = []
    runs += [{"name": f"fixed-{c}", "pipeline": "lossy",
              "settings": {"CONCURRENT_REQUESTS": c, "CONCURRENT_REQUESTS_PER_DOMAIN": c}} for c in fixed]
    runs += [{"name": "autothrottle", "pipeline": "lossy", "settings": {"AUTOTHROTTLE_ENABLED": True}},
             {"name": "autothrottle-target", "pipeline": "lossy",
              "settings": {"AUTOTHROTTLE_ENABLED": True, "AUTOTHROTTLE_TARGET_CONCURRENCY": args.target}},
             {"name": "backpressure", "pipeline": "awaiting", "settings": {}},
             {"name": "backpressure-tuned", "pipeline": "awaiting",
              "settings": {"SCRAPER_SLOT_MAX_ACTIVE_SIZE": 100_000}},
             {"name": "robotctl-cold", "pipeline": "lossy", "settings": addon},
             {"name": "robotctl-warm", "pipeline": "lossy", "settings": addon}]
    only = {x.strip() for x in args.only.split(",")} if args.only else None
    if only is not None:
        names = {r["name"] for r in runs}
        unknown = sorted(only - names)
        if unknown:
            raise ValueError(f"--only: unknown configuration(s) {', '.join(unknown)}; choose from "
                             f"{', '.join(r['name'] for r in runs)}")
        runs = [r for r in runs if r["name"] in only]
    return runs


def crawl(run: dict[str, Any], args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One run in a fresh interpreter; its result."""
    spec = workdir / f"{run['name']}.run.json"
    out = workdir / f"{run['name']}.json"
    settings = dict(run["settings"])
    if run["name"].startswith("robotctl"):
        settings["ROBOTCTL_DIR"] = str(workdir / ".robotctl")  # warm reads what cold left
        if run["name"] == "robotctl-cold":
            shutil.rmtree(workdir / ".robotctl", ignore_errors=True)
    spec.write_text(json.dumps({**run, "settings": settings, "pages": args.pages, "seed": args.seed,
                                "workdir": str(workdir)}))
    path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    proc = subprocess.run([sys.executable, str(CRAWL), str(spec), str(out)], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=args.timeout, check=False)
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"{run['name']}: the crawl failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}"
                         f"{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    result["j"] = cost_j(result)
    return result


def cost_j(r: dict[str, Any]) -> dict[str, float]:
    """J of paper 000 eq. (2) over the whole crawl with config/demo.yaml's costs, plus c_loss per page never
    fetched per crawl-second."""
    import numpy as np

    from robotctl.model import Costs, Measures, cost_of

    costs = Costs(loss=1.0, obsolescence=2.0, response=5.0, robot=0.1875, starvation=60.0)
    t = r["crawl_s"]
    offered = max(r["offered"], 1)
    level = np.array(r["level_seconds"], dtype=float)
    level = level / level.sum() if level.sum() > 0 else level
    m = Measures(arrival_rate=r["offered"] / t, p_loss=r["lost"] / offered, p_obsolete=r["obsolete"] / offered,
                 p_success=r["indexed"] / offered, p_starvation=float(level[0]),
                 mean_active_robots=r["download_seconds"] / t, active_robots_distribution=(),
                 queue_length_distribution=tuple(level), mean_queue_length=float(np.arange(level.size) @ level),
                 mean_response_served=r["mean_response_s"] if r["indexed"] else 0.0, mean_sojourn_obsolete=0.0,
                 mean_sojourn=0.0)
    c = cost_of(m, costs).to_dict()
    unfetched = r["site"]["pages"] - r["site"]["served"]
    c["not_fetched"] = costs.loss * unfetched / t
    c["total"] += c["not_fetched"]
    return c


def idle_s(r: dict[str, Any]) -> float:
    """Seconds of the crawl with nothing to index (before the first item included)."""
    return float(sum(end - start for start, end in r["idle"]))


def rate(r: dict[str, Any]) -> float:
    return float(r["indexed"] / r["crawl_s"])


def table(results: list[dict[str, Any]]) -> str:
    fixed = [r for r in results if r["name"].startswith("fixed-")]
    best = max(fixed, key=rate) if fixed else None
    head = ("| Scrapy with | indexed | lost | obsolete | not fetched | crawl s | idle s | indexed / crawl-s | "
            "p95 wait s | 429+503 | given up | J | rate / best fixed | indexed / best fixed | J / best fixed |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        unfetched = r["site"]["pages"] - r["site"]["served"]
        refused = r["site"]["refused_429"] + r["site"]["refused_503"]
        ratios = (f"{rate(r) / rate(best):.2f} | {r['indexed'] / max(best['indexed'], 1):.2f} | "
                  f"{r['j']['total'] / best['j']['total']:.2f}") if best is not None else "- | - | -"
        wait = r["p95_wait_s"]
        lines.append(f"| {r['name']} | {r['indexed']} | {r['lost']} | {r['obsolete']} | {unfetched} | "
                     f"{r['crawl_s']:.1f} | {idle_s(r):.1f} | {rate(r):.2f} | "
                     f"{'-' if math.isnan(wait) else f'{wait:.2f}'} | "
                     f"{refused} | {r['given_up']} | {r['j']['total']:.1f} | {ratios} |")
    return "\n".join(lines)


def acceptance(results: list[dict[str, Any]]) -> list[str]:
    """Issue 29's acceptance on robotctl's cold crawl, each item with its figure."""
    fixed = [r for r in results if r["name"].startswith("fixed-")]
    cold = next((r for r in results if r["name"] == "robotctl-cold"), None)
    if cold is None or not fixed:
        return ["acceptance: needs robotctl-cold and at least one fixed-C run"]
    best = max(fixed, key=rate)
    ratio = rate(cold) / rate(best)
    lost = cold["lost"] / max(cold["offered"], 1)
    given_up = cold["given_up"]
    return [f"acceptance (robotctl-cold against {best['name']}, the best fixed concurrency):",
            f"- indexed per crawl-second {rate(cold):.2f} / {rate(best):.2f} = {ratio:.2f} (>= {MIN_RATE_RATIO:.2f}): "
            f"{'met' if ratio >= MIN_RATE_RATIO else 'NOT met'}",
            f"- items lost {cold['lost']} of {cold['offered']} = {lost:.1%} (<= {MAX_LOST_SHARE:.0%}): "
            f"{'met' if lost <= MAX_LOST_SHARE else 'NOT met'}",
            f"- requests given up {given_up} (0): {'met' if given_up == 0 else 'NOT met'}"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pages", type=int, default=300, help="pages on the site (default 300)")
    p.add_argument("--seed", type=int, default=1, help="seed of the site and the indexer (default 1)")
    p.add_argument("--fixed", default="1,2,4,8,16", help="fixed concurrencies (default 1,2,4,8,16)")
    p.add_argument("--target", type=float, default=4.0,
                   help="AUTOTHROTTLE_TARGET_CONCURRENCY of autothrottle-target (default 4)")
    p.add_argument("--only", default=None, help="comma-separated configurations to run (default all; names above)")
    p.add_argument("--quick", action="store_true", help="smoke: --pages 60 --only fixed-4,robotctl-cold")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds before one crawl is given up (default 600)")
    p.add_argument("--json", default=None, help="write every run's figures to this file")
    p.add_argument("--workdir", default=None,
                   help="keep each run's Scrapy log, figures and robotctl's state here (default: a temporary "
                        "directory)")
    p.add_argument("-s", "--robotctl-set", action="append", default=[], metavar="NAME=VALUE",
                   help="one more Scrapy setting for robotctl's runs, VALUE as JSON where it parses, e.g. "
                        "-s ROBOTCTL_MAX_LOSS=0.05 or -s 'ROBOTCTL_AGENT_CONFIG={\"robots\": {\"hysteresis\": 0}}'")
    args = p.parse_args(argv)
    args.robotctl_settings = {}
    for item in args.robotctl_set:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            p.error(f"-s {item!r}: write NAME=VALUE")
        try:
            args.robotctl_settings[name.strip()] = json.loads(value)
        except json.JSONDecodeError:
            args.robotctl_settings[name.strip()] = value
    if args.quick:
        args.pages, args.only = 60, args.only or "fixed-4,robotctl-cold"
    if args.pages < 10:
        p.error(f"--pages {args.pages}: give at least 10 pages")
    try:
        fixed = [int(x) for x in args.fixed.split(",") if x.strip()]
    except ValueError:
        p.error(f"--fixed {args.fixed!r}: write whole numbers separated by commas, e.g. 1,2,4")
    if any(c < 1 for c in fixed):
        p.error(f"--fixed {args.fixed!r}: each concurrency must be at least 1")
    try:
        runs = plan(args)
    except ValueError as exc:
        p.error(str(exc))
    if not runs:
        p.error("nothing to run: --only and --fixed leave no configuration")
    results = []
    load0 = os.getloadavg()
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        workdir = Path(args.workdir) if args.workdir else Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="robotctl-scrapy-compare-")))
        workdir.mkdir(parents=True, exist_ok=True)
        for run in runs:
            results.append(crawl(run, args, workdir))
            r = results[-1]
            print(f"  {r['name']}: {r['indexed']} indexed, {r['lost']} lost, {r['obsolete']} obsolete in "
                  f"{r['crawl_s']:.1f} s", file=sys.stderr, flush=True)
    load1 = os.getloadavg()
    print(f"Scrapy {_scrapy_version()} on a local site of {args.pages} pages (seed {args.seed}; 429/503 with "
          f"Retry-After: 2 beyond 6 requests at once), indexer about 6 items/s, buffer 10 items, lossy, mean "
          f"useful life 10 s; {len(runs)} crawls in {time.monotonic() - t0:.0f} s, load average "
          f"{load0[0]:.1f} before, {load1[0]:.1f} after, on {os.cpu_count()} cores")
    print(table(results))
    for r in results:
        for pol in r.get("policies", []):
            before = [o for t, o in r["arrivals"] if t < pol["at_s"]]
            print(f"- {r['name']}: r(i) = {','.join(map(str, pol['robots_at_level']))} ({pol['source']}) from "
                  f"{pol['at_s']} s, when {len(before)} items had come ({before.count('lost')} lost)")
    print("\n".join(acceptance(results)))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "load": [load0, load1], "runs": results},
                                              indent=1))
    return 0


def _scrapy_version() -> str:
    from importlib.metadata import version

    return version("scrapy")


if __name__ == "__main__":
    sys.exit(main())
