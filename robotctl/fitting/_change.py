"""Where did the traffic change? A likelihood-ratio test for one change of the per-mode rates in a window
(issue 28: change-aware refit windows).

Each mode m delivers batches at rate lambda_m on its own clock tau_m(t), the seconds spent in mode m up to
t (:mod:`fitting._modeclock`: for Poisson batches per mode this is exact whatever decides the switches).
The alternative says that at some epoch c every mode's rate moved, from lambda_m to lambda'_m. For a
candidate c, with N1, E1 the batches and seconds of mode m before c and N2, E2 after, the log likelihood
ratio of the split against one rate per mode is

    LR(c) = 2 sum_m [ N1 log(N1 / E1) + N2 log(N2 / E2) - N log(N / E) ]        (0 log 0 = 0)

which is asymptotically chi-square with one degree of freedom per mode seen on both sides, for a fixed c.
The change is located at the candidate with the smallest chi-square p-value, and that p-value is
multiplied by the number of candidates (Bonferroni): the reported ``p_value`` is an upper bound on the
chance of a false alarm over the whole scan, so a steady trace raises one at most at rate ``level``.

Candidates are a grid over the window (``grid`` points between ``min_side`` deliveries from either end)
joined with a geometric ladder counted back from the newest delivery (``min_side``, then x sqrt 2 ...),
so a recent change is located as finely as an old one without testing every delivery.

Batches of a correlated (MAP) process are over-dispersed: the counts vary more than a Poisson law's, which
would inflate LR. The statistic is divided by a dispersion phi >= 1 (quasi-likelihood; McCullagh & Nelder
1989, Section 4.5), estimated from the differences of the rates in neighbouring slices of the window (a
median, so that the one pair of slices a change falls between does not count as dispersion). phi is
measured at the scale of a slice (``blocks`` slices per window): correlation that lasts longer than a
slice is not seen, and can still raise false alarms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
from numpy.typing import ArrayLike, NDArray

from robotctl import InputError

from ._checks import float_array
from ._chi2 import chi2_ppf, chi2_sf
from ._modeclock import ModeTrajectory

#: Defaults of :func:`locate_change`.
DEFAULT_LEVEL = 0.01
DEFAULT_GRID = 40
DEFAULT_MIN_SIDE = 20
DEFAULT_BLOCKS = 40

#: the median of chi-squared with 1 degree of freedom
_CHI2_MEDIAN_1 = chi2_ppf(0.5, 1)


@dataclass(frozen=True, eq=False)
class ChangePoint:
    """The outcome of :func:`locate_change`.

    Attributes
    ----------
    detected : bool
        ``p_value < level``: the rates changed at ``at_s``.
    at_s : float
        The most likely change epoch (s; the delivery epoch that starts the newer part), NaN when the
        window is too short to test.
    statistic : float
        LR at ``at_s`` divided by the dispersion.
    degrees_of_freedom : int
        Modes seen on both sides of ``at_s``.
    p_value : float
        Bonferroni bound on the chance of a false alarm over all candidates (1.0 when untested).
    level : float
    candidates : int
        Candidate epochs tested.
    dispersion : float
        phi >= 1 (see the module docstring).
    rates_before, rates_after : mapping of int to float
        Batches per second of each mode on its own clock, before and after ``at_s`` (modes seen there).
    deliveries_after : int
        Deliveries at or after ``at_s``.
    message : str
    """

    detected: bool
    at_s: float
    statistic: float
    degrees_of_freedom: int
    p_value: float
    level: float
    candidates: int
    dispersion: float
    rates_before: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))
    rates_after: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))
    deliveries_after: int = 0
    message: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"detected": self.detected, "at_s": self.at_s, "statistic": self.statistic,
                "degrees_of_freedom": self.degrees_of_freedom, "p_value": self.p_value, "level": self.level,
                "candidates": self.candidates, "dispersion": self.dispersion,
                "rates_before": {str(k): v for k, v in self.rates_before.items()},
                "rates_after": {str(k): v for k, v in self.rates_after.items()},
                "deliveries_after": self.deliveries_after, "message": self.message}


def _xlogx_over(n: NDArray[np.float64], e: NDArray[np.float64]) -> NDArray[np.float64]:
    """n log(n / e), 0 where n = 0 (and where e = 0: no exposure, no information)."""
    out = np.zeros(np.broadcast(n, e).shape)
    ok = (n > 0) & (e > 0)
    nn = np.broadcast_to(n, out.shape)[ok]
    out[ok] = nn * np.log(nn / np.broadcast_to(e, out.shape)[ok])
    return out


def _clock(traj: ModeTrajectory, end: float, modes: NDArray[np.int64],
           at: NDArray[np.float64]) -> NDArray[np.float64]:
    """tau_m(t) for each mode (rows) at each time of ``at`` (columns)."""
    epochs = traj.epochs
    d = traj.durations(end)
    j = np.clip(np.searchsorted(epochs, at, side="right") - 1, 0, epochs.size - 1)
    out = np.empty((modes.size, at.size))
    for r, m in enumerate(modes):
        inside = (traj.modes == m).astype(float)
        cum = np.concatenate([[0.0], np.cumsum(d * inside)])
        out[r] = cum[j] + np.clip(at - epochs[j], 0.0, d[j]) * inside[j]
    return out


def _candidates(n: int, grid: int, min_side: int) -> NDArray[np.int64]:
    """Indices k (the change starts at delivery k) with at least ``min_side`` deliveries on each side."""
    lo, hi = min_side, n - min_side
    if hi < lo:
        return np.empty(0, dtype=np.int64)
    linear = np.linspace(lo, hi, num=max(2, grid)).round()
    back = []
    step = float(min_side)
    while step <= n - min_side:
        back.append(n - step)
        step *= math.sqrt(2.0)
    return np.unique(np.concatenate([linear, np.round(back)]).astype(np.int64).clip(lo, hi))


def _dispersion(times: NDArray[np.float64], modes: NDArray[np.int64], traj: ModeTrajectory, start: float,
                end: float, seen: NDArray[np.int64], blocks: int) -> float:
    """The dispersion phi >= 1 from the counts in ``blocks`` time slices: for each mode and each pair of
    neighbouring slices, the squared difference of their rates over its Poisson variance
    (r_i - r_j)^2 / (rate (1/E_i + 1/E_j)), whose mean is 1 for a Poisson process and phi for an
    over-dispersed one; the median over all pairs, divided by the chi-square(1) median 0.455, so that
    the one pair a change falls between does not count as dispersion."""
    edges = np.linspace(start, end, blocks + 1)
    expo = np.diff(_clock(traj, end, seen, edges), axis=1)
    ratios: list[NDArray[np.float64]] = []
    for r, m in enumerate(seen):
        counts = np.histogram(times[modes == m], bins=edges)[0].astype(float)
        total_e = float(expo[r].sum())
        if total_e <= 0 or counts.sum() == 0:
            continue
        rate = counts.sum() / total_e
        e = expo[r]
        # slices where the mode ran long enough to expect a few deliveries
        use = np.flatnonzero(e * rate >= 5.0)
        if use.size < 2:
            continue
        a, b = use[:-1], use[1:]
        diff = counts[a] / e[a] - counts[b] / e[b]
        ratios.append(diff ** 2 / (rate * (1.0 / e[a] + 1.0 / e[b])))
    if not ratios:
        return 1.0
    return max(1.0, float(np.median(np.concatenate(ratios))) / _CHI2_MEDIAN_1)


def locate_change(delivery_times: ArrayLike, modes: ArrayLike, mode_changes: ModeTrajectory | None = None, *,
                  end_s: float | None = None, level: float = DEFAULT_LEVEL, grid: int = DEFAULT_GRID,
                  min_side: int = DEFAULT_MIN_SIDE, blocks: int = DEFAULT_BLOCKS,
                  dispersion: float | None = None) -> ChangePoint:
    """Test for one change of the per-mode rates in a window and locate it (module docstring).

    Parameters
    ----------
    delivery_times : array_like
        Epochs of the deliveries (batches), non-decreasing.
    modes : array_like of int
        The mode of each delivery.
    mode_changes : ModeTrajectory, optional
        The mode over the window; None: one mode all along (``modes`` is then ignored but for its size).
    end_s : float, optional
        End of the window (default the trajectory's end, else the last delivery).
    level : float
        False-alarm probability of the whole scan.
    grid, min_side : int
        Candidates: ``grid`` evenly spread, plus a geometric ladder back from the newest delivery; each
        with at least ``min_side`` deliveries on either side.
    blocks : int
        Slices of the window for the dispersion estimate.
    dispersion : float, optional
        phi given (1: a Poisson process per mode); None estimates it.

    Returns
    -------
    ChangePoint

    Examples
    --------
    One mode whose rate doubles at 500 s:

    >>> import numpy as np
    >>> from robotctl.fitting import locate_change
    >>> rng = np.random.default_rng(3)
    >>> t = np.cumsum(np.concatenate([rng.exponential(1.0, 500), rng.exponential(0.5, 1000)]))
    >>> cp = locate_change(t, np.ones(t.size, dtype=int), dispersion=1.0)
    >>> cp.detected, bool(abs(cp.at_s - t[500]) < 60)
    (True, True)
    """
    t = float_array("delivery_times", delivery_times)
    m = np.asarray(modes)
    if m.shape != t.shape:
        raise InputError("modes", f"has shape {m.shape} but delivery_times has {t.shape}", "give one mode per delivery")
    if t.size and np.any(np.diff(t) < 0):
        raise InputError("delivery_times", "are not in time order", "sort the deliveries by time")
    if not 0.0 < level < 1.0:
        raise InputError("level", f"must be in (0, 1), got {level!r}", "e.g. 0.01")
    for name, v, least in (("grid", grid, 2), ("min_side", min_side, 1), ("blocks", blocks, 2)):
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise InputError(name, f"must be a whole number >= {least}, got {v!r}", f"e.g. {least * 10}")
    if dispersion is not None and not (math.isfinite(dispersion) and dispersion >= 1.0):
        raise InputError("dispersion", f"must be a number >= 1, got {dispersion!r}", "None estimates it")
    n = t.size
    if mode_changes is None:
        start = float(t[0]) if n else 0.0
        mode_changes = ModeTrajectory(np.array([start]), np.array([1], dtype=np.int64))
        m = np.ones(n, dtype=np.int64)
    m = m.astype(np.int64)
    end = float(end_s if end_s is not None else (mode_changes.end_s if mode_changes.end_s is not None
                                                 else (t[-1] if n else mode_changes.epochs[-1])))
    start = float(mode_changes.epochs[0])
    if n and (t[0] < start or t[-1] > end):
        raise InputError("delivery_times", f"run from {t[0]!r} to {t[-1]!r}, outside the window {start!r}..{end!r}",
                         "cut the deliveries to the trajectory's window")
    ks = _candidates(n, grid, min_side)
    untested = ChangePoint(False, math.nan, 0.0, 0, 1.0, level, int(ks.size), 1.0, deliveries_after=0,
                           message=f"{n} deliveries: too few to test for a change ({2 * min_side} needed)")
    if ks.size == 0:
        return untested
    seen = np.unique(m)
    at = t[ks]
    tau_at = _clock(mode_changes, end, seen, at)                      # (modes, candidates)
    tau_end = _clock(mode_changes, end, seen, np.array([end]))[:, 0]  # (modes,)
    # deliveries of each mode before each candidate
    before = np.empty((seen.size, ks.size))
    for r, mode in enumerate(seen):
        csum = np.concatenate([[0], np.cumsum(m == mode)])
        before[r] = csum[ks]
    total = np.array([[float((m == mode).sum())] for mode in seen])
    after = total - before
    e1, e2 = tau_at, tau_end[:, None] - tau_at
    lr_modes = 2.0 * (_xlogx_over(before, e1) + _xlogx_over(after, e2) - _xlogx_over(total, tau_end[:, None]))
    informative = (e1 > 0) & (e2 > 0) & (total > 0)
    lr = np.where(informative, lr_modes, 0.0).sum(axis=0)
    df = informative.sum(axis=0)
    phi = float(dispersion) if dispersion is not None else _dispersion(t, m, mode_changes, start, end, seen, blocks)
    stat = lr / phi
    p_each = np.where(df > 0, chi2_sf(np.maximum(df, 1), stat), 1.0)
    best = int(np.argmin(p_each))
    p = min(1.0, float(p_each[best]) * ks.size)
    k = int(ks[best])
    ok = informative[:, best]
    rb = {int(mode): float(before[r, best] / e1[r, best]) for r, mode in enumerate(seen) if ok[r]}
    ra = {int(mode): float(after[r, best] / e2[r, best]) for r, mode in enumerate(seen) if ok[r]}
    detected = p < level
    msg = (f"change at {t[k]:.6g} s (LR/phi {stat[best]:.3g}, {int(df[best])} df, p <= {p:.2g} over "
           f"{ks.size} candidates)" if detected else
           f"no change (best candidate {t[k]:.6g} s, p <= {p:.2g} over {ks.size} candidates, level {level:g})")
    return ChangePoint(detected, float(t[k]), float(stat[best]), int(df[best]), p, level, int(ks.size), phi,
                       MappingProxyType(rb), MappingProxyType(ra), n - k, msg)


__all__ = ["ChangePoint", "locate_change"]
