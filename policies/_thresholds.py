"""Cost-optimal multi-threshold policies (paper 000, Sections 2 and 7).

For a set of modes m_1 > ... > m_n, the paper's policy runs m_r robots on levels (j_{r-1}, j_r] with
j_0 = -1, j_n = K and 0 <= j_1 <= ... <= j_{n-1} <= K - 1: the largest mode runs at level 0, the
smallest at level K, and intermediate modes may be empty. :func:`optimise_thresholds` finds the best
thresholds for one set of modes; :func:`optimise` the best over all subsets of the model's modes,
with the static costs C_r and the relative profit R = (1 - C* / min_r C_r) 100% of Section 7.

Two search methods:

``exhaustive``
    Every threshold vector (C(K + n - 1, n - 1) of them per subset); distinct policies are solved once.
``local``
    For one subset: coordinate descent on the thresholds, each moved by +-1 until no move lowers the
    cost. Over all subsets (:func:`optimise`): steepest descent over non-increasing robots_at_level from
    the best static fleet, each step setting one level to another mode between its neighbours' modes. Much cheaper
    for many modes and large K; it may stop at a local optimum, and says so (``exact=False``).

``auto`` searches exhaustively while the number of distinct policies is at most ``EXHAUSTIVE_LIMIT``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from robotctl.model import (
    CostBreakdown,
    Costs,
    InputError,
    Measures,
    PreparedModel,
    QueueModel,
    Solution,
    ThresholdPolicy,
    cost_of,
    prepare,
    solve,
)

SEARCH_METHODS = ("auto", "exhaustive", "local")
#: ``auto`` searches exhaustively while there are at most this many threshold vectors (or policies).
EXHAUSTIVE_LIMIT = 5_000

Progress = Callable[[int], None]


@dataclass(frozen=True)
class ThresholdOptimum:
    """The best thresholds for one set of modes.

    Attributes
    ----------
    modes : tuple of int
        The modes searched, largest first.
    thresholds : tuple of int
        The paper's j_1 <= ... <= j_{n-1} for ``modes`` (empty for one mode).
    policy : ThresholdPolicy
    cost : CostBreakdown
    measures : Measures
    solver_method : str
        The exact solver's method for the best policy (``block``, ``qbd``, ``sparse``).
    search_method : str
        ``exhaustive`` or ``local``.
    exact : bool
        True when the search covered every threshold vector.
    evaluated : int
        Threshold vectors looked at.
    """

    modes: tuple[int, ...]
    thresholds: tuple[int, ...]
    policy: ThresholdPolicy
    cost: CostBreakdown
    measures: Measures
    solver_method: str
    search_method: str
    exact: bool
    evaluated: int


@dataclass(frozen=True)
class PolicySearch:
    """The best policy over subsets of modes.

    Attributes
    ----------
    best : ThresholdOptimum
    subsets : tuple of ThresholdOptimum
        One per subset searched, in the order of Table 1 (by size, then lexicographically).
    static : tuple of (int, CostBreakdown)
        C_r: cost with r robots always active, for each mode r.
    relative_profit : float
        R = (1 - C* / min_r C_r) * 100 (percent).
    policies_solved : int
        Distinct policies solved exactly.
    success : bool
        False when some policy could not be solved (those are skipped and counted in ``message``).
    message : str
    """

    best: ThresholdOptimum
    subsets: tuple[ThresholdOptimum, ...]
    static: tuple[tuple[int, CostBreakdown], ...]
    relative_profit: float
    policies_solved: int
    success: bool
    message: str


class _Evaluator:
    """Solves each distinct policy once."""

    def __init__(self, model: QueueModel, costs: Costs, prepared: PreparedModel | None,
                 solver_method: str, progress: Progress | None) -> None:
        self.model, self.costs = model, costs
        self.prepared = prepared if prepared is not None else prepare(model)
        self.solver_method = solver_method
        self.progress = progress
        self.cache: dict[tuple[int, ...], tuple[Solution, CostBreakdown]] = {}
        self.failures = 0

    def __call__(self, policy: ThresholdPolicy) -> tuple[Solution, CostBreakdown]:
        key = policy.robots_at_level
        if key not in self.cache:
            sol = solve(self.model, policy, method=self.solver_method, prepared=self.prepared)
            if sol.success:
                cost = cost_of(sol.measures, self.costs)
            else:
                self.failures += 1
                nan = math.nan
                cost = CostBreakdown(math.inf, nan, nan, nan, nan, nan)
            self.cache[key] = (sol, cost)
            if self.progress is not None:
                self.progress(1)
        return self.cache[key]

    def total(self, policy: ThresholdPolicy) -> float:
        t = self(policy)[1].total
        return math.inf if math.isnan(t) else t


def threshold_vectors(n_modes: int, capacity: int) -> Iterator[tuple[int, ...]]:
    """All 0 <= j_1 <= ... <= j_{n-1} <= K - 1."""
    return itertools.combinations_with_replacement(range(capacity), n_modes - 1)


def count_threshold_vectors(n_modes: int, capacity: int) -> int:
    return math.comb(capacity + n_modes - 2, n_modes - 1) if n_modes > 1 else 1


def _check_modes(model: QueueModel, modes: Sequence[int]) -> tuple[int, ...]:
    ms = tuple(sorted({int(m) for m in modes}, reverse=True))
    if not ms:
        raise InputError("modes", "is empty", "list at least one number of robots, e.g. 3,1")
    unknown = [m for m in ms if m not in model.modes]
    if unknown:
        raise InputError("modes", f"{unknown} not defined by the arrivals (defined: {list(model.modes)})",
                         "use modes listed under model.arrivals")
    return ms


def _search(evaluate: _Evaluator, modes: tuple[int, ...], method: str) -> tuple[tuple[int, ...], bool, int]:
    K = evaluate.model.capacity
    n = len(modes)
    if method == "auto":
        method = "exhaustive" if count_threshold_vectors(n, K) <= EXHAUSTIVE_LIMIT else "local"
    if n == 1:
        return (), True, 1
    if method == "exhaustive":
        best, best_cost, count = None, math.inf, 0
        for js in threshold_vectors(n, K):
            count += 1
            c = evaluate.total(ThresholdPolicy.from_thresholds(modes, js, K))
            if c < best_cost or best is None:
                best, best_cost = js, c
        assert best is not None
        return best, True, count
    # local: coordinate descent from evenly spread thresholds
    current = tuple(round((r + 1) * (K - 1) / n) for r in range(n - 1))
    cur_cost = evaluate.total(ThresholdPolicy.from_thresholds(modes, current, K))
    count = 1
    improved = True
    while improved:
        improved = False
        for r in range(n - 1):
            for step in (-1, 1):
                cand = list(current)
                cand[r] += step
                if not (0 <= cand[r] <= K - 1) or any(a > b for a, b in zip(cand, cand[1:])):
                    continue
                count += 1
                c = evaluate.total(ThresholdPolicy.from_thresholds(modes, tuple(cand), K))
                if c < cur_cost - 1e-12:
                    current, cur_cost, improved = tuple(cand), c, True
    return current, False, count


def _optimum(evaluate: _Evaluator, modes: tuple[int, ...], method: str) -> ThresholdOptimum:
    js, exact, count = _search(evaluate, modes, method)
    policy = ThresholdPolicy.from_thresholds(modes, js, evaluate.model.capacity)
    sol, cost = evaluate(policy)
    search = method if method != "auto" else ("exhaustive" if exact else "local")
    return ThresholdOptimum(modes, js, policy, cost, sol.measures, sol.method, search, exact, count)


def optimise_thresholds(model: QueueModel, costs: Costs, modes: Sequence[int], *, method: str = "auto",
                        solver_method: str = "auto", prepared: PreparedModel | None = None,
                        progress: Progress | None = None) -> ThresholdOptimum:
    """The best thresholds j_1 <= ... <= j_{n-1} for the given modes (paper 000, eq. (2) minimised).

    Parameters
    ----------
    model, costs
    modes
        Numbers of active robots to use; the largest runs at level 0, the smallest at level K.
    method
        ``auto``, ``exhaustive`` or ``local`` (module docstring).
    solver_method
        Passed to :func:`model.solve`.
    prepared
        Reuse the policy-independent blocks of ``model``.
    progress
        Called with 1 after each distinct policy solved.
    """
    if method not in SEARCH_METHODS:
        raise InputError("method", f"unknown search method {method!r}", f"use one of {', '.join(SEARCH_METHODS)}")
    ms = _check_modes(model, modes)
    return _optimum(_Evaluator(model, costs, prepared, solver_method, progress), ms, method)


def count_policies(n_modes: int, capacity: int) -> int:
    """Distinct non-increasing robots_at_level of length K + 1 over n modes: C(K + n, n - 1)."""
    return math.comb(capacity + n_modes, n_modes - 1) if n_modes > 0 else 0


def _descent(evaluate: _Evaluator, pool: tuple[int, ...], start: ThresholdPolicy) -> tuple[ThresholdPolicy, int]:
    """Steepest descent over non-increasing policies: set one level to any mode of ``pool`` that keeps
    the policy non-increasing (between its neighbours' modes)."""
    current, cost = start, evaluate.total(start)
    looked = 1
    while True:
        best_move, best_cost = None, cost
        r = current.robots_at_level
        for i, x in enumerate(r):
            upper = r[i - 1] if i > 0 else max(pool)
            lower = r[i + 1] if i + 1 < len(r) else min(pool)
            for mode in pool:
                if mode == x or not lower <= mode <= upper:
                    continue
                cand = (*r[:i], mode, *r[i + 1:])
                looked += 1
                c = evaluate.total(ThresholdPolicy(cand))
                if c < best_cost - 1e-12:
                    best_move, best_cost = cand, c
        if best_move is None:
            return current, looked
        current, cost = ThresholdPolicy(best_move), best_cost


def _as_optimum(evaluate: _Evaluator, policy: ThresholdPolicy, search: str, exact: bool,
                looked: int) -> ThresholdOptimum:
    sol, cost = evaluate(policy)
    return ThresholdOptimum(policy.modes, policy.thresholds, policy, cost, sol.measures, sol.method, search,
                            exact, looked)


def optimise(model: QueueModel, costs: Costs, *, modes: Sequence[int] | None = None, method: str = "auto",
             solver_method: str = "auto", prepared: PreparedModel | None = None,
             progress: Progress | None = None) -> PolicySearch:
    """The best policy over every non-empty subset of ``modes`` (default: all the model's modes),
    with the static costs C_r and the relative profit R (paper 000, Section 7, Table 1).

    With ``method="exhaustive"`` (or ``auto`` while there are at most ``EXHAUSTIVE_LIMIT`` distinct
    policies) every subset's best thresholds are found exactly and listed in ``subsets``; with
    ``local``, a steepest descent over policies from the best static fleet (``subsets`` then holds the
    static fleets and the optimum found, ``exact=False``).

    Examples
    --------
    Poisson arrivals at 1 page/s per active robot with one or two robots, exponential service at 1.5
    per second, room for K = 4 pages:

    >>> import numpy as np
    >>> from robotctl.model import BMAP, PH, Costs, ModeArrivals, QueueModel, ThresholdPolicy, cost_of, solve
    >>> from robotctl.policies import optimise
    >>> def poisson(rate):
    ...     return BMAP((np.array([[-rate]]), np.array([[rate]])))
    >>> model = QueueModel(4, ModeArrivals.per_mode({1: poisson(1.0), 2: poisson(2.0)}), PH.exponential(1.5))
    >>> costs = Costs(loss=5, robot=2, starvation=10)
    >>> search = optimise(model, costs)
    >>> search.best.policy.robots_at_level, search.best.modes, search.best.thresholds
    ((2, 2, 1, 1, 1), (2, 1), (1,))
    >>> [r for r, _ in search.static], round(search.relative_profit, 1)
    ([2, 1], 18.6)

    The same optimum by brute force: every non-increasing r(0..K) over {1, 2}, solved and costed:

    >>> levels = [tuple([2] * j + [1] * (5 - j)) for j in range(6)]
    >>> def cost(r):
    ...     return cost_of(solve(model, ThresholdPolicy(r)).measures, costs).total
    >>> min(levels, key=cost) == search.best.policy.robots_at_level
    True
    >>> abs(cost(search.best.policy.robots_at_level) - search.best.cost.total) < 1e-12
    True
    """
    if method not in SEARCH_METHODS:
        raise InputError("method", f"unknown search method {method!r}", f"use one of {', '.join(SEARCH_METHODS)}")
    pool = _check_modes(model, modes if modes is not None else model.modes)
    evaluate = _Evaluator(model, costs, prepared, solver_method, progress)
    if method == "local" or (method == "auto" and count_policies(len(pool), model.capacity) > EXHAUSTIVE_LIMIT):
        statics = [_as_optimum(evaluate, ThresholdPolicy.static(r, model.capacity), "exhaustive", True, 1)
                   for r in pool]
        start = min(statics, key=lambda o: o.cost.total).policy
        found, looked = _descent(evaluate, pool, start)
        subsets = [*statics, _as_optimum(evaluate, found, "local", False, looked)]
    else:
        subsets = [_optimum(evaluate, subset, method)
                   for size in range(1, len(pool) + 1) for subset in itertools.combinations(pool, size)]
    static = tuple((opt.modes[0], opt.cost) for opt in subsets if len(opt.modes) == 1 and opt.search_method != "local")
    best = min(subsets, key=lambda o: (o.cost.total, len(o.modes)))
    best_static = min(c.total for _, c in static)
    profit = (1.0 - best.cost.total / best_static) * 100.0 if math.isfinite(best_static) and best_static else 0.0
    ok = evaluate.failures == 0 and math.isfinite(best.cost.total)
    message = "optimum found" if ok else f"{evaluate.failures} policies could not be solved and were skipped"
    return PolicySearch(best, tuple(subsets), static, profit, len(evaluate.cache), ok, message)


def static_costs(model: QueueModel, costs: Costs, *, prepared: PreparedModel | None = None
                 ) -> tuple[tuple[int, CostBreakdown], ...]:
    """C_r for each mode r: the cost with r robots always active."""
    evaluate = _Evaluator(model, costs, prepared, "auto", None)
    return tuple((r, evaluate(ThresholdPolicy.static(r, model.capacity))[1]) for r in model.modes)
