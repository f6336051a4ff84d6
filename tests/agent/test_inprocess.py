"""Reports to an agent in the same event loop without HTTP (robotctl.agent.InProcessReports): the same
acknowledgements, the same refusals and the same durable log as the endpoints, report for report."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from robotctl.agent import AgentClient, AgentConfig, AgentRejectedError, InProcessReports
from robotctl.agent.app import AGENT, run_in_process
from robotctl.agent.clock import ManualClock


async def _both(config_factory: Callable[..., AgentConfig], script: Callable[[Any], Any], tmp_path: Path
                ) -> list[list[Any]]:
    """Run ``script(reporter)`` against two fresh agents (each its own log) on equal clocks: one over HTTP,
    one in process; each run's results with the agent's totals, its queue and its delivery log."""
    runs = []
    for over_http in (True, False):
        log = tmp_path / ("http" if over_http else "inprocess")
        async with run_in_process(config_factory(log={"dir": str(log)}), clock=ManualClock(1000.0)) as (url, app):
            async with AgentClient(url) as client:
                out = await script(client if over_http else InProcessReports(app))
            agent = app[AGENT]
            runs.append([out, agent.status()["totals"], agent.status()["queue"]])
        runs[-1].append([line for f in sorted(log.iterdir()) for line in f.read_text().splitlines()])
    return runs


async def test_acknowledgements_equal_the_endpoints(config_factory: Callable[..., AgentConfig], tmp_path: Path
                                                    ) -> None:
    async def script(r: Any) -> list[Any]:
        return [await r.deliver_many([{"robot": None, "pages": 2}, {"pages": 3, "bytes": 1000}]),
                await r.deliver_many([{"pages": 4}]),                        # K = 5: partly lost
                await r.complete_many([{"pages": 1, "service_s": 0.5}, {"pages": 2, "bytes": 10}]),
                await r.obsolete(1), await r.given_up(2), await r.set_queue(1),
                (await r.status())["queue"]]

    over_http, in_process = await _both(config_factory, script, tmp_path)
    assert in_process == over_http
    acks = in_process[0]
    assert (acks[0]["pages"], acks[0]["admitted"], acks[1]["admitted"], acks[1]["lost"]) == (5, 5, 0, 4)
    assert in_process[3], "the in-process reports were logged"


@pytest.mark.parametrize("report", [
    lambda r: r.deliver_many([{"pages": 1}, {"pages": 0}]),
    lambda r: r.deliver_many([{"robot": "nobody", "pages": 1, "colour": "red"}]),
    lambda r: r.complete_many([{"pages": 1, "service_s": -1.0}]),
    lambda r: r.set_queue(99),
    lambda r: r.obsolete(0),
])
async def test_refusals_equal_the_endpoints(config_factory: Callable[..., AgentConfig], tmp_path: Path,
                                            report: Callable[[Any], Any]) -> None:
    async def script(r: Any) -> tuple[int, str, str]:
        with pytest.raises(AgentRejectedError) as info:
            await report(r)
        return info.value.status, info.value.field, str(info.value)

    over_http, in_process = await _both(config_factory, script, tmp_path)
    assert in_process == over_http
    status, field, text = in_process[0]
    assert status == 400 and field and text.startswith("HTTP 400: " + field)
