"""Shared test set-up: one BLAS thread (as the CLI and Makefile do) before numpy is imported; a fixture
that makes an optional extra look uninstalled."""

import builtins
import os
from collections.abc import Callable
from typing import Any

import pytest

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


@pytest.fixture
def uninstall(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """``uninstall("matplotlib")``: importing that package (or a submodule) raises ImportError, as when an
    optional extra is not installed."""
    def hide(package: str) -> None:
        real = builtins.__import__

        def fake(name: str, *args: Any, **kwargs: Any) -> Any:
            if name == package or name.startswith(package + "."):
                raise ImportError(f"No module named {package!r}")
            return real(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", fake)

    return hide
