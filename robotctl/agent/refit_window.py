"""The refit side's reading of the agent: the fit window as a :class:`~agent.compute.RefitInput`
(:func:`refit_input`) and the drift that calls an early refit (:func:`drift`), both from a read-only
:class:`WindowSource` (:class:`agent.core.Agent` is one)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .compute import RefitInput
from .config import AgentConfig
from .modes import ModeHistory
from .policy import PolicySnapshot
from .queue import OBSOLETE, WAITING, Window, mode_pages_key, mode_time_key
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


def refit_input(agent: WindowSource, now: float) -> RefitInput | str:
    """The fit window ending ``now`` as a :class:`RefitInput`, or why there is not enough data. Below
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
    if cfg.refit.time_source == "client" and not np.isnan(d["client_t"]).any():
        times = d["client_t"]
        order = np.argsort(times, kind="stable")
        d = {k: v[order] for k, v in d.items()}
        times = d["client_t"]
        changes = None
    modes = d["mode"]
    if (modes == 0).any():  # deliveries logged without their mode: take the one in force
        modes = np.where(modes == 0, agent.mode, modes).astype(modes.dtype)
    options = dict(cfg.fit.options)
    options.setdefault("admission", cfg.queue.admission)
    if sizes.size == 0:
        per_page = d["bytes"] / d["pages"]
        sizes = per_page[~np.isnan(per_page)]
    fit_modes = tuple(m for m in cfg.all_modes if m >= 1)
    exposure = agent.modes.exposure(float(d["t"][0]), now)
    obs_drops: int | None = None
    obs_exposure: float | None = None
    if cfg.fit.mean_useful_life_s is None:
        totals = agent.window.totals(now)
        obs_drops = int(totals.get(OBSOLETE, 0.0))
        obs_exposure = float(totals.get(WAITING, 0.0))
    remembered = {}
    snap = agent.policy
    if cfg.fit.remember_modes and snap.model is not None:
        for key, info in snap.fit.get("modes", {}).items():
            if info.get("source") in ("observed", "remembered") and int(key) in snap.model.modes:
                remembered[int(key)] = snap.model.arrivals[int(key)]
    return RefitInput(
        delivery_times=times, pages=d["pages"], modes=modes,
        all_modes=fit_modes, search_modes=cfg.policy.modes,
        service_times=svc if svc.size else None, sizes_bytes=sizes if sizes.size else None,
        capacity=cfg.capacity, costs=cfg.costs, processing_rate_bps=cfg.fit.processing_rate_bps,
        mean_useful_life_s=cfg.fit.mean_useful_life_s, options=options,
        window=(float(times[0]), now), mode_exposure_s=exposure, mode_changes=changes,
        rate_from_exposure=cfg.fit.rate_from_exposure, remembered=remembered,
        obsolete_drops=obs_drops, obsolete_exposure_s=obs_exposure, previous_fit=dict(snap.fit),
        targets=cfg.targets.as_targets(),
        dwell_s=None if cfg.robots.dwell_s == "auto" else float(cfg.robots.dwell_s),
        hysteresis=None if cfg.robots.hysteresis == "auto" else int(cfg.robots.hysteresis),
        max_commands_per_min=cfg.robots.max_commands_per_min, policy_kind=cfg.policy.kind,
        cold=cold, cold_level=cfg.refit.cold_level, change_level=cfg.refit.change_level,
        min_deliveries=cfg.refit.min_deliveries)


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
    totals = agent.drift_window.totals(now)
    for m in snapshot.model.modes:
        pages = totals.get(mode_pages_key(m), 0.0)
        t = totals.get(mode_time_key(m), 0.0)
        if pages < cfg.drift_min_pages or t <= 0:
            continue
        observed = pages / t
        fitted = float(snapshot.model.arrivals[m].rate)
        if fitted > 0 and abs(observed - fitted) / fitted > cfg.drift_bound:
            return f"drift mode={m} observed_rate={observed:.4g} fitted_rate={fitted:.4g}"
    return None


__all__ = ["WindowSource", "drift", "refit_input"]
