"""The refit's computation: from the recent window of the delivery log to a policy, as plain data.

:func:`compute_refit` fits the model (``fitting.fit_model``, completed by ``fitting.adjust_arrivals``
with the arrivals the agent remembers of modes the window misses; on the deliveries since a change of the
rates when ``fitting.locate_change`` finds one, :func:`_change_stage`; or, for a cold start below
``refit.min_deliveries``, ``fitting.cold_start_model`` with its policy optimised under the pessimistic
end of its intervals, :func:`_cold_stage`) and optimises the thresholds
(``policies.optimise``); with ``policy.kind: mdp`` it then tries paper 001's MDP on the fitted model
(:func:`_mdp_stage`) and keeps the threshold optimum, saying why, where the MDP does not apply. It is one
function of picklable data (:class:`RefitInput`), so that
:mod:`agent.worker` can run it in a thread or a worker process, and it never raises: every failure is a
:class:`RefitOutcome` with ``success=False``, the ``stage`` that failed and why. A success carries the
:class:`~agent.policy.PolicyFit` that the agent adopts as it is.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from robotctl.model import (
    PH,
    InputError,
    ModeArrivals,
    QueueModel,
    ThresholdPolicy,
    cost_of,
    reduce_model,
)
from robotctl.policies import RobotsProblem, Targets, solve_dynamic

from .policy import DynamicDecision, PolicyFit, finite
from .refit_data import RefitInput, RefitOutcome, RefitStage

LOG = logging.getLogger("robotctl.agent.refit")

#: Most Bellman steps of a refit's MDP (``policy.kind: mdp``: value-iteration steps, plus one per policy
#: evaluation of the policy iteration); one that has not converged by then leaves the threshold optimum in force.
MDP_MAX_ITERATIONS = 200_000


def fit_summary(model: QueueModel, fit: Any = None, sources: Mapping[int, str] | None = None,
                at: float | None = None, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Rates and lag-1 correlations per mode (with where each came from), service and obsolescence, and
    the fit's own status."""
    per_mode = {}
    prev_modes = (previous or {}).get("modes", {})
    for m in model.modes:
        b = model.arrivals[m]
        source = (sources or {}).get(m, "fitted")
        d: dict[str, Any] = {"arrival_rate": finite(float(b.rate)),
                             "lag1_correlation": finite(float(b.lag1_correlation)),
                             "mean_batch_size": finite(float(b.mean_batch_size)), "source": source}
        if source == "observed":
            d["observed_at"] = at
        elif source == "remembered":
            d["observed_at"] = prev_modes.get(str(m), {}).get("observed_at")
        per_mode[str(m)] = d
    out: dict[str, Any] = {
        "modes": per_mode,
        "service_mean_s": finite(float(model.service.mean)),
        "service_scv": finite(float(model.service.scv)),
        "mean_useful_life_s": (finite(float(model.obsolescence.mean)) if model.obsolescence is not None
                               else None),
    }
    if fit is not None:
        status = getattr(fit, "status", None)
        out["status"] = getattr(status, "name", str(status)).lower() if status is not None else None
        out["success"] = bool(getattr(fit, "success", True))
        out["message"] = str(getattr(fit, "message", ""))
        out["rungs"] = _rungs(fit)
    return out


def _rungs(fit: Any) -> dict[str, str]:
    """Fallback rungs of the fit, as {part: rung}: ``mode m`` for each mode and ``service``; for other
    shapes of fit, every report entry whose key mentions ``rung``."""
    found: dict[str, str] = {}
    modes = getattr(fit, "modes", None)
    if isinstance(modes, tuple) and all(hasattr(mf, "rung") for mf in modes):
        for mf in modes:
            found[f"mode {mf.mode}"] = str(mf.rung)
        service = getattr(getattr(fit, "report", None), "service", None)
        if isinstance(service, Mapping) and "rung" in service:
            found["service"] = str(service["rung"])
        return found
    try:
        report = fit.to_dict().get("report", {})
    except Exception:
        return found

    def walk(obj: Any, path: str) -> None:
        if isinstance(obj, Mapping):
            for k, v in obj.items():
                p = f"{path}.{k}" if path else str(k)
                if "rung" in str(k).lower() and isinstance(v, str | int):
                    found[path or str(k)] = str(v)
                else:
                    walk(v, p)
        elif isinstance(obj, list | tuple):
            for n, v in enumerate(obj):
                walk(v, f"{path}[{n}]")

    walk(report, "")
    return found


FitFn = Callable[..., Any]
OptimiseFn = Callable[..., Any]


@dataclass(frozen=True, eq=False)
class _Fitted:
    """The fit stage's product: the model with the agent's memory of modes, and its summary."""

    model: QueueModel
    summary: dict[str, Any]
    seconds: float
    joint: Any = None
    #: the joint fit's inverse observed information, computed once for the check and the adoption
    cache: dict[str, Any] = field(default_factory=dict)

    def covariance(self) -> Any:
        if "covariance" not in self.cache:
            self.cache["covariance"] = self.joint.covariance()
        return self.cache["covariance"]


def _fit_stage(inp: RefitInput, fit_fn: FitFn) -> _Fitted | RefitOutcome:
    """Fit the window, then complete the arrivals with the remembered modes; a failure is an outcome."""
    from robotctl.fitting import ModelFit, ModeTrajectory, adjust_arrivals

    n = int(inp.delivery_times.size)
    t0 = time.perf_counter()
    time_in_modes: dict[str, Any] = {}
    try:
        if inp.rate_from_exposure and inp.mode_changes is not None:
            epochs, modes = inp.mode_changes
            time_in_modes["mode_changes"] = ModeTrajectory(epochs, modes, end_s=inp.window[1])
        elif inp.rate_from_exposure:
            time_in_modes["mode_exposure_s"] = dict(inp.mode_exposure_s)
        if inp.joint_init is not None:
            time_in_modes["joint_init"] = inp.joint_init
        fit = fit_fn(inp.delivery_times, pages=inp.pages, modes=inp.modes, all_modes=inp.all_modes,
                     service_times=inp.service_times, sizes_bytes=inp.sizes_bytes,
                     processing_rate_bps=inp.processing_rate_bps, mean_useful_life_s=inp.mean_useful_life_s,
                     obsolete_drops=inp.obsolete_drops, obsolete_exposure_s=inp.obsolete_exposure_s,
                     capacity=inp.capacity, options=dict(inp.options) or None, **time_in_modes)
    except InputError as exc:
        return RefitOutcome(False, RefitStage.FIT, f"fit rejected the window: {exc}",
                            fit_seconds=time.perf_counter() - t0, deliveries=n)
    except Exception as exc:
        LOG.exception("event=fit_crashed")
        return RefitOutcome(False, RefitStage.FIT, f"fit failed: {type(exc).__name__}: {exc}",
                            fit_seconds=time.perf_counter() - t0, deliveries=n)
    fitted = getattr(fit, "model", None)
    if fitted is None or not bool(getattr(fit, "success", True)):
        return RefitOutcome(False, RefitStage.FIT,
                            f"fit did not succeed: {getattr(fit, 'message', 'no model')}",
                            fit_seconds=time.perf_counter() - t0, deliveries=n)
    sources: Mapping[int, str]
    if isinstance(fit, ModelFit):
        try:
            adjusted = adjust_arrivals(fit, inp.remembered)
            fitted = QueueModel(fitted.capacity, adjusted.arrivals, fitted.service, fitted.obsolescence,
                                fitted.admission)
        except InputError as exc:
            return RefitOutcome(False, RefitStage.FIT, f"the fitted arrivals could not be adjusted: {exc}",
                                fit_seconds=time.perf_counter() - t0, deliveries=n)
        sources = adjusted.sources
    else:  # a stand-in fit (tests): its arrivals as they are
        sources = {m: "fitted" for m in fitted.arrivals.modes}
    if inp.useful_life is not None:
        from robotctl.model import deadline_law

        deadline = float(inp.useful_life["deadline"])
        fitted = QueueModel(fitted.capacity, fitted.arrivals, fitted.service,
                            deadline_law(deadline, int(inp.useful_life["phases"])), fitted.admission, deadline)
    seconds = time.perf_counter() - t0
    joint = getattr(fit, "joint", None)
    summary = fit_summary(fitted, fit, sources, inp.window[1], inp.previous_fit)
    if joint is not None:
        summary["joint"] = {"phases": joint.params.phases, "structure": joint.params.structure,
                            "loglik": finite(joint.loglik), "bic": finite(joint.bic), "iterations": joint.iterations}
    return _Fitted(fitted, summary, seconds, joint)


def _nuisance_se(inp: RefitInput) -> dict[str, Any]:
    """The relative standard errors of the service and useful-life means the window estimated (0 for a
    configured one), so the joint fit's cost intervals carry them too: sqrt(c^2 / n) of the service
    sample (or of the page sizes over a configured processing rate), 1 / sqrt(drops) of a useful life
    estimated from obsolete drops."""
    out: dict[str, Any] = {"service_rel_se": 0.0, "obsolescence_rel_se": 0.0}
    sample = inp.service_times if inp.service_times is not None else inp.sizes_bytes
    if sample is not None:
        x = np.asarray(sample, dtype=float)
        x = x[np.isfinite(x)]
        mean = float(x.mean()) if x.size else 0.0
        if x.size >= 2 and mean > 0:
            out["service_rel_se"] = math.sqrt(float(x.var(ddof=1)) / mean**2 / x.size)
    if inp.mean_useful_life_s is None and inp.obsolete_drops is not None:
        out["obsolescence_rel_se"] = 1.0 / math.sqrt(max(int(inp.obsolete_drops), 1))
    return out


def _draw_seed(inp: RefitInput) -> int:
    """The seed of the cost intervals' parameter draws: a checksum of the window's delivery times, so a
    refit is reproducible while windows draw afresh (one seed for every window would make the draws'
    own error the same in all of them, a bias of the intervals rather than noise)."""
    import zlib

    return zlib.crc32(np.ascontiguousarray(inp.delivery_times, dtype=np.float64).tobytes())


def _check_stage(inp: RefitInput, fitted: _Fitted) -> RefitOutcome | None:
    """Issue 27's model check: price the policy in force under the fitted model (with the joint fit's
    parameter uncertainty when there is one) and compare with its observed cost on the window. The verdict
    goes in the summary's ``check``; with a joint fit (whose price has an interval from the parameters'
    uncertainty) a ``misfit`` is a failed refit (stage ``check``), so the agent keeps its last good policy
    and says why; with the per-mode fit (a point price) it is reported only."""
    from robotctl.fitting import PricedCost, model_check, price_interval

    if inp.policy_in_force is None or inp.observed_cost is None:
        fitted.summary["check"] = {"status": "uncertain", "recorded_predicted": None, "recorded_observed": None,
                                   "message": "uncertain: no policy in force with an observed cost over the window"}
        return None
    cost, lo, hi = (float(x) for x in inp.observed_cost)
    observed = PricedCost(cost, (lo, hi), inp.check_level)
    try:
        if fitted.joint is not None:
            predicted = price_interval(fitted.joint, fitted.model, inp.policy_in_force, inp.costs,
                                       covariance=fitted.covariance(), **_nuisance_se(inp), seed=_draw_seed(inp),
                                       draws=inp.check_draws, level=inp.check_level)
            fitted.cache["priced"] = (inp.policy_in_force, predicted)   # its draws serve the adoption too
        else:
            price = float(cost_of(_solve_policy(fitted.model, inp.policy_in_force), inp.costs).total)
            predicted = PricedCost(price, (price, price), inp.check_level)
    except InputError as exc:
        fitted.summary["check"] = {"status": "uncertain", "recorded_predicted": None,
                                   "recorded_observed": observed.to_dict(),
                                   "message": f"uncertain: the policy in force cannot be priced under the fit: {exc}"}
        return None
    check = model_check(predicted, observed, level=inp.check_level)
    fitted.summary["check"] = {k: (finite(v) if isinstance(v, float) else v) for k, v in check.to_dict().items()}
    if check.status == "misfit" and fitted.joint is None:
        # the per-mode fit has no parameter uncertainty: its price is a point, so the check is reported
        # (GET /v1/policy, the refit log) but does not refuse the fit
        LOG.warning("event=fit_misfit enforced=false message=%r", check.message)
        fitted.summary["check"]["message"] += " (reported only: the per-mode fit has no parameter uncertainty)"
        return None
    if check.status == "misfit":
        LOG.warning("event=fit_misfit message=%r", check.message)
        return RefitOutcome(False, RefitStage.CHECK, check.message, fit_seconds=fitted.seconds,
                            deliveries=int(inp.delivery_times.size))
    return None


def _solve_policy(model: QueueModel, policy: ThresholdPolicy) -> Any:
    """The stationary measures of ``policy`` under ``model``."""
    from robotctl.model import solve

    return solve(model, policy).measures


def _targets_stage(inp: RefitInput, targets: Targets, fitted: _Fitted) -> RefitOutcome:
    """The policy of least robot time that meets ``targets`` under the fitted model. When none does, the
    one closest to them is adopted all the same (it is the best the fitted traffic allows), and the fit
    summary's ``targets`` says which bounds hold (on /v1/policy, /metrics and in the log)."""
    from robotctl.policies import optimise_for_targets

    n = int(inp.delivery_times.size)
    t1 = time.perf_counter()
    try:
        found = optimise_for_targets(fitted.model, targets, modes=inp.search_modes)
    except InputError as exc:
        return RefitOutcome(False, RefitStage.SOLVE, f"targets search failed: {exc}", fit_seconds=fitted.seconds,
                            solve_seconds=time.perf_counter() - t1, deliveries=n)
    summary = dict(fitted.summary)
    summary["targets"] = {"met": dict(found.met), "status": found.status.value, "message": found.message}
    if not found.success:
        LOG.warning("event=targets_not_met policy=%s message=%r", found.policy, found.message)
    result = PolicyFit(found.policy, found.policy.modes, found.policy.thresholds, found.measures,
                       cost_of(found.measures, inp.costs), summary, fitted.model, n, inp.window)
    message = "adopted" if found.success else f"adopted, targets not met: {found.message}"
    return RefitOutcome(True, RefitStage.DONE, message, result, fit_seconds=fitted.seconds,
                        solve_seconds=time.perf_counter() - t1, deliveries=n)


def _optimise_stage(inp: RefitInput, fitted: _Fitted, optimise_fn: OptimiseFn) -> RefitOutcome:
    """Optimise the thresholds under the fitted model; the outcome carries the policy to adopt."""
    if inp.targets is not None:
        return _targets_stage(inp, inp.targets, fitted)
    n = int(inp.delivery_times.size)
    t1 = time.perf_counter()
    try:
        search = optimise_fn(fitted.model, inp.costs, modes=inp.search_modes)
    except Exception as exc:
        if not isinstance(exc, InputError):
            LOG.exception("event=optimise_crashed")
        return RefitOutcome(False, RefitStage.SOLVE, f"optimise failed: {type(exc).__name__}: {exc}",
                            fit_seconds=fitted.seconds, solve_seconds=time.perf_counter() - t1, deliveries=n)
    solve_s = time.perf_counter() - t1
    best = getattr(search, "best", None)
    if best is None or not bool(getattr(search, "success", True)) or not math.isfinite(best.cost.total):
        return RefitOutcome(False, RefitStage.SOLVE,
                            f"optimise did not succeed: {getattr(search, 'message', 'no optimum')}",
                            fit_seconds=fitted.seconds, solve_seconds=solve_s, deliveries=n)
    result = PolicyFit(best.policy, tuple(best.modes), tuple(best.thresholds), best.measures, best.cost,
                       fitted.summary, fitted.model, n, inp.window)
    message = "adopted"
    if fitted.joint is not None:
        result, message = _beyond_uncertainty(inp, fitted, result)
    return RefitOutcome(True, RefitStage.DONE, message, result, fit_seconds=fitted.seconds,
                        solve_seconds=time.perf_counter() - t1, deliveries=n)


def _beyond_uncertainty(inp: RefitInput, fitted: _Fitted, result: PolicyFit) -> tuple[PolicyFit, str]:
    """Issue 27, step 3: the new optimum's cost interval from the joint fit's uncertainty
    (``fit["predicted"]``), and the policy in force kept unless the new one beats it beyond that
    uncertainty (the paired saving's interval above 0), so the fleet does not flap between near-equal
    policies."""
    from dataclasses import replace

    from robotctl.fitting import compare_policies, price_interval

    summary = dict(result.fit)
    current = inp.current_policy if inp.current_policy is not None else inp.policy_in_force
    cached_policy, cached = fitted.cache.get("priced", (None, None))
    try:
        if current is None or current == result.policy:
            if cached is not None and cached_policy == result.policy:
                priced = cached
            else:
                priced = price_interval(fitted.joint, fitted.model, result.policy, inp.costs,
                                        covariance=fitted.covariance(), **_nuisance_se(inp), seed=_draw_seed(inp),
                                        draws=inp.check_draws, level=inp.check_level)
            summary["predicted"] = {"cost": finite(priced.cost), "cost_interval": [finite(x) for x in priced.interval]}
            return replace(result, fit=summary), "adopted"
        cmp = compare_policies(fitted.joint, fitted.model, result.policy, current, inp.costs,
                               covariance=fitted.covariance(), **_nuisance_se(inp), seed=_draw_seed(inp),
                               draws=inp.check_draws, level=inp.check_level,
                               current_priced=cached if cached_policy == current else None)
    except InputError as exc:
        summary["predicted"] = {"cost": finite(float(result.cost.total)) if result.cost else None,
                                "cost_interval": None, "message": f"no interval: {exc}"}
        return replace(result, fit=summary), "adopted"
    summary["predicted"] = {"cost": finite(cmp.new.cost), "cost_interval": [finite(x) for x in cmp.new.interval]}
    summary["decision"] = {"saving": finite(cmp.saving.cost),
                           "saving_interval": [finite(x) for x in cmp.saving.interval], "decisive": cmp.decisive}
    if cmp.decisive:
        return replace(result, fit=summary), "adopted"
    measures = _solve_policy(fitted.model, current)
    cost = cost_of(measures, inp.costs)
    summary["predicted"] = {"cost": finite(cmp.current.cost),
                            "cost_interval": [finite(x) for x in cmp.current.interval]}
    summary["decision"]["status"] = "uncertain"
    why = (f"kept the policy in force: the new optimum would save {cmp.saving.cost:.4g} "
           f"[{cmp.saving.interval[0]:.4g}, {cmp.saving.interval[1]:.4g}], within the fit's uncertainty")
    summary["decision"]["reason"] = why
    kept = replace(result, policy=current, modes=tuple(getattr(current, "modes", ())),
                   thresholds=tuple(getattr(current, "thresholds", ())), measures=measures, cost=cost, fit=summary)
    return kept, why


def _exponential_service(inp: RefitInput, law: PH) -> PH:
    """The service law as paper 001 needs it: exponential of the fitted mean when the samples do not
    reject it, by the test the arrival fit applies to intervals (fitting's ``poisson`` rung): the sample's
    c^2 within z standard errors of 1 (delta method, z the two-sided quantile of ``fit.options``'
    significance). The moment fit itself always matches the sample's c^2, which is never exactly 1."""
    from scipy.special import ndtri

    from robotctl.fitting import FitOptions, sample_stats

    x = inp.service_times if inp.service_times is not None else inp.sizes_bytes
    if x is None or x.size < 2 or not float(np.mean(x)) > 0:
        raise InputError("model.service", f"has {law.order} phases and no samples to test exponential service",
                         "report service_s with completions")
    stats = sample_stats(np.asarray(x, dtype=float), None, 0)
    significance = float(inp.options.get("significance", FitOptions().significance))
    if not stats.scv_consistent_with_one(float(ndtri(1.0 - significance / 2))):
        raise InputError("model.service", f"is not exponential: c^2 = {stats.scv:.3g} ± {stats.scv_stderr:.2g} "
                         f"from {stats.n} samples (exponential: 1, significance {significance:g})",
                         "paper 001's MDP needs exponential service; the threshold policy stays")
    return PH.exponential(1.0 / law.mean)


def _mdp_problem(model: QueueModel, inp: RefitInput) -> RobotsProblem:
    """Paper 001's problem on the fitted model, exactly reduced as the threshold search solves it (a
    Poisson mode written with two phases lumps back to one), with exponential service where the samples
    allow it (:func:`_exponential_service`), and restricted to ``policy.modes``; an InputError names the
    assumption the fitted traffic does not meet."""
    reduced = reduce_model(model).model
    if reduced.obsolescence is None and reduced.service.order > 1:
        reduced = QueueModel(reduced.capacity, reduced.arrivals, _exponential_service(inp, reduced.service),
                             None, reduced.admission)
    if inp.search_modes is not None and set(inp.search_modes) != set(reduced.modes):
        arrivals = ModeArrivals.per_mode({m: reduced.arrivals[m] for m in sorted(inp.search_modes)})
        reduced = QueueModel(reduced.capacity, arrivals, reduced.service, reduced.obsolescence, reduced.admission)
    return RobotsProblem.from_model(reduced, inp.costs)


def _mdp_stage(inp: RefitInput, out: RefitOutcome) -> RefitOutcome:
    """``policy.kind: mdp``: paper 001's optimal dynamic policy on the fitted model, in force in place of
    the threshold optimum when the fitted traffic meets the paper's assumptions (Poisson deliveries of
    single pages per number of active robots, the modes consecutive, exponential service, no
    obsolescence, no response cost) and the value iteration converged with a single recurrent class.
    Otherwise the threshold optimum stays, and ``fit["control"]["reason"]`` says why.

    ``fit["control"]["mdp"]`` holds the MDP policy's exact cost next to the threshold optimum's under the
    same fitted model. The MDP parks only the robot that delivered and wakes one robot per completion
    (paper 001's actions), while a threshold policy may switch several robots at once, so the threshold
    optimum is often the cheaper of the two; the MDP is for fleets that can only be driven that way."""
    res = out.result
    if inp.policy_kind != "mdp" or res is None or res.model is None or res.cost is None:
        return out
    from dataclasses import replace

    t0 = time.perf_counter()
    # reason_code: a fixed set for the metric robotctl_policy_kind_reason (metrics.POLICY_KIND_REASONS)
    info: dict[str, Any] = {"requested": "mdp", "in_force": "thresholds", "reason": None, "reason_code": None}
    dynamic = None
    try:
        if inp.targets is not None:
            raise InputError("targets", "are set, and the MDP minimises the costs, not the robot time under "
                             "bounds", "clear targets: to run the MDP policy")
        problem = _mdp_problem(res.model, inp)
        opt = solve_dynamic(problem, max_iterations=MDP_MAX_ITERATIONS)
    except InputError as exc:
        info["reason"] = (str(exc) if exc.field == "targets"
                          else f"the fitted model does not meet paper 001's assumptions: {exc}")
        info["reason_code"] = "targets_set" if exc.field == "targets" else "assumptions_not_met"
    else:
        measures = opt.measures()
        cost = cost_of(measures, inp.costs)
        info["mdp"] = {"cost": finite(cost.total), "threshold_cost": finite(res.cost.total),
                       "iterations": opt.iterations, "status": opt.status.name.lower(),
                       "active_range": list(opt.active_range), "min_robots": problem.min_robots,
                       "robots": problem.robots}
        if not opt.success:
            info["reason"] = f"the MDP was not solved: {opt.message} ({opt.iterations} iterations)"
            info["reason_code"] = "mdp_unsolved"
        else:
            info["in_force"] = "mdp"
            info["reason_code"] = "as_configured"
            dynamic = DynamicDecision(opt.policy, problem.min_robots, problem)
    seconds = time.perf_counter() - t0
    fit = dict(res.fit)
    fit["control"] = info
    if dynamic is None:
        LOG.info("event=mdp_not_adopted reason=%r", info["reason"])
        result = replace(res, fit=fit)
    else:
        result = replace(res, fit=fit, dynamic=dynamic, measures=measures, cost=cost)
    message = "adopted (mdp)" if dynamic is not None else f"adopted (thresholds: {info['reason']})"
    return replace(out, result=result, message=message, solve_seconds=out.solve_seconds + seconds)


def _with_damping(inp: RefitInput, out: RefitOutcome, fitted: _Fitted | None = None) -> RefitOutcome:
    """``robots.hysteresis`` and ``robots.dwell_s``: a configured number is used as it is; ``auto`` is chosen
    for the adopted policy in the simulator, and the fit summary's ``damping`` holds the choice and its
    price. Not for the MDP policy, whose decisions assume that robots switch at once (both stay off).
    ``fitted``: the fit stage's product, so that an exact hysteresis policy adopted on a joint fit gets its
    own cost interval (:func:`_with_exact_hysteresis`)."""
    res = out.result
    if res is None or res.dynamic is not None:
        return out
    from dataclasses import replace

    fixed = replace(res, hysteresis=inp.hysteresis or 0)
    if (inp.dwell_s is not None and inp.hysteresis is not None) or res.model is None or res.measures is None:
        return replace(out, result=fixed)
    if inp.hysteresis is None and inp.targets is not None:
        # the exact choice minimises J (with the command price): under targets the policy is the one of least
        # robot time that meets them, and J (whose weights may all be 0 there) must not overrule it
        fit = dict(res.fit)
        fit["damping"] = {"method": "none", "hysteresis": 0, "dwell_s": 0.0 if inp.dwell_s is None else inp.dwell_s,
                          "reason": "targets: the policy that meets them is kept as chosen (robots.hysteresis: "
                                    "auto prices damping by the costs, which do not rank policies under targets)"}
        return replace(out, result=replace(fixed, fit=fit))
    if inp.hysteresis is None:
        return _with_exact_hysteresis(inp, out, fitted)
    from .damping import choose_damping

    try:
        choice = choose_damping(res.model, inp.costs, res.policy, res.measures, hysteresis=inp.hysteresis,
                                dwell_s=inp.dwell_s, max_commands_per_min=inp.max_commands_per_min)
    except Exception:  # the simulation is advice: a failure leaves the damping off
        LOG.exception("event=damping_failed")
        return replace(out, result=fixed)
    fit = dict(res.fit)
    fit["damping"] = {"hysteresis": choice.hysteresis, "dwell_s": choice.dwell_s,
                      "max_commands_per_min": inp.max_commands_per_min,
                      "commands_per_robot_per_min": choice.chosen.commands_per_robot_per_min,
                      "cost": choice.chosen.cost,
                      "undamped_commands_per_robot_per_min": choice.undamped.commands_per_robot_per_min,
                      "undamped_cost": choice.undamped.cost}
    return replace(out, result=replace(res, fit=fit, hysteresis=choice.hysteresis))


def _cut_at(inp: RefitInput, at: float) -> RefitInput:
    """The window from ``at`` on: the deliveries at or after it and the mode trajectory from it (the mode
    in force then, each change after it); the service samples and obsolete drops, which carry no epoch
    here, stay whole."""
    from dataclasses import replace

    k = int(np.searchsorted(inp.delivery_times, at, side="left"))
    changes = inp.mode_changes
    exposure = dict(inp.mode_exposure_s)
    if changes is not None:
        epochs, modes = changes
        j = max(int(np.searchsorted(epochs, at, side="right")) - 1, 0)
        later = epochs > at
        changes = (np.concatenate([[at], epochs[later]]), np.concatenate([[modes[j]], modes[later]]))
        ends = np.append(changes[0][1:], inp.window[1])
        exposure = {}
        for m, d in zip(changes[1].tolist(), (ends - changes[0]).tolist(), strict=True):
            exposure[int(m)] = exposure.get(int(m), 0.0) + float(d)
    # the cost observed for the model check was measured over the whole window, not the cut one: no check
    return replace(inp, delivery_times=inp.delivery_times[k:], pages=inp.pages[k:], modes=inp.modes[k:],
                   window=(float(at), inp.window[1]), mode_changes=changes, mode_exposure_s=exposure,
                   policy_in_force=None, observed_cost=None)


def _change_stage(inp: RefitInput) -> tuple[RefitInput, dict[str, Any]] | RefitOutcome:
    """``refit.change_level``: locate a change of the per-mode rates in the window
    (``fitting.locate_change`` on each mode's clock) and, when the test finds one, keep only the
    deliveries since it, as soon as there are ``min_deliveries`` of them (until then the refit waits and
    the policy in force stays). No change found: the whole window. The summary's ``change`` says which."""
    if inp.change_level is None or inp.mode_changes is None or inp.cold:
        return inp, {}
    from robotctl.fitting import ModeTrajectory, locate_change

    epochs, modes = inp.mode_changes
    try:
        cp = locate_change(inp.delivery_times, inp.modes,
                           ModeTrajectory(epochs, modes, end_s=inp.window[1]), end_s=inp.window[1],
                           level=inp.change_level)
    except InputError as exc:  # a window the test cannot read is fitted whole, and says why
        return inp, {"detected": False, "message": f"not tested: {exc}"}
    info = cp.to_dict()
    if not cp.detected:
        return inp, info
    if cp.deliveries_after < inp.min_deliveries:
        return RefitOutcome(False, RefitStage.INPUT,
                            f"{cp.message}; {cp.deliveries_after} deliveries since, the refit waits for "
                            f"refit.min_deliveries = {inp.min_deliveries}", deliveries=cp.deliveries_after)
    return _cut_at(inp, cp.at_s), info


def _cold_stage(inp: RefitInput, optimise_fn: OptimiseFn) -> RefitOutcome:
    """A cold-start refit: ``fitting.cold_start_model`` on the window (batch Poisson per mode, linear in
    the robots; exponential service; exact intervals at ``cold_level``), the policy optimised under the
    intervals' pessimistic end (the most arrivals, the slowest service), and its measures and cost
    predicted under the point estimate, which is also the model the drift check compares with. The search
    is over the largest and the smallest mode only (one threshold). The damping is the configured one
    (0 for ``auto``: the simulator's choice waits for a regular fit) and the MDP is not tried."""
    from dataclasses import replace

    from robotctl.fitting import cold_start_model
    from robotctl.model import solve

    n = int(inp.delivery_times.size)
    t0 = time.perf_counter()
    exposure = dict(inp.mode_exposure_s)
    if inp.mode_changes is not None:
        epochs, modes = inp.mode_changes
        ends = np.append(epochs[1:], inp.window[1])
        exposure = {}
        for m, d in zip(modes.tolist(), (ends - epochs).tolist(), strict=True):
            exposure[int(m)] = exposure.get(int(m), 0.0) + float(d)
    try:
        cold = cold_start_model(inp.capacity, max(inp.all_modes), inp.pages, inp.modes, exposure,
                                service_times=inp.service_times, sizes_bytes=inp.sizes_bytes,
                                processing_rate_bps=inp.processing_rate_bps,
                                mean_useful_life_s=inp.mean_useful_life_s, obsolete_drops=inp.obsolete_drops,
                                obsolete_exposure_s=inp.obsolete_exposure_s, min_mode=min(inp.all_modes),
                                admission=str(inp.options.get("admission", "partial")), level=inp.cold_level)
    except InputError as exc:
        return RefitOutcome(False, RefitStage.FIT, f"cold-start model: {exc}",
                            fit_seconds=time.perf_counter() - t0, deliveries=n)
    summary = fit_summary(cold.model, None, dict.fromkeys(cold.model.modes, "cold"), inp.window[1],
                          inp.previous_fit)
    summary.update(status="cold", success=True, message="cold start: one-phase model, policy optimised "
                   f"under the pessimistic end of its {inp.cold_level:g} intervals", rungs={},
                   cold_start=cold.to_dict())
    fitted = _Fitted(cold.pessimistic, summary, time.perf_counter() - t0)
    # two modes, the most and the fewest robots: a few dozen deliveries, nearly all in one mode, cannot
    # tell the modes in between apart (the linear rule extrapolates them), and the search over two modes
    # is one threshold (K + 2 policies), fast enough for a crawl of seconds
    pool = inp.search_modes if inp.search_modes is not None else inp.all_modes
    out = _optimise_stage(replace(inp, search_modes=tuple(sorted({max(pool), min(pool)}, reverse=True))),
                          fitted, optimise_fn)
    if out.result is None:
        return out
    try:
        measures = solve(cold.model, out.result.policy).measures
    except InputError as exc:
        return RefitOutcome(False, RefitStage.SOLVE, f"cold-start policy under the point estimate: {exc}",
                            fit_seconds=fitted.seconds, solve_seconds=out.solve_seconds, deliveries=n)
    result = replace(out.result, model=cold.model, measures=measures, cost=cost_of(measures, inp.costs),
                     hysteresis=inp.hysteresis or 0)
    return replace(out, result=result, message="adopted (cold start)")


def _cold_search_options(robots_at_level: Sequence[int]) -> dict[str, Any]:
    """A cold start's damping search: its policy uses the most and the fewest robots only, and so do its
    damped vectors, in a shorter walk (about 16 solves instead of 60-80): with the refit in a thread of a
    busy crawl (the demo's 16 robots at K = 50 under load) the full search took 67 s, the whole crawl."""
    return {"modes": sorted(set(robots_at_level)), "max_evals": 8, "descent_evals": 4}


def _with_exact_hysteresis(inp: RefitInput, out: RefitOutcome, fitted: _Fitted | None = None) -> RefitOutcome:
    """``robots.hysteresis: auto``: the hysteresis policy chosen exactly for the fitted model
    (:func:`policies.choose_hysteresis`: J + costs.command x commands, within
    ``robots.max_commands_per_robot_min``; the static fleets are candidates, so it never costs more than
    the best of them). No dwell is needed (``dwell_s: auto`` is 0): the commands are in the model.
    With a joint fit (``fitted``) and a policy whose resume vector differs from its park vector, the
    summary's ``predicted`` is the adopted policy's (:func:`_hysteresis_predicted`)."""
    from dataclasses import replace

    from robotctl.policies import choose_hysteresis

    res = out.result
    assert res is not None and res.model is not None
    start = time.perf_counter()
    try:
        choice = choose_hysteresis(res.model, inp.costs, res.policy.robots_at_level,
                                   max_commands_per_robot_min=inp.max_commands_per_robot_min,
                                   max_damping_cost=inp.max_damping_cost,
                                   **_cold_search_options(res.policy.robots_at_level) if inp.cold else {})
    except Exception:  # advice on top of the threshold optimum: a failure leaves it in force
        LOG.exception("event=hysteresis_failed")
        return replace(out, result=replace(res, hysteresis=0))
    seconds = time.perf_counter() - start
    best = choice.best
    fit = dict(res.fit)
    fit["damping"] = {"method": "exact", "park": list(best.policy.park), "resume": list(best.policy.resume),
                      "hysteresis": 0, "dwell_s": 0.0 if inp.dwell_s is None else inp.dwell_s,
                      "max_commands_per_robot_min": inp.max_commands_per_robot_min,
                      "within_budget": choice.within_budget,
                      "max_damping_cost": inp.max_damping_cost, "damping_cost": finite(choice.damping_cost),
                      "commands_per_robot_per_min": finite(best.commands_per_robot_min),
                      "cost": finite(best.cost.total),
                      "undamped_commands_per_robot_per_min": finite(choice.threshold.commands_per_robot_min),
                      "undamped_cost": finite(choice.threshold.cost.total),
                      "undamped_park": list(choice.threshold.policy.park),
                      "static_cost": finite(choice.static.cost.total), "policies_solved": choice.evaluated,
                      "seconds": seconds}
    if fitted is not None and fitted.joint is not None and not best.policy.is_threshold:
        priced_at = time.perf_counter()
        fit.update(_hysteresis_predicted(best.cost.total, fit))
        fit["damping"]["interval_seconds"] = time.perf_counter() - priced_at
        seconds = time.perf_counter() - start
    park = ThresholdPolicy(best.policy.park)
    chosen = replace(res, policy=park, modes=park.modes, thresholds=park.thresholds, fit=fit, hysteresis=0,
                     resume=None if best.policy.is_threshold else best.policy.resume,
                     measures=best.measures, cost=best.cost)
    LOG.info("event=hysteresis_chosen commands_per_robot_min=%.3f cost=%.6g threshold_commands=%.3f "
             "threshold_cost=%.6g static_cost=%.6g seconds=%.3f", best.commands_per_robot_min, best.cost.total,
             choice.threshold.commands_per_robot_min, choice.threshold.cost.total, choice.static.cost.total,
             seconds)
    return replace(out, result=chosen, solve_seconds=out.solve_seconds + seconds)


def _hysteresis_predicted(cost: float, fit: Mapping[str, Any]) -> dict[str, Any]:
    """The adopted hysteresis policy's ``predicted``: its exact ``cost`` under the fit, with the
    undamped threshold policy's interval (:func:`_beyond_uncertainty`'s draws) shifted by the damping's
    exact price at the point estimate; the undamped policy's own goes to ``damping.undamped_predicted``.

    The damping costs little (at most ``robots.max_damping_cost`` of J by default) and its price moves
    far less across the draws than J itself, so the shift carries the fit's uncertainty. Pricing every
    draw with ``model.solve_hysteresis`` (``fitting.price_interval`` takes a hysteresis policy) is the
    exact route, but it took 0.4 s a refit, a third of a 60,000 s replay (bench/adapt.py: 138 s of CPU
    against the 120 s target). The summary says which (``interval_method``)."""
    damping = dict(fit.get("damping", {}))
    plain = fit.get("predicted")
    if plain is not None:
        damping["undamped_predicted"] = plain
    interval = (plain or {}).get("cost_interval")
    base = (plain or {}).get("cost")
    if interval is None or base is None or not math.isfinite(float(cost)):
        return {"damping": damping, "predicted": {"cost": finite(float(cost)), "cost_interval": None,
                                                  "message": "no interval: the undamped policy has none"}}
    shift = float(cost) - float(base)
    # an end the draws could not bound (None in the summary: infinite) stays unbounded
    ends = [None if x is None else finite(float(x) + shift) for x in interval]
    return {"damping": damping,
            "predicted": {"cost": finite(float(cost)), "cost_interval": ends, "interval_method": "shifted"}}


def compute_refit(inp: RefitInput, *, fit_fn: FitFn | None = None,
                  optimise_fn: OptimiseFn | None = None) -> RefitOutcome:
    """Fit the window and optimise; never raises.

    Parameters
    ----------
    inp : RefitInput
    fit_fn, optimise_fn : callable, optional
        Stand-ins for ``fitting.fit_model`` and ``policies.optimise`` (tests inject failures here).
    """
    if fit_fn is None:
        from robotctl.fitting import fit_model

        fit_fn = fit_model
    if optimise_fn is None:
        from robotctl.policies import optimise

        optimise_fn = optimise
    if inp.cold:  # the command budget holds from the first fit on: the cold policy gets its hysteresis too
        return _with_origin(_with_damping(inp, _cold_stage(inp, optimise_fn)), "cold", {})
    cut = _change_stage(inp)
    if isinstance(cut, RefitOutcome):
        return cut
    inp, change = cut
    fitted = _fit_stage(inp, fit_fn)
    if isinstance(fitted, RefitOutcome):
        return fitted
    joint_params = fitted.joint.params if fitted.joint is not None else None
    misfit = _check_stage(inp, fitted)
    if misfit is not None:
        return replace(misfit, joint_params=joint_params)
    out = _with_origin(_with_damping(inp, _mdp_stage(inp, _optimise_stage(inp, fitted, optimise_fn)), fitted),
                       "regular", change)
    return replace(out, joint_params=joint_params)


def _with_origin(out: RefitOutcome, origin: str, change: Mapping[str, Any]) -> RefitOutcome:
    """The fit summary says which kind of refit made it (``origin``: ``cold`` or ``regular``) and, when
    the window was tested for a change, what the test found (``change``)."""
    if out.result is None:
        return out
    from dataclasses import replace

    fit = dict(out.result.fit)
    fit["origin"] = origin
    if change:
        fit["change"] = dict(change)
    return replace(out, result=replace(out.result, fit=fit))


__all__ = [
    "RefitInput",
    "RefitOutcome",
    "RefitStage",
    "compute_refit",
    "fit_summary",
]
