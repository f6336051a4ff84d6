"""`robotctl solve --park/--resume` and `robotctl optimise --commands-curve` (issue 24), in process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotctl.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"


def test_solve_hysteresis_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", str(EXAMPLE), "--park", "3,3,3,1,1,1", "--resume", "3,3,1,1,1,1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["park"] == [3, 3, 3, 1, 1, 1] and out["resume"] == [3, 3, 1, 1, 1, 1]
    assert out["commands_per_robot_min"] == pytest.approx(19.929421458, rel=1e-9)
    assert out["measures"]["commands_per_robot_min"] == out["commands_per_robot_min"]


def test_plain_policy_reports_commands_and_paper_cost(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", str(EXAMPLE), "--policy", "3,3,3,1,1,1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert round(out["cost"], 4) == 63.5425
    assert out["commands_per_robot_min"] == pytest.approx(38.0714721, rel=1e-7)
    # the same policy written as park = resume
    assert main(["solve", str(EXAMPLE), "--park", "3,3,3,1,1,1", "--resume", "3,3,3,1,1,1", "--json"]) == 0
    same = json.loads(capsys.readouterr().out)
    assert same["cost"] == pytest.approx(out["cost"], rel=1e-12)
    assert same["commands_per_robot_min"] == pytest.approx(out["commands_per_robot_min"], rel=1e-12)


@pytest.mark.parametrize(("argv", "flag"), [
    (["--park", "3,3,3,1,1,1"], "--resume"),
    (["--resume", "3,3,3,1,1,1"], "--park"),
    (["--park", "3,3,3,1,1,1", "--resume", "3,3,4,1,1,1"], "--resume[2]"),
    (["--park", "3,3,3,1,1,1", "--resume", "3,3,3,3,1,1"], "--resume[3]"),
    (["--park", "3,3,3,1,1", "--resume", "3,3,1,1,1"], "--park"),
    (["--park", "3,a", "--resume", "1,1"], "--park"),
    (["--policy", "3,3,3,1,1,1", "--park", "3,3,3,1,1,1", "--resume", "3,3,3,1,1,1"], "--policy"),
    ([], "--policy"),
])
def test_bad_vectors_name_the_flag(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", str(EXAMPLE), *argv]) == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@settings(max_examples=40, deadline=None)
@given(park=st.text(alphabet="0123456789,- x", max_size=16), resume=st.text(alphabet="0123456789,- x", max_size=16))
def test_any_vector_text_is_solved_or_refused_in_one_line(park: str, resume: str) -> None:
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(["solve", str(EXAMPLE), "--park", park, "--resume", resume, "--json"])
        except SystemExit as exc:  # argparse itself refuses a value that looks like an option, e.g. -x
            code = exc.code
    assert code in (0, 1, 2)
    if code == 2:
        assert "Traceback" not in err.getvalue() and err.getvalue().strip()


def test_commands_curve_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimise", str(EXAMPLE), "--commands-curve", "--search", "local", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    curve = out["curve"]
    assert curve[0]["commands_per_robot_min"] == 0.0 and round(curve[-1]["cost"], 4) == 63.5425
    assert all(set(p) >= {"commands_per_robot_min", "cost", "park", "resume"} for p in curve)
    xs = [p["commands_per_robot_min"] for p in curve]
    assert xs == sorted(xs)


def test_budget_and_certify(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimise", str(EXAMPLE), "--max-commands-per-robot-min", "10", "--search", "local", "--certify",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["within_budget"] and out["commands_per_robot_min"] <= 10
    assert out["lower_bound"] <= out["cost"]
    with pytest.raises(SystemExit) as bad:  # argparse refuses it (exit 2, one line naming the flag)
        main(["optimise", str(EXAMPLE), "--max-commands-per-robot-min", "-1"])
    assert bad.value.code == 2 and "--max-commands-per-robot-min" in capsys.readouterr().err
    assert main(["optimise", str(EXAMPLE), "--max-commands-per-robot-min", "6", "--max-loss", "0.2"]) == 2
