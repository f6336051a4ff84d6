"""Each mode's own clock: batch intervals measured in the time spent in the mode (issue 3, step 2 under
control that switches modes often).

Under threshold or MDP control a mode often lasts a few deliveries. Measured in real time, the interval
between two batches of one mode either straddles a stay in another mode (then it mixes two modes' traffic)
or it does not (then it is short, because long intervals are the ones a switch interrupts): dropping the
first kind and keeping the second biases both the rate and the shape of the fitted law. Given the mode
trajectory (the epochs at which the number of active robots changed and the mode after each), mode m's
clock

    tau_m(t) = seconds spent in mode m up to t

stops while another mode is in force. The intervals of mode m are the differences of tau_m at consecutive
batch epochs of mode m: an interval that straddles stays in other modes is *joined* (the residual time
from the last batch before leaving m plus the time from re-entering m to the next batch), and none is
dropped.

For Poisson arrivals per mode this is exact, whatever decides the switches (the queue, a policy, a
clock): the batches of mode m have intensity lambda_m 1{mode(t) = m}, so their count is a point process
with compensator lambda_m tau_m(t), and by the random time-change theorem (Meyer 1971; Brown & Nair
1988) it is a Poisson process of rate lambda_m on mode m's clock. For a MAP or BMAP per mode it is an
approximation: in paper 000's model the phase keeps evolving (under the other mode's D_0 + D_1) while
another mode is in force, so the phase at re-entry is not the one at exit; a joined interval then
carries a little of the other mode's dynamics. Lag correlations pair consecutive intervals on the mode's
clock across joins (only a censored stop breaks the sequence): pairing only inside unbroken stays selects
the short intervals, and gave Poisson modes a spurious rho_1 of 0.1-0.26; across joins the pairs are an
approximation for MAPs, like the joined interval itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl import InputError

from ._checks import float_array, freeze
from ._deliveries import Batches, IntervalSplit, ModeSample


@dataclass(frozen=True, eq=False)
class ModeTrajectory:
    """The mode (active robots) over time, piecewise constant: ``modes[i]`` is in force from
    ``epochs[i]`` until ``epochs[i + 1]`` (the last one until ``end_s``).

    Built from array-likes and validated (:class:`InputError` naming ``mode_changes.<field>``): the epochs
    finite and non-decreasing (equal epochs are allowed; the later entry wins and the earlier one lasts
    no time), the modes whole numbers >= 0, one per epoch, ``end_s`` finite and not before the last epoch.

    Attributes
    ----------
    epochs : ndarray
        Change epochs (s), non-decreasing; ``epochs[0]`` is the start of the observation (with the mode
        in force then), at or before the first delivery.
    modes : ndarray of int
        The mode from each epoch on.
    end_s : float or None
        End of the observation (s), at or after the last delivery; None: the last delivery.

    Examples
    --------
    Two robots from 0 s, one from 10 s, two again from 15 s, observed until 20 s:

    >>> from robotctl.fitting import ModeTrajectory
    >>> traj = ModeTrajectory([0.0, 10.0, 15.0], [2, 1, 2], end_s=20.0)
    >>> traj.exposure(20.0)
    {1: 5.0, 2: 15.0}
    """

    epochs: NDArray[np.float64]
    modes: NDArray[np.int64]
    end_s: float | None = None

    def __post_init__(self) -> None:
        e = float_array("mode_changes.epochs", self.epochs, min_size=1)
        m = float_array("mode_changes.modes", self.modes)
        if m.size != e.size:
            raise InputError("mode_changes.modes", f"has {m.size} entries but mode_changes.epochs has {e.size}",
                             "give the mode in force after each change epoch")
        frac = np.flatnonzero((m != np.round(m)) | (m < 0))
        if frac.size:
            i = int(frac[0])
            raise InputError("mode_changes.modes", f"entry {i} is {m[i]:g}, not a whole number >= 0",
                             "modes count active robots")
        back = np.flatnonzero(np.diff(e) < 0)
        if back.size:
            i = int(back[0]) + 1
            raise InputError("mode_changes.epochs", f"entry {i} ({float(e[i])!r}) is earlier than entry {i - 1} "
                             f"({float(e[i - 1])!r}); {back.size} change(s) out of order",
                             "give the mode changes in time order")
        end = self.end_s
        if end is not None:
            if isinstance(end, bool) or not isinstance(end, int | float | np.integer | np.floating) \
                    or not math.isfinite(float(end)):
                raise InputError("mode_changes.end_s", f"must be a finite number, got {end!r}",
                                 "the end of the observation in seconds, or None for the last delivery")
            end = float(end)
            if end < e[-1]:
                raise InputError("mode_changes.end_s", f"is {end!r}, before the last change epoch {float(e[-1])!r}",
                                 "the observation ends at or after the last change")
        object.__setattr__(self, "epochs", e)
        object.__setattr__(self, "modes", m.astype(np.int64))
        object.__setattr__(self, "end_s", end)
        freeze(self.epochs, self.modes)

    def durations(self, end: float) -> NDArray[np.float64]:
        """Seconds each entry is in force, the last one until ``end``."""
        return np.diff(np.append(self.epochs, end))

    def exposure(self, end: float) -> dict[int, float]:
        """Seconds spent in each mode from ``epochs[0]`` to ``end`` (modes that last no time left out)."""
        d = self.durations(end)
        return {int(k): float(d[self.modes == k].sum()) for k in np.unique(self.modes[d > 0])}


@dataclass(frozen=True, eq=False)
class ModeClock:
    """Batch epochs read on their own mode's clock (see the module docstring).

    Attributes
    ----------
    clock : ndarray
        tau_m(t_b) for each batch b, m its mode: seconds spent in mode m from the trajectory's start.
    foreign : ndarray of int
        For each batch, how many stays in other modes (lasting some time) came before the stretch of its
        mode that holds it; two consecutive batches of one mode have a stay elsewhere between them
        exactly when their counts differ.
    exposure_s : mapping of int to float
        Seconds spent in each mode over the observation.
    """

    clock: NDArray[np.float64]
    foreign: NDArray[np.int64]
    exposure_s: MappingProxyType[int, float] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        freeze(self.clock, self.foreign)


def _stretches(traj: ModeTrajectory, times: NDArray[np.float64], field: str,
               end: float) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """For each time: the trajectory entry in force just before it (left limit) and at it (right limit)."""
    e = traj.epochs
    if times.size and times[0] < e[0]:
        raise InputError("mode_changes.epochs", f"start at {float(e[0])!r}, after the first {field} at "
                         f"{float(times[0])!r}",
                         "give the mode in force from the start of the window")
    if times.size and times[-1] > end:
        raise InputError("mode_changes.end_s", f"is {end!r}, before the last {field} at {float(times[-1])!r}",
                         "the observation ends at or after the last delivery (or leave end_s None)")
    right = np.searchsorted(e, times, side="right") - 1
    left = np.searchsorted(e, times, side="left") - 1
    left = np.where(left < 0, right, left)  # at the first epoch there is no "just before"
    return left.astype(np.int64), right.astype(np.int64)


def reconcile_modes(traj: ModeTrajectory, times: NDArray[np.float64], modes: NDArray[np.int64],
                    end: float) -> tuple[NDArray[np.int64], int]:
    """Each delivery's mode, checked against the trajectory; returns the modes and how many disagreed.

    A delivery at a change epoch may carry the mode just before the change (the agent records the mode
    in force when the delivery came, and the delivery then triggers the change) or just after it; either
    agrees. A recorded mode that is neither is replaced by the trajectory's mode just before the delivery:
    the trajectory defines the clocks, and a delivery counted in a mode whose clock stands still would
    make an interval of length zero. (The agent's trajectory is exact; a recorded mode that disagrees is a
    delivery logged without its mode, or a trace whose ``active`` column lags the park/resume lines.)
    """
    left, right = _stretches(traj, times, "delivery", end)
    tm = traj.modes
    ok = (modes == tm[left]) | (modes == tm[right])
    bad = int((~ok).sum())
    if not bad:
        return modes, 0
    return np.where(ok, modes, tm[left]).astype(np.int64), bad


def _exclusive_group_cumsum(values: NDArray[Any], order: NDArray[np.intp],
                            starts: NDArray[np.intp]) -> NDArray[Any]:
    """For each entry, the sum of ``values`` over the earlier entries of its group (``order`` sorts the
    entries by group, stably; ``starts`` are the groups' first positions in that order)."""
    v = values[order]
    cs = np.cumsum(v) - v
    cs -= np.repeat(cs[starts], np.diff(np.append(starts, v.size)))
    out = np.empty_like(cs)
    out[order] = cs
    return out


def _own_mode_sums(tm: NDArray[np.int64], d: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """For each trajectory entry k, in one pass over all modes: tau_m at its start for its own mode m (the
    time spent in m before it), and how many entries of other modes lasting some time came before it."""
    order = np.argsort(tm, kind="stable")
    sorted_modes = tm[order]
    starts = np.flatnonzero(np.append(True, sorted_modes[1:] != sorted_modes[:-1]))
    lasting = (d > 0).astype(np.int64)
    spent = _exclusive_group_cumsum(d, order, starts)
    before = np.cumsum(lasting) - lasting
    return spent, before - _exclusive_group_cumsum(lasting, order, starts)


def mode_clock(traj: ModeTrajectory, epochs: NDArray[np.float64], modes: NDArray[np.int64],
               end: float) -> ModeClock:
    """Read each batch epoch on its mode's clock; ``modes`` must agree with the trajectory (see
    :func:`reconcile_modes`, which the batches' first deliveries went through)."""
    left, right = _stretches(traj, epochs, "batch", end)
    tm = traj.modes
    # the stretch of the batch's own mode that holds it: the left limit, else (at a change epoch) the right
    own = np.where(tm[left] == modes, left, right)
    if not bool((tm[own] == modes).all()):
        i = int(np.flatnonzero(tm[own] != modes)[0])
        raise InputError("modes", f"batch {i} at {float(epochs[i])!r} is in mode {int(modes[i])}, which the "
                         "trajectory does not have in force then", "reconcile the modes with the trajectory first")
    d = traj.durations(end)
    spent, away = _own_mode_sums(tm, d)
    clock = spent[own] + (epochs - traj.epochs[own])
    foreign = away[own]
    kinds, which = np.unique(tm, return_inverse=True)
    totals = np.bincount(which, weights=d, minlength=kinds.size)
    exposure = {int(k): float(v) for k, v in zip(kinds, totals, strict=True) if v > 0}
    return ModeClock(clock, foreign, MappingProxyType(exposure))


def _per_mode(mclock: ModeClock, modes: NDArray[np.int64]) -> Iterator[
        tuple[int, NDArray[np.int64], NDArray[np.float64], NDArray[np.bool_]]]:
    """For each mode: its batches' indices, its mode-clock intervals, and which were joined across stays
    in other modes."""
    for m in np.unique(modes):
        idx = np.flatnonzero(modes == m)
        yield int(m), idx, np.diff(mclock.clock[idx]), np.diff(mclock.foreign[idx]) > 0


def clock_intervals(mclock: ModeClock, modes: NDArray[np.int64]) -> NDArray[np.float64]:
    """Every mode's mode-clock intervals, pooled (what the stop-gap bound is chosen on)."""
    parts = [x for _, _, x, _ in _per_mode(mclock, modes)]
    return np.concatenate(parts) if parts else np.empty(0)


def split_on_clock(batches: Batches, mclock: ModeClock, bound: float | None) -> IntervalSplit:
    """Step 2 on the modes' own clocks: each mode's intervals (:func:`clock_intervals`), those above
    ``bound`` censored (their time taken off the mode's exposure: the crawl was stopped, not delivering),
    none dropped. Segments (for lag correlations) run across joins; a censored interval breaks one (see the
    module docstring for why)."""
    samples = []
    n_censored = n_joined = 0
    censored_time = 0.0
    for m, idx, x, joined in _per_mode(mclock, batches.modes):
        censored = np.zeros(x.size, dtype=bool) if bound is None else x > bound
        seg = np.cumsum(censored).astype(np.int64)  # a stop breaks the sequence; a stay elsewhere does not
        kept = ~censored
        cut = float(x[censored].sum())
        exposure = mclock.exposure_s.get(m, 0.0) - cut
        samples.append(ModeSample(m, x[kept], seg[kept], batches.sizes[idx],
                                  int(batches.sizes[idx[1:]][kept].sum()), int((joined & kept).sum()),
                                  max(exposure, 0.0)))
        n_censored += int(censored.sum())
        n_joined += int((joined & kept).sum())
        censored_time += cut
    return IntervalSplit(tuple(samples), n_censored, 0, censored_time, n_joined)


def as_trajectory(value: Any) -> ModeTrajectory | None:
    """``fit_model``'s ``mode_changes`` argument: a :class:`ModeTrajectory`, or None."""
    if value is None or isinstance(value, ModeTrajectory):
        return value
    raise InputError("mode_changes", f"must be a ModeTrajectory, got {type(value).__name__}",
                     "build it with ModeTrajectory(epochs, modes, end_s)")
