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
import contextlib
import logging
import time
import weakref
from typing import Any
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Request, Response

from robotctl.agent import AgentClient, AgentRejectedError, AgentUnavailableError, RobotHandle

from ._reporter import AgentHealth, NullReporter, Reporter
from ._settings import RobotctlSettings
from ._slots import RobotSlots

LOG = logging.getLogger("robotctl.scrapy")

#: request.meta keys the extension sets: the robot (id) whose slot fetched the request, and the slot
META_ROBOT = "robotctl_robot"
META_SLOT = "robotctl_slot"

_EXTENSIONS: weakref.WeakKeyDictionary[Crawler, RobotctlExtension] = weakref.WeakKeyDictionary()


def reporter(crawler: Crawler) -> Reporter | NullReporter:
    """The reporter of ``crawler``'s :class:`RobotctlExtension`, for pipelines and indexers that report
    completions, obsolete drops or queue lengths themselves; a :class:`NullReporter` when the extension is
    off or not enabled, so callers need no test of their own::

        from robotctl.scrapy import reporter
        reporter(self.crawler).complete(pages=1, service_s=0.04, bytes=5120)
    """
    ext = _EXTENSIONS.get(crawler)
    if ext is None or not ext.running:
        return NullReporter()
    return ext.reporter


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
        if settings.delivery_signal == "response_received":
            crawler.signals.connect(ext.response_received, signal=signals.response_received)
        elif settings.delivery_signal == "item_scraped":
            crawler.signals.connect(ext.item_scraped, signal=signals.item_scraped)
        _EXTENSIONS[crawler] = ext
        return ext

    # -- the robots ----------------------------------------------------------------------------------
    def robot_id(self, k: int) -> str:
        return f"{self.prefix}-{k}"

    def _may_fetch(self, k: int) -> bool:
        handle = self.handles.get(k)
        if handle is None:
            return self.settings.default_state == "active"
        return handle.may_fetch

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
        if allowed == 0:
            if not engine.paused:
                engine.pause()
                self._paused_by_us = True
                self.pauses += 1
                LOG.info("robotctl: every robot is parked: the engine is paused (%d downloads in flight finish)",
                         len(engine.downloader.active))
            return
        engine.downloader.total_concurrency = allowed
        if self._paused_by_us:
            engine.unpause()
            self._paused_by_us = False
            LOG.info("robotctl: a robot is active again: the engine resumes at %d concurrent downloads", allowed)
        else:
            LOG.debug("robotctl: %d robots active: %d concurrent downloads", len(self.slots.active), allowed)
        _nudge(engine)

    async def _connect(self) -> None:
        """Register the robots (retrying while the agent is down), then follow their commands."""
        s = self.settings
        k = 1
        while k <= s.robots:
            try:
                handle = await self.client.register_robot(self.robot_id(k), default_state=s.default_state,
                                                          poll_wait_s=s.poll_wait_s)
            except AgentUnavailableError as exc:
                self.health.failed(exc)
                await asyncio.sleep(s.retry_interval_s)
                continue
            except AgentRejectedError as exc:
                LOG.warning("robotctl: the agent at %s refused robot %s (%s); robots %d..%d follow "
                            "ROBOTCTL_DEFAULT_STATE = %s and the crawl is not controlled", s.url,
                            self.robot_id(k), exc, k, s.robots, s.default_state)
                return
            self.health.answered()
            self.handles[k] = handle
            self._registered.add(handle.robot_id)
            self._tasks.append(asyncio.ensure_future(self._follow(handle)))
            k += 1
        LOG.info("robotctl: %d robots registered with the agent at %s (%s .. %s)", s.robots, s.url,
                 self.robot_id(1), self.robot_id(s.robots))
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
                        "default since 2.13)")
            return
        if self.settings.robot_prefix is None:
            self.prefix = str(getattr(spider, "name", None) or "robot")
        self.running = True
        self._since = time.monotonic()
        s = self.settings
        LOG.info("robotctl: %d robots over CONCURRENT_REQUESTS = %d download slots, agent %s, deliveries on %s",
                 s.robots, s.concurrency, s.url, s.delivery_signal)
        self.reporter.start()
        self.apply()  # until the robots are registered they follow ROBOTCTL_DEFAULT_STATE
        self._tasks.append(asyncio.ensure_future(self._connect()))

    async def spider_closed(self, spider: Any, reason: str = "") -> None:
        if not self.running:
            return
        self.running = False
        self._integrate()
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

    def response_received(self, response: Response, request: Request, spider: Any = None) -> None:
        if not self.running or urlsplit(response.url).path == "/robots.txt":
            return
        self.reporter.deliver(1, bytes=len(response.body), robot=request.meta.get(META_ROBOT))

    def item_scraped(self, item: Any, response: Any = None, spider: Any = None) -> None:
        if not self.running:
            return
        body = getattr(response, "body", None)
        meta = response.meta if isinstance(response, Response) and response.request is not None else {}
        self.reporter.deliver(1, bytes=len(body) if body is not None else None, robot=meta.get(META_ROBOT))


def _nudge(engine: Any) -> None:
    """Ask the engine to send requests now rather than at its next heartbeat (up to 5 s later)."""
    slot = getattr(engine, "_slot", None)
    nextcall = getattr(slot, "nextcall", None)
    if nextcall is not None:
        nextcall.schedule()
