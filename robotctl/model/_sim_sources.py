"""Random sources of the simulator: jump tables of the per-mode BMAPs and streams of random numbers
drawn in numpy chunks.

The engine's hot loop never calls numpy per event. It pulls Python floats from endless iterators
that refill themselves one chunk at a time (``itertools.chain`` over ``ndarray.tolist()``), so one draw
costs one C-level ``next``. Whole PH times are drawn the same way: a vectorised walk of the phase
chain over a chunk of independent draws.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ._arrivals import ModeArrivals
from ._ph import PH

#: Random numbers drawn per numpy call.
CHUNK = 1 << 14


def exponential_stream(rng: np.random.Generator, chunk: int = CHUNK) -> Iterator[float]:
    """Endless standard exponential draws."""
    return itertools.chain.from_iterable(iter(lambda: rng.standard_exponential(chunk).tolist(), None))


def uniform_stream(rng: np.random.Generator, chunk: int = CHUNK) -> Iterator[float]:
    """Endless uniform draws on [0, 1)."""
    return itertools.chain.from_iterable(iter(lambda: rng.random(chunk).tolist(), None))


def sample_ph(ph: PH, rng: np.random.Generator, size: int) -> NDArray[np.float64]:
    """``size`` independent PH(beta, S) times, by walking the phase chains of all draws at once.

    In phase m the chain stays an exponential time of rate -S[m, m], then jumps to m' with probability
    S[m, m'] / -S[m, m] or is absorbed with probability S_0[m] / -S[m, m] (paper 000, Section 2).
    """
    beta = np.asarray(ph.beta)
    S = np.asarray(ph.S)
    M = beta.size
    rates = -np.diag(S)
    if M == 1:
        return rng.standard_exponential(size) / rates[0]
    jump = np.zeros((M, M + 1))
    jump[:, :M] = S / rates[:, None]
    np.fill_diagonal(jump[:, :M], 0.0)
    jump[:, M] = -S.sum(axis=1) / rates
    cum = np.cumsum(jump, axis=1)
    cum[:, -1] = 1.0
    start = np.cumsum(beta)
    start[-1] = 1.0
    out = np.zeros(size)
    idx = np.arange(size)
    phase = np.searchsorted(start, rng.random(size), side="right")
    while idx.size:
        out[idx] += rng.standard_exponential(idx.size) / rates[phase]
        u = rng.random(idx.size)
        nxt = (u[:, None] >= cum[phase]).sum(axis=1)
        going = nxt < M
        idx = idx[going]
        phase = nxt[going]
    return out


def ph_stream(ph: PH, rng: np.random.Generator, chunk: int = CHUNK) -> Iterator[float]:
    """Endless independent PH times."""
    return itertools.chain.from_iterable(iter(lambda: sample_ph(ph, rng, chunk).tolist(), None))


#: One row of the jump table: (mean sojourn, cumulative probabilities, outcomes (k, nu')).
JumpRow = tuple[float, tuple[float, ...], tuple[tuple[int, int], ...]]


@dataclass(frozen=True)
class BmapSource:
    """Jump tables of the directing process of every mode (paper 000, Section 2, eq. (1)).

    In mode l and phase nu the directing process stays an exponential time of rate
    lambda_nu^(l) = -(D_0^(l))_{nu,nu}, then moves to nu' bringing k pages with probability
    (D_k^(l))_{nu,nu'} / lambda_nu^(l) (k = 0: off-diagonal D_0, no pages). Row ``offsets[l] + nu`` of
    ``rows`` holds the mean sojourn 1 / lambda_nu^(l), the cumulative probabilities of the outcomes
    with positive probability, and the outcomes (k, nu'). All modes share the phase space, so nu
    carries over when the mode changes.

    Attributes
    ----------
    order : int
        W, the number of phases.
    offsets : dict
        Mode -> index of its phase 0 in ``rows``.
    rows : tuple of JumpRow
    """

    order: int
    offsets: dict[int, int]
    rows: tuple[JumpRow, ...]

    @classmethod
    def from_arrivals(cls, arrivals: ModeArrivals) -> BmapSource:
        W = arrivals.order
        offsets: dict[int, int] = {}
        rows: list[JumpRow] = []
        for mode, bmap in arrivals.by_mode:
            offsets[mode] = len(rows)
            for nu in range(W):
                rate = -float(bmap.D0[nu, nu])
                probs: list[float] = []
                outcomes: list[tuple[int, int]] = []
                for k, Dk in enumerate(bmap.D):
                    for nu2 in range(W):
                        if k == 0 and nu2 == nu:
                            continue
                        p = float(Dk[nu, nu2]) / rate
                        if p > 0.0:
                            probs.append(p)
                            outcomes.append((k, nu2))
                cum = np.cumsum(probs) / sum(probs)
                cum[-1] = 1.0
                rows.append((1.0 / rate, tuple(cum.tolist()), tuple(outcomes)))
        return cls(W, offsets, tuple(rows))
