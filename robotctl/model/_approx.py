"""Measures of a policy with an error bar: the ordered-head chain of growing depth h.

The exact chain keeps every waiting page's obsolescence phase in order (R^(K-1) states on the top
level). The ordered-head chain of depth h (``model._levels``) keeps only the h oldest in order and counts
the others by phase; h >= K - 2 is exact. :func:`solve_approx` evaluates the policy for h = h_0, h_0 + 1,
... until two consecutive depths agree within the stated tolerance, and reports the last difference as
the error bar of every measure and of the cost, widened when the ladder converges slowly:

    d_h = |J(h) - J(h - 1)|,   q = d_h / d_{h-1},   error_bound = d_h max(1, 2 q / (1 - q)).

The error of J(h) comes only from the phase given to a page promoted from the counted part, and it decays
geometrically with the number of ordered places the page crosses before service (measured ratios q from
0.2, random PH laws with mixing phases, to 0.5, a hyper-exponential law whose phases never mix). For a
geometric sequence the error left after depth h is d_h q / (1 - q); the bar is twice that when it
exceeds the last difference (q > 1/3), the last difference otherwise. So the ladder needs three depths
before it may stop, q is capped at 0.9 (a factor of 18 when the differences do not shrink), and every
measure gets its own bar from its own differences, never narrower than the cost's factor implies. The
bar is measured, not proven; bench/scale.py and tests/model/test_approx.py compare it with exact
references (the exact chain at small K, the product form for Poisson modes at K = 50). When the exact
chain is small enough to solve (``exact_states``) it is solved and the bar is 0.

**The bracket** (``method="bracket"``, chosen by ``auto`` when the ladder's third depth would exceed
``LADDER_STATES`` states, e.g. three-phase laws at K = 50). Counting every waiting page by phase is exact only
for service in random order (h = 0 is that chain): under FIFO the head page's phase decides which count
goes down when it enters service, and the oldest page's phase is not a function of the counts (the
exact chain at K = 6, 16 robots: J(h = 0) - J = +0.69 for Erlang-3 lives, -0.083 for H3). At depth h the
bracket solves the chain twice with the counted page that goes next chosen by its phase: the phase of
shortest mean residual life first (``urgent``) and the longest first (``patient``). FIFO's cost lies
between the two (measured on every case tried, not proven: 160 random models, K = 4-6, two- and
three-phase lives, 5 random costs each, and the fleets at K = 6-12; each scalar measure too, except
``mean_sojourn`` on 2 of the 160 models, outside by less than 3e-5 relative); the reported measures are the
midpoint of the two chains' and the error bar of the cost is its distance to the farther end. One depth
gives a finite bar, so the bracket needs two solves of the smallest chain where the ladder needs three
depths, each R times larger than the last.

**A deadline** (``QueueModel.deadline``, ``method="deadline"``, chosen by ``auto`` for a model with a
deadline whose exact chain is too large to solve directly: the ladder's bar would not include the Erlang
law's own error): with a deterministic useful life the oldest waiting page is also the most urgent, so FIFO is the
urgent-next order, and the Erlang-k law standing for the deadline (``model._deadline``) tends to it as k
grows (a page's phase becomes its age in steps of d / k). The route solves the urgent-next chain of
depth 0 for k = 1, 2, ... Erlang phases (from k - 2, k the model's phases, at least up to k) and treats
them as a ladder in k: it goes on past the model's k until two consecutive k agree within ``rtol``, the
next chain is too large (``max_states``, a level beyond sparse LU) or ``max_seconds`` would run out, and
reports J(k) with the bar |J(k) - J(k - 1)| widened as above. Against the simulator with the true
deadline (16 robots, 10 s, 10^7 events): K = 8, J(k) = 114.14, 102.79, 100.74, 100.18, 99.99, 99.92, 99.88,
99.87, 99.86 for k = 1..9, reported 99.859 +- 0.017, simulated 99.88 +- 0.25 (the Erlang-3 law's own FIFO
chain: 102.52); K = 12, k = 6 within 20 s: 96.84 +- 0.13, simulated 96.69 +- 0.32.

**The cut.** A policy's level distribution falls off geometrically above where it holds the queue, and the
top levels are the largest (their size grows with the pages counted). After its first depth the ladder
cuts the model at the lowest level L (at most 0.9 K) where the first depth puts at most ``CUT_TAIL`` = 1e-12
on the levels a batch can cross L from, and solves the deeper chains of the cut model (capacity L): a page
it loses at L the whole chain would have taken, at a rate of at most the arrival rate times that mass. A
cut chain is used only when its own mass there is at most ``CUT_CHECK`` = 1e-10, else the whole chain is
solved and the ladder cuts no more. Its P(level) is padded with zeros to K, and each step says its levels.
Issue 26's fleets at their optimum: 16 robots, K = 50, L = 36 (the third depth 9,534 states instead of
18,830); 32 robots, K = 100, L = 33 (7,950 instead of 77,630; the ladder about 1 s instead of 4 s). Against
the whole chains the cost moved by 2e-15 (relative), the bar by 3e-11 and 4e-9, P_loss and P_obs by at most
1.2e-14 (absolute). The effect follows the mass cut off: with a cut at 1e-8 the cost moved by 5e-11 and
P_loss by 1.6e-10. At 1e-12 it is far below every bar but P_loss's, which is a difference between depths
cut alike (1.6e-16 at 16 robots, against the cut's P_loss of 1.2e-14 where the whole chain's is 3e-22):
the cut chain's losses are the cut's doing, so a result solved on the cut carries its P_loss in the errors
of P_loss, P_success and P_obsolete, and its price in the cost's bar (``_with_cut_losses``).

Engines: levels of at most ``DENSE_DIM`` states use the dense censored evaluator (model._evaluate), larger
ones the matrix-free iterative solver (model._iterative). The ladder stops early (status ``LIMITED``)
when the next depth would exceed ``max_states`` states or, with ``max_seconds``, its projected time.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl._errors import InputError

from ._evaluate import FUNCTIONALS, PolicyEvaluator, Rates
from ._iterative import rates_from_levels, stationary_iterative
from ._levels import LevelChain
from ._measures import Measures, cost_of
from ._model import Costs, QueueModel
from ._policy import QueueLengthPolicy
from ._reduce import reduce_model

#: Levels of at most this many states are evaluated by the dense censored evaluator.
DENSE_DIM = 256
#: Default largest chain the ladder builds (the iterative solver needs about 40 vectors of this size).
MAX_STATES = 1_000_000
#: The exact chain is solved directly up to this many states (K = 14 with W = M = R = 2 takes about 1.5 s).
EXACT_STATES = 70_000
#: ``method="auto"`` uses the bracket when the ladder's third depth would have more states than this.
LADDER_STATES = 200_000
#: The ladder's deeper chains stop at the lowest level L whose batches' reach, P(level > L - k) on the first
#: depth, is at most ``CUT_TAIL``; a cut chain is used only when its own mass there is at most ``CUT_CHECK``.
CUT_TAIL = 1e-12
CUT_CHECK = 1e-10
#: Methods of :func:`solve_approx`.
APPROX_METHODS = ("auto", "ladder", "bracket", "deadline")
#: Scalar measures that get an error bar.
MEASURE_FIELDS = ("arrival_rate", "p_loss", "p_obsolete", "p_success", "p_starvation", "mean_active_robots",
                  "mean_queue_length", "mean_response_served", "mean_sojourn_obsolete", "mean_sojourn")


class ApproxStatus(enum.Enum):
    """Outcome of :func:`solve_approx`."""

    #: the exact chain was solved: error bar 0
    EXACT = 0
    #: two consecutive depths agreed within the tolerance
    CONVERGED = 1
    #: the next depth was too large (states or time): the error bar is the last difference, above tolerance
    LIMITED = 2
    #: a solve failed
    FAILED = 3


STATUS_MESSAGES = {
    ApproxStatus.EXACT: "exact chain solved",
    ApproxStatus.CONVERGED: "consecutive depths (or the bracket's two ends) agree within the tolerance",
    ApproxStatus.LIMITED: "tolerance not reached: the next depth exceeds the limit",
    ApproxStatus.FAILED: "a solve failed",
}


@dataclass(frozen=True)
class LadderStep:
    """One depth of the ladder: h, the chain's size, the cost (or NaN without costs), wall time."""

    h: int
    n_states: int
    cost: float
    seconds: float
    engine: str


@dataclass(frozen=True, eq=False)
class ApproxSolution:
    """Measures of one policy, exact or with an error bar.

    Attributes
    ----------
    success : bool
        False only when a solve failed (``LIMITED`` results carry a valid, if wide, error bar).
    status : ApproxStatus
    message : str
    method : str
        ``exact``, ``ordered-head h=<h>`` (the ladder) or ``bracket h=<h>``.
    h : int or None
        The depth reported (None when exact).
    exact : bool
    policy : QueueLengthPolicy
    measures : Measures
    cost : float or None
        J of eq. (2) when costs were given.
    error_bound : float
        |J(h) - J(h - 1)| widened by the observed rate of decay (module docstring), or the distance to the
        bracket's farther end; 0 when exact, NaN without costs.
    measure_errors : dict of str to float
        |m(h) - m(h - 1)| for each scalar measure, and ``queue_length_distribution`` (largest entry), with
        the same widening factor as the cost.
    ladder : tuple of LadderStep
    n_states : int
        States of the chain reported.
    seconds : float
        Time since the budget started (``started`` of :func:`solve_approx`, by default its call).
    reduction : tuple of str
    budget_exhausted : bool
        True when the ladder stopped because the next depth's projected time exceeded ``max_seconds``:
        the error bar is then the last one measured and may exceed the tolerance asked for.
    """

    success: bool
    status: ApproxStatus
    message: str
    method: str
    h: int | None
    exact: bool
    policy: QueueLengthPolicy
    measures: Measures
    cost: float | None
    error_bound: float
    measure_errors: dict[str, float]
    ladder: tuple[LadderStep, ...]
    n_states: int
    seconds: float
    reduction: tuple[str, ...]
    budget_exhausted: bool = False


def evaluate_rates(chain: LevelChain, robots_at_level: Sequence[int],
                   level_solves: dict[tuple[int, int], Any] | None = None) -> tuple[Rates, str]:
    """The policy's rates on ``chain``, by the dense evaluator or the iterative solver (by level size;
    ``level_solves`` as in :func:`model._iterative.stationary_iterative`)."""
    if chain.max_dim <= DENSE_DIM:
        return PolicyEvaluator(chain, robots_at_level, levels=True).rates(), "dense"
    res = stationary_iterative(chain, robots_at_level, level_solves=level_solves)
    if not res.converged:
        raise ArithmeticError(f"iterative solve did not converge (residual {res.residual:.2g})")
    y = rates_from_levels(chain, robots_at_level, res.level_vectors)
    return Rates(y[:len(FUNCTIONALS)], y[len(FUNCTIONALS):]), "iterative"


def rates_with_levels(chain: LevelChain, robots_at_level: Sequence[int], *,
                      hint: NDArray[np.float64] | None = None) -> Rates:
    """The policy's rates with its level distribution on ``chain``, by the dense evaluator; with ``hint`` (a
    level distribution near the policy's, e.g. on the exponential surrogate), on the chain of the model cut
    where the hint puts at most ``CUT_TAIL`` within a batch of the cut, when that chain's own mass there is at
    most ``CUT_CHECK`` (module docstring, the cut), its P(level) padded with zeros; else on ``chain``."""
    r = list(robots_at_level)
    if hint is not None:
        hint = np.asarray(hint, dtype=float)
        if hint.shape != (chain.K + 1,) or not np.isfinite(hint).all() or (hint < 0).any():
            raise InputError("hint", f"must be P(level = i) for i = 0..{chain.K} ({chain.K + 1} finite numbers >= 0), "
                             f"got shape {hint.shape}", "pass a level distribution of the same model, or None")
        cut = _cut_model(chain.model, r, hint)
        # it reuses the blocks of ``chain``'s levels (they depend on the capacity only near the top)
        cut_chain = None if cut is None else _cut_chain(cut, chain.h, chain.promotion, share=chain)
        if cut_chain is not None:
            on_cut = _cut_rates(cut_chain, r, chain.K)
            if on_cut is not None:
                return on_cut[0]
    return PolicyEvaluator(chain, r, levels=True).rates()


def _differences(a: Measures, b: Measures) -> dict[str, float]:
    out = {name: abs(getattr(a, name) - getattr(b, name)) for name in MEASURE_FIELDS}
    out["queue_length_distribution"] = float(np.max(np.abs(np.subtract(a.queue_length_distribution,
                                                                      b.queue_length_distribution))))
    return out


def widening(differences: Sequence[float]) -> float:
    """max(1, 2 q / (1 - q)) for the ratio q of the last two differences, q capped at 0.9 (1 with fewer
    than two differences or a zero one)."""
    if len(differences) < 2 or differences[-2] <= 0:
        return 1.0
    q = min(differences[-1] / differences[-2], 0.9)
    return max(1.0, 2.0 * q / (1.0 - q))


def _relative_gap(a: Measures, b: Measures) -> float:
    return max(abs(getattr(a, n) - getattr(b, n)) / max(abs(getattr(b, n)), 1e-12) for n in MEASURE_FIELDS)


def solve_approx(model: QueueModel, policy: QueueLengthPolicy, costs: Costs | None = None, *, rtol: float = 1e-4,
                 h_start: int = 0, h_max: int | None = None, max_states: int = MAX_STATES,
                 max_seconds: float | None = None, exact_states: int = EXACT_STATES,
                 method: str = "auto", chain: LevelChain | None = None, rates: Rates | None = None,
                 started: float | None = None) -> ApproxSolution:
    """Measures (and cost) of ``model`` under ``policy``: exact when the exact chain is small, else the
    ordered-head ladder with its error bar (module docstring).

    Parameters
    ----------
    model, policy
    costs
        With costs, the ladder stops when |J(h) - J(h - 1)| <= rtol |J(h)|; without, when every scalar
        measure agrees to ``rtol`` (relative).
    rtol
        Relative tolerance between consecutive depths.
    h_start, h_max
        First and largest depth tried.
    max_states, max_seconds
        Do not build a chain with more states, nor start a depth whose projected time (the last one's
        times R) exceeds what is left of ``max_seconds``.
    exact_states
        Solve the exact chain directly when it has at most this many states (or small levels).
    method
        ``ladder``, ``bracket``, ``deadline`` (module docstring) or ``auto``: the deadline route for a model
        with a deadline (once its exact chain is too large to solve directly); else the bracket when the
        ladder's third depth from ``h_start`` would have more than ``LADDER_STATES`` states, the ladder
        otherwise.
    chain
        A chain already built (e.g. the one a policy search costed on): the ladder evaluates its depth on it,
        reusing its blocks, instead of building that depth again. Used only when it is a ``random``-promotion
        chain of the very model solved after reduction (``chain.model is`` that model).
    rates
        The policy's rates on ``chain``, with the level distribution (``PolicyEvaluator(chain, r,
        levels=True).rates()``), when the caller has them: the ladder's first depth takes them instead of
        evaluating the policy again (used only with ``chain``, under the same conditions).
    started
        When ``max_seconds`` started to run (a ``time.perf_counter()`` reading, e.g. a policy search's start, so
        that the budget covers the search and its error bar); default: now.
    """
    if not rtol > 0:
        raise InputError("rtol", f"must be positive, got {rtol!r}", "e.g. 1e-4 for four significant digits")
    if h_start < 0:
        raise InputError("h_start", f"must be >= 0, got {h_start}", "0 is the count model")
    if method not in APPROX_METHODS:
        raise InputError("method", f"unknown method {method!r}", f"use one of {', '.join(APPROX_METHODS)}")
    start = time.perf_counter() if started is None else started
    model.check_policy(policy)
    red = reduce_model(model)
    reduced = red.model
    r = policy.robots_at_level
    if method == "deadline":
        return _deadline_route(reduced, policy, costs, rtol=rtol, max_states=max_states, max_seconds=max_seconds,
                               start=start, notes=red.notes)
    exact_chain = LevelChain(reduced)
    steps: list[LadderStep] = []

    def finish(status: ApproxStatus, chain: LevelChain, rates: Rates, prev: Measures | None,
               prev_cost: float | None) -> ApproxSolution:
        m = rates.measures(r)
        cost = cost_of(m, costs).total if costs is not None else None
        if status is ApproxStatus.EXACT:
            errors = dict.fromkeys((*MEASURE_FIELDS, "queue_length_distribution"), 0.0)
            bound = 0.0
        elif prev is None:
            errors = dict.fromkeys((*MEASURE_FIELDS, "queue_length_distribution"), math.inf)
            bound = math.inf
        else:
            if costs is not None:
                factor = widening([abs(b.cost - a.cost) for a, b in zip(steps, steps[1:])])
            else:
                factor = widening([_relative_gap(b, a) for a, b in zip(done_measures, done_measures[1:])])
            pairs = [_differences(b, a) for a, b in zip(done_measures, done_measures[1:])]
            errors = {k: v * max(factor, widening([d[k] for d in pairs])) for k, v in pairs[-1].items()}
            bound = abs(cost - prev_cost) * factor if cost is not None and prev_cost is not None else math.nan
            if chain.model is not reduced:  # solved on the cut model: its losses carried in the errors
                errors, bound = _with_cut_losses(errors, bound, m, costs)
        message = STATUS_MESSAGES[status]
        if status is ApproxStatus.LIMITED:
            message += f" (h = {chain.h}, {chain.n_states} states)"
            if out_of_time:
                message += f"; the time budget of {max_seconds:g} s ran out"
        return ApproxSolution(status is not ApproxStatus.FAILED, status, message, chain.label,
                              None if chain.exact else chain.h, chain.exact, policy, m, cost, bound, errors,
                              tuple(steps), chain.n_states, time.perf_counter() - start, red.notes,
                              status is ApproxStatus.LIMITED and out_of_time)

    done_measures: list[Measures] = []
    out_of_time = False
    top = exact_chain.h if h_max is None else min(h_max, exact_chain.h)
    if exact_chain.max_dim <= DENSE_DIM or exact_chain.n_states <= exact_states:
        t0 = time.perf_counter()
        try:
            exact_rates, engine = evaluate_rates(exact_chain, r)
        except (ArithmeticError, np.linalg.LinAlgError):
            top = exact_chain.h - 1  # the exact solve stalled: the ladder below it, with its error bar
        else:
            steps.append(LadderStep(exact_chain.h, exact_chain.n_states,
                                    exact_rates.cost(costs) if costs else math.nan, time.perf_counter() - t0,
                                    engine))
            return finish(ApproxStatus.EXACT, exact_chain, exact_rates, None, None)
    if method == "auto" and reduced.deadline is not None:  # the ladder's bar would leave out the law's error
        return _deadline_route(reduced, policy, costs, rtol=rtol, max_states=max_states, max_seconds=max_seconds,
                               start=start, notes=red.notes)
    large = method == "auto" and LevelChain(reduced, min(h_start + 2, top)).n_states > LADDER_STATES
    if method == "bracket" or large:
        return _bracket(reduced, policy, costs, rtol=rtol, h_start=min(h_start, top), top=top,
                        max_states=max_states, max_seconds=max_seconds, start=start, steps=steps, notes=red.notes)
    done: list[tuple[LevelChain, Rates, Measures, float]] = []  # (chain, rates, measures, cost or NaN)
    given, given_rates = chain, rates
    if rates is not None and rates.levels is not None and len(rates.levels) != reduced.capacity + 1:
        raise InputError("rates", f"carries P(level) for {len(rates.levels)} levels, the model has "
                         f"{reduced.capacity + 1}", "pass the rates of this policy on chain (levels=True)")
    cut: QueueModel | None = None  # the model cut at a level the policy (almost) never reaches
    for h in range(min(h_start, top), top + 1):
        reuse = given is not None and given.model is reduced and given.h == h and given.promotion == "random"
        # the depths share their count maps: the first depth's chain holds them (before it, the caller's)
        counts_of = done[0][0] if done else (given if given is not None and given.model is reduced else None)
        if reuse and given is not None:
            chain = given
        elif cut is not None and (on_cut_model := _cut_chain(cut, h, counts_of=counts_of)) is not None:
            chain = on_cut_model
        else:
            chain = LevelChain(reduced, h, counts_of=counts_of)
        projected = steps[-1].seconds * chain.R * 1.2 if steps else 0.0
        over_time = max_seconds is not None and time.perf_counter() - start + projected > max_seconds
        if done and (chain.n_states > max_states or over_time):
            out_of_time = chain.n_states <= max_states
            break
        t0 = time.perf_counter()
        try:
            if reuse and given_rates is not None and given_rates.levels is not None:
                step_rates, engine = given_rates, "given by the caller"
            elif chain.model is not reduced:
                on_cut = _cut_rates(chain, r, reduced.capacity)
                if on_cut is None:  # the policy does reach the cut: the whole chain, and no cut from now on
                    cut, chain = None, LevelChain(reduced, h, counts_of=chain)
                    step_rates, engine = evaluate_rates(chain, r)
                else:
                    step_rates, engine = on_cut
            else:
                step_rates, engine = evaluate_rates(chain, r)
        except (ArithmeticError, np.linalg.LinAlgError):
            if not done:
                raise
            break
        if not done and step_rates.levels is not None:
            cut = _cut_model(reduced, r, step_rates.levels)
        m = step_rates.measures(r)
        cost = cost_of(m, costs).total if costs is not None else math.nan
        steps.append(LadderStep(h, chain.n_states, cost, time.perf_counter() - t0, engine))
        if chain.exact:
            return finish(ApproxStatus.EXACT, chain, step_rates, None, None)
        done.append((chain, step_rates, m, cost))
        done_measures.append(m)
        if len(done) >= 3:  # two differences: the rate of decay is known
            prev_m, prev_cost = done[-2][2], done[-2][3]
            close = abs(cost - prev_cost) <= rtol * abs(cost) if costs is not None else _relative_gap(m, prev_m) <= rtol
            if close:
                return finish(ApproxStatus.CONVERGED, chain, step_rates, prev_m, prev_cost)
    chain, last_rates, _, _ = done[-1]
    prev = done[-2] if len(done) >= 2 else None
    return finish(ApproxStatus.LIMITED, chain, last_rates, prev[2] if prev else None,
                  prev[3] if prev and costs is not None else None)


def _with_cut_losses(errors: dict[str, float], bound: float, m: Measures, costs: Costs | None
                     ) -> tuple[dict[str, float], float]:
    """The errors and the cost's bar of measures solved on the cut model (module docstring, the cut), with
    the cut's own losses added: the cut chain loses pages only where a batch crosses its capacity L, and each
    is one the whole chain would have admitted (that chain loses only at its capacity, above L, where it holds
    less mass still), so its P_loss is the cut's doing, and each such page would have been served or would
    have expired. The ladder's differences leave this out (every depth is cut alike): at 16 robots, K = 50,
    P_loss 1.2e-14 on the cut against 3e-22 on the whole chain, with a difference between depths of 1.6e-16.
    P_loss, P_success and P_obsolete carry the cut's P_loss in their errors, J its price, lambda (c_loss +
    c_obs) P_loss; its other effects are of the order of the mass cut off (``CUT_CHECK``)."""
    lost = m.p_loss
    out = dict(errors)
    for name in ("p_loss", "p_success", "p_obsolete"):
        out[name] += lost
    if costs is not None:
        bound += (costs.loss + costs.obsolescence) * m.arrival_rate * lost
    return out, bound


def _largest_batch(model: QueueModel, robots_at_level: Sequence[int]) -> int:
    return max(model.arrivals[m].max_batch for m in set(robots_at_level))


def _cut_model(model: QueueModel, robots_at_level: Sequence[int], levels: NDArray[np.float64]) -> QueueModel | None:
    """``model`` with capacity L < K, the smallest L with P(level > L - k) <= ``CUT_TAIL`` on ``levels`` (the
    policy's level distribution on the ladder's first depth; k its largest batch, so that a batch crosses L
    only from those levels), when that saves at least a tenth of the levels; else None (module docstring)."""
    K = model.capacity
    k = _largest_batch(model, robots_at_level)
    tail = np.cumsum(np.asarray(levels, dtype=float)[::-1])[::-1]  # tail[i] = P(level >= i)
    for L in range(k + 2, int(0.9 * K) + 1):
        if tail[L - k + 1] <= CUT_TAIL:
            return dataclasses.replace(model, capacity=L)
    return None


def _cut_chain(cut: QueueModel, h: int, promotion: str = "random", *, share: LevelChain | None = None,
               counts_of: LevelChain | None = None) -> LevelChain | None:
    """The chain of depth h of the cut model, or None where that depth is exact for it (h >= L - 2, or one
    obsolescence phase): the cut model's exact chain may be far larger than the approximate one it stands for.
    ``share``: the whole model's chain of depth h, whose blocks it reuses; ``counts_of``: a chain of another
    depth whose count maps it reuses (``LevelChain``)."""
    law = cut.obsolescence
    if h >= cut.capacity - 2 or law is None or law.order == 1:
        return None
    return LevelChain(cut, h, promotion, share=share, counts_of=counts_of)


def _cut_rates(chain: LevelChain, robots_at_level: Sequence[int], K: int) -> tuple[Rates, str] | None:
    """The policy's rates on ``chain``, a chain of the model cut at L = chain.K, with P(level) padded with zeros
    to K; None when the cut chain's own mass within a batch of L exceeds ``CUT_CHECK`` (then the cut is not
    negligible and the whole chain must be solved)."""
    L = chain.K
    rates, engine = evaluate_rates(chain, robots_at_level[:L + 1])
    assert rates.levels is not None
    near = float(rates.levels[L - _largest_batch(chain.model, robots_at_level[:L + 1]) + 1:].sum())
    if not near <= CUT_CHECK:
        return None
    levels = np.zeros(K + 1)
    levels[:L + 1] = rates.levels
    return Rates(rates.values, levels), f"{engine}, levels 0..{L} of {K} (P(level > {L} - batch) = {near:.1e})"


def _midpoint(a: Measures, b: Measures) -> Measures:
    """The measures halfway between two chains' (distributions entry by entry)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(Measures):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "active_robots_distribution":
            pa, pb = dict(x), dict(y)
            values[f.name] = tuple((r, 0.5 * (pa.get(r, 0.0) + pb.get(r, 0.0))) for r in sorted({*pa, *pb}))
        elif f.name == "queue_length_distribution":
            values[f.name] = tuple(0.5 * (u + v) for u, v in zip(x, y))
        else:
            values[f.name] = 0.5 * (x + y)
    return Measures(**values)


def _bracket(model: QueueModel, policy: QueueLengthPolicy, costs: Costs | None, *, rtol: float, h_start: int,
             top: int, max_states: int, max_seconds: float | None, start: float, steps: list[LadderStep],
             notes: tuple[str, ...]) -> ApproxSolution:
    """The bracket from depth ``h_start`` up (module docstring): urgent-next and patient-next chains."""
    r = policy.robots_at_level
    last: tuple[LevelChain, Measures, float, float, dict[str, float]] | None = None
    out_of_time = False
    pair_seconds = 0.0
    for h in range(h_start, top + 1):
        urgent = LevelChain(model, h, "urgent")
        projected = pair_seconds * urgent.R * 1.2
        over_time = max_seconds is not None and time.perf_counter() - start + projected > max_seconds
        if last is not None and (urgent.n_states > max_states or over_time):
            out_of_time = urgent.n_states <= max_states
            break
        t0 = time.perf_counter()
        if urgent.exact:
            rates, engine = evaluate_rates(urgent, r)
            m = rates.measures(r)
            cost = cost_of(m, costs).total if costs is not None else None
            steps.append(LadderStep(h, urgent.n_states, math.nan if cost is None else cost, time.perf_counter() - t0,
                                    engine))
            return ApproxSolution(True, ApproxStatus.EXACT, STATUS_MESSAGES[ApproxStatus.EXACT], "exact", None, True,
                                  policy, m, cost, 0.0,
                                  dict.fromkeys((*MEASURE_FIELDS, "queue_length_distribution"), 0.0), tuple(steps),
                                  urgent.n_states, time.perf_counter() - start, notes)
        try:
            solves: dict[tuple[int, int], Any] = {}  # the two ends share their diagonal blocks
            ends = [evaluate_rates(chain, r, solves)
                    for chain in (urgent, LevelChain(model, h, "patient", share=urgent))]
        except (ArithmeticError, np.linalg.LinAlgError):
            if last is None:
                raise
            break
        pair_seconds = time.perf_counter() - t0
        (ru, engine), (rp, _) = ends
        mu, mp = ru.measures(r), rp.measures(r)
        mid = _midpoint(mu, mp)
        errors = {k: 0.5 * v for k, v in _differences(mu, mp).items()}
        if costs is not None:
            cost = cost_of(mid, costs).total
            ju, jp = cost_of(mu, costs).total, cost_of(mp, costs).total
            bound = max(abs(cost - ju), abs(cost - jp))
            steps.append(LadderStep(h, 2 * urgent.n_states, cost, pair_seconds, f"bracket, {engine}"))
            close = bound <= rtol * abs(cost)
        else:
            cost, bound = math.nan, math.nan
            steps.append(LadderStep(h, 2 * urgent.n_states, math.nan, pair_seconds, f"bracket, {engine}"))
            close = _relative_gap(mu, mp) <= 2 * rtol
        last = (urgent, mid, cost, bound, errors)
        if close:
            break
    assert last is not None
    chain, mid, cost, bound, errors = last
    converged = (bound <= rtol * abs(cost)) if costs is not None else max(
        errors[k] / max(abs(getattr(mid, k)), 1e-12) for k in MEASURE_FIELDS) <= rtol
    status = ApproxStatus.CONVERGED if converged else ApproxStatus.LIMITED
    message = STATUS_MESSAGES[status] + f" (bracket at h = {chain.h}, 2 x {chain.n_states} states)"
    if status is ApproxStatus.LIMITED and out_of_time:
        message += f"; the time budget of {max_seconds:g} s ran out"
    return ApproxSolution(True, status, message, f"bracket h={chain.h}", chain.h, False, policy, mid,
                          None if costs is None else cost, bound, errors, tuple(steps), 2 * chain.n_states,
                          time.perf_counter() - start, notes, status is ApproxStatus.LIMITED and out_of_time)


def _deadline_route(model: QueueModel, policy: QueueLengthPolicy, costs: Costs | None, *, rtol: float,
                    max_states: int, max_seconds: float | None, start: float,
                    notes: tuple[str, ...]) -> ApproxSolution:
    """The urgent-next chain of depth 0 for k = 1, 2, ... Erlang phases of the deadline, a ladder in k
    (module docstring): at least up to the model's phases, then on until two consecutive k agree within
    ``rtol`` or the next chain is too large (states, a level beyond sparse LU, or time)."""
    from ._deadline import MAX_PHASES, deadline_law
    from ._iterative import SPLU_LIMIT

    if model.deadline is None or model.obsolescence is None:
        raise InputError("method", "the deadline route needs a model with a deadline",
                         "write obsolescence: {deadline: 10}, or use method bracket")
    k = model.obsolescence.order
    law = deadline_law(model.deadline, k)
    if not (np.allclose(model.obsolescence.beta, law.beta) and np.allclose(model.obsolescence.S, law.S)):
        raise InputError("method", "the model's obsolescence law is not the Erlang law of its deadline",
                         "write obsolescence: {deadline: d, phases: k}")
    r = policy.robots_at_level
    steps: list[LadderStep] = []
    found: list[tuple[LevelChain, Measures, float]] = []
    out_of_time = converged = False
    for phases in range(max(k - 2, 1), MAX_PHASES + 1):
        chain = LevelChain(dataclasses.replace(model, obsolescence=deadline_law(model.deadline, phases)), 0, "urgent")
        if phases > k:
            growth = chain.n_states / max(found[-1][0].n_states, 1)
            projected = steps[-1].seconds * growth * 1.2
            out_of_time = max_seconds is not None and time.perf_counter() - start + projected > max_seconds
            if out_of_time or chain.n_states > max_states or chain.max_dim > SPLU_LIMIT:
                break
        t0 = time.perf_counter()
        rates, engine = evaluate_rates(chain, r)
        m = rates.measures(r)
        cost = cost_of(m, costs).total if costs is not None else math.nan
        steps.append(LadderStep(0, chain.n_states, cost, time.perf_counter() - t0, f"deadline k={phases}, {engine}"))
        found.append((chain, m, cost))
        if phases >= k and len(found) >= 3:
            prev_m, prev_cost = found[-2][1], found[-2][2]
            converged = abs(cost - prev_cost) <= rtol * abs(cost) if costs is not None else \
                _relative_gap(m, prev_m) <= rtol
            if converged:
                break
    chain, m, cost = found[-1]
    last_k = max(k - 2, 1) + len(found) - 1
    if len(found) < 2:
        bound = math.inf
        errors = dict.fromkeys((*MEASURE_FIELDS, "queue_length_distribution"), math.inf)
    else:
        pairs = [_differences(b[1], a[1]) for a, b in zip(found, found[1:])]
        factor = widening([abs(b[2] - a[2]) for a, b in zip(found, found[1:])]) if costs is not None else 1.0
        errors = {name: v * max(factor, widening([d[name] for d in pairs])) for name, v in pairs[-1].items()}
        bound = abs(cost - found[-2][2]) * factor if costs is not None else math.nan
    status = ApproxStatus.CONVERGED if converged else ApproxStatus.LIMITED
    message = (f"{STATUS_MESSAGES[status]} (deadline {model.deadline:g} s: urgent-next chains, h = 0, of "
               f"{max(k - 2, 1)}..{last_k} Erlang phases, {chain.n_states} states)")
    if out_of_time:
        message += f"; the time budget of {max_seconds:g} s ran out"
    return ApproxSolution(True, status, message, f"deadline k={last_k}", 0, False, policy, m,
                          None if costs is None else cost, bound, errors, tuple(steps), chain.n_states,
                          time.perf_counter() - start, notes, out_of_time)
