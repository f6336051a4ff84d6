"""An independent brute-force route to the measures of a hysteresis policy, for tests and benchmarks.

It enumerates every state (i, r, nu, m, r_1..r_{i-1}) for every robot count r the arrivals define, writes
each transition by hand from the model's description (paper 000, Section 2) with the controller's rule
applied to the level the transition lands on (park down to r_park, resume up to r_resume), keeps the closed
class reached from an empty queue with r_park(0) robots (strongly connected components of the explicit
graph), solves p Q = 0, p e = 1 on it, and sums every measure over states. Each command is counted on the
transition that causes it: the command rate is sum_s p_s sum_{s'} q(s, s') |r(s') - r(s)|. Nothing here
imports the augmented block solver of ``model._hysteresis`` or the Kronecker blocks of ``model._levels``.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict

import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
import scipy.sparse.linalg as spla

from robotctl._errors import InputError

from ._bruteforce import page_fates, phase_laws
from ._hysteresis import HysteresisPolicy, HysteresisSolution, fleet_size, per_robot_minute
from ._measures import Measures
from ._model import QueueModel

State = tuple[int, int, int, int, tuple[int, ...]]  # (i, robots, nu, m, (r_1..r_{i-1})); m = -1 when empty


def solve_hysteresis_bruteforce(model: QueueModel, policy: HysteresisPolicy) -> HysteresisSolution:
    """Stationary measures of ``model`` under ``policy`` by explicit enumeration (module docstring)."""
    start_time = time.perf_counter()
    policy.check(model)
    K, W = model.capacity, model.arrivals.order
    beta, S, S0, gamma, Gamma, Gamma0 = phase_laws(model)
    M, R = beta.size, gamma.size
    states: list[State] = []
    for i in range(K + 1):
        for r in model.modes:
            for nu in range(W):
                if i == 0:
                    states.append((0, r, nu, -1, ()))
                    continue
                for m in range(M):
                    for rs in itertools.product(range(R), repeat=i - 1):
                        states.append((i, r, nu, m, rs))
    index = {s: n for n, s in enumerate(states)}
    rates: dict[tuple[int, int], float] = defaultdict(float)
    switch: dict[tuple[int, int], float] = defaultdict(float)

    def add(src: State, i2: int, nu2: int, m2: int, rs2: tuple[int, ...], rate: float) -> None:
        if rate <= 0:
            return
        r = src[1]
        r2 = r if i2 == src[0] else min(max(r, policy.resume[i2]), policy.park[i2])
        dst = (i2, r2, nu2, m2, rs2)
        if dst == src:
            return
        key = (index[src], index[dst])
        rates[key] += rate
        switch[key] += rate * abs(r2 - r)

    for s in states:
        i, r, nu, m, rs = s
        bmap = model.arrivals[r]
        for nu2 in range(W):
            add(s, i, nu2, m, rs, bmap.D[0][nu, nu2])
        for k in range(1, bmap.max_batch + 1):
            for nu2 in range(W):
                rate = bmap.D[k][nu, nu2]
                if rate <= 0:
                    continue
                admitted = model.admission.admitted(k, K - i)
                if admitted == 0:
                    add(s, i, nu2, m, rs, rate)
                elif i == 0:
                    for m2 in range(M):
                        for new in itertools.product(range(R), repeat=admitted - 1):
                            add(s, admitted, nu2, m2, new, rate * beta[m2] * np.prod([gamma[x] for x in new]))
                else:
                    for new in itertools.product(range(R), repeat=admitted):
                        add(s, i + admitted, nu2, m, rs + new, rate * np.prod([gamma[x] for x in new]))
        if i == 0:
            continue
        for m2 in range(M):
            if m2 != m:
                add(s, i, nu, m2, rs, S[m, m2])
        if i == 1:
            add(s, 0, nu, -1, (), S0[m])
        else:
            for m2 in range(M):
                add(s, i - 1, nu, m2, rs[1:], S0[m] * beta[m2])
        for j, ph in enumerate(rs):
            for ph2 in range(R):
                if ph2 != ph:
                    add(s, i, nu, m, (*rs[:j], ph2, *rs[j + 1:]), Gamma[ph, ph2])
            add(s, i - 1, nu, m, rs[:j] + rs[j + 1:], Gamma0[ph])
    n = len(states)
    rows, cols = zip(*rates.keys())
    Q = sp.csr_matrix((list(rates.values()), (rows, cols)), shape=(n, n))
    Csw = sp.csr_matrix((list(switch.values()), (rows, cols)), shape=(n, n))
    # the closed class reached from the empty queue with r_park(0) robots, arrival phase 0
    start = index[(0, policy.park[0], 0, -1, ())]
    order = csgraph.breadth_first_order(Q, start, directed=True, return_predecessors=False)
    reach = np.zeros(n, dtype=bool)
    reach[order] = True
    ncomp, labels = csgraph.connected_components(Q, directed=True, connection="strong")
    coo = Q.tocoo()
    leaves = np.ones(ncomp, dtype=bool)
    leaves[labels[coo.row[labels[coo.row] != labels[coo.col]]]] = False
    closed = sorted({int(labels[k]) for k in np.flatnonzero(reach) if leaves[labels[k]]})
    if len(closed) != 1:
        raise InputError("resume", f"{len(closed)} closed classes reachable from an empty queue",
                         "use vectors where every robot count can be reached back")
    keep = np.flatnonzero(labels == closed[0])
    Qc = Q[keep][:, keep]
    Qc = sp.csr_matrix(Qc - sp.diags(np.asarray(Qc.sum(axis=1)).ravel()))
    A = Qc.T.tolil()
    A[0, :] = np.ones(keep.size)
    rhs = np.zeros(keep.size)
    rhs[0] = 1.0
    pk = spla.spsolve(A.tocsc(), rhs)
    residual = float(np.abs(Qc.T @ pk).max())
    p = np.zeros(n)
    p[keep] = pk
    commands = float(p @ np.asarray(Csw.sum(axis=1)).ravel())
    fate = page_fates(model)
    offered = lost = served = obsolete = will_serve = will_expire = 0.0
    starvation = robots_mean = queue_length = 0.0
    level = np.zeros(K + 1)
    dist: dict[int, float] = defaultdict(float)
    for s, ps in zip(states, p):
        if ps == 0.0:
            continue
        i, r, nu, m, rs = s
        level[i] += ps
        dist[r] += ps
        robots_mean += r * ps
        queue_length += i * ps
        bmap = model.arrivals[r]
        for k in range(1, bmap.max_batch + 1):
            batch_rate = ps * float(bmap.D[k][nu].sum())
            offered += k * batch_rate
            lost += (k - model.admission.admitted(k, K - i)) * batch_rate
        if i == 0:
            starvation += ps
            continue
        served += ps * S0[m]
        obsolete += ps * sum(Gamma0[x] for x in rs)
        will_serve += ps
        for j in range(1, i):
            f = fate[(m, *rs[:j])]
            will_serve += ps * f[0]
            will_expire += ps * f[1]
    v1 = will_serve / served if served > 0 else float("nan")
    v2 = will_expire / obsolete if obsolete > 0 else 0.0
    p_succ, p_obs = served / offered, obsolete / offered
    measures = Measures(arrival_rate=offered, p_loss=lost / offered, p_obsolete=p_obs, p_success=p_succ,
                        p_starvation=starvation, mean_active_robots=robots_mean,
                        active_robots_distribution=tuple(sorted(((r, q) for r, q in dist.items() if q > 0),
                                                                reverse=True)),
                        queue_length_distribution=tuple(float(x) for x in level), mean_queue_length=queue_length,
                        mean_response_served=v1, mean_sojourn_obsolete=v2, mean_sojourn=v1 * p_succ + v2 * p_obs,
                        commands_per_s=commands, commands_per_robot_min=per_robot_minute(commands, fleet_size(model)))
    robots_at_level = tuple(tuple(sorted({s[1] for s, ps in zip(states, p) if s[0] == i and ps != 0.0}))
                            for i in range(K + 1))
    fleet = fleet_size(model)
    return HysteresisSolution(policy, measures, fleet, robots_at_level,
                              (p,), keep.size, residual, time.perf_counter() - start_time)
