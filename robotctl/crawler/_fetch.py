"""Fetching over HTTP for the robots, over a transport seam, and robots.txt.

Layers (after httpx): :class:`Fetcher` is what robots call; it speaks through a :class:`Transport` whose
one method, ``get``, tests replace with :class:`MockTransport`. :class:`AiohttpTransport` is the real
one. Foreign exceptions are translated in exactly one place, :func:`fetch_context`, into
:class:`FetchError`, which names the robot and the URL.

Exceptions::

    RobotctlError
    └── FetchError      a fetch failed (connection, timeout, bad answer); carries url and robot_id
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import math
import time
import urllib.robotparser
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from robotctl import RobotctlError

from ._frontier import Frontier, host_key


class FetchError(RobotctlError):
    """A fetch failed.

    Attributes
    ----------
    url : str
    robot_id : str or None
    """

    def __init__(self, message: str, *, url: str, robot_id: str | None = None) -> None:
        self.url = url
        self.robot_id = robot_id
        who = f" (robot {robot_id})" if robot_id else ""
        super().__init__(f"{url}{who}: {message}")


@contextlib.contextmanager
def fetch_context(url: str, robot_id: str | None = None) -> Iterator[None]:
    """Translate aiohttp, timeout and OS errors into :class:`FetchError` naming the URL and robot."""
    try:
        yield
    except FetchError:
        raise
    except TimeoutError as exc:
        raise FetchError("no answer in time", url=url, robot_id=robot_id) from exc
    except (aiohttp.ClientError, OSError, UnicodeError, ValueError) as exc:
        raise FetchError(f"{type(exc).__name__}: {exc}", url=url, robot_id=robot_id) from exc


@dataclass(frozen=True)
class FetchResult:
    """One answer.

    Attributes
    ----------
    url : str
        The final URL (after redirects).
    status : int
    body : bytes
        At most the fetcher's ``max_bytes``.
    headers : mapping
        Lower-cased header names.
    seconds : float
        Time from request to the last byte.
    truncated : bool
        True when the body was cut at ``max_bytes``.
    """

    url: str
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    truncated: bool = False

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def text(self) -> str:
        charset = "utf-8"
        for part in self.headers.get("content-type", "").split(";")[1:]:
            k, _, v = part.strip().partition("=")
            if k.lower() == "charset" and v:
                charset = v.strip('"')
        try:
            return self.body.decode(charset, errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")


class Transport(Protocol):
    """What :class:`Fetcher` needs to fetch."""

    async def get(self, url: str, *, headers: Mapping[str, str], timeout_s: float,
                  max_bytes: int) -> FetchResult: ...

    async def aclose(self) -> None: ...


class AiohttpTransport:
    """HTTP GET over an ``aiohttp.ClientSession`` (created on first use, closed by :meth:`aclose`)."""

    def __init__(self, *, limit: int = 64) -> None:
        self.limit = limit
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self.limit),
                                                  timeout=aiohttp.ClientTimeout(total=None))
        return self._session

    async def get(self, url: str, *, headers: Mapping[str, str], timeout_s: float,
                  max_bytes: int) -> FetchResult:
        start = time.perf_counter()
        async with self._get_session().get(url, headers=dict(headers),
                                           timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            body = await resp.content.read(max_bytes + 1)
            truncated = len(body) > max_bytes
            return FetchResult(str(resp.url), resp.status, body[:max_bytes],
                               {k.lower(): v for k, v in resp.headers.items()},
                               time.perf_counter() - start, truncated)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
        self._session = None


MockHandler = Callable[[str], "FetchResult | Awaitable[FetchResult]"]


class MockTransport:
    """A transport that answers every GET with ``handler(url)`` (sync or async)."""

    def __init__(self, handler: MockHandler) -> None:
        self.handler = handler
        self.requests: list[str] = []

    async def get(self, url: str, *, headers: Mapping[str, str], timeout_s: float,
                  max_bytes: int) -> FetchResult:
        self.requests.append(url)
        result = self.handler(url)
        if inspect.isawaitable(result):
            result = await result
        assert isinstance(result, FetchResult)
        return result

    async def aclose(self) -> None:
        return None


class Fetcher:
    """GET with the crawler's user agent, timeout and size cap; errors become :class:`FetchError`.

    Parameters
    ----------
    transport : Transport
    user_agent : str
    timeout_s : float
    max_bytes : int
    """

    def __init__(self, transport: Transport, *, user_agent: str, timeout_s: float = 10.0,
                 max_bytes: int = 2_000_000) -> None:
        self.transport = transport
        self.user_agent = user_agent
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes

    async def get(self, url: str, *, robot_id: str | None = None) -> FetchResult:
        with fetch_context(url, robot_id):
            return await self.transport.get(url, headers={"User-Agent": self.user_agent},
                                            timeout_s=self.timeout_s, max_bytes=self.max_bytes)

    async def aclose(self) -> None:
        await self.transport.aclose()


def crawl_delay(lines: list[str], agent: str) -> float | None:
    """The ``Crawl-delay`` of the group that applies to ``agent`` (else of ``*``), fractions allowed (the
    standard library's parser reads whole seconds only)."""
    groups: list[tuple[list[str], float | None]] = []
    agents: list[str] = []
    delay: float | None = None
    in_rules = False
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if ":" not in line:
            continue
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "user-agent":
            if in_rules:
                groups.append((agents, delay))
                agents, delay, in_rules = [], None, False
            agents.append(value.lower())
        elif key == "crawl-delay":
            in_rules = True
            with contextlib.suppress(ValueError):
                delay = float(value)
        elif key in ("allow", "disallow"):
            in_rules = True
    groups.append((agents, delay))
    name = agent.lower()
    for wanted in (lambda a: a != "*" and a in name, lambda a: a == "*"):
        for names, d in groups:
            if d is not None and math.isfinite(d) and d >= 0 and any(wanted(a) for a in names):
                return d
    return None


class _HostRules:
    """One host's robots.txt: everything allowed, nothing allowed, or the parsed rules."""

    def __init__(self, mode: str, parser: urllib.robotparser.RobotFileParser | None = None) -> None:
        self.mode = mode
        self.parser = parser

    def can_fetch(self, agent: str, url: str) -> bool:
        if self.mode == "allow":
            return True
        if self.mode == "deny" or self.parser is None:
            return False
        return self.parser.can_fetch(agent, url)


class RobotsRules:
    """robots.txt of every host, fetched once per host and obeyed: disallowed paths are skipped and a
    ``Crawl-delay`` raises the host's politeness delay in the frontier.

    A host whose robots.txt is missing (4xx other than 401/403) allows everything; one that answers
    401/403 or 5xx, or cannot be reached, is treated as disallowing everything (the cautious reading).
    """

    def __init__(self, fetcher: Fetcher, frontier: Frontier, *, user_agent: str) -> None:
        self.fetcher = fetcher
        self.frontier = frontier
        self.agent_name = user_agent.split("/")[0]
        self._rules: dict[str, _HostRules] = {}
        self._loading: dict[str, asyncio.Future[_HostRules]] = {}
        self.fetched = 0

    async def _load(self, url: str, robot_id: str | None) -> _HostRules:
        parts = urlsplit(url)
        robots_url = urlunsplit((parts.scheme, parts.netloc, "/robots.txt", "", ""))
        try:
            res = await self.fetcher.get(robots_url, robot_id=robot_id)
        except FetchError:
            return _HostRules("deny")
        self.fetched += 1
        if res.status in (401, 403) or res.status >= 500:
            return _HostRules("deny")
        if res.status >= 400:
            return _HostRules("allow")
        lines = res.text().splitlines()
        rp = urllib.robotparser.RobotFileParser(robots_url)
        rp.parse(lines)
        delay = crawl_delay(lines, self.agent_name)
        if delay is not None:
            self.frontier.set_delay(host_key(url), float(delay))
        return _HostRules("parsed", rp)

    async def allowed(self, url: str, *, robot_id: str | None = None) -> bool:
        """May the crawler fetch ``url``? Fetches the host's robots.txt first if needed."""
        host = host_key(url)
        rules = self._rules.get(host)
        if rules is None:
            fut = self._loading.get(host)
            if fut is None:
                fut = asyncio.ensure_future(self._load(url, robot_id))
                self._loading[host] = fut
                fut.add_done_callback(functools.partial(self._store, host))
            rules = await asyncio.shield(fut)
        return rules.can_fetch(self.agent_name, url)

    def _store(self, host: str, fut: asyncio.Future[_HostRules]) -> None:
        self._loading.pop(host, None)
        if not fut.cancelled() and fut.exception() is None:
            self._rules[host] = fut.result()
