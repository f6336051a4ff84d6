"""Minimum mean cycle of a finite deterministic graph, by Howard's policy iteration.

A deterministic MDP with average cost (paper 003, Section 3: the transitions are 0/1) is a graph whose
optimal average cost from a state is the smallest mean cost of a cycle reachable from it. Howard's
algorithm for it (Cochet-Terrasson, Cohen, Gaubert, McGettrick and Quadrat, 1998) keeps one successor per
state (a policy), evaluates it (each state's cycle mean eta and a bias v along its tree), and improves
first eta and then v until nothing improves. Each evaluation is linear in the number of states.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True, eq=False)
class MeanCycle:
    """The optimal average cost from one state.

    Attributes
    ----------
    value : float
        The smallest mean cost of a cycle reachable from ``start``.
    cycle : tuple of int
        The states of that cycle, in order, starting where the optimal policy from ``start`` enters it.
    actions : tuple of int
        The action taken in each state of ``cycle``.
    iterations : int
        Policy evaluations.
    converged : bool
        False if ``max_iterations`` stopped it (the value is then an upper bound).
    """

    value: float
    cycle: tuple[int, ...]
    actions: tuple[int, ...]
    iterations: int
    converged: bool


def _evaluate(succ: NDArray[np.int64], cost: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """eta (the mean of the cycle each state reaches) and a bias v with v(s) = cost(s) - eta(s) + v(succ(s))."""
    n = succ.size
    eta = np.full(n, np.nan)
    v = np.full(n, np.nan)
    state = np.zeros(n, dtype=np.int8)  # 0 new, 1 on the current path, 2 done
    succ_l = succ.tolist()
    cost_l = cost.tolist()
    for s0 in range(n):
        if state[s0]:
            continue
        path = []
        s = s0
        while state[s] == 0:
            state[s] = 1
            path.append(s)
            s = succ_l[s]
        if state[s] == 1:  # closed a new cycle at s
            k = path.index(s)
            cyc = path[k:]
            mean = sum(cost_l[c] for c in cyc) / len(cyc)
            root = min(cyc)  # a fixed root per cycle keeps the iteration from cycling
            r = cyc.index(root)
            order = cyc[r:] + cyc[:r]
            eta[root], v[root] = mean, 0.0
            for c in reversed(order[1:]):  # v(c) = cost(c) - mean + v(succ(c)), from the root backwards
                eta[c] = mean
                v[c] = cost_l[c] - mean + v[succ_l[c]]
            for c in cyc:
                state[c] = 2
            path = path[:k]
        for c in reversed(path):
            t = succ_l[c]
            eta[c] = eta[t]
            v[c] = cost_l[c] - eta[t] + v[t]
            state[c] = 2
    return eta, v


def min_mean_cycle(successors: NDArray[np.int64], costs: NDArray[np.float64], start: int, *,
                   tol: float = 1e-12, max_iterations: int = 10_000) -> MeanCycle:
    """The minimum mean cycle reachable from ``start``.

    Parameters
    ----------
    successors : ndarray of int, shape (S, A)
        successors[s, a] is the state after action a in state s, or -1 when a is not allowed there.
        Every state needs at least one allowed action.
    costs : ndarray, shape (S, A)
        The cost of each allowed action.
    start : int
    """
    S = successors.shape[0]
    allowed = successors >= 0
    if not allowed.any(axis=1).all():
        raise ValueError("every state needs an allowed action")
    safe_succ = np.where(allowed, successors, 0)
    cost = np.where(allowed, costs, np.inf)
    policy = np.argmax(allowed, axis=1)  # the first allowed action
    rows = np.arange(S)
    it = 0
    converged = False
    while it < max_iterations:
        it += 1
        succ = safe_succ[rows, policy]
        eta, v = _evaluate(succ, cost[rows, policy])
        eta_next = np.where(allowed, eta[safe_succ], np.inf)
        best_eta = eta_next.min(axis=1)
        better = best_eta < eta - tol
        if better.any():
            choice = np.argmin(eta_next, axis=1)
            policy = np.where(better, choice, policy)
            continue
        same = allowed & (eta_next <= eta[:, None] + tol)
        val = np.where(same, cost - eta[:, None] + v[safe_succ], np.inf)
        best_v = val.min(axis=1)
        better = best_v < v - tol * np.maximum(1.0, np.abs(v))
        if better.any():
            policy = np.where(better, np.argmin(val, axis=1), policy)
            continue
        converged = True
        break
    succ = safe_succ[rows, policy]
    seen: dict[int, int] = {}
    s, path = int(start), list[int]()
    while s not in seen:
        seen[s] = len(path)
        path.append(s)
        s = int(succ[s])
    cyc = path[seen[s]:]
    acts = tuple(int(policy[c]) for c in cyc)
    value = float(np.mean([cost[c, policy[c]] for c in cyc]))
    return MeanCycle(value, tuple(cyc), acts, it, converged)


__all__ = ["MeanCycle", "min_mean_cycle"]
