"""Phase-type distributions PH(beta, S) (paper 000, Section 2: service law (beta, S), obsolescence law
(gamma, Gamma))."""

from __future__ import annotations

import math
from dataclasses import InitVar, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from robotctl._errors import InputError

from ._validate import as_matrix, as_vector, check_probability_vector, check_shape, check_subgenerator


def _freeze(*arrays: NDArray[np.float64]) -> None:
    for a in arrays:
        a.flags.writeable = False


@dataclass(frozen=True, eq=False)
class PH:
    """A phase-type law: the absorption time of a Markov chain with initial vector ``beta`` and
    sub-generator ``S`` (paper 000: b_1 = beta (-S)^{-1} e).

    Attributes
    ----------
    beta : ndarray, shape (M,)
        Initial phase distribution (sums to one: no mass at zero).
    S : ndarray, shape (M, M)
        Sub-generator; the exit vector is ``exit_rates = -S e``.
    """

    beta: NDArray[np.float64]
    S: NDArray[np.float64]
    field: InitVar[str] = "ph"

    def __post_init__(self, field: str) -> None:
        beta = as_vector(f"{field}.beta", self.beta)
        S = as_matrix(f"{field}.S", self.S)
        check_shape(f"{field}.S", S, (beta.size, beta.size))
        check_probability_vector(f"{field}.beta", beta)
        check_subgenerator(f"{field}.S", S)
        _freeze(beta, S)
        object.__setattr__(self, "beta", beta)
        object.__setattr__(self, "S", S)

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def exponential(cls, rate: float, *, field: str = "ph") -> PH:
        if not (math.isfinite(rate) and rate > 0):
            raise InputError(f"{field}.rate", f"must be a positive finite rate, got {rate!r}",
                             "give the rate per second, e.g. rate: 1.5")
        return cls(np.array([1.0]), np.array([[-float(rate)]]), field)

    @classmethod
    def erlang(cls, phases: int, rate: float, *, field: str = "ph") -> PH:
        """Erlang with ``phases`` stages each of rate ``rate`` (mean phases / rate)."""
        if phases < 1:
            raise InputError(f"{field}.phases", f"must be >= 1, got {phases}", "use 1 for exponential")
        S = np.diag(np.full(phases, -float(rate))) + np.diag(np.full(phases - 1, float(rate)), 1)
        beta = np.zeros(phases)
        beta[0] = 1.0
        return cls(beta, S, field)

    @classmethod
    def hyperexponential(cls, probs: ArrayLike, rates: ArrayLike, *, field: str = "ph") -> PH:
        p = np.asarray(probs, dtype=float)
        r = np.asarray(rates, dtype=float)
        return cls(p, -np.diag(r), field)

    # -- properties ---------------------------------------------------------------------------
    @property
    def order(self) -> int:
        return int(self.beta.size)

    @property
    def exit_rates(self) -> NDArray[np.float64]:
        """S_0 = -S e."""
        return -self.S.sum(axis=1)

    def moment(self, k: int) -> float:
        """k-th raw moment k! beta (-S)^{-k} e."""
        x: NDArray[Any] = np.ones(self.order)
        for _ in range(k):
            x = np.linalg.solve(-self.S, x)
        return float(math.factorial(k) * self.beta @ x)

    @property
    def mean(self) -> float:
        return self.moment(1)

    @property
    def variance(self) -> float:
        return self.moment(2) - self.mean**2

    @property
    def scv(self) -> float:
        """Squared coefficient of variation."""
        return self.variance / self.mean**2

    def survival(self, t: float) -> float:
        """P(X > t) = beta exp(S t) e."""
        from scipy.linalg import expm

        return float(self.beta @ expm(self.S * t) @ np.ones(self.order))

    def sample(self, rng: np.random.Generator, size: int) -> NDArray[np.float64]:
        """Independent draws by simulating the phase chain (vectorised over draws)."""
        M = self.order
        out = np.zeros(size)
        if size == 0:
            return out
        rates = -np.diag(self.S)
        jump = np.zeros((M, M + 1))
        jump[:, :M] = self.S / rates[:, None]
        np.fill_diagonal(jump[:, :M], 0.0)
        jump[:, M] = self.exit_rates / rates
        cum = np.cumsum(jump, axis=1)
        cum[:, -1] = 1.0
        phase = rng.choice(M, size=size, p=self.beta)
        alive = np.ones(size, dtype=bool)
        while alive.any():
            idx = np.flatnonzero(alive)
            ph = phase[idx]
            out[idx] += rng.exponential(1.0 / rates[ph])
            u = rng.random(idx.size)
            nxt = (u[:, None] > cum[ph]).sum(axis=1)
            done = nxt == M
            alive[idx[done]] = False
            phase[idx[~done]] = nxt[~done]
        return out

    def to_dict(self) -> dict[str, object]:
        if self.order == 1:
            return {"rate": float(-self.S[0, 0])}
        return {"beta": self.beta.tolist(), "S": self.S.tolist()}

    def allclose(self, other: PH, *, rtol: float = 1e-9, atol: float = 1e-12) -> bool:
        return (self.order == other.order and np.allclose(self.beta, other.beta, rtol=rtol, atol=atol)
                and np.allclose(self.S, other.S, rtol=rtol, atol=atol))
