"""The ``ROBOTCTL_*`` settings of a Scrapy project, read and checked once when the crawl starts.

Values may come from ``settings.py`` (Python values) or from the command line (``-s ROBOTCTL_ROBOTS=4``,
strings); both are accepted. A bad value raises :class:`robotctl.InputError` naming the setting, so a
misconfigured crawl stops at once instead of running uncontrolled. This module does not import Scrapy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from robotctl import InputError

#: what a delivery is: a response received (default), an item scraped, or nothing (the indexer reports)
DELIVERY_SIGNALS = ("response_received", "item_scraped", "none")

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


def _prefix(name: str, v: Any) -> str | None:
    if v is None or v == "":
        return None
    if not isinstance(v, str) or not v.isprintable() or len(v) > 150:
        raise InputError(name, f"must be up to 150 printable characters, got {v!r}", 'set e.g. "shop-crawler"')
    return v


#: setting -> (field, default, parser, what it is); ROBOTCTL_ROBOTS' default (None) means CONCURRENT_REQUESTS
_SPEC: dict[str, tuple[str, Any, Callable[[str, Any], Any], str]] = {
    "ROBOTCTL_ENABLED": ("enabled", True, _bool, "False turns the extension off (the crawl runs as without it)"),
    "ROBOTCTL_URL": ("url", "http://127.0.0.1:8787", _url, "the agent's base URL (robotctl serve)"),
    "ROBOTCTL_TOKEN": ("token", None, _optional_str, "the agent's server.token, sent as a bearer token"),
    "ROBOTCTL_ROBOTS": ("robots", None, _int(1, "set e.g. 4, at most CONCURRENT_REQUESTS"),
                        "virtual robots; CONCURRENT_REQUESTS download slots are split among them "
                        "(default: one robot per slot)"),
    "ROBOTCTL_ROBOT_PREFIX": ("robot_prefix", None, _prefix,
                              "robot ids are <prefix>-1 .. <prefix>-N (default: the spider's name)"),
    "ROBOTCTL_DEFAULT_STATE": ("default_state", "active", _choice("active", "parked"),
                               "what a robot does while the agent cannot be reached"),
    "ROBOTCTL_DELIVERY_SIGNAL": ("delivery_signal", "response_received", _choice(*DELIVERY_SIGNALS),
                                 "what counts as a delivery to the indexer; none: the indexer reports them"),
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
    "ROBOTCTL_POLL_WAIT_S": ("poll_wait_s", None, _float(0.0, "set e.g. 5, or leave it unset"),
                             "longest wait of one command long-poll (default: half the agent's lease)"),
}


@dataclass(frozen=True)
class RobotctlSettings:
    """The extension's settings (each ``ROBOTCTL_<NAME>`` is the field ``<name>``; see robotctl/scrapy/README.md).

    Attributes
    ----------
    enabled : bool
    url : str
    token : str or None
    robots : int
        N, resolved: ``ROBOTCTL_ROBOTS`` or ``CONCURRENT_REQUESTS``.
    concurrency : int
        C, the crawl's ``CONCURRENT_REQUESTS``: the downloads allowed with every robot active.
    robot_prefix : str or None
    default_state : str
    delivery_signal : str
    flush_interval_s : float
    max_batch, max_pending : int
    retry_interval_s, timeout_s : float
    poll_wait_s : float or None
    """

    enabled: bool = True
    url: str = "http://127.0.0.1:8787"
    token: str | None = None
    robots: int = 16
    concurrency: int = 16
    robot_prefix: str | None = None
    default_state: str = "active"
    delivery_signal: str = "response_received"
    flush_interval_s: float = 0.0
    max_batch: int = 500
    max_pending: int = 10_000
    retry_interval_s: float = 5.0
    timeout_s: float = 5.0
    poll_wait_s: float | None = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> RobotctlSettings:
        """Read ``ROBOTCTL_*`` and ``CONCURRENT_REQUESTS`` from Scrapy's settings (any mapping)."""
        if not _bool("ROBOTCTL_ENABLED", settings.get("ROBOTCTL_ENABLED", True)):
            return cls(enabled=False)  # off: the rest is not read, so it cannot stop the crawl
        values: dict[str, Any] = {}
        for key, (name, default, parse, _) in _SPEC.items():
            raw = settings.get(key, default)
            values[name] = default if raw is None else parse(key, raw)
        conc = _int(1, "the robots need at least one download slot")(
            "CONCURRENT_REQUESTS", settings.get("CONCURRENT_REQUESTS", 16))
        robots = values.pop("robots")
        robots = conc if robots is None else robots
        if robots > conc:
            raise InputError("ROBOTCTL_ROBOTS", f"is {robots}, more than CONCURRENT_REQUESTS = {conc}: a robot is "
                             "at least one concurrent download", "raise CONCURRENT_REQUESTS or lower ROBOTCTL_ROBOTS")
        return cls(robots=robots, concurrency=conc, **values)

    @staticmethod
    def documented() -> dict[str, tuple[Any, str]]:
        """``{setting: (default, what it is)}`` for every ``ROBOTCTL_*`` setting (the README's table)."""
        return {k: (default, doc) for k, (_, default, _, doc) in _SPEC.items()}
