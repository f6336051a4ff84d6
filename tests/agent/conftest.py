"""Fixtures of the agent's tests: configurations in tmp_path, a manual clock, a running agent."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from robotctl.agent.clock import ManualClock
from robotctl.agent.config import AgentConfig


def make_config(tmp_path: Path, **sections: Any) -> AgentConfig:
    """A valid configuration: K = 5, 4 robots, the log in tmp_path, port 0 on loopback without a token
    (``server.insecure_loopback``); ``sections`` merge in."""
    raw: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 0, "insecure_loopback": True},
        "queue": {"capacity": 5},
        "robots": {"count": 4},
        "log": {"dir": str(tmp_path / "log")},
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return AgentConfig.from_dict(raw)


@pytest.fixture
def config_factory(tmp_path: Path) -> Callable[..., AgentConfig]:
    return lambda **sections: make_config(tmp_path, **sections)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000.0)


@pytest.fixture
async def running(config_factory: Callable[..., AgentConfig], clock: ManualClock) -> AsyncIterator[Any]:
    """An agent on a real socket with a manual clock: (base_url, app)."""
    from robotctl.agent.app import run_in_process

    async with run_in_process(config_factory(), clock=clock) as (url, app):
        yield url, app
