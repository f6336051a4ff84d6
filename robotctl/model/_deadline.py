"""A deterministic useful life (a deadline: "a page not indexed within d seconds is worthless").

The chain of paper 000 needs a phase-type useful life, so a deadline d enters it as the Erlang law of k
phases and mean d (the phase-type law of k phases closest to a constant: its coefficient of variation
1/sqrt(k) is the least any law of k phases has, Aldous and Shepp 1987). The model file says
``obsolescence: {deadline: d, phases: k}`` (``phases`` defaults to ``DEFAULT_PHASES``); the model keeps d
(``QueueModel.deadline``) so that the simulator draws the true deadline and measures what the Erlang law
costs, and the error of the law itself is stated in closed form:

- coefficient of variation 1/sqrt(k) (a deadline has 0);
- mean absolute deviation from d, E|X - d| = 2 d k^k e^(-k) / k!  (the Wasserstein distance between the
  Erlang law and the point mass at d; about d sqrt(2 / (pi k)) for large k).

The measures are not Lipschitz in that distance with a known constant, so this is the law's error, not a
bound on the cost's: the independent check is the simulator with the true deadline
(tests/model/test_deadline.py; bench/scale.py), and the exact chain where it is small. The chain grows
like k^(K-1), so large k is affordable only at small K; three phases is what the ordered-head ladder
reaches at fleet scale. (FIFO queues with constant patience, M/G/1+D, have exact solutions through the
virtual waiting time, Baccelli, Boyer and Hebuterne 1984, and, for Poisson modes and exponential indexing,
through :mod:`model._fifo`'s product form, whose survival function a constant would enter as a step; neither
covers batch Markovian arrivals with phase-type service, the model here.)
"""

from __future__ import annotations

import math

from robotctl._errors import InputError

from ._ph import PH

#: Erlang phases standing for a deadline when the model file does not say.
DEFAULT_PHASES = 3
#: More phases than this make even K = 5 a chain of a million states.
MAX_PHASES = 64
#: the same two bounds under the names robotctl.model exports
DEADLINE_PHASES_DEFAULT, DEADLINE_PHASES_MAX = DEFAULT_PHASES, MAX_PHASES


def deadline_law(deadline: float, phases: int = DEFAULT_PHASES, *, field: str = "model.obsolescence") -> PH:
    """The Erlang law of ``phases`` phases and mean ``deadline`` (module docstring)."""
    if isinstance(deadline, bool) or not isinstance(deadline, int | float) or not math.isfinite(deadline) \
            or deadline <= 0:
        raise InputError(f"{field}.deadline", f"must be a positive number of seconds, got {deadline!r}",
                         "e.g. deadline: 10")
    if isinstance(phases, bool) or not isinstance(phases, int) or not 1 <= phases <= MAX_PHASES:
        raise InputError(f"{field}.phases", f"must be a whole number 1..{MAX_PHASES}, got {phases!r}",
                         "e.g. phases: 3 (the chain grows like phases^(K-1))")
    return PH.erlang(phases, phases / float(deadline), field=field)


def deadline_error(deadline: float, phases: int) -> float:
    """E|X - d| for X Erlang with ``phases`` phases and mean d: 2 d k^k e^(-k) / k!."""
    k = phases
    return 2.0 * deadline * math.exp(k * math.log(k) - k - math.lgamma(k + 1))
