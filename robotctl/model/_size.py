"""How large a solve is before it runs: states, the largest level, and the memory it will hold at its peak.

The exact solve of :mod:`._solve` (the ``block`` algorithm of paper 000, Section 3, which ``auto`` uses for
batch arrivals) keeps, for every level i = 1..K of W M R^(i-1) states (``d_i``):

- G_{i-1} (d_i x d_{i-1}), the LU factors of -Qbar_{i,i} (d_i x d_i), the row Qbar_{i,l} for
  l = i..i+J (J: the largest batch), F_i (d_0 x d_i) and p_i;
- the generator blocks Q_{i,i-1}, Q_{i,i}, Q_{i,i+1..i+J} of each mode the policies use (cached across
  the policies of one optimisation), A_{i-1}, B_{i-1}, Gamma_0^{(+)i} and the J + 1 arrival sums;
- the tagged chain of Section 5: four vectors and the LU factors of A_j per level.

So the memory is ``8 x (entries)`` plus a fixed overhead per array (the numpy header and the cache's
dictionary slot). With R = 1 both grow linearly in K; with R > 1 the top levels dominate and grow like
R^(2(K-1)).

When the top level holds more than ``ITERATIVE_ABOVE`` states, ``auto`` solves iteratively (GMRES over the
level chain): about 64 vectors of the chain's size and a fixed part, ``ITERATIVE_BYTES_PER_STATE`` per state
plus ``ITERATIVE_BASE_BYTES`` (measured: 450-520 bytes per state at K = 14 and 16, two obsolescence
phases). :func:`model_solve_size` sizes the exactly reduced model (:func:`reduce_model`), as ``solve``
does. The estimates are checked against the peak that ``tracemalloc`` measures while solving (tests/model/
test_size.py) and bound it within a factor of two either way on the cases measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ._model import QueueModel
from ._reduce import reduce_model
from ._solve import EXACT_STATE_LIMIT, ITERATIVE_ABOVE

#: Bytes per stored array beyond its entries: numpy's header and the cache dictionaries' slots (measured:
#: 180-220 bytes per array on the R = 1 models of tests/model/test_size.py).
ARRAY_OVERHEAD_BYTES = 200
#: The iterative method's memory per state of the chain, and its fixed part (module docstring).
ITERATIVE_BYTES_PER_STATE = 512
ITERATIVE_BASE_BYTES = 16 << 20


@dataclass(frozen=True)
class SolveSize:
    """The size of the exact solve of one model.

    Attributes
    ----------
    n_states : float
        States of the generator, sum_i d_i (a float: it may exceed any integer type for R > 1).
    largest_level : float
        States of the top level, d_K = W M R^(K-1).
    bytes : float
        Estimated peak memory of one solve (``inf`` when it overflows a float).
    method : str
        The method the estimate is for: ``block`` (the qbd method holds no more), or ``iterative``.
    """

    n_states: float
    largest_level: float
    bytes: float
    method: str = "block"

    @property
    def exact(self) -> bool:
        """True when ``solve`` takes a chain this large (``EXACT_STATE_LIMIT``); beyond, only the
        approximation (``solve_approx``) evaluates it."""
        return self.n_states <= EXACT_STATE_LIMIT


#: Levels above this many states keep their generator blocks sparse (``_blocks.DENSE_BLOCK_LIMIT``).
_DENSE_BLOCK = 256


def solve_size(W: int, M: int, R: int, K: int, *, max_batch: int = 1, modes: int = 1,
               method: str = "auto") -> SolveSize:
    """:class:`SolveSize` of a model with arrival order ``W``, ``M`` service and ``R`` obsolescence phases,
    capacity ``K``, batches of at most ``max_batch`` pages and ``modes`` modes in use, solved by ``method``
    (``auto``: iterative when the top level holds more than ``ITERATIVE_ABOVE`` states, as ``solve`` does;
    else ``block``). See the module docstring.

    The memory is a sum over levels of what each keeps. With R = 1 every level but the first and the top
    J is alike, so the sum takes a handful of levels times their counts and K = 10^9 costs no more than
    K = 5; with R > 1 a level beyond ~1000 already overflows a float (``inf``).
    """
    J = max(1, min(max_batch, K))
    with np.errstate(over="ignore", invalid="ignore"):
        if R == 1:  # level 1, the top J levels, and levels 2..K-J alike (one of them, times their count)
            n_interior = max(0, K - J - 1)
            edges = np.unique(np.concatenate([[1], np.arange(max(2, K - J + 1), K + 1)])).astype(np.float64)
            levels = np.concatenate([edges, [2.0] if n_interior else []])
            weights = np.concatenate([np.ones(edges.size), [float(n_interior)] if n_interior else []])
        elif (K - 1) * math.log2(R) > 1000:  # d_K = W M R^(K-1) is beyond a float
            return SolveSize(math.inf, math.inf, math.inf, "iterative" if method == "auto" else method)
        else:
            levels = np.arange(1, K + 1, dtype=np.float64)
            weights = np.ones(K)
        per_level, n_states = _levels(W, M, float(R), K, J, modes, levels)
        total = float(per_level @ weights) + 8.0 * W * W * (J + 2) * modes  # level 0
        states = float(W + n_states @ weights)
    top = W * M * float(R) ** (K - 1) if R == 1 or (K - 1) * math.log2(R) <= 1000 else math.inf
    if method == "iterative" or (method == "auto" and top > ITERATIVE_ABOVE):
        return SolveSize(states, top, ITERATIVE_BYTES_PER_STATE * states + ITERATIVE_BASE_BYTES, "iterative")
    return SolveSize(states, top, total if math.isfinite(total) else math.inf)


def _levels(W: int, M: int, R: float, K: int, J: int, modes: int, i: NDArray[np.float64]
            ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Bytes kept for each level ``i`` (an array of levels 1..K), and the level sizes d_i."""

    def d(level: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.where(level == 0, float(W), W * M * R ** (level - 1))

    def cumulative(n: NDArray[np.float64]) -> NDArray[np.float64]:  # sum_{l=1..n} d_l
        return W * M * (n if R == 1.0 else (R**n - 1.0) / (R - 1.0))

    di, below = d(i), d(i - 1)
    top = np.minimum(K, i + J)
    above = top - i  # blocks above the diagonal in row i
    row = cumulative(top) - cumulative(i - 1)  # sum_{l=i..top} d_l
    inner = di / W  # M R^(i-1): A_{i-1}, B_{i-1}, the tagged chain's level
    dense_entries = (di * below + di * di + di * row  # G_{i-1}, LU of -Qbar_{i,i}, the row Qbar_{i,.}
                     + (W + 2.0) * di + 4.0 * inner + inner * inner)  # F_i, p_i, residual; tagged chain
    small = np.maximum(di, d(top)) <= _DENSE_BLOCK
    pieces = np.where(inner <= _DENSE_BLOCK, 3.0 * inner * inner, 1.5 * inner * (M + R * i))
    blocks = np.where(small, di * (below + row), 1.5 * (above + 2.0) * di * (W + M + R * i))
    bytes_ = 8.0 * (dense_entries + pieces + modes * (blocks + (above + 1.0) * W * W))
    arrays = 12.0 + above + modes * (2.0 * above + 3.0)
    return bytes_ + ARRAY_OVERHEAD_BYTES * arrays, di


def model_solve_size(model: QueueModel, *, modes: int | None = None, floor: bool = False) -> SolveSize:
    """:func:`solve_size` of ``model`` after its exact reduction (``modes``: how many of its modes one
    optimisation uses; all of them by default). With ``floor``, the size of its chain with one obsolescence
    phase: what any evaluation of the model walks at least (K + 1 levels of W M states), the approximate ones
    included."""
    reduced = reduce_model(model).model
    R = 1 if reduced.obsolescence is None or floor else reduced.obsolescence.order
    J = max(reduced.arrivals[m].max_batch for m in reduced.arrivals.modes)
    n = len(reduced.arrivals.modes) if modes is None else modes
    return solve_size(reduced.arrivals.order, reduced.service.order, R, reduced.capacity, max_batch=J, modes=n)


def format_bytes(n: float) -> str:
    """``1.5 GiB``, ``230 MiB``, ``12 KiB`` (and ``more than 10^300 bytes`` past a float)."""
    if not math.isfinite(n):
        return "more than 10^300 bytes"
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} bytes"
