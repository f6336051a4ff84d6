"""Several crawler processes on one agent (issue 29): robots that name their process get ranks dealt
round-robin over the processes, so any mode spreads its active robots across them; with
``robots.on_lease_lost: deregister`` a process that stops polling loses its robots one lease later while
the others go on."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotctl.agent.actuator import Actuator, Command, ConflictError
from robotctl.agent.app import AGENT, run_in_process
from robotctl.agent.client import AgentClient
from robotctl.agent.config import AgentConfig
from robotctl.model import InputError


def _active_by_process(act: Actuator) -> Counter[str]:
    return Counter(r.process or "" for r in act.robots.values() if r.command is Command.ACTIVE)


def test_ranks_are_dealt_round_robin_over_processes_and_every_mode_spreads() -> None:
    """Process a registers its 4 robots first, then b and c theirs: the ranks end up a1 b1 c1 a2 b2 c2 ...,
    and for every mode m the active robots of two processes differ by at most one."""
    act = Actuator(12, initial_mode=0)
    for p in "abc":
        for k in range(1, 5):
            act.register(f"{p}{k}", 0.0, process=p)
    by_rank = [act._by_rank[rank].robot_id for rank in range(1, 13)]
    assert by_rank == ["a1", "b1", "c1", "a2", "b2", "c2", "a3", "b3", "c3", "a4", "b4", "c4"]
    assert sorted(r.slot for r in act.robots.values()) == list(range(1, 13))
    for m in range(1, 13):
        act.set_target(m, float(m))
        counts = _active_by_process(act)
        assert sum(counts.values()) == m
        assert max(counts[p] for p in "abc") - min(counts[p] for p in "abc") <= 1, (m, counts)


def test_a_process_that_leaves_is_dealt_out_and_the_mode_stays_spread() -> None:
    act = Actuator(12, initial_mode=0)
    for p in "abc":
        for k in range(1, 5):
            act.register(f"{p}{k}", 0.0, process=p)
    act.set_target(6, 1.0)
    assert _active_by_process(act) == Counter(a=2, b=2, c=2)
    for k in range(1, 5):
        act.deregister(f"b{k}", 2.0)
    act.set_target(6, 3.0)  # the mode is capped at the 8 registered slots, and spread over a and c
    assert _active_by_process(act) == Counter(a=3, c=3)
    assert sorted(r.rank for r in act.robots.values()) == sorted({r.rank for r in act.robots.values()})


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 5)), min_size=1, max_size=40))
def test_every_mode_fills_the_processes_evenly_whatever_the_registrations(ops: list[tuple[bool, int, int]]) -> None:
    """Robots of 4 processes register and leave in any order. After every step, for every mode m: the
    active robots number min(m, registered), and a process has two fewer active robots than another only
    when every one of its robots is active (water-filling: the even spread, checked on the counts alone)."""
    act = Actuator(24, initial_mode=0)
    t = 0.0
    for join, p, k in ops:
        t += 1.0
        rid = f"p{p}-{k}"
        if join and rid not in act.robots:
            act.register(rid, t, process=f"p{p}")
        elif not join and rid in act.robots:
            act.deregister(rid, t)
        n = Counter(r.process for r in act.robots.values())
        assert sorted(r.rank for r in act.robots.values()) == sorted(act._by_rank)
        for m in range(1, len(act.robots) + 1):
            t += 1.0
            act.set_target(m, t)
            active = _active_by_process(act)
            assert sum(active.values()) == m
            for q in n:
                for other in n:
                    if active[q] < active[other] - 1:
                        assert active[q] == n[q], (m, dict(n), dict(active))


def test_robots_without_a_process_and_asked_ranks_keep_theirs() -> None:
    act = Actuator(8, initial_mode=0)
    act.register("x", 0.0, rank=1)
    act.register("y", 0.0)
    keys = {f"{p}{k}": act.enroll(f"{p}{k}", 0.0, process=p)[1] for p in "ab" for k in (1, 2)}
    assert (act.robots["x"].rank, act.robots["y"].rank) == (1, 2)
    assert [act._by_rank[r].robot_id for r in range(3, 7)] == ["a1", "b1", "a2", "b2"]
    with pytest.raises(ConflictError, match="process"):  # its own key, another process
        act.register("a1", 1.0, process="b", key=keys["a1"])
    assert act.register("a1", 1.0, process="a", key=keys["a1"]).rank == 3  # again, idempotent


def test_a_process_name_is_checked() -> None:
    from robotctl.agent.api import parse_process, parse_registration

    assert parse_process({"process": "host-12"}) == "host-12"
    assert parse_process({}) is None
    parse_registration({"process": "p"}, max_rank=4)
    for bad in ("", 7, "x" * 201, "a\nb"):
        with pytest.raises(InputError, match="process"):
            parse_process({"process": bad})


def _config(tmp_path: Path, lease_s: float) -> AgentConfig:
    return AgentConfig.from_dict({
        "server": {"port": 0, "insecure_loopback": True}, "queue": {"capacity": 10},
        "robots": {"count": 6, "lease_s": lease_s, "on_lease_lost": "deregister"},
        "policy": {"startup": [3] * 11}, "refit": {"interval_s": 1e9, "min_deliveries": 10**9,
                                                    "drift_bound": None, "cold_start_deliveries": 0},
        "log": {"dir": str(tmp_path / "log"), "fsync": "never"}})


async def test_a_silent_process_expires_at_its_lease_and_the_others_take_its_share(tmp_path: Path) -> None:
    """Three processes of two robots each, a policy of 3 robots: one active per process. Process c stops
    polling (its handles are closed without deregistering, as a killed process's are): within two leases
    (a long-poll under way is answered at half a lease, then the lease runs, then the reaper's half lease)
    the agent's GET /v1/robots lists only a's and b's robots, and the 3 active robots are theirs."""
    lease = 1.0
    async with run_in_process(_config(tmp_path, lease)) as (url, app), \
            AgentClient(url) as a, AgentClient(url) as b, AgentClient(url) as c, \
            aiohttp.ClientSession() as session:
        handles = {p: [await cl.register_robot(f"{p}-{k}", process=p) for k in (1, 2)]
                   for p, cl in (("a", a), ("b", b), ("c", c))}
        act = app[AGENT].actuator
        assert _active_by_process(act) == Counter(a=1, b=1, c=1)
        for h in handles["c"]:
            await h.close(deregister=False)
        deadline = asyncio.get_running_loop().time() + 10 * lease
        while asyncio.get_running_loop().time() < deadline:
            async with session.get(f"{url}/v1/robots") as resp:
                view = await resp.json()
            if {r["process"] for r in view["robots"]} == {"a", "b"}:
                break
            await asyncio.sleep(0.05)
        assert sorted(r["robot"] for r in view["robots"]) == ["a-1", "a-2", "b-1", "b-2"]
        assert all(not r["lease_lost"] for r in view["robots"])
        assert view["mode"] == 3
        assert sum(_active_by_process(act).values()) == 3 and set(_active_by_process(act)) == {"a", "b"}
        await asyncio.sleep(0.1)  # the handles hear their new commands
        assert sum(h.may_fetch for p in "ab" for h in handles[p]) == 3


def test_the_saved_registry_keeps_the_processes_and_deals_on_after_a_restart() -> None:
    """robots.json keeps each robot's process and whether its rank was dealt: after a restart a process that
    joins is dealt in with the restored ones."""
    act = Actuator(9, initial_mode=0)
    for p in "ab":
        for k in (1, 2):
            act.register(f"{p}{k}", 0.0, process=p)
    records = act.to_records()
    assert {r["robot"]: (r["process"], r["dealt"]) for r in records} == {
        "a1": ("a", True), "a2": ("a", True), "b1": ("b", True), "b2": ("b", True)}
    again = Actuator(9, initial_mode=0)
    assert again.restore(records, 10.0) == 4
    assert {r.robot_id: r.rank for r in again.robots.values()} == {r.robot_id: r.rank for r in act.robots.values()}
    for k in (1, 2):
        again.register(f"c{k}", 11.0, process="c")
    assert [again._by_rank[r].robot_id for r in range(1, 7)] == ["a1", "b1", "c1", "a2", "b2", "c2"]


async def test_a_robot_that_expired_while_alive_registers_again_by_itself(tmp_path: Path) -> None:
    """A process that was only silent (a pause longer than the lease) finds its robot expired: its next poll
    is told 404 and the handle registers it again, with its process and a dealt rank, not its old rank."""
    lease = 0.6
    async with run_in_process(_config(tmp_path, lease)) as (url, app), AgentClient(url) as a, AgentClient(url) as b:
        for k in (1, 2):
            await a.register_robot(f"a-{k}", process="a")
        hb = await b.register_robot("b-1", process="b")
        act = app[AGENT].actuator
        assert [act._by_rank[r].robot_id for r in (1, 2, 3)] == ["a-1", "b-1", "a-2"]
        assert hb._task is not None
        hb._task.cancel()  # b goes silent, alive
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20 * lease
        while "b-1" in act.robots and loop.time() < deadline:
            await asyncio.sleep(0.05)
        assert "b-1" not in act.robots
        assert sorted(r.rank for r in act.robots.values()) == [1, 3]
        hb._task = None
        hb.start()  # b polls again: 404, and registers again by itself
        deadline = loop.time() + 20 * lease
        while "b-1" not in act.robots and loop.time() < deadline:
            await asyncio.sleep(0.05)
        robot = act.robots["b-1"]
        assert robot.process == "b" and robot.dealt
        assert [act._by_rank[r].robot_id for r in sorted(act._by_rank)] == ["a-1", "b-1", "a-2"]


def test_a_robot_that_takes_a_freed_rank_below_the_active_ones_leaves_the_mode_as_it_was() -> None:
    """Hypothesis found it: p1-0 (rank 1) and p0-0 (rank 2) register, p1-0 leaves, mode 1 makes p0-0 the
    active robot; p0-1 then takes the freed rank 1, active as the lowest slot, and p0-0 stayed active: two
    robots in mode 1. The registration re-commands the mode's robots."""
    act = Actuator(24, initial_mode=0)
    act.register("p1-0", 1.0, process="p1")
    act.register("p0-0", 2.0, process="p0")
    act.deregister("p1-0", 3.0)
    act.set_target(1, 4.0)
    act.register("p0-1", 5.0, process="p0")
    assert sum(_active_by_process(act).values()) == 1
    act.set_target(2, 6.0)
    assert sum(_active_by_process(act).values()) == 2
