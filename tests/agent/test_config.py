"""Configuration: defaults, errors that name the key, environment overrides, config/sidecar.yaml."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from robotctl.agent.config import AgentConfig, documented_keys, env_overrides, load_config
from robotctl.model import InputError

ROOT = Path(__file__).resolve().parents[2]
SIDECAR = ROOT / "config" / "sidecar.yaml"


def test_minimal_config_has_documented_defaults() -> None:
    cfg = AgentConfig.from_dict({"queue": {"capacity": 5}})
    assert cfg.server.host == "127.0.0.1"
    assert cfg.robots.n == 1
    assert cfg.startup_policy().robots_at_level == (1,) * 6
    assert cfg.log.fsync == "interval"


@pytest.mark.parametrize(("raw", "field"), [
    ({}, "queue.capacity"),
    ({"queue": {"capacity": 0}}, "queue.capacity"),
    ({"queue": {"capacity": 5, "admision": "partial"}}, "queue.admision"),
    ({"queue": {"capacity": 5, "admission": "drop"}}, "queue.admission"),
    ({"queue": {"capacity": 5}, "refit": {"interval_s": -1}}, "refit.interval_s"),
    ({"queue": {"capacity": 5}, "refit": {"interval_s": float("nan")}}, "refit.interval_s"),
    ({"queue": {"capacity": 5}, "refit": {"interval_s": "soon"}}, "refit.interval_s"),
    ({"queue": {"capacity": 5}, "server": {"port": 70000}}, "server.port"),
    ({"queue": {"capacity": 5}, "robots": {"ids": ["a", ["b", "a"]]}}, "robots.ids[1]"),
    ({"queue": {"capacity": 5}, "robots": {"count": 2, "ids": ["a", "b", "c"]}}, "robots.ids"),
    ({"queue": {"capacity": 5}, "robots": 4, "policy": {"startup": [3, 4, 1, 1, 1, 1]}}, "policy.startup[1]"),
    ({"queue": {"capacity": 5}, "robots": 4, "policy": {"startup": [3, 1]}}, "policy.startup"),
    ({"queue": {"capacity": 5}, "robots": 2, "policy": {"startup": 3}}, "policy.startup"),
    ({"queue": {"capacity": 5}, "robots": 2, "policy": {"modes": [3, 1]}}, "policy.modes"),
    ({"queue": {"capacity": 5}, "costs": {"los": 1}}, "costs.los"),
    ({"queue": {"capacity": 5}, "costs": {"loss": -1}}, "costs.loss"),
    ({"queue": {"capacity": 5}, "log": {"fsync": "sometimes"}}, "log.fsync"),
    ({"queue": {"capacity": 5}, "logging": {}}, "logging"),
    ({"queue": {"capacity": 5}, "refit": {"drift_window_s": 7200}}, "refit.drift_window_s"),
])
def test_errors_name_the_key(raw: dict, field: str) -> None:
    with pytest.raises(InputError) as info:
        AgentConfig.from_dict(raw, source="x.yaml")
    assert info.value.field == f"x.yaml: {field}"
    assert info.value.hint


def test_robots_shorthands() -> None:
    assert AgentConfig.from_dict({"queue": {"capacity": 3}, "robots": 3}).robots.n == 3
    cfg = AgentConfig.from_dict({"queue": {"capacity": 3}, "robots": ["a", ["b1", "b2"]]})
    assert cfg.robots.n == 2
    assert cfg.robots.ids == (("a",), ("b1", "b2"))


def test_environment_overrides_file_and_flags_override_environment(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("queue: {capacity: 5}\nrefit: {interval_s: 300}\nrobots: 4\n")
    env = {"ROBOTCTL_REFIT_INTERVAL_S": "60", "ROBOTCTL_ROBOTS_IDS": "[a, b]",
           "ROBOTCTL_SERVER_TOKEN": "s3cret-s3cret-s3cret",
           "ROBOTCTL_CONFIG": "ignored", "HOME": "/"}
    cfg = load_config(path, environ=env, overrides={"server": {"port": 0}})
    assert cfg.refit.interval_s == 60.0
    assert cfg.robots.ids == (("a",), ("b",))
    assert cfg.robots.n == 4  # the file's count survives the env's ids
    assert cfg.server.token == "s3cret-s3cret-s3cret"
    assert cfg.server.port == 0
    assert cfg.to_dict()["server"]["token"] == "***"


def test_unknown_environment_key_is_an_error() -> None:
    with pytest.raises(InputError, match="ROBOTCTL_REFIT_INTERVL_S"):
        env_overrides({"ROBOTCTL_REFIT_INTERVL_S": "60"})


def test_environment_error_says_where(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("queue: {capacity: 5}\n")
    with pytest.raises(InputError) as info:
        load_config(path, environ={"ROBOTCTL_REFIT_INTERVAL_S": "-5"})
    assert "ROBOTCTL_REFIT_*" in info.value.field and "refit.interval_s" in info.value.field


def test_sidecar_yaml_is_valid_and_documents_every_key_on_its_line() -> None:
    cfg = load_config(SIDECAR, environ={})
    assert cfg.capacity == 5 and cfg.robots.n == 4
    doc = yaml.safe_load(SIDECAR.read_text())
    text = SIDECAR.read_text()
    for section, keys in documented_keys().items():
        assert section in doc, f"config/sidecar.yaml lacks section {section}"
        for key in keys:
            assert key in doc[section], f"config/sidecar.yaml lacks {section}.{key}"
            line = re.search(rf"^\s+{key}:.*$", text, flags=re.MULTILINE)
            assert line is not None and "#" in line.group(0), f"{section}.{key} has no comment on its line"


def test_sidecar_defaults_match_code_defaults() -> None:
    """The file states each default; a code change that moves a default must update the file."""
    doc = yaml.safe_load(SIDECAR.read_text())
    base = AgentConfig.from_dict({"queue": {"capacity": 5}, "robots": 4}).to_dict(redact=False)
    deliberate = {("fit", "mean_useful_life_s"), ("queue", "capacity"), ("robots", "count")}
    for section, values in doc.items():
        if section == "costs":
            continue
        for key, value in values.items():
            if (section, key) in deliberate:
                continue
            expected = base[section][key]
            if isinstance(expected, list | tuple):
                expected = list(expected)
            assert value == expected, f"{section}.{key}: file says {value!r}, code default is {expected!r}"


def test_targets_section_gives_the_bounds_or_none() -> None:
    from robotctl.policies import Targets

    base = {"queue": {"capacity": 5}}
    assert AgentConfig.from_dict(base).targets.as_targets() is None  # weights mode
    cfg = AgentConfig.from_dict({**base, "targets": {"max_loss": 0.01, "max_starvation": 0.05}})
    assert cfg.targets.as_targets() == Targets(max_loss=0.01, max_starvation=0.05)
    for bad in (1.5, 0, "1%"):
        with pytest.raises(InputError) as info:
            AgentConfig.from_dict({**base, "targets": {"max_obsolete": bad}})
        assert info.value.field == "targets.max_obsolete"


# -- issue 11, finding 1: the token, from the environment or a file, never lost, never echoed -------------
GOOD_TOKEN = "k9Vb2-Qx7_Lm4Ns8Tp1Wz"


def _server(env: dict[str, str], tmp_path: Path, text: str = "queue: {capacity: 5}\n") -> AgentConfig:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return load_config(path, environ=env)


@pytest.mark.parametrize("value", ["null", "~", "", "Null", " "])
def test_an_environment_token_of_null_does_not_switch_auth_off(tmp_path: Path, value: str) -> None:
    with pytest.raises(InputError) as info:
        _server({"ROBOTCTL_SERVER_TOKEN": value}, tmp_path)
    assert "ROBOTCTL_SERVER_TOKEN" in info.value.field
    assert "unset" in info.value.hint


@pytest.mark.parametrize("token", ["k9Vb2-Qx7_Lm4Ns8 #not-a-comment", "k9Vb2-Qx7_Lm4Ns8#x", "[k9Vb2-Qx7_Lm4Ns8]",
                                   "'k9Vb2-Qx7_Lm4Ns8'", "k9Vb2: Qx7_Lm4Ns8",
                                   "123456789012345678901"])
def test_an_environment_token_is_taken_verbatim(tmp_path: Path, token: str) -> None:
    assert _server({"ROBOTCTL_SERVER_TOKEN": token}, tmp_path).server.token == token


@pytest.mark.parametrize(("where", "secret"), [("file", "123456789012345678901"), ("env", "12345"),
                                               ("env", "short5"), ("file", "true"), ("file", "[a, b]")])
def test_a_bad_token_is_refused_without_echoing_it(tmp_path: Path, where: str, secret: str) -> None:
    env = {"ROBOTCTL_SERVER_TOKEN": secret} if where == "env" else {}
    text = "queue: {capacity: 5}\n" + (f"server: {{token: {secret}}}\n" if where == "file" else "")
    with pytest.raises(InputError) as info:
        _server(env, tmp_path, text)
    assert "server.token" in info.value.field
    assert secret not in str(info.value)


def test_a_token_file_is_read_like_a_kubernetes_secret(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text(GOOD_TOKEN + "\n")
    cfg = _server({"ROBOTCTL_SERVER_TOKEN_FILE": str(secret)}, tmp_path)
    assert cfg.server.token == GOOD_TOKEN
    assert cfg.to_dict()["server"]["token"] == "***"
    cfg = _server({}, tmp_path, f"queue: {{capacity: 5}}\nserver: {{token_file: {secret}}}\n")
    assert cfg.server.token == GOOD_TOKEN
    for env, field in [({"ROBOTCTL_SERVER_TOKEN_FILE": str(tmp_path / "missing")}, "server.token_file"),
                       ({"ROBOTCTL_SERVER_TOKEN_FILE": str(secret), "ROBOTCTL_SERVER_TOKEN": GOOD_TOKEN},
                        "server.token_file")]:
        with pytest.raises(InputError) as info:
            _server(env, tmp_path)
        assert field in info.value.field
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(InputError, match="empty"):
        _server({"ROBOTCTL_SERVER_TOKEN_FILE": str(tmp_path / "empty")}, tmp_path)


@pytest.mark.parametrize(("host", "token", "opt_out", "refused"), [
    ("0.0.0.0", None, False, True),
    ("0.0.0.0", None, True, True),  # the opt-out is for loopback only
    ("::", None, False, True),
    ("192.168.1.5", None, False, True),
    ("crawler.internal", None, True, True),
    ("127.0.0.1", None, False, True),  # no token and no explicit opt-out
    ("127.0.0.1", None, True, False),
    ("localhost", None, True, False),
    ("::1", None, True, False),
    ("0.0.0.0", GOOD_TOKEN, False, False),
])
def test_without_a_token_the_agent_must_be_explicitly_loopback_only(host: str, token: str | None, opt_out: bool,
                                                                    refused: bool) -> None:
    cfg = AgentConfig.from_dict({"queue": {"capacity": 5},
                                 "server": {"host": host, "token": token, "insecure_loopback": opt_out}})
    if refused:
        with pytest.raises(InputError) as info:
            cfg.server.check_exposure()
        assert info.value.field.startswith("server.token")
        assert "ROBOTCTL_SERVER_TOKEN" in str(info.value) and "--generate-token" in str(info.value)
        assert "\n" not in str(info.value)
    else:
        cfg.server.check_exposure()
