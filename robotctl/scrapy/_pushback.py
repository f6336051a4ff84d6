"""Servers push back, robotctl listens: per download slot, a cap on the downloads a server gets.

A 429 or 503 response (``PUSHBACK_STATUSES``) halves the slot's cap (at least 1) and holds the slot until
its ``Retry-After`` (seconds or an HTTP date; ``min_hold_s`` without one) has passed: nothing is sent to
it before. After the hold, each ``probe_s`` of answers without pushback raises the cap by one, until it
reaches the crawl's concurrency, where the slot is uncapped again. No Scrapy here: the extension feeds
:meth:`Pushback.answer` from ``response_downloaded`` and applies :meth:`Pushback.cap` and
:meth:`Pushback.hold_until` to the downloader's slots.
"""

from __future__ import annotations

import email.utils
import math
from dataclasses import dataclass

PUSHBACK_STATUSES = frozenset({429, 503})


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
    """One download slot's cap (None: uncapped), hold, and the time of its last change."""

    cap: int | None = None
    hold_until: float = 0.0
    changed_at: float = 0.0
    pushbacks: int = 0


class Pushback:
    """Caps per download slot (see the module docstring).

    Parameters
    ----------
    concurrency : int
        The crawl's ``CONCURRENT_REQUESTS``: a cap that reaches it is lifted.
    probe_s : float
        Answers without pushback for this long raise a cap by one.
    min_hold_s : float
        The hold after a pushback without ``Retry-After``.
    """

    def __init__(self, concurrency: int, *, probe_s: float = 2.0, min_hold_s: float = 1.0) -> None:
        self.concurrency = concurrency
        self.probe_s = probe_s
        self.min_hold_s = min_hold_s
        self.slots: dict[str, SlotState] = {}
        self.pushbacks = 0

    def answer(self, slot: str, status: int, in_flight: int, now: float, retry_after: float | None = None) -> bool:
        """A response from ``slot`` at ``now`` with ``in_flight`` downloads of that slot running; True when
        its cap or hold changed."""
        st = self.slots.get(slot)
        if status in PUSHBACK_STATUSES:
            st = self.slots.setdefault(slot, SlotState())
            base = st.cap if st.cap is not None else max(in_flight, 1)
            st.cap = max(1, min(base, max(in_flight, 1)) // 2)
            st.hold_until = max(st.hold_until, now + (retry_after if retry_after is not None else self.min_hold_s))
            st.changed_at = now
            st.pushbacks += 1
            self.pushbacks += 1
            return True
        if st is None or st.cap is None or now < st.hold_until or now - st.changed_at < self.probe_s:
            return False
        st.cap += 1
        st.changed_at = now
        if st.cap >= self.concurrency:
            st.cap = None
        return True

    def cap(self, slot: str) -> int | None:
        st = self.slots.get(slot)
        return None if st is None else st.cap

    def hold_until(self, slot: str) -> float:
        st = self.slots.get(slot)
        return 0.0 if st is None else st.hold_until
