"""Several Scrapy processes, one agent (issue 29's acceptance): three Scrapy processes crawl a shared
scrapy-redis frontier, each running the add-on against ONE ``robotctl serve`` agent; one process is killed
(SIGKILL) mid-crawl.

- the crawl completes: every page of the frontier is fetched, once, or again only when it was one the
  killed process had taken (tests/scrapy/redis_fleet_harness.py hands those back to the frontier);
- the agent's fleet view (``GET /v1/robots``) lists only the live processes' robots once the killed
  process's lease has run out (``robots.on_lease_lost: deregister``), none of them lease-lost, and after the
  survivors' clean shutdown no robot at all;
- while all three lived, the agent's active robots were spread across the processes (no two processes'
  active robots differ by more than one in any view), and every process fetched pages; after the kill the
  survivors fetched on, with the dead process's share.

Needs Debian's redis-server (``make servers`` installs it; ``make test`` runs that first) and scrapy-redis
(the scrapy extra). Waits have deadlines, never fixed sleeps; the figures are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("scrapy_redis", reason="scrapy-redis is not installed: pip install 'robotctl[scrapy]'")

pytestmark = [pytest.mark.scrapy, pytest.mark.slow, pytest.mark.server,
              pytest.mark.skipif(shutil.which("redis-server") is None,
                                 reason="needs Debian's redis-server (make servers installs it)")]

HARNESS = Path(__file__).with_name("redis_fleet_harness.py")
PAGES = 300
PROCESSES = ("p1", "p2", "p3")
ROBOTS_PER_PROCESS = 4
LEASE_S = 2.0
KILL_AFTER = PAGES // 3
#: r(i) for K = 10: 6 of the 12 robots at an empty queue, fewer as it fills (no refit: a fixed policy)
POLICY = [6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, check: Callable[[], Any], timeout_s: float, every_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s")
        time.sleep(every_s)


@contextmanager
def _process(args: list[str], *, cwd: Path, env: dict[str, str], log: Path,
             stdin: bool = False) -> Iterator[subprocess.Popen[str]]:
    with log.open("w") as out:
        proc = subprocess.Popen(args, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE if stdin else out,
                                stderr=out, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=15)


def _get(url: str, token: str | None = None) -> Any:
    import urllib.request

    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _agent_config(tmp_path: Path) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(
        "server: {host: 127.0.0.1, port: 0}\n"                     # the token: ROBOTCTL_SERVER_TOKEN
        f"queue: {{capacity: {len(POLICY) - 1}}}\n"
        f"robots: {{count: {len(PROCESSES) * ROBOTS_PER_PROCESS}, lease_s: {LEASE_S}, "
        "on_lease_lost: deregister}\n"
        f"policy: {{startup: {POLICY}}}\n"
        "refit: {interval_s: 100000, min_interval_s: 100000, cold_start_deliveries: 0}\n"
        f"log: {{dir: {tmp_path / 'agent-log'}, fsync: never}}\n")
    return path


def _by_process(view: dict[str, Any]) -> tuple[Counter[str], Counter[str]]:
    """Registered and active robots per process in a fleet view."""
    registered = Counter(r.get("process") for r in view["robots"])
    active = Counter(r.get("process") for r in view["robots"] if r["state"] == "active")
    return registered, active


def test_three_processes_one_agent_one_killed(tmp_path: Path) -> None:
    import redis

    token = "fleet-" + os.urandom(16).hex()
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("ROBOTCTL_TOKEN", None)
    t_start = time.monotonic()
    load_before = os.getloadavg()
    redis_port = _free_port()
    with _process(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", str(tmp_path)], cwd=tmp_path, env=env,
                  log=tmp_path / "redis.log"), \
            _process([sys.executable, "-m", "robotctl.cli", "serve", "--config", str(_agent_config(tmp_path)),
                      "--json"], cwd=tmp_path, env=dict(env, ROBOTCTL_SERVER_TOKEN=token),
                     log=tmp_path / "agent.log", stdin=True) as agent_proc, \
            _process([sys.executable, str(HARNESS), "site", str(PAGES)], cwd=tmp_path, env=env,
                     log=tmp_path / "site.log", stdin=True) as site_proc:
        assert agent_proc.stdout is not None and site_proc.stdout is not None
        agent_url = json.loads(agent_proc.stdout.readline())["url"]
        site_url = json.loads(site_proc.stdout.readline())["url"]
        redis_url = f"redis://127.0.0.1:{redis_port}/0"
        r = redis.Redis.from_url(redis_url)
        _wait("redis-server answers", lambda: _quiet(r.ping), 20)

        def fleet() -> dict[str, Any]:
            return dict(_get(f"{agent_url}/v1/robots", token))

        def hits() -> dict[str, list[tuple[str, float]]]:
            return dict(_get(f"{site_url}/_hits"))

        crawl_env = dict(env, ROBOTCTL_TOKEN=token)  # the token from the environment, not settings.py
        crawlers: dict[str, subprocess.Popen[str]] = {}
        with _crawlers(crawlers, tmp_path, crawl_env, redis_url, agent_url):
            n_robots = len(PROCESSES) * ROBOTS_PER_PROCESS
            view = _wait("every process registers its robots",
                         _when(fleet, lambda v: len(v["robots"]) == n_robots), 90, 0.2)
            assert set(_by_process(view)[0]) == set(PROCESSES)
            t_seeded = time.monotonic()
            r.rpush("fleet:start_urls", *[json.dumps({"url": f"{site_url}/p/{n}"}) for n in range(PAGES)])

            samples_three: list[Counter[str]] = []
            modes_three: list[int] = []

            def crawled_third() -> bool:
                v = fleet()
                registered, active = _by_process(v)
                if len(registered) == len(PROCESSES) and not any(x["lease_lost"] for x in v["robots"]):
                    samples_three.append(active)
                    modes_three.append(v["mode"])
                # killed while it holds pages taken from the frontier and not yet crawled
                return len(hits()) >= KILL_AFTER and r.llen(f"fleet:inflight:{PROCESSES[-1]}") > 0

            _wait(f"{KILL_AFTER} pages crawled", crawled_third, 60, 0.05)
            victim = crawlers[PROCESSES[-1]]
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=15)
            t_kill = time.monotonic()
            held = r.llen(f"fleet:inflight:{PROCESSES[-1]}")
            live = set(PROCESSES[:-1])
            view = _wait("the killed process's robots expire",
                         _when(fleet, lambda v: set(_by_process(v)[0]) == live), 60, 0.1)
            t_expired = time.monotonic()
            ids = sorted(x["robot"] for x in view["robots"])
            assert len(ids) == len(live) * ROBOTS_PER_PROCESS, ids
            assert all(x["process"] in live and not x["lease_lost"] for x in view["robots"]), view
            _, active_after = _by_process(view)
            assert set(active_after) <= live and sum(active_after.values()) == view["mode"]
            assert abs(active_after[PROCESSES[0]] - active_after[PROCESSES[1]]) <= 1, active_after  # dealt anew

            def done() -> bool:
                inflight = sum(r.llen(f"fleet:inflight:{p}") for p in PROCESSES)
                return r.llen("fleet:start_urls") == 0 and inflight == 0 and len(hits()) == PAGES

            _wait("the crawl completes", done, 120, 0.2)
            t_done = time.monotonic()
            final = fleet()
            assert sorted(x["robot"] for x in final["robots"]) == ids  # still the live processes' robots
            for p in live:
                crawlers[p].send_signal(signal.SIGTERM)  # a clean shutdown deregisters the robots
            for p in live:
                crawlers[p].wait(timeout=60)
            after_close = fleet()
            totals = _get(f"{agent_url}/v1/status", token)["totals"]

        served = hits()
        reclaimed = {json.loads(x)["url"].removeprefix(site_url) for x in r.lrange("fleet:reclaimed", 0, -1)}
        agent_proc.stdin.close()  # type: ignore[union-attr]

    # the crawl completed: every page once, or twice only if the killed process had taken it
    assert sorted(served) == sorted(f"/p/{n}" for n in range(PAGES))
    twice = {path for path, who in served.items() if len(who) > 1}
    assert twice <= reclaimed, (twice - reclaimed)
    assert len(reclaimed) == held >= 1  # what the killed process held went back to the frontier
    for path in twice:  # fetched again by a survivor after the kill
        assert served[path][0][0].endswith(f"({PROCESSES[-1]})") and served[path][-1][1] > t_kill, served[path]
    # while all three lived: the active robots spread across the processes, and each process fetched
    assert len(samples_three) >= 3, samples_three
    for active, mode in zip(samples_three, modes_three, strict=True):
        counts = [active.get(p, 0) for p in PROCESSES]
        assert sum(counts) == mode and max(counts) - min(counts) <= 1, (active, mode)
    by_process_before = Counter(who[0][0].rsplit("(", 1)[1].rstrip(")") for who in served.values()
                                if who[0][1] < t_kill)
    assert set(by_process_before) == set(PROCESSES), by_process_before
    # after the kill the survivors went on, both of them
    after = Counter(ua.rsplit("(", 1)[1].rstrip(")") for who in served.values() for ua, t in who if t > t_kill)
    assert set(after) == live and all(after[p] > 0 for p in live), after
    # a clean shutdown deregisters the survivors' robots
    assert after_close["robots"] == [], after_close
    # every item is a delivery to the one agent: all the survivors' (flushed at their close), some of the
    # killed process's; no process set the shared queue to its own count
    fetches = Counter(ua.rsplit("(", 1)[1].rstrip(")") for who in served.values() for ua, _ in who)
    assert fetches[PROCESSES[0]] + fetches[PROCESSES[1]] <= totals["pages"] <= sum(fetches.values()), totals
    assert totals["resyncs"] == 0, totals
    print(f"\nfleet: {PAGES} pages, {len(PROCESSES)} processes x {ROBOTS_PER_PROCESS} robots, lease {LEASE_S:g} s; "
          f"fetched once {PAGES - len(twice)}, twice {len(twice)} (the killed process held {held}, "
          f"reclaimed {len(reclaimed)}); "
          f"killed after {sum(1 for w in served.values() if w[0][1] < t_kill)} pages; "
          f"robots expired {t_expired - t_kill:.1f} s after the kill; crawl {t_done - t_seeded:.1f} s from the "
          f"seed; {len(samples_three)} views with three processes, active per process "
          f"{sorted(Counter(tuple(sorted(s.values())) for s in samples_three).items())}; "
          f"pages before the kill {dict(by_process_before)}, after {dict(after)}; "
          f"the agent counted {totals['pages']} deliveries of "
          f"{sum(fetches.values())} fetches; wall {time.monotonic() - t_start:.1f} s; "
          f"load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after")


def _when(get: Callable[[], Any], ok: Callable[[Any], bool]) -> Callable[[], Any]:
    """A check for :func:`_wait`: ``get()``'s value when ``ok`` of it, else None."""
    def check() -> Any:
        value = get()
        return value if ok(value) else None

    return check


def _quiet(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception:
        return None


@contextmanager
def _crawlers(crawlers: dict[str, subprocess.Popen[str]], tmp_path: Path, env: dict[str, str], redis_url: str,
              agent_url: str) -> Iterator[None]:
    procs = []
    try:
        for name in PROCESSES:
            log = (tmp_path / f"crawl-{name}.log").open("w")
            procs.append(log)
            crawlers[name] = subprocess.Popen([sys.executable, str(HARNESS), "crawl", name, redis_url, agent_url],
                                              cwd=tmp_path, env=env, stdout=log, stderr=log,
                                              stdin=subprocess.DEVNULL, text=True)
        yield
    except BaseException:
        for name in PROCESSES:
            path = tmp_path / f"crawl-{name}.log"
            sys.stderr.write(f"--- {name}\n{path.read_text()[-3000:] if path.exists() else ''}\n")
        raise
    finally:
        for proc in crawlers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=15)
        for log in procs:
            log.close()

