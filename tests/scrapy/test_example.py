"""The example project (examples/scrapy_demo) runs with one command and keeps the agent's view of the
indexer's queue exact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.scrapy, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scrapy_demo"


def test_the_example_crawls_the_demo_site_under_robotctl(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "run.py", "--duration", "14", "--warmup", "4", "--json", str(out),
                           "--workdir", str(tmp_path), "--quiet"], cwd=EXAMPLE, capture_output=True, text=True,
                          timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "robotctl's cost J" in proc.stdout
    r = json.loads(out.read_text())
    scrapy, agent, totals = r["scrapy"], r["agent"], r["totals"]
    assert scrapy["robotctl/robots_registered"] == 3 and scrapy["robotctl/agent_outages"] == 0
    # every change of the indexer's queue reached the agent, in order: its view is the indexer's
    assert scrapy["robotctl/reports_dropped"] == 0 and scrapy["robotctl/reports_mismatches"] == 0
    assert agent["deliveries"] == totals["offered"] > 50
    assert (agent["lost"], agent["completed"], agent["obsolete"]) == (totals["lost"], totals["indexed"],
                                                                      totals["obsolete"])
    assert r["counts"]["indexed"] > 0 and r["indexer"]["docs"] > 0
    # the site was crawled politely: robots.txt obeyed, one download slot per host
    assert r["site"]["disallowed_hits"] == 0 and r["site"]["robots_txt"] == 12
    m = r["measures"]
    assert 0 < m["mean_active_robots"] <= 3 and 0 <= m["p_starvation"] <= 1
