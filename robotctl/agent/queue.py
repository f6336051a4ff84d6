"""The agent's view of the indexing queue, and windows of what it observed.

:class:`QueueView` counts the pages in the system (the one being indexed included): deliveries come
in with partial admission at capacity K (the overflow is counted as lost, as in paper 000),
completions and obsolete drops go out, and ``POST /v1/queue`` resynchronises it with the indexer's own
count. It keeps the arrival time of each page, first in first out, so that completions yield the
sojourn of served pages. Which waiting page went stale is not reported by the indexer; the view
assumes the oldest waiting page (the page in service never goes stale).

:class:`Window` sums counters and time integrals over a sliding window of time buckets, without
storing events; the agent keeps one over ``refit.window_s`` for the observed measures and one over
``refit.drift_window_s`` for the drift check.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from robotctl.model import Admission, Costs, Measures, cost_of


@dataclass(frozen=True)
class Admitted:
    """Outcome of one delivery at the buffer."""

    pages: int
    admitted: int
    lost: int
    length_after: int


class QueueView:
    """Pages in the system, FIFO arrival times, partial admission at ``capacity``."""

    def __init__(self, capacity: int, admission: Admission = Admission.PARTIAL) -> None:
        self.capacity = capacity
        self.admission = admission
        self.length = 0
        # [arrival time, pages] groups, oldest first; the first page of the first group is in service
        self._fifo: deque[list[float]] = deque()

    def preview(self, batches: list[int], start: int | None = None) -> list[Admitted]:
        """Admission of consecutive deliveries of ``batches`` pages, without changing the view."""
        i = self.length if start is None else start
        out = []
        for k, a in zip(batches, self.admitted(batches, i), strict=True):
            i += a
            out.append(Admitted(k, a, k - a, i))
        return out

    def admitted(self, batches: list[int], start: int | None = None) -> list[int]:
        """Pages admitted of each of consecutive deliveries of ``batches`` pages (the hot path of
        :meth:`preview`), without changing the view."""
        i = self.length if start is None else start
        cap = self.capacity
        out = []
        partial = self.admission is Admission.PARTIAL
        for n, k in enumerate(batches):
            free = cap - i
            if free == 0:  # full: nothing more of this batch gets in (a long batch into a small buffer)
                out += [0] * (len(batches) - n)
                break
            a = k if k <= free else (free if partial else 0)
            i += a
            out.append(a)
        return out

    def admit(self, admitted: int, now: float) -> None:
        """Add ``admitted`` pages (already limited by :meth:`preview`) arriving at ``now``."""
        if admitted <= 0:
            return
        if self._fifo and self._fifo[-1][0] == now:
            self._fifo[-1][1] += admitted
        else:
            self._fifo.append([now, float(admitted)])
        self.length += admitted

    def complete(self, pages: int, now: float) -> tuple[int, float]:
        """Remove up to ``pages`` served pages from the head; returns (removed, sum of their sojourns)."""
        removed = 0
        total = 0.0
        while removed < pages and self._fifo:
            head = self._fifo[0]
            take = int(min(head[1], pages - removed))
            total += take * (now - head[0])
            removed += take
            head[1] -= take
            if head[1] <= 0:
                self._fifo.popleft()
        self.length -= removed
        return removed, total

    def drop_obsolete(self, pages: int) -> int:
        """Remove up to ``pages`` waiting pages, oldest waiting first (never the page in service)."""
        waiting = self.length - 1 if self.length > 0 else 0
        k = min(pages, waiting)
        left = k
        idx = 0
        skip = 1  # the page in service
        while left > 0 and idx < len(self._fifo):
            group = self._fifo[idx]
            avail = int(group[1]) - skip
            skip = 0
            take = min(avail, left)
            group[1] -= take
            left -= take
            if group[1] <= 0:
                del self._fifo[idx]
            else:
                idx += 1
        self.length -= k
        return k

    def resync(self, length: int, now: float) -> int:
        """Set the length to the indexer's count; returns the change. Pages removed are taken from the
        head (assumed indexed unseen); pages added arrive now."""
        delta = length - self.length
        if delta > 0:
            self.admit(delta, now)
        elif delta < 0:
            left = -delta
            while left > 0 and self._fifo:
                head = self._fifo[0]
                take = int(min(head[1], left))
                head[1] -= take
                left -= take
                if head[1] <= 0:
                    self._fifo.popleft()
            self.length = length
        return delta


class Window:
    """Counters and time integrals over the last ``span_s`` seconds, in ``buckets`` time buckets.

    ``add(now, key, x)`` counts x at time now; ``hold(now, key, level)`` declares that ``key`` stays
    at ``level`` from now on (its integral over time accumulates); ``totals(now)`` sums both over the
    window [lo, now], lo the first bucket boundary after ``now - span_s`` (so the window's edge is as
    coarse as one bucket, span_s / buckets).

    Each key keeps a running total (for levels: the integral up to its last change, and the level
    since); at each bucket boundary the running totals are noted, and a window's sum is the running
    total now minus the note at its lower edge. Every call is O(1) except the one that crosses a
    boundary, which notes all keys once.
    """

    def __init__(self, span_s: float, buckets: int = 60) -> None:
        self.span_s = span_s
        self.width = span_s / buckets
        self.n = buckets
        self._counts: dict[str, float] = {}
        # key -> (level, time of the last change, integral up to that time)
        self._levels: dict[str, tuple[float, float, float]] = {}
        # bucket index b -> running totals at time b * width (counts, then level integrals)
        self._notes: dict[int, dict[str, float]] = {}
        self._next = -math.inf  # the next boundary not yet noted
        self._last_idx: int | None = None

    def _integral(self, key: str, t: float) -> float:
        level, t0, cum = self._levels[key]
        return cum + level * (t - t0)

    def _snapshot(self, t: float) -> dict[str, float]:
        snap = dict(self._counts)
        for key in self._levels:
            snap[key] = self._integral(key, t)
        return snap

    def _roll(self, now: float) -> None:
        """Note the running totals at every boundary up to ``now`` (the last n + 1 of them suffice)."""
        idx = math.floor(now / self.width)
        first = idx - self.n - 1 if self._last_idx is None else max(self._last_idx + 1, idx - self.n - 1)
        for b in range(first, idx + 1):
            self._notes[b] = self._snapshot(b * self.width)
        self._last_idx = idx
        self._next = (idx + 1) * self.width
        lo = idx - self.n - 1
        if len(self._notes) > self.n + 3:
            for old in [b for b in self._notes if b < lo]:
                del self._notes[old]

    def add(self, now: float, key: str, amount: float) -> None:
        if now >= self._next:
            self._roll(now)
        self._counts[key] = self._counts.get(key, 0.0) + amount

    def add_many(self, now: float, items: Mapping[str, float]) -> None:
        if now >= self._next:
            self._roll(now)
        counts = self._counts
        for key, amount in items.items():
            counts[key] = counts.get(key, 0.0) + amount

    def hold(self, now: float, key: str, level: float) -> None:
        if now >= self._next:
            self._roll(now)
        old = self._levels.get(key)
        if old is None:
            self._levels[key] = (level, now, 0.0)
        elif old[0] != level:
            self._levels[key] = (level, now, old[2] + old[0] * (now - old[1]))

    def cumulative(self, now: float) -> dict[str, float]:
        """Running totals since the first call (counters, and level integrals up to ``now``; ``now`` at or
        after the last call's time): differences of two readings are the totals between them, at any
        times (a replay cuts the whole trace into batches with them)."""
        return self._snapshot(now)

    def totals(self, now: float) -> dict[str, float]:
        """Sums over the window ending at ``now`` (``now`` at or after the last call's time)."""
        lo = math.floor((now - self.span_s) / self.width) + 1
        current = self._snapshot(now)
        if self._last_idx is not None and lo > self._last_idx:
            base = self._snapshot(lo * self.width)  # nothing happened since the boundary lo
        else:
            base = self._notes.get(lo, {})
        return {k: v - base.get(k, 0.0) for k, v in current.items()}


#: Keys the agent keeps in its observation window.
OFFERED, LOST, OBSOLETE, SERVED, SOJOURN, TIME, EMPTY, ACTIVE, WAITING, GIVEN_UP = (
    "offered", "lost", "obsolete", "served", "sojourn_sum", "time", "empty_time", "active_time",
    "waiting_time", "given_up")


def mode_time_key(mode: int) -> str:
    return f"mode_time:{mode}"


def mode_pages_key(mode: int) -> str:
    return f"mode_pages:{mode}"


def drift_reason(totals: Mapping[str, float], rates: Mapping[int, float], bound: float, min_pages: int
                 ) -> str | None:
    """Why the traffic of a drift window no longer matches the fitted rates, or None.

    The pages delivered in every mode together are compared with the pages the fitted rates (``rates``:
    pages per second by mode) predict for the time spent in each mode; the check fires when they differ
    by more than ``bound`` (relative), once ``min_pages`` pages are in. Not mode by mode: under a threshold
    policy a delivery that raises the queue past a threshold ends the stay of the mode in force, so short
    stays end with a delivery more often than their time alone would give, and one mode's pages over its
    own time overstate its rate (by 60% for mode 3 on the steady examples/trace.jsonl.gz, which tripped
    the check). Over all modes, pages and time are counted whole and that bias cancels."""
    pages = expected = 0.0
    modes = []
    for m, rate in sorted(rates.items()):
        t = totals.get(mode_time_key(m), 0.0)
        n = totals.get(mode_pages_key(m), 0.0)
        if t > 0 or n > 0:
            modes.append(m)
        pages += n
        expected += rate * t
    time = sum(totals.get(mode_time_key(m), 0.0) for m in modes)
    if pages < min_pages or expected <= 0 or time <= 0:
        return None
    if abs(pages - expected) / expected <= bound:
        return None
    which = f"mode={modes[0]}" if len(modes) == 1 else "modes=" + ",".join(map(str, modes))
    return f"drift {which} observed_rate={pages / time:.4g} fitted_rate={expected / time:.4g}"


@dataclass(frozen=True)
class Observed:
    """Measures observed over a window, named as the model core's :class:`model.Measures`.

    ``nan`` where the window holds nothing to measure (no pages offered, none served). ``given_up_pages``
    are pages the crawler gave up on (``POST /v1/given_up``): never fetched, never offered to the indexer,
    so outside every ratio, but in ``cost``, each at the loss weight (a page never fetched is a page never
    indexed, like a page lost): ``cost = J + costs.loss * given_up_pages / window_s``, so that a policy
    cannot look cheap by not crawling. ``cost_model`` is J alone, the part the queueing model predicts.
    """

    window_s: float
    arrival_rate: float
    p_loss: float
    p_obsolete: float
    p_starvation: float
    mean_active_robots: float
    mean_response_served: float
    offered_pages: int
    served_pages: int
    cost: float
    given_up_pages: int = 0
    cost_model: float = math.nan

    def to_dict(self) -> dict[str, float | int | None]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in self.__dict__.items()}


def observed_measures(totals: dict[str, float], costs: Costs) -> Observed:
    """The observed counterparts of the predicted measures, from :meth:`Window.totals`."""
    nan = math.nan
    time = totals.get(TIME, 0.0)
    offered = totals.get(OFFERED, 0.0)
    served = totals.get(SERVED, 0.0)
    rate = offered / time if time > 0 else nan
    p_loss = totals.get(LOST, 0.0) / offered if offered > 0 else nan
    p_obs = totals.get(OBSOLETE, 0.0) / offered if offered > 0 else nan
    p_star = totals.get(EMPTY, 0.0) / time if time > 0 else nan
    n_act = totals.get(ACTIVE, 0.0) / time if time > 0 else nan
    resp = totals.get(SOJOURN, 0.0) / served if served > 0 else nan
    m = Measures(arrival_rate=rate, p_loss=p_loss, p_obsolete=p_obs, p_success=nan, p_starvation=p_star,
                 mean_active_robots=n_act, active_robots_distribution=(), queue_length_distribution=(),
                 mean_queue_length=nan, mean_response_served=resp, mean_sojourn_obsolete=nan,
                 mean_sojourn=nan)
    model_cost = cost_of(m, costs).total
    given_up = totals.get(GIVEN_UP, 0.0)
    given_up_cost = costs.loss * given_up / time if time > 0 else (0.0 if given_up == 0 else math.nan)
    return Observed(time, rate, p_loss, p_obs, p_star, n_act, resp, int(offered), int(served),
                    model_cost + given_up_cost, int(given_up), model_cost)


def window_cost_interval(window: Window, now: float, costs: Costs, *, batches: int = 10,
                         level: float = 0.95) -> tuple[float, float, float] | None:
    """The cost J observed over the window ending at ``now``, with its interval by batch means: the window's
    buckets (their running totals noted at each boundary) grouped into ``batches`` batches of time, J's ratio
    estimated by the delta method (:func:`model.linear_ratio_estimate`, as a replay does for the recorded
    fleet). None when fewer than 2 batches of the window have been noted (issue 27's model check then says
    ``uncertain``)."""
    from robotctl.model import linear_ratio_estimate

    lo = math.floor((now - window.span_s) / window.width) + 1
    marks = sorted(b for b in window._notes if b >= lo)
    if len(marks) < 3:
        return None
    notes = [window._notes[b] for b in marks] + [window._snapshot(now)]
    keys = (TIME, OFFERED, LOST, OBSOLETE, SERVED, SOJOURN, EMPTY, ACTIVE)
    vals = np.array([[n.get(k, 0.0) for k in keys] for n in notes])
    deltas = np.diff(vals, axis=0)
    b = min(batches, deltas.shape[0])
    if b < 2:
        return None
    Z = np.array([deltas[g].sum(axis=0) for g in np.array_split(np.arange(deltas.shape[0]), b)])
    col = {k: Z[:, j] for j, k in enumerate(keys)}
    if np.any(col[TIME] <= 0) or (np.any(col[SERVED] <= 0) and costs.response > 0):
        return None
    est = linear_ratio_estimate([
        (costs.loss, col[LOST], col[TIME]), (costs.obsolescence, col[OBSOLETE], col[TIME]),
        (costs.response, col[SOJOURN], col[SERVED]), (costs.robot, col[ACTIVE], col[TIME]),
        (costs.starvation, col[EMPTY], col[TIME])], level=level)
    if not all(math.isfinite(x) for x in (est.value, est.low, est.high)):
        return None
    return float(est.value), float(est.low), float(est.high)
