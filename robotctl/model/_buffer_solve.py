"""Exact stationary solution of the controlled queue of paper 000 under a :class:`BufferPolicy`:
obsolescence timers, renovation (paper 004) and RED, alone or together, with threshold control.

The chain is paper 000's xi_t = (i, nu, m, r_1..r_{i-1}) (level i = pages in the system, nu the
arrival phase, m the service phase, r_j the useful-life phase of the j-th waiting page, r_1 at the
head), with two changes:

- without timers, a page whose useful life ends is not removed but marked: its phase moves to an
  absorbing phase "stale" (rho = R + 1 phases per waiting page; with timers rho = R);
- at a service completion at level i (w = i - 1 pages waiting) renovation removes j pages from the
  head with probability ``drop_law(w)[j]`` (:meth:`Renovation.drop_law`): the chain jumps down
  1 + j levels, the phases r_1..r_j of the removed pages and r_{j+1} of the page that starts
  service are summed out, and the new service phase is drawn from beta:

      Q_{i, i-1-j} += p_w(j) I_W (x) S_0 beta (x) (1_{rho^{j+1}} (x) I_{rho^{w-1-j}}).

  Renovation jumps down several levels, so the generator is no longer skip-free to the left and
  paper 000's G-matrix recursion does not apply; the generator is assembled sparse from its
  Kronecker blocks and solved by LU: dense up to ``DENSE_STATES`` states (these chains fill in almost
  completely under sparse LU), sparse (SuperLU) above; the solution names which (``dense-lu`` or
  ``sparse-lu``).

RED thins each arriving batch page by page (kept ~ Binomial(k, 1 - d_i) at level i) before the
admission rule, so the arrivals at level i are again a BMAP.

Measures. Rates of pages offered, blocked, dropped by RED, removed by renovation, expired (timers)
and served come from the stationary vector directly. A page's staleness is read where it leaves the
queue: at the start of its service (it is then indexed stale) or when renovation removes it. The mean
response time of served pages follows from Little's law on the pages that will be served (as in
:func:`model.solve_bruteforce`): their mean number present, sum over states and positions of
pi(state) P(the page at that position is eventually served | state), divided by their throughput. Under
renovation a page's fate depends on the pages behind it too (Option 1 spares the last page; Option 2
needs the count), so the probability is found on the *tagged chain*: the whole state plus the tagged
page's position p (0 in service, 1..i-1 waiting), absorbed when the tagged page is served, expires or
is removed. It is built from the same Kronecker blocks. The tagged page's position never grows (pages
arrive behind it; expiries ahead of it and completions move it forward), so in position-major order
its generator is block lower triangular: the diagonal block T_pp (the page stays at position p:
arrivals, phase moves, expiries behind it) does not depend on renovation and is factorised once per
:class:`PreparedBuffer`; each renovation law then costs one forward substitution over the positions.
When nothing removes an admitted page (no timers, no renovation) every admitted page is served and the
mean number present over the throughput is V^(1) directly (Little's law); the tagged chain is skipped.

Reach (bench/renovation.py, one core): the paper example (K = 5, 486 states without timers) takes
about 9 ms per renovation law once prepared, K = 6 (1458 states) 0.2 s; K = 8 with exponential
obsolescence (1022 states, the fitted demo crawl) 35 ms. Beyond about 2000 states sparse LU fills in
almost completely: K = 7 with two-phase lives and stale marks (4374 states) took 8.6 s per law. With
timers only, paper 000's block solver is 15-30 times faster on the same chain (same numbers).
"""

from __future__ import annotations

import enum
import math
import time
from dataclasses import asdict, dataclass
from functools import reduce
from typing import Any, TypeAlias

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from robotctl._errors import InputError

from ._buffer import BufferPolicy, Renovation
from ._measures import CostBreakdown
from ._model import Costs, QueueModel
from ._policy import ThresholdPolicy

Sparse: TypeAlias = sp.csr_matrix


class BufferStatus(enum.Enum):
    """Outcome of an exact evaluation under a buffer policy."""

    SUCCESS = 0
    #: the stationary vector does not satisfy its equations to the requested tolerance
    INACCURATE = 1
    #: a linear solve failed (singular matrix)
    SINGULAR = 2


STATUS_MESSAGES = {
    BufferStatus.SUCCESS: "solved",
    BufferStatus.INACCURATE: "residual above tolerance",
    BufferStatus.SINGULAR: "singular linear system",
}


@dataclass(frozen=True)
class BufferMeasures:
    """Stationary measures under a threshold policy and a buffer policy.

    Every offered page ends in exactly one of: blocked (no room), dropped by RED, removed by
    renovation, expired (timers), served; the five fractions sum to one.

    Attributes
    ----------
    arrival_rate : float
        lambda, pages offered per second (paper 000, eq. (9)).
    p_blocked : float
        Fraction of offered pages that found no room.
    p_red : float
        Fraction dropped by RED on arrival.
    p_renovated : float
        Fraction removed from the head of the queue by renovation.
    p_expired : float
        Fraction that left obsolete by their timer (paper 000's P_obs).
    p_served : float
        Fraction indexed.
    p_served_stale : float
        Fraction indexed although their useful life had ended while they waited (0 with timers).
    p_renovated_stale : float
        Fraction removed by renovation after their useful life had ended.
    p_starvation : float
        P(system empty).
    mean_active_robots : float
    active_robots_distribution : tuple of (int, float)
    queue_length_distribution : tuple of float
        P(i pages in the system), i = 0..K.
    mean_queue_length, second_moment_queue_length : float
        E[i] and E[i^2].
    mean_response_served : float
        V^(1): mean sojourn of the pages that are served (stale ones included), service included.
    mean_sojourn_expired : float
        Mean sojourn of the pages that expire (0 if none do).
    """

    arrival_rate: float
    p_blocked: float
    p_red: float
    p_renovated: float
    p_expired: float
    p_served: float
    p_served_stale: float
    p_renovated_stale: float
    p_starvation: float
    mean_active_robots: float
    active_robots_distribution: tuple[tuple[int, float], ...]
    queue_length_distribution: tuple[float, ...]
    mean_queue_length: float
    second_moment_queue_length: float
    mean_response_served: float
    mean_sojourn_expired: float

    @property
    def p_loss(self) -> float:
        """Pages lost while fresh: blocked, dropped by RED, or removed by renovation before their useful
        life ended."""
        return self.p_blocked + self.p_red + self.p_renovated - self.p_renovated_stale

    @property
    def p_stale(self) -> float:
        """Pages whose useful life ended in the buffer, whatever happened to them next: expired (timers),
        indexed stale, or removed stale by renovation. With timers only, paper 000's P_obs."""
        return self.p_expired + self.p_served_stale + self.p_renovated_stale

    @property
    def p_success(self) -> float:
        """Pages indexed fresh; P_loss + P_stale + P_success = 1. With timers only, paper 000's P_success."""
        return self.p_served - self.p_served_stale

    @property
    def p_dropped(self) -> float:
        """Pages removed by the buffer's own rules before service (RED and renovation)."""
        return self.p_red + self.p_renovated

    @property
    def throughput(self) -> float:
        """Pages indexed per second."""
        return self.arrival_rate * self.p_served

    def to_dict(self) -> dict[str, Any]:
        """The fields and properties; ``p_obsolete`` repeats ``p_stale`` (the fraction charged c_obs,
        paper 000's P_obs with timers only), so that the keys of ``robotctl solve --json`` stay."""
        d = asdict(self)
        d["active_robots_distribution"] = {str(m): p for m, p in self.active_robots_distribution}
        d["queue_length_distribution"] = list(self.queue_length_distribution)
        for name in ("p_loss", "p_stale", "p_success", "p_dropped", "throughput"):
            d[name] = getattr(self, name)
        d["p_obsolete"] = self.p_stale
        return d


def buffer_cost(measures: BufferMeasures, costs: Costs) -> CostBreakdown:
    """J = lambda (c_loss P_loss + c_obs P_stale) + a V^(1) + c_rob N_act + c_star P_star.

    Paper 000's eq. (2) with its two page terms read for any buffer policy: c_loss for every page lost
    fresh (blocked, or dropped by RED or renovation before its useful life ended) and c_obs for every
    page whose useful life ended in the buffer (expired by a timer, indexed stale, or removed stale).
    With timers only this is eq. (2) exactly (P_loss = blocking, P_stale = P_obs).
    """
    m = measures
    terms = {
        "loss": costs.loss * m.arrival_rate * m.p_loss,
        "obsolescence": costs.obsolescence * m.arrival_rate * m.p_stale,
        "response": costs.response * m.mean_response_served,
        "robot": costs.robot * m.mean_active_robots,
        "starvation": costs.starvation * m.p_starvation,
    }
    return CostBreakdown(total=sum(terms.values()), **terms)


@dataclass(frozen=True, eq=False)
class BufferSolution:
    """Exact stationary solution under a threshold policy and a buffer policy.

    Attributes
    ----------
    success : bool
    status : BufferStatus
    message : str
    method : str
        ``dense-lu`` or ``sparse-lu``: how the stationary vector was solved (or ``bruteforce`` from the
        independent route).
    policy : ThresholdPolicy
    buffer : BufferPolicy
    measures : BufferMeasures
    level_vectors : tuple of ndarray
        pi_i, i = 0..K, states (nu, m, r_1..r_{i-1}) in lexicographic order (rho phases per waiting
        page: R with timers, R + 1 without, the last one "stale").
    n_states : int
    residual : float
        max |pi Q| and |pi e - 1|.
    seconds : float
    """

    success: bool
    status: BufferStatus
    message: str
    method: str
    policy: ThresholdPolicy
    buffer: BufferPolicy
    measures: BufferMeasures
    level_vectors: tuple[NDArray[np.float64], ...]
    n_states: int
    residual: float
    seconds: float


# -- Kronecker helpers ------------------------------------------------------------------------------
def _kron(*mats: Any) -> Sparse:
    return reduce(lambda a, b: sp.kron(a, b, format="csr"), mats[1:], sp.csr_matrix(mats[0]))


def _eye(n: int) -> Sparse:
    return sp.identity(n, format="csr")


def _col(v: NDArray[np.float64]) -> Sparse:
    return sp.csr_matrix(np.asarray(v, dtype=float).reshape(-1, 1))


def _row(v: NDArray[np.float64]) -> Sparse:
    return sp.csr_matrix(np.asarray(v, dtype=float).reshape(1, -1))


def _kron_vec(*vs: NDArray[np.float64]) -> NDArray[np.float64]:
    out: NDArray[Any] = np.ones(1)
    for v in vs:
        out = np.kron(out, v)
    return out


def _binomial(k: int, keep: float) -> NDArray[np.float64]:
    """P(kept = 0..k) for Binomial(k, keep)."""
    if keep >= 1.0:
        out = np.zeros(k + 1)
        out[k] = 1.0
        return out
    kept = np.arange(k + 1)
    coef = np.array([math.comb(k, int(x)) for x in kept], dtype=float)
    return np.asarray(coef * keep**kept * (1.0 - keep) ** (k - kept))


@dataclass(frozen=True)
class PageLaws:
    """The per-page phase laws of the chain for one model and one choice of timers.

    Attributes
    ----------
    rho : int
        Phases per waiting page.
    G : ndarray (rho, rho)
        How a waiting page's phase moves (without timers the last phase is "stale", absorbing).
    exit : ndarray (rho,)
        Rate at which a waiting page expires and leaves (zero without timers).
    gamma : ndarray (rho,)
        Initial phase of an arriving page.
    stale : int or None
        Index of the stale phase (None with timers or without an obsolescence law).
    """

    rho: int
    G: NDArray[np.float64]
    exit: NDArray[np.float64]
    gamma: NDArray[np.float64]
    stale: int | None

    @classmethod
    def of(cls, model: QueueModel, timers: bool) -> PageLaws:
        obs = model.obsolescence
        if obs is None:
            return cls(1, np.zeros((1, 1)), np.zeros(1), np.ones(1), None)
        Gamma, gamma = np.asarray(obs.S), np.asarray(obs.beta)
        Gamma0 = -Gamma.sum(axis=1)
        if timers:
            return cls(gamma.size, Gamma.copy(), Gamma0, gamma.copy(), None)
        R = gamma.size
        G = np.zeros((R + 1, R + 1))
        G[:R, :R] = Gamma
        G[:R, R] = Gamma0
        return cls(R + 1, G, np.zeros(R + 1), np.append(gamma, 0.0), R)


class PreparedBuffer:
    """The generator of the controlled queue under one threshold policy, timers choice and RED law,
    with the completion blocks kept apart so that many renovation laws q are solved cheaply.

    ``generator(renovation)`` and ``tagged(renovation)`` add the completion blocks with the weights of
    ``renovation.drop_law``; everything else is built once here.

    Parameters
    ----------
    model, policy, buffer
        The buffer's renovation law is ignored (it is the argument of :meth:`solve`).
    share : PreparedBuffer, optional
        Another one for the same model and timers choice: its blocks that depend on neither the
        arrivals (policy, RED) nor q -- phases, expiries, completions -- are reused (a RED search
        builds one PreparedBuffer per drop law).
    """

    model: QueueModel
    timers: bool
    _A: list[Sparse]
    expire: dict[tuple[int, int], Sparse]
    complete: dict[tuple[int, int], Sparse]
    _Q_completion: dict[tuple[int, int], Sparse]

    def __init__(self, model: QueueModel, policy: ThresholdPolicy, buffer: BufferPolicy, *,
                 share: PreparedBuffer | None = None) -> None:
        model.check_policy(policy)
        buffer.check_capacity(model.capacity)
        if share is not None and (share.model is not model or share.timers != buffer.timers):
            raise InputError("share", "was built for another model or timers choice",
                             "share only between PreparedBuffers of one model and one timers choice")
        self.model, self.policy = model, policy
        self.timers, self.red = buffer.timers, buffer.red
        self.K = K = model.capacity
        self.W = model.arrivals.order
        self.beta = np.asarray(model.service.beta)
        self.S = np.asarray(model.service.S)
        self.S0 = -self.S.sum(axis=1)
        self.M = self.beta.size
        self.laws = PageLaws.of(model, buffer.timers)
        rho = self.laws.rho
        self.dims = [self.W] + [self.W * self.M * rho ** (i - 1) for i in range(1, K + 1)]
        self.offsets = np.concatenate([[0], np.cumsum(self.dims)]).astype(int)
        self.n_states = int(self.offsets[-1])
        self._arrival_rates: list[tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]] = []
        if share is None:
            self._build_shared()
        else:
            self._A, self.expire, self.complete = share._A, share.expire, share.complete
            self._Q_completion = share._Q_completion
        self._build()

    # -- arrivals --------------------------------------------------------------------------------
    def _arrivals(self, i: int) -> list[NDArray[np.float64]]:
        """[sum of the D_k thinned by RED whose admitted part is a, a = 0..K-i] at level i, and the
        per-phase rates of pages offered, blocked and dropped by RED (kept in ``_arrival_rates``)."""
        model, K, W = self.model, self.K, self.W
        bmap = model.arrivals[self.policy.robots_at_level[i]]
        d = self.red.at(i) if self.red is not None and i < K else 0.0
        free = K - i
        out = [np.zeros((W, W)) for _ in range(free + 1)]
        out[0] += bmap.D0
        offered, blocked, red = np.zeros(W), np.zeros(W), np.zeros(W)
        for k, Dk in enumerate(bmap.D[1:], start=1):
            rates = Dk.sum(axis=1)
            offered += k * rates
            red += k * d * rates
            for kept, pk in enumerate(_binomial(k, 1.0 - d)):
                if pk == 0.0:
                    continue
                a = model.admission.admitted(kept, free)
                out[a] += pk * Dk
                blocked += pk * (kept - a) * rates
        self._arrival_rates.append((offered, blocked, red))
        return out

    # -- blocks ----------------------------------------------------------------------------------
    def _build_shared(self) -> None:
        """The blocks that depend on neither the arrivals nor q."""
        K, W, M = self.K, self.W, self.M
        laws = self.laws
        rho = laws.rho
        inner = [1] + [M * rho ** (i - 1) for i in range(1, K + 1)]
        # A_i = S (+) G^{(+)(i-1)}: phases of the service and of the i - 1 waiting pages
        self._A = [sp.csr_matrix((1, 1)), sp.csr_matrix(self.S)]
        for i in range(2, K + 1):
            self._A.append(_kron(self._A[i - 1], _eye(rho)) + _kron(_eye(inner[i - 1]), laws.G))
        #: level i -> i - 1: the waiting page at position q = 1..i-1 expires (timers)
        self.expire = {}
        if laws.exit.any():
            for i in range(2, K + 1):
                w = i - 1
                for q in range(1, w + 1):
                    self.expire[i, q] = _kron(_eye(W * M), _eye(rho ** (q - 1)), _col(laws.exit), _eye(rho ** (w - q)))
        #: level i -> i - 1 - j: a completion, then renovation removes j of the w = i - 1 waiting pages
        self.complete = {(1, 0): _kron(_eye(W), _col(self.S0))}
        S0beta = np.outer(self.S0, self.beta)
        for i in range(2, K + 1):
            for j in range(i - 1):
                self.complete[i, j] = _kron(_eye(W), S0beta, _col(np.ones(rho ** (j + 1))), _eye(rho ** (i - 2 - j)))
        self._Q_completion = {(i, j): self._place({(i, i - 1 - j): block}) for (i, j), block in self.complete.items()}

    def _build(self) -> None:
        """The blocks that depend on the arrivals (policy and RED)."""
        K, W, M = self.K, self.W, self.M
        laws = self.laws
        inner = [1] + [M * laws.rho ** (i - 1) for i in range(1, K + 1)]
        self.arrivals = [self._arrivals(i) for i in range(K + 1)]
        #: level i -> i: phases and arrivals that admit nothing
        self.stay: list[Sparse] = [sp.csr_matrix(self.arrivals[0][0])]
        #: level i -> i + a: a pages admitted
        self.up: dict[tuple[int, int], Sparse] = {}
        for i in range(K + 1):
            arr = self.arrivals[i]
            if i:
                self.stay.append(_kron(arr[0], _eye(inner[i])) + _kron(_eye(W), self._A[i]))
            for a in range(1, K - i + 1):
                if not arr[a].any():
                    continue
                if i == 0:
                    self.up[0, a] = _kron(arr[a], _row(_kron_vec(self.beta, *([laws.gamma] * (a - 1)))))
                else:
                    self.up[i, a] = _kron(arr[a], _eye(inner[i]), _row(_kron_vec(*([laws.gamma] * a))))
        # the stationary chain: everything but the completions once, each completion block placed once
        cells: dict[tuple[int, int], Sparse] = {(i, i): self.stay[i] for i in range(K + 1)}
        for (i, a), block in self.up.items():
            cells[i, i + a] = block
        for (i, _), block in self.expire.items():
            cells[i, i - 1] = cells[i, i - 1] + block if (i, i - 1) in cells else block
        self._Q_base = self._place(cells)
        self._Q_base_dense: NDArray[np.float64] | None = None
        self._Q_completion_coo: dict[tuple[int, int], sp.coo_matrix] = {}
        # the tagged chain, position-major: segment p holds levels p+1..K (the page at position p); its
        # diagonal blocks are factorised on first use (a chain that never removes a page needs none)
        self._tagged_lu: list[Any] | None = None
        self._exit_vectors = {(kind, p, i): v for p in range(K) for i in range(p + 1, K + 1)
                              for kind, v in self._exits(p, i, None).items() if kind != "removed"}

    def _place(self, cells: dict[tuple[int, int], Sparse]) -> Sparse:
        """A whole-chain matrix (levels 0..K) with the given level blocks."""
        grid: list[list[Sparse | None]] = [[cells.get((a, b)) for b in range(self.K + 1)] for a in range(self.K + 1)]
        for a in range(self.K + 1):  # bmat needs a shape in every block row and column
            if grid[a][a] is None:
                grid[a][a] = sp.csr_matrix((self.dims[a], self.dims[a]))
        return sp.csr_matrix(sp.bmat(grid, format="csr"))

    def _tagged_block(self, p: int) -> Sparse:
        """T_pp: the tagged page stays at position p while pages arrive behind it, phases move, and pages
        behind it expire (level i -> i - 1 >= p + 1). Independent of renovation."""
        levels = range(p + 1, self.K + 1)
        cells: dict[tuple[int, int], Sparse] = {(i, i): self.stay[i] for i in levels}
        for i in levels:
            for a in range(1, self.K - i + 1):
                if (i, a) in self.up:
                    cells[i, i + a] = self.up[i, a]
            behind = [self.expire[i, q] for q in range(p + 1, i) if (i, q) in self.expire]
            if behind:
                cells[i, i - 1] = reduce(lambda x, y: x + y, behind)
        grid = [[cells.get((a, b)) for b in levels] for a in levels]
        return sp.csr_matrix(sp.bmat(grid, format="csr"))

    def _tagged_cross(self, renovation: Renovation | None
                      ) -> dict[tuple[int, int, int], tuple[int, int, float, Sparse]]:
        """The moves of the tagged page forward, keyed (p, i, n): from position p at level i to
        (position, level, weight, block). An earlier page expires ((p - 1, i - 1), q < p) or a completion
        removes j pages ahead of it ((p - j - 1, i - 1 - j), j < p, weight p_{i-1}(j))."""
        out: dict[tuple[int, int, int], tuple[int, int, float, Sparse]] = {}
        weights = self._weights(renovation)
        for p in range(1, self.K):
            for i in range(p + 1, self.K + 1):
                n = 0
                ahead = [self.expire[i, q] for q in range(1, p) if (i, q) in self.expire]
                if ahead:
                    out[p, i, n] = (p - 1, i - 1, 1.0, reduce(lambda x, y: x + y, ahead))
                    n += 1
                for j in range(p):
                    wgt = weights.get((i, j), 0.0)
                    if wgt:
                        out[p, i, n] = (p - j - 1, i - 1 - j, wgt, self.complete[i, j])
                        n += 1
        return out

    # -- assembly ----------------------------------------------------------------------------------
    def _weights(self, renovation: Renovation | None) -> dict[tuple[int, int], float]:
        out = {(1, 0): 1.0}
        for i in range(2, self.K + 1):
            law = renovation.drop_law(i - 1) if renovation is not None else np.eye(1, i - 1)[0]
            for j, pj in enumerate(law):
                if pj > 0.0:
                    out[i, j] = float(pj)
        return out

    def generator(self, renovation: Renovation | None) -> Sparse:
        """The whole generator, sparse, levels 0..K."""
        Q = self._Q_base.copy()
        for key, wgt in self._weights(renovation).items():
            Q = Q + wgt * self._Q_completion[key]
        return sp.csr_matrix(Q)

    def _dense_generator(self, renovation: Renovation | None) -> NDArray[np.float64]:
        """The generator as a dense array (small chains: the stationary solve is dense there)."""
        if self._Q_base_dense is None:
            self._Q_base_dense = self._Q_base.toarray()
            self._Q_completion_coo = {k: sp.coo_matrix(v) for k, v in self._Q_completion.items()}
        Q = self._Q_base_dense.copy()
        for key, wgt in self._weights(renovation).items():
            c = self._Q_completion_coo[key]
            Q[c.row, c.col] += wgt * c.data  # no repeated (row, col) within one block
        return Q

    def _tagged_index(self) -> dict[tuple[int, int], int]:
        """Offset of (position p, level i) in the position-major order of the tagged chain."""
        out, at = {}, 0
        for p in range(self.K):
            for i in range(p + 1, self.K + 1):
                out[p, i] = at
                at += self.dims[i]
        return out

    def tagged(self, renovation: Renovation | None) -> Sparse:
        """The tagged chain's transient generator, whole, in position-major order (for checks; the solve
        works position by position)."""
        index = self._tagged_index()
        keys = list(index)
        pos = {k: n for n, k in enumerate(keys)}
        grid: list[list[Sparse | None]] = [[None] * len(keys) for _ in keys]
        for p in range(self.K):
            T = self._tagged_block(p)
            levels = range(p + 1, self.K + 1)
            at = 0
            for i in levels:
                col = 0
                for i2 in levels:
                    block = T[at:at + self.dims[i], col:col + self.dims[i2]]
                    if block.nnz or i == i2:
                        grid[pos[p, i]][pos[p, i2]] = block
                    col += self.dims[i2]
                at += self.dims[i]
        for (p, i, _), (p2, i2, wgt, block) in self._tagged_cross(renovation).items():
            cell = grid[pos[p, i]][pos[p2, i2]]
            grid[pos[p, i]][pos[p2, i2]] = wgt * block if cell is None else cell + wgt * block
        return sp.csr_matrix(sp.bmat(grid, format="csr"))

    def tagged_exits(self, renovation: Renovation | None) -> dict[str, NDArray[np.float64]]:
        """Absorption rates of the tagged chain in position-major order: ``served``, ``expired``,
        ``removed`` (by renovation)."""
        parts: dict[str, list[NDArray[np.float64]]] = {"served": [], "expired": [], "removed": []}
        for p in range(self.K):
            for i in range(p + 1, self.K + 1):
                for name, v in self._exits(p, i, renovation).items():
                    parts[name].append(v)
        return {name: np.concatenate(v) for name, v in parts.items()}

    def _exits(self, p: int, i: int, renovation: Renovation | None) -> dict[str, NDArray[np.float64]]:
        W, M, rho = self.W, self.M, self.laws.rho
        w = i - 1
        zero = np.zeros(self.dims[i])
        svc = _kron_vec(np.ones(W), self.S0, np.ones(rho**w))
        if p == 0:
            return {"served": svc, "expired": zero, "removed": zero}
        law = renovation.drop_law(w) if renovation is not None else np.ones(1)
        at_least = float(law[p:].sum())  # P(J' >= p): the page at position p is removed
        expired = _kron_vec(np.ones(W * M), np.ones(rho ** (p - 1)), self.laws.exit, np.ones(rho ** (w - p)))
        return {"served": zero, "expired": expired, "removed": svc * at_least}

    def split(self, x: NDArray[np.float64]) -> tuple[NDArray[np.float64], ...]:
        return tuple(np.asarray(x[self.offsets[i]:self.offsets[i + 1]]) for i in range(self.K + 1))

    # -- solve -------------------------------------------------------------------------------------
    def _tagged_diagonal(self) -> list[Any]:
        if self._tagged_lu is None:
            self._tagged_lu = [spla.splu(sp.csc_matrix(-self._tagged_block(p))) for p in range(self.K)]
        return self._tagged_lu

    def removes_pages(self, renovation: Renovation | None) -> bool:
        """Whether an admitted page can leave other than served (a timer, or renovation)."""
        return bool(self.laws.exit.any()) or (renovation is not None and not renovation.is_trivial)

    def _fates(self, renovation: Renovation | None) -> tuple[dict[tuple[int, int], NDArray[np.float64]], ...]:
        """h[p, i] = P(served), P(expired) for the page at position p of each state of level i: forward
        substitution over positions, one solve with the factorised T_pp each."""
        cross = self._tagged_cross(renovation)
        out: list[dict[tuple[int, int], NDArray[np.float64]]] = []
        for kind in ("served", "expired"):
            h: dict[tuple[int, int], NDArray[np.float64]] = {}
            for p in range(self.K):
                levels = range(p + 1, self.K + 1)
                rhs = []
                for i in levels:
                    r = self._exit_vectors[kind, p, i].copy()
                    n = 0
                    while (p, i, n) in cross:
                        p2, i2, wgt, block = cross[p, i, n]
                        r += wgt * (block @ h[p2, i2])
                        n += 1
                    rhs.append(r)
                x = self._tagged_diagonal()[p].solve(np.concatenate(rhs))
                at = 0
                for i in levels:
                    h[p, i] = x[at:at + self.dims[i]]
                    at += self.dims[i]
            out.append(h)
        return tuple(out)

    def solve(self, renovation: Renovation | None = None, *, tol: float = 1e-9) -> BufferSolution:
        """The stationary solution and measures with this renovation law (None: no renovation)."""
        start = time.perf_counter()
        if renovation is not None:
            renovation.check_places(self.K - 1)
        buffer = BufferPolicy(self.timers, renovation, self.red)
        Q = self._dense_generator(renovation) if self.n_states <= DENSE_STATES else self.generator(renovation)
        try:
            with np.errstate(all="ignore"):
                x = _stationary(Q)
                h_served, h_expired = self._fates(renovation) if self.removes_pages(renovation) else ({}, {})
        except (RuntimeError, np.linalg.LinAlgError) as exc:
            return _failed(self, buffer, f"{STATUS_MESSAGES[BufferStatus.SINGULAR]}: {exc}",
                           time.perf_counter() - start)
        residual = max(float(np.abs(x @ Q).max()), abs(float(x.sum()) - 1.0))
        p = self.split(x)
        measures = self._measures(p, renovation, h_served, h_expired)
        status = BufferStatus.SUCCESS if residual <= tol and np.all(np.isfinite(x)) else BufferStatus.INACCURATE
        message = STATUS_MESSAGES[status] if status is BufferStatus.SUCCESS else (
            f"{STATUS_MESSAGES[status]}: {residual:.3g} > {tol:g}")
        method = "dense-lu" if isinstance(Q, np.ndarray) else "sparse-lu"
        return BufferSolution(status is BufferStatus.SUCCESS, status, message, method, self.policy, buffer,
                              measures, p, self.n_states, residual, time.perf_counter() - start)

    def _measures(self, p: tuple[NDArray[np.float64], ...], renovation: Renovation | None,
                  h_served: dict[tuple[int, int], NDArray[np.float64]],
                  h_expired: dict[tuple[int, int], NDArray[np.float64]]) -> BufferMeasures:
        K, W, M = self.K, self.W, self.M
        laws = self.laws
        rho = laws.rho
        level = np.array([float(v.sum()) for v in p])
        offered = blocked = red = 0.0
        for i in range(K + 1):
            nu = p[i].reshape(W, -1).sum(axis=1)
            rates_offered, rates_blocked, rates_red = self._arrival_rates[i]
            offered += float(nu @ rates_offered)
            blocked += float(nu @ rates_blocked)
            red += float(nu @ rates_red)
        served = expired = renovated = served_stale = renovated_stale = 0.0
        for i in range(1, K + 1):
            w = i - 1
            x = p[i].reshape(W, M, -1)
            by_m = x.sum(axis=(0, 2))
            served_i = float(by_m @ self.S0)
            served += served_i
            if w == 0:
                continue
            law = renovation.drop_law(w) if renovation is not None else np.eye(1, w)[0]
            renovated += served_i * float(np.arange(w) @ law)
            phases = np.einsum("wmr,m->r", x, self.S0)  # completion rate by the waiting pages' phases
            if laws.exit.any():
                expired += float(x.sum(axis=(0, 1)) @ _exit_total(laws.exit, w))
            if laws.stale is not None:
                at_least = np.cumsum(law[::-1])[::-1]
                for q in range(1, w + 1):
                    s_q = float(phases.reshape(rho ** (q - 1), rho, -1)[:, laws.stale, :].sum())
                    served_stale += law[q - 1] * s_q
                    renovated_stale += (at_least[q] if q < w else 0.0) * s_q
        will_serve = will_expire = 0.0
        for (pos, i), h in h_served.items():  # pi_i once per position: the page there will be served
            will_serve += float(p[i] @ h)
            will_expire += float(p[i] @ h_expired[pos, i])
        if not h_served:  # nothing removes an admitted page: all are served (Little's law on all of them)
            will_serve = float(np.arange(K + 1) @ level)
        robots = self.policy.robots_at_level
        dist: dict[int, float] = {}
        for r, share in zip(robots, level):
            dist[r] = dist.get(r, 0.0) + float(share)
        n = np.arange(K + 1, dtype=float)
        return BufferMeasures(
            arrival_rate=offered,
            p_blocked=blocked / offered,
            p_red=red / offered,
            p_renovated=renovated / offered,
            p_expired=expired / offered,
            p_served=served / offered,
            p_served_stale=served_stale / offered,
            p_renovated_stale=renovated_stale / offered,
            p_starvation=float(level[0]),
            mean_active_robots=float(sum(r * share for r, share in dist.items())),
            active_robots_distribution=tuple(sorted(dist.items(), reverse=True)),
            queue_length_distribution=tuple(float(v) for v in level),
            mean_queue_length=float(n @ level),
            second_moment_queue_length=float((n * n) @ level),
            mean_response_served=will_serve / served if served > 0 else math.nan,
            mean_sojourn_expired=will_expire / expired if expired > 0 else 0.0,
        )


#: The stationary system is solved densely up to this many states (sparse LU fills in almost completely
#: on these Kronecker-structured chains and was no faster; measured in bench/renovation.py).
DENSE_STATES = 2000


def _stationary(Q: Sparse | NDArray[np.float64]) -> NDArray[np.float64]:
    """pi Q = 0, pi e = 1 with the last equation replaced by the normalisation (dense or sparse LU)."""
    n = Q.shape[0]
    rhs = np.zeros(n)
    rhs[n - 1] = 1.0
    if isinstance(Q, np.ndarray):
        A = Q.T.copy()
        A[n - 1, :] = 1.0
        return np.asarray(np.linalg.solve(A, rhs))
    As = sp.lil_matrix(Q.T)
    As[n - 1, :] = np.ones(n)
    return np.asarray(spla.splu(sp.csc_matrix(As)).solve(rhs))


def _exit_total(exit_rates: NDArray[np.float64], w: int) -> NDArray[np.float64]:
    """Total expiry rate of w waiting pages, by their phases (r_1..r_w)."""
    rho = exit_rates.size
    total = np.zeros(rho**w)
    for q in range(1, w + 1):
        total += _kron_vec(np.ones(rho ** (q - 1)), exit_rates, np.ones(rho ** (w - q)))
    return total


def _failed(prep: PreparedBuffer, buffer: BufferPolicy, message: str, seconds: float) -> BufferSolution:
    nan = math.nan
    K = prep.K
    m = BufferMeasures(nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, (), tuple(nan for _ in range(K + 1)),
                       nan, nan, nan, nan)
    empty = tuple(np.full(prep.dims[i], nan) for i in range(K + 1))
    method = "dense-lu" if prep.n_states <= DENSE_STATES else "sparse-lu"
    return BufferSolution(False, BufferStatus.SINGULAR, message, method, prep.policy, buffer, m, empty,
                          prep.n_states, nan, seconds)


def solve_buffer(model: QueueModel, policy: ThresholdPolicy, buffer: BufferPolicy, *, tol: float = 1e-9,
                 prepared: PreparedBuffer | None = None) -> BufferSolution:
    """Stationary distribution and measures of ``model`` under the threshold ``policy`` and the
    ``buffer`` policy (timers, renovation, RED; see the module docstring).

    Parameters
    ----------
    model, policy
        As for :func:`model.solve`.
    buffer : BufferPolicy
        Renovation's q may have at most K entries (q_0..q_{K-1}); RED needs K drop probabilities.
    tol : float
        Residual above which the result has ``status=INACCURATE``.
    prepared : PreparedBuffer, optional
        The blocks for ``model``, ``policy`` and the buffer's timers and RED law, reused across
        renovation laws (see :class:`PreparedBuffer`).

    References
    ----------
    Avrachenkov et al., paper 000, Sections 2-5 (the chain and its measures); Konovalov and
    Razumchik, paper 004, Section 1 (renovation and its two conflict options).
    """
    if not isinstance(buffer, BufferPolicy):
        raise InputError("buffer", f"must be a BufferPolicy, got {type(buffer).__name__}",
                         "e.g. BufferPolicy(timers=False, renovation=Renovation((0.6, 0.4)))")
    if prepared is None:
        prepared = PreparedBuffer(model, policy, buffer)
    elif (prepared.model is not model or prepared.policy != policy or prepared.timers != buffer.timers
          or prepared.red != buffer.red):
        raise InputError("prepared", "was built for another model, policy, timers choice or RED law",
                         "build PreparedBuffer(model, policy, buffer) for this combination")
    return prepared.solve(buffer.renovation, tol=tol)
