"""Mean sojourn times of served and of obsolete pages (paper 000, Section 5, Theorem 4 and Corollary 1).

A tagged page's fate depends only on the pages ahead of it (FIFO; pages behind never affect it), so
after its arrival we follow the tagged chain on level j = number of obsolescence clocks that matter:
the j - 1 waiting pages ahead of it and its own (level 0: the tagged page is in service). On level j
the phases (m, r_1..r_{j-1}, r_tag) move by A_j = S (+) Gamma^{(+)j}; they leave it down by one level
(service completion, or an earlier page's obsolescence: B_{j-1} (x) I_R, the paper's B-hat), or the
tagged page itself expires (absorption "obsolete"). With v_j = P(served | phases),
o_j = P(obsolete | phases), w_j = E[T 1{served}], w2_j = E[T 1{obsolete}] (eqs. (20)-(21) and
Corollary 1 differentiated at u = 0):

    -A_j v_j  = down_j v_{j-1}                      v_0 = e
    -A_j o_j  = I (x) Gamma_0 + down_j o_{j-1}       o_0 = 0
    -A_j w_j  = v_j + down_j w_{j-1}                w_0 = (-S)^{-1} e
    -A_j w2_j = o_j + down_j w2_{j-1}               w2_0 = 0

An arriving batch of k pages at level i admits a pages; the one in position l <= a meets the phases
of the i pages present, l - 1 fresh clocks gamma ahead of it and its own (C_{i,l} of eq. (19)). Summing
over the stationary arrival rates gives eqs. (23)-(25).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from ._blocks import kron_power_vector

if TYPE_CHECKING:
    from ._blocks import Blocks


@dataclass(frozen=True)
class TaggedTotals:
    """Rates per second summed over arriving pages: pages that will be served / become obsolete, and
    the sojourn time they accumulate."""

    served_rate: float
    obsolete_rate: float
    served_time_rate: float
    obsolete_time_rate: float


def tagged_totals(b: Blocks, p: tuple[NDArray[np.float64], ...]) -> TaggedTotals:
    K, W, M, R = b.K, b.W, b.M, b.R
    eR = sp.csr_matrix(np.ones((R, 1)))
    S0beta = sp.csr_matrix(np.outer(b.S0, b.beta))
    v = [np.ones(M)]
    o = [np.zeros(M)]
    w = [np.linalg.solve(-b.S, np.ones(M))]
    w2 = [np.zeros(M)]
    for j in range(1, K):
        lu = spla.splu(sp.csc_matrix(-b.A(j)))
        down = sp.kron(S0beta, eR, format="csr") if j == 1 else sp.kron(b.B(j - 1), sp.identity(R), format="csr")
        own_expiry = np.kron(np.ones(M * R ** (j - 1)), b.Gamma0)
        v.append(lu.solve(down @ v[j - 1]))
        o.append(lu.solve(own_expiry + down @ o[j - 1]))
        w.append(lu.solve(v[j] + down @ w[j - 1]))
        w2.append(lu.solve(o[j] + down @ w2[j - 1]))
    totals = np.zeros(4)
    for i in range(K):
        bmap = b.model.arrivals[b.mode(i)]
        P = p[i].reshape(W, -1)
        free = K - i
        # y[l-1]: rate of batches that admit a page in position l, by phases (m, r_1..r_{i-1}) present
        y = np.zeros((free, P.shape[1]))
        for k, Dk in enumerate(bmap.D[1:], start=1):
            a = b.model.admission.admitted(k, free)
            if a:
                y[:a] += Dk.sum(axis=1) @ P
        for l in range(1, free + 1):
            if not y[l - 1].any():
                continue
            if i == 0:
                j = l - 1
                start = float(y[l - 1][0]) * np.kron(b.beta, kron_power_vector(b.gamma, l - 1))
                vals = [float(start @ x[j]) for x in (v, o, w, w2)]
            else:
                j = i + l - 1
                g = kron_power_vector(b.gamma, l)
                vals = [float(y[l - 1] @ (x[j].reshape(-1, g.size) @ g)) for x in (v, o, w, w2)]
            totals += vals
    return TaggedTotals(*(float(t) for t in totals))


def sojourn_means(b: Blocks, p: tuple[NDArray[np.float64], ...], *, served_rate: float,
                  obsolete_rate: float) -> tuple[float, float]:
    """(V^(1), V^(2)): mean sojourn of served pages and of obsolete pages (0 when none expire)."""
    t = tagged_totals(b, p)
    v1 = t.served_time_rate / served_rate if served_rate > 0 else float("nan")
    v2 = t.obsolete_time_rate / obsolete_rate if obsolete_rate > 0 else 0.0
    return v1, v2
