"""Random valid models for tests, property tests and benchmarks (one generator for all of them)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._arrivals import ModeArrivals
from ._bmap import BMAP
from ._model import Admission, QueueModel
from ._ph import PH
from ._policy import ThresholdPolicy


def random_ph(rng: np.random.Generator, order: int, *, mean: float = 1.0) -> PH:
    """A PH law of the given order with a random dense sub-generator, scaled to ``mean``."""
    S = rng.uniform(0.1, 1.0, size=(order, order))
    np.fill_diagonal(S, 0.0)
    exits = rng.uniform(0.2, 1.5, size=order)
    np.fill_diagonal(S, -(S.sum(axis=1) + exits))
    beta = rng.dirichlet(np.ones(order))
    law = PH(beta, S)
    return PH(law.beta, law.S * (law.mean / mean))


def random_bmap(rng: np.random.Generator, order: int, max_batch: int, *, rate: float = 1.0) -> BMAP:
    """A BMAP with dense D_0..D_max_batch, scaled to ``rate`` pages per second."""
    mats = [rng.uniform(0.05, 1.0, size=(order, order)) * rng.uniform(0.3, 1.0) for _ in range(max_batch + 1)]
    D0 = mats[0]
    np.fill_diagonal(D0, 0.0)
    total = sum(m.sum(axis=1) for m in mats)
    np.fill_diagonal(D0, -total)
    bmap = BMAP(tuple(mats))
    return bmap.scaled(rate / bmap.rate)


def random_model(rng: np.random.Generator, *, capacity: int = 4, arrival_order: int = 2, service_order: int = 2,
                 obsolescence_order: int | None = 2, modes: Sequence[int] = (1, 2, 3), max_batch: int = 3,
                 load: float = 1.0, admission: Admission = Admission.PARTIAL) -> QueueModel:
    """A random valid model: one random BMAP per mode with rate growing in the mode, offered load about
    ``load`` at the middle mode, PH service of mean 1 and PH obsolescence of mean 3 (or none)."""
    ms = sorted(modes)
    mid = ms[len(ms) // 2]
    base = random_bmap(rng, arrival_order, max_batch)
    per_mode = {}
    for m in ms:
        other = random_bmap(rng, arrival_order, max_batch)
        mix = BMAP(tuple(0.5 * a + 0.5 * b for a, b in zip(base.D, other.D))) if other.max_batch == base.max_batch \
            else base
        per_mode[m] = mix.scaled(load * m / mid / mix.rate / (mix.mean_batch_size if max_batch > 1 else 1.0))
    service = random_ph(rng, service_order, mean=1.0)
    obsolescence = None if obsolescence_order is None else random_ph(rng, obsolescence_order, mean=3.0)
    return QueueModel(capacity, ModeArrivals.per_mode(per_mode), service, obsolescence, admission)


def random_policy(rng: np.random.Generator, modes: Sequence[int], capacity: int) -> ThresholdPolicy:
    """A random non-increasing robots_at_level over the given modes."""
    values = sorted(rng.choice(list(modes), size=capacity + 1), reverse=True)
    return ThresholdPolicy(tuple(int(v) for v in values))
