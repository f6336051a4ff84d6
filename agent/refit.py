"""The refit: from the recent window of the delivery log to a new policy, off the event loop.

:func:`compute_refit` is the whole computation — fit the model (``fitting.fit_model``), optimise the
thresholds (``policies.optimise``) — as one function of plain, picklable data (:class:`RefitInput`),
so that it runs in a worker thread or a worker process and, later, in ``robotctl replay`` against a
simulated clock. It never raises: every failure is a :class:`RefitOutcome` with ``success=False``,
the ``stage`` that failed and why.

:class:`PolicyHolder` publishes the policy in force as one frozen :class:`PolicySnapshot`; a refit
replaces the reference in one assignment, so readers (the actuator, ``/v1/policy``, the metrics
collector) always see a whole snapshot, never half of an update.

:class:`RefitLoop` schedules refits: every ``refit.interval_s``, early when the observed arrival rate
of a mode drifts beyond ``refit.drift_bound`` from the fitted one, or on request (``POST /v1/refit``).
One refit runs at a time; a failed one keeps the last good policy.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import concurrent.futures.process  # BrokenProcessPool, named in except clauses: a thread executor never imports it
import contextlib
import enum
import logging
import math
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from multiprocessing import shared_memory
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl.model import BMAP, CostBreakdown, Costs, InputError, Measures, ModeArrivals, QueueModel, ThresholdPolicy

from .clock import Clock

LOG = logging.getLogger("robotctl.agent.refit")


class RefitStage(enum.Enum):
    """Where a refit stopped."""

    #: fitted and optimised; the new policy was adopted
    DONE = "done"
    #: not enough data in the window
    INPUT = "input"
    #: fitting.fit_model raised or reported failure
    FIT = "fit"
    #: policies.optimise raised or reported failure
    SOLVE = "solve"
    #: the computation took longer than refit.timeout_s
    TIMEOUT = "timeout"


@dataclass(frozen=True, eq=False)
class RefitInput:
    """Everything a refit needs, as plain data (picklable for a worker process).

    Attributes
    ----------
    delivery_times, pages, modes : ndarray
        One entry per delivery in the window: time (s), pages offered, active robots (mode) then.
    all_modes : tuple of int
        Modes the fleet can run (each gets a BMAP; unobserved ones by fitting's rule).
    search_modes : tuple of int or None
        Modes the optimiser may use (None: all).
    service_times, sizes_bytes : ndarray or None
        From completions: service seconds, or content sizes for ``processing_rate_bps``.
    capacity : int
    costs : Costs
    processing_rate_bps, mean_useful_life_s : float or None
    options : mapping
        ``fit.options``, passed through.
    window : tuple of float
        (start, end) of the window, for the report.
    mode_exposure_s : mapping of int to float
        Seconds spent in each mode over the window (exact, from the agent's mode changes).
    rate_from_exposure : bool
        Pass ``mode_exposure_s`` to fitting.fit_model, which rescales each observed mode's BMAP in time
        so that its rate is pages delivered in the mode / seconds spent in it.
    remembered : mapping of int to BMAP
        The last observed BMAP of modes, for modes the window does not observe.
    obsolete_drops, obsolete_exposure_s : optional
        Obsolete drops and page-seconds spent waiting in the window, for the censored estimate of the
        useful life when ``mean_useful_life_s`` is not configured.
    """

    delivery_times: NDArray[np.float64]
    pages: NDArray[np.integer[Any]]
    modes: NDArray[np.integer[Any]]
    all_modes: tuple[int, ...]
    search_modes: tuple[int, ...] | None
    service_times: NDArray[np.float64] | None
    sizes_bytes: NDArray[np.float64] | None
    capacity: int
    costs: Costs
    processing_rate_bps: float | None = None
    mean_useful_life_s: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    window: tuple[float, float] = (0.0, 0.0)
    mode_exposure_s: Mapping[int, float] = field(default_factory=dict)
    rate_from_exposure: bool = True
    remembered: Mapping[int, BMAP] = field(default_factory=dict)
    obsolete_drops: int | None = None
    obsolete_exposure_s: float | None = None
    previous_fit: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class RefitOutcome:
    """What one refit produced.

    Attributes
    ----------
    success : bool
    stage : RefitStage
        ``DONE`` on success, else where it failed.
    message : str
    policy : ThresholdPolicy or None
    modes, thresholds : tuple of int
        The optimum's modes (largest first) and the paper's thresholds j_r.
    measures : Measures or None
        Predicted measures of the new policy under the fitted model.
    cost : CostBreakdown or None
    fit : dict
        Summary of the fitted model (rates and lag-1 correlations per mode, service and obsolescence
        means, fit status, fallback rungs) for /v1/policy and /metrics.
    model : QueueModel or None
        The fitted model.
    fit_seconds, solve_seconds : float
        Wall time of the two stages.
    deliveries : int
        Deliveries in the window.
    window : tuple of float
        (start, end) of the window fitted.
    """

    success: bool
    stage: RefitStage
    message: str
    policy: ThresholdPolicy | None = None
    modes: tuple[int, ...] = ()
    thresholds: tuple[int, ...] = ()
    measures: Measures | None = None
    cost: CostBreakdown | None = None
    fit: Mapping[str, Any] = field(default_factory=dict)
    model: QueueModel | None = None
    fit_seconds: float = 0.0
    solve_seconds: float = 0.0
    deliveries: int = 0
    window: tuple[float, float] = (0.0, 0.0)


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def fit_summary(model: QueueModel, fit: Any = None, sources: Mapping[int, str] | None = None,
                at: float | None = None, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Rates and lag-1 correlations per mode (with where each came from), service and obsolescence, and
    the fit's own status."""
    per_mode = {}
    prev_modes = (previous or {}).get("modes", {})
    for m in model.modes:
        b = model.arrivals[m]
        source = (sources or {}).get(m, "fitted")
        d: dict[str, Any] = {"arrival_rate": _finite(float(b.rate)),
                             "lag1_correlation": _finite(float(b.lag1_correlation)),
                             "mean_batch_size": _finite(float(b.mean_batch_size)), "source": source}
        if source == "observed":
            d["observed_at"] = at
        elif source == "remembered":
            d["observed_at"] = prev_modes.get(str(m), {}).get("observed_at")
        per_mode[str(m)] = d
    out: dict[str, Any] = {
        "modes": per_mode,
        "service_mean_s": _finite(float(model.service.mean)),
        "service_scv": _finite(float(model.service.scv)),
        "mean_useful_life_s": (_finite(float(model.obsolescence.mean)) if model.obsolescence is not None
                               else None),
    }
    if fit is not None:
        status = getattr(fit, "status", None)
        out["status"] = getattr(status, "name", str(status)).lower() if status is not None else None
        out["success"] = bool(getattr(fit, "success", True))
        out["message"] = str(getattr(fit, "message", ""))
        out["rungs"] = _rungs(fit)
    return out


def _rungs(fit: Any) -> dict[str, str]:
    """Fallback rungs of the fit, as {part: rung}: ``mode m`` for each mode and ``service``; for other
    shapes of fit, every report entry whose key mentions ``rung``."""
    found: dict[str, str] = {}
    modes = getattr(fit, "modes", None)
    if isinstance(modes, tuple) and all(hasattr(mf, "rung") for mf in modes):
        for mf in modes:
            found[f"mode {mf.mode}"] = str(mf.rung)
        service = getattr(getattr(fit, "report", None), "service", None)
        if isinstance(service, Mapping) and "rung" in service:
            found["service"] = str(service["rung"])
        return found
    try:
        report = fit.to_dict().get("report", {})
    except Exception:
        return found

    def walk(obj: Any, path: str) -> None:
        if isinstance(obj, Mapping):
            for k, v in obj.items():
                p = f"{path}.{k}" if path else str(k)
                if "rung" in str(k).lower() and isinstance(v, str | int):
                    found[path or str(k)] = str(v)
                else:
                    walk(v, p)
        elif isinstance(obj, list | tuple):
            for n, v in enumerate(obj):
                walk(v, f"{path}[{n}]")

    walk(report, "")
    return found


def _lift(b: BMAP, order: int) -> BMAP | None:
    """``b`` written with ``order`` phases when that is possible without changing the process: a
    Poisson-batch BMAP (order 1) becomes two phases that switch among themselves (as fitting does)."""
    if b.order == order:
        return b
    if b.order != 1 or order != 2:
        return None
    lam = -float(b.D[0][0, 0])
    D0 = np.array([[-2 * lam, lam], [lam, -2 * lam]])
    return BMAP((D0, *(float(Dk[0, 0]) * np.eye(2) for Dk in b.D[1:])))


def adjust_arrivals(fit: Any, inp: RefitInput) -> tuple[ModeArrivals, dict[int, str]]:
    """The fitted arrivals with what the agent remembers beyond the window.

    The observed modes come from fitting.fit_model, which the agent gives the exact time spent in each
    mode (``mode_exposure_s``; with ``rate_from_exposure``) so that a short-lived mode's rate is its pages
    over its time, not the overstated rate of its within-mode intervals. Modes the window does not
    observe keep their last observed BMAP (``remembered``) if they have one, else get fitting's linear
    rule from the nearest observed mode.

    Returns the arrivals and, per mode, ``observed``, ``remembered`` or ``linear``.
    """
    mode_fits = getattr(fit, "modes", None)
    model_arrivals = fit.model.arrivals
    if not isinstance(mode_fits, tuple) or not all(hasattr(mf, "source") for mf in mode_fits):
        return model_arrivals, {m: "fitted" for m in model_arrivals.modes}
    order = model_arrivals.order
    arr: dict[int, BMAP] = {}
    src: dict[int, str] = {}
    for mf in mode_fits:
        if mf.source != "observed":
            continue
        arr[mf.mode] = mf.bmap
        src[mf.mode] = "observed"
    for mf in mode_fits:
        m = mf.mode
        if m in arr:
            continue
        prev = inp.remembered.get(m)
        lifted = _lift(prev, order) if prev is not None else None
        if lifted is not None:
            arr[m], src[m] = lifted, "remembered"
        elif mf.source == "linear" and mf.base_mode in arr:
            arr[m], src[m] = arr[mf.base_mode].scaled(m / mf.base_mode), "linear"
        else:
            arr[m], src[m] = mf.bmap, str(mf.source)
    return ModeArrivals.per_mode(dict(sorted(arr.items()))), src


#: Array fields of :class:`RefitInput` that go to a worker process through shared memory.
ARRAY_FIELDS = ("delivery_times", "pages", "modes", "service_times", "sizes_bytes")


@dataclass(frozen=True)
class SharedArray:
    """An array handed to the worker process through a shared memory block: only this travels."""

    block: str
    dtype: str
    size: int

    def load(self) -> NDArray[Any]:
        """A private copy of the array (in the worker)."""
        # the worker shares the agent's resource tracker (it was spawned by the agent), where the block is
        # registered already: attaching registers it again (a no-op there), and only the agent unlinks it
        shm = shared_memory.SharedMemory(name=self.block)
        try:
            return np.ndarray(self.size, dtype=np.dtype(self.dtype), buffer=shm.buf).copy()
        finally:
            shm.close()


class SharedBlocks:
    """One shared memory block per array field, reused from refit to refit (grown when too small), so that
    a refit in a worker process costs the event loop a copy, not a pickle of the whole window."""

    def __init__(self) -> None:
        self.blocks: dict[str, shared_memory.SharedMemory] = {}

    def share(self, field: str, arr: NDArray[Any]) -> SharedArray:
        arr = np.ascontiguousarray(arr)
        block = self.blocks.get(field)
        if block is None or block.size < arr.nbytes:
            if block is not None:
                block.close()
                block.unlink()
            block = self.blocks[field] = shared_memory.SharedMemory(create=True, size=max(arr.nbytes, 1 << 16))
        np.ndarray(arr.size, dtype=arr.dtype, buffer=block.buf)[:] = arr
        return SharedArray(block.name, arr.dtype.str, int(arr.size))

    def share_input(self, inp: RefitInput) -> RefitInput:
        changes: dict[str, Any] = {}
        for name in ARRAY_FIELDS:
            value = getattr(inp, name)
            if isinstance(value, np.ndarray):
                changes[name] = self.share(name, value)
        return replace(inp, **changes)

    def close(self) -> None:
        for block in self.blocks.values():
            with contextlib.suppress(OSError):
                block.close()
                block.unlink()
        self.blocks.clear()


def _loaded(inp: RefitInput) -> RefitInput:
    changes = {name: getattr(inp, name).load() for name in ARRAY_FIELDS
               if isinstance(getattr(inp, name), SharedArray)}
    return replace(inp, **changes) if changes else inp


def _compute_loaded(compute: Callable[[RefitInput], RefitOutcome], inp: RefitInput) -> RefitOutcome:
    """In the worker process: the arrays out of shared memory, then the computation."""
    return compute(_loaded(inp))


FitFn = Callable[..., Any]
OptimiseFn = Callable[..., Any]


def compute_refit(inp: RefitInput, *, fit_fn: FitFn | None = None,
                  optimise_fn: OptimiseFn | None = None) -> RefitOutcome:
    """Fit the window and optimise; never raises.

    Parameters
    ----------
    inp : RefitInput
    fit_fn, optimise_fn : callable, optional
        Stand-ins for ``fitting.fit_model`` and ``policies.optimise`` (tests inject failures here).
    """
    n = int(inp.delivery_times.size)
    if fit_fn is None:
        from robotctl import fitting

        fit_fn = fitting.fit_model
    if optimise_fn is None:
        from robotctl import policies

        optimise_fn = policies.optimise
    t0 = time.perf_counter()
    try:
        fit = fit_fn(inp.delivery_times, pages=inp.pages, modes=inp.modes, all_modes=inp.all_modes,
                     service_times=inp.service_times, sizes_bytes=inp.sizes_bytes,
                     processing_rate_bps=inp.processing_rate_bps, mean_useful_life_s=inp.mean_useful_life_s,
                     obsolete_drops=inp.obsolete_drops, obsolete_exposure_s=inp.obsolete_exposure_s,
                     mode_exposure_s=dict(inp.mode_exposure_s) if inp.rate_from_exposure else None,
                     capacity=inp.capacity, options=dict(inp.options) or None)
    except InputError as exc:
        return RefitOutcome(False, RefitStage.FIT, f"fit rejected the window: {exc}",
                            fit_seconds=time.perf_counter() - t0, deliveries=n)
    except Exception as exc:
        LOG.exception("event=fit_crashed")
        return RefitOutcome(False, RefitStage.FIT, f"fit failed: {type(exc).__name__}: {exc}",
                            fit_seconds=time.perf_counter() - t0, deliveries=n)
    fitted = getattr(fit, "model", None)
    if fitted is None or not bool(getattr(fit, "success", True)):
        return RefitOutcome(False, RefitStage.FIT,
                            f"fit did not succeed: {getattr(fit, 'message', 'no model')}",
                            fit_seconds=time.perf_counter() - t0, deliveries=n)
    try:
        arrivals, sources = adjust_arrivals(fit, inp)
        fitted = QueueModel(fitted.capacity, arrivals, fitted.service, fitted.obsolescence, fitted.admission)
    except InputError as exc:
        return RefitOutcome(False, RefitStage.FIT, f"the fitted arrivals could not be adjusted: {exc}",
                            fit_seconds=time.perf_counter() - t0, deliveries=n)
    fit_s = time.perf_counter() - t0
    summary = fit_summary(fitted, fit, sources, inp.window[1], inp.previous_fit)
    t1 = time.perf_counter()
    try:
        search = optimise_fn(fitted, inp.costs, modes=inp.search_modes)
    except Exception as exc:
        if not isinstance(exc, InputError):
            LOG.exception("event=optimise_crashed")
        return RefitOutcome(False, RefitStage.SOLVE, f"optimise failed: {type(exc).__name__}: {exc}",
                            fit=summary, model=fitted, fit_seconds=fit_s,
                            solve_seconds=time.perf_counter() - t1, deliveries=n, window=inp.window)
    solve_s = time.perf_counter() - t1
    best = getattr(search, "best", None)
    if best is None or not bool(getattr(search, "success", True)) or not math.isfinite(best.cost.total):
        return RefitOutcome(False, RefitStage.SOLVE,
                            f"optimise did not succeed: {getattr(search, 'message', 'no optimum')}",
                            fit=summary, model=fitted, fit_seconds=fit_s, solve_seconds=solve_s, deliveries=n,
                            window=inp.window)
    return RefitOutcome(True, RefitStage.DONE, "adopted", policy=best.policy, modes=tuple(best.modes),
                        thresholds=tuple(best.thresholds), measures=best.measures, cost=best.cost,
                        fit=summary, model=fitted, fit_seconds=fit_s, solve_seconds=solve_s, deliveries=n,
                        window=inp.window)


@dataclass(frozen=True, eq=False)
class PolicySnapshot:
    """The policy in force and where it came from.

    Attributes
    ----------
    version : int
        Grows by one at every adoption.
    source : str
        ``startup`` (the configured policy), ``restored`` (the last adopted one, read back at start)
        or ``fit``.
    policy : ThresholdPolicy
    adopted_at : float
        Agent time of adoption.
    modes, thresholds : tuple of int
    measures, cost
        Predicted by the fitted model (None before the first fit).
    fit : mapping
        :func:`fit_summary` of the model it came from.
    model : QueueModel or None
    deliveries : int
        Deliveries in the fit window.
    window : tuple of float
    """

    version: int
    source: str
    policy: ThresholdPolicy
    adopted_at: float
    modes: tuple[int, ...] = ()
    thresholds: tuple[int, ...] = ()
    measures: Measures | None = None
    cost: CostBreakdown | None = None
    fit: Mapping[str, Any] = field(default_factory=dict)
    model: QueueModel | None = None
    deliveries: int = 0
    window: tuple[float, float] = (0.0, 0.0)

    @classmethod
    def initial(cls, policy: ThresholdPolicy, now: float, *, source: str = "startup") -> PolicySnapshot:
        return cls(1, source, policy, now, policy.modes, policy.thresholds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "source": self.source,
            "robots_at_level": list(self.policy.robots_at_level),
            "modes": list(self.modes),
            "thresholds": list(self.thresholds),
            "adopted_at": self.adopted_at,
            "predicted": ({k: _finite(v) for k, v in self.measures.to_dict().items()}
                          if self.measures is not None else None),
            "cost": ({k: _finite(v) for k,
                      v in self.cost.to_dict().items()} if self.cost is not None else None),
            "fit": dict(self.fit),
            "window": {"start": self.window[0], "end": self.window[1], "deliveries": self.deliveries},
        }

    def to_state(self) -> dict[str, Any]:
        """What is saved so that a restart resumes this policy."""
        return {"version": self.version, "robots_at_level": list(self.policy.robots_at_level),
                "adopted_at": self.adopted_at, "fit": dict(self.fit)}


class PolicyHolder:
    """Holds the current :class:`PolicySnapshot`; :meth:`swap` replaces it in one assignment."""

    def __init__(self, snapshot: PolicySnapshot) -> None:
        self.current = snapshot

    def swap(self, snapshot: PolicySnapshot) -> PolicySnapshot:
        old, self.current = self.current, snapshot
        return old


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


InputMaker = Callable[[float], "RefitInput | str"]
DriftCheck = Callable[[float, PolicySnapshot], "str | None"]
Adopter = Callable[[RefitOutcome, float, str], object]
Observer = Callable[[RefitOutcome, str], None]


#: Niceness added to the refit worker: the refit is background work, acknowledgements come first.
WORKER_NICE = 19
#: The interpreter's switch interval while a refit runs in a thread (the default is 5 ms).
THREAD_SWITCH_INTERVAL_S = 0.0002


def _lower_priority() -> None:
    """Run the calling process (on Linux: the calling thread) at a lower CPU priority."""
    who = threading.get_native_id() if sys.platform == "linux" else 0
    with contextlib.suppress(OSError, AttributeError):  # not permitted, or no such call on this platform
        os.setpriority(os.PRIO_PROCESS, who, min(19, os.getpriority(os.PRIO_PROCESS, who) + WORKER_NICE))


def _import_refit_code() -> None:
    from robotctl import (
        fitting,  # noqa: F401
        policies,  # noqa: F401
    )


def _watch_parent(parent: int, every_s: float = 0.5) -> None:
    """End this worker process when the agent that started it is gone (killed with -9, say): a pool worker
    would otherwise wait on its task queue forever, and keep its semaphores alive."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(0)

    threading.Thread(target=watch, name="robotctl-parent-watch", daemon=True).start()


def _worker_init(parent: int) -> None:
    _lower_priority()
    _watch_parent(parent)


def _spawn_pool() -> concurrent.futures.ProcessPoolExecutor:
    return concurrent.futures.ProcessPoolExecutor(max_workers=1, initializer=_worker_init, initargs=(os.getpid(),),
                                                  mp_context=multiprocessing.get_context("spawn"))


class RefitLoop:
    """Schedules refits and runs them in an executor; see the module docstring.

    Parameters
    ----------
    clock : Clock
    interval_s, min_interval_s, timeout_s : float
    make_input : callable
        ``now -> RefitInput`` or a string saying why there is not enough data.
    drift : callable
        ``(now, snapshot) -> reason or None``.
    adopt : callable
        ``(outcome, now, reason)``, called on the event loop with a successful outcome.
    observe : callable, optional
        ``(outcome, reason)`` after every attempt (metrics).
    compute : callable
        ``RefitInput -> RefitOutcome``; :func:`compute_refit` by default.
    executor : str
        ``thread`` or ``process``.
    holder : PolicyHolder
    check_every_s : float
        How often the loop wakes to check the schedule and the drift.
    probe : callable, optional
        ``probe(mode, index, count)`` runs one mode alone; ``probe(None, 0, 0)`` ends the probe.
    probe_modes : tuple of int
        Modes to probe, in order (the largest first).
    probe_s : float
        Seconds per probed mode; 0 disables the probe.
    """

    def __init__(self, *, clock: Clock, holder: PolicyHolder, make_input: InputMaker, drift: DriftCheck,
                 adopt: Adopter, observe: Observer | None = None,
                 compute: Callable[[RefitInput], RefitOutcome] = compute_refit, executor: str = "thread",
                 interval_s: float = 300.0, min_interval_s: float = 30.0, timeout_s: float = 120.0,
                 check_every_s: float = 5.0, probe: Callable[[int | None, int, int], None] | None = None,
                 probe_modes: tuple[int, ...] = (), probe_s: float = 0.0) -> None:
        self.clock = clock
        self.holder = holder
        self.make_input = make_input
        self.drift = drift
        self.adopt = adopt
        self.observe = observe
        self.compute = compute
        self.executor_kind = executor
        self.interval_s = interval_s
        self.min_interval_s = min_interval_s
        self.timeout_s = timeout_s
        self.check_every_s = min(check_every_s, interval_s)
        self.probe = probe
        self.probe_modes = probe_modes
        self.probe_s = probe_s
        self.probing = False
        self.record = RefitRecord()
        self._lock = asyncio.Lock()
        self._executor: concurrent.futures.Executor | None = None
        self._blocks = SharedBlocks()
        self._started_at: float | None = None

    def start_executor(self) -> None:
        if self._executor is None:
            self._executor = (_spawn_pool() if self.executor_kind == "process" else
                              concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                                    initializer=_lower_priority,
                                                                    thread_name_prefix="robotctl-refit"))

    async def warm_up(self) -> None:
        """Start the worker and import the fitting and optimisation code in it, so that the first refit
        neither waits for that nor makes the event loop pay for starting a process mid-traffic."""
        self.start_executor()
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, _import_refit_code)
        except concurrent.futures.process.BrokenProcessPool:
            # typically: the program's main module cannot be imported again by a spawned process (run from
            # standard input, or a script without `if __name__ == "__main__":`)
            LOG.warning("event=refit_worker_process_failed falling_back_to=thread hint=set refit.executor: thread")
            self.shutdown_executor()
            self.executor_kind = "thread"
            self.start_executor()
        except Exception:  # a refit will report the problem properly
            LOG.exception("event=refit_warm_up_failed")

    def shutdown_executor(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        self._blocks.close()

    def due(self, now: float) -> str | None:
        """Why a refit should run now, or None."""
        if self._started_at is None:
            self._started_at = now
        if self.probing:
            return None
        last = self.record.last_at
        if last is not None and now - last < self.min_interval_s:
            return None
        since = now - (last if last is not None else self._started_at)
        if since >= self.interval_s:
            return "interval"
        return self.drift(now, self.holder.current)

    async def run_probe(self) -> RefitOutcome | None:
        """Run each of ``probe_modes`` alone for ``probe_s``, then refit (the first fit).

        Under threshold control a mode often lasts only a few deliveries, and a mode the policy never
        uses is never observed, so the first fit would see little of most modes. The probe gives
        every mode a stretch of its own. If the refit after it fails, the startup policy applies.
        """
        if self.probe is None or self.probe_s <= 0 or not self.probe_modes:
            return None
        self.probing = True
        try:
            for k, mode in enumerate(self.probe_modes):
                self.probe(mode, k, len(self.probe_modes))
                await self.clock.sleep(self.probe_s)
        finally:
            self.probing = False
        outcome = await self.refit("probe_done")
        if not outcome.success:
            self.probe(None, 0, 0)
        return outcome

    async def run(self, *, probe: bool = False) -> None:
        """The background loop: the probe if asked, then wake every ``check_every_s`` and refit when due."""
        self._started_at = self.clock.now()
        # in the background: the schedule (and the probe) must not wait for the worker to start
        warm = asyncio.ensure_future(self.warm_up())
        try:
            if probe:
                await self.run_probe()
            await self._loop()
        finally:
            warm.cancel()

    async def _loop(self) -> None:
        while True:
            await self.clock.sleep(self.check_every_s)
            reason = self.due(self.clock.now())
            if reason is not None and not self._lock.locked():
                try:
                    await self.refit(reason)
                except Exception:
                    LOG.exception("event=refit_loop_error")

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
                made = self.make_input(now)
                if isinstance(made, str):
                    outcome = RefitOutcome(False, RefitStage.INPUT, made)
                else:
                    outcome = await self._run(made)
            finally:
                self.record.running = False
            self._finish(outcome, reason)
            return outcome

    async def _run(self, inp: RefitInput) -> RefitOutcome:
        self.start_executor()
        loop = asyncio.get_running_loop()
        switch = sys.getswitchinterval()
        try:
            if self.executor_kind == "process":
                fut = loop.run_in_executor(self._executor, _compute_loaded, self.compute,
                                           self._blocks.share_input(inp))
            else:
                # the refit thread holds the GIL between switches: shorter turns while it runs keep the
                # event loop's waits short (the interval is the interpreter's, restored after)
                sys.setswitchinterval(min(switch, THREAD_SWITCH_INTERVAL_S))
                fut = loop.run_in_executor(self._executor, self.compute, inp)
        except concurrent.futures.process.BrokenProcessPool as exc:
            self.shutdown_executor()
            return RefitOutcome(False, RefitStage.FIT, f"the refit worker process died: {exc}; a new one "
                                "starts with the next refit")
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that
            # arrives as the refit finishes, and the agent's shutdown then waits forever
            async with asyncio.timeout(self.timeout_s):
                return await asyncio.shield(fut)
        except TimeoutError:
            fut.cancel()
            return RefitOutcome(False, RefitStage.TIMEOUT, f"refit took longer than refit.timeout_s = "
                                f"{self.timeout_s:g} s and was abandoned",
                                deliveries=int(inp.delivery_times.size))
        except concurrent.futures.process.BrokenProcessPool as exc:
            self.shutdown_executor()
            return RefitOutcome(False, RefitStage.FIT, f"the refit worker process died: {exc}")
        finally:
            sys.setswitchinterval(switch)

    def _finish(self, outcome: RefitOutcome, reason: str) -> None:
        rec = self.record
        rec.last_success = outcome.success
        rec.last_stage = outcome.stage.value
        rec.last_message = outcome.message
        rec.last_fit_seconds = outcome.fit_seconds
        rec.last_solve_seconds = outcome.solve_seconds
        if outcome.success:
            rec.adopted += 1
            self.adopt(outcome, self.clock.now(), reason)
            LOG.info("event=refit_adopted reason=%s policy=%s deliveries=%d fit_s=%.3f solve_s=%.3f", reason,
                     outcome.policy, outcome.deliveries, outcome.fit_seconds, outcome.solve_seconds)
        else:
            rec.failures[outcome.stage.value] = rec.failures.get(outcome.stage.value, 0) + 1
            level = logging.INFO if outcome.stage is RefitStage.INPUT else logging.WARNING
            LOG.log(level, "event=refit_failed reason=%s stage=%s kept_policy=%s message=%r", reason,
                    outcome.stage.value, self.holder.current.policy, outcome.message)
        if self.observe is not None:
            self.observe(outcome, reason)


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel a background task and wait for it, surfacing errors other than the cancellation."""
    if task is None:
        return
    task.cancel()
    # a task may absorb one cancellation (e.g. one that lands as an awaited result arrives): cancel
    # again until it has really ended
    while not task.done():
        await asyncio.wait({task}, timeout=1.0)
        if not task.done():
            task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


__all__ = [
    "ARRAY_FIELDS",
    "PolicyHolder",
    "PolicySnapshot",
    "RefitInput",
    "RefitLoop",
    "RefitOutcome",
    "RefitRecord",
    "RefitStage",
    "SharedArray",
    "SharedBlocks",
    "adjust_arrivals",
    "cancel_and_wait",
    "compute_refit",
    "fit_summary",
]
