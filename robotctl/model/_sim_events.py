"""Event kinds, trace rows and the controller interface of the discrete-event simulator.

The engine (:mod:`model._sim_engine`) knows three kinds of event, :class:`EventKind`. When two of
them fall at the same instant (an event of probability zero with continuous laws, but it must still
be decided the same way every time) they are taken in the order of their values:

1. ``SERVICE_COMPLETION``: the page in service leaves first, so that a simultaneous arrival sees
   the freed place and the next page starts its service at once;
2. ``OBSOLESCENCE``: then waiting pages whose useful life ended leave; among several at the same
   instant the one that arrived first leaves first;
3. ``BMAP_TRANSITION``: then the directing process of the arrivals jumps (with or without a batch).

After every event the controller is asked for the number of active robots; a change takes effect at
the same instant, before the next event. A :data:`Controller` sees the queue length after the event;
a :class:`StateFeedback` controller also sees the event's kind, the pages it brought, the queue length
before it and the arrival phase (the state of an MDP policy such as paper 001's).

What the simulator records is a trace in the format of docs/ARCHITECTURE.md, one immutable :class:`TraceRow` per
line, of the kinds :class:`TraceKind` (whose values are the trace format's event names).
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable
from typing import NamedTuple


class EventKind(enum.IntEnum):
    """What happens at an event of the engine; the values are the tie-breaking order."""

    #: the page in service finishes its PH(beta, S) indexing time and leaves served
    SERVICE_COMPLETION = 1
    #: a waiting page's PH(gamma, Gamma) useful life ends and it leaves obsolete
    OBSOLESCENCE = 2
    #: the directing phase nu of the arrivals jumps, by D_0 (no pages) or D_k (a batch of k pages)
    BMAP_TRANSITION = 3


class TraceKind(enum.Enum):
    """The kind of a trace row; the values are the trace format's event names (docs/ARCHITECTURE.md)."""

    #: a robot delivers a batch (``pages`` = pages offered, lost ones included)
    DELIVERY = "delivery"
    #: pages of a delivery that found no room (``pages`` = how many), same instant as the delivery
    LOSS = "loss"
    #: a page finished indexing (``service_s`` = its service time)
    COMPLETION = "completion"
    #: a waiting page became obsolete and left
    OBSOLETE = "obsolete"
    #: a robot was told to stop (``robot`` = its rank)
    PARK = "park"
    #: a robot was told to deliver again (``robot`` = its rank)
    RESUME = "resume"


class TraceRow(NamedTuple):
    """One line of a simulated trace.

    Attributes
    ----------
    t : float
        Simulated time in seconds (the run starts empty at 0; warm-up included).
    kind : TraceKind
    robot : int or None
        Rank of the robot (1 parks last): for deliveries, an active robot drawn uniformly (the BMAP of a
        mode describes the robots together, so the attribution is synthetic); for park and resume, the
        robot concerned; ``None`` otherwise.
    pages : int
        Pages concerned (1 for completions and obsolete drops).
    service_s : float or None
        Service time of a completed page.
    active : int
        Robots active when the event happened, before any park or resume it triggers; for park and
        resume rows, the count after the change.
    """

    t: float
    kind: TraceKind
    robot: int | None
    pages: int
    service_s: float | None
    active: int


#: A controller: ``controller(queue_length, active_robots, t) -> active_robots``. It is called after
#: every event with the state after the event (``active_robots`` is the count in force, 0 before the
#: first call at t = 0) and returns the number of robots to keep active, which must be a mode that the
#: model's arrivals define.
Controller = Callable[[int, int, float], int]


class StateFeedback(abc.ABC):
    """A controller that decides at every event from the event and the observable state.

    Paper 001's policies act at deliveries (keep or park the robot that delivered) and at service
    completions (wake one more robot), from the queue length *before* the event and the number of
    robots active: a :data:`Controller`, which sees only the state after the event, cannot tell a
    delivery to a full buffer from one that filled it. The service and obsolescence phases are not
    observable (the engine draws whole service times and useful lives), as in a real crawler.
    """

    @abc.abstractmethod
    def initial(self) -> int:
        """Active robots at t = 0, with an empty system."""

    @abc.abstractmethod
    def decide(self, kind: EventKind, pages: int, before: int, after: int, active: int, phase: int,
               t: float) -> int:
        """Active robots after an event.

        Parameters
        ----------
        kind : EventKind
        pages : int
            Pages the event brought (offered, lost ones included): the batch size of a delivery, 0 for a
            phase change of the arrivals without pages and for the other kinds.
        before, after : int
            Pages in the system before and after the event.
        active : int
            Robots active when the event happened.
        phase : int
            Phase nu of the arrival process after the event.
        t : float
            Simulated time.
        """
