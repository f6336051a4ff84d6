"""The blocks Q_{i,i'} of the generator of xi_t = (i, nu, m, r_1..r_{i-1}) (paper 000, Section 3, Lemma).

Level 0 holds the W phases of the arrival process; level i >= 1 holds (nu, m, r_1, ..., r_{i-1}) in
lexicographic order, W M R^{i-1} states (r_j: obsolescence phase of the j-th waiting page). Every block
is built from Kronecker products of the small matrices, as scipy.sparse CSR, so the full generator is
never formed densely. Notation, mapped to the paper:

- ``arrivals_by_admitted(i)[a]``: sum of D_k^(chi(i)) over the batch sizes k of which a pages are admitted
  at level i (a = 0 collects D_0 and the batches lost whole); with partial admission this is the Lemma's
  D_a and (D(1) - sum_{r<K-i} D_r) for the top block.
- ``A(j) = S (+) Gamma^{(+)j}``: phases of service and of j waiting pages (the paper's A_j).
- ``B(j)``: level j+1 -> j without arrivals (service completion S_0 beta, the head page's obsolescence
  phase discarded; or the obsolescence of one of the j waiting pages, Gamma_0^{(+)j}) (the paper's B_j).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from ._model import QueueModel
from ._policy import ThresholdPolicy

Sparse = sp.csr_matrix


def _eye(n: int) -> Sparse:
    return sp.identity(n, format="csr")


def _kron(a: object, b: object) -> Sparse:
    return sp.kron(a, b, format="csr")


def kron_power_vector(v: NDArray[np.float64], n: int) -> NDArray[np.float64]:
    """v (x) v (x) ... (x) v, n times (n = 0 gives [1])."""
    out = np.ones(1)
    for _ in range(n):
        out = np.kron(out, v)
    return out


class ObsolescenceLaw:
    """(gamma, Gamma, Gamma_0), with the never-stale case as one phase of rate 0."""

    def __init__(self, model: QueueModel) -> None:
        if model.obsolescence is None:
            self.gamma = np.ones(1)
            self.Gamma = np.zeros((1, 1))
        else:
            self.gamma = np.asarray(model.obsolescence.beta)
            self.Gamma = np.asarray(model.obsolescence.S)
        self.Gamma0 = -self.Gamma.sum(axis=1)
        self.R = self.gamma.size


class Blocks:
    """Generator blocks of the controlled queue under one policy."""

    def __init__(self, model: QueueModel, policy: ThresholdPolicy) -> None:
        model.check_policy(policy)
        self.model = model
        self.policy = policy
        self.K = model.capacity
        self.W = model.arrivals.order
        self.beta = np.asarray(model.service.beta)
        self.S = np.asarray(model.service.S)
        self.S0 = model.service.exit_rates
        self.M = self.beta.size
        ob = ObsolescenceLaw(model)
        self.gamma, self.Gamma, self.Gamma0, self.R = ob.gamma, ob.Gamma, ob.Gamma0, ob.R
        self._cache: dict[tuple[int, int], Sparse | None] = {}

    # -- sizes --------------------------------------------------------------------------------
    def inner_dim(self, i: int) -> int:
        """Size of the (m, r_1..r_{i-1}) part at level i (1 at level 0)."""
        return 1 if i == 0 else self.M * self.R ** (i - 1)

    def dim(self, i: int) -> int:
        return self.W * self.inner_dim(i)

    @property
    def n_states(self) -> int:
        return sum(self.dim(i) for i in range(self.K + 1))

    # -- small pieces -------------------------------------------------------------------------
    def mode(self, i: int) -> int:
        return self.policy.robots_at_level[i]

    def arrivals_by_admitted(self, i: int) -> list[NDArray[np.float64]]:
        """[sum of D_k with a pages admitted at level i for a = 0..K-i]."""
        bmap = self.model.arrivals[self.mode(i)]
        free = self.K - i
        out = [np.zeros((self.W, self.W)) for _ in range(free + 1)]
        out[0] += bmap.D0
        for k, Dk in enumerate(bmap.D[1:], start=1):
            out[self.model.admission.admitted(k, free)] += Dk
        return out

    @cached_property
    def _gamma0_sums(self) -> list[Sparse]:
        """Gamma_0^{(+)j}: R^j x R^{j-1}, one waiting page of j expires (j = 0 unused)."""
        g0 = sp.csr_matrix(self.Gamma0.reshape(-1, 1))
        out: list[Sparse] = [sp.csr_matrix((1, 1))]
        for j in range(1, self.K):
            terms = [_kron(_kron(_eye(self.R**p), g0), _eye(self.R ** (j - 1 - p))) for p in range(j)]
            out.append(sum(terms[1:], terms[0]).tocsr())
        return out

    def A(self, j: int) -> Sparse:
        """S (+) Gamma^{(+)j}: dimension M R^j."""
        out = sp.csr_matrix(self.S)
        G = sp.csr_matrix(self.Gamma)
        for _ in range(j):
            out = (_kron(out, _eye(self.R)) + _kron(_eye(out.shape[0]), G)).tocsr()
        return out

    def B(self, j: int) -> Sparse:
        """Level j+1 -> j without arrivals, on (m, r_1..r_j) -> (m', r_1..r_{j-1}); j >= 1."""
        S0beta = sp.csr_matrix(np.outer(self.S0, self.beta))
        eR = sp.csr_matrix(np.ones((self.R, 1)))
        service = _kron(S0beta, _kron(eR, _eye(self.R ** (j - 1))))
        expire = _kron(_eye(self.M), self._gamma0_sums[j])
        return (service + expire).tocsr()

    # -- blocks ---------------------------------------------------------------------------------
    def Q(self, i: int, j: int) -> Sparse | None:
        """Block Q_{i,j}, or None where it is zero."""
        key = (i, j)
        if key not in self._cache:
            self._cache[key] = self._block(i, j)
        return self._cache[key]

    def _block(self, i: int, j: int) -> Sparse | None:
        K, W = self.K, self.W
        if j < i - 1 or j > K or i > K or i < 0 or j < 0:
            return None
        if j == i - 1:
            if i == 1:
                return _kron(_eye(W), sp.csr_matrix(self.S0.reshape(-1, 1)))
            return _kron(_eye(W), self.B(i - 1))
        arr = self.arrivals_by_admitted(i)
        if j == i:
            if i == 0:
                return sp.csr_matrix(arr[0])
            inner = self.A(i - 1)
            return (_kron(arr[0], _eye(inner.shape[0])) + _kron(_eye(W), inner)).tocsr()
        a = j - i
        if not arr[a].any():
            return None
        if i == 0:
            entry = np.kron(self.beta, kron_power_vector(self.gamma, a - 1)).reshape(1, -1)
            return _kron(arr[a], sp.csr_matrix(entry))
        newpages = sp.csr_matrix(kron_power_vector(self.gamma, a).reshape(1, -1))
        return _kron(arr[a], _kron(_eye(self.inner_dim(i)), newpages))

    def is_qbd(self) -> bool:
        """True when no level jumps up by more than one (ordinary arrivals, paper 000 Section 6)."""
        return all(self.Q(i, j) is None for i in range(self.K + 1) for j in range(i + 2, self.K + 1))

    def full(self) -> Sparse:
        """The whole generator, sparse."""
        rows = [[self.Q(i, j) for j in range(self.K + 1)] for i in range(self.K + 1)]
        for i in range(self.K + 1):
            rows[i][i] = self.Q(i, i)
        return sp.bmat(rows, format="csr")
