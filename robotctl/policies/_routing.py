"""Open-loop routing to M parallel servers without buffers (paper 003).

Packets (fetched pages) arrive at the epochs of a stationary process; each is sent to one of M servers
(indexer shards, per-host fetch slots) without any knowledge of their state, only of where earlier
packets went. A packet sent to a busy server preempts (loses) the one in service. With exponential
service of rate mu_m at server m, a packet sent to m, n arrivals after the previous one sent there,
causes a loss with probability

    f_m(n) = P(S_m >= tau_1 + ... + tau_n) = E exp(-mu_m sum_{k<=n} tau_k)
           = (lambda / (lambda + mu_m))^n                 (Poisson input, Example 2.1)
           = q [(mu_m I - C)^{-1} D]^n e                  (MAP (C, D) input, and MMPP with C = Q - L,
                                                           D = L; Lemma 5.2 with the factor D restored)

and a periodic routing sequence pi of period n has the average cost (eq. 6, the fraction of packets lost)

    g(pi) = (1/n) sum_m sum_j f_m(delta_j^m),

delta^m being the cyclic distances between consecutive packets sent to m. A server that the period
never uses adds its cost per arrival in the limit, lim f_m(x) / x (0 for losses).

Methods (:func:`optimal_routing`):

``local`` (M = 2)
    For each period n <= P, the multimodular local search of Theorem 4.2 on {1, 2}^n (g is
    multimodular for convex f_m, Theorem 4.4); the best over n. Exact over periods <= P. Each step
    scans 2^{n+1} - 2 neighbours, so P is kept to about 20.
``enumerate``
    Every sequence of period <= P (M^P of them): exact over periods <= P; the independent check.
``mdp`` (any M)
    The finite deterministic MDP of Section 3: states x in {1..B}^M (arrivals since the last packet
    sent to each server), action a costs f_a(x_a), and every server must be used at least once in any
    B consecutive arrivals (the distances are bounded by B = P). The minimum mean cycle
    (:func:`._mincycle.min_mean_cycle`) is the optimal periodic policy among all policies with
    distances <= B; its period can exceed P, and it is at least as good as every sequence of period <= P
    that uses all servers. Limits: the states are the injective x with one entry 1, about
    M (B-1)! / (B-M)! of them (B = 20: 38 for M = 2, 1,026 for M = 3, 23,256 for M = 4, 465,120 for
    M = 5), each with M actions; beyond a few hundred thousand states it is too slow and too big.
    Certificate: when f_m - a_m x - C is positive, decreasing and strictly convex (Condition 3; losses
    have a_m = C = 0) the proof of Theorem 3.1 bounds the distances of some optimal policy by
    B* = 2 n + 2M + 1, with p = min over m and k <= 2M + 1 of f_m(k) - f_m(k + 1) and n the first
    integer with 2 max_m f_m(n) < p; with B >= B* the result is optimal over all open-loop policies.
    ``certified_bound`` reports B*.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from robotctl.model import BMAP, InputError

from ._fetch import map_power_sums, map_transform
from ._mincycle import min_mean_cycle
from ._multimodular import local_search

ROUTING_METHODS = ("auto", "local", "enumerate", "mdp")

#: ``enumerate`` refuses more sequences than this.
ENUMERATE_LIMIT = 1 << 22
#: ``mdp`` refuses more states than this.
MDP_STATE_LIMIT = 600_000
#: ``local`` refuses periods longer than this (2^{P+1} neighbours per step).
LOCAL_PERIOD_LIMIT = 22


@dataclass(frozen=True, eq=False)
class ServerCosts:
    """The costs f_m(n), n = 1..n_max, of sending a packet to server m that was last used n arrivals ago.

    Attributes
    ----------
    table : ndarray, shape (M, n_max + 1)
        table[m, n] = f_m(n) (column 0 unused).
    slopes : ndarray, shape (M,)
        lim f_m(x) / x: the cost per arrival of a server that is never used (0 for losses, inf for
        costs that grow faster than linearly).
    """

    table: NDArray[np.float64]
    slopes: NDArray[np.float64]

    def __post_init__(self) -> None:
        self.table.flags.writeable = False
        self.slopes.flags.writeable = False

    @property
    def servers(self) -> int:
        return int(self.table.shape[0])

    @property
    def n_max(self) -> int:
        return int(self.table.shape[1] - 1)

    @classmethod
    def from_functions(cls, functions: Sequence[Callable[[NDArray[np.int64]], ArrayLike]], n_max: int,
                       slopes: ArrayLike | None = None) -> ServerCosts:
        """From vectorised functions f_m(n) (tests: random convex costs)."""
        n = np.arange(n_max + 1)
        table = np.array([np.asarray(f(n), dtype=float) for f in functions])
        table[:, 0] = np.nan
        sl = np.zeros(len(functions)) if slopes is None else np.asarray(slopes, dtype=float)
        return cls(table, sl)

    @classmethod
    def losses(cls, arrivals: BMAP, service_rates: ArrayLike, n_max: int) -> ServerCosts:
        """f_m(n) = E exp(-mu_m sum_{k<=n} tau_k) for a MAP (order 1: Poisson) and exponential servers."""
        mu = check_service_rates(service_rates)
        n = np.arange(n_max + 1)
        rows = []
        for m in mu:
            q, P = map_transform(arrivals, float(m))
            rows.append(map_power_sums(q, P, n))
        table = np.array(rows)
        table[:, 0] = np.nan
        return cls(table, np.zeros(mu.size))


def check_service_rates(service_rates: ArrayLike) -> NDArray[np.float64]:
    try:
        mu = np.array(service_rates, dtype=float).ravel()
    except (TypeError, ValueError) as exc:
        raise InputError("service_rates", f"are not numbers ({exc})", "e.g. 1,5") from exc
    if mu.size < 1:
        raise InputError("service_rates", "are empty", "give one rate per server, e.g. 1,5")
    bad = ~(np.isfinite(mu) & (mu > 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"service_rates[{i}]", f"is {mu[i]!r}", "service rates are positive numbers per second")
    return mu


def sequence_costs(sequences: ArrayLike, costs: ServerCosts) -> NDArray[np.float64]:
    """g(pi) of eq. (6) for each row of ``sequences`` (server numbers 0..M-1, one period per row)."""
    seq = np.atleast_2d(np.asarray(sequences, dtype=np.int64))
    S, n = seq.shape
    if n > costs.n_max:
        raise InputError("sequences", f"have period {n}, longer than the cost table ({costs.n_max})",
                         "build ServerCosts with a larger n_max")
    total = np.zeros(S)
    pos = np.arange(2 * n)
    big = 4 * n
    for m in range(costs.servers):
        hit = np.concatenate([seq, seq], axis=1) == m
        idx = np.where(hit, pos, big)
        # next occurrence strictly after i: the running minimum from the right, shifted by one
        nxt = np.minimum.accumulate(idx[:, ::-1], axis=1)[:, ::-1]
        after = np.concatenate([nxt[:, 1:], np.full((S, 1), big)], axis=1)[:, :n]
        used = hit[:, :n]
        dist = np.where(used, after - pos[:n], 1)
        vals = np.where(used, costs.table[m][np.minimum(dist, costs.n_max)], 0.0)
        never = ~used.any(axis=1)
        total += vals.sum(axis=1) + np.where(never, costs.slopes[m] * n, 0.0)
    return total / n


def primitive(sequence: Sequence[int]) -> tuple[int, ...]:
    """The shortest period of a cyclic sequence, rotated to its lexicographically smallest form."""
    s = list(sequence)
    n = len(s)
    for p in range(1, n + 1):
        if n % p == 0 and s == s[:p] * (n // p):
            s = s[:p]
            break
    rotations = [tuple(s[i:] + s[:i]) for i in range(len(s))]
    return min(rotations)


class RoutingStatus(enum.Enum):
    """How far the routing result is known to be optimal."""

    #: optimal over the class searched (periods <= P, or distances <= B)
    OPTIMAL = 0
    #: optimal over all open-loop policies (the MDP's distance bound is at least the certificate B*)
    CERTIFIED = 1
    #: Howard's iteration hit its limit: the value is an upper bound
    NOT_CONVERGED = 2
    #: every sequence searched has infinite cost (a server whose cost grows faster than linearly is
    #: left unused by every period searched): allow longer periods
    NO_FINITE_COST = 3


@dataclass(frozen=True)
class RoutingResult:
    """The best periodic routing sequence found.

    Attributes
    ----------
    success : bool
    status : RoutingStatus
    message : str
    sequence : tuple of int
        One period, server numbers 0-based, primitive and rotated to its smallest form.
    cost : float
        g(pi), eq. (6): the fraction of packets lost (losses per arrival).
    method : str
    max_period : int
        P (for ``mdp``: the distance bound B).
    certified_bound : int or None
        B* of the module docstring, when the costs satisfy Condition (3).
    by_period : tuple of (int, float)
        For ``local`` and ``enumerate``: the best cost of each period n <= P.
    evaluations : int
        Sequences (or states) evaluated.
    """

    success: bool
    status: RoutingStatus
    message: str
    sequence: tuple[int, ...]
    cost: float
    method: str
    max_period: int
    certified_bound: int | None = None
    by_period: tuple[tuple[int, float], ...] = field(default=())
    evaluations: int = 0

    def to_dict(self, arrival_rate: float | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"success": self.success, "status": self.status.name.lower(), "message": self.message,
                             "sequence": [s + 1 for s in self.sequence], "cost": self.cost,
                             "period": len(self.sequence), "method": self.method, "max_period": self.max_period,
                             "certified_bound": self.certified_bound,
                             "by_period": [{"period": n, "cost": c} for n, c in self.by_period]}
        if arrival_rate is not None:
            d["loss_rate_per_s"] = self.cost * arrival_rate
        return d


def certified_distance_bound(costs_at: Callable[[int], NDArray[np.float64]], servers: int, *,
                             n_limit: int = 100_000) -> int | None:
    """B* = 2 n + 2M + 1 from the proof of Theorem 3.1 under Condition (3) with a_m = C = 0 (module
    docstring), or None when p <= 0 or no n <= ``n_limit`` works. ``costs_at(n)`` gives f_m(n) for all m."""
    K = 2 * servers + 1
    p = float(np.min(costs_at(K) - costs_at(K + 1)))
    for k in range(1, K):
        p = min(p, float(np.min(costs_at(k) - costs_at(k + 1))))
    if not p > 0:
        return None
    n = 1
    while 2.0 * float(np.max(costs_at(n))) >= p:
        n *= 2
        if n > n_limit:
            return None
    lo, hi = n // 2, n
    while hi - lo > 1:  # the first n with 2 max f(n) < p (f decreasing)
        mid = (lo + hi) // 2
        if 2.0 * float(np.max(costs_at(mid))) < p:
            hi = mid
        else:
            lo = mid
    return 2 * hi + 2 * servers + 1


def _all_sequences(M: int, n: int, chunk: int = 1 << 16) -> Any:
    total = M**n
    powers = M ** np.arange(n - 1, -1, -1, dtype=np.int64)
    for a in range(0, total, chunk):
        codes = np.arange(a, min(total, a + chunk), dtype=np.int64)
        yield (codes[:, None] // powers) % M


def _infinite(method: str, P: int, by_period: list[tuple[int, float]], evals: int) -> RoutingResult:
    return RoutingResult(False, RoutingStatus.NO_FINITE_COST, f"no sequence of period <= {P} has a finite cost",
                         (), math.inf, method, P, by_period=tuple(by_period), evaluations=evals)


def _enumerate(costs: ServerCosts, P: int) -> RoutingResult:
    M = costs.servers
    if sum(M**n for n in range(1, P + 1)) > ENUMERATE_LIMIT:
        raise InputError("max_period", f"is {P}: {M}^{P} sequences are too many to enumerate",
                         "lower it, or use method mdp (or local for 2 servers)")
    best: tuple[float, tuple[int, ...]] = (math.inf, ())
    by_period = []
    evals = 0
    for n in range(1, P + 1):
        bn: tuple[float, tuple[int, ...]] = (math.inf, ())
        for block in _all_sequences(M, n):
            vals = sequence_costs(block, costs)
            evals += vals.size
            k = int(np.argmin(vals))
            if vals[k] < bn[0] - 1e-15:
                bn = (float(vals[k]), tuple(int(v) for v in block[k]))
        by_period.append((n, bn[0]))
        if bn[0] < best[0] - 1e-13:
            best = bn
    if not math.isfinite(best[0]):
        return _infinite("enumerate", P, by_period, evals)
    return RoutingResult(True, RoutingStatus.OPTIMAL, f"every sequence of period <= {P}", primitive(best[1]),
                         best[0], "enumerate", P, by_period=tuple(by_period), evaluations=evals)


def _local(costs: ServerCosts, P: int) -> RoutingResult:
    if costs.servers != 2:
        raise InputError("method", f"local needs 2 servers, got {costs.servers}", "use mdp (or enumerate)")
    if P > LOCAL_PERIOD_LIMIT:
        raise InputError("max_period", f"is {P}: the local search scans 2^(P+1) neighbours per step",
                         f"use at most {LOCAL_PERIOD_LIMIT}, or method mdp")

    def g(points: NDArray[np.int64]) -> NDArray[np.float64]:
        return sequence_costs(points - 1, costs)

    best: tuple[float, tuple[int, ...]] = (math.inf, ())
    by_period = []
    evals = 0
    fast = int(np.argmin(costs.table[:, 1]))  # the smaller loss at distance 1: the faster server
    for n in range(1, P + 1):
        x0 = np.full(n, fast + 1, dtype=np.int64)
        x0[0] = 2 - fast  # start from (slower, faster, ..., faster); any start reaches the optimum
        res = local_search(g, x0, 1, 2)
        evals += res.evaluations
        by_period.append((n, res.value))
        if res.value < best[0] - 1e-13:
            best = (res.value, tuple(v - 1 for v in res.x))
    if not math.isfinite(best[0]):
        return _infinite("local", P, by_period, evals)
    return RoutingResult(True, RoutingStatus.OPTIMAL,
                         f"multimodular local search (Theorem 4.2) for every period <= {P}", primitive(best[1]),
                         best[0], "local", P, by_period=tuple(by_period), evaluations=evals)


def mdp_state_count(servers: int, bound: int) -> int:
    """States of the bounded MDP: M (B-1)! / (B-M)!."""
    if bound < servers:
        return 0
    return servers * math.perm(bound - 1, servers - 1)


def _mdp(costs: ServerCosts, B: int, certified: int | None) -> RoutingResult:
    M = costs.servers
    if B < M:
        raise InputError("max_period", f"is {B}, less than the {M} servers", f"use at least {M}")
    count = mdp_state_count(M, B)
    if count > MDP_STATE_LIMIT:
        raise InputError("max_period", f"is {B}: the MDP has {count} states for {M} servers (limit "
                         f"{MDP_STATE_LIMIT})", "lower the distance bound")
    start = tuple(range(M, 0, -1))
    index = {start: 0}
    states = [start]
    succ_rows: list[list[int]] = []
    cost_rows: list[list[float]] = []
    i = 0
    table = costs.table
    while i < len(states):
        x = states[i]
        srow, crow = [], []
        for a in range(M):
            if max((x[m] for m in range(M) if m != a), default=0) + 1 > B:
                srow.append(-1)
                crow.append(math.inf)
                continue
            y = tuple(1 if m == a else x[m] + 1 for m in range(M))
            j = index.get(y)
            if j is None:
                j = index[y] = len(states)
                states.append(y)
            srow.append(j)
            crow.append(float(table[a, x[a]]))
        succ_rows.append(srow)
        cost_rows.append(crow)
        i += 1
    res = min_mean_cycle(np.array(succ_rows, dtype=np.int64), np.array(cost_rows), 0)
    status = RoutingStatus.OPTIMAL
    message = f"minimum mean cycle of the MDP with distances <= {B} ({len(states)} states)"
    if not res.converged:
        status, message = RoutingStatus.NOT_CONVERGED, message + "; Howard's iteration did not converge"
    elif certified is not None and certified <= B:
        status = RoutingStatus.CERTIFIED
        message += f"; optimal over all open-loop policies (B >= B* = {certified})"
    elif certified is not None:
        message += f"; optimal over all open-loop policies once the bound is >= B* = {certified}"
    return RoutingResult(res.converged, status, message, primitive(res.actions), res.value, "mdp", B,
                         certified_bound=certified, evaluations=len(states) * M)


def optimal_routing(costs: ServerCosts, *, max_period: int = 12, method: str = "auto",
                    certified_bound: int | None = None) -> RoutingResult:
    """The periodic routing sequence minimising g (eq. 6) by ``method`` (module docstring).

    ``auto`` is ``local`` for 2 servers and ``mdp`` otherwise. ``certified_bound`` is B* for ``mdp``
    (see :func:`certified_distance_bound`). ``costs`` must cover distances up to ``max_period``.
    """
    if method not in ROUTING_METHODS:
        raise InputError("method", f"is {method!r}", f"use one of: {', '.join(ROUTING_METHODS)}")
    if max_period < 1:
        raise InputError("max_period", f"is {max_period}", "use a period of at least 1")
    if costs.n_max < max_period:
        raise InputError("costs", f"cover distances up to {costs.n_max} < max_period {max_period}",
                         "build ServerCosts with n_max >= max_period")
    if method == "auto":
        method = "local" if costs.servers == 2 else "mdp"
    if method == "local":
        return _local(costs, max_period)
    if method == "enumerate":
        return _enumerate(costs, max_period)
    return _mdp(costs, max_period, certified_bound)


def route(arrivals: BMAP, service_rates: ArrayLike, *, max_period: int = 12, method: str = "auto",
          certify: bool = False) -> RoutingResult:
    """Open-loop routing of a MAP (or Poisson, order 1) stream to exponential bufferless servers:
    the periodic sequence minimising the fraction of packets lost (eq. 6).

    With ``certify`` (method ``mdp``) the distance bound is raised to the certificate B* when it is
    larger than ``max_period`` and the MDP stays within :data:`MDP_STATE_LIMIT` states, so that the result
    is optimal over all open-loop policies.

    Examples
    --------
    Poisson arrivals at rate 1 to exponential servers of rates 1 and 5 (numbered from 1 here):

    >>> res = route(BMAP.poisson(1.0), [1.0, 5.0])
    >>> [s + 1 for s in res.sequence], round(res.cost, 4)
    ([1, 2, 2, 2], 0.1059)
    """
    mu = check_service_rates(service_rates)
    if arrivals.max_batch != 1:
        raise InputError("arrivals", f"has batches up to {arrivals.max_batch}", "give a MAP: D0 and D1 only")
    certified = None
    chosen = method if method != "auto" else ("local" if mu.size == 2 else "mdp")
    if chosen == "mdp":
        qP = [map_transform(arrivals, float(m)) for m in mu]

        def at(n: int) -> NDArray[np.float64]:
            return np.array([float(map_power_sums(q, P, [n])[0]) for q, P in qP])

        certified = certified_distance_bound(at, mu.size)
        if certify and certified is not None and certified > max_period:
            if mdp_state_count(mu.size, certified) > MDP_STATE_LIMIT:
                raise InputError("certify", f"needs the distance bound B* = {certified}: "
                                 f"{mdp_state_count(mu.size, certified)} states", "drop --certify")
            max_period = certified
    elif certify:
        raise InputError("certify", f"applies to method mdp, not {chosen}", "add --method mdp")
    costs = ServerCosts.losses(arrivals, mu, max_period)
    return optimal_routing(costs, max_period=max_period, method=chosen, certified_bound=certified)


def switch_rate(arrival_rate: float, slow_rate: float, period: int) -> float:
    """Paper 003, Section 5 (Poisson input, two exponential servers): the rate mu_2 of the faster
    server at which the best sequence of the form (1, 2, ..., 2) changes from period n to n + 1, the
    root of g(n, mu_2) = g(n + 1, mu_2) with
    g(n, mu_2) = (1/n) a_1^n + (1/n) a_2^2 + ((n - 2)/n) a_2, a_m = lambda / (lambda + mu_m)."""
    if period < 2:
        raise InputError("period", f"is {period}", "periods of the form (1, 2, ..., 2) start at 2")
    a1 = arrival_rate / (arrival_rate + slow_rate)

    def g(n: int, mu2: float) -> float:
        a2 = arrival_rate / (arrival_rate + mu2)
        return (a1**n + a2**2 + (n - 2) * a2) / n

    def diff(log_mu2: float) -> float:
        mu2 = math.exp(log_mu2)
        return g(period, mu2) - g(period + 1, mu2)

    lo, hi = math.log(slow_rate), math.log(slow_rate) + 1.0
    while diff(hi) <= 0:
        hi += 1.0
        if hi > 200:  # pragma: no cover - g(n) - g(n+1) -> a_1^n/n - a_1^(n+1)/(n+1) > 0 as mu_2 grows
            raise InputError("period", f"{period}: no switch found", "")
    from scipy.optimize import brentq  # imported where used: scipy.optimize costs 0.4-0.8 s
    return float(math.exp(brentq(diff, lo, hi, xtol=1e-14)))


__all__ = ["ENUMERATE_LIMIT", "LOCAL_PERIOD_LIMIT", "MDP_STATE_LIMIT", "ROUTING_METHODS", "RoutingResult",
           "RoutingStatus", "ServerCosts", "certified_distance_bound", "check_service_rates", "mdp_state_count",
           "optimal_routing", "primitive", "route", "sequence_costs", "switch_rate"]
