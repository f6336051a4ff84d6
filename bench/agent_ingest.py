"""Ingest benchmark of the agent on loopback: deliveries per second (single and batched) and the p99
acknowledgement latency with and without a concurrent refit.

The agent runs as its own process (``robotctl serve``, as deployed), the load generator here on a
plain keep-alive HTTP/1.1 client over asyncio streams (so that the client is not the bottleneck).
Every figure of one table is measured in the same run; targets from issue 5:

- single deliveries: 5,000 per second
- batched deliveries: 100,000 per second
- p99 acknowledgement latency while a refit runs / while none does (interleaved): at most 2x

- issue 26: single deliveries at least 0.6x, batched at least 0.5x the bare aiohttp handler (which reads the
  same JSON and parses it with ``json.loads``, on the same event loop) measured in the same run, with the same
  client, bodies and number of connections (``--ingest-only`` measures just these: both servers run side by
  side and are loaded in turn by short bursts, so that both see the same outside load). Each ratio is
  printed twice: by wall-clock rate, and by the server process's own CPU time per delivery (which other work
  on a shared machine inflates less), with the load average over the bursts. The agent decodes and checks a
  deliveries body with msgspec (``agent.api.parse_delivery_body``); ``--bare-parser msgspec`` gives the bare
  handler the same parser (``msgspec.json.decode``, without the agent's types and checks), a stricter
  ceiling than the issue's.

The agent refits only when asked (``POST /v1/refit`` in the latency runs): its start-up refits on growing
windows (``refit.cold_start_deliveries``) are off, since with ``interval_s`` this long they would go on at
every doubling of the deliveries and put seconds of fitting into the throughput figures (a thread executor
shares the event loop's interpreter; a process one its two cores), which are about the ingest path.

Usage: ``.venv/bin/python bench/agent_ingest.py [--seconds 4] [--executor thread|process|both] [--ingest-only
[--slice 0.5] [--bare-parser json|msgspec]]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
BATCH = 1000


class Conn:
    """One keep-alive HTTP/1.1 connection that sends a request and reads its response."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    async def open(self) -> Conn:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status = int(raw[9:12])
        length = 0
        for line in raw.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        data = await self.reader.readexactly(length) if length else b""
        return status, data

    def close(self) -> None:
        self.writer.close()


def start_agent(log_dir: Path, executor: str, fsync: str) -> tuple[subprocess.Popen[bytes], str, int]:
    cfg = log_dir / "agent.yaml"
    cfg.write_text(
        "server: {host: 127.0.0.1, port: 0, max_batch: 10000, max_body_bytes: 4194304, insecure_loopback: true}\n"
        "queue: {capacity: 5}\n"
        "robots: {count: 4, allow_unregistered: true}\n"
        "costs: {loss: 5, obsolescence: 10, response: 2, robot: 20, starvation: 300}\n"
        f"refit: {{interval_s: 1000000, min_interval_s: 1000000, executor: {executor}, min_deliveries: 100, "
        "cold_start_deliveries: 0}\n"
        "fit: {mean_useful_life_s: 5, processing_rate_bps: 100000}\n"
        f"log: {{dir: {log_dir / 'log'}, fsync: {fsync}}}\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "robotctl.cli", "serve", "--config", str(cfg), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    assert proc.stdout is not None
    url = json.loads(proc.stdout.readline())["url"]
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return proc, host, int(port)


BARE = """
import asyncio, json, sys
from aiohttp import web
from robotctl.agent.app import new_event_loop
loads = json.loads
if sys.argv[1:] == ["msgspec"]:
    import msgspec
    loads = msgspec.json.decode

async def handler(request):
    obj = loads(await request.read())
    n = len(obj["deliveries"]) if isinstance(obj, dict) and "deliveries" in obj else 1
    return web.json_response({"accepted": n})

async def main():
    app = web.Application()
    app.router.add_post("/v1/deliveries", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()

loop = new_event_loop("auto")
loop.run_until_complete(main())
"""


def start_bare(parser: str = "json") -> tuple[subprocess.Popen[bytes], str, int]:
    """The ceiling: a bare aiohttp handler that reads the body, parses its JSON (``json.loads``, or
    ``msgspec.json.decode``) and answers, on the agent's event loop."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", BARE, parser], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    assert proc.stdout is not None
    return proc, "127.0.0.1", int(proc.stdout.readline())


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_agent(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(timeout=30)


def _delivery(robot: int, k: int) -> dict[str, object]:
    return {"robot": f"r{robot}", "pages": 1 + k % 3, "bytes": 20_000 + 37 * (k % 1000)}


def bodies_of(batch: int) -> list[bytes]:
    """The request bodies the load generator cycles through: single deliveries, or batches of ``batch``."""
    if batch == 1:
        return [json.dumps(_delivery(k % 4, k)).encode() for k in range(64)]
    return [json.dumps({"deliveries": [_delivery(j % 4, k * batch + j) for j in range(batch)]}).encode()
            for k in range(4)]


async def burst(cs: list[Conn], bodies: list[bytes], *, seconds: float, batch: int) -> tuple[int, float]:
    """(deliveries acknowledged, seconds) with the open connections ``cs`` each posting back to back."""
    done = 0
    stop = time.perf_counter() + seconds

    async def worker(c: Conn, k: int) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            status, _ = await c.request("POST", "/v1/deliveries", bodies[k % len(bodies)])
            assert status == 200, status
            done += batch
            k += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(c, 0) for c in cs))
    return done, time.perf_counter() - t0


async def throughput(host: str, port: int, *, seconds: float, conns: int, batch: int) -> float:
    """Deliveries acknowledged per second with ``conns`` connections each posting back to back."""
    cs = [await Conn(host, port).open() for _ in range(conns)]
    done, elapsed = await burst(cs, bodies_of(batch), seconds=seconds, batch=batch)
    for c in cs:
        c.close()
    return done / elapsed


async def latencies(host: str, port: int, *, seconds: float, conns: int, rate: float
                    ) -> tuple[list[float], list[float], int]:
    """Ack latencies of single deliveries sent at ``rate`` per second in total (open loop, spread over
    ``conns`` connections) while refits alternate with quiet stretches of the same length: each refit is
    asked for, awaited, then nothing for as long as it took. Acks sent while a refit was in flight are
    counted "refitting", the others "quiet", so both sets see the same outside load (this machine is
    shared). Returns (quiet, refitting, refits)."""
    body = json.dumps(_delivery(1, 7)).encode()
    sent: list[tuple[float, float]] = []
    busy: list[tuple[float, float]] = []
    stop = time.perf_counter() + seconds
    period = conns / rate

    async def worker(c: Conn, offset: float) -> None:
        nxt = time.perf_counter() + offset
        while True:
            now = time.perf_counter()
            if nxt > now:
                await asyncio.sleep(nxt - now)
            if time.perf_counter() >= stop:
                return
            t0 = time.perf_counter()
            status, _ = await c.request("POST", "/v1/deliveries", body)
            sent.append((t0, time.perf_counter() - t0))
            assert status == 200
            nxt += period

    async def refitter(c: Conn) -> None:
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            status, data = await c.request("POST", "/v1/refit")
            t1 = time.perf_counter()
            assert status == 200 and json.loads(data)["adopted"], data[:300]
            busy.append((t0, t1))
            await asyncio.sleep(t1 - t0)

    cs = [await Conn(host, port).open() for _ in range(conns + 1)]
    await asyncio.gather(*(worker(c, i * period / conns) for i, c in enumerate(cs[:conns])), refitter(cs[-1]))
    for c in cs:
        c.close()
    quiet: list[float] = []
    refitting: list[float] = []
    for t0, lat in sent:
        (refitting if any(a <= t0 <= b for a, b in busy) else quiet).append(lat)
    return quiet, refitting, len(busy)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


async def fill_window(host: str, port: int) -> None:
    """Traffic with spread timestamps so that a refit has a real window to fit (a few thousand deliveries
    over a few seconds, then the throughput runs add more)."""
    c = await Conn(host, port).open()
    for k in range(3000):
        await c.request("POST", "/v1/deliveries", json.dumps(_delivery(k % 4, k)).encode())
        if k % 3 == 0:
            await c.request("POST", "/v1/completions", json.dumps({"pages": 2, "bytes": 40_000}).encode())
    c.close()


async def run(executor: str, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        proc, host, port = start_agent(Path(tmp), executor, "interval")
        try:
            await fill_window(host, port)
            single = await throughput(host, port, seconds=seconds, conns=8, batch=1)
            batched = await throughput(host, port, seconds=seconds, conns=4, batch=BATCH)
            await latencies(host, port, seconds=2.0, conns=4, rate=1000.0)  # the worker's first refits
            base, loaded, refits = await latencies(host, port, seconds=3 * seconds, conns=4, rate=1000.0)
        finally:
            stop_agent(proc)
    return {"single": single, "batched": batched, "p50": pct(base, 0.5), "p99": pct(base, 0.99),
            "p50_refit": pct(loaded, 0.5), "p99_refit": pct(loaded, 0.99), "refits": refits,
            "n_base": len(base), "n_refit": len(loaded)}


class Figure(NamedTuple):
    """One throughput measurement: deliveries per second (wall clock), the server's CPU microseconds per
    delivery, and the 1-minute load average at its end."""

    rate: float
    cpu_us: float
    load: float


async def _measured(proc: subprocess.Popen[bytes], host: str, port: int, seconds: float, batch: int) -> Figure:
    """The second figure is what the server itself spends, which a loaded machine's scheduling does not
    inflate as much as the wall-clock rate."""
    c0, t0 = cpu_seconds(proc.pid), time.perf_counter()
    rate = await throughput(host, port, seconds=seconds, conns=8 if batch == 1 else 4, batch=batch)
    done = rate * (time.perf_counter() - t0)
    return Figure(rate, 1e6 * (cpu_seconds(proc.pid) - c0) / max(done, 1.0), os.getloadavg()[0])


async def run_bare(seconds: float) -> tuple[Figure, Figure]:
    """Single and batched figures of the bare handler (the same client, bodies and connections)."""
    proc, host, port = start_bare()
    try:
        await throughput(host, port, seconds=1.0, conns=8, batch=1)  # warm-up, as the agent's fill_window
        return await _measured(proc, host, port, seconds, 1), await _measured(proc, host, port, seconds, BATCH)
    finally:
        stop_agent(proc)


class Tally:
    """What one server did over the bursts of one kind: deliveries, seconds under load, its CPU seconds."""

    def __init__(self, proc: subprocess.Popen[bytes], host: str, port: int) -> None:
        self.proc, self.host, self.port = proc, host, port
        self.done, self.seconds, self.cpu = 0, 0.0, 0.0

    @property
    def rate(self) -> float:
        return self.done / self.seconds

    @property
    def cpu_us(self) -> float:
        return 1e6 * self.cpu / max(self.done, 1)


async def interleaved(seconds: float, slice_s: float, parser: str = "json"
                      ) -> tuple[dict[str, dict[str, Tally]], list[float]]:
    """The agent and the bare handler side by side, loaded in turn by bursts of ``slice_s`` (the order
    swapped at every turn) until each has had ``seconds`` of single deliveries, then of batches: both
    see the same outside load, which on a shared machine moves more within a minute than the agent's
    own cost does. Returns the tallies by kind and server, and the load averages seen."""
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        agent, ahost, aport = start_agent(Path(tmp), "thread", "interval")
        try:
            bare, bhost, bport = start_bare(parser)
            try:
                await fill_window(ahost, aport)
                await throughput(bhost, bport, seconds=1.0, conns=8, batch=1)  # warm-up, as the agent's fill_window
                out: dict[str, dict[str, Tally]] = {}
                for kind, batch in (("single", 1), ("batched", BATCH)):
                    conns = 8 if batch == 1 else 4
                    bodies = bodies_of(batch)
                    tallies = {"agent": Tally(agent, ahost, aport), "bare": Tally(bare, bhost, bport)}
                    cs = {who: [await Conn(t.host, t.port).open() for _ in range(conns)] for who, t in tallies.items()}
                    turn = 0
                    while min(t.seconds for t in tallies.values()) < seconds:
                        for who in ("agent", "bare") if turn % 2 == 0 else ("bare", "agent"):
                            t = tallies[who]
                            c0 = cpu_seconds(t.proc.pid)
                            done, elapsed = await burst(cs[who], bodies, seconds=slice_s, batch=batch)
                            t.cpu += cpu_seconds(t.proc.pid) - c0
                            t.done += done
                            t.seconds += elapsed
                        loads.append(os.getloadavg()[0])
                        turn += 1
                    for conn in (c for group in cs.values() for c in group):
                        conn.close()
                    out[kind] = tallies
                return out, loads
            finally:
                stop_agent(bare)
        finally:
            stop_agent(agent)


async def run_always(seconds: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        proc, host, port = start_agent(Path(tmp), "thread", "always")
        try:
            return await throughput(host, port, seconds=seconds, conns=8, batch=1)
        finally:
            stop_agent(proc)


def _run(coro: Any) -> Any:
    """The load generator on uvloop when installed (as the agent), so that it is not the bottleneck."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def ingest_only(seconds: float, slice_s: float, parser: str = "json") -> int:
    """Issue 26's targets, single >= 0.6x and batched >= 0.5x the bare handler, measured by
    :func:`interleaved`. Printed twice: as wall-clock rates, and as each server process's own CPU time per
    delivery (the rate one idle core would reach), which depends less on what else runs on the machine."""
    print(f"agent ingest against the bare aiohttp handler parsing with {parser} ({os.cpu_count()} cores, load "
          f"average {os.getloadavg()[0]:.1f} at the start; both servers up side by side and loaded in turn, "
          f"{slice_s:g} s bursts, {seconds:g} s each per kind)")
    out, loads = _run(interleaved(seconds, slice_s, parser))
    for (kind, tallies), target in zip(out.items(), (0.6, 0.5), strict=True):
        a, b = tallies["agent"], tallies["bare"]
        wall, cpu = a.rate / b.rate, b.cpu_us / a.cpu_us
        print(f"  {kind:<8} deliveries/s  agent {a.rate:>10,.0f}   bare {b.rate:>10,.0f}   {wall:5.2f}x  "
              f"(target >= {target}x: {'met' if wall >= target else 'NOT met'})")
        print(f"  {kind:<8} server CPU    agent {a.cpu_us:>8.2f} us   bare {b.cpu_us:>8.2f} us per delivery   "
              f"{cpu:5.2f}x  (target >= {target}x: {'met' if cpu >= target else 'NOT met'})")
    print(f"  load average {min(loads):.1f}-{max(loads):.1f} over the bursts, {os.getloadavg()[0]:.1f} at the end")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=4.0, help="duration of each measurement")
    ap.add_argument("--executor", choices=("thread", "process", "both"), default="both",
                    help="where the agent runs refits")
    ap.add_argument("--ingest-only", action="store_true",
                    help="only single and batched throughput against the bare handler, measured alternately")
    ap.add_argument("--slice", type=float, default=0.5,
                    help="--ingest-only: seconds of each burst, agent and bare handler in turn")
    ap.add_argument("--bare-parser", choices=("json", "msgspec"), default="json",
                    help="--ingest-only: the bare handler's JSON parser (json: issue 26's baseline)")
    args = ap.parse_args()
    if args.ingest_only:
        return ingest_only(args.seconds, args.slice, args.bare_parser)
    kinds = ("thread", "process") if args.executor == "both" else (args.executor,)
    print(f"agent ingest on loopback ({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; agent and "
          f"load generator are separate processes; {args.seconds:g} s per figure)")
    bare, bare_batched = (f.rate for f in _run(run_bare(args.seconds)))
    print(f"ceiling: a bare aiohttp handler (read body, parse its JSON, answer JSON), same client: {bare:,.0f} "
          f"single, {bare_batched:,.0f} batched deliveries/s")
    for kind in kinds:
        r = _run(run(kind, args.seconds))
        ratio = r["p99_refit"] / r["p99"]
        print(f"\nrefit executor: {kind}")
        print(f"  single deliveries/s        {r['single']:>10,.0f}   target  5,000   {r['single'] / 5000:5.2f}x"
              f"   ({r['single'] / bare:.2f}x the bare handler)")
        print(f"  batched deliveries/s       {r['batched']:>10,.0f}   target 100,000  {r['batched'] / 1e5:5.2f}x"
              f"   (batches of {BATCH}; {r['batched'] / bare_batched:.2f}x the bare handler)")
        print(f"  ack latency, quiet         p50 {r['p50'] * 1e3:6.2f} ms  p99 {r['p99'] * 1e3:6.2f} ms"
              f"   ({r['n_base']} acks at 1,000/s)")
        print(f"  ack latency, refitting     p50 {r['p50_refit'] * 1e3:6.2f} ms  p99 {r['p99_refit'] * 1e3:6.2f} ms"
              f"   ({r['n_refit']} acks during {r['refits']} refits, interleaved with the quiet ones)")
        print(f"  p99 with refit / without   {ratio:5.2f}x   (target <= 2x: {'met' if ratio <= 2 else 'NOT met'})")
    always = _run(run_always(args.seconds))
    print(f"\nsingle deliveries/s with log.fsync: always (group commit): {always:,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
