"""Robot workers: fetch a page and its embedded resources, hand the batch to the indexer, obey park/resume.

One robot's loop::

    wait while parked                      (the agent's command, through agent.client's RobotHandle)
    url = await frontier.next()            (politeness: one page per host per crawl delay)
    skip it if robots.txt disallows it
    async with handle.permit():            (a robot parked meanwhile gives the URL back)
        page + its resources in a burst    (resources concurrently, as a browser would)
    sink.offer(robot_id, documents)        (the indexer admits what fits; the delivery is reported)
    rest ~ Exp(think_s)                    (the robot's own pacing)

Only the fetch itself runs inside the permit, so a robot told to park stops within one fetch, and a
robot resumed after its rest fetches at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

import numpy as np

from robotctl import InputError

from ._fetch import Fetcher, FetchError, FetchResult, RobotsRules
from ._frontier import Frontier
from ._html import outline
from ._site import _dataclass_from_mapping


@dataclass(frozen=True)
class CrawlConfig:
    """The robots (``robots:`` in config/demo.yaml).

    Attributes
    ----------
    count : int
        Robots in the fleet (the agent's N).
    think_s : float
        Mean of the exponential rest a robot takes after each page.
    max_resources : int
        Embedded resources fetched with a page at most.
    fetch_timeout_s : float
    max_page_bytes : int
        Bodies are cut at this size.
    default_useful_life_s : float or None
        Useful life of an answer that says nothing about it (no ``X-Useful-Life-S`` or
        ``Cache-Control: max-age``); None: it never goes stale.
    revisit : bool
        Fetch a page again when its useful life ends (its content has changed).
    min_revisit_s : float
        Never fetch a page again sooner than this after fetching it.
    revisit_share : float
        Revisits are at most this share of the pages fetched while new pages wait.
    abort_on_park : bool
        A robot parked in the middle of a fetch abandons it at once (the URL goes back to the frontier),
        as the robots of paper 000 are de-activated at once; false: it finishes the fetch and delivers.
    user_agent : str
    """

    count: int = 3
    think_s: float = 0.2
    max_resources: int = 16
    fetch_timeout_s: float = 10.0
    max_page_bytes: int = 2_000_000
    default_useful_life_s: float | None = None
    revisit: bool = True
    min_revisit_s: float = 1.0
    revisit_share: float = 0.25
    abort_on_park: bool = True
    user_agent: str = "robotctl-demo/0.1"

    def __post_init__(self) -> None:
        for name in ("count", "max_resources", "max_page_bytes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "max_resources" else 1):
                raise InputError(f"robots.{name}", f"must be a whole number >= 1, got {v!r}", "write e.g. 3")
        for name in ("think_s", "fetch_timeout_s", "min_revisit_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0 or (
                    name == "fetch_timeout_s" and v == 0):
                raise InputError(f"robots.{name}", f"must be a finite number >= 0, got {v!r}", "write e.g. 0.2")
            object.__setattr__(self, name, float(v))
        share = self.revisit_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1:
            raise InputError("robots.revisit_share", f"must be a share in [0, 1], got {share!r}", "write e.g. 0.25")
        object.__setattr__(self, "revisit_share", float(share))
        life = self.default_useful_life_s
        if life is not None and (isinstance(life, bool) or not isinstance(life, int | float) or life <= 0):
            raise InputError("robots.default_useful_life_s", f"must be null or a number > 0, got {life!r}",
                             "write e.g. 3600, or null for never")
        for name in ("revisit", "abort_on_park"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"robots.{name}", f"must be true or false, got {getattr(self, name)!r}",
                                 "write true or false")
        if not isinstance(self.user_agent, str) or not self.user_agent:
            raise InputError("robots.user_agent", "must be a non-empty string", "write e.g. mybot/1.0")

    @classmethod
    def from_dict(cls, raw: Any) -> CrawlConfig:
        return _dataclass_from_mapping(cls, raw, "robots")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, eq=False)
class Document:
    """One fetched item on its way to the indexer.

    Attributes
    ----------
    url : str
    body : bytes
    fetched_at : float
        Loop time the answer arrived.
    expires_at : float or None
        Loop time its content changes at the source (None: never).
    robot_id : str
    kind : str
        ``page`` or ``resource``.
    """

    url: str
    body: bytes
    fetched_at: float
    expires_at: float | None
    robot_id: str
    kind: str = "page"

    @property
    def size(self) -> int:
        return len(self.body)


class Sink(Protocol):
    """Where robots put what they fetched (the indexer)."""

    def offer(self, robot_id: str, documents: Sequence[Document]) -> int: ...


class Permit(Protocol):
    """A robot's park/resume switch: agent.client's ``RobotHandle`` or :class:`LocalSwitch`."""

    @property
    def may_fetch(self) -> bool: ...

    def permit(self) -> contextlib.AbstractAsyncContextManager[None]: ...

    async def wait_changed(self) -> Any: ...


class LocalSwitch:
    """A park/resume switch without an agent (tests, and a crawl with control switched off)."""

    def __init__(self, robot_id: str, *, active: bool = True) -> None:
        self.robot_id = robot_id
        self._active = active
        self._changed = asyncio.Event()

    @property
    def may_fetch(self) -> bool:
        return self._active

    def set_active(self, active: bool) -> None:
        if active != self._active:
            self._active = active
            self._changed.set()
            self._changed = asyncio.Event()

    async def wait_changed(self) -> bool:
        await self._changed.wait()
        return self._active

    @contextlib.asynccontextmanager
    async def permit(self) -> AsyncIterator[None]:
        while not self._active:
            await self._changed.wait()
        yield


def useful_life(res: FetchResult, default: float | None) -> float | None:
    """Seconds the answer's content stays current: ``X-Useful-Life-S``, else a positive
    ``Cache-Control: max-age``, else ``default`` (``no-cache`` and ``max-age=0`` are caching rules that
    say nothing about when the content changes)."""
    h = res.headers
    v = h.get("x-useful-life-s")
    if v is not None:
        with contextlib.suppress(ValueError):
            x = float(v)
            if math.isfinite(x) and x >= 0:
                return x
    for part in h.get("cache-control", "").split(","):
        k, _, val = part.strip().partition("=")
        if k.lower() == "max-age":
            with contextlib.suppress(ValueError):
                x = float(val)
                if math.isfinite(x) and x > 0:
                    return x
    return default


@dataclass
class RobotStats:
    """Counters of one robot."""

    batches: int = 0
    pages: int = 0
    resources: int = 0
    bytes: int = 0
    errors: int = 0
    not_html: int = 0
    disallowed: int = 0
    given_back: int = 0
    aborted: int = 0
    fetch_seconds: float = 0.0
    last_error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Robot:
    """One robot worker; :meth:`run` until cancelled.

    Parameters
    ----------
    robot_id : str
    switch : Permit
        The agent's ``RobotHandle`` (or a :class:`LocalSwitch`).
    frontier : Frontier
    fetcher : Fetcher
    rules : RobotsRules
    sink : Sink
    config : CrawlConfig
    rng : numpy.random.Generator
        Pauses.
    clock : callable, optional
        Loop time by default.
    """

    def __init__(self, robot_id: str, *, switch: Permit, frontier: Frontier, fetcher: Fetcher,
                 rules: RobotsRules, sink: Sink, config: CrawlConfig, rng: np.random.Generator,
                 clock: Callable[[], float] | None = None) -> None:
        self.robot_id = robot_id
        self.switch = switch
        self.frontier = frontier
        self.fetcher = fetcher
        self.rules = rules
        self.sink = sink
        self.config = config
        self.rng = rng
        self._clock = clock
        self.stats = RobotStats()

    def now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    async def run(self) -> None:
        while True:
            await self.step()

    async def step(self) -> int:
        """One turn of the loop; returns the documents delivered."""
        async with self.switch.permit():
            pass
        url = await self.frontier.next()
        if not await self.rules.allowed(url, robot_id=self.robot_id):
            self.stats.disallowed += 1
            return 0
        if not self.switch.may_fetch:
            self.frontier.requeue(url)
            self.stats.given_back += 1
            return 0
        async with self.switch.permit():
            if self.config.abort_on_park:
                docs = await self._fetch_unless_parked(url)
            else:
                docs = await self.fetch_batch(url)
        if docs:
            self.stats.batches += 1
            self.sink.offer(self.robot_id, docs)
        if self.config.think_s > 0:
            await asyncio.sleep(float(self.rng.exponential(self.config.think_s)))
        return len(docs)

    async def _parked(self) -> None:
        while self.switch.may_fetch:
            await self.switch.wait_changed()

    async def _fetch_unless_parked(self, url: str) -> list[Document]:
        """:meth:`fetch_batch`, abandoned if the robot is parked before it ends (the URL goes back to the
        frontier, first of its host)."""
        fetch = asyncio.ensure_future(self.fetch_batch(url))
        watch = asyncio.ensure_future(self._parked())
        try:
            await asyncio.wait({fetch, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (fetch, watch):
                if not t.done():
                    t.cancel()
            for t in (fetch, watch):
                with contextlib.suppress(asyncio.CancelledError):
                    await t
        if fetch.cancelled():
            self.frontier.requeue(url)
            self.stats.aborted += 1
            return []
        return fetch.result()

    async def _get(self, url: str) -> FetchResult | None:
        try:
            res = await self.fetcher.get(url, robot_id=self.robot_id)
        except FetchError as exc:
            self.stats.errors += 1
            self.stats.last_error = str(exc)
            return None
        self.stats.fetch_seconds += res.seconds
        if res.status != 200:
            self.stats.errors += 1
            self.stats.last_error = f"{url}: HTTP {res.status}"
            return None
        return res

    def _document(self, res: FetchResult, kind: str) -> Document:
        now = self.now()
        life = useful_life(res, self.config.default_useful_life_s)
        return Document(res.url, res.body, now, None if life is None else now + life, self.robot_id, kind)

    async def fetch_batch(self, url: str) -> list[Document]:
        """The page at ``url`` and its embedded resources (fetched concurrently); newly found links go to
        the frontier, and a page that will change is scheduled for a revisit."""
        res = await self._get(url)
        if res is None:
            return []
        if res.content_type not in ("text/html", "application/xhtml+xml", ""):
            self.stats.not_html += 1
            return []
        page = self._document(res, "page")
        self.stats.pages += 1
        self.stats.bytes += page.size
        shape = outline(res.text(), res.url)
        self.frontier.add_many(shape.links)
        wanted = []
        for res_url in shape.resources[: self.config.max_resources]:
            if await self.rules.allowed(res_url, robot_id=self.robot_id):
                wanted.append(res_url)
            else:
                self.stats.disallowed += 1
        docs = [page]
        if wanted:
            results = await asyncio.gather(*(self._get(u) for u in wanted))
            for r in results:
                if r is not None:
                    d = self._document(r, "resource")
                    docs.append(d)
                    self.stats.resources += 1
                    self.stats.bytes += d.size
        if self.config.revisit and page.expires_at is not None and page.expires_at - page.fetched_at < 86_400:
            self.frontier.revisit(url, max(page.expires_at, page.fetched_at + self.config.min_revisit_s))
        return docs


@dataclass
class StateRecord:
    """Park/resume transitions of one robot as the robot saw them: (loop time, may_fetch)."""

    transitions: list[tuple[float, bool]] = field(default_factory=list)

    @property
    def parks(self) -> int:
        return sum(1 for _, a in self.transitions if not a)

    @property
    def resumes(self) -> int:
        return sum(1 for _, a in self.transitions if a)


class ActiveClock:
    """Time integral of the number of robots allowed to fetch, from their switches' transitions."""

    def __init__(self, switches: Sequence[Permit], clock: Callable[[], float]) -> None:
        self.switches = list(switches)
        self._clock = clock
        self.records = [StateRecord() for _ in self.switches]
        self._active = [s.may_fetch for s in self.switches]
        self._last = clock()
        self._integral = 0.0
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def active(self) -> int:
        return sum(self._active)

    def _advance(self, now: float | None = None) -> None:
        t = self._clock() if now is None else now
        if t > self._last:
            self._integral += self.active * (t - self._last)
            self._last = t

    def integral(self, now: float | None = None) -> float:
        """Robot-seconds of fetching allowed since the start (or the last :meth:`restart`), up to ``now``."""
        self._advance(now)
        return self._integral

    def restart(self, now: float | None = None) -> None:
        self._advance(now)
        self._integral = 0.0

    async def _watch(self, n: int) -> None:
        sw: Any = self.switches[n]
        while True:
            await sw.wait_changed()
            state = bool(sw.may_fetch)
            if state != self._active[n]:
                self._advance()
                self._active[n] = state
                self.records[n].transitions.append((self._clock(), state))

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._watch(n)) for n in range(len(self.switches))
                       if hasattr(self.switches[n], "wait_changed")]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._advance()
