"""From delivery timestamps to samples of batch intervals and batch sizes (issue 3, steps 1-3).

1. :func:`validate_deliveries` checks the timestamps (finite, enough of them, non-decreasing or sorted on
   request), the pages and the modes, and gives the inter-delivery times.
2. :func:`choose_batch_resolution` picks the resolution below which consecutive deliveries are one
   batch, and :func:`extract_batches` merges them: the batch epochs, sizes (pages) and modes.
3. :func:`choose_censor_bound` picks the bound above which an interval between batches means the crawl
   was stopped, and :func:`split_intervals` removes those, drops intervals across a change of mode, and
   gives each mode its intervals, their unbroken segments and its batch sizes.

The two automatic rules look for the same thing: an empty stretch at least ``gap_factor`` wide (a
decade by default) in the sorted logarithms of the intervals. With at least 1% of the inter-delivery
times below it and 5% above, it separates the gaps inside a batch from those between batches; above the
median of the intervals between batches, with at most 5% above it, it separates ordinary intervals from
stops.
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


def choose_batch_resolution(gaps: NDArray[np.float64], *, configured: float | None = None,
                            gap_factor: float = 10.0, min_below: float = 0.01, min_above: float = 0.05,
                            min_count: int = 5) -> Threshold:
    """Step 3a: the resolution below which consecutive deliveries form one batch.

    Equal timestamps (gap 0) are always one batch. The automatic rule sorts the positive gaps and looks
    for the widest empty stretch in log scale that has at least ``min_below`` of the gaps under it and at
    least ``min_above`` over it (both at least ``min_count``): the gaps inside batches below, those between
    batches above (stop gaps are far rarer than ``min_above``). If that stretch spans a factor
    ``gap_factor`` or more the resolution sits at its geometric middle; otherwise only equal timestamps
    merge (resolution 0).
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
    return Threshold(0.0, "automatic",
                     f"no empty stretch of a factor {gap_factor:g} among the inter-delivery times with "
                     f"{100 * min_below:g}% below and {100 * min_above:g}% above it (widest {10 ** width:.3g}x), so no "
                     f"batch structure beyond equal timestamps; {tie_note}")


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
    """

    mode: int
    intervals: NDArray[np.float64]
    segments: NDArray[np.int64]
    sizes: NDArray[np.int64]
    pages_in_intervals: int

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
        Intervals whose two batches were in different modes (removed).
    censored_time : float
        Total length of the censored intervals (s).
    """

    samples: tuple[ModeSample, ...]
    censored: int
    mode_switches: int
    censored_time: float


def split_intervals(batches: Batches, bound: float | None) -> IntervalSplit:
    """Step 2 applied, and the intervals divided by mode (see :class:`ModeSample`)."""
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
