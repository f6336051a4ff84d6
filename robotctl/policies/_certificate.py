"""A lower bound on the cost of every queue-length policy of paper 000, from a full-information MDP.

A threshold policy (paper 000) sets the number of active robots from the number of pages in the system
alone. Give the controller more: let it see the whole Markov state of the queue -- the number of pages
i, the arrival phase nu, the service phase m and the obsolescence phases of the waiting pages -- and
let it pick any mode (number of active robots) at any instant. Every policy that sees only i (threshold
or not, monotone or not, randomised or not), and every policy with memory such as paper 001's
(queue, active robots) policies, is one policy of this Markov decision process, so the MDP's optimal
cost is a lower bound on theirs. The gap between the best threshold policy and the bound says how much
any smarter policy could still gain.

The MDP (continuous time, finitely many states and actions). With action l the state moves by the
generator Q_l of the queue with the BMAP D^(l) (paper 000, Section 2) and costs, per second,

    c(x, l) = c_loss (lost pages per second) + c_obs (pages expiring per second) + c_rob l
              + c_star 1(i = 0),

which is eq. (2) of paper 000 without its response term. The response term a V^(1) is a *ratio* of two
long-run averages (V^(1) = N_s / T by Little's law: N_s the mean number of present pages that will be
served, T the rate of service completions), so it is handled apart (below).

Certificates. Every bound here is certified by a function h on the states: for any h and any policy
(with memory or not), Dynkin's formula gives that the long-run average of c is at least

    delta(h) = min over states x and actions l of  c(x, l) + (Q_l h)(x),

so ``delta(h)`` is a lower bound on the cost of *every* policy, whatever h is; a good h (from policy
iteration on the MDP) makes it tight. It is computed directly from h at the end, so the bound does not
rest on the iteration having converged.

The response term. T lies in some interval [t_lo, t_hi]; on it a N_s / T >= (a / t_hi) N_s, which is
linear, and for any Lagrange multiplier k of the constraint on T the cost of every policy whose T lies
in the interval is at least delta(h) for the cost c + (a / t_hi) N_s + k T, minus k t_hi (k >= 0) or
k t_lo (k <= 0) -- the same certificate, from policy iteration, with k chosen where the optimal
policy's T crosses the interval's end. Branch and bound by bisection of T, smallest bound first: the
smallest bound over the intervals bounds the cost of every policy, and bisection stops when it is
within ``tol`` of the exact cost L + a N_s / T of the best full-information policy met, so the bound
converges to the MDP's optimum (over deterministic policies; when only a randomised policy attains
it, the search stops at its cap and says so).

Formulations (state counts with W arrival phases, M service phases, R obsolescence phases, capacity K):

``ordered``
    The exact FIFO state (i, nu, m, r_1..r_{i-1}) of paper 000 (the brute-force enumeration of
    :mod:`robotctl.model`): W (1 + M (R^K - 1) / (R - 1)) states for R >= 2 -- 126 for the paper
    example with its two phases kept, 1,022 at K = 8, 16,382 at K = 12. Response term exact. Its
    generator couples every level densely, so each LU is nearly dense: usable to about 1,000 states.
``counts``
    (i, nu, m, c_1..c_R): how many waiting pages are in each obsolescence phase,
    W (1 + M C(K - 1 + R, R)) states -- polynomial in K (R = 2, K = 50: 5,100 states). With R = 1
    (exponential obsolescence, or none) this *is* the exact state. With R >= 2 the order of the
    waiting pages is forgotten, so the controller also chooses which phase the next page to enter
    service comes from: a relaxation (FIFO is one of its policies, one with memory, which the
    certificate covers), so the bound stays valid but weaker; its response term is then bounded by
    the mean service time alone (V^(1) >= b_1: every served page is served for a full service time).
``auto``
    ``counts`` when it is exact (R = 1), else ``ordered`` while it has at most ``max_ordered_states``
    states, else the ``counts`` relaxation.

An obsolescence law whose phases all have the same exit rate is exactly exponential (the absorption
clock runs at that rate whatever the phase); it is reduced to R = 1 first (the paper example's law is
of that kind).

Cost: policy iteration solves one sparse linear system per step (a handful of steps); the response
term's branch and bound some tens to a few hundred warm-started policy iterations.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from robotctl.model import (
    PH,
    Costs,
    InputError,
    QueueModel,
    ThresholdPolicy,
    enumerate_states,
    explicit_generator,
    page_fates,
    phase_laws,
)

FORMULATIONS = ("auto", "ordered", "counts")
#: ``auto`` uses the ordered (exact) state space up to this many states.
MAX_ORDERED_STATES = 600
#: Relative tolerance of the branch and bound on the response term.
TOLERANCE = 1e-4
MAX_POLICY_ITERATIONS = 200
MAX_SOLVES = 2_000


class BoundStatus(enum.Enum):
    """Outcome of :func:`mdp_lower_bound`."""

    SUCCESS = 0
    #: the bound is valid but its bracket did not close to the tolerance (iteration or solve cap)
    NOT_CONVERGED = 1


STATUS_MESSAGES = {
    BoundStatus.SUCCESS: "lower bound certified",
    BoundStatus.NOT_CONVERGED: "lower bound certified, but its bracket did not close to the tolerance",
}


@dataclass(frozen=True)
class LowerBound:
    """A lower bound on the cost J (paper 000, eq. (2)) of every policy, from the full-information MDP.

    Attributes
    ----------
    success : bool
    status : BoundStatus
    message : str
    value : float
        The bound: no policy that sets the number of active robots from the queue length (indeed, from
        anything it can observe) has a long-run cost below it.
    upper : float
        The cost of the best policy of the MDP that the solver found (deterministic, or randomised when
        the response term is present): value <= MDP optimum <= upper. It closes to ``value`` when the
        solve converged; it need not be achievable by a queue-length policy.
    formulation : str
        ``ordered`` or ``counts`` (module docstring).
    exact_state : bool
        True when the MDP's state is the model's full Markov state; False for the ``counts``
        relaxation with R >= 2 obsolescence phases.
    response : str
        How the response term a V^(1) enters: ``none`` (a = 0), ``exact`` (branch and bound on the
        service rate), or ``service-time`` (bounded by a b_1).
    n_states, n_actions : int
    iterations : int
        Policy-iteration steps.
    solves : int
        Policy iterations of the branch and bound on the response term.
    policy : ndarray of int, shape (n_states,)
        The mode chosen in each state by the optimal policy of the linear part (without the response
        term).
    """

    success: bool
    status: BoundStatus
    message: str
    value: float
    upper: float
    formulation: str
    exact_state: bool
    response: str
    n_states: int
    n_actions: int
    iterations: int
    solves: int
    policy: NDArray[np.int64]

    def __post_init__(self) -> None:
        self.policy.flags.writeable = False

    def gap_percent(self, cost: float) -> float:
        """100 (cost - value) / value: how much more than any policy could achieve ``cost`` is, at most."""
        return 100.0 * (cost - self.value) / self.value if self.value > 0 else math.inf


@dataclass(frozen=True, eq=False)
class FullStateMdp:
    """The MDP of the module docstring, assembled.

    Attributes
    ----------
    formulation : str
    exact_state : bool
    levels : ndarray of int, shape (n,)
        Pages in the system in each state.
    actions : tuple of (int, int)
        (mode, phase): the number of active robots and, for the ``counts`` relaxation, the obsolescence
        phase of the next page to enter service (0 otherwise).
    generators : tuple of scipy.sparse.csr_matrix
        Q per action (rows sum to zero).
    cost : ndarray, shape (n, n_actions)
        c(x, action) per second, response term excluded.
    served_rate : ndarray, shape (n,)
        Service completions per second from each state (S_0 of the service phase).
    served_present : ndarray, shape (n,) or None
        Expected number of pages present in the state that will be served (None for the relaxation).
    mean_service : float
        b_1.
    """

    formulation: str
    exact_state: bool
    levels: NDArray[np.int64]
    actions: tuple[tuple[int, int], ...]
    generators: tuple[sp.csr_matrix, ...]
    cost: NDArray[np.float64]
    served_rate: NDArray[np.float64]
    served_present: NDArray[np.float64] | None
    mean_service: float

    def __post_init__(self) -> None:
        for a in (self.levels, self.cost, self.served_rate, self.served_present):
            if a is not None:
                a.flags.writeable = False

    @property
    def n_states(self) -> int:
        return int(self.levels.size)

    def policy_generator(self, actions: NDArray[np.int64]) -> sp.csr_matrix:
        """Q_pi: row x of the generator of action ``actions[x]``."""
        n = self.n_states
        stacked = sp.vstack(self.generators, format="csr")
        return sp.csr_matrix(stacked[np.asarray(actions) * n + np.arange(n)])

    def evaluate(self, actions: NDArray[np.int64], response: float = 0.0) -> float:
        """The long-run cost of the stationary policy that takes action ``actions[x]`` in state x (its
        chain must have one closed class): p c_pi + response (p N_s) / (p T) with p its stationary
        distribution (the response term needs ``served_present``)."""
        acts = np.asarray(actions, dtype=np.int64)
        n = self.n_states
        A = sp.lil_matrix(self.policy_generator(acts).T)
        A[0, :] = np.ones(n)
        rhs = np.zeros(n)
        rhs[0] = 1.0
        p = np.clip(spla.spsolve(sp.csc_matrix(A), rhs), 0.0, None)
        p /= p.sum()
        value = float(p @ self.cost[np.arange(n), acts])
        if response:
            if self.served_present is None:
                raise InputError("response", "this relaxation does not know which pages will be served",
                                 "use the ordered formulation or exponential obsolescence")
            value += response * float(p @ self.served_present) / float(p @ self.served_rate)
        return value


# -- reductions and sizes -------------------------------------------------------------------------
def _reduced(model: QueueModel) -> QueueModel:
    """The model with an obsolescence law whose exit rates are all equal replaced by the exponential
    law of that rate (exact: the absorption clock runs at that rate in every phase)."""
    ob = model.obsolescence
    if ob is None or ob.order == 1:
        return model
    exits = ob.exit_rates
    if np.allclose(exits, exits[0], rtol=1e-12, atol=0.0) and exits[0] > 0:
        return QueueModel(model.capacity, model.arrivals, model.service, PH.exponential(float(exits[0])),
                          model.admission)
    return model


def _phases(model: QueueModel) -> int:
    return 1 if model.obsolescence is None else model.obsolescence.order


def ordered_states(model: QueueModel) -> int:
    """W (1 + M (1 + R + ... + R^(K-1))): states of the ordered formulation."""
    W, M, R, K = model.arrivals.order, model.service.order, _phases(model), model.capacity
    return W * (1 + M * sum(R ** j for j in range(K)))


def count_states(model: QueueModel) -> int:
    """W (1 + M sum_{i=1..K} C(i - 2 + R, R - 1)): states of the counts formulation."""
    W, M, R, K = model.arrivals.order, model.service.order, _phases(model), model.capacity
    return W * (1 + M * sum(math.comb(i - 2 + R, R - 1) for i in range(1, K + 1)))


# -- the two formulations ------------------------------------------------------------------------
def _lost_rates(model: QueueModel, levels: NDArray[np.int64], phases: NDArray[np.int64]) -> NDArray[np.float64]:
    """Pages lost per second in each state under each mode, shape (n, modes)."""
    K = model.capacity
    out = np.zeros((levels.size, len(model.modes)))
    for a, mode in enumerate(model.modes):
        bmap = model.arrivals[mode]
        per = np.zeros((K + 1, bmap.order))  # [level, nu]
        for k in range(1, bmap.max_batch + 1):
            batch = bmap.D[k].sum(axis=1)
            for i in range(K + 1):
                per[i] += (k - model.admission.admitted(k, K - i)) * batch
        out[:, a] = per[levels, phases]
    return out


def _generator(rows: list[int], cols: list[int], vals: list[float], n: int) -> sp.csr_matrix:
    Q = sp.csr_matrix((vals, (rows, cols)), shape=(n, n))
    Q.setdiag(0.0)
    Q.eliminate_zeros()
    return sp.csr_matrix(Q - sp.diags(np.asarray(Q.sum(axis=1)).ravel()))


def _ordered(model: QueueModel, costs: Costs) -> FullStateMdp:
    states = enumerate_states(model)
    levels = np.array([s[0] for s in states])
    nus = np.array([s[1] for s in states])
    _, _, S0, _, _, Gamma0 = phase_laws(model)
    gens = tuple(explicit_generator(model, ThresholdPolicy.static(mode, model.capacity))[1] for mode in model.modes)
    fate = page_fates(model)
    served = np.array([S0[s[2]] if s[0] else 0.0 for s in states])
    present = np.array([0.0 if s[0] == 0 else 1.0 + sum(fate[(s[2], *s[3][:j])][0] for j in range(1, s[0]))
                        for s in states])
    expiring = np.array([float(sum(Gamma0[r] for r in s[3])) for s in states])
    cost = _cost_matrix(model, costs, levels, nus, expiring, model.modes)
    return FullStateMdp("ordered", True, levels, tuple((m, 0) for m in model.modes), gens, cost, served, present,
                        model.service.mean)


def _cost_matrix(model: QueueModel, costs: Costs, levels: NDArray[np.int64], nus: NDArray[np.int64],
                 expiring: NDArray[np.float64], modes: tuple[int, ...]) -> NDArray[np.float64]:
    lost = _lost_rates(model, levels, nus)
    base = costs.obsolescence * expiring + costs.starvation * (levels == 0)
    col = {m: a for a, m in enumerate(model.modes)}
    return np.column_stack([base + costs.loss * lost[:, col[m]] + costs.robot * m for m in modes])


def _compositions(total: int, parts: int) -> list[tuple[int, ...]]:
    """All (c_1..c_parts) >= 0 with sum ``total``, in lexicographic order."""
    if parts == 1:
        return [(total,)]
    return [(first, *rest) for first in range(total, -1, -1) for rest in _compositions(total - first, parts - 1)]


def _multinomial(n: int, probs: NDArray[np.float64]) -> list[tuple[tuple[int, ...], float]]:
    out = []
    for c in _compositions(n, probs.size):
        p = math.factorial(n) * math.prod(float(probs[r]) ** c[r] / math.factorial(c[r]) for r in range(probs.size))
        if p > 0:
            out.append((c, p))
    return out


def _counts(model: QueueModel, costs: Costs) -> FullStateMdp:
    K, W = model.capacity, model.arrivals.order
    beta, S, S0, gamma, Gamma, Gamma0 = phase_laws(model)
    M, R = beta.size, gamma.size
    states: list[tuple[int, int, int, tuple[int, ...]]] = [(0, nu, -1, ()) for nu in range(W)]
    for i in range(1, K + 1):
        for nu in range(W):
            for m in range(M):
                states.extend((i, nu, m, c) for c in _compositions(i - 1, R))
    index = {s: x for x, s in enumerate(states)}
    n = len(states)
    mix = [_multinomial(a, gamma) for a in range(K + 1)]

    def plus(c: tuple[int, ...], d: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(x + y for x, y in zip(c, d))

    # arrivals, per mode
    arrivals = []
    for mode in model.modes:
        bmap = model.arrivals[mode]
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        for x, (i, nu, m, c) in enumerate(states):
            for k, Dk in enumerate(bmap.D):
                for nu2 in range(W):
                    rate = float(Dk[nu, nu2])
                    if rate <= 0 or (k == 0 and nu2 == nu):
                        continue
                    a = model.admission.admitted(k, K - i) if k else 0
                    if a == 0:
                        targets = [((i, nu2, m, c), 1.0)]
                    elif i == 0:
                        targets = [((a, nu2, m2, d), beta[m2] * p) for m2 in range(M) for d, p in mix[a - 1]]
                    else:
                        targets = [((i + a, nu2, m, plus(c, d)), p) for d, p in mix[a]]
                    for t, p in targets:
                        rows.append(x)
                        cols.append(index[t])
                        vals.append(rate * p)
        arrivals.append(_generator(rows, cols, vals, n))
    # obsolescence of waiting pages (all actions)
    rows, cols, vals = [], [], []
    for x, (i, nu, m, c) in enumerate(states):
        for r in range(R if i > 1 else 0):
            if c[r] == 0:
                continue
            for r2 in range(R):
                if r2 != r and Gamma[r, r2] > 0:
                    d = list(c)
                    d[r] -= 1
                    d[r2] += 1
                    rows.append(x)
                    cols.append(index[(i, nu, m, tuple(d))])
                    vals.append(c[r] * Gamma[r, r2])
            if Gamma0[r] > 0:
                d = list(c)
                d[r] -= 1
                rows.append(x)
                cols.append(index[(i - 1, nu, m, tuple(d))] if i > 1 else index[(0, nu, -1, ())])
                vals.append(c[r] * Gamma0[r])
    obsolescence = _generator(rows, cols, vals, n)
    # service, per choice of the phase of the next page to enter service
    services = []
    for j in range(R):
        rows, cols, vals = [], [], []
        for x, (i, nu, m, c) in enumerate(states):
            if i == 0:
                continue
            for m2 in range(M):
                if m2 != m and S[m, m2] > 0:
                    rows.append(x)
                    cols.append(index[(i, nu, m2, c)])
                    vals.append(S[m, m2])
            if i == 1:
                rows.append(x)
                cols.append(index[(0, nu, -1, ())])
                vals.append(S0[m])
                continue
            r = j if c[j] > 0 else next(q for q in range(R) if c[q] > 0)
            d = list(c)
            d[r] -= 1
            for m2 in range(M):
                if beta[m2] > 0:
                    rows.append(x)
                    cols.append(index[(i - 1, nu, m2, tuple(d))])
                    vals.append(S0[m] * beta[m2])
        services.append(_generator(rows, cols, vals, n))
    actions = tuple((mode, j) for mode in model.modes for j in range(R))
    gens = tuple(sp.csr_matrix(arrivals[a] + obsolescence + services[j])
                 for a in range(len(model.modes)) for j in range(R))
    levels = np.array([s[0] for s in states])
    nus = np.array([s[1] for s in states])
    expiring = np.array([float(np.dot(s[3], Gamma0)) if s[0] > 1 else 0.0 for s in states])
    cost = _cost_matrix(model, costs, levels, nus, expiring, tuple(m for m, _ in actions))
    served = np.array([S0[s[2]] if s[0] else 0.0 for s in states])
    present = None
    if R == 1:
        fate = page_fates(model)
        present = np.array([0.0 if s[0] == 0 else 1.0 + sum(fate[(s[2], *([0] * j))][0] for j in range(1, s[0]))
                            for s in states])
    return FullStateMdp("counts", R == 1, levels, actions, gens, cost, served, present, model.service.mean)


def build_mdp(model: QueueModel, costs: Costs, *, formulation: str = "auto",
              max_ordered_states: int = MAX_ORDERED_STATES) -> FullStateMdp:
    """Assemble the full-information MDP of ``model`` (module docstring) with the costs of eq. (2)."""
    if formulation not in FORMULATIONS:
        raise InputError("formulation", f"unknown formulation {formulation!r}", f"use one of {', '.join(FORMULATIONS)}")
    reduced = _reduced(model)
    if formulation == "auto":
        exact_counts = _phases(reduced) == 1
        formulation = "counts" if exact_counts or ordered_states(reduced) > max_ordered_states else "ordered"
    return _ordered(reduced, costs) if formulation == "ordered" else _counts(reduced, costs)


# -- policy iteration, certified ------------------------------------------------------------------
@dataclass(frozen=True)
class _Solved:
    delta: float  # min over states and actions of c + Q h: a lower bound on every policy's cost
    g: float  # the cost of ``policy``
    policy: NDArray[np.int64]
    p: NDArray[np.float64]  # its stationary distribution
    iterations: int
    converged: bool


class _Solver:
    """Howard's policy iteration on one MDP for any cost matrix, warm-started from a given policy."""

    def __init__(self, mdp: FullStateMdp) -> None:
        self.mdp = mdp
        self.n = mdp.n_states
        self.n_actions = len(mdp.generators)
        self.stacked = sp.csr_matrix(sp.vstack(mdp.generators))

    def values(self, cost: NDArray[np.float64], h: NDArray[np.float64]) -> NDArray[np.float64]:
        """c(x, a) + (Q_a h)(x), shape (n, n_actions)."""
        return cost + (self.stacked @ h).reshape(self.n_actions, self.n).T

    def evaluate(self, cost: NDArray[np.float64], policy: NDArray[np.int64]
                 ) -> tuple[float, NDArray[np.float64], NDArray[np.float64]] | None:
        """(g, h, p) of a policy: its stationary distribution p, cost g = p c_pi, and relative values h
        with g = c_pi + Q_pi h, h(0) = 0. One sparse LU of Q_pi without state 0 (the chain killed on
        reaching the empty state 0) gives both: p_rest B = -Q_pi[0, rest] with p_0 = 1 then normalised,
        and B h_rest = (g - c_pi)_rest. None if that block is singular (state 0 not reached from
        everywhere: several closed classes)."""
        n = self.n
        Qp = self.stacked[policy * n + np.arange(n)]
        B = sp.csc_matrix(Qp[1:, 1:])
        try:
            lu = spla.splu(B)
        except RuntimeError:
            return None
        y = lu.solve(-np.asarray(Qp[0, 1:].todense()).ravel(), trans="T")
        p = np.concatenate(([1.0], y))
        if not np.all(np.isfinite(p)) or p.min() < -1e-8 * p.max():
            return None
        p = np.clip(p, 0.0, None)
        p /= p.sum()
        c = cost[np.arange(n), policy]
        g = float(p @ c)
        h = np.concatenate(([0.0], lu.solve((g - c)[1:])))
        if not np.all(np.isfinite(h)):
            return None
        return g, h, p

    def value_iteration(self, cost: NDArray[np.float64], *, tol: float,
                        max_iterations: int = 200_000) -> NDArray[np.float64]:
        """h by relative value iteration on the uniformised chain (the fallback when policy iteration
        meets a policy with several closed classes)."""
        rate = 1.05 * max(float(-Q.diagonal().min()) for Q in self.mdp.generators)
        h = np.zeros(self.n)
        for _ in range(max_iterations):
            v = self.values(cost, h).min(axis=1)  # rate (T h - h) of the uniformised chain
            if float(v.max() - v.min()) <= tol * max(abs(float(v.max())), 1e-300):
                break
            h = h + v / rate
            h -= h[0]
        return h

    def solve(self, cost: NDArray[np.float64], start: NDArray[np.int64] | None = None, *, tol: float = 1e-12,
              max_iterations: int = MAX_POLICY_ITERATIONS) -> _Solved:
        """Policy iteration from ``start`` (default: the cheapest action in each state)."""
        policy = np.argmin(cost, axis=1) if start is None else start.copy()
        h = np.zeros(self.n)
        g, p = math.nan, np.full(self.n, 1.0 / self.n)
        converged = False
        it = 0
        for it in range(1, max_iterations + 1):
            evaluated = self.evaluate(cost, policy)
            if evaluated is None:  # several closed classes: value iteration gives h instead
                h = self.value_iteration(cost, tol=tol)
                policy = np.argmin(self.values(cost, h), axis=1)
                evaluated = self.evaluate(cost, policy)
                if evaluated is None:
                    v = self.values(cost, h)
                    return _Solved(float(v.min()), math.nan, policy, p, it, False)
            g, h, p = evaluated
            v = self.values(cost, h)
            current = v[np.arange(self.n), policy]
            improve = current > v.min(axis=1) + tol * max(abs(g), 1.0)
            if not improve.any():
                converged = True
                break
            policy = np.where(improve, np.argmin(v, axis=1), policy)
        return _Solved(float(self.values(cost, h).min()), g, policy, p, it, converged)


def policy_iteration(mdp: FullStateMdp, cost: NDArray[np.float64] | None = None
                     ) -> tuple[float, float, NDArray[np.int64], int, bool]:
    """Howard's policy iteration for the average cost c (default: the MDP's), certified.

    Returns (delta, g, policy, iterations, converged): ``g`` the cost of the final policy (an upper
    bound on the optimum), ``delta`` = min over states and actions of c + Q h for its relative values h
    (a lower bound on the cost of every policy, module docstring).
    """
    r = _Solver(mdp).solve(mdp.cost if cost is None else cost)
    return r.delta, r.g, r.policy, r.iterations, r.converged


# -- the response term: branch and bound on the service rate --------------------------------------
@dataclass(frozen=True)
class _Interval:
    lower: float  # certified bound on the cost of every policy whose service rate lies in [t_lo, t_hi]
    t_lo: float
    t_hi: float
    start: NDArray[np.int64]  # warm start for the children


#: (L, N, T) of a policy: its linear cost, mean number of pages that will be served, service rate.
_Stats = tuple[float, float, float]


class _Response:
    """Bounds on min over policies of F = L + a N / T with T restricted to an interval.

    For a policy with service rate T = t, and any multiplier k (Lagrange, for the constraint T = t),

        F = L + (a / t) N + k (T - t) >= psi(a / t, k) - k t,   psi(w, k) = min over policies of L + w N + k T,

    and psi is concave and non-decreasing in w (a minimum of affine functions, N >= 0). On an interval
    [t_lo, t_hi] of T, w = a / t runs over [a / t_hi, a / t_lo], where psi lies above its chord; so with
    the certified values delta of psi at the two ends (policy iteration), every policy there costs at
    least min over t in [t_lo, t_hi] of chord(a / t) - k t, a one-dimensional convex minimum. The chord
    makes the bound exact at the ends and its error second order in the interval's width; k is taken
    near the best multiplier for the middle of the interval (where the optimal policy's T meets it).
    Every policy met is a full-information policy whose exact cost is an upper bound on the optimum; so
    is every mixture of two (a randomised policy: occupation measures mix linearly, so L, N and T do).
    """

    def __init__(self, mdp: FullStateMdp, response: float, solver: _Solver) -> None:
        assert mdp.served_present is not None
        self.mdp, self.a, self.solver = mdp, response, solver
        self.present = mdp.served_present[:, None]
        self.s0 = mdp.served_rate
        self.upper = math.inf
        self.solves = 0
        self.converged = True

    def _cost(self, stats: _Stats) -> float:
        L, N, T = stats
        return L + self.a * N / T if T > 0 else math.inf

    def _mix(self, one: _Stats, other: _Stats) -> float:
        """The cheapest mixture theta one + (1 - theta) other: F(theta) = L + a N / T with L, N, T
        linear in theta; F' = 0 where (T_b + theta dT)^2 = a (N_b dT - T_b dN) / dL."""
        (La, Na, Ta), (Lb, Nb, Tb) = one, other
        dL, dN, dT = La - Lb, Na - Nb, Ta - Tb
        thetas = [0.0, 1.0]
        if dL != 0 and dT != 0:
            square = self.a * (Nb * dT - Tb * dN) / dL
            if square > 0:
                thetas += [(r - Tb) / dT for r in (math.sqrt(square), -math.sqrt(square))]
        return min(self._cost((Lb + t * dL, Nb + t * dN, Tb + t * dT)) for t in thetas if 0.0 <= t <= 1.0)

    def psi(self, w: float, k: float, start: NDArray[np.int64]) -> tuple[float, _Stats, NDArray[np.int64]]:
        """(delta, stats, policy): the certified lower bound on psi(w, k) and the (L, N, T) of the
        optimal policy found, whose exact cost updates the upper bound."""
        r = self.solver.solve(self.mdp.cost + w * self.present + k * self.s0[:, None], start)
        self.solves += 1
        self.converged &= r.converged
        stats = (float(r.p @ self.mdp.cost[np.arange(self.mdp.n_states), r.policy]),
                 float(r.p @ self.present[:, 0]), float(r.p @ self.s0))
        if math.isfinite(r.g):
            self.upper = min(self.upper, self._cost(stats))
        return r.delta, stats, r.policy

    def multiplier(self, t: float, start: NDArray[np.int64], *, steps: int = 6) -> tuple[float, NDArray[np.int64]]:
        """k near the maximiser of the concave psi(a / t, k) - k t, whose slope is T(policy_k) - t: a
        bracket by doubling, then intersections of tangents."""
        w = self.a / t
        delta, stats, policy = self.psi(w, 0.0, start)
        if stats[2] == t:
            return 0.0, policy
        up = stats[2] > t  # T too high: raise k (charge service)
        ka, fa, sa, xa = 0.0, delta, stats[2] - t, stats
        kb = fb = sb = math.nan
        xb = stats
        k = (1e-3 if up else -1e-3) * max(abs(delta), 1.0) / max(float(self.s0.max()), 1e-300)
        for _ in range(40):
            f, stats, policy = self.psi(w, k, policy)
            if (stats[2] - t > 0) != up or stats[2] == t:
                kb, fb, sb, xb = k, f - k * t, stats[2] - t, stats
                break
            ka, fa, sa, xa = k, f - k * t, stats[2] - t, stats
            k *= 4.0
        if math.isnan(kb):
            return ka, policy
        self.upper = min(self.upper, self._mix(xa, xb))
        for _ in range(steps):
            kc = (fb - fa + sa * ka - sb * kb) / (sa - sb) if sa != sb else 0.5 * (ka + kb)
            if not min(ka, kb) < kc < max(ka, kb):
                kc = 0.5 * (ka + kb)
            f, stats, policy = self.psi(w, kc, policy)
            if (stats[2] - t > 0) == up:
                ka, fa, sa, xa = kc, f - kc * t, stats[2] - t, stats
            else:
                kb, fb, sb, xb = kc, f - kc * t, stats[2] - t, stats
            self.upper = min(self.upper, self._mix(xa, xb))
            if stats[2] == t:
                break
        return (ka if abs(sa) < abs(sb) else kb), policy

    def interval(self, t_lo: float, t_hi: float, start: NDArray[np.int64]) -> _Interval:
        k, policy = self.multiplier(0.5 * (t_lo + t_hi), start)
        w1, w2 = self.a / t_hi, self.a / t_lo
        d1, _, _ = self.psi(w1, k, policy)
        d2, _, _ = self.psi(w2, k, policy)
        # chord: psi(w) >= d1 + slope (w - w1) on [w1, w2]; an interval bisected down to one float is a
        # point, where psi(w1) itself is the bound (min(d1, d2): both are certified values of it)
        slope = (d2 - d1) / (w2 - w1) if w2 > w1 else 0.0
        d1 = d1 if w2 > w1 else min(d1, d2)
        ts = [t_lo, t_hi]  # chord(a / t) - k t is convex when slope >= 0, concave (ends only) otherwise
        if slope > 0 and k < 0:
            ts.append(math.sqrt(self.a * slope / -k))  # where its derivative -a slope / t^2 - k vanishes
        bound = min(d1 + slope * (self.a / t - w1) - k * t for t in ts if t_lo <= t <= t_hi)
        return _Interval(bound, t_lo, t_hi, policy)


def _branch_and_bound(mdp: FullStateMdp, response: float, solver: _Solver, start: NDArray[np.int64], *,
                      tol: float, max_solves: int) -> tuple[float, float, int, bool]:
    """(lower, upper, solves, closed): bisection over the service rate T, smallest bound first, from
    certified bounds on T itself (policy iteration for min T and for max T)."""
    bb = _Response(mdp, response, solver)
    low = solver.solve(np.repeat(mdp.served_rate[:, None], len(mdp.generators), axis=1), start)
    high = solver.solve(-np.repeat(mdp.served_rate[:, None], len(mdp.generators), axis=1), start)
    bb.solves += 2
    t_lo = max(low.delta, 1e-12 * float(mdp.served_rate.max()))
    t_hi = max(-high.delta, t_lo * (1 + 1e-12))
    heap: list[tuple[float, int, _Interval]] = []
    tick = itertools.count()
    root = bb.interval(t_lo, t_hi, start)
    heapq.heappush(heap, (root.lower, next(tick), root))
    while True:
        lower, _, iv = heapq.heappop(heap)
        if bb.upper - lower <= tol * abs(bb.upper):
            return lower, bb.upper, bb.solves, bb.converged
        if bb.solves >= max_solves:
            return lower, bb.upper, bb.solves, False
        mid = 0.5 * (iv.t_lo + iv.t_hi)
        if not iv.t_lo < mid < iv.t_hi:  # bisected to float resolution: the smallest bound stands, not closed
            return lower, bb.upper, bb.solves, False
        for lo, hi in ((iv.t_lo, mid), (mid, iv.t_hi)):
            child = bb.interval(lo, hi, iv.start)
            heapq.heappush(heap, (max(child.lower, lower), next(tick), child))


# -- the public function -------------------------------------------------------------------------
def mdp_lower_bound(model: QueueModel, costs: Costs, *, formulation: str = "auto", tol: float = TOLERANCE,
                    max_ordered_states: int = MAX_ORDERED_STATES, max_solves: int = MAX_SOLVES) -> LowerBound:
    """A certified lower bound on the cost J of every queue-length policy (module docstring).

    Parameters
    ----------
    model : QueueModel
    costs : Costs
        The coefficients of eq. (2) of paper 000.
    formulation : str
        ``auto``, ``ordered`` or ``counts``.
    tol : float
        Relative width at which the branch and bound on the response term stops.
    max_ordered_states : int
        ``auto`` uses the exact ordered state up to this many states.
    max_solves : int
        Cap on the policy-iteration solves of the branch and bound.

    Returns
    -------
    LowerBound
        ``value`` <= J(pi) for every policy pi that chooses the number of active robots from what it
        observes (the queue length in particular).

    Notes
    -----
    How it scales: the ordered state grows like W M R^(K-1) (two phases each: 126 states at K = 5,
    1,022 at K = 8) and its LU is nearly dense, so it serves small K only; the counts state grows like
    W M K^R / R! (K = 50, R = 2: 5,102 states; exponential obsolescence: W (1 + M K), 202 for the paper
    example at K = 50). Each policy-iteration step is one sparse LU of that size; the linear part takes
    a handful of steps, the response term some tens to hundreds of warm-started solves (bench/mdp.py).
    For large K use ``auto``: it picks ``counts``, exact with exponential obsolescence (or a law that
    reduces to it) and a valid but weaker relaxation with R >= 2 phases (``exact_state`` False,
    ``response`` ``service-time``). Measured on one core (bench/mdp.py): the paper example 0.4 s
    (22 states); at K = 50, 0.6 s (202 states, response term exact); with two phases that do not reduce,
    ordered K = 7 (510 states) 9 s, counts K = 50 (5,102 states) 2.6 s, and 16 robots at K = 50
    (5,102 states x 32 actions) 4.6 s.

    References
    ----------
    Puterman, *Markov Decision Processes*, Wiley 1994, Chapters 8-9 (policy iteration, occupation
    measures and their linear programme, the Lagrangian of constrained problems); Odoni, "On finding
    the maximal gain for Markov decision processes", Operations Research 17 (1969) (the bound from any h).
    """
    if isinstance(tol, bool) or not isinstance(tol, float | int) or not 0 < tol < 1:
        raise InputError("tol", f"must lie in (0, 1), got {tol!r}", "e.g. 1e-4")
    mdp = build_mdp(model, costs, formulation=formulation, max_ordered_states=max_ordered_states)
    solver = _Solver(mdp)
    linear = solver.solve(mdp.cost)
    modes = np.array([m for m, _ in mdp.actions])[linear.policy]
    a = costs.response
    closed = linear.converged
    solves = 0
    if a == 0:
        value, upper, how = linear.delta, linear.g, "none"
    elif mdp.served_present is None:
        value, upper, how = linear.delta + a * mdp.mean_service, linear.g + a * mdp.mean_service, "service-time"
    else:
        how = "exact"
        value, upper, solves, bb_closed = _branch_and_bound(mdp, a, solver, linear.policy, tol=tol,
                                                            max_solves=max_solves)
        value = max(value, linear.delta + a * mdp.mean_service)
        closed &= bb_closed
    status = BoundStatus.SUCCESS if closed else BoundStatus.NOT_CONVERGED
    return LowerBound(status is BoundStatus.SUCCESS, status, STATUS_MESSAGES[status], value, upper,
                      mdp.formulation, mdp.exact_state, how, mdp.n_states, len(mdp.actions), linear.iterations,
                      solves, modes.astype(np.int64))
