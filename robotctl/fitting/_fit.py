"""The whole fit (issue 3): delivery timestamps, sizes and service samples to a :class:`model.QueueModel`
and a report that explains every choice.

Pipeline: validate the deliveries (step 1), choose the batch resolution and merge batches (step 3),
choose the stop-gap bound and censor (step 2), split the intervals by mode, fit a MAP(2) to each mode's
batch epochs (step 4), make it a BMAP of pages with D_k = d_k D_1 (step 5), give unobserved modes
D^(r) = (r / r_obs) D^(r_obs) (step 6), fit the service law (step 7) and the obsolescence law (step 8).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.special import ndtri

from robotctl.model import BMAP, Admission, InputError, ModeArrivals, QueueModel

from ._arrivals import lift
from ._deliveries import (
    Batches,
    Deliveries,
    IntervalSplit,
    ModeSample,
    Threshold,
    choose_batch_resolution,
    choose_censor_bound,
    extract_batches,
    split_intervals,
    validate_deliveries,
)
from ._fit_types import FitOptions, FitReport, FitStatus, ModeFit, ModelFit
from ._joint import JointFit, JointParams, fit_joint, joint_data
from ._map2 import Map2Fit, MapFitStatus, map2_from_statistics
from ._modeclock import ModeTrajectory, as_trajectory, clock_intervals, mode_clock, reconcile_modes, split_on_clock
from ._obsolescence import ObsolescenceFit, fit_obsolescence
from ._ph2 import PhFitStatus
from ._service import ServiceFit, fit_service
from ._stats import MIN_LAG_PAIRS, SampleStats, sample_stats


def _batch_probs(sizes: NDArray[np.int64]) -> NDArray[np.float64]:
    counts = np.bincount(sizes)[1:].astype(float)
    return np.asarray(counts / counts.sum())


def _fit_observed(sample: ModeSample, opts: FitOptions) -> tuple[Map2Fit, SampleStats, str]:
    x = sample.intervals
    L = min(opts.max_lag, max(1, x.size // 10))
    stats = sample_stats(x, sample.segments, L)
    m3 = stats.third_moment if opts.match_interval_third_moment else None
    z_lags = float(ndtri(1.0 - opts.significance / (2 * L)))
    z_one = float(ndtri(1.0 - opts.significance / 2))
    sig = stats.significant_lags(z_lags)
    if not sig.any():
        n_lags = stats.lag_correlations.size
        if n_lags == 0:
            why_lags = (f"no lag correlation could be estimated (fewer than {MIN_LAG_PAIRS} pairs of intervals "
                        "within unbroken stretches)")
        else:
            why_lags = (f"no lag correlation among lags 1..{n_lags} is significant at family-wise level "
                        f"{opts.significance:g} (|rho_k| <= {z_lags:.3g}/sqrt(pairs); "
                        f"rho_1 = {stats.lag_correlations[0]:.3g})")
        if stats.scv_consistent_with_one(z_one):
            fit = map2_from_statistics(mean=stats.mean, variance=None, max_decay=opts.max_decay)
            return fit, stats, (f"poisson: {why_lags} and c^2 = {stats.scv:.3g} ± {stats.scv_stderr:.2g} is "
                                f"consistent with exponential intervals; Poisson batch epochs of the measured mean")
        fit = map2_from_statistics(mean=stats.mean, variance=stats.variance, lag_correlations=(),
                                   third_moment=m3, max_decay=opts.max_decay)
        return fit, stats, (f"renewal: {why_lags}; a renewal process matches the mean and variance; marginal: "
                            f"{fit.marginal}")
    fit = map2_from_statistics(mean=stats.mean, variance=stats.variance, lag_correlations=stats.lag_correlations,
                               third_moment=m3, max_decay=opts.max_decay)
    n_sig = int(sig.sum())
    return fit, stats, f"{fit.message} ({n_sig} of {stats.lag_correlations.size} lags significant)"


def _nearest(mode: int, candidates: Sequence[tuple[int, int]]) -> int:
    """The candidate mode nearest to ``mode``; ties go to more intervals, then to the smaller mode."""
    return min(candidates, key=lambda c: (abs(c[0] - mode), -c[1], c[0]))[0]


def _modes_arg(all_modes: Any) -> tuple[int, ...] | None:
    if all_modes is None:
        return None
    try:
        values = [int(m) for m in all_modes]
        exact = all(float(m) == int(m) for m in all_modes)
    except (TypeError, ValueError) as exc:
        raise InputError("all_modes", f"is not a list of robot counts ({exc})", "e.g. all_modes=[1, 2, 3, 4]") from exc
    if not values or not exact or min(values) < 0 or len(set(values)) != len(values):
        raise InputError("all_modes", f"must be distinct whole numbers >= 0, got {list(all_modes)!r}",
                         "e.g. all_modes=[1, 2, 3, 4]")
    return tuple(sorted(values))


# -- the stages of fit_model, in pipeline order ----------------------------------------------------------

@dataclass(frozen=True, eq=False)
class _Window:
    """Steps 1-3: the deliveries, their batches, and the intervals between batches split by mode (on the
    modes' own clocks when the trajectory is known: ``mismatches`` deliveries had their mode replaced)."""

    deliveries: Deliveries
    resolution: Threshold
    batches: Batches
    censor: Threshold
    split: IntervalSplit
    clock: bool = False
    mismatches: int = 0


def _split_window(delivery_times: Any, pages: Any, modes: Any, opts: FitOptions, notes: list[str],
                  trajectory: ModeTrajectory | None = None) -> _Window:
    """Validate the deliveries (step 1), merge batches (step 3), censor stop gaps (step 2), split by mode."""
    dl = validate_deliveries(delivery_times, pages, modes, out_of_order=opts.out_of_order)
    notes.append(f"{dl.n} deliveries ({int(dl.pages.sum())} pages) over {dl.times[-1] - dl.times[0]:.6g} s"
                 + (f"; {dl.out_of_order} timestamp(s) out of order were re-sorted" if dl.sorted else ""))
    mismatches = 0
    if trajectory is not None:
        end = float(dl.times[-1]) if trajectory.end_s is None else trajectory.end_s
        fixed, mismatches = reconcile_modes(trajectory, dl.times, dl.modes, end)
        if modes is None:  # no recorded modes: the trajectory's, which is no disagreement
            mismatches = 0
        elif mismatches:
            notes.append(f"{mismatches} of {dl.n} deliveries carried a mode the trajectory did not have in force "
                         "at their time; they count in the trajectory's mode (the one just before them)")
        dl = replace(dl, modes=fixed)
    res = choose_batch_resolution(dl.gaps, configured=opts.batch_resolution_s, gap_factor=opts.gap_factor)
    batches = extract_batches(dl, res.value or 0.0)
    notes.append(res.reason + f"; {batches.n} batches ({batches.merged} deliveries merged into earlier ones)")
    if batches.n < 2:
        raise InputError("delivery_times", f"all {dl.n} deliveries fall into one batch (resolution "
                         f"{res.value or 0:g} s), so there is no interval between batches to fit",
                         "collect a longer window, or set options batch_resolution_s lower")
    if trajectory is None:
        censor = choose_censor_bound(np.diff(batches.epochs), configured=opts.censor_above_s,
                                     gap_factor=opts.gap_factor)
        split = split_intervals(batches, censor.value)
    else:
        mclock = mode_clock(trajectory, batches.epochs, batches.modes, end)
        censor = choose_censor_bound(clock_intervals(mclock, batches.modes), configured=opts.censor_above_s,
                                     gap_factor=opts.gap_factor)
        split = split_on_clock(batches, mclock, censor.value)
    notes.append(censor.reason + (f" ({split.censored} interval(s), {split.censored_time:.6g} s)"
                                  if split.censored else ""))
    if split.mode_switches:
        notes.append(f"{split.mode_switches} interval(s) between batches in different modes were dropped "
                     "(the number of robots changed inside them)")
    if trajectory is not None:
        notes.append(f"intervals measured on each mode's own clock (seconds spent in the mode): {split.joined} "
                     "joined across stays in other modes, none dropped")
    return _Window(dl, res, batches, censor, split, trajectory is not None, mismatches)


@dataclass(frozen=True, eq=False)
class _ModeChoice:
    """Which modes the model gets, and which of them have enough intervals of their own."""

    by_mode: Mapping[int, ModeSample]
    model_modes: tuple[int, ...]
    unused: tuple[int, ...]
    #: (mode, intervals) of the modes with at least ``min_intervals`` intervals
    good: tuple[tuple[int, int], ...]
    clipped: int


def _choose_modes(split: IntervalSplit, wanted: tuple[int, ...] | None, opts: FitOptions,
                  notes: list[str]) -> _ModeChoice:
    by_mode = {s.mode: s for s in split.samples}
    if wanted is not None:
        model_modes = wanted
    else:  # the observed modes; mode 0 (no robot active) only when it has enough data of its own
        model_modes = tuple(m for m in sorted(by_mode) if m >= 1 or by_mode[m].intervals.size >= opts.min_intervals)
    unused = tuple(m for m in sorted(by_mode) if m not in model_modes)
    if unused:
        where = "among all_modes" if wanted is not None else "well observed (mode 0 needs min_intervals of its own)"
        notes.append(f"observed mode(s) {list(unused)} are not {where}; their data was not used")
    good = tuple((m, s.intervals.size) for m, s in by_mode.items()
                 if m in model_modes and s.intervals.size >= opts.min_intervals)
    clipped = int(sum(int((s.sizes > opts.max_batch).sum()) for m, s in by_mode.items() if m in model_modes))
    if clipped:
        notes.append(f"{clipped} batch(es) larger than max_batch = {opts.max_batch} pages counted as "
                     f"{opts.max_batch} pages")
    return _ModeChoice(by_mode, model_modes, unused, good, clipped)


def _observed_mode(mode: int, sample: ModeSample, usable: bool, opts: FitOptions) -> ModeFit:
    """Steps 4-5 for one mode: a MAP(2) of its batch epochs (a Poisson one when it has too few intervals
    and no mode is better observed), then the BMAP of pages D_k = d_k D_1."""
    probs = _batch_probs(np.minimum(sample.sizes, opts.max_batch))
    if usable:
        fit, stats, message = _fit_observed(sample, opts)
    else:
        stats = sample_stats(sample.intervals, sample.segments, 0)
        fit = map2_from_statistics(mean=stats.mean, variance=None, max_decay=opts.max_decay)
        message = (f"poisson: only {sample.intervals.size} interval(s) (< min_intervals = {opts.min_intervals}) "
                   "and no better-observed mode; Poisson batch epochs of the measured mean")
    return ModeFit(mode, "observed", None, BMAP.from_map(fit.D0, fit.D1, probs.tolist()), fit.status.value,
                   message, fit, stats, probs, int(sample.sizes.size), int(sample.intervals.size),
                   int(np.unique(sample.segments).size), sample.observed_page_rate,
                   int(stats.lag_correlations.size), sample.joined)


def _pooled_mode(batches: Batches, model_modes: tuple[int, ...], opts: FitOptions) -> ModeFit:
    """When no interval survived censoring and mode splitting: Poisson epochs from every interval between
    batches, whatever its mode, taken as the smallest mode >= 1."""
    x = np.diff(batches.epochs)
    stats = sample_stats(x, None, 0)
    fit = map2_from_statistics(mean=stats.mean, variance=None, max_decay=opts.max_decay)
    probs = _batch_probs(np.minimum(batches.sizes, opts.max_batch))
    base = min((m for m in model_modes if m >= 1), default=None)
    if base is None:
        raise InputError("all_modes", "has no mode >= 1 to carry the arrivals", "add the modes the fleet runs")
    message = (f"poisson: no interval survived censoring and mode splitting; Poisson epochs from all "
               f"{x.size} intervals between batches regardless of mode, taken as mode {base}")
    return ModeFit(base, "observed", None, BMAP.from_map(fit.D0, fit.D1, probs.tolist()), fit.status.value,
                   message, fit, stats, probs, batches.n, int(x.size), 1, float(batches.sizes[1:].sum() / x.sum()),
                   int(stats.lag_correlations.size))


def _fit_observed_modes(window: _Window, choice: _ModeChoice, opts: FitOptions) -> tuple[dict[int, ModeFit], bool]:
    """Every mode with intervals of its own (all of them when none has ``min_intervals``), or the pooled
    fallback; returns the fits and whether the data was insufficient."""
    fits: dict[int, ModeFit] = {}
    good = {m for m, _ in choice.good}
    for m in choice.model_modes:
        s = choice.by_mode.get(m)
        if s is None or s.sizes.size == 0:
            continue
        if m not in good and good:
            continue  # the linear rule, later
        if s.intervals.size == 0:
            continue
        fits[m] = _observed_mode(m, s, m in good, opts)
    if not fits:
        pooled = _pooled_mode(window.batches, choice.model_modes, opts)
        return {pooled.mode: pooled}, True
    return fits, not good


def _share_order(fits: dict[int, ModeFit]) -> dict[int, ModeFit]:
    """Poisson modes written with two phases when another mode has two (one ModeArrivals, one order)."""
    order = max(mf.bmap.order for mf in fits.values())
    out: dict[int, ModeFit] = {}
    for m, mf in fits.items():
        if mf.bmap.order == order:
            out[m] = mf
            continue
        lifted = lift(mf.bmap, order)
        assert lifted is not None  # MAP(2) fits have one or two phases
        out[m] = replace(mf, bmap=lifted,
                         message=mf.message + "; written with two phases to share the order of the other modes")
    return out


def _rescale_to_exposure(fits: dict[int, ModeFit], dl: Deliveries,
                         mode_exposure_s: Mapping[int, float]) -> dict[int, ModeFit]:
    """Each observed mode rescaled in time to pages delivered in the mode / seconds spent in it (on the
    modes' own clocks, the seconds less the mode's censored intervals, and the fitted rate is close to it
    already: the factor only reconciles the time before a mode's first batch and after its last)."""
    out = dict(fits)
    for m, old in fits.items():
        exposure = float(mode_exposure_s.get(m, 0.0))
        if not math.isfinite(exposure) or exposure < 0:
            raise InputError(f"mode_exposure_s.{m}", f"is {exposure!r}", "seconds spent in the mode, >= 0")
        pages_m = float(dl.pages[dl.modes == m].sum())
        if exposure > 0 and pages_m > 0 and old.bmap.rate > 0:
            target = pages_m / exposure
            out[m] = replace(old, bmap=old.bmap.scaled(target / old.bmap.rate),
                             message=old.message + f"; rate {old.bmap.rate:.4g} -> {target:.4g} pages/s = "
                             f"{pages_m:.0f} pages / {exposure:.6g} s in the mode")
    return out


def _add_linear_modes(fits: dict[int, ModeFit], choice: _ModeChoice, opts: FitOptions,
                      notes: list[str]) -> tuple[dict[int, ModeFit], list[int]]:
    """Step 6: every other mode by D^(r) = (r / r_obs) D^(r_obs) from the nearest observed mode."""
    out = dict(fits)
    observed = [(m, mf.n_intervals) for m, mf in fits.items()]
    linear: list[int] = []
    for m in choice.model_modes:
        if m in out:
            continue
        if m == 0:
            raise InputError("all_modes", "includes mode 0 (no robot active) without enough data, and the linear "
                             "rule would give it no arrivals", "leave mode 0 out of all_modes")
        candidates = [c for c in observed if c[0] >= 1]
        if not candidates:
            raise InputError("modes", f"mode {m} needs the linear rule but no mode >= 1 was observed to scale from",
                             "record deliveries with at least one robot active")
        base = _nearest(m, candidates)
        bf = out[base]
        s = choice.by_mode.get(m)
        n_int = 0 if s is None else int(s.intervals.size)
        why = ("not observed" if s is None else
               f"only {n_int} interval(s) observed (< min_intervals = {opts.min_intervals})")
        out[m] = ModeFit(m, "linear", base, bf.bmap.scaled(m / base), "linear",
                         f"linear: {why}; D^({m}) = ({m}/{base}) D^({base}) (paper 000's real-data model)",
                         None, None, bf.batch_size_probs, 0 if s is None else int(s.sizes.size), n_int,
                         0 if s is None else int(np.unique(s.segments).size),
                         None if s is None or n_int == 0 else s.observed_page_rate, bf.lags)
        linear.append(m)
    if linear:
        notes.append(f"mode(s) {linear} from the linear rule D^(r) = (r / r_obs) D^(r_obs) "
                     f"({', '.join(f'{m} from {out[m].base_mode}' for m in linear)})")
    return out, linear


def _fit_laws(service_times: Any, sizes_bytes: Any, processing_rate_bps: float | None,
              mean_useful_life_s: float | None, obsolete_lifetimes: Any, obsolete_drops: int | None,
              obsolete_exposure_s: float | None, opts: FitOptions,
              notes: list[str]) -> tuple[ServiceFit, ObsolescenceFit]:
    """Steps 7-8: the service law and the useful life of a waiting page."""
    service = fit_service(service_times, sizes_bytes, processing_rate_bps, min_samples=opts.min_service_samples,
                          max_order=opts.max_service_order)
    notes.append(f"service from {service.source} ({service.n} samples, mean {service.mean:.4g} s, c^2 "
                 f"{service.scv:.4g}): {service.fit.message}" + (f"; {service.note}" if service.note else ""))
    obs = fit_obsolescence(mean_useful_life_s, lifetimes=obsolete_lifetimes, drops=obsolete_drops,
                           exposure_s=obsolete_exposure_s, min_count=opts.min_obsolete)
    notes.append(obs.message)
    return service, obs


def _verdict(mode_fits: tuple[ModeFit, ...], service: ServiceFit, obs: ObsolescenceFit, insufficient: bool,
             opts: FitOptions, joint: JointFit | None = None, joint_failed: bool = False
             ) -> tuple[FitStatus, bool, str]:
    """The fit's status, success and one-line message."""
    observed_fits = [mf for mf in mode_fits if mf.source == "observed"]
    if insufficient:
        status = FitStatus.INSUFFICIENT_DATA
    elif joint is not None:
        status = FitStatus.OK if service.fit.status is PhFitStatus.EXACT else FitStatus.FALLBACK
    elif (joint_failed or any(mf.rung != MapFitStatus.EXACT.value for mf in observed_fits)
          or service.fit.status is not PhFitStatus.EXACT):
        status = FitStatus.FALLBACK
    else:
        status = FitStatus.OK
    numeric_ok = all(mf.map_fit is None or mf.map_fit.success for mf in mode_fits) and service.fit.success
    success = status is not FitStatus.INSUFFICIENT_DATA and numeric_ok
    rungs = (f"joint, {joint.params.phases} phase(s), {joint.params.structure}" if joint is not None else
             ", ".join(f"mode {mf.mode}: {mf.rung}" for mf in mode_fits))
    message = (f"{status.value}: {len(mode_fits)} mode(s) ({rungs}); service {service.fit.status.value} "
               f"({service.fit.method}); obsolescence {obs.source}")
    if status is FitStatus.INSUFFICIENT_DATA:
        message += f"; no mode had min_intervals = {opts.min_intervals} intervals between batches"
    if not numeric_ok:
        message += "; a part failed its numerical check (see the report)"
    return status, success, message


def _report(window: _Window, choice: _ModeChoice, mode_fits: tuple[ModeFit, ...], linear: list[int],
            service: ServiceFit, obs: ObsolescenceFit, capacity: int, notes: list[str]) -> FitReport:
    dl, split, svc = window.deliveries, window.split, service.fit
    return FitReport(
        deliveries=dl.n, pages=int(dl.pages.sum()), span_s=float(dl.times[-1] - dl.times[0]),
        out_of_order=dl.out_of_order, sorted=dl.sorted, batch_resolution=window.resolution,
        batches=window.batches.n, merged_deliveries=window.batches.merged, censor=window.censor,
        censored=split.censored, censored_time_s=split.censored_time, mode_switches=split.mode_switches,
        batch_sizes_clipped=choice.clipped, modes=tuple(MappingProxyType(mf.report()) for mf in mode_fits),
        linear_modes=tuple(linear), unused_modes=choice.unused,
        service=MappingProxyType({
            "source": service.source, "samples": service.n, "rung": svc.status.value, "method": svc.method,
            "message": svc.message + (f"; {service.note}" if service.note else ""),
            "observed": {"mean_s": service.mean, "scv": service.scv, "third_moment": service.third_moment},
            "fitted": {"mean_s": svc.fitted_moments[0], "scv": svc.law.scv, "third_moment": svc.fitted_moments[2],
                       "phases": svc.law.order}}),
        obsolescence=MappingProxyType({
            "source": obs.source, "mean_useful_life_s": obs.mean_useful_life_s, "estimate_s": obs.estimate_s,
            "stderr_s": obs.stderr_s, "count": obs.count, "message": obs.message}),
        capacity=capacity, notes=tuple(notes), mode_clock=window.clock, joined=split.joined,
        mode_mismatches=window.mismatches,
        exposure_s=MappingProxyType({s.mode: s.exposure_s for s in split.samples if s.exposure_s is not None}))

def fit_model(delivery_times: Any, *, pages: Any = None, modes: Any = None, all_modes: Any = None,
              service_times: Any = None, sizes_bytes: Any = None, processing_rate_bps: float | None = None,
              mean_useful_life_s: float | None = None, obsolete_lifetimes: Any = None,
              obsolete_drops: int | None = None, obsolete_exposure_s: float | None = None,
              mode_exposure_s: Mapping[int, float] | None = None,
              mode_changes: ModeTrajectory | None = None,
              capacity: int, options: Mapping[str, Any] | FitOptions | None = None,
              joint_init: JointParams | None = None) -> ModelFit:
    """Fit the queueing model of paper 000 to observed deliveries and service.

    Parameters
    ----------
    delivery_times : array_like
        One timestamp (s) per delivery event, at least two.
    pages : array_like of int, optional
        Pages per delivery (default 1).
    modes : array_like of int, optional
        Active robots at each delivery (default: one mode, 1).
    all_modes : sequence of int, optional
        Modes the model must define (default: the observed ones). Unobserved modes, and observed ones
        with fewer than ``min_intervals`` intervals, get D^(r) = (r / r_obs) D^(r_obs) from the nearest
        well-observed mode r_obs (paper 000's real-data model).
    service_times : array_like, optional
        Service-time samples (s); or
    sizes_bytes, processing_rate_bps : optional
        Content sizes and the indexer's bytes per second (service = size / rate).
    mean_useful_life_s : float, optional
        Configured mean useful life of a waiting page (exponential).
    obsolete_lifetimes : array_like, optional
        Observed lives of pages that went stale (uncensored estimate).
    obsolete_drops, obsolete_exposure_s : optional
        Obsolete drops and page-seconds spent waiting (censored maximum-likelihood estimate).
    mode_exposure_s : mapping of int to float, optional
        Seconds spent in each mode over the window, when the trajectory itself is not known. Without
        ``mode_changes`` the intervals that straddle a change of mode are dropped, and under threshold
        control, where a mode often lasts a few deliveries, those are the long ones: the within-mode
        intervals alone overstate a short-lived mode's rate (several-fold on the paper example under its
        optimal policy) and bias its shape (Poisson traffic shows c^2 != 1 and is fitted as a renewal
        MAP(2)). Given the exposure, each observed mode's BMAP keeps its (biased) fitted shape and is
        rescaled in time to the rate pages delivered in the mode / seconds spent in it.
    mode_changes : ModeTrajectory, optional
        The mode over the window (change epochs, the mode after each, the end of the observation).
        Supersedes ``mode_exposure_s`` (give one of them): each mode's intervals are measured on its own
        clock, the seconds spent in the mode, so that an interval straddling stays in other modes is
        joined rather than dropped (exact for Poisson traffic per mode, an approximation for MAPs; see
        :mod:`robotctl.fitting._modeclock`), the stop-gap bound is chosen and applied on those intervals,
        and each observed mode's rate is pages in the mode / (seconds in it less its censored intervals).
        Deliveries whose recorded mode the trajectory does not have in force count in the trajectory's
        mode; the report's ``mode_clock`` says how many, and how many intervals were joined.
    capacity : int
        K, pages in the system (the one in service included).
    options : FitOptions or mapping, optional
        See :class:`FitOptions`.
    joint_init : JointParams, optional
        When the joint fit runs: warm-start the joint fit from this estimate (the previous
        window's ``fit.joint.params``); its phases and structure are kept.

    Returns
    -------
    ModelFit
        ``.model``, ``.report``, ``.success``, ``.status``, ``.message``; ``.to_dict()`` is a model file.

    Raises
    ------
    InputError
        Invalid input only (see :func:`validate_deliveries`, :func:`fit_service`): awkward but valid data
        falls back to a lower rung and says so.

    Examples
    --------
    Poisson deliveries of one page at 2 per second with one robot, and service samples of mean 0.4 s:

    >>> import numpy as np
    >>> from robotctl.fitting import fit_model
    >>> rng = np.random.default_rng(1)
    >>> times = np.cumsum(rng.exponential(0.5, 4000))
    >>> fit = fit_model(times, service_times=rng.exponential(0.4, 500), mean_useful_life_s=30.0, capacity=5)
    >>> fit.success, fit.model.modes, fit.modes[0].rung
    (True, (1,), 'poisson')
    >>> round(float(fit.model.arrivals[1].rate), 1), round(float(fit.model.service.mean), 1)
    (2.0, 0.4)

    Two modes, the second one never observed, takes the linear rule from the first:

    >>> fit = fit_model(times, modes=np.ones(times.size, dtype=int), all_modes=[1, 2],
    ...                 service_times=rng.exponential(0.4, 500), mean_useful_life_s=30.0, capacity=5)
    >>> [(mf.mode, mf.source) for mf in fit.modes]
    [(1, 'observed'), (2, 'linear')]
    >>> round(float(fit.model.arrivals[2].rate / fit.model.arrivals[1].rate), 12)
    2.0
    """
    opts = FitOptions.from_mapping(options)
    wanted = _modes_arg(all_modes)
    trajectory = as_trajectory(mode_changes)
    if trajectory is not None and mode_exposure_s:
        raise InputError("mode_exposure_s", "is given together with mode_changes, which gives the time spent in "
                         "each mode itself", "pass mode_changes only")
    notes: list[str] = []
    window = _split_window(delivery_times, pages, modes, opts, notes, trajectory)
    choice = _choose_modes(window.split, wanted, opts, notes)
    fits, insufficient = _fit_observed_modes(window, choice, opts)
    fits = _share_order(fits)
    if trajectory is not None:
        mode_exposure_s = {s.mode: s.exposure_s for s in window.split.samples if s.exposure_s is not None}
    if mode_exposure_s:
        fits = _rescale_to_exposure(fits, window.deliveries, mode_exposure_s)
        notes.append("observed modes' rates set to pages delivered in the mode / time spent in it (mode exposure"
                     + (", from the mode trajectory)" if trajectory is not None else ")"))
    fits, linear = _add_linear_modes(fits, choice, opts, notes)
    mode_fits = tuple(fits[m] for m in sorted(fits))
    notes.extend(f"mode {mf.mode}: {mf.message}" for mf in mode_fits if mf.source == "observed")
    service, obs = _fit_laws(service_times, sizes_bytes, processing_rate_bps, mean_useful_life_s,
                             obsolete_lifetimes, obsolete_drops, obsolete_exposure_s, opts, notes)
    arrivals = ModeArrivals.per_mode({mf.mode: mf.bmap for mf in mode_fits})
    joint: JointFit | None = None
    joint_failed = False
    if (opts.arrivals == "joint" or (opts.arrivals == "auto" and trajectory is not None)) and not insufficient:
        joint, joint_arrivals, note = _joint_arrivals(window, trajectory, mode_fits, opts, joint_init)
        notes.append(note)
        if joint_arrivals is None:
            joint_failed = True
        else:
            arrivals = joint_arrivals
    model = QueueModel(capacity, arrivals, service.fit.law, obs.law, Admission(opts.admission))
    notes.append(f"capacity K = {model.capacity} pages (given), admission {opts.admission}")
    status, success, message = _verdict(mode_fits, service, obs, insufficient, opts, joint, joint_failed)
    report = _report(window, choice, mode_fits, linear, service, obs, model.capacity, notes)
    return ModelFit(model, report, success, status, message, mode_fits, service, obs, opts, joint)


def _joint_arrivals(window: _Window, trajectory: ModeTrajectory | None, mode_fits: tuple[ModeFit, ...],
                    opts: FitOptions, init: JointParams | None
                    ) -> tuple[JointFit | None, ModeArrivals | None, str]:
    """The joint maximum-likelihood arrivals (issue 27) for the model's modes, or None and why not."""
    b = window.batches
    if trajectory is None:
        # the trajectory from the batches' modes: a change between two batches is put half way
        change = np.flatnonzero(np.diff(b.modes) != 0) + 1
        epochs = np.concatenate([[b.epochs[0]], (b.epochs[change - 1] + b.epochs[change]) / 2])
        trajectory = ModeTrajectory(epochs, np.concatenate([[b.modes[0]], b.modes[change]]), end_s=None)
        how = "the mode trajectory taken from the deliveries' modes (changes half way between batches)"
    else:
        how = "the recorded mode trajectory"
    bound = window.censor.value
    try:
        data = joint_data(b.epochs, np.minimum(b.sizes, opts.max_batch), trajectory,
                          censor_above_s=bound if bound is not None and bound > 0 else math.inf)
        structures = (("shared", "linear") if opts.joint_structure == "auto"
                      else ("shared", "linear", "general") if opts.joint_structure == "all"
                      else (opts.joint_structure,))
        if init is not None and (init.structure not in structures or init.phases not in opts.joint_phases):
            init = None                                  # the options changed since: search afresh
        jf = fit_joint(data, phases=opts.joint_phases, structure=structures, init=init)
        more = [p for p in opts.joint_phases if p > jf.params.phases]
        if init is not None and more:
            # a warm start keeps its phases and structure; one more phase is tried cold each window (BIC
            # decides), so an estimate made on little data does not pin the model to too few phases
            bigger = fit_joint(data, phases=min(more), structure=jf.params.structure)
            if math.isfinite(bigger.bic) and bigger.bic < jf.bic:
                jf = bigger
        wanted = [mf.mode for mf in mode_fits if mf.mode >= 1]
        arrivals = jf.params.arrivals(wanted)
    except (InputError, np.linalg.LinAlgError, ValueError, FloatingPointError) as exc:
        return None, None, f"joint fit failed ({exc}); the per-mode arrivals are kept (fallback)"
    if not jf.success or set(arrivals.modes) != set(wanted):
        return None, None, (f"joint fit unusable ({jf.message}); the per-mode arrivals are kept (fallback)")
    extra = [m for m in wanted if m not in data.modes]
    return jf, arrivals, (f"arrivals: joint maximum likelihood on {jf.params.phases} common phase(s), "
                          f"{jf.params.structure} structure, over {data.n_batches} batches with {how}"
                          + (f" ({'warm start'})" if init is not None else "")
                          + (f"; mode(s) {extra} by the linear rule on the rates" if extra else "")
                          + f": {jf.message}")
