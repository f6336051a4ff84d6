"""Phase-type laws from moments: the service law of the model (issue 3, step 7) and the order-two
marginal of the MAP(2) of batch epochs (step 4).

Everything rests on one closed form. With the reduced moments r_k = m_k / k!, an order-two law has the
Laplace transform (1 + b_1 s) / (1 + a_1 s + a_2 s^2), and matching its power series to
sum_k (-s)^k r_k gives two linear equations for a_1, a_2::

    a_1 r_1 - a_2 = r_2,     a_1 r_2 - a_2 r_1 = r_3.

The roots mu_1 >= mu_2 of x^2 - a_1 x + a_2 are the phase means of the acyclic canonical form CF1
(Cumani 1982): start in phase 1 (mean mu_1) with probability q, else in phase 2 (mean mu_2), go
1 -> 2 -> absorption, and q mu_1 = r_1 - mu_2. The law is a valid PH exactly when the roots are real
and positive and 0 <= q <= 1. For c^2 > 1 this is the two-point (hyperexponential) form on r_k: it
exists iff c^2 > 1 and m_1 m_3 > 1.5 m_2^2 (Telek & Heindl, "Matching moments for acyclic discrete
and continuous phase-type distributions of second order", 2002).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from robotctl.model import PH, InputError

from ._checks import positive_number

#: |c^2 - 1| below this counts as an exponential law.
SCV_ONE_TOL = 1e-9
#: Relative tolerance of the check that a fitted law has the moments it claims.
CLAIM_RTOL = 1e-8


class PhFitStatus(enum.Enum):
    """How much of the given moments a fitted PH law matches (best first)."""

    #: every moment given (two or three) is matched exactly
    EXACT = "exact"
    #: mean and variance matched; the third moment was missing or outside the order-two range
    TWO_MOMENTS = "two_moments"
    #: only the mean matched: no variance given, or c^2 below what ``max_order`` phases reach
    MEAN_ONLY = "mean_only"


_STATUS_MESSAGES = {
    PhFitStatus.EXACT: "all given moments matched",
    PhFitStatus.TWO_MOMENTS: "mean and variance matched",
    PhFitStatus.MEAN_ONLY: "only the mean matched",
}


@dataclass(frozen=True, eq=False)
class Cf1:
    """An order-two acyclic law in canonical form CF1 (time unit: whatever the moments used).

    Attributes
    ----------
    q : float
        Probability of starting in phase 1; 1 - q starts in phase 2.
    mu1, mu2 : float
        Phase means, mu1 >= mu2 > 0 (phase 1 is the slow one).
    """

    q: float
    mu1: float
    mu2: float

    @property
    def ratio(self) -> float:
        """r = lambda_1 / lambda_2 = mu2 / mu1 in (0, 1]."""
        return self.mu2 / self.mu1

    def ph(self) -> PH:
        return PH(np.array([self.q, 1.0 - self.q]),
                  np.array([[-1.0 / self.mu1, 1.0 / self.mu1], [0.0, -1.0 / self.mu2]]))


def cf1_from_moments(m1: float, m2: float, m3: float, *, tol: float = 1e-12) -> Cf1 | None:
    """The CF1 law with raw moments (m1, m2, m3), or None when no order-two PH has them.

    The exponential case (c^2 = 1) is degenerate here (the linear system is singular) and returns None;
    callers treat it first.
    """
    ld = np.longdouble  # extended precision: the closed form cancels badly near c^2 = 1
    r1, r2, r3 = ld(m1), ld(m2) / 2, ld(m3) / 6
    den = r2 - r1 * r1
    if abs(den) <= SCV_ONE_TOL * r1 * r1:
        return None
    a1 = (r3 - r1 * r2) / den
    a2 = a1 * r1 - r2
    disc = a1 * a1 - 4 * a2
    if a1 <= 0 or a2 <= 0 or disc < -tol * a1 * a1:
        return None
    root = np.sqrt(max(disc, ld(0)))
    mu1 = (a1 + root) / 2
    mu2 = a2 / mu1  # the smaller root, computed without cancellation
    if mu2 <= 0:
        return None
    q = (r1 - mu2) / mu1
    if q < -tol or q > 1 + tol:
        return None
    q = min(max(q, ld(0)), ld(1))
    # accept only what reproduces the moments in double precision
    for k, target in ((1, r1), (2, r2), (3, r3)):
        h = sum(mu1**i * mu2 ** (k - i) for i in range(k + 1))  # complete homogeneous polynomial
        if abs(q * h + (1 - q) * mu2**k - target) > 1e-10 * target:
            return None
    return Cf1(float(q), float(mu1), float(mu2))


def balanced_h2(m1: float, scv: float) -> tuple[float, float, float]:
    """Balanced-means H2 (p_1 / lambda_1 = p_2 / lambda_2) with mean m1 and c^2 = scv > 1.

    Returns (p_fast, rate_fast, rate_slow); the slow branch has probability 1 - p_fast.
    """
    p = 0.5 * (1.0 + math.sqrt((scv - 1.0) / (scv + 1.0)))
    return p, 2.0 * p / m1, 2.0 * (1.0 - p) / m1


def h2_cf1(p_slow: float, mu_slow: float, mu_fast: float) -> Cf1:
    """The CF1 form of the H2 that takes the slow branch (mean mu_slow) with probability p_slow."""
    return Cf1(p_slow * (1.0 - mu_fast / mu_slow), mu_slow, mu_fast)


def erlang_mixture(m1: float, scv: float, order: int) -> PH:
    """Tijms' mixture of Erlang(k-1) and Erlang(k) with one rate, k = ``order``, matching m1 and
    1/k <= scv <= 1/(k-1) (Tijms, "A First Course in Stochastic Models", 2003, Section 2.9)."""
    k = order
    p = (k * scv - math.sqrt(max(k * (1.0 + scv) - k * k * scv, 0.0))) / (1.0 + scv)
    p = min(max(p, 0.0), 1.0)
    rate = (k - p) / m1
    S = np.diag(np.full(k, -rate)) + np.diag(np.full(k - 1, rate), 1)
    beta = np.zeros(k)
    beta[0] = 1.0 - p
    if k > 1:
        beta[1] += p
    else:
        beta[0] = 1.0
    return PH(beta, S)


def _h2(probs: list[float], rates: list[float]) -> PH:
    """H2 with +0.0 (not -0.0) off the diagonal, so that model files print cleanly."""
    return PH(np.asarray(probs, dtype=float), np.diag(-np.asarray(rates, dtype=float)))


def _erlang(m1: float, order: int) -> PH:
    return PH.erlang(order, order / m1)


@dataclass(frozen=True, eq=False)
class PhFit:
    """A PH law fitted to moments.

    Attributes
    ----------
    law : PH
        The fitted law (``beta`` and ``S`` are shortcuts to it).
    status : PhFitStatus
        Which rung: EXACT, TWO_MOMENTS or MEAN_ONLY.
    success : bool
        True when the law has the moments its status claims (checked to 1e-8 relative).
    message : str
        What was matched, what was not, and why.
    method : str
        ``h2-three-moments``, ``aph2-three-moments``, ``h2-balanced-means``, ``erlang-mixture``,
        ``erlang``, or ``exponential``.
    moments : tuple of float or None
        The targets (m1, m2, m3); None where not given.
    fitted_moments : tuple of float
        The law's first three raw moments.
    """

    law: PH
    status: PhFitStatus
    success: bool
    message: str
    method: str
    moments: tuple[float | None, float | None, float | None]
    fitted_moments: tuple[float, float, float]

    @property
    def beta(self) -> NDArray[np.float64]:
        return self.law.beta

    @property
    def S(self) -> NDArray[np.float64]:
        return self.law.S

    @property
    def scv(self) -> float:
        return self.law.scv


def _finish(law: PH, status: PhFitStatus, method: str, why: str,
            moments: tuple[float | None, float | None, float | None]) -> PhFit:
    fitted = (law.moment(1), law.moment(2), law.moment(3))
    n_claimed = {PhFitStatus.EXACT: sum(m is not None for m in moments), PhFitStatus.TWO_MOMENTS: 2,
                 PhFitStatus.MEAN_ONLY: 1}[status]
    bad = []
    for k in range(n_claimed):
        target = moments[k]
        if target is not None and abs(fitted[k] - target) > CLAIM_RTOL * abs(target):
            bad.append(k + 1)
    message = f"{_STATUS_MESSAGES[status]} ({method})"
    if why:
        message += f": {why}"
    if bad:
        message = f"numerical trouble: moment(s) {bad} off by more than {CLAIM_RTOL:g} relative; " + message
    return PhFit(law, status, not bad, message, method, moments, fitted)


def h2_from_moments(m1: float, m2: float | None, m3: float | None = None, *, max_order: int = 10) -> PhFit:
    """A PH law matching the first two or three raw moments: H2 where it can, else the nearest valid law.

    Parameters
    ----------
    m1, m2, m3 : float
        Raw moments E[X], E[X^2], E[X^3]. ``m2`` None gives the exponential law of mean ``m1``;
        ``m3`` None asks for two moments only.
    max_order : int
        Most phases allowed for an Erlang mixture when c^2 < 1/2.

    Returns
    -------
    PhFit
        ``.law`` (a :class:`model.PH`), ``.beta``, ``.S``, ``.status``, ``.success``, ``.message``.

    Notes
    -----
    With c^2 = m2 / m1^2 - 1:

    * c^2 > 1 and m1 m3 > 1.5 m2^2: the H2 of the closed two-point form on m_k / k! (EXACT);
    * c^2 > 1 otherwise (m3 missing or too small for any order-two PH): balanced-means H2 (TWO_MOMENTS);
    * c^2 = 1: exponential (EXACT if m3 is missing or equals 6 m1^3, else TWO_MOMENTS);
    * 1/2 <= c^2 < 1: the APH(2) in CF1 form when m3 is in its range (EXACT), else Tijms' mixture of
      an exponential and an Erlang-2 of one rate (TWO_MOMENTS);
    * c^2 < 1/2: Tijms' Erlang(k-1)/Erlang(k) mixture with k = ceil(1/c^2) <= max_order
      (TWO_MOMENTS), else an Erlang of ``max_order`` phases (MEAN_ONLY).

    References
    ----------
    Telek & Heindl (2002), "Matching moments for acyclic discrete and continuous phase-type
    distributions of second order", Int. J. of Simulation 3. Tijms (2003), Section 2.9.
    """
    m1 = positive_number("m1", m1)
    if isinstance(max_order, bool) or not isinstance(max_order, int) or max_order < 1:
        raise InputError("max_order", f"must be a whole number >= 1, got {max_order!r}", "e.g. max_order=10")
    if m2 is None:
        law = PH.exponential(1.0 / m1)
        return _finish(law, PhFitStatus.MEAN_ONLY, "exponential", "no second moment given", (m1, None, None))
    m2 = positive_number("m2", m2)
    if m2 < m1 * m1 * (1.0 - 1e-12):
        raise InputError("m2", f"is {m2:g} < m1^2 = {m1 * m1:g}, a negative variance",
                         "give raw moments E[X^2] >= E[X]^2")
    if m3 is not None:
        m3 = positive_number("m3", m3)
    moments = (m1, m2, m3)
    scv = max(m2 / (m1 * m1) - 1.0, 0.0)

    if abs(scv - 1.0) <= SCV_ONE_TOL:
        law = PH.exponential(1.0 / m1)
        if m3 is None or abs(m3 - 6.0 * m1**3) <= CLAIM_RTOL * m3:
            return _finish(law, PhFitStatus.EXACT, "exponential", "c^2 = 1", moments)
        return _finish(law, PhFitStatus.TWO_MOMENTS, "exponential",
                       f"c^2 = 1 allows only the exponential, whose m3 = {6 * m1**3:.6g}, not {m3:.6g}", moments)

    if scv > 1.0:
        if m3 is not None and m1 * m3 > 1.5 * m2 * m2 * (1.0 + 1e-12):
            cf = cf1_from_moments(m1, m2, m3)
            if cf is not None:
                # back from CF1 to the H2 form: p_slow = q / (1 - mu2/mu1)
                p_slow = cf.q / (1.0 - cf.ratio)
                law = _h2([p_slow, 1.0 - p_slow], [1.0 / cf.mu1, 1.0 / cf.mu2])
                return _finish(law, PhFitStatus.EXACT, "h2-three-moments", f"c^2 = {scv:.6g} > 1", moments)
        p, rf, rs = balanced_h2(m1, scv)
        law = _h2([p, 1.0 - p], [rf, rs])
        why = ("no third moment given" if m3 is None else
               f"m1 m3 = {m1 * m3:.6g} is not above 1.5 m2^2 = {1.5 * m2 * m2:.6g}, so no H2 (nor any "
               "order-two PH) has these three moments; the third was dropped")
        return _finish(law, PhFitStatus.TWO_MOMENTS, "h2-balanced-means", why, moments)

    if scv >= 0.5:
        if m3 is not None:
            cf = cf1_from_moments(m1, m2, m3)
            if cf is not None:
                return _finish(cf.ph(), PhFitStatus.EXACT, "aph2-three-moments",
                               f"c^2 = {scv:.6g} in [1/2, 1)", moments)
        why = ("no third moment given" if m3 is None else
               f"m3 = {m3:.6g} is outside the APH(2) range for c^2 = {scv:.6g}; the third was dropped")
        return _finish(erlang_mixture(m1, scv, 2), PhFitStatus.TWO_MOMENTS, "erlang-mixture", why, moments)

    k = max(2, math.ceil(1.0 / scv - 1e-12)) if scv > 0 else max_order + 1
    if k <= max_order:
        why = f"c^2 = {scv:.6g} < 1/2 needs {k} phases" + ("" if m3 is None else "; the third moment was dropped")
        return _finish(erlang_mixture(m1, scv, k), PhFitStatus.TWO_MOMENTS, "erlang-mixture", why, moments)
    why = (f"c^2 = {scv:.6g} would need {'infinitely many' if scv == 0 else k} phases, more than "
           f"max_order = {max_order}; Erlang-{max_order} has c^2 = {1 / max_order:.6g}")
    return _finish(_erlang(m1, max_order), PhFitStatus.MEAN_ONLY, "erlang", why, moments)
