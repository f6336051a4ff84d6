"""The blocks Q_{i,i'} of the generator of xi_t = (i, nu, m, r_1..r_{i-1}) (paper 000, Section 3, Lemma).

Level 0 holds the W phases of the arrival process; level i >= 1 holds (nu, m, r_1, ..., r_{i-1}) in
lexicographic order, W M R^{i-1} states (r_j: obsolescence phase of the j-th waiting page). Every block
is a Kronecker product of the small matrices; small levels are kept dense, large ones as scipy.sparse
CSR, and the full generator is never formed densely. Notation, mapped to the paper:

- ``arrivals_by_admitted(mode, i)[a]``: sum of D_k^(mode) over the batch sizes k of which a pages are
  admitted at level i, a = 0..min(K-i, kmax) (a = 0 collects D_0 and the batches lost whole); with partial
  admission these are
  the Lemma's D_a and D(1) - sum_{r<K-i} D_r for the top block.
- ``A(j) = S (+) Gamma^{(+)j}``: phases of service and of j waiting pages (the paper's A_j).
- ``B(j)``: level j+1 -> j without arrivals (service completion S_0 beta with the head page's
  obsolescence phase discarded, or the obsolescence of one of the j waiting pages, Gamma_0^{(+)j})
  (the paper's B_j).

:class:`PreparedModel` holds everything that does not depend on the policy, so that an optimiser
evaluating many policies of one model builds each block once; :class:`Blocks` picks the blocks of one
policy from it.
"""

from __future__ import annotations

from typing import Any, TypeAlias, cast

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from ._model import QueueModel
from ._policy import QueueLengthPolicy

Matrix: TypeAlias = "NDArray[np.float64] | sp.csr_matrix"
#: Levels with at most this many states are kept as dense arrays.
DENSE_BLOCK_LIMIT = 256


def kron_power_vector(v: NDArray[np.float64], n: int) -> NDArray[np.float64]:
    """v (x) v (x) ... (x) v, n times (n = 0 gives [1])."""
    out: NDArray[Any] = np.ones(1)
    for _ in range(n):
        out = np.kron(out, v)
    return out


def _kron(a: Matrix, b: Matrix, dense: bool) -> Matrix:
    if dense:
        return np.kron(to_dense(a), to_dense(b))
    return sp.kron(a, b, format="csr")


def _eye(n: int, dense: bool) -> Matrix:
    return np.eye(n) if dense else sp.identity(n, format="csr")


def to_dense(m: Matrix) -> NDArray[np.float64]:
    if sp.issparse(m):
        return np.asarray(cast(Any, m).toarray())
    return cast("NDArray[np.float64]", m)


class PreparedModel:
    """Policy-independent pieces of the generator of one model, built lazily and reused.

    Parameters
    ----------
    model : QueueModel
    dense_limit : int
        Levels with at most this many states use dense blocks.
    original, reduction
        The model ``model`` was reduced from (:func:`model.reduce_model`), and the reductions made.
    """

    def __init__(self, model: QueueModel, *, dense_limit: int = DENSE_BLOCK_LIMIT, original: QueueModel | None = None,
                 reduction: tuple[str, ...] = ()) -> None:
        self.model = model
        #: the model this one was reduced from (``model`` itself when no reduction was asked)
        self.original = model if original is None else original
        self.reduction = reduction
        self.K = model.capacity
        self.W = model.arrivals.order
        self.beta = np.asarray(model.service.beta)
        self.S = np.asarray(model.service.S)
        self.S0 = model.service.exit_rates
        self.M = self.beta.size
        if model.obsolescence is None:
            self.gamma, self.Gamma = np.ones(1), np.zeros((1, 1))
        else:
            self.gamma, self.Gamma = np.asarray(model.obsolescence.beta), np.asarray(model.obsolescence.S)
        self.Gamma0 = -self.Gamma.sum(axis=1)
        self.R = self.gamma.size
        self.dense_limit = dense_limit
        self._A: dict[int, Matrix] = {}
        self._B: dict[int, Matrix] = {}
        self._g0: dict[int, Matrix] = {}
        self._arrivals: dict[tuple[int, int], list[NDArray[np.float64]]] = {}
        self._blocks: dict[tuple[int, int, int], Matrix | None] = {}
        self._max_jump: dict[tuple[int, int], int] = {}
        self.tagged: object | None = None  # filled by model._sojourn.tagged_chain

    # -- sizes --------------------------------------------------------------------------------
    def inner_dim(self, i: int) -> int:
        """Size of the (m, r_1..r_{i-1}) part at level i (1 at level 0)."""
        return 1 if i == 0 else self.M * self.R ** (i - 1)

    def dim(self, i: int) -> int:
        return self.W * self.inner_dim(i)

    def dense(self, n: int) -> bool:
        return n <= self.dense_limit

    @property
    def n_states(self) -> int:
        return sum(self.dim(i) for i in range(self.K + 1))

    # -- policy-independent pieces --------------------------------------------------------------
    def arrivals_by_admitted(self, mode: int, i: int) -> list[NDArray[np.float64]]:
        """[sum of D_k^(mode) with a pages admitted at level i, for a = 0..min(K-i, kmax)] (no batch admits
        more than its kmax pages, so the list stops there: its length is O(kmax), not O(K))."""
        key = (mode, i)
        if key not in self._arrivals:
            bmap = self.model.arrivals[mode]
            free = self.K - i
            out = [np.zeros((self.W, self.W)) for _ in range(min(free, bmap.max_batch) + 1)]
            out[0] += bmap.D0
            for k, Dk in enumerate(bmap.D[1:], start=1):
                out[self.model.admission.admitted(k, free)] += Dk
            self._arrivals[key] = out
        return self._arrivals[key]

    def gamma0_sum(self, j: int) -> Matrix:
        """Gamma_0^{(+)j}: R^j x R^{j-1}, one of j waiting pages expires."""
        # built upwards from the lowest missing j (a loop, not a recursion: K may exceed Python's stack)
        for k in range(len(self._g0) + 1, j + 1):  # the cache holds 1..len, filled in order
            # Gamma_0^{(+)k} = Gamma_0^{(+)(k-1)} (x) I_R + I_{R^{k-1}} (x) Gamma_0
            dense = self.dense(self.M * self.R**k)
            g0 = self.Gamma0.reshape(-1, 1)
            last = _kron(_eye(self.R ** (k - 1), dense), g0, dense)
            total = last if k == 1 else _kron(self._g0[k - 1], _eye(self.R, dense), dense) + last
            self._g0[k] = total if dense else sp.csr_matrix(total)
        return self._g0[j]

    def A(self, j: int) -> Matrix:
        """S (+) Gamma^{(+)j}: dimension M R^j."""
        if 0 not in self._A:
            self._A[0] = self.S.copy()
        for k in range(len(self._A), j + 1):  # the cache holds 0..len-1, filled in order
            prev = self._A[k - 1]
            n = prev.shape[0]
            dense = self.dense(n * self.R)
            out = _kron(prev, _eye(self.R, dense), dense) + _kron(_eye(n, dense), self.Gamma, dense)
            self._A[k] = out if dense else sp.csr_matrix(out)
        return self._A[j]

    def B(self, j: int) -> Matrix:
        """Level j+1 -> j without arrivals, on (m, r_1..r_j) -> (m', r_1..r_{j-1}); j >= 1."""
        if j not in self._B:
            dense = self.dense(self.M * self.R**j)
            S0beta = np.outer(self.S0, self.beta)
            eR = np.ones((self.R, 1))
            service = _kron(S0beta, _kron(eR, _eye(self.R ** (j - 1), dense), dense), dense)
            expire = _kron(_eye(self.M, dense), self.gamma0_sum(j), dense)
            out = service + expire
            self._B[j] = out if dense else sp.csr_matrix(out)
        return self._B[j]

    def block(self, i: int, j: int, mode: int) -> Matrix | None:
        """Q_{i,j} when mode(i) robots are active at level i (None where zero)."""
        key = (i, j, mode)
        if key not in self._blocks:
            self._blocks[key] = self._build(i, j, mode)
        return self._blocks[key]

    def max_jump(self, mode: int, i: int) -> int:
        """The most pages a batch can add at level i in this mode."""
        key = (mode, i)
        if key not in self._max_jump:
            arr = self.arrivals_by_admitted(mode, i)
            self._max_jump[key] = max((a for a in range(1, len(arr)) if arr[a].any()), default=0)
        return self._max_jump[key]

    def _build(self, i: int, j: int, mode: int) -> Matrix | None:
        K, W = self.K, self.W
        if j < i - 1 or j > K or i > K or i < 0 or j < 0 or j - i > self.max_jump(mode, i):
            return None
        dense = self.dense(max(self.dim(i), self.dim(j)))
        if j == i - 1:
            down = self.S0.reshape(-1, 1) if i == 1 else self.B(i - 1)
            return _kron(_eye(W, dense), down, dense)
        arr = self.arrivals_by_admitted(mode, i)
        if j == i:
            if i == 0:
                return arr[0].copy()
            inner = self.A(i - 1)
            out = _kron(arr[0], _eye(inner.shape[0], dense), dense) + _kron(_eye(W, dense), inner, dense)
            return out if dense else sp.csr_matrix(out)
        a = j - i
        if not arr[a].any():
            return None
        if i == 0:
            entry = np.kron(self.beta, kron_power_vector(self.gamma, a - 1)).reshape(1, -1)
            return _kron(arr[a], entry, dense)
        newpages = kron_power_vector(self.gamma, a).reshape(1, -1)
        return _kron(arr[a], _kron(_eye(self.inner_dim(i), dense), newpages, dense), dense)


class Blocks:
    """Generator blocks of the controlled queue under one policy (views into a PreparedModel)."""

    def __init__(self, model: QueueModel, policy: QueueLengthPolicy, prepared: PreparedModel | None = None) -> None:
        model.check_policy(policy)
        if prepared is None:
            prepared = PreparedModel(model)
        elif prepared.model is not model:
            raise ValueError("prepared belongs to another model")
        self.prepared = prepared
        self.model = model
        self.policy = policy
        self.K, self.W, self.M, self.R = prepared.K, prepared.W, prepared.M, prepared.R
        self.beta, self.S, self.S0 = prepared.beta, prepared.S, prepared.S0
        self.gamma, self.Gamma, self.Gamma0 = prepared.gamma, prepared.Gamma, prepared.Gamma0

    def mode(self, i: int) -> int:
        return self.policy.robots_at_level[i]

    def dim(self, i: int) -> int:
        return self.prepared.dim(i)

    @property
    def n_states(self) -> int:
        return self.prepared.n_states

    def Q(self, i: int, j: int) -> Matrix | None:
        if i < 0 or i > self.K:
            return None
        return self.prepared.block(i, j, self.mode(i))

    def max_jump(self) -> int:
        """The most levels any batch moves the queue up under this policy: Q_{i,j} = 0 for j > i + max_jump."""
        return max(self.prepared.max_jump(self.mode(i), i) for i in range(self.K + 1))

    def is_qbd(self) -> bool:
        """True when no level jumps up by more than one (ordinary arrivals, paper 000 Section 6)."""
        return self.max_jump() <= 1

    def full(self) -> sp.csr_matrix:
        """The whole generator, sparse."""
        rows = [[None if (b := self.Q(i, j)) is None else sp.csr_matrix(b) for j in range(self.K + 1)]
                for i in range(self.K + 1)]
        return sp.bmat(rows, format="csr")
