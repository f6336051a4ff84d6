"""Recovery at start: the queue view and the recent samples rebuilt from the delivery log, and the robots
restored from ``robots.json`` (saved by :func:`save_robots` whenever the registry changes).

The policy in force is restored by :class:`agent.policy_store.PolicyStore` from ``policy.json``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from .actuator import Actuator
from .config import AgentConfig
from .log import DeliveryLog, DiscardLog
from .queue import QueueView
from .samples import Ring

LOG = logging.getLogger("robotctl.agent")

ROBOTS_FILE = "robots.json"


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` through a temporary file, with an fsync: a crash leaves the old
    file or the new one."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=1)
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
                    cutoff: float, deliveries: Ring, completions: Ring) -> int:
    """Refill the sample rings with the deliveries and completions from ``cutoff`` on, reading the newest
    files first until the window or the delivery ring is full; returns the deliveries recovered."""
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
            if t < cutoff:
                continue
            kind = r.get("event")
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


def recover(log: DeliveryLog | DiscardLog, segments: list[Path], config: AgentConfig, deliveries: Ring,
            completions: Ring) -> tuple[QueueView, float, int] | None:
    """The queue view from the newest log file, the samples of the last window from the newest files:
    (queue view, time of the last line, deliveries recovered); None without a log file."""
    if not segments:
        return None
    records = log.records(segments[-1])
    last_t = max((float(r["t"]) for r in records), default=-math.inf)
    queue = recover_queue(records, config)
    n = recover_samples(log, segments, records, last_t - config.refit.window_s, deliveries, completions)
    LOG.info("event=recovered files=%d queue=%d deliveries_in_window=%d last_t=%s", len(segments),
             queue.length, n, last_t)
    return queue, last_t, n


def restore_robots(path: Path, actuator: Actuator, now: float) -> None:
    """Re-register the robots saved in ``path`` (a missing or unreadable file restores none)."""
    if not path.exists():
        return
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        LOG.warning("event=robots_file_unreadable file=%s error=%s", path, exc)
        return
    n = actuator.restore(records if isinstance(records, list) else [], now)
    LOG.info("event=robots_restored count=%d", n)


def save_robots(path: Path, actuator: Actuator) -> None:
    """Save the registered robots to ``path`` (an error leaves the previous file)."""
    with contextlib.suppress(OSError):
        atomic_write_json(path, actuator.to_records())


__all__ = ["ROBOTS_FILE", "atomic_write_json", "recover", "recover_queue", "recover_samples", "restore_robots",
           "save_robots"]
