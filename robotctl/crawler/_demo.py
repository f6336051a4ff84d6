"""The demo: site, indexer, robots and agent in one event loop, under robotctl's control and two baselines.

:func:`run_crawl` runs one crawl for ``demo.duration_s``: the generated site (or real seed URLs), the
frontier, ``robots.count`` robot workers registered with an in-process agent, the indexer, the agent
link, and a sampler that feeds the live view. Its measures cover the time after ``demo.warmup_s``:

===================  ============================================================================
arrival_rate         documents offered to the indexer per second (admitted or lost)
p_loss               lost at the full buffer / offered
p_obsolete           dropped as obsolete while waiting / offered
p_starvation         fraction of time the indexer had nothing (system empty)
mean_active_robots   time average of robots allowed to fetch
mean_response_served mean time from offer to the end of indexing, over documents indexed
===================  ============================================================================

and the realized cost is :func:`model.cost_of` of those measures: paper 000's eq. (2), the very
function the optimiser minimises.

:func:`run_demo` runs the crawl three times with the same seed: under robotctl's control (the agent
fits the traffic and adopts the optimal thresholds), with the best static fleet of the model robotctl
fitted (``policies.static_costs``), and with every robot always active; then it solves the fitted
model under each run's policy to set the predicted measures beside the observed ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from robotctl.agent import cancel_and_wait
from robotctl.model import CostBreakdown, Costs, Measures, QueueModel, ThresholdPolicy, cost_of, solve

from ._config import DemoConfig
from ._fetch import AiohttpTransport, Fetcher, RobotsRules
from ._frontier import Frontier
from ._indexer import Indexer, IndexerStats
from ._link import AgentLink
from ._robots import ActiveClock, Robot
from ._site import Site, run_site
from ._view import LiveView, ViewState, compact_levels

KINDS = ("robotctl", "static", "all")
#: Politeness towards real sites (--seed-url): seconds between two pages of one host at least, and
#: seconds before a page is fetched again at least.
REAL_SITE_DELAY_S = 1.0
REAL_SITE_MIN_REVISIT_S = 300.0


def observed_measures(stats: IndexerStats, active_seconds: float, now: float) -> Measures:
    """The measures of paper 000 as observed over the indexer's window (see the module docstring)."""
    T = stats.elapsed(now)
    nan = math.nan
    off = stats.offered
    levels = np.asarray(stats.level_time, dtype=float)
    total = float(levels.sum())
    dist = tuple(float(x) for x in (levels / total if total > 0 else levels))
    return Measures(
        arrival_rate=off / T if T > 0 else nan,
        p_loss=stats.lost / off if off else nan,
        p_obsolete=stats.obsolete / off if off else nan,
        p_success=stats.served / off if off else nan,
        p_starvation=dist[0] if total > 0 else nan,
        mean_active_robots=active_seconds / T if T > 0 else nan,
        active_robots_distribution=(),
        queue_length_distribution=dist,
        mean_queue_length=float(np.dot(np.arange(len(dist)), dist)) if total > 0 else nan,
        mean_response_served=stats.sojourn_sum / stats.served if stats.served else nan,
        mean_sojourn_obsolete=nan,
        mean_sojourn=nan,
    )


def _finite_cost(m: Measures, costs: Costs) -> CostBreakdown:
    """cost_of with undefined measures (nothing offered or served yet) counted as zero."""
    def z(v: float) -> float:
        return v if math.isfinite(v) else 0.0

    clean = replace(m, arrival_rate=z(m.arrival_rate), p_loss=z(m.p_loss), p_obsolete=z(m.p_obsolete),
                    p_starvation=z(m.p_starvation), mean_active_robots=z(m.mean_active_robots),
                    mean_response_served=z(m.mean_response_served))
    return cost_of(clean, costs)


@dataclass(frozen=True)
class PolicySpan:
    """A policy in force during a run.

    Attributes
    ----------
    robots_at_level : tuple of int
    source : str
        ``startup``, ``fit``, ``probe`` (the agent's snapshot source).
    adopted_at : float
        Seconds since the run started.
    window_s : float
        Seconds it was in force inside the measurement window.
    """

    robots_at_level: tuple[int, ...]
    source: str
    adopted_at: float
    window_s: float


@dataclass(frozen=True, eq=False)
class CrawlResult:
    """One crawl of the demo (see :func:`run_crawl`)."""

    kind: str
    label: str
    window_s: float
    measures: Measures
    cost: CostBreakdown
    counts: dict[str, int]
    parks: int
    resumes: int
    agent: dict[str, Any]
    policies: tuple[PolicySpan, ...]
    model: QueueModel | None
    index: dict[str, int]
    site: dict[str, Any]
    frontier: dict[str, Any]
    robots: tuple[dict[str, Any], ...]
    service: dict[str, float]
    predicted: Measures | None = None
    predicted_cost: CostBreakdown | None = None
    predicted_policy: ThresholdPolicy | None = None

    @property
    def main_policy(self) -> ThresholdPolicy:
        """The policy in force longest during the measurement window."""
        span = max(self.policies, key=lambda s: s.window_s)
        return ThresholdPolicy(span.robots_at_level)

    def to_dict(self) -> dict[str, Any]:
        def meas(m: Measures | None) -> dict[str, Any] | None:
            if m is None:
                return None
            d = m.to_dict()
            return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}

        return {
            "kind": self.kind, "label": self.label, "window_s": self.window_s,
            "measures": meas(self.measures), "cost": self.cost.to_dict(), "counts": dict(self.counts),
            "parks": self.parks, "resumes": self.resumes, "agent": dict(self.agent),
            "policies": [{"robots_at_level": list(s.robots_at_level), "source": s.source,
                          "adopted_at": s.adopted_at, "window_s": s.window_s} for s in self.policies],
            "main_policy": list(self.main_policy.robots_at_level),
            "index": dict(self.index), "site": dict(self.site), "frontier": dict(self.frontier),
            "robots": [dict(r) for r in self.robots], "service": dict(self.service),
            "predicted": meas(self.predicted),
            "predicted_cost": self.predicted_cost.to_dict() if self.predicted_cost is not None else None,
            "predicted_policy": (list(self.predicted_policy.robots_at_level)
                                 if self.predicted_policy is not None else None),
        }


class _CrawlCollector:
    """The crawler's own figures on the agent's /metrics (``robotctl_crawler_*``)."""

    def __init__(self, state: _CrawlState) -> None:
        self.state = state

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self.state
        idx = s.indexer.totals
        yield GaugeMetricFamily("robotctl_crawler_indexer_queue_pages", "Documents in the indexer's system "
                                "(the one being indexed included)", value=s.indexer.length)
        yield GaugeMetricFamily("robotctl_crawler_active_robots", "Robots allowed to fetch",
                                value=s.active.active)
        for name, doc, value in (
                ("offered_pages", "Documents offered to the indexer", idx.offered),
                ("lost_pages", "Documents lost at the full buffer", idx.lost),
                ("obsolete_pages", "Waiting documents dropped as obsolete", idx.obsolete),
                ("indexed_pages", "Documents indexed", idx.served),
                ("fetched_pages", "Pages fetched over HTTP", sum(r.stats.pages for r in s.robots)),
                ("fetched_resources", "Embedded resources fetched over HTTP",
                 sum(r.stats.resources for r in s.robots)),
                ("fetched_bytes", "Bytes fetched", sum(r.stats.bytes for r in s.robots)),
                ("fetch_errors", "Failed fetches", sum(r.stats.errors for r in s.robots))):
            yield CounterMetricFamily(f"robotctl_crawler_{name}", doc, value=value)
        yield GaugeMetricFamily("robotctl_crawler_realized_cost", "Cost rate J (paper 000 eq. (2)) of the "
                                "measures observed so far", value=s.cost_so_far())


@dataclass(eq=False)
class _CrawlState:
    indexer: Indexer
    active: ActiveClock
    robots: list[Robot]
    costs: Costs
    window_start: float | None = None
    t0: float = 0.0

    def measures(self, now: float) -> Measures:
        stats = self.indexer.stats if self.window_start is not None else self.indexer.totals
        self.indexer.sync(now)
        return observed_measures(stats, self.active.integral(now), now)

    def cost_so_far(self) -> float:
        return _finite_cost(self.measures(self.indexer.now()), self.costs).total


@contextlib.contextmanager
def _quiet_numpy() -> Iterator[None]:
    with np.errstate(all="ignore"):
        yield


@dataclass(eq=False)
class _Crawl:
    """The running pieces of one crawl: the agent (in process) and its client, the crawler's parts."""

    app: Any
    client: Any
    link: AgentLink
    indexer: Indexer
    frontier: Frontier
    rules: RobotsRules
    robots: list[Robot]
    active: ActiveClock
    state: _CrawlState
    site: Site | None

    @property
    def agent(self) -> Any:
        from robotctl.agent import AGENT

        return self.app[AGENT]


class _PolicySpans:
    """Which policy was in force from when, and for how long within the measured window."""

    def __init__(self, t0: float, warm_end: float) -> None:
        self.t0, self.warm_end, self.last_t = t0, warm_end, t0
        self.spans: list[list[Any]] = []  # [robots_at_level, source, adopted_at, window seconds]

    def observe(self, now: float, policy: tuple[int, ...], source: str) -> None:
        if self.spans:
            lo, hi = max(self.last_t, self.warm_end), now
            if hi > lo:
                self.spans[-1][3] += hi - lo
        self.last_t = now
        if not self.spans or self.spans[-1][0] != policy or self.spans[-1][1] != source:
            self.spans.append([policy, source, now - self.t0, 0.0])

    def result(self) -> tuple[PolicySpan, ...]:
        return tuple(PolicySpan(tuple(s[0]), str(s[1]), float(s[2]), float(s[3])) for s in self.spans)


async def _start_crawl(stack: contextlib.AsyncExitStack, config: DemoConfig, kind: str, static: int | None,
                       seed_urls: Sequence[str] | None, workdir: str | Path | None, port: int,
                       on_url: Callable[[str], None] | None) -> _Crawl:
    """Start the site (or take the seed URLs), the agent, the indexer and the robots, each closed by
    ``stack``."""
    from robotctl.agent import AgentClient, run_in_process

    if workdir is None:
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="robotctl-demo-"))
    run_dir = Path(workdir) / f"{kind}-{int(time.time() * 1000)}"
    run_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)  # the run's own: nobody else on the host moves its robots
    agent_cfg = config.agent_config(log_dir=str(run_dir / "agent"), port=port,
                                    static=None if kind == "robotctl" else static, token=token)
    registry = CollectorRegistry()
    # one session for the agent client, closed after the agent has shut down: the agent's shutdown
    # answers the robots' open long-polls, so none of them fails on a closed connector
    session = await stack.enter_async_context(aiohttp.ClientSession())
    site: Site | None = None
    if seed_urls is None:
        site = await stack.enter_async_context(run_site(config.site))
        seeds = site.seed_urls()
    else:
        seeds = list(seed_urls)
    base_url, app = await stack.enter_async_context(run_in_process(agent_cfg, registry=registry))
    if on_url is not None:
        on_url(base_url)
    client = await stack.enter_async_context(AgentClient(base_url, session=session, token=token))
    link = AgentLink(client)
    indexer = Indexer(config.indexer, db_path=run_dir / "index.sqlite", on_event=link.push)
    stack.callback(indexer.close)
    rc = config.robots
    if site is None:  # real sites: at least 1 s between pages of a host, 5 min before a revisit
        rc = replace(rc, min_revisit_s=max(rc.min_revisit_s, REAL_SITE_MIN_REVISIT_S))
    delay = config.site.crawl_delay_s if site is not None else REAL_SITE_DELAY_S
    frontier = Frontier(delay_s=delay, revisit_share=rc.revisit_share)
    frontier.add_many(seeds)
    fetcher = Fetcher(AiohttpTransport(), user_agent=rc.user_agent, timeout_s=rc.fetch_timeout_s,
                      max_bytes=rc.max_page_bytes)
    stack.push_async_callback(fetcher.aclose)
    rules = RobotsRules(fetcher, frontier, user_agent=rc.user_agent)
    handles = [await client.register_robot(f"robot-{i}", rank=i, default_state="active")
               for i in range(1, rc.count + 1)]
    seq = np.random.SeedSequence([config.demo.seed, 7])
    robots = [Robot(h.robot_id, switch=h, frontier=frontier, fetcher=fetcher, rules=rules, sink=indexer,
                    config=rc, rng=np.random.default_rng(child))
              for h, child in zip(handles, seq.spawn(len(handles)), strict=True)]
    active = ActiveClock(handles, asyncio.get_running_loop().time)
    state = _CrawlState(indexer, active, robots, config.costs)
    registry.register(_CrawlCollector(state))
    return _Crawl(app, client, link, indexer, frontier, rules, robots, active, state, site)


async def _measure(crawl: _Crawl, config: DemoConfig, label: str,
                   view: LiveView | None) -> tuple[Measures, float, _PolicySpans]:
    """Run the robots and the indexer for ``demo.duration_s``, measuring after ``demo.warmup_s``;
    returns the measures, the measured window's length and the policies in force."""
    settings, state, indexer, loop = config.demo, crawl.state, crawl.indexer, asyncio.get_running_loop()
    agent = crawl.agent
    crawl.link.start()
    crawl.active.start()
    t0 = loop.time()
    state.t0 = t0
    tasks = [asyncio.ensure_future(indexer.run())] + [asyncio.ensure_future(r.run()) for r in crawl.robots]
    spans = _PolicySpans(t0, t0 + settings.warmup_s)
    end = t0 + settings.duration_s
    tick = 0.25 if view is not None and view.interactive else 0.5
    try:
        while True:
            now = loop.time()
            snap = agent.policy
            spans.observe(now, tuple(snap.policy.robots_at_level), snap.source)
            if state.window_start is None and now >= spans.warm_end:
                indexer.start_window(now)
                crawl.active.restart(now)
                state.window_start = now
            if view is not None:
                view.update(_view_state(label, state, agent, crawl.link, now, t0, settings.duration_s,
                                        config.costs))
            if now >= end:
                break
            await asyncio.sleep(min(tick, end - now))
        now = loop.time()
        indexer.sync(now)
        indexer.stop()  # no expiry after this instant: the counts below match these measures
        measures = observed_measures(indexer.stats, crawl.active.integral(now), now)
        window_s = indexer.stats.elapsed(now)
    finally:
        # cancel_and_wait cancels again until each task has ended: a robot whose cancellation lands as an
        # awaited result arrives absorbs one cancel, and under load (load 12 on 2 cores) one robot then
        # crawled on for minutes, delivering into a stopped indexer, while this waited for it
        await asyncio.gather(*(cancel_and_wait(t) for t in tasks), return_exceptions=True)
        await crawl.active.stop()
    return measures, window_s, spans


async def _wind_down(crawl: _Crawl, view: LiveView | None) -> dict[str, Any]:
    """Send what the link holds, read the agent's status, and let its refits settle; returns the status."""
    await crawl.link.drain()
    status = await crawl.client.status()
    await crawl.link.close()
    await _quiesce_refits(crawl.app)
    if view is not None:
        view.finish()
    return dict(status)


def _crawl_result(crawl: _Crawl, config: DemoConfig, kind: str, label: str, measures: Measures, window_s: float,
                  spans: _PolicySpans, status: Mapping[str, Any]) -> CrawlResult:
    indexer, robots = crawl.indexer, crawl.robots
    snap = crawl.agent.policy
    totals = status.get("totals", {})
    idx = indexer.totals
    counts = {
        "offered": indexer.stats.offered, "admitted": indexer.stats.admitted, "lost": indexer.stats.lost,
        "obsolete": indexer.stats.obsolete, "indexed": indexer.stats.served, "batches": indexer.stats.batches,
        "total_offered": idx.offered, "total_admitted": idx.admitted, "total_lost": idx.lost,
        "total_obsolete": idx.obsolete, "total_indexed": idx.served,
        "fetched_pages": sum(r.stats.pages for r in robots),
        "fetched_resources": sum(r.stats.resources for r in robots),
        "fetched_bytes": sum(r.stats.bytes for r in robots),
        "fetch_errors": sum(r.stats.errors for r in robots),
        "disallowed_skipped": sum(r.stats.disallowed for r in robots),
    }
    svc = np.asarray(indexer.stats.service_times or [math.nan])
    with _quiet_numpy():
        service = {"mean_s": float(np.mean(svc)), "scv": float(np.var(svc) / np.mean(svc) ** 2),
                   "work_share": (indexer.stats.work_sum / indexer.stats.service_sum
                                  if indexer.stats.service_sum > 0 else math.nan)}
    refit = status.get("refit")
    link = crawl.link
    agent_info = {
        "queue": status.get("queue", {}).get("length"),
        "indexer_queue": indexer.length,
        "reports_sent": link.stats.sent, "reports_failed": link.stats.failed,
        "queue_compared": link.stats.compared, "queue_mismatches": link.stats.mismatches,
        "last_mismatch": link.stats.last_mismatch,
        "lost": totals.get("lost"), "admitted": totals.get("admitted"),
        "refits": refit.get("attempts") if isinstance(refit, dict) else None,
        "refits_adopted": refit.get("adopted") if isinstance(refit, dict) else None,
        "policy_version": snap.version, "policy_source": snap.source, "policy_origin": snap.origin,
        "first_fit_after": status.get("policy", {}).get("first_fit_after"),
        "fit": dict(snap.fit),
        "predicted_now": (snap.measures.to_dict() if snap.measures is not None else None),
    }
    active, site = crawl.active, crawl.site
    return CrawlResult(
        kind=kind, label=label, window_s=window_s, measures=measures,
        cost=_finite_cost(measures, config.costs), counts=counts,
        parks=sum(r.parks for r in active.records), resumes=sum(r.resumes for r in active.records),
        agent=agent_info, policies=spans.result(), model=snap.model,
        index=indexer.index_counts(), site=site.stats.to_dict() if site is not None else {},
        frontier={**crawl.frontier.stats.to_dict(), "queued": len(crawl.frontier),
                  "robots_txt_fetched": crawl.rules.fetched},
        robots=tuple({"robot": r.robot_id, **r.stats.to_dict()} for r in robots), service=service)


async def run_crawl(config: DemoConfig, *, kind: str = "robotctl", static: int | None = None,
                    label: str | None = None, seed_urls: Sequence[str] | None = None,
                    view: LiveView | None = None, workdir: str | Path | None = None, port: int = 0,
                    on_url: Callable[[str], None] | None = None) -> CrawlResult:
    """One crawl of ``config.demo.duration_s`` seconds: start, measure, wind down, report.

    Parameters
    ----------
    config : DemoConfig
    kind : str
        ``robotctl`` (the agent fits and controls), ``static`` or ``all`` (a fixed fleet of ``static``
        robots, no refit).
    static : int, optional
        Robots of the fixed fleet (required unless ``kind`` is ``robotctl``).
    seed_urls : sequence of str, optional
        Crawl these real URLs instead of the generated site.
    view : LiveView, optional
    workdir : path, optional
        Where the agent's log and the SQLite index go (a temporary directory by default).
    port : int
        The agent's port (0: a free one); ``/metrics`` is served there.
    on_url : callable, optional
        Told the agent's base URL once it listens.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind != "robotctl" and static is None:
        raise ValueError("a fixed fleet needs static=<robots>")
    label = label or (kind if kind == "robotctl" else f"{kind} {static}")
    async with contextlib.AsyncExitStack() as stack:
        crawl = await _start_crawl(stack, config, kind, static, seed_urls, workdir, port, on_url)
        measures, window_s, spans = await _measure(crawl, config, label, view)
        status = await _wind_down(crawl, view)
        return _crawl_result(crawl, config, kind, label, measures, window_s, spans, status)


async def _quiesce_refits(app: Any, *, limit_s: float = 120.0) -> None:
    """Let no new refit start and wait (up to ``limit_s``) for a running one to end, so that the report
    reads the policy in force at the end of the run and the agent's shutdown abandons no refit half-way."""
    from robotctl.agent import REFIT

    await app[REFIT].quiesce(limit_s)


def _view_state(label: str, state: _CrawlState, agent: Any, link: AgentLink, now: float, t0: float,
                duration: float, costs: Costs) -> ViewState:
    snap = agent.policy
    with _quiet_numpy():
        m = state.measures(now)
    obs = {k: getattr(m, k) for k in ("p_loss", "p_obsolete", "p_starvation", "mean_active_robots",
                                       "mean_response_served")}
    pred = None
    pred_cost = None
    if snap.measures is not None:
        pred = {k: getattr(snap.measures, k) for k in obs}
        pred_cost = snap.cost.total if snap.cost is not None else None
    return ViewState(
        label=label, t=now - t0, duration=duration, measuring=state.window_start is not None,
        queue=state.indexer.length, capacity=state.indexer.capacity, agent_queue=link.agent_queue,
        active=state.active.active, robots=len(state.robots), policy=compact_levels(snap.policy.robots_at_level),
        thresholds=",".join(str(j) for j in snap.thresholds), policy_source=snap.source, observed=obs,
        predicted=pred, cost=_finite_cost(m, costs).total if math.isfinite(m.p_loss) else math.nan,
        predicted_cost=pred_cost,
        indexed=state.indexer.totals.served, fetched=sum(r.stats.pages + r.stats.resources for r in state.robots),
        parks=sum(r.parks for r in state.active.records), resumes=sum(r.resumes for r in state.active.records))


# -- the three runs --------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class DemoReport:
    """What ``robotctl demo`` reports.

    Attributes
    ----------
    config : DemoConfig
    runs : tuple of CrawlResult
        robotctl first, then the baselines that ran.
    best_static : int or None
        The best static fleet under the fitted model (None without a fit).
    static_costs : tuple of (int, float)
        The fitted model's C_r.
    model : QueueModel or None
        The model fitted during the robotctl run.
    success : bool
    message : str
    """

    config: DemoConfig
    runs: tuple[CrawlResult, ...]
    best_static: int | None
    static_costs: tuple[tuple[int, float], ...]
    model: QueueModel | None
    success: bool
    message: str
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    def run(self, kind: str) -> CrawlResult | None:
        return next((r for r in self.runs if r.kind == kind), None)

    def savings(self) -> dict[str, float]:
        """(1 - J_robotctl / J_baseline) * 100 for each baseline that ran."""
        me = self.run("robotctl")
        out: dict[str, float] = {}
        if me is None:
            return out
        for r in self.runs:
            if r.kind != "robotctl" and r.cost.total > 0:
                out[r.label] = (1.0 - me.cost.total / r.cost.total) * 100.0
        return out

    def prediction_gaps(self) -> dict[str, dict[str, float]]:
        """|observed - predicted| of P_loss, P_obs, P_star for each run with a prediction."""
        out: dict[str, dict[str, float]] = {}
        for r in self.runs:
            if r.predicted is None:
                continue
            out[r.label] = {k: abs(getattr(r.measures, k) - getattr(r.predicted, k))
                            for k in ("p_loss", "p_obsolete", "p_starvation")}
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"success": self.success, "message": self.message, "seconds": self.seconds,
                "config": self.config.to_dict(), "best_static": self.best_static,
                "static_costs": [{"robots": r, "cost": c} for r, c in self.static_costs],
                "savings_percent": self.savings(), "prediction_gaps": self.prediction_gaps(),
                "runs": [r.to_dict() for r in self.runs], "notes": list(self.notes)}


def _predict(model: QueueModel, policy: ThresholdPolicy, costs: Costs) -> tuple[Measures, CostBreakdown] | None:
    sol = solve(model, policy)
    if not sol.success:
        return None
    return sol.measures, cost_of(sol.measures, costs)


async def _with_prediction(run: CrawlResult, model: QueueModel | None, policy: ThresholdPolicy,
                           costs: Costs) -> CrawlResult:
    if model is None:
        return run
    got = await asyncio.to_thread(_predict, model, policy, costs)
    if got is None:
        return run
    return replace(run, predicted=got[0], predicted_cost=got[1], predicted_policy=policy)


@contextlib.asynccontextmanager
async def _workspace(workdir: str | Path | None) -> AsyncIterator[Path]:
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
        yield Path(workdir)
        return
    with tempfile.TemporaryDirectory(prefix="robotctl-demo-") as d:
        yield Path(d)


async def run_demo(config: DemoConfig, *, view: LiveView | None = None, seed_urls: Sequence[str] | None = None,
                   workdir: str | Path | None = None, port: int = 0,
                   on_url: Callable[[str, str], None] | None = None) -> DemoReport:
    """robotctl's crawl, then (``demo.baselines``) the best static fleet and all robots, same seed."""
    from robotctl import policies

    start = time.monotonic()
    notes: list[str] = []
    N = config.robots.count
    runs: list[CrawlResult] = []

    def announce(label: str) -> Callable[[str], None]:
        return lambda url: on_url(label, url) if on_url is not None else None

    async with _workspace(workdir) as wd:
        if view is not None:
            view.note(f"== run 1: robotctl in control ({N} robots, K = {config.indexer.capacity}, "
                      f"{config.demo.duration_s:g} s)")
        mine = await run_crawl(config, kind="robotctl", view=view, seed_urls=seed_urls, workdir=wd, port=port,
                               on_url=announce("robotctl"))
        runs.append(mine)
        model = mine.model
        best_static: int | None = None
        static_costs: tuple[tuple[int, float], ...] = ()
        if model is None:
            notes.append("the agent never adopted a fitted model during the robotctl run, so there is no "
                         "best static fleet and no prediction; lengthen demo.duration_s")
            if config.demo.baselines:
                notes.append("the baseline with all robots ran alone")
        else:
            sc = await asyncio.to_thread(policies.static_costs, model, config.costs)
            static_costs = tuple((int(r), float(c.total)) for r, c in sc)
            best_static = min(static_costs, key=lambda rc: rc[1])[0]
        if config.demo.baselines:
            fleets = [("static", best_static)] if best_static is not None and best_static != N else []
            if best_static == N:
                notes.append(f"the best static fleet of the fitted model is all {N} robots: one baseline run")
            fleets.append(("all", N))
            for n, (kind, r) in enumerate(fleets, start=2):
                if view is not None:
                    what = "best static fleet" if kind == "static" else "all robots always active"
                    view.note(f"== run {n}: {what}, {r} robot(s) active (same seed)")
                assert r is not None
                runs.append(await run_crawl(config, kind=kind, static=r, view=view, seed_urls=seed_urls,
                                            workdir=wd, port=port, on_url=announce(kind)))
        out = []
        for run in runs:
            policy = run.main_policy if run.kind == "robotctl" else ThresholdPolicy.static(
                run.policies[0].robots_at_level[0], config.indexer.capacity)
            out.append(await _with_prediction(run, model, policy, config.costs))
    indexed = all(r.counts["indexed"] > 0 for r in out)
    if not indexed:
        notes.append("a run indexed nothing in its measurement window")
    ok = indexed and (model is not None or not config.demo.baselines)
    message = "completed" if ok else "; ".join(notes) or "incomplete"
    return DemoReport(config, tuple(out), best_static, static_costs, model, ok, message,
                      time.monotonic() - start, tuple(notes))
