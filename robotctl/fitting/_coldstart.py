"""A first model from a few dozen deliveries: one phase per law, with exact intervals on its rates (issue 28,
cold start).

Before the regular fit has data enough for a MAP per mode, the agent still knows K, the fleet N and the
first deliveries and completions. :func:`cold_start_model` turns them into the simplest model of paper 000
that uses them all:

- arrivals: batch Poisson in every mode, the batch rate linear in the active robots,
  lambda_m = m lambda_1 (paper 000's linear rule), with lambda_1 = batches / robot-seconds
  (sum over modes of m x seconds in mode m), and the batch-size law the observed one;
- service: exponential of the observed mean (service samples, or sizes over ``processing_rate_bps``);
- obsolescence: exponential of ``mean_useful_life_s`` when it is configured, else of the observed drops
  over the page-seconds spent waiting when there are drops, else none.

Each rate comes with its exact interval at confidence ``level`` (two-sided, equal tails): for n batches
in T robot-seconds, Garwood's Poisson interval chi2(a/2; 2n) / 2T .. chi2(1 - a/2; 2n + 2) / 2T; for n
exponential service times summing to S, the Gamma interval chi2(a/2; 2n) / 2S .. chi2(1 - a/2; 2n) / 2S
(Johnson, Kotz & Kemp, Univariate Discrete Distributions, 3rd ed., Section 4.7.3; the service one
because 2 mu S is chi-square with 2n degrees of freedom).

:attr:`ColdStartFit.pessimistic` is the model at the end of both intervals where pages pile up: the
highest arrival rate and the slowest service. A policy optimised under it parks robots at least as early as
the data allow (the point of a cold start is to stop the flood of the start-up fleet); the interval
narrows as the deliveries come in, and the regular fit takes over once there are enough for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from robotctl import InputError
from robotctl.model import BMAP, PH, Admission, ModeArrivals, QueueModel

from ._checks import float_array, freeze
from ._chi2 import chi2_ppf

#: Default confidence level of the intervals.
DEFAULT_LEVEL = 0.9


@dataclass(frozen=True)
class RateInterval:
    """A rate with its exact two-sided interval.

    Attributes
    ----------
    estimate, lower, upper : float
        Per second.
    count : int
        Events counted (batches, or service samples).
    exposure : float
        Robot-seconds (arrivals) or seconds of service (sum of the samples).
    level : float
    """

    estimate: float
    lower: float
    upper: float
    count: int
    exposure: float
    level: float

    def to_dict(self) -> dict[str, float]:
        return {"estimate": self.estimate, "lower": self.lower, "upper": self.upper, "count": self.count,
                "exposure": self.exposure, "level": self.level}


def poisson_rate_interval(count: int, exposure: float, level: float = DEFAULT_LEVEL) -> RateInterval:
    """Garwood's exact interval for a Poisson rate: ``count`` events in ``exposure`` seconds.

    >>> iv = poisson_rate_interval(30, 10.0, 0.9)
    >>> round(iv.estimate, 3), round(iv.lower, 3), round(iv.upper, 3)
    (3.0, 2.159, 4.069)
    """
    _check_level(level)
    if count < 0 or not exposure > 0:
        raise InputError("exposure", f"needs count >= 0 and exposure > 0, got {count}, {exposure!r}",
                         "count events over a positive time")
    a = 1.0 - level
    lower = chi2_ppf(a / 2, 2 * count) / (2 * exposure) if count > 0 else 0.0
    upper = chi2_ppf(1 - a / 2, 2 * count + 2) / (2 * exposure)
    return RateInterval(count / exposure, lower, upper, int(count), float(exposure), level)


def exponential_rate_interval(samples: ArrayLike, level: float = DEFAULT_LEVEL) -> RateInterval:
    """The exact interval for the rate of an exponential law from its samples (2 mu sum ~ chi2(2n))."""
    _check_level(level)
    x = float_array("service_times", samples, min_size=1, nonnegative=True)
    total = float(x.sum())
    if not total > 0:
        raise InputError("service_times", "sum to 0", "report service seconds > 0")
    n = x.size
    a = 1.0 - level
    return RateInterval(n / total, chi2_ppf(a / 2, 2 * n) / (2 * total),
                        chi2_ppf(1 - a / 2, 2 * n) / (2 * total), n, total, level)


def _check_level(level: float) -> None:
    if isinstance(level, bool) or not isinstance(level, int | float) or not 0.0 < level < 1.0:
        raise InputError("level", f"must be in (0, 1), got {level!r}", "e.g. 0.9")


@dataclass(frozen=True, eq=False)
class ColdStartFit:
    """What :func:`cold_start_model` found.

    Attributes
    ----------
    model : QueueModel
        The point estimate.
    pessimistic : QueueModel
        The highest arrival rate and the slowest service of the intervals (module docstring).
    optimistic : QueueModel
        The lowest arrival rate and the fastest service.
    batch_rate_per_robot : RateInterval
        lambda_1, batches per second per active robot.
    service_rate : RateInterval
        Pages indexed per second of service.
    batch_probs : ndarray
        Observed share of batches of 1, 2, ... pages.
    useful_life_s : float or None
        Mean useful life used (configured or estimated).
    deliveries, completions : int
    """

    model: QueueModel
    pessimistic: QueueModel
    optimistic: QueueModel
    batch_rate_per_robot: RateInterval
    service_rate: RateInterval
    batch_probs: NDArray[np.float64]
    useful_life_s: float | None
    deliveries: int
    completions: int

    def __post_init__(self) -> None:
        freeze(self.batch_probs)

    def to_dict(self) -> dict[str, object]:
        return {"batch_rate_per_robot": self.batch_rate_per_robot.to_dict(),
                "service_rate": self.service_rate.to_dict(),
                "batch_probs": [float(p) for p in self.batch_probs], "useful_life_s": self.useful_life_s,
                "deliveries": self.deliveries, "completions": self.completions}


def cold_start_model(capacity: int, robots: int, pages: ArrayLike, modes: ArrayLike,
                     mode_exposure_s: Mapping[int, float], *, service_times: ArrayLike | None = None,
                     sizes_bytes: ArrayLike | None = None, processing_rate_bps: float | None = None,
                     mean_useful_life_s: float | None = None, obsolete_drops: int | None = None,
                     obsolete_exposure_s: float | None = None, min_mode: int = 1,
                     admission: Admission | str = Admission.PARTIAL,
                     level: float = DEFAULT_LEVEL) -> ColdStartFit:
    """The one-phase model of the module docstring, with its intervals.

    Parameters
    ----------
    capacity, robots : int
        K and N; the model has modes ``min_mode``..N.
    pages, modes : array_like of int
        Pages and active robots of each delivery.
    mode_exposure_s : mapping of int to float
        Seconds spent in each mode over the same time.
    service_times : array_like, optional
        Service seconds per page; or ``sizes_bytes`` with ``processing_rate_bps``.
    mean_useful_life_s : float, optional
        Configured useful life; else ``obsolete_drops`` over ``obsolete_exposure_s`` when there are drops.
    level : float
        Confidence level of both intervals.

    Examples
    --------
    40 single-page deliveries with 4 robots active over 10 s, service 0.05 s a page, K = 10:

    >>> from robotctl.fitting import cold_start_model
    >>> fit = cold_start_model(10, 4, [1] * 40, [4] * 40, {4: 10.0}, service_times=[0.05] * 20)
    >>> round(fit.batch_rate_per_robot.estimate, 3), fit.model.modes
    (1.0, (1, 2, 3, 4))
    >>> fit.pessimistic.arrivals[4].rate > fit.model.arrivals[4].rate > fit.optimistic.arrivals[4].rate
    True
    """
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise InputError("capacity", f"must be a whole number >= 1, got {capacity!r}", "K of the indexer")
    if isinstance(robots, bool) or not isinstance(robots, int) or robots < 1 or not 1 <= min_mode <= robots:
        raise InputError("robots", f"must be a whole number >= min_mode = {min_mode} >= 1, got {robots!r}",
                         "N, the virtual robots")
    p = np.asarray(pages)
    m = np.asarray(modes)
    if p.shape != m.shape or p.ndim != 1 or p.size == 0:
        raise InputError("pages", f"needs one entry per delivery, like modes (shapes {p.shape}, {m.shape})",
                         "give the pages and the mode of each delivery")
    if (p < 1).any() or (p != np.round(p)).any():
        raise InputError("pages", "holds a value that is not a whole number >= 1", "pages per delivery")
    robot_seconds = sum(float(k) * float(v) for k, v in mode_exposure_s.items() if float(v) > 0)
    if not robot_seconds > 0:
        raise InputError("mode_exposure_s", "has no time with an active robot", "run robots before a fit")
    arrivals = poisson_rate_interval(int(p.size), robot_seconds, level)
    sizes = np.bincount(p.astype(np.int64))[1:].astype(float)
    probs = sizes / sizes.sum()
    if service_times is not None and np.size(service_times) > 0:
        service = exponential_rate_interval(service_times, level)
    elif sizes_bytes is not None and np.size(sizes_bytes) > 0 and processing_rate_bps:
        service = exponential_rate_interval(float_array("sizes_bytes", sizes_bytes) / processing_rate_bps, level)
    else:
        raise InputError("service_times", "are missing (no completions with service_s, nor sizes with "
                         "processing_rate_bps)", "report service_s with completions")
    life = mean_useful_life_s
    if life is None and obsolete_drops and obsolete_exposure_s and obsolete_exposure_s > 0:
        life = obsolete_exposure_s / obsolete_drops
    obsolescence = PH.exponential(1.0 / life, field="model.obsolescence") if life else None
    adm = Admission(admission)

    def model(batch_rate: float, service_rate: float) -> QueueModel:
        bmaps = {k: BMAP.poisson(k * batch_rate, probs, field=f"model.arrivals.{k}")
                 for k in range(min_mode, robots + 1)}
        return QueueModel(capacity, ModeArrivals.per_mode(bmaps), PH.exponential(service_rate, field="model.service"),
                          obsolescence, adm)

    lowest = max(arrivals.lower, arrivals.estimate * 1e-3)  # no deliveries at all is not a model
    return ColdStartFit(model(arrivals.estimate, service.estimate), model(arrivals.upper, service.lower),
                        model(lowest, service.upper), arrivals, service, probs,
                        None if life is None else float(life), int(p.size), int(service.count))


__all__ = ["ColdStartFit", "RateInterval", "cold_start_model", "exponential_rate_interval", "poisson_rate_interval"]
