"""The asyncio sidecar: HTTP API (aiohttp), delivery log, refit loop, actuator, metrics, configuration,
trace files and converters, replay's engine, and the Python client robots use.

The public names below are imported lazily: ``import robotctl.agent.client`` (what a crawler imports)
pays for aiohttp only, not for numpy, scipy or the model core.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AgentClient": "robotctl.agent.client",
    "AgentConfig": "robotctl.agent.config",
    "ManualClock": "robotctl.agent.clock",
    "MonotonicClock": "robotctl.agent.clock",
    "RobotHandle": "robotctl.agent.client",
    "RobotState": "robotctl.agent.client",
    "create_app": "robotctl.agent.app",
    "load_model_file": "robotctl.agent._files",
    "load_config": "robotctl.agent.config",
    "read_events": "robotctl.agent.sources",
    "replay": "robotctl.agent.replay",
    "run_in_process": "robotctl.agent.app",
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
    "load_model_file",
    "read_events",
    "replay",
    "run_in_process",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'robotctl.agent' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
