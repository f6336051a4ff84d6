"""Servers push back, robotctl listens: per download slot, a gate that every request to a server passes.

Every request of a download slot passes :meth:`Pushback.admit` before it reaches Scrapy's downloader
(the add-on's :class:`~robotctl.scrapy.PushbackMiddleware`, retried requests included) and
:meth:`Pushback.release` when it leaves it; every response is an :meth:`Pushback.answer`.

- A server not seen before starts in **slow start** when ``start_cap`` is set (the add-on's
  ``ROBOTCTL_PUSHBACK_START``, 2): its cap is ``start_cap`` and grows by one per answer without pushback,
  up to twice the cap the slot last filled, so it doubles per round trip while the crawl uses it (TCP's
  slow start, RFC 5681), until the first pushback or the crawl's concurrency.
- A 429 or 503 response (``PUSHBACK_STATUSES``) **holds** the slot until its ``Retry-After`` (seconds or
  an HTTP date; ``min_hold_s`` without one): no request is admitted before, Scrapy's retries included.
- It also **backs off**: the slot's cap, the downloads it may have in flight, becomes half of the downloads
  in flight when the refused request was sent (``sent_in_flight``; at least 1, and at most those in flight
  when the answer came); and the fewest such downloads that ever drew pushback is remembered as the slot's
  **ceiling**. A refused probe of the ceiling itself (the cap raised to it) backs
  off to just below it, where the slot ran a whole probe without pushback. **Once per overload**: a refusal
  of a request sent before the last back-off (``sent_at``) answers the load that back-off already answered,
  so it holds the slot (its ``Retry-After``) but lowers neither the cap nor the ceiling, as TCP halves its
  window once per window of losses (unless the cap was probed up since: then it backs off). Without it, a
  burst of 16 requests to a server that takes 6 drew three refusals in a row and halved the cap three times,
  11 in flight to 5, 2, then 1 (bench/scrapy_compare.py's cold crawl).
- After the hold the cap is **probed up slowly**: each ``probe_s`` (from the hold's end or the last step)
  of answers without pushback, in which the slot's downloads reached the cap, raises it by one (a cap the
  crawl does not use is not raised).
  Reaching the ceiling takes longer, ``probe_s * 2**k`` after the k-th pushback at or below it, and at
  least ``h (1 - b) / b`` after a hold of h seconds with the **probe budget** b (``probe_budget``; the
  add-on's ``ROBOTCTL_PUSHBACK_PROBE_BUDGET``, 0.1), so that refused probes hold the slot at most a share
  b of the time; downloads at the ceiling for that long without pushback raise the ceiling by one. At
  the crawl's concurrency the slot is uncapped again.
- A request on its **last try** (Scrapy would give it up after one more refusal) is never the one that
  probes: it is admitted only below the ceiling, or alone.

No Scrapy here: :class:`~robotctl.scrapy.RobotctlExtension` calls these methods (tests/scrapy/test_pushback.py
drives them directly).
"""

from __future__ import annotations

import email.utils
import math
from dataclasses import dataclass

PUSHBACK_STATUSES = frozenset({429, 503})
#: the slowest probe towards the ceiling: ``probe_s * 2**MAX_DOUBLINGS``
MAX_DOUBLINGS = 6


def retry_after_s(value: str | bytes | None, now_wall: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date), or None."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - now_wall
    if not math.isfinite(seconds):
        return None
    return max(0.0, min(seconds, 3600.0))


@dataclass
class SlotState:
    """One download slot: its cap (None: uncapped), hold, ceiling, the requests it has in flight, and the
    time of its last change.

    Attributes
    ----------
    cap : int or None
        Most downloads in flight; None: no cap of robotctl's (Scrapy's own limits apply).
    hold_until : float
        Nothing is admitted before this time (the last pushback's ``Retry-After``).
    ceiling : int or None
        The fewest downloads in flight that drew a pushback (the server tolerates fewer).
    ceiling_pushbacks : int
        Pushbacks at or below the ceiling: a probe to the ceiling waits ``probe_s * 2**ceiling_pushbacks``.
    in_flight : int
        Requests admitted and not yet released.
    peak : int
        The most requests in flight since the last change (since the last pushback: admitted after it).
    backed_off_at : float
        When the cap last went down (-inf: never); refusals of requests sent before it do not lower it again.
    slow_start : bool
        The cap grows per answer (no pushback yet).
    full_at : int
        The cap when the slot last had that many in flight: slow start grows the cap up to twice it.
    last_hold_s : float
        The last pushback's hold, which the probe budget spaces the probes of the ceiling by.
    """

    cap: int | None = None
    hold_until: float = 0.0
    changed_at: float = 0.0
    pushbacks: int = 0
    ceiling: int | None = None
    ceiling_pushbacks: int = 0
    in_flight: int = 0
    peak: int = 0
    backed_off_at: float = -math.inf
    slow_start: bool = False
    full_at: int = 0
    last_hold_s: float = 0.0


class Pushback:
    """Gates per download slot (see the module docstring).

    Parameters
    ----------
    concurrency : int
        The crawl's ``CONCURRENT_REQUESTS``: a cap that reaches it is lifted.
    probe_s : float
        Answers without pushback for this long raise a cap by one.
    min_hold_s : float
        The hold after a pushback without ``Retry-After``.
    start_cap : int or None
        Slow start's first cap for a slot not seen before (None: uncapped until its first pushback).
    probe_budget : float
        Most share of a slot's time held by refused probes of its ceiling (1.0: no such bound).
    """

    def __init__(self, concurrency: int, *, probe_s: float = 2.0, min_hold_s: float = 1.0,
                 start_cap: int | None = None, probe_budget: float = 1.0) -> None:
        if not 0.0 < probe_budget <= 1.0:
            raise ValueError(f"probe_budget must be above 0 and at most 1, got {probe_budget!r}")
        self.concurrency = concurrency
        self.probe_s = probe_s
        self.min_hold_s = min_hold_s
        self.start_cap = start_cap
        self.probe_budget = probe_budget
        self.slots: dict[str, SlotState] = {}
        self.pushbacks = 0

    def admit(self, slot: str, now: float, *, last_try: bool = False) -> float:
        """May a request go to ``slot`` at ``now``? 0.0: yes, and it counts as in flight until
        :meth:`release`; else the seconds to wait before asking again (``math.inf``: until a request of
        the slot is released). ``last_try``: Scrapy gives the request up if it is refused once more."""
        st = self.slots.get(slot)
        if st is None:
            st = self.slots[slot] = self._new_slot(now)
        elif now < st.hold_until:
            return st.hold_until - now
        limit = st.cap
        if last_try and st.ceiling is not None:
            safe = st.ceiling - 1
            limit = safe if limit is None else min(limit, safe)
        if limit is not None and st.in_flight >= limit and not (last_try and st.in_flight == 0):
            return math.inf  # (a last try may always go alone)
        st.in_flight += 1
        st.peak = max(st.peak, st.in_flight)
        if st.cap is not None and st.in_flight >= st.cap:
            st.full_at = st.cap
        return 0.0

    def release(self, slot: str) -> None:
        """A request admitted by :meth:`admit` left the downloader."""
        st = self.slots.get(slot)
        if st is not None and st.in_flight > 0:
            st.in_flight -= 1

    def answer(self, slot: str, status: int, now: float, retry_after: float | None = None, *,
               sent_at: float | None = None, sent_in_flight: int | None = None) -> bool:
        """A response from ``slot`` at ``now`` (its request still in flight: :meth:`release` follows); True
        when the slot's cap or hold changed. ``sent_at``: when its request was admitted (None: unknown, every
        refusal backs off); a refusal of a request sent before the last back-off only holds the slot,
        unless the cap was probed up since. ``sent_in_flight``: the slot's downloads in flight when it was
        admitted, itself included (None: unknown, those in flight now): a refusal says the server took
        fewer than that, which requests admitted after it do not change (a burst of 8 whose 7th was refused
        put the ceiling at 8, and the true one was found by a second refused probe about 10 s later)."""
        st = self.slots.get(slot)
        if status in PUSHBACK_STATUSES:
            if st is None:
                st = self.slots[slot] = self._new_slot(now)
            st.slow_start = False
            st.last_hold_s = retry_after if retry_after is not None else self.min_hold_s
            hold = now + (retry_after if retry_after is not None else self.min_hold_s)
            st.pushbacks += 1
            self.pushbacks += 1
            if sent_at is not None and sent_at < st.backed_off_at == st.changed_at:  # answered, not probed since
                st.hold_until = max(st.hold_until, hold)
                return True
            in_flight = max(st.in_flight if sent_in_flight is None else min(st.in_flight, sent_in_flight), 1)
            base = st.cap if st.cap is not None else in_flight
            if st.ceiling is not None and in_flight >= st.ceiling and st.cap is not None and st.cap >= st.ceiling:
                # a probe of the known limit refused: back to just below it, where the slot ran a whole
                # probe without pushback (halving it, 7 to 3, cost the crawl a quarter of its downloads
                # until the cap crept back, at every probe)
                st.cap = max(1, st.ceiling - 1)
            else:
                st.cap = max(1, min(base, in_flight) // 2)
            if st.ceiling is None or in_flight < st.ceiling:
                st.ceiling = in_flight
                st.ceiling_pushbacks = 1
            elif in_flight == st.ceiling:
                st.ceiling_pushbacks += 1
            st.hold_until = max(st.hold_until, hold)
            st.changed_at = st.backed_off_at = now
            st.peak = 0
            return True
        if st is not None and st.slow_start and st.cap is not None and st.cap < 2 * st.full_at:
            st.cap += 1
            st.changed_at = now
            if st.cap >= self.concurrency:
                st.cap = None
                st.slow_start = False
            return True
        if st is None or st.cap is None or now - max(st.changed_at, st.hold_until) < self._probe_wait(st) \
                or st.peak < st.cap:
            return False
        if st.ceiling is not None and st.peak >= st.ceiling:
            st.ceiling += 1  # downloads at the ceiling for a whole probe: the server takes more now
        st.cap += 1
        st.changed_at = now
        st.peak = st.in_flight
        if st.cap >= self.concurrency:
            st.cap = st.ceiling = None
            st.ceiling_pushbacks = 0
        return True

    def _probe_wait(self, st: SlotState) -> float:
        """How long a cap must hold before the next step up: ``probe_s``, longer at the ceiling."""
        assert st.cap is not None
        if st.ceiling is not None and st.cap + 1 >= st.ceiling:
            wait = self.probe_s * 2.0 ** min(st.ceiling_pushbacks, MAX_DOUBLINGS)
            return max(wait, st.last_hold_s * (1.0 - self.probe_budget) / self.probe_budget)
        return self.probe_s

    def _new_slot(self, now: float) -> SlotState:
        """A server not seen before: uncapped, or at ``start_cap`` in slow start."""
        if self.start_cap is None or self.start_cap >= self.concurrency:
            return SlotState()
        return SlotState(cap=max(1, self.start_cap), changed_at=now, slow_start=True)

    def cap(self, slot: str) -> int | None:
        st = self.slots.get(slot)
        return None if st is None else st.cap

    def hold_until(self, slot: str) -> float:
        st = self.slots.get(slot)
        return 0.0 if st is None else st.hold_until

    def in_flight(self, slot: str) -> int:
        st = self.slots.get(slot)
        return 0 if st is None else st.in_flight
