"""`robotctl mdp`, `robotctl optimise --policy-kind mdp` and `--certify`, in process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robotctl.cli import main
from robotctl.policies import RobotsProblem, solve_dynamic

CONFIG = Path(__file__).resolve().parents[2] / "config"
EXAMPLE = CONFIG / "paper-example.yaml"
FIGURE_2 = CONFIG / "paper001-figure2.yaml"
FIGURE_2_ARGS = ["mdp", "--robots", "16", "--capacity", "5", "--arrival-rate", "0.1", "--service-rate", "1",
                 "--gamma", "1"]


def test_mdp_json_has_the_issue_keys(capsys: pytest.CaptureFixture[str]) -> None:
    """Paper 001's Figure 2 from the command line: cost 0.20907, 4..14 robots, the curves as printed."""
    assert main([*FIGURE_2_ARGS, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"cost", "p_starvation", "loss_rate", "switching_curves", "static", "gain_percent",
            "iterations"} <= set(out)
    assert set(out["switching_curves"]) == {"departure", "arrival"} and set(out["static"]) == {"robots", "cost"}
    assert round(out["cost"], 5) == 0.20907
    assert (out["active_robots"]["min"], out["active_robots"]["max"]) == (4, 14)
    opt = solve_dynamic(RobotsProblem.paper(16, 5, 0.1, 1.0, 1.0))
    departure, arrival = opt.policy.switching_curves()
    assert out["switching_curves"] == {"departure": list(departure), "arrival": list(arrival)}
    assert out["switching_curves"]["departure"][0] is None and len(out["switching_curves"]["arrival"]) == 6
    assert out["static"]["robots"] == 9
    assert out["gain_percent"] == pytest.approx(100 * (out["static"]["cost"] - out["cost"]) / out["cost"])
    assert out["p_starvation"] + out["loss_rate"] == pytest.approx(out["cost"])


def test_mdp_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(FIGURE_2_ARGS) == 0
    text = capsys.readouterr().out
    assert "0.209074" in text and "between 4 and 14" in text and "9 robots always active" in text
    assert "gain of dynamic control: 56.33%" in text


@pytest.mark.parametrize("flag", [["--policy-kind", "mdp"], ["--method", "mdp"]])
def test_optimise_control_mdp_on_a_poisson_model_file(capsys: pytest.CaptureFixture[str], flag: list[str]) -> None:
    """The same problem as a model file (linear Poisson modes 1..16, gamma as the starvation cost)."""
    assert main(["optimise", str(FIGURE_2), *flag, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy_kind"] == out["control"] == "mdp" and round(out["cost"], 5) == 0.20907


def test_optimise_mdp_rejects_paper_000s_model_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimise", str(EXAMPLE), "--policy-kind", "mdp"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.obsolescence" in err[0] and "threshold search" in err[0]


def test_optimise_certify(capsys: pytest.CaptureFixture[str]) -> None:
    """Paper 000's example: the bound is below the threshold optimum 63.54, the gap is its distance in
    percent of the bound, and the text says what the bound means."""
    assert main(["optimise", str(EXAMPLE), "--certify", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert round(out["cost"], 2) == 63.54
    assert 0 < out["lower_bound"] <= out["cost"]
    assert out["gap_percent"] == pytest.approx(100 * (out["cost"] - out["lower_bound"]) / out["lower_bound"])
    assert out["certificate"]["success"] and "no policy" in out["certificate"]["meaning"]
    assert main(["optimise", str(EXAMPLE), "--certify"]) == 0
    text = capsys.readouterr().out
    assert "lower bound" in text and "can cost less" in text and "gap_percent" in text


def test_certify_a_poisson_model_is_tight(capsys: pytest.CaptureFixture[str]) -> None:
    """With the queue length as the whole state the bound is the threshold optimum itself."""
    assert main(["optimise", str(FIGURE_2), "--certify", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gap_percent"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize(("args", "needle"), [(["--robots", "0"], "--robots"),
                                              (["--arrival-rate", "-1"], "--arrival-rate"),
                                              (["--gamma", "x"], "--gamma")])
def test_mdp_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    base = dict(zip(FIGURE_2_ARGS[1::2], FIGURE_2_ARGS[2::2]))
    base.update(dict(zip(args[::2], args[1::2])))
    with pytest.raises(SystemExit) as exc:
        main(["mdp", *[x for kv in base.items() for x in kv]])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]
