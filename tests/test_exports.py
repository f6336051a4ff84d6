"""Each package's __all__ is sorted, every name in it resolves, and every public name the package
defines is listed (STYLE.md: implementation in private modules, public names re-exported)."""

from __future__ import annotations

import importlib
import types

import pytest

PACKAGES = ["robotctl", "robotctl.model", "robotctl.fitting", "robotctl.policies", "robotctl.agent", "robotctl.crawler",
            "robotctl.scrapy", "robotctl.cli"]


def isort_key(name: str) -> tuple[int, str]:
    """Ruff's RUF022 order: CONSTANTS, then Classes, then functions, each sorted."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_resolves(name: str) -> None:
    pkg = importlib.import_module(name)
    exported = list(pkg.__all__)
    assert exported == sorted(exported, key=isort_key), f"{name}.__all__ is not sorted"
    assert len(set(exported)) == len(exported)
    for public in exported:
        assert getattr(pkg, public) is not None


@pytest.mark.parametrize("name", PACKAGES)
def test_every_public_name_is_exported(name: str) -> None:
    pkg = importlib.import_module(name)
    public = {k for k, v in vars(pkg).items()
              if not k.startswith("_") and not isinstance(v, types.ModuleType) and k != "annotations"
              and getattr(v, "__module__", None) != "typing"}
    assert public <= set(pkg.__all__), f"{name} defines public names missing from __all__: {public - set(pkg.__all__)}"
