"""Targets instead of weights: the policy that uses the least robot time while meeting service targets.

An operator states bounds on the fractions of paper 000's measures, e.g. "lose at most 1% of the pages,
let at most 2% go obsolete, keep the indexer idle at most 5% of the time":

    minimise    N_act(pi)                                  (eq. (6): mean active robots, robot time)
    subject to  P_loss(pi) <= max_loss                     (eq. (8))
                P_obs(pi)  <= max_obsolete                 (eq. (14))
                P_star(pi) <= max_starvation               (eq. (5))

over the threshold policies pi of the model's modes (non-increasing ``robots_at_level``). Any subset of
the three bounds may be given. Every target is checked on the exact measures of the chosen policy (a
bound is met when the measure is at most the bound plus ``tol``).

When no policy meets every target, the answer is the policy **nearest** them, by one of two rules
(``Targets.nearest``, :data:`NEAREST_RULES`):

``ratio`` (the default)
    The smallest worst measure-to-bound ratio max_k P_k(pi) / bound_k: each bound is the unit of its own
    measure, so one point of P_loss over a 1% bound weighs as much as five points of P_star over a 5% one.
``items``
    The fewest items per second beyond the bounds, every measure counted in items:

        lambda(pi) [P_loss(pi) - max_loss]^+ + lambda(pi) [P_obs(pi) - max_obsolete]^+
            + mu [P_star(pi) - max_starvation]^+

    with lambda(pi) the pages offered per second under pi (eq. (9)) and mu = 1 / E[service] the indexer's
    rate: a page lost and a page gone obsolete are both a fetched page not indexed, and the indexer idle a
    fraction P_star of the time indexes mu P_star pages a second fewer than it could (its throughput is
    mu (1 - P_star)). Beyond the bounds every page counts the same, whichever way it is missed: what a
    crawl that wants its pages indexed would choose. A bound on commands per robot per minute is not in
    pages; its excess ratio comes first. Ties (either rule): the least N_act, then ``robots_at_level``.

Two search methods:

``exhaustive``
    Every distinct policy (:func:`count_policies` of them, enumerated from each subset of modes and its
    :func:`threshold_vectors`) is solved once; the answer is the policy of least N_act among those that
    meet every target (ties: the smaller sum of measure-to-bound ratios). Exact. When no policy meets the
    targets the result says so, with the least value of each measure any policy reaches
    (``best_possible``) and, as ``policy``, the one nearest them (above).
``lagrange``
    For models with too many policies to enumerate. The bounds move into the objective with Lagrange
    multipliers mu_k >= 0 on the measures relative to their bounds (the robot weight is 1):

        L(pi, mu) = N_act(pi) + sum_k mu_k P_k(pi) / bound_k

    (a measure at its bound then weighs mu_k robots). These are eq. (2)'s cost weights on the fractions:
    eq. (2) itself weighs losses and obsolescence per second, lambda P, and lambda grows with the robots,
    so weights on eq. (2) would favour fewer robots where a bound on the fraction P_obs needs more. Each
    round minimises L by steepest descent over neighbouring policies (one level moved to another mode,
    still non-increasing) from the best policy solved so far under the current multipliers (the static
    fleets seed it), and checks the result on its exact measures. Then multiplicative dual ascent: each
    violated bound's multiplier grows by a factor s_t (from 0 to 1); when the result meets every bound, all
    multipliers shrink by s_t (to look for less robot time); s_t = 2 for four rounds and then 2^(1/2),
    2^(1/3), ... every four rounds. (Shrinking a met bound's multiplier while another is violated makes two
    bounds that bind in turn trade places forever: each round meets one and violates the other.) It stops
    after ``max_rounds`` rounds, or after ``patience`` rounds in a row that solved no new policy, or at once
    when the multipliers are all zero and the result meets every bound (no bound binds).

    A discrete problem can have a duality gap: a policy off the lower convex hull of (N_act, P) is the
    optimum of no weighting. So a neighbourhood search follows (``_polish``): from every policy solved that
    meets the targets, move one level to another mode while that keeps the targets and lowers N_act
    (before it, if none meets them, a repair: descents on the total excess over the bounds from the
    ``REPAIR_STARTS`` closest policies, then every policy two moves away from the closest). The
    answer is the least robot time among all the policies solved that meet every target. Every policy is
    solved once (a cache shared by the rounds and the polish). The search is not exact (``exact=False``)
    and cannot prove that no policy meets the targets.

``auto`` is exhaustive while there are at most ``EXHAUSTIVE_LIMIT`` distinct policies.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from robotctl.model import InputError, Measures, PreparedModel, QueueModel, ThresholdPolicy, prepare, solve

from ._thresholds import EXHAUSTIVE_LIMIT, count_policies, threshold_vectors

TARGET_METHODS = ("auto", "exhaustive", "lagrange")
#: how the policy nearest infeasible targets is chosen (module docstring)
NEAREST_RULES = ("ratio", "items")
#: targets whose measure is a fraction of pages (``items`` counts their excess in pages per second)
PAGE_TARGETS = ("max_loss", "max_obsolete")
#: The Lagrangian search's repair descends from this many of the policies closest to the targets.
REPAIR_STARTS = 5

#: target -> (Measures attribute, printed name)
MEASURE_OF = {
    "max_loss": ("p_loss", "P_loss"),
    "max_obsolete": ("p_obsolete", "P_obsolete"),
    "max_starvation": ("p_starvation", "P_starvation"),
    "max_commands_per_robot_min": ("commands_per_robot_min", "commands/robot/min"),
}
#: Targets that bound a rate rather than a fraction.
RATE_TARGETS = ("max_commands_per_robot_min",)

Progress = Callable[[int], None]


class TargetStatus(enum.Enum):
    """Outcome of :func:`optimise_for_targets`."""

    #: a policy meets every target; the cheapest one found is returned
    MET = "met"
    #: no policy meets every target (proved: the search was exhaustive)
    INFEASIBLE = "infeasible"
    #: the Lagrangian search found no policy that meets every target (not a proof)
    NOT_FOUND = "not_found"


_STATUS_MESSAGE = {
    TargetStatus.MET: "the policy of least robot time that meets every target",
    TargetStatus.INFEASIBLE: "infeasible: no threshold policy meets every target",
    TargetStatus.NOT_FOUND: "no policy found that meets every target (the Lagrangian search is not exhaustive: "
                            "try --search exhaustive)",
}


@dataclass(frozen=True)
class Targets:
    """Upper bounds on fractions of paper 000's measures; ``None`` leaves a measure free.

    Attributes
    ----------
    max_loss : float or None
        Bound on P_loss, the fraction of offered pages lost at the full buffer.
    max_obsolete : float or None
        Bound on P_obs, the fraction of offered pages dropped as obsolete.
    max_starvation : float or None
        Bound on P_star, the fraction of time the indexer is idle.
    max_commands_per_robot_min : float or None
        Bound on the park and resume commands per robot per minute (exact, ``Measures.commands_per_robot_min``).
    nearest : str
        When no policy meets every bound, which is nearest them: ``ratio`` (the smallest worst
        measure-to-bound ratio) or ``items`` (the fewest pages per second beyond the bounds); module docstring.
    """

    max_loss: float | None = None
    max_obsolete: float | None = None
    max_starvation: float | None = None
    max_commands_per_robot_min: float | None = None
    nearest: str = "ratio"

    def __post_init__(self) -> None:
        if self.nearest not in NEAREST_RULES:
            raise InputError("targets.nearest", f"is {self.nearest!r}",
                             f"use one of {', '.join(NEAREST_RULES)} (ratio: the smallest worst measure-to-bound "
                             "ratio; items: the fewest pages per second beyond the bounds)")
        for f in _bound_fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if f.name in RATE_TARGETS:
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                    raise InputError(f"targets.{f.name}", f"must be a finite number >= 0, got {v!r}",
                                     "give the most park and resume commands per robot per minute, e.g. 6")
                object.__setattr__(self, f.name, float(v))
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 < v <= 1.0:
                raise InputError(f"targets.{f.name}", f"must be a fraction above 0 and at most 1, got {v!r}",
                                 "write e.g. 0.01 for 1% (no policy reaches exactly 0)")
            object.__setattr__(self, f.name, float(v))
        if not self.given:
            raise InputError("targets", "names no target",
                             "give at least one of max_loss, max_obsolete, max_starvation, "
                             "max_commands_per_robot_min")

    @property
    def given(self) -> tuple[tuple[str, float], ...]:
        """(target name, bound) of the bounds that are set."""
        return tuple((f.name, getattr(self, f.name)) for f in _bound_fields(self) if getattr(self, f.name) is not None)

    def ratios(self, measures: Measures) -> dict[str, float]:
        """measure / bound for each bound set."""
        return {name: float(getattr(measures, MEASURE_OF[name][0])) / bound for name, bound in self.given}

    def met(self, measures: Measures, tol: float = 1e-9) -> dict[str, bool]:
        """Whether each bound set holds on ``measures`` (within ``tol``)."""
        return {name: float(getattr(measures, MEASURE_OF[name][0])) <= bound + tol for name, bound in self.given}

    def excess_pages_per_s(self, measures: Measures, service_rate: float) -> float:
        """Pages per second beyond the bounds on P_loss, P_obs and P_star (the ``items`` rule): lambda times
        the excess of each page fraction, and ``service_rate`` (mu) times the excess of P_star."""
        out = 0.0
        for name, bound in self.given:
            if name in RATE_TARGETS:
                continue
            value = float(getattr(measures, MEASURE_OF[name][0]))
            scale = measures.arrival_rate if name in PAGE_TARGETS else service_rate
            out += float(scale) * max(0.0, value - bound)
        return out

    def to_dict(self) -> dict[str, float | None]:
        """The bounds (``nearest`` is not a bound)."""
        return {f.name: getattr(self, f.name) for f in _bound_fields(self)}


def _bound_fields(targets: Targets) -> tuple[Any, ...]:
    return tuple(f for f in fields(targets) if f.name != "nearest")


@dataclass(frozen=True)
class BestPossible:
    """The least value of one measure over the policies looked at, and a policy that reaches it."""

    target: str
    measure: str
    value: float
    policy: ThresholdPolicy


@dataclass(frozen=True)
class TargetSearch:
    """Result of :func:`optimise_for_targets`.

    Attributes
    ----------
    success : bool
        True when the policy meets every target.
    status : TargetStatus
    message : str
        For an infeasible search: ``infeasible: the best any policy can do is ...``.
    targets : Targets
    policy : ThresholdPolicy
        The cheapest policy that meets every target; when none does, the one nearest them
        (``targets.nearest``).
    measures : Measures
        Its exact measures.
    met : tuple of (str, bool)
        Each target and whether ``policy`` meets it.
    solver_method : str
        The exact solver's method for ``policy``.
    search_method : str
        ``exhaustive`` or ``lagrange``.
    exact : bool
        True when every policy was solved (the answer is the optimum, or infeasibility is proved).
    policies_solved : int
        Distinct policies solved exactly.
    failures : int
        Policies the solver could not solve (skipped).
    best_possible : tuple of BestPossible
        For each target set, the least value of its measure over the policies solved.
    multipliers : tuple of (str, float)
        The Lagrange multipliers of the last round (``lagrange`` only; empty otherwise).
    rounds : int
        Lagrangian rounds (0 for ``exhaustive``).
    """

    success: bool
    status: TargetStatus
    message: str
    targets: Targets
    policy: ThresholdPolicy
    measures: Measures
    met: tuple[tuple[str, bool], ...]
    solver_method: str
    search_method: str
    exact: bool
    policies_solved: int
    failures: int
    best_possible: tuple[BestPossible, ...]
    multipliers: tuple[tuple[str, float], ...] = ()
    rounds: int = 0


@dataclass(frozen=True)
class _Solved:
    policy: ThresholdPolicy
    measures: Measures
    solver_method: str


def _check_pool(model: QueueModel, modes: Sequence[int] | None) -> tuple[int, ...]:
    pool = tuple(sorted({int(m) for m in (modes if modes is not None else model.modes)}, reverse=True))
    if not pool:
        raise InputError("modes", "is empty", "list at least one number of robots, e.g. 3,1")
    unknown = [m for m in pool if m not in model.modes]
    if unknown:
        raise InputError("modes", f"{unknown} not defined by the arrivals (defined: {list(model.modes)})",
                         "use modes listed under model.arrivals")
    return pool


def every_policy(modes: Sequence[int], capacity: int) -> list[ThresholdPolicy]:
    """Every distinct threshold policy over ``modes`` (non-increasing ``robots_at_level`` of length K + 1),
    from each non-empty subset of modes and its threshold vectors; :func:`count_policies` of them."""
    pool = tuple(sorted(set(modes), reverse=True))
    seen: dict[tuple[int, ...], ThresholdPolicy] = {}
    for size in range(1, len(pool) + 1):
        for subset in itertools.combinations(pool, size):
            for js in threshold_vectors(size, capacity):
                policy = ThresholdPolicy.from_thresholds(subset, js, capacity)
                seen.setdefault(policy.robots_at_level, policy)
    return list(seen.values())


def _choose(targets: Targets, solved: Sequence[_Solved], tol: float, service_rate: float) -> tuple[_Solved, bool]:
    """The least robot time among the solved policies that meet every target (ties: the smaller sum of
    ratios); else the one nearest them by ``targets.nearest``. Returns it and whether it meets the targets."""
    feasible = [s for s in solved if all(targets.met(s.measures, tol).values())]
    if feasible:
        return min(feasible, key=lambda s: (s.measures.mean_active_robots, sum(targets.ratios(s.measures).values()),
                                            s.policy.robots_at_level)), True
    if targets.nearest == "items":
        def items(s: _Solved) -> tuple[float, float, float, tuple[int, ...]]:
            ratios = targets.ratios(s.measures)
            other = sum(max(0.0, ratios[k] - 1.0) for k in ratios if k in RATE_TARGETS)
            return (other, targets.excess_pages_per_s(s.measures, service_rate), s.measures.mean_active_robots,
                    s.policy.robots_at_level)

        return min(solved, key=items), False
    return min(solved, key=lambda s: (max(targets.ratios(s.measures).values()), s.measures.mean_active_robots,
                                      s.policy.robots_at_level)), False


def _best_possible(targets: Targets, solved: Sequence[_Solved]) -> tuple[BestPossible, ...]:
    out = []
    for name, _ in targets.given:
        attr, printed = MEASURE_OF[name]
        best = min(solved, key=lambda s: (float(getattr(s.measures, attr)), s.measures.mean_active_robots))
        out.append(BestPossible(name, printed, float(getattr(best.measures, attr)), best.policy))
    return tuple(out)


def _result(model: QueueModel, targets: Targets, solved: Sequence[_Solved], method: str, exact: bool,
            failures: int, tol: float, multipliers: tuple[tuple[str, float], ...] = (),
            rounds: int = 0) -> TargetSearch:
    if not solved:
        raise InputError("model", "no policy could be solved", "check the model (robotctl solve reports why)")
    chosen, ok = _choose(targets, solved, tol, 1.0 / model.service.mean)
    best = _best_possible(targets, solved)
    if ok:
        status = TargetStatus.MET
        message = _STATUS_MESSAGE[status]
    else:
        status = TargetStatus.INFEASIBLE if exact else TargetStatus.NOT_FOUND
        reach = ", ".join(f"{b.measure} {b.value:.4g} (policy {b.policy})" for b in best)
        lead = "infeasible: the best any policy can do is" if exact else \
            "no policy found that meets every target; the best found is"
        message = f"{lead} {reach}, each on its own"
    met = tuple(targets.met(chosen.measures, tol).items())
    return TargetSearch(ok, status, message, targets, chosen.policy, chosen.measures, met, chosen.solver_method,
                        method, exact, len(solved), failures, best, multipliers, rounds)


def _exhaustive(model: QueueModel, targets: Targets, pool: tuple[int, ...], cache: _Cache,
                tol: float) -> TargetSearch:
    for policy in every_policy(pool, model.capacity):
        cache.get(policy.robots_at_level)
    failures = len(cache.unsolved)
    return _result(model, targets, list(cache.solved.values()), "exhaustive", failures == 0, failures, tol)


class _Cache:
    """Each policy solved once; the Lagrangian rounds and the polish share it."""

    def __init__(self, model: QueueModel, solver_method: str, prepared: PreparedModel,
                 progress: Progress | None) -> None:
        self.model, self.solver_method, self.prepared, self.progress = model, solver_method, prepared, progress
        self.solved: dict[tuple[int, ...], _Solved] = {}
        self.unsolved: set[tuple[int, ...]] = set()

    def get(self, r: tuple[int, ...]) -> _Solved | None:
        if r not in self.solved and r not in self.unsolved:
            policy = ThresholdPolicy(r)
            sol = solve(self.model, policy, method=self.solver_method, prepared=self.prepared)
            if self.progress is not None:
                self.progress(1)
            if sol.success:
                self.solved[r] = _Solved(policy, sol.measures, sol.method)
            else:
                self.unsolved.add(r)
        return self.solved.get(r)


def _neighbours(r: tuple[int, ...], pool: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Policies that differ from ``r`` at one level, still non-increasing."""
    out: list[tuple[int, ...]] = []
    for i, x in enumerate(r):
        upper = r[i - 1] if i > 0 else max(pool)
        lower = r[i + 1] if i + 1 < len(r) else min(pool)
        out.extend((*r[:i], m, *r[i + 1:]) for m in pool if m != x and lower <= m <= upper)
    return out


def _descend(cache: _Cache, start: _Solved, pool: tuple[int, ...], score: Callable[[_Solved], float],
             allowed: Callable[[_Solved], bool] = lambda s: True) -> _Solved:
    """Steepest descent of ``score`` over neighbouring policies that are ``allowed``."""
    current = start
    while True:
        moves = [n for n in map(cache.get, _neighbours(current.policy.robots_at_level, pool))
                 if n is not None and allowed(n) and score(n) < score(current) - 1e-12]
        if not moves:
            return current
        current = min(moves, key=score)


def _lagrange(model: QueueModel, targets: Targets, pool: tuple[int, ...], cache: _Cache, tol: float,
              max_rounds: int, patience: int) -> TargetSearch:
    mu = {name: 0.0 for name, _ in targets.given}

    def lagrangian(s: _Solved) -> float:
        ratios = targets.ratios(s.measures)
        return s.measures.mean_active_robots + sum(mu[k] * ratios[k] for k in mu)

    for mode in pool:  # the static fleets: a spread of starting points
        cache.get(ThresholdPolicy.static(mode, model.capacity).robots_at_level)
    if not cache.solved:
        return _result(model, targets, [], "lagrange", False, len(cache.unsolved), tol)
    rounds = stale = 0
    for rnd in range(max_rounds):
        rounds = rnd + 1
        before = len(cache.solved)
        start = min(cache.solved.values(), key=lagrangian)  # the best known under these weights
        best = _descend(cache, start, pool, lagrangian)
        ratios = targets.ratios(best.measures)
        if all(v == 0.0 for v in mu.values()) and all(r <= 1.0 + tol for r in ratios.values()):
            break  # no bound binds: the least robot time found meets every target
        stale = stale + 1 if len(cache.solved) == before else 0
        if stale >= patience:
            break  # the multipliers keep finding policies already solved
        step = 2.0 ** (1.0 / (1 + rnd // 4))
        feasible = all(r <= 1.0 + tol for r in ratios.values())
        for name, ratio in ratios.items():
            if ratio > 1.0 + tol:
                mu[name] = mu[name] * step if mu[name] > 0 else 1.0
            elif feasible:
                mu[name] /= step
    _polish(targets, cache, pool, tol)
    return _result(model, targets, list(cache.solved.values()), "lagrange", False, len(cache.unsolved), tol,
                   tuple(sorted(mu.items())), rounds)


def _polish(targets: Targets, cache: _Cache, pool: tuple[int, ...], tol: float) -> None:
    """Close part of the duality gap: from every policy found that meets the targets, descend through
    neighbouring policies (one level moved to another mode) that still meet them and use less robot time.
    When none found meets them, first repair (module docstring)."""

    def ok(s: _Solved) -> bool:
        return all(targets.met(s.measures, tol).values())

    def robot_time(s: _Solved) -> float:
        return s.measures.mean_active_robots

    def excess(s: _Solved) -> float:
        return sum(max(0.0, r - 1.0) for r in targets.ratios(s.measures).values())

    if cache.solved and not any(ok(s) for s in cache.solved.values()):
        # repair: descend on the total excess over the bounds from the closest few policies solved, then
        # (if still none meets them) through policies two moves away from the closest
        for start in sorted(cache.solved.values(), key=excess)[:REPAIR_STARTS]:
            if ok(_descend(cache, start, pool, excess)):
                break
        else:
            closest = min(cache.solved.values(), key=excess)
            for r in _neighbours(closest.policy.robots_at_level, pool):
                for r2 in _neighbours(r, pool):
                    cache.get(r2)
    for start in sorted((s for s in list(cache.solved.values()) if ok(s)), key=robot_time):
        _descend(cache, start, pool, robot_time, ok)


def optimise_for_targets(model: QueueModel, targets: Targets, *, modes: Sequence[int] | None = None,
                         method: str = "auto", solver_method: str = "auto", prepared: PreparedModel | None = None,
                         progress: Progress | None = None, max_rounds: int = 24, patience: int = 6,
                         tol: float = 1e-9) -> TargetSearch:
    """The threshold policy of least robot time N_act that meets every target (module docstring).

    Parameters
    ----------
    model : QueueModel
    targets : Targets
        Bounds on P_loss, P_obs, P_star (fractions).
    modes : sequence of int, optional
        Numbers of active robots the policy may use (default: every mode of the model).
    method : str
        ``auto``, ``exhaustive`` or ``lagrange`` (module docstring).
    solver_method : str
        Passed to :func:`robotctl.model.solve`.
    prepared : PreparedModel, optional
        Reuse the policy-independent blocks of ``model``.
    progress : callable, optional
        Called with 1 after each policy solved.
    max_rounds, patience : int
        The Lagrangian search stops after ``max_rounds`` rounds, or after ``patience`` rounds in a row that
        found no policy not seen before.
    tol : float
        A bound holds when the exact measure is at most bound + tol.

    Returns
    -------
    TargetSearch
        ``success`` is False when no policy meets every target; ``message`` then says the best any policy
        can do for each measure.
    """
    if method not in TARGET_METHODS:
        raise InputError("method", f"unknown search method {method!r}", f"use one of {', '.join(TARGET_METHODS)}")
    if max_rounds < 1 or patience < 1:
        raise InputError("max_rounds" if max_rounds < 1 else "patience",
                         f"must be >= 1, got {min(max_rounds, patience)}", "use e.g. 24 rounds, patience 6")
    pool = _check_pool(model, modes)
    cache = _Cache(model, solver_method, prepared if prepared is not None else prepare(model), progress)
    if method == "auto":
        method = "exhaustive" if count_policies(len(pool), model.capacity) <= EXHAUSTIVE_LIMIT else "lagrange"
    if method == "exhaustive":
        return _exhaustive(model, targets, pool, cache, tol)
    return _lagrange(model, targets, pool, cache, tol, max_rounds, patience)


__all__ = [
    "MEASURE_OF",
    "NEAREST_RULES",
    "TARGET_METHODS",
    "BestPossible",
    "TargetSearch",
    "TargetStatus",
    "Targets",
    "every_policy",
    "optimise_for_targets",
]
