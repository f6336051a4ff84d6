"""The controlled queue BMAP/PH/1/K with PH obsolescence of waiting pages (paper 000, Section 2) and the
operator's cost coefficients (eq. (2))."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, fields

import numpy as np

from robotctl._errors import InputError

from ._arrivals import ModeArrivals
from ._ph import PH
from ._policy import QueueLengthPolicy


class Admission(enum.Enum):
    """What happens to a batch that does not fit in the free places."""

    #: keep the first pages that fit, lose the rest (paper 000)
    PARTIAL = "partial"
    #: lose the whole batch
    REJECT_BATCH = "reject-batch"

    def admitted(self, batch: int, free: int) -> int:
        """Pages of a batch of ``batch`` admitted when ``free`` places are free."""
        if self is Admission.PARTIAL:
            return min(batch, free)
        return batch if batch <= free else 0


@dataclass(frozen=True, eq=False)
class QueueModel:
    """The system of paper 000.

    Attributes
    ----------
    capacity : int
        K >= 1: pages in the system, the one being indexed included.
    arrivals : ModeArrivals
        D_k^(l) for each mode l (number of active robots).
    service : PH
        (beta, S): indexing time of one page.
    obsolescence : PH or None
        (gamma, Gamma): useful life of each waiting page; ``None`` means pages never go stale.
    admission : Admission
        Partial admission (the paper) or whole-batch rejection.
    deadline : float or None
        When set, the useful life is in truth this constant (seconds) and ``obsolescence`` is the Erlang law
        standing for it in the chain (``model._deadline``); the simulator draws the constant.
    """

    capacity: int
    arrivals: ModeArrivals
    service: PH
    obsolescence: PH | None = None
    admission: Admission = Admission.PARTIAL
    deadline: float | None = None

    def __post_init__(self) -> None:
        if self.deadline is not None and (self.obsolescence is None or not self.deadline > 0):
            raise InputError("model.obsolescence.deadline", f"needs a positive deadline and the law standing for "
                             f"it, got {self.deadline!r}", "write obsolescence: {deadline: 10}")
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int | np.integer) or self.capacity < 1:
            raise InputError("model.capacity", f"must be a whole number >= 1, got {self.capacity!r}",
                             "K counts the pages in the system, the one being indexed included")
        object.__setattr__(self, "capacity", int(self.capacity))

    @property
    def K(self) -> int:
        return self.capacity

    @property
    def modes(self) -> tuple[int, ...]:
        return self.arrivals.modes

    def check_policy(self, policy: QueueLengthPolicy) -> None:
        """Raise InputError unless the policy fits this model (length K+1, known modes)."""
        if policy.capacity != self.capacity:
            raise InputError("policy", f"has {len(policy.robots_at_level)} levels but K = {self.capacity} needs "
                             f"{self.capacity + 1}", "give one robot count per queue length 0..K")
        unknown = sorted(set(policy.robots_at_level) - set(self.modes))
        if unknown:
            raise InputError("policy", f"uses mode(s) {unknown} that the arrivals do not define "
                             f"(defined: {list(self.modes)})", "use defined modes or add them under model.arrivals")


@dataclass(frozen=True)
class Costs:
    """Cost coefficients of eq. (2): J = lambda (c_loss P_loss + c_obs P_obs) + a V^(1) + c_rob N_act
    + c_star P_star, plus c_cmd C where C is the number of park and resume commands per second (one
    per robot parked or resumed; ``command`` = c_cmd, the price of one command). All >= 0."""

    loss: float = 0.0
    obsolescence: float = 0.0
    response: float = 0.0
    robot: float = 0.0
    starvation: float = 0.0
    command: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise InputError(f"costs.{f.name}", f"must be a finite number >= 0, got {v!r}",
                                 "cost coefficients weigh each criterion; use 0 to ignore one")
            object.__setattr__(self, f.name, float(v))

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
