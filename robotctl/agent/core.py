"""The agent's state and the walk of one delivery (DESIGN.md), without HTTP.

:class:`Agent` owns the queue view, the actuator, the policy holder, the recent samples for fitting
and the observation windows, and writes every input to the delivery log. Each mutating method is
synchronous up to the log write and follows one order:

1. validate (done by :mod:`agent.api` before the call) and stamp with the clock;
2. compute what changes (admission at K) without changing anything;
3. append the lines to the delivery log — if that fails, nothing has changed and the error propagates;
4. apply: queue view, counters, samples, windows, then the actuator (park/resume lines follow);
5. the caller awaits :meth:`DeliveryLog.commit` before acknowledging.

The HTTP layer (:mod:`agent.app`) is a thin shell around it: it calls only the public methods below
(the walk of a delivery, robots and their long-polls, the policy and status views, shutdown) and
never the agent's state. Time comes from the injected :class:`~agent.clock.Clock` and deferred work
(the end of a dwell) goes to the injected :class:`~agent.clock.Scheduler`, so tests drive the same
object with a :class:`~agent.clock.ManualClock`, with or without an event loop.

The refit loop (:mod:`agent.refit`) sees the agent as a :class:`~agent.refit.RefitTarget`: it asks for
the fit window (:meth:`Agent.refit_input`) and the drift (:meth:`Agent.drift`), and hands back a
:class:`~agent.policy.PolicyFit` to adopt (:meth:`Agent.adopt`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
from collections import deque
from collections.abc import Awaitable, KeysView, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl.model import Admission, InputError, ThresholdPolicy

from .actuator import Actuator, Command, Robot
from .api import Completion, Delivery, NotFoundError
from .clock import Clock, Scheduler
from .compute import RefitInput
from .config import AgentConfig
from .control import ACTIONS, ControlState, Override
from .log import DeliveryLog, DiscardLog, Durability, LogStats
from .policy import DynamicDecision, Event, PolicyFit, PolicyHolder, PolicySnapshot, ThresholdDecision
from .queue import (
    ACTIVE,
    EMPTY,
    LOST,
    OBSOLETE,
    OFFERED,
    SERVED,
    SOJOURN,
    TIME,
    WAITING,
    Observed,
    QueueView,
    Window,
    mode_pages_key,
    mode_time_key,
    observed_measures,
)

LOG = logging.getLogger("robotctl.agent")

ROBOTS_FILE = "robots.json"
POLICY_FILE = "policy.json"


class Ring:
    """Fixed-capacity columns, oldest overwritten first; rows are appended in time order.

    ``columns`` names float columns (a missing value is NaN), or maps names to numpy dtypes (integer
    columns hold 0 for a missing value; they are for values that are always given).
    """

    def __init__(self, capacity: int, columns: Sequence[str] | Mapping[str, Any]) -> None:
        self.capacity = capacity
        dtypes = dict(columns) if isinstance(columns, Mapping) else dict.fromkeys(columns, np.float64)
        self.cols: dict[str, NDArray[Any]] = {
            c: np.full(capacity, np.nan if np.dtype(dt).kind == "f" else 0, dtype=dt) for c, dt in dtypes.items()}
        self._missing = {c: (math.nan if arr.dtype.kind == "f" else 0) for c, arr in self.cols.items()}
        self._scratch: dict[str, NDArray[Any]] = {}
        self.n = 0  # rows ever appended

    def append(self, **row: float) -> None:
        i = self.n % self.capacity
        missing = self._missing
        for c, arr in self.cols.items():
            arr[i] = row.get(c, missing[c])
        self.n += 1

    def extend(self, rows: dict[str, Sequence[float]], count: int) -> None:
        if count <= 0:
            return
        if count >= self.capacity:
            rows = {c: v[-self.capacity:] for c, v in rows.items()}
            self.n += count - self.capacity
            count = self.capacity
        start = self.n % self.capacity
        first = min(count, self.capacity - start)
        for c, arr in self.cols.items():
            values = rows.get(c)
            if values is None:
                arr[start:start + first] = self._missing[c]
                arr[: count - first] = self._missing[c]
            else:
                v = np.asarray(values, dtype=arr.dtype)
                arr[start:start + first] = v[:first]
                arr[: count - first] = v[first:]
        self.n += count

    def __len__(self) -> int:
        return min(self.n, self.capacity)

    def since(self, t0: float, time_col: str = "t", columns: Sequence[str] | None = None, *,
              scratch: bool = False) -> dict[str, NDArray[Any]]:
        """Copies of the rows with ``time_col >= t0``, oldest first (one copy per column: the rows are in
        time order, so the cut is a binary search in each of the ring's two stretches).

        With ``scratch``, the copies are views of buffers the ring keeps for the purpose and overwrites
        at the next such call: no fresh memory (and no page faults) on the event loop. The refit uses
        them; the next refit starts only after the previous one is done with them.
        """
        names = list(self.cols) if columns is None else list(columns)
        size = len(self)
        if size == 0:
            return {c: np.empty(0) for c in names}
        start = self.n % self.capacity if self.n > self.capacity else 0
        t = self.cols[time_col]
        # chronological order: [start:size] then [0:start]
        older, newer = (start, size), (0, start)
        a = older[0] + int(np.searchsorted(t[older[0]:older[1]], t0, side="left"))
        b = newer[0] + int(np.searchsorted(t[newer[0]:newer[1]], t0, side="left"))
        out = {}
        for c in names:
            arr = self.cols[c]
            parts = (arr[a:older[1]], arr[b:newer[1]]) if start else (arr[a:size],)
            if scratch:
                buf = self._scratch.get(c)
                if buf is None:
                    buf = self._scratch[c] = np.empty(self.capacity, dtype=arr.dtype)
                k = 0
                for part in parts:
                    buf[k:k + part.size] = part
                    k += part.size
                out[c] = buf[:k]
            else:
                out[c] = np.concatenate(parts) if len(parts) > 1 else parts[0].copy()
        return out


@dataclass
class Totals:
    """Counters since the agent started (exported as Prometheus counters)."""

    deliveries: int = 0
    pages: int = 0
    bytes: int = 0
    admitted: int = 0
    lost: int = 0
    completions: int = 0
    completed_pages: int = 0
    completed_unmatched: int = 0
    service_seconds: float = 0.0
    obsolete: int = 0
    obsolete_unmatched: int = 0
    resyncs: int = 0
    bad_requests: dict[str, int] = field(default_factory=dict)
    recovered_deliveries: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _atomic_write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _fmt(x: float) -> str:
    return repr(float(x))


class Agent:
    """See the module docstring.

    Parameters
    ----------
    config : AgentConfig
    clock : Clock
    log : DeliveryLog, optional
        Built from ``config.log`` when omitted; :meth:`open` opens it and recovers from it.
    scheduler : Scheduler, optional
        Wakes the agent when a deferred change of mode is due (``robots.dwell_s``); without one, a
        deferred change waits for the next event.
    persist : bool
        Keep ``robots.json`` and ``policy.json`` in ``log.dir`` (and restore them at :meth:`open`); False
        for an agent that replays a recorded trace and must leave the live agent's state alone.
    """

    def __init__(self, config: AgentConfig, clock: Clock, *, log: DeliveryLog | DiscardLog | None = None,
                 scheduler: Scheduler | None = None, persist: bool = True) -> None:
        self.config = config
        self.clock = clock
        self.persist = persist
        self.state_dir = Path(config.log.dir)
        self.log: DeliveryLog | DiscardLog = log if log is not None else DeliveryLog(
            self.state_dir, max_bytes=config.log.max_bytes, keep_files=config.log.keep_files,
            durability=Durability(config.log.fsync), fsync_interval_s=config.log.fsync_interval_ms / 1000.0,
            header=self._header)
        if self.log.header is None:
            self.log.header = self._header
        self.queue = QueueView(config.capacity, config.admission)
        startup = config.startup_policy()
        now = clock.now()
        self.holder = PolicyHolder(PolicySnapshot.initial(startup, now, hysteresis=self._fixed_hysteresis))
        rc = config.robots
        self.actuator = Actuator(rc.n, fixed_ids=rc.ids, group_size=rc.group_size,
                                 default_state=Command(rc.default_state), lease_s=rc.lease_s,
                                 dwell_s=rc.dwell_s if isinstance(rc.dwell_s, float) else 0.0,
                                 max_commands_per_min=rc.max_commands_per_min,
                                 initial_mode=startup.robots_at_level[0], listener=self._on_command)
        if config.control.mode == "advise":
            self.actuator.advise = True
            self.actuator.mode = self.actuator.fleet_mode()
        self.totals = Totals()
        self.deliveries = Ring(config.refit.max_samples, {"t": np.float64, "pages": np.int32, "mode": np.int16,
                                                          "client_t": np.float64, "bytes": np.float64})
        self.completions = Ring(config.refit.max_samples, ("t", "service_s", "bytes"))
        self.window = Window(config.refit.window_s)
        self.drift_window = Window(config.refit.drift_window_s, buckets=30)
        self.started_at = now
        self._last_t = -math.inf
        self._robot_json: dict[str, str] = {}
        self._pending_lines: list[str] = []
        self._mode_line_pending = False  # a park/resume line of the current change of mode is pending
        self._scheduler = scheduler
        self._control = ControlState(since=now)
        self._ready = False
        # (start time, mode) of every stretch of one mode, for the exact time spent in each mode
        self._segments: deque[tuple[float, int]] = deque([(now, self.actuator.mode)])
        self._policy_write: asyncio.Future[None] | None = None

    # -- life cycle ----------------------------------------------------------------------------------
    def open(self) -> None:
        """Open the log, recover the queue view and recent samples from it, restore robots and the last
        adopted policy; then start the time integrals."""
        segments = self.log.open()
        self._recover(segments)
        now = self._stamp()
        self._restore_policy(now)
        snap = self.holder.current
        r = snap.policy.robots_at_level
        q = self.queue.length
        self.actuator.mode = self.actuator.target = snap.decision.target(Event.OTHER, (), q,
                                                                         r[min(q, len(r) - 1)])
        self._restore_robots(now)
        if self.actuator.advise:
            self.actuator.mode = self.actuator.fleet_mode()
        for w in (self.window, self.drift_window):
            w.hold(now, TIME, 1.0)
        self._hold_mode(now, None, self.actuator.mode)
        self._queue_changed(now)
        self._ready = True

    async def close(self) -> None:
        self._ready = False
        if self._policy_write is not None:
            await self._policy_write
        now = self._stamp()
        self.actuator.shutdown(now)
        self._flush_pending()
        self._save_robots()
        await self.log.close()

    def _header(self) -> bytes:
        return (f'{{"t":{_fmt(max(self._last_t, self.clock.now()))},"event":"queue",'
                f'"pages":{self.queue.length},"active":{self.actuator.mode}}}\n').encode()

    def _stamp(self) -> float:
        t = self.clock.now()
        if t < self._last_t:
            t = self._last_t
        self._last_t = t
        return t

    # -- recovery ------------------------------------------------------------------------------------
    def _recover(self, segments: list[Path]) -> None:
        if not segments:
            return
        records = self.log.records(segments[-1])
        last_t = max((float(r["t"]) for r in records), default=-math.inf)
        # the newest file alone rebuilds the queue (it starts with a queue checkpoint, or is the first)
        q = QueueView(self.config.capacity, self.config.admission)
        for r in records:
            kind = r.get("event")
            t = float(r["t"])
            pages = int(r.get("pages", 1) or 0)
            if kind == "queue":
                q.resync(min(max(pages, 0), q.capacity), t)
            elif kind == "delivery":
                q.admit(q.preview([pages])[0].admitted, t)
            elif kind == "completion":
                q.complete(pages, t)
            elif kind == "obsolete":
                q.drop_obsolete(pages)
        self.queue = q
        # recent deliveries for the next fit: newest files first until the window or the ring is full
        cutoff = last_t - self.config.refit.window_s
        chunks: list[list[dict[str, Any]]] = [records]
        for seg in reversed(segments[:-1]):
            have = sum(1 for c in chunks for r in c if r.get("event") == "delivery")
            if (chunks[-1] and float(chunks[-1][0]["t"]) <= cutoff) or have >= self.deliveries.capacity:
                break
            chunks.append(self.log.records(seg))
        n = 0
        for chunk in reversed(chunks):
            for r in chunk:
                t = float(r["t"])
                if t < cutoff:
                    continue
                kind = r.get("event")
                if kind == "delivery":
                    pages = int(r.get("pages", 1))
                    self.deliveries.append(t=t, pages=pages, mode=int(r.get("active", 0)),  # 0: not logged
                                           client_t=float(r.get("client_t", math.nan)),
                                           bytes=float(r.get("bytes", math.nan)))
                    n += 1
                elif kind == "completion":
                    pages = max(1, int(r.get("pages", 1)))
                    svc = r.get("service_s")
                    size = r.get("bytes")
                    self.completions.append(t=t,
                                            service_s=float(svc) / pages if svc is not None else math.nan,
                                            bytes=float(size) / pages if size is not None else math.nan)
        self.totals.recovered_deliveries = n
        self._last_t = max(self._last_t, last_t)
        LOG.info("event=recovered files=%d queue=%d deliveries_in_window=%d last_t=%s", len(segments),
                 self.queue.length, n, last_t)

    def _restore_robots(self, now: float) -> None:
        path = self.state_dir / ROBOTS_FILE
        if not self.persist or not path.exists():
            return
        try:
            records = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            LOG.warning("event=robots_file_unreadable file=%s error=%s", path, exc)
            return
        n = self.actuator.restore(records if isinstance(records, list) else [], now)
        LOG.info("event=robots_restored count=%d", n)

    def _restore_policy(self, now: float) -> None:
        if not self.config.policy.restore or not self.persist:
            return
        path = self.state_dir / POLICY_FILE
        if not path.exists():
            return
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
            policy = ThresholdPolicy(tuple(state["robots_at_level"]))
            if policy.capacity != self.config.capacity or max(policy.robots_at_level) > self.config.robots.n:
                raise InputError("policy", "does not fit the configured capacity or fleet", "")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            LOG.warning("event=policy_file_ignored file=%s error=%s", path, exc)
            return
        fit = dict(state.get("fit", {}))
        dynamic = self._restore_dynamic(state, fit)
        self.holder.swap(PolicySnapshot(int(state.get("version", 1)), "restored", now,
                                        replace(PolicyFit.of(policy, fit=fit, hysteresis=self._hysteresis_of(fit)),
                                                dynamic=dynamic)))
        LOG.info("event=policy_restored policy=%s control=%s", policy, "mdp" if dynamic else "thresholds")

    @property
    def _fixed_hysteresis(self) -> int:
        """``robots.hysteresis`` when it is a number; 0 for ``auto`` until a fit chooses it."""
        h = self.config.robots.hysteresis
        return 0 if h == "auto" else int(h)

    def _hysteresis_in_force(self) -> int:
        decision = self.holder.current.decision
        return decision.hysteresis if isinstance(decision, ThresholdDecision) else 0

    def _hysteresis_of(self, fit: Mapping[str, Any]) -> int:
        """The hysteresis of a restored policy: the one its fit chose under ``auto``, else the configured one."""
        if self.config.robots.hysteresis != "auto":
            return self._fixed_hysteresis
        damping = fit.get("damping")
        chosen = damping.get("hysteresis", 0) if isinstance(damping, Mapping) else 0
        return chosen if isinstance(chosen, int) and not isinstance(chosen, bool) and chosen >= 0 else 0

    def _restore_dynamic(self, state: Mapping[str, Any], fit: dict[str, Any]) -> DynamicDecision | None:
        """The saved MDP policy when ``policy.control: mdp`` still asks for it and it fits the configuration;
        else None (the thresholds saved with it apply), with the reason in ``fit["control"]``."""
        saved = state.get("dynamic")
        if saved is None:
            return None
        reason = "policy.control is thresholds"
        if self.config.policy.control == "mdp":
            try:
                return DynamicDecision.from_state(saved, self.config.capacity, self.config.robots.n)
            except (InputError, KeyError, TypeError, ValueError) as exc:
                reason = f"the saved MDP policy could not be restored: {exc}"
        LOG.warning("event=mdp_policy_not_restored reason=%r", reason)
        fit["control"] = {**fit.get("control", {}), "requested": self.config.policy.control,
                          "in_force": "thresholds", "reason": reason}
        return None

    def _save_robots(self) -> None:
        if not self.persist:
            return
        with contextlib.suppress(OSError):
            _atomic_write_json(self.state_dir / ROBOTS_FILE, self.actuator.to_records())

    # -- the walk of one delivery --------------------------------------------------------------------
    def _rid(self, robot: str | None) -> str:
        if robot is None:
            return ""
        s = self._robot_json.get(robot)
        if s is None:
            s = f',"robot":{json.dumps(robot)}'
            if len(self._robot_json) < 100_000:
                self._robot_json[robot] = s
        return s

    def deliver(self, items: Sequence[Delivery]) -> dict[str, Any]:
        """Stamp, log and apply validated deliveries (step 1 of the walk); the caller then awaits
        :meth:`commit` before acknowledging. One delivery takes :meth:`_deliver_one`, a batch the
        lines below; the ack of one delivery from a robot also carries the robot's command."""
        if len(items) == 1:
            return self._deliver_one(items[0])
        now = self._stamp()
        mode = self.actuator.mode
        page_counts = [d.pages for d in items]
        admitted = self.queue.admitted(page_counts)
        head = f'{{"t":{_fmt(now)},"event":'
        tail = f',"active":{mode}}}\n'
        rid_of = self._rid
        lines = []
        for d, a in zip(items, admitted, strict=True):
            rid = rid_of(d.robot)
            extra = ""
            if d.bytes is not None:
                extra = f',"bytes":{d.bytes}'
            if d.client_time is not None:
                extra += f',"client_t":{d.client_time!r}'
            lines.append(f'{head}"delivery"{rid},"pages":{d.pages}{extra}{tail}')
            if a < d.pages:
                lines.append(f'{head}"loss"{rid},"pages":{d.pages - a}{tail}')
        self.log.append("".join(lines).encode())
        # -- apply
        pages = sum(page_counts)
        got = sum(admitted)
        lost = pages - got
        nbytes = sum(d.bytes for d in items if d.bytes is not None)
        tot = self.totals
        tot.deliveries += len(items)
        tot.pages += pages
        tot.bytes += nbytes
        tot.admitted += got
        tot.lost += lost
        before = list(accumulate(admitted[:-1], initial=self.queue.length))
        self.queue.admit(got, now)
        n = len(items)
        self.deliveries.extend({"t": [now] * n, "pages": page_counts, "mode": [mode] * n,
                                "client_t": [math.nan if d.client_time is None else d.client_time for d in items],
                                "bytes": [math.nan if d.bytes is None else d.bytes for d in items]}, n)
        counts = {OFFERED: pages, LOST: lost, mode_pages_key(mode): pages}
        self.window.add_many(now, counts)
        self.drift_window.add_many(now, counts)
        self._queue_changed(now, Event.ARRIVAL, before)
        return {"accepted": n, "pages": pages, "admitted": got, "lost": lost, "t": now,
                "queue": self.queue.length, "active": self.actuator.mode}

    def _deliver_one(self, d: Delivery) -> dict[str, Any]:
        """:meth:`deliver` for one delivery: the same steps, written out for the most common request."""
        now = self._stamp()
        mode = self.actuator.mode
        q = self.queue
        pages = d.pages
        free = q.capacity - q.length
        got = (pages if pages <= free else free) if q.admission is Admission.PARTIAL else \
            (pages if pages <= free else 0)
        rid = self._rid(d.robot)
        extra = ""
        if d.bytes is not None:
            extra = f',"bytes":{d.bytes}'
        if d.client_time is not None:
            extra += f',"client_t":{d.client_time!r}'
        line = f'{{"t":{now!r},"event":"delivery"{rid},"pages":{pages}{extra},"active":{mode}}}\n'
        lost = pages - got
        if lost:
            line += f'{{"t":{now!r},"event":"loss"{rid},"pages":{lost},"active":{mode}}}\n'
        self.log.append(line.encode())
        # -- apply
        tot = self.totals
        tot.deliveries += 1
        tot.pages += pages
        if d.bytes is not None:
            tot.bytes += d.bytes
        tot.admitted += got
        tot.lost += lost
        before = (q.length,)
        q.admit(got, now)
        self.deliveries.append(t=now, pages=pages, mode=mode,
                               client_t=math.nan if d.client_time is None else d.client_time,
                               bytes=math.nan if d.bytes is None else d.bytes)
        counts = {OFFERED: pages, LOST: lost, mode_pages_key(mode): pages}
        self.window.add_many(now, counts)
        self.drift_window.add_many(now, counts)
        self._queue_changed(now, Event.ARRIVAL, before)
        ack: dict[str, Any] = {"accepted": 1, "pages": pages, "admitted": got, "lost": lost, "t": now,
                               "queue": q.length, "active": self.actuator.mode}
        if d.robot is not None:
            r = self.actuator.robots.get(d.robot)
            if r is not None:
                ack["state"] = r.command.value
        return ack

    def complete(self, items: Sequence[Completion]) -> dict[str, Any]:
        """Pages indexed: out of the queue (FIFO), with their service times or sizes as samples."""
        now = self._stamp()
        ts = _fmt(now)
        lines = []
        for c in items:
            extra = ""
            if c.service_s is not None:
                extra += f',"service_s":{_fmt(c.service_s)}'
            if c.bytes is not None:
                extra += f',"bytes":{c.bytes}'
            lines.append(f'{{"t":{ts},"event":"completion","pages":{c.pages}{extra}}}\n')
        self.log.append("".join(lines).encode())
        pages = sum(c.pages for c in items)
        q0 = self.queue.length
        removed, sojourn = self.queue.complete(pages, now)
        tot = self.totals
        tot.completions += len(items)
        tot.completed_pages += removed
        tot.completed_unmatched += pages - removed
        for c in items:
            if c.service_s is not None:
                tot.service_seconds += c.service_s
            if c.service_s is not None or c.bytes is not None:
                svc = c.service_s / c.pages if c.service_s is not None else math.nan
                size = c.bytes / c.pages if c.bytes is not None else math.nan
                self.completions.append(t=now, service_s=svc, bytes=size)
        self.window.add_many(now, {SERVED: removed, SOJOURN: sojourn})
        self._queue_changed(now, Event.DEPARTURE, range(q0, q0 - removed, -1))
        return {"accepted": len(items), "pages": pages, "removed": removed, "unmatched": pages - removed,
                "t": now, "queue": self.queue.length, "active": self.actuator.mode}

    def obsolete(self, pages: int) -> dict[str, Any]:
        now = self._stamp()
        self.log.append(f'{{"t":{_fmt(now)},"event":"obsolete","pages":{pages}}}\n'.encode())
        removed = self.queue.drop_obsolete(pages)
        self.totals.obsolete += removed
        self.totals.obsolete_unmatched += pages - removed
        self.window.add(now, OBSOLETE, removed)
        self._queue_changed(now)
        return {"pages": pages, "removed": removed, "unmatched": pages - removed, "t": now,
                "queue": self.queue.length, "active": self.actuator.mode}

    def set_queue(self, length: int) -> dict[str, Any]:
        now = self._stamp()
        line = f'{{"t":{_fmt(now)},"event":"queue","pages":{length},"active":{self.actuator.mode}}}\n'
        self.log.append(line.encode())
        delta = self.queue.resync(length, now)
        self.totals.resyncs += 1
        self._queue_changed(now)
        return {"queue": self.queue.length, "change": delta, "t": now, "active": self.actuator.mode}

    # -- actuation -----------------------------------------------------------------------------------
    def _queue_changed(self, now: float, event: Event = Event.OTHER, before: Sequence[int] = ()) -> None:
        """Step 2 of the walk: the policy's decision after ``event`` (r(i) for the new queue length, or the
        MDP's action from the queue lengths ``before`` each event and the current target), to the
        actuator."""
        i = self.queue.length
        self.window.hold(now, EMPTY, 1.0 if i == 0 else 0.0)
        self.window.hold(now, WAITING, float(max(i - 1, 0)))
        old = self.actuator.mode
        ctl = self._control
        if ctl.expired(now):
            self._set_control(ControlState(since=now, reason="duration ended"), now)
            ctl = self._control
        if ctl.overridden:
            assert ctl.robots is not None
            self.actuator.force(ctl.robots, now, "override")
        else:
            act = self.actuator
            act.set_target(self.holder.current.decision.target(event, before, i, act.target), now)
        if self.actuator.mode != old:
            self._hold_mode(now, old, self.actuator.mode)
        if self.actuator.deferred_until is not None and self._scheduler is not None:
            self._scheduler.call_at(self.actuator.deferred_until, self.tick)
        self._flush_pending()

    # -- the runtime override (robotctl/agent/control.py) ------------------------------------------------------
    def control(self, action: str, robots: int | None = None, duration_s: float | None = None,
                reason: str = "") -> dict[str, Any]:
        """Pause control (hold the fleet in force), pin ``robots`` active virtual robots, or resume control
        by the policy; a pause or pin with ``duration_s`` ends by itself. Returns :meth:`control_view`."""
        now = self._stamp()
        until = None if duration_s is None else now + duration_s
        mode = ACTIONS[action]
        held = {Override.AUTO: None, Override.PAUSED: self.actuator.mode, Override.PINNED: robots}[mode]
        self._set_control(ControlState(mode, held, now, until, reason), now)
        if until is not None and self._scheduler is not None:
            self._scheduler.call_at(until, self._control_due)
        self._queue_changed(now)
        return self.control_view()

    def _set_control(self, state: ControlState, now: float) -> None:
        self._control = state
        LOG.info("event=control mode=%s robots=%s until=%s reason=%r t=%s", state.mode.value, state.robots,
                 state.until, state.reason, now)

    def _control_due(self) -> None:
        """An override's duration may have ended: re-apply (which resumes control by the policy)."""
        self._queue_changed(self._stamp())

    def control_view(self) -> dict[str, Any]:
        d = self._control.to_dict()
        d["active_robots"] = self.actuator.mode
        d["desired"] = self.desired()
        return d

    @property
    def control_state(self) -> ControlState:
        return self._control

    def tick(self) -> None:
        """A dwell ended: apply the deferred change."""
        now = self._stamp()
        old = self.actuator.mode
        if self.actuator.tick(now):
            self._hold_mode(now, old, self.actuator.mode)
        self._flush_pending()

    def _hold_mode(self, now: float, old: int | None, new: int) -> None:
        if old is not None and old != new and not self._mode_line_pending:
            # no robot's command changed with the mode (no robot registered in the slots concerned, or
            # advise mode, where the fleet changed by itself): one line without a robot still records it,
            # so that the log alone gives the mode at every instant (robotctl fit, robotctl replay)
            kind = "resume" if new > old else "park"
            self._pending_lines.append(f'{{"t":{_fmt(now)},"event":"{kind}","active":{new}}}\n')
            self._mode_line_pending = True
        segs = self._segments
        if segs and segs[-1][0] == now:
            segs.pop()
        if not segs or segs[-1][1] != new:
            segs.append((now, new))
        horizon = now - 2 * self.config.refit.window_s
        while len(segs) > 1 and segs[1][0] < horizon:
            segs.popleft()
        for w in (self.window, self.drift_window):
            if old is not None:
                w.hold(now, mode_time_key(old), 0.0)
            w.hold(now, mode_time_key(new), 1.0)
        self.window.hold(now, ACTIVE, float(new))

    def _on_command(self, now: float, robot: Robot, command: Command, mode: int) -> None:
        kind = "resume" if command is Command.ACTIVE else "park"
        rid = self._rid(robot.robot_id)
        self._pending_lines.append(f'{{"t":{_fmt(now)},"event":"{kind}"{rid},"active":{mode}}}\n')
        self._mode_line_pending = True

    def _flush_pending(self) -> None:
        self._mode_line_pending = False
        if not self._pending_lines:
            return
        data = "".join(self._pending_lines).encode()
        self._pending_lines.clear()
        try:
            self.log.append(data)
        except OSError as exc:
            LOG.error("event=log_write_failed what=park_resume error=%s", exc)

    # -- robots --------------------------------------------------------------------------------------
    @property
    def robot_ids(self) -> KeysView[str]:
        """Ids of the registered robots (a live view)."""
        return self.actuator.robots.keys()

    @property
    def max_rank(self) -> int:
        """The highest rank a robot may register with."""
        return self.actuator.max_rank

    def _robot(self, robot_id: str) -> Robot:
        robot = self.actuator.robots.get(robot_id)
        if robot is None:
            raise NotFoundError("robot", f"{robot_id!r} is not registered", "register it with POST /v1/robots")
        return robot

    def register(self, robot_id: str | None, rank: int | None, default_state: str | None,
                 key: str | None = None) -> dict[str, Any]:
        """Register (or re-register, with its ``key``) a robot; an id is made up when none is given. Returns
        the robot's view: its command, rank, slot and lease, and ``robot_key`` when a key was issued (shown
        this once: the robot sends it as ``X-Robot-Key`` to poll, re-register or deregister). Another
        client's robot is refused (:class:`~agent.actuator.ConflictError`) until its lease runs out."""
        now = self._stamp()
        if robot_id is None:
            n = len(self.actuator.robots) + 1
            while f"robot-{n}" in self.actuator.robots:
                n += 1
            robot_id = f"robot-{n}"
        before = robot_id in self.actuator.robots
        robot, issued = self.actuator.enroll(robot_id, now, rank=rank,
                                             default_state=Command(default_state) if default_state else None,
                                             key=key)
        for gone in self.actuator.evicted:
            LOG.warning("event=robot_taken_over robot=%s reason=lease_lost", gone)
        self.actuator.evicted.clear()
        self._fleet_changed(now)
        if not before or issued is not None:
            self._save_robots()
            LOG.info("event=robot_registered robot=%s rank=%d slot=%d state=%s", robot.robot_id, robot.rank,
                     robot.slot, robot.command.value)
        view = robot.view(self.actuator.lease_s, self.clock.now())
        if issued is not None:
            view["robot_key"] = issued
        return view

    def deregister(self, robot_id: str, key: str | None = None) -> dict[str, Any]:
        """Forget a robot (:class:`~agent.api.NotFoundError` if it is not registered,
        :class:`~agent.actuator.ForbiddenError` without its key); returns its last view."""
        self.actuator.check_key(self._robot(robot_id), key)
        robot = self.actuator.deregister(robot_id)
        self._fleet_changed(self._stamp())
        self._save_robots()
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
        return min(self.config.server.long_poll_max_s, self.actuator.lease_s / 2)

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

    @property
    def lease_s(self) -> float:
        return self.actuator.lease_s

    def lost_robots(self, now: float) -> dict[str, str]:
        """Robots whose lease has run out, with the default state each has fallen back to."""
        return {r.robot_id: r.default_state.value for r in self.actuator.lost(now)}

    def shutdown_robots(self) -> int:
        """Tell every robot its default state (the agent is going away); returns how many were told."""
        self.actuator.shutdown(self._stamp())
        self._flush_pending()
        return len(self.actuator.robots)

    # -- advise mode: the fleet runs by itself ----------------------------------------------------------
    @property
    def advising(self) -> bool:
        """True in advise mode (``control.mode: advise``): r(i) is computed and exported, never commanded."""
        return self.actuator.advise

    @property
    def control_mode(self) -> str:
        return "advise" if self.actuator.advise else "command"

    def set_mode(self, mode: str) -> dict[str, Any]:
        """Switch between ``command`` and ``advise`` at run time. Entering advise hands every robot its
        default state once (what it does without the agent) and then leaves them alone; entering command
        applies r(i) at the current queue length at once. Returns the new control view."""
        if mode not in ("command", "advise"):
            raise InputError("mode", f"is {mode!r}", "use command or advise")
        now = self._stamp()
        if mode != self.control_mode:
            old = self.actuator.mode
            if mode == "advise":
                self.actuator.release(now)
                self.actuator.mode = self.actuator.fleet_mode()
                if self.actuator.mode != old:
                    self._hold_mode(now, old, self.actuator.mode)
                self._flush_pending()
            else:
                self.actuator.advise = False
                self._queue_changed(now)
            LOG.info("event=control_mode mode=%s", mode)
        return self.mode_view()

    def mode_view(self) -> dict[str, Any]:
        """``GET /v1/mode``: command or advise, the active virtual robots and r(i) now."""
        return {"mode": self.control_mode, "active": self.actuator.mode, "desired": self.desired()}

    def observe_fleet(self, mode: int) -> None:
        """Advise mode: the fleet now runs ``mode`` virtual robots (seen from outside: a replayed trace's
        park and resume lines or ``active`` fields). The queue view, windows and exposure follow it as
        they follow a commanded change in command mode."""
        if not self.actuator.advise:
            raise RuntimeError("Agent.observe_fleet: the agent commands the fleet (control.mode: command); "
                               "the mode in force is its own")
        if mode == self.actuator.mode:
            return
        now = self._stamp()
        old, self.actuator.mode = self.actuator.mode, mode
        self._hold_mode(now, old, mode)
        self._flush_pending()

    def _fleet_changed(self, now: float) -> None:
        """Advise mode: robots registered or left, so the fleet that runs by itself may have changed."""
        if self.actuator.advise:
            new = self.actuator.fleet_mode()
            if new != self.actuator.mode:
                old, self.actuator.mode = self.actuator.mode, new
                self._hold_mode(now, old, new)
                self._flush_pending()

    # -- policy --------------------------------------------------------------------------------------
    @property
    def policy(self) -> PolicySnapshot:
        """The policy in force (one frozen snapshot)."""
        return self.holder.current

    def adopt(self, result: PolicyFit, now: float) -> PolicySnapshot:
        """Put a refit's result in force (one assignment), save it for a restart, and re-apply r(i) at the
        current queue length."""
        snap = self.holder.adopt(result, now, "fit")
        if self.config.robots.dwell_s == "auto":  # chosen in the simulator by the refit (robotctl/agent/damping.py)
            self.actuator.dwell_s = float(result.fit.get("damping", {}).get("dwell_s", 0.0))
        self._save_policy(snap)
        stamp = self._stamp()
        self._log_policy(stamp, snap)
        self._queue_changed(stamp)
        return snap

    def _log_policy(self, now: float, snap: PolicySnapshot) -> None:
        """A ``policy`` line: the policy put in force (its version and source), so that a replay of the log
        can set its own decisions beside the live agent's."""
        r = ",".join(str(x) for x in snap.policy.robots_at_level)
        self._pending_lines.append(f'{{"t":{_fmt(now)},"event":"policy","version":{snap.version},'
                                   f'"source":"{snap.source}","robots_at_level":[{r}],'
                                   f'"control":"{snap.control}"}}\n')

    def _save_policy(self, snap: PolicySnapshot) -> None:
        """Write policy.json (with an fsync) in a thread when a loop runs, so that acks do not wait on it."""
        if not self.persist:
            return
        path, state = self.state_dir / POLICY_FILE, snap.to_state()

        def write() -> None:
            try:
                _atomic_write_json(path, state)
            except OSError as exc:
                LOG.warning("event=policy_file_not_written file=%s error=%s", path, exc)

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            write()
            return
        self._policy_write = loop.run_in_executor(None, write)

    def mode_exposure(self, t0: float, t1: float) -> dict[int, float]:
        """Seconds spent in each mode between ``t0`` and ``t1`` (exact, from the mode changes)."""
        out: dict[int, float] = {}
        segs = list(self._segments)
        for k, (start, mode) in enumerate(segs):
            end = segs[k + 1][0] if k + 1 < len(segs) else t1
            a, b = max(start, t0), min(end, t1)
            if b > a:
                out[mode] = out.get(mode, 0.0) + (b - a)
        return out

    def mode_changes(self, t0: float, t1: float) -> tuple[NDArray[np.float64], NDArray[np.int64]] | None:
        """The mode over ``t0``..``t1`` as (epochs, modes): ``t0`` with the mode in force then, and every
        change of mode after it up to ``t1`` (fitting.ModeTrajectory's arrays). None when the agent's record
        of modes starts after ``t0``: a window that reaches back before a restart (the recovered deliveries'
        time is not on record), which the fit then treats by ``mode_exposure`` instead."""
        segs = list(self._segments)
        if not segs or segs[0][0] > t0:
            return None
        starts = np.array([s for s, _ in segs], dtype=float)
        modes = np.array([m for _, m in segs], dtype=np.int64)
        k = int(np.searchsorted(starts, t0, side="right")) - 1
        inside = (starts > t0) & (starts <= t1)
        return np.concatenate([[t0], starts[inside]]), np.concatenate([[modes[k]], modes[inside]])

    def set_probe(self, mode: int | None, index: int = 0, count: int = 0) -> None:
        """Run ``mode`` robots at every queue length (a probe of that mode), or, with None, end the probe
        and go back to the configured startup policy."""
        now = self._stamp()
        if mode is None:
            snap = self.holder.adopt(PolicyFit.of(self.config.startup_policy(), hysteresis=self._fixed_hysteresis),
                                     now, "startup")
        else:
            old = self.holder.current
            snap = self.holder.adopt(PolicyFit.of(ThresholdPolicy.static(mode, self.config.capacity), fit=old.fit,
                                                  model=old.model), now, "probe")
            LOG.info("event=probe mode=%d step=%d/%d", mode, index + 1, count)
        self._log_policy(now, snap)
        self._queue_changed(now)

    def refit_input(self, now: float, reason: str = "request") -> RefitInput | str:
        """The fit window as a :class:`RefitInput`, or why there is not enough data.

        The cut is logged (a ``refit`` line with ``reason``), so that a replay of the log refits at the
        same instants, on the same windows, as the live agent did."""
        self._log_refit(now, reason)
        cfg = self.config
        t0 = now - cfg.refit.window_s
        c = self.completions.since(t0)
        svc = c["service_s"][~np.isnan(c["service_s"])]
        sizes = c["bytes"][~np.isnan(c["bytes"])]
        columns = ["t", "pages", "mode"]
        if cfg.refit.time_source == "client":
            columns.append("client_t")
        if sizes.size == 0:
            columns.append("bytes")
        # the one copy made on the event loop: only the columns the fit uses, at their own widths
        d = self.deliveries.since(t0, columns=columns, scratch=True)
        n = int(d["t"].size)
        if n < cfg.refit.min_deliveries:
            return (f"{n} deliveries in the last refit.window_s = {cfg.refit.window_s:g} s; a refit needs "
                    f"refit.min_deliveries = {cfg.refit.min_deliveries}")
        times = d["t"]
        # the mode trajectory is on the agent's clock: the fit reads it only against the agent's stamps
        changes = self.mode_changes(float(times[0]), now)
        if cfg.refit.time_source == "client" and not np.isnan(d["client_t"]).any():
            times = d["client_t"]
            order = np.argsort(times, kind="stable")
            d = {k: v[order] for k, v in d.items()}
            times = d["client_t"]
            changes = None
        modes = d["mode"]
        if (modes == 0).any():  # deliveries logged without their mode: take the one in force
            modes = np.where(modes == 0, self.actuator.mode, modes).astype(modes.dtype)
        options = dict(cfg.fit.options)
        options.setdefault("admission", cfg.queue.admission)
        if sizes.size == 0:
            per_page = d["bytes"] / d["pages"]
            sizes = per_page[~np.isnan(per_page)]
        fit_modes = tuple(m for m in cfg.all_modes if m >= 1)
        exposure = self.mode_exposure(float(d["t"][0]), now)
        obs_drops: int | None = None
        obs_exposure: float | None = None
        if cfg.fit.mean_useful_life_s is None:
            totals = self.window.totals(now)
            obs_drops = int(totals.get(OBSOLETE, 0.0))
            obs_exposure = float(totals.get(WAITING, 0.0))
        remembered = {}
        snap = self.holder.current
        if cfg.fit.remember_modes and snap.model is not None:
            for key, info in snap.fit.get("modes", {}).items():
                if info.get("source") in ("observed", "remembered") and int(key) in snap.model.modes:
                    remembered[int(key)] = snap.model.arrivals[int(key)]
        return RefitInput(
            delivery_times=times, pages=d["pages"], modes=modes,
            all_modes=fit_modes, search_modes=cfg.policy.modes,
            service_times=svc if svc.size else None, sizes_bytes=sizes if sizes.size else None,
            capacity=cfg.capacity, costs=cfg.costs, processing_rate_bps=cfg.fit.processing_rate_bps,
            mean_useful_life_s=cfg.fit.mean_useful_life_s, options=options,
            window=(float(times[0]), now), mode_exposure_s=exposure, mode_changes=changes,
            rate_from_exposure=cfg.fit.rate_from_exposure, remembered=remembered,
            obsolete_drops=obs_drops, obsolete_exposure_s=obs_exposure, previous_fit=dict(snap.fit),
            targets=cfg.targets.as_targets(),
            dwell_s=None if cfg.robots.dwell_s == "auto" else float(cfg.robots.dwell_s),
            hysteresis=None if cfg.robots.hysteresis == "auto" else int(cfg.robots.hysteresis),
            max_commands_per_min=cfg.robots.max_commands_per_min, control=cfg.policy.control)

    def _log_refit(self, now: float, reason: str) -> None:
        try:
            self.log.append(f'{{"t":{_fmt(now)},"event":"refit","reason":{json.dumps(reason)}}}\n'.encode())
        except OSError as exc:
            LOG.error("event=log_write_failed what=refit error=%s", exc)

    def drift(self, now: float) -> str | None:
        """Why the observed traffic no longer matches the fitted model, or None."""
        cfg = self.config.refit
        snapshot = self.holder.current
        if snapshot.model is None:
            if len(self.deliveries) >= cfg.min_deliveries and now - self.started_at >= cfg.min_interval_s:
                return "first_fit"
            return None
        if cfg.drift_bound is None:
            return None
        totals = self.drift_window.totals(now)
        for m in snapshot.model.modes:
            pages = totals.get(mode_pages_key(m), 0.0)
            t = totals.get(mode_time_key(m), 0.0)
            if pages < cfg.drift_min_pages or t <= 0:
                continue
            observed = pages / t
            fitted = float(snapshot.model.arrivals[m].rate)
            if fitted > 0 and abs(observed - fitted) / fitted > cfg.drift_bound:
                return f"drift mode={m} observed_rate={observed:.4g} fitted_rate={fitted:.4g}"
        return None

    # -- views ---------------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """True between :meth:`open` and :meth:`close`."""
        return self._ready

    @property
    def queue_length(self) -> int:
        return self.queue.length

    @property
    def mode(self) -> int:
        """Active virtual robots now."""
        return self.actuator.mode

    def robot_counts(self, now: float) -> dict[str, int]:
        """Real robots by state, each counted once: active, parked, and lost (lease expired)."""
        return self.actuator.counts(now)

    def policy_max_robots(self) -> int:
        """Real robots the policy in force can ever keep active (those of virtual robots 1..max_i r(i));
        every robot during the start-up probe; at least the fleet an override holds. It changes only when a
        policy is adopted or control is overridden: the pool of robot workers an autoscaler sizes
        (deploy/README.md)."""
        snap = self.holder.current
        if snap.source == "probe":
            top = self.config.robots.n
        elif snap.basis.dynamic is not None:
            top = snap.basis.dynamic.policy.robots
        else:
            top = max(snap.policy.robots_at_level)
        return self.actuator.robots_up_to(max(top, self._control.robots or 0))

    def commands_issued(self) -> dict[str, int]:
        """Park and resume commands issued so far, by the state commanded."""
        return {c.value: n for c, n in self.actuator.commands_issued.items()}

    def observed(self, now: float | None = None) -> Observed:
        t = self.clock.now() if now is None else now
        return observed_measures(self.window.totals(t), self.config.costs)

    def desired(self) -> int:
        """What the policy asks for now: r(i) at the current queue length, or under the MDP the robots it
        targets (its last decision)."""
        return self.holder.current.decision.target(Event.OTHER, (), self.queue.length, self.actuator.target)

    def policy_view(self) -> dict[str, Any]:
        """The policy in force with its fit and predictions, next to the observed measures and r(i) now."""
        d = self.holder.current.to_dict()
        d["observed"] = self.observed().to_dict()
        d["queue"] = self.queue.length
        d["desired"] = self.desired()
        d["mode"] = self.control_mode
        d["control"] = self.control_view()
        return d

    def count_bad_request(self, endpoint: str) -> None:
        """One more request refused with a 4xx at ``endpoint`` (``METHOD /path``)."""
        self.totals.bad_requests[endpoint] = self.totals.bad_requests.get(endpoint, 0) + 1

    # -- the delivery log ------------------------------------------------------------------------------
    def commit(self) -> Awaitable[None]:
        """Awaited before an ack: done once what was logged so far is as durable as ``log.fsync`` asks.
        (The log's own awaitable, handed over as it is: no extra coroutine on the ack path.)"""
        return self.log.commit()

    async def run_log_flusher(self) -> None:
        """The log's periodic fsync (``log.fsync: interval``); runs until cancelled."""
        await self.log.run_flusher()

    def log_stats(self) -> LogStats:
        return self.log.stats()

    def log_fault(self) -> str | None:
        """Why the delivery log cannot be written now, or None; tries the failed step again first (at most
        once a second), so that the agent is ready again by itself once the disk is."""
        return self.log.retry()

    def status(self) -> dict[str, Any]:
        now = self.clock.now()
        act = self.actuator
        return {
            "t": now,
            "uptime_s": now - self.started_at,
            "ready": self._ready,
            "queue": {"length": self.queue.length, "capacity": self.config.capacity,
                      "admission": self.config.queue.admission},
            "mode": self.control_mode,
            "robots": {"virtual": self.config.robots.n, "mode": act.mode, "desired": self.desired(),
                       "dwell_s": act.dwell_s, "hysteresis": self._hysteresis_in_force(),
                       "max_commands_per_min": act.max_commands_per_min,
                       "deferred_until": act.deferred_until, "counts": act.counts(now),
                       "registered": self.robots_view()["robots"]},
            "control": self.control_view(),
            "policy": {"version": self.holder.current.version, "source": self.holder.current.source,
                       "robots_at_level": list(self.holder.current.policy.robots_at_level),
                       "control": self.holder.current.control_view()},
            "totals": self.totals.to_dict(),
            "observed": self.observed(now).to_dict(),
            "log": self.log.stats().__dict__,
        }
