"""Cost-optimal multi-threshold policies (paper 000, Sections 2 and 7).

For a set of modes m_1 > ... > m_n, the paper's policy runs m_r robots on levels (j_{r-1}, j_r] with
j_0 = -1, j_n = K and 0 <= j_1 <= ... <= j_{n-1} <= K - 1: the largest mode runs at level 0, the
smallest at level K, and intermediate modes may be empty. :func:`optimise_thresholds` finds the best
thresholds for one set of modes; :func:`optimise` the best over all subsets of the model's modes,
with the static costs C_r and the relative profit R = (1 - C* / min_r C_r) 100% of Section 7.

Two search methods:

``exhaustive``
    Every threshold vector (C(K + n - 1, n - 1) of them per subset); distinct policies are costed once,
    each from the previous one by re-passing only the levels that changed.
``local``
    For one subset: coordinate descent on the thresholds, each moved by +-1 until no move lowers the
    cost. Over all subsets (:func:`optimise`): the local search of :mod:`policies._search` (every level's
    every mode costed at once from the censored chain, block moves, restarts) over non-increasing
    policies. Much cheaper for many modes and large K; it stops at a local optimum, and says so
    (``exact=False`` on the optimum: the *search* was not exhaustive).

``auto`` searches exhaustively while the number of distinct policies is at most ``EXHAUSTIVE_LIMIT``.

**What the costs are computed on.** The model is first reduced exactly (:func:`robotctl.model.reduce_model`).
When the exact chain's largest level has at most ``SEARCH_DIM`` states, every policy is costed exactly.
Otherwise the search costs policies on the ordered-head chain of the largest depth h whose levels fit
(:class:`robotctl.model.LevelChain`), and the optimum found is then evaluated
by :func:`robotctl.model.solve_approx`, which raises h until consecutive depths agree to ``rtol`` and
reports the error bar. :class:`PolicySearch` says which (``method``, ``error_bound``, ``exact``); the subsets'
rows and the static fleets keep the search chain's costs. On such a chain every policy costs a dense pass over
levels of hundreds of states, so a local search explores on the exponential surrogate (one phase per waiting
page, a hundredth of the work) and the search chain only polishes the surrogate's optimum (one descent) and
walks the static fleets from the surrogate's best (:func:`_polish_starts`: the same optimum as a three-start
search on the search chain on 36 of 36 models tried, at a fifth of the time; ``static`` then lists the fleets
walked, ``static_walk``). A static fleet shares no level with any other
policy costed, so its dense pass cannot be shortened: on levels of more than ``WHOLE_ITERATIVE_DIM`` states it
is solved by the iterative solver instead (the same chain, the same cost to about 1e-12). The ladder's first
depth is the search chain itself (its blocks are not built again). When even the chain of depth 0 has levels
of more than ``SURROGATE_DIM`` states (three obsolescence phases at K = 50), dense level solves would take
minutes per policy: the search and the static fleets are then costed on the exponential surrogate's exact
chain (:func:`search_route`; ``search_chain`` says so, and R compares surrogate costs), and the optimum found
is evaluated on the real law by :func:`robotctl.model.solve_approx` from h = 0, which there picks the bracket
(two count chains, the next page urgent-first and patient-first) or, for a deadline, the urgent-next chains of
1..k Erlang phases, because the ladder's third depth would be too large. The surrogate's optimum is a local
optimum of the surrogate, not of the real law.

With ``space="all"`` the search also runs over every queue-length policy (modes in any order), from the
best threshold policy found, and reports whether that optimum is monotone (``PolicySearch.queue_length``).
``lower_bound`` is the full-information MDP bound when computed (issue 14; None until then).
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from robotctl.model import (
    CostBreakdown,
    Costs,
    InputError,
    LevelChain,
    Measures,
    PolicyEvaluator,
    PreparedModel,
    QueueLengthPolicy,
    QueueModel,
    Rates,
    ThresholdPolicy,
    cost_of,
    evaluate_rates,
    rates_with_levels,
    reduce_model,
    solve,
    solve_approx,
)

from ._search import (
    LocalOptimum,
    Workers,
    best_static_fleet,
    best_two_mode,
    default_starts,
    search_policies,
    surrogate,
)

SEARCH_METHODS = ("auto", "exhaustive", "local")
#: ``auto`` searches exhaustively while there are at most this many threshold vectors (or policies).
EXHAUSTIVE_LIMIT = 5_000
#: Policies are costed on the exact chain while its largest level has at most this many states; above,
#: on the ordered-head chain of the largest depth that fits (the dense evaluator's comfortable range).
SEARCH_DIM = 256
#: When the ordered-head chain of depth 0 still has levels of more than this many states, the search
#: costs policies on the exponential surrogate instead (:func:`search_route`).
SURROGATE_DIM = 1024
#: A policy costed whole (a static fleet: no level in common with the last one costed) is solved by the
#: matrix-free iterative solver instead of a dense pass when the chain's levels have more states than this
#: (32 robots, K = 100, two phases, h = 0: 0.56-0.84 s a fleet against 0.88-1.05 s; at K = 50, 200 states,
#: the dense pass is the cheaper, 0.12 s against 0.2-0.46 s).
WHOLE_ITERATIVE_DIM = 256
#: ``space``: threshold (non-increasing) policies only, or every queue-length policy as well.
SPACES = ("monotone", "all")
#: With ``workers``, an exhaustive search over at least this many policies costs its subsets in parallel.
PARALLEL_POLICIES = 1000

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
        How the reported measures were computed: ``levels`` (the censored evaluator, exact chain),
        ``iterative``, a method of :func:`robotctl.model.solve`, or the ordered-head chain's name.
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
        R = (1 - C* / min_r C_r) * 100 (percent), both costs on the search chain.
    policies_solved : int
        Distinct policies costed.
    success : bool
        False when some policy could not be solved (those are skipped and counted in ``message``).
    message : str
    method : str
        ``exact``, or ``ordered-head h=<h>`` for the chain ``best`` was finally evaluated on.
    error_bound : float
        Absolute error bar on ``best.cost.total`` (0 when exact; :func:`robotctl.model.solve_approx`).
    exact : bool
        True when ``best``'s measures and cost are exact (the search itself may still be local).
    lower_bound : float or None
        The full-information MDP lower bound on the cost, when computed.
    search_chain : str
        The chain the search costed policies on.
    queue_length : LocalOptimum or None
        With ``space="all"``: the best queue-length policy found (monotone or not).
    reduction : tuple of str
        Exact reductions made before the search.
    budget_exhausted : bool
        True when the error bar's ladder stopped because ``max_seconds`` ran out, so ``error_bound`` may
        exceed the tolerance asked for.
    static_walk : bool
        True when ``static`` holds only the static fleets of a walk over the number of robots (a local
        search on an approximate chain, :func:`_polish_starts`), not every mode.
    """

    best: ThresholdOptimum
    subsets: tuple[ThresholdOptimum, ...]
    static: tuple[tuple[int, CostBreakdown], ...]
    relative_profit: float
    policies_solved: int
    success: bool
    message: str
    method: str = "exact"
    error_bound: float = 0.0
    exact: bool = True
    lower_bound: float | None = None
    search_chain: str = "exact"
    queue_length: LocalOptimum | None = None
    reduction: tuple[str, ...] = ()
    budget_exhausted: bool = False
    static_walk: bool = False


def search_chain(model: QueueModel, *, dim: int = SEARCH_DIM) -> LevelChain:
    """The exact chain of ``model`` if its levels have at most ``dim`` states, else the ordered-head chain
    of the largest depth h whose levels do (h = 0 at least)."""
    exact = LevelChain(model)
    if exact.max_dim <= dim:
        return exact
    h = 0
    while h + 1 < exact.h and LevelChain(model, h + 1).max_dim <= dim:
        h += 1
    return LevelChain(model, h)


def search_route(model: QueueModel, *, dim: int = SEARCH_DIM, dense_limit: int | None = None
                 ) -> tuple[QueueModel, LevelChain]:
    """The model and chain the search costs policies on: ``model`` on :func:`search_chain`, unless even the
    chain that counts every waiting page by phase (h = 0) has levels of more than ``dense_limit`` states
    (three phases at K = 50: 5,100), where the dense evaluator's level solves cost minutes; then the
    exponential surrogate of the obsolescence law (:func:`surrogate`, same mean) on its exact chain. Either
    way the optimum is then evaluated on ``model`` by the error bar's ladder. ``dense_limit`` defaults to
    ``SURROGATE_DIM``."""
    chain = search_chain(model, dim=dim)
    if chain.exact or chain.max_dim <= (SURROGATE_DIM if dense_limit is None else dense_limit):
        return model, chain
    cheap = surrogate(model)
    return cheap, search_chain(cheap, dim=dim)


class _Costing:
    """Costs policies on one chain, each distinct policy once (changes re-pass only the levels touched)."""

    def __init__(self, model: QueueModel, costs: Costs, chain: LevelChain, progress: Progress | None, *,
                 surrogate: bool = False) -> None:
        self.model, self.costs, self.chain = model, costs, chain
        self.progress = progress
        self.cache: dict[tuple[int, ...], float] = {}
        self.failures = 0
        self._ev: PolicyEvaluator | None = None
        self.surrogate = surrogate

    @property
    def label(self) -> str:
        """The chain's name, with the surrogate said when policies are costed on one."""
        return f"exponential surrogate ({self.chain.label})" if self.surrogate else self.chain.label

    def _evaluator(self, key: tuple[int, ...]) -> PolicyEvaluator:
        if self._ev is None:
            self._ev = PolicyEvaluator(self.chain, key, levels=self.levels)
        return self._ev

    @property
    def levels(self) -> bool:
        """Carry the level distribution while costing: only where the chain's levels are small (it widens
        every reward block by K + 1 columns)."""
        return self.chain.max_dim <= 32

    def release(self, *, blocks: bool) -> None:
        """Drop what the costing keeps that the optimum's error bar does not use: the evaluator's passes, and
        with ``blocks`` (the ladder's first depth takes the optimum's rates as given, so nothing is evaluated on
        this chain again) the dense blocks kept with the chain. The ladder's deeper chains are built next, and
        the peak held both: 16 robots, K = 50, a peak of 224 MB against 187 MB, and 7,000 fewer page faults
        (first touches of memory) in a fresh process. Costing again afterwards rebuilds what it needs."""
        self._ev = None
        if blocks:
            self.chain.evaluator_caches.clear()

    def total(self, policy: ThresholdPolicy) -> float:
        key = policy.robots_at_level
        if key not in self.cache:
            try:
                c = self._evaluator(key).cost(key, self.costs)
            except (np.linalg.LinAlgError, ValueError, ArithmeticError):
                self._ev = None
                c = math.nan
            if not math.isfinite(c):
                self.failures += 1
                c = math.inf
            self.cache[key] = c
            if self.progress is not None:
                self.progress(1)
        return self.cache[key]

    def whole(self, policy: ThresholdPolicy) -> tuple[Measures, CostBreakdown]:
        """Measures and cost terms of a policy that shares no level with the last one costed (a static
        fleet): on large levels (``WHOLE_ITERATIVE_DIM``) by the iterative solver, whose work grows with the
        chain's entries rather than the cube of its levels; else, or if it does not converge, by
        :meth:`details`. Both solve the same chain (they agree to about 1e-12, relative)."""
        if self.chain.max_dim <= WHOLE_ITERATIVE_DIM:
            return self.details(policy)
        key = policy.robots_at_level
        try:
            rates, _ = evaluate_rates(self.chain, key)
        except ArithmeticError:
            return self.details(policy)
        m = rates.measures(key)
        return m, cost_of(m, self.costs)

    def details(self, policy: ThresholdPolicy, *, levels: bool = False) -> tuple[Measures, CostBreakdown]:
        """Measures and cost terms; the level distribution only when the costing carries it or ``levels``."""
        key = policy.robots_at_level
        if levels and not self.levels:
            m = PolicyEvaluator(self.chain, key, levels=True).rates().measures(key)
        else:
            m = self._evaluator(key).evaluate(key).measures(key)
        return m, cost_of(m, self.costs)


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


def _check_method(method: str) -> None:
    if method not in SEARCH_METHODS:
        raise InputError("method", f"unknown search method {method!r}", f"use one of {', '.join(SEARCH_METHODS)}")


def _search(costing: _Costing, modes: tuple[int, ...], method: str) -> tuple[tuple[int, ...], bool, int]:
    K = costing.model.capacity
    n = len(modes)
    if method == "auto":
        method = "exhaustive" if count_threshold_vectors(n, K) <= EXHAUSTIVE_LIMIT else "local"
    if n == 1:
        return (), True, 1
    if method == "exhaustive":
        best, best_cost, count = None, math.inf, 0
        for js in threshold_vectors(n, K):
            count += 1
            c = costing.total(ThresholdPolicy.from_thresholds(modes, js, K))
            if c < best_cost or best is None:
                best, best_cost = js, c
        assert best is not None
        return best, True, count
    # local: coordinate descent from evenly spread thresholds
    current = tuple(round((r + 1) * (K - 1) / n) for r in range(n - 1))
    cur_cost = costing.total(ThresholdPolicy.from_thresholds(modes, current, K))
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
                c = costing.total(ThresholdPolicy.from_thresholds(modes, tuple(cand), K))
                if c < cur_cost - 1e-12:
                    current, cur_cost, improved = tuple(cand), c, True
    return current, False, count


def _as_optimum(costing: _Costing, policy: ThresholdPolicy, modes: tuple[int, ...], js: tuple[int, ...],
                search: str, exact: bool, looked: int, *, levels: bool = False, whole: bool = False
                ) -> ThresholdOptimum:
    measures, cost = costing.whole(policy) if whole else costing.details(policy, levels=levels)
    return ThresholdOptimum(modes, js, policy, cost, measures,
                            "levels" if costing.chain.exact and not costing.surrogate else costing.label,
                            search, exact, looked)


def _optimum(costing: _Costing, modes: tuple[int, ...], method: str) -> ThresholdOptimum:
    js, exact, count = _search(costing, modes, method)
    policy = ThresholdPolicy.from_thresholds(modes, js, costing.model.capacity)
    search = method if method != "auto" else ("exhaustive" if exact else "local")
    return _as_optimum(costing, policy, modes, js, search, exact, count)


def _unused(prepared: PreparedModel | None) -> None:
    if prepared is not None:
        warnings.warn("prepared is no longer used by the policy search (policies are costed on the level chain of "
                      "the reduced model); drop the argument", DeprecationWarning, stacklevel=3)


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
        ``auto``, or a method of :func:`robotctl.model.solve` to recompute the optimum's measures with.
    prepared
        Unused (kept for compatibility; a DeprecationWarning says so).
    progress
        Called with 1 after each distinct policy costed.
    """
    _check_method(method)
    _unused(prepared)
    red = reduce_model(model)
    ms = _check_modes(red.model, modes)
    costing = _Costing(red.model, costs, search_chain(red.model), progress)
    best = _optimum(costing, ms, method)
    return _resolve(model, costs, best, solver_method)


def _resolve(model: QueueModel, costs: Costs, best: ThresholdOptimum, solver_method: str) -> ThresholdOptimum:
    """The optimum's measures recomputed by ``solve(method=solver_method)`` when one is asked for."""
    if solver_method == "auto":
        return best
    sol = solve(model, best.policy, method=solver_method)
    m = sol.measures
    return ThresholdOptimum(best.modes, best.thresholds, best.policy, cost_of(m, costs), m, sol.method,
                            best.search_method, best.exact, best.evaluated)


def count_policies(n_modes: int, capacity: int) -> int:
    """Distinct non-increasing robots_at_level of length K + 1 over n modes: C(K + n, n - 1)."""
    return math.comb(capacity + n_modes, n_modes - 1) if n_modes > 0 else 0


def optimise(model: QueueModel, costs: Costs, *, modes: Sequence[int] | None = None, method: str = "auto",
             solver_method: str = "auto", prepared: PreparedModel | None = None,
             progress: Progress | None = None, space: str = "monotone", rtol: float = 1e-3,
             max_seconds: float | None = 20.0, restarts: int = 3, workers: Workers | None = None,
             lower_bound: Callable[[QueueModel, Costs], float] | None = None) -> PolicySearch:
    """The best policy over every non-empty subset of ``modes`` (default: all the model's modes),
    with the static costs C_r and the relative profit R (paper 000, Section 7, Table 1).

    With ``method="exhaustive"`` (or ``auto`` while there are at most ``EXHAUSTIVE_LIMIT`` distinct
    policies) every subset's best thresholds are found exactly and listed in ``subsets``; with
    ``local``, the local search of :func:`search_policies` over non-increasing policies from several
    starts (``subsets`` then holds the static fleets and the optimum found, ``exact=False``). On an
    approximate search chain the exploring is done on the exponential surrogate and the search chain
    polishes its optimum, with a walk over the static fleets (:func:`_polish_starts`; ``static_walk``).

    Parameters
    ----------
    model, costs, modes, method
    solver_method
        ``auto``, or a method of :func:`robotctl.model.solve` to recompute the optimum's measures with
        (exact chains only).
    prepared
        Unused (kept for compatibility; a DeprecationWarning says so).
    progress
        Called with the number of policies costed as the search goes.
    space
        ``monotone`` (threshold policies) or ``all`` (also every queue-length policy; module docstring).
    rtol, max_seconds
        Tolerance of the error bar's ladder when the exact chain is too large, and the time budget of the
        whole optimisation: the ladder does not start a depth projected to end after it (the search itself
        runs to its end; ``budget_exhausted`` says when the bar was cut short).
    restarts, workers
        Starts of the local search (on an approximate search chain, of the surrogate's search, whose optimum
        is the one start on the search chain), and a ``map``-like callable to run them (or, for a large
        exhaustive search, the subsets of modes) in parallel.
    lower_bound
        A function of (model, costs) giving a lower bound on every policy's cost (the full-information MDP
        bound of issue 14); its value is reported as ``PolicySearch.lower_bound`` (None when not given).

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
    started = time.perf_counter()
    _check_method(method)
    if space not in SPACES:
        raise InputError("space", f"unknown policy space {space!r}", f"use one of {', '.join(SPACES)}")
    _unused(prepared)
    red = reduce_model(model)
    reduced = red.model
    walked = False
    found_rates: Rates | None = None
    pool = _check_modes(reduced, modes if modes is not None else reduced.modes)
    K = reduced.capacity
    searched, chain = search_route(reduced)
    surrogate_search = searched is not reduced
    costing = _Costing(searched, costs, chain, progress, surrogate=surrogate_search)
    if method == "local" or (method == "auto" and count_policies(len(pool), K) > EXHAUSTIVE_LIMIT):
        if chain.exact:
            statics = [_as_optimum(costing, ThresholdPolicy.static(r, K), (r,), (), "exhaustive", True, 1,
                                   whole=True) for r in pool]
            start = min(statics, key=lambda o: o.cost.total).policy
            starts = _starts(searched, chain, costs, pool, start.robots_at_level, restarts)
        else:
            statics, starts, cheap_chain = _polish_starts(costing, pool, restarts)
            walked = len(statics) < len(pool)
        # no static fleet costs less than the best one costed: exactly so when every fleet was costed, by the
        # walk's premise (costs unimodal in r) when the polish walked them
        floor = min(o.cost.total for o in statics)
        local = search_policies(searched, costs, modes=pool, monotone=True, chain=chain, restarts=restarts,
                                starts=starts, workers=workers, progress=progress, static_floor=floor)
        assert isinstance(local.policy, ThresholdPolicy)
        if chain.exact:
            found = _as_optimum(costing, local.policy, local.policy.modes, local.policy.thresholds, "local", False,
                                local.evaluations)
        else:  # with the level distribution (the ladder's first depth), cut where the surrogate's tail vanishes
            hint = PolicyEvaluator(cheap_chain, local.policy.robots_at_level, levels=True).rates().levels
            found_rates = rates_with_levels(chain, local.policy.robots_at_level, hint=hint)
            found_measures = found_rates.measures(local.policy.robots_at_level)
            found = ThresholdOptimum(local.policy.modes, local.policy.thresholds, local.policy,
                                     cost_of(found_measures, costs), found_measures, costing.label, "local", False,
                                     local.evaluations)
        subsets = [*statics, found]
        solved = len(costing.cache) + local.distinct
    else:
        all_subsets = [subset for size in range(1, len(pool) + 1) for subset in itertools.combinations(pool, size)]
        if workers is not None and count_policies(len(pool), K) >= PARALLEL_POLICIES:
            tasks = [(searched, chain.h, costs, subset, method) for subset in all_subsets]
            results: list[tuple[ThresholdOptimum, set[tuple[int, ...]]]] = []
            for item in workers(_subset_task, tasks):
                assert isinstance(item, tuple)
                results.append(item)
            subsets = [opt for opt, _ in results]
            solved = len({key for _, keys in results for key in keys})
        else:
            subsets = [_optimum(costing, subset, method) for subset in all_subsets]
            solved = len(costing.cache)
    static = tuple((opt.modes[0], opt.cost) for opt in subsets if len(opt.modes) == 1 and opt.search_method != "local")
    best = min(subsets, key=lambda o: (o.cost.total, len(o.modes)))
    queue_length = None
    if space == "all":
        queue_length = search_policies(searched, costs, modes=pool, chain=chain, restarts=restarts, workers=workers,
                                       starts=_starts(searched, chain, costs, pool, best.policy.robots_at_level,
                                                      restarts),
                                       progress=progress)
    # R compares costs of one chain: the search chain's, before the optimum is re-evaluated on the ladder
    minimum_static = min(c.total for _, c in static)
    profit = (1.0 - best.cost.total / minimum_static) * 100.0 if math.isfinite(minimum_static) and minimum_static \
        else 0.0
    method_name, bound, exact, out_of_time = "exact", 0.0, True, False
    if chain.exact and not surrogate_search and not best.measures.queue_length_distribution:
        best = _as_optimum(costing, best.policy, best.modes, best.thresholds, best.search_method, best.exact,
                           best.evaluated, levels=True)
    if surrogate_search or not chain.exact:
        if solver_method != "auto":
            warnings.warn(f"solver_method={solver_method!r} ignored: the exact chain is too large; the optimum "
                          "is evaluated on the ordered-head ladder", stacklevel=2)
        # on the reduced model, so that the ladder's first depth is the search chain itself (its blocks kept)
        given = found_rates if found_rates is not None and best.policy == found.policy else None
        costing.release(blocks=given is not None)
        best, method_name, bound, exact, out_of_time = _ladder(reduced, costs, best, 0 if surrogate_search else chain.h,
                                                               rtol, max_seconds, started,
                                                               None if surrogate_search else chain, given)
    elif solver_method != "auto":
        best = _resolve(model, costs, best, solver_method)
    ok = costing.failures == 0 and math.isfinite(best.cost.total)
    message = "optimum found" if ok else f"{costing.failures} policies could not be solved and were skipped"
    bound_value = None if lower_bound is None else float(lower_bound(model, costs))
    return PolicySearch(best, tuple(subsets), static, profit, solved, ok, message, method_name, bound, exact,
                        bound_value, costing.label, queue_length, red.notes, out_of_time, walked)


def _subset_task(args: tuple[QueueModel, int, Costs, tuple[int, ...], str]
                 ) -> tuple[ThresholdOptimum, set[tuple[int, ...]]]:
    """One subset's best thresholds in a worker process (the chain is rebuilt there)."""
    model, h, costs, subset, method = args
    costing = _Costing(model, costs, LevelChain(model, h), None)
    return _optimum(costing, subset, method), set(costing.cache)


def _starts(model: QueueModel, chain: LevelChain, costs: Costs, pool: tuple[int, ...], first: tuple[int, ...],
            restarts: int) -> list[tuple[int, ...]]:
    """``first`` (the best static fleet or threshold policy), then on an exact chain the best two-mode
    policy, on an approximate one the local optimum of the exponential surrogate (cheap), then seeded
    random starts of few runs; ``restarts`` of them. On an approximate chain the surrogate's optimum goes
    first: it is usually close to the optimum, and a later descent that reaches a local optimum already
    confirmed stops there (:func:`search_policies`), so the costlier descent from ``first`` is cut short."""
    starts = [first]
    if restarts >= 2 and not chain.exact:
        cheap = surrogate(model)
        found = search_policies(cheap, costs, modes=pool, monotone=QueueLengthPolicy(first).is_monotone,
                                chain=search_chain(cheap), restarts=restarts)
        starts.insert(0, found.policy.robots_at_level)
    elif restarts >= 2 and len(pool) > 1:
        starts.append(best_two_mode(chain, costs, max(pool), min(pool))[0])
    for s in default_starts(chain, costs, pool, restarts=max(restarts, 1), statics=False):
        if len(starts) >= max(restarts, 1):
            break
        if s not in starts:
            starts.append(s)
    return starts[:max(restarts, 1)]


def _polish_starts(costing: _Costing, pool: tuple[int, ...], restarts: int
                   ) -> tuple[list[ThresholdOptimum], list[tuple[int, ...]], LevelChain]:
    """The static fleets costed, the one start of the search, on an approximate chain (the polish), and the
    surrogate's chain.

    Every policy costed on the chain of depth 0 costs a dense pass over levels of W M R^0 C(c + R - 1, R - 1)
    states (200 at K = 50 with two phases: 0.07-0.13 s), and the exponential surrogate's chain (one phase
    per waiting page) a hundredth of that. So the surrogate does the exploring: its best static fleet
    (:func:`best_static_fleet`), and its local search from ``restarts`` starts (:func:`search_policies`). On
    the search chain:

    - the static fleets costed are a walk over the number of robots from the surrogate's best static fleet,
      up while the cost falls, else down while it falls (two to four fleets where the costs are unimodal
      in r, as they usually are; R compares the optimum with the best of them);
    - the search starts from the surrogate's optimum only, and descends to a local optimum of the search
      chain (the polish), with the best static fleet walked as every static fleet's floor (the walk's
      premise): a block move onto a static fleet that cannot beat it is not costed. On 36 models (random
      two-phase laws and hyperexponential ones with squared coefficients of variation up to 30, 8-16
      robots, K = 20-40) the polish reached the optimum of the three-start search on the search chain every
      time, where the surrogate's optimum itself was up to 7.5% dearer.

    With ``restarts`` = 1 the surrogate is not searched: the one start is the best static fleet walked to."""
    model, costs, chain = costing.model, costing.costs, costing.chain
    K = chain.K
    cheap = surrogate(model)
    cheap_chain = search_chain(cheap)
    first, cheap_static = best_static_fleet(cheap_chain, costs, pool)
    ascending = sorted(pool)
    costed: dict[int, ThresholdOptimum] = {}

    def cost(r: int) -> float:
        if r not in costed:
            costed[r] = _as_optimum(costing, ThresholdPolicy.static(r, K), (r,), (), "exhaustive", True, 1,
                                    whole=True)
        return costed[r].cost.total

    at = ascending.index(first)
    here = cost(first)
    for step in (1, -1):
        j, best = at, here
        while 0 <= j + step < len(ascending):
            c = cost(ascending[j + step])
            if not c < best:
                break
            j, best = j + step, c
        if j != at:  # the cost fell this way: (unimodal) it rises the other way
            break
    statics = [costed[r] for r in pool if r in costed]
    best_static = min(statics, key=lambda o: o.cost.total).policy.robots_at_level
    if restarts < 2 or len(pool) == 1:
        return statics, [best_static], cheap_chain
    cheap_starts = default_starts(cheap_chain, costs, pool, restarts=restarts, static=cheap_static)
    found = search_policies(cheap, costs, modes=pool, monotone=True, chain=cheap_chain, starts=cheap_starts)
    return statics, [found.policy.robots_at_level], cheap_chain


def _ladder(model: QueueModel, costs: Costs, best: ThresholdOptimum, h: int, rtol: float,
            max_seconds: float | None, started: float, chain: LevelChain | None = None, rates: Rates | None = None
            ) -> tuple[ThresholdOptimum, str, float, bool, bool]:
    """The optimum evaluated with its error bar (model.solve_approx, from the search chain's depth, reusing
    ``chain``, the search chain, when it is that depth's chain of ``model``), within ``max_seconds`` from
    ``started``."""
    out = solve_approx(model, best.policy, costs, rtol=rtol, max_seconds=max_seconds, h_start=h, chain=chain,
                       rates=rates, started=started)
    cost = cost_of(out.measures, costs)
    reported = ThresholdOptimum(best.modes, best.thresholds, best.policy, cost, out.measures, out.method,
                                best.search_method, best.exact, best.evaluated)
    return reported, out.method, out.error_bound, out.exact, out.budget_exhausted


def static_costs(model: QueueModel, costs: Costs, *, prepared: PreparedModel | None = None
                 ) -> tuple[tuple[int, CostBreakdown], ...]:
    """C_r for each mode r: the cost with r robots always active (exact when the exact chain is small,
    else from :func:`robotctl.model.solve_approx` with its default tolerance)."""
    _unused(prepared)
    out = []
    for r in model.modes:
        sol = solve_approx(model, ThresholdPolicy.static(r, model.capacity), costs, rtol=1e-3)
        out.append((r, cost_of(sol.measures, costs)))
    return tuple(out)
