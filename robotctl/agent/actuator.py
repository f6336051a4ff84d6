"""The actuator: robots, their ranks and leases, and the park/resume commands that make the number of
active robots follow the policy r(i).

Robots and ranks
    Each real robot has a rank 1, 2, ... and belongs to a *virtual robot* (slot) 1..N, N =
    ``robots.count``: the paper's robots may be groups of real robots that are activated and
    de-activated together (paper 000, Section 2, "virtual robot"). Ranks come from ``robots.ids``
    (one entry per slot, a list groups real robots) or are handed out on registration; unlisted
    robots fill slots in groups of ``robots.group_size``.
Processes
    A robot may register as one of a crawler process's robots (``process``: several Scrapy processes
    sharing one agent). The ranks handed out on registration to the robots of two or more processes are
    dealt round-robin over the processes (each process's first robot, then each one's second, ...) over
    the ranks they hold, and dealt again whenever a robot of a process registers or leaves, so any mode
    spreads its active robots across the processes rather than filling one process first. The commands a
    new deal sends (the mode stays) are not held by ``max_commands_per_min``: they follow the fleet's
    changes, not r(i).
Mode
    The number of active virtual robots. With mode m, the robots of slots 1..m are active and the
    others parked, so robot 1 parks last and is resumed first (paper 000: "the first robot is always
    active ... the Nth robot is the most rarely activated"). A change of mode parks or resumes the
    lowest-ranked affected robots first.
Damping
    ``robots.dwell_s`` > 0 keeps a mode for at least that long; a change asked for sooner is applied
    when the dwell ends, with the then-current target (the agent sets it from the fitted traffic by
    default, ``dwell_s: auto``; 0 switches instantly, as in the model). ``robots.max_commands_per_min``
    > 0 caps the park/resume commands each robot receives in any 60 s: a change that would exceed a
    robot's budget moves the mode only as far as the budgets allow, and the rest waits until the
    oldest command of the blocking robot is 60 s old.
Registered robots only
    The mode never exceeds the virtual robots that hold a registered robot (:meth:`Actuator.registered_slots`):
    with 2 of 4 robots registered, r(i) = 4 makes the mode 2, and a robot that registers later raises it.
Advice only
    With :attr:`Actuator.advise` (``robots.actuation: advise``, shadow mode) the actuator records the target
    r(i) but never changes a command: every robot keeps its default state, what it does without the
    agent, and the mode is the fleet as it runs (:meth:`Actuator.fleet_mode`), not the target.
Commands and leases
    Each robot's command (``active`` or ``parked``) has a version that grows with every change; a
    robot long-polls with the version it knows and is answered at once when it differs. Every answer
    carries ``lease_s``: a robot that hears nothing for that long falls back to its default state, and
    the agent counts a robot that has not polled for a lease as *lost* (its default state applies).

All methods except the long-poll wait are synchronous and take the time as an argument, so the same
logic runs under the agent's real clock or a test's manual clock.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import hmac
import secrets
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from robotctl import InputError


class Command(enum.Enum):
    """What the agent tells a robot."""

    #: fetch pages
    ACTIVE = "active"
    #: wait; do not fetch
    PARKED = "parked"


class ConflictError(InputError):
    """A request that is well-formed but clashes with the agent's state (HTTP 409)."""


class ForbiddenError(InputError):
    """A request about a robot without that robot's key (HTTP 403): only the client that registered a
    robot may poll its command, re-register or deregister it."""


def new_robot_key() -> tuple[str, bytes]:
    """A fresh robot key and the digest the agent keeps of it (the key itself is never stored)."""
    key = secrets.token_urlsafe(32)
    return key, key_digest(key)


def key_digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


@dataclass(eq=False)
class Robot:
    """One registered real robot (mutable; owned by the :class:`Actuator`)."""

    robot_id: str
    rank: int
    slot: int
    default_state: Command
    command: Command
    version: int = 1
    reason: str = "registered"
    last_seen: float = 0.0
    polling: int = 0
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    #: SHA-256 of the robot's key (None: registered before keys existed; the next registration sets one)
    key_hash: bytes | None = None
    #: the crawler process it belongs to (None: none said); its rank was handed out (not asked for)
    process: str | None = None
    dealt: bool = False
    #: registration order (the order of a process's robots when ranks are dealt)
    seq: int = 0
    #: when the agent last parked it (None: active, or parked since it registered): a delivery from it
    #: since then drains a fetch that was under way (:meth:`agent.modes.ModeHistory.drained`)
    parked_at: float | None = None

    def holds(self, key: str | None) -> bool:
        """True when ``key`` is this robot's key (or the robot has none yet)."""
        if self.key_hash is None:
            return True
        return key is not None and hmac.compare_digest(key_digest(key), self.key_hash)

    def alive(self, now: float, lease_s: float) -> bool:
        return self.polling > 0 or now - self.last_seen <= lease_s

    def effective(self, now: float, lease_s: float) -> Command:
        """What the robot is doing by the protocol: its command, or its default once its lease is lost."""
        return self.command if self.alive(now, lease_s) else self.default_state

    def view(self, lease_s: float, now: float | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"robot": self.robot_id, "rank": self.rank, "slot": self.slot,
                             "state": self.command.value, "version": self.version, "lease_s": lease_s,
                             "default_state": self.default_state.value, "reason": self.reason}
        if self.process is not None:
            d["process"] = self.process
        if now is not None:
            d["lease_lost"] = not self.alive(now, lease_s)
        return d

    def wake(self) -> None:
        for fut in self.waiters:
            if not fut.done():
                fut.set_result(None)
        self.waiters.clear()


#: (time, robot, new command, mode) for every park or resume, for the delivery log.
CommandListener = Callable[[float, Robot, Command, int], None]


class Actuator:
    """Robots and the mode; see the module docstring.

    Parameters
    ----------
    n_virtual : int
        N, the number of virtual robots (slots).
    fixed_ids : tuple of tuple of str
        ``robots.ids``: slot k + 1 holds the robots of entry k.
    group_size : int
        Real robots per slot for robots not listed in ``fixed_ids``.
    default_state : Command
    lease_s, dwell_s : float
    initial_mode : int
    listener : callable, optional
        Called for every park/resume.
    """

    def __init__(self, n_virtual: int, *, fixed_ids: tuple[tuple[str, ...], ...] = (), group_size: int = 1,
                 default_state: Command = Command.ACTIVE, lease_s: float = 10.0, dwell_s: float = 0.0,
                 initial_mode: int = 0, listener: CommandListener | None = None,
                 max_commands_per_min: int = 0) -> None:
        self.n_virtual = n_virtual
        self.max_commands_per_min = max_commands_per_min
        # times of the commands each virtual robot (slot) received in the last 60 s (rate limit)
        self._slot_commands: dict[int, deque[float]] = {}
        self.group_size = group_size
        self.default_state = default_state
        self.lease_s = lease_s
        self.dwell_s = dwell_s
        self.listener = listener
        self.mode = initial_mode
        self.target = initial_mode
        self.changed_at = -float("inf")
        self.deferred_until: float | None = None
        self.shutting_down = False
        self.robots: dict[str, Robot] = {}
        self._by_rank: dict[int, Robot] = {}
        self._fixed_rank: dict[str, tuple[int, int]] = {}
        rank = 0
        for slot, group in enumerate(fixed_ids, start=1):
            for rid in group:
                rank += 1
                self._fixed_rank[rid] = (rank, slot)
        self._n_fixed = rank
        self._n_fixed_slots = len(fixed_ids)
        self.commands_issued = {Command.ACTIVE: 0, Command.PARKED: 0}
        #: ids of robots taken over after their lease ran out (the agent logs and clears it)
        self.evicted: list[str] = []
        #: advise only (shadow mode): record the target, never park or resume
        self.advise = False
        self._seq = 0

    # -- ranks ---------------------------------------------------------------------------------------
    def slot_of_rank(self, rank: int) -> int:
        if rank <= self._n_fixed:
            for r, s in self._fixed_rank.values():
                if r == rank:
                    return s
        return self._n_fixed_slots + (rank - self._n_fixed - 1) // self.group_size + 1

    def robots_up_to(self, mode: int) -> int:
        """Real robots in virtual robots 1..``mode``: the ranks that a mode of ``mode`` keeps active."""
        listed = sum(1 for _, slot in self._fixed_rank.values() if slot <= mode)
        unlisted = max(0, min(mode, self.n_virtual) - self._n_fixed_slots)
        return listed + unlisted * self.group_size

    def top_slot(self, mode: int) -> int:
        """The highest virtual robot that a mode of ``mode`` keeps active: the ``mode``-th slot holding a
        registered robot (slots left empty below it, by a robot that left, are not counted on), or ``mode``
        itself when no robot is registered or the slots run out."""
        held = sorted({r.slot for r in self.robots.values()})
        if mode <= 0 or not held:
            return max(mode, 0)
        return held[mode - 1] if mode <= len(held) else max(mode, held[-1])

    def parked_senders(self, robots: Iterable[str | None]) -> list[tuple[int, float]]:
        """(virtual robot, park time) of each robot named in ``robots`` that the agent parked and that is
        parked still: its delivery finishes a fetch under way at the park (a drain, agent.modes)."""
        out = []
        for rid in set(robots):
            robot = self.robots.get(rid) if rid is not None else None
            if robot is not None and robot.command is Command.PARKED and robot.parked_at is not None:
                out.append((robot.slot, robot.parked_at))
        return out

    def registered_slots(self) -> int:
        """Virtual robots that hold at least one registered robot: the most the mode can be (the agent never
        counts on a robot that is not registered; ranks handed out on registration fill the slots from 1).
        N when no robot is registered at all: robots that never register run freely, and the agent cannot
        tell how many there are."""
        if not self.robots:
            return self.n_virtual
        return len({r.slot for r in self.robots.values()})

    @property
    def max_rank(self) -> int:
        return self._n_fixed + (self.n_virtual - self._n_fixed_slots) * self.group_size

    def _free_rank(self, now: float) -> int:
        for rank in range(self._n_fixed + 1, self.max_rank + 1):
            if rank not in self._by_rank:
                return rank
        gone = sorted((r for r in self._by_rank.values() if r.rank > self._n_fixed and not r.alive(now, self.lease_s)),
                      key=lambda r: r.last_seen)
        if gone:  # a robot that stopped polling a lease ago gives its rank up to a live one
            return self._evict(gone[0]).rank
        raise ConflictError("rank", f"every rank is taken: {len(self.robots)} robots fill robots.count = "
                       f"{self.n_virtual} virtual robots", "raise robots.count or robots.group_size, or "
                       "deregister robots that are gone (DELETE /v1/robots/{id})")

    def _evict(self, robot: Robot) -> Robot:
        """Deregister a robot whose lease has run out, so that a live registration can have its rank or id."""
        self.deregister(robot.robot_id)
        robot.reason = "lease lost: taken over"
        self.evicted.append(robot.robot_id)
        return robot

    def check_key(self, robot: Robot, key: str | None) -> None:
        """Raise :class:`ForbiddenError` unless ``key`` is ``robot``'s key."""
        if not robot.holds(key):
            raise ForbiddenError("X-Robot-Key", f"is {'missing' if key is None else 'wrong'} for robot "
                                 f"{robot.robot_id!r}", "send the robot_key its registration returned, in the header "
                                 "X-Robot-Key")

    def register(self, robot_id: str, now: float, *, rank: int | None = None,
                 default_state: Command | None = None, key: str | None = None, process: str | None = None) -> Robot:
        """:meth:`enroll` without the key it may issue."""
        return self.enroll(robot_id, now, rank=rank, default_state=default_state, key=key, process=process)[0]

    def enroll(self, robot_id: str, now: float, *, rank: int | None = None,
               default_state: Command | None = None, key: str | None = None,
               process: str | None = None) -> tuple[Robot, str | None]:
        """Register (or re-register, idempotently) a robot; returns it with its current command, and its new
        key when one was issued (a new registration, or a robot that had none).

        A registered robot is re-registered only with its key (``key``); without it, the registration is
        refused (:class:`ConflictError`) until the robot's lease runs out, and then it is taken over: a
        client cannot take another's robot, but a robot that restarted and lost its key gets its id back
        one lease later. Likewise a rank held by a robot whose lease ran out is given to a new registration.
        ``process`` names the crawler process the robot belongs to: handed-out ranks are dealt round-robin
        over the processes (the module docstring).
        """
        existing = self.robots.get(robot_id)
        if existing is not None and not existing.holds(key):
            if existing.alive(now, self.lease_s):
                raise ConflictError("robot", f"{robot_id!r} is registered by another client",
                                    "send its X-Robot-Key, or a new id; a robot that lost its key gets its id back "
                                    f"once its lease of {self.lease_s:g} s has run out")
            self._evict(existing)
            existing = None
        if existing is not None:
            if rank is not None and rank != existing.rank:
                raise ConflictError("rank",
                                    f"robot {robot_id!r} already holds rank {existing.rank}, not {rank}",
                               "register without a rank, or deregister it first")
            if default_state is not None:
                existing.default_state = default_state
            if process is not None and process != existing.process:
                raise ConflictError("process", f"robot {robot_id!r} belongs to process {existing.process!r}, not "
                                    f"{process!r}", "register it with its own process, or deregister it first")
            existing.last_seen = now
            issued = None
            if existing.key_hash is None:
                issued, existing.key_hash = new_robot_key()
            return existing, issued
        fixed = self._fixed_rank.get(robot_id)
        dealt = fixed is None and rank is None
        if fixed is not None:
            if rank is not None and rank != fixed[0]:
                raise ConflictError("rank", f"robots.ids gives {robot_id!r} rank {fixed[0]}, not {rank}",
                               "register it without a rank")
            rank, slot = fixed
        elif rank is None:
            rank = self._free_rank(now)
            slot = self.slot_of_rank(rank)
        else:
            if rank <= self._n_fixed:
                raise ConflictError("rank", f"rank {rank} belongs to a robot listed in robots.ids",
                               f"unlisted robots take ranks {self._n_fixed + 1}..{self.max_rank}")
            if rank > self.max_rank:
                raise ConflictError("rank", f"is {rank}, beyond the fleet's {self.max_rank} ranks "
                               f"(robots.count = {self.n_virtual}, group_size = {self.group_size})",
                               "raise robots.count or robots.group_size")
            holder = self._by_rank.get(rank)
            if holder is not None:
                if holder.alive(now, self.lease_s):
                    raise ConflictError("rank", f"rank {rank} is held by robot {holder.robot_id!r}",
                                        "pick a free rank or register without one; a rank is freed once its "
                                        f"robot stops polling for a lease ({self.lease_s:g} s)")
                self._evict(holder)
            slot = self.slot_of_rank(rank)
        default = default_state if default_state is not None else self.default_state
        issued, digest = new_robot_key()
        self._seq += 1
        robot = Robot(robot_id, rank, slot, default, default, last_seen=now, key_hash=digest, process=process,
                      dealt=dealt, seq=self._seq)
        self.robots[robot_id] = robot
        self._by_rank[rank] = robot
        if not self.advise:
            # its first command counts it among the registered robots already: the mode r(i) asks for, capped
            # at the registered slots with this one (the re-application that follows then sends it nothing)
            wanted = min(self.target, self.registered_slots())
            robot.command = self.default_state if self.shutting_down else (
                Command.ACTIVE if slot <= self.top_slot(max(self.mode, wanted)) else Command.PARKED)
        moved = process is not None and dealt and self._deal()
        if not self.advise and not self.shutting_down:
            # ranks dealt again, or a rank freed below the active ones taken: the mode's robots are the
            # lowest slots again (a robot that took a slot under an active one made one robot too many)
            self._command_mode(max(self.mode, min(self.target, self.registered_slots())), now,
                               "dealt over processes" if moved else "registered")
        return robot, issued

    def _deal(self) -> bool:
        """Deal the handed-out ranks of the robots that name a process round-robin over the processes (each
        process's robots in registration order; the processes in the order their first robot registered),
        over the same set of ranks they hold; True when a rank moved (the caller commands the robots)."""
        robots = [r for r in self.robots.values() if r.process is not None and r.dealt]
        by_process: dict[str, list[Robot]] = {}
        for r in sorted(robots, key=lambda r: r.seq):
            by_process.setdefault(r.process or "", []).append(r)
        if len(by_process) < 2:
            return False
        lists = list(by_process.values())
        order = [lst[i] for i in range(max(map(len, lists))) for lst in lists if i < len(lst)]
        ranks = sorted(r.rank for r in robots)
        if [r.rank for r in order] == ranks:
            return False
        for r in robots:
            self._by_rank.pop(r.rank, None)
        for r, rank in zip(order, ranks, strict=True):
            r.rank, r.slot = rank, self.slot_of_rank(rank)
            self._by_rank[rank] = r
        return True

    def _command_mode(self, mode: int, now: float, reason: str, *, descending: bool = False) -> None:
        """Command every robot as the mode ``mode`` says: active up to its top slot, parked above it."""
        robots = sorted(self.robots.values(), key=lambda r: r.rank, reverse=descending)
        top = self.top_slot(mode)
        for robot in robots:
            want = Command.ACTIVE if robot.slot <= top else Command.PARKED
            if want is not robot.command:
                robot.command = want
                robot.parked_at = now if want is Command.PARKED else None
                robot.version += 1
                robot.reason = reason
                self.commands_issued[want] += 1
                robot.wake()
                if self.listener is not None:
                    self.listener(now, robot, want, mode)

    def deregister(self, robot_id: str, now: float | None = None) -> Robot:
        """Forget a robot. With ``now``, the ranks of the robots of processes are dealt again and the robots
        are commanded as the mode says over the robots that are left (an active robot that left is replaced
        by the next one at once, not at the next change of mode)."""
        robot = self.robots.pop(robot_id)
        self._by_rank.pop(robot.rank, None)
        robot.reason = "deregistered"
        robot.version += 1
        robot.wake()
        if now is not None:
            if robot.process is not None and robot.dealt:
                self._deal()
            if not self.advise and not self.shutting_down:
                self._command_mode(self.mode, now, "a robot left")
        return robot

    # -- mode ----------------------------------------------------------------------------------------
    def set_target(self, target: int, now: float) -> bool:
        """Ask for ``target`` active virtual robots; returns True when the mode changed now.

        With a dwell time the change may be deferred: :attr:`deferred_until` then says when to call
        :meth:`tick`.
        """
        self.target = target
        if self.advise:
            self.deferred_until = None
            return False
        target = min(target, self.registered_slots())  # no robot that is not registered is counted on
        if target == self.mode:
            self.deferred_until = None
            return False
        if self.dwell_s > 0 and now < self.changed_at + self.dwell_s:
            self.deferred_until = self.changed_at + self.dwell_s
            return False
        self.deferred_until = None
        reach, free_at = self._within_budget(target, now)
        if reach != target:
            self.deferred_until = free_at
        if reach == self.mode:
            return False
        self._apply(reach, now, "policy")
        return True

    def _budget(self, slot: int, now: float) -> deque[float]:
        q = self._slot_commands.setdefault(slot, deque())
        while q and q[0] <= now - 60.0:
            q.popleft()
        return q

    def _within_budget(self, target: int, now: float) -> tuple[int, float]:
        """The mode nearest ``target`` (from the current one) that no virtual robot's command budget
        forbids, and when the first blocking budget frees up."""
        limit = self.max_commands_per_min
        if limit <= 0:
            return target, now
        step = 1 if target > self.mode else -1
        m = self.mode
        while m != target:
            q = self._budget(m + 1 if step > 0 else m, now)  # resuming slot m + 1, parking slot m
            if len(q) >= limit:
                return m, q[0] + 60.0
            m += step
        return m, now

    def force(self, target: int, now: float, reason: str) -> bool:
        """Apply ``target`` at once, past any dwell (an operator's override); True when the mode changed."""
        self.target = target
        self.deferred_until = None
        target = min(target, self.registered_slots())
        if target == self.mode:
            return False
        self._apply(target, now, reason)
        return True

    def tick(self, now: float) -> bool:
        """Apply a deferred change whose dwell has ended."""
        if self.deferred_until is not None and now >= self.deferred_until:
            self.deferred_until = None
            if self.target != self.mode:
                before = self.mode
                self.set_target(self.target, now)
                return self.mode != before
        return False

    def _apply(self, mode: int, now: float, reason: str) -> None:
        old = self.mode
        self.mode = mode
        self.changed_at = now
        if self.shutting_down:
            return
        if self.max_commands_per_min > 0:  # the budgets' clocks: only kept when there is a budget
            for slot in range(min(old, mode) + 1, max(old, mode) + 1):  # the virtual robots commanded
                self._budget(slot, now).append(now)
        # lowest-ranked first: parking goes down from the top rank, resuming up from the lowest slot
        self._command_mode(mode, now, reason, descending=mode < old)

    def fleet_mode(self) -> int:
        """Advise mode: the virtual robots the fleet runs by itself: slots with a registered robot whose
        command (its default state) is active; every slot when no robot is registered (robots that never
        register run freely)."""
        if not self.robots:
            return self.n_virtual
        return len({r.slot for r in self.robots.values() if r.command is Command.ACTIVE})

    def release(self, now: float) -> None:
        """Enter advise mode: every robot is told its default state once (what it does without the agent);
        after this no command changes until :attr:`advise` is cleared."""
        self.advise = True
        self.deferred_until = None
        for robot in sorted(self.robots.values(), key=lambda r: r.rank):
            if robot.command is not robot.default_state:
                robot.command = robot.default_state
                robot.version += 1
                robot.reason = "advise"
                self.commands_issued[robot.command] += 1
                robot.wake()
                if self.listener is not None:
                    self.listener(now, robot, robot.command, self.fleet_mode())

    def shutdown(self, now: float) -> None:
        """Tell every robot its default state (the agent is going away)."""
        self.shutting_down = True
        for robot in self.robots.values():
            robot.reason = "shutdown"
            if robot.command is not robot.default_state:
                robot.command = robot.default_state
                if self.listener is not None:
                    self.listener(now, robot, robot.command, self.mode)
            robot.version += 1
            robot.wake()

    # -- leases and long polls ----------------------------------------------------------------------
    def seen(self, robot: Robot, now: float) -> None:
        robot.last_seen = now

    async def wait_change(self, robot: Robot, version: int, timeout: Callable[[], Any]) -> None:
        """Wait until the robot's version differs from ``version`` or ``timeout()`` (an awaitable
        factory, e.g. the clock's sleep) completes."""
        if robot.version != version:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        robot.waiters.append(fut)
        sleeper = asyncio.ensure_future(timeout())
        robot.polling += 1
        try:
            await asyncio.wait({fut, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            robot.polling -= 1
            sleeper.cancel()
            if not fut.done():
                fut.cancel()
            if fut in robot.waiters:
                robot.waiters.remove(fut)

    def counts(self, now: float) -> dict[str, int]:
        """Real robots by state, each counted once: active and parked (as commanded, lease alive), and
        lost (lease expired; such a robot runs its default state)."""
        out = {"active": 0, "parked": 0, "lost": 0}
        for robot in self.robots.values():
            out[robot.command.value if robot.alive(now, self.lease_s) else "lost"] += 1
        return out

    def lost(self, now: float) -> list[Robot]:
        return [r for r in self.robots.values() if not r.alive(now, self.lease_s)]

    # -- persistence ---------------------------------------------------------------------------------
    def to_records(self) -> list[dict[str, Any]]:
        return [{"robot": r.robot_id, "rank": r.rank, "default_state": r.default_state.value,
                 **({"key_sha256": r.key_hash.hex()} if r.key_hash is not None else {}),
                 **({"process": r.process, "dealt": r.dealt} if r.process is not None else {})}
                for r in sorted(self.robots.values(), key=lambda r: r.rank)]

    def restore(self, records: Iterable[dict[str, Any]], now: float) -> int:
        """Re-register robots saved by :meth:`to_records`; records that no longer fit are skipped.

        Restored robots count as seen now, so they get one lease to come back before they count as lost.
        """
        n = 0
        for rec in records:
            try:
                if not isinstance(rec["robot"], str):
                    continue  # str(None) would be the id "None"
                process = rec.get("process")
                robot = self.register(rec["robot"], now, rank=int(rec["rank"]),
                                      default_state=Command(rec.get("default_state", self.default_state.value)),
                                      process=process if isinstance(process, str) else None)
                robot.dealt = robot.process is not None and rec.get("dealt") is True
                digest = rec.get("key_sha256")
                robot.key_hash = bytes.fromhex(digest) if isinstance(digest, str) else None
                n += 1
            except (InputError, KeyError, ValueError, TypeError):
                continue
        return n
