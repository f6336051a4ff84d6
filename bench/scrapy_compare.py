"""Scrapy's own controllers against robotctl, on the demo site with the same seed and duration.

Runs the example project (examples/scrapy_demo/run.py) once per configuration, each in a fresh
interpreter (Twisted's reactor runs once per process), one after the other:

- ``autothrottle``: Scrapy's AutoThrottle alone (its defaults: start delay 5 s, target concurrency 1 per
  site), at most ``CONCURRENT_REQUESTS`` = 3 downloads;
- ``fixed C``: a fixed ``CONCURRENT_REQUESTS`` = C, for C in ``--fixed`` (default 1, 2, 3);
- ``robotctl``: RobotctlExtension, 3 robots of one download each, the agent (``robotctl serve``, a sidecar
  process) fitting the traffic and adopting the cost-optimal thresholds during the run.

Every run feeds the same indexer (robotctl.crawler's: a buffer of K = 8 documents, FIFO service paced
to the project's ``INDEXER_PROCESSING_RATE_BPS``, waiting documents dropped when they change at the
source) and is measured the same way after the warm-up: offered and indexed rates, P_loss, P_obs, P_star,
the mean number of downloads in progress (one robot = one download), the mean service and response
times of indexed documents, and robotctl's cost J (paper 000 eq. (2), the demo's costs). The last
column is each run's cost over robotctl's, measured in the same invocation.

Usage: python bench/scrapy_compare.py [--duration 120] [--warmup 10] [--seed 1] [--fixed 1,2,3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "scrapy_demo"


def run(mode: str, args: argparse.Namespace, out: Path, concurrency: int | None = None) -> dict[str, Any]:
    cmd = [sys.executable, "run.py", "--mode", mode, "--duration", str(args.duration), "--warmup", str(args.warmup),
           "--seed", str(args.seed), "--json", str(out), "--quiet"]
    if concurrency is not None:
        cmd += ["--concurrency", str(concurrency)]
    t = time.monotonic()
    proc = subprocess.run(cmd, cwd=EXAMPLE, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    result["label"] = mode if concurrency is None else f"{mode} {concurrency}"
    result["seconds"] = time.monotonic() - t
    return result


def table(results: list[dict[str, Any]]) -> str:
    mine = next(r for r in results if r["mode"] == "robotctl")
    head = ("| Scrapy with | docs/s offered | indexed | P_loss | P_obs | P_star | downloads | service s | "
            "response s | cost J | J / J robotctl |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        m, j = r["measures"], r["cost"]["total"]
        lines.append(f"| {r['label']} | {m['arrival_rate']:.1f} | {r['indexed_per_s']:.1f} | {m['p_loss']:.3f} | "
                     f"{m['p_obsolete']:.3f} | {m['p_starvation']:.3f} | {m['mean_active_robots']:.2f} | "
                     f"{r['service_mean_s']:.4f} | {m['mean_response_served']:.3f} | {j:.2f} | "
                     f"{j / mine['cost']['total']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=120.0, help="seconds of each crawl (default 120)")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds left out of the measures (default 10)")
    p.add_argument("--seed", type=int, default=1, help="seed of the site (default 1)")
    p.add_argument("--fixed", default="1,2,3", help="fixed concurrencies to run (default 1,2,3)")
    p.add_argument("--json", default=None, help="write every run's result to this file")
    args = p.parse_args(argv)
    fixed = [int(x) for x in args.fixed.split(",") if x.strip()]
    results = []
    with tempfile.TemporaryDirectory(prefix="robotctl-scrapy-compare-") as tmp:
        plan: list[tuple[str, int | None]] = [("autothrottle", None), *(("fixed", c) for c in fixed),
                                              ("robotctl", None)]
        for n, (mode, c) in enumerate(plan):
            results.append(run(mode, args, Path(tmp) / f"{n}.json", c))
            r = results[-1]
            print(f"  {r['label']}: J = {r['cost']['total']:.2f} ({r['seconds']:.0f} s)", file=sys.stderr, flush=True)
    print(f"Scrapy on robotctl's demo site, seed {args.seed}, {args.duration:g} s per run, measured after "
          f"{args.warmup:g} s; indexer K = 8")
    print(table(results))
    mine = results[-1]
    for s in mine.get("policies", []):
        if s["window_s"] > 0:
            print(f"- {','.join(map(str, s['robots_at_level']))} ({s['source']}, from {s['adopted_at_s']:g} s): "
                  f"{s['window_s']:.1f} s of the window")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
