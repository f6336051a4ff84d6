"""The model file format (docs/ARCHITECTURE.md, "Model file"), as plain dicts (parsing YAML text is the caller's job).

``model_from_dict`` turns the ``model:`` mapping into a :class:`QueueModel`, ``costs_from_dict`` the
``costs:`` mapping into :class:`Costs`; ``model_to_dict`` goes back. Unknown keys are errors: a typo
must never fall back silently to a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from robotctl._errors import InputError

from ._arrivals import ModeArrivals
from ._bmap import BMAP
from ._model import Admission, Costs, QueueModel
from ._ph import PH
from ._validate import as_matrix


def _mapping(field: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InputError(field, f"must be a mapping, got {type(value).__name__}", "write it as key: value lines")
    return value


def _reject_unknown(field: str, d: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(str(k) for k in d if k not in allowed)
    if unknown:
        raise InputError(f"{field}.{unknown[0]}", "is not a known key",
                         f"allowed keys here: {', '.join(sorted(allowed))}")


def _require(field: str, d: Mapping[str, Any], key: str, hint: str) -> Any:
    if key not in d:
        raise InputError(f"{field}.{key}", "is missing", hint)
    return d[key]


def ph_from_dict(field: str, value: Any, *, vector: str = "beta", matrix: str = "S") -> PH:
    """``{rate: x}`` or ``{<vector>: [...], <matrix>: [[...]]}``."""
    d = _mapping(field, value)
    if "rate" in d:
        _reject_unknown(field, d, {"rate"})
        return PH.exponential(_number(f"{field}.rate", d["rate"], "rate: 1.5"), field=field)
    if "mean" in d:
        _reject_unknown(field, d, {"mean"})
        mean = _number(f"{field}.mean", d["mean"], "mean: 5")
        if not mean > 0:
            raise InputError(f"{field}.mean", f"must be a positive number of seconds, got {mean!r}", "e.g. mean: 5")
        return PH.exponential(1.0 / mean, field=field)
    _reject_unknown(field, d, {vector, matrix})
    v = _require(field, d, vector, f"give {vector}: [...] and {matrix}: [[...]], or rate: x for an exponential law")
    M = _require(field, d, matrix, f"give {matrix}: [[...]] next to {vector}")
    try:
        return PH(np.asarray(v, dtype=float), np.asarray(M, dtype=float), field)
    except InputError as exc:
        raise InputError(exc.field.replace(f"{field}.beta", f"{field}.{vector}").replace(
            f"{field}.S", f"{field}.{matrix}"), exc.problem, exc.hint) from exc
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(field, f"is not numeric ({exc})", "use lists of numbers") from exc


def _bmap(field: str, value: Any) -> BMAP:
    if not isinstance(value, list | tuple):
        raise InputError(field, f"must be a list of matrices [D_0, D_1, ...], got {type(value).__name__}",
                         "write [[[...], ...], [[...], ...]]")
    try:
        mats = tuple(np.asarray(m, dtype=float) for m in value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(field, f"is not a list of numeric matrices ({exc})", "check the brackets") from exc
    return BMAP(mats, field)


#: Most phases of the directing process that ``rule: independent`` may build (the Kronecker product of the
#: robots' orders): a level of the solve holds this many states times the service phases, so a larger one
#: cannot be solved in memory anyway.
MAX_INDEPENDENT_PHASES = 1024


def _list(field: str, value: Any, what: str, example: str) -> list[Any]:
    if not isinstance(value, list | tuple) or not value:
        raise InputError(field, f"must be a non-empty list of {what}, got {_kind(value)}", f"e.g. {example}")
    return list(value)


def _kind(value: Any) -> str:
    """A value's type for an error message: a list, a number 5, the text 'x' (short values shown)."""
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int | float):
        return f"the number {value!r}" if len(repr(value)) <= 40 else "a number"
    return f"a {type(value).__name__}"


def _number(field: str, value: Any, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(field, f"must be a number, got {_kind(value)}", f"e.g. {example}")
    try:
        x = float(value)
    except OverflowError as exc:
        raise InputError(field, "is too large", f"e.g. {example}") from exc
    if not np.isfinite(x):
        raise InputError(field, f"must be finite, got {x}", f"e.g. {example}")
    return x


def _whole(field: str, value: Any, minimum: int, example: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(field, f"must be a whole number >= {minimum}, got {_kind(value)}", f"e.g. {example}")
    if value < minimum:
        raise InputError(field, f"must be >= {minimum}, got {value}", f"e.g. {example}")
    return value


def _matrix_list(field: str, value: Any, shape: tuple[int, int]) -> list[np.ndarray]:
    """A list of numeric matrices, each of ``shape``."""
    out = []
    for k, m in enumerate(_list(field, value, "matrices", "[[[0.5]], [[0.1]]]")):
        A = as_matrix(f"{field}[{k}]", m)
        if A.shape != shape:
            raise InputError(f"{field}[{k}]", f"has shape {A.shape}, but D0 has {shape}",
                             "every matrix of the marked process has the order of D0")
        out.append(A)
    return out


def _mode_key(field: str, key: Any) -> int:
    try:
        mode = int(key)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(f"{field}.{key}", "is not a number of robots", "use keys 1, 2, 3, ...") from exc
    if str(mode) != str(key).strip() or mode < 0:
        raise InputError(f"{field}.{key}", "is not a whole number of robots >= 0", "use keys 1, 2, 3, ...")
    return mode


def arrivals_from_dict(field: str, value: Any) -> ModeArrivals:
    d = _mapping(field, value)
    if "per_mode" in d:
        _reject_unknown(field, d, {"per_mode"})
        pm = _mapping(f"{field}.per_mode", d["per_mode"])
        return ModeArrivals.per_mode(
            {_mode_key(f"{field}.per_mode", k): _bmap(f"{field}.per_mode.{k}", v) for k, v in pm.items()})
    rule = d.get("rule")
    if rule == "linear":
        _reject_unknown(field, d, {"rule", "base", "modes", "base_mode"})
        base = _bmap(f"{field}.base", _require(field, d, "base", "give base: [D_0, D_1, ...]"))
        modes = _list(f"{field}.modes", _require(field, d, "modes", "give modes: [1, 2, 3, 4]"), "robot counts",
                      "modes: [1, 2, 3, 4]")
        base_mode = _whole(f"{field}.base_mode", d.get("base_mode", 1), 1, "base_mode: 1")
        return ModeArrivals.linear(base, [_mode_key(f"{field}.modes", m) for m in modes], base_mode=base_mode)
    if rule == "thinning":
        _reject_unknown(field, d, {"rule", "base", "q"})
        base = _bmap(f"{field}.base", _require(field, d, "base", "give base: [D_0, D_1, ...]"))
        q = _list(f"{field}.q", _require(field, d, "q", "give q: [q_1, ..., 1]"), "probabilities", "q: [0.5, 1]")
        return ModeArrivals.thinning(base, [_number(f"{field}.q[{j}]", x, "q: [0.5, 1]") for j, x in enumerate(q)])
    if rule == "independent":
        _reject_unknown(field, d, {"rule", "robots"})
        robots = _list(f"{field}.robots", _require(field, d, "robots", "give robots: [BMAP of robot 1, ...]"),
                       "BMAPs, one per robot", "robots: [[D_0, D_1], [D_0, D_1]]")
        bmaps = [_bmap(f"{field}.robots[{j}]", b) for j, b in enumerate(robots)]
        phases = 1
        for b in bmaps:
            phases *= b.order
            if phases > MAX_INDEPENDENT_PHASES:
                raise InputError(f"{field}.robots", f"{len(bmaps)} robots of orders "
                                 f"{', '.join(str(b.order) for b in bmaps)} make a directing process of more than "
                                 f"{MAX_INDEPENDENT_PHASES} phases (the product of the orders)",
                                 "use fewer or simpler robots, or rule: linear")
        return ModeArrivals.independent(bmaps)
    if rule == "marked":
        _reject_unknown(field, d, {"rule", "D0", "robots"})
        D0 = as_matrix(f"{field}.D0", _require(field, d, "D0", "give D0: [[...]]"))
        robots = _list(f"{field}.robots", _require(field, d, "robots",
                                                   "give robots: [[D_1 of robot 1, D_2 of robot 1], ...]"),
                       "robots, each a list of matrices D_1, D_2, ...", "robots: [[[[0.5]]], [[[0.2]]]]")
        return ModeArrivals.marked(D0, [_matrix_list(f"{field}.robots[{j}]", r, D0.shape)
                                        for j, r in enumerate(robots)])
    raise InputError(f"{field}.rule" if "rule" in d else f"{field}.per_mode",
                     "is missing or unknown" if "rule" in d else "is missing",
                     "give per_mode: {1: [D_0, D_1, ...], ...}, or base: [...] with rule: linear|thinning, "
                     "or rule: independent|marked")


_MODEL_KEYS = {"capacity", "admission", "arrivals", "service", "obsolescence"}


def model_from_dict(value: Any, *, field: str = "model") -> QueueModel:
    """Build a :class:`QueueModel` from the ``model:`` mapping of a model file."""
    d = _mapping(field, value)
    _reject_unknown(field, d, _MODEL_KEYS)
    capacity = _require(field, d, "capacity", "give capacity: K (pages in the system, the one in service included)")
    capacity = _whole(f"{field}.capacity", capacity, 1, "capacity: 5")
    adm_text = d.get("admission", "partial")
    try:
        admission = Admission(adm_text)
    except ValueError as exc:
        raise InputError(f"{field}.admission", f"is {adm_text!r}", "use partial or reject-batch") from exc
    arrivals = arrivals_from_dict(f"{field}.arrivals", _require(field, d, "arrivals", "give arrivals: per_mode: ..."))
    service = ph_from_dict(f"{field}.service", _require(field, d, "service", "give service: {rate: x} or {beta, S}"))
    obs_raw = d.get("obsolescence")
    deadline = None
    obsolescence: PH | None
    if isinstance(obs_raw, Mapping) and "deadline" in obs_raw:
        from ._deadline import DEFAULT_PHASES, deadline_law

        _reject_unknown(f"{field}.obsolescence", obs_raw, {"deadline", "phases"})
        deadline = _number(f"{field}.obsolescence.deadline", obs_raw["deadline"], "deadline: 10")
        phases = obs_raw.get("phases", DEFAULT_PHASES)
        obsolescence = deadline_law(deadline, phases, field=f"{field}.obsolescence")
    else:
        obsolescence = None if obs_raw is None else ph_from_dict(f"{field}.obsolescence", obs_raw,
                                                                 vector="gamma", matrix="Gamma")
    return QueueModel(capacity, arrivals, service, obsolescence, admission, deadline)


def costs_from_dict(value: Any, *, field: str = "costs") -> Costs:
    d = _mapping(field, value)
    allowed = {"loss", "obsolescence", "response", "robot", "starvation", "command"}
    _reject_unknown(field, d, allowed)
    return Costs(**{k: d[k] for k in allowed if k in d})


def model_to_dict(model: QueueModel) -> dict[str, Any]:
    """The ``model:`` mapping of a model file (round-trips through :func:`model_from_dict`)."""
    out: dict[str, Any] = {
        "capacity": model.capacity,
        "admission": model.admission.value,
        "arrivals": model.arrivals.to_dict(),
        "service": model.service.to_dict(),
    }
    if model.deadline is not None and model.obsolescence is not None:
        out["obsolescence"] = {"deadline": float(model.deadline), "phases": model.obsolescence.order}
    elif model.obsolescence is not None:
        ob = model.obsolescence
        out["obsolescence"] = {"rate": float(-ob.S[0, 0])} if ob.order == 1 else {
            "gamma": ob.beta.tolist(), "Gamma": ob.S.tolist()}
    return out
