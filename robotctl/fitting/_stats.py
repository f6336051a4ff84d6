"""Sample statistics of interval sequences: moments, lag correlations within unbroken segments, the
geometric decay of a lag-correlation curve, and the significance tests the fit uses to choose a rung."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.polynomial import Polynomial
from numpy.typing import NDArray

from ._checks import freeze


@dataclass(frozen=True, eq=False)
class SampleStats:
    """Moments and lag correlations of a sample of intervals.

    Attributes
    ----------
    n : int
        Sample size.
    mean, variance, third_moment : float
        E[X], Var[X] (divisor n) and the raw E[X^3].
    scv : float
        Squared coefficient of variation Var/mean^2.
    scv_stderr : float
        Delta-method standard error of ``scv`` from the sample's first four moments (independent draws).
    lag_correlations : ndarray
        rho_k, k = 1..L, over pairs of intervals k apart inside one unbroken segment.
    lag_pairs : ndarray of int
        Number of pairs behind each rho_k.
    """

    n: int
    mean: float
    variance: float
    third_moment: float
    scv: float
    scv_stderr: float
    lag_correlations: NDArray[np.float64]
    lag_pairs: NDArray[np.int64]

    def __post_init__(self) -> None:
        freeze(self.lag_correlations, self.lag_pairs)

    @property
    def second_moment(self) -> float:
        return self.variance + self.mean * self.mean

    def significant_lags(self, z: float) -> NDArray[np.bool_]:
        """|rho_k| > z / sqrt(pairs_k): beyond z standard errors of an uncorrelated sequence."""
        se = 1.0 / np.sqrt(np.maximum(self.lag_pairs, 1))
        return np.asarray(np.abs(self.lag_correlations) > z * se)

    def scv_consistent_with_one(self, z: float) -> bool:
        """|scv - 1| <= z * stderr: exponential intervals are not rejected."""
        return abs(self.scv - 1.0) <= z * self.scv_stderr


#: A lag correlation estimated from fewer pairs than this is not reported (nor any longer lag).
MIN_LAG_PAIRS = 50


def sample_stats(x: NDArray[np.float64], segments: NDArray[np.int64] | None, max_lag: int, *,
                 min_pairs: int = MIN_LAG_PAIRS) -> SampleStats:
    """Moments of ``x`` and its lag-1..max_lag correlations.

    Pairs (x_i, x_{i+k}) count only when ``segments[i] == segments[i+k]`` (no censored gap or mode
    switch between them). The mean and variance are those of the whole sample. The lags stop before
    the first one with fewer than ``min_pairs`` pairs (with short unbroken segments a long lag rests on
    a handful of pairs and its estimate can even leave [-1, 1]); the rest are clipped to [-1, 1].
    """
    n = int(x.size)
    mean = float(x.mean())
    y = x / mean  # scale-free moments: avoids overflow of x**4 for large times
    d = y - 1.0
    var1 = float(np.dot(d, d) / n)
    m2 = var1 + 1.0
    m3 = float(np.dot(y * y, y) / n)
    m4 = float(np.dot(y * y, y * y) / n)
    # delta method for scv = m2 - 1 (mean 1): gradient (-2 m2, 1) on (m1, m2)
    g1, g2 = -2.0 * m2, 1.0
    cov = np.array([[var1, m3 - m2], [m3 - m2, m4 - m2 * m2]])
    grad = np.array([g1, g2])
    scv_var = float(grad @ cov @ grad) / max(n, 1)
    L = max(0, min(int(max_lag), n - 1))
    rho = np.zeros(L)
    pairs = np.zeros(L, dtype=np.int64)
    if var1 > 0:
        for k in range(1, L + 1):
            a, b = d[:-k], d[k:]
            if segments is None:
                cnt = n - k
                s = float(np.dot(a, b))
            else:
                same = segments[:-k] == segments[k:]
                cnt = int(np.count_nonzero(same))
                s = float(np.dot(a * same, b))
            if cnt < min_pairs:
                rho, pairs = rho[:k - 1], pairs[:k - 1]
                break
            pairs[k - 1] = cnt
            rho[k - 1] = min(1.0, max(-1.0, s / cnt / var1))
    elif L:
        rho, pairs = rho[:0], pairs[:0]
    return SampleStats(n, mean, var1 * mean * mean, m3 * mean**3, var1, math.sqrt(max(scv_var, 0.0)), rho, pairs)


def fit_decay(lags: NDArray[np.float64]) -> float | None:
    """The decay g in [-1, 1] of the geometric curve rho_1 g^(k-1) closest (least squares over
    k = 1..L) to the given lag correlations rho_1..rho_L; None with fewer than two lags or rho_1 = 0.

    The curve is anchored at the measured rho_1, so g describes how fast the measured correlation
    fades. The objective is a polynomial in g; its minimum over [-1, 1] is found exactly among the real
    roots of the derivative and the two end points.
    """
    lags = np.asarray(lags, dtype=float)
    L = lags.size
    if L < 2 or lags[0] == 0.0:
        return None
    r1 = float(lags[0])
    # f(g) = sum_k (rho_k - r1 g^(k-1))^2 = const - 2 r1 sum_k rho_k g^(k-1) + r1^2 sum_k g^(2(k-1))
    lin = np.zeros(2 * L - 1)
    lin[:L] = -2.0 * r1 * lags
    lin[0:2 * L - 1:2] += r1 * r1
    f = Polynomial(lin)
    crit = f.deriv().roots()
    cands = [-1.0, 1.0] + [float(c.real) for c in np.atleast_1d(crit)
                           if abs(c.imag) <= 1e-9 * max(1.0, abs(c)) and -1.0 <= c.real <= 1.0]
    values = [float(f(c)) for c in cands]
    return float(cands[int(np.argmin(values))])
