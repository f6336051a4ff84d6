"""Minimising a smooth function over the probability simplex: a global grid stage, then generalized
pattern search on a shrinking lattice (the search for renovation's q; paper 004 leaves it to particle
swarms).

**Method.** Points are kept on the lattice {n / D : n integer >= 0, sum n = D}, so every iterate is
exactly feasible.

1. *Grid*: every point with D = ``grid`` (all C(grid + d - 1, d - 1) compositions; ``grid`` is lowered
   until there are at most ``GRID_LIMIT``), each evaluated once.
2. *Poll*: from each of the ``starts`` best grid points, with mesh Delta = 1 / D, evaluate every
   neighbour x + Delta (e_b - e_a) that stays feasible (x_a >= Delta), move to the best if it lowers
   the value, otherwise halve Delta (D doubles, the lattice refines). Stop when Delta < ``tol``.

**Why it is sound.** The directions e_b - e_a, a != b, positively span the tangent cone of the simplex
at every point (a feasible direction v, sum v = 0, is a nonnegative combination of e_b - e_a over
v_a < 0 < v_b: a transport plan), so they conform to its boundary. For such direction sets and a
continuously differentiable objective, the generalized pattern search of Lewis and Torczon (SIAM J.
Optim. 10 (2000) 917-941; Kolda, Lewis and Torczon, SIAM Review 45 (2003), Section 8) has
liminf of its mesh sizes -> 0 and every limit point of the unsuccessful iterates is a KKT point. In
finite terms the result is *mesh-stationary*: no feasible step of size ``mesh`` along any e_b - e_a
improves it, which the result reports. The objectives here (measures of a finite Markov chain whose
generator is linear in q) are rational in q, smooth wherever the chain has one recurrent class. The
search is local; the grid stage and several starts guard against a poor basin, and the vertices
(e.g. q_0 = 1, no renovation) are always among the grid points, so the result is never worse than
any of them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from robotctl.model import InputError

#: The grid stage evaluates at most this many points (``grid`` is lowered until it fits).
GRID_LIMIT = 120

Objective = Callable[[NDArray[np.float64]], float]


@dataclass(frozen=True)
class SimplexOptimum:
    """The best point found by :func:`simplex_pattern_search`.

    Attributes
    ----------
    x : tuple of float
        The minimiser found, on the simplex.
    value : float
        f(x).
    evaluations : int
        Distinct points evaluated.
    grid : int
        Resolution of the grid stage (points n / grid).
    mesh : float
        The final mesh size: no feasible step of this size along e_b - e_a improves ``value``.
    stationary : bool
        True when the poll stage ended by its tolerance (False: stopped by ``max_evaluations``).
    """

    x: tuple[float, ...]
    value: float
    evaluations: int
    grid: int
    mesh: float
    stationary: bool


def compositions(total: int, parts: int) -> list[tuple[int, ...]]:
    """Every tuple of ``parts`` integers >= 0 summing to ``total`` (stars and bars)."""
    out = []
    for bars in itertools.combinations(range(total + parts - 1), parts - 1):
        edges = (-1, *bars, total + parts - 1)
        out.append(tuple(b - a - 1 for a, b in zip(edges, edges[1:])))
    return out


def grid_size(dim: int, grid: int) -> int:
    return math.comb(grid + dim - 1, dim - 1)


def simplex_pattern_search(f: Objective, dim: int, *, grid: int = 4, tol: float = 1.0 / 64, starts: int = 2,
                           max_evaluations: int = 5_000) -> SimplexOptimum:
    """Minimise ``f`` over {x in R^dim : x >= 0, sum x = 1} (module docstring).

    Parameters
    ----------
    f : callable
        x -> value; NaN or an exception-free infinity marks an infeasible or failed evaluation.
    dim : int
        Number of coordinates (>= 1).
    grid : int
        Resolution of the global stage; lowered to keep at most ``GRID_LIMIT`` points.
    tol : float
        The finest mesh polled is the last one >= tol.
    starts : int
        Poll from this many of the best grid points.
    max_evaluations : int
        Budget of distinct evaluations.
    """
    for name, given, low in (("dim", dim, 1), ("grid", grid, 1), ("starts", starts, 1),
                             ("max_evaluations", max_evaluations, 1)):
        if isinstance(given, bool) or not isinstance(given, int) or given < low:
            raise InputError(name, f"must be a whole number >= {low}, got {given!r}", "")
    if not (isinstance(tol, int | float) and 0.0 < tol < 1.0):
        raise InputError("tol", f"must lie strictly between 0 and 1, got {tol!r}", "e.g. 1/64")
    if grid_size(dim, grid) > GRID_LIMIT:  # the finest grid within the limit (a bisection: grid may be huge)
        lo, hi = 1, grid
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if grid_size(dim, mid) <= GRID_LIMIT else (lo, mid - 1)
        grid = lo
    cache: dict[tuple[float, ...], float] = {}

    def value(n: tuple[int, ...], D: int) -> float:
        key = tuple(round(k / D, 14) for k in n)
        if key not in cache:
            v = float(f(np.array(key)))
            cache[key] = v if math.isfinite(v) else math.inf
        return cache[key]

    def poll(start: tuple[int, ...]) -> tuple[float, tuple[int, ...], int, bool]:
        """(value, point, D, stationary): poll from ``start`` at meshes 1/D >= tol; D is that of the
        last (unsuccessful) poll."""
        n, D = start, grid
        current = value(n, D)
        while len(cache) < max_evaluations:
            scored = []
            for a in range(dim):
                if n[a] < 1:
                    continue
                for b in range(dim):
                    if b != a:
                        cand = list(n)
                        cand[a] -= 1
                        cand[b] += 1
                        scored.append((value(tuple(cand), D), tuple(cand)))
            if scored and min(scored)[0] < current - 1e-13 * max(1.0, abs(current)):
                current, n = min(scored)
            elif tol > 1.0 / (2 * D):  # the next mesh would be finer than tol
                return current, n, D, True
            else:
                n, D = tuple(2 * k for k in n), 2 * D
        return current, n, D, False

    ranked = sorted(compositions(grid, dim), key=lambda n: value(n, grid))
    results = [poll(start) for start in ranked[:starts]]
    best_v, best_n, best_D, stationary = min(results, key=lambda r: r[0])
    x = tuple(k / best_D for k in best_n)
    return SimplexOptimum(x, best_v, len(cache), grid, 1.0 / best_D, stationary)
