"""Estimates with confidence intervals by batch means, and the simulator's result.

The measured part of a run (after the warm-up) is cut into b batches of equal length (in events or in
simulated seconds). Every measure is a ratio of two totals, R = sum_j Y_j / sum_j X_j (pages lost per
page offered, seconds empty per second, sojourn per served page, ...), or for the cost a linear
combination of such ratios. The point estimate is the ratio of the totals; its standard error comes
from the batch values of the linearised estimator (the delta method for ratio estimators, Law &
Kelton, *Simulation Modeling and Analysis*, Section 9.5.3, and Section 9.5.2 for batch means):

    psi_j = (Y_j - R X_j) / mean(X),     se = sd(psi_1..psi_b) / sqrt(b),

and the half-width at level 1 - alpha is t_{b-1, 1 - alpha/2} se. Batch means treat the b batch values
as independent and normal, which holds when each batch is long against the time the queue takes to
forget its state; the lag-1 correlation of the psi_j is reported with each estimate as a check.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl._errors import InputError

from ._measures import Measures, cost_of
from ._model import Costs
from ._sim_engine import Totals
from ._sim_events import TraceRow

#: Measures compared by :meth:`SimulationResult.check` by default (the scalars of :class:`Measures`;
#: ``cost`` is added when the result has one).
SCALAR_MEASURES = ("arrival_rate", "p_loss", "p_obsolete", "p_success", "p_starvation", "mean_active_robots",
                   "mean_queue_length", "mean_response_served", "mean_sojourn_obsolete", "mean_sojourn")


class StopRule(enum.Enum):
    """How the length of the run was given."""

    #: a number of events after the warm-up, batches of equal event counts
    EVENTS = "events"
    #: simulated seconds after the warm-up, batches of equal duration
    HORIZON = "horizon"


class SimulationStatus(enum.Enum):
    """Outcome of a simulation."""

    SUCCESS = 0
    #: some measure has no data (e.g. no page was served), so its estimate is NaN
    UNDEFINED = 1


STATUS_MESSAGES = {
    SimulationStatus.SUCCESS: "simulated",
    SimulationStatus.UNDEFINED: "some measures have no data in the measured part of the run",
}


def t_quantile(level: float, batches: int) -> float:
    """t_{b-1, (1 + level) / 2}: the half-width of a two-sided interval at ``level`` is this times the
    standard error.

    ``scipy.special.stdtrit`` is the inverse of Student's t distribution function; imported here, so
    that importing the model core does not pay for it (scipy.stats alone cost 0.44 s at start-up)."""
    from scipy.special import stdtrit

    return float(stdtrit(batches - 1, 0.5 + level / 2.0))


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its confidence interval.

    Attributes
    ----------
    value : float
        Ratio of the totals over the measured run.
    half_width : float
        Half-width of the interval at the result's level (``value`` +- ``half_width``).
    std_error : float
        Standard error by batch means.
    lag1_correlation : float
        Lag-1 correlation of the batch values; far from 0 means the batches are too short for the
        interval to be trusted (NaN when the batch values are constant).
    """

    value: float
    half_width: float
    std_error: float
    lag1_correlation: float

    @property
    def low(self) -> float:
        return self.value - self.half_width

    @property
    def high(self) -> float:
        return self.value + self.half_width

    def contains(self, x: float, *, atol: float = 1e-12) -> bool:
        """Whether ``x`` lies in the interval (``atol`` absorbs rounding for degenerate intervals,
        e.g. P_obs = 0 exactly without obsolescence)."""
        return bool(abs(x - self.value) <= self.half_width + atol + 1e-12 * abs(x))

    def rescaled(self, quantile: float) -> Estimate:
        return replace(self, half_width=quantile * self.std_error)

    def to_dict(self) -> dict[str, float]:
        return {"estimate": self.value, "half_width": self.half_width, "std_error": self.std_error,
                "lag1_correlation": self.lag1_correlation}


@dataclass(frozen=True)
class ComparisonRow:
    """One measure of a :class:`Comparison`."""

    name: str
    exact: float
    estimate: Estimate
    inside: bool

    @property
    def z(self) -> float:
        """(exact - estimate) / standard error (inf for a degenerate interval that misses)."""
        se = self.estimate.std_error
        diff = self.exact - self.estimate.value
        if self.inside and abs(diff) <= 1e-9 * max(1.0, abs(self.exact)):
            return 0.0  # equal up to rounding (e.g. a measure that is constant in every batch)
        if se > 0:
            return diff / se
        return 0.0 if self.inside else math.copysign(math.inf, diff)


@dataclass(frozen=True)
class Comparison:
    """Exact measures against simulated intervals at ``level`` each.

    Attributes
    ----------
    level : float
        Confidence level of each interval.
    rows : tuple of ComparisonRow
    """

    level: float
    rows: tuple[ComparisonRow, ...]

    @property
    def all_inside(self) -> bool:
        return all(r.inside for r in self.rows)

    @property
    def outside(self) -> tuple[str, ...]:
        """Names of the measures whose exact value lies outside its interval."""
        return tuple(r.name for r in self.rows if not r.inside)

    def __str__(self) -> str:
        lines = [f"{'measure':22} {'exact':>12} {'simulated':>12} {'+-':>10} {'z':>7}"]
        for r in self.rows:
            mark = "" if r.inside else "  OUTSIDE"
            e = r.estimate
            lines.append(f"{r.name:22} {r.exact:12.6g} {e.value:12.6g} {e.half_width:10.3g} {r.z:7.2f}{mark}")
        return "\n".join(lines)


def _lag1(psi: NDArray[np.float64]) -> float:
    a, b = psi[:-1] - psi.mean(), psi[1:] - psi.mean()
    den = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / den) if den > 0 else math.nan


class _Ratio:
    """Y / X over batches: value and linearised batch values psi_j."""

    def __init__(self, y: NDArray[np.float64], x: NDArray[np.float64], *, empty: float = math.nan) -> None:
        sx = float(x.sum())
        if sx > 0:
            self.value = float(y.sum()) / sx
            self.psi = (y - self.value * x) / (sx / x.size)
        else:
            self.value = empty
            self.psi = np.zeros_like(x)


def _estimate(value: float, psi: NDArray[np.float64], quantile: float) -> Estimate:
    b = psi.size
    se = float(psi.std(ddof=1) / math.sqrt(b)) if math.isfinite(value) else math.nan
    return Estimate(value, quantile * se, se, _lag1(psi))


@dataclass(frozen=True, eq=False)
class SimulationResult:
    """What :func:`model.simulate` measured, with confidence intervals by batch means.

    Attributes
    ----------
    success : bool
        ``status is SimulationStatus.SUCCESS``.
    status : SimulationStatus
    message : str
    stop : StopRule
        Whether the run length was given in events or in simulated seconds.
    level : float
        Confidence level of every ``half_width``.
    batches : int
        Number of batches b (the t quantile has b - 1 degrees of freedom).
    events : int
        Events in the measured part (after the warm-up).
    warmup_events : int
    warmup_s : float
        Length of the discarded warm-up, in events and simulated seconds.
    duration_s : float
        Simulated seconds of the measured part.
    pages_offered, pages_lost, pages_obsolete, pages_served : int
        Page counts of the measured part.
    arrival_rate, p_loss, p_obsolete, p_success, p_starvation, mean_active_robots, mean_queue_length,
    mean_response_served, mean_sojourn_obsolete, mean_sojourn : Estimate
        The measures of :class:`Measures`, same names and meanings (``mean_sojourn_obsolete`` is 0
        when no page became obsolete, as in :class:`Measures`).
    queue_length_distribution : tuple of Estimate
        Fraction of time with i pages in the system, i = 0..K.
    active_robots_distribution : tuple of (int, Estimate)
        Fraction of time in each mode the arrivals define.
    costs : Costs or None
        The coefficients ``cost`` was computed with.
    cost : Estimate or None
        J of eq. (2) from the simulated measures, when costs were given.
    trace : tuple of TraceRow
        The recorded trace (empty unless recording was asked for and the rows were not streamed).
    """

    success: bool
    status: SimulationStatus
    message: str
    stop: StopRule
    level: float
    batches: int
    events: int
    warmup_events: int
    warmup_s: float
    duration_s: float
    pages_offered: int
    pages_lost: int
    pages_obsolete: int
    pages_served: int
    arrival_rate: Estimate
    p_loss: Estimate
    p_obsolete: Estimate
    p_success: Estimate
    p_starvation: Estimate
    mean_active_robots: Estimate
    mean_queue_length: Estimate
    mean_response_served: Estimate
    mean_sojourn_obsolete: Estimate
    mean_sojourn: Estimate
    queue_length_distribution: tuple[Estimate, ...]
    active_robots_distribution: tuple[tuple[int, Estimate], ...]
    costs: Costs | None = None
    cost: Estimate | None = None
    trace: tuple[TraceRow, ...] = field(default=(), repr=False)

    def estimate(self, name: str) -> Estimate:
        """The estimate of a scalar measure (``cost`` included) by name."""
        value = getattr(self, name, None) if name in (*SCALAR_MEASURES, "cost") else None
        if not isinstance(value, Estimate):
            raise InputError("name", f"{name!r} is not an estimated measure of this result",
                             f"use one of {', '.join(self.measure_names)}")
        return value

    @property
    def measure_names(self) -> tuple[str, ...]:
        return SCALAR_MEASURES + (("cost",) if self.cost is not None else ())

    def at_level(self, level: float) -> SimulationResult:
        """The same estimates with half-widths at another confidence level."""
        _check_level(level)
        q = t_quantile(level, self.batches)
        changes: dict[str, Any] = {name: getattr(self, name).rescaled(q) for name in SCALAR_MEASURES}
        changes["queue_length_distribution"] = tuple(e.rescaled(q) for e in self.queue_length_distribution)
        changes["active_robots_distribution"] = tuple((m, e.rescaled(q))
                                                      for m, e in self.active_robots_distribution)
        if self.cost is not None:
            changes["cost"] = self.cost.rescaled(q)
        return replace(self, level=level, **changes)

    def check(self, exact: Measures, *, names: Sequence[str] | None = None, familywise: bool = False
              ) -> Comparison:
        """Whether each exact measure lies inside its simulated interval.

        Parameters
        ----------
        exact : Measures
            E.g. ``model.solve(model, policy).measures``; the exact cost is ``cost_of(exact, costs)``
            with this result's costs.
        names : sequence of str, optional
            Measures to compare; default :attr:`measure_names` (every scalar measure, and ``cost``).
        familywise : bool
            Widen every interval (Bonferroni: level 1 - (1 - level) / m for m measures) so that all m
            exact values lie inside at once with probability at least ``level``. Without it each
            interval has ``level`` on its own, and among many comparisons some will miss by chance.
        """
        chosen = tuple(names) if names is not None else self.measure_names
        result = self.at_level(1.0 - (1.0 - self.level) / len(chosen)) if familywise and chosen else self
        rows = []
        for name in chosen:
            est = result.estimate(name)
            if name == "cost":
                assert self.costs is not None
                x = cost_of(exact, self.costs).total
            else:
                x = float(getattr(exact, name))
            rows.append(ComparisonRow(name, x, est, est.contains(x)))
        return Comparison(result.level, tuple(rows))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (estimates as {estimate, half_width, std_error, lag1_correlation})."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "trace":
                continue
            if isinstance(v, Estimate):
                out[f.name] = v.to_dict()
            elif isinstance(v, enum.Enum):
                out[f.name] = v.name.lower() if isinstance(v, SimulationStatus) else v.value
            elif f.name == "queue_length_distribution":
                out[f.name] = [e.to_dict() for e in v]
            elif f.name == "active_robots_distribution":
                out[f.name] = {str(m): e.to_dict() for m, e in v}
            elif isinstance(v, Costs):
                out[f.name] = v.to_dict()
            else:
                out[f.name] = v
        return out


def linear_ratio_estimate(terms: Sequence[tuple[float, NDArray[np.float64], NDArray[np.float64]]], *,
                          level: float) -> Estimate:
    """sum_k c_k (sum_j Y_kj / sum_j X_kj) with its confidence interval by batch means (the delta method
    of the module docstring applied to the sum: psi_j = sum_k c_k psi_kj).

    Parameters
    ----------
    terms : sequence of (c, Y, X)
        A coefficient and the per-batch totals of a ratio's numerator and denominator (one entry per
        batch, at least 2 batches); terms with c = 0 are left out.
    level : float
        Confidence level of the half-width (t quantile with b - 1 degrees of freedom).

    The cost J of paper 000 eq. (2) is such a sum; :func:`estimate_from_batches` uses this for it, and a
    replay for the cost observed over a trace cut into batches of time.
    """
    _check_level(level)
    kept = [(float(c), np.asarray(y, dtype=float), np.asarray(x, dtype=float)) for c, y, x in terms if c]
    b = kept[0][1].size if kept else 2
    if b < 2 or any(y.size != b or x.size != b for _, y, x in kept):
        raise InputError("terms", f"need the same number (>= 2) of batches in every term, got {b}",
                         "cut the run into at least 2 batches")
    value = 0.0
    psi = np.zeros(b)
    for c, y, x in kept:
        r = _Ratio(y, x)
        value += c * r.value
        psi = psi + c * r.psi
    return _estimate(float(value), psi, t_quantile(level, b))


def _check_level(level: float) -> None:
    if not (isinstance(level, int | float) and 0.0 < level < 1.0):
        raise InputError("level", f"must lie strictly between 0 and 1, got {level!r}",
                         "e.g. 0.99 for 99% confidence intervals")


def estimate_from_batches(batches: NDArray[np.float64], layout: Totals, modes: Sequence[int], *, level: float,
                          stop: StopRule, warmup_events: int, warmup_s: float,
                          costs: Costs | None = None, trace: tuple[TraceRow, ...] = ()) -> SimulationResult:
    """The result from per-batch totals ``batches`` (shape (b, layout.size), rows = batches)."""
    Z = np.asarray(batches, dtype=float)
    b = Z.shape[0]
    if b < 2:
        raise InputError("batches", f"needs at least 2 batches, got {b}", "use 20 to 50 batches")
    L = layout
    q = t_quantile(level, b)
    T = Z[:, L.TIME]
    offered = Z[:, L.OFFERED]
    qt = Z[:, L.QUEUE_TIME:L.mode_time]
    mt = Z[:, L.mode_time:]
    soj = Z[:, L.SOJOURN_SERVED] + Z[:, L.SOJOURN_OBSOLETE]
    ratios = {
        "arrival_rate": _Ratio(offered, T),
        "p_loss": _Ratio(Z[:, L.LOST], offered),
        "p_obsolete": _Ratio(Z[:, L.OBSOLETE], offered),
        "p_success": _Ratio(Z[:, L.SERVED], offered),
        "p_starvation": _Ratio(qt[:, 0], T),
        "mean_active_robots": _Ratio(mt @ np.arange(mt.shape[1], dtype=float), T),
        "mean_queue_length": _Ratio(qt @ np.arange(qt.shape[1], dtype=float), T),
        "mean_response_served": _Ratio(Z[:, L.SOJOURN_SERVED], Z[:, L.SERVED]),
        "mean_sojourn_obsolete": _Ratio(Z[:, L.SOJOURN_OBSOLETE], Z[:, L.OBSOLETE], empty=0.0),
        "mean_sojourn": _Ratio(soj, offered),
    }
    est = {name: _estimate(r.value, r.psi, q) for name, r in ratios.items()}
    dist = tuple(_estimate(r.value, r.psi, q) for r in (_Ratio(qt[:, i], T) for i in range(qt.shape[1])))
    by_mode = tuple((m, _estimate(r.value, r.psi, q)) for m, r in ((m, _Ratio(mt[:, m], T)) for m in modes))
    cost = None
    if costs is not None:
        # J = c_loss lost/T + c_obs obsolete/T + a V^(1) + c_rob N_act + c_star P_star (eq. (2))
        cost = linear_ratio_estimate([
            (costs.loss, Z[:, L.LOST], T), (costs.obsolescence, Z[:, L.OBSOLETE], T),
            (costs.response, Z[:, L.SOJOURN_SERVED], Z[:, L.SERVED]),
            (costs.robot, mt @ np.arange(mt.shape[1], dtype=float), T), (costs.starvation, qt[:, 0], T)],
            level=level)
    undefined = [n for n, e in est.items() if not math.isfinite(e.value)]
    status = SimulationStatus.UNDEFINED if undefined else SimulationStatus.SUCCESS
    message = STATUS_MESSAGES[status] + (f": {', '.join(undefined)}" if undefined else "")
    tot = Z.sum(axis=0)
    return SimulationResult(
        success=status is SimulationStatus.SUCCESS, status=status, message=message, stop=stop, level=level,
        batches=b, events=int(tot[L.EVENTS]), warmup_events=warmup_events, warmup_s=warmup_s,
        duration_s=float(tot[L.TIME]), pages_offered=int(tot[L.OFFERED]), pages_lost=int(tot[L.LOST]),
        pages_obsolete=int(tot[L.OBSOLETE]), pages_served=int(tot[L.SERVED]),
        queue_length_distribution=dist, active_robots_distribution=by_mode, costs=costs, cost=cost,
        trace=trace, **est)
