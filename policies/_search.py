"""Local search over queue-length policies without enumeration.

A queue-length policy runs r(i) robots at queue length i; the paper's threshold policies are the
non-increasing ones. Enumerating them costs C(K + n, n - 1) solves (n modes), and all queue-length
policies n^(K+1): out of reach for real fleets (16-64 robots, K = 50-200). This module searches them
locally, evaluating every candidate *exactly* on the chosen chain:

**Coordinate moves.** For each level i in turn (upwards, then downwards), every allowed mode at level i
is costed at once from the chain censored on level i (:class:`robotctl.model.PolicyEvaluator`): a
one-level change costs one solve of one level's size, not a whole solve. The best is adopted before
moving to the next level (Gauss-Seidel sweeps); the passes it needs are rebuilt one level at a time.

**Block moves.** When no single level improves: every boundary between two runs of equal modes slides
by two or more levels (one run grows into the other), and every run switches to another mode as a
whole. They are evaluated by applying the change level by level, each step costing one level of a pass.

**Restarts.** The descent starts from the best static fleet and from other policies (a ramp from the
largest to the smallest mode, and seeded random monotone policies); the best local optimum wins. Starts
are independent: they can run in parallel processes through ``workers`` (a ``map``-like callable, as
scipy's ``differential_evolution`` takes; the command line passes a process pool with one BLAS thread
per process).

With ``monotone=True`` every move keeps r non-increasing (threshold policies only); otherwise any mode
may sit at any level, and the result says whether the optimum found is monotone. The search is local:
its result is a policy no coordinate or block move improves, not a proven global optimum. Exhaustive
enumeration (``robotctl.policies.optimise`` with ``method="exhaustive"``) remains the reference where it
is affordable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from robotctl.model import (
    Costs,
    InputError,
    LevelChain,
    PolicyEvaluator,
    QueueLengthPolicy,
    QueueModel,
    ThresholdPolicy,
)

#: ``map``-like callable: workers(fn, iterable) -> iterable of fn(item), in order.
Workers = Callable[[Callable[..., object], Iterable[object]], Iterable[object]]

#: A move must lower the cost by more than this (relative) to count: rounding must not make it cycle.
REL_IMPROVEMENT = 1e-12


@dataclass(frozen=True)
class LocalOptimum:
    """A policy that no coordinate or block move improves.

    Attributes
    ----------
    policy : QueueLengthPolicy
        A :class:`ThresholdPolicy` when it is monotone.
    cost : float
        J of eq. (2) on the chain searched.
    monotone : bool
        True when r(i) is non-increasing.
    restricted : bool
        True when the search allowed monotone policies only.
    evaluations : int
        Policies costed (every candidate of every move).
    sweeps : int
        Coordinate sweeps, over all starts.
    starts : tuple of QueueLengthPolicy
        The starting policies.
    chain : str
        ``exact`` or ``ordered-head h=...``: the chain the costs were computed on.
    """

    policy: QueueLengthPolicy
    cost: float
    monotone: bool
    restricted: bool
    evaluations: int
    sweeps: int
    starts: tuple[QueueLengthPolicy, ...]
    chain: str


@dataclass(frozen=True)
class _Descent:
    robots_at_level: tuple[int, ...]
    cost: float
    evaluations: int
    sweeps: int


def _allowed(policy: list[int], i: int, pool: Sequence[int], monotone: bool) -> list[int]:
    if not monotone:
        return list(pool)
    hi = policy[i - 1] if i > 0 else max(pool)
    lo = policy[i + 1] if i + 1 < len(policy) else min(pool)
    return [m for m in pool if lo <= m <= hi]


class _Descender:
    """Coordinate and block moves from one start on one evaluator."""

    def __init__(self, evaluator: PolicyEvaluator, costs: Costs, pool: Sequence[int], monotone: bool,
                 max_sweeps: int) -> None:
        self.ev = evaluator
        self.costs = costs
        self.pool = tuple(sorted(pool, reverse=True))
        self.monotone = monotone
        self.max_sweeps = max_sweeps
        self.evaluations = 0
        self.sweeps = 0

    def cost_now(self, i: int) -> float:
        """The current policy's cost, censored on level i (cheap next to a level just changed)."""
        self.evaluations += 1
        return float(self.ev.costs_at(i, [self.ev.policy[i]], self.costs)[0])

    def _better(self, new: float, old: float) -> bool:
        return new < old - REL_IMPROVEMENT * max(abs(old), 1.0)

    def sweep(self, levels: Iterable[int], cost: float) -> tuple[float, bool]:
        improved = False
        for i in levels:
            cands = _allowed(self.ev.policy, i, self.pool, self.monotone)
            if len(cands) <= 1:
                continue
            cs = self.ev.costs_at(i, cands, self.costs)
            self.evaluations += len(cands)
            here = float(cs[cands.index(self.ev.policy[i])])
            k = int(np.nanargmin(np.where(np.isfinite(cs), cs, np.nan))) if np.isfinite(cs).any() else -1
            if k >= 0 and self._better(float(cs[k]), here):
                self.ev.set_mode(i, cands[k])
                cost, improved = float(cs[k]), True
            else:
                cost = here
        return cost, improved

    def _try(self, changes: list[tuple[int, int]], cost: float) -> tuple[float, bool]:
        """Apply ``changes`` (level, mode) one level at a time; keep them if the cost drops."""
        old = [(i, self.ev.policy[i]) for i, _ in changes]
        for i, m in changes:
            self.ev.set_mode(i, m)
        new = self.cost_now(changes[-1][0])
        if math.isfinite(new) and self._better(new, cost):
            return new, True
        for i, m in reversed(old):
            self.ev.set_mode(i, m)
        return cost, False

    def block_moves(self, cost: float) -> tuple[float, bool]:
        """Slide every run boundary by 2+ levels, and switch every run to another mode; first
        improvement wins."""
        r = list(self.ev.policy)
        K = len(r) - 1
        runs: list[tuple[int, int]] = []
        start = 0
        for i in range(1, K + 2):
            if i == K + 1 or r[i] != r[start]:
                runs.append((start, i - 1))
                start = i
        for (a, b), (c, d) in zip(runs, runs[1:]):
            left, right = r[a], r[c]
            # one run grows into the other (a monotone policy stays monotone: runs keep their order)
            for s in range(2, d - c + 2):
                cost, ok = self._try([(c + t, left) for t in range(s)], cost)
                if ok:
                    return cost, True
            for s in range(2, b - a + 2):
                cost, ok = self._try([(b - t, right) for t in range(s)], cost)
                if ok:
                    return cost, True
        for a, b in runs:
            if b == a:
                continue  # a single level: a coordinate move
            hi = r[a - 1] if self.monotone and a > 0 else max(self.pool)
            lo = r[b + 1] if self.monotone and b < K else min(self.pool)
            for m in self.pool:
                if m == r[a] or not lo <= m <= hi:
                    continue
                cost, ok = self._try([(i, m) for i in range(a, b + 1)], cost)
                if ok:
                    return cost, True
        return cost, False

    def run(self) -> float:
        K = self.ev.K
        cost = self.cost_now(0)
        while self.sweeps < self.max_sweeps:
            order = range(K + 1) if self.sweeps % 2 == 0 else range(K, -1, -1)
            self.sweeps += 1
            cost, improved = self.sweep(order, cost)
            if improved:
                continue
            cost, improved = self.block_moves(cost)
            if not improved:
                break
        return cost


def descend(chain: LevelChain, costs: Costs, start: Sequence[int], pool: Sequence[int], *,
            monotone: bool, max_sweeps: int = 100) -> _Descent:
    """One local descent from ``start`` (coordinate sweeps, then block moves, until none improves)."""
    d = _Descender(PolicyEvaluator(chain, start), costs, pool, monotone, max_sweeps)
    cost = d.run()
    return _Descent(tuple(d.ev.policy), cost, d.evaluations, d.sweeps)


def _descend_task(args: tuple[QueueModel, int | None, Costs, tuple[int, ...], tuple[int, ...], bool, int]
                  ) -> _Descent:
    """One restart in a worker process (the chain is rebuilt there)."""
    model, h, costs, start, pool, monotone, max_sweeps = args
    return descend(LevelChain(model, h), costs, start, pool, monotone=monotone, max_sweeps=max_sweeps)


def default_starts(chain: LevelChain, costs: Costs, pool: Sequence[int], *, restarts: int, seed: int = 0
                   ) -> list[tuple[int, ...]]:
    """The best static fleet, a ramp from the largest mode at level 0 to the smallest at level K, and
    ``restarts - 2`` seeded random monotone policies (distinct ones only)."""
    K = chain.K
    ms = sorted(pool, reverse=True)
    statics = [(m,) * (K + 1) for m in ms]
    static_costs = [PolicyEvaluator(chain, s).rates().cost(costs) for s in statics]
    best = statics[int(np.nanargmin(static_costs))]
    starts = [best]
    if restarts >= 2 and len(ms) > 1:
        ramp = tuple(ms[min(len(ms) - 1, round(i * (len(ms) - 1) / max(K, 1)))] for i in range(K + 1))
        starts.append(ramp)
    rng = np.random.default_rng(seed)
    tries = 0
    while len(starts) < restarts and tries < 10 * restarts:
        tries += 1
        cand = tuple(sorted((int(x) for x in rng.choice(ms, size=K + 1)), reverse=True))
        if cand not in starts:
            starts.append(cand)
    return starts


def search_policies(model: QueueModel, costs: Costs, *, modes: Sequence[int] | None = None,
                    monotone: bool = False, h: int | None = None, chain: LevelChain | None = None,
                    starts: Sequence[Sequence[int]] | None = None, restarts: int = 3, seed: int = 0,
                    max_sweeps: int = 100, workers: Workers | None = None) -> LocalOptimum:
    """A locally optimal queue-length policy (module docstring).

    Parameters
    ----------
    model, costs
    modes
        Modes the policy may use (default: all the model's modes).
    monotone
        Search threshold policies only (r non-increasing).
    h, chain
        The chain to cost policies on: ``chain`` as given, else ``LevelChain(model, h)`` (h = None: exact).
    starts
        Starting policies (robots_at_level); default :func:`default_starts` with ``restarts`` of them.
    restarts, seed
        Number of default starts, and the seed of the random ones.
    max_sweeps
        Coordinate sweeps per start at most.
    workers
        ``map``-like callable to run the starts in parallel (None: one after another here).
    """
    pool = tuple(sorted({int(m) for m in (modes if modes is not None else model.modes)}, reverse=True))
    unknown = [m for m in pool if m not in model.modes]
    if not pool or unknown:
        raise InputError("modes", f"{list(unknown) or 'nothing'} is not a set of the model's modes "
                         f"{list(model.modes)}", "use modes listed under model.arrivals")
    if chain is None:
        chain = LevelChain(model, h)
    elif chain.model is not model:
        raise ValueError("chain belongs to another model")
    if starts is None:
        start_list = default_starts(chain, costs, pool, restarts=max(restarts, 1), seed=seed)
    else:
        start_list = [tuple(int(x) for x in s) for s in starts]
        for s in start_list:
            model.check_policy(QueueLengthPolicy(s))
            if monotone and not QueueLengthPolicy(s).is_monotone:
                raise InputError("starts", f"{s} is not monotone", "give non-increasing starting policies")
    if workers is None or len(start_list) == 1:
        results = [descend(chain, costs, s, pool, monotone=monotone, max_sweeps=max_sweeps) for s in start_list]
    else:
        tasks = [(model, chain.h, costs, s, pool, monotone, max_sweeps) for s in start_list]
        results = list(workers(_descend_task, tasks))  # type: ignore[arg-type]
    best = min(results, key=lambda r: r.cost if math.isfinite(r.cost) else math.inf)
    policy = QueueLengthPolicy(best.robots_at_level)
    if policy.is_monotone:
        policy = ThresholdPolicy(best.robots_at_level)
    return LocalOptimum(policy, best.cost, policy.is_monotone, monotone,
                        sum(r.evaluations for r in results), sum(r.sweeps for r in results),
                        tuple(QueueLengthPolicy(s) for s in start_list), chain.label)
