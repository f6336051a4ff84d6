"""Change rates of pages from revisit observations, by maximum likelihood.

What a robot sees on each revisit of a page is whether it changed since the previous fetch, not how
many times. With Poisson changes of rate mu, a revisit t seconds after the previous one finds a change
with probability 1 - exp(-mu t), so observations (t_k, changed_k) have the log-likelihood

    l(mu) = sum_{changed} ln(1 - exp(-mu t_k)) - mu sum_{unchanged} t_k,

which is concave in mu. Its maximum solves sum_{changed} t_k / (exp(mu t_k) - 1) = sum_{unchanged} t_k
(a bracketed root search in log mu). With equal intervals t it is mu = -ln(1 - X / n) / t for X changes
in n visits.

Sample-size caveat. The estimate rests on how many revisits found the page unchanged and how many
changed: with no change seen the MLE is 0 (only an upper bound is known), with every revisit changed it is
infinite (only a lower bound); between those it is biased upwards for small samples (for equal intervals,
E[-ln(1 - X/n)] > mu t by Jensen's inequality, and infinite with positive probability) and its precision
depends on the intervals: revisits much longer than 1 / mu nearly all report "changed" and carry almost
no information. Every estimate therefore comes with its likelihood-ratio interval (the mu with
2 (l(mu_hat) - l(mu)) <= chi2_1 quantile, which stays valid at the edges), the number of observations
and changes, and a status; the message says when the sample is too small to trust the number.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtri

from robotctl._json import finite
from robotctl.model import InputError

#: Fewer observations than this earn ``FEW_OBSERVATIONS`` (the estimate is still given).
MIN_OBSERVATIONS = 30


class ChangeRateStatus(enum.Enum):
    """How far an estimate can be trusted."""

    #: both changed and unchanged revisits, at least ``min_observations`` of them
    OK = 0
    #: a finite estimate from fewer than ``min_observations`` revisits: wide interval, biased upwards
    FEW_OBSERVATIONS = 1
    #: no revisit found a change: the MLE is 0, only the upper end of the interval is informative
    NO_CHANGE = 2
    #: every revisit found a change: the MLE is infinite, only the lower end is informative
    ALL_CHANGED = 3
    #: no observations at all
    NO_DATA = 4


_MESSAGES = {
    ChangeRateStatus.OK: "maximum-likelihood estimate",
    ChangeRateStatus.FEW_OBSERVATIONS: "few revisits: the estimate is biased upwards and its interval is wide",
    ChangeRateStatus.NO_CHANGE: "no revisit saw a change: the rate is below the upper bound, the MLE is 0",
    ChangeRateStatus.ALL_CHANGED: "every revisit saw a change: the rate is above the lower bound; revisit "
                                  "sooner to measure it",
    ChangeRateStatus.NO_DATA: "no revisits observed",
}


@dataclass(frozen=True)
class ChangeRateEstimate:
    """The change rate of one page.

    Attributes
    ----------
    success : bool
        True when the estimate is finite and positive (status OK or FEW_OBSERVATIONS).
    status : ChangeRateStatus
    message : str
        Includes the sample-size caveat.
    rate : float
        The MLE of mu (changes per second): 0 with no change seen, inf with every revisit changed.
    lower, upper : float
        The likelihood-ratio interval at ``level``.
    standard_error : float
        From the observed information at the MLE (nan at the edges).
    observations, changes : int
        Revisits observed and how many found a change.
    level : float
    """

    success: bool
    status: ChangeRateStatus
    message: str
    rate: float
    lower: float
    upper: float
    standard_error: float
    observations: int
    changes: int
    level: float

    def to_dict(self) -> dict[str, Any]:
        return {"success": self.success, "status": self.status.name.lower(), "message": self.message,
                "rate": finite(self.rate), "lower": finite(self.lower), "upper": finite(self.upper),
                "standard_error": finite(self.standard_error), "observations": self.observations,
                "changes": self.changes, "level": self.level}


def _check(intervals: ArrayLike, changed: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    try:
        t = np.array(intervals, dtype=float).ravel()
        c = np.array(changed).ravel()
    except (TypeError, ValueError) as exc:
        raise InputError("intervals", f"are not numbers ({exc})", "seconds between consecutive fetches") from exc
    if t.size != c.size:
        raise InputError("changed", f"has {c.size} entries for {t.size} intervals", "one flag per revisit")
    bad = ~(np.isfinite(t) & (t > 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"intervals[{i}]", f"is {t[i]!r}", "the time since the previous fetch must be > 0 seconds")
    if c.dtype != bool and not np.isin(c, (0, 1)).all():
        raise InputError("changed", "holds values other than true/false (0/1)", "one flag per revisit")
    return t, c.astype(bool)


def estimate_change_rate(intervals: ArrayLike, changed: ArrayLike, *, level: float = 0.95,
                         min_observations: int = MIN_OBSERVATIONS) -> ChangeRateEstimate:
    """The maximum-likelihood change rate of one page from its revisits (module docstring).

    Parameters
    ----------
    intervals : array_like
        Seconds between each revisit and the fetch before it (> 0).
    changed : array_like of bool
        Whether that revisit found the page changed.
    level : float
        Confidence level of the likelihood-ratio interval.
    min_observations : int
        Fewer revisits give status FEW_OBSERVATIONS.
    """
    if not 0 < level < 1:
        raise InputError("level", f"is {level!r}", "a confidence level lies strictly between 0 and 1, e.g. 0.95")
    t, c = _check(intervals, changed)
    n, x = int(t.size), int(c.sum())
    if n == 0:
        s = ChangeRateStatus.NO_DATA
        return ChangeRateEstimate(False, s, _MESSAGES[s], math.nan, 0.0, math.inf, math.nan, 0, 0, level)
    chi2 = float(ndtri(0.5 + level / 2.0)) ** 2
    tc, U = t[c], float(t[~c].sum())

    def loglik(mu: float) -> float:
        return float(np.sum(np.log(-np.expm1(-mu * tc)))) - mu * U

    def score_log(lm: float) -> float:  # d l / d mu at mu = exp(lm), sign only matters
        mu = math.exp(lm)
        return float(np.sum(tc / np.expm1(mu * tc))) - U

    scale = 1.0 / float(np.median(t))
    if x == 0:
        upper = chi2 / (2.0 * U)
        s = ChangeRateStatus.NO_CHANGE
        msg = f"{_MESSAGES[s]} (n = {n}; upper {level:.0%} bound {upper:.3g} per s)"
        return ChangeRateEstimate(False, s, msg, 0.0, 0.0, upper, math.nan, n, 0, level)
    if x == n:
        target = -chi2 / 2.0
        lo = _bracket_root(lambda lm: loglik(math.exp(lm)) - target, math.log(scale), rising=True)
        lower = math.exp(lo)
        s = ChangeRateStatus.ALL_CHANGED
        msg = f"{_MESSAGES[s]} (n = {n}; lower {level:.0%} bound {lower:.3g} per s)"
        return ChangeRateEstimate(False, s, msg, math.inf, lower, math.inf, math.nan, n, n, level)
    lm_hat = _bracket_root(score_log, math.log(scale), rising=False)
    mu_hat = math.exp(lm_hat)
    top = loglik(mu_hat) - chi2 / 2.0
    lo = _bracket_root(lambda lm: loglik(math.exp(lm)) - top, lm_hat, rising=True, side=-1)
    hi = _bracket_root(lambda lm: loglik(math.exp(lm)) - top, lm_hat, rising=False, side=+1)
    e = np.exp(mu_hat * tc)
    info = float(np.sum(tc**2 * e / (e - 1.0) ** 2))
    se = 1.0 / math.sqrt(info) if info > 0 else math.nan
    s = ChangeRateStatus.OK if n >= min_observations else ChangeRateStatus.FEW_OBSERVATIONS
    msg = (f"{_MESSAGES[s]}: {mu_hat:.4g} per s from {n} revisits ({x} changed), {level:.0%} interval "
           f"[{math.exp(lo):.3g}, {math.exp(hi):.3g}]")
    return ChangeRateEstimate(True, s, msg, mu_hat, math.exp(lo), math.exp(hi), se, n, x, level)


def _bracket_root(fn: Any, start: float, *, rising: bool, side: int = 0) -> float:
    """A root of ``fn`` (in log mu), which is increasing (``rising``) or decreasing around it. ``side``
    -1 / +1 searches only below / above ``start`` (start itself is on the wrong side of zero)."""
    sign = 1.0 if rising else -1.0
    step = 1.0
    a = b = start
    if side == 0:
        v = fn(start) * sign
        if v == 0:
            return start
        direction = -1 if v > 0 else 1
    else:
        direction = side
    for _ in range(200):
        b = a + direction * step
        if (fn(b) * sign > 0) == (direction > 0):
            break
        a, step = b, step * 2.0
    else:  # pragma: no cover - the likelihood always turns within 200 doublings of the log scale
        raise RuntimeError("change-rate root not bracketed")
    lo, hi = (a, b) if a < b else (b, a)
    from scipy.optimize import brentq  # imported where used: scipy.optimize costs 0.4-0.8 s
    return float(brentq(fn, lo, hi, xtol=1e-12, rtol=1e-13, maxiter=300))


def estimate_change_rates(pages: Sequence[Any] | ArrayLike, intervals: ArrayLike, changed: ArrayLike, *,
                          level: float = 0.95, min_observations: int = MIN_OBSERVATIONS
                          ) -> dict[Any, ChangeRateEstimate]:
    """:func:`estimate_change_rate` for every page named in ``pages`` (one entry per revisit)."""
    p = np.asarray(pages)
    t, c = _check(intervals, changed)
    if p.size != t.size:
        raise InputError("pages", f"has {p.size} entries for {t.size} intervals", "one page per revisit")
    out: dict[Any, ChangeRateEstimate] = {}
    keys, inv = np.unique(p, return_inverse=True)
    for k, key in enumerate(keys.tolist()):
        sel = inv == k
        out[key] = estimate_change_rate(t[sel], c[sel], level=level, min_observations=min_observations)
    return out


__all__ = ["MIN_OBSERVATIONS", "ChangeRateEstimate", "ChangeRateStatus", "estimate_change_rate",
           "estimate_change_rates"]
