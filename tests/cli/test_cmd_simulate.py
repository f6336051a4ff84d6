"""`robotctl simulate`, in process."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from robotctl.agent.trace import read_trace
from robotctl.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"
POLICY = ["--policy", "3,3,3,1,1,1"]


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["simulate", str(EXAMPLE), *POLICY, *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_with_exact_comparison(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "--events", "200000", "--seed", "11", "--exact")
    assert out["success"] and out["seed"] == 11 and out["robots_at_level"] == [3, 3, 3, 1, 1, 1]
    assert out["events"] == 200_000 and out["warmup_events"] == 20_000 and out["batches"] == 30
    assert out["level"] == 0.99 and out["stop"] == "events"
    p_loss = out["p_loss"]
    assert set(p_loss) == {"estimate", "half_width", "std_error", "lag1_correlation"}
    assert out["cost"]["half_width"] > 0
    exact = out["exact"]
    assert exact["all_inside_familywise"], exact
    assert round(exact["values"]["cost"], 2) == 63.54
    assert set(exact["inside"]) == {"arrival_rate", "p_loss", "p_obsolete", "p_success", "p_starvation",
                                    "mean_active_robots", "mean_queue_length", "mean_response_served",
                                    "mean_sojourn_obsolete", "mean_sojourn", "cost"}
    assert out["events_per_second"] > 0


def test_same_seed_same_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    a = run_json(capsys, "--events", "5000", "--batches", "5", "--seed", "3")
    b = run_json(capsys, "--events", "5000", "--batches", "5", "--seed", "3")
    for key in ("p_loss", "cost", "mean_response_served", "queue_length_distribution"):
        assert a[key] == b[key]


def test_random_seed_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "--events", "3000", "--batches", "3")
    again = run_json(capsys, "--events", "3000", "--batches", "3", "--seed", str(out["seed"]))
    assert again["p_loss"] == out["p_loss"]


def test_horizon_and_warmup_in_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "--horizon-s", "500", "--warmup", "20", "--batches", "5", "--seed", "1")
    assert out["stop"] == "horizon" and out["duration_s"] == pytest.approx(500.0) and out["warmup_s"] == 20.0


def test_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(EXAMPLE), *POLICY, "--events", "30000", "--seed", "2", "--exact",
                 "--level", "0.95"]) == 0
    text = capsys.readouterr().out
    assert "robots_at_level 3,3,3,1,1,1   seed 2" in text
    assert "0.95 confidence intervals by batch means" in text
    assert "P_loss" in text and "±" in text and "exact 0.173437" in text and "events/s" in text
    assert "family-wise" in text


def test_trace_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.jsonl"
    out = run_json(capsys, "--events", "20000", "--batches", "4", "--seed", "5", "--trace", str(path))
    events = read_trace(path)
    assert out["trace_file"] == {"path": str(path), "events": len(events)}
    kinds = {e.event for e in events}
    assert kinds == {"delivery", "loss", "completion", "obsolete", "park", "resume"}
    assert all(b.t >= a.t for a, b in itertools.pairwise(events))
    deliveries = [e for e in events if e.event == "delivery"]
    assert all(e.extra["active"] in (1, 3) and e.robot in {"1", "2", "3"} for e in deliveries)
    assert all(int(e.robot or 0) <= e.extra["active"] for e in deliveries)
    completions = [e for e in events if e.event == "completion"]
    assert all(e.service_s is not None and e.service_s > 0 for e in completions)
    # the trace covers the warm-up too, so it holds at least the measured pages
    assert sum(e.pages for e in deliveries) >= out["pages_offered"]
    assert len(completions) >= out["pages_served"]


@pytest.mark.parametrize(("args", "field"), [
    (["--policy", "3,3,1"], "policy: has 3 levels"),
    (["--policy", "3,3,3,1,1,1", "--events", "0"], "--events"),
    (["--policy", "3,3,3,1,1,1", "--level", "1.5"], "--level"),
    (["--policy", "3,3,3,1,1,1", "--events", "10", "--horizon-s", "5"], "not allowed with argument"),
    (["--policy", "3,3,3,1,1,1", "--events", "10", "--batches", "20"], "events: 10 events cannot fill 20"),
    (["--policy", "3,3,3,1,1,1", "--events", "100", "--warmup", "2.5"], "--warmup: counts events"),
    (["--policy", "3,3,3,1,1,2"], "policy[5]"),
    (["--policy", "3,3,3,1,1,1", "--seed", "-4"], "--seed"),
])
def test_bad_input_exits_2(args: list[str], field: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        code = main(["simulate", str(EXAMPLE), *args])
        raise SystemExit(code)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert field in err and len(err.strip().splitlines()) == 1


def test_unwritable_trace_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", str(EXAMPLE), *POLICY, "--events", "100", "--batches", "2",
                 "--trace", str(tmp_path / "missing" / "run.jsonl")])
    assert code == 2
    assert "--trace: cannot write" in capsys.readouterr().err


def test_help_has_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = capsys.readouterr().out
    assert "example:" in text and "robotctl simulate config/paper-example.yaml" in text
    assert "--trace" in text and "--exact" in text
