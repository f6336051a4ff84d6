"""The problem and the results of paper 001's MDP (robotctl.policies._mdp): the robots problem of
Sections 2-4 (:class:`RobotsProblem`), a dynamic policy as its switching curves (:class:`DynamicPolicy`),
the static fleet and the optimum with their exact costs, and the solver's status. The algorithms that
produce them (value iteration, the exact cost of a policy, the controller) are in _mdp.py."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from robotctl._checks import positive, whole
from robotctl.model import (
    BMAP,
    PH,
    Costs,
    InputError,
    Measures,
    ModeArrivals,
    QueueModel,
)

#: Relaxation tau of Proposition 2 (the paper's Section 4 uses 0.99999).
TAU = 0.99999
#: Stop when the span of T(h) - h, which brackets the optimal cost per epoch, is below this fraction of
#: the cost (see :func:`solve_dynamic`).
TOLERANCE = 1e-10
MAX_ITERATIONS = 1_000_000


class MdpStatus(enum.Enum):
    """Outcome of :func:`solve_dynamic`."""

    SUCCESS = 0
    #: the value iteration stopped at ``max_iterations`` before its bounds met the tolerance
    MAX_ITERATIONS = 1
    #: the policy's chain has more than one closed class; the cost is that of the class holding the
    #: most likely start (q = 0 with the most active robots)
    MULTICHAIN = 2


STATUS_MESSAGES = {
    MdpStatus.SUCCESS: "optimal policy found",
    MdpStatus.MAX_ITERATIONS: "value iteration stopped before its bounds met the tolerance",
    MdpStatus.MULTICHAIN: "the policy's chain has several closed classes",
}


@dataclass(frozen=True)
class RobotsProblem:
    """The problem of paper 001, optionally generalised (module docstring).

    Attributes
    ----------
    robots : int
        N >= 1, robots available.
    capacity : int
        K >= 1, pages in the system, the one being indexed included.
    rates : tuple of float
        Poisson arrival rate with r robots active, r = 0..N (the paper: lambda r). Rates below
        ``min_robots`` are unused.
    service_rate : float
        mu > 0.
    gamma : float
        Cost of starvation per unit of time (the weight of P(starvation)).
    loss_cost : float
        Cost per lost page (the paper: 1).
    robot_cost : float
        Cost per active robot per second (the paper: 0).
    min_robots : int
        Fewest active robots allowed (the paper: 0).
    """

    robots: int
    capacity: int
    rates: tuple[float, ...]
    service_rate: float
    gamma: float
    loss_cost: float = 1.0
    robot_cost: float = 0.0
    min_robots: int = 0

    def __post_init__(self) -> None:
        whole("robots", self.robots, 1)
        whole("capacity", self.capacity, 1)
        whole("min_robots", self.min_robots, 0)
        if self.min_robots > self.robots:
            raise InputError("min_robots", f"is {self.min_robots} > robots = {self.robots}",
                             "allow at most as many robots as there are")
        rates = tuple(float(x) for x in self.rates)
        if len(rates) != self.robots + 1:
            raise InputError("rates", f"has {len(rates)} entries, N = {self.robots} needs {self.robots + 1}",
                             "give the arrival rate with r = 0..N robots active")
        if any(not (math.isfinite(x) and x >= 0) for x in rates) or any(
                x <= 0 for x in rates[max(self.min_robots, 1):]):
            raise InputError("rates", f"must be finite, >= 0, and > 0 with r >= 1 robots, got {list(rates)}",
                             "a robot that is active brings pages at a positive rate")
        object.__setattr__(self, "rates", rates)
        positive("service_rate", self.service_rate, "a rate per second, e.g. 0.1")
        for name in ("gamma", "loss_cost", "robot_cost"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not (math.isfinite(value)
                                                                                     and value >= 0):
                raise InputError(name, f"must be a finite number >= 0, got {value!r}", "costs are weights >= 0")
            object.__setattr__(self, name, float(value))
        object.__setattr__(self, "service_rate", float(self.service_rate))

    @classmethod
    def paper(cls, robots: int, capacity: int, rate: float, service_rate: float, gamma: float) -> RobotsProblem:
        """Paper 001's problem: rate lambda r with r robots, cost gamma P(starvation) + loss rate."""
        positive("rate", rate, "a rate per second, e.g. 0.1")
        whole("robots", robots, 1)
        return cls(robots, capacity, tuple(float(rate) * r for r in range(robots + 1)), service_rate, gamma)

    @property
    def uniformisation_rate(self) -> float:
        """nu = max_r lambda_r + mu (the paper: lambda N + mu)."""
        return max(self.rates) + self.service_rate

    @property
    def costs(self) -> Costs:
        """The same cost in the terms of paper 000's eq. (2)."""
        return Costs(loss=self.loss_cost, starvation=self.gamma, robot=self.robot_cost)

    def to_model(self) -> QueueModel:
        """The queue of paper 000 that this problem describes: a Poisson mode for each number of active
        robots r >= max(1, min_robots) (the model core has no mode without arrivals), exponential
        service, no obsolescence."""
        low = max(1, self.min_robots)
        arrivals = ModeArrivals.per_mode({r: BMAP.poisson(self.rates[r]) for r in range(low, self.robots + 1)})
        return QueueModel(self.capacity, arrivals, PH.exponential(self.service_rate))

    @classmethod
    def from_model(cls, model: QueueModel, costs: Costs) -> RobotsProblem:
        """The problem of a model file of paper 001's kind: Poisson arrivals with one page per delivery in
        every mode, the modes consecutive numbers of robots, exponential service, no obsolescence, and
        no response cost (a ratio of averages, which an average-cost MDP cannot carry)."""
        hint = "paper 001's MDP needs Poisson robots and exponential service; use the threshold search instead"
        if model.obsolescence is not None:
            raise InputError("model.obsolescence", "is given, but paper 001's model has none", hint)
        if model.service.order != 1:
            raise InputError("model.service", f"has {model.service.order} phases, not 1 (exponential)", hint)
        modes = model.modes
        if list(modes) != list(range(modes[0], modes[-1] + 1)):
            raise InputError("model.arrivals", f"modes {list(modes)} are not consecutive numbers of robots",
                             "paper 001 activates or parks one robot at a time: define every mode from the "
                             "fewest to the most robots")
        for mode in modes:
            bmap = model.arrivals[mode]
            if bmap.order != 1 or bmap.max_batch != 1:
                raise InputError(f"model.arrivals.per_mode.{mode}",
                                 f"is not a Poisson process of single pages ({bmap.order} phases, batches up to "
                                 f"{bmap.max_batch})", hint)
        if costs.response:
            raise InputError("costs.response", f"is {costs.response}, but the MDP minimises a long-run average "
                             "and the response time is a ratio of two", "set costs.response: 0, or use "
                             "--certify, whose bound carries the response term")
        rates = [0.0] * (modes[-1] + 1)
        for mode in modes:
            rates[mode] = float(model.arrivals[mode].D1[0, 0])
        return cls(modes[-1], model.capacity, tuple(rates), float(-model.service.S[0, 0]), costs.starvation,
                   costs.loss, costs.robot, modes[0])


@dataclass(frozen=True)
class DynamicPolicy:
    """A stationary policy of paper 001 on the states (q, r) just before an epoch.

    Attributes
    ----------
    activate : ndarray of bool, shape (K + 1, N + 1)
        ``activate[q, r]``: at a departure from q pages (q >= 1) with r active, activate one more robot.
    keep : ndarray of bool, shape (K + 1, N + 1)
        ``keep[q, r]``: at an arrival to q pages with r active (r >= 1), keep the robot that delivered.
    """

    activate: NDArray[np.bool_]
    keep: NDArray[np.bool_]

    def __post_init__(self) -> None:
        for name in ("activate", "keep"):
            a = np.array(getattr(self, name), dtype=bool)
            a.flags.writeable = False
            object.__setattr__(self, name, a)
        if self.activate.shape != self.keep.shape or self.activate.ndim != 2:
            raise InputError("policy", f"activate {self.activate.shape} and keep {self.keep.shape} differ",
                             "give two (K + 1) x (N + 1) tables")

    @property
    def capacity(self) -> int:
        return int(self.activate.shape[0] - 1)

    @property
    def robots(self) -> int:
        return int(self.activate.shape[1] - 1)

    def after_departure(self, q: int, r: int) -> int:
        """Active robots after a departure from q pages with r active."""
        return min(r + int(self.activate[q, r]), self.robots)

    def after_arrival(self, q: int, r: int) -> int:
        """Active robots after an arrival to q pages with r active (the robot that delivered is parked
        unless kept)."""
        return r - 1 + int(self.keep[q, r])

    def switching_curves(self) -> tuple[tuple[int | None, ...], tuple[int, ...]]:
        """(f_0, f_1) for q = 0..K: activate at a departure iff r <= f_0(q) (-1: never; ``None`` at
        q = 0, where no departure happens); keep at an arrival iff r <= f_1(q) (0: never).

        Read from the tables as the largest r whose action is 1 (r < N for f_0, since with all robots
        active there is none to activate; r >= 1 for f_1); :meth:`is_switching_curve` says whether the
        tables are exactly of that form."""
        N = self.robots
        f0: list[int | None] = [None]
        for q in range(1, self.capacity + 1):
            on = np.flatnonzero(self.activate[q, :N])
            f0.append(int(on[-1]) if on.size else -1)
        f1 = []
        for q in range(self.capacity + 1):
            on = np.flatnonzero(self.keep[q, 1:]) + 1
            f1.append(int(on[-1]) if on.size else 0)
        return tuple(f0), tuple(f1)

    def is_switching_curve(self, states: NDArray[np.bool_] | None = None) -> bool:
        """True when, at every q, the action is 1 exactly for r <= f(q) (on ``states`` only if given: a
        (K + 1) x (N + 1) mask, e.g. the recurrent states)."""
        f0, f1 = self.switching_curves()
        r = np.arange(self.robots + 1)
        mask = np.ones_like(self.activate) if states is None else np.asarray(states, dtype=bool)
        for q in range(self.capacity + 1):
            if q >= 1:
                rows = mask[q, :self.robots]
                f = f0[q]
                assert f is not None
                if np.any((self.activate[q, :self.robots] != (r[:self.robots] <= f))[rows]):
                    return False
            rows = mask[q, 1:]
            if np.any((self.keep[q, 1:] != (r[1:] <= f1[q]))[rows]):
                return False
        return True


@dataclass(frozen=True)
class StaticFleet:
    """The best fixed number of robots (paper 001, Section 4, eq. (9), Proposition 3).

    Attributes
    ----------
    robots : int
        N_s.
    cost : float
        C_s = gamma P(starvation) + loss rate with N_s robots always active.
    p_starvation, loss_rate : float
        The two terms' measures (M/M/1/K with rate N_s lambda).
    """

    robots: int
    cost: float
    p_starvation: float
    loss_rate: float


@dataclass(frozen=True)
class DynamicOptimum:
    """The result of :func:`solve_dynamic`.

    Attributes
    ----------
    success : bool
    status : MdpStatus
    message : str
    problem : RobotsProblem
    policy : DynamicPolicy
    cost : float
        C_d: the exact long-run cost of ``policy`` from its own Markov chain on (q, r).
    p_starvation, loss_rate : float
        P(q = 0) and the rate of lost pages under ``policy``.
    mean_active_robots : float
        E[r] (the paper's N-bar).
    active_range : tuple of int
        (N_min, N_max): the fewest and most active robots over the recurrent states.
    recurrent : ndarray of bool, shape (K + 1, N + 1)
        The closed class of the policy's chain on (q, r) whose cost is reported.
    stationary : ndarray, shape (K + 1, N + 1)
        Its stationary distribution.
    value_bounds : tuple of float
        (lower, upper): the bracket on the optimal cost at the last h, min and max of T(h) - h per epoch
        (Odoni's bounds, the value iteration's stopping test whatever the method); the lower one holds for
        every policy.
    iterations : int
        Applications of the Bellman operator T: the value-iteration steps, plus one per policy evaluation
        under policy iteration.
    static : StaticFleet
        The best static fleet with at most N robots.
    gain_percent : float
        100 (C_s - C_d) / C_d, the relative improvement of Tables 1 and 2.
    method : str
        ``"value-iteration"`` or ``"policy-iteration"`` as asked; ``message`` says when policy iteration
        handed over to value iteration.
    evaluations : int
        Exact policy evaluations (sparse solves) of the policy iteration; 0 under value iteration.
    """

    success: bool
    status: MdpStatus
    message: str
    problem: RobotsProblem
    policy: DynamicPolicy
    cost: float
    p_starvation: float
    loss_rate: float
    mean_active_robots: float
    active_range: tuple[int, int]
    recurrent: NDArray[np.bool_]
    stationary: NDArray[np.float64]
    value_bounds: tuple[float, float]
    iterations: int
    static: StaticFleet
    gain_percent: float
    method: str = "value-iteration"
    evaluations: int = 0

    def __post_init__(self) -> None:
        for name in ("recurrent", "stationary"):
            getattr(self, name).flags.writeable = False

    def measures(self) -> Measures:
        """The policy's stationary measures in paper 000's terms, from ``stationary`` pi(q, r).

        Pages are offered at rate lambda = sum pi(q, r) lambda_r and lost at sum_r pi(K, r) lambda_r; every
        admitted page is served (no obsolescence), so by Little's law the mean response of served pages
        is E[q] / (lambda - loss rate). With no response cost, ``cost_of(measures, problem.costs).total``
        is ``cost``.
        """
        P = self.stationary
        lam = np.array(self.problem.rates)
        K = self.problem.capacity
        offered = float(P.sum(axis=0) @ lam)
        lost = float(P[K] @ lam)
        served = offered - lost
        level = P.sum(axis=1)
        by_r = P.sum(axis=0)
        mean_q = float(np.arange(K + 1) @ level)
        v1 = mean_q / served if served > 0 else math.nan
        return Measures(arrival_rate=offered, p_loss=lost / offered, p_obsolete=0.0, p_success=served / offered,
                        p_starvation=float(level[0]), mean_active_robots=float(np.arange(by_r.size) @ by_r),
                        active_robots_distribution=tuple((int(r), float(by_r[r]))
                                                         for r in np.flatnonzero(by_r)[::-1]),
                        queue_length_distribution=tuple(float(x) for x in level), mean_queue_length=mean_q,
                        mean_response_served=v1, mean_sojourn_obsolete=0.0, mean_sojourn=v1 * served / offered)


__all__ = [
    "MAX_ITERATIONS",
    "STATUS_MESSAGES",
    "TAU",
    "TOLERANCE",
    "DynamicOptimum",
    "DynamicPolicy",
    "MdpStatus",
    "RobotsProblem",
    "StaticFleet",
]
