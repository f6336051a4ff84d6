"""Exact reductions of a model before any chain is built.

The ordered-phase chain of paper 000 has W M R^(i-1) states on level i, so every phase saved in the laws
pays off exponentially. Three reductions leave every measure unchanged:

**Unreachable phases.** A phase of a PH law that the initial vector cannot reach (through the
off-diagonal of the sub-generator) carries no probability and is dropped.

**Ordinary lumpability** (Kemeny and Snell, *Finite Markov Chains*, Section 6.3). A partition of the
phases of a PH law (beta, S) into blocks is lumpable when every phase of a block has the same exit rate
and, for every other block B, the same total rate into B. The block process is then itself Markov, with
sub-generator S-hat[A, B] = sum_{y in B} S[x, y] for any x in A and initial vector beta-hat[A] = sum_{x in A}
beta[x]; its absorption time has the same law from every initial vector. The controlled queue uses a
page's obsolescence phase only through its exit rate (the page expires) and its moves between phases,
and the service phase only through its exit rate, so replacing a law by its lumped form leaves the
chain's level process and every measure unchanged. The coarsest such partition is found by partition
refinement from the classes of equal exit rate. An obsolescence law whose phases all have the same
exit rate is the special case of one block: it is exactly exponential (paper 000's first example, with
Gamma = [[-0.6, 0.4], [0.1, -0.3]], has exit rates 0.2 and 0.2).

The phases nu of the arrival process lump likewise when, for every mode and every batch size k >= 1,
each phase of a block has the same total rate of D_k into every block, and the same total rate of D_0
into every other block: then batch epochs, batch sizes and the lumped phase process are those of the
original. Identical robots of ``ModeArrivals.independent`` lump this way by symmetry.

Equal means equal within ``rtol`` times the largest rate of the law (default 1e-12): model files hold
decimal numbers whose differences, such as 0.6 - 0.4 and 0.3 - 0.1, differ in the last bits.

**Batch sizes** beyond the capacity K are admitted as at most K pages, so the chain already folds them
(``PreparedModel.arrivals_by_admitted``). Truncating the batch-size law below K is *not* exact:
:func:`reduce_model` does it only when asked with ``batch_mass > 0``, keeps the largest batch size
k* whose tail (pages offered in batches larger than k*) is at most ``batch_mass`` of the pages offered in
that mode, clips those batches to k* pages (the batch epochs stay the same), and records the largest
tail mass dropped, so that the result says it is approximate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast

import numpy as np
from numpy.typing import NDArray

from robotctl._errors import InputError

from ._arrivals import ModeArrivals
from ._bmap import BMAP
from ._model import QueueModel
from ._ph import PH

#: Rates closer than this times the largest rate of a law count as equal.
RTOL = 1e-12

Partition = tuple[tuple[int, ...], ...]


@dataclass(frozen=True, eq=False)
class Reduction:
    """A model and its reduced form, with what was done.

    Attributes
    ----------
    model : QueueModel
        The reduced model (the original one when nothing could be reduced).
    original : QueueModel
    arrival_blocks, service_blocks, obsolescence_blocks : tuple of tuple of int
        The partition of the original phases into the reduced ones (phase indices of the original law;
        phases dropped as unreachable belong to no block). Empty for a missing obsolescence law.
    batch_mass : float
        Largest share of a mode's offered pages whose batches were clipped (0 when none were).
    exact : bool
        True when every measure of ``model`` equals that of ``original`` (no batch was clipped).
    notes : tuple of str
        One line per reduction made, for people.
    """

    model: QueueModel
    original: QueueModel
    arrival_blocks: Partition
    service_blocks: Partition
    obsolescence_blocks: Partition
    batch_mass: float
    exact: bool
    notes: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.notes)

    @property
    def orders(self) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """((W, M, R) of the original, (W, M, R) of the reduced model); R = 1 without obsolescence."""
        return _orders(self.original), _orders(self.model)


def _orders(model: QueueModel) -> tuple[int, int, int]:
    R = 1 if model.obsolescence is None else model.obsolescence.order
    return model.arrivals.order, model.service.order, R


def _split(members: list[int], signatures: NDArray[np.float64], tol: float) -> list[list[int]]:
    """Split ``members`` into groups whose signature rows agree within ``tol`` in every column."""
    groups: list[list[int]] = []
    for x in sorted(members, key=lambda y: tuple(signatures[y])):
        for g in groups:
            if np.all(np.abs(signatures[g[0]] - signatures[x]) <= tol):
                g.append(x)
                break
        else:
            groups.append([x])
    return groups


def coarsest_lumpable(all_blocks: Sequence[NDArray[np.float64]], other_blocks: Sequence[NDArray[np.float64]],
                      labels: Sequence[float], tol: float) -> Partition:
    """The coarsest partition of the states, refining the classes of equal ``labels``, such that every
    state of a block has the same row sum into each block for every matrix of ``all_blocks``, and into
    each *other* block for every matrix of ``other_blocks`` (partition refinement; at most n rounds)."""
    n = len(labels)
    lab = np.asarray(labels, dtype=float).reshape(n, 1)
    blocks = [sorted(g) for g in _split(list(range(n)), lab, tol)]
    while True:
        index = np.empty(n, dtype=int)
        for b, g in enumerate(blocks):
            index[g] = b
        member = np.zeros((n, len(blocks)))
        member[np.arange(n), index] = 1.0
        cols = [mat @ member for mat in all_blocks]
        own = member.astype(bool)
        for mat in other_blocks:
            sums = mat @ member
            sums[own] = 0.0
            cols.append(sums)
        sig = np.hstack([lab, *cols]) if cols else lab
        refined = [sorted(h) for g in blocks for h in _split(g, sig, tol)]
        if len(refined) == len(blocks):
            return tuple(tuple(g) for g in sorted(refined))
        blocks = refined


def reachable_phases(beta: NDArray[np.float64], S: NDArray[np.float64]) -> tuple[int, ...]:
    """Phases reachable from the support of ``beta`` through the off-diagonal of ``S``."""
    seen = set(np.flatnonzero(beta > 0).tolist())
    stack = list(seen)
    while stack:
        x = stack.pop()
        for y in np.flatnonzero(S[x] > 0):
            if int(y) not in seen:
                seen.add(int(y))
                stack.append(int(y))
    return tuple(sorted(seen))


def lump_ph(law: PH, *, rtol: float = RTOL, field: str = "ph") -> tuple[PH, Partition]:
    """The smallest lumped form of ``law`` (unreachable phases dropped, then the coarsest ordinarily
    lumpable partition; module docstring) and the partition of the original phases it uses."""
    beta, S = np.asarray(law.beta), np.asarray(law.S)
    keep = list(reachable_phases(beta, S))
    b, T = beta[keep], S[np.ix_(keep, keep)]
    exits = -T.sum(axis=1)
    tol = rtol * max(float(np.abs(T).max()), 1e-300)
    part = coarsest_lumpable([], [T], exits.tolist(), tol)
    k = len(part)
    Sh = np.zeros((k, k))
    bh = np.zeros(k)
    for a, block in enumerate(part):
        x = block[0]
        bh[a] = b[list(block)].sum()
        for c, other in enumerate(part):
            Sh[a, c] = T[x, list(other)].sum()
    original = tuple(tuple(keep[i] for i in block) for block in part)
    if k == law.order:
        return law, original
    return PH(bh / bh.sum(), Sh, field), original


def lump_arrivals(arrivals: ModeArrivals, *, rtol: float = RTOL) -> tuple[ModeArrivals, Partition]:
    """The coarsest lumpable partition of the phases nu shared by all modes (module docstring)."""
    W = arrivals.order
    if W == 1:
        return arrivals, ((0,),)
    bmaps = [b for _, b in arrivals.by_mode]
    scale = max(float(np.abs(D).max()) for b in bmaps for D in b.D)
    tol = rtol * scale
    batches = [D for b in bmaps for D in b.D[1:]]
    part = coarsest_lumpable(batches, [b.D0 for b in bmaps], [0.0] * W, tol)
    if len(part) == W:
        return arrivals, part
    k = len(part)
    out = []
    for mode, bmap in arrivals.by_mode:
        mats = []
        for D in bmap.D:
            Dh = np.zeros((k, k))
            for a, block in enumerate(part):
                for c, other in enumerate(part):
                    Dh[a, c] = D[block[0], list(other)].sum()
            mats.append(Dh)
        out.append((mode, BMAP(tuple(mats), f"model.arrivals.per_mode.{mode}")))
    return ModeArrivals(tuple(out), arrivals.rule), part


def truncate_batches(arrivals: ModeArrivals, batch_mass: float) -> tuple[ModeArrivals, float]:
    """Clip, in every mode, the batches larger than the smallest k* whose tail holds at most
    ``batch_mass`` of the pages offered, to k* pages; returns the new arrivals and the largest tail
    mass clipped (module docstring)."""
    if not 0.0 <= batch_mass < 1.0:
        raise InputError("batch_mass", f"must be in [0, 1), got {batch_mass!r}",
                         "the share of offered pages whose batches may be clipped, e.g. 1e-9")
    if batch_mass == 0.0:
        return arrivals, 0.0
    out = []
    worst = 0.0
    for mode, bmap in arrivals.by_mode:
        theta = bmap.stationary
        pages = np.array([k * float(theta @ D.sum(axis=1)) for k, D in enumerate(bmap.D)])
        tail = np.cumsum(pages[::-1])[::-1] / pages.sum()  # tail[k]: share of pages in batches >= k
        kstar = next(k for k in range(1, bmap.max_batch + 1) if k == bmap.max_batch or tail[k + 1] <= batch_mass)
        if kstar == bmap.max_batch:
            out.append((mode, bmap))
            continue
        worst = max(worst, float(tail[kstar + 1]))
        mats = [*bmap.D[:kstar], sum(bmap.D[kstar:], np.zeros_like(bmap.D0))]
        out.append((mode, BMAP(tuple(mats), f"model.arrivals.per_mode.{mode}")))
    return ModeArrivals(tuple(out), arrivals.rule), worst


def reduce_model(model: QueueModel, *, rtol: float = RTOL, batch_mass: float = 0.0) -> Reduction:
    """``model`` with every law in its smallest lumped form (module docstring).

    Parameters
    ----------
    model : QueueModel
    rtol : float
        Relative tolerance under which two rates count as equal.
    batch_mass : float
        0 (default) keeps every batch size; a positive share clips the batch-size law of each mode where
        its tail holds at most this share of the offered pages (then ``exact`` is False).
    """
    notes: list[str] = []
    arrivals, a_part = lump_arrivals(model.arrivals, rtol=rtol)
    if len(a_part) < model.arrivals.order:
        notes.append(f"arrival phases lumped {model.arrivals.order} -> {len(a_part)}")
    arrivals, clipped = truncate_batches(arrivals, batch_mass)
    if clipped > 0:
        notes.append(f"batches clipped where their tail holds at most {batch_mass:g} of the pages "
                     f"(largest clipped {clipped:.3g})")
    service, s_part = lump_ph(model.service, rtol=rtol, field="model.service")
    if service.order < model.service.order:
        notes.append(f"service phases lumped {model.service.order} -> {service.order}")
    obsolescence, o_part = model.obsolescence, cast(Partition, ())
    if model.obsolescence is not None:
        obsolescence, o_part = lump_ph(model.obsolescence, rtol=rtol, field="model.obsolescence")
        if obsolescence.order < model.obsolescence.order:
            what = "exactly exponential" if obsolescence.order == 1 else "lumped"
            notes.append(f"obsolescence phases {model.obsolescence.order} -> {obsolescence.order} ({what})")
    if not notes:
        return Reduction(model, model, a_part, s_part, o_part, 0.0, True, ())
    reduced = replace(model, arrivals=arrivals, service=service, obsolescence=obsolescence)
    return Reduction(reduced, model, a_part, s_part, o_part, clipped, clipped == 0.0, tuple(notes))
