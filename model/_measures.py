"""Performance measures of a policy (paper 000, Sections 4-5) and the cost J of eq. (2)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

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

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def cost_of(measures: Measures, costs: Costs) -> CostBreakdown:
    """J = lambda (c_loss P_loss + c_obs P_obs) + a V^(1) + c_rob N_act + c_star P_star (eq. (2))."""
    m = measures
    terms = {
        "loss": costs.loss * m.arrival_rate * m.p_loss,
        "obsolescence": costs.obsolescence * m.arrival_rate * m.p_obsolete,
        "response": costs.response * m.mean_response_served,
        "robot": costs.robot * m.mean_active_robots,
        "starvation": costs.starvation * m.p_starvation,
    }
    return CostBreakdown(total=sum(terms.values()), **terms)
