"""deploy/ stays in step with the agent: every metric the rules and the dashboard use is exported, the
manifests parse and carry a valid configuration, the container image holds every package folder; with
Prometheus installed, promtool accepts the files and its unit tests of the alerts pass and cover every alert."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from robotctl.agent._files import load_model_file
from robotctl.agent.app import AGENT, REFIT, run_in_process
from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig
from robotctl.agent.refit import RefitInput, RefitOutcome, RefitStage, fit_summary
from robotctl.policies import optimise

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
METRIC = re.compile(r"\brobotctl_[a-z0-9_]+")


def _referenced() -> dict[str, set[str]]:
    rules = (DEPLOY / "prometheus" / "rules.yml").read_text()
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "robotctl.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [a["expr"] for a in dash["annotations"]["list"]]
    exprs.append(dash["templating"]["list"][1]["definition"])
    kube = (DEPLOY / "kubernetes" / "robotctl-sidecar.yaml").read_text()
    return {"rules.yml": set(METRIC.findall(rules)), "robotctl.json": set(METRIC.findall(" ".join(exprs))),
            "robotctl-sidecar.yaml": set(METRIC.findall(kube))}


async def _exported(tmp_path: Path) -> set[str]:
    """Every sample and family name of a live agent that has adopted a fitted policy."""
    model, costs = load_model_file(str(ROOT / "config" / "paper-example.yaml"))
    best = optimise(model, costs).best

    def compute(inp: RefitInput) -> RefitOutcome:
        return RefitOutcome(True, RefitStage.DONE, "adopted", best.policy, best.modes, best.thresholds,
                            best.measures, best.cost, fit_summary(model, None,
                                                                  {m: "observed" for m in model.modes}),
                            model, 0.01, 0.02, 500, (0.0, 1.0))

    cfg = AgentConfig.from_dict({"server": {"port": 0}, "queue": {"capacity": 5}, "robots": 4,
                                 "refit": {"executor": "thread", "min_deliveries": 2},
                                 "log": {"dir": str(tmp_path)}})
    async with run_in_process(cfg, clock=ManualClock(0.0), compute=compute) as (url, app), \
            aiohttp.ClientSession() as s:
        for k in range(3):
            app[AGENT].clock.advance(1.0)  # type: ignore[attr-defined]
            async with s.post(url + "/v1/deliveries", json={"pages": 1 + k}) as r:
                assert r.status == 200
        assert (await app[REFIT].refit("test")).success
        async with s.post(url + "/v1/deliveries", json={"pages": -1}) as r:
            assert r.status == 400
        async with s.get(url + "/metrics") as r:
            text = await r.text()
    names = set()
    for fam in text_string_to_metric_families(text):
        names.add(fam.name)
        names.update(smp.name for smp in fam.samples)
    return names


async def test_every_metric_used_in_deploy_is_exported(tmp_path: Path) -> None:
    exported = await _exported(tmp_path)
    for where, names in _referenced().items():
        assert names, f"{where} references no robotctl metric"
        missing = sorted(n for n in names if n not in exported)
        assert not missing, f"{where} uses metrics the agent does not export: {missing}"
    assert {"robotctl_loss_ratio", "robotctl_fit_arrival_pages_per_second",
            "robotctl_desired_robots"} <= exported


def _docs(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def test_manifests_parse_and_carry_a_valid_configuration() -> None:
    for path in DEPLOY.rglob("*.y*ml"):
        assert _docs(path), path
    kube = _docs(DEPLOY / "kubernetes" / "robotctl-sidecar.yaml")
    kinds = [d["kind"] for d in kube]
    assert kinds == ["ConfigMap", "Secret", "PersistentVolumeClaim", "Deployment", "Service"]
    cfg = AgentConfig.from_dict(yaml.safe_load(kube[0]["data"]["sidecar.yaml"]))
    assert cfg.server.host == "0.0.0.0" and cfg.log.dir == "/var/lib/robotctl"
    pod = kube[3]["spec"]["template"]
    sidecar = next(c for c in pod["spec"]["containers"] if c["name"] == "robotctl")
    assert sidecar["args"][:3] == ["serve", "--config", "/etc/robotctl/sidecar.yaml"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(cfg.server.port)
    mounts = {m["mountPath"] for m in sidecar["volumeMounts"]}
    assert {"/etc/robotctl", cfg.log.dir} <= mounts
    assert {p["httpGet"]["path"] for p in (sidecar["readinessProbe"], sidecar["livenessProbe"])} == \
        {"/readyz", "/healthz"}
    unit = (DEPLOY / "systemd" / "robotctl.service").read_text()
    assert "ExecStart=/usr/local/bin/robotctl serve --config /etc/robotctl/sidecar.yaml" in unit
    assert "KillSignal=SIGTERM" in unit and "RestartPreventExitStatus=2" in unit
    container = (DEPLOY / "Containerfile").read_text()
    assert 'ENTRYPOINT ["robotctl", "serve", "--config", "/etc/robotctl/sidecar.yaml"]' in container
    assert "ROBOTCTL_LOG_DIR=/var/lib/robotctl" in container  # an environment override of log.dir


def test_grafana_dashboard_is_well_formed() -> None:
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "robotctl.json").read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        for t in p.get("targets", []):
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
    prov = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" / "robotctl.yaml").read_text())
    assert prov["providers"][0]["type"] == "file"


def test_dashboard_tells_agents_apart_and_shows_rates() -> None:
    """Two agents on one dashboard: every legend names the instance, every aggregation keeps it; counters
    are shown as rates (an increase over $__range in a time series is one number smeared over the range)."""
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "robotctl.json").read_text())
    for p in dash["panels"]:
        for t in p.get("targets", []):
            assert "{{instance}}" in t["legendFormat"], (p["title"], t["legendFormat"])
            for by in re.findall(r"\b(?:sum|max|min|avg|count) by \(([^)]*)\)", t["expr"]):
                assert "instance" in by, (p["title"], t["expr"])
            assert "$__range" not in t["expr"], (p["title"], t["expr"])
            if re.search(r"robotctl_[a-z0-9_]+_total", t["expr"]):
                assert "rate(" in t["expr"], (p["title"], t["expr"])
    commands = [p for p in dash["panels"]
                if any("robotctl_robot_commands_total" in t["expr"] for t in p.get("targets", []))]
    assert commands, "no panel shows the park/resume commands"


def _prometheus_files(key: str) -> list[Path]:
    """The YAML files of deploy/prometheus with a top-level ``key``: groups (rules) or tests (their unit tests)."""
    return sorted(p for p in (DEPLOY / "prometheus").glob("*.y*ml") if key in (yaml.safe_load(p.read_text()) or {}))


def _rule_files() -> list[Path]:
    return _prometheus_files("groups")


def _rule_test_files() -> list[Path]:
    return _prometheus_files("tests")


def _alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for p in _rule_files() for g in yaml.safe_load(p.read_text())["groups"]
            for r in g["rules"] if "alert" in r}


def test_rule_unit_tests_cover_every_alert_both_ways() -> None:
    """Each alert of deploy/prometheus has a `promtool test rules` case where it fires and one where it stays
    silent; the test files load every rule file."""
    alerts = _alerts()
    assert len(alerts) >= 8
    fires: set[str] = set()
    silent: set[str] = set()
    loaded: set[Path] = set()
    for path in _rule_test_files():
        doc = yaml.safe_load(path.read_text())
        loaded.update((path.parent / f).resolve() for f in doc["rule_files"])
        for case in doc["tests"]:
            for t in case.get("alert_rule_test", []):
                (fires if t.get("exp_alerts") else silent).add(t["alertname"])
    assert {p.resolve() for p in _rule_files()} <= loaded
    assert not set(alerts) - fires, f"alerts never shown firing: {sorted(set(alerts) - fires)}"
    assert not set(alerts) - silent, f"alerts never shown silent: {sorted(set(alerts) - silent)}"
    assert not (fires | silent) - set(alerts), "a test names an alert that does not exist"


def test_every_alert_carries_a_runbook() -> None:
    for name, rule in _alerts().items():
        notes = rule.get("annotations", {})
        assert notes.get("summary") and notes.get("description"), name
        runbook = notes.get("runbook", "")
        # a paragraph: what it means, where to look, what to do
        assert len(runbook) >= 300 and runbook.count(". ") >= 2, (name, runbook)
        assert rule["labels"]["severity"] in ("page", "ticket"), name


def test_container_image_copies_every_package_folder() -> None:
    """The image installs from the copied folders: each folder of [tool.setuptools.package-dir] is copied."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    container = (DEPLOY / "Containerfile").read_text()
    copied = set(re.findall(r"^COPY (\S+) \./(\S+)$", container, flags=re.MULTILINE))
    folders = set(package_dir.values())
    assert {"robotctl", "model", "cli"} <= folders
    missing = sorted(f for f in folders if (f, f) not in copied)
    assert not missing, f"deploy/Containerfile does not copy {missing}"
    assert re.search(r"^RUN pip install[^\n]* \.", container, flags=re.MULTILINE)


@pytest.mark.server
@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool comes with the Debian package prometheus")
def test_promtool_unit_tests_of_the_alerts_pass() -> None:
    files = _rule_test_files()
    assert files
    out = subprocess.run(["promtool", "test", "rules", *map(str, files)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


@pytest.mark.server
@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool comes with the Debian package prometheus")
def test_promtool_accepts_rules_and_config() -> None:
    for args in (["check", "rules", "deploy/prometheus/rules.yml"],
                 ["check", "config", "deploy/prometheus/prometheus.yml"]):
        out = subprocess.run(["promtool", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.server
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs the Debian package prometheus")
async def test_a_real_prometheus_scrapes_the_agent_and_evaluates_every_rule(tmp_path: Path) -> None:
    import asyncio
    import socket

    cfg = AgentConfig.from_dict({"server": {"port": 0}, "queue": {"capacity": 5}, "robots": 4,
                                 "log": {"dir": str(tmp_path / "log")}})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        prom_port = probe.getsockname()[1]
    async with run_in_process(cfg) as (url, _), aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/deliveries", json={"pages": 2}) as r:
            assert r.status == 200
        target = url.removeprefix("http://")
        prom_cfg = tmp_path / "prometheus.yml"
        prom_cfg.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"rule_files: [{DEPLOY / 'prometheus' / 'rules.yml'}]\n"
            f"scrape_configs:\n  - job_name: robotctl\n    static_configs:\n      - targets: ['{target}']\n")
        proc = subprocess.Popen(["prometheus", f"--config.file={prom_cfg}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        api = f"http://127.0.0.1:{prom_port}/api/v1"
        try:
            async def ready() -> tuple[dict[str, Any], list[dict[str, Any]]]:
                while True:
                    await asyncio.sleep(0.5)
                    try:
                        async with s.get(api + "/query",
                                         params={"query": "robotctl_queue_length_pages"}) as r:
                            q = await r.json()
                        async with s.get(api + "/rules") as r:
                            rules = [rule for g in (await r.json())["data"]["groups"] for rule in g["rules"]]
                    except aiohttp.ClientError:
                        continue
                    if q["data"]["result"] and rules and all(rule.get("lastEvaluation",
                                                                      "0001").startswith("20")
                                                             for rule in rules):
                        return q, rules

            q, rules = await asyncio.wait_for(ready(), timeout=60)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert float(q["data"]["result"][0]["value"][1]) == 2.0
    assert len(rules) >= 10
    bad = [(rule["name"], rule.get("lastError")) for rule in rules if rule["health"] != "ok"]
    assert not bad, bad
