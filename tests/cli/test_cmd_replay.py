"""`robotctl replay` in process: text, JSON and the HTML report (plots embedded, no network)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from robotctl.agent.trace import TraceEvent, write_trace
from robotctl.cli import main
from robotctl.model import BMAP, PH, Admission, ModeArrivals, QueueModel, Simulation, TraceKind

SIDECAR = """\
queue: {capacity: 4}
robots: 3
costs: {loss: 5, obsolescence: 10, response: 2, robot: 20, starvation: 300}
refit: {interval_s: 600, window_s: 1800, min_interval_s: 0, drift_bound: null, min_deliveries: 300}
fit: {mean_useful_life_s: 5.0}
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    tmp = tmp_path_factory.mktemp("replay")
    base = BMAP.poisson(0.8, [0.7, 0.3])
    model = QueueModel(4, ModeArrivals.per_mode({r: base.scaled(r) for r in (1, 2, 3)}),
                       PH(np.array([1.0]), np.array([[-2.0]])), PH(np.array([1.0]), np.array([[-0.2]])),
                       Admission.PARTIAL)
    sim = Simulation(model, lambda n, a, t: (3, 2, 1)[int(t // 300) % 3], np.random.default_rng(2), record=True)
    sim.advance(t_end=3600.0)
    kinds = (TraceKind.DELIVERY, TraceKind.PARK, TraceKind.RESUME)
    path = tmp / "trace.jsonl"
    write_trace(path, (TraceEvent(r.t, r.kind.value, None, r.pages, None, r.service_s,
                                  {"active": r.active} if r.kind in kinds else {}) for r in sim.take_rows()))
    config = tmp / "sidecar.yaml"
    config.write_text(SIDECAR)
    return str(path), str(config)


def test_json_has_the_issues_shape(files: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    trace, config = files
    assert main(["replay", trace, "--config", config, "--json", "--events", "40000"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["windows"] and {"t_start", "t_end", "fit", "policy", "predicted"} <= set(d["windows"][0])
    w = d["windows"][0]
    assert set(w["fit"]["modes"]) == {"1", "2", "3"} and "rungs" in w["fit"] and "batch_size_probs" in w["fit"]
    assert len(w["policy"]["robots_at_level"]) == 5 and isinstance(w["predicted"]["cost"], float)
    assert [r["name"] for r in d["comparison"]] == ["robotctl", "best_static", "recorded"]
    for r in d["comparison"]:
        assert r["ci"][0] <= r["cost"] <= r["ci"][1]
    assert d["trace"]["duplicates"] == 0 and d["trace"]["out_of_order"] == 0


def test_html_report_holds_the_plots_and_the_comparison(files: tuple[str, str], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    trace, config = files
    out = tmp_path / "report.html"
    assert main(["replay", trace, "--config", config, "--report", str(out), "--events", "40000"]) == 0
    text = capsys.readouterr().out
    assert "robotctl" in text and "best_static" in text and f"report: {out}" in text
    html = out.read_text()
    images = re.findall(r"<img alt='([^']*)' src='data:image/png;base64,([A-Za-z0-9+/=]+)'>", html)
    assert [a for a, _ in images] == ["Queue, robots and thresholds over time",
                                      "Fitted arrival rate per mode, by refit window",
                                      "Cost: robotctl against the best static fleet and the recorded fleet"]
    import base64

    for _, png in images:
        assert base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"
    table = html[html.index("<h2>Cost comparison</h2>"):]
    table = table[:table.index("</table>")]
    for name in ("robotctl", "best_static", "recorded"):
        assert f"<td class=\"l\">{name}</td>" in table
    assert "http://" not in html and "https://" not in html and "<script" not in html  # opens offline


def test_without_matplotlib_the_report_says_how_to_install(files: tuple[str, str], tmp_path: Path,
                                                          uninstall: Callable[[str], None],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    uninstall("matplotlib")
    trace, config = files
    out = tmp_path / "report.html"
    assert main(["replay", trace, "--config", config, "--report", str(out), "--events", "20000"]) == 0
    err = capsys.readouterr().err
    assert "pip install 'robotctl[reports]'" in err
    html = out.read_text()
    assert "<img" not in html and "robotctl[reports]" in html and "<h2>Cost comparison</h2>" in html


def test_from_and_to_select_the_stretch_replayed(files: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    trace, config = files
    assert main(["replay", trace, "--config", config, "--json", "--from", "1200", "--to", "3000",
                 "--events", "20000"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["span"][1] <= 3000 and d["windows"]
    assert all(1200 <= w["t_end"] <= 3000 for w in d["windows"])  # no refit before --from
    assert d["windows"][0]["t_start"] < 1200  # the events before --from built the fit window
    assert main(["replay", trace, "--config", config, "--from", "3000", "--to", "1200"]) == 2
    assert "--to" in capsys.readouterr().err


def test_text_output_is_for_people_on_an_epoch_stamped_trace(files: tuple[str, str], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 25: a trace stamped in Unix seconds (the agent's own log) printed its windows as epoch seconds
    run together, its spans as 1.79566e+09, and the failed refit after the table. Now: the start as a date,
    every time an offset from it (h:mm:ss), the failed refit in time order among the windows."""
    trace, _ = files
    epoch = 1_795_660_000.0
    shifted = tmp_path / "epoch.jsonl"
    shifted.write_text("".join(json.dumps({**d, "t": d["t"] + epoch}) + "\n"
                               for d in map(json.loads, Path(trace).read_text().splitlines())))
    config = tmp_path / "sidecar.yaml"  # the first refit, at 300 s, has too few deliveries (no cold start)
    config.write_text(SIDECAR.replace("interval_s: 600", "interval_s: 300").replace(
        "min_deliveries: 300", "min_deliveries: 1000, cold_start_deliveries: 0"))
    code = main(["replay", str(shifted), "--config", str(config), "--sim-events", "2000"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert not re.search(r"\d\.\d+e\+\d\d", out), out          # no span in exponent notation
    assert not re.search(r"1795\d{6}", out), out               # no epoch seconds
    assert "from 2026-11-26 " in out and " UTC over 1:00:00" in out, out
    table = out[out.index("window (from the start)"):out.index("cost rate J over")].splitlines()[1:]
    rows = [r for r in table if r.strip()]
    failed = [k for k, r in enumerate(rows) if r.startswith("refit at +")]
    assert failed and all("failed at input" in rows[k] for k in failed), rows
    assert failed[0] == 0 and len(rows) > len(failed) >= 1, rows  # the failed one first, in time order
    assert all(r.startswith("+") for k, r in enumerate(rows) if k not in failed), rows
    assert re.search(r"cost rate J over \+\d+:\d\d to \+1:00:00 \(\d+:\d\d; 95% intervals\)", out), out
