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

Two search methods:

``exhaustive``
    Every distinct policy (:func:`count_policies` of them, enumerated from each subset of modes and its
    :func:`threshold_vectors`) is solved once; the answer is the policy of least N_act among those that
    meet every target (ties: the smaller sum of measure-to-bound ratios). Exact. When no policy meets the
    targets the result says so, with the least value of each measure any policy reaches
    (``best_possible``) and, as ``policy``, the one whose worst measure-to-bound ratio is smallest.
``lagrange``
    For models with too many policies to enumerate. The constraints move into the cost weights of
    eq. (2) with Lagrange multipliers mu_k >= 0 (the robot weight is 1):

        L(pi, mu) = N_act + mu_loss P_loss + mu_obs P_obs + mu_star P_star

    eq. (2) weighs losses and obsolescence per offered page, lambda P, so the weights handed to
    :func:`optimise` are ``loss = mu_loss / lambda_ref``, ``obsolescence = mu_obs / lambda_ref`` with
    lambda_ref the offered rate of the previous round's optimum (equal at a fixed point). Each round
    minimises L with :func:`optimise` (exhaustive or local, by its own ``auto``) and checks the optimum of
    every subset of modes it reports against the targets on their exact measures. Then multiplicative dual
    ascent: a violated bound's multiplier grows by a factor s_t (first set to 1 / bound: a measure at its
    bound then weighs one robot), a met bound's multiplier shrinks by s_t, with s_t = 2 for four rounds
    and then 2^(1/2), 2^(1/3), ... every four rounds. The answer is the cheapest policy met so far after
    ``max_rounds`` rounds, or after ``patience`` rounds in a row that found no policy not seen before, or
    at once when the multipliers are all zero (no bound binds: the least robot time overall).

    A discrete problem can have a duality gap: a policy off the lower convex hull of (N_act, P) is the
    optimum of no weighting. So a neighbourhood search follows (``_polish``): from every
    policy found that meets the targets, move one level to another mode while that keeps the targets and
    lowers N_act (after, if none was met, a descent on the worst measure-to-bound ratio from the closest).
    The search is still not exact (``exact=False``) and cannot prove that no policy meets the targets.

``auto`` is exhaustive while there are at most ``EXHAUSTIVE_LIMIT`` distinct policies.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from robotctl.model import Costs, InputError, Measures, PreparedModel, QueueModel, ThresholdPolicy, prepare, solve

from ._thresholds import EXHAUSTIVE_LIMIT, count_policies, optimise, threshold_vectors

TARGET_METHODS = ("auto", "exhaustive", "lagrange")

#: target -> (Measures attribute, printed name)
MEASURE_OF = {
    "max_loss": ("p_loss", "P_loss"),
    "max_obsolete": ("p_obsolete", "P_obsolete"),
    "max_starvation": ("p_starvation", "P_starvation"),
}

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
    """

    max_loss: float | None = None
    max_obsolete: float | None = None
    max_starvation: float | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 <= v <= 1.0:
                raise InputError(f"targets.{f.name}", f"must be a fraction between 0 and 1, got {v!r}",
                                 "write e.g. 0.01 for 1%")
            object.__setattr__(self, f.name, float(v))
        if not self.given:
            raise InputError("targets", "names no target",
                             "give at least one of max_loss, max_obsolete, max_starvation")

    @property
    def given(self) -> tuple[tuple[str, float], ...]:
        """(target name, bound) of the bounds that are set."""
        return tuple((f.name, getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) is not None)

    def ratios(self, measures: Measures) -> dict[str, float]:
        """measure / bound for each bound set (inf when a bound of 0 is exceeded)."""
        out = {}
        for name, bound in self.given:
            value = float(getattr(measures, MEASURE_OF[name][0]))
            out[name] = value / bound if bound > 0 else (0.0 if value <= 0 else math.inf)
        return out

    def met(self, measures: Measures, tol: float = 1e-9) -> dict[str, bool]:
        """Whether each bound set holds on ``measures`` (within ``tol``)."""
        return {name: float(getattr(measures, MEASURE_OF[name][0])) <= bound + tol for name, bound in self.given}

    def to_dict(self) -> dict[str, float | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


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
        The cheapest policy that meets every target; when none does, the one whose worst
        measure-to-bound ratio is smallest.
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


def _choose(targets: Targets, solved: Sequence[_Solved], tol: float) -> tuple[_Solved, bool]:
    """The least robot time among the solved policies that meet every target (ties: the smaller sum of
    ratios); else the one whose worst ratio is smallest. Returns it and whether it meets the targets."""
    feasible = [s for s in solved if all(targets.met(s.measures, tol).values())]
    if feasible:
        return min(feasible, key=lambda s: (s.measures.mean_active_robots, sum(targets.ratios(s.measures).values()),
                                            s.policy.robots_at_level)), True
    return min(solved, key=lambda s: (max(targets.ratios(s.measures).values()), s.measures.mean_active_robots,
                                      s.policy.robots_at_level)), False


def _best_possible(targets: Targets, solved: Sequence[_Solved]) -> tuple[BestPossible, ...]:
    out = []
    for name, _ in targets.given:
        attr, printed = MEASURE_OF[name]
        best = min(solved, key=lambda s: (float(getattr(s.measures, attr)), s.measures.mean_active_robots))
        out.append(BestPossible(name, printed, float(getattr(best.measures, attr)), best.policy))
    return tuple(out)


def _result(targets: Targets, solved: Sequence[_Solved], method: str, exact: bool, failures: int, tol: float,
            multipliers: tuple[tuple[str, float], ...] = (), rounds: int = 0) -> TargetSearch:
    if not solved:
        raise InputError("model", "no policy could be solved", "check the model (robotctl solve reports why)")
    chosen, ok = _choose(targets, solved, tol)
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


def _exhaustive(model: QueueModel, targets: Targets, pool: tuple[int, ...], solver_method: str,
                prepared: PreparedModel, progress: Progress | None, tol: float) -> TargetSearch:
    solved: list[_Solved] = []
    failures = 0
    for policy in every_policy(pool, model.capacity):
        sol = solve(model, policy, method=solver_method, prepared=prepared)
        if progress is not None:
            progress(1)
        if not sol.success:
            failures += 1
            continue
        solved.append(_Solved(policy, sol.measures, sol.method))
    return _result(targets, solved, "exhaustive", failures == 0, failures, tol)


def _lagrange(model: QueueModel, targets: Targets, pool: tuple[int, ...], solver_method: str,
              prepared: PreparedModel, progress: Progress | None, tol: float, max_rounds: int,
              patience: int) -> TargetSearch:
    mu = {name: 0.0 for name, _ in targets.given}
    bounds = dict(targets.given)
    solved: dict[tuple[int, ...], _Solved] = {}
    unsolved: set[tuple[int, ...]] = set()
    lam_ref = 1.0
    rounds = stale = 0
    for rnd in range(max_rounds):
        rounds = rnd + 1
        costs = Costs(robot=1.0, loss=mu.get("max_loss", 0.0) / lam_ref,
                      obsolescence=mu.get("max_obsolete", 0.0) / lam_ref, starvation=mu.get("max_starvation", 0.0))
        search = optimise(model, costs, modes=pool, solver_method=solver_method, prepared=prepared,
                          progress=progress)
        before = len(solved)
        for o in search.subsets:
            if math.isfinite(o.cost.total):
                solved.setdefault(o.policy.robots_at_level, _Solved(o.policy, o.measures, o.solver_method))
            else:
                unsolved.add(o.policy.robots_at_level)
        best = search.best.measures
        if best.arrival_rate > 0:
            lam_ref = best.arrival_rate
        ratios = targets.ratios(best)
        if all(v == 0.0 for v in mu.values()) and all(r <= 1.0 + tol for r in ratios.values()):
            break  # no bound binds: the least robot time overall meets every target
        stale = stale + 1 if len(solved) == before else 0
        if stale >= patience:
            break  # the multipliers keep finding policies already seen
        step = 2.0 ** (1.0 / (1 + rnd // 4))
        for name, ratio in ratios.items():
            if ratio > 1.0:
                mu[name] = mu[name] * step if mu[name] > 0 else 1.0 / max(bounds[name], 1e-6)
            elif mu[name] > 0:
                mu[name] /= step
    _polish(model, targets, solved, unsolved, pool, solver_method, prepared, progress, tol)
    return _result(targets, list(solved.values()), "lagrange", False, len(unsolved), tol,
                   tuple(sorted(mu.items())), rounds)


def _neighbours(r: tuple[int, ...], pool: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Policies that differ from ``r`` at one level, still non-increasing."""
    out = []
    for i, x in enumerate(r):
        upper = r[i - 1] if i > 0 else max(pool)
        lower = r[i + 1] if i + 1 < len(r) else min(pool)
        out.extend((*r[:i], m, *r[i + 1:]) for m in pool if m != x and lower <= m <= upper)
    return out


def _polish(model: QueueModel, targets: Targets, solved: dict[tuple[int, ...], _Solved],
            unsolved: set[tuple[int, ...]], pool: tuple[int, ...], solver_method: str, prepared: PreparedModel,
            progress: Progress | None, tol: float) -> None:
    """Close part of the duality gap: from every policy found that meets the targets, descend through
    neighbouring policies (one level moved to another mode) that still meet them and use less robot time,
    until none does. When none found meets them, first descend from the closest one on the worst
    measure-to-bound ratio until one does (or no neighbour is closer). Adds every policy solved to ``solved``."""

    def get(r: tuple[int, ...]) -> _Solved | None:
        if r not in solved and r not in unsolved:
            sol = solve(model, ThresholdPolicy(r), method=solver_method, prepared=prepared)
            if progress is not None:
                progress(1)
            if sol.success:
                solved[r] = _Solved(ThresholdPolicy(r), sol.measures, sol.method)
            else:
                unsolved.add(r)
        return solved.get(r)

    def ok(s: _Solved) -> bool:
        return all(targets.met(s.measures, tol).values())

    def worst(s: _Solved) -> float:
        return max(targets.ratios(s.measures).values())

    if solved and not any(ok(s) for s in solved.values()):
        # repair: from the policy closest to the targets, descend on the worst measure-to-bound ratio
        current = min(solved.values(), key=worst)
        while not ok(current):
            closer = [n for n in map(get, _neighbours(current.policy.robots_at_level, pool))
                      if n is not None and worst(n) < worst(current)]
            if not closer:
                break
            current = min(closer, key=worst)
    starts = sorted((s for s in solved.values() if ok(s)), key=lambda s: s.measures.mean_active_robots)
    done: set[tuple[int, ...]] = set()
    for start in starts:
        current = start
        while current.policy.robots_at_level not in done:
            done.add(current.policy.robots_at_level)
            n_act = current.measures.mean_active_robots
            better = [n for n in map(get, _neighbours(current.policy.robots_at_level, pool))
                      if n is not None and ok(n) and n.measures.mean_active_robots < n_act]
            if not better:
                break
            current = min(better, key=lambda s: s.measures.mean_active_robots)


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
    prep = prepared if prepared is not None else prepare(model)
    if method == "auto":
        method = "exhaustive" if count_policies(len(pool), model.capacity) <= EXHAUSTIVE_LIMIT else "lagrange"
    if method == "exhaustive":
        return _exhaustive(model, targets, pool, solver_method, prep, progress, tol)
    return _lagrange(model, targets, pool, solver_method, prep, progress, tol, max_rounds, patience)


__all__ = [
    "MEASURE_OF",
    "TARGET_METHODS",
    "BestPossible",
    "TargetSearch",
    "TargetStatus",
    "Targets",
    "every_policy",
    "optimise_for_targets",
]
