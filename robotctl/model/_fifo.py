"""Exact FIFO solution for Poisson modes with exponential service and any obsolescence law, at any K.

When every mode delivers single pages as a Poisson stream (rate lambda_i at queue length i, set by the
policy) and indexing is exponential (rate mu), the queue is an M(n)/M/1/K system with impatience of
general law: Brandt and Brandt's M(n)/M(n)/s+GI (Performance Evaluation 35, 1999) for one server.
Describe the state by the number i of pages and the *ages* a_1 > a_2 > ... > a_{i-1} of the waiting pages
(time since arrival, the head first). Each waiting page is still there only if its useful life exceeds
its age (survival Gbar(a), density g, hazard g / Gbar); the page in service cannot expire. The
stationary density on {a_1 > ... > a_{i-1} > 0} is

    f_i(a_1, ..., a_{i-1}) = p_1 lambda_1 ... lambda_{i-1} e^{-mu a_1} Gbar(a_1) ... Gbar(a_{i-1}),    (*)

with p_1 = lambda_0 p_0 / mu. Derivation (checked by substitution): with f_i = Gbar(a_1)..Gbar(a_{i-1})
psi_i, the hazards cancel and the balance of ages drifting at unit speed reads

    sum_j d psi_i / d a_j = -(lambda_i + mu) psi_i + mu int_{a_1}^inf Gbar(b) psi_{i+1}(b, a) db
                           + int_{a_1}^inf g(b) psi_{i+1}(b, a) db + G(a_1) psi_{i+1}(a_1, ...),

(service completion takes the head; an expiry ahead of the head or behind it), with the boundary
psi_i(..., a_{i-1} = 0) = lambda_{i-1} psi_{i-1}(...) (an arrival joins at age 0). psi_i = C_i e^{-mu a_1}
satisfies it with C_{i+1} = lambda_i C_i, because mu int_x^inf Gbar e^{-mu b} db + int_x^inf g e^{-mu b} db
= Gbar(x) e^{-mu x} (integration by parts) and Gbar + G = 1; level 1 and level K (lambda_K = 0, arrivals
lost) balance the same way. The policy enters only through the lambda_i, so every queue-length policy is
covered; batches are not (pages of one batch share an age, and (*) no longer holds).

With H(x) = int_0^x Gbar (the mean useful life used up to x) and k = i - 2, integrating (*) over the
younger pages gives every measure as one-dimensional integrals:

- P(i) = p_1 Lambda_i int e^{-mu x} Gbar(x) H(x)^k / k! dx (Lambda_i = lambda_1 ... lambda_{i-1}).
- Pages enter service from the queue at waiting time x at rate mu f(head age x): the served pages' total
  wait per second is mu sum_i p_1 Lambda_i int x e^{-mu x} Gbar H^k / k! dx; each also spends 1/mu in
  service.
- Pages expire at age x as the head (e^{-mu x} g(x) H(x)^k / k!) or behind a head of age y > x
  (e^{-mu y} Gbar(y) g(x) H(y)^{k-1} / (k-1)!); integrating over x gives the rate, and weighting by x the
  obsolete pages' total sojourn per second (int_0^y x g(x) dx is written M1(y)).

The obsolete rate computed this way and the one implied by conservation (offered - lost - served) are two
routes to one number; their difference measures the quadrature error and is returned as ``residual``.
The integrals are computed by adaptive quadrature over [0, inf) (scipy.integrate.quad_vec, relative
tolerance 1e-12) with every term scaled by its own maximum, so that K in the hundreds neither overflows
nor underflows. For a PH law (gamma, Gamma), Gbar(x) = gamma e^{Gamma x} e, g(x) = gamma e^{Gamma x} Gamma_0,
H(x) = gamma (-Gamma)^{-1} (I - e^{Gamma x}) e and M1(x) = gamma (x Gamma^{-1} e^{Gamma x}
- Gamma^{-2} (e^{Gamma x} - I)) Gamma_0.

Reach: Poisson arrivals in every mode (one arrival phase after exact reduction, single pages), exponential
service (one phase after reduction), any obsolescence law, any K (measured at K = 200 in well under a
second). It is an exact reference for the ordered-head approximation at K far beyond the exact chain.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.linalg as la
from numpy.typing import NDArray
from scipy.special import gammaln

from robotctl._errors import InputError

from ._measures import Measures
from ._model import QueueModel
from ._policy import QueueLengthPolicy
from ._reduce import reduce_model
from ._solve import Solution, SolveStatus

Array = NDArray[np.float64]


@dataclass(frozen=True)
class _Law:
    """Gbar, g, H, M1 of the useful life at x (Gbar = 1 and g = 0 without obsolescence)."""

    gamma: Array | None
    Gamma: Array | None

    def at(self, x: float) -> tuple[float, float, float, float]:
        if self.gamma is None or self.Gamma is None:
            return 1.0, 0.0, x, 0.0
        E = la.expm(self.Gamma * x)
        e = np.ones(self.gamma.size)
        G0 = -self.Gamma @ e
        Ginv = np.linalg.inv(self.Gamma)
        row = self.gamma @ E
        survival = float(row @ e)
        density = float(row @ G0)
        used = float(self.gamma @ np.linalg.solve(-self.Gamma, e - E @ e))
        m1 = float(self.gamma @ (x * Ginv @ E - Ginv @ Ginv @ (E - np.eye(e.size))) @ G0)
        return survival, density, used, m1

    @property
    def mean(self) -> float:
        if self.gamma is None or self.Gamma is None:
            return math.inf
        return float(self.gamma @ np.linalg.solve(-self.Gamma, np.ones(self.gamma.size)))


def _check(model: QueueModel) -> tuple[dict[int, float], float]:
    """Per-mode Poisson rates and mu, or InputError saying what the method needs."""
    rates = {}
    for mode, bmap in model.arrivals.by_mode:
        if bmap.order != 1 or bmap.max_batch != 1:
            raise InputError("method", f"product-form needs Poisson arrivals of single pages, but mode {mode} has "
                             f"{bmap.order} arrival phase(s) and batches up to {bmap.max_batch}",
                             "use method iterative (exact, any arrivals) or the ordered-head approximation")
        rates[mode] = float(bmap.D[1][0, 0])
    if model.service.order != 1:
        raise InputError("method", f"product-form needs exponential service, the service law has "
                         f"{model.service.order} phases", "use method iterative or the ordered-head approximation")
    return rates, float(-model.service.S[0, 0])


def solve_product_form(model: QueueModel, policy: QueueLengthPolicy, *, rtol: float = 1e-12) -> Solution:
    """Measures of ``model`` under ``policy`` from the product form (*) (module docstring).

    Parameters
    ----------
    model
        Poisson modes and exponential service after exact reduction (:func:`reduce_model`); any
        obsolescence law; batches of one page.
    policy
        Any queue-length policy.
    rtol
        Relative tolerance of the quadrature.

    Returns
    -------
    Solution
        ``method="product-form"``; ``level_vectors`` holds P(i) for each level (one number each);
        ``residual`` the quadrature check (conservation of pages, relative to the offered rate).

    References
    ----------
    A. Brandt and M. Brandt, "On the M(n)/M(n)/s queue with impatient calls", Performance Evaluation 35
    (1999) 1-18; for s = 1 and PH patience the integrals above are its occupancy distribution.
    """
    start = time.perf_counter()
    model.check_policy(policy)
    red = reduce_model(model)
    reduced = red.model
    rates, mu = _check(reduced)
    K = reduced.capacity
    lam = np.array([rates[m] for m in policy.robots_at_level])
    law = _Law(None, None) if reduced.obsolescence is None else _Law(np.asarray(reduced.obsolescence.beta),
                                                                     np.asarray(reduced.obsolescence.S))
    nk = max(K - 1, 0)  # k = i - 2 for i = 2..K
    ks = np.arange(nk)
    # every term k is scaled by exp(-shift_k), shift_k the largest log e^{-mu x} Gbar(x) H(x)^k / k! on a
    # grid, so that each term's integrand peaks near 1 whatever K and the rates
    grid = np.concatenate([np.linspace(0.0, 5.0 / mu, 100)[1:], np.geomspace(5.0 / mu, 5.0 / mu + 1e4, 200)])
    points = [law.at(x) for x in grid]
    logs = np.array([(math.log(max(v[0], 1e-300)) - mu * x, math.log(max(v[2], 1e-300)))
                     for x, v in zip(grid, points)])
    shift = np.max(logs[:, :1] + np.outer(logs[:, 1], ks), axis=0) - gammaln(ks + 1) if nk else np.zeros(0)

    def integrand(x: float) -> Array:
        survival, density, used, m1 = law.at(x)
        ex = math.exp(-mu * x)
        logh = math.log(used) if used > 0 else -math.inf
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            hk = np.exp(ks * logh - gammaln(ks + 1) - shift) if nk else np.zeros(0)
            hk = np.where(ks == 0, np.exp(-shift), hk)
        # H^{k-1}/(k-1)! in the scale of term k
        hk1 = np.zeros(nk)
        if nk > 1:
            with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
                hk1[1:] = np.exp((ks[1:] - 1) * logh - gammaln(ks[1:]) - shift[1:])
                hk1[1:] = np.where(ks[1:] == 1, np.exp(-shift[1:]), hk1[1:])
        head = ex * survival * hk
        out = np.concatenate([
            head,                               # P(i) / (p_1 Lambda_i)
            x * head,                           # waiting time of pages entering service
            ex * density * hk,                  # expiry of the head
            x * ex * density * hk,              # ... its age
            ex * survival * (1.0 - survival) * hk1,   # expiry behind the head
            ex * survival * m1 * hk1,           # ... the ages
        ])
        return np.nan_to_num(out, nan=0.0, posinf=0.0)

    if nk:
        from scipy.integrate import quad_vec  # here: scipy.integrate costs 0.1-0.3 s to import

        values, _err = quad_vec(integrand, 0.0, math.inf, epsabs=0.0, epsrel=rtol, norm="max", limit=20000)
        I = np.asarray(values).reshape(6, nk)
    else:
        I = np.zeros((6, 0))
    # log of p_1 Lambda_i (p_0 = 1) for i = 2..K, plus each term's shift
    log_p1 = math.log(lam[0] / mu)
    log_lambda = np.cumsum(np.log(lam[1:K]))  # log(lambda_1 ... lambda_{i-1}) for i = 2..K
    log_c = log_p1 + log_lambda + shift
    top = max([0.0, log_p1, *log_c.tolist()])
    c = np.exp(log_c - top)
    p = np.zeros(K + 1)
    p[0] = math.exp(-top)
    if K >= 1:
        p[1] = math.exp(log_p1 - top)
    p[2:] = c * I[0]
    total = p.sum()
    p /= total
    c /= total
    offered = float(lam @ p)
    lost = float(lam[K] * p[K])
    served = mu * (1.0 - float(p[0]))
    obsolete = float(c @ (I[2] + I[4]))
    served_time = mu * float(c @ I[1]) + served / mu
    obsolete_time = float(c @ (I[3] + I[5]))
    residual = abs(offered - lost - served - obsolete) / max(offered, 1e-300)
    measures = Measures.from_rates(offered=offered, lost=lost, obsolete=obsolete, served=served,
                                   level_probabilities=p, robots_at_level=policy.robots_at_level,
                                   served_time=served_time, obsolete_time=obsolete_time)
    ok = residual <= 1e-9
    status = SolveStatus.SUCCESS if ok else SolveStatus.INACCURATE
    message = "solved" if ok else f"quadrature check {residual:.2g} above 1e-9"
    return Solution(ok, status, message, "product-form", policy, measures, tuple(np.array([x]) for x in p), K + 1,
                    residual, time.perf_counter() - start, red.notes)
