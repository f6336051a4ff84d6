"""The agent's core without HTTP: recovery from rotated logs, restored policies and robots, agent time
across restarts, exact mode exposure, the sample ring, client time stamps, hysteresis on the clock."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from robotctl.agent.api import Completion, Delivery
from robotctl.agent.app import AGENT, run_in_process
from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig
from robotctl.agent.core import Agent, Ring
from robotctl.agent.log import list_segments
from robotctl.agent.policy import PolicyFit, ThresholdDecision
from robotctl.model import ThresholdPolicy


def _cfg(tmp_path: Path, **sections: Any) -> AgentConfig:
    raw: dict[str, Any] = {"queue": {"capacity": 8}, "robots": {"count": 3, "allow_unregistered": True},
                           "server": {"insecure_loopback": True}, "log": {"dir": str(tmp_path / "log")}}
    for k, v in sections.items():
        raw.setdefault(k, {}).update(v)
    return AgentConfig.from_dict(raw)


async def test_recovery_from_rotated_files_rebuilds_queue_samples_and_robots(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, log={"max_bytes": 4096, "fsync": "never"})
    clock = ManualClock(100.0)
    a = Agent(cfg, clock)
    a.open()
    a.register("r1", None, None)
    rng = np.random.default_rng(3)
    for _ in range(400):
        clock.advance(float(rng.exponential(1.0)))
        if rng.random() < 0.55:
            a.deliver([Delivery("r1", int(rng.integers(1, 4)), None, float(rng.random()))])
        elif rng.random() < 0.8:
            a.complete([Completion(1, float(rng.exponential(0.5)), None)])
        else:
            a.obsolete(1)
    a.set_queue(3)  # a resynchronisation in the middle of a file
    for _ in range(20):
        clock.advance(0.5)
        a.deliver([Delivery(None, 1, None, None)])
    length, totals_n, last_t = a.queue.length, a.totals.deliveries, clock.now()
    window = a.deliveries.since(-np.inf)
    await a.close()
    assert len(list_segments(tmp_path / "log")) > 3  # rotated

    clock2 = ManualClock(last_t + 5.0)  # (a clock set back in between: test_a_clock_set_back_is_reported...)
    b = Agent(cfg, clock2)
    b.open()
    assert b.queue.length == length
    assert b.totals.recovered_deliveries == totals_n
    got = b.deliveries.since(-np.inf)
    for col in ("t", "pages", "mode"):
        assert np.array_equal(got[col], window[col]), col
    assert list(b.actuator.robots) == ["r1"]
    ack = b.deliver([Delivery("r1", 1, None, None)])
    assert ack["t"] == last_t + 5.0
    await b.close()


@pytest.mark.parametrize("ahead_s", [86_400.0, 3_600.0, 9.9e10])
async def test_a_clock_set_back_is_reported_and_never_pins_the_stamps(tmp_path: Path, ahead_s: float) -> None:
    """Issue 23, defect 3: a log written with the clock ahead (a day, an hour, or one line stamped 9.9e10)
    and a start with the right clock used to give every later acknowledgement the log's last time, and
    /v1/status a negative window. The step is reported (a log line, robotctl_clock_steps_total); the stamps
    follow the clock; the queue is restored."""
    cfg = _cfg(tmp_path, log={"fsync": "never"})
    right = 1_000_000.0
    clock = ManualClock(right + ahead_s if ahead_s < 1e9 else right)
    a = Agent(cfg, clock)
    a.open()
    for _ in range(3):
        clock.advance(1.0)
        a.deliver([Delivery(None, 1, None, None)])
    await a.close()
    if ahead_s >= 1e9:  # one line stamped far ahead, the clock right all along
        seg = list_segments(tmp_path / "log")[-1]
        with open(seg, "a") as fh:
            fh.write('{"t": 99000000000.0, "event": "completion", "pages": 1}\n')
    b = Agent(cfg, ManualClock(right + 10.0))
    b.open()
    assert b.queue.length == (3 if ahead_s < 1e9 else 2)
    assert b.clock_steps == 1 and b.clock_step_s < -1000
    stamps = []
    for _ in range(3):
        b.clock.advance(0.5)  # type: ignore[attr-defined]
        stamps.append(b.deliver([Delivery(None, 1, None, None)])["t"])
    assert stamps == [right + 10.5, right + 11.0, right + 11.5]
    status = b.status()
    assert status["observed"]["window_s"] >= 0 and status["uptime_s"] >= 0
    await b.close()


async def test_an_adopted_policy_is_restored_unless_configured_not_to(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    a = Agent(_cfg(tmp_path), clock)
    a.open()
    policy = ThresholdPolicy((3, 3, 2, 2, 1, 1, 1, 1, 1))
    a.adopt(PolicyFit.of(policy), 1.0)
    await a.close()
    b = Agent(_cfg(tmp_path), clock)
    b.open()
    assert b.holder.current.source == "restored" and b.holder.current.policy == policy
    assert b.actuator.mode == 3
    await b.close()
    c = Agent(_cfg(tmp_path, policy={"restore": False}), clock)
    c.open()
    assert c.holder.current.source == "startup" and c.holder.current.policy == ThresholdPolicy.static(3, 8)
    await c.close()


async def test_mode_exposure_is_exact(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    a = Agent(_cfg(tmp_path, policy={"startup": [3, 3, 2, 2, 1, 1, 1, 1, 1]}), clock)
    a.open()
    clock.set(10.0)
    a.deliver([Delivery(None, 2, None, None)])  # i = 2: mode 2
    clock.set(13.0)
    a.deliver([Delivery(None, 3, None, None)])  # i = 5: mode 1
    clock.set(20.0)
    a.complete([Completion(5, None, None)])  # i = 0: mode 3
    exposure = a.mode_exposure(5.0, 25.0)
    assert exposure == pytest.approx({3: 5.0 + 5.0, 2: 3.0, 1: 7.0})
    await a.close()


def test_ring_keeps_the_newest_rows_in_time_order() -> None:
    ring = Ring(5, ("t", "x"))
    for k in range(3):
        ring.append(t=float(k), x=10.0 * k)
    ring.extend({"t": [3.0, 4.0, 5.0, 6.0], "x": [30.0, 40.0, 50.0, 60.0]}, 4)
    got = ring.since(-np.inf)
    assert got["t"].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert ring.since(4.0)["x"].tolist() == [40.0, 50.0, 60.0]
    ring.extend({"t": [float(k) for k in range(10, 22)]}, 12)  # more than the capacity, one column missing
    got = ring.since(-np.inf)
    assert got["t"].tolist() == [17.0, 18.0, 19.0, 20.0, 21.0] and np.isnan(got["x"]).all()


async def test_client_time_source_fits_the_clients_stamps(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    a = Agent(_cfg(tmp_path, refit={"time_source": "client", "min_deliveries": 3}), clock)
    a.open()
    clock.set(5.0)
    a.deliver([Delivery(None, 1, None, 1.0), Delivery(None, 1, None, 3.0), Delivery(None, 1, None, 2.0)])
    inp = a.refit_input(clock.now())
    assert not isinstance(inp, str)
    assert inp.delivery_times.tolist() == [1.0, 2.0, 3.0]
    a.deliver([Delivery(None, 1, None, None)])  # one without: the agent's stamps for the window
    inp = a.refit_input(clock.now())
    assert not isinstance(inp, str) and inp.delivery_times.tolist() == [5.0] * 4
    await a.close()


async def test_dwell_defers_a_change_until_the_clock_says_so(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    cfg = _cfg(tmp_path, server={"port": 0}, robots={"dwell_s": 10.0},
               policy={"startup": [3, 3, 2, 2, 1, 1, 1, 1, 1]})
    async with run_in_process(cfg, clock=clock) as (_, app):
        a = app[AGENT]
        clock.set(1.0)
        a.deliver([Delivery(None, 2, None, None)])
        assert a.actuator.mode == 2  # first change: nothing to dwell on
        clock.set(4.0)
        a.deliver([Delivery(None, 3, None, None)])
        assert a.actuator.mode == 2 and a.actuator.deferred_until == 11.0 and a.desired() == 1
        clock.set(10.9)
        await ManualClock.settle()
        assert a.actuator.mode == 2
        clock.set(11.0)
        for _ in range(20):
            await asyncio.sleep(0)
        assert a.actuator.mode == 1
        assert a.mode_exposure(0.0, 12.0) == pytest.approx({3: 1.0, 2: 10.0, 1: 1.0})


async def test_configured_hysteresis_resumes_robots_two_levels_below(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    cfg = _cfg(tmp_path, robots={"dwell_s": 0, "hysteresis": 2},
               policy={"startup": [3, 3, 2, 2, 1, 1, 1, 1, 1]})
    a = Agent(cfg, clock)
    a.open()
    modes = []
    for pages_in, pages_out in ((2, 0), (2, 0), (1, 0), (0, 1), (0, 1), (0, 1), (0, 1), (0, 1)):
        clock.advance(1.0)
        if pages_in:
            a.deliver([Delivery(None, pages_in, None, None)])
        else:
            a.complete([Completion(pages_out, None, None)])
        modes.append((a.queue.length, a.actuator.mode))
    # parked as the policy says on the way up (2 at 2 pages, 1 at 4); on the way down r(i) alone would
    # resume the second robot at 3 pages and the third at 1: two levels lower, 1 page and (past the
    # bottom) the empty queue
    assert modes == [(2, 2), (4, 1), (5, 1), (4, 1), (3, 1), (2, 1), (1, 2), (0, 3)]
    decision = a.policy.decision
    assert isinstance(decision, ThresholdDecision) and decision.hysteresis == 2
    await a.close()


# -- issue 11, finding 2: one bad line in the delivery log never stops a start -------------------------------
BAD_LINES = [
    b'{"t": "x", "event": "delivery"}',
    b'{"t": null, "event": "delivery"}',
    b'{"t": 5.0, "event": "delivery", "pages": "x"}',
    b'{"t": 5.0, "event": "delivery", "pages": 1e400}',
    b'{"t": 5.0, "event": "completion", "pages": 1, "service_s": 1e308}',
    b'{"t": 5.0, "event": "delivery", "pages": 2, "active": "three"}',
    b'{"t": 5.0, "event": "teleport"}',
    b'{"t": 5.0, "event": "delivery", "client_t": 1e300}',
    b'[1, 2, 3]',
    b'{"t": 5.0, "event": "delivery", "robot": ["r1"]}',
    b"\xff\xfe not json",
    b"[" * 5000 + b"]" * 5000,
]


@pytest.mark.parametrize("newest", [True, False], ids=["newest_file", "older_file"])
async def test_bad_log_lines_are_quarantined_counted_and_the_start_goes_on(tmp_path: Path, newest: bool) -> None:
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    good = [b'{"t": %d.0, "event": "delivery", "robot": "r1", "pages": 1, "active": 3}' % t for t in range(1, 6)]
    lines = good[:2] + BAD_LINES + good[2:]
    if newest:
        (log_dir / "deliveries-00000001.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    else:
        (log_dir / "deliveries-00000001.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        (log_dir / "deliveries-00000002.jsonl").write_bytes(b'{"t": 6.0, "event": "queue", "pages": 5}\n')
    cfg = _cfg(tmp_path, refit={"window_s": 1e6, "drift_window_s": 60.0})
    a = Agent(cfg, ManualClock(10.0))
    a.open()  # raised (a traceback and exit 1, a crash loop under systemd) on main
    assert a.totals.recovered_deliveries == 5
    assert a.log_stats().quarantined == len(BAD_LINES)
    quarantined = [json.loads(x) for x in (log_dir / "quarantine.jsonl").read_text().splitlines()]
    assert [q["line"] for q in quarantined] == list(range(3, 3 + len(BAD_LINES)))
    assert {q["reason"] for q in quarantined} >= {"bad_t", "bad_pages", "bad_service_s", "invalid_json",
                                                  "bad_event", "not_an_object", "bad_active", "bad_client_t"}
    await a.close()
    # moved aside, not copied: a second start finds nothing more to quarantine
    b = Agent(cfg, ManualClock(20.0))
    b.open()
    assert b.log_stats().quarantined == 0 and b.totals.recovered_deliveries == 5
    assert len((log_dir / "quarantine.jsonl").read_text().splitlines()) == len(BAD_LINES)
    await b.close()


async def test_quarantined_lines_are_on_metrics_and_status(tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    log_dir = tmp_path / "log"
    log_dir.mkdir()
    (log_dir / "deliveries-00000001.jsonl").write_bytes(b'{"t": 1.0, "event": "delivery"}\n' + BAD_LINES[0] + b"\n")
    cfg = _cfg(tmp_path, server={"port": 0, "insecure_loopback": True})
    async with run_in_process(cfg) as (url, _):
        import aiohttp

        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/metrics") as r:
                text = await r.text()
            async with s.get(url + "/v1/status") as r:
                status = await r.json()
    values = {smp.name: smp.value for fam in text_string_to_metric_families(text) for smp in fam.samples}
    assert values["robotctl_log_quarantined_lines_total"] == 1
    assert status["log"]["quarantined"] == 1


async def test_the_agents_own_lines_are_never_quarantined(tmp_path: Path) -> None:
    """Every kind of line the agent writes (deliveries, losses, completions, obsolete drops, queue checkpoints,
    park and resume, policy and refit marks) passes the recovery's validation."""
    cfg = _cfg(tmp_path, log={"max_bytes": 4096, "fsync": "never"}, robots={"count": 3, "dwell_s": 0.0})
    clock = ManualClock(100.0)
    a = Agent(cfg, clock)
    a.open()
    a.register("r1", None, None)
    a.register("r2", None, None)
    for k in range(60):
        clock.advance(0.5)
        a.deliver([Delivery("r1", 1 + k % 3, 1000 + k, float(k))])
        if k % 3 == 0:
            a.complete([Completion(2, 0.4, 2048)])
        if k % 7 == 0:
            a.obsolete(1)
    a.set_queue(2)
    a.adopt(PolicyFit.of(ThresholdPolicy((3, 3, 2, 2, 1, 1, 1, 1, 1))), clock.now())
    a.journal.refit(clock.now(), "test")
    await a.close()
    kinds = {json.loads(x)["event"] for p in list_segments(tmp_path / "log") for x in p.read_text().splitlines()}
    assert {"delivery", "loss", "completion", "obsolete", "queue", "park", "policy", "refit"} <= kinds
    b = Agent(cfg, ManualClock(200.0))
    b.open()
    assert b.log_stats().quarantined == 0
    await b.close()


async def test_a_file_without_its_queue_header_does_not_reset_the_queue(tmp_path: Path) -> None:
    """Issue 23, defect 2: a valid deliveries-00000001.jsonl (header and 53 deliveries, K = 5) and an empty
    deliveries-00000002.jsonl (a kill mid-rotation) restarted with queue 0 and last_t = -inf."""
    cfg = _cfg(tmp_path, queue={"capacity": 5}, log={"fsync": "never"})
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    lines = ['{"t": 10.0, "event": "queue", "pages": 2, "active": 1}']
    lines += [f'{{"t": {11.0 + i}, "event": "delivery", "pages": 1, "active": 1}}' for i in range(53)]
    lines += ['{"t": 70.0, "event": "completion", "pages": 1}']
    (log_dir / "deliveries-00000001.jsonl").write_text("\n".join(lines) + "\n")
    (log_dir / "deliveries-00000002.jsonl").write_text("")
    a = Agent(cfg, ManualClock(100.0))
    a.open()
    assert a.queue.length == 4  # full at K = 5, one page indexed since
    assert a.totals.recovered_deliveries == 53
    await a.close()
    # and a headerless file with lines of its own: they count on top of the previous file's checkpoint
    (log_dir / "deliveries-00000003.jsonl").write_text('{"t": 120.0, "event": "completion", "pages": 2}\n')
    b = Agent(cfg, ManualClock(130.0))
    b.open()
    assert b.queue.length == 2
    await b.close()


@pytest.mark.parametrize("text", ['{"robots_at_level": [1, 1, 1, 1, 1, 1], "fit": [1, 2]}',
                                  '{"robots_at_level": [1, 1, 1, 1, 1, 1], "fit": "abc"}',
                                  '{"robots_at_level": [1, 1, 1, 1, 1, 1], "version": "x"}',
                                  '[1, 2]', '{"robots_at_level": "x"}', "not json"])
async def test_a_corrupt_policy_file_is_set_aside_and_the_start_goes_on(tmp_path: Path, text: str) -> None:
    cfg = _cfg(tmp_path, queue={"capacity": 5})
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "policy.json").write_text(text)
    a = Agent(cfg, ManualClock(0.0))
    a.open()
    assert a.policy.source == "startup"
    assert (tmp_path / "log" / "policy.json.bad-1").read_text() == text
    assert a.state_files_set_aside == 1
    await a.close()


@pytest.mark.parametrize("kind", ["directory", "garbage"])
async def test_a_robots_file_that_cannot_be_read_is_set_aside(tmp_path: Path, kind: str) -> None:
    cfg = _cfg(tmp_path)
    (tmp_path / "log").mkdir()
    path = tmp_path / "log" / "robots.json"
    if kind == "directory":
        path.mkdir()
    else:
        path.write_text("{not json")
    a = Agent(cfg, ManualClock(0.0))
    a.open()
    assert os.path.lexists(str(path) + ".bad-1") and a.state_files_set_aside == 1
    await a.close()


async def test_robots_are_restored_only_as_the_api_would_register_them(tmp_path: Path) -> None:
    """Issue 23, defect 5: ids the API refuses (a JSON null read back as "None", 10,000 characters, a
    newline) and records without their key's hash (anyone could take those robots) are not restored."""
    cfg = _cfg(tmp_path, robots={"count": 8})
    (tmp_path / "log").mkdir()
    key = "ab" * 32
    records = [{"robot": "ok", "rank": 1, "key_sha256": key}, {"robot": None, "rank": 2, "key_sha256": key},
               {"robot": "x" * 10_000, "rank": 3, "key_sha256": key}, {"robot": "e\n", "rank": 4, "key_sha256": key},
               {"robot": "keyless", "rank": 5}, {"robot": "shortkey", "rank": 6, "key_sha256": "ab"},
               {"robot": "badrank", "rank": "7", "key_sha256": key}]
    (tmp_path / "log" / "robots.json").write_text(json.dumps(records))
    a = Agent(cfg, ManualClock(0.0))
    a.open()
    assert list(a.actuator.robots) == ["ok"]
    await a.close()


async def test_registrations_write_robots_json_off_the_loop_and_coalesced(tmp_path: Path, monkeypatch) -> None:
    """Issue 23, defect 6: each registration rewrote and fsynced all of robots.json on the event loop."""
    import threading

    from robotctl.agent import recovery

    cfg = _cfg(tmp_path, robots={"count": 64})
    writes: list[tuple[str, int]] = []
    real = recovery.write_robot_records

    def spy(path: Path, records: list[dict[str, Any]]) -> None:
        writes.append((threading.current_thread().name, len(records)))
        real(path, records)

    monkeypatch.setattr(recovery, "write_robot_records", spy)
    monkeypatch.setattr("robotctl.agent.fleet.write_robot_records", spy)
    a = Agent(cfg, ManualClock(0.0))
    a.open()
    loop_thread = threading.current_thread().name
    for i in range(60):
        a.register(f"r{i}", None, None)
    await asyncio.sleep(0.2)
    assert writes and all(name != loop_thread for name, _ in writes)
    assert len(writes) < 60  # coalesced
    assert writes[-1][1] == 60
    await a.close()
    saved = json.loads((tmp_path / "log" / "robots.json").read_text())
    assert sorted(r["robot"] for r in saved) == sorted(f"r{i}" for i in range(60))


async def test_pages_given_up_count_in_the_observed_cost_like_pages_lost(tmp_path: Path) -> None:
    """POST /v1/given_up's walk: logged, counted, outside the ratios (never offered to the indexer), in J at the
    loss weight; a restart reads the line back without touching the queue."""
    cfg = _cfg(tmp_path, costs={"loss": 7.0}, log={"fsync": "never"})
    clock = ManualClock(0.0)
    a = Agent(cfg, clock)
    a.open()
    for _ in range(40):
        clock.advance(0.5)
        a.deliver([Delivery(None, 1, None, None)])
        clock.advance(0.25)
        a.complete([Completion(1, 0.2, None)])
    before = a.observed()
    ack = a.given_up(4)
    after = a.observed()
    assert ack["given_up"] == 4 and a.totals.given_up == 4 and a.queue.length == before.offered_pages - 40
    assert after.given_up_pages == 4 and before.given_up_pages == 0
    assert (after.p_loss, after.offered_pages, after.cost_model) == (before.p_loss, before.offered_pages,
                                                                    before.cost_model)
    assert before.cost == pytest.approx(before.cost_model)
    assert after.cost == pytest.approx(after.cost_model + 7.0 * 4 / after.window_s)
    assert after.cost > before.cost
    length = a.queue.length
    await a.close()
    lines = [json.loads(x) for p in list_segments(tmp_path / "log") for x in p.read_text().splitlines()]
    assert [x["pages"] for x in lines if x["event"] == "given_up"] == [4]
    b = Agent(cfg, ManualClock(clock.now() + 1.0))
    b.open()
    assert b.queue.length == length and b.log.quarantined == 0
    await b.close()


@pytest.mark.parametrize("time_source", ["agent", "client"])
async def test_a_delivery_from_a_robot_parked_since_counts_it_as_working_until_then(
        tmp_path: Path, time_source: str) -> None:
    """A fetch under way when its robot was parked (a Scrapy crawl's downloads in flight finish) keeps the
    robot in the fleet's mode until its delivery: the fit's trajectory and each delivery's mode count it
    there, with its time; unnamed deliveries and a resumed robot's do not extend anything. On the client's
    clock the fit reads the same modes (and the time in each, as the trajectory is on the agent's)."""
    clock = ManualClock(0.0)
    a = Agent(_cfg(tmp_path, robots={"dwell_s": 0, "allow_unregistered": False},
                   policy={"startup": [3, 3, 1, 1, 1, 1, 1, 1, 1]},
                   refit={"min_deliveries": 2, "cold_start_deliveries": 0, "time_source": time_source}), clock)
    a.open()
    for rid in ("r1", "r2", "r3"):
        a.fleet.register(rid, None, None)

    def batch(*robots: str | None) -> list[Delivery]:
        return [Delivery(r, 1, None, clock.now() - 0.1) for r in robots]

    clock.set(1.0)
    a.deliver(batch("r1", "r2"))  # i = 2: mode 1, r2 and r3 parked
    assert a.actuator.mode == 1
    clock.set(2.0)
    a.deliver(batch("r3", None))
    clock.set(3.0)
    a.deliver(batch("r2", "r1"))
    clock.set(4.0)
    a.deliver(batch(None))
    changes = a.modes.changes(0.0, 5.0)
    assert changes is not None
    assert list(changes[1]) == [3, 2, 1]
    assert np.allclose(changes[0], [0.0, 2.0, 3.0])
    assert a.modes.exposure(0.0, 5.0) == pytest.approx({3: 2.0, 2: 1.0, 1: 2.0})
    times = a.deliveries.since(-np.inf)["t"]
    modes = a.modes.at(times)
    assert modes is not None and list(modes) == [3, 3, 3, 3, 2, 2, 1]
    # the fit window reads the same modes
    inp = a.refit_input(5.0)
    assert not isinstance(inp, str), inp
    assert list(inp.modes) == list(modes)
    assert inp.mode_exposure_s == pytest.approx({3: 1.0, 2: 1.0, 1: 2.0})  # from the first delivery
    if time_source == "agent":
        assert inp.mode_changes is not None and list(inp.mode_changes[1]) == [3, 2, 1]
    else:
        assert inp.mode_changes is None and np.allclose(inp.delivery_times, times - 0.1)
    await a.close()


async def test_a_restart_rebuilds_the_fleets_mode_history_from_the_log(tmp_path: Path) -> None:
    """A refit after a restart reads the recovered deliveries on the fleet's trajectory, drains included,
    with their time per mode; the time the agent was down counts in mode 0 (in no mode the fit reads).
    Without it their pages counted in their logged modes with none of their time (a warm Scrapy crawl
    fitted one robot at 7.6 items/s)."""
    clock = ManualClock(0.0)
    cfg = _cfg(tmp_path, robots={"dwell_s": 0, "allow_unregistered": False},
               policy={"startup": [3, 3, 1, 1, 1, 1, 1, 1, 1]},
               refit={"min_deliveries": 2, "cold_start_deliveries": 0})
    a = Agent(cfg, clock)
    a.open()
    for rid in ("r1", "r2", "r3"):
        a.fleet.register(rid, None, None)
    for t, robots in ((1.0, ("r1", "r2")), (2.0, ("r3", None)), (3.0, ("r2", "r1")), (4.0, (None,))):
        clock.set(t)
        a.deliver([Delivery(r, 1, None, None) for r in robots])
    live = a.refit_input(4.0)
    assert not isinstance(live, str)
    await a.close()

    clock.set(10.0)
    b = Agent(cfg, clock)
    b.open()
    clock.set(11.0)
    inp = b.refit_input(11.0)
    assert not isinstance(inp, str), inp
    assert list(inp.modes) == list(live.modes) == [3, 3, 3, 3, 2, 2, 1]
    assert inp.mode_changes is not None
    epochs, modes = inp.mode_changes
    assert list(modes) == [3, 2, 1, 0, b.actuator.mode] and np.allclose(epochs, [1.0, 2.0, 3.0, 4.0, 10.0])
    exposure = b.modes.exposure(1.0, 11.0)
    assert exposure[3] == pytest.approx(1.0) and exposure[2] == pytest.approx(1.0)
    assert exposure[0] == pytest.approx(6.0)
    await b.close()
