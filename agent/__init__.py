"""The asyncio sidecar: HTTP API (aiohttp), delivery log, refit loop, actuator, metrics, configuration,
the Python client, and the ``robotctl`` command line.

The public names below are imported lazily, so that ``robotctl --help`` does not pay for aiohttp.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AgentClient": "agent.client",
    "AgentConfig": "agent.config",
    "ManualClock": "agent.clock",
    "MonotonicClock": "agent.clock",
    "RobotHandle": "agent.client",
    "RobotState": "agent.client",
    "create_app": "agent.app",
    "load_config": "agent.config",
    "run_in_process": "agent.app",
}

__all__ = [
    "AgentClient",
    "AgentConfig",
    "ManualClock",
    "MonotonicClock",
    "RobotHandle",
    "RobotState",
    "create_app",
    "load_config",
    "run_in_process",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agent' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
