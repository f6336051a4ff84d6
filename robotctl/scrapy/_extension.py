"""``RobotctlExtension``: robotctl's robots as Scrapy's concurrent downloads (see robotctl/scrapy/README.md).

On ``spider_opened`` the extension registers ``ROBOTCTL_ROBOTS`` = N robots with the agent
(``<prefix>-1`` .. ``<prefix>-N``) and follows each robot's command with the agent client's long-poll.
Whenever the set of active robots changes it sets the downloader's ``total_concurrency`` to the download
slots those robots own (:class:`RobotSlots`), and pauses the engine when every robot is parked
(``total_concurrency = 0`` would mean *no limit* to Scrapy), resuming it when one comes back.

Deliveries are reported on ``response_received`` (one page per response, its body's size) or on
``item_scraped`` (``ROBOTCTL_DELIVERY_SIGNAL``), in the name of the robot whose download slot fetched
them, through a :class:`Reporter` that batches and never blocks. When the agent cannot be reached the
robots follow ``ROBOTCTL_DEFAULT_STATE`` (the crawl runs at its own ``CONCURRENT_REQUESTS``), one
warning is logged for the outage, and registration is retried every ``ROBOTCTL_RETRY_INTERVAL_S``.

Needs an asyncio event loop: Scrapy's default reactor since 2.13 (``TWISTED_REACTOR =
"twisted.internet.asyncioreactor.AsyncioSelectorReactor"``) or ``TWISTED_REACTOR_ENABLED = False``.
Without one the extension logs a warning and stays off.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import time
from typing import Any
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Request, Response

from robotctl.agent import AgentClient, AgentRejectedError, AgentUnavailableError, RobotHandle

from ._gate import PushbackGate
from ._local import load_local_agent_code, pipeline_capacity, quiet_agent_log
from ._pushback import PUSHBACK_STATUSES, Pushback
from ._reporter import AgentHealth, NullReporter, Reporter
from ._settings import RobotctlSettings
from ._slots import RobotSlots

LOG = logging.getLogger("robotctl.scrapy")

#: request.meta keys the extension sets: the robot (id) whose slot fetched the request, the slot, and
#: the download slot whose pushback gate admitted it (until it leaves the downloader)
META_ROBOT = "robotctl_robot"
#: Items whose robot :class:`~robotctl.scrapy.ItemSourceMiddleware` named and that have not entered the
#: item pipelines yet: more than this and the oldest are forgotten (their deliveries then name no robot).
MAX_ITEM_SOURCES = 10_000
META_SLOT = "robotctl_slot"


def extension(crawler: Crawler) -> RobotctlExtension | None:
    """``crawler``'s running :class:`RobotctlExtension` (``crawler.get_extension``), or None."""
    try:
        ext = crawler.get_extension(RobotctlExtension)
    except RuntimeError:  # asked before the crawl's extensions exist
        return None
    return ext if ext is not None and ext.running else None


def reporter(crawler: Crawler) -> Reporter | NullReporter:
    """The reporter of ``crawler``'s :class:`RobotctlExtension`, for pipelines and indexers that report
    completions, obsolete drops or queue lengths themselves; a :class:`NullReporter` when the extension is
    off or not enabled, so callers need no test of their own::

        from robotctl.scrapy import reporter
        reporter(self.crawler).complete(pages=1, service_s=0.04, bytes=5120)
    """
    ext = extension(crawler)
    return NullReporter() if ext is None else ext.reporter


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class RobotctlExtension:
    """See the module docstring.

    Parameters
    ----------
    crawler : scrapy.crawler.Crawler
    settings : RobotctlSettings
    client : AgentClient, optional
        Replaces the client built from the settings (tests pass one over a mock transport).
    """

    def __init__(self, crawler: Crawler, settings: RobotctlSettings, *, client: AgentClient | None = None) -> None:
        self.crawler = crawler
        self.settings = settings
        self.slots = RobotSlots(settings.robots, settings.concurrency)
        self.handles: dict[int, RobotHandle] = {}
        self._registered: set[str] = set()
        self.client = client if client is not None else AgentClient(settings.url, token=settings.token,
                                                                     timeout_s=settings.timeout_s)
        self.url = settings.url
        #: the local agent (ROBOTCTL_AGENT = local): its code being imported, its context manager and its
        #: application, once started
        self._agent_code: concurrent.futures.Future[None] | None = None
        self._local: Any = None
        self.local_app: Any = None
        self.spider: Any = None
        #: items in the item pipelines (entered, not yet scraped, dropped or failed), and the service clock
        self.in_pipeline = 0
        #: items (or responses) delivered so far, and how many when the agent first lowered the concurrency
        self.delivered = 0
        self.delivered_at_first_park: int | None = None
        self.delivered_at_registration: int | None = None
        #: r(i), robots active at i items in the pipelines, that the add-on follows itself until the robots are
        #: registered with the local agent (ROBOTCTL_AGENT = local, ROBOTCTL_DEFAULT_STATE = active): the
        #: agent's own start-up policy; None: unregistered robots follow ROBOTCTL_DEFAULT_STATE
        self.bridge: tuple[int, ...] | None = None
        #: servers' pushback (429/503): the gate PushbackMiddleware awaits for every request, and what counts
        #: as a request given up: a final response with a status Scrapy treats as passing (RETRY_HTTP_CODES;
        #: 429 and 503 always)
        cs = crawler.settings
        self.gate = PushbackGate(Pushback(settings.concurrency, start_cap=settings.pushback_start or None,
                                          probe_budget=settings.pushback_probe_budget),
                                 self._slot_key, retry_enabled=cs.getbool("RETRY_ENABLED", True),
                                 retry_times=cs.getint("RETRY_TIMES", 2), log_extra=lambda: self._log_extra)
        self.give_up_statuses = frozenset(PUSHBACK_STATUSES | {int(x) for x in cs.getlist("RETRY_HTTP_CODES")})
        self.given_up = 0
        #: id(item) -> the robot whose download it came from, until it enters the item pipelines
        self.item_sources: dict[int, str] = {}
        self._busy_since = 0.0
        self._last_exit = 0.0
        default = (f"the crawl goes on at its default: every robot active ({settings.concurrency} concurrent "
                   f"downloads, CONCURRENT_REQUESTS = {settings.concurrency})"
                   if settings.default_state == "active" else
                   "the crawl stays paused: every robot parked (ROBOTCTL_DEFAULT_STATE = parked)")
        consequence = (f"{default}, reports are dropped meanwhile and the agent is tried again every "
                       f"{settings.retry_interval_s:g} s")
        self.health = AgentHealth(settings.url, consequence)
        self.reporter = Reporter(self.client, self.health, flush_interval_s=settings.flush_interval_s,
                                 max_batch=settings.max_batch, max_pending=settings.max_pending,
                                 retry_interval_s=settings.retry_interval_s)
        self.reporter.robots = self._registered
        self.prefix = settings.robot_prefix or "robot"
        self.running = False
        self._tasks: list[asyncio.Task[None]] = []
        self._paused_by_us = False
        self._allowed = settings.concurrency
        self._since = time.monotonic()
        self.allowed_seconds = 0.0
        self.paused_seconds = 0.0
        self.pauses = 0
        self.changes = 0

    @property
    def _log_extra(self) -> dict[str, Any]:
        return {"spider": self.spider} if self.spider is not None else {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RobotctlExtension:
        settings = RobotctlSettings.from_settings(crawler.settings)
        if not settings.enabled:
            raise NotConfigured  # quietly, like AutoThrottle when it is off
        ext = cls(crawler, settings)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(ext.request_reached_downloader, signal=signals.request_reached_downloader)
        crawler.signals.connect(ext.request_left_downloader, signal=signals.request_left_downloader)
        crawler.signals.connect(ext.response_downloaded, signal=signals.response_downloaded)
        crawler.signals.connect(ext.response_received, signal=signals.response_received)
        if settings.delivery_signal == "item_scraped":
            crawler.signals.connect(ext.item_scraped, signal=signals.item_scraped)
        elif settings.delivery_signal == "item":
            crawler.signals.connect(ext.item_left, signal=signals.item_scraped)
            crawler.signals.connect(ext.item_left, signal=signals.item_dropped)
            crawler.signals.connect(ext.item_left, signal=signals.item_error)
        return ext

    # -- the robots ----------------------------------------------------------------------------------
    def robot_id(self, k: int) -> str:
        process = self.settings.process
        return f"{self.prefix}-{process}-{k}" if process is not None else f"{self.prefix}-{k}"

    def _may_fetch(self, k: int) -> bool:
        handle = self.handles.get(k)
        if handle is not None:
            return handle.may_fetch
        if self.bridge is not None:
            return k <= self.bridge[min(self.in_pipeline, len(self.bridge) - 1)]
        return self.settings.default_state == "active"

    def active_robots(self) -> list[int]:
        """The robots (1..N) allowed to fetch now."""
        return [k for k in range(1, self.settings.robots + 1) if self._may_fetch(k)]

    def _integrate(self) -> None:
        now = time.monotonic()
        dt = now - self._since
        self._since = now
        self.allowed_seconds += self._allowed * dt
        if self._paused_by_us:
            self.paused_seconds += dt

    def apply(self) -> None:
        """Set the downloader's concurrency (or pause the engine) for the robots active now."""
        engine = self.crawler.engine
        if engine is None:
            return
        self._integrate()
        allowed = self.slots.set_active(self.active_robots())
        if allowed == self._allowed and not (allowed > 0 and self._paused_by_us):
            return
        self.changes += 1
        self._allowed = allowed
        if (allowed < self.settings.concurrency and (self.handles or self.bridge is not None)
                and self.delivered_at_first_park is None):
            self.delivered_at_first_park = self.delivered
        if allowed == 0:
            if not engine.paused:
                engine.pause()
                self._paused_by_us = True
                self.pauses += 1
                LOG.debug("robotctl: every robot is parked: the engine is paused (%d downloads in flight finish)",
                          len(engine.downloader.active), extra=self._log_extra)
            return
        engine.downloader.total_concurrency = allowed
        if self._paused_by_us:
            engine.unpause()
            self._paused_by_us = False
            LOG.debug("robotctl: a robot is active again: the engine resumes at %d concurrent downloads", allowed,
                      extra=self._log_extra)
        else:
            LOG.debug("robotctl: %d robots active: %d concurrent downloads", len(self.slots.active), allowed,
                      extra=self._log_extra)
        _nudge(engine)

    async def _start_local(self) -> bool:
        """Start the agent inside this event loop (``ROBOTCTL_AGENT = local``); False if it cannot run."""
        import secrets
        from pathlib import Path

        if self._agent_code is not None:  # imported meanwhile, while the crawl began
            await asyncio.wrap_future(self._agent_code)
        from robotctl import InputError
        from robotctl.agent import AgentConfig, InProcessReports, run_in_process

        from ._addon import local_agent_config

        s = self.settings
        capacity = self._capacity()
        if capacity is None:
            self._end_bridge()
            LOG.warning("robotctl: the indexer's buffer K is not known, so the crawl runs uncontrolled (every robot "
                        "active); set ROBOTCTL_CAPACITY = K (items) in settings.py, or give the indexing pipeline a "
                        "robotctl_capacity attribute", extra=self._log_extra)
            return False
        quiet_agent_log()
        token = secrets.token_urlsafe(32)
        directory = Path(s.dir) / self.prefix
        try:
            cfg = AgentConfig.from_dict(local_agent_config(s, capacity=capacity, directory=directory, token=token),
                                        source="ROBOTCTL_AGENT_CONFIG")
            self._local = run_in_process(cfg)
            url, self.local_app = await self._local.__aenter__()
        except InputError as exc:
            self._local = None
            self._end_bridge()
            LOG.error("robotctl: the local agent cannot start (%s); the crawl runs uncontrolled", exc,
                      extra=self._log_extra)
            return False
        self.client = AgentClient(url, token=token, timeout_s=s.timeout_s)
        # the reports (one an item) go to the agent's code directly; robots' registrations and commands over HTTP
        self.reporter.client = InProcessReports(self.local_app)
        self.health.url = url
        self.url = url
        LOG.debug("robotctl: local agent at %s, K = %d, log and policy in %s", url, capacity, directory,
                  extra=self._log_extra)
        return True

    def _capacity(self) -> int | None:
        """K: ``ROBOTCTL_CAPACITY``, else an item pipeline's ``robotctl_capacity`` (kept in the settings)."""
        s = self.settings
        if s.capacity is None and (k := pipeline_capacity(self.crawler.engine)) is not None:
            self.settings = s = dataclasses.replace(s, capacity=k)
        return s.capacity

    def _start_bridge(self) -> None:
        """Until its robots are registered (the agent's code is imported and started meanwhile: 1-3 s, more on
        a loaded machine), a local agent's robots follow its start-up policy, applied here on the items in
        the pipelines: in a fast crawl 100-150 items came before the first command, with the indexer's
        buffer already overflowing (tests/scrapy/test_addon.py)."""
        from ._addon import startup_policy

        s = self.settings
        capacity = self._capacity()
        if (s.agent == "local" and s.default_state == "active" and s.delivery_signal == "item" and capacity
                and s.process is None):  # one process of a fleet knows only its own items
            self.bridge = startup_policy(s, capacity)

    def _end_bridge(self) -> None:
        """The local agent cannot run: the unregistered robots follow ROBOTCTL_DEFAULT_STATE again."""
        self.bridge = None
        self.apply()

    async def _connect(self) -> None:
        """Register the robots (retrying while the agent is down), then follow their commands. The reports
        start once every robot is registered (those of a remote agent already run): the first refit of a
        local agent, started late in a fast crawl, otherwise came while the last robots registered and was
        solved for fewer of them, with a warning (robots_missing).

        The items delivered under the bridge (:meth:`_start_bridge`) are not reported as deliveries: the
        agent would take them for deliveries of every robot it just registered (the bridge's modes are not
        its own), and a cold crawl's first fits, made of a few dozen deliveries, would measure the full
        fleet's rate low. Their queue is reported instead, from the agent's start: a robot registered while
        the agent counted an empty queue was let go, and 13 downloads of the robots registering landed in a
        full buffer."""
        s = self.settings
        if s.agent == "local" and self._local is None and not await self._start_local():
            return
        if self.bridge is not None:
            self.reporter.set_queue(self._queue_view() or 0)
            self.reporter.start()
        try:
            await self._register()
        finally:
            self.delivered_at_registration = self.delivered
            if self.bridge is not None:  # robots not registered (refused) follow ROBOTCTL_DEFAULT_STATE
                self._end_bridge()
            self.reporter.start()

    async def _register(self) -> None:
        s = self.settings
        k = 1
        while k <= s.robots:
            try:
                handle = await self.client.register_robot(self.robot_id(k), default_state=s.default_state,
                                                          poll_wait_s=s.poll_wait_s, process=s.process)
            except AgentUnavailableError as exc:
                self.health.failed(exc)
                await asyncio.sleep(s.retry_interval_s)
                continue
            except AgentRejectedError as exc:
                if exc.status in (401, 403):
                    self.health.refused(exc)
                    return
                LOG.error("robotctl: the agent at %s refused robot %s (%s); robots %d..%d follow "
                          "ROBOTCTL_DEFAULT_STATE = %s and the crawl is not controlled", self.url,
                          self.robot_id(k), exc, k, s.robots, s.default_state, extra=self._log_extra)
                return
            self.health.answered()
            self.handles[k] = handle
            self._registered.add(handle.robot_id)
            self._tasks.append(asyncio.ensure_future(self._follow(handle)))
            k += 1
        LOG.info("robotctl: %d robots registered with the %s agent at %s (%s .. %s%s)", s.robots, s.agent,
                 self.url, self.robot_id(1), self.robot_id(s.robots),
                 f", process {s.process}" if s.process is not None else "", extra=self._log_extra)
        self.apply()

    async def _follow(self, handle: RobotHandle) -> None:
        while True:
            self.apply()
            await handle.wait_changed()

    # -- signals -------------------------------------------------------------------------------------
    def spider_opened(self, spider: Any) -> None:
        if _asyncio_loop() is None:
            LOG.warning("robotctl: no asyncio event loop runs this crawl, so the extension is off; set "
                        "TWISTED_REACTOR = 'twisted.internet.asyncioreactor.AsyncioSelectorReactor' (Scrapy's "
                        "default since 2.13)", extra={"spider": spider})
            return
        if self.settings.robot_prefix is None:
            self.prefix = str(getattr(spider, "name", None) or "robot")
        self.spider = spider
        if self.settings.agent == "local" and self._agent_code is None:
            self._agent_code = load_local_agent_code()
        self.health.log_extra = self._log_extra
        self.running = self.gate.open = True
        self._since = time.monotonic()
        s = self.settings
        LOG.debug("robotctl: %d robots over CONCURRENT_REQUESTS = %d download slots, %s agent %s, deliveries on %s",
                  s.robots, s.concurrency, s.agent, s.url if s.agent == "remote" else "(in this crawl)",
                  s.delivery_signal, extra=self._log_extra)
        self.warn_if_moot()
        self._start_bridge()
        if s.agent == "remote":
            self.reporter.start()
        self.apply()  # until the robots are registered they follow ROBOTCTL_DEFAULT_STATE
        self._tasks.append(asyncio.ensure_future(self._connect()))

    async def spider_closed(self, spider: Any, reason: str = "") -> None:
        if not self.running:
            return
        self.running = False
        self._integrate()
        self.gate.close()  # requests waiting at the pushback gate go on
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        await self.reporter.aclose(timeout_s=min(5.0, 2 * self.settings.timeout_s))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.settings.timeout_s):
                for handle in list(self.handles.values()):
                    await handle.close(deregister=not self.health.down)
        with contextlib.suppress(Exception):
            await self.client.aclose()
        if self._local is not None:
            local, self._local = self._local, None
            with contextlib.suppress(Exception):
                await local.__aexit__(None, None, None)
        self._record_stats()

    def _record_stats(self) -> None:
        stats = self.crawler.stats
        if stats is None:
            return
        for key, value in self.reporter.stats.to_dict().items():
            stats.set_value(f"robotctl/reports_{key}", value)
        stats.set_value("robotctl/robots", self.settings.robots)
        stats.set_value("robotctl/robots_registered", len(self.handles))
        stats.set_value("robotctl/concurrency_changes", self.changes)
        stats.set_value("robotctl/engine_pauses", self.pauses)
        stats.set_value("robotctl/paused_seconds", round(self.paused_seconds, 3))
        stats.set_value("robotctl/allowed_download_seconds", round(self.allowed_seconds, 3))
        stats.set_value("robotctl/agent_outages", self.health.outages)
        stats.set_value("robotctl/delivered", self.delivered)
        stats.set_value("robotctl/pushbacks", self.gate.pushback.pushbacks)
        stats.set_value("robotctl/requests_held", self.gate.held)
        stats.set_value("robotctl/held_seconds", round(self.gate.held_seconds, 3))
        stats.set_value("robotctl/requests_given_up", self.given_up)
        for key in ("delivered_at_first_park", "delivered_at_registration"):
            if (value := getattr(self, key)) is not None:
                stats.set_value(f"robotctl/{key}", value)

    def request_reached_downloader(self, request: Request, spider: Any = None) -> None:
        slot = self.slots.acquire()
        if slot is None:
            return
        request.meta[META_SLOT] = slot
        request.meta[META_ROBOT] = self.robot_id(self.slots.owner[slot])

    def request_left_downloader(self, request: Request, spider: Any = None) -> None:
        slot = request.meta.pop(META_SLOT, None)
        if slot is not None:
            self.slots.release(slot)
        self.gate.release(request)

    # -- servers' pushback: PushbackGate ---------------------------------------------------------------
    def _slot_key(self, request: Request) -> str | None:
        """``request``'s download slot, or None before the engine exists."""
        engine = self.crawler.engine
        return None if engine is None else str(engine.downloader.get_slot_key(request))

    def response_received(self, response: Response, request: Request, spider: Any = None) -> None:
        if not self.running or urlsplit(response.url).path == "/robots.txt":
            return
        if response.status in self.give_up_statuses:  # Scrapy retried it to the end, or may not retry it
            self.gave_up(request)
        if self.settings.delivery_signal == "response_received" and response.status in self.settings.deliver_statuses:
            self.delivered += 1
            self.reporter.deliver(1, bytes=len(response.body), robot=request.meta.get(META_ROBOT))

    def gave_up(self, request: Request) -> None:
        """``request`` is given up (a final 429/503 or retried status, or a download error past the retries:
        :class:`GiveUpMiddleware`): a page never fetched, which the agent's cost J counts like a page lost."""
        if not self.running:
            return
        self.given_up += 1
        self.reporter.given_up(1)

    def item_scraped(self, item: Any, response: Any = None, spider: Any = None) -> None:
        if not self.running:
            return
        body = getattr(response, "body", None)
        meta = response.meta if isinstance(response, Response) and response.request is not None else {}
        self.reporter.deliver(1, bytes=len(body) if body is not None else None, robot=meta.get(META_ROBOT))


    def response_downloaded(self, response: Response, request: Request, spider: Any = None) -> None:
        """Every response from the downloader, retried ones included: the servers' pushback."""
        if self.running:
            self.gate.answer(response, request)

    def item_entered(self, item: Any) -> None:
        """An item entered the item pipelines (:class:`RobotctlEntryPipeline`): one delivery."""
        if not self.running:
            return
        now = time.monotonic()
        if self.in_pipeline == 0:
            self._busy_since = now
        self.in_pipeline += 1
        self.delivered += 1
        robot = self.item_sources.pop(id(item), None)
        if self.bridge is not None:  # only the queue is reported: see _connect
            self.reporter.set_queue(self._queue_view() or 0)
            self.apply()
            return
        self.reporter.deliver(1, robot=robot, queue_length=self._queue_view())

    def item_source(self, item: Any, robot: str | None) -> None:
        """``item`` came from a download of ``robot`` (:class:`~robotctl.scrapy.ItemSourceMiddleware`); the
        item itself is not touched (it may be any object), only its identity is kept until it enters the
        pipelines (a Scrapy context variable does not reach them: the scraper hands items over between
        tasks)."""
        if robot is None or not self.running:
            return
        if len(self.item_sources) >= MAX_ITEM_SOURCES:
            del self.item_sources[next(iter(self.item_sources))]
        self.item_sources[id(item)] = robot

    def item_left(self, item: Any = None, response: Any = None, spider: Any = None, **kw: Any) -> None:
        """An item left the item pipelines, scraped, dropped or failed: one completion. Scraped, it carries
        its service time as a single server's: from the later of its server's last departure and the
        start of the busy period to now; dropped or failed, none."""
        if not self.running or self.in_pipeline == 0:
            return
        now = time.monotonic()
        self.in_pipeline -= 1
        if self.bridge is not None:  # only the queue is reported: see _connect
            self.reporter.set_queue(self._queue_view() or 0)
            self.apply()
            if not kw.keys() & {"exception", "failure"}:
                self._last_exit = now
            return
        if kw.keys() & {"exception", "failure"}:
            # dropped (a full buffer's DropItem, a filter's) or failed: it leaves, unserved; the agent may
            # have counted it lost already, so its queue is set rather than a completion sent (one of a
            # fleet's processes knows only its own items: a completion without a service time instead)
            view = self._queue_view()
            if view is not None:
                self.reporter.set_queue(view)
            else:
                self.reporter.complete(1)
            return
        service = now - max(self._busy_since, self._last_exit)
        self._last_exit = now
        self.reporter.complete(1, service_s=service, queue_length=self._queue_view())

    def _queue_view(self) -> int | None:
        """Items in the pipelines, at most K (the agent refuses a longer queue: the rest are lost to it); None
        for one process of a fleet (``ROBOTCTL_PROCESS``): the agent's queue holds every process's items, so it
        counts the deliveries and completions itself."""
        if self.settings.process is not None:
            return None
        k = self.settings.capacity
        return self.in_pipeline if k is None else min(self.in_pipeline, k)

    def warn_if_moot(self) -> None:
        """One warning per setting that leaves the robots nothing to control."""
        settings = self.crawler.settings
        s = self.settings
        if s.robots_asked is not None and s.robots_asked > s.concurrency:
            LOG.warning("robotctl: ROBOTCTL_ROBOTS = %d is more than CONCURRENT_REQUESTS = %d download slots, so "
                        "only %d robots are used; raise CONCURRENT_REQUESTS or lower ROBOTCTL_ROBOTS",
                        s.robots_asked, s.concurrency, s.concurrency, extra=self._log_extra)
        per_domain = settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN", 8)
        # deprecated since Scrapy 2.14: read only when the project set it (reading warns)
        set_by_project = (settings.getpriority("CONCURRENT_REQUESTS_PER_IP") or 0) > 0
        per_ip = settings.getint("CONCURRENT_REQUESTS_PER_IP", 0) if set_by_project else 0
        per_site = per_ip if per_ip > 0 else per_domain
        name = "CONCURRENT_REQUESTS_PER_IP" if per_ip > 0 else "CONCURRENT_REQUESTS_PER_DOMAIN"
        if s.robots > 1 and per_site <= s.concurrency // s.robots:
            LOG.warning("robotctl: %s = %d lets a site take at most %d downloads at once, no more than one robot's "
                        "share (%d robots over CONCURRENT_REQUESTS = %d): on a crawl of one site the robots cannot "
                        "act; raise %s (e.g. to %d) or remove it", name, per_site, per_site, s.robots,
                        s.concurrency, name, s.concurrency, extra=self._log_extra)
        delay = settings.getfloat("DOWNLOAD_DELAY", 0.0)
        if delay >= 0.5 and s.robots > 1:
            LOG.warning("robotctl: DOWNLOAD_DELAY = %g s spaces each site's requests, so a site is fetched at most "
                        "%.2g pages/s whatever the robots; the robots can only act across sites. Lower "
                        "DOWNLOAD_DELAY (e.g. to 0) and let robotctl pace the crawl", delay, 1.0 / delay,
                        extra=self._log_extra)


def _nudge(engine: Any) -> None:
    """Ask the engine to send requests now rather than at its next heartbeat (up to 5 s later)."""
    slot = getattr(engine, "_slot", None)
    nextcall = getattr(slot, "nextcall", None)
    if nextcall is not None:
        nextcall.schedule()
