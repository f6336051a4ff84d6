"""The joint fit's score and observed information (issue 27; the fit is :mod:`robotctl.fitting._joint`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from ._joint_likelihood import _e_step
from ._joint_model import _RATE_FLOOR, JointData, JointParams, general_params

#: ``general``: an entry of H^(l) or D_k^(l) below this fraction of its row's total rate is held at its
#: estimate (EM drove it to the boundary; its log has no curvature to speak of).
GENERAL_FREE_ABOVE = 1e-3


def _general_index(params: JointParams) -> list[tuple[str, int, int, int, int]]:
    assert params.hidden is not None and params.arrival is not None
    m, L, K = params.phases, len(params.modes), params.arrival.shape[1]
    row = params.hidden.sum(axis=2) + params.arrival.sum(axis=(1, 3))            # (L, m)
    out: list[tuple[str, int, int, int, int]] = []
    for li in range(L):
        for i in range(m):
            floor = GENERAL_FREE_ABOVE * row[li, i]
            out += [("h", li, 0, i, j) for j in range(m) if j != i and params.hidden[li, i, j] > floor]
            out += [("d", li, k, i, j) for k in range(K) for j in range(m) if params.arrival[li, k, i, j] > floor]
    return out


def _free_index(params: JointParams) -> list[tuple[str, int, int]]:
    m = params.phases
    out = [("q", i, j) for i in range(m) for j in range(m) if i != j]
    if params.structure == "linear":
        out += [("base", 0, i) for i in range(m)]
    else:
        out += [("rate", li, i) for li in range(len(params.modes)) for i in range(m)]
    return out


def joint_free_vector(params: JointParams) -> NDArray[np.float64]:
    """log Q_ij (i != j) then log lambda (base rates under ``linear``, else every mode's); under ``general``
    the logs of the entries of H^(l) (off the diagonal) and D_k^(l) in (mode, row) order, those below
    ``GENERAL_FREE_ABOVE`` of their row's total left out (held at the estimate)."""
    if params.arrival is not None and params.hidden is not None:
        gv = [params.hidden[li, i, j] if kind == "h" else params.arrival[li, k, i, j]
              for kind, li, k, i, j in _general_index(params)]
        return np.log(np.maximum(np.asarray(gv, dtype=float), 1e-300))
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
    if params.arrival is not None and params.hidden is not None:
        H, D = params.hidden.copy(), params.arrival.copy()
        for (kind, li, k, i, j), val in zip(_general_index(params), np.exp(np.asarray(x, dtype=float)), strict=True):
            if kind == "h":
                H[li, i, j] = val
            else:
                D[li, k, i, j] = val
        return general_params(params.modes, H, D, params.initial)
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
    for the rates (the expected complete-data score); under ``general`` N_r - r T^(l)_i for every free entry
    r of H^(l) and D_k^(l) (N_r its expected count of moves, T^(l)_i the expected time in its row's phase
    and mode)."""
    es = _e_step(params, data)
    if params.arrival is not None and params.hidden is not None:
        assert es.hidden_jumps is not None and es.arrival_moves is not None
        g = []
        for kind, li, k, i, j in _general_index(params):
            if kind == "h":
                g.append(es.hidden_jumps[li, i, j] - params.hidden[li, i, j] * es.time_in[li, i])
            else:
                g.append(es.arrival_moves[li, k, i, j] - params.arrival[li, k, i, j] * es.time_in[li, i])
        return np.asarray(g)
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
