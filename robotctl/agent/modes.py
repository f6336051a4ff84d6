"""The mode history: the number of active virtual robots over time, as stretches of one mode, for the exact
time spent in each mode (:meth:`ModeHistory.exposure`) and the mode trajectory a fit reads
(:meth:`ModeHistory.changes`, fitting.ModeTrajectory's arrays)."""

from __future__ import annotations

from collections import deque

import numpy as np
from numpy.typing import NDArray


class ModeHistory:
    """(start time, mode) of every stretch of one mode over the last ``keep_s`` seconds (and the one
    in force then)."""

    def __init__(self, now: float, mode: int, keep_s: float) -> None:
        self.keep_s = keep_s
        self._segments: deque[tuple[float, int]] = deque([(now, mode)])

    def record(self, now: float, mode: int) -> None:
        """The mode is ``mode`` from ``now`` on."""
        segs = self._segments
        if segs and segs[-1][0] == now:
            segs.pop()
        if not segs or segs[-1][1] != mode:
            segs.append((now, mode))
        horizon = now - self.keep_s
        while len(segs) > 1 and segs[1][0] < horizon:
            segs.popleft()

    def exposure(self, t0: float, t1: float) -> dict[int, float]:
        """Seconds spent in each mode between ``t0`` and ``t1`` (exact, from the mode changes)."""
        out: dict[int, float] = {}
        segs = list(self._segments)
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
        segs = list(self._segments)
        if not segs or segs[0][0] > t0:
            return None
        starts = np.array([s for s, _ in segs], dtype=float)
        modes = np.array([m for _, m in segs], dtype=np.int64)
        k = int(np.searchsorted(starts, t0, side="right")) - 1
        inside = (starts > t0) & (starts <= t1)
        return np.concatenate([[t0], starts[inside]]), np.concatenate([[modes[k]], modes[inside]])


__all__ = ["ModeHistory"]
