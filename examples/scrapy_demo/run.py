"""The example in one command: robotctl's demo site on 127.0.0.1, robotctl's agent as a sidecar process
(``robotctl serve``), and this Scrapy project crawling the site; then the indexer's measures and
robotctl's cost.

    python run.py                                   # robotctl in control
    python run.py --mode autothrottle               # Scrapy's AutoThrottle alone
    python run.py --mode fixed --concurrency 2      # a fixed number of concurrent downloads
    python run.py --agent-url http://127.0.0.1:8787 # robotctl in control, an agent you started yourself
    python run.py --duration 30 --seed 7 --json run.json

Run it from this folder (``make scrapy-demo`` does), where Scrapy finds the project's settings. The
site, the costs and the agent's settings are robotctl demo's (config/demo.yaml); the indexer's capacity
and speed are this project's INDEXER_* settings. The agent runs in its own process, as a sidecar would:
in this one it would take the interpreter's lock from the crawl and from the indexer, whose service time
includes real work.
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

import yaml
from robotctl_demo.pipelines import IndexerPipeline
from robotctl_demo.spiders.site import SiteSpider
from scrapy.crawler import AsyncCrawlerRunner
from scrapy.settings import Settings

from robotctl.agent.client import AgentClient
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
    p.add_argument("--agent-url", default=None, help="an agent already running (default: start robotctl serve)")
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
async def sidecar(demo: DemoConfig, workdir: Path) -> AsyncIterator[str]:
    """``robotctl serve`` with the demo's agent configuration on a free port; its URL. Stopped by SIGTERM."""
    cfg = demo.agent_config(log_dir=str(workdir / "agent")).to_dict(redact=False)
    path = workdir / "sidecar.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "robotctl", "serve", "--config", str(path),
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=(workdir / "sidecar.log").open("wb"))
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        if "listening on " not in line:
            raise RuntimeError(f"robotctl serve did not start: {line!r}; see {workdir / 'sidecar.log'}")
        yield line.split("listening on ", 1)[1].strip()
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


@contextlib.asynccontextmanager
async def agent_for(args: argparse.Namespace, demo: DemoConfig, workdir: Path) -> AsyncIterator[str | None]:
    """The agent's URL: None without robotctl, the given URL, or a sidecar started here."""
    if args.mode != "robotctl":
        yield None
    elif args.agent_url:
        yield args.agent_url
    else:
        async with sidecar(demo, workdir) as url:
            yield url


async def crawl(args: argparse.Namespace) -> dict[str, Any]:
    """Serve the site, start the agent, crawl for ``--duration`` seconds; the result as a dict."""
    settings = Settings()
    settings.setmodule("robotctl_demo.settings", priority="project")
    robots = settings.getint("ROBOTCTL_ROBOTS")
    conc = args.concurrency if args.concurrency is not None else settings.getint("CONCURRENT_REQUESTS")
    demo = DemoConfig.from_dict({
        "demo": {"seed": args.seed, "duration_s": args.duration, "warmup_s": args.warmup, "baselines": False},
        "robots": {"count": robots},
        "indexer": {"capacity": settings.getint("INDEXER_CAPACITY"),
                    "processing_rate_bps": settings.getfloat("INDEXER_PROCESSING_RATE_BPS")}})
    with contextlib.ExitStack() as stack:
        workdir = Path(args.workdir) if args.workdir else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="robotctl-scrapy-")))
        workdir.mkdir(parents=True, exist_ok=True)
        async with run_site(demo.site) as site, agent_for(args, demo, workdir) as url:
            over: dict[str, Any] = {"CONCURRENT_REQUESTS": conc, "CONCURRENT_REQUESTS_PER_DOMAIN": conc,
                                    "INDEXER_DB": str(workdir / f"index-{args.mode}-{time.time_ns()}.sqlite"),
                                    "ROBOTCTL_ENABLED": args.mode == "robotctl",
                                    "AUTOTHROTTLE_ENABLED": args.mode == "autothrottle",
                                    "LOG_LEVEL": "WARNING" if args.quiet else "INFO"}
            if url is not None:
                over["ROBOTCTL_URL"] = url
                over["ROBOTCTL_ROBOTS"] = min(robots, conc)
            over.update(item.split("=", 1) for item in args.set)
            settings.setdict(over, priority="cmdline")
            agent = AgentClient(url) if url is not None else None
            try:
                return await _run(args, demo, settings, site, agent)
            finally:
                if agent is not None:
                    await agent.aclose()
    raise AssertionError("unreachable")


class Spans:
    """The policies the agent had in force, and for how long inside the measurement window."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self._last = 0.0

    def note(self, policy: dict[str, Any], since_start: float, warmup: float) -> None:
        if self.spans:
            self.spans[-1]["window_s"] += max(0.0, since_start - max(self._last, warmup))
        self._last = since_start
        key = [policy["robots_at_level"], policy["source"]]
        if not self.spans or [self.spans[-1]["robots_at_level"], self.spans[-1]["source"]] != key:
            self.spans.append({"robots_at_level": key[0], "source": key[1],
                               "adopted_at_s": round(since_start, 2), "window_s": 0.0})


async def _run(args: argparse.Namespace, demo: DemoConfig, settings: Settings, site: Site,
               agent: AgentClient | None) -> dict[str, Any]:
    runner = AsyncCrawlerRunner(settings)
    crawler = runner.create_crawler(SiteSpider)
    task = runner.crawl(crawler, seeds=site.seed_urls())
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    warm_end, end = t0 + args.warmup, t0 + args.duration
    in_flight, allowed = Integral(t0), Integral(t0)
    spans = Spans()
    policy: dict[str, Any] | None = None
    windowed = False
    next_line = next_policy = t0
    result: dict[str, Any] = {}
    while not task.done():
        now = loop.time()
        pipe = IndexerPipeline.last
        engine = _engine(crawler)
        if agent is not None and now >= next_policy:  # the agent's policy, through its API, twice a second
            next_policy = now + 0.5
            with contextlib.suppress(Exception):
                policy = await agent.policy()
                spans.note(policy, loop.time() - t0, args.warmup)
        if engine is not None and pipe is not None and pipe.indexer is not None:
            in_flight.sample(now, _transferring(engine))
            allowed.sample(now, 0 if engine.paused else engine.downloader.total_concurrency)
            if not windowed and now >= warm_end:
                pipe.indexer.start_window(now)
                in_flight.total = allowed.total = 0.0
                windowed = True
            if now >= end:
                result = _measure(args, demo, settings, site, pipe, in_flight, allowed, now - warm_end, now)
                pipe.stop()
                break
            if not args.quiet and now >= next_line:
                next_line += 10.0
                idx = pipe.indexer
                print(f"[{args.mode} {now - t0:5.1f}/{args.duration:g}s] queue {idx.length}/{idx.capacity} "
                      f"downloads {_transferring(engine)}/{allowed.value:g} indexed {idx.totals.served} "
                      f"lost {idx.totals.lost} obsolete {idx.totals.obsolete}"
                      + (f" policy {','.join(map(str, policy['robots_at_level']))} ({policy['source']})"
                         if policy else ""), flush=True)
        await asyncio.sleep(0.02)
    if agent is not None:
        spans.note(policy or {"robots_at_level": [], "source": ""}, loop.time() - t0, args.warmup)
    if not task.done():
        await crawler.stop_async()
    await task
    if not result:
        raise RuntimeError("the crawl ended before --duration; see Scrapy's log above")
    result["policies"] = [{**s, "window_s": round(min(s["window_s"], args.duration - args.warmup), 2)}
                          for s in spans.spans if s["robots_at_level"]]
    tot = IndexerPipeline.last.indexer.totals if IndexerPipeline.last and IndexerPipeline.last.indexer else None
    if tot is not None:  # the whole run, the warm-up and what came after the measures included
        result["totals"] = {"offered": tot.offered, "admitted": tot.admitted, "lost": tot.lost,
                            "obsolete": tot.obsolete, "indexed": tot.served}
    stats = crawler.stats.get_stats() if crawler.stats is not None else {}
    result["scrapy"] = {k: v for k, v in stats.items() if isinstance(v, int | float | str) and (
        k.startswith("robotctl/") or k in ("finish_reason", "response_received_count", "item_scraped_count"))}
    if agent is not None:
        status = await agent.status()
        t = status["totals"]
        result["agent"] = {"deliveries": t["deliveries"], "lost": t["lost"], "completed": t["completed_pages"],
                           "obsolete": t["obsolete"], "queue": status["queue"]["length"], "refit": status["refit"]}
    return result


def _measure(args: argparse.Namespace, demo: DemoConfig, settings: Settings, site: Site, pipe: IndexerPipeline,
             in_flight: Integral, allowed: Integral, window: float, now: float) -> dict[str, Any]:
    """The measures of the window, taken on the indexer (one robot = one download: N_act is the mean number
    of downloads in progress)."""
    assert pipe.indexer is not None
    pipe.indexer.sync(now)
    stats = pipe.indexer.stats
    measures = observed_measures(stats, in_flight.total, now)
    return {"mode": args.mode, "concurrency": settings.getint("CONCURRENT_REQUESTS"), "seed": args.seed,
            "duration_s": args.duration, "warmup_s": args.warmup, "window_s": window,
            "measures": _clean(measures.to_dict()), "cost": cost_of(measures, demo.costs).to_dict(),
            "mean_allowed_downloads": allowed.total / window, "indexed_per_s": stats.served / window,
            "service_mean_s": stats.service_sum / stats.served if stats.served else None,
            "counts": {"offered": stats.offered, "admitted": stats.admitted, "lost": stats.lost,
                       "obsolete": stats.obsolete, "indexed": stats.served},
            "indexer": pipe.indexer.index_counts(), "site": site.stats.to_dict()}


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
             f"offered {m['arrival_rate']:.1f} docs/s, indexed {r['indexed_per_s']:.1f}/s  P_loss {m['p_loss']:.3f}  "
             f"P_obs {m['p_obsolete']:.3f}  P_star {m['p_starvation']:.3f}  downloads in progress "
             f"{m['mean_active_robots']:.2f} (allowed {r['mean_allowed_downloads']:.2f})  "
             f"response {m['mean_response_served']:.3f} s",
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
