"""Issue 22, one word for one thing: the old names of the actuation, the override and the policy kind still
work for a release (endpoints with a Deprecation header and a log line, metrics exported alongside the new
ones, config keys with a log line naming the new key)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from robotctl.agent.app import DEPRECATED_PATHS, run_in_process
from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig, load_config
from robotctl.agent.metrics import DEPRECATED_METRICS
from robotctl.model import InputError

TOKEN = "s3cret-s3cret-s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def _call(s: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> tuple[int, Any, Any]:
    async with s.request(method, url, json=body, headers=AUTH) as r:
        return r.status, await r.json(), r.headers


async def test_old_and_new_endpoints_answer_alike(config_factory: Callable[..., AgentConfig], clock: ManualClock,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """Each old path does what its successor does, on the same state, with the old field name; the old ones
    carry ``Deprecation: true`` and a Link to the successor, the new ones do not; the first use of each old
    path and method is logged once, naming the successor."""
    cfg = config_factory(server={"token": TOKEN})
    caplog.set_level(logging.INFO, logger="robotctl.agent")
    async with run_in_process(cfg, clock=clock) as (url, _), aiohttp.ClientSession() as s:
        status, new, headers = await _call(s, "POST", url + "/v1/override", {"action": "pin", "robots": 1})
        assert status == 200 and new["override"] == "pinned" and "Deprecation" not in headers
        status, old, headers = await _call(s, "GET", url + "/v1/control")
        assert status == 200 and headers["Deprecation"] == "true"
        assert headers["Link"] == '</v1/override>; rel="successor-version"'
        assert old == {"mode": new["override"], **{k: v for k, v in new.items() if k != "override"}}
        status, old, headers = await _call(s, "POST", url + "/v1/control", {"action": "resume"})
        assert status == 200 and old["mode"] == "auto" and headers["Deprecation"] == "true"
        assert (await _call(s, "GET", url + "/v1/override"))[1]["override"] == "auto"

        status, old, headers = await _call(s, "POST", url + "/v1/mode", {"mode": "advise"})
        assert status == 200 and old["mode"] == "advise" and headers["Deprecation"] == "true"
        assert headers["Link"] == '</v1/actuation>; rel="successor-version"'
        status, new, headers = await _call(s, "GET", url + "/v1/actuation")
        assert new == {"actuation": "advise", **{k: v for k, v in old.items() if k != "mode"}}
        assert "Deprecation" not in headers
        status, new, _ = await _call(s, "POST", url + "/v1/actuation", {"actuation": "command"})
        assert status == 200 and new["actuation"] == "command"
        assert (await _call(s, "GET", url + "/v1/mode"))[1]["mode"] == "command"
        # a body with the other endpoint's word is refused, naming the field the endpoint takes
        status, err, _ = await _call(s, "POST", url + "/v1/actuation", {"mode": "advise"})
        assert status == 400 and "actuation" in err["hint"]
        for _ in range(3):
            await _call(s, "GET", url + "/v1/mode")
    lines = [r.getMessage() for r in caplog.records if "deprecated_endpoint" in r.getMessage()]
    assert sorted(lines) == sorted(f"event=deprecated_endpoint path={old} method={m} use={new}"
                                   for old, new in DEPRECATED_PATHS.items() for m in ("GET", "POST"))


async def test_old_metric_names_are_exported_next_to_the_new(config_factory: Callable[..., AgentConfig],
                                                             clock: ManualClock) -> None:
    """The same values under both names (the label renamed with the metric), the old help saying deprecated."""
    cfg = config_factory(server={"token": TOKEN})
    async with run_in_process(cfg, clock=clock) as (url, _), aiohttp.ClientSession() as s:
        await _call(s, "POST", url + "/v1/override", {"action": "pin", "robots": 2, "duration_s": 60})
        async with s.get(url + "/metrics") as r:
            families = {f.name: f for f in text_string_to_metric_families(await r.text())}
    relabel = {"robotctl_control_mode": ("mode", "actuation"), "robotctl_control_override": ("mode", "override"),
               "robotctl_policy_control": ("control", "kind")}
    for old, new in DEPRECATED_METRICS.items():
        assert families[old].documentation.startswith(f"Deprecated: use {new}")
        assert not families[new].documentation.startswith("Deprecated")
        was, now = relabel.get(old, ("", ""))
        old_samples = {tuple(sorted((now if k == was else k, v) for k, v in x.labels.items())): x.value
                       for x in families[old].samples}
        new_samples = {tuple(sorted(x.labels.items())): x.value for x in families[new].samples}
        if old == "robotctl_control_mode":  # the old one showed only the actuation in force
            assert old_samples == {k: v for k, v in new_samples.items() if v == 1}
        else:
            assert old_samples == new_samples, old
    assert {tuple(x.labels.items()): x.value for x in families["robotctl_override"].samples} == \
        {(("override", "auto"),): 0, (("override", "paused"),): 0, (("override", "pinned"),): 1}
    assert families["robotctl_override_robots"].samples[0].value == 2


# -- config keys ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("old", "new", "value", "read"), [
    ({"control": {"mode": "advise"}}, {"robots": {"count": 4, "actuation": "advise"}}, "advise",
     lambda c: c.robots.actuation),
    ({"policy": {"control": "mdp"}}, {"policy": {"kind": "mdp"}}, "mdp", lambda c: c.policy.kind),
])
def test_a_deprecated_key_reads_as_its_new_name_with_one_warning(
        old: dict[str, Any], new: dict[str, Any], value: str, read: Callable[[AgentConfig], str],
        caplog: pytest.LogCaptureFixture) -> None:
    base = {"queue": {"capacity": 5}, "robots": {"count": 4}}
    caplog.set_level(logging.WARNING, logger="robotctl.agent.config")
    cfg = AgentConfig.from_dict({**base, **old})
    assert read(cfg) == value and cfg == AgentConfig.from_dict({**base, **new})
    (old_section, old_values), = old.items()
    (new_section, new_values), = new.items()
    new_key = next(k for k in new_values if k != "count")
    assert [r.getMessage() for r in caplog.records] == \
        [f"event=config_deprecated key={old_section}.{next(iter(old_values))} use={new_section}.{new_key}"]
    assert "control" not in cfg.to_dict() and "control" not in cfg.to_dict()["policy"]


def test_a_count_or_a_list_of_robots_takes_the_actuation_too() -> None:
    for robots in (4, ["a", "b", "c", "d"]):
        cfg = AgentConfig.from_dict({"queue": {"capacity": 5}, "robots": robots, "control": {"mode": "advise"}})
        assert cfg.robots.actuation == "advise" and cfg.robots.n == 4


def test_a_key_under_both_names_is_an_error_naming_both() -> None:
    with pytest.raises(InputError) as exc:
        AgentConfig.from_dict({"queue": {"capacity": 5}, "robots": {"count": 2, "actuation": "command"},
                               "control": {"mode": "advise"}})
    assert exc.value.field == "control.mode" and "robots.actuation" in str(exc.value)
    with pytest.raises(InputError) as exc:
        AgentConfig.from_dict({"queue": {"capacity": 5}, "policy": {"kind": "mdp", "control": "mdp"}})
    assert exc.value.field == "policy.control" and "keep only policy.kind" in str(exc.value)


def test_the_old_section_holds_nothing_else() -> None:
    with pytest.raises(InputError) as exc:
        AgentConfig.from_dict({"queue": {"capacity": 5}, "control": {"mode": "advise", "speed": 1}})
    assert exc.value.field == "control"


def test_deprecated_environment_variables(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """ROBOTCTL_CONTROL_MODE and ROBOTCTL_POLICY_CONTROL set the new keys, over the file's, with a warning;
    the old and the new variable together are an error."""
    path = tmp_path / "sidecar.yaml"
    path.write_text("queue: {capacity: 5}\nrobots: 3\npolicy: {kind: mdp}\n")
    caplog.set_level(logging.WARNING, logger="robotctl.agent.config")
    cfg = load_config(path, environ={"ROBOTCTL_CONTROL_MODE": "advise", "ROBOTCTL_POLICY_CONTROL": "thresholds"})
    assert cfg.robots.actuation == "advise" and cfg.policy.kind == "thresholds"
    assert sorted(r.getMessage() for r in caplog.records) == [
        "event=config_deprecated key=ROBOTCTL_CONTROL_MODE use=ROBOTCTL_ROBOTS_ACTUATION",
        "event=config_deprecated key=ROBOTCTL_POLICY_CONTROL use=ROBOTCTL_POLICY_KIND"]
    with pytest.raises(InputError) as exc:
        load_config(path, environ={"ROBOTCTL_POLICY_CONTROL": "mdp", "ROBOTCTL_POLICY_KIND": "mdp"})
    assert "ROBOTCTL_POLICY_CONTROL" in exc.value.field


def test_the_file_deprecated_key_yields_to_the_flags(tmp_path: Path) -> None:
    """`robotctl serve --advise` with a file that still says control.mode: command: the flag wins, as it
    does over robots.actuation."""
    path = tmp_path / "sidecar.yaml"
    path.write_text("queue: {capacity: 5}\nrobots: 3\ncontrol: {mode: command}\n")
    assert load_config(path, environ={}).robots.actuation == "command"
    assert load_config(path, environ={}, overrides={"robots": {"actuation": "advise"}}).robots.actuation == "advise"
