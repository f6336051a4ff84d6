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
            "robotctl_desired_robots", "robotctl_policy_max_robots", "robotctl_scaling_target_robots"} <= exported
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
    # no Secret: the token is created by the command in the file's header, so applying the file again never
    # overwrites it (issue 25: a shipped `token: change-me` crash-looped the pod)
    assert kinds == ["ConfigMap", "PersistentVolumeClaim", "Deployment", "Service"]
    cfg = AgentConfig.from_dict(yaml.safe_load(kube[0]["data"]["sidecar.yaml"]))
    assert cfg.server.host == "0.0.0.0" and cfg.log.dir == "/var/lib/robotctl"
    pod = kube[2]["spec"]["template"]
    sidecar = next(c for c in pod["spec"]["containers"] if c["name"] == "robotctl")
    assert sidecar["args"][:3] == ["serve", "--config", "/etc/robotctl/sidecar.yaml"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(cfg.server.port)
    mounts = {m["mountPath"] for m in sidecar["volumeMounts"]}
    assert {"/etc/robotctl", cfg.log.dir} <= mounts
    assert {p["httpGet"]["path"] for p in (sidecar["readinessProbe"], sidecar["livenessProbe"])} == \
        {"/readyz", "/healthz"}
    unit = (DEPLOY / "systemd" / "robotctl.service").read_text()
    assert "ExecStart=/opt/robotctl/bin/robotctl serve --config /etc/robotctl/sidecar.yaml" in unit
    # the install lines put robotctl where the unit runs it
    assert "python3 -m venv /opt/robotctl && /opt/robotctl/bin/pip install ." in unit
    assert "KillSignal=SIGTERM" in unit and "RestartPreventExitStatus=2" in unit
    container = (DEPLOY / "Containerfile").read_text()
    assert 'ENTRYPOINT ["robotctl", "serve", "--config", "/etc/robotctl/sidecar.yaml"]' in container
    assert "ROBOTCTL_LOG_DIR=/var/lib/robotctl" in container  # an environment override of log.dir


#: The Secret holding the bearer token, created by a command (deploy/README.md), never by a manifest.
SECRET = "robotctl-token"
CREATE_SECRET = re.compile(r'kubectl create secret generic (\S+) --from-literal=(\w+)="\$\(openssl rand -base64 32\)"')


def _run_sequence() -> str:
    """The section of deploy/README.md that says how to run the agent on Kubernetes, in order."""
    readme = (DEPLOY / "README.md").read_text()
    start = readme.index("### Kubernetes")
    end = readme.find("\n### ", start + 1)
    return readme[start:end if end > 0 else None]


def _secret_procedure() -> tuple[str, str]:
    """(Secret name, key) of the documented `kubectl create secret` command: the manifest's header and the
    README's run sequence give the same one, and the README creates it before the first apply."""
    header = (DEPLOY / "kubernetes" / "robotctl-sidecar.yaml").read_text()
    seq = _run_sequence()
    found = set(CREATE_SECRET.findall(header)) | set(CREATE_SECRET.findall(seq))
    assert len(found) == 1, found
    assert CREATE_SECRET.findall(seq) and seq.index("kubectl create secret") < seq.index("kubectl apply")
    return found.pop()


def _applied_in_documented_order() -> list[Path]:
    """The manifests deploy/README.md applies, in its order."""
    files = re.findall(r"kubectl apply -f (deploy/kubernetes/\S+\.yaml)", _run_sequence())
    assert files, "deploy/README.md applies no manifest"
    return [ROOT / f for f in files]


def _new_token() -> str:
    """A token as the documented command makes it (openssl rand -base64 32), or the same from Python."""
    import base64
    import os

    if shutil.which("openssl"):
        out = subprocess.run(["openssl", "rand", "-base64", "32"], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    return base64.b64encode(os.urandom(32)).decode()


def test_the_documented_order_applies_every_manifest_after_what_it_needs() -> None:
    """deploy/README.md's run sequence: the Secret first, then every manifest of deploy/kubernetes, each object
    valid (kubernetes-validate, strict; the Secret as `kubectl create secret generic` makes it) and every
    ConfigMap, Secret, claim and Service a pod names already created or in the same apply."""
    import base64

    import kubernetes_validate

    name, key = _secret_procedure()
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque",
              "data": {key: base64.b64encode(_new_token().encode()).decode()}}
    kubernetes_validate.validate(secret, KUBERNETES_VERSION, strict=True)
    created = {("Secret", name)}
    files = _applied_in_documented_order()
    assert sorted(files) == sorted((DEPLOY / "kubernetes").glob("*.yaml")), "a manifest is never applied"
    for path in files:
        objs = _docs(path)
        created |= {(o["kind"], o["metadata"]["name"]) for o in objs}
        for obj in objs:
            if not obj["apiVersion"].startswith("keda.sh/"):
                kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
            text = json.dumps(obj)
            for ref in re.findall(r'"secretKeyRef": \{"name": "([^"]+)"', text) + \
                    re.findall(r'"secretName": "([^"]+)"', text):
                assert ("Secret", ref) in created, (path.name, ref)
            for ref in re.findall(r'"configMap": \{"name": "([^"]+)"', text):
                assert ("ConfigMap", ref) in created, (path.name, ref)
            for ref in re.findall(r'"claimName": "([^"]+)"', text):
                assert ("PersistentVolumeClaim", ref) in created, (path.name, ref)
    for obj in _kube():
        env = [e for c in obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
               for e in c.get("env", [])]
        for e in env:
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert (ref["name"], ref["key"]) == (name, key), ref


def _containerfile_env() -> dict[str, str]:
    text = (DEPLOY / "Containerfile").read_text().replace("\\\n", " ")
    block = re.search(r"^ENV (.*)$", text, flags=re.MULTILINE)
    assert block is not None
    return dict(pair.split("=", 1) for pair in block.group(1).split())


async def test_the_agent_comes_up_with_the_manifests_config_and_the_secret_procedures_token(
        tmp_path: Path) -> None:
    """Outside a cluster, the pod's own start: the ConfigMap's sidecar.yaml at the mounted path's name, the
    image's environment (Containerfile ENV) and the container's (robotctl-sidecar.yaml), the token file the
    Secret mount gives holding a token made by the documented command; the container's command and args.
    Only where the pod's paths and port cannot be used here: the mounts under tmp_path, loopback, a free port.
    The agent must answer /readyz 200, and refuse a request without the token."""
    import asyncio
    import os
    import socket
    import sys

    deployment = _object("Deployment", "crawler")
    pod = deployment["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "robotctl")
    mounts = {m["name"]: m["mountPath"] for m in sidecar["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    here = {path: tmp_path / name for name, path in mounts.items()}  # each mount, outside a cluster
    volume_of = {path: name for name, path in mounts.items()}

    def local(path: str) -> str:
        mount = max((m for m in here if path == m or path.startswith(m + "/")), key=len)
        return str(here[mount] / path[len(mount):].lstrip("/"))

    for mount_path, path in here.items():
        path.mkdir(parents=True)
        vol = volumes[volume_of[mount_path]]
        if "configMap" in vol:
            cm = _object("ConfigMap", vol["configMap"]["name"])
            for fname, text in cm["data"].items():
                (path / fname).write_text(text)
        if "secret" in vol:
            secret_name, key = _secret_procedure()
            assert vol["secret"]["secretName"] == secret_name
            token = _new_token()
            (path / key).write_text(token)  # a Secret volume holds the value as is
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROBOTCTL_")}
    env.update(_containerfile_env())
    for e in sidecar["env"]:
        assert "value" in e, e  # nothing from the cluster's API
        env[e["name"]] = local(e["value"]) if e["value"].startswith("/") else e["value"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env |= {"ROBOTCTL_SERVER_HOST": "127.0.0.1", "ROBOTCTL_SERVER_PORT": str(port),
            "ROBOTCTL_LOG_DIR": local(env["ROBOTCTL_LOG_DIR"])}
    command = [os.path.join(os.path.dirname(sys.executable), sidecar["command"][0]),
               *[local(a) if a.startswith("/") else a for a in sidecar["args"]]]
    proc = await asyncio.create_subprocess_exec(*command, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            async def ready() -> int:
                while True:
                    assert proc.returncode is None, (await proc.stdout.read()).decode()  # type: ignore[union-attr]
                    try:
                        async with s.get(url + "/readyz") as r:
                            if r.status == 200:
                                return r.status
                    except aiohttp.ClientError:
                        pass
                    await asyncio.sleep(0.2)

            assert await asyncio.wait_for(ready(), timeout=30) == 200
            async with s.get(url + "/v1/status") as r:
                assert r.status == 401
            async with s.get(url + "/v1/status", headers={"Authorization": f"Bearer {token}"}) as r:
                assert r.status == 200
                status = await r.json()
    finally:
        if proc.returncode is None:
            proc.terminate()
        out = (await asyncio.wait_for(proc.communicate(), timeout=30))[0].decode()
    assert proc.returncode == 0, out  # SIGTERM: a graceful stop
    cfg = AgentConfig.from_dict(yaml.safe_load(_object("ConfigMap", "robotctl-config")["data"]["sidecar.yaml"]))
    assert status["queue"]["capacity"] == cfg.capacity and status["robots"]["virtual"] == cfg.robots.n
    assert (tmp_path / "log").exists() and any((tmp_path / "log").iterdir())  # the log volume's mount


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
    robotctl_scaling_target_robots (one robot per pod) between robots.min_active and robots.count, the pod
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
    assert METRIC.findall(trigger["metadata"]["query"]) == ["robotctl_scaling_target_robots"]
    assert float(trigger["metadata"]["threshold"]) == 1.0
    assert trigger["metadata"]["ignoreNullValues"] == "false"
    behavior = so["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 2 * cfg.refit.interval_s
    robot = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in robot["env"]}
    service = _object("Service", "robotctl")
    assert env["ROBOTCTL_URL"]["value"] == f"http://robotctl:{service['spec']['ports'][0]['port']}"
    assert env["ROBOTCTL_ROBOT_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["ROBOTCTL_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": SECRET, "key": "token"}
    agent_pod = _object("Deployment", "crawler")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= agent_pod.items()


async def test_keda_holds_the_fleet_in_advise_mode_and_follows_the_policy_in_command_mode(tmp_path: Path) -> None:
    """Issue 25: in advise mode /metrics exported robotctl_policy_max_robots 1 and the ScaledObject's query on
    it would have shrunk the robot pool to one pod while the agent only advised. The ScaledObject's own
    query, evaluated on the agent's /metrics, gives the whole fleet in advise mode and the policy's pool in
    command mode."""
    model, costs = load_model_file(str(ROOT / "config" / "paper-example.yaml"))
    best = optimise(model, costs).best  # 3,3,3,1,1,1: at most 3 of the 4 robots

    def compute(inp: RefitInput) -> RefitOutcome:
        return RefitOutcome(True, RefitStage.DONE, "adopted",
                            PolicyFit(best.policy, best.modes, best.thresholds, best.measures, best.cost,
                                      fit_summary(model, None, {m: "observed" for m in model.modes}),
                                      model, 500, (0.0, 1.0)), 0.01, 0.02, 500)

    so = _object("ScaledObject", "robots")["spec"]
    query = so["triggers"][0]["metadata"]["query"]
    (name,) = METRIC.findall(query)
    token = "t" * 24  # switching modes needs the token
    cfg = AgentConfig.from_dict({"server": {"port": 0, "token": token}, "queue": {"capacity": 5},
                                 "robots": {"ids": [f"robots-{k}" for k in range(4)], "actuation": "advise"},
                                 "refit": {"executor": "thread", "min_deliveries": 2},
                                 "log": {"dir": str(tmp_path)}})

    async def sample(s: aiohttp.ClientSession, url: str) -> dict[str, float]:
        async with s.get(url + "/metrics") as r:
            text = await r.text()
        return {smp.name: smp.value for fam in text_string_to_metric_families(text) for smp in fam.samples
                if not smp.labels}

    async with run_in_process(cfg, clock=ManualClock(0.0), compute=compute) as (url, app), \
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as s:
        for k in range(4):
            async with s.post(url + "/v1/robots", json={"robot": f"robots-{k}"}) as r:
                assert r.status == 200
        for _ in range(3):
            app[AGENT].clock.advance(1.0)  # type: ignore[attr-defined]
            async with s.post(url + "/v1/deliveries", json={"pages": 1}) as r:
                assert r.status == 200
        assert (await app[REFIT].refit("test")).success
        advise = await sample(s, url)
        async with s.post(url + "/v1/actuation", json={"actuation": "command"}) as r:
            assert r.status == 200
        command = await sample(s, url)
    assert max(best.policy.robots_at_level) == 3
    # the advised policy would run 3 robots; KEDA's metric holds the fleet of robots.count
    assert advise["robotctl_policy_max_robots"] == 3 and advise[name] == so["maxReplicaCount"] == 4
    assert command["robotctl_policy_max_robots"] == 3 and command[name] == 3
    assert advise["robotctl_robots_registered_below_count"] == command["robotctl_robots_missing"] == 0


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
            if re.search(r"robotctl_[a-z0-9_]+_total", t["expr"]) and p["type"] != "stat":
                assert "rate(" in t["expr"], (p["title"], t["expr"])  # a stat panel may show a count
    commands = [p for p in dash["panels"]
                if any("robotctl_robot_commands_total" in t["expr"] for t in p.get("targets", []))]
    assert commands, "no panel shows the park/resume commands"


def test_dashboard_shows_what_the_agent_is_doing() -> None:
    """Issue 25: the actuation mode, the policy kind and its reason, the fit's check status and rungs, the
    quarantined log lines, the robot pool and the commands per robot per minute each have a panel; every
    forecast panel shows the prediction apart in command and in advise mode (the policy in force or not)."""
    from robotctl.agent.metrics import FIT_STATUSES, POLICY_KIND_REASONS
    from robotctl.fitting import FitStatus

    assert set(FIT_STATUSES) == {s.value for s in FitStatus} | {"none"}
    assert len(POLICY_KIND_REASONS) == len(set(POLICY_KIND_REASONS))
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "robotctl.json").read_text())
    exprs = {t["expr"] for p in dash["panels"] for t in p.get("targets", [])}
    shown = set(METRIC.findall(" ".join(exprs)))
    assert {"robotctl_actuation", "robotctl_policy_kind", "robotctl_policy_kind_reason",
            "robotctl_fit_status", "robotctl_fit_fallback_rung", "robotctl_log_quarantined_lines_total",
            "robotctl_policy_max_robots", "robotctl_robot_commands_total", "robotctl_scaling_target_robots",
            "robotctl_robots_missing"} <= shown
    assert any("robotctl_robot_commands_total" in e and "robotctl_robots{" in e and "60 *" in e for e in exprs)
    for p in dash["panels"]:
        predicted = [t["expr"] for t in p.get("targets", []) if 'source="predicted"' in t["expr"]]
        if predicted:
            assert len(predicted) == 2, p["title"]
            assert any('actuation="command"' in e for e in predicted) and \
                any('actuation="advise"' in e for e in predicted)
    for name in ("RobotctlLossAboveForecast", "RobotctlIndexerStarving"):
        assert 'robotctl_actuation{actuation="command"} == 1' in _alerts()[name]["expr"], name


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
    pod = kube[2]["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "robotctl")
    token_file = next(e["value"] for e in sidecar["env"] if e["name"] == "ROBOTCTL_SERVER_TOKEN_FILE")
    mount = next(m for m in sidecar["volumeMounts"] if token_file.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    # the Secret the documented command creates, and the key it creates, are the ones mounted
    name, key = _secret_procedure()
    assert volume["secret"]["secretName"] == name == SECRET
    assert token_file.rsplit("/", 1)[1] == key
    unit = (DEPLOY / "systemd" / "robotctl.service").read_text()
    limit = int(next(line for line in unit.splitlines() if line.startswith("LimitNOFILE=")).split("=")[1])
    assert limit >= AgentConfig.from_dict({"queue": {"capacity": 5}}).server.max_connections + 64
    assert "0.0.0.0" in (DEPLOY / "Containerfile").read_text() and "ROBOTCTL_SERVER_TOKEN_FILE" in \
        (DEPLOY / "Containerfile").read_text()
