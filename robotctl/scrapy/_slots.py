"""What a robot is in Scrapy: a share of the crawl's concurrent downloads.

The crawl's ``CONCURRENT_REQUESTS`` = C download slots are split among N robots as evenly as they go:
slot j (0-based) belongs to robot ``j * N // C + 1``, so with C = 8 and N = 3 robots 1, 2, 3 own 3, 3
and 2 slots. With the robots of a set A active, the downloader may run the slots of A at once::

    concurrency(A) = sum of the slots of the robots in A          (C when every robot is active)

A request that reaches the downloader takes the lowest free slot of an active robot (any free slot if
the active robots' slots are all taken, which happens just after a park while the downloads of parked
robots finish) and gives it back when it leaves; its delivery is reported in that robot's name. No
Scrapy here: the extension calls these methods from Scrapy's signals.
"""

from __future__ import annotations

from collections.abc import Iterable


class RobotSlots:
    """C download slots owned by N robots (see the module docstring).

    Parameters
    ----------
    robots : int
        N >= 1.
    concurrency : int
        C >= N.
    """

    def __init__(self, robots: int, concurrency: int) -> None:
        if robots < 1 or concurrency < robots:
            raise ValueError(f"need 1 <= robots <= concurrency, got robots={robots}, concurrency={concurrency}")
        self.robots = robots
        self.concurrency = concurrency
        #: owner[j]: the robot (1..N) that owns slot j
        self.owner = tuple(j * robots // concurrency + 1 for j in range(concurrency))
        self._busy: list[bool] = [False] * concurrency
        self._active: frozenset[int] = frozenset(range(1, robots + 1))

    def slots_of(self, robot: int) -> int:
        """How many download slots robot ``robot`` (1..N) owns."""
        return sum(1 for o in self.owner if o == robot)

    def set_active(self, robots: Iterable[int]) -> int:
        """Make the robots in ``robots`` (1..N) the active ones; returns the concurrency they allow."""
        active = frozenset(robots)
        bad = [r for r in active if not 1 <= r <= self.robots]
        if bad:
            raise ValueError(f"robots must lie in 1..{self.robots}, got {sorted(bad)}")
        self._active = active
        return self.allowed

    @property
    def active(self) -> frozenset[int]:
        return self._active

    @property
    def allowed(self) -> int:
        """Downloads the active robots may run at once (0 when every robot is parked)."""
        return sum(1 for o in self.owner if o in self._active)

    @property
    def busy(self) -> int:
        """Slots taken by downloads in flight."""
        return sum(self._busy)

    def acquire(self) -> int | None:
        """Take a slot for a request reaching the downloader; returns its slot index, or None if all C are
        taken (the downloader never runs more than C at once, so only a caller that misses a release sees
        it)."""
        free = [j for j in range(self.concurrency) if not self._busy[j]]
        if not free:
            return None
        preferred = [j for j in free if self.owner[j] in self._active]
        j = (preferred or free)[0]
        self._busy[j] = True
        return j

    def release(self, slot: int) -> None:
        """Give back a slot taken by :meth:`acquire`."""
        self._busy[slot] = False
