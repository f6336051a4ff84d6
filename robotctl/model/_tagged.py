"""The tagged page of a level chain (Section 5 of paper 000, module ``model._sojourn`` for the exact blocks):
a tagged page T with n waiting pages ahead lives on inner(n + 1) (x) R (T's own phase last), moves by
A(n + 1) (+) Gamma, goes down by down(n + 1) (x) I_R, and is absorbed when it enters service or expires.
Pages ahead of T leave in FIFO order, so T is promoted only when no counted page is ahead of it; the
counted pages ahead of it are promoted in random order, as in the chain. :class:`model._levels.LevelChain`
keeps the vectors (``LevelChain.tagged``) and weighs them into its rate columns; this module computes them,
one absorbing chain a level."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ._matrices import (
    DENSE_LU_STATES,
    Vector,
    _dense_lu,
    _factorise,
    dense_entries,
    fast_kron,
    is_sparse,
    sparse_from_entries,
    to_dense,
)

if TYPE_CHECKING:
    from ._levels import LevelChain


def tagged_vectors(chain: LevelChain) -> tuple[tuple[Vector, ...], ...]:
    """LevelChain.tagged, computed: for n = -1..K-2 waiting pages ahead of a tagged page, level by level."""
    M, R = chain.M, chain.R
    served = [np.ones(M)]
    obsolete = [np.zeros(M)]
    served_t = [np.linalg.solve(-chain.S, np.ones(M))]
    obsolete_t = [np.zeros(M)]
    # the four vectors of the last n side by side: one product with the level's down-block for all four,
    # and two solves of two right-hand sides each (v, o; then w, w2, which need v and o)
    prev = np.column_stack([served[0], obsolete[0], served_t[0], obsolete_t[0]])
    for n in range(0, chain.K - 1):
        inner = chain.inner_dim(n + 1)
        if n == 0:
            moved = np.kron(np.outer(chain.S0, chain.beta), np.ones((R, 1))) @ prev
        else:  # (down(n + 1) (x) I_R) prev, without forming the Kronecker product
            before = prev.shape[0] // R
            moved = np.asarray(chain.down(n + 1) @ prev.reshape(before, R * 4)).reshape(inner * R, 4)
        moved[:, 1] += np.tile(chain.Gamma0, inner)  # T's own obsolescence
        solve = _solver(chain, n)
        first = solve(moved[:, :2])  # v, o
        second = solve(first + moved[:, 2:])  # w, w2
        prev = np.concatenate([first, second], axis=1)
        averaged = np.einsum("irk,r->ki", prev.reshape(inner, R, 4), chain.gamma)
        for acc, x in zip((served, obsolete, served_t, obsolete_t), averaged):
            acc.append(x)
    return tuple(served), tuple(obsolete), tuple(served_t), tuple(obsolete_t)


def _solver(chain: LevelChain, n: int) -> Any:
    """X -> (-(A(n + 1) (+) Gamma))^{-1} X for right-hand sides as columns: dense LU on small levels (the
    generator formed densely), sparse LU on larger ones and on levels with counted pages; on large
    ordered ones the Kronecker-sum inverse refined by GMRES against the exact product (``model._kron``),
    a column at a time."""
    from ._kron import KronSum, refine

    factors = [*chain.kron_factors(n + 1), chain.Gamma]
    size = int(np.prod([f.shape[0] for f in factors]))
    if size <= DENSE_LU_STATES:
        R = chain.R
        A = to_dense(chain.A(n + 1))
        return _dense_lu(-(fast_kron(A, np.eye(R)) + fast_kron(np.eye(A.shape[0]), chain.Gamma)))
    ks = KronSum(factors, rng_seed=n)
    if size <= 600 or (size <= 200_000 and (chain.shape(n + 1).counted or not ks.well_conditioned)):
        # counted pages: the count generator's eigenvectors are badly conditioned; a defective factor
        # (an Erlang law) has none, and the perturbed inverse stalls GMRES: LU is safer
        return _factorise(-tagged_generator(chain, n))

    direct: list[Any] = []

    def solve_column(rhs: Vector) -> Vector:
        if direct:
            return np.asarray(direct[0](rhs))
        x, res, _ = refine(ks.col, ks.solve_col, -np.asarray(rhs, dtype=float), rtol=1e-14)
        if not res <= 1e-11:
            if size > 200_000:
                raise ArithmeticError(f"tagged-page solve at {n} pages ahead stalled at residual {res:.1e}")
            # stalled: factorise this level once, and use LU from now on
            direct.append(_factorise(-tagged_generator(chain, n)))
            return np.asarray(direct[0](rhs))
        return x

    return lambda rhs: np.column_stack([solve_column(np.ascontiguousarray(c)) for c in rhs.T])


def tagged_generator(chain: LevelChain, n: int) -> Any:
    """A(n + 1) (+) Gamma, the tagged page's generator with n pages ahead, as CSC (the format sparse LU
    takes), from the entries of A(n + 1): Kronecker products with identities formed densely were most
    of its cost, and building CSR then converting it to CSC twice what the factorisation cost."""
    A = chain.A(n + 1)
    if is_sparse(A):
        coo = A.tocoo()
        a_rows, a_cols, a_vals = coo.row, coo.col, coo.data
    else:
        a_rows, a_cols, a_vals = dense_entries(A)
    R, inner = chain.R, chain.inner_dim(n + 1)
    g_rows, g_cols, g_vals = dense_entries(chain.Gamma)
    rows = [(a_rows[:, None] * R + np.arange(R)[None, :]).ravel(),
            (np.arange(inner)[:, None] * R + g_rows[None, :]).ravel()]
    cols = [(a_cols[:, None] * R + np.arange(R)[None, :]).ravel(),
            (np.arange(inner)[:, None] * R + g_cols[None, :]).ravel()]
    vals = [np.repeat(a_vals, R), np.tile(g_vals, inner)]
    size = inner * R
    return sparse_from_entries(np.concatenate(rows), np.concatenate(cols), np.concatenate(vals), (size, size),
                               fmt="csc", duplicates=True)  # A's diagonal and Gamma's meet
