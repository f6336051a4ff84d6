"""The delivery log: append-only JSON Lines, rotation by size, torn tails, durability, failed writes."""

from __future__ import annotations

import asyncio
import errno
import json
import os
from pathlib import Path
from typing import Any

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


class _Unwritable:
    """``os.open`` that refuses to create files in ``directory`` while ``on`` (a read-only or immutable
    directory, which root cannot simulate with chmod)."""

    def __init__(self, directory: Path, real: Any) -> None:
        self.directory, self.real, self.on = str(directory), real, True

    def __call__(self, path: Any, flags: int, *args: Any, **kw: Any) -> int:
        if self.on and flags & os.O_CREAT and str(path).startswith(self.directory):
            raise PermissionError(errno.EACCES, "Permission denied")
        return self.real(path, flags, *args, **kw)


@pytest.mark.parametrize("durability", list(Durability))
async def test_a_failed_rotation_keeps_the_current_file_and_never_writes_a_reused_descriptor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: Durability) -> None:
    header = b'{"t":0.0,"event":"queue","pages":3}\n'
    line_size = len(_line(10))
    log = DeliveryLog(tmp_path, max_bytes=3 * line_size, durability=durability, header=lambda: header)
    log.open()
    for i in range(3):
        log.append(_line(i))
    current = log.current_path
    fake = _Unwritable(tmp_path, os.open)
    monkeypatch.setattr(os, "open", fake)
    with pytest.raises(logmod.LogWriteError):
        log.append(_line(3))
    assert log.fault is not None and "rotate" in log.fault and log.stats().fault == log.fault
    # the file in use stays open: a descriptor opened now (a client socket) does not take its number
    other = tmp_path.parent / f"{tmp_path.name}-other.txt"
    other_fd = fake.real(other, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        assert os.fstat(log._fd).st_ino == current.stat().st_ino
        logmod_time = logmod.time.monotonic
        monkeypatch.setattr(logmod.time, "monotonic", lambda: logmod_time() + 10 * logmod.RETRY_INTERVAL_S)
        with pytest.raises(logmod.LogWriteError):
            log.append(_line(4))
        assert other.read_bytes() == b""
        assert log.retry() is not None  # still unwritable
        fake.on = False  # the directory is writable again
        monkeypatch.setattr(logmod.time, "monotonic", lambda: logmod_time() + 100 * logmod.RETRY_INTERVAL_S)
        assert log.retry() is None and log.fault is None  # rotated by the retry, without traffic
        log.append(_line(5))
    finally:
        os.close(other_fd)
    await log.close()
    assert other.read_bytes() == b""
    files = list_segments(tmp_path)
    assert len(files) == 2 and files[0] == current
    assert [r["t"] for r in read_records(files[0]) if r["event"] == "delivery"] == [0.0, 1.0, 2.0]
    assert files[1].read_bytes() == header + _line(5)
    assert log.faults == 1


async def test_an_unwritable_log_is_said_once_and_retried_at_most_every_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    log = DeliveryLog(tmp_path, max_bytes=len(_line(1)), durability=Durability.NEVER, header=lambda: b"")
    log.open()
    log.append(_line(1))
    fake = _Unwritable(tmp_path, os.open)
    calls = []

    def counting(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        calls.append(path)
        return fake(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", counting)
    with caplog.at_level("ERROR", logger="robotctl.agent.log"):
        for _ in range(50):
            with pytest.raises(logmod.LogWriteError):
                log.append(_line(2))
    assert len(calls) == 1  # one attempt; the others wait for the retry interval
    assert sum("event=log_unwritable" in r.getMessage() for r in caplog.records) == 1
    await log.close()


async def test_a_rotation_never_leaves_a_file_without_its_header(tmp_path: Path, monkeypatch) -> None:
    """The header is written under a temporary name that is renamed into place: a full disk at the header
    (or a kill) leaves no headerless file for the next start to take as the newest."""
    header = b'{"t":0.0,"event":"queue","pages":3}\n'
    log = DeliveryLog(tmp_path, max_bytes=len(_line(1)), durability=Durability.NEVER, header=lambda: header)
    log.open()
    log.append(_line(1))
    real_write = os.write

    def full(fd: int, data: Any) -> int:
        if bytes(data) == header:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(logmod.LogWriteError):
        log.append(_line(2))
    assert [p.name for p in sorted(tmp_path.iterdir())] == ["deliveries-00000001.jsonl"]
    await log.close()


@pytest.mark.parametrize("kind", ["directory", "fifo", "devzero", "dangling"])
@pytest.mark.parametrize("name", ["deliveries-00000002.jsonl", "quarantine.jsonl"])
async def test_a_special_file_named_like_the_log_is_set_aside_not_read(tmp_path: Path, kind: str, name: str) -> None:
    (tmp_path / "deliveries-00000001.jsonl").write_bytes(_line(1) + b"not json\n")
    odd = tmp_path / name
    if kind == "directory":
        odd.mkdir()
    elif kind == "fifo":
        os.mkfifo(odd)
    elif kind == "devzero":
        odd.symlink_to("/dev/zero")
    else:
        odd.symlink_to(tmp_path / "nowhere")
    log = DeliveryLog(tmp_path, durability=Durability.NEVER)
    segments = await asyncio.wait_for(asyncio.to_thread(log.open), 5)
    assert [p.name for p in segments] == ["deliveries-00000001.jsonl"]
    assert [r["t"] for r in log.records(segments[0])] == [1.0]
    assert os.path.lexists(tmp_path / f"{name}.bad-1") and log.stats().set_aside == 1
    log.append(_line(2))
    await log.close()


async def test_a_quarantine_that_cannot_be_written_does_not_stop_the_start(tmp_path: Path, monkeypatch) -> None:
    """A full disk and one bad line: the line is skipped in place (the next start tries again)."""
    seg = tmp_path / "deliveries-00000001.jsonl"
    seg.write_bytes(_line(1) + b"not json\n" + _line(2))
    real_open = open

    def full(path: Any, mode: str = "r", *args: Any, **kw: Any) -> Any:
        if ("a" in mode or "w" in mode) and str(path).startswith(str(tmp_path)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, mode, *args, **kw)

    monkeypatch.setattr("builtins.open", full)
    log = DeliveryLog(tmp_path, durability=Durability.NEVER)
    segments = log.open()
    assert [r["t"] for r in log.records(segments[0])] == [1.0, 2.0]
    monkeypatch.undo()
    assert seg.read_bytes() == _line(1) + b"not json\n" + _line(2)
    await log.close()
