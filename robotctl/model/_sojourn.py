"""Mean sojourn times of served and of obsolete pages (paper 000, Section 5, Theorem 4 and Corollary 1).

A tagged page's fate depends only on the pages ahead of it (FIFO; pages behind never affect it), so
after its arrival we follow the tagged chain on level j = number of obsolescence clocks that matter:
the j - 1 waiting pages ahead of it and its own (level 0: the tagged page is in service). On level j
the phases (m, r_1..r_{j-1}, r_tag) move by A_j = S (+) Gamma^{(+)j}; they leave it down by one level
(service completion, or an earlier page's obsolescence: B_{j-1} (x) I_R, the paper's B-hat), or the
tagged page itself expires (absorption "obsolete"). With v_j = P(served | phases),
o_j = P(obsolete | phases), w_j = E[T 1{served}], w2_j = E[T 1{obsolete}] (eqs. (20)-(21), and
Corollary 1 as their derivatives at u = 0):

    -A_j v_j  = down_j v_{j-1}                      v_0 = e
    -A_j o_j  = e (x) Gamma_0 + down_j o_{j-1}       o_0 = 0
    -A_j w_j  = v_j + down_j w_{j-1}                w_0 = (-S)^{-1} e
    -A_j w2_j = o_j + down_j w2_{j-1}               w2_0 = 0

These depend on the model only, not on the policy. An arriving batch of k pages at level i admits a
pages; the one in position l <= a meets the phases of the pages present, l - 1 fresh clocks gamma
ahead of it and its own (C_{i,l} of eq. (19)). Summing over the stationary arrival rates gives
eqs. (23)-(25).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from ._blocks import Matrix, kron_power_vector

if TYPE_CHECKING:
    from ._blocks import Blocks, PreparedModel


@dataclass(frozen=True)
class TaggedChain:
    """v_j, o_j, w_j, w2_j for j = 0..K-1 (see the module docstring)."""

    served: tuple[NDArray[np.float64], ...]
    obsolete: tuple[NDArray[np.float64], ...]
    served_time: tuple[NDArray[np.float64], ...]
    obsolete_time: tuple[NDArray[np.float64], ...]


@dataclass(frozen=True)
class TaggedTotals:
    """Rates per second summed over arriving pages: pages that will be served / become obsolete, and
    the sojourn time they accumulate."""

    served_rate: float
    obsolete_rate: float
    served_time_rate: float
    obsolete_time_rate: float


def _solver(A: Matrix) -> Callable[[NDArray[np.float64]], NDArray[np.float64]]:
    """x -> (-A)^{-1} x, factorised once."""
    if sp.issparse(A):
        return spla.splu(sp.csc_matrix(-A)).solve
    lu = la.lu_factor(-A)
    return lambda rhs: np.asarray(la.lu_solve(lu, rhs))


def _down(pm: PreparedModel, j: int) -> Matrix:
    """Tagged level j -> j - 1: the head waiting page (the tagged one when j = 1, whose clock is then
    dropped) enters service, or a page ahead expires: B_{j-1} (x) I_R, the paper's B-hat_{j-1}."""
    R = pm.R
    if j == 1:
        return np.kron(np.outer(pm.S0, pm.beta), np.ones((R, 1)))
    B = pm.B(j - 1)
    return sp.kron(B, sp.identity(R), format="csr") if sp.issparse(B) else np.kron(B, np.eye(R))


def tagged_chain(pm: PreparedModel) -> TaggedChain:
    """The tagged-page chain of ``pm`` (computed once per prepared model)."""
    if isinstance(pm.tagged, TaggedChain):
        return pm.tagged
    M, R = pm.M, pm.R
    v: list[NDArray[np.float64]] = [np.ones(M)]
    o: list[NDArray[np.float64]] = [np.zeros(M)]
    w: list[NDArray[Any]] = [np.linalg.solve(-pm.S, np.ones(M))]
    w2: list[NDArray[np.float64]] = [np.zeros(M)]
    for j in range(1, pm.K):
        solver = _solver(pm.A(j))
        down = _down(pm, j)
        own_expiry = np.kron(np.ones(M * R ** (j - 1)), pm.Gamma0)
        v.append(solver(down @ v[j - 1]))
        o.append(solver(own_expiry + down @ o[j - 1]))
        w.append(solver(v[j] + down @ w[j - 1]))
        w2.append(solver(o[j] + down @ w2[j - 1]))
    chain = TaggedChain(tuple(v), tuple(o), tuple(w), tuple(w2))
    pm.tagged = chain
    return chain


def tagged_totals(b: Blocks, p: tuple[NDArray[np.float64], ...]) -> TaggedTotals:
    chain = tagged_chain(b.prepared)
    vectors = (chain.served, chain.obsolete, chain.served_time, chain.obsolete_time)
    K, W = b.K, b.W
    totals = np.zeros(4)
    for i in range(K):
        arr = b.prepared.arrivals_by_admitted(b.mode(i), i)
        P = p[i].reshape(W, -1)
        # y[l-1]: rate of batches that put a page in position l, by the phases (m, r_1..r_{i-1}) present
        top = b.prepared.max_jump(b.mode(i), i)
        if top == 0:
            continue
        admitted_rates = np.array([a.sum(axis=1) @ P for a in arr[1:top + 1]])  # row a-1: batches admitting a
        y = np.cumsum(admitted_rates[::-1], axis=0)[::-1]
        for l in range(1, top + 1):
            if not y[l - 1].any():
                continue
            if i == 0:
                start = float(y[l - 1][0]) * np.kron(b.beta, kron_power_vector(b.gamma, l - 1))
                totals += [float(start @ x[l - 1]) for x in vectors]
            else:
                g = kron_power_vector(b.gamma, l)
                j = i + l - 1
                totals += [float(y[l - 1] @ (x[j].reshape(-1, g.size) @ g)) for x in vectors]
    return TaggedTotals(*(float(t) for t in totals))
