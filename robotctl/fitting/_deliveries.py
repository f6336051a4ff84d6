"""From delivery timestamps to samples of batch intervals and batch sizes (issue 3, steps 1-3).

1. :func:`validate_deliveries` checks the timestamps (finite, enough of them, non-decreasing or sorted on
   request), the pages and the modes, and gives the inter-delivery times.
2. :func:`choose_batch_resolution` picks the resolution below which consecutive deliveries are one
   batch, and :func:`extract_batches` merges them: the batch epochs, sizes (pages) and modes.
3. :func:`choose_censor_bound` picks the bound above which an interval between batches means the crawl
   was stopped, and :func:`split_intervals` removes those, drops intervals across a change of mode, and
   gives each mode its intervals, their unbroken segments and its batch sizes.

The stop-gap rule looks for an empty stretch at least ``gap_factor`` wide (a decade by default) in the
sorted logarithms of the intervals between batches, above their median with at most 5% above it. The
batch resolution looks for the valley between the gaps inside batches and those between batches: such an
empty stretch (with at least 1% of the inter-delivery times below it and 5% above), or, where the gaps
between batches are exponential and fill every stretch, the crossing of a two-population mixture that a
stated test accepts (:func:`fit_gap_mixture`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl import InputError

from ._checks import count_array, float_array, freeze, time_scale


@dataclass(frozen=True, eq=False)
class Deliveries:
    """Validated deliveries in time order.

    Attributes
    ----------
    times : ndarray
        Delivery times (s), non-decreasing.
    pages : ndarray of int
        Pages per delivery (>= 1).
    modes : ndarray of int
        Active robots at each delivery.
    gaps : ndarray
        Inter-delivery times times[i+1] - times[i] (>= 0).
    out_of_order : int
        How many timestamps were earlier than the one before them in the input.
    sorted : bool
        True when the input was re-sorted (stable) to put them in order.
    """

    times: NDArray[np.float64]
    pages: NDArray[np.int64]
    modes: NDArray[np.int64]
    gaps: NDArray[np.float64]
    out_of_order: int
    sorted: bool

    def __post_init__(self) -> None:
        freeze(self.times, self.pages, self.modes, self.gaps)

    @property
    def n(self) -> int:
        return int(self.times.size)


def validate_deliveries(delivery_times: Any, pages: Any = None, modes: Any = None, *,
                        out_of_order: str = "error", default_mode: int = 1) -> Deliveries:
    """Step 1: check the deliveries and compute the inter-delivery times.

    Parameters
    ----------
    delivery_times : array_like
        One timestamp (s) per delivery; at least two.
    pages : array_like of int, optional
        Pages per delivery, >= 1 (default 1 each).
    modes : array_like of int, optional
        Active robots at each delivery, >= 0 (default ``default_mode`` for all).
    out_of_order : {"error", "sort"}
        What to do with a timestamp earlier than its predecessor: raise (naming how many and the first),
        or sort the deliveries stably and report how many there were.

    Raises
    ------
    InputError
        Fewer than two deliveries, a non-finite time, bad pages or modes, or (with "error") times out of
        order.
    """
    if out_of_order not in ("error", "sort"):
        raise InputError("options.out_of_order", f"is {out_of_order!r}", "use 'error' or 'sort'")
    t = float_array("delivery_times", delivery_times)
    n = int(t.size)
    if n < 2:
        raise InputError("delivery_times", f"has {n} deliver{'y' if n == 1 else 'ies'}; at least 2 are needed "
                         "to measure an interval (and about 30 per mode for more than a Poisson fit)",
                         "collect a longer window of deliveries")
    p = np.ones(n, dtype=np.int64) if pages is None else count_array("pages", pages, n, minimum=1)
    m = np.full(n, int(default_mode), dtype=np.int64) if modes is None else count_array("modes", modes, n, minimum=0)
    back = np.flatnonzero(t[1:] < t[:-1]) + 1
    sorted_ = False
    if back.size:
        if out_of_order == "error":
            i = int(back[0])
            raise InputError("delivery_times", f"{back.size} timestamp(s) are earlier than the one before them "
                             f"(first at index {i}: {float(t[i])!r} < {float(t[i - 1])!r})",
                             "sort the deliveries by time (or pass options out_of_order='sort')")
        order = np.argsort(t, kind="stable")
        t, p, m = t[order], p[order], m[order]
        sorted_ = True
    gaps = np.diff(t)
    positive = int((gaps > 0).sum())
    if positive:
        time_scale("delivery_times", float(t[-1] - t[0]) / positive)  # the intervals between distinct times
    return Deliveries(t, p, m, gaps, int(back.size), sorted_)


@dataclass(frozen=True)
class Threshold:
    """A bound chosen by a configured value or an automatic rule, and why.

    Attributes
    ----------
    value : float or None
        The bound in seconds; None when there is none (nothing censored).
    rule : str
        ``configured``, ``automatic`` or ``none``.
    reason : str
        One sentence for the report.
    """

    value: float | None
    rule: str
    reason: str


def _widest_hole(logs: NDArray[np.float64], first: int, last: int) -> tuple[int, float]:
    """Index i in [first, last) maximising logs[i+1] - logs[i] (logs sorted), and that width."""
    if last <= first:
        return -1, 0.0
    widths = logs[first + 1:last + 1] - logs[first:last]
    i = int(np.argmax(widths))
    return first + i, float(widths[i])


@dataclass(frozen=True)
class GapMixture:
    """Two exponential populations of gaps, p Exp(rate_fast) + (1 - p) Exp(rate_slow) (an H2 fitted by EM),
    and whether they are two populations at all.

    Attributes
    ----------
    weight_fast : float
        p, the share of gaps in the fast population (inside batches).
    rate_fast, rate_slow : float
        Rates (1/s) of the two populations.
    crossing_s : float
        The gap at which a gap is as likely from either population (the valley between them).
    overlap : float
        The larger of P(fast gap > crossing) and P(slow gap < crossing): the share of either population
        that the crossing misclassifies.
    lr_statistic : float
        2 (log L(H2) - log L(one exponential)) on the gaps used.
    n : int
        Gaps used (a regular subsample of at most :data:`MIXTURE_SAMPLE`).
    two_populations : bool
        The stated test: ``lr_statistic`` beyond its critical value, ``overlap`` at most ``max_overlap``,
        and each population holding its minimum share (see :func:`fit_gap_mixture`).
    """

    weight_fast: float
    rate_fast: float
    rate_slow: float
    crossing_s: float
    overlap: float
    lr_statistic: float
    n: int
    two_populations: bool


#: Most gaps the mixture is fitted on (a regular subsample of the sorted gaps beyond it).
MIXTURE_SAMPLE = 50_000


def _exp_loglik(x: NDArray[np.float64], rate: float) -> float:
    return float(x.size * math.log(rate) - rate * x.sum())


def fit_gap_mixture(gaps: NDArray[np.float64], *, critical: float = 20.0, max_overlap: float = 0.02,
                    min_fast: float = 0.01, min_slow: float = 0.05, max_iter: int = 300) -> GapMixture | None:
    """A two-population mixture of positive gaps, and the test for whether two populations exist.

    Under plain Poisson traffic the gaps are one exponential population. When a crawler delivers the pages
    of a batch milliseconds apart and the batches seconds apart, they are two: a fast population inside
    batches and a slow one between them. The gaps are fitted with p Exp(a) + (1 - p) Exp(b), a > b, by EM
    (Dempster, Laird & Rubin 1977; on log gaps these are two log-exponential components, whose valley is
    where the densities cross: p a e^(-a x) = (1 - p) b e^(-b x), x* = ln(p a / ((1 - p) b)) / (a - b)).

    The stated test: two populations exist when (1) the likelihood ratio 2 (log L(H2) - log L(Exp)) exceeds
    ``critical`` (the exponential is the null; the ratio's law at the boundary p = 0 is non-standard, and 20
    is beyond the 0.999 quantile of a chi-square with 3 degrees of freedom, 16.3, a conservative bound);
    (2) the valley separates them: at x* at most ``max_overlap`` of either population falls on the wrong
    side (e^(-a x*) and 1 - e^(-b x*)), which needs rates some hundreds of times apart; (3) each holds its
    share (``min_fast`` of the gaps inside batches, ``min_slow`` between them). Bursty but unbatched
    traffic (a MAP whose gaps have c^2 of 2 to 10) passes (1) but not (2): its H2's rates are a few times
    to some tens of times apart.

    Returns None when there are fewer than 20 positive gaps.
    """
    pos = np.sort(gaps[gaps > 0])
    if pos.size < 20:
        return None
    if pos.size > MIXTURE_SAMPLE:  # a regular subsample of the sorted gaps keeps their distribution
        pos = pos[np.linspace(0, pos.size - 1, MIXTURE_SAMPLE).astype(np.int64)]
    x = pos / pos.mean()  # scale-free: rates in units of 1 / mean gap
    n = x.size
    k = max(1, n // 10)
    a, b, p = 1.0 / x[:k].mean(), 1.0 / x[n // 2:].mean(), 0.5
    if a <= b * (1 + 1e-9):
        a = b * 2.0
    old = -math.inf
    for _ in range(max_iter):
        la = math.log(p) + math.log(a) - a * x
        lb = math.log1p(-p) + math.log(b) - b * x
        top = np.maximum(la, lb)
        ll_each = top + np.log(np.exp(la - top) + np.exp(lb - top))
        ll = float(ll_each.sum())
        w = np.exp(la - ll_each)  # posterior of the fast population
        sw = float(w.sum())
        p = min(max(sw / n, 1e-12), 1 - 1e-12)
        a = sw / max(float((w * x).sum()), 1e-300)
        b = (n - sw) / max(float(((1 - w) * x).sum()), 1e-300)
        if a < b:
            a, b, p = b, a, 1 - p
        if ll - old <= 1e-10 * abs(ll):
            break
        old = ll
    lr = 2.0 * (ll - _exp_loglik(x, 1.0 / x.mean()))
    scale = float(pos.mean())
    if a - b <= 0 or p * a <= (1 - p) * b:
        crossing = math.nan
        overlap = 1.0
    else:
        xc = math.log(p * a / ((1 - p) * b)) / (a - b)
        crossing = xc * scale
        overlap = max(math.exp(-a * xc), -math.expm1(-b * xc))
    two = bool(lr > critical and overlap <= max_overlap and p >= min_fast and 1 - p >= min_slow)
    return GapMixture(p, a / scale, b / scale, crossing, overlap, lr, int(n), two)


def choose_batch_resolution(gaps: NDArray[np.float64], *, configured: float | None = None,
                            gap_factor: float = 10.0, min_below: float = 0.01, min_above: float = 0.05,
                            min_count: int = 5) -> Threshold:
    """Step 3a: the resolution below which consecutive deliveries form one batch.

    Equal timestamps (gap 0) are always one batch. Two automatic rules look for the valley between the gaps
    inside batches and the gaps between them:

    - the **empty stretch**: the sorted positive gaps' widest empty stretch in log scale with at least
      ``min_below`` of the gaps under it and ``min_above`` over it (both at least ``min_count``); it counts
      when it spans a factor ``gap_factor`` or more, and the resolution sits at its geometric middle. It
      finds batches whose gaps leave a hole, but not those of crawler traffic whose batches are exponential
      with a mean of seconds: their gaps fill every stretch;
    - the **mixture** (:func:`fit_gap_mixture`): two exponential populations, with the stated test for
      whether there are two at all; the resolution is the gap where the two densities cross.

    When the empty stretch counts it is used (it holds the mixture's crossing whenever both apply); else
    the mixture's crossing when it finds two populations; else only equal timestamps merge (resolution 0).
    """
    if configured is not None:
        return Threshold(float(configured), "configured",
                         f"batch resolution {configured:g} s as configured" if configured > 0 else
                         "batch resolution 0 as configured: only deliveries with equal timestamps merge")
    pos = gaps[gaps > 0]
    zeros = int(gaps.size - pos.size)
    tie_note = f"{zeros} equal-timestamp gap(s) merge regardless" if zeros else "no equal timestamps"
    n = int(pos.size)
    first = max(min_count, math.ceil(min_below * n)) - 1
    last = n - max(min_count, math.ceil(min_above * n))
    if last <= first:
        return Threshold(0.0, "automatic", f"too few positive gaps ({n}) to look for batch structure; {tie_note}")
    logs = np.log10(np.sort(pos))
    i, width = _widest_hole(logs, first, last)
    if width >= math.log10(gap_factor):
        res = float(10 ** ((logs[i] + logs[i + 1]) / 2))
        return Threshold(res, "automatic",
                         f"batch resolution {res:.3g} s: the sorted inter-delivery times have an empty stretch "
                         f"from {10 ** logs[i]:.3g} s to {10 ** logs[i + 1]:.3g} s ({width:.2f} decades) with "
                         f"{i + 1} of {n} positive gaps ({100 * (i + 1) / n:.1f}%) below it; {tie_note}")
    mix = fit_gap_mixture(pos, min_fast=min_below, min_slow=min_above)
    if mix is not None and mix.two_populations:
        below = int((pos < mix.crossing_s).sum())
        return Threshold(mix.crossing_s, "automatic",
                         f"batch resolution {mix.crossing_s:.3g} s: the gaps are two exponential populations, "
                         f"{100 * mix.weight_fast:.1f}% with mean {1 / mix.rate_fast:.3g} s inside batches and the "
                         f"rest with mean {1 / mix.rate_slow:.3g} s between them (likelihood ratio "
                         f"{mix.lr_statistic:.3g} against one exponential; {100 * mix.overlap:.2g}% of either "
                         f"falls on the wrong side of the valley), the resolution where their densities cross; "
                         f"{below} of {n} positive gaps below it; {tie_note}")
    why = ("" if mix is None else
           f"; nor two exponential populations (likelihood ratio {mix.lr_statistic:.3g}, overlap at the valley "
           f"{100 * mix.overlap:.2g}% > 2%)" if mix.lr_statistic > 20.0 else
           f"; nor two exponential populations (likelihood ratio {mix.lr_statistic:.3g} <= 20 against one)")
    return Threshold(0.0, "automatic",
                     f"no empty stretch of a factor {gap_factor:g} among the inter-delivery times with "
                     f"{100 * min_below:g}% below and {100 * min_above:g}% above it (widest {10 ** width:.3g}x)"
                     f"{why}, so no batch structure beyond equal timestamps; {tie_note}")


@dataclass(frozen=True, eq=False)
class Batches:
    """Batches of deliveries.

    Attributes
    ----------
    epochs : ndarray
        Time of each batch (its first delivery).
    sizes : ndarray of int
        Pages in each batch.
    modes : ndarray of int
        Mode at each batch's first delivery.
    merged : int
        Deliveries merged into an earlier one's batch.
    """

    epochs: NDArray[np.float64]
    sizes: NDArray[np.int64]
    modes: NDArray[np.int64]
    merged: int

    def __post_init__(self) -> None:
        freeze(self.epochs, self.sizes, self.modes)

    @property
    def n(self) -> int:
        return int(self.epochs.size)


def extract_batches(deliveries: Deliveries, resolution: float) -> Batches:
    """Step 3b: merge each delivery whose gap to the previous one is 0 or below ``resolution``."""
    new = np.empty(deliveries.n, dtype=bool)
    new[0] = True
    g = deliveries.gaps
    new[1:] = (g > 0) & (g >= resolution)
    starts = np.flatnonzero(new)
    sizes = np.add.reduceat(deliveries.pages, starts)
    return Batches(deliveries.times[starts], sizes.astype(np.int64), deliveries.modes[starts],
                   int(deliveries.n - starts.size))


def choose_censor_bound(intervals: NDArray[np.float64], *, configured: float | None = None,
                        gap_factor: float = 10.0, max_fraction: float = 0.05) -> Threshold:
    """Step 2: the bound above which an interval between batches means the crawl was stopped.

    The automatic rule sorts the positive intervals, looks above their median for the widest empty
    stretch in log scale with at least one and at most ``max_fraction`` of the intervals above it, and if
    that stretch spans a factor ``gap_factor`` or more puts the bound at its geometric middle. Otherwise
    nothing is censored. A configured bound (seconds) is used as is; ``math.inf`` censors nothing.
    """
    if configured is not None:
        if math.isinf(configured):
            return Threshold(None, "configured", "censoring switched off as configured")
        return Threshold(float(configured), "configured",
                         f"intervals longer than {configured:g} s censored as configured")
    pos = intervals[intervals > 0]
    n = int(pos.size)
    if n < 4:
        return Threshold(None, "none", f"too few intervals ({n}) to look for stop gaps; nothing censored")
    logs = np.log10(np.sort(pos))
    most = max(1, math.floor(max_fraction * n))
    first = max(n // 2, n - 1 - most)
    i, width = _widest_hole(logs, first, n - 1)
    if i >= 0 and width >= math.log10(gap_factor):
        bound = float(10 ** ((logs[i] + logs[i + 1]) / 2))
        return Threshold(bound, "automatic",
                         f"stop gaps: the sorted intervals between batches have an empty stretch from "
                         f"{10 ** logs[i]:.3g} s to {10 ** logs[i + 1]:.3g} s ({width:.2f} decades) with {n - 1 - i} "
                         f"of {n} above it; intervals longer than {bound:.3g} s are censored")
    return Threshold(None, "none",
                     f"no empty stretch of a factor {gap_factor:g} among the longest {100 * max_fraction:g}% of the "
                     f"intervals (widest {10 ** width if i >= 0 else 1:.3g}x); nothing censored")


@dataclass(frozen=True, eq=False)
class ModeSample:
    """What one mode contributes: intervals between its batches and its batch sizes.

    Attributes
    ----------
    mode : int
    intervals : ndarray
        Intervals between consecutive batches both in this mode, none censored.
    segments : ndarray of int
        Segment id of each interval; consecutive intervals share an id unless a censored gap or a stay in
        another mode lies between them (lag correlations pair intervals inside one segment only).
    sizes : ndarray of int
        Sizes of all batches in this mode.
    pages_in_intervals : int
        Pages of the batches that close the kept intervals (for the observed page rate).
    joined : int
        On the mode's own clock (:func:`split_on_clock`): kept intervals joined across stays in other
        modes; 0 otherwise.
    exposure_s : float or None
        On the mode's own clock: seconds spent in the mode, less its censored intervals; None otherwise.
    """

    mode: int
    intervals: NDArray[np.float64]
    segments: NDArray[np.int64]
    sizes: NDArray[np.int64]
    pages_in_intervals: int
    joined: int = 0
    exposure_s: float | None = None

    def __post_init__(self) -> None:
        freeze(self.intervals, self.segments, self.sizes)

    @property
    def observed_time(self) -> float:
        return float(self.intervals.sum())

    @property
    def observed_page_rate(self) -> float:
        t = self.observed_time
        return self.pages_in_intervals / t if t > 0 else math.nan


@dataclass(frozen=True, eq=False)
class IntervalSplit:
    """Per-mode samples and what was dropped.

    Attributes
    ----------
    samples : tuple of ModeSample
        One per observed mode, sorted by mode.
    censored : int
        Intervals longer than the censor bound (removed).
    mode_switches : int
        Intervals whose two batches were in different modes (removed; always 0 on the modes' own clocks).
    censored_time : float
        Total length of the censored intervals (s).
    joined : int
        On the modes' own clocks: kept intervals joined across stays in other modes.
    """

    samples: tuple[ModeSample, ...]
    censored: int
    mode_switches: int
    censored_time: float
    joined: int = 0


def split_intervals(batches: Batches, bound: float | None) -> IntervalSplit:
    """Step 2 applied, and the intervals between consecutive batches divided by mode, dropping those whose
    two batches are in different modes (see :class:`ModeSample`; :func:`split_on_clock` when the mode
    trajectory is known)."""
    x = np.diff(batches.epochs)
    before, after = batches.modes[:-1], batches.modes[1:]
    censored = np.zeros(x.size, dtype=bool) if bound is None else x > bound
    switched = (before != after) & ~censored
    kept = ~censored & ~switched
    seg = np.cumsum(~kept)
    samples = []
    for mode in np.unique(batches.modes):
        sel = kept & (after == mode)
        samples.append(ModeSample(int(mode), x[sel], seg[sel].astype(np.int64),
                                  batches.sizes[batches.modes == mode], int(batches.sizes[1:][sel].sum())))
    return IntervalSplit(tuple(samples), int(censored.sum()), int(switched.sum()), float(x[censored].sum()))
