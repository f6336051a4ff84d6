"""Dense and sparse operators for the level chains (``model._levels``): Kronecker products (with identity
factors copied into blocks rather than multiplied), conversions between dense and sparse forms, sparse
matrices assembled from their entries, and LU factorisations (dense by LAPACK, sparse by SuperLU)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray
from scipy.linalg.lapack import dgesv, dgetrf, dgetri, dgetrs  # scipy.sparse.linalg imports scipy.linalg anyway

Sparse = Any  # scipy.sparse matrices (typed loosely: scipy ships no precise stubs)
Vector = NDArray[np.float64]


def fast_kron(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    """np.kron of two dense matrices, without np.kron's per-call overhead (it matters on small levels)."""
    return (a[:, None, :, None] * b[None, :, None, :]).reshape(a.shape[0] * b.shape[0], a.shape[1] * b.shape[1])


def kron_power(v: Vector, n: int) -> Vector:
    out: NDArray[Any] = np.ones(1)
    for _ in range(n):
        out = np.kron(out, v)
    return out


#: Operators with at most this many entries are built as dense arrays (sparse bookkeeping costs more
#: than it saves on small levels); larger ones as scipy.sparse CSR.
DENSE_ENTRIES = 1 << 18


try:  # Y += A X for CSR A and C-ordered X, Y, in place (csr_times_dense)
    from scipy.sparse._sparsetools import csr_matvecs as _csr_matvecs
except ImportError:  # pragma: no cover - a scipy without the routine: the public product
    _csr_matvecs = None


def csr_times_dense(A: Sparse, X: NDArray[np.float64], out: NDArray[np.float64]) -> None:
    """out += A X for a CSR matrix A and C-ordered float arrays X (q x c) and out (p x c) (views of larger ones
    allowed when their rows are contiguous), by scipy's C routine called directly: scipy's ``A @ X`` checks and
    converts at every call, and the evaluator's products by the inner operators were several times the
    arithmetic."""
    if (_csr_matvecs is not None and X.flags.c_contiguous and out.flags.c_contiguous and X.dtype == np.float64
            and out.dtype == np.float64 and A.data.dtype == np.float64 and A.indptr.dtype == A.indices.dtype):
        _csr_matvecs(A.shape[0], A.shape[1], X.shape[1], A.indptr, A.indices, A.data, X.reshape(-1),
                     out.reshape(-1))
    else:
        out += A @ X


def is_sparse(m: Any) -> bool:
    """scipy.sparse.issparse, answered at once for a numpy array (scipy's test is an isinstance of an abstract
    base class: about a microsecond, and the chains ask it tens of thousands of times)."""
    return type(m) is not np.ndarray and sp.issparse(m)


def _is_dense(shape: tuple[int, int]) -> bool:
    return shape[0] * shape[1] <= DENSE_ENTRIES


def _csr(rows: Any, cols: Any, vals: Any, shape: tuple[int, int]) -> Any:
    """A matrix from its entries, each at a position of its own (the count operators' entries are: one per
    composition and phase, or per composition and batch of phases): dense when small (``DENSE_ENTRIES``,
    the entries assigned in one go: ``np.add.at`` was 5% of a 16-robot optimisation), CSR otherwise."""
    if _is_dense(shape):
        out = np.zeros(shape)
        out[np.asarray(rows, dtype=np.intp), np.asarray(cols, dtype=np.intp)] = vals
        return out
    return sparse_from_entries(rows, cols, vals, shape)


def dense_entries(m: NDArray[np.float64]) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.float64]]:
    """(rows, cols, values) of the non-zero entries of a dense matrix, row by row: the positions from the
    flat indices of a boolean mask (numpy's two-dimensional ``nonzero`` of a float array, which
    ``scipy.sparse`` uses on dense input, is about ten times slower: 1.2 ms against 0.1 ms at 272 x 560)."""
    m = np.ascontiguousarray(m, dtype=float)
    flat = np.flatnonzero(m != 0)
    rows, cols = np.divmod(flat, m.shape[1])
    return rows, cols, m.ravel()[flat]


def csr_from_dense(m: NDArray[np.float64]) -> Sparse:
    """A dense matrix as CSR, from :func:`dense_entries` (already in row order: no sorting)."""
    m = np.asarray(m, dtype=float)
    rows, cols, vals = dense_entries(m)
    indptr = np.zeros(m.shape[0] + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=m.shape[0]), out=indptr[1:])
    return sp.csr_matrix((vals, cols.astype(np.int32), indptr), shape=m.shape)


try:  # COO -> CSR in one C pass, without scipy's checks, sorting and duplicate summing (sparse_from_entries)
    from scipy.sparse._sparsetools import coo_tocsr as _coo_tocsr
except ImportError:  # pragma: no cover - a scipy without the routine: its public constructors
    _coo_tocsr = None


class CSRArrays(NamedTuple):
    """A CSR matrix as its three arrays, for code that multiplies through scipy's C routine itself (the
    iterative solver's products): scipy's constructor checks, prunes and probes index types, about 0.1 ms a
    matrix, and a ladder's depth builds a few hundred of them."""

    shape: tuple[int, int]
    indptr: NDArray[np.int32]
    indices: NDArray[np.int32]
    data: NDArray[np.float64]

    def tocsr(self) -> Sparse:
        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)


def _entries(rows: Any, cols: Any, vals: Any, shape: tuple[int, int]) -> tuple[Any, Any, NDArray[np.float64]]:
    """The entries as arrays, checked: the C routine does not check its indices, and one out of range would
    write outside its arrays."""
    rows, cols = np.asarray(rows), np.asarray(cols)
    vals = np.asarray(vals, dtype=float)
    if not rows.shape == cols.shape == vals.shape:
        raise ValueError(f"rows, cols and vals differ in shape: {rows.shape}, {cols.shape}, {vals.shape}")
    if rows.size and (rows.min() < 0 or rows.max() >= shape[0] or cols.min() < 0 or cols.max() >= shape[1]):
        raise ValueError(f"an entry lies outside the {shape[0]} x {shape[1]} matrix")
    return rows, cols, vals


def _compressed(major: Any, minor: Any, vals: NDArray[np.float64], n_major: int, n_minor: int) -> CSRArrays | None:
    """(indptr, indices, data) compressed along ``major`` by scipy's COO-to-CSR routine called once; None where
    the routine is missing or the sizes need 64-bit indices (then scipy's public constructors)."""
    if _coo_tocsr is None or max(n_major, n_minor, vals.size) >= 2**31:
        return None
    indptr = np.empty(n_major + 1, dtype=np.int32)
    indices = np.empty(vals.size, dtype=np.int32)
    data = np.empty(vals.size)
    _coo_tocsr(n_major, n_minor, vals.size, major.astype(np.int32), minor.astype(np.int32), vals, indptr, indices,
               data)
    return CSRArrays((n_major, n_minor), indptr, indices, data)


def sparse_from_entries(rows: Any, cols: Any, vals: Any, shape: tuple[int, int], *, fmt: str = "csr",
                        duplicates: bool = False) -> Sparse:
    """A CSR (or CSC, ``fmt="csc"``) matrix from its entries by scipy's own COO-to-CSR routine called once:
    the public constructor's checks, index-type probing, sorting and duplicate summing cost five times the
    conversion (0.77 ms against 0.16 ms for 20,000 entries), and the level chains build thousands of small
    operators. ``duplicates``: entries may share a place (a Kronecker sum's diagonals): they are summed;
    else each must have a place of its own. The column indices of a row may come unsorted, which products,
    conversions and sparse LU accept."""
    if fmt not in ("csr", "csc"):
        raise ValueError(f"fmt must be csr or csc, got {fmt!r}")
    rows, cols, vals = _entries(rows, cols, vals, shape)
    kind = sp.csr_matrix if fmt == "csr" else sp.csc_matrix
    packed = (_compressed(rows, cols, vals, shape[0], shape[1]) if fmt == "csr"
              else _compressed(cols, rows, vals, shape[1], shape[0]))
    out = kind((vals, (rows, cols)), shape=shape) if packed is None else \
        kind((packed.data, packed.indices, packed.indptr), shape=shape)
    if duplicates:
        out.sum_duplicates()
    return out


def csr_arrays(rows: Any, cols: Any, vals: Any, shape: tuple[int, int]) -> CSRArrays | Sparse:
    """:func:`sparse_from_entries` (CSR, each entry at a place of its own) as :class:`CSRArrays`, without scipy's
    constructor; a scipy matrix where the C routine is missing or the sizes need 64-bit indices."""
    rows, cols, vals = _entries(rows, cols, vals, shape)
    packed = _compressed(rows, cols, vals, shape[0], shape[1])
    return sp.csr_matrix((vals, (rows, cols)), shape=shape) if packed is None else packed


def _as(m: Any, dense: bool) -> Any:
    if type(m) is np.ndarray and m.dtype == np.float64:  # the common case, without scipy's isinstance (an ABC's)
        return m if dense else csr_from_dense(m)
    if dense:
        return np.asarray(m.toarray()) if sp.issparse(m) else np.asarray(m, dtype=float)
    return sp.csr_matrix(m) if sp.issparse(m) else csr_from_dense(m)


#: The small dense identities handed out by :func:`_eye` (read-only constants, at most ``KEPT_EYE`` states: 2 MB
#: in all), so that :func:`_is_identity` knows them at sight.
_EYES: dict[int, NDArray[np.float64]] = {}
KEPT_EYE = 64


def _is_identity(m: NDArray[np.float64]) -> bool:
    n = m.shape[0]
    if _EYES.get(n) is m:
        return n > 1
    if n <= 1 or m.shape[1] != n or m[0, 0] != 1.0:  # most factors fail the first entry
        return False
    return np.count_nonzero(m) == n and bool((np.diagonal(m) == 1.0).all())


def _kron(a: Any, b: Any) -> Any:
    """a (x) b, dense when the product is small, CSR otherwise. A dense product with an identity factor
    copies the other factor into the blocks (diagonal) of zeros instead of multiplying every entry (most
    of the chain's building for the ladder's depths)."""
    dense = _is_dense((a.shape[0] * b.shape[0], a.shape[1] * b.shape[1]))
    if dense:
        A, B = _as(a, True), _as(b, True)
        if _is_identity(A):
            n = A.shape[0]
            out = np.zeros((n, B.shape[0], n, B.shape[1]))
            idx = np.arange(n)
            out[idx, :, idx, :] = B
            return out.reshape(n * B.shape[0], n * B.shape[1])
        if _is_identity(B):
            n = B.shape[0]
            out = np.zeros((A.shape[0], n, A.shape[1], n))
            idx = np.arange(n)
            out[:, idx, :, idx] = A
            return out.reshape(A.shape[0] * n, A.shape[1] * n)
        return fast_kron(A, B)
    return sp.kron(_as(a, False), _as(b, False), format="csr")


def _eye(n: int) -> Any:
    """The n x n identity: dense (one read-only array per n, kept) when small, else CSR."""
    if not _is_dense((n, n)):
        return sp.identity(n, format="csr")
    if n > KEPT_EYE:
        return np.eye(n)
    eye = _EYES.get(n)
    if eye is None:
        eye = np.eye(n)
        eye.flags.writeable = False
        eye = _EYES.setdefault(n, eye)
    return eye


def _sum(parts: list[Any]) -> Any:
    """Sum of operators of one shape (dense when the result is small)."""
    dense = _is_dense(parts[0].shape)
    total = _as(parts[0], dense).copy() if dense else _as(parts[0], False)
    for p in parts[1:]:
        total = total + _as(p, dense)
    return total


def to_dense(m: Any) -> NDArray[np.float64]:
    return np.asarray(m.toarray()) if is_sparse(m) else np.asarray(m, dtype=float)


def to_sparse(m: Any) -> Sparse:
    return sp.csr_matrix(m) if sp.issparse(m) else csr_from_dense(m)


#: The tagged page's levels are factorised densely up to this many states, by sparse LU above (it has a few
#: entries a row: 3.8 ms against 22 ms at 752 states, 2.5 ms against 4.7 ms at 304; dense wins below ~100).
DENSE_LU_STATES = 128


def _dense_lu(A: NDArray[np.float64]) -> Any:
    """x -> A^{-1} x by LAPACK's LU (getrf, getrs) called directly: scipy.linalg's lu_factor and lu_solve
    check their arguments at every call, 30 us against 2.5 us on the tagged page's smallest levels (two
    states each on the exponential surrogate's chain, one per waiting page)."""
    lu, piv, info = dgetrf(A)
    if info > 0:
        raise np.linalg.LinAlgError(f"singular matrix: U[{info - 1}, {info - 1}] is zero")

    def solve(rhs: NDArray[np.float64]) -> NDArray[np.float64]:
        x, _ = dgetrs(lu, piv, rhs)
        return np.asarray(x)

    return solve


#: The column ordering of sparse LU: minimum degree on A^T + A suits the levels' generators, whose pattern is
#: nearly symmetric (1.3 ms against 1.8 ms for COLAMD, with a quarter less fill, at 512 states, depth 2).
PERMC_SPEC = "MMD_AT_PLUS_A"


def _factorise(A: Any) -> Any:
    """x -> A^{-1} x: dense LU up to ``DENSE_LU_STATES`` states, sparse LU above."""
    if A.shape[0] <= DENSE_LU_STATES:
        return _dense_lu(to_dense(A))
    return spla.splu(A if getattr(A, "format", None) == "csc" else sp.csc_matrix(A), permc_spec=PERMC_SPEC).solve


#: :func:`mmatrix_inverse` inverts blocks of at most this many states by LAPACK (getrf, getri), larger ones by
#: halves: this OpenBLAS's triangular kernels (trsm, getri) run at a fifth of its matrix product's speed (a
#: 200-state inverse 1.1 ms by getri against 0.3 ms for a product of the same size), so the halves' products
#: carry the flops. Measured on levels of 4, 8, ..., 200 states: leaves of 48 states 0.010 s for all fifty,
#: 0.015 at 16, 0.023 at 8; ``np.linalg.solve`` with as many right-hand sides 0.028-0.035 s.
INVERSE_LEAF = 48


def small_solve(A: NDArray[np.float64], B: NDArray[np.float64]) -> NDArray[np.float64]:
    """A^{-1} B by LAPACK's gesv called directly: ``np.linalg.solve``'s type checks cost three times the solve
    of a 4-state level (9 us against 3 us), and the exponential surrogate's passes make thousands."""
    _, _, x, info = dgesv(A, B)
    if info != 0:
        raise np.linalg.LinAlgError(f"singular {A.shape[0]} x {A.shape[0]} block (LAPACK info {info})")
    return np.asarray(x)


def mmatrix_inverse(H: NDArray[np.float64]) -> NDArray[np.float64]:
    """H^{-1} for a non-singular M-matrix H (minus a generator block that loses probability to other levels)
    by 2 x 2 block elimination without pivoting, H = [[A, B], [C, D]]:

        H^{-1} = [[A^{-1} + A^{-1} B S^{-1} C A^{-1}, -A^{-1} B S^{-1}], [-S^{-1} C A^{-1}, S^{-1}]],
        S = D - C A^{-1} B,

    A and S inverted the same way, down to ``INVERSE_LEAF`` states (LAPACK's LU with partial pivoting).

    Why no pivoting is needed: a principal block of a non-singular M-matrix and its Schur complement are
    non-singular M-matrices (Berman and Plemmons, *Nonnegative Matrices in the Mathematical Sciences*, 1994,
    ch. 6), so every block inverted exists and is non-negative. B, C <= 0 and A^{-1}, S^{-1} >= 0 make every
    product above of one sign: the off-diagonal entries of S and all four blocks of the inverse are sums of
    terms of one sign (no cancellation); only the diagonal of S is a difference, as in any LU elimination.
    The input is not changed."""
    n = H.shape[0]
    if n <= INVERSE_LEAF:
        lu, piv, info = dgetrf(H)
        if info == 0:
            inv, info = dgetri(lu, piv, overwrite_lu=True)
        if info != 0:
            raise np.linalg.LinAlgError(f"singular {n} x {n} block (LAPACK info {info})")
        return np.asarray(inv)
    h = n // 2
    A, B, C, D = H[:h, :h], H[:h, h:], H[h:, :h], H[h:, h:]
    A_inv = mmatrix_inverse(A)
    AB = A_inv @ B  # <= 0
    S_inv = mmatrix_inverse(D - C @ AB)
    out = np.empty((n, n))
    out[h:, h:] = S_inv
    lower = out[h:, :h]
    np.matmul(S_inv, C @ A_inv, out=lower)  # S^{-1} C A^{-1} <= 0
    lower *= -1.0
    np.matmul(AB, S_inv, out=out[:h, h:])  # A^{-1} B S^{-1} <= 0
    out[:h, h:] *= -1.0
    out[:h, :h] = A_inv
    out[:h, :h] -= AB @ lower
    return out
