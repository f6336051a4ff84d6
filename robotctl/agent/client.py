"""A Python client of the agent, for crawlers written in Python.

::

    async with AgentClient("http://127.0.0.1:8787", token=TOKEN) as agent:
        robot = await agent.register_robot("robot-1")
        while crawling:
            async with robot.permit():          # waits while the agent keeps this robot parked
                page = await fetch(url)
            await agent.deliver(robot.robot_id, pages=1, bytes=len(page))

Layers (after httpx): :class:`AgentClient` speaks the API over a :class:`Transport` whose one method,
``handle_request``, tests replace with :class:`MockTransport`; :class:`AiohttpTransport` is the real one.
Foreign exceptions (aiohttp, timeouts, OS errors) are translated in exactly one place, the transport,
with the URL and the robot id attached.

Exceptions::

    RobotctlError
    └── AgentError                 anything the client raises about the agent
        ├── AgentUnavailableError       no answer: connection refused, timeout, 5xx
        └── AgentRejectedError          a 4xx answer; carries status, field, problem and hint
            └── RobotUnknownError       404: the agent does not know the robot (the handle re-registers)

A :class:`RobotHandle` keeps its robot's command with a background long-poll of
``GET /v1/robots/{id}/command``; if it hears nothing from the agent for the lease, the robot falls back
to its default state (:attr:`RobotState.LEASE_LOST`), exactly when the lease ends. The handle sends the
robot key its registration returned (``X-Robot-Key``) with every poll, re-registration and
deregistration: no other client can take its robot over.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import logging
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

import aiohttp

from robotctl import RobotctlError

from .clock import Clock, MonotonicClock

LOG = logging.getLogger("robotctl.agent.client")


# -- exceptions -------------------------------------------------------------------------------------
class AgentError(RobotctlError):
    """Base of what the client raises about the agent."""


class AgentUnavailableError(AgentError):
    """The agent did not answer (connection refused, timeout) or answered 5xx."""


def summed_ack(acks: Sequence[Mapping[str, Any]], counts: Sequence[str]) -> dict[str, Any]:
    """The acknowledgements of a batch sent in chunks as one: ``counts`` summed, the last one's ``t``,
    ``queue`` and ``active``."""
    total: dict[str, Any] = {k: sum(int(a.get(k, 0)) for a in acks) for k in counts}
    last = acks[-1] if acks else {}
    total.update({k: last[k] for k in ("t", "queue", "active") if k in last})
    return total


class AgentRejectedError(AgentError):
    """The agent refused the request (4xx).

    Attributes
    ----------
    status : int
    field, problem, hint : str
        From the agent's JSON error.
    """

    def __init__(self, status: int, field: str, problem: str, hint: str = "") -> None:
        self.status = status
        self.field = field
        self.problem = problem
        self.hint = hint
        # the agent's error text already ends with its hint: append it only when it does not
        super().__init__(f"HTTP {status}: {problem}" + (f"; {hint}" if hint and hint not in problem else ""))


class RobotUnknownError(AgentRejectedError):
    """404: the agent does not know this robot (it lost its registration, or it was deregistered)."""


@contextlib.contextmanager
def request_context(url: str, robot_id: str | None = None) -> Iterator[None]:
    """Translate foreign exceptions into :class:`AgentUnavailableError`, naming the URL and the robot."""
    who = f" (robot {robot_id})" if robot_id else ""
    try:
        yield
    except AgentError:
        raise
    except TimeoutError as exc:
        raise AgentUnavailableError(f"{url}{who}: no answer in time") from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise AgentUnavailableError(f"{url}{who}: {type(exc).__name__}: {exc}") from exc


# -- transport --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    """One API request, as the transport sees it."""

    method: str
    path: str
    params: Mapping[str, str] = field(default_factory=dict)
    json: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    robot_id: str | None = None


@dataclass(frozen=True)
class Response:
    """Status and decoded JSON body."""

    status: int
    body: Any = None


class Transport(Protocol):
    """What :class:`AgentClient` needs to talk to the agent."""

    async def handle_request(self, request: Request) -> Response: ...

    async def aclose(self) -> None: ...


class AiohttpTransport:
    """HTTP over an ``aiohttp.ClientSession`` (owned, and closed, unless one is given)."""

    def __init__(self, base_url: str, *, session: aiohttp.ClientSession | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._session = session
        self._owned = session is None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # no cap on connections: every robot handle keeps one long-poll open
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None),
                                                  connector=aiohttp.TCPConnector(limit=0))
            self._owned = True
        return self._session

    async def handle_request(self, request: Request) -> Response:
        url = self.base_url + request.path
        with request_context(url, request.robot_id):
            timeout = aiohttp.ClientTimeout(total=request.timeout_s)
            async with self._get_session().request(request.method, url, params=request.params or None,
                                                   json=request.json, headers=request.headers or None,
                                                   timeout=timeout) as resp:
                try:
                    body = await resp.json(content_type=None)
                except ValueError:
                    body = {"error": await resp.text()}
                return Response(resp.status, body)

    async def aclose(self) -> None:
        if self._owned and self._session is not None:
            await self._session.close()
        self._session = None


MockHandler = Callable[[Request], "Response | Awaitable[Response]"]


class MockTransport:
    """A transport that hands every request to ``handler(request) -> Response`` (sync or async)."""

    def __init__(self, handler: MockHandler) -> None:
        self.handler = handler
        self.requests: list[Request] = []

    async def handle_request(self, request: Request) -> Response:
        self.requests.append(request)
        result = self.handler(request)
        if inspect.isawaitable(result):
            result = await result
        assert isinstance(result, Response)
        return result

    async def aclose(self) -> None:
        return None


# -- robots -----------------------------------------------------------------------------------------
class RobotState(enum.Enum):
    """A robot's state as its handle knows it."""

    #: the agent says fetch: ``permit()`` passes at once
    ACTIVE = "active"
    #: the agent says wait: ``permit()`` blocks until the robot is resumed
    PARKED = "parked"
    #: no word from the agent for a whole lease: the robot follows its default state
    LEASE_LOST = "lease_lost"


class HandleLife(enum.Enum):
    """Life cycle of a :class:`RobotHandle`."""

    #: registered, long-polling
    OPEN = "open"
    #: closed; ``permit()`` raises
    CLOSED = "closed"


class RobotHandle:
    """One registered robot: its rank, its command, and ``permit()``.

    Created by :meth:`AgentClient.register_robot`; a background task long-polls the agent for the
    robot's command. Close it with :meth:`close` (the client closes its handles when it closes).
    """

    def __init__(self, client: AgentClient, view: Mapping[str, Any], *, default_state: str,
                 poll_wait_s: float | None = None, process: str | None = None) -> None:
        self._client = client
        #: the crawler process it registered with (its rank is then the agent's to deal)
        self.process = process
        self.robot_id: str = str(view["robot"])
        self.rank: int = int(view["rank"])
        self.slot: int = int(view.get("slot", self.rank))
        self.default_state = RobotState(default_state)
        self.lease_s: float = float(view.get("lease_s", 10.0))
        self.version: int = int(view.get("version", 0))
        self.reason: str = str(view.get("reason", ""))
        self.poll_wait_s = poll_wait_s
        #: the key the agent issued at registration: only this handle may poll, re-register, deregister
        self._key: str | None = view.get("robot_key")
        self._state = RobotState(view.get("state", default_state))
        self._last_ok = client.clock.now()
        self._changed = asyncio.Event()
        self._life = HandleLife.OPEN
        self._task: asyncio.Task[None] | None = None
        self.polls = 0

    def __repr__(self) -> str:
        return f"RobotHandle({self.robot_id!r}, rank={self.rank}, state={self.state.value})"

    @property
    def state(self) -> RobotState:
        return self._state

    @property
    def may_fetch(self) -> bool:
        """True when the robot should fetch: active, or lease lost with an active default."""
        s = self._state
        lost_active = s is RobotState.LEASE_LOST and self.default_state is RobotState.ACTIVE
        return s is RobotState.ACTIVE or lost_active

    def _set(self, state: RobotState) -> None:
        if state is not self._state:
            LOG.debug("event=robot_state robot=%s from=%s to=%s reason=%s", self.robot_id, self._state.value,
                     state.value, self.reason)
            self._state = state
            self._changed.set()
            self._changed = asyncio.Event()

    def _apply(self, view: Mapping[str, Any]) -> None:
        if view.get("robot_key"):
            self._key = str(view["robot_key"])
        self.version = int(view.get("version", self.version))
        self.lease_s = float(view.get("lease_s", self.lease_s))
        self.reason = str(view.get("reason", self.reason))
        self.rank = int(view.get("rank", self.rank))
        self._last_ok = self._client.clock.now()
        self._set(RobotState(view["state"]))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._poll_loop())

    async def wait_changed(self) -> RobotState:
        """Wait for the next change of state and return the new one."""
        await self._changed.wait()
        return self._state

    @contextlib.asynccontextmanager
    async def permit(self) -> AsyncIterator[None]:
        """``async with robot.permit():`` around each fetch: waits while the robot is parked."""
        while True:
            if self._life is HandleLife.CLOSED:
                raise RuntimeError(f"Cannot enter permit() for robot {self.robot_id!r}, as its handle has "
                                   "been closed.")
            if self.may_fetch:
                break
            await self._changed.wait()
        yield

    async def _poll_loop(self) -> None:
        clock = self._client.clock
        backoff = 0.05
        reregistered = False  # the last step was a re-registration after a 404
        while self._life is HandleLife.OPEN:
            remaining = self._last_ok + self.lease_s - clock.now()
            wait_s = self.lease_s / 2 if self.poll_wait_s is None else min(self.poll_wait_s, self.lease_s / 2)
            # within the lease, wait for an answer until the lease ends; once it is lost, a lease per try
            timeout = remaining if remaining > 0 else self.lease_s
            try:
                view = await _race(self._client._command(self.robot_id, self.version, wait_s, self._key),
                                   clock.sleep(timeout))
                if view is None:
                    raise AgentUnavailableError(f"no answer for the lease of {self.lease_s:g} s")
                self.polls += 1
                self._apply(view)
                backoff = 0.05
                reregistered = False
            except RobotUnknownError as unknown:
                if reregistered:  # registered again, yet still unknown to the next poll: back off
                    await self._failed(unknown, backoff)
                    backoff = min(backoff * 2, max(0.05, self.lease_s / 4))
                try:  # a robot of a process takes whatever rank the agent deals it
                    view = await self._client._register(self.robot_id, None if self.process else self.rank,
                                                        self.default_state.value, self._key, self.process)
                    self._apply(view)
                    reregistered = True
                    continue
                except AgentError as exc:
                    await self._failed(exc, backoff)
                    backoff = min(backoff * 2, max(0.05, self.lease_s / 4))
            except AgentError as exc:
                await self._failed(exc, backoff)
                backoff = min(backoff * 2, max(0.05, self.lease_s / 4))

    def _check_lease(self, exc: Exception) -> None:
        if (self._client.clock.now() - self._last_ok >= self.lease_s
                and self._state is not RobotState.LEASE_LOST):
            self.reason = f"lease lost: {exc}"
            self._set(RobotState.LEASE_LOST)

    async def _failed(self, exc: Exception, backoff: float) -> None:
        """After a failed poll: back off, but wake at the end of the lease to fall back exactly then."""
        clock = self._client.clock
        self._check_lease(exc)
        remaining = self._last_ok + self.lease_s - clock.now()
        await clock.sleep(min(backoff, remaining) if remaining > 0 else backoff)
        self._check_lease(exc)

    async def close(self, *, deregister: bool = True) -> None:
        """Stop polling and (by default) deregister the robot so its rank is freed.

        Returns within the client's ``close_timeout_s`` (on its clock) even when the agent does not
        answer; the long-poll and every request of the handle are finished, none is left pending.
        """
        if self._life is HandleLife.CLOSED:
            return
        self._life = HandleLife.CLOSED
        self._changed.set()
        try:
            await _cancel(self._task)
            if deregister:
                client = self._client
                await _race(_quietly(client._request("DELETE", f"/v1/robots/{_quote(self.robot_id)}",
                                                     robot_id=self.robot_id, timeout_s=client.close_timeout_s,
                                                     headers=_key_header(self._key))),
                            client.clock.sleep(client.close_timeout_s))
        finally:
            self._client._handles.discard(self)


def _key_header(key: str | None) -> dict[str, str]:
    return {"X-Robot-Key": key} if key else {}


async def _quietly(work: Awaitable[Any]) -> None:
    """Await ``work``; an :class:`AgentError` is logged, not raised (closing goes on regardless)."""
    try:
        await work
    except AgentError as exc:
        LOG.info("event=close_request_failed error=%s", exc)


async def _cancel(task: asyncio.Future[Any] | None) -> None:
    """Cancel ``task`` and wait for it to finish; its result or error is retrieved and dropped."""
    if task is None:
        return
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled():
        task.exception()


async def _race(work: Awaitable[Any], timer: Awaitable[None]) -> Any:
    """The result of ``work``, or None if ``timer`` ends first (``work`` is then cancelled).

    Whatever happens (``timer`` first, or the caller cancelled), neither future is left pending and
    no exception is left unretrieved.
    """
    w = asyncio.ensure_future(work)
    t = asyncio.ensure_future(timer)
    try:
        await asyncio.wait({w, t}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        w.cancel()
        t.cancel()
        await asyncio.shield(asyncio.wait({w, t}))
        for f in (w, t):
            if not f.cancelled():
                f.exception()
        raise
    if not t.done():
        t.cancel()
    if w.done():
        return w.result()
    await _cancel(w)
    return None


# -- the client -------------------------------------------------------------------------------------
class AgentClient:
    """The agent's API for a Python crawler.

    Parameters
    ----------
    base_url : str
        ``http://127.0.0.1:8787``.
    token : str, optional
        The agent's ``server.token``, sent as a bearer token.
    session : aiohttp.ClientSession, optional
        Reuse a session (not closed by the client). Each robot handle keeps a long-poll open on it, so
        its connector's limit must exceed the number of robots (aiohttp's default is 100).
    transport : Transport, optional
        Replaces HTTP entirely (tests: :class:`MockTransport`).
    clock : Clock, optional
        For leases and back-off; the monotonic clock by default (tests share the agent's manual clock).
    timeout_s : float
        Timeout of ordinary requests (long-polls have their own).
    batch_limit : int
        :meth:`deliver_many` sends at most this many deliveries per request (the agent's
        ``server.max_batch``).
    close_timeout_s : float
        :meth:`aclose` (and each handle's ``close``) gives the agent this long to answer the
        deregistrations, all sent at once, before it stops waiting.
    """

    def __init__(self, base_url: str, *, token: str | None = None,
                 session: aiohttp.ClientSession | None = None,
                 transport: Transport | None = None, clock: Clock | None = None, timeout_s: float = 30.0,
                 batch_limit: int = 10_000, close_timeout_s: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.transport: Transport = transport if transport is not None else AiohttpTransport(base_url,
                                                                                             session=session)
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.timeout_s = timeout_s
        self.batch_limit = batch_limit
        self.close_timeout_s = close_timeout_s
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._handles: set[RobotHandle] = set()
        self._closed = False

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every robot handle (deregistering them, all at once) and the transport.

        Returns within ``close_timeout_s`` of the client's clock even when the agent does not answer.
        """
        try:
            handles = list(self._handles)
            if handles:
                await asyncio.gather(*(h.close() for h in handles))
        finally:
            self._closed = True
            await self.transport.aclose()

    async def _request(self, method: str, path: str, *, json: Any = None, params: Mapping[str, str] | None = None,
                       timeout_s: float | None = None, robot_id: str | None = None,
                       headers: Mapping[str, str] | None = None) -> Any:
        if self._closed:
            raise RuntimeError("Cannot send a request, as the AgentClient has been closed.")
        req = Request(method, path, dict(params or {}), json, {**self._headers, **(headers or {})},
                      self.timeout_s if timeout_s is None else timeout_s, robot_id)
        resp = await self.transport.handle_request(req)
        if resp.status >= 500:
            raise AgentUnavailableError(f"{self.base_url}{path}: HTTP {resp.status}: "
                                        f"{_error_text(resp.body)}")
        if resp.status >= 400:
            body = resp.body if isinstance(resp.body, Mapping) else {}
            cls = RobotUnknownError if resp.status == 404 else AgentRejectedError
            raise cls(resp.status, str(body.get("field", "")), _error_text(resp.body), str(body.get("hint",
                                                                                                    "")))
        return resp.body

    # -- traffic -------------------------------------------------------------------------------------
    async def deliver(self, robot_id: str | None, pages: int = 1, bytes: int | None = None,
                      client_time: float | None = None) -> dict[str, Any]:
        """Report one delivery of ``pages`` pages by ``robot_id``; returns the agent's acknowledgement
        (``queue``, ``active``, ``lost``, and the robot's ``state``)."""
        body: dict[str, Any] = {"pages": pages}
        if robot_id is not None:
            body["robot"] = robot_id
        if bytes is not None:
            body["bytes"] = bytes
        if client_time is not None:
            body["client_time"] = client_time
        result: dict[str, Any] = await self._request("POST", "/v1/deliveries", json=body, robot_id=robot_id)
        return result

    async def _post_many(self, path: str, key: str, items: Sequence[Mapping[str, Any]],
                         counts: tuple[str, ...]) -> dict[str, Any]:
        """POST ``{key: [...]}`` in chunks of at most ``batch_limit``; the acknowledgements' ``counts`` summed,
        the last one's ``t``, ``queue`` and ``active``."""
        acks = []
        for start in range(0, len(items), self.batch_limit):
            chunk = [dict(d) for d in items[start:start + self.batch_limit]]
            acks.append(await self._request("POST", path, json={key: chunk}))
        return summed_ack(acks, counts)

    async def deliver_many(self, deliveries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Report many deliveries (dicts with ``robot``, ``pages``, ``bytes``, ``client_time``) in batches
        of at most ``batch_limit``; returns the summed acknowledgement."""
        return await self._post_many("/v1/deliveries", "deliveries", deliveries,
                                     ("accepted", "pages", "admitted", "lost"))

    async def complete(self, pages: int = 1, service_s: float | None = None,
                       bytes: int | None = None) -> dict[str, Any]:
        """Report ``pages`` pages indexed, taking ``service_s`` seconds in total and/or ``bytes`` in size."""
        body: dict[str, Any] = {"pages": pages}
        if service_s is not None:
            body["service_s"] = service_s
        if bytes is not None:
            body["bytes"] = bytes
        result: dict[str, Any] = await self._request("POST", "/v1/completions", json=body)
        return result

    async def complete_many(self, completions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Report many completions (dicts with ``pages``, ``service_s``, ``bytes``) in batches of at most
        ``batch_limit``; returns the summed acknowledgement."""
        return await self._post_many("/v1/completions", "completions", completions,
                                     ("accepted", "pages", "removed", "unmatched"))

    async def obsolete(self, pages: int = 1) -> dict[str, Any]:
        """Report ``pages`` waiting pages dropped as stale."""
        result: dict[str, Any] = await self._request("POST", "/v1/obsolete", json={"pages": pages})
        return result

    async def given_up(self, pages: int = 1) -> dict[str, Any]:
        """Report ``pages`` pages the crawler gave up on (never fetched): the agent's observed cost J
        counts them like pages lost."""
        result: dict[str, Any] = await self._request("POST", "/v1/given_up", json={"pages": pages})
        return result

    async def set_queue(self, length: int) -> dict[str, Any]:
        """Resynchronise the agent's queue view with the indexer's count."""
        result: dict[str, Any] = await self._request("POST", "/v1/queue", json={"length": length})
        return result

    # -- views ---------------------------------------------------------------------------------------
    async def policy(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/v1/policy")
        return result

    async def status(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/v1/status")
        return result

    async def refit(self) -> dict[str, Any]:
        """Ask for a refit now; returns its outcome."""
        result: dict[str, Any] = await self._request("POST", "/v1/refit", timeout_s=None)
        return result

    # -- robots --------------------------------------------------------------------------------------
    async def _register(self, robot_id: str | None, rank: int | None, default_state: str,
                        key: str | None = None, process: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"default_state": default_state}
        if robot_id is not None:
            body["robot"] = robot_id
        if rank is not None:
            body["rank"] = rank
        if process is not None:
            body["process"] = process
        result: dict[str, Any] = await self._request("POST", "/v1/robots", json=body, robot_id=robot_id,
                                                     headers=_key_header(key))
        return result

    async def register_robot(self, robot_id: str | None = None, rank: int | None = None,
                             default_state: str = "active", *, poll_wait_s: float | None = None,
                             takeover_wait_s: float = 30.0, process: str | None = None) -> RobotHandle:
        """Register a robot (an automatic id and rank when omitted) and start following its command.

        ``process`` names the crawler process the robot belongs to (several processes sharing one agent):
        the agent then deals the robots' ranks round-robin over the processes, so that its active robots
        spread across them (leave ``rank`` out).

        An id the agent holds for another client (this robot's previous process, whose key died with it)
        is refused until that registration's lease runs out; meanwhile this retries every second, for up to
        ``takeover_wait_s`` (on the client's clock), then raises the refusal.
        """
        if default_state not in ("active", "parked"):
            raise ValueError(f"default_state must be 'active' or 'parked', got {default_state!r}")
        deadline = self.clock.now() + takeover_wait_s
        while True:
            try:
                view = await self._register(robot_id, rank, default_state, process=process)
                break
            except AgentRejectedError as exc:
                if exc.status != 409 or exc.field != "robot" or self.clock.now() >= deadline:
                    raise
                await self.clock.sleep(1.0)
        handle = RobotHandle(self, view, default_state=default_state, poll_wait_s=poll_wait_s, process=process)
        self._handles.add(handle)
        handle.start()
        return handle

    async def _command(self, robot_id: str, version: int, wait_s: float, key: str | None = None
                       ) -> dict[str, Any]:
        result: dict[str, Any] = await self._request(
            "GET", f"/v1/robots/{_quote(robot_id)}/command", params={"version": str(version),
                                                             "wait_s": f"{wait_s:g}"},
            timeout_s=None, robot_id=robot_id, headers=_key_header(key))
        return result


def _quote(robot_id: str) -> str:
    """A robot id as one path segment (``team/1`` is ``team%2F1``, not two segments)."""
    return urllib.parse.quote(robot_id, safe="")


def _error_text(body: Any) -> str:
    if isinstance(body, Mapping):
        return str(body.get("error", body))
    return str(body)


__all__ = [
    "AgentClient",
    "AgentError",
    "AgentRejectedError",
    "AgentUnavailableError",
    "AiohttpTransport",
    "HandleLife",
    "MockTransport",
    "Request",
    "Response",
    "RobotHandle",
    "RobotState",
    "RobotUnknownError",
    "Transport",
    "request_context",
    "summed_ack",
]
