"""Obsolescence of waiting pages (issue 3, step 8): an exponential useful life, configured or estimated.

With an exponential life of rate theta, every waiting page goes stale at rate theta, so over an
observation with D obsolete drops and E page-seconds spent waiting the maximum-likelihood estimate is
theta = D / E (the waits that end in service are right-censored lives). Given only the lives of pages
that did go stale, theta = 1 / mean is the estimate for uncensored lives; it is biased towards short
lives when service censors the others, and the report says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from robotctl.model import PH, InputError

from ._checks import float_array, positive_number


@dataclass(frozen=True, eq=False)
class ObsolescenceFit:
    """The obsolescence law of the model.

    Attributes
    ----------
    law : PH or None
        Exponential useful life, or None (pages never go stale in the model).
    source : str
        ``configured``, ``estimated from drops and waiting exposure``, ``estimated from lifetimes``, or
        ``none``.
    mean_useful_life_s : float or None
        Mean of ``law``.
    estimate_s : float or None
        The data's estimate of the mean life, also when the configured value was used.
    stderr_s : float or None
        Its standard error (mean / sqrt(count)).
    count : int
        Obsolete drops (or lifetimes) seen.
    message : str
    """

    law: PH | None
    source: str
    mean_useful_life_s: float | None
    estimate_s: float | None
    stderr_s: float | None
    count: int
    message: str


def waiting_exposure(times: Any, deltas: Any, levels: Any = None) -> tuple[float, int]:
    """Page-seconds spent waiting (in the buffer, not in service) from a stream of count changes.

    Parameters
    ----------
    times : array_like
        Event times (s), non-decreasing.
    deltas : array_like
        Change of the number of pages in the system at each event: + admitted pages of a delivery,
        - pages completed, lost at arrival or dropped as obsolete.
    levels : array_like, optional
        The number in the system *after* the event where it is known outright (a resynchronisation,
        e.g. the agent's ``queue`` events), NaN elsewhere; such an event's delta is ignored.

    Returns
    -------
    exposure : float
        Integral of max(N(t) - 1, 0) dt, assuming the server busy whenever N >= 1.
    backlog : int
        Pages assumed present before the first event so that N never goes negative before the first
        known level (0 for a complete log).
    """
    t = float_array("times", times)
    d = float_array("deltas", deltas)
    if t.size != d.size:
        raise InputError("deltas", f"has {d.size} entries but times has {t.size}", "give one change per event")
    if levels is None:
        lv = np.full(t.size, np.nan)
    else:
        lv = np.array(levels, dtype=float)
        if lv.shape != t.shape:
            raise InputError("levels", f"has shape {lv.shape} but times has {t.shape}", "give one level per event")
    if t.size < 2:
        return 0.0, 0
    if np.any(np.diff(t) < 0):
        raise InputError("times", "are not in time order", "sort the events by time")
    known = ~np.isnan(lv)
    d = np.where(known, 0.0, d)
    cs = np.cumsum(d)
    seg = np.cumsum(known)  # 0 before the first known level
    idx = np.flatnonzero(known)
    offsets = np.concatenate([[0.0], lv[idx] - cs[idx]])
    N = cs + offsets[seg]
    head = seg == 0
    backlog = int(max(0.0, -float(N[head].min()))) if head.any() else 0
    N = np.where(head, N + backlog, N)
    N = np.maximum(N, 0.0)
    waiting = np.maximum(N[:-1] - 1.0, 0.0)
    return float(np.dot(waiting, np.diff(t))), backlog


def fit_obsolescence(mean_useful_life_s: float | None = None, *, lifetimes: Any = None, drops: int | None = None,
                     exposure_s: float | None = None, min_count: int = 30) -> ObsolescenceFit:
    """The exponential useful life of a waiting page.

    Parameters
    ----------
    mean_useful_life_s : float, optional
        Configured mean life (s); wins over any estimate (which is still reported).
    lifetimes : array_like, optional
        Observed lives (s) of pages that went stale.
    drops, exposure_s : optional
        Number of obsolete drops and the page-seconds spent waiting over the same observation.
    min_count : int
        Fewest drops (or lifetimes) for an estimate.
    """
    estimate: float | None = None
    stderr: float | None = None
    count = 0
    how = ""
    if drops is not None and exposure_s is not None:
        if isinstance(drops, bool) or not isinstance(drops, int | np.integer) or drops < 0:
            raise InputError("obsolete_drops", f"must be a whole number >= 0, got {drops!r}", "count the drops")
        exposure = positive_number("obsolete_exposure_s", exposure_s, allow_zero=True)
        count = int(drops)
        if count >= min_count and exposure > 0:
            estimate = exposure / count
            how = f"estimated from drops and waiting exposure ({count} drops over {exposure:.4g} page-seconds)"
    elif lifetimes is not None:
        lives = float_array("obsolete_lifetimes", lifetimes, nonnegative=True)
        count = int(lives.size)
        if count >= min_count and lives.mean() > 0:
            estimate = float(lives.mean())
            how = (f"estimated from lifetimes ({count} lives; assumes no life was cut short by service, "
                   "which biases it short)")
    if estimate is not None:
        stderr = estimate / math.sqrt(count)
    if mean_useful_life_s is not None:
        mean = positive_number("mean_useful_life_s", mean_useful_life_s)
        extra = "" if estimate is None else f"; the data's estimate is {estimate:.4g} ± {stderr:.2g} s"
        return ObsolescenceFit(PH.exponential(1.0 / mean), "configured", mean, estimate, stderr, count,
                               f"exponential useful life of mean {mean:.4g} s as configured{extra}")
    if estimate is not None:
        return ObsolescenceFit(PH.exponential(1.0 / estimate), how.split(" (")[0], estimate, estimate, stderr, count,
                               f"exponential useful life of mean {estimate:.4g} ± {stderr:.2g} s, {how}")
    why = (f"only {count} obsolete drop(s) seen (< {min_count})" if count or drops is not None or lifetimes is not None
           else "no mean useful life configured and no obsolete drops observed")
    return ObsolescenceFit(None, "none", None, None, None, count,
                           f"no obsolescence in the model (pages never go stale): {why}; configure a mean useful life "
                           "to include it")
