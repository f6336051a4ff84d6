"""Real logs in (issue 12): converters on small samples written by hand from each format's documentation,
several files and rotated directories, gzip, duplicates, events out of order, gaps, and bad lines."""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from robotctl import InputError
from robotctl.agent.convert import convert_heritrix, convert_scrapy, convert_warc, measured_resolution
from robotctl.agent.sources import FORMATS, expand, read_events
from robotctl.cli import main
from robotctl.cli._cmd_replay import FORMATS as CLI_FORMATS

DATA = Path(__file__).parent / "data"


def test_scrapy_log_lines_and_stats() -> None:
    c = convert_scrapy((DATA / "scrapy.log").read_bytes(), "scrapy.log")
    # the 2xx `Crawled` lines, at their whole seconds: 10:11:04 (3), :07 (3), :09, :12
    np.testing.assert_array_equal(c.t - c.t[0], [0, 0, 0, 3, 3, 3, 5, 8])
    assert c.line.tolist() == [8, 9, 10, 15, 16, 17, 19, 21]
    assert c.skipped["crawled with status 404"] == 1 and c.skipped["crawled with status 301"] == 1
    assert c.resolution_s == 1.0 and "too coarse for batch detection" in c.warnings[0]
    s = c.summary
    assert s["response_received_count"] == 10 and s["item_scraped_count"] == 1
    assert s["finish_time"] - s["start_time"] == pytest.approx(9.870117)
    assert s["mean_response_bytes"] == pytest.approx(41231.1)


def test_scrapy_stats_that_disagree_with_the_lines_say_so() -> None:
    text = (DATA / "scrapy.log").read_text().replace("'response_received_count': 10", "'response_received_count': 25")
    c = convert_scrapy(text.encode(), "s.log")
    assert any("25 responses but the log has 10 Crawled lines" in w for w in c.warnings)


def test_heritrix_crawl_log() -> None:
    c = convert_heritrix((DATA / "crawl.log").read_bytes(), "crawl.log")
    assert c.line.tolist() == [2, 3, 4, 5, 8]
    np.testing.assert_allclose(c.t - c.t[0], [0.0, 0.789, 0.792, 0.796, 3.201], atol=1e-6)
    assert c.bytes.tolist() == [1299, 15829, 4210, 2290, 28311]
    assert c.robot == ("#014", "#025", "#025", "#025", "#003")
    assert c.skipped == {"DNS lookups (status 1)": 1, "status 404": 1, "status -61": 1}
    assert c.resolution_s == 0.001 and c.warnings == ()  # milliseconds: fine for batch detection


def test_heritrix_bad_line_names_the_line() -> None:
    data = (DATA / "crawl.log").read_bytes() + b"this is not a crawl.log line\n"
    with pytest.raises(InputError) as info:
        convert_heritrix(data, "crawl.log")
    assert info.value.field == "crawl.log:9"


def test_warc_records() -> None:
    pytest.importorskip("warcio")
    c = convert_warc((DATA / "sample.warc").read_bytes(), "sample.warc")
    assert c.line.tolist() == [3, 4, 5]  # the response records; warcinfo and request skipped
    np.testing.assert_array_equal(c.t - c.t[0], [0, 0, 3])
    assert c.skipped == {"warcinfo records": 1, "request records": 1}
    assert c.resolution_s == 1.0 and "too coarse" in c.warnings[0]


def test_warc_without_warcio_says_how_to_install(uninstall: Callable[[str], None]) -> None:
    uninstall("warcio")
    with pytest.raises(InputError, match=r"robotctl\[warc\]"):
        convert_warc((DATA / "sample.warc").read_bytes(), "sample.warc")


def test_formats_are_detected_from_the_first_bytes(tmp_path: Path) -> None:
    pytest.importorskip("warcio")
    gz = tmp_path / "crawl.log.1.gz"
    gz.write_bytes(gzip.compress((DATA / "crawl.log").read_bytes()))
    for path, fmt, n in ((DATA / "scrapy.log", "scrapy", 8), (gz, "heritrix", 5), (DATA / "sample.warc", "warc", 3)):
        table = read_events([str(path)])
        assert table.quality.formats == {str(path): fmt} and table.n == n
        assert table.kind("delivery").all()
    assert FORMATS == CLI_FORMATS


def test_resolution_is_measured() -> None:
    assert measured_resolution(np.array([1e9, 1e9 + 1, 1e9 + 5])) == 1.0
    assert measured_resolution(np.array([1e9, 1e9 + 0.25, 1e9 + 0.5])) == 0.01
    assert measured_resolution(np.array([0.0, 0.001234])) == 1e-6


# -- several files: order, duplicates, gaps -------------------------------------------------------------

def _lines(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_rotated_directory_overlap_disorder_and_gap(tmp_path: Path) -> None:
    rows = [{"t": float(t), "event": "delivery", "pages": 1, "active": 2} for t in np.arange(0, 100, 0.5)]
    rows += [{"t": 5000.0 + t, "event": "delivery", "pages": 1, "active": 2} for t in np.arange(0, 50, 0.5)]
    logs = tmp_path / "logs"
    logs.mkdir()
    # logrotate's names: crawl.jsonl.2.gz is the oldest; .1 overlaps it by 20 lines (copied twice)
    (logs / "crawl.jsonl.2.gz").write_bytes(gzip.compress(_lines(rows[:120]).encode()))
    first = rows[100:260]
    first[30], first[31] = first[31], first[30]  # two lines out of order
    (logs / "crawl.jsonl.1").write_text(_lines(first))
    (logs / "crawl.jsonl").write_text(_lines(rows[260:]))
    assert [Path(p).name for p in expand([str(logs)])] == ["crawl.jsonl.2.gz", "crawl.jsonl.1", "crawl.jsonl"]
    table = read_events([str(logs)])
    q = table.quality
    assert q.duplicates == 20 and q.out_of_order == 1
    assert table.n == len(rows)
    np.testing.assert_array_equal(table.t, [r["t"] for r in rows])
    assert q.gaps == 1 and q.gap_seconds == pytest.approx(5000.0 - 99.5)
    assert table.where(0).endswith("crawl.jsonl.2.gz:1")
    # the same file given twice: every event of the second copy is a duplicate
    twice = read_events([str(logs / "crawl.jsonl"), str(logs / "crawl.jsonl")])
    assert twice.quality.duplicates == twice.n == len(rows) - 260


def test_identical_lines_inside_one_file_are_kept(tmp_path: Path) -> None:
    """The agent stamps a batch of deliveries with one time: identical lines, distinct deliveries."""
    path = tmp_path / "t.jsonl"
    path.write_text(_lines([{"t": 1.0, "event": "delivery"}] * 3 + [{"t": 2.0, "event": "delivery"}]))
    table = read_events([str(path)])
    assert table.n == 4 and table.quality.duplicates == 0


def test_agent_log_directory_reads_only_the_log(tmp_path: Path) -> None:
    (tmp_path / "deliveries-00000002.jsonl").write_text(_lines([{"t": 3.0}, {"t": 4.0}]))
    (tmp_path / "deliveries-00000001.jsonl").write_text(_lines([{"t": 1.0}, {"t": 2.0}]))
    (tmp_path / "policy.json").write_text('{"robots_at_level": [1]}')
    table = read_events([str(tmp_path)])
    assert table.t.tolist() == [1.0, 2.0, 3.0, 4.0] and len(table.quality.files) == 2


@pytest.mark.parametrize(("content", "where"), [
    ('{"t": 1, "event": "delivery"}\n{"t": 2, "event": "delivery", "pages": -3}\n', "bad.jsonl:2.pages"),
    ('{"t": 1, "event": "delivery"}\n{"t": 2, "event": "delivery", "active": "four"}\n', "bad.jsonl:2.active"),
    ("t,event,pages\n1,delivery,1\n2,delivery,x\n", "bad.csv:3.pages"),
])
def test_a_bad_trace_exits_2_naming_file_line_field(tmp_path: Path, content: str, where: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    name = where.split(":")[0]
    (tmp_path / name).write_text(content)
    config = tmp_path / "sidecar.yaml"
    config.write_text("queue: {capacity: 5}\nrobots: 4\n")
    code = main(["replay", str(tmp_path / name), "--config", str(config)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and f"{tmp_path / where}" in err, err


def test_gap_bound_can_be_given(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(_lines([{"t": float(t)} for t in (0, 1, 2, 50, 51)]))
    assert read_events([str(path)], gap_s=10.0).quality.gaps == 1
    assert read_events([str(path)], gap_s=math.inf).quality.gaps == 0


APACHE = (b'127.0.0.1 - - [10/Oct/2025:13:55:36 +0000] "GET /index.html HTTP/1.1" 200 2326 "-" "Mozilla/5.0"\n'
          b'10.0.0.2 - - [10/Oct/2025:13:55:37 +0000] "GET /a HTTP/1.1" 200 100 "-" "curl/8"\n')


@pytest.mark.parametrize("command", ["replay", "fit"])
def test_a_log_of_no_known_format_is_not_recognised_with_the_choices(
        tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 25: an Apache access log got the CSV reader's "has no column t"; it must get "format not
    recognised" with the --format choices (exit 2, one line, no traceback)."""
    from robotctl.cli import main

    log = tmp_path / "access.log"
    log.write_bytes(APACHE)
    config = Path(__file__).resolve().parents[2] / "examples" / "sidecar.yaml"
    assert main([command, str(log), "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "format not recognised" in err and "has no column t" not in err, err
    choices = ("jsonl", "csv", "scrapy", "heritrix", "warc")
    assert all(c in err for c in choices), err
    if command == "replay":
        assert "give --format, one of: jsonl, csv, scrapy, heritrix, warc" in err, err


def test_traces_are_still_recognised_by_their_first_line(tmp_path: Path) -> None:
    """JSON Lines (after a comment), a CSV header (spaces allowed; without t the CSV reader says so) and an
    empty file stay traces; a line of prose or of a web server's log does not."""
    from robotctl.agent.sources import check_recognised

    for text in (b'# a comment\n{"t": 1.0, "event": "delivery"}\n', b"event, t ,pages\ndelivery,1.0,2\n", b"",
                 b"\n\n", b"time,event\n1.0,delivery\n"):
        check_recognised(text, "x")
    gecko = b'1.2.3.4 - - [x] "GET / HTTP/1.1" 200 5 "-" "Mozilla (KHTML, like Gecko)"\n'
    for text in (APACHE, b"hello world\n", gecko):
        with pytest.raises(InputError, match="format not recognised"):
            check_recognised(text, "x")
