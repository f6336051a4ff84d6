"""The seams between packages (issue 22): nothing under robotctl/ imports another package's private module;
each package's ``__init__`` names what the others may use (tests/test_exports.py checks those lists).
The checker is tools/check_seams.py, which ``make lint`` runs too."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_seams", ROOT / "tools" / "check_seams.py")
assert _spec is not None and _spec.loader is not None
check_seams = importlib.util.module_from_spec(_spec)
sys.modules["check_seams"] = check_seams
_spec.loader.exec_module(check_seams)


def test_no_package_imports_another_packages_private_module() -> None:
    assert check_seams.check_tree(ROOT) == []


@pytest.mark.parametrize(("module", "source", "is_package"), [
    ("robotctl.cli._run_fit", "from robotctl.agent._files import load_yaml", False),
    ("robotctl.crawler._config", "import robotctl.agent._resources", False),
    ("robotctl.policies._certificate", "from robotctl.model import _bruteforce", False),
    ("robotctl.policies._certificate", "from robotctl.model._bruteforce import _fates", False),
    ("robotctl.cli._run_fit", "def f():\n    from robotctl.agent._pages import Pages", False),  # inside a function
    ("robotctl.cli", "from ..agent._files import load_yaml", True),  # relative, from a package's __init__
    ("robotctl.cli._run_fit", "from ..agent import _files", False),
])
def test_a_planted_private_import_is_caught(module: str, source: str, is_package: bool) -> None:
    found = check_seams.check_source(source, module, is_package=is_package)
    assert len(found) == 1 and "is private to robotctl." in found[0], found


@pytest.mark.parametrize(("module", "source"), [
    ("robotctl.cli._run_fit", "from robotctl.agent import load_yaml"),  # a public name
    ("robotctl.cli._run_fit", "from robotctl.agent.config import AgentConfig"),  # a public module
    ("robotctl.agent.core", "from ._files import load_yaml"),  # a package's own private module
    ("robotctl.agent.core", "from robotctl.agent._files import load_yaml"),
    ("robotctl.policies._mdp", "from robotctl._json import dumps"),  # the top package's, shared by every layer
    ("robotctl.cli._run_fit", "import numpy._core"),  # not ours
])
def test_an_allowed_import_passes(module: str, source: str) -> None:
    assert check_seams.check_source(source, module) == []
