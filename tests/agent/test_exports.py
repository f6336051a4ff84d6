"""agent's public names: __all__ sorted, every name importable, and the modules' __all__ honest."""

from __future__ import annotations

import importlib
import inspect

import pytest

from robotctl import agent

MODULES = ["robotctl.agent.app", "robotctl.agent.client", "robotctl.agent.compute", "robotctl.agent.config",
           "robotctl.agent.convert", "robotctl.agent.policy", "robotctl.agent.refit", "robotctl.agent.replay",
           "robotctl.agent.sources", "robotctl.agent.worker"]


def _isort_key(name: str) -> tuple[int, str]:
    """The order ruff (RUF022) keeps: CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_package_all_is_sorted_and_importable() -> None:
    assert agent.__all__ == sorted(agent.__all__, key=_isort_key)
    for name in agent.__all__:
        assert getattr(agent, name) is not None
    with pytest.raises(AttributeError, match="no_such_name"):
        agent.no_such_name  # noqa: B018


@pytest.mark.parametrize("module", MODULES)
def test_module_all_lists_its_public_definitions(module: str) -> None:
    mod = importlib.import_module(module)
    names = mod.__all__
    assert names == sorted(names, key=_isort_key)
    defined = {n for n, obj in vars(mod).items()
               if not n.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj))
               and getattr(obj, "__module__", "") == module}
    assert defined <= set(names), sorted(defined - set(names))
    for n in names:
        assert hasattr(mod, n), n
