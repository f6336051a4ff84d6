"""The counted part of an ordered-head level (``model._levels``): the compositions of c waiting pages over
R obsolescence phases, and the maps between them (a page added, expired, promoted or served)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._matrices import Sparse, Vector, _csr, _eye


def compositions(c: int, R: int) -> list[tuple[int, ...]]:
    """All (n_1..n_R) >= 0 with sum c, in lexicographic order of (-n_1, -n_2, ...) (n_1 = c first)."""
    if R == 1:
        return [(c,)]
    return [(a, *rest) for a in range(c, -1, -1) for rest in compositions(c - a, R - 1)]


def n_compositions(c: int, R: int) -> int:
    return math.comb(c + R - 1, R - 1)


#: Dense count maps with at most this many entries are kept once built (:meth:`_Counts._kept`).
KEPT_DENSE_MAP = 1 << 12


class _Counts:
    """Maps on the counted part: compositions of c pages over R phases (built with array operations: a
    composition n is found among those of its total by the key sum_r n_r (c + 1)^r)."""

    def __init__(self, gamma: Vector, Gamma: NDArray[np.float64], order: tuple[int, ...] | None = None) -> None:
        self.gamma, self.Gamma = gamma, Gamma
        #: None: the next page is drawn at random (n_r / c); else phases by priority, first one present taken
        self.order = order
        self.Gamma0 = -Gamma.sum(axis=1)
        self.R = gamma.size
        self._index: dict[int, dict[tuple[int, ...], int]] = {}
        self._arrays: dict[int, tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]] = {}
        self._generators: dict[int, NDArray[np.float64]] = {}
        #: the maps built, by (kind, c, a) and, for those that depend on it, the order: chains of one law at
        #: several depths (an error bar's ladder) ask for the same ones, about 0.1 ms each
        self._maps: dict[tuple[Any, ...], Sparse] = {}

    def share(self, other: _Counts) -> None:
        """Use ``other``'s tables, count generators and maps (same law; the maps that depend on the order are
        kept under it)."""
        self._index, self._arrays, self._generators = other._index, other._arrays, other._generators
        self._maps = other._maps

    def _kept(self, key: tuple[Any, ...], build: Callable[[], Sparse]) -> Sparse:
        """A map built once, kept when sparse or small (a dense map is read-only: the chains that share it
        never write into their factors). Large dense maps are built again when asked for: with three phases at
        K = 50 they were mostly zeros, and keeping them held 80 MB more at the bracket's peak."""
        hit = self._maps.get(key)
        if hit is None:
            hit = build()
            if isinstance(hit, np.ndarray):
                if hit.size > KEPT_DENSE_MAP:
                    return hit
                hit.flags.writeable = False
            self._maps[key] = hit
        return hit

    def index(self, c: int) -> dict[tuple[int, ...], int]:
        if c not in self._index:
            self._index[c] = {n: k for k, n in enumerate(compositions(c, self.R))}
        return self._index[c]

    def dim(self, c: int) -> int:
        return n_compositions(c, self.R)

    def array(self, c: int) -> NDArray[np.int64]:
        """The compositions of c as rows (dim(c) x R), in the order of :func:`compositions`."""
        return self._lookup_table(c)[0]

    def _lookup_table(self, c: int) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
        if c not in self._arrays:
            comps = np.array(compositions(c, self.R), dtype=np.int64).reshape(-1, self.R)
            keys = comps @ (c + 1) ** np.arange(self.R, dtype=np.int64)
            order = np.argsort(keys)
            self._arrays[c] = (comps, keys[order], order)
        return self._arrays[c]

    def find(self, c: int, rows: NDArray[np.int64]) -> NDArray[np.int64]:
        """Positions among the compositions of c of ``rows`` (each a composition of c)."""
        _, keys, order = self._lookup_table(c)
        q = rows @ (c + 1) ** np.arange(self.R, dtype=np.int64)
        return np.asarray(order[np.searchsorted(keys, q)], dtype=np.int64)

    def generator(self, c: int) -> NDArray[np.float64]:
        """Cnt_c: phase moves of the c counted pages; the diagonal holds all their outflows (moves and
        expiries), sum_r n_r Gamma[r, r] (built once per c)."""
        if c not in self._generators:
            self._generators[c] = self._generator(c)
        return self._generators[c]

    def _generator(self, c: int) -> NDArray[np.float64]:
        n = self.array(c)
        d = n.shape[0]
        out = np.zeros((d, d))
        k = np.arange(d)
        out[k, k] = n @ np.diag(self.Gamma)
        for r, s in itertools.permutations(range(self.R), 2):
            if self.Gamma[r, s] > 0:
                src = np.flatnonzero(n[:, r])
                m = n[src].copy()
                m[:, r] -= 1
                m[:, s] += 1
                np.add.at(out, (src, self.find(c, m)), n[src, r] * self.Gamma[r, s])
        return out

    def _minus(self, c: int, weights: NDArray[np.float64], with_phase: bool) -> Sparse:
        """cnt(c) -> [R x] cnt(c - 1): one counted page of phase r leaves with weight ``weights[k, r]``
        (k the composition's position)."""
        n = self.array(c)
        width = self.dim(c - 1)
        rows, cols, vals = [], [], []
        for r in range(self.R):
            src = np.flatnonzero((n[:, r] > 0) & (weights[:, r] != 0))
            m = n[src].copy()
            m[:, r] -= 1
            rows.append(src)
            cols.append((r * width if with_phase else 0) + self.find(c - 1, m))
            vals.append(weights[src, r])
        shape = (n.shape[0], (self.R if with_phase else 1) * width)
        return _csr(np.concatenate(rows), np.concatenate(cols), np.concatenate(vals), shape)

    def expire(self, c: int) -> Sparse:
        """cnt(c) -> cnt(c - 1) at rate n_r Gamma_0[r]."""
        return self._kept(("expire", c), lambda: self._minus(c, self.array(c) * self.Gamma0[None, :], False))

    def next_page(self, c: int) -> NDArray[np.float64]:
        """Which counted page goes next (dim(c) x R weights): at random, n_r / c, or with ``order`` the
        first phase of the order that some counted page is in."""
        n = self.array(c)
        if self.order is None:
            return n / c
        weights = np.zeros(n.shape)
        taken = np.zeros(n.shape[0], dtype=bool)
        for r in self.order:
            pick = ~taken & (n[:, r] > 0)
            weights[pick, r] = 1.0
            taken |= pick
        return weights

    def remove_next(self, c: int) -> Sparse:
        """cnt(c) -> cnt(c - 1): the next counted page (:meth:`next_page`) enters service."""
        return self._kept(("remove_next", c, self.order), lambda: self._minus(c, self.next_page(c), False))

    def promote(self, c: int) -> Sparse:
        """cnt(c) -> R (x) cnt(c - 1): the next counted page (:meth:`next_page`) takes the last ordered
        place with its phase r."""
        return self._kept(("promote", c, self.order), lambda: self._minus(c, self.next_page(c), True))

    def _add_one(self, b: int) -> Sparse:
        """cnt(b) -> cnt(b + 1): one new page, with phase r with probability gamma[r]."""
        n = self.array(b)
        rows, cols, vals = [], [], []
        for r in range(self.R):
            if self.gamma[r] > 0:
                m = n.copy()
                m[:, r] += 1
                rows.append(np.arange(n.shape[0]))
                cols.append(self.find(b + 1, m))
                vals.append(np.full(n.shape[0], float(self.gamma[r])))
        return _csr(np.concatenate(rows), np.concatenate(cols), np.concatenate(vals), (n.shape[0], self.dim(b + 1)))

    def add(self, c: int, a: int) -> Sparse:
        """cnt(c) -> cnt(c + a): a new pages, each with phase r with probability gamma[r] (the steps
        multiplied as sparse matrices: each has at most R entries a row)."""
        if a == 0:
            return _eye(self.dim(c))
        return self._kept(("add", c, a), lambda: self._add_one(c) if a == 1 else self._add_many(c, a))

    def _add_many(self, c: int, a: int) -> Sparse:
        """:meth:`add` for a >= 2."""
        # the a pages' phases are multinomial: n -> n + m with probability a! / prod m_r! prod gamma_r^m_r
        # (built at once: the product of a one-page steps as scipy matrices cost 0.3 s a chain at K = 50)
        n = self.array(c)
        ms = self.array(a)
        keep = ~np.any((ms > 0) & (self.gamma[None, :] <= 0), axis=1)  # a phase never entered
        ms = ms[keep]
        logs = np.log(np.where(self.gamma > 0, self.gamma, 1.0))
        log_factorial = np.array([math.lgamma(k + 1) for k in range(a + 1)])
        log_p = math.lgamma(a + 1) - log_factorial[ms].sum(axis=1) + (ms * logs[None, :]).sum(axis=1)
        probs = np.exp(log_p)
        rows = np.repeat(np.arange(n.shape[0]), ms.shape[0])
        targets = (n[:, None, :] + ms[None, :, :]).reshape(-1, self.R)
        cols = self.find(c + a, targets)
        vals = np.tile(probs, n.shape[0])
        return _csr(rows, cols, vals, (n.shape[0], self.dim(c + a)))
