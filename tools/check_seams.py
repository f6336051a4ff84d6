"""The seams between packages: no module of robotctl imports another package's private module.

Each package ``robotctl.X`` names in its ``__init__`` (``__all__``) what other packages may use; its
modules whose name starts with ``_`` are its own. This walks the AST of every module under robotctl/
and lists each import of ``robotctl.Y._private`` (or ``from robotctl.Y import _private``) made from
outside ``robotctl.Y``. The top package's own private modules (``robotctl._json``, ``robotctl._checks``,
...) are shared by every layer, which all live inside it.

Run by ``make lint`` (exit status 1 and one line per import found) and by tests/test_seams.py.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def module_name(path: Path, root: Path) -> str:
    """``robotctl/agent/core.py`` -> ``robotctl.agent.core`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, list[str]]]:
    """(line, dotted names) of every import statement in ``tree``: the modules it imports and, for
    ``from M import n``, ``M`` and each ``M.n``; relative imports resolved."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, [alias.name]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here[: len(here) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            yield node.lineno, [base, *(f"{base}.{alias.name}" for alias in node.names)]


def violation(importer: str, target: str) -> str | None:
    """Why ``importer`` may not import ``target``, or None."""
    parts = target.split(".")
    if len(parts) < 3 or parts[0] != "robotctl" or _private(parts[1]):
        return None
    owner = ".".join(parts[:2])
    if importer == owner or importer.startswith(owner + "."):
        return None
    private = next((p for p in parts[2:] if _private(p)), None)
    if private is None:
        return None
    return f"imports {target}: {private} is private to {owner}; use a name {owner}.__all__ exports"


def check_source(source: str, module: str, *, is_package: bool = False, where: str = "") -> list[str]:
    """One line per private import of another package in ``source`` (the text of ``module``)."""
    out = []
    for line, targets in imported(ast.parse(source), module, is_package):
        why = next((w for w in (violation(module, t) for t in targets) if w is not None), None)
        if why is not None:
            out.append(f"{where or module}:{line}: {why}")
    return out


def check_tree(root: Path = ROOT) -> list[str]:
    """Every private import of another package under ``root``/robotctl."""
    out = []
    for path in sorted((root / "robotctl").rglob("*.py")):
        out += check_source(path.read_text(encoding="utf-8"), module_name(path, root),
                            is_package=path.name == "__init__.py", where=str(path.relative_to(root)))
    return out


def main() -> int:
    found = check_tree()
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
