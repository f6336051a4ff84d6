"""The Python client: requests over the transport seam, error translation, robot handles (long-poll,
permit, lease loss, re-registration), and the real agent in the same event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from robotctl.agent.app import AGENT, run_in_process
from robotctl.agent.client import (
    AgentClient,
    AgentRejectedError,
    AgentUnavailableError,
    MockTransport,
    Request,
    Response,
    RobotState,
    RobotUnknownError,
    request_context,
)
from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig


async def test_requests_go_through_the_transport_with_the_token() -> None:
    def handler(req: Request) -> Response:
        return Response(200, {"path": req.path, "json": req.json, "auth": req.headers.get("Authorization")})

    transport = MockTransport(handler)
    async with AgentClient("http://agent", token="t", transport=transport) as client:
        ack = await client.deliver("r1", pages=3, bytes=10, client_time=1.5)
        assert ack == {"path": "/v1/deliveries", "auth": "Bearer t",
                       "json": {"robot": "r1", "pages": 3, "bytes": 10, "client_time": 1.5}}
        await client.complete(2, service_s=0.5)
        await client.obsolete(1)
        await client.given_up(2)
        await client.set_queue(4)
    assert [(r.method, r.path) for r in transport.requests] == [
        ("POST", "/v1/deliveries"), ("POST", "/v1/completions"), ("POST", "/v1/obsolete"), ("POST", "/v1/given_up"),
        ("POST", "/v1/queue")]
    assert transport.requests[3].json == {"pages": 2} and transport.requests[4].json == {"length": 4}


async def test_deliver_many_sends_batches_and_sums_the_acks() -> None:
    batches: list[int] = []

    def handler(req: Request) -> Response:
        items = req.json["deliveries"]
        batches.append(len(items))
        return Response(200, {"accepted": len(items), "pages": len(items), "admitted": len(items), "lost": 0,
                              "queue": 7, "active": 2, "t": 1.0})

    client = AgentClient("http://agent", transport=MockTransport(handler), batch_limit=4)
    total = await client.deliver_many([{"robot": "r1"}] * 10)
    assert batches == [4, 4, 2]
    assert total["accepted"] == 10 and total["queue"] == 7
    await client.aclose()
    with pytest.raises(RuntimeError, match="has been closed"):
        await client.status()


async def test_complete_many_sends_batches_and_sums_the_acks() -> None:
    batches: list[int] = []

    def handler(req: Request) -> Response:
        assert req.path == "/v1/completions"
        items = req.json["completions"]
        batches.append(len(items))
        return Response(200, {"accepted": len(items), "pages": 2 * len(items), "removed": len(items),
                              "unmatched": len(items), "queue": 0, "active": 1, "t": 2.0})

    client = AgentClient("http://agent", transport=MockTransport(handler), batch_limit=3)
    total = await client.complete_many([{"pages": 2, "service_s": 0.1}] * 7)
    assert batches == [3, 3, 1]
    assert total == {"accepted": 7, "pages": 14, "removed": 7, "unmatched": 7, "t": 2.0, "queue": 0, "active": 1}
    await client.aclose()


@pytest.mark.parametrize(("status", "exc"), [(400, AgentRejectedError), (401, AgentRejectedError),
                                             (404, RobotUnknownError), (409, AgentRejectedError),
                                             (500, AgentUnavailableError), (503, AgentUnavailableError)])
async def test_error_statuses_map_to_exceptions(status: int, exc: type[Exception]) -> None:
    body = {"error": "pages: must be >= 1, got 0; send an integer >= 1", "field": "pages", "hint": "send an integer"}
    client = AgentClient("http://agent", transport=MockTransport(lambda req: Response(status, body)))
    with pytest.raises(exc) as info:
        await client.deliver("r1", pages=0)
    if isinstance(info.value, AgentRejectedError):
        assert info.value.status == status and info.value.field == "pages" and info.value.hint


def test_foreign_exceptions_are_translated_once_with_url_and_robot() -> None:
    with pytest.raises(AgentUnavailableError, match=r"http://a/x \(robot r7\): ClientConnectionError") as info, \
            request_context("http://a/x", "r7"):
        raise aiohttp.ClientConnectionError("refused")
    assert isinstance(info.value.__cause__, aiohttp.ClientConnectionError)
    with pytest.raises(AgentUnavailableError, match="no answer in time"), request_context("http://a/x"):
        raise TimeoutError


class FakeAgent:
    """A scripted agent behind MockTransport: one robot's command, long-polls on a manual clock."""

    def __init__(self, clock: ManualClock, lease_s: float = 10.0) -> None:
        self.clock = clock
        self.lease_s = lease_s
        self.state = "parked"
        self.version = 1
        self.changed = asyncio.Event()
        self.down = False
        self.known = True
        self.registrations = 0
        self.forget_on_register = False

    def set(self, state: str) -> None:
        self.state, self.version = state, self.version + 1
        self.changed.set()
        self.changed = asyncio.Event()

    def view(self) -> dict[str, Any]:
        return {"robot": "r1", "rank": 1, "slot": 1, "state": self.state, "version": self.version,
                "lease_s": self.lease_s, "reason": "test"}

    async def __call__(self, req: Request) -> Response:
        if self.down:
            await asyncio.Event().wait()  # a partition: no answer ever
        if req.path == "/v1/robots" and req.method == "POST":
            self.registrations += 1
            self.known = not self.forget_on_register
            return Response(200, self.view())
        if not self.known:
            return Response(404, {"error": "robot: 'r1' is not registered", "field": "robot", "hint": "register"})
        if req.path.endswith("/command"):
            if int(req.params["version"]) == self.version:
                changed = asyncio.ensure_future(self.changed.wait())
                sleeper = asyncio.ensure_future(self.clock.sleep(float(req.params["wait_s"])))
                await asyncio.wait({changed, sleeper}, return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
                sleeper.cancel()
            return Response(200, self.view())
        return Response(200, {})


async def _until(cond: Callable[[], bool]) -> None:
    for _ in range(2000):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def test_permit_waits_while_parked_and_passes_when_resumed() -> None:
    clock = ManualClock(0.0)
    fake = FakeAgent(clock)
    client = AgentClient("http://agent", transport=MockTransport(fake), clock=clock)
    robot = await client.register_robot("r1")
    assert robot.state is RobotState.PARKED
    entered = asyncio.Event()

    async def fetch() -> None:
        async with robot.permit():
            entered.set()

    task = asyncio.create_task(fetch())
    await ManualClock.settle(20)
    assert not entered.is_set()
    fake.set("active")
    await _until(entered.is_set)
    assert robot.state is RobotState.ACTIVE
    await task
    await client.aclose()


@pytest.mark.parametrize(("default", "may_fetch"), [("active", True), ("parked", False)])
async def test_lease_loss_falls_back_to_the_default_state(default: str, may_fetch: bool) -> None:
    clock = ManualClock(0.0)
    fake = FakeAgent(clock, lease_s=10.0)
    fake.state = "active" if default == "parked" else "parked"
    client = AgentClient("http://agent", transport=MockTransport(fake), clock=clock)
    robot = await client.register_robot("r1", default_state=default)
    await ManualClock.settle(20)
    fake.down = True
    clock.advance(5.0)  # the pending long-poll answers at t = 5, the next one hangs
    await ManualClock.settle(20)
    clock.advance(9.0)  # t = 14: less than a lease since the last answer
    await ManualClock.settle(20)
    assert robot.state is not RobotState.LEASE_LOST
    clock.advance(1.5)  # t = 15.5: more than a lease without an answer
    await _until(lambda: robot.state is RobotState.LEASE_LOST)
    assert robot.may_fetch is may_fetch
    fake.down = False
    for _ in range(50):  # back-off sleeps on the clock until the agent answers again
        clock.advance(1.0)
        await ManualClock.settle(5)
        if robot.state is not RobotState.LEASE_LOST:
            break
    assert robot.state.value == fake.state
    await client.aclose()


async def test_a_forgotten_robot_registers_again() -> None:
    clock = ManualClock(0.0)
    fake = FakeAgent(clock)
    client = AgentClient("http://agent", transport=MockTransport(fake), clock=clock)
    robot = await client.register_robot("r1")
    fake.known = False
    fake.set("active")  # answers the pending poll; the next one gets a 404
    await _until(lambda: fake.registrations == 2)
    await _until(lambda: robot.state is RobotState.ACTIVE)
    await robot.close(deregister=False)
    with pytest.raises(RuntimeError, match="handle has been closed"):
        async with robot.permit():
            pass
    await client.aclose()


async def test_with_the_real_agent_in_the_same_loop(tmp_path: Any) -> None:
    cfg = AgentConfig.from_dict({"server": {"port": 0, "insecure_loopback": True}, "queue": {"capacity": 3},
                                 "robots": {"count": 2},
                                 "policy": {"startup": [2, 2, 1, 1]}, "log": {"dir": str(tmp_path)}})
    async with run_in_process(cfg) as (url, app), AgentClient(url) as client:
        r1 = await client.register_robot("r1")
        r2 = await client.register_robot()  # automatic id and rank
        assert (r1.rank, r2.rank, r2.robot_id) == (1, 2, "robot-2")
        async with r2.permit():
            ack = await client.deliver(r2.robot_id, pages=2)
        assert (ack["queue"], ack["active"]) == (2, 1)
        await _until_real(lambda: r2.state is RobotState.PARKED)
        assert r1.state is RobotState.ACTIVE
        await client.complete(2, service_s=1.0)
        await _until_real(lambda: r2.state is RobotState.ACTIVE)
        assert (await client.status())["queue"]["length"] == 0
        assert (await client.policy())["robots_at_level"] == [2, 2, 1, 1]
        await r2.close()
        assert list(app[AGENT].actuator.robots) == ["r1"]  # closing deregistered it
        with pytest.raises(AgentRejectedError) as info:
            await client.deliver("nobody")
        assert info.value.status == 400 and info.value.field == "robot"


async def _until_real(cond: Callable[[], bool]) -> None:
    """Wait for long-poll answers over real sockets (a hang guard, not a timing check)."""
    async def wait() -> None:
        while not cond():
            await asyncio.sleep(0.001)

    await asyncio.wait_for(wait(), timeout=20.0)


async def test_more_robots_than_aiohttps_default_connection_limit(tmp_path: Any) -> None:
    cfg = AgentConfig.from_dict({"server": {"port": 0, "insecure_loopback": True}, "queue": {"capacity": 3},
                                 "robots": {"count": 120},
                                 "log": {"dir": str(tmp_path)}})
    async with run_in_process(cfg) as (url, app), AgentClient(url) as client:
        robots = [await client.register_robot() for _ in range(120)]
        # every robot has its long-poll open on the agent
        await _until_real(lambda: sum(rb.polling for rb in app[AGENT].actuator.robots.values()) == 120)
        ack = await asyncio.wait_for(client.deliver(robots[-1].robot_id), timeout=20.0)
        assert ack["accepted"] == 1


# -- issue 11, finding 8: the robot client under a dead or frozen agent ---------------------------------
class DeadAgent:
    """Registers, then (once ``down``) refuses every connection at once, as a dead agent's port does;
    with ``frozen`` every request hangs instead."""

    def __init__(self, clock: ManualClock, lease_s: float = 10.0) -> None:
        self.clock = clock
        self.lease_s = lease_s
        self.down = False
        self.frozen = False
        self.registered = 0

    async def __call__(self, req: Request) -> Response:
        if self.frozen:
            await asyncio.Event().wait()
        if req.path == "/v1/robots" and req.method == "POST":
            self.registered += 1
            return Response(200, {"robot": f"r{self.registered}", "rank": self.registered, "state": "parked",
                                  "version": 1, "lease_s": self.lease_s})
        if self.down:
            raise AgentUnavailableError("http://agent: ClientConnectorError: connection refused")
        if req.path.endswith("/command"):  # an alive agent with nothing to say: answers after wait_s
            await self.clock.sleep(float(req.params["wait_s"]))
            return Response(200, {"robot": "r1", "rank": 1, "state": "parked", "version": 1,
                                  "lease_s": self.lease_s})
        return Response(200, {})


async def test_the_fallback_comes_exactly_at_the_lease_when_the_agent_refuses_connections() -> None:
    clock = ManualClock(0.0)
    dead = DeadAgent(clock, lease_s=10.0)
    client = AgentClient("http://agent", transport=MockTransport(dead), clock=clock)
    robot = await client.register_robot("r1", default_state="active")
    await ManualClock.settle(10)
    dead.down = True
    clock.advance(5.0)  # the long-poll is answered at half the lease; from then on every poll is refused
    await ManualClock.settle(10)
    flipped_at = None
    while clock.now() < 30.0:  # step from one sleeper's deadline to the next, as time would pass
        deadline = clock.next_deadline
        assert deadline is not None
        clock.set(max(deadline, clock.now()))
        await ManualClock.settle(10)
        if robot.state is RobotState.LEASE_LOST:
            flipped_at = clock.now()
            break
    # the last answer came at t = 5: the lease ends at t = 15, not a back-off later (15.65 before)
    assert flipped_at == 15.0
    await client.aclose()


async def test_close_without_deregistering_leaves_no_task_behind() -> None:
    clock = ManualClock(0.0)
    dead = DeadAgent(clock)
    client = AgentClient("http://agent", transport=MockTransport(dead), clock=clock)
    before = asyncio.all_tasks()
    robot = await client.register_robot("r1")
    await ManualClock.settle(10)
    await robot.close(deregister=False)
    await ManualClock.settle(5)
    left = {t for t in asyncio.all_tasks() - before if not t.done()}
    assert left == set(), left
    await client.aclose()


async def test_aclose_against_a_frozen_agent_is_bounded_concurrent_and_quiet() -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
    try:
        clock = ManualClock(0.0)
        dead = DeadAgent(clock)
        client = AgentClient("http://agent", transport=MockTransport(dead), clock=clock)
        robots = [await client.register_robot() for _ in range(3)]
        await ManualClock.settle(10)
        dead.frozen = True
        closing = asyncio.create_task(client.aclose())
        await ManualClock.settle(50)
        assert not closing.done()  # every DELETE hangs on the frozen agent ...
        clock.advance(5.0)  # ... until the one close deadline (close_timeout_s) for all of them together
        await asyncio.wait_for(closing, timeout=2.0)
        assert all(r.state is not None for r in robots)
        del robots, closing
        import gc

        gc.collect()
        await ManualClock.settle(5)
        assert errors == []
    finally:
        loop.set_exception_handler(None)


async def test_a_restarted_robot_gets_its_id_back_once_the_old_lease_runs_out(tmp_path: Any) -> None:
    """Robot keys (issue 11, finding 1): the id of a robot whose process died (and its key with it) is
    another client's until its lease runs out; register_robot waits for that instead of failing."""
    clock = ManualClock(1000.0)
    cfg = AgentConfig.from_dict({"server": {"port": 0, "insecure_loopback": True}, "queue": {"capacity": 3},
                                 "robots": {"count": 2, "lease_s": 5.0}, "log": {"dir": str(tmp_path)}})
    async with run_in_process(cfg, clock=clock) as (url, app):
        first = AgentClient(url, clock=clock)
        old = await first.register_robot("r1")
        await old.close(deregister=False)  # the process dies: no deregistration, its key is gone
        await first.aclose()
        second = AgentClient(url, clock=clock)
        registering = asyncio.create_task(second.register_robot("r1"))
        await _until_real(lambda: clock.next_deadline is not None and clock.next_deadline <= clock.now() + 1.0)
        assert not registering.done()  # refused while the old lease holds
        for _ in range(8):
            clock.advance(1.0)
            await asyncio.sleep(0.05)
            if registering.done():
                break
        robot = await registering
        assert robot.robot_id == "r1" and list(app[AGENT].robot_ids) == ["r1"]
        await second.aclose()
        assert list(app[AGENT].robot_ids) == []  # the new key deregistered it


async def test_a_robot_id_with_a_slash_is_one_path_segment_polled_and_deregistered(tmp_path: Any) -> None:
    """Issue 23, defect 8: ``team/1`` used to poll ``/v1/robots/team/1/command`` (404), re-register in a
    tight loop and never deregister."""
    cfg = AgentConfig.from_dict({"server": {"port": 0, "insecure_loopback": True}, "queue": {"capacity": 3},
                                 "robots": {"count": 2}, "log": {"dir": str(tmp_path)}})
    async with run_in_process(cfg) as (url, app), AgentClient(url) as client:
        robot = await client.register_robot("team/1", poll_wait_s=0.05)
        await _until_real(lambda: robot.polls >= 3)
        await asyncio.sleep(0.3)
        registrations = app[AGENT].totals.bad_requests
        assert not registrations, registrations  # no 404 from a wrong path
        assert robot.polls >= 3
        await robot.close()
        assert list(app[AGENT].actuator.robots) == []


async def test_re_registration_backs_off_when_the_robot_stays_unknown() -> None:
    clock = ManualClock(0.0)
    fake = FakeAgent(clock)
    client = AgentClient("http://agent", transport=MockTransport(fake), clock=clock)
    robot = await client.register_robot("r1")
    fake.known = False
    fake.forget_on_register = True  # every registration is forgotten again before the next poll
    fake.set("active")
    for _ in range(200):
        await asyncio.sleep(0)
    assert fake.registrations < 10  # backs off (the clock is manual: a sleep does not pass by itself)
    await robot.close(deregister=False)
    await client.aclose()
