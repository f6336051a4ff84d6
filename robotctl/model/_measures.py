"""Performance measures of a policy (paper 000, Sections 4-5) and the cost J of eq. (2)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import NDArray

from ._model import Costs


@dataclass(frozen=True)
class Measures:
    """Stationary measures under one policy.

    Attributes
    ----------
    arrival_rate : float
        lambda, pages offered per second under the policy (eq. (9)).
    p_loss, p_obsolete, p_success : float
        Fractions of offered pages lost at the buffer (eq. (8)), dropped as obsolete (eq. (14)) and
        indexed (eq. (15)); they sum to one.
    p_starvation : float
        P(system empty) (eq. (5)).
    mean_active_robots : float
        N_act = E[r(i)] (eq. (6)).
    active_robots_distribution : tuple of (int, float)
        (mode, probability) pairs (eq. (7)).
    queue_length_distribution : tuple of float
        P(i pages in the system), i = 0..K.
    mean_queue_length : float
    mean_response_served : float
        V^(1): mean sojourn of pages that get indexed, service included (Corollary 1, eq. (23)).
    mean_sojourn_obsolete : float
        V^(2): mean sojourn of pages that become obsolete (eq. (24)); 0 if none do.
    mean_sojourn : float
        V = V^(1) P_success + V^(2) P_obs (eq. (22); lost pages count zero).
    commands_per_s : float
        Park and resume commands per second (one per robot parked or resumed), exact from the level
        transitions that change the number of active robots; NaN where a route does not compute it.
    commands_per_robot_min : float
        The same per robot per minute: 60 x ``commands_per_s`` / N, N the fleet (the largest mode).
    """

    arrival_rate: float
    p_loss: float
    p_obsolete: float
    p_success: float
    p_starvation: float
    mean_active_robots: float
    active_robots_distribution: tuple[tuple[int, float], ...]
    queue_length_distribution: tuple[float, ...]
    mean_queue_length: float
    mean_response_served: float
    mean_sojourn_obsolete: float
    mean_sojourn: float
    commands_per_s: float = float("nan")
    commands_per_robot_min: float = float("nan")

    @classmethod
    def from_rates(cls, *, offered: float, lost: float, obsolete: float, served: float,
                   level_probabilities: NDArray[np.float64], robots_at_level: tuple[int, ...],
                   served_time: float, obsolete_time: float) -> Measures:
        """The measures as ratios of stationary rates (per second): pages offered, lost, expired and
        served; and the sojourn time that served and expiring pages accumulate per second (by Little's
        law, also the mean number of such pages present). Each solver computes these its own way."""
        level = np.asarray(level_probabilities, dtype=float)
        dist: dict[int, float] = {}
        for r, q in zip(robots_at_level, level):
            dist[r] = dist.get(r, 0.0) + float(q)
        p_succ, p_obs = served / offered, obsolete / offered
        v1 = served_time / served if served > 0 else float("nan")
        v2 = obsolete_time / obsolete if obsolete > 0 else 0.0
        return cls(
            arrival_rate=offered,
            p_loss=lost / offered,
            p_obsolete=p_obs,
            p_success=p_succ,
            p_starvation=float(level[0]),
            mean_active_robots=float(sum(r * q for r, q in dist.items())),
            active_robots_distribution=tuple(sorted(dist.items(), reverse=True)),
            queue_length_distribution=tuple(float(x) for x in level),
            mean_queue_length=float(np.arange(level.size) @ level),
            mean_response_served=v1,
            mean_sojourn_obsolete=v2,
            mean_sojourn=v1 * p_succ + v2 * p_obs,
        )

    @property
    def throughput(self) -> float:
        """Pages indexed per second."""
        return self.arrival_rate * self.p_success

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["active_robots_distribution"] = {str(m): p for m, p in self.active_robots_distribution}
        d["queue_length_distribution"] = list(self.queue_length_distribution)
        return d


@dataclass(frozen=True)
class CostBreakdown:
    """J of eq. (2) and its five terms."""

    total: float
    loss: float
    obsolescence: float
    response: float
    robot: float
    starvation: float
    command: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def cost_of(measures: Measures, costs: Costs) -> CostBreakdown:
    """J = lambda (c_loss P_loss + c_obs P_obs) + a V^(1) + c_rob N_act + c_star P_star (eq. (2)), plus
    c_cmd x (park and resume commands per second) when ``costs.command`` > 0 (the term is a rate per
    second like lambda P_loss; it is NaN when the measures do not carry the command rate)."""
    m = measures
    terms = {
        "loss": costs.loss * m.arrival_rate * m.p_loss,
        "obsolescence": costs.obsolescence * m.arrival_rate * m.p_obsolete,
        "response": costs.response * m.mean_response_served,
        "robot": costs.robot * m.mean_active_robots,
        "starvation": costs.starvation * m.p_starvation,
        "command": costs.command * m.commands_per_s if costs.command else 0.0,
    }
    return CostBreakdown(total=sum(terms.values()), **terms)
