"""Arrivals per number of active robots (paper 000, Section 2, interpretations 1-4).

``ModeArrivals`` maps a mode l (the number of active robots) to the BMAP D_k^(l). All modes share
one directing process, so all BMAPs have the same order W: when the number of robots changes, the
phase nu carries over.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl._errors import InputError

from ._bmap import BMAP


@dataclass(frozen=True, eq=False)
class ModeArrivals(Mapping[int, BMAP]):
    """Mode -> BMAP, every BMAP of the same order.

    Attributes
    ----------
    by_mode : tuple of (int, BMAP)
        Sorted by mode.
    rule : str
        How the modes were built: ``per_mode``, ``linear``, ``thinning``, ``independent``, ``marked``.
    """

    by_mode: tuple[tuple[int, BMAP], ...]
    rule: str = "per_mode"

    def __post_init__(self) -> None:
        if not self.by_mode:
            raise InputError("model.arrivals", "no mode is defined", "give at least one mode, e.g. per_mode: {1: ...}")
        items = sorted(self.by_mode, key=lambda kv: kv[0])
        W = items[0][1].order
        for mode, bmap in items:
            if not isinstance(mode, int) or isinstance(mode, bool) or mode < 0:
                raise InputError(f"model.arrivals.per_mode.{mode}", "a mode must be a whole number of robots >= 0",
                                 "use keys 1, 2, 3, ...")
            if bmap.order != W:
                raise InputError(f"model.arrivals.per_mode.{mode}",
                                 f"has {bmap.order} phases but mode {items[0][0]} has {W}",
                                 "all modes share one directing process: give every mode the same number of phases")
        if len({m for m, _ in items}) != len(items):
            raise InputError("model.arrivals.per_mode", "a mode is listed twice", "list each mode once")
        object.__setattr__(self, "by_mode", tuple(items))

    # Mapping protocol
    def __getitem__(self, mode: int) -> BMAP:
        for m, b in self.by_mode:
            if m == mode:
                return b
        raise KeyError(mode)

    def __iter__(self) -> Iterator[int]:
        return (m for m, _ in self.by_mode)

    def __len__(self) -> int:
        return len(self.by_mode)

    @property
    def modes(self) -> tuple[int, ...]:
        return tuple(m for m, _ in self.by_mode)

    @property
    def order(self) -> int:
        return self.by_mode[0][1].order

    # -- constructions of Section 2 -----------------------------------------------------------
    @classmethod
    def per_mode(cls, bmaps: Mapping[int, BMAP]) -> ModeArrivals:
        """Interpretation 4: one BMAP given explicitly per mode."""
        return cls(tuple(bmaps.items()), "per_mode")

    @classmethod
    def linear(cls, base: BMAP, modes: Iterable[int], *, base_mode: int = 1) -> ModeArrivals:
        """D^(r) = (r / base_mode) D: r robots deliver r/base_mode times as fast (paper 000's
        real-data model)."""
        return cls(tuple((r, base.scaled(r / base_mode)) for r in modes), "linear")

    @classmethod
    def thinning(cls, base: BMAP, q: Sequence[float]) -> ModeArrivals:
        """Interpretation 2: mode l keeps each batch of the common BMAP with probability q_l,
        0 < q_1 < ... < q_N = 1."""
        qs = [float(x) for x in q]
        if not qs or abs(qs[-1] - 1.0) > 1e-12 or any(not (0 < a < b) for a, b in zip(qs, qs[1:])) or qs[0] <= 0:
            raise InputError("model.arrivals.q", f"must satisfy 0 < q_1 < ... < q_N = 1, got {qs}",
                             "list increasing thinning probabilities ending with 1")
        return cls(tuple((l, base.thinned(ql)) for l, ql in enumerate(qs, start=1)), "thinning")

    @classmethod
    def independent(cls, robots: Sequence[BMAP]) -> ModeArrivals:
        """Interpretation 1: robot j delivers its own BMAP; with l robots active the first l deliver
        and the others' directing processes run on without arrivals (Kronecker sums)."""
        if not robots:
            raise InputError("model.arrivals.robots", "is empty", "list one BMAP per robot")
        kmax = max(b.max_batch for b in robots)
        N = len(robots)
        out = []
        for l in range(1, N + 1):
            D0 = _kron_sum([r.D0 if j < l else r.generator for j, r in enumerate(robots)])
            Dk = []
            for k in range(1, kmax + 1):
                terms = []
                for j in range(l):
                    parts: list[NDArray[Any]] = [np.eye(r.order) for r in robots]
                    parts[j] = robots[j].D[k] if k <= robots[j].max_batch else np.zeros_like(robots[j].D0)
                    terms.append(reduce(np.kron, parts))
                Dk.append(np.sum(terms, axis=0))
            out.append((l, BMAP((D0, *Dk), f"model.arrivals.mode_{l}")))
        return cls(tuple(out), "independent")

    @classmethod
    def marked(cls, D0: NDArray[np.float64], per_robot: Sequence[Sequence[NDArray[np.float64]]]) -> ModeArrivals:
        """Interpretation 3 (BMMAP): one directing process; per_robot[m-1][k-1] = D_k^(m) holds the
        batches of k pages brought by robot m. With l robots active,
        D_0^(l) = D_0 + sum_{m > l} sum_k D_k^(m) and D_k^(l) = sum_{m <= l} D_k^(m)."""
        N = len(per_robot)
        kmax = max(len(r) for r in per_robot)
        D0 = np.asarray(D0, dtype=float)
        padded = [[np.asarray(r[k], dtype=float) if k < len(r) else np.zeros_like(D0) for k in range(kmax)]
                  for r in per_robot]
        out = []
        for l in range(1, N + 1):
            d0 = D0 + sum((sum(padded[m]) for m in range(l, N)), np.zeros_like(D0))
            dk = [sum((padded[m][k] for m in range(l)), np.zeros_like(D0)) for k in range(kmax)]
            out.append((l, BMAP((d0, *dk), f"model.arrivals.mode_{l}")))
        return cls(tuple(out), "marked")

    def to_dict(self) -> dict[str, object]:
        return {"per_mode": {m: b.to_list() for m, b in self.by_mode}}


def _kron_sum(mats: Sequence[NDArray[np.float64]]) -> NDArray[np.float64]:
    out = mats[0]
    for m in mats[1:]:
        out = np.kron(out, np.eye(m.shape[0])) + np.kron(np.eye(out.shape[0]), m)
    return out
