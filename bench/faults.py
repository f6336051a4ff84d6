"""Storage and clock fault bench of the sidecar (issue 23). Not part of ``make test``; three to four minutes.

``robotctl serve`` runs with 16 KiB log files (a rotation every ~200 deliveries), its log directory on a tiny
tmpfs of its own (mounted here when the bench runs as root; else a plain directory, and the faults that need
a filesystem of their own are skipped, said so). A driver in this process sends deliveries (each numbered by
its ``client_time``) and completions, one request at a time, over loopback, and injects, one after the other:

- ``readonly``: the log filesystem remounted read-only (``chattr +i`` on the directory without a mount) while
  deliveries flow, so that rotations fail; then writable again. Deliveries must be 503 (and /readyz 503) while
  it lasts, and accepted again within 5 s of the directory being writable;
- ``full``: the filesystem filled by a file of zeros while deliveries flow (ENOSPC in writes and rotations);
  then the file removed; the same checks;
- ``kill``: ``kill -9`` while deliveries flow (the rotation every ~200 lines is hit now and then), restart;
- ``kill_headerless``: ``kill -9``, then the state a kill in the middle of a rotation can leave (the next file
  empty, without its queue header, or a half-written ``.new``), restart;
- ``clock_ahead`` / ``clock_back``: restart with the wall clock an hour or a day ahead, then back to the right
  time (the agent process's ``time.time`` shifted); ``bad_t``: one log line stamped ``t = 9.9e10``;
- ``special`` files at a restart: a directory, a FIFO and a link to /dev/zero named like the next log file,
  a directory named ``quarantine.jsonl``, a corrupt ``policy.json`` (``"fit": [1, 2]``, ``"version": "x"``),
  a ``robots.json`` that is not JSON, and a bad log line with the disk full.

For each fault it prints the deliveries acknowledged so far against those found in the log (lost must be 0),
for a restart the queue before and after (equal, or the in-flight request's effect when the kill fell inside
it) and the seconds to /readyz (at most 5 s more than the slowest clean restart measured in the same run:
the interpreter's imports alone take seconds on a loaded machine), and for readonly/full the seconds from
writable to the first accepted delivery (under 5). Figures were measured on a shared, loaded machine.

Usage: ``.venv/bin/python bench/faults.py [--rounds 2] [--seed 1]`` (as root for the tmpfs faults).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from robotctl.agent.log import list_segments, segment_name

ROOT = Path(__file__).resolve().parents[1]
K = 20
LIMIT_S = 5.0

#: Starts the agent with its wall clock shifted by FAULT_CLOCK_OFFSET_S seconds (a clock set wrong).
LAUNCH = (
    "import os, sys, time\n"
    "off = float(os.environ.get('FAULT_CLOCK_OFFSET_S', '0'))\n"
    "real = time.time\n"
    "time.time = lambda: real() + off\n"
    "from robotctl.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n")


@dataclass
class Row:
    kind: str
    acked: int
    recovered: int
    lost: int
    queue: str = ""
    seconds: float | None = None
    note: str = ""
    ok: bool = True


@dataclass
class Driver:
    url: str
    token: str
    acked: set[int] = field(default_factory=set)
    seq: int = 0
    queue: int = 0  # the queue the last acknowledgement reported
    refused: int = 0
    stamps: list[float] = field(default_factory=list)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def one(self, s: aiohttp.ClientSession, rng: random.Random) -> tuple[int, str]:
        """One request; (status, kind). The in-flight kind lets a kill's queue check allow its effect."""
        if rng.random() < 0.62:
            self.seq += 1
            n = self.seq
            async with s.post(self.url + "/v1/deliveries", json={"pages": 1, "client_time": float(n)},
                              headers=self.headers) as r:
                body = await r.json(content_type=None)
                if r.status == 200:
                    self.acked.add(n)
                    self.queue = body["queue"]
                    self.stamps.append(body["t"])
                else:
                    self.refused += 1
                return r.status, "delivery"
        async with s.post(self.url + "/v1/completions", json={"pages": 1}, headers=self.headers) as r:
            body = await r.json(content_type=None)
            if r.status == 200:
                self.queue = body["queue"]
            return r.status, "completion"

    async def run(self, s: aiohttp.ClientSession, rng: random.Random, count: int) -> list[int]:
        statuses = []
        for _ in range(count):
            statuses.append((await self.one(s, rng))[0])
        return statuses

    async def status(self, s: aiohttp.ClientSession) -> dict[str, Any]:
        async with s.get(self.url + "/v1/status", headers=self.headers) as r:
            result: dict[str, Any] = await r.json()
            return result


class Agent:
    def __init__(self, workdir: Path, token: str) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_dir = workdir / "log"
        self.config = workdir / "agent.yaml"
        self.stderr = workdir / "agent.stderr"
        self.token = token
        self.proc: subprocess.Popen[bytes] | None = None
        self.fsync = "interval"

    def write_config(self) -> None:
        self.config.write_text(
            f"server: {{host: 127.0.0.1, port: {self.port}}}\n"
            f"queue: {{capacity: {K}}}\n"
            "robots: {count: 4, allow_unregistered: true}\n"
            "costs: {loss: 5, obsolescence: 10, response: 2, robot: 20, starvation: 300}\n"
            "refit: {interval_s: 3600, min_interval_s: 3600}\n"
            f"log: {{dir: {self.log_dir}, fsync: {self.fsync}, max_bytes: 16384, keep_files: 100000}}\n")

    async def start(self, *, clock_offset_s: float = 0.0) -> float:
        """Start; the seconds until /readyz answers 200 (or raise)."""
        self.write_config()
        env = dict(os.environ, ROBOTCTL_SERVER_TOKEN=self.token, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                   FAULT_CLOCK_OFFSET_S=str(clock_offset_s), PYTHONPATH=str(ROOT))
        t0 = time.perf_counter()
        with open(self.stderr, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", LAUNCH, "serve", "--config", str(self.config)],
                                         stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=ROOT)
        async with aiohttp.ClientSession() as s:
            while time.perf_counter() - t0 < 60:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the agent exited with {self.proc.returncode}; see {self.stderr}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with s.get(self.url + "/readyz") as r:
                        if r.status == 200:
                            return time.perf_counter() - t0
                await asyncio.sleep(0.02)
        raise RuntimeError("the agent did not become ready in 60 s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


class Storage:
    """The log directory on a tmpfs of its own (root), or a plain directory."""

    def __init__(self, path: Path, size: str) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.mounted = os.geteuid() == 0 and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True).returncode == 0
        self.filler = path.parent / "filler-is-on-the-log-fs"

    def read_only(self, on: bool) -> None:
        """The directory immutable (``chattr +i``: no file can be created, renamed or removed in it, as the
        issue's reproduction; a remount read-only is refused while the agent holds its file open)."""
        subprocess.run(["chattr", "+i" if on else "-i", str(self.path)], check=True, capture_output=True)

    def fill(self, on: bool) -> None:
        filler = self.path / ".filler"
        if on:
            with contextlib.suppress(OSError), open(filler, "ab") as fh:  # (no room even to create it: full)
                while True:
                    fh.write(b"\0" * (64 << 10))
                    fh.flush()
        else:
            filler.unlink(missing_ok=True)

    def close(self) -> None:
        if self.mounted:
            subprocess.run(["umount", str(self.path)], check=False)


def logged_deliveries(log_dir: Path) -> set[int]:
    found = set()
    for seg in list_segments(log_dir):
        if not seg.is_file():
            continue
        for line in seg.read_bytes().splitlines():
            with contextlib.suppress(ValueError, TypeError):
                obj = json.loads(line)
                if obj.get("event") == "delivery" and obj.get("client_t") is not None:
                    found.add(int(obj["client_t"]))
    return found


def check(rows: list[Row], kind: str, driver: Driver, agent: Agent, **extra: Any) -> Row:
    found = logged_deliveries(agent.log_dir)
    lost = len(driver.acked - found)
    row = Row(kind, len(driver.acked), len(driver.acked & found), lost, **extra)
    row.ok = row.ok and lost == 0
    rows.append(row)
    q = f" queue {row.queue}" if row.queue else ""
    sec = f" {row.seconds:.2f} s" if row.seconds is not None else ""
    print(f"  {'ok ' if row.ok else 'BAD'} {kind:<16} acked {row.acked:>6}  recovered {row.recovered:>6}  "
          f"lost {row.lost}{q}{sec}{('  ' + row.note) if row.note else ''}", flush=True)
    return row


async def restart(agent: Agent, driver: Driver, s: aiohttp.ClientSession, *,
                  clock_offset_s: float = 0.0) -> tuple[float, int, bool]:
    """Start again after a stop or kill; (seconds to ready, queue after, queue equal to the last acknowledged)."""
    before = driver.queue
    seconds = await agent.start(clock_offset_s=clock_offset_s)
    after = (await driver.status(s))["queue"]["length"]
    driver.queue = after
    return seconds, after, after == before


async def kill_mid_traffic(agent: Agent, driver: Driver, s: aiohttp.ClientSession, rng: random.Random) -> None:
    """Send requests, then SIGKILL the agent while one more is in flight (its effect may or may not be in
    the log: the queue after the restart may differ from the last acknowledged one by that request)."""
    await driver.run(s, rng, rng.randint(20, 300))
    task = asyncio.create_task(driver.one(s, rng))
    await asyncio.sleep(rng.random() * 0.004)
    agent.kill()
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, RuntimeError, ValueError):
        await asyncio.wait_for(task, 5)


async def until_accepted(driver: Driver, s: aiohttp.ClientSession, rng: random.Random) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 30:
        status, kind = await driver.one(s, rng)
        if status == 200 and kind == "delivery":
            return time.perf_counter() - t0
        if status != 200:
            await asyncio.sleep(0.05)
    return float("inf")


async def storage_fault(kind: str, storage: Storage, agent: Agent, driver: Driver, s: aiohttp.ClientSession,
                        rng: random.Random, rows: list[Row]) -> None:
    await driver.run(s, rng, rng.randint(100, 300))
    (storage.read_only if kind == "readonly" else storage.fill)(True)
    statuses = await driver.run(s, rng, 300)
    async with s.get(agent.url + "/readyz") as r:
        ready = r.status
    (storage.read_only if kind == "readonly" else storage.fill)(False)
    seconds = await until_accepted(driver, s, rng)
    refused = sum(1 for x in statuses if x == 503)
    others = sorted({x for x in statuses if x not in (200, 503)})
    row = check(rows, kind, driver, agent, seconds=seconds,
                note=f"503 x{refused} while unwritable, /readyz {ready}" + (f", other {others}" if others else ""))
    row.ok = row.ok and seconds <= LIMIT_S and ready == 503 and refused > 0 and not others


def slow_start(seconds: float, clean_starts: list[float]) -> bool:
    """A start after a fault is a hang when it takes more than :data:`LIMIT_S` beyond the slowest clean start
    measured in the same run: on a loaded two-core machine the interpreter, numpy and aiohttp alone take
    several seconds to import, which no fault handling can shorten."""
    return seconds <= LIMIT_S + max(clean_starts, default=0.0)


def plant_special(log_dir: Path, what: str) -> None:
    segs = list_segments(log_dir)
    nxt = log_dir / segment_name(int(segs[-1].name[11:19]) + 1 if segs else 1)
    if what == "dir_segment":
        nxt.mkdir()
    elif what == "fifo_segment":
        os.mkfifo(nxt)
    elif what == "devzero_segment":
        nxt.symlink_to("/dev/zero")
    elif what == "dir_quarantine":
        q = log_dir / "quarantine.jsonl"
        if q.exists() and not q.is_dir():
            q.rename(log_dir / "quarantine.jsonl.kept")
        q.mkdir(exist_ok=True)
    elif what == "policy_fit_list":
        (log_dir / "policy.json").write_text('{"robots_at_level": [4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, '
                                             '4, 4, 4, 4, 4, 4], "fit": [1, 2]}')
    elif what == "policy_version":
        (log_dir / "policy.json").write_text('{"robots_at_level": [4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, '
                                             '4, 4, 4, 4, 4, 4], "version": "x"}')
    elif what == "robots_garbage":
        (log_dir / "robots.json").write_text("{not json")
    elif what in ("bad_line", "bad_line_full"):
        with open(segs[-1], "ab") as fh:
            fh.write(b'{"t": "soon", "event": "delivery", "pages": 1}\n')


async def bench(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    token = secrets.token_urlsafe(24)
    rows: list[Row] = []
    clean_starts: list[float] = []
    with tempfile.TemporaryDirectory(prefix="robotctl-faults-") as tmp:
        work = Path(tmp)
        storage = Storage(work / "log", "8m")
        agent = Agent(work, token)
        driver = Driver(agent.url, token)
        print(f"log directory on {'a tmpfs of 8 MiB' if storage.mounted else 'the disk (not root: no tmpfs)'}; "
              f"16 KiB log files, K = {K}", flush=True)
        t_start = time.perf_counter()
        try:
            await agent.start()
            async with aiohttp.ClientSession() as s:
                for round_ in range(args.rounds):
                    agent.fsync = ("never", "interval", "always")[round_ % 3]
                    print(f"round {round_ + 1} (log.fsync: {agent.fsync})", flush=True)
                    await driver.run(s, rng, 50)
                    agent.stop()  # a clean restart: how long a start takes here without any fault
                    seconds, _, ok = await restart(agent, driver, s)
                    clean_starts.append(seconds)
                    print(f"  --  clean restart to /readyz: {seconds:.2f} s (queue {'kept' if ok else 'CHANGED'})",
                          flush=True)
                    for kind in ("readonly", "full", "readonly", "full"):
                        if kind == "full" and not storage.mounted:
                            print("  --  full: skipped (no filesystem of its own without root)")
                            continue
                        await storage_fault(kind, storage, agent, driver, s, rng, rows)
                    for _ in range(3):
                        await kill_mid_traffic(agent, driver, s, rng)
                        before = driver.queue
                        seconds, after, _ = await restart(agent, driver, s)
                        ok = after in {before, min(K, before + 1), max(0, before - 1)}
                        row = check(rows, "kill", driver, agent, queue=f"{before}->{after}", seconds=seconds)
                        row.ok = row.ok and ok and slow_start(seconds, clean_starts)
                    for leftover in ("empty", "partial"):
                        await driver.run(s, rng, rng.randint(50, 200))
                        agent.kill()
                        segs = list_segments(agent.log_dir)
                        nxt = agent.log_dir / segment_name(int(segs[-1].name[11:19]) + 1)
                        if leftover == "empty":
                            nxt.write_bytes(b"")
                        else:
                            nxt.with_name(nxt.name + ".new").write_bytes(b'{"t":1.0,"event":"que')
                        before = driver.queue
                        seconds, after, ok = await restart(agent, driver, s)
                        row = check(rows, f"kill_{leftover}", driver, agent, queue=f"{before}->{after}",
                                    seconds=seconds)
                        row.ok = row.ok and ok and slow_start(seconds, clean_starts)
                    for offset, kind in ((3600.0 if round_ % 2 == 0 else 86_400.0, "clock_ahead"),
                                         (0.0, "clock_back")):
                        await driver.run(s, rng, 100)
                        agent.stop()
                        before = driver.queue
                        seconds, after, ok = await restart(agent, driver, s, clock_offset_s=offset)
                        driver.stamps.clear()
                        await driver.run(s, rng, 60)
                        stamps = driver.stamps
                        window = (await driver.status(s))["observed"]["window_s"]
                        pinned = len(stamps) > 1 and len(set(stamps)) < len(stamps) // 2
                        row = check(rows, kind, driver, agent, queue=f"{before}->{after}", seconds=seconds,
                                    note=f"acks {'PINNED' if pinned else 'follow the clock'}, window {window:.1f} s")
                        row.ok = row.ok and ok and not pinned and window >= 0 and slow_start(seconds, clean_starts)
                    specials = ["dir_segment", "fifo_segment", "devzero_segment", "dir_quarantine",
                                "policy_fit_list", "policy_version", "robots_garbage", "bad_t",
                                "bad_line_full" if storage.mounted else "bad_line"]
                    for what in specials[round_ % 2::2] if args.rounds > 1 else specials:
                        await driver.run(s, rng, 80)
                        agent.stop()
                        if what == "bad_t":
                            with open(list_segments(agent.log_dir)[-1], "ab") as fh:
                                fh.write(b'{"t": 99000000000.0, "event": "refit", "reason": "planted"}\n')
                        else:
                            plant_special(agent.log_dir, what)
                        if what == "bad_line_full":
                            storage.fill(True)
                        before = driver.queue
                        try:
                            seconds, after, ok = await restart(agent, driver, s)
                        finally:
                            if what == "bad_line_full":
                                storage.fill(False)
                        driver.stamps.clear()
                        await driver.run(s, rng, 20)
                        pinned = len(driver.stamps) > 1 and len(set(driver.stamps)) == 1
                        row = check(rows, what, driver, agent, queue=f"{before}->{after}", seconds=seconds,
                                    note="acks PINNED" if pinned else "")
                        row.ok = row.ok and ok and slow_start(seconds, clean_starts) and not pinned
                        for p in agent.log_dir.iterdir():  # the planted oddities go, the log stays
                            if ".bad-" in p.name and not p.is_file():
                                (p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink())
            agent.stop()
            elapsed = time.perf_counter() - t_start
        finally:
            agent.kill()
            storage.fill(False)
            with contextlib.suppress(subprocess.CalledProcessError):
                storage.read_only(False)
            storage.close()
    faults = len(rows)
    lost = rows[-1].lost if rows else 0
    bad = [r for r in rows if not r.ok]
    accept = [r.seconds for r in rows if r.kind in ("readonly", "full") and r.seconds is not None]
    starts = [r.seconds for r in rows if r.kind not in ("readonly", "full") and r.seconds is not None]
    print(f"\n{faults} faults injected in {elapsed:.0f} s: {len(driver.acked)} deliveries acknowledged, "
          f"{lost} lost; {driver.refused} refused (503) while the log could not be written")
    if accept:
        print(f"accepted again after the directory became writable: max {max(accept):.2f} s "
              f"(limit {LIMIT_S:g} s)")
    if starts:
        median = sorted(starts)[len(starts) // 2]
        print(f"start to /readyz after a fault: max {max(starts):.2f} s, median {median:.2f} s; "
              f"a clean restart: max {max(clean_starts):.2f} s (a fault's start may take {LIMIT_S:g} s more)")
    print("all faults passed" if not bad else f"FAILED: {', '.join(r.kind for r in bad)}")
    return 0 if not bad and faults >= 30 else 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2, help="rounds of every fault (about 18 faults per round)")
    p.add_argument("--seed", type=int, default=1)
    sys.exit(asyncio.run(bench(p.parse_args())))


if __name__ == "__main__":
    main()
