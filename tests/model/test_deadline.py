"""Issue 26: a deterministic useful life (deadline) in model files, its Erlang law, its stated error, and the
simulator's true deadline as the independent check."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.integrate as si
import scipy.stats as ss

from robotctl._errors import InputError
from robotctl.model import BMAP, PH, ModeArrivals, QueueModel, ThresholdPolicy, model_from_dict, model_to_dict, solve
from robotctl.model._deadline import deadline_error, deadline_law
from robotctl.model._simulate import simulate_events

BASE = {"capacity": 3, "arrivals": {"per_mode": {"1": [[[-1.0]], [[1.0]]]}}, "service": {"rate": 1.2}}


def test_model_file_deadline_round_trips() -> None:
    model = model_from_dict({**BASE, "obsolescence": {"deadline": 4, "phases": 5}})
    assert model.deadline == 4.0 and model.obsolescence is not None and model.obsolescence.order == 5
    assert model.obsolescence.mean == pytest.approx(4.0)
    again = model_from_dict(model_to_dict(model))
    assert again.deadline == 4.0 and np.allclose(again.obsolescence.S, model.obsolescence.S)
    default = model_from_dict({**BASE, "obsolescence": {"deadline": 10}})
    assert default.obsolescence is not None and default.obsolescence.order == 3


@pytest.mark.parametrize(("obs", "field"), [({"deadline": 0}, "model.obsolescence.deadline"),
                                            ({"deadline": "10"}, "model.obsolescence.deadline"),
                                            ({"deadline": 10, "phases": 0}, "model.obsolescence.phases"),
                                            ({"deadline": 10, "phases": 2.5}, "model.obsolescence.phases"),
                                            ({"deadline": 10, "rate": 1}, "model.obsolescence.rate")])
def test_bad_deadlines_name_the_field(obs: dict, field: str) -> None:
    with pytest.raises(InputError) as exc:
        model_from_dict({**BASE, "obsolescence": obs})
    assert exc.value.field == field


@pytest.mark.parametrize("k", [1, 3, 10, 40])
def test_stated_error_is_the_mean_absolute_deviation(k: int) -> None:
    d = 7.0
    law = ss.gamma(a=k, scale=d / k)
    numeric, _ = si.quad(lambda x: abs(x - d) * law.pdf(x), 0, d, limit=200)
    tail, _ = si.quad(lambda x: abs(x - d) * law.pdf(x), d, np.inf, limit=200)
    assert deadline_error(d, k) == pytest.approx(numeric + tail, rel=1e-7)
    assert deadline_law(d, k).mean == pytest.approx(d)


def test_simulated_deadline_agrees_with_the_erlang_chains_extrapolated() -> None:
    """The simulator draws the true constant. The exact chains with k Erlang phases (K = 3) approach it like
    1/k: extrapolated from k = 20 and 40 (2 p(40) - p(20)) they agree with the simulation within its
    interval, while the three-phase law is visibly off: the stated error is real."""
    arrivals = ModeArrivals.per_mode({1: BMAP.poisson(0.9), 2: BMAP.poisson(1.8)})
    policy = ThresholdPolicy.from_thresholds((2, 1), (1,), 3)
    d = 2.0
    true = QueueModel(3, arrivals, PH.exponential(1.0), deadline_law(d, 3), deadline=d)
    sim = simulate_events(true, policy, np.random.default_rng(7), events=1_500_000)
    chains = {k: solve(QueueModel(3, arrivals, PH.exponential(1.0), deadline_law(d, k)), policy) for k in (3, 20, 40)}
    assert all(c.success for c in chains.values())
    for name in ("p_obsolete", "p_loss", "p_success"):
        est = getattr(sim, name)
        limit = 2 * getattr(chains[40].measures, name) - getattr(chains[20].measures, name)
        assert abs(limit - est.value) <= est.half_width + 1e-3, name  # 1e-3: the extrapolation's own error
    coarse = chains[3].measures.p_obsolete
    assert abs(coarse - sim.p_obsolete.value) > 10 * sim.p_obsolete.half_width
    assert math.isfinite(sim.p_obsolete.value)


def test_a_deadline_needs_its_law() -> None:
    arrivals = ModeArrivals.per_mode({1: BMAP.poisson(1.0)})
    with pytest.raises(InputError):
        QueueModel(3, arrivals, PH.exponential(1.0), None, deadline=5.0)
