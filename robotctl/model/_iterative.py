"""The stationary vector of a level chain by a preconditioned Krylov method, without dense level blocks.

The dense routes (the paper's block algorithm, :class:`model.PolicyEvaluator`) factorise blocks of the
size of a level, W M R^(K-1) states for the exact chain: 2 GiB at 16384 states, so two-phase
obsolescence stopped at K of about 12. Here nothing larger than a vector is formed:

- each level's diagonal block D_0-part (+) S (+) Gamma (+) ... (+) Gamma (+) Cnt_c is a Kronecker sum,
  applied and inverted axis by axis (:class:`model._kron.KronSum`; a level with counted pages, whose
  count generator has badly conditioned eigenvectors, is factorised by sparse LU instead);
- the blocks between levels, I_W (x) down(i) and D_a-part (x) up(i, a), are applied through the chain's
  inner operators (sparse above a few thousand states).

The system p Q = 0, p e = 1 is solved as p (Q + e u) = u with u the unit row of the first state (the
matrix is non-singular because that state has positive probability), by GMRES on the transposed system,
preconditioned by one symmetric block Gauss-Seidel sweep of Q over the levels (up the levels with the
batch arrivals, then down with the departures) whose level solves are the Kronecker-sum inverses (each
level's diagonal block is non-singular: it loses probability to the levels around it). It stops when
the relative residual is below ``rtol``; the result carries the true residual max |p Q| computed
afterwards, so its accuracy is measured, not assumed.

Reach (measured in bench/scale.py on two cores): the exact chain with W = M = R = 2 at K = 16 (262,142
states) in under a minute and about 0.5 GB, K = 12 in a few seconds. Work grows like R^K.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from ._kron import COND_LIMIT, KronSum
from ._levels import LevelChain
from ._matrices import (
    PERMC_SPEC,
    CSRArrays,
    csr_arrays,
    csr_from_dense,
    dense_entries,
    is_sparse,
    mmatrix_inverse,
    sparse_from_entries,
)

Array = NDArray[np.float64]

try:  # y += A x in place for CSR A, without scipy's per-call checks (a third of an iteration's time on small levels)
    from scipy.sparse._sparsetools import csr_matvec as _csr_matvec
except ImportError:  # pragma: no cover - a scipy without the routine: the public product
    _csr_matvec = None

#: Levels with counted pages and at most this many states are factorised by sparse LU.
SPLU_LIMIT = 60_000


@dataclass(frozen=True)
class IterativeResult:
    """p_i for i = 0..K on a :class:`LevelChain`, with how it was obtained.

    Attributes
    ----------
    level_vectors : tuple of ndarray
    iterations : int
        GMRES iterations.
    residual : float
        max |p Q| (and |p e - 1|).
    converged : bool
    seconds : float
    """

    level_vectors: tuple[Array, ...]
    iterations: int
    residual: float
    converged: bool
    seconds: float


#: A dense inner operator with more entries than this, at most ``SPARSE_DENSITY`` of them non-zero, is
#: multiplied as a sparse one: the up-blocks of counted pages have a few entries a row, and their dense
#: products were half of a GMRES iteration (K = 50, two phases, h = 2: 1.7 s of the ladder's 3.7 s).
SPARSE_ABOVE = 1024
SPARSE_DENSITY = 0.2


def _transposed(op: Any) -> Any:
    """What :func:`_right` multiplies by: a sparse operator transposed once (CSR), a dense one as it is
    unless it is large and mostly zero (``SPARSE_ABOVE``)."""
    if is_sparse(op):
        return sp.csr_matrix(op.T)
    dense = np.asarray(op)
    if dense.size > SPARSE_ABOVE and np.count_nonzero(dense) <= SPARSE_DENSITY * dense.size:
        return csr_from_dense(dense.T)
    return dense


def _right(P: Array, op_t: Any) -> Array:
    """P @ op for a dense (W x a) array P, given ``_transposed(op)`` (op dense or sparse, a x b)."""
    if is_sparse(op_t):
        return np.asarray(op_t @ P.T).T
    return np.asarray(P @ op_t)


def _chain_transposed(chain: LevelChain, kind: str, i: int, a: int = 0) -> Any:
    """``chain.up(i, a)`` or ``chain.down(i)`` as :func:`_right` takes it, kept with the chain (every policy
    solved on the chain shares it)."""
    cache = chain.evaluator_caches.setdefault("transposed", {})
    key = (kind, i, a)
    if key not in cache:
        cache[key] = _transposed(chain.up(i, a) if kind == "up" else chain.down(i))
    return cache[key]


class _Product:
    """out += A x, in place, for one CSR matrix A (a scipy matrix or :class:`CSRArrays`) that the solver's loops
    multiply by thousands of times: by scipy's private ``csr_matvec`` with the checks (dtypes, index types)
    made once, here, rather than at every call (they were a third of the products' time on small levels);
    by the public product where the routine is missing or ``out`` is not contiguous (a scipy matrix made
    from the arrays then, once). A GMRES iteration on the ladder's depth 2 at K = 36 makes about 220 such
    products."""

    __slots__ = ("A", "args", "direct", "matrix")

    def __init__(self, A: Any) -> None:
        self.A = A
        self.direct = (_csr_matvec is not None and A.data.dtype == np.float64 and A.indptr.dtype == A.indices.dtype)
        self.args = (A.shape[0], A.shape[1], A.indptr, A.indices, A.data)
        self.matrix: Any = None if isinstance(A, CSRArrays) else A

    def add(self, x: Array, out: Array) -> None:
        if self.direct and out.flags.c_contiguous and out.dtype == np.float64:
            _csr_matvec(*self.args, np.ascontiguousarray(x, dtype=np.float64), out)
            return
        if self.matrix is None:
            self.matrix = self.A.tocsr()
        out += self.matrix @ x


#: Diagonal blocks of at most this many states are inverted densely (their transposed inverse kept): a level
#: solve is then one dense product, a few microseconds, where SuperLU's solve costs 10-17 us a call on small
#: levels and the Kronecker-sum inverse a dozen numpy calls.
DENSE_SOLVE_DIM = 128


class _LevelSolve:
    """x -> solution of y (diagonal block) = x, for one level and mode."""

    def __init__(self, chain: LevelChain, i: int, mode: int) -> None:
        arr0 = chain.arrivals(mode, i)[0]
        factors = [arr0] if i == 0 else [arr0, *chain.kron_factors(i)]
        self.kron = KronSum(factors, rng_seed=i)
        self.lu: Any = None
        self.block_t: Any = None
        #: on small levels: the block transposed (dense) and its inverse, x -> x (block)^{-1} as one product
        self.dense_t: Array | None = None
        self.inverse_t: Array | None = None
        self.product: _Product | None = None
        d = chain.dim(i)
        counted = i > 0 and chain.shape(i).counted > 0
        small = d <= DENSE_SOLVE_DIM
        if small or ((counted or not self.kron.well_conditioned) and d <= SPLU_LIMIT):
            # the count generator's eigenvectors are badly conditioned, and a defective factor (an Erlang
            # law) has none: the perturbed inverse can be wrong by orders of magnitude (a GMRES residual
            # of 1e56 with Erlang-3 obsolescence at K = 8), so factorise the block itself
            # the block transposed, D_0-part^T (x) I + I_W (x) A(i)^T, from its entries (sparse Kronecker
            # products of identities were most of the set-up of a ladder's depth)
            inner = chain.inner_dim(i)
            eye = np.arange(inner, dtype=np.int64)
            parts = [_kron_coo(arr0.T, (eye, eye, np.ones(inner), (inner, inner)), 0)]
            if i > 0:
                parts.append(_kron_coo(np.eye(chain.W), _coo_t(chain.A(i)), 0))
            rows, cols, vals = (np.concatenate(x) for x in zip(*parts))
            if small:  # minus the block is a non-singular M-matrix (it loses probability to other levels)
                dense = np.zeros((d, d))
                np.add.at(dense, (rows, cols), vals)  # the diagonals meet
                self.dense_t = dense
                self.inverse_t = -mmatrix_inverse(-dense)
                return
            self.block_t = sparse_from_entries(rows, cols, vals, (d, d), duplicates=True)  # the diagonals meet
            self.lu = spla.splu(self.block_t.tocsc(), permc_spec=PERMC_SPEC)
            self.product = _Product(self.block_t)

    def row(self, x: Array) -> Array:
        if self.dense_t is not None:
            return np.asarray(self.dense_t @ x)
        if self.lu is not None:  # the block is at hand: one sparse product
            return np.asarray(self.block_t @ x)
        return self.kron.row(x)

    def add_row(self, x: Array, out: Array) -> None:
        """out += x (diagonal block), in place."""
        if self.dense_t is not None:
            out += self.dense_t @ x
        elif self.product is not None:
            self.product.add(x, out)
        else:
            out += self.kron.row(x)

    def solve(self, b: Array) -> Array:
        if self.inverse_t is not None:
            return np.asarray(self.inverse_t @ b)
        if self.lu is not None:
            return np.asarray(self.lu.solve(b))
        return self.kron.solve_row(b)


#: Levels of at most this many states get their rows between levels as explicit sparse matrices (one
#: product per level for all batch sizes, one for the departures): on small levels the Kronecker-structured
#: products were mostly call overhead (K = 50, two phases, h = 2: 45 ms a GMRES iteration, now 15 ms); on
#: large ones the explicit D_a (x) up(i, a) would hold W^2 times the entries of up(i, a).
FLAT_DIM = 4096


#: (rows, cols, values, shape) of a sparse operator
Entries = tuple[NDArray[np.int64], NDArray[np.int64], Array, tuple[int, int]]


def _coo_t(op: Any) -> Entries:
    """(rows, cols, values, shape) of the non-zero entries of a dense or sparse operator, transposed."""
    if is_sparse(op):
        c = op.tocoo()
        return (c.col.astype(np.int64), c.row.astype(np.int64), np.asarray(c.data, dtype=float),
                (c.shape[1], c.shape[0]))
    dense = np.asarray(op, dtype=float)
    r, c, v = dense_entries(dense)
    return c.astype(np.int64), r.astype(np.int64), v, (dense.shape[1], dense.shape[0])


def _kron_coo(D: Array, entries: Entries, row_at: int) -> tuple[NDArray[np.int64], NDArray[np.int64], Array]:
    """The entries of D (x) U (D small and dense, U given by its entries), rows shifted by ``row_at``."""
    r, c, v, (p, q) = entries
    a, b = np.nonzero(D)
    rows = (a[:, None] * p + r[None, :]).ravel() + row_at
    cols = (b[:, None] * q + c[None, :]).ravel()
    return rows, cols, (D[a, b][:, None] * v[None, :]).ravel()


def _flat_ups(chain: LevelChain, i: int, mode: int) -> tuple[int, Any] | None:
    """[Q_{i,i+1} | ... | Q_{i,i+top}] transposed, as one CSR matrix (:class:`CSRArrays`), with top; None when no
    batch is admitted at level i. Built per policy (kept per mode, they were 218 MB for 32 modes at K = 100);
    the entries of the mode-free up(i, a) are kept with the chain."""
    arr = chain.arrivals(mode, i)
    top = len(arr) - 1
    if top == 0:
        return None
    entries = chain.evaluator_caches.setdefault("up_entries_t", {})
    parts, at = [], 0
    for a in range(1, top + 1):
        if (i, a) not in entries:
            entries[i, a] = _coo_t(chain.up(i, a))
        if arr[a].any():
            parts.append(_kron_coo(arr[a].T, entries[i, a], at))
        at += chain.dim(i + a)
    if not parts:
        return None
    rows, cols, vals = (np.concatenate(x) for x in zip(*parts))
    return top, csr_arrays(rows, cols, vals, (at, chain.dim(i)))  # batch sizes land on their own levels


def _flat_down(chain: LevelChain, i: int) -> Any:
    """Q_{i,i-1} transposed (I_W (x) down(i)^T), as CSR (:class:`CSRArrays`), kept with the chain."""
    cache = chain.evaluator_caches.setdefault("flat_down", {})
    if i not in cache:
        rows, cols, vals = _kron_coo(np.eye(chain.W), _coo_t(chain.down(i)), 0)
        cache[i] = csr_arrays(rows, cols, vals, (chain.dim(i - 1), chain.dim(i)))
    return cache[i]


class _Operator:
    """Row-vector products with the blocks of one policy's generator."""

    def __init__(self, chain: LevelChain, policy: Sequence[int],
                 level_solves: dict[tuple[int, int], _LevelSolve] | None = None) -> None:
        self.chain = chain
        self.policy = list(policy)
        self.K = chain.K
        self.W = chain.W
        self.dims = [chain.dim(i) for i in range(self.K + 1)]
        self.offsets = np.concatenate([[0], np.cumsum(self.dims)]).astype(int)
        self.n = int(self.offsets[-1])
        solves = {} if level_solves is None else level_solves
        for i in range(self.K + 1):
            if (i, self.policy[i]) not in solves:
                solves[i, self.policy[i]] = _LevelSolve(chain, i, self.policy[i])
        self.diag = [solves[i, self.policy[i]] for i in range(self.K + 1)]
        self.ups: list[list[tuple[int, Array, Any]]] = []
        # small levels: (top, [Q_{i,i+1} | ... | Q_{i,i+top}]^T) and Q_{i,i-1}^T as explicit CSR matrices
        self.flat_ups: list[tuple[int, _Product] | None] = []
        self.flat_downs: list[_Product | None] = [None]
        for i in range(self.K + 1):
            arr = chain.arrivals(self.policy[i], i)
            top = len(arr) - 1
            flat = top > 0 and max(self.dims[i:i + top + 1]) <= FLAT_DIM
            ups = _flat_ups(chain, i, self.policy[i]) if flat else None
            self.flat_ups.append(None if ups is None else (ups[0], _Product(ups[1])))
            self.ups.append([] if flat else [(a, arr[a], _chain_transposed(chain, "up", i, a))
                                             for a in range(1, len(arr)) if arr[a].any()])
            if i > 0:
                self.flat_downs.append(_Product(_flat_down(chain, i)) if self.dims[i] <= FLAT_DIM else None)
        self.downs = [None] + [None if self.flat_downs[i] is not None else _chain_transposed(chain, "down", i)
                               for i in range(1, self.K + 1)]
        #: the slices of the levels in a whole vector
        self.levels = [slice(int(self.offsets[i]), int(self.offsets[i + 1])) for i in range(self.K + 1)]
        self.above = [slice(int(self.offsets[i + 1]), int(self.offsets[min(i + 1 + (f[0] if f else 0), self.K + 1)]))
                      for i, f in enumerate(self.flat_ups)]

    def split(self, x: Array) -> list[Array]:
        return [x[self.offsets[i]:self.offsets[i + 1]] for i in range(self.K + 1)]

    def add_up_from(self, i: int, xi: Array, out: Array) -> None:
        """out (the whole vector) += x_i [Q_{i,i+1} ... Q_{i,i+top}]."""
        flat = self.flat_ups[i]
        if flat is not None:
            flat[1].add(xi, out[self.above[i]])
            return
        off = self.offsets
        inner = self.chain.inner_dim(i)
        P = xi.reshape(self.W, inner)
        for a, arr, U in self.ups[i]:
            out[off[i + a]:off[i + a + 1]] += _right(arr.T @ P, U).reshape(-1)

    def add_down_from(self, i: int, xi: Array, out: Array) -> None:
        """out (level i - 1's part) += x_i Q_{i,i-1}."""
        flat = self.flat_downs[i]
        if flat is not None:
            flat.add(xi, out)
            return
        inner = self.chain.inner_dim(i)
        out += _right(xi.reshape(self.W, inner), self.downs[i]).reshape(-1)

    def row(self, x: Array) -> Array:
        """x Q."""
        x = np.ascontiguousarray(x, dtype=float)
        out = np.zeros_like(x)
        levels = self.levels
        for i, at in enumerate(levels):
            xi = x[at]
            self.diag[i].add_row(xi, out[at])
            self.add_up_from(i, xi, out)
            if i > 0:
                self.add_down_from(i, xi, out[levels[i - 1]])
        return out

    def sgs(self, r: Array) -> Array:
        """One symmetric block Gauss-Seidel sweep for z Q = r (row form): the rank-one term e u of the
        system is left to GMRES (each level's diagonal block is non-singular, Q's is not)."""
        r = np.asarray(r, dtype=float)
        lower = np.zeros_like(r)  # sum_{j < i} z_j Q_{j,i}, filled as the levels go up
        z = np.empty_like(lower)
        levels = self.levels
        for i, at in enumerate(levels):
            zi = np.ascontiguousarray(self.diag[i].solve(r[at] - lower[at]))
            z[at] = zi
            self.add_up_from(i, zi, lower)
        for i in range(self.K, -1, -1):
            at = levels[i]
            if i < self.K:  # z_{i+1} Q_{i+1,i} joins the levels below's part (level i's is not used again)
                self.add_down_from(i + 1, z[levels[i + 1]], lower[at])
            z[at] = self.diag[i].solve(r[at] - lower[at])
        return z

    @property
    def scale(self) -> float:
        """The largest total rate out of a state (the generator's largest diagonal entry, in size)."""
        return max(sum(float(np.abs(np.diag(f)).max()) for f in d.kron.factors) for d in self.diag)


def stationary_iterative(chain: LevelChain, robots_at_level: Sequence[int], *, rtol: float = 1e-13,
                         maxiter: int = 400, x0: Array | None = None,
                         level_solves: dict[tuple[int, int], Any] | None = None) -> IterativeResult:
    """p with p Q = 0, p e = 1 for the policy ``robots_at_level`` on ``chain`` (module docstring).
    ``level_solves``: the factorised diagonal blocks by (level, mode), filled and reused across calls on
    chains with the same diagonal blocks (the bracket's two ends)."""
    start = time.perf_counter()
    op = _Operator(chain, robots_at_level, level_solves)
    n = op.n
    rhs = np.zeros(n)
    rhs[0] = 1.0

    def apply(x: Array) -> Array:
        y = op.row(x)
        y[0] += float(x.sum())
        return y

    A = spla.LinearOperator((n, n), matvec=apply, dtype=float)
    M = spla.LinearOperator((n, n), matvec=op.sgs, dtype=float)
    count = [0]

    def tick(_: object) -> None:
        count[0] += 1

    guess = op.sgs(rhs) if x0 is None else x0
    x, info = spla.gmres(A, rhs, x0=guess, M=M, rtol=rtol, atol=0.0, restart=40, maxiter=maxiter,
                         callback=tick, callback_type="pr_norm")
    total = float(x.sum())
    p = x / total
    residual = max(float(np.abs(op.row(p)).max()), abs(total - 1.0))
    # GMRES's own test is on the preconditioned residual; the true one, relative to the largest rate, decides
    converged = info == 0 or residual <= 1e-10 * max(op.scale, 1.0)
    return IterativeResult(tuple(np.array(v) for v in op.split(p)), count[0], residual, converged,
                           time.perf_counter() - start)


def rates_from_levels(chain: LevelChain, robots_at_level: Sequence[int], p: Sequence[Array]) -> Array:
    """The rate columns of :mod:`model._evaluate` (``FUNCTIONALS`` then P(level)) summed over p."""
    from ._evaluate import _COLUMN_ORDER, FUNCTIONALS

    K = chain.K
    out = np.zeros(len(FUNCTIONALS) + K + 1)
    for i in range(K + 1):
        cols = chain.rate_columns(robots_at_level[i], i)[:, _COLUMN_ORDER]
        out[0] += float(p[i].sum())
        out[1:len(FUNCTIONALS)] += p[i] @ cols
        out[len(FUNCTIONALS) + i] = float(p[i].sum())
    return out / out[0]


__all__ = ["COND_LIMIT", "IterativeResult", "rates_from_levels", "stationary_iterative"]
