"""Replay's engine: the agent's own refit, optimise and decision code run on recorded events against a
simulated clock (docs/ARCHITECTURE.md, "The walk of one refit", last paragraph).

Nothing of the agent is re-implemented here. :func:`replay` builds the very :class:`~agent.core.Agent`
and :class:`~agent.refit.RefitLoop` that ``robotctl serve`` runs, with three things injected:

- the **clock**: a :class:`~agent.clock.ManualClock` set to each event's time, so that every stamp,
  window and exposure is the trace's;
- the **event source**: each event of the :class:`~agent.sources.EventTable` goes to the agent's own
  methods (``deliver``, ``complete``, ``obsolete``, ``set_queue``), and its delivery log is a
  :class:`~agent.log.DiscardLog`;
- the **fleet**: the agent runs with actuation advise (``robots.actuation: advise``), so the number of active robots
  is the recorded fleet's (park and resume lines, or the ``active`` field of deliveries; ``active`` when
  the trace records neither), and robotctl's policy r(i) is what it *would* command.

Refits happen where the live agent's happened when the trace is the agent's own log (its ``refit``
lines: same instants, same windows, hence the same fits and policies), and otherwise when the loop's own
schedule says (``refit.interval_s``, the drift check), the loop sleeping on the manual clock. Each refit
runs inline (:class:`~agent.worker.RefitWorker` ``inline``) and is finished before simulated time moves
on, so a replay is deterministic.

robotctl's decisions are what-if: their cost is evaluated by simulating each window's fitted traffic
under the policy chosen for it (:func:`evaluate`), with confidence intervals by batch means, next to the
best static fleet over the same windows (chosen on exact costs, then simulated the same way) and the
fleet actually recorded (its cost observed on the trace, by the agent's own observation window, with an
interval by batch means over slices of time).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl import InputError
from robotctl._json import json_safe
from robotctl.model import Controller, CostBreakdown, Costs, Estimate, Measures, QueueModel, ThresholdPolicy
from robotctl.policies import DynamicController

from .api import Completion, Delivery
from .clock import ManualClock, cancel_and_wait
from .compute import RefitOutcome, compute_refit
from .config import AgentConfig
from .core import Agent
from .log import DiscardLog
from .policy import DynamicDecision, Event, ThresholdDecision
from .queue import ACTIVE, EMPTY, LOST, OBSOLETE, OFFERED, SERVED, SOJOURN, TIME
from .refit import RefitLoop
from .sources import EventTable
from .trace import EVENT_KINDS
from .worker import RefitWorker

_K = {name: i for i, name in enumerate(EVENT_KINDS)}
#: Slices of time the recorded fleet's observed cost is cut into (then grouped into batches).
OBSERVE_SLICES = 400
ProgressFn = Callable[[float], None]


class ReplayStatus(enum.Enum):
    """Outcome of a replay."""

    #: at least one refit was adopted and the comparison was evaluated
    OK = "ok"
    #: no refit succeeded (too little data, or the fits failed): nothing to compare
    NO_POLICY = "no_policy"


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay.

    Attributes
    ----------
    t_from, t_to : float or None
        Replay the events in [t_from, t_to]; the events before ``t_from`` still build the agent's state
        (queue, fit window) but no refit happens before it.
    active : int or None
        Active robots when the trace records none (default ``robots.count``).
    sim_events : int
        Simulated events per evaluation (a window's share of them, at least ``min_sim_events``).
    min_sim_events : int
    batches : int
        Batches of the simulations and of the observed cost.
    level : float
        Confidence level of every interval.
    seed : int
        Seed of the evaluation's simulations.
    """

    t_from: float | None = None
    t_to: float | None = None
    active: int | None = None
    sim_events: int = 400_000
    min_sim_events: int = 5_000
    batches: int = 20
    level: float = 0.95
    seed: int = 0


@dataclass(frozen=True, eq=False)
class ReplayWindow:
    """One adopted refit.

    Attributes
    ----------
    t_start, t_end : float
        The fit window (first delivery fitted, the refit's instant).
    reason : str
        Why the refit ran (``interval``, a drift, ``probe_done``, or the live agent's reason).
    in_force : tuple of float
        From its adoption until the next adoption (or the end of the replay).
    policy : ThresholdPolicy
    modes, thresholds : tuple of int
    fit : dict
        :func:`agent.compute.fit_summary`: rates, lag-1 correlations, mean batch sizes per mode, service,
        fit status and fallback rungs.
    model : QueueModel
    measures : Measures
        Predicted by the fitted model under the policy.
    cost : CostBreakdown
    deliveries : int
    live_policy : tuple of int or None
        The policy the live agent put in force after the same refit, when the trace is its own log.
    dynamic : DynamicDecision or None
        Paper 001's MDP policy when the refit put it in force (``policy.kind: mdp``); ``policy`` is then
        the threshold optimum it replaced, and the window is simulated under the MDP policy.
    hysteresis : int
        The band the refit put in force with the thresholds (``robots.hysteresis``); the window is
        simulated with it. A dwell is not simulated here (``fit["damping"]`` holds its simulated price).
    resume : tuple of int or None
        The resume vector of the exact hysteresis policy the refit chose (``robots.hysteresis: auto``;
        ``policy`` is its park vector, ``measures`` carry its predicted ``commands_per_robot_min``).
    """

    t_start: float
    t_end: float
    reason: str
    in_force: tuple[float, float]
    policy: ThresholdPolicy
    modes: tuple[int, ...]
    thresholds: tuple[int, ...]
    fit: dict[str, Any]
    model: QueueModel
    measures: Measures
    cost: CostBreakdown
    deliveries: int
    live_policy: tuple[int, ...] | None = None
    dynamic: DynamicDecision | None = None
    hysteresis: int = 0
    resume: tuple[int, ...] | None = None

    def controller(self) -> tuple[QueueModel, ThresholdPolicy | DynamicController | Controller]:
        """What decided in this window and the traffic it was computed for, for the simulator: the MDP
        policy (started with all its robots; the warm-up forgets the start) on the model it was solved
        on (the fitted one with exponential service of the fitted mean), or the thresholds (with their
        hysteresis band, as the agent's :class:`ThresholdDecision` applies it) on the fitted model."""
        if self.dynamic is None or self.dynamic.problem is None:
            if self.hysteresis <= 0 and self.resume is None:
                return self.model, self.policy
            decision = ThresholdDecision(self.policy, self.hysteresis, self.resume)

            def banded(level: int, active: int, t: float) -> int:
                return decision.target(Event.OTHER, (), level, active)

            return self.model, banded
        return self.dynamic.problem.to_model(), DynamicController(self.dynamic.policy, self.dynamic.policy.robots)


@dataclass(frozen=True)
class RefitAttempt:
    """One refit attempt (adopted or not), with the wall time of its fit and its optimisation."""

    t: float
    reason: str
    success: bool
    stage: str
    message: str
    fit_seconds: float = 0.0
    solve_seconds: float = 0.0


@dataclass(frozen=True)
class CostRow:
    """One line of the comparison.

    Attributes
    ----------
    name : str
        ``robotctl``, ``best_static`` or ``recorded``.
    cost : float
        Time-average cost rate J (paper 000 eq. (2)) over the compared span.
    ci : tuple of float
        Its confidence interval at the replay's level.
    basis : str
        ``simulated`` (the fitted traffic under the decisions) or ``observed`` (on the trace).
    detail : dict
        ``robots_at_level`` of the static fleet; ``predicted`` (exact under the fitted models) for the
        simulated rows.
    """

    name: str
    cost: float
    ci: tuple[float, float]
    basis: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class ReplaySeries:
    """The replay over time, one entry per event (after it): queue length, the recorded fleet's active
    robots, and the robots robotctl's policy wanted (r(i)); and the policies' adoption times."""

    t: NDArray[np.float64]
    queue: NDArray[np.int32]
    active: NDArray[np.int32]
    desired: NDArray[np.int32]


@dataclass(frozen=True, eq=False)
class ReplayResult:
    """What :func:`replay` found; ``to_dict`` is the JSON of ``robotctl replay --json``."""

    success: bool
    status: ReplayStatus
    message: str
    windows: tuple[ReplayWindow, ...]
    attempts: tuple[RefitAttempt, ...]
    comparison: tuple[CostRow, ...]
    compared_span: tuple[float, float] | None
    span: tuple[float, float]
    events: int
    counts: dict[str, int]
    quality: dict[str, Any]
    series: ReplaySeries
    level: float
    refits_from_log: bool

    def to_dict(self) -> dict[str, Any]:
        windows = []
        for w in self.windows:
            predicted = dict(w.measures.to_dict())
            predicted.pop("active_robots_distribution", None)
            predicted.pop("queue_length_distribution", None)
            predicted["cost"] = w.cost.total
            predicted["cost_terms"] = {k: v for k, v in w.cost.to_dict().items() if k != "total"}
            interval = (w.fit.get("predicted") or {}).get("cost_interval")
            if interval is not None:
                predicted["cost_interval"] = interval
            fit = dict(w.fit)
            fit["batch_size_probs"] = {str(m): w.model.arrivals[m].batch_size_probs.tolist()
                                       for m in w.model.modes}
            windows.append({
                "t_start": w.t_start, "t_end": w.t_end, "reason": w.reason, "in_force": list(w.in_force),
                "status": window_status(w.fit), "check": w.fit.get("check"),
                "deliveries": w.deliveries, "fit": fit,
                "policy": {"robots_at_level": list(w.policy.robots_at_level), "modes": list(w.modes),
                           "thresholds": list(w.thresholds),
                           "resume_at_level": list(w.resume) if w.resume is not None else None},
                "predicted": predicted,
                **({"live_policy": list(w.live_policy)} if w.live_policy is not None else {}),
            })
        return json_safe({
            "verdict": self.verdict(),
            "success": self.success, "status": self.status.value, "message": self.message,
            "span": list(self.span), "events": self.events, "counts": self.counts,
            "refits": {"attempts": len(self.attempts), "adopted": len(self.windows),
                       "from_log": self.refits_from_log,
                       "failed": [dataclasses.asdict(a) for a in self.attempts if not a.success]},
            "windows": windows,
            "comparison": [{"name": r.name, "cost": r.cost, "ci": list(r.ci), "basis": r.basis, **r.detail}
                           for r in self.comparison],
            "compared_span": list(self.compared_span) if self.compared_span is not None else None,
            "level": self.level,
            "trace": self.quality,
        })


    def verdict(self) -> dict[str, Any]:
        """Whether to trust the replay (issue 27): robotctl's cost with its interval, the recorded fleet's
        observed cost, and what the windows' model checks said of the fitted models."""
        rows = {r.name: r for r in self.comparison}
        statuses = [window_status(w.fit) for w in self.windows]
        counts = {s: statuses.count(s) for s in ("ok", "misfit", "uncertain", "fallback")}
        mine, rec = rows.get("robotctl"), rows.get("recorded")
        if counts["misfit"]:
            trust = "misfit"
            why = (f"{counts['misfit']} of {len(statuses)} window(s) fitted a model that misprices the policy in "
                   "force against its observed cost: robotctl's figures rest on a wrong model there")
        elif counts["ok"] and not counts["uncertain"] and not counts["fallback"]:
            trust = "ok"
            why = "every window's fitted model priced the policy in force as observed"
        else:
            trust = "uncertain"
            why = (f"model check: {counts['ok']} ok, {counts['uncertain']} uncertain, {counts['fallback']} fallback "
                   f"of {len(statuses)} window(s); robotctl's cost is simulated on the fitted traffic, so it is "
                   "only as good as the fit")
        return {"status": trust, "message": why, "windows": counts,
                "robotctl": None if mine is None else {"cost": mine.cost, "interval": list(mine.ci),
                                                       "basis": mine.basis},
                "recorded": None if rec is None else {"cost": rec.cost, "interval": list(rec.ci),
                                                      "basis": rec.basis}}


def window_status(fit: dict[str, Any]) -> str:
    """A window's status: its model check's (``ok``, ``misfit``, ``uncertain``) when the check could run,
    else ``fallback`` when a rung of the fit fell back, else ``uncertain`` (nothing to check against)."""
    check = fit.get("check") or {}
    status = check.get("status")
    if status in ("ok", "misfit"):
        return str(status)
    if fit.get("status") == "fallback":
        return "fallback"
    return "uncertain"


# -- the drive: events to the agent on simulated time ----------------------------------------------------

@dataclass
class _Observations:
    """What the drive records besides the agent's own state."""

    windows: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[RefitAttempt] = field(default_factory=list)
    live: list[tuple[float, tuple[int, ...]]] = field(default_factory=list)
    marks: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n


class _Driver:
    """Feeds the table to the agent and keeps the refit loop's timers in step with the events."""

    def __init__(self, table: EventTable, config: AgentConfig, options: ReplayOptions,
                 progress: ProgressFn | None) -> None:
        self.table = table
        self.options = options
        self.progress = progress
        self.config = dataclasses.replace(config, robots=dataclasses.replace(config.robots, actuation="advise"))
        self.clock = ManualClock(float(table.t[0]))
        self.agent = Agent(self.config, self.clock, log=DiscardLog(), persist=False)
        self.obs = _Observations()
        self.worker = RefitWorker(compute_refit, kind="inline")
        self.loop = RefitLoop.for_agent(self.config, clock=self.clock, target=self.agent, worker=self.worker,
                                        observe=self._observe)
        self.task: asyncio.Task[None] | None = None
        self.from_log = bool((table.event == _K["refit"]).any())

    def _observe(self, outcome: RefitOutcome, reason: str) -> None:
        now = self.clock.now()
        self.obs.attempts.append(RefitAttempt(now, reason, outcome.success, outcome.stage.value, outcome.message,
                                              outcome.fit_seconds, outcome.solve_seconds))
        if outcome.success and outcome.result is not None:
            self.obs.windows.append({"at": now, "reason": reason, "result": outcome.result})

    async def _settle(self) -> None:
        """Let the loop's task run until it sleeps again on the clock (a refit it started is done then:
        the worker is inline)."""
        if self.task is None:
            return
        for _ in range(1000):
            await asyncio.sleep(0)
            if self.task.done():
                self.task.result()  # surface its error
                return
            deadline = self.clock.next_deadline
            if deadline is not None and deadline > self.clock.now() and not self.loop.record.running:
                return
        raise RuntimeError("replay: the refit loop did not go back to sleep")

    async def _advance(self, t: float, jump: bool) -> None:
        """Move the clock to ``t``, stopping at each of the loop's timers on the way (none inside a gap)."""
        clock = self.clock
        if self.task is not None and not jump:
            while True:
                deadline = clock.next_deadline
                if deadline is None or deadline > t:
                    break
                clock.set(max(deadline, clock.now()))
                await self._settle()
        if t > clock.now():
            clock.set(t)
            if self.task is not None:
                await self._settle()

    def _mark(self, t: float) -> None:
        self.obs.marks.append((t, self.agent.window.cumulative(t)))

    async def run(self) -> tuple[NDArray[np.float64], ReplaySeries]:
        tb, agent, opts = self.table, self.agent, self.options
        n = tb.n
        agent.open()
        recorded = ~np.isnan(tb.active)
        fleet = int(tb.active[np.flatnonzero(recorded)[0]]) if recorded.any() else (
            opts.active if opts.active is not None else self.config.robots.n)
        agent.observe_fleet(fleet)
        if not recorded.any():
            self.obs.count("fleet_not_recorded")
        t_from = opts.t_from if opts.t_from is not None else -math.inf
        t_to = opts.t_to if opts.t_to is not None else math.inf
        end = min(float(tb.t[-1]), t_to)
        start = max(float(tb.t[0]), t_from)
        grid = np.linspace(start, end, OBSERVE_SLICES + 1) if end > start else np.array([start, end])
        next_mark = 0
        q = np.empty(n, dtype=np.int32)
        act = np.empty(n, dtype=np.int32)
        des = np.empty(n, dtype=np.int32)
        kinds = tb.event.tolist()
        ts = tb.t.tolist()
        pages = tb.pages.tolist()
        nbytes = tb.bytes.tolist()
        svc = tb.service_s.tolist()
        active = tb.active.tolist()
        client = tb.client_t.tolist()
        gap_after = tb.gap_after.tolist()
        step = max(1, n // 200)
        last = n
        for i in range(n):
            t = ts[i]
            if t > t_to:
                last = i
                break
            if self.task is None and t >= t_from and not self.from_log:
                self.clock.set(max(t, self.clock.now()))
                self.task = asyncio.create_task(self.loop.run(probe=False))
                await self._settle()
            while next_mark < grid.size and grid[next_mark] <= t:
                if grid[next_mark] >= start:
                    await self._advance(float(grid[next_mark]), i > 0 and gap_after[i - 1])
                    self._mark(float(grid[next_mark]))
                next_mark += 1
            await self._advance(t, i > 0 and gap_after[i - 1])
            refit = self._apply(i, kinds[i], t, pages[i], nbytes[i], svc[i], active[i], client[i], t >= t_from)
            if refit is not None:
                await self.loop.refit(refit)  # inline: done when it returns
            q[i] = agent.queue_length
            act[i] = agent.mode
            des[i] = agent.desired()
            if self.progress is not None and i % step == 0:
                self.progress(i / n)
        while next_mark < grid.size:
            await self._advance(float(grid[next_mark]), False)
            self._mark(float(grid[next_mark]))
            next_mark += 1
        if self.task is not None:
            await cancel_and_wait(self.task)
        self.loop.shutdown_executor()
        await agent.close()
        if self.progress is not None:
            self.progress(1.0)
        return grid, ReplaySeries(tb.t[:last].copy(), q[:last], act[:last], des[:last])

    def _apply(self, i: int, kind: int, t: float, pages: int, nbytes: float, svc: float, active: float,
               client: float, live: bool) -> str | None:
        """One event to the agent; returns the reason of a refit the live agent made here (its own log)."""
        agent, obs = self.agent, self.obs
        if kind == _K["delivery"]:
            if active == active and int(active) != agent.mode:  # not NaN
                agent.observe_fleet(int(active))
            agent.deliver([Delivery(None, pages, None if nbytes != nbytes else int(nbytes),
                                    None if client != client else client)])
        elif kind == _K["completion"]:
            agent.complete([Completion(pages, None if svc != svc else svc, None if nbytes != nbytes else int(nbytes))])
        elif kind == _K["obsolete"]:
            agent.obsolete(pages)
        elif kind == _K["given_up"]:
            agent.given_up(pages)
        elif kind in (_K["park"], _K["resume"]):
            if active == active:
                agent.observe_fleet(int(active))
            else:
                obs.count("park_resume_without_active")
        elif kind == _K["queue"]:
            length = min(max(pages, 0), self.config.capacity)
            if length != pages:
                obs.count("queue_lines_clipped")
            agent.set_queue(length)
        elif kind == _K["loss"]:
            obs.count("loss_pages_in_trace", pages)
        elif kind == _K["refit"]:
            if live:
                return str(self.table.notes.get(i, {}).get("reason", "log"))
        elif kind == _K["policy"]:
            note = self.table.notes.get(i, {})
            levels = note.get("robots_at_level")
            if isinstance(levels, list) and live and note.get("source", "fit") == "fit":
                obs.live.append((t, tuple(int(x) for x in levels)))
        return None


def _windows(obs: _Observations, end: float) -> tuple[ReplayWindow, ...]:
    out = []
    live = list(obs.live)
    for k, w in enumerate(obs.windows):
        r = w["result"]
        until = obs.windows[k + 1]["at"] if k + 1 < len(obs.windows) else end
        nxt = obs.windows[k + 1]["at"] if k + 1 < len(obs.windows) else math.inf
        # the live agent adopts the same refit's policy after computing it: its first policy line from
        # this refit's instant on, before the next refit
        match = next((levels for t, levels in live if w["at"] <= t < nxt), None)
        out.append(ReplayWindow(float(r.window[0]), float(r.window[1]), w["reason"], (float(w["at"]), float(until)),
                                r.policy, tuple(r.modes), tuple(r.thresholds), dict(r.fit), r.model, r.measures,
                                r.cost, int(r.deliveries), match, r.dynamic, r.hysteresis, r.resume))
    return tuple(out)


# -- evaluation: what the decisions cost ----------------------------------------------------------------

def _combine(parts: Sequence[tuple[float, Estimate]], level: float, batches: int
             ) -> tuple[float, tuple[float, float]]:
    """sum_w s_w J_w of independent estimates (s_w the shares of time), with its interval."""
    from scipy.special import stdtrit

    value = sum(s * e.value for s, e in parts)
    se = math.sqrt(sum((s * e.std_error) ** 2 for s, e in parts))
    half = float(stdtrit(batches - 1, 0.5 + level / 2.0)) * se
    return float(value), (float(value - half), float(value + half))


def _simulated(windows: Sequence[ReplayWindow], shares: Sequence[float],
               policy_of: Callable[[ReplayWindow], tuple[QueueModel, ThresholdPolicy | DynamicController | Controller]],
               costs: Costs, options: ReplayOptions, rng: np.random.Generator) -> tuple[float, tuple[float, float]]:
    """Each window's model simulated under its policy, both from ``policy_of(window)`` (its share of
    ``sim_events``, at least ``min_sim_events``); the share-weighted cost and its interval."""
    from robotctl.model import simulate

    parts = []
    for w, share in zip(windows, shares, strict=True):
        events = max(options.min_sim_events, round(options.sim_events * share))
        model, policy = policy_of(w)
        sim = simulate(model, policy, rng, events=events, batches=options.batches, level=options.level,
                       costs=costs)
        assert sim.cost is not None
        parts.append((share, sim.cost))
    return _combine(parts, options.level, options.batches)


def _best_static(windows: Sequence[ReplayWindow], shares: Sequence[float], modes: Sequence[int],
                 costs: Costs) -> tuple[int, float]:
    """The one fleet size that, kept over every window, costs least (exact costs under each window's model);
    returns it and its share-weighted exact cost."""
    from robotctl.model import cost_of, solve

    best: tuple[int, float] | None = None
    for r in modes:
        total = 0.0
        for w, share in zip(windows, shares, strict=True):
            if r not in w.model.modes:
                total = math.inf
                break
            total += share * cost_of(solve(w.model, ThresholdPolicy.static(r, w.model.capacity)).measures, costs).total
        if best is None or total < best[1]:
            best = (r, total)
    assert best is not None
    return best


def _observed(marks: Sequence[tuple[float, dict[str, float]]], span: tuple[float, float],
              gaps: Sequence[tuple[float, float]], costs: Costs, options: ReplayOptions
              ) -> tuple[float, tuple[float, float], int]:
    """The recorded fleet's cost over ``span``, observed on the trace: the agent's observation window read
    at slice boundaries, slices grouped into ``batches`` batches of time (slices that hold a gap of the trace
    are left out); returns the cost, its interval, and the batches used."""
    from robotctl.model import linear_ratio_estimate

    keys = (TIME, OFFERED, LOST, OBSOLETE, SERVED, SOJOURN, EMPTY, ACTIVE)
    times = np.array([t for t, _ in marks])
    vals = np.array([[m.get(k, 0.0) for k in keys] for _, m in marks])
    inside = (times >= span[0] - 1e-9) & (times <= span[1] + 1e-9)
    idx = np.flatnonzero(inside)
    if idx.size < 3:
        return math.nan, (math.nan, math.nan), 0
    deltas = np.diff(vals[idx], axis=0)
    starts, ends = times[idx][:-1], times[idx][1:]
    ok = np.ones(deltas.shape[0], dtype=bool)
    for g0, g1 in gaps:
        ok &= ~((starts < g1) & (ends > g0))
    deltas = deltas[ok]
    b = min(options.batches, deltas.shape[0])
    if b < 2:
        return math.nan, (math.nan, math.nan), 0
    groups = np.array_split(np.arange(deltas.shape[0]), b)
    Z = np.array([deltas[g].sum(axis=0) for g in groups])
    col = {k: Z[:, j] for j, k in enumerate(keys)}
    est = linear_ratio_estimate([
        (costs.loss, col[LOST], col[TIME]), (costs.obsolescence, col[OBSOLETE], col[TIME]),
        (costs.response, col[SOJOURN], col[SERVED]), (costs.robot, col[ACTIVE], col[TIME]),
        (costs.starvation, col[EMPTY], col[TIME])], level=options.level)
    return est.value, (est.low, est.high), b


def evaluate(windows: Sequence[ReplayWindow], marks: Sequence[tuple[float, dict[str, float]]],
             gaps: Sequence[tuple[float, float]], config: AgentConfig, options: ReplayOptions
             ) -> tuple[tuple[CostRow, ...], tuple[float, float] | None]:
    """The comparison over the span from the first adoption to the end: robotctl's policies and the best
    static fleet, each simulated on the windows' fitted traffic, and the recorded fleet, observed."""
    if not windows:
        return (), None
    span = (windows[0].in_force[0], windows[-1].in_force[1])
    durations = np.array([max(0.0, w.in_force[1] - w.in_force[0]) for w in windows])
    if durations.sum() <= 0:
        durations = np.ones(len(windows))
    shares = (durations / durations.sum()).tolist()
    costs = config.costs
    rng = np.random.default_rng(options.seed)
    mine, mine_ci = _simulated(windows, shares, ReplayWindow.controller, costs, options, rng)
    mine_pred = float(sum(s * w.cost.total for s, w in zip(shares, windows, strict=True)))
    modes = tuple(m for m in config.all_modes if m >= 1)
    r, static_pred = _best_static(windows, shares, modes, costs)
    static, static_ci = _simulated(windows, shares, lambda w: (w.model, ThresholdPolicy.static(r, w.model.capacity)),
                                   costs, options, rng)
    rec, rec_ci, used = _observed(marks, span, gaps, costs, options)
    K = config.capacity
    return (
        CostRow("robotctl", mine, mine_ci, "simulated", {"predicted": mine_pred}),
        CostRow("best_static", static, static_ci, "simulated",
                {"predicted": static_pred, "robots": r,
                 "robots_at_level": list(ThresholdPolicy.static(r, K).robots_at_level)}),
        CostRow("recorded", rec, rec_ci, "observed", {"batches": used}),
    ), span


def replay(table: EventTable, config: AgentConfig, options: ReplayOptions | None = None, *,
           progress: ProgressFn | None = None, evaluate_costs: bool = True) -> ReplayResult:
    """Replay ``table`` through the agent configured by ``config`` (see the module docstring), in an event
    loop of its own (:func:`replay_async` inside a running one).

    Parameters
    ----------
    table : EventTable
        From :func:`agent.sources.read_events`.
    config : AgentConfig
        The sidecar's configuration (capacity, fleet, costs, refit and fit settings); its control mode is
        set to advise for the replay.
    options : ReplayOptions, optional
    progress : callable, optional
        Receives the fraction of events replayed, now and then.
    evaluate_costs : bool
        Simulate the comparison (off: only the decisions).
    """
    return asyncio.run(replay_async(table, config, options, progress=progress, evaluate_costs=evaluate_costs))


async def replay_async(table: EventTable, config: AgentConfig, options: ReplayOptions | None = None, *,
                       progress: ProgressFn | None = None, evaluate_costs: bool = True) -> ReplayResult:
    """:func:`replay` in the running event loop."""
    options = options or ReplayOptions()
    if options.t_from is not None and options.t_to is not None and options.t_to <= options.t_from:
        raise InputError("--to", f"is {options.t_to:g}, not after --from {options.t_from:g}", "give --to > --from")
    if options.active is not None and not 0 <= options.active <= config.robots.n:
        raise InputError("--active", f"is {options.active}, outside 0..robots.count = {config.robots.n}",
                         "give the number of robots the recorded fleet ran")
    driver = _Driver(table, config, options, progress)
    _, series = await driver.run()
    end = float(series.t[-1]) if series.t.size else float(table.t[-1])
    windows = _windows(driver.obs, end)
    gaps = [(float(table.t[i]), float(table.t[i + 1])) for i in np.flatnonzero(table.gap_after[:-1]).tolist()]
    comparison: tuple[CostRow, ...] = ()
    compared: tuple[float, float] | None = None
    if windows and evaluate_costs:
        comparison, compared = evaluate(windows, driver.obs.marks, gaps, config, options)
    counts = {EVENT_KINDS[k]: int(c) for k, c in zip(*np.unique(table.event[:series.t.size], return_counts=True),
                                                     strict=True)}
    counts.update(driver.obs.counts)
    status = ReplayStatus.OK if windows else ReplayStatus.NO_POLICY
    failed = [a for a in driver.obs.attempts if not a.success]
    if windows:
        message = f"{len(windows)} refit(s) adopted of {len(driver.obs.attempts)}"
    elif failed:
        message = f"no refit succeeded ({len(failed)} attempt(s); last: {failed[-1].message})"
    else:
        message = "no refit was due in the replayed span (refit.interval_s longer than the trace?)"
    return ReplayResult(bool(windows), status, message, windows, tuple(driver.obs.attempts), comparison, compared,
                        (float(series.t[0]) if series.t.size else float(table.t[0]), end), int(series.t.size),
                        counts, table.quality.to_dict(), series, options.level, driver.from_log)


__all__ = [
    "CostRow",
    "RefitAttempt",
    "ReplayOptions",
    "ReplayResult",
    "ReplaySeries",
    "ReplayStatus",
    "ReplayWindow",
    "evaluate",
    "replay",
    "replay_async",
    "window_status",
]
