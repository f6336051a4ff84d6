"""Actuator: ranks and slots, park order, hysteresis, leases, shutdown, long-poll wake-ups."""

from __future__ import annotations

import asyncio

import pytest

from robotctl.agent.actuator import Actuator, Command, ConflictError
from robotctl.agent.clock import ManualClock


def _states(act: Actuator) -> list[str]:
    return [r.command.value[0] for r in sorted(act.robots.values(), key=lambda r: r.rank)]


def test_automatic_ranks_fill_slots_in_groups() -> None:
    act = Actuator(3, group_size=2, initial_mode=3)
    robots = [act.register(f"r{i}", 0.0) for i in range(1, 7)]
    assert [(r.rank, r.slot) for r in robots] == [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (6, 3)]
    with pytest.raises(ConflictError) as info:
        act.register("r7", 0.0)
    assert info.value.field == "rank"


def test_fixed_ids_and_groups_come_first() -> None:
    act = Actuator(3, fixed_ids=(("a",), ("b1", "b2")), initial_mode=3)
    late, key = act.enroll("x", 0.0)
    b2 = act.register("b2", 0.0)
    assert (b2.rank, b2.slot) == (3, 2)
    assert (late.rank, late.slot) == (4, 3)
    with pytest.raises(ConflictError):
        act.register("y", 0.0, rank=2)  # belongs to a listed robot
    assert act.enroll("x", 1.0, key=key) == (late, None)  # idempotent, with its key
    with pytest.raises(ConflictError) as info:
        act.register("x", 1.0)  # without it: another client's robot
    assert info.value.field == "robot"


def test_robot_1_parks_last_and_lowest_ranked_robots_move_first() -> None:
    log: list[tuple[str, str]] = []
    act = Actuator(4, initial_mode=4, listener=lambda t, r, c, m: log.append((r.robot_id, c.value)))
    for i in range(1, 5):
        act.register(f"r{i}", 0.0)
    assert _states(act) == list("aaaa")
    act.set_target(1, 1.0)
    assert _states(act) == list("appp")
    assert log == [("r4", "parked"), ("r3", "parked"), ("r2", "parked")]
    log.clear()
    act.set_target(3, 2.0)
    assert _states(act) == list("aaap")
    assert log == [("r2", "active"), ("r3", "active")]
    act.set_target(0, 3.0)
    assert _states(act) == list("pppp")


def test_dwell_defers_changes_and_applies_the_latest_target() -> None:
    act = Actuator(4, initial_mode=4, dwell_s=10.0)
    for i in range(1, 5):
        act.register(f"r{i}", 0.0)
    assert act.set_target(2, 100.0) is True
    assert act.set_target(1, 101.0) is False and act.deferred_until == 110.0
    assert act.set_target(3, 105.0) is False and act.mode == 2
    assert act.tick(109.0) is False
    assert act.tick(110.0) is True and act.mode == 3
    assert act.set_target(3, 111.0) is False and act.deferred_until is None


def test_lease_loss_falls_back_to_the_default_state() -> None:
    act = Actuator(2, initial_mode=1, lease_s=10.0, default_state=Command.ACTIVE)
    act.register("r1", 0.0)
    r2 = act.register("r2", 0.0, default_state=Command.PARKED)
    assert act.counts(5.0) == {"active": 1, "parked": 1, "lost": 0}
    assert r2.effective(20.0, 10.0) is Command.PARKED
    # each robot counted once: a lost robot is lost, not also active or parked by its default
    assert act.counts(20.0) == {"active": 0, "parked": 0, "lost": 2}
    act.seen(r2, 20.0)
    assert act.counts(20.0) == {"active": 0, "parked": 1, "lost": 1}
    assert sum(act.counts(30.0).values()) == len(act.robots)


def test_robots_up_to_a_mode_counts_real_robots_of_its_slots() -> None:
    act = Actuator(4, fixed_ids=(("a",), ("b1", "b2")), group_size=3)
    assert [act.robots_up_to(m) for m in range(6)] == [0, 1, 3, 6, 9, 9]
    assert act.robots_up_to(4) == act.max_rank
    plain = Actuator(3)
    assert [plain.robots_up_to(m) for m in range(4)] == [0, 1, 2, 3]


def test_shutdown_tells_every_robot_its_default() -> None:
    act = Actuator(2, initial_mode=1)
    act.register("r1", 0.0)
    r2 = act.register("r2", 0.0)
    v = r2.version
    act.shutdown(1.0)
    assert r2.command is Command.ACTIVE and r2.version > v and r2.reason == "shutdown"
    act.set_target(0, 2.0)
    assert r2.command is Command.ACTIVE  # no more commands after shutdown


async def test_long_poll_wakes_on_change_and_times_out_on_the_clock() -> None:
    clock = ManualClock(0.0)
    act = Actuator(2, initial_mode=2)
    r2 = act.register("r2", 0.0)
    r2b = act.register("r2b", 0.0)
    waiter = asyncio.create_task(act.wait_change(r2b, r2b.version, lambda: clock.sleep(5.0)))
    await ManualClock.settle()
    assert not waiter.done() and r2b.polling == 1
    act.set_target(1, 1.0)
    await ManualClock.settle()
    assert waiter.done() and r2b.polling == 0
    idle = asyncio.create_task(act.wait_change(r2, r2.version, lambda: clock.sleep(5.0)))
    await ManualClock.settle()
    clock.advance(4.9)
    await ManualClock.settle()
    assert not idle.done()
    clock.advance(0.2)
    await ManualClock.settle()
    assert idle.done() and r2.command is Command.ACTIVE


def test_rate_limit_caps_commands_per_robot_in_any_minute() -> None:
    sent: list[tuple[float, str]] = []
    act = Actuator(3, initial_mode=3, max_commands_per_min=2,
                   listener=lambda t, r, c, m: sent.append((t, r.robot_id)))
    for i in range(1, 4):
        act.register(f"r{i}", 0.0)
    assert act.set_target(1, 0.0) and act.mode == 1          # r2, r3: one command each
    assert act.set_target(3, 1.0) and act.mode == 3          # two each: their budgets are spent
    assert act.set_target(1, 2.0) is False and act.mode == 3  # held: r3 (slot 3) would get a third
    assert act.deferred_until == pytest.approx(60.0)         # when r3's first command is a minute old
    assert act.tick(59.0) is False and act.mode == 3
    assert act.tick(60.0) is True and act.mode == 1
    for t in range(600):  # a target flapping every second
        act.set_target(1 if t % 2 else 3, 61.0 + t)
        act.tick(61.0 + t)
    for rid in ("r1", "r2", "r3"):
        times = [t for t, r in sent if r == rid]
        assert all(b - a >= 60.0 for a, b in zip(times, times[2:])), rid  # at most 2 in any 60 s
    assert len([t for t, r in sent if r == "r3"]) >= 2 * 600 // 61  # and the budget is used


def test_rate_limit_moves_the_mode_as_far_as_the_budgets_allow() -> None:
    act = Actuator(4, initial_mode=4, max_commands_per_min=1)
    for i in range(1, 5):
        act.register(f"r{i}", 0.0)
    assert act.set_target(3, 0.0) and act.mode == 3  # r4 parked: its budget is spent
    assert act.set_target(1, 1.0) and act.mode == 1  # r3 and r2 parked; r4 is not crossed
    assert act.set_target(4, 2.0) is False and act.mode == 1  # r2 (slot 2) blocks the way up
    assert act.deferred_until == pytest.approx(61.0)
    assert act.tick(61.0) and act.mode == 4          # every budget is free again by then
