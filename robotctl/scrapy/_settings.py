"""The ``ROBOTCTL_*`` settings of a Scrapy project, read and checked once when the crawl starts.

Values may come from ``settings.py`` (Python values) or from the command line (``-s ROBOTCTL_ROBOTS=4``,
strings); both are accepted. A bad value raises :class:`robotctl.InputError` naming the setting, so a
misconfigured crawl stops at once instead of running uncontrolled. This module does not import Scrapy.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from robotctl import InputError

#: what a delivery is: a response received (default), an item scraped, an item entering the item pipelines
#: (``item``: the add-on's default; the item leaving them, scraped, dropped or failed, is its completion), or
#: nothing (the indexer reports)
DELIVERY_SIGNALS = ("response_received", "item_scraped", "item", "none")

#: where the agent runs: a sidecar at ROBOTCTL_URL (remote), or inside the crawl's own event loop (local)
AGENT_PLACES = ("remote", "local")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _bool(name: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
        return v.strip().lower() in _TRUE
    raise InputError(name, f"must be True or False, got {v!r}", f"set {name} = True")


def _number(name: str, v: Any, *, whole: bool, minimum: float, hint: str) -> Any:
    x: Any = v
    if isinstance(v, str):
        try:
            x = int(v) if whole else float(v)
        except ValueError:
            x = None
    if isinstance(x, bool) or not isinstance(x, int | float) or (whole and not isinstance(x, int)) \
            or not math.isfinite(x) or x < minimum:
        kind = "a whole number" if whole else "a number"
        raise InputError(name, f"must be {kind} >= {minimum:g}, got {v!r}", hint)
    return int(x) if whole else float(x)


def _int(minimum: int, hint: str) -> Callable[[str, Any], int]:
    return lambda name, v: int(_number(name, v, whole=True, minimum=minimum, hint=hint))


def _float(minimum: float, hint: str) -> Callable[[str, Any], float]:
    return lambda name, v: float(_number(name, v, whole=False, minimum=minimum, hint=hint))


def _url(name: str, v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise InputError(name, f"must be the agent's base URL, got {v!r}", 'set e.g. "http://127.0.0.1:8787"')
    parts = urlsplit(v.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(name, f"is {v!r}, not an http(s) URL with a host", 'set e.g. "http://127.0.0.1:8787"')
    return v.strip().rstrip("/")


def _optional_str(name: str, v: Any) -> str | None:
    if v is None or v == "":
        return None
    if not isinstance(v, str) or not v.isprintable():
        raise InputError(name, "must be a string of printable characters", "set it to the agent's server.token")
    return v


def _choice(*options: str) -> Callable[[str, Any], str]:
    def parse(name: str, v: Any) -> str:
        if not isinstance(v, str) or v not in options:
            raise InputError(name, f"is {v!r}", "set one of " + ", ".join(repr(o) for o in options))
        return v

    return parse


def _optional_int(minimum: int, hint: str) -> Callable[[str, Any], int | None]:
    def parse(name: str, v: Any) -> int | None:
        if v is None or v == "":
            return None
        return int(_number(name, v, whole=True, minimum=minimum, hint=hint))

    return parse


def _optional_float(minimum: float, hint: str) -> Callable[[str, Any], float | None]:
    def parse(name: str, v: Any) -> float | None:
        if v is None or v == "":
            return None
        return float(_number(name, v, whole=False, minimum=minimum, hint=hint))

    return parse


def _fraction(name: str, v: Any) -> float | None:
    if v is None or v == "":
        return None
    x = float(_number(name, v, whole=False, minimum=0.0, hint="set e.g. 0.01 for 1%"))
    if not 0.0 < x <= 1.0:
        raise InputError(name, f"must be a fraction above 0 and at most 1, got {v!r}", "set e.g. 0.01 for 1%")
    return x


def _statuses(name: str, v: Any) -> tuple[int, ...]:
    items = v.replace(",", " ").split() if isinstance(v, str) else v
    try:
        out = tuple(sorted({int(_number(name, x, whole=True, minimum=100, hint="")) for x in items}))
    except (TypeError, InputError):
        out = ()
    if not out or any(x > 599 for x in out):
        raise InputError(name, f"must list HTTP statuses (100..599), got {v!r}", "set e.g. [200] or [200, 404]")
    return out


def _mapping(name: str, v: Any) -> dict[str, Any] | None:
    if v is None or v == "":
        return None
    if not isinstance(v, Mapping):
        raise InputError(name, f"must be a mapping of agent configuration sections, got {type(v).__name__}",
                         'set e.g. {"costs": {"loss": 10.0}} (sections as in config/sidecar.yaml)')
    return dict(v)


def _dir(name: str, v: Any) -> str:
    if not isinstance(v, str) or not v.strip() or not v.isprintable():
        raise InputError(name, f"must be a directory path, got {v!r}", 'set e.g. ".robotctl"')
    return v


def _prefix(name: str, v: Any) -> str | None:
    if v is None or v == "":
        return None
    if not isinstance(v, str) or not v.isprintable() or len(v) > 150:
        raise InputError(name, f"must be up to 150 printable characters, got {v!r}", 'set e.g. "shop-crawler"')
    return v


#: setting -> (field, default, parser, what it is); ROBOTCTL_ROBOTS' default (None) means CONCURRENT_REQUESTS
_SPEC: dict[str, tuple[str, Any, Callable[[str, Any], Any], str]] = {
    "ROBOTCTL_ENABLED": ("enabled", True, _bool, "False turns the extension off (the crawl runs as without it)"),
    "ROBOTCTL_AGENT": ("agent", "remote", _choice(*AGENT_PLACES),
                       "remote: the sidecar at ROBOTCTL_URL; local: an agent inside the crawl's event loop (the "
                       "add-on's default when ROBOTCTL_URL is not set)"),
    "ROBOTCTL_URL": ("url", "http://127.0.0.1:8787", _url, "the agent's base URL (robotctl serve)"),
    "ROBOTCTL_TOKEN": ("token", None, _optional_str, "the agent's server.token, sent as a bearer token (default: "
                       "the environment's ROBOTCTL_TOKEN)"),
    "ROBOTCTL_DIR": ("dir", ".robotctl", _dir, "local agent: the directory of its log and saved policy, "
                     "so that the next crawl starts warm"),
    "ROBOTCTL_CAPACITY": ("capacity", None, _optional_int(1, "set K, the indexer's buffer in items, e.g. 10"),
                          "local agent: K, the indexer's buffer in items (default: the robotctl_capacity "
                          "attribute of an item pipeline)"),
    "ROBOTCTL_MAX_LOSS": ("max_loss", 0.01, _fraction, "local agent: at most this fraction of items lost"),
    "ROBOTCTL_MAX_OBSOLETE": ("max_obsolete", 0.02, _fraction,
                              "local agent: at most this fraction of items obsolete (with ROBOTCTL_USEFUL_LIFE_S)"),
    "ROBOTCTL_MAX_STARVATION": ("max_starvation", 0.05, _fraction,
                                "local agent: the indexer idle at most this fraction of the time, so that the "
                                "fewest robots still keep it busy (1: no bound)"),
    "ROBOTCTL_USEFUL_LIFE_S": ("useful_life_s", None, _optional_float(0.001, "set e.g. 60"),
                               "local agent: mean useful life of a waiting item, seconds (default: none)"),
    "ROBOTCTL_METRICS_PORT": ("metrics_port", None, _optional_int(1, "set e.g. 8787, or leave it unset"),
                              "local agent: serve /metrics (and the API) on this loopback port (default: a free "
                              "one)"),
    "ROBOTCTL_AGENT_CONFIG": ("agent_config", None, _mapping,
                              "local agent: sections of its configuration (config/sidecar.yaml), e.g. costs; "
                              "costs without targets means weights instead of targets"),
    "ROBOTCTL_DELIVER_STATUSES": ("deliver_statuses", (200,), _statuses,
                                  "response statuses that count as deliveries (response_received)"),
    "ROBOTCTL_ROBOTS": ("robots", None, _int(1, "set e.g. 4, at most CONCURRENT_REQUESTS"),
                        "virtual robots; CONCURRENT_REQUESTS download slots are split among them "
                        "(default: one robot per slot)"),
    "ROBOTCTL_ROBOT_PREFIX": ("robot_prefix", None, _prefix,
                              "robot ids are <prefix>-1 .. <prefix>-N (default: the spider's name)"),
    "ROBOTCTL_PROCESS": ("process", None, _prefix,
                         "remote agent shared by several Scrapy processes: this process's name (auto: "
                         "<host>-<pid>); robot ids become <prefix>-<process>-1 .., and the agent spreads its "
                         "active robots across the processes (default: none, a single process)"),
    "ROBOTCTL_DEFAULT_STATE": ("default_state", "active", _choice("active", "parked"),
                               "what a robot does while the agent cannot be reached"),
    "ROBOTCTL_DELIVERY_SIGNAL": ("delivery_signal", "response_received", _choice(*DELIVERY_SIGNALS),
                                 "what counts as a delivery to the indexer; item: an item entering the item "
                                 "pipelines (the add-on's default); none: the indexer reports them"),
    "ROBOTCTL_FLUSH_INTERVAL_S": ("flush_interval_s", 0.0, _float(0.0, "set e.g. 0.05"),
                                  "after the first report, wait this long to gather a batch (0: send as soon "
                                  "as the previous batch is acknowledged)"),
    "ROBOTCTL_MAX_BATCH": ("max_batch", 500, _int(1, "set e.g. 500, at most the agent's server.max_batch"),
                           "most reports in one request"),
    "ROBOTCTL_MAX_PENDING": ("max_pending", 10_000, _int(1, "set e.g. 10000"),
                             "reports kept while a request is in flight; beyond it the oldest are dropped"),
    "ROBOTCTL_RETRY_INTERVAL_S": ("retry_interval_s", 5.0, _float(0.01, "set e.g. 5"),
                                  "how often an unreachable agent is tried again"),
    "ROBOTCTL_TIMEOUT_S": ("timeout_s", 5.0, _float(0.01, "set e.g. 5"), "timeout of one report request"),
    "ROBOTCTL_PUSHBACK_START": ("pushback_start", 2, _int(0, "set e.g. 2, or 0 to start uncapped"),
                                "downloads a server not seen before gets at first, one more per answer without "
                                "429/503 (slow start, doubling per round trip) until its first pushback or "
                                "CONCURRENT_REQUESTS (0: uncapped until a pushback)"),
    "ROBOTCTL_PUSHBACK_PROBE_BUDGET": ("pushback_probe_budget", 0.1, _fraction,
                                       "at most this share of a server's time held by refused probes of its "
                                       "ceiling: after a Retry-After of h seconds the next probe waits at "
                                       "least h (1 - budget) / budget"),
    "ROBOTCTL_POLL_WAIT_S": ("poll_wait_s", None, _float(0.0, "set e.g. 5, or leave it unset"),
                             "longest wait of one command long-poll (default: half the agent's lease)"),
}


@dataclass(frozen=True)
class RobotctlSettings:
    """The extension's settings (each ``ROBOTCTL_<NAME>`` is the field ``<name>``; see robotctl/scrapy/README.md).

    Attributes
    ----------
    enabled : bool
    agent : str
        ``remote`` or ``local``.
    url : str
    token : str or None
        ``ROBOTCTL_TOKEN``, else the environment's ``ROBOTCTL_TOKEN``.
    dir : str
    capacity : int or None
    max_loss, max_obsolete, max_starvation, useful_life_s : float or None
    metrics_port : int or None
    agent_config : dict or None
    deliver_statuses : tuple of int
    robots : int
        N, resolved: ``ROBOTCTL_ROBOTS`` or ``CONCURRENT_REQUESTS``.
    concurrency : int
        C, the crawl's ``CONCURRENT_REQUESTS``: the downloads allowed with every robot active.
    robots_asked : int or None
        ``ROBOTCTL_ROBOTS`` as set: above C, ``robots`` is C (a robot is at least one download slot).
    robot_prefix : str or None
    process : str or None
        ``ROBOTCTL_PROCESS``, ``auto`` resolved to ``<host>-<pid>``.
    default_state : str
    delivery_signal : str
    flush_interval_s : float
    max_batch, max_pending : int
    retry_interval_s, timeout_s : float
    poll_wait_s : float or None
    pushback_start : int
        Slow start's first cap per server; 0: none.
    pushback_probe_budget : float
    """

    enabled: bool = True
    agent: str = "remote"
    url: str = "http://127.0.0.1:8787"
    token: str | None = None
    dir: str = ".robotctl"
    capacity: int | None = None
    max_loss: float | None = 0.01
    max_obsolete: float | None = 0.02
    max_starvation: float | None = 0.05
    useful_life_s: float | None = None
    metrics_port: int | None = None
    agent_config: dict[str, Any] | None = None
    deliver_statuses: tuple[int, ...] = (200,)
    robots: int = 16
    concurrency: int = 16
    robots_asked: int | None = None
    robot_prefix: str | None = None
    process: str | None = None
    default_state: str = "active"
    delivery_signal: str = "response_received"
    flush_interval_s: float = 0.0
    max_batch: int = 500
    max_pending: int = 10_000
    retry_interval_s: float = 5.0
    timeout_s: float = 5.0
    poll_wait_s: float | None = None
    pushback_start: int = 2
    pushback_probe_budget: float = 0.1

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], *,
                      environ: Mapping[str, str] | None = None) -> RobotctlSettings:
        """Read ``ROBOTCTL_*`` and ``CONCURRENT_REQUESTS`` from Scrapy's settings (any mapping); the token
        falls back to ``environ``'s (default ``os.environ``) ``ROBOTCTL_TOKEN``."""
        if not _bool("ROBOTCTL_ENABLED", settings.get("ROBOTCTL_ENABLED", True)):
            return cls(enabled=False)  # off: the rest is not read, so it cannot stop the crawl
        values: dict[str, Any] = {}
        for key, (name, default, parse, _) in _SPEC.items():
            raw = settings.get(key, default)
            values[name] = default if raw is None else parse(key, raw)
        conc = _int(1, "the robots need at least one download slot")(
            "CONCURRENT_REQUESTS", settings.get("CONCURRENT_REQUESTS", 16))
        if values["token"] is None:
            env = os.environ if environ is None else environ
            values["token"] = _optional_str("ROBOTCTL_TOKEN (environment)", env.get("ROBOTCTL_TOKEN"))
        if values["process"] == "auto":
            import socket

            values["process"] = f"{socket.gethostname()}-{os.getpid()}"
        robots = values.pop("robots")
        robots = conc if robots is None else robots
        asked = robots
        robots = min(robots, conc)  # a robot is at least one download slot (the extension warns once)
        return cls(robots=robots, concurrency=conc, robots_asked=asked, **values)

    @staticmethod
    def documented() -> dict[str, tuple[Any, str]]:
        """``{setting: (default, what it is)}`` for every ``ROBOTCTL_*`` setting (the README's table)."""
        return {k: (default, doc) for k, (_, default, _, doc) in _SPEC.items()}
