"""The revisit planner inside the agent (paper 002): which page each robot fetches next.

When ``revisit.pages`` names a page list, :func:`install` adds a :class:`RevisitPlanner` to the app and
these endpoints:

==========================================  ===============================================================
``GET /v1/robots/{id}/next``                the next page of the plan in force: ``{page, index, slot,
                                            version}`` (404 for an unknown robot)
``POST /v1/robots/{id}/fetched``            a robot's report of one fetch: ``{"page": id, "fetch_s": 0.4,
                                            "changed": true}`` (``fetch_s`` and ``changed`` optional)
``GET /v1/revisit``                         the plan: frequencies, C*, cycle cost, fitted fetch law,
                                            change-rate estimates
``POST /v1/revisit/replan``                 re-fit and re-plan now
==========================================  ===============================================================

The plan is computed by :func:`robotctl.policies.plan_revisits` from the page list, the configured
fetch-time law and the configured strategy (a golden-ratio cycle, a weighted round robin cycle, or
independent draws). Every robot takes the next slot of one shared cycle: the cycle is the order of
fetches across the fleet (paper 002 has one robot; with several, fetches overlap in time and the
cost formula is an approximation).

Re-planning. The fetch times robots report are kept (the last ``revisit.window``); every
``revisit.check_every`` reports, once there are ``revisit.min_samples``, a PH law is fitted to them
(:func:`robotctl.fitting.fit_service`, moments), and the plan is recomputed when the fitted mean fetch
time, or any page's optimal frequency, differs from the plan in force by more than
``revisit.replan_bound`` (relative). With ``revisit.estimate_change_rates`` the changed/unchanged flags
(the time between two reports of a page is the revisit interval) give maximum-likelihood change rates,
used for pages with at least ``revisit.min_observations`` revisits and a finite estimate. The plan is
computed in a worker thread and published by swapping one reference to a frozen
:class:`RevisitSnapshot`; the cursor restarts at slot 0 of the new cycle.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiohttp import web
from numpy.typing import NDArray

from robotctl import InputError
from robotctl.fitting import fit_service
from robotctl.policies import (
    ChangeRateStatus,
    FetchLaw,
    RevisitPlan,
    estimate_change_rate,
    optimal_frequencies,
    plan_revisits,
)

from ._pages import Pages, load_fetch_law, read_pages
from .api import NotFoundError, parse_json
from .clock import Clock
from .config import AgentConfig, RevisitConfig

LOG = logging.getLogger("robotctl.agent.revisit")


@dataclass(frozen=True, eq=False)
class RevisitSnapshot:
    """The plan in force, published whole.

    Attributes
    ----------
    version : int
        Increases with every new plan.
    plan : RevisitPlan
    law_source : str
        ``configured`` or ``fitted``.
    rates_source : tuple of str
        Per page: ``configured`` or ``estimated``.
    at : float
        Agent clock time of the plan.
    reason : str
        Why it was made (``startup``, ``fetch times``, ``change rates``, ``request``).
    """

    version: int
    plan: RevisitPlan
    law_source: str
    rates_source: tuple[str, ...]
    at: float
    reason: str


class RevisitPlanner:
    """The planner service: serves the cycle, collects reports, re-plans (module docstring)."""

    def __init__(self, config: RevisitConfig, pages: Pages, clock: Clock, *, seed: int | None = None) -> None:
        self.config = config
        self.pages = pages
        self.clock = clock
        self._index = {pid: i for i, pid in enumerate(pages.ids)}
        self._configured_law = load_fetch_law(config.fetch_time, field="revisit.fetch_time")
        self._rng = np.random.default_rng(seed)
        self._samples: deque[float] = deque(maxlen=config.window)
        self._since_check = 0
        self._last_fetch: dict[int, float] = {}
        self._intervals: list[list[float]] = [[] for _ in pages.ids]
        self._changed: list[list[bool]] = [[] for _ in pages.ids]
        self._cursor = 0
        self._lock = asyncio.Lock()
        self.fitted: FetchLaw | None = None
        self.reports = 0
        plan = self._compute(self._configured_law, pages.change_rates)
        self.snapshot = RevisitSnapshot(1, plan, "configured", ("configured",) * len(pages.ids), clock.now(),
                                        "startup")
        LOG.info("event=revisit_planned version=1 pages=%d strategy=%s cost=%.6g", len(pages.ids),
                 config.strategy, plan.cost)

    # -- planning ------------------------------------------------------------------------------------
    def _compute(self, law: FetchLaw, rates: NDArray[np.float64]) -> RevisitPlan:
        return plan_revisits(rates, law, self.pages.weights, policy=self.config.strategy,
                             max_length=self.config.max_length)

    def _law(self) -> tuple[FetchLaw, str]:
        return (self.fitted, "fitted") if self.fitted is not None else (self._configured_law, "configured")

    def _rates(self) -> tuple[NDArray[np.float64], tuple[str, ...]]:
        rates = np.array(self.pages.change_rates)
        source = ["configured"] * rates.size
        if self.config.estimate_change_rates:
            for i, est in self.estimates().items():
                if (est.success and est.status is ChangeRateStatus.OK
                        and est.observations >= self.config.min_observations):
                    rates[i], source[i] = est.rate, "estimated"
        return rates, tuple(source)

    def estimates(self) -> dict[int, Any]:
        """Change-rate estimates of the pages with at least one revisit interval."""
        return {i: estimate_change_rate(self._intervals[i], self._changed[i],
                                        min_observations=self.config.min_observations)
                for i in range(len(self.pages.ids)) if self._intervals[i]}

    def _moved(self, law: FetchLaw, rates: NDArray[np.float64]) -> str | None:
        """Why the plan in force is out of date, or None."""
        current = self.snapshot.plan
        bound = self.config.replan_bound
        if abs(law.mean / current.fetch.mean - 1) > bound:
            return f"fetch times (mean {current.fetch.mean:.4g} -> {law.mean:.4g} s)"
        f_new = optimal_frequencies(rates, law, self.pages.weights).frequencies
        f_old = current.frequencies
        scale = np.maximum(f_old, 1e-12)
        worst = float(np.max(np.abs(f_new - f_old) / scale))
        if worst > bound:
            return f"frequencies (a page's moved by {worst:.0%})"
        return None

    def _refit(self) -> None:
        if not self.config.fit_fetch_times or len(self._samples) < self.config.min_samples:
            return
        x = np.fromiter(self._samples, dtype=float)
        if not x.mean() > 0:
            return
        fit = fit_service(service_times=x)
        self.fitted = FetchLaw.from_ph(fit.fit.law)

    async def replan(self, reason: str, *, force: bool = False) -> bool:
        """Re-fit, and re-plan (in a worker thread) when the plan has moved or ``force``; True if a new
        plan was published."""
        if self._lock.locked():
            return False
        async with self._lock:
            self._refit()
            law, law_source = self._law()
            rates, rates_source = self._rates()
            why = self._moved(law, rates)
            if why is None and not force:
                return False
            plan = await asyncio.to_thread(self._compute, law, rates)
            old = self.snapshot
            self.snapshot = RevisitSnapshot(old.version + 1, plan, law_source, rates_source, self.clock.now(),
                                            reason if why is None else f"{reason}: {why}")
            self._cursor = 0
            LOG.info("event=revisit_replanned version=%d reason=%r law=%r cost=%.6g", self.snapshot.version,
                     self.snapshot.reason, plan.fetch.describe(), plan.cost)
            return True

    # -- serving -------------------------------------------------------------------------------------
    def next_page(self) -> dict[str, Any]:
        """The next slot of the cycle in force (or an independent draw for ``random``)."""
        snap = self.snapshot
        plan = snap.plan
        if plan.template is None:
            f = plan.randomised.frequencies
            i = int(min(np.searchsorted(np.cumsum(f), self._rng.random() * f.sum(), side="right"), f.size - 1))
            slot = None
        else:
            slot = self._cursor % plan.template.size
            self._cursor = slot + 1
            i = int(plan.template[slot])
        return {"page": self.pages.ids[i], "index": i + 1, "slot": slot, "version": snap.version}

    def report(self, body: Any) -> bool:
        """Record one fetch report; True when a re-fit check is due."""
        page, fetch_s, changed = parse_fetch_report(body, self._index)
        now = self.clock.now()
        i = self._index[page]
        if changed is not None and i in self._last_fetch and now > self._last_fetch[i]:
            self._intervals[i].append(now - self._last_fetch[i])
            self._changed[i].append(changed)
        self._last_fetch[i] = now
        self.reports += 1
        if fetch_s is not None:
            self._samples.append(fetch_s)
        self._since_check += 1
        if self._since_check >= self.config.check_every:
            self._since_check = 0
            return True
        return False

    def to_dict(self) -> dict[str, Any]:
        snap = self.snapshot
        d = snap.plan.to_dict()
        d.pop("stale_fraction", None)
        ests = self.estimates()
        d.update({
            "version": snap.version, "at": snap.at, "reason": snap.reason, "law_source": snap.law_source,
            "pages": list(self.pages.ids), "rates_source": list(snap.rates_source),
            "change_rates": snap.plan.change_rates.tolist(), "reports": self.reports,
            "fetch_samples": len(self._samples),
            "change_rate_estimates": {self.pages.ids[i]: e.to_dict() for i, e in ests.items()},
        })
        if d["template"] is not None and len(d["template"]) > 10_000:
            d["template"] = d["template"][:10_000]
            d["template_truncated"] = True
        return d


#: Longest fetch a robot may report (a day, as the longest indexing of a page the API accepts).
MAX_FETCH_S = 86_400.0


def parse_fetch_report(body: Any, index: Mapping[str, int]) -> tuple[str, float | None, bool | None]:
    """``{"page": id, "fetch_s": seconds, "changed": bool}`` (the last two optional)."""
    if not isinstance(body, dict):
        raise InputError("body", f"must be a JSON object, got {type(body).__name__}",
                         'send {"page": id, "fetch_s": 0.4, "changed": true}')
    unknown = sorted(set(body) - {"page", "fetch_s", "changed"})
    if unknown:
        raise InputError(unknown[0], "is not a known field", "fields: page, fetch_s, changed")
    page = body.get("page")
    if page is None:
        raise InputError("page", "is missing", "name the page fetched, as in the page list")
    page = str(page)
    if page not in index:
        raise InputError("page", f"{page!r} is not in the page list", "report pages the planner served")
    fetch_s = body.get("fetch_s")
    if fetch_s is not None:
        if isinstance(fetch_s, bool) or not isinstance(fetch_s, int | float) or not (
                math.isfinite(fetch_s) and 0 <= fetch_s <= MAX_FETCH_S):
            raise InputError("fetch_s", f"must be a number of seconds in 0..{MAX_FETCH_S:g}, got {fetch_s!r}",
                             "send the seconds one fetch took, e.g. 0.4")
        fetch_s = float(fetch_s)
    changed = body.get("changed")
    if changed is not None and not isinstance(changed, bool):
        raise InputError("changed", f"must be true or false, got {changed!r}",
                         "true when the page differs from the previous fetch")
    return page, fetch_s, changed


REVISIT = web.AppKey("revisit", RevisitPlanner)


def install(app: web.Application, config: AgentConfig, clock: Clock, registered: Container[str]) -> None:
    """Add the planner and its routes to ``app`` when ``revisit.pages`` is set (nothing otherwise).

    A robot may ask when its id is in ``registered`` (the agent's live view of registered robots) or
    ``robots.allow_unregistered`` is set; otherwise the answer is 404."""
    rc = config.revisit
    if rc.pages is None:
        return
    try:
        pages = read_pages(rc.pages)
    except InputError as exc:
        raise exc.within("revisit.pages") from exc
    planner = RevisitPlanner(rc, pages, clock)
    app[REVISIT] = planner

    anyone = config.robots.allow_unregistered

    def robot(request: web.Request) -> str:
        rid = request.match_info["robot_id"]
        if not anyone and rid not in registered:
            raise NotFoundError("robot", f"{rid!r} is not registered", "register it with POST /v1/robots")
        return rid

    async def get_next(request: web.Request) -> web.Response:
        robot(request)
        return web.json_response(request.app[REVISIT].next_page())

    async def post_fetched(request: web.Request) -> web.Response:
        robot(request)
        p = request.app[REVISIT]
        due = p.report(parse_json(await request.read()))
        replanned = False
        if due:
            # the report is taken: a re-fit that fails is the planner's problem, not a 400 to the robot
            try:
                replanned = await p.replan("fetch times")
            except (InputError, ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
                LOG.warning("event=revisit_replan_failed reason=%r error=%s", "fetch times", exc)
        return web.json_response({"accepted": 1, "replanned": replanned, "version": p.snapshot.version})

    async def get_revisit(request: web.Request) -> web.Response:
        return web.json_response(request.app[REVISIT].to_dict())

    async def post_replan(request: web.Request) -> web.Response:
        p = request.app[REVISIT]
        replanned = await p.replan("request", force=True)
        return web.json_response({"replanned": replanned, "version": p.snapshot.version,
                                  "reason": p.snapshot.reason})

    r = app.router
    r.add_get("/v1/robots/{robot_id}/next", get_next)
    r.add_post("/v1/robots/{robot_id}/fetched", post_fetched)
    r.add_get("/v1/revisit", get_revisit)
    r.add_post("/v1/revisit/replan", post_replan)


__all__ = ["REVISIT", "RevisitPlanner", "RevisitSnapshot", "install", "parse_fetch_report"]
