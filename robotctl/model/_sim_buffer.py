"""Discrete-event simulation of the controlled queue under a :class:`BufferPolicy` (timers, stale
marks, renovation, RED): the independent witness of :func:`model.solve_buffer` and of paper 004's
M/D/1/N evaluator (constant service times, which no PH law represents).

The system is that of :mod:`model._sim_engine` (per-mode BMAP arrivals whose phase carries over,
FIFO, K places, the admission rule, robots by a :class:`ThresholdPolicy`), plus:

- every waiting page draws its PH(gamma, Gamma) useful life on arrival. With timers it leaves obsolete
  when the life ends (an expiry heap, lazily cleaned); without, it stays and is *stale* if its life
  ended before it starts service or before renovation removes it;
- at each completion, after the served page has left, J is drawn from q and the pages removed from
  the head follow paper 004's rules directly: J < w removes J, otherwise Option 1 removes w - 1 and
  Option 2 none;
- RED drops each page of an arriving batch with the d_i of the level the batch finds, then the
  admission rule applies to what is left; the pages of a batch count in order for runs of
  consecutive losses (arrivals lost by RED or for lack of room, between two accepted arrivals);
- the service time is PH (the model's) or a constant (:class:`Deterministic`).

Events at the same instant are taken as in :class:`model.EventKind`: completion, expiry, BMAP jump.
Every measure is a ratio of totals, estimated with batch-means confidence intervals exactly as in
:mod:`model._sim_stats` (delta method for ratios).
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from heapq import heappop, heappush
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl._errors import InputError

from ._buffer import BufferPolicy, Conflict
from ._buffer_solve import BufferMeasures
from ._model import Admission, Costs, QueueModel
from ._ph import PH
from ._policy import ThresholdPolicy
from ._sim_sources import BmapSource, exponential_stream, ph_stream, uniform_stream
from ._sim_stats import Comparison, ComparisonRow, Estimate, _check_level, _estimate, _Ratio, t_quantile

#: Child streams of the run's SeedSequence (one per source of randomness).
STREAMS = ("bmap_sojourn", "bmap_jump", "service", "useful_life", "initial_phase", "renovation", "red")
#: Runs of consecutive losses are tallied for lengths 1..MAX_RUN (longer ones in one more bin).
MAX_RUN = 10


@dataclass(frozen=True)
class Deterministic:
    """A constant service time (paper 004's M/D/1/N).

    Attributes
    ----------
    value : float
        The service time in seconds, > 0.
    """

    value: float

    def __post_init__(self) -> None:
        v = self.value
        if isinstance(v, bool) or not isinstance(v, int | float) or not (math.isfinite(v) and v > 0):
            raise InputError("service_time", f"must be a positive finite number of seconds, got {v!r}", "e.g. 1.0")
        object.__setattr__(self, "value", float(v))

    @property
    def mean(self) -> float:
        return self.value

    @property
    def variance(self) -> float:
        return 0.0


# index layout of the totals vector (cumulative since t = 0)
_SCALARS = ("time", "events", "offered", "blocked", "red", "renovated", "renovated_stale", "expired", "served",
            "served_stale", "sojourn_served", "sojourn_expired", "queue_time_sq")
_IX = {name: n for n, name in enumerate(_SCALARS)}


class _Run:
    """The state of one run and the loop that advances it."""

    def __init__(self, model: QueueModel, policy: ThresholdPolicy, buffer: BufferPolicy, rng: np.random.Generator,
                 service: PH | Deterministic, max_run: int) -> None:
        model.check_policy(policy)
        buffer.check_capacity(model.capacity)
        self.model, self.buffer = model, buffer
        self.table = list(policy.robots_at_level)
        src = BmapSource.from_arrivals(model.arrivals)
        self.offsets, self.rows = src.offsets, src.rows
        streams = dict(zip(STREAMS, rng.spawn(len(STREAMS)), strict=True))
        self.next_exp = exponential_stream(streams["bmap_sojourn"]).__next__
        self.next_u = uniform_stream(streams["bmap_jump"]).__next__
        self.next_svc = (itertools.repeat(service.value).__next__ if isinstance(service, Deterministic)
                         else ph_stream(service, streams["service"]).__next__)
        obs = model.obsolescence
        self.next_life = ph_stream(obs, streams["useful_life"]).__next__ if obs is not None else None
        self.next_ren = uniform_stream(streams["renovation"]).__next__
        self.next_red = uniform_stream(streams["red"]).__next__
        ren = buffer.renovation
        self.ren_cum = None if ren is None else list(itertools.accumulate(ren.q))
        self.keep_one = ren is not None and ren.conflict is Conflict.KEEP_ONE
        self.red = None if buffer.red is None else list(buffer.red.probabilities)
        self.max_run = max_run
        K = model.capacity
        self.max_mode = max(model.modes)
        self.size = len(_SCALARS) + (K + 1) + (self.max_mode + 1) + (max_run + 1)
        self.q_at = len(_SCALARS)
        self.m_at = self.q_at + K + 1
        self.r_at = self.m_at + self.max_mode + 1
        self.tot = [0.0] * self.size
        # state
        self.t = 0.0
        self.n = 0
        self.mode = self.table[0]
        bmap = model.arrivals[self.mode]
        self.nu = int(streams["initial_phase"].choice(bmap.order, p=bmap.stationary))
        self.t_bm = self.next_exp() * self.rows[self.offsets[self.mode] + self.nu][0]
        self.t_svc = math.inf
        self.svc_arr = 0.0
        self.svc_stale = False
        self.pid = 0
        self.waiting: dict[int, tuple[float, float]] = {}
        self.fifo: deque[int] = deque()
        self.expiry: list[tuple[float, int]] = []
        self.run = 0  # current run of consecutive losses

    def totals(self) -> NDArray[np.float64]:
        return np.array(self.tot)

    # -- helpers ---------------------------------------------------------------------------------
    def _head(self) -> tuple[float, float]:
        """Take the page at the head of the line (skipping pages that already expired)."""
        while True:
            p = self.fifo.popleft()
            if p in self.waiting:
                return self.waiting.pop(p)

    def _loss(self) -> None:
        self.run += 1

    def _accept(self) -> None:
        if self.run:
            self.tot[self.r_at + min(self.run, self.max_run + 1) - 1] += 1.0
            self.run = 0

    def advance(self, events: int) -> None:
        """Process ``events`` events (the time-weighted totals are updated at each)."""
        tot, model = self.tot, self.model
        K = model.capacity
        partial = model.admission is Admission.PARTIAL
        timers = self.buffer.timers and self.next_life is not None
        marks = not self.buffer.timers and self.next_life is not None
        IX = _IX
        q_at, m_at = self.q_at, self.m_at
        for _ in range(events):
            t_exp = self.expiry[0][0] if self.expiry else math.inf
            t_next = min(self.t_svc, t_exp, self.t_bm)
            dt = t_next - self.t
            tot[q_at + self.n] += dt
            tot[IX["queue_time_sq"]] += dt * self.n * self.n
            tot[m_at + self.mode] += dt
            self.t = t = t_next
            tot[IX["time"]] = t
            tot[IX["events"]] += 1
            if self.t_svc <= t_exp and self.t_svc <= self.t_bm:
                # -- completion, then renovation, then the next service ----------------------------
                tot[IX["served"]] += 1
                tot[IX["sojourn_served"]] += t - self.svc_arr
                if self.svc_stale:
                    tot[IX["served_stale"]] += 1
                self.n -= 1
                w = self.n
                if self.ren_cum is not None and w >= 1:
                    drawn = min(bisect_right(self.ren_cum, self.next_ren()), len(self.ren_cum) - 1)
                    removed = drawn if drawn < w else (w - 1 if self.keep_one else 0)
                    for _ in range(removed):
                        _, deadline = self._head()
                        tot[IX["renovated"]] += 1
                        if marks and deadline <= t:
                            tot[IX["renovated_stale"]] += 1
                    self.n -= removed
                if self.n:
                    self.svc_arr, deadline = self._head()
                    self.svc_stale = marks and deadline <= t
                    self.t_svc = t + self.next_svc()
                else:
                    self.t_svc = math.inf
                    self.fifo.clear()
                while self.expiry and self.expiry[0][1] not in self.waiting:
                    heappop(self.expiry)
            elif t_exp <= self.t_bm:
                # -- a waiting page's timer ends -------------------------------------------------
                _, p = heappop(self.expiry)
                arrived, _ = self.waiting.pop(p)
                tot[IX["expired"]] += 1
                tot[IX["sojourn_expired"]] += t - arrived
                self.n -= 1
                while self.expiry and self.expiry[0][1] not in self.waiting:
                    heappop(self.expiry)
            else:
                # -- the directing process jumps, maybe with a batch -----------------------------
                row = self.rows[self.offsets[self.mode] + self.nu]
                k, self.nu = row[2][bisect_right(row[1], self.next_u())]
                if k:
                    self._batch(t, k, K, partial, timers, marks)
                row = self.rows[self.offsets[self.mode] + self.nu]
                self.t_bm = t + self.next_exp() * row[0]
            new = self.table[self.n]
            if new != self.mode:
                self.mode = new
                self.t_bm = t + self.next_exp() * self.rows[self.offsets[new] + self.nu][0]

    def _batch(self, t: float, k: int, K: int, partial: bool, timers: bool, marks: bool) -> None:
        tot = self.tot
        tot[_IX["offered"]] += k
        d = self.red[self.n] if self.red is not None and self.n < K else 0.0
        fates = [d > 0.0 and self.next_red() < d for _ in range(k)]  # True: dropped by RED
        kept = k - sum(fates)
        free = K - self.n
        admit = min(kept, free) if partial else (kept if kept <= free else 0)
        tot[_IX["red"]] += k - kept
        tot[_IX["blocked"]] += kept - admit
        seen = 0
        for dropped in fates:
            if dropped:
                self._loss()
            elif seen < admit:
                seen += 1
                self._accept()
            else:
                self._loss()
        for _ in range(admit):
            if self.n == 0:
                self.svc_arr, self.svc_stale = t, False
                self.t_svc = t + self.next_svc()
                self.n = 1
                continue
            self.n += 1
            self.pid += 1
            deadline = t + self.next_life() if self.next_life is not None else math.inf
            self.waiting[self.pid] = (t, deadline)
            self.fifo.append(self.pid)
            if timers:
                heappush(self.expiry, (deadline, self.pid))


@dataclass(frozen=True, eq=False)
class BufferSimulationResult:
    """What :func:`simulate_buffer` measured, with batch-means confidence intervals at ``level``.

    Attributes
    ----------
    level : float
    batches : int
    events, warmup_events : int
    duration_s : float
        Simulated seconds of the measured part.
    pages_offered, pages_served : int
    arrival_rate, p_blocked, p_red, p_renovated, p_expired, p_served, p_served_stale, p_renovated_stale, p_loss,
    p_stale, p_starvation, mean_active_robots, mean_queue_length, second_moment_queue_length,
    mean_response_served, mean_sojourn_expired : Estimate
        The measures of :class:`BufferMeasures`, same names and meanings.
    queue_length_distribution : tuple of Estimate
        Fraction of time with i pages, i = 0..K.
    consecutive_losses : tuple of Estimate
        P(L = k), k = 1..max_run: runs of arrivals lost by RED or for lack of room between two
        accepted arrivals (renovation's removals are not arrivals and do not count).
    costs : Costs or None
    cost : Estimate or None
        J of :func:`buffer_cost` from the simulated measures.
    """

    level: float
    batches: int
    events: int
    warmup_events: int
    duration_s: float
    pages_offered: int
    pages_served: int
    arrival_rate: Estimate
    p_blocked: Estimate
    p_red: Estimate
    p_renovated: Estimate
    p_expired: Estimate
    p_served: Estimate
    p_served_stale: Estimate
    p_renovated_stale: Estimate
    p_loss: Estimate
    p_stale: Estimate
    p_starvation: Estimate
    mean_active_robots: Estimate
    mean_queue_length: Estimate
    second_moment_queue_length: Estimate
    mean_response_served: Estimate
    mean_sojourn_expired: Estimate
    queue_length_distribution: tuple[Estimate, ...]
    consecutive_losses: tuple[Estimate, ...]
    costs: Costs | None = None
    cost: Estimate | None = None

    @property
    def measure_names(self) -> tuple[str, ...]:
        names = tuple(f.name for f in fields(self) if f.type == "Estimate")
        return names + (("cost",) if self.cost is not None else ())

    def estimate(self, name: str) -> Estimate:
        """An estimate by name: a scalar measure, ``cost``, ``P_<i>`` (queue length i) or ``L_<k>``."""
        if name.startswith("P_") and name[2:].isdigit():
            return self.queue_length_distribution[int(name[2:])]
        if name.startswith("L_") and name[2:].isdigit():
            return self.consecutive_losses[int(name[2:]) - 1]
        value = getattr(self, name, None) if name in self.measure_names else None
        if not isinstance(value, Estimate):
            raise InputError("name", f"{name!r} is not an estimated measure of this result",
                             f"use one of {', '.join(self.measure_names)}, P_<i> or L_<k>")
        return value

    def check(self, exact: BufferMeasures | Mapping[str, float], *, names: Sequence[str] | None = None,
              familywise: bool = False) -> Comparison:
        """Whether each exact value lies inside its simulated interval (as :meth:`SimulationResult.check`).

        ``exact`` is a :class:`BufferMeasures` (every scalar measure, and the cost with this result's
        costs) or a mapping from estimate names (see :meth:`estimate`) to exact values.
        """
        if isinstance(exact, BufferMeasures):
            values = {n: float(getattr(exact, n)) for n in self.measure_names if n != "cost"}
            if self.costs is not None:
                from ._buffer_solve import buffer_cost

                values["cost"] = buffer_cost(exact, self.costs).total
        else:
            values = {k: float(v) for k, v in exact.items()}
        chosen = tuple(names) if names is not None else tuple(values)
        level = 1.0 - (1.0 - self.level) / len(chosen) if familywise and chosen else self.level
        quantile = t_quantile(level, self.batches)
        rows = []
        for name in chosen:
            est = self.estimate(name).rescaled(quantile)
            rows.append(ComparisonRow(name, values[name], est, est.contains(values[name])))
        return Comparison(level, tuple(rows))


def simulate_buffer(model: QueueModel, policy: ThresholdPolicy, buffer: BufferPolicy, rng: np.random.Generator, *,
                    events: int, warmup_events: int | None = None, batches: int = 30, level: float = 0.99,
                    costs: Costs | None = None, service: PH | Deterministic | None = None,
                    max_run: int = MAX_RUN) -> BufferSimulationResult:
    """Simulate ``events`` events after a warm-up (default ``events // 10``) and estimate every measure.

    Parameters
    ----------
    model, policy, buffer
        As for :func:`model.solve_buffer`.
    rng : numpy.random.Generator
        The only source of randomness (one child stream per source).
    events : int
        Events measured: BMAP jumps, completions and expiries, cut into ``batches`` equal batches.
    warmup_events : int, optional
    batches : int
    level : float
        Confidence level of each interval.
    costs : Costs, optional
        Also estimate J of :func:`buffer_cost`.
    service : PH or Deterministic, optional
        The service law (default the model's PH; a :class:`Deterministic` time for M/D/1/N).
    max_run : int
        Runs of consecutive losses are estimated for lengths 1..max_run.
    """
    for name, value, low in (("events", events, 1), ("batches", batches, 2), ("max_run", max_run, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InputError(name, f"must be a whole number >= {low}, got {value!r}", f"give {name} as an integer")
    if events < batches:
        raise InputError("events", f"{events} events cannot fill {batches} batches", "simulate thousands per batch")
    _check_level(level)
    if not isinstance(rng, np.random.Generator):
        raise InputError("rng", f"must be a numpy.random.Generator, got {type(rng).__name__}",
                         "pass numpy.random.default_rng(seed)")
    warm = events // 10 if warmup_events is None else int(warmup_events)
    run = _Run(model, policy, buffer, rng, service if service is not None else model.service, max_run)
    run.advance(warm)
    prev = run.totals()
    rows = np.empty((batches, run.size))
    done = 0
    for j in range(batches):
        n = events * (j + 1) // batches - done
        run.advance(n)
        done += n
        now = run.totals()
        rows[j] = now - prev
        prev = now
    return _estimates(rows, run, model, policy, level, warm, costs)


def _estimates(Z: NDArray[np.float64], run: _Run, model: QueueModel, policy: ThresholdPolicy, level: float,
               warm: int, costs: Costs | None) -> BufferSimulationResult:
    b = Z.shape[0]
    q = t_quantile(level, b)
    col = {name: Z[:, n] for n, name in enumerate(_SCALARS)}
    T, offered = col["time"], col["offered"]
    K = model.capacity
    qt = Z[:, run.q_at:run.q_at + K + 1]
    mt = Z[:, run.m_at:run.m_at + run.max_mode + 1]
    runs = Z[:, run.r_at:run.r_at + run.max_run + 1]
    lost_fresh = col["blocked"] + col["red"] + col["renovated"] - col["renovated_stale"]
    stale = col["expired"] + col["served_stale"] + col["renovated_stale"]
    ratios = {
        "arrival_rate": _Ratio(offered, T),
        **{f"p_{k}": _Ratio(col[k], offered) for k in ("blocked", "red", "renovated", "expired", "served",
                                                          "served_stale", "renovated_stale")},
        "p_loss": _Ratio(lost_fresh, offered),
        "p_stale": _Ratio(stale, offered),
        "p_starvation": _Ratio(qt[:, 0], T),
        "mean_active_robots": _Ratio(mt @ np.arange(mt.shape[1], dtype=float), T),
        "mean_queue_length": _Ratio(qt @ np.arange(K + 1, dtype=float), T),
        "second_moment_queue_length": _Ratio(col["queue_time_sq"], T),
        "mean_response_served": _Ratio(col["sojourn_served"], col["served"]),
        "mean_sojourn_expired": _Ratio(col["sojourn_expired"], col["expired"], empty=0.0),
    }
    est: dict[str, Any] = {name: _estimate(r.value, r.psi, q) for name, r in ratios.items()}
    all_runs = runs.sum(axis=1)
    est["queue_length_distribution"] = tuple(_estimate(r.value, r.psi, q)
                                             for r in (_Ratio(qt[:, i], T) for i in range(K + 1)))
    est["consecutive_losses"] = tuple(_estimate(r.value, r.psi, q)
                                      for r in (_Ratio(runs[:, k], all_runs) for k in range(run.max_run)))
    cost = None
    if costs is not None:
        parts = [(costs.loss, _Ratio(lost_fresh, T)), (costs.obsolescence, _Ratio(stale, T)),
                 (costs.response, ratios["mean_response_served"]), (costs.robot, ratios["mean_active_robots"]),
                 (costs.starvation, ratios["p_starvation"])]
        value = sum(c * r.value for c, r in parts if c)
        psi = sum((c * r.psi for c, r in parts if c), np.zeros(b))
        cost = _estimate(float(value), psi, q)
    tot = Z.sum(axis=0)
    return BufferSimulationResult(
        level=level, batches=b, events=int(tot[_IX["events"]]), warmup_events=warm, duration_s=float(T.sum()),
        pages_offered=int(tot[_IX["offered"]]), pages_served=int(tot[_IX["served"]]), costs=costs, cost=cost, **est)
