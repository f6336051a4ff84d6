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
import errno
import json
import logging
import math
import os
import re
import stat
import time
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
#: A file being created by a rotation (renamed to its final name once its header is in place).
TMP_SUFFIX = ".new"
#: Seconds between two attempts to write a log that could not be written (a rotation, a full disk).
RETRY_INTERVAL_S = 1.0
#: Free space below which a full disk is taken as still full.
_MIN_FREE_BYTES = 64 << 10


def set_aside(path: Path, why: str) -> Path | None:
    """Rename ``path`` (a corrupt state file, or a directory, FIFO or link where a file belongs) out of
    the way, to ``NAME.bad-N``, with one warning; returns the new name, or None when it cannot be moved."""
    for n in range(1, 1000):
        target = path.with_name(f"{path.name}.bad-{n}")
        if not os.path.lexists(target):
            break
    try:
        os.rename(path, target)
    except OSError as exc:
        LOG.error("event=state_file_not_set_aside file=%s why=%s error=%s", path, why, exc.strerror or exc)
        return None
    LOG.warning("event=state_file_set_aside file=%s why=%s to=%s", path.name, why, target.name)
    return target


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
    #: why the log cannot be written now (deliveries get 503, /readyz is 503), or None
    fault: str | None = None
    #: times the log became unwritable since the start
    faults: int = 0
    #: files set aside at the start (a directory, FIFO or link where a log file belongs)
    set_aside: int = 0


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
        self.set_aside_count = 0  # files renamed out of the way at open
        self.faults = 0  # times the log became unwritable since open
        self._fault: str | None = None
        self._in_flight: dict[int, int] = {}  # descriptors a background fsync uses, with how many
        self._retired: set[int] = set()  # descriptors to close once their fsync is done
        self._next_retry = 0.0
        self._newest: tuple[Path, list[dict[str, Any]]] | None = None

    # -- life cycle ----------------------------------------------------------------------------------
    def open(self) -> list[Path]:
        """Open the newest file for appending (cutting a torn tail) or start the first one.

        Returns the existing files, oldest first, for recovery; read them before appending.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        self._set_aside_strangers()
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

    def _set_aside_strangers(self) -> None:
        """Before anything is read: a name of the log (a file, ``quarantine.jsonl``) held by something that
        is not a regular file (a directory, a FIFO that would block the read forever, a link to a device) is
        renamed out of the way with a warning and counted; a file a rotation left half made is removed (its
        content is a header only: the rotation had not succeeded)."""
        for p in sorted(self.directory.iterdir()):
            name = p.name
            if name.startswith(PREFIX) and name.endswith(SUFFIX + TMP_SUFFIX):
                with contextlib.suppress(OSError):
                    if stat.S_ISREG(os.lstat(p).st_mode):
                        p.unlink()
                        LOG.warning("event=log_partial_rotation_removed file=%s", name)
                continue
            if not (_NAME.match(name) or name == QUARANTINE_FILE):
                continue
            try:
                regular = stat.S_ISREG(os.stat(p).st_mode)  # follows a link: what a read would open
            except OSError:
                regular = False  # a dangling link
            if not regular:
                self.set_aside_count += 1
                set_aside(p, "is not a regular file")

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
        tmp = path.with_name(path.name + ".scrub")
        try:
            with open(qpath, "a", encoding="utf-8") as fh:
                fh.writelines(lines)
                fh.flush()
                os.fsync(fh.fileno())
            with open(tmp, "wb") as fh:
                fh.writelines(kept)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            # a full disk (or a quarantine file that cannot be written): the bad lines stay where they are
            # and are skipped in memory; the next start tries again. Nothing valid is lost.
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            LOG.error("event=log_quarantine_failed file=%s lines=%d error=%s action=skipped_in_place",
                      path.name, len(bad), exc.strerror or exc)
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
        self._sync_directory()
        if write_header and self.header is not None:
            self._write(self.header())

    def _sync_directory(self) -> None:
        with contextlib.suppress(OSError):
            dfd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def _open_next(self) -> tuple[int, int]:
        """Create the next file with its header line in place, as one step: the header is written to a
        temporary name that is then renamed, so that a kill or a full disk never leaves a file without its
        queue checkpoint. Returns (descriptor, size); the current file is not touched."""
        final = self.directory / segment_name(self._seq + 1)
        tmp = final.with_name(final.name + TMP_SUFFIX)
        header = self.header() if self.header is not None else b""
        fd = os.open(tmp, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            done = 0
            while done < len(header):
                done += os.write(fd, header[done:])
            if self.durability is not Durability.NEVER:
                os.fsync(fd)
            if os.path.lexists(final):  # something else holds the name: keep it, under another name
                set_aside(final, "occupies the next log file's name")
            os.rename(tmp, final)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return fd, len(header)

    def _rotate(self) -> None:
        """Move to the next file. The next file is opened (header included) before the current one is
        closed: when that fails (directory read-only, disk full, no descriptors left) the current file stays
        open and in use, and :class:`LogWriteError` says why."""
        try:
            if self.durability is not Durability.NEVER:
                os.fsync(self._fd)
                self._fsyncs += 1
            fd, size = self._open_next()
        except OSError as exc:
            raise LogWriteError(exc.errno, exc.strerror) from exc
        old, self._fd = self._fd, fd
        self._release(old)
        self._seq += 1
        self._size = size
        self._written += size
        if self.durability is not Durability.NEVER:
            self._synced = self._written
        self._sync_directory()
        segments = list_segments(self.directory)
        for old_path in segments[: max(0, len(segments) - self.keep_files)]:
            with contextlib.suppress(OSError):
                old_path.unlink()
                LOG.info("event=log_file_deleted file=%s", old_path.name)
        self._files = min(len(segments), self.keep_files)
        LOG.info("event=log_rotated file=%s", segment_name(self._seq))

    def _release(self, fd: int) -> None:
        """Close a retired descriptor, or, while a background fsync still uses it, once that is done (a
        descriptor closed under an fsync could be reused by a socket)."""
        if fd in self._in_flight:
            self._retired.add(fd)
            return
        with contextlib.suppress(OSError):
            os.close(fd)

    async def _fsync_in_thread(self, fd: int) -> None:
        """fsync ``fd`` in the log's thread. The descriptor stays open until that fsync is done, even when
        the awaiting task is cancelled (a shutdown) or the file is rotated meanwhile."""
        fut = asyncio.get_running_loop().run_in_executor(self._executor, os.fsync, fd)
        self._in_flight[fd] = self._in_flight.get(fd, 0) + 1
        fut.add_done_callback(lambda f: self._fsync_done(fd, f))
        await asyncio.shield(fut)

    def _fsync_done(self, fd: int, fut: asyncio.Future[None]) -> None:
        if not fut.cancelled():
            fut.exception()  # retrieved here: the awaiting task may have been cancelled
        left = self._in_flight.get(fd, 0) - 1
        if left > 0:
            self._in_flight[fd] = left
            return
        self._in_flight.pop(fd, None)
        if fd in self._retired:
            self._retired.discard(fd)
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- faults --------------------------------------------------------------------------------------
    @property
    def fault(self) -> str | None:
        """Why the log cannot be written now (a failed rotation or write), or None. While it is set the
        agent answers 503 to what must be logged and /readyz says not ready; :meth:`retry` clears it."""
        return self._fault

    def _set_fault(self, what: str, exc: OSError) -> None:
        reason = f"{what}: {exc.strerror or exc}"
        if self._fault is None:  # one line per fault, not one per refused request
            LOG.error("event=log_unwritable what=%s file=%s error=%s action=answering_503_and_retrying "
                      "hint=%s", what, self.current_path.name, exc.strerror or exc,
                      "free space or make log.dir writable; writes resume by themselves")
            self.faults += 1
        self._fault = reason
        self._next_retry = time.monotonic() + RETRY_INTERVAL_S

    def _clear_fault(self) -> None:
        if self._fault is not None:
            LOG.warning("event=log_writable_again file=%s was=%s", self.current_path.name, self._fault)
            self._fault = None

    def retry(self) -> str | None:
        """Try again what failed (at most every :data:`RETRY_INTERVAL_S`): the rotation, or whether the disk
        has room again. Returns the fault left, or None. /readyz calls it, so the agent becomes ready again
        by itself within seconds of the directory becoming writable, with or without traffic."""
        if self._fault is None or self._fd < 0:
            return self._fault
        if time.monotonic() < self._next_retry:
            return self._fault
        try:
            if self._size > 0 and self._size >= self.max_bytes:
                self._rotate()
            else:
                st = os.statvfs(self.directory)
                if st.f_bavail * st.f_frsize < _MIN_FREE_BYTES:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            self._set_fault(self._fault.split(":", 1)[0], exc)
            return self._fault
        self._clear_fault()
        return None

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
            self._release(self._fd)
            self._fd = -1
        if self._executor is not None:
            self._executor.shutdown(wait=True)  # no fsync runs after this: close what waited for one
            self._executor = None
        for fd in self._retired:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._retired.clear()
        self._in_flight.clear()

    # -- writing -------------------------------------------------------------------------------------
    def append(self, data: bytes) -> None:
        """Write whole lines (``data`` ends with a newline); rotates first when the file is full.

        Raises :class:`LogWriteError` if the write fails; the file is then cut back to where it was. A file
        that cannot be rotated (see :meth:`_rotate`) is not written past its size: every append raises
        until the rotation succeeds (tried again at most every :data:`RETRY_INTERVAL_S`).
        """
        if self._fd < 0:
            raise RuntimeError("DeliveryLog.append: the log is closed; open() it first")
        if self._size > 0 and self._size + len(data) > self.max_bytes:
            if self._fault is not None and time.monotonic() < self._next_retry:
                raise LogWriteError(errno.EIO, self._fault)
            try:
                self._rotate()
            except LogWriteError as exc:
                self._set_fault("rotate", exc)
                raise
        try:
            self._write(data)
        except LogWriteError as exc:
            self._set_fault("write", exc)
            raise
        if self._fault is not None:
            self._clear_fault()

    def _write(self, data: bytes) -> None:
        try:
            done = os.write(self._fd, data)  # all of it, but for a signal or a full disk
            while done < len(data):
                done += os.write(self._fd, memoryview(data)[done:])
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
        try:
            await self._fsync_in_thread(self._fd)
        except OSError as exc:
            self._set_fault("fsync", exc)
            raise LogWriteError(exc.errno, exc.strerror) from exc
        self._fsyncs += 1
        self._synced = max(self._synced, pos)

    async def run_flusher(self) -> None:
        """Background task for ``interval``: fsync when something was written since the last one."""
        if self.durability is not Durability.INTERVAL:
            return
        while True:
            await asyncio.sleep(self.fsync_interval_s)
            if self._synced < self._written and self._fd >= 0:
                pos = self._written
                try:
                    await self._fsync_in_thread(self._fd)
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
                        self._synced, self.durability.value, self._fsyncs, self.quarantined, self._fault,
                        self.faults, self.set_aside_count)


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

    def retry(self) -> str | None:
        return None

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
