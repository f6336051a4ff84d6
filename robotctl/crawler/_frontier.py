"""The crawl frontier: URLs to fetch, one queue per host, and politeness per host.

Mercator's back end in small: each host has its own FIFO queue and a time before which it must not be
asked again (its crawl delay after the previous page). :meth:`Frontier.next` hands out the URL of the
host that is ready first, waiting until it is; while a caller waits for a host, the host is reserved,
so robots sharing the frontier never hit one host closer together than its delay. Revisits (pages
whose content will change) come back when they are due, ahead of their host's new URLs (keeping the
index fresh comes before growing it), within a budget: at most ``revisit_share`` of the URLs handed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit


def host_key(url: str) -> str:
    """The politeness key of a URL: ``host:port`` as written in it, lower-cased."""
    return urlsplit(url).netloc.lower()


@dataclass
class FrontierStats:
    """Counters of a :class:`Frontier`."""

    added: int = 0
    duplicates: int = 0
    dropped_full: int = 0
    revisits_scheduled: int = 0
    revisits_due: int = 0
    handed_out: int = 0
    revisits_handed_out: int = 0
    requeued: int = 0
    polite_wait_s: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


class Frontier:
    """URLs waiting to be fetched, with per-host politeness.

    Parameters
    ----------
    delay_s : float
        Default time between two pages of one host (a host's robots.txt may ask for more:
        :meth:`set_delay`).
    max_urls : int
        Queued URLs at most; new discoveries beyond it are dropped (counted).
    revisit_share : float
        Revisits are at most this share of the URLs handed out while new URLs wait (a revisit over the
        budget stays due); without a budget, revisits of changing pages would crowd out discovery.
    clock : callable, optional
        Monotonic seconds; the running loop's clock by default.
    """

    def __init__(self, *, delay_s: float, max_urls: int = 200_000, revisit_share: float = 1.0,
                 clock: Callable[[], float] | None = None) -> None:
        self.delay_s = float(delay_s)
        self.max_urls = max_urls
        self.revisit_share = float(revisit_share)
        self._promoted: set[str] = set()
        self._clock = clock
        self._queues: dict[str, deque[str]] = {}
        self._ready_at: dict[str, float] = {}
        self._delay: dict[str, float] = {}
        self._heap: list[tuple[float, int, str]] = []   # hosts with URLs, not reserved
        self._in_heap: set[str] = set()
        self._reserved: set[str] = set()
        self._due: list[tuple[float, int, str]] = []    # revisits not yet due
        self._seen: set[str] = set()
        self._seq = itertools.count()
        self._size = 0
        self._wakeup: asyncio.Event | None = None
        self.stats = FrontierStats()

    def now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def __len__(self) -> int:
        return self._size

    @property
    def pending_revisits(self) -> int:
        return len(self._due)

    def set_delay(self, host: str, delay_s: float) -> None:
        """Politeness delay of one host (e.g. from its robots.txt ``Crawl-delay``), at least the default."""
        self._delay[host] = max(self.delay_s, float(delay_s))

    def delay_of(self, host: str) -> float:
        return self._delay.get(host, self.delay_s)

    def _push_host(self, host: str) -> None:
        if host in self._in_heap or host in self._reserved or not self._queues.get(host):
            return
        heapq.heappush(self._heap, (self._ready_at.get(host, -1e300), next(self._seq), host))
        self._in_heap.add(host)
        if self._wakeup is not None:
            self._wakeup.set()

    def _enqueue(self, url: str, *, front: bool = False) -> None:
        host = host_key(url)
        q = self._queues.get(host)
        if q is None:
            q = self._queues[host] = deque()
        if front:
            q.appendleft(url)
        else:
            q.append(url)
        self._size += 1
        self._push_host(host)

    def add(self, url: str) -> bool:
        """Queue a newly discovered URL; False if it was seen before or the frontier is full."""
        if url in self._seen:
            self.stats.duplicates += 1
            return False
        if self._size >= self.max_urls:
            self.stats.dropped_full += 1
            return False
        self._seen.add(url)
        self.stats.added += 1
        self._enqueue(url)
        return True

    def add_many(self, urls: Iterable[str]) -> int:
        return sum(1 for u in urls if self.add(u))

    def revisit(self, url: str, due: float) -> None:
        """Fetch ``url`` again once the clock reaches ``due`` (its content will have changed by then),
        before the new URLs of its host."""
        heapq.heappush(self._due, (due, next(self._seq), url))
        self.stats.revisits_scheduled += 1
        if self._wakeup is not None:
            self._wakeup.set()

    def requeue(self, url: str) -> None:
        """Give back a URL handed out but not fetched; it is the next one of its host."""
        self.stats.requeued += 1
        self._enqueue(url, front=True)

    def _promote_due(self, now: float) -> None:
        while self._due and self._due[0][0] <= now:
            pending = self.stats.revisits_handed_out + len(self._promoted)
            if self._size and pending >= self.revisit_share * (self.stats.handed_out + 1):
                return  # over the revisit budget while new URLs wait: the revisit stays due
            _, _, url = heapq.heappop(self._due)
            self.stats.revisits_due += 1
            self._promoted.add(url)
            self._enqueue(url, front=True)

    async def next(self) -> str:
        """The next URL to fetch, once its host may be asked again (waits for it)."""
        while True:
            now = self.now()
            self._promote_due(now)
            if self._heap:
                ready, _, host = heapq.heappop(self._heap)
                self._in_heap.discard(host)
                self._reserved.add(host)
                wait = ready - now
                try:
                    if wait > 0:
                        self.stats.polite_wait_s += wait
                        await asyncio.sleep(wait)
                except BaseException:
                    self._reserved.discard(host)
                    self._push_host(host)
                    raise
                self._reserved.discard(host)
                q = self._queues[host]
                url = q.popleft()
                self._size -= 1
                self._ready_at[host] = self.now() + self.delay_of(host)
                self._push_host(host)
                self.stats.handed_out += 1
                if url in self._promoted:
                    self._promoted.discard(url)
                    self.stats.revisits_handed_out += 1
                return url
            if self._wakeup is None or self._wakeup.is_set():
                self._wakeup = asyncio.Event()
            timeout = (self._due[0][0] - now) if self._due else None
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that
            # arrives as the event is set, and a robot being stopped would then run on
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()
