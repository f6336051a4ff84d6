"""`robotctl schedule` and `robotctl route` in process: the JSON contract, the papers' numbers, the
fetch-time forms, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from robotctl.cli import _cmd_route, _cmd_schedule, main
from robotctl.policies import REVISIT_POLICIES, ROUTING_METHODS, FetchLaw, golden_template, plan_revisits


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_method_lists_match_the_library() -> None:
    assert _cmd_schedule.REVISIT_POLICIES == REVISIT_POLICIES
    assert _cmd_route.ROUTING_METHODS == ROUTING_METHODS


def test_schedule_json_keys_and_values(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["schedule", "--change-rates", "0.5,1,2", "--fetch-time", "rate=1", "--json"], capsys)
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert {"frequencies", "lower_bound", "template", "template_cost", "randomised"} <= set(doc)
    assert set(doc["randomised"]) == {"frequencies", "cost"}
    h = 1 / (1 + np.array([0.5, 1, 2]))
    assert doc["frequencies"] == pytest.approx(np.log(h) / np.log(h).sum())
    assert doc["lower_bound"] == pytest.approx(3.5 - 1 + np.prod(h))
    plan = plan_revisits([0.5, 1, 2], FetchLaw.exponential(1.0))
    assert doc["template_cost"] == pytest.approx(plan.cost) and doc["template_cost"] >= doc["lower_bound"]
    assert doc["template"] == (np.asarray(plan.template) + 1).tolist() and min(doc["template"]) == 1
    a = 1 / h - 1
    assert doc["randomised"]["frequencies"] == pytest.approx(a / a.sum())
    assert doc["pages"] == ["1", "2", "3"]


def test_schedule_text_and_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "pages.csv"
    csv.write_text("# three pages\npage,change_rate,weight\n/a,0.5,1\n/b,1,1\n/c,2,5\n")
    code, out, _ = run(["schedule", str(csv), "--fetch-time", "constant=0.5", "--policy", "weighted"], capsys)
    assert code == 0
    assert "/c" in out and "weighted cycle of" in out and "lower bound C*" in out and "eq. 8" in out


def test_schedule_fetch_time_forms(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    samples = tmp_path / "fetch.txt"
    samples.write_text("fetch_s\n0.1\n0.3\n0.2\n")
    ph = tmp_path / "ph.yaml"
    ph.write_text("fetch_time: {beta: [0.3, 0.7], S: [[-0.5, 0], [0, -4]]}\n")
    mapf = tmp_path / "map.yaml"
    mapf.write_text("D0: [[-3.0, 0.5], [0.2, -0.4]]\nD1: [[2.4, 0.1], [0.05, 0.15]]\n")
    got = {}
    for law in (f"samples={samples}", str(ph), str(mapf), "mean=0.2"):
        code, out, err = run(["schedule", "--change-rates", "1,2", "--fetch-time", law, "--json"], capsys)
        assert code == 0, err
        got[law] = json.loads(out)
    assert got[f"samples={samples}"]["fetch_time"]["mean_s"] == pytest.approx(0.2)
    assert got[str(ph)]["fetch_time"]["law"].startswith("PH of order 2")
    assert got[str(mapf)]["lower_bound"] is None and got[str(mapf)]["template_cost"] > 0


def test_schedule_random_policy_has_no_template(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["schedule", "--change-rates", "1,2", "--fetch-time", "rate=2", "--policy", "random",
                        "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["template"] is None and doc["cost"] == pytest.approx(doc["randomised"]["cost"])


@pytest.mark.parametrize(("argv", "needle"), [
    (["--change-rates", "1,2", "--fetch-time", "speed=3"], "unknown law"),
    (["--change-rates", "1,-2", "--fetch-time", "rate=1"], "--change-rates"),
    (["--change-rates", "1,2", "--fetch-time", "rate=0"], "positive"),
    (["--change-rates", "1,2", "--weights", "1", "--fetch-time", "rate=1"], "--weights"),
    (["--fetch-time", "rate=1"], "PAGES.csv"),
    (["--change-rates", "1,2", "--fetch-time", "missing.yaml"], "missing.yaml"),
])
def test_schedule_bad_input_is_one_line_and_exit_2(argv: list[str], needle: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc_info:
        code = main(["schedule", *argv])
        raise SystemExit(code)
    err = capsys.readouterr().err
    assert exc_info.value.code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err


def test_schedule_reproduces_the_paper_example_template() -> None:
    """The JSON template of an f = (2, 3, 3, 5)/13 plan of length 13 is the printed sequence."""
    assert (golden_template([2, 3, 3, 5]) + 1).tolist() == [4, 2, 4, 1, 3, 4, 2, 4, 1, 3, 4, 2, 3]


def test_route_json_and_the_switch(capsys: pytest.CaptureFixture[str]) -> None:
    root = 1 + math.sqrt(2)
    seqs = []
    for mu2 in (root - 0.01, root + 0.01):
        code, out, err = run(["route", "--arrival-rate", "1", "--service-rates", f"1,{mu2}", "--json"], capsys)
        assert code == 0 and err == ""
        doc = json.loads(out)
        assert {"sequence", "cost"} <= set(doc)
        seqs.append(doc["sequence"])
    assert seqs == [[1, 2], [1, 2, 2]]


def test_route_text_and_map_and_mdp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["route", "--arrival-rate", "1", "--service-rates", "1,5"], capsys)
    assert code == 0 and "best periodic sequence (period 4): 1 2 2 2" in out and "0.105903" in out
    mmpp = tmp_path / "mmpp.yaml"
    mmpp.write_text("arrivals: {Q: [[-0.2, 0.2], [0.5, -0.5]], rates: [3.0, 0.3]}\n")
    code, out, _ = run(["route", "--arrivals", str(mmpp), "--arrival-rate", "2", "--service-rates", "1,2,4",
                        "--max-period", "10", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["method"] == "mdp" and doc["loss_rate_per_s"] == pytest.approx(2 * doc["cost"])
    assert sorted(set(doc["sequence"])) == [1, 2, 3]


@pytest.mark.parametrize(("argv", "needle"), [
    (["--service-rates", "1,5"], "--arrival-rate"),
    (["--arrival-rate", "1", "--service-rates", "1,x"], "--service-rates"),
    (["--arrival-rate", "1", "--service-rates", "1,2,3", "--method", "local"], "method"),
])
def test_route_bad_input(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc_info:
        raise SystemExit(main(["route", *argv]))
    err = capsys.readouterr().err
    assert exc_info.value.code == 2 and len(err.strip().splitlines()) == 1 and needle in err
