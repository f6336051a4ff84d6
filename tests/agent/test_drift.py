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
