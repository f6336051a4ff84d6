"""deploy/ stays in step with the agent: every metric the rules and the dashboard use is exported, the
manifests parse and carry a valid configuration, the container image holds every package folder; with
Prometheus installed, promtool accepts the files and its unit tests of the alerts pass and cover every alert."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from robotctl.agent import load_model_file
from robotctl.agent.app import AGENT, REFIT, run_in_process
from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig
from robotctl.agent.metrics import DEPRECATED_METRICS
from robotctl.agent.policy import PolicyFit
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
    out = {"rules.yml": set(METRIC.findall(rules)), "robotctl.json": set(METRIC.findall(" ".join(exprs)))}
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        found = set(METRIC.findall(path.read_text()))
        if found:
            out[path.name] = found
    assert "robots-keda.yaml" in out
    return out


async def _exported(tmp_path: Path) -> set[str]:
    """Every sample and family name of a live agent that has adopted a fitted policy."""
    model, costs = load_model_file(str(ROOT / "config" / "paper-example.yaml"))
    best = optimise(model, costs).best

    def compute(inp: RefitInput) -> RefitOutcome:
        return RefitOutcome(True, RefitStage.DONE, "adopted",
                            PolicyFit(best.policy, best.modes, best.thresholds, best.measures, best.cost,
                                      fit_summary(model, None, {m: "observed" for m in model.modes}),
                                      model, 500, (0.0, 1.0)), 0.01, 0.02, 500)

    cfg = AgentConfig.from_dict({"server": {"port": 0, "insecure_loopback": True}, "queue": {"capacity": 5},
                                 "robots": 4,
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
            "robotctl_desired_robots", "robotctl_policy_max_robots"} <= exported
    # the deprecated names are still exported for this release, next to the names that replace them
    assert set(DEPRECATED_METRICS) | set(DEPRECATED_METRICS.values()) <= exported


def test_deploy_uses_no_deprecated_metric() -> None:
    for where, names in _referenced().items():
        old = sorted(names & set(DEPRECATED_METRICS))
        assert not old, f"{where} uses deprecated metrics: {[(n, DEPRECATED_METRICS[n]) for n in old]}"


def _docs(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _kube() -> list[dict[str, Any]]:
    """Every object of deploy/kubernetes, in file order."""
    return [d for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")) for d in _docs(path)]


def _object(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in _kube() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


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


#: Kubernetes version whose schemas the manifests are validated against (kubernetes-validate ships them).
KUBERNETES_VERSION = "1.30"
KEDA_CRD = Path(__file__).parent / "data" / "keda" / "keda.sh_scaledobjects.yaml"


def _strict(schema: Any) -> Any:
    """An OpenAPI v3 schema of a CRD as `kubectl apply --validate=strict` reads it: an object with listed
    properties admits no other key (unless it says x-kubernetes-preserve-unknown-fields)."""
    if isinstance(schema, list):
        return [_strict(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out \
            and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def _keda_validator() -> Any:
    import jsonschema

    crd = yaml.safe_load(KEDA_CRD.read_text())
    assert crd["kind"] == "CustomResourceDefinition" and crd["spec"]["names"]["kind"] == "ScaledObject"
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
    schema = _strict(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta: checked by Kubernetes, not the CRD
    return jsonschema.Draft7Validator(schema)


def _keda_errors(obj: dict[str, Any]) -> list[str]:
    """Schema errors of a ScaledObject, and the CRD's one CEL rule (min <= max replicas), which jsonschema
    does not evaluate."""
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in _keda_validator().iter_errors(obj)]
    lo, hi = obj.get("spec", {}).get("minReplicaCount", 0), obj.get("spec", {}).get("maxReplicaCount", 100)
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        errors.append("spec: minReplicaCount must be less than or equal to maxReplicaCount")
    return errors


def test_every_kubernetes_manifest_validates_against_its_schema() -> None:
    """Built-in kinds against Kubernetes' schemas (kubernetes-validate, strict: unknown fields are errors);
    the ScaledObject against KEDA's CRD (tests/agent/data/keda)."""
    import kubernetes_validate

    kube = _kube()
    seen = set()
    for obj in kube:
        if obj["apiVersion"].startswith("keda.sh/"):
            assert obj["kind"] == "ScaledObject", obj["kind"]
            assert not _keda_errors(obj), _keda_errors(obj)
        else:
            try:
                kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {'.'.join(map(str, exc.path))}: "
                            f"{exc.message}")
        seen.add(obj["kind"])
    assert {"Deployment", "StatefulSet", "Service", "ConfigMap", "ScaledObject"} <= seen


def test_the_validators_reject_what_a_cluster_would() -> None:
    """The schema checks above can fail: a misspelt key, a wrong type, min above max."""
    import copy

    import kubernetes_validate

    so = _object("ScaledObject", "robots")
    bad = copy.deepcopy(so)
    bad["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilisationWindow"] = 60
    assert any("stabilisationWindow" in e for e in _keda_errors(bad))
    bad = copy.deepcopy(so)
    bad["spec"]["maxReplicaCount"] = "four"
    assert _keda_errors(bad)
    bad = copy.deepcopy(so)
    bad["spec"]["minReplicaCount"] = 5
    assert _keda_errors(bad)
    sts = copy.deepcopy(_object("StatefulSet", "robots"))
    sts["spec"]["replica"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, KUBERNETES_VERSION, strict=True)


def test_keda_scales_the_robot_pool_on_the_slow_signal() -> None:
    """The ScaledObject, the robot StatefulSet and the agent's configuration agree: KEDA follows
    robotctl_policy_max_robots (one robot per pod) between robots.min_active and robots.count, the pod
    names are the agent's robots.ids in rank order, and the robots reach the agent's Service."""
    so = _object("ScaledObject", "robots")["spec"]
    ref = so["scaleTargetRef"]
    sts = _object(ref["kind"], ref["name"])
    assert ref["kind"] == "StatefulSet" and ref["apiVersion"] == sts["apiVersion"]
    cfg = AgentConfig.from_dict(yaml.safe_load(_object("ConfigMap", "robotctl-config")["data"]["sidecar.yaml"]))
    assert cfg.robots.group_size == 1 and all(len(group) == 1 for group in cfg.robots.ids)
    pods = [f"{sts['metadata']['name']}-{k}" for k in range(so["maxReplicaCount"])]
    assert [group[0] for group in cfg.robots.ids] == pods  # ordinal k is rank k + 1
    assert so["maxReplicaCount"] == cfg.robots.n and so["minReplicaCount"] == cfg.robots.min_active
    assert so["fallback"]["replicas"] == so["maxReplicaCount"]
    (trigger,) = so["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert METRIC.findall(trigger["metadata"]["query"]) == ["robotctl_policy_max_robots"]
    assert float(trigger["metadata"]["threshold"]) == 1.0
    assert trigger["metadata"]["ignoreNullValues"] == "false"
    behavior = so["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 2 * cfg.refit.interval_s
    robot = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in robot["env"]}
    service = _object("Service", "robotctl")
    assert env["ROBOTCTL_URL"]["value"] == f"http://robotctl:{service['spec']['ports'][0]['port']}"
    assert env["ROBOTCTL_ROBOT_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["ROBOTCTL_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == \
        _object("Secret", "robotctl-token")["metadata"]["name"]
    agent_pod = _object("Deployment", "crawler")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= agent_pod.items()


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


def test_container_image_copies_the_package_folder() -> None:
    """The image installs from the copied package folder: robotctl/ (every robotctl.X is robotctl/X) and
    pyproject.toml, and no layer stands outside it."""
    container = (DEPLOY / "Containerfile").read_text()
    copied = set(re.findall(r"^COPY (\S+) \./(\S+)$", container, flags=re.MULTILINE))
    assert ("robotctl", "robotctl") in copied
    packages = {p.parent.name for p in (ROOT / "robotctl").glob("*/__init__.py")}
    assert {"model", "agent", "cli"} <= packages
    assert not any((ROOT / name / "__init__.py").exists() for name in packages), "a layer stands at the root"
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

    cfg = AgentConfig.from_dict({"server": {"port": 0, "insecure_loopback": True}, "queue": {"capacity": 5},
                                 "robots": 4,
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


def test_deployments_never_run_the_agent_without_a_token_and_bound_its_files() -> None:
    """Issue 11, findings 1 and 3: the container bound 0.0.0.0 with no token; the unit had no file limit."""
    from robotctl import InputError

    kube = _docs(DEPLOY / "kubernetes" / "robotctl-sidecar.yaml")
    cfg = AgentConfig.from_dict(yaml.safe_load(kube[0]["data"]["sidecar.yaml"]))
    with pytest.raises(InputError, match="ROBOTCTL_SERVER_TOKEN"):
        cfg.server.check_exposure()  # without the mounted secret the pod stops with one line
    pod = kube[3]["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "robotctl")
    token_file = next(e["value"] for e in sidecar["env"] if e["name"] == "ROBOTCTL_SERVER_TOKEN_FILE")
    mount = next(m for m in sidecar["volumeMounts"] if token_file.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == kube[1]["metadata"]["name"]
    assert token_file.rsplit("/", 1)[1] in kube[1]["stringData"]
    unit = (DEPLOY / "systemd" / "robotctl.service").read_text()
    limit = int(next(line for line in unit.splitlines() if line.startswith("LimitNOFILE=")).split("=")[1])
    assert limit >= AgentConfig.from_dict({"queue": {"capacity": 5}}).server.max_connections + 64
    assert "0.0.0.0" in (DEPLOY / "Containerfile").read_text() and "ROBOTCTL_SERVER_TOKEN_FILE" in \
        (DEPLOY / "Containerfile").read_text()
