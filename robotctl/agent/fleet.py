"""The robots' side of the agent: registration and its persistence, long-polls for commands, leases, and
the actuation (``command``: r(i) is commanded; ``advise``: the fleet runs by itself and r(i) is only
exported). The state itself is the :class:`~agent.actuator.Actuator`'s; :class:`Fleet` is what the
HTTP layer and the :class:`~agent.core.Agent` call, with the agent's steps handed in as callables."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, KeysView
from pathlib import Path
from typing import Any

from robotctl.model import InputError

from .actuator import Actuator, Command, Robot
from .api import NotFoundError
from .clock import Clock
from .recovery import save_robots, write_robot_records

LOG = logging.getLogger("robotctl.agent")


class Fleet:
    """See the module docstring.

    Parameters
    ----------
    actuator, clock
    long_poll_max_s : float
        ``server.long_poll_max_s``.
    robots_file : Path or None
        ``robots.json``, rewritten whenever the registry changes (None: never written).
    stamp : callable
        The agent's clock stamp (agent time never goes back).
    hold : callable
        ``hold(now, old, new)``: the mode changed from ``old`` to ``new`` by the fleet's own doing (advise
        mode): record it (its line is held until ``flush``).
    reapply : callable
        ``reapply(now)``: apply the policy at the current queue length.
    desired : callable
        What the policy asks for now.
    flush : callable
        Write the lines held by the agent's journal.
    """

    def __init__(self, actuator: Actuator, clock: Clock, *, long_poll_max_s: float, robots_file: Path | None,
                 stamp: Callable[[], float], hold: Callable[[float, int, int], None],
                 reapply: Callable[[float], None], desired: Callable[[], int], flush: Callable[[], None]) -> None:
        self.actuator = actuator
        self.clock = clock
        self.long_poll_max_s = long_poll_max_s
        self.robots_file = robots_file
        self._stamp, self._hold, self._reapply, self._desired, self._flush = stamp, hold, reapply, desired, flush
        self._stale = False  # robots.json is behind the registry
        self._writer: asyncio.Task[None] | None = None

    # -- robots --------------------------------------------------------------------------------------
    @property
    def robot_ids(self) -> KeysView[str]:
        """Ids of the registered robots (a live view)."""
        return self.actuator.robots.keys()

    @property
    def max_rank(self) -> int:
        """The highest rank a robot may register with."""
        return self.actuator.max_rank

    @property
    def lease_s(self) -> float:
        return self.actuator.lease_s

    def save(self) -> None:
        """Save the registry to robots.json: at once without an event loop; with one, in a thread, coalesced
        (a registration marks the file stale and returns; one writer thread writes the latest registry, again
        if it changed meanwhile), so that a registration costs neither an fsync nor a rewrite of the whole
        fleet on the loop (41 ms per registration at 3,417 robots before)."""
        if self.robots_file is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            save_robots(self.robots_file, self.actuator)
            return
        self._stale = True
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write_while_stale(self.robots_file))

    async def _write_while_stale(self, path: Path) -> None:
        while self._stale:
            self._stale = False
            records = self.actuator.to_records()  # the snapshot, on the loop; the JSON and the fsync off it
            await asyncio.to_thread(write_robot_records, path, records)

    async def saved(self) -> None:
        """Done once the registry's last change is in robots.json (the close awaits it, then saves once more)."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer
        if self.robots_file is not None:
            save_robots(self.robots_file, self.actuator)

    def _robot(self, robot_id: str) -> Robot:
        robot = self.actuator.robots.get(robot_id)
        if robot is None:
            raise NotFoundError("robot", f"{robot_id!r} is not registered", "register it with POST /v1/robots")
        return robot

    def register(self, robot_id: str | None, rank: int | None, default_state: str | None,
                 key: str | None = None, process: str | None = None) -> dict[str, Any]:
        """Register (or re-register, with its ``key``) a robot; an id is made up when none is given. Returns
        the robot's view: its command, rank, slot and lease, and ``robot_key`` when a key was issued (shown
        this once: the robot sends it as ``X-Robot-Key`` to poll, re-register or deregister). Another
        client's robot is refused (:class:`~agent.actuator.ConflictError`) until its lease runs out. A robot
        that names its crawler ``process`` gets a rank dealt round-robin over the processes
        (:class:`~agent.actuator.Actuator`), so the active robots spread across them."""
        now = self._stamp()
        act = self.actuator
        if robot_id is None:
            n = len(act.robots) + 1
            while f"robot-{n}" in act.robots:
                n += 1
            robot_id = f"robot-{n}"
        before = robot_id in act.robots
        robot, issued = act.enroll(robot_id, now, rank=rank,
                                   default_state=Command(default_state) if default_state else None, key=key,
                                   process=process)
        for gone in act.evicted:
            LOG.warning("event=robot_taken_over robot=%s reason=lease_lost", gone)
        act.evicted.clear()
        self.changed(now)
        if not before or issued is not None:
            self.save()
            LOG.info("event=robot_registered robot=%s rank=%d slot=%d state=%s", robot.robot_id, robot.rank,
                     robot.slot, robot.command.value)
        view = robot.view(act.lease_s, self.clock.now())
        if issued is not None:
            view["robot_key"] = issued
        return view

    def deregister(self, robot_id: str, key: str | None = None) -> dict[str, Any]:
        """Forget a robot (:class:`~agent.api.NotFoundError` if it is not registered,
        :class:`~agent.actuator.ForbiddenError` without its key); returns its last view."""
        self.actuator.check_key(self._robot(robot_id), key)
        now = self._stamp()
        robot = self.actuator.deregister(robot_id, now)
        self.changed(now)
        self.save()
        LOG.info("event=robot_deregistered robot=%s", robot_id)
        return robot.view(self.actuator.lease_s)

    def robots_view(self) -> dict[str, Any]:
        """The mode and every registered robot, by rank."""
        now = self.clock.now()
        act = self.actuator
        return {"mode": act.mode, "robots": [r.view(act.lease_s, now) for r in
                                             sorted(act.robots.values(), key=lambda r: r.rank)]}

    def long_poll_cap(self) -> float:
        """The longest a command long-poll waits: ``server.long_poll_max_s``, and half the lease, so that a
        robot always hears back within its lease."""
        return min(self.long_poll_max_s, self.actuator.lease_s / 2)

    async def wait_command(self, robot_id: str, version: int, wait_s: float, key: str | None = None
                           ) -> dict[str, Any]:
        """A robot's long-poll: its view once its command's version differs from ``version``, or after
        ``wait_s`` (capped by :meth:`long_poll_cap`); polling (with the robot's ``key``) renews its lease."""
        robot = self._robot(robot_id)
        self.actuator.check_key(robot, key)
        act, clock = self.actuator, self.clock
        wait_s = min(wait_s, self.long_poll_cap())
        act.seen(robot, clock.now())
        if wait_s > 0 and not act.shutting_down:
            await act.wait_change(robot, version, lambda: clock.sleep(wait_s))
        act.seen(robot, clock.now())
        return robot.view(act.lease_s)

    def lost_robots(self, now: float) -> dict[str, str]:
        """Robots whose lease has run out, with the default state each has fallen back to."""
        return {r.robot_id: r.default_state.value for r in self.actuator.lost(now)}

    def expire_lost(self, now: float) -> list[str]:
        """``robots.on_lease_lost: deregister``: forget the robots whose lease has run out (their process is
        presumed gone), so the mode, the policy and the fleet view count only the live ones; returns their ids.
        A robot that comes back is told 404 and registers again (its handle does so by itself)."""
        gone = [r.robot_id for r in self.actuator.lost(now)]
        if not gone:
            return gone
        stamp = self._stamp()
        for rid in gone:
            self.actuator.deregister(rid, stamp).reason = "lease lost: expired"
        self.changed(stamp)
        self.save()
        return gone

    def shutdown_robots(self) -> int:
        """Tell every robot its default state (the agent is going away); returns how many were told."""
        self.actuator.shutdown(self._stamp())
        self._flush()
        return len(self.actuator.robots)

    # -- actuation: command, or advise (the fleet runs by itself) -------------------------------------
    @property
    def advising(self) -> bool:
        """True under actuation advise (``robots.actuation: advise``): r(i) is computed and exported, never
        commanded."""
        return self.actuator.advise

    @property
    def actuation(self) -> str:
        """The actuation in force: ``command`` or ``advise``."""
        return "advise" if self.actuator.advise else "command"

    def set_actuation(self, actuation: str) -> dict[str, Any]:
        """Switch between ``command`` and ``advise`` at run time. Entering advise hands every robot its
        default state once (what it does without the agent) and then leaves them alone; entering command
        applies r(i) at the current queue length at once. Returns the new :meth:`actuation_view`."""
        if actuation not in ("command", "advise"):
            raise InputError("actuation", f"is {actuation!r}", "use command or advise")
        now = self._stamp()
        if actuation != self.actuation:
            if actuation == "advise":
                self.actuator.release(now)
                self._follow(now, self.actuator.fleet_mode(), always_flush=True)
            else:
                self.actuator.advise = False
                self._reapply(now)
            LOG.info("event=actuation actuation=%s", actuation)
        return self.actuation_view()

    def actuation_view(self) -> dict[str, Any]:
        """``GET /v1/actuation``: command or advise, the active virtual robots (the mode) and r(i) now."""
        return {"actuation": self.actuation, "active": self.actuator.mode, "desired": self._desired()}

    def observe(self, mode: int) -> None:
        """Advise mode: the fleet now runs ``mode`` virtual robots (seen from outside: a replayed trace's
        park and resume lines or ``active`` fields). The queue view, windows and exposure follow it as
        they follow a commanded change in command mode."""
        if not self.actuator.advise:
            raise RuntimeError("Agent.observe_fleet: the agent commands the fleet (robots.actuation: command); "
                               "the mode in force is its own")
        if mode != self.actuator.mode:
            self._follow(self._stamp(), mode)

    def changed(self, now: float) -> None:
        """Robots registered or left. Advise mode: the fleet that runs by itself may have changed. Command mode:
        the mode never exceeds the registered robots (:meth:`Actuator.registered_slots`), so r(i) is applied
        again."""
        if self.actuator.advise:
            self._follow(now, self.actuator.fleet_mode())
        else:
            self._reapply(now)

    def _follow(self, now: float, mode: int, *, always_flush: bool = False) -> None:
        """The mode is ``mode`` by the fleet's own doing: record the change (if any) and write its line."""
        old, self.actuator.mode = self.actuator.mode, mode
        if mode != old:
            self._hold(now, old, mode)
        if mode != old or always_flush:
            self._flush()


__all__ = ["Fleet"]
