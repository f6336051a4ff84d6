"""An independent brute-force route for :func:`model.solve_buffer`, for tests.

The extension of :mod:`model._bruteforce` to buffer policies. It enumerates the states
(i, nu, m, r_1..r_{i-1}) one by one, writes every transition by hand from the description of the
mechanisms (timers, stale marks, renovation's two options applied to J page by page, RED thinning
each page of a batch) -- not through the Kronecker blocks nor through :meth:`Renovation.drop_law` --
solves p Q = 0, p e = 1 by sparse LU, sums each measure over the states, and finds the response time
of served pages by Little's law on an explicitly enumerated tagged chain (state, position of the
tagged page). Nothing here imports :mod:`model._buffer_solve`'s assembly.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import defaultdict
from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from ._buffer import BufferPolicy, Conflict, Renovation
from ._buffer_solve import BufferMeasures, BufferSolution, BufferStatus
from ._model import QueueModel
from ._policy import ThresholdPolicy

State = tuple[int, int, int, tuple[int, ...]]  # (i, nu, m, (r_1..r_{i-1})); m = -1 when empty


def _removed(renovation: Renovation | None, waiting: int) -> Iterator[tuple[int, float]]:
    """(pages removed, probability) for each value of J, by the rules of paper 004, Section 1."""
    if renovation is None or waiting == 0:
        yield 0, 1.0
        return
    for drawn, prob in enumerate(renovation.q):
        if prob == 0.0:
            continue
        if drawn < waiting:
            yield drawn, prob
        elif renovation.conflict is Conflict.KEEP_ONE:
            yield waiting - 1, prob  # Option 1: all but the last waiting page
        else:
            yield 0, prob  # Option 2: nothing


def _thinned(k: int, d: float) -> Iterator[tuple[int, float]]:
    """(pages kept, probability) when each of k pages is dropped with probability d, page by page."""
    for drops in itertools.product((False, True), repeat=k):
        prob = math.prod(d if x else 1.0 - d for x in drops)
        if prob > 0.0:
            yield k - sum(drops), prob


class _Chain:
    """The states and a transition writer shared by the stationary chain and the tagged chain."""

    def __init__(self, model: QueueModel, policy: ThresholdPolicy, buffer: BufferPolicy) -> None:
        model.check_policy(policy)
        buffer.check_capacity(model.capacity)
        self.model, self.policy, self.buffer = model, policy, buffer
        self.beta = np.asarray(model.service.beta)
        self.S = np.asarray(model.service.S)
        self.S0 = -self.S.sum(axis=1)
        obs = model.obsolescence
        self.gamma = np.ones(1) if obs is None else np.asarray(obs.beta)
        self.Gamma = np.zeros((1, 1)) if obs is None else np.asarray(obs.S)
        self.Gamma0 = -self.Gamma.sum(axis=1)
        self.R = self.gamma.size
        self.marks = obs is not None and not buffer.timers  # stale pages stay, marked with phase R
        self.STALE = self.R
        rho = self.R + 1 if self.marks else self.R
        K, W, M = model.capacity, model.arrivals.order, self.beta.size
        self.states: list[State] = [(0, nu, -1, ()) for nu in range(W)]
        for i in range(1, K + 1):
            for nu in range(W):
                for m in range(M):
                    for rs in itertools.product(range(rho), repeat=i - 1):
                        self.states.append((i, nu, m, rs))
        self.index = {s: n for n, s in enumerate(self.states)}

    def transitions(self, s: State) -> Iterator[tuple[str, State, float, dict[str, object]]]:
        """(kind, next state, rate, details) for every transition out of s."""
        i, nu, m, rs = s
        model, K = self.model, self.model.capacity
        bmap = model.arrivals[self.policy.robots_at_level[i]]
        red = self.buffer.red
        d = red.probabilities[i] if red is not None and i < K else 0.0
        for nu2 in range(bmap.order):
            if nu2 != nu and bmap.D[0][nu, nu2] > 0:
                yield "phase", (i, nu2, m, rs), float(bmap.D[0][nu, nu2]), {}
        for k in range(1, bmap.max_batch + 1):
            for nu2 in range(bmap.order):
                rate = bmap.D[k][nu, nu2]
                if rate <= 0:
                    continue
                for kept, pk in _thinned(k, d):
                    a = model.admission.admitted(kept, K - i)
                    info: dict[str, object] = {"offered": k, "red": k - kept, "blocked": kept - a}
                    if a == 0:
                        yield "arrival", (i, nu2, m, rs), rate * pk, info
                    elif i == 0:
                        for m2 in range(self.beta.size):
                            for new in itertools.product(range(self.R), repeat=a - 1):
                                p = self.beta[m2] * math.prod(self.gamma[x] for x in new)
                                yield "arrival", (a, nu2, m2, new), rate * pk * p, info
                    else:
                        for new in itertools.product(range(self.R), repeat=a):
                            p = math.prod(self.gamma[x] for x in new)
                            yield "arrival", (i + a, nu2, m, rs + new), rate * pk * p, info
        if i == 0:
            return
        for m2 in range(self.beta.size):
            if m2 != m and self.S[m, m2] > 0:
                yield "phase", (i, nu, m2, rs), self.S[m, m2], {}
        # completion, then renovation on the w = i - 1 waiting pages
        w = i - 1
        for removed, pj in _removed(self.buffer.renovation, w):
            done: dict[str, object] = {"removed": removed,
                                       "stale_removed": sum(1 for r in rs[:removed] if r == self.STALE)}
            if w == 0:
                yield "completion", (0, nu, -1, ()), self.S0[m] * pj, done
                continue
            done["stale_head"] = rs[removed] == self.STALE
            rest = rs[removed + 1:]
            for m2 in range(self.beta.size):
                yield "completion", (i - 1 - removed, nu, m2, rest), self.S0[m] * pj * self.beta[m2], done
        # each waiting page's useful life
        for q, r in enumerate(rs):
            if r == self.STALE:
                continue
            for r2 in range(self.R):
                if r2 != r and self.Gamma[r, r2] > 0:
                    yield "phase", (i, nu, m, (*rs[:q], r2, *rs[q + 1:])), self.Gamma[r, r2], {}
            if self.Gamma0[r] > 0:
                if self.marks:
                    yield "phase", (i, nu, m, (*rs[:q], self.STALE, *rs[q + 1:])), self.Gamma0[r], {}
                elif self.buffer.timers:
                    yield "expiry", (i - 1, nu, m, rs[:q] + rs[q + 1:]), self.Gamma0[r], {"position": q + 1}


def _generator(chain: _Chain) -> sp.csr_matrix:
    rates: dict[tuple[int, int], float] = defaultdict(float)
    for s in chain.states:
        for _, dst, rate, _ in chain.transitions(s):
            if dst != s:
                rates[chain.index[s], chain.index[dst]] += rate
    n = len(chain.states)
    rows, cols = zip(*rates.keys())
    Q = sp.csr_matrix((list(rates.values()), (rows, cols)), shape=(n, n))
    return sp.csr_matrix(Q - sp.diags(np.asarray(Q.sum(axis=1)).ravel()))


def _fates(chain: _Chain) -> tuple[dict[tuple[State, int], float], dict[tuple[State, int], float]]:
    """P(served) and P(expired) for the page at position p (0 in service, 1..i-1 waiting) of each
    state, by first-step equations on the explicit tagged chain."""
    tagged = [(s, p) for s in chain.states for p in range(s[0])]
    pos = {t: n for n, t in enumerate(tagged)}
    n = len(tagged)
    rates: dict[tuple[int, int], float] = defaultdict(float)
    served, expired = np.zeros(n), np.zeros(n)
    for (s, p) in tagged:
        a = pos[s, p]
        for kind, dst, rate, info in chain.transitions(s):
            rates[a, a] -= rate
            if kind == "completion":
                removed = int(info["removed"])  # type: ignore[call-overload]
                if p == 0:
                    served[a] += rate
                    continue
                if p <= removed:
                    continue  # removed by renovation
                p2 = p - removed - 1
            elif kind == "expiry":
                q = int(info["position"])  # type: ignore[call-overload]
                if q == p:
                    expired[a] += rate
                    continue
                p2 = p - 1 if q < p else p
            else:
                p2 = p
            rates[a, pos[dst, p2]] += rate
    rows, cols = zip(*rates.keys())
    T = sp.csc_matrix((list(rates.values()), (rows, cols)), shape=(n, n))
    lu = spla.splu(sp.csc_matrix(-T))
    hs, he = lu.solve(served), lu.solve(expired)
    return ({t: float(hs[pos[t]]) for t in tagged}, {t: float(he[pos[t]]) for t in tagged})


def solve_buffer_bruteforce(model: QueueModel, policy: ThresholdPolicy, buffer: BufferPolicy) -> BufferSolution:
    """Stationary distribution and measures under a buffer policy by explicit enumeration (see the
    module docstring). For small models only."""
    start = time.perf_counter()
    chain = _Chain(model, policy, buffer)
    Q = _generator(chain)
    n = len(chain.states)
    A = sp.lil_matrix(Q.T)
    A[0, :] = np.ones(n)
    rhs = np.zeros(n)
    rhs[0] = 1.0
    pi = spla.spsolve(sp.csc_matrix(A), rhs)
    residual = float(np.abs(Q.T @ pi).max())
    will_serve_at, will_expire_at = _fates(chain)
    K = model.capacity
    level = np.zeros(K + 1)
    totals: dict[str, float] = defaultdict(float)
    will_serve = will_expire = 0.0
    for s, ps in zip(chain.states, pi):
        i = s[0]
        level[i] += ps
        for kind, _, rate, info in chain.transitions(s):
            flow = ps * rate
            if kind == "arrival":
                for key in ("offered", "red", "blocked"):
                    totals[key] += flow * float(info[key])  # type: ignore[arg-type]
            elif kind == "completion":
                totals["served"] += flow
                totals["renovated"] += flow * float(info["removed"])  # type: ignore[arg-type]
                totals["renovated_stale"] += flow * float(info["stale_removed"])  # type: ignore[arg-type]
                if info.get("stale_head"):
                    totals["served_stale"] += flow
            elif kind == "expiry":
                totals["expired"] += flow
        for p in range(i):
            will_serve += ps * will_serve_at[s, p]
            will_expire += ps * will_expire_at[s, p]
    offered = totals["offered"]
    dist: dict[int, float] = defaultdict(float)
    for r, q in zip(policy.robots_at_level, level):
        dist[r] += float(q)
    k = np.arange(K + 1, dtype=float)
    measures = BufferMeasures(
        arrival_rate=offered, p_blocked=totals["blocked"] / offered, p_red=totals["red"] / offered,
        p_renovated=totals["renovated"] / offered, p_expired=totals["expired"] / offered,
        p_served=totals["served"] / offered, p_served_stale=totals["served_stale"] / offered,
        p_renovated_stale=totals["renovated_stale"] / offered, p_starvation=float(level[0]),
        mean_active_robots=float(sum(r * q for r, q in dist.items())),
        active_robots_distribution=tuple(sorted(dist.items(), reverse=True)),
        queue_length_distribution=tuple(float(x) for x in level), mean_queue_length=float(k @ level),
        second_moment_queue_length=float((k * k) @ level),
        mean_response_served=will_serve / totals["served"],
        mean_sojourn_expired=will_expire / totals["expired"] if totals["expired"] > 0 else 0.0)
    vectors: list[NDArray[np.float64]] = []
    at = 0
    for i in range(K + 1):
        size = sum(1 for s in chain.states if s[0] == i)
        vectors.append(np.asarray(pi[at:at + size]))
        at += size
    return BufferSolution(True, BufferStatus.SUCCESS, "solved", "bruteforce", policy, buffer, measures,
                          tuple(vectors), n, residual, time.perf_counter() - start)
