"""Issue 26: fit.useful_life: {deadline: s} in the sidecar config, and the refit's model uses it."""

from __future__ import annotations

from pathlib import Path

import pytest

from robotctl.agent.config import AgentConfig
from robotctl.model import InputError


def _config(tmp_path: Path, fit: dict) -> AgentConfig:
    return AgentConfig.from_dict({"queue": {"capacity": 5}, "robots": {"count": 4}, "log": {"dir": str(tmp_path)},
                                  "fit": fit})


def test_deadline_parses_with_default_phases(tmp_path: Path) -> None:
    cfg = _config(tmp_path, {"useful_life": {"deadline": 10}})
    assert cfg.fit.useful_life == {"deadline": 10.0, "phases": 3}
    assert _config(tmp_path, {"useful_life": {"deadline": 2.5, "phases": 8}}).fit.useful_life == {
        "deadline": 2.5, "phases": 8}


@pytest.mark.parametrize(("fit", "field"), [
    ({"useful_life": {"deadline": 0}}, "fit.useful_life.deadline"),
    ({"useful_life": {"deadline": "soon"}}, "fit.useful_life.deadline"),
    ({"useful_life": {}}, "fit.useful_life.deadline"),
    ({"useful_life": {"deadline": 10, "phases": 0}}, "fit.useful_life.phases"),
    ({"useful_life": {"deadline": 10, "mean": 3}}, "fit.useful_life.mean"),
    ({"useful_life": {"deadline": 10}, "mean_useful_life_s": 5}, "fit.useful_life"),
])
def test_bad_useful_life_names_the_field(tmp_path: Path, fit: dict, field: str) -> None:
    with pytest.raises(InputError) as exc:
        _config(tmp_path, fit)
    assert exc.value.field == field


def test_refit_model_carries_the_deadline() -> None:
    from robotctl.agent.refit import compute_refit
    from robotctl.model import ThresholdPolicy
    from tests.agent.test_refit import _input, _trace

    tr = _trace(ThresholdPolicy((3, 3, 3, 1, 1, 1)), 2000.0, seed=3)
    out = compute_refit(_input(tr, useful_life={"deadline": 4.0, "phases": 3}))
    assert out.success and out.model is not None, out.message
    assert out.model.deadline == 4.0
    assert out.model.obsolescence is not None and out.model.obsolescence.order == 3
    assert out.model.obsolescence.mean == pytest.approx(4.0)
