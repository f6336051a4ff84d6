"""Simulations that check the exact costs of paper 002 and 003 by an independent route.

:func:`simulate_staleness` plays a cyclic revisit template against real Poisson change epochs of every
page and measured (or sampled) fetch durations, and measures how long each page is stale: from its first
change after a fetch completes until the next fetch of it completes. :func:`simulate_routing_losses`
routes a stream of arrivals by a periodic sequence to bufferless exponential servers with preemption
and counts the packets lost. Neither uses the formulas they check (no memorylessness shortcut, no
Laplace transform); the randomness comes only from the ``rng`` argument and the durations the caller
passes, so any law (PH, constant, MAP intervals) can be fed in. Each returns the model core's
:class:`robotctl.model.Estimate`: the ratio of totals with a confidence interval by batch means
(batches of whole cycles), with Student's t quantile.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import stdtrit

from robotctl.model import Estimate, InputError


def _estimate(num: NDArray[np.float64], den: NDArray[np.float64], level: float) -> Estimate:
    """The ratio of totals with its batch-means interval (the model core's :class:`Estimate`)."""
    b = num.size
    ratio = num / den
    value = float(num.sum() / den.sum())
    se = float(np.std(ratio, ddof=1)) / math.sqrt(b) if b > 1 else math.inf
    q = float(stdtrit(b - 1, 0.5 + level / 2.0)) if b > 1 else math.inf
    centred = ratio - ratio.mean()
    denom = float(centred @ centred)
    lag1 = float(centred[1:] @ centred[:-1]) / denom if denom > 0 else math.nan
    return Estimate(value, q * se, se, lag1)


def simulate_staleness(template: ArrayLike, change_rates: ArrayLike, fetch_times: ArrayLike, rng: np.random.Generator,
                       *, weights: ArrayLike | None = None, batches: int = 30, level: float = 0.99) -> Estimate:
    """The cost sum_i c_i r_i of repeating ``template`` (0-based page numbers), by simulation.

    ``fetch_times`` are the durations of consecutive accesses (a whole number of cycles, at least
    ``batches + 1``; the first cycle is a warm-up). Each page's changes are a Poisson process drawn on the
    whole horizon. Batch b covers a block of whole cycles; an interval between two fetches of a page
    counts in the batch where it ends.
    """
    t = np.asarray(template, dtype=np.int64)
    mu = np.asarray(change_rates, dtype=float)
    c = mu if weights is None else np.asarray(weights, dtype=float)
    x = np.asarray(fetch_times, dtype=float)
    K = t.size
    cycles = x.size // K
    if cycles < batches + 1 or x.size % K:
        raise InputError("fetch_times", f"cover {x.size / K:g} cycles", f"give a whole number >= {batches + 1}")
    done = np.cumsum(x)  # completion time of each access
    horizon = float(done[-1])
    page_of = np.tile(t, cycles)
    per_batch = (cycles - 1) // batches
    edges = done[K - 1 + np.arange(batches + 1) * per_batch * K]  # batch b: (edges[b], edges[b+1]]
    stale = np.zeros(batches)
    for i in np.unique(t):
        ends = done[page_of == i]
        n_changes = rng.poisson(mu[i] * horizon)
        changes = np.sort(rng.uniform(0.0, horizon, n_changes))
        start, stop = ends[:-1], ends[1:]  # the page is fresh at start; stale from its first change on
        first_change = np.append(changes, np.inf)[np.searchsorted(changes, start, side="right")]
        stale_time = np.clip(stop - first_change, 0.0, None)
        b = np.searchsorted(edges, stop, side="left") - 1
        ok = (b >= 0) & (b < batches)
        stale += c[i] * np.bincount(b[ok], weights=stale_time[ok], minlength=batches)
    lengths = np.diff(edges)
    return _estimate(stale, lengths, level)


def simulate_routing_losses(sequence: ArrayLike, interarrival_times: ArrayLike, service_rates: ArrayLike,
                            rng: np.random.Generator, *, batches: int = 30, level: float = 0.99) -> Estimate:
    """The fraction of packets lost when arrivals are routed cyclically by ``sequence`` (0-based servers)
    to exponential servers without buffers, where an arrival preempts the packet in service.

    ``interarrival_times`` are the gaps between consecutive arrivals (any stationary law: Poisson,
    MMPP or MAP intervals). A packet sent to server m is lost when the next packet sent to m arrives
    before its service ends; its loss counts in the batch of that next arrival.
    """
    seq = np.asarray(sequence, dtype=np.int64)
    mu = np.asarray(service_rates, dtype=float)
    gaps = np.asarray(interarrival_times, dtype=float)
    n = gaps.size
    if n < 10 * batches:
        raise InputError("interarrival_times", f"has {n} gaps", f"give at least {10 * batches}")
    arrive = np.concatenate([[0.0], np.cumsum(gaps)])[:n]
    server = np.resize(seq, n)
    batch_of = np.minimum(np.arange(n) * batches // n, batches - 1)
    lost = np.zeros(batches)
    for m in np.unique(seq):
        idx = np.flatnonzero(server == m)
        if idx.size < 2:
            continue
        service = rng.exponential(1.0 / mu[m], idx.size - 1)
        preempted = service > np.diff(arrive[idx])
        lost += np.bincount(batch_of[idx[1:]], weights=preempted.astype(float), minlength=batches)
    arrivals = np.bincount(batch_of, minlength=batches).astype(float)
    return _estimate(lost, arrivals, level)


__all__ = ["simulate_routing_losses", "simulate_staleness"]
