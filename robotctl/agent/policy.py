"""The adopted policy: one frozen record of a policy and what it was computed from, the snapshot that
publishes it, and the holder that swaps snapshots.

The refit pipeline reads compute -> worker -> adopt: :mod:`agent.compute` turns a window into a
:class:`PolicyFit`, :mod:`agent.worker` runs that off the event loop, and the agent adopts the record
here: :meth:`PolicyHolder.adopt` wraps it in the next :class:`PolicySnapshot` and replaces the
reference in one assignment, so readers (the actuator, ``/v1/policy``, the metrics collector) always
see a whole snapshot, never half of an update. Nothing is copied field by field on the way: the
snapshot holds the very record the refit produced.

The snapshot's :attr:`PolicySnapshot.decision` is what the agent core asks for the active robots after
each event, one method for both kinds of policy (:class:`Decision`): :class:`ThresholdDecision` reads
r(i) at the queue length after the event (paper 000), resuming robots later by its hysteresis band;
:class:`DynamicDecision` applies paper 001's MDP policy at each delivery and each page indexed, from the
queue length *before* the event and the robots targeted then, exactly as
:class:`robotctl.policies.DynamicController` does in the simulator (``policy.kind: mdp``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from robotctl._json import finite
from robotctl.model import CostBreakdown, InputError, Measures, QueueModel, ThresholdPolicy
from robotctl.policies import DynamicController, DynamicPolicy, RobotsProblem

#: Values of ``policy.kind``, the policy kinds, and of the kind in force.
POLICY_KINDS = ("thresholds", "mdp")

#: Where the policy in force came from (:attr:`PolicySnapshot.origin`): the configured start-up policy (or a
#: probe), a cold-start refit, a regular refit, or the last good policy of an earlier run (warm start).
ORIGINS = ("startup", "cold", "regular", "warm")


class Event(enum.Enum):
    """What changed the queue, for :meth:`Decision.target`."""

    #: a delivery (one decision per delivery, whatever its pages, as in the simulator)
    ARRIVAL = "arrival"
    #: one page indexed (a completion of n pages is n departures)
    DEPARTURE = "departure"
    #: anything else (obsolete drop, resynchronisation, a new policy, the end of an override): paper
    #: 001's model has no decision there
    OTHER = "other"


class Decision(Protocol):
    """The active robots the policy in force asks for after an event."""

    def target(self, event: Event, before: Sequence[int], q: int, r: int) -> int:
        """Virtual robots to run after ``event``.

        Parameters
        ----------
        event : Event
        before : sequence of int
            The queue length just before each event of the kind, in order (one per delivery, or one
            per page indexed; empty for ``OTHER``).
        q : int
            The queue length after them.
        r : int
            The robots targeted before them (the actuator's target).
        """
        ...


@dataclass(frozen=True)
class ThresholdDecision:
    """A queue-length policy: r(q) after any event (paper 000), with optional hysteresis.

    With ``hysteresis`` h > 0 robots are parked as the policy says, at once, but resumed only once the
    queue is h levels lower than r(i) alone would resume them, and always at an empty queue: the target
    after an event is r(q) when r(q) <= r (the robots targeted before it) or q = 0, else
    min(r(q), max(r, r(q + h))). In between the robots keep what they do, so a queue that wobbles around
    a threshold does not switch the fleet back and forth at every page (``robots.hysteresis``; its price
    is measured in the simulator, :mod:`agent.damping`). h = 0 is r(q) exactly.
    """

    policy: ThresholdPolicy
    hysteresis: int = 0
    #: r_resume(0..K) of an exact hysteresis policy (``robots.hysteresis: auto``): park down to r(q) when
    #: r > r(q), resume up to resume[q] when r < resume[q], else keep r (robotctl.model.HysteresisPolicy)
    resume: tuple[int, ...] | None = None

    def target(self, event: Event, before: Sequence[int], q: int, r: int) -> int:
        levels = self.policy.robots_at_level
        top = len(levels) - 1
        want = levels[min(q, top)]
        if self.resume is not None:
            return min(max(r, self.resume[min(q, top)]), want)
        if self.hysteresis <= 0 or want <= r or q <= 0:
            return want
        return min(want, max(r, levels[min(q + self.hysteresis, top)]))


@dataclass(frozen=True)
class DynamicDecision:
    """Paper 001's MDP policy on (queue length before the event, robots targeted).

    A delivery to q pages with r robots targeted leaves ``policy.after_arrival(q, r)``; each page
    indexed from q pages leaves ``policy.after_departure(q, r)``; other events leave r. The rule is
    :meth:`robotctl.policies.DynamicController.after_events`, the one the simulator's controller applies,
    so that the agent and the simulator take the same decisions on the same events. The policy's states run over
    ``min_robots..N``; a target outside (an override, the start-up policy) is first brought inside.
    """

    policy: DynamicPolicy
    min_robots: int
    #: the problem it was solved for (not saved: a restored policy has none)
    problem: RobotsProblem | None = field(default=None, compare=False)
    _controller: DynamicController = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_controller", DynamicController(self.policy, self.min_robots))

    def target(self, event: Event, before: Sequence[int], q: int, r: int) -> int:
        """The robots after ``event`` (:meth:`DynamicController.after_events`, the simulator's rule)."""
        r = min(max(r, self.min_robots), self.policy.robots)
        if event is Event.OTHER:
            return r
        return self._controller.after_events(event is Event.ARRIVAL, before, r, floor=self.min_robots)

    def to_state(self) -> dict[str, Any]:
        """The tables as rows of 0/1, for policy.json."""
        return {"min_robots": self.min_robots, "activate": self.policy.activate.astype(int).tolist(),
                "keep": self.policy.keep.astype(int).tolist()}

    @classmethod
    def from_state(cls, state: Mapping[str, Any], capacity: int, robots: int) -> DynamicDecision:
        """Read :meth:`to_state` back; an InputError when it does not fit ``capacity`` and ``robots``."""
        tables = [np.array(state[k]) for k in ("activate", "keep")]
        if any(t.dtype.kind not in "biu" or t.ndim != 2 or t.shape[0] != capacity + 1 or not
               2 <= t.shape[1] <= robots + 1 or not np.isin(t, (0, 1)).all() for t in tables):
            raise InputError("policy.dynamic", "does not fit the configured capacity and fleet",
                             "the next refit computes a new one")
        lo = state["min_robots"]
        if isinstance(lo, bool) or not isinstance(lo, int) or not 1 <= lo <= tables[0].shape[1] - 1:
            raise InputError("policy.dynamic.min_robots", f"is {lo!r}", "the next refit computes a new one")
        return cls(DynamicPolicy(tables[0].astype(bool), tables[1].astype(bool)), lo)


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
    dynamic : DynamicDecision or None
        Paper 001's MDP policy when it is in force (``policy.kind: mdp`` and the fitted traffic meets
        its assumptions); ``policy`` is then the threshold optimum, kept for reference and as the fallback,
        and ``measures`` and ``cost`` are the MDP policy's. ``fit["control"]`` says which policy kind is in
        force and, when the MDP was asked for but not adopted, why.
    hysteresis : int
        Queue levels below its parking level at which a parked robot resumes (:class:`ThresholdDecision`;
        a configured ``robots.hysteresis``).
    resume : tuple of int or None
        With ``robots.hysteresis: auto``, the resume vector of the exact hysteresis policy the refit chose
        (``policy`` is then its park vector; ``measures`` and ``cost`` are the hysteresis policy's, exact).
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
    dynamic: DynamicDecision | None = None
    hysteresis: int = 0
    resume: tuple[int, ...] | None = None

    @property
    def kind(self) -> str:
        """The policy kind in force: ``mdp`` when paper 001's MDP policy decides, else ``thresholds``."""
        return "thresholds" if self.dynamic is None else "mdp"

    @property
    def decision(self) -> Decision:
        return self.dynamic if self.dynamic is not None else ThresholdDecision(self.policy, self.hysteresis,
                                                                               self.resume)

    @classmethod
    def of(cls, policy: ThresholdPolicy, *, fit: Mapping[str, Any] | None = None,
           model: QueueModel | None = None, hysteresis: int = 0,
           resume: tuple[int, ...] | None = None) -> PolicyFit:
        """A policy with its own modes and thresholds and nothing predicted (configured, restored or
        probed), optionally keeping the fit and model it was chosen under."""
        return cls(policy, policy.modes, policy.thresholds, fit=dict(fit or {}), model=model,
                   hysteresis=hysteresis, resume=resume)


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
    #: what the agent asks after each event (:class:`Decision`), made once per snapshot
    decision: Decision = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "decision", self.basis.decision)

    @classmethod
    def initial(cls, policy: ThresholdPolicy, now: float, *, source: str = "startup",
                hysteresis: int = 0) -> PolicySnapshot:
        return cls(1, source, now, PolicyFit.of(policy, hysteresis=hysteresis))

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

    @property
    def kind(self) -> str:
        """The policy kind in force: ``thresholds`` or ``mdp``."""
        return self.basis.kind

    @property
    def origin(self) -> str:
        """One of :data:`ORIGINS`: ``startup`` (the configured policy, or a probe), ``cold`` (a cold-start
        refit), ``regular`` (a regular refit) or ``warm`` (restored from an earlier run)."""
        if self.source == "restored":
            return "warm"
        if self.source != "fit":
            return "startup"
        return "cold" if self.fit.get("origin") == "cold" else "regular"

    def kind_view(self) -> dict[str, Any]:
        """``{"in_force": thresholds | mdp, "requested": ..., "reason": why the MDP is not in force}``."""
        info = dict(self.fit.get("control", {}))
        return {"in_force": self.kind, "requested": info.get("requested", "thresholds"),
                "reason": info.get("reason")}

    def to_dict(self) -> dict[str, Any]:
        b = self.basis
        return {
            "version": self.version,
            "source": self.source,
            "origin": self.origin,
            "robots_at_level": list(b.policy.robots_at_level),
            "resume_at_level": list(b.resume) if b.resume is not None else None,
            "commands_per_robot_min": (finite(b.measures.commands_per_robot_min) if b.measures is not None
                                       else None),
            "modes": list(b.modes),
            "thresholds": list(b.thresholds),
            "adopted_at": self.adopted_at,
            "predicted": ({k: finite(v) for k, v in b.measures.to_dict().items()}
                          if b.measures is not None else None),
            "cost": ({k: finite(v) for k, v in b.cost.to_dict().items()} if b.cost is not None else None),
            "fit": dict(b.fit),
            "window": {"start": b.window[0], "end": b.window[1], "deliveries": b.deliveries},
            "policy_kind": self.kind_view(),
            "policy_control": self.kind_view(),  # deprecated for one release: policy_kind
        }

    def to_state(self) -> dict[str, Any]:
        """What is saved so that a restart resumes this policy (with the MDP's tables when it is in force)."""
        state = {"version": self.version, "robots_at_level": list(self.policy.robots_at_level),
                 "adopted_at": self.adopted_at, "fit": dict(self.fit)}
        if self.basis.dynamic is not None:
            state["dynamic"] = self.basis.dynamic.to_state()
        return state


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
    "ORIGINS",
    "POLICY_KINDS",
    "Decision",
    "DynamicDecision",
    "Event",
    "PolicyFit",
    "PolicyHolder",
    "PolicySnapshot",
    "ThresholdDecision",
    "finite",
]
