"""The engine of the discrete-event simulator: the state of one run of the controlled queue of paper 000
and the loop that advances it.

The system (paper 000, Section 2; docs/ARCHITECTURE.md "Model semantics"): with l robots active, pages arrive by
the BMAP D_k^(l), whose directing phase nu carries over when l changes; one server indexes the page at
the head in a PH(beta, S) time; every *waiting* page has its own PH(gamma, Gamma) useful life and leaves
obsolete when it ends (the page in service cannot become obsolete); FIFO; at most K pages in the system,
the one in service included; a batch of k arriving to i pages keeps min(k, K - i) pages
(:attr:`Admission.PARTIAL`) or all or none (:attr:`Admission.REJECT_BATCH`); the number of active robots
is whatever the controller returns after each event (for a policy, r(i)).

How the entities of a discrete-event simulator map onto this loop (ciw's ``Individual``, ``Node``,
``ArrivalNode``, ``Simulation``), flattened for speed:

- *page*: an integer id; a waiting page is an entry ``id -> arrival time`` of the dict ``waiting``, its
  place in line an entry of the deque ``fifo``, and its end of useful life an entry ``(deadline, id)``
  of the heap ``expiry``. A page's useful life is drawn whole when it arrives; since the phases of its
  obsolescence chain evolve whether or not anything else happens, "expires while waiting" is exactly
  "the drawn life ends before its service starts". Pages that start service drop out of ``waiting``;
  their stale entries in ``fifo`` and ``expiry`` are skipped lazily, and the heap's top is always a
  waiting page.
- *indexer* (the station): the arrival time, start and end of the page in service.
- *BMAP source*: the phase nu and the date of its next jump (:class:`model._sim_sources.BmapSource`).
  By the memoryless property the date is redrawn when the mode changes.
- *engine*: three clocks (next jump, service end, earliest expiry) compared directly. Only the
  expiries need a heap (``heapq``); the arrival and service clocks are single numbers, which saves a
  push and a pop per event. Ties are broken in the fixed order of :class:`EventKind`.

Time-weighted and per-page totals accumulate in plain Python numbers; :meth:`Simulation.totals`
returns them as one vector (layout :class:`Totals`), and the statistics (:mod:`model._sim_stats`)
take differences of such snapshots.
"""

from __future__ import annotations

import math
import sys
from bisect import bisect_right
from collections import deque
from heapq import heappop, heappush

import numpy as np
from numpy.typing import NDArray

from robotctl._errors import InputError

from ._model import Admission, QueueModel
from ._policy import QueueLengthPolicy
from ._sim_events import Controller, EventKind, StateFeedback, TraceKind, TraceRow
from ._sim_sources import BmapSource, exponential_stream, ph_stream, uniform_stream

INF = math.inf
#: "No limit" for the number of events of one call of :meth:`Simulation.advance`.
NO_LIMIT = sys.maxsize

#: Child streams of the run's SeedSequence, one per source of randomness; adding a stream at the end
#: never shifts the others.
STREAMS = ("bmap_sojourn", "bmap_jump", "service", "useful_life", "initial_phase", "trace_robot",
           "in_service_life")


class Totals:
    """Index layout of the vector returned by :meth:`Simulation.totals` (cumulative since t = 0).

    Scalars first, then the time spent at each queue length 0..K, then the time spent in each mode
    0..max_mode (``mode_time + l`` is mode l).
    """

    TIME = 0  #: simulated seconds
    EVENTS = 1  #: events processed
    OFFERED = 2  #: pages offered (lost ones included)
    LOST = 3  #: pages that found no room
    OBSOLETE = 4  #: pages that left obsolete
    SERVED = 5  #: pages whose service completed
    SOJOURN_SERVED = 6  #: sum of the sojourn times of served pages
    SOJOURN_OBSOLETE = 7  #: sum of the sojourn times of obsolete pages
    QUEUE_TIME = 8  #: first of the K + 1 queue-length times

    def __init__(self, capacity: int, max_mode: int) -> None:
        self.capacity = capacity
        self.max_mode = max_mode
        self.mode_time = self.QUEUE_TIME + capacity + 1
        self.size = self.mode_time + max_mode + 1


#: What drives a run: a policy r(i), a function of the state after each event, or a feedback controller.
AnyController = QueueLengthPolicy | Controller | StateFeedback


def _as_controller(model: QueueModel, controller: AnyController
                   ) -> tuple[list[int] | None, Controller | None, StateFeedback | None]:
    if isinstance(controller, QueueLengthPolicy):
        model.check_policy(controller)
        return list(controller.robots_at_level), None, None
    if isinstance(controller, StateFeedback):
        return None, None, controller
    if not callable(controller):
        raise InputError("controller",
                         f"is a {type(controller).__name__}, neither a QueueLengthPolicy, a StateFeedback "
                         "nor a callable", "pass a policy (ThresholdPolicy or QueueLengthPolicy) or a function "
                         "(queue_length, active_robots, t) -> active_robots")
    return None, controller, None


class Simulation:
    """One run of the controlled queue, advanced by :meth:`advance`.

    Parameters
    ----------
    model : QueueModel
    controller : QueueLengthPolicy, Controller or StateFeedback
        A policy r(0..K), a callable ``(queue_length, active_robots, t) -> active_robots`` asked after
        every event (see :data:`model._sim_events.Controller`), or a :class:`StateFeedback` asked after
        every event with the event and the state before it.
    rng : numpy.random.Generator
        Spawns one child stream per source (:data:`STREAMS`).
    record : bool
        Keep a :class:`TraceRow` per delivery, loss, completion, obsolete drop, park and resume (collect
        them with :meth:`take_rows`). Off, the loop only tests one local flag per page event. Recording
        draws from its own stream, so the run itself is the same with and without it.
    obsolete_in_service : bool
        A deliberately *wrong* model for tests that show the comparison with the exact solution has
        teeth: the page in service also gets a fresh useful life and leaves obsolete if it ends first.
    """

    def __init__(self, model: QueueModel, controller: AnyController,
                 rng: np.random.Generator, *, record: bool = False,
                 obsolete_in_service: bool = False) -> None:
        self.model = model
        self._table, self._ctrl, self._feedback = _as_controller(model, controller)
        source = BmapSource.from_arrivals(model.arrivals)
        self._offsets = source.offsets
        self._rows_tab = source.rows
        children = rng.spawn(len(STREAMS))
        streams = dict(zip(STREAMS, children, strict=True))
        self._next_exp = exponential_stream(streams["bmap_sojourn"]).__next__
        self._next_u = uniform_stream(streams["bmap_jump"]).__next__
        self._next_svc = ph_stream(model.service, streams["service"]).__next__
        obs = model.obsolescence
        self._has_obs = obs is not None
        self._fault = bool(obsolete_in_service) and obs is not None
        next_life = ph_stream(obs, streams["useful_life"]).__next__ if obs is not None else None
        self._next_fault_life = (ph_stream(obs, streams["in_service_life"]).__next__
                                 if obs is not None and self._fault else None)
        if model.deadline is not None:  # the true deterministic useful life, not the Erlang law of the chain
            deadline = float(model.deadline)
            next_life = self._next_fault_life = lambda: deadline
            if not self._fault:
                self._next_fault_life = None
        self._next_life_fn = next_life
        self._next_robot_u = uniform_stream(streams["trace_robot"], 1024).__next__
        self.record = record
        self._rows: list[TraceRow] = []
        self.layout = Totals(model.capacity, max(model.modes))
        # state
        self.t = 0.0
        self.n = 0
        self.events = 0
        self._qtime = [0.0] * (model.capacity + 1)
        self._mtime = [0.0] * (self.layout.max_mode + 1)
        self._counts = [0, 0, 0, 0]  # offered, lost, obsolete, served
        self._sojourn = [0.0, 0.0]  # served, obsolete
        self._waiting: dict[int, float] = {}
        self._fifo: deque[int] = deque()
        self._expiry: list[tuple[float, int]] = []
        self._pid = 0
        self._t_svc = INF
        self._svc_arr = 0.0
        self._svc_start = 0.0
        self._svc_obs = False
        # initial mode and phase
        if self._table is not None:
            mode = self._table[0]
        elif self._feedback is not None:
            mode = self._checked_mode(self._feedback.initial())
        else:
            mode = self._checked_mode(self._call(0, 0, 0.0))
        self.mode = mode
        bmap = model.arrivals[mode]
        init = streams["initial_phase"]
        self.nu = int(init.choice(bmap.order, p=bmap.stationary))
        self._t_bm = self._next_exp() * self._rows_tab[self._offsets[mode] + self.nu][0]
        if record and mode:
            for r in range(1, mode + 1):
                self._rows.append(TraceRow(0.0, TraceKind.RESUME, r, 1, None, mode))

    # -- helpers off the hot path ---------------------------------------------------------------
    def _call(self, n: int, mode: int, t: float) -> int:
        assert self._ctrl is not None
        return self._ctrl(n, mode, t)

    def _checked_mode(self, new: object) -> int:
        if isinstance(new, bool) or not isinstance(new, int | np.integer) or int(new) not in self._offsets:
            raise InputError("controller",
                             f"returned {new!r} active robots, which is not a mode of the arrivals "
                             f"(defined: {sorted(self._offsets)})",
                             "return one of the modes listed under model.arrivals")
        return int(new)

    def _record_switch(self, t: float, old: int, new: int) -> None:
        rows = self._rows
        if new < old:
            for r in range(old, new, -1):
                rows.append(TraceRow(t, TraceKind.PARK, r, 1, None, new))
        else:
            for r in range(old + 1, new + 1):
                rows.append(TraceRow(t, TraceKind.RESUME, r, 1, None, new))

    def take_rows(self) -> tuple[TraceRow, ...]:
        """The trace rows recorded since the last call (and forget them)."""
        rows = tuple(self._rows)
        self._rows.clear()
        return rows

    def totals(self) -> NDArray[np.float64]:
        """Cumulative totals since t = 0 in the layout of :class:`Totals`."""
        L = self.layout
        z = np.zeros(L.size)
        z[L.TIME] = self.t
        z[L.EVENTS] = self.events
        z[L.OFFERED:L.SERVED + 1] = self._counts
        z[L.SOJOURN_SERVED] = self._sojourn[0]
        z[L.SOJOURN_OBSOLETE] = self._sojourn[1]
        z[L.QUEUE_TIME:L.mode_time] = self._qtime
        z[L.mode_time:] = self._mtime
        return z

    # -- the hot loop ---------------------------------------------------------------------------
    def advance(self, max_events: int = NO_LIMIT, t_end: float = INF) -> int:
        """Process events until ``max_events`` more have happened or the next one would fall after
        ``t_end`` (then the clock stops at ``t_end``). Returns the number of events processed."""
        # Everything the loop touches is a local variable (attribute and global look-ups cost more).
        t = self.t
        n = self.n
        mode = self.mode
        nu = self.nu
        t_bm = self._t_bm
        t_svc = self._t_svc
        expiry = self._expiry
        t_exp = expiry[0][0] if expiry else INF
        svc_arr = self._svc_arr
        svc_start = self._svc_start
        svc_obs = self._svc_obs
        pid = self._pid
        waiting = self._waiting
        fifo = self._fifo
        popleft = fifo.popleft
        enqueue = fifo.append
        qtime = self._qtime
        mtime = self._mtime
        t_mode = t  # time spent in the current mode is added to mtime when it changes and on return
        offered, lost, obsolete, served = self._counts
        soj_s, soj_o = self._sojourn
        tab = self._rows_tab
        offsets = self._offsets
        off = offsets[mode]
        row = tab[off + nu]
        next_exp = self._next_exp
        next_u = self._next_u
        next_svc = self._next_svc
        next_life = self._next_life_fn
        has_obs = self._has_obs
        fault = self._fault
        next_fault_life = self._next_fault_life
        K = self.model.capacity
        partial = self.model.admission is Admission.PARTIAL
        table = self._table
        ctrl = self._ctrl
        fb = self._feedback.decide if self._feedback is not None else None
        BMAP, SERVICE, OBSOLESCENCE = EventKind.BMAP_TRANSITION, EventKind.SERVICE_COMPLETION, EventKind.OBSOLESCENCE
        rec = self.record
        put = self._rows.append
        mk = tuple.__new__  # builds a TraceRow without the Python-level NamedTuple.__new__ (twice as fast)
        next_robot_u = self._next_robot_u
        DELIVERY, LOSS, COMPLETION, OBSOLETE = TraceKind.DELIVERY, TraceKind.LOSS, TraceKind.COMPLETION, \
            TraceKind.OBSOLETE
        done = max_events  # events processed; set to ev when the clock stops at t_end first
        for ev in range(max_events):
            # Tie-breaking (EventKind): completion, then obsolescence, then the BMAP jump.
            if t_bm < t_svc and t_bm < t_exp:
                # -- BMAP_TRANSITION ---------------------------------------------------------------
                if t_bm > t_end:
                    done = ev
                    break
                qtime[n] += t_bm - t
                t = t_bm
                k, nu = row[2][bisect_right(row[1], next_u())]
                if k:
                    offered += k
                    free = K - n
                    if k <= free:
                        a = k
                    else:
                        a = free if partial else 0
                        lost += k - a
                    if rec:
                        put(mk(TraceRow, (t, DELIVERY, 1 + int(next_robot_u() * mode) if mode else None, k,
                                          None, mode)))
                        if a < k:
                            put(mk(TraceRow, (t, LOSS, None, k - a, None, mode)))
                    if a:
                        if n == 0:
                            svc_arr = svc_start = t
                            t_svc = t + next_svc()
                            if fault:
                                life = t + next_fault_life()  # type: ignore[misc]
                                if life < t_svc:
                                    t_svc, svc_obs = life, True
                            n = 1
                            a -= 1
                        if a:
                            n += a
                            if has_obs:
                                for _ in range(a):
                                    pid += 1
                                    waiting[pid] = t
                                    enqueue(pid)
                                    d = t + next_life()  # type: ignore[misc]
                                    heappush(expiry, (d, pid))
                                    if d < t_exp:
                                        t_exp = d
                            else:
                                for _ in range(a):
                                    pid += 1
                                    waiting[pid] = t
                                    enqueue(pid)
                if table is not None:
                    new = table[n]
                elif fb is None:
                    new = ctrl(n, mode, t)  # type: ignore[misc]
                else:
                    new = fb(BMAP, k, K - free if k else n, n, mode, nu, t)
                if new != mode:
                    new = self._checked_mode(new) if table is None else new
                    if rec:
                        self._record_switch(t, mode, new)
                    mtime[mode] += t - t_mode
                    t_mode = t
                    mode = new
                    off = offsets[mode]
                row = tab[off + nu]
                t_bm = t + next_exp() * row[0]
            elif t_svc <= t_exp:
                # -- SERVICE_COMPLETION ------------------------------------------------------------
                if t_svc > t_end:
                    done = ev
                    break
                qtime[n] += t_svc - t
                t = t_svc
                n -= 1
                if svc_obs:
                    svc_obs = False
                    obsolete += 1
                    soj_o += t - svc_arr
                    if rec:
                        put(mk(TraceRow, (t, OBSOLETE, None, 1, None, mode)))
                else:
                    served += 1
                    soj_s += t - svc_arr
                    if rec:
                        put(mk(TraceRow, (t, COMPLETION, None, 1, t - svc_start, mode)))
                if n:
                    p = popleft()
                    while p not in waiting:
                        p = popleft()
                    svc_arr = waiting.pop(p)
                    svc_start = t
                    t_svc = t + next_svc()
                    if fault:
                        life = t + next_fault_life()  # type: ignore[misc]
                        if life < t_svc:
                            t_svc, svc_obs = life, True
                    if expiry:
                        while expiry and expiry[0][1] not in waiting:
                            heappop(expiry)
                        t_exp = expiry[0][0] if expiry else INF
                else:
                    t_svc = INF
                    if fifo:
                        fifo.clear()
                if table is not None:
                    new = table[n]
                elif fb is None:
                    new = ctrl(n, mode, t)  # type: ignore[misc]
                else:
                    new = fb(SERVICE, 0, n + 1, n, mode, nu, t)
                if new != mode:
                    new = self._checked_mode(new) if table is None else new
                    if rec:
                        self._record_switch(t, mode, new)
                    mtime[mode] += t - t_mode
                    t_mode = t
                    mode = new
                    off = offsets[mode]
                    row = tab[off + nu]
                    t_bm = t + next_exp() * row[0]
            else:
                # -- OBSOLESCENCE ------------------------------------------------------------------
                if t_exp > t_end:
                    done = ev
                    break
                qtime[n] += t_exp - t
                t = t_exp
                p = heappop(expiry)[1]
                obsolete += 1
                soj_o += t - waiting.pop(p)
                n -= 1
                while expiry and expiry[0][1] not in waiting:
                    heappop(expiry)
                t_exp = expiry[0][0] if expiry else INF
                if rec:
                    put(mk(TraceRow, (t, OBSOLETE, None, 1, None, mode)))
                if table is not None:
                    new = table[n]
                elif fb is None:
                    new = ctrl(n, mode, t)  # type: ignore[misc]
                else:
                    new = fb(OBSOLESCENCE, 0, n + 1, n, mode, nu, t)
                if new != mode:
                    new = self._checked_mode(new) if table is None else new
                    if rec:
                        self._record_switch(t, mode, new)
                    mtime[mode] += t - t_mode
                    t_mode = t
                    mode = new
                    off = offsets[mode]
                    row = tab[off + nu]
                    t_bm = t + next_exp() * row[0]
        if done < max_events and t_end > t:
            # stopped by time: the clock runs on to t_end with nothing happening
            qtime[n] += t_end - t
            t = t_end
        mtime[mode] += t - t_mode
        self.t = t
        self.n = n
        self.mode = mode
        self.nu = nu
        self._t_bm = t_bm
        self._t_svc = t_svc
        self._svc_arr = svc_arr
        self._svc_start = svc_start
        self._svc_obs = svc_obs
        self._pid = pid
        self._counts = [offered, lost, obsolete, served]
        self._sojourn = [soj_s, soj_o]
        self.events += done
        return done
