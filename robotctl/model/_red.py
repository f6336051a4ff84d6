"""RED on the M/M/1 queue with N waiting places: the stationary law, the loss split, and the law of
the number of consecutive losses between two accepted arrivals (paper 004, Section 2.3).

An arrival that finds n customers (n = 0..N) is dropped with probability d_n, and always when it finds
N + 1 (the system is full; d_{N+1} = 1). The number in system is a birth-death chain with birth rates
lambda (1 - d_n) and death rate mu, so P_{n+1} = P_n lambda (1 - d_n) / mu.

**Consecutive losses** (eq. (11)): P(L = k) = P(accepted, k lost, accepted) / P(accepted, next lost).
With delta = lambda / (lambda + mu) (an arrival comes before a completion while the server is busy),
an arrival accepted from n leaves n + 1, and the next arrival finds i <= n + 1 with probability
delta (1 - delta)^{n+1-i} (i >= 1) or (1 - delta)^{n+1} (i = 0: the system emptied first, then the
next event is surely an arrival). Let l_{k,i} be the probability that, from i customers just after an
accepted arrival or a loss, the next k arrivals are lost and the one after is accepted. Then

    l_{0,i} = sum_{m=1}^{i} delta (1 - d_m) (1 - delta)^{i-m} + (1 - delta)^i (1 - d_0),
    l_{k,0} = d_0 l_{k-1,0},
    l_{k,i} = delta d_i l_{k-1,i} + (1 - delta) l_{k,i-1},   k >= 1, i >= 1,

and P(L = k) = sum_n P_n (1 - d_n) l_{k,n+1} / sum_n P_n (1 - d_n) (1 - l_{0,n+1}).

*Typo in the paper.* Its base case names the first sum l_{1,i}: that sum is the probability that the
*next* arrival is accepted, i.e. zero losses, l_{0,i}. Started at k = 1 the recursion's P(L = k) do
not sum to one (a test shows it); started at k = 0 they do, since sum_{k>=1} l_{k,i} = 1 - l_{0,i}.
The paper also drops the (1 - delta) l_{k,0} term from l_{k,1}, which is right only when d_0 = 0.
A second route computes the same law from matrix powers of the chain seen by arrivals
(:func:`consecutive_losses_matrix`), which also gives the exact mean and second moment of L.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from robotctl._checks import positive
from robotctl._errors import InputError

from ._buffer import RedDrop
from ._buffer_solve import BufferStatus

#: P(L = k) is listed for k = 1..MAX_RUN by default.
MAX_RUN = 30


@dataclass(frozen=True)
class RedMM1Solution:
    """M/M/1 with N waiting places under RED (paper 004, Section 2.3).

    Attributes
    ----------
    success : bool
    status : BufferStatus
    message : str
    arrival_rate, service_rate : float
    places : int
        N (the drop law has N + 1 entries d_0..d_N).
    drop : RedDrop
    distribution : tuple of float
        P_0..P_{N+1}.
    loss_probability, blocking_probability, red_probability : float
        All losses, arrivals that find the system full, arrivals dropped early.
    mean_in_system, second_moment : float
    consecutive_losses : tuple of float
        P(L = k), k = 1..max_run, by the corrected recursion.
    consecutive_tail : float
        P(L > max_run).
    mean_consecutive_losses, second_moment_consecutive_losses : float
        E L and E L^2, exactly (matrix route).
    """

    success: bool
    status: BufferStatus
    message: str
    arrival_rate: float
    service_rate: float
    places: int
    drop: RedDrop
    distribution: tuple[float, ...]
    loss_probability: float
    blocking_probability: float
    red_probability: float
    mean_in_system: float
    second_moment: float
    consecutive_losses: tuple[float, ...]
    consecutive_tail: float
    mean_consecutive_losses: float
    second_moment_consecutive_losses: float


def red_mm1_distribution(arrival_rate: float, service_rate: float, drop: RedDrop) -> NDArray[np.float64]:
    """P_0..P_{N+1} of the birth-death chain (N + 1 = number of drop probabilities)."""
    d = np.asarray(drop.probabilities)
    x = np.ones(d.size + 1)
    for n in range(d.size):
        x[n + 1] = x[n] * arrival_rate * (1.0 - d[n]) / service_rate
    return x / x.sum()


def consecutive_losses(arrival_rate: float, service_rate: float, drop: RedDrop, distribution: NDArray[np.float64],
                       max_run: int) -> NDArray[np.float64]:
    """P(L = k), k = 1..max_run, by the recursion of Section 2.3 with its base case at k = 0 (module
    docstring). NaN when no arrival is ever accepted and then lost."""
    delta = arrival_rate / (arrival_rate + service_rate)
    dd = np.append(np.asarray(drop.probabilities), 1.0)  # d_0..d_N, d_{N+1} = 1
    top = dd.size  # states 0..N+1
    l0 = np.array([sum(delta * (1.0 - dd[m]) * (1.0 - delta) ** (i - m) for m in range(1, i + 1))
                   + (1.0 - delta) ** i * (1.0 - dd[0]) for i in range(top)])
    P = np.asarray(distribution)
    weight = P[:top - 1] * (1.0 - dd[:top - 1])  # accepted arrivals from n = 0..N
    denominator = float(weight @ (1.0 - l0[1:]))
    if denominator <= 0.0:
        return np.full(max_run, math.nan)
    out = np.zeros(max_run)
    prev = l0
    for k in range(1, max_run + 1):
        cur = np.zeros(top)
        cur[0] = dd[0] * prev[0]
        for i in range(1, top):
            cur[i] = delta * dd[i] * prev[i] + (1.0 - delta) * cur[i - 1]
        out[k - 1] = float(weight @ cur[1:]) / denominator
        prev = cur
    return out


def _arrival_chain(arrival_rate: float, service_rate: float, drop: RedDrop, distribution: NDArray[np.float64]
                   ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """(x, Lm, a): x_i = rate-weight of acceptances leaving i customers; Lm = T diag(d), the step to the
    next arrival that is lost (the state is what it found); a = T (1 - d), the chance the next arrival
    is accepted. T[i, i'] = P(the next arrival finds i' | i now)."""
    delta = arrival_rate / (arrival_rate + service_rate)
    dd = np.append(np.asarray(drop.probabilities), 1.0)
    top = dd.size
    T = np.zeros((top, top))
    for i in range(top):
        for i2 in range(1, i + 1):
            T[i, i2] = delta * (1.0 - delta) ** (i - i2)
        T[i, 0] = (1.0 - delta) ** i
    x = np.zeros(top)
    x[1:] = np.asarray(distribution)[:top - 1] * (1.0 - dd[:top - 1])
    return x, T * dd, T @ (1.0 - dd)


def consecutive_losses_matrix(arrival_rate: float, service_rate: float, drop: RedDrop,
                              distribution: NDArray[np.float64], max_run: int) -> NDArray[np.float64]:
    """P(L = k), k = 1..max_run, as x Lm^k a / x Lm e (a second route, for tests)."""
    x, Lm, a = _arrival_chain(arrival_rate, service_rate, drop, distribution)
    denominator = float(x @ Lm.sum(axis=1))
    out = np.zeros(max_run)
    v = x
    for k in range(max_run):
        v = v @ Lm
        out[k] = float(v @ a) / denominator
    return out


def consecutive_loss_moments(arrival_rate: float, service_rate: float, drop: RedDrop,
                             distribution: NDArray[np.float64]) -> tuple[float, float]:
    """(E L, E L^2) exactly: sum_k k^j x Lm^k a / x Lm e with (I - Lm)^{-1} sums."""
    x, Lm, a = _arrival_chain(arrival_rate, service_rate, drop, distribution)
    denominator = float(x @ Lm.sum(axis=1))
    if denominator <= 0.0:
        return math.nan, math.nan
    n = Lm.shape[0]
    inv = np.linalg.inv(np.eye(n) - Lm)
    y = x @ Lm @ inv  # sum_{k>=1} x Lm^k
    mean = float(y @ inv @ a) / denominator  # sum_k k x Lm^k a
    second = float(y @ (2.0 * inv @ inv - inv) @ a) / denominator  # sum_k k^2 x Lm^k a
    return mean, second


def solve_red_mm1(arrival_rate: float, service_rate: float, drop: RedDrop, *, max_run: int = MAX_RUN
                  ) -> RedMM1Solution:
    """M/M/1 with N = len(drop) - 1 waiting places under RED: stationary law, loss split, and the law
    of consecutive losses (paper 004, Section 2.3, base case corrected; see the module docstring).

    Parameters
    ----------
    arrival_rate, service_rate : float
        lambda and mu.
    drop : RedDrop
        d_0..d_N, the drop probability of an arrival that finds n customers.
    max_run : int
        List P(L = k) for k = 1..max_run.
    """
    lam = positive("arrival_rate", arrival_rate, "in events per second", what="rate")
    mu = positive("service_rate", service_rate, "in events per second", what="rate")
    if not isinstance(drop, RedDrop):
        raise InputError("drop", f"must be a RedDrop, got {type(drop).__name__}", "")
    if isinstance(max_run, bool) or not isinstance(max_run, int) or max_run < 1:
        raise InputError("max_run", f"must be a whole number >= 1, got {max_run!r}", "e.g. 30")
    P = red_mm1_distribution(lam, mu, drop)
    d = np.asarray(drop.probabilities)
    N = d.size - 1
    blocking = float(P[N + 1])
    early = float(P[:N + 1] @ d)
    runs = consecutive_losses(lam, mu, drop, P, max_run)
    mean, second = consecutive_loss_moments(lam, mu, drop, P)
    n = np.arange(N + 2, dtype=float)
    ok = bool(np.all(np.isfinite(runs)))
    return RedMM1Solution(
        success=ok, status=BufferStatus.SUCCESS if ok else BufferStatus.SINGULAR,
        message="solved" if ok else "no accepted arrival is ever followed by a loss: L is undefined",
        arrival_rate=lam, service_rate=mu, places=N, drop=drop, distribution=tuple(float(x) for x in P),
        loss_probability=blocking + early, blocking_probability=blocking, red_probability=early,
        mean_in_system=float(n @ P), second_moment=float((n * n) @ P),
        consecutive_losses=tuple(float(x) for x in runs), consecutive_tail=float(1.0 - runs.sum()) if ok else math.nan,
        mean_consecutive_losses=mean, second_moment_consecutive_losses=second)
