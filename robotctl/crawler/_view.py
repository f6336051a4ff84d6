"""The demo's live view: a block redrawn in place on a terminal, periodic plain lines when piped.

On a terminal the block is redrawn with two control sequences (cursor up, clear to the end); when the
stream is not a terminal nothing but printable text and newlines is written, one line every
``interval_s``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TextIO


def compact_levels(levels: tuple[int, ...] | list[int], *, longest: int = 13) -> str:
    """r(0..K) as written in the model file when short, else run-length coded: ``16x14,1x37`` is 16 robots
    at queue lengths 0..13 and 1 robot at 14..50."""
    if len(levels) <= longest:
        return ",".join(map(str, levels))
    runs: list[list[int]] = []
    for r in levels:
        if runs and runs[-1][0] == r:
            runs[-1][1] += 1
        else:
            runs.append([r, 1])
    return ",".join(f"{r}x{n}" for r, n in runs)


@dataclass(frozen=True)
class ViewState:
    """One look at a running crawl."""

    label: str
    t: float
    duration: float
    measuring: bool
    queue: int
    capacity: int
    agent_queue: int | None
    active: int
    robots: int
    policy: str
    thresholds: str
    policy_source: str
    observed: dict[str, float]
    predicted: dict[str, float] | None
    cost: float
    predicted_cost: float | None
    indexed: int
    fetched: int
    parks: int
    resumes: int


def _f(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}f}"


def _bar(i: int, k: int, width: int = 16) -> str:
    n = 0 if k <= 0 else round(width * min(i, k) / k)
    return "#" * n + "." * (width - n)


MEASURES = (("p_loss", "P_loss"), ("p_obsolete", "P_obs"), ("p_starvation", "P_star"),
            ("mean_active_robots", "N_act"), ("mean_response_served", "V"))


class LiveView:
    """Shows :class:`ViewState` s.

    Parameters
    ----------
    stream : TextIO
    interactive : bool, optional
        Redraw in place; default: ``stream.isatty()``.
    interval_s : float
        Time between plain lines when not interactive.
    enabled : bool
        False shows nothing.
    """

    def __init__(self, stream: TextIO, *, interactive: bool | None = None, interval_s: float = 5.0,
                 enabled: bool = True) -> None:
        self.stream = stream
        self.interactive = stream.isatty() if interactive is None else interactive
        self.interval_s = interval_s
        self.enabled = enabled
        self._drawn = 0
        self._last_line = -math.inf

    def note(self, text: str) -> None:
        """A line of its own (a run starting, a result)."""
        if not self.enabled:
            return
        self._clear()
        self.stream.write(text + "\n")
        self.stream.flush()

    def _clear(self) -> None:
        if self.interactive and self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def update(self, s: ViewState, *, force: bool = False) -> None:
        if not self.enabled:
            return
        if self.interactive:
            self._clear()
            lines = self.block(s)
            self.stream.write("\n".join(lines) + "\n")
            self._drawn = len(lines)
            self.stream.flush()
            return
        now = time.monotonic()
        if force or now - self._last_line >= self.interval_s:
            self._last_line = now
            self.stream.write(self.line(s) + "\n")
            self.stream.flush()

    def finish(self) -> None:
        """Leave the last block on screen."""
        self._drawn = 0

    @staticmethod
    def line(s: ViewState) -> str:
        o, p = s.observed, s.predicted or {}
        meas = " ".join(f"{name}={_f(o.get(key))}/{_f(p.get(key))}" for key, name in MEASURES[:3])
        agent = "-" if s.agent_queue is None else str(s.agent_queue)
        return (f"[{s.label} {s.t:5.1f}/{s.duration:g}s{'' if s.measuring else ' warm-up'}] "
                f"queue {s.queue}/{s.capacity} (agent {agent}) active {s.active}/{s.robots} "
                f"r(i)={s.policy} | observed/predicted {meas} | cost {_f(s.cost, 2)}"
                f"/{_f(s.predicted_cost, 2)} | indexed {s.indexed} parks {s.parks} resumes {s.resumes}")

    @staticmethod
    def block(s: ViewState) -> list[str]:
        o, p = s.observed, s.predicted or {}
        phase = "measuring" if s.measuring else "warm-up"
        agent = "-" if s.agent_queue is None else str(s.agent_queue)
        rows = [f"{s.label}: {s.t:5.1f} s of {s.duration:g} s ({phase})",
                f"  queue   [{_bar(s.queue, s.capacity)}] {s.queue}/{s.capacity}   agent's view {agent}",
                f"  robots  [{_bar(s.active, s.robots, s.robots * 4)}] {s.active}/{s.robots} active   "
                f"parks {s.parks}  resumes {s.resumes}",
                f"  policy  r(i) = {s.policy}   thresholds {s.thresholds or '-'}   ({s.policy_source})",
                f"  {'':14s}{'observed':>10s}{'predicted':>11s}"]
        for key, name in MEASURES:
            rows.append(f"  {name:14s}{_f(o.get(key)):>10s}{_f(p.get(key)):>11s}")
        rows.append(f"  {'cost J':14s}{_f(s.cost, 2):>10s}{_f(s.predicted_cost, 2):>11s}   "
                    f"fetched {s.fetched}  indexed {s.indexed}")
        return rows
