"""The agent's state and the walk of one delivery (docs/ARCHITECTURE.md, "The walk of one delivery"), without HTTP.

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
the fit window (:meth:`Agent.refit_input`, built by :mod:`agent.refit_window` from a read-only view of
the agent) and the drift (:meth:`Agent.drift`), and hands back a :class:`~agent.policy.PolicyFit` to
adopt (:meth:`Agent.adopt`).

:class:`Agent` is a facade that composes its parts, one concern each, and forwards to them: the log's
lines (:mod:`agent.journal`, :mod:`agent.trace`), recovery (:mod:`agent.recovery`), the mode history
(:mod:`agent.modes`), the samples (:mod:`agent.samples`), robots and actuation (:mod:`agent.fleet`), the
policy store (:mod:`agent.policy_store`) and the views (:mod:`agent.views`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import KeysView, Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any, cast

import numpy as np

from .actuator import Actuator, Command, Robot
from .api import Completion, Delivery, DeliveryBatch
from .clock import Clock, Scheduler
from .compute import RefitInput
from .config import AgentConfig
from .fleet import Fleet
from .journal import Journal
from .log import DeliveryLog, DiscardLog, Durability
from .modes import ModeHistory
from .override import OperatorOverride, OverrideState
from .policy import Event, PolicyFit, PolicySnapshot
from .policy_store import POLICY_FILE, PolicyStore
from .queue import (
    ACTIVE,
    EMPTY,
    GIVEN_UP,
    LOST,
    OBSOLETE,
    OFFERED,
    SERVED,
    SOJOURN,
    TIME,
    WAITING,
    QueueView,
    Window,
    mode_pages_key,
    mode_time_key,
)
from .recovery import ROBOTS_FILE, recover, recovered_modes, restore_robots
from .refit_window import drift, refit_input
from .samples import Ring, Totals, add_completions, add_deliveries
from .views import AgentViews

LOG = logging.getLogger("robotctl.agent")


#: A log whose last line is further ahead of the clock than this at the start is a clock set back.
CLOCK_STEP_S = 1.0

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
        self.journal = Journal(self.log)
        self.queue = QueueView(config.capacity, config.admission)
        now = clock.now()
        self.store = PolicyStore(config, now, self.state_dir / POLICY_FILE if persist else None)
        self.holder = self.store.holder
        rc = config.robots
        self.actuator = Actuator(rc.n, fixed_ids=rc.ids, group_size=rc.group_size,
                                 default_state=Command(rc.default_state), lease_s=rc.lease_s,
                                 dwell_s=rc.dwell_s if isinstance(rc.dwell_s, float) else 0.0,
                                 max_commands_per_min=rc.max_commands_per_min,
                                 initial_mode=config.startup_policy().robots_at_level[0], listener=self._on_command)
        if config.robots.actuation == "advise":
            self.actuator.advise = True
            self.actuator.mode = self.actuator.fleet_mode()
        self.totals = Totals()
        self.deliveries = Ring(config.refit.max_samples, {"t": np.float64, "pages": np.int32, "mode": np.int16,
                                                          "client_t": np.float64, "bytes": np.float64})
        self.completions = Ring(config.refit.max_samples, ("t", "service_s", "bytes"))
        self.window = Window(config.refit.window_s)
        self.drift_window = Window(config.refit.drift_window_s, buckets=30)
        self.started_at = now
        #: (deliveries seen, seconds since start) when the first fitted policy was adopted
        self.first_fit_after: tuple[int, float] | None = None
        self._last_t = -math.inf
        self.clock_steps = 0  # the log found ahead of the clock at the start (a clock set back)
        self.clock_step_s = 0.0  # the last such step, seconds (negative: back)
        self.state_files_set_aside = 0  # robots.json and policy.json set aside as corrupt at the start
        self._scheduler = scheduler
        self.override = OperatorOverride(now)
        self._ready = False
        self._robots_missing = False  # the last robots_missing log line said so
        self.modes = ModeHistory(now, self.actuator.mode, 2 * config.refit.window_s)
        self.views = AgentViews(self)
        self.fleet = Fleet(self.actuator, clock, long_poll_max_s=config.server.long_poll_max_s,
                           robots_file=self.state_dir / ROBOTS_FILE if persist else None, stamp=self._stamp,
                           hold=self._hold_mode, reapply=self._queue_changed, desired=self.views.desired,
                           flush=self.journal.flush)
        # forwarded to the parts
        self.register, self.set_actuation, self.observe_fleet = self.fleet.register, self.fleet.set_actuation, \
            self.fleet.observe
        self.mode_exposure, self.mode_changes = self.modes.exposure, self.modes.changes
        v = self.views
        self.desired, self.observed, self.robot_counts, self.commands_issued = v.desired, v.observed, \
            v.robot_counts, v.commands_issued
        self.policy_max_robots, self.override_view, self.policy_view, self.status = v.policy_max_robots, \
            v.override_view, v.policy_view, v.status
        # commit: the log's own awaitable, handed over as it is (no extra coroutine on the ack path)
        self.commit, self.run_log_flusher, self.log_stats = self.log.commit, self.log.run_flusher, self.log.stats
        # why the log cannot be written now, or None, after one more try of the failed step (at most once a
        # second): /readyz asks, so the agent is ready again by itself once the disk is
        self.log_fault = self.log.retry

    # -- life cycle ----------------------------------------------------------------------------------
    def open(self) -> None:
        """Open the log, recover the queue view and recent samples from it, restore robots and the last
        adopted policy; then start the time integrals."""
        segments = self.log.open()
        before = self.clock.now()
        trajectory: list[dict[str, Any]] = []
        recovered = recover(self.log, segments, self.config, self.deliveries, self.completions,
                            not_after=before + CLOCK_STEP_S, trajectory=trajectory)
        if recovered is not None:
            self.queue, last_t, self.totals.recovered_deliveries = recovered
            if last_t > before + CLOCK_STEP_S:
                # the log is ahead of the clock: the clock was set back since (or a line was stamped in the
                # future). Said once and counted; the stamps go on from the clock, not from the log's
                # maximum, which would pin every later acknowledgement to one instant.
                self.clock_steps += 1
                self.clock_step_s = before - last_t
                LOG.warning("event=clock_step direction=back seconds=%.3f last_logged_t=%r now=%r "
                            "action=stamps_follow_the_clock", last_t - before, last_t, before)
            else:
                self._last_t = max(self._last_t, last_t)
        now = self._stamp()
        self.store.restore(now)
        snap = self.holder.current
        r = snap.policy.robots_at_level
        q = self.queue.length
        self.actuator.mode = self.actuator.target = snap.decision.target(Event.OTHER, (), q,
                                                                         r[min(q, len(r) - 1)])
        if self.persist:
            self.state_files_set_aside = restore_robots(self.state_dir / ROBOTS_FILE, self.actuator, now)
        self.state_files_set_aside += self.store.set_aside
        if recovered is not None and self.clock_steps == 0 and recovered[1] <= now:
            history = recovered_modes(trajectory, self.actuator, recovered[1], self.modes.keep_s)
            if history is not None:
                self.modes = history
                self.mode_exposure, self.mode_changes = history.exposure, history.changes
        if self.actuator.advise:
            self.actuator.mode = self.actuator.fleet_mode()
        for w in (self.window, self.drift_window):
            w.hold(now, TIME, 1.0)
        self._hold_mode(now, None, self.actuator.mode)
        self._queue_changed(now)
        self._ready = True

    async def close(self) -> None:
        self._ready = False
        await self.store.saved()
        now = self._stamp()
        self.actuator.shutdown(now)
        self.journal.flush()
        await self.fleet.saved()
        await self.log.close()

    def _header(self) -> bytes:
        return self.journal.lines.queue(max(self._last_t, self.clock.now()), self.queue.length,
                                        self.actuator.mode).encode()

    def _stamp(self) -> float:
        t = self.clock.now()
        if t < self._last_t:
            t = self._last_t
        self._last_t = t
        return t

    # -- the walk of one delivery --------------------------------------------------------------------
    def deliver(self, items: Sequence[Delivery]) -> dict[str, Any]:
        """Stamp, log and apply validated deliveries (step 1 of the walk); the caller then awaits
        :meth:`commit` before acknowledging. The ack of one delivery from a robot also carries the robot's
        command."""
        batch = DeliveryBatch.of(items)  # the columns (what parse_deliveries returns already)
        robots, page_counts, sizes, client_times = batch.robots, batch.pages, batch.sizes, batch.client_times
        now = self._stamp()
        mode = self.actuator.mode
        if mode < self.actuator.n_virtual and not self.actuator.advise:
            # a delivery from a robot parked since drains it: the fleet's own trajectory (agent.modes)
            for slot, parked_at in self.actuator.parked_senders(robots):
                self.modes.drained(now, slot, parked_at)
        admitted = self.queue.admitted(page_counts)
        self.journal.write(self.journal.lines.delivery_columns(now, robots, page_counts, sizes, client_times,
                                                               admitted, mode))
        # -- apply
        n = len(page_counts)
        before: Sequence[int]
        if n == 1:  # one delivery (the common request): its numbers, without a batch's sums and prefix sums
            pages, got, size = page_counts[0], admitted[0], sizes[0]
            nbytes = 0 if size is None else size
            before = (self.queue.length,)
        else:
            pages, got = sum(page_counts), sum(admitted)
            nbytes = sum(cast("list[int]", sizes)) if None not in sizes else sum(b for b in sizes if b is not None)
            before = list(accumulate(admitted[:-1], initial=self.queue.length))
        lost = pages - got
        self.totals.count_deliveries(n, pages, nbytes, got)
        self.queue.admit(got, now)
        add_deliveries(self.deliveries, now, page_counts, sizes, client_times, mode)
        counts = {OFFERED: pages, LOST: lost, mode_pages_key(mode): pages}
        self.window.add_many(now, counts)
        self.drift_window.add_many(now, counts)
        self._queue_changed(now, Event.ARRIVAL, before)
        ack: dict[str, Any] = {"accepted": n, "pages": pages, "admitted": got, "lost": lost, "t": now,
                               "queue": self.queue.length, "active": self.actuator.mode}
        if n == 1 and robots[0] is not None:
            r = self.actuator.robots.get(robots[0])
            if r is not None:
                ack["state"] = r.command.value
        return ack

    def complete(self, items: Sequence[Completion]) -> dict[str, Any]:
        """Pages indexed: out of the queue (FIFO), with their service times or sizes as samples."""
        now = self._stamp()
        self.journal.write(self.journal.lines.completions(now, items))
        pages = sum(c.pages for c in items)
        q0 = self.queue.length
        removed, sojourn = self.queue.complete(pages, now)
        add_completions(self.completions, self.totals, now, items, removed)
        self.window.add_many(now, {SERVED: removed, SOJOURN: sojourn})
        self._queue_changed(now, Event.DEPARTURE, range(q0, q0 - removed, -1))
        return {"accepted": len(items), "pages": pages, "removed": removed, "unmatched": pages - removed,
                "t": now, "queue": self.queue.length, "active": self.actuator.mode}

    def obsolete(self, pages: int) -> dict[str, Any]:
        now = self._stamp()
        self.journal.write(self.journal.lines.obsolete(now, pages))
        removed = self.queue.drop_obsolete(pages)
        self.totals.obsolete += removed
        self.totals.obsolete_unmatched += pages - removed
        self.window.add(now, OBSOLETE, removed)
        self._queue_changed(now)
        return {"pages": pages, "removed": removed, "unmatched": pages - removed, "t": now,
                "queue": self.queue.length, "active": self.actuator.mode}

    def given_up(self, pages: int) -> dict[str, Any]:
        """Pages the crawler gave up on (a server refused them past its retries): never fetched, so they
        leave the queue alone, but the observed cost J counts them (:class:`agent.queue.Observed`)."""
        now = self._stamp()
        self.journal.write(self.journal.lines.given_up(now, pages))
        self.totals.given_up += pages
        self.window.add(now, GIVEN_UP, pages)
        self.journal.flush()
        return {"pages": pages, "given_up": self.totals.given_up, "t": now, "queue": self.queue.length,
                "active": self.actuator.mode}

    def set_queue(self, length: int) -> dict[str, Any]:
        now = self._stamp()
        self.journal.write(self.journal.lines.queue(now, length, self.actuator.mode))
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
        act = self.actuator
        old = act.mode
        ctl = self.override.at(now)
        if ctl.overridden:
            assert ctl.robots is not None
            act.force(ctl.robots, now, "override")
        else:
            act.set_target(self.holder.current.decision.target(event, before, i, act.target), now)
        if act.mode != old:
            self._hold_mode(now, old, act.mode)
        if act.deferred_until is not None and self._scheduler is not None:
            self._scheduler.call_at(act.deferred_until, self.tick)
        self.journal.flush()

    def set_override(self, action: str, robots: int | None = None, duration_s: float | None = None,
                     reason: str = "") -> dict[str, Any]:
        """The override (:mod:`agent.override`): pause control (hold the fleet in force), pin ``robots``
        active virtual robots, or resume control by the policy; a pause or pin with ``duration_s`` ends by
        itself. Returns :meth:`override_view`."""
        now = self._stamp()
        until = self.override.request(action, robots, duration_s, reason, now, self.actuator.mode).until
        if until is not None and self._scheduler is not None:
            # the override's duration may have ended then: re-apply (which resumes control by the policy)
            self._scheduler.call_at(until, lambda: self._queue_changed(self._stamp()))
        self._queue_changed(now)
        return self.override_view()

    @property
    def override_state(self) -> OverrideState:
        return self.override.state

    def tick(self) -> None:
        """A dwell ended: apply the deferred change."""
        now = self._stamp()
        old = self.actuator.mode
        if self.actuator.tick(now):
            self._hold_mode(now, old, self.actuator.mode)
        self.journal.flush()

    def _hold_mode(self, now: float, old: int | None, new: int) -> None:
        """The mode is ``new`` from ``now`` on: the log, the mode history and the windows' time integrals."""
        if old is not None and old != new and not self.journal.mode_line_pending:
            # no robot's command changed with the mode (no robot registered in the slots concerned, or
            # advise mode, where the fleet changed by itself): one line without a robot still records it,
            # so that the log alone gives the mode at every instant (robotctl fit, robotctl replay)
            self.journal.defer(self.journal.lines.switch(now, new > old, new), mode_line=True)
        self.modes.record(now, new)
        for w in (self.window, self.drift_window):
            if old is not None:
                w.hold(now, mode_time_key(old), 0.0)
            w.hold(now, mode_time_key(new), 1.0)
        self.window.hold(now, ACTIVE, float(new))

    def _on_command(self, now: float, robot: Robot, command: Command, mode: int) -> None:
        self.journal.defer(self.journal.lines.switch(now, command is Command.ACTIVE, mode, robot.robot_id),
                           mode_line=True)

    # -- the policy ----------------------------------------------------------------------------------
    @property
    def policy(self) -> PolicySnapshot:
        """The policy in force (one frozen snapshot)."""
        return self.holder.current

    def adopt(self, result: PolicyFit, now: float) -> PolicySnapshot:
        """Put a refit's result in force (one assignment), save it for a restart, and re-apply r(i) at the
        current queue length."""
        snap = self.store.adopt(result, now)
        if self.first_fit_after is None:
            self.first_fit_after = (self.totals.deliveries, now - self.started_at)
        if self.config.robots.dwell_s == "auto":  # chosen in the simulator by the refit (robotctl/agent/damping.py)
            self.actuator.dwell_s = float(result.fit.get("damping", {}).get("dwell_s", 0.0))
        stamp = self._stamp()
        self._log_policy(stamp, snap)
        self._queue_changed(stamp)
        return snap

    def set_probe(self, mode: int | None, index: int = 0, count: int = 0) -> None:
        """Run ``mode`` robots at every queue length (a probe of that mode), or, with None, end the probe
        and go back to the configured startup policy."""
        now = self._stamp()
        if mode is None:
            snap = self.store.startup(now)
        else:
            snap = self.store.probe(mode, now)
            LOG.info("event=probe mode=%d step=%d/%d", mode, index + 1, count)
        self._log_policy(now, snap)
        self._queue_changed(now)

    def _log_policy(self, now: float, snap: PolicySnapshot) -> None:
        self.journal.defer(self.journal.lines.policy(now, snap.version, snap.source, snap.policy.robots_at_level,
                                                     snap.kind))

    def refit_input(self, now: float, reason: str = "request") -> RefitInput | str:
        """The fit window as a :class:`RefitInput` (:func:`agent.refit_window.refit_input`), or why there is
        not enough data. The cut is logged (a ``refit`` line with ``reason``), so that a replay of the log
        refits at the same instants, on the same windows, as the live agent did."""
        self.journal.refit(now, reason)
        self._warn_missing()
        return refit_input(self, now)

    def _warn_missing(self) -> None:
        """One log line when some robots but fewer than robots.count provides for are registered (at a refit,
        when it starts being so), and one when they all are again."""
        act = self.actuator
        # none registered at all: the robots run unregistered, and the agent counts on the whole fleet
        missing = 0 < len(act.robots) < act.max_rank
        if missing != self._robots_missing:
            self._robots_missing = missing
            if missing:
                LOG.warning("event=robots_missing registered=%d count=%d virtual=%d/%d: the policy is solved "
                            "for the registered robots only; register the others or lower robots.count",
                            len(act.robots), act.max_rank, min(act.registered_slots(), self.config.robots.n),
                            self.config.robots.n)
            else:
                LOG.info("event=robots_complete registered=%d", len(act.robots))

    def deliveries_seen(self) -> int:
        """Deliveries received since this agent started (the refit loop's start-up growth counts them)."""
        return self.totals.deliveries

    def drift(self, now: float) -> str | None:
        """Why the observed traffic no longer matches the fitted model, or None (:func:`agent.refit_window.drift`)."""
        return drift(self, now)

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

    @property
    def advising(self) -> bool:
        """True under actuation advise (``robots.actuation: advise``): r(i) is computed and exported, never
        commanded."""
        return self.fleet.advising

    @property
    def robot_ids(self) -> KeysView[str]:
        """Ids of the registered robots (a live view)."""
        return self.fleet.robot_ids

    def count_bad_request(self, endpoint: str) -> None:
        """One more request refused with a 4xx at ``endpoint`` (``METHOD /path``)."""
        self.totals.bad_requests[endpoint] = self.totals.bad_requests.get(endpoint, 0) + 1


__all__ = ["POLICY_FILE", "ROBOTS_FILE", "Agent", "Ring", "Totals"]
