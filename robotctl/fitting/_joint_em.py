"""EM's M-step and iterations for the joint fit (issue 27; the fit is :mod:`robotctl.fitting._joint`)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ._joint_likelihood import _e_step, _EStep, joint_loglikelihood
from ._joint_model import JointData, JointParams, general_params

#: A warm start (the previous window's estimate) stops after one EM step when that step raised the
#: log-likelihood by less than WARM_TOL per batch or by less than WARM_MIN_GAIN in all: the step is then
#: no significant improvement (1.92 is half the chi-square(1) 95% quantile, the likelihood-ratio test's
#: threshold for moving one parameter), so the start is already an estimate the data cannot tell from
#: the maximum. One step costs one E-step and one forward pass instead of the 3-20 E-steps to ``tol``.
WARM_TOL = 1e-5
WARM_MIN_GAIN = 1.92


def _m_step(params: JointParams, data: JointData, es: _EStep) -> JointParams:
    m = params.phases
    if params.arrival is not None and es.hidden_jumps is not None and es.arrival_moves is not None:
        # general: H^(l)_ij = N^(l)_ij / T^(l)_i, D_k^(l)_ij = A^(l)_kij / T^(l)_i (a MAP EM's M-step per mode)
        Tl = np.maximum(es.time_in, 1e-300)                          # (L, m)
        H = es.hidden_jumps / Tl[:, :, None]
        D = es.arrival_moves / Tl[:, None, :, None]
        return general_params(params.modes, H, D, es.starts / es.starts.sum())
    T = es.time_in.sum(axis=0)
    Tsafe = np.maximum(T, 1e-300)
    Q = es.jumps / Tsafe[:, None]
    np.fill_diagonal(Q, 0.0)
    np.fill_diagonal(Q, -Q.sum(axis=1))
    A = es.batches                                                   # (L, m, K)
    n_lm = A.sum(axis=2)                                             # (L, m)
    if params.structure == "linear":
        mm = np.asarray(data.modes, dtype=float)
        base = n_lm.sum(axis=0) / np.maximum((mm[:, None] * es.time_in).sum(axis=0), 1e-300)
        rates = mm[:, None] * base[None, :]
        A = np.repeat(A.sum(axis=0, keepdims=True), len(data.modes), axis=0)
    else:
        rates = n_lm / np.maximum(es.time_in, 1e-300)
    if params.batch_law == "mode":
        A = np.repeat(A.sum(axis=1, keepdims=True), m, axis=1)
    tot = A.sum(axis=2, keepdims=True)
    probs = np.where(tot > 0, A / np.where(tot > 0, tot, 1.0), params.batch_probs)
    init = es.starts / es.starts.sum()
    return replace(params, generator=Q, rates=rates, batch_probs=probs, initial=init)


#: Above this many pieces a cold start first runs EM on a leading part of the data (1/8, then the
#: whole): the early iterations, which move far, are cheap, and the full-data ones few.
PREFIT_ABOVE = 100_000


def _prefit(p0: JointParams, data: JointData, tol: float) -> JointParams:
    n = data.durations.size
    if n <= PREFIT_ABOVE:
        return p0
    part = data.head(max(n // 8, PREFIT_ABOVE // 2))
    if any(part.exposure_s[i] <= 0 < data.exposure_s[i] for i in range(len(data.modes))):
        return p0
    if part.durations.size > PREFIT_ABOVE:
        p0 = _prefit(p0, part, tol)
    return _em(p0, part, max_iter=200, tol=tol * 10)[0]


def _em(p0: JointParams, data: JointData, *, max_iter: int, tol: float, warm_tol: float | None = None
        ) -> tuple[JointParams, float, int, bool]:
    params = p0
    prev = -math.inf
    best = (p0, -math.inf)
    it = 0
    converged = False
    scale = max(data.n_batches, 1)
    if warm_tol is not None and max_iter >= 1:
        es = _e_step(p0, data)
        if not math.isfinite(es.loglik):
            return p0, es.loglik, 1, False
        p1 = _m_step(p0, data, es)
        ll1 = joint_loglikelihood(p1, data)
        if math.isfinite(ll1) and ll1 - es.loglik < max(warm_tol * scale, WARM_MIN_GAIN):
            return (p1, ll1, 1, True) if ll1 >= es.loglik else (p0, es.loglik, 1, True)
        if not (math.isfinite(ll1) and ll1 > es.loglik):
            return p0, es.loglik, 1, True
        best, params, prev = (p0, es.loglik), p1, es.loglik      # EM on from the step (its gain is counted)
    for it in range(1, max_iter + 1):  # noqa: B007
        es = _e_step(params, data)
        if not math.isfinite(es.loglik):
            break
        if es.loglik > best[1]:
            best = (params, es.loglik)
        if es.loglik - prev < tol * scale:
            converged = True
            break
        prev = es.loglik
        params = _m_step(params, data, es)
    return best[0], best[1], it, converged
