"""One named checker per invariant of the model's matrices and vectors.

Each checker takes the field path it reports, coerces with ``np.asarray`` into a fresh float array
(the caller's array is never changed) and raises :class:`InputError` naming the field, the worst
entry and the tolerance.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from robotctl._errors import InputError

#: Default absolute tolerance for row sums and probability sums.
ROW_SUM_TOL = 1e-9


def as_matrix(field: str, value: ArrayLike) -> NDArray[np.float64]:
    """A finite, square, float matrix (a copy)."""
    try:
        A = np.array(value, dtype=float)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(field, f"is not a numeric matrix ({exc})", "write it as a list of rows") from exc
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] == 0:
        raise InputError(field, f"must be a non-empty square matrix, got shape {A.shape}",
                         "write it as a list of equally long rows, as many rows as columns")
    if not np.all(np.isfinite(A)):
        raise InputError(field, "has a non-finite entry", "replace NaN/inf by a number")
    return A


def as_vector(field: str, value: ArrayLike) -> NDArray[np.float64]:
    """A finite float row vector (a copy)."""
    try:
        v = np.array(value, dtype=float)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(field, f"is not a numeric vector ({exc})", "write it as a list of numbers") from exc
    if v.ndim != 1 or v.size == 0:
        raise InputError(field, f"must be a non-empty list of numbers, got shape {v.shape}",
                         "write it as [p1, p2, ...]")
    if not np.all(np.isfinite(v)):
        raise InputError(field, "has a non-finite entry", "replace NaN/inf by a number")
    return v


def check_shape(field: str, A: NDArray[np.float64], shape: tuple[int, ...]) -> None:
    if A.shape != shape:
        raise InputError(field, f"has shape {A.shape}, expected {shape}",
                         "all matrices of one law must share its number of phases")


def check_probability_vector(field: str, v: NDArray[np.float64], *, tol: float = ROW_SUM_TOL) -> None:
    """Nonnegative entries summing to one."""
    worst = int(np.argmin(v))
    if v[worst] < -tol:
        raise InputError(field, f"entry {worst} is negative ({v[worst]:g})", "probabilities must be >= 0")
    total = float(v.sum())
    if abs(total - 1.0) > tol:
        raise InputError(field, f"sums to {total:.12g}, not 1 (tolerance {tol:g})",
                         "scale the entries so that they sum to 1")


def check_nonnegative(field: str, A: NDArray[np.float64], *, off_diagonal_only: bool = False) -> None:
    B = A.copy()
    if off_diagonal_only:
        np.fill_diagonal(B, 0.0)
    if B.size and B.min() < 0:
        idx = np.unravel_index(int(np.argmin(B)), B.shape)
        where = "off-diagonal entry" if off_diagonal_only else "entry"
        raise InputError(field, f"{where} {tuple(int(x) for x in idx)} is negative ({B[idx]:g})",
                         "rates must be >= 0 (only the diagonal of a generator or D_0 is negative)")


def check_subgenerator(field: str, S: NDArray[np.float64], *, tol: float = ROW_SUM_TOL) -> None:
    """A PH sub-generator: nonnegative off-diagonal, row sums <= 0, all phases transient."""
    check_nonnegative(field, S, off_diagonal_only=True)
    sums = S.sum(axis=1)
    worst = int(np.argmax(sums))
    if sums[worst] > tol:
        raise InputError(field, f"row {worst} sums to {sums[worst]:.12g} > 0 (tolerance {tol:g})",
                         "a sub-generator's rows sum to minus the exit rate, which is >= 0")
    # Every phase must reach absorption: -S is then a nonsingular M-matrix.
    n = S.shape[0]
    reach = sums < -tol
    if not reach.any():
        raise InputError(field, "no phase has an exit rate (all row sums are 0)",
                         "at least one row must sum to a negative number")
    adj = (S > 0) & ~np.eye(n, dtype=bool)
    changed = True
    while changed:
        new = reach | (adj & reach[None, :]).any(axis=1)
        changed = bool((new != reach).any())
        reach = new
    if not reach.all():
        stuck = int(np.flatnonzero(~reach)[0])
        raise InputError(field, f"phase {stuck} can never be left for absorption",
                         "every phase needs a path to a phase with an exit rate")


def check_irreducible(field: str, Q: NDArray[np.float64]) -> None:
    """Irreducibility of a generator (strong connectivity of its off-diagonal graph)."""
    n = Q.shape[0]
    adj = (Q > 0) & ~np.eye(n, dtype=bool)

    def reached(adjacency: NDArray[np.bool_]) -> NDArray[np.bool_]:
        seen = np.zeros(n, dtype=bool)
        seen[0] = True
        frontier = seen.copy()
        while frontier.any():
            nxt = adjacency[frontier].any(axis=0) & ~seen
            seen |= nxt
            frontier = nxt
        return seen

    fwd, back = reached(adj), reached(adj.T)
    if not (fwd.all() and back.all()):
        bad = int(np.flatnonzero(~(fwd & back))[0])
        raise InputError(field, f"is not irreducible: phase {bad} and phase 0 do not communicate",
                         "every phase of the directing process must be reachable from every other")


def check_generator_rows(field: str, matrices: Sequence[NDArray[np.float64]], *,
                         tol: float = ROW_SUM_TOL) -> None:
    """Rows of sum(matrices) must sum to zero."""
    total = np.sum(matrices, axis=0).sum(axis=1)
    worst = int(np.argmax(np.abs(total)))
    if abs(total[worst]) > tol * max(1.0, float(np.abs(np.asarray(matrices)).max())):
        raise InputError(field, f"row {worst} of D_0 + D_1 + ... sums to {total[worst]:.12g}, not 0 "
                         f"(tolerance {tol:g})",
                         "set each diagonal entry of D_0 to minus the sum of the other entries of its row")
