"""robotctl for Scrapy: an extension that maps robotctl's robots to Scrapy's concurrent downloads and
reports the crawl's deliveries, and an item pipeline that reports indexing completions.

The whole set-up, in a project's ``settings.py``::

    ADDONS = {"robotctl.scrapy.Addon": 100}     # the agent runs inside the crawl
    ROBOTCTL_CAPACITY = 10                       # K, the indexer's buffer in items

Or the extension alone, with a sidecar::

    EXTENSIONS = {"robotctl.scrapy.RobotctlExtension": 500}
    ROBOTCTL_URL = "http://127.0.0.1:8787"      # the sidecar (robotctl serve)
    ROBOTCTL_ROBOTS = 4                          # virtual robots; CONCURRENT_REQUESTS is split among them
    DOWNLOADER_MIDDLEWARES = {"robotctl.scrapy.PushbackMiddleware": 950,   # servers' 429/503 hold requests
                              "robotctl.scrapy.GiveUpMiddleware": 540}     # errors past the retries count

and, where the indexer is a pipeline, put ``"robotctl.scrapy.RobotctlPipeline": 900`` after it in
``ITEM_PIPELINES``. Every setting, the mapping of robots to download slots and its limits are in
robotctl/scrapy/README.md.

Scrapy is an optional extra (``pip install robotctl[scrapy]``): this package imports without it, and
its names load lazily; asking for one without Scrapy installed raises an ImportError that says how to
install it.
"""

from __future__ import annotations

import importlib
from typing import Any

INSTALL_HINT = "Scrapy is not installed: pip install 'robotctl[scrapy]' (or pip install scrapy)"

_EXPORTS = {
    "Addon": "robotctl.scrapy._addon",
    "RobotctlEntryPipeline": "robotctl.scrapy._pipeline",
    "GiveUpMiddleware": "robotctl.scrapy._middleware",
    "ItemSourceMiddleware": "robotctl.scrapy._middleware",
    "NullReporter": "robotctl.scrapy._reporter",
    "PushbackMiddleware": "robotctl.scrapy._middleware",
    "Reporter": "robotctl.scrapy._reporter",
    "ReporterStats": "robotctl.scrapy._reporter",
    "RobotSlots": "robotctl.scrapy._slots",
    "RobotctlExtension": "robotctl.scrapy._extension",
    "RobotctlPipeline": "robotctl.scrapy._pipeline",
    "RobotctlSettings": "robotctl.scrapy._settings",
    "reporter": "robotctl.scrapy._extension",
}

#: names whose module needs Scrapy itself
_NEEDS_SCRAPY = {"RobotctlExtension", "RobotctlPipeline", "RobotctlEntryPipeline", "PushbackMiddleware",
                 "GiveUpMiddleware", "ItemSourceMiddleware", "reporter"}

__all__ = [
    "INSTALL_HINT",
    "Addon",
    "GiveUpMiddleware",
    "ItemSourceMiddleware",
    "NullReporter",
    "PushbackMiddleware",
    "Reporter",
    "ReporterStats",
    "RobotSlots",
    "RobotctlEntryPipeline",
    "RobotctlExtension",
    "RobotctlPipeline",
    "RobotctlSettings",
    "reporter",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'robotctl.scrapy' has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if name in _NEEDS_SCRAPY and exc.name is not None and exc.name.split(".")[0] in ("scrapy", "twisted",
                                                                                         "itemadapter"):
            raise ImportError(f"robotctl.scrapy.{name}: {INSTALL_HINT}") from exc
        raise


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
