"""``Addon``: robotctl in one line of a Scrapy project's ``settings.py``::

    ADDONS = {"robotctl.scrapy.Addon": 100}
    ROBOTCTL_CAPACITY = 10          # K, the indexer's buffer in items (or a pipeline's robotctl_capacity)

The add-on enables :class:`RobotctlExtension`, :class:`PushbackMiddleware` (every request, Scrapy's
retries included, waits out its server's 429/503 ``Retry-After`` and cap), :class:`GiveUpMiddleware`
(download errors past the retries are requests given up) and :class:`RobotctlEntryPipeline`
(first in ``ITEM_PIPELINES``: an item entering the pipelines is a delivery; leaving them, scraped, dropped
or failed, a completion), and, unless ``ROBOTCTL_URL`` names a sidecar, runs the agent inside the crawl's own
asyncio loop (``ROBOTCTL_AGENT = "local"``): no second process, no token to set; it refits in a worker
process so the crawl never stalls, and keeps its log and policy under ``ROBOTCTL_DIR/<spider>/`` so the
next crawl starts warm. :func:`local_agent_config` is that agent's configuration (no Scrapy here beyond
the settings object the add-on is handed).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._settings import RobotctlSettings

EXTENSION = "robotctl.scrapy.RobotctlExtension"
ENTRY_PIPELINE = "robotctl.scrapy.RobotctlEntryPipeline"
#: the servers' pushback gate, nearest the downloader (after DownloaderStats, 850; RetryMiddleware is 550)
PUSHBACK_MIDDLEWARE = "robotctl.scrapy.PushbackMiddleware"
PUSHBACK_PRIORITY = 950
#: download errors past Scrapy's retries: just below RetryMiddleware (550)
GIVE_UP_MIDDLEWARE = "robotctl.scrapy.GiveUpMiddleware"
GIVE_UP_PRIORITY = 540
#: names each item's robot: the nearest spider middleware to the engine
ITEM_SOURCE_MIDDLEWARE = "robotctl.scrapy.ItemSourceMiddleware"
ITEM_SOURCE_PRIORITY = 10
#: the entry pipeline runs before every other item pipeline
ENTRY_PRIORITY = -1_000_000


class Addon:
    """Scrapy add-on (``ADDONS = {"robotctl.scrapy.Addon": 100}``); see the module docstring."""

    def update_settings(self, settings: Any) -> None:
        settings.set_in_component_priority_dict("EXTENSIONS", EXTENSION, 500)
        settings.set_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", PUSHBACK_MIDDLEWARE, PUSHBACK_PRIORITY)
        settings.set_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", GIVE_UP_MIDDLEWARE, GIVE_UP_PRIORITY)
        if settings.get("ROBOTCTL_URL") is None:
            settings.set("ROBOTCTL_AGENT", "local", priority="addon")
        if settings.get("ROBOTCTL_DELIVERY_SIGNAL") is None:
            settings.set("ROBOTCTL_DELIVERY_SIGNAL", "item", priority="addon")
        if settings.get("ROBOTCTL_DELIVERY_SIGNAL") == "item":
            settings.set_in_component_priority_dict("ITEM_PIPELINES", ENTRY_PIPELINE, ENTRY_PRIORITY)
            settings.set_in_component_priority_dict("SPIDER_MIDDLEWARES", ITEM_SOURCE_MIDDLEWARE,
                                                    ITEM_SOURCE_PRIORITY)


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def safe_startup(robots: int, capacity: int) -> tuple[int, ...]:
    """The policy before the first fit: every robot at an empty buffer, fewer as it fills, one when full,
    ``r(i) = max(1, ceil(N (K - i) / K))``: a cold crawl loses few items while the first fits are made."""
    return tuple(max(1, -(-robots * (capacity - i) // capacity)) for i in range(capacity + 1))


def startup_policy(s: RobotctlSettings, capacity: int) -> tuple[int, ...] | None:
    """r(0..K), the local agent's start-up policy: :func:`safe_startup`, or ``policy.startup`` of
    ``ROBOTCTL_AGENT_CONFIG`` (``all``, a robot count, or K + 1 of them); None for a value the agent's
    configuration will refuse (its start names it). A warm crawl's agent adopts its saved policy once it runs."""
    section = (s.agent_config or {}).get("policy")
    given = section.get("startup") if isinstance(section, Mapping) else None
    if given is None:
        return safe_startup(s.robots, capacity)
    if given == "all":
        given = s.robots
    if isinstance(given, int) and not isinstance(given, bool):
        given = [given] * (capacity + 1)
    if (isinstance(given, (list, tuple)) and len(given) == capacity + 1
            and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= s.robots for x in given)):
        return tuple(given)
    return None


def local_agent_config(s: RobotctlSettings, *, capacity: int, directory: Path, token: str) -> dict[str, Any]:
    """The configuration (as ``config/sidecar.yaml``'s mapping) of the agent the add-on runs in the crawl.

    Parameters
    ----------
    s : RobotctlSettings
    capacity : int
        K, from ``ROBOTCTL_CAPACITY`` or a pipeline's ``robotctl_capacity``.
    directory : Path
        Its log and saved policy (``ROBOTCTL_DIR/<spider>``).
    token : str
        A fresh random token: only this crawl's extension may command the robots.

    Before the first fit the robots follow :func:`safe_startup`. The objective is targets
    (``ROBOTCTL_MAX_LOSS``, ``ROBOTCTL_MAX_OBSOLETE``, ``ROBOTCTL_MAX_STARVATION``: the fewest robots
    meeting all three; when no policy does, the one nearest them), adopted as it is, undamped
    (``robots.hysteresis: 0``; the agent's ``auto`` keeps a targets' policy as chosen too: its exact choice
    ranks by the cost J, whose weights are all 0 here, and once chose every robot at every level, so that
    the add-on never parked a robot in bench/scrapy_compare.py). ``ROBOTCTL_AGENT_CONFIG`` overrides any
    section, and its ``costs`` without ``targets`` means weights instead of targets (with the agent's
    hysteresis choice).
    """
    cfg: dict[str, Any] = {
        "policy": {"startup": safe_startup(s.robots, capacity)},
        "server": {"host": "127.0.0.1", "port": s.metrics_port or 0, "token": token},
        "queue": {"capacity": capacity},
        "robots": {"count": s.robots, "default_state": s.default_state},
        "log": {"dir": str(directory)},
        "refit": {"executor": "process", "time_source": "client"},
        "targets": {"max_loss": s.max_loss, "max_obsolete": s.max_obsolete, "max_starvation": s.max_starvation,
                    "nearest": "items"},
    }
    if s.useful_life_s is not None:
        cfg["fit"] = {"mean_useful_life_s": s.useful_life_s}
    user = dict(s.agent_config or {})
    if "costs" in user and "targets" not in user:
        del cfg["targets"]
    else:  # targets: their policy as it is (see above)
        cfg["robots"].update(hysteresis=0, dwell_s=0)
    return _merge(cfg, user)
