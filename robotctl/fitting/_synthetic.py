"""Synthetic delivery traces with known structure, for round-trip tests and benchmarks (one generator for
both). Pure: arrays out, randomness only from the ``rng`` argument."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from robotctl.model import BMAP, InputError

from ._checks import freeze


def sample_bmap(bmap: BMAP, n: int, rng: np.random.Generator) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """``n`` consecutive intervals between batch epochs of a BMAP in steady state, and the batch sizes.

    The phase at the start is drawn from the stationary phase distribution just after a batch, so the
    intervals are a stationary sequence (their moments and lag correlations are the BMAP's). The phase
    chain is simulated jump by jump.
    """
    if n < 1:
        raise InputError("n", f"must be >= 1, got {n}", "ask for at least one interval")
    W = bmap.order
    kmax = bmap.max_batch
    out_rate = -np.diag(bmap.D0)
    # outcomes of a jump from phase i: (batch size k, next phase j), k = 0 for no arrival
    probs = np.zeros((W, kmax + 1, W))
    for k, Dk in enumerate(bmap.D):
        M = Dk.copy()
        if k == 0:
            np.fill_diagonal(M, 0.0)
        probs[:, k, :] = M / out_rate[:, None]
    cum = np.cumsum(probs.reshape(W, -1), axis=1)
    cum[:, -1] = 1.0
    cum_rows = [row.tolist() for row in cum]
    theta = bmap.stationary
    after = theta @ (bmap.generator - bmap.D0)
    phase = int(rng.choice(W, p=after / after.sum()))
    inv_rate = (1.0 / out_rate).tolist()
    intervals = np.empty(n)
    sizes = np.empty(n, dtype=np.int64)
    chunk = 4096
    expo = rng.exponential(size=chunk).tolist()
    unif = rng.random(chunk).tolist()
    pos = 0
    import bisect
    for i in range(n):
        t = 0.0
        while True:
            if pos == chunk:
                expo = rng.exponential(size=chunk).tolist()
                unif = rng.random(chunk).tolist()
                pos = 0
            t += expo[pos] * inv_rate[phase]
            idx = bisect.bisect_right(cum_rows[phase], unif[pos])
            pos += 1
            k, phase = divmod(min(idx, (kmax + 1) * W - 1), W)
            if k > 0:
                intervals[i] = t
                sizes[i] = k
                break
    return intervals, sizes


@dataclass(frozen=True, eq=False)
class SyntheticTrace:
    """A delivery trace with known ingredients.

    Attributes
    ----------
    times : ndarray
        Delivery timestamps (s), non-decreasing.
    pages : ndarray of int
        Pages per delivery.
    bytes : ndarray of int
        Content bytes per delivery (the sum over its pages).
    page_sizes : ndarray
        Size of every page (bytes), in delivery order.
    batch_sizes : ndarray of int
        True batch sizes.
    intervals : ndarray
        True intervals between batch epochs, stops excluded.
    stops : ndarray
        The stop gaps inserted (s).
    max_intra_gap, min_interval : float
        Largest gap inside a batch and smallest interval between batches: a resolution between them
        separates batches exactly.
    """

    times: NDArray[np.float64]
    pages: NDArray[np.int64]
    bytes: NDArray[np.int64]
    page_sizes: NDArray[np.float64]
    batch_sizes: NDArray[np.int64]
    intervals: NDArray[np.float64]
    stops: NDArray[np.float64]
    max_intra_gap: float
    min_interval: float

    def __post_init__(self) -> None:
        freeze(self.times, self.pages, self.bytes, self.page_sizes, self.batch_sizes, self.intervals, self.stops)


def modulated_intervals(n: int, rng: np.random.Generator, *, level_means: tuple[float, ...] = (0.2, 0.8, 3.2, 12.8),
                        switch: float = 0.015, shape: int = 3) -> NDArray[np.float64]:
    """Intervals X_j = Gamma(shape, m_{s_j} / shape) with s_j a Markov chain on the levels that keeps its
    level with probability 1 - ``switch`` and else jumps to one of the others, uniformly.

    This is a MAP of order len(levels) * shape. Its lag-k correlation is
    lambda^k Var(m) / (E[m^2]/shape + Var(m)) with lambda = 1 - switch * n_levels / (n_levels - 1): with the
    defaults rho_1 ~ 0.62 fading as 0.98^k, beyond the reach of any MAP(2) (< 1/2).
    """
    levels = np.asarray(level_means, dtype=float)
    L = levels.size
    # run lengths of the level chain: geometric with success probability `switch`
    runs: list[NDArray[np.int64]] = []
    total = 0
    while total < n:
        r = rng.geometric(switch, size=max(16, int(1.5 * n * switch) + 16))
        runs.append(r)
        total += int(r.sum())
    lengths = np.concatenate(runs)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), n)) + 1]
    first = int(rng.integers(L))
    steps = rng.integers(1, L, size=lengths.size - 1)
    seq = np.concatenate([[first], (first + np.cumsum(steps)) % L])
    level = np.repeat(seq, lengths)[:n]
    return np.asarray(rng.gamma(shape, 1.0, size=n) * levels[level] / shape)


def paper_like_trace(rng: np.random.Generator, n_batches: int = 50_000, *, n_stops: int = 6,
                     max_batch: int = 8, size_scv: float = 85.0, mean_size_bytes: float = 40_000.0,
                     multi_page_share: float = 0.1) -> SyntheticTrace:
    """A trace of the kind paper 000 fitted by hand: batches of 1..``max_batch`` pages (P(k) ~ 0.75^k),
    intervals between batches with lag-1 correlation near 0.6 fading slowly (see
    :func:`modulated_intervals`), ``n_stops`` stop gaps of 2-6 hours, and lognormal page sizes with
    squared coefficient of variation ``size_scv``.

    A batch is delivered as one delivery per page, 1-100 microseconds apart, except that with probability
    ``multi_page_share`` it comes as a single delivery carrying all its pages.
    """
    if n_batches < 2:
        raise InputError("n_batches", f"must be >= 2, got {n_batches}", "ask for more batches")
    intervals = modulated_intervals(n_batches - 1, rng)
    w = 0.75 ** np.arange(max_batch)
    sizes = rng.choice(np.arange(1, max_batch + 1), size=n_batches, p=w / w.sum()).astype(np.int64)
    gaps = intervals.copy()
    stops = rng.uniform(2 * 3600.0, 6 * 3600.0, size=n_stops)
    at = rng.choice(gaps.size, size=min(n_stops, gaps.size), replace=False)
    gaps[at] += stops[: at.size]
    epochs = np.concatenate([[0.0], np.cumsum(gaps)])
    single = rng.random(n_batches) < multi_page_share
    per_batch = np.where(single, 1, sizes)  # deliveries per batch
    n_del = int(per_batch.sum())
    batch_of = np.repeat(np.arange(n_batches), per_batch)
    first = np.concatenate([[0], np.cumsum(per_batch)[:-1]])
    offset_idx = np.arange(n_del) - np.repeat(first, per_batch)
    jitter = rng.uniform(1e-6, 1e-4, size=n_del)
    jitter[offset_idx == 0] = 0.0
    # cumulative jitter inside each batch
    cj = np.cumsum(jitter)
    base = np.repeat(cj[first], per_batch)
    times = epochs[batch_of] + (cj - base)
    pages = np.where(np.repeat(single, per_batch), np.repeat(sizes, per_batch), 1).astype(np.int64)
    sigma2 = math.log(1.0 + size_scv)
    mu = math.log(mean_size_bytes) - sigma2 / 2.0
    page_sizes = rng.lognormal(mu, math.sqrt(sigma2), size=int(pages.sum()))
    owner = np.repeat(np.arange(n_del), pages)
    bytes_ = np.rint(np.bincount(owner, weights=page_sizes, minlength=n_del)).astype(np.int64)
    intra = np.diff(times)[np.diff(batch_of) == 0]
    return SyntheticTrace(times, pages, bytes_, page_sizes, sizes, intervals, stops,
                          float(intra.max()) if intra.size else 0.0, float(intervals.min()))


@dataclass(frozen=True, eq=False)
class SwitchingTrace:
    """Poisson deliveries per mode under a mode trajectory drawn independently of them.

    Attributes
    ----------
    times : ndarray
        Delivery times (s), one page each.
    modes : ndarray of int
        The mode in force at each delivery.
    epochs, trajectory_modes : ndarray
        The trajectory: the mode ``trajectory_modes[i]`` from ``epochs[i]`` on (``epochs[0]`` = 0).
    seconds : float
        End of the observation.
    rates : tuple of float
        Pages per second in each mode 1..len(rates) (the truth).
    """

    times: NDArray[np.float64]
    modes: NDArray[np.int64]
    epochs: NDArray[np.float64]
    trajectory_modes: NDArray[np.int64]
    seconds: float
    rates: tuple[float, ...]

    def __post_init__(self) -> None:
        freeze(self.times, self.modes, self.epochs, self.trajectory_modes)


def switching_poisson_trace(rng: np.random.Generator, seconds: float, rates: tuple[float, ...], *,
                            switch_rate: float) -> SwitchingTrace:
    """Mode r (1-based) delivers single pages as a Poisson process of rate ``rates[r - 1]`` while it is in
    force; the mode changes at the epochs of its own Poisson process of rate ``switch_rate``, to one of the
    other modes uniformly. The switches do not depend on the deliveries, so the truth is exactly Poisson
    per mode on each mode's clock (and in real time inside each stay)."""
    if len(rates) < 2 or min(rates) <= 0 or not switch_rate > 0 or not seconds > 0:
        raise InputError("rates", "needs at least two positive rates, a positive switch_rate and seconds",
                         "e.g. rates=(1.0, 2.0, 3.0), switch_rate=1.0, seconds=3000")
    n = int(rng.poisson(switch_rate * seconds))
    epochs = np.concatenate([[0.0], np.sort(rng.uniform(0.0, seconds, n))])
    steps = rng.integers(1, len(rates), n)
    modes = (int(rng.integers(len(rates))) + np.concatenate([[0], np.cumsum(steps)])) % len(rates)
    stays = np.diff(np.append(epochs, seconds))
    counts = rng.poisson(np.asarray(rates)[modes] * stays)
    start = np.repeat(epochs, counts)
    times = start + rng.uniform(0.0, 1.0, int(counts.sum())) * np.repeat(stays, counts)
    order = np.argsort(times, kind="stable")
    return SwitchingTrace(times[order], (np.repeat(modes, counts) + 1)[order].astype(np.int64), epochs,
                          (modes + 1).astype(np.int64), float(seconds), tuple(float(r) for r in rates))


@dataclass(frozen=True, eq=False)
class ThresholdTrace:
    """Batches of a mode-modulated BMAP whose mode a queue-length policy sets (issue 27's truth).

    Attributes
    ----------
    batch_times, batch_sizes, batch_modes : ndarray
        Each batch's epoch, pages (as offered, before admission) and the mode in force.
    epochs, trajectory_modes : ndarray
        The mode trajectory: ``trajectory_modes[i]`` from ``epochs[i]`` on (``epochs[0]`` = 0).
    seconds : float
        End of the observation.
    mean_queue : float
        Time-average pages in the system.
    lost_pages : int
        Pages refused because the buffer was full.
    slice_s : float
        Length of the slices below (0: none recorded).
    slice_lost, slice_robot_s, slice_empty_s : ndarray
        Per slice of ``slice_s`` seconds: pages lost, robot-seconds active, seconds with the system empty.
    """

    batch_times: NDArray[np.float64]
    batch_sizes: NDArray[np.int64]
    batch_modes: NDArray[np.int64]
    epochs: NDArray[np.float64]
    trajectory_modes: NDArray[np.int64]
    seconds: float
    mean_queue: float
    lost_pages: int
    slice_s: float = 0.0
    slice_lost: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    slice_robot_s: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    slice_empty_s: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        freeze(self.batch_times, self.batch_sizes, self.batch_modes, self.epochs, self.trajectory_modes,
               self.slice_lost, self.slice_robot_s, self.slice_empty_s)


def threshold_trace(rng: np.random.Generator, seconds: float, generator: NDArray[np.float64],
                    rates: dict[int, NDArray[np.float64]], batch_probs: dict[int, NDArray[np.float64]], *,
                    service_rate: float, capacity: int, mode_of_queue: tuple[int, ...],
                    slice_s: float = 0.0) -> ThresholdTrace:
    """Simulate (Gillespie) one hidden phase with generator ``generator`` shared by all modes; in mode l
    and phase i batches arrive at rate ``rates[l][i]`` with ``batch_probs[l][k-1]`` of k pages; one
    exponential server of ``service_rate`` pages/s, ``capacity`` pages in the system (partial admission),
    and the mode ``mode_of_queue[q]`` with q pages in the system (a threshold policy). Independent of the
    fitting code: a direct event-by-event simulation. With ``slice_s`` > 0 it also records, per slice of
    time, the pages lost, the robot-seconds and the empty seconds (the observed cost's ingredients)."""
    if len(mode_of_queue) != capacity + 1:
        raise InputError("mode_of_queue", f"needs {capacity + 1} entries (q = 0..capacity)", "one mode per q")
    Q = np.asarray(generator, dtype=float)
    m = Q.shape[0]
    out_rate = -np.diag(Q)
    jump_p = [np.where(np.arange(m) == i, 0.0, Q[i]) / max(out_rate[i], 1e-300) for i in range(m)]
    phase = int(rng.choice(m, p=np.full(m, 1.0 / m)))
    q, t = 0, 0.0
    mode = mode_of_queue[0]
    epochs, tmodes = [0.0], [mode]
    bt: list[float] = []
    bs: list[int] = []
    bm: list[int] = []
    area, lost = 0.0, 0
    n_slices = math.ceil(seconds / slice_s) if slice_s > 0 else 0
    s_lost, s_robot, s_empty = np.zeros(n_slices), np.zeros(n_slices), np.zeros(n_slices)

    def spread(t0: float, t1: float, robots: int, empty: bool) -> None:
        while t0 < t1:
            j = min(int(t0 / slice_s), n_slices - 1)
            end = min(t1, (j + 1) * slice_s) if j < n_slices - 1 else t1
            s_robot[j] += robots * (end - t0)
            if empty:
                s_empty[j] += end - t0
            t0 = end

    chunk = 65536
    expo, unif = rng.exponential(1.0, chunk), rng.uniform(0.0, 1.0, chunk)
    pos = 0
    while True:
        if pos >= chunk - 2:
            expo, unif = rng.exponential(1.0, chunk), rng.uniform(0.0, 1.0, chunk)
            pos = 0
        lam = float(rates[mode][phase]) if mode in rates else 0.0
        mu = service_rate if q > 0 else 0.0
        total = out_rate[phase] + lam + mu
        dt = expo[pos] / total
        if t + dt >= seconds:
            area += q * (seconds - t)
            if n_slices:
                spread(t, seconds, mode, q == 0)
            break
        area += q * dt
        if n_slices:
            spread(t, t + dt, mode, q == 0)
        t += dt
        u = unif[pos] * total
        pos += 1
        if u < out_rate[phase]:
            phase = int(np.searchsorted(np.cumsum(jump_p[phase]), unif[pos] * (1 - 1e-12), side="right"))
            pos += 1
            continue
        if u < out_rate[phase] + lam:
            p = batch_probs[mode]
            k = int(np.searchsorted(np.cumsum(p), unif[pos] * (1 - 1e-12), side="right")) + 1
            pos += 1
            bt.append(t)
            bs.append(k)
            bm.append(mode)
            admitted = min(k, capacity - q)
            lost += k - admitted
            if n_slices:
                s_lost[min(int(t / slice_s), n_slices - 1)] += k - admitted
            q += admitted
        else:
            q -= 1
        new_mode = mode_of_queue[q]
        if new_mode != mode:
            mode = new_mode
            epochs.append(t)
            tmodes.append(mode)
    return ThresholdTrace(np.asarray(bt), np.asarray(bs, dtype=np.int64), np.asarray(bm, dtype=np.int64),
                          np.asarray(epochs), np.asarray(tmodes, dtype=np.int64), float(seconds),
                          area / seconds, lost, float(slice_s), s_lost, s_robot, s_empty)


def shared_phase_switching_trace(rng: np.random.Generator, seconds: float, generator: NDArray[np.float64],
                                 rates: NDArray[np.float64], batch_probs: NDArray[np.float64], *,
                                 switch_rate: float) -> ThresholdTrace:
    """One hidden phase (generator ``generator``) shared by modes 1..L that change at the epochs of their own
    Poisson process of rate ``switch_rate`` (to another mode, uniformly); in mode l and phase i batches
    arrive at ``rates[l - 1, i]`` per second with ``batch_probs[k - 1]`` of k pages. Vectorised (for the
    benchmark's 10^6 batches); the modes do not follow a queue here (``mean_queue`` and ``lost_pages`` 0)."""
    Q = np.asarray(generator, dtype=float)
    lam = np.asarray(rates, dtype=float)
    m, L = Q.shape[0], lam.shape[0]
    out = -np.diag(Q)
    # the phase path: embedded jumps and exponential sojourns
    n_jumps = int(2 * seconds * out.max()) + 16
    phase_path = np.empty(n_jumps, dtype=np.int64)
    phase_path[0] = int(rng.integers(m))
    jump = np.where(np.eye(m, dtype=bool), 0.0, Q) / out[:, None]
    cum = np.cumsum(jump, axis=1)
    u = rng.uniform(size=n_jumps)
    for j in range(1, n_jumps):
        phase_path[j] = int(np.searchsorted(cum[phase_path[j - 1]], u[j] * (1 - 1e-12), side="right"))
    stays = rng.exponential(1.0, n_jumps) / out[phase_path]
    phase_epochs = np.concatenate([[0.0], np.cumsum(stays)[:-1]])
    keep = phase_epochs < seconds
    phase_epochs, phase_path = phase_epochs[keep], phase_path[keep]
    n = int(rng.poisson(switch_rate * seconds))
    mode_epochs = np.concatenate([[0.0], np.sort(rng.uniform(0.0, seconds, n))])
    steps = rng.integers(1, L, n) if L > 1 else np.zeros(n, dtype=np.int64)
    modes0 = (int(rng.integers(L)) + np.concatenate([[0], np.cumsum(steps)])) % L
    # stretches of constant (phase, mode)
    cuts = np.unique(np.concatenate([phase_epochs, mode_epochs]))
    ph = phase_path[np.searchsorted(phase_epochs, cuts, side="right") - 1]
    md = modes0[np.searchsorted(mode_epochs, cuts, side="right") - 1]
    length = np.diff(np.append(cuts, seconds))
    counts = rng.poisson(lam[md, ph] * length)
    start = np.repeat(cuts, counts)
    times = np.sort(start + rng.uniform(0.0, 1.0, int(counts.sum())) * np.repeat(length, counts))
    sizes = rng.choice(np.arange(1, len(batch_probs) + 1), size=times.size, p=np.asarray(batch_probs))
    bmodes = modes0[np.searchsorted(mode_epochs, times, side="right") - 1] + 1
    return ThresholdTrace(times, sizes.astype(np.int64), bmodes.astype(np.int64), mode_epochs,
                          (modes0 + 1).astype(np.int64), float(seconds), 0.0, 0)
