"""Hysteresis policies with a price on commands: the search and the Pareto curve of cost against commands.

A hysteresis policy (:class:`robotctl.model.HysteresisPolicy`) parks down to r_park(i) and resumes up to
r_resume(i); with the model's modes m_1 > ... > m_n, each vector is written by its thresholds T_k = the last
queue length at which it asks for m_k robots or more (-1: never), k = 1..n-1, non-decreasing in k, and
r_resume <= r_park is T^resume_k <= T^park_k. Every policy is evaluated **exactly**
(:func:`robotctl.model.solve_hysteresis`), the command rate included, and the cost is eq. (2)'s J plus
``costs.command`` x commands per second.

**Search.** Exhaustive over every pair of vectors while there are at most ``EXHAUSTIVE_PAIRS`` of them;
otherwise a descent over the thresholds: a move shifts T^park_k, T^resume_k or both by one level (pushing
the neighbouring thresholds that would break monotonicity), first improvement adopted; it starts from the
best static fleet and from the best plain threshold policy (r_resume = r_park). The descent is local: its
result is a policy no move improves, not a proven optimum.

**Pareto curve** (``commands_curve``): the policies minimising J + lambda x commands per robot per minute
for a ladder of prices lambda (each descent starting where the previous one stopped), the static fleets
(zero commands) and every policy costed on the way are pooled, and the curve is the subset no other pooled
policy beats on both axes: cost (J without the command term) and commands per robot per minute. Each
point is exact; the curve is exact where the search was exhaustive and otherwise the best found.

**Command budget.** ``max_commands_per_robot_min`` (a target like those of ``_targets``): the cheapest
policy found whose exact command rate is within the budget.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from robotctl.model import (
    CostBreakdown,
    Costs,
    HysteresisChain,
    HysteresisPolicy,
    InputError,
    Measures,
    QueueModel,
    cost_of,
    reduce_model,
    solve_hysteresis,
)

from ._thresholds import search_chain

#: Exhaustive search while the number of (park, resume) pairs is at most this.
EXHAUSTIVE_PAIRS = 3000
#: The price ladder of the Pareto curve, as multiples of (J static - J threshold) / (its commands).
PRICE_LADDER = (0.0, 1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0, 4.0)
#: A move must lower the objective by more than this (relative) to count.
REL_IMPROVEMENT = 1e-12

Progress = Callable[[int], None]


@dataclass(frozen=True)
class HysteresisPoint:
    """One policy, costed exactly.

    Attributes
    ----------
    policy : HysteresisPolicy
    measures : Measures
        ``commands_per_s`` and ``commands_per_robot_min`` included.
    cost : CostBreakdown
        J of eq. (2) with the command term (``cost.command``) when ``costs.command`` > 0.
    """

    policy: HysteresisPolicy
    measures: Measures
    cost: CostBreakdown

    @property
    def commands_per_robot_min(self) -> float:
        return self.measures.commands_per_robot_min

    @property
    def base_cost(self) -> float:
        """J without the command term (the cost axis of the Pareto curve)."""
        return self.cost.total - self.cost.command

    def to_dict(self) -> dict[str, object]:
        return {"park": list(self.policy.park), "resume": list(self.policy.resume),
                "commands_per_robot_min": self.commands_per_robot_min, "cost": self.base_cost,
                "cost_with_commands": self.cost.total}


@dataclass(frozen=True)
class HysteresisSearch:
    """What :func:`optimise_hysteresis` found.

    Attributes
    ----------
    best : HysteresisPoint
        The least J (command term included) within the command budget, if any.
    threshold : HysteresisPoint
        The best plain threshold policy found (r_resume = r_park), for comparison.
    static : HysteresisPoint
        The best static fleet.
    curve : tuple of HysteresisPoint
        The Pareto curve (module docstring), commands increasing, cost decreasing.
    exhaustive : bool
        True when every pair of vectors was costed (then ``best`` and ``curve`` are exact).
    evaluated : int
        Policies costed exactly.
    budget : float or None
        ``max_commands_per_robot_min``.
    within_budget : bool
        False when no policy costed meets the budget (``best`` is then the one with fewest commands).
    max_damping_cost : float or None
        The most damping may add to the plain threshold policy's J without the command term, as a fraction
        (:func:`choose_hysteresis`); None: no limit.
    """

    best: HysteresisPoint
    threshold: HysteresisPoint
    static: HysteresisPoint
    curve: tuple[HysteresisPoint, ...]
    exhaustive: bool
    evaluated: int
    budget: float | None
    within_budget: bool
    max_damping_cost: float | None = None

    @property
    def damping_cost(self) -> float:
        """What the chosen damping adds to the plain threshold policy's J (command term left out), as a
        fraction of it: 0 for the plain policy itself."""
        ref = self.threshold.base_cost
        return (self.best.base_cost - ref) / abs(ref) if ref else 0.0


def _vector(thresholds: Sequence[int], modes: Sequence[int], capacity: int) -> tuple[int, ...]:
    """The vector whose threshold for modes[k] (k < n - 1) is thresholds[k]; modes largest first."""
    out = []
    for i in range(capacity + 1):
        out.append(next((modes[k] for k, t in enumerate(thresholds) if t >= i), modes[-1]))
    return tuple(out)


def _thresholds(vector: Sequence[int], modes: Sequence[int]) -> tuple[int, ...]:
    return tuple(max((i for i, r in enumerate(vector) if r >= m), default=-1) for m in modes[:-1])


class _Costing:
    """Exact costs of hysteresis policies of one model, cached."""

    def __init__(self, model: QueueModel, costs: Costs, progress: Progress | None, *, dim: int | None = None) -> None:
        # exact reductions first (lumped phases: the same measures, a smaller chain); with ``dim`` the levels
        # are kept to at most that many states by the ordered-head chain (policies.search_chain)
        self.model = model = reduce_model(model).model
        self.costs = costs
        self.chain = HysteresisChain(model, None if dim is None else search_chain(model, dim=dim))
        self.cache: dict[tuple[tuple[int, ...], tuple[int, ...]], HysteresisPoint | None] = {}
        self.progress = progress

    def point(self, park: tuple[int, ...], resume: tuple[int, ...]) -> HysteresisPoint | None:
        key = (park, resume)
        if key not in self.cache:
            try:
                sol = solve_hysteresis(self.model, HysteresisPolicy(park, resume), chain=self.chain)
                ok = all(math.isfinite(x) for x in (sol.measures.p_loss, sol.measures.mean_response_served,
                                                        sol.measures.commands_per_s))
                self.cache[key] = HysteresisPoint(sol.policy, sol.measures, cost_of(sol.measures, self.costs)) \
                    if ok else None
            except (InputError, ValueError, ArithmeticError):
                self.cache[key] = None  # several closed classes, or a singular chain: not a candidate
            if self.progress is not None:
                self.progress(1)
        return self.cache[key]


def _pairs(modes: Sequence[int], capacity: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    vectors = [tuple(reversed(v)) for v in itertools.combinations_with_replacement(sorted(modes), capacity + 1)]
    return [(p, r) for p in vectors for r in vectors if all(b <= a for a, b in zip(p, r))]


def count_hysteresis_pairs(n_modes: int, capacity: int) -> int:
    """Pairs (park, resume) of non-increasing vectors over ``n_modes`` modes with resume <= park."""
    # vectors <-> non-decreasing threshold sequences in -1..K; pairs counted by brute force only when small
    vectors = math.comb(capacity + n_modes, n_modes - 1)
    if vectors > 200:
        return vectors * vectors  # an upper bound, enough to decide that enumeration is out of reach
    return len(_pairs(range(n_modes), capacity))


class _Descent:
    """Coordinate descent over the thresholds of (park, resume) for one objective."""

    def __init__(self, costing: _Costing, modes: Sequence[int], objective: Callable[[HysteresisPoint], float]) -> None:
        self.costing = costing
        self.modes = tuple(modes)
        self.K = costing.model.capacity
        self.objective = objective

    def value(self, tp: tuple[int, ...], tr: tuple[int, ...]) -> tuple[float, HysteresisPoint | None]:
        pt = self.costing.point(_vector(tp, self.modes, self.K), _vector(tr, self.modes, self.K))
        return (math.inf, None) if pt is None else (self.objective(pt), pt)

    def _moves(self, tp: tuple[int, ...], tr: tuple[int, ...]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        out = []
        K = self.K
        for k in range(len(tp)):
            for which in ("park", "resume", "both"):
                for step in (1, -1):
                    p, r = list(tp), list(tr)
                    if which in ("park", "both"):
                        p[k] += step
                    if which in ("resume", "both"):
                        r[k] += step
                    if not all(-1 <= x <= K for x in (*p, *r)):
                        continue
                    for vec in (p, r):  # push neighbours to keep thresholds non-decreasing in k
                        for j in range(k + 1, len(vec)):
                            vec[j] = max(vec[j], vec[k])
                        for j in range(k - 1, -1, -1):
                            vec[j] = min(vec[j], vec[k])
                    if which == "park":
                        r = [min(a, b) for a, b in zip(r, p)]  # park lowered below resume: resume follows
                    if any(b > a for a, b in zip(p, r)):
                        continue
                    out.append((tuple(p), tuple(r)))
        return out

    def run(self, tp: tuple[int, ...], tr: tuple[int, ...], max_evals: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        best, _ = self.value(tp, tr)
        start = len(self.costing.cache)
        improved = True
        while improved and len(self.costing.cache) - start < max_evals:
            improved = False
            for p, r in self._moves(tp, tr):
                v, _ = self.value(p, r)
                if v < best - REL_IMPROVEMENT * abs(best):
                    best, tp, tr, improved = v, p, r, True
                if len(self.costing.cache) - start >= max_evals:
                    break
        return tp, tr


def _priced(price: float) -> Callable[[HysteresisPoint], float]:
    """J without the command term plus ``price`` x commands per robot per minute."""
    def objective(p: HysteresisPoint) -> float:
        return p.base_cost + price * p.commands_per_robot_min
    return objective


def _front(points: Sequence[HysteresisPoint]) -> tuple[HysteresisPoint, ...]:
    """The points no other beats on both commands per robot per minute and base cost."""
    ordered = sorted(points, key=lambda p: (p.commands_per_robot_min, p.base_cost))
    out: list[HysteresisPoint] = []
    for p in ordered:
        if not out or p.base_cost < out[-1].base_cost - 1e-12 * abs(out[-1].base_cost):
            out.append(p)
    return tuple(out)


def optimise_hysteresis(model: QueueModel, costs: Costs, *, modes: Sequence[int] | None = None,
                        max_commands_per_robot_min: float | None = None, start: Sequence[int] | None = None,
                        curve: bool = False, method: str = "auto", max_evals: int = 4000,
                        progress: Progress | None = None) -> HysteresisSearch:
    """The hysteresis policy of least J (command term included) within the command budget (module docstring).

    Parameters
    ----------
    model, costs
        ``costs.command`` prices each park or resume command.
    modes
        The robot counts the vectors may use (default: every mode of the arrivals).
    max_commands_per_robot_min
        The command budget, or None.
    start
        A plain threshold policy r(0..K) to start the descent from (e.g. the optimum of
        :func:`robotctl.policies.optimise`); the best static fleet is always a start too.
    curve
        Also trace the Pareto curve of cost against commands (the price ladder of the module docstring).
    method
        ``auto``, ``exhaustive`` or ``local``.
    max_evals
        Bound on the exact evaluations of one descent.
    progress
        Called with 1 for each policy costed.
    """
    if method not in ("auto", "exhaustive", "local"):
        raise InputError("method", f"unknown search method {method!r}", "use auto, exhaustive or local")
    if max_commands_per_robot_min is not None and (
            isinstance(max_commands_per_robot_min, bool) or not math.isfinite(max_commands_per_robot_min)
            or max_commands_per_robot_min < 0):
        raise InputError("targets.max_commands_per_robot_min",
                         f"must be a finite number >= 0, got {max_commands_per_robot_min!r}",
                         "give the most park and resume commands per robot per minute you accept, e.g. 6")
    pool = tuple(sorted(set(model.modes if modes is None else modes), reverse=True))
    unknown = sorted(set(pool) - set(model.modes))
    if unknown or not pool:
        raise InputError("modes", f"{list(unknown) or 'none'} not usable (defined: {list(model.modes)})",
                         "choose robot counts the arrivals define")
    K = model.capacity
    costing = _Costing(model, costs, progress)
    statics = [costing.point((m,) * (K + 1), (m,) * (K + 1)) for m in pool]
    statics_ok = [s for s in statics if s is not None]
    if not statics_ok:
        raise InputError("model", "no static fleet has a stationary solution", "check the model's rates")
    static = min(statics_ok, key=lambda p: p.cost.total)
    n_pairs = count_hysteresis_pairs(len(pool), K)
    exhaustive = method == "exhaustive" or (method == "auto" and n_pairs <= EXHAUSTIVE_PAIRS)
    budget = max_commands_per_robot_min

    def feasible(p: HysteresisPoint) -> bool:
        return budget is None or p.commands_per_robot_min <= budget * (1 + 1e-12)

    if exhaustive:
        for p, r in _pairs(pool, K):
            costing.point(p, r)
    else:
        descent = _Descent(costing, pool, lambda p: p.cost.total)
        starts = [_thresholds(static.policy.park, pool)]
        if start is not None:
            starts.append(_thresholds(tuple(start), pool))
        for t in starts:
            descent.run(t, t, max_evals)
        if curve or budget is not None:
            threshold_pts = [p for p in costing.cache.values() if p is not None and p.policy.is_threshold]
            thr = min(threshold_pts, key=lambda p: p.base_cost)
            scale = max(static.base_cost - thr.base_cost, 1e-9 * abs(thr.base_cost)) / max(
                thr.commands_per_robot_min, 1e-9)
            tp = tr = _thresholds(thr.policy.park, pool)
            ladder = PRICE_LADDER
            for mult in ladder:
                tp, tr = _Descent(costing, pool, _priced(mult * scale)).run(tp, tr, max_evals)
            if budget is not None:
                found = [p for p in costing.cache.values() if p is not None and feasible(p)]
                seed = min(found, key=lambda p: p.cost.total) if found else static
                big = 1e3 * max(abs(static.cost.total), 1.0)
                t0p, t0r = _thresholds(seed.policy.park, pool), _thresholds(seed.policy.resume, pool)
                _Descent(costing, pool, lambda p: p.cost.total + big * max(0.0, p.commands_per_robot_min - budget)
                         ).run(t0p, t0r, max_evals)
    points = [p for p in costing.cache.values() if p is not None]
    ok = [p for p in points if feasible(p)]
    within = bool(ok)
    best = min(ok, key=lambda p: p.cost.total) if ok else min(points, key=lambda p: p.commands_per_robot_min)
    thresholds_pts = [p for p in points if p.policy.is_threshold]
    threshold = min(thresholds_pts, key=lambda p: p.cost.total)
    return HysteresisSearch(best, threshold, static, _front(points) if curve else (), exhaustive,
                            len(costing.cache), budget, within)


def least_cost_at(search: HysteresisSearch, budget: float) -> HysteresisPoint | None:
    """The cheapest point of the curve within ``budget`` commands per robot per minute (None if none)."""
    ok = [p for p in search.curve if p.commands_per_robot_min <= budget]
    return min(ok, key=lambda p: p.base_cost) if ok else None


def with_costs(point: HysteresisPoint, costs: Costs) -> HysteresisPoint:
    """The same point costed with other coefficients."""
    return replace(point, cost=cost_of(point.measures, costs))


#: A refit's choice keeps each level of the chain to at most this many states (times the robot counts the
#: policy reaches there): the exact chain when it fits, else the ordered-head chain (an approximation).
REFIT_DIM = 8
#: Largest step of the refit's pattern search over (park shift, resume shift, spread), halved down to 1.
PATTERN_STEP = 4
#: Exact evaluations a refit's choice may spend on the pattern search, then on the descent from its best.
PATTERN_EVALS = 24
DESCENT_EVALS = 16


def _shaped(tp: Sequence[int], counts: Sequence[int], K: int, park_shift: int, resume_shift: int,
            spread: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Thresholds of a plain policy reshaped: each group of modes that switch at the same level is spread
    over ``spread`` levels (the larger mode first), park thresholds moved up by ``park_shift`` and resume
    thresholds down by ``resume_shift`` (clamped to -1..K, non-decreasing, resume <= park)."""
    park, resume = [], []
    k = 0
    while k < len(tp):
        g = k
        while g < len(tp) and tp[g] == tp[k]:
            g += 1
        size = g - k
        for j in range(k, g):
            extra = (spread * (j - k)) // size if size > 1 else 0
            park.append(tp[j] if tp[j] < 0 else min(K, tp[j] + park_shift + extra))
            resume.append(tp[j] if tp[j] < 0 else max(0, min(K, tp[j] - resume_shift + extra)))
        k = g
    for vec in (park, resume):
        for j in range(1, len(vec)):
            vec[j] = max(vec[j], vec[j - 1])
    resume = [min(a, b) for a, b in zip(park, resume)]
    del counts
    return tuple(park), tuple(resume)


def choose_hysteresis(model: QueueModel, costs: Costs, start: Sequence[int], *,
                      max_commands_per_robot_min: float | None = None,
                      max_damping_cost: float | None = None, modes: Sequence[int] | None = None,
                      chain: HysteresisChain | None = None, max_evals: int = PATTERN_EVALS,
                      descent_evals: int = DESCENT_EVALS) -> HysteresisSearch:
    """The quick choice of a refit, every candidate costed on the chain with the robots in the state (J with
    ``costs.command`` x commands): exact when each level of the reduced model has at most ``REFIT_DIM``
    states, else on the ordered-head chain of the largest depth that keeps them so (``model._levels``).

    From the plain threshold policy ``start`` (the refit's threshold optimum), a pattern search over three
    integers: park thresholds moved up by p, resume thresholds down by q, and every group of robots that
    switch at one level spread over s levels (:func:`_shaped`); steps 4, 2, 1; objective J plus a penalty
    on commands above the budget. The static fleets (no commands) are candidates too. Then a descent over
    the thresholds (as in :func:`optimise_hysteresis`) from the best point so far, ``descent_evals`` solves
    at most. The least J within the budget wins (the fewest commands when none is within it). At most
    ``max_evals`` + ``descent_evals`` + N solves.

    ``modes`` (default: the model's) are the active counts the policies may use; ``start`` must use only
    them. ``max_damping_cost`` (a fraction, e.g. 0.025) bounds what the damping may cost: only policies whose J
    without the command term is at most (1 + max_damping_cost) x the plain threshold policy's are chosen
    (the plain policy always qualifies), so the budget is met only where it is cheap enough and
    ``within_budget`` says when it is not.
    """
    K = model.capacity
    pool = tuple(sorted(set(model.modes if modes is None else modes), reverse=True))
    costing = _Costing(model, costs, None, dim=REFIT_DIM)
    if chain is not None and chain.model is model and chain.chain.max_dim <= REFIT_DIM:
        costing.model, costing.chain = model, chain
    statics = [p for p in (costing.point((m,) * (K + 1), (m,) * (K + 1)) for m in pool) if p is not None]
    if not statics:
        raise InputError("model", "no static fleet has a stationary solution", "check the model's rates")
    static = min(statics, key=lambda p: p.cost.total)
    budget = max_commands_per_robot_min
    big = 1e3 * max(abs(static.cost.total), 1.0)
    tp = _thresholds(tuple(start), pool)
    plain_point = costing.point(_vector(tp, pool, K), _vector(tp, pool, K))
    # the walk prices excess commands softly (twice what the best static fleet saves per command over the
    # plain policy), so that it passes through policies just above the budget towards those within it
    # instead of stopping at a static fleet; the final choice is strict
    soft = 0.0
    if budget is not None and plain_point is not None and plain_point.commands_per_robot_min > budget:
        soft = 2.0 * max(static.cost.total - plain_point.cost.total, 0.0) / (
            plain_point.commands_per_robot_min - budget)

    # the damping's price limit: a policy whose J (command term left out) is above it is never chosen
    limit = math.inf
    if max_damping_cost is not None and plain_point is not None:
        limit = (plain_point.base_cost + max_damping_cost * abs(plain_point.base_cost)) * (1 + 1e-12)

    def walk(cap: float) -> None:
        """The pattern walk, then the descent, treating a policy above ``cap`` as infeasible."""

        def value(x: tuple[int, int, int]) -> float:
            p, r = _shaped(tp, (), K, *x)
            pt = costing.point(_vector(p, pool, K), _vector(r, pool, K))
            if pt is None or pt.base_cost > cap:
                return math.inf
            excess = 0.0 if budget is None else max(0.0, pt.commands_per_robot_min - budget)
            return pt.cost.total + soft * excess

        x = (0, 0, 0)
        best = value(x)
        step = PATTERN_STEP
        spent = len(costing.cache)
        while step >= 1 and len(costing.cache) - spent < max_evals:
            moved = False
            for d in range(3):
                for sign in (1, -1):
                    y = list(x)
                    y[d] = max(0, y[d] + sign * step)
                    cand = (y[0], y[1], y[2])
                    if cand == x:
                        continue
                    v = value(cand)
                    if v < best - REL_IMPROVEMENT * abs(best):
                        x, best, moved = cand, v, True
                    if len(costing.cache) - spent >= max_evals:
                        break
            if not moved:
                step //= 2

        # then a short descent over the thresholds themselves from the best point so far (statics included)
        def penalised(p: HysteresisPoint) -> float:
            if p.base_cost > cap:
                return math.inf
            excess = 0.0 if budget is None else max(0.0, p.commands_per_robot_min - budget)
            return p.cost.total + big * excess

        seed = min((p for p in costing.cache.values() if p is not None), key=penalised)
        _Descent(costing, pool, penalised).run(_thresholds(seed.policy.park, pool),
                                               _thresholds(seed.policy.resume, pool), descent_evals)

    def within(cap: float) -> list[HysteresisPoint]:
        return [p for p in costing.cache.values() if p is not None and p.base_cost <= cap
                and (budget is None or p.commands_per_robot_min <= budget * (1 + 1e-12))]

    # the walk through policies of any price finds the budget where it is cheap; only when what it found
    # is above the limit does a second walk, bounded by the limit, look for the fewest commands within it
    walk(math.inf)
    if math.isfinite(limit) and not within(limit):
        walk(limit)
    points = [p for p in costing.cache.values() if p is not None]
    plain = _vector(tp, pool, K)
    threshold = costing.point(plain, plain) or static
    allowed = [p for p in points if p.base_cost <= limit] or [threshold]
    ok = [p for p in allowed if budget is None or p.commands_per_robot_min <= budget * (1 + 1e-12)]
    chosen = min(ok, key=lambda p: p.cost.total) if ok else min(allowed, key=lambda p: p.commands_per_robot_min)
    return HysteresisSearch(chosen, threshold, static, _front(points), False, len(costing.cache), budget, bool(ok),
                            max_damping_cost)
