"""The policy store: the policy in force (a :class:`~agent.policy.PolicyHolder`), put in force by a refit,
the start-up policy or a probe, saved to ``policy.json`` for a restart and restored from it."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from robotctl.model import HysteresisPolicy, InputError, ThresholdPolicy

from .config import AgentConfig
from .log import set_aside
from .policy import DynamicDecision, PolicyFit, PolicyHolder, PolicySnapshot, ThresholdDecision
from .recovery import atomic_write_json

LOG = logging.getLogger("robotctl.agent")

POLICY_FILE = "policy.json"


class PolicyStore:
    """See the module docstring. ``path`` is ``policy.json``, or None for an agent that must leave the
    live agent's state alone (a replay)."""

    def __init__(self, config: AgentConfig, now: float, path: Path | None) -> None:
        self.config = config
        self.path = path
        self.holder = PolicyHolder(PolicySnapshot.initial(config.startup_policy(), now,
                                                          hysteresis=self.fixed_hysteresis))
        self._write: asyncio.Future[None] | None = None
        self.set_aside = 0  # policy.json files set aside as corrupt

    @property
    def fixed_hysteresis(self) -> int:
        """``robots.hysteresis`` when it is a number; 0 for ``auto`` until a fit chooses it."""
        h = self.config.robots.hysteresis
        return 0 if h == "auto" else int(h)

    def hysteresis_in_force(self) -> int:
        decision = self.holder.current.decision
        return decision.hysteresis if isinstance(decision, ThresholdDecision) else 0

    def hysteresis_of(self, fit: Mapping[str, Any]) -> int:
        """The hysteresis of a restored policy: the one its fit chose under ``auto``, else the configured one."""
        if self.config.robots.hysteresis != "auto":
            return self.fixed_hysteresis
        damping = fit.get("damping")
        chosen = damping.get("hysteresis", 0) if isinstance(damping, Mapping) else 0
        return chosen if isinstance(chosen, int) and not isinstance(chosen, bool) and chosen >= 0 else 0

    def resume_of(self, fit: Mapping[str, Any], policy: ThresholdPolicy) -> tuple[int, ...] | None:
        """The resume vector of a restored exact hysteresis policy (``robots.hysteresis: auto``), when its
        fit holds one that fits the park vector; else None (the plain policy)."""
        damping = fit.get("damping")
        if self.config.robots.hysteresis != "auto" or not isinstance(damping, Mapping):
            return None
        resume, park = damping.get("resume"), damping.get("park")
        if not isinstance(resume, list) or park != list(policy.robots_at_level) or resume == park:
            return None
        try:
            return HysteresisPolicy(tuple(park), tuple(resume)).resume
        except (InputError, TypeError):
            return None

    # -- put in force ----------------------------------------------------------------------------------
    def adopt(self, result: PolicyFit, now: float) -> PolicySnapshot:
        """A refit's result in force (one assignment), saved for a restart."""
        snap = self.holder.adopt(result, now, "fit")
        self.save(snap)
        return snap

    def startup(self, now: float) -> PolicySnapshot:
        """The configured start-up policy back in force (the end of a probe)."""
        return self.holder.adopt(PolicyFit.of(self.config.startup_policy(), hysteresis=self.fixed_hysteresis),
                                 now, "startup")

    def probe(self, mode: int, now: float) -> PolicySnapshot:
        """``mode`` robots at every queue length (a probe of that mode), keeping the fit in force."""
        old = self.holder.current
        return self.holder.adopt(PolicyFit.of(ThresholdPolicy.static(mode, self.config.capacity), fit=old.fit,
                                              model=old.model), now, "probe")

    # -- policy.json -----------------------------------------------------------------------------------
    def save(self, snap: PolicySnapshot) -> None:
        """Write policy.json (with an fsync) in a thread when a loop runs, so that acks do not wait on it."""
        if self.path is None:
            return
        path, state = self.path, snap.to_state()
        state["saved_unix_s"] = time.time()  # wall time: a restart compares it with refit.warm_max_age_s

        def write() -> None:
            try:
                atomic_write_json(path, state)
            except OSError as exc:
                LOG.warning("event=policy_file_not_written file=%s error=%s", path, exc)

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            write()
            return
        self._write = loop.run_in_executor(None, write)

    async def saved(self) -> None:
        """Done once the last :meth:`save` is on disk."""
        if self._write is not None:
            await self._write

    def restore(self, now: float) -> None:
        """Put the policy saved in policy.json back in force (a warm start, origin ``warm``), when
        ``policy.restore`` asks for it, it fits the configuration and it was saved less than
        ``refit.warm_max_age_s`` ago (else the start-up policy stays, with a warning)."""
        path = self.path
        if not self.config.policy.restore or path is None or not path.exists():
            return
        mismatch = False  # a valid file for another configuration: kept as it is, not set aside
        try:
            if not path.is_file():
                raise ValueError("not a regular file")
            state = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(state, dict):
                raise ValueError(f"holds a {type(state).__name__}, not an object")
            policy = ThresholdPolicy(tuple(state["robots_at_level"]))
            fit = state.get("fit", {})
            if not isinstance(fit, dict):
                raise ValueError(f"fit is a {type(fit).__name__}, not an object")
            fit = dict(fit)
            version = state.get("version", 1)
            if isinstance(version, bool) or not isinstance(version, int) or version < 0:
                raise ValueError(f"version is {version!r}, not a whole number")
            if policy.capacity != self.config.capacity or max(policy.robots_at_level) > self.config.robots.n:
                mismatch = True
                raise InputError("policy", "does not fit the configured capacity or fleet", "")
            dynamic = self._restore_dynamic(state, fit)
            snapshot = PolicySnapshot(version, "restored", now,
                                      replace(PolicyFit.of(policy, fit=fit, hysteresis=self.hysteresis_of(fit),
                                                           resume=self.resume_of(fit, policy)),
                                              dynamic=dynamic))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            corrupt = not mismatch
            LOG.warning("event=policy_file_ignored file=%s error=%s action=%s", path, " ".join(str(exc).split()),
                        "set_aside" if corrupt else "startup_policy")
            if corrupt and set_aside(path, "policy.json cannot be used") is not None:
                self.set_aside += 1
            return
        max_age = self.config.refit.warm_max_age_s
        saved = state.get("saved_unix_s")
        if max_age is not None and isinstance(saved, int | float) and not isinstance(saved, bool):
            age = time.time() - float(saved)
            if age > max_age:
                LOG.warning("event=policy_file_stale file=%s age_s=%.0f warm_max_age_s=%g: the start-up policy "
                            "applies until the first fit", path, age, max_age)
                return
        self.holder.swap(snapshot)
        LOG.info("event=policy_restored policy=%s kind=%s", policy, "mdp" if dynamic else "thresholds")

    def _restore_dynamic(self, state: Mapping[str, Any], fit: dict[str, Any]) -> DynamicDecision | None:
        """The saved MDP policy when ``policy.kind: mdp`` still asks for it and it fits the configuration;
        else None (the thresholds saved with it apply), with the reason in ``fit["control"]``."""
        saved = state.get("dynamic")
        if saved is None:
            return None
        reason = "policy.kind is thresholds"
        if self.config.policy.kind == "mdp":
            try:
                return DynamicDecision.from_state(saved, self.config.capacity, self.config.robots.n)
            except (InputError, KeyError, TypeError, ValueError) as exc:
                reason = f"the saved MDP policy could not be restored: {exc}"
        LOG.warning("event=mdp_policy_not_restored reason=%r", reason)
        fit["control"] = {**fit.get("control", {}), "requested": self.config.policy.kind,
                          "in_force": "thresholds", "reason": reason}
        return None


__all__ = ["POLICY_FILE", "PolicyStore"]
