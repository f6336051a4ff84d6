"""Lazy re-exports (PEP 562) for the packages whose submodules pull in heavy parts of scipy.

``robotctl.model`` and ``robotctl.policies`` re-export many names from many submodules; importing them all
eagerly made ``from robotctl.model import BMAP`` load the sparse solvers, the quadrature, scipy.optimize
and the simulator. With :func:`lazy_exports` a name's submodule is imported the first time the name is
asked for, and the name is then cached in the package, so later lookups cost nothing.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``where`` maps each public name to the
    submodule (relative, e.g. ``"._bmap"``) that defines it."""

    def module_getattr(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def module_dir() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return module_getattr, module_dir
