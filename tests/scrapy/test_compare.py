"""bench/scrapy_compare.py in its quickest form (``--quick``: fixed-4 and robotctl-cold on 60 pages), so that
``make scrapy-compare`` cannot rot: both crawls run to their end and every item is accounted for. No figure
is asserted beyond what holds on any machine (the comparison's figures are the benchmark's to print)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "scrapy_compare.py"


@pytest.mark.parametrize(("flags", "words"), [
    (["--only", "fixed-3"], "--only: unknown configuration(s) fixed-3; choose from fixed-1"),
    (["--fixed", "1,two"], "--fixed '1,two': write whole numbers"),
    (["--pages", "5"], "--pages 5: give at least 10 pages"),
    (["-s", "ROBOTCTL_MAX_LOSS"], "write NAME=VALUE"),
])
def test_a_bad_flag_is_one_line_and_exit_2(flags: list[str], words: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH), *flags], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.scrapy
@pytest.mark.slow
def test_the_quick_comparison_runs_both_crawls_to_their_end(tmp_path: Path) -> None:
    out = tmp_path / "runs.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--quick", "--json", str(out), "--workdir", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = {r["name"]: r for r in json.loads(out.read_text())["runs"]}
    assert set(runs) == {"fixed-4", "robotctl-cold"}
    for r in runs.values():
        assert r["offered"] == r["indexed"] + r["lost"] + r["obsolete"] > 0  # every item scraped is accounted for
        assert r["crawl_s"] > 0 and r["j"]["total"] > 0
        assert r["site"]["pages"] == 60
        idle = r["idle"]  # the indexer's idle stretches: within the crawl, in order, apart
        assert idle and all(0.0 <= a < b <= r["crawl_s"] + 0.001 for a, b in idle)
        assert all(b1 <= a2 for (_, b1), (a2, _) in zip(idle, idle[1:], strict=False))
        assert idle[0][0] == 0.0  # nothing to index before the first item
    fixed = runs["fixed-4"]
    # 4 requests at once are within what the site tolerates (6): every page fetched, no pushback
    assert fixed["site"]["served"] == 60 and fixed["site"]["refused_429"] == 0 and fixed["given_up"] == 0
    assert fixed["offered"] == 60
    cold = runs["robotctl-cold"]
    assert cold["scrapy"]["robotctl/robots_registered"] == 16
    assert "| fixed-4 |" in proc.stdout and "| robotctl-cold |" in proc.stdout
    assert "acceptance (robotctl-cold against fixed-4" in proc.stdout
    assert list((tmp_path / ".robotctl" / "site").glob("policy.json"))  # the state a warm crawl starts from
