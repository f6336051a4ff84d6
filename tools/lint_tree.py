"""Build the link tree that lets mypy and import-linter see the installed layout.

The layers' folders sit at the repository root (model/, agent/, ...) and install as ``robotctl.model``,
``robotctl.agent``, ... through ``[tool.setuptools.package-dir]`` in pyproject.toml. An editable install
maps them with an import hook, which static tools do not run; this script mirrors the mapping as a
tree of symbolic links, ``build/lint-tree/robotctl/model -> ../../../model`` and so on, read from
pyproject.toml so that the two never disagree.

Usage: ``python tools/lint_tree.py [DEST]`` (default build/lint-tree); prints DEST.
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """``{"robotctl.model": <root>/model, ...}`` from pyproject.toml."""
    with open(root / "pyproject.toml", "rb") as fh:
        mapping = tomllib.load(fh)["tool"]["setuptools"]["package-dir"]
    return {name: (root / folder).resolve() for name, folder in mapping.items()}


def build(dest: Path, root: Path = ROOT, *, replace: dict[str, Path] | None = None) -> Path:
    """Write ``dest/robotctl`` (replacing an older one) and return ``dest``; ``replace`` maps a package
    name to another folder to link instead (tests use it to check that the contracts catch a bad import).

    Run the tools from inside ``dest``: import-linter puts the working directory first on the path, and
    the repository's own robotctl/ folder (the top package's ``__init__`` alone) must not shadow the tree.
    """
    dirs = package_dirs(root) | (replace or {})
    top = dest / "robotctl"
    if top.exists():
        shutil.rmtree(top)
    top.mkdir(parents=True)
    for entry in dirs["robotctl"].iterdir():
        if entry.name != "__pycache__":
            os.symlink(entry, top / entry.name)
    for name, folder in sorted(dirs.items()):
        if name != "robotctl":
            os.symlink(folder, top / name.split(".", 1)[1])
    return dest


if __name__ == "__main__":
    out = build(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "lint-tree")
    print(out)
