"""The delivery log: append-only JSON Lines in the trace format (docs/ARCHITECTURE.md), rotated by size.

Files are ``deliveries-00000001.jsonl``, ``deliveries-00000002.jsonl``, ... in one directory; the
highest number is the one being written. ``robotctl fit`` reads them unchanged, one file at a time
(:mod:`agent.trace`). A new file starts with a ``queue`` line that states the queue length at that
moment, so that a restart rebuilds the queue view from the newest file alone.

Durability (``log.fsync``), and what survives what:

``always``
    Every acknowledgement waits for an fsync that covers its lines. Concurrent requests share one
    fsync (group commit), so throughput stays high while each ack is durable against power loss.
``interval``
    Lines are written to the file (the kernel's page cache) before the ack and fsynced every
    ``fsync_interval_ms``. A crash or kill of the agent loses nothing acknowledged; a power loss or
    kernel crash may lose the last interval.
``never``
    Lines are written before the ack; the kernel flushes when it likes. Same guarantee against a
    crash of the agent as ``interval``.

A write that fails (disk full) is cut back to the last whole line and raises :class:`LogWriteError` (an
``OSError``); nothing of it is acknowledged. A torn last line left by a power loss is cut off when the log
is reopened. A line that does not parse or validate (a hand edit, a disk error, a line an older version
accepted, such as ``"service_s": 1e308``) is moved to ``quarantine.jsonl`` in the same directory, with its
file, line number and reason, when the file is read for recovery; it is counted
(``robotctl_log_quarantined_lines_total``) and logged, and the start goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robotctl import InputError

from .trace import EVENT_KINDS

LOG = logging.getLogger("robotctl.agent.log")

PREFIX = "deliveries-"
SUFFIX = ".jsonl"
_NAME = re.compile(r"^deliveries-(\d{8})\.jsonl$")


class Durability(enum.Enum):
    """When lines reach the disk; see the module docstring."""

    #: fsync before every acknowledgement (group commit)
    ALWAYS = "always"
    #: fsync every ``fsync_interval_ms``
    INTERVAL = "interval"
    #: never fsync explicitly
    NEVER = "never"


def check_directory(directory: str | Path, *, create: bool = True, field: str = "log.dir") -> None:
    """Refuse a log directory that cannot hold the log: a file, unwritable, or impossible to create
    (``create=False`` checks without creating anything, as ``robotctl serve --check`` does)."""
    path = Path(directory)
    if "\x00" in str(directory):
        raise InputError(field, f"{directory!r} holds a NUL character", "give a directory's path")
    if path.exists() and not path.is_dir():
        raise InputError(field, f"{directory} is a file, not a directory", "point log.dir at a directory (or a "
                         "path to create)")
    if not path.exists():
        parent = next((p for p in path.parents if p.exists()), Path("."))
        if not parent.is_dir():
            raise InputError(field, f"{directory} cannot be created: {parent} is a file", "point log.dir elsewhere")
        if not create:
            if not os.access(parent, os.W_OK | os.X_OK):
                raise InputError(field, f"{directory} cannot be created: {parent} is not writable",
                                 "create it, or point log.dir at a writable place")
            return
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(field, f"{directory} cannot be created ({exc.strerror})",
                             "create it, or point log.dir at a writable place") from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError(field, f"{directory} is not writable by this user", "fix its owner or permissions")


def segment_name(seq: int) -> str:
    return f"{PREFIX}{seq:08d}{SUFFIX}"


def list_segments(directory: Path) -> list[Path]:
    """Log files in ``directory``, oldest first."""
    if not directory.is_dir():
        return []
    found = []
    for p in directory.iterdir():
        m = _NAME.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


class LogWriteError(OSError):
    """Writing or syncing the delivery log failed (disk full, I/O error); nothing of it was acknowledged.

    The HTTP layer answers 503 for this error only: any other ``OSError`` (a client that went away while
    its body was read) is not the disk's fault.
    """


#: Events a log line may hold: the trace format's (``queue`` checkpoints, ``refit`` and ``policy`` marks
#: included), one list for the writer, the readers and this check.
LOG_EVENTS = frozenset(EVENT_KINDS)
#: Bounds of a valid line (they match what the API accepts; see robotctl/agent/api.py).
_MAX_T = 1e12
_MAX_COUNT = 1 << 50
_MAX_SERVICE_S_PER_PAGE = 86_400.0
#: Quarantined lines in which each is logged on its own (then one summary per file).
_LOGGED_PER_FILE = 10
QUARANTINE_FILE = "quarantine.jsonl"


def _number(v: Any, *, integer: bool = False, minimum: float = 0.0, maximum: float = _MAX_T) -> bool:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    if isinstance(v, float) and not (math.isfinite(v) and (not integer or v.is_integer())):
        return False
    return minimum <= v <= maximum


def record_problem(obj: Any) -> str | None:
    """Why ``obj`` (one parsed log line) cannot be recovered from, or None when it can: ``t`` a finite
    time, ``event`` a known kind, and ``pages``, ``bytes``, ``service_s``, ``client_t``, ``active`` of the
    types and within the bounds the API accepts."""
    if not isinstance(obj, dict):
        return "not_an_object"
    if not _number(obj.get("t"), minimum=-_MAX_T):
        return "bad_t"
    if obj.get("event") not in LOG_EVENTS:
        return "bad_event"
    pages = obj.get("pages", 1)
    if not _number(pages, integer=True, maximum=_MAX_COUNT):
        return "bad_pages"
    for key, integer, lo, hi in (("bytes", False, 0.0, float(_MAX_COUNT)),
                                 ("service_s", False, 0.0, _MAX_SERVICE_S_PER_PAGE * max(1, int(pages))),
                                 ("client_t", False, -_MAX_T, _MAX_T), ("active", True, 0.0, float(_MAX_COUNT))):
        if key in obj and not _number(obj[key], integer=integer, minimum=lo, maximum=hi):
            return f"bad_{key}"
    robot = obj.get("robot")
    if robot is not None and not isinstance(robot, str):
        return "bad_robot"
    return None


def _parse_line(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None, "invalid_json"
    problem = record_problem(obj)
    return (obj, None) if problem is None else (None, problem)


def _lines(path: Path) -> Iterator[tuple[int, bytes, dict[str, Any] | None, str | None]]:
    """(line number, raw line, record or None, problem or None) of every line that is not blank."""
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            if raw.strip():
                yield (n, raw, *_parse_line(raw))


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """The valid records of one log file (:func:`record_problem`); an invalid line is skipped with a
    warning. (:meth:`DeliveryLog.records` moves such lines to the quarantine file instead.)"""
    for n, _, obj, problem in _lines(path):
        if obj is None:
            LOG.warning("event=log_line_skipped file=%s line=%d reason=%s", path.name, n, problem)
            continue
        yield obj


@dataclass(frozen=True)
class LogStats:
    """What /v1/status shows about the log."""

    directory: str
    current_file: str
    files: int
    bytes_written: int
    bytes_synced: int
    fsync: str
    fsyncs: int
    quarantined: int = 0


class DeliveryLog:
    """Append-only, size-rotated JSON Lines with a durability policy.

    Parameters
    ----------
    directory : Path
        Created if missing.
    max_bytes : int
        A file is rotated before a write would take it past this size.
    keep_files : int
        Files kept; older ones are deleted at rotation.
    durability : Durability
    fsync_interval_s : float
        Period of the background fsync for :attr:`Durability.INTERVAL`.
    header : callable, optional
        Returns the bytes that open each new file (the agent's ``queue`` checkpoint line).
    """

    def __init__(self, directory: Path, *, max_bytes: int = 64 << 20, keep_files: int = 16,
                 durability: Durability = Durability.INTERVAL, fsync_interval_s: float = 0.2,
                 header: Callable[[], bytes] | None = None) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.keep_files = keep_files
        self.durability = durability
        self.fsync_interval_s = fsync_interval_s
        self.header = header
        self._fd = -1
        self._seq = 0
        self._size = 0
        self._written = 0  # bytes written since open, all files
        self._synced = 0  # bytes known durable
        self._fsyncs = 0
        self._files = 0
        self._sync_task: asyncio.Future[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self.quarantined = 0  # lines moved to the quarantine file since open
        self._newest: tuple[Path, list[dict[str, Any]]] | None = None

    # -- life cycle ----------------------------------------------------------------------------------
    def open(self) -> list[Path]:
        """Open the newest file for appending (cutting a torn tail) or start the first one.

        Returns the existing files, oldest first, for recovery; read them before appending.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        segments = list_segments(self.directory)
        if segments:
            newest = segments[-1]
            self._seq = int(_NAME.match(newest.name).group(1))  # type: ignore[union-attr]
            self._cut_torn_tail(newest)
            # scrubbed before it is opened for appending: the scrub replaces the file
            self._newest = (newest, self._scrub(newest))
            self._fd = os.open(newest, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._size = os.fstat(self._fd).st_size
        else:
            self._seq = 0
            self._start_file(write_header=False)
        self._files = len(list_segments(self.directory))
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="robotctl-fsync")
        return segments

    def records(self, path: Path) -> list[dict[str, Any]]:
        """The valid records of one of the files :meth:`open` returned, oldest first; every line that does not
        parse or validate (:func:`record_problem`) is moved to the quarantine file, counted and logged, so
        that one bad line never stops a start."""
        if self._newest is not None and self._newest[0] == path:
            records = self._newest[1]
            self._newest = None
            return records
        return self._scrub(path)

    def _scrub(self, path: Path) -> list[dict[str, Any]]:
        good: list[dict[str, Any]] = []
        bad: list[tuple[int, bytes, str]] = []
        kept: list[bytes] = []
        for n, raw, obj, problem in _lines(path):
            if obj is None:
                bad.append((n, raw, problem or "invalid"))
            else:
                good.append(obj)
                kept.append(raw if raw.endswith(b"\n") else raw + b"\n")
        if bad:
            self._quarantine(path, bad, kept)
        return good

    def _quarantine(self, path: Path, bad: list[tuple[int, bytes, str]], kept: list[bytes]) -> None:
        """Append the bad lines to the quarantine file (synced), then replace ``path`` by its good lines."""
        lines = [json.dumps({"file": path.name, "line": n, "reason": reason,
                             "text": raw.rstrip(b"\n").decode("utf-8", "backslashreplace")}) + "\n"
                 for n, raw, reason in bad]
        qpath = self.directory / QUARANTINE_FILE
        with open(qpath, "a", encoding="utf-8") as fh:
            fh.writelines(lines)
            fh.flush()
            os.fsync(fh.fileno())
        tmp = path.with_name(path.name + ".scrub")
        with open(tmp, "wb") as fh:
            fh.writelines(kept)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        self.quarantined += len(bad)
        for n, _, reason in bad[:_LOGGED_PER_FILE]:
            LOG.warning("event=log_line_quarantined file=%s line=%d reason=%s to=%s", path.name, n, reason,
                        QUARANTINE_FILE)
        if len(bad) > _LOGGED_PER_FILE:
            LOG.warning("event=log_lines_quarantined file=%s lines=%d to=%s", path.name, len(bad), QUARANTINE_FILE)

    def _cut_torn_tail(self, path: Path) -> None:
        size = path.stat().st_size
        if size == 0:
            return
        with open(path, "rb+") as fh:
            back = min(size, 1 << 16)
            fh.seek(size - back)
            tail = fh.read()
            if tail.endswith(b"\n"):
                return
            cut = tail.rfind(b"\n")
            keep = size - back + cut + 1 if cut >= 0 else (0 if back == size else size - back)
            LOG.warning("event=log_torn_tail file=%s cut_bytes=%d", path.name, size - keep)
            fh.truncate(keep)
            fh.flush()
            os.fsync(fh.fileno())

    def _start_file(self, *, write_header: bool = True) -> None:
        self._seq += 1
        path = self.directory / segment_name(self._seq)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._files += 1
        with contextlib.suppress(OSError):
            dfd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        if write_header and self.header is not None:
            self._write(self.header())

    def _rotate(self) -> None:
        if self.durability is not Durability.NEVER:
            os.fsync(self._fd)
            self._fsyncs += 1
        os.close(self._fd)
        self._synced = self._written
        self._start_file()
        segments = list_segments(self.directory)
        for old in segments[: max(0, len(segments) - self.keep_files)]:
            with contextlib.suppress(OSError):
                old.unlink()
                LOG.info("event=log_file_deleted file=%s", old.name)
        self._files = min(len(segments), self.keep_files)
        LOG.info("event=log_rotated file=%s", segment_name(self._seq))

    async def close(self) -> None:
        """Flush, fsync (unless ``never``) and close."""
        if self._sync_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._sync_task)
        if self._fd >= 0:
            if self.durability is not Durability.NEVER:
                os.fsync(self._fd)
                self._fsyncs += 1
                self._synced = self._written
            os.close(self._fd)
            self._fd = -1
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    # -- writing -------------------------------------------------------------------------------------
    def append(self, data: bytes) -> None:
        """Write whole lines (``data`` ends with a newline); rotates first when the file is full.

        Raises :class:`LogWriteError` if the write fails; the file is then cut back to where it was.
        """
        if self._fd < 0:
            raise RuntimeError("DeliveryLog.append: the log is closed; open() it first")
        if self._size > 0 and self._size + len(data) > self.max_bytes:
            try:
                self._rotate()
            except LogWriteError:
                raise
            except OSError as exc:
                raise LogWriteError(exc.errno, exc.strerror) from exc
        self._write(data)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        done = 0
        try:
            while done < len(view):
                done += os.write(self._fd, view[done:])
        except OSError as exc:
            # part of the data may have landed even when write() reports nothing: cut back to the last
            # whole line we know of
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
            raise LogWriteError(exc.errno, exc.strerror) from exc
        self._size += done
        self._written += done

    async def commit(self) -> None:
        """Return once everything appended so far is as durable as the policy promises."""
        if self.durability is not Durability.ALWAYS:
            return
        target = self._written
        while self._synced < target:
            if self._sync_task is None or self._sync_task.done():
                self._sync_task = asyncio.ensure_future(self._sync_once())
            await asyncio.shield(self._sync_task)

    async def _sync_once(self) -> None:
        pos = self._written
        fd = self._fd
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, os.fsync, fd)
        except OSError as exc:
            raise LogWriteError(exc.errno, exc.strerror) from exc
        self._fsyncs += 1
        self._synced = max(self._synced, pos)

    async def run_flusher(self) -> None:
        """Background task for ``interval``: fsync when something was written since the last one."""
        if self.durability is not Durability.INTERVAL:
            return
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.fsync_interval_s)
            if self._synced < self._written and self._fd >= 0:
                pos = self._written
                try:
                    await loop.run_in_executor(self._executor, os.fsync, self._fd)
                except OSError as exc:
                    LOG.error("event=log_fsync_failed error=%s", exc)
                    continue
                self._fsyncs += 1
                self._synced = max(self._synced, pos)

    # -- views ---------------------------------------------------------------------------------------
    @property
    def current_path(self) -> Path:
        return self.directory / segment_name(self._seq)

    def stats(self) -> LogStats:
        return LogStats(str(self.directory), self.current_path.name, self._files, self._written,
                        self._synced, self.durability.value, self._fsyncs, self.quarantined)


class DiscardLog:
    """A delivery log that keeps nothing: :class:`DeliveryLog`'s interface for an agent whose input is
    already recorded (``robotctl replay`` drives the agent over a trace and must not write one). It counts
    what it is given."""

    def __init__(self) -> None:
        self.header: Callable[[], bytes] | None = None
        self.lines = 0
        self.bytes = 0

    def open(self) -> list[Path]:
        return []

    def records(self, path: Path) -> list[dict[str, Any]]:
        return []

    def append(self, data: bytes) -> None:
        self.lines += data.count(b"\n")
        self.bytes += len(data)

    async def commit(self) -> None:
        return None

    async def run_flusher(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def stats(self) -> LogStats:
        return LogStats("", "", 0, self.bytes, self.bytes, Durability.NEVER.value, 0)
