"""Batch Markovian arrival processes (paper 000, Section 2, eq. (1)).

A BMAP of order W is a tuple of W x W matrices ``D = (D_0, D_1, ..., D_kmax)``: D_0 holds the phase
changes without arrivals (negative diagonal), D_k the phase changes that bring a batch of k pages.
D(1) = sum_k D_k is the generator of the directing process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import InitVar, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from robotctl._errors import InputError

from ._validate import (
    as_matrix,
    check_generator_rows,
    check_irreducible,
    check_nonnegative,
    check_shape,
)


def stationary_of_generator(Q: NDArray[np.float64]) -> NDArray[np.float64]:
    """Stationary row vector of an irreducible generator (small, dense)."""
    n = Q.shape[0]
    A = Q.T.copy()
    A[-1, :] = 1.0
    b = np.zeros(n)
    b[-1] = 1.0
    x = np.linalg.solve(A, b)
    x = np.clip(x, 0.0, None)
    return x / x.sum()


@dataclass(frozen=True, eq=False)
class BMAP:
    """A batch Markovian arrival process ``D = (D_0, D_1, ..., D_kmax)``.

    Attributes
    ----------
    D : tuple of ndarray
        D[0] = D_0 (negative diagonal, nonnegative off-diagonal), D[k] >= 0 for k >= 1 (batches of
        k pages). Trailing all-zero matrices are dropped. The rows of sum(D) sum to zero and sum(D)
        is irreducible.
    """

    D: tuple[NDArray[np.float64], ...]
    field: InitVar[str] = "bmap"

    def __post_init__(self, field: str) -> None:
        if len(self.D) < 2:
            raise InputError(field, f"needs D_0 and at least D_1, got {len(self.D)} matrix(es)",
                             "write [D_0, D_1, ...] with one matrix per batch size")
        mats = [as_matrix(f"{field}.D_{k}", m) for k, m in enumerate(self.D)]
        W = mats[0].shape[0]
        for k, m in enumerate(mats):
            check_shape(f"{field}.D_{k}", m, (W, W))
        check_nonnegative(f"{field}.D_0", mats[0], off_diagonal_only=True)
        for k, m in enumerate(mats[1:], start=1):
            check_nonnegative(f"{field}.D_{k}", m)
        while len(mats) > 2 and not mats[-1].any():
            mats.pop()
        if not any(m.any() for m in mats[1:]):
            raise InputError(f"{field}.D_1", "no arrivals: every D_k with k >= 1 is zero",
                             "a BMAP needs some positive rate in D_1, D_2, ...")
        check_generator_rows(field, mats)
        check_irreducible(f"{field} (D_0 + D_1 + ...)", np.sum(mats, axis=0))
        for m in mats:
            m.flags.writeable = False
        object.__setattr__(self, "D", tuple(mats))

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def from_matrices(cls, matrices: Sequence[ArrayLike], *, field: str = "bmap") -> BMAP:
        return cls(tuple(np.asarray(m, dtype=float) for m in matrices), field)

    @classmethod
    def poisson(cls, rate: float, batch_probs: Sequence[float] = (1.0,), *, field: str = "bmap") -> BMAP:
        """Batch Poisson: batches at ``rate`` per second, size k with probability batch_probs[k-1]."""
        if not (np.isfinite(rate) and rate > 0):
            raise InputError(f"{field}.rate", f"must be a positive finite rate, got {rate!r}",
                             "give batches per second")
        d = np.asarray(batch_probs, dtype=float)
        mats = [np.array([[-float(rate)]])] + [np.array([[float(rate) * p]]) for p in d]
        return cls(tuple(mats), field)

    @classmethod
    def from_map(cls, D0: ArrayLike, D1: ArrayLike, batch_probs: Sequence[float] = (1.0,), *,
                 field: str = "bmap") -> BMAP:
        """BMAP of pages from a MAP of batch epochs: D_k = d_k D_1 (paper 000, Section 7)."""
        D1a = np.asarray(D1, dtype=float)
        return cls((np.asarray(D0, dtype=float), *(p * D1a for p in batch_probs)), field)

    # -- structure ----------------------------------------------------------------------------
    @property
    def order(self) -> int:
        return int(self.D[0].shape[0])

    @property
    def max_batch(self) -> int:
        return len(self.D) - 1

    @property
    def D0(self) -> NDArray[np.float64]:
        return self.D[0]

    @property
    def D1(self) -> NDArray[np.float64]:
        return self.D[1]

    @property
    def generator(self) -> NDArray[np.float64]:
        """D(1) = sum_k D_k."""
        return np.sum(self.D, axis=0)

    @property
    def stationary(self) -> NDArray[np.float64]:
        """theta: theta D(1) = 0, theta e = 1."""
        return stationary_of_generator(self.generator)

    # -- rates and moments (paper 000, Section 2) ---------------------------------------------
    @property
    def rate(self) -> float:
        """Fundamental rate lambda = theta D'(1) e (pages per second)."""
        theta, e = self.stationary, np.ones(self.order)
        return float(sum(k * theta @ Dk @ e for k, Dk in enumerate(self.D)))

    @property
    def batch_rate(self) -> float:
        """lambda_g = theta (-D_0) e (batches per second)."""
        return float(self.stationary @ (-self.D0) @ np.ones(self.order))

    @property
    def batch_size_probs(self) -> NDArray[np.float64]:
        """P(batch size = k), k = 1..kmax, at batch epochs in steady state."""
        theta, e = self.stationary, np.ones(self.order)
        w = np.array([theta @ Dk @ e for Dk in self.D[1:]])
        return np.asarray(w / w.sum())

    @property
    def mean_batch_size(self) -> float:
        return self.rate / self.batch_rate

    def _embedded(self) -> tuple[NDArray[Any], NDArray[Any]]:
        """Phase distribution just after a batch epoch, phi, and P = (-D_0)^{-1} (D(1) - D_0)."""
        theta = self.stationary
        H = self.generator - self.D0
        phi = theta @ H
        phi = phi / phi.sum()
        P = np.linalg.solve(-self.D0, H)
        return phi, P

    def interval_moment(self, k: int) -> float:
        """k-th moment of the stationary interval between batch epochs: k! phi (-D_0)^{-k} e."""
        phi, _ = self._embedded()
        x: NDArray[Any] = np.ones(self.order)
        for _ in range(k):
            x = np.linalg.solve(-self.D0, x)
        return float(np.prod(np.arange(1, k + 1)) * phi @ x)

    @property
    def interval_variance(self) -> float:
        """v = 2 lambda_g^{-1} theta (-D_0)^{-1} e - lambda_g^{-2} (paper 000, Section 2)."""
        m1 = self.interval_moment(1)
        return self.interval_moment(2) - m1 * m1

    @property
    def interval_scv(self) -> float:
        return self.interval_variance / self.interval_moment(1) ** 2

    def lag_correlations(self, lags: int) -> NDArray[np.float64]:
        """Lag-1..lags correlation of consecutive intervals between batch epochs; lag 1 is the
        paper's c_cor."""
        phi, P = self._embedded()
        e = np.ones(self.order)
        m1 = self.interval_moment(1)
        var = self.interval_variance
        x = np.linalg.solve(-self.D0, e)  # (-D0)^{-1} e
        left = phi @ np.linalg.inv(-self.D0)  # phi (-D0)^{-1}
        out = np.empty(lags)
        Pk = np.eye(self.order)
        for k in range(lags):
            Pk = Pk @ P if k else P
            out[k] = (left @ Pk @ x - m1 * m1) / var
        return out

    @property
    def lag1_correlation(self) -> float:
        return float(self.lag_correlations(1)[0])

    # -- transformations ----------------------------------------------------------------------
    def scaled(self, factor: float) -> BMAP:
        """Time-scaled BMAP: every D_k multiplied by ``factor`` (the linear rule D^(r) = r D)."""
        if not (np.isfinite(factor) and factor > 0):
            raise InputError("factor", f"must be positive, got {factor!r}", "use a ratio of robot counts")
        return BMAP(tuple(factor * Dk for Dk in self.D))

    def thinned(self, q: float) -> BMAP:
        """Each batch kept with probability q: D_0' = q D_0 + (1 - q) D(1), D_k' = q D_k."""
        if not (0 < q <= 1):
            raise InputError("q", f"must be in (0, 1], got {q!r}", "a thinning probability")
        return BMAP((q * self.D0 + (1 - q) * self.generator, *(q * Dk for Dk in self.D[1:])))

    def to_list(self) -> list[list[list[float]]]:
        return [Dk.tolist() for Dk in self.D]

    def allclose(self, other: BMAP, *, rtol: float = 1e-9, atol: float = 1e-12) -> bool:
        return len(self.D) == len(other.D) and all(
            a.shape == b.shape and np.allclose(a, b, rtol=rtol, atol=atol) for a, b in zip(self.D, other.D))
