"""Paper 004: the M/D/1/N queue with renovation, exactly, for both conflict options.

The system: Poisson arrivals of rate lambda, one server with constant service time d, N waiting places
(N + 1 customers at most), FIFO; at each service completion J ~ q customers are removed from the head
of the queue, conflicts resolved by Option 1 or Option 2 (:class:`Conflict`).

**Embedded chain at completions.** nu_n = customers left in the system just after the n-th completion
(and its renovation), 0..N. From nu_n = i the next service starts with max(i, 1) customers (after an
idle period if i = 0); A ~ Poisson(lambda d) arrive during it, so the next completion leaves

    m = min(max(i - 1, 0) + A, N)

customers waiting, and renovation then removes j of them with probability p_m(j)
(:meth:`Renovation.drop_law`). The transition matrix is the product P = K_A R of the arrival kernel
K_A[i, m] and the renovation kernel R[m, m - j] = p_m(j); it is built from this generic kernel, not
from the printed entries. :func:`transition_matrix_closed_form` writes the entries out (the paper's
Sections 2.1 and 3.1 with Option 2's rows corrected, see below); a test keeps the two equal.

**Time-stationary distribution** (Markov regenerative process, Kulkarni Thm 9.19):
P_n = sum_i P_i^+ f_{in} / f*, with f* = d + P_0^+ / lambda the mean time between completions,
f_00 = 1 / lambda, f_{0n} = f_{1n}, and for i >= 1 (service starting with i customers)
f_{in} = int_0^d P(Poisson(lambda t) = n - i) dt = B_{n-i} / lambda for i <= n <= N and
f_{i,N+1} = (1/lambda) sum_{k >= N+1-i} B_k, where B_k = P(A > k). (The paper's two ways to f_{i,N+1},
its closed form and d - sum_{n<=N} f_{in}, are differences that cancel when P_{N+1} is tiny; the sum
of positive terms equals them, a test checks it, and keeps every P_n >= 0.) (B_k / lambda is the mean time with k
arrivals during a service for *any* service law, so the same code solves M/PH/1/N with A mixed
Poisson: the route that a test sets against the CTMC of :func:`model.solve_buffer`.)

**Loss.** Blocking = P_{N+1} (PASTA); renovation removes E_drop = sum_i P_i^+ sum_m K_A[i, m]
E[J' | m] customers per cycle, so renovation_probability = E_drop / (lambda f*). Served customers leave
at rate 1 / f*, which gives the conservation identity loss = 1 - 1 / (lambda f*): the result states
how far the two sides are apart (``conservation_residual``; 1e-15 in practice).

**The paper's tagged-customer formulas**, kept as a second route for the loss, corrected:

- Option 1, eq. (6) with r_i, r*_i of eqs. (7)-(10): right as printed for N >= 2. For N = 1 the
  Q_1 term must go: a customer who finds the single place free fills the system, nobody can arrive
  behind it, and Option 1 never removes the last waiting customer. Written as
  pi = P_{N+1} + sum_{i=1}^{N} [g_i L0_i + (P_i - g_i) L1_i] with g_i = int p_i(x) e^{-lambda(d-x)} dx
  (no arrival before the completion), L0/L1 the loss probabilities without/with someone behind.
- Option 2, eq. (12): the sum over the number i the customer finds is missing, and for i = 1 the
  term Q_{j+1} r_{j,-1} must read 0 (the customer enters service). Eq. (13) integrates the wrong
  interval: the j arrivals come in the *remaining* service time, so
  gamma_ij = int_0^d p_i(x) (lambda (d-x))^j / j! e^{-lambda(d-x)} dx
  = (1/lambda) sum_{k<i} p_{i-k}(0) beta_{k+j+1} (a Beta integral). In eq. (15) the last term of
  the first sum reads Q_{j+m+1} r_{m,j-1}, not r_{j,j-1}: after the arrivals the customer has m
  behind it. Eq. (14) is right (its two sums split the capped arrivals at a different point).
- Option 2's matrix, rows i >= 3: the printed entries are those of row 2 for every i (the index of
  beta does not move with i) and their rows do not sum to one. From m = i - 1 + A:
  p_ij = sum_{k=0}^{N-i} beta_k q_{k+i-1-j} + B_{N-i} q_{N-j} for 1 <= j <= i - 2,
  p_ij = beta_{j-i+1} Q_j + sum_{k=j-i+1}^{N-i} beta_k q_{k+i-1-j} + B_{N-i} q_{N-j} for
  i - 1 <= j <= N - 1, and p_iN = (q_0 + q_N) B_{N-i}.

The boundary densities p_n(0) come from eq. (5) (right as printed); they equal
(P_n^+ + [n = 1] P_0^+) / f*, the rate of service starts with n customers, which a test checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from robotctl._checks import positive, whole
from robotctl._errors import InputError

from ._buffer import Conflict, Renovation
from ._buffer_solve import STATUS_MESSAGES, BufferStatus
from ._ph import PH

#: Conservation residual and stationary residual above which the result is INACCURATE.
TOL = 1e-10


def gth_stationary(P: NDArray[np.float64]) -> NDArray[np.float64]:
    """Stationary row vector of a stochastic matrix by Grassmann-Taksar-Heyman state reduction (no
    subtractions, so it keeps full relative precision; Stewart, *Introduction to the numerical
    solution of Markov chains*, Section 2.7)."""
    A = np.array(P, dtype=float)
    n = A.shape[0]
    for k in range(n - 1, 0, -1):
        s = A[k, :k].sum()
        if s <= 0.0:
            raise np.linalg.LinAlgError(f"state {k} cannot reach the states below it (reducible chain)")
        A[:k, k] /= s
        A[:k, :k] += np.outer(A[:k, k], A[k, :k])
    x = np.zeros(n)
    x[0] = 1.0
    for k in range(1, n):
        x[k] = x[:k] @ A[:k, k]
    return x / x.sum()


@dataclass(frozen=True)
class ArrivalCounts:
    """The law of A, arrivals during one service: a_k = P(A = k) and tails B_k = P(A > k), k = 0..n, and
    ``excess[k]`` = sum_{m >= k} P(A > m) = E (A - k)^+, a sum of positive terms (lambda times the mean
    time a service spends with at least k arrivals)."""

    pmf: NDArray[np.float64]
    tail: NDArray[np.float64]
    excess: NDArray[np.float64]
    mean_service: float

    @classmethod
    def deterministic(cls, rate: float, d: float, n: int) -> ArrivalCounts:
        """A ~ Poisson(lambda d): beta_k of paper 004, Section 2.1, and B_k = P(A > k) by the regularised
        incomplete gamma function (no cancellation in the tail)."""
        from scipy.special import gammainc, gammaln

        x = rate * d
        top = n + int(x + 40.0 * math.sqrt(x)) + 60  # P(A > top) is below 1e-300 of the tail at n
        k = np.arange(top + 1)
        pmf = np.exp(k * math.log(x) - x - gammaln(k + 1))
        tail = np.asarray(gammainc(k + 1, x))
        excess = np.cumsum(tail[::-1])[::-1]
        return cls(pmf[:n + 1], tail[:n + 1], excess[:n + 1], d)

    @classmethod
    def phase_type(cls, rate: float, service: PH, n: int) -> ArrivalCounts:
        """A mixed Poisson over a PH(beta, S) service: P(A >= k) = beta (lambda (lambda I - S)^{-1})^k e."""
        S = np.asarray(service.S)
        U = np.linalg.inv(rate * np.eye(S.shape[0]) - S)
        step = rate * U
        v = np.asarray(service.beta, dtype=float)
        rest = np.linalg.solve(np.eye(S.shape[0]) - step, np.ones(S.shape[0]))  # sum_k step^k e
        at_least, excess = [1.0], []
        for _ in range(n + 1):
            v = v @ step
            at_least.append(float(v.sum()))
            excess.append(float(v @ rest))  # sum_{m >= k} beta step^{m+1} e
        ge = np.array(at_least)
        return cls(ge[:-1] - ge[1:], ge[1:], np.array(excess), service.mean)


@dataclass(frozen=True, eq=False)
class MD1NSolution:
    """The M/D/1/N queue with renovation (paper 004), or M/PH/1/N by the same route.

    Attributes
    ----------
    success : bool
    status : BufferStatus
    message : str
    method : str
        ``embedded-chain``.
    arrival_rate : float
        lambda.
    mean_service : float
        d (or the PH mean).
    places : int
        N, waiting places.
    renovation : Renovation
    transition : ndarray (N+1, N+1)
        P of the embedded chain at completions.
    embedded : tuple of float
        P_0^+..P_N^+.
    f_star : float
        Mean time between completions.
    distribution : tuple of float
        P_0..P_{N+1}, time-stationary.
    mean_in_system, second_moment : float
        E N(t), E N(t)^2.
    blocking_probability, renovation_probability, loss_probability : float
        Loss split into arrivals that find the system full and customers removed by renovation.
    loss_conservation : float
        1 - 1 / (lambda f*).
    loss_tagged : float
        The loss by the paper's tagged-customer formula, eq. (6) or the corrected eq. (12) (NaN for
        non-deterministic service).
    boundary : tuple of float
        p_1(0)..p_N(0) by eq. (5) (empty for non-deterministic service).
    conservation_residual : float
        max |loss - loss_conservation|, |loss_tagged - loss_conservation|.
    residual : float
        max |P^+ P - P^+|.
    """

    success: bool
    status: BufferStatus
    message: str
    method: str
    arrival_rate: float
    mean_service: float
    places: int
    renovation: Renovation
    transition: NDArray[np.float64]
    embedded: tuple[float, ...]
    f_star: float
    distribution: tuple[float, ...]
    mean_in_system: float
    second_moment: float
    blocking_probability: float
    renovation_probability: float
    loss_probability: float
    loss_conservation: float
    loss_tagged: float
    boundary: tuple[float, ...]
    conservation_residual: float
    residual: float

    def to_dict(self) -> dict[str, object]:
        """The JSON contract of ``robotctl renovation --json``."""
        return {
            "success": self.success, "status": self.status.name.lower(), "message": self.message,
            "method": self.method, "arrival_rate": self.arrival_rate, "service_time": self.mean_service,
            "places": self.places, "q": list(self.renovation.q), "option": int(self.renovation.conflict),
            "loss_probability": self.loss_probability, "blocking_probability": self.blocking_probability,
            "renovation_probability": self.renovation_probability, "mean_in_system": self.mean_in_system,
            "second_moment": self.second_moment, "distribution": list(self.distribution),
            "embedded": list(self.embedded), "f_star": self.f_star,
            "loss_conservation": self.loss_conservation,
            "loss_tagged": self.loss_tagged if math.isfinite(self.loss_tagged) else None,
            "conservation_residual": self.conservation_residual, "residual": self.residual,
        }


def arrival_kernel(counts: ArrivalCounts, places: int) -> NDArray[np.float64]:
    """K_A[i, m] = P(m waiting after the next completion | i left by this one): m = min(max(i-1, 0) + A, N)."""
    N = places
    K = np.zeros((N + 1, N + 1))
    for i in range(N + 1):
        base = max(i - 1, 0)
        K[i, base:N] = counts.pmf[:N - base]
        K[i, N] = counts.tail[N - base - 1] if N - base >= 1 else 1.0
    return K


def renovation_kernel(renovation: Renovation, places: int) -> NDArray[np.float64]:
    """R[m, m - j] = P(j removed | m waiting) (:meth:`Renovation.drop_law`)."""
    R = np.zeros((places + 1, places + 1))
    for m in range(places + 1):
        for j, pj in enumerate(renovation.drop_law(m)):
            R[m, m - j] += pj
    return R


def transition_matrix_closed_form(counts: ArrivalCounts, places: int, renovation: Renovation) -> NDArray[np.float64]:
    """The embedded chain's matrix entry by entry: paper 004, Section 2.1 (Option 1, as printed) and
    Section 3.1 (Option 2, rows i >= 3 corrected as in the module docstring), with beta_k = a_k and
    B_k = P(A > k)."""
    N = places
    q = np.zeros(N + 2)
    q[:len(renovation.q)] = renovation.q
    Q = np.array([renovation.tail(j) for j in range(N + 2)])
    b, B = counts.pmf, counts.tail
    P = np.zeros((N + 1, N + 1))
    P[0, 0] = P[1, 0] = b[0]
    option1 = renovation.conflict is Conflict.KEEP_ONE
    for j in range(1, N + 1):
        if option1:
            if j == 1:
                v = sum(b[k] * (q[k - 1] + Q[k]) for k in range(1, N)) + B[N - 1] * (q[N - 1] + Q[N])
            else:
                v = sum(b[k] * q[k - j] for k in range(j, N)) + B[N - 1] * q[N - j]
        else:
            if j < N:
                v = b[j] * Q[j] + sum(b[k] * q[k - j] for k in range(j, N)) + B[N - 1] * q[N - j]
            else:
                v = (q[0] + q[N]) * B[N - 1]
        P[0, j] = P[1, j] = v
    for i in range(2, N + 1):
        top = N - i  # A = 0..N-i-1 keep m < N; A >= N-i+1 gives m = N: probability B_{N-i}
        for j in range(1, N + 1):
            if option1:
                if j == 1:
                    v = sum(b[k] * (Q[k + i - 1] + q[k + i - 2]) for k in range(0, top + 1)) \
                        + B[top] * (Q[N] + q[N - 1])
                else:
                    v = sum(b[k] * q[k - j + i - 1] for k in range(max(0, j - i + 1), top + 1)) + B[top] * q[N - j]
            else:
                if j <= i - 2:
                    v = sum(b[k] * q[k + i - 1 - j] for k in range(0, top + 1)) + B[top] * q[N - j]
                elif j <= N - 1:
                    v = b[j - i + 1] * Q[j] + sum(b[k] * q[k + i - 1 - j] for k in range(j - i + 1, top + 1)) \
                        + B[top] * q[N - j]
                else:
                    v = (q[0] + q[N]) * B[top]
            P[i, j] = v
    return P


def solve_md1n(arrival_rate: float, service: float | PH, places: int, renovation: Renovation) -> MD1NSolution:
    """The M/D/1/N queue with renovation of paper 004, exactly (see the module docstring).

    Parameters
    ----------
    arrival_rate : float
        lambda > 0.
    service : float or PH
        The constant service time d > 0 (the paper); a PH law instead solves M/PH/1/N by the same
        embedded chain (the tagged-customer formulas are then skipped).
    places : int
        N >= 1 waiting places.
    renovation : Renovation
        q_0..q_n with n <= N, and the conflict option.

    References
    ----------
    Konovalov and Razumchik, "Queueing systems with renovation vs. queues with RED. Supplementary
    Material" (paper 004), Sections 2.1-2.2 and 3.1-3.2.
    """
    lam = positive("arrival_rate", arrival_rate, "pages offered per second, e.g. 0.9")
    N = whole("places", places, 1, "N counts the waiting places (the customer in service excluded)")
    if not isinstance(renovation, Renovation):
        raise InputError("renovation", f"must be a Renovation, got {type(renovation).__name__}", "")
    renovation.check_places(N)
    if isinstance(service, PH):
        counts = ArrivalCounts.phase_type(lam, service, N + 2)
        deterministic = None
    else:
        deterministic = positive("service_time", service, "the constant service time in seconds, e.g. 1.0")
        counts = ArrivalCounts.deterministic(lam, deterministic, N + 2)
    KA = arrival_kernel(counts, N)
    P = KA @ renovation_kernel(renovation, N)
    try:
        pp = gth_stationary(P)
    except np.linalg.LinAlgError as exc:
        return _failed(lam, counts.mean_service, N, renovation, P, f"{STATUS_MESSAGES[BufferStatus.SINGULAR]}: {exc}")
    residual = float(np.abs(pp @ P - pp).max())
    f_star = counts.mean_service + pp[0] / lam
    # f_{in}: mean time with n customers during a cycle that starts from i
    f = np.zeros((N + 1, N + 2))
    f[0, 0] = 1.0 / lam
    for i in range(N + 1):
        start = max(i, 1)
        for n in range(start, N + 1):
            f[i, n] = counts.tail[n - start] / lam
        f[i, N + 1] = counts.excess[N + 1 - start] / lam  # mean time with N + 1: A >= N + 1 - start arrived
    dist = pp @ f / f_star
    levels = np.arange(N + 2, dtype=float)
    drops = np.array([renovation.mean_drop(m) for m in range(N + 1)])
    e_drop = float(pp @ KA @ drops)
    blocking = float(dist[N + 1])
    renov = e_drop / (lam * f_star)
    loss = blocking + renov
    conserved = 1.0 - 1.0 / (lam * f_star)
    if deterministic is not None:
        boundary = boundary_densities(lam, counts, dist)
        tagged = _tagged_loss(lam, counts, N, renovation, dist, boundary)
    else:
        boundary, tagged = np.zeros(0), math.nan
    gaps = [abs(loss - conserved)] + ([abs(tagged - conserved)] if math.isfinite(tagged) else [])
    cons = max(gaps)
    ok = cons <= TOL and residual <= TOL and bool(np.all(np.isfinite(dist)))
    status = BufferStatus.SUCCESS if ok else BufferStatus.INACCURATE
    message = "solved" if ok else f"{STATUS_MESSAGES[status]}: conservation {cons:.3g}, stationarity {residual:.3g}"
    P.flags.writeable = False
    return MD1NSolution(
        success=ok, status=status, message=message, method="embedded-chain", arrival_rate=lam,
        mean_service=counts.mean_service, places=N, renovation=renovation, transition=P,
        embedded=tuple(float(x) for x in pp), f_star=float(f_star), distribution=tuple(float(x) for x in dist),
        mean_in_system=float(levels @ dist), second_moment=float((levels * levels) @ dist),
        blocking_probability=blocking, renovation_probability=renov, loss_probability=loss,
        loss_conservation=conserved, loss_tagged=tagged, boundary=tuple(float(x) for x in boundary),
        conservation_residual=cons, residual=residual)


def _failed(lam: float, mean: float, N: int, renovation: Renovation, P: NDArray[np.float64],
            message: str) -> MD1NSolution:
    nan = math.nan
    return MD1NSolution(False, BufferStatus.SINGULAR, message, "embedded-chain", lam, mean, N, renovation, P,
                        (), nan, (), nan, nan, nan, nan, nan, nan, nan, (), nan, nan)


def boundary_densities(lam: float, counts: ArrivalCounts, dist: NDArray[np.float64]) -> NDArray[np.float64]:
    """p_n(0), n = 1..N, by eq. (5): p_n(0) = (lambda P_n - sum_{k=1}^{n-1} B_k p_{n-k}(0)) / B_0."""
    N = dist.size - 2
    B = counts.tail
    p0 = np.zeros(N + 1)  # p0[n] = p_n(0), p0[0] unused
    for n in range(1, N + 1):
        p0[n] = (lam * dist[n] - sum(B[k] * p0[n - k] for k in range(1, n))) / B[0]
    return p0[1:]


def _gamma(lam: float, counts: ArrivalCounts, boundary: NDArray[np.float64], i: int, j: int) -> float:
    """Corrected eq. (13): P(the customer finds i, and j arrive before the completion), per unit time
    of PASTA, = (1/lambda) sum_{k<i} p_{i-k}(0) beta_{k+j+1}."""
    b = counts.pmf
    return float(sum(boundary[i - k - 1] * b[k + j + 1] for k in range(i)) / lam)


def _tagged_loss(lam: float, counts: ArrivalCounts, N: int, renovation: Renovation, dist: NDArray[np.float64],
                 boundary: NDArray[np.float64]) -> float:
    """The loss probability by the tagged-customer formulas, eq. (6) (Option 1) or the corrected
    eq. (12) (Option 2); see the module docstring."""
    q = np.zeros(N + 2)
    q[:len(renovation.q)] = renovation.q
    Q = np.array([renovation.tail(j) for j in range(N + 3)])
    b = counts.pmf
    if renovation.conflict is Conflict.KEEP_ONE:
        E = float(b[0])  # e^{-lambda d}: no arrival during a whole service
        r, rs = np.zeros(max(N - 1, 0)), np.zeros(max(N - 1, 0))  # eqs. (7)-(10), indices 0..N-2
        for i in range(N - 1):
            if i == 0:
                r[0], rs[0] = (1.0 - E) * Q[1], Q[1]
                continue
            ahead = float(sum(q[j] * r[i - 1 - j] for j in range(i)))
            ahead_s = float(sum(q[j] * rs[i - 1 - j] for j in range(i)))
            r[i] = E * ahead + (1.0 - E) * (ahead_s + Q[i + 1])
            rs[i] = ahead_s + Q[i + 1]
        loss = float(dist[N + 1])
        for i in range(1, N + 1):
            alone = _gamma(lam, counts, boundary, i, 0)  # no arrival before the completion
            L0 = float(sum(q[j] * r[i - 2 - j] for j in range(i - 1)))
            L1 = L0 if i == N else float(sum(q[j] * rs[i - 2 - j] for j in range(i - 1))) + Q[i]
            loss += alone * L0 + (dist[i] - alone) * L1
        return loss
    r2 = _option2_r(counts, N, q, Q)
    loss = float(dist[N + 1])
    for i in range(1, N + 1):
        cap = N - i
        weights = [_gamma(lam, counts, boundary, i, j) for j in range(cap)]
        weights.append(float(dist[i]) - sum(weights))  # j >= N - i arrivals: all but N - i are blocked
        for bh, g in enumerate(weights):
            L = float(sum(q[k] * r2[bh, i - 2 - k] for k in range(i - 1)) + q[i:i + bh].sum())
            if i >= 2:
                L += Q[i + bh] * r2[bh, i - 2]
            loss += g * L
    return loss


def _option2_r(counts: ArrivalCounts, N: int, q: NDArray[np.float64], Q: NDArray[np.float64]) -> NDArray[np.float64]:
    """r[b, j]: P(a waiting customer with j ahead and b behind, at a service start, is removed) under
    Option 2, b + j <= N - 1: eq. (14) and eq. (15) with its last term corrected to Q_{j+m+1} r_{m,j-1}.

    During the service min(A, N - 1 - b - j) arrive behind it (m = b + A behind); then J < j leaves it
    j - 1 - J ahead (r[m, j-1-J]), J = j serves it, j < J <= j + m removes it, and J > j + m removes
    nobody, leaving it j - 1 ahead (r[m, j-1]); for j = 0 it is removed iff 1 <= J <= m.
    """
    b = counts.pmf
    r2 = np.zeros((N, N))

    def capped(cap: int) -> list[tuple[int, float]]:
        """(a, P(min(A, cap) = a))."""
        if cap == 0:
            return [(0, 1.0)]
        return [(a, float(b[a])) for a in range(cap)] + [(cap, float(counts.tail[cap - 1]))]

    for j in range(N):
        for bh in range(N - j):
            total = 0.0
            for a, pa in capped(N - 1 - bh - j):
                m = bh + a
                if j == 0:
                    v = float(q[1:m + 1].sum())
                else:
                    v = float(sum(q[k] * r2[m, j - 1 - k] for k in range(j)) + q[j + 1:j + m + 1].sum()
                              + Q[j + m + 1] * r2[m, j - 1])
                total += pa * v
            r2[bh, j] = total
    return r2
