"""Revisit scheduling for one robot (paper 002): how often to fetch each page, in which order, and what
it costs in stale time.

Page i changes at the epochs of a Poisson process of rate mu_i; it is stale from its first change after
a fetch completes until the next fetch of it completes. The fetch times X_1, X_2, ... are i.i.d. like X
(or, with a MAP, a stationary correlated sequence). The cost is C = sum_i c_i r_i with r_i the long-run
fraction of time page i is stale (eq. 4), and h_i = E exp(-mu_i X).

* Exact cost of a cyclic schedule of K accesses (Lemma 3.1 with eq. 3):
  E Z = d E[X] - (1 - h^d) / mu for a page fetched again d accesses later, so
  r_i = 1 - (1 / (K E[X] mu_i)) sum_j (1 - h_i^{d_j}); with a MAP, h_i^d becomes q P_i^d e
  (:mod:`._fetch`). A page the cycle never visits has r_i = 1.
* Lower bound over all policies (Theorem 3.3 and problem (7)): C >= C* = min over frequencies x of
  sum_i c_i (1 - x_i / (E[X] mu_i) + x_i h_i^{1/x_i} / (E[X] mu_i)). With c_i = c_0 mu_i the optimum is
  x_i proportional to ln(1 / h_i) (eq. 10) and C* = c_0 (mu - 1/E[X] + prod h_i / E[X]) (eq. 6). For
  other weights the Lagrange condition (8), c_i / (mu_i E[X]) g(h_i^{1/x_i}) = lambda with
  g(y) = 1 - y + y ln y, is solved numerically: g is decreasing on (0, 1) with inverse
  y = exp(1 + W_{-1}((t - 1) / e)) (Lambert W, lower branch), so x_i(lambda) = ln h_i / ln y_i is explicit and
  lambda follows from sum x_i = 1 by a bracketed root search. A page with c_i / (mu_i E[X]) <= lambda gets
  x_i = 0 (the KKT condition at the boundary, where the derivative of its term is -c_i / (mu_i E[X])).
* The randomised policy (Section 4): each access is page i with probability f_i, independently.
  r_i = 1 - f_i / (mu_i E[X]) + (f_i / (mu_i E[X])) f_i h_i / (1 - h_i + f_i h_i) (Lemma 4.1); the best
  frequencies are proportional to 1/h_i - 1 when c_i = c_0 mu_i (Theorem 4.1, eq. 16), and for other
  weights x_i = (sqrt(c_i / (lambda mu_i E[X])) - 1)(1 - h_i) / h_i clipped at 0 (eq. 15), lambda from
  sum x_i = 1.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import lambertw

from robotctl.model import InputError

from ._fetch import FetchLaw, map_power_sums, map_transform
from ._golden import (
    PHI,
    fibonacci_lengths,
    golden_counts,
    golden_template,
    rounding_error,
    weighted_template,
)

#: Template policies (``--policy``): golden-ratio cycle, weighted round robin cycle, i.i.d. draws.
REVISIT_POLICIES = ("golden", "weighted", "random")

#: Longest template tried by default (slots per cycle).
DEFAULT_MAX_LENGTH = 1_000_000


def _freeze(*arrays: NDArray[Any]) -> None:
    for a in arrays:
        a.flags.writeable = False


def check_pages(change_rates: ArrayLike, weights: ArrayLike | None = None
                ) -> tuple[NDArray[np.float64], NDArray[np.float64], bool]:
    """(mu, c, proportional): change rates > 0, weights >= 0 (default c = mu), and whether c is a
    constant multiple of mu (then the closed forms apply)."""
    try:
        mu = np.array(change_rates, dtype=float).ravel()
    except (TypeError, ValueError) as exc:
        raise InputError("change_rates", f"are not numbers ({exc})", "e.g. 0.5,1,2 (changes per second)") from exc
    if mu.size == 0:
        raise InputError("change_rates", "are empty", "give one change rate per page")
    bad = ~(np.isfinite(mu) & (mu > 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"change_rates[{i}]", f"is {mu[i]!r}; a change rate must be a positive finite number",
                         "a page that never changes needs no revisits: leave it out")
    if weights is None:
        return mu, mu.copy(), True
    try:
        c = np.array(weights, dtype=float).ravel()
    except (TypeError, ValueError) as exc:
        raise InputError("weights", f"are not numbers ({exc})", "e.g. 1,1,2") from exc
    if c.size != mu.size:
        raise InputError("weights", f"has {c.size} entries for {mu.size} pages", "give one weight per page")
    bad = ~(np.isfinite(c) & (c >= 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"weights[{i}]", f"is {c[i]!r}; weights must be finite and >= 0", "e.g. 1")
    if not c.sum() > 0:
        raise InputError("weights", "are all zero", "give some page a positive weight")
    ratio = c / mu
    proportional = bool(np.allclose(ratio, ratio[0], rtol=1e-12, atol=0.0))
    return mu, c, proportional


# -- exact costs ---------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class CyclicCost:
    """The exact cost of a cyclic schedule (Lemma 3.1, eq. 3).

    Attributes
    ----------
    cost : float
        C = sum_i c_i r_i.
    stale_fraction : ndarray
        r_i per page (1 for a page never visited).
    visits : ndarray of int
        Accesses of each page per cycle.
    length : int
        K, accesses per cycle.
    """

    cost: float
    stale_fraction: NDArray[np.float64]
    visits: NDArray[np.int64]
    length: int

    def __post_init__(self) -> None:
        _freeze(self.stale_fraction, self.visits)


def template_gaps(template: ArrayLike, n_pages: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(page, d) for every access of a cycle: d is the number of accesses until that page's next access
    (cyclically; a page visited once per cycle of K has d = K)."""
    t = np.asarray(template, dtype=np.int64).ravel()
    if t.size == 0:
        raise InputError("template", "is empty", "give at least one access")
    if t.min() < 0 or t.max() >= n_pages:
        raise InputError("template", f"names page {int(t.max()) if t.max() >= n_pages else int(t.min())}, outside "
                         f"0..{n_pages - 1}", "page numbers index the change rates")
    K = t.size
    order = np.argsort(t, kind="stable")
    pages = t[order]
    pos = order.astype(np.int64)
    nxt = np.empty(K, dtype=np.int64)
    nxt[:-1] = pos[1:]
    same = np.empty(K, dtype=bool)
    same[:-1] = pages[1:] == pages[:-1]
    same[-1] = False
    first = np.flatnonzero(np.r_[True, pages[1:] != pages[:-1]])
    group_first = np.repeat(pos[first], np.diff(np.r_[first, K]))
    gaps = np.where(same, nxt - pos, group_first + K - pos)
    return pages, gaps


def _transform_of_gaps(law: FetchLaw, mu: NDArray[np.float64], h: NDArray[np.float64],
                       pages: NDArray[np.int64], gaps: NDArray[np.int64]) -> NDArray[np.float64]:
    """E exp(-mu_i (X_1 + ... + X_d)) for each (page, d)."""
    if not law.correlated:
        return np.asarray(np.power(h[pages], gaps.astype(float)))
    out = np.empty(gaps.size)
    assert law.map is not None
    for i in np.unique(pages):
        sel = pages == i
        d = gaps[sel]
        uniq, inv = np.unique(d, return_inverse=True)
        q, P = map_transform(law.map, float(mu[i]))
        out[sel] = map_power_sums(q, P, uniq)[inv]
    return out


def cyclic_cost(template: ArrayLike, change_rates: ArrayLike, law: FetchLaw, weights: ArrayLike | None = None
                ) -> CyclicCost:
    """The exact cost of repeating ``template`` (page numbers, 0-based) forever (Lemma 3.1 with eq. 3;
    a MAP of fetch times by Lemma 5.2 of paper 003)."""
    mu, c, _ = check_pages(change_rates, weights)
    pages, gaps = template_gaps(template, mu.size)
    K = int(gaps.size)
    h = law.laplace(mu)
    phi = _transform_of_gaps(law, mu, h, pages, gaps)
    saved = np.bincount(pages, weights=1.0 - phi, minlength=mu.size)
    r = 1.0 - saved / (K * law.mean * mu)
    visits = np.bincount(pages, minlength=mu.size).astype(np.int64)
    return CyclicCost(float(c @ r), r, visits, K)


def stale_fraction_bound(frequencies: ArrayLike, change_rates: ArrayLike, law: FetchLaw) -> NDArray[np.float64]:
    """Theorem 3.3: r_i >= 1 - f_i / (mu_i E[X]) + (f_i / (mu_i E[X])) h_i^{1/f_i} for any policy that
    visits page i with frequency f_i (1 when f_i = 0). Independent fetch times only."""
    f = np.asarray(frequencies, dtype=float)
    mu = np.asarray(change_rates, dtype=float)
    h = law.laplace(mu)
    with np.errstate(divide="ignore"):
        term = np.where(f > 0, f * np.power(h, 1.0 / np.where(f > 0, f, 1.0)), 0.0)
    return np.asarray(1.0 - (f - term) / (mu * law.mean))


def randomised_stale_fraction(frequencies: ArrayLike, change_rates: ArrayLike, law: FetchLaw
                              ) -> NDArray[np.float64]:
    """r_i of the randomised policy (Lemma 4.1); with a MAP the geometric distance d is averaged
    exactly: E[q P^d e] = f q P (I - (1 - f) P)^{-1} e."""
    f = np.asarray(frequencies, dtype=float)
    mu = np.asarray(change_rates, dtype=float)
    h = law.laplace(mu)
    if law.correlated:
        assert law.map is not None
        H = np.zeros(mu.size)
        for i in np.flatnonzero(f > 0):
            q, P = map_transform(law.map, float(mu[i]))
            w = np.linalg.solve(np.eye(P.shape[0]) - (1 - f[i]) * P, np.ones(P.shape[0]))
            H[i] = f[i] * q @ P @ w
    else:
        H = np.where(f > 0, f * h / (1 - h + f * h), 0.0)
    return np.asarray(1.0 - f * (1.0 - H) / (mu * law.mean))


# -- frequencies ---------------------------------------------------------------------------------------
class FrequencyMethod(enum.Enum):
    """How the optimal frequencies were found."""

    #: closed form (weights proportional to the change rates)
    CLOSED_FORM = "closed form"
    #: the Lagrange condition solved numerically (general weights)
    LAGRANGE = "lagrange"


@dataclass(frozen=True, eq=False)
class Frequencies:
    """Optimal access frequencies and the cost they bound.

    Attributes
    ----------
    frequencies : ndarray
        x_i, summing to one; zero for pages not worth visiting (general weights only).
    h : ndarray
        h_i = E exp(-mu_i X).
    cost : float
        The optimum of the relaxed problem: the lower bound C* (problem 7) for the cyclic relaxation,
        or the randomised policy's exact cost (problem 12).
    method : FrequencyMethod
    multiplier : float or None
        lambda of the Lagrange condition (None for the closed form).
    """

    frequencies: NDArray[np.float64]
    h: NDArray[np.float64]
    cost: float
    method: FrequencyMethod
    multiplier: float | None = None

    def __post_init__(self) -> None:
        _freeze(self.frequencies, self.h)


def _inverse_g(t: NDArray[np.float64]) -> NDArray[np.float64]:
    """y in (0, 1) with 1 - y + y ln y = t, for t in (0, 1): y = exp(1 + W_{-1}((t - 1) / e))."""
    w = lambertw((t - 1.0) / math.e, k=-1).real
    return np.asarray(np.exp(1.0 + w))


def _solve_multiplier(total: Any, w_max: float) -> float:
    """lambda in (0, w_max) with total(lambda) = 1, where total decreases from +inf (lambda -> 0) to 0
    (lambda -> w_max). Searched in log10(lambda / w_max), since the root can lie many decades down."""

    def excess(e: float) -> float:
        return float(total(w_max * 10.0**e)) - 1.0

    lo, hi = -300.0, -1e-15
    if excess(lo) <= 0:  # pragma: no cover - total -> inf as lambda -> 0
        return w_max * 10.0**lo
    from scipy.optimize import brentq  # imported where used: scipy.optimize costs 0.4-0.8 s
    e = brentq(excess, lo, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps, maxiter=500)
    return float(w_max * 10.0**e)


def optimal_frequencies(change_rates: ArrayLike, law: FetchLaw, weights: ArrayLike | None = None) -> Frequencies:
    """The frequencies minimising the lower bound of Theorem 3.3 summed with weights (problem 7), and
    that minimum C*, a lower bound on the cost of every policy.

    With c_i = c_0 mu_i (``weights`` None or proportional): x_i = ln h_i / sum ln h_i (eq. 10) and
    C* = c_0 (mu - 1/E[X] + prod h_i / E[X]) (eq. 6). Otherwise the Lagrange condition (8), solved as in
    the module docstring. Correlated (MAP) fetch times: the frequencies use the marginal law's h_i and
    C* is not a bound (the paper's argument needs independent fetch times); callers say so.
    """
    mu, c, proportional = check_pages(change_rates, weights)
    h = law.laplace(mu)
    if np.any(h >= 1.0):
        i = int(np.argmax(h))
        raise InputError(f"change_rates[{i}]", f"is {mu[i]:g}: E exp(-mu X) rounds to 1 for this fetch law",
                         "rates this small relative to the fetch time make the page never stale in practice")
    EX = law.mean
    lnh = np.log(h)
    if proportional:
        x = lnh / lnh.sum()
        c0 = float(c[0] / mu[0])
        cstar = c0 * (float(mu.sum()) - 1.0 / EX + math.exp(float(lnh.sum())) / EX)
        return Frequencies(x, h, cstar, FrequencyMethod.CLOSED_FORM)
    w = c / (mu * EX)

    def xs(lam: float) -> NDArray[np.float64]:
        t = lam / np.where(w > 0, w, 1.0)
        live = (w > lam) & (t < 1.0)
        out = np.zeros(mu.size)
        if live.any():
            y = _inverse_g(t[live])
            with np.errstate(divide="ignore"):
                out[live] = np.where(y < 1.0, lnh[live] / np.log(np.minimum(y, 1.0 - 1e-300)), np.inf)
        return out

    lam = _solve_multiplier(lambda v: float(xs(v).sum()), float(w.max()))
    x = xs(lam)
    x = x / x.sum()
    return Frequencies(x, h, lower_bound_of(x, mu, c, h, EX), FrequencyMethod.LAGRANGE, lam)


def lower_bound_of(x: NDArray[np.float64], mu: NDArray[np.float64], c: NDArray[np.float64],
                   h: NDArray[np.float64], EX: float) -> float:
    """The objective of problem (7) at frequencies x (pages with x_i = 0 contribute c_i)."""
    safe = np.where(x > 0, x, 1.0)
    term = np.where(x > 0, x * np.power(h, 1.0 / safe), 0.0)
    return float(np.sum(c * (1.0 - (x - term) / (EX * mu))))


@dataclass(frozen=True, eq=False)
class RandomisedPolicy:
    """The best randomised policy (Section 4).

    Attributes
    ----------
    frequencies : ndarray
        f_i, summing to one.
    cost : float
        Its exact cost (Lemma 4.1; with a MAP, the exact geometric average).
    stale_fraction : ndarray
        r_i per page.
    method : FrequencyMethod
    """

    frequencies: NDArray[np.float64]
    cost: float
    stale_fraction: NDArray[np.float64]
    method: FrequencyMethod

    def __post_init__(self) -> None:
        _freeze(self.frequencies, self.stale_fraction)


def randomised_policy(change_rates: ArrayLike, law: FetchLaw, weights: ArrayLike | None = None) -> RandomisedPolicy:
    """Theorem 4.1: f_i proportional to 1/h_i - 1 when c_i = c_0 mu_i (cost eq. 11); otherwise
    eq. (15) with lambda from sum f_i = 1, clipped at zero (the KKT point of the convex problem 12).
    With a MAP the frequencies use the marginal h_i; the cost is exact for the MAP."""
    mu, c, proportional = check_pages(change_rates, weights)
    h = law.laplace(mu)
    a = (1.0 - h) / h
    if proportional:
        f = a / a.sum()
        method = FrequencyMethod.CLOSED_FORM
    else:
        w = c / (mu * law.mean)

        def xs(lam: float) -> NDArray[np.float64]:
            return np.asarray(np.where(w > lam, (np.sqrt(w / lam) - 1.0) * a, 0.0))

        lam = _solve_multiplier(lambda v: float(xs(v).sum()), float(w.max()))
        f = xs(lam)
        f = f / f.sum()
        method = FrequencyMethod.LAGRANGE
    r = randomised_stale_fraction(f, mu, law)
    return RandomisedPolicy(f, float(c @ r), r, method)


# -- the plan ------------------------------------------------------------------------------------------
class PlanStatus(enum.Enum):
    """Outcome of :func:`plan_revisits`."""

    #: the template realises the optimal frequencies (every page with f_i > 0 at least once per cycle)
    OK = 0
    #: the longest template allowed is too short for the rarest pages: their counts were raised to one
    #: access per cycle, which distorts the frequencies (the message says by how much)
    ROUNDED = 1


_STATUS_MESSAGE = {
    PlanStatus.OK: "template realises the optimal frequencies",
    PlanStatus.ROUNDED: "max_length is too short for the rarest pages: they get one access per cycle",
}


@dataclass(frozen=True, eq=False)
class RevisitPlan:
    """Which pages a robot fetches, how often and in which order, with the costs (paper 002).

    Attributes
    ----------
    success : bool
    status : PlanStatus
    message : str
    policy : str
        ``golden``, ``weighted`` or ``random``.
    change_rates, weights : ndarray
        mu_i and c_i (c_i = mu_i unless weights were given).
    fetch : FetchLaw
    h : ndarray
        h_i = E exp(-mu_i X) (the marginal law for a MAP).
    frequencies : ndarray
        Optimal access frequencies (eq. 10, or the Lagrange condition 8 for general weights).
    lower_bound : float or None
        C*, a lower bound on the cost of every policy (None with correlated fetch times, where the
        paper's bound does not apply).
    method : FrequencyMethod
    template : ndarray of int or None
        One cycle of page numbers (0-based), None for ``random``.
    template_cost : CyclicCost or None
        The template's exact cost.
    randomised : RandomisedPolicy
        The best randomised policy (Theorem 4.1), for comparison (and served by ``random``).
    length_candidates : tuple of (int, float)
        (cycle length, exact cost) of every length tried.
    """

    success: bool
    status: PlanStatus
    message: str
    policy: str
    change_rates: NDArray[np.float64]
    weights: NDArray[np.float64]
    fetch: FetchLaw
    h: NDArray[np.float64]
    frequencies: NDArray[np.float64]
    lower_bound: float | None
    method: FrequencyMethod
    template: NDArray[np.int64] | None
    template_cost: CyclicCost | None
    randomised: RandomisedPolicy
    length_candidates: tuple[tuple[int, float], ...] = field(default=())

    def __post_init__(self) -> None:
        arrays = [self.change_rates, self.weights, self.h, self.frequencies]
        _freeze(*arrays, *([self.template] if self.template is not None else []))

    @property
    def cost(self) -> float:
        """The cost of the policy served: the template's, or the randomised policy's."""
        return self.template_cost.cost if self.template_cost is not None else self.randomised.cost

    @property
    def stale_fraction(self) -> NDArray[np.float64]:
        """r_i per page under the policy served."""
        return (self.template_cost.stale_fraction if self.template_cost is not None
                else self.randomised.stale_fraction)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``frequencies``, ``lower_bound``, ``template`` (1-based page numbers),
        ``template_cost``, ``randomised`` {frequencies, cost}, and the rest."""
        tc = self.template_cost
        return {
            "success": self.success,
            "status": self.status.name.lower(),
            "message": self.message,
            "policy": self.policy,
            "fetch_time": {"law": self.fetch.describe(), "mean_s": self.fetch.mean},
            "method": self.method.value,
            "frequencies": self.frequencies.tolist(),
            "lower_bound": self.lower_bound,
            "template": None if self.template is None else (self.template + 1).tolist(),
            "template_cost": None if tc is None else tc.cost,
            "visits_per_cycle": None if tc is None else tc.visits.tolist(),
            "cost": self.cost,
            "stale_fraction": self.stale_fraction.tolist(),
            "h": self.h.tolist(),
            "randomised": {"frequencies": self.randomised.frequencies.tolist(), "cost": self.randomised.cost},
        }


def plan_revisits(change_rates: ArrayLike, law: FetchLaw, weights: ArrayLike | None = None, *,
                  policy: str = "golden", max_length: int = DEFAULT_MAX_LENGTH, lengths_tried: int = 8
                  ) -> RevisitPlan:
    """Frequencies, a cyclic template realising them, its exact cost and the lower bound.

    Parameters
    ----------
    change_rates : array_like
        mu_i > 0, changes per second.
    law : FetchLaw
        The fetch-time law X.
    weights : array_like, optional
        c_i >= 0; default c_i = mu_i (the paper's assumption).
    policy : str
        ``golden`` (Section 5), ``weighted`` (a weighted round robin cycle with the same counts) or
        ``random`` (Section 4: i.i.d. draws, no template).
    max_length : int
        Longest cycle considered.
    lengths_tried : int
        Cycle lengths tried, from the shortest that gives every page with f_i > 0 at least
        f_i F >= 1 accesses: consecutive Fibonacci numbers for ``golden``, that length times powers of
        phi for ``weighted``; the cheapest (exact cost) is kept. The search stops early after three
        lengths in a row that improve the best cost by less than a relative 1e-5.

    Examples
    --------
    Three pages changing 0.5, 1 and 2 times per second, exponential fetches of mean 1 s:

    >>> plan = plan_revisits([0.5, 1.0, 2.0], FetchLaw.exponential(1.0))
    >>> plan.frequencies.round(3).tolist(), round(plan.lower_bound, 4)
    ([0.185, 0.315, 0.5], 2.6111)
    >>> len(plan.template), round(plan.cost, 4), round(plan.randomised.cost, 4)
    (21, 2.6411, 2.7222)
    """
    if policy not in REVISIT_POLICIES:
        raise InputError("policy", f"is {policy!r}", f"use one of: {', '.join(REVISIT_POLICIES)}")
    mu, c, _ = check_pages(change_rates, weights)
    opt = optimal_frequencies(mu, law, c)
    rnd = randomised_policy(mu, law, c)
    f = np.asarray(opt.frequencies)
    lower = None if law.correlated else opt.cost
    status = PlanStatus.OK
    template: NDArray[np.int64] | None = None
    tcost: CyclicCost | None = None
    tried: list[tuple[int, float]] = []
    if policy != "random":
        pos = f[f > 0]
        need = max(int(pos.size), math.ceil(1.0 / float(pos.min()) - 1e-9))
        n_pos = int(pos.size)
        if n_pos > max_length:
            raise InputError("max_length", f"is {max_length}, fewer slots than the {n_pos} pages to visit",
                             f"allow at least {n_pos}")
        if policy == "golden":  # Fibonacci lengths from the shortest that gives every page f_i F >= 1
            lengths = [F for _, F in fibonacci_lengths(min(need, max_length), max_length)]
        else:  # any length: need, need phi, need phi^2, ... (need = N for equal rates: round robin)
            lengths = sorted({min(max_length, round(need * PHI**i)) for i in range(lengths_tried)})
            lengths = [F for F in lengths if n_pos <= F]
        if not lengths:  # even max_length gives the rarest pages f_i F < 1: the longest allowed
            lengths = [F for _, F in fibonacci_lengths(n_pos, max_length)][-1:] if policy == "golden" else [max_length]
            status = PlanStatus.ROUNDED
        if not lengths:
            raise InputError("max_length", f"is {max_length}: no Fibonacci length between {n_pos} and it",
                             f"allow at least {next(F for _, F in fibonacci_lengths(n_pos, 10 * n_pos + 10))}")
        best: tuple[float, NDArray[np.int64], CyclicCost] | None = None
        stale = 0
        for F in lengths[:lengths_tried]:
            counts = golden_counts(f, F)
            t = golden_template(counts) if policy == "golden" else weighted_template(counts)
            cc = cyclic_cost(t, mu, law, c)
            tried.append((F, cc.cost))
            stale = 0 if best is None or cc.cost < best[0] * (1 - 1e-5) else stale + 1
            if best is None or cc.cost < best[0]:
                best = (cc.cost, t, cc)
            if stale == 3:  # three longer cycles in a row gained nothing that matters: stop
                break
        assert best is not None
        _, template, tcost = best
        if status is PlanStatus.ROUNDED:
            err = rounding_error(f, tcost.visits)
            message = f"{_STATUS_MESSAGE[status]} (largest relative frequency error {err:.1%})"
        else:
            message = _STATUS_MESSAGE[status]
    else:
        message = "randomised policy: each access is page i with probability f_i (Theorem 4.1)"
    return RevisitPlan(True, status, message, policy, mu, c, law, opt.h, f, lower, opt.method, template, tcost,
                       rnd, tuple(tried))


__all__ = [
    "DEFAULT_MAX_LENGTH",
    "REVISIT_POLICIES",
    "CyclicCost",
    "Frequencies",
    "FrequencyMethod",
    "PlanStatus",
    "RandomisedPolicy",
    "RevisitPlan",
    "check_pages",
    "cyclic_cost",
    "lower_bound_of",
    "optimal_frequencies",
    "plan_revisits",
    "randomised_policy",
    "randomised_stale_fraction",
    "stale_fraction_bound",
    "template_gaps",
]
