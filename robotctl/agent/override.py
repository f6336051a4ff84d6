"""The override (``POST /v1/override``; the glossary's word, docs/ARCHITECTURE.md): an operator pauses
control (the fleet in force stays as it is), pins a fleet size, optionally for a duration, or resumes
control by the policy.

While an override holds, the agent ignores r(i) and keeps the held number of active virtual robots,
applied at once (no dwell, no rate limit: an operator's word is final); when its duration ends, control
by the policy resumes by itself. The state is on ``GET /v1/override``, ``GET /v1/status``, /metrics
(``robotctl_override{override}``, ``robotctl_override_robots``, ``robotctl_override_until_timestamp_seconds``)
and in the log (``event=override``).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any

LOG = logging.getLogger("robotctl.agent")


class Override(enum.Enum):
    """Who sets the number of active robots."""

    #: the policy, r(i) at the current queue length
    AUTO = "auto"
    #: nobody: the fleet in force when control was paused stays
    PAUSED = "paused"
    #: the operator: a pinned number of active virtual robots
    PINNED = "pinned"


#: ``action`` of POST /v1/override -> the override it sets
ACTIONS = {"resume": Override.AUTO, "pause": Override.PAUSED, "pin": Override.PINNED}


@dataclass(frozen=True)
class OverrideState:
    """The override in force.

    Attributes
    ----------
    override : Override
        Who sets the active robots: the policy (auto), nobody (paused) or the operator (pinned).
    robots : int or None
        The active virtual robots held (paused: the mode when paused; pinned: the pinned count).
    since : float
        Agent time the override (or the return to the policy) began.
    until : float or None
        Agent time it ends by itself (None: until resumed).
    reason : str
        Free text from the request, for the log and the dashboard.
    """

    override: Override = Override.AUTO
    robots: int | None = None
    since: float = 0.0
    until: float | None = None
    reason: str = ""

    @property
    def overridden(self) -> bool:
        return self.override is not Override.AUTO

    def expired(self, now: float) -> bool:
        return self.overridden and self.until is not None and now >= self.until

    def to_dict(self) -> dict[str, Any]:
        return {"override": self.override.value, "robots": self.robots, "since": self.since, "until": self.until,
                "reason": self.reason}


class OperatorOverride:
    """The override in force (:attr:`state`), changed by a request or by the end of its duration; each
    change is logged (``event=override``)."""

    def __init__(self, now: float) -> None:
        self.state = OverrideState(since=now)

    def request(self, action: str, robots: int | None, duration_s: float | None, reason: str, now: float,
                active: int) -> OverrideState:
        """``action`` (a key of :data:`ACTIONS`) at ``now``, with ``active`` virtual robots in force."""
        override = ACTIONS[action]
        held = {Override.AUTO: None, Override.PAUSED: active, Override.PINNED: robots}[override]
        self._set(OverrideState(override, held, now, None if duration_s is None else now + duration_s, reason), now)
        return self.state

    def at(self, now: float) -> OverrideState:
        """The override in force at ``now``: control by the policy again once its duration has ended."""
        if self.state.expired(now):
            self._set(OverrideState(since=now, reason="duration ended"), now)
        return self.state

    def _set(self, state: OverrideState, now: float) -> None:
        self.state = state
        LOG.info("event=override override=%s robots=%s until=%s reason=%r t=%s", state.override.value,
                 state.robots, state.until, state.reason, now)


__all__ = ["ACTIONS", "OperatorOverride", "Override", "OverrideState"]
