"""Soak benchmark of the sidecar (issue 11): minutes of sustained mixed load with refits, slow clients and
``kill -9`` restarts. Not part of ``make test``.

The agent runs as ``robotctl serve`` (with a token, a worker process for refits, ``log.fsync: interval``).
Against it, in this process:

- robots (:class:`~robotctl.agent.client.AgentClient` handles: registration, long-polls, ``permit()``)
  deliver 1-3 pages each, about ``--rate`` deliveries per second in all, every delivery numbered by its
  ``client_time``; now and then a batch of 50;
- an indexer completes pages (service times reported) and drops some as obsolete; it resynchronises the
  queue every 30 s;
- a scraper reads /metrics and /v1/status every 2 s; a refit is asked for every 30 s on top of the
  scheduled ones;
- slow clients open connections that send half a request head, or a body that stops, and hold them;
- every ``--kill-every-s`` the agent is killed with SIGKILL and started again on the same log.

It prints what was acknowledged, what of it is missing from the log afterwards (lost: must be 0), the
refits, the slow clients the agent closed, the client-side acknowledgement latency, the time SIGTERM
took at the end, and the agent's resident memory over time (with its refit worker's).

Usage: ``.venv/bin/python bench/soak.py [--minutes 4] [--rate 300] [--kill-every-s 60] [--robots 8]``.
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

import aiohttp

from robotctl.agent.client import AgentClient, AgentError
from robotctl.agent.log import list_segments

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Tally:
    acked: set[int] = field(default_factory=set)
    refused: int = 0
    latencies: list[float] = field(default_factory=list)
    seq: int = 0
    refits: dict[str, float] = field(default_factory=dict)
    slow_opened: int = 0
    slow_closed: int = 0
    stalled_bodies: dict[int, int] = field(default_factory=dict)
    rss: list[tuple[float, int, float, float]] = field(default_factory=list)  # (t, run, agent MB, worker MB)
    restarts: list[float] = field(default_factory=list)  # seconds from kill to ready

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq


class Agent:
    """``robotctl serve`` on a fixed port, killed and restarted on the same log directory."""

    def __init__(self, workdir: Path, token: str, robots: int) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_dir = workdir / "log"
        self.config = workdir / "agent.yaml"
        self.config.write_text(
            f"server: {{host: 127.0.0.1, port: {self.port}, header_timeout_s: 2, body_timeout_s: 2}}\n"
            "queue: {capacity: 20}\n"
            f"robots: {{count: {robots}, lease_s: 6}}\n"
            "costs: {loss: 5, obsolescence: 10, response: 2, robot: 20, starvation: 300}\n"
            "refit: {interval_s: 20, min_interval_s: 10, min_deliveries: 200, window_s: 300, drift_window_s: 60}\n"
            "fit: {mean_useful_life_s: 60}\n"
            f"log: {{dir: {self.log_dir}, fsync: interval, max_bytes: 4194304}}\n")
        self.env = dict(os.environ, ROBOTCTL_SERVER_TOKEN=token, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        self.proc: subprocess.Popen[bytes] | None = None
        self.run = 0

    async def start(self) -> None:
        self.run += 1
        self.proc = subprocess.Popen([sys.executable, "-m", "robotctl.cli", "serve", "--config", str(self.config),
                                      "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self.env,
                                     cwd=ROOT)
        assert self.proc.stdout is not None
        line = await asyncio.get_running_loop().run_in_executor(None, self.proc.stdout.readline)
        if not line:
            raise RuntimeError("the agent did not start")
        async with aiohttp.ClientSession() as s:
            for _ in range(400):
                with contextlib.suppress(aiohttp.ClientError):
                    async with s.get(self.url + "/readyz") as r:
                        if r.status == 200:
                            return
                await asyncio.sleep(0.025)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self) -> float:
        """SIGTERM; the seconds until the process is gone."""
        assert self.proc is not None
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        return time.perf_counter() - t0

    def rss_mb(self) -> tuple[float, float]:
        """Resident memory of the agent and of its children (the refit worker), in MB."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0, 0.0
        children = 0.0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                    children += _rss(int(stat.parent.name))
        return _rss(self.proc.pid), children


def _rss(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def robot_loop(client: AgentClient, tally: Tally, rate: float, stop: asyncio.Event) -> None:
    robot = None
    rng = random.Random()
    while not stop.is_set():
        try:
            if robot is None:
                robot = await client.register_robot()
            async with robot.permit():
                await asyncio.sleep(rng.expovariate(rate))
                seq = tally.next_seq()
                t0 = time.perf_counter()
                await client.deliver(robot.robot_id, pages=rng.randint(1, 3), bytes=rng.randint(2_000, 80_000),
                                     client_time=float(seq))
                tally.latencies.append(time.perf_counter() - t0)
                tally.acked.add(seq)
        except AgentError:
            tally.refused += 1
            await asyncio.sleep(0.05)
        except RuntimeError:  # the handle was closed under us at the end
            return


async def batch_loop(client: AgentClient, tally: Tally, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await asyncio.sleep(5.0)
        seqs = [tally.next_seq() for _ in range(50)]
        try:
            await client.deliver_many([{"pages": 1, "client_time": float(s)} for s in seqs])
            tally.acked.update(seqs)
        except AgentError:
            tally.refused += len(seqs)


async def indexer_loop(client: AgentClient, rate: float, stop: asyncio.Event) -> None:
    rng = random.Random()
    last_resync = time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(rng.expovariate(rate))
        with contextlib.suppress(AgentError):
            ack = await client.complete(pages=rng.randint(1, 3), service_s=rng.expovariate(1 / 0.4))
            if rng.random() < 0.05:
                await client.obsolete(1)
            if time.monotonic() - last_resync > 30:
                await client.set_queue(int(ack.get("queue", 0)))
                last_resync = time.monotonic()


async def scraper_loop(url: str, token: str, tally: Tally, stop: asyncio.Event) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    last_refit = time.monotonic()
    async with aiohttp.ClientSession() as s:
        while not stop.is_set():
            await asyncio.sleep(2.0)
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with s.get(url + "/metrics") as r:
                    text = await r.text()
                for line in text.splitlines():
                    if line.startswith("robotctl_refits_total{"):
                        outcome = line.split('outcome="')[1].split('"')[0]
                        tally.refits[outcome] = float(line.rsplit(" ", 1)[1])  # per run; summed at restarts
                async with s.get(url + "/v1/status", headers=headers) as r:
                    await r.read()
                if time.monotonic() - last_refit > 30:
                    last_refit = time.monotonic()
                    async with s.post(url + "/v1/refit", headers=headers) as r:
                        await r.read()


async def slow_clients_loop(port: int, token: str, per_round: int, tally: Tally, stop: asyncio.Event) -> None:
    """Half-sent heads (the agent should close them after its header timeout) and stalled bodies (408)."""
    while not stop.is_set():
        conns = []
        for _ in range(per_round):
            with contextlib.suppress(OSError):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: soak\r\nX-Slow: ")
                conns.append((reader, writer))
                tally.slow_opened += 1
        with contextlib.suppress(OSError):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /v1/deliveries HTTP/1.1\r\nHost: soak\r\nContent-Length: 100\r\n"
                         b"Authorization: Bearer " + token.encode() + b"\r\n\r\n{\"pa")
            conns.append((reader, writer))
        for reader, writer in conns:
            with contextlib.suppress(OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
                data = await asyncio.wait_for(reader.read(), timeout=6.0)
                if data.startswith(b"HTTP/1.1 "):
                    status = int(data[9:12])
                    tally.stalled_bodies[status] = tally.stalled_bodies.get(status, 0) + 1
                elif data == b"":
                    tally.slow_closed += 1
            writer.close()
        await asyncio.sleep(1.0)


async def sampler_loop(agent: Agent, tally: Tally, t0: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        mine, worker = agent.rss_mb()
        if mine:
            tally.rss.append((time.monotonic() - t0, agent.run, mine, worker))
        await asyncio.sleep(5.0)


async def killer_loop(agent: Agent, every_s: float, tally: Tally, refits_before: list[dict[str, float]],
                      stop: asyncio.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every_s)
        if stop.is_set():
            return
        refits_before.append(dict(tally.refits))
        tally.refits.clear()
        agent.kill()
        t0 = time.perf_counter()
        await asyncio.sleep(0.5)
        await agent.start()
        tally.restarts.append(time.perf_counter() - t0)


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


async def soak(args: argparse.Namespace) -> None:
    token = secrets.token_urlsafe(32)
    tally = Tally()
    refits_runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="robotctl-soak-") as d:
        agent = Agent(Path(d), token, args.robots)
        await agent.start()
        stop = asyncio.Event()
        t0 = time.monotonic()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            client = AgentClient(agent.url, token=token, session=session, timeout_s=10.0)
            tasks = [asyncio.create_task(robot_loop(client, tally, args.rate / args.robots, stop))
                     for _ in range(args.robots)]
            tasks += [asyncio.create_task(batch_loop(client, tally, stop)),
                      asyncio.create_task(indexer_loop(client, args.rate * 1.9, stop)),
                      asyncio.create_task(scraper_loop(agent.url, token, tally, stop)),
                      asyncio.create_task(slow_clients_loop(agent.port, token, args.slow, tally, stop)),
                      asyncio.create_task(sampler_loop(agent, tally, t0, stop)),
                      asyncio.create_task(killer_loop(agent, args.kill_every_s, tally, refits_runs, stop))]
            await asyncio.sleep(args.minutes * 60)
            elapsed = time.monotonic() - t0
            stop.set()
            await asyncio.wait(tasks, timeout=30)
            refits_runs.append(dict(tally.refits))
            stop_s = agent.terminate()
            await client.aclose()
        logged = {int(e["client_t"]) for p in list_segments(agent.log_dir) for e in
                  (json.loads(x) for x in p.read_text().splitlines() if x.strip())
                  if e.get("event") == "delivery" and "client_t" in e}
        quarantine = agent.log_dir / "quarantine.jsonl"
        quarantined = len(quarantine.read_text().splitlines()) if quarantine.exists() else 0
    lost = tally.acked - logged
    adopted = sum(r.get("adopted", 0.0) for r in refits_runs)
    failed = sum(r.get("failed", 0.0) for r in refits_runs)
    ms = [x * 1000 for x in tally.latencies]
    print(f"soak: {elapsed:.0f} s of load, {args.robots} robots offering ~{args.rate:g} deliveries/s while active "
          f"(the agent parks some: {len(tally.acked) / elapsed:.0f}/s acknowledged), kill -9 every "
          f"{args.kill_every_s:g} s ({len(tally.restarts)} restarts, back in "
          f"{', '.join(f'{r:.1f}' for r in tally.restarts)} s), {args.slow} slow clients every round")
    print(f"  acknowledged deliveries      {len(tally.acked):,}")
    print(f"  lost (acked, not in the log) {len(lost):,}")
    print(f"  refused while the agent was down or busy   {tally.refused:,}")
    print(f"  log lines quarantined        {quarantined}")
    print(f"  refits adopted / failed      {adopted:.0f} / {failed:.0f}")
    print(f"  half-sent heads closed by the agent  {tally.slow_closed:,} of {tally.slow_opened:,}; stalled bodies "
          f"answered {dict(sorted(tally.stalled_bodies.items()))}")
    print(f"  ack latency (client side)    p50 {percentile(ms, 0.5):.2f} ms, p99 {percentile(ms, 0.99):.2f} ms, "
          f"p99.9 {percentile(ms, 0.999):.2f} ms, max {max(ms, default=float('nan')):.1f} ms "
          f"({len(ms):,} single deliveries)")
    print(f"  SIGTERM to exit              {stop_s:.2f} s")
    print("  resident memory (MB):   t (s)  run  agent  refit worker   (every 30 s, and each run's first and last)")
    for k, (t, run, mine, worker) in enumerate(tally.rss):
        edge = k in (0, len(tally.rss) - 1) or tally.rss[k - 1][1] != run or tally.rss[k + 1][1] != run
        if edge or k % 6 == 0:
            print(f"                         {t:5.0f}  {run:3d}  {mine:5.1f}  {worker:6.1f}")
    runs = sorted({run for _, run, _, _ in tally.rss})
    for run in runs:
        samples = [(t, m) for t, r, m, _ in tally.rss if r == run]
        if len(samples) >= 3:
            print(f"  run {run}: agent RSS {samples[1][1]:.1f} MB at {samples[1][0]:.0f} s -> {samples[-1][1]:.1f} MB "
                  f"at {samples[-1][0]:.0f} s (drift {samples[-1][1] - samples[1][1]:+.1f} MB)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=4.0, help="length of the soak")
    p.add_argument("--rate", type=float, default=300.0, help="deliveries per second offered by all robots")
    p.add_argument("--robots", type=int, default=8, help="robot handles (each long-polls)")
    p.add_argument("--kill-every-s", type=float, default=60.0, help="seconds between two kill -9 of the agent")
    p.add_argument("--slow", type=int, default=40, help="half-sent requests opened per round (one round a few s)")
    asyncio.run(soak(p.parse_args()))


if __name__ == "__main__":
    main()
