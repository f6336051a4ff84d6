"""The joint fit's score and observed information (issue 27; the fit is :mod:`robotctl.fitting._joint`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from ._joint_likelihood import _e_step
from ._joint_model import _RATE_FLOOR, JointData, JointParams


def _free_index(params: JointParams) -> list[tuple[str, int, int]]:
    m = params.phases
    out = [("q", i, j) for i in range(m) for j in range(m) if i != j]
    if params.structure == "linear":
        out += [("base", 0, i) for i in range(m)]
    else:
        out += [("rate", li, i) for li in range(len(params.modes)) for i in range(m)]
    return out


def joint_free_vector(params: JointParams) -> NDArray[np.float64]:
    """log Q_ij (i != j) then log lambda (base rates under ``linear``, else every mode's)."""
    vals = []
    for kind, a, b in _free_index(params):
        if kind == "q":
            vals.append(params.generator[a, b])
        elif kind == "base":
            vals.append(params.rates[0, b] / max(params.modes[0], 1))
        else:
            vals.append(params.rates[a, b])
    return np.log(np.maximum(np.asarray(vals), _RATE_FLOOR))


def joint_from_free_vector(params: JointParams, x: NDArray[np.float64]) -> JointParams:
    """The inverse of :func:`joint_free_vector` (other parameters from ``params``)."""
    Q = params.generator.copy()
    rates = params.rates.copy()
    ex = np.exp(np.asarray(x, dtype=float))
    for (kind, a, b), val in zip(_free_index(params), ex, strict=True):
        if kind == "q":
            Q[a, b] = val
        elif kind == "base":
            rates[:, b] = np.asarray(params.modes, dtype=float) * val
        else:
            rates[a, b] = val
    np.fill_diagonal(Q, 0.0)
    np.fill_diagonal(Q, -Q.sum(axis=1))
    return replace(params, generator=Q, rates=rates)


def joint_score(params: JointParams, data: JointData) -> NDArray[np.float64]:
    """d loglik / d joint_free_vector by Fisher's identity: N_ij - Q_ij T_i for the jumps, A_li - lambda_li T_li
    for the rates (the expected complete-data score)."""
    es = _e_step(params, data)
    T = es.time_in.sum(axis=0)
    out = []
    mm = np.asarray(params.modes, dtype=float)
    for kind, a, b in _free_index(params):
        if kind == "q":
            out.append(es.jumps[a, b] - params.generator[a, b] * T[a])
        elif kind == "base":
            lam = params.rates[0, b] / max(params.modes[0], 1)
            out.append(es.batches[:, b, :].sum() - lam * float((mm * es.time_in[:, b]).sum()))
        else:
            out.append(es.batches[a, b, :].sum() - params.rates[a, b] * es.time_in[a, b])
    return np.asarray(out)


def joint_covariance(params: JointParams, data: JointData, *, step: float = 1e-4) -> NDArray[np.float64]:
    """Inverse of minus the Hessian of the log-likelihood in :func:`joint_free_vector`'s coordinates, by
    central differences of :func:`joint_score` (2 x parameters E-steps). A direction without information
    (a rate the data never exercised) gets a variance of inf."""
    x0 = joint_free_vector(params)
    k = x0.size
    H = np.empty((k, k))
    for j in range(k):
        e = np.zeros(k)
        e[j] = step
        g_plus = joint_score(joint_from_free_vector(params, x0 + e), data)
        g_minus = joint_score(joint_from_free_vector(params, x0 - e), data)
        H[:, j] = (g_plus - g_minus) / (2 * step)
    H = 0.5 * (H + H.T)
    info = -H
    try:
        w, U = np.linalg.eigh(info)
    except np.linalg.LinAlgError:
        return np.full((k, k), np.inf)
    tiny = w <= 1e-9 * max(float(np.max(np.abs(w))), 1e-300)
    winv = np.where(tiny, np.inf, 1.0 / np.where(tiny, 1.0, w))
    cov = (U * np.where(np.isinf(winv), 0.0, winv)) @ U.T
    if tiny.any():
        bad = np.abs(U[:, tiny]).sum(axis=1) > 1e-6
        cov[bad, :] = np.inf
        cov[:, bad] = np.inf
    return np.asarray(cov)
