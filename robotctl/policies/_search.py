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
by two or more levels (one run grows into the other), and every run switches to a neighbouring run's
mode as a whole. A slide is walked level by level, each step costing one level of a pass, so all its
lengths together cost one pass.

**Restarts.** The descent starts from the best static fleet and from other policies (the best two-mode
threshold policy between the largest and the smallest mode, seeded random monotone policies of few runs;
on an approximate chain also the optimum of a cheap exponential surrogate, :func:`surrogate`); the best
local optimum wins. Starts
are independent: they can run in parallel processes through ``workers`` (a ``map``-like callable, as
scipy's ``differential_evolution`` takes; the command line passes a process pool with one BLAS thread
per process). Run one after another, a descent that reaches a local optimum an earlier start already
confirmed stops there (every move from it has been tried and none improves), so the starts find the
same optima as alone for fewer evaluations.

With ``monotone=True`` every move keeps r non-increasing (threshold policies only); otherwise any mode
may sit at any level, and the result says whether the optimum found is monotone. The search is local:
its result is a policy no coordinate or block move improves, not a proven global optimum. Exhaustive
enumeration (``robotctl.policies.optimise`` with ``method="exhaustive"``) remains the reference where it
is affordable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from robotctl.model import (
    PH,
    Costs,
    InputError,
    LevelChain,
    PolicyEvaluator,
    QueueLengthPolicy,
    QueueModel,
    Rates,
    ThresholdPolicy,
)

#: ``map``-like callable: workers(fn, iterable) -> iterable of fn(item), in order.
Workers = Callable[[Callable[..., object], Iterable[object]], Iterable[object]]
#: Called with the number of policies costed since the last call.
Progress = Callable[[int], None]

#: A move must lower the cost by more than this (relative) to count: rounding must not make it cycle.
REL_IMPROVEMENT = 1e-12
#: A slide (block move) stops after this many steps in a row that do not beat the best prefix so far. The
#: cost along a slide was unimodal in every one measured: 141 slides (2,328 steps) of the searches on 20
#: models with two-phase and hyperexponential lives, 8-16 robots, K = 20-40, never improved again after a
#: step that did not improve. At K = 100 a slide of a boundary over the upper levels was most of a descent.
WALK_PATIENCE = 4


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
        Policies costed (every candidate of every move, the current policy included).
    distinct : int
        Distinct policies among them (summed over the starts).
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
    distinct: int
    sweeps: int
    starts: tuple[QueueLengthPolicy, ...]
    chain: str


@dataclass(frozen=True)
class _Descent:
    robots_at_level: tuple[int, ...]
    cost: float
    evaluations: int
    sweeps: int
    distinct: int


def _allowed(policy: list[int], i: int, pool: Sequence[int], monotone: bool) -> list[int]:
    if not monotone:
        return list(pool)
    hi = policy[i - 1] if i > 0 else max(pool)
    lo = policy[i + 1] if i + 1 < len(policy) else min(pool)
    return [m for m in pool if lo <= m <= hi]


class _Descender:
    """Coordinate and block moves from one start on one evaluator."""

    def __init__(self, evaluator: PolicyEvaluator, costs: Costs, pool: Sequence[int], monotone: bool,
                 max_sweeps: int, progress: Progress | None = None,
                 known: dict[tuple[int, ...], float] | None = None,
                 costed: dict[tuple[int, ...], float] | None = None, static_floor: float | None = None) -> None:
        self.ev = evaluator
        self.costs = costs
        self.pool = tuple(sorted(pool, reverse=True))
        self.monotone = monotone
        self.max_sweeps = max_sweeps
        #: a lower bound on every static fleet's cost on this chain, when the caller knows one
        self.static_floor = static_floor
        self.evaluations = 0
        self.sweeps = 0
        self.progress = progress
        self._reported = 0
        self.seen: set[tuple[int, ...]] = set()
        #: local optima already confirmed on this chain (by earlier starts), with their costs: a descent that
        #: reaches one stops there, as the moves from it are the same and none improves
        self.known: dict[tuple[int, ...], float] = {} if known is None else known
        #: costs of whole policies already costed on this chain (a slide's steps, earlier starts): a run switch
        #: to one of them (at a two-run policy, the static fleet a slide of the whole run already reached) is
        #: decided without a pass
        self.costed: dict[tuple[int, ...], float] = {} if costed is None else costed

    def _at_known(self) -> float | None:
        """The cost of the current policy if it is a known local optimum (else None)."""
        return self.known.get(tuple(self.ev.policy))

    def _report(self) -> None:
        if self.progress is not None and self.evaluations > self._reported:
            self.progress(self.evaluations - self._reported)
            self._reported = self.evaluations

    def _note(self, i: int, modes: Sequence[int]) -> None:
        base = list(self.ev.policy)
        for m in modes:
            base[i] = m
            self.seen.add(tuple(base))

    def cost_now(self, i: int) -> float:
        """The current policy's cost, censored on level i (cheap next to a level just changed)."""
        self.evaluations += 1
        key = tuple(self.ev.policy)
        self.seen.add(key)
        cost = float(self.ev.costs_at(i, [self.ev.policy[i]], self.costs)[0])
        self.costed[key] = cost
        return cost

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
            self._note(i, cands)
            here = float(cs[cands.index(self.ev.policy[i])])
            k = int(np.nanargmin(np.where(np.isfinite(cs), cs, np.nan))) if np.isfinite(cs).any() else -1
            if k >= 0 and self._better(float(cs[k]), here):
                self.ev.set_mode(i, cands[k])
                cost, improved = float(cs[k]), True
                if self._at_known() is not None:
                    break
            else:
                cost = here
        return cost, improved

    def _try(self, changes: list[tuple[int, int]], cost: float) -> tuple[float, bool]:
        """Apply ``changes`` (level, mode) one level at a time; keep them if the cost drops. A policy whose
        cost is known (``costed``) is decided from it, and the evaluator is touched only to adopt it."""
        target = list(self.ev.policy)
        for i, m in changes:
            target[i] = m
        known = self.costed.get(tuple(target))
        if known is None and self.static_floor is not None and len(set(target)) == 1 \
                and not self._better(self.static_floor, cost):
            return cost, False  # a static fleet, and none costs less than the floor: no pass needed
        if known is not None:
            if not (math.isfinite(known) and self._better(known, cost)):
                return cost, False
            for i, m in changes:
                self.ev.set_mode(i, m)
            return known, True
        old = [(i, self.ev.policy[i]) for i, _ in changes]
        for i, m in changes:
            self.ev.set_mode(i, m)
        new = self.cost_now(changes[-1][0])
        if math.isfinite(new) and self._better(new, cost):
            return new, True
        for i, m in reversed(old):
            self.ev.set_mode(i, m)
        return cost, False

    def _walk(self, levels: list[int], mode: int, cost: float) -> tuple[float, bool]:
        """Set ``levels`` to ``mode`` one after the other, costing the policy after each step (each step
        re-passes one level, as the levels are adjacent; a step onto a policy already costed takes its cost
        and leaves the passes to the next step); keep the best prefix of two or more levels if it lowers the
        cost, else restore. The walk stops after ``WALK_PATIENCE`` steps in a row that do not beat the best so
        far."""
        old = [self.ev.policy[i] for i in levels]
        best_k, best = 0, cost
        worse = 0
        for k, i in enumerate(levels, start=1):
            self.ev.set_mode(i, mode)
            known = self.costed.get(tuple(self.ev.policy))
            c = self.cost_now(i) if known is None else known
            if k >= 2 and math.isfinite(c) and self._better(c, best):
                best_k, best, worse = k, c, 0
            elif k >= 2:
                worse += 1
                if worse >= WALK_PATIENCE:
                    break
        for i, m in zip(levels[best_k:], old[best_k:]):
            self.ev.set_mode(i, m)
        return (best, True) if best_k else (cost, False)

    def block_moves(self, cost: float) -> tuple[float, bool]:
        """Slide every run boundary by two or more levels (one run grows into its neighbour, up to the
        whole neighbour), and switch every run of two or more levels to a neighbouring run's mode (the run
        disappears); first improvement wins. Runs keep their order, so monotone policies stay monotone."""
        r = list(self.ev.policy)
        K = len(r) - 1
        runs: list[tuple[int, int]] = []
        start = 0
        for i in range(1, K + 2):
            if i == K + 1 or r[i] != r[start]:
                runs.append((start, i - 1))
                start = i
        for (a, b), (c, d) in zip(runs, runs[1:]):
            if d > c:
                cost, ok = self._walk(list(range(c, d + 1)), r[a], cost)
                if ok:
                    return cost, True
            if b > a:
                cost, ok = self._walk(list(range(b, a - 1, -1)), r[c], cost)
                if ok:
                    return cost, True
        for k, (a, b) in enumerate(runs):
            if b == a:
                continue  # a single level: a coordinate move
            neighbours = {r[runs[k - 1][0]] if k > 0 else None, r[runs[k + 1][0]] if k + 1 < len(runs) else None}
            for m in sorted(x for x in neighbours if x is not None):
                cost, ok = self._try([(i, m) for i in range(a, b + 1)], cost)
                if ok:
                    return cost, True
        return cost, False

    def run(self) -> float:
        K = self.ev.K
        hit = self._at_known()
        if hit is not None:  # a start that an earlier descent ended on: nothing to do
            return hit
        cost = self.cost_now(0)
        while self.sweeps < self.max_sweeps:
            order = range(K + 1) if self.sweeps % 2 == 0 else range(K, -1, -1)
            self.sweeps += 1
            cost, improved = self.sweep(order, cost)
            self._report()
            if improved:
                hit = self._at_known()
                if hit is not None:
                    return hit
                continue
            cost, improved = self.block_moves(cost)
            self._report()
            if not improved:
                self.known[tuple(self.ev.policy)] = cost  # confirmed: no coordinate or block move improves it
                break
            hit = self._at_known()
            if hit is not None:
                return hit
        return cost


def descend(chain: LevelChain, costs: Costs, start: Sequence[int], pool: Sequence[int], *,
            monotone: bool, max_sweeps: int = 100, progress: Progress | None = None,
            known: dict[tuple[int, ...], float] | None = None,
            costed: dict[tuple[int, ...], float] | None = None, static_floor: float | None = None) -> _Descent:
    """One local descent from ``start`` (coordinate sweeps, then block moves, until none improves).
    ``known``: local optima confirmed by earlier descents on ``chain`` (policy -> cost), shared and extended:
    the descent stops when it reaches one (the moves from there are those already tried). ``costed``: costs
    of whole policies costed on ``chain`` (policy -> cost), shared and extended: a run switch to one of them
    needs no pass. ``static_floor``: no static fleet costs less on ``chain`` (the caller's bound): a run
    switch onto a static fleet that could not beat the current cost is not costed."""
    d = _Descender(PolicyEvaluator(chain, start), costs, pool, monotone, max_sweeps, progress, known, costed,
                   static_floor)
    cost = d.run()
    return _Descent(tuple(d.ev.policy), cost, d.evaluations, d.sweeps, len(d.seen))


def _descend_task(args: tuple[QueueModel, int | None, Costs, tuple[int, ...], tuple[int, ...], bool, int,
                              float | None]) -> _Descent:
    """One restart in a worker process (the chain is rebuilt there)."""
    model, h, costs, start, pool, monotone, max_sweeps, static_floor = args
    return descend(LevelChain(model, h), costs, start, pool, monotone=monotone, max_sweeps=max_sweeps,
                   static_floor=static_floor)


def best_two_mode(chain: LevelChain, costs: Costs, high: int, low: int) -> tuple[tuple[int, ...], float]:
    """The best policy running ``high`` robots up to some threshold and ``low`` above it, found by one walk
    of the threshold down from K (each step re-passes one level)."""
    K = chain.K
    ev = PolicyEvaluator(chain, (high,) * (K + 1))
    best_t, best = K, float(ev.costs_at(K, [high], costs)[0])
    for t in range(K, 0, -1):  # levels t..K run ``low``
        ev.set_mode(t, low)
        c = float(ev.costs_at(t, [low], costs)[0])
        if c < best:
            best_t, best = t - 1, c
    return tuple(high if i <= best_t else low for i in range(K + 1)), best


#: Up to this many modes, :func:`best_static_fleet` costs every static fleet.
ALL_STATICS = 8
#: On chains whose levels have at most this many states, :func:`best_static_fleet` costs every fleet in one
#: stacked pass (``PolicyEvaluator.static_rates``): 16 fleets on the exponential surrogate at K = 50 (4
#: states a level) in 0.05 s, against 0.13 s for the 9 of them a ternary search costs one pass at a time.
STACKED_STATIC_DIM = 32


def best_static_fleet(chain: LevelChain, costs: Costs, pool: Sequence[int], *, every: bool = False
                      ) -> tuple[int, dict[int, float]]:
    """The static fleet of least J on ``chain`` (r robots at every level, r in ``pool``), and the costs of
    those costed (a fleet that cannot be solved costs inf): every one on a chain of small levels (in one
    stacked pass, ``STACKED_STATIC_DIM``), with ``every`` or up to ``ALL_STATICS`` modes; else a ternary
    search over r (about 2 log_1.5(n) fleets instead of n), which finds the minimum when J is unimodal in r
    (as it usually is: more robots lose more pages and cost more, fewer starve the indexer) and a local
    minimum otherwise. One evaluator costs them all."""
    K = chain.K
    ms = sorted(pool)
    ev = PolicyEvaluator(chain, (ms[-1],) * (K + 1))
    costed: dict[int, float] = {}
    if chain.max_dim <= STACKED_STATIC_DIM:  # every fleet, in one pass
        try:
            totals = [Rates(row, None).cost(costs) for row in ev.static_rates(ms)]
        except (np.linalg.LinAlgError, ValueError, ArithmeticError):
            totals = [math.inf] * len(ms)
        costed = {m: float(c) if math.isfinite(c) else math.inf for m, c in zip(ms, totals)}
        return min(costed, key=lambda m: (costed[m], -m)), costed

    def cost(k: int) -> float:
        m = ms[k]
        if m not in costed:
            c = ev.cost((m,) * (K + 1), costs)
            costed[m] = c if math.isfinite(c) else math.inf
        return costed[m]

    lo, hi = 0, len(ms) - 1
    if len(ms) > ALL_STATICS and not every:
        while hi - lo > 3:
            a, b = lo + (hi - lo) // 3, hi - (hi - lo) // 3
            if cost(a) < cost(b):
                hi = b - 1
            elif cost(a) > cost(b):
                lo = a + 1
            else:  # equal: the minimum lies between them (or the costs are flat there)
                lo, hi = a, b
    for k in range(lo, hi + 1):
        cost(k)
    return min(costed, key=lambda m: (costed[m], -m)), costed


def default_starts(chain: LevelChain, costs: Costs, pool: Sequence[int], *, restarts: int, seed: int = 0,
                   statics: bool = True, static: Mapping[int, float] | None = None) -> list[tuple[int, ...]]:
    """The best static fleet, the best two-mode threshold policy between the largest and the smallest mode
    (:func:`best_two_mode`), and ``restarts - 2`` seeded random monotone policies of at most three runs
    (distinct ones only): starts with few runs keep block moves cheap. ``statics=False`` leaves out the
    first two (the caller has its own); ``static``: static fleets' costs on ``chain`` when the caller has
    them (some or all of them, :func:`best_static_fleet`): the best of those given."""
    K = chain.K
    ms = sorted(pool, reverse=True)
    starts: list[tuple[int, ...]] = []
    if statics:
        fleet_costs = best_static_fleet(chain, costs, ms, every=True)[1] if static is None else static
        best = min((m for m in ms if m in fleet_costs),
                   key=lambda m: fleet_costs[m] if math.isfinite(fleet_costs[m]) else math.inf)
        starts.append((best,) * (K + 1))
        if restarts >= 2 and len(ms) > 1:
            two, _ = best_two_mode(chain, costs, ms[0], ms[-1])
            if two not in starts:
                starts.append(two)
    rng = np.random.default_rng(seed)
    tries = 0
    while len(starts) < restarts and tries < 10 * restarts:
        tries += 1
        chosen = sorted((int(x) for x in rng.choice(ms, size=min(len(ms), 3), replace=False)), reverse=True)
        cuts = sorted(int(x) for x in rng.integers(0, K + 1, size=len(chosen) - 1))
        bounds = [0, *cuts, K + 1]
        cand = tuple(chosen[j] for j in range(len(chosen)) for _ in range(bounds[j], bounds[j + 1]))
        if cand not in starts:
            starts.append(cand)
    return starts


def surrogate(model: QueueModel) -> QueueModel:
    """``model`` with its obsolescence law replaced by the exponential law of the same mean: a cheap chain
    (one phase per waiting page) whose local optima are good *starting points* for the search on the real
    chain. Never used to report a cost."""
    law = model.obsolescence
    if law is None or law.order == 1:
        return model
    return replace(model, obsolescence=PH.exponential(1.0 / law.mean))


def search_policies(model: QueueModel, costs: Costs, *, modes: Sequence[int] | None = None,
                    monotone: bool = False, h: int | None = None, chain: LevelChain | None = None,
                    starts: Sequence[Sequence[int]] | None = None, restarts: int = 3, seed: int = 0,
                    max_sweeps: int = 100, workers: Workers | None = None,
                    progress: Progress | None = None, static_floor: float | None = None) -> LocalOptimum:
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
    progress
        Called with the number of policies costed as the search goes.
    static_floor
        A lower bound on every static fleet's cost on the chain (:func:`descend`), when the caller has one.
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
        known: dict[tuple[int, ...], float] = {}  # local optima confirmed so far: later starts stop on them
        costed: dict[tuple[int, ...], float] = {}  # whole policies costed so far, by any start
        results = [descend(chain, costs, s, pool, monotone=monotone, max_sweeps=max_sweeps, progress=progress,
                           known=known, costed=costed, static_floor=static_floor)
                   for s in start_list]
    else:
        tasks = [(model, chain.h, costs, s, pool, monotone, max_sweeps, static_floor) for s in start_list]
        results = []
        for res in workers(_descend_task, tasks):
            assert isinstance(res, _Descent)
            results.append(res)
            if progress is not None:
                progress(res.evaluations)
    best = min(results, key=lambda r: r.cost if math.isfinite(r.cost) else math.inf)
    policy = QueueLengthPolicy(best.robots_at_level)
    if policy.is_monotone:
        policy = ThresholdPolicy(best.robots_at_level)
    return LocalOptimum(policy, best.cost, policy.is_monotone, monotone, sum(r.evaluations for r in results),
                        sum(r.distinct for r in results), sum(r.sweeps for r in results),
                        tuple(QueueLengthPolicy(s) for s in start_list), chain.label)
