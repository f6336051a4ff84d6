"""`robotctl renovation`, `robotctl buffers` and `robotctl solve --buffer ...`, in process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robotctl.cli import main
from robotctl.model import Conflict, Renovation, solve_md1n

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"
PAPER = ["--arrival-rate", "1.1", "--service-time", "1", "--capacity", "6"]


def test_renovation_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["renovation", *PAPER, "--q", "0.5,0.2,0.2,0.1", "--option", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    exact = solve_md1n(1.1, 1.0, 5, Renovation((0.5, 0.2, 0.2, 0.1), Conflict.SKIP))
    assert out["loss_probability"] == pytest.approx(exact.loss_probability, abs=1e-15)
    assert out["blocking_probability"] + out["renovation_probability"] == pytest.approx(out["loss_probability"])
    assert out["mean_in_system"] == pytest.approx(exact.mean_in_system)
    assert out["second_moment"] == pytest.approx(exact.second_moment)
    assert len(out["distribution"]) == 7 and sum(out["distribution"]) == pytest.approx(1.0)
    assert out["conservation_residual"] < 1e-12 and out["option"] == 2


def test_renovation_without_renovation_is_blocking_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["renovation", *PAPER, "--q", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["renovation_probability"] == 0.0
    assert out["loss_probability"] == pytest.approx(out["distribution"][-1], abs=1e-15)


def test_renovation_text_with_simulation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["renovation", *PAPER, "--q", "0.5,0.5", "--events", "100000", "--seed", "5"]) == 0
    text = capsys.readouterr().out
    assert "paper 004" in text and "simulated 100,000 events (seed 5)" in text
    assert "1 - 1/(lambda f*)" in text and "P_6" in text


@pytest.mark.parametrize(("args", "needle"), [
    (["--q", "0.5,0.4"], "sums to 0.9"),
    (["--q", "0.5,x"], "not a comma-separated list"),
    (["--q", "1", "--option", "3"], "invalid choice"),
])
def test_renovation_bad_input_exits_2(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["renovation", *PAPER, *args])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_renovation_places_beyond_q_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["renovation", "--arrival-rate", "1", "--service-time", "1", "--capacity", "3", "--q",
                 "0.25,0.25,0.25,0.25"]) == 2
    assert "q: has 4 entries but 2 waiting places" in capsys.readouterr().err


def test_solve_with_renovation_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", str(EXAMPLE), "--policy", "3,3,3,1,1,1", "--buffer", "renovation", "--q", "0.5,0.3,0.2",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["success"] and out["buffer"]["renovation"] == {"q": [0.5, 0.3, 0.2], "option": 1}
    assert out["buffer"]["timers"] is False
    m = out["measures"]
    assert m["p_blocked"] + m["p_renovated"] + m["p_served"] == pytest.approx(1.0)
    # the keys of solve's JSON contract (docs/ARCHITECTURE.md), with the same meaning under timers only
    assert m["p_loss"] + m["p_obsolete"] + m["p_success"] == pytest.approx(1.0)
    assert {"arrival_rate", "p_starvation", "mean_active_robots", "mean_response_served"} <= set(m)
    assert out["cost"] == pytest.approx(sum(out["cost_terms"].values()))


def test_solve_default_is_untouched(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", str(EXAMPLE), "--policy", "3,3,3,1,1,1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "block" and round(out["cost"], 2) == 63.54


def test_solve_timers_under_renovation_and_red(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", str(EXAMPLE), "--policy", "3,3,3,1,1,1", "--buffer", "red", "--red", "2,5,0.3",
                 "--with-timers"]) == 0
    text = capsys.readouterr().out
    assert "obsolescence timers, RED (min_th 2, max_th 5, max_p 0.3)" in text and "cost J = " in text


@pytest.mark.parametrize(("args", "needle"), [
    (["--q", "0.5,0.5"], "--q: applies only with --buffer renovation"),
    (["--buffer", "renovation"], "--q: is required with --buffer renovation"),
    (["--buffer", "red"], "--red: is required with --buffer red"),
    (["--buffer", "red", "--red", "4,9,0.5"], "red.max_th"),
    (["--buffer", "renovation", "--q", "0.1,0.1,0.1,0.1,0.1,0.5"], "q: has 6 entries but 4 waiting places"),
])
def test_solve_buffer_bad_input_exits_2(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    assert main(["solve", str(EXAMPLE), "--policy", "3,3,3,1,1,1", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_buffers_comparison_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["buffers", str(EXAMPLE), "--policy", "3,3,3,1,1,1", "--red-levels", "2", "--grid", "2",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["success"] and [r["name"] for r in out["rules"]] == ["timers", "renovation", "red", "none"]
    rules = {r["name"]: r for r in out["rules"]}
    assert round(rules["timers"]["cost"], 2) == 63.54
    for r in out["rules"]:
        assert {"loss", "stale", "starvation", "response", "cost"} <= set(r)
    assert out["best"] == min(out["rules"], key=lambda r: (r["cost"], r["name"] != "none"))["name"]


def test_buffers_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["buffers", str(EXAMPLE), "--policy", "3,3,3,1,1,1", "--red-levels", "2", "--grid", "2"]) == 0
    text = capsys.readouterr().out
    for word in ("timers", "renovation", "red", "none", "cheapest:", "loss", "stale", "starved", "response"):
        assert word in text


def test_buffers_on_the_fitted_demo_crawl(capsys: pytest.CaptureFixture[str]) -> None:
    """The comparison on traffic fitted to a real demo crawl (config/demo-fitted.yaml, K = 8): the timers row
    is paper 000's model, so its cost equals the block solver's."""
    from robotctl.agent import load_model_file
    from robotctl.model import ThresholdPolicy, cost_of, solve

    fitted = EXAMPLE.parent / "demo-fitted.yaml"
    policy = "3,3,3,1,1,1,1,1,1"
    assert main(["buffers", str(fitted), "--policy", policy, "--grid", "2", "--tol", "0.25", "--red-levels", "1",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    model, costs = load_model_file(str(fitted))
    timers = cost_of(solve(model, ThresholdPolicy.parse(policy)).measures, costs).total
    rules = {r["name"]: r for r in out["rules"]}
    assert rules["timers"]["cost"] == pytest.approx(timers, rel=1e-10)
    assert out["success"] and set(rules) == {"timers", "renovation", "red", "none"}
