"""The OpenAPI description of /v1 (robotctl/agent/openapi.json) stays true to the app.

- it is a valid OpenAPI 3.1 document, served at GET /v1/openapi.json;
- the app's routes and the document's operations are the same set (a route added to robotctl/agent/app.py
  without an entry fails here, and so does an entry for a route that is gone);
- each request example matches its schema and the agent accepts it, and the fields the agent accepts
  (named in its own error hint) are the fields the document lists;
- every operation is called on a running agent, and every answer, errors included, has a status the
  document lists and a body that matches its schema (closed objects: a new field in an answer fails).
"""

from __future__ import annotations

import copy
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest
from openapi_spec_validator import validate as validate_openapi

from robotctl.agent import load_model_file
from robotctl.agent.app import AGENT, create_app, run_in_process
from robotctl.agent.clock import ManualClock
from robotctl.agent.compute import RefitInput, RefitOutcome, RefitStage
from robotctl.agent.config import AgentConfig
from robotctl.agent.openapi import openapi_spec
from robotctl.agent.policy import PolicyFit
from robotctl.model import ThresholdPolicy, cost_of, solve

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-s3cret-s3cret"
METHODS = ("get", "post", "put", "patch", "delete")
SPEC = openapi_spec()


def operations(spec: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(m.upper(), path): op for path, item in spec["paths"].items() for m, op in item.items() if m in METHODS}


def check(schema: dict[str, Any], value: Any, where: str) -> None:
    """Validate ``value`` against a schema of the document (its $refs resolve inside the document)."""
    root = {**schema, "components": SPEC["components"]}
    errors = sorted(jsonschema.Draft202012Validator(root).iter_errors(value), key=lambda e: list(e.path))
    assert not errors, f"{where}: " + "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:5])


def config(tmp_path: Path) -> AgentConfig:
    """A token (so the 401s are documented too) and a revisit page list (so its routes exist)."""
    pages = tmp_path / "pages.csv"
    pages.write_text("page,change_rate\n/a,0.5\n/b,1.0\n/c,2.0\n/d,0.1\n")
    return AgentConfig.from_dict({
        "server": {"host": "127.0.0.1", "port": 0, "token": TOKEN}, "queue": {"capacity": 5},
        "robots": {"count": 4}, "log": {"dir": str(tmp_path / "log"), "fsync": "never"},
        "refit": {"min_deliveries": 2, "min_interval_s": 1e9, "interval_s": 1e9},
        "revisit": {"pages": str(pages), "fetch_time": {"mean": 0.5}}})


def test_the_document_is_valid_openapi() -> None:
    validate_openapi(copy.deepcopy(SPEC))
    assert SPEC["openapi"].startswith("3.1")


def test_every_route_has_an_operation_and_every_operation_a_route(tmp_path: Path) -> None:
    app = create_app(config(tmp_path))
    routes = {(r.method, r.resource.canonical) for r in app.router.routes()
              if r.method != "HEAD" and r.resource is not None}
    documented = set(operations(SPEC))
    assert not routes - documented, f"routes without an entry in openapi.json: {sorted(routes - documented)}"
    assert not documented - routes, f"entries in openapi.json with no route: {sorted(documented - routes)}"
    for (method, path), op in operations(SPEC).items():
        assert op.get("operationId") and op.get("summary"), (method, path)
        if "security" in op:
            assert op["security"] == [{"bearerAuth": []}] and "401" in op["responses"], f"{method} {path}"


def examples() -> list[tuple[str, str, str, Any, dict[str, Any]]]:
    out = []
    for (method, path), op in operations(SPEC).items():
        content = op.get("requestBody", {}).get("content", {}).get("application/json")
        if content is None:
            continue
        for name, ex in content["examples"].items():
            out.append((method, path, name, ex["value"], content["schema"]))
    return out


@pytest.mark.parametrize(("method", "path", "name", "value", "schema"), examples(),
                         ids=[f"{m} {p} {n}" for m, p, n, _, _ in examples()])
def test_request_examples_match_their_schemas(method: str, path: str, name: str, value: Any,
                                              schema: dict[str, Any]) -> None:
    check(schema, value, f"{method} {path} example {name}")


def _item_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema of one object of a request body (the single form where it is one or a batch)."""
    if "oneOf" in schema:
        schema = schema["oneOf"][0]
    name = schema["$ref"].rsplit("/", 1)[1]
    item: dict[str, Any] = SPEC["components"]["schemas"][name]
    return item


# -- the running agent ------------------------------------------------------------------------------
def fitted(inp: RefitInput) -> RefitOutcome:
    """A refit that adopts the paper's optimum for its first example (so /v1/policy has predictions)."""
    model, costs = load_model_file(ROOT / "config" / "paper-example.yaml")
    policy = ThresholdPolicy.parse("3,3,3,1,1,1")
    sol = solve(model, policy)
    fit = PolicyFit(policy, policy.modes, policy.thresholds, sol.measures, cost_of(sol.measures, costs), {}, model,
                    deliveries=int(inp.delivery_times.size), window=inp.window)
    return RefitOutcome(True, RefitStage.DONE, "adopted (test)", fit, deliveries=int(inp.delivery_times.size))


class Caller:
    """Calls the agent and checks each answer against the document; remembers what it called."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url
        self.called: set[tuple[str, str]] = set()
        self.statuses: set[tuple[str, str, int]] = set()
        self.keys: dict[str, str] = {}  # robot id -> the robot_key its registration returned

    async def __call__(self, method: str, template: str, path: str | None = None, body: Any = None, *,
                       token: bool = True, params: dict[str, str] | None = None, key: bool = True
                       ) -> tuple[int, Any]:
        op = SPEC["paths"][template][method.lower()]
        headers = {"Authorization": f"Bearer {TOKEN}"} if token else {}
        robot = (path or template).split("/")[3] if template.startswith("/v1/robots/") else \
            (body or {}).get("robot") if template == "/v1/robots" and isinstance(body, dict) else None
        if key and robot in self.keys:
            headers["X-Robot-Key"] = self.keys[robot]
        async with self.session.request(method, self.url + (path or template), json=body, headers=headers,
                                        params=params) as r:
            status = r.status
            ctype = r.content_type
            data: Any = await r.json() if ctype == "application/json" else await r.text()
        where = f"{method} {path or template} -> {status}"
        assert str(status) in op["responses"], f"{where}: status not in the document"
        content = op["responses"][str(status)]["content"]
        assert ctype in content, f"{where}: {ctype} not in the document"
        check(content[ctype]["schema"], data, where)
        self.called.add((method, template))
        self.statuses.add((method, template, status))
        if isinstance(data, dict) and "robot_key" in data:
            self.keys[data["robot"]] = data["robot_key"]
        return status, data


@pytest.fixture
async def caller(tmp_path: Path) -> AsyncIterator[tuple[Caller, Any]]:
    async with run_in_process(config(tmp_path), clock=ManualClock(1000.0), compute=fitted) as (url, app), \
            aiohttp.ClientSession() as s:
        yield Caller(s, url), app


async def test_every_operation_answers_as_documented(caller: tuple[Caller, Any]) -> None:
    call, app = caller
    assert (await call("GET", "/v1/openapi.json"))[1] == SPEC
    await call("GET", "/healthz")
    await call("GET", "/readyz")
    await call("GET", "/metrics")
    assert (await call("POST", "/v1/robots", body={"robot": "robot-1", "rank": 1}))[0] == 200
    assert (await call("POST", "/v1/robots", body={}))[1]["robot"] == "robot-2"
    assert (await call("POST", "/v1/robots", body={"robot": "x", "rank": 1}))[0] == 409
    assert (await call("POST", "/v1/robots", body={"robot": "x"}, token=False))[0] == 401
    await call("GET", "/v1/robots")
    for _, path, _, value, _ in examples():
        if path in ("/v1/deliveries", "/v1/completions", "/v1/obsolete", "/v1/given_up", "/v1/queue"):
            status, _ = await call("POST", path, body=value)
            assert status == 200, (path, value)
    assert (await call("POST", "/v1/deliveries", body={"robot": "robot-1", "pages": 0}))[0] == 400
    assert (await call("POST", "/v1/given_up", body={"pages": 0}))[0] == 400
    assert (await call("POST", "/v1/given_up", body={"pages": 1}, token=False))[0] == 401
    assert (await call("POST", "/v1/deliveries", body={"deliveries": [{"robot": "nobody"}]}))[0] == 400
    cmd = "/v1/robots/{robot_id}/command"
    status, view = await call("GET", cmd, "/v1/robots/robot-1/command", params={"version": "-1", "wait_s": "0"})
    assert status == 200 and view["robot"] == "robot-1"
    assert (await call("GET", cmd, "/v1/robots/nobody/command", params={"wait_s": "0"}))[0] == 404
    assert (await call("GET", cmd, "/v1/robots/robot-1/command", params={"wait_s": "x"}))[0] == 400
    status, policy = await call("GET", "/v1/policy")
    assert policy["predicted"] is None and policy["source"] == "startup"
    status, refit = await call("POST", "/v1/refit")
    assert refit["adopted"], refit["message"]
    status, policy = await call("GET", "/v1/policy")
    assert policy["predicted"] is not None and policy["cost"] is not None and policy["robots_at_level"] == [3, 3, 3,
                                                                                                             1, 1, 1]
    await call("GET", "/v1/status")
    nxt = "/v1/robots/{robot_id}/next"
    status, page = await call("GET", nxt, "/v1/robots/robot-1/next")
    assert status == 200 and page["page"] in ("/a", "/b", "/c", "/d")
    assert (await call("GET", nxt, "/v1/robots/nobody/next"))[0] == 404
    fetched = "/v1/robots/{robot_id}/fetched"
    report = {"page": page["page"], "fetch_s": 0.4, "changed": True}
    assert (await call("POST", fetched, "/v1/robots/robot-1/fetched", report))[0] == 200
    assert (await call("POST", fetched, "/v1/robots/robot-1/fetched", {"page": "/zz"}))[0] == 400
    assert (await call("POST", fetched, "/v1/robots/nobody/fetched", report))[0] == 404
    assert (await call("GET", "/v1/revisit"))[1]["pages"] == ["/a", "/b", "/c", "/d"]
    assert (await call("POST", "/v1/revisit/replan"))[1]["replanned"] in (True, False)
    pin = {"action": "pin", "robots": 2, "duration_s": 60}
    assert (await call("POST", "/v1/override", body=pin))[1]["override"] == "pinned"
    assert (await call("POST", "/v1/override", body={"action": "pin"}))[0] == 400
    assert (await call("GET", "/v1/override"))[1]["robots"] == 2
    assert (await call("POST", "/v1/override", body={"action": "resume"}))[1]["override"] == "auto"
    assert (await call("POST", "/v1/actuation", body={"actuation": "advise"}))[1]["actuation"] == "advise"
    assert (await call("POST", "/v1/actuation", body={"actuation": "sideways"}))[0] == 400
    assert (await call("GET", "/v1/actuation"))[1]["actuation"] == "advise"
    assert (await call("POST", "/v1/actuation", body={"actuation": "command"}))[1]["actuation"] == "command"
    # the deprecated paths, as they answered before (mode for override and for actuation)
    assert (await call("POST", "/v1/control", body=pin))[1]["mode"] == "pinned"
    assert (await call("POST", "/v1/control", body={"action": "pin"}))[0] == 400
    assert (await call("GET", "/v1/control"))[1]["robots"] == 2
    assert (await call("POST", "/v1/control", body={"action": "resume"}))[1]["mode"] == "auto"
    assert (await call("POST", "/v1/mode", body={"mode": "advise"}))[1]["mode"] == "advise"
    assert (await call("POST", "/v1/mode", body={"mode": "sideways"}))[0] == 400
    assert (await call("GET", "/v1/mode"))[1]["mode"] == "advise"
    assert (await call("POST", "/v1/mode", body={"mode": "command"}))[1]["mode"] == "command"
    await call("GET", "/v1/status")
    one = "/v1/robots/{robot_id}"
    assert (await call("DELETE", one, "/v1/robots/robot-2", key=False))[0] == 403  # another client's robot
    assert (await call("GET", cmd, "/v1/robots/robot-2/command", params={"wait_s": "0"}, key=False))[0] == 403
    assert (await call("DELETE", one, "/v1/robots/robot-2"))[1]["reason"] == "deregistered"
    assert (await call("DELETE", one, "/v1/robots/robot-2"))[0] == 404
    assert app[AGENT].totals.deliveries > 0
    assert call.called == set(operations(SPEC)), f"not called: {set(operations(SPEC)) - call.called}"


async def test_the_operations_that_need_the_token_are_the_documented_ones(caller: tuple[Caller, Any]) -> None:
    """Each operation is called without the token: it answers 401 exactly when the document says it needs it."""
    call, _ = caller
    await call("POST", "/v1/robots", body={"robot": "robot-1"})
    for (method, template), op in operations(SPEC).items():
        path = template.replace("{robot_id}", "robot-1")
        params = {"wait_s": "0"} if template.endswith("/command") else None
        status, _ = await call(method, template, path, {} if method == "POST" else None, token=False, params=params)
        assert (status == 401) == ("security" in op), f"{method} {template} answered {status} without the token"


BODIES = [(p, m) for (m, p), op in operations(SPEC).items() if "requestBody" in op]


@pytest.mark.parametrize(("path", "method"), BODIES, ids=[p for p, _ in BODIES])
async def test_the_agent_accepts_exactly_the_documented_fields(caller: tuple[Caller, Any], path: str,
                                                               method: str) -> None:
    """An unknown field is refused (400), and the agent's hint names the fields it accepts: the document's."""
    call, _ = caller
    await call("POST", "/v1/robots", body={"robot": "robot-1"})
    op = SPEC["paths"][path][method.lower()]
    schema = _item_schema(op["requestBody"]["content"]["application/json"]["schema"])
    status, err = await call(method, path, path.replace("{robot_id}", "robot-1"), body={"zz_unknown": 1})
    assert status == 400 and err["field"] == "zz_unknown"
    hint = err["hint"].split("fields:", 1)[1]
    accepted = set(re.findall(r'"(\w+)":', hint)) or {f.strip() for f in hint.split(",")}
    assert accepted == set(schema["properties"]), f"{path}: the agent accepts {accepted}"
