"""Joint maximum-likelihood fit of the mode-modulated BMAP (issue 27, step 1).

Paper 000's arrivals: with l robots active the arrivals are the BMAP D^(l) = (D_0^(l), D_1^(l), ...), all
on ONE phase space; the phase carries over when the number of active robots changes. The per-mode fit
(:func:`fit_model`) measures each mode on its own clock and so loses the shared phase: under threshold
control the mode follows the queue and the queue follows the phase, and the rate seen while a mode is on
is the rate *given that the mode is on*, not the mode's rate.

This module fits all modes at once. The mode trajectory (the epochs at which the number of active robots
changed) is a known covariate; the phase is hidden. The structures offered are the paper's parsimonious
ones, on m = 1..4 common phases:

``shared``
    a phase generator Q shared by all modes, mode- and phase-dependent batch rates lambda^(l)_i and a
    batch-size law per mode: D_0^(l) = Q - diag(lambda^(l)), D_k^(l) = diag(lambda^(l)) p_k^(l)
    (a Markov-modulated batch Poisson process whose rates the mode scales freely).
``linear``
    the same with the linear rule lambda^(l) = l lambda and one batch-size law: D^(l) = paper 000's
    real-data model D_k^(l) = l diag(lambda) p_k, D_0^(l) = Q - l diag(lambda).

With ``batch_law="phase"`` the batch-size law also depends on the phase (p_{i,k}^(l)).

**Likelihood.** The observation is cut at every batch and every mode change into pieces; a piece of
length tau in mode l that ends with a batch of k pages contributes the matrix expm(D_0^(l) tau) D_k^(l), one
that ends with a mode change (or the end of the observation) expm(D_0^(l) tau). A stop longer than the
censoring bound ends a segment: the next one starts afresh at its first batch from the initial law
pi_0 (a piece ``1 pi_0`` in the product, so one product covers every segment). The likelihood is
pi_0 M_1 M_2 ... M_n 1.

**EM** (Rydén 1996 for MMPPs; Breuer 2002 and Klemm, Lindemann & Lohmann 2003 for BMAPs): the forward
vectors alpha_j = pi_0 M_1 ... M_j and backward vectors beta_j = M_{j+1} ... M_n 1 are computed by a
parallel prefix product (pairs of pieces multiplied in one numpy call per level, log2 n levels, each
product rescaled), so that a million pieces take a handful of vectorised passes rather than a Python
loop. Inside a piece the expected time in phase i and the expected number of Q-jumps i -> j come from

    Z = int_0^tau (alpha expm(D_0 u))^T (expm(D_0 (tau - u)) b) du,   b = D_k beta_{j+1}

evaluated in the eigenbasis of D_0^(l) = V diag(w) V^-1 (Van Loan's integral in closed form,
int e^{a u} e^{c (tau - u)} du = (e^{a tau} - e^{c tau}) / (a - c)), summed over the pieces of a mode and
transformed back once. The M-step is in closed form: Q_ij = N_ij / T_i, lambda^(l)_i = A^(l)_i / T^(l)_i,
p_k^(l) = A_k^(l) / A^(l). The gradient of the log-likelihood follows from the same statistics (Fisher's
identity), and the observed information by differencing it (:attr:`JointFit.covariance`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl.model import BMAP, InputError, ModeArrivals

from ._checks import float_array, freeze
from ._modeclock import ModeTrajectory

#: Structures offered (see the module docstring).
STRUCTURES = ("shared", "linear")
#: Batch-size laws offered: one per mode, or one per mode and phase.
BATCH_LAWS = ("mode", "phase")
MAX_PHASES = 4
#: Floors that keep every piece's matrix positive (an impossible observation would make the
#: likelihood 0 and the EM undefined).
_RATE_FLOOR = 1e-10
_PROB_FLOOR = 1e-12
_SEQUENTIAL_BELOW = 16


# --------------------------------------------------------------------------------------------------
# the data: pieces between batches and mode changes
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class JointData:
    """The observation cut into pieces (see the module docstring).

    Attributes
    ----------
    durations : ndarray
        Length (s) of each piece (0 for a segment restart).
    mode_index : ndarray of int
        Index into ``modes`` of the mode in force during the piece.
    sizes : ndarray of int
        Pages of the batch that ends the piece; 0 when a mode change or the end of the observation
        ends it; -1 for a segment restart after a censored stop.
    modes : tuple of int
        The modes (active robots) seen, ascending.
    n_batches : int
        Batches that end a piece (the first batch of each segment is its time origin and not counted).
    segments : int
    censored : int
        Stops removed (gaps between batches above the bound).
    exposure_s : ndarray
        Seconds spent in each mode, stops excluded.
    """

    durations: NDArray[np.float64]
    mode_index: NDArray[np.int64]
    sizes: NDArray[np.int64]
    modes: tuple[int, ...]
    n_batches: int
    segments: int
    censored: int
    exposure_s: NDArray[np.float64]

    def __post_init__(self) -> None:
        freeze(self.durations, self.mode_index, self.sizes, self.exposure_s)

    @property
    def max_batch(self) -> int:
        return int(max(1, self.sizes.max(initial=1)))

    def head(self, pieces: int) -> JointData:
        """The first ``pieces`` pieces (a shorter observation ending at a piece boundary)."""
        n = int(min(max(pieces, 1), self.durations.size))
        d, mi, k = self.durations[:n], self.mode_index[:n], self.sizes[:n]
        live = k >= 0
        exposure = np.bincount(mi[live], weights=d[live], minlength=len(self.modes)).astype(np.float64)
        return JointData(d.copy(), mi.copy(), k.copy(), self.modes, int(np.count_nonzero(k > 0)),
                         int(np.count_nonzero(k < 0)) + 1, int(np.count_nonzero(k < 0)), exposure)


def joint_data(batch_times: Any, batch_sizes: Any = None, trajectory: ModeTrajectory | None = None, *,
               mode: int = 1, censor_above_s: float = math.inf) -> JointData:
    """Cut batches and a mode trajectory into the pieces of the joint likelihood.

    Parameters
    ----------
    batch_times : array_like
        Batch epochs (s), non-decreasing, at least two.
    batch_sizes : array_like of int, optional
        Pages per batch (default 1).
    trajectory : ModeTrajectory, optional
        The mode over time; None: ``mode`` throughout.
    mode : int
        The single mode when ``trajectory`` is None.
    censor_above_s : float
        Gaps between consecutive batches longer than this are stops: the segment ends at the batch
        before and the next starts at the batch after (the phase restarts from pi_0).
    """
    t = float_array("batch_times", batch_times, min_size=2)
    if np.any(np.diff(t) < 0):
        raise InputError("batch_times", "are not in time order", "sort the batches")
    n = t.size
    if batch_sizes is None:
        k = np.ones(n, dtype=np.int64)
    else:
        kf = float_array("batch_sizes", batch_sizes)
        if kf.size != n:
            raise InputError("batch_sizes", f"has {kf.size} entries for {n} batches", "give one size per batch")
        if np.any((kf < 1) | (kf != np.round(kf))):
            raise InputError("batch_sizes", "has an entry that is not a whole number >= 1", "pages per batch")
        k = kf.astype(np.int64)
    if not censor_above_s > 0:
        raise InputError("censor_above_s", f"must be > 0, got {censor_above_s!r}", "a bound in seconds, or inf")
    if trajectory is None:
        epochs = np.array([t[0]])
        tmodes = np.array([int(mode)], dtype=np.int64)
        end = float(t[-1])
    else:
        epochs, tmodes = trajectory.epochs, trajectory.modes
        end = float(t[-1]) if trajectory.end_s is None else max(float(trajectory.end_s), float(t[-1]))
    gaps = np.diff(t)
    cut = np.flatnonzero(gaps > censor_above_s)            # the stop lies between batch cut and cut + 1
    seg_start = np.concatenate([[0], cut + 1])
    seg_end = np.concatenate([cut, [n - 1]])
    start_t, end_t = t[seg_start], t[seg_end].copy()
    end_t[-1] = end
    # boundary points: (time, kind 0 = batch, 1 = mode change / end, 2 = restart, size, segment)
    in_seg_batch = np.ones(n, dtype=bool)
    in_seg_batch[seg_start] = False
    bt = t[in_seg_batch]
    bsz = k[in_seg_batch]
    b_seg = np.searchsorted(start_t, bt, side="right") - 1
    # mode changes strictly inside a segment
    e_seg = np.searchsorted(start_t, epochs, side="right") - 1
    inside = (e_seg >= 0) & (epochs > start_t[np.maximum(e_seg, 0)]) & (epochs < end_t[np.maximum(e_seg, 0)])
    et, es = epochs[inside], e_seg[inside]
    last_end = [end] if end > t[-1] else []
    times = np.concatenate([bt, et, np.array(last_end), end_t[:-1]])
    kind = np.concatenate([np.zeros(bt.size), np.ones(et.size), np.ones(len(last_end)), np.full(cut.size, 2.0)])
    size = np.concatenate([bsz, np.zeros(et.size + len(last_end), dtype=np.int64), -np.ones(cut.size, dtype=np.int64)])
    segs = np.concatenate([b_seg, es, np.full(len(last_end), seg_start.size - 1), np.arange(cut.size)])
    order = np.lexsort((kind, times, segs))
    times, kind, size, segs = times[order], kind[order], size[order], segs[order]
    prev = np.empty_like(times)
    prev[0] = start_t[0]
    prev[1:] = times[:-1]
    # a piece that follows a restart starts at its segment's first batch
    after_restart = np.flatnonzero(kind[:-1] == 2) + 1
    prev[after_restart] = start_t[segs[after_restart]]
    durations = times - prev
    durations[kind == 2] = 0.0
    durations = np.maximum(durations, 0.0)
    # the mode in force during a piece: the one at its start (right-continuous trajectory)
    pos = np.searchsorted(epochs, prev, side="right") - 1
    piece_modes = tmodes[np.maximum(pos, 0)]
    modes = tuple(int(m) for m in np.unique(piece_modes[kind != 2]))
    mode_index = np.searchsorted(np.asarray(modes), piece_modes).astype(np.int64)
    mode_index[kind == 2] = 0
    exposure = np.bincount(mode_index[kind != 2], weights=durations[kind != 2], minlength=len(modes)).astype(np.float64)
    return JointData(durations, mode_index, size.astype(np.int64), modes, int(bt.size), int(seg_start.size),
                     int(cut.size), exposure)


# --------------------------------------------------------------------------------------------------
# parameters
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class JointParams:
    """Parameters of the mode-modulated BMAP on m common phases.

    Attributes
    ----------
    generator : ndarray (m, m)
        Q, the phase generator shared by all modes (rows sum to 0).
    modes : tuple of int
        The modes the rates below belong to.
    rates : ndarray (L, m)
        lambda^(l)_i, batches per second in mode ``modes[l]`` and phase i.
    batch_probs : ndarray (L, m, K)
        p^(l)_{i,k}: probability that a batch in mode l and phase i has k + 1 pages.
    initial : ndarray (m,)
        pi_0, the phase law at the start of each segment.
    structure : str
        ``shared`` or ``linear`` (rates[l] = modes[l] * base rates).
    batch_law : str
        ``mode`` or ``phase``.
    """

    generator: NDArray[np.float64]
    modes: tuple[int, ...]
    rates: NDArray[np.float64]
    batch_probs: NDArray[np.float64]
    initial: NDArray[np.float64]
    structure: str = "shared"
    batch_law: str = "mode"

    def __post_init__(self) -> None:
        freeze(self.generator, self.rates, self.batch_probs, self.initial)

    @property
    def phases(self) -> int:
        return int(self.generator.shape[0])

    def n_parameters(self, data: JointData | None = None) -> int:
        """Free parameters (for BIC): Q off-diagonal, the rates, the batch laws (sizes seen), pi_0."""
        m, L = self.phases, len(self.modes)
        rates = m if self.structure == "linear" else L * m
        seen = self.batch_probs > _PROB_FLOOR * 10
        if self.structure == "linear":
            per = np.count_nonzero(seen[0], axis=-1) - 1                # (m,)
            law = int(per.sum()) if self.batch_law == "phase" else int(per[0])
        else:
            per_l = np.count_nonzero(seen, axis=-1) - 1                 # (L, m)
            law = int(per_l.sum()) if self.batch_law == "phase" else int(per_l[:, 0].sum())
        return m * (m - 1) + rates + max(law, 0) + (m - 1)

    def bmap(self, mode: int) -> BMAP:
        """The BMAP of pages in ``mode`` (a mode outside ``modes``: see :meth:`mode_rates`)."""
        lam = self.mode_rates(mode)
        p = self._probs_for(mode)
        mats = [self.generator - np.diag(lam)] + [np.diag(lam * p[:, k]) for k in range(p.shape[1])]
        return BMAP.from_matrices(mats, field=f"joint.mode_{mode}")

    def mode_rates(self, mode: int) -> NDArray[np.float64]:
        """lambda^(mode). A mode outside ``modes`` takes the linear rule on the rates alone (the phase
        generator stays shared): ``linear`` from its base rates, ``shared`` from the nearest observed
        mode r_obs >= 1 with arrivals, lambda^(r) = (r / r_obs) lambda^(r_obs)."""
        if mode in self.modes:
            return np.asarray(self.rates[self.modes.index(mode)])
        if mode < 0:
            raise InputError("mode", f"is {mode}, not a number of robots >= 0", "modes count active robots")
        if self.structure == "linear":
            return np.asarray(self.rates[0] / max(self.modes[0], 1) * mode)
        seen = [(m, j) for j, m in enumerate(self.modes) if m >= 1 and float(self.rates[j].sum()) > 0]
        if not seen:
            raise InputError("mode", f"mode {mode} was not observed and no observed mode >= 1 had arrivals",
                             "record deliveries with at least one robot active")
        base, j = min(seen, key=lambda mj: (abs(mj[0] - mode), mj[0]))
        return np.asarray(self.rates[j] * (mode / base))

    def _probs_for(self, mode: int) -> NDArray[np.float64]:
        if mode in self.modes:
            return np.asarray(self.batch_probs[self.modes.index(mode)])
        seen = [(m, j) for j, m in enumerate(self.modes) if m >= 1]
        j = min(seen, key=lambda mj: (abs(mj[0] - mode), mj[0]))[1] if seen else 0
        return np.asarray(self.batch_probs[j])

    def arrivals(self, all_modes: Sequence[int] | None = None) -> ModeArrivals:
        """The model's arrivals: one BMAP per mode, all on these phases (modes without arrivals, such
        as mode 0, left out)."""
        want = self.modes if all_modes is None else tuple(int(m) for m in all_modes)
        out = {m: self.bmap(m) for m in want if m >= 1 and float(self.mode_rates(m).sum()) > 0}
        return ModeArrivals.per_mode(out)

    def stationary(self) -> NDArray[np.float64]:
        """The stationary law of Q."""
        m = self.phases
        A = np.vstack([self.generator.T, np.ones(m)])
        rhs = np.zeros(m + 1)
        rhs[-1] = 1.0
        return np.asarray(np.linalg.lstsq(A, rhs, rcond=None)[0])

    def page_rate(self, mode: int) -> float:
        """Long-run pages per second were ``mode`` in force all the time."""
        lam = self.mode_rates(mode)
        p = self._probs_for(mode)
        mean_size = p @ np.arange(1, p.shape[1] + 1)
        return float(self.stationary() @ (lam * mean_size))

    def canonical(self) -> JointParams:
        """The same model with the phases ordered by their mean rate (EM's labels are arbitrary)."""
        order = np.argsort(self.rates.mean(axis=0), kind="stable")
        return replace(self, generator=self.generator[np.ix_(order, order)], rates=self.rates[:, order],
                       batch_probs=self.batch_probs[:, order, :], initial=self.initial[order])


def _check_structure(structure: str, batch_law: str, phases: int) -> None:
    if structure not in STRUCTURES:
        raise InputError("structure", f"is {structure!r}", f"use one of {', '.join(STRUCTURES)}")
    if batch_law not in BATCH_LAWS:
        raise InputError("batch_law", f"is {batch_law!r}", f"use one of {', '.join(BATCH_LAWS)}")
    if isinstance(phases, bool) or not isinstance(phases, int) or not 1 <= phases <= MAX_PHASES:
        raise InputError("phases", f"must be a whole number 1..{MAX_PHASES}, got {phases!r}", "e.g. 2")


def initial_params(data: JointData, phases: int, *, structure: str = "shared", batch_law: str = "mode",
                   spread: float = 4.0, switch_per_batch: float = 0.05) -> JointParams:
    """A starting point for EM: each mode's rate (batches in it / seconds in it), split over the phases
    by factors from 1/sqrt(spread) to sqrt(spread) with mean 1, a phase switching about every
    1 / ``switch_per_batch`` batches, and each mode's observed batch-size law."""
    _check_structure(structure, batch_law, phases)
    m, L, K = phases, len(data.modes), data.max_batch
    ev = data.sizes > 0
    counts = np.bincount(data.mode_index[ev], minlength=L).astype(float)
    rate = counts / np.maximum(data.exposure_s, 1e-300)
    if structure == "linear":
        mm = np.maximum(np.asarray(data.modes, dtype=float), 1.0)
        base = counts.sum() / max(float((mm * data.exposure_s).sum()), 1e-300)
        rate = base * np.asarray(data.modes, dtype=float)
    factors = np.geomspace(1 / math.sqrt(spread), math.sqrt(spread), m) if m > 1 else np.ones(1)
    factors = factors / factors.mean()
    rates = np.maximum(rate[:, None] * factors[None, :], _RATE_FLOOR)
    overall = counts.sum() / max(float(data.exposure_s.sum()), 1e-300)
    q = switch_per_batch * overall
    Q = np.full((m, m), q / max(m - 1, 1))
    np.fill_diagonal(Q, 0.0)
    np.fill_diagonal(Q, -Q.sum(axis=1))
    sizes = np.zeros((L, K))
    np.add.at(sizes, (data.mode_index[ev], data.sizes[ev] - 1), 1.0)
    if structure == "linear":
        sizes[:] = sizes.sum(axis=0)
    sizes = np.where(sizes.sum(axis=1, keepdims=True) > 0, sizes, 1.0)
    p = sizes / sizes.sum(axis=1, keepdims=True)
    probs = np.repeat(p[:, None, :], m, axis=1)
    return JointParams(Q, data.modes, rates, probs, np.full(m, 1.0 / m), structure, batch_law)


# --------------------------------------------------------------------------------------------------
# the E-step machinery
# --------------------------------------------------------------------------------------------------
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


def _pieces(params: JointParams, data: JointData, eig: list[_ModeEigen]
            ) -> tuple[NDArray[Any], NDArray[np.float64], NDArray[np.float64], NDArray[Any], NDArray[Any]]:
    """Each piece's scaled matrix M_j = exp(-w0 tau) expm(D_0 tau) diag(v) in time order, its log scale,
    v (the batch weights, or ones), exp((w - w0) tau) and the shifted eigenvalues per piece. Every mode's
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
    return M, logM, v, ex, ws_p


def _e_step(params: JointParams, data: JointData, *, statistics: bool = True) -> _EStep:
    m, L, K = params.phases, len(data.modes), params.batch_probs.shape[2]
    rates = np.maximum(params.rates, _RATE_FLOOR)
    eig = [_eigen(params.generator - np.diag(rates[li])) for li in range(L)]
    M, logM, v, ex, ws_p = _pieces(params, data, eig)
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
    Q = params.generator
    for li in range(L):
        Z = np.real(Vi[li].T @ S[li] @ V[li].T)
        time_in[li] = np.maximum(np.diag(Z), 0.0)
        off = np.maximum(Z * Q, 0.0)
        np.fill_diagonal(off, 0.0)
        jumps += off
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


def _m_step(params: JointParams, data: JointData, es: _EStep) -> JointParams:
    m = params.phases
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


# --------------------------------------------------------------------------------------------------
# the fit
# --------------------------------------------------------------------------------------------------
#: A warm start (the previous window's estimate) stops after one EM step when that step raised the
#: log-likelihood by less than WARM_TOL per batch or by less than WARM_MIN_GAIN in all: the step is then
#: no significant improvement (1.92 is half the chi-square(1) 95% quantile, the likelihood-ratio test's
#: threshold for moving one parameter), so the start is already an estimate the data cannot tell from
#: the maximum. One step costs one E-step and one forward pass instead of the 3-20 E-steps to ``tol``.
WARM_TOL = 1e-5
WARM_MIN_GAIN = 1.92


@dataclass(frozen=True, eq=False)
class JointFit:
    """A joint maximum-likelihood fit (see :func:`fit_joint`).

    Attributes
    ----------
    params : JointParams
        The estimate, phases ordered by mean rate.
    loglik : float
        Log-likelihood at the estimate (the density of the batch epochs and sizes given the trajectory).
    bic : float
        -2 loglik + (free parameters) log(batches).
    n_parameters : int
    iterations : int
        EM iterations run.
    converged : bool
        The last iteration raised the log-likelihood by less than ``tol`` per batch.
    success : bool
        Converged (or stopped at ``max_iter`` with a finite likelihood that EM did not lower).
    message : str
    candidates : tuple of (phases, structure, loglik, bic)
        Every model compared (one when the phases and structure were given).
    n_batches : int
    data : JointData
    """

    params: JointParams
    loglik: float
    bic: float
    n_parameters: int
    iterations: int
    converged: bool
    success: bool
    message: str
    candidates: tuple[tuple[int, str, float, float], ...]
    n_batches: int
    data: JointData

    def model_arrivals(self, all_modes: Sequence[int] | None = None) -> ModeArrivals:
        """The fitted arrivals as the model core takes them (modes outside the data need ``linear``)."""
        return self.params.arrivals(all_modes)

    def warm_start(self, data: JointData, **kw: Any) -> JointFit:
        """Refit on new data starting from this estimate (same phases, structure and batch law)."""
        return fit_joint(data, phases=self.params.phases, structure=self.params.structure,
                         batch_law=self.params.batch_law, init=self.params, **kw)

    def gradient(self) -> NDArray[np.float64]:
        """The score at the estimate in :func:`joint_free_vector`'s coordinates (about 0 at a maximum)."""
        return joint_score(self.params, self.data)

    def covariance(self, *, step: float = 1e-4) -> NDArray[np.float64]:
        """Inverse observed information in :func:`joint_free_vector`'s coordinates (logs of the jump rates
        and batch rates), from central differences of the Fisher-identity score; the batch-size laws are
        held at their estimate."""
        return joint_covariance(self.params, self.data, step=step)


def fit_joint(data: JointData, *, phases: int | Sequence[int] = (1, 2, 3), structure: str | Sequence[str] = "shared",
              batch_law: str = "mode", init: JointParams | None = None, max_iter: int = 500, tol: float = 1e-6,
              warm_tol: float | None = WARM_TOL) -> JointFit:
    """Fit the mode-modulated BMAP by maximum likelihood (EM); choose phases and structure by BIC.

    Parameters
    ----------
    data : JointData
        From :func:`joint_data`.
    phases : int or sequence of int
        Common phases m (1..4); several: the lowest BIC wins.
    structure : str or sequence of str
        ``shared`` and/or ``linear`` (see the module docstring).
    batch_law : str
        ``mode`` or ``phase``.
    init : JointParams, optional
        Warm start (its phases and structure are used; ``phases`` and ``structure`` are ignored).
    max_iter : int
    tol : float
        Stop when an iteration raises the log-likelihood by less than ``tol`` per batch.
    warm_tol : float or None
        With ``init``: stop after the first EM step when it raised the log-likelihood by less than this
        per batch or by less than ``WARM_MIN_GAIN`` (1.92, no significant improvement): the previous
        window's estimate is already as good as the data can tell. None runs EM to ``tol`` from the warm
        start too.
    """
    if not isinstance(data, JointData):
        raise InputError("data", f"must be a JointData, got {type(data).__name__}", "build it with joint_data")
    if data.n_batches < 1:
        raise InputError("data", "has no batch after the first of each segment", "give at least two batches")
    if init is not None:
        if init.modes != data.modes:
            init = _align_modes(init, data)
        K = data.max_batch
        if init.batch_probs.shape[2] < K:
            pad = np.zeros((*init.batch_probs.shape[:2], K - init.batch_probs.shape[2]))
            init = replace(init, batch_probs=np.concatenate([init.batch_probs, pad], axis=2))
        elif init.batch_probs.shape[2] > K:
            bp = init.batch_probs[:, :, :K]
            init = replace(init, batch_probs=bp / bp.sum(axis=2, keepdims=True))
        starts = [init]
    else:
        ph = (phases,) if isinstance(phases, int) else tuple(phases)
        st = (structure,) if isinstance(structure, str) else tuple(structure)
        if not ph or not st:
            raise InputError("phases", "no candidate model", "give at least one phase count and structure")
        starts = []
        for s in st:
            for p in ph:
                _check_structure(s, batch_law, p)
                starts.append(initial_params(data, p, structure=s, batch_law=batch_law))
    results = [_em(_prefit(p0, data, tol) if init is None else p0, data, max_iter=max_iter, tol=tol,
                   warm_tol=warm_tol if init is not None else None)
               for p0 in starts]
    logn = math.log(max(data.n_batches, 2))
    cands = []
    best: JointFit | None = None
    for params, ll, it, conv in results:
        k = params.n_parameters(data)
        bic = -2.0 * ll + k * logn
        cands.append((params.phases, params.structure, ll, bic))
        ok = math.isfinite(ll)
        msg = (f"{params.structure}, {params.phases} phase(s): loglik {ll:.6g} after {it} EM iteration(s)"
               + ("" if conv else f" (not converged within {max_iter})"))
        fit = JointFit(params.canonical(), ll, bic, k, it, conv, ok, msg, (), data.n_batches, data)
        if best is None or (math.isfinite(bic) and (not math.isfinite(best.bic) or bic < best.bic)):
            best = fit
    assert best is not None
    return replace(best, candidates=tuple(cands),
                   message=best.message + (f"; chosen by BIC among {len(cands)}" if len(cands) > 1 else ""))


def _align_modes(init: JointParams, data: JointData) -> JointParams:
    """A warm start whose modes differ from the data's: modes it lacks take the nearest mode's rates
    (scaled by the mode ratio) and batch law."""
    known = list(init.modes)
    rates, probs = [], []
    for mode in data.modes:
        if mode in known:
            j = known.index(mode)
            rates.append(init.rates[j])
        else:
            j = int(np.argmin([abs(mode - k) for k in known]))
            ratio = mode / known[j] if known[j] > 0 else 1.0
            rates.append(init.rates[j] * ratio)
        probs.append(init.batch_probs[j])
    return replace(init, modes=data.modes, rates=np.maximum(np.asarray(rates), _RATE_FLOOR),
                   batch_probs=np.asarray(probs))


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


def joint_loglikelihood(params: JointParams, data: JointData) -> float:
    """The log-likelihood of ``data`` under ``params`` (one forward pass)."""
    return _e_step(params, data, statistics=False).loglik


# --------------------------------------------------------------------------------------------------
# score and observed information
# --------------------------------------------------------------------------------------------------
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
