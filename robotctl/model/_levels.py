"""The level-structured chain of the controlled queue, exact or with an ordered head of h pages.

Paper 000 follows every waiting page's obsolescence phase in FIFO order: level i (i pages in the system)
holds (nu, m, r_1, ..., r_{i-1}), W M R^(i-1) states. Order matters only at one moment: when the head page
enters service (or a page ahead of others expires), the *next* page becomes the head, and its phase is
that of the oldest remaining page. The **ordered-head chain** of depth h keeps the phases of the h oldest
waiting pages in order, r_1..r_o (o = min(i - 1, h)), and only the *counts* n_1..n_R of phases among the
c = i - 1 - o others; when one of the ordered pages leaves, a page of the counted part takes the last
ordered place with phase r chosen with probability n_r / c (as if the counted pages were in random
order). Level i then has W M R^o C(c + R - 1, R - 1) states.

- h >= K - 2 is exact: at most one page is ever counted, and one page has no order to lose. It is the
  chain of paper 000 (the same states in the same order as :class:`model._blocks.Blocks`).
- h = 0 counts every waiting page: the exact chain of random order of service.
- In between, the error comes only from the phase of each promoted page; it shrinks geometrically in h
  (see ``model._approx``), which is what the error bar of :func:`model.solve_approx` measures.

Notation (generator convention, rows are "from"): each level has an inner space (everything but nu), with

- ``A(i)``: the inner generator on level i, the Kronecker sum S (+) Gamma^{(+)o} (+) Cnt_c (Cnt_c: the c
  counted pages' phase moves, n_r Gamma[r, r'], and their expiries on the diagonal);
- ``down(i)``: inner(i) -> inner(i - 1): a service completion (S_0 beta, head out, a counted page
  promoted) or the obsolescence of one waiting page;
- ``up(i, a)``: inner(i) -> inner(i + a): a pages appended at the tail with phases gamma (into the
  ordered places first, the rest counted);

and the blocks of the generator are Q_{i,i} = D_0-part (x) I + I_W (x) A(i), Q_{i,i-1} = I_W (x) down(i),
Q_{i,i+a} = D_a-part (x) up(i, a) (level 0: D_a-part (x) (beta (x) the first a - 1 pages)).

The tagged-page chain (Section 5 of paper 000) is built on the same spaces: a tagged page T with n waiting
pages ahead lives on inner(n + 1) (x) R (T's own phase last); its vectors are computed in ``model._tagged``
and kept here (:attr:`LevelChain.tagged`), weighed into the rate columns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._counts import _Counts
from ._matrices import (
    Vector,
    _eye,
    _kron,
    _sum,
    kron_power,
)
from ._model import QueueModel
from ._tagged import tagged_vectors


def _gamma0_sum(Gamma0: Vector, o: int) -> Any:
    """Gamma_0^{(+)o}: R^o -> R^(o-1), one of o ordered pages expires (the others keep their order)."""
    R = Gamma0.size
    g0 = Gamma0.reshape(-1, 1)
    return _sum([_kron(_kron(_eye(R**j), g0), _eye(R ** (o - 1 - j))) for j in range(o)])


def _drop_first(R: int, o: int) -> Any:
    """R^o -> R^(o-1): the first ordered page leaves (its phase forgotten)."""
    return _kron(np.ones((R, 1)), _eye(R ** (o - 1)))


#: Memo keys of blocks that do not depend on the promotion order (shared by sibling chains).
_PROMOTION_FREE = frozenset({"arr", "rates", "positions", "A", "up", "expiry"})
#: Orders in which counted pages go next (:class:`LevelChain`'s ``promotion``).
PROMOTIONS = ("random", "urgent", "patient")


def _priority(Gamma: NDArray[np.float64], promotion: str) -> tuple[int, ...] | None:
    """Phases by mean residual life -Gamma^{-1} 1, shortest first (``urgent``) or last (``patient``)."""
    if promotion == "random":
        return None
    residual = np.linalg.solve(-Gamma, np.ones(Gamma.shape[0])) if Gamma.any() else np.zeros(Gamma.shape[0])
    order = [int(r) for r in np.argsort(residual, kind="stable")]
    return tuple(order if promotion == "urgent" else order[::-1])


def _same_but_capacity(a: QueueModel, b: QueueModel) -> bool:
    """Whether two models are the same one (the same objects) but for their capacities."""
    return all(getattr(a, f.name) is getattr(b, f.name) for f in dataclasses.fields(a) if f.name != "capacity")


@dataclass(frozen=True)
class LevelShape:
    """Level i >= 1: o ordered waiting pages and c counted ones (o + c = i - 1)."""

    ordered: int
    counted: int


class LevelChain:
    """The policy-independent structure of the chain (module docstring) for one model and depth h.

    Parameters
    ----------
    model : QueueModel
    h : int or None
        Ordered waiting pages kept in order; None (or any h >= K - 2) is the exact chain.
    promotion : str
        Which counted page goes next (into service at h = 0, else to the last ordered place):
        ``random`` (n_r / c, the chain of random order of service at h = 0), ``urgent`` (a page of the
        phase with the shortest mean residual life present), ``patient`` (the longest). The last two are
        the ends of the bracket of :func:`model.solve_approx` (``method="bracket"``); all three agree on an
        exact chain.
    share : LevelChain or None
        A chain of the same model and depth whose blocks that do not depend on ``promotion`` (arrivals,
        A(i), up(i, a), expiry rates, the count generators) this one reuses instead of building again; or
        of the same model but a larger capacity (the model cut at a level the policy almost never reaches,
        ``model._approx``): with the same promotion this one then reuses all its blocks, the evaluators'
        blocks and the tagged page's vectors, which depend on the level i and on the capacity only through
        min(K - i, largest batch) (the memo keys say so).
    counts_of : LevelChain or None
        A chain of any depth and capacity of a model with the same obsolescence law (the same object), whose
        count tables and maps (``model._counts``) this one reuses: the depths of an error bar's ladder ask for
        the same maps of c counted pages.
    """

    def __init__(self, model: QueueModel, h: int | None = None, promotion: str = "random", *,
                 share: LevelChain | None = None, counts_of: LevelChain | None = None) -> None:
        self.model = model
        self.K = K = model.capacity
        self.W = model.arrivals.order
        self.beta = np.asarray(model.service.beta, dtype=float)
        self.S = np.asarray(model.service.S, dtype=float)
        self.S0 = -self.S.sum(axis=1)
        self.M = self.beta.size
        if model.obsolescence is None:
            self.gamma, self.Gamma = np.ones(1), np.zeros((1, 1))
        else:
            self.gamma = np.asarray(model.obsolescence.beta, dtype=float)
            self.Gamma = np.asarray(model.obsolescence.S, dtype=float)
        self.Gamma0 = -self.Gamma.sum(axis=1)
        self.R = self.gamma.size
        #: one obsolescence phase entered with probability one (the exponential surrogate's chain, or no
        #: obsolescence): inner(i) is the service phase alone, and A(i), down(i), up(i, a) are formed directly
        #: (the general Kronecker products and count maps of 1 x 1 factors were 90 us an operator, a quarter of
        #: the surrogate's part of an optimisation); the same entries, bit for bit
        self._single_phase = self.R == 1 and self.gamma[0] == 1.0
        exact_depth = max(K - 2, 0)
        if h is not None and h < 0:
            raise ValueError(f"h must be >= 0, got {h}")
        if self.R == 1:
            h = 0  # one phase: counting the waiting pages loses nothing, and keeps each level W M states
        elif h is None or h >= exact_depth:
            h = max(K - 1, 0)
        self.h = h
        self.exact = h >= exact_depth or self.R == 1
        if promotion not in PROMOTIONS:
            raise ValueError(f"promotion must be one of {', '.join(PROMOTIONS)}, got {promotion!r}")
        self.promotion = "random" if self.exact else promotion
        self.counts = _Counts(self.gamma, self.Gamma, _priority(self.Gamma, self.promotion))
        self._max_batch = {m: model.arrivals[m].max_batch for m in model.modes}
        self._cache: dict[tuple[Any, ...], Any] = {}
        self._sizes: dict[int, tuple[LevelShape, int, int]] = {}
        #: the memo of blocks that do not depend on ``promotion`` (shared with ``share``)
        self._shared: dict[tuple[Any, ...], Any] = {}
        #: dense blocks built by :class:`model.PolicyEvaluator`, shared by all evaluators of this chain
        self.evaluator_caches: dict[str, dict[Any, Any]] = {}
        #: the tagged page's vectors of ``share`` when this chain is its cut (a prefix of them is this one's)
        self._tagged_of: LevelChain | None = None
        if counts_of is not None:
            if counts_of.model.obsolescence is not model.obsolescence:
                raise ValueError("counts_of must be a chain of a model with the same obsolescence law")
            self.counts.share(counts_of.counts)
        if share is not None:
            if share.h != self.h or not _same_but_capacity(share.model, model) or share.K < K:
                raise ValueError("share must be a chain of the same model and depth (or of the model with a "
                                 "larger capacity)")
            self._shared = share._shared
            self.counts.share(share.counts)
            if share.promotion == self.promotion:
                self._cache, self.evaluator_caches = share._cache, share.evaluator_caches
                self._tagged_of = share

    # -- sizes --------------------------------------------------------------------------------
    def shape(self, i: int) -> LevelShape:
        return self._size(i)[0]

    def inner_dim(self, i: int) -> int:
        return self._size(i)[1]

    def dim(self, i: int) -> int:
        return self._size(i)[2]

    def _size(self, i: int) -> tuple[LevelShape, int, int]:
        """(shape, inner dimension, dimension) of level i, formed once (the passes ask for them tens of
        thousands of times in one optimisation)."""
        hit = self._sizes.get(i)
        if hit is None:
            w = max(i - 1, 0)
            o = min(w, self.h)
            s = LevelShape(o, w - o)
            inner = 1 if i == 0 else self.M * self.R**s.ordered * self.counts.dim(s.counted)
            hit = self._sizes[i] = (s, inner, self.W * inner)
        return hit

    @property
    def n_states(self) -> int:
        return sum(self.dim(i) for i in range(self.K + 1))

    @property
    def max_dim(self) -> int:
        return max(self.dim(i) for i in range(self.K + 1))

    @property
    def label(self) -> str:
        if self.exact:
            return "exact"
        return f"ordered-head h={self.h}" + ("" if self.promotion == "random" else f" ({self.promotion} next)")

    def reach(self, mode: int, i: int) -> int:
        """min(K - i, the mode's largest batch): all that the blocks of level i under ``mode`` depend on
        the capacity through (the batch sizes admitted there), so a memo key with it holds for any capacity."""
        return min(self.K - i, self._max_batch[mode])

    def _memo(self, key: tuple[Any, ...], build: Any) -> Any:
        cache = self._shared if key[0] in _PROMOTION_FREE else self._cache
        if key not in cache:
            cache[key] = build()
        return cache[key]

    # -- arrivals (policy-dependent through the mode only) -------------------------------------
    def arrivals(self, mode: int, i: int) -> list[NDArray[np.float64]]:
        """[sum of D_k^(mode) over the batch sizes k of which a pages are admitted at level i], a = 0..K-i."""
        def build() -> list[NDArray[np.float64]]:
            bmap = self.model.arrivals[mode]
            free = self.K - i
            admitted = [self.model.admission.admitted(k, free) for k in range(1, bmap.max_batch + 1)]
            top = max((a for a, Dk in zip(admitted, bmap.D[1:]) if Dk.any()), default=0)
            out = [np.zeros((self.W, self.W)) for _ in range(top + 1)]
            out[0] += bmap.D0
            for a, Dk in zip(admitted, bmap.D[1:]):
                if Dk.any():  # a batch size that never comes may admit more than ``top`` (reject-batch)
                    out[a] += Dk
            return out
        # the admitted batch sizes depend on i only through min(K - i, largest batch): levels far from the top
        # share one list (at 128 modes and K = 500, a list per level was 320,000 small arrays)
        return self._memo(("arr", mode, self.reach(mode, i)), build)

    def max_jump(self, mode: int, i: int) -> int:
        return len(self.arrivals(mode, i)) - 1

    def page_rates(self, mode: int, i: int) -> tuple[Vector, Vector]:
        """Pages offered and pages lost per second at level i, by arrival phase nu."""
        def build() -> tuple[Vector, Vector]:
            bmap = self.model.arrivals[mode]
            offered = np.zeros(self.W)
            lost = np.zeros(self.W)
            for k, Dk in enumerate(bmap.D[1:], start=1):
                rate = Dk.sum(axis=1)
                offered += k * rate
                lost += (k - self.model.admission.admitted(k, self.K - i)) * rate
            return offered, lost
        return self._memo(("rates", mode, self.reach(mode, i)), build)

    # -- inner operators ----------------------------------------------------------------------
    def kron_factors(self, i: int) -> list[NDArray[np.float64]]:
        """The factors of A(i) = S (+) Gamma (+) ... (+) Gamma (+) Cnt_c (i >= 1)."""
        s = self.shape(i)
        factors = [self.S] + [self.Gamma] * s.ordered
        if s.counted:
            factors.append(self.counts.generator(s.counted))
        return factors

    def A(self, i: int) -> Any:
        """Inner generator of level i >= 1 (a Kronecker sum, diagonal included); dense when small."""
        def build() -> Any:
            if self._single_phase:  # S (+) Cnt_c, Cnt_c = [c Gamma]: c waiting pages, each expiring
                return self.S + np.diag(np.full(self.M, self.shape(i).counted * self.Gamma[0, 0]))
            factors = self.kron_factors(i)
            dims = [f.shape[0] for f in factors]
            return _sum([_kron(_kron(_eye(int(np.prod(dims[:k]))), f), _eye(int(np.prod(dims[k + 1:]))))
                         for k, f in enumerate(factors)])
        return self._memo(("A", i), build)

    def _head_out(self, s: LevelShape) -> Any:
        """(ordered, counted) -> next level down when the head waiting page enters service."""
        R = self.R
        if self.h == 0:
            return self.counts.remove_next(s.counted)
        if s.counted == 0:
            return _drop_first(R, s.ordered)
        return _kron(_drop_first(R, s.ordered), self.counts.promote(s.counted))

    def down(self, i: int) -> Any:
        """inner(i) -> inner(i - 1): service completion or one waiting page's obsolescence (i >= 1)."""
        def build() -> Any:
            if i == 1:
                return self.S0.reshape(-1, 1).copy()
            s = self.shape(i)
            if self._single_phase:  # S_0 beta (the next page enters service) + c Gamma_0 (one of c expires)
                return np.outer(self.S0, self.beta) + np.diag(np.full(self.M, s.counted * self.Gamma0[0]))
            parts = [_kron(np.outer(self.S0, self.beta), self._head_out(s))]
            eye_m = _eye(self.M)
            if s.ordered:
                g0 = _gamma0_sum(self.Gamma0, s.ordered)
                promoted = g0 if s.counted == 0 else _kron(g0, self.counts.promote(s.counted))
                parts.append(_kron(eye_m, promoted))
            if s.counted:
                parts.append(_kron(eye_m, _kron(_eye(self.R**s.ordered), self.counts.expire(s.counted))))
            return _sum(parts)
        return self._memo(("down", i), build)

    def _append(self, s: LevelShape, a: int) -> Any:
        """(ordered, counted) of a level -> after a new pages at the tail."""
        f = min(a, self.h - s.ordered) if s.counted == 0 else 0
        ordered = _kron(_eye(self.R**s.ordered), kron_power(self.gamma, f).reshape(1, -1))
        return _kron(ordered, self.counts.add(s.counted, a - f))

    def up(self, i: int, a: int) -> Any:
        """inner(i) -> inner(i + a) (i >= 1), or for i = 0 the row beta (x) (a - 1 waiting pages)."""
        def build() -> Any:
            if self._single_phase:  # the phase of the pages appended is the one phase: beta, or the identity
                return self.beta.reshape(1, -1).copy() if i == 0 else np.eye(self.M)
            if i == 0:
                return _kron(self.beta.reshape(1, -1), self._append(LevelShape(0, 0), a - 1))
            return _kron(_eye(self.M), self._append(self.shape(i), a))
        return self._memo(("up", i, a), build)

    def service_rates(self, i: int) -> Vector:
        """S_0 of the page in service, on inner(i)."""
        if i == 0:
            return np.zeros(1)
        return np.repeat(self.S0, self.inner_dim(i) // self.M)

    def expiry_rates(self, i: int) -> Vector:
        """Total obsolescence rate of the waiting pages, on inner(i)."""
        def build() -> Vector:
            if i == 0:
                return np.zeros(1)
            s = self.shape(i)
            ordered = np.zeros(1)
            for _ in range(s.ordered):
                ordered = (ordered[:, None] + self.Gamma0[None, :]).ravel()
            counted = self.counts.array(s.counted) @ self.Gamma0  # compositions in their order, by rate
            inner = (ordered[:, None] + counted[None, :]).ravel()
            return np.tile(inner, self.M)
        return self._memo(("expiry", i), build)

    def rate_columns(self, mode: int, i: int, *, keep: bool = True) -> NDArray[np.float64]:
        """On the states of level i, the rates [starvation, robots, offered, lost, served, obsolete,
        will_serve, will_expire, served_time, obsolete_time, queue_length] (dim(i) x 11). ``keep=False``
        builds them without keeping them on the chain (for a caller that keeps its own copy: the policy
        evaluator's rate columns, which were stored twice, 29 MB at 128 modes and K = 500)."""
        key = ("columns", mode, i, self.reach(mode, i))
        if not keep:
            hit = self._cache.get(key)
            return self.rate_columns_of([mode], i)[0] if hit is None else hit
        return self._memo(key, lambda: self.rate_columns_of([mode], i)[0])

    def rate_columns_of(self, modes: Sequence[int], i: int) -> NDArray[np.float64]:
        """:meth:`rate_columns` of several modes at once (n_modes x dim(i) x 11), not kept: the columns that do
        not depend on the mode are formed once, and the tagged-page weights of modes with the same batch
        reach in one product (a local search asks for every mode at every level: one call per mode and level
        was most of the building of a chain of small levels)."""
        inner = self.inner_dim(i)
        out = np.empty((len(modes), self.dim(i), 11))
        out[..., 0] = 1.0 if i == 0 else 0.0
        out[..., 1] = np.asarray(modes, dtype=float)[:, None]
        rates = [self.page_rates(m, i) for m in modes]
        out[..., 2] = np.repeat(np.array([offered for offered, _ in rates]), inner, axis=1)
        out[..., 3] = np.repeat(np.array([lost for _, lost in rates]), inner, axis=1)
        out[..., 4] = np.tile(self.service_rates(i), self.W)
        out[..., 5] = np.tile(self.expiry_rates(i), self.W)
        out[..., 6:10] = self._tagged_weights_of(modes, i)
        out[..., 10] = float(i)
        return out

    def _tagged_weights_of(self, modes: Sequence[int], i: int) -> NDArray[np.float64]:
        """:meth:`tagged_weights` of several modes (n_modes x dim(i) x 4)."""
        out = np.zeros((len(modes), self.dim(i), 4))
        by_top: dict[int, list[int]] = {}
        for k, m in enumerate(modes):
            by_top.setdefault(len(self.arrivals(m, i)) - 1, []).append(k)
        for top, ks in by_top.items():
            if top == 0:
                continue
            y = np.stack([self._positions(modes[k], i) for k in ks])  # (n, top, W)
            out[ks] = np.tensordot(y, self._tagged_stack(i, top), axes=(1, 0)).reshape(len(ks), self.dim(i), 4)
        return out

    def _tagged_stack(self, i: int, top: int) -> NDArray[np.float64]:
        """The vectors of a page arriving at level i in positions 1..top of its batch, stacked (top x inner x
        4): formed once per (level, top) and shared by the modes."""
        return self._memo(("tagged_stack", i, top),
                          lambda: np.stack([self._tagged_inner(i, l) for l in range(1, top + 1)]))

    def _positions(self, mode: int, i: int) -> NDArray[np.float64]:
        """Row l - 1, by arrival phase nu: the rate of batches that put a page at position l of the batch
        admitted at level i (top x W)."""
        def build() -> NDArray[np.float64]:
            admitted = np.stack(self.arrivals(mode, i)[1:]).sum(axis=2)  # row a-1: batches admitting a, by nu
            return np.cumsum(admitted[::-1], axis=0)[::-1]
        return self._memo(("positions", mode, self.reach(mode, i)), build)

    # -- the tagged page ----------------------------------------------------------------------
    @cached_property
    def tagged(self) -> tuple[tuple[Vector, ...], ...]:
        """For n = -1..K-2 waiting pages ahead of a tagged page (n = -1: in service), the vectors
        P(served), P(obsolete), E[T; served], E[T; obsolete] on inner(n + 1) with T's phase averaged
        over gamma (entry n + 1 of each tuple); entry 0 is on the service phases. T is the sojourn. They do
        not depend on K (the pages behind T do not matter): a cut chain takes the first K of its whole
        chain's."""
        if self._tagged_of is not None:
            return tuple(v[:self.K] for v in self._tagged_of.tagged)
        return tagged_vectors(self)

    def _tagged_inner(self, i: int, l: int) -> NDArray[np.float64]:
        """On inner(i): [served, obsolete, served_time, obsolete_time] of a page arriving at level i in
        position l of its batch (inner x 4; level 0: 1 x 4)."""
        def build() -> NDArray[np.float64]:
            vecs = self.tagged
            if i == 0:
                if l == 1:
                    return np.array([[self.beta @ v[0] for v in vecs]])
                entry = self.up(0, l - 1)
                return np.array([[float(np.asarray(entry @ v[l - 1]).ravel()[0]) for v in vecs]])
            n = i + l - 2  # waiting pages ahead of the tagged one
            out = np.column_stack([v[n + 1] for v in vecs])
            return out if l == 1 else np.asarray(self.up(i, l - 1) @ out)
        return self._memo(("tagged_inner", i, l), build)

    def tagged_weights(self, mode: int, i: int) -> NDArray[np.float64]:
        """On the states of level i (nu, inner): the rates, summed over arriving pages, of
        [will be served, will expire, sojourn if served, sojourn if expired] (shape dim(i) x 4)."""
        return self._tagged_weights_of([mode], i)[0]
