"""`robotctl optimise --max-loss ... --max-obsolete ... --max-starvation ...`, in process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robotctl.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"


def test_targets_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimise", str(EXAMPLE), "--max-loss", "0.18", "--max-starvation", "0.07", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["success"] and out["status"] == "met" and out["exact"] and out["search"] == "exhaustive"
    assert out["robots_at_level"] == [3, 3, 3, 1, 1, 1] and out["thresholds"] == [2]
    assert out["targets"] == {"max_loss": 0.18, "max_obsolete": None, "max_starvation": 0.07,
                              "max_commands_per_robot_min": None}
    assert out["met"] == {"max_loss": True, "max_starvation": True}
    assert out["measures"]["p_loss"] <= 0.18 and out["measures"]["p_starvation"] <= 0.07
    assert round(out["cost"], 2) == 63.54  # priced with the file's weights


def test_infeasible_targets_exit_1_and_say_the_best_possible(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["optimise", str(EXAMPLE), "--max-loss", "0.01", "--max-obsolete", "0.02",
                 "--max-starvation", "0.05"])
    text = capsys.readouterr().out
    assert code == 1
    assert "infeasible: the best any policy can do is P_loss 0.1345 (policy 3,1,1,1,1,1)" in text
    assert "P_obsolete 0.1035 (policy 4,4,4,4,4,4)" in text and "NOT MET" in text


def test_local_search_with_targets_is_the_lagrangian_search(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimise", str(EXAMPLE), "--max-starvation", "0.1", "--modes", "3,1", "--search", "local",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["search"] == "lagrange" and not out["exact"] and out["measures"]["p_starvation"] <= 0.1


@pytest.mark.parametrize(("args", "needle"), [(["--max-loss", "2"], "--max-loss"),
                                              (["--max-starvation", "x"], "--max-starvation"),
                                              (["--max-loss", "0.1", "--all-subsets"], "--all-subsets")])
def test_bad_targets_exit_2_naming_the_flag(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        code = main(["optimise", str(EXAMPLE), *args])
        raise SystemExit(code)
    assert info.value.code == 2
    assert needle in capsys.readouterr().err
