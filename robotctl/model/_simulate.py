"""Discrete-event simulation of the controlled queue of paper 000: the independent check of the exact
solver, and the evaluator of controllers the solver cannot handle.

One driver per stopping rule (as ciw's ``simulate_until_max_time`` and friends):

- :func:`simulate_events`: a number of events after the warm-up, batches of equal event counts;
- :func:`simulate_horizon`: simulated seconds after the warm-up, batches of equal duration;
- :func:`simulate`: either of the two, by keyword;
- :func:`iter_simulate`: either of the two as a generator that hands over the trace rows chunk by chunk
  with the fraction done, and returns the result (for a caller that streams a long trace to a file).

Every run starts empty at t = 0 with the controller's mode for an empty system and the directing phase
drawn from that mode's stationary law; the warm-up is then discarded. The randomness comes only from
``rng``: each source draws from its own child stream (:data:`model._sim_engine.STREAMS`), so the same
seed gives the same run, and recording a trace does not change it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator

import numpy as np

from robotctl._checks import seconds, whole
from robotctl._errors import InputError

from ._model import Costs, QueueModel
from ._sim_engine import AnyController, Simulation
from ._sim_events import TraceRow
from ._sim_stats import SimulationResult, StopRule, _check_level, estimate_from_batches

#: Default number of batches.
BATCHES = 30
#: The run pauses at least this often (in events) to hand over trace rows and progress.
STEP_EVENTS = 250_000
#: Pauses per batch when the run length is in simulated seconds.
STEPS_PER_BATCH = 4

#: What :func:`iter_simulate` yields: (fraction of the run done, trace rows since the last step).
Step = tuple[float, tuple[TraceRow, ...]]
TraceSink = Callable[[tuple[TraceRow, ...]], None]
ProgressSink = Callable[[float], None]


def _engine(model: QueueModel, controller: AnyController, rng: np.random.Generator,
            record: bool, obsolete_in_service: bool) -> Simulation:
    if not isinstance(rng, np.random.Generator):
        raise InputError("rng", f"must be a numpy.random.Generator, got {type(rng).__name__}",
                         "pass numpy.random.default_rng(seed)")
    return Simulation(model, controller, rng, record=record, obsolete_in_service=obsolete_in_service)


def _events_steps(model: QueueModel, controller: AnyController, rng: np.random.Generator, *,
                  events: int, warmup_events: int | None, batches: int, level: float, costs: Costs | None,
                  record: bool, obsolete_in_service: bool) -> Generator[Step, None, SimulationResult]:
    """Check the input now, then return the run as a generator."""
    events = whole("events", events, 1)
    batches = whole("batches", batches, 2)
    if events < batches:
        raise InputError("events", f"{events} events cannot fill {batches} batches",
                         "simulate at least one event per batch (in practice thousands)")
    warm = events // 10 if warmup_events is None else whole("warmup_events", warmup_events, 0)
    _check_level(level)
    sim = _engine(model, controller, rng, record, obsolete_in_service)
    return _events_run(sim, model, events=events, warm=warm, batches=batches, level=level, costs=costs)


def _events_run(sim: Simulation, model: QueueModel, *, events: int, warm: int, batches: int, level: float,
                costs: Costs | None) -> Generator[Step, None, SimulationResult]:
    total = warm + events
    done = 0

    def advance(n: int) -> Generator[Step, None, None]:
        nonlocal done
        while n > 0:
            step = min(n, STEP_EVENTS)
            sim.advance(max_events=step)
            n -= step
            done += step
            yield done / total, sim.take_rows()

    yield from advance(warm)
    warmup_s = sim.t
    prev = sim.totals()
    rows = np.empty((batches, prev.size))
    start = 0
    for j in range(batches):
        end = events * (j + 1) // batches
        yield from advance(end - start)
        start = end
        now = sim.totals()
        rows[j] = now - prev
        prev = now
    return estimate_from_batches(rows, sim.layout, model.modes, level=level, stop=StopRule.EVENTS,
                                 warmup_events=warm, warmup_s=warmup_s, costs=costs)


def _horizon_steps(model: QueueModel, controller: AnyController, rng: np.random.Generator, *,
                   horizon_s: float, warmup_s: float | None, batches: int, level: float, costs: Costs | None,
                   record: bool, obsolete_in_service: bool) -> Generator[Step, None, SimulationResult]:
    """Check the input now, then return the run as a generator."""
    horizon_s = seconds("horizon_s", horizon_s, positive=True, hint="give horizon_s in simulated seconds")
    warm = horizon_s / 10.0 if warmup_s is None else seconds("warmup_s", warmup_s, positive=False,
                                                             hint="give warmup_s in simulated seconds")
    batches = whole("batches", batches, 2)
    _check_level(level)
    sim = _engine(model, controller, rng, record, obsolete_in_service)
    return _horizon_run(sim, model, horizon_s=horizon_s, warm=warm, batches=batches, level=level, costs=costs)


def _horizon_run(sim: Simulation, model: QueueModel, *, horizon_s: float, warm: float, batches: int,
                 level: float, costs: Costs | None) -> Generator[Step, None, SimulationResult]:
    total = warm + horizon_s
    sim.advance(t_end=warm)
    yield warm / total, sim.take_rows()
    warmup_events = sim.events
    prev = sim.totals()
    rows = np.empty((batches, prev.size))
    for j in range(batches):
        for s in range(1, STEPS_PER_BATCH + 1):
            t_end = warm + horizon_s * (j * STEPS_PER_BATCH + s) / (batches * STEPS_PER_BATCH)
            sim.advance(t_end=t_end)
            yield t_end / total, sim.take_rows()
        now = sim.totals()
        rows[j] = now - prev
        prev = now
    return estimate_from_batches(rows, sim.layout, model.modes, level=level, stop=StopRule.HORIZON,
                                 warmup_events=warmup_events, warmup_s=warm, costs=costs)


def _consume(steps: Generator[Step, None, SimulationResult], *, keep: bool, on_trace: TraceSink | None,
             on_progress: ProgressSink | None) -> SimulationResult:
    kept: list[TraceRow] = []
    while True:
        try:
            fraction, rows = next(steps)
        except StopIteration as stop:
            result: SimulationResult = stop.value
            return dataclasses.replace(result, trace=tuple(kept)) if kept else result
        if rows:
            if on_trace is not None:
                on_trace(rows)
            elif keep:
                kept.extend(rows)
        if on_progress is not None:
            on_progress(min(1.0, fraction))


def simulate_events(model: QueueModel, controller: AnyController, rng: np.random.Generator,
                    *, events: int, warmup_events: int | None = None, batches: int = BATCHES,
                    level: float = 0.99, costs: Costs | None = None, trace: bool = False,
                    on_trace: TraceSink | None = None, on_progress: ProgressSink | None = None,
                    _obsolete_in_service: bool = False) -> SimulationResult:
    """Simulate ``events`` events after a warm-up of ``warmup_events`` and estimate every measure.

    Parameters
    ----------
    model : QueueModel
    controller : QueueLengthPolicy, callable or StateFeedback
        A policy r(0..K) (checked against the model), ``f(queue_length, active_robots, t) ->
        active_robots`` asked after every event, or a :class:`StateFeedback` asked after every event
        with the event and the state before it (an MDP policy); what it returns must be a mode of
        ``model.arrivals``.
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
    _obsolete_in_service : bool
        For tests only: simulate a deliberately wrong model (see :class:`model.Simulation`).

    Returns
    -------
    SimulationResult
    """
    steps = _events_steps(model, controller, rng, events=events, warmup_events=warmup_events, batches=batches,
                          level=level, costs=costs, record=trace or on_trace is not None,
                          obsolete_in_service=_obsolete_in_service)
    return _consume(steps, keep=trace, on_trace=on_trace, on_progress=on_progress)


def simulate_horizon(model: QueueModel, controller: AnyController, rng: np.random.Generator, *,
                     horizon_s: float, warmup_s: float | None = None, batches: int = BATCHES,
                     level: float = 0.99, costs: Costs | None = None, trace: bool = False,
                     on_trace: TraceSink | None = None, on_progress: ProgressSink | None = None,
                     _obsolete_in_service: bool = False) -> SimulationResult:
    """Simulate ``horizon_s`` simulated seconds after a warm-up of ``warmup_s`` seconds (default
    ``horizon_s / 10``), in ``batches`` batches of equal duration. Other parameters as
    :func:`simulate_events`."""
    steps = _horizon_steps(model, controller, rng, horizon_s=horizon_s, warmup_s=warmup_s, batches=batches,
                           level=level, costs=costs, record=trace or on_trace is not None,
                           obsolete_in_service=_obsolete_in_service)
    return _consume(steps, keep=trace, on_trace=on_trace, on_progress=on_progress)


def iter_simulate(model: QueueModel, controller: AnyController, rng: np.random.Generator, *,
                  events: int | None = None, horizon_s: float | None = None, warmup: float | None = None,
                  batches: int = BATCHES, level: float = 0.99, costs: Costs | None = None,
                  trace: bool = False) -> Generator[Step, None, SimulationResult]:
    """The run of :func:`simulate` as a generator: it yields ``(fraction_done, rows)`` now and then
    (``rows``: the trace rows since the previous step, empty unless ``trace``) and returns the
    :class:`SimulationResult` (whose ``trace`` is empty: the rows were handed over). The input is
    checked at the call, before the first step.
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
        return _events_steps(model, controller, rng, events=events, warmup_events=warmup, batches=batches,
                             level=level, costs=costs, record=trace, obsolete_in_service=False)
    assert horizon_s is not None
    return _horizon_steps(model, controller, rng, horizon_s=horizon_s, warmup_s=warmup, batches=batches,
                          level=level, costs=costs, record=trace, obsolete_in_service=False)


def simulate(model: QueueModel, controller: AnyController, rng: np.random.Generator, *,
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
    steps = iter_simulate(model, controller, rng, events=events, horizon_s=horizon_s, warmup=warmup,
                          batches=batches, level=level, costs=costs, trace=trace or on_trace is not None)
    return _consume(steps, keep=trace, on_trace=on_trace, on_progress=on_progress)
