"""The joint fit's data and parameters (issue 27; the fit is :mod:`robotctl.fitting._joint`).

:class:`JointData` is the observation cut into pieces at every batch and every mode change
(:func:`joint_data`); :class:`JointParams` the mode-modulated BMAP on m common phases in the structures
``shared``, ``linear`` and ``general``; :func:`initial_params` EM's starting point.
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
STRUCTURES = ("shared", "linear", "general")
#: Most phases the ``general`` structure is offered with by the ``auto`` search (its parameters grow as
#: modes x sizes x m^2, and BIC seldom affords more on a refit window).
GENERAL_MAX_PHASES = 3
#: Batch-size laws offered: one per mode, or one per mode and phase.
BATCH_LAWS = ("mode", "phase")
MAX_PHASES = 4
#: Floors that keep every piece's matrix positive (an impossible observation would make the
#: likelihood 0 and the EM undefined).
_RATE_FLOOR = 1e-10
_PROB_FLOOR = 1e-12


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
        ``shared``, ``linear`` (rates[l] = modes[l] * base rates) or ``general`` (below).
    batch_law : str
        ``mode`` or ``phase`` (``general``: ``mode``, unused: its matrices carry the sizes).
    hidden : ndarray (L, m, m), optional
        ``general`` only: H^(l), the rates of phase moves without an arrival in mode l (zero diagonal);
        D_0^(l) = H^(l) - diag(H^(l) 1 + lambda^(l)).
    arrival : ndarray (L, K, m, m), optional
        ``general`` only: D_{k+1}^(l), the rates of batches of k + 1 pages that move the phase i -> j in
        mode l. ``rates`` and ``batch_probs`` are then its row sums (lambda^(l)_i = sum_kj D_k^(l)_ij and
        p^(l)_{i,k} = D_k^(l) 1 / lambda^(l)_i), and ``generator`` the average over the modes of
        H^(l) - diag(H^(l) 1) + sum_k D_k^(l) (each mode's own phase generator is its BMAP's).
    """

    generator: NDArray[np.float64]
    modes: tuple[int, ...]
    rates: NDArray[np.float64]
    batch_probs: NDArray[np.float64]
    initial: NDArray[np.float64]
    structure: str = "shared"
    batch_law: str = "mode"
    hidden: NDArray[np.float64] | None = None
    arrival: NDArray[np.float64] | None = None

    def __post_init__(self) -> None:
        freeze(self.generator, self.rates, self.batch_probs, self.initial)
        if self.hidden is not None:
            freeze(self.hidden)
        if self.arrival is not None:
            freeze(self.arrival)

    def d0(self) -> NDArray[np.float64]:
        """D_0^(l) for every observed mode, (L, m, m)."""
        if self.hidden is not None and self.arrival is not None:
            out = self.hidden - np.einsum("lij->li", self.hidden)[:, :, None] * np.eye(self.phases)
            return np.asarray(out - np.einsum("li,ij->lij", self.arrival.sum(axis=(1, 3)), np.eye(self.phases)))
        lam = np.maximum(self.rates, _RATE_FLOOR)
        return np.asarray(self.generator[None, :, :] - np.einsum("li,ij->lij", lam, np.eye(self.phases)))

    @property
    def phases(self) -> int:
        return int(self.generator.shape[0])

    def n_parameters(self, data: JointData | None = None) -> int:
        """Free parameters (for BIC): Q off-diagonal, the rates, the batch laws (sizes seen), pi_0."""
        m, L = self.phases, len(self.modes)
        if self.arrival is not None:
            sizes_seen = np.count_nonzero(self.arrival.sum(axis=(2, 3)) > _PROB_FLOOR * 10)     # per mode
            return L * m * (m - 1) + int(sizes_seen) * m * m + (m - 1)
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
        if self.hidden is not None and self.arrival is not None:
            if mode < 0:
                raise InputError("mode", f"is {mode}, not a number of robots >= 0", "modes count active robots")
            j, scale = self._nearest(mode)
            d0 = self.d0()[j]
            arr = self.arrival[j] * scale
            d0 = d0 + (1.0 - scale) * np.diag(self.arrival[j].sum(axis=(0, 2)))
            return BMAP.from_matrices([d0, *arr], field=f"joint.mode_{mode}")
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

    def _nearest(self, mode: int) -> tuple[int, float]:
        """The observed mode whose matrices ``mode`` takes (itself, else the nearest with arrivals) and the
        factor mode / r_obs that scales its arrival matrices (``general``)."""
        if mode in self.modes:
            return self.modes.index(mode), 1.0
        seen = [(m, j) for j, m in enumerate(self.modes) if m >= 1 and float(self.rates[j].sum()) > 0]
        if not seen:
            raise InputError("mode", f"mode {mode} was not observed and no observed mode >= 1 had arrivals",
                             "record deliveries with at least one robot active")
        base, j = min(seen, key=lambda mj: (abs(mj[0] - mode), mj[0]))
        return j, mode / base

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
        if self.arrival is not None:
            return self.bmap(mode).rate if float(self.mode_rates(mode).sum()) > 0 else 0.0
        lam = self.mode_rates(mode)
        p = self._probs_for(mode)
        mean_size = p @ np.arange(1, p.shape[1] + 1)
        return float(self.stationary() @ (lam * mean_size))

    def canonical(self) -> JointParams:
        """The same model with the phases ordered by their mean rate (EM's labels are arbitrary)."""
        order = np.argsort(self.rates.mean(axis=0), kind="stable")
        if self.hidden is not None and self.arrival is not None:
            return replace(self, generator=self.generator[np.ix_(order, order)], rates=self.rates[:, order],
                           batch_probs=self.batch_probs[:, order, :], initial=self.initial[order],
                           hidden=self.hidden[:, order][:, :, order],
                           arrival=self.arrival[:, :, order][:, :, :, order])
        return replace(self, generator=self.generator[np.ix_(order, order)], rates=self.rates[:, order],
                       batch_probs=self.batch_probs[:, order, :], initial=self.initial[order])


def general_params(modes: tuple[int, ...], hidden: NDArray[np.float64], arrival: NDArray[np.float64],
                   initial: NDArray[np.float64]) -> JointParams:
    """The ``general`` structure's JointParams from H^(l) (L, m, m) and D_k^(l) (L, K, m, m), with the
    derived ``rates``, ``batch_probs`` and ``generator`` (see :class:`JointParams`)."""
    m = hidden.shape[1]
    H = np.array(hidden, dtype=float)
    H[:, np.arange(m), np.arange(m)] = 0.0
    D = np.maximum(np.asarray(arrival, dtype=float), 0.0)
    rowk = D.sum(axis=3)                                             # (L, K, m)
    rates = rowk.sum(axis=1)                                         # (L, m)
    probs = np.transpose(rowk, (0, 2, 1)) / np.maximum(rates, 1e-300)[:, :, None]
    probs = np.where(rates[:, :, None] > 0, probs, 1.0 / D.shape[1])
    G = H + D.sum(axis=1)
    G = G - np.einsum("lij->li", G)[:, :, None] * np.eye(m)
    return JointParams(G.mean(axis=0), modes, rates, probs, np.asarray(initial, dtype=float), "general", "mode",
                       H, D)


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
    if structure == "general":
        base = initial_params(data, phases, structure="shared", batch_law="mode", spread=spread,
                              switch_per_batch=switch_per_batch)
        return general_from(base)
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


def general_from(params: JointParams, *, moving: float = 0.2) -> JointParams:
    """A ``general`` starting point from a ``shared``/``linear`` estimate: the hidden moves are Q's, and
    each batch keeps the phase with probability 1 - ``moving`` and moves to each other phase with
    ``moving`` / (m - 1) (EM keeps an exact zero at zero, so every move starts possible)."""
    m, L = params.phases, len(params.modes)
    lam = np.maximum(params.rates, _RATE_FLOOR)                      # (L, m)
    p = np.maximum(params.batch_probs, _PROB_FLOOR)                  # (L, m, K)
    p = p / p.sum(axis=2, keepdims=True)
    move = np.full((m, m), moving / max(m - 1, 1)) if m > 1 else np.zeros((1, 1))
    np.fill_diagonal(move, 1.0 - moving if m > 1 else 1.0)
    D = np.einsum("li,lik,ij->lkij", lam, p, move)
    H = np.repeat(params.generator[None, :, :], L, axis=0).copy()
    H[:, np.arange(m), np.arange(m)] = 0.0
    return general_params(params.modes, H, D, params.initial)
