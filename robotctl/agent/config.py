"""The agent's configuration: YAML sections, environment overrides, validation that names the key.

Layering, lowest first: the defaults below < the YAML file < environment variables
``ROBOTCTL_<SECTION>_<KEY>`` (``ROBOTCTL_REFIT_INTERVAL_S=60``, ``ROBOTCTL_SERVER_TOKEN=...``; values
are read as YAML scalars, so ``[a, b]`` is a list and ``null`` clears, except the token and its file,
which are taken verbatim and cannot be cleared) < explicit ``overrides`` (the CLI flags).

The token comes from ``server.token``, ``server.token_file`` (read once, at load) or
``ROBOTCTL_SERVER_TOKEN``/``ROBOTCTL_SERVER_TOKEN_FILE``; no error message ever shows it.
:meth:`ServerConfig.check_exposure` refuses an agent without one unless it is loopback-only and the
operator opted out (``server.insecure_loopback``).

Unknown sections and keys are errors, in the file and in the environment alike: a typo must not fall
back silently to a default.

Renamed keys (:data:`DEPRECATED_KEYS`, the glossary of docs/ARCHITECTURE.md) are accepted for one release,
in the file and in the environment, with one log line naming the new key: ``control.mode`` is now
``robots.actuation`` (command or advise) and ``policy.control`` is ``policy.kind`` (thresholds or mdp).

Every problem raises :class:`model.InputError` whose field is the key path (``refit.interval_s``),
prefixed by where it came from (the file name or the environment variable).

config/sidecar.yaml documents every key line by line.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import yaml

from robotctl.model import Admission, Costs, InputError, ThresholdPolicy
from robotctl.policies import Targets

from ._config_values import (
    MAX_CONNECTIONS,
    MAX_NUMBER,
    MAX_WHOLE,
    _bool,
    _choice,
    _dwell,
    _fit_options,
    _float,
    _hysteresis,
    _int,
    _mapping,
    _modes,
    _optional,
    _required,
    _robot_ids,
    _spec,
    _startup,
    _str,
    _useful_life,
    key_name,
)

ENV_PREFIX = "ROBOTCTL_"
LOG = logging.getLogger("robotctl.agent.config")



class _Section:
    """Base of a config section: ``__post_init__`` runs each field's checker and stores the coerced value."""

    SECTION: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            check = f.metadata.get("check")
            if check is None:
                continue
            try:
                value = check(getattr(self, f.name))
            except InputError as exc:
                raise InputError(f"{self.SECTION}.{f.name}{exc.field}", exc.problem, exc.hint) from None
            object.__setattr__(self, f.name, value)

    @classmethod
    def from_mapping(cls, raw: Any) -> Any:
        d = _mapping(raw) if raw is not None else {}
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        for key in d:
            if key not in known:
                raise InputError(f"{cls.SECTION}.{key_name(key)}", "is not a known key",
                                 f"keys of {cls.SECTION}: {', '.join(sorted(known))}")
        for f in fields(cls):  # type: ignore[arg-type]
            if f.metadata.get("required") and d.get(f.name) is None:
                raise InputError(f"{cls.SECTION}.{f.name}", "is missing", f.metadata.get("doc", ""))
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if isinstance(v, tuple):
                v = [list(x) if isinstance(x, tuple) else x for x in v]
            out[f.name] = v
        return out


#: Fewest characters of a bearer token (``robotctl serve --generate-token`` makes 43).
TOKEN_MIN_LENGTH = 16
_TOKEN_HINT = (f"use at least {TOKEN_MIN_LENGTH} printable ASCII characters without spaces at either end; "
               "robotctl serve --generate-token makes one")
_HOW_TO_SET_A_TOKEN = ("set one: ROBOTCTL_SERVER_TOKEN=<secret>, or server.token_file (a mounted secret), "
                       "or run robotctl serve --generate-token")


def token_problem(text: str) -> str | None:
    """What is wrong with ``text`` as a bearer token, without quoting it (a token is a secret); or None."""
    if len(text) < TOKEN_MIN_LENGTH:
        return f"is {len(text)} characters long, fewer than {TOKEN_MIN_LENGTH}"
    bad = next((i for i, c in enumerate(text) if not " " <= c <= "~"), None)
    if bad is not None:
        return f"holds a character that cannot be sent in an HTTP header (character {bad + 1})"
    if text != text.strip():
        return "starts or ends with a space (HTTP drops it)"
    return None


def _token(v: Any) -> str | None:
    """A bearer token; errors never show it (the value is a secret)."""
    if v is None:
        return None
    if not isinstance(v, str):
        raise InputError("", f"must be a string, got a {type(v).__name__} (the value is not shown)",
                         "quote it in YAML: token: '...'")
    problem = token_problem(v)
    if problem is not None:
        raise InputError("", f"{problem} (the value is not shown)", _TOKEN_HINT)
    return v


def is_loopback(host: str) -> bool:
    """True when ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``; any other name is
    taken as reachable from other hosts (it is not resolved)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServerConfig(_Section):
    SECTION: ClassVar[str] = "server"
    host: str = _spec("127.0.0.1", _str, "address to bind; 127.0.0.1 keeps the agent private to the host")
    port: int = _spec(8787, _int(0, 65535), "TCP port; 0 picks a free port (printed at start)")
    token: str | None = _spec(None, _token, "bearer token required by every endpoint but /healthz, /readyz and "
                              "/metrics")
    token_file: str | None = _spec(None, _optional(_str),
                                   "file holding the token (a mounted Kubernetes Secret); instead of token")
    insecure_loopback: bool = _spec(False, _bool, "without a token, accept every request (only with a loopback "
                                    "host)")
    header_timeout_s: float = _spec(10.0, _float(positive=True),
                                    "a connection must send a request's headers within this long")
    body_timeout_s: float = _spec(30.0, _float(positive=True), "a request's body must arrive within this long")
    max_connections: int = _spec(4096, _int(16, MAX_CONNECTIONS),
                                 "most open connections (also held below the file limit)")
    max_long_polls: int = _spec(3072, _int(1), "most command long-polls waiting at once (503 above)")
    max_body_bytes: int = _spec(1 << 20, _int(1024), "largest request body accepted")
    max_batch: int = _spec(10_000, _int(1), "most deliveries (or completions) in one request")
    long_poll_max_s: float = _spec(30.0, _float(positive=True), "longest a command long-poll waits")
    shutdown_timeout_s: float = _spec(5.0, _float(), "how long shutdown waits for open requests")
    event_loop: str = _spec("auto", _choice("auto", "uvloop", "asyncio"),
                            "robotctl serve's event loop: uvloop when installed (auto), or asyncio's own")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_long_polls >= self.max_connections:
            raise InputError("server.max_long_polls", f"is {self.max_long_polls}, not below server.max_connections "
                             f"= {self.max_connections}", "leave connections for deliveries and health checks")
        if self.token_file is not None:
            if self.token is not None:
                raise InputError("server.token_file", "is set next to server.token",
                                 "set one of them: the file (a mounted secret) or the token")
            object.__setattr__(self, "token", read_token_file(self.token_file))

    def check_exposure(self) -> None:
        """Refuse to serve without a token unless the operator opted out for a loopback-only agent.

        Raises
        ------
        InputError
            ``server.token`` with one line saying how to set a token.
        """
        if self.token is not None:
            return
        if not is_loopback(self.host):
            raise InputError("server.token", f"is not set, and server.host = {self.host} is reachable from other "
                             "hosts: anyone there could park the robots", _HOW_TO_SET_A_TOKEN)
        if not self.insecure_loopback:
            raise InputError("server.token", "is not set", f"{_HOW_TO_SET_A_TOKEN}; or, to accept any request "
                             "from this host without one, set server.insecure_loopback: true")

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.token_file is not None:
            out["token"] = None  # it came from the file; the file is what to write back
        return out


def read_token_file(path: str) -> str:
    """The token in ``path`` (surrounding white space, such as a final newline, removed)."""
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except FileNotFoundError as exc:
        raise InputError("server.token_file", f"{path}: no such file", "check the path of the mounted secret") from exc
    except UnicodeDecodeError as exc:
        raise InputError("server.token_file", f"{path}: is not UTF-8 text", _TOKEN_HINT) from exc
    except OSError as exc:
        raise InputError("server.token_file", f"{path}: cannot be read ({exc.strerror})",
                         "check the path and its permissions") from exc
    except ValueError as exc:  # a NUL in the path
        raise InputError("server.token_file", f"{path!r} is not a path ({exc})", "give the file's path") from exc
    if not text:
        raise InputError("server.token_file", f"{path}: is empty", _TOKEN_HINT)
    problem = token_problem(text)
    if problem is not None:
        raise InputError("server.token_file", f"{path}: the token {problem} (the value is not shown)", _TOKEN_HINT)
    return text


@dataclass(frozen=True)
class QueueConfig(_Section):
    SECTION: ClassVar[str] = "queue"
    capacity: int = _required(_int(1), "K, the indexer's buffer in pages, the page being indexed included")
    admission: str = _spec("partial", _choice("partial", "reject-batch"),
                           "a delivery that does not fit: keep what fits (partial) or lose it all")


#: Most virtual robots, and most real robots in one: a fleet beyond is a typo (ranks are handed out by
#: scanning them).
MAX_ROBOTS = 100_000
MAX_GROUP_SIZE = 10_000


@dataclass(frozen=True)
class RobotsConfig(_Section):
    SECTION: ClassVar[str] = "robots"
    count: int | None = _spec(None, _optional(_int(1, MAX_ROBOTS)),
                              "N, virtual robots (the largest mode); default: len(ids)")
    ids: tuple[tuple[str, ...], ...] = _spec((), _robot_ids,
                                             "robot ids in rank order; a list groups real robots")
    group_size: int = _spec(1, _int(1, MAX_GROUP_SIZE),
                            "real robots per virtual robot for robots that register without an id")
    min_active: int = _spec(1, _int(1), "fewest virtual robots a fitted policy may keep active")
    default_state: str = _spec("active", _choice("active", "parked"),
                               "what a robot does when it loses the agent")
    lease_s: float = _spec(10.0, _float(positive=True), "a command is valid this long without contact")
    on_lease_lost: str = _spec("keep", _choice("keep", "deregister"),
                               "a robot that has not polled for its lease: keep it registered (it runs its "
                               "default state and may come back) or deregister it (its process is presumed "
                               "gone: a fleet of crawler processes)")
    dwell_s: float | str = _spec("auto", _dwell,
                                 "minimum time between two changes of the active count: seconds (0: off) or auto "
                                 "(0 with hysteresis: auto, whose commands are in the model; else after each "
                                 "fit the largest that costs at most 2% in the simulator)")
    hysteresis: int | str = _spec("auto", _hysteresis,
                                  "auto: after each fit, the park and resume vectors chosen exactly (robots in "
                                  "the model's state; J + costs.command x commands, within "
                                  "max_commands_per_robot_min); a number: a parked robot resumes only once the "
                                  "queue is this many levels below where r(i) alone would resume it (0: off)")
    max_commands_per_robot_min: float = _spec(10.0, _float(),
                                              "with hysteresis: auto, the most park/resume commands per robot "
                                              "per minute the chosen policy may be predicted to send, "
                                              "where max_damping_cost allows it")
    max_damping_cost: float | None = _spec(0.025, _optional(_float(maximum=10.0)),
                                           "with hysteresis: auto, the most the damping may add to the undamped "
                                           "threshold policy's cost J, as a fraction (0.025: 2.5%); the command "
                                           "budget gives way beyond it; null: no limit (the budget first)")
    max_commands_per_min: int = _spec(0, _int(0), "park/resume commands a robot receives in any 60 s at most "
                                      "(0: no limit)")
    allow_unregistered: bool = _spec(False, _bool, "accept deliveries naming robots that never registered")
    actuation: str = _spec("command", _choice("command", "advise"),
                           "command: park and resume robots so that r(i) run; advise (shadow mode): fit, optimise "
                           "and export r(i), never park or resume anyone (formerly control.mode)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.count is None:
            object.__setattr__(self, "count", max(1, len(self.ids)))
        assert self.count is not None
        if len(self.ids) > self.count:
            raise InputError("robots.ids",
                             f"lists {len(self.ids)} virtual robots but robots.count is {self.count}",
                             "raise robots.count or group robots into lists")
        if self.min_active > self.count:
            raise InputError("robots.min_active", f"is {self.min_active} > robots.count = {self.count}",
                             "min_active counts virtual robots, at most robots.count")

    @property
    def n(self) -> int:
        """N, the number of virtual robots."""
        assert self.count is not None
        return self.count


@dataclass(frozen=True)
class PolicyConfig(_Section):
    SECTION: ClassVar[str] = "policy"
    startup: str | int | tuple[int, ...] = _spec("all", _startup,
                                                 "before the first fit: all, a robot count, or r(0..K)")
    modes: tuple[int, ...] | None = _spec(None, _modes, "modes the optimiser may use (default min_active..N)")
    restore: bool = _spec(True, _bool, "resume the last adopted policy from the log directory at start")
    kind: str = _spec("thresholds", _choice("thresholds", "mdp"),
                      "the policy kind: thresholds, r(i) from the queue length; mdp, paper 001's MDP policy at each "
                      "delivery and completion where the fitted traffic meets its assumptions, else thresholds "
                      "(formerly policy.control)")


def _open_fraction(v: Any) -> float:
    v = _float(positive=True)(v)
    if v >= 1.0:
        raise InputError("", f"must be above 0 and below 1, got {v:g}", "write e.g. 0.9 or 0.01")
    return v


@dataclass(frozen=True)
class RefitConfig(_Section):
    SECTION: ClassVar[str] = "refit"
    interval_s: float = _spec(300.0, _float(positive=True), "time between scheduled refits")
    window_s: float = _spec(3600.0, _float(positive=True),
                            "the fit (and observed measures) use this recent window")
    min_deliveries: int = _spec(200, _int(2), "a refit needs at least this many deliveries in the window")
    max_samples: int = _spec(200_000, _int(100), "most recent deliveries kept for fitting")
    min_interval_s: float = _spec(30.0, _float(), "no refit sooner than this after the previous one")
    drift_bound: float | None = _spec(0.5, _optional(_float(positive=True)),
                                      "refit early when the pages of the drift window differ by this "
                                      "relative amount from those the fitted rates predict")
    drift_window_s: float = _spec(60.0, _float(positive=True), "window of the drift check")
    drift_min_pages: int = _spec(50, _int(1), "pages needed in the drift window before its drift counts")
    executor: str = _spec("auto", _choice("auto", "process", "thread"),
                          "where fit and optimise run, off the event loop: a worker process (niced), a thread, "
                          "or auto: the process under robotctl serve, a thread inside another program")
    timeout_s: float = _spec(120.0, _float(positive=True),
                             "a refit taking longer is abandoned (and counted failed)")
    probe_s: float = _spec(0.0, _float(), "before the first fit, run each mode alone this long (0: no probe)")
    time_source: str = _spec("agent", _choice("agent", "client"),
                             "timestamps to fit: the agent's stamps or the client times sent with deliveries")
    cold_start_deliveries: int = _spec(30, _int(0),
                                       "before interval_s has passed, refit at this many deliveries and at each "
                                       "doubling (a one-phase cold-start fit below min_deliveries); 0: off")
    cold_level: float = _spec(0.9, _open_fraction,
                              "confidence level of a cold-start fit's intervals; its policy is optimised under "
                              "their pessimistic end")
    change_level: float | None = _spec(0.01, _optional(_open_fraction),
                                       "false-alarm level of the test for a change of the rates in the window; a "
                                       "change found cuts the window there; null: always the whole window")
    warm_max_age_s: float | None = _spec(86400.0, _optional(_float(positive=True)),
                                         "a saved policy older than this is not restored (null: any age)")


@dataclass(frozen=True)
class FitConfig(_Section):
    SECTION: ClassVar[str] = "fit"
    processing_rate_bps: float | None = _spec(None, _optional(_float(positive=True, maximum=1e15)),
                                              "indexer speed, bytes/s: service law from delivery sizes")
    mean_useful_life_s: float | None = _spec(None, _optional(_float(positive=True)),
                                             "mean of an EXPONENTIAL useful life of a waiting page (memoryless: "
                                             "not a deadline; see useful_life)")
    useful_life: Mapping[str, Any] | None = _spec(None, _optional(_useful_life),
                                                  "a deterministic useful life {deadline: seconds, phases: k}: "
                                                  "solved as the Erlang law of k phases (default 3) and that mean")
    rate_from_exposure: bool = _spec(True, _bool,
                                     "fit each mode on its own clock from the mode trajectory (rate = pages "
                                     "delivered in the mode / time spent in it)")
    remember_modes: bool = _spec(True, _bool, "a mode not observed in the window keeps its last observed fit")
    options: Mapping[str, Any] = _spec({}, _fit_options, "passed to fitting.fit_model(options=...)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.useful_life is not None and self.mean_useful_life_s is not None:
            raise InputError("fit.useful_life", "and fit.mean_useful_life_s are both set",
                             "keep one: useful_life for a deadline, mean_useful_life_s for an exponential life")


@dataclass(frozen=True)
class LogConfig(_Section):
    SECTION: ClassVar[str] = "log"
    dir: str = _spec("var/robotctl", _str, "directory of the delivery log and agent state")
    max_bytes: int = _spec(64 << 20, _int(4096), "a log file is rotated when it reaches this size")
    keep_files: int = _spec(16, _int(1), "rotated log files kept (the oldest are deleted)")
    fsync: str = _spec("interval", _choice("always", "interval", "never"),
                       "always: fsync before each ack; interval: every fsync_interval_ms; "
                       "never: leave it to the OS")
    fsync_interval_ms: int = _spec(200, _int(1), "period of fsync when fsync is interval")


def _fraction(v: Any) -> float:
    v = _float(positive=True)(v)
    if v > 1.0:
        raise InputError("", f"must be a fraction above 0 and at most 1, got {v:g}", "write e.g. 0.01 for 1%")
    return v


@dataclass(frozen=True)
class TargetsConfig(_Section):
    """Targets instead of weights: with any bound set, refits choose the policy of least robot time that
    meets every bound (robotctl.policies.optimise_for_targets); the costs then only price it."""

    SECTION: ClassVar[str] = "targets"
    max_loss: float | None = _spec(None, _optional(_fraction),
                                   "at most this fraction of offered pages lost at the full buffer (P_loss)")
    max_obsolete: float | None = _spec(None, _optional(_fraction),
                                       "at most this fraction of offered pages dropped as obsolete (P_obs)")
    max_starvation: float | None = _spec(None, _optional(_fraction),
                                         "the indexer idle at most this fraction of the time (P_star)")
    nearest: str = _spec("ratio", _choice("ratio", "items"),
                         "when no policy meets every bound, the one nearest them: ratio, the smallest worst "
                         "measure-to-bound ratio; items, the fewest pages per second beyond the bounds (lost and "
                         "obsolete pages, and the indexer's idle time at its rate)")

    def as_targets(self) -> Targets | None:
        """The bounds as :class:`robotctl.policies.Targets`, or None when none is set (weights mode)."""
        if self.max_loss is None and self.max_obsolete is None and self.max_starvation is None:
            return None
        return Targets(self.max_loss, self.max_obsolete, self.max_starvation, nearest=self.nearest)


def _fetch_law(v: Any) -> Any:
    """A fetch-time law: a mapping in one of the forms of robotctl.policies (checked here) or a YAML path."""
    if isinstance(v, str) and v:
        return v
    from robotctl.policies import fetch_law_from_dict

    try:
        fetch_law_from_dict(v, field="")
    except InputError as exc:
        raise InputError(exc.field, exc.problem, exc.hint) from None
    return dict(v)


@dataclass(frozen=True)
class RevisitConfig(_Section):
    """The revisit planner (paper 002; robotctl/agent/revisit.py): off while ``pages`` is null."""

    SECTION: ClassVar[str] = "revisit"
    pages: str | None = _spec(None, _optional(_str),
                              "page list, CSV with page,change_rate[,weight]; null: the planner is off")
    fetch_time: Mapping[str, Any] | str = _spec({"mean": 1.0}, _fetch_law,
                                                "fetch-time law until one is fitted: {rate: x}, {mean: s}, "
                                                "{constant: s}, {beta, S}, {D0, D1}, or a YAML file")
    strategy: str = _spec("golden", _choice("golden", "weighted", "random"), "what is served: a cycle or draws")
    max_length: int = _spec(1_000_000, _int(1), "longest cycle (fetches per cycle)")
    fit_fetch_times: bool = _spec(True, _bool, "fit the fetch-time law to the fetch_s robots report")
    min_samples: int = _spec(50, _int(2), "fetch times needed before the law is fitted")
    window: int = _spec(5000, _int(10), "most recent fetch times kept for fitting")
    check_every: int = _spec(50, _int(1), "re-fit after this many new reports")
    replan_bound: float = _spec(0.2, _float(positive=True),
                                "re-plan when the fitted mean fetch time or a frequency moves by this fraction")
    estimate_change_rates: bool = _spec(False, _bool, "re-plan with change rates estimated from the revisits")
    min_observations: int = _spec(30, _int(1), "revisits of a page before its estimated rate is used")


SECTIONS: dict[str, type[_Section]] = {
    "server": ServerConfig, "queue": QueueConfig, "robots": RobotsConfig, "policy": PolicyConfig,
    "refit": RefitConfig, "fit": FitConfig, "log": LogConfig,
    "revisit": RevisitConfig, "targets": TargetsConfig,
}


@dataclass(frozen=True)
class AgentConfig:
    """The whole configuration; see config/sidecar.yaml.

    Build it from a mapping with :meth:`from_dict`, from a file and the environment with
    :func:`load_config`, or directly (``AgentConfig(queue=QueueConfig(capacity=5))``).
    """

    queue: QueueConfig
    server: ServerConfig = field(default_factory=ServerConfig)
    robots: RobotsConfig = field(default_factory=RobotsConfig)
    costs: Costs = field(default_factory=Costs)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    refit: RefitConfig = field(default_factory=RefitConfig)
    fit: FitConfig = field(default_factory=FitConfig)
    log: LogConfig = field(default_factory=LogConfig)
    revisit: RevisitConfig = field(default_factory=RevisitConfig)
    targets: TargetsConfig = field(default_factory=TargetsConfig)

    def __post_init__(self) -> None:
        K, N = self.queue.capacity, self.robots.n
        s = self.policy.startup
        if isinstance(s, tuple):
            if len(s) != K + 1:
                raise InputError("policy.startup",
                                 f"has {len(s)} levels but queue.capacity = {K} needs {K + 1}",
                                 "give one robot count per queue length 0..K")
            if max(s) > N:
                raise InputError("policy.startup", f"asks for {max(s)} robots but robots.count = {N}",
                                 "use at most robots.count")
        elif isinstance(s, int) and s > N:
            raise InputError("policy.startup", f"asks for {s} robots but robots.count = {N}",
                             "use at most robots.count")
        r0 = s[0] if isinstance(s, tuple) else s if isinstance(s, int) else N
        if r0 == 0 and self.robots.actuation == "command":
            raise InputError("policy.startup", "parks every robot at an empty queue: no page would ever be "
                             "delivered, so the queue, the fit and the policy would never move",
                             "keep at least one robot active at queue length 0 (or run robots.actuation: advise)")
        if self.policy.modes is not None:
            bad = [m for m in self.policy.modes if m > N or m < self.robots.min_active]
            if bad:
                raise InputError("policy.modes", f"holds {bad}, outside robots.min_active..robots.count = "
                                 f"{self.robots.min_active}..{N}", "list modes the fleet can run")
        if self.refit.probe_s * len(self.all_modes) > self.refit.window_s:
            raise InputError("refit.probe_s",
                             f"is {self.refit.probe_s:g} s for {len(self.all_modes)} modes, longer "
                             f"than refit.window_s = {self.refit.window_s:g} s",
                             "the first fit must see the whole probe: shorten probe_s or lengthen window_s")
        if self.refit.drift_window_s > self.refit.window_s:
            raise InputError("refit.drift_window_s", f"is {self.refit.drift_window_s:g} > refit.window_s = "
                             f"{self.refit.window_s:g}",
                             "the drift window is a recent part of the fit window")

    # -- derived -------------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.queue.capacity

    @property
    def admission(self) -> Admission:
        return Admission(self.queue.admission)

    @property
    def all_modes(self) -> tuple[int, ...]:
        """Modes the fleet can run, ascending: min_active..N."""
        return tuple(range(self.robots.min_active, self.robots.n + 1))

    def startup_policy(self) -> ThresholdPolicy:
        s = self.policy.startup
        K = self.queue.capacity
        if s == "all":
            return ThresholdPolicy.static(self.robots.n, K)
        if isinstance(s, int):
            return ThresholdPolicy.static(s, K)
        assert isinstance(s, tuple)
        return ThresholdPolicy(s)

    # -- (de)serialisation ---------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: Any, *, source: str = "") -> AgentConfig:
        """From the YAML mapping; every error names ``source`` and the key."""
        try:
            d = _renamed(_mapping(raw))
            for key in d:
                if key not in SECTIONS and key != "costs":
                    raise InputError(key_name(key), "is not a known section",
                                     f"sections: {', '.join(sorted([*SECTIONS, 'costs']))}")
            if d.get("queue") is None:
                raise InputError("queue.capacity", "is missing",
                                 "give queue: {capacity: K}, K the indexer's buffer")
            robots = d.get("robots")
            if isinstance(robots, int) and not isinstance(robots, bool):
                robots = {"count": robots}
            elif isinstance(robots, list):
                robots = {"ids": robots}
            kwargs: dict[str, Any] = {}
            for name, section in SECTIONS.items():
                kwargs[name] = section.from_mapping(robots if name == "robots" else d.get(name))
            kwargs["costs"] = _costs(d.get("costs"))
            return cls(**kwargs)
        except InputError as exc:
            if source:
                raise InputError(f"{source}: {exc.field}", exc.problem, exc.hint) from None
            raise

    def to_dict(self, *, redact: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name).to_dict() for name in SECTIONS}
        out["costs"] = self.costs.to_dict()
        if redact and self.server.token is not None:
            out["server"]["token"] = "***"
        return out


#: Renamed keys, (section, key) -> (section, key): the old spelling is accepted for one release, with a log
#: line naming the new key (docs/ARCHITECTURE.md, glossary: actuation, policy kind).
DEPRECATED_KEYS = {("control", "mode"): ("robots", "actuation"), ("policy", "control"): ("policy", "kind")}


def _section_mapping(section: str, value: Any) -> dict[str, Any]:
    """A section's value as a mapping (``robots`` may be given as a count or a list of ids)."""
    if section == "robots" and isinstance(value, int) and not isinstance(value, bool):
        return {"count": value}
    if section == "robots" and isinstance(value, list):
        return {"ids": value}
    return dict(_mapping(value)) if value is not None else {}


def _renamed(d: Mapping[Any, Any]) -> dict[Any, Any]:
    """``d`` with every deprecated key moved to its new name (one warning each); a key given under both
    names is an error, and a section that held only deprecated keys goes."""
    out = dict(d)
    for (section, key), (new_section, new_key) in DEPRECATED_KEYS.items():
        old = out.get(section)
        if not isinstance(old, Mapping) or key not in old:
            continue
        rest = {k: v for k, v in old.items() if k != key}
        target = rest if new_section == section else _section_mapping(new_section, out.get(new_section))
        if new_key in target:
            raise InputError(f"{section}.{key}", f"is the deprecated name of {new_section}.{new_key}, which is "
                             "also given", f"keep only {new_section}.{new_key}")
        LOG.warning("event=config_deprecated key=%s.%s use=%s.%s", section, key, new_section, new_key)
        target[new_key] = old[key]
        out[new_section] = target
        if new_section != section:
            if rest or section in SECTIONS:
                out[section] = rest
            else:
                del out[section]
    return out


def _costs(raw: Any) -> Costs:
    d = _mapping(raw)
    known = {f.name for f in fields(Costs)}
    for key in d:
        if key not in known:
            raise InputError(f"costs.{key_name(key)}", "is not a known key",
                             f"keys of costs: {', '.join(sorted(known))}")
    try:
        return Costs(**d)
    except InputError:
        raise
    except TypeError as exc:  # pragma: no cover - guarded by the key check
        raise InputError("costs", str(exc), "") from exc


#: Keys whose environment variable is taken verbatim, not as YAML: a secret may hold `` #``, brackets or
#: quotes, and ``null`` must not clear it.
VERBATIM = frozenset({("server", "token"), ("server", "token_file")})
_YAML_NULLS = frozenset({"", "~", "null", "Null", "NULL"})


#: ``ROBOTCTL_*`` variables that are not configuration keys: the config file's path and the robot workers' and
#: Scrapy integration's own settings (the sidecar's environment may hold them too).
NOT_CONFIG = frozenset({"CONFIG", "URL", "TOKEN", "ROBOT_ID", "ROBOT_PREFIX", "ROBOTS", "DEFAULT_STATE",
                        "DELIVERY_SIGNAL", "ENABLED", "FLUSH_INTERVAL_S", "SERVICE_FIELD", "BYTES_FIELD",
                        "RETRY_INTERVAL_S", "TIMEOUT_S", "POLL_WAIT_S", "MAX_PENDING", "MAX_BATCH"})


def _yaml_scalar(text: str) -> Any:
    """One YAML value as the config file reads it (``2e6`` a number, as in the file)."""
    from ._files import load_yaml_text

    return load_yaml_text(text, "value")


def env_overrides(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``ROBOTCTL_<SECTION>_<KEY>`` variables as ``{section: {key: value}}`` (values parsed as YAML scalars,
    except the keys in :data:`VERBATIM`, taken as they are).

    A variable whose name starts with ``ROBOTCTL_`` and names no key of a known section is an error (a
    typo must not be ignored), except the names in :data:`NOT_CONFIG` (``ROBOTCTL_CONFIG``, the robot
    workers' own settings), which are left alone.
    """
    out: dict[str, dict[str, Any]] = {}
    sections = [*SECTIONS, "costs", *{s for s, _ in DEPRECATED_KEYS if s not in SECTIONS}]
    for name, text in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        rest = name[len(ENV_PREFIX):].lower()
        section = next((s for s in sections if rest.startswith(s + "_")), None)
        if section is None:
            if name[len(ENV_PREFIX):] in NOT_CONFIG:
                continue
            raise InputError(name, "names no section of the configuration",
                             "sections: " + ", ".join(f"{ENV_PREFIX}{x.upper()}_*" for x in sorted(sections))
                             + "; unset it if it is meant for something else")
        key = rest[len(section) + 1:]
        if (section, key) in DEPRECATED_KEYS:
            section, key = DEPRECATED_KEYS[section, key]
            new_name = f"{ENV_PREFIX}{section.upper()}_{key.upper()}"
            if new_name in environ:
                raise InputError(name, f"is the deprecated name of {new_name}, which is also set",
                                 f"unset {name}")
            LOG.warning("event=config_deprecated key=%s use=%s", name, new_name)
        known = ({f.name for f in fields(Costs)} if section == "costs"
                 else {f.name for f in fields(SECTIONS[section])})  # type: ignore[arg-type]
        if key not in known:
            raise InputError(name, f"names no key of section {section}",
                             "keys: " + ", ".join(f"{ENV_PREFIX}{section.upper()}_{k.upper()}"
                                                  for k in sorted(known)))
        if (section, key) in VERBATIM:
            if text.strip() in _YAML_NULLS:
                raise InputError(name, "is empty or null, which would switch authentication off",
                                 "unset the variable instead (without any token, a loopback agent needs "
                                 "server.insecure_loopback: true)")
            out.setdefault(section, {})[key] = text
            continue
        try:
            value = _yaml_scalar(text) if text != "" else None
        except yaml.YAMLError as exc:
            raise InputError(name, f"is not a valid YAML value: {text!r}",
                             "quote it or fix the brackets") from exc
        out.setdefault(section, {})[key] = value
    return out


def _merge(base: dict[str, Any], section: str, values: Mapping[str, Any]) -> None:
    cur = base.get(section)
    if isinstance(cur, int) and not isinstance(cur, bool) and section == "robots":
        cur = {"count": cur}
    elif isinstance(cur, list) and section == "robots":
        cur = {"ids": cur}
    merged = dict(_mapping(cur)) if cur is not None else {}
    merged.update(values)
    base[section] = merged


def load_config(path: str | Path | None = None, *, environ: Mapping[str, str] | None = None,
                overrides: Mapping[str, Mapping[str, Any]] | None = None) -> AgentConfig:
    """The configuration from a YAML file (or none), the environment and explicit overrides.

    Parameters
    ----------
    path : str or Path, optional
        The YAML file (config/sidecar.yaml documents every key).
    environ : mapping, optional
        Environment variables (default ``os.environ``); ``ROBOTCTL_<SECTION>_<KEY>`` override the file.
    overrides : mapping, optional
        ``{section: {key: value}}`` applied last (command-line flags).
    """
    from ._files import load_yaml

    raw: dict[str, Any] = {}
    source = ""
    if path is not None:
        source = str(path)
        doc = load_yaml(source)
        if doc is not None and not isinstance(doc, dict):
            raise InputError(source, f"must hold a mapping of sections, got {type(doc).__name__}",
                             "see config/sidecar.yaml")
        try:  # the file's deprecated keys first, so that the environment and the flags override them
            raw = _renamed(doc or {})
        except InputError as exc:
            raise InputError(f"{source}: {exc.field}", exc.problem, exc.hint) from None
    env = env_overrides(os.environ if environ is None else environ)
    for section, values in env.items():
        _merge(raw, section, values)
    for section, given in (overrides or {}).items():
        _merge(raw, section, given)
    where = source
    if env:
        names = ", ".join(f"{ENV_PREFIX}{s.upper()}_*" for s in sorted(env))
        where = f"{source} (with {names})" if source else names
    return AgentConfig.from_dict(raw, source=where)


def documented_keys() -> dict[str, dict[str, str]]:
    """``{section: {key: doc}}``, for tests that keep config/sidecar.yaml complete."""
    out = {name: {f.name: f.metadata.get("doc", "") for f in fields(cls)}  # type: ignore[arg-type]
           for name, cls in SECTIONS.items()}
    out["costs"] = {f.name: "cost coefficient" for f in fields(Costs)}
    return out


__all__ = [
    "DEPRECATED_KEYS",
    "ENV_PREFIX",
    "MAX_GROUP_SIZE",
    "MAX_NUMBER",
    "MAX_ROBOTS",
    "MAX_WHOLE",
    "NOT_CONFIG",
    "SECTIONS",
    "TOKEN_MIN_LENGTH",
    "VERBATIM",
    "AgentConfig",
    "FitConfig",
    "LogConfig",
    "PolicyConfig",
    "QueueConfig",
    "RefitConfig",
    "RevisitConfig",
    "RobotsConfig",
    "ServerConfig",
    "TargetsConfig",
    "documented_keys",
    "env_overrides",
    "is_loopback",
    "key_name",
    "load_config",
    "read_token_file",
    "token_problem",
]
