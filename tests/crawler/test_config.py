"""The demo's configuration: config/demo.yaml equals the embedded defaults; errors name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from robotctl.crawler import DEFAULTS, DemoConfig, load_demo_config
from robotctl.model import InputError

REPO = Path(__file__).resolve().parents[2]


def test_config_file_is_the_embedded_defaults() -> None:
    assert yaml.safe_load((REPO / "config" / "demo.yaml").read_text()) == DEFAULTS
    assert load_demo_config(REPO / "config" / "demo.yaml").to_dict() == load_demo_config().to_dict()


def test_every_default_key_is_documented_in_the_file() -> None:
    text = (REPO / "config" / "demo.yaml").read_text()
    for section, keys in DEFAULTS.items():
        for key in keys:
            line = next(ln for ln in text.splitlines() if ln.strip().startswith(f"{key}:"))
            assert "#" in line or section == "agent", (section, key)


def test_a_file_overrides_only_what_it_names(tmp_path: Path) -> None:
    p = tmp_path / "d.yaml"
    p.write_text("demo: {duration_s: 12, warmup_s: 2}\nindexer: {capacity: 5}\nagent: {refit: {interval_s: 3}}\n")
    cfg = load_demo_config(p)
    assert (cfg.demo.duration_s, cfg.demo.warmup_s, cfg.indexer.capacity) == (12.0, 2.0, 5)
    assert cfg.robots.count == DEFAULTS["robots"]["count"]
    assert cfg.agent["refit"]["interval_s"] == 3 and cfg.agent["refit"]["min_deliveries"] == 80
    ac = cfg.agent_config(log_dir=str(tmp_path))
    assert ac.queue.capacity == 5 and ac.robots.n == cfg.robots.count and ac.costs == cfg.costs


@pytest.mark.parametrize(("raw", "field"), [
    ({"sites": {}}, "sites"),
    ({"site": {"hostz": 2}}, "site.hostz"),
    ({"site": {"seed": 4}}, "site.seed"),
    ({"demo": {"duration_s": 5, "warmup_s": 5}}, "demo.warmup_s"),
    ({"robots": {"count": 0}}, "robots.count"),
    ({"costs": {"loss": -1}}, "costs.loss"),
    ({"agent": {"queue": {"capacity": 3}}}, "agent.queue"),
    ({"agent": {"robots": {"count": 9}}}, "agent.robots.count"),
    ({"agent": {"refit": {"interval": 3}}}, "agent: refit.interval"),
])
def test_bad_config_names_the_key(raw: dict[str, object], field: str, tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        DemoConfig.from_dict(raw)
    assert info.value.field.startswith(field)
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(raw))
    with pytest.raises(InputError, match=rf"^{p}: {field}"):
        load_demo_config(p)


def test_unreadable_or_invalid_files_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_demo_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("demo: [1, 2\n")
    with pytest.raises(InputError, match="is not valid YAML"):
        load_demo_config(bad)


def test_overrides_and_the_fixed_fleet_agent(tmp_path: Path) -> None:
    cfg = load_demo_config().with_overrides(seed=9, duration_s=8.0)
    assert cfg.demo.seed == 9 and cfg.site.seed == 9
    assert cfg.demo.duration_s == 8.0 and cfg.demo.warmup_s == 2.0      # at most a quarter of the run
    assert load_demo_config().with_overrides(duration_s=8.0, warmup_s=1.0).demo.warmup_s == 1.0
    fixed = cfg.agent_config(log_dir=str(tmp_path), static=2)
    assert fixed.startup_policy().robots_at_level == (2,) * (cfg.indexer.capacity + 1)
    assert fixed.refit.drift_bound is None and fixed.refit.min_deliveries > 10**6
    assert fixed.policy.restore is False
