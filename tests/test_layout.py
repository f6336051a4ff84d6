"""The shape of the distribution (issue 10): one import name, layers that point down, instant start-up.

These run the installed project in fresh interpreters whose working directory is not the repository,
as a user's would be.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

GENERIC_NAMES = ("model", "fitting", "policies", "agent", "crawler", "scrapy", "cli")
#: folders whose name is also a real distribution's import name: `import scrapy` must find Scrapy, never them
SHADOWING = {"scrapy": "Spider"}


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=False)


def test_one_import_name(tmp_path: Path) -> None:
    out = _python("import robotctl.model, robotctl.fitting, robotctl.policies, robotctl.agent, robotctl.crawler, "
                  "robotctl.scrapy, robotctl.cli; print('ok')", tmp_path)
    assert out.stdout.strip() == "ok", out.stderr
    for name in GENERIC_NAMES:
        if name in SHADOWING:  # the real package (installed by make test), not the repository's folder
            out = _python(f"import {name}; print({name}.{SHADOWING[name]}.__module__, {name}.__file__)", tmp_path)
            assert out.returncode == 0 and str(ROOT / name) not in out.stdout, out
            continue
        out = _python(f"import {name}", tmp_path)
        assert out.returncode != 0 and "ModuleNotFoundError" in out.stderr, f"`import {name}` works: {out}"


def test_robotctl_scrapy_imports_without_scrapy(tmp_path: Path) -> None:
    """Without Scrapy, robotctl.scrapy imports (its settings and reporter work), and asking for the extension
    says how to install Scrapy."""
    code = ("import sys\nsys.modules['scrapy'] = None\nimport robotctl.scrapy as rs\n"
            "print(rs.RobotctlSettings.from_settings({}).robots)\n"
            "try:\n    rs.RobotctlExtension\nexcept ImportError as e:\n    print('hint:', e)\n")
    out = _python(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "16"
    assert "pip install 'robotctl[scrapy]'" in out.stdout.splitlines()[1]


def test_no_root_folder_shadows_an_installed_package() -> None:
    """At the repository's root `import scrapy` finds Scrapy, and no layer stands outside robotctl/."""
    out = _python("import scrapy; print(scrapy.Spider.__module__)", ROOT)
    assert out.returncode == 0 and out.stdout.strip().startswith("scrapy."), out
    for name in GENERIC_NAMES:
        assert not (ROOT / name).exists(), f"{name}/ at the root would shadow or confuse robotctl.{name}"


def test_every_import_name_is_its_folder() -> None:
    """`robotctl.X` is the folder robotctl/X, with an __init__ and a README: a tool that follows paths sees
    the layers as they are imported."""
    import robotctl

    top = Path(robotctl.__file__).resolve().parent
    assert top == ROOT / "robotctl"
    for name in GENERIC_NAMES:
        module = __import__(f"robotctl.{name}", fromlist=["_"])
        folder = Path(module.__file__).resolve().parent
        assert folder == top / name, (name, folder)
        assert (folder / "README.md").is_file(), f"{folder} has no README.md"
    assert (top / "py.typed").is_file()


@pytest.mark.slow
def test_wheel_installs_only_robotctl(tmp_path: Path) -> None:
    """A wheel holds robotctl/ and its metadata only, with py.typed and every layer under robotctl/."""
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    (wheel,) = tmp_path.glob("robotctl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"robotctl"}
    assert "robotctl/py.typed" in names
    for layer in GENERIC_NAMES:
        assert f"robotctl/{layer}/__init__.py" in names, layer
    assert not any("/tests/" in n or n.startswith("tests/") for n in names)


def _heavy_after(code: str, cwd: Path) -> list[str]:
    probe = (f"{code}\nimport json, sys\n"
             "print(json.dumps(sorted(m for m in ('numpy', 'scipy', 'aiohttp', 'yaml', 'prometheus_client', 'asyncio') "
             "if m in sys.modules)))")
    out = _python(probe, cwd)
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_help_imports_nothing_heavy(tmp_path: Path) -> None:
    """`robotctl --help` and every `robotctl CMD --help` load none of numpy, scipy, aiohttp, yaml (the timing
    itself is in bench/startup.py)."""
    from robotctl.cli._main import COMMAND_MODULES

    commands = ["solve", "optimise", *(m.rsplit("_cmd_", 1)[1] for m in COMMAND_MODULES if not m.endswith("model"))]
    for argv in [["--help"], *([c, "--help"] for c in commands)]:
        code = (f"from robotctl.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit as e:\n"
                "    assert e.code == 0, e.code\n")
        assert _heavy_after(code, tmp_path) == [], argv


def test_client_does_not_import_the_model(tmp_path: Path) -> None:
    assert _heavy_after("import robotctl.agent.client", tmp_path) == ["aiohttp", "asyncio"]


def test_cli_method_lists_match_the_libraries() -> None:
    from robotctl.cli import _cmd_model
    from robotctl.model import METHODS
    from robotctl.policies import SEARCH_METHODS

    assert _cmd_model.SOLVER_METHODS == METHODS
    assert _cmd_model.SEARCH_METHODS == SEARCH_METHODS


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe is not None, "import-linter is not installed: make test installs the lint extra"
    return subprocess.run([exe, "--no-cache", "--config", str(ROOT / "pyproject.toml")], cwd=tree,
                          capture_output=True, text=True, check=False)


def _tree(dest: Path, *, replace: dict[str, Path] | None = None) -> Path:
    """A copy of robotctl/ under ``dest`` (``replace`` swaps one package for another folder), so that a test
    can plant a bad import without touching the repository."""
    top = dest / "robotctl"
    shutil.copytree(ROOT / "robotctl", top, ignore=shutil.ignore_patterns("__pycache__"))
    for name, folder in (replace or {}).items():
        target = top / name.split(".", 1)[1]
        shutil.rmtree(target)
        shutil.copytree(folder, target)
    return dest


def test_layer_contracts_hold() -> None:
    out = _lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(("layer", "bad_import", "contract"), [
    ("robotctl.model", "import robotctl.agent.client", "Layers point down"),
    ("robotctl.agent", "import robotctl.crawler", "Layers point down"),
    ("robotctl.scrapy", "import robotctl.crawler", "Layers point down"),
    ("robotctl.agent", "import robotctl.scrapy", "Layers point down"),
    ("robotctl.fitting", "import robotctl.policies", "Layers point down"),
    ("robotctl.policies", "import asyncio", "Pure packages do no I/O"),
])
def test_an_upward_import_breaks_lint(tmp_path: Path, layer: str, bad_import: str, contract: str) -> None:
    """What `make lint` runs fails when one module of a layer gains an import it must not have."""
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "robotctl" / layer.split(".", 1)[1], copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "_upward.py").write_text(f'"""A bad import, for the test."""\n\n{bad_import}  # noqa: F401\n')
    out = _lint_imports(_tree(tmp_path / "tree", replace={layer: copy}))
    assert out.returncode != 0, out.stdout
    assert f"{layer}._upward" in out.stdout
    broken = [line for line in out.stdout.splitlines() if "BROKEN" in line]
    assert any(line.startswith(contract) for line in broken), broken
