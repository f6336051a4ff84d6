"""The joint likelihood and EM's E-step (issue 27; the fit is :mod:`robotctl.fitting._joint`).

Each piece's matrix M_j = expm(D_0^(l) tau) D_k^(l) from the eigen-decomposition of D_0^(l); the forward and
backward vectors by a parallel prefix product; each piece's expected time per phase and Q-jumps by Van
Loan's integral in closed form; the expected batches per mode, phase and size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._joint_model import _PROB_FLOOR, _RATE_FLOOR, JointData, JointParams

_SEQUENTIAL_BELOW = 16


def _matmul(A: NDArray[Any], B: NDArray[Any]) -> NDArray[Any]:
    """C[:, :, n] = A[:, :, n] @ B[:, :, n] for stacks laid out (m, m, n)."""
    m = A.shape[0]
    C = np.empty((m, m, A.shape[2]), dtype=np.result_type(A, B))
    for i in range(m):
        for k in range(m):
            acc = A[i, 0] * B[0, k]
            for j in range(1, m):
                acc += A[i, j] * B[j, k]
            C[i, k] = acc
    return C


def _vecmat(a: NDArray[Any], M: NDArray[Any]) -> NDArray[Any]:
    """out[:, n] = a[:, n] @ M[:, :, n]."""
    m = M.shape[0]
    out = np.empty((m, M.shape[2]), dtype=np.result_type(a, M))
    for k in range(m):
        acc = a[0] * M[0, k]
        for j in range(1, m):
            acc += a[j] * M[j, k]
        out[k] = acc
    return out


def _matvec(M: NDArray[Any], b: NDArray[Any]) -> NDArray[Any]:
    """out[:, n] = M[:, :, n] @ b[:, n]."""
    m = M.shape[0]
    out = np.empty((m, M.shape[2]), dtype=np.result_type(M, b))
    for i in range(m):
        acc = M[i, 0] * b[0]
        for j in range(1, m):
            acc += M[i, j] * b[j]
        out[i] = acc
    return out


def _log(x: NDArray[np.float64]) -> NDArray[np.float64]:
    with np.errstate(divide="ignore"):
        return np.log(x)


def _forward(init: NDArray[np.float64], M: NDArray[np.float64], logM: NDArray[np.float64]
             ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Normalised prefix vectors alpha_j = init M_0 ... M_{j-1} / |.| for j = 0..n, and the log of
    each one's total mass (M_j scaled by exp(logM_j)), by a parallel prefix product."""
    m, n = M.shape[0], M.shape[2]
    alpha = np.empty((m, n + 1))
    ln = np.empty(n + 1)
    s0 = float(init.sum())
    alpha[:, 0] = init / s0
    ln[0] = math.log(s0)
    if n < _SEQUENTIAL_BELOW:
        for j in range(n):
            u = alpha[:, j] @ M[:, :, j]
            s = float(u.sum())
            alpha[:, j + 1] = u / s if s > 0 else 1.0 / m
            ln[j + 1] = ln[j] + logM[j] + (math.log(s) if s > 0 else -math.inf)
        return alpha, ln
    h = n // 2
    P = _matmul(M[:, :, 0:2 * h:2], M[:, :, 1:2 * h:2])
    norm = P.sum(axis=(0, 1))
    norm = np.where(norm > 0, norm, 1e-300)
    P /= norm
    logP = logM[0:2 * h:2] + logM[1:2 * h:2] + np.log(norm)
    a_even, l_even = _forward(init, P, logP)
    alpha[:, 0:2 * h + 1:2] = a_even
    ln[0:2 * h + 1:2] = l_even
    u = _vecmat(a_even[:, :h], M[:, :, 0:2 * h:2])
    su = u.sum(axis=0)
    alpha[:, 1:2 * h:2] = u / np.where(su > 0, su, 1.0)
    ln[1:2 * h:2] = l_even[:h] + logM[0:2 * h:2] + _log(su)
    if n % 2:
        u1 = alpha[:, n - 1] @ M[:, :, n - 1]
        s1 = float(u1.sum())
        alpha[:, n] = u1 / s1 if s1 > 0 else 1.0 / m
        ln[n] = ln[n - 1] + logM[n - 1] + (math.log(s1) if s1 > 0 else -math.inf)
    return alpha, ln


@dataclass(frozen=True)
class _ModeEigen:
    w: NDArray[Any]      # eigenvalues of D_0^(l), w[0] the one of largest real part (real)
    V: NDArray[Any]
    Vi: NDArray[Any]


def _eigen(D0: NDArray[np.float64]) -> _ModeEigen:
    w, V = np.linalg.eig(D0)
    order = np.argsort(-w.real, kind="stable")
    w, V = w[order], V[:, order]
    if np.max(np.abs(w.imag)) < 1e-12 * max(1.0, float(np.max(np.abs(w)))):
        w, V = w.real, V.real
    Vi = np.linalg.inv(V)
    return _ModeEigen(w, V, Vi)


@dataclass(frozen=True, eq=False)
class _EStep:
    loglik: float
    time_in: NDArray[np.float64]        # (L, m) expected seconds in mode l and phase i
    jumps: NDArray[np.float64]          # (m, m) expected Q-jumps i -> j
    batches: NDArray[np.float64]        # (L, m, K) expected batches of size k + 1 in mode l, phase i
    starts: NDArray[np.float64]         # (m,) expected phase at the segment starts
    hidden_jumps: NDArray[np.float64] | None = None   # general: (L, m, m) expected moves without arrival
    arrival_moves: NDArray[np.float64] | None = None  # general: (L, K, m, m) expected batches i -> j, size k + 1


def _pieces(params: JointParams, data: JointData, eig: list[_ModeEigen], Dg: NDArray[np.float64] | None = None
            ) -> tuple[NDArray[Any], NDArray[np.float64], NDArray[np.float64], NDArray[Any], NDArray[Any],
                       NDArray[np.float64] | None]:
    """Each piece's scaled matrix M_j = exp(-w0 tau) expm(D_0 tau) diag(v) in time order, its log scale,
    v (the batch weights, or ones), exp((w - w0) tau), the shifted eigenvalues per piece and (``general``,
    where M_j = exp(-w0 tau) expm(D_0 tau) D_k and v is ones) the scaled expm(D_0 tau) alone, else None. Every mode's
    eigen-data is a small table gathered by the pieces' mode index, so the pieces stay in time order."""
    m, n = params.phases, data.durations.size
    L = len(data.modes)
    complex_ = any(np.iscomplexobj(e.w) for e in eig)
    dt = np.complex128 if complex_ else np.float64
    mi = data.mode_index
    tau = data.durations
    w0 = np.array([float(np.real(e.w[0])) for e in eig])
    ws = np.array([e.w - w0[li] for li, e in enumerate(eig)], dtype=dt)            # (L, m)
    ws_p = ws[mi].T                                                                 # (m, n)
    ex = np.exp(ws_p * tau)
    coef = np.array([np.einsum("ia,ak->ika", e.V, e.Vi) for e in eig], dtype=dt)    # (L, m, m, m)
    M = np.empty((m, m, n))
    for i in range(m):
        for k in range(m):
            acc = coef[:, i, k, 0][mi] * ex[0]
            for a_ in range(1, m):
                acc += coef[:, i, k, a_][mi] * ex[a_]
            M[i, k] = np.maximum(np.real(acc), 0.0)
    logM = w0[mi] * tau
    if params.arrival is not None:
        E = M.copy()
        v = np.ones((m, n))
        ev = data.sizes > 0
        if Dg is None:
            Dg = _gathered_arrivals(params, data)
        M[:, :, ev] = _matmul(E[:, :, ev], Dg)
        rs = np.flatnonzero(data.sizes < 0)
        if rs.size:
            M[:, :, rs] = params.initial[None, :, None] * np.ones((m, 1, 1))
            logM[rs] = 0.0
        return M, logM, v, ex, ws_p, E
    probs = np.maximum(params.batch_probs, _PROB_FLOOR)
    rates = np.maximum(params.rates, _RATE_FLOOR)
    K = probs.shape[2]
    sz = data.sizes
    v = np.ones((m, n))
    ev = sz > 0
    flat = mi[ev] * K + (sz[ev] - 1)
    for i in range(m):
        v[i, ev] = (rates[:, i][:, None] * probs[:, i, :]).ravel()[flat]
    M *= v[None, :, :]
    rs = np.flatnonzero(sz < 0)
    if rs.size:
        M[:, :, rs] = params.initial[None, :, None] * np.ones((m, 1, 1))
        logM[rs] = 0.0
    del L
    return M, logM, v, ex, ws_p, None


def _gathered_arrivals(params: JointParams, data: JointData) -> NDArray[np.float64]:
    """D_k^(l) of every piece that ends with a batch, laid out (m, m, events) (``general``)."""
    assert params.arrival is not None
    ev = data.sizes > 0
    K = params.arrival.shape[1]
    flat = params.arrival.reshape(-1, params.phases, params.phases)
    idx = data.mode_index[ev] * K + np.minimum(data.sizes[ev], K) - 1
    return np.ascontiguousarray(flat[idx].transpose(1, 2, 0))


def _e_step(params: JointParams, data: JointData, *, statistics: bool = True) -> _EStep:
    m, L, K = params.phases, len(data.modes), params.batch_probs.shape[2]
    d0 = params.d0()
    eig = [_eigen(d0[li]) for li in range(L)]
    Dg = _gathered_arrivals(params, data) if params.arrival is not None else None
    M, logM, v, ex, ws_p, E = _pieces(params, data, eig, Dg)
    init = np.maximum(params.initial, 1e-300)
    alpha, la = _forward(init, M, logM)
    loglik = float(la[-1])
    if not statistics:
        return _EStep(loglik, np.zeros((L, m)), np.zeros((m, m)), np.zeros((L, m, K)), np.zeros(m))
    MT = np.ascontiguousarray(M.transpose(1, 0, 2)[:, :, ::-1])
    beta_r, _ = _forward(np.ones(m), MT, logM[::-1])
    beta = np.ascontiguousarray(beta_r[:, ::-1])                    # beta[:, j] = M_j ... M_{n-1} 1, normalised
    aM = _vecmat(alpha[:, :-1], M)                                  # (m, n)
    post = aM * beta[:, 1:]
    c = post.sum(axis=0)
    c = np.where(c > 0, c, 1e-300)
    post /= c
    mi = data.mode_index
    live = (data.sizes >= 0).astype(float)
    tau = data.durations
    a_c = alpha[:, :-1] * (live / c)                                # restarts weigh nothing
    b = v * beta[:, 1:]
    if E is not None:
        ev_ = data.sizes > 0
        assert Dg is not None
        b[:, ev_] = _matvec(Dg, beta[:, 1:][:, ev_])               # D_k beta_{j+1}
    dt = ex.dtype
    V = np.array([e.V for e in eig], dtype=dt)                      # (L, m, m)
    Vi = np.array([e.Vi for e in eig], dtype=dt)
    aw = np.zeros((m, tau.size), dtype=dt)                          # (alpha V)_p / c per piece
    Vb = np.zeros((m, tau.size), dtype=dt)                          # (V^-1 b)_q per piece
    for p_ in range(m):
        for i in range(m):
            aw[p_] += V[:, i, p_][mi] * a_c[i]
            Vb[p_] += Vi[:, p_, i][mi] * b[i]
    tmax = float(tau.max(initial=0.0))
    ws_modes = np.array([e.w - float(np.real(e.w[0])) for e in eig], dtype=dt)   # (L, m)

    def by_mode(weights: NDArray[Any]) -> NDArray[Any]:
        if np.iscomplexobj(weights):
            return (np.bincount(mi, weights=weights.real, minlength=L)
                    + 1j * np.bincount(mi, weights=weights.imag, minlength=L))
        return np.bincount(mi, weights=weights, minlength=L)

    S = np.zeros((L, m, m), dtype=dt)
    for p_ in range(m):
        S[:, p_, p_] = by_mode(aw[p_] * Vb[p_] * tau * ex[p_])
        for q_ in range(p_ + 1, m):
            d_modes = ws_modes[:, p_] - ws_modes[:, q_]
            near_modes = np.abs(d_modes) * tmax < 1e-5
            d = ws_p[p_] - ws_p[q_]
            if near_modes.any():
                near = near_modes[mi]
                phi = np.where(near, tau * ex[q_] * (1.0 + d * tau / 2.0),
                               (ex[p_] - ex[q_]) / np.where(near, 1.0, d))
            else:
                phi = (ex[p_] - ex[q_]) / d
            S[:, p_, q_] = by_mode(aw[p_] * Vb[q_] * phi)
            S[:, q_, p_] = by_mode(aw[q_] * Vb[p_] * phi)
    time_in = np.zeros((L, m))
    jumps = np.zeros((m, m))
    hidden_jumps = np.zeros((L, m, m))
    for li in range(L):
        Z = np.real(Vi[li].T @ S[li] @ V[li].T)
        time_in[li] = np.maximum(np.diag(Z), 0.0)
        off = np.maximum(Z * d0[li], 0.0)                        # off-diagonal of D_0^(l): the moves
        np.fill_diagonal(off, 0.0)
        hidden_jumps[li] = off
        jumps += off
    if E is not None:
        assert params.arrival is not None
        K = params.arrival.shape[1]
        ev = np.flatnonzero(data.sizes > 0)
        u = _vecmat(a_c[:, ev], E[:, :, ev])                      # alpha_j expm(D_0 tau) / c_j
        bb = beta[:, 1:][:, ev]
        assert Dg is not None
        flat = data.mode_index[ev] * K + np.minimum(data.sizes[ev], K) - 1
        moves = np.zeros((L * K, m, m))
        for i in range(m):
            for j in range(m):
                moves[:, i, j] = np.bincount(flat, weights=u[i] * Dg[i, j] * bb[j], minlength=L * K)
        moves = moves.reshape(L, K, m, m)
        st = np.flatnonzero(data.sizes < 0)
        starts = init * beta[:, 0] / float(init @ beta[:, 0])
        if st.size:
            s2 = init[:, None] * beta[:, st + 1]
            starts = starts + (s2 / s2.sum(axis=0)).sum(axis=1)
        return _EStep(loglik, time_in, jumps, np.transpose(moves.sum(axis=3), (0, 2, 1)), starts,
                      hidden_jumps, moves)
    ev = np.flatnonzero(data.sizes > 0)
    batches = np.zeros((L, m, K))
    flat = data.mode_index[ev] * K + (data.sizes[ev] - 1)
    for i in range(m):
        batches[:, i, :] = np.bincount(flat, weights=post[i, ev], minlength=L * K).reshape(L, K)
    st = np.flatnonzero(data.sizes < 0)
    starts = init * beta[:, 0] / float(init @ beta[:, 0])
    if st.size:
        s2 = init[:, None] * beta[:, st + 1]
        starts = starts + (s2 / s2.sum(axis=0)).sum(axis=1)
    return _EStep(loglik, time_in, jumps, batches, starts)


def joint_loglikelihood(params: JointParams, data: JointData) -> float:
    """The log-likelihood of ``data`` under ``params`` (one forward pass)."""
    return _e_step(params, data, statistics=False).loglik
