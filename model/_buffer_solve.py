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
  Kronecker blocks and solved by sparse LU (SuperLU), the method every solution names.

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
is removed. It is assembled from the same Kronecker blocks, each with a 0/1 map of positions.
"""

from __future__ import annotations

import enum
import math
import time
from dataclasses import asdict, dataclass
from functools import reduce
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from robotctl._errors import InputError

from ._buffer import BufferPolicy, Renovation
from ._measures import CostBreakdown
from ._model import Costs, QueueModel
from ._policy import ThresholdPolicy

Sparse = sp.csr_matrix


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
    def p_dropped(self) -> float:
        """Pages removed by the buffer's own rules before service (RED and renovation)."""
        return self.p_red + self.p_renovated

    @property
    def throughput(self) -> float:
        """Pages indexed per second."""
        return self.arrival_rate * self.p_served

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["active_robots_distribution"] = {str(m): p for m, p in self.active_robots_distribution}
        d["queue_length_distribution"] = list(self.queue_length_distribution)
        for name in ("p_loss", "p_stale", "p_dropped", "throughput"):
            d[name] = getattr(self, name)
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
        ``sparse-lu`` (or ``bruteforce`` from the independent route).
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
    return reduce(np.kron, vs, np.ones(1))


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
    """

    def __init__(self, model: QueueModel, policy: ThresholdPolicy, buffer: BufferPolicy) -> None:
        model.check_policy(policy)
        buffer.check_capacity(model.capacity)
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
        # tagged chain: levels 1..K, level i holds i copies (positions) of level i
        tdims = [0] + [i * self.dims[i] for i in range(1, K + 1)]
        self.tagged_offsets = np.concatenate([[0], np.cumsum(tdims)]).astype(int)
        self._arrival_rates: list[tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]] = []
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
    def _build(self) -> None:
        K, W, M = self.K, self.W, self.M
        laws = self.laws
        rho = laws.rho
        inner = [1] + [M * rho ** (i - 1) for i in range(1, K + 1)]
        # A_i = S (+) G^{(+)(i-1)}: phases of the service and of the i - 1 waiting pages
        A: list[Sparse] = [sp.csr_matrix((1, 1)), sp.csr_matrix(self.S)]
        for i in range(2, K + 1):
            A.append(_kron(A[i - 1], _eye(rho)) + _kron(_eye(inner[i - 1]), laws.G))
        base: dict[tuple[int, int], Sparse] = {}
        tagged: dict[tuple[int, int], Sparse] = {}

        def add(cells: dict[tuple[int, int], Sparse], key: tuple[int, int], block: Sparse) -> None:
            cells[key] = cells[key] + block if key in cells else block

        def pos_map(n_from: int, n_to: int, target: dict[int, int]) -> Sparse:
            m = sp.lil_matrix((n_from, n_to))
            for p, p2 in target.items():
                m[p, p2] = 1.0
            return sp.csr_matrix(m)

        self.arrivals = [self._arrivals(i) for i in range(K + 1)]
        for i in range(K + 1):
            arr = self.arrivals[i]
            if i == 0:
                add(base, (0, 0), sp.csr_matrix(arr[0]))
            else:
                stay = _kron(arr[0], _eye(inner[i])) + _kron(_eye(W), A[i])
                add(base, (i, i), stay)
                add(tagged, (i, i), _kron(_eye(i), stay))
            for a in range(1, K - i + 1):
                if not arr[a].any():
                    continue
                if i == 0:
                    block = _kron(arr[a], _row(_kron_vec(self.beta, *([laws.gamma] * (a - 1)))))
                else:
                    block = _kron(arr[a], _eye(inner[i]), _row(_kron_vec(*([laws.gamma] * a))))
                    add(tagged, (i, i + a), _kron(pos_map(i, i + a, {p: p for p in range(i)}), block))
                add(base, (i, i + a), block)
        # timers: the waiting page at position q (1..w) expires, level i -> i - 1
        self.expiry_exit: list[NDArray[np.float64]] = [np.zeros(0)] * (K + 1)
        if laws.exit.any():
            for i in range(2, K + 1):
                w = i - 1
                total = None
                for q in range(1, w + 1):
                    E = _kron(_eye(W * M), _eye(rho ** (q - 1)), _col(laws.exit), _eye(rho ** (w - q)))
                    total = E if total is None else total + E
                    keep = {p: (p if p < q else p - 1) for p in range(i) if p != q}
                    add(tagged, (i, i - 1), _kron(pos_map(i, i - 1, keep), E))
                assert total is not None
                add(base, (i, i - 1), total)
        # completions: level i, w = i - 1 waiting, j removed by renovation -> level i - 1 - j
        self.completions: dict[tuple[int, int], tuple[Sparse, Sparse | None]] = {}
        self.completions[1, 0] = (_kron(_eye(W), _col(self.S0)), None)
        S0beta = np.outer(self.S0, self.beta)
        for i in range(2, K + 1):
            w = i - 1
            for j in range(w):
                block = _kron(_eye(W), S0beta, _col(np.ones(rho ** (j + 1))), _eye(rho ** (w - 1 - j)))
                target = {p: (0 if p == j + 1 else p - j - 1) for p in range(j + 1, i)}
                self.completions[i, j] = (block, _kron(pos_map(i, i - 1 - j, target), block))
        self._base = base
        self._tagged = tagged

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
        cells = dict(self._base)
        for (i, j), wgt in self._weights(renovation).items():
            key = (i, i - 1 - j)
            block = wgt * self.completions[i, j][0]
            cells[key] = cells[key] + block if key in cells else block
        grid = [[cells.get((a, b)) for b in range(self.K + 1)] for a in range(self.K + 1)]
        for a in range(self.K + 1):  # bmat needs every block row and column to have a shape
            if grid[a][a] is None:
                grid[a][a] = sp.csr_matrix((self.dims[a], self.dims[a]))
        return sp.csr_matrix(sp.bmat(grid, format="csr"))

    def tagged(self, renovation: Renovation | None) -> Sparse:
        """The tagged chain's transient generator (levels 1..K, positions 0..i-1 within level i)."""
        cells = dict(self._tagged)
        for (i, j), wgt in self._weights(renovation).items():
            tag = self.completions[i, j][1]
            if tag is None:
                continue
            key = (i, i - 1 - j)
            cells[key] = cells[key] + wgt * tag if key in cells else wgt * tag
        grid = [[cells.get((a, b)) for b in range(1, self.K + 1)] for a in range(1, self.K + 1)]
        for a in range(self.K):
            if grid[a][a] is None:
                n = (a + 1) * self.dims[a + 1]
                grid[a][a] = sp.csr_matrix((n, n))
        return sp.csr_matrix(sp.bmat(grid, format="csr"))

    def tagged_exits(self, renovation: Renovation | None) -> dict[str, NDArray[np.float64]]:
        """Absorption rates of the tagged chain: ``served``, ``expired``, ``removed`` (by renovation)."""
        W, M, rho = self.W, self.M, self.laws.rho
        served, expired, removed = [], [], []
        for i in range(1, self.K + 1):
            w = i - 1
            law = renovation.drop_law(w) if renovation is not None and w >= 1 else np.ones(1)
            at_least = np.cumsum(law[::-1])[::-1]  # P(J' >= j), j = 0..
            for p in range(i):
                svc = _kron_vec(np.ones(W), self.S0, np.ones(rho ** w))
                served.append(svc if p == 0 else np.zeros(self.dims[i]))
                if p == 0:
                    expired.append(np.zeros(self.dims[i]))
                    removed.append(np.zeros(self.dims[i]))
                    continue
                expired.append(_kron_vec(np.ones(W * M), np.ones(rho ** (p - 1)), self.laws.exit,
                                         np.ones(rho ** (w - p))))
                removed.append(svc * (at_least[p] if p < at_least.size else 0.0))
        return {"served": np.concatenate(served), "expired": np.concatenate(expired),
                "removed": np.concatenate(removed)}

    def split(self, x: NDArray[np.float64]) -> tuple[NDArray[np.float64], ...]:
        return tuple(np.asarray(x[self.offsets[i]:self.offsets[i + 1]]) for i in range(self.K + 1))

    # -- solve -------------------------------------------------------------------------------------
    def solve(self, renovation: Renovation | None = None, *, tol: float = 1e-9) -> BufferSolution:
        """The stationary solution and measures with this renovation law (None: no renovation)."""
        start = time.perf_counter()
        if renovation is not None:
            renovation.check_places(self.K - 1)
        buffer = BufferPolicy(self.timers, renovation, self.red)
        Q = self.generator(renovation)
        n = Q.shape[0]
        A = sp.lil_matrix(Q.T)
        A[n - 1, :] = np.ones(n)
        rhs = np.zeros(n)
        rhs[n - 1] = 1.0
        try:
            with np.errstate(all="ignore"):
                x = spla.splu(sp.csc_matrix(A)).solve(rhs)
                T = self.tagged(renovation)
                exits = self.tagged_exits(renovation)
                lu_t = spla.splu(sp.csc_matrix(-T))
                h_served = lu_t.solve(exits["served"])
                h_expired = lu_t.solve(exits["expired"]) if exits["expired"].any() else np.zeros(T.shape[0])
        except RuntimeError as exc:
            return _failed(self, buffer, f"{STATUS_MESSAGES[BufferStatus.SINGULAR]}: {exc}",
                           time.perf_counter() - start)
        residual = max(float(np.abs(Q.T @ x).max()), abs(float(x.sum()) - 1.0))
        p = self.split(x)
        measures = self._measures(p, renovation, h_served, h_expired)
        status = BufferStatus.SUCCESS if residual <= tol and np.all(np.isfinite(x)) else BufferStatus.INACCURATE
        message = STATUS_MESSAGES[status] if status is BufferStatus.SUCCESS else (
            f"{STATUS_MESSAGES[status]}: {residual:.3g} > {tol:g}")
        return BufferSolution(status is BufferStatus.SUCCESS, status, message, "sparse-lu", self.policy, buffer,
                              measures, p, self.n_states, residual, time.perf_counter() - start)

    def _measures(self, p: tuple[NDArray[np.float64], ...], renovation: Renovation | None,
                  h_served: NDArray[np.float64], h_expired: NDArray[np.float64]) -> BufferMeasures:
        K, W, M = self.K, self.W, self.M
        laws = self.laws
        rho = laws.rho
        level = np.array([float(v.sum()) for v in p])
        offered = blocked = red = 0.0
        for i in range(K + 1):
            nu = p[i].reshape(W, -1).sum(axis=1)
            o, b, r = self._arrival_rates[i]
            offered += float(nu @ o)
            blocked += float(nu @ b)
            red += float(nu @ r)
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
        for i in range(1, K + 1):
            seg = slice(self.tagged_offsets[i], self.tagged_offsets[i + 1])
            occupancy = np.tile(p[i], i)  # pi_i once per position
            will_serve += float(occupancy @ h_served[seg])
            will_expire += float(occupancy @ h_expired[seg])
        robots = self.policy.robots_at_level
        dist: dict[int, float] = {}
        for r, q in zip(robots, level):
            dist[r] = dist.get(r, 0.0) + float(q)
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
            mean_active_robots=float(sum(r * q for r, q in dist.items())),
            active_robots_distribution=tuple(sorted(dist.items(), reverse=True)),
            queue_length_distribution=tuple(float(v) for v in level),
            mean_queue_length=float(n @ level),
            second_moment_queue_length=float((n * n) @ level),
            mean_response_served=will_serve / served if served > 0 else math.nan,
            mean_sojourn_expired=will_expire / expired if expired > 0 else 0.0,
        )


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
    return BufferSolution(False, BufferStatus.SINGULAR, message, "sparse-lu", prep.policy, buffer, m, empty,
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
