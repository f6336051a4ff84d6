"""`robotctl solve` and `robotctl optimise`, in process."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from robotctl.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"


def test_optimise_all_subsets_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimise", str(EXAMPLE), "--all-subsets", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["robots_at_level"] == [3, 3, 3, 1, 1, 1]
    assert out["thresholds"] == [2] and out["modes"] == [3, 1]
    assert round(out["cost"], 2) == 63.54
    assert {"arrival_rate", "p_loss", "p_obsolete", "p_starvation", "mean_active_robots",
            "mean_response_served"} <= set(out["measures"])
    assert len(out["subsets"]) == 15
    assert round(out["static"]["3"], 3) == 89.405


def test_optimise_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimise", str(EXAMPLE), "--all-subsets"]) == 0
    text = capsys.readouterr().out
    assert "3 or 1" in text and "63.543" in text and "R = 28.93%" in text


def test_optimise_reads_standard_input(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(EXAMPLE.read_text()))
    assert main(["optimise", "-", "--modes", "3,1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["thresholds"] == [2]


def test_solve_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", str(EXAMPLE), "--policy", "3,3,3,1,1,1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["success"] and out["method"] == "block"
    assert round(out["cost"], 2) == 63.54


def write_model(tmp_path: Path, change: dict) -> str:
    """The paper example with ``change`` applied: {(key, key, ...): new value}."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    for keys, value in change.items():
        node = doc
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize(("change", "field"), [
    ({("model", "service", "S"): [[-3, 1, 0], [2, -3, 1]]}, "model.service.S"),
    ({("model", "arrivals", "per_mode", 1): [[[-10, 2], [0, -0.5]], [[0.05, 3], [0.29, 0.005]]]},
     "model.arrivals.per_mode.1"),
    ({("model", "obsolescence", "Gamma"): [[-0.6, 0.4], [-0.1, -0.3]]}, "model.obsolescence.Gamma"),
    ({("model", "capacity"): 0}, "model.capacity"),
    ({("costs", "loss"): -5}, "costs.loss"),
])
def test_bad_model_file_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict,
                                              field: str) -> None:
    assert main(["optimise", write_model(tmp_path, change), "--modes", "3,1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert field in err[0]


@pytest.mark.parametrize(("policy", "needle"), [("3,3,3,1,4,1", "policy[4]"), ("3,3,3,1,1,1,1", "K = 5 needs 6"),
                                                ("3,3,x", "policy")])
def test_bad_policy_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], policy: str, needle: str) -> None:
    try:
        code = main(["solve", str(EXAMPLE), "--policy", policy])
    except SystemExit as exc:  # argparse rejects what it can check alone
        code = int(exc.code or 0)
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_missing_file_and_bad_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimise", str(tmp_path / "nope.yaml")]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    assert main(["optimise", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "not valid YAML at line" in err


def test_closed_pipe_ends_quietly() -> None:
    """`robotctl optimise ... | head -1`: no traceback when the reader goes away."""
    proc = subprocess.Popen([sys.executable, "-m", "robotctl.cli", "optimise", str(EXAMPLE), "--all-subsets"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before anything is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "Exception ignored" not in err


def test_optimise_json_carries_the_output_contract(capsys: pytest.CaptureFixture[str]) -> None:
    """method, error_bound, lower_bound and exact beside robots_at_level, cost and measures."""
    assert main(["optimise", str(EXAMPLE), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "exact" and out["exact"] is True and out["error_bound"] == 0.0
    assert out["lower_bound"] is None and out["monotone"] is True and out["search_exhaustive"] is True
    assert out["reduction"] == ["obsolescence phases 2 -> 1 (exactly exponential)"]


def test_optimise_text_says_how_the_cost_was_evaluated(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimise", str(EXAMPLE), "--space", "all"]) == 0
    text = capsys.readouterr().out
    assert "evaluation: exact (error bound 0); MDP lower bound not computed" in text
    assert "best queue-length policy (monotone): robots_at_level 3,3,3,1,1,1" in text


def test_large_model_gets_an_error_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """K = 16 with a two-phase law that does not lump: the exact chain is too large for the search, so the
    optimum is reported with its method and error bar (the bar is checked against exact references in
    tests/model/test_approx.py)."""
    path = write_model(tmp_path, {("model", "capacity"): 16,
                                  ("model", "obsolescence"): {"gamma": [0.3, 0.7],
                                                              "Gamma": [[-0.6, 0.4], [0.1, -0.2]]}})
    assert main(["optimise", path, "--modes", "3,1", "--json", "--workers", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["exact"] is False and out["method"].startswith("ordered-head h=")
    assert 0.0 < out["error_bound"] < 0.01 * out["cost"]
    assert main(["solve", path, "--policy", ",".join(["3"] * 3 + ["1"] * 14), "--approx", "--json"]) == 0
    solved = json.loads(capsys.readouterr().out)
    assert solved["exact"] is False and set(solved["measure_errors"]) >= {"p_loss", "mean_response_served"}


def test_spaces_match_the_policy_search() -> None:
    from robotctl.cli import _cmd_model
    from robotctl.policies import SPACES

    assert _cmd_model.SPACES == SPACES
