"""An independent brute-force route to the same numbers, for tests and benchmarks; its explicit state
space (:func:`enumerate_states`, :func:`explicit_generator`, :func:`phase_laws`, :func:`page_fates`) is
also what the MDP certificate (:mod:`policies._certificate`) builds its chain on.

It enumerates the states (i, nu, m, r_1..r_{i-1}) one by one, writes every transition by hand from the
model's description (paper 000, Section 2) -- not through the Kronecker blocks of the Lemma -- solves
the sparse system p Q = 0, p e = 1, and computes each measure by summing over states. The mean
sojourn of served pages comes from Little's law on the sub-population of pages that will be served
(E[number of such pages present] / their throughput), with each present page's chance of being served
found by an explicit absorbing chain over the phases of the pages ahead of it; likewise for obsolete
pages. Nothing here imports the block solver.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from ._measures import Measures
from ._model import QueueModel
from ._policy import QueueLengthPolicy
from ._solve import Solution, SolveStatus

State = tuple[int, int, int, tuple[int, ...]]  # (i, nu, m, (r_1..r_{i-1})); m = -1 when empty


def phase_laws(model: QueueModel) -> tuple[NDArray[np.float64], ...]:
    """(beta, S, S0, gamma, Gamma, Gamma0): the service and obsolescence laws with their exit rates (no
    obsolescence: one phase that never ends)."""
    beta, S = np.asarray(model.service.beta), np.asarray(model.service.S)
    if model.obsolescence is None:
        gamma, Gamma = np.ones(1), np.zeros((1, 1))
    else:
        gamma, Gamma = np.asarray(model.obsolescence.beta), np.asarray(model.obsolescence.S)
    return beta, S, -S.sum(axis=1), gamma, Gamma, -Gamma.sum(axis=1)


def enumerate_states(model: QueueModel) -> list[State]:
    """All states in lexicographic order (the block solver's order too)."""
    K, W = model.capacity, model.arrivals.order
    M = model.service.order
    R = 1 if model.obsolescence is None else model.obsolescence.order
    states: list[State] = [(0, nu, -1, ()) for nu in range(W)]
    for i in range(1, K + 1):
        for nu in range(W):
            for m in range(M):
                for rs in itertools.product(range(R), repeat=i - 1):
                    states.append((i, nu, m, rs))
    return states


def explicit_generator(model: QueueModel, policy: QueueLengthPolicy) -> tuple[list[State], sp.csr_matrix]:
    """The generator, transition by transition."""
    model.check_policy(policy)
    K = model.capacity
    beta, S, S0, gamma, Gamma, Gamma0 = phase_laws(model)
    M, R = beta.size, gamma.size
    states = enumerate_states(model)
    index = {s: n for n, s in enumerate(states)}
    rates: dict[tuple[int, int], float] = defaultdict(float)

    def add(src: State, dst: State, rate: float) -> None:
        if rate > 0 and src != dst:
            rates[index[src], index[dst]] += rate

    for s in states:
        i, nu, m, rs = s
        bmap = model.arrivals[policy.robots_at_level[i]]
        W = bmap.order
        # phase changes of the arrival process without arrivals
        for nu2 in range(W):
            add(s, (i, nu2, m, rs), bmap.D[0][nu, nu2])
        # batch arrivals
        for k in range(1, bmap.max_batch + 1):
            for nu2 in range(W):
                rate = bmap.D[k][nu, nu2]
                if rate <= 0:
                    continue
                admitted = model.admission.admitted(k, K - i)
                if admitted == 0:
                    add(s, (i, nu2, m, rs), rate)
                elif i == 0:
                    for m2 in range(M):
                        for new in itertools.product(range(R), repeat=admitted - 1):
                            p = beta[m2] * np.prod([gamma[x] for x in new])
                            add(s, (admitted, nu2, m2, new), rate * p)
                else:
                    for new in itertools.product(range(R), repeat=admitted):
                        add(s, (i + admitted, nu2, m, rs + new), rate * np.prod([gamma[x] for x in new]))
        if i == 0:
            continue
        # service phase changes and completion (the head waiting page starts with phase ~ beta)
        for m2 in range(M):
            if m2 != m:
                add(s, (i, nu, m2, rs), S[m, m2])
        if i == 1:
            add(s, (0, nu, -1, ()), S0[m])
        else:
            for m2 in range(M):
                add(s, (i - 1, nu, m2, rs[1:]), S0[m] * beta[m2])
        # each waiting page's obsolescence clock
        for j, r in enumerate(rs):
            for r2 in range(R):
                if r2 != r:
                    add(s, (i, nu, m, (*rs[:j], r2, *rs[j + 1:])), Gamma[r, r2])
            add(s, (i - 1, nu, m, rs[:j] + rs[j + 1:]), Gamma0[r])
    n = len(states)
    rows, cols = zip(*rates.keys()) if rates else ((), ())
    Q = sp.csr_matrix((list(rates.values()), (rows, cols)), shape=(n, n))
    Q = Q - sp.diags(np.asarray(Q.sum(axis=1)).ravel())
    return states, sp.csr_matrix(Q)


def page_fates(model: QueueModel) -> dict[tuple[int, ...], tuple[float, float]]:
    """For a waiting page with phases (m, r_ahead..., r_own): (P(served), P(obsolete)), by explicit
    first-step equations over the tuples, level by level (the pages ahead only ever decrease)."""
    beta, S, S0, gamma, Gamma, Gamma0 = phase_laws(model)
    M, R = beta.size, gamma.size
    fate: dict[tuple[int, ...], tuple[float, float]] = {(m,): (1.0, 0.0) for m in range(M)}
    for j in range(1, model.capacity):
        tuples = [(m, *rs) for m in range(M) for rs in itertools.product(range(R), repeat=j)]
        pos = {t: a for a, t in enumerate(tuples)}
        n = len(tuples)
        A = np.zeros((n, n))
        b = np.zeros((n, 2))
        for t in tuples:
            a = pos[t]
            m, rs = t[0], t[1:]
            out = -S[m, m] - sum(Gamma[r, r] for r in rs)
            A[a, a] = out
            for m2 in range(M):
                if m2 != m:
                    A[a, pos[(m2, *rs)]] -= S[m, m2]
            # service completion: the first waiting page (maybe the tagged one) enters service
            for m2 in range(M):
                nxt = (m2, *rs[1:])
                b[a] += S0[m] * beta[m2] * np.array(fate[nxt])
            for q, r in enumerate(rs):
                for r2 in range(R):
                    if r2 != r:
                        A[a, pos[(m, *rs[:q], r2, *rs[q + 1:])]] -= Gamma[r, r2]
                if q == len(rs) - 1:
                    b[a, 1] += Gamma0[r]  # the tagged page itself expires
                else:
                    b[a] += Gamma0[r] * np.array(fate[(m, *rs[:q], *rs[q + 1:])])
        x = np.linalg.solve(A, b)
        for t in tuples:
            fate[t] = (float(x[pos[t], 0]), float(x[pos[t], 1]))
    return fate


def solve_bruteforce(model: QueueModel, policy: QueueLengthPolicy) -> Solution:
    """Stationary distribution and measures by explicit enumeration (see the module docstring)."""
    start = time.perf_counter()
    states, Q = explicit_generator(model, policy)
    n = len(states)
    A = Q.T.tolil()
    A[0, :] = np.ones(n)
    rhs = np.zeros(n)
    rhs[0] = 1.0
    p = spla.spsolve(A.tocsc(), rhs)
    residual = float(np.abs(Q.T @ p).max())
    K = model.capacity
    _, _, S0, _, _, Gamma0 = phase_laws(model)
    fate = page_fates(model)
    offered = lost = served = obsolete = 0.0
    will_serve = will_expire = 0.0
    level = np.zeros(K + 1)
    for s, ps in zip(states, p):
        i, nu, m, rs = s
        mode = policy.robots_at_level[i]
        bmap = model.arrivals[mode]
        level[i] += ps
        for k in range(1, bmap.max_batch + 1):
            batch_rate = ps * float(bmap.D[k][nu].sum())
            offered += k * batch_rate
            lost += (k - model.admission.admitted(k, K - i)) * batch_rate
        if i == 0:
            continue
        served += ps * S0[m]
        obsolete += ps * sum(Gamma0[r] for r in rs)
        will_serve += ps  # the page in service is always served
        for j in range(1, i):
            f = fate[(m, *rs[:j])]
            will_serve += ps * f[0]
            will_expire += ps * f[1]
    # Little's law on each sub-population: mean number present = rate x mean sojourn
    measures = Measures.from_rates(offered=offered, lost=lost, obsolete=obsolete, served=served,
                                   level_probabilities=level, robots_at_level=policy.robots_at_level,
                                   served_time=will_serve, obsolete_time=will_expire)
    blocks = []
    at = 0
    for i in range(K + 1):
        size = sum(1 for s in states if s[0] == i)
        blocks.append(np.asarray(p[at:at + size]))
        at += size
    return Solution(True, SolveStatus.SUCCESS, "solved", "bruteforce", policy, measures, tuple(blocks), n,
                    residual, time.perf_counter() - start)
