"""`robotctl fit`, in process: a trace to a model file that `robotctl optimise -` reads; bad traces give
one line and exit code 2."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from robotctl.agent import load_model_file
from robotctl.cli import main
from robotctl.fitting._synthetic import paper_like_trace
from robotctl.model import PH


def write_jsonl(path: Path, rows: list[dict[str, object]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def paper_rows(n_batches: int = 4000, *, seed: int = 1, active: int | None = 1) -> list[dict[str, object]]:
    tr = paper_like_trace(np.random.default_rng(seed), n_batches, n_stops=2)
    rows: list[dict[str, object]] = []
    for t, p, b in zip(tr.times, tr.pages, tr.bytes, strict=True):
        row: dict[str, object] = {"t": float(t), "event": "delivery", "pages": int(p), "bytes": int(b)}
        if active is not None:
            row["active"] = active
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_jsonl(tmp_path_factory.mktemp("fit") / "trace.jsonl", paper_rows())


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_yaml_output_is_a_model_file_with_its_report(trace: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["fit", trace, "--mode-field", "active", "--modes", "1-3", "--processing-rate-bps", "5e4",
                          "--mean-useful-life-s", "30", "--capacity", "6"], capsys)
    assert code == 0 and err == ""
    doc = yaml.safe_load(out)
    assert list(doc) == ["model", "report"]
    path = tmp_path / "model.yaml"
    path.write_text(out)
    model, _ = load_model_file(str(path))
    assert model.capacity == 6 and model.modes == (1, 2, 3)
    assert model.obsolescence is not None and model.obsolescence.mean == pytest.approx(30.0)
    rep = doc["report"]
    assert rep["modes"][0]["rung"] == "rho_clipped" and rep["linear_modes"] == [2, 3]
    assert rep["censoring"]["censored"] == 2 and rep["batch_resolution"]["rule"] == "automatic"
    assert rep["service"]["source"] == "sizes_bytes / processing_rate_bps"


def test_json_output_and_costs_are_copied(trace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    costs = tmp_path / "costs.yaml"
    costs.write_text("costs: {loss: 5, obsolescence: 10, response: 2, robot: 20, starvation: 300}\n")
    code, out, _ = run(["fit", trace, "--capacity", "5", "--processing-rate-bps", "5e4", "--costs", str(costs),
                        "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert list(doc) == ["model", "costs", "report"] and doc["costs"]["starvation"] == 300.0


def test_fit_pipes_into_optimise(trace: str, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`robotctl fit trace.jsonl --yaml | robotctl optimise -`."""
    code, out, _ = run(["fit", trace, "--mode-field", "active", "--modes", "1,2", "--processing-rate-bps", "5e4",
                        "--mean-useful-life-s", "30", "--capacity", "4", "--yaml"], capsys)
    assert code == 0
    costs = "costs: {loss: 5, obsolescence: 10, response: 2, robot: 20, starvation: 300}\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(out + costs))
    code, out, err = run(["optimise", "-", "--json"], capsys)
    assert code == 0, err
    best = json.loads(out)
    assert len(best["robots_at_level"]) == 5 and set(best["robots_at_level"]) <= {1, 2}
    assert best["cost"] > 0


def test_service_from_service_s_and_obsolescence_from_drops(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A trace with completions (service_s) and obsolete drops: the useful life is estimated."""
    rng = np.random.default_rng(3)
    rows: list[dict[str, object]] = []
    t = 0.0
    svc = PH.hyperexponential([0.2, 0.8], [0.5, 4.0]).sample(rng, 4000)
    for k in range(4000):
        t += 0.05 + float(rng.exponential(1.0))
        rows.append({"t": t, "event": "delivery", "pages": 3})
        rows.append({"t": t + 0.01, "event": "completion", "pages": 1, "service_s": float(svc[k])})
        if k % 40 == 0:
            rows.append({"t": t + 0.02, "event": "obsolete", "pages": 1})
        rows.append({"t": t + 0.03, "event": "completion", "pages": 1})
    path = write_jsonl(tmp_path / "svc.jsonl", rows)
    code, out, err = run(["fit", path, "--capacity", "5"], capsys)
    assert code == 0, err
    rep = yaml.safe_load(out)["report"]
    assert rep["service"]["source"] == "service_times" and rep["service"]["samples"] == 4000
    assert rep["obsolescence"]["source"].startswith("estimated from drops")
    assert rep["obsolescence"]["count"] == 100


def test_insufficient_data_prints_the_model_and_exits_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"t": float(i), "event": "delivery", "service_s": 0.5} for i in range(10)]
    code, out, _ = run(["fit", write_jsonl(tmp_path / "short.jsonl", rows), "--capacity", "5"], capsys)
    assert code == 1 and yaml.safe_load(out)["report"]["status"] == "insufficient_data"


def test_out_of_order_needs_sort(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"t": float(i), "event": "delivery", "service_s": 0.5} for i in range(200)]
    rows[50], rows[51] = rows[51], rows[50]
    path = write_jsonl(tmp_path / "unsorted.jsonl", rows)
    code, _, err = run(["fit", path, "--capacity", "5"], capsys)
    assert code == 2 and err.count("\n") == 1 and "unsorted.jsonl:52.t: is 50.0, earlier" in err and "--sort" in err
    code, out, _ = run(["fit", path, "--capacity", "5", "--sort"], capsys)
    assert code == 0 and yaml.safe_load(out)["report"]["out_of_order"] == 1


BAD = {
    "empty": ("", "holds no events"),
    "nan": ('{"t": 0, "service_s": 1}\n{"t": NaN, "service_s": 1}\n', "bad.jsonl:2.t: is nan, not finite"),
    "negative-size": ('{"t": 0, "bytes": 10}\n{"t": 1, "bytes": -5}\n', "bad.jsonl:2.bytes: is -5"),
    "single": ('{"t": 0, "service_s": 1}\n', "has 1 delivery"),
    "not-json": ('{"t": 0}\n{"t": 1\n', "bad.jsonl:2: is not valid JSON"),
    "unknown-event": ('{"t": 0, "event": "arrival"}\n', "bad.jsonl:1.event: is 'arrival'"),
    "text-time": ('{"t": "soon"}\n', "bad.jsonl:1.t: is 'soon', not a number"),
    "no-service": ('{"t": 0}\n{"t": 1}\n{"t": 2}\n', "no service information"),
    "no-rate": ('{"t": 0, "bytes": 10}\n{"t": 1, "bytes": 5}\n', "--processing-rate-bps: is needed"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_traces_give_one_line_and_exit_two(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, words = BAD[case]
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    code, out, err = run(["fit", str(path), "--capacity", "5"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("robotctl: error: ") and words in err


def test_wrong_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "trace.csv"
    csv.write_text("time,event\n0,delivery\n1,delivery\n")
    code, _, err = run(["fit", str(csv), "--capacity", "5"], capsys)
    assert code == 2 and "trace.csv:1: has no column t" in err
    rows = [{"t": float(i), "event": "delivery", "service_s": 0.5} for i in range(50)]
    path = write_jsonl(tmp_path / "nomode.jsonl", rows)
    code, _, err = run(["fit", path, "--capacity", "5", "--mode-field", "robots"], capsys)
    assert code == 2 and "robots: no line has this column" in err
    rows[7]["active"] = 2
    path = write_jsonl(tmp_path / "partial.jsonl", rows)
    code, _, err = run(["fit", path, "--capacity", "5", "--mode-field", "active"], capsys)
    assert code == 2 and "partial.jsonl:1.active: is missing on a delivery" in err


def test_csv_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = paper_rows(2000, seed=4, active=None)
    lines = ["t,event,pages,bytes"] + [f"{r['t']!r},delivery,{r['pages']},{r['bytes']}" for r in rows]
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(lines) + "\n")
    code, out, err = run(["fit", str(path), "--capacity", "5", "--processing-rate-bps", "1e5"], capsys)
    assert code == 0, err
    assert yaml.safe_load(out)["report"]["deliveries"] == len(rows)


def test_help_ends_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "robotctl fit trace.jsonl" in text and "| robotctl optimise -" in text and "--config" in text


def test_mode_exposure_from_park_and_resume_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A simulated trace under threshold control: the mode trajectory comes from the park/resume lines,
    each mode's intervals are read on its own clock (most joined across stays in other modes, none
    dropped), and each observed mode's rate is its pages over the time spent in it."""
    example = Path(__file__).resolve().parents[2] / "config" / "paper-example.yaml"
    path = tmp_path / "sim.jsonl"
    assert main(["simulate", str(example), "--policy", "3,3,3,1,1,1", "--events", "60000", "--seed", "2",
                 "--trace", str(path), "--json"]) == 0
    capsys.readouterr()
    # the per-mode fit, pinned (with the trajectory the default, arrivals: auto, is the joint fit)
    config = tmp_path / "sidecar.yaml"
    config.write_text(json.dumps({"queue": {"capacity": 5}, "robots": 3, "log": {"dir": str(tmp_path / "log")},
                                  "fit": {"options": {"arrivals": "per_mode"}}}))
    assert main(["fit", str(path), "--config", str(config), "--mode-field", "active", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any("exposure" in note for note in doc["report"]["notes"])
    clock = doc["report"]["mode_clock"]
    assert clock["used"] and clock["mode_mismatches"] == 0 and doc["report"]["mode_switches_dropped"] == 0
    assert clock["joined"] == sum(m["samples"]["joined"] for m in doc["report"]["modes"]) > 100
    events = [json.loads(line) for line in path.read_text().splitlines()]
    changes = [(e["t"], e["active"]) for e in events if e["event"] in ("park", "resume")]
    ends = [t for t, _ in changes[1:]] + [events[-1]["t"]]
    in_mode_1 = sum(end - t for (t, m), end in zip(changes, ends) if m == 1)
    pages_1 = sum(e["pages"] for e in events if e["event"] == "delivery" and e["active"] == 1)
    model_file = tmp_path / "fitted.json"
    model_file.write_text(json.dumps(doc))
    model, _ = load_model_file(str(model_file))
    assert model.arrivals[1].rate == pytest.approx(pages_1 / in_mode_1, rel=1e-9)


def test_capacity_is_required_and_the_sidecar_config_gives_it_with_the_costs(trace: str, tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The README's pipeline: without --capacity (or --config) fit refuses; with the sidecar's configuration
    the model file has its K, costs and modes, and `optimise -` reads it; without costs optimise refuses."""
    code, _, err = run(["fit", trace, "--processing-rate-bps", "5e4"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--capacity" in err
    config = tmp_path / "sidecar.yaml"
    config.write_text("queue: {capacity: 7}\nrobots: {count: 3}\ncosts: {loss: 5, robot: 2, starvation: 50}\n"
                      "fit: {processing_rate_bps: 5.0e+4, mean_useful_life_s: 30}\n")
    code, out, _ = run(["fit", trace, "--config", str(config), "--mode-field", "active"], capsys)
    assert code == 0
    doc = yaml.safe_load(out)
    assert doc["costs"]["starvation"] == 50 and doc["model"]["capacity"] == 7
    path = tmp_path / "model.yaml"
    path.write_text(out)
    model, _ = load_model_file(str(path))
    assert model.modes == (1, 2, 3)
    assert main(["optimise", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cost"] > 0
    code, out, _ = run(["fit", trace, "--capacity", "7", "--processing-rate-bps", "5e4"], capsys)
    path.write_text(out)
    assert main(["optimise", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "costs: are missing" in err
