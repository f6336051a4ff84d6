"""The HTTP sidecar: ``create_app`` wires the agent into an aiohttp application.

Endpoints (JSON, versioned under ``/v1``; bodies in :mod:`agent.api`):

==========================================  ===============================================================
``POST /v1/deliveries``                     one delivery or ``{"deliveries": [...]}``; acked once logged
``POST /v1/completions``                    pages indexed (service seconds and/or bytes)
``POST /v1/obsolete``                       pages dropped as stale
``POST /v1/given_up``                       pages the crawler gave up on (counted in the observed cost J)
``POST /v1/queue``                          the indexer's own count, to resynchronise
``POST /v1/robots``                         register a robot (id, rank or automatic, default state); the
                                            answer carries its ``robot_key`` once
``GET /v1/robots``                          the robots and their commands
``DELETE /v1/robots/{id}``                  deregister
``GET /v1/robots/{id}/command``             long-poll: ``?version=n&wait_s=t``; answers at once when the
                                            command's version differs from ``n``
``POST /v1/refit``                          refit now and answer with the outcome
``POST /v1/override``, ``GET /v1/override``  the override: pause control, pin a fleet size (for a duration),
                                            resume
``GET /v1/policy``                          the policy in force, its fit and predicted measures
``GET /v1/status``                          queue, robots, counters, observed measures, last refit, log
``GET /v1/actuation``, ``POST ...``          ``{"actuation": "command"|"advise"}``: whether the agent commands
                                            the robots or only advises (shadow mode); switching needs the token
``GET /healthz``, ``GET /readyz``           liveness; readiness (log open, not shutting down)
``GET /metrics``                            Prometheus exposition (:mod:`agent.metrics`)
==========================================  ===============================================================

Deprecated for one release (:data:`DEPRECATED_PATHS`): ``/v1/control`` (now ``/v1/override``, its view with
``mode`` for ``override``) and ``/v1/mode`` (now ``/v1/actuation``, ``mode`` for ``actuation``). They answer as
before, with a ``Deprecation: true`` header and a ``Link`` to the successor, and the first use of each is
logged (``event=deprecated_endpoint``).

Errors are JSON ``{"error", "field", "hint"}``: 400 for invalid input (it changes nothing), 401 without
the bearer token (every route but ``app[PUBLIC_PATHS]``: /healthz, /readyz, /metrics; see
:mod:`agent._http`), 403 without the robot's key (``X-Robot-Key``) on its command, re-registration or
deletion, 404 for an unknown robot or path, 405 for a method a route does not take, 408 for a body that
did not arrive within ``server.body_timeout_s``, 409 for a conflict (a rank already taken, another
client's robot), 413 for a body over ``server.max_body_bytes``, 503 when the delivery log cannot be
written or ``server.max_long_polls`` long-polls wait already (with ``Retry-After``).

Handlers parse and validate, call one public method of the :class:`~agent.core.Agent` (or the refit
loop), and respond; they never touch the agent's state. Resources are set up by one cleanup context
each, in dependency order (metrics registry, agent and its delivery log, log flusher, refit loop,
lease reaper) and torn down in reverse. On shutdown the
agent first tells every robot its default state (``on_shutdown``, which also ends open long-polls),
then the log is flushed and closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import itertools
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler

from robotctl import InputError

from ._http import (
    DEFAULT_PUBLIC_PATHS,
    PUBLIC_PATHS,
    ConnectionGuard,
    LongPollGate,
    auth_middleware,
    body_middleware,
    delivery_ack,
    endpoint_label,
    error_response,
    install_expect_handler,
    json_response,
    quiet_protocol_errors,
    runner_for,
    serve_forever,
)
from ._resources import check_config_memory
from .actuator import ConflictError, ForbiddenError
from .api import (
    NotFoundError,
    delivery_decoder,
    parse_actuation,
    parse_completions,
    parse_control,
    parse_delivery_body,
    parse_given_up,
    parse_json,
    parse_obsolete,
    parse_process,
    parse_queue,
    parse_registration,
    query_float,
    query_int,
)
from .clock import Clock, MonotonicClock, TaskScheduler, cancel_and_wait
from .compute import RefitInput, RefitOutcome, compute_refit
from .config import AgentConfig
from .core import Agent
from .log import LogWriteError
from .metrics import AgentMetrics
from .openapi import openapi_handler
from .refit import RefitLoop
from .revisit import install as install_revisit
from .views import control_view, mode_view
from .worker import RefitWorker

LOG = logging.getLogger("robotctl.agent.app")

CONFIG = web.AppKey("config", AgentConfig)
CLOCK = web.AppKey("clock", Clock)
REGISTRY = web.AppKey("registry", CollectorRegistry)
METRICS = web.AppKey("metrics", AgentMetrics)
AGENT = web.AppKey("agent", Agent)
REFIT = web.AppKey("refit", RefitLoop)
SCHEDULER = web.AppKey("scheduler", TaskScheduler)
GUARD = web.AppKey("guard", ConnectionGuard)
LONG_POLLS = web.AppKey("long_polls", LongPollGate)
#: The header a robot sends its key in (the ``robot_key`` its registration returned).
ROBOT_KEY_HEADER = "X-Robot-Key"

_request_ids = itertools.count(1)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """InputError -> 400, ForbiddenError -> 403, NotFoundError -> 404, ConflictError -> 409, a too large body
    -> 413, a failed write of the delivery log -> 503, all as JSON (other 4xx of the router are counted);
    anything else -> 500, logged once with the request id."""
    try:
        return await handler(request)
    except ConflictError as exc:
        _count_bad(request)
        return error_response(409, exc.field, exc.problem, exc.hint)
    except ForbiddenError as exc:
        _count_bad(request)
        return error_response(403, exc.field, exc.problem, exc.hint)
    except NotFoundError as exc:
        _count_bad(request)
        return error_response(404, exc.field, exc.problem, exc.hint)
    except InputError as exc:
        _count_bad(request)
        return error_response(400, exc.field, exc.problem, exc.hint)
    except web.HTTPRequestEntityTooLarge as exc:
        _count_bad(request)
        limit = request.app[CONFIG].server.max_body_bytes
        return error_response(413, "body", f"is larger than server.max_body_bytes = {limit} ({exc.text})",
                              "send smaller batches")
    except web.HTTPException as exc:
        if not 400 <= exc.status < 500:
            raise
        _count_bad(request)
        if isinstance(exc, web.HTTPMethodNotAllowed):
            allowed = ", ".join(sorted(exc.allowed_methods))
            return error_response(405, "method", f"{request.method} is not allowed here", f"use {allowed}",
                                  headers={"Allow": allowed})
        if isinstance(exc, web.HTTPNotFound):
            return error_response(404, "path", "names no endpoint", "see the endpoints in robotctl/agent/README.md")
        return error_response(exc.status, "request", exc.reason, exc.text or "")
    except LogWriteError as exc:
        # the log itself says so once per fault (event=log_unwritable), not once per refused request
        LOG.debug("event=log_write_failed request=%s path=%s error=%s", next(_request_ids),
                  endpoint_label(request), exc)
        return error_response(503, "log", f"the delivery log cannot be written ({exc.strerror or exc})",
                              "nothing was acknowledged; retry in a second (the agent retries by itself "
                              "and accepts again once log.dir is writable and has room)",
                              headers={"Retry-After": "1"})
    except asyncio.CancelledError:
        raise
    except Exception:
        rid = next(_request_ids)
        LOG.exception("event=request_failed request=%s method=%s path=%s", rid, request.method,
                      endpoint_label(request))
        return error_response(500, "server", f"internal error (request {rid})", "see the agent's log")


def _count_bad(request: web.Request) -> None:
    agent = request.app.get(AGENT)
    if agent is not None:
        agent.count_bad_request(endpoint_label(request))


def _robot_key(request: web.Request) -> str | None:
    return request.headers.get(ROBOT_KEY_HEADER)


# -- handlers ---------------------------------------------------------------------------------------
async def _post_deliveries(request: web.Request) -> web.Response:
    t0 = time.perf_counter()
    app = request.app
    agent = app[AGENT]
    items = parse_delivery_body(await request.read(), max_batch=app[CONFIG].server.max_batch,
                                registered=agent.robot_ids, allow_unregistered=app[CONFIG].robots.allow_unregistered)
    ack = agent.deliver(items)
    await agent.commit()
    app[METRICS].ack_seconds.observe(time.perf_counter() - t0)
    return web.Response(body=delivery_ack(ack), content_type="application/json")


async def _post_completions(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    items = parse_completions(parse_json(await request.read()),
                              max_batch=request.app[CONFIG].server.max_batch)
    ack = agent.complete(items)
    await agent.commit()
    return json_response(ack)


async def _post_obsolete(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    ack = agent.obsolete(parse_obsolete(parse_json(await request.read())))
    await agent.commit()
    return json_response(ack)


async def _post_given_up(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    ack = agent.given_up(parse_given_up(parse_json(await request.read())))
    await agent.commit()
    return json_response(ack)


async def _post_queue(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    ack = agent.set_queue(parse_queue(parse_json(await request.read()), capacity=request.app[CONFIG].capacity))
    await agent.commit()
    return json_response(ack)


async def _post_robots(request: web.Request) -> web.Response:
    agent = request.app[AGENT]
    body = await request.read()
    obj = parse_json(body) if body.strip() else {}
    rid, rank, default = parse_registration(obj, max_rank=agent.fleet.max_rank)
    return json_response(agent.register(rid, rank, default, _robot_key(request), parse_process(obj)))


async def _get_robots(request: web.Request) -> web.Response:
    return json_response(request.app[AGENT].fleet.robots_view())


async def _delete_robot(request: web.Request) -> web.Response:
    return json_response(request.app[AGENT].fleet.deregister(request.match_info["robot_id"], _robot_key(request)))


async def _get_command(request: web.Request) -> web.Response:
    """Long-poll for a robot's command: answers when its version differs from ``?version=`` or after
    ``?wait_s=`` (capped at server.long_poll_max_s and half the lease, so a robot always hears back
    within its lease)."""
    agent = request.app[AGENT]
    version = query_int("version", request.query.get("version"), default=-1, minimum=-1)
    wait_s = query_float("wait_s", request.query.get("wait_s"), default=agent.fleet.long_poll_cap())
    with request.app[LONG_POLLS].enter():
        view = await agent.fleet.wait_command(request.match_info["robot_id"], version, wait_s, _robot_key(request))
    return json_response(view)


async def _post_refit(request: web.Request) -> web.Response:
    outcome = await request.app[REFIT].refit("request")
    return json_response({"adopted": outcome.success, "stage": outcome.stage.value,
                              "message": outcome.message, "deliveries": outcome.deliveries,
                              "fit_seconds": outcome.fit_seconds, "solve_seconds": outcome.solve_seconds,
                              "policy": request.app[AGENT].policy.to_dict()})


async def _post_override(request: web.Request) -> web.Response:
    """Pause control, pin a fleet size or resume (robotctl/agent/override.py); guarded by the token like every
    POST."""
    agent = request.app[AGENT]
    req = parse_control(parse_json(await request.read()), max_robots=request.app[CONFIG].robots.n)
    view = agent.set_override(req.action, req.robots, req.duration_s, req.reason)
    await agent.commit()
    return json_response(view)


async def _get_override(request: web.Request) -> web.Response:
    return json_response(request.app[AGENT].override_view())


async def _post_control(request: web.Request) -> web.Response:
    """Deprecated ``POST /v1/control``: :func:`_post_override` with the old view (``mode`` for ``override``)."""
    agent = request.app[AGENT]
    req = parse_control(parse_json(await request.read()), max_robots=request.app[CONFIG].robots.n)
    view = agent.set_override(req.action, req.robots, req.duration_s, req.reason)
    await agent.commit()
    return json_response(control_view(view))


async def _get_control(request: web.Request) -> web.Response:
    """Deprecated ``GET /v1/control``: :func:`_get_override` with the old view."""
    return json_response(control_view(request.app[AGENT].override_view()))


async def _get_policy(request: web.Request) -> web.Response:
    return json_response(request.app[AGENT].policy_view())


async def _get_status(request: web.Request) -> web.Response:
    d = request.app[AGENT].status()
    d["refit"] = request.app[REFIT].record.to_dict()
    return json_response(d)


def _actuation_locked(request: web.Request) -> web.Response | None:
    """A 403 unless ``server.token`` is set: with no token anyone who reaches the port could take the fleet
    over or let it go."""
    if request.app[CONFIG].server.token is not None:
        return None
    _count_bad(request)
    return error_response(403, "server.token", "is not set, so the actuation cannot be switched at run time",
                          "set server.token (ROBOTCTL_SERVER_TOKEN) and send it as a bearer token, or restart "
                          "with robots.actuation set")


async def _get_actuation(request: web.Request) -> web.Response:
    return json_response(request.app[AGENT].fleet.actuation_view())


async def _post_actuation(request: web.Request) -> web.Response:
    """Switch between command and advise (shadow mode); refused (403) unless ``server.token`` is set."""
    refused = _actuation_locked(request)
    if refused is not None:
        return refused
    actuation = parse_actuation(parse_json(await request.read()))
    return json_response(request.app[AGENT].set_actuation(actuation))


async def _get_mode(request: web.Request) -> web.Response:
    """Deprecated ``GET /v1/mode``: :func:`_get_actuation` with the old view (``mode`` for ``actuation``)."""
    return json_response(mode_view(request.app[AGENT].fleet.actuation_view()))


async def _post_mode(request: web.Request) -> web.Response:
    """Deprecated ``POST /v1/mode`` (body ``{"mode": ...}``): :func:`_post_actuation` with the old view."""
    refused = _actuation_locked(request)
    if refused is not None:
        return refused
    actuation = parse_actuation(parse_json(await request.read()), key="mode")
    return json_response(mode_view(request.app[AGENT].set_actuation(actuation)))


#: Deprecated paths and the paths that replace them: they answer for one release, with a ``Deprecation``
#: header and a ``Link`` to the successor, and the agent logs their first use (docs/ARCHITECTURE.md).
DEPRECATED_PATHS = {"/v1/mode": "/v1/actuation", "/v1/control": "/v1/override"}


def _deprecated(path: str, handler: Callable[[web.Request], Awaitable[web.Response]]
                ) -> Callable[[web.Request], Awaitable[web.Response]]:
    successor = DEPRECATED_PATHS[path]
    warned: set[str] = set()

    async def answer(request: web.Request) -> web.Response:
        if request.method not in warned:
            warned.add(request.method)
            LOG.warning("event=deprecated_endpoint path=%s method=%s use=%s", path, request.method, successor)
        response = await handler(request)
        response.headers["Deprecation"] = "true"
        response.headers["Link"] = f'<{successor}>; rel="successor-version"'
        return response

    answer.__name__ = answer.__qualname__ = handler.__name__
    return answer


async def _healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    agent = request.app.get(AGENT)
    if agent is None or not agent.ready:
        return json_response({"status": "not ready"}, status=503)
    fault = agent.log_fault()
    if fault is not None:  # deliveries are answered 503 now: so is readiness
        return json_response({"status": "not ready", "log": f"the delivery log cannot be written ({fault})"},
                             status=503)
    return json_response({"status": "ready"})


# -- cleanup contexts, in dependency order -------------------------------------------------------------
async def _metrics_ctx(app: web.Application) -> AsyncIterator[None]:
    metrics = app[METRICS]
    collector = metrics.attach(app[AGENT], lambda: app[REFIT].record)
    yield
    metrics.registry.unregister(collector)


async def _agent_ctx(app: web.Application) -> AsyncIterator[None]:
    agent = app[AGENT]
    agent.open()
    policy = agent.policy.policy
    LOG.info("event=agent_open dir=%s queue=%d policy=%s", agent.state_dir, agent.queue_length, policy)
    yield
    await app[SCHEDULER].close()
    await agent.close()
    LOG.info("event=agent_closed %s", " ".join(f"{k}={v}" for k, v in agent.log_stats().__dict__.items()))


async def _flusher_ctx(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(app[AGENT].run_log_flusher())
    yield
    await cancel_and_wait(task)


async def _refit_ctx(app: web.Application) -> AsyncIterator[None]:
    loop = app[REFIT]
    # probe only when starting from the configured policy, not from a restored fitted one
    task = asyncio.create_task(loop.run(probe=app[AGENT].policy.source == "startup"))
    yield
    await cancel_and_wait(task)
    loop.shutdown_executor()


async def _reaper_ctx(app: web.Application) -> AsyncIterator[None]:
    agent = app[AGENT]
    clock = app[CLOCK]

    expire = app[CONFIG].robots.on_lease_lost == "deregister"

    async def reap() -> None:
        lost: dict[str, str] = {}
        while True:
            await clock.sleep(agent.fleet.lease_s / 2)
            if expire:
                for rid in agent.fleet.expire_lost(clock.now()):
                    LOG.warning("event=robot_expired robot=%s reason=lease_lost", rid)
                    lost.pop(rid, None)
            current = agent.fleet.lost_robots(clock.now())
            for rid in sorted(current.keys() - lost.keys()):
                LOG.warning("event=robot_lease_lost robot=%s falls_back_to=%s", rid, current[rid])
            for rid in sorted(lost.keys() - current.keys()):
                LOG.info("event=robot_back robot=%s", rid)
            lost = current

    task = asyncio.create_task(reap())
    yield
    await cancel_and_wait(task)


async def _freeze_heap(app: web.Application) -> None:
    """After start-up, move every object to the collector's permanent generation (robotctl serve only): the
    modules and state loaded so far are never garbage, and a full collection then need not walk them
    (one took 84 ms on the event loop, a p99 outlier, without this)."""
    gc.collect()
    gc.freeze()


async def _on_shutdown(app: web.Application) -> None:
    told = app[AGENT].fleet.shutdown_robots()
    LOG.info("event=shutdown robots_told_default=%d", told)


def create_app(config: AgentConfig, *, registry: CollectorRegistry | None = None, clock: Clock | None = None,
               compute: Callable[[RefitInput], RefitOutcome] | None = None, own_process: bool = False
               ) -> web.Application:
    """The agent as an aiohttp application.

    Parameters
    ----------
    config : AgentConfig
    registry : CollectorRegistry, optional
        Where the metrics go; a fresh one by default (never the global registry).
    clock : Clock, optional
        The agent's clock; :class:`MonotonicClock` by default. Tests pass a :class:`ManualClock`.
    compute : callable, optional
        ``RefitInput -> RefitOutcome``; :func:`agent.refit.compute_refit` by default (tests inject
        failures here; it must be picklable with ``refit.executor: process``).
    own_process : bool
        True when the agent is the program (``robotctl serve``): ``refit.executor: auto`` then means a
        worker process; inside another program (``run_in_process``) it means a thread, because a spawned
        worker re-imports the program's main module.
    """
    config.server.check_exposure()
    check_config_memory(config)
    quiet_protocol_errors()
    clock = clock if clock is not None else MonotonicClock()
    registry = registry if registry is not None else CollectorRegistry()
    guard = ConnectionGuard(config.server.max_connections)
    app = web.Application(client_max_size=config.server.max_body_bytes,
                          middlewares=[guard.middleware, error_middleware,
                                       auth_middleware(token=config.server.token, on_refused=_count_bad),
                                       body_middleware(timeout_s=config.server.body_timeout_s,
                                                       max_body_bytes=config.server.max_body_bytes)])
    app[PUBLIC_PATHS] = set(DEFAULT_PUBLIC_PATHS)
    app[GUARD] = guard
    app[LONG_POLLS] = LongPollGate(config.server.max_long_polls)
    app[CONFIG] = config
    app[CLOCK] = clock
    app[REGISTRY] = registry
    metrics = AgentMetrics(registry)
    app[METRICS] = metrics
    scheduler = TaskScheduler(clock)
    app[SCHEDULER] = scheduler
    agent = Agent(config, clock, scheduler=scheduler)
    app[AGENT] = agent
    delivery_decoder()  # built now, not on the event loop at the first delivery
    rc = config.refit
    executor = rc.executor if rc.executor != "auto" else ("process" if own_process else "thread")
    worker = RefitWorker(compute if compute is not None else compute_refit, kind=executor, timeout_s=rc.timeout_s)
    app[REFIT] = RefitLoop.for_agent(config, clock=clock, target=agent, worker=worker,
                                     observe=metrics.observe_refit)
    app.cleanup_ctx.extend([_metrics_ctx, _agent_ctx, _flusher_ctx, _refit_ctx, _reaper_ctx])
    app.on_shutdown.append(_on_shutdown)
    if own_process:
        app.on_startup.append(_freeze_heap)
    r = app.router
    r.add_post("/v1/deliveries", _post_deliveries)
    r.add_post("/v1/completions", _post_completions)
    r.add_post("/v1/obsolete", _post_obsolete)
    r.add_post("/v1/given_up", _post_given_up)
    r.add_post("/v1/queue", _post_queue)
    r.add_post("/v1/robots", _post_robots)
    r.add_get("/v1/robots", _get_robots)
    r.add_delete("/v1/robots/{robot_id}", _delete_robot)
    r.add_get("/v1/robots/{robot_id}/command", _get_command)
    r.add_post("/v1/refit", _post_refit)
    r.add_post("/v1/override", _post_override)
    r.add_get("/v1/override", _get_override)
    r.add_post("/v1/control", _deprecated("/v1/control", _post_control))
    r.add_get("/v1/control", _deprecated("/v1/control", _get_control))
    r.add_get("/v1/policy", _get_policy)
    r.add_get("/v1/status", _get_status)
    r.add_get("/v1/openapi.json", openapi_handler)
    r.add_get("/v1/actuation", _get_actuation)
    r.add_post("/v1/actuation", _post_actuation)
    r.add_get("/v1/mode", _deprecated("/v1/mode", _get_mode))
    r.add_post("/v1/mode", _deprecated("/v1/mode", _post_mode))
    r.add_get("/healthz", _healthz)
    r.add_get("/readyz", _readyz)
    r.add_get("/metrics", make_aiohttp_handler(registry))
    install_revisit(app, config, clock, agent.robot_ids)  # revisit.pages set: /v1/robots/{id}/next, /v1/revisit
    install_expect_handler(app, config.server.max_body_bytes)  # no "100 Continue" to a body that is refused
    return app


def base_url_of(runner: web.BaseRunner) -> str:
    """``http://host:port`` of the first address a runner listens on."""
    host, port = runner.addresses[0][:2]
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


@contextlib.asynccontextmanager
async def run_in_process(config: AgentConfig, *, clock: Clock | None = None,
                         registry: CollectorRegistry | None = None,
                         compute: Callable[[RefitInput], RefitOutcome] | None = None,
                         ) -> AsyncIterator[tuple[str, web.Application]]:
    """Run the agent inside the current event loop (a Python crawler's own loop, or a test).

    ``async with run_in_process(config) as (base_url, app):`` listens on ``server.host`` and
    ``server.port`` (0 picks a free port; ``base_url`` has the real one) and shuts down in order on
    exit: stop listening, robots told their default, log flushed and closed.
    """
    app = create_app(config, registry=registry, clock=clock, compute=compute)
    runner = runner_for(app, header_timeout_s=config.server.header_timeout_s,
                        shutdown_timeout_s=config.server.shutdown_timeout_s)
    await runner.setup()
    app[GUARD].install(runner.server)  # type: ignore[arg-type]
    try:
        site = web.TCPSite(runner, config.server.host, config.server.port)
        await site.start()
        yield base_url_of(runner), app
    finally:
        await runner.cleanup()


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket (port 0 picks a free one), so the real address is known before serving.

    Raises
    ------
    InputError
        ``server.host`` that does not resolve or is not an address of this machine, ``server.port`` in use
        or privileged.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise InputError("server.host", f"{host!r} cannot be resolved ({getattr(exc, 'strerror', None) or exc})",
                         "give an address of this machine, e.g. 127.0.0.1 or 0.0.0.0") from exc
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise InputError("server.port", f"{port} on {host} is in use by another process",
                             "stop it, or choose another port (0 picks a free one)") from exc
        if exc.errno == errno.EACCES:
            raise InputError("server.port", f"{port} needs privileges to bind", "use a port above 1023") from exc
        raise InputError("server.host", f"{host} cannot be bound ({exc.strerror})",
                         "give an address of this machine, e.g. 127.0.0.1 or 0.0.0.0") from exc
    sock.setblocking(False)
    return sock


def new_event_loop(kind: str = "auto") -> asyncio.AbstractEventLoop:
    """uvloop's event loop (``auto`` when it is installed, or ``uvloop``), else asyncio's."""
    if kind in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError as exc:
            if kind == "uvloop":
                raise InputError("server.event_loop", "is uvloop, which is not installed",
                                 "pip install uvloop, or use auto or asyncio") from exc
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def serve(config: AgentConfig, *, announce: Callable[[str], None] | None = None) -> None:
    """Run the sidecar until SIGTERM or SIGINT (``robotctl serve``), then shut down gracefully."""
    loop = new_event_loop(config.server.event_loop)
    sock = bind_socket(config.server.host, config.server.port)
    host, port = sock.getsockname()[:2]
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    if announce is not None:
        announce(url)
    LOG.info("event=listening url=%s loop=%s", url, type(loop).__module__)
    app = create_app(config, own_process=True)
    serve_forever(app, sock, loop, guard=app[GUARD], header_timeout_s=config.server.header_timeout_s,
                  shutdown_timeout_s=config.server.shutdown_timeout_s)


__all__ = [
    "AGENT",
    "CLOCK",
    "CONFIG",
    "DEPRECATED_PATHS",
    "GUARD",
    "LONG_POLLS",
    "METRICS",
    "PUBLIC_PATHS",
    "REFIT",
    "REGISTRY",
    "ROBOT_KEY_HEADER",
    "SCHEDULER",
    "auth_middleware",
    "base_url_of",
    "bind_socket",
    "create_app",
    "error_middleware",
    "new_event_loop",
    "run_in_process",
    "serve",
]
