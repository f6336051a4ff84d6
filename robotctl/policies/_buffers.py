"""Which buffer policy costs least on given traffic: the cost-minimising renovation law q, the best RED
parameters, and a comparison of obsolescence timers, renovation, RED and no rule at all.

Every candidate is evaluated exactly (:func:`model.solve_buffer`) under the same threshold policy and
costed by :func:`model.buffer_cost`: paper 000's J with c_loss for pages lost fresh and c_obs for pages
whose useful life ended in the buffer (expired, indexed stale or removed stale), so that the four rules
are priced alike.

**Renovation.** q is searched over the simplex by :func:`simplex_pattern_search` for each conflict
option. Only q_0..q_{N-1} need searching (N = K - 1 waiting places): q_N acts as q_{N-1} under Option 1
(with w <= N waiting, J = N and J = N - 1 both remove w - 1 or are below w together) and as q_0 under
Option 2 (J = N >= w removes nothing). For N = 1 renovation never acts (one waiting page is never
removed) and there is nothing to search.

**RED.** Floyd and Jacobson's three parameters (:meth:`RedDrop.linear`): every min_th < max_th in
0..K and max_p on a grid of ``red_levels`` values, distinct drop laws evaluated once (exhaustive on
that grid).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from robotctl.model import (
    BufferMeasures,
    BufferPolicy,
    Conflict,
    CostBreakdown,
    Costs,
    InputError,
    PreparedBuffer,
    QueueModel,
    RedDrop,
    Renovation,
    RobotctlError,
    ThresholdPolicy,
    buffer_cost,
)

from ._simplex import SimplexOptimum, simplex_pattern_search

Progress = Callable[[int], None]
#: Among rules of equal cost (to 1e-9 relative) the comparison names the simplest its best.
SIMPLICITY = {"none": 0, "timers": 1, "red": 2, "renovation": 3}


@dataclass(frozen=True)
class BufferChoice:
    """One buffer policy with its exact measures and cost.

    Attributes
    ----------
    name : str
        ``timers``, ``renovation``, ``red`` or ``none``.
    buffer : BufferPolicy
    measures : BufferMeasures
    cost : CostBreakdown
    evaluations : int
        Exact solves its parameter search took (1 for a rule without parameters).
    search : str
        How its parameters were chosen.
    """

    name: str
    buffer: BufferPolicy
    measures: BufferMeasures
    cost: CostBreakdown
    evaluations: int
    search: str


@dataclass(frozen=True)
class RenovationOptimum:
    """The cost-minimising renovation law.

    Attributes
    ----------
    best : BufferChoice
    by_option : tuple of (Conflict, SimplexOptimum)
        The search's result for each conflict option tried.
    success : bool
        False when some evaluation failed (its cost counted as infinite).
    message : str
    """

    best: BufferChoice
    by_option: tuple[tuple[Conflict, SimplexOptimum], ...]
    success: bool
    message: str


@dataclass(frozen=True)
class BufferComparison:
    """Timers, renovation, RED and no rule on the same traffic and threshold policy.

    Attributes
    ----------
    policy : ThresholdPolicy
    choices : tuple of BufferChoice
        In the order timers, renovation, RED, none.
    best : BufferChoice
        The cheapest; among equal costs the simplest (none, timers, RED, renovation): the best renovation
        law or RED law may remove nothing, and then ties with ``none``.
    success : bool
    message : str
    """

    policy: ThresholdPolicy
    choices: tuple[BufferChoice, ...]
    best: BufferChoice
    success: bool
    message: str


class _Costed:
    """Evaluates renovation laws on one prepared chain and counts failures."""

    def __init__(self, prepared: PreparedBuffer, costs: Costs, progress: Progress | None) -> None:
        self.prepared, self.costs, self.progress = prepared, costs, progress
        self.failures = 0

    def __call__(self, renovation: Renovation | None) -> tuple[BufferMeasures, CostBreakdown] | None:
        sol = self.prepared.solve(renovation)
        if self.progress is not None:
            self.progress(1)
        if not sol.success:
            self.failures += 1
            return None
        return sol.measures, buffer_cost(sol.measures, self.costs)


def _full_q(x: NDArray[np.float64] | tuple[float, ...], places: int) -> tuple[float, ...]:
    q = [max(0.0, float(v)) for v in x]
    total = math.fsum(q)
    q = [v / total for v in q]
    while len(q) > 1 and q[-1] == 0.0:
        q.pop()
    return tuple(q[:places + 1])


def optimise_renovation(model: QueueModel, costs: Costs, policy: ThresholdPolicy, *, timers: bool = False,
                        red: RedDrop | None = None, options: tuple[Conflict, ...] = (Conflict.KEEP_ONE, Conflict.SKIP),
                        grid: int = 4, tol: float = 1.0 / 64, starts: int = 2, prepared: PreparedBuffer | None = None,
                        progress: Progress | None = None) -> RenovationOptimum:
    """The renovation law q (and conflict option) that minimises :func:`buffer_cost` under ``policy``
    (module docstring; the search is :func:`simplex_pattern_search`).

    Parameters
    ----------
    model, costs, policy
    timers : bool
        Keep obsolescence timers on as well (default: renovation instead of timers).
    red : RedDrop, optional
        Combine with RED.
    options : tuple of Conflict
        Conflict options to search (each separately).
    grid, tol, starts
        Of :func:`simplex_pattern_search`.
    prepared : PreparedBuffer, optional
        Built for ``model``, ``policy``, ``timers`` and ``red``.
    progress : callable, optional
        Called with 1 after each exact solve.
    """
    if not options:
        raise InputError("options", "is empty", "search Option 1, Option 2 or both")
    buffer = BufferPolicy(timers, None, red)
    prep = prepared if prepared is not None else PreparedBuffer(model, policy, buffer)
    evaluate = _Costed(prep, costs, progress)
    places = model.capacity - 1
    dim = places  # q_0..q_{N-1} (q_N adds nothing; module docstring)
    results: list[tuple[Conflict, SimplexOptimum]] = []
    best: tuple[float, Renovation, int] | None = None
    for option in options:
        opt = Conflict(option)

        def cost(x: NDArray[np.float64], opt: Conflict = opt) -> float:
            out = evaluate(Renovation(_full_q(x, places), opt))
            return math.inf if out is None else out[1].total

        if dim <= 1:
            found = SimplexOptimum((1.0,), cost(np.ones(1)), 1, 1, 1.0, True)
        else:
            found = simplex_pattern_search(cost, dim, grid=grid, tol=tol, starts=starts)
        results.append((opt, found))
        if best is None or found.value < best[0]:
            best = (found.value, Renovation(_full_q(found.x, places), opt), found.evaluations)
    assert best is not None
    outcome = evaluate(best[1])
    total = sum(r.evaluations for _, r in results)
    if outcome is None:
        raise RobotctlError(f"no renovation law could be solved ({evaluate.failures} failed solves)")
    measures, cost_ = outcome
    mesh = max(r.mesh for _, r in results)
    stationary = all(r.stationary for _, r in results)
    search = (f"pattern search on the simplex: grid 1/{results[0][1].grid}, mesh {mesh:.3g}"
              + ("" if stationary else ", stopped by its budget"))
    choice = BufferChoice("renovation", BufferPolicy(timers, best[1], red), measures, cost_, total, search)
    ok = evaluate.failures == 0
    message = "optimum found" if ok else f"{evaluate.failures} renovation laws could not be solved and were skipped"
    return RenovationOptimum(choice, tuple(results), ok, message)


def red_candidates(capacity: int, levels: int) -> list[RedDrop]:
    """Every distinct RED drop law of :meth:`RedDrop.linear` with min_th < max_th in 0..K and max_p in
    {1/levels, ..., 1}."""
    seen: dict[tuple[float, ...], RedDrop] = {}
    for lo in range(capacity):
        for hi in range(lo + 1, capacity + 1):
            for k in range(1, levels + 1):
                d = RedDrop.linear(lo, hi, k / levels, capacity)
                seen.setdefault(d.probabilities, d)
    return list(seen.values())


def optimise_red(model: QueueModel, costs: Costs, policy: ThresholdPolicy, *, timers: bool = False,
                 levels: int = 5, progress: Progress | None = None) -> BufferChoice:
    """The RED parameters (min_th, max_th, max_p) that minimise :func:`buffer_cost` under ``policy``,
    exhaustively over :func:`red_candidates`."""
    best: tuple[float, BufferChoice] | None = None
    candidates = red_candidates(model.capacity, levels)
    shared: PreparedBuffer | None = None
    for drop in candidates:
        buffer = BufferPolicy(timers, None, drop)
        prep = PreparedBuffer(model, policy, buffer, share=shared)
        shared = shared or prep
        sol = prep.solve(None)
        if progress is not None:
            progress(1)
        if not sol.success:
            continue
        cost = buffer_cost(sol.measures, costs)
        if best is None or cost.total < best[0]:
            best = (cost.total, BufferChoice("red", buffer, sol.measures, cost, len(candidates),
                                             f"exhaustive over {len(candidates)} drop laws (max_p step 1/{levels})"))
    if best is None:
        raise RobotctlError(f"none of the {len(candidates)} RED drop laws could be solved")
    return best[1]


def _plain(name: str, model: QueueModel, costs: Costs, policy: ThresholdPolicy, buffer: BufferPolicy,
           search: str) -> BufferChoice | None:
    sol = PreparedBuffer(model, policy, buffer).solve(None)
    if not sol.success:
        return None
    return BufferChoice(name, buffer, sol.measures, buffer_cost(sol.measures, costs), 1, search)


def compare_buffers(model: QueueModel, costs: Costs, policy: ThresholdPolicy, *, grid: int = 4,
                    tol: float = 1.0 / 64, red_levels: int = 5, progress: Progress | None = None
                    ) -> BufferComparison:
    """Obsolescence timers (paper 000), the best renovation law (paper 004; no timers), the best RED
    parameters (no timers) and no rule at all (no timers, nothing dropped but for lack of room), under
    the same threshold ``policy`` on the same traffic, each costed by :func:`buffer_cost`."""
    model.check_policy(policy)
    timers = _plain("timers", model, costs, policy, BufferPolicy(True), "paper 000: every waiting page's timer")
    renovation = optimise_renovation(model, costs, policy, grid=grid, tol=tol, progress=progress)
    red = optimise_red(model, costs, policy, levels=red_levels, progress=progress)
    none = _plain("none", model, costs, policy, BufferPolicy(False), "stale pages stay and are indexed")
    choices = tuple(c for c in (timers, renovation.best, red, none) if c is not None)
    failed = 4 - len(choices)
    ok = failed == 0 and renovation.success
    message = "compared" if ok else "; ".join(
        m for m in ((f"{failed} rules could not be solved" if failed else ""),
                    ("" if renovation.success else renovation.message)) if m)
    lowest = min(c.cost.total for c in choices)
    tied = [c for c in choices if c.cost.total <= lowest + 1e-9 * max(1.0, abs(lowest))]
    best = min(tied, key=lambda c: SIMPLICITY[c.name])
    return BufferComparison(policy, choices, best, ok, message)
