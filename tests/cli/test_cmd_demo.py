"""`robotctl demo`, in process: bad input exits 2 with one line; a short run prints JSON or a plain report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from robotctl.cli import main

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@pytest.mark.parametrize(("args", "field"), [
    (["--duration", "0"], "--duration"),
    (["--duration", "abc"], "--duration"),
    (["--duration", "5", "--warmup", "5"], "--warmup"),
    (["--seed", "-1"], "--seed"),
    (["--seed-url", "ftp://example.org/"], "--seed-url"),
    (["--port", "70000"], "--port"),
    (["--config", "no-such-file.yaml"], "no-such-file.yaml"),
])
def test_bad_input_exits_2_with_one_line(args: list[str], field: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["demo", *args])          # errors found after parsing return 2 ...
    except SystemExit as exc:                 # ... the parser's own exit with 2
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2
    assert field in err and len(err.strip().splitlines()) == 1


def test_bad_config_key_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "demo.yaml"
    p.write_text("indexer: {capacty: 4}\n")
    assert main(["demo", "--config", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert "indexer.capacty: is not a known key" in err and len(err.splitlines()) == 1


def test_help_ends_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    out = capsys.readouterr().out
    assert "--seed-url URL" in out and "Example:" in out and out.rstrip().endswith("crawl.json")


def short(tmp_path: Path) -> Path:
    p = tmp_path / "short.yaml"
    p.write_text("demo: {view_interval_s: 0.5}\n"
                 "robots: {count: 3, think_s: 0.2}\nindexer: {capacity: 8}\n"
                 "agent: {policy: {startup: [3, 3, 3, 1, 1, 1, 1, 1, 1]}}\n")
    return p


def test_short_run_as_json_with_a_plain_view_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--config", str(short(tmp_path)), "--duration", "3", "--no-baselines", "--json",
                 "--seed", "4"])
    out, err = capsys.readouterr()
    assert code == 0
    report = json.loads(out)
    assert report["success"] and report["config"]["demo"]["seed"] == 4 and len(report["runs"]) == 1
    run = report["runs"][0]
    assert run["kind"] == "robotctl" and run["counts"]["indexed"] > 0 and run["agent"]["queue_mismatches"] == 0
    assert not CONTROL.search(err.replace("\n", ""))
    assert "== run 1: robotctl in control" in err and "/metrics" in err
    assert re.search(r"^\[robotctl +\d+\.\d/3s", err, re.M)


def test_short_quiet_run_prints_only_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--config", str(short(tmp_path)), "--duration", "2", "--no-baselines", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0
    assert not CONTROL.search(out.replace("\n", ""))
    assert "robotctl demo report" in out and "[robotctl" not in out + err
    assert "queue matched the indexer's" in out


def test_json_report_writes_a_nan_as_null(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`demo --json` goes through the shared JSON writer: a measure that is NaN (no page served, say) is
    null, and the output is strict JSON."""

    class Report:
        success = True

        def to_dict(self) -> dict[str, object]:
            return {"runs": [{"mean_sojourn_s": float("nan"), "cost": float("inf"), "pages": 3}]}

    async def fake_run_demo(*args: object, **kwargs: object) -> Report:
        return Report()

    monkeypatch.setattr("robotctl.crawler.run_demo", fake_run_demo)
    assert main(["demo", "--duration", "5", "--quiet", "--json"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in the output"))
    assert doc == {"runs": [{"mean_sojourn_s": None, "cost": None, "pages": 3}]}
