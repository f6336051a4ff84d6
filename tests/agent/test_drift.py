"""The drift check is calibrated on steady traffic (issue 25): replaying the shipped example trace, whose
traffic never changes, it fired twice (``drift mode=3 observed_rate=5.54 fitted_rate=3.509``).

Under a threshold policy the mode changes at deliveries: a delivery that raises the queue past a threshold
ends the stay of the mode in force, so short stays end with a delivery more often than time alone would
give, and a mode's pages over its own time overstate its rate (here by 60%). The pages of all modes over
the drift window against the pages the fitted rates predict for the time spent in each mode are free of
that bias: the check compares those."""

from __future__ import annotations

from pathlib import Path

from robotctl.agent.config import load_config
from robotctl.agent.replay import ReplayOptions, replay
from robotctl.agent.sources import read_events

ROOT = Path(__file__).resolve().parents[2]


def test_the_steady_example_trace_does_not_trip_the_drift_check() -> None:
    config = load_config(ROOT / "examples" / "sidecar.yaml")
    assert config.refit.drift_bound is not None  # the check is on, with the default bound
    table = read_events([str(ROOT / "examples" / "trace.jsonl.gz")])
    doc = replay(table, config, ReplayOptions(sim_events=2000)).to_dict()
    reasons = [w["reason"] for w in doc["windows"]] + [f["reason"] for f in doc["refits"]["failed"]]
    assert reasons and not [r for r in reasons if r.startswith("drift")], reasons
    # the schedule's own refits only: the cold start's growing windows, the first fit, the interval
    assert {r.split()[0] for r in reasons} <= {"growth", "first_fit", "interval"}, reasons


def _mmpp(scale: float):  # type: ignore[no-untyped-def]
    import numpy as np

    from robotctl.model import BMAP

    Q = np.array([[-0.02, 0.02], [0.05, -0.05]])        # bench/estimation_replay.py's burst/quiet phase
    lam = np.array([0.15, 1.2]) * scale
    return Q, lam, BMAP.from_matrices([Q - np.diag(lam), np.diag(lam)])


def test_pages_cv_against_closed_forms_and_a_simulation() -> None:
    import numpy as np

    from robotctl.agent.refit_window import pages_cv
    from robotctl.model import BMAP

    # Poisson and batch Poisson: Var N(t) = lambda t E[k^2]
    assert abs(pages_cv(BMAP.from_matrices([[[-2.0]], [[2.0]]]), 60.0) - 1 / np.sqrt(120)) < 1e-9
    batch = BMAP.from_matrices([[[-2.0]], [[1.4]], [[0.6]]])
    assert abs(pages_cv(batch, 60.0) - np.sqrt(120 * (0.7 + 4 * 0.3)) / (120 * 1.3)) < 1e-9
    # the burst/quiet MMPP, simulated from its stationary phase: counts over 60 s
    Q, lam, bmap = _mmpp(2.5)
    rng = np.random.default_rng(3)
    counts = []
    for _ in range(3000):
        ph, t, n = int(rng.random() < 2 / 7), 0.0, 0
        while True:
            out = -Q[ph, ph] + lam[ph]
            t += rng.exponential(1 / out)
            if t > 60.0:
                break
            if rng.random() < lam[ph] / out:
                n += 1
            else:
                ph = 1 - ph
        counts.append(n)
    sim = float(np.std(counts) / np.mean(counts))
    assert abs(pages_cv(bmap, 60.0) - sim) < 0.05 * sim, (pages_cv(bmap, 60.0), sim)


def test_a_joint_fits_drift_check_allows_the_fitted_bursts() -> None:
    # 60 s at mode 2 with 1.8x the predicted pages: drift for a Poisson fit of the same rate, within the
    # fitted bursts' own spread (3 coefficients of variation, ~0.6 each) for the burst/quiet joint fit
    from types import SimpleNamespace

    import numpy as np

    from robotctl.agent.queue import mode_pages_key, mode_time_key
    from robotctl.agent.refit_window import drift
    from robotctl.model import BMAP, ModeArrivals

    _, _, bursty = _mmpp(2.0)
    rate = float(bursty.rate)
    poisson = BMAP.from_matrices([[[-rate]], [[rate]]])
    for bmap, fires in ((bursty, False), (poisson, True)):
        model = SimpleNamespace(modes=(2,), arrivals=ModeArrivals.per_mode({2: bmap}))
        totals = {mode_time_key(2): 60.0, mode_pages_key(2): 1.8 * rate * 60.0}
        agent = SimpleNamespace(
            config=SimpleNamespace(refit=SimpleNamespace(drift_bound=0.5, drift_min_pages=50)),
            policy=SimpleNamespace(model=model, measures=SimpleNamespace(arrival_rate=rate),
                                   fit={"joint": {"phases": bmap.order}}),
            drift_window=SimpleNamespace(totals=lambda now, t=totals: t))
        assert (drift(agent, 100.0) is not None) == fires, (bmap.order, drift(agent, 100.0))
    assert np.isfinite(rate)


def test_a_joint_fits_drift_check_takes_the_modes_the_fleet_really_ran() -> None:
    """The policy's predicted offered rate assumes the fleet follows the policy; a replayed recorded fleet
    (or advise mode) runs other modes. Pages the mode rates explain are no drift even when the policy
    predicts other traffic (a 4-robot trace replayed under paper 001's MDP, predicting 0.98 pages/s
    against the fleet's 1.6, refitted at every drift window); pages that neither explains are."""
    from types import SimpleNamespace

    from robotctl.agent.queue import mode_pages_key, mode_time_key
    from robotctl.agent.refit_window import drift
    from robotctl.model import BMAP, ModeArrivals

    rates = {1: 0.4, 4: 1.6}
    model = SimpleNamespace(modes=(1, 4), arrivals=ModeArrivals.per_mode(
        {m: BMAP.from_matrices([[[-r]], [[r]]]) for m, r in rates.items()}))

    def fires(pages_per_s: float, predicted_offered: float) -> bool:
        totals = {mode_time_key(4): 600.0, mode_pages_key(4): pages_per_s * 600.0}
        agent = SimpleNamespace(
            config=SimpleNamespace(refit=SimpleNamespace(drift_bound=0.5, drift_min_pages=50)),
            policy=SimpleNamespace(model=model, measures=SimpleNamespace(arrival_rate=predicted_offered),
                                   fit={"joint": {"phases": 1}}),
            drift_window=SimpleNamespace(totals=lambda now, t=totals: t))
        return drift(agent, 700.0) is not None

    assert not fires(1.6, 0.98)      # the mode rate explains it: the fleet is not on the policy
    assert not fires(1.0, 0.98)      # the policy's prediction explains it: the mode follows the hidden phase
    assert fires(3.2, 0.98) and fires(3.2, 1.6)   # the rates doubled: neither explains it
