"""Recovery at start: the queue view and the recent samples rebuilt from the delivery log, and the robots
restored from ``robots.json`` (saved by :func:`save_robots` whenever the registry changes).

The policy in force is restored by :class:`agent.policy_store.PolicyStore` from ``policy.json``.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from .actuator import Actuator
from .api import robot_id
from .config import AgentConfig
from .log import DeliveryLog, DiscardLog, segment_name, set_aside
from .modes import ModeHistory, history_from_log
from .queue import QueueView
from .samples import Ring

LOG = logging.getLogger("robotctl.agent")

ROBOTS_FILE = "robots.json"


def atomic_write_json(path: Path, obj: Any, *, indent: int | None = 1) -> None:
    """Write ``obj`` as JSON to ``path`` through a temporary file, with an fsync: a crash leaves the old
    file or the new one."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=indent, separators=(",", ":") if indent is None else None)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def recover_queue(records: list[dict[str, Any]], config: AgentConfig) -> QueueView:
    """The queue view at the end of the newest log file (it starts with a queue checkpoint, or is the first)."""
    q = QueueView(config.capacity, config.admission)
    for r in records:
        kind = r.get("event")
        t = float(r["t"])
        pages = int(r.get("pages", 1) or 0)
        if kind == "queue":
            q.resync(min(max(pages, 0), q.capacity), t)
        elif kind == "delivery":
            q.admit(q.preview([pages])[0].admitted, t)
        elif kind == "completion":
            q.complete(pages, t)
        elif kind == "obsolete":
            q.drop_obsolete(pages)
    return q


def recover_samples(log: DeliveryLog | DiscardLog, segments: list[Path], newest: list[dict[str, Any]],
                    cutoff: float, deliveries: Ring, completions: Ring, *, not_after: float = math.inf,
                    trajectory: list[dict[str, Any]] | None = None) -> int:
    """Refill the sample rings with the deliveries and completions from ``cutoff`` on, reading the newest
    files first until the window or the delivery ring is full; returns the deliveries recovered. With
    ``trajectory``, the lines that give the mode over the same span are appended to it, in order: every
    park and resume, and every delivery (:func:`agent.modes.history_from_log`)."""
    chunks: list[list[dict[str, Any]]] = [newest]
    for seg in reversed(segments[:-1]):
        have = sum(1 for c in chunks for r in c if r.get("event") == "delivery")
        if (chunks[-1] and float(chunks[-1][0]["t"]) <= cutoff) or have >= deliveries.capacity:
            break
        chunks.append(log.records(seg))
    n = 0
    for chunk in reversed(chunks):
        for r in chunk:
            t = float(r["t"])
            if t < cutoff or t > not_after:
                continue
            kind = r.get("event")
            if trajectory is not None and kind in ("delivery", "park", "resume"):
                trajectory.append(r)
            if kind == "delivery":
                pages = int(r.get("pages", 1))
                deliveries.append(t=t, pages=pages, mode=int(r.get("active", 0)),  # 0: not logged
                                  client_t=float(r.get("client_t", math.nan)),
                                  bytes=float(r.get("bytes", math.nan)))
                n += 1
            elif kind == "completion":
                pages = max(1, int(r.get("pages", 1)))
                svc = r.get("service_s")
                size = r.get("bytes")
                completions.append(t=t, service_s=float(svc) / pages if svc is not None else math.nan,
                                   bytes=float(size) / pages if size is not None else math.nan)
    return n


def queue_records(log: DeliveryLog | DiscardLog, segments: list[Path]) -> tuple[list[dict[str, Any]], int]:
    """The records that rebuild the queue: from the newest ``queue`` checkpoint on, reading back from the
    newest file as far as one holds a checkpoint (a file left without its header by a kill or a full disk
    mid-rotation does not reset the queue); and the number of files read. Without any checkpoint, every
    file from the first (the queue then starts empty, as the log did)."""
    chunks: list[list[dict[str, Any]]] = []
    for seg in reversed(segments):
        records = log.records(seg)
        chunks.append(records)
        if any(r.get("event") == "queue" for r in records):
            break
    else:
        first = segments[0].name if segments else ""
        if segments and first != segment_name(1):
            LOG.warning("event=log_no_queue_checkpoint files=%d first=%s action=queue_from_zero", len(segments),
                        first)
    if len(chunks) > 1:
        LOG.warning("event=log_header_missing files=%s action=queue_from=%s",
                    ",".join(s.name for s in segments[len(segments) - len(chunks) + 1:]),
                    segments[len(segments) - len(chunks)].name)
    return [r for chunk in reversed(chunks) for r in chunk], len(chunks)


def recover(log: DeliveryLog | DiscardLog, segments: list[Path], config: AgentConfig, deliveries: Ring,
            completions: Ring, *, not_after: float = math.inf,
            trajectory: list[dict[str, Any]] | None = None) -> tuple[QueueView, float, int] | None:
    """The queue view from the newest checkpoint (:func:`queue_records`), the samples of the last window
    from the newest files: (queue view, time of the last line, deliveries recovered); None without a log
    file. Samples stamped after ``not_after`` (the clock now, when it was set back since they were
    written) are left out: the sample rings are in time order. ``trajectory``: see :func:`recover_samples`."""
    if not segments:
        return None
    cache: dict[Path, list[dict[str, Any]]] = {}

    def records_of(seg: Path) -> list[dict[str, Any]]:
        if seg not in cache:
            cache[seg] = log.records(seg)
        return cache[seg]

    class _Cached:
        records = staticmethod(records_of)

    replay, _ = queue_records(_Cached, segments)  # type: ignore[arg-type]
    records = records_of(segments[-1])
    last_t = max((float(r["t"]) for r in records), default=-math.inf)
    queue = recover_queue(replay, config)
    newest = [r for r in records if float(r["t"]) <= not_after]
    cutoff = min(last_t, not_after) - config.refit.window_s
    n = recover_samples(_Cached, segments, newest, cutoff, deliveries, completions,  # type: ignore[arg-type]
                        not_after=not_after, trajectory=trajectory)
    LOG.info("event=recovered files=%d queue=%d deliveries_in_window=%d last_t=%s", len(segments),
             queue.length, n, last_t)
    return queue, last_t, n


def recovered_modes(trajectory: list[dict[str, Any]], actuator: Actuator, last_t: float,
                    keep_s: float) -> ModeHistory | None:
    """The mode history over the window :func:`recover` read (its ``trajectory`` lines), for a refit that
    reaches back before this start (:func:`agent.modes.history_from_log`): without it, the recovered
    deliveries counted in their logged modes with none of their time, and a warm Scrapy crawl fitted one
    robot at 7.6 items/s. A robot restored from robots.json drains its own virtual robot; one gone since,
    a key of its own."""
    others: dict[str, int] = {}

    def slot_of(robot: str) -> int:
        known = actuator.robots.get(robot)
        if known is not None:
            return known.slot
        return others.setdefault(robot, -1 - len(others))

    return history_from_log(trajectory, slot_of, last_t, keep_s)


#: Length of a robot key's SHA-256 in hex.
_KEY_HEX = 64


def robot_record_problem(rec: Any) -> str | None:
    """Why one saved robot cannot come back, or None: its id as the API takes it (a string, 1..256
    printable characters; a JSON null is not the id "None"), a whole rank, and its key's SHA-256 (a robot
    without one would come back without a key, free for anyone to take)."""
    if not isinstance(rec, dict):
        return "not_an_object"
    rid = rec.get("robot")
    if not isinstance(rid, str):
        return "bad_robot"
    try:
        robot_id("robot", rid)
    except Exception:
        return "bad_robot"
    rank = rec.get("rank")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        return "bad_rank"
    digest = rec.get("key_sha256")
    if not (isinstance(digest, str) and len(digest) == _KEY_HEX
            and all(c in "0123456789abcdef" for c in digest.lower())):
        return "no_key"
    return None


def restore_robots(path: Path, actuator: Actuator, now: float) -> int:
    """Re-register the robots saved in ``path`` that :func:`robot_record_problem` accepts (the others
    register again, with a new key); a file that cannot be read is set aside (``robots.json.bad-N``) with
    a warning. Returns the files set aside (0 or 1)."""
    if not path.exists():
        return 0
    try:
        if not path.is_file():
            raise ValueError("not a regular file")
        records = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(records, list):
            raise ValueError(f"holds a {type(records).__name__}, not a list of robots")
    except (OSError, ValueError) as exc:
        LOG.warning("event=robots_file_unreadable file=%s error=%s action=set_aside", path, exc)
        return int(set_aside(path, "robots.json cannot be read") is not None)
    good = []
    for rec in records:
        problem = robot_record_problem(rec)
        if problem is None:
            good.append(rec)
        else:
            shown = rec.get("robot") if isinstance(rec, dict) else None
            LOG.warning("event=robot_not_restored robot=%s reason=%s action=register_again",
                        json.dumps(shown)[:80], problem)
    n = actuator.restore(good, now)
    LOG.info("event=robots_restored count=%d dropped=%d", n, len(records) - n)
    return 0


def save_robots(path: Path, actuator: Actuator) -> None:
    """Save the registered robots to ``path`` (an error leaves the previous file)."""
    write_robot_records(path, actuator.to_records())


def write_robot_records(path: Path, records: list[dict[str, Any]]) -> None:
    """Write saved robots (:meth:`Actuator.to_records`) to ``path``, compact, with an fsync (an error leaves the
    previous file, with a warning); safe to run in a thread."""
    try:
        atomic_write_json(path, records, indent=None)
    except OSError as exc:
        LOG.warning("event=robots_file_not_written file=%s error=%s", path, exc.strerror or exc)


__all__ = ["ROBOTS_FILE", "atomic_write_json", "queue_records", "recover", "recover_queue", "recover_samples",
           "restore_robots", "robot_record_problem", "save_robots"]
