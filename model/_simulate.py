"""Discrete-event simulation of the controlled queue of paper 000: the independent check of the exact
solver, and the evaluator of controllers the solver cannot handle.

Three drivers, one per stopping rule (as ciw's ``simulate_until_max_time`` and friends):

- :func:`simulate_events`: a number of events after the warm-up, batches of equal event counts;
- :func:`simulate_horizon`: simulated seconds after the warm-up, batches of equal duration;
- :func:`simulate`: either of the two, by keyword.

Every run starts empty at t = 0 with the controller's mode for an empty system and the directing phase
drawn from that mode's stationary law; the warm-up is then discarded. The randomness comes only from
``rng``: each source draws from its own child stream (:data:`model._sim_engine.STREAMS`), so the same
seed gives the same run, and recording a trace does not change it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ._errors import InputError
from ._model import Costs, QueueModel
from ._policy import ThresholdPolicy
from ._sim_engine import Simulation
from ._sim_events import Controller, TraceRow
from ._sim_stats import SimulationResult, StopRule, _check_level, estimate_from_batches

#: Default number of batches.
BATCHES = 30
#: Progress is reported at least this often (in events) by :func:`simulate_events`.
PROGRESS_EVENTS = 250_000
#: Progress steps per batch for :func:`simulate_horizon`.
PROGRESS_STEPS_PER_BATCH = 4

TraceSink = Callable[[tuple[TraceRow, ...]], None]
ProgressSink = Callable[[float], None]


def _whole(field: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise InputError(field, f"must be a whole number >= {minimum}, got {value!r}",
                         f"give {field} as an integer of at least {minimum}")
    return int(value)


def _seconds(field: str, value: object, *, positive: bool) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and (
        value > 0 if positive else value >= 0)
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise InputError(field, f"must be a finite number of seconds {bound}, got {value!r}",
                         f"give {field} in simulated seconds")
    return float(value)  # type: ignore[arg-type]


class _Run:
    """A :class:`Simulation` plus what the drivers share: snapshots, trace hand-over, progress."""

    def __init__(self, model: QueueModel, controller: ThresholdPolicy | Controller, rng: np.random.Generator,
                 *, trace: bool, on_trace: TraceSink | None, on_progress: ProgressSink | None,
                 obsolete_in_service: bool) -> None:
        if not isinstance(rng, np.random.Generator):
            raise InputError("rng", f"must be a numpy.random.Generator, got {type(rng).__name__}",
                             "pass numpy.random.default_rng(seed)")
        self.sim = Simulation(model, controller, rng, record=trace or on_trace is not None,
                              obsolete_in_service=obsolete_in_service)
        self.on_trace = on_trace
        self.on_progress = on_progress
        self.kept: list[TraceRow] = []

    def flush(self) -> None:
        if not self.sim.record:
            return
        rows = self.sim.take_rows()
        if self.on_trace is not None:
            self.on_trace(rows)
        else:
            self.kept.extend(rows)

    def progress(self, fraction: float) -> None:
        if self.on_progress is not None:
            self.on_progress(min(1.0, fraction))


def simulate_events(model: QueueModel, controller: ThresholdPolicy | Controller, rng: np.random.Generator,
                    *, events: int, warmup_events: int | None = None, batches: int = BATCHES,
                    level: float = 0.99, costs: Costs | None = None, trace: bool = False,
                    on_trace: TraceSink | None = None, on_progress: ProgressSink | None = None,
                    _obsolete_in_service: bool = False) -> SimulationResult:
    """Simulate ``events`` events after a warm-up of ``warmup_events`` and estimate every measure.

    Parameters
    ----------
    model : QueueModel
    controller : ThresholdPolicy or callable
        A policy r(0..K) (checked against the model), or ``f(queue_length, active_robots, t) ->
        active_robots`` asked after every event; what it returns must be a mode of ``model.arrivals``.
    rng : numpy.random.Generator
        The only source of randomness (child streams are spawned from it).
    events : int
        Events in the measured part: BMAP jumps (with or without pages), service completions and
        obsolete drops. Cut into ``batches`` batches of equal event counts.
    warmup_events : int, optional
        Events discarded first; default ``events // 10``.
    batches : int
        Number of batches (>= 2; 20 to 50 is usual).
    level : float
        Confidence level of the intervals.
    costs : Costs, optional
        Also estimate the cost J of eq. (2).
    trace : bool
        Keep the trace rows (warm-up included) in ``result.trace``.
    on_trace : callable, optional
        Receives the trace rows chunk by chunk instead (bounded memory for long runs).
    on_progress : callable, optional
        Receives the fraction done, now and then.

    Returns
    -------
    SimulationResult
    """
    events = _whole("events", events, 1)
    batches = _whole("batches", batches, 2)
    if events < batches:
        raise InputError("events", f"{events} events cannot fill {batches} batches",
                         "simulate at least one event per batch (in practice thousands)")
    warm = events // 10 if warmup_events is None else _whole("warmup_events", warmup_events, 0)
    _check_level(level)
    run = _Run(model, controller, rng, trace=trace, on_trace=on_trace, on_progress=on_progress,
               obsolete_in_service=_obsolete_in_service)
    sim = run.sim
    total = warm + events
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        while n > 0:
            step = min(n, PROGRESS_EVENTS)
            sim.advance(max_events=step)
            n -= step
            done += step
            run.flush()
            run.progress(done / total)

    advance(warm)
    warmup_s = sim.t
    prev = sim.totals()
    rows = np.empty((batches, prev.size))
    bounds = [events * (j + 1) // batches for j in range(batches)]
    start = 0
    for j, end in enumerate(bounds):
        advance(end - start)
        start = end
        now = sim.totals()
        rows[j] = now - prev
        prev = now
    return estimate_from_batches(rows, sim.layout, model.modes, level=level, stop=StopRule.EVENTS,
                                 warmup_events=warm, warmup_s=warmup_s, costs=costs, trace=tuple(run.kept))


def simulate_horizon(model: QueueModel, controller: ThresholdPolicy | Controller, rng: np.random.Generator, *,
                     horizon_s: float, warmup_s: float | None = None, batches: int = BATCHES,
                     level: float = 0.99, costs: Costs | None = None, trace: bool = False,
                     on_trace: TraceSink | None = None, on_progress: ProgressSink | None = None,
                     _obsolete_in_service: bool = False) -> SimulationResult:
    """Simulate ``horizon_s`` simulated seconds after a warm-up of ``warmup_s`` seconds (default
    ``horizon_s / 10``), in ``batches`` batches of equal duration. Other parameters as
    :func:`simulate_events`."""
    horizon_s = _seconds("horizon_s", horizon_s, positive=True)
    warm = horizon_s / 10.0 if warmup_s is None else _seconds("warmup_s", warmup_s, positive=False)
    batches = _whole("batches", batches, 2)
    _check_level(level)
    run = _Run(model, controller, rng, trace=trace, on_trace=on_trace, on_progress=on_progress,
               obsolete_in_service=_obsolete_in_service)
    sim = run.sim
    total = warm + horizon_s
    sim.advance(t_end=warm)
    run.flush()
    run.progress(warm / total)
    warmup_events = sim.events
    prev = sim.totals()
    rows = np.empty((batches, prev.size))
    steps = PROGRESS_STEPS_PER_BATCH
    for j in range(batches):
        for s in range(1, steps + 1):
            t_end = warm + horizon_s * (j * steps + s) / (batches * steps)
            sim.advance(t_end=t_end)
            run.flush()
            run.progress(t_end / total)
        now = sim.totals()
        rows[j] = now - prev
        prev = now
    return estimate_from_batches(rows, sim.layout, model.modes, level=level, stop=StopRule.HORIZON,
                                 warmup_events=warmup_events, warmup_s=warm, costs=costs,
                                 trace=tuple(run.kept))


def simulate(model: QueueModel, controller: ThresholdPolicy | Controller, rng: np.random.Generator, *,
             events: int | None = None, horizon_s: float | None = None, warmup: float | None = None,
             batches: int = BATCHES, level: float = 0.99, costs: Costs | None = None, trace: bool = False,
             on_trace: TraceSink | None = None, on_progress: ProgressSink | None = None) -> SimulationResult:
    """Simulate the controlled queue and estimate its measures with confidence intervals.

    Give exactly one of ``events`` (:func:`simulate_events`) and ``horizon_s``
    (:func:`simulate_horizon`); ``warmup`` is in the same unit (events or seconds; default a tenth of
    the run). The other parameters are those of :func:`simulate_events`.

    References
    ----------
    Avrachenkov, Dudin, Klimenok, Nain, Semenova, "Optimal threshold control by the robots of web
    search engines with obsolescence of documents", Section 2 (the system) and Sections 4-5 (the
    measures estimated here).
    """
    if (events is None) == (horizon_s is None):
        raise InputError("events", "give exactly one of events and horizon_s",
                         "e.g. events=1_000_000, or horizon_s=3600 simulated seconds")
    if events is not None:
        if isinstance(warmup, float):
            if not warmup.is_integer():
                raise InputError("warmup", f"counts events here, got {warmup!r}",
                                 "give a whole number of events")
            warmup = int(warmup)
        return simulate_events(model, controller, rng, events=events, warmup_events=warmup, batches=batches,
                               level=level, costs=costs, trace=trace, on_trace=on_trace,
                               on_progress=on_progress)
    assert horizon_s is not None
    return simulate_horizon(model, controller, rng, horizon_s=horizon_s, warmup_s=warmup, batches=batches,
                            level=level, costs=costs, trace=trace, on_trace=on_trace, on_progress=on_progress)
