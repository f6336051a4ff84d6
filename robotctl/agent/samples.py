"""The agent's recent samples and counters: :class:`Ring` (fixed-capacity columns of the deliveries and
completions a refit fits) and :class:`Totals` (the counters /metrics exports)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .trace import CompletionLine


class Ring:
    """Fixed-capacity columns, oldest overwritten first; rows are appended in time order.

    ``columns`` names float columns (a missing value is NaN), or maps names to numpy dtypes (integer
    columns hold 0 for a missing value; they are for values that are always given).
    """

    def __init__(self, capacity: int, columns: Sequence[str] | Mapping[str, Any]) -> None:
        self.capacity = capacity
        dtypes = dict(columns) if isinstance(columns, Mapping) else dict.fromkeys(columns, np.float64)
        self.cols: dict[str, NDArray[Any]] = {
            c: np.full(capacity, np.nan if np.dtype(dt).kind == "f" else 0, dtype=dt) for c, dt in dtypes.items()}
        self._missing = {c: (math.nan if arr.dtype.kind == "f" else 0) for c, arr in self.cols.items()}
        self._scratch: dict[str, NDArray[Any]] = {}
        self.n = 0  # rows ever appended

    def append(self, **row: float) -> None:
        i = self.n % self.capacity
        missing = self._missing
        for c, arr in self.cols.items():
            arr[i] = row.get(c, missing[c])
        self.n += 1

    def extend(self, rows: Mapping[str, Sequence[float] | float], count: int) -> None:
        """Append ``count`` rows given as columns: a sequence of ``count`` values, or one number for every
        row; a column left out is missing in every row."""
        if count <= 0:
            return
        if count >= self.capacity:
            rows = {c: v if isinstance(v, int | float) else v[-self.capacity:] for c, v in rows.items()}
            self.n += count - self.capacity
            count = self.capacity
        start = self.n % self.capacity
        first = min(count, self.capacity - start)
        for c, arr in self.cols.items():
            values = rows.get(c)
            if values is None or isinstance(values, int | float):
                fill = self._missing[c] if values is None else values
                arr[start:start + first] = fill
                arr[: count - first] = fill
            else:
                v = np.asarray(values, dtype=arr.dtype)
                arr[start:start + first] = v[:first]
                arr[: count - first] = v[first:]
        self.n += count

    def __len__(self) -> int:
        return min(self.n, self.capacity)

    def since(self, t0: float, time_col: str = "t", columns: Sequence[str] | None = None, *,
              scratch: bool = False) -> dict[str, NDArray[Any]]:
        """Copies of the rows with ``time_col >= t0``, oldest first (one copy per column: the rows are in
        time order, so the cut is a binary search in each of the ring's two stretches).

        With ``scratch``, the copies are views of buffers the ring keeps for the purpose and overwrites
        at the next such call: no fresh memory (and no page faults) on the event loop. The refit uses
        them; the next refit starts only after the previous one is done with them.
        """
        names = list(self.cols) if columns is None else list(columns)
        size = len(self)
        if size == 0:
            return {c: np.empty(0) for c in names}
        start = self.n % self.capacity if self.n > self.capacity else 0
        t = self.cols[time_col]
        # chronological order: [start:size] then [0:start]
        older, newer = (start, size), (0, start)
        a = older[0] + int(np.searchsorted(t[older[0]:older[1]], t0, side="left"))
        b = newer[0] + int(np.searchsorted(t[newer[0]:newer[1]], t0, side="left"))
        out = {}
        for c in names:
            arr = self.cols[c]
            parts = (arr[a:older[1]], arr[b:newer[1]]) if start else (arr[a:size],)
            if scratch:
                buf = self._scratch.get(c)
                if buf is None:
                    buf = self._scratch[c] = np.empty(self.capacity, dtype=arr.dtype)
                k = 0
                for part in parts:
                    buf[k:k + part.size] = part
                    k += part.size
                out[c] = buf[:k]
            else:
                out[c] = np.concatenate(parts) if len(parts) > 1 else parts[0].copy()
        return out


@dataclass
class Totals:
    """Counters since the agent started (exported as Prometheus counters)."""

    deliveries: int = 0
    pages: int = 0
    bytes: int = 0
    admitted: int = 0
    lost: int = 0
    completions: int = 0
    completed_pages: int = 0
    completed_unmatched: int = 0
    service_seconds: float = 0.0
    obsolete: int = 0
    obsolete_unmatched: int = 0
    given_up: int = 0
    resyncs: int = 0
    bad_requests: dict[str, int] = field(default_factory=dict)
    recovered_deliveries: int = 0

    def count_deliveries(self, deliveries: int, pages: int, nbytes: int, admitted: int) -> None:
        self.deliveries += deliveries
        self.pages += pages
        self.bytes += nbytes
        self.admitted += admitted
        self.lost += pages - admitted

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def add_deliveries(ring: Ring, now: float, pages: Sequence[int], sizes: Sequence[int | None],
                   client_times: Sequence[float | None], mode: int) -> None:
    """The deliveries stamped ``now`` under ``mode`` (their ``pages``, ``bytes`` and ``client_time``
    columns, in order), as samples for the next fit."""
    n = len(pages)
    nan = math.nan
    if n == 1:
        ct, size = client_times[0], sizes[0]
        ring.append(t=now, pages=pages[0], mode=mode, client_t=nan if ct is None else ct,
                    bytes=nan if size is None else size)
        return
    rows: dict[str, Sequence[float] | float] = {"t": now, "pages": pages, "mode": mode}
    if client_times.count(None) != n:  # absent: the ring's NaN
        rows["client_t"] = [nan if c is None else c for c in client_times]
    rows["bytes"] = sizes if None not in sizes else [nan if b is None else b for b in sizes]  # type: ignore[assignment]
    ring.extend(rows, n)


def add_completions(ring: Ring, totals: Totals, now: float, items: Sequence[CompletionLine], removed: int) -> None:
    """Completions stamped ``now`` (``removed`` of their pages left the queue): counted, and their service
    times and sizes per page as samples."""
    pages = sum(c.pages for c in items)
    totals.completions += len(items)
    totals.completed_pages += removed
    totals.completed_unmatched += pages - removed
    for c in items:
        if c.service_s is not None:
            totals.service_seconds += c.service_s
        if c.service_s is not None or c.bytes is not None:
            svc = c.service_s / c.pages if c.service_s is not None else math.nan
            size = c.bytes / c.pages if c.bytes is not None else math.nan
            ring.append(t=now, service_s=svc, bytes=size)


__all__ = ["Ring", "Totals", "add_completions", "add_deliveries"]
