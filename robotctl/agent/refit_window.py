"""The refit side's reading of the agent: the fit window as a :class:`~agent.compute.RefitInput`
(:func:`refit_input`) and the drift that calls an early refit (:func:`drift`), both from a read-only
:class:`WindowSource` (:class:`agent.core.Agent` is one)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np

from robotctl.model import BMAP, QueueModel, ThresholdPolicy

from .actuator import Actuator
from .compute import RefitInput
from .config import AgentConfig
from .modes import ModeHistory
from .policy import PolicySnapshot
from .queue import OBSOLETE, WAITING, Window, drift_reason, mode_time_key, window_cost_interval
from .samples import Ring


class WindowSource(Protocol):
    """What a refit reads from the agent; it changes nothing (the ring copies are the refit's scratch)."""

    @property
    def config(self) -> AgentConfig: ...
    @property
    def deliveries(self) -> Ring: ...
    @property
    def completions(self) -> Ring: ...
    @property
    def window(self) -> Window: ...
    @property
    def drift_window(self) -> Window: ...
    @property
    def modes(self) -> ModeHistory: ...
    @property
    def policy(self) -> PolicySnapshot: ...
    @property
    def mode(self) -> int: ...
    @property
    def started_at(self) -> float: ...
    @property
    def actuator(self) -> Actuator: ...


def refit_input(agent: WindowSource, now: float) -> RefitInput | str:
    """The fit window ending ``now`` as a :class:`RefitInput`, or why there is not enough data. With fewer
    virtual robots holding a registered robot than robots.count, only the modes up to them are fitted and
    searched: the agent never counts on a robot that is not registered. Below
    ``refit.min_deliveries`` (but at least ``refit.cold_start_deliveries``) it asks for a cold-start fit,
    while the policy in force is the start-up one or an earlier cold start."""
    cfg = agent.config
    t0 = now - cfg.refit.window_s
    c = agent.completions.since(t0)
    svc = c["service_s"][~np.isnan(c["service_s"])]
    sizes = c["bytes"][~np.isnan(c["bytes"])]
    columns = ["t", "pages", "mode"]
    if cfg.refit.time_source == "client":
        columns.append("client_t")
    if sizes.size == 0:
        columns.append("bytes")
    # the one copy made on the event loop: only the columns the fit uses, at their own widths
    d = agent.deliveries.since(t0, columns=columns, scratch=True)
    n = int(d["t"].size)
    # below min_deliveries: a cold-start fit, while no regular fit (nor a warm policy) is in force
    cold = n < cfg.refit.min_deliveries
    if cold and not (0 < cfg.refit.cold_start_deliveries <= n and n >= 2
                     and agent.policy.origin in ("startup", "cold")):
        return (f"{n} deliveries in the last refit.window_s = {cfg.refit.window_s:g} s; a refit needs "
                f"refit.min_deliveries = {cfg.refit.min_deliveries}"
                + (f" (a cold-start fit refit.cold_start_deliveries = {cfg.refit.cold_start_deliveries}, "
                   "before a regular fit)" if cfg.refit.cold_start_deliveries else ""))
    times = d["t"]
    # the mode trajectory is on the agent's clock: the fit reads it only against the agent's stamps
    changes = agent.modes.changes(float(times[0]), now)
    # the fleet's own mode at each delivery, read at the agent's stamps (a parked robot's drain counted,
    # agent.modes), whichever clock the fit then reads: each page counts where its robot's time does
    fleet = agent.modes.at(times)
    modes = d["mode"] if fleet is None else fleet.astype(d["mode"].dtype)
    if cfg.refit.time_source == "client" and not np.isnan(d["client_t"]).any():
        order = np.argsort(d["client_t"], kind="stable")
        d = {k: v[order] for k, v in d.items()}
        modes = modes[order]
        times = d["client_t"]
        changes = None
    if (modes == 0).any():  # deliveries logged without their mode: take the one in force
        modes = np.where(modes == 0, agent.mode, modes).astype(modes.dtype)
    options = dict(cfg.fit.options)
    options.setdefault("admission", cfg.queue.admission)
    if sizes.size == 0:
        per_page = d["bytes"] / d["pages"]
        sizes = per_page[~np.isnan(per_page)]
    fit_modes = tuple(m for m in cfg.all_modes if m >= 1)
    search_modes = cfg.policy.modes
    registered = agent.actuator.registered_slots()
    if registered < cfg.robots.n:  # never count on robots that are not registered
        top = max(registered, fit_modes[0])
        fit_modes = tuple(m for m in fit_modes if m <= top)
        if search_modes is not None:
            search_modes = tuple(m for m in search_modes if m <= top) or (min(search_modes),)
    exposure = agent.modes.exposure(float(d["t"][0]), now)
    obs_drops: int | None = None
    obs_exposure: float | None = None
    if cfg.fit.mean_useful_life_s is None and cfg.fit.useful_life is None:
        totals = agent.window.totals(now)
        obs_drops = int(totals.get(OBSOLETE, 0.0))
        obs_exposure = float(totals.get(WAITING, 0.0))
    remembered = {}
    snap = agent.policy
    if cfg.fit.remember_modes and snap.model is not None:
        for key, info in snap.fit.get("modes", {}).items():
            if info.get("source") in ("observed", "remembered") and int(key) in snap.model.modes:
                remembered[int(key)] = snap.model.arrivals[int(key)]
    in_force, observed = _policy_in_force(agent, float(times[0]), now, changes)
    return RefitInput(
        delivery_times=times, pages=d["pages"], modes=modes,
        all_modes=fit_modes, search_modes=search_modes,
        service_times=svc if svc.size else None, sizes_bytes=sizes if sizes.size else None,
        capacity=cfg.capacity, costs=cfg.costs, processing_rate_bps=cfg.fit.processing_rate_bps,
        mean_useful_life_s=(cfg.fit.useful_life["deadline"] if cfg.fit.useful_life is not None
                            else cfg.fit.mean_useful_life_s),
        useful_life=cfg.fit.useful_life, options=options,
        window=(float(times[0]), now), mode_exposure_s=exposure, mode_changes=changes,
        rate_from_exposure=cfg.fit.rate_from_exposure, remembered=remembered,
        obsolete_drops=obs_drops, obsolete_exposure_s=obs_exposure, previous_fit=dict(snap.fit),
        targets=cfg.targets.as_targets(),
        dwell_s=None if cfg.robots.dwell_s == "auto" else float(cfg.robots.dwell_s),
        hysteresis=None if cfg.robots.hysteresis == "auto" else int(cfg.robots.hysteresis),
        max_commands_per_min=cfg.robots.max_commands_per_min, policy_kind=cfg.policy.kind,
        max_commands_per_robot_min=cfg.robots.max_commands_per_robot_min,
        max_damping_cost=cfg.robots.max_damping_cost,
        cold=cold, cold_level=cfg.refit.cold_level, change_level=cfg.refit.change_level,
        min_deliveries=cfg.refit.min_deliveries,
        policy_in_force=in_force, observed_cost=observed,
        current_policy=snap.policy if snap.model is not None else None)


def _policy_in_force(agent: WindowSource, t0: float, now: float,
                     changes: tuple[np.ndarray, np.ndarray] | None) -> tuple[ThresholdPolicy | None,
                                                                               tuple[float, float, float] | None]:
    """The policy that ran the fleet over the whole window and the cost observed meanwhile (issue 27's model
    check): commanding, the policy adopted before the window began; advising, a fleet that kept one number
    of robots throughout (a static policy); otherwise None (the check then says ``uncertain``)."""
    cfg = agent.config
    policy: ThresholdPolicy | None = None
    if getattr(agent, "advising", False):
        if changes is not None and np.unique(changes[1]).size == 1 and int(changes[1][0]) >= 1:
            policy = ThresholdPolicy.static(int(changes[1][0]), cfg.capacity)
    elif agent.policy.adopted_at <= t0:
        policy = agent.policy.policy
    if policy is None:
        return None, None
    observed = window_cost_interval(agent.window, now, cfg.costs)
    return (policy, observed) if observed is not None else (None, None)


def drift(agent: WindowSource, now: float) -> str | None:
    """Why the observed traffic no longer matches the fitted model, or None."""
    cfg = agent.config.refit
    snapshot = agent.policy
    if snapshot.model is None:
        if len(agent.deliveries) >= cfg.min_deliveries and now - agent.started_at >= cfg.min_interval_s:
            return "first_fit"
        return None
    if cfg.drift_bound is None:
        return None
    mode_rates = {m: float(snapshot.model.arrivals[m].rate) for m in snapshot.model.modes}
    got = getattr(snapshot.measures, "arrival_rate", None)
    offered = float(got) if got is not None else float("nan")
    totals = agent.drift_window.totals(now)
    if not (snapshot.fit.get("joint") and np.isfinite(offered) and offered > 0):
        return drift_reason(totals, mode_rates, cfg.drift_bound, cfg.drift_min_pages)
    # a joint fit's rates are each mode's own; under a threshold policy the mode follows the shared hidden
    # phase, so a mode's pages over its time are not its rate times it (bursts raise the queue and with it
    # the mode). The window's pages are compared with the policy's predicted offered rate, and with the mode
    # rates over the modes observed: the prediction assumes the fleet follows the policy, which a replayed
    # recorded fleet, advise mode or a fleet still on the start-up policy do not (a trace recorded under 4
    # robots, replayed under paper 001's MDP predicting 0.98 pages/s against the fleet's 1.6, refitted every
    # drift window: 188 refits in 1,000 s). Drift is traffic that neither reading of the fitted model explains.
    policy_rates = {m: offered for m in snapshot.model.modes}
    reason = _unexplained(totals, policy_rates, mode_rates, cfg.drift_bound, cfg.drift_min_pages)
    if reason is None:
        return None
    # the fitted model's own bursts: the window's pages vary by more than drift_bound under the fitted
    # hidden phase itself (issue 27's burst/quiet bench: a coefficient of variation of ~0.6 over 60 s, so a
    # bound of 0.5 fired a refit every ~250 s where refit.interval_s asks 1,800 s). The bound is widened to
    # DRIFT_Z coefficients of variation of the pages the fitted BMAP of the mode most in force predicts over
    # the window (Poisson traffic: 1 / sqrt(pages), which leaves the bound as it is)
    widened = _burst_bound(snapshot.model, totals)
    if widened is None or widened <= cfg.drift_bound:
        return reason
    return _unexplained(totals, policy_rates, mode_rates, widened, cfg.drift_min_pages)


def _unexplained(totals: Mapping[str, float], policy_rates: Mapping[int, float], mode_rates: Mapping[int, float],
                 bound: float, min_pages: int) -> str | None:
    """The drift reason against the policy's prediction when the mode rates do not explain the pages
    either, else None."""
    reason = drift_reason(totals, policy_rates, bound, min_pages)
    if reason is None or drift_reason(totals, mode_rates, bound, min_pages) is None:
        return None
    return reason


def _burst_bound(model: QueueModel, totals: Mapping[str, float]) -> float | None:
    """DRIFT_Z coefficients of variation of the pages the fitted BMAP of the mode most in force predicts
    over the drift window's time (None when undefined)."""
    seen = {m: totals.get(mode_time_key(m), 0.0) for m in model.modes}
    mode = max(seen, key=lambda m: seen[m])
    span = sum(seen.values())
    if span <= 0:
        return None
    cv = pages_cv(model.arrivals[mode], span)
    return DRIFT_Z * cv if np.isfinite(cv) else None


#: Coefficients of variation of the fitted model's own page count that a drift window's count may differ
#: from its prediction before it counts as drift under a joint fit (:func:`drift`).
DRIFT_Z = 3.0


def pages_cv(bmap: BMAP, seconds: float) -> float:
    """Coefficient of variation of the pages a stationary BMAP delivers in ``seconds``: the count's first
    two moments from the block exponential of [[D, D'(1), D''/2], [0, D, D'(1)], [0, 0, D]] t (Van Loan), D =
    sum_k D_k, D'(1) = sum_k k D_k, D'' = sum_k k^2 D_k: E e^{sN(t)} = pi exp(t D(e^s)) 1 = 1 + s pi X_01 1 +
    s^2 pi X_02 1 + O(s^3), so E N = pi X_01 1 and E N^2 = 2 pi X_02 1 (Poisson: Var N = E N)."""
    from scipy.linalg import expm

    mats = [np.asarray(d, dtype=float) for d in bmap.D]
    m = mats[0].shape[0]
    gen = sum(mats[1:], mats[0])
    d1 = sum(k * d for k, d in enumerate(mats) if k >= 1)
    d2 = sum(k * k * d for k, d in enumerate(mats) if k >= 1)
    z = np.zeros((m, m))
    big = np.block([[gen, d1, d2 / 2], [z, gen, d1], [z, z, gen]]) * seconds
    X = expm(big)
    A = np.vstack([gen.T, np.ones(m)])
    rhs = np.zeros(m + 1)
    rhs[-1] = 1.0
    pi = np.linalg.lstsq(A, rhs, rcond=None)[0]
    one = np.ones(m)
    mean = float(pi @ X[:m, m:2 * m] @ one)
    second = 2.0 * float(pi @ X[:m, 2 * m:] @ one)
    if not mean > 0:
        return float("nan")
    return float(np.sqrt(max(second - mean * mean, 0.0)) / mean)


__all__ = ["WindowSource", "drift", "refit_input"]
