"""Issue 11: property-based fuzzing of everything a hostile or careless user hands robotctl: HTTP API bodies,
model files, sidecar configurations (files and environment), and trace or delivery-log lines.

For every generated input the answer is a 4xx naming the field (an HTTP request) or exit code 2 with one line
``robotctl: error: <field>: <problem>`` (a command), or success; never a traceback, a 500, a hang, or, for a
refused request, a change of the agent's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import http.client
import io
import json
import re
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from robotctl import InputError
from robotctl.cli import main

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "k9Vb2-Qx7_Lm4Ns8Tp1Wz"
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                derandomize=True)

# -- values: what a careless or hostile user types -------------------------------------------------------
EDGE_NUMBERS = st.sampled_from([0, -1, 1, 2, 3, 5, 1.5, -0.5, 1e308, -1e308, 1e-308, 5e-324, 10**400, -(10**400),
                                2**63, 2**31, 0.1, 86400.0, 1e12])
SCALARS = (st.none() | st.booleans() | EDGE_NUMBERS | st.integers(-10, 10)
           | st.floats(allow_nan=False, allow_infinity=False, width=64)
           | st.text(max_size=12) | st.sampled_from(["x", "", "null", "1e400", "NaN", "\u00e9\u4e2d", "\x00", " "]))
KEYS = st.sampled_from(["robot", "pages", "bytes", "client_time", "service_s", "length", "rank", "default_state",
                        "deliveries", "completions", "t", "event", "x"]) | st.text(max_size=6)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5),
                      max_leaves=12)


def one_line_error(code: int, err: str) -> None:
    """Exit 2 and one line ``robotctl: error: <field>: <problem>``; 0 or 1 otherwise; never a traceback."""
    event(f"exit {code}")
    assert "Traceback" not in err, err
    assert code in (0, 1, 2), (code, err)
    if code == 2:  # ours ("robotctl: error: field: problem") or argparse's ("robotctl solve: error: ...")
        lines = err.strip().splitlines()
        assert len(lines) == 1 and re.match(r"robotctl( [a-z]+)?: error: \S.*: ", lines[0]), err


def run_cli(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's own errors
            code = int(exc.code or 0)
    return code, err.getvalue()


# -- the HTTP API -----------------------------------------------------------------------------------------
class AgentThread:
    """A real agent on a socket, in its own thread and event loop, for synchronous clients."""

    def __init__(self, log_dir: Path) -> None:
        from robotctl.agent.app import run_in_process
        from robotctl.agent.config import AgentConfig

        cfg = AgentConfig.from_dict({
            "server": {"port": 0, "token": TOKEN, "long_poll_max_s": 0.02, "max_batch": 8, "max_body_bytes": 4096},
            "queue": {"capacity": 5}, "robots": {"count": 3, "lease_s": 1000.0},
            "refit": {"interval_s": 1e6, "min_interval_s": 1e6}, "log": {"dir": str(log_dir), "fsync": "never"}})
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._cm = run_in_process(cfg)
        self.url, self.app = self.call(self._cm.__aenter__())
        self.port = int(self.url.rsplit(":", 1)[1])

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def snapshot(self) -> Any:
        from robotctl.agent.app import AGENT

        async def take() -> Any:
            st = self.app[AGENT].status()
            totals = {k: v for k, v in st["totals"].items() if k != "bad_requests"}
            robots = [(r["robot"], r["rank"], r["default_state"], r["state"], r["version"])
                      for r in st["robots"]["registered"]]
            return totals, st["queue"]["length"], robots, st["log"]["bytes_written"], st["policy"]["version"]

        return self.call(take())

    def close(self) -> None:
        self.call(self._cm.__aexit__(None, None, None))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
        self.loop.close()

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)  # a hang is a failure
        try:
            conn.request(method, path, body=body, headers={"Connection": "close", **headers})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def agent() -> Iterator[AgentThread]:
    with tempfile.TemporaryDirectory(prefix="robotctl-fuzz-") as d:
        a = AgentThread(Path(d))
        try:
            yield a
        finally:
            a.close()


ITEM = st.fixed_dictionaries({}, optional={k: VALUES | EDGE_NUMBERS for k in
                                           ("robot", "pages", "bytes", "client_time", "service_s")})
BODIES = (VALUES.map(lambda v: json.dumps(v).encode())
          | ITEM.map(lambda v: json.dumps(v).encode())
          | st.lists(ITEM, max_size=10).map(lambda v: json.dumps({"deliveries": v}).encode())
          | st.lists(ITEM, max_size=10).map(lambda v: json.dumps({"completions": v}).encode())
          | st.fixed_dictionaries({}, optional={"length": VALUES, "robot": VALUES, "rank": VALUES,
                                                "default_state": VALUES}).map(lambda v: json.dumps(v).encode())
          | st.fixed_dictionaries({"action": st.sampled_from(["pause", "pin", "resume"]) | VALUES},
                                  optional={"robots": VALUES | EDGE_NUMBERS, "duration_s": VALUES | EDGE_NUMBERS,
                                            "reason": VALUES, "mode": VALUES}).map(lambda v: json.dumps(v).encode())
          | st.fixed_dictionaries({"mode": st.sampled_from(["command", "advise"]) | VALUES}).map(
              lambda v: json.dumps(v).encode())
          | st.fixed_dictionaries({"actuation": st.sampled_from(["command", "advise"]) | VALUES}).map(
              lambda v: json.dumps(v).encode())
          | st.binary(max_size=64)
          | st.integers(1, 600).map(lambda n: b"[" * n + b"]" * n))
ROUTES = st.sampled_from([("POST", "/v1/deliveries"), ("POST", "/v1/completions"), ("POST", "/v1/obsolete"),
                          ("POST", "/v1/given_up"), ("POST", "/v1/queue"), ("POST", "/v1/robots"),
                          ("DELETE", "/v1/robots/{id}"),
                          ("GET", "/v1/robots/{id}/command?version={q}&wait_s={q}"), ("GET", "/v1/status"),
                          ("GET", "/v1/policy"), ("POST", "/v1/robots/{id}"), ("GET", "/v1/{id}"),
                          ("POST", "/v1/override"), ("GET", "/v1/override"), ("POST", "/v1/actuation"),
                          ("POST", "/v1/control"), ("GET", "/v1/control"), ("POST", "/v1/mode")])
AUTH = st.sampled_from([f"Bearer {TOKEN}"] * 6 + [f"bearer {TOKEN}", "", "Bearer", f"Basic {TOKEN}",
                                                  "Bearer wrong-wrong-wrong-wrong"])
PATH_PART = st.sampled_from(["r1", "r2", "robot-1", "x" * 300, "%00", "..", "%ff", "r%201"]) | \
    st.text(alphabet="abcXYZ019-_.~%", max_size=10).filter(bool)


@settings(FUZZ, max_examples=250)
@given(route=ROUTES, body=BODIES, auth=AUTH, part=PATH_PART, query=st.sampled_from(["0", "-1", "x", "1e400", "",
                                                                                        "nan", "inf", "3"]))
def test_http_bodies_get_a_4xx_naming_the_field_or_succeed(agent: AgentThread, route: tuple[str, str], body: bytes,
                                                           auth: str, part: str, query: str) -> None:
    method, template = route
    path = template.format(id=part, q=query)
    before = agent.snapshot()
    status, raw = agent.request(method, path, body if method == "POST" else None,
                                {"Authorization": auth, "Content-Type": "application/json"} if auth else {})
    assert status < 500, (status, path, body[:200], raw[:300])
    event(f"HTTP {status}")
    doc = json.loads(raw, parse_constant=lambda name: pytest.fail(f"bare {name} in {raw[:200]!r}"))
    if 400 <= status < 500:
        assert isinstance(doc, dict) and doc.get("field"), (status, doc)
        assert agent.snapshot() == before, (status, path, body[:200], doc)


# -- trace and delivery-log lines ------------------------------------------------------------------------------
EVENTS = st.fixed_dictionaries(
    {"t": st.floats(0, 1e6) | SCALARS, "event": st.sampled_from(["delivery", "completion", "obsolete", "loss",
                                                                  "queue", "park", "resume", "given_up"]) | SCALARS},
    optional={k: VALUES | EDGE_NUMBERS for k in ("pages", "bytes", "service_s", "robot", "active", "client_t")})
GOOD_EVENTS = st.fixed_dictionaries(
    {"t": st.floats(0, 1e4), "event": st.sampled_from(["delivery"] * 4 + ["completion", "obsolete", "park", "queue",
                                                                          "given_up"])},
    optional={"pages": st.integers(1, 4), "bytes": st.integers(0, 10**6), "service_s": st.floats(0, 10),
              "robot": st.sampled_from(["r1", "r2"]), "active": st.integers(1, 3)})
BAD_LINES = (EVENTS.map(lambda e: json.dumps(e).encode()) | st.binary(max_size=40).filter(lambda b: b"\n" not in b)
             | VALUES.map(lambda v: json.dumps(v).encode()))
# mostly sound traces, sorted by time (the fitter's contract), with a bad line now and then
LINES = st.tuples(st.lists(GOOD_EVENTS, min_size=1, max_size=60), st.lists(st.tuples(st.integers(0, 60), BAD_LINES),
                                                                          max_size=2)).map(
    lambda x: _insert(sorted(x[0], key=lambda e: e["t"]), x[1]))


def _insert(events: list[dict[str, Any]], bad: list[tuple[int, bytes]]) -> list[bytes]:
    lines = [json.dumps(e).encode() for e in events]
    for at, raw in bad:
        lines.insert(min(at, len(lines)), raw)
    return lines


@settings(FUZZ, max_examples=120)
@given(lines=LINES)
def test_delivery_log_lines_never_stop_a_start(lines: list[bytes]) -> None:
    from robotctl.agent._http import dumps
    from robotctl.agent.clock import ManualClock
    from robotctl.agent.config import AgentConfig
    from robotctl.agent.core import Agent
    from robotctl.agent.log import QUARANTINE_FILE, list_segments

    with tempfile.TemporaryDirectory(prefix="robotctl-fuzz-") as d:
        log_dir = Path(d)
        (log_dir / "deliveries-00000001.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        kept = [x for x in lines if x.strip()]
        cfg = AgentConfig.from_dict({"queue": {"capacity": 5}, "robots": 3, "log": {"dir": d, "fsync": "never"},
                                     "refit": {"min_deliveries": 2}})
        a = Agent(cfg, ManualClock(2e6))
        a.open()
        quarantined = a.log_stats().quarantined
        left = [x for x in list_segments(log_dir)[0].read_bytes().split(b"\n") if x.strip()]
        assert len(left) + quarantined == len(kept)  # every line is either kept or moved aside, none lost
        dumps(a.status())  # strict JSON
        a.refit_input(2e6)  # the window the next fit would see
        asyncio.run(a.close())
        if quarantined:
            assert len((log_dir / QUARANTINE_FILE).read_text().splitlines()) == quarantined
        b = Agent(cfg, ManualClock(3e6))
        b.open()
        assert b.log_stats().quarantined == 0
        asyncio.run(b.close())


@settings(FUZZ, max_examples=80)
@given(lines=LINES)
def test_fit_on_any_trace_is_exit_0_1_or_one_line(lines: list[bytes]) -> None:
    with tempfile.TemporaryDirectory(prefix="robotctl-fuzz-") as d:
        path = Path(d) / "trace.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        one_line_error(*run_cli("fit", str(path), "--mode-field", "active", "--capacity", "5"))


# -- model files -------------------------------------------------------------------------------------------
EXAMPLE = yaml.safe_load((ROOT / "config" / "paper-example.yaml").read_text())
MODEL_PATHS = ["model", "model.capacity", "model.admission", "model.arrivals", "model.arrivals.per_mode",
               "model.arrivals.per_mode.1", "model.arrivals.per_mode.1.0", "model.arrivals.per_mode.1.0.0",
               "model.arrivals.per_mode.3.1", "model.service", "model.service.beta", "model.service.S",
               "model.service.S.1", "model.obsolescence", "model.obsolescence.gamma", "model.obsolescence.Gamma",
               "costs", "costs.loss", "costs.robot", "extra"]
MATRICES = st.lists(st.lists(EDGE_NUMBERS | st.floats(-5, 5), min_size=0, max_size=3), min_size=0, max_size=3)
RULES = st.fixed_dictionaries({"rule": st.sampled_from(["linear", "thinning", "independent", "marked", "other"])},
                              optional={"base": st.lists(MATRICES, max_size=3) | VALUES, "modes": VALUES,
                                        "base_mode": VALUES, "q": VALUES, "robots": st.lists(st.lists(MATRICES,
                                                                                                   max_size=2),
                                                                                          max_size=3) | VALUES,
                                        "D0": MATRICES | VALUES})
MODEL_VALUES = VALUES | MATRICES | RULES | st.integers(-2, 8)
# changes a careful user makes: the file stays valid, and the solver runs on it
BENIGN = (st.tuples(st.just("model.capacity"), st.integers(1, 8))
          | st.tuples(st.sampled_from(["costs.loss", "costs.robot", "costs.starvation"]), st.floats(0, 1e3))
          | st.tuples(st.just("model.obsolescence"), st.none() | st.builds(lambda r: {"rate": r}, st.floats(1e-3, 1e3)))
          | st.tuples(st.just("model.service"), st.builds(lambda r: {"rate": r}, st.floats(1e-3, 1e3)))
          | st.tuples(st.just("model.admission"), st.sampled_from(["partial", "reject-batch"])))


def _set(doc: Any, path: str, value: Any) -> None:
    keys = path.split(".")
    node = doc
    for k in keys[:-1]:
        if isinstance(node, dict):
            node = node.get(int(k) if k.isdigit() and int(k) in node else k)
        elif isinstance(node, list) and k.isdigit() and int(k) < len(node):
            node = node[int(k)]
        else:
            return
    last = keys[-1]
    if isinstance(node, dict):
        node[int(last) if last.isdigit() and int(last) in node else last] = value
    elif isinstance(node, list) and last.isdigit() and int(last) < len(node):
        node[int(last)] = value


@settings(FUZZ, max_examples=150)
@given(changes=st.lists(BENIGN | BENIGN | st.tuples(st.sampled_from(MODEL_PATHS), MODEL_VALUES), max_size=3),
       command=st.sampled_from(["solve", "solve", "solve", "optimise"]))
def test_model_files_are_solved_or_refused_in_one_line(changes: list[tuple[str, Any]], command: str) -> None:
    doc = copy.deepcopy(EXAMPLE)
    for path, value in changes:
        _set(doc, path, value)
    K = doc.get("model", {}).get("capacity") if isinstance(doc.get("model"), dict) else None
    levels = K + 1 if isinstance(K, int) and not isinstance(K, bool) and 0 <= K <= 12 else 6
    args = ["--policy", ",".join(["1"] * levels)] if command == "solve" else ["--modes", "3,1"]
    with tempfile.TemporaryDirectory(prefix="robotctl-fuzz-") as d:
        path = Path(d) / "model.yaml"
        path.write_text(yaml.safe_dump(doc, allow_unicode=True))
        one_line_error(*run_cli(command, str(path), *args))


# -- sidecar configurations ----------------------------------------------------------------------------------
def _documented() -> dict[str, list[str]]:
    from robotctl.agent.config import documented_keys

    return {s: list(keys) for s, keys in documented_keys().items()}


SECTIONS = _documented()
CONFIG_PATHS = [f"{s}.{k}" for s, keys in SECTIONS.items() for k in keys] + list(SECTIONS) + ["extra", "server.x"]


@settings(FUZZ, max_examples=200)
@given(changes=st.lists(st.tuples(st.sampled_from(CONFIG_PATHS), VALUES | st.integers(-2, 10**12)), min_size=1,
                        max_size=3))
def test_sidecar_configs_are_accepted_or_refused_in_one_line(changes: list[tuple[str, Any]]) -> None:
    with tempfile.TemporaryDirectory(prefix="robotctl-fuzz-") as d:
        doc: dict[str, Any] = {"server": {"token": TOKEN, "port": 0}, "queue": {"capacity": 5}, "robots": {"count": 3},
                               "log": {"dir": str(Path(d) / "log")}}
        for path, value in changes:
            section, _, key = path.partition(".")
            if not key:
                doc[section] = value
            elif isinstance(doc.setdefault(section, {}), dict):
                doc[section][key] = value
        path = Path(d) / "agent.yaml"
        path.write_text(yaml.safe_dump(doc, allow_unicode=True))
        one_line_error(*run_cli("serve", "--config", str(path), "--check"))


@settings(FUZZ, max_examples=200)
@given(env=st.dictionaries(st.sampled_from([f"ROBOTCTL_{p.replace('.', '_').upper()}" for p in CONFIG_PATHS
                                            if "." in p] + ["ROBOTCTL_SERVER_NOPE", "ROBOTCTL_CONFIG"]),
                           st.text(max_size=20) | st.sampled_from(["null", "~", "[1, 2", "{a: 1}", "1e400", "-1",
                                                                    "true", TOKEN, f"{TOKEN} #x"]), max_size=3))
def test_environment_overrides_are_accepted_or_name_the_variable(env: dict[str, str]) -> None:
    from robotctl.agent.config import load_config

    with tempfile.TemporaryDirectory(prefix="robotctl-fuzz-") as d:
        path = Path(d) / "agent.yaml"
        path.write_text(f"queue: {{capacity: 5}}\nlog: {{dir: {Path(d) / 'log'}}}\n")
        try:
            cfg = load_config(path, environ=env)
        except InputError as exc:
            assert "\n" not in str(exc) and exc.field, exc
            secret = env.get("ROBOTCTL_SERVER_TOKEN", "")
            if len(secret) >= 8 and not any(secret in v for k, v in env.items() if k != "ROBOTCTL_SERVER_TOKEN"):
                assert secret not in str(exc).replace(str(path), "")  # a token is never echoed
        else:
            if "ROBOTCTL_SERVER_TOKEN" in env:
                assert cfg.server.token == env["ROBOTCTL_SERVER_TOKEN"]  # verbatim, never cut or cleared
