"""The examples in the docstrings run and print what they show (``doctest``).

This test finds the installed modules and runs ``doctest`` on each one whose docstrings hold examples
(the same modules ``--doctest-modules`` would collect from robotctl/, without its import-mode quirks).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

#: The layers, walked one by one.
PACKAGES = ["robotctl.model", "robotctl.fitting", "robotctl.policies", "robotctl.agent", "robotctl.crawler",
            "robotctl.cli"]
#: Public functions whose docstrings must carry a runnable example (issue 10).
REQUIRED = ["robotctl.model.solve", "robotctl.policies.optimise", "robotctl.fitting.fit_model"]


def _modules_with_examples() -> list[str]:
    names = list(PACKAGES)
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        names += [info.name for info in pkgutil.walk_packages(path, package + ".")
                  if not info.name.endswith(".__main__")]
    finder = doctest.DocTestFinder()
    return sorted(n for n in names if any(t.examples for t in finder.find(importlib.import_module(n))))


MODULES = _modules_with_examples()


@pytest.mark.parametrize("name", REQUIRED)
def test_required_functions_have_examples(name: str) -> None:
    module_name, func = name.rsplit(".", 1)
    obj = getattr(importlib.import_module(module_name), func)
    assert ">>>" in (obj.__doc__ or ""), f"{name} has no example in its docstring"
    assert obj.__module__ in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE,
                             raise_on_error=False, verbose=False)
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (see above)"
