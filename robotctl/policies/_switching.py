"""Paper 001's full-information MDP with a price on switching: a lower bound for commanded fleets (issue 24).

The MDP of :mod:`policies._certificate` lets the controller pick any mode at any instant for free. Give
each park or resume command its price c (``costs.command``): the state becomes (x, r), the queue's full
Markov state x and the robots active r, and the controller may at any instant move r to r' paying
c |r' - r| at once. Every hysteresis or threshold policy (and any policy with memory) is a policy of this
impulse-control problem, so its optimal average cost bounds theirs from below.

Certificate. For any function h(x, r) with h(x, r) <= h(x, r') + c |r - r'| (no switch makes h drop by more
than it costs), Dynkin's formula along any path gives: cost accumulated - (h(end) - h(start)) =
integral of (c(x, r) + (Q_r h(., r))(x)) dt + sum over switches of (c |dr| - (h(x, r') - h(x, r))) >=
delta(h) T, with

    delta(h) = min over x, r, and the actions of mode r, of  c(x, a) + (Q_a h(., r))(x).

So delta(h) bounds the long-run cost of every policy, whatever h is. Any h becomes admissible by its
inf-convolution h~(x, r) = min_r' h(x, r') + c |r - r'| (the triangle inequality); h comes from relative
value iteration on the uniformised problem (switch, then one step of the chain), and the bound is computed
from h~ directly, so it does not rest on the iteration's convergence.

The response term a V^(1) (a ratio of averages) enters as a b_1 (V^(1) >= the mean service time), which
keeps the bound valid but weaker than the branch and bound of ``mdp_lower_bound``; a command budget B
instead of a price enters by Lagrange duality: for every lambda >= 0, J(pi) >= delta_lambda - lambda B
for every policy pi within the budget, with delta_lambda the bound for the price lambda.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from robotctl.model import Costs, InputError, QueueModel

from ._certificate import build_mdp

#: Relative value iteration stops when the Odoni bracket is this tight (relative), or at ``MAX_SWEEPS``.
TOLERANCE = 1e-6
MAX_SWEEPS = 20_000


@dataclass(frozen=True)
class SwitchingBound:
    """A lower bound on J + c x commands per second for every policy (module docstring).

    Attributes
    ----------
    value : float
        The bound: no policy, with whatever information and memory, costs less on average (J of eq. (2)
        with its response term bounded by a b_1, plus ``costs.command`` x commands per second).
    upper : float
        The Odoni upper bracket of the uniformised problem's optimum at the last sweep (for the
        linear part): value <= optimum <= upper + a b_1 when the iteration converged.
    converged : bool
    sweeps : int
    n_states : int
        States (x, r) of the MDP.
    formulation : str
        ``ordered`` or ``counts`` (:func:`policies.build_mdp`).
    response : str
        ``none`` or ``service-time``.
    """

    value: float
    upper: float
    converged: bool
    sweeps: int
    n_states: int
    formulation: str
    response: str

    def gap_percent(self, cost: float) -> float:
        return 100.0 * (cost - self.value) / self.value if self.value > 0 else math.inf


def switching_lower_bound(model: QueueModel, costs: Costs, *, command: float | None = None,
                          tol: float = TOLERANCE, max_sweeps: int = MAX_SWEEPS) -> SwitchingBound:
    """The bound of the module docstring for the price ``command`` (default ``costs.command``)."""
    price = costs.command if command is None else float(command)
    if not math.isfinite(price) or price < 0:
        raise InputError("costs.command", f"must be a finite number >= 0, got {price!r}", "e.g. 0.5")
    mdp = build_mdp(model, replace(costs, response=0.0, command=0.0))
    n = mdp.n_states
    modes = sorted({m for m, _ in mdp.actions})
    of_mode = [[a for a, (m, _) in enumerate(mdp.actions) if m == mode] for mode in modes]
    mvec = np.array(modes, dtype=float)
    switch = price * np.abs(mvec[:, None] - mvec[None, :])  # (from k, to k')
    rate = max(float(np.max(-Q.diagonal())) for Q in mdp.generators) * 1.05
    if rate <= 0:
        raise InputError("model", "has no transitions", "check the rates")
    P = [Q * (1.0 / rate) for Q in mdp.generators]  # P_a - I
    flow = mdp.cost / rate  # cost per uniformised step

    def settle(h: NDArray[np.float64]) -> NDArray[np.float64]:
        """Inf-convolution over the robot counts: min_k' h(x, k') + c |m_k - m_k'| (h is n x modes)."""
        return np.asarray(np.min(h[:, None, :] + switch[None, :, :], axis=2))

    def step(v: NDArray[np.float64]) -> NDArray[np.float64]:
        out = np.empty_like(v)
        for k, acts in enumerate(of_mode):
            col = v[:, k]
            out[:, k] = np.min(np.column_stack([flow[:, a] + col + P[a] @ col for a in acts]), axis=1)
        return out

    v = np.zeros((n, len(modes)))
    converged = False
    sweeps = 0
    lo = hi = 0.0
    for sweeps in range(1, max_sweeps + 1):  # noqa: B007 (the count is reported)
        w = step(settle(v))
        diff = (w - v) * rate
        lo, hi = float(diff.min()), float(diff.max())
        v = w - w[0, 0]
        if hi - lo <= tol * max(abs(hi), 1e-12):
            converged = True
            break
    h = settle(v)
    worst = math.inf
    for k, acts in enumerate(of_mode):
        col = h[:, k]
        for a in acts:
            worst = min(worst, float(np.min(mdp.cost[:, a] + mdp.generators[a] @ col)))
    a_resp = costs.response
    extra = a_resp * mdp.mean_service if a_resp else 0.0
    return SwitchingBound(worst + extra, hi + extra, converged, sweeps, n * len(modes), mdp.formulation,
                          "service-time" if a_resp else "none")


def budget_lower_bound(model: QueueModel, costs: Costs, budget_per_robot_min: float, *,
                       prices: tuple[float, ...] = (0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)) -> tuple[float, float]:
    """max over the prices lambda of (bound for the price lambda) - lambda x budget in commands per second:
    a lower bound on J (command price ``costs.command`` included) of every policy within the budget.
    Returns (bound, the best lambda)."""
    fleet = max(model.modes)
    per_s = budget_per_robot_min * fleet / 60.0
    best, arg = -math.inf, 0.0
    for lam in prices:
        b = switching_lower_bound(model, costs, command=costs.command + lam).value - lam * per_s
        if b > best:
            best, arg = b, lam
    return best, arg
