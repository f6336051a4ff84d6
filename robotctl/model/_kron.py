"""Kronecker sums F_1 (+) F_2 (+) ... (+) F_m of small matrices, applied and inverted without forming them.

A level of the ordered-phase chain moves by D_0 (+) S (+) Gamma (+) ... (+) Gamma: one small matrix per
component (arrival phase, service phase, each waiting page's obsolescence phase). On a vector laid out as
a tensor of shape (n_1, ..., n_m), the sum acts axis by axis, sum_k x x_k F_k, in O(n sum_k n_k) work for
n = prod n_k states; with eigen-decompositions F_k = V_k diag(lambda_k) V_k^{-1} it is inverted the same
way (Graham, *Kronecker Products and Matrix Calculus*, 1981, Section 2.3: the eigenvalues of a Kronecker
sum are the sums lambda_{1,i_1} + ... + lambda_{m,i_m}, with eigenvectors V_1 (x) ... (x) V_m):

    x (F_1 (+) ... (+) F_m) = b   <=>   x = b (V_1 (x) ... (x) V_m) Lambda^{-1} (V_1 (x) ... (x) V_m)^{-1}.

Eigenvectors can be ill-conditioned (a defective factor, such as an Erlang law with equal rates, has
none). :meth:`KronSum.solve_row` and :meth:`KronSum.solve_col` are therefore used as preconditioners, or
refined against the exact products (:func:`refine`), never trusted alone: a factor whose eigenvector matrix
is worse conditioned than ``COND_LIMIT`` is perturbed slightly before decomposition (the inverse is then
approximate, the products stay exact).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]
CArray = NDArray[np.complex128]

#: Eigenvector matrices conditioned worse than this are replaced by those of a slightly perturbed factor.
COND_LIMIT = 1e8


def _mode_product_right(T: NDArray[Any], k: int, F: NDArray[Any]) -> NDArray[Any]:
    """(T x_k F)[..., j, ...] = sum_i T[..., i, ...] F[i, j] on axis k."""
    shape = T.shape
    left = int(np.prod(shape[:k]))
    right = int(np.prod(shape[k + 1:]))
    out = np.matmul(F.T, T.reshape(left, shape[k], right))
    return out.reshape((*shape[:k], F.shape[1], *shape[k + 1:]))


def _mode_product_left(T: NDArray[Any], k: int, F: NDArray[Any]) -> NDArray[Any]:
    """(F x_k T)[..., j, ...] = sum_i F[j, i] T[..., i, ...] on axis k."""
    return _mode_product_right(T, k, F.T)


class KronSum:
    """F_1 (+) ... (+) F_m for square factors F_k (n_k x n_k).

    Parameters
    ----------
    factors : sequence of ndarray
    rng_seed : int
        Seed of the perturbation of ill-conditioned factors (reproducible).
    """

    def __init__(self, factors: Sequence[Array], *, rng_seed: int = 0) -> None:
        self.factors = [np.asarray(f, dtype=float) for f in factors]
        self.dims = tuple(f.shape[0] for f in self.factors)
        self.n = int(np.prod(self.dims))
        self._eig: tuple[list[CArray], list[CArray], CArray] | None = None
        self.rng_seed = rng_seed
        #: True when some factor had to be perturbed: solves are then approximate
        self.perturbed = False

    # -- products -----------------------------------------------------------------------------
    def row(self, x: Array) -> Array:
        """x (F_1 (+) ... (+) F_m) for a row vector x (length n, or shape (..., n) is not supported)."""
        T = np.asarray(x).reshape(self.dims)
        out = np.zeros_like(T)
        for k, F in enumerate(self.factors):
            out += _mode_product_right(T, k, F)
        return out.reshape(-1)

    def col(self, x: Array) -> Array:
        """(F_1 (+) ... (+) F_m) x for a column vector x."""
        T = np.asarray(x).reshape(self.dims)
        out = np.zeros_like(T)
        for k, F in enumerate(self.factors):
            out += _mode_product_left(T, k, F)
        return out.reshape(-1)

    # -- inverse --------------------------------------------------------------------------------
    @property
    def well_conditioned(self) -> bool:
        """True when no factor had to be perturbed, so :meth:`solve_row` and :meth:`solve_col` are exact
        up to rounding (decomposes the factors on first use). A defective factor, such as an Erlang law,
        makes the inverse only approximate: callers factorise such levels instead."""
        self._decompose()
        return not self.perturbed

    def _decompose(self) -> tuple[list[CArray], list[CArray], CArray]:
        if self._eig is None:
            rng = np.random.default_rng(self.rng_seed)
            Vs, Vinvs, lams = [], [], []
            for F in self.factors:
                lam, V = np.linalg.eig(F)
                scale = max(float(np.abs(F).max()), 1e-300)
                tries = 0
                while np.linalg.cond(V) > COND_LIMIT and tries < 5:
                    self.perturbed = True
                    tries += 1
                    G = F + np.diag(rng.uniform(-1.0, 1.0, F.shape[0])) * scale * 10.0 ** (-8 + tries)
                    lam, V = np.linalg.eig(G)
                Vs.append(V.astype(complex))
                Vinvs.append(np.linalg.inv(V).astype(complex))
                lams.append(lam.astype(complex))
            total = np.zeros(1, dtype=complex)
            for lam in lams:
                total = (total[:, None] + lam[None, :]).ravel()
            self._eig = (Vs, Vinvs, total.reshape(self.dims))
        return self._eig

    def solve_row(self, b: Array) -> Array:
        """x with x (F_1 (+) ... (+) F_m) = b (approximate when ``perturbed``)."""
        Vs, Vinvs, lam = self._decompose()
        T = np.asarray(b, dtype=complex).reshape(self.dims)
        for k, V in enumerate(Vs):
            T = _mode_product_right(T, k, V)
        T = T / lam
        for k, Vinv in enumerate(Vinvs):
            T = _mode_product_right(T, k, Vinv)
        return np.asarray(T.real.reshape(-1))

    def solve_col(self, b: Array) -> Array:
        """x with (F_1 (+) ... (+) F_m) x = b (approximate when ``perturbed``)."""
        Vs, Vinvs, lam = self._decompose()
        T = np.asarray(b, dtype=complex).reshape(self.dims)
        for k, Vinv in enumerate(Vinvs):
            T = _mode_product_left(T, k, Vinv)
        T = T / lam
        for k, V in enumerate(Vs):
            T = _mode_product_left(T, k, V)
        return np.asarray(T.real.reshape(-1))


def refine(apply: Callable[[Array], Array], approx_solve: Callable[[Array], Array], b: Array, *,
           rtol: float = 1e-13, maxiter: int = 200) -> tuple[Array, float, int]:
    """Solve apply(x) = b by GMRES preconditioned with ``approx_solve``; returns (x, relative residual,
    iterations). When ``approx_solve`` is exact, one step suffices."""
    import scipy.sparse.linalg as spla

    n = b.size
    x = approx_solve(b)
    r = b - apply(x)
    norm_b = float(np.linalg.norm(b)) or 1.0
    if float(np.linalg.norm(r)) <= rtol * norm_b:
        return x, float(np.linalg.norm(r)) / norm_b, 0
    A = spla.LinearOperator((n, n), matvec=apply, dtype=float)
    P = spla.LinearOperator((n, n), matvec=approx_solve, dtype=float)
    count = [0]

    def tick(_: object) -> None:
        count[0] += 1

    dx, _info = spla.gmres(A, r, M=P, rtol=rtol * norm_b / max(float(np.linalg.norm(r)), 1e-300), atol=0.0,
                           restart=min(60, n), maxiter=maxiter, callback=tick, callback_type="pr_norm")
    x = x + dx
    res = float(np.linalg.norm(b - apply(x))) / norm_b
    return x, res, count[0]
