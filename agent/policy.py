"""The adopted policy: one frozen record of a policy and what it was computed from, the snapshot that
publishes it, and the holder that swaps snapshots.

The refit pipeline reads compute -> worker -> adopt: :mod:`agent.compute` turns a window into a
:class:`PolicyFit`, :mod:`agent.worker` runs that off the event loop, and the agent adopts the record
here: :meth:`PolicyHolder.adopt` wraps it in the next :class:`PolicySnapshot` and replaces the
reference in one assignment, so readers (the actuator, ``/v1/policy``, the metrics collector) always
see a whole snapshot, never half of an update. Nothing is copied field by field on the way: the
snapshot holds the very record the refit produced.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from robotctl.model import CostBreakdown, Measures, QueueModel, ThresholdPolicy


def finite(x: Any) -> Any:
    """``x``, or None for a float that is not finite (JSON has no NaN or infinity)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


@dataclass(frozen=True, eq=False)
class PolicyFit:
    """A policy and what it was computed from: what a successful refit produces and a snapshot holds.

    Attributes
    ----------
    policy : ThresholdPolicy
    modes, thresholds : tuple of int
        The optimum's modes (largest first) and the paper's thresholds j_r (paper 000, Section 2).
    measures : Measures or None
        Predicted by the fitted model (None for a configured or restored policy).
    cost : CostBreakdown or None
        The cost rate of paper 000 eq. (2) under the fitted model.
    fit : mapping
        :func:`agent.compute.fit_summary` of the model (rates and lag-1 correlations per mode, service
        and obsolescence means, fit status, fallback rungs) for /v1/policy and /metrics.
    model : QueueModel or None
        The fitted model.
    deliveries : int
        Deliveries in the fit window.
    window : tuple of float
        (start, end) of the window fitted.
    """

    policy: ThresholdPolicy
    modes: tuple[int, ...] = ()
    thresholds: tuple[int, ...] = ()
    measures: Measures | None = None
    cost: CostBreakdown | None = None
    fit: Mapping[str, Any] = field(default_factory=dict)
    model: QueueModel | None = None
    deliveries: int = 0
    window: tuple[float, float] = (0.0, 0.0)

    @classmethod
    def of(cls, policy: ThresholdPolicy, *, fit: Mapping[str, Any] | None = None,
           model: QueueModel | None = None) -> PolicyFit:
        """A policy with its own modes and thresholds and nothing predicted (configured, restored or
        probed), optionally keeping the fit and model it was chosen under."""
        return cls(policy, policy.modes, policy.thresholds, fit=dict(fit or {}), model=model)


@dataclass(frozen=True, eq=False)
class PolicySnapshot:
    """The policy in force and where it came from.

    Attributes
    ----------
    version : int
        Grows by one at every adoption.
    source : str
        ``startup`` (the configured policy), ``restored`` (the last adopted one, read back at start),
        ``probe`` (one mode alone, before the first fit) or ``fit``.
    adopted_at : float
        Agent time of adoption.
    basis : PolicyFit
        The policy and what it came from; its fields read through as ``policy``, ``modes``,
        ``thresholds``, ``measures``, ``cost``, ``fit``, ``model``, ``deliveries``, ``window``.
    """

    version: int
    source: str
    adopted_at: float
    basis: PolicyFit

    @classmethod
    def initial(cls, policy: ThresholdPolicy, now: float, *, source: str = "startup") -> PolicySnapshot:
        return cls(1, source, now, PolicyFit.of(policy))

    @property
    def policy(self) -> ThresholdPolicy:
        return self.basis.policy

    @property
    def modes(self) -> tuple[int, ...]:
        return self.basis.modes

    @property
    def thresholds(self) -> tuple[int, ...]:
        return self.basis.thresholds

    @property
    def measures(self) -> Measures | None:
        return self.basis.measures

    @property
    def cost(self) -> CostBreakdown | None:
        return self.basis.cost

    @property
    def fit(self) -> Mapping[str, Any]:
        return self.basis.fit

    @property
    def model(self) -> QueueModel | None:
        return self.basis.model

    @property
    def deliveries(self) -> int:
        return self.basis.deliveries

    @property
    def window(self) -> tuple[float, float]:
        return self.basis.window

    def to_dict(self) -> dict[str, Any]:
        b = self.basis
        return {
            "version": self.version,
            "source": self.source,
            "robots_at_level": list(b.policy.robots_at_level),
            "modes": list(b.modes),
            "thresholds": list(b.thresholds),
            "adopted_at": self.adopted_at,
            "predicted": ({k: finite(v) for k, v in b.measures.to_dict().items()}
                          if b.measures is not None else None),
            "cost": ({k: finite(v) for k, v in b.cost.to_dict().items()} if b.cost is not None else None),
            "fit": dict(b.fit),
            "window": {"start": b.window[0], "end": b.window[1], "deliveries": b.deliveries},
        }

    def to_state(self) -> dict[str, Any]:
        """What is saved so that a restart resumes this policy."""
        return {"version": self.version, "robots_at_level": list(self.policy.robots_at_level),
                "adopted_at": self.adopted_at, "fit": dict(self.fit)}


class PolicyHolder:
    """Holds the current :class:`PolicySnapshot`; :meth:`adopt` and :meth:`swap` replace it in one
    assignment."""

    def __init__(self, snapshot: PolicySnapshot) -> None:
        self.current = snapshot

    def swap(self, snapshot: PolicySnapshot) -> PolicySnapshot:
        old, self.current = self.current, snapshot
        return old

    def adopt(self, basis: PolicyFit, now: float, source: str) -> PolicySnapshot:
        """Put ``basis`` in force as the next version; returns the new snapshot."""
        snap = PolicySnapshot(self.current.version + 1, source, now, basis)
        self.current = snap
        return snap


__all__ = [
    "PolicyFit",
    "PolicyHolder",
    "PolicySnapshot",
    "finite",
]
