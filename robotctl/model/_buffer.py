"""How the indexing buffer sheds pages: obsolescence timers (paper 000), renovation (paper 004) and RED.

Three mechanisms, which :class:`BufferPolicy` combines freely:

- **obsolescence timers** (paper 000): every waiting page leaves as obsolete when its own PH useful
  life ends. Without timers the useful life still runs, but only *marks* the page stale: it stays in
  line and is indexed (or dropped) stale.
- **renovation** (paper 004, Section 1): at every service completion, after the served page has left,
  a random number J of pages, P(J = j) = q_j, is removed from the head of the queue (the oldest
  pages). When J is not below the number w of waiting pages the conflict is resolved by
  :class:`Conflict`: Option 1 removes w - 1 pages (one is always left to serve), Option 2 removes
  none.
- **RED** (random early detection, by queue length): a page that arrives to i pages in the system is
  dropped with probability d_i before admission. A batch is thinned page by page with the d_i of the
  level it finds; what survives is admitted as the model's admission rule says. For single arrivals
  this is RED on the instantaneous queue length.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from robotctl._errors import InputError

#: Tolerance on sum(q) = 1.
SUM_TOL = 1e-9


class Conflict(enum.IntEnum):
    """What renovation does when J, the number of pages to remove, is not below the number w of
    pages waiting (paper 004, Section 1). The values are the paper's option numbers."""

    #: Option 1: remove w - 1 pages, so that one page is always left to serve
    KEEP_ONE = 1
    #: Option 2: remove nothing
    SKIP = 2


def _probabilities(field: str, values: Sequence[float], hint: str) -> tuple[float, ...]:
    try:
        out = tuple(float(x) for x in values)
    except (TypeError, ValueError) as exc:
        raise InputError(field, f"is not a list of numbers ({exc})", hint) from exc
    if not out:
        raise InputError(field, "is empty", hint)
    for j, x in enumerate(out):
        if not (math.isfinite(x) and 0.0 <= x <= 1.0):
            raise InputError(f"{field}[{j}]", f"must be a probability in [0, 1], got {x!r}", hint)
    return out


@dataclass(frozen=True)
class Renovation:
    """Renovation at service completions (paper 004, Section 1).

    Attributes
    ----------
    q : tuple of float
        q_0, ..., q_n: P(J = j), the law of the number of pages to remove from the head of the queue at
        a completion; non-negative, summing to one. With K places in the system (N = K - 1 waiting
        places) at most K entries matter, q_0..q_N.
    conflict : Conflict
        Option 1 (keep one page) or Option 2 (remove nothing) when J >= the number waiting.
    """

    q: tuple[float, ...]
    conflict: Conflict = Conflict.KEEP_ONE

    def __post_init__(self) -> None:
        hint = "give P(J = 0), P(J = 1), ... as e.g. 0.5,0.3,0.2 (they must sum to 1)"
        q = _probabilities("q", self.q, hint)
        total = math.fsum(q)
        if abs(total - 1.0) > SUM_TOL:
            raise InputError("q", f"sums to {total:.12g}, not 1", hint)
        try:
            conflict = Conflict(self.conflict)
        except ValueError as exc:
            raise InputError("option", f"must be 1 (keep one page) or 2 (remove nothing), got {self.conflict!r}",
                             "paper 004 defines Option 1 and Option 2") from exc
        object.__setattr__(self, "q", tuple(x / total for x in q))
        object.__setattr__(self, "conflict", conflict)

    @classmethod
    def none(cls) -> Renovation:
        """q_0 = 1: nothing is ever removed."""
        return cls((1.0,))

    def check_places(self, places: int, field: str = "q") -> None:
        """Raise unless q has at most ``places`` + 1 entries (q_0..q_N for N waiting places)."""
        if len(self.q) > places + 1:
            raise InputError(field, f"has {len(self.q)} entries but {places} waiting places allow at most "
                             f"{places + 1} (q_0..q_{places})",
                             "drop the trailing entries: no more pages than are waiting can be removed")

    def tail(self, j: int) -> float:
        """Q_j = q_j + q_{j+1} + ... (Q_0 = 1)."""
        return math.fsum(self.q[j:]) if j < len(self.q) else 0.0

    def drop_law(self, waiting: int) -> NDArray[np.float64]:
        """P(j pages are removed), j = 0..w-1, when w = ``waiting`` pages wait after a completion
        (length max(w, 1): with w = 0 nothing is removed).

        Option 1: j < w with q_j, and w - 1 also with Q_w. Option 2: j < w with q_j, and 0 also with
        Q_w (paper 004, Section 1; both leave at least one page when w >= 1).
        """
        if waiting <= 0:
            return np.ones(1)
        out = np.zeros(waiting)
        head = self.q[:waiting]
        out[:len(head)] = head
        tail = self.tail(waiting)
        out[waiting - 1 if self.conflict is Conflict.KEEP_ONE else 0] += tail
        return out

    def mean_drop(self, waiting: int) -> float:
        """E[pages removed] when ``waiting`` pages wait after a completion."""
        law = self.drop_law(waiting)
        return float(np.arange(law.size) @ law)

    @property
    def is_trivial(self) -> bool:
        """True when nothing is ever removed (q_0 = 1)."""
        return self.q[0] == 1.0

    def __str__(self) -> str:
        return f"q = {','.join(f'{x:.4g}' for x in self.q)}, option {int(self.conflict)}"


@dataclass(frozen=True)
class RedDrop:
    """Random early detection by queue length: an arriving page that finds i pages in the system is
    dropped with probability d_i.

    Attributes
    ----------
    probabilities : tuple of float
        d_0, ..., d_{K-1} for a system of K places (at level K arrivals are blocked anyway).
    parameters : tuple of (int, int, float) or None
        (min_th, max_th, max_p) when built by :meth:`linear`.
    """

    probabilities: tuple[float, ...]
    parameters: tuple[int, int, float] | None = None

    def __post_init__(self) -> None:
        d = _probabilities("red", self.probabilities, "give one drop probability per queue length 0..K-1")
        object.__setattr__(self, "probabilities", d)

    @classmethod
    def linear(cls, min_th: int, max_th: int, max_p: float, capacity: int) -> RedDrop:
        """Floyd and Jacobson's RED on the instantaneous queue length i (pages in the system):
        d_i = 0 for i < min_th, max_p (i - min_th) / (max_th - min_th) for min_th <= i < max_th, and
        1 for i >= max_th; i = 0..K-1 (with max_th = K the drop probability never reaches 1).
        """
        if isinstance(min_th, bool) or not isinstance(min_th, int) or not 0 <= min_th < capacity:
            raise InputError("red.min_th", f"must be a whole queue length in 0..K-1 = 0..{capacity - 1}, got "
                             f"{min_th!r}", "RED starts dropping above min_th pages")
        if isinstance(max_th, bool) or not isinstance(max_th, int) or not min_th < max_th <= capacity:
            raise InputError("red.max_th", f"must be a whole queue length in min_th+1..K = {min_th + 1}..{capacity}, "
                             f"got {max_th!r}", "RED drops every page from max_th pages on")
        if not (isinstance(max_p, int | float) and math.isfinite(max_p) and 0.0 <= max_p <= 1.0):
            raise InputError("red.max_p", f"must be a probability in [0, 1], got {max_p!r}",
                             "the drop probability just below max_th")
        d = [0.0 if i < min_th else 1.0 if i >= max_th else max_p * (i - min_th) / (max_th - min_th)
             for i in range(capacity)]
        return cls(tuple(d), (min_th, max_th, float(max_p)))

    def check_capacity(self, capacity: int) -> None:
        if len(self.probabilities) != capacity:
            raise InputError("red", f"has {len(self.probabilities)} drop probabilities but K = {capacity} needs "
                             f"{capacity} (queue lengths 0..K-1)", "give one per queue length below K")

    def at(self, level: int) -> float:
        return self.probabilities[level] if level < len(self.probabilities) else 1.0

    def __str__(self) -> str:
        if self.parameters is not None:
            lo, hi, p = self.parameters
            return f"min_th {lo}, max_th {hi}, max_p {p:.3g}"
        return "d = " + ",".join(f"{x:.3g}" for x in self.probabilities)


@dataclass(frozen=True)
class BufferPolicy:
    """The buffer's rules for shedding pages; any combination of the three mechanisms.

    Attributes
    ----------
    timers : bool
        Waiting pages leave obsolete when their useful life ends (paper 000). False: the useful life only
        marks the page stale.
    renovation : Renovation or None
    red : RedDrop or None
    """

    timers: bool = True
    renovation: Renovation | None = None
    red: RedDrop | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.timers, bool):
            raise InputError("timers", f"must be true or false, got {self.timers!r}", "")
        if self.renovation is not None and not isinstance(self.renovation, Renovation):
            raise InputError("renovation", f"must be a Renovation, got {type(self.renovation).__name__}", "")
        if self.red is not None and not isinstance(self.red, RedDrop):
            raise InputError("red", f"must be a RedDrop, got {type(self.red).__name__}", "")

    def check_capacity(self, capacity: int) -> None:
        """Raise unless the parameters fit a system of ``capacity`` places."""
        if self.renovation is not None:
            self.renovation.check_places(capacity - 1)
        if self.red is not None:
            self.red.check_capacity(capacity)

    def __str__(self) -> str:
        parts = ["obsolescence timers" if self.timers else "no timers"]
        if self.renovation is not None:
            parts.append(f"renovation ({self.renovation})")
        if self.red is not None:
            parts.append(f"RED ({self.red})")
        return ", ".join(parts)
