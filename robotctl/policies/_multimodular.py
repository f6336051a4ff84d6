"""Multimodular functions and the local search of paper 003, Section 4.

The base of Z^n is B = {b_0 = -e_1, b_1 = e_1 - e_2, ..., b_{n-1} = e_{n-1} - e_n, b_n = e_n}; g is
multimodular when g(x + b_i) + g(x + b_j) >= g(x) + g(x + b_i + b_j) for all x and i != j (eq. 5).
Theorem 4.2: on a convex set S that is a union of atoms, a point x is a global minimum of a multimodular
g as soon as no extreme point of an atom at x is lower, i.e. no x + sum_i alpha_i b_i with
alpha in {0, 1}^{n+1} (not all 0, not all 1: those are x itself) lies in S with a lower value. The
search repeats that test from the best neighbour until none is lower. A box {lo..hi}^n is such a set.

The paper's counterexample (integer convexity is not enough) is the function on {0, 1, 2}^2 of
:data:`COUNTEREXAMPLE`: the local search started at (2, 1) stops there with value 0 while g(0, 2) = -1.
The violation of (5) printed in the paper, at (1, 2) with b_0 and b_2, uses (1, 2) + b_2 = (1, 3), which
is outside the domain; inside it the one violation is at x = (1, 2) with b_0 and b_1:
g(0, 2) + g(2, 1) = -1 < 3 = g(1, 2) + g(1, 1).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from robotctl.model import InputError

#: The counterexample of paper 003, Section 4: integer convex on {0, 1, 2}^2, not multimodular.
COUNTEREXAMPLE: Mapping[tuple[int, int], float] = {
    (0, 2): -1.0, (1, 2): 2.0, (2, 2): 5.0,
    (0, 1): 2.0, (1, 1): 1.0, (2, 1): 0.0,
    (0, 0): 5.0, (1, 0): 4.0, (2, 0): 3.0,
}

BatchFunction = Callable[[NDArray[np.int64]], NDArray[np.float64]]


def multimodular_base(n: int) -> NDArray[np.int64]:
    """The base B as rows b_0, ..., b_n (shape (n + 1, n))."""
    if n < 1:
        raise InputError("n", f"must be >= 1, got {n}", "the dimension of the search space")
    B = np.zeros((n + 1, n), dtype=np.int64)
    B[0, 0] = -1
    for i in range(1, n):
        B[i, i - 1], B[i, i] = 1, -1
    B[n, n - 1] = 1
    return B


@lru_cache(maxsize=32)
def _moves(n: int) -> NDArray[np.int64]:
    """sum_i alpha_i b_i for every alpha in {0,1}^{n+1} except all 0 and all 1 (2^{n+1} - 2 rows; the
    all-1 sum is 0). Read-only, cached."""
    B = multimodular_base(n)
    bits = ((np.arange(1, 2 ** (n + 1) - 1)[:, None] >> np.arange(n + 1)) & 1).astype(np.int64)
    moves = bits @ B
    moves.flags.writeable = False
    return moves


def neighbourhood(x: ArrayLike, lo: int, hi: int) -> NDArray[np.int64]:
    """The extreme points of the atoms at x that lie in the box {lo..hi}^n (Theorem 4.2)."""
    xa = np.asarray(x, dtype=np.int64)
    cand = xa + _moves(xa.size)
    inside = np.all((cand >= lo) & (cand <= hi), axis=1)
    return np.asarray(cand[inside])


@dataclass(frozen=True)
class LocalSearchResult:
    """Where the local search stopped.

    Attributes
    ----------
    x : tuple of int
    value : float
    steps : int
        Improving moves made.
    evaluations : int
        Points evaluated.
    """

    x: tuple[int, ...]
    value: float
    steps: int
    evaluations: int


def local_search(g: BatchFunction, x0: ArrayLike, lo: int, hi: int, *, tol: float = 1e-12,
                 max_steps: int = 10_000) -> LocalSearchResult:
    """Steepest descent over the atom neighbourhood of Theorem 4.2 on the box {lo..hi}^n.

    ``g`` maps an (S, n) integer array of points to their S values. For a multimodular g the point
    returned is a global minimum on the box (Theorem 4.2); for other functions it is only local.
    """
    x = np.asarray(x0, dtype=np.int64)
    if np.any(x < lo) or np.any(x > hi):
        raise InputError("x0", f"{x.tolist()} is outside the box {lo}..{hi}", "start inside the domain")
    gx = float(g(x[None, :])[0])
    steps, evals = 0, 1
    while steps < max_steps:
        nb = neighbourhood(x, lo, hi)
        if nb.shape[0] == 0:
            break
        vals = g(nb)
        evals += nb.shape[0]
        k = int(np.argmin(vals))
        if not vals[k] < gx - tol:
            break
        x, gx = nb[k], float(vals[k])
        steps += 1
    return LocalSearchResult(tuple(int(v) for v in x), gx, steps, evals)


def multimodularity_violations(g: Mapping[tuple[int, ...], float], *, tol: float = 1e-12
                               ) -> list[tuple[tuple[int, ...], int, int, float, float]]:
    """Every (x, i, j, lhs, rhs) with lhs = g(x + b_i) + g(x + b_j) < rhs = g(x) + g(x + b_i + b_j), over
    the points where all four lie in the domain of ``g`` (a mapping from points to values)."""
    if not g:
        return []
    n = len(next(iter(g)))
    B = multimodular_base(n)
    out = []
    for x in sorted(g):
        xa = np.asarray(x)
        for i, j in itertools.combinations(range(n + 1), 2):
            pts = [tuple((xa + B[i]).tolist()), tuple((xa + B[j]).tolist()), tuple((xa + B[i] + B[j]).tolist())]
            if all(p in g for p in pts):
                lhs, rhs = g[pts[0]] + g[pts[1]], g[x] + g[pts[2]]
                if lhs < rhs - tol:
                    out.append((x, i, j, lhs, rhs))
    return out


def midpoint_convexity_violations(g: Mapping[tuple[int, ...], float], *, tol: float = 1e-12
                                  ) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every (x, v) with g(x + v) + g(x - v) < 2 g(x), all three in the domain (integer convexity along
    every lattice direction)."""
    out = []
    pts = sorted(g)
    for x in pts:
        for y in pts:
            v = tuple(b - a for a, b in zip(x, y))
            if not any(v):
                continue
            z = tuple(a - d for a, d in zip(x, v))
            if z in g and g[y] + g[z] < 2 * g[x] - tol:
                out.append((x, v))
    return out


def table_function(g: Mapping[tuple[int, ...], float]) -> BatchFunction:
    """A batch function reading a finite table (points outside it are +inf)."""

    def f(points: NDArray[np.int64]) -> NDArray[np.float64]:
        return np.array([g.get(tuple(int(v) for v in p), np.inf) for p in points])

    return f


__all__ = ["COUNTEREXAMPLE", "LocalSearchResult", "local_search", "midpoint_convexity_violations",
           "multimodular_base", "multimodularity_violations", "neighbourhood", "table_function"]
