"""The delivery log: append-only JSON Lines, rotation by size, torn tails, durability, failed writes."""

from __future__ import annotations

import asyncio
import errno
import json
import os
from pathlib import Path

import pytest

from robotctl.agent import log as logmod
from robotctl.agent.log import DeliveryLog, Durability, list_segments, read_records
from robotctl.agent.trace import read_trace


def _line(i: int) -> bytes:
    return (json.dumps({"t": float(i), "event": "delivery", "robot": "r1", "pages": 1}) + "\n").encode()


async def test_lines_are_a_trace_file_replay_can_read(tmp_path: Path) -> None:
    log = DeliveryLog(tmp_path, durability=Durability.NEVER)
    assert log.open() == []
    for i in range(5):
        log.append(_line(i))
    await log.close()
    events = read_trace(list_segments(tmp_path)[0])
    assert [e.t for e in events] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert all(e.event == "delivery" and e.robot == "r1" for e in events)


async def test_rotation_by_size_keeps_whole_lines_headers_and_the_newest_files(tmp_path: Path) -> None:
    header_calls = []

    def header() -> bytes:
        header_calls.append(1)
        return b'{"t":0.0,"event":"queue","pages":0}\n'

    line_size = len(_line(10))
    log = DeliveryLog(tmp_path, max_bytes=4 * line_size, keep_files=3, durability=Durability.NEVER, header=header)
    log.open()
    for i in range(10, 40):
        log.append(_line(i))
    await log.close()
    files = list_segments(tmp_path)
    assert len(files) == 3
    for f in files:
        assert f.stat().st_size <= 4 * line_size + len(header())
        assert f.read_bytes().endswith(b"\n")
    times = [r["t"] for f in files for r in read_records(f) if r["event"] == "delivery"]
    assert times == sorted(times) and times[-1] == 39.0
    # every file after the first starts with the checkpoint line
    for f in files:
        assert next(read_records(f))["event"] == "queue"
    assert len(header_calls) >= 3


async def test_reopen_appends_to_the_newest_file_and_cuts_a_torn_tail(tmp_path: Path) -> None:
    log = DeliveryLog(tmp_path, durability=Durability.NEVER)
    log.open()
    log.append(_line(1) + _line(2))
    await log.close()
    path = list_segments(tmp_path)[0]
    with open(path, "ab") as fh:
        fh.write(b'{"t":3.0,"event":"deliv')  # a power loss in the middle of a line
    log = DeliveryLog(tmp_path, durability=Durability.NEVER)
    assert log.open() == [path]
    log.append(_line(4))
    await log.close()
    assert [r["t"] for r in read_records(path)] == [1.0, 2.0, 4.0]


async def test_always_fsyncs_before_commit_returns_and_shares_one_fsync(tmp_path: Path, monkeypatch) -> None:
    calls: list[int] = []
    real = os.fsync

    def counting_fsync(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(logmod.os, "fsync", counting_fsync)
    log = DeliveryLog(tmp_path, durability=Durability.ALWAYS)
    log.open()
    calls.clear()  # opening fsyncs the directory entry
    log.append(_line(1))
    await log.commit()
    assert len(calls) == 1 and log.stats().bytes_synced == log.stats().bytes_written

    async def writer(i: int) -> None:
        log.append(_line(i))
        await log.commit()

    await asyncio.gather(*(writer(i) for i in range(20)))
    assert log.stats().bytes_synced == log.stats().bytes_written
    assert len(calls) < 1 + 20  # concurrent commits shared fsyncs
    await log.close()


async def test_interval_commit_does_not_wait_and_the_flusher_syncs(tmp_path: Path) -> None:
    log = DeliveryLog(tmp_path, durability=Durability.INTERVAL, fsync_interval_s=0.01)
    log.open()
    log.append(_line(1))
    await log.commit()
    assert log.stats().bytes_synced == 0
    task = asyncio.create_task(log.run_flusher())
    for _ in range(200):
        await asyncio.sleep(0.01)
        if log.stats().bytes_synced == log.stats().bytes_written:
            break
    task.cancel()
    assert log.stats().bytes_synced == log.stats().bytes_written
    await log.close()


async def test_a_failed_write_is_cut_back_and_raises(tmp_path: Path, monkeypatch) -> None:
    log = DeliveryLog(tmp_path, durability=Durability.NEVER)
    log.open()
    log.append(_line(1))
    real_write = os.write

    def disk_full(fd: int, data: bytes | memoryview) -> int:
        real_write(fd, bytes(data)[:7])  # part of the line lands, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(logmod.os, "write", disk_full)
    with pytest.raises(OSError):
        log.append(_line(2))
    monkeypatch.setattr(logmod.os, "write", real_write)
    log.append(_line(3))
    await log.close()
    assert [r["t"] for r in read_records(list_segments(tmp_path)[0])] == [1.0, 3.0]


async def test_append_after_close_names_the_state(tmp_path: Path) -> None:
    log = DeliveryLog(tmp_path)
    log.open()
    await log.close()
    with pytest.raises(RuntimeError, match="closed"):
        log.append(_line(1))
