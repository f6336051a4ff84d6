"""Does the fitted model price what was observed? (issue 27, steps 2 and 3, the pure part.)

At every refit the policy that was in force during the window is priced under the fitted model, with an
interval from the fit's own uncertainty, and compared with the cost observed on the same window, with its
interval (batch means, by the caller). :func:`price_interval` draws the joint fit's free parameters from
the normal law of the observed information (:func:`joint_covariance`), rebuilds the model for each draw and
prices the policy exactly (``model.PolicyEvaluator`` on the exact level chain, else ``model.solve``;
``model.solve_hysteresis`` for a park/resume hysteresis policy): the
2.5% and 97.5% points of those prices are the interval (parameter uncertainty; the price itself has no
simulation noise). The draws are quasi-random (:func:`_normal_draws`: a scrambled Sobol sequence through
the normal quantile) and the points are read with the quantile rule that suits a stratified sample
(Hazen's), so that a few dozen draws give the tails of the law: 30 pseudo-random draws with numpy's
default rule gave intervals 11% too narrow on average, and the same 30 draws (one fixed seed) in every
window made that error systematic (issue 27: the shared-phase truth's 95% intervals covered in 90% of 40
independent 3,000 s windows, the Poisson truth's in 82.5%).

:func:`model_check` then says

``misfit``
    |predicted - observed| exceeds z_(1 - alpha/2) times the combined standard error (each interval's
    half-width / z_(1 - alpha/2)); under a correct model this happens with probability alpha (``level``
    = 1 - alpha), the stated false-alarm rate, when both estimates are near normal;
``uncertain``
    not a misfit, but the combined interval is wider than ``max_relative_width`` of the cost (or an
    interval is missing or infinite): the window cannot tell;
``ok``
    otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.special import ndtri

from robotctl.model import Costs, HysteresisPolicy, InputError, QueueLengthPolicy, QueueModel

from ._joint import JointFit, joint_covariance, joint_free_vector, joint_from_free_vector

CHECK_STATUSES = ("ok", "misfit", "uncertain")

#: A policy :func:`price_interval` and :func:`compare_policies` can price: a queue-length policy (solved by
#: ``model.solve``) or a park/resume hysteresis policy (solved exactly by ``model.solve_hysteresis``).
PricedPolicy = QueueLengthPolicy | HysteresisPolicy


@dataclass(frozen=True)
class PricedCost:
    """A cost with its interval.

    Attributes
    ----------
    cost : float
    interval : tuple of float
        (low, high) at ``level``; (nan, nan) when unknown, (-inf, inf) when unbounded.
    level : float
    draws : int
        Parameter draws behind the interval (0: not from draws).
    samples : tuple of float
        The price on each draw (nan where a draw could not be priced), so that :func:`compare_policies`
        pairs a policy already priced on the same draws without solving it again.
    """

    cost: float
    interval: tuple[float, float]
    level: float = 0.95
    draws: int = 0
    samples: tuple[float, ...] = field(default=(), compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"cost": self.cost, "interval": list(self.interval)}


@dataclass(frozen=True)
class ModelCheck:
    """The verdict of :func:`model_check`.

    Attributes
    ----------
    status : str
        ``ok``, ``misfit`` or ``uncertain``.
    recorded_predicted, recorded_observed : PricedCost
        The policy in force during the window, priced under the fit, and as observed.
    z : float
        |predicted - observed| / combined standard error (nan when unknown).
    level : float
    message : str
    """

    status: str
    recorded_predicted: PricedCost
    recorded_observed: PricedCost
    z: float
    level: float
    message: str

    def to_dict(self) -> dict[str, Any]:
        """``{status, recorded_predicted: {cost, interval}, recorded_observed: {cost, interval}, z, level,
        message}`` (issue 27's ``check``)."""
        return {"status": self.status, "recorded_predicted": self.recorded_predicted.to_dict(),
                "recorded_observed": self.recorded_observed.to_dict(), "z": self.z, "level": self.level,
                "message": self.message}


def _half_width(p: PricedCost) -> float:
    lo, hi = p.interval
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return math.inf if (math.isinf(lo) or math.isinf(hi)) else math.nan
    # an asymmetric interval: the half-width on the side facing the other estimate is used by the caller
    return max(hi - p.cost, p.cost - lo, 0.0)


def model_check(predicted: PricedCost, observed: PricedCost, *, level: float = 0.95,
                max_relative_width: float = 0.25) -> ModelCheck:
    """Compare the fitted model's price of the policy in force with its observed cost (module docstring)."""
    if not 0.5 <= level < 1:
        raise InputError("level", f"must be in [0.5, 1), got {level!r}", "e.g. 0.95")
    if not max_relative_width > 0:
        raise InputError("max_relative_width", f"must be > 0, got {max_relative_width!r}", "e.g. 0.25")
    z_crit = float(ndtri(0.5 + level / 2))
    p, o = predicted, observed
    if not (math.isfinite(p.cost) and math.isfinite(o.cost)):
        return ModelCheck("uncertain", p, o, math.nan, level,
                          "uncertain: " + ("no observed cost for the window" if not math.isfinite(o.cost)
                                           else "the fitted model could not price the policy in force"))
    # the half-width facing the other estimate, on each side
    if p.cost >= o.cost:
        hp, ho = p.cost - p.interval[0], o.interval[1] - o.cost
    else:
        hp, ho = p.interval[1] - p.cost, o.cost - o.interval[0]
    hp = hp if math.isfinite(hp) else _half_width(p)
    ho = ho if math.isfinite(ho) else _half_width(o)
    if math.isnan(hp) or math.isnan(ho):
        return ModelCheck("uncertain", p, o, math.nan, level, "uncertain: an interval is missing")
    se = math.hypot(max(hp, 0.0), max(ho, 0.0)) / z_crit
    gap = abs(p.cost - o.cost)
    z = gap / se if se > 0 else (math.inf if gap > 0 else 0.0)
    scale = max(abs(o.cost), abs(p.cost), 1e-300)
    rel = f"{(p.cost - o.cost) / abs(o.cost):+.1%}" if o.cost != 0 else f"{p.cost - o.cost:+.4g}"
    if z > z_crit:
        return ModelCheck("misfit", p, o, z, level,
                          f"misfit: the fitted model prices the policy in force at {p.cost:.4g} against "
                          f"{o.cost:.4g} observed ({rel}; {z:.1f} standard errors, beyond {z_crit:.2f} at level "
                          f"{level:g})")
    width = z_crit * se / scale
    if not math.isfinite(width) or width > max_relative_width:
        return ModelCheck("uncertain", p, o, z, level,
                          f"uncertain: predicted {p.cost:.4g} and observed {o.cost:.4g} agree, but only within "
                          f"±{width:.0%} (wider than ±{max_relative_width:.0%})")
    return ModelCheck("ok", p, o, z, level,
                      f"ok: predicted {p.cost:.4g}, observed {o.cost:.4g} ({rel}; {z:.1f} standard errors)")


def _normal_draws(draws: int, dims: int, seed: int) -> np.ndarray:
    """``draws`` x ``dims`` standard normal draws for the parameter uncertainty: a scrambled Sobol sequence
    (seeded) mapped through the normal quantile, so each coordinate (and, nearly, each direction) is
    stratified: the sample's tails are those of the law, where pseudo-random draws of the same number
    leave the interval's ends with a 13% error (and, read by numpy's default quantile, 11% too close)."""
    from scipy.special import ndtri
    from scipy.stats import qmc

    if dims == 0:
        return np.zeros((draws, 0))
    import warnings

    with warnings.catch_warnings():            # a number of draws other than a power of 2 loses a little balance
        warnings.simplefilter("ignore", UserWarning)
        u = qmc.Sobol(dims, scramble=True, seed=np.random.default_rng(seed)).random(draws)
    return np.asarray(ndtri(np.clip(u, 1e-12, 1 - 1e-12)))


def _tails(x: np.ndarray, level: float) -> tuple[float, float]:
    """The (1 - level) / 2 and (1 + level) / 2 points of the priced draws, by Hazen's rule (the k-th of n
    ordered draws at (k - 1/2) / n, the midpoint of its stratum under :func:`_normal_draws`)."""
    lo, hi = np.quantile(x, [(1 - level) / 2, (1 + level) / 2], method="hazen")
    return float(lo), float(hi)


def _nuisance_laws(base: QueueModel, service_rel_se: float, obsolescence_rel_se: float,
                   z: np.ndarray) -> list[tuple[Any, Any]]:
    """Per draw, the service and obsolescence laws with their means' own uncertainty: each law's rate
    scaled by a log-normal factor exp(N(0, rel_se^2)) (the delta method's standard error of a log mean:
    sqrt(c^2 / n) for n service samples, 1 / sqrt(drops) for a useful life estimated from drops); ``z``
    holds the two normal coordinates of each draw (the last two of :func:`_normal_draws`'s)."""
    for name, val in (("service_rel_se", service_rel_se), ("obsolescence_rel_se", obsolescence_rel_se)):
        if not (isinstance(val, (int, float)) and math.isfinite(val) and val >= 0):
            raise InputError(name, f"must be a finite number >= 0, got {val!r}", "e.g. sqrt(c^2 / samples)")
    if service_rel_se == 0 and obsolescence_rel_se == 0:
        return [(base.service, base.obsolescence)] * z.shape[0]
    from robotctl.model import PH

    out = []
    for zs, zo in z:
        svc = base.service
        if service_rel_se:
            svc = PH(svc.beta, svc.S * math.exp(service_rel_se * zs))
        obs = base.obsolescence
        if obsolescence_rel_se and obs is not None:
            obs = PH(obs.beta, obs.S * math.exp(obsolescence_rel_se * zo))
        out.append((svc, obs))
    return out


#: Largest level of the exact chain that a draw is priced on by the level evaluator
#: (``model.PolicyEvaluator``); above it (or where it fails) ``model.solve``.
EVALUATOR_MAX_DIM = 256


def _exact_plain_costs(model: QueueModel, policies: Sequence[QueueLengthPolicy], costs: Costs) -> list[float]:
    """J of each policy under ``model``, exactly: on the exact level chain by ``model.PolicyEvaluator``
    (the optimiser's evaluator; the chain's blocks are built once and shared by the policies, and only the
    rates are formed, not every measure), about 3x faster than ``model.solve`` per policy on issue 27's
    bench model and equal to it to 1e-14 (tests/fitting/test_modelcheck.py); ``model.solve`` where the
    chain's levels are large or the evaluator fails. An InputError for a policy the model cannot price."""
    from robotctl.model import LevelChain, PolicyEvaluator, cost_of, solve

    chain = LevelChain(model)
    if chain.exact and chain.max_dim <= EVALUATOR_MAX_DIM:
        try:
            ev = PolicyEvaluator(chain, policies[0].robots_at_level)
            out = [float(ev.cost(p.robots_at_level, costs)) for p in policies]
            if all(math.isfinite(x) for x in out):
                return out
        except (np.linalg.LinAlgError, ValueError, ArithmeticError, KeyError, IndexError):
            pass
    return [float(cost_of(solve(model, p).measures, costs).total) for p in policies]


def _priced_modes(base: QueueModel, modes: Sequence[int] | None, *policies: PricedPolicy) -> tuple[int, ...]:
    """The modes to price the draws with: ``modes`` when given, else the ones the policies use (a
    threshold policy's r(i), a hysteresis policy's park and resume vectors), which give the same measures
    and J as every mode (the chain never enters the others) on a smaller chain: bench/adapt.py's 8-robot
    fleet, whose policies use 3 modes, replayed 12,000 s in 45.3 s of CPU instead of 52.5 s (profiled).
    When a policy uses a mode the base model lacks, all of them (the solver then says which is missing)."""
    if modes is not None:
        return tuple(modes)
    used: set[int] = set()
    for p in policies:
        if isinstance(p, HysteresisPolicy):
            used.update(p.park)
            used.update(p.resume)
        else:
            used.update(p.robots_at_level)
    have = tuple(base.modes)
    return tuple(m for m in have if m in used) if used <= set(have) else have


def _exact_costs(model: QueueModel, policies: Sequence[PricedPolicy], costs: Costs) -> list[float]:
    """J of each policy under ``model``, exactly: a hysteresis policy by ``model.solve_hysteresis`` (its
    command term included when ``costs.command`` > 0), the others by :func:`_exact_plain_costs`."""
    from robotctl.model import cost_of, solve_hysteresis

    out = [math.nan] * len(policies)
    plain = [(i, p) for i, p in enumerate(policies) if not isinstance(p, HysteresisPolicy)]
    for i, p in enumerate(policies):
        if isinstance(p, HysteresisPolicy):
            out[i] = float(cost_of(solve_hysteresis(model, p).measures, costs).total)
    if plain:
        for (i, _), x in zip(plain, _exact_plain_costs(model, [p for _, p in plain], costs), strict=True):
            out[i] = x
    return out


def price_interval(joint: JointFit, base: QueueModel, policy: PricedPolicy, costs: Costs, *,
                   modes: Sequence[int] | None = None, draws: int = 40, level: float = 0.95, seed: int = 0,
                   covariance: np.ndarray | None = None, service_rel_se: float = 0.0,
                   obsolescence_rel_se: float = 0.0, batch_laws: bool = True) -> PricedCost:
    """The cost of ``policy`` under the joint fit, with an interval from the fit's parameter uncertainty.

    Parameters
    ----------
    joint : JointFit
        Its arrivals replace ``base``'s (service, obsolescence, capacity and admission are ``base``'s).
    base : QueueModel
        The fitted model (the modes the policy uses are the ones priced unless ``modes`` is given).
    policy : QueueLengthPolicy or HysteresisPolicy
        A hysteresis policy (the park/resume policy a refit adopts under ``robots.hysteresis: auto``) is
        priced on each draw by ``model.solve_hysteresis``; the draws, seed and quantile rule are the same.
    costs : Costs
    draws : int
        Parameter draws from N(estimate, inverse observed information) in log coordinates.
    seed : int
        The draws' random seed (the function is deterministic).
    covariance : ndarray, optional
        :func:`joint_covariance` already computed.
    service_rel_se, obsolescence_rel_se : float
        Relative standard errors of the service and useful-life means (0: known); each draw scales the
        law's rate by exp(N(0, rel_se^2)), so the interval carries their uncertainty too.
    batch_laws : bool
        Draw the batch-size laws too (:func:`_batch_laws`); False holds them at the estimate.
    """
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 2:
        raise InputError("draws", f"must be a whole number >= 2, got {draws!r}", "e.g. 40")
    want = _priced_modes(base, modes, policy)
    _nuisance_laws(base, service_rel_se, obsolescence_rel_se, np.zeros((0, 2)))   # checks the standard errors

    def price(params: Any, svc: Any = base.service, obs: Any = base.obsolescence) -> float:
        model = QueueModel(base.capacity, params.arrivals(want), svc, obs, base.admission)
        return _exact_costs(model, (policy,), costs)[0]

    point = price(joint.params)
    cov = joint_covariance(joint.params, joint.data) if covariance is None else np.asarray(covariance)
    if not np.all(np.isfinite(cov)):
        return PricedCost(point, (-math.inf, math.inf), level, 0)
    prices = []
    for params, svc, obs in _parameter_draws(joint, base, cov, draws, seed, service_rel_se, obsolescence_rel_se,
                                             batch_laws):
        try:
            prices.append(price(params, svc, obs))
        except InputError:
            prices.append(math.nan)
    a = np.asarray(prices)
    a = a[np.isfinite(a)]
    if a.size < 2:
        return PricedCost(point, (-math.inf, math.inf), level, int(a.size), tuple(prices))
    lo, hi = _tails(a, level)
    return PricedCost(point, (min(lo, point), max(hi, point)), level, int(a.size), tuple(prices))


def _batch_laws(joint: JointFit, draws: int, seed: int) -> list[np.ndarray] | None:
    """Per draw, the batch-size laws with their own uncertainty: under ``batch_law: mode`` the sizes of a
    mode's batches are a multinomial sample independent of the phases (the likelihood factorises, so
    these parameters are uncorrelated with the rates and :func:`joint_covariance` leaves them out), and
    each mode's law is drawn from Dirichlet(counts of each size), whose mean is the estimate and whose
    covariance is the multinomial's (a ``linear`` structure pools the modes, as its M-step does). A
    separate stream of the seed. None under ``batch_law: phase`` (the laws then stay at the estimate) and
    under ``general`` (its D_k^(l) carry the sizes and are drawn with the other free parameters)."""
    params, data = joint.params, joint.data
    if params.batch_law != "mode" or params.structure == "general":
        return None                  # general: the sizes are in its arrival matrices, drawn with the rest
    K = params.batch_probs.shape[2]
    live = data.sizes > 0
    sizes = np.minimum(data.sizes[live], K) - 1
    counts = np.zeros((len(params.modes), K))
    np.add.at(counts, (data.mode_index[live], sizes), 1.0)
    if params.structure == "linear":
        counts[:] = counts.sum(axis=0)
    rng = np.random.default_rng([seed, 2])
    out = []
    for _ in range(draws):
        probs = params.batch_probs.copy()
        for li in range(len(params.modes)):
            seen = counts[li] > 0
            if seen.sum() < 2:
                continue
            g = rng.gamma(counts[li, seen])
            mass = float(probs[li, 0, seen].sum())        # what the estimate gives the sizes seen
            probs[li, :, seen] = (mass * g / g.sum())[:, None]
        out.append(probs)
    return out


def _parameter_draws(joint: JointFit, base: QueueModel, cov: np.ndarray, draws: int, seed: int,
                     service_rel_se: float, obsolescence_rel_se: float, batch_laws: bool = True
                     ) -> list[tuple[Any, Any, Any]]:
    """``draws`` draws of (joint parameters, service law, obsolescence law) from the fit's uncertainty:
    the free parameters from N(estimate, ``cov``) in log coordinates, the batch-size laws
    (:func:`_batch_laws`), the service and useful-life means (:func:`_nuisance_laws`); the normal
    coordinates of all of them from one quasi-random sequence (:func:`_normal_draws`). The same ``seed``
    gives the same draws (common random numbers between policies)."""
    x0 = joint_free_vector(joint.params)
    w, U = np.linalg.eigh(0.5 * (cov + cov.T))
    root = U * np.sqrt(np.maximum(w, 0.0))
    z = _normal_draws(draws, x0.size + 2, seed)
    laws = _nuisance_laws(base, service_rel_se, obsolescence_rel_se, z[:, x0.size:])
    probs = _batch_laws(joint, draws, seed) if batch_laws else None
    out = []
    for i, (svc, obs) in enumerate(laws):
        step = root @ z[i, :x0.size]
        # no perturbation (a zero covariance): the estimate itself, not its round trip through the log
        # coordinates (which moves the last bits, and the price with them)
        params = joint_from_free_vector(joint.params, x0 + step) if step.any() else joint.params
        if probs is not None:
            params = replace(params, batch_probs=probs[i])
        out.append((params, svc, obs))
    return out


@dataclass(frozen=True)
class PolicyComparison:
    """Two policies priced on the same parameter draws (:func:`compare_policies`).

    Attributes
    ----------
    new, current : PricedCost
        Each policy's cost under the fit, with its interval.
    saving : PricedCost
        current - new, with the interval of the paired differences.
    decisive : bool
        The saving's interval lies above 0: the new policy is better beyond the fit's uncertainty.
    """

    new: PricedCost
    current: PricedCost
    saving: PricedCost
    decisive: bool

    def to_dict(self) -> dict[str, Any]:
        return {"new": self.new.to_dict(), "current": self.current.to_dict(), "saving": self.saving.to_dict(),
                "decisive": self.decisive}


def compare_policies(joint: JointFit, base: QueueModel, new: PricedPolicy, current: PricedPolicy,
                     costs: Costs, *, modes: Sequence[int] | None = None, draws: int = 40, level: float = 0.95,
                     seed: int = 0, covariance: np.ndarray | None = None, service_rel_se: float = 0.0,
                     obsolescence_rel_se: float = 0.0, current_priced: PricedCost | None = None,
                     batch_laws: bool = True) -> PolicyComparison:
    """Price ``new`` and ``current`` on the same draws of the joint fit's parameters (see
    :func:`price_interval`); the paired differences give the interval of the saving, so that a new policy
    is adopted only when it beats the one in force beyond the fit's uncertainty.

    Either policy may be a :class:`~robotctl.model.HysteresisPolicy` (priced by ``model.solve_hysteresis``).
    ``current_priced``: ``current`` already priced by :func:`price_interval` with the same fit, draws,
    seed, covariance and standard errors (its ``samples``): it is not solved again. The draws stop as
    soon as the verdict is settled: once more savings are <= 0 than the quantile at (1 - level) / 2 can
    pass over, the saving's interval reaches 0 whatever the remaining draws give (not decisive; the
    saving's and the new policy's intervals then come from the draws taken, the current policy's from
    ``current_priced`` when given)."""
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 2:
        raise InputError("draws", f"must be a whole number >= 2, got {draws!r}", "e.g. 40")
    want = _priced_modes(base, modes, new, current)
    _nuisance_laws(base, service_rel_se, obsolescence_rel_se, np.zeros((0, 2)))   # checks the standard errors

    def prices(params: Any, svc: Any = base.service, obs: Any = base.obsolescence) -> tuple[float, float]:
        model = QueueModel(base.capacity, params.arrivals(want), svc, obs, base.admission)
        p_new, p_cur = _exact_costs(model, (new, current), costs)      # one chain for both
        return p_new, p_cur

    def price_one(params: Any, svc: Any, obs: Any) -> float:
        model = QueueModel(base.capacity, params.arrivals(want), svc, obs, base.admission)
        return _exact_costs(model, (new,), costs)[0]

    reuse = (current_priced is not None and len(current_priced.samples) == draws
             and math.isfinite(current_priced.cost))
    if reuse:
        assert current_priced is not None
        p_cur = current_priced.cost
        p_new = price_one(joint.params, base.service, base.obsolescence)
    else:
        p_new, p_cur = prices(joint.params)
    cov = joint_covariance(joint.params, joint.data) if covariance is None else np.asarray(covariance)
    unbounded = (-math.inf, math.inf)
    if not np.all(np.isfinite(cov)):
        return PolicyComparison(PricedCost(p_new, unbounded, level), PricedCost(p_cur, unbounded, level),
                                PricedCost(p_cur - p_new, unbounded, level), False)
    pairs = []
    # more savings <= 0 than this and the lower quantile (Hazen's, at most the order statistic
    # ceil(q n + 1/2) for n <= draws) is <= 0 whatever the remaining draws give
    settled = math.ceil((1 - level) / 2 * draws + 0.5)
    nonpositive = 0
    drawn = _parameter_draws(joint, base, cov, draws, seed, service_rel_se, obsolescence_rel_se, batch_laws)
    for i, (params, svc, obs) in enumerate(drawn):
        try:
            if reuse:
                assert current_priced is not None
                cur = current_priced.samples[i]
                if not math.isfinite(cur):
                    continue
                pair = (price_one(params, svc, obs), cur)
            else:
                pair = prices(params, svc, obs)
        except InputError:
            continue
        pairs.append(pair)
        nonpositive += pair[1] - pair[0] <= 0
        if nonpositive >= settled and len(pairs) >= 2:
            break
    if len(pairs) < 2:
        return PolicyComparison(PricedCost(p_new, unbounded, level), PricedCost(p_cur, unbounded, level),
                                PricedCost(p_cur - p_new, unbounded, level), False)
    a = np.asarray(pairs)

    def interval(x: np.ndarray, point: float) -> tuple[float, float]:
        lo, hi = _tails(x, level)
        return min(lo, point), max(hi, point)

    saving = PricedCost(p_cur - p_new, interval(a[:, 1] - a[:, 0], p_cur - p_new), level, len(pairs))
    cur_priced = (current_priced if reuse and current_priced is not None
                  else PricedCost(p_cur, interval(a[:, 1], p_cur), level, len(pairs)))
    return PolicyComparison(PricedCost(p_new, interval(a[:, 0], p_new), level, len(pairs)), cur_priced, saving,
                            saving.interval[0] > 0)
