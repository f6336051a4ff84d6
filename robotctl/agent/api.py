"""Request bodies of the HTTP API: parsing and validation, before anything changes.

Every function raises :class:`model.InputError` naming the offending field with its JSON path
(``deliveries[3].pages``); the app turns that into a 400 with ``{"error", "field", "hint"}``. A batch
is validated whole before any of it is applied, so a bad item changes nothing. A deliveries body of the
common shape is decoded and checked in one msgspec call (:func:`parse_delivery_body`); any other takes the
checks that name the field.

Bodies (JSON):

``POST /v1/deliveries``
    ``{"robot": "r1", "pages": 3, "bytes": 51200, "client_time": 1700000000.25}`` or
    ``{"deliveries": [<that>, ...]}``. ``pages`` defaults to 1; the rest is optional. ``robot`` must
    be registered unless ``robots.allow_unregistered``.
``POST /v1/completions``
    ``{"pages": 1, "service_s": 0.35, "bytes": 51200}`` or ``{"completions": [...]}``: pages indexed,
    with their total indexing time and/or total size.
``POST /v1/obsolete``
    ``{"pages": 2}``: waiting pages dropped as stale.
``POST /v1/given_up``
    ``{"pages": 2}``: pages the crawler gave up on (a server refused them past its retries); counted in
    the observed cost J like pages lost.
``POST /v1/queue``
    ``{"length": 4}``: the indexer's own count of pages in the system, 0..K.
``POST /v1/actuation``
    ``{"actuation": "advise"}`` or ``{"actuation": "command"}`` (the deprecated ``POST /v1/mode`` takes
    ``{"mode": ...}``).
``POST /v1/robots``
    ``{"robot": "r1", "rank": 2, "default_state": "active", "process": "host-1234"}``, every key optional
    (``process``: the crawler process the robot belongs to; handed-out ranks are dealt over processes).
``POST /v1/override`` (and the deprecated ``POST /v1/control``)
    ``{"action": "pause"|"pin"|"resume", "robots": 2, "duration_s": 600, "reason": "..."}``: ``robots``
    (active virtual robots, 0..N) only and always with ``pin``; ``duration_s`` optional with pause and pin.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from itertools import chain, repeat
from operator import attrgetter
from typing import Annotated, Any, NamedTuple, overload

from robotctl import InputError

from .config import key_name

#: Largest pages in one delivery/completion and largest byte count accepted.
MAX_PAGES = 1_000_000
MAX_BYTES = 1 << 50
MAX_ID_LENGTH = 200
#: Longest indexing time of one page (``service_s / pages``): a day. Finite but larger values (1e308) once
#: made every sum infinite, every refit fail, and /v1/status emit a bare Infinity.
MAX_SERVICE_S_PER_PAGE = 86_400.0
#: Longest runtime override of control (ten years): a longer one would hold until the agent restarts anyway.
MAX_CONTROL_S = 10 * 365.25 * 86_400.0
#: Largest client time in absolute value: about 31,700 years of seconds, any clock's epoch included.
MAX_CLIENT_TIME = 1e12


class NotFoundError(InputError):
    """The path names something that does not exist (HTTP 404), e.g. an unregistered robot."""


class Delivery(NamedTuple):
    robot: str | None
    pages: int
    bytes: int | None
    client_time: float | None


class DeliveryBatch(Sequence[Delivery]):
    """Validated deliveries as columns, in order: what :func:`parse_deliveries` returns. A sequence of
    :class:`Delivery` to whoever iterates it; the agent reads the columns (a batch of a thousand is then
    logged and counted by a few comprehensions instead of a thousand small objects)."""

    __slots__ = ("client_times", "pages", "robots", "sizes")

    def __init__(self, robots: list[str | None], pages: list[int], sizes: list[int | None],
                 client_times: list[float | None]) -> None:
        self.robots = robots
        self.pages = pages
        self.sizes = sizes
        self.client_times = client_times

    @classmethod
    def of(cls, items: Iterable[Delivery]) -> DeliveryBatch:
        """The columns of ``items`` (a batch already, or any sequence of deliveries)."""
        if isinstance(items, DeliveryBatch):
            return items
        rows = list(items)
        return cls([d.robot for d in rows], [d.pages for d in rows], [d.bytes for d in rows],
                   [d.client_time for d in rows])

    def __len__(self) -> int:
        return len(self.pages)

    @overload
    def __getitem__(self, index: int) -> Delivery: ...
    @overload
    def __getitem__(self, index: slice) -> DeliveryBatch: ...
    def __getitem__(self, index: int | slice) -> Delivery | DeliveryBatch:
        if isinstance(index, slice):
            return DeliveryBatch(self.robots[index], self.pages[index], self.sizes[index], self.client_times[index])
        return Delivery(self.robots[index], self.pages[index], self.sizes[index], self.client_times[index])

    def __iter__(self) -> Iterator[Delivery]:
        return map(Delivery, self.robots, self.pages, self.sizes, self.client_times)

    def __repr__(self) -> str:
        return f"DeliveryBatch({list(self)!r})"


class Completion(NamedTuple):
    pages: int
    service_s: float | None
    bytes: int | None


def _reject_constant(name: str) -> float:
    raise InputError("body", f"holds {name}, which is not a finite number", "send finite numbers only")


#: ``json.loads(..., parse_constant=_reject_constant)`` builds a decoder per call; this one is built once
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def parse_json(body: bytes) -> Any:
    """The JSON document of a request body; NaN and Infinity are refused."""
    if not body:
        raise InputError("body", "is empty", "send a JSON object")
    try:
        # what json.loads does with bytes: UTF-8, -16 or -32 as the first bytes say
        return _DECODER.decode(body.decode(json.detect_encoding(body), "surrogatepass"))
    except InputError:
        raise
    except RecursionError as exc:
        raise InputError("body", "nests too deeply", "send a flat JSON object") from exc
    except UnicodeDecodeError as exc:
        raise InputError("body", "is not UTF-8 text", "send JSON encoded as UTF-8") from exc
    except ValueError as exc:
        msg = getattr(exc, "msg", str(exc))
        line, col = getattr(exc, "lineno", None), getattr(exc, "colno", None)
        where = f" at line {line}, column {col}" if line is not None else ""
        raise InputError("body", f"is not valid JSON ({msg}{where})", "send one JSON object") from exc


def _object(where: str, obj: Any, allowed: Container[str], keys_doc: str) -> Mapping[str, Any]:
    if not isinstance(obj, dict):
        raise InputError(where or "body", f"must be a JSON object, got {type(obj).__name__}",
                         f"send {{{keys_doc}}}")
    for key in obj:
        if key not in allowed:
            name = key_name(key)
            raise InputError(f"{where}.{name}" if where else name, "is not a known field", f"fields: {keys_doc}")
    return obj


def _shown(value: Any) -> str:
    """A value for an error message, cut short (a 400-digit number is not worth echoing whole)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _int(where: str, value: Any, *, minimum: int, maximum: int, too_big: str = "split it into smaller requests"
         ) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(where, f"must be a whole number, got {_shown(value)}", f"send an integer >= {minimum}")
    if value < minimum:
        raise InputError(where, f"must be >= {minimum}, got {_shown(value)}", f"send an integer >= {minimum}")
    if value > maximum:
        raise InputError(where, f"must be <= {maximum}, got {_shown(value)}", too_big)
    return value


def _float(where: str, value: Any, *, minimum: float | None = 0.0, maximum: float = math.inf,
           too_big: str = "send a smaller number") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(where, f"must be a number, got {_shown(value)}", "send a finite number")
    try:
        v = float(value)
    except OverflowError as exc:  # an integer of hundreds of digits
        raise InputError(where, f"is too large ({len(str(abs(value)))} digits)", too_big) from exc
    if not math.isfinite(v):
        raise InputError(where, f"must be finite, got {v}", "send a finite number")
    if minimum is not None and v < minimum:
        raise InputError(where, f"must be >= {minimum:g}, got {v:g}", "send a non-negative number")
    if abs(v) > maximum:
        raise InputError(where, f"must be at most {maximum:g} in size, got {v:g}", too_big)
    return v


def robot_id(where: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InputError(where, f"must be a robot id (a string), got {value!r}", 'send e.g. "robot-1"')
    rid = str(value)
    if not rid or len(rid) > MAX_ID_LENGTH or not rid.isprintable():
        raise InputError(where, f"must be 1..{MAX_ID_LENGTH} printable characters, got {rid!r}",
                         'send e.g. "robot-1"')
    return rid


def _items(obj: Any, key: str, max_batch: int) -> tuple[list[Any], str]:
    """The item list of a batch body, or the body itself as a batch of one; and the path prefix."""
    if isinstance(obj, dict) and key in obj:
        if len(obj) != 1:
            extra = sorted(k for k in obj if k != key)[0]
            raise InputError(key_name(extra), f"is not a known field next to {key!r}",
                             f'send {{"{key}": [...]}} alone')
        items = obj[key]
        if not isinstance(items, list):
            raise InputError(key, f"must be a list, got {type(items).__name__}",
                             f'send {{"{key}": [{{...}}, ...]}}')
        if not items:
            raise InputError(key, "is empty", "send at least one item")
        if len(items) > max_batch:
            raise InputError(key, f"holds {len(items)} items, more than server.max_batch = {max_batch}",
                             "split the batch")
        return items, key
    return [obj], ""


_DELIVERY_KEYS = ("robot", "pages", "bytes", "client_time")
_DELIVERY_DOC = '"robot": id, "pages": n, "bytes": n, "client_time": seconds'


_DELIVERY_KEYSET = frozenset(_DELIVERY_KEYS)
_NONE = type(None)


def _column(items: list[Any], key: str, present: set[str], default: Any = None) -> list[Any]:
    """``item.get(key, default)`` of every item (all dicts), by one call of map."""
    if key not in present:
        return [default] * len(items)
    return list(map(dict.get, items, repeat(key), repeat(default)))


def _within(values: list[Any], kind: type, low: float, high: float) -> bool:
    """Every value None or of exactly type ``kind`` (no bool for int) and within [low, high] (no NaN)."""
    kinds = set(map(type, values))
    if kinds == {kind, _NONE}:
        values = [v for v in values if v is not None]
    elif kinds != {kind}:
        return kinds <= {_NONE}
    if kind is float and any(map(math.isnan, values)):  # min and max skip past a NaN
        return False
    return low <= min(values) and max(values) <= high


def _columns(items: list[Any], known: Container[str], allow_unregistered: bool) -> DeliveryBatch | None:
    """The batch when every item takes the fast path (dicts of known keys, registered or valid robot ids,
    whole numbers within bounds, a float client time), checked a column at a time; None when any item
    does not (the item-by-item checks then accept it or say which field is wrong)."""
    if set(map(type, items)) != {dict}:
        return None
    present = set(chain.from_iterable(items))
    if not present <= _DELIVERY_KEYSET:
        return None
    robots = _column(items, "robot", present)
    pages = _column(items, "pages", present, 1)
    sizes = _column(items, "bytes", present)
    client_times = _column(items, "client_time", present)
    if not set(map(type, robots)) <= {str, _NONE}:
        return None
    for rid in set(robots):
        if rid is not None and rid not in known and not (
                allow_unregistered and 0 < len(rid) <= MAX_ID_LENGTH and rid.isprintable()):
            return None
    if (set(map(type, pages)) != {int} or min(pages) < 1 or max(pages) > MAX_PAGES
            or not _within(sizes, int, 0, MAX_BYTES)
            or not _within(client_times, float, -MAX_CLIENT_TIME, MAX_CLIENT_TIME)):
        return None
    return DeliveryBatch(robots, pages, sizes, client_times)


def parse_deliveries(obj: Any, *, max_batch: int, registered: Container[str] | None = None,
                     allow_unregistered: bool = True) -> DeliveryBatch:
    """Deliveries of a ``POST /v1/deliveries`` body.

    ``registered`` holds the ids of registered robots; a robot outside it is refused unless
    ``allow_unregistered``. A body whose items all have the common shape (registered or valid robot ids,
    whole numbers, a finite client time) is checked a column at a time; any other goes item by item: the
    common shape takes a fast path there too, any other item the checks that name what is wrong.
    """
    items, key = _items(obj, "deliveries", max_batch)
    known = registered if registered is not None else ()
    if len(items) > 1:
        batch = _columns(items, known, allow_unregistered)
        if batch is not None:
            return batch
    robots: list[str | None] = []
    page_counts: list[int] = []
    sizes: list[int | None] = []
    client_times: list[float | None] = []
    keyset = _DELIVERY_KEYSET
    # unregistered ids already checked in this batch (a batch repeats a few robots' ids many times)
    checked: set[str] = set()
    for n, item in enumerate(items):
        # fast path: exactly what the checks below would accept, without building field paths
        if type(item) is dict and item.keys() <= keyset:
            rid = item.get("robot")
            pages = item.get("pages", 1)
            size = item.get("bytes")
            ct = item.get("client_time")
            if (type(rid) is str and allow_unregistered and rid not in checked and rid not in known
                    and 0 < len(rid) <= MAX_ID_LENGTH and rid.isprintable()):
                checked.add(rid)  # robot_id's checks, once per id
            if ((rid is None or (type(rid) is str and (rid in known or rid in checked)))
                    and type(pages) is int and 1 <= pages <= MAX_PAGES
                    and (size is None or (type(size) is int and 0 <= size <= MAX_BYTES))
                    and (ct is None or (type(ct) is float and -MAX_CLIENT_TIME <= ct <= MAX_CLIENT_TIME))):
                robots.append(rid)
                page_counts.append(pages)
                sizes.append(size)
                client_times.append(ct)
                continue
        where = f"{key}[{n}]" if key else ""
        d = _object(where, item, _DELIVERY_KEYS, _DELIVERY_DOC)
        p = f"{where}." if where else ""
        rid = d.get("robot")
        if rid is not None:
            rid = robot_id(f"{p}robot", rid)
            if not allow_unregistered and rid not in known:
                raise InputError(f"{p}robot", f"{rid!r} is not a registered robot",
                                 "register it first (POST /v1/robots) or set robots.allow_unregistered")
        pages = d.get("pages", 1)
        pages = _int(f"{p}pages", pages, minimum=1, maximum=MAX_PAGES)
        size = d.get("bytes")
        if size is not None:
            size = _int(f"{p}bytes", size, minimum=0, maximum=MAX_BYTES)
        ct = d.get("client_time")
        if ct is not None:
            ct = _float(f"{p}client_time", ct, minimum=None, maximum=MAX_CLIENT_TIME,
                        too_big="send the client's clock in seconds (Unix time, or since any recent epoch)")
        robots.append(rid)
        page_counts.append(pages)
        sizes.append(size)
        client_times.append(ct)
    return DeliveryBatch(robots, page_counts, sizes, client_times)


@functools.cache
def delivery_decoder() -> Callable[[bytes], Any]:
    """The msgspec decoder of a ``POST /v1/deliveries`` body of the common shape (module docstring):
    decoded and typed in one C call. Every field's type and bound is :func:`parse_deliveries`'s, so it
    accepts nothing that that refuses and gives the same values (an integer client time as a float, the
    last of a repeated key); robot ids are checked after it, per distinct id. Built once, at the first call
    (msgspec is imported there; :func:`agent.app.create_app` makes that call, so that no request waits for
    it: tens of milliseconds)."""
    import msgspec
    from msgspec import UNSET, Meta, UnsetType

    pages_t = Annotated[int, Meta(ge=1, le=MAX_PAGES)]
    bytes_t = Annotated[int, Meta(ge=0, le=MAX_BYTES)] | None
    time_t = Annotated[float, Meta(ge=-MAX_CLIENT_TIME, le=MAX_CLIENT_TIME)] | None
    item = msgspec.defstruct("DeliveryItem", [("robot", str | None, None), ("pages", pages_t, 1),
                                              ("bytes", bytes_t, None), ("client_time", time_t, None)],
                             forbid_unknown_fields=True, gc=False)
    # a batch, or the fields of one delivery (UNSET: absent, so that a batch with one of them beside it can
    # be told from a batch alone)
    body = msgspec.defstruct("DeliveryBody", [("deliveries", list[item] | UnsetType, UNSET),  # type: ignore[valid-type]
                                              ("robot", str | UnsetType | None, UNSET),
                                              ("pages", pages_t | UnsetType, UNSET),
                                              ("bytes", bytes_t | UnsetType, UNSET),
                                              ("client_time", time_t | UnsetType, UNSET)],
                             forbid_unknown_fields=True, gc=False)

    decode = msgspec.json.Decoder(body).decode
    fields = attrgetter("robot", "pages", "bytes", "client_time")
    unset = UNSET
    refused = (msgspec.DecodeError, msgspec.ValidationError)

    def columns(body: bytes) -> Any:
        """The columns (robots, pages, sizes, client times) of ``body``, or None when msgspec refuses it."""
        try:
            doc: Any = decode(body)
        except refused:
            return None
        items = doc.deliveries
        if items is unset:  # one delivery (read field by field: the common request)
            robot, pages, size, ct = doc.robot, doc.pages, doc.bytes, doc.client_time
            return ([None if robot is unset else robot], [1 if pages is unset else pages],
                    [None if size is unset else size], [None if ct is unset else ct])
        if fields(doc) != (unset,) * 4:  # a batch and a delivery's field beside it: the long way names it
            return None
        # comprehensions: an attribute of a msgspec struct is read faster there than by map(attrgetter)
        return ([d.robot for d in items], [d.pages for d in items], [d.bytes for d in items],
                [d.client_time for d in items])

    return columns


def parse_delivery_body(body: bytes, *, max_batch: int, registered: Container[str] | None = None,
                        allow_unregistered: bool = True) -> DeliveryBatch:
    """:func:`parse_deliveries` of :func:`parse_json` of ``body``, the common shape decoded and checked in one
    C call (:func:`delivery_decoder`): a whole batch of a thousand costs less than ``json.loads`` of it.
    Anything that call refuses (bad JSON, an unknown field, a wrong type or bound, a batch too long or
    empty, another encoding than UTF-8) goes the long way, which accepts it or names the field."""
    cols = delivery_decoder()(body)
    if cols is not None and 0 < len(cols[1]) <= max_batch:
        robots = cols[0]
        known = registered if registered is not None else ()
        ids = set(robots) if len(robots) > 1 else robots  # each distinct id checked once
        if all(rid is None or rid in known
               or (allow_unregistered and 0 < len(rid) <= MAX_ID_LENGTH and rid.isprintable()) for rid in ids):
            return DeliveryBatch(*cols)
    return parse_deliveries(parse_json(body), max_batch=max_batch, registered=registered,
                            allow_unregistered=allow_unregistered)


_COMPLETION_KEYS = ("pages", "service_s", "bytes")
_COMPLETION_DOC = '"pages": n, "service_s": seconds, "bytes": n'


def parse_completions(obj: Any, *, max_batch: int) -> list[Completion]:
    items, key = _items(obj, "completions", max_batch)
    out = []
    for n, item in enumerate(items):
        where = f"{key}[{n}]" if key else ""
        d = _object(where, item, _COMPLETION_KEYS, _COMPLETION_DOC)
        p = f"{where}." if where else ""
        pages = _int(f"{p}pages", d.get("pages", 1), minimum=1, maximum=MAX_PAGES)
        svc = d.get("service_s")
        if svc is not None:
            svc = _float(f"{p}service_s", svc, maximum=MAX_SERVICE_S_PER_PAGE * pages,
                         too_big=f"service_s is the total indexing time of the item's pages in seconds; more than "
                                 f"{MAX_SERVICE_S_PER_PAGE:g} s per page is not a measurement")
        size = d.get("bytes")
        if size is not None:
            size = _int(f"{p}bytes", size, minimum=0, maximum=MAX_BYTES)
        out.append(Completion(pages, svc, size))
    return out


def parse_obsolete(obj: Any) -> int:
    d = _object("", obj, ("pages",), '"pages": n')
    return _int("pages", d.get("pages", 1), minimum=1, maximum=MAX_PAGES)


def parse_given_up(obj: Any) -> int:
    d = _object("", obj, ("pages",), '"pages": n')
    return _int("pages", d.get("pages", 1), minimum=1, maximum=MAX_PAGES)


def parse_queue(obj: Any, *, capacity: int) -> int:
    d = _object("", obj, ("length",), '"length": n')
    if "length" not in d:
        raise InputError("length", "is missing",
                         f"send the indexer's count of pages in the system, 0..{capacity}")
    length = _int("length", d["length"], minimum=0, maximum=capacity)
    return length


def parse_registration(obj: Any, *, max_rank: int) -> tuple[str | None, int | None, str | None]:
    """The robot's id, rank and default state of a ``POST /v1/robots`` body (see :func:`parse_process`)."""
    d = _object("", obj if obj is not None else {}, ("robot", "rank", "default_state", "process"),
                '"robot": id, "rank": n, "default_state": "active"|"parked", "process": name')
    rid = robot_id("robot", d["robot"]) if d.get("robot") is not None else None
    rank = d.get("rank")
    if rank is not None:
        rank = _int("rank", rank, minimum=1, maximum=max_rank,
                    too_big=f"the fleet has {max_rank} ranks: raise robots.count (or robots.group_size), or "
                            "register without a rank")
    state = d.get("default_state")
    if state is not None and state not in ("active", "parked"):
        raise InputError("default_state", f"is {state!r}", 'send "active" or "parked"')
    return rid, rank, state


def parse_process(obj: Any) -> str | None:
    """The ``process`` of a ``POST /v1/robots`` body: the crawler process the robot belongs to (an id as
    robots' ids are), or None. Call after :func:`parse_registration`, which checks the body's keys."""
    if not isinstance(obj, Mapping) or obj.get("process") is None:
        return None
    value = obj["process"]
    if not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH or not value.isprintable():
        raise InputError("process", f"must be 1..{MAX_ID_LENGTH} printable characters, got {value!r}",
                         'send the crawler process\'s name, e.g. "host-1234"')
    return value


def query_int(where: str, text: str | None, *, default: int, minimum: int) -> int:
    if text is None or text == "":
        return default
    try:
        v = int(text)
    except ValueError as exc:
        raise InputError(where, f"must be a whole number, got {text!r}", f"send ?{where}=N") from exc
    if v < minimum:
        raise InputError(where, f"must be >= {minimum}, got {v}", f"send ?{where}=N with N >= {minimum}")
    return v


def query_float(where: str, text: str | None, *, default: float) -> float:
    if text is None or text == "":
        return default
    try:
        v = float(text)
    except ValueError as exc:
        raise InputError(where, f"must be a number, got {text!r}", f"send ?{where}=seconds") from exc
    if not math.isfinite(v) or v < 0:
        raise InputError(where, f"must be a finite number >= 0, got {text!r}", f"send ?{where}=seconds")
    return v


class ControlRequest(NamedTuple):
    action: str
    robots: int | None
    duration_s: float | None
    reason: str


def parse_control(obj: Any, *, max_robots: int) -> ControlRequest:
    """``POST /v1/override``: pause, pin a fleet size (optionally for a duration) or resume."""
    keys = '"action": "pause"|"pin"|"resume", "robots": n, "duration_s": s, "reason": text'
    d = _object("", obj, ("action", "robots", "duration_s", "reason"), keys)
    action = d.get("action")
    if action not in ("pause", "pin", "resume"):
        raise InputError("action", f"is {action!r}", "send pause, pin (with robots) or resume")
    robots = d.get("robots")
    if action == "pin":
        if robots is None:
            raise InputError("robots", "is missing", f"pin a number of active virtual robots, 0..{max_robots}")
        robots = _int("robots", robots, minimum=0, maximum=max_robots,
                      too_big=f"the fleet has {max_robots} virtual robots (robots.count)")
    elif robots is not None:
        raise InputError("robots", f"does not apply to {action}", "send robots only with pin")
    duration = d.get("duration_s")
    if duration is not None:
        if action == "resume":
            raise InputError("duration_s", "does not apply to resume", "send duration_s with pause or pin")
        duration = _float("duration_s", duration, maximum=MAX_CONTROL_S,
                          too_big="an override longer than ten years is not a measurement: leave it out to hold until "
                                  "resume")
        if duration <= 0:
            raise InputError("duration_s", f"must be > 0, got {duration:g}", "leave it out to hold until resume")
    reason = d.get("reason", "")
    if not isinstance(reason, str) or len(reason) > 500:
        raise InputError("reason", "must be text of at most 500 characters", "say why, e.g. incident 1234")
    return ControlRequest(action, robots, duration, reason)


def parse_actuation(obj: Any, *, key: str = "actuation") -> str:
    """``{"actuation": "command" | "advise"}`` -> the actuation (``key="mode"``: the body of the deprecated
    ``POST /v1/mode``)."""
    body = _object("", obj, (key,), f'"{key}": "advise"')
    actuation = body.get(key)
    if actuation not in ("command", "advise"):
        raise InputError(key, f"is {actuation!r}", f'send {{"{key}": "command"}} or {{"{key}": "advise"}}')
    return str(actuation)
