"""Queue-length policies and multi-threshold policies (paper 000, Section 2).

A queue-length policy runs r(i) robots when i pages are in the system, i = 0..K (``robots_at_level``);
any modes of the model, in any order. The paper's threshold policies are the non-increasing ones
(:class:`ThresholdPolicy`, the canonical form, docs/ARCHITECTURE.md "Policy"): the paper's form lists modes
m_1 > m_2 > ... > m_n and thresholds j_1 <= ... <= j_{n-1}: with j_0 = -1 and j_n = K, level i in
(j_{r-1}, j_r] runs m_r robots. The first mode is used at level 0 and the last at level K; intermediate
modes may be empty (j_{r-1} = j_r), which is how the paper's Table 1 lists e.g. "3 or 2 or 1 | 2,2".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from robotctl._errors import InputError


@dataclass(frozen=True)
class QueueLengthPolicy:
    """r(i) robots active when i pages are in the system, i = 0..K, in any order.

    Attributes
    ----------
    robots_at_level : tuple of int
        Length K + 1, entries >= 0.
    """

    robots_at_level: tuple[int, ...]

    def __post_init__(self) -> None:
        r = tuple(self.robots_at_level)
        if len(r) < 2:
            raise InputError("policy", f"needs K + 1 >= 2 entries (levels 0..K), got {len(r)}",
                             "give one robot count per queue length 0..K, e.g. 3,3,3,1,1,1 for K = 5")
        for i, x in enumerate(r):
            if isinstance(x, bool) or not isinstance(x, int) or x < 0:
                raise InputError(f"policy[{i}]", f"must be a whole number of robots >= 0, got {x!r}",
                                 "use integers")
        object.__setattr__(self, "robots_at_level", r)

    @classmethod
    def parse(cls, text: str) -> QueueLengthPolicy:
        """From "3,3,3,1,1,1"."""
        try:
            values = tuple(int(x) for x in text.replace(" ", "").split(",") if x != "")
        except ValueError as exc:
            raise InputError("policy", f"{text!r} is not a comma-separated list of integers",
                             "write e.g. 3,3,3,1,1,1 (robots at queue length 0..K)") from exc
        return cls(values)

    @classmethod
    def static(cls, robots: int, capacity: int) -> QueueLengthPolicy:
        return cls((robots,) * (capacity + 1))

    @property
    def capacity(self) -> int:
        return len(self.robots_at_level) - 1

    @property
    def modes(self) -> tuple[int, ...]:
        """The modes in use, largest first."""
        return tuple(sorted(set(self.robots_at_level), reverse=True))

    @property
    def is_monotone(self) -> bool:
        """True when r(i) never increases with i (a threshold policy)."""
        r = self.robots_at_level
        return all(a >= b for a, b in zip(r, r[1:]))

    def as_threshold(self) -> ThresholdPolicy:
        """The same policy as a :class:`ThresholdPolicy` (InputError if it is not monotone)."""
        return ThresholdPolicy(self.robots_at_level)

    def __str__(self) -> str:
        return ",".join(str(x) for x in self.robots_at_level)


@dataclass(frozen=True)
class ThresholdPolicy(QueueLengthPolicy):
    """A non-increasing queue-length policy: r(i) robots active when i pages are in the system.

    Attributes
    ----------
    robots_at_level : tuple of int
        Length K + 1, non-increasing, entries >= 0.
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        r = self.robots_at_level
        for i in range(1, len(r)):
            if r[i] > r[i - 1]:
                raise InputError(f"policy[{i}]", f"is {r[i]} > {r[i - 1]} at level {i - 1}: not non-increasing",
                                 "a longer queue must never have more active robots")

    @classmethod
    def parse(cls, text: str) -> ThresholdPolicy:
        """From "3,3,3,1,1,1"."""
        return cls(QueueLengthPolicy.parse(text).robots_at_level)

    @classmethod
    def static(cls, robots: int, capacity: int) -> ThresholdPolicy:
        return cls((robots,) * (capacity + 1))

    @classmethod
    def from_thresholds(cls, modes: Sequence[int], thresholds: Sequence[int], capacity: int) -> ThresholdPolicy:
        """From the paper's form: modes m_1 > ... > m_n and thresholds j_1 <= ... <= j_{n-1} in 0..K-1."""
        ms = list(modes)
        js = list(thresholds)
        if not ms or any(a <= b for a, b in zip(ms, ms[1:])):
            raise InputError("modes", f"must be strictly decreasing, got {ms}", "list modes largest first, e.g. 3,1")
        if len(js) != len(ms) - 1:
            raise InputError("thresholds", f"{len(ms)} modes need {len(ms) - 1} thresholds, got {len(js)}",
                             "give one threshold between each pair of consecutive modes")
        bounds = [-1, *js, capacity]
        for a, b in zip(bounds, bounds[1:]):
            if b < a:
                raise InputError("thresholds", f"must be non-decreasing, got {js}", "sort them")
        if js and (js[0] < 0 or js[-1] > capacity - 1):
            raise InputError("thresholds", f"must lie in 0..K-1 = 0..{capacity - 1}, got {js}",
                             "the first mode runs at level 0 and the last at level K")
        r = []
        for i in range(capacity + 1):
            n = next(k for k in range(len(ms)) if i <= bounds[k + 1])
            r.append(ms[n])
        return cls(tuple(r))

    # -- views ----------------------------------------------------------------------------------
    @property
    def thresholds(self) -> tuple[int, ...]:
        """The paper's thresholds for the modes in use: j_r = last level running mode m_r or more."""
        return self.thresholds_for(self.modes)

    def thresholds_for(self, modes: Sequence[int]) -> tuple[int, ...]:
        """Thresholds for a superset of the modes in use (unused intermediate modes get an empty range)."""
        ms = list(modes)
        if set(self.robots_at_level) - set(ms):
            raise InputError("modes", f"{ms} does not include every mode the policy uses {self.modes}",
                             "list all used modes")
        r = self.robots_at_level
        if ms[0] != r[0] or ms[-1] != r[-1]:
            raise InputError("modes", f"{ms} must start with r(0) = {r[0]} and end with r(K) = {r[-1]}",
                             "the largest listed mode runs at level 0 and the smallest at level K")
        return tuple(max(i for i in range(len(r)) if r[i] >= m) for m in ms[:-1])

    def __str__(self) -> str:
        return QueueLengthPolicy.__str__(self)
