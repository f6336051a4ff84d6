"""The asyncio sidecar: HTTP API (aiohttp), delivery log, refit loop, actuator, metrics, configuration,
trace files and converters, replay's engine, and the Python client robots use.

The names below are what other packages (cli, crawler, scrapy) may use; nothing outside this package
imports a private module of it (tests/test_seams.py). They are imported lazily (robotctl/_lazy.py):
``import robotctl.agent.client`` (what a crawler imports) pays for aiohttp only, not for numpy, scipy or
the model core.
"""

import typing

from robotctl._lazy import lazy_exports as _lazy_exports

if typing.TYPE_CHECKING:
    from ._files import load_model_file, load_yaml
    from ._pages import Pages, load_fetch_law, read_pages
    from ._resources import check_config_memory, check_solve_memory
    from .app import AGENT, REFIT, create_app, run_in_process, serve
    from .client import AgentClient, AgentRejectedError, AgentUnavailableError, RobotHandle, RobotState
    from .clock import ManualClock, MonotonicClock, cancel_and_wait
    from .config import AgentConfig, load_config
    from .inprocess import InProcessReports
    from .log import check_directory
    from .replay import ReplayOptions, ReplayResult, replay
    from .sources import check_recognised, read_events
    from .trace import EVENT_KINDS, TraceArrays, TraceEvent, read_trace_arrays, read_trace_bytes, write_trace

#: Where each public name lives; its submodule is imported the first time the name is asked for.
_WHERE = {
    "AGENT": ".app",
    "EVENT_KINDS": ".trace",
    "REFIT": ".app",
    "AgentClient": ".client",
    "AgentConfig": ".config",
    "AgentRejectedError": ".client",
    "AgentUnavailableError": ".client",
    "InProcessReports": ".inprocess",
    "ManualClock": ".clock",
    "MonotonicClock": ".clock",
    "Pages": "._pages",
    "ReplayOptions": ".replay",
    "ReplayResult": ".replay",
    "RobotHandle": ".client",
    "RobotState": ".client",
    "TraceArrays": ".trace",
    "TraceEvent": ".trace",
    "cancel_and_wait": ".clock",
    "check_config_memory": "._resources",
    "check_recognised": ".sources",
    "check_directory": ".log",
    "check_solve_memory": "._resources",
    "create_app": ".app",
    "load_config": ".config",
    "load_fetch_law": "._pages",
    "load_model_file": "._files",
    "load_yaml": "._files",
    "read_events": ".sources",
    "read_pages": "._pages",
    "read_trace_arrays": ".trace",
    "read_trace_bytes": ".trace",
    "replay": ".replay",
    "run_in_process": ".app",
    "serve": ".app",
    "write_trace": ".trace",
}
__getattr__, __dir__ = _lazy_exports(__name__, _WHERE)

__all__ = [
    "AGENT",
    "EVENT_KINDS",
    "REFIT",
    "AgentClient",
    "AgentConfig",
    "AgentRejectedError",
    "AgentUnavailableError",
    "InProcessReports",
    "ManualClock",
    "MonotonicClock",
    "Pages",
    "ReplayOptions",
    "ReplayResult",
    "RobotHandle",
    "RobotState",
    "TraceArrays",
    "TraceEvent",
    "cancel_and_wait",
    "check_config_memory",
    "check_directory",
    "check_recognised",
    "check_solve_memory",
    "create_app",
    "load_config",
    "load_fetch_law",
    "load_model_file",
    "load_yaml",
    "read_events",
    "read_pages",
    "read_trace_arrays",
    "read_trace_bytes",
    "replay",
    "run_in_process",
    "serve",
    "write_trace",
]
