"""The HTTP server's guards: the token, timeouts and bounds, strict JSON, and a quiet log.

What :func:`agent.app.create_app` puts in front of every handler, and how the agent is served:

Authentication (:func:`auth_middleware`)
    With a token, every route needs ``Authorization: Bearer <token>`` (the scheme in any case) except the
    canonical paths in ``app[PUBLIC_PATHS]`` (``/healthz``, ``/readyz``, ``/metrics``, ``/v1/openapi.json``: it
    describes the API, not the fleet). A route is guarded
    unless it is listed there, so a new endpoint (``/v1/override``) is safe by default; to open one
    (``/v1/openapi.json``), add its canonical path to the set before the app starts. Unknown paths are
    guarded too (401 without the token, 404 with it), so they reveal nothing.
Timeouts and bounds
    ``server.header_timeout_s``: a connection that has not sent a whole request head (or sits idle between
    requests) that long is closed (aiohttp's keep-alive timer, which also runs before the first request).
    ``server.body_timeout_s``: :func:`body_middleware` reads every body within it, or answers 408 (and
    the connection closes :data:`LINGER_S` later).
    ``server.max_connections``, held below ``RLIMIT_NOFILE``: :class:`ConnectionGuard` closes the
    connection that has waited longest outside a request when a new one would exceed it (so a health
    check gets through half-sent requests), or refuses the newcomer when every connection is in a request.
    ``server.max_long_polls``: the command long-poll answers 503 with ``Retry-After`` above it.
Bodies
    A body that cannot be read (a ``Content-Encoding`` that does not decode) is a 400 naming ``body``; a
    client that leaves mid-body is logged as ``client_disconnected`` (INFO), never as a failure of the
    delivery log.
JSON
    :func:`json_response` never writes a bare ``NaN`` or ``Infinity``: a non-finite number is ``null``.
Logging
    :func:`quiet_protocol_errors` turns aiohttp's tracebacks for malformed requests (over-long headers,
    bad request lines, undecodable bodies) into one WARNING line each: the client's fault, not the agent's.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import signal
import socket
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler, RequestPayloadError

from robotctl._json import json_text

from ._resources import connection_limit

LOG = logging.getLogger("robotctl.agent.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Canonical paths open without the token.
PUBLIC_PATHS = web.AppKey("public_paths", set[str])
DEFAULT_PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/v1/openapi.json"})
#: The label of every request whose path matches no route (one label, however many paths are probed).
UNMATCHED = "unmatched"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def error_response(status: int, field: str, problem: str, hint: str = "",
                   headers: dict[str, str] | None = None) -> web.Response:
    """The API's error body ``{error, field, hint}``."""
    text = f"{field}: {problem}" + (f"; {hint}" if hint else "")
    return json_response({"error": text, "field": field, "hint": hint}, status=status, headers=headers)


# -- JSON ---------------------------------------------------------------------------------------------
#: ``json.dumps(obj, separators=(",", ":"), allow_nan=False)`` without building an encoder per call (the
#: ack of every delivery is written with it)
_compact = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def dumps(obj: Any) -> str:
    """JSON text as RFC 8259 has it: a non-finite number is written ``null``, never ``Infinity``."""
    try:
        return _compact(obj)
    except (ValueError, TypeError):  # a non-finite number, or a numpy value: json_text cleans it
        return json_text(obj, compact=True)


def delivery_ack(ack: dict[str, Any]) -> bytes:
    """``dumps(ack).encode()`` of a delivery's ack as :meth:`agent.core.Agent.deliver` makes it (``accepted``,
    ``pages``, ``admitted``, ``lost``, ``t``, ``queue``, ``active`` in that order and, for one delivery from a
    robot, its ``state``), formatted directly: the JSON encoder cost a single delivery more than its log line.
    Another set of keys, or a non-finite ``t``, goes through :func:`dumps`."""
    t = ack.get("t")
    n = len(ack)
    if type(t) is float and t - t == 0.0 and (n == 7 or (n == 8 and "state" in ack)):
        try:
            text = (f'{{"accepted":{ack["accepted"]},"pages":{ack["pages"]},"admitted":{ack["admitted"]},'
                    f'"lost":{ack["lost"]},"t":{t!r},"queue":{ack["queue"]},"active":{ack["active"]}')
        except KeyError:  # another dict of as many keys
            return dumps(ack).encode()
        return (f'{text},"state":"{ack["state"]}"}}' if n == 8 else text + "}").encode()
    return dumps(ack).encode()


def json_response(data: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(text=dumps(data), status=status, headers=headers, content_type="application/json")


# -- labels -------------------------------------------------------------------------------------------
def endpoint_label(request: web.Request) -> str:
    """``METHOD /canonical/path`` of the route a request matched, or :data:`UNMATCHED`: a fixed set of labels
    for the metrics, however many paths and methods clients send."""
    route = request.match_info.route
    resource = route.resource
    if resource is None or request.method not in _METHODS:
        return UNMATCHED
    return f"{request.method} {resource.canonical}"


# -- authentication -----------------------------------------------------------------------------------
def bearer_credentials(header: str) -> bytes | None:
    """The credentials of an ``Authorization: Bearer <token>`` header (the scheme in any case), as bytes
    (a byte that is not ASCII stays itself), or None for another scheme."""
    scheme, _, credentials = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return credentials.strip().encode("utf-8", "surrogateescape")


def auth_middleware(*, token: str | None, on_refused: Callable[[web.Request], None] | None = None) -> Any:
    """Require the bearer ``token`` on every route but the app's :data:`PUBLIC_PATHS` (none without a token:
    the agent then runs only on loopback with ``server.insecure_loopback``)."""
    expected = token.encode("utf-8") if token else None

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if expected is None:
            return await handler(request)
        resource = request.match_info.route.resource
        if resource is not None and resource.canonical in request.app.get(PUBLIC_PATHS, DEFAULT_PUBLIC_PATHS):
            return await handler(request)
        got = bearer_credentials(request.headers.get("Authorization", ""))
        if got is None or not hmac.compare_digest(got, expected):
            if on_refused is not None:
                on_refused(request)
            return error_response(401, "Authorization", "is missing or wrong",
                                  "send the header Authorization: Bearer <server.token>",
                                  headers={"WWW-Authenticate": "Bearer"})
        return await handler(request)

    return middleware


# -- bodies -------------------------------------------------------------------------------------------
def _too_large(limit: int, declared: int) -> web.Response:
    resp = error_response(413, "body", f"declares Content-Length {declared}, more than server.max_body_bytes = "
                          f"{limit}", "send smaller batches")
    resp.force_close()  # the body is never read: the connection cannot carry another request
    return resp


def expect_handler(max_body_bytes: int) -> Callable[[web.Request], Coroutine[Any, Any, web.StreamResponse | None]]:
    """The routes' ``Expect:`` handler: ``100 Continue`` only for a body the agent would take; 413 at once for
    a declared ``Content-Length`` over ``max_body_bytes``, 417 for an expectation other than 100-continue."""

    async def handle(request: web.Request) -> web.StreamResponse | None:
        expect = request.headers.get("Expect", "")
        if expect.lower() != "100-continue":
            resp = error_response(417, "Expect", f"{expect!r} is not supported", "send Expect: 100-continue or none")
            resp.force_close()
            return resp
        declared = request.content_length
        if declared is not None and declared > max_body_bytes:
            return _too_large(max_body_bytes, declared)
        if request.version >= (1, 1):
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0
        return None

    return handle


def install_expect_handler(app: web.Application, max_body_bytes: int) -> None:
    """Put :func:`expect_handler` on every route of ``app`` (call it once the routes are added)."""
    handle = expect_handler(max_body_bytes)
    for route in app.router.routes():
        route._expect_handler = handle  # aiohttp has no setter (add_route takes it); every route gets it


def body_middleware(*, timeout_s: float, max_body_bytes: int | None = None) -> Any:
    """Read every request body within ``timeout_s`` before the handler runs (it then reads the cached bytes):
    413 at once for a declared ``Content-Length`` over ``max_body_bytes`` (nothing of it is waited for), 408
    when it does not arrive, 400 when it cannot be decoded; a client that leaves is logged, not failed."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        declared = request.content_length
        if max_body_bytes is not None and declared is not None and declared > max_body_bytes:
            return _too_large(max_body_bytes, declared)
        if request.body_exists:
            try:
                if request.content.is_eof():
                    await request.read()  # all of it has arrived (the common small body): nothing to wait for
                else:
                    async with asyncio.timeout(timeout_s):
                        await request.read()
            except TimeoutError:
                resp = error_response(408, "body", f"did not arrive within server.body_timeout_s = {timeout_s:g} s",
                                      "send the whole body at once")
                resp.force_close()
                return resp
            except (RequestPayloadError, HttpProcessingError) as exc:
                resp = error_response(400, "body", f"cannot be read ({_one_line(exc)})",
                                      "send JSON, compressed as its Content-Encoding says (or not at all)")
                resp.force_close()
                return resp
            except ConnectionError as exc:
                LOG.info("event=client_disconnected method=%s path=%s error=%s", request.method,
                         endpoint_label(request), exc)
                resp = error_response(400, "body", "the client went away before its body arrived")
                resp.force_close()
                return resp
        return await handler(request)

    return middleware


def _one_line(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return " ".join(str(text).split())


# -- connections ----------------------------------------------------------------------------------------
class ConnectionGuard:
    """At most ``limit`` open connections (:func:`~agent._resources.connection_limit` of
    ``server.max_connections``).

    :meth:`install` hooks the aiohttp server's connection bookkeeping; :attr:`middleware` marks the
    connections that are inside a request. When a new connection would exceed the limit, the oldest one
    that is not inside a request (a half-sent head, or idle between requests) is closed; when every other
    connection is inside a request (long-polls), the newcomer is.
    """

    def __init__(self, max_connections: int) -> None:
        self.limit = connection_limit(max_connections)
        self.closed = 0  # connections closed to stay within the limit
        self._open: dict[RequestHandler, None] = {}  # oldest first
        self._busy: set[RequestHandler] = set()

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def install(self, server: web.Server) -> None:
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: RequestHandler, transport: asyncio.Transport) -> None:
            made(handler, transport)
            self._open[handler] = None
            if len(self._open) > self.limit:
                self._make_room(handler)

        def connection_lost(handler: RequestHandler, exc: BaseException | None = None) -> None:
            self._open.pop(handler, None)
            self._busy.discard(handler)
            lost(handler, exc)

        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]

    def _make_room(self, newcomer: RequestHandler) -> None:
        victim = next((h for h in self._open if h not in self._busy and h is not newcomer), newcomer)
        self._open.pop(victim, None)
        self.closed += 1
        if self.closed == 1 or self.closed % 1000 == 0:
            LOG.warning("event=connection_limit limit=%d closed_total=%d closed=%s", self.limit, self.closed,
                        "newest" if victim is newcomer else "oldest_idle")
        victim.force_close()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        protocol = request.protocol
        self._busy.add(protocol)
        try:
            return await handler(request)
        finally:
            self._busy.discard(protocol)


class LongPollGate:
    """At most ``limit`` long-polls waiting at once (``server.max_long_polls``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.waiting = 0

    @contextlib.contextmanager
    def enter(self) -> Any:
        """``with gate.enter():`` around a long-poll; raises :class:`web.HTTPServiceUnavailable` when full."""
        if self.waiting >= self.limit:
            raise web.HTTPServiceUnavailable(
                text=dumps({"error": f"server: {self.limit} long-polls wait already (server.max_long_polls)",
                            "field": "server", "hint": "retry in a second"}),
                content_type="application/json", headers={"Retry-After": "1"})
        self.waiting += 1
        try:
            yield
        finally:
            self.waiting -= 1


# -- logging ------------------------------------------------------------------------------------------
class _ProtocolErrorFilter(logging.Filter):
    """aiohttp.server's records about a malformed request: one WARNING line, no traceback."""

    CLIENT_ERRORS = (HttpProcessingError, RequestPayloadError, ConnectionError)

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not isinstance(exc, self.CLIENT_ERRORS):
            return True
        cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else None
        record.msg = "event=bad_http_request error=%s"
        record.args = (_one_line(exc) + (f" ({_one_line(cause)})" if cause is not None else ""),)
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def quiet_protocol_errors() -> None:
    """Install the filter on ``aiohttp.server`` (once per process)."""
    logger = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _ProtocolErrorFilter) for f in logger.filters):
        logger.addFilter(_ProtocolErrorFilter())


# -- serving --------------------------------------------------------------------------------------------
#: After answering a request whose body did not all arrive (a 401, a 408), aiohttp reads and drops the rest
#: for this long before it closes the connection (its default, 10 s, let a stalled body hold a connection
#: that long after its 408).
LINGER_S = 1.0


def runner_for(app: web.Application, *, header_timeout_s: float, shutdown_timeout_s: float) -> web.AppRunner:
    """The app's runner with the header timeout (aiohttp's keep-alive timer), the shutdown timeout and a
    short lingering close (:data:`LINGER_S`)."""
    return web.AppRunner(app, handle_signals=False, access_log=None, keepalive_timeout=header_timeout_s,
                         shutdown_timeout=shutdown_timeout_s, lingering_time=LINGER_S)


def serve_forever(app: web.Application, sock: socket.socket, loop: asyncio.AbstractEventLoop, *,
                  guard: ConnectionGuard, header_timeout_s: float, shutdown_timeout_s: float) -> None:
    """Serve ``app`` on ``sock`` until SIGTERM or SIGINT, then shut down in order (stop listening, the app's
    ``on_shutdown``, open requests finish within ``shutdown_timeout_s``, the cleanup contexts)."""

    async def main() -> None:
        runner = runner_for(app, header_timeout_s=header_timeout_s, shutdown_timeout_s=shutdown_timeout_s)
        await runner.setup()
        guard.install(runner.server)  # type: ignore[arg-type]
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await web.SockSite(runner, sock).start()
            await stop.wait()
            LOG.info("event=stopping")
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await runner.cleanup()

    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(main())
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


__all__ = [
    "DEFAULT_PUBLIC_PATHS",
    "LINGER_S",
    "PUBLIC_PATHS",
    "UNMATCHED",
    "ConnectionGuard",
    "LongPollGate",
    "auth_middleware",
    "bearer_credentials",
    "body_middleware",
    "delivery_ack",
    "dumps",
    "endpoint_label",
    "error_response",
    "json_response",
    "quiet_protocol_errors",
    "runner_for",
    "serve_forever",
]
