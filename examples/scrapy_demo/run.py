"""The example in one command: robotctl's demo site on 127.0.0.1, robotctl's agent, and this Scrapy
project crawling the site, all in one asyncio event loop; then the indexer's measures and robotctl's cost.

    python run.py                                   # robotctl in control (its agent runs in this process)
    python run.py --mode autothrottle               # Scrapy's AutoThrottle alone
    python run.py --mode fixed --concurrency 2      # a fixed number of concurrent downloads
    python run.py --agent-url http://127.0.0.1:8787 # robotctl in control, the agent a sidecar (robotctl serve)
    python run.py --duration 30 --seed 7 --json run.json

Run it from this folder (``make scrapy-demo`` does): at the repository's root the folder scrapy/
(robotctl.scrapy) would shadow Scrapy. The site, the indexer's buffer and the costs are robotctl demo's
(config/demo.yaml); the indexer's capacity and speed are this project's INDEXER_* settings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from robotctl_demo.pipelines import IndexerPipeline
from robotctl_demo.spiders.site import SiteSpider
from scrapy.crawler import AsyncCrawlerRunner
from scrapy.settings import Settings

from robotctl.crawler import DemoConfig, Site, observed_measures, run_site
from robotctl.model import cost_of

MODES = ("robotctl", "autothrottle", "fixed")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="example: python run.py --mode autothrottle --duration 60 --seed 1")
    p.add_argument("--mode", choices=MODES, default="robotctl", help="who sets the concurrency (default: robotctl)")
    p.add_argument("--concurrency", type=int, default=None,
                   help="CONCURRENT_REQUESTS (default: the project's, 3; robotctl: one robot per download)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of crawl (default: 60)")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds left out of the measures (default: 10)")
    p.add_argument("--seed", type=int, default=1, help="seed of the site (default: 1)")
    p.add_argument("--agent-url", default=None, help="an agent already running (default: one in this process)")
    p.add_argument("--json", default=None, help="write the result to this file")
    p.add_argument("--workdir", default=None, help="the index and the agent's log (default: a temporary directory)")
    p.add_argument("--quiet", action="store_true", help="no progress lines, Scrapy's log at WARNING")
    p.add_argument("-s", "--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a Scrapy setting, as scrapy crawl -s does (e.g. -s AUTOTHROTTLE_TARGET_CONCURRENCY=2)")
    args = p.parse_args(argv)
    for item in args.set:
        if "=" not in item:
            p.error(f"-s {item!r}: write NAME=VALUE")
    if args.duration <= args.warmup:
        p.error(f"--duration ({args.duration:g}) must be longer than --warmup ({args.warmup:g})")
    return args


class Integral:
    """The time integral of a value that is sampled (sample-and-hold)."""

    def __init__(self, t: float, value: float = 0.0) -> None:
        self.t, self.value, self.total = t, value, 0.0

    def sample(self, t: float, value: float) -> None:
        self.total += self.value * max(0.0, t - self.t)
        self.t, self.value = t, value


@contextlib.asynccontextmanager
async def agent_for(args: argparse.Namespace, demo: Any, workdir: Path) -> AsyncIterator[tuple[str | None, Any]]:
    """(URL, app) of the agent: None without robotctl, the given URL, or one run here."""
    if args.mode != "robotctl":
        yield None, None
    elif args.agent_url:
        yield args.agent_url, None
    else:
        from robotctl.agent.app import run_in_process

        async with run_in_process(demo.agent_config(log_dir=str(workdir / "agent"))) as (url, app):
            yield url, app


async def crawl(args: argparse.Namespace) -> dict[str, Any]:
    """Serve the site, start the agent, crawl for ``--duration`` seconds; the result as a dict."""
    settings = Settings()
    settings.setmodule("robotctl_demo.settings", priority="project")
    robots = settings.getint("ROBOTCTL_ROBOTS")
    conc = args.concurrency if args.concurrency is not None else settings.getint("CONCURRENT_REQUESTS")
    demo = DemoConfig.from_dict({
        "demo": {"seed": args.seed, "duration_s": args.duration, "warmup_s": args.warmup, "baselines": False},
        "robots": {"count": robots},
        # the refit's solve in a worker process, as in a sidecar of its own: in a thread it would share
        # the interpreter's lock with Scrapy and take ten times as long
        "agent": {"refit": {"executor": "process"}},
        "indexer": {"capacity": settings.getint("INDEXER_CAPACITY"),
                    "processing_rate_bps": settings.getfloat("INDEXER_PROCESSING_RATE_BPS")}})
    with contextlib.ExitStack() as stack:
        workdir = Path(args.workdir) if args.workdir else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="robotctl-scrapy-")))
        workdir.mkdir(parents=True, exist_ok=True)
        async with run_site(demo.site) as site, agent_for(args, demo, workdir) as (url, app):
            over: dict[str, Any] = {"CONCURRENT_REQUESTS": conc, "CONCURRENT_REQUESTS_PER_DOMAIN": conc,
                                    "INDEXER_DB": str(workdir / f"index-{args.mode}-{time.time_ns()}.sqlite"),
                                    "ROBOTCTL_ENABLED": args.mode == "robotctl",
                                    "AUTOTHROTTLE_ENABLED": args.mode == "autothrottle",
                                    "LOG_LEVEL": "WARNING" if args.quiet else "INFO"}
            if args.mode == "robotctl":
                if conc != robots:
                    over["ROBOTCTL_ROBOTS"] = min(robots, conc)
                over["ROBOTCTL_URL"] = url
            over.update(item.split("=", 1) for item in args.set)
            settings.setdict(over, priority="cmdline")
            return await _run(args, demo, settings, site, app)
    raise AssertionError("unreachable")


async def _run(args: argparse.Namespace, demo: DemoConfig, settings: Settings, site: Site, app: Any
               ) -> dict[str, Any]:
    runner = AsyncCrawlerRunner(settings)
    crawler = runner.create_crawler(SiteSpider)
    task = runner.crawl(crawler, seeds=site.seed_urls())
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    warm_end, end = t0 + args.warmup, t0 + args.duration
    in_flight = Integral(t0)
    allowed = Integral(t0)
    spans: list[list[Any]] = []
    windowed = False
    next_line = t0 + 10.0
    agent = None
    if app is not None:
        from robotctl.agent.app import AGENT, REFIT

        agent = app[AGENT]
    refit_record = app[REFIT].record if app is not None else None
    measures = None
    last = t0
    while not task.done():
        now = loop.time()
        pipe = IndexerPipeline.last
        engine = _engine(crawler)
        if engine is not None and pipe is not None and pipe.indexer is not None:
            in_flight.sample(now, _transferring(engine))
            allowed.sample(now, 0 if engine.paused else engine.downloader.total_concurrency)
            if agent is not None:
                key = list(agent.holder.current.policy.robots_at_level)
                if not spans or spans[-1][0] != key:
                    spans.append([key, agent.holder.current.source, round(now - t0, 2), 0.0])
                if now >= warm_end:
                    spans[-1][3] += now - max(last, warm_end)
            if not windowed and now >= warm_end:
                pipe.indexer.start_window(now)
                in_flight.total = allowed.total = 0.0
                windowed = True
            if now >= end:
                pipe.indexer.sync(now)
                stats = pipe.indexer.stats
                window = now - warm_end
                # one robot = one concurrent download: N_act is the mean number of downloads in progress
                measures = observed_measures(stats, in_flight.total, now)
                result = {"mode": args.mode, "concurrency": settings.getint("CONCURRENT_REQUESTS"),
                          "seed": args.seed, "duration_s": args.duration, "warmup_s": args.warmup,
                          "window_s": window, "measures": _clean(measures.to_dict()),
                          "cost": cost_of(measures, demo.costs).to_dict(),
                          "mean_allowed_downloads": allowed.total / window,
                          "counts": {"offered": stats.offered, "admitted": stats.admitted, "lost": stats.lost,
                                     "obsolete": stats.obsolete, "indexed": stats.served},
                          "indexer": pipe.indexer.index_counts(), "site": site.stats.to_dict(),
                          "policies": [{"robots_at_level": s[0], "source": s[1], "adopted_at_s": s[2],
                                        "window_s": round(s[3], 2)} for s in spans]}
                pipe.stop()
                break
            if not args.quiet and now >= next_line:
                next_line += 10.0
                print(f"[{args.mode} {now - t0:5.1f}/{args.duration:g}s] queue {pipe.indexer.length}/"
                      f"{pipe.indexer.capacity} downloads {_transferring(engine)}/"
                      f"{allowed.value:g} indexed {pipe.indexer.totals.served} lost {pipe.indexer.totals.lost} "
                      f"obsolete {pipe.indexer.totals.obsolete}"
                      + (f" policy {agent.holder.current.policy} ({agent.holder.current.source})" if agent else ""),
                      flush=True)
        last = now
        await asyncio.sleep(0.02)
    if not task.done():
        await crawler.stop_async()
    await task
    if measures is None:
        raise RuntimeError("the crawl ended before --duration; see Scrapy's log above")
    tot = IndexerPipeline.last.indexer.totals if IndexerPipeline.last and IndexerPipeline.last.indexer else None
    if tot is not None:  # the whole run, the warm-up and what came after the measures included
        result["totals"] = {"offered": tot.offered, "admitted": tot.admitted, "lost": tot.lost,
                            "obsolete": tot.obsolete, "indexed": tot.served}
    stats = crawler.stats.get_stats() if crawler.stats is not None else {}
    result["scrapy"] = {k: v for k, v in stats.items() if isinstance(v, int | float | str) and (
        k.startswith("robotctl/") or k in ("finish_reason", "response_received_count", "item_scraped_count"))}
    if agent is not None:
        result["agent"] = {"deliveries": agent.totals.deliveries, "lost": agent.totals.lost,
                           "completed": agent.totals.completed_pages, "obsolete": agent.totals.obsolete,
                           "queue": agent.queue.length,
                           "commands": {k.value: v for k, v in agent.actuator.commands_issued.items()},
                           "refit": refit_record.to_dict() if refit_record is not None else None}
    return result


def _transferring(engine: Any) -> int:
    """Downloads in progress: requests on the wire (not those waiting out a download delay)."""
    return sum(len(slot.transferring) for slot in engine.downloader.slots.values())


def _engine(crawler: Any) -> Any:
    try:
        return crawler.engine
    except RuntimeError:  # the crawl has not started yet
        return None


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def report(r: dict[str, Any]) -> str:
    m, c = r["measures"], r["cost"]
    lines = [f"== {r['mode']} (CONCURRENT_REQUESTS = {r['concurrency']}, seed {r['seed']}, "
             f"{r['window_s']:.0f} s measured after {r['warmup_s']:g} s)",
             f"offered {m['arrival_rate']:.1f} docs/s  P_loss {m['p_loss']:.3f}  P_obs {m['p_obsolete']:.3f}  "
             f"P_star {m['p_starvation']:.3f}  downloads in progress {m['mean_active_robots']:.2f} "
             f"(allowed {r['mean_allowed_downloads']:.2f})  response {m['mean_response_served']:.3f} s",
             f"robotctl's cost J = {c['total']:.2f}  (counts: {r['counts']})"]
    for s in r.get("policies", []):
        lines.append(f"policy {','.join(map(str, s['robots_at_level']))} ({s['source']}) from {s['adopted_at_s']} s, "
                     f"{s['window_s']} s in the window")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from scrapy.utils.reactor import install_reactor

    install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
    from twisted.internet import reactor

    logging.getLogger("robotctl.agent.client").setLevel(logging.WARNING)  # one line per park/resume otherwise
    out: list[Any] = []

    async def go() -> None:
        try:
            out.append(await crawl(args))
        except BaseException as exc:
            out.append(exc)
        finally:
            reactor.stop()  # type: ignore[attr-defined]

    reactor.callWhenRunning(lambda: asyncio.ensure_future(go()))  # type: ignore[attr-defined]
    reactor.run()  # type: ignore[attr-defined]
    if not out or isinstance(out[0], BaseException):
        if out:
            raise out[0]
        return 1
    result = out[0]
    print(report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
