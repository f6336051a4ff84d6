"""The mode history: the number of active virtual robots over time, as stretches of one mode, for the exact
time spent in each mode (:meth:`ModeHistory.exposure`) and the mode trajectory a fit reads
(:meth:`ModeHistory.changes`, fitting.ModeTrajectory's arrays).

The trajectory is the fleet's own, not only the commanded one: a robot that delivers after it was parked
had a fetch under way at the park (a Scrapy crawl's downloads in flight finish; a robot learns its command
at its next poll), so it was working until that delivery. :meth:`ModeHistory.drained` records it, and the
mode counts its virtual robot from the park to the delivery (a *drain*). Its pages then count where the
robot's time does: counted in the fewer robots' mode instead, they made one robot's rate look twice what
it is, and the refit then ran one robot at every queue length.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray


class ModeHistory:
    """(start time, mode) of every stretch of one commanded mode over the last ``keep_s`` seconds (and the
    one in force then), and the drains of parked virtual robots (see the module docstring); the readings
    (:meth:`exposure`, :meth:`changes`, :meth:`at`) are of the mode with the drains counted."""

    def __init__(self, now: float, mode: int, keep_s: float) -> None:
        self.keep_s = keep_s
        self._segments: deque[tuple[float, int]] = deque([(now, mode)])
        #: (virtual robot, its park time) -> its last delivery since (the drain's end)
        self._drains: dict[tuple[int, float], float] = {}
        #: :meth:`_effective`'s stretches, until the next record or drain
        self._cached: list[tuple[float, int]] | None = None

    def record(self, now: float, mode: int) -> None:
        """The commanded mode is ``mode`` from ``now`` on."""
        self._cached = None
        segs = self._segments
        if segs and segs[-1][0] == now:
            segs.pop()
        if not segs or segs[-1][1] != mode:
            segs.append((now, mode))
        horizon = now - self.keep_s
        while len(segs) > 1 and segs[1][0] < horizon:
            segs.popleft()
        if self._drains:
            self._drains = {k: end for k, end in self._drains.items() if end >= horizon}

    def drained(self, now: float, slot: int, parked_at: float) -> None:
        """Virtual robot ``slot``, parked at ``parked_at`` and not resumed since, delivered at ``now``: it
        counts as active from ``parked_at`` until ``now`` (its delivery included). A park before the
        history's start (or in the future) is not on record and is ignored."""
        if not self._segments[0][0] <= parked_at <= now:
            return
        key = (slot, parked_at)
        if self._drains.get(key, -np.inf) < now:
            self._drains[key] = now
            self._cached = None

    def _effective(self) -> list[tuple[float, int]]:
        """The stretches of the mode with the drains counted: each drain adds one robot from its park to
        its last delivery (which counts in it: a delivery counts in the mode just before it, :meth:`at`)."""
        if self._cached is not None:
            return self._cached
        self._cached = self._stretches()
        return self._cached

    def _stretches(self) -> list[tuple[float, int]]:
        segs = list(self._segments)
        if not self._drains:
            return segs
        steps: dict[float, int] = {}
        for (_, start), end in self._drains.items():
            steps[start] = steps.get(start, 0) + 1
            steps[end] = steps.get(end, 0) - 1
        epochs = sorted({s for s, _ in segs} | {t for t in steps if t >= segs[0][0]})
        out: list[tuple[float, int]] = []
        k, extra = 0, sum(d for t, d in steps.items() if t < segs[0][0])
        for t in epochs:
            while k + 1 < len(segs) and segs[k + 1][0] <= t:
                k += 1
            extra += steps.get(t, 0)
            mode = segs[k][1] + extra
            if not out or out[-1][1] != mode:
                out.append((t, mode))
        return out

    def exposure(self, t0: float, t1: float) -> dict[int, float]:
        """Seconds spent in each mode between ``t0`` and ``t1`` (exact, from the mode changes)."""
        out: dict[int, float] = {}
        segs = self._effective()
        for k, (start, mode) in enumerate(segs):
            end = segs[k + 1][0] if k + 1 < len(segs) else t1
            a, b = max(start, t0), min(end, t1)
            if b > a:
                out[mode] = out.get(mode, 0.0) + (b - a)
        return out

    def changes(self, t0: float, t1: float) -> tuple[NDArray[np.float64], NDArray[np.int64]] | None:
        """The mode over ``t0``..``t1`` as (epochs, modes): ``t0`` with the mode in force then, and every
        change of mode after it up to ``t1`` (fitting.ModeTrajectory's arrays). None when the record of
        modes starts after ``t0``: a window that reaches back before a restart (the recovered deliveries'
        time is not on record), which the fit then treats by :meth:`exposure` instead."""
        segs = self._effective()
        if not segs or segs[0][0] > t0:
            return None
        starts = np.array([s for s, _ in segs], dtype=float)
        modes = np.array([m for _, m in segs], dtype=np.int64)
        k = int(np.searchsorted(starts, t0, side="right")) - 1
        inside = (starts > t0) & (starts <= t1)
        return np.concatenate([[t0], starts[inside]]), np.concatenate([[modes[k]], modes[inside]])

    def at(self, times: NDArray[np.float64]) -> NDArray[np.int64] | None:
        """The mode each delivery at ``times`` counts in: the one in force just before it (a change at the
        same instant is the delivery's own doing: its page moved the queue across a threshold, as the
        mode logged with it says), a drain through it included; None when the record of modes starts
        after the first of them."""
        segs = self._effective()
        if times.size == 0 or segs[0][0] > float(np.min(times)):
            return None
        starts = np.array([s for s, _ in segs], dtype=float)
        modes = np.array([m for _, m in segs], dtype=np.int64)
        return modes[np.maximum(np.searchsorted(starts, times, side="left") - 1, 0)]


def history_from_log(lines: Sequence[Mapping[str, Any]], slot_of: Callable[[str], int], end: float,
                     keep_s: float) -> ModeHistory | None:
    """The mode history of the window a restarted agent recovered from its log, ending at the last line
    ``end`` (the agent stopped then: the history says mode 0 from there until the new start records its
    mode, so that the time the agent was down counts in no mode the fit reads). ``lines`` are the log's
    park, resume and delivery lines in order, each with its ``active`` (the mode after a park or resume,
    in force at a delivery); a delivery that names a robot parked by an earlier line of them drains it,
    as :meth:`ModeHistory.drained` live (``slot_of`` gives a robot's virtual robot). None without a line
    that says its mode (a log written before modes were logged)."""
    lines = [x for x in lines if isinstance(x.get("active"), int) and not isinstance(x.get("active"), bool)]
    if not lines:
        return None
    history = ModeHistory(float(lines[0]["t"]), int(lines[0]["active"]), keep_s)
    parked: dict[str, float] = {}
    for line in lines:
        t, robot = float(line["t"]), line.get("robot")
        event = line.get("event")
        if event == "delivery":
            if isinstance(robot, str) and robot in parked:
                history.drained(t, slot_of(robot), parked[robot])
            continue
        history.record(t, int(line["active"]))
        if isinstance(robot, str):
            if event == "park":
                parked.setdefault(robot, t)
            else:
                parked.pop(robot, None)
    history.record(max(end, float(lines[-1]["t"])), 0)
    return history


__all__ = ["ModeHistory", "history_from_log"]
