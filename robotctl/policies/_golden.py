"""Cyclic revisit templates that realise given access frequencies (paper 002, Section 5).

The golden-ratio policy gamma(k, N) (after Itai and Rosberg): with F = F_k a Fibonacci number, page i
gets an integer number M_i of the F accesses of a cycle, floor(f_i F) <= M_i <= ceil(f_i F), sum M_i = F.
The points frac(j / phi), j = 1..F, are split into consecutive blocks of M_1, M_2, ... indices (page 1
owns the first M_1 indices, and so on), and the s-th access of the cycle goes to the owner of the s-th
smallest point.

Indexing, and the paper's printed example. Fibonacci numbers here are F_1 = F_2 = 1, F_3 = 2, ...;
the paper's "k = 8 so that F_k = 13" counts one further (13 is F_7 here). With j running over 1..F
(``one_based=True``) the example f = (2, 3, 3, 5)/13 gives exactly the printed cycle
{4, 2, 4, 1, 3, 4, 2, 4, 1, 3, 4, 2, 3}; the paper's own range j = 0..F-1 rotates every point by
-1/phi, which keeps their cyclic order, so it gives the same cycle started elsewhere
({1, 3, 4, 2, 3, 4, 2, 4, 1, 3, 4, 2, 4}).

Exact order. frac(j / phi) is never computed in floating point: for F = F_k the points j F_{k-1} / F_k
(mod 1) are the F multiples of 1/F, and |j / phi - j F_{k-1} / F_k| < phi^{-k} < 1 / (2 F) moves every
point by less than half a spacing, in the same direction, so the rank of j is j F_{k-1} mod F (exact
integers) up to where the cycle starts. For j = 0..F-1 the start is rank 0 (j = 0, the point 0 itself);
for j = 1..F it is rank 0 when F_{k-1} / F_k < 1 / phi and rank 1 otherwise (the point of rank 0,
j = F, then lies just below 1).

The interaccess distances (the corrected index j_i). Page i's M_i indices form a block of consecutive
integers, so by the three-distance theorem its accesses are F_{j_i}, F_{j_i + 1} or F_{j_i + 2} slots
apart, with j_i = k - n_i where F_{n_i} <= M_i < F_{n_i + 1}. As M_i / F_k -> f_i this is

    j_i = ceil(log_phi(1 / f_i)) = -floor(log_phi f_i)              (the paper prints ceil(ln_phi f_i) <= 0)

and the three distances occur with densities (per slot) f_i - phi^{-j_i}, f_i - phi^{-j_i - 1} and
phi^{-j_i + 1} - f_i: they are >= 0 because phi^{-j_i} <= f_i < phi^{-j_i + 1}, they add up to f_i
(accesses per slot) and F_{j_i}, F_{j_i+1}, F_{j_i+2} times them add up to 1 (slots per slot). The paper's
limit C(gamma(N)) swaps the exponents -j_i - 1 and -j_i + 1 of the second and third coefficient;
:func:`golden_limit_cost` uses the densities above (tests check them against long cycles).

How close to the lower bound (Corollary 5.1). With these densities the limit ratio C(gamma(N)) / C* as
N grows is an average over the pages of R(s_i, q) (:func:`golden_limit_ratio`), where
s_i = j_i + log_phi f_i in [0, 1) is where f_i sits between two powers of 1/phi and q = mu E[X]. The
paper's H(q) is R(0, q): its proof takes every page's distances to be phi / (f_i sqrt 5) and
phi^2 / (f_i sqrt 5), which is the case s_i = 0 only. For other s the ratio is larger: with equal change
rates (all s_i equal) it reaches (11 + 5 sqrt 5) / 20 = 1.109 as q -> 0, above 2 phi^2 / 5 = 1.047
(:func:`golden_worst_ratio`; a test confirms it by simulation against round robin, which attains C*
for equal rates). Heterogeneous rates spread the s_i and land in between.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
from numpy.typing import ArrayLike, NDArray

from robotctl.model import InputError

#: The golden ratio.
PHI = (1.0 + math.sqrt(5.0)) / 2.0


def fibonacci(k: int) -> int:
    """F_k with F_1 = F_2 = 1 (F_0 = 0)."""
    if k < 0:
        raise InputError("k", f"must be >= 0, got {k}", "Fibonacci numbers are indexed from 0")
    a, b = 0, 1
    for _ in range(k):
        a, b = b, a + b
    return a


def fibonacci_lengths(lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """(k, F_k) for every Fibonacci number lo <= F_k <= hi, k >= 2 (F_2 = 1 is listed once)."""
    k, a, b = 2, 1, 2
    while a <= hi:
        if a >= lo:
            yield k, a
        k, a, b = k + 1, b, a + b


def golden_counts(frequencies: ArrayLike, length: int) -> NDArray[np.int64]:
    """Integer accesses M_i per cycle of ``length`` slots: floor(f_i F) <= M_i <= ceil(f_i F), sum = F.

    Largest remainders get the leftover slots. Every page with f_i > 0 gets at least one access, even
    when f_i F < 1 (then the rounding distorts its frequency; :func:`rounding_error` says by how much);
    pages with f_i = 0 get none.
    """
    f = np.asarray(frequencies, dtype=float)
    positive = f > 0
    n_pos = int(positive.sum())
    if length < n_pos:
        raise InputError("length", f"is {length}, fewer slots than the {n_pos} pages to visit",
                         "allow a longer template")
    target = f / f.sum() * length
    M = np.floor(target).astype(np.int64)
    M[positive & (M == 0)] = 1
    rest = length - int(M.sum())
    frac = target - np.floor(target)
    if rest > 0:
        frac = np.where(np.floor(target) < M, -np.inf, frac)  # pages raised to 1 are served already
        M[np.argsort(-frac, kind="stable")[:rest]] += 1
    elif rest < 0:  # pages raised to 1 took slots: take them back from the most over-served pages
        over = np.where(M > 1, M - target, -np.inf)
        for i in np.argsort(-over, kind="stable")[:-rest]:
            M[i] -= 1
    return M


def rounding_error(frequencies: ArrayLike, counts: ArrayLike) -> float:
    """Largest relative difference between M_i / F and f_i over the pages with f_i > 0."""
    f = np.asarray(frequencies, dtype=float)
    M = np.asarray(counts, dtype=float)
    pos = f > 0
    return float(np.max(np.abs(M[pos] / M.sum() - f[pos] / f.sum()) / (f[pos] / f.sum()))) if pos.any() else 0.0


def _rank_start(k: int) -> int:
    """0 when F_{k-1} / F_k < 1 / phi, else 1 (exact integer test: 5 F_k^2 > (2 F_{k-1} + F_k)^2)."""
    a, b = fibonacci(k - 1), fibonacci(k)
    return 0 if 5 * b * b > (2 * a + b) ** 2 else 1


def golden_template(counts: ArrayLike, *, one_based: bool = True) -> NDArray[np.int64]:
    """The cycle of gamma(k, N): page numbers (0-based) in access order, of length F = sum(counts).

    Parameters
    ----------
    counts : array_like of int
        M_i, accesses of page i per cycle; the sum must be a Fibonacci number F_k.
    one_based : bool
        Index the points frac(j / phi) by j = 1..F (True; gives the paper's printed example exactly)
        or j = 0..F-1 (the paper's formula; the same cycle, rotated).

    Examples
    --------
    The paper's example, f = (2, 3, 3, 5) / 13 (pages numbered from 1 here):

    >>> (golden_template([2, 3, 3, 5]) + 1).tolist()
    [4, 2, 4, 1, 3, 4, 2, 4, 1, 3, 4, 2, 3]
    """
    M = np.asarray(counts, dtype=np.int64)
    if M.ndim != 1 or M.size == 0 or np.any(M < 0):
        raise InputError("counts", "must be a non-empty list of whole numbers >= 0", "e.g. [2, 3, 3, 5]")
    F = int(M.sum())
    k = next((kk for kk, Fk in fibonacci_lengths(F, F)), None)
    if k is None:
        raise InputError("counts", f"sum to {F}, which is not a Fibonacci number",
                         "use golden_counts(frequencies, F_k)")
    if F == 1:
        return np.flatnonzero(M).astype(np.int64)
    owner = np.repeat(np.arange(M.size, dtype=np.int64), M)
    j = np.arange(1, F + 1, dtype=np.int64) if one_based else np.arange(F, dtype=np.int64)
    rank = (j * fibonacci(k - 1)) % F
    start = _rank_start(k) if one_based else 0  # j = 0 sits exactly at 0, the smallest point
    out = np.empty(F, dtype=np.int64)
    out[(rank - start) % F] = owner
    return out


def weighted_template(counts: ArrayLike) -> NDArray[np.int64]:
    """A weighted round robin (stride) cycle with the same counts: page i's m-th access is placed at
    the ideal time (m + 1/2) F / M_i, and accesses go in order of their ideal times (ties: lower page
    first). Evenly spaced per page, but pages with close ideal times crowd each other; the comparator
    for the golden-ratio cycle (``--policy weighted``)."""
    M = np.asarray(counts, dtype=np.int64)
    F = int(M.sum())
    owner = np.repeat(np.arange(M.size, dtype=np.int64), M)
    starts = np.cumsum(M) - M
    m = np.arange(F, dtype=np.int64) - np.repeat(starts, M)
    ideal = (m + 0.5) * F / np.repeat(M, M).astype(float)
    return owner[np.lexsort((owner, ideal))]


def golden_gap_index(frequencies: ArrayLike) -> NDArray[np.int64]:
    """The corrected j_i = ceil(log_phi(1 / f_i)) (module docstring), for f_i in (0, 1]."""
    f = np.asarray(frequencies, dtype=float)
    if np.any(f <= 0) or np.any(f > 1):
        raise InputError("frequencies", "must lie in (0, 1]", "give access frequencies summing to one")
    j = np.ceil(np.log(1.0 / f) / math.log(PHI) - 1e-12).astype(np.int64)
    return np.maximum(j, 1)


def golden_densities(frequencies: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """j_i and the densities per slot of page i's three distances F_{j_i}, F_{j_i+1}, F_{j_i+2} in the
    limit k -> infinity: columns f - phi^{-j}, f - phi^{-j-1}, phi^{-j+1} - f."""
    f = np.asarray(frequencies, dtype=float)
    j = golden_gap_index(f)
    p = PHI ** (-j.astype(float))
    dens = np.stack([f - p, f - p / PHI, p * PHI - f], axis=1)
    return j, np.clip(dens, 0.0, None)


def golden_limit_cost(frequencies: ArrayLike, h: ArrayLike, weights_over_rates: float, mean_fetch_s: float,
                      total_rate: float) -> float:
    """C(gamma(N)) = lim_k C(gamma(k, N)) for weights c_i = c_0 mu_i (paper 002, Section 5, with the
    corrected index and densities of the module docstring):

        c_0 mu - (c_0 / E[X]) sum_i sum_{t=0,1,2} density_{i,t} (1 - h_i^{F_{j_i + t}}).

    ``weights_over_rates`` is c_0 and ``total_rate`` is mu = sum mu_i.
    """
    hh = np.asarray(h, dtype=float)
    j, dens = golden_densities(frequencies)
    fib = np.array([[fibonacci(int(jj) + t) for t in range(3)] for jj in j], dtype=float)
    saved = float(np.sum(dens * (1.0 - hh[:, None] ** fib)))
    return weights_over_rates * (total_rate - saved / mean_fetch_s)


def golden_asymptotic_ratio(q: ArrayLike) -> NDArray[np.float64]:
    """H(q) of Corollary 5.1: the paper's bound (18) on lim sup C(gamma(N)) over the lower bound (17) as N
    grows with mu = sum mu_i fixed and q = mu E[X],

        H(q) = (q - 1 + (1 - 1/phi) e^{-phi q / sqrt 5} + (1/phi) e^{-phi^2 q / sqrt 5}) / (q - 1 + e^{-q}),

    decreasing from 2 phi^2 / 5 at q -> 0. It equals :func:`golden_limit_ratio` at s = 0 (frequencies that
    are powers of 1/phi), which is how it is computed (the series limit avoids the cancellation at small q).
    """
    return golden_limit_ratio(0.0, q)


def golden_limit_ratio(s: ArrayLike, q: ArrayLike) -> NDArray[np.float64]:
    """R(s, q): lim C(gamma(N)) / C* as N grows for pages whose frequencies all sit at the same position
    s = j_i + log_phi f_i in [0, 1) between powers of 1/phi (equal change rates, for instance), with
    q = mu E[X] and weights c_i = c_0 mu_i:

        R(s, q) = (q - sum_t d_t(s) (1 - exp(-q g_t(s)))) / (q - 1 + exp(-q)),
        d(s) = (1 - phi^{-s}, 1 - phi^{-s-1}, phi^{1-s} - 1),   g_t(s) = phi^{t+s} / sqrt 5,

    the densities of the three distances per access and the distances times f_i (module docstring),
    since mu_i E[X] F_{j_i+t} -> q f_i F_{j_i+t} -> q g_t(s_i) when mu_i -> 0. As q -> 0 it tends to
    sum_t d_t g_t^2. The paper's H(q) (Corollary 5.1) is R(0, q).
    """
    ss, qq = np.broadcast_arrays(np.asarray(s, dtype=float), np.asarray(q, dtype=float))
    d = np.stack([1 - PHI**-ss, 1 - PHI ** (-ss - 1), PHI ** (1 - ss) - 1])
    g = np.stack([PHI ** (t + ss) / math.sqrt(5.0) for t in range(3)])
    small = qq < 1e-5
    qs = np.where(small, 1.0, qq)
    exact = (qs - np.sum(d * -np.expm1(-qs * g), axis=0)) / (qs - 1 + np.exp(-qs))
    return np.asarray(np.where(small, np.sum(d * g**2, axis=0), exact))


def golden_worst_ratio(q: float) -> tuple[float, float]:
    """(max over s of R(s, q), the maximising s): the asymptotic worst case of C(gamma(N)) / C* over
    all frequency vectors, since C(gamma(N)) / C* -> (q - sum_i f_i S(s_i, q)) / (q - 1 + e^{-q}) is an
    average of R(s_i, q). It exceeds the paper's 2 phi^2 / 5 (about 1.047) for q below about 1.2 and
    tends to 4/5 + 1/(2 phi) = (11 + 5 sqrt 5) / 20 = 1.1090 as q -> 0 (at s = 0.56)."""
    grid = np.linspace(0.0, 1.0, 2001)[:-1]
    r = golden_limit_ratio(grid, q)
    k = int(np.argmax(r))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]
    from scipy.optimize import minimize_scalar  # imported where used: scipy.optimize costs 0.4-0.8 s
    res = minimize_scalar(lambda x: -float(golden_limit_ratio(x, q)), bounds=(lo, hi), method="bounded",
                          options={"xatol": 1e-10})
    best_s = float(res.x) if -res.fun >= r[k] else float(grid[k])
    return float(golden_limit_ratio(best_s, q)), best_s


#: 2 phi^2 / 5 = (3 + sqrt 5) / 5, the bound of Corollary 5.1 (eq. 19); it holds for frequencies that
#: are powers of 1/phi (s = 0) but not in general (:func:`golden_worst_ratio`).
GOLDEN_RATIO_BOUND = 2 * PHI**2 / 5

__all__ = ["GOLDEN_RATIO_BOUND", "PHI", "fibonacci", "fibonacci_lengths", "golden_asymptotic_ratio", "golden_counts",
           "golden_densities", "golden_gap_index", "golden_limit_cost", "golden_limit_ratio", "golden_template",
           "golden_worst_ratio", "rounding_error", "weighted_template"]
