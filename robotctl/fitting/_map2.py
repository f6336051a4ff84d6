"""MAP(2) of batch epochs by moment matching (issue 3, step 4), in the manner of Diamond & Alfa (2000).

Every MAP of order two has, after the time scaling that makes the mean interval 1, one of the two
Markovian canonical forms of Bodrog, Heindl, Horváth & Telek (2008)::

    gamma >= 0:  D0 = [[-l1, (1-a) l1], [0, -l2]],   D1 = [[a l1, 0], [(1-b) l2, b l2]],   gamma = a b
    gamma <  0:  D0 = [[-l1, (1-a) l1], [0, -l2]],   D1 = [[0, a l1], [b l2, (1-b) l2]],   gamma = -a b

with 0 < l1 <= l2 and 0 <= a, b <= 1. gamma is the non-unit eigenvalue of the embedded phase chain
P = (-D0)^{-1} D1; since P^k = e phi + gamma^k (I - e phi), the lag-k correlation of the intervals is

    rho_k = gamma^k (m2/2 - m1^2) / (m2 - m1^2) = gamma^k (1 - 1/c^2) / 2,

so rho_k = rho_1 gamma^(k-1) with rho_1 = gamma (1 - 1/c^2)/2: gamma is the decay, and for a given c^2
it also fixes rho_1. |rho_1| < |1 - 1/c^2| / 2 < 1/2, and the reach shrinks to nothing as c^2 -> 1.

The marginal is PH(phi, D0), which is the CF1 law (q, 1/l1, 1/l2) with q = phi_1 (1 - a l1/l2). Given
the marginal (q, r = l1/l2) the feasible gamma form an interval (derived from the forms above):

* gamma > 0: need q = (1 - gamma/a)(1 - a r)/(1 - gamma) for some a in [gamma, 1). Every gamma < 1 is
  feasible iff q <= 1 - r (the marginal is a genuine H2); otherwise gamma <= u^2 with
  u = (sqrt(r) - sqrt(q (q + r - 1))) / (q + r).
* gamma < 0: b = q (1 - gamma) - r gamma <= 1 and a = -gamma / b <= 1, i.e.
  -gamma <= (1 - q)/(q + r) and, when q + r < 1, -gamma <= q / (1 - q - r).

References
----------
J. E. Diamond, A. S. Alfa, "On approximating higher order MAPs with MAPs of order two", Queueing
Systems 34 (2000) 269-288 (cited by paper 000 for its real-data fit).
L. Bodrog, A. Heindl, G. Horváth, M. Telek, "A Markovian canonical form of second-order
matrix-exponential processes", European Journal of Operational Research 190 (2008) 459-477.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from robotctl.model import BMAP, InputError

from ._checks import float_array, freeze, positive_number
from ._ph2 import CLAIM_RTOL, SCV_ONE_TOL, Cf1, balanced_h2, cf1_from_moments, h2_cf1
from ._stats import fit_decay

#: Default cap on |gamma|: the correlation of a MAP(2) fades no slower than 0.999^k.
MAX_DECAY = 0.999
_GRID = 512


class MapFitStatus(enum.Enum):
    """The rung of the MAP(2) fallback ladder a fit used (best first)."""

    #: mean, variance and lag-1 correlation matched exactly; the decay follows (rho_k = rho_1 g^(k-1))
    EXACT = "exact"
    #: mean and variance matched; rho_1 beyond the MAP(2) reach, so the measured decay was kept and
    #: rho_1 clipped to (1 - 1/c^2)/2 * decay (or to the bound itself)
    RHO_CLIPPED = "rho_clipped"
    #: a renewal process (no correlation) with an H2, APH(2) or Erlang-2 marginal: no correlation
    #: was asked for, or none is reachable with this variance
    RENEWAL = "renewal"
    #: a Poisson process matching the mean: no variance given, or c^2 = 1 with no reachable correlation
    POISSON = "poisson"


_STATUS_MESSAGES = {
    MapFitStatus.EXACT: "mean, variance and lag-1 correlation matched",
    MapFitStatus.RHO_CLIPPED: "mean and variance matched, lag-1 correlation clipped",
    MapFitStatus.RENEWAL: "renewal process (no correlation)",
    MapFitStatus.POISSON: "Poisson process (mean only)",
}


# -- reach of gamma for a given marginal ----------------------------------------------------------

def gamma_reach(q: float | NDArray[np.float64], r: float | NDArray[np.float64]
                ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(gamma_lo, gamma_hi): the feasible gamma of a MAP(2) whose marginal is the CF1 law (q, r).

    gamma_hi = 1 stands for "every gamma < 1" (the supremum is not attained). Vectorised over q, r.
    """
    q = np.asarray(q, dtype=float)
    r = np.asarray(r, dtype=float)
    h2 = q <= 1.0 - r + 1e-15
    inner = np.maximum(q * (q + r - 1.0), 0.0)
    u = (np.sqrt(r) - np.sqrt(inner)) / (q + r)
    hi = np.where(h2, 1.0, np.clip(u, 0.0, 1.0) ** 2)
    t1 = (1.0 - q) / (q + r)
    slack = 1.0 - q - r
    with np.errstate(divide="ignore", invalid="ignore"):
        t2 = np.where(slack > 0, q / np.where(slack > 0, slack, 1.0), np.inf)
    lo = -np.clip(np.minimum(t1, t2), 0.0, 1.0)
    return lo, hi


def _h2_family(scv: float, n: int = _GRID) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """H2 laws of mean 1 and the given c^2 > 1, by the slow-branch probability p in (0, 2/(c^2+1)):
    returns (q, mu1, mu2) of their CF1 forms."""
    pmax = 2.0 / (scv + 1.0)
    t = np.concatenate([np.geomspace(1e-9, 0.5, n // 2), 0.5 + 0.5 * (1 - np.geomspace(1e-9, 1, n // 2)[::-1])])
    p = np.unique(np.clip(t, 1e-12, 1 - 1e-12)) * pmax
    s = math.sqrt((scv - 1.0) / 2.0)
    mu_slow = 1.0 + s * np.sqrt((1.0 - p) / p)
    mu_fast = 1.0 - s * np.sqrt(p / (1.0 - p))
    keep = mu_fast > 1e-12
    p, mu_slow, mu_fast = p[keep], mu_slow[keep], mu_fast[keep]
    return p * (1.0 - mu_fast / mu_slow), mu_slow, mu_fast


def _aph2_family(scv: float, n: int = _GRID) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """APH(2) laws of mean 1 and the given 1/2 <= c^2 < 1, by r = mu2/mu1 in (0, 1]: (q, mu1, mu2)."""
    h = (1.0 + scv) / 2.0
    r = np.unique(np.concatenate([np.geomspace(1e-6, 1.0, n // 2), np.linspace(1e-6, 1.0, n // 2)]))
    bq = 2.0 * h * r - 1.0 - r
    q = (-bq + np.sqrt(bq * bq + 4.0 * h * (1.0 - h) * r * r)) / (2.0 * h)
    keep = (q <= 1.0 + 1e-12) & (q >= 0)
    q, r = np.minimum(q[keep], 1.0), r[keep]
    mu1 = 1.0 / (q + r)
    return q, mu1, r * mu1


def _best_marginal(scv: float, target: float, max_decay: float) -> Cf1 | None:
    """A mean-1 marginal with c^2 = scv for the decay ``target``: among the laws of the family that reach
    it, the least extreme one (largest mu2/mu1); if none does, the one reaching furthest towards it (the
    least extreme among those within 0.1% of the furthest). Phase means stay within [1e-4, 1e4]."""
    q, mu1, mu2 = _h2_family(scv) if scv > 1 else _aph2_family(scv)
    keep = (mu2 >= 1e-4) & (mu1 <= 1e4)
    q, mu1, mu2 = q[keep], mu1[keep], mu2[keep]
    if q.size == 0:
        return None
    r = mu2 / mu1
    lo, hi = gamma_reach(q, r)
    score = np.minimum(hi, max_decay) if target >= 0 else np.minimum(-lo, max_decay)
    ok = score >= abs(target)
    if not ok.any():
        ok = score >= score.max() * (1 - 1e-3)
    i = int(np.flatnonzero(ok)[np.argmax(r[ok])])
    return Cf1(float(q[i]), float(mu1[i]), float(mu2[i]))


# -- construction --------------------------------------------------------------------------------

def _unit(x: float) -> float:
    """A probability computed with rounding error: values within 1e-9 above 1 are 1."""
    return 1.0 if 1.0 < x <= 1.0 + 1e-9 else x


def map2_matrices(cf: Cf1, gamma: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(D0, D1) of the canonical MAP(2) with marginal ``cf`` and decay ``gamma`` (Bodrog et al. 2008).

    The caller keeps gamma inside :func:`gamma_reach` and away from 1.
    """
    l1, l2 = 1.0 / cf.mu1, 1.0 / cf.mu2
    q, r = cf.q, cf.ratio
    if gamma > 0:
        B = 1.0 + gamma * r - q * (1.0 - gamma)
        disc = max(B * B - 4.0 * r * gamma, 0.0)
        # a is the smaller root of r x^2 - B x + gamma = 0 and b = gamma / a = B - r a; the small
        # complements come from the quadratic without cancellation: (1 - b)(1 - r a) = q (1 - gamma),
        # and 1 - a = (b - gamma) / b = (1 - gamma)(1 - q - r a) / ((1 - r a) b). Computed as 1 - gamma / a,
        # 1 - b lost its digits when b is within 1e-8 of 1 (a slow phase of weight 4e-6 at gamma = 0.999:
        # the third interval moment came out 2e-8 off).
        # (Past the reach of an APH(2) marginal the discriminant is clipped at 0, a is no root, and the
        # complements are taken directly.)
        a = _unit(2.0 * gamma / (B + math.sqrt(disc)))
        if B * B - 4.0 * r * gamma > 0.0:
            one_ra = 1.0 - r * a
            not_b = q * (1.0 - gamma) / one_ra
            b = 1.0 - not_b
            not_a = (1.0 - gamma) * (1.0 - q - r * a) / (one_ra * b)
        else:
            b = _unit(gamma / a)
            not_a, not_b = 1.0 - a, 1.0 - b
        D0 = np.array([[-l1, not_a * l1], [0.0, -l2]])
        D1 = np.array([[(1.0 - not_a) * l1, 0.0], [not_b * l2, b * l2]])
    elif gamma < 0:
        delta = -gamma
        b = _unit(q * (1.0 + delta) + delta * r)
        a = _unit(delta / b)
        D0 = np.array([[-l1, (1.0 - a) * l1], [0.0, -l2]])
        D1 = np.array([[0.0, a * l1], [b * l2, (1.0 - b) * l2]])
    else:
        D0 = np.array([[-l1, l1], [0.0, -l2]])
        D1 = np.array([[0.0, 0.0], [q * l2, (1.0 - q) * l2]])
    return D0, D1


def poisson_as_order(rate: float, order: int) -> BMAP:
    """A Poisson process of the given rate written with ``order`` (1 or 2) phases."""
    if order == 1:
        return BMAP((np.array([[-rate]]), np.array([[rate]])))
    D0 = np.array([[-2.0 * rate, rate], [rate, -2.0 * rate]])
    return BMAP((D0, rate * np.eye(2)))


# -- the result ------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Map2Fit:
    """A MAP of order <= 2 fitted to interval statistics.

    Attributes
    ----------
    map : BMAP
        (D0, D1), order 1 (Poisson) or 2.
    status : MapFitStatus
        The rung used: EXACT, RHO_CLIPPED, RENEWAL or POISSON.
    success : bool
        True when the MAP has the figures it claims (mean, variance if ``variance_matched``, third
        moment if ``third_moment_matched``, and fitted lag correlations rho_1 gamma^(k-1)), to 1e-8.
    message : str
        The rung and every choice behind it.
    mean, variance, third_moment : float or None
        The targets as given.
    lag_correlations : ndarray
        The target lag correlations rho_1..rho_L as given (may be empty).
    fitted_mean, fitted_variance, fitted_third_moment : float
        The MAP's interval moments.
    fitted_lag_correlations : ndarray
        The MAP's rho_1..rho_L, computed from D0 and D1.
    gamma : float
        The MAP's decay: rho_k = rho_1 gamma^(k-1) (0 for a renewal process).
    measured_decay : float or None
        Decay of the least-squares geometric curve through the given lags (None with fewer than two).
    rho1_bounds : tuple of float
        (low, high) reach of rho_1 for the chosen marginal, with |gamma| <= max_decay.
    variance_matched : bool
        False only when c^2 < 1/2 (an Erlang-2 marginal, c^2 = 1/2) or no variance was given.
    third_moment_matched : bool or None
        None when no third moment was given.
    marginal : str
        The interval law: ``exponential``, ``H2``, ``APH(2)`` or ``Erlang-2``, and how it was chosen.
    """

    map: BMAP
    status: MapFitStatus
    success: bool
    message: str
    mean: float
    variance: float | None
    third_moment: float | None
    lag_correlations: NDArray[np.float64]
    fitted_mean: float
    fitted_variance: float
    fitted_third_moment: float
    fitted_lag_correlations: NDArray[np.float64]
    gamma: float
    measured_decay: float | None
    rho1_bounds: tuple[float, float]
    variance_matched: bool
    third_moment_matched: bool | None
    marginal: str

    def __post_init__(self) -> None:
        freeze(self.lag_correlations, self.fitted_lag_correlations)

    @property
    def D0(self) -> NDArray[np.float64]:
        return self.map.D0

    @property
    def D1(self) -> NDArray[np.float64]:
        return self.map.D1

    @property
    def order(self) -> int:
        return self.map.order

    @property
    def fitted_scv(self) -> float:
        return self.fitted_variance / self.fitted_mean**2


def _lags_of(bmap: BMAP, L: int) -> NDArray[np.float64]:
    if L == 0:
        return np.zeros(0)
    if bmap.order == 1:
        return np.zeros(L)
    return np.asarray(bmap.lag_correlations(L), dtype=float)


@dataclass(frozen=True, eq=False)
class _Targets:
    """The validated figures to match, with the lags' own decay."""

    mean: float
    variance: float | None
    lags: NDArray[np.float64]
    third_moment: float | None
    max_decay: float
    decay: float | None

    @property
    def n_lags(self) -> int:
        return int(self.lags.size)

    @property
    def rate(self) -> float:
        return 1.0 / self.mean


def _targets(mean: float, variance: float | None, lag_correlations: Sequence[float] | ArrayLike,
             third_moment: float | None, max_decay: float) -> _Targets:
    mean = positive_number("mean", mean)
    if variance is not None:
        variance = positive_number("variance", variance, allow_zero=True)
    lags = float_array("lag_correlations", lag_correlations)
    if lags.size and np.abs(lags).max() > 1.0:
        i = int(np.argmax(np.abs(lags)))
        raise InputError("lag_correlations", f"lag {i + 1} is {lags[i]:g}, outside [-1, 1]",
                         "correlation coefficients lie between -1 and 1")
    if third_moment is not None:
        third_moment = positive_number("third_moment", third_moment)
    max_decay = positive_number("max_decay", max_decay)
    if max_decay >= 1.0:
        raise InputError("max_decay", f"must be below 1, got {max_decay!r}", "e.g. 0.999")
    return _Targets(mean, variance, lags, third_moment, max_decay, fit_decay(lags))


def _checked(t: _Targets, bmap: BMAP, status: MapFitStatus, gamma: float, bounds: tuple[float, float],
             var_ok: bool, m3_ok: bool | None, marginal: str, why: str, claimed_lags: NDArray[np.float64],
             ok: bool = True) -> Map2Fit:
    """The result, after checking that ``bmap`` has the figures claimed for it (``success`` says so)."""
    L = t.n_lags
    f_mean = bmap.interval_moment(1)
    f_var = bmap.interval_variance
    f_m3 = bmap.interval_moment(3)
    f_lags = _lags_of(bmap, L)
    problems = []
    if abs(f_mean - t.mean) > CLAIM_RTOL * t.mean:
        problems.append("mean")
    if var_ok and t.variance is not None and abs(f_var - t.variance) > CLAIM_RTOL * max(t.variance, t.mean * t.mean):
        problems.append("variance")
    if m3_ok and t.third_moment is not None and abs(f_m3 - t.third_moment) > CLAIM_RTOL * t.third_moment:
        problems.append("third moment")
    if L and np.abs(f_lags - claimed_lags).max() > CLAIM_RTOL:
        problems.append("lag correlations")
    message = f"{status.value}: {_STATUS_MESSAGES[status]}; {why}"
    if problems:
        message = f"numerical trouble: fitted {', '.join(problems)} off the claim; " + message
    return Map2Fit(bmap, status, ok and not problems, message, t.mean, t.variance, t.third_moment, t.lags.copy(),
                   f_mean, f_var, f_m3, f_lags, gamma, t.decay, bounds, var_ok, m3_ok, marginal,)


def _without_correlation(t: _Targets) -> Map2Fit | None:
    """The cases no MAP(2) correlation can serve: no variance (Poisson), c^2 = 1 (exponential intervals
    carry none), c^2 < 1/2 (an Erlang-2 renewal process); None otherwise."""
    L, mean, rate, lags, m3 = t.n_lags, t.mean, t.rate, t.lags, t.third_moment
    zeros = np.zeros(L)
    if t.variance is None:
        return _checked(t, poisson_as_order(rate, 1), MapFitStatus.POISSON, 0.0, (0.0, 0.0), False,
                        None if m3 is None else False, "exponential",
                        "no variance given: Poisson process of the given mean", zeros)
    scv = t.variance / (mean * mean)
    if abs(scv - 1.0) <= SCV_ONE_TOL:
        exp_m3 = None if m3 is None else bool(abs(m3 - 6 * mean**3) <= CLAIM_RTOL * m3)
        wants = bool(L and np.any(lags != 0))
        if L and not wants:
            return _checked(t, poisson_as_order(rate, 1), MapFitStatus.EXACT, 0.0, (0.0, 0.0), True, exp_m3,
                            "exponential", "c^2 = 1 and zero correlation: a Poisson process", zeros)
        why = ("c^2 = 1: a MAP(2) with exponential intervals carries no correlation (A = (1 - 1/c^2)/2 = 0); "
               f"the asked rho_1 = {lags[0]:.4g} was dropped" if wants else "c^2 = 1 and no lag correlations given")
        return _checked(t, poisson_as_order(rate, 1), MapFitStatus.POISSON, 0.0, (0.0, 0.0), True, exp_m3,
                        "exponential", why, zeros)
    if scv < 0.5:
        D0, D1 = map2_matrices(Cf1(1.0, 0.5 * mean, 0.5 * mean), 0.0)
        return _checked(t, BMAP((D0, D1)), MapFitStatus.RENEWAL, 0.0, (0.0, 0.0), False,
                        None if m3 is None else False, "Erlang-2",
                        f"c^2 = {scv:.4g} < 1/2 is below every order-two law; an Erlang-2 renewal process "
                        "matches the mean (its c^2 is 1/2)" + (f", and the asked rho_1 = {lags[0]:.4g} is dropped"
                                                              if L and lags[0] != 0 else ""), zeros)
    return None


def _marginal(t: _Targets, scv: float, gamma1: float, notes: list[str]) -> tuple[Cf1, bool | None, str]:
    """The interval law (mean 1): fixed by the third moment when it is feasible, else chosen for the
    reach of the asked decay ``gamma1``. Returns the CF1 law, whether the third moment is matched, and
    how the law was chosen."""
    sign = 1.0 if gamma1 >= 0 else -1.0
    cf: Cf1 | None = None
    m3_ok: bool | None = None
    marginal = ""
    if t.third_moment is not None:
        cf = cf1_from_moments(1.0, 1.0 + scv, t.third_moment / t.mean**3)
        m3_ok = cf is not None
        if cf is None:
            notes.append(f"third moment {t.third_moment:.4g} is infeasible for an order-two law with c^2 = "
                         f"{scv:.4g}; dropped")
        else:
            return cf, m3_ok, ("H2" if scv > 1 else "APH(2)") + " matching three moments"
    if scv > 1:
        p_fast, rf, rs = balanced_h2(1.0, scv)
        cf = h2_cf1(1.0 - p_fast, 1.0 / rs, 1.0 / rf)
        marginal = "H2 with balanced means"
    else:
        best = _best_marginal(scv, gamma1, t.max_decay)
        cf = best if best is not None else Cf1(1.0, 0.5, 0.5)
        marginal = "APH(2) chosen for rho_1 (the least extreme one reaching it, else the one reaching furthest)"
    lo, hi = gamma_reach(cf.q, cf.ratio)
    if gamma1 != 0 and not (float(lo) <= gamma1 <= min(float(hi), t.max_decay)):
        best = _best_marginal(scv, gamma1, t.max_decay)
        if best is not None:
            blo, bhi = gamma_reach(best.q, best.ratio)
            if (sign > 0 and float(bhi) > float(hi)) or (sign < 0 and float(blo) < float(lo)):
                cf = best
                marginal = (("H2" if scv > 1 else "APH(2)") + " chosen for rho_1 (the least extreme one reaching "
                            "it, else the one reaching furthest)")
    return cf, m3_ok, marginal


def _decay(t: _Targets, A: float, scv: float, gamma1: float, g_lo: float, g_hi: float,
           bounds: tuple[float, float], notes: list[str]) -> tuple[float, MapFitStatus]:
    """gamma within the reach [g_lo, g_hi]: the asked one (EXACT), else the measured decay clipped to
    the reach (RHO_CLIPPED), else none (RENEWAL); the reason goes first in ``notes``."""
    lags, decay = t.lags, t.decay
    sign = 1.0 if gamma1 >= 0 else -1.0
    if t.n_lags == 0:
        gamma, status = 0.0, MapFitStatus.RENEWAL
        notes.insert(0, "no lag correlations given: renewal process")
    elif g_lo <= gamma1 <= g_hi:
        gamma, status = gamma1, MapFitStatus.EXACT
        notes.insert(0, f"rho_1 = {lags[0]:.4g} = A gamma with A = (1 - 1/c^2)/2 = {A:.4g}, gamma = {gamma1:.4g}"
                        + ("" if decay is None else f" (the MAP(2)'s decay; the measured lags decay as {decay:.4g})"))
    else:
        reach = g_hi if sign > 0 else -g_lo
        if reach <= 0:
            gamma, status = 0.0, MapFitStatus.RENEWAL
            notes.insert(0, f"rho_1 = {lags[0]:.4g} needs gamma = {gamma1:.4g} but this marginal reaches no "
                            f"gamma of that sign; correlation dropped")
        else:
            target = reach if decay is None else min(abs(decay), reach)
            gamma = sign * target if target >= 1e-12 else 0.0  # below that, rounding: a renewal process
            status = MapFitStatus.RENEWAL if gamma == 0 else MapFitStatus.RHO_CLIPPED
            src = ("no measured decay (one lag): gamma at the bound" if decay is None else
                   f"kept the measured decay {decay:.4g}" + (" (clipped to the reach)" if abs(decay) > reach else ""))
            notes.insert(0, f"rho_1 = {lags[0]:.4g} is beyond the MAP(2) reach [{bounds[0]:.4g}, {bounds[1]:.4g}] "
                            f"for c^2 = {scv:.4g} (it would need gamma = {gamma1:.4g}); {src}, so rho_1 = "
                            f"{A * gamma:.4g}")
    if abs(gamma) < 1e-12:
        gamma = 0.0  # below rounding: a renewal process (subnormal rates break the moment algebra)
    return gamma, status


def _renewal_fallback(t: _Targets, scv: float, bounds: tuple[float, float], exc: InputError,
                      notes: list[str]) -> Map2Fit:
    """Rounding at the edge of the reach broke the MAP(2): the renewal process of a safe marginal."""
    if scv > 1:
        p_fast, rf, rs = balanced_h2(1.0, scv)
        cf = h2_cf1(1.0 - p_fast, 1.0 / rs, 1.0 / rf)
    else:
        cf = Cf1(*_erlang_mix_cf1(scv))
    D0, D1 = map2_matrices(cf, 0.0)
    bmap = BMAP((D0 * t.rate, D1 * t.rate))
    notes.insert(0, f"numerical trouble building the MAP(2) ({exc}); renewal process instead")
    return _checked(t, bmap, MapFitStatus.RENEWAL, 0.0, bounds, True, None if t.third_moment is None else False,
                    "fallback", "; ".join(notes), np.zeros(t.n_lags), ok=False)


def map2_from_statistics(*, mean: float, variance: float | None, lag_correlations: Sequence[float] | ArrayLike = (),
                         third_moment: float | None = None, max_decay: float = MAX_DECAY) -> Map2Fit:
    """Fit a MAP of order <= 2 to the mean, variance, lag correlations (and optionally the third moment)
    of the intervals between events.

    Parameters
    ----------
    mean : float
        Mean interval (seconds), > 0.
    variance : float or None
        Interval variance, >= 0. None gives a Poisson process.
    lag_correlations : sequence of float
        rho_1..rho_L, each in [-1, 1]; may be empty (a renewal process is then fitted).
    third_moment : float, optional
        Raw E[X^3]. When given and feasible for an order-two marginal it is matched and restricts the
        reach of rho_1; when missing, the marginal is chosen to reach the asked correlation.
    max_decay : float
        Cap on |gamma| in (0, 1), keeping the MAP away from reducibility.

    Returns
    -------
    Map2Fit
        ``.map`` (a :class:`model.BMAP` with ``D0`` and ``D1``), ``.status`` (the rung), ``.success``,
        ``.message`` and the targets next to the fitted figures.

    Notes
    -----
    The mean and variance are matched exactly whenever c^2 >= 1/2. Then gamma_1 = rho_1 / A with
    A = (1 - 1/c^2)/2 (the MAP(2) identity rho_1 = A gamma). If gamma_1 is within the reach of the
    marginal (see the module docstring), gamma = gamma_1: EXACT. Otherwise rho_1 is beyond what a MAP(2)
    with this c^2 can do, and the fit keeps the measured decay (the least-squares geometric curve through
    rho_1..rho_L) as gamma, clipped to the reach, so that the MAP neither invents nor drops memory:
    RHO_CLIPPED, with rho_1 = A gamma. With a single lag there is no measured decay and gamma goes to
    the bound. If the reach in the needed direction is zero: RENEWAL (or POISSON when c^2 = 1).
    c^2 < 1/2 is beyond every order-two law: an Erlang-2 renewal process matches the mean only.

    References
    ----------
    Diamond & Alfa (2000); Bodrog, Heindl, Horváth & Telek (2008); see the module docstring.
    """
    t = _targets(mean, variance, lag_correlations, third_moment, max_decay)
    degenerate = _without_correlation(t)
    if degenerate is not None:
        return degenerate
    assert t.variance is not None  # else degenerate
    scv = t.variance / (t.mean * t.mean)
    A = (1.0 - 1.0 / scv) / 2.0
    gamma1 = float(t.lags[0] / A) if t.n_lags else 0.0
    notes: list[str] = []
    cf, m3_ok, marginal = _marginal(t, scv, gamma1, notes)
    lo_a, hi_a = gamma_reach(cf.q, cf.ratio)
    g_lo = max(float(lo_a), -t.max_decay)
    g_hi = min(float(hi_a), t.max_decay)
    bounds = (A * g_lo, A * g_hi) if A > 0 else (A * g_hi, A * g_lo)
    gamma, status = _decay(t, A, scv, gamma1, g_lo, g_hi, bounds, notes)
    notes.append(f"marginal: {marginal}")
    try:
        D0, D1 = map2_matrices(cf, gamma)
        bmap = BMAP((D0 * t.rate, D1 * t.rate))
    except InputError as exc:
        return _renewal_fallback(t, scv, bounds, exc, notes)
    claimed = np.asarray(A * gamma ** np.arange(1, t.n_lags + 1), dtype=float)
    return _checked(t, bmap, status, gamma, bounds, True, m3_ok, marginal, "; ".join(notes), claimed)


def _erlang_mix_cf1(scv: float) -> tuple[float, float, float]:
    """CF1 (q, mu1, mu2) of Tijms' exponential/Erlang-2 mixture of mean 1 and 1/2 <= c^2 <= 1."""
    p = (2.0 * scv - math.sqrt(max(2.0 * (1.0 + scv) - 4.0 * scv, 0.0))) / (1.0 + scv)
    mu = 1.0 / (2.0 - p)
    return 1.0 - p, mu, mu
