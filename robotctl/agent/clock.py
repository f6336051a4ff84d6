"""Clocks and timers for the agent: the real clock, a manual one that tests advance by hand, and a
scheduler of one-shot timers on either.

Every timestamp, lease, dwell timer and refit deadline in the agent goes through a :class:`Clock`,
and every deferred action (the end of a dwell) through a :class:`Scheduler`, both injected, so that
a test runs the same code against simulated time.

``now()`` is in seconds and never goes backwards within one process. The real clock is the
monotonic clock anchored at the wall-clock time of start, so that its readings look like Unix times
and stay comparable across restarts (``MonotonicClock(not_before=...)`` keeps a restarted agent's
times after the last one in its log even if the wall clock was set back).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """What the agent needs from a clock."""

    def now(self) -> float:
        """Seconds; non-decreasing."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once ``now()`` has advanced by ``seconds`` (at least one loop iteration for <= 0)."""
        ...


class MonotonicClock:
    """The monotonic clock, shifted so that its first reading is the wall-clock time (or ``not_before``
    if that is later)."""

    def __init__(self, *, not_before: float | None = None) -> None:
        wall = time.time()
        if not_before is not None and not_before > wall:
            wall = not_before
        self._offset = wall - time.monotonic()

    def now(self) -> float:
        return time.monotonic() + self._offset

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock that moves only when told: ``advance(dt)`` or ``set(t)``.

    Sleepers wake, in deadline order, when the clock reaches their deadline; they resume at the
    event loop's next iterations, so after advancing a test lets the loop run
    (``await asyncio.sleep(0)`` or :meth:`settle`).
    """

    def __init__(self, start: float = 0.0) -> None:
        self._t = float(start)
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._t

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._t + seconds, next(self._seq), fut))
        await fut

    def set(self, t: float) -> None:
        """Move to time ``t`` (never backwards) and wake the sleepers that are due."""
        if t < self._t:
            raise ValueError(f"ManualClock.set: t = {t} is before now = {self._t}; a clock never goes back")
        self._t = float(t)
        while self._sleepers and self._sleepers[0][0] <= self._t:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    def advance(self, seconds: float) -> None:
        """Move forward by ``seconds`` >= 0."""
        if seconds < 0:
            raise ValueError(f"ManualClock.advance: seconds = {seconds} < 0; a clock never goes back")
        self.set(self._t + seconds)

    @property
    def next_deadline(self) -> float | None:
        """The earliest pending sleeper's deadline, if any."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    @staticmethod
    async def settle(rounds: int = 5) -> None:
        """Let the event loop run a few iterations so woken tasks can proceed."""
        for _ in range(rounds):
            await asyncio.sleep(0)


class Scheduler(Protocol):
    """Calls a callback at a time of the agent's clock (the agent's dwell timer)."""

    def call_at(self, deadline: float, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the clock reaches ``deadline``. A pending call of the same callback
        is kept when its deadline is the same, and replaced otherwise."""
        ...


class TaskScheduler:
    """:class:`Scheduler` on a clock, one asyncio task per pending callback (needs a running loop).

    :meth:`close` cancels what is pending; call it before the event loop ends.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._pending: dict[Callable[[], None], tuple[float, asyncio.Task[None]]] = {}

    def call_at(self, deadline: float, callback: Callable[[], None]) -> None:
        held = self._pending.get(callback)
        if held is not None and not held[1].done():
            if held[0] == deadline:
                return
            held[1].cancel()
        self._pending[callback] = (deadline, asyncio.create_task(self._fire(deadline, callback)))

    async def _fire(self, deadline: float, callback: Callable[[], None]) -> None:
        await self.clock.sleep(max(0.0, deadline - self.clock.now()))
        callback()

    async def close(self) -> None:
        """Cancel every pending call and wait until each has ended."""
        tasks = [task for _, task in self._pending.values()]
        self._pending.clear()
        for task in tasks:
            await cancel_and_wait(task)


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel a background task and wait for it, surfacing errors other than the cancellation."""
    if task is None:
        return
    task.cancel()
    # a task may absorb one cancellation (e.g. one that lands as an awaited result arrives): cancel
    # again until it has really ended
    while not task.done():
        await asyncio.wait({task}, timeout=1.0)
        if not task.done():
            task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
