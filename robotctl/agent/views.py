"""What the agent shows: the JSON views of ``GET /v1/status``, ``/v1/policy`` and ``/v1/override``, and the
values /metrics reads. Read-only: nothing here changes the agent.

The views name things as the glossary does (docs/ARCHITECTURE.md): ``actuation`` (command or advise),
``override`` (the override view), ``policy_kind`` (which policy kind decides). The keys they replace are
still shown for one release: ``mode`` (the actuation), ``control`` (the override view with ``mode`` for
``override``) and ``policy_control`` in the policy view; ``mode``, ``control`` and ``policy.control`` in the
status."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .policy import Event
from .queue import Observed, observed_measures

if TYPE_CHECKING:
    from .core import Agent


def control_view(override: dict[str, Any]) -> dict[str, Any]:
    """The override view under its deprecated shape (``/v1/control``, the ``control`` keys): ``mode`` for
    ``override``."""
    return {"mode": override["override"], **{k: v for k, v in override.items() if k != "override"}}


def mode_view(actuation: dict[str, Any]) -> dict[str, Any]:
    """The actuation view under its deprecated shape (``/v1/mode``): ``mode`` for ``actuation``."""
    return {"mode": actuation["actuation"], **{k: v for k, v in actuation.items() if k != "actuation"}}


class AgentViews:
    """Views of one :class:`~agent.core.Agent` (which forwards to them)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def desired(self) -> int:
        """What the policy asks for now: r(i) at the current queue length, or under the MDP the robots it
        targets (its last decision); never more than the virtual robots that hold a registered robot."""
        a = self.agent
        want = a.holder.current.decision.target(Event.OTHER, (), a.queue.length, a.actuator.target)
        return min(want, a.actuator.registered_slots())

    def observed(self, now: float | None = None) -> Observed:
        a = self.agent
        t = a.clock.now() if now is None else now
        return observed_measures(a.window.totals(t), a.config.costs)

    def robot_counts(self, now: float) -> dict[str, int]:
        """Real robots by state, each counted once: active, parked, and lost (lease expired)."""
        return self.agent.actuator.counts(now)

    def commands_issued(self) -> dict[str, int]:
        """Park and resume commands issued so far, by the state commanded."""
        return {c.value: n for c, n in self.agent.actuator.commands_issued.items()}

    def observed_commands_per_robot_min(self, now: float | None = None) -> float | None:
        """Park and resume commands sent per (virtual) robot per minute since the agent started."""
        a = self.agent
        t = a.clock.now() if now is None else now
        minutes = (t - a.started_at) / 60.0
        if minutes <= 0:
            return None
        return sum(a.actuator.commands_issued.values()) / max(1, a.config.robots.n) / minutes

    def policy_max_robots(self) -> int:
        """Real robots the policy in force can ever keep active (those of virtual robots 1..max_i r(i));
        every robot during the start-up probe; at least the fleet an override holds. It changes only when a
        policy is adopted or control is overridden: the pool of robot workers an autoscaler sizes
        (deploy/README.md)."""
        a = self.agent
        snap = a.holder.current
        if snap.source == "probe":
            top = a.config.robots.n
        elif snap.basis.dynamic is not None:
            top = snap.basis.dynamic.policy.robots
        else:
            top = max(snap.policy.robots_at_level)
        return a.actuator.robots_up_to(max(top, a.override_state.robots or 0))

    def override_view(self) -> dict[str, Any]:
        """``GET /v1/override``: the override in force, the active virtual robots and r(i) now."""
        d = self.agent.override_state.to_dict()
        d["active_robots"] = self.agent.actuator.mode
        d["desired"] = self.desired()
        return d

    def policy_view(self) -> dict[str, Any]:
        """The policy in force with its fit and predictions, next to the observed measures and r(i) now."""
        a = self.agent
        d = a.holder.current.to_dict()
        d["observed"] = self.observed().to_dict()
        d["commands_per_robot_min"] = {"predicted": d.get("commands_per_robot_min"),
                                       "observed": self.observed_commands_per_robot_min()}
        d["queue"] = a.queue.length
        d["desired"] = self.desired()
        d["actuation"] = a.fleet.actuation
        d["override"] = self.override_view()
        # deprecated for one release: the same under their former names
        d["mode"] = d["actuation"]
        d["control"] = control_view(d["override"])
        return d

    def status(self) -> dict[str, Any]:
        a = self.agent
        now = a.clock.now()
        act = a.actuator
        current = a.holder.current
        override = self.override_view()
        return {
            "t": now,
            "uptime_s": now - a.started_at,
            "ready": a.ready,
            "queue": {"length": a.queue.length, "capacity": a.config.capacity,
                      "admission": a.config.queue.admission},
            "actuation": a.fleet.actuation,
            "mode": a.fleet.actuation,  # deprecated: actuation
            "robots": {"virtual": a.config.robots.n, "mode": act.mode, "desired": self.desired(),
                       "dwell_s": act.dwell_s, "hysteresis": a.store.hysteresis_in_force(),
                       "max_commands_per_min": act.max_commands_per_min,
                       "deferred_until": act.deferred_until, "counts": act.counts(now),
                       "registered": a.fleet.robots_view()["robots"]},
            "override": override,
            "control": control_view(override),  # deprecated: override
            "policy": {"version": current.version, "source": current.source, "origin": current.origin,
                       "first_fit_after": (None if a.first_fit_after is None else
                                           {"deliveries": a.first_fit_after[0], "seconds": a.first_fit_after[1]}),
                       "robots_at_level": list(current.policy.robots_at_level),
                       "kind": current.kind_view(),
                       "control": current.kind_view()},  # deprecated: kind
            "totals": a.totals.to_dict(),
            "observed": self.observed(now).to_dict(),
            "log": a.log.stats().__dict__,
        }


__all__ = ["AgentViews", "control_view", "mode_view"]
