"""The pushback gate in a crawl: :class:`~robotctl.scrapy._pushback.Pushback`'s rules applied to Scrapy's requests.

:class:`PushbackGate` is what :class:`~robotctl.scrapy.PushbackMiddleware` awaits for every request
(:meth:`PushbackGate.admit`), what the extension tells when a request leaves the downloader
(:meth:`PushbackGate.release`) and when a response comes back (:meth:`PushbackGate.answer`). It keeps the
requests waiting for their download slot (an :class:`asyncio.Event` per slot, set when the slot may admit
more), the marks a request carries while it is in flight (``request.meta``: its slot, when it was
admitted and how many were then in flight), and the requests held and their waits. The rules themselves
(holds, caps, ceilings, slow start, the probe budget) are :class:`Pushback`'s, which knows nothing of Scrapy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from scrapy.http import Request, Response

from ._pushback import PUSHBACK_STATUSES, Pushback, retry_after_s

LOG = logging.getLogger("robotctl.scrapy")

#: the download slot whose gate admitted the request (until it leaves the downloader)
META_GATE = "robotctl_gate"
#: when the pushback gate admitted the request (monotonic seconds): a refusal of a request sent before the
#: slot's last back-off does not back off again (robotctl.scrapy._pushback)
META_SENT = "robotctl_sent"
#: the slot's downloads in flight when the gate admitted the request, itself included: a refusal of it puts
#: the slot's ceiling there, not at the requests admitted after it
META_RANK = "robotctl_rank"


class PushbackGate:
    """See the module docstring.

    Parameters
    ----------
    pushback : Pushback
        The rules, per download slot.
    slot_key : callable
        A request's download slot (Scrapy's ``engine.downloader.get_slot_key``), or None while the crawl
        has no engine: the request then passes ungated.
    retry_enabled, retry_times : bool, int
        Scrapy's ``RETRY_ENABLED`` and ``RETRY_TIMES``: which request is on its last try.
    log_extra : callable
        The ``extra`` of the gate's log lines (the spider's).
    """

    def __init__(self, pushback: Pushback, slot_key: Callable[[Request], str | None], *, retry_enabled: bool = True,
                 retry_times: int = 2, log_extra: Callable[[], dict[str, Any]] = dict) -> None:
        self.pushback = pushback
        self.slot_key = slot_key
        self.retry_enabled = retry_enabled
        self.retry_times = retry_times
        self.log_extra = log_extra
        #: requests pass ungated unless the gate is open (from the spider's opening to its closing)
        self.open = False
        self.held = 0
        self.held_seconds = 0.0
        self._wakeups: dict[str, asyncio.Event] = {}

    async def admit(self, request: Request) -> None:
        """Return when ``request`` may go to its server (Scrapy's retries included): never before the slot's
        ``Retry-After``, never beyond its cap. The request counts in its slot's flight until
        :meth:`release`."""
        if META_GATE in request.meta:
            return
        key = self.slot_key(request)
        if key is None:
            return
        last_try = self.last_try(request)
        started = None
        while self.open:
            now = time.monotonic()
            wait = self.pushback.admit(key, now, last_try=last_try)
            if wait == 0.0:
                request.meta[META_GATE] = key
                request.meta[META_SENT] = now
                request.meta[META_RANK] = self.pushback.in_flight(key)
                if started is not None:
                    self.held += 1
                    self.held_seconds += now - started
                return
            if started is None:
                started = now
            event = self._wakeups.setdefault(key, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(None if math.isinf(wait) else wait):
                    await event.wait()

    def release(self, request: Request) -> None:
        """``request`` left the downloader (or never reached it): its slot may admit another."""
        key = request.meta.pop(META_GATE, None)
        if key is not None:
            self.pushback.release(key)
            self._wake(key)

    def answer(self, response: Response, request: Request) -> None:
        """A response from the downloader, retried ones included: a 429/503 holds and backs off its slot, any
        other may raise its cap (slow start, a probe)."""
        key = request.meta.get(META_GATE) or self.slot_key(request)
        if key is None:
            return
        header = response.headers.get(b"Retry-After") if response.status in PUSHBACK_STATUSES else None
        wait = retry_after_s(header, time.time())
        if self.pushback.answer(key, response.status, time.monotonic(), wait, sent_at=request.meta.get(META_SENT),
                                sent_in_flight=request.meta.get(META_RANK)):
            st = self.pushback.slots[key]
            LOG.debug("robotctl: download slot %s: cap %s, ceiling %s, held %.1f s (HTTP %d)", key, st.cap,
                      st.ceiling, max(st.hold_until - time.monotonic(), 0.0), response.status,
                      extra=self.log_extra())
            self._wake(key)

    def last_try(self, request: Request) -> bool:
        """Would Scrapy's RetryMiddleware give ``request`` up if it were refused?"""
        if not self.retry_enabled or request.meta.get("dont_retry", False):
            return True
        most = request.meta.get("max_retry_times", self.retry_times)
        return bool(request.meta.get("retry_times", 0) >= most)

    def close(self) -> None:
        """The spider closed: every waiting request goes on, and later ones pass ungated."""
        self.open = False
        for event in self._wakeups.values():
            event.set()
        self._wakeups.clear()

    def _wake(self, key: str) -> None:
        event = self._wakeups.pop(key, None)
        if event is not None:
            event.set()
