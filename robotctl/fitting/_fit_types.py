"""What the whole fit returns (issue 3): the options (:class:`FitOptions`), each mode's fit and its status
(:class:`ModeFit`, :class:`FitStatus`), the report that explains every choice (:class:`FitReport`) and the
fitted model with its report (:class:`ModelFit`). The fit itself is in :mod:`._fit`."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl.model import BMAP, Admission, InputError, QueueModel, model_to_dict

from ._deliveries import (
    Threshold,
)
from ._joint import JointFit
from ._map2 import MAX_DECAY, Map2Fit
from ._obsolescence import ObsolescenceFit
from ._service import ServiceFit
from ._stats import SampleStats, fit_decay


@dataclass(frozen=True)
class FitOptions:
    """Knobs of :func:`fit_model` (all optional; ``fit.options`` in the agent's configuration).

    Attributes
    ----------
    batch_resolution_s : float or None
        Deliveries closer than this are one batch; None chooses it from the data (see
        :func:`choose_batch_resolution`), 0 merges equal timestamps only.
    censor_above_s : float or None
        Intervals between batches longer than this are stops and removed; None chooses from the data
        (see :func:`choose_censor_bound`); ``inf`` censors nothing.
    out_of_order : str
        ``error`` (default) or ``sort`` for timestamps earlier than their predecessor.
    max_lag : int
        Lags used for the correlation structure (fewer when a mode has under 10 per lag).
    min_intervals : int
        Intervals a mode needs for more than a Poisson fit; modes with fewer take the linear rule from
        an observed mode when there is one.
    significance : float
        Family-wise false-alarm probability of the two tests that choose the lower rungs: some lag
        correlation among the L counts when |rho_k| > z_L / sqrt(pairs) with z_L the two-sided normal
        quantile of significance / L (Bonferroni); c^2 differs from 1 beyond z_1 standard errors.
    max_decay : float
        Cap on the MAP(2) decay |gamma|.
    match_interval_third_moment : bool
        Also match the third moment of the intervals (restricts the reach of rho_1).
    max_batch : int
        Batches larger than this count as this size (reported).
    gap_factor : float
        Width (as a ratio) of the empty stretch the automatic resolution and censoring rules look for.
    min_service_samples : int
        Fewer service samples give an exponential law of their mean.
    max_service_order : int
        Most phases of the service law (an Erlang mixture when c^2 < 1/2).
    min_obsolete : int
        Fewest obsolete drops for an estimate of the useful life.
    admission : str
        ``partial`` (the paper) or ``reject-batch``.
    arrivals : str
        ``per_mode`` (each mode's MAP(2) by moment matching on its own clock), ``joint`` (all modes at
        once on one hidden phase by maximum likelihood, :func:`fit_joint`; the per-mode fit stays the
        initialiser's reference and the fallback when the joint fit fails) or ``auto`` (the default:
        ``joint`` when the mode trajectory is given, ``mode_changes``, as the agent gives it; else
        ``per_mode``, since a trajectory guessed from the deliveries' modes puts every change half way
        between two batches).
    joint_phases : list of int
        Phase counts the joint fit compares by BIC (1..4).
    joint_structure : str
        ``shared`` (mode-dependent rates on one phase generator), ``linear`` (rates proportional to the
        mode), ``general`` (a BMAP per mode on the common phases whose batches may move the phase, paper
        000's own model), ``auto`` (default: shared and linear, the lower BIC wins) or ``all`` (the three,
        general with at most 3 phases). ``auto`` leaves ``general`` out because its observed information
        can be singular (a MAP's matrices are identified only up to its law: flat directions; on paper
        000's example traffic, where BIC prefers general, it was), and then its cost intervals are
        infinite and every window ``uncertain``, which keeps the policy in force. Under a threshold policy
        some (mode, phase) pairs are seldom seen (few robots run only in bursts); ``shared`` then leaves
        their rates loose and the optimiser may exploit them (16% regret on bench/estimation_replay.py),
        where ``auto`` chose the linear rule and the replay ended on the true optimum.
    """

    batch_resolution_s: float | None = None
    censor_above_s: float | None = None
    out_of_order: str = "error"
    max_lag: int = 20
    min_intervals: int = 30
    significance: float = 1e-3
    max_decay: float = MAX_DECAY
    match_interval_third_moment: bool = False
    max_batch: int = 256
    gap_factor: float = 10.0
    min_service_samples: int = 10
    max_service_order: int = 10
    min_obsolete: int = 30
    admission: str = "partial"
    arrivals: str = "auto"
    joint_phases: tuple[int, ...] = (1, 2)
    joint_structure: str = "auto"

    def __post_init__(self) -> None:
        def number(name: str, *, lo: float, hi: float = math.inf, integer: bool = False, optional: bool = False,
                   open_lo: bool = False) -> None:
            v = getattr(self, name)
            if v is None and optional:
                return
            ok = not isinstance(v, bool) and isinstance(v, int | float) and not math.isnan(v)
            if ok and integer:
                ok = isinstance(v, int)
            if ok:
                ok = (v > lo if open_lo else v >= lo) and v <= hi
            if not ok:
                kind = "a whole number" if integer else "a number"
                rng = f"{'>' if open_lo else '>='} {lo:g}" + ("" if math.isinf(hi) else f" and <= {hi:g}")
                raise InputError(f"options.{name}", f"must be {kind} {rng}, got {v!r}",
                                 "fix or remove this option" + (" (null chooses from the data)" if optional else ""))

        number("batch_resolution_s", lo=0.0, optional=True)
        number("censor_above_s", lo=0.0, optional=True, open_lo=True)
        if self.out_of_order not in ("error", "sort"):
            raise InputError("options.out_of_order", f"is {self.out_of_order!r}", "use 'error' or 'sort'")
        number("max_lag", lo=1, integer=True)
        number("min_intervals", lo=3, integer=True)
        number("significance", lo=0.0, hi=0.5, open_lo=True)
        number("max_decay", lo=0.0, hi=1.0 - 1e-12, open_lo=True)
        if not isinstance(self.match_interval_third_moment, bool):
            raise InputError("options.match_interval_third_moment", f"must be true or false, got "
                             f"{self.match_interval_third_moment!r}", "write true or false")
        number("max_batch", lo=1, integer=True)
        number("gap_factor", lo=1.0, open_lo=True)
        number("min_service_samples", lo=3, integer=True)
        number("max_service_order", lo=1, integer=True)
        number("min_obsolete", lo=1, integer=True)
        if self.arrivals not in ("per_mode", "joint", "auto"):
            raise InputError("options.arrivals", f"is {self.arrivals!r}", "use auto, joint or per_mode")
        phases = self.joint_phases
        if isinstance(phases, int) and not isinstance(phases, bool):
            phases = (phases,)
        if (not isinstance(phases, list | tuple) or not phases
                or any(isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 4 for p in phases)):
            raise InputError("options.joint_phases", f"must be a list of whole numbers 1..4, got {phases!r}",
                             "e.g. [1, 2]")
        object.__setattr__(self, "joint_phases", tuple(sorted(set(phases))))
        if self.joint_structure not in ("shared", "linear", "general", "auto", "all"):
            raise InputError("options.joint_structure", f"is {self.joint_structure!r}",
                             "use shared, linear, general, auto or all")
        try:
            object.__setattr__(self, "admission", Admission(self.admission).value)
        except ValueError as exc:
            raise InputError("options.admission", f"is {self.admission!r}", "use partial or reject-batch") from exc

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | FitOptions | None) -> FitOptions:
        """Options from a mapping (unknown keys are errors), an instance, or None (defaults)."""
        if options is None:
            return cls()
        if isinstance(options, FitOptions):
            return options
        if not isinstance(options, Mapping):
            raise InputError("options", f"must be a mapping, got {type(options).__name__}", "write key: value pairs")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in options if k not in known)
        if unknown:
            raise InputError(f"options.{unknown[0]}", "is not a known fitting option",
                             f"known options: {', '.join(sorted(known))}")
        values = dict(options)
        for key in ("batch_resolution_s", "censor_above_s", "max_decay", "significance", "gap_factor"):
            v = values.get(key)
            if isinstance(v, int) and not isinstance(v, bool):
                values[key] = float(v)
        return cls(**values)


class FitStatus(enum.Enum):
    """Overall outcome of :func:`fit_model`."""

    #: every observed mode's arrivals at the EXACT rung and the service law exact
    OK = "ok"
    #: a usable model, but some part used a lower rung (see the report's rungs)
    FALLBACK = "fallback"
    #: no mode had ``min_intervals`` intervals: the arrivals are a Poisson guess; success is False
    INSUFFICIENT_DATA = "insufficient_data"


@dataclass(frozen=True, eq=False)
class ModeFit:
    """The arrivals of one mode and how they were obtained.

    Attributes
    ----------
    mode : int
    source : str
        ``observed`` or ``linear``.
    base_mode : int or None
        For ``linear``: the observed mode r_obs in D^(r) = (r / r_obs) D^(r_obs).
    bmap : BMAP
        D_0, D_1 = d_1 D_1', ..., of the mode.
    rung : str
        A :class:`MapFitStatus` value, or ``linear``.
    message : str
    map_fit : Map2Fit or None
        The MAP(2) of batch epochs (observed modes).
    stats : SampleStats or None
        The interval sample (None when the mode had no interval).
    batch_size_probs : ndarray
        d_k, k = 1..k_max (of the base mode for ``linear``).
    n_batches, n_intervals, n_segments : int
    observed_page_rate : float or None
    lags : int
        Lag correlations measured.
    n_joined : int
        Intervals joined across stays in other modes (on the mode's own clock; 0 otherwise).
    """

    mode: int
    source: str
    base_mode: int | None
    bmap: BMAP
    rung: str
    message: str
    map_fit: Map2Fit | None
    stats: SampleStats | None
    batch_size_probs: NDArray[np.float64]
    n_batches: int
    n_intervals: int
    n_segments: int
    observed_page_rate: float | None
    lags: int = 0
    n_joined: int = 0

    def __post_init__(self) -> None:
        self.batch_size_probs.flags.writeable = False

    def report(self) -> dict[str, Any]:
        b = self.bmap
        L = self.lags
        observed: dict[str, Any] = {"page_rate": self.observed_page_rate}
        if self.stats is not None:
            s = self.stats
            observed.update({"mean_interval_s": s.mean, "variance": s.variance, "scv": s.scv,
                             "scv_stderr": s.scv_stderr, "third_moment": s.third_moment,
                             "lag_correlations": s.lag_correlations.tolist(),
                             "decay": fit_decay(s.lag_correlations)})
        lags = b.lag_correlations(L) if L and b.order > 1 else np.zeros(L)
        fitted: dict[str, Any] = {
            "page_rate": b.rate, "batch_rate": b.batch_rate, "mean_batch_size": b.mean_batch_size,
            "mean_interval_s": b.interval_moment(1), "variance": b.interval_variance, "scv": b.interval_scv,
            "third_moment": b.interval_moment(3), "lag_correlations": np.asarray(lags).tolist(),
            "decay": _decay_of(b),
        }
        if self.map_fit is not None:
            fitted["rho1_bounds"] = list(self.map_fit.rho1_bounds)
            fitted["marginal"] = self.map_fit.marginal
        return {"mode": self.mode, "source": self.source, "base_mode": self.base_mode, "rung": self.rung,
                "message": self.message,
                "samples": {"batches": self.n_batches, "intervals": self.n_intervals, "segments": self.n_segments,
                            "joined": self.n_joined},
                "observed": observed, "fitted": fitted, "batch_size_probs": self.batch_size_probs.tolist()}


@dataclass(frozen=True, eq=False)
class FitReport:
    """Everything a person needs to judge a fit.

    Attributes
    ----------
    deliveries, pages : int
        Deliveries and pages in the input.
    span_s : float
        Time from the first to the last delivery.
    out_of_order : int
        Timestamps that were earlier than their predecessor (re-sorted when ``sorted``).
    sorted : bool
    batch_resolution : Threshold
        The chosen resolution and why.
    batches, merged_deliveries : int
    censor : Threshold
        The chosen stop-gap bound and why.
    censored, mode_switches : int
        Intervals removed as stops, and across a change of mode (none on the modes' own clocks).
    censored_time_s : float
    batch_sizes_clipped : int
        Batches larger than ``max_batch``.
    modes : tuple of dict
        Per mode: source, rung, samples, observed vs fitted moments and lag correlations, d_k.
    linear_modes : tuple of int
        Modes that came from the linear rule.
    unused_modes : tuple of int
        Observed modes outside ``all_modes`` (their data was not used).
    service : dict
        Source, sample size, observed vs fitted moments, rung and message.
    obsolescence : dict
    capacity : int
    notes : tuple of str
        The choices, in pipeline order, in words.
    mode_clock : bool
        Intervals measured on each mode's own clock (``mode_changes`` given).
    joined : int
        On the modes' own clocks: intervals joined across stays in other modes.
    mode_mismatches : int
        On the modes' own clocks: deliveries whose recorded mode the trajectory did not have in force
        (counted in the trajectory's mode; see :func:`reconcile_modes`).
    exposure_s : mapping of int to float
        On the modes' own clocks: seconds spent in each mode, less its censored intervals.
    """

    deliveries: int
    pages: int
    span_s: float
    out_of_order: int
    sorted: bool
    batch_resolution: Threshold
    batches: int
    merged_deliveries: int
    censor: Threshold
    censored: int
    censored_time_s: float
    mode_switches: int
    batch_sizes_clipped: int
    modes: tuple[Mapping[str, Any], ...]
    linear_modes: tuple[int, ...]
    unused_modes: tuple[int, ...]
    service: Mapping[str, Any]
    obsolescence: Mapping[str, Any]
    capacity: int
    notes: tuple[str, ...] = field(default=())
    mode_clock: bool = False
    joined: int = 0
    mode_mismatches: int = 0
    exposure_s: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))

    def to_dict(self) -> dict[str, Any]:
        """Plain lists, dicts, numbers and strings (YAML- and JSON-safe; no inf or NaN)."""
        return _plain({
            "deliveries": self.deliveries, "pages": self.pages, "span_s": self.span_s,
            "out_of_order": self.out_of_order, "sorted": self.sorted,
            "batch_resolution": {"value_s": self.batch_resolution.value, "rule": self.batch_resolution.rule,
                                 "reason": self.batch_resolution.reason},
            "batches": self.batches, "merged_deliveries": self.merged_deliveries,
            "censoring": {"bound_s": self.censor.value, "rule": self.censor.rule, "reason": self.censor.reason,
                          "censored": self.censored, "censored_time_s": self.censored_time_s},
            "mode_switches_dropped": self.mode_switches,
            "mode_clock": {"used": self.mode_clock, "joined": self.joined, "mode_mismatches": self.mode_mismatches,
                           "exposure_s": {int(m): v for m, v in self.exposure_s.items()}},
            "batch_sizes_clipped": self.batch_sizes_clipped,
            "modes": list(self.modes), "linear_modes": list(self.linear_modes),
            "unused_modes": list(self.unused_modes),
            "service": dict(self.service), "obsolescence": dict(self.obsolescence),
            "capacity": self.capacity, "notes": list(self.notes),
        })


def _plain(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {(k if isinstance(k, str | int) else str(k)): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple | np.ndarray):
        return [_plain(v) for v in x]
    if isinstance(x, enum.Enum):
        return x.value
    if isinstance(x, bool | np.bool_):
        return bool(x)
    if isinstance(x, int | np.integer):
        return int(x)
    if isinstance(x, float | np.floating):
        v = float(x)
        return v if math.isfinite(v) else None
    return x


@dataclass(frozen=True, eq=False)
class ModelFit:
    """The result of :func:`fit_model`.

    Attributes
    ----------
    model : QueueModel
        The fitted model.
    report : FitReport
    success : bool
        False when no mode had enough intervals (status INSUFFICIENT_DATA) or a part failed its own
        numerical check; the model is still built.
    status : FitStatus
    message : str
    modes : tuple of ModeFit
        Every mode of the model, sorted.
    service : ServiceFit
    obsolescence : ObsolescenceFit
    options : FitOptions
    joint : JointFit or None
        The joint maximum-likelihood fit when it ran (``options.arrivals`` ``joint``, or ``auto`` with the
        mode trajectory) and succeeded (its
        arrivals are the model's; warm-start the next window's with ``fit_model(joint_init=fit.joint.params)``).
    """

    model: QueueModel
    report: FitReport
    success: bool
    status: FitStatus
    message: str
    modes: tuple[ModeFit, ...]
    service: ServiceFit
    obsolescence: ObsolescenceFit
    options: FitOptions
    joint: JointFit | None = None

    def to_dict(self) -> dict[str, Any]:
        """The model file (docs/ARCHITECTURE.md, "Model file"), ``{"model": ...}``, plus the fit under ``"report"``."""
        report = self.report.to_dict()
        report["status"] = self.status.value
        report["success"] = self.success
        report["message"] = self.message
        if self.joint is not None:
            j = self.joint
            report["joint"] = _plain({"phases": j.params.phases, "structure": j.params.structure,
                                      "loglik": j.loglik, "bic": j.bic, "parameters": j.n_parameters,
                                      "iterations": j.iterations, "converged": j.converged,
                                      "candidates": [list(c) for c in j.candidates], "message": j.message})
        return {"model": _plain(model_to_dict(self.model)), "report": report}


# -- per-mode fits -------------------------------------------------------------------------------------


def _decay_of(b: BMAP) -> float:
    """The non-unit eigenvalue of the embedded phase chain (0 for one phase): rho_k = rho_1 gamma^(k-1)."""
    if b.order == 1:
        return 0.0
    P = np.linalg.solve(-b.D0, b.generator - b.D0)
    return float(np.trace(P) - 1.0) if b.order == 2 else float(sorted(np.linalg.eigvals(P).real)[-2])
