"""Random valid models for tests, property tests and benchmarks (one generator for all of them)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._arrivals import ModeArrivals
from ._bmap import BMAP
from ._model import Admission, Costs, QueueModel
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


#: The one-robot arrival process of :func:`fleet_model`: a correlated MAP(2) of batch epochs with batches
#: of 1-4 pages (mean 2).
FLEET_D0 = ((-3.0, 1.0), (0.5, -1.0))
FLEET_D1 = ((1.8, 0.2), (0.1, 0.4))
FLEET_BATCHES = (0.4, 0.3, 0.2, 0.1)
#: A two-phase useful life that does not lump (exit rates 0.2 and 0.1): mean about 7 s.
TWO_PHASE_LIFE = ((0.3, 0.7), ((-0.6, 0.4), (0.1, -0.2)))


def fleet_model(robots: int, capacity: int, *, obsolescence: str | PH = "exponential", load: float = 1.5,
                service_mean: float = 0.5, life_mean: float | None = None) -> tuple[QueueModel, Costs]:
    """A crawler fleet of ``robots`` identical robots (modes 1..N, the linear rule: r robots deliver r
    times the one-robot BMAP) feeding an indexer of capacity K, and costs with a non-trivial optimum.

    Two-phase arrivals (:data:`FLEET_D0`, :data:`FLEET_D1`, batches of 1-4 pages) and two-phase service
    (paper 000's (beta, S), scaled to ``service_mean``); all N robots offer ``load`` times what the
    indexer can take. ``obsolescence``: ``exponential`` (mean ``life_mean``, default 20 service times),
    ``paper`` (paper 000's two-phase law, which lumps exactly to an exponential one), ``two-phase``
    (:data:`TWO_PHASE_LIFE`, which does not lump), ``erlang3``, ``h3`` (hyper-exponential, three phases),
    ``deadline`` (a deterministic life of that mean, as the model's Erlang law; the simulator draws the
    constant), or a PH law. Costs follow paper 000's example, with the
    price of a robot divided so that the whole fleet costs as much as 4 robots there.
    """

    one = BMAP.from_map(np.array(FLEET_D0), np.array(FLEET_D1), FLEET_BATCHES)
    service = PH(np.array([0.4, 0.6]), np.array([[-3.0, 1.0], [2.0, -3.0]]))
    service = PH(service.beta, service.S * (service.mean / service_mean))
    base = one.scaled(load / (robots * service_mean) / one.rate)
    arrivals = ModeArrivals.linear(base, range(1, robots + 1))
    mean = 20.0 * service_mean if life_mean is None else life_mean
    if isinstance(obsolescence, PH):
        law = obsolescence
    elif obsolescence == "exponential":
        law = PH.exponential(1.0 / mean)
    elif obsolescence == "erlang3":
        law = PH.erlang(3, 3.0 / mean)
    elif obsolescence == "h3":  # three phases that never mix: the hardest case for the ordered-head ladder
        law = PH.hyperexponential([0.5, 0.3, 0.2], [1.0, 0.5, 0.25])
        law = PH(law.beta, law.S * (law.mean / mean))
    elif obsolescence == "deadline":
        from ._deadline import deadline_law

        costs = Costs(loss=5.0, obsolescence=10.0, response=2.0, robot=80.0 / robots, starvation=300.0)
        return QueueModel(capacity, arrivals, service, deadline_law(mean), Admission.PARTIAL, mean), costs
    elif obsolescence in ("paper", "two-phase"):
        gamma, G = (np.array([0.3, 0.7]), np.array([[-0.6, 0.4], [0.1, -0.3]])) if obsolescence == "paper" else (
            np.array(TWO_PHASE_LIFE[0]), np.array(TWO_PHASE_LIFE[1]))
        law = PH(gamma, G)
        law = PH(law.beta, law.S * (law.mean / mean))
    else:
        raise ValueError(f"unknown obsolescence {obsolescence!r}")
    costs = Costs(loss=5.0, obsolescence=10.0, response=2.0, robot=80.0 / robots, starvation=300.0)
    return QueueModel(capacity, arrivals, service, law, Admission.PARTIAL), costs
