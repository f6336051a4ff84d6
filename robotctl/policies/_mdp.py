"""Optimal dynamic control of the robots by a Markov decision process (paper 001, Sections 2-4).

The model (Talim, Liu, Nain, Coffman, "Controlling the robots of web search engines"): N robots, each
bringing pages in a Poisson stream of rate lambda while active; one indexer with exponential service of
rate mu; at most K pages in the system, the one being indexed included. At an *arrival* the robot that
delivered is deactivated and the controller decides whether to reactivate it (a = 1) or not; at a
*departure* the controller may activate one more robot (a = 1), if one is idle. The cost is
gamma P(starvation) + loss rate.

Uniformisation (Section 2). Decision epochs are the jumps of a Poisson process of rate
nu = lambda N + mu. The state x = (q, r, s) holds the queue length q and the number of active robots r
just before the epoch, and its type s: 0 departure, 1 arrival, 2 fictitious. The printed transition law
(2)-(4) carries typos: in (2) the next epoch is an arrival with probability lambda r / nu where the
post-decision count min(r + a, N) is meant, and the fictitious probability is printed
1 - (mu 1(q > 1) - lambda r) / nu with a minus for a plus; in (3) the third state reads min{q + 1, N}
for min{q + 1, K}. The consistent reading, which this module implements, is:

- departure (s = 0, q >= 1): the post-decision state is (q - 1, min(r + a, N));
- arrival (s = 1, r >= 1): it is (min(q + 1, K), r - 1 + a); the page is lost iff q = K;
- fictitious (s = 2): nothing moves, (q, r);

and the next epoch's type is drawn from the post-decision state (q', r'): departure with probability
mu 1(q' > 0) / nu, arrival with probability lambda r' / nu, fictitious otherwise. The one-step cost (1)
is c(x) = gamma 1(q = 0) + nu 1(q = K, s = 1), so that the average cost per epoch is
gamma P(starvation) + loss rate (PASTA, eq. (8)).

:func:`solve_dynamic` runs the relative value iteration of Proposition 2 (vectorised with numpy over all
states at once), reads the optimal actions, and then computes the *exact* cost of that policy from its
own continuous-time Markov chain on (q, r) (not from the iteration). The policy is printed as two
switching curves: at a departure from q pages one robot is activated iff r <= f_0(q); at an arrival to q
pages the robot is kept iff r <= f_1(q). :func:`static_fleet` is the static problem of Section 4: the
fixed number of robots that minimises eq. (9) (Proposition 3).

Two generalisations serve the model files of paper 000 (``robotctl optimise --policy-kind mdp``): a
smallest number of active robots ``min_robots`` (the paper: 0), and any Poisson rate per number of
active robots (the paper: lambda r), plus a cost per active robot per second (the paper: 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray
from scipy.sparse.csgraph import connected_components

from robotctl._checks import positive, whole
from robotctl.model import (
    EventKind,
    InputError,
    StateFeedback,
)

from ._mdp_problem import (
    MAX_ITERATIONS,
    STATUS_MESSAGES,
    TAU,
    TOLERANCE,
    DynamicOptimum,
    DynamicPolicy,
    MdpStatus,
    RobotsProblem,
    StaticFleet,
)


# -- the static problem (Section 4) --------------------------------------------------------------
def static_cost(rho: float, gamma: float, capacity: int, service_rate: float = 1.0) -> tuple[float, float, float]:
    """Eq. (9): (C_s, P(starvation), loss rate) of M/M/1/K with load rho = n lambda / mu.

    C_s = (1 - rho)(gamma + mu rho^(K+1)) / (1 - rho^(K+1)), computed as
    (gamma + mu rho^(K+1)) / (1 + rho + ... + rho^K), which is also right at rho = 1
    ((gamma + mu) / (K + 1)): P(starvation) = 1 / sum_j rho^j and the loss rate is
    n lambda P(K) = mu rho^(K+1) P(starvation).
    """
    K = capacity
    if rho <= 1.0:
        powers = rho ** np.arange(K + 2)
        p0 = 1.0 / float(powers[:K + 1].sum())
        loss = service_rate * float(powers[K + 1]) * p0
    else:  # divide through by rho^(K+1) to stay finite for large loads
        inv = (1.0 / rho) ** np.arange(K + 2)  # rho^-j
        denom = float(inv[1:].sum())  # sum_{j=0..K} rho^(j-K-1)
        p0 = float(inv[K + 1]) / denom
        loss = service_rate / denom
    return gamma * p0 + loss, p0, loss


def static_fleet(capacity: int, rate: float, service_rate: float, gamma: float, *,
                 max_robots: int | None = None) -> StaticFleet:
    """The fixed number of robots n that minimises eq. (9) with rho = n lambda / mu (Proposition 3),
    among n = 0..``max_robots`` (default: unrestricted).

    The cost (9) is unimodal in rho (Proposition 3: the optimum is one of the two integers around the
    continuous minimiser), so the scan stops once the cost has risen above its minimum for a load
    past 1; ties go to the smaller fleet.
    """
    whole("capacity", capacity, 1)
    positive("rate", rate, "a rate per second, e.g. 0.1")
    positive("service_rate", service_rate, "a rate per second, e.g. 0.1")
    if max_robots is not None:
        whole("max_robots", max_robots, 0)
    best: StaticFleet | None = None
    n = 0
    while max_robots is None or n <= max_robots:
        c, p0, loss = static_cost(n * rate / service_rate, gamma, capacity, service_rate)
        if best is None or c < best.cost:
            best = StaticFleet(n, c, p0, loss)
        elif n * rate > service_rate and c > best.cost:
            break
        n += 1
    assert best is not None
    return best


# -- relative value iteration (Proposition 2) -----------------------------------------------------
def _post_value(h: NDArray[np.float64], lam: NDArray[np.float64], mu: float, nu: float) -> NDArray[np.float64]:
    """V(q', r') = E[h(q', r', s')]: the next epoch's type drawn from the post-decision state."""
    busy = np.zeros(h.shape[0])
    busy[1:] = mu
    return (busy[:, None] * h[:, :, 0] + lam[None, :] * h[:, :, 1]
            + (nu - busy[:, None] - lam[None, :]) * h[:, :, 2]) / nu


def _bellman(h: NDArray[np.float64], cost: NDArray[np.float64], lam: NDArray[np.float64], mu: float, nu: float,
             rmin: int) -> tuple[NDArray[np.float64], NDArray[np.bool_], NDArray[np.bool_]]:
    """T(h) on all states at once, and the minimising actions (ties to a = 0, do nothing)."""
    K1, N1, _ = h.shape
    N = N1 - 1
    V = _post_value(h, lam, mu, nu)
    if rmin == 0:
        V[0, 0] = np.inf  # (0, 0) absorbs (Section 2): a departure from (1, 0) must activate
    V[:, :rmin] = np.inf  # fewer than min_robots robots is not allowed
    Th = np.empty_like(h)
    # departure from q >= 1: (q - 1, r) or (q - 1, min(r + 1, N))
    stay = V[:-1, :]
    up = V[:-1, np.minimum(np.arange(N1) + 1, N)]
    activate = np.zeros((K1, N1), dtype=bool)
    activate[1:] = up < stay
    Th[1:, :, 0] = np.minimum(stay, up)
    Th[0, :, 0] = 0.0  # infeasible
    # arrival with r >= 1: (min(q + 1, K), r - 1) or (min(q + 1, K), r)
    qn = np.minimum(np.arange(K1) + 1, K1 - 1)
    park = np.full((K1, N1), np.inf)
    park[:, 1:] = V[qn][:, :-1]
    kept = V[qn]
    keep = kept < park
    keep[:, 0] = False
    Th[:, :, 1] = np.where(keep, kept, park)
    Th[:, 0, 1] = 0.0  # infeasible
    Th[:, :, 2] = V
    Th += cost
    return Th, activate, keep


class _Workspace:
    """:func:`_bellman` and the relative value update with every array allocated once (issue 26).

    The value function is kept as three contiguous (K + 1, N + 1) planes, one per epoch type s, so that each
    step is a fixed sequence of in-place ufunc calls (``out=``) on preallocated buffers: at N = 500, K = 200
    the fifteen temporaries of :func:`_bellman` were 38% of the run in page faults. The arithmetic is that of
    :func:`_bellman`, term for term, so both give the same iterates (tests/policies/test_mdp_workspace.py).
    """

    def __init__(self, cost: NDArray[np.float64], lam: NDArray[np.float64], mu: float, nu: float, rmin: int,
                 ok: NDArray[np.bool_]) -> None:
        K1, N1, _ = cost.shape
        self.K1, self.N1, self.rmin = K1, N1, rmin
        busy = np.zeros(K1)
        busy[1:] = mu
        self.a_dep = busy[:, None].copy()
        self.a_arr = np.asarray(lam, dtype=float)[None, :].copy()
        # the same expression as _post_value's third term, so that rounding agrees
        self.a_none = np.ascontiguousarray(nu - busy[:, None] - lam[None, :])
        self.nu = nu
        self.cost = np.ascontiguousarray(np.moveaxis(cost, 2, 0))
        self.ok = np.ascontiguousarray(np.moveaxis(ok, 2, 0))
        self.bad = np.flatnonzero(~self.ok)  # few: q = 0 departures, r = 0 arrivals, r < min_robots
        self.h = np.zeros((3, K1, N1))
        self.Th = np.empty((3, K1, N1))
        self.diff = np.empty((3, K1, N1))
        self.V = np.empty((K1, N1))
        self.tmp = np.empty((K1, N1))
        self.up = np.empty((K1 - 1, N1))
        self.kept = np.empty((K1, N1))
        self.activate = np.zeros((K1, N1), dtype=bool)
        self.keep = np.zeros((K1, N1), dtype=bool)

    def bellman(self) -> None:
        """Th = T(h), activate and keep: :func:`_bellman` in place."""
        h, Th, V, tmp = self.h, self.Th, self.V, self.tmp
        # V = (busy h_0 + lam h_1 + (nu - busy - lam) h_2) / nu, as in _post_value
        np.multiply(self.a_dep, h[0], out=V)
        np.multiply(self.a_arr, h[1], out=tmp)
        V += tmp
        np.multiply(self.a_none, h[2], out=tmp)
        V += tmp
        V /= self.nu
        if self.rmin == 0:
            V[0, 0] = np.inf
        V[:, :self.rmin] = np.inf
        # departure: min(V[q - 1, r], V[q - 1, min(r + 1, N)])
        up = self.up
        up[:, :-1] = V[:-1, 1:]
        up[:, -1] = V[:-1, -1]
        np.less(up, V[:-1], out=self.activate[1:])
        np.minimum(V[:-1], up, out=Th[0, 1:])
        Th[0, 0] = 0.0
        # arrival: park (r - 1) or keep (r) at min(q + 1, K)
        kept = self.kept
        kept[:-1] = V[1:]
        kept[-1] = V[-1]
        np.less(kept[:, 1:], kept[:, :-1], out=self.keep[:, 1:])
        self.keep[:, 0] = False
        np.minimum(kept[:, 1:], kept[:, :-1], out=Th[1, :, 1:])
        Th[1, :, 0] = 0.0
        Th[2] = V
        Th += self.cost

    def bracket(self, ref: tuple[int, int, int]) -> tuple[float, float, float]:
        """min and max of T(h) - h over the feasible states, and max |T(h)| there. The few infeasible
        entries are first given the values of the feasible state ``ref`` (neutral for min and max), so
        that the reductions run unmasked."""
        Th, diff = self.Th.reshape(-1), self.diff.reshape(-1)
        at = self._flat(ref)
        Th[self.bad] = Th[at]
        np.subtract(self.Th, self.h, out=self.diff)
        diff[self.bad] = diff[at]
        lo, hi = float(diff.min()), float(diff.max())
        top = max(float(Th.max()), -float(Th.min()))
        return lo, hi, top

    def _flat(self, ref: tuple[int, int, int]) -> int:
        return int(np.ravel_multi_index((ref[2], ref[0], ref[1]), self.Th.shape))

    def relax(self, tau: float, ref: tuple[int, int, int]) -> None:
        """h = (1 - tau) h + tau (T h - T h(x_hat)), zero on infeasible states."""
        at = float(self.Th.reshape(-1)[self._flat(ref)])
        np.subtract(self.Th, at, out=self.diff)
        self.diff *= tau
        self.h *= 1.0 - tau
        self.h += self.diff
        self.h.reshape(-1)[self.bad] = 0.0


def _feasible(K: int, N: int, rmin: int) -> NDArray[np.bool_]:
    ok = np.ones((K + 1, N + 1, 3), dtype=bool)
    ok[0, :, 0] = False
    ok[:, 0, 1] = False
    ok[:, :rmin, :] = False
    if rmin == 0:
        ok[0, 0, 2] = False
    return ok


def _workspace(problem: RobotsProblem) -> tuple[_Workspace, tuple[int, int, int], float]:
    """The value iteration's workspace for ``problem`` (h = 0), its reference state x_hat and the largest
    one-step cost."""
    p = problem
    K, N, mu, nu = p.capacity, p.robots, p.service_rate, p.uniformisation_rate
    lam = np.array(p.rates)
    ok = _feasible(K, N, p.min_robots)
    q = np.arange(K + 1)
    r = np.arange(N + 1)
    cost = np.zeros((K + 1, N + 1, 3))
    cost += (p.gamma * (q == 0))[:, None, None] + p.robot_cost * r[None, :, None]
    cost[K, :, 1] += nu * p.loss_cost  # a page lost at an arrival to a full queue
    ref = (K, N, 2)  # x_hat: feasible for every min_robots
    return _Workspace(cost, lam, mu, nu, p.min_robots, ok), ref, float(cost.max())


def _closed(ws: _Workspace, lo: float, hi: float, top: float, cost_top: float, tol: float) -> bool:
    """Odoni's bracket closed to ``tol``, or to the rounding of T(h) - h itself (an optimal cost of zero,
    e.g. gamma = 0)."""
    noise = 64 * np.finfo(float).eps * max(top, cost_top)
    return hi - lo <= max(tol * max(abs(hi), abs(lo)), noise)


def _iterate(ws: _Workspace, ref: tuple[int, int, int], cost_top: float, *, tau: float, tol: float,
             max_iterations: int) -> tuple[tuple[float, float], int, bool]:
    """Proposition 2's loop from whatever ``ws.h`` holds: (bracket, iterations, converged); the greedy
    policy of the last h is left in ``ws.activate`` and ``ws.keep``."""
    lo = hi = math.nan
    for it in range(1, max_iterations + 1):
        ws.bellman()
        lo, hi, top = ws.bracket(ref)
        if _closed(ws, lo, hi, top, cost_top, tol):
            return (lo, hi), it, True
        ws.relax(tau, ref)
    return (lo, hi), max_iterations, False


def relative_value_iteration(problem: RobotsProblem, *, tau: float = TAU, tol: float = TOLERANCE,
                             max_iterations: int = MAX_ITERATIONS
                             ) -> tuple[DynamicPolicy, tuple[float, float], int, bool]:
    """Proposition 2: h_{k+1} = (1 - tau) h_k + tau (T h_k - T h_k(x_hat)), vectorised.

    Returns the greedy policy for the last h, Odoni's bracket (min, max) of T(h) - h over the feasible
    states (the cost per epoch, which is the cost per second by PASTA), the iterations, and whether the
    bracket closed to ``tol`` times its upper end. The lower end bounds the cost of *every* policy from below, whatever
    h is: if c + P_a h >= h + delta for all states and actions, telescoping gives an average cost
    >= delta. Unlike the paper's stopping rule (relative change of h below 1e-5), this one certifies the
    optimal cost itself.
    """
    ws, ref, cost_top = _workspace(problem)  # every array of the loop, allocated once
    bracket, iterations, converged = _iterate(ws, ref, cost_top, tau=tau, tol=tol, max_iterations=max_iterations)
    return DynamicPolicy(ws.activate.copy(), ws.keep.copy()), bracket, iterations, converged


# -- policy iteration: the evaluation step is one sparse solve ---------------------------------------
#: policy evaluations before policy iteration gives up and value iteration takes over
MAX_EVALUATIONS = 64
#: value-iteration steps tried from each evaluated policy's values before the next improvement
VALUE_BURST = 32


def _allowed(K: int, N: int, rmin: int) -> NDArray[np.bool_]:
    """The states (q, r) a policy may occupy: r >= min_robots, and not (0, 0), which absorbs."""
    allowed = np.zeros((K + 1, N + 1), dtype=bool)
    allowed[:, rmin:] = True
    allowed[0, 0] = False
    return allowed


def _static_start(problem: RobotsProblem) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """The first policy of the policy iteration: the best static fleet n_s as a feedback law (wake a robot
    at a completion iff r < n_s, keep the one that delivered iff r <= n_s), whose chain has the single
    closed class r = n_s."""
    p = problem
    n_s = max(_static_of(p).robots, p.min_robots, 1)
    r = np.arange(p.robots + 1)
    activate = np.broadcast_to(r < n_s, (p.capacity + 1, p.robots + 1)).copy()
    keep = np.broadcast_to(r <= n_s, (p.capacity + 1, p.robots + 1)).copy()
    return activate, keep


def evaluate_policy(problem: RobotsProblem, activate: NDArray[np.bool_], keep: NDArray[np.bool_],
                    refinements: int = 2) -> tuple[float, NDArray[np.float64]] | str:
    """The average cost g and the relative values V of a policy, from one sparse LU factorisation.

    V(q, r) is the relative value of the post-decision state (q, r) in the uniformised chain of
    :func:`relative_value_iteration` (V = E[h(q, r, s)], s the next epoch's type): it solves the
    average-cost equations (I - P) V + g = c-bar, where c-bar(q, r) = gamma 1(q = 0) + lambda_r 1(q = K)
    (the loss) + robot cost r. In the time-continuous form -Q v + g = c-bar (V = nu v, Q the policy's
    generator on the allowed states), with v(x_0) = 0 at a state x_0 of the closed class, the unknown g
    takes the place of v(x_0): the matrix is -Q with the column of x_0 replaced by ones, which is
    nonsingular exactly when the chain has one closed class (the constants span the null space of Q, and
    pi 1 = 1 puts the ones outside its range). Its LU uses a fill-reducing column order with threshold
    pivoting, then ``refinements`` steps of iterative refinement on the residual.

    Returns (g, V) with V zero outside the allowed states, or a sentence saying why the policy cannot be
    evaluated this way (it leaves the allowed states, or its chain has several closed classes).
    """
    p = problem
    K, N = p.capacity, p.robots
    n1 = N + 1
    lam = np.array(p.rates)
    allowed = _allowed(K, N, p.min_robots).ravel()
    states = np.flatnonzero(allowed)
    m = states.size
    index = np.full(allowed.size, -1)
    index[states] = np.arange(m)
    q, r = np.divmod(states, n1)
    act = np.asarray(activate, dtype=bool).ravel()[states]
    kept = np.asarray(keep, dtype=bool).ravel()[states]
    dep = q >= 1
    dep_to = index[(q[dep] - 1) * n1 + np.minimum(r[dep] + act[dep], N)]
    arr = (r >= 1) & (lam[r] > 0)
    arr_to = index[np.minimum(q[arr] + 1, K) * n1 + r[arr] - 1 + kept[arr]]
    if (dep_to < 0).any() or (arr_to < 0).any():
        return "the policy leaves the allowed states"
    src = np.concatenate([np.flatnonzero(dep), np.flatnonzero(arr)])
    dst = np.concatenate([dep_to, arr_to])
    rate = np.concatenate([np.full(dep_to.size, p.service_rate), lam[r[arr]]])
    moves = src != dst  # an arrival kept at q = K stays where it is
    src, dst, rate = src[moves], dst[moves], rate[moves]
    ncomp, label = connected_components(sp.csr_matrix((rate, (src, dst)), shape=(m, m)), directed=True,
                                        connection="strong")
    leaving = np.zeros(ncomp, dtype=bool)
    leaving[label[src][label[src] != label[dst]]] = True
    closed = np.flatnonzero(~leaving)
    if closed.size != 1:
        return f"the policy's chain has {closed.size} closed classes"
    x0 = int(np.flatnonzero(label == closed[0])[0])
    out = np.bincount(src, weights=rate, minlength=m)
    cbar = p.gamma * (q == 0) + p.robot_cost * r + p.loss_cost * np.where(arr & (q == K), lam[r], 0.0)
    other = dst != x0  # the column of x_0 becomes the column of g
    rows = np.concatenate([src[other], np.arange(m), np.arange(m)])
    cols = np.concatenate([dst[other], np.arange(m), np.full(m, x0)])
    diag = out.copy()
    diag[x0] = 0.0  # v(x_0) = 0: its diagonal term goes with its column
    vals = np.concatenate([-rate[other], diag, np.ones(m)])
    try:
        lu = spla.splu(sp.csc_matrix((vals, (rows, cols)), shape=(m, m)), permc_spec="COLAMD",
                       diag_pivot_thresh=0.1)
    except RuntimeError as exc:  # exactly singular: cannot happen with one closed class, but say so
        return f"the evaluation's LU failed ({exc})"
    x = lu.solve(cbar)
    for _ in range(refinements):
        v = x.copy()
        v[x0] = 0.0
        # residual of -Q v + g = c-bar, (-Q v)(x) = out(x) v(x) - sum_y rate(x, y) v(y)
        res = cbar - x[x0] - out * v + np.bincount(src, weights=rate * v[dst], minlength=m)
        x += lu.solve(res)
    g = float(x[x0])
    x[x0] = 0.0
    if not (math.isfinite(g) and np.isfinite(x).all()):
        return "the evaluation's solve did not give finite values"
    values = np.zeros(allowed.size)
    values[states] = p.uniformisation_rate * x
    return g, values.reshape(K + 1, n1)


def _load_values(ws: _Workspace, V: NDArray[np.float64], g: float, activate: NDArray[np.bool_],
                 keep: NDArray[np.bool_]) -> None:
    """ws.h = c - g + V(post-decision state under the policy): the relative values of the policy on
    every (q, r, s), so that T_policy h - h = g up to the evaluation's rounding."""
    K1, N1 = ws.K1, ws.N1
    r = np.arange(N1)
    h, cost = ws.h, ws.cost
    h[0, 1:] = np.take_along_axis(V[:-1], np.minimum(r[None, :] + activate[1:], N1 - 1), axis=1)
    h[0, 0] = 0.0
    qn = np.minimum(np.arange(K1) + 1, K1 - 1)
    h[1] = np.take_along_axis(V[qn], np.clip(r[None, :] - 1 + keep, 0, N1 - 1), axis=1)
    h[2] = V
    h += cost
    h -= g
    h.reshape(-1)[ws.bad] = 0.0


def _improve(V: NDArray[np.float64], allowed: NDArray[np.bool_], activate: NDArray[np.bool_],
             keep: NDArray[np.bool_], margin: float) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """Howard's improvement step on the post-decision values: switch an action only where the other one
    is better by more than ``margin`` (so that rounding cannot make the iteration cycle)."""
    K1, N1 = V.shape
    Vi = np.where(allowed, V, np.inf)
    stay = Vi[:-1]
    up = Vi[:-1, np.minimum(np.arange(N1) + 1, N1 - 1)]
    now = activate[1:]
    better = np.where(now, stay < up - margin, up < stay - margin)
    new_activate = activate.copy()
    new_activate[1:] = now ^ better
    qn = np.minimum(np.arange(K1) + 1, K1 - 1)
    kept = Vi[qn]
    park = np.full((K1, N1), np.inf)
    park[:, 1:] = kept[:, :-1]
    better = np.where(keep, park < kept - margin, kept < park - margin)
    better[:, 0] = False
    return new_activate, keep ^ better


def policy_iteration(problem: RobotsProblem, *, tau: float = TAU, tol: float = TOLERANCE,
                     max_iterations: int = MAX_ITERATIONS, max_evaluations: int = MAX_EVALUATIONS,
                     burst: int = VALUE_BURST) -> tuple[DynamicPolicy, tuple[float, float], int, bool, int, str]:
    """Howard's policy iteration, certified by value iteration's own test, with value iteration as the
    fallback.

    From the best static fleet (:func:`_static_start`), each step evaluates the policy exactly
    (:func:`evaluate_policy`, one sparse LU), loads its relative values h into value iteration's workspace,
    applies the Bellman operator once and reads Odoni's bracket of T(h) - h, exactly as
    :func:`relative_value_iteration` does: the same stopping test, the same greedy policy. Unlike value
    iteration, whose bracket closes at the chain's mixing rate (23,284 steps at N = 500, K = 200),
    policy iteration reaches a policy that no single switch improves in a handful of steps. If a policy
    cannot be evaluated (several closed classes), the improvement stalls, or ``max_evaluations`` run
    out, value iteration continues from the last h and the note says so.

    Returns (greedy policy, bracket, Bellman steps (one per evaluation plus the value iteration's),
    converged, evaluations, note); the note is empty when policy iteration alone converged.
    """
    ws, ref, cost_top = _workspace(problem)
    p = problem
    allowed = _allowed(p.capacity, p.robots, p.min_robots)
    activate, keep = _static_start(p)
    steps, note = 0, ""
    evaluations = 0
    while True:
        if evaluations == max_evaluations:
            note = f"policy iteration did not converge in {max_evaluations} evaluations"
            break
        evaluated = evaluate_policy(p, activate, keep)
        if isinstance(evaluated, str):
            note = f"policy iteration stopped: {evaluated}"
            break
        evaluations += 1
        g, V = evaluated
        _load_values(ws, V, g, activate, keep)
        ws.bellman()
        steps += 1
        lo, hi, top = ws.bracket(ref)
        if _closed(ws, lo, hi, top, cost_top, tol):
            return DynamicPolicy(ws.activate.copy(), ws.keep.copy()), (lo, hi), steps, True, evaluations, ""
        # a short burst of value iteration from the policy's values: near the optimum it closes the bracket
        # on the states that policy iteration would still be switching one by one at the rounding level
        bracket, more, converged = _iterate(ws, ref, cost_top, tau=tau, tol=tol,
                                            max_iterations=min(burst, max_iterations - steps))
        steps += more
        if converged:
            return DynamicPolicy(ws.activate.copy(), ws.keep.copy()), bracket, steps, True, evaluations, ""
        if steps >= max_iterations:
            return (DynamicPolicy(ws.activate.copy(), ws.keep.copy()), bracket, steps, False, evaluations,
                    "policy iteration used up max_iterations")
        margin = 64 * np.finfo(float).eps * float(np.abs(V[allowed]).max())
        new_activate, new_keep = _improve(V, allowed, activate, keep, margin)
        if np.array_equal(new_activate, activate) and np.array_equal(new_keep, keep):
            note = f"policy iteration stalled at a bracket of width {hi - lo:.3g}"
            break
        activate, keep = new_activate, new_keep
    bracket, more, converged = _iterate(ws, ref, cost_top, tau=tau, tol=tol, max_iterations=max_iterations - steps)
    note += f"; value iteration took over from its last values ({more} steps)"
    return (DynamicPolicy(ws.activate.copy(), ws.keep.copy()), bracket, steps + more, converged, evaluations,
            note)


# -- the exact cost of a policy -------------------------------------------------------------------
@dataclass(frozen=True)
class _ChainCost:
    cost: float
    p_starvation: float
    loss_rate: float
    mean_active: float
    recurrent: NDArray[np.bool_]
    stationary: NDArray[np.float64]
    closed_classes: int


def policy_cost(problem: RobotsProblem, policy: DynamicPolicy, *, start: tuple[int, int] | None = None) -> _ChainCost:
    """The exact cost of ``policy`` from its continuous-time Markov chain on (q, r).

    From (q, r): a departure at rate mu (q >= 1) leads to (q - 1, r'), r' = ``policy.after_departure``;
    an arrival at rate lambda_r leads to (min(q + 1, K), ``policy.after_arrival``) and loses the page iff
    q = K. The closed class reached from ``start`` (default: (0, r) with the most robots r that is in
    a closed class) is solved for its stationary distribution pi; then P(starvation) = pi(q = 0), the
    loss rate is sum_r lambda_r pi(K, r), and the cost is gamma P(starvation) + loss rate
    (+ robot cost E[r]).
    """
    p = problem
    K, N = p.capacity, p.robots
    if policy.activate.shape != (K + 1, N + 1):
        raise InputError("policy", f"has tables of shape {policy.activate.shape}, the problem needs "
                         f"{(K + 1, N + 1)}", "use a policy computed for this problem")
    n = (K + 1) * (N + 1)
    rows, cols, vals = [], [], []
    activate, keep = policy.activate.tolist(), policy.keep.tolist()  # lists: 200,000 look-ups at N = 500
    for q in range(K + 1):
        for r in range(p.min_robots, N + 1):
            src = q * (N + 1) + r
            if q >= 1:
                r2 = min(r + activate[q][r], N)  # policy.after_departure(q, r)
                if r2 >= p.min_robots and not (q == 1 and r2 == 0):
                    rows.append(src)
                    cols.append((q - 1) * (N + 1) + r2)
                    vals.append(p.service_rate)
                else:
                    raise InputError("policy", f"leaves the allowed states at a departure from {(q, r)}",
                                     f"keep at least {max(p.min_robots, 1 if q == 1 else 0)} robots")
            if r >= 1 and p.rates[r] > 0:
                r2 = r - 1 + keep[q][r]  # policy.after_arrival(q, r)
                if r2 < p.min_robots:
                    raise InputError("policy", f"parks below min_robots at an arrival to {(q, r)}",
                                     f"keep at least {p.min_robots} robots")
                rows.append(src)
                cols.append(min(q + 1, K) * (N + 1) + r2)
                vals.append(p.rates[r])
    A = sp.csr_matrix((vals, (rows, cols)), shape=(n, n))
    ncomp, label = connected_components(A, directed=True, connection="strong")
    # closed classes: no edge leaves the component
    src_c, dst_c = label[A.nonzero()[0]], label[A.nonzero()[1]]
    leaving = np.zeros(ncomp, dtype=bool)
    leaving[src_c[src_c != dst_c]] = True
    allowed = np.zeros(n, dtype=bool)
    allowed.reshape(K + 1, N + 1)[:, p.min_robots:] = True
    if p.min_robots == 0:
        allowed[0] = False  # (0, 0) absorbs; never entered by an admissible policy
    closed = [c for c in range(ncomp) if not leaving[c] and allowed[label == c].all()]
    if start is None:
        starts = [r for r in range(N, -1, -1) if label[r] in closed and allowed[r]]
        if not starts:
            raise InputError("policy", "has no closed class through an empty queue", "check the tables")
        cls = label[starts[0]]
    else:
        reach = _reachable(A, start[0] * (N + 1) + start[1])
        cands = [c for c in closed if np.any(reach & (label == c))]
        cls = cands[0]
    members = np.flatnonzero(label == cls)
    sub = A[members][:, members]
    Q = sub - sp.diags(np.asarray(sub.sum(axis=1)).ravel())
    m = members.size
    B = sp.csr_matrix(Q.T)
    B.data[B.indptr[0]:B.indptr[1]] = 0.0  # row 0 of Q^T becomes the normalisation sum(pi) = 1
    B = B + sp.csr_matrix((np.ones(m), (np.zeros(m, dtype=int), np.arange(m))), shape=(m, m))
    rhs = np.zeros(m)
    rhs[0] = 1.0
    pi_m = np.ones(1)
    if m > 1:
        # threshold pivoting keeps COLAMD's fill-reducing order (partial pivoting took 10 s at N = 500,
        # K = 200), and two steps of iterative refinement recover the digits it may cost
        B = sp.csc_matrix(B)
        lu = spla.splu(B, permc_spec="COLAMD", diag_pivot_thresh=0.1)
        pi_m = lu.solve(rhs)
        for _ in range(2):
            pi_m += lu.solve(rhs - B @ pi_m)
    pi = np.zeros(n)
    pi[members] = np.clip(pi_m, 0.0, None)
    pi /= pi.sum()
    P = pi.reshape(K + 1, N + 1)
    lam = np.array(p.rates)
    p0 = float(P[0].sum())
    loss = float(P[K] @ lam)
    mean_r = float(P.sum(axis=0) @ np.arange(N + 1))
    rec = np.zeros(n, dtype=bool)
    rec[members] = True
    return _ChainCost(p.gamma * p0 + p.loss_cost * loss + p.robot_cost * mean_r, p0, loss, mean_r,
                      rec.reshape(K + 1, N + 1), P, len(closed))


def _reachable(A: sp.csr_matrix, start: int) -> NDArray[np.bool_]:
    seen = np.zeros(A.shape[0], dtype=bool)
    seen[start] = True
    frontier = np.array([start])
    while frontier.size:
        nxt = np.unique(A[frontier].indices)
        nxt = nxt[~seen[nxt]]
        seen[nxt] = True
        frontier = nxt
    return seen


# -- the whole solve ------------------------------------------------------------------------------
#: the solvers of :func:`solve_dynamic`
DYNAMIC_METHODS = ("policy-iteration", "value-iteration")


def solve_dynamic(problem: RobotsProblem, *, tau: float = TAU, tol: float = TOLERANCE,
                  max_iterations: int = MAX_ITERATIONS, method: str = "policy-iteration") -> DynamicOptimum:
    """The optimal dynamic policy of paper 001 and its exact cost, next to the best static fleet.

    Parameters
    ----------
    problem : RobotsProblem
        E.g. ``RobotsProblem.paper(N, K, lambda, mu, gamma)``.
    tau : float
        Relaxation of Proposition 2, 0 < tau < 1 (the paper: 0.99999).
    tol : float
        Relative width at which Odoni's bracket on the optimal cost counts as closed (or its width
        reaches the rounding error of T(h) - h, when the optimal cost is near zero).
    max_iterations : int
        Bellman steps in all (value-iteration steps, plus one per policy evaluation).
    method : str
        ``"policy-iteration"`` (default): Howard's policy iteration with exact sparse evaluations
        (:func:`policy_iteration`), certified by the same bracket, falling back to value iteration from its
        last values when an evaluation is impossible or the improvement stalls (the message says so);
        ``"value-iteration"``: Proposition 2 alone (:func:`relative_value_iteration`).

    Returns
    -------
    DynamicOptimum
        ``cost`` is the exact cost of the greedy policy (its own chain), ``value_bounds`` the iteration's
        bracket on the optimum; the two agree to ``tol`` when the iteration converged. The static fleet
        is restricted to at most N robots and to the same rates (with the paper's rates, eq. (9)).

    References
    ----------
    Talim, Liu, Nain, Coffman, "Controlling the robots of web search engines", Sigmetrics 2001:
    Section 2 (the MDP, eqs. (1)-(4) as corrected in the module docstring), Proposition 2, eq. (9).
    """
    if not (0.0 < tau < 1.0):
        raise InputError("tau", f"must lie in (0, 1), got {tau!r}", "the paper uses 0.99999")
    whole("max_iterations", max_iterations, 1)
    if method not in DYNAMIC_METHODS:
        raise InputError("method", f"is {method!r}", f"use one of {', '.join(DYNAMIC_METHODS)}")
    evaluations, note = 0, ""
    if method == "value-iteration":
        policy, (lo, hi), iterations, converged = relative_value_iteration(problem, tau=tau, tol=tol,
                                                                           max_iterations=max_iterations)
    else:
        policy, (lo, hi), iterations, converged, evaluations, note = policy_iteration(
            problem, tau=tau, tol=tol, max_iterations=max_iterations)
    chain = policy_cost(problem, policy)
    static = _static_of(problem)
    gain = 100.0 * (static.cost - chain.cost) / chain.cost if chain.cost > 0 else math.inf
    status = MdpStatus.SUCCESS if converged else MdpStatus.MAX_ITERATIONS
    if converged and chain.closed_classes > 1:
        status = MdpStatus.MULTICHAIN
    rs = np.flatnonzero(chain.recurrent.any(axis=0))
    message = STATUS_MESSAGES[status] + (f" ({note})" if note else "")
    return DynamicOptimum(status is MdpStatus.SUCCESS, status, message, problem, policy, chain.cost,
                          chain.p_starvation, chain.loss_rate, chain.mean_active, (int(rs[0]), int(rs[-1])),
                          chain.recurrent, chain.stationary, (lo, hi), iterations, static, gain, method,
                          evaluations)


def unrestricted_dynamic(capacity: int, rate: float, service_rate: float, gamma: float, *, tau: float = TAU,
                         tol: float = TOLERANCE, max_iterations: int = MAX_ITERATIONS,
                         method: str = "policy-iteration") -> DynamicOptimum:
    """The overall optimal dynamic policy, robots unlimited (paper 001, Table 2).

    Solves with N = 2 ceil(mu / lambda) robots and doubles N until the limit does not bind: the policy
    never wakes the last robot (f_0(q) < N - 1 for every q) and its recurrent states stay below N.
    """
    positive("rate", rate, "a rate per second, e.g. 0.1")
    N = 2 * max(1, math.ceil(service_rate / rate))
    while True:
        opt = solve_dynamic(RobotsProblem.paper(N, capacity, rate, service_rate, gamma), tau=tau, tol=tol,
                            max_iterations=max_iterations, method=method)
        f0 = [f for f in opt.policy.switching_curves()[0] if f is not None]
        if max(f0, default=-1) < N - 1 and opt.active_range[1] < N:
            return opt
        N *= 2


def _static_of(problem: RobotsProblem) -> StaticFleet:
    """The best fixed fleet n in min_robots..N under the problem's own rates and costs."""
    p = problem
    best: StaticFleet | None = None
    for n in range(max(p.min_robots, 0), p.robots + 1):
        lam = p.rates[n]
        c, p0, loss = static_cost(lam / p.service_rate, p.gamma, p.capacity, p.service_rate)
        if p.loss_cost != 1.0 or p.robot_cost:
            c = p.gamma * p0 + p.loss_cost * loss + p.robot_cost * n
        if best is None or c < best.cost:
            best = StaticFleet(n, c, p0, loss)
    assert best is not None
    return best


class DynamicController(StateFeedback):
    """Paper 001's policy as a controller of the simulator (:func:`robotctl.model.simulate`).

    At a delivery to q pages with r robots active it keeps the robot that delivered or parks it
    (``policy.keep[q, r]``); at a service completion from q pages it wakes one more robot or not
    (``policy.activate[q, r]``); obsolete drops and phase changes without pages change nothing (the
    paper's model has neither). Run it on ``problem.to_model()``.

    Parameters
    ----------
    policy : DynamicPolicy
    start : int
        Active robots at t = 0 (empty system); take one in the policy's recurrent class, e.g.
        :meth:`from_optimum`.
    """

    def __init__(self, policy: DynamicPolicy, start: int) -> None:
        self.policy = policy
        self.start = whole("start", start, 0)

    @classmethod
    def from_optimum(cls, optimum: DynamicOptimum) -> DynamicController:
        """The optimum's policy, started at the most likely number of robots with an empty queue."""
        return cls(optimum.policy, int(np.argmax(optimum.stationary[0])))

    def initial(self) -> int:
        return self.start

    def decide(self, kind: EventKind, pages: int, before: int, after: int, active: int, phase: int,
               t: float) -> int:
        if kind is EventKind.BMAP_TRANSITION and pages:
            return self.after_events(True, (before,), active)
        if kind is EventKind.SERVICE_COMPLETION:
            return self.after_events(False, (before,), active)
        return active

    def after_events(self, arrival: bool, before: Sequence[int], active: int, floor: int | None = None) -> int:
        """Active robots after a run of deliveries (``arrival``) or of page completions, from ``active`` and
        the queue length before each event (capped at K; a completion from an empty queue changes
        nothing); after a delivery never fewer than ``floor``. The one decision rule: :meth:`decide`
        applies it to each simulated event, the agent to each request (agent/policy.py DynamicDecision)."""
        p = self.policy
        K = p.capacity
        for q in before:
            if arrival:
                active = p.after_arrival(min(q, K), active)
                if floor is not None and active < floor:
                    active = floor
            elif q >= 1:
                active = p.after_departure(min(q, K), active)
        return active
