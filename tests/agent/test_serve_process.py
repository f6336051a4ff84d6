"""`robotctl serve` as a real process: a kill -9 loses no acknowledged delivery, SIGTERM shuts down
gracefully (robots told their default, log flushed), a bad configuration exits 2 naming the key."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from robotctl.agent.log import list_segments

ROOT = Path(__file__).resolve().parents[2]


def _write_config(tmp_path: Path, fsync: str, startup: str = "all") -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(
        "server: {host: 127.0.0.1, port: 0, insecure_loopback: true}\n"
        "queue: {capacity: 50}\n"
        "robots: {count: 2, allow_unregistered: true}\n"
        f"policy: {{startup: {startup}}}\n"
        "refit: {interval_s: 100000, min_interval_s: 100000}\n"
        f"log: {{dir: {tmp_path / 'log'}, fsync: {fsync}, fsync_interval_ms: 1000}}\n")
    return path


@asynccontextmanager
async def _serve(config: Path) -> AsyncIterator[tuple[str, subprocess.Popen[bytes]]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "robotctl.cli", "serve", "--config", str(config), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    try:
        assert proc.stdout is not None
        line = await asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline)
        if not line:
            raise AssertionError(f"the agent did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
        yield json.loads(line)["url"], proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def _children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _logged(log_dir: Path) -> list[dict]:
    return [json.loads(x) for p in list_segments(log_dir) for x in p.read_text().splitlines() if x.strip()]


@pytest.mark.parametrize("fsync", ["always", "interval", "never"])
async def test_a_restart_after_kill_loses_no_acknowledged_delivery(tmp_path: Path, fsync: str) -> None:
    config = _write_config(tmp_path, fsync)
    acked: set[int] = set()
    sent = 0
    async with _serve(config) as (url, proc), aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/robots", json={"robot": "r1"}) as r:
            assert r.status == 200

        async def robot(k: int) -> None:
            nonlocal sent
            seq = k
            while True:
                sent += 1
                try:
                    async with s.post(url + "/v1/deliveries",
                                      json={"robot": "r1", "pages": 1, "client_time": float(seq)}) as r:
                        if r.status == 200:
                            await r.json()
                            acked.add(seq)
                except (aiohttp.ClientError, OSError):
                    return
                seq += 16

        workers = [asyncio.create_task(robot(k)) for k in range(16)]
        while len(acked) < 600:
            await asyncio.sleep(0.005)
        children = _children(proc.pid)  # the refit worker (and multiprocessing's resource tracker)
        proc.send_signal(signal.SIGKILL)  # requests are in flight: some are never acknowledged
        await asyncio.gather(*workers)
    for _ in range(200):  # the refit worker notices its agent is gone and exits
        if not any(_alive(c) for c in children):
            break
        await asyncio.sleep(0.05)
    assert children and not any(_alive(c) for c in children)
    assert sent > len(acked) >= 600
    logged = {int(e["client_t"]) for e in _logged(tmp_path / "log") if e["event"] == "delivery"}
    assert acked <= logged  # every acknowledged delivery is in the log

    async with _serve(config) as (url, proc), aiohttp.ClientSession() as s:
        async with s.get(url + "/v1/status") as r:
            status = await r.json()
        admitted = min(len(logged), 50)  # K = 50, nothing completed: the queue filled up
        assert status["queue"]["length"] == admitted
        assert status["totals"]["recovered_deliveries"] == len(logged)
        assert [rb["robot"] for rb in status["robots"]["registered"]] == ["r1"]
        async with s.post(url + "/v1/deliveries", json={"robot": "r1", "client_time": -1.0}) as r:
            ack = await r.json()
        proc.send_signal(signal.SIGTERM)
        await asyncio.get_running_loop().run_in_executor(None, proc.wait, 30)
    events = _logged(tmp_path / "log")
    before = max(e["t"] for e in events if e.get("client_t", 0) >= 0)
    assert ack["t"] >= before  # agent time never goes back across a restart


async def test_sigterm_tells_robots_their_default_and_flushes_the_log(tmp_path: Path) -> None:
    config = _write_config(tmp_path, "interval", startup="1")
    async with _serve(config) as (url, proc), aiohttp.ClientSession() as s:
        for rid in ("r1", "r2"):
            async with s.post(url + "/v1/robots", json={"robot": rid, "default_state": "active"}) as r:
                view = await r.json()
        assert view["state"] == "parked"
        for k in range(5):
            async with s.post(url + "/v1/deliveries", json={"robot": "r1", "client_time": float(k)}) as r:
                assert r.status == 200
        poll = asyncio.create_task(s.get(f"{url}/v1/robots/r2/command?version={view['version']}&wait_s=5",
                                         headers={"X-Robot-Key": view["robot_key"]}))
        await asyncio.sleep(0.2)
        assert not poll.done()
        proc.send_signal(signal.SIGTERM)
        resp = await poll
        command = await resp.json()
        code = await asyncio.get_running_loop().run_in_executor(None, proc.wait, 30)
    assert code == 0
    assert command["state"] == "active" and command["reason"] == "shutdown"
    events = _logged(tmp_path / "log")
    assert sum(e["event"] == "delivery" for e in events) == 5
    assert events[-1]["event"] == "resume" and events[-1]["robot"] == "r2"
    saved = json.loads((tmp_path / "log" / "robots.json").read_text())
    assert [r["robot"] for r in saved] == ["r1", "r2"]
    assert proc.stderr is not None and b"event=shutdown" in proc.stderr.read()


def test_bad_configuration_exits_2_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("queue: {capacity: 5}\nrefit: {interval: 60}\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "robotctl.cli", "serve", "--config", str(path)], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "refit.interval" in lines[0] and "is not a known key" in lines[0]
    out = subprocess.run([sys.executable, "-m", "robotctl.cli", "serve", "--config", str(path), "--check"],
                         capture_output=True, text=True, env=dict(env, ROBOTCTL_REFIT_INTERVAL_S="x"), cwd=ROOT,
                         timeout=60)
    assert out.returncode == 2


def test_check_prints_the_configuration(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), ROBOTCTL_SERVER_TOKEN="t0k-t0k-t0k-t0k-t0k",
               ROBOTCTL_REFIT_INTERVAL_S="60")
    out = subprocess.run([sys.executable, "-m", "robotctl.cli", "serve", "--config", "config/sidecar.yaml", "--check",
                          "--json", "--port", "0"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["refit"]["interval_s"] == 60.0 and d["server"]["port"] == 0 and d["server"]["token"] == "***"


async def test_generate_token_prints_it_once_and_the_agent_requires_it(tmp_path: Path) -> None:
    """Issue 11, finding 1: ``robotctl serve --generate-token`` makes the token and prints it once; without the
    token nobody moves the robots."""
    config = tmp_path / "agent.yaml"
    config.write_text("server: {host: 127.0.0.1, port: 0}\nqueue: {capacity: 5}\n"
                      f"robots: {{count: 1, allow_unregistered: true}}\nlog: {{dir: {tmp_path / 'log'}}}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROBOTCTL_")}
    env.update(PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "robotctl.cli", "serve", "--config", str(config), "--json",
                             "--generate-token"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = json.loads(await asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline))
        url, token = first["url"], first["token"]
        assert len(token) >= 43
        async with aiohttp.ClientSession() as s:
            for headers in ({}, {"Authorization": "Bearer " + token[:-1] + "x"}):
                async with s.post(url + "/v1/queue", json={"length": 5}, headers=headers) as r:
                    assert r.status == 401
            async with s.post(url + "/v1/queue", json={"length": 5},
                              headers={"Authorization": f"Bearer {token}"}) as r:
                assert r.status == 200
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.get_running_loop().run_in_executor(None, proc.communicate, None, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert token.encode() not in out + err  # printed once, in the first line only


def test_a_generated_token_is_refused_next_to_a_configured_one(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(f"queue: {{capacity: 5}}\nlog: {{dir: {tmp_path / 'log'}}}\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), ROBOTCTL_SERVER_TOKEN="k9Vb2-Qx7_Lm4Ns8Tp1Wz")
    out = subprocess.run([sys.executable, "-m", "robotctl.cli", "serve", "--config", str(config), "--check",
                          "--generate-token"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 2 and "--generate-token" in out.stderr and "k9Vb2" not in out.stderr
