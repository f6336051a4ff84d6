"""The refit loop: when to refit, and the pipeline compute -> worker -> adopt.

One refit reads top to bottom in :meth:`RefitLoop.refit`:

1. the agent cuts the window (:meth:`RefitTarget.refit_input`, a :class:`~agent.compute.RefitInput`);
2. the worker (:mod:`agent.worker`) runs :func:`~agent.compute.compute_refit` off the event loop, in a
   thread or a worker process, within ``refit.timeout_s``;
3. on success the agent adopts the outcome's :class:`~agent.policy.PolicyFit` as it is
   (:meth:`RefitTarget.adopt`); a failed refit keeps the last good policy and says why.

:class:`RefitLoop` schedules refits: at start, at growing windows (``refit.cold_start_deliveries``
deliveries, then at each doubling: the start-up growth) until ``refit.interval_s`` has passed; then every
``refit.interval_s``, early when the observed arrival rate of a mode drifts beyond ``refit.drift_bound``
from the fitted one (:meth:`RefitTarget.drift`), or on request (``POST /v1/refit``). A window with fewer
than ``refit.min_deliveries`` deliveries gets a cold-start fit (:func:`~agent.compute.compute_refit`) while
no regular fit is in force, so a crawl shorter than ``interval_s`` is under control for most of it.
One refit runs at a time. Before the first fit it can probe each mode
alone (``refit.probe_s``). :meth:`RefitLoop.quiesce` stops the schedule and waits for a running refit,
for a caller that shuts the agent down after reading its final policy (the demo crawl).

The loop talks to the agent through the narrow :class:`RefitTarget` protocol only, and to time
through the injected :class:`~agent.clock.Clock`, so the same loop runs under a manual clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .clock import Clock, cancel_and_wait
from .compute import RefitInput, RefitOutcome, RefitStage, compute_refit, fit_summary
from .config import AgentConfig
from .policy import PolicyFit, PolicyHolder, PolicySnapshot
from .worker import RefitWorker

LOG = logging.getLogger("robotctl.agent.refit")

#: How often the loop wakes during the start-up growth (s): a crawl of a few seconds gets its refits on time.
GROWTH_CHECK_S = 0.25


class RefitTarget(Protocol):
    """What the refit loop needs from the agent (:class:`agent.core.Agent` is one)."""

    @property
    def policy(self) -> PolicySnapshot:
        """The policy in force."""
        ...

    def refit_input(self, now: float, reason: str = "request") -> RefitInput | str:
        """The fit window (cut now, for ``reason``), or why there is not enough data."""
        ...

    def drift(self, now: float) -> str | None:
        """Why the traffic no longer matches the fitted model (an early refit), or None."""
        ...

    def deliveries_seen(self) -> int:
        """Deliveries received since the agent started (the start-up growth's clock)."""
        ...

    def adopt(self, result: PolicyFit, now: float) -> PolicySnapshot:
        """Put a refit's result in force."""
        ...

    def set_probe(self, mode: int | None, index: int = 0, count: int = 0) -> None:
        """Run ``mode`` robots alone (step ``index`` of ``count``), or end the probe with None."""
        ...


@dataclass
class RefitRecord:
    """The last refit attempt, for /v1/status and /metrics."""

    attempts: int = 0
    adopted: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    last_at: float | None = None
    last_success: bool | None = None
    last_stage: str | None = None
    last_message: str = ""
    last_reason: str = ""
    last_fit_seconds: float = 0.0
    last_solve_seconds: float = 0.0
    running: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


Observer = Callable[[RefitOutcome, str], None]


class RefitLoop:
    """Schedules refits and runs them; see the module docstring.

    Parameters
    ----------
    clock : Clock
    target : RefitTarget
        The agent: the window, the drift check, adoption and the probe.
    worker : RefitWorker
        Where the computation runs (and its timeout).
    observe : callable, optional
        ``(outcome, reason)`` after every attempt (metrics).
    interval_s, min_interval_s : float
        Refit every ``interval_s``, never sooner than ``min_interval_s`` after the last attempt.
    check_every_s : float
        How often the loop wakes to check the schedule and the drift.
    probe_modes : tuple of int
        Modes to probe, in order (the largest first).
    probe_s : float
        Seconds per probed mode; 0 disables the probe.
    growth_deliveries : int
        The start-up growth: until ``interval_s`` has passed since the start, refit when the deliveries
        seen reach this many, then at each doubling (30, 60, 120, ...), whatever ``min_interval_s``
        says; 0: no growth.
    growth_check_s : float
        How often the loop wakes during the growth.
    """

    def __init__(self, *, clock: Clock, target: RefitTarget, worker: RefitWorker, observe: Observer | None = None,
                 interval_s: float = 300.0, min_interval_s: float = 30.0, check_every_s: float = 5.0,
                 probe_modes: tuple[int, ...] = (), probe_s: float = 0.0, growth_deliveries: int = 0,
                 growth_check_s: float = GROWTH_CHECK_S) -> None:
        self.clock = clock
        self.target = target
        self.worker = worker
        self.observe = observe
        self.interval_s = interval_s
        self.min_interval_s = min_interval_s
        self.check_every_s = min(check_every_s, interval_s)
        self.probe_modes = probe_modes
        self.probe_s = probe_s
        self.probing = False
        self.growth_deliveries = growth_deliveries
        self.growth_check_s = min(growth_check_s, self.check_every_s)
        self._next_growth = growth_deliveries
        self.record = RefitRecord()
        self._lock = asyncio.Lock()
        self._started_at: float | None = None
        self._quiesced = False
        #: the last joint estimate (``fit.options.arrivals: joint``): the next refit's EM starts from it
        self._joint_params: Any = None

    @classmethod
    def for_agent(cls, config: AgentConfig, *, clock: Clock, target: RefitTarget, worker: RefitWorker,
                  observe: Observer | None = None) -> RefitLoop:
        """The loop as the configuration asks for it (``refit.*``): what ``robotctl serve`` runs and what
        ``robotctl replay`` drives on simulated time."""
        rc = config.refit
        return cls(clock=clock, target=target, worker=worker, observe=observe, interval_s=rc.interval_s,
                   min_interval_s=rc.min_interval_s, check_every_s=min(5.0, rc.drift_window_s / 4),
                   probe_modes=tuple(sorted(config.all_modes, reverse=True)), probe_s=rc.probe_s,
                   growth_deliveries=rc.cold_start_deliveries)

    @property
    def executor_kind(self) -> str:
        """``thread`` or ``process`` (a process that could not start falls back to a thread)."""
        return self.worker.kind

    def shutdown_executor(self) -> None:
        self.worker.shutdown()

    # -- the schedule ----------------------------------------------------------------------------------
    def due(self, now: float) -> str | None:
        """Why a refit should run now, or None."""
        if self._started_at is None:
            self._started_at = now
        if self.probing or self._quiesced:
            return None
        if self.growing(now):
            seen = self.target.deliveries_seen()
            if seen >= self._next_growth:
                while self._next_growth <= seen:
                    self._next_growth *= 2
                return f"growth deliveries={seen}"
        last = self.record.last_at
        if last is not None and now - last < self.min_interval_s:
            return None
        since = now - (last if last is not None else self._started_at)
        if since >= self.interval_s:
            return "interval"
        return self.target.drift(now)

    def growing(self, now: float) -> bool:
        """In the start-up growth: ``growth_deliveries`` set and less than ``interval_s`` since the start."""
        started = self._started_at if self._started_at is not None else now
        return self.growth_deliveries > 0 and now - started < self.interval_s

    async def run_probe(self) -> RefitOutcome | None:
        """Run each of ``probe_modes`` alone for ``probe_s``, then refit (the first fit).

        Under threshold control a mode often lasts only a few deliveries, and a mode the policy never
        uses is never observed, so the first fit would see little of most modes. The probe gives
        every mode a stretch of its own. If the refit after it fails, the startup policy applies.
        """
        if self.probe_s <= 0 or not self.probe_modes:
            return None
        self.probing = True
        try:
            for k, mode in enumerate(self.probe_modes):
                self.target.set_probe(mode, k, len(self.probe_modes))
                await self.clock.sleep(self.probe_s)
        finally:
            self.probing = False
        outcome = await self.refit("probe_done")
        if not outcome.success:
            self.target.set_probe(None)
        return outcome

    async def run(self, *, probe: bool = False) -> None:
        """The background loop: the probe if asked, then wake every ``check_every_s`` and refit when due."""
        self._started_at = self.clock.now()
        # in the background: the schedule (and the probe) must not wait for the worker to start
        warm = asyncio.ensure_future(self.worker.warm_up())
        try:
            if probe:
                await self.run_probe()
            await self._loop()
        finally:
            warm.cancel()

    async def _loop(self) -> None:
        while True:
            await self.clock.sleep(self.growth_check_s if self.growing(self.clock.now()) else self.check_every_s)
            reason = self.due(self.clock.now())
            if reason is not None and not self._lock.locked():
                try:
                    await self.refit(reason)
                except Exception:
                    LOG.exception("event=refit_loop_error")

    async def quiesce(self, timeout_s: float | None = None) -> bool:
        """Schedule no more refits (neither by interval nor by drift; :meth:`refit` on request still
        runs) and wait for a running one to end. Returns False if it was still running after
        ``timeout_s`` seconds of the event loop's time."""
        self._quiesced = True
        try:
            async with asyncio.timeout(timeout_s):
                async with self._lock:
                    return True
        except TimeoutError:
            return False

    # -- one refit: compute -> worker -> adopt ---------------------------------------------------------
    async def refit(self, reason: str = "request") -> RefitOutcome:
        """Run one refit now (waiting for a running one to finish first) and adopt its policy if it
        succeeds."""
        async with self._lock:
            now = self.clock.now()
            self.record.attempts += 1
            self.record.last_at = now
            self.record.last_reason = reason
            self.record.running = True
            try:
                made = self.target.refit_input(now, reason)
                if isinstance(made, str):
                    outcome = RefitOutcome(False, RefitStage.INPUT, made)
                else:
                    if made.joint_init is None and self._joint_params is not None:
                        made = replace(made, joint_init=self._joint_params)   # warm-start the joint EM
                    outcome = await self.worker.run(made)
                    if outcome.joint_params is not None:
                        self._joint_params = outcome.joint_params
            finally:
                self.record.running = False
            self._finish(outcome, reason)
            return outcome

    def _finish(self, outcome: RefitOutcome, reason: str) -> None:
        rec = self.record
        rec.last_success = outcome.success
        rec.last_stage = outcome.stage.value
        rec.last_message = outcome.message
        rec.last_fit_seconds = outcome.fit_seconds
        rec.last_solve_seconds = outcome.solve_seconds
        if outcome.result is not None and outcome.success:
            rec.adopted += 1
            self.target.adopt(outcome.result, self.clock.now())
            control = outcome.result.fit.get("control", {})
            targets = outcome.result.fit.get("targets", {}).get("status")
            LOG.info("event=refit_adopted reason=%s policy=%s kind=%s deliveries=%d fit_s=%.3f solve_s=%.3f%s%s",
                     reason, outcome.policy, outcome.result.kind, outcome.deliveries, outcome.fit_seconds,
                     outcome.solve_seconds, f" targets={targets}" if targets else "",
                     f" mdp_not_adopted={control['reason']!r}" if control.get("reason") else "")
        else:
            rec.failures[outcome.stage.value] = rec.failures.get(outcome.stage.value, 0) + 1
            if outcome.stage is RefitStage.CHECK and self.target.policy.origin == "warm":
                # a warm start whose model the first windows reject is stale: back to the start-up policy
                LOG.warning("event=warm_policy_dropped reason=%s policy=%s message=%r", reason,
                            self.target.policy.policy, outcome.message)
                self.target.set_probe(None)
            level = logging.INFO if outcome.stage is RefitStage.INPUT else logging.WARNING
            LOG.log(level, "event=refit_failed reason=%s stage=%s kept_policy=%s message=%r", reason,
                    outcome.stage.value, self.target.policy.policy, outcome.message)
        if self.observe is not None:
            self.observe(outcome, reason)


__all__ = [
    "PolicyFit",
    "PolicyHolder",
    "PolicySnapshot",
    "RefitInput",
    "RefitLoop",
    "RefitOutcome",
    "RefitRecord",
    "RefitStage",
    "RefitTarget",
    "RefitWorker",
    "cancel_and_wait",
    "compute_refit",
    "fit_summary",
]
